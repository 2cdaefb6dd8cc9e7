//! Where a run's results go. The runner reports to one [`Sink`] — a [`Fanout`] of the terminal
//! table or JSON lines, the history files and the progress bar — so that adding an output (a
//! report, a remote store) is one more sink, not one more `println!` in the runner (criterion's
//! `Report` fan-out is the model).
//!
//! Sinks that print share a [`Console`]: it writes above the progress bar, and a closed pipe
//! (`adgauge run | head`) silences it instead of ending the run, so results still reach the
//! history.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use adgauge_reports::{ResultRow, RunInfo, Status, Timing};

use crate::history::RunWriter;

/// What a run is, for its header.
pub struct RunStart<'a> {
    pub info: &'a RunInfo,
    pub suite: &'a str,
    pub description: Option<&'a str>,
    pub cases: usize,
    pub machine: &'a str,
    pub seed: u64,
}

/// Receives a run's events, in order: `run_started`, then `case_started`/`case_finished` per
/// case, then `run_finished`.
pub trait Sink {
    fn run_started(&mut self, _run: &RunStart) -> anyhow::Result<()> {
        Ok(())
    }
    fn case_started(&mut self, _id: &str) {}
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()>;
    fn run_finished(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Every sink, in order; an error of one does not keep the others from their event.
#[derive(Default)]
pub struct Fanout {
    sinks: Vec<Box<dyn Sink>>,
}

impl Fanout {
    pub fn push(&mut self, sink: impl Sink + 'static) {
        self.sinks.push(Box::new(sink));
    }

    fn all(&mut self, mut f: impl FnMut(&mut dyn Sink) -> anyhow::Result<()>) -> anyhow::Result<()> {
        let mut first_error = None;
        for s in &mut self.sinks {
            if let Err(e) = f(s.as_mut()) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Sink for Fanout {
    fn run_started(&mut self, run: &RunStart) -> anyhow::Result<()> {
        self.all(|s| s.run_started(run))
    }
    fn case_started(&mut self, id: &str) {
        self.sinks.iter_mut().for_each(|s| s.case_started(id));
    }
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        self.all(|s| s.case_finished(row))
    }
    fn run_finished(&mut self) -> anyhow::Result<()> {
        self.all(|s| s.run_finished())
    }
}

/// Standard output shared by the printing sinks and the progress bar.
#[derive(Clone)]
pub struct Console {
    bar: ProgressBar,
    closed: Arc<AtomicBool>,
}

impl Console {
    /// A console whose progress bar is drawn only when stderr is a terminal and not `quiet`.
    pub fn new(len: usize, quiet: bool) -> Console {
        let bar = ProgressBar::new(len as u64);
        if quiet || !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        } else if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {pos}/{len} cases  elapsed {elapsed}  eta {eta}  {msg}")
        {
            bar.set_style(style);
        }
        Console { bar, closed: Arc::new(AtomicBool::new(false)) }
    }

    /// Prints one line (flushed); after a write error (a closed pipe) prints nothing more.
    pub fn line(&self, text: &str) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        self.bar.suspend(|| {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
                self.closed.store(true, Ordering::Relaxed);
            }
        });
    }
}

/// The progress bar: one step per finished case, the case in progress as its message.
pub struct ProgressSink(pub Console);

impl Sink for ProgressSink {
    fn case_started(&mut self, id: &str) {
        self.0.bar.set_message(id.to_string());
    }
    fn case_finished(&mut self, _row: &ResultRow) -> anyhow::Result<()> {
        self.0.bar.inc(1);
        Ok(())
    }
    fn run_finished(&mut self) -> anyhow::Result<()> {
        self.0.bar.finish_and_clear();
        Ok(())
    }
}

/// One JSON object per row (JSON lines): the row, with the run it belongs to (id, time, git
/// revision, version, machine) and its overheads, so that a line can be read on its own.
pub struct JsonLinesSink {
    console: Console,
    run: Option<serde_json::Value>,
}

impl JsonLinesSink {
    pub fn new(console: Console) -> JsonLinesSink {
        JsonLinesSink { console, run: None }
    }
}

impl Sink for JsonLinesSink {
    fn run_started(&mut self, run: &RunStart) -> anyhow::Result<()> {
        let mut info = serde_json::to_value(run.info)?;
        if let serde_json::Value::Object(map) = &mut info {
            map.insert("suite".into(), run.suite.into());
        }
        self.run = Some(info);
        Ok(())
    }
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        let mut value = serde_json::to_value(row)?;
        if let serde_json::Value::Object(map) = &mut value {
            if let Some(serde_json::Value::Object(run)) = &self.run {
                for (k, v) in run {
                    map.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            map.insert("vjp_overhead".into(), row.vjp_overhead().into());
            map.insert("jvp_overhead".into(), row.jvp_overhead().into());
        }
        self.console.line(&value.to_string());
        Ok(())
    }
}

/// The terminal table: a header, then one line per row.
pub struct TableSink(pub Console);

impl Sink for TableSink {
    fn run_started(&mut self, run: &RunStart) -> anyhow::Result<()> {
        self.0.line(&format!(
            "adgauge {} — suite {} ({} cases) on {}, seed {}, run {}",
            env!("CARGO_PKG_VERSION"),
            run.suite,
            run.cases,
            run.machine,
            run.seed,
            run.info.run_id
        ));
        if let Some(d) = run.description {
            self.0.line(d);
        }
        self.0.line(&header());
        Ok(())
    }
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        self.0.line(&table_row(row));
        Ok(())
    }
}

/// After the run, the tools side by side: for every case run by several tools, each tool's
/// median times, its overhead and its time relative to adgauge's CPU engine, and its finding.
pub struct ToolsComparedSink {
    console: Console,
    rows: Vec<ResultRow>,
}

impl ToolsComparedSink {
    pub fn new(console: Console) -> ToolsComparedSink {
        ToolsComparedSink { console, rows: Vec::new() }
    }
}

/// A case's identity without its tool: workload, parameters, dtype, rule.
type CaseKey = (String, Vec<(String, String)>, String, String);

fn without_tool(row: &ResultRow) -> CaseKey {
    let params = row.params.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    (row.workload.clone(), params, row.dtype.clone(), row.rule.clone())
}

impl Sink for ToolsComparedSink {
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        self.rows.push(row.clone());
        Ok(())
    }
    fn run_finished(&mut self) -> anyhow::Result<()> {
        let mut groups: Vec<(CaseKey, Vec<&ResultRow>)> = Vec::new();
        for row in &self.rows {
            let key = without_tool(row);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, rows)) => rows.push(row),
                None => groups.push((key, vec![row])),
            }
        }
        groups.retain(|(_, rows)| rows.len() > 1);
        if groups.is_empty() {
            return Ok(());
        }
        self.console.line("");
        self.console.line("tools compared (median ms; in brackets: time / cpu's)");
        self.console.line(&format!(
            "{:<30} {:<8} {:>19} {:>19} {:>19} {:>7}  finding",
            "case", "tool", "primal", "vjp", "jvp", "vjp/pri"
        ));
        for (_, rows) in groups {
            let reference = rows.iter().find(|r| r.backend == "cpu").copied();
            for (i, row) in rows.iter().enumerate() {
                let cell = |t: &Option<Timing>, base: Option<&Option<Timing>>| match t {
                    None => "-".to_string(),
                    Some(t) => match base.and_then(|b| b.as_ref()).filter(|_| row.backend != "cpu") {
                        Some(b) if b.median_s > 0.0 => {
                            format!("{:.3} ({:.2}x)", t.median_s * 1e3, t.median_s / b.median_s)
                        }
                        _ => format!("{:.3}", t.median_s * 1e3),
                    },
                };
                let label = if i == 0 {
                    let p = |k: &str| row.params.get(k).map(|v| format!(" {k}={v}")).unwrap_or_default();
                    let name = adgauge_workloads::find(&row.workload)
                        .map(|w| w.table_label(&row.workload, &row.params))
                        .unwrap_or_else(|| row.workload.clone());
                    format!("{name}{}{}", p("n"), p("k"))
                } else {
                    String::new()
                };
                let finding = match (row.status, &row.message) {
                    (Status::Ok, None) => "ok".to_string(),
                    (Status::Ok, Some(m)) => format!("ok; {m}"),
                    (Status::Failed, m) => format!("WRONG: {}", m.clone().unwrap_or_default()),
                    (Status::Skipped, m) => format!("unsupported/skipped: {}", m.clone().unwrap_or_default()),
                    (other, m) => format!("{}: {}", other.name().to_uppercase(), m.clone().unwrap_or_default()),
                };
                self.console.line(&format!(
                    "{:<30} {:<8} {:>19} {:>19} {:>19} {:>7}  {}",
                    label,
                    row.backend,
                    cell(&row.primal, reference.map(|r| &r.primal)),
                    cell(&row.vjp, reference.map(|r| &r.vjp)),
                    cell(&row.jvp, reference.map(|r| &r.jvp)),
                    ratio(row.vjp_overhead()),
                    finding
                ));
            }
        }
        Ok(())
    }
}

