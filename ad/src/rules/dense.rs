//! Rules of the dense ops: broadcast_to and sum_to are each other's adjoints; a matrix product's
//! adjoints are matrix products with the adjoint (transposes by flags, batch sums by sum_to);
//! an arg-min/arg-max along an axis sends the adjoint to its winner (scattered to the winner's
//! flat position) and gathers the winner's tangent.
//! Squared distances between rows have their own rule (their adjoints and tangent are matrix
//! products with row and column sums), so no engine records the expanded form.

use crate::ops::{BinaryOp, OutOfRange, TensorMeta, UnaryOp};
use crate::{Ops, Result};

/// Adjoint of `x` (of shape `x_shape`) for `y = broadcast_to(x, ..)`.
pub fn broadcast_to_vjp<B: Ops>(b: &B, x_shape: &[usize], g: &B::T) -> Result<B::T> {
    if g.shape() == x_shape { Ok(g.clone()) } else { b.sum_to(g, x_shape) }
}

/// Adjoint of `x` (of shape `x_shape`) for `y = sum_to(x, ..)`.
pub fn sum_to_vjp<B: Ops>(b: &B, x_shape: &[usize], g: &B::T) -> Result<B::T> {
    if g.shape() == x_shape { Ok(g.clone()) } else { b.broadcast_to(g, x_shape) }
}

/// Adjoints of `a` and `c` for `y = op(a) op(c)`, only for the operands that need one.
#[allow(clippy::too_many_arguments)]
pub fn matmul_vjp<B: Ops>(
    b: &B,
    a: &B::T,
    ta: bool,
    c: &B::T,
    tc: bool,
    g: &B::T,
    need_a: bool,
    need_c: bool,
) -> Result<super::elementwise::OptionalPair<B::T>> {
    let fit = |d: B::T, shape: &[usize]| if d.shape() == shape { Ok(d) } else { b.sum_to(&d, shape) };
    let ga = if need_a {
        let d = match (ta, tc) {
            (false, false) => b.matmul(g, false, c, true)?,
            (false, true) => b.matmul(g, false, c, false)?,
            (true, false) => b.matmul(c, false, g, true)?,
            (true, true) => b.matmul(c, true, g, true)?,
        };
        Some(fit(d, a.shape())?)
    } else {
        None
    };
    let gc = if need_c {
        let d = match (ta, tc) {
            (false, false) => b.matmul(a, true, g, false)?,
            (false, true) => b.matmul(g, true, a, false)?,
            (true, false) => b.matmul(a, false, g, false)?,
            (true, true) => b.matmul(g, true, a, true)?,
        };
        Some(fit(d, c.shape())?)
    } else {
        None
    };
    Ok((ga, gc))
}

/// Tangent of `y = op(a) op(c)`: `op(da) op(c) + op(a) op(dc)`.
pub fn matmul_jvp<B: Ops>(
    b: &B,
    a: &B::T,
    ta: bool,
    c: &B::T,
    tc: bool,
    da: Option<&B::T>,
    dc: Option<&B::T>,
) -> Result<Option<B::T>> {
    let t1 = da.map(|d| b.matmul(d, ta, c, tc)).transpose()?;
    let t2 = dc.map(|d| b.matmul(a, ta, d, tc)).transpose()?;
    Ok(match (t1, t2) {
        (Some(x), Some(z)) => Some(b.add(&x, &z)?),
        (x, z) => x.or(z),
    })
}

/// Tangent of `y = logsumexp_axis(x, axis)`: the sum along the axis of `exp(x - y) dx`.
pub fn logsumexp_jvp<B: Ops>(b: &B, x: &B::T, y: &B::T, dx: &B::T, axis: usize) -> Result<B::T> {
    let softmax = b.unary(UnaryOp::Exp, &b.broadcast_binary(BinaryOp::Sub, x, y)?)?;
    b.sum_axis(&b.mul(&softmax, dx)?, axis)
}

