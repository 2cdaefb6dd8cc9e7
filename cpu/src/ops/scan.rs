//! The CPU device's scans and linear recurrences: [`ScanOps`] for [`Cpu`], with the per-dtype
//! bodies its methods dispatch to.

use crate::*;

impl Cpu {
    pub(crate) fn scan_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        x: &CpuTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<CpuTensor> {
        let xs = x.slice::<T>()?;
        let keys = segments.map(|s| s.slice::<X>()).transpose()?;
        if let Some(k) = keys {
            same_len("scan", "segments vs values", k.len(), xs.len())?;
        }
        let mut out = self.pool().take::<T>(xs.len());
        let neutral = T::of_f64(op.neutral());
        with_fold!(op, T, f => scan::scan(&mut out, xs, neutral, |a, b| f.combine(a, b), spec, keys));
        Ok(self.wrap(out, x.shape.clone()))
    }

    pub(crate) fn linear_recurrence_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        a: &CpuTensor,
        b: &CpuTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<CpuTensor> {
        let (xa, xb) = (a.slice::<T>()?, b.slice::<T>()?);
        same_len("linear_recurrence", "a vs b", xa.len(), xb.len())?;
        let keys = segments.map(|s| s.slice::<X>()).transpose()?;
        if let Some(k) = keys {
            same_len("linear_recurrence", "segments vs values", k.len(), xa.len())?;
        }
        let mut out = self.pool().take::<T>(xa.len());
        scan::linear_recurrence(&mut out, xa, xb, spec, keys);
        Ok(self.wrap(out, a.shape.clone()))
    }
}

/// The index dtype of optional scan segments (any, when there are none).
fn seg_dtype(segments: Option<&CpuIndex>) -> IndexDType {
    segments.map_or(IndexDType::I64, |s| s.index_dtype())
}

impl ScanOps for Cpu {
    fn scan(&self, op: HistOp, x: &CpuTensor, spec: ScanSpec, segments: Option<&CpuIndex>) -> Result<CpuTensor> {
        self.run(x.numel(), || by_dtypes!(x.dtype(), seg_dtype(segments), self.scan_t(op, x, spec, segments)))
    }

    fn linear_recurrence(
        &self,
        a: &CpuTensor,
        b: &CpuTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<CpuTensor> {
        let dt = same_dtype("linear_recurrence", a, b)?;
        self.run(a.numel(), || by_dtypes!(dt, seg_dtype(segments), self.linear_recurrence_t(a, b, spec, segments)))
    }
}
