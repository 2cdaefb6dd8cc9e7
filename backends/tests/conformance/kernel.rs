//! The kernel devices (OpenCL, CUDA): the suite instantiated per runtime, their transfer and memory
//! accounting, and CUDA's probe.

use crate::*;

/// The kernel device's transfer counter and buffer accounting, on buffers of known sizes
/// (every device buffer takes at least 8 bytes).
pub(crate) fn transfers_and_memory<R: KernelRuntime>(d: &KernelDevice<R>) {
    let (dt, fb) = (DType::F32, 4);
    // A freshly opened device has its own counters: other tests' traffic does not show here.
    assert_eq!(d.transfers(), Some(Transfers::default()));
    assert_eq!(d.device_memory(), Some(DeviceMemory::default()));
    // Filled by a kernel: memory, but no transfer.
    let a = d.full(&[1000], 1.0, dt).unwrap();
    assert_eq!(d.transfers(), Some(Transfers::default()));
    let b = d.tensor(&[0.5; 250], &[250], dt).unwrap();
    let i = d.index(&[0, 2, 249]).unwrap();
    // Empty: nothing moves, but the buffer still takes the minimum.
    let e = d.tensor(&[], &[0], dt).unwrap();
    let up = (250 * fb + 3 * 8) as u64;
    assert_eq!(d.transfers(), Some(Transfers { uploads: 2, downloads: 0, bytes_up: up, bytes_down: 0 }));
    let live = 1000 * fb + 250 * fb + 3 * 8 + 8;
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak: live }));
    // A gather that rejects out-of-range indices, with an uploaded index (whose range is known
    // and fits): no check is read back.
    let g = d.gather(&b, &i, OutOfRange::Error).unwrap();
    assert_eq!(d.transfers().unwrap().count(), 2);
    assert_eq!(d.to_vec(&g).unwrap(), vec![0.5; 3]);
    assert_eq!(d.transfers(), Some(Transfers { uploads: 2, downloads: 1, bytes_up: up, bytes_down: 3 * fb as u64 }));
    let peak = live + 3 * fb;
    drop(a);
    let live = peak - 1000 * fb;
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak }));
    d.reset_peak_device_memory();
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak: live }));
    // A temporary of 4000 bytes raises the peak, not the bytes in use.
    drop(d.full(&[1000], 0.0, dt).unwrap());
    assert_eq!(d.device_memory(), Some(DeviceMemory { in_use: live, peak: live + 1000 * fb }));
    // The dense ops run on the device: nothing moves.
    let before = d.transfers().unwrap();
    let m = d.matmul(&d.reshape(&b, &[25, 10]).unwrap(), true, &d.reshape(&b, &[25, 10]).unwrap(), false).unwrap();
    let s = d.sum_to(&d.broadcast_to(&m, &[3, 10, 10]).unwrap(), &[1, 10]).unwrap();
    let (mx, at) = d.arg_reduce_axis(Extremum::Max, &m, 0).unwrap();
    let back = d.gather(&d.reshape(&m, &[100]).unwrap(), &at, OutOfRange::Error).unwrap();
    assert_eq!(d.transfers(), Some(before));
    // 25 * 0.25 = 6.25 per product entry; summed over 10 rows and 3 copies of the batch: 187.5.
    assert_eq!(d.to_vec(&s).unwrap(), vec![187.5; 10]);
    assert_eq!(d.to_vec(&mx).unwrap(), vec![6.25; 10]);
    assert_eq!(d.to_vec(&back).unwrap(), vec![6.25; 10]);
    assert_eq!(d.index_to_vec(&at).unwrap(), (0..10).collect::<Vec<i64>>());
    // An out-of-range index is found by the device-side check: its verdict and then the index
    // are read back (two downloads) to name the culprit.
    let bad = d.index(&[1, 250]).unwrap();
    let before = d.transfers().unwrap();
    match d.gather(&b, &bad, OutOfRange::Error) {
        Err(OpError::IndexOutOfRange { index: 250, position: 1, len: 250, .. }) => {}
        other => panic!("expected index 250 at position 1 out of range, got {other:?}"),
    }
    let after = d.transfers().unwrap().since(&before);
    assert_eq!((after.uploads, after.downloads), (0, 2));
    // Clones share the counters; everything dropped, nothing is left in use.
    let twin = d.clone();
    drop((b, i, e, g, m, s, mx, at, back, bad));
    assert_eq!(twin.device_memory().unwrap().in_use, 0);
}

