//! GradBench's `hello` eval, the protocol smoke test every GradBench tool implements: f(x) = x^2
//! (`square`) and its derivative f'(x) = 2x (`double`), on one number. GradBench sends the bare
//! number as the input (no object, no `min_runs`) and expects a bare number back; its eval
//! starts at x = 1 and alternates `square` and `double` on the previous output (square 1, 2, 8,
//! 128; double 1, 4, 64, 16384).
//!
//! Written against the op API as `x * x` (a product of the variable with itself, so the reverse
//! engine sums two adjoint contributions); the hand-derived reference is 2x. `adgauge eval
//! hello` reads the same bare number and prints `{"objective": x^2}`, with `"gradient": [2x]`
//! in vjp and jvp modes.

use adgauge_backends::prelude::*;
use adgauge_backends::{AnyDevice, BinaryOp, DType, Device, Forward, Ops, Result, Reverse, with_device};
use serde_json::Value as Json;

use crate::json::{format_number, kind, objective_json, parse_number};
use crate::objective::{ObjectiveProblem, RemoteModule, ScalarObjective};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalRequest, Mode, ParamKind, ParamSpec, Params, Problem, Value, WResult, Workload, WorkloadError,
};

/// GradBench's first input.
const START: f64 = 1.0;

/// The point `adgauge check` differentiates at: neither 0 nor 1, where wrong derivatives (x, x^2,
/// 1, x + 1) would agree with 2x or x^2.
const CHECK_X: f64 = 1.5;

/// One hello input: the number.
#[derive(Clone, Debug, PartialEq)]
pub struct HelloInput {
    pub x: f64,
}

impl CheckedInput for HelloInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("input", std::slice::from_ref(&self.x))]
    }
}

/// x * x, shape `[1]`.
pub fn square<O: Ops>(o: &O, x: &O::T) -> Result<O::T> {
    o.binary(BinaryOp::Mul, x, x)
}

/// x^2 and its derivative by reverse mode.
pub fn double<B: Ops>(b: &B, x: &B::T) -> Result<(f64, f64)> {
    let r = Reverse::new(b.clone());
    let v = r.var(x.clone());
    let y = square(&r, &v)?;
    let g = r.backward(&y, b.full(&[1], 1.0, x.dtype())?)?;
    Ok((b.to_vec(y.value())?[0], b.to_vec(&g.get_or_zeros(b, &v)?)?[0]))
}

/// x^2 and its derivative along `v` by one forward sweep.
pub fn directional<B: Ops>(b: &B, x: &B::T, v: f64) -> Result<(f64, f64)> {
    let f = Forward::new(b.clone());
    let xd = f.dual(x.clone(), b.tensor(&[v], &[1], x.dtype())?)?;
    let y = square(&f, &xd)?;
    Ok((b.to_vec(f.primal(&y))?[0], b.to_vec(&f.tangent(&y)?)?[0]))
}

/// Parses GradBench's input: one number (finite).
pub fn parse_input(value: &Json, source: &str) -> WResult<HelloInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    match value {
        Json::Number(_) | Json::String(_) => match parse_number(value) {
            Ok(x) if x.is_finite() => Ok(HelloInput { x }),
            Ok(x) => Err(bad(format!("input: must be finite, got {x}"))),
            Err(m) => Err(bad(format!("input: {m}"))),
        },
        other => Err(bad(format!("input: expected a number (GradBench's hello input), found {}", kind(other)))),
    }
}

/// hello in the registry: `workload: hello` at the number `x`.
pub struct Hello;

impl Workload for Hello {
    fn family(&self) -> &'static str {
        "hello"
    }
    fn about(&self) -> &'static str {
        "GradBench's protocol smoke test: x^2 and its derivative 2x"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![ParamSpec {
            key: "x",
            kind: ParamKind::Float { min: -1e150, max: 1e150 },
            default: Some("1.0"),
            column: Some("x"),
            legacy: None,
            doc: "the number squared (GradBench starts at 1)",
        }]
    }
    fn validation_params(&self, params: &Params) -> Params {
        params.clone()
    }
    fn check_params(&self, _name: &str) -> Params {
        Params::new(&[("x", Value::Float(CHECK_X))])
    }
    fn generate(&self, p: &Params, _seed: u64) -> WResult<Box<dyn Problem>> {
        // No random input: the number is the case's parameter (GradBench's is fixed too).
        let x = p.float("x").unwrap_or(START);
        Ok(Box::new(ObjectiveProblem::<HelloObjective>(HelloInput { x })))
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let input = parse_input(&crate::json::parse_json(&req.text, &req.source)?, &req.source)?;
        crate::validate::validate(&input, &req.source, req.dtype)?;
        let dt = req.dtype;
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = d.tensor(&[input.x], &[1], dt).map_err(bad)?;
            Ok(match req.mode.unwrap_or(Mode::Primal) {
                Mode::Primal => objective_json(d.to_vec(&square(d, &x).map_err(bad)?)?[0], None, dt),
                Mode::Vjp => {
                    let (y, g) = double(d, &x).map_err(bad)?;
                    objective_json(y, Some(&[g]), dt)
                }
                Mode::Jvp | Mode::HessianDiag => {
                    let (y, g) = directional(d, &x, 1.0).map_err(bad)?;
                    objective_json(y, Some(&[g]), dt)
                }
            })
        })
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("hello")
    }
    /// GradBench's `hello` functions: `square` returns x^2, `double` its derivative 2x (by
    /// reverse mode), each a bare number.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("hello.{function} input");
        let input = parse_input(input, &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        let bad = WorkloadError::from_input;
        with_device!(device, |d| {
            let x = d.tensor(&[input.x], &[1], dtype).map_err(bad)?;
            match function {
                "square" => Ok(format_number(d.to_vec(&square(d, &x).map_err(bad)?)?[0], dtype)),
                "double" => Ok(format_number(double(d, &x).map_err(bad)?.1, dtype)),
                other => Err(WorkloadError::BadInput(format!("hello: no function '{other}' (known: square, double)"))),
            }
        })
    }
}

