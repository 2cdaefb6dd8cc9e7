//! The reverse-mode engine: a tape decorator over any [`Ops`].
//!
//! Running an op on `Reverse<B>` runs it on `B` (the forward sweep) and records a node holding the
//! op's pullback — its VJP rule from [`crate::rules`], written in `B`'s ops and closed over what
//! the forward sweep saved. [`Reverse::backward`] walks the nodes from the output back to the
//! leaves, accumulating adjoints with `B`'s ops. Because `B` can itself be an AD engine, reverse
//! nests (e.g. over a forward engine for Hessian-vector products); each tape has an id, and a
//! tensor from another tape is rejected rather than silently mixed in.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::HistRule;
use crate::ops::{
    Decorator, DenseOps, ElementwiseOps, Extremum, HistOps, IndexMeta, IndexOps, Operand, OutOfRange, ReduceOps,
    ScanOps, ScanSpec, TensorMeta, TensorOps,
};
use crate::rules;
use crate::{BinaryOp, DType, HistOp, IndexDType, OpError, Ops, Result, UnaryOp};

/// A pullback: given the adjoint of the node's output, the adjoint of each input (None where the
/// input needs none).
pub type Pullback<B> = Box<dyn Fn(&B, &<B as TensorOps>::T) -> Result<Vec<Option<<B as TensorOps>::T>>>>;

struct Node<B: Ops> {
    /// Tape positions of the op's inputs (None for constants).
    inputs: Vec<Option<usize>>,
    /// None for a leaf (a variable).
    pullback: Option<Pullback<B>>,
}

static NEXT_TAPE: AtomicUsize = AtomicUsize::new(1);

/// A tensor of the reverse engine: the primal value and, when it depends on a variable, its node.
pub struct Var<B: Ops> {
    value: B::T,
    node: Option<usize>,
    tape: usize,
}

impl<B: Ops> Clone for Var<B> {
    fn clone(&self) -> Self {
        Var { value: self.value.clone(), node: self.node, tape: self.tape }
    }
}

impl<B: Ops> Var<B> {
    /// The primal value.
    pub fn value(&self) -> &B::T {
        &self.value
    }
    /// Whether the value depends on a variable of its tape.
    pub fn is_tracked(&self) -> bool {
        self.node.is_some()
    }
}

impl<B: Ops> TensorMeta for Var<B> {
    fn shape(&self) -> &[usize] {
        self.value.shape()
    }
    fn dtype(&self) -> DType {
        self.value.dtype()
    }
}

/// The reverse-mode engine over `B`.
pub struct Reverse<B: Ops> {
    inner: B,
    tape: Rc<RefCell<Vec<Node<B>>>>,
    id: usize,
    /// The reverse rule of `reduce_by_index`. Its meaning and its application live in
    /// `rules/hist.rs`; it is stored here because it is chosen per engine instance (one case per
    /// rule; nested engines may differ) and the op API has no per-call slot for it, while a
    /// process-wide setting would leak between concurrent cases and tests.
    hist_rule: HistRule,
}

impl<B: Ops> Clone for Reverse<B> {
    fn clone(&self) -> Self {
        Reverse { inner: self.inner.clone(), tape: self.tape.clone(), id: self.id, hist_rule: self.hist_rule }
    }
}

/// Adjoints of the variables after [`Reverse::backward`].
pub struct Grads<B: Ops> {
    by_node: HashMap<usize, B::T>,
    tape: usize,
}

impl<B: Ops> Grads<B> {
    /// The adjoint of `v`, or None when the output does not depend on it.
    pub fn get(&self, v: &Var<B>) -> Option<&B::T> {
        if v.tape != self.tape {
            return None;
        }
        v.node.and_then(|n| self.by_node.get(&n))
    }

    /// The adjoint of `v`, zeros when the output does not depend on it.
    pub fn get_or_zeros(&self, b: &B, v: &Var<B>) -> Result<B::T> {
        match self.get(v) {
            Some(g) => Ok(g.clone()),
            None => b.zeros_like(&v.value),
        }
    }
}

