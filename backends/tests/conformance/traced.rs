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
    let jit = Traced::new(staged);
    traced_check(&jit, "cpu-jit primitives", both_index(primitives::<Traced<CpuStaged>>));
    traced_check(&jit, "cpu-jit dense ops", dense_ops::<Traced<CpuStaged>>);
    traced_check(&jit, "cpu-jit nested dense AD", nested_dense_ad::<Traced<CpuStaged>>);
    // Every histogram rule, recorded and replayed (eagerly it is the staged suite's).
    recorded_check(&jit, "cpu-jit rules", both_index(rules::<Traced<CpuStaged>>));
    traced_check(&on_cpu, "cpu-traced extremes", both_index(extremes::<Traced<Cpu>>));
    recorded_check(&jit, "cpu-jit extremes", both_index(extremes::<Traced<CpuStaged>>));
}
