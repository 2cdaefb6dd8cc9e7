//! GradBench's `particle` eval (Pearlmutter and Siskind): a charged particle starts at (0, 8)
//! with velocity (0.75, 0) in the field of two unit charges at (10, 10 - w) and (10, 0), whose
//! potential is
//!
//! ```text
//! p(x; w) = 1 / |x - (10, 10 - w)| + 1 / |x - (10, 0)|
//! ```
//!
//! Naive Euler steps of 0.1 (acceleration `-grad_x p`) run while the next position stays above
//! the x-axis; the crossing is interpolated linearly, and the objective is the square of its
//! x-coordinate. GradBench's output is the control `w` that minimises it, by gradient descent
//! ([`crate::nested::argmin`]) from the input's `w`: every Euler step takes `grad_x p` by AD inside
//! the outer derivative with respect to `w` (nested AD, [`crate::nested`]), in the four
//! variants `ff`, `fr`, `rf`, `rr`. The host reads each next position back to decide whether
//! the particle has crossed. `grad_x p = -sum_k (x - c_k) / |x - c_k|^3` in closed form is the
//! `perturbation` check's reference. GradBench's input is `{"w": w0}`, its output the final `w`;
//! `adgauge eval particle` reads the same input and prints `{"w": [w]}` (vjp: outer reverse,
//! jvp: outer forward, `--inner forward|reverse`).
//!
//! The outer reverse derivative is taken step by step ([`crossing_reverse`]): a tape of the
//! whole trajectory holds every Euler step's ops until the reverse sweep, and a trajectory that
//! never crosses the axis (w = -0.9, or w = 100) runs to [`MAX_STEPS`]: 15 GB at its peak (a
//! debug build, about 15 KB a step), an abort on allocation at 2.2 GB under a 3 GB cap. The
//! forward sweep keeps only each step's state (x, v: four reals), and the reverse sweep records
//! one step at a time on a tape of its own, from the last back to the first: 32 bytes a step
//! (32 MB at most; 63 MB peak at w = -0.9 where the whole tape took 15 GB).

use adgauge_backends::prelude::*;
use adgauge_backends::{AnyDevice, DType, OpError, OutOfRange, Result, Reverse, UnaryOp, with_device};
use serde_json::Value as Json;

use crate::json::{format_number, format_object, kind, parse_number};
use crate::nested::{InnerFn, InnerGrad, MAX_STEPS, Nested, NestedProblem};
use crate::saddle::{eval_variant, gradbench_variant, inner_mode, inner_option, inner_spec};
use crate::validate::CheckedInput;
use crate::workload::{
    EvalOption, EvalRequest, Mode, ParamKind, ParamSpec, Params, Problem, Value, WResult, Workload, WorkloadError,
};

/// The Euler step.
const DELTA_T: f64 = 0.1;

/// One particle problem: the descent's starting control.
#[derive(Clone, Debug, PartialEq)]
pub struct ParticleInput {
    pub w: f64,
}

impl CheckedInput for ParticleInput {
    fn float_fields(&self) -> Vec<(&'static str, &[f64])> {
        vec![("w", std::slice::from_ref(&self.w))]
    }
}

/// The potential p(x; w), w captured from the outer level.
struct Potential;

impl Potential {
    /// The two charges' positions, shape `[2, 2]`-like pair of `[2]`: (10, 10 - w) and (10, 0).
    fn charges<E: Ops>(e: &E, w: &E::T) -> Result<[E::T; 2]> {
        let dt = w.dtype();
        let moving = e.sub(&e.full(&[2], 10.0, dt)?, &e.mul(&e.tensor(&[0.0, 1.0], &[2], dt)?, w)?)?;
        Ok([moving, e.tensor(&[10.0, 0.0], &[2], dt)?])
    }
}

