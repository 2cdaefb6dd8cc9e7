//! The results store: one CSV file per run, written atomically, in a history directory that only
//! ever gains files.
//!
//! Layout: `DIR/<run_id>.csv`. A run is written to a temporary file in the same directory,
//! flushed and synced, then renamed into place, so a run killed at any point (even by SIGKILL)
//! leaves earlier runs intact and no half-written `.csv` visible. The CSV is written by hand (no
//! dataframe library: it keeps the build lean) with RFC 4180 quoting; every column is a scalar:
//! parameters are `k=v;k=v`, checks `name=worst/tolerance/ok|FAIL;...`, timings three columns each.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// The columns, in order. Adding a column is a schema change: bump SCHEMA_VERSION.
pub const COLUMNS: &[&str] = &[
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

/// Version 1 had every column but the last.
const V1_COLUMNS: usize = 45;

fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

fn opt<T: ToString>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

fn timing_fields(t: &Option<Timing>) -> [String; 6] {
    match t {
        Some(t) => [
            format!("{:e}", t.min_s),
            format!("{:e}", t.median_s),
            format!("{:e}", t.max_s),
            t.samples.to_string(),
            t.batch.to_string(),
            format!("{:e}", t.cv),
        ],
        None => Default::default(),
    }
}

/// One CSV line (without the newline) for a row of a run.
pub fn to_csv_line(run: &RunInfo, row: &ResultRow) -> String {
    let params: Vec<String> = row.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let checks: Vec<String> = row
        .checks
        .iter()
        .map(|c| format!("{}={:e}/{:e}/{}", c.name, c.worst, c.tolerance, if c.passed { "ok" } else { "FAIL" }))
        .collect();
    let mut f: Vec<String> = vec![
        row.schema_version.to_string(),
        run.run_id.clone(),
        run.timestamp.clone(),
        run.git_revision.clone(),
        run.adgauge_version.clone(),
        run.machine.clone(),
        run.cpu_model.clone(),
        run.cores.to_string(),
        run.governor.clone(),
        row.case_id.clone(),
        row.workload.clone(),
        params.join(";"),
        row.backend.clone(),
        row.dtype.clone(),
        row.rule.clone(),
        row.threads.to_string(),
        row.seed.to_string(),
    ];
    f.extend(timing_fields(&row.primal));
    f.extend(timing_fields(&row.vjp));
    f.extend(timing_fields(&row.jvp));
    f.extend([
        opt(row.vjp_overhead()),
        opt(row.jvp_overhead()),
        opt(row.primal_peak_bytes),
        opt(row.vjp_peak_bytes),
        opt(row.jvp_peak_bytes),
        opt(row.vjp_memory_ratio()),
        opt(row.jvp_memory_ratio()),
        checks.join(";"),
        row.status.name().to_string(),
        row.message.clone().unwrap_or_default(),
        row.compile_s.map(|c| format!("{c:e}")).unwrap_or_default(),
    ]);
    f.iter().map(|s| quote(s)).collect::<Vec<_>>().join(",")
}

/// A whole run as CSV text (header included).
pub fn to_csv(run: &RunInfo, rows: &[ResultRow]) -> String {
    let mut s = COLUMNS.join(",");
    s.push('\n');
    for r in rows {
        s.push_str(&to_csv_line(run, r));
        s.push('\n');
    }
    s
}

/// Splits CSV text into records of fields (RFC 4180: quoted fields may hold commas, quotes and
/// newlines). Returns each record with its 1-based starting line.
/// A CSV record: its 1-based starting line and its fields.
type Record = (usize, Vec<String>);

fn records(text: &str) -> Result<Vec<Record>, (usize, String)> {
    let mut out = Vec::new();
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let (mut line, mut start) = (1usize, 1usize);
    let mut chars = text.chars().peekable();
    let mut at_field_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if at_field_start => {
                quoted = true;
                at_field_start = false;
            }
            ',' => {
                fields.push(std::mem::take(&mut field));
                at_field_start = true;
            }
            '\r' => {}
            '\n' => {
                fields.push(std::mem::take(&mut field));
                out.push((start, std::mem::take(&mut fields)));
                line += 1;
                start = line;
                at_field_start = true;
            }
            _ => {
                field.push(c);
                at_field_start = false;
            }
        }
    }
    if quoted {
        return Err((start, "unterminated quoted field".into()));
    }
    if !field.is_empty() || !fields.is_empty() {
        fields.push(field);
        out.push((start, fields));
    }
    Ok(out)
}

