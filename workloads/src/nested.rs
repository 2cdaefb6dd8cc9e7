//! Nested differentiation, as GradBench's `particle` and `saddle` evals need it (Pearlmutter and
//! Siskind's tests of nested AD): an outer optimisation whose objective itself takes a gradient
//! (the inner one). GradBench names its four function variants by the two modes: `ff`, `fr`,
//! `rf`, `rr` (outer, then inner). Here the outer engine `O` is the device itself (evaluating
//! the objective), `Forward<D>` or `Reverse<D>` (its derivative), and the inner gradient is
//! taken by a fresh engine over `O`: `Forward<O>` or `Reverse<O>`. So `rf` runs the inner
//! function on `Forward<Reverse<D>>` and `rr` on `Reverse<Reverse<D>>`; each level is a distinct
//! type with its own tags, and the outer derivative flows through the inner derivative's own
//! rules (the reverse sweep of `Reverse<O>` runs in `O`'s ops and is recorded or carried there).
//!
//! The pieces:
//! * [`InnerFn`]: a workload's inner function of `x` with values `captured` from the outer
//!   level (particle's potential with the charge position w, saddle's f with the outer point),
//!   and its gradient in closed form;
//! * [`InnerGrad`]: how the inner gradient is taken: by AD ([`AdMode`], the real thing), in
//!   closed form ([`ClosedForm`]: the `perturbation` check's reference, no nesting at all), or
//!   confused ([`Confused`], forward over forward with one tag for both levels, as untagged
//!   dual numbers do: the fault `confused-nesting` plants it, and `perturbation` must fail);
//! * [`argmin`] / [`argmax`]: GradBench's gradient descent (`cpp/gradbench/gd.hpp`), on any
//!   engine: its decisions read values back on the host, its steps are ops of the engine, so an
//!   outer derivative flows through an inner optimisation;
//! * [`Nested`]: a workload's outer objective and GradBench output, with [`NestedProblem`] the
//!   `Problem` of both workloads: timed modes, the validation (the outer objective as a flat
//!   function of its point, with the `perturbation` check of all four variants) and GradBench's
//!   module.

use std::sync::Arc;

use adgauge_backends::prelude::*;
use adgauge_backends::{AnyDevice, Cpu, DType, Device, Forward, OpError, Result, Reverse, with_device};
use serde_json::Value as Json;

use crate::validate::CheckedInput;
use crate::workload::{
    CheckKind, CheckSettings, Comparison, FlatFn, Mode, ModeTraces, Prepared, Problem, Remote, RemoteCall, Validation,
    WResult, WorkloadError,
};

/// The fault that makes the `ff` variant of the `perturbation` check take its inner gradient
/// confused ([`Confused`]), to show that the check catches it.
pub const CONFUSED_NESTING: &str = "confused-nesting";

/// Most iterations of one gradient descent, and most Euler steps of one trajectory: beyond
/// them the computation fails rather than running on (GradBench's C++ reference stops Euler
/// at 10^6 steps too).
pub const MAX_STEPS: usize = 1_000_000;

/// The AD mode of one level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdMode {
    Forward,
    Reverse,
}

impl AdMode {
    pub const ALL: [AdMode; 2] = [AdMode::Forward, AdMode::Reverse];

    pub fn name(self) -> &'static str {
        match self {
            AdMode::Forward => "forward",
            AdMode::Reverse => "reverse",
        }
    }

    pub fn from_name(name: &str) -> Option<AdMode> {
        AdMode::ALL.into_iter().find(|m| m.name() == name)
    }

    fn letter(self) -> char {
        match self {
            AdMode::Forward => 'f',
            AdMode::Reverse => 'r',
        }
    }
}

/// One of GradBench's four functions: the outer and the inner derivative's modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub outer: AdMode,
    pub inner: AdMode,
}

