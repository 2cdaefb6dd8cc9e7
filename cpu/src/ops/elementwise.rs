//! The CPU device's elementwise ops: [`ElementwiseOps`] for [`Cpu`], with the per-dtype bodies its
//! methods dispatch to.

use crate::*;

impl Cpu {
    pub(crate) fn unary_t<T: CpuElem>(&self, op: UnaryOp, x: &CpuTensor) -> Result<CpuTensor> {
        let xs = x.slice::<T>()?;
        let mut out = self.pool().take::<T>(xs.len());
        if xs.len() < kernels::PAR_MIN {
            kernels::unary_map(op, xs, &mut out);
        } else {
            out.par_chunks_mut(kernels::BLOCK)
                .zip(xs.par_chunks(kernels::BLOCK))
                .for_each(|(o, x)| kernels::unary_map(op, x, o));
        }
        Ok(self.wrap(out, x.shape.clone()))
    }

    pub(crate) fn binary_t<T: CpuElem>(&self, op: BinaryOp, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        per_binary_op!(op, T, f => self.zip_t::<T>("binary", a, b, f))
    }

    /// `out[i] = f(a[i], b[i])` with broadcasting of a one-element operand.
    pub(crate) fn zip_t<T: CpuElem>(
        &self,
        name: &'static str,
        a: &CpuTensor,
        b: &CpuTensor,
        f: impl Fn(T, T) -> T + Sync,
    ) -> Result<CpuTensor> {
        let shape = broadcast_shape(name, &a.shape, &b.shape)?;
        let (xs, ys) = (a.slice::<T>()?, b.slice::<T>()?);
        let n: usize = shape.iter().product();
        let mut out = self.pool().take::<T>(n);
        match (xs.len() == n, ys.len() == n) {
            (true, true) => fill_with(&mut out, |i| f(xs[i], ys[i])),
            (false, true) => {
                let x = xs[0];
                fill_with(&mut out, |i| f(x, ys[i]))
            }
            (true, false) => {
                let y = ys[0];
                fill_with(&mut out, |i| f(xs[i], y))
            }
            (false, false) => unreachable!("broadcast_shape admits no such pair"),
        }
        Ok(self.wrap(out, shape))
    }

    pub(crate) fn select_t<T: CpuElem>(&self, mask: &CpuTensor, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let n = mask.numel();
        let (ms, xs, ys) = (mask.slice::<T>()?, a.slice::<T>()?, b.slice::<T>()?);
        for (what, len) in [("a", xs.len()), ("b", ys.len())] {
            if len != n && len != 1 {
                return Err(OpError::Shape { op: "select", detail: format!("mask has {n} elements, {what} {len}") });
            }
        }
        let (sx, sy) = (usize::from(xs.len() == n && n != 1), usize::from(ys.len() == n && n != 1));
        let mut out = self.pool().take::<T>(n);
        // A stride of 0 broadcasts a one-element operand. A select, not a branch: masks of
        // data-dependent conditions (the `*` rule's bins with a zero) are random.
        fill_with(&mut out, |i| std::hint::select_unpredictable(ms[i] != T::zero(), xs[i * sx], ys[i * sy]));
        Ok(self.wrap(out, mask.shape.clone()))
    }

    pub(crate) fn index_eq_t<T: CpuElem, X: CpuIndexElem>(&self, i: &CpuIndex, value: i64) -> Result<CpuTensor> {
        let ix = i.slice::<X>()?;
        let mut out = self.pool().take::<T>(ix.len());
        fill_with(&mut out, |j| if ix[j].idx() == value { T::one() } else { T::zero() });
        Ok(self.wrap(out, vec![ix.len()]))
    }
}

impl ElementwiseOps for Cpu {
    fn unary(&self, op: UnaryOp, x: &CpuTensor) -> Result<CpuTensor> {
        self.run(x.numel(), || by_dtype!(x.dtype(), self.unary_t(op, x)))
    }

    fn binary(&self, op: BinaryOp, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("binary", a, b)?;
        self.run(a.numel().max(b.numel()), || by_dtype!(dt, self.binary_t(op, a, b)))
    }

