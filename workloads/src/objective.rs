//! The shared adapter of workloads whose output is one objective of a flat parameter vector
//! (GMM, LSTM, llsq): a [`ScalarObjective`] says how to round, flatten and evaluate its input,
//! and [`ObjectiveFlat`] turns it into the [`FlatFn`] that validation runs on.

use adgauge_backends::{Cpu, DType, Device, Result};

use crate::workload::{Comparison, FlatFn, Validation};

/// A workload with one scalar output of a flat parameter vector.
pub trait ScalarObjective {
    type Input: Clone;
    /// The input with every number rounded to `dtype` (derivatives are taken at that point).
    fn rounded(input: &Self::Input, dtype: DType) -> Self::Input;
    /// The parameters, flat, in the gradient's layout.
    fn params(input: &Self::Input) -> Vec<f64>;
    /// The input with other parameters (same layout as [`ScalarObjective::params`]).
    fn with_params(input: &Self::Input, x: &[f64]) -> Self::Input;
    /// The objective in f64 on the CPU.
    fn objective_f64(cpu: &Cpu, input: &Self::Input) -> Result<f64>;
    /// The gradient by reverse mode on `device` in `dtype`.
    fn gradient<D: Device>(device: &D, input: &Self::Input, dtype: DType) -> Result<Vec<f64>>;
    /// The derivative along `v` by one forward sweep on `device` in `dtype`.
    fn directional<D: Device>(device: &D, input: &Self::Input, dtype: DType, v: &[f64]) -> Result<f64>;
    /// The hand-derived gradient in `dtype`.
    fn manual_gradient(input: &Self::Input, dtype: DType) -> Vec<f64>;
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

impl<W: ScalarObjective + 'static, D: Device> ObjectiveFlat<W, D> {
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
        Ok(vec![W::objective_f64(&self.cpu, &W::with_params(&self.input, x))?])
    }
    fn vjp(&self, w: &[f64]) -> Result<Vec<f64>> {
        Ok(W::gradient(&self.device, &self.input, self.dtype)?.into_iter().map(|v| v * w[0]).collect())
    }
    fn jvp(&self, v: &[f64]) -> Result<Vec<f64>> {
        Ok(vec![W::directional(&self.device, &self.input, self.dtype, v)?])
    }
    fn fd_unsafe(&self, _h: f64) -> Option<String> {
        None
    }
}
