//! Dense kernels (k-means, GMM, LSTM, BA): broadcasting, sums down to a broadcast shape,
//! arg-min/arg-max along an axis, and batched matrix products. Generic over the element type and
//! written on plain slices; the kernel devices' dense kernels (backends/kernels/kernels.cl)
//! follow these semantics. Work splits into fixed blocks: results never depend on the thread
//! count.

use rayon::prelude::*;

use crate::Extremum;
use crate::shape::{MatmulPlan, Run, axis_view, matmul_plan, runs};
use crate::{Elem, OpError, Result};

#[cfg(target_arch = "x86_64")]
mod tiny_avx512;

use super::kernels::PAR_MIN;
use super::simd;
use super::{Buf, Pool, vmath};
use std::sync::Arc;

/// The runs as (outer kept O, reduced R, inner kept Q) when they have that form.
fn orq(runs: &[Run]) -> Option<(usize, usize, usize)> {
    let kinds: Vec<bool> = runs.iter().map(|r| r.reduced).collect();
    let l = |i: usize| runs[i].len;
    match kinds.as_slice() {
        [] => Some((1, 1, 1)),
        [false] => Some((l(0), 1, 1)),
        [true] => Some((1, l(0), 1)),
        [false, true] => Some((l(0), l(1), 1)),
        [true, false] => Some((1, l(0), l(1))),
        [false, true, false] => Some((l(0), l(1), l(2))),
        _ => None,
    }
}

/// Offset into the small tensor of element `i` of the big one (general path).
fn small_offset(runs: &[Run], mut i: usize) -> usize {
    let (mut off, mut stride) = (0, 1);
    for r in runs.iter().rev() {
        let c = i % r.len;
        i /= r.len;
        if !r.reduced {
            off += c * stride;
            stride *= r.len;
        }
    }
    off
}

/// The offsets into the small tensor of the big one's elements `i, i + step, i + 2 step, ...`:
/// a counter per run, carried as in an odometer, where [`small_offset`] divides by every run's
/// length for each element (GMM's squared differences over d = 2 spent most of their time in
/// those divisions).
struct SmallOffsets<'a> {
    runs: &'a [Run],
    /// The index's digit in each run (radix: the run's length).
    digits: Vec<usize>,
    /// Each run's stride in the small tensor (0 for a reduced run).
    strides: Vec<usize>,
    /// The current element's offset.
    off: usize,
}

impl<'a> SmallOffsets<'a> {
    fn at(runs: &'a [Run], mut i: usize) -> Self {
        let (mut digits, mut strides) = (vec![0; runs.len()], vec![0; runs.len()]);
        let mut stride = 1;
        for (j, r) in runs.iter().enumerate().rev() {
            digits[j] = i % r.len.max(1);
            i /= r.len.max(1);
            if !r.reduced {
                strides[j] = stride;
                stride *= r.len;
            }
        }
        let off = digits.iter().zip(&strides).map(|(d, s)| d * s).sum();
        SmallOffsets { runs, digits, strides, off }
    }

    /// Moves on by `step` elements of the big tensor.
    #[inline]
    fn advance(&mut self, step: usize) {
        let mut add = step;
        for j in (0..self.runs.len()).rev() {
            if add == 0 {
                break;
            }
            let (len, old) = (self.runs[j].len.max(1), self.digits[j]);
            let sum = old + add;
            let (carry, digit) = if sum < len { (0, sum) } else { (sum / len, sum % len) };
            self.off = self.off - old * self.strides[j] + digit * self.strides[j];
            self.digits[j] = digit;
            add = carry;
        }
    }
}

/// `out` (shape `big`) = `x` (shape `small`) broadcast.
pub fn broadcast_to<T: Elem>(x: &[T], small: &[usize], big: &[usize], out: &mut [T]) -> Result<()> {
    let rs = runs("broadcast_to", small, big)?;
    match orq(&rs) {
        Some((_, r, q)) => {
            let row = |j: usize, o: &mut [T]| {
                // Row j of the (O*R, Q) view reads row j / R of the (O, Q) source.
                let src = &x[(j / r) * q..(j / r + 1) * q];
                o.copy_from_slice(src);
            };
            if out.len() < PAR_MIN && q == 1 {
                // One value per source element, repeated r times (no division per element).
                out.chunks_mut(r.max(1)).zip(x).for_each(|(o, &v)| o.fill(v));
            } else if out.len() < PAR_MIN {
                out.chunks_mut(q).enumerate().for_each(|(j, o)| row(j, o));
            } else {
                out.par_chunks_mut(q).enumerate().for_each(|(j, o)| row(j, o));
            }
        }
        None => super::kernels::fill_with(out, |i| x[small_offset(&rs, i)]),
    }
    Ok(())
}

/// Fixed block of the reduced dimension when sums run in parallel over it.
const R_BLOCK: usize = 4096;

/// `out` (shape `small`) = `x` (shape `big`) summed over the broadcast dimensions.
pub fn sum_to<T: Elem>(x: &[T], big: &[usize], small: &[usize], out: &mut [T]) -> Result<()> {
    let rs = runs("sum_to", small, big)?;
    match orq(&rs) {
        Some((o, r, q)) => {
            // out[a, c] = sum_b x[a, b, c], b ascending.
            let one = |a: usize, b0: usize, b1: usize, acc: &mut [T]| {
                if q == 1 {
                    // One sum per output: a plain fold, same order (b ascending from zero).
                    acc[0] = x[a * r + b0..a * r + b1].iter().fold(T::zero(), |v, &s| v + s);
                    return;
                }
                acc.iter_mut().for_each(|v| *v = T::zero());
                for b in b0..b1 {
                    let src = &x[(a * r + b) * q..(a * r + b + 1) * q];
                    acc.iter_mut().zip(src).for_each(|(v, &s)| *v = *v + s);
                }
            };
            if x.len() < PAR_MIN {
                out.chunks_mut(q).enumerate().for_each(|(a, acc)| one(a, 0, r, acc));
            } else if o >= 16 || r <= R_BLOCK {
                out.par_chunks_mut(q).enumerate().for_each(|(a, acc)| one(a, 0, r, acc));
            } else {
                // Few outputs, long sums: fixed blocks of the reduced dimension, then combined
                // in block order.
                let nb = r.div_ceil(R_BLOCK);
                let partial: Vec<Vec<T>> = (0..o * nb)
                    .into_par_iter()
                    .map(|t| {
                        let (a, blk) = (t / nb, t % nb);
                        let mut acc = vec![T::zero(); q];
                        one(a, blk * R_BLOCK, ((blk + 1) * R_BLOCK).min(r), &mut acc);
                        acc
                    })
                    .collect();
                for (a, acc) in out.chunks_mut(q).enumerate() {
                    acc.iter_mut().for_each(|v| *v = T::zero());
                    for p in &partial[a * nb..(a + 1) * nb] {
                        acc.iter_mut().zip(p).for_each(|(v, &s)| *v = *v + s);
                    }
                }
            }
        }
        None => {
            out.iter_mut().for_each(|v| *v = T::zero());
            for (i, &v) in x.iter().enumerate() {
                let j = small_offset(&rs, i);
                out[j] = out[j] + v;
            }
        }
    }
    Ok(())
}

/// Lines per task of an arg-reduction along the last axis.
const LINE_BLOCK: usize = 1024;

/// Per (a, c) of the (O, R, Q) view, the winning value over b and its flat position (ties go to
/// the lowest b; NaN never wins, so an all-NaN line reports position a*R*Q + c and value NaN).
pub fn arg_reduce_axis<T: Elem>(
    x: &[T],
    (o, r, q): (usize, usize, usize),
    ext: Extremum,
    vals: &mut [T],
    pos: &mut [i64],
) {
    // Whether y beats the current winner (NaN never wins against a number).
    let better = |y: T, best: T| match ext {
        Extremum::Min => y < best || (best.is_nan() && !y.is_nan()),
        Extremum::Max => y > best || (best.is_nan() && !y.is_nan()),
    };
    let line = |a: usize, v: &mut [T], p: &mut [i64]| {
        let base = a * r * q;
        v.copy_from_slice(&x[base..base + q]);
        p.iter_mut().enumerate().for_each(|(c, p)| *p = (base + c) as i64);
        for b in 1..r {
            let row = &x[base + b * q..base + (b + 1) * q];
            for c in 0..q {
                if better(row[c], v[c]) {
                    v[c] = row[c];
                    p[c] = (base + b * q + c) as i64;
                }
            }
        }
    };
    if q == 1 && r > 0 {
        // Along the last axis (k-means' nearest centre, GMM's log-sum-exp): one scalar per line,
        // lines in blocks so that a task is more than one short line.
        let winner = |a: usize| {
            let row = &x[a * r..(a + 1) * r];
            let (mut best, mut at) = (row[0], 0);
            for (b, &y) in row.iter().enumerate().skip(1) {
                if better(y, best) {
                    (best, at) = (y, b);
                }
            }
            (best, (a * r + at) as i64)
        };
        let block = |blk: usize, v: &mut [T], p: &mut [i64]| {
            for (j, (v, p)) in v.iter_mut().zip(p.iter_mut()).enumerate() {
                (*v, *p) = winner(blk * LINE_BLOCK + j);
            }
        };
        if x.len() < PAR_MIN {
            block(0, vals, pos);
        } else {
            vals.par_chunks_mut(LINE_BLOCK)
                .zip(pos.par_chunks_mut(LINE_BLOCK))
                .enumerate()
                .for_each(|(blk, (v, p))| block(blk, v, p));
        }
        return;
    }
    if x.len() < PAR_MIN || o == 1 {
        vals.chunks_mut(q.max(1)).zip(pos.chunks_mut(q.max(1))).enumerate().for_each(|(a, (v, p))| line(a, v, p));
    } else {
        vals.par_chunks_mut(q.max(1))
            .zip(pos.par_chunks_mut(q.max(1)))
            .enumerate()
            .for_each(|(a, (v, p))| line(a, v, p));
    }
}

