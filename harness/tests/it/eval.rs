//! `adgauge eval` end to end: the binary's JSON answers against the sequential oracle on
//! adversarial inputs, and its refusals of malformed input (exit 2, the field named).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use adgauge_backends::{DType, HistOp, oracle};
use serde_json::{Value, json};

use common::adgauge;

fn write_case(name: &str, v: &str) -> PathBuf {
    common::temp_file("eval-tests", name, v)
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Number(x) => x.as_f64().unwrap(),
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        Value::String(s) if s == "nan" => f64::NAN,
        other => panic!("not a number: {other}"),
    }
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(number).collect()
}

struct Case {
    name: &'static str,
    dest: Vec<f64>,
    inds: Vec<i64>,
    vals: Vec<f64>,
}

/// Ties with dest and between elements, bins with 0, 1 and 2+ zeros, empty bins, indices -1 and
/// >= k, and the degenerate n = 0 and k = 1.
fn adversarial() -> Vec<Case> {
    vec![
        Case {
            name: "mixed",
            dest: vec![1.0, 0.0, 2.5, -1.0, 3.0],
            inds: vec![0, 1, 0, 1, 2, 2, 2, -1, 5, 9, 0, 1, 3],
            vals: vec![1.0, 0.0, 0.3, 0.0, 2.5, 0.0, 0.7, 4.0, 5.0, 6.0, 1.0, 0.0, -1.0],
        },
        Case { name: "empty", dest: vec![0.5, -0.25], inds: vec![], vals: vec![] },
        Case { name: "one-bin", dest: vec![0.75], inds: vec![0, 0, 0, -1], vals: vec![0.75, 1.5, 0.1, 9.0] },
        Case { name: "zeros", dest: vec![2.0, 3.0], inds: vec![0, 0, 1, 1, 1], vals: vec![0.0, 0.0, 0.0, 0.5, 0.25] },
    ]
}

fn case_json(c: &Case, bar: &[f64], vals_dot: &[f64], dest_dot: &[f64]) -> String {
    json!({"k": c.dest.len(), "inds": c.inds, "vals": c.vals, "dest": c.dest, "hist_bar": bar,
           "vals_dot": vals_dot, "dest_dot": dest_dot})
    .to_string()
}

/// Every workload's operator: the special ones and the shipped general ones.
fn ops() -> Vec<HistOp> {
    ["add", "mul", "min", "max", "logaddexp", "hypot"].iter().map(|n| n.parse().unwrap()).collect()
}

