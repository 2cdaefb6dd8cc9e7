//! Division by one value repeated (`x / c` over a vector), without a divide instruction per
//! vector where that gives the same bits.
//!
//! A vector divide is the slowest arithmetic instruction there is (about 16 cycles per eight
//! f64 with AVX-512, against one for a multiply), and ode's RK4 step divides every element by
//! 6: a quarter of its compiled primal. Where the CPU has FMA the quotient is instead
//! `q = x * r` with `r = 1 / c` rounded, then one correction, `q + (x - q * c) * r`, both by
//! fused multiply-adds. By Markstein's theorem (Handbook of Floating-Point Arithmetic, 2nd ed.,
//! §4.9), if `r` is `1 / c` correctly rounded and `q` is within one ulp of `x / c`, the
//! remainder `x - q * c` is exact and the corrected quotient is `x / c` correctly rounded:
//! the bits of the divide instruction, for every `x` and `c` where nothing underflows or
//! overflows. The fast path therefore takes only divisors with `|c|` in [2^-60, 2^60], and
//! only vectors of eight whose every `|x|` is in [2^-900, 2^900] (so the quotient, the
//! remainder and every product are normal numbers) or zero (whose quotient is the product
//! `x * r`, a zero of the right sign); any other vector (holding a subnormal, an infinity or
//! a NaN) is divided element by element.

use crate::BinaryOp;

/// The range of `|x|` the fast path takes.
const X_MIN: f64 = f64::from_bits((1023 - 900) << 52);
const X_MAX: f64 = f64::from_bits((1023 + 900) << 52);

/// An f64's sign bit.
const SIGN: u64 = 1 << 63;

/// The magnitudes' bits from `X_MIN`'s to `X_MAX`'s ([`in_range_or_zero`]).
const SPAN: u64 = X_MAX.to_bits() - X_MIN.to_bits();

/// The range of `|c|` the fast path takes.
const C_MIN: f64 = f64::from_bits((1023 - 60) << 52);
const C_MAX: f64 = f64::from_bits((1023 + 60) << 52);

/// Elements checked and divided together.
const GROUP: usize = 8;

/// A divisor the fast path takes, with its reciprocal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Divisor {
    c: f64,
    r: f64,
}

impl Divisor {
    /// `c`, where `|c|` is in the fast path's range.
    pub(crate) fn of(c: f64) -> Option<Divisor> {
        (C_MIN..=C_MAX).contains(&c.abs()).then(|| Divisor { c, r: 1.0 / c })
    }

    /// `c` and its rounded reciprocal.
    pub(crate) fn parts(self) -> (f64, f64) {
        (self.c, self.r)
    }
}

/// The words of the range check ([`in_range_or_zero`]): `X_MIN`'s bits, the span of the
/// magnitudes' bits, and the sign bit. The native loops repeat the check (`compiled::native`).
pub(crate) fn range_bits() -> (u64, u64, u64) {
    (X_MIN.to_bits(), SPAN, SIGN)
}

/// Whether the running CPU has the fused multiply-add the fast path needs in hardware (the
/// baseline copy would call libm's `fma`, slower than the divide it replaces).
pub(crate) fn available() -> bool {
    crate::simd::avx2_fma()
}

/// `out = then(a / d, z)` (`then` none: `a / d`), `z` of one element broadcast: the bits of
/// dividing and then applying `then`, each rounded on its own.
///
/// # Panics
/// Where `a` is shorter than `out`, or `then` is given and `z` is empty or shorter than
/// `out` and longer than one element.
pub(crate) fn div_then(a: &[f64], d: Divisor, then: Option<BinaryOp>, z: &[f64], out: &mut [f64]) {
    if available() {
        // SAFETY: the running CPU has AVX2 and FMA.
        unsafe { div_then_avx2(a, d, then, z, out) }
    } else {
        div_then_base(a, d, then, z, out)
    }
}

crate::simd::widest!(div_then_base, div_then_avx2, (a: &[f64], d: Divisor, then: Option<BinaryOp>, z: &[f64], out: &mut [f64]));

