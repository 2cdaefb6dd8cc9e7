//! Linear least squares, as GradBench's `llsq` eval defines it (after cmpad's `llsq_obj`): for m
//! coefficients x and n sample points
//!
//! ```text
//! t_i = -1 + 2 i / (n - 1)          (i = 0 .. n-1, so n >= 2)
//! s_i = sign(t_i)                   (0 at t_i = 0)
//! y(x) = 1/2 sum_i (s_i - sum_j x_j t_i^j)^2
//! ```
//!
//! a polynomial fit of a step. Written against the op API as `r = s - T x` with the constant
//! Vandermonde matrix `T_ij = t_i^j` (n x m, built on the host in f64), `y = sum(r^2) / 2`; its
//! gradient `-T^T r` is the hand-derived reference ([`manual`]). GradBench's inputs are
//! `{"x": [m numbers], "n": N}` (x uniform in [0, 1) in its eval); `adgauge eval llsq` reads the
//! same object and prints `{"objective": y}`, with `"gradient"` in vjp (reverse mode) and jvp
//! (one forward sweep per coefficient) modes.

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, DType, Device, Elem, Forward, Ops, Result, Reverse, TensorMeta, UnaryOp, with_device,
};
use rand::RngExt;
use serde_json::Value as Json;

use crate::json::{format_array, format_number, kind, objective_json, parse_number};
use crate::objective::{ObjectiveProblem, RemoteModule, ScalarObjective};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalRequest, Mode, ParamSpec, Params, Problem, WResult, Workload, WorkloadError, rounded, sizes,
};

/// Most entries of the Vandermonde matrix (n m) a case may need.
const MAX_ENTRIES: usize = 1 << 28;

/// Validation size: small enough for the full set of checks on every coefficient.
const CHECK: [(&str, u64); 2] = [("n", 100), ("m", 8)];

/// One llsq problem: the coefficients and the number of sample points.
#[derive(Clone, Debug, PartialEq)]
pub struct LlsqInput {
    pub x: Vec<f64>,
    pub n: usize,
}

impl LlsqInput {
    /// GradBench's generator shape: x uniform in [0, 1), from the seeded generator.
    pub fn generate(n: usize, m: usize, seed: u64) -> LlsqInput {
        let mut rng = adgauge_datasets::rng(seed);
        LlsqInput { x: (0..m).map(|_| rng.random::<f64>()).collect(), n }
    }

    fn sample(&self, i: usize) -> f64 {
        -1.0 + i as f64 * 2.0 / (self.n as f64 - 1.0)
    }

    /// The targets s (n) and the Vandermonde matrix T (n x m, row-major), in f64.
    fn constants(&self) -> (Vec<f64>, Vec<f64>) {
        let m = self.x.len();
        let mut targets = Vec::with_capacity(self.n);
        let mut powers = Vec::with_capacity(self.n * m);
        for i in 0..self.n {
            let t = self.sample(i);
            // sign(0) = 0, as GradBench's s(t) = (0 < t) - (t < 0).
            targets.push(if t > 0.0 {
                1.0
            } else if t < 0.0 {
                -1.0
            } else {
                0.0
            });
            let mut power = 1.0;
            for _ in 0..m {
                powers.push(power);
                power *= t;
            }
        }
        (targets, powers)
    }
}

/// An llsq problem on an engine's device.
pub struct LlsqInputs<O: Ops> {
    /// m x 1.
    pub x: O::T,
    /// n x 1, constant.
    pub targets: O::T,
    /// n x m, constant.
    pub powers: O::T,
}

/// Puts a problem on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, input: &LlsqInput, dtype: DType) -> Result<LlsqInputs<O>> {
    let (n, m) = (input.n, input.x.len());
    let (targets, powers) = input.constants();
    Ok(LlsqInputs {
        x: o.tensor(&input.x, &[m, 1], dtype)?,
        targets: o.tensor(&targets, &[n, 1], dtype)?,
        powers: o.tensor(&powers, &[n, m], dtype)?,
    })
}

/// y = sum((s - T x)^2) / 2, shape `[1]`.
pub fn objective_on<O: Ops>(o: &O, x: &O::T, targets: &O::T, powers: &O::T) -> Result<O::T> {
    let r = o.binary(BinaryOp::Sub, targets, &o.matmul(powers, false, x, false)?)?;
    o.scale(&o.sum(&o.unary(UnaryOp::Square, &r)?)?, 0.5)
}

pub fn objective<O: Ops>(o: &O, x: &LlsqInputs<O>) -> Result<O::T> {
    objective_on(o, &x.x, &x.targets, &x.powers)
}