impl Variant {
    /// In GradBench's order of names.
    pub const ALL: [Variant; 4] = [
        Variant { outer: AdMode::Forward, inner: AdMode::Forward },
        Variant { outer: AdMode::Forward, inner: AdMode::Reverse },
        Variant { outer: AdMode::Reverse, inner: AdMode::Forward },
        Variant { outer: AdMode::Reverse, inner: AdMode::Reverse },
    ];

    /// `ff`, `fr`, `rf` or `rr`.
    pub fn name(self) -> String {
        format!("{}{}", self.outer.letter(), self.inner.letter())
    }

    pub fn from_name(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// The inner function of a nested computation: a scalar (shape `[1]`) of `x` (shape `[n]`),
/// with `captured` values of the outer level that are constants of the inner one.
pub trait InnerFn {
    fn value<E: Ops>(&self, e: &E, captured: &[E::T], x: &E::T) -> Result<E::T>;
    /// The gradient with respect to `x`, written out by hand (no AD at the inner level).
    fn closed_gradient<E: Ops>(&self, e: &E, captured: &[E::T], x: &E::T) -> Result<E::T>;
}

/// How the gradient of an [`InnerFn`] is taken on the outer engine `O`.
pub trait InnerGrad<O: Ops> {
    fn gradient<F: InnerFn>(&self, o: &O, f: &F, captured: &[O::T], x: &O::T) -> Result<O::T>;
}

fn one_hot(n: usize, i: usize) -> Vec<f64> {
    (0..n).map(|j| if j == i { 1.0 } else { 0.0 }).collect()
}

/// `parts` (each shape `[1]`) as one tensor of shape `[n]`.
fn concat<O: Ops>(o: &O, parts: &[O::T]) -> Result<O::T> {
    o.reshape(&o.stack(parts)?, &[parts.len()])
}

/// By AD at a new level over `O`: one forward sweep per coordinate (`Forward<O>`, GradBench's
/// `grad_f`), or one reverse sweep (`Reverse<O>`).
impl<O: Ops> InnerGrad<O> for AdMode {
    fn gradient<F: InnerFn>(&self, o: &O, f: &F, captured: &[O::T], x: &O::T) -> Result<O::T> {
        let (n, dt) = (x.shape()[0], x.dtype());
        match self {
            AdMode::Forward => {
                let fw = Forward::new(o.clone());
                let captured: Vec<_> = captured.iter().map(|c| fw.lift(c.clone())).collect();
                let mut parts = Vec::with_capacity(n);
                for i in 0..n {
                    let x = fw.dual(x.clone(), o.tensor(&one_hot(n, i), &[n], dt)?)?;
                    parts.push(fw.tangent(&f.value(&fw, &captured, &x)?)?);
                }
                concat(o, &parts)
            }
            AdMode::Reverse => {
                let rv = Reverse::new(o.clone());
                let captured: Vec<_> = captured.iter().map(|c| rv.lift(c.clone())).collect();
                let xv = rv.var(x.clone());
                let y = f.value(&rv, &captured, &xv)?;
                rv.backward(&y, o.full(&[1], 1.0, dt)?)?.get_or_zeros(o, &xv)
            }
        }
    }
}

/// The inner gradient in closed form ([`InnerFn::closed_gradient`]): the reference of the
/// `perturbation` check, in which only the outer level differentiates.
#[derive(Clone, Copy, Debug)]
pub struct ClosedForm;

impl<O: Ops> InnerGrad<O> for ClosedForm {
    fn gradient<F: InnerFn>(&self, o: &O, f: &F, captured: &[O::T], x: &O::T) -> Result<O::T> {
        f.closed_gradient(o, captured, x)
    }
}

/// Perturbation confusion, planted: the inner forward derivative taken on the outer forward
/// engine itself, its seed added to the tangent `x` already carries, as dual numbers without
/// tags do. The outer level's perturbation of `x` and of the captured values leaks into the
/// inner derivative, and the inner derivative (a tangent read off) is a constant of the outer
/// level. Only for the check's fault and tests: [`AdMode`] is the engine's way.
#[derive(Clone, Copy, Debug)]
pub struct Confused;

impl<D: Ops> InnerGrad<Forward<D>> for Confused {
    fn gradient<F: InnerFn>(
        &self,
        o: &Forward<D>,
        f: &F,
        captured: &[<Forward<D> as TensorOps>::T],
        x: &<Forward<D> as TensorOps>::T,
    ) -> Result<<Forward<D> as TensorOps>::T> {
        let d = o.inner();
        let (n, dt) = (x.shape()[0], x.dtype());
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let seed = d.add(&o.tangent(x)?, &d.tensor(&one_hot(n, i), &[n], dt)?)?;
            let x = o.dual(o.primal(x).clone(), seed)?;
            parts.push(o.tangent(&f.value(o, captured, &x)?)?);
        }
        Ok(o.lift(concat(d, &parts)?))
    }
}

/// `v`, refused when not finite: a descent through NaN would compare false forever.
fn finite(v: Vec<f64>, what: &str) -> Result<Vec<f64>> {
    if v.iter().any(|x| !x.is_finite()) {
        return Err(OpError::Unsupported(format!("gradient descent: {what} is not finite ({v:?})")));
    }
    Ok(v)
}

/// GradBench's gradient descent (`multivariate_argmin` of `cpp/gradbench/gd.hpp` and the
/// Futhark tool's solver, step for step): from `x0` with step 1e-5, doubled after ten accepted
/// steps and halved after a rejected one; stops when the gradient or the step is at most 1e-5
/// long. `f` returns shape `[1]`, `g` the gradient (shape of `x0`). The decisions read values
/// back; the steps `x - eta g` are ops of `e`, so `e`'s derivatives flow through the descent.
pub fn argmin<E: Ops>(
    e: &E,
    f: &mut dyn FnMut(&E::T) -> Result<E::T>,
    g: &mut dyn FnMut(&E::T) -> Result<E::T>,
    x0: E::T,
) -> Result<E::T> {
    let mut x = x0;
    let mut gx = g(&x)?;
    let mut fx_host = finite(e.to_vec(&f(&x)?)?, "the objective")?[0];
    let mut gx_host = finite(e.to_vec(&gx)?, "the gradient")?;
    let mut x_host = e.to_vec(&x)?;
    let mut accepted = 0;
    let mut eta = 1e-5;
    for _ in 0..MAX_STEPS {
        if gx_host.iter().fold(0.0, |acc, v| acc + v * v).sqrt() <= 1e-5 {
            return Ok(x);
        } else if accepted == 10 {
            eta *= 2.0;
            accepted = 0;
        } else {
            let x_prime = e.sub(&x, &e.scale(&gx, eta)?)?;
            let x_prime_host = e.to_vec(&x_prime)?;
            let dist = x_host.iter().zip(&x_prime_host).fold(0.0, |acc, (a, b)| acc + (a - b) * (a - b)).sqrt();
            if dist <= 1e-5 {
                return Ok(x);
            }
            let fx_prime_host = finite(e.to_vec(&f(&x_prime)?)?, "the objective")?[0];
            if fx_prime_host < fx_host {
                (x, x_host, fx_host) = (x_prime, x_prime_host, fx_prime_host);
                gx = g(&x)?;
                gx_host = finite(e.to_vec(&gx)?, "the gradient")?;
                accepted += 1;
            } else {
                eta /= 2.0;
                accepted = 0;
            }
        }
    }
    Err(OpError::Unsupported(format!("gradient descent did not converge in {MAX_STEPS} iterations")))
}

/// [`argmin`] of `-f` (gradient `-g`): GradBench's `multivariate_argmax`.
pub fn argmax<E: Ops>(
    e: &E,
    f: &mut dyn FnMut(&E::T) -> Result<E::T>,
    g: &mut dyn FnMut(&E::T) -> Result<E::T>,
    x0: E::T,
) -> Result<E::T> {
    argmin(e, &mut |x| e.neg(&f(x)?), &mut |x| e.neg(&g(x)?), x0)
}

/// A nested workload: its outer objective (whose evaluation takes inner gradients) and what its
/// GradBench functions return.
pub trait Nested: Send + Sync + 'static {
    /// GradBench's module.
    const MODULE: &'static str;
    type Input: Clone + Send + Sync + CheckedInput + 'static;
    /// The outer objective's starting point (flat).
    fn point(input: &Self::Input) -> Vec<f64>;
    /// The input rounded to `dtype`.
    fn rounded(input: &Self::Input, dtype: DType) -> Self::Input;
    /// The outer objective at `x` (shape `[n]`) on `o`, shape `[1]`, its inner gradients by `g`.
    fn objective<O: Ops, G: InnerGrad<O>>(o: &O, g: &G, input: &Self::Input, x: &O::T) -> Result<O::T>;
    /// GradBench's output once the outer argmin is `x`: what follows it (saddle's argmax, by
    /// `g`), flattened.
    fn finish<D: Ops, G: InnerGrad<D>>(d: &D, g: &G, input: &Self::Input, x: D::T) -> Result<Vec<f64>>;
    /// GradBench's input of the problem.
    fn input_json(input: &Self::Input) -> Json;
    /// Why finite differences of the outer objective at `x` with step `h` would be meaningless.
    fn fd_unsafe(_input: &Self::Input, _x: &[f64], _h: f64) -> Option<String> {
        None
    }
    /// The outer objective's value and gradient at `x` by reverse mode in memory that does not
    /// grow with the computation's length, where the workload has a way (particle: step by
    /// step, `particle::crossing_reverse`); None: [`reverse_gradient`] records the whole
    /// objective on one tape, which holds every op of it until the reverse sweep.
    fn reverse_bounded<D: Ops, G: InnerGrad<Reverse<D>>>(
        _d: &D,
        _g: &G,
        _input: &Self::Input,
        _x: &D::T,
    ) -> Option<Result<(D::T, D::T)>> {
        None
    }
}

