//! `adgauge eval llsq` on GradBench's input shape, against values computed by hand, on every
//! available device and in both dtypes.

use crate::common;

use common::{adgauge, json, numbers, opencl_available, stderr, temp_file};

/// n = 3: t = (-1, 0, 1), s = (-1, 0, 1). For x = (a, b) = (0.5, 0.25) the residuals are
/// (-1 - a + b, -a, 1 - a - b) = (-1.25, -0.5, 0.25): y = (1.5625 + 0.25 + 0.0625) / 2 = 0.9375,
/// dy/dx = -T^T r = (-(r0 + r1 + r2), -(-r0 + r2)) = (1.5, -1.5).
const INPUT: &str = r#"{"x": [0.5, 0.25], "n": 3, "min_runs": 1, "min_seconds": 0}"#;

#[test]
fn eval_llsq_matches_the_hand_computation_in_every_mode() {
    let path = temp_file("eval-llsq", "in.json", INPUT);
    let p = path.to_str().unwrap();
    let mut backends = vec!["cpu"];
    if opencl_available() {
        backends.push("opencl");
    }
    for backend in backends {
        for dtype in ["f64", "f32"] {
            let primal = json(&adgauge(&["eval", "llsq", "--input", p, "--backend", backend, "--dtype", dtype]));
            assert_eq!(primal["objective"], 0.9375, "{backend} {dtype}");
            assert!(primal.get("gradient").is_none());
            for mode in ["vjp", "jvp"] {
                let out = json(&adgauge(&[
                    "eval",
                    "llsq",
                    "--input",
                    p,
                    "--mode",
                    mode,
                    "--backend",
                    backend,
                    "--dtype",
                    dtype,
                ]));
                assert_eq!(out["objective"], 0.9375, "{backend} {dtype} {mode}");
                assert_eq!(numbers(&out["gradient"]), [1.5, -1.5], "{backend} {dtype} {mode}");
            }
        }
    }
}

#[test]
fn bad_llsq_inputs_and_options_exit_2() {
    let path = temp_file("eval-llsq", "bad.json", r#"{"x": [1, 2], "n": 1}"#);
    let out = adgauge(&["eval", "llsq", "--input", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bad.json: field n: expected a whole number >= 2"), "{}", stderr(&out));
    let good = temp_file("eval-llsq", "good.json", INPUT);
    for args in [["--rule", "auto"], ["--mode", "hessian-diag"], ["--gmm-variant", "gradbench"]] {
        let out = adgauge(&[&["eval", "llsq", "--input", good.to_str().unwrap()][..], &args[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}
