//! The results store: one CSV file per run, written atomically, in a history directory that only
//! ever gains files.
//!
//! Layout: `DIR/<run_id>.csv` and its typed twin `DIR/<run_id>.parquet`. Both are written to
//! temporary files in the same directory, synced, then renamed into place ([`append_run`]), so a
//! run killed at any point (even by SIGKILL) leaves earlier runs intact and no half-written file
//! visible, and a failure (a full disk) leaves neither file. While a run goes on, its finished
//! rows wait in a hidden `.<run_id>.partial.jsonl` ([`PARTIAL_FILE_SUFFIX`]).
//!
//! Every reader (history, report, gate, merge) goes through [`parse_csv`], which refuses, naming
//! the file and line, what would make an answer wrong: lines of one case that disagree on a
//! column of the case (status, message, checks, parameters, ...), a case twice, and a time that
//! is negative or not finite.
//!
//! Schema 3 (written and read with the `csv` crate) is tidy data: one line per case and mode
//! (`primal`, `vjp`, `jvp`; a case with nothing timed has one line with an empty mode), the
//! [`COLUMNS`] first, then one column per parameter (`param.<name>`) and three per check
//! (`check.<name>.worst`, `check.<name>.tolerance`, `check.<name>.passed`), so that a dataframe
//! reads parameters and checks as columns, not strings to split. Case-level values (status,
//! parameters, checks) repeat on each mode line of the case. `sample_s` holds the kept timing
//! samples separated by spaces. Files of schema 1 and 2 (one line per case, parameters as
//! `k=v;k=v`, checks as `name=worst/tolerance/ok|FAIL;...`) are still read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use crate::columns::{CHECK_PREFIX, Kind, PARAM_PREFIX, column_kind};
use crate::roofline::{self, RandomRate, Roofline};
use crate::schema::{Check, ResultRow, RunInfo, SCHEMA_VERSION, Status, Timing};

/// Errors reading or writing result files.
#[derive(Debug)]
pub enum StoreError {
    Io { path: PathBuf, source: std::io::Error },
    Parse { path: PathBuf, line: usize, message: String },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            StoreError::Parse { path, line, message } => write!(f, "{}:{line}: {message}", path.display()),
        }
    }
}

impl std::error::Error for StoreError {}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

/// The fixed columns of schema 7, in order; the parameter and check columns follow them.
/// Schema 6 had all but `interrupted` and `selection` (`V6_LACKS`); schema 5 also lacked the
/// roofline's eight (`V5_LACKS`), schema 4 also lacked `rustc` and
/// `target_features`, schema 3 also `rule_used`. From schema 5 on, `cpu_model`, `cores`, `rustc`
/// and `target_features` are the row's own host (a merged run's lines keep their shard's
/// machine); the other run columns repeat on every line. The `roofline_*` columns are the run's
/// [`Roofline`] (empty where the run measured none; the lists are space-separated, one entry
/// per bin count); `achieved_gb_s` and `roofline_fraction` are derived on a histogram's primal
/// line ([`crate::roofline`]), as `overhead` is on the derivatives' lines.
pub const COLUMNS: &[&str] = &[
    "schema_version",
    "run_id",
    "timestamp",
    "git_revision",
    "adgauge_version",
    "suite",
    "interrupted",
    "selection",
    "machine",
    "cpu_model",
    "cores",
    "governor",
    "roofline_threads",
    "roofline_seq_read_gb_s",
    "roofline_bins",
    "roofline_random_reads_per_s",
    "roofline_random_updates_per_s",
    "roofline_tools",
    "rustc",
    "target_features",
    "case_id",
    "workload",
    "tool",
    "tool_version",
    "dtype",
    "rule",
    "rule_used",
    "threads",
    "seed",
    "status",
    "message",
    "compile_s",
    "mode",
    "min_s",
    "median_s",
    "max_s",
    "samples",
    "batch",
    "cv",
    "sample_s",
    "peak_bytes",
    "overhead",
    "memory_ratio",
    "achieved_gb_s",
    "roofline_fraction",
];

/// The fixed columns schema 6 lacks.
const V6_LACKS: [&str; 2] = ["interrupted", "selection"];

/// The fixed columns schema 5 lacks besides those of [`V6_LACKS`].
const V5_LACKS: [&str; 8] = [
    "roofline_threads",
    "roofline_seq_read_gb_s",
    "roofline_bins",
    "roofline_random_reads_per_s",
    "roofline_random_updates_per_s",
    "roofline_tools",
    "achieved_gb_s",
    "roofline_fraction",
];

/// The fixed columns schema 4 lacks besides those of [`V5_LACKS`]; schema 3 also lacks
/// `rule_used`.
const V4_LACKS: [&str; 2] = ["rustc", "target_features"];

/// The fixed columns of a file of schema 3, 4, 5 or 6, in order.
fn old_columns(version: u32) -> Vec<&'static str> {
    COLUMNS
        .iter()
        .copied()
        .filter(|c| {
            !V6_LACKS.contains(c)
                && (version > 5 || !V5_LACKS.contains(c))
                && (version > 4 || !V4_LACKS.contains(c))
                && (version > 3 || *c != "rule_used")
        })
        .collect()
}

/// The fixed columns that belong to a case rather than to one of its modes: every line of a
/// case repeats them (with the parameter and check columns), and a reader refuses a file whose
/// lines of one case disagree on one.
const CASE_COLUMNS: &[&str] = &[
    // The host that measured the case (schema 5; before, the run's, compared with the run).
    "cpu_model",
    "cores",
    "rustc",
    "target_features",
    "workload",
    "tool",
    "tool_version",
    "dtype",
    "rule",
    "rule_used",
    "threads",
    "seed",
    "status",
    "message",
    "compile_s",
];

/// The modes a [`ResultRow`] holds, in file order.
pub const MODES: [&str; 3] = ["primal", "vjp", "jvp"];

const CHECK_FIELDS: [&str; 3] = ["worst", "tolerance", "passed"];

/// The columns of schema 2 (one line per case); schema 1 had all but the last.
const LEGACY_COLUMNS: &[&str] = &[
    "schema_version",
    "run_id",
    "timestamp",
    "git_revision",
    "adgauge_version",
    "machine",
    "cpu_model",
    "cores",
    "governor",
    "case_id",
    "workload",
    "params",
    "backend",
    "dtype",
    "rule",
    "threads",
    "seed",
    "primal_min_s",
    "primal_median_s",
    "primal_max_s",
    "primal_samples",
    "primal_batch",
    "primal_cv",
    "vjp_min_s",
    "vjp_median_s",
    "vjp_max_s",
    "vjp_samples",
    "vjp_batch",
    "vjp_cv",
    "jvp_min_s",
    "jvp_median_s",
    "jvp_max_s",
    "jvp_samples",
    "jvp_batch",
    "jvp_cv",
    "vjp_overhead",
    "jvp_overhead",
    "primal_peak_bytes",
    "vjp_peak_bytes",
    "jvp_peak_bytes",
    "vjp_memory_ratio",
    "jvp_memory_ratio",
    "checks",
    "status",
    "message",
    "compile_s",
];

/// Schema 1 had every legacy column but the last.
const V1_COLUMNS: usize = 45;

fn opt<T: ToString>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

/// A row's timing and peak bytes of one mode.
fn mode_of<'a>(row: &'a ResultRow, mode: &str) -> (Option<&'a Timing>, Option<u64>) {
    match mode {
        "primal" => (row.primal.as_ref(), row.primal_peak_bytes),
        "vjp" => (row.vjp.as_ref(), row.vjp_peak_bytes),
        "jvp" => (row.jvp.as_ref(), row.jvp_peak_bytes),
        _ => (None, None),
    }
}

/// The header of a run's file: the fixed columns, then its parameters (sorted) and checks.
pub fn header(rows: &[ResultRow]) -> Vec<String> {
    let params: BTreeSet<&str> = rows.iter().flat_map(|r| r.params.keys().map(String::as_str)).collect();
    // Checks in the order they were first run (the validation's order), each once.
    let mut checks: Vec<&str> = Vec::new();
    for c in rows.iter().flat_map(|r| r.checks.iter().map(|c| c.name.as_str())) {
        if !checks.contains(&c) {
            checks.push(c);
        }
    }
    let mut h: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    h.extend(params.iter().map(|p| format!("{PARAM_PREFIX}{p}")));
    for c in checks {
        h.extend(CHECK_FIELDS.iter().map(|f| format!("{CHECK_PREFIX}{c}.{f}")));
    }
    h
}

/// The file lines of one case (one per measured mode, or one with an empty mode), laid out under
/// `header`.
pub(crate) fn case_records(run: &RunInfo, row: &ResultRow, header: &[String]) -> Vec<Vec<String>> {
    let measured: Vec<&str> =
        MODES.iter().copied().filter(|m| matches!(mode_of(row, m), (Some(_), _) | (_, Some(_)))).collect();
    let modes = if measured.is_empty() { vec![""] } else { measured };
    modes
        .into_iter()
        .map(|mode| {
            let (t, peak) = mode_of(row, mode);
            let (overhead, memory) = if mode == "vjp" {
                (row.vjp_overhead(), row.vjp_memory_ratio())
            } else if mode == "jvp" {
                (row.jvp_overhead(), row.jvp_memory_ratio())
            } else {
                (None, None)
            };
            let samples: Vec<String> =
                t.map(|t| t.sample_s.iter().map(|x| format!("{x:e}")).collect()).unwrap_or_default();
            // The derived bandwidth columns belong to a histogram's primal line.
            let (achieved, fraction) = if mode == "primal" {
                (roofline::achieved_gb_s(row), roofline::fraction(row, run.roofline.as_ref()))
            } else {
                (None, None)
            };
            let host = row.host.clone().unwrap_or_else(|| crate::Host {
                cpu_model: run.cpu_model.clone(),
                cores: run.cores,
                ..crate::Host::default()
            });
            let mut f: Vec<String> = vec![
                SCHEMA_VERSION.to_string(),
                run.run_id.clone(),
                run.timestamp.clone(),
                run.git_revision.clone(),
                run.adgauge_version.clone(),
                run.suite.clone(),
                run.interrupted.clone().unwrap_or_default(),
                run.selection.clone().unwrap_or_default(),
                run.machine.clone(),
                host.cpu_model,
                host.cores.to_string(),
                run.governor.clone(),
            ];
            f.extend(roofline_fields(run.roofline.as_ref()));
            f.extend([
                host.rustc,
                host.target_features,
                row.case_id.clone(),
                row.workload.clone(),
                row.backend.clone(),
                row.tool_version.clone().unwrap_or_default(),
                row.dtype.clone(),
                row.rule.clone(),
                row.rule_used.clone().unwrap_or_default(),
                row.threads.to_string(),
                row.seed.to_string(),
                row.status.name().to_string(),
                row.message.clone().unwrap_or_default(),
                row.compile_s.map(|c| format!("{c:e}")).unwrap_or_default(),
                mode.to_string(),
                opt(t.map(|t| format!("{:e}", t.min_s))),
                opt(t.map(|t| format!("{:e}", t.median_s))),
                opt(t.map(|t| format!("{:e}", t.max_s))),
                opt(t.map(|t| t.samples)),
                opt(t.map(|t| t.batch)),
                opt(t.map(|t| format!("{:e}", t.cv))),
                samples.join(" "),
                opt(peak),
                opt(overhead),
                opt(memory),
                opt(achieved.map(|x| format!("{x:e}"))),
                opt(fraction.map(|x| format!("{x:e}"))),
            ]);
            for col in &header[COLUMNS.len()..] {
                if let Some(p) = col.strip_prefix(PARAM_PREFIX) {
                    f.push(row.params.get(p).cloned().unwrap_or_default());
                } else if let Some((name, field)) = col.strip_prefix(CHECK_PREFIX).and_then(|c| c.rsplit_once('.')) {
                    let c = row.checks.iter().find(|c| c.name == name);
                    f.push(match (c, field) {
                        (None, _) => String::new(),
                        (Some(c), "worst") => format!("{:e}", c.worst),
                        (Some(c), "tolerance") => format!("{:e}", c.tolerance),
                        (Some(c), _) => c.passed.to_string(),
                    });
                }
            }
            f
        })
        .collect()
}

