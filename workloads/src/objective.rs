//! The shared adapter of workloads whose output is one objective of a flat parameter vector
//! (GMM, LSTM, llsq): a [`ScalarObjective`] says how to round, flatten, upload and evaluate its
//! input; [`ObjectiveProblem`] makes it a [`Problem`] (timed modes: primal = the objective, vjp =
//! objective and gradient by reverse mode, jvp = one forward sweep along ones) and
//! [`ObjectiveFlat`] the [`FlatFn`] that validation runs on.

use std::sync::Arc;

use adgauge_backends::prelude::*;
use adgauge_backends::{AnyDevice, Cpu, DType, Device, OpError, Result, with_device};
use serde_json::Value as Json;

use crate::workload::{
    CheckKind, CheckSettings, Comparison, FlatFn, FullJacobian, Mode, ModeTraces, Prepared, Problem, Remote,
    RemoteCall, Validation, WResult,
};

/// A workload with one scalar output of a flat parameter vector.
pub trait ScalarObjective: 'static {
    type Input: Clone + Send + Sync + crate::validate::CheckedInput + 'static;
    /// The input resident on a device.
    type Resident<D: Device>;
    /// The objective a tool's GradBench module computes for this input, and whose references
    /// judge it (`Self`, except where GradBench's definition differs from adgauge's: GMM).
    type Remote: ScalarObjective<Input = Self::Input>;
    /// The input with every number rounded to `dtype` (derivatives are taken at that point).
    fn rounded(input: &Self::Input, dtype: DType) -> Self::Input;
    /// The parameters, flat, in the gradient's layout.
    fn params(input: &Self::Input) -> Vec<f64>;
    /// The input with other parameters (same layout as [`ScalarObjective::params`]).
    fn with_params(input: &Self::Input, x: &[f64]) -> Self::Input;
    fn upload<D: Device>(device: &D, input: &Self::Input, dtype: DType) -> Result<Self::Resident<D>>;
    /// The objective, shape `[1]`, left on the device.
    fn objective<D: Device>(device: &D, x: &Self::Resident<D>) -> Result<D::T>;
    /// The gradient by reverse mode.
    fn gradient<D: Device>(device: &D, x: &Self::Resident<D>) -> Result<Vec<f64>>;
    /// The derivative along `v` by one forward sweep.
    fn directional<D: Device>(device: &D, x: &Self::Resident<D>, v: &[f64]) -> Result<f64>;
    /// The hand-derived gradient in `dtype`.
    fn manual_gradient(input: &Self::Input, dtype: DType) -> Vec<f64>;
    /// `(objective, gradient)` by forward mode, one sweep per parameter (`n` of them), as
    /// `eval --mode jvp` computes it, where the workload's `eval` has that mode: validation
    /// compares it with the hand-derived gradient (`manual-jvp`), so the code `eval` runs is
    /// the code `check` runs.
    fn forward_gradient<D: Device>(_device: &D, _x: &Self::Resident<D>, _n: usize) -> Option<Result<(f64, Vec<f64>)>> {
        None
    }
    /// The workload's GradBench module for this input, where it has one.
    fn remote(_input: &Self::Input) -> Option<RemoteModule> {
        None
    }
    /// The gradient in the module's output, flat in [`ScalarObjective::params`]' layout.
    fn remote_gradient(output: &Json, input: &Self::Input) -> Result<Vec<f64>> {
        flat_gradient(output, Self::params(input).len())
    }
    /// Whether validation also compares the whole gradient by one-hot forward sweeps with the
    /// reverse-mode one (the full-Jacobian check): for objectives whose check case has few
    /// parameters.
    fn full_jacobian() -> bool {
        false
    }
}

/// A [`ScalarObjective`]'s problem.
pub struct ObjectiveProblem<W: ScalarObjective>(pub W::Input);

/// A scalar objective's GradBench module: the functions returning the objective and the
/// gradient, and the input of a problem.
pub struct RemoteModule {
    pub primal: &'static str,
    pub gradient: &'static str,
    pub input: Json,
}

