//! k-means: the cost of centres C for points P is f(C) = sum over points p of min over centres c
//! of ||p - c||^2. Its gradient comes from reverse mode; its Hessian is diagonal (each centre
//! coordinate appears only in its own squared distances, and each point's piece is a quadratic
//! 2 * count * I away from ties), so one Hessian-vector product with a vector of ones, by forward
//! over reverse, gives the Hessian diagonal. The Newton direction is gradient / Hessian diagonal
//! as in GradBench's `kmeans` `dir`, with 0 for a centre that no point picks (empty cluster:
//! gradient and Hessian are both 0 there, and the centre stays where it is).
//!
//! The distances are one primitive, `sq_dist` (n x k, with its own rule): the CPU computes the
//! differences directly in one pass, a device without its own kernel composes
//! ||p||^2 + ||c||^2 - 2 p.c from one matrix product; neither materialises an n x k x d tensor,
//! and the engines record one node instead of the expanded form's six. Ties go to the lowest
//! centre index. The hand-derived reference ([`manual`]) loops over points with the direct
//! difference form, in parallel over fixed chunks of points (f32 or f64).

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, Cpu, DType, Device, Elem, Forward, Ops, Result, Reverse, TensorMeta, UnaryOp, with_device,
};
use adgauge_datasets::kmeans::KmeansData;
use rayon::prelude::*;
use serde_json::Value as Json;

use std::sync::Arc;

use crate::json::{format_number, format_rows, parse_rows, rows_json};
use crate::objective::GivenGradient;
use crate::validate::CheckedInput;
use crate::workload::{
    CheckKind, CheckSettings, Comparison, EvalRequest, FlatFn, Mode, ModeTraces, ParamSpec, Params, Prepared, Problem,
    Remote, RemoteCall, Validation, WResult, Workload, WorkloadError, rounded, sizes,
};

/// A k-means case on an engine's device.
pub struct KmeansInputs<O: Ops> {
    /// n x d.
    pub points: O::T,
    /// k x d.
    pub centres: O::T,
}

/// Cost, gradient, Hessian diagonal and Newton direction (the last three k x d, row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct KmeansOut {
    pub cost: f64,
    pub gradient: Vec<f64>,
    pub hessian_diag: Vec<f64>,
    pub dir: Vec<f64>,
}

/// Puts a case on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, data: &KmeansData, dtype: DType) -> Result<KmeansInputs<O>> {
    Ok(KmeansInputs {
        points: o.tensor(&data.points, &[data.n, data.d], dtype)?,
        centres: o.tensor(&data.centres, &[data.k, data.d], dtype)?,
    })
}

/// The cost, shape `[1]`.
pub fn cost<O: Ops>(o: &O, points: &O::T, centres: &O::T) -> Result<O::T> {
    let dist = o.sq_dist(points, centres)?; // n x k
    o.sum(&o.min_axis(&dist, 1)?)
}

/// Cost and gradient (reverse mode).
pub fn gradient<B: Ops>(b: &B, x: &KmeansInputs<B>) -> Result<(B::T, B::T)> {
    let r = Reverse::new(b.clone());
    let c = r.var(x.centres.clone());
    let f = cost(&r, &r.lift(x.points.clone()), &c)?;
    let g = r.backward(&f, b.full(&[1], 1.0, f.dtype())?)?;
    Ok((f.value().clone(), g.get_or_zeros(b, &c)?))
}

/// Cost, gradient and Hessian diagonal: one Hessian-vector product with a vector of ones, by
/// forward over reverse (`Reverse<Forward<B>>`).
pub fn hessian_diag<B: Ops>(b: &B, x: &KmeansInputs<B>) -> Result<(B::T, B::T, B::T)> {
    let fw = Forward::new(b.clone());
    let ones = b.full(x.centres.shape(), 1.0, x.centres.dtype())?;
    let r = Reverse::new(fw.clone());
    let c = r.var(fw.dual(x.centres.clone(), ones)?);
    let f = cost(&r, &r.lift(fw.lift(x.points.clone())), &c)?;
    let g = r.backward(&f, fw.full(&[1], 1.0, f.dtype())?)?;
    let g = g.get_or_zeros(&fw, &c)?;
    Ok((fw.primal(f.value()).clone(), fw.primal(&g).clone(), fw.tangent(&g)?))
}