/// `rows x cols` row-major -> its transpose, in a buffer of the pool (a fresh one would cost
/// first-touch page faults on every product: a fifth of GMM's gradient time at d = 20).
fn transposed<T: Elem>(x: &[T], rows: usize, cols: usize, pool: &Arc<Pool>) -> Buf<T> {
    batches_transposed(x, 1, rows, cols, pool)
}

/// Each of `batches` `rows x cols` row-major matrices -> its transpose (see [`transposed`]).
fn batches_transposed<T: Elem>(x: &[T], batches: usize, rows: usize, cols: usize, pool: &Arc<Pool>) -> Buf<T> {
    let mut out = pool.take::<T>(batches * rows * cols);
    if rows * cols == 0 {
        return out;
    }
    const TILE: usize = 32;
    for (x, out) in x.chunks_exact(rows * cols).zip(out.chunks_exact_mut(rows * cols)).take(batches) {
        for i0 in (0..rows).step_by(TILE) {
            for j0 in (0..cols).step_by(TILE) {
                for i in i0..(i0 + TILE).min(rows) {
                    for j in j0..(j0 + TILE).min(cols) {
                        out[j * rows + i] = x[i * cols + j];
                    }
                }
            }
        }
    }
    out
}

/// Multiply-adds below which a matrix product runs on the calling thread.
const MM_PAR_MIN: usize = super::kernels::PAR_MIN_WORK;

/// Most rows of the output per task of the matrix product (fewer when the product has too
/// few rows to give every thread several tasks).
const MM_ROWS: usize = 64;
/// Largest register tile of the product: `MM_MR` rows by `MM_NR` columns of the output live in
/// registers while the inner dimension runs (eight accumulators of four f64 with AVX2).
const MM_MR: usize = 4;
const MM_NR: usize = 8;
/// Block of the inner dimension: a block of `MM_MR` rows of a is packed `MM_KC` values at a
/// time, and each column tile reads `MM_KC` rows of b (measured at GMM's shapes on this
/// machine against 64 and 256: 64 was faster for the d = 64 adjoint, whose inner dimension is
/// 1000, and slower for the d = 20 one; 256 slower for both).
const MM_KC: usize = 128;

/// Rows `i0..` of `a1 b1` (a1 m x k with element (i, l) at `a1[i rs + l cs]`, so a transposed
/// operand is read in place; b1 k x n row-major) into `o` (whole rows of n). Each output
/// element is one chain of fused multiply-adds over l in order, starting from zero, that skips
/// the terms whose `a[i, l]` is zero or subnormal: the register tiles of every size and the
/// blocks of the inner dimension all keep that chain, so the result does not depend on where
/// an element falls, on the thread count or on the vector width.
#[inline(always)]
fn matmul_rows<T: Elem>(a1: &[T], strides: (usize, usize), b1: &[T], k: usize, n: usize, i0: usize, o: &mut [T]) {
    if k == 0 || n == 0 {
        o.iter_mut().for_each(|v| *v = T::zero());
        return;
    }
    // The packed block is zeroed on every call: 4 KiB at MM_KC, which a product of a short
    // inner dimension never reads (ht's 4 x 4 transforms spent more time zeroing it than
    // multiplying). Any block keeps each element's chain, so the result is the same.
    if k <= 16 {
        matmul_rows_blocked::<T, 16>(a1, strides, b1, k, n, i0, o)
    } else {
        matmul_rows_blocked::<T, MM_KC>(a1, strides, b1, k, n, i0, o)
    }
}

/// [`matmul_rows`] with inner blocks of `KC`.
#[inline(always)]
fn matmul_rows_blocked<T: Elem, const KC: usize>(
    a1: &[T],
    (rs, cs): (usize, usize),
    b1: &[T],
    k: usize,
    n: usize,
    i0: usize,
    o: &mut [T],
) {
    let rows = o.len() / n;
    // A block of R rows of a, packed along l (R values per l, contiguous), and which of them
    // count (bit r for row r): the tiles read one slice per l and branch once on it.
    let mut packed = [[T::zero(); MM_MR]; KC];
    let mut nonzero = [0u8; KC];
    for l0 in (0..k).step_by(KC) {
        let l1 = (l0 + KC).min(k);
        for (r0, r) in row_tiles(rows) {
            pack_rows(a1, (rs, cs), (i0 + r0, r), l0..l1, &mut packed, &mut nonzero);
            let blk = (&packed[..l1 - l0], &nonzero[..l1 - l0]);
            tile_rows(blk, r, &b1[l0 * n..], n, l0 > 0, &mut o[r0 * n..]);
        }
    }
}

/// The row tiles of a run of `rows` rows: `(first, count)`, tiles of `MM_MR` rows, then
/// single rows.
fn row_tiles(rows: usize) -> impl Iterator<Item = (usize, usize)> {
    let full = rows / MM_MR * MM_MR;
    (0..full).step_by(MM_MR).map(|r0| (r0, MM_MR)).chain((full..rows).map(|r0| (r0, 1)))
}

/// Packs rows `first..first + r` of a1 (element (i, l) at `a1[i rs + l cs]`) over the inner
/// indices `ls`: per l, the rows' values, and in `nonzero` the mask of the ones that count (a
/// subnormal a[i, l] counts as zero: its term is below 2^-1022 |b[l, j]|, and computing it
/// costs a microcode assist per multiply-add on x86; GMM's Q adjoint, whose left operand
/// holds posterior weights that underflow gradually, took 4x as long with them).
#[inline(always)]
fn pack_rows<T: Elem>(
    a1: &[T],
    (rs, cs): (usize, usize),
    (first, r): (usize, usize),
    ls: std::ops::Range<usize>,
    packed: &mut [[T; MM_MR]],
    nonzero: &mut [u8],
) {
    for (l, (p, z)) in ls.zip(packed.iter_mut().zip(nonzero.iter_mut())) {
        *z = 0;
        for (rr, p) in p.iter_mut().take(r).enumerate() {
            *p = a1[(first + rr) * rs + l * cs];
            *z |= u8::from(p.abs() >= T::min_positive_value() || p.is_nan()) << rr;
        }
    }
}

/// [`tile_row`] for a tile of `r` rows (`MM_MR` or one).
#[inline(always)]
fn tile_rows<T: Elem>(a: PackedRows<T>, r: usize, b: &[T], n: usize, resume: bool, o: &mut [T]) {
    if r == MM_MR {
        tile_row::<T, MM_MR>(a, b, n, resume, o);
    } else {
        tile_row::<T, 1>(a, b, n, resume, o);
    }
}

/// A packed block of a's rows (see [`matmul_rows`]): per l, the rows' values and the mask of
/// the ones that count (neither zero nor subnormal).
type PackedRows<'a, T> = (&'a [[T; MM_MR]], &'a [u8]);

/// `R` rows of the product across all n columns, for one packed inner block (`b`: its rows of
/// b1): tiles of `MM_NR` columns, then of four, then one of the rest. `resume`: the output
/// holds the chains of the earlier blocks.
#[inline(always)]
fn tile_row<T: Elem, const R: usize>(a: PackedRows<T>, b: &[T], n: usize, resume: bool, o: &mut [T]) {
    let mut j0 = 0;
    while n - j0 >= MM_NR {
        tile::<T, R, MM_NR>(a, &b[j0..], n, resume, &mut o[j0..]);
        j0 += MM_NR;
    }
    if n - j0 >= 4 {
        tile::<T, R, 4>(a, &b[j0..], n, resume, &mut o[j0..]);
        j0 += 4;
    }
    // The last one to three columns in one tile (ht's 3 x 3 rotations: three tiles of one
    // column each walked the packed block again).
    match n - j0 {
        3 => tile::<T, R, 3>(a, &b[j0..], n, resume, &mut o[j0..]),
        2 => tile::<T, R, 2>(a, &b[j0..], n, resume, &mut o[j0..]),
        1 => tile::<T, R, 1>(a, &b[j0..], n, resume, &mut o[j0..]),
        _ => {}
    }
}

