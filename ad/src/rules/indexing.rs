//! VJP rules of gather and scatter. The adjoint of a gather is a `+` histogram of the output
//! adjoint into the source's shape (out-of-range reads got a fill value, which has no source, so
//! they contribute nothing). Scatter's rule assumes each in-range destination is written at most
//! once (the rules only scatter unique positions): the overwritten dest entries get no adjoint.

use crate::ops::{OutOfRange, TensorMeta};
use crate::{Ops, Result};

/// Adjoint of `src` for `y = gather(src, idx)`: the rule kernel `gather_adjoint`.
pub fn gather_vjp<B: Ops>(b: &B, src: &B::T, idx: &B::I, g: &B::T) -> Result<B::T> {
    b.gather_adjoint(src, idx, g)
}

/// Tangent of `y = gather(src, idx)`: the gather of the tangent (0 where the read was filled).
pub fn gather_jvp<B: Ops>(b: &B, idx: &B::I, src_dot: &B::T) -> Result<B::T> {
    b.gather(src_dot, idx, OutOfRange::Fill(0.0))
}

/// Tangent of `y = scatter(dest, idx, vals)`: the scatter of the tangents.
pub fn scatter_jvp<B: Ops>(
    b: &B,
    dest: &B::T,
    idx: &B::I,
    vals: &B::T,
    dest_dot: Option<&B::T>,
    vals_dot: Option<&B::T>,
) -> Result<B::T> {
    let dd = dest_dot.cloned().map_or_else(|| b.zeros_like(dest), Ok)?;
    let dv = vals_dot.cloned().map_or_else(|| b.zeros_like(vals), Ok)?;
    b.scatter(&dd, idx, &dv)
}

