//! The op API: the one trait that workloads are written against.
//!
//! A device implements [`Ops`] directly — running ops on a device *is* primal evaluation, so the
//! `Primal` engine is the device itself ([`crate::Primal`]). The AD engines are decorators over
//! any `Ops` (as burn's `Autodiff<B>` is over a backend): [`crate::Reverse`] records a tape and
//! applies each op's VJP rule, written in the inner engine's ops, so every rule runs on every
//! device, and engines nest (`Reverse<Forward<Cpu>>` is forward-over-reverse) without
//! perturbation confusion, because each nesting level is a distinct type with its own tangents.
//!
//! Value tensors (`T`) are differentiable; index tensors (`I`, i64) never are.

use std::fmt;
use std::str::FromStr;

use crate::general::{self, GeneralOp};
use crate::{DType, Result};

/// Shape and dtype of a value tensor.
pub trait TensorMeta {
    fn shape(&self) -> &[usize];
    fn dtype(&self) -> DType;
    fn numel(&self) -> usize {
        self.shape().iter().product()
    }
}

/// Length of an index tensor (always one-dimensional).
pub trait IndexMeta {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Elementwise unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Log1p,
    Sin,
    Cos,
    Sqrt,
    Tanh,
    Sigmoid,
    Abs,
    /// -1, 0 or 1 (0 at 0); its derivative is 0.
    Sign,
    Recip,
    Square,
}

impl UnaryOp {
    /// Every unary operator (tests run each rule over this list).
    pub const ALL: [UnaryOp; 13] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Abs,
        UnaryOp::Sign,
        UnaryOp::Recip,
        UnaryOp::Square,
    ];
}

/// Elementwise binary operators. Comparisons return 1.0 or 0.0 in the operands' dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Min,
    Max,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq)
    }
}

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
            HistOp::Mul => a * b,
            HistOp::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
            HistOp::Max => {
                if b > a {
                    b
                } else {
                    a
                }
            }
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

/// Which operand of a binary operator a partial is taken with respect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// d(a op b)/da, "d1".
    Left,
    /// d(a op b)/db, "d2".
    Right,
}

/// How a scan runs. A forward scan is the left fold of each prefix, starting from the neutral
/// element; a reverse scan is a forward scan of the reversed sequence (reversed back), so its
/// left operand is the fold of the later elements. Inclusive scans include the element itself,
/// exclusive ones stop just before it (neutral at the start).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScanSpec {
    pub exclusive: bool,
    pub reverse: bool,
}

impl ScanSpec {
    pub const INCLUSIVE: ScanSpec = ScanSpec { exclusive: false, reverse: false };
    pub const EXCLUSIVE: ScanSpec = ScanSpec { exclusive: true, reverse: false };
    /// The same scan in the other direction.
    pub fn flipped(self) -> ScanSpec {
        ScanSpec { reverse: !self.reverse, ..self }
    }
    /// The exclusive scan in the same direction.
    pub fn to_exclusive(self) -> ScanSpec {
        ScanSpec { exclusive: true, ..self }
    }
}

/// The forward sweep of the sort-free ("chunked") general histogram rule: the input is cut into
/// contiguous chunks whose boundaries depend only on (n, k), and each chunk's running array of k
/// partial results is summarised by what comes before and after it.
#[derive(Clone, Debug)]
pub struct ChunkedHist<T> {
    /// `dest op h` per bin.
    pub hist: T,
    /// Per bin, the fold of the bin's elements alone (neutral for an empty bin).
    pub elements: T,
    /// Shape `[chunks, k]`: row c holds dest folded with the totals of chunks 0..c.
    pub chunk_prefix: T,
    /// Shape `[chunks, k]`: row c holds the fold of the totals of chunks c+1.. (neutral last).
    pub chunk_suffix: T,
}

/// Minimum or maximum, for the arg-histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extremum {
    Min,
    Max,
}

impl Extremum {
    /// Does `(a, pa)` beat `(b, pb)`? Ties go to the lower position (dest sits at -1, so dest
    /// wins ties). NaN never beats anything.
    #[inline]
    pub fn beats<T: PartialOrd>(self, a: T, pa: i64, b: T, pb: i64) -> bool {
        match self {
            Extremum::Min => a < b || (a == b && pa < pb),
            Extremum::Max => a > b || (a == b && pa < pb),
        }
    }
}

/// What a gather does with an index outside `[0, len)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OutOfRange {
    /// Reject it: an error naming the index and its position (user-facing gathers).
    Error,
    /// Read this value instead (rules: out-of-range histogram indices get a zero adjoint).
    Fill(f64),
}

