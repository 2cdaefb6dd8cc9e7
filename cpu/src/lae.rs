//! logaddexp histograms by max-shift, in two passes: per bin the maximum m of dest and the
//! values, then `s = sum of e^(v - m)` (and, for a tangent, `sum of e^(v - m) dv`), so the bin is
//! `m + log(e^(dest - m) + s)`, with the CPU's vectorisable exp (`vmath`), the weights `e^(v - m)`
//! computed block by block inside the second pass (`hist::staged_bin_totals`). One `exp` per element
//! instead of the pairwise fold's `exp`, `log1p` and branches (and, for the dual fold, two more
//! `exp`s for the partials); the shift
//! also makes the sum more accurate than the running fold. A bin whose maximum is +inf has no
//! finite shift: then the caller folds pairwise as before (`None`). A NaN value makes its bin
//! NaN (the pairwise fold let an empty bin's -inf swallow a first NaN).

use std::sync::Arc;

use super::hist;
use rayon::prelude::*;

use super::kernels::{BLOCK, PAR_MIN, fill_with};
use super::pool::{Buf, Pool};
use super::vmath;
use crate::{Elem, IndexElem};

/// Per-bin shifts: the maximum of dest and the bin's values, 0 where that is -inf (a bin of
/// -inf only: its sum is 0 and its log -inf). `None` when a maximum is +inf.
fn shifts<T: Elem, X: IndexElem>(pool: &Arc<Pool>, d: &[T], ix: &[X], v: &[T]) -> Option<Buf<T>> {
    let k = d.len();
    let maxima = super::extremum_bin_totals(pool, ix, k, v, crate::Extremum::Max);
    let mut shift = pool.take::<T>(k);
    fill_with(&mut shift, |b| {
        let m = if d[b] > maxima[b] { d[b] } else { maxima[b] };
        if m == T::neg_infinity() { T::zero() } else { m }
    });
    if shift.iter().any(|&s| s == T::infinity()) { None } else { Some(shift) }
}

/// logaddexp's total-form adjoint, `out[i] = e^(v_i - h[b]) g[b]` for the element's bin b, 0
/// where b is out of range, g[b] is 0 or h[b] is -inf (an empty bin of -inf values). The per-bin
/// conditions go into a table of scales read once per element (0 where the adjoint is 0), both
/// tables with one more entry, k, that every out-of-range index reads. Each block then runs three
/// loops over STAGE_LEN elements in L1: the gathers (scalar), the vector exp
/// (`vmath::map_exp_in_place`: a libm exp runs one lane at a time, several times the cost), and
/// a select of the scaled weight, which vectorises. The bits equal the per-element formula.
pub(crate) fn total_adjoint<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    ix: &[X],
    v: &[T],
    h: &[T],
    g: &[T],
    out: &mut [T],
) {
    let k = h.len();
    let (mut shift, mut scale) = (pool.take::<T>(k + 1), pool.take::<T>(k + 1));
    fill_with(&mut shift, |b| if b < k { h[b] } else { T::zero() });
    fill_with(&mut scale, |b| {
        let live = b < k && g[b] != T::zero() && h[b] != T::neg_infinity();
        if live { g[b] } else { T::zero() }
    });
    let run = |base: usize, block: &mut [T]| {
        let end = base + block.len();
        adjoint_block(&ix[base..end], &v[base..end], &shift, &scale, block)
    };
    if out.len() < PAR_MIN {
        run(0, out);
    } else {
        out.par_chunks_mut(BLOCK).enumerate().for_each(|(c, block)| run(c * BLOCK, block));
    }
}

