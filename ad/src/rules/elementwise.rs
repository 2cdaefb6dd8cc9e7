//! VJP and JVP rules of the elementwise ops. A one-element operand broadcast against a larger one
//! gets the sum of the adjoint (and its tangent is broadcast). Comparisons and `sign` are
//! piecewise constant: zero derivative. `combine` (an operator's `a op b`) differentiates through
//! its partials; the partials themselves have known derivatives only for +, *, min and max (and
//! their general versions), so engines nest through those and report other general operators'
//! second derivatives as not differentiable.

use crate::general;
use crate::ops::TensorMeta;
use crate::{BinaryOp, HistOp, OpError, Operand, Ops, Result, UnaryOp};

/// Sums `g` down to `shape` when the operand of that shape was broadcast.
pub fn unbroadcast<B: Ops>(b: &B, g: &B::T, shape: &[usize]) -> Result<B::T> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let s = b.sum(g)?;
    b.reshape(&s, shape)
}

/// Adjoint of `x` for `y = op(x)`: the engine's [`crate::RuleKernels::unary_adjoint`] (one fused
/// kernel on the CPU device, [`unary_vjp_composed`](crate::composed::elementwise::unary_vjp_composed) elsewhere).
pub fn unary_vjp<B: Ops>(b: &B, op: UnaryOp, x: &B::T, y: &B::T, g: &B::T) -> Result<Option<B::T>> {
    b.unary_adjoint(op, x, y, g)
}

/// The one primal value the adjoint of `y = op(x)` reads, which a reverse engine keeps from the
/// forward sweep: `y` for the operators whose derivative is written in their result (exp,
/// sqrt, tanh, sigmoid, recip), `x` for the others, nothing for `neg` and `sign`. Keeping only
/// that value frees the other sooner, and on the staged device a value nothing holds is never
/// stored (it stays in the registers of the fused loop that made it).
pub fn unary_saved<T: Clone>(op: UnaryOp, x: &T, y: &T) -> Option<T> {
    match op {
        UnaryOp::Neg | UnaryOp::Sign => None,
        UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Recip => Some(y.clone()),
        UnaryOp::Log | UnaryOp::Log1p | UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Abs | UnaryOp::Square => Some(x.clone()),
    }
}

/// [`unary_vjp`] from what [`unary_saved`] kept. The saved value goes in both of the kernel's
/// primal slots: each operator's adjoint reads only the one [`unary_saved`] names (the composed
/// rule, [`unary_vjp_composed`](crate::composed::elementwise::unary_vjp_composed), spells that out), so the result is the same, bit for bit.
pub fn unary_vjp_saved<B: Ops>(b: &B, op: UnaryOp, saved: Option<&B::T>, g: &B::T) -> Result<Option<B::T>> {
    match (op, saved) {
        (UnaryOp::Neg, _) => Ok(Some(b.neg(g)?)),
        (UnaryOp::Sign, _) => Ok(None),
        (_, Some(v)) => b.unary_adjoint(op, v, v, g),
        (_, None) => Err(OpError::Device(format!("internal: the adjoint of {op:?} was run without its saved value"))),
    }
}

/// Tangent of `y = op(x)` for the tangent `dx` (None: identically zero).
pub fn unary_jvp<B: Ops>(b: &B, op: UnaryOp, x: &B::T, y: &B::T, dx: &B::T) -> Result<Option<B::T>> {
    // Every unary derivative is pointwise: the VJP rule with the tangent as adjoint.
    unary_vjp(b, op, x, y, dx)
}

/// Broadcasts a tangent up to the result's shape when it came from a one-element operand.
fn to_shape<B: Ops>(b: &B, t: B::T, y: &B::T) -> Result<B::T> {
    if t.shape() == y.shape() { Ok(t) } else { b.add(&b.zeros_like(y)?, &t) }
}

