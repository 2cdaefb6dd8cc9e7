//! The CPU device's fused rule kernels: [`RuleKernels`] for [`Cpu`], with the per-dtype bodies its
//! methods dispatch to.

use crate::*;

impl Cpu {
    pub(crate) fn gather_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        src: &CpuTensor,
        idx: &CpuIndex,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (g, k, ix) = (g.slice::<T>()?, src.numel(), idx.slice::<X>()?);
        let mut out = self.pool().take::<T>(k);
        out.fill(T::of_f64(HistOp::Add.neutral()));
        for (i, &v) in g.iter().enumerate() {
            if let Some(b) = ix[i].bin(k) {
                out[b] = out[b] + v;
            }
        }
        Ok(self.wrap(out, src.shape.clone()))
    }

    pub(crate) fn unary_adjoint_t<T: CpuElem>(
        &self,
        op: UnaryOp,
        x: &CpuTensor,
        y: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (xs, ys, gs) = (x.slice::<T>()?, y.slice::<T>()?, g.slice::<T>()?);
        if ys.len() != xs.len() || gs.len() != xs.len() {
            return Err(OpError::Shape {
                op: "unary_adjoint",
                detail: format!("x {:?}, y {:?}, adjoint {:?}", x.shape, y.shape, g.shape),
            });
        }
        let mut out = self.pool().take::<T>(xs.len());
        if xs.len() < kernels::PAR_MIN {
            kernels::unary_adjoint_map(op, xs, ys, gs, &mut out);
        } else {
            out.par_chunks_mut(kernels::BLOCK)
                .zip(
                    xs.par_chunks(kernels::BLOCK).zip(ys.par_chunks(kernels::BLOCK)).zip(gs.par_chunks(kernels::BLOCK)),
                )
                .for_each(|(o, ((x, y), g))| kernels::unary_adjoint_map(op, x, y, g, o));
        }
        Ok(self.wrap(out, g.shape.clone()))
    }

    pub(crate) fn prod_vals_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        c0: &CpuTensor,
        c1: &CpuTensor,
        c2: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (v, z0, z1, z2) = (vals.slice::<T>()?, c0.slice::<T>()?, c1.slice::<T>()?, c2.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("prod_vals_adjoint", "indices vs values", ix.len(), v.len())?;
        same_len("prod_vals_adjoint", "c0 vs c1", z0.len(), z1.len())?;
        same_len("prod_vals_adjoint", "c0 vs c2", z0.len(), z2.len())?;
        let k = z0.len();
        let mut out = self.pool().take::<T>(v.len());
        if k == 0 {
            fill_with(&mut out, |_| T::zero());
            return Ok(self.wrap(out, vals.shape.clone()));
        }
        // Selects, not branches: c0 is 0 in every bin with a zero (about two bins in three of
        // the benchmark's data), so a branch on it mispredicted at random. An out-of-range
        // element reads bin 0 and is then set to 0.
        fill_with(&mut out, |i| {
            let b = ix[i].idx();
            let inside = (b as u64) < k as u64;
            let at = if inside { b as usize } else { 0 };
            let (x, c0, c1) = (v[i], z0[at], z1[at]);
            let q = c0 / x;
            // A zero c0 gives 0 even at a NaN value (a bin whose adjoint is 0). Selects the
            // compiler must keep (`select_unpredictable`): as plain `if`s it branched around the
            // division, and the branch on c0 mispredicted at random.
            let r = std::hint::select_unpredictable(c0 == T::zero(), T::zero(), q);
            let r = std::hint::select_unpredictable(x == T::zero(), c1, r);
            // A branch, not a select: infinite values are rare, and c2 is read only for them.
            let r = if x.is_infinite() { infinite_factor_adjoint(z2[at], x) } else { r };
            if inside { r } else { T::zero() }
        });
        Ok(self.wrap(out, vals.shape.clone()))
    }

    pub(crate) fn fold_adjoint_t<T: CpuElem>(
        &self,
        op: HistOp,
        l: &CpuTensor,
        a: &CpuTensor,
        r: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (ls, xs, rs, gs) = (l.slice::<T>()?, a.slice::<T>()?, r.slice::<T>()?, g.slice::<T>()?);
        let n = xs.len();
        same_len("fold_adjoint", "l vs a", ls.len(), n)?;
        same_len("fold_adjoint", "r vs a", rs.len(), n)?;
        if gs.len() != n && gs.len() != 1 {
            return Err(OpError::Shape { op: "fold_adjoint", detail: format!("g has {} elements, a {n}", gs.len()) });
        }
        let sg = usize::from(gs.len() == n);
        let mut out = self.pool().take::<T>(n);
        with_fold!(op, T, f => fill_with(&mut out, |i| {
            let gi = gs[i * sg];
            if gi == T::zero() {
                return T::zero();
            }
            let y = f.combine(ls[i], xs[i]);
            f.chain3(f.d2(ls[i], xs[i]), f.d1(y, rs[i]), gi)
        }));
        Ok(self.wrap(out, a.shape.clone()))
    }

    pub(crate) fn sorted_vals_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        dest: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (v, d, g) = (vals.slice::<T>()?, dest.slice::<T>()?, hist_bar.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("sorted_vals_adjoint", "indices vs values", ix.len(), v.len())?;
        same_len("sorted_vals_adjoint", "dest vs hist_bar", d.len(), g.len())?;
        let (pool, neutral) = (self.pool(), T::of_f64(op.neutral()));
        let mut out = pool.take::<T>(v.len());
        with_fold!(op, T, f => if v.len() <= u32::MAX as usize {
            segments::sorted_adjoint::<u32, _, _, _>(pool, f, neutral, ix, v, d, g, &mut out)
        } else {
            segments::sorted_adjoint::<usize, _, _, _>(pool, f, neutral, ix, v, d, g, &mut out)
        });
        Ok(self.wrap(out, vals.shape.clone()))
    }

    pub(crate) fn total_form_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        hist: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        let total = op
            .general()
            .and_then(|g| g.fns::<T>().total)
            .ok_or_else(|| OpError::Unsupported(format!("the operator {op} has no total form")))?;
        let (v, h, g) = (vals.slice::<T>()?, hist.slice::<T>()?, hist_bar.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("total_form_adjoint", "indices vs values", ix.len(), v.len())?;
        same_len("total_form_adjoint", "hist vs hist_bar", h.len(), g.len())?;
        let k = h.len();
        let mut out = self.pool().take::<T>(v.len());
        if let fold::Kind::LogAddExp = fold::kind(op)
            && k > 0
        {
            lae::total_adjoint(self.pool(), ix, v, h, g, &mut out);
        } else {
            fill_with(&mut out, |i| match ix[i].bin(k) {
                Some(b) if g[b] != T::zero() => total(v[i], h[b]) * g[b],
                _ => T::zero(),
            });
        }
        Ok(self.wrap(out, vals.shape.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn chunked_vals_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        chunk_prefix: &CpuTensor,
        chunk_suffix: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (v, pre, suf, g) =
            (vals.slice::<T>()?, chunk_prefix.slice::<T>()?, chunk_suffix.slice::<T>()?, hist_bar.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        let (n, k) = (v.len(), g.len());
        same_len("chunked_vals_adjoint", "indices vs values", ix.len(), n)?;
        let plan = hist::Plan::new(n, k);
        if chunk_prefix.shape != [plan.chunks, k] || chunk_suffix.shape != [plan.chunks, k] {
            return Err(OpError::Shape {
                op: "chunked_vals_adjoint",
                detail: format!(
                    "chunk carries {:?} and {:?} do not fit {} chunks of {k} bins",
                    chunk_prefix.shape, chunk_suffix.shape, plan.chunks
                ),
            });
        }
        let mut out = self.pool().take::<T>(n);
        with_fold!(op, T, f => self.chunked_adjoint(f, plan, ix, v, pre, suf, g, &mut out));
        Ok(self.wrap(out, vals.shape.clone()))
    }

    /// The general rule's value adjoint, chunk by chunk in parallel ([`hist::adjoint_chunk`]:
    /// a forward pass from the chunk's prefix row, a backward pass from its suffix row, by bin
    /// windows when k bins outgrow L2).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn chunked_adjoint<T: CpuElem, X: IndexElem, F: Fold<T>>(
        &self,
        f: F,
        plan: hist::Plan,
        ix: &[X],
        v: &[T],
        pre: &[T],
        suf: &[T],
        g: &[T],
        out: &mut [T],
    ) {
        let (k, pool) = (g.len(), self.pool());
        let window_bins = hist::adjoint_window_bins::<T>(k, plan.chunk_len);
        let chunk = |ci: usize, o: &mut [T]| {
            let start = ci * plan.chunk_len;
            let (ix, v) = (&ix[start..start + o.len()], &v[start..start + o.len()]);
            let (pre, suf) = (&pre[ci * k..(ci + 1) * k], &suf[ci * k..(ci + 1) * k]);
            hist::adjoint_chunk(f, pool, ix, v, pre, suf, g, o, window_bins);
        };
        if plan.chunks == 1 {
            chunk(0, out);
        } else {
            out.par_chunks_mut(plan.chunk_len).enumerate().for_each(|(ci, o)| chunk(ci, o));
        }
    }
}

impl RuleKernels for Cpu {
    /// One zero-filled output and one pass adding g into it, where the histogram would run as
    /// one sequential fold (a single chunk and row: the LSTM's rows of 14 into its state): the
    /// same additions in the same order as the composed form, without its zeros tensor, its
    /// copy of them and its reshape. Larger cases run the composed form.
    fn gather_adjoint(&self, src: &CpuTensor, idx: &CpuIndex, g: &CpuTensor) -> Result<CpuTensor> {
        let (n, k) = (g.numel(), src.numel());
        if hist::Plan::new(n, k).rows() > 1 || src.dtype() != g.dtype() {
            return crate::composed::indexing::gather_adjoint_composed(self, src, idx, g);
        }
        same_len("reduce_by_index", "indices vs values", idx.len(), n)?;
        by_dtypes!(g.dtype(), idx.index_dtype(), self.gather_adjoint_t(src, idx, g))
    }

    fn sum_sq_diff_adjoint(&self, a: &CpuTensor, c: &CpuTensor, g: &CpuTensor) -> Result<CpuTensor> {
        match crate::shape::sum_sq_diff_rows(&a.shape, &c.shape) {
            Some(plan) => dense::device::sum_sq_diff_adjoint_op(self, a, c, g, plan),
            None => crate::composed::dense::sum_sq_diff_adjoint_composed(self, a, c, g),
        }
    }

    fn logsumexp_adjoint(&self, x: &CpuTensor, y: &CpuTensor, g: &CpuTensor, axis: usize) -> Result<CpuTensor> {
        dense::device::logsumexp_adjoint_op(self, x, y, g, axis)
    }

    fn lstm_cell_vjp(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        lstm::device::lstm_cell_vjp_op(self, x, state, params, g)
    }

    fn lstm_cell_jvp(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        dx: &CpuTensor,
        dstate: &CpuTensor,
        dparams: &CpuTensor,
    ) -> Result<CpuTensor> {
        lstm::device::lstm_cell_jvp_op(self, [x, state, params, dx, dstate, dparams])
    }

    fn lstm_cell_gates(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
    ) -> Result<(CpuTensor, Option<CpuTensor>)> {
        lstm::device::lstm_cell_gates_op(self, x, state, params)
    }

    fn lstm_cell_vjp_saved(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        gates: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        lstm::device::lstm_cell_vjp_saved_op(self, [x, state, params, gates, g])
    }

    fn lstm_cell_jvp_saved(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        gates: &CpuTensor,
        dx: &CpuTensor,
        dstate: &CpuTensor,
        dparams: &CpuTensor,
    ) -> Result<CpuTensor> {
        lstm::device::lstm_cell_jvp_saved_op(self, [x, state, params, dx, dstate, dparams], gates)
    }

    fn unary_adjoint(&self, op: UnaryOp, x: &CpuTensor, y: &CpuTensor, g: &CpuTensor) -> Result<Option<CpuTensor>> {
        if op == UnaryOp::Sign {
            return Ok(None);
        }
        let dt = same_dtype("unary_adjoint", x, g)?;
        same_dtype("unary_adjoint", y, g)?;
        self.run(x.numel(), || by_dtype!(dt, self.unary_adjoint_t(op, x, y, g))).map(Some)
    }

    fn fold_adjoint(
        &self,
        op: HistOp,
        l: &CpuTensor,
        a: &CpuTensor,
        r: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("fold_adjoint", l, a)?;
        same_dtype("fold_adjoint", r, a)?;
        let dt = same_dtype("fold_adjoint", g, a)?;
        self.run(a.numel(), || by_dtype!(dt, self.fold_adjoint_t(op, l, a, r, g)))
    }

    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        hist: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("total_form_adjoint", vals, hist)?;
        let dt = same_dtype("total_form_adjoint", hist, hist_bar)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.total_form_adjoint_t(op, inds, vals, hist, hist_bar))
        })
    }

    fn sorted_vals_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        dest: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("sorted_vals_adjoint", vals, dest)?;
        let dt = same_dtype("sorted_vals_adjoint", dest, hist_bar)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.sorted_vals_adjoint_t(op, inds, vals, dest, hist_bar))
        })
    }

    fn reduce_by_index_dual(
        &self,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor)> {
        same_dtype("reduce_by_index_dual", dest, dest_dot)?;
        same_dtype("reduce_by_index_dual", vals, vals_dot)?;
        let dt = same_dtype("reduce_by_index_dual", dest, vals)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.reduce_by_index_dual_t(dest, dest_dot, op, inds, vals, vals_dot))
        })
    }

    fn reduce_by_index_chunked(
        &self,
        dest: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<ChunkedHist<CpuTensor>> {
        let dt = same_dtype("reduce_by_index_chunked", dest, vals)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.reduce_by_index_chunked_t(dest, op, inds, vals))
        })
    }

    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        chunk_prefix: &CpuTensor,
        chunk_suffix: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("chunked_vals_adjoint", vals, chunk_prefix)?;
        same_dtype("chunked_vals_adjoint", vals, chunk_suffix)?;
        let dt = same_dtype("chunked_vals_adjoint", vals, hist_bar)?;
        self.run(inds.len(), || {
            by_dtypes!(
                dt,
                inds.index_dtype(),
                self.chunked_vals_adjoint_t(op, inds, vals, chunk_prefix, chunk_suffix, hist_bar)
            )
        })
    }
}
