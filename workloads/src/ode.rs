//! GradBench's `ode` eval (after cmpad's `an_ode`): s steps of the classical Runge-Kutta method
//! (RK4) from t = 0 to t = 2 on the linear ODE
//!
//! ```text
//! y_0' = x_0,   y_i' = x_i y_{i-1}  (i > 0),   y(0) = 0
//! ```
//!
//! whose output is y(2) (n numbers) and whose derivative is the gradient of its last element
//! with respect to x. This is what GradBench's reference code (`ode.hpp`) and its tools compute;
//! its README writes the right-hand side as a sum over j <= i instead.
//!
//! Written against the op API as `f(y) = (x m) * gather(y, i - 1) + x e_0` (m masks the first
//! element, so `f(y)_i = x_i y_{i-1}` and `f(y)_0 = x_0` exactly), each step
//! `y += h (k1 + 2 k2 + 2 k3 + k4) / 6` in GradBench's order of operations. Timed modes: primal
//! is the solve, vjp the gradient of the last element by reverse mode (GradBench's `gradient`),
//! jvp one forward sweep along ones. One RK4 step moves information at most four elements down
//! the chain, so y_i is identically 0 for i >= 4s (GradBench's default n >= 1000 with s <= 100:
//! the last element and its gradient are 0); the check case (n = 8, s = 2) keeps it nonzero.
//!
//! The hand-derived reference is the variational equation: RK4 applied to the system together
//! with its sensitivities `S = dy/dx`, `S_i' = delta_ij y_{i-1} + x_i S_{i-1}` (the derivative of
//! an explicit Runge-Kutta step is the same step of the variational system), integrated on the
//! host in f64. GradBench's inputs are `{"x": [n numbers], "s": s}`; `adgauge eval ode` reads
//! the same object and prints `{"y": y(2)}`, with `"gradient"` (of the last element) in vjp and
//! jvp (one forward sweep per element) modes.

use std::sync::Arc;

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, Cpu, DType, Device, Forward, Ops, OutOfRange, Result, Reverse, with_device,
};
use rand::RngExt;
use serde_json::Value as Json;

use crate::json::{format_array, format_object};
use crate::lse::{finite_array, input_object};
use crate::objective::{GivenGradient, flat_gradient};
use crate::validate::CheckedInput;
use crate::workload::{
    CheckKind, CheckSettings, Comparison, EvalRequest, FlatFn, Footprint, FullJacobian, GradbenchCall, Mode,
    ModeTraces, ParamSpec, Params, Prepared, Problem, Remote, RemoteCall, Validation, Value, WResult, Workload,
    WorkloadError, rounded, sizes,
};

/// The end of the integration interval (cmpad's and GradBench's t_f).
const T_FINAL: f64 = 2.0;

/// Most elements and steps a case may have (the footprint bounds their product).
const MAX_N: u64 = 1 << 26;
const MAX_S: u64 = 1 << 20;

/// Validation size: 8 elements reach the last one in 2 steps (4 per step), so its gradient is
/// not identically 0; the Jacobian is 8 x 8.
const CHECK: [(&str, u64); 2] = [("n", 8), ("s", 2)];

/// The full-Jacobian check's largest n.
const FULL_JACOBIAN_MAX: usize = 64;

/// One ode input: the coefficients and the number of steps.
#[derive(Clone, Debug, PartialEq)]
pub struct OdeInput {
    pub x: Vec<f64>,
    pub s: usize,
}

impl OdeInput {
    /// GradBench's generator shape: x uniform in [0, 1), from the seeded generator.
    pub fn generate(n: usize, s: usize, seed: u64) -> OdeInput {
        let mut rng = adgauge_datasets::rng(seed);
        OdeInput { x: (0..n).map(|_| rng.random::<f64>()).collect(), s }
    }
}

impl CheckedInput for OdeInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("x", &self.x)]
    }
    fn footprint(&self) -> Option<(String, Footprint)> {
        Some((format!("{} elements and field s = {}", self.x.len(), self.s), ode_footprint(self.x.len(), self.s)))
    }
}

