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
use crate::IndexElem;

/// Most chunks (private histograms) one call uses.
const MAX_CHUNKS: usize = 64;
/// Fewest elements per chunk.
pub const MIN_CHUNK: usize = 1 << 15;
/// Up to this k, each chunk keeps `SUBS` interleaved sub-histograms.
pub const SMALL_K: usize = 64;
pub const SUBS: usize = 4;
// `four_rows` splits a block into four rows by hand, one per lane of each four elements that
// the folds read.
const _: () = assert!(SUBS == 4);
/// Bins per task when merging rows.
const MERGE_BLOCK: usize = 1 << 12;
/// From this many bins a row (at least 1 MB of f32) leaves L2, and a chunk's fold costs more the
/// more bytes of rows are updated at once: such histograms take half as many chunks.
/// `hist_overhead` n = 10^7, k = 10^6, i32, f32, 2 threads, 4 chunks against 2, four
/// interleaved rounds (ms): `+` primal 11.7-14.6 against 10.1-13.9, `*` 12.0-17.3 against
/// 10.8-11.3, max 13.9-16.4 against 11.9-12.6, max JVP 87-111 against 63-80, `*` JVP 38-51
/// against 28-40; at k = 3 x 10^5 and 10^5 (16 or 8 chunks, rows within L2) within the noise.
const LARGE_ROW_BINS: usize = 1 << 18;

/// Bytes of a row of (value, tangent) pairs from which the forward histograms of `+` and
/// logaddexp fold two scalar rows in two passes instead of pairs in one: past it the pair rows
/// leave the cache that the scalar rows still fit (the cost of a random update climbs between 8
/// and 12 MB of table). `hist_overhead` and `adgauge run`, n = 10^7, f32, i32, 2 threads, JVP ms,
/// interleaved rounds, pairs against two passes:
/// - `+`: k = 10^5 14.4-15.9 against 20.5-21.3, 3 x 10^5 14.2-14.8 against 21.1-23.7 (minima
///   of 9); k = 10^6 medians of 15 (`adgauge run`) 28.2, 49.4, 48.0 and 43.5 against 28.1,
///   20.5, 25.3 and 26.2;
/// - logaddexp (its weights stored, `lae::hist_dual`): k = 3 x 10^5 46-47 against 60-73,
///   5 x 10^5 53-54 against 65-68, 7 x 10^5 (5.6 MB) 67-71 against 71 (a tie), 10^6 (8 MB) 80-116
///   (182 once) against 79-85 in eight rounds each, 2 x 10^6 268-278 against 162-274.
///
/// f64 is taken at the same bytes, unmeasured.
pub const SPLIT_PAIR_ROW_BYTES: usize = 6 << 20;

/// Whether a forward histogram of k bins of `T` folds two scalar rows ([`SPLIT_PAIR_ROW_BYTES`]).
pub fn split_pair_rows<T>(k: usize) -> bool {
    k * 2 * std::mem::size_of::<T>() >= SPLIT_PAIR_ROW_BYTES
}

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
        // Private rows cost O(chunks * k) to fill and merge; keep that well below n, and
        // lower still where rows leave L2 (LARGE_ROW_BINS).
        let by_size = n / MIN_CHUNK;
        let by_k = if k >= LARGE_ROW_BINS { n / (4 * k) } else { n / (2 * k) };
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
fn bin_of<X: IndexElem>(inds: &[X], i: usize, k: usize) -> Option<usize> {
    inds[i].bin(k)
}

/// Folds elements `start..end` into `block`: `subs` interleaved rows of k accumulators (1 or
/// [`SUBS`]), element i into row `(i - start) % subs`.
///
/// A function of its own, never inlined, for its signature: `block` is a `&mut` parameter, so
/// the compiler knows that the stores to it alias nothing else, and keeps k and the slices that
/// `fold` reads in registers. Inlined into the chunk closure, the inner loop reloaded them from
/// memory after every store.
#[inline(never)]
fn fold_range<A, X: IndexElem, F: Fn(&mut A, usize)>(
    block: &mut [A],
    inds: &[X],
    start: usize,
    end: usize,
    k: usize,
    subs: usize,
    fold: &F,
) {
    let inds = &inds[start..end];
    if subs == 1 {
        let block = &mut block[..k];
        let mut quads = inds.chunks_exact(4);
        let mut i = start;
        for i4 in &mut quads {
            for (l, x) in i4.iter().enumerate() {
                if let Some(b) = x.bin(k) {
                    fold(&mut block[b], i + l);
                }
            }
            i += 4;
        }
        for x in quads.remainder() {
            if let Some(b) = x.bin(k) {
                fold(&mut block[b], i);
            }
            i += 1;
        }
    } else {
        let mut rows = four_rows(block, k);
        let mut quads = inds.chunks_exact(4);
        let mut i = start;
        for i4 in &mut quads {
            for (l, row) in rows.iter_mut().enumerate() {
                if let Some(b) = i4[l].bin(k) {
                    fold(&mut row[b], i + l);
                }
            }
            i += 4;
        }
        // The tail starts at a multiple of four: its element j goes to row j.
        for (row, x) in rows.iter_mut().zip(quads.remainder()) {
            if let Some(b) = x.bin(k) {
                fold(&mut row[b], i);
            }
            i += 1;
        }
    }
}

