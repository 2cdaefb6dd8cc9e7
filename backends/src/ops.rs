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
        matches!(
            self,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq
        )
    }
}

/// An associative and commutative operator with its neutral element, as used by reductions and
/// `reduce_by_index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistOp {
    Add,
    Mul,
    Min,
    Max,
}

impl HistOp {
    pub const ALL: [HistOp; 4] = [HistOp::Add, HistOp::Mul, HistOp::Min, HistOp::Max];

    pub fn name(self) -> &'static str {
        match self {
            HistOp::Add => "add",
            HistOp::Mul => "mul",
            HistOp::Min => "min",
            HistOp::Max => "max",
        }
    }

    /// The neutral element: `combine(neutral, x) == x` for every x.
    pub fn neutral(self) -> f64 {
        match self {
            HistOp::Add => 0.0,
            HistOp::Mul => 1.0,
            HistOp::Min => f64::INFINITY,
            HistOp::Max => f64::NEG_INFINITY,
        }
    }

    /// The min/max kind, for operators that have an arg-histogram.
    pub fn extremum(self) -> Option<Extremum> {
        match self {
            HistOp::Min => Some(Extremum::Min),
            HistOp::Max => Some(Extremum::Max),
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
    fn from_str(s: &str) -> Result<Self, String> {
        HistOp::ALL
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| format!("unknown operator '{s}' (expected add, mul, min or max)"))
    }
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

    // ---- generalised histograms ----
    /// `hist = dest; for i in order: if 0 <= inds[i] < k { hist[inds[i]] = hist[inds[i]] op vals[i] }`
    /// with `k = len(dest)`; out-of-range indices are legal and ignored.
    fn reduce_by_index(
        &self,
        dest: &Self::T,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
    ) -> Result<Self::T>;
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
    fn prod_nonzero_by_index(
        &self,
        inds: &Self::I,
        vals: &Self::T,
        k: usize,
    ) -> Result<(Self::T, Self::I)>;
    /// `out[i] = vals[i] == 0 ? c1[inds[i]] : c0[inds[i]] / vals[i]`, 0 for out-of-range
    /// indices: the `*` histogram's value adjoint without ever dividing by zero.
    fn prod_vals_adjoint(
        &self,
        inds: &Self::I,
        vals: &Self::T,
        c0: &Self::T,
        c1: &Self::T,
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
}

/// The primal engine: a device runs ops directly, so primal evaluation is the device itself.
pub type Primal<D> = D;