/// The outer objective's value and gradient at `x` by forward mode (one sweep per coordinate;
/// the value of the first), inner gradients by `g` over `Forward<D>`.
pub fn forward_gradient<W: Nested, D: Ops, G: InnerGrad<Forward<D>>>(
    d: &D,
    g: &G,
    input: &W::Input,
    x: &D::T,
) -> Result<(D::T, D::T)> {
    let (n, dt) = (x.shape()[0], x.dtype());
    let mut value = None;
    let mut parts = Vec::with_capacity(n);
    for i in 0..n {
        let fw = Forward::new(d.clone());
        let y = W::objective(&fw, g, input, &fw.dual(x.clone(), d.tensor(&one_hot(n, i), &[n], dt)?)?)?;
        parts.push(fw.tangent(&y)?);
        value.get_or_insert_with(|| fw.primal(&y).clone());
    }
    let value = value.ok_or_else(|| OpError::Shape { op: "nested gradient", detail: "an empty point".into() })?;
    Ok((value, concat(d, &parts)?))
}

/// The outer objective's derivative along `v` at `x` by one forward sweep, with its value.
pub fn forward_directional<W: Nested, D: Ops, G: InnerGrad<Forward<D>>>(
    d: &D,
    g: &G,
    input: &W::Input,
    x: &D::T,
    v: &[f64],
) -> Result<(D::T, D::T)> {
    let fw = Forward::new(d.clone());
    let y = W::objective(&fw, g, input, &fw.dual(x.clone(), d.tensor(v, x.shape(), x.dtype())?)?)?;
    Ok((fw.primal(&y).clone(), fw.tangent(&y)?))
}

