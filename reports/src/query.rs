//! History queries (`adgauge history`): a history's runs as one tidy table (a row per run, case
//! and mode) and the questions asked of it: the trend of a case, the best of the last N runs,
//! and the regressions since a date. The output is a [`Table`] of typed cells, printed as an
//! aligned table, CSV or JSON lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::schema::{ResultRow, RunInfo, Status, Timing};

/// A typed cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Str(String),
    Int(u64),
    Float(f64),
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Null => String::new(),
            Cell::Str(s) => s.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Float(x) => format!("{x:e}"),
        }
    }
    fn json(&self) -> serde_json::Value {
        match self {
            Cell::Null => serde_json::Value::Null,
            Cell::Str(s) => s.clone().into(),
            Cell::Int(i) => (*i).into(),
            // Non-finite values have no JSON number: null, as a missing value.
            Cell::Float(x) => serde_json::Number::from_f64(*x).map(serde_json::Value::Number).unwrap_or_default(),
        }
    }
}

/// A query's answer: named columns and rows of cells.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    fn new(columns: &[&str]) -> Table {
        Table { columns: columns.iter().map(|c| c.to_string()).collect(), rows: Vec::new() }
    }

    /// CSV with a header line (the `csv` crate's quoting).
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        // Writing into memory cannot fail; every row has the header's width by construction.
        w.write_record(&self.columns).expect("writing CSV into memory");
        for r in &self.rows {
            w.write_record(r.iter().map(Cell::text)).expect("writing CSV into memory");
        }
        String::from_utf8(w.into_inner().expect("flushing CSV into memory")).expect("CSV of UTF-8 fields is UTF-8")
    }

    /// One JSON object per row.
    pub fn to_json_lines(&self) -> String {
        let mut s = String::new();
        for r in &self.rows {
            let obj: serde_json::Map<String, serde_json::Value> =
                self.columns.iter().cloned().zip(r.iter().map(Cell::json)).collect();
            s.push_str(&serde_json::Value::Object(obj).to_string());
            s.push('\n');
        }
        s
    }

    /// An aligned text table (times in milliseconds for reading; CSV and JSON keep seconds).
    pub fn to_text(&self) -> String {
        let shown: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .zip(&self.columns)
                    .map(|(c, name)| match c {
                        Cell::Float(x) if name.ends_with("_s") => format!("{:.3}", x * 1e3),
                        Cell::Float(x) => format!("{x:.3}"),
                        other => other.text(),
                    })
                    .collect()
            })
            .collect();
        let names: Vec<String> =
            self.columns.iter().map(|c| c.strip_suffix("_s").map(|b| format!("{b}_ms")).unwrap_or(c.clone())).collect();
        let widths: Vec<usize> = (0..names.len())
            .map(|i| shown.iter().map(|r| r[i].chars().count()).chain([names[i].len()]).max().unwrap_or(0))
            .collect();
        let mut s = String::new();
        let line = |cells: &[String], s: &mut String| {
            let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            let _ = writeln!(s, "{}", parts.join("  ").trim_end());
        };
        line(&names, &mut s);
        for r in &shown {
            line(r, &mut s);
        }
        s
    }
}

/// What a query selects.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Case ids containing this text.
    pub case: Option<String>,
    /// Runs at or after this time (`YYYY-MM-DD` or an RFC 3339 prefix; compared as text, which
    /// orders RFC 3339 UTC times correctly).
    pub since: Option<String>,
    /// One mode (primal, vjp, jvp).
    pub mode: Option<String>,
}

/// One timed (run, case, mode): the history as tidy records.
#[derive(Clone, Copy)]
struct Point<'a> {
    run: &'a RunInfo,
    row: &'a ResultRow,
    mode: &'static str,
    timing: &'a Timing,
}

fn points<'a>(runs: &'a [(RunInfo, Vec<ResultRow>)], sel: &Selection) -> Vec<Point<'a>> {
    let mut out = Vec::new();
    for (run, rows) in runs {
        if sel.since.as_ref().is_some_and(|s| run.timestamp.as_str() < s.as_str()) {
            continue;
        }
        for row in rows {
            if sel.case.as_ref().is_some_and(|c| !row.case_id.contains(c.as_str())) {
                continue;
            }
            for (mode, t) in [("primal", &row.primal), ("vjp", &row.vjp), ("jvp", &row.jvp)] {
                if sel.mode.as_ref().is_some_and(|m| m != mode) {
                    continue;
                }
                if let Some(timing) = t {
                    out.push(Point { run, row, mode, timing });
                }
            }
        }
    }
    out
}

