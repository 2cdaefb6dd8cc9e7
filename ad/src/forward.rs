//! The forward-mode engine: a dual-number decorator over any [`Ops`].
//!
//! A tensor of `Forward<B>` is a primal value of `B` with an optional tangent of the same shape
//! (absent means zero, which lets constants skip all tangent work). Each op runs on `B` and
//! applies its JVP rule from [`crate::rules`], written in `B`'s ops, so forward mode runs on every
//! device and nests: `Reverse<Forward<D>>` (forward over reverse) computes Hessian-vector
//! products, because the reverse rules run on `Forward<D>` and carry tangents along.
//!
//! Perturbation confusion is excluded by construction: each nesting level is a distinct type
//! (a tangent of an inner level is a value of an outer one), and a dual tensor is tagged with its
//! engine so that a tensor with a tangent of another `Forward` engine is rejected rather than
//! having its tangent mixed in.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ops::{
    Decorator, DenseOps, ElementwiseOps, Extremum, HistOps, IndexOps, Operand, OutOfRange, ReduceOps, ScanOps,
    ScanSpec, TensorMeta, TensorOps,
};
use crate::rules;
use crate::{BinaryOp, DType, HistOp, IndexDType, OpError, Ops, Result, UnaryOp};

static NEXT_ENGINE: AtomicUsize = AtomicUsize::new(1);

/// A tensor of the forward engine: the primal value and its tangent (None: zero).
pub struct Dual<B: Ops> {
    value: B::T,
    tangent: Option<B::T>,
    engine: usize,
}

impl<B: Ops> Clone for Dual<B> {
    fn clone(&self) -> Self {
        Dual { value: self.value.clone(), tangent: self.tangent.clone(), engine: self.engine }
    }
}

impl<B: Ops> Dual<B> {
    /// The primal value.
    pub fn value(&self) -> &B::T {
        &self.value
    }
    /// The tangent, None when it is zero.
    pub fn tangent(&self) -> Option<&B::T> {
        self.tangent.as_ref()
    }
}

impl<B: Ops> TensorMeta for Dual<B> {
    fn shape(&self) -> &[usize] {
        self.value.shape()
    }
    fn dtype(&self) -> DType {
        self.value.dtype()
    }
}

/// The forward-mode engine over `B`.
pub struct Forward<B: Ops> {
    inner: B,
    id: usize,
}

impl<B: Ops> Clone for Forward<B> {
    fn clone(&self) -> Self {
        Forward { inner: self.inner.clone(), id: self.id }
    }
}

impl<B: Ops> Forward<B> {
    pub fn new(inner: B) -> Self {
        Forward { inner, id: NEXT_ENGINE.fetch_add(1, Ordering::Relaxed) }
    }

    /// The engine the rules run on.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// A dual variable: `value` with the tangent (direction) `tangent` of the same shape.
    pub fn dual(&self, value: B::T, tangent: B::T) -> Result<Dual<B>> {
        if value.shape() != tangent.shape() || value.dtype() != tangent.dtype() {
            return Err(OpError::Shape {
                op: "dual",
                detail: format!(
                    "value {:?} {} vs tangent {:?} {}",
                    value.shape(),
                    value.dtype(),
                    tangent.shape(),
                    tangent.dtype()
                ),
            });
        }
        Ok(Dual { value, tangent: Some(tangent), engine: self.id })
    }

    /// A constant (zero tangent).
    pub fn lift(&self, value: B::T) -> Dual<B> {
        Dual { value, tangent: None, engine: self.id }
    }

    /// The primal value of `t`.
    pub fn primal<'a>(&self, t: &'a Dual<B>) -> &'a B::T {
        &t.value
    }

    /// The tangent of `t`, zeros when it has none.
    pub fn tangent(&self, t: &Dual<B>) -> Result<B::T> {
        match &t.tangent {
            Some(d) => Ok(d.clone()),
            None => self.inner.zeros_like(&t.value),
        }
    }

    /// The tangent of `t` if it has one, after checking that it belongs to this engine.
    fn dot<'a>(&self, t: &'a Dual<B>) -> Result<Option<&'a B::T>> {
        if t.tangent.is_some() && t.engine != self.id {
            return Err(OpError::Foreign(format!(
                "a dual tensor of forward engine {} was passed to forward engine {} \
                 (nested engines must not mix levels)",
                t.engine, self.id
            )));
        }
        Ok(t.tangent.as_ref())
    }

    fn make(&self, value: B::T, tangent: Option<B::T>) -> Dual<B> {
        Dual { value, tangent, engine: self.id }
    }
}

