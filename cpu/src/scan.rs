//! Scans and linear recurrences of the CPU device, optionally segmented (each maximal run of
//! equal keys on its own).
//!
//! Large inputs run in three phases over fixed blocks (boundaries independent of the thread
//! count, so results are too): (1) every block sweeps on its own, as if a segment started at its
//! first position, and reports its final state and its "head" (the positions before its first
//! real segment start); (2) a sequential pass over the blocks turns these into the carry entering
//! each block; (3) only the heads are fixed up with their carry. With many segments (the sorted
//! histogram rule) the heads are short and the scan costs about one combine per element; with one
//! long segment it costs two, still spread over all cores.

use rayon::prelude::*;

use super::kernels::PAR_MIN;
use crate::{IndexElem, ScanSpec};

/// Block length of the parallel sweeps.
const SCAN_BLOCK: usize = 1 << 16;
/// Elements from which a scan runs in parallel blocks with carries (`adgauge_backends::sizes` lists it:
/// `check` runs the histograms, general-sort's segmented scans included, on both sides).
pub const PARALLEL_SCAN_MIN: usize = 2 * PAR_MIN;

/// Does a segment start at position j when sweeping in `spec`'s direction? (The first position
/// of the sweep, or a key change with respect to the previous position of the sweep.)
#[inline(always)]
fn starts_segment<X: IndexElem>(keys: Option<&[X]>, j: usize, n: usize, reverse: bool) -> bool {
    match keys {
        None => {
            if reverse {
                j + 1 == n
            } else {
                j == 0
            }
        }
        Some(k) => {
            if reverse {
                j + 1 == n || k[j] != k[j + 1]
            } else {
                j == 0 || k[j] != k[j - 1]
            }
        }
    }
}

/// The generic sweep: the state restarts at `init` at each segment start, `step(state, j)`
/// takes element j in, and `out[j]` is `emit(state)` after (inclusive) or before (exclusive)
/// element j.
#[inline(always)]
fn sweep<S: Copy, T, X: IndexElem>(
    out: &mut [T],
    spec: ScanSpec,
    keys: Option<&[X]>,
    init: S,
    step: impl Fn(S, usize) -> S,
    emit: impl Fn(S) -> T,
) {
    let n = out.len();
    let mut state = init;
    let mut visit = |j: usize| {
        if starts_segment(keys, j, n, spec.reverse) {
            state = init;
        }
        if spec.exclusive {
            out[j] = emit(state);
            state = step(state, j);
        } else {
            state = step(state, j);
            out[j] = emit(state);
        }
    };
    if spec.reverse {
        (0..n).rev().for_each(&mut visit);
    } else {
        (0..n).for_each(&mut visit);
    }
}

/// What phase 1 learns about a block.
#[derive(Clone, Copy)]
struct Block<S> {
    /// The state after the block's last position (in sweep order).
    end: S,
    /// Positions (in sweep order) before the first real segment start.
    head: usize,
    /// Whether the block holds a real segment start (else the head is the whole block).
    has_start: bool,
    /// For recurrences: the product of the multipliers over the head.
    head_product: S,
}

/// Global position of the t-th position (in sweep order) of the block starting at `base`.
#[inline(always)]
fn position(base: usize, len: usize, t: usize, reverse: bool) -> usize {
    if reverse { base + len - 1 - t } else { base + t }
}

/// Phase 1 for one block: sweep it as if a segment started at its first position.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn sweep_block<S: Copy, T, X: IndexElem>(
    out: &mut [T],
    base: usize,
    n: usize,
    spec: ScanSpec,
    keys: Option<&[X]>,
    init: S,
    one: S,
    step: &impl Fn(S, usize) -> S,
    emit: &impl Fn(S) -> T,
    multiplier: &impl Fn(S, usize) -> S,
) -> Block<S> {
    let len = out.len();
    let (mut state, mut head, mut product) = (init, len, one);
    for t in 0..len {
        let j = position(base, len, t, spec.reverse);
        if head == len {
            if starts_segment(keys, j, n, spec.reverse) {
                head = t;
                state = init;
            } else {
                product = multiplier(product, j);
            }
        } else if starts_segment(keys, j, n, spec.reverse) {
            state = init;
        }
        let local = j - base;
        if spec.exclusive {
            out[local] = emit(state);
            state = step(state, j);
        } else {
            state = step(state, j);
            out[local] = emit(state);
        }
    }
    Block { end: state, head, has_start: head < len, head_product: product }
}

