//! Shape arithmetic shared by the op API's provided methods and every device: numpy
//! broadcasting, the merged runs of a broadcast, the (outer, axis, inner) view around an axis and
//! the plan of a batched matrix product. Only shapes, never data; it depends on no device, so
//! the ops modules and the devices all import it and none imports another (the CPU device's
//! kernels live in `cpu/`, and the ops modules never name a device).

use crate::{OpError, Result};

/// numpy's broadcast of two shapes (trailing alignment; a dimension of 1 stretches).
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    (0..r)
        .map(|i| {
            let (x, y) = (at(a, i), at(b, i));
            if x == y || y == 1 {
                Ok(x)
            } else if x == 1 {
                Ok(y)
            } else {
                Err(OpError::Shape { op, detail: format!("{a:?} vs {b:?} do not broadcast") })
            }
        })
        .collect()
}

/// One run of merged dimensions: `reduced` when the small shape has 1 there and the big one
/// does not (broadcast forwards, summed backwards).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    pub reduced: bool,
    pub len: usize,
}

/// The merged runs of `small` broadcast to `big` (an error when it does not broadcast).
pub fn runs(op: &'static str, small: &[usize], big: &[usize]) -> Result<Vec<Run>> {
    if small.len() > big.len() {
        return Err(OpError::Shape { op, detail: format!("{small:?} has more dimensions than {big:?}") });
    }
    let pad = big.len() - small.len();
    let mut out: Vec<Run> = Vec::new();
    for (i, &n) in big.iter().enumerate() {
        let s = if i < pad { 1 } else { small[i - pad] };
        if n == 1 && s == 1 {
            continue;
        }
        let reduced = if s == n {
            false
        } else if s == 1 {
            true
        } else {
            return Err(OpError::Shape { op, detail: format!("{small:?} does not broadcast to {big:?}") });
        };
        match out.last_mut() {
            Some(r) if r.reduced == reduced => r.len *= n,
            _ => out.push(Run { reduced, len: n }),
        }
    }
    Ok(out)
}

/// The (O, R, Q) view of `shape` around `axis`.
pub fn axis_view(op: &'static str, shape: &[usize], axis: usize) -> Result<(usize, usize, usize)> {
    if axis >= shape.len() {
        return Err(OpError::Shape { op, detail: format!("axis {axis} of a tensor of shape {shape:?}") });
    }
    Ok((shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product()))
}

/// Batch, rows, inner and columns of `op(a) op(b)` for shapes `[.., m, k]`-style operands with
/// equal batch dimensions (a two-dimensional operand is shared by every batch), and the shape
/// of the result.
#[derive(Clone, Debug, PartialEq)]
pub struct MatmulPlan {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a_batched: bool,
    pub b_batched: bool,
    pub out_shape: Vec<usize>,
}