/// Objective and gradient by reverse mode.
pub fn gradient<B: Ops>(b: &B, x: &LlsqInputs<B>) -> Result<(f64, Vec<f64>)> {
    let r = Reverse::new(b.clone());
    let coefficients = r.var(x.x.clone());
    let y = objective_on(&r, &coefficients, &r.lift(x.targets.clone()), &r.lift(x.powers.clone()))?;
    let g = r.backward(&y, b.full(&[1], 1.0, x.x.dtype())?)?;
    Ok((b.to_vec(y.value())?[0], b.to_vec(&g.get_or_zeros(b, &coefficients)?)?))
}

/// Objective and the derivative along `v` by one forward sweep.
pub fn directional<B: Ops>(b: &B, x: &LlsqInputs<B>, v: &[f64]) -> Result<(f64, f64)> {
    let f = Forward::new(b.clone());
    let m = v.len();
    let coefficients = f.dual(x.x.clone(), b.tensor(v, &[m, 1], x.x.dtype())?)?;
    let y = objective_on(&f, &coefficients, &f.lift(x.targets.clone()), &f.lift(x.powers.clone()))?;
    Ok((b.to_vec(f.primal(&y))?[0], b.to_vec(&f.tangent(&y)?)?[0]))
}

/// Objective and gradient by forward mode: one sweep per coefficient.
pub fn gradient_forward<B: Ops>(b: &B, x: &LlsqInputs<B>, m: usize) -> Result<(f64, Vec<f64>)> {
    let mut value = b.to_vec(&objective(b, x)?)?[0];
    let mut out = Vec::with_capacity(m);
    for j in 0..m {
        let mut e = vec![0.0; m];
        e[j] = 1.0;
        let (y, dy) = directional(b, x, &e)?;
        value = y;
        out.push(dy);
    }
    Ok((value, out))
}

/// The hand-derived objective and gradient in `T`: r = s - T x, y = r.r / 2, dy/dx = -T^T r,
/// with the constants rounded to `T` as the engines see them.
pub fn manual<T: Elem>(input: &LlsqInput) -> (f64, Vec<f64>) {
    let m = input.x.len();
    let (targets, powers) = input.constants();
    let of = |v: f64| T::of_f64(v);
    let x: Vec<T> = input.x.iter().map(|&v| of(v)).collect();
    let mut value = T::zero();
    let mut grad = vec![T::zero(); m];
    for (i, &s) in targets.iter().enumerate() {
        let row = &powers[i * m..(i + 1) * m];
        let r = row.iter().zip(&x).fold(of(s), |acc, (&p, &xj)| acc - of(p) * xj);
        value = value + r * r;
        for (g, &p) in grad.iter_mut().zip(row) {
            *g = *g - r * of(p);
        }
    }
    ((value * of(0.5)).as_f64(), grad.into_iter().map(Elem::as_f64).collect())
}

/// [`manual`] in the dtype under test.
pub fn manual_in(input: &LlsqInput, dtype: DType) -> (f64, Vec<f64>) {
    match dtype {
        DType::F32 => manual::<f32>(input),
        DType::F64 => manual::<f64>(input),
    }
}

/// Parses GradBench's input `{"x": [...], "n": N}` (its `min_runs` and `min_seconds` are
/// accepted and ignored, so GradBench's messages can be replayed).
pub fn parse_input(text: &str, source: &str) -> WResult<LlsqInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let value = crate::json::parse_json(text, source)?;
    let Json::Object(obj) = value else {
        return Err(bad(format!("expected a JSON object with fields x and n, found {}", kind(&value))));
    };
    if let Some(extra) = obj.keys().find(|k| !["x", "n", "min_runs", "min_seconds"].contains(&k.as_str())) {
        return Err(bad(format!("unknown field '{extra}' (expected x, n)")));
    }
    let n = match obj.get("n") {
        None => return Err(bad("field n: missing".into())),
        Some(v) => v
            .as_u64()
            .filter(|&n| n >= 2)
            .ok_or_else(|| bad(format!("field n: expected a whole number >= 2, got {v}")))?,
    };
    let x = match obj.get("x") {
        Some(Json::Array(a)) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(j, v)| match parse_number(v) {
                Ok(x) if x.is_finite() => Ok(x),
                Ok(x) => Err(bad(format!("field x[{j}]: must be finite, got {x}"))),
                Err(m) => Err(bad(format!("field x[{j}]: {m}"))),
            })
            .collect::<WResult<Vec<f64>>>()?,
        Some(Json::Array(_)) => return Err(bad("field x: is empty (at least one coefficient)".into())),
        Some(v) => return Err(bad(format!("field x: expected an array of numbers, found {}", kind(v)))),
        None => return Err(bad("field x: missing".into())),
    };
    checked(LlsqInput { x, n: n as usize }, source)
}