/// One block of [`total_adjoint`]. Never inlined: with the block a `&mut` parameter the
/// compiler knows its stores alias none of the slices read (inlined, the loop reloaded them
/// after every store).
#[inline(never)]
fn adjoint_block<T: Elem, X: IndexElem>(ix: &[X], v: &[T], shift: &[T], scale: &[T], out: &mut [T]) {
    let last = shift.len() as u64 - 1;
    let mut scales = [T::zero(); hist::STAGE_LEN];
    for ((out, ix), v) in out.chunks_mut(hist::STAGE_LEN).zip(ix.chunks(hist::STAGE_LEN)).zip(v.chunks(hist::STAGE_LEN))
    {
        let scales = &mut scales[..out.len()];
        for (((o, s), i), &x) in out.iter_mut().zip(scales.iter_mut()).zip(ix).zip(v) {
            // A negative index wraps to a large one: both clamp to the last entry.
            let b = (i.idx() as u64).min(last) as usize;
            *o = x - shift[b];
            *s = scale[b];
        }
        vmath::map_exp_in_place(out);
        for (o, &s) in out.iter_mut().zip(scales.iter()) {
            *o = if s != T::zero() { *o * s } else { T::zero() };
        }
    }
}

/// The staging step of each value's weight `e^(v - shift[bin])` for
/// [`hist::staged_bin_totals`]: the gathers, then the vector exp (`vmath::map_exp_in_place`),
/// block by block; the n weights are never stored whole.
fn stage_weights<'a, T: Elem, X: IndexElem>(
    ix: &'a [X],
    v: &'a [T],
    shift: &'a [T],
) -> impl Fn(usize, &mut [T]) + Sync + 'a {
    let k = shift.len() as u64;
    move |base, buf| {
        for (j, o) in buf.iter_mut().enumerate() {
            let i = base + j;
            let b = ix[i].idx();
            // Out-of-range elements read bin 0 (a select, not a branch); no total reads them.
            *o = v[i] - shift[if (b as u64) < k { b as usize } else { 0 }];
        }
        vmath::map_exp_in_place(buf);
    }
}

/// The shifts of [`hist`] and [`hist_dual`]: 0 for every bin when the inputs are known to be
/// relative to their bins' largest (`peaks_at_zero`: the maxima pass would find 0, or -inf,
/// which is shifted by 0 too; a NaN bin is NaN either way), else [`shifts`].
fn shifts_of<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    d: &[T],
    ix: &[X],
    v: &[T],
    peaks_at_zero: bool,
) -> Option<Buf<T>> {
    if peaks_at_zero { Some(pool.filled(d.len(), T::zero())) } else { shifts(pool, d, ix, v) }
}

/// The histogram `dest[b] logaddexp (every value of bin b)`; `peaks_at_zero`: see [`shifts_of`].
pub fn hist<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    d: &[T],
    ix: &[X],
    v: &[T],
    peaks_at_zero: bool,
) -> Option<Buf<T>> {
    let shift = shifts_of(pool, d, ix, v, peaks_at_zero)?;
    let sums = hist::staged_bin_totals(
        pool,
        ix,
        d.len(),
        T::zero(),
        stage_weights(ix, v, &shift),
        |a, w| *a = *a + w,
        |a, b| *a = *a + b,
    );
    let e = dest_weights(pool, d, &shift);
    let mut out = pool.take::<T>(d.len());
    fill_with(&mut out, |b| shift[b] + (e[b] + sums[b]).ln());
    Some(out)
}

/// Each bin's `e^(dest - shift)`, by vmath's vector loop (the crate's baseline copy would call
/// libm's `fma` for each of exp's fused multiply-adds).
fn dest_weights<T: Elem>(pool: &Arc<Pool>, d: &[T], shift: &[T]) -> Buf<T> {
    let mut e = pool.take::<T>(d.len());
    fill_with(&mut e, |b| d[b] - shift[b]);
    vmath::map_exp_in_place(&mut e);
    e
}

