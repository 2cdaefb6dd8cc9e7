//! A sequential reference for `reduce_by_index` and its derivatives, written straight from the
//! semantics in f64 and sharing no code with the devices or the rules: the oracle that tests and
//! the harness's validation compare against.
//!
//! Each bin is a left fold that starts with dest and takes the bin's elements in index order.
//! Derivatives are computed the slow, obvious way: for min/max the winner is found by scanning
//! the fold (a later element must be strictly better to win, so dest wins ties, and NaN is
//! better than every number); for `*` the
//! derivative with respect to an element is dest times the product of the bin's *other*
//! elements (prefix and suffix products, no division and no zero counting); for a general
//! operator (and the general versions of +, *, min, max) each element's l (the fold of dest and
//! the bin's earlier elements) and r (the fold of its later elements) are refolded from scratch,
//! O(m^2) per bin, and the derivative is d2(l, a) d1(l op a, r): the explicit formula, with the
//! operator's own partials and nothing of the rules' scans, sorts or chunks (for logaddexp and
//! hypot at the inputs relative to the bin's largest, [`relative_inputs`]). A bin
//! with a NaN input is NaN, and so are its inputs' adjoints under `*` (0 where hist_bar is 0).
//!
//! Scans (and their derivatives) follow the same pattern: every output is refolded from its
//! segment, and its derivative with respect to each element it covers comes from the l/r
//! formula. A reverse scan folds from the segment's end towards the element.

use crate::{HistOp, Operand, ScanSpec};

/// Bins of `k`, each with the positions of its elements in index order.
fn bins(k: usize, inds: &[i64]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); k];
    for (i, &b) in inds.iter().enumerate() {
        if b >= 0 && (b as u64) < k as u64 {
            out[b as usize].push(i);
        }
    }
    out
}

/// The histogram: per bin, dest folded with the bin's values in index order.
pub fn hist(op: HistOp, dest: &[f64], inds: &[i64], vals: &[f64]) -> Vec<f64> {
    bins(dest.len(), inds)
        .iter()
        .zip(dest)
        .map(|(members, &d)| members.iter().fold(d, |acc, &i| op.combine(acc, vals[i])))
        .collect()
}

/// For min/max: per bin the winning position, -1 when dest wins.
pub fn winners(op: HistOp, dest: &[f64], inds: &[i64], vals: &[f64]) -> Vec<i64> {
    // A later element wins only if strictly better; NaN is better than every number, and a
    // NaN winner keeps its bin (guide, Histogram rules).
    let better = |a: f64, best: f64| {
        !best.is_nan()
            && (a.is_nan()
                || match op.tie_break() {
                    Some(crate::Extremum::Min) => a < best,
                    Some(crate::Extremum::Max) => a > best,
                    None => panic!("winners() is for min and max"),
                })
    };
    bins(dest.len(), inds)
        .iter()
        .zip(dest)
        .map(|(members, &d)| {
            let (mut best, mut pos) = (d, -1i64);
            for &i in members {
                if better(vals[i], best) {
                    best = vals[i];
                    pos = i as i64;
                }
            }
            pos
        })
        .collect()
}

/// Left fold of `xs` from `init`.
fn fold(op: HistOp, init: f64, xs: impl IntoIterator<Item = f64>) -> f64 {
    xs.into_iter().fold(init, |acc, x| op.combine(acc, x))
}

/// The product of chain-rule factors (partials, tangents, adjoints): a zero factor contributes
/// 0 even against an infinite one (only `*` has infinite partials: its absorbing zeros), and a
/// NaN factor makes it NaN.
fn chain(p: f64, q: f64) -> f64 {
    if (p == 0.0 || q == 0.0) && !p.is_nan() && !q.is_nan() { 0.0 } else { p * q }
}

/// d(l op a op r)/da = d2(l, a) d1(l op a, r), times `g` (0 when g is 0, as in the rules).
fn fold_derivative(op: HistOp, l: f64, a: f64, r: f64, g: f64) -> f64 {
    if g == 0.0 {
        return 0.0;
    }
    chain(chain(op.partial(Operand::Right, l, a), op.partial(Operand::Left, op.combine(l, a), r)), g)
}