/// ode's memory: the reverse sweep keeps, per step, the stage values its rules read, and a few
/// vectors live at once (measured on the CPU in reverse mode at n = 10^4: 7.8 MB at s = 10, 66 MB
/// at s = 100, about 65 bytes per element and step and 136 per element).
fn ode_footprint(n: usize, s: usize) -> Footprint {
    let (n, s) = (n as u128, s as u128);
    Footprint {
        bytes: 72 * n * s + 256 * n,
        key: "n",
        formula: "about 72 bytes per element and step, and 256 per element (72ns + 256n)",
    }
}

/// An ode problem on an engine's device: x and the constants of the right-hand side.
pub struct OdeResident<O: Ops> {
    pub x: O::T,
    /// (0, 0, 1, .., n - 2): where f(y)_i reads y.
    previous: O::I,
    /// (0, 1, 1, ..): the elements with a predecessor.
    mask: O::T,
    /// (1, 0, 0, ..): the element driven by x_0 alone.
    first: O::T,
    /// 6, shape `[1]` (RK4's weights are divided by it, as GradBench's code does).
    six: O::T,
    /// The one-hot seed of the last element's gradient.
    last: O::T,
    steps: usize,
}

/// The constants of [`OdeResident`] on an engine `P` (lifted into an AD engine).
pub struct Constants<P: Ops> {
    mask: P::T,
    first: P::T,
    six: P::T,
}

impl<O: Ops> OdeResident<O> {
    fn constants<P: Ops>(&self, lift: impl Fn(&O::T) -> P::T) -> Constants<P> {
        Constants { mask: lift(&self.mask), first: lift(&self.first), six: lift(&self.six) }
    }
}

/// Puts a problem on the engine's device, rounded to `dtype`.
pub fn upload<O: Ops>(o: &O, input: &OdeInput, dtype: DType) -> Result<OdeResident<O>> {
    let n = input.x.len();
    let previous: Vec<i64> = (0..n).map(|i| i.saturating_sub(1) as i64).collect();
    let mask: Vec<f64> = (0..n).map(|i| if i == 0 { 0.0 } else { 1.0 }).collect();
    let first: Vec<f64> = (0..n).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
    let last: Vec<f64> = (0..n).map(|i| if i + 1 == n { 1.0 } else { 0.0 }).collect();
    Ok(OdeResident {
        x: o.tensor(&input.x, &[n], dtype)?,
        previous: o.index(&previous)?,
        mask: o.tensor(&mask, &[n], dtype)?,
        first: o.tensor(&first, &[n], dtype)?,
        six: o.tensor(&[6.0], &[1], dtype)?,
        last: o.tensor(&last, &[n], dtype)?,
        steps: input.s,
    })
}

/// y(2) after the problem's RK4 steps, shape `[n]`, on engine `P` with `x` on `P`.
pub fn solve_on<O: Ops, P: Ops<I = O::I>>(p: &P, x: &P::T, c: &Constants<P>, r: &OdeResident<O>) -> Result<P::T> {
    let h = T_FINAL / r.steps as f64;
    let masked = p.binary(BinaryOp::Mul, x, &c.mask)?;
    let driven = p.binary(BinaryOp::Mul, x, &c.first)?;
    let f = |y: &P::T| -> Result<P::T> {
        let before = p.gather(y, &r.previous, OutOfRange::Error)?;
        p.binary(BinaryOp::Add, &p.binary(BinaryOp::Mul, &masked, &before)?, &driven)
    };
    let mut y = p.zeros_like(x)?;
    for _ in 0..r.steps {
        let k1 = f(&y)?;
        let k2 = f(&p.binary(BinaryOp::Add, &y, &p.scale(&k1, h / 2.0)?)?)?;
        let k3 = f(&p.binary(BinaryOp::Add, &y, &p.scale(&k2, h / 2.0)?)?)?;
        let k4 = f(&p.binary(BinaryOp::Add, &y, &p.scale(&k3, h)?)?)?;
        let weighted = p.binary(BinaryOp::Add, &k1, &p.scale(&k2, 2.0)?)?;
        let weighted = p.binary(BinaryOp::Add, &p.binary(BinaryOp::Add, &weighted, &p.scale(&k3, 2.0)?)?, &k4)?;
        let step = p.binary(BinaryOp::Div, &p.scale(&weighted, h)?, &c.six)?;
        y = p.binary(BinaryOp::Add, &y, &step)?;
    }
    Ok(y)
}

