//! The kernel device's histograms (`reduce_by_index` and its variants): [`HistOps`] for
//! [`KernelDevice`], each op one or a few launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> HistOps for KernelDevice<R> {
    fn reduce_by_index(
        &self,
        dest: &GpuTensor<R>,
        op: HistOp,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
    ) -> Result<GpuTensor<R>> {
        let dt = same_dtype("reduce_by_index", dest, vals)?;
        same_len("reduce_by_index", "indices vs values", inds.buf.len, vals.buf.len)?;
        let (k, n) = (dest.buf.len, vals.buf.len);
        let out = self.copy_of(dest)?;
        let local_bytes = k * dt.size_bytes();
        if k > 0 && k <= LOCAL_MAX_K && local_bytes * 2 <= self.rt.local_mem() && n >= 4 * k {
            // Small k: private sub-histograms per work-group in local memory.
            let group = GROUP.min(self.rt.max_group());
            let groups = (self.rt.compute_units() * 4).clamp(1, n.div_ceil(group));
            let per_group = n.div_ceil(groups);
            self.rt.launch(
                dt,
                op,
                inds.dtype,
                "hist_local",
                groups * group,
                Some(group),
                &[
                    Arg::Buf(&out),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(n as i64),
                    Arg::I64(k as i64),
                    Arg::Local(local_bytes),
                    Arg::I64(per_group as i64),
                ],
            )?;
        } else if k > 0 {
            self.launch(
                (dt, inds.dtype),
                op,
                "hist_atomic",
                n,
                &[Arg::Buf(&out), Arg::Buf(&inds.buf), Arg::Buf(&vals.buf), Arg::I64(n as i64), Arg::I64(k as i64)],
            )?;
        }
        Ok(self.wrap(out, dest.shape.clone(), dt))
    }

    fn arg_reduce_by_index(
        &self,
        dest: &GpuTensor<R>,
        ext: Extremum,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
    ) -> Result<(GpuTensor<R>, GpuIndex<R>)> {
        let dt = same_dtype("arg_reduce_by_index", dest, vals)?;
        same_len("arg_reduce_by_index", "indices vs values", inds.buf.len, vals.buf.len)?;
        self.rt.check_dtype(dt)?;
        let (v, p) = self.arg_hist(dest, ext, inds, vals)?;
        Ok((self.wrap(v, dest.shape.clone(), dt), self.wrap_index_within(p, -1, vals.buf.len as i64 - 1)))
    }

    fn prod_nonzero_by_index(
        &self,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
        k: usize,
    ) -> Result<(GpuTensor<R>, GpuIndex<R>, GpuIndex<R>)> {
        let dt = vals.dtype;
        same_len("prod_nonzero_by_index", "indices vs values", inds.buf.len, vals.buf.len)?;
        let n = vals.buf.len;
        let (p, shape) = self.new_tensor(vec![k], dt)?;
        let z = self.alloc(k, 8)?;
        let m = self.alloc(k, 8)?;
        self.fill_raw(&p, 1.0, dt)?;
        self.fill_index_raw(&z, 0, dt)?;
        self.fill_index_raw(&m, 0, dt)?;
        self.launch(
            (dt, inds.dtype),
            ADD,
            "prod_nonzero",
            n,
            &[
                Arg::Buf(&p),
                Arg::Buf(&z),
                Arg::Buf(&m),
                Arg::Buf(&inds.buf),
                Arg::Buf(&vals.buf),
                Arg::I64(n as i64),
                Arg::I64(k as i64),
            ],
        )?;
        Ok((self.wrap(p, shape, dt), self.wrap_index_within(z, 0, n as i64), self.wrap_index_within(m, 0, n as i64)))
    }

    fn prod_vals_adjoint(
        &self,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
        c0: &GpuTensor<R>,
        c1: &GpuTensor<R>,
        c2: &GpuTensor<R>,
    ) -> Result<GpuTensor<R>> {
        same_dtype("prod_vals_adjoint", vals, c0)?;
        same_dtype("prod_vals_adjoint", c0, c1)?;
        let dt = same_dtype("prod_vals_adjoint", c1, c2)?;
        same_len("prod_vals_adjoint", "indices vs values", inds.buf.len, vals.buf.len)?;
        same_len("prod_vals_adjoint", "c0 vs c1", c0.buf.len, c1.buf.len)?;
        same_len("prod_vals_adjoint", "c0 vs c2", c0.buf.len, c2.buf.len)?;
        let (n, k) = (vals.buf.len, c0.buf.len);
        let (out, shape) = self.new_tensor(vals.shape.clone(), dt)?;
        self.launch(
            (dt, inds.dtype),
            ADD,
            "prod_vals_adjoint",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&inds.buf),
                Arg::Buf(&vals.buf),
                Arg::Buf(&c0.buf),
                Arg::Buf(&c1.buf),
                Arg::Buf(&c2.buf),
                Arg::I64(n as i64),
                Arg::I64(k as i64),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }
}