/// The reverse-mode derivative: `(hist, dest_bar, vals_bar)` for the adjoint `hist_bar`.
pub fn hist_vjp(
    op: HistOp,
    dest: &[f64],
    inds: &[i64],
    vals: &[f64],
    hist_bar: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let k = dest.len();
    let h = hist(op, dest, inds, vals);
    let mut dest_bar = vec![0.0; k];
    let mut vals_bar = vec![0.0; vals.len()];
    match op {
        HistOp::Add => {
            dest_bar.copy_from_slice(hist_bar);
            for (i, &b) in inds.iter().enumerate() {
                if b >= 0 && (b as u64) < k as u64 {
                    vals_bar[i] = hist_bar[b as usize];
                }
            }
        }
        HistOp::Min | HistOp::Max => {
            for (b, &w) in winners(op, dest, inds, vals).iter().enumerate() {
                if w < 0 {
                    dest_bar[b] = hist_bar[b];
                } else {
                    vals_bar[w as usize] = hist_bar[b];
                }
            }
        }
        HistOp::Mul => {
            for (b, members) in bins(k, inds).iter().enumerate() {
                let m = members.len();
                // Products with `*`'s semantics: zeros absorb (0 times an overflowed inf is 0).
                let mul = |a: f64, b: f64| HistOp::Mul.combine(a, b);
                // prefix[j] = product of the first j members; suffix[j] = of members j.. .
                let mut prefix = vec![1.0; m + 1];
                let mut suffix = vec![1.0; m + 1];
                for j in 0..m {
                    prefix[j + 1] = mul(prefix[j], vals[members[j]]);
                    suffix[m - 1 - j] = mul(suffix[m - j], vals[members[m - 1 - j]]);
                }
                // Each factor's adjoint: hist_bar times the product of the other factors (infinite
                // where one of them is, and no zero is).
                dest_bar[b] = chain(prefix[m], hist_bar[b]);
                for (j, &i) in members.iter().enumerate() {
                    vals_bar[i] = chain(mul(mul(dest[b], prefix[j]), suffix[j + 1]), hist_bar[b]);
                }
                // A bin with a NaN input: every input's adjoint is NaN (0 where hist_bar is 0).
                if dest[b].is_nan() || members.iter().any(|&i| vals[i].is_nan()) {
                    let nan_g = if hist_bar[b] == 0.0 { 0.0 } else { f64::NAN };
                    dest_bar[b] = nan_g;
                    for &i in members {
                        vals_bar[i] = nan_g;
                    }
                }
            }
        }
        HistOp::General(_) => {
            let n = op.neutral();
            for (b, members) in bins(k, inds).iter().enumerate() {
                // logaddexp's and hypot's derivatives are those at the inputs relative to the
                // bin's largest (invariant partials): `relative_inputs`.
                let xs: Vec<f64> = std::iter::once(dest[b]).chain(members.iter().map(|&i| vals[i])).collect();
                let rel = relative_inputs(op, &xs);
                let (dest, vals) = (&rel[0], &rel[1..]);
                let value = |j: usize| vals[j];
                let m = members.len();
                let h = fold(op, n, (0..m).map(value));
                dest_bar[b] = if hist_bar[b] == 0.0 { 0.0 } else { op.partial(Operand::Left, *dest, h) * hist_bar[b] };
                for (j, &i) in members.iter().enumerate() {
                    let l = fold(op, *dest, (0..j).map(value));
                    let r = fold(op, n, (j + 1..m).map(value));
                    vals_bar[i] = fold_derivative(op, l, vals[j], r, hist_bar[b]);
                }
            }
        }
    }
    (h, dest_bar, vals_bar)
}

/// A bin's inputs (dest first) in the form its derivatives are defined in (guide, Histogram rules):
/// logaddexp's relative to the bin's maximum m (x - m, or 0 where x equals m: the +inf inputs
/// of a +inf bin), hypot's relative to its largest magnitude m (x / m, or the sign of x where
/// |x| equals m); a bin of logaddexp's -inf only, or of hypot's zeros only, as it is; NaN where
/// any input is NaN. Other operators' inputs as they are.
pub fn relative_inputs(op: HistOp, xs: &[f64]) -> Vec<f64> {
    let Some(g) = op.general() else { return xs.to_vec() };
    let shift = std::ptr::eq(g, &crate::general::LOGADDEXP);
    if !shift && !std::ptr::eq(g, &crate::general::HYPOT) {
        return xs.to_vec();
    }
    if xs.iter().any(|x| x.is_nan()) {
        return vec![f64::NAN; xs.len()];
    }
    if shift {
        let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            return xs.to_vec();
        }
        xs.iter().map(|&x| if x == m { 0.0 } else { x - m }).collect()
    } else {
        let m = xs.iter().map(|x| x.abs()).fold(0.0, f64::max);
        if m == 0.0 {
            return xs.to_vec();
        }
        xs.iter().map(|&x| if x.abs() == m { x.signum() } else { x / m }).collect()
    }
}