/// The `R x C` output tile whose first element is `o[0]` (rows n apart), over one packed inner
/// block whose first row of b starts at `b[0]`: accumulators in registers.
#[inline(always)]
fn tile<T: Elem, const R: usize, const C: usize>(
    (a, nonzero): PackedRows<T>,
    b: &[T],
    n: usize,
    resume: bool,
    o: &mut [T],
) {
    let mut acc = [[T::zero(); C]; R];
    if resume {
        for (r, acc) in acc.iter_mut().enumerate() {
            acc.copy_from_slice(&o[r * n..r * n + C]);
        }
    }
    let every = (1u8 << R) - 1;
    for ((x, &mask), brow) in a.iter().zip(nonzero).zip(b.chunks(n)) {
        if mask == 0 {
            continue;
        }
        let b: &[T; C] = brow.first_chunk().expect("C columns of b");
        for (r, acc) in acc.iter_mut().enumerate() {
            // A row whose a[i, l] does not count skips the term, as a one-row tile would.
            if mask == every || mask & (1 << r) != 0 {
                acc.iter_mut().zip(b).for_each(|(v, &y)| *v = x[r].mul_add(y, *v));
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        o[r * n..r * n + C].copy_from_slice(acc);
    }
}
simd::wider!(matmul_rows, matmul_rows_avx2, <T: Elem>(a1: &[T], strides: (usize, usize), b1: &[T], k: usize, n: usize, i0: usize, o: &mut [T]));

/// `out = op(a) op(b)` per batch. Zero entries of `op(a)` are skipped (as the reference BLAS
/// does), which makes products with one-hot adjoints (min/max along an axis) cheap; so are
/// subnormal ones (their terms are below 2^-1022 |b|, and each cost a microcode assist).
pub fn matmul<T: Elem>(a: &[T], ta: bool, b: &[T], tb: bool, p: &MatmulPlan, out: &mut [T], pool: &Arc<Pool>) {
    let (m, k, n) = (p.m, p.k, p.n);
    let one_batch = |bi: usize, out: &mut [T]| {
        let a0 = if p.a_batched { &a[bi * m * k..(bi + 1) * m * k] } else { &a[..m * k] };
        let b0 = if p.b_batched { &b[bi * k * n..(bi + 1) * k * n] } else { &b[..k * n] };
        // A transposed `a` is read in place (its rows are columns of a0: a copy of a large
        // adjoint cost a tenth of GMM's gradient); a transposed `b` is copied (the kernel runs
        // along b's rows).
        let a_strides = if ta { (1, m) } else { (k, 1) };
        let bt;
        let b1: &[T] = if tb {
            bt = transposed(b0, n, k, pool);
            &bt
        } else {
            b0
        };
        // Each element's chain is the same on any split, so the task size only trades
        // per-task overhead against load balance: at least four tasks per thread.
        let task_rows = (m.div_ceil(4 * rayon::current_num_threads()).next_multiple_of(MM_MR)).clamp(MM_MR, MM_ROWS);
        let rows = |blk: usize, o: &mut [T]| {
            simd::dispatch!(matmul_rows | matmul_rows_avx2(a0, a_strides, b1, k, n, blk * task_rows, o))
        };
        if m * k * n < MM_PAR_MIN || n == 0 {
            out.chunks_mut(task_rows * n.max(1)).enumerate().for_each(|(blk, o)| rows(blk, o));
        } else {
            out.par_chunks_mut(task_rows * n).enumerate().for_each(|(blk, o)| rows(blk, o));
        }
    };
    if m * n == 0 {
        return;
    }
    if p.batch > 1 && m * k * n <= TINY_PRODUCT {
        #[cfg(target_arch = "x86_64")]
        if tiny_avx512::takes(p, ta, tb)
            && let (Some(a), Some(b), Some(out)) = (simd::f64s(a), simd::f64s(b), simd::f64s_mut(out))
        {
            // SAFETY: `takes` checked that the CPU has AVX-512 and that the plan is one of its
            // shapes.
            unsafe { tiny_avx512::products(a, b, p, out) };
            return;
        }
        let b_strides = if tb { (1, k) } else { (n, 1) };
        return simd::dispatch!(tiny_products | tiny_products_avx2(a, ta, b, b_strides, p, out));
    }
    if p.batch > 1 && !p.a_batched && k > 0 && n > 0 {
        // One a for every batch: its rows are packed once per run of batches, not once per
        // product. The runs split over the threads (each packs a again) when the work is long.
        let a_strides = if ta { (1, m) } else { (k, 1) };
        let bt;
        let b: &[T] = if tb {
            bt = batches_transposed(b, p.batch, n, k, pool);
            &bt
        } else {
            b
        };
        let sparse = sparse_rows(a, a_strides, m, k);
        let work = sparse.as_ref().map_or(m * k, |s| s.entries.len()) * n * p.batch;
        let threads = if work < MM_PAR_MIN { 1 } else { rayon::current_num_threads() };
        let run = p.batch.div_ceil(threads);
        let batches = |(r, o): (usize, &mut [T])| {
            let b = &b[r * run * k * n..];
            match &sparse {
                Some(s) => simd::dispatch!(sparse_a_products | sparse_a_products_avx2(s, b, (k, n), o)),
                None => simd::dispatch!(shared_a_products | shared_a_products_avx2(a, a_strides, b, (m, k, n), o)),
            }
        };
        if threads == 1 {
            out.chunks_mut(run * m * n).enumerate().for_each(batches);
        } else {
            out.par_chunks_mut(run * m * n).enumerate().for_each(batches);
        }
        return;
    }
    // Small products in parallel by batch, when there is enough of them (a pool handoff per
    // batch of tiny products cost GMM d = 2 a third of its time in task switches).
    if p.batch > 1 && m * k * n < PAR_MIN * 4 && p.batch * m * k * n >= PAR_MIN {
        out.par_chunks_mut(m * n).enumerate().for_each(|(bi, o)| one_batch(bi, o));
    } else {
        out.chunks_mut(m * n).enumerate().for_each(|(bi, o)| one_batch(bi, o));
    }
}

/// Every batch's `op(a) b_i` for one `a` (`b` holds the batches' k x n row-major, `out` their m x n,
/// as many as `out` has room for), by the element chains of [`matmul_rows`]: a's rows are
/// packed a task of [`MM_ROWS`] at a time, each inner block once, and every batch's tiles run
/// against the packed block while it is in L1 (ht's Jacobian multiplies one weight matrix by a
/// tangent per coordinate of theta; packing it per product cost more than the products' own
/// multiply-adds). The same tiles as [`matmul_rows`], so the same bits.
#[inline(always)]
fn shared_a_products<T: Elem>(
    a1: &[T],
    strides: (usize, usize),
    b: &[T],
    (m, k, n): (usize, usize, usize),
    out: &mut [T],
) {
    // The packed tiles of a task's rows, one after another, MM_KC values of l apart.
    let mut packed = [[T::zero(); MM_MR]; (MM_ROWS / MM_MR + MM_MR) * MM_KC];
    let mut nonzero = [0u8; (MM_ROWS / MM_MR + MM_MR) * MM_KC];
    for i0 in (0..m).step_by(MM_ROWS) {
        let tiles = || row_tiles(MM_ROWS.min(m - i0)).enumerate().map(|(t, tile)| (t * MM_KC, tile));
        for l0 in (0..k).step_by(MM_KC) {
            let l1 = (l0 + MM_KC).min(k);
            for (at, (r0, r)) in tiles() {
                pack_rows(a1, strides, (i0 + r0, r), l0..l1, &mut packed[at..], &mut nonzero[at..]);
            }
            for (bi, o) in out.chunks_exact_mut(m * n).enumerate() {
                let b = &b[bi * k * n + l0 * n..];
                for (at, (r0, r)) in tiles() {
                    let blk = (&packed[at..at + l1 - l0], &nonzero[at..at + l1 - l0]);
                    tile_rows(blk, r, b, n, l0 > 0, &mut o[(i0 + r0) * n..]);
                }
            }
        }
    }
}
simd::wider!(shared_a_products, shared_a_products_avx2, <T: Elem>(a1: &[T], strides: (usize, usize), b: &[T], dims: (usize, usize, usize), out: &mut [T]));

/// The entries of a shared `a` that count (neither zero nor subnormal, or NaN: those whose
/// terms the chains of [`matmul_rows`] take), row by row in order of l.
struct SparseRows<T> {
    /// Row i's entries are `entries[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
    /// (l, a[i, l]).
    entries: Vec<(usize, T)>,
}

/// `a`'s entries that count (m x k, element (i, l) at `a1[i rs + l cs]`), when they are at most
/// a quarter of it (else `None`, and the packed tiles take the product). ht's skinning weights
/// hold 1.7 bones of 22 per vertex, and the tiles walked all 22 for every batch.
fn sparse_rows<T: Elem>(a1: &[T], (rs, cs): (usize, usize), m: usize, k: usize) -> Option<SparseRows<T>> {
    let most = m * k / 4;
    let mut rows = SparseRows { starts: Vec::with_capacity(m + 1), entries: Vec::new() };
    rows.starts.push(0);
    for i in 0..m {
        for l in 0..k {
            let x = a1[i * rs + l * cs];
            if x.abs() >= T::min_positive_value() || x.is_nan() {
                if rows.entries.len() == most {
                    return None;
                }
                rows.entries.push((l, x));
            }
        }
        rows.starts.push(rows.entries.len());
    }
    Some(rows)
}

/// Every batch's `a b_i` for an `a` given by its entries that count ([`sparse_rows`]; `b` and
/// `out` as in [`shared_a_products`]): each output row is the chain of fused multiply-adds over
/// the row's entries in order of l, from zero, which is the chain [`matmul_rows`] computes
/// with the other terms skipped: the same bits.
#[inline(always)]
fn sparse_a_products<T: Elem>(a: &SparseRows<T>, b: &[T], (k, n): (usize, usize), out: &mut [T]) {
    let m = a.starts.len() - 1;
    for (bi, o) in out.chunks_exact_mut(m * n).enumerate() {
        let b = &b[bi * k * n..(bi + 1) * k * n];
        for (row, o) in a.starts.windows(2).zip(o.chunks_exact_mut(n)) {
            o.fill(T::zero());
            for &(l, x) in &a.entries[row[0]..row[1]] {
                o.iter_mut().zip(&b[l * n..(l + 1) * n]).for_each(|(v, &y)| *v = x.mul_add(y, *v));
            }
        }
    }
}
simd::wider!(sparse_a_products, sparse_a_products_avx2, <T: Elem>(a: &SparseRows<T>, b: &[T], dims: (usize, usize), out: &mut [T]));

/// Products of at most this many multiply-adds, in batches, run by [`tiny_products`]: the
/// blocked kernel's setup per product (its packing, its split into tasks) cost ht's Jacobian
/// more than the arithmetic of its 544 per-vertex 4x4 by 4x1 products.
const TINY_PRODUCT: usize = 64;

/// Every batch's `op(a) op(b)` by the element chains of [`matmul_rows`] (from zero, a
/// multiply-add per `l` whose `a[i, l]` counts: neither zero nor subnormal, or NaN), written out
/// as plain loops with no packing or tasks: the same bits. `b_strides`: of b's rows and columns.
#[inline(always)]
fn tiny_products<T: Elem>(a: &[T], ta: bool, b: &[T], b_strides: (usize, usize), p: &MatmulPlan, out: &mut [T]) {
    // ht's shapes with their sizes known, so that the loops unroll and the chains overlap.
    match (p.m, p.k, p.n) {
        (4, 4, 1) => tiny_products_of::<T, 4, 4, 1>(a, ta, b, b_strides, p, out),
        (4, 4, 4) => tiny_products_of::<T, 4, 4, 4>(a, ta, b, b_strides, p, out),
        (3, 3, 3) => tiny_products_of::<T, 3, 3, 3>(a, ta, b, b_strides, p, out),
        _ => tiny_products_of::<T, 0, 0, 0>(a, ta, b, b_strides, p, out),
    }
}

/// [`tiny_products`] for `M x K` by `K x N` products, or any (all three 0: the plan's).
#[inline(always)]
fn tiny_products_of<T: Elem, const M: usize, const K: usize, const N: usize>(
    a: &[T],
    ta: bool,
    b: &[T],
    (brs, bcs): (usize, usize),
    p: &MatmulPlan,
    out: &mut [T],
) {
    let (m, k, n) = if M == 0 { (p.m, p.k, p.n) } else { (M, K, N) };
    let (ars, acs) = if ta { (1, m) } else { (k, 1) };
    for (bi, o) in out.chunks_exact_mut(m * n).enumerate().take(p.batch) {
        let a0 = if p.a_batched { &a[bi * m * k..(bi + 1) * m * k] } else { &a[..m * k] };
        let b0 = if p.b_batched { &b[bi * k * n..(bi + 1) * k * n] } else { &b[..k * n] };
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::zero();
                for l in 0..k {
                    let x = a0[i * ars + l * acs];
                    // A select, not a branch: which terms count follows the data (tangents
                    // that are zero on most vertices), and a branch on it mispredicts.
                    let with = x.mul_add(b0[l * brs + j * bcs], acc);
                    acc = if x.abs() >= T::min_positive_value() || x.is_nan() { with } else { acc };
                }
                o[i * n + j] = acc;
            }
        }
    }
}
simd::wider!(tiny_products, tiny_products_avx2, <T: Elem>(a: &[T], ta: bool, b: &[T], b_strides: (usize, usize), p: &MatmulPlan, out: &mut [T]));

