//! Generalised histograms (`reduce_by_index`) and the associative operators they, reductions
//! and scans take. Rules in `rules/hist.rs`.

use std::fmt;
use std::str::FromStr;

use super::{Operand, TensorOps};
use crate::Result;
use crate::general::{self, GeneralOp};

/// An associative and commutative operator with its neutral element, as used by reductions,
/// scans and `reduce_by_index`: the four special operators, which have their own rules and
/// kernels, or a general operator given as data ([`GeneralOp`]; a static reference keeps
/// `HistOp` `Copy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistOp {
    Add,
    Mul,
    Min,
    Max,
    General(&'static GeneralOp),
}

impl HistOp {
    /// The special operators.
    pub const ALL: [HistOp; 4] = [HistOp::Add, HistOp::Mul, HistOp::Min, HistOp::Max];

    /// Every operator with a name users can ask for: the special ones, then the shipped general
    /// operators (`logaddexp`, `hypot`, and the general versions of the special ones).
    pub fn named() -> Vec<HistOp> {
        let mut out = HistOp::ALL.to_vec();
        out.extend(general::ALL.iter().map(|&g| HistOp::General(g)));
        out
    }

    pub fn name(self) -> &'static str {
        match self {
            HistOp::Add => "add",
            HistOp::Mul => "mul",
            HistOp::Min => "min",
            HistOp::Max => "max",
            HistOp::General(g) => g.name,
        }
    }

    /// The neutral element: `combine(neutral, x) == x` for every x.
    pub fn neutral(self) -> f64 {
        match self {
            HistOp::Add => 0.0,
            HistOp::Mul => 1.0,
            HistOp::Min => f64::INFINITY,
            HistOp::Max => f64::NEG_INFINITY,
            HistOp::General(g) => g.neutral,
        }
    }

    /// The min/max kind, for the special operators that have an arg-histogram.
    pub fn extremum(self) -> Option<Extremum> {
        match self {
            HistOp::Min => Some(Extremum::Min),
            HistOp::Max => Some(Extremum::Max),
            _ => None,
        }
    }

    /// The min/max kind of any operator whose ties make a lifted (dual-number) reduction
    /// order-dependent: the special min/max and general operators declaring a tie break.
    pub fn tie_break(self) -> Option<Extremum> {
        match self {
            HistOp::General(g) => g.tie_break,
            op => op.extremum(),
        }
    }

    /// The general operator, if this is one.
    pub fn general(self) -> Option<&'static GeneralOp> {
        match self {
            HistOp::General(g) => Some(g),
            _ => None,
        }
    }

    /// Applies the operator in f64 (used by oracles and the sequential reference).
    pub fn combine(self, a: f64, b: f64) -> f64 {
        match self {
            HistOp::Add => a + b,
            HistOp::Mul => general::mul_absorbing(a, b),
            HistOp::Min => general::MIN.combine(a, b),
            HistOp::Max => general::MAX.combine(a, b),
            HistOp::General(g) => g.combine(a, b),
        }
    }

    /// The partial of `a op b` with respect to one operand, in f64 (asymmetric for min/max:
    /// the left operand wins ties).
    pub fn partial(self, side: Operand, a: f64, b: f64) -> f64 {
        let g = general::as_general(self);
        match side {
            Operand::Left => g.d1(a, b),
            Operand::Right => g.d2(a, b),
        }
    }
}

impl fmt::Display for HistOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HistOp {
    type Err = String;
    /// `add`, `mul`, `min`, `max` are the special operators; any other name is looked up among
    /// the shipped general operators (`logaddexp`, `hypot`, `general-add`, ...).
    fn from_str(s: &str) -> Result<Self, String> {
        HistOp::named().into_iter().find(|op| op.name() == s).ok_or_else(|| {
            let names: Vec<&str> = HistOp::named().iter().map(|op| op.name()).collect();
            format!("unknown operator '{s}' (expected one of {})", names.join(", "))
        })
    }
}

/// Minimum or maximum, for the arg-histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extremum {
    Min,
    Max,
}

impl Extremum {
    /// Does `(a, pa)` beat `(b, pb)`? NaN ranks beyond every number, and ties (NaN with NaN
    /// included) go to the lower position (dest sits at -1, so dest wins ties): the left fold's
    /// winner ([`general::right_wins`]).
    #[inline]
    pub fn beats<T: PartialOrd + Copy, P: PartialOrd>(self, a: T, pa: P, b: T, pb: P) -> bool {
        if pa < pb { !general::right_wins(self, a, b) } else { pb < pa && general::right_wins(self, b, a) }
    }
}

/// Generalised histograms, and the two primitives of the `*` histogram's rules (they have
/// derivative rules of their own, so engines nest through the `*` rule).
pub trait HistOps: TensorOps {
    /// `hist = dest; for i in order: if 0 <= inds[i] < k { hist[inds[i]] = hist[inds[i]] op vals[i] }`
    /// with `k = len(dest)`; out-of-range indices are legal and ignored.
    fn reduce_by_index(&self, dest: &Self::T, op: HistOp, inds: &Self::I, vals: &Self::T) -> Result<Self::T>;
    /// The arg-histogram: per bin the winning value and its position (-1 when dest wins; ties go
    /// to the lowest position, so dest wins ties).
    fn arg_reduce_by_index(
        &self,
        dest: &Self::T,
        ext: Extremum,
        inds: &Self::I,
        vals: &Self::T,
    ) -> Result<(Self::T, Self::I)>;

