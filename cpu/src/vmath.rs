//! Branch-free `exp`, `ln`, `tanh`, `sigmoid`, `sin` and `cos` for the CPU's kernels. libm's
//! versions are scalar calls with branches, so a loop over them runs one element at a time: the
//! LSTM's cells spent two thirds of their time in glibc's `expm1` and `exp`. These are written so
//! that a loop over them vectorises (selects instead of branches, the integer part of the
//! exponent taken from the bits of a shifted float rather than a float-to-int conversion), and
//! [`map_unary`] runs them over a slice, with an AVX2 copy chosen at run time (`simd.rs`); f64
//! exp has a loop of its own for AVX-512, written in intrinsics with the same operations, that
//! reads its table by register permutes rather than gathers.
//!
//! Accuracy: exp reduces by Cody-Waite to `x = (32 n + j) ln2 / 32 + r`, `|r| <= ln2 / 64`,
//! takes `2^(j/32)` from a table of double-doubles computed when the crate is compiled, and
//! `expm1(r)` by Taylor to degree 6 (truncation below 2^-58 relative); tanh's `expm1` reduces
//! to `|r| <= ln2 / 2` and sums Taylor to degree 13 (below 1e-17), which keeps it accurate near
//! zero. Both scale by `2^n` as two exact halves, so that a subnormal result is rounded once
//! more: exp within 1 ulp of libm's over its whole range, tanh within 3 and sigmoid within 2
//! (the tests below). `ln` is fdlibm's algorithm (the mantissa
//! brought into [sqrt 2 / 2, sqrt 2), `ln(1 + f)` from `s = f / (2 + f)` and a degree-14 even
//! polynomial in s, error below 1 ulp) with its branches turned into selects: within 1 ulp of
//! libm's over the whole range, subnormal arguments included. `sin` and `cos`: `x = n π/2 + r`
//! by Cody-Waite with π/2 in four parts (152 bits) and the remainder kept as `r + tail`, then
//! fdlibm's kernels (degree-13 and degree-14 minimax polynomials on |r| <= π/4, taking the
//! tail), the quadrant `n mod 4` choosing kernel and sign by selects: within 1 ulp of libm's for
//! |x| <= B = 2^20 π/2 (~1.647e6), where the reduction is exact enough (1 ulp apart on about 2%
//! of the tests' 980 000 points, equal on the rest; f32 within 1 ulp of libm's f32); beyond B, and
//! for NaN and the infinities, libm's own value, which the slice loop fills in after its
//! branch-free pass (`map_trig`). f32 computes in f64 and rounds. Every CPU path (eager, staged,
//! fused kernels) calls these same functions, so their results stay bit-identical to one
//! another; they differ from libm's in the last bit at times.

use super::simd;
use crate::{DType, Elem, UnaryOp};

const LOG2E: f64 = std::f64::consts::LOG2_E;
// fdlibm's split of ln 2 (by bits: 6.93147180369123816490e-01 and 1.90821492927058770002e-10):
// LN2_HI has 32 significant bits, so n * LN2_HI is exact for the |n| <= 1100 used here.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// 1.5 * 2^52: adding it rounds to an integer, which then sits in the low mantissa bits.
const SHIFTER: f64 = 6_755_399_441_055_744.0;

/// 1/k! for k = 2..=13.
const INV_FACT: [f64; 12] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// `2^k` for the integer-valued `k + SHIFTER` (`k` in [-1022, 1023]).
#[inline(always)]
fn pow2_of_shifted(shifted: f64) -> f64 {
    let k = shifted.to_bits().wrapping_sub(SHIFTER.to_bits());
    f64::from_bits(k.wrapping_add(1023) << 52)
}

/// Cody-Waite: `x = n ln2 / STEPS + r` with `|r| <= ln2 / (2 STEPS)`, as `(n + SHIFTER, n,
/// r)`. STEPS is a power of two: `LN2_HI / STEPS` keeps LN2_HI's 32 significant bits, so
/// `n LN2_HI / STEPS` is exact for `|n| < 2^21` (exp's n stays below 2^16).
#[inline(always)]
fn split_ln2<const STEPS: u32>(x: f64) -> (f64, f64, f64) {
    let steps = f64::from(STEPS);
    let shifted = x * (LOG2E * steps) + SHIFTER;
    let n = shifted - SHIFTER;
    (shifted, n, (x - n * (LN2_HI / steps)) - n * (LN2_LO / steps))
}

/// [`split_ln2`] in fused multiply-adds (`n LN2_HI / STEPS` is exact, so the first step of r
/// is the same either way; the second is rounded once rather than twice): f64 exp's.
#[inline(always)]
fn split_ln2_fused<const STEPS: u32>(x: f64) -> (f64, f64, f64) {
    let steps = f64::from(STEPS);
    let shifted = x.mul_add(LOG2E * steps, SHIFTER);
    let n = shifted - SHIFTER;
    (shifted, n, (-n).mul_add(LN2_LO / steps, (-n).mul_add(LN2_HI / steps, x)))
}

/// `1/2! + r/3! + ... + r^7/9!` (the Taylor terms of `expm1(r)` from r^2 to r^9, over r^2) by
/// Estrin's scheme: the terms in pairs, pairs of pairs, ..., a short dependency chain. The
/// LSTM's 14-lane cells evaluate five exps per lane in short loops, which wait on that chain
/// rather than on throughput.
#[inline(always)]
fn taylor_to_9(r: f64, r2: f64, r4: f64) -> f64 {
    let pair = |k: usize| INV_FACT[k] + INV_FACT[k + 1] * r;
    (pair(0) + pair(2) * r2) + (pair(4) + pair(6) * r2) * r4
}

/// `(expm1(r), 2^n)` as the two exact halves of the scale, for `x = n ln2 + r`; x must be in
/// [-746, 710] (callers clamp; NaN passes through as NaN in the first).
#[inline(always)]
fn reduce(x: f64) -> (f64, f64, f64) {
    let (_, n, r) = split_ln2::<1>(x);
    // Taylor to degree 13: the terms past r^9 in one more pair of pairs (a dependency chain of
    // 8 operations where Horner's is 22).
    let (r2, pair) = (r * r, |k: usize| INV_FACT[k] + INV_FACT[k + 1] * r);
    let r4 = r2 * r2;
    let high = pair(8) + pair(10) * r2;
    let p = taylor_to_9(r, r2, r4) + high * (r4 * r4);
    let em1 = r + r2 * p;
    // n = n1 + n2 with both halves in the normal range of 2^k.
    let half = (n * 0.5 + SHIFTER) - SHIFTER;
    (em1, pow2_of_shifted(half + SHIFTER), pow2_of_shifted((n - half) + SHIFTER))
}

/// Entries of [`EXP2_TABLE`]: `2^(j / 32)` for j in 0..32.
const EXP2_STEPS: usize = 32;

/// A double-double: an unevaluated sum `hi + lo` with `|lo| <= ulp(hi) / 2`.
#[derive(Clone, Copy)]
struct DoubleDouble(f64, f64);