/// Squared distance between two rows: two blocks of four running sums of fused multiply-adds
/// over the row (so the loop vectorises without reassociating anything the compiler may not;
/// fused, k-means' objective took 0.83x the time), added in the order of a vector reduction
/// (the blocks, then halves of four, then of two), then the tail. Same result on any thread
/// count and vector width.
#[inline(always)]
fn row_sq_dist<T: Elem>(x: &[T], y: &[T]) -> T {
    let (mut lo, mut hi) = ([T::zero(); 4], [T::zero(); 4]);
    let (xs, ys) = (x.chunks_exact(8), y.chunks_exact(8));
    let (xt, yt) = (xs.remainder(), ys.remainder());
    for (xc, yc) in xs.zip(ys) {
        for l in 0..4 {
            let (t, u) = (xc[l] - yc[l], xc[l + 4] - yc[l + 4]);
            lo[l] = t.mul_add(t, lo[l]);
            hi[l] = u.mul_add(u, hi[l]);
        }
    }
    let v = [lo[0] + hi[0], lo[1] + hi[1], lo[2] + hi[2], lo[3] + hi[3]];
    let mut s = (v[0] + v[2]) + (v[1] + v[3]);
    for (&p, &q) in xt.iter().zip(yt) {
        s = (p - q).mul_add(p - q, s);
    }
    s
}

/// `out[i * k + j] = |a_i - c_j|^2` for the n rows of `a` and the k rows of `c`, each of length
/// d, by direct differences; rows of the output in parallel.
pub fn sq_dist<T: Elem>(a: &[T], c: &[T], (n, k, d): (usize, usize, usize), out: &mut [T]) {
    if n == 0 || k == 0 {
        return;
    }
    let rows =
        |blk: usize, o: &mut [T]| simd::dispatch!(sq_dist_rows | sq_dist_rows_avx2(a, c, k, d, blk * SQ_DIST_ROWS, o));
    if n * k * d < PAR_MIN {
        rows(0, out);
    } else {
        out.par_chunks_mut(k * SQ_DIST_ROWS).enumerate().for_each(|(blk, o)| rows(blk, o));
    }
}

/// Rows of `a` per task of [`sq_dist`].
const SQ_DIST_ROWS: usize = 64;