/// The outer objective's value and gradient at `x` by reverse mode, inner gradients by `g`
/// over `Reverse<D>`: the workload's own bounded way where it has one
/// ([`Nested::reverse_bounded`]), else one tape of the whole objective.
pub fn reverse_gradient<W: Nested, D: Ops, G: InnerGrad<Reverse<D>>>(
    d: &D,
    g: &G,
    input: &W::Input,
    x: &D::T,
) -> Result<(D::T, D::T)> {
    if let Some(bounded) = W::reverse_bounded(d, g, input, x) {
        return bounded;
    }
    let rv = Reverse::new(d.clone());
    let xv = rv.var(x.clone());
    let y = W::objective(&rv, g, input, &xv)?;
    let grad = rv.backward(&y, d.full(&[1], 1.0, x.dtype())?)?.get_or_zeros(d, &xv)?;
    Ok((y.value().clone(), grad))
}

/// The outer gradient in `outer` mode with inner gradients by `g`.
pub fn outer_gradient<W: Nested, D: Ops, G: InnerGrad<Forward<D>> + InnerGrad<Reverse<D>>>(
    d: &D,
    outer: AdMode,
    g: &G,
    input: &W::Input,
    x: &D::T,
) -> Result<(D::T, D::T)> {
    match outer {
        AdMode::Forward => forward_gradient::<W, D, G>(d, g, input, x),
        AdMode::Reverse => reverse_gradient::<W, D, G>(d, g, input, x),
    }
}