/// The [`SUBS`] rows of k accumulators at the start of `block`, one per lane of each four
/// elements that [`fold_range`] and [`fold_values`] read.
fn four_rows<A>(block: &mut [A], k: usize) -> [&mut [A]; SUBS] {
    let (r0, rest) = block[..SUBS * k].split_at_mut(k);
    let (r1, rest) = rest.split_at_mut(k);
    let (r2, r3) = rest.split_at_mut(k);
    [r0, r1, r2, r3]
}

/// [`fold_range`] for folds of the values alone: `fold(acc, x)` adds value `x`, and elements
/// `start..end` of `inds` and `vals` are read four at a time (in order, lane l of every four
/// into sub-histogram l when there are [`SUBS`]). Per element the loop then has no bounds check
/// of the values and a quarter of the loop's own work; the totals are those of [`fold_range`]
/// with `fold(acc, vals[i])`, bit for bit (every row receives the same elements in the same
/// order).
#[inline(never)]
fn fold_values<A, T: Copy, X: IndexElem, F: Fn(&mut A, T)>(
    block: &mut [A],
    inds: &[X],
    vals: &[T],
    k: usize,
    subs: usize,
    fold: &F,
) {
    let vals = &vals[..inds.len()];
    let mut quads = inds.chunks_exact(4).zip(vals.chunks_exact(4));
    let tail = inds.len() / 4 * 4;
    if subs == 1 {
        let row = &mut block[..k];
        for (i4, v4) in &mut quads {
            for l in 0..4 {
                if let Some(b) = i4[l].bin(k) {
                    fold(&mut row[b], v4[l]);
                }
            }
        }
        for (x, &v) in inds[tail..].iter().zip(&vals[tail..]) {
            if let Some(b) = x.bin(k) {
                fold(&mut row[b], v);
            }
        }
    } else {
        let mut rows = four_rows(block, k);
        for (i4, v4) in &mut quads {
            for (l, row) in rows.iter_mut().enumerate() {
                if let Some(b) = i4[l].bin(k) {
                    fold(&mut row[b], v4[l]);
                }
            }
        }
        // The tail starts at a multiple of four: its element j goes to row j.
        for (row, (x, &v)) in rows.iter_mut().zip(inds[tail..].iter().zip(&vals[tail..])) {
            if let Some(b) = x.bin(k) {
                fold(&mut row[b], v);
            }
        }
    }
}

/// [`bin_totals`] of a fold of the values alone: `fold(acc, x)` adds value `x` of `vals`
/// ([`fold_values`]'s loop, the same totals bit for bit).
pub fn value_totals<A, T, X, F, M>(
    pool: &Arc<Pool>,
    inds: &[X],
    vals: &[T],
    k: usize,
    neutral: A,
    fold: F,
    merge: M,
) -> Buf<A>
where
    X: IndexElem,
    A: Copy + Default + Send + Sync + 'static,
    T: Copy + Sync,
    F: Fn(&mut A, T) + Sync,
    M: Fn(&mut A, A) + Sync,
{
    assert_eq!(inds.len(), vals.len(), "value_totals: as many values as indices");
    totals_by_rows(
        pool,
        inds.len(),
        k,
        neutral,
        |block, start, end, subs| fold_values(block, &inds[start..end], &vals[start..end], k, subs, &fold),
        merge,
    )
}