/// Tangent of `y = a op c` (not for comparisons) for the tangents `da`, `dc` (None: zero).
pub fn binary_jvp<B: Ops>(
    b: &B,
    op: BinaryOp,
    a: &B::T,
    c: &B::T,
    y: &B::T,
    da: Option<&B::T>,
    dc: Option<&B::T>,
) -> Result<Option<B::T>> {
    if (da.is_none() && dc.is_none()) || op.is_comparison() {
        return Ok(None);
    }
    let dt = y.dtype();
    let zero = b.scalar(0.0, dt)?;
    // Sum of the terms present: `part(x, dx)` is the contribution of one operand.
    let sum = |ta: Option<B::T>, tc: Option<B::T>| -> Result<Option<B::T>> {
        Ok(match (ta, tc) {
            (Some(x), Some(z)) => Some(b.add(&x, &z)?),
            (x, z) => x.or(z),
        })
    };
    let t = match op {
        BinaryOp::Add => sum(da.cloned(), dc.cloned())?,
        BinaryOp::Sub => sum(da.cloned(), dc.map(|d| b.neg(d)).transpose()?)?,
        BinaryOp::Mul => sum(da.map(|d| b.mul(d, c)).transpose()?, dc.map(|d| b.mul(a, d)).transpose()?)?,
        BinaryOp::Div => {
            sum(da.map(|d| b.div(d, c)).transpose()?, dc.map(|d| b.neg(&b.div(&b.mul(y, d)?, c)?)).transpose()?)?
        }
        BinaryOp::Pow => {
            let one = b.scalar(1.0, dt)?;
            sum(
                da.map(|d| -> Result<B::T> {
                    let p = b.binary(BinaryOp::Pow, a, &b.sub(c, &one)?)?;
                    b.mul(d, &b.mul(c, &p)?)
                })
                .transpose()?,
                dc.map(|d| b.mul(d, &b.mul(y, &b.unary(UnaryOp::Log, a)?)?)).transpose()?,
            )?
        }
        BinaryOp::Min | BinaryOp::Max => {
            // The left operand wins ties, as in the VJP.
            let cmp = if op == BinaryOp::Min { BinaryOp::Le } else { BinaryOp::Ge };
            let left = b.binary(cmp, a, c)?;
            Some(b.select(&left, da.unwrap_or(&zero), dc.unwrap_or(&zero))?)
        }
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq => None,
    };
    t.map(|t| to_shape(b, t, y)).transpose()
}

/// Tangent of `y = select(mask, a, c)`.
pub fn select_jvp<B: Ops>(b: &B, mask: &B::T, y: &B::T, da: Option<&B::T>, dc: Option<&B::T>) -> Result<Option<B::T>> {
    if da.is_none() && dc.is_none() {
        return Ok(None);
    }
    let zero = b.scalar(0.0, y.dtype())?;
    let t = b.select(mask, da.unwrap_or(&zero), dc.unwrap_or(&zero))?;
    Ok(Some(to_shape(b, t, y)?))
}

/// Adjoints of `a` and `c` for `y = combine(op, a, c)`: the partials times the adjoint, the
/// needed ones only (`need` as in [`BinarySaved::new`]).
pub fn combine_vjp<B: Ops>(
    b: &B,
    op: HistOp,
    a: &B::T,
    c: &B::T,
    need: [bool; 2],
    g: &B::T,
) -> Result<OptionalPair<B::T>> {
    let part = |side: Operand, shape: &[usize]| -> Result<B::T> {
        unbroadcast(b, &b.mul(&b.combine_partial(op, side, a, c)?, g)?, shape)
    };
    Ok((
        need[0].then(|| part(Operand::Left, a.shape())).transpose()?,
        need[1].then(|| part(Operand::Right, c.shape())).transpose()?,
    ))
}

