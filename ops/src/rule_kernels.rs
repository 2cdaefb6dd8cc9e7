//! Fused rule kernels: what the derivative rules (`rules/`) call where composing other ops would
//! be too slow (see `rules/hist.rs`). They are not differentiable themselves: a rule kernel
//! computes a derivative, and its inputs come from a rule's own forward sweep.
//!
//! Devices implement [`RuleKernels`] with their kernels (or keep the composed defaults of
//! `unary_adjoint` and `sorted_vals_adjoint`, which run the device's own ops). AD engines get it
//! from the one blanket implementation over [`Decorator`] below: every kernel lowers its inputs
//! to the inner engine (an input tracked by the decorator is an error naming the kernel), runs
//! the inner engine's kernel and lifts the results back as constants. `unary_adjoint` is the
//! exception: it stays composed from the decorator's own elementwise ops, so that
//! forward-over-reverse differentiates through it (Hessian-vector products of unary ops).

use super::{DenseOps, HistOp, HistOps, IndexOps, Ops, ScanOps, TensorOps, UnaryOp};
use crate::Result;

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

impl<T> ChunkedHist<T> {
    /// The same sweep with `f` applied to each of its tensors.
    pub fn try_map<U>(self, mut f: impl FnMut(T) -> Result<U>) -> Result<ChunkedHist<U>> {
        Ok(ChunkedHist {
            hist: f(self.hist)?,
            elements: f(self.elements)?,
            chunk_prefix: f(self.chunk_prefix)?,
            chunk_suffix: f(self.chunk_suffix)?,
        })
    }
}

/// The fused kernels of the derivative rules. Each takes primal values and computes part of a
/// derivative in one pass; the rules in `rules/` say which rule calls which kernel.
pub trait RuleKernels: DenseOps + ScanOps + HistOps {
    /// The adjoint of x for y = op(x): `g * op'(x)` elementwise (None where it is identically
    /// zero, for `sign`). `x`, `y` and `g` have one shape. Composed from other ops by default,
    /// so engines over any device stay differentiable through it (nesting); a device may
    /// override it with one fused kernel that performs the same arithmetic in the same order.
    fn unary_adjoint(&self, op: UnaryOp, x: &Self::T, y: &Self::T, g: &Self::T) -> Result<Option<Self::T>> {
        crate::composed::elementwise::unary_vjp_composed(self, op, x, y, g)
    }

    /// The adjoint of `x` for `y = logsumexp_axis(x, axis)` and the adjoint `g` of y (y and g
    /// have x's shape with `axis` of length 1): `g exp(x - y)`, g broadcast along the axis.
    /// Composed from other ops by default (and kept so by the AD engines, which differentiate
    /// through it); a device may fuse it, with the same operations in the same order.
    fn logsumexp_adjoint(&self, x: &Self::T, y: &Self::T, g: &Self::T, axis: usize) -> Result<Self::T> {
        crate::composed::dense::logsumexp_vjp_composed(self, x, y, g, axis)
    }

    /// The adjoint of `src` for `y = gather(src, idx)` and the adjoint `g` of y: a `+`
    /// histogram of g's elements into zeros of src's shape at their indices (a read outside
    /// src gets nothing). Composed by default (zeros, a reshape of g, `reduce_by_index`; kept
    /// so by the AD engines, which differentiate through it); a device may fuse it, with the
    /// same additions in the same order.
    fn gather_adjoint(&self, src: &Self::T, idx: &Self::I, g: &Self::T) -> Result<Self::T> {
        crate::composed::indexing::gather_adjoint_composed(self, src, idx, g)
    }

    /// The adjoint of `a` for `y = sum_sq_diff(a, c)` and the adjoint `g` of y, over the
    /// broadcast shape: `(g * 2) (a - c)`. Composed by default (and kept so by the AD engines);
    /// a device may fuse it, with the same operations in the same order.
    fn sum_sq_diff_adjoint(&self, a: &Self::T, c: &Self::T, g: &Self::T) -> Result<Self::T> {
        crate::composed::dense::sum_sq_diff_adjoint_composed(self, a, c, g)
    }