impl<B: Ops> Reverse<B> {
    /// A fresh engine with an empty tape.
    pub fn new(inner: B) -> Self {
        Reverse {
            inner,
            tape: Rc::new(RefCell::new(Vec::new())),
            id: NEXT_TAPE.fetch_add(1, Ordering::Relaxed),
            hist_rule: HistRule::Auto,
        }
    }

    /// Chooses the reduce_by_index reverse rule (default `auto`).
    pub fn with_hist_rule(mut self, rule: HistRule) -> Self {
        self.hist_rule = rule;
        self
    }

    pub fn hist_rule(&self) -> HistRule {
        self.hist_rule
    }

    /// The engine the rules run on.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Nodes recorded so far.
    pub fn tape_len(&self) -> usize {
        self.tape.borrow().len()
    }

    /// Registers `value` as a variable to differentiate with respect to.
    pub fn var(&self, value: B::T) -> Var<B> {
        let mut tape = self.tape.borrow_mut();
        tape.push(Node { inputs: Vec::new(), pullback: None });
        Var { value, node: Some(tape.len() - 1), tape: self.id }
    }

    /// Wraps a value of the inner engine as a constant of this tape (no derivative flows to it;
    /// with a nested inner engine it keeps its own tangents).
    pub fn lift(&self, value: B::T) -> Var<B> {
        self.constant(value)
    }

    fn node_of(&self, v: &Var<B>) -> Result<Option<usize>> {
        if v.tape != self.id {
            return Err(OpError::Foreign(format!(
                "a tensor of tape {} was passed to tape {} (nested engines must not mix levels)",
                v.tape, self.id
            )));
        }
        Ok(v.node)
    }

    /// Records an op's result: tracked when any input is tracked.
    fn record(
        &self,
        value: B::T,
        inputs: &[&Var<B>],
        pullback: impl Fn(&B, &B::T) -> Result<Vec<Option<B::T>>> + 'static,
    ) -> Result<Var<B>> {
        let mut ids = Vec::with_capacity(inputs.len());
        for v in inputs {
            ids.push(self.node_of(v)?);
        }
        if ids.iter().all(Option::is_none) {
            return Ok(self.constant(value));
        }
        let mut tape = self.tape.borrow_mut();
        tape.push(Node { inputs: ids, pullback: Some(Box::new(pullback)) });
        Ok(Var { value, node: Some(tape.len() - 1), tape: self.id })
    }

    /// Back-propagates `seed` (the adjoint of `output`, same shape) to every variable.
    pub fn backward(&self, output: &Var<B>, seed: B::T) -> Result<Grads<B>> {
        let mut by_node = HashMap::new();
        let Some(out) = self.node_of(output)? else {
            return Ok(Grads { by_node, tape: self.id });
        };
        if seed.shape() != output.value.shape() {
            return Err(OpError::Shape {
                op: "backward",
                detail: format!("seed {:?} vs output {:?}", seed.shape(), output.value.shape()),
            });
        }
        let tape = self.tape.borrow();
        let mut adjoints: Vec<Option<B::T>> = vec![None; out + 1];
        adjoints[out] = Some(seed);
        for i in (0..=out).rev() {
            let Some(g) = adjoints[i].take() else {
                continue;
            };
            let node = &tape[i];
            let Some(pullback) = &node.pullback else {
                by_node.insert(i, g);
                continue;
            };
            let contributions = pullback(&self.inner, &g)?;
            for (input, c) in node.inputs.iter().zip(contributions) {
                if let (Some(j), Some(c)) = (input, c) {
                    adjoints[*j] = Some(match adjoints[*j].take() {
                        Some(acc) => self.inner.accumulate(acc, &c)?,
                        None => c,
                    });
                }
            }
        }
        Ok(Grads { by_node, tape: self.id })
    }
}

/// The rule kernels run on the inner engine; a tracked input is not differentiable there.
impl<B: Ops> Decorator for Reverse<B> {
    type Inner = B;