/// y(2) on the device.
pub fn solve<B: Ops>(b: &B, r: &OdeResident<B>) -> Result<B::T> {
    solve_on(b, &r.x, &r.constants(|t| t.clone()), r)
}

/// y(2) and J^T w by reverse mode (`w = None`: the last element's gradient, GradBench's).
pub fn vjp<B: Ops>(b: &B, r: &OdeResident<B>, w: Option<&[f64]>) -> Result<(Vec<f64>, Vec<f64>)> {
    let rev = Reverse::new(b.clone());
    let x = rev.var(r.x.clone());
    let y = solve_on(&rev, &x, &r.constants(|t| rev.lift(t.clone())), r)?;
    let seed = match w {
        Some(w) => b.tensor(w, &[w.len()], r.x.dtype())?,
        None => r.last.clone(),
    };
    let g = rev.backward(&y, seed)?;
    Ok((b.to_vec(y.value())?, b.to_vec(&g.get_or_zeros(b, &x)?)?))
}

/// y(2) and J v by one forward sweep.
pub fn jvp<B: Ops>(b: &B, r: &OdeResident<B>, v: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    let f = Forward::new(b.clone());
    let x = f.dual(r.x.clone(), b.tensor(v, &[v.len()], r.x.dtype())?)?;
    let y = solve_on(&f, &x, &r.constants(|t| f.lift(t.clone())), r)?;
    Ok((b.to_vec(f.primal(&y))?, b.to_vec(&f.tangent(&y)?)?))
}

/// The last element's gradient by forward mode: one sweep per element.
pub fn gradient_forward<B: Ops>(b: &B, r: &OdeResident<B>) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = r.x.numel();
    let mut y = b.to_vec(&solve(b, r)?)?;
    let mut out = Vec::with_capacity(n);
    for j in 0..n {
        let mut e = vec![0.0; n];
        e[j] = 1.0;
        let (yj, column) = jvp(b, r, &e)?;
        y = yj;
        out.push(column[n - 1]);
    }
    Ok((y, out))
}

/// The hand-derived reference in f64: RK4 on y together with the sensitivities S = dy/dx (the
/// variational equation, S row-major n x n); returns y(2) and S(2).
pub fn variational(x: &[f64], steps: usize) -> (Vec<f64>, Vec<f64>) {
    let n = x.len();
    let h = T_FINAL / steps as f64;
    // The right-hand side of (y, S): f(y)_i = x_i y_{i-1} (x_0 for i = 0), and its derivative
    // d f_i / d x_j = delta_ij y_{i-1} + x_i S_{i-1, j} (delta_0j for i = 0).
    let rhs = |y: &[f64], s: &[f64]| -> (Vec<f64>, Vec<f64>) {
        let mut fy = vec![0.0; n];
        let mut fs = vec![0.0; n * n];
        for i in 0..n {
            if i == 0 {
                fy[0] = x[0];
                fs[0] = 1.0;
            } else {
                fy[i] = x[i] * y[i - 1];
                for j in 0..n {
                    fs[i * n + j] = x[i] * s[(i - 1) * n + j];
                }
                fs[i * n + i] += y[i - 1];
            }
        }
        (fy, fs)
    };
    let axpy = |a: &[f64], c: f64, b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(a, b)| a + c * b).collect() };
    let (mut y, mut s) = (vec![0.0; n], vec![0.0; n * n]);
    for _ in 0..steps {
        let (k1, l1) = rhs(&y, &s);
        let (k2, l2) = rhs(&axpy(&y, h / 2.0, &k1), &axpy(&s, h / 2.0, &l1));
        let (k3, l3) = rhs(&axpy(&y, h / 2.0, &k2), &axpy(&s, h / 2.0, &l2));
        let (k4, l4) = rhs(&axpy(&y, h, &k3), &axpy(&s, h, &l3));
        let combine = |v: &mut [f64], a: &[f64], b: &[f64], c: &[f64], d: &[f64]| {
            for (i, v) in v.iter_mut().enumerate() {
                *v += h * (a[i] + 2.0 * b[i] + 2.0 * c[i] + d[i]) / 6.0;
            }
        };
        combine(&mut y, &k1, &k2, &k3, &k4);
        combine(&mut s, &l1, &l2, &l3, &l4);
    }
    (y, s)
}

