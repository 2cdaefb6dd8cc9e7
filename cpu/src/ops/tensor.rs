//! The CPU device's tensor creation, read-back and layout: [`TensorOps`] for [`Cpu`], with the per-
//! dtype bodies its methods dispatch to.

use crate::*;

impl Cpu {
    /// An index tensor of `X` from entries already checked to fit.
    pub(crate) fn index_t<X: CpuIndexElem>(&self, data: &[i64]) -> CpuIndex {
        let mut out = self.pool().take::<X>(data.len());
        self.run(data.len(), || fill_with(&mut out, |i| X::of_idx(data[i])));
        self.wrap_index(out)
    }

    pub(crate) fn tensor_t<T: CpuElem>(&self, data: &[f64], shape: &[usize]) -> Result<CpuTensor> {
        let mut out = self.pool().take::<T>(data.len());
        fill_with(&mut out, |i| T::of_f64(data[i]));
        Ok(self.wrap(out, shape.to_vec()))
    }

    pub(crate) fn full_t<T: CpuElem>(&self, shape: &[usize], value: f64) -> Result<CpuTensor> {
        let n = shape.iter().product();
        Ok(self.wrap(self.pool().filled(n, T::of_f64(value)), shape.to_vec()))
    }

    pub(crate) fn to_vec_t<T: CpuElem>(&self, t: &CpuTensor) -> Result<Vec<f64>> {
        Ok(t.slice::<T>()?.iter().map(|v| v.as_f64()).collect())
    }
}

impl TensorOps for Cpu {
    type T = CpuTensor;
    type I = CpuIndex;

    fn engine_name(&self) -> String {
        "cpu".into()
    }
    fn carries_derivatives(&self) -> bool {
        false
    }

    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<CpuTensor> {
        let n: usize = shape.iter().product();
        same_len("tensor", "data length vs shape", data.len(), n)?;
        self.run(data.len(), || by_dtype!(dtype, self.tensor_t(data, shape)))
    }

    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<CpuTensor> {
        self.run(shape.iter().product::<usize>(), || by_dtype!(dtype, self.full_t(shape, value)))
    }

    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<CpuIndex> {
        dtype.check(data)?;
        Ok(by_index_dtype!(dtype, self.index_t(data)))
    }

    fn to_vec(&self, t: &CpuTensor) -> Result<Vec<f64>> {
        by_dtype!(t.dtype(), self.to_vec_t(t))
    }

    fn index_to_vec(&self, i: &CpuIndex) -> Result<Vec<i64>> {
        Ok(i.to_i64())
    }

    fn reshape(&self, t: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        same_len("reshape", "element count", t.numel(), shape.iter().product())?;
        // The same elements in the same order: still relative to the same bins.
        Ok(CpuTensor {
            values: t.values.clone(),
            shape: shape.to_vec(),
            peaks_at_zero_under: t.peaks_at_zero_under.clone(),
        })
    }
}
