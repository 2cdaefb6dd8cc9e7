//! `adgauge check`, `run` and `backends` end to end.

use std::process::{Command, Output};

use serde_json::Value;

fn adgauge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adgauge")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
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
    match adgauge_backends::OpenCl::new() {
        Ok(_) => backends.push("opencl"),
        Err(e) => {
            assert!(!adgauge_datasets::adbench::is_required("opencl"), "ADGAUGE_REQUIRE has opencl, but: {e}");
            eprintln!("skipped the OpenCL half: {e}");
        }
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

    let out = adgauge(&["run", "--json", "--no-save", "--filter", "hist-max[dist=uniform,k=10,"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(row["schema_version"], 1);
        assert_eq!(row["workload"], "hist-max");
        assert!(row["case_id"].as_str().unwrap().contains("k=10,"));
        let status = row["status"].as_str().unwrap();
        assert!(status == "ok" || status == "skipped", "{row}");
        if status == "ok" {
            assert!(row["primal"]["median_s"].as_f64().unwrap() > 0.0);
            assert!(row["vjp"]["median_s"].as_f64().unwrap() > 0.0);
            assert!(row["vjp_peak_bytes"].as_u64().unwrap() > 0);
            assert!(row["checks"].as_array().unwrap().iter().all(|c| c["passed"] == true));
        }
    }
}

#[test]
fn backends_lists_every_device_with_a_reason() {
    let out = adgauge(&["backends", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let devices: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<&str> = devices.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cpu", "opencl", "cuda"]);
    assert_eq!(devices[0]["available"], true);
    for d in &devices {
        assert!(!d["detail"].as_str().unwrap().is_empty());
    }
}
