//! Derivative rules of `reduce_by_index` (the generalised histogram).
//!
//! `hist = reduce_by_index(dest, op, inds, vals)`; each bin is a left fold starting with dest
//! (position -1) and taking the bin's elements in index order; out-of-range indices are ignored.
//! Reverse rules (re-derived from the MSc thesis in shared/seeds, chapters 3-4):
//!
//! * `+`: `dest_bar = hist_bar; vals_bar[i] = hist_bar[inds[i]]` (0 when out of range): a gather.
//! * min/max: the forward sweep is the arg-histogram over (value, position) pairs, ties to the
//!   lowest position so dest (-1) wins ties; exactly one winner per bin receives the adjoint.
//! * `*`: the forward sweep keeps, per bin, the product p of the finite non-zero values times the
//!   signs of the infinite ones, the number of zeros and the number of infinities among the
//!   values; Z and M count the bin's zero and infinite factors, dest included. Each factor's
//!   adjoint is hist_bar times the absorbing product of the others: with Z = 0, P = dest p
//!   (dest's sign where dest is infinite) and `I(c)` meaning inf where c holds, else 1:
//!   `hist = P I(M > 0)`, a finite value's adjoint `hist_bar P I(M > 0) / v_i`, an infinite
//!   one's `hist_bar P sign(v_i) I(M > 1)`; with Z = 1 only the zero gets `hist_bar P I(M > 0)`;
//!   `dest_bar` is hist_bar times the values' absorbing product. Nothing divides by zero or by
//!   an infinity, and 0 x inf only happens where a zero absorbs (or hist_bar is 0), which the
//!   rule sets to 0.
//! * general operator: each element sits in its bin's fold as y = (l op a) op r, with l the fold
//!   of dest and the bin's earlier elements and r the fold of its later ones, so
//!   `vals_bar[i] = d2(l, a) d1(l op a, r) hist_bar[bin]` and `dest_bar = d1(dest, h) hist_bar` with
//!   h the fold of the bin's elements alone. l and r are kept apart (rather than using
//!   d(a op c)/da with c = l op r) so that non-smooth operators keep the tie policy through
//!   their asymmetric partials: applied to +, *, min and max the general rule gives the special
//!   rules' answers, ties included. Two strategies find l and r:
//!   - `general-sort`: a stable sort by bin, then exclusive segmented scans forwards and
//!     backwards (dest folded in front of the forward one);
//!   - `general-chunked`: no sort; fixed contiguous chunks (boundaries from (n, k) only), whose
//!     totals the forward sweep computes in the same pass as the histogram; the pullback
//!     re-runs each chunk's running array from the prefix of chunk totals (with dest) forwards
//!     to get l and l op a, and from the suffix of chunk totals backwards to get r. O(n + P k).
//! * total form (operators that have one, e.g. hypot): d hist / d a = total(a, t) from the
//!   final bin value t alone, for elements and dest: one fused gather, like `+`.
//! * logaddexp and hypot: every rule (the total forms e^(v - t) and v / t, and the general ones)
//!   and the forward rule run on the inputs relative to the bin's largest m ([`Relative`]:
//!   v - m, v / m), and hist = m + (m times) the histogram of those: the derivatives are
//!   invariant, and on the relative inputs no fold value is so large that t + log 2 rounds to t
//!   (1e16 in f64) or that t overflows, so exact ties split evenly at any magnitude and infinite
//!   inputs tie at the top.
//!
//! At the extremes (guide, Histogram rules): a NaN input makes its bin NaN in every rule and mode; the
//! operators' partials are NaN at a NaN operand (except `+`'s, which are 1, and min/max's, which
//! rank NaN beyond every number: `general::right_wins`), so the general rules give a NaN bin's
//! inputs NaN adjoints as `*`'s own rule and the total forms do; a bin whose adjoint is 0 gives
//! its inputs 0.
//!
//! Rule choice ([`HistRule`]): `special` is the operator's own rule (the total form for a general
//! operator, an error without one); `auto` is `special` where it exists, else `general-chunked`
//! (sort-free, O(n + P k), and cheaper than sorting for any k the chunk plan accepts);
//! `general-sort` and `general-chunked` always run the generic l/r path. Min/max never use a
//! total form (at a tie every tied element equals t).
//!
//! Forward rules ([`reduce_by_index_jvp`]): `+` is the histogram of the tangents; min/max (and
//! general operators with a tie break) gather the winner's tangent from the arg-histogram (dest's
//! tangent when dest wins, position -1), because a lifted min/max would depend on the reduction
//! order at ties; `*` and smooth general operators lift to dual numbers, which is exact.

use crate::ops::{Extremum, OutOfRange, TensorMeta, TensorOps};
use crate::{BinaryOp, HistOp, HistRule, OpError, Operand, Ops, Relative, Result, UnaryOp};

/// The pullback of a histogram: `(dest_bar, vals_bar)` from `hist_bar`.
pub type HistPullback<B> = Box<dyn Fn(&B, &<B as TensorOps>::T) -> Result<(<B as TensorOps>::T, <B as TensorOps>::T)>>;

/// The rule `rule` stands for with operator `op` over `n` values and `k` bins on `b`: a named
/// rule is itself; `auto` is the device's measured choice at these sizes
/// ([`crate::ops::HistOps::auto_hist_rule`]), else the operator's own rule (`special` for `+`,
/// `*`, min, max, logaddexp and general operators with a total form; `general-chunked` for the
/// others). [`reduce_by_index_vjp`] runs this rule; the harness records it beside `auto`.
pub fn resolved_rule<B: crate::ops::HistOps>(b: &B, rule: HistRule, op: HistOp, n: usize, k: usize) -> HistRule {
    if rule != HistRule::Auto {
        return rule;
    }
    match (b.auto_hist_rule(op, n, k), op) {
        (Some(chosen), _) if chosen != HistRule::Auto => chosen,
        (_, HistOp::General(g)) if !g.has_total_form() => HistRule::GeneralChunked,
        _ => HistRule::Special,
    }
}

/// Runs the forward sweep of `reduce_by_index` under `rule` and returns the histogram with its
/// pullback.
pub fn reduce_by_index_vjp<B: Ops>(
    b: &B,
    rule: HistRule,
    dest: &B::T,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let rule = resolved_rule(b, rule, op, vals.numel(), dest.numel());
    if let Some(kind) = Relative::of(op) {
        // Every rule runs on the inputs relative to their bin's largest (`Relative`).
        let (anchor, dest_rel, vals_rel) = kind.inputs(b, dest, inds, vals)?;
        let (hist_rel, pullback) = resolved_rule_vjp(b, rule, &dest_rel, op, inds, &vals_rel)?;
        return Ok((kind.result(b, &anchor, &hist_rel)?, pullback));
    }
    resolved_rule_vjp(b, rule, dest, op, inds, vals)
}

/// [`reduce_by_index_vjp`] for a rule that `auto` has already been resolved to.
fn resolved_rule_vjp<B: Ops>(
    b: &B,
    rule: HistRule,
    dest: &B::T,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    // `auto` is resolved by the caller, so only the last arm lists it, for exhaustiveness.
    match (rule, op) {
        (HistRule::Special, HistOp::Add) => add_rule(b, dest, inds, vals),
        (HistRule::Special, HistOp::Mul) => mul_rule(b, dest, inds, vals),
        (HistRule::Special, HistOp::Min) => extremum_rule(b, dest, Extremum::Min, inds, vals),
        (HistRule::Special, HistOp::Max) => extremum_rule(b, dest, Extremum::Max, inds, vals),
        (HistRule::Special, HistOp::General(g)) if g.has_total_form() => total_form_rule(b, dest, op, inds, vals),
        (HistRule::Special, HistOp::General(g)) => Err(OpError::Unsupported(format!(
            "the special rule of a general operator is its total form, and {} has none \
             (use auto, general-sort or general-chunked)",
            g.name
        ))),
        (HistRule::GeneralChunked | HistRule::Auto, _) => general_chunked_rule(b, dest, op, inds, vals),
        (HistRule::GeneralSort, _) => general_sort_rule(b, dest, op, inds, vals),
    }
}

fn add_rule<B: Ops>(b: &B, dest: &B::T, inds: &B::I, vals: &B::T) -> Result<(B::T, HistPullback<B>)> {
    let hist = b.reduce_by_index(dest, HistOp::Add, inds, vals)?;
    let (inds, vals_shape) = (inds.clone(), vals.shape().to_vec());
    let pullback = move |b: &B, g: &B::T| {
        let vals_bar = b.gather(g, &inds, OutOfRange::Fill(0.0))?;
        Ok((g.clone(), b.reshape(&vals_bar, &vals_shape)?))
    };
    Ok((hist, Box::new(pullback)))
}

fn extremum_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    ext: Extremum,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let (hist, winners) = b.arg_reduce_by_index(dest, ext, inds, vals)?;
    let (n, vals_shape) = (vals.numel(), vals.shape().to_vec());
    let pullback = move |b: &B, g: &B::T| {
        let (dest_bar, vals_bar) = winner_pullback(b, &winners, n, g)?;
        Ok((dest_bar, b.reshape(&vals_bar, &vals_shape)?))
    };
    Ok((hist, Box::new(pullback)))
}

/// Routes each bin's adjoint to its single winner: dest when the winner is -1, else the element
/// at the winning position (a scatter of k values into n zeros; -1 is out of range and ignored).
pub fn winner_pullback<B: Ops>(b: &B, winners: &B::I, n: usize, g: &B::T) -> Result<(B::T, B::T)> {
    let dt = g.dtype();
    let zero = b.scalar(0.0, dt)?;
    let dest_won = b.index_eq(winners, -1, dt)?;
    let dest_won = b.reshape(&dest_won, g.shape())?;
    let dest_bar = b.select(&dest_won, g, &zero)?;
    let flat_g = b.reshape(g, &[g.numel()])?;
    let vals_bar = b.scatter(&b.full(&[n], 0.0, dt)?, winners, &flat_g)?;
    Ok((dest_bar, vals_bar))
}