/// Rows `i0..` of the squared distances into `o` (whole rows of k).
#[inline(always)]
fn sq_dist_rows<T: Elem>(a: &[T], c: &[T], k: usize, d: usize, i0: usize, o: &mut [T]) {
    for (ii, orow) in o.chunks_mut(k).enumerate() {
        let ai = &a[(i0 + ii) * d..(i0 + ii + 1) * d];
        for (j, x) in orow.iter_mut().enumerate() {
            *x = row_sq_dist(ai, &c[j * d..(j + 1) * d]);
        }
    }
}
simd::wider!(sq_dist_rows, sq_dist_rows_avx2, <T: Elem>(a: &[T], c: &[T], k: usize, d: usize, i0: usize, o: &mut [T]));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::broadcast_shapes;

    /// The specification of an output element: one fused multiply-add chain over l in order,
    /// from +0.0, skipping the terms whose a[i, l] is zero or subnormal.
    fn fused_chain(a: impl Fn(usize) -> f64, b: impl Fn(usize) -> f64, k: usize) -> f64 {
        (0..k).fold(0.0f64, |v, l| if a(l) != 0.0 && !a(l).is_subnormal() { a(l).mul_add(b(l), v) } else { v })
    }

    #[test]
    fn products_are_fused_chains_on_every_tile_block_thread_count_and_vector_width() {
        // 11 x 300 times 300 x 21: row tiles of four and of one, column tiles of eight, four
        // and one, three blocks of the inner dimension. Values that are not dyadic, so a fused
        // multiply-add and a product then a sum differ; zeros and subnormals of a meet
        // infinities of b (the terms are skipped, so no NaN), the smallest normal number does
        // not (its terms count).
        let (m, k, n) = (11, 300, 21);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        // Zeros of a, scattered and in whole columns l = 5 (mod 37); subnormals, scattered.
        let a: Vec<f64> = (0..m * k)
            .map(|i| match i {
                _ if i % 11 == 0 || (i % k) % 37 == 5 => 0.0,
                _ if i % 7 == 3 => -3e-310,
                _ if i % 7 == 4 => f64::MIN_POSITIVE,
                _ => next(),
            })
            .collect();
        let skipped = |x: f64| x == 0.0 || x.is_subnormal();
        let mut b: Vec<f64> = (0..k * n).map(|_| next() * 3.0).collect();
        // Infinities of b meet the zero columns of a (every row skips them), and, once per
        // column of b, an l where some rows of a are zero and others not: those rows stay
        // finite, the others are infinite (one infinity per output, so no NaN).
        for l in (5..k).step_by(37) {
            b[l * n..(l + 1) * n].fill(f64::INFINITY);
        }
        for j in 0..n {
            let mixed = (0..k).filter(|l| l % 37 != 5 && (0..m).any(|i| skipped(a[i * k + l]))).nth(j).unwrap();
            b[mixed * n + j] = f64::INFINITY;
        }
        let at: Vec<f64> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
        let bt: Vec<f64> = (0..n * k).map(|x| b[(x % k) * n + x / k]).collect();
        let (mut fused_differs, mut finite, mut infinite) = (false, 0, 0);
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (av, ashape) = if ta { (&at, [k, m]) } else { (&a, [m, k]) };
                let (bv, bshape) = if tb { (&bt, [n, k]) } else { (&b, [k, n]) };
                let p = matmul_plan(&ashape, ta, &bshape, tb).unwrap();
                let mut out = vec![f64::NAN; m * n];
                pool.install(|| matmul(av, ta, bv, tb, &p, &mut out, &Pool::new()));
                for i in 0..m {
                    for j in 0..n {
                        let want = fused_chain(|l| a[i * k + l], |l| b[l * n + j], k);
                        let unfused: f64 =
                            (0..k).filter(|&l| !skipped(a[i * k + l])).map(|l| a[i * k + l] * b[l * n + j]).sum();
                        fused_differs |= unfused != want;
                        let got = out[i * n + j];
                        assert_eq!(got.to_bits(), want.to_bits(), "t=({ta}, {tb}) [{i}, {j}]: {got} vs {want}");
                        finite += usize::from(want.is_finite());
                        infinite += usize::from(want.is_infinite());
                    }
                }
            }
        }
        assert!(fused_differs, "the data must tell a fused chain from a product and a sum");
        assert!(finite >= 8 * n && infinite >= 8 * n, "{finite} finite, {infinite} infinite outputs");
        // The baseline (SSE2, libm's fma) copy of the kernel gives the same bits as the
        // dispatched one.
        let mut base = vec![f64::NAN; m * n];
        matmul_rows(&a, (k, 1), &b, k, n, 0, &mut base);
        let want: Vec<u64> =
            (0..m * n).map(|x| fused_chain(|l| a[(x / n) * k + l], |l| b[l * n + x % n], k).to_bits()).collect();
        assert_eq!(base.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
        // Chains of -0.0 products and skipped ones are +0.0.
        let p = matmul_plan(&[4, 2], false, &[2, 8], false).unwrap();
        let mut out = vec![1.0; 32];
        matmul(&[-1.0, 0.0, 0.0, 0.0, -1.0, -1.0, 2.0, 0.0], false, &[0.0; 16], false, &p, &mut out, &Pool::new());
        assert!(out.iter().all(|&v| f64::to_bits(v) == 0), "{out:?}");
    }

    #[test]
    fn broadcast_and_sum_to_are_adjoint_on_every_layout() {
        let cases: [(&[usize], &[usize]); 7] = [
            (&[3], &[4, 3]),
            (&[4, 1], &[4, 3]),
            (&[1], &[2, 3]),
            (&[2, 1, 3], &[2, 5, 3]),
            (&[1, 5, 1], &[2, 5, 3]),
            (&[2, 1, 3, 1], &[2, 4, 3, 2]),
            (&[2, 3], &[2, 3]),
        ];
        for (small, big) in cases {
            let (ns, nb) = (small.iter().product::<usize>(), big.iter().product::<usize>());
            let x: Vec<f64> = (0..ns).map(|i| i as f64 * 0.5 - 1.0).collect();
            let g: Vec<f64> = (0..nb).map(|i| ((i * 7) % 5) as f64 - 2.0).collect();
            let mut bx = vec![0.0; nb];
            broadcast_to(&x, small, big, &mut bx).unwrap();
            let mut sg = vec![0.0; ns];
            sum_to(&g, big, small, &mut sg).unwrap();
            // <broadcast(x), g> == <x, sum_to(g)> and the general path agrees.
            let lhs: f64 = bx.iter().zip(&g).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&sg).map(|(a, b)| a * b).sum();
            assert_eq!(lhs, rhs, "{small:?} -> {big:?}");
            let rs = runs("t", small, big).unwrap();
            for (i, v) in bx.iter().enumerate() {
                assert_eq!(*v, x[small_offset(&rs, i)], "{small:?} -> {big:?} at {i}");
            }
        }
        assert!(broadcast_to(&[1.0, 2.0], &[2], &[3], &mut [0.0; 3]).is_err());
        assert_eq!(broadcast_shapes("t", &[4, 1], &[3]).unwrap(), vec![4, 3]);
    }

    #[test]
    fn counted_small_offsets_equal_the_divided_ones() {
        // Reduced runs first, last and in the middle; steps below, at and above a run's length.
        let cases: [(&[usize], &[usize]); 5] = [
            (&[1, 7, 4], &[5, 7, 4]),
            (&[6, 1, 4], &[6, 3, 4]),
            (&[4], &[3, 5, 4]),
            (&[2, 1, 3, 1], &[2, 4, 3, 2]),
            (&[5, 3], &[5, 3]),
        ];
        for (small, big) in cases {
            let rs = runs("t", small, big).unwrap();
            let n: usize = big.iter().product();
            for (start, step) in [(0, 1), (0, 4), (3, 4), (7, 5), (1, 13), (0, 24)] {
                let mut offs = SmallOffsets::at(&rs, start);
                for i in (start..n).step_by(step) {
                    assert_eq!(
                        offs.off,
                        small_offset(&rs, i),
                        "{small:?} -> {big:?}, start {start} step {step}, at {i}"
                    );
                    offs.advance(step);
                }
            }
        }
        assert!(broadcast_shapes("t", &[4, 2], &[3]).is_err());
    }

    #[test]
    fn cyclic_squared_differences_equal_the_general_ones_bit_for_bit() {
        // Partners cycling through K rows (GMM's layout, and no broadcast at all), with rows of
        // each fixed length and one longer, below and above the parallel threshold; then layouts
        // that do not cycle, which take the general path.
        let mut seen = [0, 0];
        for n in [7, 9000, 40_000] {
            for d in [1, 2, 3, 4, 5, 11] {
                let cases: [(Vec<usize>, Vec<usize>); 4] = [
                    (vec![1, 3, d], vec![n, 3, d]),
                    (vec![3, d], vec![n, 3, d]),
                    (vec![n, 3, d], vec![n, 3, d]),
                    (vec![n, 1, d], vec![n, 3, d]),
                ];
                for (small, big) in cases {
                    let rs = runs("t", &small, &big).unwrap();
                    let (sl, bl): (usize, usize) = (small.iter().product(), big.iter().product());
                    let a: Vec<f64> = (0..bl).map(|i| ((i * 29) % 53) as f64 * 0.37 - 9.0).collect();
                    let b: Vec<f64> = (0..sl).map(|i| ((i * 13) % 17) as f64 * 0.71 - 4.0).collect();
                    let g: Vec<f64> = (0..bl / d).map(|i| ((i * 7) % 11) as f64 * 0.5 - 2.0).collect();
                    seen[usize::from(cyclic_rows(&rs, d, sl).is_some())] += 1;
                    let (mut fast, mut general) = (vec![0.0; bl / d], vec![0.0; bl / d]);
                    sum_sq_diff(&a, &b, d, &rs, &mut fast);
                    sum_sq_diff_general(&a, &b, d, &rs, &mut general);
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&fast), bits(&general), "{small:?} -> {big:?}");
                    let (mut fast, mut general) = (vec![0.0; bl], vec![0.0; bl]);
                    sum_sq_diff_adjoint(&a, &b, &g, d, &rs, &mut fast);
                    sum_sq_diff_adjoint_general(&a, &b, &g, d, &rs, &mut general);
                    assert_eq!(bits(&fast), bits(&general), "adjoint {small:?} -> {big:?}");
                    // And by definition, at a few rows.
                    let mut sums = vec![0.0; bl / d];
                    sum_sq_diff(&a, &b, d, &rs, &mut sums);
                    for r in [0, 1, bl / d - 1] {
                        let off = small_offset(&rs, r * d);
                        let want: f64 = (0..d).fold(0.0, |s, l| s + (a[r * d + l] - b[off + l]).powi(2));
                        assert!((sums[r] - want).abs() <= 1e-12 * want.max(1.0), "{small:?} -> {big:?} row {r}");
                    }
                }
            }
        }
        assert!(seen[0] > 0 && seen[1] > 0, "both paths ran: {seen:?}");
    }

    #[test]
    fn long_sums_use_fixed_blocks() {
        let r = 3 * R_BLOCK + 17;
        let x: Vec<f64> = (0..r * 2).map(|i| (i % 13) as f64).collect();
        let mut out = vec![0.0; 2];
        sum_to(&x, &[r, 2], &[1, 2], &mut out).unwrap();
        let want0: f64 = (0..r).map(|i| x[2 * i]).sum();
        assert_eq!(out[0], want0);
    }

    #[test]
    fn matmul_matches_the_naive_product_with_transposes_and_batches() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (bt, m, k, n) = (2, 5, 3, 4);
            let a: Vec<f64> = (0..bt * m * k).map(|i| ((i * 5) % 7) as f64 - 3.0).collect();
            let b: Vec<f64> = (0..bt * k * n).map(|i| ((i * 3) % 11) as f64 * 0.5).collect();
            let ashape = if ta { [bt, k, m] } else { [bt, m, k] };
            let bshape = if tb { [bt, n, k] } else { [bt, k, n] };
            let p = matmul_plan(&ashape, ta, &bshape, tb).unwrap();
            assert_eq!(p.out_shape, vec![bt, m, n]);
            let mut out = vec![0.0; bt * m * n];
            matmul(&a, ta, &b, tb, &p, &mut out, &Pool::new());
            for s in 0..bt {
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|l| {
                                let av = if ta { a[s * m * k + l * m + i] } else { a[s * m * k + i * k + l] };
                                let bv = if tb { b[s * k * n + j * k + l] } else { b[s * k * n + l * n + j] };
                                av * bv
                            })
                            .sum();
                        assert_eq!(out[s * m * n + i * n + j], want);
                    }
                }
            }
        }
        assert!(matmul_plan(&[2, 3], false, &[4, 2], false).is_err());
        assert_eq!(matmul_plan(&[5, 3], false, &[2, 3, 4], false).unwrap().out_shape, vec![2, 5, 4]);
    }

    /// Batches of tiny products (`tiny_products`, and its AVX-512 copies of ht's 4 x 4 by 4 x 1
    /// and 4 x 4 by 4 x 4 shapes) give the blocked kernel's bits: each batch against the same
    /// product alone (one batch, the blocked path) and against the fused chain, with
    /// transposes, a shared operand, an odd batch count, zeros, subnormals and NaNs in a and
    /// infinities in b.
    #[test]
    fn tiny_batched_products_equal_the_blocked_kernel_bit_for_bit() {
        let awkward = |i: usize| match i % 9 {
            0 => 0.0,
            1 => -2e-310,
            2 if i.is_multiple_of(5) => f64::NAN,
            3 if i.is_multiple_of(4) => -0.0,
            _ => ((i * 37) % 101) as f64 / 7.3 - 6.1,
        };
        let mut vector_copies = 0;
        for (ta, tb, m, k, n, a_batched, b_batched) in [
            (false, false, 4, 4, 1, true, true),
            (false, true, 4, 4, 1, true, false),
            (false, false, 4, 4, 1, false, true),
            (false, true, 3, 3, 3, true, true),
            (true, false, 2, 5, 4, true, true),
            (false, false, 4, 4, 4, false, true),
            (false, false, 4, 4, 4, true, true),
            (false, false, 4, 4, 4, true, false),
            (true, false, 4, 4, 4, true, true),
            (false, true, 4, 4, 4, true, true),
        ] {
            let bt = 7;
            let a: Vec<f64> = (0..if a_batched { bt } else { 1 } * m * k).map(awkward).collect();
            // Infinities of b: a zero or subnormal a[i, l] skips its term, so they give no NaN.
            let b: Vec<f64> = (0..if b_batched { bt } else { 1 } * k * n)
                .map(|i| if i % 13 == 4 { f64::INFINITY } else { awkward(i + 3) * 0.5 + 0.25 })
                .collect();
            let ashape: Vec<usize> = if ta { vec![k, m] } else { vec![m, k] };
            let bshape: Vec<usize> = if tb { vec![n, k] } else { vec![k, n] };
            let batched = |s: &[usize]| [&[bt][..], s].concat();
            let shape = |batch: bool, s: &[usize]| if batch { batched(s) } else { s.to_vec() };
            let p = matmul_plan(&shape(a_batched, &ashape), ta, &shape(b_batched, &bshape), tb).unwrap();
            assert!(p.batch == bt && m * k * n <= TINY_PRODUCT);
            #[cfg(target_arch = "x86_64")]
            if tiny_avx512::takes(&p, ta, tb) {
                vector_copies += 1;
            }
            let mut out = vec![0.0; bt * m * n];
            matmul(&a, ta, &b, tb, &p, &mut out, &Pool::new());
            let one = matmul_plan(&ashape, ta, &bshape, tb).unwrap();
            for s in 0..bt {
                let a0 = if a_batched { &a[s * m * k..(s + 1) * m * k] } else { &a[..] };
                let b0 = if b_batched { &b[s * k * n..(s + 1) * k * n] } else { &b[..] };
                let mut alone = vec![0.0; m * n];
                matmul(a0, ta, b0, tb, &one, &mut alone, &Pool::new());
                for i in 0..m {
                    for j in 0..n {
                        let av = |l: usize| if ta { a0[l * m + i] } else { a0[i * k + l] };
                        let bv = |l: usize| if tb { b0[j * k + l] } else { b0[l * n + j] };
                        let got = out[s * m * n + i * n + j];
                        assert_eq!(got.to_bits(), alone[i * n + j].to_bits(), "batch {s} ({i}, {j})");
                        let want = fused_chain(av, bv, k);
                        assert!(
                            got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                            "batch {s} ({i}, {j})"
                        );
                    }
                }
            }
        }
        if simd::avx512() {
            assert_eq!(vector_copies, 6, "the 4 x 4 by 4 x 1 and 4 x 4 by 4 x 4 cases without transposes of a");
        } else {
            let why = "this CPU has no AVX-512, so the tiny products' AVX-512 copies were not compared";
            adgauge_testkit::skip("avx512", why, "a CPU with AVX-512 F, DQ and VL");
        }
    }

    /// Batches sharing their left operand (`shared_a_products`, which packs a once for many
    /// batches) give each product's bits alone: row tasks with a remainder of single rows,
    /// two inner blocks, column tiles of eight, four and one, a transposed a or b, zeros,
    /// subnormals and NaNs in a and infinities in b, on one thread and split over two.
    #[test]
    fn batches_sharing_a_equal_each_product_alone_bit_for_bit() {
        let awkward = |i: usize| match i % 11 {
            0 | 5 => 0.0,
            1 => -2e-310,
            2 if i.is_multiple_of(7) => f64::NAN,
            _ => ((i * 53) % 97) as f64 / 6.9 - 7.0,
        };
        let (bt, m, k, n) = (6, 70, MM_KC + 2, 15);
        assert!(bt * m * k * n >= MM_PAR_MIN && !(m % MM_ROWS).is_multiple_of(MM_MR));
        for (ta, tb) in [(false, false), (true, false), (false, true)] {
            let a: Vec<f64> = (0..m * k).map(awkward).collect();
            let b: Vec<f64> =
                (0..bt * k * n).map(|i| if i % 17 == 3 { f64::INFINITY } else { awkward(i + 4) * 0.5 - 0.2 }).collect();
            shared_a_batches_equal_each_product_alone(&a, ta, &b, tb, (bt, m, k, n));
        }
    }

    /// Batches of `op(b)` (bt of them) against one `op(a)`, on one thread and on two: every
    /// batch's bits equal its product alone and the fused-chain specification. Returns the
    /// batched result (of the last thread count).
    fn shared_a_batches_equal_each_product_alone(
        a: &[f64],
        ta: bool,
        b: &[f64],
        tb: bool,
        (bt, m, k, n): (usize, usize, usize, usize),
    ) -> Vec<f64> {
        let ashape = if ta { [k, m] } else { [m, k] };
        let bshape = if tb { [n, k] } else { [k, n] };
        let p = matmul_plan(&ashape, ta, &[&[bt][..], &bshape].concat(), tb).unwrap();
        assert!(!p.a_batched && p.b_batched && p.batch == bt);
        let one = matmul_plan(&ashape, ta, &bshape, tb).unwrap();
        let mut out = vec![0.0; bt * m * n];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| matmul(a, ta, b, tb, &p, &mut out, &Pool::new()));
            for s in 0..bt {
                let b0 = &b[s * k * n..(s + 1) * k * n];
                let mut alone = vec![0.0; m * n];
                matmul(a, ta, b0, tb, &one, &mut alone, &Pool::new());
                for i in 0..m {
                    for j in 0..n {
                        let got = out[s * m * n + i * n + j];
                        let at = (threads, ta, tb, s, i, j);
                        assert_eq!(got.to_bits(), alone[i * n + j].to_bits(), "{at:?}");
                        let av = |l: usize| if ta { a[l * m + i] } else { a[i * k + l] };
                        let bv = |l: usize| if tb { b0[j * k + l] } else { b0[l * n + j] };
                        let want = fused_chain(av, bv, k);
                        assert!(got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(), "{at:?}");
                    }
                }
            }
        }
        out
    }

    /// Batches sharing a sparse left operand (`sparse_a_products`: ht's skinning weights) give
    /// each product's bits alone: a whose entries that count are a quarter or fewer, with
    /// subnormals, signed zeros and a NaN among them, infinities in b (no NaN where a's term is
    /// skipped), rows with no entry at all (an output of +0), plain and transposed, on one
    /// thread and split over two; one entry more and the packed tiles take the product.
    #[test]
    fn batches_sharing_a_sparse_a_equal_each_product_alone_bit_for_bit() {
        let (bt, m, k, n) = (9, 37, 22, 16);
        // Per row at most four entries that count (row i: l = i, 3i + 1, 5i + 2 mod k, and a
        // NaN in row 7), row 11 none; everything else zero, -0 or subnormal.
        let value = |i: usize, l: usize| match () {
            _ if i == 11 => 0.0,
            _ if i == 7 && l == 9 => f64::NAN,
            _ if l == i % k || l == (3 * i + 1) % k || l == (5 * i + 2) % k => {
                ((i * 31 + l * 7) % 23) as f64 / 3.7 - 3.0
            }
            _ if (i + l).is_multiple_of(5) => -2e-310,
            _ if (i + l) % 5 == 1 => -0.0,
            _ => 0.0,
        };
        let b: Vec<f64> = (0..bt * k * n)
            .map(|x| if x % 19 == 6 { f64::INFINITY } else { ((x * 41) % 89) as f64 / 9.1 - 4.3 })
            .collect();
        for ta in [false, true] {
            let a: Vec<f64> = (0..m * k).map(|x| if ta { value(x % m, x / m) } else { value(x / k, x % k) }).collect();
            let strides = if ta { (1, m) } else { (k, 1) };
            let rows = sparse_rows(&a, strides, m, k).expect("a quarter or fewer of a's entries count");
            assert_eq!(rows.starts[12] - rows.starts[11], 0);
            // Row 11 has no entry that counts: +0 in every batch.
            let out = shared_a_batches_equal_each_product_alone(&a, ta, &b, false, (bt, m, k, n));
            for s in 0..bt {
                for j in 0..n {
                    assert_eq!(out[s * m * n + 11 * n + j].to_bits(), 0.0f64.to_bits(), "{:?}", (ta, s, j));
                }
            }
        }
        // The threshold: m k / 4 entries that count (rounded down) are sparse, one more is not.
        let counting = |count: usize| -> Vec<f64> { (0..m * k).map(|x| if x < count { 1.5 } else { 0.0 }).collect() };
        assert!(sparse_rows(&counting(m * k / 4), (k, 1), m, k).is_some());
        assert!(sparse_rows(&counting(m * k / 4 + 1), (k, 1), m, k).is_none());
    }

    #[test]
    fn squared_distances_are_the_same_on_any_thread_count_and_vector_width() {
        // d = 35: four blocks of eight and a tail of three; 130 points, two tasks.
        let (n, k, d) = (130, 5, 35);
        let a: Vec<f64> = (0..n * d).map(|i| ((i * 7919) % 1009) as f64 / 97.0 - 5.0).collect();
        let c: Vec<f64> = (0..k * d).map(|i| ((i * 104_729) % 613) as f64 / 61.0 - 5.0).collect();
        let mut runs = Vec::new();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut out = vec![f64::NAN; n * k];
            pool.install(|| sq_dist(&a, &c, (n, k, d), &mut out));
            runs.push(out);
        }
        // The baseline copy (SSE2, libm's fma).
        let mut base = vec![f64::NAN; n * k];
        sq_dist_rows(&a, &c, k, d, 0, &mut base);
        runs.push(base);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&runs[0]), bits(&runs[1]));
        assert_eq!(bits(&runs[0]), bits(&runs[2]));
        for i in 0..n {
            for j in 0..k {
                let want: f64 = (0..d).map(|l| (a[i * d + l] - c[j * d + l]).powi(2)).sum();
                let got = runs[0][i * k + j];
                assert!((got - want).abs() <= 1e-13 * want, "[{i}, {j}]: {got} vs {want}");
            }
        }
    }

    #[test]
    fn arg_reduce_axis_takes_the_first_of_ties() {
        // shape [2, 3]: along axis 1.
        let x = [1.0, 3.0, 3.0, 2.0, 0.5, 0.5];
        let (mut v, mut p) = (vec![0.0; 2], vec![0i64; 2]);
        arg_reduce_axis(&x, (2, 3, 1), Extremum::Max, &mut v, &mut p);
        assert_eq!((v, p), (vec![3.0, 2.0], vec![1, 3]));
        let (mut v, mut p) = (vec![0.0; 3], vec![0i64; 3]);
        arg_reduce_axis(&x, (1, 2, 3), Extremum::Min, &mut v, &mut p);
        assert_eq!((v, p), (vec![1.0, 0.5, 0.5], vec![0, 4, 5]));
    }
}

