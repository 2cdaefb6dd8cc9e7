//! GradBench's `saddle` eval (Pearlmutter and Siskind): the saddle point of
//!
//! ```text
//! f(p1, p2) = (p1_0^2 + p1_1^2) - (p2_0^2 + p2_1^2)
//! ```
//!
//! as `r1 = argmin_p1 max_p2 f(p1, p2)`, then `r2 = argmax_p2 f(r1, p2)`, every descent
//! GradBench's ([`crate::nested::argmin`]) from the input's `start`. The outer objective
//! `max_p2 f(p1, p2)` runs an inner gradient ascent whose gradients are taken by AD inside the
//! outer derivative: nested AD ([`crate::nested`]), in GradBench's four variants `ff`, `fr`,
//! `rf`, `rr` (outer mode, inner mode; `r2`'s ascent uses the outer mode). The inner gradient in
//! closed form is `-2 p2`, the reference of the `perturbation` check. GradBench's input is
//! `{"start": [s0, s1]}`, its output `[r1_0, r1_1, r2_0, r2_1]`; `adgauge eval saddle` reads the
//! same input and prints `{"r1": [..], "r2": [..]}` (vjp: outer reverse, jvp: outer forward,
//! `--inner forward|reverse`).

use adgauge_backends::prelude::*;
use adgauge_backends::{AnyDevice, DType, Result, with_device};
use serde_json::Value as Json;

use crate::json::{format_array, format_object, kind, parse_number};
use crate::nested::{AdMode, InnerFn, InnerGrad, Nested, NestedProblem, Variant, argmax};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalOption, EvalRequest, Mode, ParamKind, ParamSpec, Params, Problem, WResult, Workload, WorkloadError,
};

/// GradBench's default start.
pub const DEFAULT_START: [f64; 2] = [1.0, 1.0];

/// One saddle problem: the start of every descent.
#[derive(Clone, Debug, PartialEq)]
pub struct SaddleInput {
    pub start: [f64; 2],
}

impl CheckedInput for SaddleInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("start", &self.start)]
    }
}

/// f(p1, p2) with p1 captured from the outer level.
struct SaddleFn;

impl InnerFn for SaddleFn {
    fn value<E: Ops>(&self, e: &E, captured: &[E::T], x: &E::T) -> Result<E::T> {
        objective(e, &captured[0], x)
    }
    fn closed_gradient<E: Ops>(&self, e: &E, _captured: &[E::T], x: &E::T) -> Result<E::T> {
        e.scale(x, -2.0)
    }
}

/// f(p1, p2), shape `[1]`.
pub fn objective<E: Ops>(e: &E, p1: &E::T, p2: &E::T) -> Result<E::T> {
    let sq = |p: &E::T| e.sum(&e.unary(adgauge_backends::UnaryOp::Square, p)?);
    e.sub(&sq(p1)?, &sq(p2)?)
}

/// saddle as a [`Nested`] workload: the outer objective `max_p2 f(p1, p2)` of p1.
pub struct SaddleNested;

impl Nested for SaddleNested {
    const MODULE: &'static str = "saddle";
    type Input = SaddleInput;

    fn point(input: &SaddleInput) -> Vec<f64> {
        input.start.to_vec()
    }
    fn rounded(input: &SaddleInput, dtype: DType) -> SaddleInput {
        SaddleInput { start: input.start.map(|x| dtype.round(x)) }
    }
    fn objective<O: Ops, G: InnerGrad<O>>(o: &O, g: &G, input: &SaddleInput, p1: &O::T) -> Result<O::T> {
        let captured = [p1.clone()];
        let start = o.tensor(&input.start, &[2], p1.dtype())?;
        let p2 = argmax(o, &mut |p2| objective(o, p1, p2), &mut |p2| g.gradient(o, &SaddleFn, &captured, p2), start)?;
        objective(o, p1, &p2)
    }
    fn finish<D: Ops, G: InnerGrad<D>>(d: &D, g: &G, input: &SaddleInput, r1: D::T) -> Result<Vec<f64>> {
        let captured = [r1.clone()];
        let start = d.tensor(&input.start, &[2], r1.dtype())?;
        let r2 = argmax(d, &mut |p2| objective(d, &r1, p2), &mut |p2| g.gradient(d, &SaddleFn, &captured, p2), start)?;
        Ok([d.to_vec(&r1)?, d.to_vec(&r2)?].concat())
    }
    fn input_json(input: &SaddleInput) -> Json {
        serde_json::json!({"start": input.start})
    }
}

