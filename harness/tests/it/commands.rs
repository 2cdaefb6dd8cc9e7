//! `adgauge check`, `run` and `backends` end to end.

use crate::common;

use std::process::Command;

use serde_json::Value;

use common::{adgauge, opencl_available, stderr, stdout};

#[test]
#[ignore = "slow tier, 49 s in a debug build on 2 cores: .ci/run runs it"]
fn check_passes_on_the_real_rules_in_both_dtypes() {
    let out = adgauge(&["check", "--workload", "hist-add", "--workload", "hist-min"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for needle in ["hist-add", "hist-min", "/f32/", "/f64/", "oracle-vjp", "fd-vjp", "rule-agreement"] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    assert!(!text.contains("FAILED"));
}

#[test]
fn check_validates_the_classic_workloads_on_cpu_and_opencl() {
    let mut backends = vec!["cpu"];
    if opencl_available() {
        backends.push("opencl");
    }
    for backend in backends {
        let out = adgauge(&[
            "check",
            "--workload",
            "kmeans",
            "--workload",
            "gmm",
            "--workload",
            "lstm",
            "--dtype",
            "f32",
            "--backend",
            backend,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
        let text = stdout(&out);
        for w in ["kmeans[", "gmm[", "lstm["] {
            for check in ["dot-product", "fd-jvp", "fd-vjp", "manual"] {
                let line = text
                    .lines()
                    .find(|l| l.starts_with(w) && l.contains(&format!("/{backend}/f32/")) && l.contains(check));
                assert!(line.is_some_and(|l| l.ends_with("ok")), "{w} {check} on {backend}:\n{text}");
            }
        }
    }
}

/// OpenCL rows record the kernel compile time of the case (the first case compiles its
/// program, a later case of the same program compiles nothing); CPU rows have none.
#[test]
fn run_records_kernel_compile_time_apart_from_timings() {
    if !opencl_available() {
        return;
    }
    let suite = common::temp_file(
        "compile",
        "s.yaml",
        "name: s\ntiming: {samples: 1, time_limit_s: 0.05}\ncases:\n  - workload: hist\n    ops: [hypot]\n    rules: [auto]\n    n: [1000, 2000]\n    k: [4]\n    dtypes: [f32]\n    backends: [cpu, opencl]\n    validate: false\n",
    );
    let out = adgauge(&["run", "--suite", suite.to_str().unwrap(), "--json", "--no-save"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Value> = common::case_rows(&out);
    let compile = |backend: &str| -> Vec<Value> {
        rows.iter().filter(|r| r["backend"] == backend).map(|r| r["compile_s"].clone()).collect()
    };
    assert!(compile("cpu").iter().all(Value::is_null), "{rows:?}");
    let ocl: Vec<f64> = compile("opencl").iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(ocl.len(), 2, "{rows:?}");
    assert!(ocl[0] > 0.0, "the first OpenCL case builds the hypot program: {ocl:?}");
    assert_eq!(ocl[1], 0.0, "the second finds it cached: {ocl:?}");
    std::fs::remove_dir_all(suite.parent().unwrap()).unwrap();
}

/// Rows record the rule a case ran beside the one it named: on the CPU, `auto` takes the
/// general chunked rule for `*` with many bins per value and `*`'s own rule otherwise.
#[test]
fn run_records_the_rule_auto_took() {
    let suite = common::temp_file(
        "rule-used",
        "s.yaml",
        "name: s\ntiming: {samples: 1, time_limit_s: 0.05}\ncases:\n  - workload: hist\n    ops: [mul]\n    rules: [auto]\n    n: [1000]\n    k: [10, 100]\n    dtypes: [f64]\n    validate: false\n",
    );
    let out = adgauge(&["run", "--suite", suite.to_str().unwrap(), "--json", "--no-save"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Value> = common::case_rows(&out);
    let used = |k: &str| -> Vec<Value> {
        rows.iter().filter(|r| r["params"]["k"] == k).map(|r| r["rule_used"].clone()).collect()
    };
    assert!(!used("10").is_empty() && used("10").iter().all(|r| r == "special"), "{rows:?}");
    assert!(!used("100").is_empty() && used("100").iter().all(|r| r == "general-chunked"), "{rows:?}");
    assert!(rows.iter().all(|r| r["rule"] == "auto"), "{rows:?}");
    // The table says both.
    let out = adgauge(&["run", "--suite", suite.to_str().unwrap(), "--no-save"]);
    let table = stdout(&out);
    assert!(table.contains("auto:chunked") && table.contains("auto:special"), "{table}");
    std::fs::remove_dir_all(suite.parent().unwrap()).unwrap();
}

#[test]
fn check_catches_a_rule_that_drops_dests_adjoint_with_exit_1() {
    let out = adgauge(&["check", "--workload", "hist-add", "--dtype", "f64", "--inject-fault", "drop-dest-adjoint"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    // The failure names the case, the check and the worst value.
    assert!(err.contains("hist-add[") && err.contains("/cpu/f64/"), "{err}");
    assert!(err.contains("oracle-vjp worst"), "{err}");
    assert!(err.contains("fd-vjp worst"), "{err}");
}

#[test]
fn check_catches_a_primal_that_forgets_dest_though_every_derivative_is_right() {
    // Finite differences take their primal from the CPU in f64, so only the device primals'
    // comparison with the oracle can see this.
    let out = adgauge(&["check", "--workload", "hist-add", "--dtype", "f64", "--inject-fault", "drop-dest-primal"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("hist-add[") && err.contains("oracle-primal worst"), "{err}");
    for derivative in ["oracle-vjp worst", "fd-vjp worst", "oracle-jvp worst", "rule-agreement worst"] {
        assert!(!err.contains(derivative), "{derivative}: {err}");
    }
}

#[test]
fn run_lists_filters_and_prints_json_rows() {
    let out = adgauge(&["run", "--list"]);
    assert_eq!(out.status.code(), Some(0));
    let listing = stdout(&out);
    let ids: Vec<&str> = listing.lines().map(str::trim).collect();
    assert!(ids.len() >= 16);
    assert!(ids.iter().any(|id| id.starts_with("hist-mul[") && id.ends_with("/special")));

    let out = adgauge(&["run", "--filter", "no-such-case"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-case"));

    let out = adgauge(&["run", "--json", "--no-save", "--filter", "hist-max[dist=uniform,index_dtype=i32,k=10,"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The same lines as the run file: one per case and mode, its columns, typed.
    let lines: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty());
    let primal = |case: &Value| -> f64 {
        lines.iter().find(|l| l["case_id"] == *case && l["mode"] == "primal").unwrap()["median_s"].as_f64().unwrap()
    };
    for line in &lines {
        assert_eq!(line["schema_version"], adgauge_reports::SCHEMA_VERSION);
        assert_eq!(line["workload"], "hist-max");
        assert_eq!(line["param.k"], 10, "{line}");
        assert!(line["case_id"].as_str().unwrap().contains("k=10,"));
        let status = line["status"].as_str().unwrap();
        assert!(status == "ok" || status == "skipped", "{line}");
        // Every line says which run and machine it comes from.
        assert!(line["run_id"].as_str().is_some_and(|id| !id.is_empty()), "{line}");
        assert_eq!(line["suite"], "default", "{line}");
        assert!(
            line["git_revision"].is_string() && line["machine"].is_string() && line["cores"].as_u64().unwrap() >= 1
        );
        if status == "ok" {
            // The rule the case ran: `auto` is max's own rule on the CPU, a named rule itself.
            let rule = line["rule"].as_str().unwrap();
            assert_eq!(line["rule_used"], if rule == "auto" { "special" } else { rule }, "{line}");
            let mode = line["mode"].as_str().unwrap();
            assert!(["primal", "vjp", "jvp"].contains(&mode), "{line}");
            assert!(line["median_s"].as_f64().unwrap() > 0.0);
            assert!(line["sample_s"].as_array().unwrap().len() as u64 == line["samples"].as_u64().unwrap(), "{line}");
            if mode == "vjp" {
                assert!(line["peak_bytes"].as_u64().unwrap() > 0, "{line}");
                let overhead = line["overhead"].as_f64().unwrap();
                let want = line["median_s"].as_f64().unwrap() / primal(&line["case_id"]);
                assert!((overhead - want).abs() <= 1e-12 * overhead, "{line}");
            }
            let checks: Vec<(&String, &Value)> =
                line.as_object().unwrap().iter().filter(|(k, _)| k.ends_with(".passed")).collect();
            assert!(!checks.is_empty() && checks.iter().all(|(_, v)| **v == true), "{line}");
        }
    }
}

#[test]
fn backends_lists_every_device_with_a_reason() {
    let out = adgauge(&["backends", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let devices: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<&str> = devices.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cpu", "cpu-staged", "cpu-traced", "cpu-jit", "cpu-jit-flush", "opencl", "cuda"]);
    let x86 = cfg!(target_arch = "x86_64");
    for cpu_device in &devices[..4].iter().chain(devices[4..5].iter().filter(|_| x86)).collect::<Vec<_>>() {
        assert_eq!(cpu_device["available"], true, "{cpu_device}");
    }
    for d in &devices {
        assert!(!d["detail"].as_str().unwrap().is_empty());
    }
}

/// `backends --roofline` puts the CPU's roofline on the cpu line only: the sequential read
/// rate, and random read and update rates at each default bin count, in order, on the threads
/// asked for, with its seed.
#[test]
#[ignore = "slow tier, 32 s in a debug build on 2 cores: .ci/run runs it"]
fn backends_roofline_measures_the_cpu_on_its_threads() {
    let out = adgauge(&["--threads", "2", "backends", "--json", "--roofline"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let devices: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let with: Vec<&str> =
        devices.iter().filter(|d| d.get("roofline").is_some()).map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(with, ["cpu"]);
    let r = &devices[0]["roofline"];
    assert_eq!(r["threads"], 2, "{r}");
    assert!(r["seq_read_bytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["seed"].as_u64().is_some(), "{r}");
    let random = r["random_4_byte"].as_array().unwrap();
    let bins: Vec<u64> = random.iter().map(|x| x["bins"].as_u64().unwrap()).collect();
    assert_eq!(bins, [10, 1_000, 10_000, 100_000, 1_000_000]);
    for x in random {
        assert!(x["reads_per_s"].as_f64().unwrap() > 0.0 && x["updates_per_s"].as_f64().unwrap() > 0.0, "{x}");
    }
    let text = adgauge(&["backends", "--roofline"]);
    assert_eq!(text.status.code(), Some(0));
    let text = stdout(&text);
    assert!(text.lines().any(|l| l.starts_with("cpu") && l.contains("roofline") && l.contains("GB/s")), "{text}");
}

/// A libcuda that loads but is not a CUDA driver (here: a copy of the C library this test runs
/// on, which has no `cuInit`) makes cudarc panic inside; adgauge catches that and reports CUDA
/// unavailable with the reason, with no panic message on the terminal, and `--backend cuda`
/// exits 4.
#[cfg(target_os = "linux")]
#[test]
fn a_libcuda_without_cuda_symbols_is_reported_not_a_crash() {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let libc = maps
        .split_whitespace()
        .find(|w| w.starts_with('/') && w.contains("/libc.so"))
        .expect("this test process maps a libc.so");
    let dir = std::env::temp_dir().join(format!("adgauge-fake-libcuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(libc, dir.join("libcuda.so.1")).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_adgauge")).args(args).env("LD_LIBRARY_PATH", &dir).output().unwrap()
    };

    let out = run(&["backends", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "a panic message leaked: {}", stderr(&out));
    let cuda: Value =
        stdout(&out).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|d| d["name"] == "cuda").unwrap();
    assert_eq!(cuda["available"], false);
    let detail = cuda["detail"].as_str().unwrap();
    assert!(detail.contains("unusable") && detail.contains("cuInit"), "{detail}");

    let input = dir.join("case.json");
    std::fs::write(&input, r#"{"k": 1, "inds": [0], "vals": [1], "dest": [0]}"#).unwrap();
    let out = run(&["eval", "hist-add", "--input", input.to_str().unwrap(), "--backend", "cuda"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("cuInit") && !stderr(&out).contains("panicked"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `adgauge check | head -1`: a reader that goes away ends the output, not the process.
#[test]
fn a_closed_stdout_is_not_a_crash() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_adgauge"))
        .args(["check", "--workload", "hist-add", "--dtype", "f64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("hist-add["), "{first}");
    // The reader is dropped here: every later write meets a closed pipe.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