fn mul_rule<B: Ops>(b: &B, dest: &B::T, inds: &B::I, vals: &B::T) -> Result<(B::T, HistPullback<B>)> {
    let (dt, k, shape) = (dest.dtype(), dest.numel(), dest.shape().to_vec());
    let (p, zeros, infs) = b.prod_nonzero_by_index(inds, vals, k)?;
    let p = b.reshape(&p, &shape)?;
    let (zero, one, inf, nan) =
        (b.scalar(0.0, dt)?, b.scalar(1.0, dt)?, b.scalar(f64::INFINITY, dt)?, b.scalar(f64::NAN, dt)?);
    let count_is = |count: &B::I, c: i64| b.reshape(&b.index_eq(count, c, dt)?, &shape);
    let not = |mask: &B::T| b.sub(&one, mask);
    let times_inf = |x: &B::T, mask: &B::T| times_inf_where(b, x, mask);
    let (no_zero, one_zero) = (count_is(&zeros, 0)?, count_is(&zeros, 1)?);
    let (no_inf, one_inf) = (count_is(&infs, 0)?, count_is(&infs, 1)?);
    // 1 where the bin has no NaN input (p, the product of its finite non-zero values and the
    // signs of its infinite ones, is NaN only with a NaN value): a NaN bin is NaN, zeros or
    // not, and so are its inputs' adjoints.
    let no_nan = b.mul(&b.binary(BinaryOp::Eq, &p, &p)?, &b.binary(BinaryOp::Eq, dest, dest)?)?;
    // dest is a factor too: zeros and infinities are counted over dest and the values.
    let dest_zero = b.binary(BinaryOp::Eq, dest, &zero)?;
    let dest_inf = b.binary(BinaryOp::Eq, &b.unary(UnaryOp::Abs, dest)?, &inf)?;
    let no_zero_at_all = b.mul(&no_zero, &not(&dest_zero)?)?;
    let one_zero_at_all = b.add(&b.mul(&no_zero, &dest_zero)?, &b.mul(&one_zero, &not(&dest_zero)?)?)?;
    let some_inf = not(&b.mul(&no_inf, &not(&dest_inf)?)?)?;
    let two_infs = not(&b.add(&no_inf, &b.mul(&one_inf, &not(&dest_inf)?)?)?)?;
    // The values' absorbing product (dest's adjoint per unit of hist_bar) and the finite part
    // of the whole bin's (dest's sign standing in for an infinite dest).
    let vals_prod_no_zero = times_inf(&p, &not(&no_inf)?)?;
    let dest_finite = b.select(&dest_inf, &b.unary(UnaryOp::Sign, dest)?, dest)?;
    let finite_prod = b.mul(&dest_finite, &p)?;
    // A bin with one zero factor is 0, but not a constant 0: its tangent is the product of the
    // other factors times the zero's tangent, which an engine nesting through the rule (forward
    // over reverse) differentiates. The zero factors' sum (0, with their tangents) times the
    // product of the non-zero ones carries it; with two zeros the tangent is 0. Only engines
    // that carry derivatives pay for these zeros; on a device they are constant zeros.
    let zero_tangents = if b.carries_derivatives() {
        Some(MulZeroTangents::new(b, dest, inds, vals, &p, &finite_prod, &zeros, &one_zero)?)
    } else {
        None
    };
    let one_zero_hist = match &zero_tangents {
        Some(z) => b.select(&one_zero_at_all, &z.bin, &zero)?,
        None => zero.clone(),
    };
    let hist =
        b.select(&no_nan, &b.select(&no_zero_at_all, &times_inf(&finite_prod, &some_inf)?, &one_zero_hist)?, &nan)?;
    let vals_prod = match &zero_tangents {
        Some(z) => b.select(&no_zero, &vals_prod_no_zero, &z.vals_prod)?,
        None => b.select(&no_zero, &vals_prod_no_zero, &zero)?,
    };
    let (inds, vals) = (inds.clone(), vals.clone());
    let pullback = move |b: &B, g: &B::T| {
        // What a NaN bin's inputs get: NaN, or 0 where the bin's adjoint is 0.
        let g_zero = b.binary(BinaryOp::Eq, g, &zero)?;
        let nan_g = b.select(&g_zero, &zero, &nan)?;
        // 0 where hist_bar is 0 against an infinite product (never 0 x inf = NaN); elsewhere
        // the product itself, whose tangent a nesting engine needs even where hist_bar is 0.
        let prod_inf = b.binary(BinaryOp::Eq, &b.unary(UnaryOp::Abs, &vals_prod)?, &inf)?;
        let absorbed = b.mul(&g_zero, &prod_inf)?;
        let dest_bar = b.select(&no_nan, &b.select(&absorbed, &zero, &b.mul(&vals_prod, g)?)?, &nan_g)?;
        // Each value's adjoint is hist_bar times the absorbing product of the other factors:
        // with no zero factor, a finite value's is c0 / v (c0 is infinite when some factor is)
        // and an infinite one's c2 sign(v) (infinite when another factor is); the zero of a bin
        // with one zero factor gets c1, and its non-zero values c0 / v with c0 = hist_bar times
        // the bin (0, carrying the zero's tangent); with two zeros everything gets 0 (and the
        // zeros the other zero's tangent, below).
        let scaled = b.mul(g, &finite_prod)?;
        let others = times_inf_where(b, &scaled, &some_inf)?;
        let per_bin = |mask: &B::T, x: &B::T| b.select(&no_nan, &b.select(mask, x, &zero)?, &nan_g);
        let c0 = match &zero_tangents {
            // (An infinite hist_bar leaves the 0 constant: never inf x 0.)
            Some(z) => {
                let one_zero_c0 = b.select(&one_zero_at_all, &b.mul(&zero_where_infinite(b, g)?, &z.bin)?, &zero)?;
                b.select(&no_nan, &b.select(&no_zero_at_all, &others, &one_zero_c0)?, &nan_g)?
            }
            None => per_bin(&no_zero_at_all, &others)?,
        };
        let c1 = per_bin(&one_zero_at_all, &others)?;
        let c2 = per_bin(&no_zero_at_all, &times_inf_where(b, &scaled, &two_infs)?)?;
        let vals_bar = b.prod_vals_adjoint(&inds, &vals, &c0, &c1, &c2)?;
        match &zero_tangents {
            Some(z) => Ok((dest_bar, b.add(&vals_bar, &z.second_zero_adjoint(b, g, &inds, &vals)?)?)),
            None => Ok((dest_bar, vals_bar)),
        }
    };
    Ok((hist, Box::new(pullback)))
}

/// The parts of `*`'s rule that are exactly 0 in value but carry the tangents of zero factors,
/// for engines that nest through the rule ([`TensorOps::carries_derivatives`]); bins laid out
/// as dest.
struct MulZeroTangents<B: Ops> {
    /// The bin where it holds one zero factor: the zero factors' sum times the product of the
    /// finite non-zero ones.
    bin: B::T,
    /// dest's adjoint per unit of hist_bar where one value is 0: that zero times the other
    /// values' product, whether dest is 0 too or not.
    vals_prod: B::T,
    /// Per bin (flat): the zero factors' sum, and the non-zero product where the bin holds
    /// exactly two zero factors (0 elsewhere).
    zeros_sum: B::T,
    two_zeros_prod: B::T,
}

impl<B: Ops> MulZeroTangents<B> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        b: &B,
        dest: &B::T,
        inds: &B::I,
        vals: &B::T,
        p: &B::T,
        finite_prod: &B::T,
        zeros: &B::I,
        one_zero: &B::T,
    ) -> Result<Self> {
        let (dt, k, shape) = (dest.dtype(), dest.numel(), dest.shape().to_vec());
        let (zero, one) = (b.scalar(0.0, dt)?, b.scalar(1.0, dt)?);
        let is_zero = |x: &B::T| b.binary(BinaryOp::Eq, x, &zero);
        let zero_factors = |x: &B::T| b.select(&is_zero(x)?, x, &zero);
        let dest_zero = is_zero(dest)?;
        let vals_zeros_sum = b.reduce_by_index(&b.full(&shape, 0.0, dt)?, HistOp::Add, inds, &zero_factors(vals)?)?;
        let zeros_sum = b.add(&zero_factors(dest)?, &vals_zeros_sum)?;
        // (An overflowed product absorbed by the zero keeps a constant 0: no inf x 0 anywhere.)
        let nonzero_prod = b.select(&dest_zero, p, finite_prod)?;
        let nonzero_prod = zero_where_infinite(b, &nonzero_prod)?;
        let p_finite = zero_where_infinite(b, p)?;
        let two_zeros = b.add(
            &b.mul(&b.reshape(&b.index_eq(zeros, 2, dt)?, &shape)?, &b.sub(&one, &dest_zero)?)?,
            &b.mul(one_zero, &dest_zero)?,
        )?;
        Ok(Self {
            bin: b.mul(&nonzero_prod, &zeros_sum)?,
            vals_prod: b.select(one_zero, &b.mul(&p_finite, &vals_zeros_sum)?, &zero)?,
            zeros_sum: b.reshape(&zeros_sum, &[k])?,
            two_zeros_prod: b.reshape(&b.select(&two_zeros, &nonzero_prod, &zero)?, &[k])?,
        })
    }

    /// What each zero value of a bin with two zero factors adds to its adjoint: hist_bar times
    /// the other zero (zeros_sum minus the value: 0, with that zero's tangent) times the
    /// non-zero product; 0 elsewhere, and where hist_bar is infinite.
    fn second_zero_adjoint(&self, b: &B, g: &B::T, inds: &B::I, vals: &B::T) -> Result<B::T> {
        let (dt, k) = (g.dtype(), g.numel());
        let zero = b.scalar(0.0, dt)?;
        let finite_g = b.reshape(&zero_where_infinite(b, g)?, &[k])?;
        let per_bin = b.mul(&finite_g, &self.two_zeros_prod)?;
        let at_value = |x: &B::T| b.reshape(&b.gather(x, inds, OutOfRange::Fill(0.0))?, vals.shape());
        // Selected before the product, so no NaN or infinite value meets a 0 (nor its adjoint).
        let zero_value = b.binary(BinaryOp::Eq, vals, &zero)?;
        let other_zero = b.select(&zero_value, &b.sub(&at_value(&self.zeros_sum)?, vals)?, &zero)?;
        b.mul(&at_value(&per_bin)?, &other_zero)
    }
}

/// x with its infinite entries replaced by 0 (a selected 0: an engine nesting through it sees no
/// inf in the branch it keeps).
fn zero_where_infinite<B: Ops>(b: &B, x: &B::T) -> Result<B::T> {
    let dt = x.dtype();
    let infinite = b.binary(BinaryOp::Eq, &b.unary(UnaryOp::Abs, x)?, &b.scalar(f64::INFINITY, dt)?)?;
    b.select(&infinite, &b.scalar(0.0, dt)?, x)
}

/// x times inf where `mask` is 1 and x is non-zero (an absorbing product: never 0 x inf = NaN).
/// x is multiplied by a selected factor (inf or 1) rather than selected between x and x inf, so
/// an engine nesting through the rule never sees 0 x inf in a discarded branch.
fn times_inf_where<B: Ops>(b: &B, x: &B::T, mask: &B::T) -> Result<B::T> {
    let dt = x.dtype();
    let one = b.scalar(1.0, dt)?;
    let nonzero = b.sub(&one, &b.binary(BinaryOp::Eq, x, &b.scalar(0.0, dt)?)?)?;
    let factor = b.select(&b.mul(mask, &nonzero)?, &b.scalar(f64::INFINITY, dt)?, &b.full(x.shape(), 1.0, dt)?)?;
    b.mul(x, &factor)
}

