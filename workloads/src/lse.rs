//! GradBench's `lse` eval: the log-sum-exp of a vector and its gradient, written from its
//! primitive parts as the eval asks (not the engine's `logsumexp_axis` primitive with its own
//! rule):
//!
//! ```text
//! a = max_i x_i
//! y = a + log(sum_i exp(x_i - a))
//! ```
//!
//! The engines differentiate through the maximum (its adjoint reaches one winner and cancels
//! against the shifted terms'), the exponentials and the sum; the hand-derived reference is the
//! softmax `exp(x_i - y)`, computed on the host in f64. GradBench's inputs are `{"x": [n
//! numbers]}` (uniform in [0, 1) in its eval, n from 2500 to 1280000 doubling); `adgauge eval
//! lse` reads the same object and prints `{"objective": y}`, with `"gradient"` in vjp and jvp
//! modes (jvp: one forward sweep per element, for small inputs).

use adgauge_backends::prelude::*;
use adgauge_backends::{
    AnyDevice, BinaryOp, DType, Device, Forward, HistOp, Ops, Result, Reverse, UnaryOp, with_device,
};
use rand::RngExt;
use serde_json::Value as Json;

use crate::json::{kind, parse_number};
use crate::objective::{
    ObjectiveProblem, RemoteModule, ScalarObjective, gradient_by_unit_directions, scalar_eval_json,
};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalRequest, Footprint, GradbenchCall, Mode, ParamSpec, Params, Problem, WResult, Workload, WorkloadError, rounded,
    sizes,
};

/// Most elements a case may have.
const MAX_N: usize = 1 << 28;

/// Validation size: every element gets its own finite difference and forward sweep.
const CHECK: [(&str, u64); 1] = [("n", 24)];

/// One lse input: the vector.
#[derive(Clone, Debug, PartialEq)]
pub struct LseInput {
    pub x: Vec<f64>,
}

impl LseInput {
    /// GradBench's generator shape: x uniform in [0, 1), from the seeded generator.
    pub fn generate(n: usize, seed: u64) -> LseInput {
        let mut rng = adgauge_datasets::rng(seed);
        LseInput { x: (0..n).map(|_| rng.random::<f64>()).collect() }
    }
}

impl CheckedInput for LseInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("x", &self.x)]
    }
    fn footprint(&self) -> Option<(String, Footprint)> {
        Some((format!("field x: {} elements", self.x.len()), lse_footprint(self.x.len())))
    }
}

/// lse's memory: the vector, its shifted copy, the exponentials and their adjoints (measured on
/// the CPU in reverse mode: 11.5 MB at n = 160000, 72 bytes per element).
fn lse_footprint(n: usize) -> Footprint {
    Footprint { bytes: 96 * n as u128, key: "n", formula: "about 96 bytes per element (96n)" }
}

/// a + log(sum(exp(x - a))) with a = max(x), shape `[1]`.
pub fn objective<O: Ops>(o: &O, x: &O::T) -> Result<O::T> {
    let a = o.reduce(HistOp::Max, x)?;
    let shifted = o.binary(BinaryOp::Sub, x, &a)?;
    let total = o.sum(&o.unary(UnaryOp::Exp, &shifted)?)?;
    o.binary(BinaryOp::Add, &a, &o.unary(UnaryOp::Log, &total)?)
}

/// Objective and gradient by reverse mode.
pub fn gradient<B: Ops>(b: &B, x: &B::T) -> Result<(f64, Vec<f64>)> {
    let r = Reverse::new(b.clone());
    let v = r.var(x.clone());
    let y = objective(&r, &v)?;
    let g = r.backward(&y, b.full(&[1], 1.0, x.dtype())?)?;
    Ok((b.to_vec(y.value())?[0], b.to_vec(&g.get_or_zeros(b, &v)?)?))
}

/// Objective and the derivative along `v` by one forward sweep.
pub fn directional<B: Ops>(b: &B, x: &B::T, v: &[f64]) -> Result<(f64, f64)> {
    let f = Forward::new(b.clone());
    let xd = f.dual(x.clone(), b.tensor(v, &[v.len()], x.dtype())?)?;
    let y = objective(&f, &xd)?;
    Ok((b.to_vec(f.primal(&y))?[0], b.to_vec(&f.tangent(&y)?)?[0]))
}

/// Objective and gradient by forward mode: one sweep per element.
pub fn gradient_forward<B: Ops>(b: &B, x: &B::T) -> Result<(f64, Vec<f64>)> {
    let value = b.to_vec(&objective(b, x)?)?[0];
    gradient_by_unit_directions(x.numel(), value, |e| directional(b, x, e))
}

