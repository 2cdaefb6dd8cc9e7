//! The staged CPU device (`cpu-staged`) against the CPU device.

use crate::*;

/// The staged CPU device with every elementwise op deferred (threshold 0), so each case runs
/// through compiled, fused programs; and with the default threshold, where small ops run at once.
pub(crate) fn staged_devices() -> [CpuStaged; 2] {
    let d = CpuStaged::on(Cpu::new(Some(2)).unwrap()).unwrap();
    [d.clone().with_stage_min(0), d.with_stage_min(adgauge_backends::cpu::staged::STAGE_MIN)]
}

#[test]
fn staged_primitives_match_the_cpu() {
    for d in staged_devices() {
        each_dtype(&d, true, "cpu-staged primitives", both_index(primitives::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged histogram primitives", both_index(hist_primitives::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged dense ops", dense_ops::<CpuStaged>);
        each_dtype(&d, true, "cpu-staged nested dense AD", nested_dense_ad::<CpuStaged>);
    }
}

#[test]
#[ignore = "slow tier, 158 s in a debug build on 2 cores: .ci/run runs it"]
fn staged_rules_match_the_cpu_and_the_oracle() {
    for d in staged_devices() {
        each_dtype(&d, true, "cpu-staged rules", both_index(rules::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged extremes", both_index(extremes::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged chunked rule", both_index(chunked_rule::<CpuStaged>));
        each_dtype(&d, true, "cpu-staged large sorts and scans", both_index(large_sorts_and_scans::<CpuStaged>));
    }
}
#[test]
fn staged_bad_arguments_are_errors_at_the_call() {
    let [d, _] = staged_devices();
    let x = d.tensor(&[1.0, 2.0], &[2], DType::F32).unwrap();
    let y = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F32).unwrap();
    let z = d.tensor(&[1.0, 2.0], &[2], DType::F64).unwrap();
    // Deferred ops check their arguments when called, as the eager device does.
    assert!(matches!(d.binary(BinaryOp::Add, &x, &y), Err(OpError::Shape { .. })));
    assert!(matches!(d.binary(BinaryOp::Add, &x, &z), Err(OpError::DType { .. })));
    assert!(matches!(d.select(&x, &y, &x), Err(OpError::Shape { .. })));
    let e = d.unary(UnaryOp::Exp, &x).unwrap();
    assert!(matches!(d.reshape(&e, &[3]), Err(OpError::Shape { .. })));
    assert!(matches!(d.unary_adjoint(UnaryOp::Exp, &x, &e, &y), Err(OpError::Shape { .. })));
}
