//! Run files every reader can trust: a file whose lines of one case disagree on a case column,
//! a time that is negative or not finite, or a case stored twice is refused by every command
//! that reads it (history, report, gate, merge) with exit 2 naming the file and line, where
//! before each read the first line of a case only, or showed the bad time; and `history`,
//! `report` and `gate` read the history `run` writes when given none.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use adgauge_reports::store::append_run;
use adgauge_reports::{Check, ResultRow, RunInfo, Timing};

use common::{adgauge, stderr, stdout};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("adgauge-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Run `day` of November 2026.
fn info(day: u32) -> RunInfo {
    RunInfo {
        run_id: format!("202611{day:02}T050000Z-1-aaaaaaaa"),
        timestamp: format!("2026-11-{day:02}T05:00:00Z"),
        git_revision: format!("rev{day}"),
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

/// Case `a`, every check passed, primal and vjp of 5 ms (seven samples within 1%).
fn case_a() -> ResultRow {
    let m = 5e-3;
    let sample_s = vec![m, m * 1.01, m * 0.99, m * 1.005, m * 0.995, m * 1.002, m * 0.998];
    let t = Timing { min_s: m * 0.99, median_s: m, max_s: m * 1.01, batch: 1, samples: 7, cv: 0.006, sample_s };
    let mut r = ResultRow::unmeasured("hist-add", BTreeMap::new(), "cpu", "f64", "auto", 2, 1);
    r.case_id = "a".into();
    r.primal = Some(t.clone());
    r.vjp = Some(t);
    r.checks = vec![Check { name: "fd-vjp".into(), worst: 1e-10, tolerance: 1e-6, passed: true }];
    r.tool_version = Some("adgauge 0.1.0".into());
    r
}

/// A history of two runs of case `a`, the second's file edited by `edit` (its text, lines
/// 2 and 3 being a's primal and vjp lines); returns the history and the edited file.
fn history_with(name: &str, edit: impl Fn(&str) -> String) -> (PathBuf, PathBuf) {
    let dir = temp(name);
    append_run(&dir, &info(1), &[case_a()]).unwrap();
    let second = append_run(&dir, &info(2), &[case_a()]).unwrap();
    let text = std::fs::read_to_string(&second).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "{name}: the edit changed nothing");
    std::fs::write(&second, edited).unwrap();
    (dir, second)
}

/// Replaces field `column` of line `line` (1-based) of a run file's text (these files quote
/// nothing: no field holds a comma).
fn set_field(text: &str, line: usize, column: &str, value: &str) -> String {
    assert!(!text.contains('"'));
    let at = text.lines().next().unwrap().split(',').position(|h| h == column).unwrap();
    let mut out = String::new();
    for (i, l) in text.lines().enumerate() {
        let mut f: Vec<&str> = l.split(',').collect();
        if i + 1 == line {
            f[at] = value;
        }
        out += &(f.join(",") + "\n");
    }
    out
}

/// Every reading command on `dir` (whose newest run is `file`): exit 2 with `want` in the
/// error, which names the file.
fn every_reader_refuses(dir: &Path, file: &Path, want: &str) {
    let d = dir.to_str().unwrap();
    let report = dir.join("report");
    let merged = dir.join("merged");
    let commands: [Vec<&str>; 4] = [
        vec!["history", "--history", d],
        vec!["report", "--history", d, "--out", report.to_str().unwrap()],
        vec!["gate", "--history", d, "--baseline", "previous"],
        vec!["merge", file.to_str().unwrap(), "--out", merged.to_str().unwrap()],
    ];
    let name = file.file_name().unwrap().to_string_lossy();
    for args in commands {
        let out = adgauge(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}{}", stdout(&out), stderr(&out));
        assert!(stderr(&out).contains(&format!("{name}:{want}")), "{args:?}: {}", stderr(&out));
    }
    assert!(!report.exists() && !merged.exists());
}

/// A run whose vjp line says `failed` under a primal line saying `ok` gated as 0 findings,
/// exit 0, and the report said PASS: every reader took the case's columns from its first line.
#[test]
fn a_case_whose_lines_disagree_is_refused_by_every_reader() {
    let (dir, file) = history_with("disagree", |t| set_field(t, 3, "status", "failed"));
    every_reader_refuses(&dir, &file, "3: case a: status is 'failed' here but 'ok' on line 2");
    std::fs::remove_dir_all(&dir).unwrap();
    let (dir, file) = history_with("disagree-check", |t| set_field(t, 3, "check.fd-vjp.passed", "false"));
    every_reader_refuses(&dir, &file, "3: case a: check.fd-vjp.passed is 'false' here but 'true' on line 2");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `history` and `report` showed negative and NaN times (which the gate called corrupt): every
/// reader now refuses them, naming the file, line and column.
#[test]
fn negative_or_non_finite_times_are_refused_by_every_reader() {
    for (value, shown) in [("-5e-3", "-0.005"), ("NaN", "NaN"), ("inf", "inf")] {
        let (dir, file) = history_with("times", |t| set_field(t, 3, "median_s", value));
        every_reader_refuses(&dir, &file, &format!("3: median_s: {shown} is not a time"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let (dir, file) = history_with("samples", |t| set_field(t, 2, "sample_s", "5e-3 -1e-3"));
    every_reader_refuses(&dir, &file, "2: sample_s: -0.001 is not a time");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A schema-1 file holding a case twice (a planted faster line, which `--best-of` picked) is
/// refused naming both lines.
#[test]
fn a_case_twice_in_a_schema_1_file_is_refused() {
    let dir = temp("dup-schema1");
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures/schema1.csv");
    let text = std::fs::read_to_string(fixture).unwrap();
    let faster = text.lines().nth(1).unwrap().replacen(",2e-3,3e-3,4e-3,", ",1e-4,2e-4,3e-4,", 1);
    let file = dir.join("old.csv");
    std::fs::write(&file, format!("{text}{faster}\n")).unwrap();
    let out = adgauge(&["history", "--history", dir.to_str().unwrap(), "--best-of", "1", "--mode", "vjp"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out)
            .contains("old.csv:4: duplicate line for case hist-add[k=10,n=1000]/cpu/f32/auto (first on line 2)"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `adgauge ARGS` in `cwd` with `ADGAUGE_RESULTS` set to `results` (or unset).
fn adgauge_in(cwd: &Path, results: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_adgauge"));
    c.args(args).current_dir(cwd).env_remove("ADGAUGE_RESULTS");
    if let Some(r) = results {
        c.env("ADGAUGE_RESULTS", r);
    }
    c.output().unwrap()
}

/// `report`, `history` and `gate` read the history `run` saves into (`./adgauge-results`, or
/// $ADGAUGE_RESULTS) when given no --history, and say so when there is none.
#[test]
fn report_history_and_gate_default_to_the_history_run_writes() {
    let cwd = temp("default");
    let results = cwd.join("adgauge-results");
    append_run(&results, &info(1), &[case_a()]).unwrap();
    append_run(&results, &info(2), &[case_a()]).unwrap();
    let out = adgauge_in(&cwd, None, &["history", "--mode", "vjp", "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 3, "{}", stdout(&out)); // header and two runs
    let out = adgauge_in(&cwd, None, &["gate", "--baseline", "previous"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("compared 1 cases; 0 finding(s); current run 20261102T"), "{}", stdout(&out));
    let out = adgauge_in(&cwd, None, &["report", "--out", "report"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(cwd.join("report/index.html").is_file());
    // $ADGAUGE_RESULTS names another history, as it does for `run`.
    let elsewhere = cwd.join("elsewhere");
    append_run(&elsewhere, &info(3), &[case_a()]).unwrap();
    let out = adgauge_in(&cwd, Some(&elsewhere), &["history", "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).lines().skip(1).all(|l| l.contains("20261103T")), "{}", stdout(&out));
    // No history there: exit 2 saying where it looked.
    let empty = cwd.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for args in [&["history"][..], &["report", "--out", "r"], &["gate", "--baseline", "previous"]] {
        let out = adgauge_in(&empty, None, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains("adgauge-results: no such history"), "{args:?}: {}", stderr(&out));
    }
    std::fs::remove_dir_all(&cwd).unwrap();
}