    fn inner_engine(&self) -> &B {
        &self.inner
    }

    fn untracked<'a>(&self, what: &str, t: &'a Var<B>) -> Result<&'a B::T> {
        match self.node_of(t)? {
            Some(_) => Err(OpError::NotDifferentiable(what.to_string())),
            None => Ok(&t.value),
        }
    }

    fn constant(&self, value: B::T) -> Var<B> {
        Var { value, node: None, tape: self.id }
    }
}

impl<B: Ops> TensorOps for Reverse<B> {
    type T = Var<B>;
    type I = B::I;

    fn engine_name(&self) -> String {
        format!("reverse({})", self.inner.engine_name())
    }

    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<Var<B>> {
        Ok(self.constant(self.inner.tensor(data, shape, dtype)?))
    }

    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<Var<B>> {
        Ok(self.constant(self.inner.full(shape, value, dtype)?))
    }

    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<B::I> {
        self.inner.index_as(data, dtype)
    }

    fn to_vec(&self, t: &Var<B>) -> Result<Vec<f64>> {
        self.inner.to_vec(&t.value)
    }

    fn index_to_vec(&self, i: &B::I) -> Result<Vec<i64>> {
        self.inner.index_to_vec(i)
    }

    fn reshape(&self, t: &Var<B>, shape: &[usize]) -> Result<Var<B>> {
        let y = self.inner.reshape(&t.value, shape)?;
        let old = t.value.shape().to_vec();
        self.record(y, &[t], move |b, g| Ok(vec![Some(b.reshape(g, &old)?)]))
    }
}

impl<B: Ops> ElementwiseOps for Reverse<B> {
    fn unary(&self, op: UnaryOp, x: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.unary(op, &x.value)?;
        if self.node_of(x)?.is_none() {
            return Ok(self.constant(y));
        }
        let saved = rules::elementwise::unary_saved(op, &x.value, &y);
        self.record(y, &[x], move |b, g| Ok(vec![rules::elementwise::unary_vjp_saved(b, op, saved.as_ref(), g)?]))
    }

    fn binary(&self, op: BinaryOp, a: &Var<B>, c: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.binary(op, &a.value, &c.value)?;
        if op.is_comparison() {
            self.node_of(a)?;
            self.node_of(c)?;
            return Ok(self.constant(y));
        }
        let need = [self.node_of(a)?.is_some(), self.node_of(c)?.is_some()];
        if need == [false, false] {
            return Ok(self.constant(y));
        }
        let saved = rules::elementwise::BinarySaved::new(op, &a.value, &c.value, &y, need);
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::elementwise::binary_vjp(b, &saved, g)?;
            Ok(vec![ga, gc])
        })
    }

    fn select(&self, mask: &Var<B>, a: &Var<B>, c: &Var<B>) -> Result<Var<B>> {
        self.node_of(mask)?;
        let y = self.inner.select(&mask.value, &a.value, &c.value)?;
        let need = [self.node_of(a)?.is_some(), self.node_of(c)?.is_some()];
        if need == [false, false] {
            return Ok(self.constant(y));
        }
        let (m, ashape, cshape) = (mask.value.clone(), a.value.shape().to_vec(), c.value.shape().to_vec());
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::elementwise::select_vjp(b, &m, &ashape, &cshape, need, g)?;
            Ok(vec![ga, gc])
        })
    }

    fn index_eq(&self, i: &B::I, value: i64, dtype: DType) -> Result<Var<B>> {
        Ok(self.constant(self.inner.index_eq(i, value, dtype)?))
    }

    fn combine(&self, op: HistOp, a: &Var<B>, c: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.combine(op, &a.value, &c.value)?;
        let need = [self.node_of(a)?.is_some(), self.node_of(c)?.is_some()];
        if need == [false, false] {
            return Ok(self.constant(y));
        }
        let (av, cv) = (a.value.clone(), c.value.clone());
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::elementwise::combine_vjp(b, op, &av, &cv, need, g)?;
            Ok(vec![ga, gc])
        })
    }

    fn combine_partial(&self, op: HistOp, side: Operand, a: &Var<B>, c: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.combine_partial(op, side, &a.value, &c.value)?;
        if self.node_of(a)?.is_some() || self.node_of(c)?.is_some() {
            // Fails now, not in the backward pass, when the second derivatives are unknown.
            let g0 = self.inner.zeros_like(&y)?;
            rules::elementwise::combine_partial_vjp(&self.inner, op, side, &a.value, &c.value, &g0)?;
        }
        let (av, cv) = (a.value.clone(), c.value.clone());
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::elementwise::combine_partial_vjp(b, op, side, &av, &cv, g)?;
            Ok(vec![ga, gc])
        })
    }
}