/// Refuses problems whose Vandermonde matrix would be unreasonably large.
fn checked(input: LlsqInput, source: &str) -> WResult<LlsqInput> {
    let entries = input.n.saturating_mul(input.x.len());
    if entries > MAX_ENTRIES {
        return Err(WorkloadError::BadInput(format!(
            "{source}: n = {} and m = {} need {entries} matrix entries, more than {MAX_ENTRIES}",
            input.n,
            input.x.len()
        )));
    }
    Ok(input)
}

/// llsq's memory: about 64 bytes per sample point (the samples, residuals and their tape) and
/// 16 per matrix entry (measured on the CPU in reverse mode: 70 MB at n = 10^6, m = 1).
pub(crate) fn llsq_footprint(n: usize, m: usize) -> crate::workload::Footprint {
    let (n, m) = (n as u128, m as u128);
    crate::workload::Footprint {
        bytes: 64 * n + 18 * n * m,
        key: "n",
        formula: "about 64 bytes per sample point and 18 per matrix entry (64n + 18nm)",
    }
}

/// llsq in the registry: `workload: llsq` with n sample points and m coefficients.
pub struct Llsq;

impl Workload for Llsq {
    fn family(&self) -> &'static str {
        "llsq"
    }
    fn about(&self) -> &'static str {
        "GradBench's linear least squares objective (a polynomial fit of a step) and its gradient"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![sizes("n", 2, 1 << 28, "sample points"), sizes("m", 1, 1 << 16, "coefficients")]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn footprint(&self, p: &Params) -> Option<crate::workload::Footprint> {
        Some(llsq_footprint(p.int("n").ok()?, p.int("m").ok()?))
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        let input = checked(LlsqInput::generate(p.int("n")?, p.int("m")?, seed), "llsq")?;
        Ok(Box::new(ObjectiveProblem::<LlsqObjective>(input)))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let input = parse_input(&req.text, &req.source)?;
        crate::validate::validate(&input, &req.source, req.dtype)?;
        let (dt, m) = (req.dtype, input.x.len());
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &input, dt).map_err(bad)?;
            let with_gradient = |(f, g): (f64, Vec<f64>)| objective_json(f, Some(&g), dt);
            Ok(match req.mode.unwrap_or(Mode::Primal) {
                Mode::Primal => objective_json(d.to_vec(&objective(d, &x).map_err(bad)?)?[0], None, dt),
                Mode::Vjp => with_gradient(gradient(d, &x).map_err(bad)?),
                Mode::Jvp | Mode::HessianDiag => with_gradient(gradient_forward(d, &x, m).map_err(bad)?),
            })
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("llsq")
    }
    /// GradBench's `llsq` functions: `primal` returns y, `gradient` returns dy/dx.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("llsq.{function} input");
        let input = parse_input(&input.to_string(), &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = upload(d, &input, dtype).map_err(bad)?;
            match function {
                "primal" => Ok(format_number(d.to_vec(&objective(d, &x).map_err(bad)?)?[0], dtype)),
                "gradient" => Ok(format_array(&gradient(d, &x).map_err(bad)?.1, dtype)),
                other => Err(WorkloadError::BadInput(format!("llsq: no function '{other}' (known: primal, gradient)"))),
            }
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("m") {
            Some(m) => format!("{name} m={m}"),
            None => name.to_string(),
        }
    }
}

/// llsq as a scalar objective of its coefficients.
struct LlsqObjective;