/// Parses GradBench's input `{"x": [...], "s": s}`.
pub fn parse_input(value: &Json, source: &str) -> WResult<OdeInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let obj = input_object(value, &["x", "s"], &bad)?;
    let s = match obj.get("s") {
        None => return Err(bad("field s: missing".into())),
        Some(v) => v
            .as_u64()
            .filter(|s| (1..=MAX_S).contains(s))
            .ok_or_else(|| bad(format!("field s: expected a whole number in [1, {MAX_S}], got {v}")))?,
    } as usize;
    let x = finite_array(obj, "x", &bad)?;
    if x.len() as u64 > MAX_N {
        return Err(bad(format!("field x: {} elements, more than {MAX_N}", x.len())));
    }
    Ok(OdeInput { x, s })
}

/// ode in the registry: `workload: ode` with n elements and s steps.
pub struct Ode;

impl Workload for Ode {
    fn family(&self) -> &'static str {
        "ode"
    }
    fn about(&self) -> &'static str {
        "GradBench's RK4 solution of a linear ODE and the gradient of its last element"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![sizes("n", 1, MAX_N, "elements of x and y"), sizes("s", 1, MAX_S, "RK4 steps")]
    }
    /// The check size, and at most 4 elements per step: a tool's gradient of the last element
    /// is then not identically 0 (a validation at n = 8, s = 1 would compare zeros).
    fn validation_params(&self, params: &Params) -> Params {
        let p = params.capped_by(&CHECK);
        match (p.int("n"), p.int("s")) {
            (Ok(n), Ok(s)) => p.with("n", Value::Int(n.min(4 * s) as u64)),
            _ => p,
        }
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn footprint(&self, p: &Params) -> Option<Footprint> {
        Some(ode_footprint(p.int("n").ok()?, p.int("s").ok()?))
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        Ok(Box::new(OdeProblem(OdeInput::generate(p.int("n")?, p.int("s")?, seed))))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let input = parse_input(&crate::json::parse_json(&req.text, &req.source)?, &req.source)?;
        crate::validate::validate(&input, &req.source, req.dtype)?;
        let dt = req.dtype;
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let r = upload(d, &input, dt).map_err(bad)?;
            let with_gradient =
                |(y, g): (Vec<f64>, Vec<f64>)| format_object(&[("y", &y[..]), ("gradient", &g[..])], dt);
            Ok(match req.mode.unwrap_or(Mode::Primal) {
                Mode::Primal => format_object(&[("y", &d.to_vec(&solve(d, &r).map_err(bad)?)?[..])], dt),
                Mode::Vjp => with_gradient(vjp(d, &r, None).map_err(bad)?),
                Mode::Jvp | Mode::HessianDiag => with_gradient(gradient_forward(d, &r).map_err(bad)?),
            })
        })
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("s") {
            Some(v) => format!("{name} s={v}"),
            None => name.to_string(),
        }
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("ode")
    }
    /// GradBench's `ode` functions: `primal` returns y(2), `gradient` the gradient of its last
    /// element.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        self.gradbench_prepare(function, input, device, dtype)?.output()
    }
    /// The input parsed, validated and put on the device once, before the timed runs.
    fn gradbench_prepare<'a>(
        &'a self,
        function: &'a str,
        input: &'a Json,
        device: &'a AnyDevice,
        dtype: DType,
    ) -> WResult<Box<dyn GradbenchCall + 'a>> {
        let source = format!("ode.{function} input");
        let input = parse_input(input, &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        let gradient = match function {
            "primal" => false,
            "gradient" => true,
            other => {
                return Err(WorkloadError::BadInput(format!("ode: no function '{other}' (known: primal, gradient)")));
            }
        };
        with_device!(device, |d| {
            let r = upload(d, &input, dtype).map_err(WorkloadError::from_input)?;
            Ok(Box::new(OdeCall { device: d.clone(), r, gradient, dtype, last: None }) as Box<dyn GradbenchCall + 'a>)
        })
    }
}