/// The `roofline_*` fields of a run's lines: all empty without a roofline.
fn roofline_fields(roofline: Option<&Roofline>) -> [String; 6] {
    let Some(r) = roofline else { return Default::default() };
    let list = |f: &dyn Fn(&RandomRate) -> String| r.random.iter().map(f).collect::<Vec<_>>().join(" ");
    [
        r.threads.to_string(),
        format!("{:e}", r.seq_read_gb_s),
        list(&|x| x.bins.to_string()),
        list(&|x| format!("{:e}", x.reads_per_s)),
        list(&|x| format!("{:e}", x.updates_per_s)),
        r.tools.join(" "),
    ]
}

/// The run's roofline from its line's `roofline_*` fields (`get` reads a column, empty where
/// the file's schema lacks it): None when they are all empty, an error naming the column when
/// one is malformed or missing, a rate is not finite and positive, or the lists differ in length.
fn parse_roofline(get: &dyn Fn(&str) -> String) -> Result<Option<Roofline>, String> {
    const NAMES: [&str; 6] = [
        "roofline_threads",
        "roofline_seq_read_gb_s",
        "roofline_bins",
        "roofline_random_reads_per_s",
        "roofline_random_updates_per_s",
        "roofline_tools",
    ];
    let fields: Vec<String> = NAMES.iter().map(|c| get(c)).collect();
    if fields.iter().all(|f| f.is_empty()) {
        return Ok(None);
    }
    let rate = |column: &str, s: &str| -> Result<f64, String> {
        match s.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(format!("{column}: '{s}' is not a rate (a finite number > 0)")),
        }
    };
    let threads: usize = num(NAMES[0], &fields[0])?;
    let seq_read_gb_s = rate(NAMES[1], &fields[1])?;
    // Bins read back from JSON lines as reals (`10.0`): whole numbers of at least one.
    let bins = fields[2]
        .split_whitespace()
        .map(|s| match s.parse::<f64>() {
            Ok(x) if x >= 1.0 && x.fract() == 0.0 && x < 2f64.powi(53) => Ok(x as usize),
            _ => Err(format!("{}: '{s}' is not a bin count", NAMES[2])),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rates = |i: usize| fields[i].split_whitespace().map(|s| rate(NAMES[i], s)).collect::<Result<Vec<_>, _>>();
    let (reads, updates) = (rates(3)?, rates(4)?);
    if reads.len() != bins.len() || updates.len() != bins.len() {
        return Err(format!(
            "{} bin counts, {} read rates and {} update rates: one of each per bin count",
            bins.len(),
            reads.len(),
            updates.len()
        ));
    }
    let random = bins
        .into_iter()
        .zip(reads.into_iter().zip(updates))
        .map(|(bins, (reads_per_s, updates_per_s))| RandomRate { bins, reads_per_s, updates_per_s })
        .collect();
    let tools = fields[5].split_whitespace().map(String::from).collect();
    Ok(Some(Roofline { threads, seq_read_gb_s, random, tools }))
}

/// A CSV field as a typed JSON value (empty is null).
fn json_value(kind: Kind, field: &str) -> serde_json::Value {
    use serde_json::Value;
    // A non-finite real is a string ("NaN", "inf", "-inf"), which reads back ([`crate::real`]).
    let real = |x: &str| x.parse::<f64>().ok().map(crate::real::to_json);
    match kind {
        _ if field.is_empty() && kind != Kind::Samples => Value::Null,
        Kind::Text => field.into(),
        Kind::Count => field.parse::<u64>().map(Value::from).unwrap_or(Value::Null),
        Kind::Real => real(field).unwrap_or(Value::Null),
        Kind::Flag => field.parse::<bool>().map(Value::from).unwrap_or(Value::Null),
        Kind::Samples | Kind::Reals => Value::Array(field.split_whitespace().filter_map(real).collect()),
    }
}

/// The file lines of a run's rows as JSON objects, one per line (`run --json`): the same
/// columns, in the file's order, with typed values.
pub fn json_lines(run: &RunInfo, rows: &[ResultRow]) -> Vec<String> {
    let header = header(rows);
    let records: Vec<Vec<String>> = rows.iter().flat_map(|r| case_records(run, r, &header)).collect();
    let kinds: Vec<Kind> = header
        .iter()
        .enumerate()
        .map(|(i, h)| column_kind(h, &records.iter().map(|r| r[i].as_str()).collect::<Vec<_>>()))
        .collect();
    records
        .iter()
        .map(|r| {
            // Written by hand to keep the file's column order (serde_json's maps sort keys).
            let fields: Vec<String> = header
                .iter()
                .zip(r)
                .zip(&kinds)
                .map(|((h, f), k)| format!("{}:{}", serde_json::Value::from(h.as_str()), json_value(*k, f)))
                .collect();
            format!("{{{}}}", fields.join(","))
        })
        .collect()
}

/// Reads JSON lines written by [`json_lines`] back into a run (the lines of one run, in any
/// order); errors name `origin` and the line.
pub fn rows_from_json_lines(text: &str, origin: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    use serde_json::Value;
    let err = |line: usize, message: String| StoreError::Parse { path: origin.to_path_buf(), line, message };
    let mut objects = Vec::new();
    for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match serde_json::from_str::<serde_json::Map<String, Value>>(l) {
            Ok(o) => objects.push((i + 1, o)),
            Err(e) => return Err(err(i + 1, format!("not a JSON object: {e}"))),
        }
    }
    let mut header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    for (_, o) in &objects {
        for k in o.keys() {
            if !header.contains(k) {
                header.push(k.clone());
            }
        }
    }
    let field = |v: Option<&Value>| match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(xs)) => {
            xs.iter().map(|x| x.as_str().map_or_else(|| x.to_string(), String::from)).collect::<Vec<_>>().join(" ")
        }
        Some(other) => other.to_string(),
    };
    let records: Vec<Record> =
        objects.iter().map(|(line, o)| (*line, header.iter().map(|h| field(o.get(h))).collect())).collect();
    // Lines of schema 3 lack `rule_used`, which then reads as empty.
    let version = match objects.first().and_then(|(_, o)| o.get("schema_version")).and_then(Value::as_u64) {
        Some(v @ (3..=6)) => v as u32,
        _ => SCHEMA_VERSION,
    };
    parse_typed(&header, COLUMNS, version, &records).map_err(|(l, m)| err(l, m))
}

/// A whole run as CSV text (header included).
pub fn to_csv(run: &RunInfo, rows: &[ResultRow]) -> String {
    let header = header(rows);
    let mut w = csv::Writer::from_writer(Vec::new());
    // Writing into memory cannot fail, and every record has the header's width by construction.
    let mut write = |rec: &[String]| w.write_record(rec).expect("writing CSV into memory");
    write(&header);
    for r in rows {
        for rec in case_records(run, r, &header) {
            write(&rec);
        }
    }
    String::from_utf8(w.into_inner().expect("flushing CSV into memory")).expect("CSV of UTF-8 fields is UTF-8")
}

/// A CSV record: its 1-based starting line and its fields.
type Record = (usize, Vec<String>);

/// The file's records with their 1-based starting line.
fn records(text: &str) -> Result<Vec<Record>, (usize, String)> {
    let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut out = Vec::new();
    for rec in r.records() {
        match rec {
            Ok(rec) => {
                let line = rec.position().map(|p| p.line() as usize).unwrap_or(0);
                out.push((line, rec.iter().map(String::from).collect()));
            }
            Err(e) => {
                let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
                return Err((line, e.to_string()));
            }
        }
    }
    Ok(out)
}

fn parse_status(s: &str) -> Result<Status, String> {
    Ok(match s {
        "ok" => Status::Ok,
        "failed" => Status::Failed,
        "error" => Status::Error,
        "skipped" => Status::Skipped,
        "timeout" => Status::Timeout,
        other => return Err(format!("unknown status '{other}'")),
    })
}

fn num<T: std::str::FromStr>(column: &str, s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{column}: '{s}' is not a valid value"))
}

fn opt_num<T: std::str::FromStr>(column: &str, s: &str) -> Result<Option<T>, String> {
    if s.is_empty() { Ok(None) } else { num(column, s).map(Some) }
}

/// `Err` naming the column unless `x` is a time: a finite number of seconds, not negative. A
/// negative or NaN time is a corrupted or hand-edited file, which every reader (history, report,
/// gate, merge) refuses rather than show or judge.
fn check_time(column: &str, x: f64) -> Result<(), String> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(format!("{column}: {x} is not a time (a finite number of seconds >= 0)"))
    }
}