    /// Adds into `acc`'s buffer when nothing else holds it and the shapes match: the reverse
    /// sweep of a tiny-op workload (the LSTM's parameter and state adjoints, accumulated once
    /// per step) otherwise allocates a tensor per accumulation.
    fn accumulate(&self, mut acc: CpuTensor, c: &CpuTensor) -> Result<CpuTensor> {
        if acc.shape == c.shape
            && let Some(values) = Arc::get_mut(&mut acc.values)
        {
            let n = c.numel();
            match (values, &*c.values) {
                (Values::F32(a), Values::F32(b)) => self.run(n, || kernels::add_into(a, b)),
                (Values::F64(a), Values::F64(b)) => self.run(n, || kernels::add_into(a, b)),
                _ => return self.add(&acc, c), // a dtype mix: add's error
            }
            // New values: no longer relative inputs.
            acc.peaks_at_zero_under = None;
            return Ok(acc);
        }
        self.add(&acc, c)
    }

    /// Writes into `x`'s buffer when nothing else holds it: a replay's dying operand then
    /// costs no allocation (the LSTM's thousands of 14-element tensors) and no fresh buffer
    /// (BA's 250 KB ones).
    fn unary_donated(&self, op: UnaryOp, mut x: CpuTensor) -> Result<CpuTensor> {
        let n = x.numel();
        match Arc::get_mut(&mut x.values) {
            Some(Values::F32(b)) => self.run(n, || unary_in_place::<f32>(op, b)),
            Some(Values::F64(b)) => self.run(n, || unary_in_place::<f64>(op, b)),
            None => return self.unary(op, &x),
        }
        x.peaks_at_zero_under = None;
        Ok(x)
    }

    /// Writes into the donor's buffer when nothing else holds it and the result has its shape
    /// (the other operand may broadcast into it); the same per-operator loops as `binary`.
    fn binary_donated(
        &self,
        op: BinaryOp,
        mut donor: CpuTensor,
        other: &CpuTensor,
        donor_is_a: bool,
    ) -> Result<CpuTensor> {
        let (a, b) = if donor_is_a { (&donor, other) } else { (other, &donor) };
        let fits = crate::checks::broadcast_is(&a.shape, &b.shape, donor_is_a);
        let n = donor.numel();
        match (fits, Arc::get_mut(&mut donor.values), &*other.values) {
            (true, Some(Values::F32(d)), Values::F32(o)) => self.run(n, || binary_in_place(op, d, o, donor_is_a)),
            (true, Some(Values::F64(d)), Values::F64(o)) => self.run(n, || binary_in_place(op, d, o, donor_is_a)),
            _ if donor_is_a => return self.binary(op, &donor, other),
            _ => return self.binary(op, other, &donor),
        }
        donor.peaks_at_zero_under = None;
        Ok(donor)
    }

    fn select(&self, mask: &CpuTensor, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        same_dtype("select", mask, a)?;
        let dt = same_dtype("select", a, b)?;
        self.run(mask.numel(), || by_dtype!(dt, self.select_t(mask, a, b)))
    }

    fn index_eq(&self, i: &CpuIndex, value: i64, dtype: DType) -> Result<CpuTensor> {
        self.run(i.len(), || by_dtypes!(dtype, i.index_dtype(), self.index_eq_t(i, value)))
    }

    fn combine(&self, op: HistOp, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("combine", a, b)?;
        self.run(a.numel().max(b.numel()), || match dt {
            DType::F32 => self.zip_t::<f32>("combine", a, b, |x, y| kernels::combine(op, x, y)),
            DType::F64 => self.zip_t::<f64>("combine", a, b, |x, y| kernels::combine(op, x, y)),
        })
    }

    fn combine_partial(&self, op: HistOp, side: Operand, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("combine_partial", a, b)?;
        self.run(a.numel().max(b.numel()), || match dt {
            DType::F32 => self.zip_t::<f32>("combine_partial", a, b, |x, y| kernels::partial(op, side, x, y)),
            DType::F64 => self.zip_t::<f64>("combine_partial", a, b, |x, y| kernels::partial(op, side, x, y)),
        })
    }
}
