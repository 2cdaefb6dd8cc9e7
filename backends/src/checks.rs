//! Argument checks every device makes the same way (the CPU and the kernel devices), so that
//! their errors read alike.

use crate::ops::TensorMeta;
use crate::{DType, OpError, Result};

/// The common dtype of `a` and `b`, or the error naming `op`.
pub fn same_dtype(op: &'static str, a: &impl TensorMeta, b: &impl TensorMeta) -> Result<DType> {
    if a.dtype() != b.dtype() {
        return Err(OpError::DType { op, left: a.dtype(), right: b.dtype() });
    }
    Ok(a.dtype())
}

/// `a == b`, or a shape error naming `op` and `what` was compared.
pub fn same_len(op: &'static str, what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(OpError::Shape { op, detail: format!("{what}: {a} vs {b}") });
    }
    Ok(())
}

/// The shape of a broadcasting elementwise result: equal shapes, or one operand of one element.
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let (na, nb): (usize, usize) = (a.iter().product(), b.iter().product());
    if a == b || nb == 1 {
        Ok(a.to_vec())
    } else if na == 1 {
        Ok(b.to_vec())
    } else {
        Err(OpError::Shape { op, detail: format!("{a:?} vs {b:?} do not broadcast") })
    }
}
