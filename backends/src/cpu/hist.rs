//! Histogram kernels of the CPU device (`reduce_by_index` and its arg and zero-count variants).
//!
//! One driver, [`bin_totals`], folds the elements of every bin into an accumulator: the input is
//! cut into contiguous chunks whose boundaries depend only on (n, k) — never on the thread count —
//! each chunk folds into private rows of k accumulators (several interleaved sub-histograms per
//! chunk when k is tiny, which breaks the store-to-load dependency chain on a hot bin), and the
//! rows are merged per bin, in parallel over bins, always in row order. Results are therefore
//! bit-identical for any number of threads. The caller then folds dest in front of each total.

use std::sync::Arc;

use rayon::prelude::*;

use super::kernels::PAR_MIN;
use super::pool::{Buf, Pool};

/// Most chunks (private histograms) one call uses.
const MAX_CHUNKS: usize = 64;
/// Fewest elements per chunk.
const MIN_CHUNK: usize = 1 << 15;
/// Up to this k, each chunk keeps `SUBS` interleaved sub-histograms.
const SMALL_K: usize = 64;
const SUBS: usize = 4;
/// Bins per task when merging rows.
const MERGE_BLOCK: usize = 1 << 12;

/// How a histogram of n elements into k bins is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub chunks: usize,
    pub subs: usize,
    pub chunk_len: usize,
}

impl Plan {
    pub fn new(n: usize, k: usize) -> Plan {
        if n < PAR_MIN || k == 0 {
            let subs = if k <= SMALL_K && n >= 4 * SUBS * k.max(1) { SUBS } else { 1 };
            return Plan { chunks: 1, subs, chunk_len: n.max(1) };
        }
        // Private rows cost O(chunks * k) to fill and merge; keep that well below n.
        let by_size = n / MIN_CHUNK;
        let by_k = n / (2 * k);
        // A power of two, so that the chunks split evenly over 2, 4, 8, ... threads (at
        // n = 10^7, k = 10^6 five chunks ran as three then two on 2 cores).
        let chunks = by_size.min(by_k).clamp(1, MAX_CHUNKS);
        let chunks = 1 << chunks.ilog2();
        let subs = if k <= SMALL_K { SUBS } else { 1 };
        Plan { chunks, subs, chunk_len: n.div_ceil(chunks) }
    }

    pub fn rows(&self) -> usize {
        self.chunks * self.subs
    }
}

#[inline(always)]
fn bin_of(inds: &[i64], i: usize, k: usize) -> Option<usize> {
    let b = inds[i];
    if (b as u64) < k as u64 { Some(b as usize) } else { None }
}

/// Folds element i into the accumulator of its bin, for every i with an in-range index.
/// `fold(acc, i)` adds element i; `merge(acc, later)` appends a later row's partial result.
/// Returns the k per-bin totals (neutral for empty bins).
pub fn bin_totals<A, F, M>(pool: &Arc<Pool>, inds: &[i64], k: usize, neutral: A, fold: F, merge: M) -> Buf<A>
where
    A: Copy + Default + Send + Sync + 'static,
    F: Fn(&mut A, usize) + Sync,
    M: Fn(&mut A, A) + Sync,
{
    let n = inds.len();
    let plan = Plan::new(n, k);
    // With no bins every index is out of range: nothing to fold, and no row to split by.
    if plan.rows() == 1 || k == 0 {
        let mut out = pool.filled(k, neutral);
        for i in 0..n {
            if let Some(b) = bin_of(inds, i, k) {
                fold(&mut out[b], i);
            }
        }
        return out;
    }
    let mut rows = pool.take::<A>(plan.rows() * k);
    let fold_chunk = |c: usize, block: &mut [A]| {
        block.fill(neutral);
        let start = c * plan.chunk_len;
        let end = n.min(start + plan.chunk_len);
        if plan.subs == 1 {
            for i in start..end {
                if let Some(b) = bin_of(inds, i, k) {
                    fold(&mut block[b], i);
                }
            }
        } else {
            for i in start..end {
                if let Some(b) = bin_of(inds, i, k) {
                    fold(&mut block[((i - start) % SUBS) * k + b], i);
                }
            }
        }
    };
    rows.par_chunks_mut(k * plan.subs).enumerate().for_each(|(c, block)| fold_chunk(c, block));
    let mut out = pool.take::<A>(k);
    let nrows = plan.rows();
    let merge_block = |bb: usize, o: &mut [A]| {
        let b0 = bb * MERGE_BLOCK;
        o.copy_from_slice(&rows[b0..b0 + o.len()]);
        for r in 1..nrows {
            let row = &rows[r * k + b0..r * k + b0 + o.len()];
            for (acc, &x) in o.iter_mut().zip(row) {
                merge(acc, x);
            }
        }
    };
    if k < PAR_MIN {
        out.chunks_mut(MERGE_BLOCK).enumerate().for_each(|(bb, o)| merge_block(bb, o));
    } else {
        out.par_chunks_mut(MERGE_BLOCK).enumerate().for_each(|(bb, o)| merge_block(bb, o));
    }
    out
}