/// Adjoints of `x` and `c` for `y = sum_sq_diff(x, c)`, only for the operands that need one.
pub fn sum_sq_diff_vjp<B: Ops>(
    b: &B,
    x: &B::T,
    c: &B::T,
    g: &B::T,
    need_x: bool,
    need_c: bool,
) -> Result<super::elementwise::OptionalPair<B::T>> {
    let gx = b.sum_sq_diff_adjoint(x, c, g)?;
    let gc = if need_c { Some(b.neg(&broadcast_to_vjp(b, c.shape(), &gx)?)?) } else { None };
    let gx = if need_x { Some(broadcast_to_vjp(b, x.shape(), &gx)?) } else { None };
    Ok((gx, gc))
}

/// Tangent of `y = sum_sq_diff(x, c)`: the sum along the last axis of `2 (x - c) (dx - dc)`.
pub fn sum_sq_diff_jvp<B: Ops>(
    b: &B,
    x: &B::T,
    c: &B::T,
    dx: Option<&B::T>,
    dc: Option<&B::T>,
) -> Result<Option<B::T>> {
    let d = match (dx, dc) {
        (None, None) => return Ok(None),
        (Some(dx), None) => dx.clone(),
        (None, Some(dc)) => b.neg(dc)?,
        (Some(dx), Some(dc)) => b.broadcast_binary(BinaryOp::Sub, dx, dc)?,
    };
    let diff = b.broadcast_binary(BinaryOp::Sub, x, c)?;
    let prod = b.broadcast_binary(BinaryOp::Mul, &b.scale(&diff, 2.0)?, &d)?;
    Ok(Some(b.sum_axis(&prod, prod.shape().len() - 1)?))
}

/// Adjoints of `a` (n x d) and `c` (k x d) for `y = sq_dist(a, c)`, only for the operands that
/// need one: `a_bar = 2 (a rowsum(g) - g c)` and `c_bar = 2 (c colsum(g)^T - g^T a)`.
pub fn sq_dist_vjp<B: Ops>(
    b: &B,
    a: &B::T,
    c: &B::T,
    g: &B::T,
    need_a: bool,
    need_c: bool,
) -> Result<super::elementwise::OptionalPair<B::T>> {
    let ga = if need_a {
        let weighted = b.broadcast_binary(BinaryOp::Mul, a, &b.sum_axis(g, 1)?)?; // n x d
        Some(b.scale(&b.sub(&weighted, &b.matmul(g, false, c, false)?)?, 2.0)?)
    } else {
        None
    };
    let gc = if need_c {
        let counts = b.reshape(&b.sum_axis(g, 0)?, &[c.shape()[0], 1])?; // k x 1
        let weighted = b.broadcast_binary(BinaryOp::Mul, c, &counts)?; // k x d
        Some(b.scale(&b.sub(&weighted, &b.matmul(g, true, a, false)?)?, 2.0)?)
    } else {
        None
    };
    Ok((ga, gc))
}

/// Tangent of `y = sq_dist(a, c)`: `2 sum over l of (a[i, l] - c[j, l]) (da[i, l] - dc[j, l])`,
/// as `2 (rowsum(a da) - da c^T)` plus `2 (rowsum(c dc)^T - a dc^T)`.
pub fn sq_dist_jvp<B: Ops>(b: &B, a: &B::T, c: &B::T, da: Option<&B::T>, dc: Option<&B::T>) -> Result<Option<B::T>> {
    let k = c.shape()[0];
    let from_a = da
        .map(|da| {
            let own = b.sum_axis(&b.mul(a, da)?, 1)?; // n x 1
            b.broadcast_binary(BinaryOp::Sub, &own, &b.matmul(da, false, c, true)?)
        })
        .transpose()?;
    let from_c = dc
        .map(|dc| {
            let own = b.reshape(&b.sum_axis(&b.mul(c, dc)?, 1)?, &[1, k])?; // 1 x k
            b.broadcast_binary(BinaryOp::Sub, &own, &b.matmul(a, false, dc, true)?)
        })
        .transpose()?;
    let sum = match (from_a, from_c) {
        (Some(x), Some(z)) => Some(b.add(&x, &z)?),
        (x, z) => x.or(z),
    };
    sum.map(|t| b.scale(&t, 2.0)).transpose()
}

