//! The traced devices (`cpu-traced`, `cpu-jit`), eagerly and in replays.

use crate::*;

/// A conformance check on a traced device, twice: outside any recording (where the device is its
/// inner one), then as the body of a recording, which checks its first replay bit for bit
/// against that eager run (`Device::run_traced`); the trace is replayed once more.
pub(crate) fn traced_check<D: Traceable>(
    d: &Traced<D>,
    label: &str,
    check: impl Fn(&Traced<D>, DType, &mut Fails) + Copy,
) {
    each_dtype(d, true, label, check);
    recorded_check(d, label, check);
}

/// A conformance check as the body of a recording only (see [`traced_check`]).
pub(crate) fn recorded_check<D: Traceable>(d: &Traced<D>, label: &str, check: impl Fn(&Traced<D>, DType, &mut Fails)) {
    let cell = TraceCell::default();
    let recorded = format!("{label}, recorded");
    let mut bodies = 0;
    for _ in 0..2 {
        let r = d.run_traced(&cell, &mut || -> Result<()> {
            bodies += 1;
            each_dtype(d, true, &recorded, &check);
            Ok(())
        });
        assert!(r.is_ok(), "{label}: {r:?}");
    }
    assert_eq!(bodies, 1, "{label}: the second call replays");
    let stats = d.last_trace().expect("a trace was recorded");
    assert!(stats.instructions > 0 && stats.verified > 0, "{label}: {stats:?}");
}

/// The traced devices: over the CPU, and over the staged CPU with every elementwise op staged
/// (replays then run fused programs). The rules run recorded on one of them, and the
/// large-input checks (chunked rule, large sorts and scans) not at all: they exercise the inner
/// device's kernels, which the CPU and staged suites cover, and each recorded run of them costs
/// tens of seconds of an unoptimised test build.
#[test]
#[ignore = "slow tier, 86 s in a debug build on 2 cores: .ci/run runs it"]
fn traced_devices_match_the_cpu_eagerly_and_in_replays() {
    let on_cpu = Traced::new(Cpu::new(Some(2)).unwrap());
    traced_check(&on_cpu, "cpu-traced primitives", both_index(primitives::<Traced<Cpu>>));
    traced_check(&on_cpu, "cpu-traced histogram primitives", both_index(hist_primitives::<Traced<Cpu>>));
    traced_check(&on_cpu, "cpu-traced dense ops", dense_ops::<Traced<Cpu>>);
    traced_check(&on_cpu, "cpu-traced nested dense AD", nested_dense_ad::<Traced<Cpu>>);
    let [staged, _] = staged_devices();
    let jit = Traced::compiling(staged);
    traced_check(&jit, "cpu-jit primitives", both_index(primitives::<Traced<CpuStaged>>));
    traced_check(&jit, "cpu-jit dense ops", dense_ops::<Traced<CpuStaged>>);
    traced_check(&jit, "cpu-jit nested dense AD", nested_dense_ad::<Traced<CpuStaged>>);
    // Every histogram rule, recorded and replayed (eagerly it is the staged suite's).
    recorded_check(&jit, "cpu-jit rules", both_index(rules::<Traced<CpuStaged>>));
    traced_check(&on_cpu, "cpu-traced extremes", both_index(extremes::<Traced<Cpu>>));
    recorded_check(&jit, "cpu-jit extremes", both_index(extremes::<Traced<CpuStaged>>));
}