/// `log(sum(exp(x)))` along the middle axis of the view `(o, r, q)` (`out`: o q values): the
/// maximum of each line as [`arg_reduce_axis`] finds it, then the line's exponentials (vmath's
/// exp) summed in order, as the composed form does (`DenseOps::logsumexp_axis`: broadcast
/// subtraction, exp, sum along the axis). Contiguous lines (q = 1) are exponentiated a block
/// at a time in vmath's vector loop (one by one, vmath's exp is slower than libm's; GMM's
/// lines are only K long).
pub fn logsumexp_axis<T: Elem>(x: &[T], (o, r, q): (usize, usize, usize), out: &mut [T]) {
    let mut pos = vec![0i64; o * q];
    arg_reduce_axis(x, (o, r, q), Extremum::Max, out, &mut pos);
    if q == 1 && r > 0 {
        let lines = (LSE_BLOCK / r).max(1);
        let mut e = vec![T::zero(); lines * r];
        for a0 in (0..o).step_by(lines) {
            let a1 = (a0 + lines).min(o);
            let block = &mut e[..(a1 - a0) * r];
            for (i, v) in block.iter_mut().enumerate() {
                *v = x[a0 * r + i] - out[a0 + i / r];
            }
            vmath::map_exp_in_place(block);
            for (a, line) in (a0..a1).zip(block.chunks(r)) {
                let s = line.iter().fold(T::zero(), |s, &v| s + v);
                out[a] = out[a] + vmath::ln(s);
            }
        }
        return;
    }
    simd::dispatch!(logsumexp_strided | logsumexp_strided_avx2(x, (o, r, q), out))
}