/// `a + b` exactly, as a rounded sum and its error (Knuth's two-sum).
const fn two_sum(a: f64, b: f64) -> DoubleDouble {
    let s = a + b;
    let bb = s - a;
    DoubleDouble(s, (a - (s - bb)) + (b - bb))
}

/// `a b` exactly, as a rounded product and its error (Dekker's product: each factor split into
/// halves of 26 bits, whose products are exact).
const fn two_product(a: f64, b: f64) -> DoubleDouble {
    const SPLIT: f64 = 134_217_729.0; // 2^27 + 1
    let (ca, cb) = (SPLIT * a, SPLIT * b);
    let (ah, bh) = (ca - (ca - a), cb - (cb - b));
    let (al, bl) = (a - ah, b - bh);
    let p = a * b;
    DoubleDouble(p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
}

const fn dd_add(a: DoubleDouble, b: DoubleDouble) -> DoubleDouble {
    let s = two_sum(a.0, b.0);
    two_sum(s.0, s.1 + a.1 + b.1)
}

const fn dd_mul(a: DoubleDouble, b: DoubleDouble) -> DoubleDouble {
    let p = two_product(a.0, b.0);
    two_sum(p.0, p.1 + a.0 * b.1 + a.1 * b.0)
}

/// `a / k` for a small positive integer k.
const fn dd_div(a: DoubleDouble, k: f64) -> DoubleDouble {
    let q1 = a.0 / k;
    let back = two_product(q1, k);
    let rest = (a.0 - back.0 - back.1 + a.1) / k;
    two_sum(q1, rest)
}

/// `2^(j / 32)` as a double-double, by the Taylor series of `e^y` at `y = j ln2 / 32` summed in
/// double-double (28 terms, the last below 2^-120 of the sum): accurate to about 2^-85, the
/// precision of fdlibm's split of ln 2, which is 2^-32 of an ulp of the rounded entry.
const fn exp2_step(j: usize) -> DoubleDouble {
    // LN2_HI has 32 significant bits: j LN2_HI / 32 is exact.
    let y = two_sum(LN2_HI * j as f64 / EXP2_STEPS as f64, LN2_LO * j as f64 / EXP2_STEPS as f64);
    let (mut sum, mut term, mut k) = (DoubleDouble(1.0, 0.0), DoubleDouble(1.0, 0.0), 1);
    while k < 28 {
        term = dd_div(dd_mul(term, y), k as f64);
        sum = dd_add(sum, term);
        k += 1;
    }
    sum
}

/// `2^(j / 32)` for j in 0..32, each as its rounded value and the rest (`[hi, lo]`), computed
/// when the crate is compiled.
const EXP2_TABLE: [[f64; 2]; EXP2_STEPS] = {
    let mut t = [[0.0; 2]; EXP2_STEPS];
    let mut j = 0;
    while j < EXP2_STEPS {
        let v = exp2_step(j);
        t[j] = [v.0, v.1];
        j += 1;
    }
    t
};

/// Added to the step count before its bits are split, so that it is never negative (steps
/// down to -2^16, below -746 * 32 / ln 2).
const STEP_BIAS: u64 = 1 << 16;

/// e^x in f64 (module docs: accuracy and special values: exp(NaN) = NaN, exp(-inf) = 0,
/// exp(+inf) = +inf, overflow to +inf above 709.78, gradual underflow below -708.4).
///
/// `x = (32 n + j) ln2 / 32 + r`, `|r| <= ln2 / 64`: `e^x = 2^n 2^(j/32) e^r`, the table
/// entry as a double-double and `e^r - 1` by Taylor to degree 6 (truncation below 2^-58
/// relative), so `2^(j/32) e^r` is one rounding of a sum whose other errors are under a
/// hundredth of an ulp; then the scale `2^n` as two exact halves (see [`reduce`]). Half the
/// operations of the degree-13 series on `|r| <= ln2 / 2`, for two table loads. The reduction
/// and the polynomial are fused multiply-adds (instructions in the AVX2 and AVX-512 copies,
/// libm's `fma` in the baseline one, so every copy gives the same bits): 12 floating-point
/// operations where separate products and sums took 21, and lse's primal, bound by its exps,
/// took 0.88x the time (n = 1.28e6, four interleaved rounds on Zen 4: 0.70 against 0.80 ms).
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    let x = if x > 710.0 { 710.0 } else { x };
    let x = if x < -746.0 { -746.0 } else { x };
    let (shifted, _, r) = split_ln2_fused::<{ EXP2_STEPS as u32 }>(x);
    let steps = shifted.to_bits().wrapping_sub(SHIFTER.to_bits()).wrapping_add(STEP_BIAS);
    let [hi, lo] = EXP2_TABLE[(steps % EXP2_STEPS as u64) as usize];
    let r2 = r * r;
    let first = INV_FACT[1].mul_add(r, INV_FACT[0]);
    let second = INV_FACT[4].mul_add(r2, INV_FACT[3].mul_add(r, INV_FACT[2]));
    let em1 = r2.mul_add(second.mul_add(r2, first), r);
    let mantissa = hi + hi.mul_add(em1, lo);
    // 2^n as 2^n1 2^n2, n1 = floor(n / 2), both in the normal range (n in [-1077, 1024]), by
    // their exponent fields from the biased n = biased - 2048 (unsigned shifts: AVX2 has no
    // arithmetic shift of 64-bit lanes).
    let biased = steps / EXP2_STEPS as u64;
    const { assert!(STEP_BIAS / EXP2_STEPS as u64 == 2048) };
    let half = biased >> 1;
    let (field1, field2) = (half.wrapping_sub(1), (biased - half).wrapping_sub(1));
    (mantissa * f64::from_bits(field1 << 52)) * f64::from_bits(field2 << 52)
}

/// e^x for an f32 argument, in f64, for rounding to f32: the reduction of [`exp_f64`] with
/// one scale (each 2^n an f32 result needs, n in [-151, 129], is a normal f64) and Taylor to
/// degree 9 (`taylor_to_9`, the first four pairs of `reduce`'s; truncation below 2^-36 relative, far under half
/// an f32 ulp, 2^-25). Half the operations of [`exp_f64`]: a logaddexp histogram's f32 exp
/// passes are bound by them, not by memory.
#[inline(always)]
fn exp_single_f64(x: f64) -> f64 {
    // Beyond these the rounded result is +inf (e^89 > f32::MAX) or 0 (e^-104 is under half
    // the smallest subnormal); NaN passes the compares and stays NaN.
    let x = if x > 89.0 { 89.0 } else { x };
    let x = if x < -104.0 { -104.0 } else { x };
    let (shifted, _, r) = split_ln2::<1>(x);
    let r2 = r * r;
    (1.0 + (r + r2 * taylor_to_9(r, r2, r2 * r2))) * pow2_of_shifted(shifted)
}

/// e^x - 1 for x <= 0 (what tanh needs), accurate near 0.
#[inline(always)]
fn expm1_nonpos_f64(x: f64) -> f64 {
    let x = if x < -746.0 { -746.0 } else { x };
    let (em1, s1, s2) = reduce(x);
    let s = s1 * s2;
    em1 * s + (s - 1.0)
}