#[inline(always)]
fn div_then_base(a: &[f64], d: Divisor, then: Option<BinaryOp>, z: &[f64], out: &mut [f64]) {
    let one = z.len() == 1;
    match then {
        None => run::<true>(a, d, z, out, |q, _| q),
        Some(BinaryOp::Add) if one => run::<true>(a, d, z, out, |q, z| q + z),
        Some(BinaryOp::Add) => run::<false>(a, d, z, out, |q, z| q + z),
        Some(BinaryOp::Sub) if one => run::<true>(a, d, z, out, |q, z| q - z),
        Some(BinaryOp::Sub) => run::<false>(a, d, z, out, |q, z| q - z),
        Some(BinaryOp::Mul) if one => run::<true>(a, d, z, out, |q, z| q * z),
        Some(BinaryOp::Mul) => run::<false>(a, d, z, out, |q, z| q * z),
        Some(BinaryOp::Div) if one => run::<true>(a, d, z, out, |q, z| q / z),
        Some(BinaryOp::Div) => run::<false>(a, d, z, out, |q, z| q / z),
        Some(other) if one => run::<true>(a, d, z, out, |q, z| crate::kernels::binary(other, q, z)),
        Some(other) => run::<false>(a, d, z, out, |q, z| crate::kernels::binary(other, q, z)),
    }
}

/// The loop for one shape of `z` (`ONE`: one element broadcast, or none read).
#[inline(always)]
fn run<const ONE: bool>(a: &[f64], d: Divisor, z: &[f64], out: &mut [f64], g: impl Fn(f64, f64) -> f64) {
    let n = out.len();
    let a = &a[..n];
    let z0 = z.first().copied().unwrap_or(0.0);
    // `z`'s group at each group of `out` (the broadcast value where ONE).
    let zs = |from: usize| -> [f64; GROUP] {
        if ONE { [z0; GROUP] } else { z[from..from + GROUP].try_into().unwrap_or([z0; GROUP]) }
    };
    let whole = n - n % GROUP;
    for (k, (o, x)) in out[..whole].chunks_exact_mut(GROUP).zip(a[..whole].chunks_exact(GROUP)).enumerate() {
        let zk = zs(k * GROUP);
        // Every lane in range or a zero: one fold of integer comparisons kept in vectors.
        let fast = x.iter().fold(true, |all, &v| all & in_range_or_zero(v));
        if fast {
            for ((o, &x), &z) in o.iter_mut().zip(x).zip(&zk) {
                let q = x * d.r;
                let e = (-q).mul_add(d.c, x);
                // The corrected quotient has the product's sign but where `x` is a zero, whose
                // quotient is the product (a zero of the right sign) and whose correction adds
                // +0 to -0: the product's sign bit put back makes it so, without a select.
                let y = e.mul_add(d.r, q);
                *o = g(f64::from_bits(y.to_bits() | (q.to_bits() & SIGN)), z);
            }
        } else {
            divide(x, d.c, &zk, o, &g);
        }
    }
    for i in whole..n {
        out[i] = g(a[i] / d.c, if ONE { z0 } else { z[i] });
    }
}

/// Whether `|x|` is in `[X_MIN, X_MAX]` or zero: a positive f64's bits order as its value, so
/// the range test is one unsigned compare of the magnitude's bits (below `X_MIN`, the
/// subtraction wraps past the span; NaN and the infinities lie above `X_MAX`).
#[inline(always)]
fn in_range_or_zero(x: f64) -> bool {
    let bits = x.to_bits() & !SIGN;
    (bits.wrapping_sub(X_MIN.to_bits()) <= SPAN) | (bits == 0)
}

