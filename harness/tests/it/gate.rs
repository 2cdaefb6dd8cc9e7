//! `adgauge gate` end to end on small synthetic histories: one test per documented failure
//! condition (docs/gate.md), the baseline selectors, and the exit codes (1 beats 3; 2 when
//! nothing can be judged). Each would pass, wrongly, with the gate of 74a9f36.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use adgauge_reports::store::append_run;
use adgauge_reports::{Check, ResultRow, RunInfo, Status, Timing};

use common::{adgauge, stderr, stdout};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("adgauge-gate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Run `n` of a history (ids sort by n).
fn info(n: u32) -> RunInfo {
    RunInfo {
        run_id: format!("20261101T{n:06}Z-aaaaaa"),
        timestamp: "2026-11-01T00:00:00Z".into(),
        git_revision: "abc".into(),
        adgauge_version: "0.1.0".into(),
        machine: "host".into(),
        cpu_model: "CPU A".into(),
        cores: 2,
        governor: "performance".into(),
        suite: "quick".into(),
        roofline: None,
        interrupted: None,
        selection: None,
    }
}

/// A case whose primal and vjp took `ms` milliseconds, seven samples within ±1%.
fn case(id: &str, ms: f64) -> ResultRow {
    let m = ms * 1e-3;
    let sample_s = vec![m, m * 1.01, m * 0.99, m * 1.005, m * 0.995, m * 1.002, m * 0.998];
    let t = Timing { min_s: m * 0.99, median_s: m, max_s: m * 1.01, batch: 1, samples: 7, cv: 0.006, sample_s };
    let mut r = ResultRow::unmeasured("hist-add", BTreeMap::new(), "cpu", "f64", id, 2, 1);
    r.case_id = id.into();
    r.primal = Some(t.clone());
    r.vjp = Some(t);
    r.checks = vec![Check { name: "fd-vjp".into(), worst: 1e-10, tolerance: 1e-6, passed: true }];
    r.tool_version = Some("adgauge 0.1.0".into());
    r
}

fn add(dir: &Path, info: &RunInfo, rows: &[ResultRow]) -> String {
    append_run(dir, info, rows).unwrap().to_str().unwrap().to_string()
}

fn gate(args: &[&str]) -> (Option<i32>, String, String) {
    let mut a = vec!["gate"];
    a.extend_from_slice(args);
    let out = adgauge(&a);
    (out.status.code(), stdout(&out), stderr(&out))
}

#[test]
fn a_run_compared_with_itself_is_refused() {
    let dir = temp("self");
    let f = add(&dir, &info(1), &[case("a", 5.0)]);
    let (code, _, err) = gate(&["--baseline", &f, "--current", &f]);
    assert_eq!(code, Some(2));
    assert!(err.contains("same run (20261101T000001Z-aaaaaa)"), "{err}");
    // A history of one run has no previous run.
    let h = dir.to_str().unwrap();
    let (code, _, err) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no run of suite 'quick' before the current run"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zero_compared_cases_are_refused() {
    let dir = temp("zero");
    let mut skipped = case("a", 5.0);
    skipped.status = Status::Skipped;
    skipped.primal = None;
    skipped.vjp = None;
    skipped.message = Some("unknown backend gpu".into());
    let base = add(&dir, &info(1), std::slice::from_ref(&skipped));
    let cur = add(&dir, &info(2), &[skipped]);
    let (code, _, err) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(2));
    assert!(err.contains("none of the 1 cases the runs share ran in the baseline"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_and_skipped_cases_fail_unless_allowed() {
    let dir = temp("missing");
    let base = add(&dir, &info(1), &[case("a", 5.0), case("b", 5.0), case("c", 5.0)]);
    let mut skipped = case("b", 5.0);
    skipped.status = Status::Skipped;
    skipped.message = Some("backend cpu unavailable: test".into());
    let cur = add(&dir, &info(2), &[skipped, case("c", 5.0)]);
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("MISSING          a: in the baseline, missing from the current run"), "{out}");
    assert!(
        out.contains("SKIPPED          b: ran in the baseline, skipped now: backend cpu unavailable: test"),
        "{out}"
    );
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur, "--allow-missing"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("note: missing    a:") && out.contains("note: skipped    b:"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tool_that_became_unavailable_fails_even_with_allow_missing() {
    let dir = temp("tool");
    let mut gpu = case("g", 5.0);
    gpu.backend = "opencl".into();
    let base = add(&dir, &info(1), &[case("a", 5.0), gpu.clone()]);
    gpu.status = Status::Skipped;
    gpu.message = Some("no OpenCL platform".into());
    let cur = add(&dir, &info(2), &[case("a", 5.0), gpu]);
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur, "--allow-missing"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "TOOL-LOST        tool opencl: its cases ran in the baseline, all are skipped now: no OpenCL platform"
        ),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_check_that_passed_and_now_fails_is_named() {
    let dir = temp("check");
    let base = add(&dir, &info(1), &[case("a", 5.0)]);
    let mut bad = case("a", 10.0);
    bad.checks[0] = Check { name: "fd-vjp".into(), worst: 0.5, tolerance: 1e-6, passed: false };
    bad.status = Status::Failed;
    let cur = add(&dir, &info(2), &[bad]);
    // Failed and 2x slower: 1 beats 3; the slowdown is still listed.
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur, "--json"]);
    assert_eq!(code, Some(1), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["findings"][0]["kind"], "check-regressed");
    assert_eq!(v["findings"][0]["check"], "fd-vjp");
    assert_eq!(
        v["findings"][0]["detail"],
        "a: check fd-vjp passed in the baseline (worst 1.000e-10), fails now (worst 5.000e-1 > tolerance 1.0e-6)"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Another machine is not a failure: each case is compared only with a baseline from its own
/// host (CPU, cores, compiler, target features), and one without is not judged on speed, said
/// in a note and counted; `--allow-env-change` compares across hosts anyway.
#[test]
fn another_cpu_is_not_judged_on_speed_unless_allowed_and_says_why() {
    let dir = temp("env");
    let base = add(&dir, &info(1), &[case("a", 5.0)]);
    let mut other = info(2);
    other.cpu_model = "CPU B".into();
    let cur = add(&dir, &other, &[case("a", 10.0)]);
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("note: env-changed host of 1 case(s), not judged on speed: CPU A (2 cores) -> CPU B (2 cores)"),
        "{out}"
    );
    assert!(out.contains("speed: 0 regressed, 0 improved, 0 no change, 2 not judged of 2 timing(s) (not judged: 2 no baseline from its host"), "{out}");
    assert!(
        out.contains("verdict: PASS on checks and coverage; speed NOT JUDGED: none of 2 timing(s) could be judged"),
        "{out}"
    );
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur, "--allow-env-change"]);
    assert_eq!(code, Some(3), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The hosted runners: shards on AMD and Intel machines merged into one run. The merge
/// keeps each row's CPU, and the gate of two such nights compares each case with its own host's
/// baseline: no environment change, exit 0 (it was `ENV-CHANGED CPU model: AMD EPYC -> AMD EPYC
/// + Intel Xeon`, exit 1).
#[test]
fn a_mixed_cpu_merge_of_shards_gates_case_by_case() {
    let dir = temp("mixed");
    let shard = |night: u32, part: u32, cpu: &str, ids: &[&str]| {
        let mut i = info(night * 10 + part);
        i.cpu_model = cpu.into();
        let d = dir.join(format!("shard-{night}-{part}"));
        add(&d, &i, &ids.iter().map(|id| case(id, 5.0)).collect::<Vec<_>>());
        d
    };
    let history = dir.join("history");
    // Night 1: a and b on AMD, c on Intel; night 2 the other way round for c's shard.
    for (night, cpu_c) in [(1, "Intel Xeon"), (2, "AMD EPYC")] {
        let one = shard(night, 1, "AMD EPYC", &["a", "b"]);
        let two = shard(night, 2, cpu_c, &["c"]);
        let out = adgauge(&["merge", one.to_str().unwrap(), two.to_str().unwrap(), "--out", history.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        std::thread::sleep(std::time::Duration::from_millis(1100)); // run ids sort by the second
    }
    let (code, out, _) = gate(&["--history", history.to_str().unwrap(), "--baseline", "previous"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("ENV-CHANGED"), "{out}");
    assert!(out.contains("speed: 0 regressed, 0 improved, 4 no change, 2 not judged of 6 timing(s)"), "{out}");
    assert!(
        out.contains(
            "note: env-changed host of 1 case(s), not judged on speed: Intel Xeon (2 cores) -> AMD EPYC (2 cores)"
        ),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The quick suite: 3 samples a side, a case 4.7x slower. The gate cannot judge it (1
/// / C(6, 3) = 0.05 is the best p-value possible) and says so, counted, instead of "0
/// finding(s)" alone; with 5 samples the same slowdown regresses with its interval.
#[test]
fn too_few_samples_are_counted_as_not_judged_and_enough_regress_with_an_interval() {
    let dir = temp("samples");
    let with = |ms: f64, n: usize| {
        let mut r = case("a", ms);
        for t in [&mut r.primal, &mut r.vjp].into_iter().flatten() {
            t.sample_s.truncate(n);
            t.samples = n;
        }
        r
    };
    let base = add(&dir, &info(1), &[with(5.0, 3)]);
    let cur = add(&dir, &info(2), &[with(23.5, 3)]);
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(
            "speed: 0 regressed, 0 improved, 0 no change, 2 not judged of 2 timing(s) (not judged: 2 too few samples;"
        ),
        "{out}"
    );
    assert!(!out.contains("nothing regressed"), "{out}");
    let (_, json, _) = gate(&["--baseline", &base, "--current", &cur, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["speed"]["not_judged"], 2);
    assert_eq!(v["changes"][0]["why"], "3 and 3 samples: the rank test cannot reach p < 0.01 (needs 5 on each side)");
    let base = add(&dir, &info(3), &[with(5.0, 5)]);
    let cur = add(&dir, &info(4), &[with(23.5, 5)]);
    let (code, json, _) = gate(&["--baseline", &base, "--current", &cur, "--json"]);
    assert_eq!(code, Some(3), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "slower");
    assert!((f["ratio"].as_f64().unwrap() - 4.7).abs() < 1e-9);
    let (lo, hi) = (f["ci_low"].as_f64().unwrap(), f["ci_high"].as_f64().unwrap());
    // Resampled medians stay within the samples' ±1%: the interval within 4.7 x [0.99/1.01, 1.01/0.99].
    assert!(lo >= 4.7 * 0.99 / 1.01 && hi <= 4.7 * 1.01 / 0.99 && lo < hi, "{lo} {hi}");
    assert_eq!(v["speed"]["regressed"], 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The report takes the gate's baseline (the same selector, default `best-of:7`): a slow drift
/// that only best-of sees is in the report's verdict too.
#[test]
fn the_report_shows_the_gates_verdict_against_the_same_baseline() {
    let dir = temp("report");
    let h = dir.join("history");
    for k in 0..8 {
        add(&h, &info(k), &[case("a", 5.0 * 1.04f64.powi(k as i32))]);
    }
    let (code, _, _) = gate(&["--history", h.to_str().unwrap()]);
    assert_eq!(code, Some(3), "the default baseline is best-of:7");
    let out_dir = dir.join("report");
    let html_of = |extra: &[&str]| {
        let mut a = vec!["report", "--history", h.to_str().unwrap(), "--out", out_dir.to_str().unwrap()];
        a.extend_from_slice(extra);
        let out = adgauge(&a);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        std::fs::read_to_string(out_dir.join("index.html")).unwrap()
    };
    let html = html_of(&[]);
    assert!(html.contains("<b>SLOWER (exit 3): 2 timing(s) regressed</b>"), "{}", &html[..3000.min(html.len())]);
    assert!(html.contains("against best of 7 run(s)"));
    let html = html_of(&["--baseline", "previous"]);
    assert!(
        html.contains("<b>PASS: nothing regressed; all 2 timing(s) judged</b>"),
        "{}",
        &html[..3000.min(html.len())]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The case: a run with --threads 1 against one with 2 threads gave 18 "slower"
/// findings. Now it is one environment finding, and no speed findings across unlike runs.
#[test]
fn a_thread_change_is_an_environment_change_not_a_slowdown() {
    let dir = temp("threads");
    let base = add(&dir, &info(1), &[case("a", 5.0)]);
    let mut one = case("a", 9.0);
    one.threads = 1;
    let cur = add(&dir, &info(2), &[one]);
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("ENV-CHANGED      threads of 1 case(s) (a): 2 -> 1") && !out.contains("SLOWER"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hist row recorded before indices had a dtype has no `index_dtype`; its indices were i64.
/// The gate pairs it with the current i64 case (here 2x slower: exit 3) and leaves the i32 case
/// new; read as written, the two runs would share no case at all (exit 2).
#[test]
fn rows_from_before_the_index_dtype_are_the_i64_cases() {
    let dir = temp("legacy");
    let h = dir.to_str().unwrap();
    let hist = |index_dtype: Option<&str>, ms: f64| {
        let mut r = case("auto", ms);
        r.params = BTreeMap::from([("n".to_string(), "1000".to_string()), ("k".to_string(), "10".to_string())]);
        if let Some(t) = index_dtype {
            r.params.insert("index_dtype".into(), t.into());
        }
        r.case_id = adgauge_reports::case_id("hist-add", &r.params, "cpu", "f64", "auto");
        r
    };
    let old = hist(None, 5.0);
    assert_eq!(old.case_id, "hist-add[k=10,n=1000]/cpu/f64/auto");
    add(&dir, &info(1), &[old]);
    add(&dir, &info(2), &[hist(Some("i64"), 10.0), hist(Some("i32"), 5.0)]);
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous", "--json"]);
    assert_eq!(code, Some(3), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["compared"], 1, "{out}");
    assert_eq!(v["findings"][0]["kind"], "slower", "{out}");
    assert_eq!(v["findings"][0]["case_id"], "hist-add[index_dtype=i64,k=10,n=1000]/cpu/f64/auto", "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Seven nights, each 4% slower than the one before, then the current run: against the
/// previous night it is 1.04x (passes); against the best of the last 7 it is 1.04^7 = 1.32x.
#[test]
fn best_of_n_catches_drift_that_the_previous_run_misses() {
    let dir = temp("drift");
    let h = dir.to_str().unwrap();
    for k in 0..8 {
        add(&dir, &info(k), &[case("a", 5.0 * 1.04f64.powi(k as i32))]);
    }
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("compared 1 cases; 0 finding(s); current run 20261101T000007Z-aaaaaa against previous run 20261101T000006Z-aaaaaa"), "{out}");
    let (code, out, _) = gate(&["--history", h, "--baseline", "best-of:7", "--json"]);
    assert_eq!(code, Some(3), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["baseline_runs"].as_array().unwrap().len(), 7);
    assert_eq!(v["findings"][0]["kind"], "slower");
    assert!((v["findings"][0]["ratio"].as_f64().unwrap() - 1.04f64.powi(7)).abs() < 1e-9, "{out}");
    // A run id (or a unique prefix) of the history as the baseline.
    let (code, out, _) = gate(&["--history", h, "--baseline", "20261101T000005"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("against run 20261101T000005Z-aaaaaa"), "{out}");
    let (code, _, err) = gate(&["--history", h, "--baseline", "20261101T"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("8 runs of"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A partial run (the rows a merge recovered from a killed shard) never becomes a baseline by
/// selector: `previous` and `best-of:N` skip it, its planted fast timing included.
#[test]
fn a_partial_run_is_never_a_selected_baseline() {
    let dir = temp("partial");
    let h = dir.to_str().unwrap();
    add(&dir, &info(1), &[case("a", 5.0), case("b", 5.0)]);
    let mut partial = info(2);
    partial.run_id = format!("20261101T000002Z-aaaaaa{}", adgauge_reports::PARTIAL_RUN_SUFFIX);
    add(&dir, &partial, &[case("a", 1.0)]);
    add(&dir, &info(3), &[case("a", 5.0), case("b", 5.0)]);
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("against previous run 20261101T000001Z-aaaaaa"), "{out}");
    let (code, out, _) = gate(&["--history", h, "--baseline", "best-of:7", "--json"]);
    assert_eq!(code, Some(0), "a 5x 'slowdown' against the partial run's 1 ms: {out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["baseline_runs"].as_array().unwrap().len(), 1, "{out}");
    // Named by its id, it is what the user asked for.
    let (code, out, _) = gate(&["--history", h, "--baseline", "20261101T000002Z", "--allow-missing"]);
    assert_eq!(code, Some(3), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A case whose median moved 1.5x between the baseline's own runs is not called 1.5x slower
/// now (not judged, with the reason), while a 2.4x slowdown clears that noise and regresses.
#[test]
fn run_to_run_noise_in_the_window_is_not_a_regression() {
    let dir = temp("run-to-run");
    let h = dir.to_str().unwrap();
    for (k, ms) in [5.0, 7.5, 5.0].into_iter().enumerate() {
        add(&dir, &info(k as u32), &[case("a", ms)]);
    }
    add(&dir, &info(3), &[case("a", 7.5)]);
    let (code, out, _) = gate(&["--history", h, "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let changes = v["changes"].as_array().expect("changes");
    assert!(!changes.is_empty(), "{out}");
    for c in changes {
        assert_eq!(c["verdict"], "not judged", "{c}");
        assert!(c["why"].as_str().unwrap().starts_with("too noisy between runs: 1.500x is within the 1.500x"), "{c}");
    }
    let dir2 = temp("run-to-run-slow");
    let h2 = dir2.to_str().unwrap();
    for (k, ms) in [5.0, 7.5, 5.0, 12.0].into_iter().enumerate() {
        add(&dir2, &info(k as u32), &[case("a", ms)]);
    }
    let (code, out, _) = gate(&["--history", h2]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("2.40x") && out.contains("beyond the baseline runs' run-to-run 1.500x"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}

/// Identical distributions are not flagged: the median moved 1.3x because the current run drew
/// more samples from the slow mode of one bimodal distribution (see the unit test in gate.rs).
#[test]
fn noise_from_one_distribution_is_not_flagged() {
    let dir = temp("noise");
    let with = |ms: &[f64]| {
        let mut r = case("a", 1.0);
        let s: Vec<f64> = ms.iter().map(|x| x * 1e-3).collect();
        let mut sorted = s.clone();
        sorted.sort_by(f64::total_cmp);
        r.primal = Some(Timing {
            min_s: sorted[0],
            median_s: sorted[3],
            max_s: sorted[6],
            batch: 1,
            samples: 7,
            cv: 0.1,
            sample_s: s,
        });
        r.vjp = None;
        r
    };
    let base = add(&dir, &info(1), &[with(&[1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01])]);
    let cur = add(&dir, &info(2), &[with(&[0.99, 1.01, 1.00, 1.30, 1.31, 1.29, 1.32])]);
    let (code, out, _) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(0), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn findings_go_to_junit_and_the_step_summary() {
    let dir = temp("reports");
    let base = add(&dir, &info(1), &[case("a", 5.0), case("b", 5.0)]);
    let cur = add(&dir, &info(2), &[case("a", 10.0)]);
    let (junit, summary) = (dir.join("gate.xml"), dir.join("summary.md"));
    let (code, out, _) = gate(&[
        "--baseline",
        &base,
        "--current",
        &cur,
        "--junit",
        junit.to_str().unwrap(),
        "--summary",
        summary.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("failures=\"2\"") && xml.contains("type=\"missing\"") && xml.contains("type=\"slower\""),
        "{xml}"
    );
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("## adgauge gate: FAIL (exit 1)"), "{md}");
    assert!(md.contains("speed: 2 regressed, 0 improved, 0 no change, 0 not judged of 2 timing(s)"), "{md}");
    // The regressions first, with their intervals, then the findings grouped per cause.
    assert!(md.contains("### Regressions\n\n| case | mode | baseline ms | current ms | ratio [CI] |"), "{md}");
    assert!(md.contains("| `a` | primal | 5.000 | 10.000 | 2.000x ["), "{md}");
    assert!(md.contains("| missing | b: in the baseline, missing from the current run | `b` |"), "{md}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 44, class 1, end to end: five quiet nights, then a 3x regression that persists. Night
/// 6 and every night after it are SLOWER: the move into the regressed night does not become
/// the bar (it read "too noisy between runs: 3.000x is within the 3.000x" from night 7 on).
#[test]
fn a_persisting_regression_is_flagged_night_after_night() {
    let dir = temp("persisting");
    let h = dir.to_str().unwrap();
    for (k, f) in [1.0, 1.02, 0.99, 1.01, 1.0].into_iter().enumerate() {
        add(&dir, &info(k as u32), &[case("a", 5.0 * f)]);
    }
    for night in 5..8 {
        add(&dir, &info(night), &[case("a", 15.0)]);
        let (code, out, _) = gate(&["--history", h]);
        assert_eq!(code, Some(3), "night {night}: {out}");
        assert!(out.contains("SLOWER") && !out.contains("too noisy"), "night {night}: {out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 44, class 6: a filtered run saved into the history was the next full run's `previous`,
/// so the gate compared its 1 case and passed a 3x slowdown of another. A run of part of the
/// suite is never the baseline of a run of the whole suite.
#[test]
fn a_filtered_run_never_shrinks_a_full_baseline() {
    let dir = temp("filtered");
    let h = dir.to_str().unwrap();
    add(&dir, &info(1), &[case("a", 5.0), case("b", 5.0), case("c", 5.0)]);
    let filtered = RunInfo { selection: Some("filter a".into()), ..info(2) };
    add(&dir, &filtered, &[case("a", 5.0)]);
    add(&dir, &info(3), &[case("a", 5.0), case("b", 15.0), case("c", 5.0)]);
    for baseline in ["previous", "best-of:7"] {
        let (code, out, _) = gate(&["--history", h, "--baseline", baseline, "--json"]);
        assert_eq!(code, Some(3), "{baseline}: {out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["baseline_runs"], serde_json::json!(["20261101T000001Z-aaaaaa"]), "{out}");
        assert_eq!((v["compared"].as_u64(), v["findings"][0]["case_id"].as_str()), (Some(3), Some("b")), "{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 44, class 2: an interrupted run (its file says so) is never chosen as a baseline, and
/// gated as the current run it is a finding, never "complete"; named by its id it is the
/// baseline asked for, with a note.
#[test]
fn an_interrupted_run_is_never_a_selected_baseline_and_never_complete() {
    let dir = temp("interrupted");
    let h = dir.to_str().unwrap();
    add(&dir, &info(1), &[case("a", 5.0), case("b", 5.0)]);
    let cut = RunInfo { interrupted: Some("interrupted by SIGTERM after 1 of 2 case(s)".into()), ..info(2) };
    let cut_file = add(&dir, &cut, &[case("a", 1.0)]);
    add(&dir, &info(3), &[case("a", 5.0), case("b", 5.0)]);
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("against previous run 20261101T000001Z-aaaaaa"), "{out}");
    let (code, out, _) = gate(&["--history", h, "--current", &cut_file, "--baseline", "20261101T000001Z"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("INCOMPLETE       run 20261101T000002Z-aaaaaa: the current run is partial (interrupted by SIGTERM after 1 of 2 case(s))")
            && out.contains("MISSING          b: in the baseline, missing from the current run"),
        "{out}"
    );
    assert!(!out.contains("PASS"), "{out}");
    let (code, out, _) = gate(&["--history", h, "--baseline", "20261101T000002Z", "--allow-missing"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("note: incomplete run 20261101T000002Z-aaaaaa: the baseline run is partial"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 44, class 7: one odd night (`--threads 1`) made the next normal night fail as
/// ENV-CHANGED, with no way to set it aside. Set aside (recorded, its files kept), it is no
/// baseline; restored, it is again.
#[test]
fn a_run_set_aside_is_never_a_baseline_until_restored() {
    let dir = temp("set-aside");
    let h = dir.to_str().unwrap();
    add(&dir, &info(1), &[case("a", 5.0)]);
    let mut odd = case("a", 9.0);
    odd.threads = 1;
    add(&dir, &info(2), &[odd]);
    add(&dir, &info(3), &[case("a", 5.0)]);
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("ENV-CHANGED"), "{out}");
    // --why is required, and the id must be one of the history's.
    assert_eq!(adgauge(&["history", "--history", h, "--set-aside", "20261101T000002Z"]).status.code(), Some(2));
    let out = adgauge(&["history", "--history", h, "--set-aside", "20261101T000009Z", "--why", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no run of"), "{}", stderr(&out));
    let out = adgauge(&["history", "--history", h, "--set-aside", "20261101T000002Z", "--why", "ran with --threads 1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("run 20261101T000002Z-aaaaaa set aside"), "{}", stdout(&out));
    let record = std::fs::read_to_string(dir.join("set-aside.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(record.lines().next().unwrap()).unwrap();
    assert_eq!(
        (&line["action"], &line["run_id"], &line["why"]),
        (&"set-aside".into(), &"20261101T000002Z-aaaaaa".into(), &"ran with --threads 1".into())
    );
    assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
    assert!(dir.join("20261101T000002Z-aaaaaa.csv").is_file(), "setting aside never deletes");
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("against previous run 20261101T000001Z-aaaaaa"), "{out}");
    // Twice is refused; restored, it is the previous run again.
    let again = adgauge(&["history", "--history", h, "--set-aside", "20261101T000002Z", "--why", "again"]);
    assert_eq!(again.status.code(), Some(2));
    let out = adgauge(&["history", "--history", h, "--restore", "20261101T000002Z", "--why", "it was fine"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(dir.join("set-aside.jsonl")).unwrap().lines().count(), 2);
    let (code, out, _) = gate(&["--history", h, "--baseline", "previous"]);
    assert_eq!(code, Some(1), "{out}");
    let out = adgauge(&["history", "--history", h, "--restore", "20261101T000002Z"]);
    assert_eq!(out.status.code(), Some(2), "not set aside");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 44, class 8, end to end: a run file whose stored median is not its samples' median
/// is refused, naming the file and line (exit 2).
#[test]
fn a_median_that_disagrees_with_its_samples_is_bad_input() {
    let dir = temp("median");
    let base = add(&dir, &info(1), &[case("a", 5.0)]);
    let mut lying = case("a", 5.0);
    lying.primal.as_mut().unwrap().median_s = 1e-3;
    let cur = add(&dir, &info(2), &[lying]);
    let (code, _, err) = gate(&["--baseline", &base, "--current", &cur]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{cur}:2: median_s: 1e-3 is not the median of its 7 samples in sample_s (5e-3)")),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