/// The hand-derived gradient, the softmax, in f64: `exp(x_i - m) / sum_j exp(x_j - m)` with m
/// the maximum (any shift gives the same quotient; the maximum keeps every exponential <= 1).
pub fn softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let total: f64 = e.iter().sum();
    e.into_iter().map(|v| v / total).collect()
}

/// The finite numbers of array `field` of `obj` (at least one), naming the field and element of
/// what is wrong.
pub(crate) fn finite_array(
    obj: &serde_json::Map<String, Json>,
    field: &str,
    bad: &dyn Fn(String) -> WorkloadError,
) -> WResult<Vec<f64>> {
    match obj.get(field) {
        Some(Json::Array(a)) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(j, v)| match parse_number(v) {
                Ok(x) if x.is_finite() => Ok(x),
                Ok(x) => Err(bad(format!("field {field}[{j}]: must be finite, got {x}"))),
                Err(m) => Err(bad(format!("field {field}[{j}]: {m}"))),
            })
            .collect(),
        Some(Json::Array(_)) => Err(bad(format!("field {field}: is empty"))),
        Some(v) => Err(bad(format!("field {field}: expected an array of numbers, found {}", kind(v)))),
        None => Err(bad(format!("field {field}: missing"))),
    }
}

/// The object of an input, refusing fields other than `fields` (GradBench's `min_runs` and
/// `min_seconds` are accepted and ignored, so its messages can be replayed).
pub(crate) fn input_object<'a>(
    value: &'a Json,
    fields: &[&str],
    bad: &dyn Fn(String) -> WorkloadError,
) -> WResult<&'a serde_json::Map<String, Json>> {
    let Json::Object(obj) = value else {
        return Err(bad(format!("expected a JSON object with fields {}, found {}", fields.join(", "), kind(value))));
    };
    if let Some(extra) =
        obj.keys().find(|k| !fields.contains(&k.as_str()) && !["min_runs", "min_seconds"].contains(&k.as_str()))
    {
        return Err(bad(format!("unknown field '{extra}' (expected {})", fields.join(", "))));
    }
    Ok(obj)
}

/// Parses GradBench's input `{"x": [...]}`.
pub fn parse_input(value: &Json, source: &str) -> WResult<LseInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let obj = input_object(value, &["x"], &bad)?;
    let x = finite_array(obj, "x", &bad)?;
    if x.len() > MAX_N {
        return Err(bad(format!("field x: {} elements, more than {MAX_N}", x.len())));
    }
    Ok(LseInput { x })
}

/// lse in the registry: `workload: lse` with n elements.
pub struct Lse;