/// The trend: every timed (run, case, mode), by case and mode, oldest run first.
pub fn trend(runs: &[(RunInfo, Vec<ResultRow>)], sel: &Selection) -> Table {
    let mut t = Table::new(&[
        "case_id",
        "mode",
        "run_id",
        "timestamp",
        "git_revision",
        "status",
        "median_s",
        "min_s",
        "max_s",
        "samples",
    ]);
    let mut ps = points(runs, sel);
    ps.sort_by(|a, b| (&a.row.case_id, a.mode, &a.run.run_id).cmp(&(&b.row.case_id, b.mode, &b.run.run_id)));
    for p in ps {
        t.rows.push(vec![
            Cell::Str(p.row.case_id.clone()),
            Cell::Str(p.mode.into()),
            Cell::Str(p.run.run_id.clone()),
            Cell::Str(p.run.timestamp.clone()),
            Cell::Str(p.run.git_revision.clone()),
            Cell::Str(p.row.status.name().into()),
            Cell::Float(p.timing.median_s),
            Cell::Float(p.timing.min_s),
            Cell::Float(p.timing.max_s),
            Cell::Int(p.timing.samples as u64),
        ]);
    }
    t
}

/// Per case and mode, the lowest median of the last `n` runs (the gate's `best-of:N` baseline)
/// among rows that were ok, with the run it came from.
pub fn best_of(runs: &[(RunInfo, Vec<ResultRow>)], n: usize, sel: &Selection) -> Table {
    let last = &runs[runs.len().saturating_sub(n)..];
    let mut best: BTreeMap<(String, &str), Point> = BTreeMap::new();
    for p in points(last, sel).into_iter().filter(|p| p.row.status == Status::Ok) {
        let key = (p.row.case_id.clone(), p.mode);
        if best.get(&key).is_none_or(|b| p.timing.median_s < b.timing.median_s) {
            best.insert(key, p);
        }
    }
    let mut t = Table::new(&["case_id", "mode", "best_median_s", "run_id", "timestamp", "runs"]);
    for ((case, mode), p) in best {
        t.rows.push(vec![
            Cell::Str(case),
            Cell::Str(mode.into()),
            Cell::Float(p.timing.median_s),
            Cell::Str(p.run.run_id.clone()),
            Cell::Str(p.run.timestamp.clone()),
            Cell::Int(last.len() as u64),
        ]);
    }
    t
}

/// Per case and mode, the first median at or after `sel.since` against the newest one: those
/// whose ratio exceeds `max_ratio` (sorted worst first).
pub fn regressions(runs: &[(RunInfo, Vec<ResultRow>)], max_ratio: f64, sel: &Selection) -> Table {
    let mut ends: BTreeMap<(String, &str), (Point, Point)> = BTreeMap::new();
    for p in points(runs, sel).into_iter().filter(|p| p.row.status == Status::Ok) {
        let key = (p.row.case_id.clone(), p.mode);
        match ends.get_mut(&key) {
            None => {
                ends.insert(key, (p, p));
            }
            Some(e) => e.1 = p,
        }
    }
    let mut found: Vec<(f64, Vec<Cell>)> = Vec::new();
    for ((case, mode), (first, last)) in ends {
        let ratio = last.timing.median_s / first.timing.median_s;
        if ratio > max_ratio {
            found.push((
                ratio,
                vec![
                    Cell::Str(case),
                    Cell::Str(mode.into()),
                    Cell::Str(first.run.run_id.clone()),
                    Cell::Float(first.timing.median_s),
                    Cell::Str(last.run.run_id.clone()),
                    Cell::Float(last.timing.median_s),
                    Cell::Float(ratio),
                ],
            ));
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut t = Table::new(&["case_id", "mode", "from_run", "from_median_s", "to_run", "to_median_s", "ratio"]);
    t.rows = found.into_iter().map(|(_, r)| r).collect();
    t
}