/// One `adgauge tool` evaluation of an ode function: the input on the device before the timed
/// runs; each run solves (and differentiates) and reads the result back.
struct OdeCall<D: Device> {
    device: D,
    r: OdeResident<D>,
    gradient: bool,
    dtype: DType,
    last: Option<Vec<f64>>,
}

impl<D: Device> GradbenchCall for OdeCall<D> {
    fn run(&mut self) -> WResult<()> {
        let (d, r) = (&self.device, &self.r);
        self.last = Some(if self.gradient { vjp(d, r, None)?.1 } else { d.to_vec(&solve(d, r)?)? });
        Ok(())
    }
    fn output(&mut self) -> WResult<String> {
        if self.last.is_none() {
            self.run()?;
        }
        Ok(format_array(self.last.as_deref().unwrap_or_default(), self.dtype))
    }
}

/// One ode problem.
struct OdeProblem(OdeInput);

impl OdeProblem {
    fn remote_input(&self) -> Json {
        serde_json::json!({"x": self.0.x, "s": self.0.s})
    }
}

impl Problem for OdeProblem {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        crate::validate::validate(&self.0, "the generated case", dtype)?;
        let ones = vec![1.0; self.0.x.len()];
        with_device!(device, |d| {
            let r = upload(d, &self.0, dtype)?;
            Ok(Box::new(OdePrepared { device: d.clone(), r, ones, traces: ModeTraces::default() }) as Box<dyn Prepared>)
        })
    }
    /// The generic checks on y = RK4(x) (n outputs), the full Jacobian at small n, and the
    /// derivatives against the variational equation's: the last element's gradient
    /// (GradBench's), J^T w and J v at seeded w and v.
    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        with_device!(device, |d| {
            let f = OdeFlat::new(cpu.clone(), d.clone(), s.dtype, &self.0, false);
            let n = f.x0.len();
            let (_, sens) = variational(&f.x0, f.input.s);
            let mut rng = adgauge_datasets::rng(s.seed ^ 0x0de);
            let w: Vec<f64> = (0..n).map(|_| rng.random::<f64>() - 0.5).collect();
            let v: Vec<f64> = (0..n).map(|_| rng.random::<f64>() - 0.5).collect();
            let transposed =
                |w: &[f64]| -> Vec<f64> { (0..n).map(|j| (0..n).map(|i| sens[i * n + j] * w[i]).sum()).collect() };
            let mut last = vec![0.0; n];
            last[n - 1] = 1.0;
            let comparisons = vec![
                Comparison { check: CheckKind::Manual, got: f.vjp(&last)?, want: transposed(&last), convention: None },
                Comparison { check: CheckKind::Manual, got: f.vjp(&w)?, want: transposed(&w), convention: None },
                Comparison {
                    check: CheckKind::ManualJvp,
                    got: f.jvp(&v)?,
                    want: (0..n).map(|i| (0..n).map(|j| sens[i * n + j] * v[j]).sum()).collect(),
                    convention: None,
                },
            ];
            let full_jacobian = (n <= FULL_JACOBIAN_MAX).then(|| FullJacobian {
                flat: Box::new(OdeFlat::new(cpu.clone(), d.clone(), s.dtype, &self.0, false)) as Box<dyn FlatFn>,
                tolerance_of: CheckKind::FullJacobian,
            });
            Ok(Validation { flat: Box::new(f), full_jacobian, comparisons })
        })
    }
    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let function = match mode {
            Mode::Primal => "primal",
            Mode::Vjp => "gradient",
            Mode::Jvp | Mode::HessianDiag => return None,
        };
        Some(RemoteCall { function: function.into(), input: self.remote_input() })
    }
    /// The tool's gradient of the last element (one call) as the derivative of that element:
    /// against finite differences of the f64 solve on the CPU and against the variational
    /// equation's.
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, _s: &CheckSettings) -> WResult<Validation> {
        let n = self.0.x.len();
        let output = remote.call("gradient", self.remote_input())?;
        let gradient = flat_gradient(&output, n)?;
        let (_, sens) = variational(&self.0.x, self.0.s);
        let want = sens[(n - 1) * n..].to_vec();
        let f = OdeFlat::new(cpu.clone(), cpu.clone(), DType::F64, &self.0, true);
        let manual = Comparison { check: CheckKind::Manual, got: gradient.clone(), want, convention: None };
        Ok(Validation { flat: Box::new(GivenGradient { f, gradient }), full_jacobian: None, comparisons: vec![manual] })
    }
}