/// `Err` naming the field unless every time of `t` (and its coefficient of variation) is finite
/// and not negative, and a stored median is its samples' median (the middle one, or the mean of
/// the middle two): the gate judges the samples and reports the median, so the two must agree.
pub fn check_timing(t: &Timing) -> Result<(), String> {
    check_time("min_s", t.min_s)?;
    check_time("median_s", t.median_s)?;
    check_time("max_s", t.max_s)?;
    for &x in &t.sample_s {
        check_time("sample_s", x)?;
    }
    if !t.sample_s.is_empty() {
        let mut s = t.sample_s.clone();
        s.sort_by(f64::total_cmp);
        let m = s.len();
        let median = if m % 2 == 1 { s[m / 2] } else { 0.5 * (s[m / 2 - 1] + s[m / 2]) };
        if (median - t.median_s).abs() > 1e-9 * median.abs().max(t.median_s.abs()) {
            return Err(format!(
                "median_s: {:e} is not the median of its {m} samples in sample_s ({median:e})",
                t.median_s
            ));
        }
    }
    if !(t.cv.is_finite() && t.cv >= 0.0) {
        return Err(format!("cv: {} is not a coefficient of variation (finite, >= 0)", t.cv));
    }
    Ok(())
}

fn check_compile_time(compile_s: Option<f64>) -> Result<(), String> {
    compile_s.map_or(Ok(()), |c| check_time("compile_s", c))
}

/// `Err` naming the mode and field unless every time of `row` is finite and not negative: what
/// the file readers check line by line, for rows that come from elsewhere (a partial run's JSON).
pub fn check_row(row: &ResultRow) -> Result<(), String> {
    for (mode, t) in [("primal", &row.primal), ("vjp", &row.vjp), ("jvp", &row.jvp)] {
        if let Some(t) = t {
            check_timing(t).map_err(|e| format!("{mode} {e}"))?;
        }
    }
    check_compile_time(row.compile_s)
}

/// Parses a run file: its run information and rows.
pub fn parse_csv(text: &str, path: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    let err = |line: usize, message: String| StoreError::Parse { path: path.to_path_buf(), line, message };
    let recs = records(text).map_err(|(l, m)| err(l, m))?;
    let Some((_, header)) = recs.first() else {
        return Err(err(1, "empty file: expected the header line".into()));
    };
    let starts_with = |fixed: &[&str]| header.len() >= fixed.len() && header.iter().zip(fixed).all(|(h, c)| h == c);
    let (v6, v5, v4, v3) = (old_columns(6), old_columns(5), old_columns(4), old_columns(3));
    let fixed: Option<(&[&str], u32)> = if starts_with(COLUMNS) {
        Some((COLUMNS, SCHEMA_VERSION))
    } else if starts_with(&v6) {
        Some((&v6, 6))
    } else if starts_with(&v5) {
        Some((&v5, 5))
    } else if starts_with(&v4) {
        Some((&v4, 4))
    } else if starts_with(&v3) {
        Some((&v3, 3))
    } else {
        None
    };
    let legacy_width = match header.len() {
        n if n == LEGACY_COLUMNS.len() || n == V1_COLUMNS => Some(n),
        _ => None,
    }
    .filter(|&n| header.iter().map(String::as_str).eq(LEGACY_COLUMNS[..n].iter().copied()));
    if let Some((fixed, version)) = fixed {
        parse_typed(header, fixed, version, &recs[1..]).map_err(|(l, m)| err(l, m))
    } else if let Some(width) = legacy_width {
        parse_legacy(width, &recs[1..]).map_err(|(l, m)| err(l, m))
    } else {
        // A newer adgauge's file: say so rather than "bad header".
        if header.first().map(String::as_str) == Some("schema_version")
            && let Some((line, first)) = recs.get(1)
            && let Ok(v) = first[0].parse::<u32>()
            && v > SCHEMA_VERSION
        {
            return Err(err(
                *line,
                format!(
                    "schema {v} is newer than this adgauge, which reads schemas 1 to {SCHEMA_VERSION}: upgrade adgauge"
                ),
            ));
        }
        Err(err(
            1,
            format!(
                "unexpected header (expected the columns {}, ... of schema {SCHEMA_VERSION}, 6, 5, 4 or 3, or the {} columns of schema 2 or the {V1_COLUMNS} of schema 1)",
                COLUMNS[..3].join(","),
                LEGACY_COLUMNS.len()
            ),
        ))
    }
}

type Failed = (usize, String);

/// A file of schema 3 to 7: `fixed` are its fixed columns, `file_version` the schema they make.
fn parse_typed(
    header: &[String],
    fixed: &[&str],
    file_version: u32,
    recs: &[Record],
) -> Result<(RunInfo, Vec<ResultRow>), Failed> {
    // A column the file's schema lacks reads as empty.
    let col = |name: &str| fixed.iter().position(|c| *c == name);
    // The dynamic columns: parameters, and checks with their three fields.
    let mut params: Vec<(usize, &str)> = Vec::new();
    let mut checks: Vec<(&str, [Option<usize>; 3])> = Vec::new();
    for (i, h) in header.iter().enumerate().skip(fixed.len()) {
        if let Some(p) = h.strip_prefix(PARAM_PREFIX) {
            params.push((i, p));
        } else if let Some((name, field)) = h.strip_prefix(CHECK_PREFIX).and_then(|c| c.rsplit_once('.'))
            && let Some(k) = CHECK_FIELDS.iter().position(|f| *f == field)
        {
            match checks.iter_mut().find(|(n, _)| *n == name) {
                Some((_, fields)) => fields[k] = Some(i),
                None => {
                    let mut fields = [None; 3];
                    fields[k] = Some(i);
                    checks.push((name, fields));
                }
            }
        } else {
            return Err((
                1,
                format!(
                    "unknown column '{h}' (expected {PARAM_PREFIX}NAME or {CHECK_PREFIX}NAME.worst|tolerance|passed)"
                ),
            ));
        }
    }
    for (name, fields) in &checks {
        if fields.iter().any(Option::is_none) {
            return Err((1, format!("check '{name}' lacks one of its columns worst, tolerance, passed")));
        }
    }
    // The columns every line of a case repeats: the case's identity and outcome, parameters and
    // checks (run columns are compared through the run's information; the rest are per mode).
    let per_case: Vec<usize> = header
        .iter()
        .enumerate()
        .filter(|(i, h)| *i >= fixed.len() || CASE_COLUMNS.contains(&h.as_str()))
        .map(|(i, _)| i)
        .collect();
    let mut run: Option<RunInfo> = None;
    let mut rows: Vec<ResultRow> = Vec::new();
    // Per case: its row's index, and the line it was first seen on with that line's fields.
    let mut index: BTreeMap<String, (usize, usize, &[String])> = BTreeMap::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (line, f) in recs {
        let line = *line;
        let at = |m: String| (line, m);
        if f.len() != header.len() {
            return Err(at(format!(
                "{} fields, expected {} (a truncated or hand-edited file?)",
                f.len(),
                header.len()
            )));
        }
        let get = |name: &str| col(name).map_or("", |i| f[i].as_str());
        let version: u32 = num("schema_version", get("schema_version")).map_err(at)?;
        if version != file_version {
            return Err(at(format!("schema version {version} in a file of schema {file_version}")));
        }
        let host = crate::Host {
            cpu_model: get("cpu_model").into(),
            cores: num("cores", get("cores")).map_err(at)?,
            rustc: get("rustc").into(),
            target_features: get("target_features").into(),
        };
        let info = RunInfo {
            run_id: get("run_id").into(),
            timestamp: get("timestamp").into(),
            git_revision: get("git_revision").into(),
            adgauge_version: get("adgauge_version").into(),
            machine: get("machine").into(),
            cpu_model: host.cpu_model.clone(),
            cores: host.cores,
            governor: get("governor").into(),
            suite: get("suite").into(),
            roofline: parse_roofline(&|c| get(c).to_string()).map_err(at)?,
            interrupted: Some(get("interrupted").to_string()).filter(|s| !s.is_empty()),
            selection: Some(get("selection").to_string()).filter(|s| !s.is_empty()),
        };
        // The host is the row's own: lines of one run may differ in it (a merge of shards).
        let same_run = |r: &RunInfo| RunInfo { cpu_model: r.cpu_model.clone(), cores: r.cores, ..info.clone() } == *r;
        match &run {
            None => run = Some(info),
            Some(r) if !same_run(r) => {
                return Err(at(format!("run {} in a file of run {}: one file holds one run", info.run_id, r.run_id)));
            }
            Some(_) => {}
        }
        let case_id = get("case_id").to_string();
        let mode = get("mode").to_string();
        if let Some(first) = seen.insert((case_id.clone(), mode.clone()), line) {
            return Err(at(format!("duplicate line for case {case_id} mode '{mode}' (first on line {first})")));
        }
        // A line with no mode says the case measured nothing: it is the case's only line.
        let other = if mode.is_empty() {
            index.get(&case_id).map(|&(_, first, _)| first)
        } else {
            seen.get(&(case_id.clone(), String::new())).copied()
        };
        if let Some(other) = other {
            return Err(at(format!(
                "case {case_id}: a line with no mode (nothing measured) and a line of a mode (line {other}) for one case"
            )));
        }
        let i = match index.get(&case_id) {
            Some(&(i, first_line, first)) => {
                // Each line repeats the case's columns; a reader taking them from one line only
                // would let another line's `failed` pass unseen.
                if let Some(&c) = per_case.iter().find(|&&c| f[c] != first[c]) {
                    return Err(at(format!(
                        "case {case_id}: {} is '{}' here but '{}' on line {first_line}: the lines of one case must agree on its columns",
                        header[c], f[c], first[c]
                    )));
                }
                i
            }
            None => {
                let mut row_checks = Vec::new();
                for (name, [w, t, p]) in &checks {
                    let (w, t, p) = (&f[w.unwrap_or(0)], &f[t.unwrap_or(0)], &f[p.unwrap_or(0)]);
                    if w.is_empty() && t.is_empty() && p.is_empty() {
                        continue; // not a check of this case
                    }
                    row_checks.push(Check {
                        name: name.to_string(),
                        worst: num(&format!("check.{name}.worst"), w).map_err(at)?,
                        tolerance: num(&format!("check.{name}.tolerance"), t).map_err(at)?,
                        passed: num(&format!("check.{name}.passed"), p).map_err(at)?,
                    });
                }
                let row = ResultRow {
                    schema_version: version,
                    case_id: case_id.clone(),
                    workload: get("workload").into(),
                    params: params
                        .iter()
                        .filter(|(i, _)| !f[*i].is_empty())
                        .map(|(i, p)| (p.to_string(), f[*i].clone()))
                        .collect(),
                    backend: get("tool").into(),
                    dtype: get("dtype").into(),
                    rule: get("rule").into(),
                    rule_used: Some(get("rule_used").to_string()).filter(|r| !r.is_empty()),
                    threads: num("threads", get("threads")).map_err(at)?,
                    seed: num("seed", get("seed")).map_err(at)?,
                    primal: None,
                    vjp: None,
                    jvp: None,
                    primal_peak_bytes: None,
                    vjp_peak_bytes: None,
                    jvp_peak_bytes: None,
                    checks: row_checks,
                    status: parse_status(get("status")).map_err(at)?,
                    message: Some(get("message").to_string()).filter(|m| !m.is_empty()),
                    compile_s: opt_num("compile_s", get("compile_s")).map_err(at)?,
                    tool_version: Some(get("tool_version").to_string()).filter(|v| !v.is_empty()),
                    host: Some(host),
                };
                check_compile_time(row.compile_s).map_err(at)?;
                rows.push(row);
                index.insert(case_id.clone(), (rows.len() - 1, line, f.as_slice()));
                rows.len() - 1
            }
        };
        let timing = match opt_num::<f64>("median_s", get("median_s")).map_err(at)? {
            None => None,
            Some(median_s) => Some(Timing {
                min_s: num("min_s", get("min_s")).map_err(at)?,
                median_s,
                max_s: num("max_s", get("max_s")).map_err(at)?,
                batch: num("batch", get("batch")).map_err(at)?,
                samples: num("samples", get("samples")).map_err(at)?,
                cv: num("cv", get("cv")).map_err(at)?,
                sample_s: get("sample_s")
                    .split_whitespace()
                    .map(|x| num("sample_s", x))
                    .collect::<Result<_, _>>()
                    .map_err(at)?,
            }),
        };
        if let Some(t) = &timing {
            check_timing(t).map_err(at)?;
        }
        let peak = opt_num::<u64>("peak_bytes", get("peak_bytes")).map_err(at)?;
        let row = &mut rows[i];
        match mode.as_str() {
            "primal" => (row.primal, row.primal_peak_bytes) = (timing, peak),
            "vjp" => (row.vjp, row.vjp_peak_bytes) = (timing, peak),
            "jvp" => (row.jvp, row.jvp_peak_bytes) = (timing, peak),
            // A case with nothing measured, or a named extra mode of a tool that this version's
            // rows have no field for (kept in the file, where dataframe queries see it).
            _ => {}
        }
    }
    let mut run = run.ok_or((2, "no result rows".to_string()))?;
    // Lines that record nothing beyond the run's CPU model and cores (files of schema 3 and 4, and
    // rows written without a host) read as rows without a host of their own.
    let plain = |h: &crate::Host| {
        h.cpu_model == run.cpu_model && h.cores == run.cores && h.rustc.is_empty() && h.target_features.is_empty()
    };
    if rows.iter().all(|r| r.host.as_ref().is_some_and(plain)) {
        for r in &mut rows {
            r.host = None;
        }
    }
    // A run of several hosts names all of their CPU models (sorted: shards finish in any order).
    let cpus: BTreeSet<&str> = rows.iter().filter_map(|r| r.host.as_ref()).map(|h| h.cpu_model.as_str()).collect();
    if cpus.len() > 1 {
        run.cpu_model = cpus.into_iter().collect::<Vec<_>>().join(" + ");
    }
    Ok((run, rows))
}