/// GradBench's function `variant` on `d` in `dtype`: the outer argmin from the input's point,
/// its gradients nested, then [`Nested::finish`] with the outer mode.
pub fn solve<W: Nested, D: Ops>(d: &D, variant: Variant, input: &W::Input, dtype: DType) -> Result<Vec<f64>> {
    solve_with::<W, D, _>(d, variant.outer, &variant.inner, &variant.outer, input, dtype)
}

/// The `perturbation` check's reference solution: the same descent with the inner gradients in
/// closed form and the outer ones by forward mode (one level of AD).
pub fn solve_closed<W: Nested, D: Ops>(d: &D, input: &W::Input, dtype: DType) -> Result<Vec<f64>> {
    solve_with::<W, D, _>(d, AdMode::Forward, &ClosedForm, &ClosedForm, input, dtype)
}

fn solve_with<W: Nested, D: Ops, G: InnerGrad<D> + InnerGrad<Forward<D>> + InnerGrad<Reverse<D>>>(
    d: &D,
    outer: AdMode,
    inner: &G,
    last: &impl InnerGrad<D>,
    input: &W::Input,
    dtype: DType,
) -> Result<Vec<f64>> {
    let point = W::point(input);
    let x0 = d.tensor(&point, &[point.len()], dtype)?;
    let x = argmin(
        d,
        &mut |x| W::objective(d, inner, input, x),
        &mut |x| Ok(outer_gradient::<W, D, G>(d, outer, inner, input, x)?.1),
        x0,
    )?;
    W::finish(d, last, input, x)
}

/// A nested workload's problem: its input and the inner mode of the case (`inner` in a suite).
pub struct NestedProblem<W: Nested> {
    pub input: W::Input,
    pub inner: AdMode,
    pub _w: std::marker::PhantomData<W>,
}

impl<W: Nested> NestedProblem<W> {
    pub fn new(input: W::Input, inner: AdMode) -> Self {
        NestedProblem { input, inner, _w: std::marker::PhantomData }
    }
}

/// The `perturbation` comparison on `d`: for each variant (`ff`, `fr`, `rf`, `rr`), the outer
/// objective's value and gradient at the point, computed with the inner gradient taken inside
/// the outer derivative, against the same with the inner gradient in closed form (on `cpu` in
/// the same dtype). Confusion shows in both: a leaked outer perturbation changes the inner
/// gradient and so the value computed under differentiation; a lost one, the gradient.
/// `confused`: the `ff` variant takes its inner gradient confused ([`CONFUSED_NESTING`]).
pub fn perturbation<W: Nested, D: Ops>(
    d: &D,
    cpu: &Cpu,
    input: &W::Input,
    dtype: DType,
    confused: bool,
) -> Result<Comparison> {
    let point = W::point(input);
    let n = point.len();
    let x = d.tensor(&point, &[n], dtype)?;
    let host = |(v, g): (D::T, D::T)| -> Result<Vec<f64>> { Ok([d.to_vec(&v)?, d.to_vec(&g)?].concat()) };
    let mut got = Vec::new();
    for v in Variant::ALL {
        let pair = if confused && v == Variant::ALL[0] {
            forward_gradient::<W, D, _>(d, &Confused, input, &x)?
        } else {
            outer_gradient::<W, D, _>(d, v.outer, &v.inner, input, &x)?
        };
        got.extend(host(pair)?);
    }
    let xc = cpu.tensor(&point, &[n], dtype)?;
    let (v, g) = forward_gradient::<W, Cpu, _>(cpu, &ClosedForm, input, &xc)?;
    let reference = [cpu.to_vec(&v)?, cpu.to_vec(&g)?].concat();
    let want = reference.repeat(Variant::ALL.len());
    Ok(Comparison { check: CheckKind::Perturbation, got, want, convention: None })
}