/// `out = scan(combine, x)` from `neutral`.
pub fn scan<T: Copy + Send + Sync, X: IndexElem>(
    out: &mut [T],
    x: &[T],
    neutral: T,
    combine: impl Fn(T, T) -> T + Sync,
    spec: ScanSpec,
    keys: Option<&[X]>,
) {
    let n = out.len();
    if n < PARALLEL_SCAN_MIN {
        sweep(out, spec, keys, neutral, |acc, j| combine(acc, x[j]), |acc| acc);
        return;
    }
    let step = |acc: T, j: usize| combine(acc, x[j]);
    let blocks: Vec<Block<T>> = out
        .par_chunks_mut(SCAN_BLOCK)
        .enumerate()
        .map(|(c, o)| {
            let base = c * SCAN_BLOCK;
            sweep_block(o, base, n, spec, keys, neutral, neutral, &step, &|s| s, &|p, _| p)
        })
        .collect();
    let carries = block_carries(&blocks, spec.reverse, neutral, |carry, b| combine(carry, b.end));
    out.par_chunks_mut(SCAN_BLOCK).enumerate().for_each(|(c, o)| {
        let len = o.len();
        let base = c * SCAN_BLOCK;
        for t in 0..blocks[c].head {
            let local = position(base, len, t, spec.reverse) - base;
            o[local] = combine(carries[c], o[local]);
        }
    });
}

/// Phase 2: the carry entering each block, in sweep order. A block with a real segment start
/// passes on its own end state; one without extends the incoming carry.
fn block_carries<S: Copy>(blocks: &[Block<S>], reverse: bool, init: S, extend: impl Fn(S, &Block<S>) -> S) -> Vec<S> {
    let mut carries = vec![init; blocks.len()];
    let mut carry = init;
    let order: Box<dyn Iterator<Item = usize>> =
        if reverse { Box::new((0..blocks.len()).rev()) } else { Box::new(0..blocks.len()) };
    for c in order {
        carries[c] = carry;
        let b = &blocks[c];
        carry = if b.has_start { b.end } else { extend(carry, b) };
    }
    carries
}