#[test]
fn eval_matches_the_oracle_on_adversarial_inputs_for_every_op_rule_mode_and_dtype() {
    for base in adversarial() {
        for op in ops() {
            // hypot's neutral element 0 is neutral on magnitudes only: its inputs are magnitudes.
            let c = if op.name() == "hypot" {
                Case {
                    name: base.name,
                    dest: base.dest.iter().map(|x| x.abs()).collect(),
                    inds: base.inds.clone(),
                    vals: base.vals.iter().map(|x| x.abs()).collect(),
                }
            } else {
                Case { name: base.name, dest: base.dest.clone(), inds: base.inds.clone(), vals: base.vals.clone() }
            };
            let k = c.dest.len();
            let bar: Vec<f64> = (0..k).map(|b| 1.0 + 0.5 * b as f64).collect();
            let vals_dot: Vec<f64> = (0..c.vals.len()).map(|i| 0.25 * (i % 5) as f64 - 0.5).collect();
            let dest_dot: Vec<f64> = (0..k).map(|b| 0.75 - 0.5 * b as f64).collect();
            let path =
                write_case(&format!("{}-{}.json", c.name, op.name()), &case_json(&c, &bar, &vals_dot, &dest_dot));
            for dt in DType::ALL {
                let r = |xs: &[f64]| -> Vec<f64> { xs.iter().map(|&x| dt.round(x)).collect() };
                let (h, db, vb) = oracle::hist_vjp(op, &r(&c.dest), &c.inds, &r(&c.vals), &bar);
                let (_, hd) = oracle::hist_jvp(op, &r(&c.dest), &c.inds, &r(&c.vals), &r(&dest_dot), &r(&vals_dot));
                let exact = matches!(op, HistOp::Min | HistOp::Max);
                let ulps = if matches!(op, HistOp::General(_)) { 64.0 } else { 8.0 };
                let close = |got: &[f64], want: &[f64]| {
                    got.len() == want.len()
                        && got.iter().zip(want).all(|(&g, &w)| {
                            // The JSON holds the shortest decimal of the dtype's value.
                            let g = dt.round(g);
                            if exact { g == w } else { (g - w).abs() <= ulps * dt.epsilon() * w.abs().max(1.0) }
                        })
                };
                for rule in ["auto", "special", "general-sort", "general-chunked"] {
                    for mode in ["primal", "vjp", "jvp"] {
                        let out = adgauge(&[
                            "eval",
                            &format!("hist-{}", op.name()),
                            "--input",
                            path.to_str().unwrap(),
                            "--mode",
                            mode,
                            "--rule",
                            rule,
                            "--dtype",
                            dt.name(),
                        ]);
                        let what = format!("{} {op} {rule} {mode} {dt}", c.name);
                        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
                        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                        assert!(close(&numbers(&v["hist"]), &h), "{what}: hist {} vs {h:?}", v["hist"]);
                        if mode == "vjp" {
                            assert!(
                                close(&numbers(&v["vals_bar"]), &vb),
                                "{what}: vals_bar {} vs {vb:?}",
                                v["vals_bar"]
                            );
                            assert!(
                                close(&numbers(&v["dest_bar"]), &db),
                                "{what}: dest_bar {} vs {db:?}",
                                v["dest_bar"]
                            );
                        } else if mode == "jvp" {
                            assert!(
                                close(&numbers(&v["hist_dot"]), &hd),
                                "{what}: hist_dot {} vs {hd:?}",
                                v["hist_dot"]
                            );
                        } else {
                            assert!(v.get("vals_bar").is_none() && v.get("hist_dot").is_none());
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn f32_results_print_as_the_shortest_f32_decimal_and_non_finite_as_strings() {
    let path = write_case("f32.json", r#"{"k": 3, "inds": [0, 1], "vals": [0.1, "inf"], "dest": [0, 1, "nan"]}"#);
    let out = adgauge(&["eval", "hist-add", "--input", path.to_str().unwrap(), "--dtype", "f32"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim(), r#"{"hist": [0.1, "inf", "nan"]}"#);
}

#[test]
fn malformed_inputs_exit_2_and_name_the_field() {
    let cases = [
        ("notjson.json", "{\"k\": ", "not valid JSON"),
        ("array.json", "[]", "expected a JSON object"),
        ("nok.json", r#"{"inds": [], "vals": [], "dest": []}"#, "field k"),
        ("negk.json", r#"{"k": -1, "inds": [], "vals": [], "dest": []}"#, "field k"),
        ("hugek.json", r#"{"k": 1000000000000000, "inds": [], "vals": [], "dest": []}"#, "field k"),
        ("frac.json", r#"{"k": 1, "inds": [0.5], "vals": [1], "dest": [0]}"#, "field inds[0]"),
        ("len.json", r#"{"k": 2, "inds": [0], "vals": [1], "dest": [0]}"#, "field dest"),
        ("vals.json", r#"{"k": 1, "inds": [0], "vals": [1, 2], "dest": [0]}"#, "field vals"),
        ("op.json", r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0], "op": "max"}"#, "field op"),
        ("nobar.json", r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0]}"#, "field hist_bar"),
    ];
    for (name, text, needle) in cases {
        let path = write_case(name, text);
        let out = adgauge(&["eval", "hist-add", "--input", path.to_str().unwrap(), "--mode", "vjp"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(needle), "{name}: '{err}' does not mention {needle}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = adgauge(&["eval", "hist-add", "--input", "/nonexistent/case.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/case.json"));
}

/// `--index-dtype` picks the indices' dtype on the device: i32 and i64 give the same histogram
/// and adjoints (out-of-range indices dropped by both); without it an index beyond i32 makes
/// them i64, and with `--index-dtype i32` it is refused naming its position and value.
#[test]
fn the_index_dtype_option_gives_the_same_results_and_i32_refuses_indices_beyond_it() {
    let big = 1i64 << 31;
    let fits = json!({"k": 3, "inds": [0, 2, -1, 2, 7, 0], "vals": [1.5, 2, 3, 4, 5, 0.25], "dest": [0, 0, 1],
                      "hist_bar": [1, 2, 3]})
    .to_string();
    let wide = json!({"k": 3, "inds": [0, 2, -1, big, 2], "vals": [1.5, 2, 3, 4, 0.5], "dest": [0, 0, 1],
                      "hist_bar": [1, 2, 3]})
    .to_string();
    let (fits, wide) = (write_case("index-fits.json", &fits), write_case("index-wide.json", &wide));
    let run = |path: &PathBuf, extra: &[&str]| {
        let mut args = vec!["eval", "hist-add", "--input", path.to_str().unwrap(), "--mode", "vjp"];
        args.extend(extra);
        adgauge(&args)
    };
    let json_of = |out: &std::process::Output| -> Vec<Vec<f64>> {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        ["hist", "vals_bar", "dest_bar"].iter().map(|f| numbers(&v[*f])).collect()
    };
    let want = vec![vec![1.75, 0.0, 7.0], vec![1.0, 3.0, 0.0, 3.0, 0.0, 1.0], vec![1.0, 2.0, 3.0]];
    for extra in [&[][..], &["--index-dtype", "i32"], &["--index-dtype", "i64"]] {
        assert_eq!(json_of(&run(&fits, extra)), want, "{extra:?}");
    }
    // 2^31 is out of range (k = 3): dropped, as with i64 indices.
    let want_wide = vec![vec![1.5, 0.0, 3.5], vec![1.0, 3.0, 0.0, 0.0, 3.0], vec![1.0, 2.0, 3.0]];
    assert_eq!(json_of(&run(&wide, &[])), want_wide);
    assert_eq!(json_of(&run(&wide, &["--index-dtype", "i64"])), want_wide);
    for (extra, needle) in [
        (["--index-dtype", "i32"], "field inds[3]: 2147483648 does not fit --index-dtype i32"),
        (["--index-dtype", "i16"], "unknown index dtype 'i16'"),
    ] {
        let out = run(&wide, &extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(needle) && !err.contains("panicked"), "{extra:?}: {err}");
    }
}

#[test]
fn usage_errors_exit_2_and_unavailable_backends_exit_4() {
    let path = write_case("ok.json", r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0]}"#);
    let p = path.to_str().unwrap();
    assert_eq!(adgauge(&["eval", "hist-nope", "--input", p]).status.code(), Some(2));
    assert_eq!(adgauge(&["eval", "hist-add", "--input", p, "--dtype", "f16"]).status.code(), Some(2));
    assert_eq!(adgauge(&["eval", "hist-add", "--input", p, "--rule", "magic"]).status.code(), Some(2));
    assert_eq!(adgauge(&["eval", "hist-add", "--input", p, "--backend", "tpu"]).status.code(), Some(2));
    // CUDA: exit 4 with the probe's reason (e.g. no driver) where it cannot start.
    let out = adgauge(&["eval", "hist-add", "--input", p, "--backend", "cuda"]);
    match adgauge_backends::Cuda::new() {
        Err(e) => {
            assert_eq!(out.status.code(), Some(4));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("backend cuda is unavailable") && stderr.contains(&e.to_string()), "{stderr}");
        }
        Ok(_) => assert_eq!(out.status.code(), Some(0)),
    }
    // OpenCL without any driver registered (an empty vendor directory for the ICD loader): exit
    // 4 with the reason, never a crash.
    let out = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["eval", "hist-add", "--input", p, "--backend", "opencl"])
        .env("OCL_ICD_VENDORS", "/nonexistent-adgauge-vendors")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("opencl"));
}

#[test]
#[ignore = "slow tier, 26 s in a debug build on 2 cores: .ci/run runs it"]
fn gpu_eval_matches_cpu_on_adversarial_input_when_available() {
    let mut gpus = Vec::new();
    if common::opencl_available() {
        gpus.push("opencl");
    }
    if common::cuda_available() {
        gpus.push("cuda");
    }
    // Ties with dest, elements tied with each other, out-of-range indices, an empty bin.
    let path = write_case(
        "adversarial.json",
        r#"{"k": 4, "inds": [0, 1, 0, 2, -1, 5, 0, 1], "vals": [2, 0, 2, 3, 9, 9, 1, 0],
            "dest": [2, 1, 3, 0.5], "hist_bar": [1, 2, 3, 4],
            "vals_dot": [1, 1, 1, 1, 1, 1, 1, 1], "dest_dot": [0.5, 0.5, 0.5, 0.5]}"#,
    );
    let p = path.to_str().unwrap();
    for w in ["hist-add", "hist-mul", "hist-min", "hist-max", "hist-logaddexp", "hist-hypot"] {
        for rule in ["auto", "general-sort", "general-chunked"] {
            for dtype in ["f32", "f64"] {
                for mode in ["primal", "vjp", "jvp"] {
                    let run = |b: &str| {
                        let out = adgauge(&[
                            "eval",
                            w,
                            "--input",
                            p,
                            "--mode",
                            mode,
                            "--rule",
                            rule,
                            "--dtype",
                            dtype,
                            "--backend",
                            b,
                        ]);
                        assert_eq!(out.status.code(), Some(0), "{w} {rule} {dtype} {mode} on {b}: {out:?}");
                        serde_json::from_slice::<Value>(&out.stdout).unwrap()
                    };
                    let c = run("cpu");
                    for gpu in &gpus {
                        let o = run(gpu);
                        for (key, cv) in c.as_object().unwrap() {
                            let ov = &o[key];
                            for (x, y) in cv.as_array().unwrap().iter().zip(ov.as_array().unwrap()) {
                                let (x, y) = (number(x), number(y));
                                assert!(
                                    x == y || (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                                    "{w} {rule} {dtype} {mode} {key}: cpu {x} {gpu} {y}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
