//! Elementwise ops: unary and binary operators, select, index masks, and an associative
//! operator's `a op b` and partials. Rules in `rules/elementwise.rs`.

use super::{HistOp, TensorMeta, TensorOps};
use crate::{DType, Result};

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
    /// Every operator, in declaration order.
    pub const ALL: [BinaryOp; 12] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Min,
        BinaryOp::Max,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::Eq,
    ];

    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq)
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

/// Elementwise ops, with the arithmetic conveniences workloads use as provided methods.
pub trait ElementwiseOps: TensorOps {
    fn unary(&self, op: UnaryOp, x: &Self::T) -> Result<Self::T>;
    /// Binary op on equal shapes, or with one operand of a single element broadcast.
    fn binary(&self, op: BinaryOp, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// `mask != 0 ? a : b`, elementwise (a or b may be a single element). Derivatives flow to a
    /// and b, never to the mask.
    fn select(&self, mask: &Self::T, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// 1.0 where `i == value`, else 0.0, in `dtype`: turns index results into masks.
    fn index_eq(&self, i: &Self::I, value: i64, dtype: DType) -> Result<Self::T>;
    /// Elementwise `a op b` (broadcasting like [`ElementwiseOps::binary`]).
    fn combine(&self, op: HistOp, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// Elementwise partial of `a op b` with respect to one operand (broadcasting).
    fn combine_partial(&self, op: HistOp, side: Operand, a: &Self::T, b: &Self::T) -> Result<Self::T>;

    // ---- conveniences composed from the above ----
    fn add(&self, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        self.binary(BinaryOp::Add, a, b)
    }
    /// `acc + c` where the caller gives `acc` up: the reverse sweep's accumulation of an
    /// adjoint. A device may add into `acc`'s storage when nothing else holds it (the same
    /// additions in the same order, so the same bits as `add`); by default, `add`.
    fn accumulate(&self, acc: Self::T, c: &Self::T) -> Result<Self::T> {
        self.add(&acc, c)
    }
    /// `unary` where the caller gives `x` up (a replay's operand at its last reader): a device
    /// may write the result into `x`'s storage when nothing else holds it (the same values, so
    /// the same bits as `unary`); by default, `unary`.
    fn unary_donated(&self, op: UnaryOp, x: Self::T) -> Result<Self::T> {
        self.unary(op, &x)
    }
    /// `binary` where the caller gives one operand up: `donor` is `a` when `donor_is_a`, else
    /// `b`, and `other` is the operand kept. A device may write the result into the donor's
    /// storage when nothing else holds it and it has the result's shape; by default, `binary`.
    fn binary_donated(&self, op: BinaryOp, donor: Self::T, other: &Self::T, donor_is_a: bool) -> Result<Self::T> {
        if donor_is_a { self.binary(op, &donor, other) } else { self.binary(op, other, &donor) }
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
    /// Multiplies by a constant.
    fn scale(&self, a: &Self::T, c: f64) -> Result<Self::T> {
        let s = self.scalar(c, a.dtype())?;
        self.mul(a, &s)
    }
}
