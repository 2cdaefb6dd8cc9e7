//! Result files on disk: writing a run as it goes (`run --out/--history`), `adgauge gate`
//! and `adgauge merge`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use adgauge_reports::gate::{Finding, GateConfig, gate, junit};
use adgauge_reports::store::{self, COLUMNS, read_run, to_csv_line};
use adgauge_reports::{ResultRow, RunInfo};

use crate::exit::{Code, bad_input};

/// Writes a run's rows as they complete, so that a crash loses at most the row in progress:
/// rows go to a hidden `.<run_id>.partial.csv`, flushed after each row; `finish` writes the
/// complete run atomically as `<run_id>.csv` and removes the partial file.
pub struct RunWriter {
    dirs: Vec<PathBuf>,
    partials: Vec<(PathBuf, File)>,
    run: RunInfo,
    rows: Vec<ResultRow>,
}

impl RunWriter {
    pub fn new(dirs: Vec<PathBuf>, run: RunInfo) -> anyhow::Result<RunWriter> {
        let mut partials = Vec::new();
        for d in &dirs {
            fs::create_dir_all(d).map_err(|e| bad_input(format!("{}: cannot create directory: {e}", d.display())))?;
            let p = d.join(format!(".{}.partial.csv", run.run_id));
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .map_err(|e| bad_input(format!("{}: cannot write: {e}", p.display())))?;
            writeln!(f, "{}", COLUMNS.join(","))?;
            partials.push((p, f));
        }
        Ok(RunWriter { dirs, partials, run, rows: Vec::new() })
    }

    pub fn push(&mut self, row: ResultRow) -> anyhow::Result<()> {
        let line = to_csv_line(&self.run, &row);
        for (_, f) in &mut self.partials {
            writeln!(f, "{line}")?;
            f.flush()?;
        }
        self.rows.push(row);
        Ok(())
    }

    /// Writes the complete run into every directory; returns the files written.
    pub fn finish(self) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for d in &self.dirs {
            out.push(store::append_run(d, &self.run, &self.rows)?);
        }
        for (p, f) in self.partials {
            drop(f);
            let _ = fs::remove_file(p);
        }
        Ok(out)
    }
}

/// Whether two paths name the same file or directory.
fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A run file, or the newest run of a history directory.
pub fn resolve_run(path: &Path) -> anyhow::Result<(RunInfo, Vec<ResultRow>)> {
    let file = if path.is_dir() {
        let mut runs = store::run_files(path).map_err(|e| bad_input(e.to_string()))?;
        runs.pop().ok_or_else(|| bad_input(format!("{}: no run files (*.csv) in this directory", path.display())))?
    } else {
        path.to_path_buf()
    };
    read_run(&file).map_err(|e| bad_input(e.to_string()))
}

#[derive(Args, Debug)]
pub struct GateArgs {
    /// The baseline run (a run .csv, or a history directory: its newest run).
    #[arg(long)]
    pub baseline: PathBuf,
    /// The current run (same forms).
    #[arg(long)]
    pub current: PathBuf,
    /// Largest accepted ratio of current to baseline median time.
    #[arg(long, default_value_t = 1.15)]
    pub max_slowdown: f64,
    /// Cases whose baseline median is shorter than this are not judged on speed.
    #[arg(long, default_value_t = 0.0)]
    pub min_seconds: f64,
    /// Print the findings as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML summary to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
}