/// Parses GradBench's input `{"start": [s0, s1]}` (`min_runs` and `min_seconds` accepted and
/// ignored, so GradBench's messages can be replayed).
pub fn parse_input(text: &str, source: &str) -> WResult<SaddleInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let value = crate::json::parse_json(text, source)?;
    let Json::Object(obj) = value else {
        return Err(bad(format!("expected a JSON object with field start, found {}", kind(&value))));
    };
    if let Some(extra) = obj.keys().find(|k| !["start", "min_runs", "min_seconds"].contains(&k.as_str())) {
        return Err(bad(format!("unknown field '{extra}' (expected start)")));
    }
    let start = match obj.get("start") {
        None => return Err(bad("field start: missing".into())),
        Some(Json::Array(a)) if a.len() == 2 => {
            let mut start = [0.0; 2];
            for (j, v) in a.iter().enumerate() {
                start[j] = match parse_number(v) {
                    Ok(x) if x.is_finite() => x,
                    Ok(x) => return Err(bad(format!("field start[{j}]: must be finite, got {x}"))),
                    Err(m) => return Err(bad(format!("field start[{j}]: {m}"))),
                };
            }
            start
        }
        Some(Json::Array(a)) => return Err(bad(format!("field start: has {} numbers, expected 2", a.len()))),
        Some(v) => return Err(bad(format!("field start: expected an array of 2 numbers, found {}", kind(v)))),
    };
    Ok(SaddleInput { start })
}

/// The `inner` mode of `eval`'s option or a case's parameter.
pub(crate) fn inner_mode(name: Option<&str>, source: &str) -> WResult<AdMode> {
    match name {
        None => Ok(AdMode::Forward),
        Some(n) => AdMode::from_name(n)
            .ok_or_else(|| WorkloadError::BadInput(format!("{source}: inner mode '{n}' is not forward or reverse"))),
    }
}