/// tanh(x) = sign(x) (-t / (t + 2)) with t = expm1(-2|x|) (no cancellation at any x).
#[inline(always)]
pub fn tanh_f64(x: f64) -> f64 {
    let t = expm1_nonpos_f64(-2.0 * x.abs());
    (-t / (t + 2.0)).copysign(x)
}

/// 1 / (1 + e^-x), as `e / (1 + e)` with `e = e^x` below 0, so that nothing overflows.
#[inline(always)]
pub fn sigmoid_f64(x: f64) -> f64 {
    let e = exp_f64(-x.abs());
    if x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
}

/// fdlibm's coefficients of `R(z) = Lg1 z + ... + Lg7 z^7`, `ln(1 + f) = f - f^2/2 + s (f^2/2 +
/// R(s^2))` with `s = f / (2 + f)` (by bits, as fdlibm states them).
const LG: [f64; 7] = [
    f64::from_bits(0x3fe5_5555_5555_5593),
    f64::from_bits(0x3fd9_9999_9997_fa04),
    f64::from_bits(0x3fd2_4924_9422_9359),
    f64::from_bits(0x3fcc_71c5_1d8e_78af),
    f64::from_bits(0x3fc7_4664_96cb_03de),
    f64::from_bits(0x3fc3_9a09_d078_c69f),
    f64::from_bits(0x3fc2_f112_df3e_5244),
];
/// 2^54: brings a subnormal argument into the normal range.
const TWO54: f64 = 18_014_398_509_481_984.0;

/// ln(x) in f64 (module docs: accuracy; ln(NaN) = NaN, ln(x < 0) = NaN, ln(+-0) = -inf,
/// ln(+inf) = +inf).
#[inline(always)]
pub fn ln_f64(x: f64) -> f64 {
    let subnormal = x < f64::MIN_POSITIVE;
    let scaled = if subnormal { x * TWO54 } else { x };
    let bits = scaled.to_bits();
    // x = 2^k m with m in [sqrt 2 / 2, sqrt 2): the high word shifted so that the exponent
    // field carries k once the mantissa passes sqrt 2 (0x3fe6a09e is sqrt 2 / 2's high word).
    let high = ((bits >> 32) as u32).wrapping_add(0x3ff0_0000 - 0x3fe6_a09e);
    let k = (high >> 20) as i32 - 0x3ff - if subnormal { 54 } else { 0 };
    let high = (high & 0x000f_ffff) + 0x3fe6_a09e;
    let m = f64::from_bits(((high as u64) << 32) | (bits & 0xffff_ffff));
    let f = m - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG[1] + w * (LG[3] + w * LG[5]));
    let t2 = z * (LG[0] + w * (LG[2] + w * (LG[4] + w * LG[6])));
    let dk = k as f64;
    let r = s * (hfsq + (t2 + t1)) + dk * LN2_LO - hfsq + f + dk * LN2_HI;
    // The special values, as selects (the reduction above gives finite garbage for them).
    let r = if x == f64::INFINITY { x } else { r };
    let r = if x == 0.0 { f64::NEG_INFINITY } else { r };
    if x < 0.0 || x.is_nan() { f64::NAN } else { r }
}

/// [`ln_f64`] in `T` (f32 in f64, rounded).
#[inline(always)]
pub fn ln<T: Elem>(x: T) -> T {
    T::of_f64(ln_f64(x.as_f64()))
}

/// e^x in `T`: [`exp_f64`], or for f32 [`exp_single_f64`], rounded.
#[inline(always)]
pub fn exp<T: Elem>(x: T) -> T {
    T::of_f64(if matches!(T::DTYPE, DType::F32) { exp_single_f64(x.as_f64()) } else { exp_f64(x.as_f64()) })
}

/// [`tanh_f64`] in `T`.
#[inline(always)]
pub fn tanh<T: Elem>(x: T) -> T {
    T::of_f64(tanh_f64(x.as_f64()))
}

/// [`sigmoid_f64`] in `T`.
#[inline(always)]
pub fn sigmoid<T: Elem>(x: T) -> T {
    T::of_f64(sigmoid_f64(x.as_f64()))
}

// sin and cos. The reduction by π/2 is exact enough only up to `TRIG_RANGE`; beyond it (and for
// NaN and the infinities) the functions return libm's value, which the slice loop fills in a
// second pass (`map_trig`) so that its main loop stays without branches.

/// π/2 in four parts, fdlibm's `pio2_1`, `pio2_2`, `pio2_3` and `pio2_3t` (by bits): the first
/// three have 33 significant bits each, so `n * PIO2_k` is exact for `|n| <= 2^20`; with the
/// fourth they carry 152 bits of π/2.
const PIO2_1: f64 = f64::from_bits(0x3ff9_21fb_5440_0000);
const PIO2_2: f64 = f64::from_bits(0x3dd0_b461_1a60_0000);
const PIO2_3: f64 = f64::from_bits(0x3ba3_198a_2e00_0000);
const PIO2_3T: f64 = f64::from_bits(0x397b_839a_2520_49c1);
/// The bound B of the fast reduction: 2^20 π/2 (~1.647e6), where `n = round(x 2/π)` reaches
/// 2^20 and the products `n * PIO2_k` stop being exact.
pub const TRIG_RANGE: f64 = f64::from_bits(0x4139_21fb_5444_2d18);

/// fdlibm's minimax coefficients of `sin(r) = r + S1 r^3 + ... + S6 r^13` on |r| <= π/4.
const SIN_C: [f64; 6] = [
    f64::from_bits(0xbfc5_5555_5555_5549),
    f64::from_bits(0x3f81_1111_1110_f8a6),
    f64::from_bits(0xbf2a_01a0_19c1_61d5),
    f64::from_bits(0x3ec7_1de3_57b1_fe7d),
    f64::from_bits(0xbe5a_e5e6_8a2b_9ceb),
    f64::from_bits(0x3de5_d93a_5acf_d57c),
];
/// fdlibm's minimax coefficients of `cos(r) = 1 - r^2/2 + C1 r^4 + ... + C6 r^14` on |r| <= π/4.
const COS_C: [f64; 6] = [
    f64::from_bits(0x3fa5_5555_5555_554c),
    f64::from_bits(0xbf56_c16c_16c1_5177),
    f64::from_bits(0x3efa_01a0_19cb_1590),
    f64::from_bits(0xbe92_7e4f_809c_52ad),
    f64::from_bits(0x3e21_ee9e_bdb4_b1c4),
    f64::from_bits(0xbda8_fae9_be88_38d4),
];

/// Whether `x` is within the fast reduction's range, |x| <= B (false for NaN).
#[inline(always)]
fn in_trig_range(x: f64) -> bool {
    x.abs() <= TRIG_RANGE
}