    /// The adjoints `(x_bar, state_bar, params_bar)` of `y = lstm_cell(x, state, params)` for the
    /// adjoint `g` (`[2, b]`) of the new state (formulas in `rules/lstm.rs`). Composed from
    /// other ops by default (and kept so by the AD engines, so that forward-over-reverse
    /// differentiates through it); a device may fuse it, with the same operations in the same
    /// order.
    fn lstm_cell_vjp(
        &self,
        x: &Self::T,
        state: &Self::T,
        params: &Self::T,
        g: &Self::T,
    ) -> Result<(Self::T, Self::T, Self::T)> {
        crate::composed::lstm::lstm_cell_vjp_composed(self, x, state, params, g)
    }

    /// `lstm_cell(x, state, params)` and, on a device with kernels that read them, the cell's
    /// gates `[5, b]` (f, i, o, z and tanh(c'), as [`crate::composed::lstm::lstm_cell_gates_composed`]
    /// stacks them) for [`RuleKernels::lstm_cell_vjp_saved`] and
    /// [`RuleKernels::lstm_cell_jvp_saved`]: the engines' rules then read the gates instead of
    /// computing their five transcendentals per lane again. `None` by default (and in the AD
    /// engines, so that an outer engine differentiates through the recomputing rules); the rules
    /// then call [`RuleKernels::lstm_cell_vjp`] and [`RuleKernels::lstm_cell_jvp`].
    fn lstm_cell_gates(&self, x: &Self::T, state: &Self::T, params: &Self::T) -> Result<(Self::T, Option<Self::T>)> {
        Ok((self.lstm_cell(x, state, params)?, None))
    }

    /// [`RuleKernels::lstm_cell_vjp`] from the gates [`RuleKernels::lstm_cell_gates`] saved.
    /// Composed by default; a device that saves gates fuses it, with the same operations in the
    /// same order.
    fn lstm_cell_vjp_saved(
        &self,
        x: &Self::T,
        state: &Self::T,
        params: &Self::T,
        gates: &Self::T,
        g: &Self::T,
    ) -> Result<(Self::T, Self::T, Self::T)> {
        crate::composed::lstm::lstm_cell_vjp_saved_composed(self, x, state, params, gates, g)
    }

    /// [`RuleKernels::lstm_cell_jvp`] from the gates [`RuleKernels::lstm_cell_gates`] saved.
    /// Composed by default, as [`RuleKernels::lstm_cell_vjp_saved`].
    #[allow(clippy::too_many_arguments)]
    fn lstm_cell_jvp_saved(
        &self,
        x: &Self::T,
        state: &Self::T,
        params: &Self::T,
        gates: &Self::T,
        dx: &Self::T,
        dstate: &Self::T,
        dparams: &Self::T,
    ) -> Result<Self::T> {
        crate::composed::lstm::lstm_cell_jvp_saved_composed(self, x, state, params, gates, dx, dstate, dparams)
    }

    /// The tangent of `y = lstm_cell(x, state, params)` for tangents of all three operands (zeros
    /// where an operand has none). Composed by default, as [`RuleKernels::lstm_cell_vjp`].
    #[allow(clippy::too_many_arguments)]
    fn lstm_cell_jvp(
        &self,
        x: &Self::T,
        state: &Self::T,
        params: &Self::T,
        dx: &Self::T,
        dstate: &Self::T,
        dparams: &Self::T,
    ) -> Result<Self::T> {
        crate::composed::lstm::lstm_cell_jvp_composed(self, x, state, params, dx, dstate, dparams)
    }

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
        crate::composed::hist::sorted_vals_adjoint_composed(self, op, inds, vals, dest, hist_bar)
    }
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
}

/// An AD engine that decorates an inner engine (`Reverse` and `Forward` of the crate `adgauge-ad`): what
/// the blanket [`RuleKernels`] implementation needs to run the inner engine's kernels.
pub trait Decorator: TensorOps {
    /// The engine this one runs its ops (and rules) on.
    type Inner: Ops;
    /// The engine this one decorates.
    fn inner_engine(&self) -> &Self::Inner;
    /// The inner value of `t` when it carries nothing of this engine (no tape node, no tangent):
    /// `OpError::NotDifferentiable(what)` when it does, `OpError::Foreign` for a tensor of
    /// another engine of the same type.
    fn untracked<'a>(&self, what: &str, t: &'a Self::T) -> Result<&'a <Self::Inner as TensorOps>::T>;
    /// A constant of this engine holding an inner value.
    fn constant(&self, value: <Self::Inner as TensorOps>::T) -> Self::T;
}