/// The gradient in a module's output: a flat array of `len` numbers.
pub fn flat_gradient(output: &Json, len: usize) -> Result<Vec<f64>> {
    let bad = |m: String| OpError::Device(format!("gradient output: {m}"));
    let Json::Array(xs) = output else {
        return Err(bad(format!("expected an array of numbers, found {}", crate::json::kind(output))));
    };
    if xs.len() != len {
        return Err(bad(format!("has {} elements, expected {len}", xs.len())));
    }
    xs.iter().map(|v| crate::json::parse_number(v).map_err(&bad)).collect()
}

impl<W: ScalarObjective> Problem for ObjectiveProblem<W> {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        // A generated case passes the validator that files and messages pass.
        crate::validate::validate(&self.0, "the generated case", dtype)?;
        let ones = vec![1.0; W::params(&self.0).len()];
        with_device!(device, |d| {
            let x = W::upload(d, &self.0, dtype)?;
            Ok(Box::new(ObjectivePrepared::<W, _> { device: d.clone(), x, ones, traces: ModeTraces::default() })
                as Box<dyn Prepared>)
        })
    }
    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        with_device!(device, |d| Ok(ObjectiveFlat::<W, _>::validation(cpu, d, s.dtype, &self.0)?))
    }
    fn remote_call(&self, mode: Mode) -> Option<RemoteCall> {
        let module = W::Remote::remote(&self.0)?;
        let function = match mode {
            Mode::Primal => module.primal,
            Mode::Vjp => module.gradient,
            Mode::Jvp | Mode::HessianDiag => return None,
        };
        Some(RemoteCall { function: function.into(), input: module.input })
    }
    /// The tool's gradient (one call) against finite differences of the f64 objective on the
    /// CPU and against the hand-derived gradient. The directional derivative is the gradient's
    /// (the modules have no forward mode), so the dot-product test holds by construction.
    fn remote_validation(&self, remote: Arc<dyn Remote>, cpu: &Cpu, _s: &CheckSettings) -> WResult<Validation> {
        let module = W::Remote::remote(&self.0).ok_or_else(|| OpError::Unsupported("no GradBench module".into()))?;
        let output = remote.call(module.gradient, module.input)?;
        let gradient = W::Remote::remote_gradient(&output, &self.0)?;
        let f = ObjectiveFlat::<W::Remote, Cpu>::new(cpu.clone(), cpu.clone(), DType::F64, &self.0);
        let manual =
            Comparison { check: CheckKind::Manual, got: gradient.clone(), want: f.manual_gradient(), convention: None };
        Ok(Validation { flat: Box::new(GivenGradient { f, gradient }), full_jacobian: None, comparisons: vec![manual] })
    }
}

/// How a module's output is printed from its numbers.
pub type OutputFormat = fn(&[f64], DType) -> String;

/// `(value, gradient)` of a scalar objective by forward mode: one directional derivative along
/// each of the `n` unit vectors (`directional(e_j) = (value, gradient_j)`); `value` is returned
/// as it is when there is no parameter.
pub fn gradient_by_unit_directions(
    n: usize,
    mut value: f64,
    mut directional: impl FnMut(&[f64]) -> Result<(f64, f64)>,
) -> Result<(f64, Vec<f64>)> {
    let mut gradient = Vec::with_capacity(n);
    for j in 0..n {
        let mut e = vec![0.0; n];
        e[j] = 1.0;
        let (y, dy) = directional(&e)?;
        value = y;
        gradient.push(dy);
    }
    Ok((value, gradient))
}

