//! The CPU device's histograms (`reduce_by_index` and its variants): [`HistOps`] for [`Cpu`], with
//! the per-dtype bodies its methods dispatch to.

use crate::*;

impl Cpu {
    pub(crate) fn reduce_by_index_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("reduce_by_index", "indices vs values", ix.len(), v.len())?;
        let (k, pool) = (d.len(), self.pool());
        if let fold::Kind::LogAddExp = fold::kind(op)
            && let Some(out) = lae::hist(pool, d, ix, v, CpuTensor::relative_shift_under(dest, vals, inds))
        {
            return Ok(self.wrap(out, dest.shape.clone()));
        }
        let neutral = T::of_f64(op.neutral());
        // One fold type per operator (`with_fold!`), so each inner loop is specialised.
        let totals = match fold::kind(op) {
            // Plain products in the hot loop (the absorbing product's branches cost 1.4x at
            // k = 10^3); they differ from it only where a zero met an inf or a NaN, which leaves
            // a NaN total: then the histogram is refolded with zeros absorbing. Zeros' signs are
            // evened out when dest is combined in below.
            fold::Kind::Mul => {
                let plain = scalar_totals(pool, ix, k, neutral, v, fold::PlainMulF);
                if plain.iter().any(|t| t.is_nan()) {
                    scalar_totals(pool, ix, k, neutral, v, fold::MulF)
                } else {
                    plain
                }
            }
            fold::Kind::Min => extremum_bin_totals(pool, ix, k, v, Extremum::Min),
            fold::Kind::Max => extremum_bin_totals(pool, ix, k, v, Extremum::Max),
            _ => with_fold!(op, T, f => scalar_totals(pool, ix, k, neutral, v, f)),
        };
        #[cfg(feature = "planted-slowdown")]
        if let fold::Kind::Add = fold::kind(op) {
            planted::add_fold_again(pool, ix, k, v);
        }
        let mut out = pool.take::<T>(k);
        kernels::combine_into(op, d, &totals, &mut out);
        Ok(self.wrap(out, dest.shape.clone()))
    }

    pub(crate) fn arg_reduce_by_index_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        ext: Extremum,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<(CpuTensor, CpuIndex)> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("arg_reduce_by_index", "indices vs values", ix.len(), v.len())?;
        let (k, pool) = (d.len(), self.pool());
        let mut vals_out = pool.take::<T>(k);
        let mut pos_out = pool.take::<i64>(k);
        // u32 positions when n allows (8-byte accumulators for f32 instead of 16).
        macro_rules! finish {
            ($p:ty) => {{
                let totals = match ext {
                    Extremum::Min => self.arg_totals::<T, X, $p, false>(ix, v, k),
                    Extremum::Max => self.arg_totals::<T, X, $p, true>(ix, v, k),
                };
                // dest sits at position -1: it wins every tie.
                fill_with(&mut vals_out, |b| {
                    let (tv, tp) = totals[b];
                    if ext.beats(tv, tp.pos(), d[b], -1) { tv } else { d[b] }
                });
                fill_with(&mut pos_out, |b| {
                    let (tv, tp) = totals[b];
                    if ext.beats(tv, tp.pos(), d[b], -1) { tp.pos() } else { -1 }
                });
            }};
        }
        if ix.len() < u32::MAX as usize {
            finish!(u32)
        } else {
            finish!(i64)
        }
        Ok((self.wrap(vals_out, dest.shape.clone()), self.wrap_index(pos_out)))
    }

    /// Per-bin (winning value, position) of the elements alone; empty bins hold
    /// (neutral, P::NONE), which any element beats.
    pub(crate) fn arg_totals<T: CpuElem, X: IndexElem, P: ArgPos, const MAX: bool>(
        &self,
        ix: &[X],
        v: &[T],
        k: usize,
    ) -> Buf<(T, P)> {
        let ext = if MAX { Extremum::Max } else { Extremum::Min };
        let neutral = if MAX { T::neg_infinity() } else { T::infinity() };
        // `beats` with positions compared as P (the order of P matches that of i64 here).
        let wins = |a: T, pa: P, b: T, pb: P| ext.beats(a, pa, b, pb);
        hist::bin_totals(
            self.pool(),
            ix,
            k,
            (neutral, P::NONE),
            |a, i| {
                let p = P::of(i);
                if wins(v[i], p, a.0, a.1) {
                    *a = (v[i], p)
                }
            },
            |a, b| {
                if wins(b.0, b.1, a.0, a.1) {
                    *a = b
                }
            },
        )
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn prod_nonzero_by_index_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        k: usize,
    ) -> Result<(CpuTensor, CpuIndex, CpuIndex)> {
        let v = vals.slice::<T>()?;
        let ix = inds.slice::<X>()?;
        same_len("prod_nonzero_by_index", "indices vs values", ix.len(), v.len())?;
        let pool = self.pool();
        // A vector scan first (a sequential read of the values): which counts are needed. Data
        // with neither zeros nor infinities folds the product alone, in 4-byte rows like the
        // primal's; with zeros, (product, zeros) in rows of 8 bytes for f32 and u32 counts; with
        // an infinity, every count (12 bytes). At k = 10^6 the random updates slow with the
        // bytes of the rows (n = 10^7, f32: 40 ms with 12-byte rows, 25 with 8-byte ones).
        let (any_zero, any_infinity) = zeros_and_infinities(v);
        let no_counts = || pool.filled::<i64>(k, 0);
        macro_rules! count {
            ($c:ty) => {{
                let (mut p, mut z) = (pool.take::<T>(k), pool.take::<i64>(k));
                if !any_infinity {
                    let totals = hist::bin_totals(
                        pool,
                        ix,
                        k,
                        (T::one(), 0 as $c),
                        |a, i| {
                            let x = v[i];
                            let zero = x == T::zero();
                            a.1 += <$c>::from(zero);
                            a.0 = a.0 * if zero { T::one() } else { x };
                        },
                        |a, b| *a = (a.0 * b.0, a.1 + b.1),
                    );
                    fill_with(&mut p, |b| totals[b].0);
                    fill_with(&mut z, |b| totals[b].1 as i64);
                    (p, z, no_counts())
                } else {
                    let totals = hist::bin_totals(
                        pool,
                        ix,
                        k,
                        (T::one(), 0 as $c, 0 as $c),
                        |a, i| {
                            let x = v[i];
                            if x == T::zero() {
                                a.1 += 1
                            } else if x.is_infinite() {
                                count_infinity(&mut a.0, &mut a.2, x)
                            } else {
                                a.0 = a.0 * x
                            }
                        },
                        |a, b| *a = (a.0 * b.0, a.1 + b.1, a.2 + b.2),
                    );
                    let mut m = pool.take::<i64>(k);
                    fill_with(&mut p, |b| totals[b].0);
                    fill_with(&mut z, |b| totals[b].1 as i64);
                    fill_with(&mut m, |b| totals[b].2 as i64);
                    (p, z, m)
                }
            }};
        }
        let (p, z, m) = if !any_zero && !any_infinity {
            (scalar_totals(pool, ix, k, T::one(), v, fold::PlainMulF), no_counts(), no_counts())
        } else if ix.len() < u32::MAX as usize {
            count!(u32)
        } else {
            count!(i64)
        };
        Ok((self.wrap(p, vec![k]), self.wrap_index(z), self.wrap_index(m)))
    }

    /// [`HistOps::relative_inputs`]: the bins' maxima in one histogram pass (the same fold and
    /// order as `reduce_by_index` with max, so the same anchors), then each input relative to
    /// its anchor in one pass (out-of-range elements relative to the neutral anchor, as the
    /// composition's gather fills them).
    #[allow(clippy::type_complexity)]
    pub(crate) fn relative_inputs_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        kind: Relative,
        dest: &CpuTensor,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("relative_inputs", "indices vs values", ix.len(), v.len())?;
        // One loop per kind (a kind read inside the loops kept its branches there).
        let (anchor, dest_rel, vals_rel) = match kind {
            Relative::Shift => self.relative_of::<T, X, false>(d, ix, v),
            Relative::Scale => self.relative_of::<T, X, true>(d, ix, v),
        };
        let k = d.len();
        let (mut dest_rel, mut vals_rel) =
            (self.wrap(dest_rel, dest.shape.clone()), self.wrap(vals_rel, vals.shape.clone()));
        if kind == Relative::Shift {
            dest_rel.peaks_at_zero_under = Some(inds.data.clone());
            vals_rel.peaks_at_zero_under = Some(inds.data.clone());
        }
        Ok((self.wrap(anchor, vec![k]), dest_rel, vals_rel))
    }

    /// [`Cpu::relative_inputs_t`] for one kind: `SCALE` (hypot: magnitudes, x / m) or not
    /// (logaddexp: x - m).
    pub(crate) fn relative_of<T: CpuElem, X: CpuIndexElem, const SCALE: bool>(
        &self,
        d: &[T],
        ix: &[X],
        v: &[T],
    ) -> (Buf<T>, Buf<T>, Buf<T>) {
        let (k, pool) = (d.len(), self.pool());
        let max = fold::MaxF;
        let (empty, neutral) = if SCALE { (T::zero(), T::one()) } else { (T::neg_infinity(), T::zero()) };
        let magnitude = |x: T| if SCALE { x.abs() } else { x };
        let totals = hist::bin_totals(
            pool,
            ix,
            k,
            T::neg_infinity(),
            |a, i| *a = max.combine(*a, magnitude(v[i])),
            |a, b| *a = max.combine(*a, b),
        );
        let mut anchor = pool.take::<T>(k);
        fill_with(&mut anchor, |b| {
            let m = kernels::combine(HistOp::Max, magnitude(d[b]), totals[b]);
            if m == empty { neutral } else { m }
        });
        let relative = |x: T, a: T| {
            if SCALE {
                if x.abs() == a { kernels::unary(UnaryOp::Sign, x) } else { x / a }
            } else if x == a {
                T::zero()
            } else {
                x - a
            }
        };
        let mut dest_rel = pool.take::<T>(k);
        fill_with(&mut dest_rel, |b| relative(d[b], anchor[b]));
        let mut vals_rel = pool.take::<T>(v.len());
        fill_with(&mut vals_rel, |i| {
            let b = ix[i].idx();
            let inside = (b as u64) < k as u64;
            // A select (bin 0 read, then not used), not a branch: out-of-range indices come at
            // random.
            let a = if k == 0 { neutral } else { anchor[if inside { b as usize } else { 0 }] };
            relative(v[i], if inside { a } else { neutral })
        });
        (anchor, dest_rel, vals_rel)
    }

    /// [`HistOps::relative_reduce_by_index_dual`] of logaddexp.
    pub(crate) fn lae_dual_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<Option<(CpuTensor, CpuTensor)>> {
        let (d, dd, ix, v, vd) =
            dual_operands::<T, X>("relative_reduce_by_index_dual", dest, dest_dot, inds, vals, vals_dot)?;
        Ok(lae::hist_dual(self.pool(), d, dd, ix, v, vd, false)
            .map(|(h, hd)| (self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone()))))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_by_index_dual_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor)> {
        let (d, dd, ix, v, vd) = dual_operands::<T, X>("reduce_by_index_dual", dest, dest_dot, inds, vals, vals_dot)?;
        let (k, pool) = (d.len(), self.pool());
        if let fold::Kind::LogAddExp = fold::kind(op)
            && let Some((h, hd)) =
                lae::hist_dual(pool, d, dd, ix, v, vd, CpuTensor::relative_shift_under(dest, vals, inds))
        {
            return Ok((self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone())));
        }
        if let fold::Kind::Add = fold::kind(op)
            && hist::split_pair_rows::<T>(k)
        {
            let (h, hd) = add_dual_in_two_passes(pool, d, dd, ix, v, vd);
            return Ok((self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone())));
        }
        let mut h = pool.take::<T>(k);
        let mut hd = pool.take::<T>(k);
        let neutral = (T::of_f64(op.neutral()), T::zero());
        let totals = match fold::kind(op) {
            // As the primal: plain products, refolded with zeros absorbing only where a zero met
            // an inf (a NaN value or tangent total).
            fold::Kind::Mul => {
                let plain = dual_totals(pool, ix, k, neutral, v, vd, fold::PlainMulF);
                if plain.iter().any(|&(a, b)| a.is_nan() || b.is_nan()) {
                    dual_totals(pool, ix, k, neutral, v, vd, fold::MulF)
                } else {
                    plain
                }
            }
            _ => with_fold!(op, T, f => dual_totals(pool, ix, k, neutral, v, vd, f)),
        };
        with_fold!(op, T, f => {
            fill_with(&mut h, |b| f.lift((d[b], dd[b]), totals[b]).0);
            fill_with(&mut hd, |b| f.lift((d[b], dd[b]), totals[b]).1);
        });
        Ok((self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone())))
    }

    pub(crate) fn reduce_by_index_chunked_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<ChunkedHist<CpuTensor>> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("reduce_by_index_chunked", "indices vs values", ix.len(), v.len())?;
        let k = d.len();
        let neutral = T::of_f64(op.neutral());
        with_fold!(op, T, f => self.chunked_forward(f, dest, d, v, ix, k, neutral))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn chunked_forward<T: CpuElem, X: IndexElem, F: Fold<T>>(
        &self,
        f: F,
        dest: &CpuTensor,
        d: &[T],
        v: &[T],
        ix: &[X],
        k: usize,
        neutral: T,
    ) -> Result<ChunkedHist<CpuTensor>> {
        let pool = self.pool();
        let comb = |a: T, b: T| f.combine(a, b);
        let (plan, rows) =
            hist::chunk_totals(pool, ix, k, neutral, |a, i| *a = comb(*a, v[i]), |a, b| *a = comb(*a, b));
        let c = plan.chunks;
        // Row c of the prefix: dest folded with chunk totals 0..c; of the suffix: the totals of
        // chunks c+1.. (right-associated; the operator is associative).
        let mut pre = pool.take::<T>(c * k);
        let mut suf = pool.take::<T>(c * k);
        par_copy(&mut pre[..k], d);
        for ci in 1..c {
            let (done, rest) = pre.split_at_mut(ci * k);
            let prev = &done[(ci - 1) * k..];
            let t = &rows[(ci - 1) * k..ci * k];
            fill_with(&mut rest[..k], |b| comb(prev[b], t[b]));
        }
        par_fill(&mut suf[(c - 1) * k..], neutral);
        for ci in (0..c - 1).rev() {
            let (head, tail) = suf.split_at_mut((ci + 1) * k);
            let next = &tail[..k];
            let t = &rows[(ci + 1) * k..(ci + 2) * k];
            fill_with(&mut head[ci * k..], |b| comb(t[b], next[b]));
        }
        let mut elements = pool.take::<T>(k);
        fill_with(&mut elements, |b| (1..c).fold(rows[b], |acc, ci| comb(acc, rows[ci * k + b])));
        let mut hist = pool.take::<T>(k);
        fill_with(&mut hist, |b| comb(d[b], elements[b]));
        Ok(ChunkedHist {
            hist: self.wrap(hist, dest.shape.clone()),
            elements: self.wrap(elements, dest.shape.clone()),
            chunk_prefix: self.wrap(pre, vec![c, k]),
            chunk_suffix: self.wrap(suf, vec![c, k]),
        })
    }
}