/// Tangent of `y = combine(op, a, c)` (the lifted operator).
pub fn combine_jvp<B: Ops>(
    b: &B,
    op: HistOp,
    a: &B::T,
    c: &B::T,
    y: &B::T,
    da: Option<&B::T>,
    dc: Option<&B::T>,
) -> Result<Option<B::T>> {
    let ta = da.map(|d| b.mul(&b.combine_partial(op, Operand::Left, a, c)?, d)).transpose()?;
    let tc = dc.map(|d| b.mul(&b.combine_partial(op, Operand::Right, a, c)?, d)).transpose()?;
    let t = match (ta, tc) {
        (Some(x), Some(z)) => Some(b.add(&x, &z)?),
        (x, z) => x.or(z),
    };
    t.map(|t| to_shape(b, t, y)).transpose()
}

/// The special operator whose partials have known derivatives, or an error naming `op`.
fn second_order_kind(op: HistOp) -> Result<HistOp> {
    match op {
        HistOp::General(g) => general::special_of(g).ok_or_else(|| {
            OpError::NotDifferentiable(format!(
                "the partials of general operator {} (second derivatives are not provided)",
                g.name
            ))
        }),
        op => Ok(op),
    }
}

/// Adjoints of two operands, None where identically zero.
pub type OptionalPair<T> = (Option<T>, Option<T>);

/// Adjoints of `a` and `c` for `y = combine_partial(op, side, a, c)`: only `*` has non-zero
/// ones (d1(a, c) = c, d2(a, c) = a); the partials of +, min and max are piecewise constant.
pub fn combine_partial_vjp<B: Ops>(
    b: &B,
    op: HistOp,
    side: Operand,
    a: &B::T,
    c: &B::T,
    g: &B::T,
) -> Result<OptionalPair<B::T>> {
    Ok(match (second_order_kind(op)?, side) {
        (HistOp::Mul, Operand::Left) => (None, Some(unbroadcast(b, g, c.shape())?)),
        (HistOp::Mul, Operand::Right) => (Some(unbroadcast(b, g, a.shape())?), None),
        _ => (None, None),
    })
}

/// Tangent of `y = combine_partial(op, side, a, c)` (see [`combine_partial_vjp`]).
pub fn combine_partial_jvp<B: Ops>(
    b: &B,
    op: HistOp,
    side: Operand,
    y: &B::T,
    da: Option<&B::T>,
    dc: Option<&B::T>,
) -> Result<Option<B::T>> {
    let t = match (second_order_kind(op)?, side) {
        (HistOp::Mul, Operand::Left) => dc.cloned(),
        (HistOp::Mul, Operand::Right) => da.cloned(),
        _ => None,
    };
    t.map(|t| to_shape(b, t, y)).transpose()
}

/// What the VJP of `y = a op c` keeps from the forward sweep: which adjoints are needed (an
/// operand that depends on no variable needs none), the primal values those adjoints read and
/// no others, and the shape of an operand that was broadcast (one element). Reverse engines
/// build it when they record the op; a constant operand's adjoint is then never computed (nor,
/// for a broadcast one, summed, a reduction that would end a fused region of the staged device),
/// and a value no needed adjoint reads is not held by the tape.
pub struct BinarySaved<T> {
    op: BinaryOp,
    need: [bool; 2],
    a: Option<T>,
    c: Option<T>,
    y: Option<T>,
    /// The operands' shapes where they differ from the result's (broadcast operands).
    a_broadcast: Option<Vec<usize>>,
    c_broadcast: Option<Vec<usize>>,
}