/// Newton direction gradient / Hessian diagonal, 0 where the Hessian diagonal is 0.
pub fn newton_dir<B: Ops>(b: &B, g: &B::T, h: &B::T) -> Result<B::T> {
    let zero = b.scalar(0.0, h.dtype())?;
    let nonzero = b.binary(BinaryOp::Gt, h, &zero)?;
    let one = b.scalar(1.0, h.dtype())?;
    let safe = b.select(&nonzero, h, &one)?;
    b.select(&nonzero, &b.div(g, &safe)?, &zero)
}

/// Everything `adgauge eval kmeans` prints, by AD on the engine's device.
pub fn evaluate<B: Ops>(b: &B, x: &KmeansInputs<B>) -> Result<KmeansOut> {
    let (f, g, h) = hessian_diag(b, x)?;
    let dir = newton_dir(b, &g, &h)?;
    Ok(KmeansOut { cost: b.to_vec(&f)?[0], gradient: b.to_vec(&g)?, hessian_diag: b.to_vec(&h)?, dir: b.to_vec(&dir)? })
}

/// Points per chunk of the manual reference (fixed: results do not depend on the thread count).
const CHUNK: usize = 1024;

/// The hand-derived reference in `T` (f32 or f64): per point the nearest centre (lowest index on
/// ties) by direct differences; gradient 2 * (count * c - sum of its points), Hessian diagonal
/// 2 * count, direction gradient / Hessian (0 for empty clusters).
pub fn manual<T: Elem>(data: &KmeansData) -> KmeansOut {
    let (k, d) = (data.k, data.d);
    let p: Vec<T> = data.points.iter().map(|&v| T::of_f64(v)).collect();
    let c: Vec<T> = data.centres.iter().map(|&v| T::of_f64(v)).collect();
    // Per chunk: cost, per-centre sums of points and counts.
    let per_chunk = |chunk: &[T]| {
        let mut cost = T::zero();
        let mut sums = vec![T::zero(); k * d];
        let mut counts = vec![0usize; k];
        for pt in chunk.chunks(d.max(1)) {
            let (mut best, mut at) = (T::infinity(), 0);
            for j in 0..k {
                let cj = &c[j * d..(j + 1) * d];
                let dist = pt.iter().zip(cj).fold(T::zero(), |s, (&a, &b)| s + (a - b) * (a - b));
                if dist < best {
                    (best, at) = (dist, j);
                }
            }
            if k == 0 {
                continue;
            }
            cost = cost + best;
            counts[at] += 1;
            sums[at * d..(at + 1) * d].iter_mut().zip(pt).for_each(|(s, &v)| *s = *s + v);
        }
        (cost, sums, counts)
    };
    let parts: Vec<_> = if d == 0 { Vec::new() } else { p.par_chunks(CHUNK * d).map(per_chunk).collect() };
    let mut cost = T::zero();
    let mut sums = vec![T::zero(); k * d];
    let mut counts = vec![0usize; k];
    for (pc, ps, pn) in parts {
        cost = cost + pc;
        sums.iter_mut().zip(ps).for_each(|(s, v)| *s = *s + v);
        counts.iter_mut().zip(pn).for_each(|(s, v)| *s += v);
    }
    let two = T::of_f64(2.0);
    let mut out = KmeansOut { cost: cost.as_f64(), gradient: vec![], hessian_diag: vec![], dir: vec![] };
    for j in 0..k {
        let cnt = T::of_f64(counts[j] as f64);
        for l in 0..d {
            let g = two * (cnt * c[j * d + l] - sums[j * d + l]);
            let h = two * cnt;
            out.gradient.push(g.as_f64());
            out.hessian_diag.push(h.as_f64());
            out.dir.push(if counts[j] == 0 { 0.0 } else { (g / h).as_f64() });
        }
    }
    out
}

