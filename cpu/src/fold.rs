//! Operators monomorphised for the CPU's inner loops.
//!
//! `kernels::combine` and `kernels::partial` match on the operator at every call and reach a
//! general operator through a fn pointer, which keeps the compiler from inlining anything into a
//! histogram's inner loop. Here each operator is a zero-sized (or fn-pointer) type implementing
//! [`Fold`], and [`with_fold!`] dispatches once per call to a loop specialised for it. The
//! shipped general operators (logaddexp, hypot and the general versions of +, *, min, max) get
//! their own types; any other general operator runs through its fn pointers. The arithmetic is
//! the same as the operator's own functions, so results do not change.

use crate::general::{self, GeneralFns};
use crate::{Elem, HistOp};

/// An operator with its partials on one element type.
pub trait Fold<T: Elem>: Copy + Send + Sync {
    fn combine(self, a: T, b: T) -> T;
    /// d(a op b)/da.
    fn d1(self, a: T, b: T) -> T;
    /// d(a op b)/db.
    fn d2(self, a: T, b: T) -> T;
    /// The product of two chain-rule factors (partials, tangents, adjoints): plain, except
    /// for `*`, whose zero factors absorb an infinite one (a zero tangent or adjoint contributes
    /// 0 next to an infinite partial; guide, Histogram rules).
    #[inline(always)]
    fn chain(self, p: T, q: T) -> T {
        p * q
    }
    /// `chain(chain(p, q), r)`, for the adjoint loops.
    #[inline(always)]
    fn chain3(self, p: T, q: T, r: T) -> T {
        self.chain(self.chain(p, q), r)
    }
    /// The lifted (dual-number) operator `(a op b, d1(a,b) da + d2(a,b) db)`.
    #[inline(always)]
    fn lift(self, (a, da): (T, T), (b, db): (T, T)) -> (T, T) {
        (self.combine(a, b), self.chain(self.d1(a, b), da) + self.chain(self.d2(a, b), db))
    }
    /// The forward step of a general rule's value adjoint: element `a` joins `l`, the fold of
    /// its bin so far. Returns `d2(l, a)` and `y = l op a`, which is left in `l`.
    #[inline(always)]
    fn step_in(self, l: &mut T, a: T) -> (T, T) {
        let (d2, y) = (self.d2(*l, a), self.combine(*l, a));
        *l = y;
        (d2, y)
    }
    /// The backward step: `a` joins `r`, the fold of what follows it in its bin (`a op r` is
    /// left in `r`). Returns the element's adjoint `d2 d1(y, r) g` from its forward step's `d2`
    /// and `y`, and 0 where the bin's adjoint `g` is 0 (even where a partial is not finite).
    #[inline(always)]
    fn step_out(self, r: &mut T, a: T, d2: T, y: T, g: T) -> T {
        let right = *r;
        *r = self.combine(a, right);
        if g == T::zero() { T::zero() } else { self.chain3(d2, self.d1(y, right), g) }
    }
}

#[derive(Clone, Copy)]
pub struct AddF;
#[derive(Clone, Copy)]
pub struct MulF;
#[derive(Clone, Copy)]
pub struct MinF;
#[derive(Clone, Copy)]
pub struct MaxF;
#[derive(Clone, Copy)]
pub struct LogAddExpF;
#[derive(Clone, Copy)]
pub struct HypotF;
/// Any other general operator, through its fn pointers.
#[derive(Clone, Copy)]
pub struct DynF<T: 'static>(pub &'static GeneralFns<T>);

impl<T: Elem> Fold<T> for AddF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        a + b
    }
    #[inline(always)]
    fn d1(self, _: T, _: T) -> T {
        T::one()
    }
    #[inline(always)]
    fn d2(self, _: T, _: T) -> T {
        T::one()
    }
    #[inline(always)]
    fn lift(self, (a, da): (T, T), (b, db): (T, T)) -> (T, T) {
        (a + b, T::one() * da + T::one() * db)
    }
}

