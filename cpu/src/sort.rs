//! Stable sort by key, returning the permutation (the general histogram rule's sort strategy).
//!
//! Keys in `[0, num_keys)` are sorted; any other key goes to one extra bucket after them, in
//! index order. A counting sort handles small key ranges in one pass; larger ranges use an LSD
//! radix sort over ceil(log2(num_keys + 1)) bits, 11 bits per pass. Both are stable.
//!
//! [`sort_with_ranks`] also returns the ranks (the inverse permutation). Its counting pass runs
//! in parallel over fixed chunks (boundaries from n and the bucket count only, so the result is
//! the same for any thread count — and a stable sort has only one result anyway): per-chunk
//! bucket counts, their exclusive prefix in (bucket, chunk) order, then every chunk ranks its
//! elements in order.

use crate::IndexElem;
use rayon::prelude::*;

use super::kernels::{BLOCK, SyncPtr};

/// Most chunks of the parallel counting pass.
const MAX_SORT_CHUNKS: usize = 64;
/// Fewest elements per chunk of the parallel counting pass.
const MIN_SORT_CHUNK: usize = 1 << 15;

const RADIX_BITS: u32 = 11;
/// Buckets up to which the stable sort by bin runs one counting pass (radix passes above,
/// unless n is at least 4 times the buckets).
pub const COUNTING_MAX: usize = 1 << 16;

#[inline]
fn bucket<X: IndexElem>(key: X, num_keys: usize) -> usize {
    key.bin(num_keys).unwrap_or(num_keys)
}

/// Positions `0..keys.len()` ordered stably by key.
pub fn sort_by_key<X: IndexElem>(keys: &[X], num_keys: usize) -> Vec<i64> {
    let n = keys.len();
    let buckets = num_keys + 1;
    if buckets <= COUNTING_MAX || buckets <= n / 4 {
        return counting_pass(keys, num_keys, (0..n as i64).collect(), 0, usize::BITS);
    }
    let bits = usize::BITS - (buckets - 1).leading_zeros();
    let mut perm: Vec<i64> = (0..n as i64).collect();
    let mut shift = 0;
    while shift < bits {
        perm = counting_pass(keys, num_keys, perm, shift, RADIX_BITS);
        shift += RADIX_BITS;
    }
    perm
}

/// Stable sort by key: `(perm, ranks)` with `perm[ranks[i]] == i`.
pub fn sort_with_ranks<X: IndexElem>(keys: &[X], num_keys: usize) -> (Vec<i64>, Vec<i64>) {
    let n = keys.len();
    let buckets = num_keys + 1;
    if !(buckets <= COUNTING_MAX || buckets <= n / 4) {
        let perm = sort_by_key(keys, num_keys);
        let mut ranks = vec![0i64; n];
        let pr = SyncPtr::new(&mut ranks);
        perm.par_chunks(BLOCK).enumerate().for_each(|(c, ps)| {
            for (j, &p) in ps.iter().enumerate() {
                // SAFETY: perm is a permutation of 0..n, so every target is distinct and in bounds.
                unsafe { pr.write(p as usize, (c * BLOCK + j) as i64) };
            }
        });
        return (perm, ranks);
    }
    // Chunks keep their count rows (chunks x buckets) well below n.
    let chunks = (n / MIN_SORT_CHUNK).min(n / (2 * buckets).max(1)).clamp(1, MAX_SORT_CHUNKS);
    let chunk_len = n.div_ceil(chunks).max(1);
    let mut counts = vec![0usize; chunks * buckets];
    counts.par_chunks_mut(buckets).zip(keys.par_chunks(chunk_len)).for_each(|(row, ks)| {
        for &key in ks {
            row[bucket(key, num_keys)] += 1;
        }
    });
    // Exclusive prefix in (bucket, chunk) order: each chunk's first slot in each bucket.
    let mut next = 0usize;
    for d in 0..buckets {
        for c in 0..chunks {
            let here = counts[c * buckets + d];
            counts[c * buckets + d] = next;
            next += here;
        }
    }
    let mut ranks = vec![0i64; n];
    let mut perm = vec![0i64; n];
    // The permutation is inverted in the same parallel pass: the slots are distinct.
    let pp = SyncPtr::new(&mut perm);
    ranks
        .par_chunks_mut(chunk_len)
        .zip(keys.par_chunks(chunk_len))
        .zip(counts.par_chunks_mut(buckets))
        .enumerate()
        .for_each(|(c, ((rs, ks), slots))| {
            for (j, (r, &key)) in rs.iter_mut().zip(ks).enumerate() {
                let d = bucket(key, num_keys);
                let slot = slots[d];
                *r = slot as i64;
                slots[d] += 1;
                // SAFETY: slots are distinct positions below n (a counting sort's output).
                unsafe { pp.write(slot, (c * chunk_len + j) as i64) };
            }
        });
    (perm, ranks)
}

/// One stable counting pass over the digit `(bucket >> shift) & mask` of the keys at `perm`.
fn counting_pass<X: IndexElem>(keys: &[X], num_keys: usize, perm: Vec<i64>, shift: u32, width: u32) -> Vec<i64> {
    let digit = |p: i64| -> usize {
        let b = bucket(keys[p as usize], num_keys);
        if width >= usize::BITS { b } else { (b >> shift) & ((1usize << width) - 1) }
    };
    let size = if width >= usize::BITS { num_keys + 1 } else { 1usize << width };
    let mut counts = vec![0usize; size + 1];
    for &p in &perm {
        counts[digit(p) + 1] += 1;
    }
    for d in 1..=size {
        counts[d] += counts[d - 1];
    }
    let mut out = vec![0i64; perm.len()];
    for &p in &perm {
        let d = digit(p);
        out[counts[d]] = p;
        counts[d] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(keys: &[i64], num_keys: usize) -> Vec<i64> {
        let mut p: Vec<i64> = (0..keys.len() as i64).collect();
        p.sort_by_key(|&i| bucket(keys[i as usize], num_keys));
        p
    }

    #[test]
    fn counting_and_radix_paths_are_stable_and_agree_with_std() {
        for &(n, k) in &[(0usize, 5usize), (1, 1), (1000, 3), (5000, 70_000), (20_000, 3_000_000), (300_000, 1000)] {
            let keys: Vec<i64> = (0..n)
                .map(|i| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as i64 % (k as i64 + 2) - 1)
                .collect();
            let want = reference(&keys, k);
            assert_eq!(sort_by_key(&keys, k), want, "n={n} k={k}");
            let (perm, ranks) = sort_with_ranks(&keys, k);
            assert_eq!(perm, want, "ranked n={n} k={k}");
            for (i, &r) in ranks.iter().enumerate() {
                assert_eq!(perm[r as usize], i as i64);
            }
        }
    }
}