fn parse_legacy_timing(f: &[String]) -> Result<Option<Timing>, String> {
    if f[1].is_empty() {
        return Ok(None);
    }
    Ok(Some(Timing {
        min_s: num("min_s", &f[0])?,
        median_s: num("median_s", &f[1])?,
        max_s: num("max_s", &f[2])?,
        samples: num("samples", &f[3])?,
        batch: num("batch", &f[4])?,
        cv: num("cv", &f[5])?,
        sample_s: Vec::new(),
    }))
}

fn parse_legacy_checks(s: &str) -> Result<Vec<Check>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(';')
        .map(|c| {
            let (name, rest) = c.split_once('=').ok_or_else(|| format!("check '{c}' has no '='"))?;
            let parts: Vec<&str> = rest.split('/').collect();
            if parts.len() != 3 {
                return Err(format!("check '{c}' is not name=worst/tolerance/state"));
            }
            Ok(Check {
                name: name.into(),
                worst: num("check worst", parts[0])?,
                tolerance: num("check tolerance", parts[1])?,
                passed: parts[2] == "ok",
            })
        })
        .collect()
}

/// Schemas 1 and 2: one line per case, parameters and checks packed into strings.
fn parse_legacy(width: usize, recs: &[Record]) -> Result<(RunInfo, Vec<ResultRow>), Failed> {
    let col = |name: &str| LEGACY_COLUMNS.iter().position(|c| *c == name).expect("a legacy column");
    let file_version = if width == V1_COLUMNS { 1 } else { 2 };
    let mut run = None;
    let mut rows = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (line, f) in recs {
        let at = |m: String| (*line, m);
        if f.len() != width {
            return Err(at(format!("{} fields, expected {width}", f.len())));
        }
        // One line per case: a second would make every query count the case twice, and the
        // gate's best-of take whichever is faster.
        if let Some(first) = seen.insert(f[9].as_str(), *line) {
            return Err(at(format!("duplicate line for case {} (first on line {first})", f[9])));
        }
        let version: u32 = num("schema_version", &f[0]).map_err(at)?;
        if version != file_version {
            return Err(at(format!("schema version {version} in a file of schema {file_version}")));
        }
        if run.is_none() {
            run = Some(RunInfo {
                run_id: f[1].clone(),
                timestamp: f[2].clone(),
                git_revision: f[3].clone(),
                adgauge_version: f[4].clone(),
                machine: f[5].clone(),
                cpu_model: f[6].clone(),
                cores: num("cores", &f[7]).map_err(at)?,
                governor: f[8].clone(),
                suite: String::new(),
                roofline: None,
                interrupted: None,
                selection: None,
            });
        }
        let mut params = BTreeMap::new();
        for kv in f[11].split(';').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| at(format!("parameter '{kv}' has no '='")))?;
            params.insert(k.to_string(), v.to_string());
        }
        let bytes = |name: &str| opt_num::<u64>(name, &f[col(name)]).map_err(at);
        let row = ResultRow {
            schema_version: version,
            case_id: f[9].clone(),
            workload: f[10].clone(),
            params,
            backend: f[12].clone(),
            dtype: f[13].clone(),
            rule: f[14].clone(),
            rule_used: None,
            threads: num("threads", &f[15]).map_err(at)?,
            seed: num("seed", &f[16]).map_err(at)?,
            primal: parse_legacy_timing(&f[col("primal_min_s")..]).map_err(at)?,
            vjp: parse_legacy_timing(&f[col("vjp_min_s")..]).map_err(at)?,
            jvp: parse_legacy_timing(&f[col("jvp_min_s")..]).map_err(at)?,
            primal_peak_bytes: bytes("primal_peak_bytes")?,
            vjp_peak_bytes: bytes("vjp_peak_bytes")?,
            jvp_peak_bytes: bytes("jvp_peak_bytes")?,
            checks: parse_legacy_checks(&f[col("checks")]).map_err(at)?,
            status: parse_status(&f[col("status")]).map_err(at)?,
            message: Some(f[col("message")].clone()).filter(|m| !m.is_empty()),
            compile_s: match f.get(col("compile_s")) {
                None => None,
                Some(c) => opt_num("compile_s", c).map_err(at)?,
            },
            tool_version: None,
            host: None,
        };
        check_row(&row).map_err(at)?;
        rows.push(row);
    }
    let run = run.ok_or((2, "no result rows".to_string()))?;
    Ok((run, rows))
}

/// Reads one run file.
pub fn read_run(path: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    let text = fs::read_to_string(path).map_err(io(path))?;
    parse_csv(&text, path)
}

/// The temporary a file is written to before it is renamed into place: hidden (so never taken
/// for a run), in the same directory (so the rename is atomic), named by the process.
fn temporary(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!(".{name}.{}.tmp", std::process::id()))
}

/// The file operations a run's files are committed with: the disk itself, or in tests one that
/// fails at a chosen step.
trait Disk {
    /// Creates `path` with `bytes`, synced to the disk.
    fn write(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()>;
}

struct RealDisk;

impl Disk for RealDisk {
    fn write(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = fs::File::create(path)?;
        f.write_all(bytes)?;
        f.sync_all()
    }
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        fs::rename(from, to)
    }
}

/// Makes renames in `dir` durable.
fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes each `(path, bytes)` all or nothing: every file to its temporary first, in order, then
/// each renamed into place, in order. On a failure at any step the temporaries are removed and
/// so is every file already renamed into place, and the error names the file.
fn commit(disk: &mut dyn Disk, files: &[(PathBuf, Vec<u8>)]) -> Result<(), StoreError> {
    let temps: Vec<PathBuf> = files.iter().map(|(p, _)| temporary(p)).collect();
    let mut placed: Vec<&Path> = Vec::new();
    let mut steps = || -> Result<(), StoreError> {
        for ((_, bytes), tmp) in files.iter().zip(&temps) {
            disk.write(tmp, bytes).map_err(io(tmp))?;
        }
        for ((path, _), tmp) in files.iter().zip(&temps) {
            disk.rename(tmp, path).map_err(io(path))?;
            placed.push(path);
        }
        Ok(())
    };
    let result = steps();
    if result.is_err() {
        for p in temps.iter().map(PathBuf::as_path).chain(placed) {
            let _ = fs::remove_file(p);
        }
    }
    if let Some(dir) = files.first().and_then(|(p, _)| p.parent()) {
        sync_dir(dir);
    }
    result
}

/// Writes `contents` to `path` atomically: temporary file in the same directory, fsync, rename
/// (the temporary removed on failure).
pub fn write_atomic(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    commit(&mut RealDisk, &[(path.to_path_buf(), contents.as_ref().to_vec())])
}