/// A scalar-and-small-tensor program through every op the compiler takes: elementwise and
/// comparison ops, selects, sums, broadcasts, sums to a shape, matrix products, stacks, by
/// forward over reverse (`Reverse<Forward<D>>`: value, gradient, Hessian-vector product); then
/// gathers, in range and filled, and their adjoints by reverse mode (value, gradient).
fn compilable_hvp<D: Ops>(d: &D) -> Result<Vec<f64>> {
    let dt = DType::F64;
    let xs: Vec<f64> = (0..6).map(|i| 0.3 * i as f64 - 0.7).collect();
    let vs: Vec<f64> = (0..6).map(|i| 1.0 - 0.25 * i as f64).collect();
    let fw = Forward::new(d.clone());
    let r = Reverse::new(fw.clone());
    let x = r.var(fw.dual(d.tensor(&xs, &[2, 3], dt)?, d.tensor(&vs, &[2, 3], dt)?)?);
    let f = |o: &Reverse<Forward<D>>, x: &<Reverse<Forward<D>> as TensorOps>::T| -> Result<_> {
        let mut acc = o.sum(&o.unary(UnaryOp::Sin, x)?)?;
        for op in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Square, UnaryOp::Cos] {
            acc = o.add(&acc, &o.sum(&o.unary(op, x)?)?)?;
        }
        let p = o.matmul(x, false, x, true)?; // [2, 2]
        let q = o.sum_to(&o.broadcast_to(&o.reshape(&p, &[1, 2, 2])?, &[3, 2, 2])?, &[2, 2])?;
        let mask = o.binary(BinaryOp::Gt, x, &o.scalar(0.0, dt)?)?;
        let chosen = o.select(&mask, x, &o.unary(UnaryOp::Neg, x)?)?;
        let rows = o.unstack(x)?;
        let both = o.stack(&[rows[1].clone(), rows[0].clone()])?;
        let parts = [o.sum(&q)?, o.sum(&o.mul(&chosen, x)?)?, o.sum(&o.mul(&both, x)?)?];
        let mut y = acc;
        for part in parts {
            y = o.add(&y, &o.div(&part, &o.scalar(3.0, dt)?)?)?;
        }
        Ok(y)
    };
    let y = f(&r, &x)?;
    let g = r.backward(&y, fw.full(&[1], 1.0, dt)?)?.get_or_zeros(&fw, &x)?;
    let mut out = d.to_vec(fw.primal(y.value()))?;
    out.extend(d.to_vec(fw.primal(&g))?);
    out.extend(d.to_vec(&fw.tangent(&g)?)?);
    // Gathers and their adjoints, by reverse mode alone (a gather's adjoint under forward
    // mode is a dual histogram, which the compiler does not take).
    let r = Reverse::new(d.clone());
    let x = r.var(d.tensor(&xs, &[6], dt)?);
    let picked = r.gather(&x, &r.index(&[5, 0, 0, 3, 9])?, OutOfRange::Fill(0.5))?;
    let y = r.sum(&r.mul(&picked, &r.unary(UnaryOp::Exp, &picked)?)?)?;
    let g = r.backward(&y, d.full(&[1], 1.0, dt)?)?.get_or_zeros(d, &x)?;
    out.extend(d.to_vec(y.value())?);
    out.extend(d.to_vec(&g)?);
    Ok(out)
}

/// `cpu-jit`'s compiled programs (over the CPU and over the staged CPU): the nested program
/// above compiles, its first run must equal the eager run bit for bit (else the recording
/// fails), and its replays give the plain CPU device's values exactly.
#[test]
fn compiled_programs_repeat_the_cpu_bit_for_bit() {
    let want = compilable_hvp(&cpu()).unwrap();
    fn check<D: Traceable>(d: Traced<D>, want: &[f64], label: &str) {
        let cell = TraceCell::default();
        let mut eager = Vec::new();
        for _ in 0..3 {
            d.run_traced(&cell, &mut || -> Result<()> {
                eager = compilable_hvp(&d)?;
                Ok(())
            })
            .unwrap();
        }
        let stats = d.last_trace().unwrap();
        assert!(stats.compiled.is_some(), "{label}: {:?}", d.last_compile_note());
        assert_eq!(bits(&eager), bits(want), "{label}: eager");
        assert_eq!(bits(&d.replay_readbacks(&cell).unwrap()), bits(want), "{label}: compiled");
    }
    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }
    check(Traced::compiling(cpu()), &want, "over the CPU");
    let [staged, all] = staged_devices();
    check(Traced::compiling(staged), &want, "over the staged CPU");
    check(Traced::compiling(all), &want, "over the staged CPU, every op staged");
}