pub fn gate_command(args: &GateArgs) -> anyhow::Result<Code> {
    if args.max_slowdown.is_nan() || args.max_slowdown < 1.0 {
        return Err(bad_input(format!("--max-slowdown must be >= 1, got {}", args.max_slowdown)));
    }
    let (base, cur) = if args.baseline.is_dir() && same_path(&args.baseline, &args.current) {
        // One history for both sides: its newest run against the one before it.
        let runs = store::run_files(&args.current).map_err(|e| bad_input(e.to_string()))?;
        let [.., previous, newest] = runs.as_slice() else {
            return Err(bad_input(format!(
                "{}: gating a history against itself needs two runs, it has {}",
                args.current.display(),
                runs.len()
            )));
        };
        let read = |p: &Path| read_run(p).map_err(|e| bad_input(e.to_string()));
        (read(previous)?.1, read(newest)?.1)
    } else {
        (resolve_run(&args.baseline)?.1, resolve_run(&args.current)?.1)
    };
    let report = gate(&base, &cur, &GateConfig { max_slowdown: args.max_slowdown, min_seconds: args.min_seconds });
    let console = crate::sinks::Console::new(0, true);
    if args.json {
        let findings: Vec<serde_json::Value> = report
            .findings
            .iter()
            .map(|f| match f {
                Finding::Broken { case_id, detail } => {
                    serde_json::json!({"kind": "broken", "case_id": case_id, "detail": detail})
                }
                Finding::Slower { case_id, metric, baseline, current, ratio, noise } => serde_json::json!({
                    "kind": "slower", "case_id": case_id, "metric": metric, "baseline_s": baseline,
                    "current_s": current, "ratio": ratio, "noise": noise}),
                Finding::Missing { case_id } => {
                    serde_json::json!({"kind": "missing", "case_id": case_id})
                }
            })
            .collect();
        console.line(&serde_json::json!({"compared": report.compared, "findings": findings}).to_string());
    } else {
        console.line(&format!("compared {} cases; {} finding(s)", report.compared, report.findings.len()));
        for f in &report.findings {
            match f {
                Finding::Broken { case_id, detail } => console.line(&format!("BROKEN   {case_id}: {detail}")),
                Finding::Slower { case_id, metric, baseline, current, ratio, noise } => console.line(&format!(
                    "SLOWER   {case_id}: {metric} {:.3} ms -> {:.3} ms ({ratio:.2}x; noise {:.0}%)",
                    baseline * 1e3,
                    current * 1e3,
                    noise * 100.0
                )),
                Finding::Missing { case_id } => console.line(&format!("MISSING  {case_id}")),
            }
        }
    }
    if let Some(path) = &args.junit {
        let ids: Vec<String> = cur.iter().map(|r| r.case_id.clone()).collect();
        store::write_atomic(path, &junit(&report, &ids))?;
    }
    if report.compared == 0 && !base.is_empty() {
        return Err(bad_input(format!(
            "the runs share no case ({} baseline, {} current): different suites?",
            base.len(),
            cur.len()
        )));
    }
    let mut code = Code::Success;
    if report.broken() || report.missing() {
        code = code.combine(Code::Failed);
    }
    if report.slower() {
        code = code.combine(Code::Regression);
    }
    Ok(code)
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Run files (or history directories: their newest run) to combine.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Directory to write the merged run into.
    #[arg(long)]
    pub out: PathBuf,
}

/// Combines runs (shards of one suite, or runs from several machines) into one new run. Rows keep
/// their values; the merged run gets a new id, and the machines of all parts are listed.
pub fn merge_command(args: &MergeArgs) -> anyhow::Result<Code> {
    let mut rows = Vec::new();
    let mut machines: Vec<String> = Vec::new();
    let mut first: Option<RunInfo> = None;
    for p in &args.runs {
        let (info, r) = resolve_run(p)?;
        if !machines.contains(&info.machine) {
            machines.push(info.machine.clone());
        }
        first.get_or_insert(info);
        rows.extend(r);
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = rows.iter().find(|r| !seen.insert(r.case_id.clone())) {
        return Err(bad_input(format!("case {} appears in more than one of the merged runs", dup.case_id)));
    }
    let mut info = crate::environment::run_info();
    if let Some(f) = first {
        info.git_revision = f.git_revision;
        info.adgauge_version = f.adgauge_version;
    }
    info.machine = machines.join(" + ");
    let path = store::append_run(&args.out, &info, &rows)?;
    crate::sinks::Console::new(0, true).line(&format!(
        "merged {} rows from {} runs into {}",
        rows.len(),
        args.runs.len(),
        path.display()
    ));
    Ok(Code::Success)
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// History directory (or a single run file).
    #[arg(long)]
    pub history: PathBuf,
    /// Directory to write index.html into.
    #[arg(long)]
    pub out: PathBuf,
}

/// Writes the self-contained HTML report of a history.
pub fn report_command(args: &ReportArgs) -> anyhow::Result<Code> {
    let runs = if args.history.is_dir() {
        store::read_history(&args.history).map_err(|e| bad_input(e.to_string()))?
    } else {
        vec![read_run(&args.history).map_err(|e| bad_input(e.to_string()))?]
    };
    if runs.is_empty() {
        return Err(bad_input(format!("{}: no runs to report on", args.history.display())));
    }
    let path = args.out.join("index.html");
    store::write_atomic(&path, &adgauge_reports::html::render(&runs))?;
    crate::sinks::Console::new(0, true).line(&format!("wrote {} ({} runs)", path.display(), runs.len()));
    Ok(Code::Success)
}
