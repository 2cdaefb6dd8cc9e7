//! The kernel device's elementwise ops: [`ElementwiseOps`] for [`KernelDevice`], each op one or a
//! few launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> ElementwiseOps for KernelDevice<R> {
    fn unary(&self, op: UnaryOp, x: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        let (out, shape) = self.new_tensor(x.shape.clone(), x.dtype)?;
        let n = out.len;
        self.launch(
            x.dtype,
            ADD,
            "unary",
            n,
            &[Arg::Buf(&out), Arg::Buf(&x.buf), Arg::I64(n as i64), Arg::I32(unary_code(op))],
        )?;
        Ok(self.wrap(out, shape, x.dtype))
    }

    fn binary(&self, op: BinaryOp, a: &GpuTensor<R>, b: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        let dt = same_dtype("binary", a, b)?;
        let shape = broadcast_shape("binary", &a.shape, &b.shape)?;
        let (out, shape) = self.new_tensor(shape, dt)?;
        let n = out.len;
        self.launch(
            dt,
            ADD,
            "binary",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&a.buf),
                Arg::Buf(&b.buf),
                Arg::I64(n as i64),
                Arg::I64(stride(a.buf.len, n)),
                Arg::I64(stride(b.buf.len, n)),
                Arg::I32(binary_code(op)),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }

    fn select(&self, mask: &GpuTensor<R>, a: &GpuTensor<R>, b: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        same_dtype("select", mask, a)?;
        let dt = same_dtype("select", a, b)?;
        let n = mask.numel();
        for (what, len) in [("a", a.buf.len), ("b", b.buf.len)] {
            if len != n && len != 1 {
                return Err(OpError::Shape { op: "select", detail: format!("mask has {n} elements, {what} {len}") });
            }
        }
        let (out, shape) = self.new_tensor(mask.shape.clone(), dt)?;
        self.launch(
            dt,
            ADD,
            "select_t",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&mask.buf),
                Arg::Buf(&a.buf),
                Arg::Buf(&b.buf),
                Arg::I64(n as i64),
                Arg::I64(stride(a.buf.len, n)),
                Arg::I64(stride(b.buf.len, n)),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }

    fn index_eq(&self, i: &GpuIndex<R>, value: i64, dtype: DType) -> Result<GpuTensor<R>> {
        let n = i.buf.len;
        let (out, shape) = self.new_tensor(vec![n], dtype)?;
        self.launch(
            (dtype, i.dtype),
            ADD,
            "index_eq",
            n,
            &[Arg::Buf(&out), Arg::Buf(&i.buf), Arg::I64(n as i64), Arg::I64(value)],
        )?;
        Ok(self.wrap(out, shape, dtype))
    }

    fn combine(&self, op: HistOp, a: &GpuTensor<R>, b: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        self.combine_side(op, 0, a, b)
    }

    fn combine_partial(&self, op: HistOp, side: Operand, a: &GpuTensor<R>, b: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        self.combine_side(op, if side == Operand::Left { 1 } else { 2 }, a, b)
    }
}
