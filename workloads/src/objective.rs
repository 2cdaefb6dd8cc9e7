//! The shared adapter of workloads whose output is one objective of a flat parameter vector
//! (GMM, LSTM, llsq): a [`ScalarObjective`] says how to round, flatten, upload and evaluate its
//! input; [`ObjectiveProblem`] makes it a [`Problem`] (timed modes: primal = the objective, vjp =
//! objective and gradient by reverse mode, jvp = one forward sweep along ones) and
//! [`ObjectiveFlat`] the [`FlatFn`] that validation runs on.

use adgauge_backends::{AnyDevice, Cpu, DType, Device, Ops, Result, with_device};

use crate::workload::{CheckSettings, Comparison, FlatFn, Mode, Prepared, Problem, Validation, WResult};

/// A workload with one scalar output of a flat parameter vector.
pub trait ScalarObjective: 'static {
    type Input: Clone + Send + Sync + 'static;
    /// The input resident on a device.
    type Resident<D: Device>;
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
}

/// A [`ScalarObjective`]'s problem.
pub struct ObjectiveProblem<W: ScalarObjective>(pub W::Input);

impl<W: ScalarObjective> Problem for ObjectiveProblem<W> {
    fn prepare(&self, device: &AnyDevice, dtype: DType, _rule: &str) -> WResult<Box<dyn Prepared>> {
        let ones = vec![1.0; W::params(&self.0).len()];
        with_device!(device, |d| {
            let x = W::upload(d, &self.0, dtype)?;
            Ok(Box::new(ObjectivePrepared::<W, _> { device: d.clone(), x, ones }) as Box<dyn Prepared>)
        })
    }
    fn validation(&self, device: &AnyDevice, cpu: &Cpu, s: &CheckSettings) -> WResult<Validation> {
        with_device!(device, |d| Ok(ObjectiveFlat::<W, _>::validation(cpu, d, s.dtype, &self.0)?))
    }
}

struct ObjectivePrepared<W: ScalarObjective, D: Device> {
    device: D,
    x: W::Resident<D>,
    ones: Vec<f64>,
}

impl<W: ScalarObjective, D: Device> Prepared for ObjectivePrepared<W, D> {
    fn run(&self, mode: Mode) -> WResult<()> {
        let (d, x) = (&self.device, &self.x);
        match mode {
            Mode::Primal => drop(W::objective(d, x)?),
            Mode::Vjp => drop(W::gradient(d, x)?),
            Mode::Jvp | Mode::HessianDiag => drop(W::directional(d, x, &self.ones)?),
        }
        Ok(d.synchronize()?)
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
    /// The standard validation of a scalar objective: the generic checks on the flat function
    /// and the reverse-mode gradient against the hand-derived one (`manual`).
    pub fn validation(cpu: &Cpu, device: &D, dtype: DType, input: &W::Input) -> Result<Validation> {
        let f = ObjectiveFlat::<W, D>::new(cpu.clone(), device.clone(), dtype, input);
        let manual =
            Comparison { check: crate::workload::CheckKind::Manual, got: f.vjp(&[1.0])?, want: f.manual_gradient() };
        Ok(Validation { flat: Box::new(f), full_jacobian: None, comparisons: vec![manual] })
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