impl<B: Ops> ReduceOps for Reverse<B> {
    fn reduce(&self, op: HistOp, x: &Var<B>) -> Result<Var<B>> {
        let (y, pullback) = rules::reduce::reduce_vjp(&self.inner, op, &x.value)?;
        self.record(y, &[x], move |b, g| Ok(vec![Some(pullback(b, g)?)]))
    }
}

impl<B: Ops> IndexOps for Reverse<B> {
    fn gather(&self, src: &Var<B>, idx: &B::I, oob: OutOfRange) -> Result<Var<B>> {
        let y = self.inner.gather(&src.value, idx, oob)?;
        let (s, ix) = (src.value.clone(), idx.clone());
        self.record(y, &[src], move |b, g| Ok(vec![Some(rules::indexing::gather_vjp(b, &s, &ix, g)?)]))
    }

    fn stack(&self, parts: &[Var<B>]) -> Result<Var<B>> {
        let y = self.inner.stack(&parts.iter().map(|p| p.value.clone()).collect::<Vec<_>>())?;
        let inputs: Vec<&Var<B>> = parts.iter().collect();
        self.record(y, &inputs, |b, g| Ok(b.unstack(g)?.into_iter().map(Some).collect()))
    }

    fn unstack(&self, x: &Var<B>) -> Result<Vec<Var<B>>> {
        // One node per row, whose adjoint is x's whole shape: zeros stacked around the row's
        // adjoint. Quadratic in the rows, which only an engine reverse-differentiating a rule
        // (the adjoint of `stack`) pays; no index tensor, so nothing is uploaded.
        let (n, _) = crate::shape::unstack_shape(x.value.shape())?;
        let rows = self.inner.unstack(&x.value)?;
        rows.into_iter()
            .enumerate()
            .map(|(j, r)| {
                let shape = r.shape().to_vec();
                self.record(r, &[x], move |b, g| {
                    let zeros = b.full(&shape, 0.0, g.dtype())?;
                    let parts: Vec<B::T> = (0..n).map(|i| if i == j { g.clone() } else { zeros.clone() }).collect();
                    Ok(vec![Some(b.stack(&parts)?)])
                })
            })
            .collect()
    }

    fn scatter(&self, dest: &Var<B>, idx: &B::I, vals: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.scatter(&dest.value, idx, &vals.value)?;
        let (v, ix) = (vals.value.clone(), idx.clone());
        self.record(y, &[dest, vals], move |b, g| {
            let (gd, gv) = rules::indexing::scatter_vjp(b, &ix, &v, g)?;
            Ok(vec![Some(gd), Some(gv)])
        })
    }

    fn sort_by_key(&self, keys: &B::I, num_keys: usize) -> Result<B::I> {
        self.inner.sort_by_key(keys, num_keys)
    }

    fn sort_by_key_ranked(&self, keys: &B::I, num_keys: usize) -> Result<(B::I, B::I)> {
        self.inner.sort_by_key_ranked(keys, num_keys)
    }

    fn gather_index(&self, src: &B::I, idx: &B::I) -> Result<B::I> {
        self.inner.gather_index(src, idx)
    }
}