/// The rule kernels run on the inner engine; an input with a tangent is not differentiable there
/// (the `*` histogram's primitives, which are, are ops of [`HistOps`] with forward rules).
impl<B: Ops> Decorator for Forward<B> {
    type Inner = B;

    fn inner_engine(&self) -> &B {
        &self.inner
    }

    fn untracked<'a>(&self, what: &str, t: &'a Dual<B>) -> Result<&'a B::T> {
        match self.dot(t)? {
            Some(_) => Err(OpError::NotDifferentiable(what.to_string())),
            None => Ok(&t.value),
        }
    }

    fn constant(&self, value: B::T) -> Dual<B> {
        self.lift(value)
    }
}

impl<B: Ops> TensorOps for Forward<B> {
    type T = Dual<B>;
    type I = B::I;

    fn engine_name(&self) -> String {
        format!("forward({})", self.inner.engine_name())
    }

    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<Dual<B>> {
        Ok(self.lift(self.inner.tensor(data, shape, dtype)?))
    }

    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<Dual<B>> {
        Ok(self.lift(self.inner.full(shape, value, dtype)?))
    }

    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<B::I> {
        self.inner.index_as(data, dtype)
    }

    fn to_vec(&self, t: &Dual<B>) -> Result<Vec<f64>> {
        self.inner.to_vec(&t.value)
    }

    fn index_to_vec(&self, i: &B::I) -> Result<Vec<i64>> {
        self.inner.index_to_vec(i)
    }

    fn reshape(&self, t: &Dual<B>, shape: &[usize]) -> Result<Dual<B>> {
        let y = self.inner.reshape(&t.value, shape)?;
        let dy = self.dot(t)?.map(|d| self.inner.reshape(d, shape)).transpose()?;
        Ok(self.make(y, dy))
    }
}

impl<B: Ops> ElementwiseOps for Forward<B> {
    fn unary(&self, op: UnaryOp, x: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.unary(op, &x.value)?;
        let dy = match self.dot(x)? {
            Some(dx) => rules::elementwise::unary_jvp(b, op, &x.value, &y, dx)?,
            None => None,
        };
        Ok(self.make(y, dy))
    }

    fn binary(&self, op: BinaryOp, a: &Dual<B>, c: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.binary(op, &a.value, &c.value)?;
        let (da, dc) = (self.dot(a)?, self.dot(c)?);
        let dy = rules::elementwise::binary_jvp(b, op, &a.value, &c.value, &y, da, dc)?;
        Ok(self.make(y, dy))
    }

    fn select(&self, mask: &Dual<B>, a: &Dual<B>, c: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        self.dot(mask)?;
        let y = b.select(&mask.value, &a.value, &c.value)?;
        let dy = rules::elementwise::select_jvp(b, &mask.value, &y, self.dot(a)?, self.dot(c)?)?;
        Ok(self.make(y, dy))
    }

    fn index_eq(&self, i: &B::I, value: i64, dtype: DType) -> Result<Dual<B>> {
        Ok(self.lift(self.inner.index_eq(i, value, dtype)?))
    }

    fn combine(&self, op: HistOp, a: &Dual<B>, c: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.combine(op, &a.value, &c.value)?;
        let dy = rules::elementwise::combine_jvp(b, op, &a.value, &c.value, &y, self.dot(a)?, self.dot(c)?)?;
        Ok(self.make(y, dy))
    }

    fn combine_partial(&self, op: HistOp, side: Operand, a: &Dual<B>, c: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.combine_partial(op, side, &a.value, &c.value)?;
        let (da, dc) = (self.dot(a)?, self.dot(c)?);
        let dy = if da.is_some() || dc.is_some() {
            rules::elementwise::combine_partial_jvp(b, op, side, &y, da, dc)?
        } else {
            None
        };
        Ok(self.make(y, dy))
    }
}

