//! k-means in the harness: the JSON case of `adgauge eval kmeans`
//! (`{"points": [[..d]..n], "centres": [[..d]..k]}`), the JSON it prints, and the case as a flat
//! function for validation (x = centres, row-major; y = `[cost]`).

use serde_json::Value;

use adgauge_backends::{Cpu, DType, Device, Forward, Ops, TensorMeta};
use adgauge_datasets::kmeans::KmeansData;
use adgauge_workloads::kmeans;

use crate::case_json::{format_number, format_rows, parse_number};
use crate::exit::bad_input;
use crate::validation::FlatFn;

/// A matrix field: an array of rows of equal length `d` (when given) of finite numbers.
fn matrix(
    obj: &serde_json::Map<String, Value>,
    source: &str,
    name: &str,
    d: Option<usize>,
) -> anyhow::Result<(usize, usize, Vec<f64>)> {
    let err = |field: String, msg: String| bad_input(format!("{source}: field {field}: {msg}"));
    let rows = match obj.get(name) {
        None => return Err(err(name.into(), "missing".into())),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(err(name.into(), "expected an array of rows (arrays of numbers)".into())),
    };
    if rows.is_empty() {
        return Err(err(name.into(), "has no rows (at least one is needed)".into()));
    }
    let mut width = d;
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Value::Array(row) = row else {
            return Err(err(format!("{name}[{i}]"), "expected an array of numbers".into()));
        };
        let w = *width.get_or_insert(row.len());
        if row.len() != w {
            let what = if d.is_some() { "the points have".to_string() } else { format!("{name}[0] has") };
            return Err(err(format!("{name}[{i}]"), format!("has {} elements but {what} {w}", row.len())));
        }
        for (j, v) in row.iter().enumerate() {
            let x = parse_number(v).map_err(|m| err(format!("{name}[{i}][{j}]"), m))?;
            if !x.is_finite() {
                return Err(err(format!("{name}[{i}][{j}]"), format!("must be finite, got {x}")));
            }
            out.push(x);
        }
    }
    let w = width.unwrap_or(0);
    if w == 0 {
        return Err(err(format!("{name}[0]"), "rows are empty (the dimension must be at least 1)".into()));
    }
    Ok((rows.len(), w, out))
}

