//! Argument checks every device makes the same way (the CPU and the kernel devices), so that
//! their errors read alike.

use crate::TensorMeta;
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

/// The shape of a broadcasting elementwise result, borrowed from the operand it comes from:
/// equal shapes, or one operand of one element; `None` where the shapes do not broadcast.
pub fn broadcast_of<'s>(a: &'s [usize], b: &'s [usize]) -> Option<&'s [usize]> {
    let numel = |s: &[usize]| s.iter().product::<usize>();
    if a == b || numel(b) == 1 {
        Some(a)
    } else if numel(a) == 1 {
        Some(b)
    } else {
        None
    }
}

/// Whether [`broadcast_shape`] of `a` and `b` is the shape of `a` (`of_a`) or of `b`, without
/// building it (a check per replayed op of a tiny-op workload).
pub fn broadcast_is(a: &[usize], b: &[usize], of_a: bool) -> bool {
    broadcast_of(a, b) == Some(if of_a { a } else { b })
}

/// The shape of a broadcasting elementwise result ([`broadcast_of`]), or a shape error naming
/// `op`.
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    broadcast_of(a, b)
        .map(<[usize]>::to_vec)
        .ok_or_else(|| OpError::Shape { op, detail: format!("{a:?} vs {b:?} do not broadcast") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_is_answers_as_broadcast_shape_does() {
        let shapes: [&[usize]; 8] = [&[], &[1], &[1, 1], &[3], &[3, 1], &[1, 3], &[2, 3], &[0]];
        let mut kept = [0, 0];
        for a in shapes {
            for b in shapes {
                let s = broadcast_shape("test", a, b).ok();
                for (i, of_a) in [true, false].into_iter().enumerate() {
                    let want = s.as_deref() == Some(if of_a { a } else { b });
                    assert_eq!(broadcast_is(a, b, of_a), want, "{a:?} {b:?} of_a {of_a}");
                    kept[i] += usize::from(want);
                }
            }
        }
        // Both answers occur on both sides.
        assert!(kept[0] > 8 && kept[1] > 8 && kept[0] < 64 && kept[1] < 64, "{kept:?}");
    }
}