fn parse_timing(f: &[String]) -> Result<Option<Timing>, String> {
    if f[1].is_empty() {
        return Ok(None);
    }
    let num = |s: &str| s.parse::<f64>().map_err(|_| format!("'{s}' is not a number"));
    Ok(Some(Timing {
        min_s: num(&f[0])?,
        median_s: num(&f[1])?,
        max_s: num(&f[2])?,
        samples: f[3].parse().map_err(|_| format!("'{}' is not a sample count", f[3]))?,
        batch: f[4].parse().map_err(|_| format!("'{}' is not a batch size", f[4]))?,
        cv: num(&f[5])?,
    }))
}

fn parse_checks(s: &str) -> Result<Vec<Check>, String> {
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
            let num = |s: &str| s.parse::<f64>().map_err(|_| format!("check '{c}': '{s}' is not a number"));
            Ok(Check { name: name.into(), worst: num(parts[0])?, tolerance: num(parts[1])?, passed: parts[2] == "ok" })
        })
        .collect()
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

/// Position of a column by name.
fn col(name: &str) -> usize {
    COLUMNS.iter().position(|c| *c == name).unwrap_or_else(|| panic!("internal: no column {name}"))
}

/// Parses a run file: its run information and rows.
pub fn parse_csv(text: &str, path: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    let err = |line: usize, message: String| StoreError::Parse { path: path.to_path_buf(), line, message };
    let recs = records(text).map_err(|(l, m)| err(l, m))?;
    let Some((_, header)) = recs.first() else {
        return Err(err(1, "empty file: expected the header line".into()));
    };
    // Version 1 files have the first V1_COLUMNS columns; version 2 all of them.
    let width = match header.len() {
        n if n == COLUMNS.len() || n == V1_COLUMNS => n,
        _ => usize::MAX,
    };
    if width == usize::MAX || header.iter().map(String::as_str).ne(COLUMNS[..width].iter().copied()) {
        return Err(err(
            1,
            format!(
                "unexpected header (expected the {} columns of schema {SCHEMA_VERSION} or the {V1_COLUMNS} of schema 1)",
                COLUMNS.len()
            ),
        ));
    }
    let file_version = if width == V1_COLUMNS { 1 } else { SCHEMA_VERSION };
    let mut run = None;
    let mut rows = Vec::new();
    for (line, f) in &recs[1..] {
        if f.len() != width {
            return Err(err(*line, format!("{} fields, expected {width}", f.len())));
        }
        let version: u32 = f[0].parse().map_err(|_| err(*line, format!("bad schema_version '{}'", f[0])))?;
        if version != file_version {
            return Err(err(*line, format!("schema version {version} in a file of schema {file_version}")));
        }
        let info = RunInfo {
            run_id: f[1].clone(),
            timestamp: f[2].clone(),
            git_revision: f[3].clone(),
            adgauge_version: f[4].clone(),
            machine: f[5].clone(),
            cpu_model: f[6].clone(),
            cores: f[7].parse().map_err(|_| err(*line, format!("bad cores '{}'", f[7])))?,
            governor: f[8].clone(),
        };
        if run.is_none() {
            run = Some(info);
        }
        let mut params = BTreeMap::new();
        for kv in f[11].split(';').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| err(*line, format!("parameter '{kv}' has no '='")))?;
            params.insert(k.to_string(), v.to_string());
        }
        let num = |i: usize| -> Result<Option<u64>, StoreError> {
            if f[i].is_empty() {
                Ok(None)
            } else {
                f[i].parse()
                    .map(Some)
                    .map_err(|_| err(*line, format!("{}: '{}' is not a whole number", COLUMNS[i], f[i])))
            }
        };
        rows.push(ResultRow {
            schema_version: version,
            case_id: f[9].clone(),
            workload: f[10].clone(),
            params,
            backend: f[12].clone(),
            dtype: f[13].clone(),
            rule: f[14].clone(),
            threads: f[15].parse().map_err(|_| err(*line, format!("bad threads '{}'", f[15])))?,
            seed: f[16].parse().map_err(|_| err(*line, format!("bad seed '{}'", f[16])))?,
            primal: parse_timing(&f[col("primal_min_s")..]).map_err(|m| err(*line, m))?,
            vjp: parse_timing(&f[col("vjp_min_s")..]).map_err(|m| err(*line, m))?,
            jvp: parse_timing(&f[col("jvp_min_s")..]).map_err(|m| err(*line, m))?,
            primal_peak_bytes: num(col("primal_peak_bytes"))?,
            vjp_peak_bytes: num(col("vjp_peak_bytes"))?,
            jvp_peak_bytes: num(col("jvp_peak_bytes"))?,
            checks: parse_checks(&f[col("checks")]).map_err(|m| err(*line, m))?,
            status: parse_status(&f[col("status")]).map_err(|m| err(*line, m))?,
            message: Some(f[col("message")].clone()).filter(|m| !m.is_empty()),
            compile_s: match f.get(col("compile_s")).map(String::as_str) {
                None | Some("") => None,
                Some(c) => Some(c.parse().map_err(|_| err(*line, format!("compile_s: '{c}' is not a number")))?),
            },
        });
    }
    let run = run.ok_or_else(|| err(2, "no result rows".into()))?;
    Ok((run, rows))
}

