//! Where a run's results go. The runner reports to one [`Sink`] — a [`Fanout`] of the terminal
//! table or JSON lines, the history files and the progress bar — so that adding an output (a
//! report, a remote store) is one more sink, not one more `println!` in the runner (criterion's
//! `Report` fan-out is the model).
//!
//! Sinks that print share a [`Console`] (`console.rs`): it writes above the progress bar, and a
//! closed pipe (`adgauge run | head`) silences it instead of ending the run, so results still
//! reach the history.

use std::collections::BTreeMap;
use std::path::PathBuf;

use adgauge_reports::{ResultRow, Roofline, RunInfo, Status, Timing};

pub use crate::console::Console;
use crate::history::RunWriter;

/// What a run is, for its header.
pub struct RunStart<'a> {
    pub info: &'a RunInfo,
    pub suite: &'a str,
    pub description: Option<&'a str>,
    pub cases: usize,
    /// Every tool of the run, with what it is (device, threads) or why it is unavailable.
    pub tools: Vec<(String, String)>,
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

/// `run --json`: each finished case as the lines its run file holds, as typed JSON objects
/// (`adgauge_reports::store::json_lines`), so that a pipe gets the same rows as the files.
pub struct FileRowsJsonSink {
    console: Console,
    run: Option<RunInfo>,
}

impl FileRowsJsonSink {
    pub fn new(console: Console) -> FileRowsJsonSink {
        FileRowsJsonSink { console, run: None }
    }
}

impl Sink for FileRowsJsonSink {
    fn run_started(&mut self, run: &RunStart) -> anyhow::Result<()> {
        self.run = Some(RunInfo { suite: run.suite.to_string(), ..run.info.clone() });
        Ok(())
    }
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        let run =
            self.run.as_ref().ok_or_else(|| anyhow::anyhow!("internal: a case finished before its run started"))?;
        for line in adgauge_reports::store::json_lines(run, std::slice::from_ref(row)) {
            self.console.line(&line);
        }
        Ok(())
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
            // Spelled as the row's own reals are (`adgauge_reports::real`): an overhead over a
            // primal of 0 s is infinite, not null.
            let real = |x: Option<f64>| x.map_or(serde_json::Value::Null, adgauge_reports::real::to_json);
            map.insert("vjp_overhead".into(), real(row.vjp_overhead()));
            map.insert("jvp_overhead".into(), real(row.jvp_overhead()));
        }
        self.console.line(&value.to_string());
        Ok(())
    }
}

/// The terminal table: a header naming the run and every tool in it, one line per row, and a
/// closing summary with the cases that did not pass. The default table fits 100 columns
/// (median times, the vjp memory ratio, messages cut to the line); `--wide` shows min and
/// median times, every ratio and whole messages.
pub struct TableSink {
    console: Console,
    wide: bool,
    /// The tool column's width: the longest tool name of the run (names are never cut: two
    /// tools that share a prefix, `planted` and `planted2`, must stay apart).
    tool_width: usize,
    started: std::time::Instant,
    counts: BTreeMap<&'static str, usize>,
    /// Case id and the status and message of every row that is not plain `ok`.
    notes: Vec<(String, String)>,
    /// The run's roofline (the `--wide` table's `roofline` column divides by it).
    roofline: Option<Roofline>,
}

impl TableSink {
    pub fn new(console: Console, wide: bool) -> TableSink {
        TableSink {
            console,
            wide,
            tool_width: MIN_TOOL_WIDTH,
            started: std::time::Instant::now(),
            counts: BTreeMap::new(),
            notes: Vec::new(),
            roofline: None,
        }
    }
}

/// The width the default table keeps to while tool names fit [`MIN_TOOL_WIDTH`] characters;
/// longer names widen the tool column, and the table, by what they need.
pub const TABLE_WIDTH: usize = 100;

/// The tool column's width when every name fits it (`cpu`, `opencl`, `cuda`, `jax`).
pub const MIN_TOOL_WIDTH: usize = 6;

/// The width of a tool column holding every one of `names` whole.
fn tool_width<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    names.into_iter().map(|n| n.chars().count()).max().unwrap_or(0).max(MIN_TOOL_WIDTH)
}

