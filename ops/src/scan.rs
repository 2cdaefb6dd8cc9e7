//! Scans and linear recurrences (plain or segmented). Rules in `rules/scan.rs`.

use super::{HistOp, TensorOps};
use crate::Result;

/// How a scan runs. A forward scan is the left fold of each prefix, starting from the neutral
/// element; a reverse scan is a forward scan of the reversed sequence (reversed back), so its
/// left operand is the fold of the later elements. Inclusive scans include the element itself,
/// exclusive ones stop just before it (neutral at the start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScanSpec {
    pub exclusive: bool,
    pub reverse: bool,
}

impl ScanSpec {
    pub const INCLUSIVE: ScanSpec = ScanSpec { exclusive: false, reverse: false };
    pub const EXCLUSIVE: ScanSpec = ScanSpec { exclusive: true, reverse: false };
    /// The same scan in the other direction.
    pub fn flipped(self) -> ScanSpec {
        ScanSpec { reverse: !self.reverse, ..self }
    }
    /// The exclusive scan in the same direction.
    pub fn to_exclusive(self) -> ScanSpec {
        ScanSpec { exclusive: true, ..self }
    }
}

/// Scans.
pub trait ScanOps: TensorOps {
    /// A scan of a one-dimensional tensor with `op` (see [`ScanSpec`]). With `segments`, each
    /// maximal run of equal keys is scanned on its own.
    fn scan(&self, op: HistOp, x: &Self::T, spec: ScanSpec, segments: Option<&Self::I>) -> Result<Self::T>;
    /// The linear recurrence `y[j] = a[j] + b[j] * y[prev]` with `y[prev] = 0` at the start (of
    /// each segment), where prev is j-1 (forward) or j+1 (reverse); an exclusive recurrence
    /// returns `y[prev]` at j. It is the scan of the affine maps `y -> a + b y` under
    /// composition `(a1,b1) then (a2,b2) = (a2 + b2 a1, b2 b1)`, and solves the adjoint and
    /// tangent recurrences of scans.
    fn linear_recurrence(
        &self,
        a: &Self::T,
        b: &Self::T,
        spec: ScanSpec,
        segments: Option<&Self::I>,
    ) -> Result<Self::T>;
}