/// [`manual`] in the dtype under test.
pub fn manual_in(data: &KmeansData, dtype: DType) -> KmeansOut {
    match dtype {
        DType::F32 => manual::<f32>(data),
        DType::F64 => manual::<f64>(data),
    }
}

/// k-means in the registry: `workload: kmeans` with n points, k centres, d dimensions.
pub struct Kmeans;

/// Validation size: every coordinate gets a finite difference.
const CHECK: [(&str, u64); 3] = [("n", 200), ("k", 5), ("d", 4)];

impl Workload for Kmeans {
    fn family(&self) -> &'static str {
        "kmeans"
    }
    fn about(&self) -> &'static str {
        "k-means cost of centres; gradient by reverse mode, Hessian diagonal by forward over reverse"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![sizes("n", 1, 1 << 30, "points"), sizes("k", 1, 1 << 24, "centres"), sizes("d", 1, 1 << 16, "dimensions")]
    }
    fn eval_modes(&self) -> Vec<Mode> {
        vec![Mode::HessianDiag, Mode::Primal, Mode::Vjp]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        let data = adgauge_datasets::kmeans::generate(p.int("n")?, p.int("k")?, p.int("d")?, seed);
        Ok(Box::new(KmeansProblem(data)))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let data = parse_kmeans_case(&req.text, &req.source)?;
        crate::validate::validate(&data, &req.source, req.dtype)?;
        let input = WorkloadError::from_input;
        let dt = req.dtype;
        with_device!(device, |d| {
            let x = upload(d, &data, dt).map_err(input)?;
            match req.mode.unwrap_or(Mode::HessianDiag) {
                Mode::Primal => {
                    let c = d.to_vec(&cost(d, &x.points, &x.centres).map_err(input)?)?;
                    Ok(format!("{{\"cost\": {}}}", format_number(c[0], dt)))
                }
                // The gradient by reverse mode comes with the Hessian diagonal and the Newton
                // direction (GradBench's kmeans outputs).
                _ => Ok(format_kmeans(&evaluate(d, &x).map_err(input)?, data.d, dt)),
            }
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("kmeans")
    }
    /// GradBench's `kmeans`: `cost`, and `dir`, the Newton direction (gradient / Hessian
    /// diagonal, 0 for an empty cluster) as k rows of d.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("kmeans.{function} input");
        let (n, d, points) = parse_rows(input, "points", &source, None)?;
        let (k, _, centres) = parse_rows(input, "centroids", &source, Some(d))?;
        let data = KmeansData { n, k, d, points, centres };
        crate::validate::validate(&GradbenchKmeans(&data), &source, dtype)?;
        let bad = WorkloadError::from_input;
        with_device!(device, |dev| {
            let x = upload(dev, &data, dtype).map_err(bad)?;
            match function {
                "cost" => Ok(format_number(dev.to_vec(&cost(dev, &x.points, &x.centres).map_err(bad)?)?[0], dtype)),
                "dir" => Ok(format_rows(&evaluate(dev, &x).map_err(bad)?.dir, k, dtype)),
                other => Err(WorkloadError::BadInput(format!("kmeans: no function '{other}' (known: cost, dir)"))),
            }
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("d") {
            Some(d) => format!("{name} d={d}"),
            None => name.to_string(),
        }
    }
}

struct KmeansProblem(KmeansData);

impl Problem for KmeansProblem {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        with_device!(device, |d| {
            let x = upload(d, &self.0, dtype)?;
            let ones = d.full(x.centres.shape(), 1.0, dtype)?;
            Ok(Box::new(KmeansPrepared { device: d.clone(), x, ones, traces: ModeTraces::default() })
                as Box<dyn Prepared>)
        })
    }

    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        with_device!(device, |d| {
            let f = KmeansFlat::new(cpu.clone(), d.clone(), s.dtype, &self.0);
            let (ad, manual) = f.hessians()?;
            let comparisons = vec![
                Comparison {
                    check: CheckKind::Manual,
                    got: f.vjp(&[1.0])?,
                    want: f.manual_gradient(),
                    convention: None,
                },
                Comparison { check: CheckKind::ManualHessian, got: ad, want: manual, convention: None },
                dense_primitives_probe(d, s.dtype, s.seed)?,
                crate::primitives::elementwise_probe(d, s.dtype, s.seed)?,
                crate::primitives::dense_switches_probe(d, s.dtype, s.seed)?,
                crate::primitives::lstm_cell_probe(d, s.dtype, s.seed)?,
            ];
            Ok(Validation { flat: Box::new(f), full_jacobian: None, comparisons })
        })
    }

    /// GradBench's `kmeans`: `cost` (timed as primal) and `dir` (timed as vjp: the gradient and
    /// the Hessian diagonal it needs).
    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let function = match mode {
            Mode::Primal => "cost",
            Mode::Vjp => "dir",
            Mode::Jvp | Mode::HessianDiag => return None,
        };
        Some(RemoteCall { function: function.into(), input: gradbench_input(&self.0) })
    }

    /// The tool's Newton direction against the hand-derived one, and the gradient it implies
    /// (direction times the exact Hessian diagonal 2 count) against finite differences of the
    /// f64 cost on the CPU.
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, _s: &CheckSettings) -> WResult<Validation> {
        let output = remote.call("dir", gradbench_input(&self.0))?;
        let (rows, _, dir) =
            parse_rows(&serde_json::json!({"dir": output}), "dir", "kmeans.dir output", Some(self.0.d))
                .map_err(|e| adgauge_backends::OpError::Device(e.to_string()))?;
        if rows != self.0.k {
            let m = format!("kmeans.dir output: {rows} rows, expected {}", self.0.k);
            return Err(WorkloadError::Op(adgauge_backends::OpError::Device(m)));
        }
        let manual = manual::<f64>(&self.0);
        let gradient = dir.iter().zip(&manual.hessian_diag).map(|(d, h)| d * h).collect();
        let f = KmeansFlat::new(cpu.clone(), cpu.clone(), DType::F64, &self.0);
        let comparisons = vec![Comparison { check: CheckKind::Manual, got: dir, want: manual.dir, convention: None }];
        Ok(Validation { flat: Box::new(GivenGradient { f, gradient }), full_jacobian: None, comparisons })
    }
}