/// The device tests, instantiated once per kernel device.
macro_rules! device_suite {
    ($module:ident, $runtime:ty) => {
        mod $module {
            use super::*;

            type D = KernelDevice<$runtime>;

            #[test]
            fn primitives_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " primitives"), both_index(primitives::<D>));
            }

            #[test]
            fn histogram_primitives_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(
                    &d,
                    f64_ok,
                    concat!(stringify!($module), " histogram primitives"),
                    both_index(hist_primitives::<D>),
                );
            }

            #[test]
            #[ignore = "slow tier, 82 s in a debug build on 2 cores: .ci/run runs it"]
            fn histogram_rules_match_the_cpu_and_the_oracle() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " rules"), both_index(rules::<D>));
                // The chunked rule's kernels both ways: a work-group per chunk, one work-item per chunk.
                let (groups, single) = (d.clone().with_group_chunks(true), d.with_group_chunks(false));
                each_dtype(
                    &groups,
                    f64_ok,
                    concat!(stringify!($module), " rules, chunk groups"),
                    both_index(chunked_rule::<D>),
                );
                each_dtype(
                    &single,
                    f64_ok,
                    concat!(stringify!($module), " rules, no chunk groups"),
                    both_index(chunked_rule::<D>),
                );
            }

            #[test]
            fn extreme_values_follow_the_stated_semantics() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " extremes"), both_index(extremes::<D>));
                let (groups, single) = (d.clone().with_group_chunks(true), d.with_group_chunks(false));
                each_dtype(
                    &groups,
                    f64_ok,
                    concat!(stringify!($module), " extremes, chunk groups"),
                    both_index(extremes::<D>),
                );
                each_dtype(
                    &single,
                    f64_ok,
                    concat!(stringify!($module), " extremes, no chunk groups"),
                    both_index(extremes::<D>),
                );
            }

            #[test]
            fn large_sorts_and_scans_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(
                    &d,
                    f64_ok,
                    concat!(stringify!($module), " large sorts and scans"),
                    both_index(large_sorts_and_scans::<D>),
                );
            }

            #[test]
            fn dense_ops_match_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " dense ops"), dense_ops::<D>);
            }

            #[test]
            fn nested_ad_through_dense_ops_matches_the_cpu() {
                let Some(d) = open::<$runtime>() else { return };
                let f64_ok = d.has_f64();
                each_dtype(&d, f64_ok, concat!(stringify!($module), " nested dense AD"), nested_dense_ad::<D>);
            }

            #[test]
            fn i32_indices_beyond_2_pow_31_are_refused() {
                let Some(d) = open::<$runtime>() else { return };
                index_overflow_is_refused(&d);
            }

            #[test]
            fn counts_transfers_and_device_memory() {
                let Some(d) = open::<$runtime>() else { return };
                transfers_and_memory(&d);
            }

            #[test]
            fn builds_every_kernel_of_every_program() {
                let Some(d) = open::<$runtime>() else { return };
                let before = d.compile_time();
                for dt in DType::ALL {
                    if dt == DType::F64 && !d.has_f64() {
                        continue;
                    }
                    for (op, it) in HistOp::named().into_iter().flat_map(|op| IndexDType::ALL.map(|it| (op, it))) {
                        let names = d.build_program(dt, op, it).unwrap_or_else(|e| panic!("{dt} {op} {it}: {e}"));
                        assert_eq!(names, adgauge_backends::kernel_source::kernel_names(dt));
                    }
                }
                let spent = d.compile_time() - before;
                eprintln!("{} kernel compile time (programs built here): {spent:?}", stringify!($module));
            }

            #[test]
            fn unavailable_f64_and_bad_arguments_are_errors_not_panics() {
                let Some(d) = open::<$runtime>() else { return };
                let x = d.tensor(&[1.0, 2.0], &[2], DType::F32).unwrap();
                let y = d.tensor(&[1.0, 2.0, 3.0], &[3], DType::F32).unwrap();
                assert!(matches!(d.binary(BinaryOp::Add, &x, &y), Err(OpError::Shape { .. })));
                let i = d.index(&[0]).unwrap();
                assert!(matches!(d.reduce_by_index(&x, HistOp::Add, &i, &y), Err(OpError::Shape { .. })));
                assert!(d.total_form_adjoint(HistOp::Min, &i, &x, &x, &x).is_err());
                let _ = Extremum::Min;
            }
        }
    };
}

device_suite!(opencl, adgauge_backends::opencl::ClRuntime);
device_suite!(cuda, adgauge_backends::cuda::CudaRuntime);

/// Where CUDA cannot start (every machine without an NVIDIA driver), the probe and the
/// constructor report why instead of panicking.
#[test]
fn cuda_probe_gives_a_reason_and_never_panics() {
    let status = adgauge_backends::probe_devices().into_iter().find(|d| d.name == "cuda").expect("cuda is probed");
    assert!(!status.detail.is_empty());
    match adgauge_backends::Cuda::new() {
        Ok(_) => assert!(status.available, "the device opened but the probe says: {}", status.detail),
        Err(e) => {
            assert!(!status.available);
            assert!(e.to_string().contains(&status.detail), "{e} vs {}", status.detail);
        }
    }
}
