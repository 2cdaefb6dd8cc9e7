//! `adgauge eval ba` end to end on ADBench's own `ba/test.txt` (skipped with the reason printed
//! when the ADBench files are absent, a failure when `ADGAUGE_REQUIRE` contains `adbench`):
//! residuals and the CSR Jacobian by reverse (vjp) and forward (jvp) sweeps agree with each other,
//! with the hand-derived Jacobian, and with central differences of the binary's own primal;
//! malformed files exit 2 naming the file and line.

use crate::common;

use adgauge_datasets::ba::BaInput;
use adgauge_testkit::adbench_file;
use adgauge_workloads::ba;
use serde_json::Value;

use common::{adgauge, json};

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    common::temp_file("eval-ba", name, text)
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn ints(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn max_rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / (x.abs() + y.abs()).max(1.0)).fold(0.0, f64::max)
}

/// The residuals [reproj_err, w_err] printed by `adgauge eval ba` (primal) for `path`.
fn primal(path: &str) -> Vec<f64> {
    let v = json(&adgauge(&["eval", "ba", "--input", path]));
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    floats(&v["reproj_err"]).into_iter().chain(floats(&v["w_err"])).collect()
}

#[test]
fn eval_ba_on_adbench_test_file_agrees_across_modes_manual_and_differences() {
    let Some(path) = adbench_file("ba/test.txt") else { return };
    let p = path.to_str().unwrap();
    let b = BaInput::read(&path).unwrap();
    let man = ba::manual::<f64>(&b);
    let jm = man.jacobian.clone().unwrap();

    let values = primal(p);
    let want: Vec<f64> = man.reproj_err.iter().chain(&man.w_err).copied().collect();
    assert_eq!(values.len(), 3 * b.p);
    let d = max_abs_diff(&values, &want);
    eprintln!("test.txt primal vs manual: max abs diff {d:e}");
    assert!(max_rel(&values, &want) < 1e-13);

    let mut dense = Vec::new();
    for mode in ["vjp", "jvp"] {
        let v = json(&adgauge(&["eval", "ba", "--input", p, "--mode", mode]));
        let r: Vec<f64> = floats(&v["reproj_err"]).into_iter().chain(floats(&v["w_err"])).collect();
        assert_eq!(r, values, "{mode}: residuals differ from the primal's");
        let j = &v["jacobian"];
        let (nrows, ncols) = (j["nrows"].as_u64().unwrap() as usize, j["ncols"].as_u64().unwrap() as usize);
        assert_eq!((nrows, ncols), (3 * b.p, 11 * b.n + 3 * b.m + b.p));
        assert_eq!(ints(&j["rows"]), *jm.pattern.rows, "{mode}: row pointers");
        assert_eq!(ints(&j["cols"]), *jm.pattern.cols, "{mode}: columns");
        let vals = floats(&j["vals"]);
        eprintln!("test.txt {mode} Jacobian vs manual: max abs diff {:e}", max_abs_diff(&vals, &jm.vals));
        assert!(max_rel(&vals, &jm.vals) < 1e-12, "{mode}: {}", max_rel(&vals, &jm.vals));
        dense.push(ba::SparseJacobian { pattern: jm.pattern.clone(), vals }.to_dense());
    }
    eprintln!("test.txt reverse vs forward: max abs diff {:e}", max_abs_diff(&dense[0], &dense[1]));
    assert!(max_rel(&dense[0], &dense[1]) < 1e-12);

    // Central differences of the binary's primal. The file holds one camera, point and weight,
    // replicated, so changing a number of the file moves that parameter of every camera (point,
    // weight) at once: the difference quotient is the sum of the Jacobian's columns for it.
    let (n, m, np) = (b.n, b.m, b.p);
    let ncols = 11 * n + 3 * m + np;
    let mut worst: f64 = 0.0;
    for (what, k) in [("cam", 0), ("cam", 2), ("cam", 4), ("cam", 6), ("cam", 8), ("cam", 10), ("x", 1), ("w", 0)] {
        let moved = |h: f64| {
            let mut q = b.clone();
            match what {
                "cam" => (0..n).for_each(|c| q.cams[11 * c + k] += h),
                "x" => (0..m).for_each(|j| q.x[3 * j + k] += h),
                _ => q.w.iter_mut().for_each(|w| *w += h),
            }
            let file = temp_file(&format!("fd-{what}{k}-{h}.txt"), &q.to_text().unwrap());
            primal(file.to_str().unwrap())
        };
        let base = match what {
            "cam" => b.cams[k],
            "x" => b.x[k],
            _ => b.w[0],
        };
        let h = 1e-5 * base.abs().max(1.0);
        let (fp, fm) = (moved(h), moved(-h));
        let cols: Vec<usize> = match what {
            "cam" => (0..n).map(|c| 11 * c + k).collect(),
            "x" => (0..m).map(|j| 11 * n + 3 * j + k).collect(),
            _ => (0..np).map(|i| 11 * n + 3 * m + i).collect(),
        };
        for r in 0..3 * np {
            let fd = (fp[r] - fm[r]) / (2.0 * h);
            let ad: f64 = cols.iter().map(|&c| dense[0][r * ncols + c]).sum();
            let err = (fd - ad).abs() / fd.abs().max(ad.abs()).max(1.0);
            worst = worst.max(err);
            assert!(err < 1e-6, "{what}[{k}] row {r}: Jacobian {ad} vs difference {fd}");
        }
    }
    eprintln!("test.txt Jacobian vs central differences of the primal: worst relative {worst:e}");
}