impl InnerFn for Potential {
    fn value<E: Ops>(&self, e: &E, captured: &[E::T], x: &E::T) -> Result<E::T> {
        let [c1, c2] = Self::charges(e, &captured[0])?;
        let inverse_distance = |c: &E::T| -> Result<E::T> {
            let d = e.sub(x, c)?;
            e.unary(UnaryOp::Recip, &e.unary(UnaryOp::Sqrt, &e.sum(&e.unary(UnaryOp::Square, &d)?)?)?)
        };
        e.add(&inverse_distance(&c1)?, &inverse_distance(&c2)?)
    }
    /// `-sum_k (x - c_k) / |x - c_k|^3`.
    fn closed_gradient<E: Ops>(&self, e: &E, captured: &[E::T], x: &E::T) -> Result<E::T> {
        let [c1, c2] = Self::charges(e, &captured[0])?;
        let term = |c: &E::T| -> Result<E::T> {
            let d = e.sub(x, c)?;
            let r = e.unary(UnaryOp::Sqrt, &e.sum(&e.unary(UnaryOp::Square, &d)?)?)?;
            e.div(&d, &e.mul(&e.unary(UnaryOp::Square, &r)?, &r)?)
        };
        e.neg(&e.add(&term(&c1)?, &term(&c2)?)?)
    }
}

/// `x[i]`, shape `[1]`.
fn coordinate<E: Ops>(e: &E, x: &E::T, i: i64) -> Result<E::T> {
    e.gather(x, &e.index(&[i])?, OutOfRange::Error)
}

/// The squared x-coordinate where the trajectory under control `w` (shape `[1]`) crosses the
/// x-axis, shape `[1]`, and the number of Euler steps taken; `grad_x p` by `g`.
pub fn crossing<O: Ops, G: InnerGrad<O>>(o: &O, g: &G, w: &O::T) -> Result<(O::T, usize)> {
    let dt = w.dtype();
    let captured = [w.clone()];
    let mut x = o.tensor(&[0.0, 8.0], &[2], dt)?;
    let mut v = o.tensor(&[0.75, 0.0], &[2], dt)?;
    for steps in 0..MAX_STEPS {
        let x_new = o.add(&x, &o.scale(&v, DELTA_T)?)?;
        let height = o.to_vec(&x_new)?[1];
        if height.is_nan() {
            return Err(OpError::Unsupported("particle: the trajectory became NaN".into()));
        }
        if height <= 0.0 {
            return Ok((crossing_at(o, &x, &v)?, steps));
        }
        // The acceleration -grad p at the old position, as GradBench's step.
        let grad = g.gradient(o, &Potential, &captured, &x)?;
        v = o.add(&v, &o.scale(&grad, -DELTA_T)?)?;
        x = x_new;
    }
    Err(OpError::Unsupported(format!("particle: no crossing of the x-axis within {MAX_STEPS} Euler steps")))
}

/// The crossing (shape `[1]`) from the state `x`, `v` before the step that crosses: the linear
/// interpolation to the axis, `x_0 + (-x_1 / v_1) v_0`, squared.
fn crossing_at<O: Ops>(o: &O, x: &O::T, v: &O::T) -> Result<O::T> {
    let dt_final = o.neg(&o.div(&coordinate(o, x, 1)?, &coordinate(o, v, 1)?)?)?;
    let x_final = o.add(&coordinate(o, x, 0)?, &o.mul(&dt_final, &coordinate(o, v, 0)?)?)?;
    o.unary(UnaryOp::Square, &x_final)
}

