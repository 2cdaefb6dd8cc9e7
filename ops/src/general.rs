//! General operators as values: an associative, commutative operator described by data (its
//! name, neutral element, combine function and partials, optionally its "total form", and the
//! same as C expressions for OpenCL/CUDA kernels), so a new operator is a new `static`, not a
//! code change in the devices or the rules.
//!
//! Each function is written once, generic over [`Float`], and monomorphised for f32 and f64 by
//! `general_op!` into plain `fn` pointers: a [`GeneralOp`] is a `static`, and
//! [`crate::HistOp::General`] holds a `&'static GeneralOp`, which keeps `HistOp` `Copy`.
//!
//! Conventions every operator must meet (the rules and the oracle rely on them):
//!
//! * `combine(neutral, x) == x` exactly, so folds may start from the neutral element.
//! * Partials are defined everywhere the rules evaluate them, in particular at neutral points
//!   (`logaddexp(-inf, -inf)` and `hypot(0, 0)` occur in empty bins and running arrays): there
//!   they are 0, never NaN.
//! * A NaN operand makes combine NaN (a histogram's NaN propagates, guide, Histogram rules), and the
//!   partials of an operator that reads its operands NaN too; min/max rank NaN beyond every
//!   number ([`right_wins`]).
//! * Non-smooth operators have asymmetric partials so that the LEFT operand wins ties (min:
//!   `d1(a, b) = [a <= b]`, `d2(a, b) = [b < a]`). The general rule then keeps the special rules'
//!   tie policy (dest and earlier elements win), and `tie_break` names the extremum so forward
//!   rules can use the arg-histogram (a lifted min/max would depend on the reduction order).
//! * The total form, when present, is `d t / d a` for an element (or dest) `a` of a bin whose
//!   final value is `t`, written from `a` and `t` alone. It must not exist for min/max (at a tie
//!   every tied element equals `t`, so it could not pick one winner).

use std::fmt;
use std::hash::{Hash, Hasher};

use num_traits::Float;

use crate::{Elem, Extremum, HistOp};

/// A binary function on one element type.
pub type BinFn<T> = fn(T, T) -> T;

/// The CPU functions of a general operator for one element type.
#[derive(Clone, Copy)]
pub struct GeneralFns<T> {
    /// `a op b`.
    pub combine: BinFn<T>,
    /// d(a op b)/da.
    pub d1: BinFn<T>,
    /// d(a op b)/db.
    pub d2: BinFn<T>,
    /// `total(a, t)`: d t / d a from the element and the final bin value alone.
    pub total: Option<BinFn<T>>,
}

/// The same functions as C expressions over `a` and `b` (`a` and `t` for the total form), for
/// OpenCL/CUDA kernels (`T` names the element type, e.g. `(T)0`).
#[derive(Clone, Copy, Debug)]
pub struct CExprs {
    pub combine: &'static str,
    pub d1: &'static str,
    pub d2: &'static str,
    pub total: Option<&'static str>,
}

/// An associative and commutative operator given as data.
pub struct GeneralOp {
    /// Unique name; `HistOp::from_str` finds the operator by it.
    pub name: &'static str,
    /// The neutral element: `combine(neutral, x) == x` exactly.
    pub neutral: f64,
    pub f32: GeneralFns<f32>,
    pub f64: GeneralFns<f64>,
    /// Some for min/max-like operators, whose forward rule is the arg-histogram.
    pub tie_break: Option<Extremum>,
    pub c: CExprs,
}

impl GeneralOp {
    /// The functions for element type `T`.
    #[inline]
    pub fn fns<T: Elem>(&self) -> &GeneralFns<T> {
        T::general_fns(self)
    }

    pub fn has_total_form(&self) -> bool {
        self.f64.total.is_some()
    }

