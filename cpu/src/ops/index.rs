//! The CPU device's gathers, scatters, stable sorts and stacking: [`IndexOps`] for [`Cpu`], with
//! the per-dtype bodies its methods dispatch to.

use crate::*;

impl Cpu {
    pub(crate) fn sort_t<X: CpuIndexElem>(&self, keys: &CpuIndex, num_keys: usize) -> Result<(Vec<i64>, Vec<i64>)> {
        let ks = keys.slice::<X>()?;
        Ok(self.run(keys.len(), || sort::sort_with_ranks(ks, num_keys)))
    }

    pub(crate) fn gather_index_t<S: CpuIndexElem, X: CpuIndexElem>(
        &self,
        src: &CpuIndex,
        idx: &CpuIndex,
    ) -> Result<CpuIndex> {
        let (s, ix) = (src.slice::<S>()?, idx.slice::<X>()?);
        let mut out = self.pool().take::<S>(ix.len());
        self.run(idx.len(), || fill_with(&mut out, |i| ix[i].bin(s.len()).map_or(S::of_idx(-1), |b| s[b])));
        Ok(self.wrap_index(out))
    }

    pub(crate) fn gather_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        src: &CpuTensor,
        idx: &CpuIndex,
        oob: OutOfRange,
    ) -> Result<CpuTensor> {
        let s = src.slice::<T>()?;
        let ix = idx.slice::<X>()?;
        let len = s.len();
        let fill = match oob {
            OutOfRange::Fill(v) => T::of_f64(v),
            OutOfRange::Error => {
                if let Some(position) = ix.iter().position(|&b| b.bin(len).is_none()) {
                    return Err(OpError::IndexOutOfRange { op: "gather", index: ix[position].idx(), position, len });
                }
                T::zero()
            }
        };
        let mut out = self.pool().take::<T>(ix.len());
        fill_with(&mut out, |i| ix[i].bin(len).map_or(fill, |b| s[b]));
        Ok(self.wrap(out, vec![ix.len()]))
    }

    pub(crate) fn stack_t<T: CpuElem>(&self, parts: &[CpuTensor], shape: Vec<usize>) -> Result<CpuTensor> {
        let m = parts[0].numel();
        let mut out = self.pool().take::<T>(m * parts.len());
        for (o, p) in out.chunks_mut(m.max(1)).zip(parts) {
            o.copy_from_slice(p.slice::<T>()?);
        }
        Ok(self.wrap(out, shape))
    }

    pub(crate) fn unstack_t<T: CpuElem>(&self, x: &CpuTensor, n: usize, row: Vec<usize>) -> Result<Vec<CpuTensor>> {
        let m: usize = row.iter().product();
        let xs = x.slice::<T>()?;
        (0..n)
            .map(|j| {
                let mut out = self.pool().take::<T>(m);
                out.copy_from_slice(&xs[j * m..(j + 1) * m]);
                Ok(self.wrap(out, row.clone()))
            })
            .collect()
    }

    pub(crate) fn scatter_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        idx: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = idx.slice::<X>()?;
        same_len("scatter", "indices vs values", ix.len(), v.len())?;
        let mut out = self.pool().take::<T>(d.len());
        par_copy(&mut out, d);
        let k = d.len();
        for (j, &b) in ix.iter().enumerate() {
            if let Some(b) = b.bin(k) {
                out[b] = v[j];
            }
        }
        Ok(self.wrap(out, dest.shape.clone()))
    }
}

impl IndexOps for Cpu {
    fn gather(&self, src: &CpuTensor, idx: &CpuIndex, oob: OutOfRange) -> Result<CpuTensor> {
        self.run(idx.len().max(src.numel()), || {
            by_dtypes!(src.dtype(), idx.index_dtype(), self.gather_t(src, idx, oob))
        })
    }

    fn scatter(&self, dest: &CpuTensor, idx: &CpuIndex, vals: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("scatter", dest, vals)?;
        self.run(dest.numel().max(idx.len()), || by_dtypes!(dt, idx.index_dtype(), self.scatter_t(dest, idx, vals)))
    }

    fn sort_by_key(&self, keys: &CpuIndex, num_keys: usize) -> Result<CpuIndex> {
        let (perm, _) = by_index_dtype!(keys.index_dtype(), self.sort_t(keys, num_keys))?;
        Ok(self.wrap_index(Buf::from_vec(perm, self.pool())))
    }

    fn sort_by_key_ranked(&self, keys: &CpuIndex, num_keys: usize) -> Result<(CpuIndex, CpuIndex)> {
        let (perm, ranks) = by_index_dtype!(keys.index_dtype(), self.sort_t(keys, num_keys))?;
        Ok((self.wrap_index(Buf::from_vec(perm, self.pool())), self.wrap_index(Buf::from_vec(ranks, self.pool()))))
    }

    fn stack(&self, parts: &[CpuTensor]) -> Result<CpuTensor> {
        let shape = crate::shape::stack_shape(parts.iter().map(|p| &p.shape[..]))?;
        for p in &parts[1..] {
            same_dtype("stack", &parts[0], p)?;
        }
        by_dtype!(parts[0].dtype(), self.stack_t(parts, shape))
    }

    fn unstack(&self, x: &CpuTensor) -> Result<Vec<CpuTensor>> {
        let (n, row) = crate::shape::unstack_shape(&x.shape)?;
        by_dtype!(x.dtype(), self.unstack_t(x, n, row))
    }

    /// The result has `src`'s index dtype (its entries are `src`'s, or -1).
    fn gather_index(&self, src: &CpuIndex, idx: &CpuIndex) -> Result<CpuIndex> {
        match (src.index_dtype(), idx.index_dtype()) {
            (IndexDType::I32, IndexDType::I32) => self.gather_index_t::<i32, i32>(src, idx),
            (IndexDType::I32, IndexDType::I64) => self.gather_index_t::<i32, i64>(src, idx),
            (IndexDType::I64, IndexDType::I32) => self.gather_index_t::<i64, i32>(src, idx),
            (IndexDType::I64, IndexDType::I64) => self.gather_index_t::<i64, i64>(src, idx),
        }
    }
}