/// Cody-Waite by π/2 for |x| <= B: `x = n π/2 + r + tail` with |r| <= π/4 (a hair more where
/// `x 2/π` rounds across a half) and |tail| <= half an ulp of r, as `(n + SHIFTER, r, tail)`.
///
/// Why it is exact enough: `n * PIO2_k` is exact (33 + 20 bits), and `x - n * PIO2_1` too
/// (within a factor 2 of each other: Sterbenz). Where n != 0, |x| >= ~π/4 lies on the grid of
/// 2^-53, so `t1` and `s2` lie on the grid of 2^-66, and `n * PIO2_2 < 2^-13`,
/// `n * PIO2_3 < 2^-48` on those of 2^-66 and 2^-101: each subtraction below either is exact or
/// has a result far larger than what it subtracts, so its rounding error `(a - s) - w` is
/// computed exactly and goes into the tail. The tail's own roundings and `n * PIO2_3T`'s are
/// below 2^-130, against an |r| that for doubles never falls below about 2^-61 (the closest a
/// double comes to a multiple of π/2), so r + tail is good to ~2^-69 relative at worst.
#[inline(always)]
fn split_pio2(x: f64) -> (f64, f64, f64) {
    let shifted = x * std::f64::consts::FRAC_2_PI + SHIFTER;
    let n = shifted - SHIFTER;
    let t1 = x - n * PIO2_1;
    let w2 = n * PIO2_2;
    let s2 = t1 - w2;
    let e2 = (t1 - s2) - w2;
    let w3 = n * PIO2_3;
    let s3 = s2 - w3;
    let e3 = (s2 - s3) - w3;
    let tail = (e2 + e3) - n * PIO2_3T;
    let r = s3 + tail;
    (shifted, r, (s3 - r) + tail)
}

/// sin(r + y) for |r| <= ~π/4 and a tail |y| <= half an ulp of r (fdlibm's `__kernel_sin`:
/// `r + S1 r^3 + r^5 P(r^2)`, plus `y cos r ~ y (1 - r^2 / 2)`), the polynomial in two halves
/// for a shorter dependency chain.
#[inline(always)]
fn sin_kernel(r: f64, y: f64) -> f64 {
    let z = r * r;
    let z2 = z * z;
    let p = (SIN_C[1] + z * (SIN_C[2] + z * SIN_C[3])) + z * z2 * (SIN_C[4] + z * SIN_C[5]);
    let v = z * r;
    r - ((z * (0.5 * y - v * p) - y) - v * SIN_C[0])
}

/// cos(r + y) for |r| <= ~π/4 (fdlibm's `__kernel_cos`, FreeBSD's form: `1 - r^2/2` as `w` plus
/// its exact rounding error, so that the result rounds once near 1; `- r y` for the tail).
#[inline(always)]
fn cos_kernel(r: f64, y: f64) -> f64 {
    let z = r * r;
    let z2 = z * z;
    let p = z * (COS_C[0] + z * (COS_C[1] + z * COS_C[2])) + z2 * z2 * (COS_C[3] + z * (COS_C[4] + z * COS_C[5]));
    let half_z = 0.5 * z;
    let w = 1.0 - half_z;
    w + (((1.0 - w) - half_z) + (z * p - r * y))
}

/// sin(x) for |x| <= B, or cos(x) with `quadrant_shift` 1 (cos x = sin(x + π/2)): both kernels,
/// the one of quadrant `n mod 4` chosen and its sign flipped by selects and bit operations on
/// the low bits of `n + SHIFTER`, which hold n in two's complement. Garbage beyond B.
#[inline(always)]
fn sin_quadrant_f64(x: f64, quadrant_shift: u64) -> f64 {
    let (shifted, r, y) = split_pio2(x);
    let q = shifted.to_bits().wrapping_add(quadrant_shift);
    let (s, c) = (sin_kernel(r, y), cos_kernel(r, y));
    let v = if q & 1 == 0 { s } else { c };
    f64::from_bits(v.to_bits() ^ ((q & 2) << 62))
}

/// sin(x) for |x| <= B (garbage beyond it, NaN for NaN): the loop body of [`map_trig`].
#[inline(always)]
fn sin_in_range_f64(x: f64) -> f64 {
    // The reduction adds +0 to r, which turns -0 into +0: sin(-0) is -0.
    if x == 0.0 { x } else { sin_quadrant_f64(x, 0) }
}

/// cos(x) for |x| <= B (garbage beyond it).
#[inline(always)]
fn cos_in_range_f64(x: f64) -> f64 {
    sin_quadrant_f64(x, 1)
}

/// sin(x) in f64 (module docs: accuracy): the branch-free reduction and kernels for |x| <= B,
/// libm's `sin` beyond (and for NaN and the infinities, NaN).
#[inline(always)]
pub fn sin_f64(x: f64) -> f64 {
    if in_trig_range(x) { sin_in_range_f64(x) } else { x.sin() }
}

/// cos(x) in f64, as [`sin_f64`].
#[inline(always)]
pub fn cos_f64(x: f64) -> f64 {
    if in_trig_range(x) { cos_in_range_f64(x) } else { x.cos() }
}

/// sin(x) in `T`: [`sin_f64`], for f32 computed in f64 and rounded (beyond B too: libm's f64
/// sin rounded, within an ulp of its f32 sin and as the f64 path).
#[inline(always)]
pub fn sin<T: Elem>(x: T) -> T {
    T::of_f64(sin_f64(x.as_f64()))
}

/// cos(x) in `T`, as [`sin`].
#[inline(always)]
pub fn cos<T: Elem>(x: T) -> T {
    T::of_f64(cos_f64(x.as_f64()))
}

/// `out[i] = sin(xs[i])` or cos, equal to [`sin`] / [`cos`] element for element. A select of
/// libm's value in the main loop would call libm for every element, and a branch would stop the
/// loop vectorising; so the main loop computes the in-range result for every element, a second
/// one (an or of compares, which vectorises) finds whether any lies beyond B, and only then a
/// third replaces those few by libm's. The workloads' angles are a few radians: the third loop
/// does not run for them.
#[inline(always)]
fn map_trig<T: Elem>(xs: &[T], out: &mut [T], in_range: impl Fn(f64) -> f64, libm: impl Fn(f64) -> f64) {
    map_with(xs, out, |x| T::of_f64(in_range(x.as_f64())));
    if xs.iter().fold(false, |beyond, x| beyond | !in_trig_range(x.as_f64())) {
        for (o, &x) in out.iter_mut().zip(xs) {
            if !in_trig_range(x.as_f64()) {
                *o = T::of_f64(libm(x.as_f64()));
            }
        }
    }
}

/// Whether [`map_unary`] has a vector loop for `op`.
pub fn vectorised(op: UnaryOp) -> bool {
    matches!(op, UnaryOp::Exp | UnaryOp::Log | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Sin | UnaryOp::Cos)
}

#[inline(always)]
fn map_with<T: Elem>(xs: &[T], out: &mut [T], f: impl Fn(T) -> T) {
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = f(x);
    }
}

