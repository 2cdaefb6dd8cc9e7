//! Rules of whole-tensor reductions. `reduce(op, x)` is `reduce_by_index` into one bin whose
//! dest is the neutral element, so min, max and `*` reuse the histogram rules (one winner for
//! min/max, ties to the lowest position; zero counting for `*`); `+` broadcasts the adjoint.
//! A general operator uses the general rule directly: every element sits in the fold as
//! `(l op x) op r` with l the exclusive scan forwards and r the exclusive scan backwards, so
//! x_bar = d2(l, x) d1(l op x, r) g.
//!
//! Forward rules: `+` sums the tangent; min/max (and general operators with a tie break) gather
//! the winner's tangent from the arg-histogram; `*` and general operators lift to dual numbers.

use crate::HistRule;
use crate::ops::{OutOfRange, TensorMeta, TensorOps};
use crate::rules::hist;
use crate::{HistOp, Ops, Result, ScanSpec};

/// A reduction's pullback: the adjoint of x from the adjoint of the one-element result.
pub type ReducePullback<B> = Box<dyn Fn(&B, &<B as TensorOps>::T) -> Result<<B as TensorOps>::T>>;

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
    if op.general().is_some() {
        let y = b.reduce(op, &flat)?;
        let l = b.scan(op, &flat, ScanSpec::EXCLUSIVE, None)?;
        let r = b.scan(op, &flat, ScanSpec::EXCLUSIVE.flipped(), None)?;
        let pullback = move |b: &B, g: &B::T| {
            let g = b.reshape(g, &[1])?;
            let x_bar = b.fold_adjoint(op, &l, &flat, &r, &g)?;
            b.reshape(&x_bar, &shape)
        };
        return Ok((y, Box::new(pullback)));
    }
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

/// The tangent of `y = reduce(op, x)` for the tangent `dx`.
pub fn reduce_jvp<B: Ops>(b: &B, op: HistOp, x: &B::T, y: &B::T, dx: &B::T) -> Result<B::T> {
    if op == HistOp::Add {
        return b.sum(dx);
    }
    let n = x.numel();
    let flat = b.reshape(x, &[n])?;
    let dflat = b.reshape(dx, &[n])?;
    let inds = b.index(&vec![0; n])?;
    let dest = b.full(&[1], op.neutral(), x.dtype())?;
    if let Some(ext) = op.tie_break() {
        // dest (the neutral) wins ties and carries no tangent: the fill of position -1.
        let (_, winners) = b.arg_reduce_by_index(&dest, ext, &inds, &flat)?;
        return b.gather(&dflat, &winners, OutOfRange::Fill(0.0));
    }
    let zero = b.zeros_like(y)?;
    let (_, dy) = b.reduce_by_index_dual(&dest, &zero, op, &inds, &flat, &dflat)?;
    Ok(dy)
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::{Cpu, DType, Reverse};

    use super::*;

    fn grad(op: HistOp, xs: &[f64]) -> (f64, Vec<f64>) {
        let cpu = Cpu::new(Some(1)).unwrap();
        let r = Reverse::new(cpu.clone());
        let x = r.var(cpu.tensor(xs, &[xs.len()], DType::F64).unwrap());
        let y = r.reduce(op, &x).unwrap();
        let g = r.backward(&y, cpu.full(&[1], 2.0, DType::F64).unwrap()).unwrap();
        (cpu.to_vec(y.value()).unwrap()[0], cpu.to_vec(&g.get_or_zeros(&cpu, &x).unwrap()).unwrap())
    }

    #[test]
    fn sum_broadcasts_the_adjoint() {
        assert_eq!(grad(HistOp::Add, &[1.0, 2.0, 3.0]), (6.0, vec![2.0, 2.0, 2.0]));
    }

    #[test]
    fn min_and_max_send_the_adjoint_to_the_first_of_tied_extremes() {
        assert_eq!(grad(HistOp::Min, &[3.0, 1.0, 2.0, 1.0]), (1.0, vec![0.0, 2.0, 0.0, 0.0]));
        assert_eq!(grad(HistOp::Max, &[3.0, 1.0, 3.0]), (3.0, vec![2.0, 0.0, 0.0]));
    }

    #[test]
    fn product_handles_zero_one_and_two_zeros() {
        assert_eq!(grad(HistOp::Mul, &[2.0, 3.0, 4.0]), (24.0, vec![24.0, 16.0, 12.0]));
        assert_eq!(grad(HistOp::Mul, &[2.0, 0.0, 4.0]), (0.0, vec![0.0, 16.0, 0.0]));
        assert_eq!(grad(HistOp::Mul, &[0.0, 3.0, 0.0]), (0.0, vec![0.0, 0.0, 0.0]));
    }

    /// Every operator's reduce rules against the oracle (a one-bin histogram from the neutral).
    #[test]
    fn reduce_rules_of_every_operator_match_the_oracle() {
        use crate::{Forward, oracle};
        let cpu = Cpu::new(Some(1)).unwrap();
        let cases: [&[f64]; 4] = [&[1.0, 0.5, 0.5, 3.0, -2.0], &[0.0, 2.0, 0.0], &[1.5], &[]];
        for op in HistOp::named() {
            for dt in DType::ALL {
                for xs in cases {
                    let n = xs.len();
                    let tag = format!("{op} {dt} {xs:?}");
                    let (h, _, vb) = oracle::hist_vjp(op, &[op.neutral()], &vec![0; n], xs, &[2.0]);
                    let r = Reverse::new(cpu.clone());
                    let x = r.var(cpu.tensor(xs, &[n], dt).unwrap());
                    let y = r.reduce(op, &x).unwrap();
                    let got = cpu.to_vec(y.value()).unwrap()[0];
                    assert!((got - h[0]).abs() <= 1e-6 * h[0].abs().max(1.0) || got == h[0], "{tag}");
                    let g = r.backward(&y, cpu.full(&[1], 2.0, dt).unwrap()).unwrap();
                    let gx = cpu.to_vec(&g.get_or_zeros(&cpu, &x).unwrap()).unwrap();
                    for (a, e) in gx.iter().zip(&vb) {
                        assert!((a - e).abs() <= 1e-6 * e.abs().max(1.0), "{tag}: {gx:?} vs {vb:?}");
                    }
                    let dx: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
                    let (_, want) = oracle::hist_jvp(op, &[op.neutral()], &vec![0; n], xs, &[0.0], &dx);
                    let f = Forward::new(cpu.clone());
                    let xd = f.dual(cpu.tensor(xs, &[n], dt).unwrap(), cpu.tensor(&dx, &[n], dt).unwrap()).unwrap();
                    let yd = f.reduce(op, &xd).unwrap();
                    let dot = cpu.to_vec(&f.tangent(&yd).unwrap()).unwrap()[0];
                    assert!((dot - want[0]).abs() <= 1e-6 * want[0].abs().max(1.0), "{tag}: {dot} vs {want:?}");
                }
            }
        }
    }
}