/// Reads one run file.
pub fn read_run(path: &Path) -> Result<(RunInfo, Vec<ResultRow>), StoreError> {
    let text = fs::read_to_string(path).map_err(io(path))?;
    parse_csv(&text, path)
}

/// Writes `contents` to `path` atomically: temporary file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(contents.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io(path))?;
    // Make the rename itself durable.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Adds a run to a history directory as `<run_id>.csv`; never touches existing files.
pub fn append_run(dir: &Path, run: &RunInfo, rows: &[ResultRow]) -> Result<PathBuf, StoreError> {
    let path = dir.join(format!("{}.csv", run.run_id));
    if path.exists() {
        return Err(StoreError::Io {
            path,
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a run with this id is already in the history",
            ),
        });
    }
    write_atomic(&path, &to_csv(run, rows))?;
    Ok(path)
}

/// Every run of a history directory, oldest first (run ids start with a sortable timestamp).
pub fn read_history(dir: &Path) -> Result<Vec<(RunInfo, Vec<ResultRow>)>, StoreError> {
    run_files(dir)?.iter().map(|p| read_run(p)).collect()
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
            threads: 2,
            seed: 42,
            primal: Some(Timing { min_s: 1e-3, median_s: 1.5e-3, max_s: 2e-3, batch: 1, samples: 5, cv: 0.125 }),
            vjp: Some(Timing { min_s: 2e-3, median_s: 3e-3, max_s: 4e-3, batch: 7, samples: 5, cv: 0.5 }),
            jvp: None,
            primal_peak_bytes: Some(4000),
            vjp_peak_bytes: Some(8000),
            jvp_peak_bytes: None,
            checks: vec![Check { name: "fd-vjp".into(), worst: 1.5e-9, tolerance: 1e-6, passed: true }],
            status: Status::Failed,
            message: Some("line one\nline, two".into()),
            compile_s: Some(1.25),
        };
        (
            run,
            vec![
                row.clone(),
                ResultRow { case_id: "other".into(), checks: vec![], message: None, compile_s: None, ..row },
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

    /// A file written by schema 1 (no compile_s column) is still read, its rows without compile
    /// times; a version-2 row in a version-1 file is an error.
    #[test]
    fn schema_1_files_are_still_read() {
        let (run, mut rows) = sample();
        // One physical line per record, so that dropping the last field is a text edit.
        rows[0].message = Some("plain".into());
        let text = to_csv(&run, &rows);
        let v1: String = text
            .lines()
            .map(|l| {
                let mut f = l.rsplit_once(',').unwrap().0.to_string();
                if f.starts_with("2,") {
                    f.replace_range(..1, "1");
                }
                f + "\n"
            })
            .collect();
        assert!(v1.starts_with("schema_version,") && !v1.contains("compile_s"));
        let (_, back) = parse_csv(&v1, Path::new("old.csv")).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].schema_version, 1);
        assert_eq!(back[0].compile_s, None);
        assert_eq!(back[0].case_id, rows[0].case_id);
        assert_eq!(back[0].vjp, rows[0].vjp);
        let mixed = v1.replacen("\n1,", "\n2,", 1);
        let e = parse_csv(&mixed, Path::new("old.csv")).unwrap_err().to_string();
        assert!(e.contains("old.csv:2:") && e.contains("schema version 2"), "{e}");
    }

    #[test]
    fn malformed_files_name_their_line() {
        let (run, rows) = sample();
        let text = to_csv(&run, &rows);
        let broken = text.replacen("cpu,f32", "cpu", 1);
        let e = parse_csv(&broken, Path::new("h/r.csv")).unwrap_err().to_string();
        assert!(e.starts_with("h/r.csv:2:"), "{e}");
        let e = parse_csv("a,b\n", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("r.csv:1: unexpected header"), "{e}");
        let e = parse_csv("", Path::new("r.csv")).unwrap_err().to_string();
        assert!(e.contains("empty file"), "{e}");
    }

    #[test]
    fn history_gains_files_and_refuses_to_overwrite() {
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
        assert_eq!(h[0].1.len(), 2);
        assert_eq!(h[1].0.run_id, "20261123T050000Z-def");
        fs::remove_dir_all(&dir).unwrap();
    }
}