/// The crossing under control `w` (shape `[1]`) and its derivative with respect to `w`, by
/// reverse mode step by step, inner gradients by `g` over `Reverse<D>` as on one tape of the
/// whole trajectory (nested, [`crate::nested`]), the same ops in the same order, so the same
/// values. The forward sweep keeps each step's state (x, v) on the host; the reverse sweep
/// records one Euler step at a time, from the last, on a fresh tape, and pulls the adjoints
/// of the next state (x', v') back through it to the state before and to `w` (the adjoint of
/// `x' . x'_bar + v' . v'_bar`). Memory: 4 reals a step and one step's tape.
pub fn crossing_reverse<D: Ops, G: InnerGrad<Reverse<D>>>(d: &D, g: &G, w: &D::T) -> Result<(D::T, D::T)> {
    let dt = w.dtype();
    let host = |x: &D::T, v: &D::T| -> Result<[f64; 4]> {
        let (x, v) = (d.to_vec(x)?, d.to_vec(v)?);
        Ok([x[0], x[1], v[0], v[1]])
    };
    let mut x = d.tensor(&[0.0, 8.0], &[2], dt)?;
    let mut v = d.tensor(&[0.75, 0.0], &[2], dt)?;
    let mut states: Vec<[f64; 4]> = Vec::new();
    let crossed = 'steps: {
        for _ in 0..MAX_STEPS {
            let x_new = d.add(&x, &d.scale(&v, DELTA_T)?)?;
            let height = d.to_vec(&x_new)?[1];
            if height.is_nan() {
                return Err(OpError::Unsupported("particle: the trajectory became NaN".into()));
            }
            if height <= 0.0 {
                break 'steps host(&x, &v)?;
            }
            // The inner gradient as the outer tape would take it (its values are the same
            // whether the outer level tracks them or not).
            let rv = Reverse::new(d.clone());
            let grad = g.gradient(&rv, &Potential, &[rv.lift(w.clone())], &rv.lift(x.clone()))?;
            states.push(host(&x, &v)?);
            v = d.add(&v, &d.scale(grad.value(), -DELTA_T)?)?;
            x = x_new;
        }
        return Err(OpError::Unsupported(format!(
            "particle: no crossing of the x-axis within {MAX_STEPS} Euler steps"
        )));
    };
    let tensors =
        |s: &[f64; 4]| -> Result<(D::T, D::T)> { Ok((d.tensor(&s[..2], &[2], dt)?, d.tensor(&s[2..], &[2], dt)?)) };
    // The interpolation, then each step from the last.
    let (xs, vs) = tensors(&crossed)?;
    let rv = Reverse::new(d.clone());
    let (xv, vv) = (rv.var(xs), rv.var(vs));
    let y = crossing_at(&rv, &xv, &vv)?;
    let grads = rv.backward(&y, d.full(&[1], 1.0, dt)?)?;
    let (mut x_bar, mut v_bar) = (grads.get_or_zeros(d, &xv)?, grads.get_or_zeros(d, &vv)?);
    let value = y.value().clone();
    let mut w_bar = d.zeros_like(w)?;
    while let Some(state) = states.pop() {
        let (xs, vs) = tensors(&state)?;
        let rv = Reverse::new(d.clone());
        let (wv, xv, vv) = (rv.var(w.clone()), rv.var(xs), rv.var(vs));
        let x_new = rv.add(&xv, &rv.scale(&vv, DELTA_T)?)?;
        let grad = g.gradient(&rv, &Potential, std::slice::from_ref(&wv), &xv)?;
        let v_new = rv.add(&vv, &rv.scale(&grad, -DELTA_T)?)?;
        let pulled =
            rv.add(&rv.sum(&rv.mul(&x_new, &rv.lift(x_bar))?)?, &rv.sum(&rv.mul(&v_new, &rv.lift(v_bar))?)?)?;
        let grads = rv.backward(&pulled, d.full(pulled.shape(), 1.0, dt)?)?;
        (x_bar, v_bar) = (grads.get_or_zeros(d, &xv)?, grads.get_or_zeros(d, &vv)?);
        w_bar = d.add(&w_bar, &grads.get_or_zeros(d, &wv)?)?;
    }
    Ok((value, w_bar))
}

/// particle as a [`Nested`] workload: the outer objective is the crossing as a function of w.
pub struct ParticleNested;

impl Nested for ParticleNested {
    const MODULE: &'static str = "particle";
    type Input = ParticleInput;