    /// `a op b` in f64.
    pub fn combine(&self, a: f64, b: f64) -> f64 {
        (self.f64.combine)(a, b)
    }
    /// d(a op b)/da in f64.
    pub fn d1(&self, a: f64, b: f64) -> f64 {
        (self.f64.d1)(a, b)
    }
    /// d(a op b)/db in f64.
    pub fn d2(&self, a: f64, b: f64) -> f64 {
        (self.f64.d2)(a, b)
    }
    /// The total form in f64, when the operator has one.
    pub fn total(&self, a: f64, t: f64) -> Option<f64> {
        self.f64.total.map(|f| f(a, t))
    }
}

// Names are unique, so identity is the name (comparing fn pointers is unreliable).
impl PartialEq for GeneralOp {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for GeneralOp {}
impl Hash for GeneralOp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}
impl fmt::Debug for GeneralOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GeneralOp({})", self.name)
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __general_total {
    ($t:ty;) => {
        None
    };
    ($t:ty; $total:ident) => {
        Some($total::<$t> as $crate::general::BinFn<$t>)
    };
}

/// Defines a `static` [`GeneralOp`] from generic functions `fn f<T: Float>(a: T, b: T) -> T`,
/// monomorphising each for f32 and f64.
#[macro_export]
macro_rules! general_op {
    (
        $(#[$meta:meta])*
        $vis:vis static $ident:ident = {
            name: $name:expr,
            neutral: $neutral:expr,
            combine: $combine:ident,
            d1: $d1:ident,
            d2: $d2:ident,
            $(total: $total:ident,)?
            tie_break: $tie:expr,
            c: $c:expr $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis static $ident: $crate::general::GeneralOp = $crate::general::GeneralOp {
            name: $name,
            neutral: $neutral,
            f32: $crate::general::GeneralFns {
                combine: $combine::<f32>,
                d1: $d1::<f32>,
                d2: $d2::<f32>,
                total: $crate::__general_total!(f32; $($total)?),
            },
            f64: $crate::general::GeneralFns {
                combine: $combine::<f64>,
                d1: $d1::<f64>,
                d2: $d2::<f64>,
                total: $crate::__general_total!(f64; $($total)?),
            },
            tie_break: $tie,
            c: $c,
        };
    };
}

#[inline]
fn truth<T: Float>(b: bool) -> T {
    if b { T::one() } else { T::zero() }
}

// ---- logaddexp ----

/// max(a, b) + log1p(exp(-|a - b|)): never exp of a large number, so no overflow in f32
/// beyond 88 (unlike log(e^a + e^b)). The guard keeps -inf (the neutral) and +inf exact instead
/// of producing inf - inf = NaN.
#[inline]
pub fn lae_combine<T: Float>(a: T, b: T) -> T {
    lae_with(a, b, (-(a - b).abs()).exp())
}

/// logaddexp(a, b) from `e = e^-|a - b|`: the larger plus log1p(e).
#[inline(always)]
fn lae_with<T: Float>(a: T, b: T, e: T) -> T {
    let m = a.max(b);
    // A NaN operand makes e NaN, so only the infinite branch (where `max` drops a NaN) checks.
    if m.is_infinite() { if a.is_nan() || b.is_nan() { T::nan() } else { m } } else { m + e.ln_1p() }
}

/// d/da logaddexp(a, b) = sigmoid(a - b), computed without overflow; 0 when a is -inf (the
/// neutral contributes nothing, and logaddexp(-inf, -inf) has partials 0, not NaN); NaN when
/// either operand is NaN (guide, Histogram rules: NaN propagates).
#[inline]
pub fn lae_d1<T: Float>(a: T, b: T) -> T {
    // No exponential where an operand is -inf: `lae_d1_with` does not read it there.
    let e = if a == T::neg_infinity() || b == T::neg_infinity() { T::zero() } else { (-(a - b).abs()).exp() };
    lae_d1_with(a, b, e)
}

/// [`lae_d1`] from `e = e^-|a - b|` (not read where a or b is -inf).
#[inline(always)]
fn lae_d1_with<T: Float>(a: T, b: T, e: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a == T::neg_infinity() {
        T::zero()
    } else if b == T::neg_infinity() {
        T::one()
    } else if a - b >= T::zero() {
        T::one() / (T::one() + e)
    } else {
        e / (T::one() + e)
    }
}

/// `(lae_d1(b, a), lae_combine(a, b))`, the pair a general rule's forward step needs, from one
/// `e^-|a - b|` where the two functions take one each; equal to them bit for bit (a NaN's sign
/// aside).
#[inline]
pub fn lae_d2_and_combine<T: Float>(a: T, b: T) -> (T, T) {
    let e = (-(b - a).abs()).exp();
    (lae_d1_with(b, a, e), lae_with(a, b, e))
}

#[inline]
pub fn lae_d2<T: Float>(a: T, b: T) -> T {
    lae_d1(b, a)
}

/// d t / d a = e^(a - t); 0 when t is -inf (then every input is -inf). logaddexp's `special`
/// rule evaluates it on the inputs relative to the bin's maximum (`rules::hist`), where t is the
/// log of a sum in [1, n] and e^(a - t) no longer depends on t's last bits at a large maximum.
#[inline]
fn lae_total<T: Float>(a: T, t: T) -> T {
    if t == T::neg_infinity() { T::zero() } else { (a - t).exp() }
}

general_op! {
    /// log(e^a + e^b), computed stably; neutral -inf. Its total form is e^(a - t).
    pub static LOGADDEXP = {
        name: "logaddexp",
        neutral: f64::NEG_INFINITY,
        combine: lae_combine,
        d1: lae_d1,
        d2: lae_d2,
        total: lae_total,
        tie_break: None,
        c: CExprs {
            combine: "(isnan(a) || isnan(b) ? a + b : (isinf(fmax(a, b)) ? fmax(a, b) : \
                      fmax(a, b) + log1p(exp(-fabs(a - b)))))",
            d1: "(isnan(a) || isnan(b) ? a + b : (a == -INFINITY ? (T)0 : (b == -INFINITY ? (T)1 : \
                 (a >= b ? (T)1 / ((T)1 + exp(b - a)) : exp(a - b) / ((T)1 + exp(a - b))))))",
            d2: "(isnan(a) || isnan(b) ? a + b : (b == -INFINITY ? (T)0 : (a == -INFINITY ? (T)1 : \
                 (b >= a ? (T)1 / ((T)1 + exp(a - b)) : exp(b - a) / ((T)1 + exp(b - a))))))",
            total: Some("(t == -INFINITY ? (T)0 : exp(a - t))"),
        },
    }
}

// ---- hypot ----

/// sqrt(a^2 + b^2) without overflow or underflow (libm's hypot scales internally);
/// hypot(0, x) = |x| exactly, so 0 is neutral on magnitudes; NaN when either operand is NaN.
#[inline]
pub fn hypot_combine<T: Float>(a: T, b: T) -> T {
    // libm's hypot(inf, NaN) is inf; a histogram's NaN propagates (guide, Histogram rules).
    if a.is_nan() || b.is_nan() { a + b } else { a.hypot(b) }
}

/// d/da hypot(a, b) = a / hypot(a, b), 0 at the origin.
#[inline]
pub fn hypot_d1<T: Float>(a: T, b: T) -> T {
    let h = a.hypot(b);
    if h == T::zero() { T::zero() } else { a / h }
}

#[inline]
pub fn hypot_d2<T: Float>(a: T, b: T) -> T {
    hypot_d1(b, a)
}

/// d t / d a = a / t, 0 when t = 0.
#[inline]
fn hypot_total<T: Float>(a: T, t: T) -> T {
    if t == T::zero() { T::zero() } else { a / t }
}

general_op! {
    /// sqrt(a^2 + b^2), overflow-safe; neutral 0 on magnitudes (bin values are magnitudes).
    /// Its total form is a / t.
    pub static HYPOT = {
        name: "hypot",
        neutral: 0.0,
        combine: hypot_combine,
        d1: hypot_d1,
        d2: hypot_d2,
        total: hypot_total,
        tie_break: None,
        c: CExprs {
            combine: "(isnan(a) || isnan(b) ? a + b : hypot(a, b))",
            d1: "(hypot(a, b) == (T)0 ? (T)0 : a / hypot(a, b))",
            d2: "(hypot(a, b) == (T)0 ? (T)0 : b / hypot(a, b))",
            total: Some("(t == (T)0 ? (T)0 : a / t)"),
        },
    }
}

// ---- the special operators as general ones (to run the general rule on them) ----

#[inline]
fn add_combine<T: Float>(a: T, b: T) -> T {
    a + b
}
#[inline]
fn one<T: Float>(_: T, _: T) -> T {
    T::one()
}
/// `*` of the histograms, for `HistOp::Mul` and the general `MUL` alike: zeros absorb (0 times
/// an overflowed inf is 0, not NaN), so that a bin with a zero factor is 0 in every association
/// of its product (docs/guide.md, Histogram rules). The kernels' C expression says the same.
///
/// NaN is not absorbed: 0 times NaN is NaN (a bin with a NaN input is NaN).
#[inline(always)]
pub fn mul_absorbing<T: Float>(a: T, b: T) -> T {
    // One select of the hardware product, no branches: on data with zeros (a running product
    // becomes 0 at a bin's first zero) the nested branches mispredicted on every other
    // element and cost the `*` folds 2-3x. Where a zero meets a NaN the product is NaN too.
    let absorbs = (a == T::zero()) | (b == T::zero());
    let nan = a.is_nan() | b.is_nan();
    if absorbs & !nan { T::zero() } else { a * b }
}
/// d(a * b)/da = b, NaN when a is NaN (so that the general rule gives every input of a NaN bin
/// a NaN adjoint, as `*`'s own rule does).
#[inline(always)]
pub fn mul_d1<T: Float>(a: T, b: T) -> T {
    if a.is_nan() { a } else { b }
}
#[inline(always)]
pub fn mul_d2<T: Float>(a: T, b: T) -> T {
    mul_d1(b, a)
}
/// Whether `b` beats `a` as the extremum `ext` of a left fold: NaN ranks beyond every number
/// (a bin with a NaN is NaN, guide, Histogram rules), and among equals (NaN among NaN included) the left
/// operand, the earlier position, wins. The one definition of min/max's winner: the combines,
/// partials, arg-histograms ([`Extremum::beats`]) and the kernels' C expressions follow it.
#[inline(always)]
#[allow(clippy::eq_op, clippy::neg_cmp_op_on_partial_ord)]
pub fn right_wins<T: PartialOrd + Copy>(ext: Extremum, a: T, b: T) -> bool {
    // Two comparisons: a is a number (a == a), and b is not at least as good (a NaN b compares
    // false, so it wins).
    a == a
        && match ext {
            Extremum::Min => !(b >= a),
            Extremum::Max => !(b <= a),
        }
}
#[inline(always)]
pub fn min_combine<T: Float>(a: T, b: T) -> T {
    if right_wins(Extremum::Min, a, b) { b } else { a }
}
#[inline(always)]
pub fn min_d1<T: Float>(a: T, b: T) -> T {
    truth(!right_wins(Extremum::Min, a, b))
}
#[inline(always)]
pub fn min_d2<T: Float>(a: T, b: T) -> T {
    truth(right_wins(Extremum::Min, a, b))
}
#[inline(always)]
pub fn max_combine<T: Float>(a: T, b: T) -> T {
    if right_wins(Extremum::Max, a, b) { b } else { a }
}
#[inline(always)]
pub fn max_d1<T: Float>(a: T, b: T) -> T {
    truth(!right_wins(Extremum::Max, a, b))
}
#[inline(always)]
pub fn max_d2<T: Float>(a: T, b: T) -> T {
    truth(right_wins(Extremum::Max, a, b))
}

general_op! {
    /// `+` as a general operator (total form 1).
    pub static ADD = {
        name: "general-add",
        neutral: 0.0,
        combine: add_combine,
        d1: one,
        d2: one,
        total: one,
        tie_break: None,
        c: CExprs { combine: "(a + b)", d1: "(T)1", d2: "(T)1", total: Some("(T)1") },
    }
}

general_op! {
    /// `*` as a general operator (no total form: a / t would divide by zero).
    pub static MUL = {
        name: "general-mul",
        neutral: 1.0,
        combine: mul_absorbing,
        d1: mul_d1,
        d2: mul_d2,
        tie_break: None,
        c: CExprs {
            combine: "(((a) == (T)0 || (b) == (T)0) && !isnan(a) && !isnan(b) ? (T)0 : (a) * (b))",
            d1: "(isnan(a) ? a : b)",
            d2: "(isnan(b) ? b : a)",
            total: None,
        },
    }
}

general_op! {
    /// min as a general operator; the left operand wins ties.
    pub static MIN = {
        name: "general-min",
        neutral: f64::INFINITY,
        combine: min_combine,
        d1: min_d1,
        d2: min_d2,
        tie_break: Some(Extremum::Min),
        c: CExprs {
            combine: "(RIGHT_WINS_MIN(a, b) ? b : a)",
            d1: "(RIGHT_WINS_MIN(a, b) ? (T)0 : (T)1)",
            d2: "(RIGHT_WINS_MIN(a, b) ? (T)1 : (T)0)",
            total: None,
        },
    }
}

general_op! {
    /// max as a general operator; the left operand wins ties.
    pub static MAX = {
        name: "general-max",
        neutral: f64::NEG_INFINITY,
        combine: max_combine,
        d1: max_d1,
        d2: max_d2,
        tie_break: Some(Extremum::Max),
        c: CExprs {
            combine: "(RIGHT_WINS_MAX(a, b) ? b : a)",
            d1: "(RIGHT_WINS_MAX(a, b) ? (T)0 : (T)1)",
            d2: "(RIGHT_WINS_MAX(a, b) ? (T)1 : (T)0)",
            total: None,
        },
    }
}

/// Every general operator shipped, looked up by name by `HistOp::from_str`.
pub static ALL: [&GeneralOp; 6] = [&LOGADDEXP, &HYPOT, &ADD, &MUL, &MIN, &MAX];

/// The general operator named `name`.
pub fn lookup(name: &str) -> Option<&'static GeneralOp> {
    ALL.iter().copied().find(|g| g.name == name)
}

/// The general form of any operator: the special operators map to their general versions
/// (with asymmetric min/max partials), a general operator to itself.
pub fn as_general(op: HistOp) -> &'static GeneralOp {
    match op {
        HistOp::Add => &ADD,
        HistOp::Mul => &MUL,
        HistOp::Min => &MIN,
        HistOp::Max => &MAX,
        HistOp::General(g) => g,
    }
}

