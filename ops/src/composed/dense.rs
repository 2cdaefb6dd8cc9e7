//! The dense ops' composed forms: `logsumexp_axis` and `sum_sq_diff` and their adjoints, from
//! other ops. A device without a fused kernel runs these; a fused kernel keeps their order of
//! operations, so that both round alike.

use crate::{BinaryOp, DenseOps, Result, TensorMeta, UnaryOp};

/// [`DenseOps::logsumexp_axis`] composed from other ops: `m + log(sum(exp(x - m)))` with m the
/// maximum along the axis. A fused kernel keeps this order.
pub fn logsumexp_composed<B: DenseOps>(b: &B, x: &B::T, axis: usize) -> Result<B::T> {
    let m = b.max_axis(x, axis)?;
    let e = b.unary(UnaryOp::Exp, &b.broadcast_binary(BinaryOp::Sub, x, &m)?)?;
    b.add(&m, &b.unary(UnaryOp::Log, &b.sum_axis(&e, axis)?)?)
}

/// Adjoint of `x` for `y = logsumexp_axis(x, axis)`, composed: `g exp(x - y)` (the softmax along
/// the axis times the adjoint broadcast along it). A fused kernel keeps this order.
pub fn logsumexp_vjp_composed<B: DenseOps>(b: &B, x: &B::T, y: &B::T, g: &B::T, axis: usize) -> Result<B::T> {
    crate::shape::axis_view("logsumexp_adjoint", x.shape(), axis)?;
    let want = crate::shape::reduced(x.shape(), Some(axis));
    crate::shape::same_shape("logsumexp_adjoint", "the result", y.shape(), &want)?;
    crate::shape::same_shape("logsumexp_adjoint", "the adjoint", g.shape(), &want)?;
    let softmax = b.unary(UnaryOp::Exp, &b.broadcast_binary(BinaryOp::Sub, x, y)?)?;
    b.mul(&b.broadcast_to(g, x.shape())?, &softmax)
}

/// [`DenseOps::sum_sq_diff`] composed: broadcast subtraction, squares, sum along the last axis.
pub fn sum_sq_diff_composed<B: DenseOps>(b: &B, x: &B::T, y: &B::T) -> Result<B::T> {
    let diff = b.broadcast_binary(BinaryOp::Sub, x, y)?;
    let last = diff
        .shape()
        .len()
        .checked_sub(1)
        .ok_or_else(|| crate::OpError::Shape { op: "sum_sq_diff", detail: "operands without an axis".into() })?;
    b.sum_axis(&b.unary(UnaryOp::Square, &diff)?, last)
}

/// The adjoint of `x` for `y = sum_sq_diff(x, c)` (x of the broadcast shape) and the adjoint
/// `g` of y, composed: `(g * 2) (x - c)`, g broadcast along the last axis (the composition's
/// order, which a fused kernel keeps). The adjoint of c is minus its sum down to c's shape.
pub fn sum_sq_diff_adjoint_composed<B: DenseOps>(b: &B, x: &B::T, c: &B::T, g: &B::T) -> Result<B::T> {
    let diff = b.broadcast_binary(BinaryOp::Sub, x, c)?;
    let gb = b.broadcast_to(g, diff.shape())?;
    b.mul(&b.scale(&gb, 2.0)?, &diff)
}