/// `eval`'s answer for a scalar objective of the resident input `x`: the objective (`primal`),
/// or with its gradient by reverse mode (`vjp`) or by forward mode (`jvp`), as objective JSON.
/// An op's error is the input's (`WorkloadError::from_input`).
pub fn scalar_eval_json<D: Device, X>(
    d: &D,
    mode: Mode,
    dtype: DType,
    x: &X,
    objective: impl Fn(&D, &X) -> Result<D::T>,
    gradient: impl Fn(&D, &X) -> Result<(f64, Vec<f64>)>,
    gradient_forward: impl Fn(&D, &X) -> Result<(f64, Vec<f64>)>,
) -> WResult<String> {
    let bad = crate::workload::WorkloadError::from_input;
    let with_gradient = |(f, g): (f64, Vec<f64>)| crate::json::objective_json(f, Some(&g), dtype);
    Ok(match mode {
        Mode::Primal => crate::json::objective_json(d.to_vec(&objective(d, x).map_err(bad)?)?[0], None, dtype),
        Mode::Vjp => with_gradient(gradient(d, x).map_err(bad)?),
        Mode::Jvp | Mode::HessianDiag => with_gradient(gradient_forward(d, x).map_err(bad)?),
    })
}

/// A module's scalar output: the first of `values`.
pub fn first_number(values: &[f64], dtype: DType) -> String {
    crate::json::format_number(values.first().copied().unwrap_or(f64::NAN), dtype)
}

/// One GradBench `evaluate` of a scalar objective's module, prepared for `adgauge tool`'s timed
/// runs: the input is put on the device once; each run computes the objective or the gradient
/// and reads it back, and `format` prints the last run's numbers once, after the runs.
pub struct ObjectiveCall<W: ScalarObjective, D: Device> {
    device: D,
    x: W::Resident<D>,
    gradient: bool,
    dtype: DType,
    format: OutputFormat,
    last: Option<Vec<f64>>,
}

impl<W: ScalarObjective, D: Device> ObjectiveCall<W, D> {
    /// `gradient`: the module's gradient function (else its primal), printed by `format`.
    pub fn new(device: D, input: &W::Input, gradient: bool, dtype: DType, format: OutputFormat) -> WResult<Self> {
        let x = W::upload(&device, input, dtype).map_err(crate::workload::WorkloadError::from_input)?;
        Ok(ObjectiveCall { device, x, gradient, dtype, format, last: None })
    }
}

/// The prepared call of a GradBench module whose functions are `primal` (the objective, one
/// number) and `gradient` (the gradient, an array), as lse and det have: `input` already parsed
/// and validated by the workload.
pub fn primal_or_gradient_call<'a, W: ScalarObjective + 'a>(
    module: &str,
    function: &str,
    input: &W::Input,
    device: &'a AnyDevice,
    dtype: DType,
) -> WResult<Box<dyn crate::workload::GradbenchCall + 'a>> {
    let (gradient, format): (bool, OutputFormat) = match function {
        "primal" => (false, first_number),
        "gradient" => (true, crate::json::format_array),
        other => {
            return Err(crate::workload::WorkloadError::BadInput(format!(
                "{module}: no function '{other}' (known: primal, gradient)"
            )));
        }
    };
    with_device!(device, |d| {
        let call = ObjectiveCall::<W, _>::new(d.clone(), input, gradient, dtype, format)?;
        Ok(Box::new(call) as Box<dyn crate::workload::GradbenchCall + 'a>)
    })
}

impl<W: ScalarObjective, D: Device> crate::workload::GradbenchCall for ObjectiveCall<W, D> {
    fn run(&mut self) -> WResult<()> {
        let d = &self.device;
        self.last = Some(if self.gradient { W::gradient(d, &self.x)? } else { d.to_vec(&W::objective(d, &self.x)?)? });
        Ok(())
    }
    fn output(&mut self) -> WResult<String> {
        if self.last.is_none() {
            self.run()?;
        }
        Ok((self.format)(self.last.as_deref().unwrap_or_default(), self.dtype))
    }
}

/// A scalar function whose gradient was given (a tool's): J^T w = w gradient, J v = gradient . v;
/// the values (for finite differences) and the point come from `f`.
pub struct GivenGradient<F: FlatFn> {
    pub f: F,
    pub gradient: Vec<f64>,
}