/// Adjoints of `dest` and `vals` for `y = scatter(dest, idx, vals)`.
pub fn scatter_vjp<B: Ops>(b: &B, idx: &B::I, vals: &B::T, g: &B::T) -> Result<(B::T, B::T)> {
    let zeros = b.zeros_like(vals)?;
    let dest_bar = b.scatter(g, idx, &zeros)?;
    let vals_bar = b.gather(g, idx, OutOfRange::Fill(0.0))?;
    let vals_bar = b.reshape(&vals_bar, vals.shape())?;
    Ok((dest_bar, vals_bar))
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::{Cpu, DType, OpError, Reverse};

    use super::*;

    #[test]
    fn gather_adjoint_accumulates_repeated_reads() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let r = Reverse::new(cpu.clone());
        let src = r.var(cpu.tensor(&[10.0, 20.0, 30.0], &[3], DType::F64).unwrap());
        let idx = cpu.index(&[2, 0, 2, 2]).unwrap();
        let y = r.gather(&src, &idx, OutOfRange::Error).unwrap();
        assert_eq!(cpu.to_vec(y.value()).unwrap(), vec![30.0, 10.0, 30.0, 30.0]);
        let g = r.backward(&y, cpu.tensor(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F64).unwrap()).unwrap();
        assert_eq!(cpu.to_vec(g.get(&src).unwrap()).unwrap(), vec![2.0, 0.0, 8.0]);
    }

    #[test]
    fn strict_gather_names_the_bad_index_and_its_position() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let src = cpu.tensor(&[1.0, 2.0], &[2], DType::F32).unwrap();
        let idx = cpu.index(&[0, 1, 2]).unwrap();
        let err = cpu.gather(&src, &idx, OutOfRange::Error).unwrap_err();
        assert_eq!(err, OpError::IndexOutOfRange { op: "gather", index: 2, position: 2, len: 2 });
        let filled = cpu.gather(&src, &idx, OutOfRange::Fill(-7.0)).unwrap();
        assert_eq!(cpu.to_vec(&filled).unwrap(), vec![1.0, 2.0, -7.0]);
    }

    #[test]
    fn scatter_adjoint_skips_overwritten_dest_entries() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let r = Reverse::new(cpu.clone());
        let dest = r.var(cpu.tensor(&[1.0, 2.0, 3.0], &[3], DType::F64).unwrap());
        let vals = r.var(cpu.tensor(&[5.0, 6.0], &[2], DType::F64).unwrap());
        let idx = cpu.index(&[2, -1]).unwrap();
        let y = r.scatter(&dest, &idx, &vals).unwrap();
        assert_eq!(cpu.to_vec(y.value()).unwrap(), vec![1.0, 2.0, 5.0]);
        let g = r.backward(&y, cpu.tensor(&[1.0, 2.0, 3.0], &[3], DType::F64).unwrap()).unwrap();
        assert_eq!(cpu.to_vec(g.get(&dest).unwrap()).unwrap(), vec![1.0, 2.0, 0.0]);
        assert_eq!(cpu.to_vec(g.get(&vals).unwrap()).unwrap(), vec![3.0, 0.0]);
    }

    #[test]
    fn stack_and_unstack_are_each_others_adjoints_in_both_modes_and_nested() {
        use crate::{Forward, UnaryOp};
        let cpu = Cpu::new(Some(1)).unwrap();
        let t = |v: &[f64]| cpu.tensor(v, &[2], DType::F64).unwrap();
        // f(a, b, c) = sum(w * sin(stack(a, b, c))^2) with a constant in the middle.
        let w = cpu.tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], DType::F64).unwrap();
        let f = |o: &Reverse<Forward<Cpu>>, parts: &[<Reverse<Forward<Cpu>> as TensorOps>::T]| {
            let s = o.stack(parts)?;
            let wl = o.lift(Forward::new(cpu.clone()).lift(w.clone()));
            o.sum(&o.mul(&wl, &o.unary(UnaryOp::Square, &o.unary(UnaryOp::Sin, &s)?)?)?)
        };
        let (a, b, c) = ([0.3, -0.8], [1.1, 0.2], [0.5, -0.4]);
        let (da, dc) = ([1.0, 0.5], [-0.25, 2.0]);
        let fw = Forward::new(cpu.clone());
        let r = Reverse::new(fw.clone());
        let va = r.var(fw.dual(t(&a), t(&da)).unwrap());
        let vb = r.lift(fw.lift(t(&b)));
        let vc = r.var(fw.dual(t(&c), t(&dc)).unwrap());
        let y = f(&r, &[va.clone(), vb, vc.clone()]).unwrap();
        assert_eq!(fw.primal(y.value()).shape(), &[1]);
        let g = r.backward(&y, fw.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
        // d/dx w sin(x)^2 = w sin(2x); its derivative along d is 2 w cos(2x) d.
        for (v, x, d, rows) in [(&va, a, da, [1.0, 2.0]), (&vc, c, dc, [5.0, 6.0])] {
            let gv = g.get(v).unwrap();
            let (grad, hv) = (cpu.to_vec(fw.primal(gv)).unwrap(), cpu.to_vec(&fw.tangent(gv).unwrap()).unwrap());
            for j in 0..2 {
                assert!((grad[j] - rows[j] * (2.0 * x[j]).sin()).abs() < 1e-15, "{grad:?}");
                assert!((hv[j] - 2.0 * rows[j] * (2.0 * x[j]).cos() * d[j]).abs() < 1e-14, "{hv:?}");
            }
        }
        // Forward mode: the stack's tangent has zeros where a part has none.
        let s = fw.stack(&[fw.dual(t(&a), t(&da)).unwrap(), fw.lift(t(&b))]).unwrap();
        assert_eq!(cpu.to_vec(&fw.tangent(&s).unwrap()).unwrap(), vec![1.0, 0.5, 0.0, 0.0]);
        let rows = fw.unstack(&s).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(cpu.to_vec(&fw.tangent(&rows[0]).unwrap()).unwrap(), da.to_vec());
        // Reverse through unstack (rows as gathers).
        let rr = Reverse::new(cpu.clone());
        let x = rr.var(cpu.tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], DType::F64).unwrap());
        let parts = rr.unstack(&x).unwrap();
        assert_eq!(parts.iter().map(|p| p.value().shape().to_vec()).collect::<Vec<_>>(), vec![vec![2]; 3]);
        let y = rr.add(&rr.sum(&parts[0]).unwrap(), &rr.sum(&rr.scale(&parts[2], 3.0).unwrap()).unwrap()).unwrap();
        let g = rr.backward(&y, cpu.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
        assert_eq!(cpu.to_vec(g.get(&x).unwrap()).unwrap(), vec![1.0, 1.0, 0.0, 0.0, 3.0, 3.0]);
    }

    #[test]
    fn stack_and_unstack_reject_what_they_cannot_do() {
        let cpu = Cpu::new(Some(1)).unwrap();
        let e = cpu.stack(&[]).unwrap_err().to_string();
        assert!(e.contains("stack") && e.contains("no parts"), "{e}");
        let (a, b) = (cpu.full(&[2], 1.0, DType::F64).unwrap(), cpu.full(&[3], 1.0, DType::F64).unwrap());
        let e = cpu.stack(&[a.clone(), b]).unwrap_err().to_string();
        assert!(e.contains("part 1 has shape [3]"), "{e}");
        assert!(cpu.stack(&[a.clone(), cpu.full(&[2], 1.0, DType::F32).unwrap()]).is_err());
        let e = cpu.unstack(&cpu.reshape(&cpu.full(&[1], 1.0, DType::F64).unwrap(), &[]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("unstack"), "{e}");
        // Empty rows and empty stacks keep their shapes.
        let e0 = cpu.full(&[0], 0.0, DType::F64).unwrap();
        let z = cpu.stack(&[e0.clone(), e0]).unwrap();
        assert_eq!(z.shape(), &[2, 0]);
        assert_eq!(cpu.unstack(&z).unwrap().len(), 2);
        assert!(cpu.unstack(&cpu.full(&[0, 3], 0.0, DType::F64).unwrap()).unwrap().is_empty());
    }
}
