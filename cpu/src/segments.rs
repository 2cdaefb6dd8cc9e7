//! The sort strategy of the general histogram rule as one fused kernel.
//!
//! A stable counting sort by bin carries each in-range element's value along (so nothing is
//! gathered by a permutation afterwards; out-of-range elements get their zero
//! adjoint during the counting pass), then every bin is one sorted segment: a forward fold from
//! dest gives each element's l and l op a, a backward fold gives r and the adjoint
//! d2(l, a) d1(l op a, r) hist_bar[bin] in sorted order, and each element then reads its own
//! at its rank (its slot, kept by the scatter pass in index order). Bins run
//! in parallel in groups of about equal element counts; each bin is folded sequentially, so the
//! result depends neither on the grouping nor on the thread count. The counting pass uses fixed
//! chunks whose boundaries depend only on (n, k), and a stable sort has only one result anyway.

use std::sync::Arc;

use rayon::prelude::*;

use super::fold::Fold;
use super::kernels::SyncPtr;
use super::pool::Pool;
use crate::{Elem, IndexElem};

/// Most chunks of the counting pass.
const MAX_CHUNKS: usize = 64;
/// Fewest elements per chunk of the counting pass.
const MIN_CHUNK: usize = 1 << 15;
/// Groups of bins of the segment pass.
const GROUPS: usize = 128;

/// A position or slot in the sorted order: u32 when n allows it (half the memory traffic).
pub trait Pos: Copy + Default + Send + Sync + 'static {
    fn of(i: usize) -> Self;
    fn at(self) -> usize;
}