impl<F: FlatFn> FlatFn for GivenGradient<F> {
    fn n_in(&self) -> usize {
        self.f.n_in()
    }
    fn n_out(&self) -> usize {
        1
    }
    fn x0(&self) -> &[f64] {
        self.f.x0()
    }
    fn eval_f64(&self, x: &[f64]) -> Result<Vec<f64>> {
        self.f.eval_f64(x)
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        Ok(self.gradient.iter().map(|g| g * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        Ok(vec![self.gradient.iter().zip(v).map(|(g, v)| g * v).sum()])
    }
    fn fd_unsafe(&self, h: f64) -> Option<String> {
        self.f.fd_unsafe(h)
    }
}

struct ObjectivePrepared<W: ScalarObjective, D: Device> {
    device: D,
    x: W::Resident<D>,
    ones: Vec<f64>,
    traces: ModeTraces,
}

impl<W: ScalarObjective, D: Device> Prepared for ObjectivePrepared<W, D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, x) = (&self.device, &self.x);
        Ok(self.traces.run(d, mode, &mut || -> Result<()> {
            match mode {
                Mode::Primal => drop(W::objective(d, x)?),
                Mode::Vjp => drop(W::gradient(d, x)?),
                Mode::Jvp | Mode::HessianDiag => drop(W::directional(d, x, &self.ones)?),
            }
            Ok(())
        })?)
    }
}

/// A [`ScalarObjective`] as a flat function with one output: derivatives on `device` in the
/// dtype, f64 values on the CPU. The objectives using it are smooth everywhere, so finite
/// differences are always meaningful.
pub struct ObjectiveFlat<W: ScalarObjective, D: Device> {
    cpu: Cpu,
    device: D,
    dtype: DType,
    input: W::Input,
    x0: Vec<f64>,
}

impl<W: ScalarObjective, D: Device> ObjectiveFlat<W, D> {
    pub fn new(cpu: Cpu, device: D, dtype: DType, input: &W::Input) -> Self {
        let input = W::rounded(input, dtype);
        let x0 = W::params(&input);
        ObjectiveFlat { cpu, device, dtype, input, x0 }
    }

    pub fn manual_gradient(&self) -> Vec<f64> {
        W::manual_gradient(&self.input, self.dtype)
    }
}

impl<W: ScalarObjective, D: Device> ObjectiveFlat<W, D> {
    /// The standard validation of a scalar objective: the generic checks on the flat function,
    /// the reverse-mode gradient against the hand-derived one (`manual`) and, where `eval` has a
    /// forward-mode gradient, that one too (`manual-jvp`).
    pub fn validation(cpu: &Cpu, device: &D, dtype: DType, input: &W::Input) -> Result<Validation> {
        let f = ObjectiveFlat::<W, D>::new(cpu.clone(), device.clone(), dtype, input);
        let manual =
            Comparison { check: CheckKind::Manual, got: f.vjp(&[1.0])?, want: f.manual_gradient(), convention: None };
        let mut comparisons = vec![manual];
        let x = W::upload(device, &f.input, dtype)?;
        if let Some(forward) = W::forward_gradient(device, &x, f.x0.len()) {
            let (_, got) = forward?;
            comparisons.push(Comparison {
                check: CheckKind::ManualJvp,
                got,
                want: f.manual_gradient(),
                convention: None,
            });
        }
        let full_jacobian = W::full_jacobian().then(|| FullJacobian {
            flat: Box::new(ObjectiveFlat::<W, D>::new(cpu.clone(), device.clone(), dtype, input)) as Box<dyn FlatFn>,
            tolerance_of: CheckKind::FullJacobian,
        });
        Ok(Validation { flat: Box::new(f), full_jacobian, comparisons })
    }
}

impl<W: ScalarObjective, D: Device> FlatFn for ObjectiveFlat<W, D> {
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
        let y = W::objective(cpu, &W::upload(cpu, &W::with_params(&self.input, x), DType::F64)?)?;
        Ok(vec![cpu.to_vec(&y)?[0]])
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        let x = W::upload(&self.device, &self.input, self.dtype)?;
        Ok(W::gradient(&self.device, &x)?.into_iter().map(|v| v * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        let x = W::upload(&self.device, &self.input, self.dtype)?;
        Ok(vec![W::directional(&self.device, &x, v)?])
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        None
    }
}
