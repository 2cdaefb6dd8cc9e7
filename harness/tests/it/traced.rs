//! The traced CPU devices (`cpu-traced`, and `cpu-jit` over the staged device) against their
//! eager runs: `check` passes on both, with the `traced-eager` comparison (a recorded VJP and
//! JVP replayed, against what their eager run read back) exact on every case, and `run` times
//! every classic workload's modes through recordings and replays.

use crate::common;

use std::process::{Command, Output};

use common::{stderr, stdout, temp_file};

fn adgauge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adgauge")).args(args).env("ADGAUGE_STAGE_MIN", "0").output().unwrap()
}

fn check_passes_with_traced_eager_on_every_case(backend: &str, extra: &[&str]) {
    let out = adgauge(&[&["check", "--backend", backend][..], extra].concat());
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("cases passed every check (0 skipped as unsupported)"), "{text}");
    let cases: usize = text.lines().last().unwrap().split(' ').next().unwrap().parse().unwrap();
    let traced: Vec<&str> = text.lines().filter(|l| l.contains(" traced-eager ")).collect();
    assert_eq!(traced.len(), cases, "{text}");
    assert!(traced.iter().all(|l| l.contains(&format!("/{backend}/")) && l.ends_with(" ok")), "{text}");
}

#[test]
#[ignore = "slow tier, 510 s in a debug build on 2 cores: .ci/run runs it"]
fn check_passes_on_the_traced_device_and_its_replays_read_back_the_eager_numbers() {
    check_passes_with_traced_eager_on_every_case("cpu-traced", &[]);
}

#[test]
#[ignore = "slow tier, 46 s in a debug build on 2 cores: .ci/run runs it"]
fn check_passes_on_the_traced_staged_device_with_every_elementwise_op_fused() {
    for workload in ["gmm", "ba", "lstm", "hist-mul"] {
        check_passes_with_traced_eager_on_every_case("cpu-jit", &["--workload", workload]);
    }
}

/// `run --json` of a suite of `cases` (YAML lines) with short timings: its rows, and its output
/// for messages. The run must exit 0.
fn run_rows(name: &str, cases: &str) -> (Vec<serde_json::Value>, String) {
    let suite = temp_file(
        name,
        &format!("{name}.yaml"),
        &format!("name: {name}\nseed: 7\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 1}}\ncases:\n{cases}"),
    );
    let out = adgauge(&["run", "--suite", suite.to_str().unwrap(), "--no-save", "--json"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    (text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect(), text)
}

#[test]
fn run_times_every_mode_of_the_classic_workloads_through_replays() {
    let (rows, text) = run_rows(
        "traced",
        "- {workload: gmm, d: [3], k: [4], n: [50], dtypes: [f64], tools: [cpu-traced, cpu-jit]}\n\
         - {workload: kmeans, k: [3], n: [200], d: [4], dtypes: [f32], tools: [cpu-traced, cpu-jit]}\n\
         - {workload: lstm, l: [1], c: [6], dtypes: [f64], tools: [cpu-traced, cpu-jit]}\n\
         - {workload: ba, sizes: [[3, 20, 60]], dtypes: [f64], tools: [cpu-traced, cpu-jit]}\n\
         - {workload: hist, ops: [max], n: [3000], k: [40], rules: [auto, general-chunked], dtypes: [f32], tools: [cpu-traced, cpu-jit]}\n",
    );
    // gmm, kmeans, lstm and ba 3 modes each, hist 3 x 2 rules: 18 per tool.
    assert_eq!(rows.len(), 36, "{text}");
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["median_s"].as_f64().is_some_and(|t| t > 0.0), "{r}");
    }
}

/// `cpu-jit` rows say per timed mode how the calls ran: ode's small traces as compiled
/// programs, the LSTM's (its cell kernels have no compiled form) as replayed calls, and why.
#[test]
fn cpu_jit_rows_say_whether_each_mode_ran_compiled() {
    let (rows, text) = run_rows(
        "compiled",
        "- {workload: ode, n: [8], s: [3], dtypes: [f64], modes: [primal, vjp], tools: [cpu-jit]}\n\
         - {workload: lstm, l: [1], c: [6], dtypes: [f64], modes: [primal], tools: [cpu-jit]}\n",
    );
    let message = |workload: &str| -> String {
        let row =
            rows.iter().find(|r| r["workload"] == workload).unwrap_or_else(|| panic!("no {workload} row: {text}"));
        row["message"].as_str().unwrap_or_default().to_string()
    };
    let ode = message("ode");
    for mode in ["primal compiled, ", "vjp compiled, "] {
        assert!(ode.contains(mode), "{ode}");
    }
    assert!(ode.contains(" instructions from "), "{ode}");
    let lstm = message("lstm");
    assert!(lstm.starts_with("primal replayed, not compiled: lstm_cell"), "{lstm}");
}
