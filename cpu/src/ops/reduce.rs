//! The CPU device's reductions: [`ReduceOps`] for [`Cpu`], with the per-dtype bodies its methods
//! dispatch to.

use crate::*;

impl Cpu {
    pub(crate) fn reduce_t<T: CpuElem>(&self, op: HistOp, x: &CpuTensor) -> Result<CpuTensor> {
        let r = kernels::reduce(op, x.slice::<T>()?);
        let mut out = self.pool().take::<T>(1);
        out[0] = r;
        Ok(self.wrap(out, vec![1]))
    }
}

impl ReduceOps for Cpu {
    fn reduce(&self, op: HistOp, x: &CpuTensor) -> Result<CpuTensor> {
        self.run(x.numel(), || by_dtype!(x.dtype(), self.reduce_t(op, x)))
    }
}