/// The `inner` key of the nested workloads' suites.
pub(crate) fn inner_spec() -> ParamSpec {
    ParamSpec {
        key: "inner",
        kind: ParamKind::Names { choices: AdMode::ALL.iter().map(|m| m.name().to_string()).collect() },
        default: Some(r#"["forward", "reverse"]"#),
        column: Some("inner"),
        legacy: None,
        doc: "the inner gradient's AD mode (vjp times GradBench's r<inner>, jvp its f<inner>)",
    }
}

/// The `--inner` option of the nested workloads' `eval`.
pub(crate) fn inner_option() -> EvalOption {
    EvalOption {
        flag: "inner",
        takes_value: true,
        help: "the inner gradient's AD mode: forward (default) or reverse; vjp and jvp choose the outer one",
    }
}

/// The GradBench variant `eval` runs in `mode` with `--inner`.
pub(crate) fn eval_variant(req: &EvalRequest) -> WResult<Variant> {
    let inner = inner_mode(req.options.get("inner").map(String::as_str), "--inner")?;
    let outer = match req.mode.unwrap_or(Mode::Vjp) {
        Mode::Vjp => AdMode::Reverse,
        Mode::Jvp => AdMode::Forward,
        other => return Err(WorkloadError::BadInput(format!("{}: no mode {other} (vjp or jvp)", req.name))),
    };
    Ok(Variant { outer, inner })
}

/// The GradBench function named `function` of `module`.
pub(crate) fn gradbench_variant(module: &str, function: &str) -> WResult<Variant> {
    Variant::from_name(function)
        .ok_or_else(|| WorkloadError::BadInput(format!("{module}: no function '{function}' (known: ff, fr, rf, rr)")))
}

/// saddle in the registry: `workload: saddle` with the inner mode and the start.
pub struct Saddle;

impl Workload for Saddle {
    fn family(&self) -> &'static str {
        "saddle"
    }
    fn about(&self) -> &'static str {
        "GradBench's saddle point by nested gradient descent (nested AD: ff, fr, rf, rr)"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![
            inner_spec(),
            ParamSpec {
                key: "start",
                kind: ParamKind::Float { min: -1e3, max: 1e3 },
                default: Some("1.0"),
                column: Some("start"),
                legacy: None,
                doc: "both coordinates of the start point (GradBench's default: 1)",
            },
        ]
    }
    /// Every case is validated at GradBench's start (1, 1), whatever start it times: from there
    /// the inner ascent takes 154 steps under the outer derivative (from a start near the
    /// saddle it takes none, and a confused nesting would go unseen).
    fn validation_params(&self, params: &Params) -> Params {
        params.with("start", crate::workload::Value::Float(DEFAULT_START[0]))
    }
    /// A start near the saddle, where every descent stops at once: `check` (and the pipeline's
    /// tests, and the traced devices' recordings of every timed mode) time the whole function
    /// in milliseconds even in a debug build (from (1, 1), 6 seconds per call there).
    fn check_params(&self, _name: &str) -> Params {
        Params::new(&[
            ("inner", crate::workload::Value::Name("forward".into())),
            ("start", crate::workload::Value::Float(1e-3)),
        ])
    }
    fn generate(&self, p: &Params, _seed: u64) -> WResult<Box<dyn Problem>> {
        let inner = inner_mode(Some(p.name("inner")?), "parameter inner")?;
        let s = p.float("start")?;
        Ok(Box::new(NestedProblem::<SaddleNested>::new(SaddleInput { start: [s, s] }, inner)))
    }
    fn eval_modes(&self) -> Vec<Mode> {
        vec![Mode::Vjp, Mode::Jvp]
    }
    fn eval_options(&self) -> Vec<EvalOption> {
        vec![inner_option()]
    }
    fn eval(&self, req: &EvalRequest, device: &AnyDevice) -> WResult<String> {
        let input = parse_input(&req.text, &req.source)?;
        crate::validate::validate(&input, &req.source, req.dtype)?;
        let variant = eval_variant(req)?;
        let out = with_device!(device, |d| crate::nested::solve::<SaddleNested, _>(d, variant, &input, req.dtype))
            .map_err(WorkloadError::from_input)?;
        Ok(format_object(&[("r1", &out[..2]), ("r2", &out[2..])], req.dtype))
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("saddle")
    }
    /// GradBench's `saddle` functions `ff`, `fr`, `rf`, `rr`: `[r1_0, r1_1, r2_0, r2_1]`.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("saddle.{function} input");
        let variant = gradbench_variant("saddle", function)?;
        let input = parse_input(&input.to_string(), &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        let out = with_device!(device, |d| crate::nested::solve::<SaddleNested, _>(d, variant, &input, dtype))
            .map_err(WorkloadError::from_input)?;
        Ok(format_array(&out, dtype))
    }
    fn table_label(&self, name: &str, row: &std::collections::BTreeMap<String, String>) -> String {
        match row.get("inner") {
            Some(m) => format!("{name} inner={m}"),
            None => name.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use adgauge_backends::{Cpu, Forward};

    use super::*;
    use crate::nested::{ClosedForm, Confused, forward_gradient, outer_gradient, solve, solve_closed};

    fn cpu() -> Cpu {
        Cpu::new(Some(1)).unwrap()
    }

    /// GradBench's expected output (`python/gradbench/gradbench/evals/saddle/run.py`) for the
    /// start (1, 1), which a plain f64 simulation of its descent with the gradients written out
    /// (2 p1 outer, -2 p2 inner) also gives: all four variants return it.
    const GRADBENCH: f64 = 8.246324826140356e-06;

    #[test]
    fn every_variant_gives_gradbench_s_saddle_point() {
        let c = cpu();
        let input = SaddleInput { start: DEFAULT_START };
        for v in Variant::ALL {
            let out = solve::<SaddleNested, _>(&c, v, &input, DType::F64).unwrap();
            for x in &out {
                assert!((x - GRADBENCH).abs() <= 1e-20, "{}: {out:?}", v.name());
            }
        }
        let reference = solve_closed::<SaddleNested, _>(&c, &input, DType::F64).unwrap();
        assert_eq!(reference, vec![GRADBENCH; 4]);
    }

    /// max_p2 f(p1, p2) = |p1|^2 - |p2*|^2 with p2* the ascent's end, which does not depend on
    /// p1: the outer gradient is 2 p1 in every variant.
    #[test]
    fn the_nested_gradient_is_two_p1() {
        let c = cpu();
        let input = SaddleInput { start: DEFAULT_START };
        let p1 = c.tensor(&[0.5, -1.5], &[2], DType::F64).unwrap();
        for v in Variant::ALL {
            let (value, g) = outer_gradient::<SaddleNested, _, _>(&c, v.outer, &v.inner, &input, &p1).unwrap();
            assert_eq!(c.to_vec(&g).unwrap(), vec![1.0, -3.0], "{}", v.name());
            let value = c.to_vec(&value).unwrap()[0];
            // |p2*|^2 is below 2e-10: the ascent stops within 1e-5 of the origin.
            assert!((value - 2.5).abs() < 2e-10, "{}: {value}", v.name());
        }
    }

    /// The confused inner derivative sees the outer seed: along p1_0 at p1 = (1, 1) the inner
    /// ascent's gradient 2 p2 - 2 p1.e vanishes at the start (1, 1), so the ascent stops there and
    /// the objective under differentiation is 2 - 2 = 0 instead of about 2.
    #[test]
    fn confused_nesting_changes_the_value_under_differentiation() {
        let c = cpu();
        let input = SaddleInput { start: DEFAULT_START };
        let p1 = c.tensor(&DEFAULT_START, &[2], DType::F64).unwrap();
        let (value, g) = forward_gradient::<SaddleNested, _, _>(&c, &Confused, &input, &p1).unwrap();
        assert_eq!(c.to_vec(&value).unwrap(), vec![0.0]);
        assert_eq!(c.to_vec(&g).unwrap(), vec![2.0, 2.0]);
        let (value, _) = forward_gradient::<SaddleNested, _, _>(&c, &ClosedForm, &input, &p1).unwrap();
        assert!((c.to_vec(&value).unwrap()[0] - 2.0).abs() < 2e-10);
    }

    /// The classic test of Siskind and Pearlmutter: d/dx [x * d/dy (x + y)] = 1 at any x, y; the
    /// confused inner derivative gives 2 (x's perturbation is counted as y's).
    #[test]
    fn siskind_pearlmutter_example_one_and_confused_two() {
        struct Sum;
        impl InnerFn for Sum {
            fn value<E: Ops>(&self, e: &E, captured: &[E::T], y: &E::T) -> Result<E::T> {
                e.add(&captured[0], y)
            }
            fn closed_gradient<E: Ops>(&self, e: &E, _: &[E::T], y: &E::T) -> Result<E::T> {
                e.full(y.shape(), 1.0, y.dtype())
            }
        }
        let c = cpu();
        let fw = Forward::new(c.clone());
        let one = c.full(&[1], 1.0, DType::F64).unwrap();
        let x = fw.dual(c.full(&[1], 2.0, DType::F64).unwrap(), one.clone()).unwrap();
        let y = fw.full(&[1], 3.0, DType::F64).unwrap();
        let outer = |d_dy: <Forward<Cpu> as TensorOps>::T| c.to_vec(&fw.tangent(&fw.mul(&x, &d_dy).unwrap()).unwrap());
        for mode in AdMode::ALL {
            let d_dy = mode.gradient(&fw, &Sum, std::slice::from_ref(&x), &y).unwrap();
            assert_eq!(outer(d_dy).unwrap(), vec![1.0], "{}", mode.name());
        }
        let d_dy = Confused.gradient(&fw, &Sum, std::slice::from_ref(&x), &y).unwrap();
        assert_eq!(outer(d_dy).unwrap(), vec![2.0]);
    }

    #[test]
    fn malformed_inputs_name_their_field() {
        let msg = |text: &str| match parse_input(text, "in.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert!(msg("[]").contains("expected a JSON object"));
        assert!(msg("{}").contains("field start: missing"));
        assert!(msg(r#"{"start": [1]}"#).contains("field start: has 1 numbers, expected 2"));
        assert!(msg(r#"{"start": 1}"#).contains("field start: expected an array"));
        assert!(msg(r#"{"start": [1, "nan"]}"#).contains("field start[1]: must be finite"));
        assert!(msg(r#"{"start": [1, true]}"#).contains("field start[1]"));
        assert!(msg(r#"{"start": [1, 2], "w": 0}"#).contains("unknown field 'w'"));
        let ok = parse_input(r#"{"start": [1, 2], "min_runs": 1, "min_seconds": 0.5}"#, "in").unwrap();
        assert_eq!(ok, SaddleInput { start: [1.0, 2.0] });
        // The shared validator: a start beyond f32's range names the field.
        let big = SaddleInput { start: [1.0, 1e39] };
        let e = crate::validate::validate(&big, "in.json", DType::F32).unwrap_err().to_string();
        assert!(e.contains("start"), "{e}");
    }
}