    fn point(input: &ParticleInput) -> Vec<f64> {
        vec![input.w]
    }
    fn rounded(input: &ParticleInput, dtype: DType) -> ParticleInput {
        ParticleInput { w: dtype.round(input.w) }
    }
    fn objective<O: Ops, G: InnerGrad<O>>(o: &O, g: &G, _input: &ParticleInput, w: &O::T) -> Result<O::T> {
        Ok(crossing(o, g, w)?.0)
    }
    fn finish<D: Ops, G: InnerGrad<D>>(d: &D, _g: &G, _input: &ParticleInput, w: D::T) -> Result<Vec<f64>> {
        d.to_vec(&w)
    }
    fn input_json(input: &ParticleInput) -> Json {
        serde_json::json!({"w": input.w})
    }
    /// Step by step ([`crossing_reverse`]): memory of 32 bytes an Euler step, where one tape
    /// of the trajectory took about 15 KB a step (15 GB on one that never crosses).
    fn reverse_bounded<D: Ops, G: InnerGrad<Reverse<D>>>(
        d: &D,
        g: &G,
        _input: &ParticleInput,
        w: &D::T,
    ) -> Option<Result<(D::T, D::T)>> {
        Some(crossing_reverse(d, g, w))
    }
    /// A different number of Euler steps within the step makes the crossing jump.
    fn fd_unsafe(_input: &ParticleInput, x: &[f64], h: f64) -> Option<String> {
        let cpu = adgauge_backends::Cpu::new(Some(1)).ok()?;
        let steps = |w: f64| -> Option<usize> {
            let w = cpu.tensor(&[w], &[1], DType::F64).ok()?;
            Some(crossing(&cpu, &crate::nested::ClosedForm, &w).ok()?.1)
        };
        let (below, at, above) = (steps(x[0] - h)?, steps(x[0])?, steps(x[0] + h)?);
        (below != at || above != at)
            .then(|| format!("the trajectory takes {below}, {at} and {above} Euler steps at w - h, w, w + h"))
    }
}

/// Parses GradBench's input `{"w": w0}` (`min_runs` and `min_seconds` accepted and ignored).
pub fn parse_input(text: &str, source: &str) -> WResult<ParticleInput> {
    let bad = |m: String| WorkloadError::BadInput(format!("{source}: {m}"));
    let value = crate::json::parse_json(text, source)?;
    let Json::Object(obj) = value else {
        return Err(bad(format!("expected a JSON object with field w, found {}", kind(&value))));
    };
    if let Some(extra) = obj.keys().find(|k| !["w", "min_runs", "min_seconds"].contains(&k.as_str())) {
        return Err(bad(format!("unknown field '{extra}' (expected w)")));
    }
    let w = match obj.get("w") {
        None => return Err(bad("field w: missing".into())),
        Some(v) => match parse_number(v) {
            Ok(w) if w.is_finite() => w,
            Ok(w) => return Err(bad(format!("field w: must be finite, got {w}"))),
            Err(m) => return Err(bad(format!("field w: {m}"))),
        },
    };
    Ok(ParticleInput { w })
}

/// particle in the registry: `workload: particle` with the inner mode and the starting w.
pub struct Particle;