impl<W: Nested> Problem for NestedProblem<W> {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        crate::validate::validate(&self.input, "the generated case", dtype)?;
        let input = W::rounded(&self.input, dtype);
        let inner = self.inner;
        with_device!(device, |d| {
            Ok(Box::new(NestedPrepared::<W, _> {
                device: d.clone(),
                input,
                inner,
                dtype,
                traces: ModeTraces::default(),
            }) as Box<dyn Prepared>)
        })
    }

    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        let input = W::rounded(&self.input, s.dtype);
        let confused = s.fault.as_deref() == Some(CONFUSED_NESTING);
        with_device!(device, |d| {
            let flat = NestedFlat::<W, _> {
                cpu: cpu.clone(),
                device: d.clone(),
                dtype: s.dtype,
                x0: W::point(&input),
                input: input.clone(),
                inner: self.inner,
            };
            let check = perturbation::<W, _>(d, cpu, &input, s.dtype, confused)?;
            Ok(Validation { flat: Box::new(flat), full_jacobian: None, comparisons: vec![check] })
        })
    }

    /// `vjp` is GradBench's function with the outer derivative in reverse mode (`rf` or `rr`
    /// after the case's inner mode), `jvp` the one in forward mode; GradBench has no primal.
    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let outer = match mode {
            Mode::Vjp => AdMode::Reverse,
            Mode::Jvp => AdMode::Forward,
            Mode::Primal | Mode::HessianDiag => return None,
        };
        Some(RemoteCall { function: Variant { outer, inner: self.inner }.name(), input: W::input_json(&self.input) })
    }

    /// A tool's four functions against the reference solution (inner gradients in closed form,
    /// f64 on the CPU) under `perturbation`. A tool returns the solution, not a derivative, so
    /// the flat checks see the reference's own gradient and finite differences are skipped.
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, _s: &CheckSettings) -> WResult<Validation> {
        let want = solve_closed::<W, Cpu>(cpu, &self.input, DType::F64)?;
        let mut got = Vec::new();
        for v in Variant::ALL {
            let output = remote.call(&v.name(), W::input_json(&self.input))?;
            got.extend(
                flat_numbers(&output, want.len()).map_err(|m| {
                    WorkloadError::Op(OpError::Device(format!("{}.{} output: {m}", W::MODULE, v.name())))
                })?,
            );
        }
        let want = want.repeat(Variant::ALL.len());
        let flat = NestedFlat::<W, Cpu> {
            cpu: cpu.clone(),
            device: cpu.clone(),
            dtype: DType::F64,
            x0: W::point(&self.input),
            input: self.input.clone(),
            inner: self.inner,
        };
        let given = crate::objective::GivenGradient { gradient: flat.reference_gradient()?, f: RemoteFlat(flat) };
        let check = Comparison { check: CheckKind::Perturbation, got, want, convention: None };
        Ok(Validation { flat: Box::new(given), full_jacobian: None, comparisons: vec![check] })
    }
}