/// The run's files in the history directories (see [`RunWriter`]): each row as it finishes,
/// the whole run at the end.
pub struct HistorySink {
    writer: Option<RunWriter>,
    run_id: String,
}

impl HistorySink {
    pub fn new(dirs: Vec<PathBuf>, info: RunInfo) -> anyhow::Result<HistorySink> {
        let run_id = info.run_id.clone();
        Ok(HistorySink { writer: Some(RunWriter::new(dirs, info)?), run_id })
    }
}

impl Sink for HistorySink {
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.push(row.clone()),
            None => Ok(()),
        }
    }
    fn run_finished(&mut self) -> anyhow::Result<()> {
        if let Some(w) = self.writer.take() {
            for path in w.finish()? {
                eprintln!("wrote run {} to {}", self.run_id, path.display());
            }
        }
        Ok(())
    }
}

fn ms(t: &Option<Timing>, f: impl Fn(&Timing) -> f64) -> String {
    t.as_ref().map(|t| format!("{:.3}", f(t) * 1e3)).unwrap_or_else(|| "-".into())
}

fn ratio(x: Option<f64>) -> String {
    x.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into())
}

fn header() -> String {
    format!(
        "{:<15} {:>9} {:>8} {:<6} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7}  check",
        "workload",
        "n",
        "k",
        "device",
        "rule",
        "type",
        "thr",
        "primal ms min/med",
        "vjp ms min/med",
        "jvp ms min/med",
        "vjp/pri",
        "jvp/pri",
        "mem vjp",
        "mem jvp"
    )
}

/// One table line; the workload column is the workload's own label (its sizes besides n and k).
pub fn table_row(row: &ResultRow) -> String {
    let p = |k: &str| row.params.get(k).cloned().unwrap_or_default();
    let workload = adgauge_workloads::find(&row.workload)
        .map(|w| w.table_label(&row.workload, &row.params))
        .unwrap_or_else(|| row.workload.clone());
    let both = |t: &Option<Timing>| format!("{}/{}", ms(t, |t| t.min_s), ms(t, |t| t.median_s));
    let status = match row.status {
        Status::Ok => "ok".to_string(),
        other => format!("{}: {}", other.name().to_uppercase(), row.message.clone().unwrap_or_default()),
    };
    format!(
        "{:<15} {:>9} {:>8} {:<6} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7}  {}",
        workload,
        p("n"),
        p("k"),
        row.backend,
        row.rule,
        row.dtype,
        row.threads,
        both(&row.primal),
        both(&row.vjp),
        both(&row.jvp),
        ratio(row.vjp_overhead()),
        ratio(row.jvp_overhead()),
        ratio(row.vjp_memory_ratio()),
        ratio(row.jvp_memory_ratio()),
        status
    )
}
