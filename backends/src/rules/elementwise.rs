//! VJP rules of the elementwise ops. A one-element operand broadcast against a larger one gets
//! the sum of the adjoint. Comparisons and `sign` are piecewise constant: zero derivative.

use crate::ops::TensorMeta;
use crate::{BinaryOp, Ops, Result, UnaryOp};

/// Sums `g` down to `shape` when the operand of that shape was broadcast.
pub fn unbroadcast<B: Ops>(b: &B, g: &B::T, shape: &[usize]) -> Result<B::T> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let s = b.sum(g)?;
    b.reshape(&s, shape)
}

/// Adjoint of `x` for `y = op(x)`.
pub fn unary_vjp<B: Ops>(b: &B, op: UnaryOp, x: &B::T, y: &B::T, g: &B::T) -> Result<Option<B::T>> {
    let dt = x.dtype();
    let gx = match op {
        UnaryOp::Neg => b.neg(g)?,
        UnaryOp::Exp => b.mul(g, y)?,
        UnaryOp::Log => b.div(g, x)?,
        UnaryOp::Log1p => {
            let one = b.scalar(1.0, dt)?;
            b.div(g, &b.add(x, &one)?)?
        }
        UnaryOp::Sin => b.mul(g, &b.unary(UnaryOp::Cos, x)?)?,
        UnaryOp::Cos => b.neg(&b.mul(g, &b.unary(UnaryOp::Sin, x)?)?)?,
        UnaryOp::Sqrt => b.div(&b.scale(g, 0.5)?, y)?,
        UnaryOp::Tanh => {
            let one = b.scalar(1.0, dt)?;
            b.mul(g, &b.sub(&one, &b.unary(UnaryOp::Square, y)?)?)?
        }
        UnaryOp::Sigmoid => {
            let one = b.scalar(1.0, dt)?;
            b.mul(g, &b.mul(y, &b.sub(&one, y)?)?)?
        }
        UnaryOp::Abs => b.mul(g, &b.unary(UnaryOp::Sign, x)?)?,
        UnaryOp::Sign => return Ok(None),
        UnaryOp::Recip => b.neg(&b.mul(g, &b.unary(UnaryOp::Square, y)?)?)?,
        UnaryOp::Square => b.mul(&b.scale(g, 2.0)?, x)?,
    };
    Ok(Some(gx))
}

/// Adjoints of `a` and `c` for `y = a op c` (not for comparisons).
pub fn binary_vjp<B: Ops>(
    b: &B,
    op: BinaryOp,
    a: &B::T,
    c: &B::T,
    y: &B::T,
    g: &B::T,
) -> Result<(B::T, B::T)> {
    let zero = b.scalar(0.0, g.dtype())?;
    let (ga, gc) = match op {
        BinaryOp::Add => (g.clone(), g.clone()),
        BinaryOp::Sub => (g.clone(), b.neg(g)?),
        BinaryOp::Mul => (b.mul(g, c)?, b.mul(g, a)?),
        BinaryOp::Div => (b.div(g, c)?, b.neg(&b.div(&b.mul(g, y)?, c)?)?),
        BinaryOp::Pow => {
            // d/da a^c = c a^(c-1); d/dc a^c = a^c ln a.
            let one = b.scalar(1.0, g.dtype())?;
            let da = b.mul(c, &b.binary(BinaryOp::Pow, a, &b.sub(c, &one)?)?)?;
            let dc = b.mul(y, &b.unary(UnaryOp::Log, a)?)?;
            (b.mul(g, &da)?, b.mul(g, &dc)?)
        }
        // Asymmetric partials: the left operand wins ties (d1 = [a <= c], d2 = [c < a]).
        BinaryOp::Min => {
            let left = b.binary(BinaryOp::Le, a, c)?;
            (b.select(&left, g, &zero)?, b.select(&left, &zero, g)?)
        }
        BinaryOp::Max => {
            let left = b.binary(BinaryOp::Ge, a, c)?;
            (b.select(&left, g, &zero)?, b.select(&left, &zero, g)?)
        }
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq => {
            (b.mul(g, &zero)?, b.mul(g, &zero)?)
        }
    };
    Ok((
        unbroadcast(b, &ga, a.shape())?,
        unbroadcast(b, &gc, c.shape())?,
    ))
}