/// The `primitives` check of k-means: the dense products, differentiated by the reverse engine
/// (a random adjoint) and the forward engine (random tangents on both operands), against loops.
/// The matrix product with every transpose flag and both batch broadcasts (a batched operand
/// times a shared two-dimensional one, either side), which no workload forms: a pullback that
/// forgets to sum a shared operand's adjoint over the batch passes every other check. The
/// squared distances with both operands moving (the cost only moves the centres). Every unary
/// op to second order (forward over reverse) against its derivatives by hand.
fn dense_primitives_probe<D: Ops>(d: &D, dt: DType, seed: u64) -> Result<Comparison> {
    use rand::RngExt;
    let mut rng = adgauge_datasets::rng(seed ^ 0xde75e);
    let mut random = |len: usize| -> Vec<f64> { (0..len).map(|_| dt.round(rng.random_range(-1.0..1.0))).collect() };
    let (batch, m, l, n) = (3, 2, 4, 5);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for (a_batched, c_batched) in [(true, true), (true, false), (false, true)] {
        for (ta, tc) in [(false, false), (false, true), (true, false), (true, true)] {
            // Stored shapes: op(a) is m x l, op(c) is l x n, per batch where batched.
            let lead = |batched: bool| if batched { vec![batch] } else { vec![] };
            let a_shape = [lead(a_batched), if ta { vec![l, m] } else { vec![m, l] }].concat();
            let c_shape = [lead(c_batched), if tc { vec![n, l] } else { vec![l, n] }].concat();
            let a_at = |t: usize, i: usize, j: usize| {
                let base = if a_batched { t * m * l } else { 0 };
                base + if ta { j * m + i } else { i * l + j }
            };
            let c_at = |t: usize, i: usize, j: usize| {
                let base = if c_batched { t * l * n } else { 0 };
                base + if tc { j * l + i } else { i * n + j }
            };
            let (a, c) = (random(a_shape.iter().product()), random(c_shape.iter().product()));
            let (da, dc, g) = (random(a.len()), random(c.len()), random(batch * m * n));
            let r = Reverse::new(d.clone());
            let (av, cv) = (r.var(d.tensor(&a, &a_shape, dt)?), r.var(d.tensor(&c, &c_shape, dt)?));
            let y = r.matmul(&av, ta, &cv, tc)?;
            let grads = r.backward(&y, d.tensor(&g, &[batch, m, n], dt)?)?;
            got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
            got.extend(d.to_vec(&grads.get_or_zeros(d, &cv)?)?);
            let f = Forward::new(d.clone());
            let y = f.matmul(
                &f.dual(d.tensor(&a, &a_shape, dt)?, d.tensor(&da, &a_shape, dt)?)?,
                ta,
                &f.dual(d.tensor(&c, &c_shape, dt)?, d.tensor(&dc, &c_shape, dt)?)?,
                tc,
            )?;
            got.extend(d.to_vec(&f.tangent(&y)?)?);
            let (mut a_bar, mut c_bar, mut y_dot) = (vec![0.0; a.len()], vec![0.0; c.len()], vec![0.0; g.len()]);
            for t in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let out = (t * m + i) * n + j;
                        for p in 0..l {
                            let (ia, ic) = (a_at(t, i, p), c_at(t, p, j));
                            a_bar[ia] += g[out] * c[ic];
                            c_bar[ic] += g[out] * a[ia];
                            y_dot[out] += da[ia] * c[ic] + a[ia] * dc[ic];
                        }
                    }
                }
            }
            want.extend(a_bar);
            want.extend(c_bar);
            want.extend(y_dot);
        }
    }
    // The squared distances with both operands moving (the cost moves only the centres).
    let (a, c) = (random(n * l), random(m * l));
    let (da, dc, g) = (random(a.len()), random(c.len()), random(n * m));
    let r = Reverse::new(d.clone());
    let (av, cv) = (r.var(d.tensor(&a, &[n, l], dt)?), r.var(d.tensor(&c, &[m, l], dt)?));
    let grads = r.backward(&r.sq_dist(&av, &cv)?, d.tensor(&g, &[n, m], dt)?)?;
    got.extend(d.to_vec(&grads.get_or_zeros(d, &av)?)?);
    got.extend(d.to_vec(&grads.get_or_zeros(d, &cv)?)?);
    let f = Forward::new(d.clone());
    let y = f.sq_dist(
        &f.dual(d.tensor(&a, &[n, l], dt)?, d.tensor(&da, &[n, l], dt)?)?,
        &f.dual(d.tensor(&c, &[m, l], dt)?, d.tensor(&dc, &[m, l], dt)?)?,
    )?;
    got.extend(d.to_vec(&f.tangent(&y)?)?);
    let (mut a_bar, mut c_bar, mut y_dot) = (vec![0.0; a.len()], vec![0.0; c.len()], vec![0.0; g.len()]);
    for i in 0..n {
        for j in 0..m {
            for p in 0..l {
                let diff = a[i * l + p] - c[j * l + p];
                a_bar[i * l + p] += 2.0 * g[i * m + j] * diff;
                c_bar[j * l + p] -= 2.0 * g[i * m + j] * diff;
                y_dot[i * m + j] += 2.0 * diff * (da[i * l + p] - dc[j * l + p]);
            }
        }
    }
    want.extend(a_bar);
    want.extend(c_bar);
    want.extend(y_dot);
    // Every unary op to second order: the gradient w op'(x) and the Hessian-vector product
    // w op''(x) v of sum w op(x), by forward over reverse (the pullback's adjoint rule
    // differentiated again: nothing else in check nests through these since the cost became
    // one sq_dist). x in [0.5, 1.5] keeps log, sqrt and recip smooth.
    let len = 7;
    let x: Vec<f64> = random(len).iter().map(|v| dt.round(1.0 + 0.5 * v)).collect();
    let (v, w) = (random(len), random(len));
    for op in UnaryOp::ALL.into_iter().filter(|&op| op != UnaryOp::Sign) {
        let fw = Forward::new(d.clone());
        let r = Reverse::new(fw.clone());
        let xv = r.var(fw.dual(d.tensor(&x, &[len], dt)?, d.tensor(&v, &[len], dt)?)?);
        let y = r.sum(&r.mul(&r.unary(op, &xv)?, &r.tensor(&w, &[len], dt)?)?)?;
        let grads = r.backward(&y, fw.full(&[1], 1.0, dt)?)?;
        let g = grads.get_or_zeros(&fw, &xv)?;
        got.extend(d.to_vec(fw.primal(&g))?);
        got.extend(d.to_vec(&fw.tangent(&g)?)?);
        let (first, second): (Vec<f64>, Vec<f64>) = x.iter().map(|&x| unary_derivatives(op, x)).unzip();
        want.extend((0..len).map(|i| w[i] * first[i]));
        want.extend((0..len).map(|i| w[i] * second[i] * v[i]));
    }
    Ok(Comparison { check: CheckKind::Primitives, got, want, convention: None })
}

