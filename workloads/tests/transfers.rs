//! Host<->device transfers inside the workloads' evaluations on OpenCL: once the inputs are
//! uploaded, the k-means, GMM and LSTM objectives and gradients run without a single copy
//! between host and device until their results are read back, and the read-backs are exactly
//! the ones each function's return type needs; once the results are dropped, the device holds
//! only the inputs again (no tape or intermediate outlives an evaluation). Each test opens its
//! own device handle, whose counters no other test touches.
//!
//! Skipped (with the reason printed) where OpenCL cannot start, unless `ADGAUGE_REQUIRE` has
//! `opencl`: then the skip is a failure.

use std::time::{Duration, Instant};

use adgauge_backends::prelude::*;
use adgauge_backends::{DType, Device, OpenCl, Transfers};
use adgauge_datasets::ba::BaInput;
use adgauge_datasets::gmm::GmmInput;
use adgauge_datasets::lstm::LstmInput;
use adgauge_workloads::{ba, gmm, kmeans, lstm};

/// A fresh OpenCL device handle, or None (the reason printed) when OpenCL cannot start.
fn opencl() -> Option<OpenCl> {
    match OpenCl::new() {
        Ok(d) => Some(d),
        Err(e) => {
            adgauge_testkit::device_unavailable("opencl", e);
            None
        }
    }
}

fn dtype(d: &OpenCl) -> DType {
    if d.has_f64() { DType::F64 } else { DType::F32 }
}

/// The transfers `f` makes, its queue drained.
fn during<R>(d: &OpenCl, f: impl FnOnce() -> R) -> (R, Transfers) {
    let before = d.transfers().expect("the OpenCL device counts transfers");
    let r = f();
    d.synchronize().unwrap();
    (r, d.transfers().unwrap().since(&before))
}

/// Reads of `n` values of `dt` in `reads` read-backs, nothing uploaded.
fn reads(dt: DType, reads: u64, n: usize) -> Transfers {
    Transfers { uploads: 0, downloads: reads, bytes_up: 0, bytes_down: (n * dt.size_bytes()) as u64 }
}

