//! Stable sort by key, returning the permutation (the general histogram rule's sort strategy).
//!
//! Keys in `[0, num_keys)` are sorted; any other key goes to one extra bucket after them, in
//! index order. A counting sort handles small key ranges in one pass; larger ranges use an LSD
//! radix sort over ceil(log2(num_keys + 1)) bits, 11 bits per pass. Both are stable.

const RADIX_BITS: u32 = 11;
/// Up to this many buckets a single counting pass is used.
const COUNTING_MAX: usize = 1 << 16;

#[inline]
fn bucket(key: i64, num_keys: usize) -> usize {
    if (key as u64) < num_keys as u64 {
        key as usize
    } else {
        num_keys
    }
}

/// Positions `0..keys.len()` ordered stably by key.
pub fn sort_by_key(keys: &[i64], num_keys: usize) -> Vec<i64> {
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

/// One stable counting pass over the digit `(bucket >> shift) & mask` of the keys at `perm`.
fn counting_pass(
    keys: &[i64],
    num_keys: usize,
    perm: Vec<i64>,
    shift: u32,
    width: u32,
) -> Vec<i64> {
    let digit = |p: i64| -> usize {
        let b = bucket(keys[p as usize], num_keys);
        if width >= usize::BITS {
            b
        } else {
            (b >> shift) & ((1usize << width) - 1)
        }
    };
    let size = if width >= usize::BITS {
        num_keys + 1
    } else {
        1usize << width
    };
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
        for &(n, k) in &[
            (0usize, 5usize),
            (1, 1),
            (1000, 3),
            (5000, 70_000),
            (20_000, 3_000_000),
        ] {
            let keys: Vec<i64> = (0..n)
                .map(|i| {
                    ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as i64 % (k as i64 + 2)
                        - 1
                })
                .collect();
            assert_eq!(sort_by_key(&keys, k), reference(&keys, k), "n={n} k={k}");
        }
    }
}
