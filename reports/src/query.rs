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

/// The days of `month` (1 to 12) of `year` in the Gregorian calendar.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Checks a `--since` value: a calendar date `YYYY-MM-DD`, optionally followed by a UTC time
/// or a prefix of one (`THH`, `THH:MM`, `THH:MM:SS`, `THH:MM:SSZ`). Returns it as compared with
/// the runs' RFC 3339 timestamps, or why it is not one (`2026-13-45` is no date, and compared as
/// text it would select nothing, or everything).
pub fn parse_since(s: &str) -> Result<String, String> {
    let expected = "expected a date, YYYY-MM-DD (or an RFC 3339 UTC time, YYYY-MM-DDTHH:MM:SSZ)";
    let bad = |why: String| Err(format!("--since {s}: {why}"));
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let (Some(year), Some(month), Some(day)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return bad(expected.into());
    };
    if b[4] != b'-' || b[7] != b'-' {
        return bad(expected.into());
    }
    if !(1..=12).contains(&month) {
        return bad(format!("month {month} is not 1 to 12"));
    }
    if !(1..=days_in_month(year, month)).contains(&day) {
        return bad(format!("day {day} is not a day of {year}-{month:02}"));
    }
    // The time: `T`, then fields `HH`, `:MM`, `:SS`, each optional after the one before, then
    // `Z` only after the seconds.
    let time = s[10..].to_ascii_uppercase();
    if !time.is_empty() {
        let t = time.strip_prefix('T').ok_or_else(|| format!("--since {s}: {expected}"))?;
        let (fields, zone) = t.strip_suffix('Z').map_or((t, false), |f| (f, true));
        let parts: Vec<&str> = fields.split(':').collect();
        let limits = [23, 59, 60];
        let ok = !parts.is_empty()
            && parts.len() <= 3
            && (!zone || parts.len() == 3)
            && parts.iter().zip(limits).all(|(p, max)| {
                p.len() == 2 && p.bytes().all(|c| c.is_ascii_digit()) && p.parse::<u32>().is_ok_and(|v| v <= max)
            });
        if !ok {
            return bad(expected.into());
        }
    }
    Ok(format!("{}{time}", &s[..10]))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_calendar_dates_and_utc_times_and_names_what_is_wrong() {
        for good in ["2026-11-02", "2024-02-29", "2026-11-02T05", "2026-11-02T05:30", "2026-11-02T23:59:60Z"] {
            assert_eq!(parse_since(good).as_deref(), Ok(good), "{good}");
        }
        assert_eq!(parse_since("2026-11-02t05:00:00z").as_deref(), Ok("2026-11-02T05:00:00Z"));
        for (bad, why) in [
            ("2026-13-45", "month 13 is not 1 to 12"),
            ("2026-02-29", "day 29 is not a day of 2026-02"),
            ("2100-02-29", "day 29 is not a day of 2100-02"),
            ("2026-04-31", "day 31 is not a day of 2026-04"),
            ("2026-11-00", "day 0 is not"),
            ("yesterday", "expected a date"),
            ("2026-1-02", "expected a date"),
            ("2026-11-02 05:00", "expected a date"),
            ("2026-11-02T24", "expected a date"),
            ("2026-11-02T05Z", "expected a date"),
            ("2026-11-02T05:00:00+01:00", "expected a date"),
            ("2026-11-02é", "expected a date"),
        ] {
            let e = parse_since(bad).unwrap_err();
            assert!(e.starts_with(&format!("--since {bad}: ")) && e.contains(why), "{bad}: {e}");
        }
    }
}