fn close(a: f64, b: f64, dt: DType) -> bool {
    let tol = if dt == DType::F64 { 1e-9 } else { 1e-4 };
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn kmeans_cost_gradient_and_hessian_stay_on_the_device() {
    let Some(d) = opencl() else { return };
    let dt = dtype(&d);
    let data = adgauge_datasets::kmeans::generate(1000, 7, 5, 1);
    let x = kmeans::upload(&d, &data, dt).unwrap();
    let resident = d.device_memory().unwrap().in_use;
    assert_eq!(resident, (data.n + data.k) * data.d * dt.size_bytes(), "points and centres");
    // The functions return device tensors: nothing may cross until they are read.
    let (f, t) = during(&d, || kmeans::cost(&d, &x.points, &x.centres).unwrap());
    assert_eq!(t, Transfers::default(), "k-means cost");
    let ((fg, g), t) = during(&d, || kmeans::gradient(&d, &x).unwrap());
    assert_eq!(t, Transfers::default(), "k-means gradient");
    let ((_, _, h), t) = during(&d, || kmeans::hessian_diag(&d, &x).unwrap());
    assert_eq!(t, Transfers::default(), "k-means Hessian diagonal (forward over reverse)");
    // Reading the results back is one download each; the values are the hand-derived ones.
    let ((fv, fgv, gv, hv), t) = during(&d, || {
        (d.to_vec(&f).unwrap()[0], d.to_vec(&fg).unwrap()[0], d.to_vec(&g).unwrap(), d.to_vec(&h).unwrap())
    });
    assert_eq!(t, reads(dt, 4, 2 + 2 * data.k * data.d));
    // Once the results are dropped only the inputs remain: the tapes and intermediates were
    // freed (and did exist: the peak is above the inputs).
    drop((f, fg, g, h));
    let mem = d.device_memory().unwrap();
    assert_eq!(mem.in_use, resident);
    assert!(mem.peak > resident, "{mem:?}");
    let (f, fg, g, h) = (fv, fgv, gv, hv);
    let want = kmeans::manual_in(&data, dt);
    assert!(close(f, want.cost, dt) && close(fg, want.cost, dt), "cost {f} / {fg} vs {}", want.cost);
    for (j, (a, b)) in g.iter().zip(&want.gradient).enumerate() {
        assert!(close(*a, *b, dt), "gradient[{j}] {a} vs {b}");
    }
    assert_eq!(h, want.hessian_diag);
}

#[test]
fn gmm_objective_and_gradient_stay_on_the_device() {
    let Some(d) = opencl() else { return };
    let dt = dtype(&d);
    let g = GmmInput::generate(3, 4, 200, 1);
    let x = gmm::upload(&d, &g, dt).unwrap();
    let resident = d.device_memory().unwrap().in_use;
    let (f, t) = during(&d, || gmm::objective(&d, &x).unwrap());
    assert_eq!(t, Transfers::default(), "GMM objective");
    assert_eq!(f.shape(), &[1]);
    // gradient returns host values: it reads the objective and the three parameter gradients
    // (alphas, means, icf) back, and nothing else crosses.
    let np = g.k + g.k * g.d + g.k * adgauge_datasets::gmm::icf_size(g.d);
    let ((value, grad), t) = during(&d, || gmm::gradient(&d, &x).unwrap());
    assert_eq!(t, reads(dt, 4, 1 + np), "GMM gradient");
    let (want_value, want_grad) = gmm::manual_in(&g, dt);
    assert!(close(value, want_value, dt), "objective {value} vs {want_value}");
    assert!(close(d.to_vec(&f).unwrap()[0], want_value, dt));
    // Nothing but the inputs outlives the evaluations.
    drop(f);
    assert_eq!(d.device_memory().unwrap().in_use, resident);
    assert_eq!(grad.len(), want_grad.len());
    for (j, (a, b)) in grad.iter().zip(&want_grad).enumerate() {
        assert!(close(*a, *b, dt), "gradient[{j}] {a} vs {b}");
    }
}

#[test]
fn lstm_objective_and_gradient_stay_on_the_device() {
    let Some(d) = opencl() else { return };
    let dt = dtype(&d);
    let s = LstmInput::generate(2, 6, 5, 1);
    let x = lstm::upload(&d, &s, dt).unwrap();
    let resident = d.device_memory().unwrap().in_use;
    // The rows of the parameters are gathered with checked indices; their ranges are known
    // from the upload, so no check is read back.
    let (f, t) = during(&d, || lstm::objective(&d, &x).unwrap());
    assert_eq!(t, Transfers::default(), "LSTM objective");
    // gradient reads the objective and the two parameter gradients (main, extra) back.
    let ((value, grad), t) = during(&d, || lstm::gradient(&d, &x).unwrap());
    assert_eq!(t, reads(dt, 3, 1 + x.num_params()), "LSTM gradient");
    let (want_value, want_grad) = lstm::manual_in(&s, dt);
    assert!(close(value, want_value, dt), "objective {value} vs {want_value}");
    assert!(close(d.to_vec(&f).unwrap()[0], want_value, dt));
    // Nothing but the inputs outlives the evaluations.
    drop(f);
    assert_eq!(d.device_memory().unwrap().in_use, resident);
    for (j, (a, b)) in grad.iter().zip(&want_grad).enumerate() {
        assert!(close(*a, *b, dt), "gradient[{j}] {a} vs {b}");
    }
}

#[test]
fn ba_residuals_stay_on_the_device_and_the_jacobian_reads_back_only_its_columns() {
    let Some(d) = opencl() else { return };
    let dt = dtype(&d);
    let b = BaInput::generate_varied(3, 10, 30, 1);
    let x = ba::upload(&d, &b, dt).unwrap();
    // The residuals themselves: gathers with uploaded (range-known) indices and elementwise ops.
    let (r, t) = during(&d, || {
        let g = x.gather_on(&d, &x.cams, &x.x, &x.w).unwrap();
        ba::residuals_on(&d, &g, &x.feats).unwrap()
    });
    assert_eq!(t, Transfers::default(), "BA residuals");
    drop(r);
    // The objective returns host vectors: x errors, y errors and weight errors, read once each.
    let (_, t) = during(&d, || ba::objective(&d, &x).unwrap());
    assert_eq!(t, reads(dt, 3, 3 * x.p), "BA objective");
    // The Jacobian is assembled on the host by design: per gathered parameter the adjoints
    // seeded on the x and on the y errors, the weight column of the weight errors, and the
    // three residual vectors; nothing is uploaded.
    const N: usize = ba::N_GATHERED;
    let (out, t) = during(&d, || ba::jacobian_reverse(&d, &x).unwrap());
    assert_eq!(t, reads(dt, (2 * N + 1 + 3) as u64, (2 * N + 1 + 3) * x.p), "BA Jacobian (reverse)");
    let want = ba::manual_in(&b, dt);
    let (got, want) = (out.jacobian.unwrap().vals, want.jacobian.unwrap().vals);
    assert_eq!(got.len(), want.len());
    for (j, (a, e)) in got.iter().zip(&want).enumerate() {
        assert!(close(*a, *e, dt), "Jacobian value {j}: {a} vs {e}");
    }
}

/// The minimum seconds of `f` over at least 3 runs after one warm-up, repeated for up to 2 s.
fn best(mut f: impl FnMut()) -> f64 {
    f();
    let (mut best, start) = (f64::INFINITY, Instant::now());
    let mut runs = 0;
    while runs < 3 || (start.elapsed() < Duration::from_secs(2) && runs < 20) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    best
}

/// Objective and gradient times on OpenCL (a measurement, not a check):
/// `cargo test --release -p adgauge-workloads --test transfers -- --ignored --nocapture`.
#[test]
#[ignore]
fn timings_on_opencl() {
    let Some(d) = opencl() else { return };
    let row = |name: &str, obj: f64, grad: f64| {
        println!("{name:<32} objective {:>9.3} ms  gradient {:>9.3} ms", obj * 1e3, grad * 1e3)
    };
    for dt in [DType::F32, DType::F64] {
        for (n, k, dd) in [(10_000, 100, 16), (100_000, 5, 35)] {
            let data = adgauge_datasets::kmeans::generate(n, k, dd, 1);
            let x = kmeans::upload(&d, &data, dt).unwrap();
            let o = best(|| {
                drop(kmeans::cost(&d, &x.points, &x.centres).unwrap());
                d.synchronize().unwrap();
            });
            let g = best(|| {
                drop(kmeans::gradient(&d, &x).unwrap());
                d.synchronize().unwrap();
            });
            row(&format!("{dt} kmeans n{n} k{k} d{dd}"), o, g);
        }
        for (dd, k) in [(10, 50), (20, 200)] {
            let g = GmmInput::generate(dd, k, 1000, 1);
            let x = gmm::upload(&d, &g, dt).unwrap();
            let o = best(|| drop(d.to_vec(&gmm::objective(&d, &x).unwrap()).unwrap()));
            let gr = best(|| drop(gmm::gradient(&d, &x).unwrap()));
            row(&format!("{dt} gmm n1000 d{dd} K{k}"), o, gr);
        }
        for (l, c) in [(2, 1024), (4, 4096)] {
            let s = LstmInput::generate(l, c, 14, 1);
            let x = lstm::upload(&d, &s, dt).unwrap();
            let o = best(|| drop(d.to_vec(&lstm::objective(&d, &x).unwrap()).unwrap()));
            let gr = best(|| drop(lstm::gradient(&d, &x).unwrap()));
            row(&format!("{dt} lstm l{l} c{c} b14"), o, gr);
        }
    }
}

/// Per-op times of the dense kernels on OpenCL next to the CPU device's (a measurement, not a
/// check): `cargo test --release -p adgauge-workloads --test transfers -- --ignored --nocapture`.
#[test]
#[ignore]
fn dense_op_timings_on_opencl() {
    let Some(d) = opencl() else { return };
    let c = adgauge_backends::Cpu::new(None).unwrap();
    fn run<O: Ops + Device>(o: &O, dt: DType) -> Vec<(String, f64)> {
        let t = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            o.tensor(&(0..n).map(|i| ((i * 7) % 13) as f64 * 0.1).collect::<Vec<_>>(), shape, dt).unwrap()
        };
        let (p, cen, dist, tall) = (t(&[10_000, 16]), t(&[100, 16]), t(&[10_000, 100]), t(&[100_000, 5]));
        let mut out = Vec::new();
        let mut time = |name: &str, f: &dyn Fn()| {
            let s = best(|| {
                f();
                o.synchronize().unwrap();
            });
            out.push((name.to_string(), s));
        };
        time("matmul [1e4,16] x [100,16]^T", &|| drop(o.matmul(&p, false, &cen, true).unwrap()));
        time("matmul [1e4,100]^T x [1e4,16]", &|| drop(o.matmul(&dist, true, &p, false).unwrap()));
        time("sum_axis [1e4,100] axis 1", &|| drop(o.sum_axis(&dist, 1).unwrap()));
        time("min_axis [1e4,100] axis 1", &|| drop(o.min_axis(&dist, 1).unwrap()));
        time("sum_to [1e5,5] -> [1,5]", &|| drop(o.sum_to(&tall, &[1, 5]).unwrap()));
        time("broadcast_to [100,16] -> [100,100,16]", &|| drop(o.broadcast_to(&cen, &[100, 100, 16]).unwrap()));
        out
    }
    for dt in [DType::F32, DType::F64] {
        for ((name, g), (_, h)) in run(&d, dt).into_iter().zip(run(&c, dt)) {
            println!("{dt} {name:<34} opencl {:>9.3} ms  cpu {:>9.3} ms", g * 1e3, h * 1e3);
        }
    }
}