impl ScalarObjective for LlsqObjective {
    type Remote = Self;
    type Resident<D: Device> = LlsqInputs<D>;
    type Input = LlsqInput;
    fn rounded(input: &LlsqInput, dtype: DType) -> LlsqInput {
        LlsqInput { x: rounded(&input.x, dtype), n: input.n }
    }
    fn params(input: &LlsqInput) -> Vec<f64> {
        input.x.clone()
    }
    fn with_params(input: &LlsqInput, x: &[f64]) -> LlsqInput {
        LlsqInput { x: x.to_vec(), n: input.n }
    }
    fn upload<D: Device>(d: &D, input: &LlsqInput, dtype: DType) -> Result<LlsqInputs<D>> {
        upload(d, input, dtype)
    }
    fn objective<D: Device>(d: &D, x: &LlsqInputs<D>) -> Result<D::T> {
        objective(d, x)
    }
    fn gradient<D: Device>(d: &D, x: &LlsqInputs<D>) -> Result<Vec<f64>> {
        Ok(gradient(d, x)?.1)
    }
    fn directional<D: Device>(d: &D, x: &LlsqInputs<D>, v: &[f64]) -> Result<f64> {
        Ok(directional(d, x, v)?.1)
    }
    fn manual_gradient(input: &LlsqInput, dtype: DType) -> Vec<f64> {
        manual_in(input, dtype).1
    }
    fn forward_gradient<D: Device>(d: &D, x: &LlsqInputs<D>, n: usize) -> Option<Result<(f64, Vec<f64>)>> {
        Some(gradient_forward(d, x, n))
    }
    fn remote(input: &LlsqInput) -> Option<RemoteModule> {
        Some(RemoteModule {
            primal: "primal",
            gradient: "gradient",
            input: serde_json::json!({"x": input.x, "n": input.n}),
        })
    }
}

impl CheckedInput for LlsqInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("x", &self.x)]
    }
    fn footprint(&self) -> Option<(String, crate::workload::Footprint)> {
        Some((format!("field n = {}", self.n), crate::llsq::llsq_footprint(self.n, self.x.len())))
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;

    use super::*;

    /// n = 3: t = (-1, 0, 1), s = (-1, 0, 1). With x = (a, b): r = (-1 - a + b, -a, 1 - a - b),
    /// y = ((1 + a - b)^2 + a^2 + (1 - a - b)^2) / 2, dy/da = 3a, dy/db = 2b - 2 (by hand).
    #[test]
    fn a_three_point_fit_matches_the_hand_computation() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let input = LlsqInput { x: vec![0.5, 0.25], n: 3 };
        let want_y = ((1.5f64 - 0.25).powi(2) + 0.25 + (1.0f64 - 0.75).powi(2)) / 2.0;
        let want_g = [1.5, 2.0 * 0.25 - 2.0];
        let (y, g) = gradient(&cpu, &upload(&cpu, &input, DType::F64).unwrap()).unwrap();
        assert!((y - want_y).abs() < 1e-15, "{y} vs {want_y}");
        assert!(g.iter().zip(&want_g).all(|(a, b)| (a - b).abs() < 1e-15), "{g:?}");
        let (my, mg) = manual::<f64>(&input);
        assert!((my - want_y).abs() < 1e-15 && mg.iter().zip(&want_g).all(|(a, b)| (a - b).abs() < 1e-15));
        let (fy, fg) = gradient_forward(&cpu, &upload(&cpu, &input, DType::F64).unwrap(), 2).unwrap();
        assert!((fy - want_y).abs() < 1e-15 && fg.iter().zip(&want_g).all(|(a, b)| (a - b).abs() < 1e-15));
    }

    #[test]
    fn the_least_squares_solution_has_a_zero_gradient() {
        // With m = n the polynomial interpolates s exactly: y = 0 and the gradient vanishes.
        // For n = 3 the interpolant of (-1, 0, 1) at t = (-1, 0, 1) is t itself: x = (0, 1, 0).
        let cpu = Cpu::new(Some(1)).unwrap();
        let input = LlsqInput { x: vec![0.0, 1.0, 0.0], n: 3 };
        let (y, g) = gradient(&cpu, &upload(&cpu, &input, DType::F64).unwrap()).unwrap();
        assert_eq!(y, 0.0);
        assert_eq!(g, vec![0.0; 3]);
    }

    #[test]
    fn malformed_inputs_name_their_field() {
        let msg = |text: &str| match parse_input(text, "in.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert!(msg("[]").contains("expected a JSON object"));
        assert!(msg(r#"{"x": [1]}"#).contains("field n: missing"));
        assert!(msg(r#"{"x": [1], "n": 1}"#).contains("field n: expected a whole number >= 2"));
        assert!(msg(r#"{"x": [], "n": 4}"#).contains("field x: is empty"));
        assert!(msg(r#"{"x": [1, "nan"], "n": 4}"#).contains("field x[1]: must be finite"));
        assert!(msg(r#"{"x": [1], "n": 4, "y": 2}"#).contains("unknown field 'y'"));
        assert!(msg(r#"{"x": [1, 2], "n": 1000000000000}"#).contains("matrix entries"));
        let ok = parse_input(r#"{"x": [1, 2], "n": 16, "min_runs": 1, "min_seconds": 0.5}"#, "in").unwrap();
        assert_eq!(ok, LlsqInput { x: vec![1.0, 2.0], n: 16 });
    }
}