impl HistOps for Cpu {
    /// `*` with many bins per value: the general chunked rule. `*`'s own rule runs a dozen
    /// k-sized ops and gathers k-sized coefficient rows; with k >= n/16 that outweighs the n
    /// elements, and for n up to 2^20 the chunked rule was 1.2-2.6x faster (f32 and f64, k from
    /// n/16 to 30n). From n = 2e6 on the two were within 0.84-1.13x of each other, and at 10^7
    /// the own rule won at every k/n up to 0.3 (`docs/performance.md`, "The histogram rule
    /// `auto`").
    fn auto_hist_rule(&self, op: HistOp, n: usize, k: usize) -> Option<crate::HistRule> {
        (op == HistOp::Mul && n <= AUTO_MUL_MAX_N && k.saturating_mul(AUTO_MUL_VALUES_PER_BIN) >= n)
            .then_some(crate::HistRule::GeneralChunked)
    }

    fn reduce_by_index(&self, dest: &CpuTensor, op: HistOp, inds: &CpuIndex, vals: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("reduce_by_index", dest, vals)?;
        self.run(inds.len().max(dest.numel()), || {
            by_dtypes!(dt, inds.index_dtype(), self.reduce_by_index_t(dest, op, inds, vals))
        })
    }

    fn arg_reduce_by_index(
        &self,
        dest: &CpuTensor,
        ext: Extremum,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<(CpuTensor, CpuIndex)> {
        let dt = same_dtype("arg_reduce_by_index", dest, vals)?;
        self.run(inds.len().max(dest.numel()), || {
            by_dtypes!(dt, inds.index_dtype(), self.arg_reduce_by_index_t(dest, ext, inds, vals))
        })
    }

    fn prod_nonzero_by_index(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        k: usize,
    ) -> Result<(CpuTensor, CpuIndex, CpuIndex)> {
        self.run(inds.len().max(k), || {
            by_dtypes!(vals.dtype(), inds.index_dtype(), self.prod_nonzero_by_index_t(inds, vals, k))
        })
    }

    fn prod_vals_adjoint(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        c0: &CpuTensor,
        c1: &CpuTensor,
        c2: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("prod_vals_adjoint", vals, c0)?;
        same_dtype("prod_vals_adjoint", c0, c1)?;
        let dt = same_dtype("prod_vals_adjoint", c1, c2)?;
        self.run(inds.len(), || by_dtypes!(dt, inds.index_dtype(), self.prod_vals_adjoint_t(inds, vals, c0, c1, c2)))
    }

    /// logaddexp's: `lae::hist_dual` on the inputs as they are. Its shift is the relative
    /// inputs' anchor and its weights and sums are theirs, so the bits are the composition's;
    /// `None` where a bin's maximum is +inf (the composition's relative inputs handle it).
    fn relative_reduce_by_index_dual(
        &self,
        kind: Relative,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<Option<(CpuTensor, CpuTensor)>> {
        if kind != Relative::Shift || !matches!(fold::kind(op), fold::Kind::LogAddExp) {
            return Ok(None);
        }
        same_dtype("relative_reduce_by_index_dual", dest, vals)?;
        same_dtype("relative_reduce_by_index_dual", dest, dest_dot)?;
        let dt = same_dtype("relative_reduce_by_index_dual", vals, vals_dot)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.lae_dual_t(dest, dest_dot, inds, vals, vals_dot))
        })
    }

    fn relative_inputs(
        &self,
        kind: Relative,
        dest: &CpuTensor,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<Option<(CpuTensor, CpuTensor, CpuTensor)>> {
        let dt = same_dtype("relative_inputs", dest, vals)?;
        self.run(inds.len().max(dest.numel()), || {
            by_dtypes!(dt, inds.index_dtype(), self.relative_inputs_t(kind, dest, inds, vals))
        })
        .map(Some)
    }
}
