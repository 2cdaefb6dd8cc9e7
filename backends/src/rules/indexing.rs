//! VJP rules of gather and scatter. The adjoint of a gather is a `+` histogram of the output
//! adjoint into the source's shape (out-of-range reads got a fill value, which has no source, so
//! they contribute nothing). Scatter's rule assumes each in-range destination is written at most
//! once (the rules only scatter unique positions): the overwritten dest entries get no adjoint.

use crate::ops::{OutOfRange, TensorMeta};
use crate::{HistOp, Ops, Result};

/// Adjoint of `src` for `y = gather(src, idx)`.
pub fn gather_vjp<B: Ops>(b: &B, src: &B::T, idx: &B::I, g: &B::T) -> Result<B::T> {
    let zeros = b.zeros_like(src)?;
    let n = g.numel();
    let flat = b.reshape(g, &[n])?;
    b.reduce_by_index(&zeros, HistOp::Add, idx, &flat)
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
}