/// The total-form rule: `vals_bar[i] = total(v_i, t) hist_bar` and `dest_bar = total(dest, t)
/// hist_bar` with t the final bin value.
fn total_form_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let hist = b.reduce_by_index(dest, op, inds, vals)?;
    let k = dest.numel();
    let bins = b.index(&(0..k as i64).collect::<Vec<_>>())?;
    let (h, inds, vals, dest) = (hist.clone(), inds.clone(), vals.clone(), dest.clone());
    let pullback = move |b: &B, g: &B::T| {
        let vals_bar = b.total_form_adjoint(op, &inds, &vals, &h, g)?;
        let dest_flat = b.reshape(&dest, &[k])?;
        let dest_bar = b.total_form_adjoint(op, &bins, &dest_flat, &h, g)?;
        Ok((b.reshape(&dest_bar, dest.shape())?, b.reshape(&vals_bar, vals.shape())?))
    };
    Ok((hist, Box::new(pullback)))
}

/// dest_bar = d1(dest, h) * hist_bar, h the fold of the bin's elements alone; 0 where hist_bar
/// is 0 (even where the partial is not finite), as for the elements.
fn general_dest_adjoint<B: Ops>(b: &B, op: HistOp, dest: &B::T, elements: &B::T, g: &B::T) -> Result<B::T> {
    let d1 = b.combine_partial(op, Operand::Left, dest, elements)?;
    let zero = b.scalar(0.0, g.dtype())?;
    b.select(&b.binary(BinaryOp::Eq, g, &zero)?, &zero, &b.mul(&d1, g)?)
}

/// The general rule, sort strategy: sort by bin (stable), exclusive segmented scans forwards
/// (after dest) and backwards give l and r, and the adjoints are scattered back.
fn general_sort_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let (dt, k, n) = (dest.dtype(), dest.numel(), vals.numel());
    let neutral = b.full(dest.shape(), op.neutral(), dt)?;
    let elements = b.reduce_by_index(&neutral, op, inds, vals)?;
    let hist = b.combine(op, dest, &elements)?;
    let (dest, inds, vals) = (dest.clone(), inds.clone(), vals.clone());
    let pullback = move |b: &B, g: &B::T| {
        // One fused kernel: the stable sort by bin carries values and positions along, and each
        // bin's forward and backward folds (the exclusive segmented scans) give l, r and the
        // adjoint in one pass over the segments.
        let flat = b.reshape(&vals, &[n])?;
        let dest_flat = b.reshape(&dest, &[k])?;
        let g_flat = b.reshape(g, &[k])?;
        let vals_bar = b.sorted_vals_adjoint(op, &inds, &flat, &dest_flat, &g_flat)?;
        Ok((general_dest_adjoint(b, op, &dest, &elements, g)?, b.reshape(&vals_bar, vals.shape())?))
    };
    Ok((hist, Box::new(pullback)))
}

/// The general rule, chunked strategy (sort-free): the forward sweep keeps the chunk carries,
/// the pullback re-runs each chunk's running array forwards and backwards.
fn general_chunked_rule<B: Ops>(
    b: &B,
    dest: &B::T,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
) -> Result<(B::T, HistPullback<B>)> {
    let ch = b.reduce_by_index_chunked(dest, op, inds, vals)?;
    let (dest, inds, vals) = (dest.clone(), inds.clone(), vals.clone());
    let hist = ch.hist.clone();
    let pullback = move |b: &B, g: &B::T| {
        let vals_bar = b.chunked_vals_adjoint(op, &inds, &vals, &ch.chunk_prefix, &ch.chunk_suffix, g)?;
        Ok((general_dest_adjoint(b, op, &dest, &ch.elements, g)?, b.reshape(&vals_bar, vals.shape())?))
    };
    Ok((hist, Box::new(pullback)))
}

/// The tangent of an arg-histogram's values: the winner's tangent, dest's when dest won (-1).
pub fn winner_tangent<B: Ops>(
    b: &B,
    winners: &B::I,
    hist: &B::T,
    dest_dot: Option<&B::T>,
    vals_dot: Option<&B::T>,
) -> Result<B::T> {
    let k = hist.numel();
    // Position -1 is out of range: the gather fills 0 there, and dest's tangent goes in.
    let from_vals = match vals_dot {
        Some(dv) => {
            let flat = b.reshape(dv, &[dv.numel()])?;
            b.gather(&flat, winners, OutOfRange::Fill(0.0))?
        }
        None => b.full(&[k], 0.0, hist.dtype())?,
    };
    let from_vals = b.reshape(&from_vals, hist.shape())?;
    match dest_dot {
        Some(dd) => {
            let dest_won = b.reshape(&b.index_eq(winners, -1, hist.dtype())?, hist.shape())?;
            b.select(&dest_won, dd, &from_vals)
        }
        None => Ok(from_vals),
    }
}

/// The forward rule of `reduce_by_index`: `(hist, hist_dot)`, hist_dot None when neither input
/// has a tangent.
pub fn reduce_by_index_jvp<B: Ops>(
    b: &B,
    dest: &B::T,
    dest_dot: Option<&B::T>,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
    vals_dot: Option<&B::T>,
) -> Result<(B::T, Option<B::T>)> {
    if dest_dot.is_none() && vals_dot.is_none() {
        return Ok((b.reduce_by_index(dest, op, inds, vals)?, None));
    }
    if let Some(ext) = op.tie_break() {
        let (hist, winners) = b.arg_reduce_by_index(dest, ext, inds, vals)?;
        let dot = winner_tangent(b, &winners, &hist, dest_dot, vals_dot)?;
        return Ok((hist, Some(dot)));
    }
    if op == HistOp::Add
        && let (Some(dd), None) = (dest_dot, vals_dot)
    {
        // Only dest moves: the histogram's tangent is dest's.
        return Ok((b.reduce_by_index(dest, op, inds, vals)?, Some(dd.clone())));
    }
    // `+` with moving values, `*` and smooth general operators: the lifted (dual-number)
    // histogram is exact, and one pass over the indices (`+` as two histograms read them
    // twice).
    let dd = match dest_dot {
        Some(dd) => dd.clone(),
        None => b.zeros_like(dest)?,
    };
    let dv = match vals_dot {
        Some(dv) => dv.clone(),
        None => b.zeros_like(vals)?,
    };
    if let Some(kind) = Relative::of(op) {
        if let Some((hist, dot)) = b.relative_reduce_by_index_dual(kind, dest, &dd, op, inds, vals, &dv)? {
            return Ok((hist, Some(dot)));
        }
        // On the inputs relative to their bin's largest, as the reverse rules (`Relative`): the
        // partials are invariant, so the tangents pass unchanged.
        let (anchor, dest_rel, vals_rel) = kind.inputs(b, dest, inds, vals)?;
        let (hist_rel, dot) = b.reduce_by_index_dual(&dest_rel, &dd, op, inds, &vals_rel, &dv)?;
        return Ok((kind.result(b, &anchor, &hist_rel)?, Some(dot)));
    }
    let (hist, dot) = b.reduce_by_index_dual(dest, &dd, op, inds, vals, &dv)?;
    Ok((hist, Some(dot)))
}

/// Forward rule of the `*` rule kernel `prod_nonzero_by_index`: the product p of a bin's
/// finite non-zero values (and its infinite values' signs, which have no tangent) has
/// dp = p * sum over the finite non-zero values of dv / v (the counts have no tangent).
pub fn prod_nonzero_by_index_jvp<B: Ops>(b: &B, inds: &B::I, vals: &B::T, vals_dot: &B::T, p: &B::T) -> Result<B::T> {
    let rel = b.mul(vals_dot, &finite_recip(b, inds, vals, p)?)?;
    let sums = b.reduce_by_index(&b.zeros_like(p)?, HistOp::Add, inds, &rel)?;
    b.mul(p, &sums)
}

/// `1 / v` at the finite non-zero values in range, 0 at zeros, infinities and out-of-range
/// indices: `prod_vals_adjoint` with `c0 = 1, c1 = c2 = 0` (`like` gives the bins' shape).
fn finite_recip<B: Ops>(b: &B, inds: &B::I, vals: &B::T, like: &B::T) -> Result<B::T> {
    let zeros = b.zeros_like(like)?;
    b.prod_vals_adjoint(inds, vals, &b.full(like.shape(), 1.0, vals.dtype())?, &zeros, &zeros)
}

/// Forward rule of the `*` rule kernel `prod_vals_adjoint` (`out = v == 0 ? c1 : (v infinite ?
/// c2 sign(v) : c0 / v)`, per bin): d out = prod_vals_adjoint(dc0, dc1, dc2) - [v finite, non-zero]
/// out dv / v (out is constant in v at zeros and infinities). `c` and `c_dot` are (c0, c1, c2)
/// and their tangents.
pub fn prod_vals_adjoint_jvp<B: Ops>(
    b: &B,
    inds: &B::I,
    vals: &B::T,
    c: [&B::T; 3],
    out: &B::T,
    vals_dot: Option<&B::T>,
    c_dot: [Option<&B::T>; 3],
) -> Result<B::T> {
    let mut dot = if c_dot.iter().any(Option::is_some) {
        let [d0, d1, d2] = [0, 1, 2].map(|j| c_dot[j].cloned().map_or_else(|| b.zeros_like(c[j]), Ok));
        b.prod_vals_adjoint(inds, vals, &d0?, &d1?, &d2?)?
    } else {
        b.zeros_like(out)?
    };
    if let Some(dv) = vals_dot {
        let zero = b.scalar(0.0, vals.dtype())?;
        let recip = finite_recip(b, inds, vals, c[0])?;
        let term = b.mul(&b.mul(out, dv)?, &recip)?;
        dot = b.sub(&dot, &b.select(&b.binary(BinaryOp::Eq, &recip, &zero)?, &zero, &term)?)?;
    }
    Ok(dot)
}

/// Reverse rule of the `*` rule kernel `prod_nonzero_by_index`: `dp/dv = p / v` for a finite
/// non-zero value in range, else 0 (p holds only an infinite value's sign), so
/// `vals_bar = prod_vals_adjoint(inds, vals, p_bar * p, 0, 0)`, which never divides by zero.
pub fn prod_nonzero_by_index_vjp<B: Ops>(b: &B, inds: &B::I, vals: &B::T, p: &B::T, p_bar: &B::T) -> Result<B::T> {
    let c0 = b.mul(p_bar, p)?;
    let zeros = b.zeros_like(&c0)?;
    b.prod_vals_adjoint(inds, vals, &c0, &zeros, &zeros)
}

