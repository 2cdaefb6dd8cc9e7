//! The GPU kit (`scripts/gpu-kit.sh`, docs/gpu.md) kept working without a GPU: its dry run
//! executes the same `run` steps on the OpenCL device (PoCL) with this test's adgauge binary and
//! a tiny suite, and what it leaves in `$OUT` is read back: the checks passed, every histogram
//! operator's evals matched the CPU device's answers (min and max bit for bit), the copy
//! bandwidth and the timing rows are there, and a step that fails (a planted conformance binary
//! that exits 1) is recorded while the others still run. Also `adgauge backends --bandwidth`,
//! the kit's roofline, on its own.
//!
//! Without OpenCL the tests print why they skip, and fail instead when `ADGAUGE_REQUIRE` lists
//! `opencl`; the dry run needs python3 too (`python` in `ADGAUGE_REQUIRE`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use common::{adgauge, stderr, stdout};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn python3_available() -> bool {
    match Command::new("python3").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        other => {
            adgauge_testkit::skip(
                "python",
                format!("python3 does not run ({other:?}); the kit compares evals with it"),
                "install python3",
            );
            false
        }
    }
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The summary's step table as (step, status) pairs.
fn steps(summary: &str) -> Vec<(String, String)> {
    summary
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| step ") && l.matches('|').count() == 6)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect()
}