#[test]
fn eval_ba_in_f32_agrees_with_the_f32_manual() {
    let b = BaInput::generate(3, 7, 20, 4);
    let path = temp_file("gen.txt", &b.to_text().unwrap());
    let p = path.to_str().unwrap();
    let man = ba::manual::<f32>(&b);
    let jm = man.jacobian.unwrap();
    for mode in ["vjp", "jvp"] {
        let v = json(&adgauge(&["eval", "ba", "--input", p, "--mode", mode, "--dtype", "f32"]));
        assert!(max_rel(&floats(&v["reproj_err"]), &man.reproj_err) < 1e-5, "{mode}");
        let vals = floats(&v["jacobian"]["vals"]);
        let scale = jm.vals.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        assert!(max_abs_diff(&vals, &jm.vals) <= 1e-5 * scale, "{mode}: {}", max_abs_diff(&vals, &jm.vals));
    }
}

#[test]
fn malformed_ba_files_exit_2_naming_file_and_line() {
    let text = BaInput::generate(2, 3, 4, 0).to_text().unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "1.0 oops 2.0";
    let path = temp_file("bad.txt", &(lines.join("\n") + "\n"));
    for mode in ["primal", "vjp", "jvp"] {
        let out = adgauge(&["eval", "ba", "--input", path.to_str().unwrap(), "--mode", mode]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("bad.txt") && err.contains('3') && !err.contains("panicked"), "{err}");
    }
    // A header announcing an absurd size fails before allocating.
    let huge = temp_file("huge.txt", &text.replacen("2 3 4", "2 3 4000000000000", 1));
    let out = adgauge(&["eval", "ba", "--input", huge.to_str().unwrap(), "--mode", "vjp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("huge.txt"));
    // A legal file whose Jacobian would be too large to print (ba20-sized) is refused for
    // vjp/jvp, naming the file and the entry count, before any derivative is computed.
    let big = temp_file("big.txt", &text.replacen("2 3 4", "2 3 5000000", 1));
    let out = adgauge(&["eval", "ba", "--input", big.to_str().unwrap(), "--mode", "jvp"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("big.txt") && err.contains("155000000 entries"), "{err}");
    let out = adgauge(&["eval", "ba", "--input", "/nonexistent/ba.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ba.txt"));
}

#[test]
fn check_validates_ba_in_both_dtypes() {
    let out = adgauge(&["check", "--workload", "ba"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for dtype in ["f32", "f64"] {
        let id = format!("ba[m=10,n=3,p=30]/cpu/{dtype}/-");
        for check in ["dot-product", "fd-jvp", "fd-vjp", "full-jacobian", "manual"] {
            assert!(
                text.lines().any(|l| l.starts_with(&id) && l.contains(check) && l.ends_with(" ok")),
                "{id} {check} missing or failing:\n{text}"
            );
        }
    }
    // Only BA was asked for: no histogram or other classic case ran.
    assert!(text.lines().all(|l| !l.starts_with("hist") && !l.starts_with("gmm")), "{text}");
}
