//! The kernel device's fused rule kernels: [`RuleKernels`] for [`KernelDevice`], each op one or a
//! few launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> RuleKernels for KernelDevice<R> {
    fn lstm_cell_vjp(
        &self,
        x: &GpuTensor<R>,
        state: &GpuTensor<R>,
        params: &GpuTensor<R>,
        g: &GpuTensor<R>,
    ) -> Result<(GpuTensor<R>, GpuTensor<R>, GpuTensor<R>)> {
        let (dt, b) = self.lstm_operands("lstm_cell_vjp", [x, state, params], &[("the adjoint", g, 2)])?;
        let ((gx, sx), (gs, ss), (gp, sp)) =
            (self.new_tensor(vec![b], dt)?, self.new_tensor(vec![2, b], dt)?, self.new_tensor(vec![8, b], dt)?);
        let args = [
            Arg::Buf(&gx),
            Arg::Buf(&gs),
            Arg::Buf(&gp),
            Arg::Buf(&x.buf),
            Arg::Buf(&state.buf),
            Arg::Buf(&params.buf),
            Arg::Buf(&g.buf),
            Arg::I64(b as i64),
        ];
        self.launch(dt, ADD, "lstm_cell_vjp", b, &args)?;
        Ok((self.wrap(gx, sx, dt), self.wrap(gs, ss, dt), self.wrap(gp, sp, dt)))
    }

    fn lstm_cell_jvp(
        &self,
        x: &GpuTensor<R>,
        state: &GpuTensor<R>,
        params: &GpuTensor<R>,
        dx: &GpuTensor<R>,
        dstate: &GpuTensor<R>,
        dparams: &GpuTensor<R>,
    ) -> Result<GpuTensor<R>> {
        let tangents = [
            ("the input's tangent", dx, 1),
            ("the state's tangent", dstate, 2),
            ("the parameters' tangent", dparams, 8),
        ];
        let (dt, b) = self.lstm_operands("lstm_cell_jvp", [x, state, params], &tangents)?;
        let (out, shape) = self.new_tensor(vec![2, b], dt)?;
        let args = [
            Arg::Buf(&out),
            Arg::Buf(&x.buf),
            Arg::Buf(&state.buf),
            Arg::Buf(&params.buf),
            Arg::Buf(&dx.buf),
            Arg::Buf(&dstate.buf),
            Arg::Buf(&dparams.buf),
            Arg::I64(b as i64),
        ];
        self.launch(dt, ADD, "lstm_cell_jvp", b, &args)?;
        Ok(self.wrap(out, shape, dt))
    }

    fn fold_adjoint(
        &self,
        op: HistOp,
        l: &GpuTensor<R>,
        a: &GpuTensor<R>,
        r: &GpuTensor<R>,
        g: &GpuTensor<R>,
    ) -> Result<GpuTensor<R>> {
        same_dtype("fold_adjoint", l, a)?;
        same_dtype("fold_adjoint", r, a)?;
        let dt = same_dtype("fold_adjoint", g, a)?;
        let n = a.buf.len;
        same_len("fold_adjoint", "l vs a", l.buf.len, n)?;
        same_len("fold_adjoint", "r vs a", r.buf.len, n)?;
        if g.buf.len != n && g.buf.len != 1 {
            return Err(OpError::Shape { op: "fold_adjoint", detail: format!("g has {} elements, a {n}", g.buf.len) });
        }
        let (out, shape) = self.new_tensor(a.shape.clone(), dt)?;
        self.launch(
            dt,
            op,
            "fold_adjoint",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&l.buf),
                Arg::Buf(&a.buf),
                Arg::Buf(&r.buf),
                Arg::Buf(&g.buf),
                Arg::I64(n as i64),
                Arg::I64(i64::from(g.buf.len == n)),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }

    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
        hist: &GpuTensor<R>,
        hist_bar: &GpuTensor<R>,
    ) -> Result<GpuTensor<R>> {
        same_dtype("total_form_adjoint", vals, hist)?;
        let dt = same_dtype("total_form_adjoint", hist, hist_bar)?;
        if !op.general().is_some_and(|g| g.has_total_form()) {
            return Err(OpError::Unsupported(format!("the operator {op} has no total form")));
        }
        same_len("total_form_adjoint", "indices vs values", inds.buf.len, vals.buf.len)?;
        same_len("total_form_adjoint", "hist vs hist_bar", hist.buf.len, hist_bar.buf.len)?;
        let (n, k) = (vals.buf.len, hist.buf.len);
        let (out, shape) = self.new_tensor(vals.shape.clone(), dt)?;
        self.launch(
            (dt, inds.dtype),
            op,
            "total_form_adjoint",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&inds.buf),
                Arg::Buf(&vals.buf),
                Arg::Buf(&hist.buf),
                Arg::Buf(&hist_bar.buf),
                Arg::I64(n as i64),
                Arg::I64(k as i64),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }

    fn reduce_by_index_dual(
        &self,
        dest: &GpuTensor<R>,
        dest_dot: &GpuTensor<R>,
        op: HistOp,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
        vals_dot: &GpuTensor<R>,
    ) -> Result<(GpuTensor<R>, GpuTensor<R>)> {
        same_dtype("reduce_by_index_dual", dest, dest_dot)?;
        same_dtype("reduce_by_index_dual", vals, vals_dot)?;
        let dt = same_dtype("reduce_by_index_dual", dest, vals)?;
        let (k, n) = (dest.buf.len, vals.buf.len);
        same_len("reduce_by_index_dual", "indices vs values", inds.buf.len, n)?;
        same_len("reduce_by_index_dual", "values vs tangents", n, vals_dot.buf.len)?;
        same_len("reduce_by_index_dual", "dest vs tangents", k, dest_dot.buf.len)?;
        let (h, shape) = self.new_tensor(dest.shape.clone(), dt)?;
        let hd = self.alloc(k, dt.size_bytes())?;
        let (chunks, chunk) = chunk_plan(n, k);
        let rows = self.alloc(chunks * k, dt.size_bytes())?;
        let rows_dot = self.alloc(chunks * k, dt.size_bytes())?;
        // A value and a tangent per bin in local memory.
        let group = self.chunk_group(chunk, k, 2 * dt.size_bytes());
        if let (true, Some(group)) = (k > 0, group) {
            self.rt.launch(
                dt,
                op,
                inds.dtype,
                "dual_rows_group",
                chunks * group,
                Some(group),
                &[
                    Arg::Buf(&rows),
                    Arg::Buf(&rows_dot),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::Buf(&vals_dot.buf),
                    Arg::I64(n as i64),
                    Arg::I64(k as i64),
                    Arg::I64(chunk as i64),
                    Arg::Local(2 * group * k * dt.size_bytes()),
                ],
            )?;
        } else if k > 0 {
            self.launch(
                (dt, inds.dtype),
                op,
                "dual_rows",
                chunks,
                &[
                    Arg::Buf(&rows),
                    Arg::Buf(&rows_dot),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::Buf(&vals_dot.buf),
                    Arg::I64(n as i64),
                    Arg::I64(k as i64),
                    Arg::I64(chunk as i64),
                    Arg::I64(chunks as i64),
                ],
            )?;
        }
        if k > 0 {
            self.launch(
                (dt, inds.dtype),
                op,
                "dual_merge",
                k,
                &[
                    Arg::Buf(&h),
                    Arg::Buf(&hd),
                    Arg::Buf(&dest.buf),
                    Arg::Buf(&dest_dot.buf),
                    Arg::Buf(&rows),
                    Arg::Buf(&rows_dot),
                    Arg::I64(k as i64),
                    Arg::I64(chunks as i64),
                ],
            )?;
        }
        Ok((self.wrap(h, shape.clone(), dt), self.wrap(hd, shape, dt)))
    }

    fn reduce_by_index_chunked(
        &self,
        dest: &GpuTensor<R>,
        op: HistOp,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
    ) -> Result<ChunkedHist<GpuTensor<R>>> {
        let dt = same_dtype("reduce_by_index_chunked", dest, vals)?;
        let (k, n) = (dest.buf.len, vals.buf.len);
        same_len("reduce_by_index_chunked", "indices vs values", inds.buf.len, n)?;
        self.rt.check_dtype(dt)?;
        let (chunks, chunk) = chunk_plan(n, k);
        let size = dt.size_bytes();
        let rows = self.alloc(chunks * k, size)?;
        let pre = self.alloc(chunks * k, size)?;
        let suf = self.alloc(chunks * k, size)?;
        let elements = self.alloc(k, size)?;
        let hist = self.alloc(k, size)?;
        let group = self.chunk_group(chunk, k, size);
        if let (true, Some(group)) = (k > 0, group) {
            self.rt.launch(
                dt,
                op,
                inds.dtype,
                "chunk_rows_group",
                chunks * group,
                Some(group),
                &[
                    Arg::Buf(&rows),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(n as i64),
                    Arg::I64(k as i64),
                    Arg::I64(chunk as i64),
                    Arg::Local(group * k * size),
                ],
            )?;
        } else if k > 0 {
            self.launch(
                (dt, inds.dtype),
                op,
                "chunk_rows",
                chunks,
                &[
                    Arg::Buf(&rows),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(n as i64),
                    Arg::I64(k as i64),
                    Arg::I64(chunk as i64),
                    Arg::I64(chunks as i64),
                ],
            )?;
        }
        if k > 0 {
            self.launch(
                (dt, inds.dtype),
                op,
                "chunk_carries",
                k,
                &[
                    Arg::Buf(&pre),
                    Arg::Buf(&suf),
                    Arg::Buf(&elements),
                    Arg::Buf(&hist),
                    Arg::Buf(&dest.buf),
                    Arg::Buf(&rows),
                    Arg::I64(k as i64),
                    Arg::I64(chunks as i64),
                ],
            )?;
        }
        Ok(ChunkedHist {
            hist: self.wrap(hist, dest.shape.clone(), dt),
            elements: self.wrap(elements, dest.shape.clone(), dt),
            chunk_prefix: self.wrap(pre, vec![chunks, k], dt),
            chunk_suffix: self.wrap(suf, vec![chunks, k], dt),
        })
    }

    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
        chunk_prefix: &GpuTensor<R>,
        chunk_suffix: &GpuTensor<R>,
        hist_bar: &GpuTensor<R>,
    ) -> Result<GpuTensor<R>> {
        same_dtype("chunked_vals_adjoint", vals, chunk_prefix)?;
        same_dtype("chunked_vals_adjoint", vals, chunk_suffix)?;
        let dt = same_dtype("chunked_vals_adjoint", vals, hist_bar)?;
        let (n, k) = (vals.buf.len, hist_bar.buf.len);
        same_len("chunked_vals_adjoint", "indices vs values", inds.buf.len, n)?;
        let (chunks, chunk) = chunk_plan(n, k);
        if chunk_prefix.shape != [chunks, k] || chunk_suffix.shape != [chunks, k] {
            return Err(OpError::Shape {
                op: "chunked_vals_adjoint",
                detail: format!(
                    "chunk carries {:?} and {:?} do not fit {chunks} chunks of {k} bins",
                    chunk_prefix.shape, chunk_suffix.shape
                ),
            });
        }
        let (out, shape) = self.new_tensor(vals.shape.clone(), dt)?;
        let y1 = self.alloc(n, dt.size_bytes())?;
        if let Some(group) = self.chunk_group(chunk, k, dt.size_bytes()) {
            self.rt.launch(
                dt,
                op,
                inds.dtype,
                "chunked_adjoint_group",
                if n == 0 { 0 } else { chunks * group },
                Some(group),
                &[
                    Arg::Buf(&out),
                    Arg::Buf(&y1),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::Buf(&chunk_prefix.buf),
                    Arg::Buf(&chunk_suffix.buf),
                    Arg::Buf(&hist_bar.buf),
                    Arg::I64(n as i64),
                    Arg::I64(k as i64),
                    Arg::I64(chunk as i64),
                    Arg::Local(group * k.max(1) * dt.size_bytes()),
                ],
            )?;
            return Ok(self.wrap(out, shape, dt));
        }
        let run = self.alloc(chunks * k, dt.size_bytes())?;
        self.launch(
            (dt, inds.dtype),
            op,
            "chunked_adjoint",
            if n == 0 { 0 } else { chunks },
            &[
                Arg::Buf(&out),
                Arg::Buf(&y1),
                Arg::Buf(&run),
                Arg::Buf(&inds.buf),
                Arg::Buf(&vals.buf),
                Arg::Buf(&chunk_prefix.buf),
                Arg::Buf(&chunk_suffix.buf),
                Arg::Buf(&hist_bar.buf),
                Arg::I64(n as i64),
                Arg::I64(k as i64),
                Arg::I64(chunk as i64),
                Arg::I64(chunks as i64),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }
}