impl Workload for Particle {
    fn family(&self) -> &'static str {
        "particle"
    }
    fn about(&self) -> &'static str {
        "GradBench's charged particle steered through the origin by nested gradient descent (ff, fr, rf, rr)"
    }
    fn schema(&self) -> Vec<ParamSpec> {
        vec![
            inner_spec(),
            ParamSpec {
                key: "w",
                kind: ParamKind::Float { min: -1.0, max: 1.0 },
                default: Some("0.0"),
                column: Some("w"),
                legacy: None,
                doc: "the starting control (GradBench's default: 0)",
            },
        ]
    }
    /// Every case is validated at GradBench's input w = 0, whatever w it times: near the
    /// optimum the crossing is near the origin and the derivative 2 x x' near 0, so an f32
    /// derivative's relative error grows without bound there (at w = 0.207, 4e-3 against
    /// differences, 8e-4 against the closed form; at w = 0, 5e-6 and 4e-7).
    fn validation_params(&self, params: &Params) -> Params {
        params.with("w", Value::Float(0.0))
    }
    /// At GradBench's optimum (about 0.2072) to three digits, where its descent stops after one
    /// gradient: a case of `check` (and of the pipeline's tests) times the whole function in a
    /// second even in a debug build (from w = 0, 30 seconds per call there).
    fn check_params(&self, _name: &str) -> Params {
        Params::new(&[("inner", Value::Name("forward".into())), ("w", Value::Float(0.207))])
    }
    fn generate(&self, p: &Params, _seed: u64) -> WResult<Box<dyn Problem>> {
        let inner = inner_mode(Some(p.name("inner")?), "parameter inner")?;
        Ok(Box::new(NestedProblem::<ParticleNested>::new(ParticleInput { w: p.float("w")? }, inner)))
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
        let out = with_device!(device, |d| crate::nested::solve::<ParticleNested, _>(d, variant, &input, req.dtype))
            .map_err(WorkloadError::from_input)?;
        Ok(format_object(&[("w", &out)], req.dtype))
    }
    fn gradbench_module(&self) -> Option<&'static str> {
        Some("particle")
    }
    /// GradBench's `particle` functions `ff`, `fr`, `rf`, `rr`: the final w.
    fn gradbench_evaluate(&self, function: &str, input: &Json, device: &AnyDevice, dtype: DType) -> WResult<String> {
        let source = format!("particle.{function} input");
        let variant = gradbench_variant("particle", function)?;
        let input = parse_input(&input.to_string(), &source)?;
        crate::validate::validate(&input, &source, dtype)?;
        let out = with_device!(device, |d| crate::nested::solve::<ParticleNested, _>(d, variant, &input, dtype))
            .map_err(WorkloadError::from_input)?;
        Ok(format_number(out[0], dtype))
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
    use adgauge_backends::Cpu;

    use super::*;
    use crate::nested::{AdMode, ClosedForm, Confused, Variant, forward_gradient, outer_gradient, solve};

    fn cpu() -> Cpu {
        Cpu::new(Some(1)).unwrap()
    }

    /// The trajectory at w = 0 by a plain f64 loop with the field written out, no tensors.
    fn crossing_by_hand(w: f64) -> (f64, usize) {
        let (mut x, mut v) = ([0.0f64, 8.0], [0.75f64, 0.0]);
        for steps in 0.. {
            let next = [x[0] + DELTA_T * v[0], x[1] + DELTA_T * v[1]];
            if next[1] <= 0.0 {
                let t = -x[1] / v[1];
                return ((x[0] + t * v[0]).powi(2), steps);
            }
            let mut grad = [0.0; 2];
            for c in [[10.0, 10.0 - w], [10.0, 0.0]] {
                let d = [x[0] - c[0], x[1] - c[1]];
                let r = (d[0] * d[0] + d[1] * d[1]).sqrt();
                grad[0] -= d[0] / (r * r * r);
                grad[1] -= d[1] / (r * r * r);
            }
            v = [v[0] - DELTA_T * grad[0], v[1] - DELTA_T * grad[1]];
            x = next;
        }
        unreachable!()
    }

    #[test]
    fn the_crossing_matches_a_loop_by_hand_in_every_inner_mode() {
        let c = cpu();
        let (want, want_steps) = crossing_by_hand(0.0);
        let w = c.full(&[1], 0.0, DType::F64).unwrap();
        for mode in AdMode::ALL {
            let (y, steps) = crossing(&c, &mode, &w).unwrap();
            let y = c.to_vec(&y).unwrap()[0];
            assert_eq!(steps, want_steps);
            assert!((y - want).abs() <= 1e-12 * want, "{}: {y} vs {want}", mode.name());
        }
    }

    /// Every variant's outer derivative at w = 0 against central differences of the loop by
    /// hand (h = 1e-6: the steps do not change), and the value under differentiation.
    #[test]
    fn every_variant_s_nested_derivative_matches_differences() {
        let c = cpu();
        let input = ParticleInput { w: 0.0 };
        let h = 1e-6;
        let fd = (crossing_by_hand(h).0 - crossing_by_hand(-h).0) / (2.0 * h);
        let w = c.full(&[1], 0.0, DType::F64).unwrap();
        for v in Variant::ALL {
            let (value, g) = outer_gradient::<ParticleNested, _, _>(&c, v.outer, &v.inner, &input, &w).unwrap();
            let g = c.to_vec(&g).unwrap()[0];
            assert!((g - fd).abs() < 1e-6 * fd.abs(), "{}: {g} vs {fd}", v.name());
            let value = c.to_vec(&value).unwrap()[0];
            assert!((value - crossing_by_hand(0.0).0).abs() < 1e-12 * value, "{}: {value}", v.name());
        }
    }

    /// GradBench's expected output (`python/gradbench/gradbench/evals/particle/run.py`); it is
    /// judged within 1e-4 there.
    const GRADBENCH: f64 = 0.2071918746486116;

    #[test]
    fn every_variant_gives_gradbench_s_control() {
        let c = cpu();
        let input = ParticleInput { w: 0.0 };
        for v in Variant::ALL {
            let out = solve::<ParticleNested, _>(&c, v, &input, DType::F64).unwrap();
            assert!((out[0] - GRADBENCH).abs() < 1e-9, "{}: {out:?}", v.name());
        }
    }

    /// Confused nesting: the outer perturbation of w and of the position leaks into the field,
    /// and the field's derivative with respect to w is lost: the value under differentiation
    /// and the derivative are both wrong, far beyond any tolerance.
    #[test]
    fn confused_nesting_is_wrong_in_value_and_derivative() {
        let c = cpu();
        let input = ParticleInput { w: 0.0 };
        let w = c.full(&[1], 0.0, DType::F64).unwrap();
        let (value, g) = forward_gradient::<ParticleNested, _, _>(&c, &Confused, &input, &w).unwrap();
        let (ref_value, ref_g) = forward_gradient::<ParticleNested, _, _>(&c, &ClosedForm, &input, &w).unwrap();
        let [value, g, ref_value, ref_g] = [value, g, ref_value, ref_g].map(|t| c.to_vec(&t).unwrap()[0]);
        assert!((ref_value - crossing_by_hand(0.0).0).abs() < 1e-12 * ref_value);
        assert!((value - ref_value).abs() > 1e-3 * ref_value.abs(), "{value} vs {ref_value}");
        assert!((g - ref_g).abs() > 1e-3 * ref_g.abs(), "{g} vs {ref_g}");
    }

    /// The step-by-step reverse derivative against one tape of the whole trajectory (how it
    /// was taken, and how the other nested workloads take it): the same value, and the same
    /// derivative but for rounding (the adjoints are summed in another order), in both inner
    /// modes, at controls whose trajectories take different numbers of steps.
    #[test]
    fn the_step_by_step_reverse_derivative_is_the_whole_tapes() {
        let c = cpu();
        let mut steps = Vec::new();
        for w0 in [0.0, 0.207, 0.5] {
            let w = c.full(&[1], w0, DType::F64).unwrap();
            for mode in AdMode::ALL {
                let rv = Reverse::new(c.clone());
                let wv = rv.var(w.clone());
                let (y, n) = crossing(&rv, &mode, &wv).unwrap();
                let want = rv.backward(&y, c.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
                let want_g = c.to_vec(&want.get_or_zeros(&c, &wv).unwrap()).unwrap()[0];
                let want_y = c.to_vec(y.value()).unwrap()[0];
                let (value, g) = crossing_reverse(&c, &mode, &w).unwrap();
                let (value, g) = (c.to_vec(&value).unwrap()[0], c.to_vec(&g).unwrap()[0]);
                assert_eq!(value.to_bits(), want_y.to_bits(), "w = {w0}, inner {}", mode.name());
                assert!((g - want_g).abs() <= 1e-12 * want_g.abs(), "w = {w0}, inner {}: {g} vs {want_g}", mode.name());
                steps.push(n);
            }
        }
        assert!(steps[0] != steps[4], "the controls take different numbers of steps: {steps:?}");
    }

    #[test]
    fn malformed_inputs_name_their_field() {
        let msg = |text: &str| match parse_input(text, "in.json").unwrap_err() {
            WorkloadError::BadInput(m) => m,
            other => panic!("{other}"),
        };
        assert!(msg("[]").contains("expected a JSON object"));
        assert!(msg("{}").contains("field w: missing"));
        assert!(msg(r#"{"w": [1]}"#).contains("field w: expected a number"));
        assert!(msg(r#"{"w": "inf"}"#).contains("field w: must be finite"));
        assert!(msg(r#"{"w": 0, "start": 0}"#).contains("unknown field 'start'"));
        let ok = parse_input(r#"{"w": 0.5, "min_runs": 1, "min_seconds": 0.5}"#, "in").unwrap();
        assert_eq!(ok, ParticleInput { w: 0.5 });
        let big = ParticleInput { w: 1e39 };
        let e = crate::validate::validate(&big, "in.json", DType::F32).unwrap_err().to_string();
        assert!(e.contains("field w") || e.contains(" w"), "{e}");
    }
}