#[inline(always)]
fn map_unary_base<T: Elem>(op: UnaryOp, xs: &[T], out: &mut [T]) {
    match op {
        UnaryOp::Exp => map_with(xs, out, exp),
        UnaryOp::Log => map_with(xs, out, ln),
        UnaryOp::Tanh => map_with(xs, out, tanh),
        UnaryOp::Sin => map_trig(xs, out, sin_in_range_f64, f64::sin),
        UnaryOp::Cos => map_trig(xs, out, cos_in_range_f64, f64::cos),
        _ => map_with(xs, out, sigmoid),
    }
}

simd::widest!(map_unary_base, map_unary_avx2, <T: Elem>(op: UnaryOp, xs: &[T], out: &mut [T]));

/// `out[i] = op(xs[i])` for an op with a vector loop ([`vectorised`]; others are an error of
/// the caller: sigmoid runs instead).
pub fn map_unary<T: Elem>(op: UnaryOp, xs: &[T], out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if op == UnaryOp::Exp
        && simd::avx512()
        && let (Some(xs), Some(out)) = (simd::f64s(xs), simd::f64s_mut(out))
    {
        // SAFETY: the running CPU has AVX-512 (F, DQ, VL).
        return unsafe { exp_f64_avx512(xs, out) };
    }
    simd::dispatch!(map_unary_base | map_unary_avx2(op, xs, out))
}

/// [`EXP2_TABLE`]'s rounded entries, then its rests, each as four vectors of eight.
#[cfg(target_arch = "x86_64")]
const EXP2_COLUMNS: [[f64; EXP2_STEPS]; 2] = {
    let mut c = [[0.0; EXP2_STEPS]; 2];
    let mut j = 0;
    while j < EXP2_STEPS {
        c[0][j] = EXP2_TABLE[j][0];
        c[1][j] = EXP2_TABLE[j][1];
        j += 1;
    }
    c
};

/// [`exp_f64`] over `xs`, eight lanes at a time with AVX-512: the same operations in the same
/// order (its fused multiply-adds, and intrinsics are never contracted into others), so the
/// same bits, but the table read by permutes of registers that hold it whole, where the
/// compiled loop of `exp_f64` gathers it (two gathers of eight a vector, the slowest
/// instructions of the loop). The last elements (fewer than eight) take `exp_f64` itself.
///
/// # Safety
/// The running CPU has AVX-512 F, DQ and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn exp_f64_avx512(xs: &[f64], out: &mut [f64]) {
    use std::arch::x86_64::*;
    const { assert!(EXP2_STEPS == 32 && STEP_BIAS / EXP2_STEPS as u64 == 2048) };
    let n = xs.len().min(out.len());
    let col = |c: usize, k: usize| {
        // SAFETY: eight elements of a row of 32, in bounds.
        unsafe { _mm512_loadu_pd(EXP2_COLUMNS[c][8 * k..].as_ptr()) }
    };
    let (hi, lo) = ([col(0, 0), col(0, 1), col(0, 2), col(0, 3)], [col(1, 0), col(1, 1), col(1, 2), col(1, 3)]);
    let all = _mm512_set1_pd;
    let (top, bottom, scale) = (all(710.0), all(-746.0), all(LOG2E * EXP2_STEPS as f64));
    let (shifter, ln2_hi, ln2_lo) = (all(SHIFTER), all(LN2_HI / EXP2_STEPS as f64), all(LN2_LO / EXP2_STEPS as f64));
    let c: [__m512d; 5] = std::array::from_fn(|k| all(INV_FACT[k]));
    const { assert!(SHIFTER.to_bits().is_multiple_of(EXP2_STEPS as u64)) };
    let shifter_bits = _mm512_set1_epi64(SHIFTER.to_bits() as i64);
    let (bias, one, sixteen) = (_mm512_set1_epi64(STEP_BIAS as i64), _mm512_set1_epi64(1), _mm512_set1_epi64(16));
    // Where every lane lies in (-708, 709), no clamp applies and every result is a normal
    // number, so the scale by 2^n is exact however it is done: one VSCALEFPD by n = floor(k /
    // 32) for the step count k, instead of exp_f64's two exact halves (which a subnormal
    // result needs). A NaN fails the test and takes the whole sequence.
    let (low_end, high_end, per_step) = (all(-708.0), all(709.0), all(1.0 / EXP2_STEPS as f64));
    let whole = n - n % 8;
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 <= n, within both slices.
        let x = unsafe { _mm512_loadu_pd(xs.as_ptr().add(i)) };
        let plain = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(x, low_end) & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(x, high_end);
        // `if x > 710 { 710 } else { x }` is min(710, x): MINPD returns its second operand
        // when the first is not less (a NaN x passes); likewise for the floor.
        let x = if plain == 0xff { x } else { _mm512_max_pd(bottom, _mm512_min_pd(top, x)) };
        let shifted = _mm512_fmadd_pd(x, scale, shifter);
        let nn = _mm512_sub_pd(shifted, shifter);
        let r = _mm512_fnmadd_pd(nn, ln2_lo, _mm512_fnmadd_pd(nn, ln2_hi, x));
        // k mod 32 is the low five bits of the shifted sum's (SHIFTER's are zeros): bits 0-3
        // pick among sixteen entries of two registers, bit 4 the half.
        let shifted_bits = _mm512_castpd_si512(shifted);
        let upper = _mm512_test_epi64_mask(shifted_bits, sixteen);
        let pick = |t: &[__m512d; 4]| {
            let low = _mm512_permutex2var_pd(t[0], shifted_bits, t[1]);
            let high = _mm512_permutex2var_pd(t[2], shifted_bits, t[3]);
            _mm512_mask_blend_pd(upper, low, high)
        };
        let (h, l) = (pick(&hi), pick(&lo));
        let r2 = _mm512_mul_pd(r, r);
        let first = _mm512_fmadd_pd(c[1], r, c[0]);
        let second = _mm512_fmadd_pd(c[4], r2, _mm512_fmadd_pd(c[3], r, c[2]));
        let em1 = _mm512_fmadd_pd(r2, _mm512_fmadd_pd(second, r2, first), r);
        let mantissa = _mm512_add_pd(h, _mm512_fmadd_pd(h, em1, l));
        let y = if plain == 0xff {
            _mm512_scalef_pd(mantissa, _mm512_mul_pd(nn, per_step))
        } else {
            let steps = _mm512_add_epi64(_mm512_sub_epi64(shifted_bits, shifter_bits), bias);
            let biased = _mm512_srli_epi64::<5>(steps);
            let half = _mm512_srli_epi64::<1>(biased);
            let field1 = _mm512_sub_epi64(half, one);
            let field2 = _mm512_sub_epi64(_mm512_sub_epi64(biased, half), one);
            let s1 = _mm512_castsi512_pd(_mm512_slli_epi64::<52>(field1));
            let s2 = _mm512_castsi512_pd(_mm512_slli_epi64::<52>(field2));
            _mm512_mul_pd(_mm512_mul_pd(mantissa, s1), s2)
        };
        // SAFETY: as the load.
        unsafe { _mm512_storeu_pd(out.as_mut_ptr().add(i), y) };
    }
    for (o, &x) in out[whole..n].iter_mut().zip(&xs[whole..n]) {
        *o = exp_f64(x);
    }
}

