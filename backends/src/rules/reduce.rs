//! VJP rules of whole-tensor reductions. `reduce(op, x)` is `reduce_by_index` into one bin whose
//! dest is the neutral element, so min, max and `*` reuse the histogram rules (one winner for
//! min/max, ties to the lowest position; zero counting for `*`); `+` broadcasts the adjoint.

use crate::ops::TensorMeta;
use crate::rules::hist::{self, HistRule};
use crate::{HistOp, Ops, Result};

/// A reduction's pullback: the adjoint of x from the adjoint of the one-element result.
pub type ReducePullback<B> = Box<dyn Fn(&B, &<B as Ops>::T) -> Result<<B as Ops>::T>>;

/// Runs `reduce(op, x)` and returns it with its pullback.
pub fn reduce_vjp<B: Ops>(b: &B, op: HistOp, x: &B::T) -> Result<(B::T, ReducePullback<B>)> {
    let shape = x.shape().to_vec();
    if op == HistOp::Add {
        let y = b.reduce(op, x)?;
        let zeros = b.zeros_like(x)?;
        return Ok((y, Box::new(move |b: &B, g: &B::T| b.add(&zeros, g))));
    }
    let n = x.numel();
    let flat = b.reshape(x, &[n])?;
    let dest = b.full(&[1], op.neutral(), x.dtype())?;
    let inds = b.index(&vec![0; n])?;
    let (y, pullback) = hist::reduce_by_index_vjp(b, HistRule::Special, &dest, op, &inds, &flat)?;
    Ok((
        y,
        Box::new(move |b: &B, g: &B::T| {
            let (_, vals_bar) = pullback(b, g)?;
            b.reshape(&vals_bar, &shape)
        }),
    ))
}

#[cfg(test)]
mod tests {
    use crate::{Cpu, DType, Ops, Reverse};

    use super::*;

    fn grad(op: HistOp, xs: &[f64]) -> (f64, Vec<f64>) {
        let cpu = Cpu::new(Some(1)).unwrap();
        let r = Reverse::new(cpu.clone());
        let x = r.var(cpu.tensor(xs, &[xs.len()], DType::F64).unwrap());
        let y = r.reduce(op, &x).unwrap();
        let g = r
            .backward(&y, cpu.full(&[1], 2.0, DType::F64).unwrap())
            .unwrap();
        (
            cpu.to_vec(y.value()).unwrap()[0],
            cpu.to_vec(&g.get_or_zeros(&cpu, &x).unwrap()).unwrap(),
        )
    }

    #[test]
    fn sum_broadcasts_the_adjoint() {
        assert_eq!(
            grad(HistOp::Add, &[1.0, 2.0, 3.0]),
            (6.0, vec![2.0, 2.0, 2.0])
        );
    }

    #[test]
    fn min_and_max_send_the_adjoint_to_the_first_of_tied_extremes() {
        assert_eq!(
            grad(HistOp::Min, &[3.0, 1.0, 2.0, 1.0]),
            (1.0, vec![0.0, 2.0, 0.0, 0.0])
        );
        assert_eq!(
            grad(HistOp::Max, &[3.0, 1.0, 3.0]),
            (3.0, vec![2.0, 0.0, 0.0])
        );
    }

    #[test]
    fn product_handles_zero_one_and_two_zeros() {
        assert_eq!(
            grad(HistOp::Mul, &[2.0, 3.0, 4.0]),
            (24.0, vec![24.0, 16.0, 12.0])
        );
        assert_eq!(
            grad(HistOp::Mul, &[2.0, 0.0, 4.0]),
            (0.0, vec![0.0, 16.0, 0.0])
        );
        assert_eq!(
            grad(HistOp::Mul, &[0.0, 3.0, 0.0]),
            (0.0, vec![0.0, 0.0, 0.0])
        );
    }
}