/// [`logsumexp_axis`] on lines whose elements are q apart (`out` holds each line's maximum), in
/// a copy compiled with FMA where the CPU has it: vmath's exp is fused multiply-adds.
#[inline(always)]
fn logsumexp_strided<T: Elem>(x: &[T], (o, r, q): (usize, usize, usize), out: &mut [T]) {
    for a in 0..o {
        for c in 0..q {
            let m = out[a * q + c];
            let s = (0..r).fold(T::zero(), |s, j| s + vmath::exp(x[(a * r + j) * q + c] - m));
            out[a * q + c] = m + vmath::ln(s);
        }
    }
}
simd::wider!(logsumexp_strided, logsumexp_strided_avx2, <T: Elem>(x: &[T], view: (usize, usize, usize), out: &mut [T]));

/// Elements exponentiated at once by [`logsumexp_axis`].
const LSE_BLOCK: usize = 1024;

/// The adjoint of x for `y = logsumexp_axis(x)` over the view `(o, r, q)`: `g exp(x - y)`, with
/// y and g one value per line (the composed form's order).
pub fn logsumexp_adjoint<T: Elem>(x: &[T], y: &[T], g: &[T], view: (usize, usize, usize), out: &mut [T]) {
    simd::dispatch!(logsumexp_adjoint_lines | logsumexp_adjoint_avx2(x, y, g, view, out))
}

#[inline(always)]
fn logsumexp_adjoint_lines<T: Elem>(x: &[T], y: &[T], g: &[T], (o, r, q): (usize, usize, usize), out: &mut [T]) {
    if q == 1 {
        // Contiguous lines (a softmax along the last axis): the vector loop runs along them.
        for a in 0..o {
            let (ya, ga) = (y[a], g[a]);
            for (oj, &xj) in out[a * r..(a + 1) * r].iter_mut().zip(&x[a * r..(a + 1) * r]) {
                *oj = ga * vmath::exp(xj - ya);
            }
        }
        return;
    }
    for a in 0..o {
        for j in 0..r {
            let base = (a * r + j) * q;
            let (xs, os) = (&x[base..base + q], &mut out[base..base + q]);
            let (ys, gs) = (&y[a * q..(a + 1) * q], &g[a * q..(a + 1) * q]);
            for c in 0..q {
                os[c] = gs[c] * vmath::exp(xs[c] - ys[c]);
            }
        }
    }
}
simd::wider!(logsumexp_adjoint_lines, logsumexp_adjoint_avx2, <T: Elem>(x: &[T], y: &[T], g: &[T], view: (usize, usize, usize), out: &mut [T]));

/// `out[r] = sum over l of (a[r d + l] - b[o(r) + l])^2`, with `o(r)` the offset in `b` of row
/// r's partner (b broadcast to a: `runs`), in order along each row (the composed form's:
/// squares summed by the q = 1 fold of `sum_to`).
pub fn sum_sq_diff<T: Elem>(a: &[T], b: &[T], d: usize, runs: &[Run], out: &mut [T]) {
    if let Some(k) = cyclic_rows(runs, d, b.len()) {
        return match d {
            1 => sum_sq_diff_cyclic::<T, 1>(a, b, k, out),
            2 => sum_sq_diff_cyclic::<T, 2>(a, b, k, out),
            3 => sum_sq_diff_cyclic::<T, 3>(a, b, k, out),
            4 => sum_sq_diff_cyclic::<T, 4>(a, b, k, out),
            _ => sum_sq_diff_general(a, b, d, runs, out),
        };
    }
    sum_sq_diff_general(a, b, d, runs, out)
}

/// Where the small tensor is `k` rows of `d` repeated along the big one (GMM's `[1, K, d]`
/// against `[n, K, d]`, or no broadcast at all), row r's partner is row `r % k`: `Some(k)`.
fn cyclic_rows(runs: &[Run], d: usize, small_len: usize) -> Option<usize> {
    let (last, outer) = runs.split_last()?;
    let fits = !last.reduced && last.len == small_len && d > 0 && small_len.is_multiple_of(d) && small_len > 0;
    (fits && outer.iter().all(|r| r.reduced)).then_some(small_len / d)
}

/// Runs `f(r, j)` for rows `first..first + count` with `j = r % k`, counted along.
#[inline(always)]
fn cyclic(first: usize, count: usize, k: usize, mut f: impl FnMut(usize, usize)) {
    let mut j = first % k;
    for r in first..first + count {
        f(r, j);
        j += 1;
        if j == k {
            j = 0;
        }
    }
}

/// [`sum_sq_diff`] for rows of a fixed length `D` whose partners cycle through `k` rows: the
/// same sum in the same order, without the general offsets' odometer per row (GMM d = 2's
/// squared differences spent most of their time there).
fn sum_sq_diff_cyclic<T: Elem, const D: usize>(a: &[T], b: &[T], k: usize, out: &mut [T]) {
    let rows = |first: usize, out: &mut [T]| {
        cyclic(first, out.len(), k, |r, j| {
            let (ar, br): (&[T; D], &[T; D]) = (
                a[r * D..(r + 1) * D].try_into().expect("D values"),
                b[j * D..(j + 1) * D].try_into().expect("D values"),
            );
            let mut s = T::zero();
            for l in 0..D {
                let t = ar[l] - br[l];
                s = s + t * t;
            }
            out[r - first] = s;
        })
    };
    if out.len() * D < PAR_MIN {
        rows(0, out);
    } else {
        let per_task = PAR_MIN / D;
        out.par_chunks_mut(per_task).enumerate().for_each(|(t, o)| rows(t * per_task, o));
    }
}

fn sum_sq_diff_general<T: Elem>(a: &[T], b: &[T], d: usize, runs: &[Run], out: &mut [T]) {
    // Rows first..first + out.len(), the small tensor's offsets counted along.
    let rows = |first: usize, out: &mut [T]| {
        let mut offs = SmallOffsets::at(runs, first * d);
        for (r, o) in (first..).zip(out.iter_mut()) {
            let (ar, br) = (&a[r * d..(r + 1) * d], &b[offs.off..offs.off + d]);
            *o = ar.iter().zip(br).fold(T::zero(), |s, (&x, &y)| {
                let t = x - y;
                s + t * t
            });
            offs.advance(d);
        }
    };
    if out.len() * d < PAR_MIN {
        rows(0, out);
    } else {
        let per_task = (PAR_MIN / d.max(1)).max(1);
        out.par_chunks_mut(per_task).enumerate().for_each(|(t, o)| rows(t * per_task, o));
    }
}

/// `out[r d + l] = (g[r] * 2) * (a[r d + l] - b[o(r) + l])`: the adjoint of a for
/// [`sum_sq_diff`].
pub fn sum_sq_diff_adjoint<T: Elem>(a: &[T], b: &[T], g: &[T], d: usize, runs: &[Run], out: &mut [T]) {
    if let Some(k) = cyclic_rows(runs, d, b.len()) {
        return match d {
            1 => sum_sq_diff_adjoint_cyclic::<T, 1>(a, b, g, k, out),
            2 => sum_sq_diff_adjoint_cyclic::<T, 2>(a, b, g, k, out),
            3 => sum_sq_diff_adjoint_cyclic::<T, 3>(a, b, g, k, out),
            4 => sum_sq_diff_adjoint_cyclic::<T, 4>(a, b, g, k, out),
            _ => sum_sq_diff_adjoint_general(a, b, g, d, runs, out),
        };
    }
    sum_sq_diff_adjoint_general(a, b, g, d, runs, out)
}

/// [`sum_sq_diff_adjoint`] for the cyclic partners of [`sum_sq_diff_cyclic`].
fn sum_sq_diff_adjoint_cyclic<T: Elem, const D: usize>(a: &[T], b: &[T], g: &[T], k: usize, out: &mut [T]) {
    let two = T::of_f64(2.0);
    let rows = |first: usize, out: &mut [T]| {
        cyclic(first, out.len() / D, k, |r, j| {
            let (ar, br, gr) = (&a[r * D..(r + 1) * D], &b[j * D..(j + 1) * D], g[r] * two);
            let o = &mut out[(r - first) * D..(r - first + 1) * D];
            for l in 0..D {
                o[l] = gr * (ar[l] - br[l]);
            }
        })
    };
    if out.len() < PAR_MIN {
        rows(0, out);
    } else {
        let per_task = PAR_MIN / D;
        out.par_chunks_mut(per_task * D).enumerate().for_each(|(t, o)| rows(t * per_task, o));
    }
}

fn sum_sq_diff_adjoint_general<T: Elem>(a: &[T], b: &[T], g: &[T], d: usize, runs: &[Run], out: &mut [T]) {
    let two = T::of_f64(2.0);
    // Rows first.. of `out` (whole rows of d), the small tensor's offsets counted along.
    let rows = |first: usize, out: &mut [T]| {
        let mut offs = SmallOffsets::at(runs, first * d);
        for (r, o) in (first..).zip(out.chunks_mut(d.max(1))) {
            let (ar, br, gr) = (&a[r * d..(r + 1) * d], &b[offs.off..offs.off + d], g[r] * two);
            for ((o, &x), &y) in o.iter_mut().zip(ar).zip(br) {
                *o = gr * (x - y);
            }
            offs.advance(d);
        }
    };
    if out.len() < PAR_MIN || d == 0 {
        rows(0, out);
    } else {
        let per_task = (PAR_MIN / d).max(1);
        out.par_chunks_mut(per_task * d).enumerate().for_each(|(t, o)| rows(t * per_task, o));
    }
}