/// The histogram and its tangent: `dot = (e^(dest - m) dest_dot + sum of e^(v - m) dv) /
/// (e^(dest - m) + s)`, 0 for a bin of -inf only (the pairwise fold's partials are 0 there);
/// `peaks_at_zero`: see [`shifts_of`].
///
/// Below [`hist::SPLIT_PAIR_ROW_BYTES`] one pass folds each element's (weight, weight x
/// tangent) pair; from there the weights are stored and the two sums fold in two scalar passes.
/// Both forms add the same terms in the same order: the same bits.
pub fn hist_dual<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    d: &[T],
    dd: &[T],
    ix: &[X],
    v: &[T],
    vd: &[T],
    peaks_at_zero: bool,
) -> Option<(Buf<T>, Buf<T>)> {
    hist_dual_by(pool, d, dd, ix, v, vd, peaks_at_zero, hist::split_pair_rows::<T>(d.len()))
}

/// [`hist_dual`] with the form chosen: `stored_weights` folds the two sums in two passes over
/// stored weights, else one pass over staged pairs.
#[allow(clippy::too_many_arguments)]
fn hist_dual_by<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    d: &[T],
    dd: &[T],
    ix: &[X],
    v: &[T],
    vd: &[T],
    peaks_at_zero: bool,
    stored_weights: bool,
) -> Option<(Buf<T>, Buf<T>)> {
    let shift = shifts_of(pool, d, ix, v, peaks_at_zero)?;
    let k = d.len();
    let weights = stage_weights(ix, v, &shift);
    if stored_weights {
        // The staged weights written out, block by block as the fused pass stages them.
        let mut w = pool.take::<T>(ix.len());
        w.par_chunks_mut(hist::STAGE_LEN).enumerate().for_each(|(c, block)| weights(c * hist::STAGE_LEN, block));
        let s = super::scalar_totals(pool, ix, k, T::zero(), &w, super::fold::AddF);
        let sd = hist::bin_totals(pool, ix, k, T::zero(), |a, i| *a = *a + w[i] * vd[i], |a, b| *a = *a + b);
        return Some(bins_of_sums(pool, d, dd, &shift, |b| (s[b], sd[b])));
    }
    // Each staged value carries its element's tangent: (e^(v - m), dv).
    let pairs = hist::staged_bin_totals(
        pool,
        ix,
        k,
        (T::zero(), T::zero()),
        |base, buf: &mut [(T, T)]| {
            let mut w = [T::zero(); hist::STAGE_LEN];
            let w = &mut w[..buf.len()];
            weights(base, w);
            for (j, (o, &e)) in buf.iter_mut().zip(w.iter()).enumerate() {
                *o = (e, vd[base + j]);
            }
        },
        |a, (w, dv)| *a = (a.0 + w, a.1 + w * dv),
        |a, b| *a = (a.0 + b.0, a.1 + b.1),
    );
    Some(bins_of_sums(pool, d, dd, &shift, |b| pairs[b]))
}

