//! Result files on disk: writing a run as it goes (`run --out/--history`), `adgauge gate`
//! (baseline selection; the rules are in `adgauge_reports::gate` and docs/gate.md) and
//! `adgauge merge`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use adgauge_reports::gate::{Baseline, GateConfig, gate_runs, junit};
use adgauge_reports::store::{self, read_run};
use adgauge_reports::verdict::SpeedConfig;
use adgauge_reports::{ResultRow, RunInfo};

use crate::exit::{Code, bad_input};

/// Writes a run's rows as they complete, so that a crash loses at most the row in progress:
/// rows go to a hidden `.<run_id>.partial.jsonl` (the run's information, then one JSON row per
/// line: the CSV header (schema 3 on) names every parameter and check of the run, which are not known
/// until it ends), flushed after each row; `finish` writes the complete run atomically as
/// `<run_id>.csv` and removes the partial file.
pub struct RunWriter {
    dirs: Vec<PathBuf>,
    partials: Vec<(PathBuf, File)>,
    run: RunInfo,
    rows: Vec<ResultRow>,
}

impl RunWriter {
    pub fn new(given: Vec<PathBuf>, run: RunInfo) -> anyhow::Result<RunWriter> {
        let mut partials = Vec::new();
        // One directory named twice (`--out D --history D`) gets the run once.
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut seen: Vec<PathBuf> = Vec::new();
        for d in given {
            fs::create_dir_all(&d).map_err(|e| bad_input(format!("{}: cannot create directory: {e}", d.display())))?;
            let real = fs::canonicalize(&d).unwrap_or_else(|_| d.clone());
            if !seen.contains(&real) {
                seen.push(real);
                dirs.push(d);
            }
        }
        for d in &dirs {
            let p = store::partial_path(d, &run.run_id);
            // A new file: two runs never share one (rows mixed, then removed by the first to
            // finish).
            let mut f = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&p)
                .map_err(|e| bad_input(format!("{}: cannot write: {e}", p.display())))?;
            writeln!(f, "{}", serde_json::to_string(&run)?)?;
            partials.push((p, f));
        }
        Ok(RunWriter { dirs, partials, run, rows: Vec::new() })
    }

    /// Marks the run as interrupted (`why`): its file says so, and it is never a baseline.
    pub fn mark_interrupted(&mut self, why: String) {
        self.run.interrupted = Some(why);
    }

    /// The rows written so far.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    pub fn push(&mut self, row: ResultRow) -> anyhow::Result<()> {
        let line = serde_json::to_string(&row)?;
        for (_, f) in &mut self.partials {
            writeln!(f, "{line}")?;
            f.flush()?;
        }
        self.rows.push(row);
        Ok(())
    }

    /// Writes the complete run into every directory, removing each directory's partial file
    /// once its run files are in place; returns the files written. Where they cannot be written
    /// (a full disk), neither is left and the partial file keeps the rows (`adgauge merge`
    /// recovers them).
    pub fn finish(self) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (d, (p, f)) in self.dirs.iter().zip(self.partials) {
            drop(f);
            let written = store::append_run(d, &self.run, &self.rows)
                .map_err(|e| anyhow::anyhow!("{e} (the run's rows are kept in {})", p.display()))?;
            let _ = fs::remove_file(&p);
            out.push(written);
        }
        Ok(out)
    }
}