/// `(op'(x), op''(x))`, derived by hand.
fn unary_derivatives(op: UnaryOp, x: f64) -> (f64, f64) {
    let s = 1.0 / (1.0 + (-x).exp());
    let t = x.tanh();
    match op {
        UnaryOp::Neg => (-1.0, 0.0),
        UnaryOp::Exp => (x.exp(), x.exp()),
        UnaryOp::Log => (1.0 / x, -1.0 / (x * x)),
        UnaryOp::Log1p => (1.0 / (1.0 + x), -1.0 / ((1.0 + x) * (1.0 + x))),
        UnaryOp::Sin => (x.cos(), -x.sin()),
        UnaryOp::Cos => (-x.sin(), -x.cos()),
        UnaryOp::Sqrt => (0.5 / x.sqrt(), -0.25 / (x * x.sqrt())),
        UnaryOp::Tanh => (1.0 - t * t, -2.0 * t * (1.0 - t * t)),
        UnaryOp::Sigmoid => (s * (1.0 - s), s * (1.0 - s) * (1.0 - 2.0 * s)),
        UnaryOp::Abs => (x.signum(), 0.0),
        UnaryOp::Sign => (0.0, 0.0),
        UnaryOp::Recip => (-1.0 / (x * x), 2.0 / (x * x * x)),
        UnaryOp::Square => (2.0 * x, 2.0),
    }
}