/// Parses `{"points": [[..]..], "centres": [[..]..]}`; `source` names the file in messages.
pub fn parse_kmeans_case(text: &str, source: &str) -> anyhow::Result<KmeansData> {
    let value: Value = serde_json::from_str(text).map_err(|e| bad_input(format!("{source}: not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(bad_input(format!("{source}: expected a JSON object with fields points and centres")));
    };
    if let Some(extra) = obj.keys().find(|k| k.as_str() != "points" && k.as_str() != "centres") {
        return Err(bad_input(format!("{source}: unknown field '{extra}' (expected points, centres)")));
    }
    let (n, d, points) = matrix(&obj, source, "points", None)?;
    let (k, _, centres) = matrix(&obj, source, "centres", Some(d))?;
    Ok(KmeansData { n, k, d, points, centres })
}

/// `{"cost": x, "gradient": [[..]..], "hessian_diag": [[..]..], "dir": [[..]..]}`.
pub fn format_kmeans(out: &kmeans::KmeansOut, d: usize, dtype: DType) -> String {
    format!(
        "{{\"cost\": {}, \"gradient\": {}, \"hessian_diag\": {}, \"dir\": {}}}",
        format_number(out.cost, dtype),
        format_rows(&out.gradient, out.gradient.len() / d, dtype),
        format_rows(&out.hessian_diag, out.hessian_diag.len() / d, dtype),
        format_rows(&out.dir, out.dir.len() / d, dtype)
    )
}

/// A k-means case as a flat function of the centres, at a point rounded to the dtype: the
/// derivatives come from `device` (the device under test) in the dtype, the f64 values for
/// finite differences from the CPU.
pub struct KmeansFlat<D: Device> {
    pub cpu: Cpu,
    pub device: D,
    pub dtype: DType,
    pub data: KmeansData,
}

impl<D: Device> KmeansFlat<D> {
    pub fn new(cpu: Cpu, device: D, dtype: DType, data: &KmeansData) -> KmeansFlat<D> {
        let round = |xs: &[f64]| xs.iter().map(|&x| dtype.round(x)).collect();
        let data = KmeansData { points: round(&data.points), centres: round(&data.centres), ..data.clone() };
        KmeansFlat { cpu, device, dtype, data }
    }

    /// The manual gradient, J^T w for `w = [1]`.
    pub fn manual_gradient(&self) -> Vec<f64> {
        kmeans::manual_in(&self.data, self.dtype).gradient
    }

    /// The AD gradient, Hessian diagonal and the manual ones.
    pub fn hessians(&self) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let x = kmeans::upload(&self.device, &self.data, self.dtype)?;
        let (_, _, h) = kmeans::hessian_diag(&self.device, &x)?;
        Ok((self.device.to_vec(&h)?, kmeans::manual_in(&self.data, self.dtype).hessian_diag))
    }
}

impl<D: Device> FlatFn for KmeansFlat<D> {
    fn n_in(&self) -> usize {
        self.data.centres.len()
    }
    fn n_out(&self) -> usize {
        1
    }
    fn x0(&self) -> &[f64] {
        &self.data.centres
    }
    fn eval_f64(&self, x: &[f64]) -> anyhow::Result<Vec<f64>> {
        let data = KmeansData { centres: x.to_vec(), ..self.data.clone() };
        let t = kmeans::upload(&self.cpu, &data, DType::F64)?;
        Ok(self.cpu.to_vec(&kmeans::cost(&self.cpu, &t.points, &t.centres)?)?)
    }
    fn vjp(&self, w: &[f64]) -> anyhow::Result<Vec<f64>> {
        let x = kmeans::upload(&self.device, &self.data, self.dtype)?;
        let (_, g) = kmeans::gradient(&self.device, &x)?;
        Ok(self.device.to_vec(&g)?.into_iter().map(|v| v * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> anyhow::Result<Vec<f64>> {
        let x = kmeans::upload(&self.device, &self.data, self.dtype)?;
        let f = Forward::new(self.device.clone());
        let c = f.dual(x.centres.clone(), self.device.tensor(v, x.centres.shape(), self.dtype)?)?;
        let y = kmeans::cost(&f, &f.lift(x.points.clone()), &c)?;
        Ok(self.device.to_vec(&f.tangent(&y)?)?)
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        // A point whose two nearest centres are within the step of each other is on a kink.
        let (k, d) = (self.data.k, self.data.d);
        let c = &self.data.centres;
        let radius = 2.0 * h * (d as f64).sqrt();
        for (i, p) in self.data.points.chunks(d).enumerate() {
            let mut dist: Vec<f64> =
                (0..k).map(|j| c[j * d..(j + 1) * d].iter().zip(p).map(|(a, b)| (a - b) * (a - b)).sum()).collect();
            dist.sort_by(f64::total_cmp);
            if k > 1 {
                // |dist(c1) - dist(c2)| can change by about 2 |p - c| * step per centre.
                let slack = 2.0 * radius * (dist[0].sqrt() + dist[1].sqrt()) + 2.0 * radius * radius;
                if dist[1] - dist[0] <= slack {
                    return Some(format!("point {i}: its two nearest centres are within the step"));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{Code, code_of};

    fn msg(text: &str) -> String {
        let e = parse_kmeans_case(text, "case.json").unwrap_err();
        assert_eq!(code_of(&e), Code::BadInput);
        e.to_string()
    }

    #[test]
    fn malformed_cases_name_their_field() {
        assert!(msg("[]").contains("expected a JSON object"));
        assert!(msg(r#"{"centres": [[1]]}"#).contains("field points: missing"));
        assert!(msg(r#"{"points": [[1]]}"#).contains("field centres: missing"));
        assert!(msg(r#"{"points": [], "centres": [[1]]}"#).contains("field points: has no rows"));
        assert!(msg(r#"{"points": [[1, 2], [3]], "centres": [[1, 2]]}"#).contains("field points[1]: has 1 elements"));
        assert!(msg(r#"{"points": [[1, 2]], "centres": [[1]]}"#).contains("field centres[0]: has 1 elements"));
        assert!(msg(r#"{"points": [[1, "x"]], "centres": [[1, 2]]}"#).contains("field points[0][1]"));
        assert!(msg(r#"{"points": [[1, "nan"]], "centres": [[1, 2]]}"#).contains("must be finite"));
        assert!(msg(r#"{"points": [[]], "centres": [[]]}"#).contains("dimension must be at least 1"));
        assert!(msg(r#"{"points": [1], "centres": [[1]]}"#).contains("field points[0]"));
        assert!(msg(r#"{"points": [[1]], "centres": [[1]], "k": 2}"#).contains("unknown field 'k'"));
        let ok = parse_kmeans_case(r#"{"points": [[1, 2], [3, 4], [5, 6]], "centres": [[0, 0]]}"#, "c").unwrap();
        assert_eq!((ok.n, ok.k, ok.d), (3, 1, 2));
    }

    #[test]
    fn checks_pass_for_a_generated_case() {
        use crate::validation::*;
        let cpu = Cpu::new(Some(2)).unwrap();
        for dt in DType::ALL {
            let f = KmeansFlat::new(cpu.clone(), cpu.clone(), dt, &adgauge_datasets::kmeans::generate(500, 5, 4, 9));
            assert!(dot_product_test(&f, dt, 1).unwrap().passed(), "{dt}");
            let d = finite_difference(&f, dt, 1).unwrap();
            assert!(d.is_ok(), "{dt}: {:?}", d.as_ref().err());
            assert!(fd_jvp_test(&f, dt, &d).unwrap().passed(), "{dt}");
            assert!(fd_vjp_test(&f, dt, &d).unwrap().passed(), "{dt}");
            let o = compare(CheckKind::OracleVjp, dt, &f.vjp(&[1.0]).unwrap(), &f.manual_gradient());
            assert!(o.passed(), "{dt}: {o:?}");
            let (h, hm) = f.hessians().unwrap();
            assert_eq!(h, hm);
        }
    }
}