/// The plan of `op(a) op(b)` (an error naming the shapes when they do not multiply).
pub fn matmul_plan(a: &[usize], ta: bool, b: &[usize], tb: bool) -> Result<MatmulPlan> {
    let bad = |why: &str| OpError::Shape { op: "matmul", detail: format!("{a:?} (t={ta}) x {b:?} (t={tb}): {why}") };
    if a.len() < 2 || b.len() < 2 {
        return Err(bad("operands need at least two dimensions"));
    }
    let (ab, bb) = (&a[..a.len() - 2], &b[..b.len() - 2]);
    let batch_dims = match (ab.is_empty(), bb.is_empty()) {
        (_, true) => ab.to_vec(),
        (true, false) => bb.to_vec(),
        (false, false) if ab == bb => ab.to_vec(),
        _ => return Err(bad("batch dimensions differ")),
    };
    let (ar, ac) = (a[a.len() - 2], a[a.len() - 1]);
    let (br, bc) = (b[b.len() - 2], b[b.len() - 1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if tb { (bc, br) } else { (br, bc) };
    if k != k2 {
        return Err(bad("inner dimensions differ"));
    }
    let mut out_shape = batch_dims.clone();
    out_shape.extend([m, n]);
    Ok(MatmulPlan {
        batch: batch_dims.iter().product(),
        m,
        k,
        n,
        a_batched: !ab.is_empty(),
        b_batched: !bb.is_empty(),
        out_shape,
    })
}

/// The width `b` of an LSTM cell's operands: `x` `[b]`, `state` `[2, b]`, `params` `[8, b]`
/// (and a tangent or adjoint has its operand's shape).
pub fn lstm_cell_width(op: &'static str, x: &[usize], state: &[usize], params: &[usize]) -> Result<usize> {
    match (x, state, params) {
        (&[b], &[2, bs], &[8, bp]) if bs == b && bp == b => Ok(b),
        _ => Err(OpError::Shape {
            op,
            detail: format!("input {x:?}, state {state:?} and params {params:?}: expected [b], [2, b] and [8, b]"),
        }),
    }
}

/// Checks that `t` (a tangent or adjoint) has the shape of the operand it goes with.
pub fn same_shape(op: &'static str, what: &str, t: &[usize], want: &[usize]) -> Result<()> {
    if t == want {
        Ok(())
    } else {
        Err(OpError::Shape { op, detail: format!("{what} has shape {t:?}, expected {want:?}") })
    }
}

/// `shape` with `axis` kept at length 1 (the result of a reduction along it); the last axis
/// when `axis` is None. A shape without that axis comes back unchanged.
pub fn reduced(shape: &[usize], axis: Option<usize>) -> Vec<usize> {
    let mut out = shape.to_vec();
    let axis = axis.or(shape.len().checked_sub(1));
    if let Some(a) = axis.filter(|&a| a < out.len()) {
        out[a] = 1;
    }
    out
}

/// For `sum_sq_diff(a, b)`: the rows (all but the last axis) and row length of `a`, and the
/// runs of `b` broadcast to `a` ([`runs`]), from which the offset in `b` of each row's partner
/// follows. Needs a's shape to be the broadcast shape, with at least one axis, and b's last
/// axis to equal a's (`None` otherwise: the op then composes).
pub fn sum_sq_diff_rows(a: &[usize], b: &[usize]) -> Option<(usize, usize, Vec<Run>)> {
    let (&d, outer) = a.split_last()?;
    if b.last() != Some(&d) {
        return None;
    }
    let rs = runs("sum_sq_diff", b, a).ok()?;
    Some((outer.iter().product(), d, rs))
}

/// The shape of `stack` over parts of these shapes: `[n, s..]` for n >= 1 parts of one shape s.
pub fn stack_shape<'a>(mut shapes: impl Iterator<Item = &'a [usize]>) -> Result<Vec<usize>> {
    let Some(first) = shapes.next() else {
        return Err(OpError::Shape { op: "stack", detail: "no parts to stack".into() });
    };
    let mut n = 1;
    for s in shapes {
        if s != first {
            return Err(OpError::Shape { op: "stack", detail: format!("part {n} has shape {s:?}, part 0 {first:?}") });
        }
        n += 1;
    }
    let mut out = vec![n];
    out.extend_from_slice(first);
    Ok(out)
}

/// The row count and row shape of `unstack(x)`: x needs at least one dimension.
pub fn unstack_shape(x: &[usize]) -> Result<(usize, Vec<usize>)> {
    match x.split_first() {
        Some((&n, rest)) => Ok((n, rest.to_vec())),
        None => Err(OpError::Shape { op: "unstack", detail: "a tensor without dimensions has no rows".into() }),
    }
}

/// `(n, k, d)` of squared distances between the rows of `a` (n x d) and of `c` (k x d).
pub fn sq_dist_shape(a: &[usize], c: &[usize]) -> Result<(usize, usize, usize)> {
    match (a, c) {
        (&[n, d], &[k, dc]) if d == dc => Ok((n, k, d)),
        _ => Err(OpError::Shape {
            op: "sq_dist",
            detail: format!("rows of {a:?} and {c:?}: both two-dimensional with equal row lengths"),
        }),
    }
}