/// hello as a scalar objective of its one number.
struct HelloObjective;

impl ScalarObjective for HelloObjective {
    type Remote = Self;
    type Resident<D: Device> = D::T;
    type Input = HelloInput;
    fn rounded(input: &HelloInput, dtype: DType) -> HelloInput {
        HelloInput { x: dtype.round(input.x) }
    }
    fn params(input: &HelloInput) -> Vec<f64> {
        vec![input.x]
    }
    fn with_params(_input: &HelloInput, x: &[f64]) -> HelloInput {
        HelloInput { x: x[0] }
    }
    fn upload<D: Device>(d: &D, input: &HelloInput, dtype: DType) -> Result<D::T> {
        d.tensor(&[input.x], &[1], dtype)
    }
    fn objective<D: Device>(d: &D, x: &D::T) -> Result<D::T> {
        square(d, x)
    }
    fn gradient<D: Device>(d: &D, x: &D::T) -> Result<Vec<f64>> {
        Ok(vec![double(d, x)?.1])
    }
    fn directional<D: Device>(d: &D, x: &D::T, v: &[f64]) -> Result<f64> {
        Ok(directional(d, x, v[0])?.1)
    }
    /// d/dx x^2 = 2x (exact in either dtype).
    fn manual_gradient(input: &HelloInput, _dtype: DType) -> Vec<f64> {
        vec![2.0 * input.x]
    }
    fn remote(input: &HelloInput) -> Option<RemoteModule> {
        Some(RemoteModule { primal: "square", gradient: "double", input: serde_json::json!(input.x) })
    }
    /// `double` answers a bare number.
    fn remote_gradient(output: &Json, _input: &HelloInput) -> Result<Vec<f64>> {
        let x = parse_number(output).map_err(|m| adgauge_backends::OpError::Device(format!("double output: {m}")))?;
        Ok(vec![x])
    }
    fn full_jacobian() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::Cpu;

    use super::*;

    #[test]
    fn square_and_double_follow_gradbench_sequence() {
        // GradBench's eval: x = 1; four times y = square(x), x = double(y).
        let cpu = Cpu::new(Some(1)).unwrap();
        let (mut x, mut squares, mut doubles) = (1.0, Vec::new(), Vec::new());
        for _ in 0..4 {
            let t = cpu.tensor(&[x], &[1], DType::F64).unwrap();
            let y = cpu.to_vec(&square(&cpu, &t).unwrap()).unwrap()[0];
            squares.push(y);
            let (yy, g) = double(&cpu, &cpu.tensor(&[y], &[1], DType::F64).unwrap()).unwrap();
            assert_eq!(yy, y * y);
            doubles.push(g);
            x = g;
        }
        assert_eq!(squares, [1.0, 4.0, 64.0, 16384.0]);
        assert_eq!(doubles, [2.0, 8.0, 128.0, 32768.0]);
        let (y, dy) = directional(&cpu, &cpu.tensor(&[-3.0], &[1], DType::F32).unwrap(), 0.5).unwrap();
        assert_eq!((y, dy), (9.0, -3.0));
    }

    #[test]
    fn inputs_are_bare_finite_numbers() {
        let msg = |v: Json| match parse_input(&v, "in").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert_eq!(parse_input(&serde_json::json!(2.5), "in").unwrap(), HelloInput { x: 2.5 });
        assert!(msg(serde_json::json!({"x": 1})).contains("in: input: expected a number"));
        assert!(msg(serde_json::json!("nan")).contains("in: input: must be finite"));
        assert!(msg(serde_json::json!("two")).contains("in: input: expected a number or"));
        let e = crate::validate::validate(&HelloInput { x: 1e39 }, "in", DType::F32).unwrap_err().to_string();
        assert!(e.contains("in: field input[0]: 1e39 overflows f32"), "{e}");
    }
}