/// `out` = the linear recurrence `y = a[j] + b[j] * y` from 0.
pub fn linear_recurrence<T: num_traits::Float + Send + Sync, X: IndexElem>(
    out: &mut [T],
    a: &[T],
    b: &[T],
    spec: ScanSpec,
    keys: Option<&[X]>,
) {
    // A zero multiplier cuts the dependence (no 0 * inf = NaN from an unrelated state).
    let step = |y: T, j: usize| if b[j] == T::zero() { a[j] } else { a[j] + b[j] * y };
    let n = out.len();
    if n < PARALLEL_SCAN_MIN {
        sweep(out, spec, keys, T::zero(), step, |y| y);
        return;
    }
    let blocks: Vec<Block<T>> = out
        .par_chunks_mut(SCAN_BLOCK)
        .enumerate()
        .map(|(c, o)| {
            let base = c * SCAN_BLOCK;
            sweep_block(o, base, n, spec, keys, T::zero(), T::one(), &step, &|y| y, &|p, j| p * b[j])
        })
        .collect();
    let apply = |local: T, product: T, carry: T| {
        if product == T::zero() { local } else { local + product * carry }
    };
    let carries = block_carries(&blocks, spec.reverse, T::zero(), |carry, blk| apply(blk.end, blk.head_product, carry));
    out.par_chunks_mut(SCAN_BLOCK).enumerate().for_each(|(c, o)| {
        let len = o.len();
        let base = c * SCAN_BLOCK;
        let mut product = T::one();
        for t in 0..blocks[c].head {
            let j = position(base, len, t, spec.reverse);
            if !spec.exclusive {
                product = product * b[j];
            }
            o[j - base] = apply(o[j - base], product, carries[c]);
            if spec.exclusive {
                product = product * b[j];
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmented_scans_restart_at_key_changes_in_both_directions() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let keys = [0, 0, 1, 1, 1];
        let mut out = [0.0; 5];
        let add = |a: f64, b: f64| a + b;
        scan(&mut out, &x, 0.0, add, ScanSpec::INCLUSIVE, Some(&keys));
        assert_eq!(out, [1.0, 3.0, 3.0, 7.0, 12.0]);
        scan(&mut out, &x, 0.0, add, ScanSpec::EXCLUSIVE, Some(&keys));
        assert_eq!(out, [0.0, 1.0, 0.0, 3.0, 7.0]);
        let rev_ex = ScanSpec { exclusive: true, reverse: true };
        scan(&mut out, &x, 0.0, add, rev_ex, Some(&keys));
        assert_eq!(out, [2.0, 0.0, 9.0, 5.0, 0.0]);
        scan(&mut out, &x, 0.0, add, ScanSpec::INCLUSIVE.flipped(), None::<&[i64]>);
        assert_eq!(out, [15.0, 14.0, 12.0, 9.0, 5.0]);
    }

    /// The parallel three-phase sweeps against the sequential sweep, over many blocks, with
    /// segments that cross block boundaries, a block without any start, and both directions.
    #[test]
    fn parallel_sweeps_match_the_sequential_sweep() {
        let n = 5 * SCAN_BLOCK + 123;
        let x: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
        let m: Vec<f64> = (0..n).map(|i| 0.999 - ((i * 31) % 7) as f64 * 1e-3).collect();
        // Segment keys: runs of length 1000, then one run spanning more than a whole block.
        let keys: Vec<i64> = (0..n).map(|i| if i < 2 * SCAN_BLOCK { (i / 1000) as i64 } else { -5 }).collect();
        let max = |a: f64, b: f64| if b > a { b } else { a };
        for exclusive in [false, true] {
            for reverse in [false, true] {
                let spec = ScanSpec { exclusive, reverse };
                for k in [None, Some(&keys[..])] {
                    let (mut par, mut seq) = (vec![0.0; n], vec![0.0; n]);
                    scan(&mut par, &x, f64::NEG_INFINITY, max, spec, k);
                    sweep(&mut seq, spec, k, f64::NEG_INFINITY, |s, j| max(s, x[j]), |s| s);
                    assert_eq!(par, seq, "scan {spec:?} {}", k.is_some());
                    linear_recurrence(&mut par, &x, &m, spec, k);
                    let step = |y: f64, j: usize| x[j] + m[j] * y;
                    sweep(&mut seq, spec, k, 0.0, step, |y| y);
                    for (j, (p, q)) in par.iter().zip(&seq).enumerate() {
                        assert!((p - q).abs() <= 1e-9 * q.abs().max(1.0), "{spec:?} {j}: {p} vs {q}");
                    }
                }
            }
        }
    }

    #[test]
    fn linear_recurrence_composes_affine_maps() {
        let a = [1.0, 2.0, 3.0];
        let b = [5.0, 10.0, 0.5];
        let mut out = [0.0; 3];
        linear_recurrence(&mut out, &a, &b, ScanSpec::INCLUSIVE, None::<&[i64]>);
        assert_eq!(out, [1.0, 12.0, 9.0]);
        linear_recurrence(&mut out, &a, &b, ScanSpec::EXCLUSIVE.flipped(), None::<&[i64]>);
        // reverse: y2 = 3, y1 = 2 + 10*3 = 32; exclusive shifts by one.
        assert_eq!(out, [32.0, 3.0, 0.0]);
    }
}