/// Adjoint of `x` for the values of `arg_reduce_axis`: the adjoint goes to each winner.
pub fn arg_reduce_axis_vjp<B: Ops>(b: &B, x: &B::T, winners: &B::I, g: &B::T) -> Result<B::T> {
    let n = x.numel();
    let zeros = b.full(&[n], 0.0, x.dtype())?;
    let flat = b.reshape(g, &[g.numel()])?;
    b.reshape(&b.scatter(&zeros, winners, &flat)?, x.shape())
}

/// Tangent of the values of `arg_reduce_axis`: the winners' tangents.
pub fn arg_reduce_axis_jvp<B: Ops>(b: &B, y: &B::T, winners: &B::I, dx: &B::T) -> Result<B::T> {
    let flat = b.reshape(dx, &[dx.numel()])?;
    b.reshape(&b.gather(&flat, winners, OutOfRange::Error)?, y.shape())
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::{BinaryOp, Cpu, DType, Extremum, Forward, Ops, Reverse, TensorMeta, UnaryOp};

    /// A scalar function of two inputs through every dense op and convenience.
    fn objective<O: Ops>(o: &O, x: &O::T, w: &O::T) -> crate::Result<O::T> {
        // x: [3, 4], w: [2, 4, 3] (a batch of two matrices).
        let xw = o.matmul(x, false, &o.reshape(&w.clone(), &[2, 4, 3])?, false)?; // [2, 3, 3]
        let xt = o.matmul(w, true, x, true)?; // [2, 3, 3]
        let s = o.broadcast_binary(BinaryOp::Mul, &xw, &o.unary(UnaryOp::Sin, &xt)?)?;
        let row = o.sum_to(x, &[1, 4])?; // [1, 4]
        let col = o.sum_axis(x, 1)?; // [3, 1]
        let outer = o.broadcast_binary(BinaryOp::Mul, &col, &row)?; // [3, 4]
        let lse = o.logsumexp_axis(&outer, 1)?; // [3, 1]
        let mx = o.max_axis(&s, 2)?; // [2, 3, 1]
        let mn = o.min_axis(&o.broadcast_to(x, &[2, 3, 4])?, 0)?; // [1, 3, 4]
        let t = o.add(&o.sum(&lse)?, &o.sum(&o.unary(UnaryOp::Square, &mx)?)?)?;
        let q = o.matmul(&o.reshape(x, &[2, 6])?, true, &o.reshape(x, &[2, 6])?, false)?; // [6, 6]
        // Both operands moving, one broadcast along the middle axis: [2, 3, 3] vs [2, 1, 3].
        let ssd = o.sum_sq_diff(&xw, &o.sum_to(&xt, &[2, 1, 3])?)?; // [2, 3, 1]
        let t = o.add(&t, &o.scale(&o.sum(&ssd)?, 0.01)?)?;
        o.add(&o.add(&t, &o.sum(&mn)?)?, &o.scale(&o.sum(&o.unary(UnaryOp::Tanh, &q)?)?, 0.1)?)
    }

    const X: [f64; 12] = [0.3, -0.7, 1.1, 0.4, -0.2, 0.9, 0.6, -1.3, 0.15, 0.8, -0.45, 0.25];

    fn w0() -> Vec<f64> {
        (0..24).map(|i| ((i * 7) % 11) as f64 * 0.13 - 0.6).collect()
    }

    fn eval(x: &[f64], w: &[f64]) -> f64 {
        let c = Cpu::new(Some(1)).unwrap();
        let xt = c.tensor(x, &[3, 4], DType::F64).unwrap();
        let wt = c.tensor(w, &[2, 4, 3], DType::F64).unwrap();
        c.to_vec(&objective(&c, &xt, &wt).unwrap()).unwrap()[0]
    }

    fn grad(c: &Cpu, x: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let r = Reverse::new(c.clone());
        let xv = r.var(c.tensor(x, &[3, 4], DType::F64).unwrap());
        let wv = r.var(c.tensor(w, &[2, 4, 3], DType::F64).unwrap());
        let y = objective(&r, &xv, &wv).unwrap();
        let g = r.backward(&y, c.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
        (c.to_vec(g.get(&xv).unwrap()).unwrap(), c.to_vec(g.get(&wv).unwrap()).unwrap())
    }

    #[test]
    fn dense_rules_agree_with_finite_differences_both_ways() {
        let c = Cpu::new(Some(2)).unwrap();
        let w = w0();
        let (gx, gw) = grad(&c, &X, &w);
        let v: Vec<f64> = (0..36).map(|i| ((i * 5) % 9) as f64 * 0.25 - 1.0).collect();
        let h = 1e-6;
        let shift = |s: f64| {
            let xs: Vec<f64> = X.iter().zip(&v).map(|(a, d)| a + s * h * d).collect();
            let ws: Vec<f64> = w.iter().zip(&v[12..]).map(|(a, d)| a + s * h * d).collect();
            eval(&xs, &ws)
        };
        let fd = (shift(1.0) - shift(-1.0)) / (2.0 * h);
        let rev: f64 = gx.iter().chain(&gw).zip(&v).map(|(a, b)| a * b).sum();
        assert!((rev - fd).abs() < 1e-7 * fd.abs().max(1.0), "reverse {rev} vs fd {fd}");
        let f = Forward::new(c.clone());
        let xd = f
            .dual(c.tensor(&X, &[3, 4], DType::F64).unwrap(), c.tensor(&v[..12], &[3, 4], DType::F64).unwrap())
            .unwrap();
        let wd = f
            .dual(c.tensor(&w, &[2, 4, 3], DType::F64).unwrap(), c.tensor(&v[12..], &[2, 4, 3], DType::F64).unwrap())
            .unwrap();
        let y = objective(&f, &xd, &wd).unwrap();
        let fwd = c.to_vec(&f.tangent(&y).unwrap()).unwrap()[0];
        assert!((fwd - rev).abs() < 1e-12 * rev.abs().max(1.0), "forward {fwd} vs reverse {rev}");
    }

    #[test]
    fn forward_over_reverse_of_dense_ops_matches_differences_of_gradients() {
        let c = Cpu::new(Some(1)).unwrap();
        let w = w0();
        let v: Vec<f64> = (0..12).map(|i| ((i * 3) % 7) as f64 * 0.2 - 0.5).collect();
        let f = Forward::new(c.clone());
        let r = Reverse::new(f.clone());
        let xv = r.var(
            f.dual(c.tensor(&X, &[3, 4], DType::F64).unwrap(), c.tensor(&v, &[3, 4], DType::F64).unwrap()).unwrap(),
        );
        let wv = r.lift(f.lift(c.tensor(&w, &[2, 4, 3], DType::F64).unwrap()));
        let y = objective(&r, &xv, &wv).unwrap();
        let g = r.backward(&y, f.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
        let hv = c.to_vec(&f.tangent(g.get(&xv).unwrap()).unwrap()).unwrap();
        let h = 1e-5;
        let gs = |s: f64| grad(&c, &X.iter().zip(&v).map(|(a, d)| a + s * h * d).collect::<Vec<_>>(), &w).0;
        let (gp, gm) = (gs(1.0), gs(-1.0));
        for j in 0..12 {
            let want = (gp[j] - gm[j]) / (2.0 * h);
            assert!((hv[j] - want).abs() < 1e-5 * want.abs().max(1.0), "Hv[{j}] {} vs {want}", hv[j]);
        }
    }

    #[test]
    fn arg_reduce_axis_sends_the_adjoint_to_the_first_winner() {
        let c = Cpu::new(Some(1)).unwrap();
        let r = Reverse::new(c.clone());
        let x = r.var(c.tensor(&[1.0, 3.0, 3.0, 2.0, 0.5, 0.5], &[2, 3], DType::F64).unwrap());
        let (m, _) = r.arg_reduce_axis(Extremum::Max, &x, 1).unwrap();
        assert_eq!(m.shape(), &[2, 1]);
        let g = r.backward(&m, c.tensor(&[10.0, 20.0], &[2, 1], DType::F64).unwrap()).unwrap();
        assert_eq!(c.to_vec(g.get(&x).unwrap()).unwrap(), vec![0.0, 10.0, 0.0, 20.0, 0.0, 0.0]);
    }

    #[test]
    fn fused_sum_sq_diff_and_its_adjoint_equal_the_composed_forms() {
        let c = Cpu::new(Some(1)).unwrap();
        let a: Vec<f64> = (0..60).map(|i| ((i * 7) % 13) as f64 * 0.31 - 1.7).collect();
        let b: Vec<f64> = (0..15).map(|i| ((i * 5) % 11) as f64 * 0.23 - 0.9).collect();
        let at = c.tensor(&a, &[4, 3, 5], DType::F64).unwrap();
        // b broadcast along the first axis ([1, 3, 5]), along two ([5]), and not at all.
        for (bs, bv) in [
            (vec![1, 3, 5], b.clone()),
            (vec![5], b[..5].to_vec()),
            (vec![4, 3, 5], a.iter().map(|v| v * 0.5).collect()),
        ] {
            let bt = c.tensor(&bv, &bs, DType::F64).unwrap();
            let fused = c.sum_sq_diff(&at, &bt).unwrap();
            let composed = crate::composed::dense::sum_sq_diff_composed(&c, &at, &bt).unwrap();
            assert_eq!(fused.shape(), &[4, 3, 1]);
            assert_eq!(composed.shape(), &[4, 3, 1]);
            let (f, w) = (c.to_vec(&fused).unwrap(), c.to_vec(&composed).unwrap());
            assert_eq!(
                f.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                w.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{bs:?}"
            );
            // Row (1, 2) by hand.
            let want: f64 = (0..5)
                .map(|l| {
                    (a[(3 + 2) * 5 + l]
                        - bv[if bs.len() == 3 && bs[0] == 4 {
                            (3 + 2) * 5 + l
                        } else if bs.len() == 3 {
                            2 * 5 + l
                        } else {
                            l
                        }])
                    .powi(2)
                })
                .sum();
            assert!((f[3 + 2] - want).abs() < 1e-12, "{} vs {want}", f[5]);
            let g =
                c.tensor(&(0..12).map(|i| 0.5 - 0.1 * i as f64).collect::<Vec<_>>(), &[4, 3, 1], DType::F64).unwrap();
            let fa = c.to_vec(&c.sum_sq_diff_adjoint(&at, &bt, &g).unwrap()).unwrap();
            let ca =
                c.to_vec(&crate::composed::dense::sum_sq_diff_adjoint_composed(&c, &at, &bt, &g).unwrap()).unwrap();
            assert_eq!(
                fa.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                ca.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
        // Large enough for the parallel kernels (rows split into tasks, each counting its
        // offsets from its first row), b broadcast along the first, the middle and two axes.
        let big: Vec<f64> = (0..300 * 7 * 40).map(|i| ((i * 7) % 23) as f64 * 0.13 - 1.1).collect();
        let at = c.tensor(&big, &[300, 7, 40], DType::F64).unwrap();
        let g = c.tensor(
            &(0..2100).map(|i| ((i * 3) % 7) as f64 * 0.2 - 0.5).collect::<Vec<_>>(),
            &[300, 7, 1],
            DType::F64,
        );
        let g = g.unwrap();
        for bs in [vec![1, 7, 40], vec![300, 1, 40], vec![40]] {
            let n: usize = bs.iter().product();
            let bt = c.tensor(&(0..n).map(|i| ((i * 5) % 17) as f64 * 0.11 - 0.8).collect::<Vec<_>>(), &bs, DType::F64);
            let bt = bt.unwrap();
            let bits = |t: &crate::cpu::CpuTensor| c.to_vec(t).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let (fused, composed) =
                (c.sum_sq_diff(&at, &bt).unwrap(), crate::composed::dense::sum_sq_diff_composed(&c, &at, &bt).unwrap());
            assert_eq!(bits(&fused), bits(&composed), "{bs:?}");
            let fa = c.sum_sq_diff_adjoint(&at, &bt, &g).unwrap();
            let ca = crate::composed::dense::sum_sq_diff_adjoint_composed(&c, &at, &bt, &g).unwrap();
            assert_eq!(bits(&fa), bits(&ca), "{bs:?}");
        }
        // a broadcasting too ([4, 1, 5] against [3, 5]) composes; mismatched rows fail.
        let a2 = c.tensor(&a[..20], &[4, 1, 5], DType::F64).unwrap();
        let b2 = c.tensor(&b, &[3, 5], DType::F64).unwrap();
        assert_eq!(c.sum_sq_diff(&a2, &b2).unwrap().shape(), &[4, 3, 1]);
        assert!(c.sum_sq_diff(&at, &c.tensor(&b[..4], &[4], DType::F64).unwrap()).is_err());
    }

    #[test]
    fn fused_logsumexp_and_its_adjoint_equal_the_composed_forms() {
        // The CPU fuses both into one pass per line with the composed order of operations, so
        // they agree bit for bit: along either axis, with a large line (shifted), a line of
        // -inf but one, and NaN in a line (it never wins the maximum).
        let c = Cpu::new(Some(1)).unwrap();
        let mut v: Vec<f64> = (0..15).map(|i| ((i * 7) % 11) as f64 * 0.37 - 1.4).collect();
        v[5..10].copy_from_slice(&[700.0, 710.5, 699.0, 705.25, 702.0]);
        v[10..15].copy_from_slice(&[f64::NEG_INFINITY, f64::NEG_INFINITY, 0.5, f64::NEG_INFINITY, f64::NEG_INFINITY]);
        v[2] = f64::NAN;
        let x = c.tensor(&v, &[3, 5], DType::F64).unwrap();
        for axis in 0..2 {
            let fused = c.logsumexp_axis(&x, axis).unwrap();
            let composed = crate::composed::dense::logsumexp_composed(&c, &x, axis).unwrap();
            let (a, b) = (c.to_vec(&fused).unwrap(), c.to_vec(&composed).unwrap());
            assert_eq!(fused.shape(), composed.shape());
            assert_eq!(
                a.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
                "axis {axis}: {a:?} vs {b:?}"
            );
            let g =
                c.tensor(&(0..a.len()).map(|i| 0.5 + i as f64).collect::<Vec<_>>(), fused.shape(), DType::F64).unwrap();
            let fa = c.to_vec(&c.logsumexp_adjoint(&x, &fused, &g, axis).unwrap()).unwrap();
            let ca =
                c.to_vec(&crate::composed::dense::logsumexp_vjp_composed(&c, &x, &fused, &g, axis).unwrap()).unwrap();
            assert_eq!(
                fa.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
                ca.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
                "axis {axis}"
            );
        }
        // Row 1 (axis 1): its softmax sums to one and its maximum has the largest share.
        let y = c.logsumexp_axis(&x, 1).unwrap();
        let ones = c.full(&[3, 1], 1.0, DType::F64).unwrap();
        let p = c.to_vec(&c.logsumexp_adjoint(&x, &y, &ones, 1).unwrap()).unwrap();
        assert!((p[5..10].iter().sum::<f64>() - 1.0).abs() < 1e-12, "{:?}", &p[5..10]);
        assert!(p[6] > 0.99 && p[6] < 1.0, "{}", p[6]);
        assert_eq!(p[10..15], [0.0, 0.0, 1.0, 0.0, 0.0]);
        // Mismatched shapes are errors naming the op.
        let bad = c.full(&[3, 5], 1.0, DType::F64).unwrap();
        let e = c.logsumexp_adjoint(&x, &bad, &ones, 1).unwrap_err().to_string();
        assert!(e.contains("logsumexp_adjoint"), "{e}");
        assert!(c.logsumexp_axis(&c.full(&[2, 0], 1.0, DType::F64).unwrap(), 1).is_err());
    }

    #[test]
    fn logsumexp_does_not_overflow() {
        let c = Cpu::new(Some(1)).unwrap();
        let x = c.tensor(&[1000.0, 1000.0, -1e300, 0.0], &[2, 2], DType::F32).unwrap_or_else(|_| unreachable!());
        let y = c.to_vec(&c.logsumexp_axis(&x, 1).unwrap()).unwrap();
        assert!((y[0] - (1000.0 + 2f64.ln())).abs() < 1e-3, "{y:?}");
        assert_eq!(y[1], 0.0);
    }
}