impl<T: TensorMeta + Clone> BinarySaved<T> {
    /// `need[0]`, `need[1]`: whether the adjoints of `a` and `c` are wanted.
    pub fn new(op: BinaryOp, a: &T, c: &T, y: &T, need: [bool; 2]) -> BinarySaved<T> {
        let [na, nc] = need;
        // What each adjoint reads: d/da and d/dc of the rules in `binary_vjp`.
        let (read_a, read_c, read_y) = match op {
            BinaryOp::Add | BinaryOp::Sub => (false, false, false),
            BinaryOp::Mul => (nc, na, false),
            BinaryOp::Div => (false, na || nc, nc),
            BinaryOp::Pow => (na || nc, na, nc),
            BinaryOp::Min | BinaryOp::Max => (na || nc, na || nc, false),
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq => (false, false, false),
        };
        let keep = |read: bool, v: &T| read.then(|| v.clone());
        let broadcast = |wanted: bool, v: &T| (wanted && v.shape() != y.shape()).then(|| v.shape().to_vec());
        BinarySaved {
            op,
            need,
            a: keep(read_a, a),
            c: keep(read_c, c),
            y: keep(read_y, y),
            a_broadcast: broadcast(na, a),
            c_broadcast: broadcast(nc, c),
        }
    }
}

/// A value a rule reads, which its `*Saved` must hold.
fn saved<'a, T>(v: &'a Option<T>, what: &str) -> Result<&'a T> {
    v.as_ref().ok_or_else(|| OpError::Device(format!("internal: a binary rule read {what}, which it did not save")))
}

/// Adjoints of `a` and `c` for `y = a op c` (not for comparisons), the needed ones only.
pub fn binary_vjp<B: Ops>(b: &B, s: &BinarySaved<B::T>, g: &B::T) -> Result<OptionalPair<B::T>> {
    let [na, nc] = s.need;
    let (a, c, y) = (|| saved(&s.a, "a"), || saved(&s.c, "c"), || saved(&s.y, "y"));
    // Built only by the rules that need it (an allocation per call adds up on small tensors).
    let zero = || b.scalar(0.0, g.dtype());
    let when = |need: bool, f: &dyn Fn() -> Result<B::T>| need.then(f).transpose();
    let (ga, gc) = match s.op {
        BinaryOp::Add => (na.then(|| g.clone()), nc.then(|| g.clone())),
        BinaryOp::Sub => (na.then(|| g.clone()), when(nc, &|| b.neg(g))?),
        BinaryOp::Mul => (when(na, &|| b.mul(g, c()?))?, when(nc, &|| b.mul(g, a()?))?),
        BinaryOp::Div => (when(na, &|| b.div(g, c()?))?, when(nc, &|| b.neg(&b.div(&b.mul(g, y()?)?, c()?)?))?),
        BinaryOp::Pow => {
            // d/da a^c = c a^(c-1); d/dc a^c = a^c ln a.
            let da = || -> Result<B::T> {
                let one = b.scalar(1.0, g.dtype())?;
                b.mul(c()?, &b.binary(BinaryOp::Pow, a()?, &b.sub(c()?, &one)?)?)
            };
            let dc = || b.mul(y()?, &b.unary(UnaryOp::Log, a()?)?);
            (when(na, &|| b.mul(g, &da()?))?, when(nc, &|| b.mul(g, &dc()?))?)
        }
        // Asymmetric partials: the left operand wins ties (d1 = [a <= c], d2 = [c < a]).
        BinaryOp::Min | BinaryOp::Max => {
            let cmp = if s.op == BinaryOp::Min { BinaryOp::Le } else { BinaryOp::Ge };
            let (left, zero) = (b.binary(cmp, a()?, c()?)?, zero()?);
            (when(na, &|| b.select(&left, g, &zero))?, when(nc, &|| b.select(&left, &zero, g))?)
        }
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq => {
            (when(na, &|| b.mul(g, &zero()?))?, when(nc, &|| b.mul(g, &zero()?))?)
        }
    };
    Ok((unbroadcast_to(b, ga, &s.a_broadcast)?, unbroadcast_to(b, gc, &s.c_broadcast)?))
}

/// Sums an adjoint down to a broadcast operand's shape (`Some`), or leaves it.
fn unbroadcast_to<B: Ops>(b: &B, g: Option<B::T>, broadcast: &Option<Vec<usize>>) -> Result<Option<B::T>> {
    match (g, broadcast) {
        (Some(g), Some(shape)) => Ok(Some(unbroadcast(b, &g, shape)?)),
        (g, _) => Ok(g),
    }
}