impl<B: Ops> ReduceOps for Forward<B> {
    fn reduce(&self, op: HistOp, x: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.reduce(op, &x.value)?;
        let dy = match self.dot(x)? {
            Some(dx) => Some(rules::reduce::reduce_jvp(b, op, &x.value, &y, dx)?),
            None => None,
        };
        Ok(self.make(y, dy))
    }
}

impl<B: Ops> IndexOps for Forward<B> {
    fn gather(&self, src: &Dual<B>, idx: &B::I, oob: OutOfRange) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.gather(&src.value, idx, oob)?;
        let dy = self.dot(src)?.map(|d| rules::indexing::gather_jvp(b, idx, d)).transpose()?;
        Ok(self.make(y, dy))
    }

    fn stack(&self, parts: &[Dual<B>]) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.stack(&parts.iter().map(|p| p.value.clone()).collect::<Vec<_>>())?;
        let dots = parts.iter().map(|p| self.dot(p)).collect::<Result<Vec<_>>>()?;
        if dots.iter().all(Option::is_none) {
            return Ok(self.make(y, None));
        }
        let dots = dots
            .iter()
            .zip(parts)
            .map(|(d, p)| d.map_or_else(|| b.zeros_like(&p.value), |d| Ok(d.clone())))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.make(y, Some(b.stack(&dots)?)))
    }

    fn unstack(&self, x: &Dual<B>) -> Result<Vec<Dual<B>>> {
        let b = &self.inner;
        let ys = b.unstack(&x.value)?;
        match self.dot(x)? {
            Some(d) => Ok(ys.into_iter().zip(b.unstack(d)?).map(|(y, dy)| self.make(y, Some(dy))).collect()),
            None => Ok(ys.into_iter().map(|y| self.make(y, None)).collect()),
        }
    }

    fn scatter(&self, dest: &Dual<B>, idx: &B::I, vals: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.scatter(&dest.value, idx, &vals.value)?;
        let (dd, dv) = (self.dot(dest)?, self.dot(vals)?);
        let dy = if dd.is_some() || dv.is_some() {
            Some(rules::indexing::scatter_jvp(b, &dest.value, idx, &vals.value, dd, dv)?)
        } else {
            None
        };
        Ok(self.make(y, dy))
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

impl<B: Ops> HistOps for Forward<B> {
    fn reduce_by_index(&self, dest: &Dual<B>, op: HistOp, inds: &B::I, vals: &Dual<B>) -> Result<Dual<B>> {
        let (h, dh) = rules::hist::reduce_by_index_jvp(
            &self.inner,
            &dest.value,
            self.dot(dest)?,
            op,
            inds,
            &vals.value,
            self.dot(vals)?,
        )?;
        Ok(self.make(h, dh))
    }

    fn arg_reduce_by_index(
        &self,
        dest: &Dual<B>,
        ext: Extremum,
        inds: &B::I,
        vals: &Dual<B>,
    ) -> Result<(Dual<B>, B::I)> {
        let b = &self.inner;
        let (h, winners) = b.arg_reduce_by_index(&dest.value, ext, inds, &vals.value)?;
        let (dd, dv) = (self.dot(dest)?, self.dot(vals)?);
        let dh = if dd.is_some() || dv.is_some() {
            Some(rules::hist::winner_tangent(b, &winners, &h, dd, dv)?)
        } else {
            None
        };
        Ok((self.make(h, dh), winners))
    }

    fn prod_nonzero_by_index(&self, inds: &B::I, vals: &Dual<B>, k: usize) -> Result<(Dual<B>, B::I, B::I)> {
        let b = &self.inner;
        let (p, z, m) = b.prod_nonzero_by_index(inds, &vals.value, k)?;
        let dp = self
            .dot(vals)?
            .map(|dv| rules::hist::prod_nonzero_by_index_jvp(b, inds, &vals.value, dv, &p))
            .transpose()?;
        Ok((self.make(p, dp), z, m))
    }

    fn prod_vals_adjoint(
        &self,
        inds: &B::I,
        vals: &Dual<B>,
        c0: &Dual<B>,
        c1: &Dual<B>,
        c2: &Dual<B>,
    ) -> Result<Dual<B>> {
        let b = &self.inner;
        let out = b.prod_vals_adjoint(inds, &vals.value, &c0.value, &c1.value, &c2.value)?;
        let (dv, d0, d1, d2) = (self.dot(vals)?, self.dot(c0)?, self.dot(c1)?, self.dot(c2)?);
        let dout = if dv.is_some() || d0.is_some() || d1.is_some() || d2.is_some() {
            let (c, dc) = ([&c0.value, &c1.value, &c2.value], [d0, d1, d2]);
            Some(rules::hist::prod_vals_adjoint_jvp(b, inds, &vals.value, c, &out, dv, dc)?)
        } else {
            None
        };
        Ok(self.make(out, dout))
    }
}

impl<B: Ops> ScanOps for Forward<B> {
    fn scan(&self, op: HistOp, x: &Dual<B>, spec: ScanSpec, segments: Option<&B::I>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.scan(op, &x.value, spec, segments)?;
        let dy = self.dot(x)?.map(|dx| rules::scan::scan_jvp(b, op, &x.value, &y, dx, spec, segments)).transpose()?;
        Ok(self.make(y, dy))
    }

    fn linear_recurrence(&self, a: &Dual<B>, m: &Dual<B>, spec: ScanSpec, segments: Option<&B::I>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.linear_recurrence(&a.value, &m.value, spec, segments)?;
        let (da, dm) = (self.dot(a)?, self.dot(m)?);
        let dy = if da.is_some() || dm.is_some() {
            Some(rules::scan::linear_recurrence_jvp(b, &a.value, &m.value, &y, da, dm, spec, segments)?)
        } else {
            None
        };
        Ok(self.make(y, dy))
    }
}

impl<B: Ops> DenseOps for Forward<B> {
    fn broadcast_to(&self, x: &Dual<B>, shape: &[usize]) -> Result<Dual<B>> {
        let y = self.inner.broadcast_to(&x.value, shape)?;
        let dy = self.dot(x)?.map(|d| self.inner.broadcast_to(d, shape)).transpose()?;
        Ok(self.make(y, dy))
    }

    fn sum_to(&self, x: &Dual<B>, shape: &[usize]) -> Result<Dual<B>> {
        let y = self.inner.sum_to(&x.value, shape)?;
        let dy = self.dot(x)?.map(|d| self.inner.sum_to(d, shape)).transpose()?;
        Ok(self.make(y, dy))
    }

    fn matmul(&self, a: &Dual<B>, ta: bool, c: &Dual<B>, tc: bool) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.matmul(&a.value, ta, &c.value, tc)?;
        let dy = rules::dense::matmul_jvp(b, &a.value, ta, &c.value, tc, self.dot(a)?, self.dot(c)?)?;
        Ok(self.make(y, dy))
    }

    fn sq_dist(&self, a: &Dual<B>, c: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.sq_dist(&a.value, &c.value)?;
        let dy = rules::dense::sq_dist_jvp(b, &a.value, &c.value, self.dot(a)?, self.dot(c)?)?;
        Ok(self.make(y, dy))
    }

    fn sum_sq_diff(&self, a: &Dual<B>, c: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.sum_sq_diff(&a.value, &c.value)?;
        let dy = rules::dense::sum_sq_diff_jvp(b, &a.value, &c.value, self.dot(a)?, self.dot(c)?)?;
        Ok(self.make(y, dy))
    }

    fn logsumexp_axis(&self, x: &Dual<B>, axis: usize) -> Result<Dual<B>> {
        let b = &self.inner;
        let y = b.logsumexp_axis(&x.value, axis)?;
        let dy = self.dot(x)?.map(|d| rules::dense::logsumexp_jvp(b, &x.value, &y, d, axis)).transpose()?;
        Ok(self.make(y, dy))
    }

    fn lstm_cell(&self, x: &Dual<B>, state: &Dual<B>, params: &Dual<B>) -> Result<Dual<B>> {
        let b = &self.inner;
        let (dx, ds, dp) = (self.dot(x)?, self.dot(state)?, self.dot(params)?);
        if dx.is_none() && ds.is_none() && dp.is_none() {
            return Ok(self.make(b.lstm_cell(&x.value, &state.value, &params.value)?, None));
        }
        // The gates, where the inner engine saves them, spare the tangent kernel computing them
        // again.
        let (y, gates) = b.lstm_cell_gates(&x.value, &state.value, &params.value)?;
        // The fused tangent takes all three; an operand without one contributes zeros.
        let or_zeros = |d: Option<&B::T>, v: &B::T| d.map_or_else(|| b.zeros_like(v), |d| Ok(d.clone()));
        let (dx, ds, dp) = (or_zeros(dx, &x.value)?, or_zeros(ds, &state.value)?, or_zeros(dp, &params.value)?);
        let (xv, sv, pv) = (&x.value, &state.value, &params.value);
        let dy = match gates {
            Some(gates) => b.lstm_cell_jvp_saved(xv, sv, pv, &gates, &dx, &ds, &dp)?,
            None => b.lstm_cell_jvp(xv, sv, pv, &dx, &ds, &dp)?,
        };
        Ok(self.make(y, Some(dy)))
    }

    fn arg_reduce_axis(&self, ext: Extremum, x: &Dual<B>, axis: usize) -> Result<(Dual<B>, B::I)> {
        let b = &self.inner;
        let (y, winners) = b.arg_reduce_axis(ext, &x.value, axis)?;
        let dy = self.dot(x)?.map(|d| rules::dense::arg_reduce_axis_jvp(b, &y, &winners, d)).transpose()?;
        Ok((self.make(y, dy), winners))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cpu, Reverse};

    fn cpu() -> Cpu {
        Cpu::new(Some(1)).unwrap()
    }

    #[test]
    fn nested_levels_do_not_confuse_perturbations() {
        // d/dx [x * d/dy (x + y)] at x = 2, y = 3 is 1: the inner derivative is the constant 1.
        // With perturbation confusion x's tangent would leak into d/dy and give 2.
        let c = cpu();
        let dt = DType::F64;
        let f = Forward::new(c.clone());
        let x = f.dual(c.full(&[1], 2.0, dt).unwrap(), c.full(&[1], 1.0, dt).unwrap()).unwrap();
        let r = Reverse::new(f.clone());
        let y = r.var(f.full(&[1], 3.0, dt).unwrap());
        let s = r.add(&r.lift(x.clone()), &y).unwrap();
        let grads = r.backward(&s, f.full(&[1], 1.0, dt).unwrap()).unwrap();
        let dy = grads.get(&y).unwrap().clone();
        let z = f.mul(&x, &dy).unwrap();
        assert_eq!(c.to_vec(z.value()).unwrap(), vec![2.0]);
        assert_eq!(c.to_vec(&f.tangent(&z).unwrap()).unwrap(), vec![1.0]);
        // The same with two forward levels: d/dx [x * d/dy (x + y)].
        let f2 = Forward::new(f.clone());
        let x2 = f2.dual(f.full(&[1], 2.0, dt).unwrap(), f.full(&[1], 1.0, dt).unwrap()).unwrap();
        let y1 = f.dual(c.full(&[1], 3.0, dt).unwrap(), c.full(&[1], 1.0, dt).unwrap()).unwrap();
        // Inner level: d/dy (x + y) with x a constant of that level.
        let inner = f.add(x2.value(), &y1).unwrap();
        let d_dy = f2.lift(f.lift(f.tangent(&inner).unwrap()));
        let z2 = f2.mul(&x2, &d_dy).unwrap();
        assert_eq!(f.to_vec(&f2.tangent(&z2).unwrap()).unwrap(), vec![1.0]);
    }

    #[test]
    fn a_tangent_of_another_forward_engine_is_rejected() {
        let c = cpu();
        let (a, b) = (Forward::new(c.clone()), Forward::new(c.clone()));
        let t = c.full(&[2], 1.0, DType::F32).unwrap();
        let x = a.dual(t.clone(), t.clone()).unwrap();
        assert!(matches!(b.neg(&x), Err(OpError::Foreign(_))));
        // Constants carry no tangent and are welcome anywhere.
        assert!(b.neg(&a.lift(t)).is_ok());
    }

    #[test]
    fn forward_over_forward_gives_second_derivatives() {
        let c = cpu();
        let dt = DType::F64;
        let f1 = Forward::new(c.clone());
        let f2 = Forward::new(f1.clone());
        let x0 = 1.5;
        let x = f2
            .dual(
                f1.dual(c.full(&[1], x0, dt).unwrap(), c.full(&[1], 1.0, dt).unwrap()).unwrap(),
                f1.full(&[1], 1.0, dt).unwrap(),
            )
            .unwrap();
        let y = f2.mul(&f2.mul(&x, &x).unwrap(), &x).unwrap(); // x^3
        let d = f2.tangent(&y).unwrap(); // 3x^2, with inner tangent 6x
        assert_eq!(f1.to_vec(&d).unwrap(), vec![3.0 * x0 * x0]);
        assert_eq!(c.to_vec(&f1.tangent(&d).unwrap()).unwrap(), vec![6.0 * x0]);
    }

    /// f(x) through elementwise ops, the four special histograms, a reduction and scans.
    fn objective<O: Ops>(o: &O, x: &O::T, dt: DType) -> Result<O::T> {
        let n = x.numel();
        let inds = o.index(&(0..n as i64).map(|i| (i * 5 + 1) % 4 - 1).collect::<Vec<_>>())?;
        let sq = o.mul(x, x)?;
        let h_add = o.reduce_by_index(&o.full(&[3], 0.5, dt)?, HistOp::Add, &inds, &sq)?;
        let h_mul = o.reduce_by_index(&o.full(&[3], 1.5, dt)?, HistOp::Mul, &inds, x)?;
        let h_min = o.reduce_by_index(&o.full(&[3], 10.0, dt)?, HistOp::Min, &inds, &sq)?;
        let h_max = o.reduce_by_index(&o.full(&[3], -10.0, dt)?, HistOp::Max, &inds, x)?;
        let s1 = o.sum(&o.mul(&h_add, &h_add)?)?;
        let s2 = o.sum(&o.mul(&h_mul, &h_min)?)?;
        let s3 = o.sum(&o.unary(UnaryOp::Exp, &o.mul(&h_max, &h_max)?)?)?;
        let s4 = o.sum(&o.scan(HistOp::Mul, x, ScanSpec::INCLUSIVE, None)?)?;
        let s5 = o.reduce(HistOp::Mul, &o.unary(UnaryOp::Sin, x)?)?;
        let s6 = o.sum(&o.binary(BinaryOp::Div, &sq, &o.unary(UnaryOp::Sigmoid, x)?)?)?;
        o.add(&o.add(&o.add(&s1, &s2)?, &o.add(&s3, &s4)?)?, &o.add(&s5, &s6)?)
    }

    fn gradient(c: &Cpu, x: &[f64]) -> Vec<f64> {
        let r = Reverse::new(c.clone());
        let xv = r.var(c.tensor(x, &[x.len()], DType::F64).unwrap());
        let y = objective(&r, &xv, DType::F64).unwrap();
        let g = r.backward(&y, c.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
        c.to_vec(g.get(&xv).unwrap()).unwrap()
    }

    #[test]
    fn forward_over_reverse_computes_hessian_vector_products() {
        let c = cpu();
        let dt = DType::F64;
        let x0 = [0.3, -0.7, 1.1, 0.4, -0.2, 0.9, 0.6];
        let v = [1.0, -0.5, 0.25, 2.0, -1.0, 0.5, 0.75];
        let f = Forward::new(c.clone());
        let r = Reverse::new(f.clone());
        let x = r.var(f.dual(c.tensor(&x0, &[7], dt).unwrap(), c.tensor(&v, &[7], dt).unwrap()).unwrap());
        let y = objective(&r, &x, dt).unwrap();
        let g = r.backward(&y, f.full(&[1], 1.0, dt).unwrap()).unwrap();
        let g = g.get(&x).unwrap();
        let grad = c.to_vec(g.value()).unwrap();
        let hvp = c.to_vec(&f.tangent(g).unwrap()).unwrap();
        // The gradient agrees with plain reverse mode; H v with central differences of it.
        assert_eq!(grad, gradient(&c, &x0));
        let h = 1e-5;
        let shifted = |s: f64| -> Vec<f64> {
            let xs: Vec<f64> = x0.iter().zip(&v).map(|(a, d)| a + s * h * d).collect();
            gradient(&c, &xs)
        };
        let (gp, gm) = (shifted(1.0), shifted(-1.0));
        for j in 0..7 {
            let want = (gp[j] - gm[j]) / (2.0 * h);
            assert!((hvp[j] - want).abs() < 1e-5 * want.abs().max(1.0), "H v [{j}]: {} vs {want}", hvp[j]);
        }
    }
}
