//! The CPU device's own conformance: its fused kernels against the composed forms, donation, and
//! the suite against itself and the oracle.

use crate::*;

#[test]
fn cpu_gather_adjoint_is_the_composed_histogram_bit_for_bit() {
    // Fused where the histogram is one sequential fold (n 14 into k 28: the LSTM's rows), the
    // composed form elsewhere (interleaved rows at k <= 64, chunks from 2^16 elements).
    let c = cpu();
    for dt in DType::ALL {
        for (n, k) in [(14, 28), (14, 56), (3, 1), (40, 3), (5000, 1000), (100_000, 64), (70_000, 300)] {
            // Values of many magnitudes, so the order of the additions shows in the bits.
            let vals: Vec<f64> =
                (0..n).map(|i| ((i * 7919) % 1013) as f64 * 1.37e-3 * 10f64.powi((i % 7) as i32 - 3)).collect();
            let inds: Vec<i64> = (0..n as i64).map(|i| (i * 37 + i / 3) % (k as i64 + 3) - 1).collect();
            let g = c.tensor(&vals, &[n], dt).unwrap();
            let src = c.full(&[k], 5.0, dt).unwrap();
            let idx = c.index(&inds).unwrap();
            let fused = c.to_vec(&c.gather_adjoint(&src, &idx, &g).unwrap()).unwrap();
            let composed = adgauge_backends::composed::indexing::gather_adjoint_composed(&c, &src, &idx, &g).unwrap();
            let composed = c.to_vec(&composed).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fused), bits(&composed), "{dt} n {n} k {k}");
            // And against the definition, in f64 (the order may differ in the last bits).
            let mut want = vec![0.0; k];
            for (i, &b) in inds.iter().enumerate() {
                if b >= 0 && (b as usize) < k {
                    want[b as usize] += dt.round(vals[i]);
                }
            }
            for (got, want) in fused.iter().zip(&want) {
                assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{dt} n {n} k {k}: {got} vs {want}");
            }
        }
        // Errors are the composed form's: a length mismatch names reduce_by_index.
        let e = c.gather_adjoint(
            &c.full(&[4], 0.0, dt).unwrap(),
            &c.index(&[1, 2]).unwrap(),
            &c.full(&[3], 1.0, dt).unwrap(),
        );
        assert!(matches!(e, Err(OpError::Shape { op: "reduce_by_index", .. })), "{e:?}");
    }
}

#[test]
fn cpu_accumulate_adds_into_a_given_up_tensor_and_never_into_a_held_one() {
    let c = cpu();
    for dt in DType::ALL {
        for n in [10, 300_000] {
            // Values whose sums round alike in f32 and f64 arithmetic (exact in f64).
            let xs = round(dt, &(0..n).map(|i| ((i * 7) % 13) as f64 * 0.25 - 1.5).collect::<Vec<_>>());
            let ys = round(dt, &(0..n).map(|i| ((i * 5) % 11) as f64 * 0.125 + 0.5).collect::<Vec<_>>());
            let want: Vec<f64> = xs.iter().zip(&ys).map(|(a, b)| dt.round(a + b)).collect();
            let t = |v: &[f64]| c.tensor(v, &[v.len()], dt).unwrap();
            let y = t(&ys);
            assert_eq!(c.to_vec(&c.accumulate(t(&xs), &y).unwrap()).unwrap(), want, "{dt} n {n}");
            let held = t(&xs);
            assert_eq!(c.to_vec(&c.accumulate(held.clone(), &y).unwrap()).unwrap(), want, "{dt} n {n} held");
            assert_eq!(c.to_vec(&held).unwrap(), xs, "{dt} n {n}: the holder's values changed");
            let one = t(&[2.0]);
            let bcast: Vec<f64> = xs.iter().map(|a| dt.round(a + 2.0)).collect();
            assert_eq!(c.to_vec(&c.accumulate(t(&xs), &one).unwrap()).unwrap(), bcast, "{dt} n {n} bcast");
        }
        let other = if dt == DType::F64 { DType::F32 } else { DType::F64 };
        let mixed = c.tensor(&[1.0, 2.0], &[2], other).unwrap();
        let e = c.accumulate(mixed, &c.tensor(&[1.0, 2.0], &[2], dt).unwrap()).unwrap_err();
        assert!(e.to_string().contains("dtype"), "{e}");
    }
}

#[test]
fn cpu_donated_elementwise_ops_equal_the_plain_ones_bit_for_bit_at_every_size() {
    // Sizes below and above the parallel threshold, and not multiples of the in-place unary
    // loop's runs of 256, so the runs' seams and the vector loops' tails both move.
    let c = cpu();
    for dt in DType::ALL {
        for n in [13, 1000, 300_001] {
            let xs: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 * 0.173 - 8.0).collect();
            let ys: Vec<f64> = (0..n).map(|i| ((i * 11) % 23) as f64 * 0.31 + 0.05).collect();
            let t = |v: &[f64]| c.tensor(v, &[v.len()], dt).unwrap();
            let bits = |x: &CpuTensor| c.to_vec(x).unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let y = t(&ys);
            for op in UnaryOp::ALL {
                let arg = if matches!(op, UnaryOp::Log | UnaryOp::Sqrt) { &ys } else { &xs };
                let want = bits(&c.unary(op, &t(arg)).unwrap());
                assert_eq!(bits(&c.unary_donated(op, t(arg)).unwrap()), want, "{dt} n {n} {op:?}");
            }
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Min, BinaryOp::Ge] {
                let want = bits(&c.binary(op, &t(&xs), &y).unwrap());
                assert_eq!(bits(&c.binary_donated(op, t(&xs), &y, true).unwrap()), want, "{dt} n {n} {op:?}");
                let want = bits(&c.binary(op, &y, &t(&xs)).unwrap());
                assert_eq!(bits(&c.binary_donated(op, t(&xs), &y, false).unwrap()), want, "{dt} n {n} {op:?} right");
            }
            let held = t(&xs);
            let _ = c.binary_donated(BinaryOp::Mul, held.clone(), &y, true).unwrap();
            let _ = c.unary_donated(UnaryOp::Exp, held.clone()).unwrap();
            assert_eq!(c.to_vec(&held).unwrap(), c.to_vec(&t(&xs)).unwrap(), "{dt} n {n}: the holder's values changed");
        }
    }
}

#[test]
fn cpu_follows_the_extreme_value_semantics() {
    each_dtype(&cpu(), true, "cpu extremes", both_index(extremes::<Cpu>));
}

#[test]
#[ignore = "slow tier, 74 s in a debug build on 2 cores: .ci/run runs it"]
fn cpu_conforms_to_itself_and_the_oracle() {
    // The suite's own sanity check: the reference device against the oracle.
    let c = cpu();
    each_dtype(&c, true, "cpu rules", both_index(rules::<Cpu>));
}