/// `out = g(x / c, z)` by the divide instruction: out of line, so that the compiler does not
/// turn the fast path's branch into a select that divides every group anyway.
#[cold]
#[inline(never)]
fn divide(x: &[f64], c: f64, z: &[f64], out: &mut [f64], g: &impl Fn(f64, f64) -> f64) {
    for ((o, &x), &z) in out.iter_mut().zip(x).zip(z) {
        *o = g(x / c, z);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a seeded stream of 64-bit values.
    struct Stream(u64);

    impl Stream {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// An integer in `lo..=hi`.
        fn range(&mut self, lo: i64, hi: i64) -> i64 {
            lo + (self.next() % (hi - lo + 1) as u64) as i64
        }
    }

    fn quotients(xs: &[f64], c: f64) -> Vec<u64> {
        let d = Divisor::of(c).unwrap();
        let mut out = vec![0.0; xs.len()];
        div_then(xs, d, None, &[], &mut out);
        out.iter().map(|q| q.to_bits()).collect()
    }

    /// Every quotient is the divide instruction's, bit for bit: over random bit patterns of
    /// every exponent the fast path takes and beyond it, at its range's edges, and at the
    /// values it leaves to the divide (zeros, subnormals, infinities, NaN), in every position
    /// of a group and in the tail; for divisors of every kind the range takes.
    #[test]
    fn quotients_are_the_divide_instructions_bit_for_bit() {
        let mut rng = Stream(6);
        let specials = [
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE / 3.0,
            5e-324,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            X_MIN,
            X_MAX,
            -X_MIN,
            X_MIN * (1.0 - f64::EPSILON),
            X_MIN * 2f64.powi(-60),
            -X_MIN * 3.5e-10,
            X_MAX * (1.0 + f64::EPSILON),
            f64::MAX,
            1.0,
            6.0,
            -3.0,
        ];
        let divisors = [
            6.0,
            3.0,
            -7.0,
            10.0,
            0.1,
            1.5,
            std::f64::consts::PI,
            1.0 / 3.0,
            C_MIN,
            C_MAX,
            -C_MAX,
            2.0,
            0.999_999_999_999_999_9,
            1.0 + f64::EPSILON,
            12_345.678_9,
            1e-18,
            1e18,
        ];
        for &c in &divisors {
            for round in 0..40 {
                let n = 8 * 500 + round % 9;
                let mut xs: Vec<f64> = (0..n)
                    .map(|_| {
                        // Mostly in range, some far outside it.
                        let e = match rng.next() % 10 {
                            0 => rng.range(-1074, 1023),
                            1 => rng.range(-975, -895),
                            _ => rng.range(-900, 900),
                        };
                        let m = rng.next() >> 12;
                        let sign = rng.next() & (1 << 63);
                        f64::from_bits(sign | (((e + 1023).clamp(0, 2046) as u64) << 52) | m)
                    })
                    .collect();
                // A special value in some groups, at every lane, and in the tail.
                for (k, &s) in specials.iter().enumerate() {
                    let at = (k * 97 + round * 13) % n;
                    xs[at] = s;
                }
                let want: Vec<u64> = xs.iter().map(|&x| (x / c).to_bits()).collect();
                let got = quotients(&xs, c);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g == w || (f64::from_bits(*g).is_nan() && f64::from_bits(*w).is_nan()),
                        "{:e} / {c:e}: {:e}, not {:e}",
                        xs[i],
                        f64::from_bits(*g),
                        f64::from_bits(*w)
                    );
                }
            }
        }
    }

    /// Quotients next to a rounding boundary: `x` one ulp either side of `k * c` for many `k`,
    /// where a quotient one ulp off would show.
    #[test]
    fn quotients_next_to_exact_ones_round_as_the_divide() {
        for c in [6.0f64, 3.0, 7.0, 0.1, 1.1, 9.999] {
            let xs: Vec<f64> = (1..4000)
                .flat_map(|k| {
                    let x = k as f64 * c;
                    [f64::from_bits(x.to_bits() - 1), x, f64::from_bits(x.to_bits() + 1)]
                })
                .collect();
            let want: Vec<u64> = xs.iter().map(|&x| (x / c).to_bits()).collect();
            assert_eq!(quotients(&xs, c), want, "c = {c}");
        }
    }

    /// The operation after the quotient, with its operand broadcast or not, is applied as
    /// its own rounding.
    #[test]
    fn the_op_after_the_quotient_rounds_on_its_own() {
        let xs: Vec<f64> = (0..203).map(|i| (i as f64 * 0.37).sin() * 1e3 + 0.25).collect();
        let zs: Vec<f64> = (0..203).map(|i| (i as f64 * 0.11).cos()).collect();
        let d = Divisor::of(6.0).unwrap();
        for then in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max] {
            for z in [&zs[..], &zs[..1]] {
                let mut out = vec![0.0; xs.len()];
                div_then(&xs, d, Some(then), z, &mut out);
                for (i, &x) in xs.iter().enumerate() {
                    let zi = if z.len() == 1 { z[0] } else { z[i] };
                    let want = crate::kernels::binary(then, x / 6.0, zi);
                    assert_eq!(out[i].to_bits(), want.to_bits(), "{then:?} at {i}");
                }
            }
        }
    }

    #[test]
    fn divisors_outside_the_range_are_refused() {
        for c in [0.0, -0.0, 1e-300, 1e300, f64::INFINITY, f64::NAN, C_MIN / 2.0, C_MAX * 2.0] {
            assert!(Divisor::of(c).is_none(), "{c:e}");
        }
        assert!(Divisor::of(C_MIN).is_some() && Divisor::of(-C_MAX).is_some());
    }
}