/// The history `adgauge run` saves into when given no --out or --history: `$ADGAUGE_RESULTS`,
/// or `./adgauge-results`.
pub fn default_history() -> PathBuf {
    std::env::var_os("ADGAUGE_RESULTS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "adgauge-results".into())
}

/// The history a reading command uses: the one given, or [`default_history`] (an error
/// saying so when it does not exist).
pub fn history_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let dir = default_history();
    if !dir.is_dir() {
        return Err(bad_input(format!(
            "{}: no such history (the default: where `adgauge run` saves, from $ADGAUGE_RESULTS or ./adgauge-results); give --history DIR",
            dir.display()
        )));
    }
    Ok(dir)
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

/// The baseline `gate` and `report` take unless told: the same for both, so that the report
/// shows what the gate judged.
pub const DEFAULT_BASELINE: &str = "best-of:7";

#[derive(Args, Debug)]
pub struct GateArgs {
    /// The baseline: `previous` (the run of the history before the current one), `best-of:N`
    /// (per case and mode, the lowest median of the N runs before the current one), a run id of
    /// the history, a run file, or a directory (its newest run other than the current one).
    #[arg(long, default_value = DEFAULT_BASELINE)]
    pub baseline: String,
    /// The current run: a run file or a directory (its newest run); default: the newest run of
    /// --history.
    #[arg(long)]
    pub current: Option<PathBuf>,
    /// The history directory the selectors and run ids choose from (default: --current when it
    /// is a directory, else the history `adgauge run` saves into: `./adgauge-results` or
    /// $ADGAUGE_RESULTS).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Largest accepted ratio of current to baseline median time.
    #[arg(long, default_value_t = 1.15)]
    pub max_slowdown: f64,
    /// Timings whose baseline sample (median time per call x calls per sample) is shorter than
    /// this (seconds) are not judged on speed.
    #[arg(long, default_value_t = 1e-3)]
    pub min_seconds: f64,
    /// Significance level of the rank test on the samples.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Relative changes within this band are noise (a regression's interval must lie above
    /// 1 + this).
    #[arg(long, default_value_t = 0.01)]
    pub noise_threshold: f64,
    /// Confidence level of the bootstrap interval of each ratio.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Baseline cases missing or skipped now are reported, not failures.
    #[arg(long)]
    pub allow_missing: bool,
    /// Environment changes (CPU model, threads, dtypes, tool versions, ...) are reported, not
    /// failures; speed is then judged anyway.
    #[arg(long)]
    pub allow_env_change: bool,
    /// Print the findings as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML summary to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Also append a Markdown summary to this file (e.g. $GITHUB_STEP_SUMMARY).
    #[arg(long)]
    pub summary: Option<PathBuf>,
}

/// The runs of a history, oldest first, each with its file (exit 2 on a corrupt file or a run
/// stored twice).
fn history_runs(dir: &Path) -> anyhow::Result<Vec<(PathBuf, RunInfo, Vec<ResultRow>)>> {
    store::read_history_files(dir).map_err(|e| bad_input(e.to_string()))
}

/// The current run: --current (a file, or a directory's newest run) or the newest of --history.
fn current_run(args: &GateArgs) -> anyhow::Result<(RunInfo, Vec<ResultRow>)> {
    match (&args.current, &args.history) {
        (Some(p), _) => resolve_run(p).map(|(info, rows)| (info, with_legacy_params(rows))),
        (None, h) => {
            let h = history_dir(h.as_deref())?;
            let runs = history_runs(&h)?;
            let (_, info, rows) = runs
                .into_iter()
                .next_back()
                .ok_or_else(|| bad_input(format!("{}: no runs in this history", h.display())))?;
            Ok((info, with_legacy_params(rows)))
        }
    }
}

/// Rows recorded before one of their workload's parameters existed lack its column. Each such
/// row gets the value the workload declares for them (`ParamSpec::legacy`: hist's indices were
/// i64 before they had a dtype), and the case id that goes with it, so that the gate pairs it
/// with the case that has that value now instead of finding no baseline for it. A row whose id
/// is not the one its fields give (written by other means) keeps its id and its parameters.
fn with_legacy_params(mut rows: Vec<ResultRow>) -> Vec<ResultRow> {
    let derived = |r: &ResultRow| adgauge_reports::case_id(&r.workload, &r.params, &r.backend, &r.dtype, &r.rule);
    for row in &mut rows {
        let Some(workload) = adgauge_workloads::find(&row.workload) else { continue };
        if row.case_id != derived(row) {
            continue;
        }
        let mut filled = false;
        for spec in workload.schema() {
            if let (Some(column), Some(value)) = (spec.column, spec.legacy)
                && !row.params.contains_key(column)
            {
                row.params.insert(column.to_string(), value.to_string());
                filled = true;
            }
        }
        if filled {
            row.case_id = derived(row);
        }
    }
    rows
}

/// What a run measured, for telling a merge already made: each case's host, status and timings
/// (samples included), by case id.
type Measured<'a> =
    (&'a str, Option<&'a adgauge_reports::Host>, &'static str, [Option<&'a adgauge_reports::Timing>; 3]);

fn measurements(rows: &[ResultRow]) -> Vec<Measured<'_>> {
    let mut m: Vec<Measured<'_>> = rows
        .iter()
        .map(|r| {
            (r.case_id.as_str(), r.host.as_ref(), r.status.name(), [r.primal.as_ref(), r.vjp.as_ref(), r.jvp.as_ref()])
        })
        .collect();
    m.sort_by(|a, b| a.0.cmp(b.0));
    m
}

/// Whether two runs hold the same measurements (one run stored twice, under two ids): the same
/// cases on the same hosts with the same statuses and identical timings, at least one timed.
fn same_measurements(a: &[ResultRow], b: &[ResultRow]) -> bool {
    let (ma, mb) = (measurements(a), measurements(b));
    ma == mb && ma.iter().any(|(_, _, _, t)| t.iter().any(Option::is_some))
}

