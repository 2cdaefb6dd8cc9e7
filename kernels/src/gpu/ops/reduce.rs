//! The kernel device's reductions: [`ReduceOps`] for [`KernelDevice`], each op one or a few
//! launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> ReduceOps for KernelDevice<R> {
    fn reduce(&self, op: HistOp, x: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        let dt = x.dtype;
        let n = x.buf.len;
        let (out, shape) = self.new_tensor(vec![1], dt)?;
        let (chunks, chunk) = chunk_plan(n, 1);
        let partial = self.alloc(chunks, dt.size_bytes())?;
        if n == 0 {
            self.fill_raw(&out, op.neutral(), dt)?;
        } else {
            self.launch(
                dt,
                op,
                "reduce_chunks",
                chunks,
                &[
                    Arg::Buf(&partial),
                    Arg::Buf(&x.buf),
                    Arg::I64(n as i64),
                    Arg::I64(chunk as i64),
                    Arg::I64(chunks as i64),
                ],
            )?;
            self.launch(
                dt,
                op,
                "reduce_chunks",
                1,
                &[Arg::Buf(&out), Arg::Buf(&partial), Arg::I64(chunks as i64), Arg::I64(chunks as i64), Arg::I64(1)],
            )?;
        }
        Ok(self.wrap(out, shape, dt))
    }
}