/// `v[i] = exp(v[i])` in the vector loop.
pub fn map_exp_in_place<T: Elem>(v: &mut [T]) {
    simd::dispatch!(exp_in_place_base | exp_in_place_avx2(v))
}

#[inline(always)]
fn exp_in_place_base<T: Elem>(v: &mut [T]) {
    v.iter_mut().for_each(|x| *x = exp(*x));
}

simd::wider!(exp_in_place_base, exp_in_place_avx2, <T: Elem>(v: &mut [T]));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_of_ln2_is_ln2() {
        assert_eq!(LN2_HI.to_bits() & 0x1f_ffff, 0, "LN2_HI must leave the low mantissa bits free");
        assert!((LN2_HI + LN2_LO - std::f64::consts::LN_2).abs() <= f64::EPSILON * 0.5);
    }

    /// Distance in units in the last place between two finite f64 of one sign.
    fn ulps(a: f64, b: f64) -> u64 {
        if a == b {
            return 0;
        }
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    /// Points spread over [lo, hi]: a fixed irrational stride, so no pattern hides errors.
    fn points(lo: f64, hi: f64, n: usize) -> impl Iterator<Item = f64> {
        (0..n).map(move |i| lo + (hi - lo) * ((i as f64 * 0.618_033_988_749_894_9) % 1.0))
    }

    #[test]
    fn exp_is_within_one_ulp_of_libm_over_the_whole_range() {
        let mut worst = 0;
        for x in points(-708.0, 709.7, 200_000).chain(points(-1.0, 1.0, 50_000)) {
            worst = worst.max(ulps(exp_f64(x), x.exp()));
        }
        assert!(worst <= 1, "worst {worst} ulps");
        // Subnormal results: within one unit of the smallest subnormal.
        for x in points(-745.0, -708.5, 10_000) {
            let (a, b) = (exp_f64(x), x.exp());
            assert!((a - b).abs() <= f64::from_bits(1), "exp({x}) = {a:e} vs {b:e}");
        }
    }

    /// f32 bits of one sign are ordered as the values, subnormals included.
    fn ulps32(a: f32, b: f32) -> u32 {
        (a.to_bits() as i32 - b.to_bits() as i32).unsigned_abs()
    }

    #[test]
    fn f32_exp_is_within_one_ulp_of_libm_and_mostly_the_double_exp_rounded() {
        let (mut worst, mut differ, mut total) = (0, 0, 0);
        // Normal results, then subnormal ones (below e^-87.34), then the edges of overflow.
        for x in points(-87.0, 88.7, 400_000).chain(points(-1.0, 1.0, 100_000)).chain(points(-103.9, -87.4, 50_000)) {
            let x = x as f32;
            let (got, libm) = (exp(x), x.exp());
            worst = worst.max(ulps32(got, libm));
            differ += usize::from(got != exp_f64(x as f64) as f32);
            total += 1;
        }
        assert!(worst <= 1, "worst {worst} ulps");
        // The degree-9 polynomial moves the rounding of few values (5 of these 550 000; at
        // degree 7, 3391).
        assert!(differ * 10_000 <= total, "{differ} of {total} differ from exp_f64 rounded");
        assert_eq!((exp(88.72f32).is_finite(), exp(88.73f32)), (true, f32::INFINITY));
        assert_eq!((exp(200.0f32), exp(f32::INFINITY)), (f32::INFINITY, f32::INFINITY));
        assert_eq!((exp(-103.0f32) > 0.0, exp(-104.0f32), exp(f32::NEG_INFINITY)), (true, 0.0, 0.0));
        assert_eq!(exp(-103.0f32).to_bits(), ((-103.0f64).exp() as f32).to_bits());
        assert!(exp(f32::NAN).is_nan());
        assert_eq!((exp(0.0f32), exp(-0.0f32)), (1.0, 1.0));
    }

    /// The table's entries against one another in double-double (`2^(j/32)` squared is the
    /// entry of 2j, or twice that of 2j - 32: equal to 2^-80, the 85 bits of ln 2 the series
    /// starts from being the limit, some 2^-27 of an ulp) and against libm's `exp2`.
    #[test]
    fn the_exp2_table_is_its_own_square_to_double_double_precision() {
        let entry = |j: usize| DoubleDouble(EXP2_TABLE[j][0], EXP2_TABLE[j][1]);
        assert_eq!(EXP2_TABLE[0], [1.0, 0.0]);
        for (j, &[hi, lo]) in EXP2_TABLE.iter().enumerate() {
            let square = dd_mul(entry(j), entry(j));
            let (k, scale) = if 2 * j < EXP2_STEPS { (2 * j, 1.0) } else { (2 * j - EXP2_STEPS, 2.0) };
            let want = entry(k);
            let diff = (square.0 - scale * want.0) + (square.1 - scale * want.1);
            assert!(diff.abs() <= 2f64.powi(-80), "2^({j}/32) squared is {diff:e} off");
            assert!(ulps(hi, (j as f64 / 32.0).exp2()) <= 1, "entry {j}");
            assert!(lo.abs() <= hi * f64::EPSILON);
        }
    }

    #[test]
    fn exp_special_values() {
        assert!(exp_f64(f64::NAN).is_nan());
        assert_eq!(exp_f64(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp_f64(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_f64(709.8), f64::INFINITY);
        assert!(exp_f64(709.78).is_finite());
        assert_eq!(exp_f64(-746.0), 0.0);
        assert_eq!(exp_f64(0.0), 1.0);
        assert_eq!(exp_f64(-0.0), 1.0);
        assert!(ulps(exp_f64(1.0), std::f64::consts::E) <= 1);
        assert_eq!(exp(1.0f32), std::f32::consts::E);
    }

    #[test]
    fn ln_is_within_one_ulp_of_libm_over_the_whole_range() {
        let mut worst = 0;
        // Magnitudes from the smallest subnormal to the largest finite, evenly in the exponent;
        // then around 1, where ln's result is small and its relative error shows most; then
        // arguments with long runs of ones and zeros in the mantissa.
        let wide = points(-1074.0, 1023.99, 300_000).map(f64::exp2);
        let near_one = points(-1e-3, 1e-3, 50_000).map(|d| 1.0 + d).chain(points(0.7, 1.5, 50_000));
        let patterns = (0..4096u64)
            .map(|i| f64::from_bits(0x3ff0_0000_0000_0000 | ((i * 0x0001_0000_0100_0011) & 0x000f_ffff_ffff_ffff)));
        for x in wide.chain(near_one).chain(patterns) {
            worst = worst.max(ulps(ln_f64(x), x.ln()));
        }
        assert!(worst <= 1, "worst {worst} ulps");
        // f32: the f64 result rounded, within 1 ulp of libm's f32 ln.
        let mut worst32 = 0;
        for x in points(-149.0, 127.99, 200_000).map(|e| e.exp2() as f32).filter(|x| *x > 0.0) {
            worst32 = worst32.max(ulps32(ln(x), x.ln()));
        }
        assert!(worst32 <= 1, "f32 worst {worst32} ulps");
    }

    #[test]
    fn ln_special_values() {
        assert!(ln_f64(f64::NAN).is_nan() && ln_f64(-1.0).is_nan() && ln_f64(f64::NEG_INFINITY).is_nan());
        assert!(ln_f64(-f64::from_bits(1)).is_nan());
        assert_eq!((ln_f64(0.0), ln_f64(-0.0)), (f64::NEG_INFINITY, f64::NEG_INFINITY));
        assert_eq!(ln_f64(f64::INFINITY), f64::INFINITY);
        assert_eq!(ln_f64(1.0).to_bits(), 0.0f64.to_bits());
        assert!(ulps(ln_f64(std::f64::consts::E), 1.0) <= 1);
        assert!(ulps(ln_f64(2.0), std::f64::consts::LN_2) <= 1);
        assert!(ulps(ln_f64(f64::MAX), f64::MAX.ln()) <= 1);
        assert!(ulps(ln_f64(f64::from_bits(1)), -744.4400719213812) <= 1);
        assert_eq!((ln(0.0f32), ln(1.0f32)), (f32::NEG_INFINITY, 0.0));
        assert!(ln(-1.0f32).is_nan() && ln(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_and_sigmoid_are_within_three_ulps_of_their_definitions() {
        let (mut wt, mut ws) = (0, 0);
        for x in points(-25.0, 25.0, 200_000).chain(points(-1e-3, 1e-3, 20_000)) {
            wt = wt.max(ulps(tanh_f64(x), x.tanh()));
            let want = if x >= 0.0 { 1.0 / (1.0 + (-x).exp()) } else { x.exp() / (1.0 + x.exp()) };
            ws = ws.max(ulps(sigmoid_f64(x), want));
        }
        assert!(wt <= 3 && ws <= 2, "tanh worst {wt} ulps, sigmoid worst {ws}");
        assert_eq!(tanh_f64(1e-300), 1e-300);
        assert_eq!(tanh_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!((tanh_f64(40.0), tanh_f64(f64::NEG_INFINITY)), (1.0, -1.0));
        assert!(tanh_f64(f64::NAN).is_nan() && sigmoid_f64(f64::NAN).is_nan());
        assert_eq!((sigmoid_f64(-1000.0), sigmoid_f64(1000.0), sigmoid_f64(0.0)), (0.0, 1.0, 0.5));
        assert_eq!((sigmoid(-1000.0f32), sigmoid(1000.0f32)), (0.0, 1.0));
    }

    #[test]
    fn the_split_of_pio2_is_pio2() {
        for part in [PIO2_1, PIO2_2, PIO2_3] {
            assert_eq!(part.to_bits() & 0xf_ffff, 0, "{part:e} must have at most 33 significant bits");
        }
        // libm's sin(fl(π)) is π - fl(π) (to 2^-160), so π/2 - fl(π/2) is half of it; the parts
        // past fl(π/2) must add up to that, to the last bit of a double.
        let beyond = ((PIO2_1 - std::f64::consts::FRAC_PI_2) + PIO2_2) + (PIO2_3 + PIO2_3T);
        assert!(ulps(beyond, std::f64::consts::PI.sin() / 2.0) <= 1, "{beyond:e}");
        assert_eq!(TRIG_RANGE, 1_048_576.0 * std::f64::consts::FRAC_PI_2);
    }

    // fdlibm's decimals, with all 21 of their digits.
    #[allow(clippy::excessive_precision)]
    #[test]
    fn the_kernel_coefficients_are_fdlibms() {
        // fdlibm states them in decimal too (k_sin.c, k_cos.c); the bits must be those numbers.
        let sin_c = [
            -1.666_666_666_666_663_243_48e-1,
            8.333_333_333_322_489_461_24e-3,
            -1.984_126_982_985_794_931_34e-4,
            2.755_731_370_707_006_767_89e-6,
            -2.505_076_025_340_686_341_95e-8,
            1.589_690_995_211_550_102_21e-10,
        ];
        let cos_c = [
            4.166_666_666_666_660_190_37e-2,
            -1.388_888_888_887_410_957_49e-3,
            2.480_158_728_947_672_941_78e-5,
            -2.755_731_435_139_066_330_35e-7,
            2.087_572_321_298_174_827_90e-9,
            -1.135_964_755_778_819_482_65e-11,
        ];
        assert_eq!((SIN_C, COS_C), (sin_c, cos_c));
    }

    /// Arguments for sin and cos up to the bound: evenly spread; magnitudes from the smallest
    /// subnormal up, evenly in the exponent, both signs; the doubles nearest multiples of π/2 and
    /// their neighbours (r far smaller than x: the reduction's cancellation) and points around
    /// the odd multiples of π/4 (where the quadrant changes); and around the small multiples of
    /// π/2 at a little distance.
    fn trig_points() -> impl Iterator<Item = f64> {
        let even = points(-TRIG_RANGE, TRIG_RANGE, 300_000);
        let top = TRIG_RANGE.log2();
        let wide =
            points(-1074.0, top, 100_000).enumerate().map(|(i, e)| if i % 2 == 0 { e.exp2() } else { -e.exp2() });
        let multiples = points(-1_048_576.0, 1_048_576.0, 40_000).flat_map(|k| {
            let k = k.round();
            let at = k * std::f64::consts::FRAC_PI_2;
            let between = (k + 0.5) * std::f64::consts::FRAC_PI_2;
            [at, at.next_up(), at.next_down(), between, between.next_up(), between.next_down()]
        });
        let small =
            points(-1e-4, 1e-4, 20_000).flat_map(|d| (-8..=8).map(move |k| k as f64 * std::f64::consts::FRAC_PI_2 + d));
        even.chain(wide).chain(multiples).chain(small).filter(|x| x.abs() <= TRIG_RANGE)
    }

    #[test]
    fn sin_and_cos_are_within_one_ulp_of_libm_up_to_the_bound() {
        let (mut ws, mut wc, mut total) = (0, 0, 0);
        for x in trig_points() {
            let (s, c) = (sin_f64(x), cos_f64(x));
            let (ds, dc) = (ulps(s, x.sin()), ulps(c, x.cos()));
            assert!(ds <= 1 && dc <= 1, "x = {x:e}: sin {s:e} vs {:e}, cos {c:e} vs {:e}", x.sin(), x.cos());
            (ws, wc, total) = (ws.max(ds), wc.max(dc), total + 1);
        }
        assert!(total > 700_000 && ws <= 1 && wc <= 1, "sin worst {ws} ulps, cos worst {wc}");
        // Values worked out elsewhere: sin(fl(π)) = π - fl(π), cos(fl(π/2)) = π/2 - fl(π/2).
        assert!(ulps(sin_f64(std::f64::consts::PI), 1.224_646_799_147_353_2e-16) <= 1);
        assert!(ulps(cos_f64(std::f64::consts::FRAC_PI_2), 6.123_233_995_736_766e-17) <= 1);
        assert_eq!((sin_f64(std::f64::consts::FRAC_PI_2), cos_f64(std::f64::consts::PI)), (1.0, -1.0));
    }

    #[test]
    fn f32_sin_and_cos_are_within_one_ulp_of_libm() {
        let (mut ws, mut wc) = (0, 0);
        let multiples = points(-1e6, 1e6, 50_000).map(|k| (k.round() * std::f64::consts::FRAC_PI_2) as f32);
        let wide = points(-149.0, 20.6, 100_000)
            .enumerate()
            .map(|(i, e)| e.exp2() as f32 * if i % 2 == 0 { 1.0 } else { -1.0 });
        let xs = points(-TRIG_RANGE, TRIG_RANGE, 300_000)
            .map(|x| x as f32)
            .chain(wide)
            .chain(points(-10.0, 10.0, 100_000).map(|x| x as f32))
            .chain(multiples.flat_map(|x| [x, x.next_up(), x.next_down()]))
            .filter(|x| in_trig_range(*x as f64));
        for x in xs {
            let (ds, dc) = (ulps32(sin(x), x.sin()), ulps32(cos(x), x.cos()));
            assert!(
                ds <= 1 && dc <= 1,
                "x = {x:e}: sin {:e} vs {:e}, cos {:e} vs {:e}",
                sin(x),
                x.sin(),
                cos(x),
                x.cos()
            );
            (ws, wc) = (ws.max(ds), wc.max(dc));
        }
        assert!(ws <= 1 && wc <= 1, "f32 sin worst {ws} ulps, cos worst {wc}");
    }

    #[test]
    fn sin_and_cos_special_values() {
        assert_eq!((sin_f64(0.0).to_bits(), sin_f64(-0.0).to_bits()), (0.0f64.to_bits(), (-0.0f64).to_bits()));
        assert_eq!((cos_f64(0.0), cos_f64(-0.0)), (1.0, 1.0));
        assert_eq!((sin(-0.0f32).to_bits(), cos(-0.0f32)), ((-0.0f32).to_bits(), 1.0));
        for x in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(sin_f64(x).is_nan() && cos_f64(x).is_nan(), "{x}");
            assert!(sin(x as f32).is_nan() && cos(x as f32).is_nan(), "{x}");
        }
        // Tiny arguments: sin x = x (x^3/6 is under half an ulp), cos x = 1, subnormals too.
        for x in [f64::from_bits(1), 1e-310, 2.2e-308, 1e-200, 1e-9, 3.7e-9] {
            assert_eq!((sin_f64(x), sin_f64(-x), cos_f64(x), cos_f64(-x)), (x, -x, 1.0, 1.0), "{x:e}");
        }
        assert_eq!((sin(1e-45f32), sin(-1e-40f32), cos(1e-40f32)), (1e-45, -1e-40, 1.0));
        // Beyond the bound, libm's values bit for bit; in f32 libm's f64 values rounded, within an
        // ulp of libm's f32 sin and cos.
        let beyond = [TRIG_RANGE.next_up(), 1.7e6, 1e7, 3.0e9, 1e22, 1e300, f64::MAX];
        for x in beyond.into_iter().flat_map(|x| [x, -x]) {
            assert_eq!(sin_f64(x).to_bits(), x.sin().to_bits(), "sin {x:e}");
            assert_eq!(cos_f64(x).to_bits(), x.cos().to_bits(), "cos {x:e}");
        }
        for x in points(1.7e6, 3e38, 10_000).flat_map(|x| [x as f32, -x as f32]) {
            let wide = x as f64;
            assert_eq!((sin(x), cos(x)), (wide.sin() as f32, wide.cos() as f32), "f32 {x:e}");
            assert!(ulps32(sin(x), x.sin()) <= 1 && ulps32(cos(x), x.cos()) <= 1, "f32 {x:e}");
        }
        assert!(sin(f32::MAX).is_finite() && ulps32(cos(f32::MAX), f32::MAX.cos()) <= 1);
        // At the bound itself, the fast path.
        assert!(ulps(sin_f64(TRIG_RANGE), TRIG_RANGE.sin()) <= 1 && ulps(cos_f64(-TRIG_RANGE), TRIG_RANGE.cos()) <= 1);
    }

    /// The AVX-512 loop of exp (table by permutes) gives `exp_f64`'s bits over the whole range:
    /// overflow, gradual underflow, every table entry, NaN and the infinities, and lengths that
    /// leave a remainder.
    #[test]
    fn the_avx512_exp_equals_the_scalar_exp_bit_for_bit() {
        if !simd::avx512() {
            let why = "this CPU has no AVX-512, so map_unary's exp is the generic loop";
            return adgauge_testkit::skip("avx512", why, "a CPU with AVX-512 F, DQ and VL");
        }
        let specials = [f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 709.78, 709.79, -708.4];
        let steps = (0..64).map(|j| j as f64 * std::f64::consts::LN_2 / 32.0);
        let xs: Vec<f64> =
            points(-800.0, 800.0, 200_001).chain(specials).chain(steps).chain(points(-1e-9, 1e-9, 77)).collect();
        for len in [xs.len(), xs.len() - 3, 7, 0] {
            let mut out = vec![1.5; len];
            map_unary(UnaryOp::Exp, &xs[..len], &mut out);
            for (x, y) in xs.iter().zip(&out) {
                assert_eq!(y.to_bits(), exp_f64(*x).to_bits(), "exp({x}) at length {len}");
            }
        }
    }

    #[test]
    fn the_slice_loops_equal_the_scalar_functions() {
        // In range only (sin and cos: no fix-up pass), then with the values beyond sin and cos's
        // bound among them.
        let near: Vec<f64> = points(-30.0, 30.0, 1001).chain([f64::MIN_POSITIVE, -0.0]).collect();
        let far = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e7, -3e9, 1e300, TRIG_RANGE, -TRIG_RANGE.next_up()];
        let mixed: Vec<f64> = near.iter().copied().chain(far).chain(points(-1e6, 1e6, 999)).collect();
        for xs in [near, mixed] {
            let mut out = vec![0.0; xs.len()];
            for (op, f) in [
                (UnaryOp::Exp, exp_f64 as fn(f64) -> f64),
                (UnaryOp::Log, ln_f64),
                (UnaryOp::Tanh, tanh_f64),
                (UnaryOp::Sigmoid, sigmoid_f64),
                (UnaryOp::Sin, sin_f64),
                (UnaryOp::Cos, cos_f64),
            ] {
                map_unary(op, &xs, &mut out);
                for (x, y) in xs.iter().zip(&out) {
                    assert_eq!(y.to_bits(), f(*x).to_bits(), "{op:?}({x})");
                }
            }
            let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
            let mut out32 = vec![0.0f32; xs.len()];
            for (op, f) in [(UnaryOp::Sin, sin::<f32> as fn(f32) -> f32), (UnaryOp::Cos, cos::<f32>)] {
                map_unary(op, &xs32, &mut out32);
                for (x, y) in xs32.iter().zip(&out32) {
                    assert_eq!(y.to_bits(), f(*x).to_bits(), "f32 {op:?}({x})");
                }
            }
        }
    }
}
