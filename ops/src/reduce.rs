//! Whole-tensor reductions. Rules in `rules/reduce.rs`.

use super::{HistOp, TensorOps};
use crate::Result;

/// Reductions of a whole tensor to one element.
pub trait ReduceOps: TensorOps {
    /// Reduces the whole tensor with `op` to a single element of shape `[1]`.
    fn reduce(&self, op: HistOp, x: &Self::T) -> Result<Self::T>;

    // ---- conveniences composed from the above ----
    /// Sum of all elements, shape `[1]`.
    fn sum(&self, x: &Self::T) -> Result<Self::T> {
        self.reduce(HistOp::Add, x)
    }
}