impl Workload for Lse {
    fn family(&self) -> &'static str {
        "lse"
    }
    fn about(&self) -> &'static str {
        "GradBench's log-sum-exp (from max and sum) and its gradient, the softmax"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![sizes("n", 1, MAX_N as u64, "elements")]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.capped_by(&CHECK)
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::ints(&CHECK)
    }
    fn footprint(&self, p: &Params) -> Option<Footprint> {
        Some(lse_footprint(p.int("n").ok()?))
    }
    fn generate(&self, p: &Params, seed: u64) -> WResult<Box<dyn Problem>> {
        Ok(Box::new(ObjectiveProblem::<LseObjective>(LseInput::generate(p.int("n")?, seed))))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let input = parse_input(&crate::json::parse_json(&req.text, &req.source)?, &req.source)?;
        crate::validate::validate(&input, &req.source, req.dtype)?;
        let (dt, mode) = (req.dtype, req.mode.unwrap_or(Mode::Primal));
        with_device!(device, |d| {
            let x = d.tensor(&input.x, &[input.x.len()], dt).map_err(WorkloadError::from_input)?;
            scalar_eval_json(d, mode, dt, &x, objective, gradient, gradient_forward)
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("lse")
    }
    /// GradBench's `lse` functions: `primal` returns the objective, `gradient` the gradient.
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
        let source = format!("lse.{function} input");
        let input = parse_input(input, &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        crate::objective::primal_or_gradient_call::<LseObjective>("lse", function, &input, device, dtype)
    }
}

/// lse as a scalar objective of its vector.
struct LseObjective;

impl ScalarObjective for LseObjective {
    type Remote = Self;
    type Resident<D: Device> = D::T;
    type Input = LseInput;
    fn rounded(input: &LseInput, dtype: DType) -> LseInput {
        LseInput { x: rounded(&input.x, dtype) }
    }
    fn params(input: &LseInput) -> Vec<f64> {
        input.x.clone()
    }
    fn with_params(_input: &LseInput, x: &[f64]) -> LseInput {
        LseInput { x: x.to_vec() }
    }
    fn upload<D: Device>(d: &D, input: &LseInput, dtype: DType) -> Result<D::T> {
        d.tensor(&input.x, &[input.x.len()], dtype)
    }
    fn objective<D: Device>(d: &D, x: &D::T) -> Result<D::T> {
        objective(d, x)
    }
    fn gradient<D: Device>(d: &D, x: &D::T) -> Result<Vec<f64>> {
        Ok(gradient(d, x)?.1)
    }
    fn directional<D: Device>(d: &D, x: &D::T, v: &[f64]) -> Result<f64> {
        Ok(directional(d, x, v)?.1)
    }
    fn manual_gradient(input: &LseInput, _dtype: DType) -> Vec<f64> {
        softmax(&input.x)
    }
    fn forward_gradient<D: Device>(d: &D, x: &D::T, _n: usize) -> Option<Result<(f64, Vec<f64>)>> {
        Some(gradient_forward(d, x))
    }
    fn remote(input: &LseInput) -> Option<RemoteModule> {
        Some(RemoteModule { primal: "primal", gradient: "gradient", input: serde_json::json!({"x": input.x}) })
    }
    fn full_jacobian() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;

    use super::*;

    /// x = (0, ln 3): sum exp = 1 + 3 = 4, y = ln 4, softmax = (1/4, 3/4).
    #[test]
    fn a_two_element_vector_matches_the_hand_computation() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let x = cpu.tensor(&[0.0, 3f64.ln()], &[2], DType::F64).unwrap();
        let (y, g) = gradient(&cpu, &x).unwrap();
        assert!((y - 4f64.ln()).abs() < 1e-15, "{y}");
        assert!((g[0] - 0.25).abs() < 1e-15 && (g[1] - 0.75).abs() < 1e-15, "{g:?}");
        let (fy, fg) = gradient_forward(&cpu, &x).unwrap();
        assert!((fy - 4f64.ln()).abs() < 1e-15 && (fg[0] - 0.25).abs() < 1e-15 && (fg[1] - 0.75).abs() < 1e-15);
    }

    #[test]
    fn validation_holds_evals_forward_gradient_against_the_softmax() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let input = LseInput::generate(6, 3);
        let v =
            crate::objective::ObjectiveFlat::<LseObjective, Cpu>::validation(&cpu, &cpu, DType::F64, &input).unwrap();
        let forward = v.comparisons.iter().find(|c| c.check == crate::workload::CheckKind::ManualJvp).unwrap();
        assert_eq!(forward.got.len(), 6);
        assert!(
            forward.got.iter().zip(&forward.want).all(|(a, b)| (a - b).abs() < 1e-14),
            "{:?} {:?}",
            forward.got,
            forward.want
        );
        // The reference is the softmax: positive, summing to 1.
        assert!(forward.want.iter().all(|&p| p > 0.0) && (forward.want.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_gradient_is_the_softmax_even_at_large_and_tied_values() {
        // Shifting by the maximum keeps exp from overflowing at 1000; tied maxima share the mass.
        let cpu = Cpu::new(Some(1)).unwrap();
        let xs = [1000.0, 999.0, 1000.0, -5.0];
        let (y, g) = gradient(&cpu, &cpu.tensor(&xs, &[4], DType::F64).unwrap()).unwrap();
        let total = 2.0 + (-1f64).exp() + (-1005f64).exp();
        assert!((y - (1000.0 + total.ln())).abs() < 1e-12, "{y}");
        let want = [1.0 / total, (-1f64).exp() / total, 1.0 / total, (-1005f64).exp() / total];
        assert!(g.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-15), "{g:?} vs {want:?}");
        assert!(softmax(&xs).iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-15));
    }

    #[test]
    fn malformed_inputs_name_their_field() {
        let msg = |v: Json| match parse_input(&v, "in.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert!(msg(serde_json::json!([1])).contains("in.json: expected a JSON object"));
        assert!(msg(serde_json::json!({})).contains("field x: missing"));
        assert!(msg(serde_json::json!({"x": []})).contains("field x: is empty"));
        assert!(msg(serde_json::json!({"x": [1, "inf"]})).contains("field x[1]: must be finite"));
        assert!(msg(serde_json::json!({"x": [1, true]})).contains("field x[1]: expected a number"));
        assert!(msg(serde_json::json!({"x": [1], "y": 2})).contains("unknown field 'y'"));
        let ok = parse_input(&serde_json::json!({"x": [1, 2.5], "min_runs": 1, "min_seconds": 1}), "in").unwrap();
        assert_eq!(ok.x, [1.0, 2.5]);
    }
}
