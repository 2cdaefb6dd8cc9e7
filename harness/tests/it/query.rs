//! `adgauge history`: the trend of a case, the best of the last N runs and the regressions
//! since a date, over a small synthetic history with known medians; and bad histories (corrupt,
//! truncated, future schema, mixed suites, a run stored twice) exit 2 naming the file and line,
//! changing nothing.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use adgauge_reports::store::append_run;
use adgauge_reports::{ResultRow, RunInfo, Timing};

use common::{adgauge, stderr, stdout};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("adgauge-query-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Run `day` of November 2026.
fn info(day: u32, suite: &str) -> RunInfo {
    RunInfo {
        run_id: format!("202611{day:02}T050000Z-aaaaaa"),
        timestamp: format!("2026-11-{day:02}T05:00:00Z"),
        git_revision: format!("rev{day}"),
        adgauge_version: "0.1.0".into(),
        machine: "host".into(),
        cpu_model: "CPU A".into(),
        cores: 2,
        governor: "performance".into(),
        suite: suite.into(),
        roofline: None,
        interrupted: None,
        selection: None,
    }
}

fn case(id: &str, primal_ms: f64, vjp_ms: f64) -> ResultRow {
    let t = |ms: f64| {
        let m = ms * 1e-3;
        Some(Timing { min_s: m * 0.9, median_s: m, max_s: m * 1.1, batch: 1, samples: 5, cv: 0.05, sample_s: vec![] })
    };
    let mut r = ResultRow::unmeasured("hist-add", BTreeMap::new(), "cpu", "f64", "auto", 2, 1);
    r.case_id = id.into();
    r.primal = t(primal_ms);
    r.vjp = t(vjp_ms);
    r
}

/// Three nights: case a's vjp takes 5, 5.5 and 7 ms (its primal 1 ms throughout), case b's 3 ms.
fn history(name: &str) -> PathBuf {
    let dir = temp(name);
    for (day, vjp) in [(1, 5.0), (2, 5.5), (3, 7.0)] {
        append_run(&dir, &info(day, "quick"), &[case("a", 1.0, vjp), case("b", 1.0, 3.0)]).unwrap();
    }
    dir
}

fn query(dir: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec!["history", "--history", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = adgauge(&args);
    (out.status.code(), stdout(&out), stderr(&out))
}

#[test]
fn the_trend_of_a_case_lists_its_medians_run_by_run() {
    let dir = history("trend");
    let (code, out, err) = query(&dir, &["--case", "a", "--mode", "vjp", "--format", "csv"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "case_id,mode,run_id,timestamp,git_revision,status,median_s,min_s,max_s,samples");
    let medians: Vec<(String, f64)> = lines[1..]
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[4].to_string(), f[6].parse().unwrap())
        })
        .collect();
    assert_eq!(medians, [("rev1".to_string(), 5e-3), ("rev2".to_string(), 5.5e-3), ("rev3".to_string(), 7e-3)]);
    // JSON lines carry numbers; the table shows milliseconds.
    let (_, out, _) = query(&dir, &["--case", "a", "--mode", "vjp", "--format", "json"]);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["median_s"], 5e-3);
    assert_eq!(first["timestamp"], "2026-11-01T05:00:00Z");
    let (_, out, _) = query(&dir, &["--case", "a", "--mode", "vjp", "--since", "2026-11-02"]);
    assert_eq!(out.lines().count(), 3, "{out}"); // header and two runs
    assert!(out.lines().nth(1).unwrap().contains("5.500"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each run has its Parquet twin; a query's answer can be written as Parquet (the values are
/// checked by the reports crate's round-trip tests; here, that a Parquet file is written).
#[test]
fn runs_and_answers_are_written_as_parquet() {
    let dir = history("parquet");
    let twin = dir.join("20261101T050000Z-aaaaaa.parquet");
    let magic = |p: &Path| {
        let b = std::fs::read(p).unwrap();
        b.len() > 8 && b.starts_with(b"PAR1") && b.ends_with(b"PAR1")
    };
    assert!(magic(&twin));
    let out = dir.join("trend.parquet");
    let (code, _, err) = query(&dir, &["--case", "a", "--format", "parquet", "--out", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(magic(&out));
    let (code, _, err) = query(&dir, &["--format", "parquet"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("give --out FILE"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_best_of_the_last_runs_and_regressions_since_a_date() {
    let dir = history("best");
    let (code, out, err) = query(&dir, &["--best-of", "2", "--mode", "vjp", "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2);
    // Of nights 2 and 3, case a's best vjp is night 2's 5.5 ms.
    assert_eq!((rows[0]["case_id"].as_str(), rows[0]["best_median_s"].as_f64()), (Some("a"), Some(5.5e-3)));
    assert_eq!(rows[0]["run_id"], "20261102T050000Z-aaaaaa");
    assert_eq!(rows[1]["best_median_s"], 3e-3);
    // Since night 2: 5.5 -> 7 ms is 1.27x, beyond 1.15; b and the primals did not move.
    let (code, out, _) = query(&dir, &["--regressions", "--since", "2026-11-02", "--format", "json"]);
    assert_eq!(code, Some(0));
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!((rows[0]["case_id"].as_str(), rows[0]["mode"].as_str()), (Some("a"), Some("vjp")));
    assert!((rows[0]["ratio"].as_f64().unwrap() - 7.0 / 5.5).abs() < 1e-12);
    // Since night 3 alone nothing moved; with a 1.5x threshold from night 1 (1.4x) neither.
    let (_, out, _) = query(&dir, &["--regressions", "--since", "2026-11-03", "--format", "json"]);
    assert_eq!(out, "");
    let (_, out, _) = query(&dir, &["--regressions", "--max-ratio", "1.5", "--format", "json"]);
    assert_eq!(out, "");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_histories_exit_2_naming_the_file_and_line_and_change_nothing() {
    let bad = |name: &str, setup: &dyn Fn(&Path), want: &str| {
        let dir = history(name);
        setup(&dir);
        let before: Vec<(PathBuf, Vec<u8>)> = adgauge_reports::store::run_files(&dir)
            .unwrap()
            .into_iter()
            .map(|p| {
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        let (code, _, err) = query(&dir, &[]);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        for (p, b) in before {
            assert_eq!(std::fs::read(&p).unwrap(), b, "{name}: {} changed", p.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    };
    let newest = |dir: &Path| dir.join("20261103T050000Z-aaaaaa.csv");
    bad(
        "truncated",
        &|d| {
            let text = std::fs::read_to_string(newest(d)).unwrap();
            std::fs::write(newest(d), &text[..text.len() - 30]).unwrap();
        },
        "20261103T050000Z-aaaaaa.csv:5: ",
    );
    bad("corrupt", &|d| std::fs::write(d.join("x.csv"), "\u{0}garbage\n").unwrap(), "x.csv:1: unexpected header");
    bad(
        "future",
        &|d| std::fs::write(d.join("y.csv"), "schema_version,run_id,new_column\n9,r,v\n").unwrap(),
        "y.csv:2: schema 9 is newer than this adgauge",
    );
    bad(
        "duplicate",
        &|d| {
            std::fs::copy(newest(d), d.join("zz-copy.csv")).unwrap();
        },
        "zz-copy.csv:2: run 20261103T050000Z-aaaaaa is already in the history",
    );
    bad(
        "mixed",
        &|d| {
            append_run(d, &info(4, "nightly"), &[case("a", 1.0, 5.0)]).unwrap();
        },
        "20261104T050000Z-aaaaaa.csv:2: run 20261104T050000Z-aaaaaa is of suite 'nightly'",
    );
    // --suite chooses one suite of a mixed history.
    let dir = history("choose");
    append_run(&dir, &info(4, "nightly"), &[case("a", 1.0, 5.0)]).unwrap();
    let (code, out, _) = query(&dir, &["--suite", "nightly", "--format", "csv"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.lines().count(), 3, "{out}"); // header, a's primal and vjp of night 4
    let (code, _, err) = query(&dir, &["--since", "yesterday"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--since yesterday: expected a date"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bad --since (no such date), --mode or --suite is exit 2 naming the value; each gave exit
/// 0 and an empty table, as if nothing had run.
#[test]
fn an_impossible_date_an_unknown_mode_or_suite_is_an_error_naming_it() {
    let dir = history("bad-args");
    for (args, want) in [
        (&["--since", "2026-13-45"][..], "--since 2026-13-45: month 13 is not 1 to 12"),
        (&["--since", "2026-02-30"], "--since 2026-02-30: day 30 is not a day of 2026-02"),
        (&["--since", "2026-11-02T25:00:00Z"], "--since 2026-11-02T25:00:00Z: expected a date"),
        (&["--mode", "hessian"], "--mode hessian: not a mode (modes: primal, vjp, jvp)"),
        (&["--suite", "nightly"], "no run of suite nightly in the history"),
        (&["--suite", "nightly", "--regressions"], "(suites: quick)"),
    ] {
        let (code, out, err) = query(&dir, args);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}");
    }
    // A valid time of day narrows to the runs from then on.
    let (code, out, _) = query(&dir, &["--since", "2026-11-02T05:00:01Z", "--mode", "vjp", "--case", "a"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.lines().count(), 2, "{out}"); // header and night 3
    std::fs::remove_dir_all(&dir).unwrap();
}