impl<B: Ops> HistOps for Reverse<B> {
    fn reduce_by_index(&self, dest: &Var<B>, op: HistOp, inds: &B::I, vals: &Var<B>) -> Result<Var<B>> {
        if inds.len() != vals.value.numel() {
            return Err(OpError::Shape {
                op: "reduce_by_index",
                detail: format!("indices vs values: {} vs {}", inds.len(), vals.value.numel()),
            });
        }
        let (hist, pullback) =
            rules::hist::reduce_by_index_vjp(&self.inner, self.hist_rule, &dest.value, op, inds, &vals.value)?;
        self.record(hist, &[dest, vals], move |b, g| {
            let (dest_bar, vals_bar) = pullback(b, g)?;
            Ok(vec![Some(dest_bar), Some(vals_bar)])
        })
    }

    fn arg_reduce_by_index(&self, dest: &Var<B>, ext: Extremum, inds: &B::I, vals: &Var<B>) -> Result<(Var<B>, B::I)> {
        let (hist, winners) = self.inner.arg_reduce_by_index(&dest.value, ext, inds, &vals.value)?;
        let (w, n) = (winners.clone(), vals.value.numel());
        let y = self.record(hist, &[dest, vals], move |b, g| {
            let (dest_bar, vals_bar) = rules::hist::winner_pullback(b, &w, n, g)?;
            Ok(vec![Some(dest_bar), Some(vals_bar)])
        })?;
        Ok((y, winners))
    }

    fn prod_nonzero_by_index(&self, inds: &B::I, vals: &Var<B>, k: usize) -> Result<(Var<B>, B::I, B::I)> {
        let (p, zeros, infs) = self.inner.prod_nonzero_by_index(inds, &vals.value, k)?;
        let (ix, v, pv) = (inds.clone(), vals.value.clone(), p.clone());
        let p = self.record(p, &[vals], move |b, g| {
            Ok(vec![Some(rules::hist::prod_nonzero_by_index_vjp(b, &ix, &v, &pv, g)?)])
        })?;
        Ok((p, zeros, infs))
    }

    fn prod_vals_adjoint(&self, inds: &B::I, vals: &Var<B>, c0: &Var<B>, c1: &Var<B>, c2: &Var<B>) -> Result<Var<B>> {
        let out = self.inner.prod_vals_adjoint(inds, &vals.value, &c0.value, &c1.value, &c2.value)?;
        let (ix, v, c0v, ov) = (inds.clone(), vals.value.clone(), c0.value.clone(), out.clone());
        self.record(out, &[vals, c0, c1, c2], move |b, g| {
            let [gv, g0, g1, g2] = rules::hist::prod_vals_adjoint_vjp(b, &ix, &v, &c0v, &ov, g)?;
            Ok(vec![Some(gv), Some(g0), Some(g1), Some(g2)])
        })
    }
}

impl<B: Ops> ScanOps for Reverse<B> {
    fn scan(&self, op: HistOp, x: &Var<B>, spec: ScanSpec, segments: Option<&B::I>) -> Result<Var<B>> {
        if self.node_of(x)?.is_none() {
            return Ok(self.constant(self.inner.scan(op, &x.value, spec, segments)?));
        }
        let (y, pullback) = rules::scan::scan_vjp(&self.inner, op, &x.value, spec, segments)?;
        self.record(y, &[x], move |b, g| Ok(vec![Some(pullback(b, g)?)]))
    }

    fn linear_recurrence(&self, a: &Var<B>, m: &Var<B>, spec: ScanSpec, segments: Option<&B::I>) -> Result<Var<B>> {
        if self.node_of(a)?.is_none() && self.node_of(m)?.is_none() {
            return Ok(self.constant(self.inner.linear_recurrence(&a.value, &m.value, spec, segments)?));
        }
        let (y, pullback) = rules::scan::linear_recurrence_vjp(&self.inner, &a.value, &m.value, spec, segments)?;
        self.record(y, &[a, m], move |b, g| {
            let (ga, gm) = pullback(b, g)?;
            Ok(vec![Some(ga), Some(gm)])
        })
    }
}