/// A run's Parquet file: its file's columns, one row per case and mode.
pub fn run_parquet(run: &RunInfo, rows: &[ResultRow]) -> ::parquet::errors::Result<Vec<u8>> {
    let header = header(rows);
    let records: Vec<Vec<String>> = rows.iter().flat_map(|r| case_records(run, r, &header)).collect();
    crate::parquet::fields_parquet(&header, &records)
}

/// Adds a run to a history directory as `<run_id>.csv`, the run's record, with the same table as
/// `<run_id>.parquet` beside it for dataframe tools. All or nothing: both are encoded first,
/// written to temporaries (CSV, then Parquet) and only then renamed into place (CSV first); a
/// failure at any step (a full disk) removes the temporaries and any file already in place, so
/// a dataframe query over the Parquet files never counts a run that `adgauge history` does not
/// have. Never touches existing files.
pub fn append_run(dir: &Path, run: &RunInfo, rows: &[ResultRow]) -> Result<PathBuf, StoreError> {
    append_run_on(&mut RealDisk, dir, run, rows)
}

fn append_run_on(disk: &mut dyn Disk, dir: &Path, run: &RunInfo, rows: &[ResultRow]) -> Result<PathBuf, StoreError> {
    let path = dir.join(format!("{}.csv", run.run_id));
    let parquet = dir.join(format!("{}.parquet", run.run_id));
    for p in [&path, &parquet] {
        if p.symlink_metadata().is_ok() {
            return Err(StoreError::Io {
                path: p.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a run with this id is already in the history",
                ),
            });
        }
    }
    let bytes = run_parquet(run, rows).map_err(|e| StoreError::Parse {
        path: parquet.clone(),
        line: 0,
        message: format!("writing Parquet: {e}"),
    })?;
    fs::create_dir_all(dir).map_err(io(dir))?;
    commit(disk, &[(path.clone(), to_csv(run, rows).into_bytes()), (parquet, bytes)])?;
    Ok(path)
}

/// Every run of a history directory, oldest first (run ids start with a sortable timestamp).
pub fn read_history(dir: &Path) -> Result<Vec<(RunInfo, Vec<ResultRow>)>, StoreError> {
    Ok(read_history_files(dir)?.into_iter().map(|(_, info, rows)| (info, rows)).collect())
}

/// Every run of a history directory with its file, oldest first. A corrupt file, or one run
/// stored twice (a copied file: every query would count it twice), is an error naming the file
/// and line; nothing is changed on disk.
pub fn read_history_files(dir: &Path) -> Result<Vec<(PathBuf, RunInfo, Vec<ResultRow>)>, StoreError> {
    let mut out: Vec<(PathBuf, RunInfo, Vec<ResultRow>)> = Vec::new();
    for p in run_files(dir)? {
        let (info, rows) = read_run(&p)?;
        if let Some((first, ..)) = out.iter().find(|(_, i, _)| i.run_id == info.run_id) {
            return Err(StoreError::Parse {
                path: p,
                line: 2,
                message: format!(
                    "run {} is already in the history as {}: remove one copy",
                    info.run_id,
                    first.display()
                ),
            });
        }
        out.push((p, info, rows));
    }
    out.sort_by(|a, b| a.1.run_id.cmp(&b.1.run_id));
    Ok(out)
}

/// The file in a history directory that records the runs set aside and brought back
/// (`adgauge history --set-aside RUN --why TEXT`, `--restore RUN`): one JSON object per line,
/// appended, never rewritten. A run set aside is never a baseline; its files stay where they are.
pub const SET_ASIDE_FILE: &str = "set-aside.jsonl";

/// One line of [`SET_ASIDE_FILE`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SetAside {
    /// UTC, RFC 3339.
    pub time: String,
    /// `set-aside` or `restore`.
    pub action: String,
    pub run_id: String,
    /// Why, in the user's words.
    pub why: String,
}

/// The set-aside record of a history: every line, oldest first (none without the file). A line
/// that is not a record, or names an unknown action, is an error naming the file and line.
pub fn read_set_aside(dir: &Path) -> Result<Vec<SetAside>, StoreError> {
    let path = dir.join(SET_ASIDE_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::Io { path, source: e }),
    };
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let err = |message: String| StoreError::Parse { path: path.clone(), line: i + 1, message };
        let entry: SetAside = serde_json::from_str(l)
            .map_err(|e| err(format!("not a set-aside record (time, action, run_id, why): {e}")))?;
        if entry.action != "set-aside" && entry.action != "restore" {
            return Err(err(format!("action '{}': expected set-aside or restore", entry.action)));
        }
        out.push(entry);
    }
    Ok(out)
}

/// The runs of a history set aside now (the last record of each run says `set-aside`), with the
/// record that did it.
pub fn set_aside_runs(dir: &Path) -> Result<BTreeMap<String, SetAside>, StoreError> {
    let mut now = BTreeMap::new();
    for e in read_set_aside(dir)? {
        if e.action == "set-aside" {
            now.insert(e.run_id.clone(), e);
        } else {
            now.remove(&e.run_id);
        }
    }
    Ok(now)
}

/// Appends a record to a history's [`SET_ASIDE_FILE`] (created if absent) and syncs it.
pub fn record_set_aside(dir: &Path, entry: &SetAside) -> Result<(), StoreError> {
    let path = dir.join(SET_ASIDE_FILE);
    let line = serde_json::to_string(entry).expect("a record of strings serializes") + "\n";
    let mut f = fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io(&path))?;
    f.write_all(line.as_bytes()).map_err(io(&path))?;
    f.sync_all().map_err(io(&path))
}

/// How the file of a run in progress ends: `.<run_id>.partial.jsonl` holds the run's
/// information (a JSON object), then one JSON row per line as each case finishes; the complete
/// run file replaces it when the run ends. A killed run leaves it behind.
pub const PARTIAL_FILE_SUFFIX: &str = ".partial.jsonl";

/// The file of a run in progress in `dir` (hidden: not a run).
pub fn partial_path(dir: &Path, run_id: &str) -> PathBuf {
    dir.join(format!(".{run_id}{PARTIAL_FILE_SUFFIX}"))
}

/// Whether `path` names the file of a run in progress.
pub fn is_partial_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(PARTIAL_FILE_SUFFIX))
}

/// Parses the file of a run in progress (see [`PARTIAL_FILE_SUFFIX`]): the run's information
/// and every complete row. A last line without its newline is the row being written when the
/// run was killed, and is left out; any other bad line, a case twice, or a time that is not
/// finite and non-negative is an error naming the line.
pub fn parse_partial(text: &str, path: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    let err = |line: usize, message: String| StoreError::Parse { path: path.to_path_buf(), line, message };
    let mut lines = text.split_inclusive('\n').enumerate();
    let Some((_, first)) = lines.next() else {
        return Err(err(1, "empty file: expected the run's information (a JSON object)".into()));
    };
    let run: RunInfo =
        serde_json::from_str(first).map_err(|e| err(1, format!("not a run's information (a JSON object): {e}")))?;
    let mut rows: Vec<ResultRow> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, l) in lines {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let row: ResultRow = match serde_json::from_str(l) {
            Ok(row) => row,
            // Cut by the kill: the case it was writing had not finished.
            Err(_) if !l.ends_with('\n') => break,
            Err(e) => return Err(err(line, format!("not a result row (a JSON object): {e}"))),
        };
        check_row(&row).map_err(|m| err(line, m))?;
        if let Some(first) = seen.insert(row.case_id.clone(), line) {
            return Err(err(line, format!("duplicate row for case {} (first on line {first})", row.case_id)));
        }
        rows.push(row);
    }
    Ok((run, rows))
}

/// Reads the file of a run in progress ([`parse_partial`]).
pub fn read_partial(path: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    let text = fs::read_to_string(path).map_err(io(path))?;
    parse_partial(&text, path)
}

/// The files of runs in progress (or killed) in `dir`, oldest first.
pub fn partial_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_partial_file(p))
        .collect();
    paths.sort();
    Ok(paths)
}

