//! The adjoint of a gather composed: the rule kernel `gather_adjoint`'s default.

use crate::{HistOp, HistOps, Result, TensorMeta};

/// `gather_adjoint` composed: g's elements summed into zeros of src's shape by a `+` histogram.
pub fn gather_adjoint_composed<B: HistOps>(b: &B, src: &B::T, idx: &B::I, g: &B::T) -> Result<B::T> {
    let zeros = b.zeros_like(src)?;
    let n = g.numel();
    let flat = b.reshape(g, &[n])?;
    b.reduce_by_index(&zeros, HistOp::Add, idx, &flat)
}