impl<T: Elem> Fold<T> for MulF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        crate::general::mul_absorbing(a, b)
    }
    #[inline(always)]
    fn d1(self, a: T, b: T) -> T {
        general::mul_d1(a, b)
    }
    #[inline(always)]
    fn d2(self, a: T, b: T) -> T {
        general::mul_d2(a, b)
    }
    /// The hardware product, redone absorbing where it is NaN (a zero met an inf; a NaN
    /// factor stays NaN) out of line: the adjoint loops pay one predictable branch.
    #[inline(always)]
    fn chain(self, p: T, q: T) -> T {
        let x = p * q;
        if x.is_nan() { absorbing_product(p, q, T::one()) } else { x }
    }
    /// One check of the plain product of three factors, as [`MulF::chain`] (a product that
    /// overflows to inf and meets a zero absorbs too, as the absorbing fold would).
    #[inline(always)]
    fn chain3(self, p: T, q: T, r: T) -> T {
        let x = p * q * r;
        if x.is_nan() { absorbing_product(p, q, r) } else { x }
    }
}

/// `p q r` with zeros absorbing, off the hot loops' path (reached only where the plain product
/// is NaN).
#[cold]
#[inline(never)]
fn absorbing_product<T: Elem>(p: T, q: T, r: T) -> T {
    general::mul_absorbing(general::mul_absorbing(p, q), r)
}

/// `*` with the hardware's product: differs from [`MulF`] only where a zero meets an inf (NaN
/// instead of 0), so a fold with it is exact unless its total is NaN. Hot loops fold with this
/// and refold with [`MulF`] only where a NaN shows (the absorbing product's branches cost
/// 1.1-1.5x per element).
#[derive(Clone, Copy)]
pub struct PlainMulF;

impl<T: Elem> Fold<T> for PlainMulF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        a * b
    }
    #[inline(always)]
    fn d1(self, _: T, b: T) -> T {
        b
    }
    #[inline(always)]
    fn d2(self, a: T, _: T) -> T {
        a
    }
}

// Min and max select rather than branch: on random data a branch mispredicts often. NaN ranks
// beyond every number (`general::right_wins`).
impl<T: Elem> Fold<T> for MinF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        general::min_combine(a, b)
    }
    #[inline(always)]
    fn d1(self, a: T, b: T) -> T {
        general::min_d1(a, b)
    }
    #[inline(always)]
    fn d2(self, a: T, b: T) -> T {
        general::min_d2(a, b)
    }
}

impl<T: Elem> Fold<T> for MaxF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        general::max_combine(a, b)
    }
    #[inline(always)]
    fn d1(self, a: T, b: T) -> T {
        general::max_d1(a, b)
    }
    #[inline(always)]
    fn d2(self, a: T, b: T) -> T {
        general::max_d2(a, b)
    }
}

impl<T: Elem> Fold<T> for LogAddExpF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        general::lae_combine(a, b)
    }
    #[inline(always)]
    fn d1(self, a: T, b: T) -> T {
        general::lae_d1(a, b)
    }
    #[inline(always)]
    fn d2(self, a: T, b: T) -> T {
        general::lae_d2(a, b)
    }
    /// One exponential for both of the step's values (the general rule's adjoint spent a
    /// quarter of its exponentials recomputing it).
    #[inline(always)]
    fn step_in(self, l: &mut T, a: T) -> (T, T) {
        let (d2, y) = general::lae_d2_and_combine(*l, a);
        *l = y;
        (d2, y)
    }
}

impl<T: Elem> Fold<T> for HypotF {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        general::hypot_combine(a, b)
    }
    #[inline(always)]
    fn d1(self, a: T, b: T) -> T {
        general::hypot_d1(a, b)
    }
    #[inline(always)]
    fn d2(self, a: T, b: T) -> T {
        general::hypot_d2(a, b)
    }
    /// One hypot instead of three: d hypot = (a da + b db) / hypot (0 at the origin).
    #[inline(always)]
    fn lift(self, (a, da): (T, T), (b, db): (T, T)) -> (T, T) {
        let h = a.hypot(b);
        let dh = if h == T::zero() { T::zero() } else { (a * da + b * db) / h };
        (h, dh)
    }
}

