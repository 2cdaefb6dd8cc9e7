//! Dense ops (k-means, GMM, LSTM, BA): broadcasting, sums to a shape, matrix products and
//! arg-reductions along an axis. Rules in `rules/dense.rs`.

use super::{BinaryOp, ElementwiseOps, Extremum, IndexOps, TensorMeta, UnaryOp};
use crate::Result;

/// Dense ops, with the axis conveniences workloads use as provided methods.
pub trait DenseOps: ElementwiseOps + IndexOps {
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
        let shape = crate::shape::broadcast_shapes("broadcast_binary", a.shape(), b.shape())?;
        let widen = |x: &Self::T| -> Result<Self::T> {
            if x.shape() == shape.as_slice() || x.numel() == 1 { Ok(x.clone()) } else { self.broadcast_to(x, &shape) }
        };
        let y = self.binary(op, &widen(a)?, &widen(b)?)?;
        if y.shape() == shape.as_slice() { Ok(y) } else { self.reshape(&y, &shape) }
    }
    /// Sum along `axis`, kept with length 1.
    fn sum_axis(&self, x: &Self::T, axis: usize) -> Result<Self::T> {
        crate::shape::axis_view("sum_axis", x.shape(), axis)?;
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
    /// Squared Euclidean distances between the rows of `a` (n x d) and those of `c` (k x d):
    /// `out[i, j] = sum over l of (a[i, l] - c[j, l])^2`, shape [n, k] (k-means' assignment
    /// costs). One primitive with one rule (`rules/dense.rs`), so the engines never record the
    /// n x k x d differences or the expanded form's five intermediates. Composed here as
    /// `|a_i|^2 + |c_j|^2 - 2 a c^T`; a device may compute the differences directly (one pass,
    /// and no cancellation): the two agree to rounding.
    fn sq_dist(&self, a: &Self::T, c: &Self::T) -> Result<Self::T> {
        let (_, k, _) = crate::shape::sq_dist_shape(a.shape(), c.shape())?;
        let an = self.sum_axis(&self.unary(UnaryOp::Square, a)?, 1)?; // n x 1
        let cn = self.reshape(&self.sum_axis(&self.unary(UnaryOp::Square, c)?, 1)?, &[1, k])?; // 1 x k
        let ac = self.scale(&self.matmul(a, false, c, true)?, -2.0)?; // n x k
        self.broadcast_binary(BinaryOp::Add, &self.broadcast_binary(BinaryOp::Add, &an, &cn)?, &ac)
    }
    /// `log(sum(exp(x)))` along `axis` (kept with length 1), with the maximum subtracted first so
    /// that nothing overflows: `m + log(sum(exp(x - m)))`. One primitive with one rule
    /// (`rules/dense.rs`: the adjoint is `g exp(x - y)`, the softmax times the adjoint), so the
    /// engines never record the maximum, the shifted copy and its exponentials. Composed here
    /// from the ops above; a device may fuse it into one pass per line, with the same
    /// operations in the same order.
    fn logsumexp_axis(&self, x: &Self::T, axis: usize) -> Result<Self::T> {
        crate::composed::dense::logsumexp_composed(self, x, axis)
    }
    /// `sum over the last axis of (a - b)^2`, b broadcast to a (numpy rules), the last axis kept
    /// with length 1: GMM's squared Mahalanobis distances `|Q_k (x_i - mu_k)|^2` from `Q_k x_i`
    /// and `Q_k mu_k`. One primitive with one rule (`rules/dense.rs`): the engines never record
    /// the broadcast, the differences and their squares (three n x K x d intermediates), and the
    /// adjoint is one pass (`RuleKernels::sum_sq_diff_adjoint`). Composed here; a device may
    /// fuse it, with the same operations in the same order.
    fn sum_sq_diff(&self, a: &Self::T, b: &Self::T) -> Result<Self::T> {
        crate::composed::dense::sum_sq_diff_composed(self, a, b)
    }
    /// One step of ADBench's diagonal LSTM cell (the `lstm` workload's layer): `x` is the
    /// layer's input `[b]`, `state` its hidden then cell row `[2, b]`, `params` its weights then
    /// biases `[8, b]` (rows: the forget, input and output gates and the change, then their
    /// biases in the same order). Returns the new state `[2, b]`:
    ///
    /// ```text
    /// forget = sigmoid(x * w_f + b_f)      ingate = sigmoid(h * w_i + b_i)
    /// outgate = sigmoid(x * w_o + b_o)     change = tanh(h * w_c + b_c)
    /// c' = c * forget + ingate * change    h' = outgate * tanh(c')
    /// ```
    ///
    /// One primitive with one rule (`composed/lstm.rs`): the engines record one node per cell
    /// instead of seventeen, the LSTM being a long chain of tiny ops whose cost is the per-op
    /// overhead. Composed here from unstack, elementwise ops and stack; a device may fuse it
    /// into one pass, with the same operations in the same order.
    fn lstm_cell(&self, x: &Self::T, state: &Self::T, params: &Self::T) -> Result<Self::T> {
        crate::composed::lstm::lstm_cell_composed(self, x, state, params)
    }
}
