//! Tests of the LSTM cell's rule kernels (`lstm_cell_vjp`, `lstm_cell_jvp` and their `_saved`
//! forms): the CPU's fused kernels against the composed forms (`adgauge_ops::composed::lstm`),
//! and the rules against finite differences and forward over reverse.

#[cfg(test)]
mod tests {
    use crate::composed::lstm::*;
    use crate::prelude::*;
    use crate::{Cpu, DType, Forward, Result, Reverse, UnaryOp};

    const B: usize = 5;

    /// Seeded-by-formula operands of width 5 with gates away from saturation.
    fn operands(shift: f64, v: &[f64]) -> [Vec<f64>; 3] {
        let at = |i: usize, base: f64| base + shift * v.get(i).copied().unwrap_or(0.0);
        let x = (0..B).map(|j| at(j, 0.3 * j as f64 - 0.5)).collect();
        let s = (0..2 * B).map(|j| at(B + j, ((j * 7) % 5) as f64 * 0.35 - 0.6)).collect();
        let p = (0..8 * B).map(|j| at(3 * B + j, ((j * 11) % 13) as f64 * 0.17 - 1.0)).collect();
        [x, s, p]
    }

    fn tensors<O: TensorOps>(o: &O, [x, s, p]: &[Vec<f64>; 3]) -> [O::T; 3] {
        [
            o.tensor(x, &[B], DType::F64).unwrap(),
            o.tensor(s, &[2, B], DType::F64).unwrap(),
            o.tensor(p, &[8, B], DType::F64).unwrap(),
        ]
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|z| z.to_bits()).collect()
    }

    /// A scalar of the cell's output that weighs every entry differently: sum(w y^2) + sum(y).
    fn cell_loss<O: Ops>(o: &O, x: &O::T, s: &O::T, p: &O::T) -> Result<O::T> {
        let y = o.lstm_cell(x, s, p)?;
        let y2 = o.lstm_cell(&o.scale(x, 0.5)?, &y, p)?; // chained: the state flows on
        let w = o.tensor(&(0..2 * B).map(|i| 0.25 + 0.1 * i as f64).collect::<Vec<_>>(), &[2, B], DType::F64)?;
        o.add(&o.sum(&o.mul(&w, &o.unary(UnaryOp::Square, &y2)?)?)?, &o.sum(&y)?)
    }

    #[test]
    fn cpu_kernels_equal_the_composed_forms_bit_for_bit() {
        let c = Cpu::new(Some(1)).unwrap();
        let [x, s, p] = tensors(&c, &operands(0.0, &[]));
        let fused = c.to_vec(&c.lstm_cell(&x, &s, &p).unwrap()).unwrap();
        let composed = c.to_vec(&lstm_cell_composed(&c, &x, &s, &p).unwrap()).unwrap();
        assert_eq!(bits(&fused), bits(&composed), "{fused:?} vs {composed:?}");
        // Against the formulas by hand for lane 2.
        let [xv, sv, pv] = operands(0.0, &[]);
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let j = 2;
        let f = sig(xv[j] * pv[j] + pv[4 * B + j]);
        let i = sig(sv[j] * pv[B + j] + pv[5 * B + j]);
        let o = sig(xv[j] * pv[2 * B + j] + pv[6 * B + j]);
        let z = (sv[j] * pv[3 * B + j] + pv[7 * B + j]).tanh();
        let cn = sv[B + j] * f + i * z;
        assert!((fused[B + j] - cn).abs() < 1e-15 && (fused[j] - o * cn.tanh()).abs() < 1e-15, "{fused:?}");

        let g = c.tensor(&(0..2 * B).map(|i| 1.0 - 0.3 * i as f64).collect::<Vec<_>>(), &[2, B], DType::F64).unwrap();
        let (fx, fs, fp) = c.lstm_cell_vjp(&x, &s, &p, &g).unwrap();
        let (cx, cs, cp) = lstm_cell_vjp_composed(&c, &x, &s, &p, &g).unwrap();
        for (a, b) in [(&fx, &cx), (&fs, &cs), (&fp, &cp)] {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(bits(&c.to_vec(a).unwrap()), bits(&c.to_vec(b).unwrap()));
        }
        let dir =
            operands(0.0, &[]).map(|v| v.iter().enumerate().map(|(i, _)| ((i * 3) % 7) as f64 * 0.2 - 0.6).collect());
        let [dx, ds, dp] = tensors(&c, &dir);
        let fj = c.to_vec(&c.lstm_cell_jvp(&x, &s, &p, &dx, &ds, &dp).unwrap()).unwrap();
        let cj = c.to_vec(&lstm_cell_jvp_composed(&c, &x, &s, &p, &dx, &ds, &dp).unwrap()).unwrap();
        assert_eq!(bits(&fj), bits(&cj));
        // The saving cell gives the same new state, and gates equal to the composed ones; the
        // kernels reading them give the recomputing kernels' bits, and so do their compositions.
        let (ys, gates) = c.lstm_cell_gates(&x, &s, &p).unwrap();
        let gates = gates.expect("the CPU saves the gates");
        assert_eq!(bits(&c.to_vec(&ys).unwrap()), bits(&fused));
        assert_eq!(gates.shape(), &[5, B]);
        let composed_gates = c.to_vec(&lstm_cell_gates_composed(&c, &x, &s, &p).unwrap()).unwrap();
        assert_eq!(bits(&c.to_vec(&gates).unwrap()), bits(&composed_gates));
        // Row 4 is tanh(c'), c' being the new state's second row.
        assert!((composed_gates[4 * B + j] - cn.tanh()).abs() < 1e-15, "{composed_gates:?}");
        let saved = c.lstm_cell_vjp_saved(&x, &s, &p, &gates, &g).unwrap();
        let saved_composed = lstm_cell_vjp_saved_composed(&c, &x, &s, &p, &gates, &g).unwrap();
        for (a, b) in
            [(&saved.0, &fx), (&saved.1, &fs), (&saved.2, &fp), (&saved_composed.0, &fx), (&saved_composed.2, &fp)]
        {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(bits(&c.to_vec(a).unwrap()), bits(&c.to_vec(b).unwrap()));
        }
        let sj = c.to_vec(&c.lstm_cell_jvp_saved(&x, &s, &p, &gates, &dx, &ds, &dp).unwrap()).unwrap();
        let sjc = lstm_cell_jvp_saved_composed(&c, &x, &s, &p, &gates, &dx, &ds, &dp).unwrap();
        assert_eq!(bits(&sj), bits(&fj));
        assert_eq!(bits(&c.to_vec(&sjc).unwrap()), bits(&fj));
        // They read the gates they are given: another cell's gates change both results.
        let [x2, s2, p2] = tensors(&c, &operands(0.5, &[1.0; 11 * B]));
        let (_, other) = c.lstm_cell_gates(&x2, &s2, &p2).unwrap();
        let other = other.unwrap();
        let (ox, _, _) = c.lstm_cell_vjp_saved(&x, &s, &p, &other, &g).unwrap();
        assert_ne!(bits(&c.to_vec(&ox).unwrap()), bits(&c.to_vec(&fx).unwrap()));
        let oj = c.to_vec(&c.lstm_cell_jvp_saved(&x, &s, &p, &other, &dx, &ds, &dp).unwrap()).unwrap();
        assert_ne!(bits(&oj), bits(&fj));
        // The AD engines save none (an outer engine differentiates through the recomputing rules).
        let r = Reverse::new(c.clone());
        let (_, none) = r.lstm_cell_gates(&r.var(x.clone()), &r.lift(s.clone()), &r.lift(p.clone())).unwrap();
        assert!(none.is_none());
        // The dot-product test ties the two rules together: <g, J d> = <J^T g, d>.
        let gv = c.to_vec(&g).unwrap();
        let lhs: f64 = gv.iter().zip(&fj).map(|(a, b)| a * b).sum();
        let rhs: f64 = [&fx, &fs, &fp]
            .iter()
            .zip(&dir)
            .map(|(t, d)| c.to_vec(t).unwrap().iter().zip(d).map(|(a, b)| a * b).sum::<f64>())
            .sum();
        assert!((lhs - rhs).abs() < 1e-14 * lhs.abs().max(1.0), "{lhs} vs {rhs}");
    }

    #[test]
    fn rules_agree_with_finite_differences_and_forward_over_reverse_with_differences_of_gradients() {
        let c = Cpu::new(Some(1)).unwrap();
        let v: Vec<f64> = (0..11 * B).map(|i| ((i * 5) % 9) as f64 * 0.25 - 1.0).collect();
        let eval = |shift: f64| {
            let [x, s, p] = tensors(&c, &operands(shift, &v));
            c.to_vec(&cell_loss(&c, &x, &s, &p).unwrap()).unwrap()[0]
        };
        let grad = |shift: f64| -> Vec<f64> {
            let r = Reverse::new(c.clone());
            let [x, s, p] = tensors(&c, &operands(shift, &v)).map(|t| r.var(t));
            let y = cell_loss(&r, &x, &s, &p).unwrap();
            let g = r.backward(&y, c.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
            [&x, &s, &p].iter().flat_map(|t| c.to_vec(g.get(t).unwrap()).unwrap()).collect()
        };
        let h = 1e-6;
        let fd = (eval(h) - eval(-h)) / (2.0 * h);
        let g0 = grad(0.0);
        let rev: f64 = g0.iter().zip(&v).map(|(a, b)| a * b).sum();
        assert!(rev.abs() > 0.1, "degenerate direction: {rev}");
        assert!((rev - fd).abs() < 1e-7 * fd.abs().max(1.0), "reverse {rev} vs fd {fd}");
        // Forward mode with a tangent on the state only, then on all three.
        let f = Forward::new(c.clone());
        let base = tensors(&c, &operands(0.0, &[]));
        let dirs = [v[..B].to_vec(), v[B..3 * B].to_vec(), v[3 * B..].to_vec()];
        let [dx, ds, dp] = tensors(&c, &dirs);
        let state_only =
            [f.lift(base[0].clone()), f.dual(base[1].clone(), ds.clone()).unwrap(), f.lift(base[2].clone())];
        let y = cell_loss(&f, &state_only[0], &state_only[1], &state_only[2]).unwrap();
        let want: f64 = g0[B..3 * B].iter().zip(&dirs[1]).map(|(a, b)| a * b).sum();
        let got = c.to_vec(&f.tangent(&y).unwrap()).unwrap()[0];
        assert!((got - want).abs() < 1e-12 * want.abs().max(1.0), "state tangent {got} vs {want}");
        let all = [dx, ds, dp];
        let duals: Vec<_> = base.iter().zip(&all).map(|(b, d)| f.dual(b.clone(), d.clone()).unwrap()).collect();
        let y = cell_loss(&f, &duals[0], &duals[1], &duals[2]).unwrap();
        let fwd = c.to_vec(&f.tangent(&y).unwrap()).unwrap()[0];
        assert!((fwd - rev).abs() < 1e-12 * rev.abs().max(1.0), "forward {fwd} vs reverse {rev}");
        // Forward over reverse: the Hessian along v against differences of gradients (the
        // reverse rule runs on Forward<Cpu>, whose rule kernel stays composed).
        let r = Reverse::new(f.clone());
        let vars: Vec<_> = base.iter().zip(&all).map(|(b, d)| r.var(f.dual(b.clone(), d.clone()).unwrap())).collect();
        let y = cell_loss(&r, &vars[0], &vars[1], &vars[2]).unwrap();
        let g = r.backward(&y, f.full(&[1], 1.0, DType::F64).unwrap()).unwrap();
        let hv: Vec<f64> =
            vars.iter().flat_map(|t| c.to_vec(&f.tangent(g.get(t).unwrap()).unwrap()).unwrap()).collect();
        let h = 1e-5;
        let (gp, gm) = (grad(h), grad(-h));
        assert!(hv.iter().any(|z| z.abs() > 1e-2), "degenerate H v");
        for j in 0..hv.len() {
            let want = (gp[j] - gm[j]) / (2.0 * h);
            assert!((hv[j] - want).abs() < 1e-6 * want.abs().max(1.0), "Hv[{j}] {} vs {want}", hv[j]);
        }
    }

    #[test]
    fn bad_shapes_and_dtypes_are_errors_naming_the_op() {
        let c = Cpu::new(Some(1)).unwrap();
        let [x, s, p] = tensors(&c, &operands(0.0, &[]));
        let short = c.full(&[7, B], 0.0, DType::F64).unwrap();
        for e in [
            c.lstm_cell(&x, &s, &short).unwrap_err(),
            lstm_cell_composed(&c, &x, &s, &short).unwrap_err(),
            c.lstm_cell(&s, &s, &p).unwrap_err(),
        ] {
            assert!(e.to_string().contains("lstm_cell") && e.to_string().contains("[8, b]"), "{e}");
        }
        // Right row counts, wrong widths.
        let wide = c.full(&[2, B + 1], 0.0, DType::F64).unwrap();
        let narrow = c.full(&[8, B - 1], 0.0, DType::F64).unwrap();
        for e in [c.lstm_cell(&x, &wide, &p).unwrap_err(), lstm_cell_composed(&c, &x, &s, &narrow).unwrap_err()] {
            assert!(e.to_string().contains("expected [b], [2, b] and [8, b]"), "{e}");
        }
        let e = c.lstm_cell_vjp(&x, &s, &p, &x).unwrap_err().to_string();
        assert!(e.contains("lstm_cell_vjp") && e.contains("adjoint"), "{e}");
        let e = c.lstm_cell_jvp(&x, &s, &p, &x, &x, &p).unwrap_err().to_string();
        assert!(e.contains("lstm_cell_jvp") && e.contains("state's tangent"), "{e}");
        // Saved gates of the wrong shape or dtype, on the kernels and their compositions.
        let g = c.full(&[2, B], 1.0, DType::F64).unwrap();
        let four = c.full(&[4, B], 0.5, DType::F64).unwrap();
        let gates32 = c.tensor(&[0.5; 5 * B], &[5, B], DType::F32).unwrap();
        for (e, op) in [
            (c.lstm_cell_vjp_saved(&x, &s, &p, &four, &g).unwrap_err(), "lstm_cell_vjp_saved"),
            (lstm_cell_vjp_saved_composed(&c, &x, &s, &p, &four, &g).unwrap_err(), "lstm_cell_vjp_saved"),
            (c.lstm_cell_jvp_saved(&x, &s, &p, &four, &x, &s, &p).unwrap_err(), "lstm_cell_jvp_saved"),
            (lstm_cell_jvp_saved_composed(&c, &x, &s, &p, &four, &x, &s, &p).unwrap_err(), "lstm_cell_jvp_saved"),
        ] {
            let e = e.to_string();
            assert!(e.contains(op) && e.contains("saved gates"), "{e}");
        }
        let e = c.lstm_cell_vjp_saved(&x, &s, &p, &gates32, &g).unwrap_err().to_string();
        assert!(e.contains("lstm_cell_vjp_saved") && e.contains("dtype"), "{e}");
        let x32 = c.tensor(&[0.0; B], &[B], DType::F32).unwrap();
        assert!(c.lstm_cell(&x32, &s, &p).is_err());
    }
}