/// GradBench's `kmeans` input: `{"points": [n rows of d], "centroids": [k rows of d]}`.
pub fn gradbench_input(data: &KmeansData) -> Json {
    serde_json::json!({"points": rows_json(&data.points, data.d), "centroids": rows_json(&data.centres, data.d)})
}

/// Timed modes: primal = the cost, vjp = cost and gradient, jvp = one forward sweep along ones.
struct KmeansPrepared<D: Device> {
    device: D,
    x: KmeansInputs<D>,
    ones: D::T,
    traces: ModeTraces,
}

impl<D: Device> Prepared for KmeansPrepared<D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, x) = (&self.device, &self.x);
        self.traces.run(d, mode, &mut || -> WResult<()> {
            match mode {
                Mode::Primal => drop(cost(d, &x.points, &x.centres)?),
                Mode::Vjp => drop(gradient(d, x)?),
                Mode::Jvp => {
                    let f = Forward::new(d.clone());
                    let c = f.dual(x.centres.clone(), self.ones.clone())?;
                    drop(cost(&f, &f.lift(x.points.clone()), &c)?);
                }
                Mode::HessianDiag => drop(hessian_diag(d, x)?),
            }
            Ok(())
        })
    }
}

/// Parses `{"points": [[..]..], "centres": [[..]..]}`; `source` names the file in messages.
pub fn parse_kmeans_case(text: &str, source: &str) -> WResult<KmeansData> {
    let bad = |m: String| WorkloadError::BadInput(m);
    let value = crate::json::parse_json(text, source)?;
    let Json::Object(obj) = value else {
        return Err(bad(format!("{source}: expected a JSON object with fields points and centres")));
    };
    if let Some(extra) = obj.keys().find(|k| k.as_str() != "points" && k.as_str() != "centres") {
        return Err(bad(format!("{source}: unknown field '{extra}' (expected points, centres)")));
    }
    let obj = Json::Object(obj);
    let (n, d, points) = parse_rows(&obj, "points", source, None)?;
    let (k, _, centres) = parse_rows(&obj, "centres", source, Some(d))?;
    Ok(KmeansData { n, k, d, points, centres })
}