struct OdePrepared<D: Device> {
    device: D,
    r: OdeResident<D>,
    ones: Vec<f64>,
    traces: ModeTraces,
}

impl<D: Device> Prepared for OdePrepared<D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, r) = (&self.device, &self.r);
        Ok(self.traces.run(d, mode, &mut || -> Result<()> {
            match mode {
                Mode::Primal => drop(solve(d, r)?),
                Mode::Vjp => drop(vjp(d, r, None)?),
                Mode::Jvp | Mode::HessianDiag => drop(jvp(d, r, &self.ones)?),
            }
            Ok(())
        })?)
    }
}

/// The solve as a flat function: x (n) to y(2) (n outputs), or to its last element alone
/// (`last_only`); derivatives on `device` in the dtype, f64 values on the CPU. Smooth (a
/// polynomial in x), so finite differences are always meaningful.
struct OdeFlat<D: Device> {
    cpu: Cpu,
    device: D,
    dtype: DType,
    input: OdeInput,
    x0: Vec<f64>,
    last_only: bool,
}

impl<D: Device> OdeFlat<D> {
    fn new(cpu: Cpu, device: D, dtype: DType, input: &OdeInput, last_only: bool) -> Self {
        let input = OdeInput { x: rounded(&input.x, dtype), s: input.s };
        let x0 = input.x.clone();
        OdeFlat { cpu, device, dtype, input, x0, last_only }
    }
}

