//! AVX-512 copies of two of [`super::tiny_products`]' shapes in f64: ht's per-vertex 4 x 4 by
//! 4 x 1 products (the blended transforms applied to the vertices) and its per-bone 4 x 4 by
//! 4 x 4 products (the kinematic chain). The generic copy runs each output element's chain as
//! scalar code, a compare and a select per term; here a vector holds the chains of two
//! products' columns (4 x 1) or of two rows of one product (4 x 4), and a term that does not
//! count (a zero or subnormal a[i, l]) is masked out of its fused multiply-add. Each chain is
//! the generic one (from +0, over l in order, the same terms skipped), so the bits are too.
//!
//! Both take a row-major `a` and `b` (no transposes; a 4 x 1 `b` reads the same either way),
//! and either operand may be shared by all batches.

use std::arch::x86_64::*;

use crate::shape::MatmulPlan;

/// `fpclass` categories of a term that does not count: +0, -0 and subnormals (NaN and the
/// infinities count, as in the generic chain).
const SKIPPED: i32 = 0x02 | 0x04 | 0x20;

/// The shapes this module takes: `(m, k, n)` with no transposes.
pub(super) fn takes(p: &MatmulPlan, ta: bool, tb: bool) -> bool {
    crate::simd::avx512() && !ta && matches!((p.m, p.k, p.n), (4, 4, 1) | (4, 4, 4) if p.n == 1 || !tb)
}

/// Every batch's product for a plan [`takes`] accepts.
///
/// # Safety
/// The running CPU has AVX-512 (F, DQ) and [`takes`] accepted the plan; `a`, `b` and `out`
/// hold the plan's elements.
pub(super) unsafe fn products(a: &[f64], b: &[f64], p: &MatmulPlan, out: &mut [f64]) {
    let (mk, kn) = (p.m * p.k, p.k * p.n);
    let a_at = |bi: usize| if p.a_batched { &a[bi * mk..(bi + 1) * mk] } else { &a[..mk] };
    let b_at = |bi: usize| if p.b_batched { &b[bi * kn..(bi + 1) * kn] } else { &b[..kn] };
    let out = &mut out[..p.batch * p.m * p.n];
    if p.n == 1 {
        let mut pairs = out.chunks_exact_mut(8);
        for (pair, o) in (&mut pairs).enumerate() {
            let (a0, a1, b0, b1) = (a_at(2 * pair), a_at(2 * pair + 1), b_at(2 * pair), b_at(2 * pair + 1));
            // SAFETY: the caller's contract; a0 and a1 hold 16 elements, b0 and b1 4, o 8.
            unsafe { columns_441(a0, a1, b0, b1, o) };
        }
        let last = pairs.into_remainder();
        if !last.is_empty() {
            let bi = p.batch - 1;
            let (a0, b0) = (a_at(bi), b_at(bi));
            // The odd product twice, its copy's result dropped.
            let mut o = [0.0; 8];
            // SAFETY: as above.
            unsafe { columns_441(a0, a0, b0, b0, &mut o) };
            last.copy_from_slice(&o[..4]);
        }
    } else {
        for (bi, o) in out.chunks_exact_mut(16).enumerate() {
            // SAFETY: the caller's contract; a and b hold 16 elements each, o 16.
            unsafe { rows_444(a_at(bi), b_at(bi), o) };
        }
    }
}

/// Which lanes of `x` count as a term's a[i, l].
#[target_feature(enable = "avx512f,avx512dq")]
fn counting(x: __m512d) -> __mmask8 {
    !_mm512_fpclass_pd_mask::<SKIPPED>(x)
}

/// Two products a0 b0 and a1 b1 of a 4 x 4 by a 4 x 1: lanes 0-3 hold a0 b0's chains, 4-7
/// a1 b1's.
///
/// # Safety
/// The running CPU has AVX-512 (F, DQ); `a0`, `a1` hold 16 elements, `b0`, `b1` 4, `o` 8.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn columns_441(a0: &[f64], a1: &[f64], b0: &[f64], b1: &[f64], o: &mut [f64]) {
    assert!(a0.len() >= 16 && a1.len() >= 16 && b0.len() >= 4 && b1.len() >= 4 && o.len() >= 8);
    // SAFETY: the lengths asserted above.
    let (r0, r1, r2, r3, b) = unsafe {
        (
            _mm512_loadu_pd(a0.as_ptr()),
            _mm512_loadu_pd(a0.as_ptr().add(8)),
            _mm512_loadu_pd(a1.as_ptr()),
            _mm512_loadu_pd(a1.as_ptr().add(8)),
            _mm512_insertf64x4::<1>(_mm512_castpd256_pd512(_mm256_loadu_pd(b0.as_ptr())), _mm256_loadu_pd(b1.as_ptr())),
        )
    };
    let mut acc = _mm512_setzero_pd();
    for l in 0..4i64 {
        // Column l of a0 (rows 0 and 1 in r0, 2 and 3 in r1) in lanes 0-3, of a1 in 4-7.
        let column = _mm512_set_epi64(12 + l, 8 + l, 4 + l, l, 12 + l, 8 + l, 4 + l, l);
        let x =
            _mm512_mask_blend_pd(0xf0, _mm512_permutex2var_pd(r0, column, r1), _mm512_permutex2var_pd(r2, column, r3));
        let y = _mm512_permutexvar_pd(_mm512_set_epi64(4 + l, 4 + l, 4 + l, 4 + l, l, l, l, l), b);
        acc = _mm512_mask3_fmadd_pd(x, y, acc, counting(x));
    }
    // SAFETY: o holds 8 elements.
    unsafe { _mm512_storeu_pd(o.as_mut_ptr(), acc) };
}

/// One product of two 4 x 4s: one vector holds rows 0 and 1 of the output, one rows 2 and 3.
///
/// # Safety
/// The running CPU has AVX-512 (F, DQ); `a`, `b` and `o` hold 16 elements.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn rows_444(a: &[f64], b: &[f64], o: &mut [f64]) {
    assert!(a.len() >= 16 && b.len() >= 16 && o.len() >= 16);
    // SAFETY: the lengths asserted above.
    let (a01, a23) = unsafe { (_mm512_loadu_pd(a.as_ptr()), _mm512_loadu_pd(a.as_ptr().add(8))) };
    let (mut acc01, mut acc23) = (_mm512_setzero_pd(), _mm512_setzero_pd());
    for l in 0..4i64 {
        // Row l of b in both halves; a[i, l] across row i's half.
        // SAFETY: b holds 16 elements.
        let y = _mm512_broadcast_f64x4(unsafe { _mm256_loadu_pd(b.as_ptr().add(4 * l as usize)) });
        let pick = _mm512_set_epi64(4 + l, 4 + l, 4 + l, 4 + l, l, l, l, l);
        let (x01, x23) = (_mm512_permutexvar_pd(pick, a01), _mm512_permutexvar_pd(pick, a23));
        acc01 = _mm512_mask3_fmadd_pd(x01, y, acc01, counting(x01));
        acc23 = _mm512_mask3_fmadd_pd(x23, y, acc23, counting(x23));
    }
    // SAFETY: o holds 16 elements.
    unsafe {
        _mm512_storeu_pd(o.as_mut_ptr(), acc01);
        _mm512_storeu_pd(o.as_mut_ptr().add(8), acc23);
    }
}