/// The history runs a selector chooses from: before the current run, of its suite (a history
/// may hold runs of several suites; files of schema 1 and 2 name none and always qualify),
/// complete, of the whole suite or the same part of it as the current run, and not set aside.
///
/// A partial run (interrupted, or rows a merge recovered from a killed run) is never a baseline
/// by selector, since the cases it lacks would read as missing from the next run's point of view
/// and its times as the best of the window; nor is a filtered or sharded run the baseline of a
/// run of the whole suite (it would shrink the comparison to its cases); nor a run set aside
/// (`adgauge history --set-aside`). Each can still be named by its id or file.
fn earlier_runs(dir: &Path, current: &RunInfo) -> anyhow::Result<Vec<(RunInfo, Vec<ResultRow>)>> {
    let aside = store::set_aside_runs(dir).map_err(|e| bad_input(e.to_string()))?;
    let mut out = Vec::new();
    for (_, info, rows) in history_runs(dir)? {
        if info.run_id >= current.run_id
            || info.is_partial()
            || aside.contains_key(&info.run_id)
            || !(info.suite.is_empty() || current.suite.is_empty() || info.suite == current.suite)
            || !(info.selection.is_none() || info.selection == current.selection)
        {
            continue;
        }
        out.push((info, with_legacy_params(rows)));
    }
    Ok(out)
}

/// Resolves `--baseline` (of `gate` and `report`) against a history directory, if any.
fn select_baseline(sel: &str, history: Option<PathBuf>, current: &RunInfo) -> anyhow::Result<Baseline> {
    let need_history = |what: &str| {
        history.clone().ok_or_else(|| {
            bad_input(format!(
                "--baseline {what} needs a history: --history DIR, --current DIR, or the default {} (absent)",
                default_history().display()
            ))
        })
    };
    let none_before = |dir: &Path| {
        bad_input(format!(
            "{}: no run of suite '{}' before the current run {} to compare with (partial runs, runs set aside and runs of another part of the suite are not chosen; name one by its id to compare with it)",
            dir.display(),
            current.suite,
            current.run_id
        ))
    };
    if sel == "previous" {
        let dir = need_history(sel)?;
        let (info, rows) = earlier_runs(&dir, current)?.pop().ok_or_else(|| none_before(&dir))?;
        return Ok(Baseline::run(format!("previous run {}", info.run_id), info, rows));
    }
    if let Some(n) = sel.strip_prefix("best-of:") {
        let n: usize = n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| bad_input(format!("--baseline {sel}: N must be a whole number >= 1")))?;
        let dir = need_history(sel)?;
        let mut runs = earlier_runs(&dir, current)?;
        let skip = runs.len().saturating_sub(n);
        runs.drain(..skip);
        return Baseline::best_of(runs).ok_or_else(|| none_before(&dir));
    }
    let path = Path::new(sel);
    if path.is_dir() {
        // A directory's newest run other than the current one (the same directory for both
        // sides gives the previous run).
        let (info, rows) = earlier_runs(path, current)?.pop().ok_or_else(|| none_before(path))?;
        return Ok(Baseline::run(format!("newest run {} of {}", info.run_id, path.display()), info, rows));
    }
    if path.is_file() {
        let (info, rows) = read_run(path).map_err(|e| bad_input(e.to_string()))?;
        let rows = with_legacy_params(rows);
        return Ok(Baseline::run(format!("run {} ({})", info.run_id, path.display()), info, rows));
    }
    let Some(dir) = history else {
        return Err(bad_input(format!(
            "--baseline {sel}: no such file or directory (a run id needs --history DIR; selectors: previous, best-of:N)"
        )));
    };
    let mut matches: Vec<(RunInfo, Vec<ResultRow>)> = history_runs(&dir)?
        .into_iter()
        .filter(|(_, i, _)| i.run_id.starts_with(sel))
        .map(|(_, i, r)| (i, with_legacy_params(r)))
        .collect();
    match matches.len() {
        1 => {
            let (info, rows) = matches.pop().expect("one match");
            Ok(Baseline::run(format!("run {}", info.run_id), info, rows))
        }
        0 => Err(bad_input(format!("--baseline {sel}: not a file, a selector or a run id of {}", dir.display()))),
        n => Err(bad_input(format!(
            "--baseline {sel}: {n} runs of {} start with it; give more of the id",
            dir.display()
        ))),
    }
}