/// Like [`bin_totals`] but keeps one row of k totals per chunk (sub-histograms merged into
/// their chunk's row, in order): the chunk totals of the chunked general rule. Returns the plan
/// (its chunk boundaries) and the `plan.chunks * k` rows.
pub fn chunk_totals<A, F, M>(pool: &Arc<Pool>, inds: &[i64], k: usize, neutral: A, fold: F, merge: M) -> (Plan, Buf<A>)
where
    A: Copy + Default + Send + Sync + 'static,
    F: Fn(&mut A, usize) + Sync,
    M: Fn(&mut A, A) + Sync,
{
    let n = inds.len();
    let plan = Plan::new(n, k);
    let mut rows = pool.take::<A>(plan.chunks * k);
    let fold_chunk = |c: usize, row: &mut [A], scratch: &mut Vec<A>| {
        row.fill(neutral);
        let start = c * plan.chunk_len;
        let end = n.min(start + plan.chunk_len);
        if plan.subs == 1 {
            for i in start..end {
                if let Some(b) = bin_of(inds, i, k) {
                    fold(&mut row[b], i);
                }
            }
            return;
        }
        // Interleaved sub-histograms break the dependency chain on a hot bin (tiny k).
        scratch.clear();
        scratch.resize(SUBS * k, neutral);
        for i in start..end {
            if let Some(b) = bin_of(inds, i, k) {
                fold(&mut scratch[((i - start) % SUBS) * k + b], i);
            }
        }
        row.copy_from_slice(&scratch[..k]);
        for s in 1..SUBS {
            for (acc, &x) in row.iter_mut().zip(&scratch[s * k..(s + 1) * k]) {
                merge(acc, x);
            }
        }
    };
    if plan.chunks == 1 || k == 0 {
        let mut scratch = Vec::new();
        for (c, row) in rows.chunks_mut(k.max(1)).enumerate().take(plan.chunks) {
            fold_chunk(c, row, &mut scratch);
        }
    } else {
        rows.par_chunks_mut(k).enumerate().for_each_init(Vec::new, |scratch, (c, row)| fold_chunk(c, row, scratch));
    }
    (plan, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_depend_only_on_n_and_k() {
        assert_eq!(Plan::new(10, 3).chunks, 1);
        let p = Plan::new(10_000_000, 1000);
        assert_eq!(p.chunks, MAX_CHUNKS);
        assert_eq!(p.subs, 1);
        let p = Plan::new(10_000_000, 10);
        assert_eq!(p.subs, SUBS);
        let p = Plan::new(10_000_000, 1_000_000);
        assert_eq!(p.chunks, 4, "n / 2k = 5 chunks, rounded down to a power of two");
        assert!(p.chunks * p.chunk_len >= 10_000_000);
    }

    #[test]
    fn totals_match_a_sequential_fold_and_ignore_out_of_range() {
        let pool = Pool::new();
        for &(n, k) in &[(0usize, 3usize), (5, 1), (100_000, 7), (300_000, 5000)] {
            let inds: Vec<i64> = (0..n).map(|i| ((i * 2654435761) % (k + 3)) as i64 - 1).collect();
            let got = bin_totals(&pool, &inds, k, 0i64, |a, i| *a += i as i64, |a, b| *a += b);
            let mut want = vec![0i64; k];
            for (i, &b) in inds.iter().enumerate() {
                if b >= 0 && (b as usize) < k {
                    want[b as usize] += i as i64;
                }
            }
            assert_eq!(&got[..], &want[..], "n={n} k={k}");
        }
    }
}
