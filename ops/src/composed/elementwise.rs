//! The unary ops' adjoint composed from elementwise ops: the rule kernel `unary_adjoint`'s
//! default, and the order of operations the fused kernels keep.

use crate::{ElementwiseOps, Result, TensorMeta, UnaryOp};

/// Adjoint of `x` for `y = op(x)` composed from elementwise ops. A fused kernel must keep this
/// order of operations (so that it rounds the same way).
pub fn unary_vjp_composed<B: ElementwiseOps>(b: &B, op: UnaryOp, x: &B::T, y: &B::T, g: &B::T) -> Result<Option<B::T>> {
    let dt = x.dtype();
    let gx = match op {
        UnaryOp::Neg => b.neg(g)?,
        UnaryOp::Exp => b.mul(g, y)?,
        UnaryOp::Log => b.div(g, x)?,
        UnaryOp::Log1p => {
            let one = b.scalar(1.0, dt)?;
            b.div(g, &b.add(x, &one)?)?
        }
        UnaryOp::Sin => b.mul(g, &b.unary(UnaryOp::Cos, x)?)?,
        UnaryOp::Cos => b.neg(&b.mul(g, &b.unary(UnaryOp::Sin, x)?)?)?,
        UnaryOp::Sqrt => b.div(&b.scale(g, 0.5)?, y)?,
        UnaryOp::Tanh => {
            let one = b.scalar(1.0, dt)?;
            b.mul(g, &b.sub(&one, &b.unary(UnaryOp::Square, y)?)?)?
        }
        UnaryOp::Sigmoid => {
            let one = b.scalar(1.0, dt)?;
            b.mul(g, &b.mul(y, &b.sub(&one, y)?)?)?
        }
        UnaryOp::Abs => b.mul(g, &b.unary(UnaryOp::Sign, x)?)?,
        UnaryOp::Sign => return Ok(None),
        UnaryOp::Recip => b.neg(&b.mul(g, &b.unary(UnaryOp::Square, y)?)?)?,
        UnaryOp::Square => b.mul(&b.scale(g, 2.0)?, x)?,
    };
    Ok(Some(gx))
}