pub fn gate_command(args: &GateArgs) -> anyhow::Result<Code> {
    if args.max_slowdown.is_nan() || args.max_slowdown < 1.0 {
        return Err(bad_input(format!("--max-slowdown must be >= 1, got {}", args.max_slowdown)));
    }
    if !(args.min_seconds >= 0.0 && args.min_seconds.is_finite()) {
        return Err(bad_input(format!("--min-seconds must be a time >= 0, got {}", args.min_seconds)));
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(bad_input(format!("--alpha must be in (0, 1), got {}", args.alpha)));
    }
    if !(args.noise_threshold >= 0.0 && args.noise_threshold < 1.0) {
        return Err(bad_input(format!("--noise-threshold must be in [0, 1), got {}", args.noise_threshold)));
    }
    if !(args.confidence > 0.5 && args.confidence < 1.0) {
        return Err(bad_input(format!("--confidence must be in (0.5, 1), got {}", args.confidence)));
    }
    let (info, cur) = current_run(args)?;
    let history = args
        .history
        .clone()
        .or_else(|| args.current.clone().filter(|p| p.is_dir()))
        .or_else(|| Some(default_history()).filter(|d| d.is_dir()));
    let baseline = select_baseline(&args.baseline, history, &info)?;
    if baseline.runs.iter().any(|r| r.run_id == info.run_id) {
        return Err(bad_input(format!(
            "the baseline and the current run are the same run ({}): a run compared with itself proves nothing",
            info.run_id
        )));
    }
    let cfg = GateConfig {
        speed: SpeedConfig {
            max_slowdown: args.max_slowdown,
            min_seconds: args.min_seconds,
            alpha: args.alpha,
            noise_threshold: args.noise_threshold,
            confidence: args.confidence,
            ..SpeedConfig::default()
        },
        allow_missing: args.allow_missing,
        allow_env_change: args.allow_env_change,
    };
    let report = gate_runs(&baseline, &info, &cur, &cfg);
    let mut code = Code::Success;
    if report.failed() {
        code = code.combine(Code::Failed);
    }
    if report.slower() {
        code = code.combine(Code::Regression);
    }
    // Nothing compared proves nothing: say so (exit 2) rather than pass.
    let nothing = (report.compared == 0).then(|| {
        if report.shared == 0 {
            format!(
                "the runs share no case ({} baseline, {} current): different suites or filters?",
                baseline.rows.len(),
                cur.len()
            )
        } else {
            format!("none of the {} cases the runs share ran in the baseline (all skipped there)", report.shared)
        }
    });
    if nothing.is_some() {
        code = Code::BadInput;
    }
    let console = crate::console::Console::new(0, true);
    if args.json {
        console.line(&report.json(&baseline, &info, code as u8).to_string());
    } else {
        for line in report.text(&baseline, &info, code as u8) {
            console.line(&line);
        }
    }
    if let Some(path) = &args.junit {
        let ids: Vec<String> = cur.iter().map(|r| r.case_id.clone()).collect();
        store::write_atomic(path, junit(&report, &ids))?;
    }
    if let Some(path) = &args.summary {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| bad_input(format!("{}: cannot write: {e}", path.display())))?;
        let mut text = report.markdown(&baseline, &info, code as u8);
        if let Some(why) = &nothing {
            text.push_str(&format!("**Nothing compared:** {why}\n"));
        }
        f.write_all(text.as_bytes())?;
    }
    if let Some(why) = nothing {
        return Err(bad_input(why));
    }
    Ok(code)
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Run files, partial files of killed runs (`.<run id>.partial.jsonl`), or directories
    /// (their newest run, else their newest partial file) to combine.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Directory to write the merged run into.
    #[arg(long)]
    pub out: PathBuf,
}

/// The file a merge argument names: itself, or in a directory its newest run file, else (a
/// killed run left no run file) its newest partial file.
fn run_file(path: &Path) -> anyhow::Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let mut runs = store::run_files(path).map_err(|e| bad_input(e.to_string()))?;
    if runs.is_empty() {
        runs = store::partial_files(path).map_err(|e| bad_input(e.to_string()))?;
    }
    runs.pop().ok_or_else(|| {
        bad_input(format!(
            "{}: no run files (*.csv) or partial runs (.*.partial.jsonl) in this directory",
            path.display()
        ))
    })
}