/// The run files of a history directory, oldest first; hidden files (partial runs, temporary
/// files of a writer) are not runs.
pub fn run_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "csv")
                && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample() -> (RunInfo, Vec<ResultRow>) {
        let run = RunInfo {
            run_id: "20261122T050000Z-abc".into(),
            timestamp: "2026-11-22T05:00:00Z".into(),
            git_revision: "deadbeef".into(),
            adgauge_version: "0.1.0".into(),
            machine: "host, \"quoted\"".into(),
            cpu_model: "Some CPU @ 2.0GHz".into(),
            cores: 2,
            governor: "performance".into(),
            suite: "quick".into(),
            roofline: None,
            interrupted: None,
            selection: None,
        };
        let mut params = BTreeMap::new();
        params.insert("n".to_string(), "1000".to_string());
        params.insert("k".to_string(), "10".to_string());
        let row = ResultRow {
            schema_version: SCHEMA_VERSION,
            case_id: "hist-add[k=10,n=1000]/cpu/f32/auto".into(),
            workload: "hist-add".into(),
            params,
            backend: "cpu".into(),
            dtype: "f32".into(),
            rule: "auto".into(),
            rule_used: Some("general-chunked".into()),
            threads: 2,
            seed: 42,
            primal: Some(Timing {
                min_s: 1e-3,
                median_s: 1.5e-3,
                max_s: 2e-3,
                batch: 1,
                samples: 3,
                cv: 0.125,
                sample_s: vec![2e-3, 1e-3, 1.5e-3],
            }),
            vjp: Some(Timing {
                min_s: 2e-3,
                median_s: 3e-3,
                max_s: 4e-3,
                batch: 7,
                samples: 5,
                cv: 0.5,
                sample_s: vec![],
            }),
            jvp: None,
            primal_peak_bytes: Some(4000),
            vjp_peak_bytes: Some(8000),
            jvp_peak_bytes: None,
            checks: vec![
                Check { name: "fd-vjp".into(), worst: 1.5e-9, tolerance: 1e-6, passed: true },
                Check { name: "dot-product".into(), worst: 0.25, tolerance: 1e-6, passed: false },
            ],
            status: Status::Failed,
            message: Some("line one\nline, two".into()),
            compile_s: Some(1.25),
            tool_version: Some("adgauge 0.1.0".into()),
            host: None,
        };
        let mut skipped = ResultRow::unmeasured("hist-mul", BTreeMap::new(), "opencl", "f64", "auto", 1, 7);
        skipped.status = Status::Skipped;
        skipped.message = Some("backend opencl unavailable".into());
        (
            run,
            vec![
                row.clone(),
                ResultRow { case_id: "other".into(), checks: vec![], message: None, compile_s: None, ..row },
                skipped,
            ],
        )
    }

    #[test]
    fn runs_round_trip_through_csv_with_awkward_text() {
        let (run, rows) = sample();
        let text = to_csv(&run, &rows);
        let (run2, rows2) = parse_csv(&text, Path::new("x.csv")).unwrap();
        assert_eq!(run2, run);
        assert_eq!(rows2, rows);
    }

    /// Schema 3's layout: a line per case and mode, typed parameter and check columns.
    #[test]
    fn schema_4_has_a_line_per_case_and_mode_and_a_column_per_parameter_and_check() {
        let (run, rows) = sample();
        let text = to_csv(&run, &rows);
        let recs = records(&text).unwrap();
        let header = &recs[0].1;
        let tail: Vec<&str> = header[COLUMNS.len()..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            [
                "param.k",
                "param.n",
                "check.fd-vjp.worst",
                "check.fd-vjp.tolerance",
                "check.fd-vjp.passed",
                "check.dot-product.worst",
                "check.dot-product.tolerance",
                "check.dot-product.passed",
            ]
        );
        // Two timed cases with primal and vjp, one skipped case with nothing measured: 5 lines.
        let (case, mode) =
            (COLUMNS.iter().position(|c| *c == "case_id").unwrap(), COLUMNS.iter().position(|c| *c == "mode").unwrap());
        let modes: Vec<(&str, &str)> = recs[1..].iter().map(|(_, f)| (f[case].as_str(), f[mode].as_str())).collect();
        assert_eq!(
            modes,
            [
                ("hist-add[k=10,n=1000]/cpu/f32/auto", "primal"),
                ("hist-add[k=10,n=1000]/cpu/f32/auto", "vjp"),
                ("other", "primal"),
                ("other", "vjp"),
                ("hist-mul[]/opencl/f64/auto", ""),
            ]
        );
        let first = &recs[1].1;
        let at = |name: &str| first[header.iter().position(|h| h == name).unwrap()].as_str();
        assert_eq!((at("param.k"), at("param.n"), at("suite"), at("tool")), ("10", "1000", "quick", "cpu"));
        assert_eq!((at("check.dot-product.worst"), at("check.dot-product.passed")), ("2.5e-1", "false"));
        assert_eq!(at("sample_s"), "2e-3 1e-3 1.5e-3");
        let vjp = &recs[2].1;
        // vjp median 3 ms over a primal median of 1.5 ms; 8000 over 4000 peak bytes.
        let col = |name: &str| vjp[header.iter().position(|h| h == name).unwrap()].as_str();
        assert_eq!((col("overhead"), col("memory_ratio")), ("2", "2"));
        assert_eq!((col("rule"), col("rule_used")), ("auto", "general-chunked"));
    }

    /// A merge of shards from two machines: each line keeps its row's host, the run names both
    /// CPU models; a file of schema 4 (no compiler or target features) still reads, without hosts.
    #[test]
    fn the_lines_of_a_merged_run_keep_their_hosts_and_schema_4_files_still_read() {
        let (run, mut rows) = sample();
        let host = |cpu: &str| crate::Host {
            cpu_model: cpu.into(),
            cores: 4,
            rustc: "rustc 1.91.0 (f8297e351 2025-10-28)".into(),
            target_features: "fxsr,sse,sse2".into(),
        };
        rows[0].host = Some(host("Intel Xeon"));
        rows[1].host = Some(host("AMD EPYC"));
        rows[2].host = Some(host("AMD EPYC"));
        let text = to_csv(&run, &rows);
        let (back_run, back) = parse_csv(&text, Path::new("m.csv")).unwrap();
        assert_eq!(back, rows);
        assert_eq!(back_run.cpu_model, "AMD EPYC + Intel Xeon");
        // The same run as schema 4 wrote it: without the two columns, one host for the run.
        let (run, rows) = sample();
        let v4 = as_schema(&to_csv(&run, &rows), 4);
        let (run4, rows4) = parse_csv(&v4, Path::new("v4.csv")).unwrap();
        assert_eq!(run4, run);
        assert!(rows4.iter().all(|r| r.host.is_none() && r.schema_version == 4));
        assert_eq!(rows4[0].primal, rows[0].primal);
    }

    fn fixture(name: &str) -> (String, PathBuf) {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
        (fs::read_to_string(&p).unwrap(), p)
    }

    /// A file the schema-3 adgauge wrote (41eb28a, `run --out` of one histogram case) reads,
    /// with no rule recorded beside `auto`.
    #[test]
    fn schema_3_files_are_still_read() {
        let (text, p) = fixture("schema3.csv");
        let (run, rows) = parse_csv(&text, &p).unwrap();
        assert_eq!(run.run_id, "20261126T071942Z-4a24ff");
        assert_eq!(run.git_revision, "41eb28a64f51258150f7d94580ec37bb86a17f3a");
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.schema_version, r.rule.as_str(), r.rule_used.as_deref()), (3, "auto", None));
        assert_eq!(r.case_id, "hist-mul[dist=uniform,k=100,n=1000,oob=0.05]/cpu/f64/auto");
        assert_eq!(r.params.get("k").map(String::as_str), Some("100"));
        assert!((r.vjp.as_ref().unwrap().median_s - 5.52265306122449e-6).abs() < 1e-18);
        assert!(r.checks.iter().any(|c| c.name == "fd-vjp" && c.passed), "{:?}", r.checks);
    }

    /// Files written by schema 1 and 2 (checked in, written by the adgauge of those schemas) are
    /// still read; a version-2 line in a version-1 file is an error.
    #[test]
    fn schema_1_and_2_files_are_still_read() {
        for (name, version, compile_s) in [("schema1.csv", 1, None), ("schema2.csv", 2, Some(1.25))] {
            let (text, p) = fixture(name);
            let (run, rows) = parse_csv(&text, &p).unwrap();
            assert_eq!(run.run_id, "20261122T050000Z-abc");
            assert_eq!(run.machine, "host, \"quoted\"");
            assert_eq!(run.suite, "");
            assert_eq!(rows.len(), 2);
            let r = &rows[0];
            assert_eq!(r.schema_version, version);
            assert_eq!(r.case_id, "hist-add[k=10,n=1000]/cpu/f32/auto");
            assert_eq!(r.params.get("k").map(String::as_str), Some("10"));
            assert_eq!(r.vjp.as_ref().map(|t| (t.median_s, t.batch, t.samples)), Some((3e-3, 7, 5)));
            assert!(r.vjp.as_ref().unwrap().sample_s.is_empty());
            assert_eq!(r.checks, vec![Check { name: "fd-vjp".into(), worst: 1.5e-9, tolerance: 1e-6, passed: true }]);
            assert_eq!(r.status, Status::Failed);
            assert_eq!(r.compile_s, compile_s);
            assert_eq!(r.tool_version, None);
        }
        let (text, p) = fixture("schema1.csv");
        let mixed = text.replacen("\n1,", "\n2,", 1);
        let e = parse_csv(&mixed, &p).unwrap_err().to_string();
        assert!(e.contains("schema1.csv:2:") && e.contains("schema version 2"), "{e}");
    }

    /// `text`, a file of this schema, as a file of the older `version` wrote it: the columns
    /// that version lacks removed, its number on every line.
    fn as_schema(text: &str, version: u32) -> String {
        let keep = old_columns(version);
        let recs = records(text).unwrap();
        let header = &recs[0].1;
        let kept: Vec<usize> =
            (0..header.len()).filter(|&i| i >= COLUMNS.len() || keep.contains(&header[i].as_str())).collect();
        assert_eq!(kept.len(), header.len() - (COLUMNS.len() - keep.len()));
        let mut w = csv::Writer::from_writer(Vec::new());
        for (i, (_, f)) in recs.iter().enumerate() {
            let mut f: Vec<String> = kept.iter().map(|&j| f[j].clone()).collect();
            if i > 0 {
                f[0] = version.to_string();
            }
            w.write_record(&f).unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    fn with_roofline(mut run: RunInfo) -> RunInfo {
        run.roofline = Some(Roofline {
            threads: 2,
            seq_read_gb_s: 34.25,
            random: vec![
                RandomRate { bins: 10, reads_per_s: 2.5e9, updates_per_s: 1.25e9 },
                RandomRate { bins: 1000, reads_per_s: 2e9, updates_per_s: 1e9 },
            ],
            tools: vec!["cpu".into(), "cpu-traced".into()],
        });
        run
    }

    /// The run's roofline is in every line of its file and its JSON lines, typed, and reads
    /// back; schema-5 files (no roofline columns) read without one; a malformed roofline field
    /// is an error naming the line and column.
    #[test]
    fn the_runs_roofline_round_trips_and_schema_5_files_read_without_one() {
        let (run, rows) = sample();
        let run = with_roofline(run);
        let text = to_csv(&run, &rows);
        let (back_run, back) = parse_csv(&text, Path::new("r.csv")).unwrap();
        assert_eq!((back_run, back), (run.clone(), rows.clone()));
        let recs = records(&text).unwrap();
        let column = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        for (_, f) in &recs[1..] {
            assert_eq!(f[column("roofline_bins")], "10 1000");
            assert_eq!(f[column("roofline_random_reads_per_s")], "2.5e9 2e9");
            assert_eq!(f[column("roofline_tools")], "cpu cpu-traced");
        }
        let lines = json_lines(&run, &rows);
        let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(first["roofline_threads"], 2);
        assert_eq!(first["roofline_seq_read_gb_s"], 34.25);
        assert_eq!(first["roofline_bins"], serde_json::json!([10.0, 1000.0]));
        assert_eq!(first["roofline_random_updates_per_s"], serde_json::json!([1.25e9, 1e9]));
        // The first case: hist-add, n = 1000, k = 10, f32, no index dtype (8-byte indices):
        // (1000 x 12 + 2 x 10 x 4) bytes / 1.5 ms = 0.008053 GB/s, over 34.25 GB/s.
        let gb_s = first["achieved_gb_s"].as_f64().unwrap();
        assert!((gb_s - 12_080.0 / 1.5e-3 / 1e9).abs() < 1e-12, "{gb_s}");
        let fraction = first["roofline_fraction"].as_f64().unwrap();
        assert!((fraction - gb_s / 34.25).abs() < 1e-12, "{fraction}");
        let (json_run, _) = rows_from_json_lines(&lines.join("\n"), Path::new("-")).unwrap();
        assert_eq!(json_run, run);
        // Schema 5: the same file without the roofline's columns.
        let (old_run, old_rows) = parse_csv(&as_schema(&text, 5), Path::new("v5.csv")).unwrap();
        assert_eq!(old_run.roofline, None);
        assert_eq!((old_rows.len(), old_rows[0].schema_version), (rows.len(), 5));
        assert_eq!(old_rows[0].primal, rows[0].primal);
        // A roofline field that is not a rate, or lists of different lengths, name the column.
        let seq = column("roofline_seq_read_gb_s");
        // The line the second case's record starts on (a message above spans two lines).
        let line = recs[2].0;
        let broken = |f: &dyn Fn(&mut Vec<String>)| {
            let mut w = csv::Writer::from_writer(Vec::new());
            for (i, (_, rec)) in recs.iter().enumerate() {
                let mut rec = rec.clone();
                if i == 2 {
                    f(&mut rec);
                }
                w.write_record(&rec).unwrap();
            }
            let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
            parse_csv(&text, Path::new("r.csv")).unwrap_err().to_string()
        };
        let e = broken(&|rec| rec[seq] = "NaN".into());
        assert!(e.contains(&format!("r.csv:{line}: roofline_seq_read_gb_s: 'NaN' is not a rate")), "{e}");
        let e = broken(&|rec| rec[column("roofline_bins")] = "10".into());
        assert!(e.contains(&format!("r.csv:{line}: 1 bin counts, 2 read rates and 2 update rates")), "{e}");
        let e = broken(&|rec| rec[column("roofline_bins")] = "10 0".into());
        assert!(e.contains(&format!("r.csv:{line}: roofline_bins: '0' is not a bin count")), "{e}");
    }

    #[test]
    fn malformed_truncated_and_future_files_name_their_line() {
        let (run, mut rows) = sample();
        rows[0].message = Some("one physical line per record".into());
        let text = to_csv(&run, &rows);
        // A field lost on the third line (the vjp line of the first case).
        let lines: Vec<&str> = text.lines().collect();
        let third = lines[2].replacen(",cpu,", ",", 1);
        let broken = [lines[0], lines[1], &third].join("\n");
        let e = parse_csv(&broken, Path::new("h/r.csv")).unwrap_err().to_string();
        assert!(e.starts_with("h/r.csv:3:") && e.contains("fields, expected"), "{e}");
        // A file cut in the middle of a line.
        let cut = &text[..text.len() - 20];
        let e = parse_csv(cut, Path::new("h/r.csv")).unwrap_err().to_string();
        assert!(e.starts_with(&format!("h/r.csv:{}:", lines.len())), "{e}");
        let e = parse_csv("a,b\n", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("r.csv:1: unexpected header"), "{e}");
        let e = parse_csv("", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("empty file"), "{e}");
        let e = parse_csv("schema_version,run_id,x\n8,r,y\n", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("r.csv:2: schema 8 is newer than this adgauge"), "{e}");
        let dup = format!("{text}{}\n", lines[1]);
        let e = parse_csv(&dup, Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains(&format!("r.csv:{}: duplicate line for case hist-add", lines.len() + 1)), "{e}");
        let e = parse_csv(&text.replacen("true", "yes", 1), Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("r.csv:2: check.fd-vjp.passed: 'yes'"), "{e}");
    }

    #[test]
    fn history_gains_files_and_refuses_to_overwrite_or_hold_a_run_twice() {
        let dir = std::env::temp_dir().join(format!("adgauge-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (mut run, rows) = sample();
        append_run(&dir, &run, &rows).unwrap();
        assert!(append_run(&dir, &run, &rows).is_err());
        run.run_id = "20261123T050000Z-def".into();
        append_run(&dir, &run, &rows[..1]).unwrap();
        // A leftover temporary file (a killed writer) is not a run.
        fs::write(dir.join(".junk.csv.123.tmp"), "partial").unwrap();
        let h = read_history(&dir).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].1.len(), 3);
        assert_eq!(h[1].0.run_id, "20261123T050000Z-def");
        // A copy of a run under another name: an error naming the copy; both files stay.
        fs::copy(dir.join("20261123T050000Z-def.csv"), dir.join("copy.csv")).unwrap();
        let e = read_history(&dir).unwrap_err().to_string();
        assert!(e.contains("copy.csv:2: run 20261123T050000Z-def is already in the history"), "{e}");
        assert_eq!(run_files(&dir).unwrap().len(), 3);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Schema 4 keeps the rule `auto` took; a schema-3 file (no such column) still reads, with
    /// none, in CSV and in JSON lines.
    #[test]
    fn the_rule_auto_took_round_trips_and_schema_3_files_still_read() {
        let (run, rows) = sample();
        assert_eq!(rows[0].rule_used.as_deref(), Some("general-chunked"));
        let text = to_csv(&run, &rows);
        let (_, back) = parse_csv(&text, Path::new("r.csv")).unwrap();
        assert_eq!(back, rows);
        // The same file as schema 3 wrote it: the column gone (and those of schemas 5 and 6),
        // version 3 on every line.
        let at = COLUMNS.iter().position(|c| *c == "rule_used").unwrap();
        for (i, (_, f)) in records(&text).unwrap().into_iter().enumerate() {
            assert!(i == 0 || f[at] == "general-chunked" || f[at].is_empty(), "{f:?}");
        }
        let v3 = as_schema(&text, 3);
        let (_, old) = parse_csv(&v3, Path::new("r.csv")).unwrap();
        assert_eq!(old.len(), rows.len());
        for (o, r) in old.iter().zip(&rows) {
            assert_eq!((o.schema_version, o.rule_used.as_deref()), (3, None));
            assert_eq!((&o.case_id, &o.rule, &o.vjp), (&r.case_id, &r.rule, &r.vjp));
        }
        // A schema-3 line claiming version 4 is an error naming its line.
        let lying = v3.replacen("\n3,", "\n4,", 1);
        let e = parse_csv(&lying, Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("r.csv:2: schema version 4 in a file of schema 3"), "{e}");
        // JSON lines of schema 3.
        let json: String = json_lines(&run, &rows)
            .iter()
            .map(|l| {
                let mut o: serde_json::Map<String, serde_json::Value> = serde_json::from_str(l).unwrap();
                o.remove("rule_used");
                o.insert("schema_version".into(), 3.into());
                serde_json::to_string(&o).unwrap() + "\n"
            })
            .collect();
        let (_, old) = rows_from_json_lines(&json, Path::new("r.jsonl")).unwrap();
        assert!(old.iter().all(|o| o.schema_version == 3 && o.rule_used.is_none()), "{old:?}");
    }

    /// `run --json` prints the file's lines as typed JSON, which read back into the same rows.
    #[test]
    fn json_lines_carry_the_file_columns_typed_and_read_back() {
        let (run, mut rows) = sample();
        rows[0].checks.reverse(); // JSON objects read back with sorted keys: checks by name
        let lines = json_lines(&run, &rows);
        assert_eq!(lines.len(), 5);
        let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert!(lines[0].starts_with("{\"schema_version\":7,\"run_id\":\"20261122T050000Z-abc\","), "{}", lines[0]);
        assert_eq!(first["mode"], "primal");
        assert_eq!(first["median_s"], 1.5e-3);
        assert_eq!(first["sample_s"], serde_json::json!([2e-3, 1e-3, 1.5e-3]));
        assert_eq!(first["param.k"], 10);
        assert_eq!(first["check.fd-vjp.passed"], true);
        assert_eq!(first["overhead"], serde_json::Value::Null);
        let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(second["overhead"], 2.0);
        let (run2, rows2) = rows_from_json_lines(&lines.join("\n"), Path::new("-")).unwrap();
        assert_eq!(run2, run);
        assert_eq!(rows2, rows);
        let e = rows_from_json_lines("{\"a\":1}\nnot json", Path::new("out.jsonl")).unwrap_err().to_string();
        assert!(e.starts_with("out.jsonl:2: not a JSON object"), "{e}");
    }

    /// A disk that fails at one step of a commit (counting writes and renames from 0), as a
    /// full disk would: a failing write leaves half its bytes behind.
    struct FailingDisk {
        fail_at: usize,
        step: usize,
    }

    impl Disk for FailingDisk {
        fn write(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
            self.step += 1;
            if self.step - 1 == self.fail_at {
                fs::write(path, &bytes[..bytes.len() / 2])?;
                return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device"));
            }
            RealDisk.write(path, bytes)
        }
        fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
            self.step += 1;
            if self.step - 1 == self.fail_at {
                return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device"));
            }
            RealDisk.rename(from, to)
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    /// A run's two files appear together or not at all: a failure at any of the four steps
    /// (write the CSV's temporary, the Parquet's, rename the CSV, rename the Parquet) leaves the
    /// directory as it was, temporaries included, and the error names the file.
    #[test]
    fn a_run_is_written_all_or_nothing_whichever_step_fails() {
        let dir = std::env::temp_dir().join(format!("adgauge-store-commit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let (run, rows) = sample();
        let id = &run.run_id;
        for (fail_at, names) in [(0, ".csv."), (1, ".parquet."), (2, ".csv"), (3, ".parquet")] {
            let e = append_run_on(&mut FailingDisk { fail_at, step: 0 }, &dir, &run, &rows).unwrap_err().to_string();
            assert!(e.contains(&format!("{id}{names}")) && e.contains("no space left"), "step {fail_at}: {e}");
            assert_eq!(entries(&dir), Vec::<String>::new(), "step {fail_at}");
        }
        append_run_on(&mut FailingDisk { fail_at: usize::MAX, step: 0 }, &dir, &run, &rows).unwrap();
        assert_eq!(entries(&dir), [format!("{id}.csv"), format!("{id}.parquet")]);
        assert_eq!(read_run(&dir.join(format!("{id}.csv"))).unwrap(), (run.clone(), rows.clone()));
        // A file of either name already there: refused before anything is written.
        fs::remove_file(dir.join(format!("{id}.csv"))).unwrap();
        let e = append_run(&dir, &run, &rows).unwrap_err().to_string();
        assert!(e.contains(&format!("{id}.parquet")) && e.contains("already in the history"), "{e}");
        assert_eq!(entries(&dir), [format!("{id}.parquet")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The CSV text of `sample()` with one field of one line replaced.
    fn edited(line: usize, column: &str, value: &str) -> String {
        let (run, mut rows) = sample();
        rows[0].message = Some("one physical line per record".into());
        let recs = records(&to_csv(&run, &rows)).unwrap();
        let at = recs[0].1.iter().position(|h| h == column).unwrap();
        let mut w = csv::Writer::from_writer(Vec::new());
        for (l, mut f) in recs {
            if l == line {
                f[at] = value.into();
            }
            w.write_record(&f).unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    /// Every line of a case repeats its status, message, checks, parameters, ...: a file whose
    /// lines disagree (a vjp line saying `ok` under a primal line saying `failed`, or the
    /// reverse) is refused naming the line, whichever line a reader would have taken.
    #[test]
    fn the_lines_of_a_case_that_disagree_on_a_case_column_are_refused_naming_the_line() {
        // Line 2 is the first case's primal line (status failed), line 3 its vjp line.
        for (column, value) in [
            ("status", "ok"),
            ("message", "another message"),
            ("check.dot-product.passed", "true"),
            ("check.fd-vjp.worst", "1e-3"),
            ("param.n", "2000"),
            ("tool_version", "adgauge 9"),
            ("rule_used", "special"),
            ("threads", "1"),
            ("compile_s", "2e0"),
        ] {
            let e = parse_csv(&edited(3, column, value), Path::new("h/r.csv")).unwrap_err().to_string();
            assert!(
                e.starts_with("h/r.csv:3: case hist-add[k=10,n=1000]/cpu/f32/auto: ")
                    && e.contains(&format!("{column} is '{value}' here but"))
                    && e.contains("on line 2"),
                "{e}"
            );
        }
        // Per-mode columns differ between lines by design.
        assert!(parse_csv(&edited(3, "peak_bytes", "1"), Path::new("r.csv")).is_ok());
        // A case that measured nothing has one line with no mode, not that and a mode's line.
        for line in [2, 3] {
            let e = parse_csv(&edited(line, "mode", ""), Path::new("r.csv")).unwrap_err().to_string();
            assert!(
                e.starts_with("r.csv:3: case hist-add[k=10,n=1000]/cpu/f32/auto: a line with no mode")
                    && e.contains("(line 2)"),
                "{e}"
            );
        }
        // The same through JSON lines (`run --json`).
        let (run, rows) = sample();
        let mut lines = json_lines(&run, &rows);
        lines[1] = lines[1].replacen("\"status\":\"failed\"", "\"status\":\"ok\"", 1);
        let e = rows_from_json_lines(&lines.join("\n"), Path::new("out.jsonl")).unwrap_err().to_string();
        assert!(e.starts_with("out.jsonl:2: case hist-add") && e.contains("status is 'ok' here but 'failed'"), "{e}");
    }

    /// A negative, NaN or infinite time is refused naming the file, line and column, in every
    /// schema (the gate would call it corrupt; `history` and `report` would show it).
    #[test]
    fn non_finite_or_negative_times_are_refused_naming_file_line_and_column() {
        for (column, value) in [
            ("median_s", "-1e-3"),
            ("min_s", "NaN"),
            ("max_s", "inf"),
            ("sample_s", "1e-3 -2e-3"),
            ("cv", "NaN"),
            ("compile_s", "-1"),
        ] {
            // compile_s is a case column: set it on every line of the first case.
            let text = if column == "compile_s" {
                let once = edited(2, column, value);
                let recs = records(&once).unwrap();
                let at = recs[0].1.iter().position(|h| h == column).unwrap();
                once.replacen(&recs[2].1[at], value, 1)
            } else {
                edited(3, column, value)
            };
            let e = parse_csv(&text, Path::new("h/r.csv")).unwrap_err().to_string();
            let line = if column == "compile_s" { 2 } else { 3 };
            assert!(
                e.starts_with(&format!("h/r.csv:{line}: {column}: ")) && e.contains("is not a"),
                "{column}={value}: {e}"
            );
        }
        // Schemas 1 and 2.
        for name in ["schema1.csv", "schema2.csv"] {
            let (text, p) = fixture(name);
            let negative = text.replacen(",1e-3,1.5e-3,2e-3,", ",1e-3,-1.5e-3,2e-3,", 1);
            assert_ne!(negative, text);
            let e = parse_csv(&negative, &p).unwrap_err().to_string();
            assert!(e.contains(&format!("{name}:2: primal median_s: -0.0015 is not a time")), "{e}");
        }
        // Rows from elsewhere.
        let (_, mut rows) = sample();
        rows[0].vjp.as_mut().unwrap().sample_s.push(f64::NAN);
        assert_eq!(
            check_row(&rows[0]).unwrap_err(),
            "vjp sample_s: NaN is not a time (a finite number of seconds >= 0)"
        );
    }

    /// Schemas 1 and 2 hold one line per case: a second line of a case (here a planted faster
    /// one, which `--best-of` would pick) is refused naming both lines.
    #[test]
    fn a_duplicated_case_is_refused_in_schemas_1_and_2() {
        for name in ["schema1.csv", "schema2.csv"] {
            let (text, p) = fixture(name);
            let second = text.lines().nth(1).unwrap();
            let faster = second.replacen(",2e-3,3e-3,4e-3,", ",1e-4,2e-4,3e-4,", 1);
            assert_ne!(faster, second);
            let planted = format!("{text}{faster}\n");
            let e = parse_csv(&planted, &p).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "{name}:4: duplicate line for case hist-add[k=10,n=1000]/cpu/f32/auto (first on line 2)"
                )),
                "{e}"
            );
        }
    }

    /// A killed run's flushed rows read back: the run's information, every complete row, and
    /// not the row cut by the kill; a bad line elsewhere, a case twice or a negative time is an
    /// error naming the line.
    #[test]
    fn a_killed_runs_partial_file_reads_back_its_complete_rows() {
        let (run, rows) = sample();
        let mut text = serde_json::to_string(&run).unwrap() + "\n";
        for r in &rows[..2] {
            text += &(serde_json::to_string(r).unwrap() + "\n");
        }
        let cut = serde_json::to_string(&rows[2]).unwrap();
        let p = Path::new("h/.r.partial.jsonl");
        assert!(is_partial_file(p) && !is_partial_file(Path::new("h/r.csv")));
        let (info, back) = parse_partial(&format!("{text}{}", &cut[..cut.len() / 2]), p).unwrap();
        assert_eq!((info, back), (run.clone(), rows[..2].to_vec()));
        let (_, back) = parse_partial(&format!("{text}{cut}\n"), p).unwrap();
        assert_eq!(back, rows);
        // The same cut line with its newline is not a kill but a corrupt line.
        let e = parse_partial(&format!("{}{text}", &cut[..cut.len() / 2]), p).unwrap_err().to_string();
        assert!(e.starts_with("h/.r.partial.jsonl:1: not a run's information"), "{e}");
        let e = parse_partial(&format!("{text}{}\n{cut}\n", &cut[..10]), p).unwrap_err().to_string();
        assert!(e.starts_with("h/.r.partial.jsonl:4: not a result row"), "{e}");
        let twice = format!("{text}{}\n", serde_json::to_string(&rows[0]).unwrap());
        let e = parse_partial(&twice, p).unwrap_err().to_string();
        assert!(e.starts_with("h/.r.partial.jsonl:4: duplicate row for case hist-add") && e.contains("line 2"), "{e}");
        let mut negative = rows[0].clone();
        negative.case_id = "neg".into();
        negative.primal.as_mut().unwrap().median_s = -1.0;
        let e = parse_partial(&format!("{text}{}\n", serde_json::to_string(&negative).unwrap()), p)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("h/.r.partial.jsonl:4: primal median_s: -1 is not a time"), "{e}");
        let e = parse_partial("", p).unwrap_err().to_string();
        assert!(e.contains(":1: empty file"), "{e}");
    }

    /// Schema 7 records an interrupted run and a run of part of its suite; files of schema 6
    /// (without those columns) read as complete runs of their whole suite.
    #[test]
    fn an_interrupted_or_filtered_run_says_so_in_its_file_and_schema_6_still_reads() {
        let (mut run, rows) = sample();
        run.interrupted = Some("interrupted by SIGTERM after 2 of 10 case(s)".into());
        run.selection = Some("filter hist-add".into());
        assert!(run.is_partial());
        let text = to_csv(&run, &rows);
        let (back, back_rows) = parse_csv(&text, Path::new("r.csv")).unwrap();
        assert_eq!((&back, &back_rows), (&run, &rows));
        let (json_run, _) = rows_from_json_lines(&json_lines(&run, &rows).join("\n"), Path::new("-")).unwrap();
        assert_eq!(json_run, run);
        let (old, old_rows) = parse_csv(&as_schema(&text, 6), Path::new("v6.csv")).unwrap();
        assert_eq!((old.interrupted, old.selection, old_rows[0].schema_version), (None, None, 6));
        assert!(!sample().0.is_partial());
    }

    /// Issue 44, class 8: a stored median that disagrees with its own samples was accepted; the
    /// gate judged the samples and reported the median. Readers refuse it, naming file and line.
    #[test]
    fn a_median_that_is_not_its_samples_median_is_refused_naming_file_and_line() {
        // Line 2 is the first case's primal line; its samples' median is 1.5e-3.
        let e = parse_csv(&edited(2, "median_s", "1e-3"), Path::new("h/r.csv")).unwrap_err().to_string();
        assert_eq!(e, "h/r.csv:2: median_s: 1e-3 is not the median of its 3 samples in sample_s (1.5e-3)");
        // Through JSON lines and a partial run's rows too.
        let (run, mut rows) = sample();
        rows[0].primal.as_mut().unwrap().median_s = 1.0;
        let lines = json_lines(&run, &rows);
        let e = rows_from_json_lines(&lines.join("\n"), Path::new("out.jsonl")).unwrap_err().to_string();
        assert!(e.starts_with("out.jsonl:1: median_s: 1e0 is not the median of its 3 samples"), "{e}");
        assert_eq!(
            check_row(&rows[0]).unwrap_err(),
            "primal median_s: 1e0 is not the median of its 3 samples in sample_s (1.5e-3)"
        );
        // An even count's median is the mean of the middle two.
        let mut even = rows[0].primal.clone().unwrap();
        even.sample_s = vec![1e-3, 4e-3, 2e-3, 3e-3];
        even.median_s = 2.5e-3;
        assert_eq!(check_timing(&even), Ok(()));
    }
}