/// Adjoints of `a` and `c` for `y = select(mask, a, c)`, the needed ones only (`need` as in
/// [`BinarySaved::new`]).
pub fn select_vjp<B: Ops>(
    b: &B,
    mask: &B::T,
    a_shape: &[usize],
    c_shape: &[usize],
    need: [bool; 2],
    g: &B::T,
) -> Result<OptionalPair<B::T>> {
    let zero = b.scalar(0.0, g.dtype())?;
    let ga = need[0].then(|| b.select(mask, g, &zero)).transpose()?;
    let gc = need[1].then(|| b.select(mask, &zero, g)).transpose()?;
    let sum = |g: Option<B::T>, shape: &[usize]| g.map(|g| unbroadcast(b, &g, shape)).transpose();
    Ok((sum(ga, a_shape)?, sum(gc, c_shape)?))
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::{Cpu, DType, Ops, Reverse};

    use super::*;

    /// Central differences of a scalar function of one scalar, in f64.
    fn fd(f: impl Fn(f64) -> f64, x: f64) -> f64 {
        let h = 1e-6 * x.abs().max(1.0);
        (f(x + h) - f(x - h)) / (2.0 * h)
    }

    /// The CPU device's fused adjoint kernel must round exactly like the composed rule.
    #[test]
    fn fused_unary_adjoint_equals_the_composed_rule_bit_for_bit() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let xs = [0.3, 1.7, 0.01, 2.5, 0.9, 12.0, 0.5];
        let gs = [1.0, -0.7, 3.25, 0.001, -2.0, 0.4, 1e3];
        for dt in [DType::F32, DType::F64] {
            for op in UnaryOp::ALL {
                let x = cpu.tensor(&xs, &[xs.len()], dt).unwrap();
                let g = cpu.tensor(&gs, &[gs.len()], dt).unwrap();
                let y = cpu.unary(op, &x).unwrap();
                let fused = cpu.unary_adjoint(op, &x, &y, &g).unwrap();
                let composed = crate::composed::elementwise::unary_vjp_composed(&cpu, op, &x, &y, &g).unwrap();
                match (fused, composed) {
                    (None, None) => assert_eq!(op, UnaryOp::Sign),
                    (Some(f), Some(c)) => {
                        let (f, c) = (cpu.to_vec(&f).unwrap(), cpu.to_vec(&c).unwrap());
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&f), bits(&c), "{op:?} {dt}: {f:?} vs {c:?}");
                    }
                    (f, c) => panic!("{op:?} {dt}: fused {} vs composed {}", f.is_some(), c.is_some()),
                }
            }
        }
    }

    #[test]
    fn every_unary_rule_matches_finite_differences() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let xs = [0.3, 1.7, 2.5];
        // Sign is piecewise constant: no adjoint (tested with its rule's None elsewhere).
        for op in UnaryOp::ALL.into_iter().filter(|&op| op != UnaryOp::Sign) {
            let r = Reverse::new(cpu.clone());
            let x = r.var(cpu.tensor(&xs, &[3], DType::F64).unwrap());
            let y = r.unary(op, &x).unwrap();
            let g = r.backward(&y, cpu.full(&[3], 1.0, DType::F64).unwrap()).unwrap();
            let got = cpu.to_vec(g.get(&x).unwrap()).unwrap();
            for (j, &x0) in xs.iter().enumerate() {
                let f = |t: f64| {
                    let v = cpu.tensor(&[t], &[1], DType::F64).unwrap();
                    cpu.to_vec(&cpu.unary(op, &v).unwrap()).unwrap()[0]
                };
                let want = fd(f, x0);
                assert!((got[j] - want).abs() < 1e-6 * want.abs().max(1.0), "{op:?} at {x0}: {} vs {want}", got[j]);
            }
        }
    }

    #[test]
    fn binary_rules_match_finite_differences_and_broadcast_scalars() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let (av, cv) = ([0.5, 2.0, 3.0], [1.5, 0.7, 3.5]);
        for op in
            [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min, BinaryOp::Max]
        {
            let r = Reverse::new(cpu.clone());
            let a = r.var(cpu.tensor(&av, &[3], DType::F64).unwrap());
            let c = r.var(cpu.tensor(&cv, &[3], DType::F64).unwrap());
            let y = r.binary(op, &a, &c).unwrap();
            let g = r.backward(&y, cpu.full(&[3], 1.0, DType::F64).unwrap()).unwrap();
            let (ga, gc) = (cpu.to_vec(g.get(&a).unwrap()).unwrap(), cpu.to_vec(g.get(&c).unwrap()).unwrap());
            let f = |x: f64, z: f64| {
                let x = cpu.tensor(&[x], &[1], DType::F64).unwrap();
                let z = cpu.tensor(&[z], &[1], DType::F64).unwrap();
                cpu.to_vec(&cpu.binary(op, &x, &z).unwrap()).unwrap()[0]
            };
            for j in 0..3 {
                let wa = fd(|t| f(t, cv[j]), av[j]);
                let wc = fd(|t| f(av[j], t), cv[j]);
                assert!((ga[j] - wa).abs() < 1e-6, "{op:?} d/da at {j}: {} vs {wa}", ga[j]);
                assert!((gc[j] - wc).abs() < 1e-6, "{op:?} d/dc at {j}: {} vs {wc}", gc[j]);
            }
        }
        // y = a * s with s one element: ds = sum(a).
        let r = Reverse::new(cpu.clone());
        let a = r.var(cpu.tensor(&av, &[3], DType::F64).unwrap());
        let s = r.var(cpu.tensor(&[2.0], &[1], DType::F64).unwrap());
        let y = r.mul(&a, &s).unwrap();
        let g = r.backward(&y, cpu.full(&[3], 1.0, DType::F64).unwrap()).unwrap();
        assert_eq!(cpu.to_vec(g.get(&s).unwrap()).unwrap(), vec![5.5]);
        assert_eq!(cpu.to_vec(g.get(&a).unwrap()).unwrap(), vec![2.0, 2.0, 2.0]);
    }

    #[test]
    fn min_and_max_give_a_tie_to_the_left_operand_only() {
        let cpu = Cpu::new(Some(1)).unwrap();
        for op in [BinaryOp::Min, BinaryOp::Max] {
            let r = Reverse::new(cpu.clone());
            let a = r.var(cpu.tensor(&[1.0], &[1], DType::F32).unwrap());
            let c = r.var(cpu.tensor(&[1.0], &[1], DType::F32).unwrap());
            let y = r.binary(op, &a, &c).unwrap();
            let g = r.backward(&y, cpu.full(&[1], 3.0, DType::F32).unwrap()).unwrap();
            assert_eq!(cpu.to_vec(g.get(&a).unwrap()).unwrap(), vec![3.0]);
            assert_eq!(cpu.to_vec(g.get(&c).unwrap()).unwrap(), vec![0.0]);
        }
    }

    type Fwd = crate::Forward<Cpu>;
    type Rev = Reverse<Cpu>;

    /// The dot-product test <w, J v> == <J^T w, v> between the forward and reverse engines for
    /// a function of two inputs, in f64.
    fn dot_product_test(
        name: &str,
        run_fwd: impl Fn(&Fwd, &crate::Dual<Cpu>, &crate::Dual<Cpu>) -> crate::Dual<Cpu>,
        run_rev: impl Fn(&Rev, &crate::Var<Cpu>, &crate::Var<Cpu>) -> crate::Var<Cpu>,
    ) {
        let cpu = Cpu::new(Some(1)).unwrap();
        let dt = DType::F64;
        let (a0, c0) = ([0.5, 2.0, 3.0, 1.0], [1.5, 0.7, 3.5, 1.0]);
        let (va, vc) = ([1.0, -0.5, 0.25, 2.0], [0.3, 0.8, -1.2, 0.6]);
        let t = |x: &[f64]| cpu.tensor(x, &[4], dt).unwrap();
        let fw = crate::Forward::new(cpu.clone());
        let y = run_fwd(&fw, &fw.dual(t(&a0), t(&va)).unwrap(), &fw.dual(t(&c0), t(&vc)).unwrap());
        let jv = cpu.to_vec(&fw.tangent(&y).unwrap()).unwrap();
        let w: Vec<f64> = (0..jv.len()).map(|j| 1.0 - 0.3 * j as f64).collect();
        let r = Reverse::new(cpu.clone());
        let (a, c) = (r.var(t(&a0)), r.var(t(&c0)));
        let yr = run_rev(&r, &a, &c);
        assert_eq!(cpu.to_vec(yr.value()).unwrap(), cpu.to_vec(y.value()).unwrap(), "{name}");
        let g = r.backward(&yr, cpu.tensor(&w, &[w.len()], dt).unwrap()).unwrap();
        let ga = cpu.to_vec(&g.get_or_zeros(&cpu, &a).unwrap()).unwrap();
        let gc = cpu.to_vec(&g.get_or_zeros(&cpu, &c).unwrap()).unwrap();
        let lhs: f64 = w.iter().zip(&jv).map(|(x, y)| x * y).sum();
        let rhs: f64 =
            ga.iter().zip(&va).map(|(x, y)| x * y).sum::<f64>() + gc.iter().zip(&vc).map(|(x, y)| x * y).sum::<f64>();
        assert!((lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0), "{name}: {lhs} vs {rhs}");
        assert!(lhs != 0.0, "{name}: the test must exercise a non-zero derivative");
    }

    /// Broadcasting of a one-element operand, select, gather with repeats and an out-of-range
    /// read, and scatter.
    fn composite<O: Ops>(o: &O, a: &O::T, c: &O::T) -> Result<O::T> {
        let s = o.reshape(&o.sum(a)?, &[1])?;
        let mask = o.binary(BinaryOp::Lt, a, c)?;
        let y = o.select(&mask, &o.mul(c, &s)?, a)?;
        let g = o.gather(&y, &o.index(&[3, 0, 3, -1])?, crate::OutOfRange::Fill(0.0))?;
        let written = o.mul(&o.full(&[2], 1.0, DType::F64)?, &o.sum(&g)?)?;
        o.scatter(&y, &o.index(&[1, 2])?, &written)
    }

    #[test]
    fn forward_rules_pass_the_dot_product_test_against_reverse_rules() {
        for op in
            [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Min, BinaryOp::Max]
        {
            dot_product_test(
                &format!("{op:?}"),
                |f, a, c| f.binary(op, a, c).unwrap(),
                |r, a, c| r.binary(op, a, c).unwrap(),
            );
        }
        for unary in [UnaryOp::Exp, UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Tanh, UnaryOp::Abs] {
            dot_product_test(
                &format!("{unary:?}"),
                |f, a, c| f.mul(&f.unary(unary, a).unwrap(), c).unwrap(),
                |r, a, c| r.mul(&r.unary(unary, a).unwrap(), c).unwrap(),
            );
        }
        for op in HistOp::named() {
            dot_product_test(
                &format!("combine {op}"),
                |f, a, c| f.combine(op, a, c).unwrap(),
                |r, a, c| r.combine(op, a, c).unwrap(),
            );
        }
        dot_product_test(
            "broadcast, select, gather, scatter",
            |f, a, c| composite(f, a, c).unwrap(),
            |r, a, c| composite(r, a, c).unwrap(),
        );
    }
}