/// A run file's schema: "schema N" from its first row's schema_version, "schema 1 or 2"
/// (older files, told apart by their columns) otherwise.
fn schema_of(file: &Path, rows: &[ResultRow]) -> String {
    if store::is_partial_file(file) {
        return rows.first().map_or("schema ?".into(), |r| format!("schema {}", r.schema_version));
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    if header.starts_with("schema_version,") {
        let v = lines.next().and_then(|l| l.split(',').next()).unwrap_or("?");
        format!("schema {v}")
    } else {
        format!("schema 1 or 2 ({} columns)", header.split(',').count())
    }
}

/// The part of the suite the merge of runs of parts `selections` ran: the shards 1/N to N/N of
/// one selection make that selection (the whole suite where they were not filtered); parts that
/// all ran the whole suite make the whole suite; anything else is listed (`filter a + filter b`).
fn merged_selection(selections: &[Option<String>]) -> Option<String> {
    if selections.iter().all(Option::is_none) {
        return None;
    }
    // "shard i/N" alone or after the filter: (the rest, i, N).
    let shard = |s: &str| -> Option<(Option<String>, usize, usize)> {
        let (rest, sh) = match s.rsplit_once(", shard ") {
            Some((rest, sh)) => (Some(rest.to_string()), sh),
            None => (None, s.strip_prefix("shard ")?),
        };
        let (i, n) = sh.split_once('/')?;
        Some((rest, i.parse().ok()?, n.parse().ok()?))
    };
    let shards: Option<Vec<_>> = selections.iter().map(|s| s.as_deref().and_then(shard)).collect();
    if let Some(shards) = shards {
        let (rest, n) = (&shards[0].0, shards[0].2);
        let mut seen: Vec<usize> = shards.iter().filter(|s| s.0 == *rest && s.2 == n).map(|s| s.1).collect();
        seen.sort();
        if seen.len() == shards.len() && seen == (1..=n).collect::<Vec<_>>() {
            return rest.clone();
        }
    }
    let mut parts: Vec<&str> = selections.iter().map(|s| s.as_deref().unwrap_or("whole suite")).collect();
    parts.sort();
    parts.dedup();
    Some(parts.join(" + "))
}

/// The id of a merged run: the time of its earliest part's id (a night merged late sorts with
/// its night, not with the merge), then `merged` and a hash of the measurements. Merging the
/// same parts again gives the same id.
fn merged_run_id(parts: &[RunInfo], rows: &[ResultRow]) -> String {
    let earliest = parts.iter().map(|p| p.run_id.as_str()).min().unwrap_or("");
    let time = earliest.split('-').next().unwrap_or(earliest);
    let text = format!("{:?}", measurements(rows));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{time}-merged-{h:016x}")
}

/// Combines runs (shards of one suite, or runs from several machines) into one run. Rows keep
/// their values and the run keeps its parts' time (the earliest part's), git revision and
/// versions: parts of different git revisions are refused. The merged run's id follows from its
/// parts (the earliest part's time and a hash of the rows), and a merge whose measurements a
/// run of `--out` already holds (the same shards merged again, or `merge H --out H`) writes
/// nothing. The machines of all parts are listed. The rows a killed run flushed (its partial file) are merged too, and the merged
/// run is then partial: its id ends in `-partial`.
pub fn merge_command(args: &MergeArgs) -> anyhow::Result<Code> {
    let mut rows = Vec::new();
    let mut machines: Vec<String> = Vec::new();
    let mut cpus: Vec<String> = Vec::new();
    let mut suites: Vec<String> = Vec::new();
    let mut first: Option<RunInfo> = None;
    let mut rooflines: Vec<adgauge_reports::Roofline> = Vec::new();
    // Partial parts: (file, rows recovered).
    let mut partial: Vec<(String, usize)> = Vec::new();
    // What every part must share: (file, schema, adgauge version, seeds, git revision).
    let mut parts: Vec<(String, String, String, Vec<u64>, String)> = Vec::new();
    let mut infos: Vec<RunInfo> = Vec::new();
    for p in &args.runs {
        let file = run_file(p)?;
        let (info, r) = if store::is_partial_file(&file) {
            let (info, r) = store::read_partial(&file).map_err(|e| bad_input(e.to_string()))?;
            partial.push((file.display().to_string(), r.len()));
            (info, r)
        } else {
            resolve_run(&file)?
        };
        if r.is_empty() {
            // A killed run that finished no case adds nothing, not even a schema to agree on.
            continue;
        }
        let mut seeds: Vec<u64> = r.iter().map(|row| row.seed).collect();
        seeds.sort();
        seeds.dedup();
        let part = (
            file.display().to_string(),
            schema_of(&file, &r),
            info.adgauge_version.clone(),
            seeds,
            info.git_revision.clone(),
        );
        if let Some(prev) = parts.first() {
            let differ = |what: &str, a: &str, b: &str| {
                bad_input(format!(
                    "{} and {} are of different {what} ({a} and {b}): only runs that agree on them merge",
                    prev.0, part.0
                ))
            };
            if prev.1 != part.1 {
                return Err(differ("schemas", &prev.1, &part.1));
            }
            if prev.2 != part.2 {
                return Err(differ("adgauge versions", &prev.2, &part.2));
            }
            if !prev.3.is_empty() && !part.3.is_empty() && prev.3 != part.3 {
                return Err(differ("seeds", &format!("{:?}", prev.3), &format!("{:?}", part.3)));
            }
            // Another revision's timings are another program's: one run holds one revision
            // (a "-dirty" tree is its own revision).
            if prev.4 != part.4 {
                return Err(differ("git revisions", &prev.4, &part.4));
            }
            if let Some(f) = &first
                && !f.suite.is_empty()
                && !info.suite.is_empty()
                && f.suite != info.suite
            {
                return Err(differ("suites", &f.suite, &info.suite));
            }
        }
        parts.push(part);
        if !machines.contains(&info.machine) {
            machines.push(info.machine.clone());
        }
        if !cpus.contains(&info.cpu_model) {
            cpus.push(info.cpu_model.clone());
        }
        if !info.suite.is_empty() && !suites.contains(&info.suite) {
            suites.push(info.suite.clone());
        }
        // Each row keeps the host it was measured on (rows of older files: their shard's).
        let r = r.into_iter().map(|mut row| {
            row.host.get_or_insert_with(|| adgauge_reports::Host {
                cpu_model: info.cpu_model.clone(),
                cores: info.cores,
                ..Default::default()
            });
            row
        });
        rows.extend(r);
        rooflines.extend(info.roofline.clone());
        infos.push(info.clone());
        first.get_or_insert(info);
    }
    if rows.is_empty() {
        return Err(bad_input("nothing to merge: the partial files hold no finished case"));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = rows.iter().find(|r| !seen.insert(r.case_id.clone())) {
        return Err(bad_input(format!("case {} appears in more than one of the merged runs", dup.case_id)));
    }
    // The parts' run, not the merging machine's: the earliest part's time, the parts' revision,
    // versions, suite and governor.
    let Some(mut info) = first else {
        return Err(bad_input("nothing to merge: the partial files hold no finished case"));
    };
    info.timestamp = infos.iter().map(|i| i.timestamp.clone()).min().unwrap_or(info.timestamp);
    info.selection = merged_selection(&infos.iter().map(|i| i.selection.clone()).collect::<Vec<_>>());
    let interrupted: Vec<String> =
        infos.iter().filter_map(|i| i.interrupted.as_ref().map(|w| format!("{}: {w}", i.run_id))).collect();
    info.interrupted = (!interrupted.is_empty()).then(|| interrupted.join("; "));
    if suites.len() > 1 {
        return Err(bad_input(format!(
            "the runs are of different suites ({}): one run holds one suite",
            suites.join(", ")
        )));
    }
    // Shards of one machine keep a roofline (the parts' rates merged), so that their histogram
    // rows keep a fraction of it; runs of several machines have none that applies to all rows.
    info.roofline = if machines.len() == 1 { adgauge_reports::roofline::merged(&rooflines) } else { None };
    info.machine = machines.join(" + ");
    // The shards' CPU models, not the merging machine's: the gate compares them, so they are
    // sorted (shards finish in any order).
    if !cpus.is_empty() {
        cpus.sort();
        info.cpu_model = cpus.join(" + ");
    }
    info.run_id = merged_run_id(&infos, &rows);
    if !partial.is_empty() {
        info.run_id.push_str(adgauge_reports::PARTIAL_RUN_SUFFIX);
    }
    let console = crate::console::Console::new(0, true);
    // The same measurements merged again (a re-run CI job, `merge H --out H`): nothing to add.
    if args.out.is_dir() {
        for (path, held, held_rows) in history_runs(&args.out)? {
            if held.run_id == info.run_id || same_measurements(&held_rows, &rows) {
                console.line(&format!(
                    "already merged: run {} ({}) holds these {} rows; nothing written",
                    held.run_id,
                    path.display(),
                    rows.len()
                ));
                return Ok(Code::Success);
            }
        }
    }
    let path = store::append_run(&args.out, &info, &rows)?;
    console.line(&format!("merged {} rows from {} runs into {}", rows.len(), args.runs.len(), path.display()));
    for (file, n) in &partial {
        console.line(&format!(
            "partial: {n} rows recovered from {file}, a run that did not finish; the merged run {} is partial",
            info.run_id
        ));
    }
    Ok(Code::Success)
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// History directory, or a single run file (default: the history `adgauge run` saves into,
    /// `./adgauge-results` or $ADGAUGE_RESULTS).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// What the newest run is compared with: the selectors of `gate --baseline` (`previous`,
    /// `best-of:N`, a run id, a run file), resolved the same way, so that the report shows the
    /// gate's verdict.
    #[arg(long, default_value = DEFAULT_BASELINE)]
    pub baseline: String,
    /// Directory to write index.html into.
    #[arg(long)]
    pub out: PathBuf,
}

/// Writes the self-contained HTML report of a history.
pub fn report_command(args: &ReportArgs) -> anyhow::Result<Code> {
    let history = history_dir(args.history.as_deref())?;
    let runs = if history.is_dir() {
        store::read_history(&history).map_err(|e| bad_input(e.to_string()))?
    } else {
        vec![read_run(&history).map_err(|e| bad_input(e.to_string()))?]
    };
    if runs.is_empty() {
        return Err(bad_input(format!("{}: no runs to report on", history.display())));
    }
    // The gate's baseline for the newest run; none for a run without an earlier one of its suite.
    let (newest, _) = runs.last().expect("runs is not empty");
    let history = history.is_dir().then(|| history.clone());
    // The newest paired comparison (`adgauge compare --history`), shown in its own section.
    let paired = match history.as_deref().and_then(adgauge_reports::paired::newest_paired) {
        Some(p) => Some(adgauge_reports::paired::read_paired(&p).map_err(bad_input)?),
        None => None,
    };
    let first_of_suite = !runs[..runs.len() - 1]
        .iter()
        .any(|(i, _)| i.suite.is_empty() || newest.suite.is_empty() || i.suite == newest.suite);
    let baseline = if first_of_suite && !Path::new(&args.baseline).is_file() {
        None
    } else {
        Some(select_baseline(&args.baseline, history, newest)?)
    };
    let path = args.out.join("index.html");
    store::write_atomic(&path, adgauge_reports::html::render_with_paired(&runs, baseline.as_ref(), paired.as_ref()))?;
    crate::console::Console::new(0, true).line(&format!("wrote {} ({} runs)", path.display(), runs.len()));
    Ok(Code::Success)
}

/// Output formats of `adgauge history`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HistoryFormat {
    Table,
    Csv,
    Json,
    Parquet,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// The history directory (default: the one `adgauge run` saves into, `./adgauge-results`
    /// or $ADGAUGE_RESULTS).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Only case ids containing this text.
    #[arg(long)]
    pub case: Option<String>,
    /// Only runs at or after this date (YYYY-MM-DD, or an RFC 3339 UTC time).
    #[arg(long)]
    pub since: Option<String>,
    /// Only this mode (primal, vjp, jvp).
    #[arg(long)]
    pub mode: Option<String>,
    /// Only runs of this suite (needed when the history holds several).
    #[arg(long)]
    pub suite: Option<String>,
    /// Per case and mode, the best (lowest) median of the last N runs.
    #[arg(long, conflicts_with = "regressions")]
    pub best_of: Option<usize>,
    /// Per case and mode, the first median since --since against the newest: those slower than
    /// --max-ratio.
    #[arg(long)]
    pub regressions: bool,
    /// The ratio above which --regressions lists a case.
    #[arg(long, default_value_t = 1.15)]
    pub max_ratio: f64,
    /// Output format (times in seconds, except the table's milliseconds).
    #[arg(long, value_enum, default_value_t = HistoryFormat::Table)]
    pub format: HistoryFormat,
    /// Write the answer to this file instead of the terminal (needed for parquet).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Set this run (its id, or a unique prefix) aside: it is never chosen as a baseline again
    /// until restored. Recorded with --why in the history's set-aside.jsonl; no file is removed.
    #[arg(long, value_name = "RUN_ID", requires = "why", conflicts_with = "restore")]
    pub set_aside: Option<String>,
    /// Bring a run set aside back (recorded in set-aside.jsonl).
    #[arg(long, value_name = "RUN_ID")]
    pub restore: Option<String>,
    /// Why the run is set aside or restored (required with --set-aside).
    #[arg(long, value_name = "TEXT")]
    pub why: Option<String>,
}

/// `adgauge history --set-aside RUN --why TEXT` and `--restore RUN`: appends a record to the
/// history's set-aside.jsonl, naming the run's full id; refuses an unknown or ambiguous id, a run
/// already set aside, and restoring one that is not.
fn set_aside_command(
    dir: &Path,
    runs: &[(PathBuf, RunInfo, Vec<ResultRow>)],
    args: &HistoryArgs,
) -> anyhow::Result<Code> {
    let (action, given) = match (&args.set_aside, &args.restore) {
        (Some(id), _) => ("set-aside", id),
        (None, Some(id)) => ("restore", id),
        (None, None) => unreachable!("called with --set-aside or --restore"),
    };
    let matches: Vec<&RunInfo> =
        runs.iter().map(|(_, i, _)| i).filter(|i| i.run_id.starts_with(given.as_str())).collect();
    let run_id = match matches.as_slice() {
        [one] => one.run_id.clone(),
        [] => return Err(bad_input(format!("--{action} {given}: no run of {} has this id", dir.display()))),
        more => {
            return Err(bad_input(format!(
                "--{action} {given}: {} runs of {} start with it; give more of the id",
                more.len(),
                dir.display()
            )));
        }
    };
    let why = args.why.clone().unwrap_or_default();
    if action == "set-aside" && why.trim().is_empty() {
        return Err(bad_input("--why: say why the run is set aside (it is recorded with it)"));
    }
    let aside = store::set_aside_runs(dir).map_err(|e| bad_input(e.to_string()))?;
    match (action, aside.get(&run_id)) {
        ("set-aside", Some(e)) => {
            return Err(bad_input(format!("run {run_id} is already set aside (since {}: {})", e.time, e.why)));
        }
        ("restore", None) => return Err(bad_input(format!("--restore {given}: run {run_id} is not set aside"))),
        _ => {}
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let time = crate::environment::utc(now.as_secs()).0;
    let entry = store::SetAside { time, action: action.to_string(), run_id: run_id.clone(), why };
    store::record_set_aside(dir, &entry).map_err(|e| anyhow::anyhow!("{e}"))?;
    let done = if action == "set-aside" { "set aside: never a baseline until restored" } else { "restored" };
    crate::console::Console::new(0, true).line(&format!(
        "run {run_id} {done} (recorded in {}; its files stay)",
        dir.join(store::SET_ASIDE_FILE).display()
    ));
    Ok(Code::Success)
}

/// `adgauge history`: queries over a history directory (reports' `query` module).
pub fn history_command(args: &HistoryArgs) -> anyhow::Result<Code> {
    use adgauge_reports::query::{self, Selection};
    let since = args.since.as_deref().map(query::parse_since).transpose().map_err(bad_input)?;
    if let Some(m) = &args.mode
        && !store::MODES.contains(&m.as_str())
    {
        return Err(bad_input(format!("--mode {m}: not a mode (modes: {})", store::MODES.join(", "))));
    }
    if args.best_of == Some(0) {
        return Err(bad_input("--best-of must be at least 1"));
    }
    if args.format == HistoryFormat::Parquet && args.out.is_none() {
        return Err(bad_input("--format parquet writes a binary file: give --out FILE"));
    }
    if !(args.max_ratio > 0.0 && args.max_ratio.is_finite()) {
        return Err(bad_input(format!("--max-ratio must be a positive number, got {}", args.max_ratio)));
    }
    let dir = history_dir(args.history.as_deref())?;
    let files = history_runs(&dir)?;
    if files.is_empty() {
        return Err(bad_input(format!("{}: no runs in this history", dir.display())));
    }
    if args.set_aside.is_some() || args.restore.is_some() {
        return set_aside_command(&dir, &files, args);
    }
    if let Some(want) = &args.suite
        && !files.iter().any(|(_, info, _)| info.suite == *want)
    {
        let mut suites: Vec<&str> =
            files.iter().map(|(_, info, _)| info.suite.as_str()).filter(|s| !s.is_empty()).collect();
        suites.sort();
        suites.dedup();
        let suites = if suites.is_empty() { "none named".to_string() } else { suites.join(", ") };
        return Err(bad_input(format!("no run of suite {want} in the history {} (suites: {suites})", dir.display())));
    }
    // One history, one suite: trends across suites would compare unlike cases. Files of schema
    // 1 and 2 name no suite and go with any.
    let mut runs = Vec::new();
    let mut suite: Option<(String, PathBuf)> = args.suite.clone().map(|s| (s, PathBuf::new()));
    for (path, info, rows) in files {
        if info.suite.is_empty() {
            runs.push((info, rows));
            continue;
        }
        match &suite {
            None => suite = Some((info.suite.clone(), path.clone())),
            Some((s, _)) if *s == info.suite => {}
            Some((s, first)) if args.suite.is_none() => {
                return Err(bad_input(format!(
                    "{}:2: run {} is of suite '{}', but {} is of suite '{s}': give --suite NAME to choose",
                    path.display(),
                    info.run_id,
                    info.suite,
                    first.display()
                )));
            }
            Some(_) => continue,
        }
        runs.push((info, rows));
    }
    let sel = Selection { case: args.case.clone(), since, mode: args.mode.clone() };
    let table = if let Some(n) = args.best_of {
        query::best_of(&runs, n, &sel)
    } else if args.regressions {
        query::regressions(&runs, args.max_ratio, &sel)
    } else {
        query::trend(&runs, &sel)
    };
    let text = match args.format {
        HistoryFormat::Table => table.to_text(),
        HistoryFormat::Csv => table.to_csv(),
        HistoryFormat::Json => table.to_json_lines(),
        HistoryFormat::Parquet => String::new(),
    };
    if let Some(out) = &args.out {
        if args.format == HistoryFormat::Parquet {
            let bytes = adgauge_reports::parquet::table_parquet(&table)
                .map_err(|e| anyhow::anyhow!("{}: writing Parquet: {e}", out.display()))?;
            store::write_atomic(out, bytes)?;
        } else {
            store::write_atomic(out, &text)?;
        }
        return Ok(Code::Success);
    }
    let console = crate::console::Console::new(0, true);
    for line in text.lines() {
        console.line(line);
    }
    Ok(Code::Success)
}