/// `{"cost": x, "gradient": [[..]..], "hessian_diag": [[..]..], "dir": [[..]..]}`.
pub fn format_kmeans(out: &KmeansOut, d: usize, dtype: DType) -> String {
    format!(
        "{{\"cost\": {}, \"gradient\": {}, \"hessian_diag\": {}, \"dir\": {}}}",
        format_number(out.cost, dtype),
        format_rows(&out.gradient, out.gradient.len() / d, dtype),
        format_rows(&out.hessian_diag, out.hessian_diag.len() / d, dtype),
        format_rows(&out.dir, out.dir.len() / d, dtype)
    )
}

/// A k-means case as a flat function of the centres (x = centres, row-major; y = `[cost]`), at
/// a point rounded to the dtype: the derivatives come from `device` (the device under test) in
/// the dtype, the f64 values for finite differences from the CPU.
pub struct KmeansFlat<D: Device> {
    pub cpu: Cpu,
    pub device: D,
    pub dtype: DType,
    pub data: KmeansData,
}

impl<D: Device> KmeansFlat<D> {
    pub fn new(cpu: Cpu, device: D, dtype: DType, data: &KmeansData) -> KmeansFlat<D> {
        let data =
            KmeansData { points: rounded(&data.points, dtype), centres: rounded(&data.centres, dtype), ..data.clone() };
        KmeansFlat { cpu, device, dtype, data }
    }

    /// The manual gradient, J^T w for `w = [1]`.
    pub fn manual_gradient(&self) -> Vec<f64> {
        manual_in(&self.data, self.dtype).gradient
    }