/// Folds element i into the accumulator of its bin, for every i with an in-range index.
/// `fold(acc, i)` adds element i; `merge(acc, later)` appends a later row's partial result.
/// Returns the k per-bin totals (neutral for empty bins).
pub fn bin_totals<A, X, F, M>(pool: &Arc<Pool>, inds: &[X], k: usize, neutral: A, fold: F, merge: M) -> Buf<A>
where
    X: IndexElem,
    A: Copy + Default + Send + Sync + 'static,
    F: Fn(&mut A, usize) + Sync,
    M: Fn(&mut A, A) + Sync,
{
    totals_by_rows(
        pool,
        inds.len(),
        k,
        neutral,
        |block, start, end, subs| fold_range(block, inds, start, end, k, subs, &fold),
        merge,
    )
}

/// Like [`bin_totals`], but the folded values are staged block by block first:
/// `stage(base, buf)` fills `buf` with the values of elements `base..base + buf.len()` (a loop
/// that can run vectorised, such as the exponentials of logaddexp's weights), and
/// `fold(acc, value)` adds one. The n staged values are never stored whole, and the totals are
/// bit for bit those of `bin_totals` over the staged values written out.
pub fn staged_bin_totals<A, T, X, S, F, M>(
    pool: &Arc<Pool>,
    inds: &[X],
    k: usize,
    neutral: A,
    stage: S,
    fold: F,
    merge: M,
) -> Buf<A>
where
    X: IndexElem,
    A: Copy + Default + Send + Sync + 'static,
    T: Copy + Default,
    S: Fn(usize, &mut [T]) + Sync,
    F: Fn(&mut A, T) + Sync,
    M: Fn(&mut A, A) + Sync,
{
    totals_by_rows(
        pool,
        inds.len(),
        k,
        neutral,
        |block, start, end, subs| fold_range_staged(block, inds, start, end, k, subs, &stage, &fold),
        merge,
    )
}

/// The driver of [`bin_totals`]: `fold_rows(block, start, end, subs)` folds elements
/// `start..end` into `block` (`subs` rows of k), chunk by chunk in parallel; the rows are then
/// merged per bin in row order.
fn totals_by_rows<A, R, M>(pool: &Arc<Pool>, n: usize, k: usize, neutral: A, fold_rows: R, merge: M) -> Buf<A>
where
    A: Copy + Default + Send + Sync + 'static,
    R: Fn(&mut [A], usize, usize, usize) + Sync,
    M: Fn(&mut A, A) + Sync,
{
    let plan = Plan::new(n, k);
    // With no bins every index is out of range: nothing to fold, and no row to split by.
    if plan.rows() == 1 || k == 0 {
        let mut out = pool.filled(k, neutral);
        fold_rows(&mut out, 0, n, 1);
        return out;
    }
    let mut rows = pool.take::<A>(plan.rows() * k);
    let fold_chunk = |c: usize, block: &mut [A]| {
        block.fill(neutral);
        let start = c * plan.chunk_len;
        fold_rows(block, start, n.min(start + plan.chunk_len), plan.subs);
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

/// Elements staged per step of [`fold_range_staged`]: the staging buffer stays in L1.
pub(crate) const STAGE_LEN: usize = 1 << 10;

/// [`fold_range`] over staged values (see [`staged_bin_totals`]).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn fold_range_staged<A, T: Copy + Default, X: IndexElem, S: Fn(usize, &mut [T]), F: Fn(&mut A, T)>(
    block: &mut [A],
    inds: &[X],
    start: usize,
    end: usize,
    k: usize,
    subs: usize,
    stage: &S,
    fold: &F,
) {
    // With no bins nothing is folded (and nothing need be staged).
    if k == 0 {
        return;
    }
    let block = &mut block[..subs * k];
    let mut buf = [T::default(); STAGE_LEN];
    let mut base = start;
    while base < end {
        let len = STAGE_LEN.min(end - base);
        let staged = &mut buf[..len];
        stage(base, staged);
        for (j, (x, &value)) in inds[base..base + len].iter().zip(staged.iter()).enumerate() {
            if let Some(b) = x.bin(k) {
                let row = if subs == 1 { 0 } else { (base - start + j) % SUBS };
                fold(&mut block[row * k + b], value);
            }
        }
        base += len;
    }
}

/// Like [`bin_totals`] but keeps one row of k totals per chunk (sub-histograms merged into
/// their chunk's row, in order): the chunk totals of the chunked general rule. Returns the plan
/// (its chunk boundaries) and the `plan.chunks * k` rows.
pub fn chunk_totals<A, X, F, M>(pool: &Arc<Pool>, inds: &[X], k: usize, neutral: A, fold: F, merge: M) -> (Plan, Buf<A>)
where
    X: IndexElem,
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
            fold_range(row, inds, start, end, k, 1, &fold);
            return;
        }
        // Interleaved sub-histograms break the dependency chain on a hot bin (tiny k).
        scratch.clear();
        scratch.resize(SUBS * k, neutral);
        fold_range(scratch, inds, start, end, k, SUBS, &fold);
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