/// A number or an array of numbers, flat, of length `len`.
fn flat_numbers(output: &Json, len: usize) -> std::result::Result<Vec<f64>, String> {
    let xs: Vec<f64> = match output {
        Json::Array(a) => a.iter().map(crate::json::parse_number).collect::<std::result::Result<_, _>>()?,
        other => vec![crate::json::parse_number(other)?],
    };
    if xs.len() != len {
        return Err(format!("has {} numbers, expected {len}", xs.len()));
    }
    Ok(xs)
}

struct NestedPrepared<W: Nested, D: Device> {
    device: D,
    input: W::Input,
    inner: AdMode,
    dtype: DType,
    traces: ModeTraces,
}

impl<W: Nested, D: Device> Prepared for NestedPrepared<W, D> {
    /// primal: the outer objective at the point; vjp and jvp: GradBench's whole function with
    /// the outer derivatives in reverse and in forward mode.
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, input, dt) = (&self.device, &self.input, self.dtype);
        Ok(self.traces.run(d, mode, &mut || -> Result<()> {
            let outer = match mode {
                Mode::Primal | Mode::HessianDiag => {
                    let point = W::point(input);
                    let x = d.tensor(&point, &[point.len()], dt)?;
                    return W::objective(d, &self.inner, input, &x).map(drop);
                }
                Mode::Vjp => AdMode::Reverse,
                Mode::Jvp => AdMode::Forward,
            };
            solve::<W, D>(d, Variant { outer, inner: self.inner }, input, dt).map(drop)
        })?)
    }
}

/// The outer objective as a flat function of its point: derivatives by nested AD on `device`
/// (vjp: outer reverse, jvp: outer forward, the inner mode of the case), f64 values on the CPU
/// with the inner gradients in closed form (finite differences share no AD with the check).
pub struct NestedFlat<W: Nested, D: Device> {
    cpu: Cpu,
    device: D,
    dtype: DType,
    input: W::Input,
    x0: Vec<f64>,
    inner: AdMode,
}

impl<W: Nested, D: Device> NestedFlat<W, D> {
    fn point(&self) -> Result<D::T> {
        self.device.tensor(&self.x0, &[self.x0.len()], self.dtype)
    }

    /// The gradient with the inner gradients in closed form (one level of AD).
    fn reference_gradient(&self) -> WResult<Vec<f64>> {
        let (_, g) = forward_gradient::<W, D, _>(&self.device, &ClosedForm, &self.input, &self.point()?)?;
        Ok(self.device.to_vec(&g)?)
    }
}

impl<W: Nested, D: Device> FlatFn for NestedFlat<W, D> {
    fn n_in(&self) -> usize {
        self.x0.len()
    }
    fn n_out(&self) -> usize {
        1
    }
    fn x0(&self) -> &[f64] {
        &self.x0
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        let cpu = &self.cpu;
        let y = W::objective(cpu, &ClosedForm, &self.input, &cpu.tensor(x, &[x.len()], DType::F64)?)?;
        cpu.to_vec(&y)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let d = &self.device;
        let (_, g) = reverse_gradient::<W, D, _>(d, &self.inner, &self.input, &self.point()?)?;
        Ok(d.to_vec(&g)?.into_iter().map(|g| g * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let d = &self.device;
        let (_, t) = forward_directional::<W, D, _>(d, &self.inner, &self.input, &self.point()?, v)?;
        d.to_vec(&t)
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        W::fd_unsafe(&self.input, &self.x0, h)
    }
}

/// The reference flat function of a tool's validation, with finite differences skipped: a
/// tool's outputs are solutions, not derivatives.
struct RemoteFlat<W: Nested>(NestedFlat<W, Cpu>);

impl<W: Nested> FlatFn for RemoteFlat<W> {
    fn n_in(&self) -> usize {
        self.0.n_in()
    }
    fn n_out(&self) -> usize {
        1
    }
    fn x0(&self) -> &[f64] {
        self.0.x0()
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        self.0.eval_f64(x)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        self.0.vjp(w)
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        self.0.jvp(v)
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        Some("a tool returns the solution, not a derivative: its four functions are judged by perturbation".into())
    }
}