    /// The AD Hessian diagonal and the manual one.
    pub fn hessians(&self) -> Result<(Vec<f64>, Vec<f64>)> {
        let x = upload(&self.device, &self.data, self.dtype)?;
        let (_, _, h) = hessian_diag(&self.device, &x)?;
        Ok((self.device.to_vec(&h)?, manual_in(&self.data, self.dtype).hessian_diag))
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
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        let data = KmeansData { centres: x.to_vec(), ..self.data.clone() };
        let t = upload(&self.cpu, &data, DType::F64)?;
        self.cpu.to_vec(&cost(&self.cpu, &t.points, &t.centres)?)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let x = upload(&self.device, &self.data, self.dtype)?;
        let (_, g) = gradient(&self.device, &x)?;
        Ok(self.device.to_vec(&g)?.into_iter().map(|v| v * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let x = upload(&self.device, &self.data, self.dtype)?;
        let f = Forward::new(self.device.clone());
        let c = f.dual(x.centres.clone(), self.device.tensor(v, x.centres.shape(), self.dtype)?)?;
        let y = cost(&f, &f.lift(x.points.clone()), &c)?;
        self.device.to_vec(&f.tangent(&y)?)
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

impl CheckedInput for KmeansData {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("points", &self.points), ("centres", &self.centres)]
    }
}

/// k-means data as GradBench's module names its fields (`centroids`).
pub struct GradbenchKmeans<'a>(pub &'a KmeansData);

impl CheckedInput for GradbenchKmeans<'_> {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("points", &self.0.points), ("centroids", &self.0.centres)]
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;
    use adgauge_datasets::kmeans::generate;

    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * (x.abs() + y.abs()).max(1.0))
    }

    #[test]
    fn ad_matches_the_manual_derivatives_in_both_dtypes() {
        let cpu = Cpu::new(Some(2)).unwrap();
        let data = generate(3000, 7, 5, 3);
        for (dt, tol) in [(DType::F64, 1e-10), (DType::F32, 1e-4)] {
            let x = upload(&cpu, &data, dt).unwrap();
            let ad = evaluate(&cpu, &x).unwrap();
            let rounded = KmeansData {
                points: data.points.iter().map(|&v| dt.round(v)).collect(),
                centres: data.centres.iter().map(|&v| dt.round(v)).collect(),
                ..data.clone()
            };
            let m = manual_in(&rounded, dt);
            assert!(close(&[ad.cost], &[m.cost], tol), "{dt} cost {} vs {}", ad.cost, m.cost);
            assert!(close(&ad.gradient, &m.gradient, tol), "{dt} gradient");
            assert_eq!(ad.hessian_diag, m.hessian_diag, "{dt} Hessian diagonal (2 * counts, exact)");
            assert!(close(&ad.dir, &m.dir, tol), "{dt} dir");
            let (_, g) = gradient(&cpu, &x).unwrap();
            assert_eq!(cpu.to_vec(&g).unwrap(), ad.gradient, "{dt}: reverse alone and nested agree");
        }
    }

    #[test]
    fn gradient_matches_central_differences() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let data = generate(200, 4, 3, 11);
        let x = upload(&cpu, &data, DType::F64).unwrap();
        let (_, g) = gradient(&cpu, &x).unwrap();
        let g = cpu.to_vec(&g).unwrap();
        let f = |c: &[f64]| manual::<f64>(&KmeansData { centres: c.to_vec(), ..data.clone() }).cost;
        let h = 1e-6;
        for i in 0..data.centres.len() {
            let mut up = data.centres.clone();
            let mut dn = data.centres.clone();
            up[i] += h;
            dn[i] -= h;
            let fd = (f(&up) - f(&dn)) / (2.0 * h);
            assert!((fd - g[i]).abs() < 1e-6 * fd.abs().max(1.0), "coordinate {i}: {} vs {fd}", g[i]);
        }
    }

    fn msg(text: &str) -> String {
        match parse_kmeans_case(text, "case.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("not a bad-input error: {other}"),
        }
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
    fn empty_clusters_get_a_zero_direction() {
        let cpu = Cpu::new(Some(1)).unwrap();
        // Centre 1 is far from both points.
        let data = KmeansData { n: 2, k: 2, d: 1, points: vec![0.0, 1.0], centres: vec![0.25, 100.0] };
        let out = evaluate(&cpu, &upload(&cpu, &data, DType::F64).unwrap()).unwrap();
        assert_eq!(out.cost, 0.0625 + 0.5625);
        assert_eq!(out.gradient, vec![2.0 * (2.0 * 0.25 - 1.0), 0.0]);
        assert_eq!(out.hessian_diag, vec![4.0, 0.0]);
        assert_eq!(out.dir, vec![-0.25, 0.0]);
        assert_eq!(manual::<f64>(&data), out);
    }

    #[test]
    fn no_perturbation_confusion_in_nested_modes() {
        // d/dx [x * d/dy (x + y)] = 1 everywhere, elementwise over a tensor of points.
        let c = Cpu::new(Some(1)).unwrap();
        let xs = [-2.0, 0.0, 0.5, 3.0, 1e3];
        let fw = Forward::new(c.clone());
        let x = fw.dual(c.tensor(&xs, &[5], DType::F64).unwrap(), c.full(&[5], 1.0, DType::F64).unwrap()).unwrap();
        let r = Reverse::new(fw.clone());
        let y = r.var(fw.tensor(&[0.7, -1.0, 2.0, 0.0, 5.0], &[5], DType::F64).unwrap());
        let s = r.sum(&r.add(&r.lift(x.clone()), &y).unwrap()).unwrap();
        let dy = r.backward(&s, fw.full(&[1], 1.0, DType::F64).unwrap()).unwrap().get_or_zeros(&fw, &y).unwrap();
        let z = fw.mul(&x, &dy).unwrap();
        assert_eq!(c.to_vec(fw.primal(&z)).unwrap(), xs.to_vec());
        assert_eq!(c.to_vec(&fw.tangent(&z).unwrap()).unwrap(), vec![1.0; 5]);
    }
}