/// Adjoints of `a` and `c` for `y = select(mask, a, c)`.
pub fn select_vjp<B: Ops>(
    b: &B,
    mask: &B::T,
    a_shape: &[usize],
    c_shape: &[usize],
    g: &B::T,
) -> Result<(B::T, B::T)> {
    let zero = b.scalar(0.0, g.dtype())?;
    let ga = b.select(mask, g, &zero)?;
    let gc = b.select(mask, &zero, g)?;
    Ok((unbroadcast(b, &ga, a_shape)?, unbroadcast(b, &gc, c_shape)?))
}

#[cfg(test)]
mod tests {
    use crate::{Cpu, DType, Ops, Reverse};

    use super::*;

    /// Central differences of a scalar function of one scalar, in f64.
    fn fd(f: impl Fn(f64) -> f64, x: f64) -> f64 {
        let h = 1e-6 * x.abs().max(1.0);
        (f(x + h) - f(x - h)) / (2.0 * h)
    }

    #[test]
    fn every_unary_rule_matches_finite_differences() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let ops = [
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
            UnaryOp::Recip,
            UnaryOp::Square,
        ];
        let xs = [0.3, 1.7, 2.5];
        for op in ops {
            let r = Reverse::new(cpu.clone());
            let x = r.var(cpu.tensor(&xs, &[3], DType::F64).unwrap());
            let y = r.unary(op, &x).unwrap();
            let g = r
                .backward(&y, cpu.full(&[3], 1.0, DType::F64).unwrap())
                .unwrap();
            let got = cpu.to_vec(g.get(&x).unwrap()).unwrap();
            for (j, &x0) in xs.iter().enumerate() {
                let f = |t: f64| {
                    let v = cpu.tensor(&[t], &[1], DType::F64).unwrap();
                    cpu.to_vec(&cpu.unary(op, &v).unwrap()).unwrap()[0]
                };
                let want = fd(f, x0);
                assert!(
                    (got[j] - want).abs() < 1e-6 * want.abs().max(1.0),
                    "{op:?} at {x0}: {} vs {want}",
                    got[j]
                );
            }
        }
    }

    #[test]
    fn binary_rules_match_finite_differences_and_broadcast_scalars() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let (av, cv) = ([0.5, 2.0, 3.0], [1.5, 0.7, 3.5]);
        for op in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Pow,
            BinaryOp::Min,
            BinaryOp::Max,
        ] {
            let r = Reverse::new(cpu.clone());
            let a = r.var(cpu.tensor(&av, &[3], DType::F64).unwrap());
            let c = r.var(cpu.tensor(&cv, &[3], DType::F64).unwrap());
            let y = r.binary(op, &a, &c).unwrap();
            let g = r
                .backward(&y, cpu.full(&[3], 1.0, DType::F64).unwrap())
                .unwrap();
            let (ga, gc) = (
                cpu.to_vec(g.get(&a).unwrap()).unwrap(),
                cpu.to_vec(g.get(&c).unwrap()).unwrap(),
            );
            let f = |x: f64, z: f64| {
                let x = cpu.tensor(&[x], &[1], DType::F64).unwrap();
                let z = cpu.tensor(&[z], &[1], DType::F64).unwrap();
                cpu.to_vec(&cpu.binary(op, &x, &z).unwrap()).unwrap()[0]
            };
            for j in 0..3 {
                let wa = fd(|t| f(t, cv[j]), av[j]);
                let wc = fd(|t| f(av[j], t), cv[j]);
                assert!(
                    (ga[j] - wa).abs() < 1e-6,
                    "{op:?} d/da at {j}: {} vs {wa}",
                    ga[j]
                );
                assert!(
                    (gc[j] - wc).abs() < 1e-6,
                    "{op:?} d/dc at {j}: {} vs {wc}",
                    gc[j]
                );
            }
        }
        // y = a * s with s one element: ds = sum(a).
        let r = Reverse::new(cpu.clone());
        let a = r.var(cpu.tensor(&av, &[3], DType::F64).unwrap());
        let s = r.var(cpu.tensor(&[2.0], &[1], DType::F64).unwrap());
        let y = r.mul(&a, &s).unwrap();
        let g = r
            .backward(&y, cpu.full(&[3], 1.0, DType::F64).unwrap())
            .unwrap();
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
            let g = r
                .backward(&y, cpu.full(&[1], 3.0, DType::F32).unwrap())
                .unwrap();
            assert_eq!(cpu.to_vec(g.get(&a).unwrap()).unwrap(), vec![3.0]);
            assert_eq!(cpu.to_vec(g.get(&c).unwrap()).unwrap(), vec![0.0]);
        }
    }
}
