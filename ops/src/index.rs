//! Indexing: gathers, scatters and the stable sort by key, on value and index tensors. Rules in
//! `rules/indexing.rs`.

use super::TensorOps;
use crate::Result;

/// What a gather does with an index outside `[0, len)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OutOfRange {
    /// Reject it: an error naming the index and its position (user-facing gathers).
    Error,
    /// Read this value instead (rules: out-of-range histogram indices get a zero adjoint).
    Fill(f64),
}

/// Gathers, scatters and sorts.
pub trait IndexOps: TensorOps {
    /// `out[i] = src[idx[i]]`; `oob` says what an index outside `[0, len(src))` does.
    fn gather(&self, src: &Self::T, idx: &Self::I, oob: OutOfRange) -> Result<Self::T>;
    /// `out = dest; out[idx[i]] = vals[i]` in index order (the last write wins); indices outside
    /// `[0, len(dest))` are ignored.
    fn scatter(&self, dest: &Self::T, idx: &Self::I, vals: &Self::T) -> Result<Self::T>;
    /// Stable sort by key: the permutation that orders `keys` (all in `[0, num_keys)`, others
    /// sorted last in index order).
    fn sort_by_key(&self, keys: &Self::I, num_keys: usize) -> Result<Self::I>;
    /// [`IndexOps::sort_by_key`]'s permutation together with its inverse, the ranks (where each
    /// element lands): gathering by the ranks undoes gathering by the permutation, so sorted
    /// results go back to index order without a (sequential) scatter.
    fn sort_by_key_ranked(&self, keys: &Self::I, num_keys: usize) -> Result<(Self::I, Self::I)>;
    /// `out[i] = src[idx[i]]` on index tensors; -1 for an index outside `[0, len(src))`.
    fn gather_index(&self, src: &Self::I, idx: &Self::I) -> Result<Self::I>;
    /// The parts (at least one; one shape s and dtype) stacked along a new first axis: shape
    /// `[n, s..]`. Its adjoint is [`IndexOps::unstack`] (rules in `rules/indexing.rs`): a
    /// sequence of small results (the LSTM's hidden states) becomes one tensor that later ops
    /// process whole.
    fn stack(&self, parts: &[Self::T]) -> Result<Self::T>;
    /// The rows of `x` along its first axis: `x.shape()[0]` tensors of shape `x.shape()[1..]`
    /// (the inverse of `stack`).
    fn unstack(&self, x: &Self::T) -> Result<Vec<Self::T>>;
}