/// The CPU device's dense ops (called from `impl DenseOps for Cpu`).
pub(super) mod device {
    use super::super::{Cpu, CpuElem, CpuIndex, CpuTensor};
    use super::*;
    use crate::DType;
    use crate::TensorMeta;

    fn dispatch<R>(dt: DType, f32f: impl FnOnce() -> R, f64f: impl FnOnce() -> R) -> R {
        match dt {
            DType::F32 => f32f(),
            DType::F64 => f64f(),
        }
    }

    fn broadcast_t<T: CpuElem>(c: &Cpu, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        let mut out = c.pool().take::<T>(shape.iter().product());
        broadcast_to(x.slice::<T>()?, &x.shape, shape, &mut out)?;
        Ok(c.wrap(out, shape.to_vec()))
    }

    fn sum_to_t<T: CpuElem>(c: &Cpu, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        let mut out = c.pool().take::<T>(shape.iter().product());
        sum_to(x.slice::<T>()?, &x.shape, shape, &mut out)?;
        Ok(c.wrap(out, shape.to_vec()))
    }

    fn matmul_t<T: CpuElem>(c: &Cpu, a: &CpuTensor, ta: bool, b: &CpuTensor, tb: bool) -> Result<CpuTensor> {
        let p = matmul_plan(&a.shape, ta, &b.shape, tb)?;
        let mut out = c.pool().take::<T>(p.out_shape.iter().product());
        matmul(a.slice::<T>()?, ta, b.slice::<T>()?, tb, &p, &mut out, c.pool());
        Ok(c.wrap(out, p.out_shape))
    }

    fn sq_dist_t<T: CpuElem>(c: &Cpu, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let (n, k, d) = crate::shape::sq_dist_shape(&a.shape, &b.shape)?;
        let mut out = c.pool().take::<T>(n * k);
        sq_dist(a.slice::<T>()?, b.slice::<T>()?, (n, k, d), &mut out);
        Ok(c.wrap(out, vec![n, k]))
    }

    fn arg_reduce_t<T: CpuElem>(c: &Cpu, ext: Extremum, x: &CpuTensor, axis: usize) -> Result<(CpuTensor, CpuIndex)> {
        let view = axis_view("arg_reduce_axis", &x.shape, axis)?;
        if view.1 == 0 {
            return Err(OpError::Shape { op: "arg_reduce_axis", detail: format!("empty axis {axis}") });
        }
        let mut shape = x.shape.clone();
        shape[axis] = 1;
        let n = view.0 * view.2;
        let (mut vals, mut pos) = (c.pool().take::<T>(n), c.pool().take::<i64>(n));
        arg_reduce_axis(x.slice::<T>()?, view, ext, &mut vals, &mut pos);
        Ok((c.wrap(vals, shape), c.wrap_index(pos)))
    }

    fn logsumexp_t<T: CpuElem>(c: &Cpu, x: &CpuTensor, axis: usize) -> Result<CpuTensor> {
        let view = axis_view("logsumexp_axis", &x.shape, axis)?;
        if view.1 == 0 {
            return Err(OpError::Shape { op: "logsumexp_axis", detail: format!("empty axis {axis}") });
        }
        let mut out = c.pool().take::<T>(view.0 * view.2);
        logsumexp_axis(x.slice::<T>()?, view, &mut out);
        Ok(c.wrap(out, crate::shape::reduced(&x.shape, Some(axis))))
    }

    fn logsumexp_adjoint_t<T: CpuElem>(
        c: &Cpu,
        x: &CpuTensor,
        y: &CpuTensor,
        g: &CpuTensor,
        axis: usize,
    ) -> Result<CpuTensor> {
        let view = axis_view("logsumexp_adjoint", &x.shape, axis)?;
        let line = crate::shape::reduced(&x.shape, Some(axis));
        crate::shape::same_shape("logsumexp_adjoint", "the result", &y.shape, &line)?;
        crate::shape::same_shape("logsumexp_adjoint", "the adjoint", &g.shape, &line)?;
        let mut out = c.pool().take::<T>(x.numel());
        logsumexp_adjoint(x.slice::<T>()?, y.slice::<T>()?, g.slice::<T>()?, view, &mut out);
        Ok(c.wrap(out, x.shape.clone()))
    }

    /// Rows, row length and b's broadcast runs (`shape::sum_sq_diff_rows`).
    pub type SumSqDiffPlan = (usize, usize, Vec<Run>);

    fn sum_sq_diff_t<T: CpuElem>(
        c: &Cpu,
        a: &CpuTensor,
        b: &CpuTensor,
        (rows, d, rs): &SumSqDiffPlan,
    ) -> Result<CpuTensor> {
        let mut out = c.pool().take::<T>(*rows);
        sum_sq_diff(a.slice::<T>()?, b.slice::<T>()?, *d, rs, &mut out);
        Ok(c.wrap(out, crate::shape::reduced(&a.shape, None)))
    }

    pub fn sum_sq_diff_op(c: &Cpu, a: &CpuTensor, b: &CpuTensor, plan: SumSqDiffPlan) -> Result<CpuTensor> {
        let dt = super::super::same_dtype("sum_sq_diff", a, b)?;
        c.run(a.numel(), || {
            dispatch(dt, || sum_sq_diff_t::<f32>(c, a, b, &plan), || sum_sq_diff_t::<f64>(c, a, b, &plan))
        })
    }

    fn sum_sq_diff_adjoint_t<T: CpuElem>(
        c: &Cpu,
        a: &CpuTensor,
        b: &CpuTensor,
        g: &CpuTensor,
        (rows, d, rs): &SumSqDiffPlan,
    ) -> Result<CpuTensor> {
        let line = crate::shape::reduced(&a.shape, None);
        crate::shape::same_shape("sum_sq_diff_adjoint", "the adjoint", &g.shape, &line)?;
        debug_assert_eq!(g.numel(), *rows);
        let mut out = c.pool().take::<T>(a.numel());
        sum_sq_diff_adjoint(a.slice::<T>()?, b.slice::<T>()?, g.slice::<T>()?, *d, rs, &mut out);
        Ok(c.wrap(out, a.shape.clone()))
    }

    pub fn sum_sq_diff_adjoint_op(
        c: &Cpu,
        a: &CpuTensor,
        b: &CpuTensor,
        g: &CpuTensor,
        plan: SumSqDiffPlan,
    ) -> Result<CpuTensor> {
        let dt = super::super::same_dtype("sum_sq_diff_adjoint", a, b)?;
        super::super::same_dtype("sum_sq_diff_adjoint", a, g)?;
        c.run(a.numel(), || {
            dispatch(
                dt,
                || sum_sq_diff_adjoint_t::<f32>(c, a, b, g, &plan),
                || sum_sq_diff_adjoint_t::<f64>(c, a, b, g, &plan),
            )
        })
    }

    // Sequential: lines are short and few in the workloads (GMM's n x K), and a fold per line
    // would need the pool's block split to pay for its handoff.
    pub fn logsumexp_axis_op(c: &Cpu, x: &CpuTensor, axis: usize) -> Result<CpuTensor> {
        dispatch(x.dtype(), || logsumexp_t::<f32>(c, x, axis), || logsumexp_t::<f64>(c, x, axis))
    }

    pub fn logsumexp_adjoint_op(
        c: &Cpu,
        x: &CpuTensor,
        y: &CpuTensor,
        g: &CpuTensor,
        axis: usize,
    ) -> Result<CpuTensor> {
        let dt = super::super::same_dtype("logsumexp_adjoint", x, y)?;
        super::super::same_dtype("logsumexp_adjoint", x, g)?;
        dispatch(dt, || logsumexp_adjoint_t::<f32>(c, x, y, g, axis), || logsumexp_adjoint_t::<f64>(c, x, y, g, axis))
    }

    // Each op runs on the device's pool only when its size reaches the threshold its kernel
    // parallelises at (`Cpu::run`); below, the kernel's sequential path runs on the calling
    // thread, as the elementwise ops do.

    pub fn broadcast_to_op(c: &Cpu, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        c.run(shape.iter().product(), || {
            dispatch(x.dtype(), || broadcast_t::<f32>(c, x, shape), || broadcast_t::<f64>(c, x, shape))
        })
    }

    pub fn sum_to_op(c: &Cpu, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        c.run(x.numel(), || dispatch(x.dtype(), || sum_to_t::<f32>(c, x, shape), || sum_to_t::<f64>(c, x, shape)))
    }

    pub fn matmul_op(c: &Cpu, a: &CpuTensor, ta: bool, b: &CpuTensor, tb: bool) -> Result<CpuTensor> {
        let dt = super::super::same_dtype("matmul", a, b)?;
        // In elements of the elementwise threshold (see MM_PAR_MIN).
        let work =
            matmul_plan(&a.shape, ta, &b.shape, tb).map_or(0, |p| p.batch * p.m * p.k * p.n) / (MM_PAR_MIN / PAR_MIN);
        c.run(work, || dispatch(dt, || matmul_t::<f32>(c, a, ta, b, tb), || matmul_t::<f64>(c, a, ta, b, tb)))
    }

    pub fn sq_dist_op(c: &Cpu, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = super::super::same_dtype("sq_dist", a, b)?;
        let work = crate::shape::sq_dist_shape(&a.shape, &b.shape).map_or(0, |(n, k, d)| n * k * d);
        c.run(work, || dispatch(dt, || sq_dist_t::<f32>(c, a, b), || sq_dist_t::<f64>(c, a, b)))
    }

    pub fn arg_reduce_axis_op(c: &Cpu, ext: Extremum, x: &CpuTensor, axis: usize) -> Result<(CpuTensor, CpuIndex)> {
        c.run(x.numel(), || {
            dispatch(x.dtype(), || arg_reduce_t::<f32>(c, ext, x, axis), || arg_reduce_t::<f64>(c, ext, x, axis))
        })
    }
}