impl<B: Ops> DenseOps for Reverse<B> {
    fn broadcast_to(&self, x: &Var<B>, shape: &[usize]) -> Result<Var<B>> {
        let y = self.inner.broadcast_to(&x.value, shape)?;
        let xs = x.value.shape().to_vec();
        self.record(y, &[x], move |b, g| Ok(vec![Some(rules::dense::broadcast_to_vjp(b, &xs, g)?)]))
    }

    fn sum_to(&self, x: &Var<B>, shape: &[usize]) -> Result<Var<B>> {
        let y = self.inner.sum_to(&x.value, shape)?;
        let xs = x.value.shape().to_vec();
        self.record(y, &[x], move |b, g| Ok(vec![Some(rules::dense::sum_to_vjp(b, &xs, g)?)]))
    }

    fn matmul(&self, a: &Var<B>, ta: bool, c: &Var<B>, tc: bool) -> Result<Var<B>> {
        let y = self.inner.matmul(&a.value, ta, &c.value, tc)?;
        let (need_a, need_c) = (self.node_of(a)?.is_some(), self.node_of(c)?.is_some());
        let (av, cv) = (a.value.clone(), c.value.clone());
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::dense::matmul_vjp(b, &av, ta, &cv, tc, g, need_a, need_c)?;
            Ok(vec![ga, gc])
        })
    }

    fn sq_dist(&self, a: &Var<B>, c: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.sq_dist(&a.value, &c.value)?;
        let (need_a, need_c) = (self.node_of(a)?.is_some(), self.node_of(c)?.is_some());
        let (av, cv) = (a.value.clone(), c.value.clone());
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::dense::sq_dist_vjp(b, &av, &cv, g, need_a, need_c)?;
            Ok(vec![ga, gc])
        })
    }

    fn sum_sq_diff(&self, a: &Var<B>, c: &Var<B>) -> Result<Var<B>> {
        let y = self.inner.sum_sq_diff(&a.value, &c.value)?;
        let (need_a, need_c) = (self.node_of(a)?.is_some(), self.node_of(c)?.is_some());
        let (av, cv) = (a.value.clone(), c.value.clone());
        self.record(y, &[a, c], move |b, g| {
            let (ga, gc) = rules::dense::sum_sq_diff_vjp(b, &av, &cv, g, need_a, need_c)?;
            Ok(vec![ga, gc])
        })
    }

    fn logsumexp_axis(&self, x: &Var<B>, axis: usize) -> Result<Var<B>> {
        let y = self.inner.logsumexp_axis(&x.value, axis)?;
        let (xv, yv) = (x.value.clone(), y.clone());
        self.record(y, &[x], move |b, g| Ok(vec![Some(b.logsumexp_adjoint(&xv, &yv, g, axis)?)]))
    }

    fn lstm_cell(&self, x: &Var<B>, state: &Var<B>, params: &Var<B>) -> Result<Var<B>> {
        // The gates, where the inner engine saves them, spare the adjoint kernel computing
        // them again.
        let (y, gates) = self.inner.lstm_cell_gates(&x.value, &state.value, &params.value)?;
        let (xv, sv, pv) = (x.value.clone(), state.value.clone(), params.value.clone());
        self.record(y, &[x, state, params], move |b, g| {
            let (gx, gs, gp) = match &gates {
                Some(gates) => b.lstm_cell_vjp_saved(&xv, &sv, &pv, gates, g)?,
                None => b.lstm_cell_vjp(&xv, &sv, &pv, g)?,
            };
            Ok(vec![Some(gx), Some(gs), Some(gp)])
        })
    }

    fn arg_reduce_axis(&self, ext: Extremum, x: &Var<B>, axis: usize) -> Result<(Var<B>, B::I)> {
        let (y, winners) = self.inner.arg_reduce_axis(ext, &x.value, axis)?;
        let (xv, w) = (x.value.clone(), winners.clone());
        let y = self.record(y, &[x], move |b, g| Ok(vec![Some(rules::dense::arg_reduce_axis_vjp(b, &xv, &w, g)?)]))?;
        Ok((y, winners))
    }
}
