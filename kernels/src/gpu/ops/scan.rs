//! The kernel device's scans and linear recurrences: [`ScanOps`] for [`KernelDevice`], each op one
//! or a few launches of the shared kernel source.

use crate::gpu::*;

/// The index dtype of optional scan segments (any, when there are none).
fn seg_dtype<R: KernelRuntime>(segments: Option<&GpuIndex<R>>) -> IndexDType {
    segments.map_or(IndexDType::I64, |s| s.dtype)
}

impl<R: KernelRuntime> ScanOps for KernelDevice<R> {
    fn scan(
        &self,
        op: HistOp,
        x: &GpuTensor<R>,
        spec: ScanSpec,
        segments: Option<&GpuIndex<R>>,
    ) -> Result<GpuTensor<R>> {
        let dt = x.dtype;
        let (out, shape, sweep) = self.sweep_setup("scan", x, segments)?;
        let Some(Sweep { chunks, ends, carries, heads, n: nn, chunk: cl }) = sweep else {
            return Ok(self.wrap(out, shape, dt));
        };
        let n = x.buf.len;
        let cs = chunks as i64;
        // Without segments the kernels never read the keys: any buffer stands in.
        let keys = segments.map_or(&*x.buf, |s| &*s.buf);
        let reverse = i32::from(spec.reverse);
        self.launch_chunks(
            (dt, seg_dtype(segments)),
            op,
            "scan_chunks",
            chunks,
            &[
                Arg::Buf(&out),
                Arg::Buf(&ends),
                Arg::Buf(&heads),
                Arg::Buf(&x.buf),
                Arg::Buf(keys),
                Arg::I64(nn),
                Arg::I64(cl),
                Arg::I64(cs),
                Arg::I32(i32::from(segments.is_some())),
                Arg::I32(i32::from(spec.exclusive)),
                Arg::I32(reverse),
            ],
        )?;
        if chunks > 1 {
            self.launch(
                (dt, seg_dtype(segments)),
                op,
                "scan_carries",
                1,
                &[
                    Arg::Buf(&carries),
                    Arg::Buf(&ends),
                    Arg::Buf(&heads),
                    Arg::I64(nn),
                    Arg::I64(cl),
                    Arg::I64(cs),
                    Arg::I32(reverse),
                ],
            )?;
            self.launch(
                (dt, seg_dtype(segments)),
                op,
                "scan_fixup",
                n,
                &[Arg::Buf(&out), Arg::Buf(&carries), Arg::Buf(&heads), Arg::I64(nn), Arg::I64(cl), Arg::I32(reverse)],
            )?;
        }
        Ok(self.wrap(out, shape, dt))
    }

    fn linear_recurrence(
        &self,
        a: &GpuTensor<R>,
        b: &GpuTensor<R>,
        spec: ScanSpec,
        segments: Option<&GpuIndex<R>>,
    ) -> Result<GpuTensor<R>> {
        let dt = same_dtype("linear_recurrence", a, b)?;
        same_len("linear_recurrence", "multipliers vs values", b.buf.len, a.buf.len)?;
        // The scan's three phases over the same chunks, with affine maps for states.
        let (out, shape, sweep) = self.sweep_setup("linear_recurrence", a, segments)?;
        let Some(Sweep { chunks, ends, carries, heads, n: nn, chunk: cl }) = sweep else {
            return Ok(self.wrap(out, shape, dt));
        };
        let prods = self.alloc(chunks, dt.size_bytes())?;
        let cs = chunks as i64;
        let keys = segments.map_or(&*a.buf, |s| &*s.buf);
        let (exclusive, reverse) = (i32::from(spec.exclusive), i32::from(spec.reverse));
        self.launch_chunks(
            (dt, seg_dtype(segments)),
            ADD,
            "linrec_chunks",
            chunks,
            &[
                Arg::Buf(&out),
                Arg::Buf(&ends),
                Arg::Buf(&prods),
                Arg::Buf(&heads),
                Arg::Buf(&a.buf),
                Arg::Buf(&b.buf),
                Arg::Buf(keys),
                Arg::I64(nn),
                Arg::I64(cl),
                Arg::I64(cs),
                Arg::I32(i32::from(segments.is_some())),
                Arg::I32(exclusive),
                Arg::I32(reverse),
            ],
        )?;
        if chunks > 1 {
            self.launch(
                (dt, seg_dtype(segments)),
                ADD,
                "linrec_carries",
                1,
                &[
                    Arg::Buf(&carries),
                    Arg::Buf(&ends),
                    Arg::Buf(&prods),
                    Arg::Buf(&heads),
                    Arg::I64(nn),
                    Arg::I64(cl),
                    Arg::I64(cs),
                    Arg::I32(reverse),
                ],
            )?;
            self.launch_chunks(
                (dt, seg_dtype(segments)),
                ADD,
                "linrec_fixup",
                chunks,
                &[
                    Arg::Buf(&out),
                    Arg::Buf(&carries),
                    Arg::Buf(&heads),
                    Arg::Buf(&b.buf),
                    Arg::I64(nn),
                    Arg::I64(cl),
                    Arg::I64(cs),
                    Arg::I32(exclusive),
                    Arg::I32(reverse),
                ],
            )?;
        }
        Ok(self.wrap(out, shape, dt))
    }
}