/// Bytes of one bin window of the partitioned chunk adjoint: the window of the running array
/// and of the adjoint stay in L2 while a partition's elements are folded.
const WINDOW_BYTES: usize = 256 << 10;
/// Bins from which `adjoint_chunk` partitions a chunk's elements by bin range: below, the
/// running array fits in L2 as it is.
pub const PARTITION_MIN_BINS_BYTES: usize = 1 << 20;

/// The bins per window of the partitioned chunk adjoint for k bins of `T`, or 0 where the
/// plain passes are as fast (k small), or where bins or positions pass 32 bits.
pub fn adjoint_window_bins<T>(k: usize, chunk_len: usize) -> usize {
    let size = std::mem::size_of::<T>().max(1);
    // Records hold bins and positions in 32 bits.
    if k * size < PARTITION_MIN_BINS_BYTES || chunk_len > u32::MAX as usize || k > u32::MAX as usize {
        0
    } else {
        WINDOW_BYTES / size
    }
}

/// One chunk of the general rule's value adjoint. A forward pass from the chunk's prefix row
/// `pre` gives each element's l = (the fold of its bin so far), and d2(l, a) and y1 = l op a;
/// a backward pass from the suffix row `suf` gives r, and the adjoint
/// `d2(l, a) * d1(y1, r) * g[bin]` (0 where g[bin] is 0, and for out-of-range indices).
///
/// With `window_bins` > 0 (see [`adjoint_window_bins`]) the passes run partition by partition:
/// the chunk's in-range elements are first sorted stably by bin window (a counting sort into
/// records of position, bin and value), so that the running array and g are read and written
/// one L2-sized window at a time instead of at random over k bins (k = 10^6: the running
/// array alone is 4-8 MB). Each bin's elements stay in index order, so every bin folds the
/// same values in the same order and the results are the same, bit for bit.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // positions index ix, v and o alike
pub fn adjoint_chunk<T, X, F>(
    f: F,
    pool: &Arc<Pool>,
    ix: &[X],
    v: &[T],
    pre: &[T],
    suf: &[T],
    g: &[T],
    o: &mut [T],
    window_bins: usize,
) where
    T: super::CpuElem,
    X: IndexElem,
    F: super::fold::Fold<T>,
{
    let k = g.len();
    let mut run = pool.take::<T>(k);
    if window_bins == 0 {
        let mut y1 = pool.take::<T>(o.len());
        run.copy_from_slice(pre);
        for j in 0..o.len() {
            o[j] = match bin_of(ix, j, k) {
                Some(b) => {
                    let (d2, y) = f.step_in(&mut run[b], v[j]);
                    y1[j] = y;
                    d2
                }
                None => T::zero(),
            };
        }
        run.copy_from_slice(suf);
        for j in (0..o.len()).rev() {
            if let Some(b) = bin_of(ix, j, k) {
                o[j] = f.step_out(&mut run[b], v[j], o[j], y1[j], g[b]);
            }
        }
        return;
    }
    // Counting sort of the in-range elements by window: `starts[w]..starts[w + 1]` are window
    // w's records (position, bin, value), in index order. Windows are a power of two of bins:
    // a shift instead of a division per element (the division was a fifth of the sort).
    let shift = window_bins.next_power_of_two().trailing_zeros();
    let windows = k.div_ceil(1 << shift);
    let mut starts = vec![0usize; windows + 1];
    for j in 0..o.len() {
        match bin_of(ix, j, k) {
            Some(b) => starts[(b >> shift) + 1] += 1,
            None => o[j] = T::zero(),
        }
    }
    for w in 0..windows {
        starts[w + 1] += starts[w];
    }
    let total = starts[windows];
    let mut records = pool.take::<(u32, T)>(total);
    let mut next = starts.clone();
    for j in 0..o.len() {
        if let Some(b) = bin_of(ix, j, k) {
            let w = b >> shift;
            records[next[w]] = (b as u32, v[j]);
            next[w] += 1;
        }
    }
    // d2 and y1 per record, in record order; the backward pass turns d2 into the adjoint.
    let (mut d2, mut y1) = (pool.take::<T>(total), pool.take::<T>(total));
    run.copy_from_slice(pre);
    for w in 0..windows {
        for r in starts[w]..starts[w + 1] {
            let (b, a) = records[r];
            (d2[r], y1[r]) = f.step_in(&mut run[b as usize], a);
        }
    }
    run.copy_from_slice(suf);
    for w in 0..windows {
        for r in (starts[w]..starts[w + 1]).rev() {
            let (b, a) = records[r];
            d2[r] = f.step_out(&mut run[b as usize], a, d2[r], y1[r], g[b as usize]);
        }
    }
    // Back to index order: element j is the next record of its window (one sequential read
    // per window and a sequential write, where writing each adjoint to its position from the
    // record loop missed the cache on nearly every element).
    let mut next = starts;
    for j in 0..o.len() {
        if let Some(b) = bin_of(ix, j, k) {
            let w = b >> shift;
            o[j] = d2[next[w]];
            next[w] += 1;
        }
    }
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
        let p = Plan::new(10_000_000, 100_000);
        assert_eq!(p.chunks, 32, "n / 2k = 50 chunks, rounded down to a power of two");
        let p = Plan::new(10_000_000, 1_000_000);
        assert_eq!(p.chunks, 2, "rows beyond L2: n / 4k = 2.5 chunks, rounded down");
        assert!(p.chunks * p.chunk_len >= 10_000_000);
        assert_eq!(Plan::new(10_000_000, LARGE_ROW_BINS - 1).chunks, 16, "n / 2k = 19");
        assert_eq!(Plan::new(10_000_000, LARGE_ROW_BINS).chunks, 8, "n / 4k = 9.5");
    }

    /// The chunk adjoint by windows equals the plain passes bit for bit, for every operator
    /// kind, window size (one bin, a power of two, a size rounded up to one) and dtype, with
    /// out-of-range indices, zero adjoints, ties and hot bins in the data.
    #[test]
    fn the_windowed_chunk_adjoint_equals_the_plain_passes_bit_for_bit() {
        use super::super::fold::{AddF, Fold, LogAddExpF, MaxF, MinF, MulF};
        fn check<T: super::super::CpuElem, F: Fold<T>>(f: F, name: &str) {
            let pool = Pool::new();
            let (m, k) = (5000usize, 300usize);
            let mix = |i: usize, salt: usize| (i.wrapping_mul(2654435761).wrapping_add(salt * 40503)) % 1_000_003;
            // Bins: a hot bin (7), in-range spread, and -1, k, k + 9 out of range.
            let ix: Vec<i64> = (0..m)
                .map(|i| match mix(i, 1) % 20 {
                    0 => -1,
                    1 => k as i64,
                    2 => k as i64 + 9,
                    3..=6 => 7,
                    _ => (mix(i, 2) % k) as i64,
                })
                .collect();
            let val = |i: usize, salt: usize| T::of_f64(((mix(i, salt) % 17) as f64 - 8.0) / 4.0);
            let v: Vec<T> = (0..m).map(|i| val(i, 3)).collect();
            let pre: Vec<T> = (0..k).map(|b| val(b, 4)).collect();
            let suf: Vec<T> = (0..k).map(|b| val(b, 5)).collect();
            let g: Vec<T> = (0..k).map(|b| if b % 5 == 0 { T::zero() } else { val(b, 6) }).collect();
            let bits = |o: &[T]| o.iter().map(|x| x.as_f64().to_bits()).collect::<Vec<_>>();
            let mut want = vec![T::one(); m];
            adjoint_chunk(f, &pool, &ix, &v, &pre, &suf, &g, &mut want, 0);
            assert!(want.iter().any(|x| x.as_f64() != 0.0), "{name}: the data must give non-zero adjoints");
            for window in [1, 3, 16, 64, 1024] {
                let mut got = vec![T::one(); m];
                adjoint_chunk(f, &pool, &ix, &v, &pre, &suf, &g, &mut got, window);
                assert_eq!(bits(&got), bits(&want), "{name}, {} window {window}", T::DTYPE);
            }
        }
        check::<f32, _>(AddF, "+");
        check::<f64, _>(MulF, "*");
        check::<f32, _>(MinF, "min");
        check::<f64, _>(MaxF, "max");
        check::<f64, _>(LogAddExpF, "logaddexp");
        check::<f32, _>(LogAddExpF, "logaddexp");
    }

    #[test]
    fn the_window_is_chosen_from_the_bytes_of_k_bins() {
        assert_eq!(adjoint_window_bins::<f32>(100_000, 1 << 20), 0, "400 KB of bins fit in L2");
        assert_eq!(adjoint_window_bins::<f32>(1_000_000, 1 << 20), WINDOW_BYTES / 4);
        assert_eq!(adjoint_window_bins::<f64>(1_000_000, 1 << 20), WINDOW_BYTES / 8);
        assert_eq!(adjoint_window_bins::<f64>(1_000_000, 1 << 33), 0, "positions past 32 bits");
        assert_eq!(adjoint_window_bins::<f32>(1 << 33, 1 << 20), 0, "bins past 32 bits");
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

    /// The folds read four elements at a time and put lane l of each four into sub-histogram l:
    /// every element must still land in the row `Plan` gives it ((i - chunk start) % subs), in
    /// order, and the rows merge per bin in row order. An order-sensitive hash as the fold and
    /// merge tells any other order apart. n is never a multiple of four, nor are most chunk
    /// lengths; indices include -1, k and k + 1.
    #[test]
    fn four_at_a_time_folds_keep_every_elements_row_and_order() {
        fn hash(acc: u64, x: u64) -> u64 {
            acc.wrapping_mul(0x100_0000_01B3).wrapping_add(x)
        }
        fn merge(acc: u64, later: u64) -> u64 {
            acc.wrapping_mul(1_000_003) ^ later
        }
        fn reference<X: IndexElem>(inds: &[X], k: usize, x_of: impl Fn(usize) -> u64) -> Vec<u64> {
            let n = inds.len();
            let plan = Plan::new(n, k);
            let mut rows = vec![7u64; plan.rows() * k];
            for c in 0..plan.chunks {
                let start = c * plan.chunk_len;
                for (i, x) in inds.iter().enumerate().take(n.min(start + plan.chunk_len)).skip(start) {
                    let b = x.idx();
                    if b >= 0 && (b as usize) < k {
                        let r = c * plan.subs + (i - start) % plan.subs;
                        rows[r * k + b as usize] = hash(rows[r * k + b as usize], x_of(i));
                    }
                }
            }
            (0..k).map(|b| (1..plan.rows()).fold(rows[b], |acc, r| merge(acc, rows[r * k + b]))).collect()
        }
        fn check<X: IndexElem>(pool: &Arc<Pool>, n: usize, k: usize) {
            let inds: Vec<X> = (0..n).map(|i| X::of_idx(((i * 2654435761) % (k + 3)) as i64 - 1)).collect();
            let vals: Vec<u64> = (0..n).map(|i| (i as u64).wrapping_mul(0x9E37_79B9) | 1).collect();
            let plan = Plan::new(n, k);
            let what = format!("n = {n}, k = {k}, {:?}, {plan:?}", X::DTYPE);
            let by_index = bin_totals(pool, &inds, k, 7u64, |a, i| *a = hash(*a, i as u64), |a, b| *a = merge(*a, b));
            assert_eq!(&by_index[..], &reference(&inds, k, |i| i as u64)[..], "bin_totals, {what}");
            let by_value = value_totals(pool, &inds, &vals, k, 7u64, |a, x| *a = hash(*a, x), |a, b| *a = merge(*a, b));
            assert_eq!(&by_value[..], &reference(&inds, k, |i| vals[i])[..], "value_totals, {what}");
        }
        let pool = Pool::new();
        for &(n, k) in &[(0, 3), (5, 1), (1003, 3), (100_003, 7), (300_001, 64), (300_002, 65), (250_001, 5000)] {
            check::<i32>(&pool, n, k);
            check::<i64>(&pool, n, k);
        }
        // Both row layouts are exercised: four sub-histograms (k <= SMALL_K) and one, in one
        // chunk and in several.
        assert_eq!((Plan::new(1003, 3).subs, Plan::new(1003, 3).chunks), (SUBS, 1));
        assert_eq!(Plan::new(300_001, 64).subs, SUBS);
        assert!(Plan::new(300_001, 64).chunks > 1 && !Plan::new(300_001, 64).chunk_len.is_multiple_of(4));
        assert_eq!(Plan::new(250_001, 5000).subs, 1);
        assert!(Plan::new(250_001, 5000).chunks > 1);
    }
}