/// The bins of [`hist_dual`] from each bin's two sums, `sums(b) = (sum of w, sum of w dv)`.
fn bins_of_sums<T: Elem>(
    pool: &Arc<Pool>,
    d: &[T],
    dd: &[T],
    shift: &[T],
    sums: impl Fn(usize) -> (T, T) + Sync,
) -> (Buf<T>, Buf<T>) {
    let k = d.len();
    let weight = dest_weights(pool, d, shift);
    let (mut h, mut hd) = (pool.take::<T>(k), pool.take::<T>(k));
    fill_with(&mut h, |b| shift[b] + (weight[b] + sums(b).0).ln());
    fill_with(&mut hd, |b| {
        let (e, (s, sd)) = (weight[b], sums(b));
        if e + s == T::zero() { T::zero() } else { (e * dd[b] + sd) / (e + s) }
    });
    (h, hd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{Fold, LogAddExpF};

    /// n values into k bins (some empty, some indices out of range), dest with -inf entries.
    fn case(n: usize, k: usize) -> (Vec<f64>, Vec<i64>, Vec<f64>) {
        let ix: Vec<i64> = (0..n).map(|i| ((i * 2654435761) % (k + 2)) as i64 - 1).collect();
        let v: Vec<f64> = (0..n).map(|i| ((i * 7919) % 1000) as f64 / 100.0 - 5.0).collect();
        let d: Vec<f64> = (0..k).map(|b| if b % 3 == 0 { f64::NEG_INFINITY } else { b as f64 / 10.0 }).collect();
        (d, ix, v)
    }

    /// The pairwise lifted fold the kernels replace: the values in order from the neutral
    /// element, then dest in front.
    fn pairwise(d: &[f64], dd: &[f64], ix: &[i64], v: &[f64], vd: &[f64]) -> Vec<(f64, f64)> {
        let mut acc = vec![(f64::NEG_INFINITY, 0.0); d.len()];
        for (i, &b) in ix.iter().enumerate() {
            if b >= 0 && (b as usize) < d.len() {
                acc[b as usize] = LogAddExpF.lift(acc[b as usize], (v[i], vd[i]));
            }
        }
        acc.iter().enumerate().map(|(b, &t)| LogAddExpF.lift((d[b], dd[b]), t)).collect()
    }

    #[test]
    fn two_passes_agree_with_the_pairwise_fold_on_both_sides_of_the_parallel_threshold() {
        let pool = Pool::new();
        for &(n, k) in &[(0usize, 4usize), (50, 7), (300_000, 5), (300_000, 2000)] {
            let (d, ix, v) = case(n, k);
            let dd: Vec<f64> = (0..k).map(|b| (b % 5) as f64 - 2.0).collect();
            let vd: Vec<f64> = (0..n).map(|i| ((i * 31) % 11) as f64 / 11.0 - 0.5).collect();
            let want = pairwise(&d, &dd, &ix, &v, &vd);
            let h = hist(&pool, &d, &ix, &v, false).expect("finite shifts");
            let (h2, hd) = hist_dual(&pool, &d, &dd, &ix, &v, &vd, false).expect("finite shifts");
            for b in 0..k {
                let (wh, wd) = want[b];
                let close = |x: f64, y: f64| x == y || (x - y).abs() <= 1e-9 * (1.0 + y.abs());
                assert!(close(h[b], wh) && close(h2[b], wh), "n={n} k={k} bin {b}: {} {} vs {wh}", h[b], h2[b]);
                assert!(close(hd[b], wd), "n={n} k={k} bin {b}: tangent {} vs {wd}", hd[b]);
            }
            // Bins 0, 3, ... have dest -inf; with no values they stay -inf with tangent 0.
            if n == 0 {
                assert_eq!((h[0], hd[0]), (f64::NEG_INFINITY, 0.0));
                assert_eq!(h[1], 0.1);
            }
        }
    }

    /// The adjoint by its definition, one element at a time: `e^(v - h[b]) g[b]` in range where
    /// g[b] is non-zero and h[b] is not -inf, else 0.
    fn adjoint_by_element<T: Elem, X: IndexElem>(ix: &[X], v: &[T], h: &[T], g: &[T]) -> Vec<T> {
        let k = h.len();
        (0..v.len())
            .map(|i| match ix[i].bin(k) {
                Some(b) if g[b] != T::zero() && h[b] != T::neg_infinity() => vmath::exp(v[i] - h[b]) * g[b],
                _ => T::zero(),
            })
            .collect()
    }

    fn adjoint_matches<T: Elem, X: IndexElem>(n: usize, k: usize) {
        let pool = Pool::new();
        // Bins cycle through a normal adjoint, g = 0, g = -0, g = NaN and h = -inf; values
        // include NaN and both infinities; `case` puts indices at -1 and k.
        let (_, ix, v) = case(n, k);
        let ix: Vec<X> = ix.iter().map(|&i| X::of_idx(i)).collect();
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        let v: Vec<T> =
            v.iter().enumerate().map(|(i, &x)| T::of_f64(if i % 97 < 3 { special[i % 97] } else { x })).collect();
        let h: Vec<T> =
            (0..k).map(|b| T::of_f64(if b % 5 == 4 { f64::NEG_INFINITY } else { b as f64 / 7.0 + 4.0 })).collect();
        let g: Vec<T> = (0..k)
            .map(|b| {
                T::of_f64(match b % 5 {
                    0 => 1.5 + b as f64 / 100.0,
                    1 => 0.0,
                    2 => -0.0,
                    3 => f64::NAN,
                    _ => -2.0,
                })
            })
            .collect();
        let mut out = vec![T::of_f64(99.0); n];
        total_adjoint(&pool, &ix, &v, &h, &g, &mut out);
        let want = adjoint_by_element(&ix, &v, &h, &g);
        for i in 0..n {
            assert_eq!(
                out[i].as_f64().to_bits(),
                want[i].as_f64().to_bits(),
                "n={n} k={k} element {i}: {} vs {}",
                out[i],
                want[i]
            );
        }
        // The cases above are all there: in range and live, zero for each reason.
        assert!(out.iter().any(|x| x.as_f64() > 0.0) && out.iter().any(|x| x.is_nan()));
    }

    #[test]
    fn the_adjoint_is_its_definition_bit_for_bit() {
        // One block, then the parallel blocks with a table in L1 and one beyond L2.
        for &(n, k) in &[(500usize, 7usize), (300_000, 2000), (300_000, 70_000)] {
            adjoint_matches::<f32, i32>(n, k);
            adjoint_matches::<f64, i64>(n, k);
            adjoint_matches::<f32, i64>(n, k);
        }
    }

    /// The two forms of the tangent (stored weights in two passes, staged pairs in one) give the
    /// same bits: one chunk and several, every bin kind of `case` (empty, dest -inf, indices
    /// out of range), f64 and f32.
    #[test]
    fn stored_weights_and_staged_pairs_give_the_same_bits() {
        let pool = Pool::new();
        let same = |x: f64, y: f64| x.to_bits() == y.to_bits();
        for &(n, k) in &[(50usize, 7usize), (300_000, 5), (300_000, 2000), (300_000, 70_000)] {
            let (d, ix, v) = case(n, k);
            let dd: Vec<f64> = (0..k).map(|b| (b % 5) as f64 - 2.0).collect();
            let vd: Vec<f64> = (0..n).map(|i| ((i * 31) % 11) as f64 / 11.0 - 0.5).collect();
            let a = hist_dual_by(&pool, &d, &dd, &ix, &v, &vd, false, true).expect("finite shifts");
            let b = hist_dual_by(&pool, &d, &dd, &ix, &v, &vd, false, false).expect("finite shifts");
            let tangents = (0..k).filter(|&j| a.1[j] != 0.0).count();
            assert!(tangents > k / 2, "n={n} k={k}: only {tangents} nonzero tangents");
            for j in 0..k {
                assert!(
                    same(a.0[j], b.0[j]) && same(a.1[j], b.1[j]),
                    "n={n} k={k} bin {j}: {:?} vs {:?}",
                    (a.0[j], a.1[j]),
                    (b.0[j], b.1[j])
                );
            }
            let f = |x: &[f64]| -> Vec<f32> { x.iter().map(|&y| y as f32).collect() };
            let ix32: Vec<i32> = ix.iter().map(|&b| b as i32).collect();
            let a = hist_dual_by(&pool, &f(&d), &f(&dd), &ix32, &f(&v), &f(&vd), false, true).expect("finite shifts");
            let b = hist_dual_by(&pool, &f(&d), &f(&dd), &ix32, &f(&v), &f(&vd), false, false).expect("finite shifts");
            for j in 0..k {
                assert!(
                    a.0[j].to_bits() == b.0[j].to_bits() && a.1[j].to_bits() == b.1[j].to_bits(),
                    "f32 n={n} k={k} bin {j}"
                );
            }
        }
    }

    #[test]
    fn relative_inputs_skip_the_maxima_pass_and_give_the_same_bits() {
        // Inputs relative to their bins' largest, as `Relative::Shift` defines them: bins with
        // ordinary values, ties, a +inf anchor (its +inf inputs become 0, the rest -inf), a bin
        // of -inf only (anchor 0), a NaN bin and an empty one; indices out of range too.
        let pool = Pool::new();
        let (d, ix, mut v) = case(300_000, 9);
        let dd: Vec<f64> = (0..9).map(|b| b as f64 / 4.0 - 1.0).collect();
        let vd: Vec<f64> = (0..v.len()).map(|i| ((i * 17) % 13) as f64 / 13.0 - 0.5).collect();
        let mut d = d;
        for (i, &b) in ix.iter().enumerate() {
            match b {
                2 if i % 1000 == 0 => v[i] = f64::INFINITY,
                4 => v[i] = f64::NEG_INFINITY,
                5 if i % 5000 == 0 => v[i] = f64::NAN,
                7 => v[i] = 3.25,
                _ => {}
            }
        }
        d[4] = f64::NEG_INFINITY;
        d[7] = 3.25;
        let k = d.len();
        let mut anchor: Vec<f64> = d.clone();
        for (i, &b) in ix.iter().enumerate() {
            if b >= 0 && (b as usize) < k {
                let a = &mut anchor[b as usize];
                if v[i].is_nan() || (!a.is_nan() && v[i] > *a) {
                    *a = v[i];
                }
            }
        }
        for a in anchor.iter_mut() {
            if *a == f64::NEG_INFINITY {
                *a = 0.0;
            }
        }
        let rel = |x: f64, a: f64| if x == a { 0.0 } else { x - a };
        let d_rel: Vec<f64> = (0..k).map(|b| rel(d[b], anchor[b])).collect();
        let v_rel: Vec<f64> = (0..v.len())
            .map(|i| rel(v[i], if ix[i] >= 0 && (ix[i] as usize) < k { anchor[ix[i] as usize] } else { 0.0 }))
            .collect();
        let same = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        let (full, skip) =
            (hist(&pool, &d_rel, &ix, &v_rel, false).unwrap(), hist(&pool, &d_rel, &ix, &v_rel, true).unwrap());
        let (fd, sd) = (
            hist_dual(&pool, &d_rel, &dd, &ix, &v_rel, &vd, false).unwrap(),
            hist_dual(&pool, &d_rel, &dd, &ix, &v_rel, &vd, true).unwrap(),
        );
        for b in 0..k {
            assert!(same(full[b], skip[b]) && same(fd.0[b], sd.0[b]) && same(fd.1[b], sd.1[b]), "bin {b}");
        }
        // The cases are there: a NaN bin, a -inf bin, a bin anchored at +inf, finite bins.
        assert!(skip[5].is_nan() && skip[4] == f64::NEG_INFINITY && anchor[2] == f64::INFINITY);
        assert!(skip[7].is_finite() && skip[2].is_finite() && skip[2] > 0.0);
    }

    #[test]
    fn an_infinite_maximum_falls_back_and_a_nan_value_poisons_its_bin() {
        let pool = Pool::new();
        let (d, ix) = (vec![0.0, 0.0], vec![0i64, 1, 1]);
        assert!(hist(&pool, &d, &ix, &[1.0, f64::INFINITY, 2.0], false).is_none());
        assert!(hist_dual(&pool, &d, &[0.0; 2], &ix, &[1.0, f64::INFINITY, 2.0], &[0.0; 3], false).is_none());
        let h = hist(&pool, &d, &ix, &[1.0, f64::NAN, 2.0], false).expect("finite shifts");
        assert!((h[0] - (1.0f64.exp() + 1.0).ln()).abs() < 1e-15 && h[1].is_nan(), "{:?}", &h[..]);
        let h = hist(&pool, &[f64::NEG_INFINITY], &[0], &[f64::NAN], false).expect("finite shifts");
        assert!(h[0].is_nan(), "an empty bin's -inf must not swallow a NaN: {:?}", &h[..]);
    }
}