impl<D: Device> FlatFn for OdeFlat<D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        if self.last_only { 1 } else { self.x0.len() }
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        let input = OdeInput { x: x.to_vec(), s: self.input.s };
        let y = self.cpu.to_vec(&solve(&self.cpu, &upload(&self.cpu, &input, DType::F64)?)?)?;
        Ok(if self.last_only { y[y.len() - 1..].to_vec() } else { y })
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let r = upload(&self.device, &self.input, self.dtype)?;
        if self.last_only {
            let scaled: Vec<f64> = vjp(&self.device, &r, None)?.1.into_iter().map(|g| g * w[0]).collect();
            return Ok(scaled);
        }
        Ok(vjp(&self.device, &r, Some(w))?.1)
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let r = upload(&self.device, &self.input, self.dtype)?;
        let y = jvp(&self.device, &r, v)?.1;
        Ok(if self.last_only { y[y.len() - 1..].to_vec() } else { y })
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;

    use super::*;

    fn on_cpu(input: &OdeInput) -> (Vec<f64>, Vec<f64>) {
        let cpu = Cpu::new(Some(1)).unwrap();
        vjp(&cpu, &upload(&cpu, input, DType::F64).unwrap(), None).unwrap()
    }

    /// GradBench's `ode.hpp` transcribed in f64, loop for loop: the engine must equal it bit for
    /// bit on the CPU (the same operations in the same order).
    fn transcribed(x: &[f64], s: usize) -> Vec<f64> {
        let n = x.len();
        let h = 2.0 / s as f64;
        let f = |y: &[f64]| -> Vec<f64> { (0..n).map(|i| if i == 0 { x[0] } else { x[i] * y[i - 1] }).collect() };
        let mut y = vec![0.0; n];
        for _ in 0..s {
            let k1 = f(&y);
            let k2 = f(&(0..n).map(|i| y[i] + h * k1[i] / 2.0).collect::<Vec<_>>());
            let k3 = f(&(0..n).map(|i| y[i] + h * k2[i] / 2.0).collect::<Vec<_>>());
            let k4 = f(&(0..n).map(|i| y[i] + h * k3[i]).collect::<Vec<_>>());
            for i in 0..n {
                y[i] += h * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]) / 6.0;
            }
        }
        y
    }

    /// For n <= 4 the exact solution y_i(t) = x_0 .. x_i t^(i+1) / (i+1)! is a polynomial of
    /// degree <= 4, which RK4 integrates exactly at any step count: y_3(2) = x_0 x_1 x_2 x_3 16/24,
    /// and its gradient is the product of the other three times 2/3.
    #[test]
    fn a_short_chain_is_the_closed_form_solution() {
        let x = [0.5, 1.5, 2.0, 0.75];
        let p = x.iter().product::<f64>();
        for s in [1, 3] {
            let (y, g) = on_cpu(&OdeInput { x: x.to_vec(), s });
            let want_y = [2.0 * x[0], x[0] * x[1] * 2.0, x[0] * x[1] * x[2] * 8.0 / 6.0, p * 16.0 / 24.0];
            assert!(y.iter().zip(&want_y).all(|(a, b)| (a - b).abs() < 1e-14), "s {s}: {y:?} vs {want_y:?}");
            let want_g: Vec<f64> = x.iter().map(|xi| p / xi * 2.0 / 3.0).collect();
            assert!(g.iter().zip(&want_g).all(|(a, b)| (a - b).abs() < 1e-14), "s {s}: {g:?} vs {want_g:?}");
        }
    }

    #[test]
    fn the_solve_is_gradbench_code_bit_for_bit_and_the_gradient_the_variational_one() {
        for (n, s) in [(1, 1), (8, 2), (13, 5), (30, 3)] {
            let input = OdeInput::generate(n, s, 7 + n as u64);
            let (y, g) = on_cpu(&input);
            assert_eq!(y, transcribed(&input.x, s), "n {n} s {s}");
            let (vy, sens) = variational(&input.x, s);
            assert!(vy.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 1e-15 * a.abs().max(1e-300)), "n {n} s {s}");
            let row = &sens[(n - 1) * n..];
            assert!(g.iter().zip(row).all(|(a, b)| (a - b).abs() <= 1e-13 * b.abs().max(1e-300)), "{g:?} vs {row:?}");
        }
    }

    #[test]
    fn elements_beyond_four_per_step_are_zero() {
        // One step reaches y_0 .. y_3; the last element of 5 then has no dependence on x.
        let (y, g) = on_cpu(&OdeInput { x: vec![0.9; 5], s: 1 });
        assert!(y[..4].iter().all(|&v| v > 0.0), "{y:?}");
        assert_eq!((y[4], g), (0.0, vec![0.0; 5]));
        let (y, _) = on_cpu(&OdeInput { x: vec![0.9; 9], s: 2 });
        assert!(y[7] > 0.0 && y[8] == 0.0, "{y:?}");
    }

    #[test]
    fn validation_keeps_the_last_element_reachable() {
        let at = |n: u64, s: u64| {
            let p = Ode.validation_params(&Params::ints(&[("n", n), ("s", s)]));
            (p.int("n").unwrap(), p.int("s").unwrap())
        };
        assert_eq!(at(1000, 1), (4, 1));
        assert_eq!(at(100000, 100), (8, 2));
        assert_eq!(at(3, 10), (3, 2));
    }

    #[test]
    fn malformed_inputs_name_their_field() {
        let msg = |v: Json| match parse_input(&v, "in.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert!(msg(serde_json::json!({"x": [1]})).contains("field s: missing"));
        assert!(msg(serde_json::json!({"x": [1], "s": 0})).contains("field s: expected a whole number in [1,"));
        assert!(msg(serde_json::json!({"x": [1], "s": 1.5})).contains("field s"));
        assert!(msg(serde_json::json!({"x": [], "s": 1})).contains("field x: is empty"));
        assert!(msg(serde_json::json!({"x": [1, "-inf"], "s": 1})).contains("field x[1]: must be finite"));
        assert!(msg(serde_json::json!({"x": [1], "s": 1, "t": 2})).contains("unknown field 't'"));
        let ok = parse_input(&serde_json::json!({"x": [0.5], "s": 3, "min_runs": 1, "min_seconds": 0}), "in").unwrap();
        assert_eq!(ok, OdeInput { x: vec![0.5], s: 3 });
    }
}