    /// Per bin of `k`: `(p, zeros, infs)`, p the product of the finite non-zero values times the
    /// signs (+-1) of the infinite ones (a NaN value makes it NaN), zeros the number of zero
    /// values and infs the number of infinite ones. p stays finite at infinite values (while
    /// the finite product is in range), so the `*` rule can give an infinite factor the
    /// product of the others.
    #[allow(clippy::type_complexity)]
    fn prod_nonzero_by_index(&self, inds: &Self::I, vals: &Self::T, k: usize) -> Result<(Self::T, Self::I, Self::I)>;
    /// `out[i] = v == 0 ? c1[b] : (v infinite ? c2[b] sign(v) : (c0[b] == 0 ? 0 : c0[b] / v))`
    /// with `v = vals[i]`, `b = inds[i]`, and 0 for out-of-range indices: the `*` histogram's
    /// value adjoint without ever dividing by zero or by an infinity (a zero c0 gives 0 even
    /// at a NaN value).
    fn prod_vals_adjoint(
        &self,
        inds: &Self::I,
        vals: &Self::T,
        c0: &Self::T,
        c1: &Self::T,
        c2: &Self::T,
    ) -> Result<Self::T>;

    /// The histogram's inputs relative to their bin's largest ([`crate::Relative`],
    /// how logaddexp and hypot are differentiated) in one fused kernel: `(anchor, dest_rel,
    /// vals_rel)`, the anchor of shape `[k]`, bit for bit the values of the rules' composition of
    /// elementwise ops (every step of it is exact: a maximum, comparisons, selects and one
    /// subtraction or division). `None` (the default): the device has no such kernel and the
    /// rules compose it (the composition's five passes over the values and four n-element
    /// temporaries cost the CPU's logaddexp VJP more than its histogram).
    #[allow(clippy::type_complexity)]
    fn relative_inputs(
        &self,
        _kind: crate::Relative,
        _dest: &Self::T,
        _inds: &Self::I,
        _vals: &Self::T,
    ) -> Result<Option<(Self::T, Self::T, Self::T)>> {
        Ok(None)
    }

    /// The histogram of a relative-form operator ([`crate::Relative`]) and its
    /// tangent in one fused kernel: `(hist, hist_dot)`, bit for bit the forward rule's
    /// composition (`reduce_by_index_dual` over [`HistOps::relative_inputs`], then the anchor
    /// added back). `None` (the default): the device has no such kernel, or not for these
    /// inputs, and the rule composes it (the CPU's logaddexp: the relative inputs' pass and
    /// their n-element temporary are what it saves).
    #[allow(clippy::too_many_arguments)]
    fn relative_reduce_by_index_dual(
        &self,
        _kind: crate::Relative,
        _dest: &Self::T,
        _dest_dot: &Self::T,
        _op: HistOp,
        _inds: &Self::I,
        _vals: &Self::T,
        _vals_dot: &Self::T,
    ) -> Result<Option<(Self::T, Self::T)>> {
        Ok(None)
    }

    /// The reverse rule that `auto` takes for a histogram of `n` values into `k` bins, where this
    /// device has measured that another rule beats the operator's own at these sizes; `None`
    /// (the default, for devices without such measurements): the operator's own rule
    /// (`reduce_by_index_vjp` of the AD crate's rules). The AD engines keep the default: under nested
    /// differentiation the rule's kernels are differentiated too, and only the operators' own
    /// rules are made of differentiable ops (the chunked rule's kernel is not).
    fn auto_hist_rule(&self, _op: HistOp, _n: usize, _k: usize) -> Option<crate::HistRule> {
        None
    }
}

/// Which reverse rule `reduce_by_index` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistRule {
    /// The cheapest correct rule: the operator's own (as `Special`, or general-chunked for a
    /// general operator without a total form), unless the device has measured another to be
    /// faster at the case's sizes (`HistOps::auto_hist_rule`: on the CPU, general-chunked for
    /// `*` with many bins per value).
    Auto,
    /// The operator's own rule (+, min/max, *; the total form for general operators).
    Special,
    /// The general rule with l and r from a stable sort by bin and segmented scans.
    GeneralSort,
    /// The general rule with l and r from fixed chunks and per-chunk running arrays.
    GeneralChunked,
}

impl HistRule {
    pub const ALL: [HistRule; 4] = [HistRule::Auto, HistRule::Special, HistRule::GeneralSort, HistRule::GeneralChunked];

    pub fn name(self) -> &'static str {
        match self {
            HistRule::Auto => "auto",
            HistRule::Special => "special",
            HistRule::GeneralSort => "general-sort",
            HistRule::GeneralChunked => "general-chunked",
        }
    }

    /// Whether the rule applies to `op`: every rule does, except `special` for a general
    /// operator without a total form (that is its special rule; asking for it is an error).
    pub fn applies_to(self, op: HistOp) -> bool {
        self != HistRule::Special || op.general().is_none_or(|g| g.has_total_form())
    }
}

impl fmt::Display for HistRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HistRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        HistRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("unknown rule '{s}' (expected auto, special, general-sort or general-chunked)"))
    }
}