/// The forward-mode derivative: `(hist, hist_dot)` for tangents of vals and dest.
pub fn hist_jvp(
    op: HistOp,
    dest: &[f64],
    inds: &[i64],
    vals: &[f64],
    dest_dot: &[f64],
    vals_dot: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    // The JVP is the VJP's transpose: hist_dot[b] = sum over inputs of d hist[b] / d input * dot.
    // Compute it from one-hot adjoints per bin (slow, independent, fine for tests).
    let k = dest.len();
    let h = hist(op, dest, inds, vals);
    let mut hist_dot = vec![0.0; k];
    for (b, hd) in hist_dot.iter_mut().enumerate() {
        let mut e = vec![0.0; k];
        e[b] = 1.0;
        let (_, db, vb) = hist_vjp(op, dest, inds, vals, &e);
        // A zero tangent contributes 0, even next to an infinite derivative (`chain`).
        *hd = db.iter().zip(dest_dot).map(|(&x, &y)| chain(x, y)).sum::<f64>()
            + vb.iter().zip(vals_dot).map(|(&x, &y)| chain(x, y)).sum::<f64>();
    }
    (h, hist_dot)
}

/// The positions output j of a scan folds, in fold order.
fn scan_sequence(n: usize, j: usize, spec: ScanSpec, segments: Option<&[i64]>) -> Vec<usize> {
    let same = |a: usize, b: usize| segments.is_none_or(|s| s[a] == s[b]);
    let mut start = j;
    while start > 0 && same(start - 1, j) {
        start -= 1;
    }
    let mut end = j;
    while end + 1 < n && same(end + 1, j) {
        end += 1;
    }
    let mut seq: Vec<usize> = if spec.reverse { (j..=end).rev().collect() } else { (start..=j).collect() };
    if spec.exclusive {
        seq.pop();
    }
    seq
}

/// A scan (see [`ScanSpec`]); with `segments`, each run of equal keys on its own.
pub fn scan(op: HistOp, x: &[f64], spec: ScanSpec, segments: Option<&[i64]>) -> Vec<f64> {
    (0..x.len())
        .map(|j| {
            let seq = scan_sequence(x.len(), j, spec, segments);
            fold(op, op.neutral(), seq.iter().map(|&p| x[p]))
        })
        .collect()
}

/// The reverse-mode derivative of a scan: x_bar for the adjoint `y_bar` of the scan.
pub fn scan_vjp(op: HistOp, x: &[f64], spec: ScanSpec, segments: Option<&[i64]>, y_bar: &[f64]) -> Vec<f64> {
    let mut x_bar = vec![0.0; x.len()];
    let n = op.neutral();
    for (j, &g) in y_bar.iter().enumerate() {
        let seq = scan_sequence(x.len(), j, spec, segments);
        for (q, &p) in seq.iter().enumerate() {
            let l = fold(op, n, seq[..q].iter().map(|&i| x[i]));
            let r = fold(op, n, seq[q + 1..].iter().map(|&i| x[i]));
            x_bar[p] += fold_derivative(op, l, x[p], r, g);
        }
    }
    x_bar
}

/// The forward-mode derivative of a scan: y_dot for the tangent `x_dot`.
pub fn scan_jvp(op: HistOp, x: &[f64], spec: ScanSpec, segments: Option<&[i64]>, x_dot: &[f64]) -> Vec<f64> {
    let n = op.neutral();
    (0..x.len())
        .map(|j| {
            let seq = scan_sequence(x.len(), j, spec, segments);
            seq.iter()
                .enumerate()
                .map(|(q, &p)| {
                    let l = fold(op, n, seq[..q].iter().map(|&i| x[i]));
                    let r = fold(op, n, seq[q + 1..].iter().map(|&i| x[i]));
                    fold_derivative(op, l, x[p], r, x_dot[p])
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oracle_agrees_with_hand_computed_bins() {
        let dest = [1.0, 5.0, 2.0];
        let inds = [0, 1, 0, 7, -1, 1];
        let vals = [3.0, 4.0, 3.0, 100.0, 100.0, 0.5];
        assert_eq!(hist(HistOp::Add, &dest, &inds, &vals), vec![7.0, 9.5, 2.0]);
        assert_eq!(hist(HistOp::Mul, &dest, &inds, &vals), vec![9.0, 10.0, 2.0]);
        assert_eq!(hist(HistOp::Min, &dest, &inds, &vals), vec![1.0, 0.5, 2.0]);
        assert_eq!(hist(HistOp::Max, &dest, &inds, &vals), vec![3.0, 5.0, 2.0]);
        // The first 3.0 (position 0) wins bin 0's tie; dest wins bin 2 (empty).
        assert_eq!(winners(HistOp::Max, &dest, &inds, &vals), vec![0, -1, -1]);
        let (_, db, vb) = hist_vjp(HistOp::Mul, &dest, &inds, &vals, &[1.0, 1.0, 1.0]);
        assert_eq!(db, vec![9.0, 2.0, 1.0]);
        assert_eq!(vb, vec![3.0, 2.5, 3.0, 0.0, 0.0, 20.0]);
    }
}