impl Pos for u32 {
    #[inline(always)]
    fn of(i: usize) -> Self {
        i as u32
    }
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

impl Pos for usize {
    #[inline(always)]
    fn of(i: usize) -> Self {
        i
    }
    #[inline(always)]
    fn at(self) -> usize {
        self
    }
}

/// `out[i] = d2(l, a) d1(l op a, r) g[inds[i]]` for every element (0 out of range or where the
/// bin's adjoint is 0), with l the fold of dest and the bin's earlier elements and r the fold of
/// its later ones. `P` must hold any index below `inds.len()`.
#[allow(clippy::too_many_arguments)]
pub fn sorted_adjoint<P: Pos, T: Elem, X: IndexElem, F: Fold<T>>(
    pool: &Arc<Pool>,
    f: F,
    neutral: T,
    inds: &[X],
    v: &[T],
    d: &[T],
    g: &[T],
    out: &mut [T],
) {
    let (n, k) = (inds.len(), d.len());
    if n == 0 {
        return;
    }
    if k == 0 {
        out.fill(T::zero());
        return;
    }
    let chunks = (n / MIN_CHUNK).min(n / (2 * k)).clamp(1, MAX_CHUNKS);
    let chunk_len = n.div_ceil(chunks);
    // Counting pass: per-chunk bin counts; out-of-range elements get their zero adjoint here.
    let mut counts = pool.take::<P>(chunks * k);
    let count_chunk = |row: &mut [P], ks: &[X], o: &mut [T]| {
        row.fill(P::of(0));
        for (&b, o) in ks.iter().zip(o) {
            if let Some(b) = b.bin(k) {
                let c = &mut row[b];
                *c = P::of(c.at() + 1);
            } else {
                *o = T::zero();
            }
        }
    };
    if chunks == 1 {
        count_chunk(&mut counts, inds, out);
    } else {
        counts
            .par_chunks_mut(k)
            .zip(inds.par_chunks(chunk_len).zip(out.par_chunks_mut(chunk_len)))
            .for_each(|(row, (ks, o))| count_chunk(row, ks, o));
    }
    // Exclusive prefix in (bin, chunk) order: each chunk's first slot in each bin; and the start
    // of every bin in the sorted order.
    let mut starts = pool.take::<usize>(k + 1);
    let mut next = 0usize;
    for b in 0..k {
        starts[b] = next;
        for c in 0..chunks {
            let here = counts[c * k + b].at();
            counts[c * k + b] = P::of(next);
            next += here;
        }
    }
    starts[k] = next;
    let m = next;
    // Scatter pass: values to their sorted slots (slots never collide), and each element's
    // slot (its rank) in index order, written in sequence.
    let mut sv = pool.take::<T>(n);
    let mut rank = pool.take::<P>(n);
    let pv = SyncPtr::new(&mut sv[..]);
    let scatter_chunk = |c: usize, slots: &mut [P], ranks: &mut [P]| {
        let start = c * chunk_len;
        for (j, r) in ranks.iter_mut().enumerate() {
            if let Some(b) = inds[start + j].bin(k) {
                let s = &mut slots[b];
                let slot = s.at();
                *s = P::of(slot + 1);
                *r = P::of(slot);
                // SAFETY: slot < m <= n, and the slots of all chunks and bins are distinct.
                unsafe { pv.write(slot, v[start + j]) };
            }
        }
    };
    if chunks == 1 {
        scatter_chunk(0, &mut counts, &mut rank);
    } else {
        counts
            .par_chunks_mut(k)
            .zip(rank.par_chunks_mut(chunk_len))
            .enumerate()
            .for_each(|(c, (slots, ranks))| scatter_chunk(c, slots, ranks));
    }
    drop(counts);
    // Segment pass: groups of whole bins with about m / GROUPS elements each.
    let groups = GROUPS.min(k);
    let mut bounds: Vec<usize> = (0..=groups).map(|q| starts[..k].partition_point(|&s| s < q * m / groups)).collect();
    bounds[0] = 0;
    bounds[groups] = k;
    bounds.dedup();
    // Scratch for d2(l, a) (then the adjoint) and l op a, by sorted slot (pooled: no page
    // faults on reuse).
    let mut t1 = pool.take::<T>(n);
    let mut y1 = pool.take::<T>(n);
    let mut pieces = Vec::with_capacity(bounds.len());
    let (mut rt, mut ry) = (&mut t1[..m], &mut y1[..m]);
    for w in bounds.windows(2) {
        let len = starts[w[1]] - starts[w[0]];
        let (t, rest_t) = std::mem::take(&mut rt).split_at_mut(len);
        let (y, rest_y) = std::mem::take(&mut ry).split_at_mut(len);
        (rt, ry) = (rest_t, rest_y);
        pieces.push((w[0], w[1], t, y));
    }
    let (sv, starts) = (&sv[..], &starts[..]);
    let group = |(b0, b1, t1, y1): (usize, usize, &mut [T], &mut [T])| {
        let base = starts[b0];
        for b in b0..b1 {
            let (s, e) = (starts[b], starts[b + 1]);
            let vals = &sv[s..e];
            let (t1, y1) = (&mut t1[s - base..e - base], &mut y1[s - base..e - base]);
            let gb = g[b];
            if gb == T::zero() {
                t1.fill(T::zero());
                continue;
            }
            let mut l = d[b];
            for ((&a, t), y) in vals.iter().zip(t1.iter_mut()).zip(y1.iter_mut()) {
                (*t, *y) = f.step_in(&mut l, a);
            }
            let mut r = neutral;
            for j in (0..vals.len()).rev() {
                t1[j] = f.step_out(&mut r, vals[j], t1[j], y1[j], gb);
            }
        }
    };
    pieces.into_par_iter().for_each(group);
    // Back to index order: each in-range element reads its adjoint at its rank. Reads at
    // random where the segment pass had written at random (a write missing the cache costs a
    // read of the line as well); out-of-range elements keep the zero of the counting pass.
    let adjoint = &t1[..m];
    let gather_chunk = |start: usize, o: &mut [T], ranks: &[P]| {
        for (j, (o, r)) in o.iter_mut().zip(ranks).enumerate() {
            if inds[start + j].bin(k).is_some() {
                *o = adjoint[r.at()];
            }
        }
    };
    if chunks == 1 {
        gather_chunk(0, out, &rank);
    } else {
        out.par_chunks_mut(chunk_len)
            .zip(rank.par_chunks(chunk_len))
            .enumerate()
            .for_each(|(c, (o, ranks))| gather_chunk(c * chunk_len, o, ranks));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HistOp;
    use crate::fold::with_fold;

    /// Per bin, in index order: l from dest forwards, r from the neutral backwards.
    fn reference<T: Elem, F: Fold<T>>(f: F, neutral: T, inds: &[i64], v: &[T], d: &[T], g: &[T]) -> Vec<T> {
        let k = d.len();
        let mut out = vec![T::zero(); v.len()];
        let mut bins = vec![Vec::new(); k];
        for (i, &b) in inds.iter().enumerate() {
            if b >= 0 && (b as usize) < k {
                bins[b as usize].push(i);
            }
        }
        for (b, members) in bins.iter().enumerate() {
            if g[b] == T::zero() {
                continue;
            }
            let mut l = d[b];
            let mut before = Vec::new();
            for &i in members {
                before.push((f.d2(l, v[i]), f.combine(l, v[i])));
                l = f.combine(l, v[i]);
            }
            let mut r = neutral;
            for (j, &i) in members.iter().enumerate().rev() {
                out[i] = before[j].0 * f.d1(before[j].1, r) * g[b];
                r = f.combine(v[i], r);
            }
        }
        out
    }

    fn case<T: Elem>(n: usize, k: usize, ties: bool) -> (Vec<i64>, Vec<T>, Vec<T>, Vec<T>) {
        let inds = (0..n).map(|i| ((i as u64 * 2_654_435_761) % (k as u64 + 3)) as i64 - 1).collect();
        let v = (0..n)
            .map(|i| T::of_f64(if ties { (i % 3) as f64 } else { 0.5 + ((i * 7919) % 1000) as f64 * 1e-3 }))
            .collect();
        let d = (0..k).map(|b| T::of_f64(0.25 + (b % 5) as f64)).collect();
        // Some bins with a zero adjoint.
        let g = (0..k).map(|b| T::of_f64(if b % 7 == 3 { 0.0 } else { 1.0 - (b % 4) as f64 * 0.25 })).collect();
        (inds, v, d, g)
    }

    fn check<T: Elem>(n: usize, k: usize, ties: bool) {
        let pool = Pool::new();
        let (inds, v, d, g) = case::<T>(n, k, ties);
        let ops = [
            HistOp::Add,
            HistOp::Mul,
            HistOp::Min,
            HistOp::Max,
            HistOp::General(&crate::general::LOGADDEXP),
            HistOp::General(&crate::general::HYPOT),
        ];
        for op in ops {
            let neutral = T::of_f64(op.neutral());
            let want = with_fold!(op, T, f => reference(f, neutral, &inds, &v, &d, &g));
            for threads in [1, 3] {
                let tp = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut got32 = vec![T::nan(); n];
                let mut got64 = vec![T::nan(); n];
                tp.install(|| {
                    with_fold!(op, T, f => {
                        sorted_adjoint::<u32, _, _, _>(&pool, f, neutral, &inds, &v, &d, &g, &mut got32);
                        sorted_adjoint::<usize, _, _, _>(&pool, f, neutral, &inds, &v, &d, &g, &mut got64);
                    })
                });
                for (i, ((a, b), w)) in got32.iter().zip(&got64).zip(&want).enumerate() {
                    let same = |x: &T| x.to_bits_eq(w);
                    assert!(same(a) && same(b), "{op} {} n={n} k={k} i={i}: {a} {b} vs {w}", T::DTYPE);
                }
            }
        }
    }

    trait Bits {
        fn to_bits_eq(&self, other: &Self) -> bool;
    }
    impl<T: Elem> Bits for T {
        fn to_bits_eq(&self, other: &T) -> bool {
            (self.is_nan() && other.is_nan())
                || (*self == *other && self.is_sign_negative() == other.is_sign_negative())
        }
    }

    #[test]
    fn fused_sorted_adjoint_matches_a_per_bin_reference_bit_for_bit() {
        for (n, k) in [(0, 3), (5, 0), (1, 1), (7, 1), (100_000, 1), (400_000, 3000), (50_000, 60_000)] {
            for ties in [false, true] {
                check::<f32>(n, k, ties);
                check::<f64>(n, k, ties);
            }
        }
    }
}