impl Sink for TableSink {
    fn run_started(&mut self, run: &RunStart) -> anyhow::Result<()> {
        self.started = std::time::Instant::now();
        self.console.line(&format!(
            "adgauge {} — suite {} ({} cases), seed {}, run {}",
            env!("CARGO_PKG_VERSION"),
            run.suite,
            run.cases,
            run.seed,
            run.info.run_id
        ));
        if let Some(d) = run.description {
            self.console.line(d);
        }
        for (name, detail) in &run.tools {
            self.console.line(&format!("  {name}: {detail}"));
        }
        self.roofline = run.info.roofline.clone();
        if let Some(r) = &self.roofline {
            self.console.line(&roofline_line(r));
        }
        self.tool_width = tool_width(run.tools.iter().map(|(name, _)| name.as_str()));
        self.console.line(&if self.wide { wide_header(self.tool_width) } else { header(self.tool_width) });
        Ok(())
    }
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        *self.counts.entry(row.status.name()).or_default() += 1;
        if row.status != Status::Ok || row.message.is_some() {
            let message = row.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
            self.notes.push((row.case_id.clone(), format!("{}{message}", row.status.name())));
        }
        // A row of a tool the header did not name (none today) widens its own line, never cut.
        let width = self.tool_width.max(row.backend.chars().count());
        self.console.line(&if self.wide {
            wide_table_row(row, width, self.roofline.as_ref())
        } else {
            table_row(row, width)
        });
        Ok(())
    }
    fn run_finished(&mut self) -> anyhow::Result<()> {
        if !self.wide && !self.notes.is_empty() {
            self.console.line("");
            self.console.line("not plain ok:");
            for (id, note) in &self.notes {
                self.console.line(&format!("  {id}"));
                for l in wrap(note, 6, TABLE_WIDTH) {
                    self.console.line(&l);
                }
            }
        }
        let total: usize = self.counts.values().sum();
        let parts: Vec<String> = ["ok", "failed", "error", "timeout", "skipped"]
            .iter()
            .map(|s| format!("{} {s}", self.counts.get(s).copied().unwrap_or(0)))
            .collect();
        self.console.line(&format!(
            "{total} cases: {} in {:.1} s",
            parts.join(", "),
            self.started.elapsed().as_secs_f64()
        ));
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
        let width = tool_width(groups.iter().flat_map(|(_, rows)| rows.iter().map(|r| r.backend.as_str())));
        self.console.line(&format!(
            "{:<27} {:<width$} {:>14} {:>14} {:>14} {:>4}  finding",
            "case", "tool", "primal", "vjp", "jvp", "v/p"
        ));
        for (_, rows) in groups {
            let reference = rows.iter().find(|r| r.backend == "cpu").copied();
            for (i, row) in rows.iter().enumerate() {
                let cell = |t: &Option<Timing>, base: Option<&Option<Timing>>| match t {
                    None => "-".to_string(),
                    Some(t) => match base.and_then(|b| b.as_ref()).filter(|_| row.backend != "cpu") {
                        Some(b) if b.median_s > 0.0 => {
                            format!("{} ({})", short_ms(t.median_s), times(t.median_s / b.median_s))
                        }
                        _ => short_ms(t.median_s),
                    },
                };
                let label = if i == 0 { fitted_case_label(row, 27) } else { String::new() };
                let line = format!(
                    "{:<27} {:<width$} {:>14} {:>14} {:>14} {:>4}  {}",
                    label,
                    row.backend,
                    cell(&row.primal, reference.map(|r| &r.primal)),
                    cell(&row.vjp, reference.map(|r| &r.vjp)),
                    cell(&row.jvp, reference.map(|r| &r.jvp)),
                    short_ratio(row.vjp_overhead()),
                    finding(row)
                );
                self.console.line(&line);
                // The reason, under the line, wrapped to the table's width.
                if let Some(m) = &row.message {
                    for l in wrap(m, 6, TABLE_WIDTH) {
                        self.console.line(&l);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A tool's finding on a case in one word: what `docs/protocol.md` calls it.
fn finding(row: &ResultRow) -> &'static str {
    let message = row.message.as_deref().unwrap_or("");
    match row.status {
        Status::Ok if message.contains(": convention:") => "convention",
        Status::Ok if message.is_empty() => "ok",
        Status::Ok => "ok*",
        Status::Failed => "WRONG",
        Status::Skipped if message.starts_with("unsupported") => "unsupported",
        Status::Skipped => "skipped",
        Status::Error => "ERROR",
        Status::Timeout => "TIMEOUT",
    }
}

/// `text` in lines of at most `width` characters, each indented by `indent` spaces (a word
/// longer than a line is cut).
fn wrap(text: &str, indent: usize, width: usize) -> Vec<String> {
    let room = width.saturating_sub(indent).max(10);
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        let word = fit(word, room);
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > room {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(&word);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines.into_iter().map(|l| format!("{:indent$}{l}", "")).collect()
}

/// Milliseconds to four significant digits from 1 ms up, three below (never a rounded 0.000
/// for a sub-microsecond median), in at most 7 characters.
fn short_ms(seconds: f64) -> String {
    let ms = seconds * 1e3;
    match ms {
        m if m >= 1000.0 => format!("{m:.0}"),
        m if m >= 100.0 => format!("{m:.1}"),
        m if m >= 10.0 => format!("{m:.2}"),
        m if m >= 1.0 || m == 0.0 => format!("{m:.3}"),
        m if m >= 1e-4 => {
            let decimals = (2 - m.log10().floor() as i32).clamp(3, 5) as usize;
            format!("{m:.decimals$}")
        }
        m => format!("{m:.1e}"),
    }
}

/// A ratio as `1.23x`, in at most 6 characters.
fn times(r: f64) -> String {
    match r {
        r if r < 10.0 => format!("{r:.2}x"),
        r if r < 100.0 => format!("{r:.1}x"),
        r if r < 1e4 => format!("{r:.0}x"),
        r => format!("{r:.0e}x"),
    }
}

/// The run's files in the history directories (see [`RunWriter`]): each row as it finishes,
/// the whole run at the end.
pub struct HistorySink {
    writer: Option<RunWriter>,
    run_id: String,
    /// The cases the run selected.
    cases: usize,
}

impl HistorySink {
    pub fn new(dirs: Vec<PathBuf>, info: RunInfo) -> anyhow::Result<HistorySink> {
        let run_id = info.run_id.clone();
        Ok(HistorySink { writer: Some(RunWriter::new(dirs, info)?), run_id, cases: 0 })
    }
}

impl Sink for HistorySink {
    fn run_started(&mut self, run: &RunStart) -> anyhow::Result<()> {
        self.cases = run.cases;
        Ok(())
    }
    fn case_finished(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.push(row.clone()),
            None => Ok(()),
        }
    }
    fn run_finished(&mut self) -> anyhow::Result<()> {
        if let Some(mut w) = self.writer.take() {
            // A run a signal ended is saved as what it is: interrupted, never a baseline.
            if let Some(signal) = crate::interrupt::signal()
                && w.rows() < self.cases
            {
                w.mark_interrupted(format!(
                    "interrupted by {} after {} of {} case(s)",
                    crate::interrupt::name(signal),
                    w.rows(),
                    self.cases
                ));
            }
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

/// A number of a size parameter, short: powers of ten of 10^4 and more as `1e5`.
fn short_size(v: &str) -> String {
    match v.parse::<u64>() {
        Ok(n) if n >= 10_000 && n.to_string().trim_start_matches('1').chars().all(|c| c == '0') => {
            format!("1e{}", n.to_string().len() - 1)
        }
        _ => v.to_string(),
    }
}

/// The case's label without its tool: the workload's own label and its n and k.
fn case_label(row: &ResultRow) -> String {
    let mut label = adgauge_workloads::find(&row.workload)
        .map(|w| w.table_label(&row.workload, &row.params))
        .unwrap_or_else(|| row.workload.clone());
    for key in ["n", "k"] {
        if let Some(v) = row.params.get(key) {
            label.push_str(&format!(" {key}={}", short_size(v)));
        }
    }
    label
}

/// [`case_label`] in at most `width` characters. The parameters are what tell rows apart, so
/// the workload's name is cut first (`hist-loga… i32 n=1e6 k=1000`), down to a few letters;
/// only a label whose parameters alone are too wide is cut at its end.
fn fitted_case_label(row: &ResultRow, width: usize) -> String {
    let label = case_label(row);
    if label.chars().count() <= width {
        return label;
    }
    // The shortest name kept: enough letters to tell `hist-add` from `hist-max`.
    const MIN_NAME: usize = 6;
    let (name, rest) = label.split_once(' ').unwrap_or((label.as_str(), ""));
    let room = width.saturating_sub(rest.chars().count() + 1);
    if rest.is_empty() || room < MIN_NAME {
        return fit(&label, width);
    }
    format!("{} {rest}", fit(name, room))
}

/// `s` in at most `width` characters (cut with an ellipsis).
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        s.chars().take(width.saturating_sub(1)).collect::<String>() + "…"
    }
}

fn status_word(row: &ResultRow) -> String {
    match row.status {
        Status::Ok => match &row.message {
            None => "ok".to_string(),
            Some(m) => format!("ok; {m}"),
        },
        other => format!("{}: {}", other.name().to_uppercase(), row.message.clone().unwrap_or_default()),
    }
}

/// The default table's status column: five characters; the closing list has whole messages.
fn short_status(row: &ResultRow) -> &'static str {
    match (row.status, &row.message) {
        (Status::Ok, None) => "ok",
        // Right, with a note (e.g. a convention other than adgauge's, an untimed mode).
        (Status::Ok, Some(_)) => "ok*",
        (Status::Failed, _) => "FAIL",
        (Status::Error, _) => "ERROR",
        (Status::Skipped, _) => "skip",
        (Status::Timeout, _) => "TIME",
    }
}

fn header(tool_width: usize) -> String {
    format!(
        "{:<27} {:<tool_width$} {:<15} {:<3} {:>7} {:>7} {:>7} {:>4} {:>4} {:>4}  {}",
        "case (ms: medians)", "tool", "rule", "dt", "primal", "vjp", "jvp", "v/p", "j/p", "mem", "check"
    )
}

/// The rule column: the rule the suite named and, where it was `auto`, the rule it ran
/// (`auto:chunked`).
fn rule_label(row: &ResultRow) -> String {
    match row.auto_took() {
        Some(used) => format!("auto:{}", used.strip_prefix("general-").unwrap_or(used)),
        None => row.rule.clone(),
    }
}

/// One line of the default table: [`TABLE_WIDTH`] characters at most, plus what a tool column
/// of `tool_width` (at least the row's tool name) adds beyond [`MIN_TOOL_WIDTH`].
pub fn table_row(row: &ResultRow, tool_width: usize) -> String {
    let med = |t: &Option<Timing>| t.as_ref().map(|t| short_ms(t.median_s)).unwrap_or_else(|| "-".into());
    format!(
        "{:<27} {:<tool_width$} {:<15} {:<3} {:>7} {:>7} {:>7} {:>4} {:>4} {:>4}  {}",
        fitted_case_label(row, 27),
        row.backend,
        fit(&rule_label(row), 15),
        row.dtype,
        med(&row.primal),
        med(&row.vjp),
        med(&row.jvp),
        short_ratio(row.vjp_overhead()),
        short_ratio(row.jvp_overhead()),
        short_ratio(row.vjp_memory_ratio()),
        short_status(row)
    )
}

/// A ratio in at most 4 characters.
fn short_ratio(x: Option<f64>) -> String {
    match x {
        Some(r) if r < 9.995 => format!("{r:.2}"),
        Some(r) if r < 99.95 => format!("{r:.1}"),
        Some(r) if r < 9999.5 => format!("{r:.0}"),
        Some(r) if r.is_finite() => format!("{r:.0e}"),
        Some(_) => "inf".into(),
        None => "-".into(),
    }
}

/// The header's line of the run's roofline: the sequential read rate the `roofline` column
/// divides by, and the random rates per bin count.
fn roofline_line(r: &Roofline) -> String {
    let random: Vec<String> = r
        .random
        .iter()
        .map(|x| {
            format!("k={} {:.2}/{:.2}", short_size(&x.bins.to_string()), x.reads_per_s / 1e9, x.updates_per_s / 1e9)
        })
        .collect();
    format!(
        "  roofline ({} threads): sequential read {:.1} GB/s; random 4-byte reads/updates, 10^9/s: {}",
        r.threads,
        r.seq_read_gb_s,
        random.join(", ")
    )
}

fn wide_header(tool_width: usize) -> String {
    format!(
        "{:<15} {:>9} {:>8} {:<tool_width$} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7} {:>9} {:>25}  check",
        "workload",
        "n",
        "k",
        "tool",
        "rule",
        "type",
        "thr",
        "primal ms min/med",
        "vjp ms min/med",
        "jvp ms min/med",
        "vjp/pri",
        "jvp/pri",
        "mem vjp",
        "mem jvp",
        "primal MB",
        "roofline"
    )
}

/// One line of the `--wide` table; the workload column is the workload's own label (its sizes
/// besides n and k), and a histogram's `roofline` column its primal's achieved GB/s, the
/// fraction of `roofline`'s sequential read rate and the bound (`adgauge_reports::roofline::cell`).
pub fn wide_table_row(row: &ResultRow, tool_width: usize, roofline: Option<&Roofline>) -> String {
    let p = |k: &str| row.params.get(k).cloned().unwrap_or_default();
    let workload = adgauge_workloads::find(&row.workload)
        .map(|w| w.table_label(&row.workload, &row.params))
        .unwrap_or_else(|| row.workload.clone());
    let both = |t: &Option<Timing>| format!("{}/{}", ms(t, |t| t.min_s), ms(t, |t| t.median_s));
    let mb = row.primal_peak_bytes.map(|b| format!("{:.3}", b as f64 / 1e6)).unwrap_or_else(|| "-".into());
    format!(
        "{:<15} {:>9} {:>8} {:<tool_width$} {:<15} {:<4} {:>3} {:>17} {:>17} {:>17} {:>7} {:>7} {:>7} {:>7} {:>9} {:>25}  {}",
        workload,
        p("n"),
        p("k"),
        row.backend,
        rule_label(row),
        row.dtype,
        row.threads,
        both(&row.primal),
        both(&row.vjp),
        both(&row.jvp),
        ratio(row.vjp_overhead()),
        ratio(row.jvp_overhead()),
        ratio(row.vjp_memory_ratio()),
        ratio(row.jvp_memory_ratio()),
        mb,
        adgauge_reports::roofline::cell(row, roofline),
        status_word(row)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use adgauge_reports::Check;

    fn row(workload: &str, params: &[(&str, &str)], status: Status, message: Option<&str>) -> ResultRow {
        let params = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut r = ResultRow::unmeasured(workload, params, "opencl", "f32", "general-chunked", 2, 1);
        let t =
            |s: f64| Some(Timing { min_s: s, median_s: s, max_s: s, batch: 1, samples: 5, cv: 0.0, sample_s: vec![] });
        (r.primal, r.vjp, r.jvp) = (t(1234.5678), t(0.000_012_3), t(0.098_765));
        (r.primal_peak_bytes, r.vjp_peak_bytes) = (Some(1000), Some(123_456_789));
        r.status = status;
        r.message = message.map(str::to_string);
        r.checks.push(Check { name: "fd-vjp".into(), worst: 0.5, tolerance: 1e-3, passed: status == Status::Ok });
        r
    }

    #[test]
    fn medians_below_a_millisecond_keep_three_significant_digits_in_seven_characters() {
        let cases = [
            (2.5, "2500"),
            (0.0123456, "12.35"),
            (0.0012346, "1.235"),
            (0.0005, "0.500"),
            (0.000_051_23, "0.0512"),
            (0.000_005_123, "0.00512"),
            (0.000_000_412, "0.00041"),
            (0.000_000_004_2, "4.2e-6"),
            (0.0, "0.000"),
        ];
        for (seconds, want) in cases {
            let got = short_ms(seconds);
            assert_eq!(got, want, "{seconds} s");
            assert!(got.len() <= 7, "{got}");
        }
    }

    #[test]
    fn default_table_lines_fit_100_columns_whatever_the_names_and_sizes() {
        let long = "x".repeat(300);
        for r in [
            row("hist-logaddexp", &[("n", "10000000"), ("k", "1000000")], Status::Failed, Some(&long)),
            row("hist-add", &[("n", "16392"), ("k", "10")], Status::Ok, None),
            row(&long, &[], Status::Error, Some("boom")),
        ] {
            let line = table_row(&r, MIN_TOOL_WIDTH);
            assert!(line.chars().count() <= TABLE_WIDTH, "{} chars: {line}", line.chars().count());
        }
        assert!(header(MIN_TOOL_WIDTH).chars().count() <= TABLE_WIDTH);
        let line = table_row(
            &row("hist-logaddexp", &[("n", "10000000"), ("k", "1000000")], Status::Failed, None),
            MIN_TOOL_WIDTH,
        );
        // Sizes are short, times have four significant digits (three below 1 ms), the huge
        // memory ratio stays in its column, and the status is a word.
        assert!(line.starts_with("hist-logaddexp n=1e7 k=1e6"), "{line}");
        assert!(line.contains(" 1234567 ") || line.contains(" 1234568 "), "{line}");
        assert!(line.contains(" 0.0123 ") && line.contains(" 98.77 "), "{line}");
        assert!(line.contains(" 1e5 "), "memory ratio 123457: {line}");
        assert!(line.trim_end().ends_with("FAIL"), "{line}");
    }

    #[test]
    fn sizes_ratios_and_messages_are_shortened_without_losing_their_value() {
        assert_eq!(short_size("10000000"), "1e7");
        assert_eq!(short_size("1000"), "1000");
        assert_eq!(short_size("16392"), "16392");
        assert_eq!(short_size("20000"), "20000");
        assert_eq!(short_ratio(Some(2.345)), "2.35");
        assert_eq!(short_ratio(Some(9.999)), "10.0");
        assert_eq!(short_ratio(Some(770.7)), "771");
        assert_eq!(short_ratio(Some(f64::INFINITY)), "inf");
        assert_eq!(short_ratio(None), "-");
        assert_eq!(times(0.284), "0.28x");
        assert_eq!(times(42.0), "42.0x");
        let text = "ties: convention: tie-policy split ".repeat(10);
        let lines = wrap(&text, 6, 40);
        assert!(lines.iter().all(|l| l.starts_with("      ") && l.chars().count() <= 40), "{lines:?}");
        let words: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>(), "no word is lost");
    }

    #[test]
    fn findings_are_named_as_the_protocol_docs_name_them() {
        let f = |status, message| finding(&row("hist-max", &[], status, message));
        assert_eq!(f(Status::Ok, Some("ties: convention: tie-policy split")), "convention");
        assert_eq!(f(Status::Ok, None), "ok");
        assert_eq!(f(Status::Ok, Some("jvp not timed: no forward mode")), "ok*");
        assert_eq!(f(Status::Failed, Some("fd-vjp worst 0.5")), "WRONG");
        assert_eq!(f(Status::Skipped, Some("unsupported: tool jax could not evaluate hist.jvp")), "unsupported");
        assert_eq!(f(Status::Skipped, Some("backend cuda unavailable")), "skipped");
        assert_eq!(f(Status::Error, None), "ERROR");
    }

    /// `--wide`'s roofline column, under its header: n = 10^7, k = 1000, i32 + f32 in 7.3 ms is
    /// (10^7 x 8 + 2 x 1000 x 4) B / 7.3 ms = 10.96 GB/s, 32% of 34.25 GB/s; f64 + i64 in 20 ms
    /// is (10^7 x 16 + 2 x 1000 x 8) B / 20 ms = 8.0 GB/s, 40% of 20 GB/s. Without the run's
    /// roofline the fraction is "-"; a workload that is not a histogram has no bandwidth.
    #[test]
    fn the_wide_table_shows_a_histograms_bandwidth_and_fraction_of_the_roofline() {
        let roof = |seq_read_gb_s: f64| Roofline {
            threads: 2,
            seq_read_gb_s,
            random: vec![adgauge_reports::RandomRate { bins: 1000, reads_per_s: 2.5e9, updates_per_s: 1.25e9 }],
            tools: vec!["cpu".into()],
        };
        let hist = |dtype: &str, index: &str, primal_s: f64| {
            let mut r = row("hist-add", &[("n", "10000000"), ("k", "1000"), ("index_dtype", index)], Status::Ok, None);
            (r.backend, r.dtype) = ("cpu".into(), dtype.into());
            r.primal = Some(Timing {
                min_s: primal_s,
                median_s: primal_s,
                max_s: primal_s,
                batch: 1,
                samples: 5,
                cv: 0.0,
                sample_s: vec![],
            });
            r
        };
        assert!(wide_header(MIN_TOOL_WIDTH).ends_with("                 roofline  check"));
        // The 25 characters before the status (the row's wide times push the columns right).
        let cell = |r: &ResultRow, roofline: Option<&Roofline>| {
            let line = wide_table_row(r, MIN_TOOL_WIDTH, roofline);
            let end = line.rfind("  ok").unwrap();
            line[end - 25..end].to_string()
        };
        // The bound: 10^7 updates at 1.25 x 10^9/s take 8 ms. i32 + f32 in 7.3 ms: the bytes
        // need 80 008 000 / 34.25e9 = 2.34 ms, the updates bind, 8 / 7.3 = 110% (one table per
        // thread measured the rate; the kernel beats it). i64 + f64 in 20 ms: the bytes need
        // 160 016 000 / 20e9 = 8.0008 ms and bind: 40%.
        assert_eq!(cell(&hist("f32", "i32", 7.3e-3), Some(&roof(34.25))), "11.0 GB/s 32%, bound 110%");
        assert_eq!(cell(&hist("f64", "i64", 0.02), Some(&roof(20.0))), "  8.0 GB/s 40%, bound 40%");
        assert_eq!(cell(&hist("f32", "i32", 7.3e-3), None), "              11.0 GB/s -");
        let mut other = hist("f32", "i32", 7.3e-3);
        other.workload = "kmeans".into();
        assert_eq!(cell(&other, Some(&roof(34.25))), "                        -");
        assert_eq!(
            roofline_line(&roof(34.25)),
            "  roofline (2 threads): sequential read 34.2 GB/s; random 4-byte reads/updates, 10^9/s: k=1000 2.50/1.25"
        );
    }

    /// Rows that differ only in a parameter read differently: the workload's name is cut, not
    /// the parameters (the label was `hist-logaddexp i32 n=1e6 k…` for every k).
    #[test]
    fn labels_keep_the_parameters_that_tell_rows_apart() {
        let label = |k: &str| {
            fitted_case_label(
                &row("hist-logaddexp", &[("n", "1000000"), ("k", k), ("index_dtype", "i32")], Status::Ok, None),
                27,
            )
        };
        let (ten, thousand, big) = (label("10"), label("1000"), label("100000"));
        for l in [&ten, &thousand, &big] {
            assert!(l.chars().count() <= 27, "{l}");
            assert!(l.starts_with("hist-"), "{l}");
        }
        assert!(thousand.ends_with(" n=1e6 k=1000"), "{thousand}");
        assert!(big.ends_with(" n=1e6 k=1e5"), "{big}");
        assert!(ten.ends_with(" n=1e6 k=10"), "{ten}");
        assert_ne!(ten, thousand);
        // What fits is not cut.
        let short = fitted_case_label(&row("hist-add", &[("n", "100"), ("k", "10")], Status::Ok, None), 27);
        assert_eq!(short, "hist-add n=100 k=10");
        assert_eq!(fit("abcdef", 4), "abc…");
    }

    /// Tool names are never cut: `planted` and `planted2` (a failing and an erroring tool) read
    /// `plant…` both when the column was six characters wide.
    #[test]
    fn tool_names_are_whole_and_the_columns_stay_aligned() {
        let names = ["planted", "planted2", "cpu-traced"];
        let width = tool_width(names);
        assert_eq!(width, 10);
        assert_eq!(tool_width(["cpu"]), MIN_TOOL_WIDTH);
        let head = header(width);
        let check_at = head.find("check").unwrap();
        for name in names {
            let mut r = row("hist-add", &[("n", "100"), ("k", "10")], Status::Ok, None);
            r.backend = name.into();
            let line = table_row(&r, width);
            assert!(line.contains(&format!(" {name} ")), "{line}");
            assert!(!line.contains('…'), "{line}");
            // Every line has its status where the header has `check`, whatever the name.
            assert_eq!(line.find(" ok").map(|i| i + 1), Some(check_at), "{line}\n{head}");
            assert_eq!(line.chars().count(), TABLE_WIDTH - 3 + width - MIN_TOOL_WIDTH, "{line}");
            assert!(wide_table_row(&r, width, None).contains(&format!(" {name} ")));
        }
    }
}