impl<T: Elem> Fold<T> for DynF<T> {
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        (self.0.combine)(a, b)
    }
    #[inline(always)]
    fn d1(self, a: T, b: T) -> T {
        (self.0.d1)(a, b)
    }
    #[inline(always)]
    fn d2(self, a: T, b: T) -> T {
        (self.0.d2)(a, b)
    }
}

/// Which specialised type serves an operator.
#[derive(Clone, Copy)]
pub enum Kind {
    Add,
    Mul,
    Min,
    Max,
    LogAddExp,
    Hypot,
    Dyn(&'static general::GeneralOp),
}

pub fn kind(op: HistOp) -> Kind {
    match op {
        HistOp::Add => Kind::Add,
        HistOp::Mul => Kind::Mul,
        HistOp::Min => Kind::Min,
        HistOp::Max => Kind::Max,
        HistOp::General(g) => {
            let is = |s: &general::GeneralOp| std::ptr::eq(g, s);
            if is(&general::ADD) {
                Kind::Add
            } else if is(&general::MUL) {
                Kind::Mul
            } else if is(&general::MIN) {
                Kind::Min
            } else if is(&general::MAX) {
                Kind::Max
            } else if is(&general::LOGADDEXP) {
                Kind::LogAddExp
            } else if is(&general::HYPOT) {
                Kind::Hypot
            } else {
                Kind::Dyn(g)
            }
        }
    }
}

/// Runs `$body` with `$f` bound to the specialised [`Fold`] of `$op` on element type `$t`
/// (the body is compiled once per operator).
macro_rules! with_fold {
    ($op:expr, $t:ty, $f:ident => $body:expr) => {{
        use $crate::fold::{self as fo, Kind};
        match fo::kind($op) {
            Kind::Add => {
                let $f = fo::AddF;
                $body
            }
            Kind::Mul => {
                let $f = fo::MulF;
                $body
            }
            Kind::Min => {
                let $f = fo::MinF;
                $body
            }
            Kind::Max => {
                let $f = fo::MaxF;
                $body
            }
            Kind::LogAddExp => {
                let $f = fo::LogAddExpF;
                $body
            }
            Kind::Hypot => {
                let $f = fo::HypotF;
                $body
            }
            Kind::Dyn(g) => {
                let $f = fo::DynF::<$t>(g.fns::<$t>());
                $body
            }
        }
    }};
}
pub(crate) use with_fold;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Operand;
    use crate::kernels;

    /// The specialised operators compute exactly what the generic kernels compute.
    #[test]
    fn specialised_operators_match_the_generic_kernels_bit_for_bit() {
        let xs = [0.0f64, -0.0, 1.5, -2.25, 3.0, f64::INFINITY, f64::NEG_INFINITY, 1e-300, 7e20];
        for op in HistOp::named() {
            for &a in &xs {
                for &b in &xs {
                    let (c, p1, p2) = with_fold!(op, f64, f => (f.combine(a, b), f.d1(a, b), f.d2(a, b)));
                    let same = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
                    assert!(same(c, kernels::combine(op, a, b)), "{op} combine({a}, {b})");
                    assert!(same(p1, kernels::partial(op, Operand::Left, a, b)), "{op} d1({a}, {b})");
                    assert!(same(p2, kernels::partial(op, Operand::Right, a, b)), "{op} d2({a}, {b})");
                }
            }
        }
    }

    #[test]
    fn the_hypot_lift_is_the_chain_rule_with_one_hypot() {
        let (h, dh) = Fold::<f64>::lift(HypotF, (3.0, 1.0), (4.0, 2.0));
        assert_eq!(h, 5.0);
        assert!((dh - (3.0 + 8.0) / 5.0).abs() < 1e-15);
        assert_eq!(Fold::<f32>::lift(HypotF, (0.0, 1.0), (0.0, 2.0)), (0.0, 0.0));
    }
}