/// Reverse rule of the `*` rule kernel `prod_vals_adjoint` (`out = v == 0 ? c1 : (v infinite ?
/// c2 sign(v) : c0 / v)` per bin, 0 out of range): `[vals_bar, c0_bar, c1_bar, c2_bar]` with
/// `c0_bar` the per-bin sum of `g / v` over finite non-zero values, `c1_bar` that of `g` over
/// zero values, `c2_bar` that of `g sign(v)` over infinite values, and `vals_bar = -g out / v`
/// at finite non-zero values (0 elsewhere: out is constant in v there). `1 / v` and the signs
/// come from the kernel itself, so nothing divides by zero or by an infinity. `c0` gives the
/// bins' shape.
pub fn prod_vals_adjoint_vjp<B: Ops>(
    b: &B,
    inds: &B::I,
    vals: &B::T,
    c0: &B::T,
    out: &B::T,
    g: &B::T,
) -> Result<[B::T; 4]> {
    let dt = vals.dtype();
    let zero = b.scalar(0.0, dt)?;
    let bins = b.zeros_like(c0)?;
    let per_bin = |x: &B::T| b.reduce_by_index(&bins, HistOp::Add, inds, x);
    let recip = finite_recip(b, inds, vals, c0)?;
    let c0_bar = per_bin(&b.mul(g, &recip)?)?;
    let at_zeros = b.select(&b.binary(BinaryOp::Eq, vals, &zero)?, g, &zero)?;
    let c1_bar = per_bin(&at_zeros)?;
    let inf_signs = b.prod_vals_adjoint(inds, vals, &bins, &bins, &b.full(c0.shape(), 1.0, dt)?)?;
    let c2_bar = per_bin(&b.mul(g, &inf_signs)?)?;
    let term = b.neg(&b.mul(&b.mul(g, out)?, &recip)?)?;
    let vals_bar = b.select(&b.binary(BinaryOp::Eq, &recip, &zero)?, &zero, &term)?;
    Ok([vals_bar, c0_bar, c1_bar, c2_bar])
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use proptest::prelude::*;

    use super::*;
    use crate::{Cpu, DType, IndexDType, OpError, Reverse, oracle};

    struct Out {
        hist: Vec<f64>,
        dest_bar: Vec<f64>,
        vals_bar: Vec<f64>,
    }

    fn run(cpu: &Cpu, op: HistOp, dt: DType, dest: &[f64], inds: &[i64], vals: &[f64], hist_bar: &[f64]) -> Out {
        run_rule(cpu, HistRule::Special, op, dt, dest, inds, vals, hist_bar).unwrap()
    }

    #[allow(clippy::too_many_arguments)]
    fn run_rule(
        cpu: &Cpu,
        rule: HistRule,
        op: HistOp,
        dt: DType,
        dest: &[f64],
        inds: &[i64],
        vals: &[f64],
        hist_bar: &[f64],
    ) -> Result<Out> {
        let r = Reverse::new(cpu.clone()).with_hist_rule(rule);
        let d = r.var(cpu.tensor(dest, &[dest.len()], dt)?);
        let v = r.var(cpu.tensor(vals, &[vals.len()], dt)?);
        let ix = cpu.index(inds)?;
        let h = r.reduce_by_index(&d, op, &ix, &v)?;
        let g = r.backward(&h, cpu.tensor(hist_bar, &[hist_bar.len()], dt)?)?;
        Ok(Out {
            hist: cpu.to_vec(h.value())?,
            dest_bar: cpu.to_vec(&g.get_or_zeros(cpu, &d)?)?,
            vals_bar: cpu.to_vec(&g.get_or_zeros(cpu, &v)?)?,
        })
    }

    fn round(dt: DType, xs: &[f64]) -> Vec<f64> {
        xs.iter().map(|&x| dt.round(x)).collect()
    }

    /// The rules that apply to `op` (special is an error elsewhere, tested separately).
    fn rules_for(op: HistOp) -> Vec<HistRule> {
        HistRule::ALL.into_iter().filter(|r| r.applies_to(op)).collect()
    }

    /// Exact for operators with a tie break (min/max select, they do not compute) and for
    /// small-integer cases; to a few ulps of the dtype otherwise.
    fn tolerance(op: HistOp, dt: DType) -> f64 {
        if op.tie_break().is_some() { 0.0 } else { 64.0 * dt.epsilon() }
    }

    fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64, dt: DType) {
        assert_eq!(got.len(), want.len(), "{what} length");
        for (j, (&a, &e)) in got.iter().zip(want).enumerate() {
            let ok = if tol == 0.0 {
                a == dt.round(e) || (a.is_nan() && e.is_nan())
            } else {
                a == e || (a - e).abs() <= tol * e.abs().max(1.0)
            };
            assert!(ok, "{what}[{j}]: got {a}, want {e}");
        }
    }

    /// Compares `rule` with the oracle on dtype-rounded inputs.
    #[allow(clippy::too_many_arguments)]
    fn check_rule(
        cpu: &Cpu,
        rule: HistRule,
        op: HistOp,
        dt: DType,
        dest: &[f64],
        inds: &[i64],
        vals: &[f64],
        hist_bar: &[f64],
    ) -> Out {
        let (dest, vals, hist_bar) = (round(dt, dest), round(dt, vals), round(dt, hist_bar));
        let got = run_rule(cpu, rule, op, dt, &dest, inds, &vals, &hist_bar).unwrap();
        let (h, db, vb) = oracle::hist_vjp(op, &dest, inds, &vals, &hist_bar);
        let tol = tolerance(op, dt);
        let tag = format!("{op} {rule} {dt}");
        assert_close(&format!("{tag} hist"), &got.hist, &h, tol, dt);
        assert_close(&format!("{tag} dest_bar"), &got.dest_bar, &db, tol, dt);
        assert_close(&format!("{tag} vals_bar"), &got.vals_bar, &vb, tol, dt);
        got
    }

    /// The special rule against the oracle (the original suite's check).
    fn check(cpu: &Cpu, op: HistOp, dt: DType, dest: &[f64], inds: &[i64], vals: &[f64], hist_bar: &[f64]) {
        check_rule(cpu, HistRule::Special, op, dt, dest, inds, vals, hist_bar);
    }

    /// dest within the operator's domain: hypot's bins are magnitudes (0 is neutral only on
    /// [0, inf)), so its dest is non-negative; elements may be negative.
    fn in_domain(op: HistOp, dest: &[f64]) -> Vec<f64> {
        if op == HistOp::General(&crate::general::HYPOT) {
            dest.iter().map(|x| x.abs()).collect()
        } else {
            dest.to_vec()
        }
    }

    /// Every applicable rule against the oracle and against each other.
    #[allow(clippy::too_many_arguments)]
    fn check_all_rules(cpu: &Cpu, op: HistOp, dt: DType, dest: &[f64], inds: &[i64], vals: &[f64], hist_bar: &[f64]) {
        let dest = &in_domain(op, dest)[..];
        let outs: Vec<(HistRule, Out)> = rules_for(op)
            .into_iter()
            .map(|rule| (rule, check_rule(cpu, rule, op, dt, dest, inds, vals, hist_bar)))
            .collect();
        let (r0, first) = &outs[0];
        let tol = tolerance(op, dt);
        for (rule, o) in &outs[1..] {
            let tag = format!("{op} {dt} {rule} vs {r0}");
            assert_close(&format!("{tag} hist"), &o.hist, &first.hist, tol, dt);
            assert_close(&format!("{tag} dest_bar"), &o.dest_bar, &first.dest_bar, tol, dt);
            assert_close(&format!("{tag} vals_bar"), &o.vals_bar, &first.vals_bar, tol, dt);
        }
    }

    fn cpu() -> Cpu {
        Cpu::new(Some(2)).unwrap()
    }

    #[test]
    fn add_sends_every_in_range_element_its_bins_adjoint() {
        let c = cpu();
        let got = run(
            &c,
            HistOp::Add,
            DType::F64,
            &[1.0, 2.0],
            &[0, 1, 1, 2, -1, 0],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &[10.0, 20.0],
        );
        assert_eq!(got.hist, vec![8.0, 7.0]);
        assert_eq!(got.dest_bar, vec![10.0, 20.0]);
        assert_eq!(got.vals_bar, vec![10.0, 20.0, 20.0, 0.0, 0.0, 10.0]);
    }

    #[test]
    fn min_and_max_give_ties_to_dest_then_to_the_lowest_position() {
        let c = cpu();
        // bin 0: dest 1 ties element 0 -> dest wins; bin 1: elements 1 and 3 tie at 0.5 ->
        // position 1 wins; bin 2: empty -> dest.
        let dest = [1.0, 2.0, -3.0];
        let inds = [0, 1, 0, 1, 5];
        let vals = [1.0, 0.5, 4.0, 0.5, -100.0];
        let got = run(&c, HistOp::Min, DType::F32, &dest, &inds, &vals, &[1.0, 2.0, 3.0]);
        assert_eq!(got.hist, vec![1.0, 0.5, -3.0]);
        assert_eq!(got.dest_bar, vec![1.0, 0.0, 3.0]);
        assert_eq!(got.vals_bar, vec![0.0, 2.0, 0.0, 0.0, 0.0]);
        let got = run(&c, HistOp::Max, DType::F64, &[4.0, 0.5, -3.0], &inds, &vals, &[1.0, 2.0, 3.0]);
        assert_eq!(got.hist, vec![4.0, 0.5, -3.0]);
        assert_eq!(got.dest_bar, vec![1.0, 2.0, 3.0]);
        assert_eq!(got.vals_bar, vec![0.0; 5]);
    }

    #[test]
    fn mul_handles_bins_with_zero_one_and_two_zeros_without_dividing_by_zero() {
        let c = cpu();
        // bin 0: no zeros (2*3); bin 1: one zero; bin 2: two zeros; bin 3: empty.
        let dest = [0.5, 2.0, 3.0, 7.0];
        let inds = [0, 1, 2, 0, 1, 2, 2];
        let vals = [2.0, 0.0, 0.0, 3.0, 5.0, 0.0, 4.0];
        for dt in DType::ALL {
            let got = run(&c, HistOp::Mul, dt, &dest, &inds, &vals, &[1.0, 1.0, 1.0, 1.0]);
            assert_eq!(got.hist, vec![3.0, 0.0, 0.0, 7.0]);
            assert_eq!(got.dest_bar, vec![6.0, 0.0, 0.0, 1.0]);
            // d/dv0 = 0.5*3, d/dv3 = 0.5*2; the lone zero of bin 1 gets 2*5; nothing else.
            assert_eq!(got.vals_bar, vec![1.5, 10.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
            assert!(got.vals_bar.iter().all(|x| x.is_finite()));
        }
    }

    #[test]
    fn rule_names_are_the_documented_ones_and_parse_back() {
        // Suites, eval's --rule and result rows name rules by these strings (README).
        let names: Vec<&str> = HistRule::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names, ["auto", "special", "general-sort", "general-chunked"]);
        for r in HistRule::ALL {
            assert_eq!(r.name().parse::<HistRule>(), Ok(r));
            // Messages and test labels print rules with Display: the same names.
            assert_eq!(r.to_string(), r.name());
        }
        assert!("magic".parse::<HistRule>().unwrap_err().starts_with("unknown rule 'magic'"));
    }

    /// Forward over reverse through `*`'s rules at bins with zero factors: the Hessian of a
    /// bin's product h = dest v_1 ... v_m is H_ij = the product of the factors other than i and
    /// j, so its product with a direction is non-zero exactly where the adjoints are zeros
    /// whose tangents matter (a bin with one zero: every adjoint but the zero's is 0 in value;
    /// with two: every one but the zeros' stays 0 along the zeros' directions).
    #[test]
    fn mul_rules_nest_through_zero_factors() {
        let c = cpu();
        let bins: [(f64, &[f64]); 5] = [
            (2.0, &[0.0, 3.0, 5.0]),
            (2.0, &[0.0, 0.0, 5.0]),
            (0.0, &[0.0, 3.0, 5.0]),
            (0.0, &[4.0, -3.0]),
            (2.0, &[0.0, 0.0, 0.0]),
        ];
        // The rules that take `*`'s own (the general ones' fused kernels have no derivative
        // rules: they cannot nest on the CPU).
        for rule in [HistRule::Auto, HistRule::Special] {
            for &(dest, vals) in &bins {
                // Factors laid out [dest, vals..], with one direction for each.
                let factors: Vec<f64> = std::iter::once(dest).chain(vals.iter().copied()).collect();
                let dir: Vec<f64> = (0..factors.len()).map(|i| [0.5, 1.0, -2.0, 3.0][i % 4]).collect();
                let others = |i: usize, j: usize| -> f64 {
                    factors.iter().enumerate().filter(|&(m, _)| m != i && m != j).map(|(_, x)| x).product()
                };
                let want: Vec<f64> = (0..factors.len())
                    .map(|i| (0..factors.len()).filter(|&j| j != i).map(|j| others(i, j) * dir[j]).sum())
                    .collect();
                let fw = crate::Forward::new(c.clone());
                let r = crate::Reverse::new(fw.clone()).with_hist_rule(rule);
                let t = |x: &[f64]| c.tensor(x, &[x.len()], DType::F64).unwrap();
                let d = r.var(fw.dual(t(&[dest]), t(&dir[..1])).unwrap());
                let v = r.var(fw.dual(t(vals), t(&dir[1..])).unwrap());
                let h = r.reduce_by_index(&d, HistOp::Mul, &c.index(&vec![0; vals.len()]).unwrap(), &v).unwrap();
                let g = r.backward(&h, fw.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
                let tangent = |x| c.to_vec(&fw.tangent(&g.get_or_zeros(&fw, x).unwrap()).unwrap()).unwrap();
                let got: Vec<f64> = tangent(&d).into_iter().chain(tangent(&v)).collect();
                let close = got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-12 * (1.0 + b.abs()));
                assert!(close && got.len() == want.len(), "{rule:?} dest {dest} vals {vals:?}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn mul_zeros_absorb_an_overflowed_product_on_every_rule() {
        // Issue 16: vals 1e200 twice into a zero dest gave hist NaN on every rule (0 * inf) and
        // a NaN vals_bar on `auto`. `*`'s zeros absorb: the bin is 0, the values' adjoints are
        // dest times the other factors (0), dest's is the product of the values (inf).
        let c = cpu();
        let inf = f64::INFINITY;
        for op in [HistOp::Mul, HistOp::General(&crate::general::MUL)] {
            for rule in rules_for(op) {
                let got = run_rule(&c, rule, op, DType::F64, &[0.0], &[0, 0], &[1e200, 1e200], &[1.0]).unwrap();
                assert_eq!(
                    (got.hist, got.vals_bar, got.dest_bar),
                    (vec![0.0], vec![0.0, 0.0], vec![inf]),
                    "{op:?} {rule:?}"
                );
                // A zero value after an overflow: the fold is inf * 0, here 0; only the zero's
                // adjoint (the product of the others, inf) is non-zero.
                let got = run_rule(&c, rule, op, DType::F64, &[1.0], &[0, 0, 0], &[1e200, 1e200, 0.0], &[1.0]).unwrap();
                assert_eq!(
                    (got.hist, got.vals_bar, got.dest_bar),
                    (vec![0.0], vec![0.0, 0.0, inf], vec![0.0]),
                    "{op:?} {rule:?}"
                );
            }
        }
        let (_, dest_bar, vals_bar) = oracle::hist_vjp(HistOp::Mul, &[0.0], &[0, 0], &[1e200, 1e200], &[1.0]);
        assert_eq!(
            (oracle::hist(HistOp::Mul, &[0.0], &[0, 0], &[1e200, 1e200]), vals_bar, dest_bar),
            (vec![0.0], vec![0.0, 0.0], vec![inf])
        );
    }

    #[test]
    fn mul_gives_each_factor_the_product_of_the_others_at_infinities_on_every_rule_and_mode() {
        // Issue 36: `special` gave the inf of [inf, 2] (dest 3) the adjoint c0 / inf with
        // c0 = 3 inf 2 (inf / inf = NaN), and the lifted fold's tangent had inf x 0 = NaN.
        // Each factor's adjoint is hist_bar times the product of the other factors.
        let c = cpu();
        let inf = f64::INFINITY;
        // (dest, values, hist_bar, hist, dest_bar, vals_bar), one bin each, by hand.
        #[allow(clippy::type_complexity)]
        let bins: [(f64, &[f64], f64, f64, f64, &[f64]); 6] = [
            (3.0, &[inf, 2.0], 1.0, inf, inf, &[6.0, inf]),
            (-inf, &[2.0, 0.5], 2.0, -inf, 2.0, &[-inf, -inf]),
            (0.5, &[-inf, 4.0], -1.0, -inf, inf, &[-2.0, inf]),
            (0.5, &[-inf, 4.0, inf], -1.0, -inf, inf, &[-inf, inf, inf]),
            (2.0, &[0.0, inf, 3.0], 0.5, 0.0, 0.0, &[inf, 0.0, 0.0]),
            (5.0, &[inf, 2.0], 0.0, inf, 0.0, &[0.0, 0.0]),
        ];
        for op in [HistOp::Mul, HistOp::General(&crate::general::MUL)] {
            for rule in rules_for(op) {
                for dt in DType::ALL {
                    for (dest, vals, g, hist, dest_bar, vals_bar) in bins {
                        let inds = vec![0; vals.len()];
                        let got = run_rule(&c, rule, op, dt, &[dest], &inds, vals, &[g]).unwrap();
                        let what = format!("{op:?} {rule:?} {dt:?} dest {dest} vals {vals:?}");
                        assert_eq!(
                            (got.hist, got.dest_bar, got.vals_bar),
                            (vec![hist], vec![dest_bar], vals_bar.to_vec()),
                            "{what}"
                        );
                    }
                }
            }
            // Forward mode: dest 3 (tangent 0), [inf (tangent 1), 2 (tangent 0)]: only the
            // inf's term, 3 x 2 x 1; zero tangents contribute 0 next to infinite partials.
            // With a tangent on 2 as well, its term 3 inf makes the tangent inf.
            let f = crate::Forward::new(c.clone());
            for (dv, want) in [([1.0, 0.0], 6.0), ([0.0, 0.0], 0.0), ([1.0, -0.5], -inf)] {
                let t = |x: &[f64]| c.tensor(x, &[x.len()], DType::F64).unwrap();
                let d = f.dual(t(&[3.0]), t(&[0.0])).unwrap();
                let v = f.dual(t(&[inf, 2.0]), t(&dv)).unwrap();
                let h = f.reduce_by_index(&d, op, &c.index(&[0, 0]).unwrap(), &v).unwrap();
                assert_eq!(c.to_vec(h.value()).unwrap(), vec![inf], "{op:?}");
                assert_eq!(c.to_vec(&f.tangent(&h).unwrap()).unwrap(), vec![want], "{op:?} {dv:?}");
            }
        }
        let (hist, dest_bar, vals_bar) = oracle::hist_vjp(HistOp::Mul, &[3.0], &[0, 0], &[inf, 2.0], &[1.0]);
        assert_eq!((hist, dest_bar, vals_bar), (vec![inf], vec![inf], vec![6.0, inf]));
        let (_, dot) = oracle::hist_jvp(HistOp::Mul, &[3.0], &[0, 0], &[inf, 2.0], &[0.0], &[1.0, 0.0]);
        assert_eq!(dot, vec![6.0]);
    }

    #[test]
    fn logaddexp_exact_ties_split_evenly_on_every_rule_at_any_magnitude() {
        // Issue 16: vals = dest = 1e16 gave adjoints 1/1 on `auto` (e^(v - t) with t + log 2
        // rounded to t) and 1/2 each on the general rules. d/dv log(e^v + e^d) = 1/2 at v = d.
        let c = cpu();
        let lae = HistOp::General(&crate::general::LOGADDEXP);
        for (dt, x) in [(DType::F64, 1e16), (DType::F64, 0.25), (DType::F32, 1e7), (DType::F32, -3.0)] {
            for rule in HistRule::ALL {
                let got = run_rule(&c, rule, lae, dt, &[x], &[0], &[x], &[1.0]).unwrap();
                assert_eq!((got.vals_bar.clone(), got.dest_bar.clone()), (vec![0.5], vec![0.5]), "{dt:?} {x} {rule:?}");
                // Three tied inputs (one out of range ignored): a third each. The general rules
                // compose pairwise partials at the rounded fold x + log 2 = x, so at 1e16 (1e7 in
                // f32) only the max-shifted rule is exact there (it never rounds a fold).
                if x.abs() > 1e6 && matches!(rule, HistRule::GeneralSort | HistRule::GeneralChunked) {
                    continue;
                }
                let got = run_rule(&c, rule, lae, dt, &[x, 1.0], &[0, 0, 5], &[x, x, 7.0], &[3.0, 0.0]).unwrap();
                for (got, want) in got.vals_bar.iter().zip([1.0, 1.0, 0.0]).chain(got.dest_bar.iter().zip([1.0, 0.0])) {
                    assert!((got - want).abs() < 1e-6, "{dt:?} {x} {rule:?}: {got} vs {want}");
                }
            }
        }
        // A bin of -inf only (the neutral): hist -inf, adjoints 0, never NaN.
        for rule in HistRule::ALL {
            let ninf = f64::NEG_INFINITY;
            let got = run_rule(&c, rule, lae, DType::F64, &[ninf, 0.0], &[0, 1], &[ninf, 2.0], &[1.0, 1.0]).unwrap();
            assert_eq!(got.hist[0], ninf, "{rule:?}");
            assert_eq!((got.vals_bar[0], got.dest_bar[0]), (0.0, 0.0), "{rule:?}");
        }
    }

    #[test]
    fn edge_shapes_n0_k1_and_all_out_of_range() {
        let c = cpu();
        for op in HistOp::ALL {
            for dt in DType::ALL {
                check(&c, op, dt, &[1.5, -2.0], &[], &[], &[1.0, 1.0]);
                check(&c, op, dt, &[0.25], &[0, 0, 0, 0], &[1.0, 2.0, -1.0, 0.5], &[3.0]);
                check(
                    &c,
                    op,
                    dt,
                    &[1.0, 2.0],
                    &[-1, 2, 99, i64::MIN, i64::MAX],
                    &[1.0, 2.0, 3.0, 4.0, 5.0],
                    &[1.0, 1.0],
                );
            }
        }
        // k = 0: every index is out of range.
        let got = run(&c, HistOp::Add, DType::F64, &[], &[0, 1], &[1.0, 2.0], &[]);
        assert!(got.hist.is_empty() && got.dest_bar.is_empty());
        assert_eq!(got.vals_bar, vec![0.0, 0.0]);
    }

    #[test]
    fn large_inputs_use_many_chunks_and_still_match_the_oracle() {
        let c = cpu();
        let n = 200_000;
        let k = 37;
        let inds: Vec<i64> = (0..n).map(|i| ((i as u64 * 2_654_435_761) % (k as u64 + 4)) as i64 - 2).collect();
        let vals: Vec<f64> = (0..n).map(|i| 1.0 + ((i * 7919) % 2001) as f64 * 1e-6 - 1e-3).collect();
        let dest: Vec<f64> = (0..k).map(|b| 0.5 + b as f64 * 0.01).collect();
        let bar: Vec<f64> = (0..k).map(|b| 1.0 - b as f64 * 0.02).collect();
        for op in HistOp::ALL {
            check(&c, op, DType::F64, &dest, &inds, &vals, &bar);
        }
        // Ties everywhere: many equal values per bin; the first one of each bin must win.
        let tied: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
        check(&c, HistOp::Min, DType::F32, &dest, &inds, &tied, &bar);
        check(&c, HistOp::Max, DType::F32, &dest, &inds, &tied, &bar);
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let n = 300_000;
        let inds: Vec<i64> = (0..n).map(|i| ((i as u64 * 40503) % 1000) as i64).collect();
        let vals: Vec<f64> = (0..n).map(|i| ((i * 31) % 997) as f64 * 0.001).collect();
        let dest = vec![0.0; 1000];
        let bar = vec![1.0; 1000];
        let a = run(&Cpu::new(Some(1)).unwrap(), HistOp::Add, DType::F32, &dest, &inds, &vals, &bar);
        let b = run(&Cpu::new(Some(3)).unwrap(), HistOp::Add, DType::F32, &dest, &inds, &vals, &bar);
        assert_eq!(a.hist, b.hist);
    }

    fn case() -> impl Strategy<Value = (usize, Vec<i64>, Vec<f64>, Vec<f64>)> {
        (1usize..6, 0usize..40).prop_flat_map(|(k, n)| {
            (
                Just(k),
                proptest::collection::vec(-1i64..(k as i64 + 1), n),
                // Small integers make ties and zeros common.
                proptest::collection::vec((-3i32..4).prop_map(|x| x as f64 * 0.5), n),
                proptest::collection::vec((-3i32..4).prop_map(|x| x as f64 * 0.5), k),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn every_special_rule_matches_the_oracle((k, inds, vals, dest) in case()) {
            let c = Cpu::new(Some(1)).unwrap();
            let bar: Vec<f64> = (0..k).map(|b| 1.0 + b as f64).collect();
            for op in HistOp::ALL {
                for dt in DType::ALL {
                    check(&c, op, dt, &dest, &inds, &vals, &bar);
                }
            }
        }
    }

    fn every_op() -> Vec<HistOp> {
        HistOp::named()
    }

    #[test]
    fn general_rules_on_special_operators_give_the_special_answers_ties_included() {
        let c = cpu();
        // Ties with dest and between elements, empty bins, out-of-range indices; zeros for `*`.
        let dest = [1.0, 2.0, -3.0, 0.5];
        let inds = [0, 1, 0, 1, 5, -1, 1, 0];
        let vals = [1.0, 0.5, 4.0, 0.5, -100.0, 7.0, 0.0, 0.0];
        let bar = [1.0, 2.0, 3.0, 4.0];
        for op in HistOp::ALL {
            for dt in DType::ALL {
                let special = run_rule(&c, HistRule::Special, op, dt, &dest, &inds, &vals, &bar).unwrap();
                let as_general = HistOp::General(crate::general::as_general(op));
                for rule in [HistRule::GeneralSort, HistRule::GeneralChunked] {
                    for o in [op, as_general] {
                        let got = run_rule(&c, rule, o, dt, &dest, &inds, &vals, &bar).unwrap();
                        assert_eq!(got.hist, special.hist, "{o} {rule} {dt} hist");
                        assert_eq!(got.dest_bar, special.dest_bar, "{o} {rule} {dt} dest_bar");
                        assert_eq!(got.vals_bar, special.vals_bar, "{o} {rule} {dt} vals_bar");
                    }
                }
            }
        }
    }

    #[test]
    fn general_mul_rules_handle_zero_one_and_two_zeros_exactly() {
        let c = cpu();
        let dest = [0.5, 2.0, 3.0, 7.0];
        let inds = [0, 1, 2, 0, 1, 2, 2];
        let vals = [2.0, 0.0, 0.0, 3.0, 5.0, 0.0, 4.0];
        for rule in [HistRule::GeneralSort, HistRule::GeneralChunked] {
            for dt in DType::ALL {
                let got = run_rule(&c, rule, HistOp::Mul, dt, &dest, &inds, &vals, &[1.0; 4]).unwrap();
                assert_eq!(got.hist, vec![3.0, 0.0, 0.0, 7.0]);
                assert_eq!(got.dest_bar, vec![6.0, 0.0, 0.0, 1.0]);
                assert_eq!(got.vals_bar, vec![1.5, 10.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
            }
        }
    }

    #[test]
    fn logaddexp_and_hypot_rules_match_hand_computed_values() {
        let c = cpu();
        let lae = HistOp::General(&crate::general::LOGADDEXP);
        let hyp = HistOp::General(&crate::general::HYPOT);
        // bin 0: dest 0 with elements 0, 0 -> log 3; each gets 1/3. bin 1: empty (dest only).
        // bin 2: dest -inf with no elements: value -inf, zero derivatives (not NaN).
        for rule in HistRule::ALL {
            let got = run_rule(
                &c,
                rule,
                lae,
                DType::F64,
                &[0.0, 1.5, f64::NEG_INFINITY],
                &[0, 0, 7, -1],
                &[0.0, 0.0, 3.0, 3.0],
                &[1.0, 2.0, 1.0],
            )
            .unwrap();
            assert!((got.hist[0] - 3f64.ln()).abs() < 1e-15, "{rule}");
            assert_eq!(&got.hist[1..], &[1.5, f64::NEG_INFINITY]);
            for x in [got.dest_bar[0], got.vals_bar[0], got.vals_bar[1]] {
                assert!((x - 1.0 / 3.0).abs() < 1e-15, "{rule}: {x}");
            }
            assert_eq!(&got.dest_bar[1..], &[2.0, 0.0], "{rule}");
            assert_eq!(&got.vals_bar[2..], &[0.0, 0.0], "{rule}");
            // hypot: bin 0 = hypot(3, 4, -12) = 13 with a negative element; bin 1 all zero.
            let got =
                run_rule(&c, rule, hyp, DType::F64, &[3.0, 0.0], &[0, 0, 1, 1], &[4.0, -12.0, 0.0, 0.0], &[1.0, 1.0])
                    .unwrap();
            // (The rules compute 12 hypot(1/4, 1/3, 1): within an ulp of 13.)
            assert!((got.hist[0] - 13.0).abs() <= 13.0 * f64::EPSILON && got.hist[1] == 0.0, "{rule}: {:?}", got.hist);
            for (x, w) in got.dest_bar.iter().zip([3.0 / 13.0, 0.0]) {
                assert!((x - w).abs() < 1e-15, "{rule}: {x} vs {w}");
            }
            for (x, w) in got.vals_bar.iter().zip([4.0 / 13.0, -12.0 / 13.0, 0.0, 0.0]) {
                assert!((x - w).abs() < 1e-15, "{rule}: {x} vs {w}");
            }
        }
    }

    #[test]
    fn auto_takes_the_chunked_rule_for_products_with_many_bins_per_value_on_the_cpu() {
        let c = cpu();
        // The CPU's measured choice: `*` with k >= n/16 and n <= 2^20; every other case keeps
        // the operator's own rule.
        assert_eq!(c.auto_hist_rule(HistOp::Mul, 1000, 63), Some(HistRule::GeneralChunked));
        assert_eq!(c.auto_hist_rule(HistOp::Mul, 1000, 62), None);
        assert_eq!(c.auto_hist_rule(HistOp::Mul, 1 << 20, 1 << 20), Some(HistRule::GeneralChunked));
        assert_eq!(c.auto_hist_rule(HistOp::Mul, (1 << 20) + 1, 1 << 20), None);
        assert_eq!(c.auto_hist_rule(HistOp::Add, 1000, 1000), None);
        assert_eq!(c.auto_hist_rule(HistOp::Max, 1000, 1000), None);
        // And `auto` runs it: its results are those of the rule it took, bit for bit, and the
        // two rules round differently on these values (so the test tells them apart).
        let bits =
            |o: &Out| [&o.hist, &o.dest_bar, &o.vals_bar].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        let n = 64;
        let vals: Vec<f64> =
            (0..n).map(|i| if i % 9 == 4 { 0.0 } else { 0.5 + ((i * 37) % 101) as f64 / 101.0 }).collect();
        for (k, taken) in [(8, HistRule::GeneralChunked), (2, HistRule::Special)] {
            let inds: Vec<i64> = (0..n).map(|i| ((i * 5) % (k + 1)) as i64 - 1).collect();
            let dest: Vec<f64> = (0..k).map(|j| 1.0 + j as f64 / 7.0).collect();
            let hist_bar: Vec<f64> = (0..k).map(|j| 0.3 + j as f64 / 3.0).collect();
            let run = |rule| run_rule(&c, rule, HistOp::Mul, DType::F64, &dest, &inds, &vals, &hist_bar).unwrap();
            let (auto, special, chunked) = (run(HistRule::Auto), run(HistRule::Special), run(HistRule::GeneralChunked));
            assert_ne!(bits(&special), bits(&chunked), "k = {k}: the rules must round differently here");
            let want = if taken == HistRule::Special { &special } else { &chunked };
            assert_eq!(bits(&auto), bits(want), "k = {k}: auto should take {taken:?}");
            assert_eq!(resolved_rule(&c, HistRule::Auto, HistOp::Mul, n, k), taken, "k = {k}");
        }
    }

    #[test]
    fn auto_resolves_to_the_devices_choice_else_the_operators_own_rule() {
        let c = cpu();
        let g = |op: &'static crate::GeneralOp| HistOp::General(op);
        for (op, n, k, want) in [
            (HistOp::Mul, 1000, 100, HistRule::GeneralChunked), // the CPU's measured choice
            (HistOp::Mul, 10_000_000, 100, HistRule::Special),
            (HistOp::Add, 1000, 1000, HistRule::Special),
            (HistOp::Min, 10, 1_000_000, HistRule::Special),
            (g(&crate::general::LOGADDEXP), 1000, 10, HistRule::Special),
            (g(&crate::general::HYPOT), 1000, 10, HistRule::Special), // its total form
            (g(&crate::general::MUL), 1000, 10, HistRule::GeneralChunked), // no total form
        ] {
            assert_eq!(resolved_rule(&c, HistRule::Auto, op, n, k), want, "{op} n {n} k {k}");
        }
        // A named rule is itself, even where auto would take another.
        for rule in [HistRule::Special, HistRule::GeneralSort, HistRule::GeneralChunked] {
            assert_eq!(resolved_rule(&c, rule, HistOp::Mul, 1000, 100), rule);
        }
    }

    #[test]
    fn special_rule_of_a_general_operator_without_total_form_is_an_error() {
        let c = cpu();
        let op = HistOp::General(&crate::general::MUL);
        let err = run_rule(&c, HistRule::Special, op, DType::F64, &[1.0], &[0], &[2.0], &[1.0]);
        assert!(matches!(err, Err(OpError::Unsupported(_))), "{:?}", err.err());
        // auto falls back to the general rule.
        let got = run_rule(&c, HistRule::Auto, op, DType::F64, &[1.0], &[0], &[2.0], &[1.0]).unwrap();
        assert_eq!((got.hist, got.dest_bar, got.vals_bar), (vec![2.0], vec![2.0], vec![1.0]));
    }

    #[test]
    fn every_rule_and_operator_handles_edge_shapes() {
        let c = cpu();
        for op in every_op() {
            for dt in DType::ALL {
                // n = 0; k = 1; all out of range (-1 and >= k).
                check_all_rules(&c, op, dt, &[1.5, 2.0], &[], &[], &[1.0, 1.0]);
                check_all_rules(&c, op, dt, &[0.25], &[0, 0, 0, 0], &[1.0, 2.0, 1.0, 0.5], &[3.0]);
                check_all_rules(
                    &c,
                    op,
                    dt,
                    &[1.0, 2.0],
                    &[-1, 2, 99, i64::MIN, i64::MAX],
                    &[1.0, 2.0, 3.0, 4.0, 5.0],
                    &[1.0, 1.0],
                );
            }
        }
    }

    #[test]
    fn logaddexp_histogram_does_not_overflow_in_f32_and_hypot_handles_1e200_in_f64() {
        let c = cpu();
        let lae = HistOp::General(&crate::general::LOGADDEXP);
        let hyp = HistOp::General(&crate::general::HYPOT);
        for rule in HistRule::ALL {
            let got = run_rule(&c, rule, lae, DType::F32, &[100.0], &[0, 0, 0], &[100.0, 99.0, 101.0], &[1.0]).unwrap();
            let want = oracle::hist_vjp(lae, &[100.0], &[0, 0, 0], &[100.0, 99.0, 101.0], &[1.0]);
            assert!((got.hist[0] - want.0[0]).abs() < 1e-4, "{rule}: {:?}", got.hist);
            for (a, e) in got.vals_bar.iter().zip(&want.2) {
                assert!(a.is_finite() && (a - e).abs() < 1e-5, "{rule}: {a} vs {e}");
            }
            let got = run_rule(&c, rule, hyp, DType::F64, &[1e200], &[0, 0], &[1e200, 1e200], &[1.0]).unwrap();
            let t = 1e200 * 3f64.sqrt();
            assert!((got.hist[0] / t - 1.0).abs() < 1e-15, "{rule}: {:?}", got.hist);
            for x in got.vals_bar.iter().chain(&got.dest_bar) {
                assert!((x - 1.0 / 3f64.sqrt()).abs() < 1e-15, "{rule}: {x}");
            }
        }
    }

    /// Many chunks (n well above the chunk plan's threshold), out-of-range indices, ties.
    fn big_case(n: usize, k: usize) -> (Vec<i64>, Vec<f64>, Vec<f64>, Vec<f64>) {
        let inds: Vec<i64> = (0..n).map(|i| ((i as u64 * 2_654_435_761) % (k as u64 + 4)) as i64 - 2).collect();
        let vals: Vec<f64> = (0..n).map(|i| ((i * 7919) % 2001) as f64 * 1e-3 - 1.0).collect();
        let dest: Vec<f64> = (0..k).map(|b| 0.5 + b as f64 * 0.01).collect();
        let bar: Vec<f64> = (0..k).map(|b| 1.0 - b as f64 * 0.02).collect();
        (inds, vals, dest, bar)
    }

    #[test]
    fn general_rules_agree_on_large_inputs_with_many_chunks() {
        let c = cpu();
        let (inds, vals, dest, bar) = big_case(150_000, 37);
        let n = vals.len();
        for op in [
            HistOp::General(&crate::general::LOGADDEXP),
            HistOp::General(&crate::general::HYPOT),
            HistOp::Add,
            HistOp::Min,
            HistOp::General(&crate::general::MAX),
        ] {
            let outs: Vec<Out> = rules_for(op)
                .into_iter()
                .map(|rule| run_rule(&c, rule, op, DType::F64, &dest, &inds, &vals, &bar).unwrap())
                .collect();
            let tol = tolerance(op, DType::F64) * 16.0;
            for o in &outs[1..] {
                assert_close(&format!("{op} hist"), &o.hist, &outs[0].hist, tol, DType::F64);
                assert_close(&format!("{op} dest"), &o.dest_bar, &outs[0].dest_bar, tol, DType::F64);
                assert_close(&format!("{op} vals"), &o.vals_bar, &outs[0].vals_bar, tol, DType::F64);
            }
            assert_eq!(outs[0].vals_bar.len(), n);
        }
        // Ties everywhere (values 0, 1, 2): the first of each bin's minima wins in every rule.
        let tied: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
        // (The oracle of the special min stands for both: the general oracle is O(m^2) a bin.)
        let (dest, tied, bar) = (round(DType::F32, &dest), tied, round(DType::F32, &bar));
        let (h, db, vb) = oracle::hist_vjp(HistOp::Min, &dest, &inds, &tied, &bar);
        for op in [HistOp::Min, HistOp::General(&crate::general::MIN)] {
            for rule in rules_for(op) {
                let got = run_rule(&c, rule, op, DType::F32, &dest, &inds, &tied, &bar).unwrap();
                assert_close(&format!("{op} {rule} hist"), &got.hist, &h, 0.0, DType::F32);
                assert_close(&format!("{op} {rule} dest"), &got.dest_bar, &db, 0.0, DType::F32);
                assert_close(&format!("{op} {rule} vals"), &got.vals_bar, &vb, 0.0, DType::F32);
            }
        }
    }

    #[test]
    fn fused_sorted_adjoint_matches_the_composed_sort_and_scans() {
        let c = cpu();
        for (n, k) in [(0usize, 4usize), (9, 1), (150_000, 37), (60_000, 50_000)] {
            let (inds, vals, dest, bar) = big_case(n, k);
            let tied: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
            for op in every_op().into_iter().chain([HistOp::Add]) {
                for dt in DType::ALL {
                    for vs in [&vals, &tied] {
                        let vs = round(dt, &in_domain(op, vs));
                        let t = |x: &[f64]| c.tensor(x, &[x.len()], dt).unwrap();
                        let ix = c.index(&inds).unwrap();
                        let (v, d, g) = (t(&vs), t(&in_domain(op, &dest)), t(&bar));
                        let fused = c.to_vec(&c.sorted_vals_adjoint(op, &ix, &v, &d, &g).unwrap()).unwrap();
                        let composed = c
                            .to_vec(
                                &crate::composed::hist::sorted_vals_adjoint_composed(&c, op, &ix, &v, &d, &g).unwrap(),
                            )
                            .unwrap();
                        // Exact ops agree bit for bit; others up to the folds' association.
                        let tol = if matches!(op, HistOp::Min | HistOp::Max) { 0.0 } else { tolerance(op, dt) * 16.0 };
                        assert_close(&format!("{op} {dt} n={n} k={k}"), &fused, &composed, tol, dt);
                    }
                }
            }
        }
    }

    /// `<g, J d> == <J^T g, d>`: the reverse rules of the `*` histogram's primitives against
    /// their forward rules, with zeros and out-of-range indices.
    #[test]
    fn prod_primitives_reverse_rules_are_the_transposes_of_their_forward_rules() {
        let c = cpu();
        let dt = DType::F64;
        let inds = [0, 1, 0, 2, -1, 1, 0, 5, 2, 1];
        let inf = f64::INFINITY;
        let vals = [1.5, 0.0, -2.0, 0.5, 3.0, 4.0, 0.0, 2.0, -inf, inf];
        let dv = [0.3, -1.0, 0.7, 0.2, 1.1, -0.4, 0.9, 0.6, 0.8, -0.2];
        let k = 3;
        let t = |x: &[f64]| c.tensor(x, &[x.len()], dt).unwrap();
        let ix = c.index(&inds).unwrap();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let close = |a: f64, b: f64| assert!((a - b).abs() <= 1e-12 * a.abs().max(1.0), "{a} vs {b}");

        let f = crate::Forward::new(c.clone());
        let (p, _, _) = f.prod_nonzero_by_index(&ix, &f.dual(t(&vals), t(&dv)).unwrap(), k).unwrap();
        let jd = c.to_vec(&f.tangent(&p).unwrap()).unwrap();
        let r = Reverse::new(c.clone());
        let v = r.var(t(&vals));
        let (p, _, _) = r.prod_nonzero_by_index(&ix, &v, k).unwrap();
        let p_bar = [1.0, -2.0, 0.5];
        let g = r.backward(&p, t(&p_bar)).unwrap();
        close(dot(&p_bar, &jd), dot(&c.to_vec(g.get(&v).unwrap()).unwrap(), &dv));

        let (c0, c1, c2) = ([2.0, -1.0, 0.5], [0.25, 3.0, -4.0], [1.25, -0.5, 3.5]);
        let (dc0, dc1, dc2) = ([0.5, 1.5, -1.0], [-0.75, 0.5, 2.0], [0.25, -1.5, 0.75]);
        let out = f
            .prod_vals_adjoint(
                &ix,
                &f.dual(t(&vals), t(&dv)).unwrap(),
                &f.dual(t(&c0), t(&dc0)).unwrap(),
                &f.dual(t(&c1), t(&dc1)).unwrap(),
                &f.dual(t(&c2), t(&dc2)).unwrap(),
            )
            .unwrap();
        let jd = c.to_vec(&f.tangent(&out).unwrap()).unwrap();
        let (v, w0, w1, w2) = (r.var(t(&vals)), r.var(t(&c0)), r.var(t(&c1)), r.var(t(&c2)));
        let out = r.prod_vals_adjoint(&ix, &v, &w0, &w1, &w2).unwrap();
        // The infinite values' outputs are c2 sign(v): -c2[2] and c2[1].
        assert_eq!(c.to_vec(out.value()).unwrap()[8..], [-3.5, -0.5]);
        let out_bar = [1.0, 0.5, -1.0, 2.0, 0.25, -0.5, 1.5, 3.0, -2.0, 0.75];
        let g = r.backward(&out, t(&out_bar)).unwrap();
        let grad = |x| c.to_vec(g.get(x).unwrap()).unwrap();
        let moved = dot(&grad(&v), &dv) + dot(&grad(&w0), &dc0) + dot(&grad(&w1), &dc1) + dot(&grad(&w2), &dc2);
        close(dot(&out_bar, &jd), moved);
    }

    #[test]
    fn chunked_rule_does_not_depend_on_the_thread_count() {
        let (inds, vals, dest, bar) = big_case(200_000, 1000);
        let op = HistOp::General(&crate::general::LOGADDEXP);
        let run_on = |threads| {
            let c = Cpu::new(Some(threads)).unwrap();
            run_rule(&c, HistRule::GeneralChunked, op, DType::F32, &dest, &inds, &vals, &bar).unwrap()
        };
        let (a, b) = (run_on(1), run_on(3));
        assert_eq!(a.hist, b.hist);
        assert_eq!(a.dest_bar, b.dest_bar);
        assert_eq!(a.vals_bar, b.vals_bar);
    }

    /// The forward rule of `reduce_by_index` against the oracle's JVP.
    fn check_jvp(op: HistOp, dt: DType, dest: &[f64], inds: &[i64], vals: &[f64]) {
        let c = Cpu::new(Some(1)).unwrap();
        let (dest, vals) = (round(dt, &in_domain(op, dest)), round(dt, vals));
        let dd: Vec<f64> = (0..dest.len()).map(|b| dt.round(0.5 - 0.25 * b as f64)).collect();
        let dv: Vec<f64> = (0..vals.len()).map(|i| dt.round(1.0 + 0.125 * i as f64)).collect();
        let f = crate::Forward::new(c.clone());
        let d = f.dual(c.tensor(&dest, &[dest.len()], dt).unwrap(), c.tensor(&dd, &[dd.len()], dt).unwrap()).unwrap();
        let v = f.dual(c.tensor(&vals, &[vals.len()], dt).unwrap(), c.tensor(&dv, &[dv.len()], dt).unwrap()).unwrap();
        let ix = c.index(inds).unwrap();
        let h = f.reduce_by_index(&d, op, &ix, &v).unwrap();
        let (wh, wdot) = oracle::hist_jvp(op, &dest, inds, &vals, &dd, &dv);
        let tol = tolerance(op, dt);
        assert_close(&format!("{op} {dt} jvp hist"), &c.to_vec(h.value()).unwrap(), &wh, tol, dt);
        let dot = c.to_vec(&f.tangent(&h).unwrap()).unwrap();
        assert_close(&format!("{op} {dt} jvp tangent"), &dot, &wdot, tol, dt);
    }

    #[test]
    fn forward_rules_match_the_oracle_with_ties_zeros_and_empty_bins() {
        let dest = [1.0, 2.0, -3.0, 0.5];
        let inds = [0, 1, 0, 1, 5, -1, 1, 0];
        let vals = [1.0, 0.5, 4.0, 0.5, -100.0, 7.0, 0.0, 0.0];
        for op in every_op() {
            for dt in DType::ALL {
                check_jvp(op, dt, &dest, &inds, &vals);
                check_jvp(op, dt, &[0.5], &[], &[]);
            }
        }
    }

    /// The CPU's fused relative inputs (`HistOps::relative_inputs`) are the composition's
    /// values bit for bit, for both kinds and dtypes, at ties, infinities, NaN (in values and
    /// dest), zeros of both signs, empty bins, out-of-range indices, no bins at all, i32 and
    /// i64 indices, and on both sides of the parallel threshold.
    #[test]
    fn the_cpu_fused_relative_inputs_and_their_histograms_are_the_composition_bit_for_bit() {
        let c = Cpu::new(Some(2)).unwrap();
        let specials =
            [0.0, -0.0, 1.0, -2.5, 1e16, 1e308, -1e308, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 3.0, 0.25];
        // The last case has no +inf or NaN (bins peaking at +inf send logaddexp's fused dual back
        // to the composition; NaN ranks above +inf), so that the fused dual's finite values are
        // compared too.
        for (n, k, tame) in [(40usize, 9usize, false), (200_000, 1000, false), (30, 0, false), (5000, 64, true)] {
            let special = |i: usize| match specials[i % specials.len()] {
                x if tame && (x == f64::INFINITY || x == 1e308) => 7.0, // 1e308: +inf in f32
                x if tame && x.is_nan() => 1.5,
                x => x,
            };
            let inds: Vec<i64> = (0..n).map(|i| ((i * 2654435761) % (k + 3)) as i64 - 1).collect();
            let vals: Vec<f64> = (0..n).map(|i| special(i * 7919)).collect();
            let dest: Vec<f64> = (0..k).map(|b| special(b * 31)).collect();
            for (kind, it) in [(Relative::Shift, IndexDType::I64), (Relative::Scale, IndexDType::I32)] {
                for dt in DType::ALL {
                    let d = c.tensor(&dest, &[k], dt).unwrap();
                    let v = c.tensor(&vals, &[n], dt).unwrap();
                    let ix = c.index_as(&inds, it).unwrap();
                    let fused = c.relative_inputs(kind, &d, &ix, &v).unwrap().expect("the CPU has the kernel");
                    let composed = kind.composed_inputs(&c, &d, &ix, &v).unwrap();
                    let bits = |t: &<Cpu as TensorOps>::T| {
                        (
                            c.to_vec(t)
                                .unwrap()
                                .iter()
                                .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
                                .collect::<Vec<_>>(),
                            t.shape().to_vec(),
                        )
                    };
                    for (what, f, w) in [
                        ("anchor", &fused.0, &composed.0),
                        ("dest", &fused.1, &composed.1),
                        ("vals", &fused.2, &composed.2),
                    ] {
                        assert_eq!(bits(f), bits(w), "{kind:?} {dt} {it:?} n={n} k={k}: {what}");
                    }
                    // The fused inputs of logaddexp skip the histogram's maxima pass (the CPU
                    // knows their bins peak at 0): the histogram and its tangent keep the bits
                    // of those of the composed inputs.
                    if kind == Relative::Shift {
                        let op = HistOp::General(&crate::general::LOGADDEXP);
                        let hist = |i: &(_, _, _)| c.reduce_by_index(&i.1, op, &ix, &i.2).unwrap();
                        assert_eq!(bits(&hist(&fused)), bits(&hist(&composed)), "{dt} n={n} k={k}: histogram");
                        let dd = c.tensor(&(0..k).map(|b| b as f64 - 2.0).collect::<Vec<_>>(), &[k], dt).unwrap();
                        let vd = c.tensor(&(0..n).map(|i| (i % 5) as f64 - 2.0).collect::<Vec<_>>(), &[n], dt).unwrap();
                        let dual = |i: &(_, _, _)| c.reduce_by_index_dual(&i.1, &dd, op, &ix, &i.2, &vd).unwrap();
                        let (f, w) = (dual(&fused), dual(&composed));
                        assert_eq!((bits(&f.0), bits(&f.1)), (bits(&w.0), bits(&w.1)), "{dt} n={n} k={k}: dual");
                        // The forward rule's fused kernel on the inputs as they are (None only
                        // where a bin peaks at +inf) against the composition with the anchor.
                        let whole = c.relative_reduce_by_index_dual(kind, &d, &dd, op, &ix, &v, &vd).unwrap();
                        let anchored = kind.result(&c, &composed.0, &w.0).unwrap();
                        let peaks_at_inf = c.to_vec(&composed.0).unwrap().contains(&f64::INFINITY);
                        if tame {
                            let finite = whole
                                .as_ref()
                                .map(|(h, _)| c.to_vec(h).unwrap().iter().filter(|x| x.is_finite()).count());
                            assert!(
                                finite.is_some_and(|f| f > 10),
                                "{dt}: the fused dual is taken, with finite bins: {finite:?}"
                            );
                        }
                        match whole {
                            Some((h, hd)) => assert_eq!(
                                (bits(&h), bits(&hd)),
                                (bits(&anchored), bits(&w.1)),
                                "{dt} n={n} k={k}: fused dual"
                            ),
                            None => assert!(peaks_at_inf, "{dt} n={n} k={k}: no fused dual without a +inf peak"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn relative_inputs_written_in_place_are_no_longer_taken_as_relative() {
        // The CPU skips logaddexp's maxima pass on its own relative inputs; a donated kernel
        // that rewrites their buffer (a replay's in-place add, accumulate, unary) must drop that
        // knowledge: here the values move to about 1000, where a shift of 0 overflows.
        let c = Cpu::new(Some(1)).unwrap();
        let op = HistOp::General(&crate::general::LOGADDEXP);
        let (inds, vals, dest) = (vec![0i64, 1, 0, 2], vec![0.5, -1.0, -1000.0, 0.0], vec![0.0, 1.0, -3.0]);
        for dt in DType::ALL {
            let ix = c.index_as(&inds, IndexDType::I32).unwrap();
            let relative = || {
                let (d, v) = (c.tensor(&dest, &[3], dt).unwrap(), c.tensor(&vals, &[4], dt).unwrap());
                c.relative_inputs(Relative::Shift, &d, &ix, &v).unwrap().expect("the CPU has the kernel")
            };
            let d_rel = relative().1;
            let hist = |v: &<Cpu as TensorOps>::T| c.to_vec(&c.reduce_by_index(&d_rel, op, &ix, v).unwrap()).unwrap();
            let thousand = c.full(&[4], 1000.0, dt).unwrap();
            // Each in place, against the same values in a fresh tensor.
            let cases = [
                (
                    "binary_donated",
                    c.binary_donated(BinaryOp::Add, relative().2, &thousand, true).unwrap(),
                    c.add(&relative().2, &thousand).unwrap(),
                ),
                (
                    "accumulate",
                    c.accumulate(relative().2, &thousand).unwrap(),
                    c.add(&relative().2, &thousand).unwrap(),
                ),
                (
                    "unary_donated",
                    c.unary_donated(UnaryOp::Neg, relative().2).unwrap(),
                    c.unary(UnaryOp::Neg, &relative().2).unwrap(),
                ),
            ];
            for (what, in_place, fresh) in &cases {
                let want = hist(fresh);
                assert!(want[0] > 999.0 && want[0].is_finite(), "{dt} {what}: {want:?}");
                assert_eq!(hist(in_place), want, "{dt} {what}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
        #[test]
        fn every_rule_agrees_with_the_oracle_and_each_other((k, inds, vals, dest) in case()) {
            let c = Cpu::new(Some(1)).unwrap();
            let bar: Vec<f64> = (0..k).map(|b| 1.0 - 0.5 * b as f64).collect();
            for op in every_op() {
                for dt in DType::ALL {
                    check_all_rules(&c, op, dt, &dest, &inds, &vals, &bar);
                }
            }
        }

        #[test]
        fn forward_rules_agree_with_the_oracle((_k, inds, vals, dest) in case()) {
            for op in every_op() {
                for dt in DType::ALL {
                    check_jvp(op, dt, &dest, &inds, &vals);
                }
            }
        }
    }
}