#[test]
fn dry_run_on_opencl_checks_evaluates_and_times_and_records_a_failing_step() {
    if !common::opencl_available() || !python3_available() {
        return;
    }
    let out = std::env::temp_dir().join(format!("adgauge-gpu-kit-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new("bash")
        .arg(root().join("scripts/gpu-kit.sh"))
        .args(["run", "--dry-run"])
        .current_dir(root())
        .env("OUT", &out)
        .env("ADGAUGE_BIN", env!("CARGO_BIN_EXE_adgauge"))
        // No kit: this test's binary, not one a `build` left in the checkout.
        .env("GPU_KIT_DIR", out.join("no-kit"))
        // A conformance "binary" that fails: the kit must record it and go on.
        .env("GPU_KIT_CONFORMANCE", "/bin/false")
        .env_remove("GPU_KIT_NVRTC_TEST")
        .env_remove("GPU_KIT_BUDGET_S")
        .output()
        .unwrap();
    let log = format!("{}\n{}", stdout(&run), stderr(&run));
    assert_eq!(run.status.code(), Some(1), "one step failed, so the kit exits 1: {log}");

    // At most 8 files, as the device tool brings back.
    let mut files: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(
        files,
        ["checks.log", "env.txt", "evals.txt", "results.tar.xz", "summary.md", "timing.jsonl", "timing.log"],
        "{log}"
    );

    let summary = read(&out, "summary.md");
    let status: std::collections::BTreeMap<String, String> = steps(&summary).into_iter().collect();
    for (step, want) in [
        ("environment", "ok"),
        ("backends", "ok"),
        ("conformance", "FAILED"),
        ("nvrtc", "skipped"),
        ("check", "ok"),
        ("evals", "ok"),
        ("bandwidth", "ok"),
        ("timing gpu-dry", "ok"),
    ] {
        assert_eq!(status.get(step).map(String::as_str), Some(want), "step {step}:\n{summary}");
    }
    assert!(summary.contains("1 steps failed or ran out of time"), "{summary}");
    assert!(summary.contains("## Suite gpu-dry: 5 of 5 cases (5 ok)"), "{summary}");
    // The planted failure is in the log with its exit code.
    let checks = read(&out, "checks.log");
    assert!(checks.contains("=== conformance: FAILED (exit 1)"), "{checks}");

    // `adgauge check --backend opencl`: every line a passed check on OpenCL.
    let check_lines: Vec<&str> = checks.lines().filter(|l| l.starts_with("hist-add[")).collect();
    assert!(check_lines.len() >= 4 * 5, "{checks}");
    for l in &check_lines {
        assert!(l.contains("/opencl/f32/") && l.ends_with(" ok"), "{l}");
    }
    // Four rules, each on i32 and on i64 indices.
    assert!(checks.contains("8 cases passed every check"), "{checks}");

    // Every operator's evals matched the CPU's: min and max bit for bit.
    let evals = read(&out, "evals.txt");
    for op in ["add", "mul", "min", "max", "logaddexp", "hypot"] {
        for run in ["vjp auto", "vjp general-sort", "jvp auto"] {
            let line = evals
                .lines()
                .find(|l| l.contains(&format!(" hist-{op} adversarial f32 {run}:")))
                .unwrap_or_else(|| panic!("no eval of hist-{op} {run}:\n{evals}"));
            assert!(line.starts_with("ok "), "{line}");
            let exact = op == "min" || op == "max";
            assert_eq!(line.contains("bit-equal"), exact, "{line}");
        }
        // The auto rule's evals again with i64 indices (the inputs fit i32, eval's default).
        for run in ["vjp auto", "jvp auto"] {
            let label = format!(" hist-{op} adversarial f32 {run} i64:");
            let line = evals.lines().find(|l| l.contains(&label)).unwrap_or_else(|| panic!("no{label}\n{evals}"));
            assert!(line.starts_with("ok "), "{line}");
        }
    }
    assert!(evals.contains("0 differed, 0 failed to run"), "{evals}");
    assert!(!evals.lines().any(|l| l.starts_with("DIFFERS") || l.starts_with("error")), "{evals}");

    // The copy bandwidth, measured and checked on OpenCL.
    let timing = read(&out, "timing.log");
    let copy: Value = timing
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|d| d["name"] == "opencl")
        .unwrap_or_else(|| panic!("no OpenCL line in the bandwidth JSON:\n{timing}"));
    assert_eq!(copy["copy_bandwidth"]["bytes"], 16 << 20, "{copy}");
    assert!(copy["copy_bandwidth"]["best_bytes_per_s"].as_f64().unwrap() > 0.0, "{copy}");

    // Timing rows of every case and mode, on OpenCL.
    let rows: Vec<Value> = read(&out, "timing.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 5 * 3, "five cases, three modes each");
    for r in &rows {
        assert_eq!(r["tool"], "opencl", "{r}");
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["median_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    for w in ["hist-add", "hist-max", "kmeans"] {
        assert!(rows.iter().any(|r| r["workload"] == w), "no {w} rows");
    }

    // The runs' files, packed: an xz archive holding the run's CSV.
    let listing = Command::new("tar").arg("-tJf").arg(out.join("results.tar.xz")).output().unwrap();
    assert!(listing.status.success(), "{listing:?}");
    assert!(stdout(&listing).lines().any(|l| l.starts_with("results/") && l.ends_with(".csv")), "{listing:?}");
    let env = read(&out, "env.txt");
    assert!(env.contains("nvidia-smi") && env.contains("cpus:"), "{env}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn backends_bandwidth_times_a_checked_copy_and_refuses_bad_sizes() {
    // Sizes are checked before any device opens.
    let zero = adgauge(&["backends", "--bandwidth", "0"]);
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
    assert!(stderr(&zero).contains("not a byte count"), "{zero:?}");
    let over = adgauge(&["--max-memory", "1M", "backends", "--bandwidth", "1M"]);
    assert_eq!(over.status.code(), Some(2), "{over:?}");
    assert!(stderr(&over).contains("backends --bandwidth needs 2097152 bytes"), "{over:?}");

    if !common::opencl_available() {
        return;
    }
    let out = adgauge(&["backends", "--bandwidth", "4M"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("opencl") && l.contains("bandwidth"))
        .unwrap_or_else(|| panic!("no OpenCL bandwidth line:\n{text}"));
    assert!(line.contains("copy of 4194304 bytes, 20 copies, checked"), "{line}");
    // No figure for devices that only run on the host.
    assert!(!text.lines().any(|l| l.starts_with("cpu") && l.contains("bandwidth")), "{text}");
    let gbs: f64 = line.split(" GB/s").next().unwrap().rsplit("= ").next().unwrap().parse().unwrap();
    assert!(gbs > 0.0, "{line}");
}