/// The special operator a general one stands for, if it is one of [`ADD`], [`MUL`], [`MIN`],
/// [`MAX`] (their second derivatives are known: engines nest through them).
pub fn special_of(g: &GeneralOp) -> Option<HistOp> {
    [(&ADD, HistOp::Add), (&MUL, HistOp::Mul), (&MIN, HistOp::Min), (&MAX, HistOp::Max)]
        .into_iter()
        .find(|(s, _)| std::ptr::eq(*s, g))
        .map(|(_, op)| op)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd(f: impl Fn(f64) -> f64, x: f64) -> f64 {
        let h = 1e-6 * x.abs().max(1.0);
        (f(x + h) - f(x - h)) / (2.0 * h)
    }

    #[test]
    fn logaddexps_fused_step_equals_its_two_functions_bit_for_bit() {
        fn check<T: Float + std::fmt::Debug>(pts: &[T], bits: impl Fn(T) -> u64) {
            for &a in pts {
                for &b in pts {
                    let (d2, y) = lae_d2_and_combine(a, b);
                    // Bit for bit, except that a NaN's sign may differ.
                    let same = |x: T, y: T| (x.is_nan() && y.is_nan()) || bits(x) == bits(y);
                    assert!(same(d2, lae_d1(b, a)), "d2 at ({a:?}, {b:?}): {d2:?} vs {:?}", lae_d1(b, a));
                    assert!(same(y, lae_combine(a, b)), "combine at ({a:?}, {b:?}): {y:?} vs {:?}", lae_combine(a, b));
                }
            }
        }
        let pts =
            [f64::NEG_INFINITY, -700.0, -3.5, -1e-300, 0.0, 1e-9, 0.25, 2.0, 38.0, 710.0, f64::INFINITY, f64::NAN];
        check(&pts, f64::to_bits);
        let pts32: Vec<f32> = pts.iter().map(|&x| x as f32).chain([-90.0, 1e-7, 88.5]).collect();
        check(&pts32, |x| x.to_bits() as u64);
        // The sigmoid's two branches and the infinite maximum are reached, so the comparison covers them.
        assert_eq!(lae_d2_and_combine(0.0, f64::NEG_INFINITY).0, 0.0);
        assert_eq!(lae_d2_and_combine(f64::NEG_INFINITY, 1.0), (1.0, 1.0));
        assert_eq!(lae_d2_and_combine(1.0, f64::INFINITY).1, f64::INFINITY);
        assert!((lae_d2_and_combine(0.0, 2.0).0 - 1.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-15);
        assert!((lae_d2_and_combine(2.0, 0.0).0 - (-2.0f64).exp() / (1.0 + (-2.0f64).exp())).abs() < 1e-15);
    }

    #[test]
    fn neutral_is_exact_and_partials_at_neutral_points_are_zero_not_nan() {
        for g in ALL {
            for x in [0.0, 1.5, 3.25, 1e-30, 7e20] {
                assert_eq!(g.combine(g.neutral, x), x, "{}", g.name);
                assert_eq!((g.f32.combine)(g.neutral as f32, x as f32), x as f32);
            }
            let n = g.neutral;
            for v in [g.d1(n, n), g.d2(n, n)] {
                assert!(!v.is_nan(), "{} partial at the neutral point", g.name);
            }
            if let Some(t) = g.total(n, n) {
                assert!(!t.is_nan(), "{} total form at the neutral point", g.name);
            }
        }
        assert_eq!(LOGADDEXP.d1(f64::NEG_INFINITY, f64::NEG_INFINITY), 0.0);
        assert_eq!(HYPOT.d2(0.0, 0.0), 0.0);
        assert_eq!(HYPOT.total(0.0, 0.0), Some(0.0));
    }

    #[test]
    fn smooth_partials_and_total_forms_match_finite_differences() {
        for g in [&LOGADDEXP, &HYPOT, &ADD, &MUL] {
            for (a, b) in [(0.3, 1.7), (2.5, -0.4), (1.0, 1.0), (-3.0, 0.5)] {
                let w1 = fd(|x| g.combine(x, b), a);
                let w2 = fd(|x| g.combine(a, x), b);
                assert!((g.d1(a, b) - w1).abs() < 1e-6, "{} d1({a},{b})", g.name);
                assert!((g.d2(a, b) - w2).abs() < 1e-6, "{} d2({a},{b})", g.name);
                if let Some(t) = g.total(a, g.combine(a, b)) {
                    assert!((t - w1).abs() < 1e-6, "{} total({a},{b})", g.name);
                }
            }
        }
    }

    #[test]
    fn min_and_max_give_ties_to_the_left_operand() {
        assert_eq!((MIN.d1(1.0, 1.0), MIN.d2(1.0, 1.0)), (1.0, 0.0));
        assert_eq!((MAX.d1(1.0, 1.0), MAX.d2(1.0, 1.0)), (1.0, 0.0));
        assert_eq!((MIN.d1(2.0, 1.0), MIN.d2(2.0, 1.0)), (0.0, 1.0));
        assert_eq!((MAX.d1(2.0, 1.0), MAX.d2(2.0, 1.0)), (1.0, 0.0));
        assert!(MIN.total(1.0, 1.0).is_none() && MAX.total(1.0, 1.0).is_none());
    }

    #[test]
    fn nan_propagates_through_every_combine_and_min_max_rank_it_beyond_every_number() {
        let nan = f64::NAN;
        for g in ALL {
            for x in [0.0, 1.0, -2.5, f64::INFINITY, f64::NEG_INFINITY, g.neutral] {
                assert!(g.combine(nan, x).is_nan() && g.combine(x, nan).is_nan(), "{} with {x}", g.name);
            }
        }
        // The value-reading partials are NaN at a NaN operand, also where the other is the
        // neutral -inf (which once made logaddexp's d2 1) or a zero (`*`).
        for g in [&LOGADDEXP, &HYPOT, &MUL] {
            for x in [0.0, 1.0, f64::INFINITY, f64::NEG_INFINITY] {
                for (a, b) in [(nan, x), (x, nan)] {
                    assert!(g.d1(a, b).is_nan() && g.d2(a, b).is_nan(), "{} partials at ({a}, {b})", g.name);
                }
            }
        }
        // min/max: a NaN on the right wins over a number, a number never wins over a NaN, and
        // among NaN the left keeps the bin (one winner per bin).
        for (g, ext) in [(&MIN, Extremum::Min), (&MAX, Extremum::Max)] {
            assert!(right_wins(ext, 1.0, nan) && !right_wins(ext, nan, 1.0) && !right_wins(ext, nan, nan));
            assert_eq!((g.d1(1.0, nan), g.d2(1.0, nan)), (0.0, 1.0));
            assert_eq!((g.d1(nan, 1.0), g.d2(nan, 1.0)), (1.0, 0.0));
            assert_eq!((g.d1(nan, nan), g.d2(nan, nan)), (1.0, 0.0));
            assert!(right_wins(ext, f64::INFINITY, f64::NEG_INFINITY) == (ext == Extremum::Min));
            assert!(!right_wins(ext, 2.0, 2.0));
            // The arg-histograms' order: dest (-1) first among NaN too.
            assert!(ext.beats(nan, -1, nan, 3) && !ext.beats(nan, 3, nan, -1) && ext.beats(nan, 5, 1.0, -1));
        }
        // `*`'s zeros absorb infinities, not NaN.
        assert_eq!(MUL.combine(0.0, f64::INFINITY), 0.0);
        assert!(MUL.combine(0.0, nan).is_nan() && MUL.combine(nan, 0.0).is_nan());
    }

    #[test]
    fn logaddexp_does_not_overflow_in_f32_and_hypot_handles_1e200_in_f64() {
        let c = LOGADDEXP.f32.combine;
        let y = c(100.0, 100.0);
        assert!((y - (100.0 + std::f32::consts::LN_2)).abs() < 1e-4, "{y}");
        assert_eq!(c(100.0, 0.0), 100.0);
        assert_eq!(c(f32::NEG_INFINITY, f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert_eq!(c(f32::INFINITY, 3.0), f32::INFINITY);
        let d = (LOGADDEXP.f32.d1)(100.0, 99.0);
        assert!((d as f64 - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-6);
        let h = HYPOT.combine(1e200, 1e200);
        assert!((h / (1e200 * std::f64::consts::SQRT_2) - 1.0).abs() < 1e-15, "{h}");
        assert!((HYPOT.d1(1e200, 1e200) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-15);
        assert_eq!(HYPOT.combine(0.0, -3.0), 3.0);
    }

    #[test]
    fn lookup_finds_every_operator_and_as_general_maps_the_special_ones() {
        for g in ALL {
            assert!(std::ptr::eq(lookup(g.name).unwrap(), g));
        }
        assert!(lookup("add").is_none());
        assert!(std::ptr::eq(as_general(HistOp::Min), &MIN));
        assert_eq!(special_of(&MUL), Some(HistOp::Mul));
        assert_eq!(special_of(&LOGADDEXP), None);
    }
}