/// Every decorator's rule kernels: the inner engine's kernels on untracked inputs, except the
/// adjoints and tangents of the high-level primitives (`unary_adjoint`, `logsumexp_adjoint`,
/// `sum_sq_diff_adjoint`, `lstm_cell_vjp`, `lstm_cell_jvp` and their `_saved` forms), which keep their composed defaults so that an outer engine
/// differentiates through them.
impl<E> RuleKernels for E
where
    E: Decorator + DenseOps + IndexOps + ScanOps + HistOps,
    E::Inner: TensorOps<I = <E as TensorOps>::I>,
{
    fn unary_adjoint(&self, op: UnaryOp, x: &Self::T, y: &Self::T, g: &Self::T) -> Result<Option<Self::T>> {
        crate::composed::elementwise::unary_vjp_composed(self, op, x, y, g)
    }

    fn fold_adjoint(&self, op: HistOp, l: &Self::T, a: &Self::T, r: &Self::T, g: &Self::T) -> Result<Self::T> {
        let what = "fold_adjoint (a rule kernel)";
        let [l, a, r, g] = [l, a, r, g].map(|t| self.untracked(what, t));
        Ok(self.constant(self.inner_engine().fold_adjoint(op, l?, a?, r?, g?)?))
    }

    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        hist: &Self::T,
        hist_bar: &Self::T,
    ) -> Result<Self::T> {
        let what = "total_form_adjoint (a rule kernel)";
        let [vals, hist, hist_bar] = [vals, hist, hist_bar].map(|t| self.untracked(what, t));
        Ok(self.constant(self.inner_engine().total_form_adjoint(op, inds, vals?, hist?, hist_bar?)?))
    }

    fn sorted_vals_adjoint(
        &self,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        dest: &Self::T,
        hist_bar: &Self::T,
    ) -> Result<Self::T> {
        let what = "sorted_vals_adjoint (a rule kernel)";
        let [vals, dest, hist_bar] = [vals, dest, hist_bar].map(|t| self.untracked(what, t));
        Ok(self.constant(self.inner_engine().sorted_vals_adjoint(op, inds, vals?, dest?, hist_bar?)?))
    }

    fn reduce_by_index_dual(
        &self,
        dest: &Self::T,
        dest_dot: &Self::T,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        vals_dot: &Self::T,
    ) -> Result<(Self::T, Self::T)> {
        let what = "reduce_by_index_dual (a forward-rule kernel)";
        let [dest, dest_dot, vals, vals_dot] = [dest, dest_dot, vals, vals_dot].map(|t| self.untracked(what, t));
        let (h, hd) = self.inner_engine().reduce_by_index_dual(dest?, dest_dot?, op, inds, vals?, vals_dot?)?;
        Ok((self.constant(h), self.constant(hd)))
    }

    fn reduce_by_index_chunked(
        &self,
        dest: &Self::T,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
    ) -> Result<ChunkedHist<Self::T>> {
        let what = "reduce_by_index_chunked (a rule kernel)";
        let [dest, vals] = [dest, vals].map(|t| self.untracked(what, t));
        let sweep = self.inner_engine().reduce_by_index_chunked(dest?, op, inds, vals?)?;
        sweep.try_map(|t| Ok(self.constant(t)))
    }

    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &Self::I,
        vals: &Self::T,
        chunk_prefix: &Self::T,
        chunk_suffix: &Self::T,
        hist_bar: &Self::T,
    ) -> Result<Self::T> {
        let what = "chunked_vals_adjoint (a rule kernel)";
        let [vals, prefix, suffix, hist_bar] =
            [vals, chunk_prefix, chunk_suffix, hist_bar].map(|t| self.untracked(what, t));
        Ok(self.constant(self.inner_engine().chunked_vals_adjoint(op, inds, vals?, prefix?, suffix?, hist_bar?)?))
    }
}