/// The op API. Ops take `&self` and return new tensors; tensors are immutable, cheap-to-clone
/// handles.
pub trait Ops: Clone + 'static {
    /// A value tensor (f32 or f64).
    type T: Clone + TensorMeta + 'static;
    /// An index tensor (i64, one-dimensional).
    type I: Clone + IndexMeta + 'static;

    /// A short name for the engine stack, e.g. `reverse(cpu)`.
    fn engine_name(&self) -> String;

    // ---- creation and read-back (constants; never tracked) ----
    /// A tensor of `dtype` from f64 data (rounded to the dtype).
    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<Self::T>;
    /// A tensor filled with one value.
    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<Self::T>;
    /// An index tensor.
    fn index(&self, data: &[i64]) -> Result<Self::I>;
    /// The values of a tensor (primal values, for AD engines), widened to f64.
    fn to_vec(&self, t: &Self::T) -> Result<Vec<f64>>;
    /// The entries of an index tensor.
    fn index_to_vec(&self, i: &Self::I) -> Result<Vec<i64>>;

    // ---- layout ----
    /// Same data, new shape with the same number of elements.
    fn reshape(&self, t: &Self::T, shape: &[usize]) -> Result<Self::T>;

    // ---- elementwise ----
    fn unary(&self, op: UnaryOp, x: &Self::T) -> Result<Self::T>;
    /// Binary op on equal shapes, or with one operand of a single element broadcast.
    fn binary(&self, op: BinaryOp, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// `mask != 0 ? a : b`, elementwise (a or b may be a single element). Derivatives flow to a
    /// and b, never to the mask.
    fn select(&self, mask: &Self::T, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// 1.0 where `i == value`, else 0.0, in `dtype`: turns index results into masks.
    fn index_eq(&self, i: &Self::I, value: i64, dtype: DType) -> Result<Self::T>;

    // ---- reductions ----
    /// Reduces the whole tensor with `op` to a single element of shape `[1]`.
    fn reduce(&self, op: HistOp, x: &Self::T) -> Result<Self::T>;

    // ---- indexing ----
    /// `out[i] = src[idx[i]]`; `oob` says what an index outside `[0, len(src))` does.
    fn gather(&self, src: &Self::T, idx: &Self::I, oob: OutOfRange) -> Result<Self::T>;
    /// `out = dest; out[idx[i]] = vals[i]` in index order (the last write wins); indices outside
    /// `[0, len(dest))` are ignored.
    fn scatter(&self, dest: &Self::T, idx: &Self::I, vals: &Self::T) -> Result<Self::T>;
    /// Stable sort by key: the permutation that orders `keys` (all in `[0, num_keys)`, others
    /// sorted last in index order).
    fn sort_by_key(&self, keys: &Self::I, num_keys: usize) -> Result<Self::I>;
    /// [`Ops::sort_by_key`]'s permutation together with its inverse, the ranks (where each
    /// element lands): gathering by the ranks undoes gathering by the permutation, so sorted
    /// results go back to index order without a (sequential) scatter.
    fn sort_by_key_ranked(&self, keys: &Self::I, num_keys: usize) -> Result<(Self::I, Self::I)>;

    // ---- generalised histograms ----
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

    // ---- fused rule kernels (composition is too slow for these; see rules/hist.rs) ----
    /// Per bin of `k`: the product of the non-zero values and the number of zeros.
    fn prod_nonzero_by_index(&self, inds: &Self::I, vals: &Self::T, k: usize) -> Result<(Self::T, Self::I)>;
    /// `out[i] = vals[i] == 0 ? c1[inds[i]] : c0[inds[i]] / vals[i]`, 0 for out-of-range
    /// indices: the `*` histogram's value adjoint without ever dividing by zero.
    fn prod_vals_adjoint(&self, inds: &Self::I, vals: &Self::T, c0: &Self::T, c1: &Self::T) -> Result<Self::T>;
    /// The adjoint of x for y = op(x): `g * op'(x)` elementwise (None where it is identically
    /// zero, for `sign`). `x`, `y` and `g` have one shape. Composed from other ops by default,
    /// so engines over any device stay differentiable through it (nesting); a device may
    /// override it with one fused kernel that performs the same arithmetic in the same order.
    fn unary_adjoint(&self, op: UnaryOp, x: &Self::T, y: &Self::T, g: &Self::T) -> Result<Option<Self::T>> {
        crate::rules::elementwise::unary_vjp_composed(self, op, x, y, g)
    }

    // ---- general operators, scans and the general histogram rule's kernels ----
    /// Elementwise `a op b` (broadcasting like [`Ops::binary`]).
    fn combine(&self, op: HistOp, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// Elementwise partial of `a op b` with respect to one operand (broadcasting).
    fn combine_partial(&self, op: HistOp, side: Operand, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// Elementwise `d2(l, a) * d1(l op a, r) * g`, and 0 where `g == 0`: the adjoint of element
    /// `a` sitting in the fold `(l op a) op r` (a fused rule kernel; all four are tensors of
    /// the same shape).
    fn fold_adjoint(&self, op: HistOp, l: &Self::T, a: &Self::T, r: &Self::T, g: &Self::T) -> Result<Self::T>;
    /// `out[i] = total(vals[i], hist[inds[i]]) * hist_bar[inds[i]]`, 0 for out-of-range indices
    /// and where the adjoint is 0: the value adjoint of an operator's total form
    /// (`OpError::Unsupported` for an operator without one).
    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        hist: &Self::T,
        hist_bar: &Self::T,
    ) -> Result<Self::T>;
    /// The value adjoint of the general rule's sort strategy, fused: a stable sort by bin (of the
    /// in-range elements) carrying values and positions, then per bin (one sorted segment) a
    /// forward fold from `dest` giving each element's l and l op a, a backward fold giving r,
    /// and `vals_bar[i] = d2(l, a) * d1(l op a, r) * hist_bar[inds[i]]` written back in index
    /// order (0 for out-of-range indices and where the bin's adjoint is 0). `dest` and
    /// `hist_bar` have k elements, `vals` as many as `inds`.
    fn sorted_vals_adjoint(
        &self,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        dest: &Self::T,
        hist_bar: &Self::T,
    ) -> Result<Self::T> {
        // Composed from other ops; devices override it with one fused kernel.
        crate::rules::hist::sorted_vals_adjoint_composed(self, op, inds, vals, dest, hist_bar)
    }
    /// `out[i] = src[idx[i]]` on index tensors; -1 for an index outside `[0, len(src))`.
    fn gather_index(&self, src: &Self::I, idx: &Self::I) -> Result<Self::I>;
    /// A scan of a one-dimensional tensor with `op` (see [`ScanSpec`]). With `segments`, each
    /// maximal run of equal keys is scanned on its own.
    fn scan(&self, op: HistOp, x: &Self::T, spec: ScanSpec, segments: Option<&Self::I>) -> Result<Self::T>;
    /// The linear recurrence `y[j] = a[j] + b[j] * y[prev]` with `y[prev] = 0` at the start (of
    /// each segment), where prev is j-1 (forward) or j+1 (reverse); an exclusive recurrence
    /// returns `y[prev]` at j. It is the scan of the affine maps `y -> a + b y` under
    /// composition `(a1,b1) then (a2,b2) = (a2 + b2 a1, b2 b1)`, and solves the adjoint and
    /// tangent recurrences of scans.
    fn linear_recurrence(
        &self,
        a: &Self::T,
        b: &Self::T,
        spec: ScanSpec,
        segments: Option<&Self::I>,
    ) -> Result<Self::T>;
    /// The histogram of dual numbers under the lifted operator
    /// `(a,da) op (b,db) = (a op b, d1(a,b) da + d2(a,b) db)`: `(hist, hist_dot)`. Exact for
    /// smooth operators (and `*`); order-dependent at ties of min/max, whose forward rule uses
    /// the arg-histogram instead.
    fn reduce_by_index_dual(
        &self,
        dest: &Self::T,
        dest_dot: &Self::T,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        vals_dot: &Self::T,
    ) -> Result<(Self::T, Self::T)>;
    /// The forward sweep of the chunked general rule (see [`ChunkedHist`]).
    fn reduce_by_index_chunked(
        &self,
        dest: &Self::T,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
    ) -> Result<ChunkedHist<Self::T>>;
    /// The value adjoint of the chunked general rule: per chunk, a forward pass from
    /// `chunk_prefix` gives each element's l (and l op a), a backward pass from `chunk_suffix`
    /// its r, and `vals_bar[i] = d2(l, a) * d1(l op a, r) * hist_bar[inds[i]]` (0 out of range).
    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        chunk_prefix: &Self::T,
        chunk_suffix: &Self::T,
        hist_bar: &Self::T,
    ) -> Result<Self::T>;

    // ---- conveniences composed from the above ----
    fn zeros_like(&self, t: &Self::T) -> Result<Self::T> {
        self.full(t.shape(), 0.0, t.dtype())
    }
    fn add(&self, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        self.binary(BinaryOp::Add, a, b)
    }
    fn sub(&self, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        self.binary(BinaryOp::Sub, a, b)
    }
    fn mul(&self, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        self.binary(BinaryOp::Mul, a, b)
    }
    fn div(&self, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        self.binary(BinaryOp::Div, a, b)
    }
    fn neg(&self, a: &Self::T) -> Result<Self::T> {
        self.unary(UnaryOp::Neg, a)
    }
    /// A one-element tensor of `dtype`.
    fn scalar(&self, value: f64, dtype: DType) -> Result<Self::T> {
        self.full(&[1], value, dtype)
    }
    /// Multiplies by a constant.
    fn scale(&self, a: &Self::T, c: f64) -> Result<Self::T> {
        let s = self.scalar(c, a.dtype())?;
        self.mul(a, &s)
    }
    /// Sum of all elements, shape `[1]`.
    fn sum(&self, x: &Self::T) -> Result<Self::T> {
        self.reduce(HistOp::Add, x)
    }

    // ==== dense ops (k-means, GMM, LSTM, BA) ====
    // Shapes broadcast as in numpy (trailing alignment; a dimension of 1 stretches). Each op has
    // rules in `rules/dense.rs`. There are no default bodies: a host fallback would hide a read
    // back and an upload inside every timed region, so every device implements these with its
    // own kernels, or returns `OpError::Unsupported` naming the op.

    /// `x` broadcast to `shape`.
    fn broadcast_to(&self, x: &Self::T, shape: &[usize]) -> Result<Self::T>;
    /// `x` summed down to `shape`, a shape that broadcasts to x's (the adjoint of broadcast_to).
    fn sum_to(&self, x: &Self::T, shape: &[usize]) -> Result<Self::T>;
    /// `op(a) op(b)` with `op(x)` the transpose of the last two dimensions when its flag is set;
    /// batch dimensions (all but the last two) are equal, or one operand is two-dimensional and
    /// shared by every batch. Zero entries of `op(a)` are skipped (`0 * inf` never enters a sum).
    fn matmul(&self, a: &Self::T, ta: bool, b: &Self::T, tb: bool) -> Result<Self::T>;
    /// Minimum or maximum along `axis` (kept with length 1) and the flat position in `x` of each
    /// winner (ties go to the lowest position along the axis; NaN never wins against a number,
    /// and an all-NaN line reports its first position). An empty axis is an error.
    fn arg_reduce_axis(&self, ext: Extremum, x: &Self::T, axis: usize) -> Result<(Self::T, Self::I)>;

    // ---- dense conveniences composed from the above ----
    /// A binary op with numpy broadcasting.
    fn broadcast_binary(&self, op: BinaryOp, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        let shape = crate::cpu::dense::broadcast_shapes("broadcast_binary", a.shape(), b.shape())?;
        let widen = |x: &Self::T| -> Result<Self::T> {
            if x.shape() == shape.as_slice() || x.numel() == 1 { Ok(x.clone()) } else { self.broadcast_to(x, &shape) }
        };
        let y = self.binary(op, &widen(a)?, &widen(b)?)?;
        if y.shape() == shape.as_slice() { Ok(y) } else { self.reshape(&y, &shape) }
    }
    /// Sum along `axis`, kept with length 1.
    fn sum_axis(&self, x: &Self::T, axis: usize) -> Result<Self::T> {
        crate::cpu::dense::axis_view("sum_axis", x.shape(), axis)?;
        let mut shape = x.shape().to_vec();
        shape[axis] = 1;
        self.sum_to(x, &shape)
    }
    /// Maximum along `axis`, kept with length 1.
    fn max_axis(&self, x: &Self::T, axis: usize) -> Result<Self::T> {
        Ok(self.arg_reduce_axis(Extremum::Max, x, axis)?.0)
    }
    /// Minimum along `axis`, kept with length 1.
    fn min_axis(&self, x: &Self::T, axis: usize) -> Result<Self::T> {
        Ok(self.arg_reduce_axis(Extremum::Min, x, axis)?.0)
    }
    /// `log(sum(exp(x)))` along `axis` (kept with length 1), with the maximum subtracted first so
    /// that nothing overflows: `m + log(sum(exp(x - m)))`.
    fn logsumexp_axis(&self, x: &Self::T, axis: usize) -> Result<Self::T> {
        let m = self.max_axis(x, axis)?;
        let e = self.unary(UnaryOp::Exp, &self.broadcast_binary(BinaryOp::Sub, x, &m)?)?;
        self.add(&m, &self.unary(UnaryOp::Log, &self.sum_axis(&e, axis)?)?)
    }
}

/// The primal engine: a device runs ops directly, so primal evaluation is the device itself.
pub type Primal<D> = D;
