//! The CPU device's dense ops (broadcasts, matrix products, axis reductions, the LSTM cell):
//! [`DenseOps`] for [`Cpu`], with the per-dtype bodies its methods dispatch to.

use crate::*;

impl DenseOps for Cpu {
    fn broadcast_to(&self, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        dense::device::broadcast_to_op(self, x, shape)
    }

    fn sum_to(&self, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        dense::device::sum_to_op(self, x, shape)
    }

    fn matmul(&self, a: &CpuTensor, ta: bool, b: &CpuTensor, tb: bool) -> Result<CpuTensor> {
        dense::device::matmul_op(self, a, ta, b, tb)
    }

    fn arg_reduce_axis(&self, ext: Extremum, x: &CpuTensor, axis: usize) -> Result<(CpuTensor, CpuIndex)> {
        dense::device::arg_reduce_axis_op(self, ext, x, axis)
    }

    fn sq_dist(&self, a: &CpuTensor, c: &CpuTensor) -> Result<CpuTensor> {
        dense::device::sq_dist_op(self, a, c)
    }

    fn sum_sq_diff(&self, a: &CpuTensor, c: &CpuTensor) -> Result<CpuTensor> {
        match crate::shape::sum_sq_diff_rows(&a.shape, &c.shape) {
            Some(plan) => dense::device::sum_sq_diff_op(self, a, c, plan),
            None => crate::composed::dense::sum_sq_diff_composed(self, a, c),
        }
    }

    fn logsumexp_axis(&self, x: &CpuTensor, axis: usize) -> Result<CpuTensor> {
        dense::device::logsumexp_axis_op(self, x, axis)
    }

    fn lstm_cell(&self, x: &CpuTensor, state: &CpuTensor, params: &CpuTensor) -> Result<CpuTensor> {
        lstm::device::lstm_cell_op(self, x, state, params)
    }
}
