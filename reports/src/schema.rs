//! The result row: one per case and measurement, with a stable case id and a schema version so
//! that histories and gates survive releases. Bump [`SCHEMA_VERSION`] on any incompatible change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the file layout (`store.rs`). 2 added `compile_s`; 3 is one file row per case and
/// mode, with typed parameter and check columns, the suite, the tool's version and the timing
/// samples; 4 added `rule_used` (the rule `auto` took); 5 added `rustc` and `target_features`, and
/// made `cpu_model` and `cores` the row's own (a merged run's rows keep their shard's machine);
/// 6 added the run's roofline (`roofline_*`) and each histogram primal's `achieved_gb_s` and
/// `roofline_fraction`; 7 added the run's `interrupted` (why a run ended before its last case)
/// and `selection` (the part of the suite a filtered or sharded run ran). Files of versions 1 to
/// 6 are still read (as complete runs of their whole suite).
pub const SCHEMA_VERSION: u32 = 7;

/// How a case ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ran, and every check passed.
    Ok,
    /// Ran, and a derivative check failed.
    Failed,
    /// Could not run (an error or a panic); the message says why.
    Error,
    /// Not run (e.g. the backend is unavailable); the message says why.
    Skipped,
    /// Ran past its time limit.
    Timeout,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Error => "error",
            Status::Skipped => "skipped",
            Status::Timeout => "timeout",
        }
    }
}

/// The end of the id of a run that lacks rows it should have: a merge that recovered the rows
/// a killed run had flushed (its `.partial.jsonl`) before it ended.
pub const PARTIAL_RUN_SUFFIX: &str = "-partial";

/// What identifies a run and the machine it ran on (repeated on every row of the run's file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Sortable and unique: `<UTC timestamp>-<process id>-<random hex>`, with
    /// [`PARTIAL_RUN_SUFFIX`] for a partial run (older files: `<UTC timestamp>-<hex>`).
    pub run_id: String,
    /// UTC, RFC 3339.
    pub timestamp: String,
    pub git_revision: String,
    pub adgauge_version: String,
    /// Host name and OS.
    pub machine: String,
    pub cpu_model: String,
    pub cores: usize,
    /// CPU frequency governor (Linux), or "unknown".
    pub governor: String,
    /// The suite's name ("" in files of schema 1 and 2, which did not record it).
    #[serde(default)]
    pub suite: String,
    /// The CPU roofline measured before the cases, in runs with a histogram case on one of
    /// adgauge's CPU devices (None otherwise, and in files before schema 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roofline: Option<crate::Roofline>,
    /// Why the run ended before its last case, e.g. `interrupted by SIGTERM after 3 of 10
    /// case(s)` (None: it ran every case it selected; files before schema 7). Such a run is
    /// partial ([`RunInfo::is_partial`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// The part of its suite the run selected, e.g. `filter hist-add` or `shard 2/4` (None: the
    /// whole suite; files before schema 7). A baseline for a run of the whole suite is never one
    /// of a part of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<String>,
}

/// The machine and build a row was measured on: timings compare only between rows of the same
/// host (the gate says so where they differ). Values a file did not record are empty (0 cores):
/// no evidence either way.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Host {
    pub cpu_model: String,
    pub cores: usize,
    /// `rustc -V` of the build that measured the row ("" before schema 5).
    #[serde(default)]
    pub rustc: String,
    /// The target features the build was compiled with, comma-separated as cargo lists them
    /// ("" before schema 5).
    #[serde(default)]
    pub target_features: String,
}

impl Host {
    /// What differs between two hosts, on the values both recorded: `(what, self, other)`.
    pub fn differences(&self, other: &Host) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        let known = |a: &str, b: &str| !a.is_empty() && !b.is_empty() && a != b;
        if known(&self.cpu_model, &other.cpu_model) {
            out.push(("CPU model", self.cpu_model.clone(), other.cpu_model.clone()));
        }
        if self.cores > 0 && other.cores > 0 && self.cores != other.cores {
            out.push(("cores", self.cores.to_string(), other.cores.to_string()));
        }
        if known(&self.rustc, &other.rustc) {
            out.push(("compiler", self.rustc.clone(), other.rustc.clone()));
        }
        if known(&self.target_features, &other.target_features) {
            out.push(("target features", self.target_features.clone(), other.target_features.clone()));
        }
        out
    }

    /// `CPU (N cores, rustc ...)`, for reports.
    pub fn describe(&self) -> String {
        let mut s = format!("{} ({} cores", self.cpu_model, self.cores);
        if !self.rustc.is_empty() {
            s.push_str(&format!(", {}", self.rustc));
        }
        s.push(')');
        s
    }
}

impl RunInfo {
    /// Whether the run lacks rows it should have: it was interrupted (a signal ended it before
    /// its last case), or its id ends in [`PARTIAL_RUN_SUFFIX`] (a merge recovered some of its
    /// rows from a run that was killed).
    pub fn is_partial(&self) -> bool {
        self.run_id.ends_with(PARTIAL_RUN_SUFFIX) || self.interrupted.is_some()
    }

    /// Why the run is partial, in words (None: it is not).
    pub fn partial_reason(&self) -> Option<String> {
        match &self.interrupted {
            Some(why) => Some(why.clone()),
            None if self.run_id.ends_with(PARTIAL_RUN_SUFFIX) => {
                Some("merged from the rows a killed run had written".to_string())
            }
            None => None,
        }
    }
}

/// Timing of one mode: seconds per evaluation over the kept samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    #[serde(with = "crate::real::number")]
    pub min_s: f64,
    #[serde(with = "crate::real::number")]
    pub median_s: f64,
    #[serde(with = "crate::real::number")]
    pub max_s: f64,
    /// Evaluations per sample (batched until a sample is long enough to measure).
    pub batch: usize,
    pub samples: usize,
    /// Coefficient of variation of the samples (standard deviation / mean): the case's noise.
    #[serde(default, with = "crate::real::number")]
    pub cv: f64,
    /// Every kept sample (seconds per evaluation, in the order measured): the gate's rank test
    /// needs the samples, not just their summary. Empty in files of schema 1 and 2.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "crate::real::list")]
    pub sample_s: Vec<f64>,
}

/// One validation check of a case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// e.g. `dot-product`, `fd-vjp`, `oracle-vjp`.
    pub name: String,
    /// The worst metric value found (NaN or infinite where the derivative was).
    #[serde(with = "crate::real::number")]
    pub worst: f64,
    #[serde(with = "crate::real::number")]
    pub tolerance: f64,
    pub passed: bool,
}

/// One result row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub schema_version: u32,
    /// Stable identity of the case across runs: see [`case_id`].
    pub case_id: String,
    pub workload: String,
    /// Workload parameters (n, k, distribution, ...), as strings.
    pub params: BTreeMap<String, String>,
    pub backend: String,
    pub dtype: String,
    pub rule: String,
    /// The rule the case ran, where the tool says: what `auto` resolved to on the device at
    /// the case's sizes (adgauge's own engine, histogram cases). None in files before schema 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_used: Option<String>,
    pub threads: usize,
    pub seed: u64,
    pub primal: Option<Timing>,
    pub vjp: Option<Timing>,
    pub jvp: Option<Timing>,
    /// Peak footprint of one evaluation of each mode: the resident inputs plus the high-water
    /// mark of what the evaluation allocates (host and device). Files written before
    /// 2026-11-24 counted only what the evaluation added.
    pub primal_peak_bytes: Option<u64>,
    pub vjp_peak_bytes: Option<u64>,
    pub jvp_peak_bytes: Option<u64>,
    pub checks: Vec<Check>,
    pub status: Status,
    pub message: Option<String>,
    /// Seconds the device spent compiling kernels while the case ran (first use of a program;
    /// PoCL and NVRTC take about a second per program). Timings exclude it: warm-up runs first.
    /// None where nothing is compiled (the CPU) and in version-1 files.
    #[serde(default, with = "crate::real::optional")]
    pub compile_s: Option<f64>,
    /// The version the tool reported (e.g. `adgauge 0.1.0`, `jax 0.10.2`): a changed version is
    /// an environment change for the gate. None in files of schema 1 and 2.
    #[serde(default)]
    pub tool_version: Option<String>,
    /// The machine and build that measured the row (None: take the run's CPU model and cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
}

impl ResultRow {
    /// A row for a case with nothing measured yet (status ok until something says otherwise);
    /// the case id is derived from the identity fields by [`case_id`].
    pub fn unmeasured(
        workload: &str,
        params: BTreeMap<String, String>,
        backend: &str,
        dtype: &str,
        rule: &str,
        threads: usize,
        seed: u64,
    ) -> ResultRow {
        ResultRow {
            schema_version: SCHEMA_VERSION,
            case_id: case_id(workload, &params, backend, dtype, rule),
            workload: workload.into(),
            params,
            backend: backend.into(),
            dtype: dtype.into(),
            rule: rule.into(),
            rule_used: None,
            threads,
            seed,
            primal: None,
            vjp: None,
            jvp: None,
            primal_peak_bytes: None,
            vjp_peak_bytes: None,
            jvp_peak_bytes: None,
            checks: Vec::new(),
            status: Status::Ok,
            message: None,
            compile_s: None,
            tool_version: None,
            host: None,
        }
    }

    /// The rule `auto` took, where the row named `auto` and the tool said.
    pub fn auto_took(&self) -> Option<&str> {
        self.rule_used.as_deref().filter(|_| self.rule == "auto")
    }

    /// vjp median / primal median, when both were measured.
    pub fn vjp_overhead(&self) -> Option<f64> {
        Some(self.vjp.as_ref()?.median_s / self.primal.as_ref()?.median_s)
    }
    /// jvp median / primal median, when both were measured.
    pub fn jvp_overhead(&self) -> Option<f64> {
        Some(self.jvp.as_ref()?.median_s / self.primal.as_ref()?.median_s)
    }
    /// vjp peak bytes / primal peak bytes.
    pub fn vjp_memory_ratio(&self) -> Option<f64> {
        Some(self.vjp_peak_bytes? as f64 / self.primal_peak_bytes?.max(1) as f64)
    }
    /// jvp peak bytes / primal peak bytes.
    pub fn jvp_memory_ratio(&self) -> Option<f64> {
        Some(self.jvp_peak_bytes? as f64 / self.primal_peak_bytes?.max(1) as f64)
    }
}

/// The stable id of a case: workload, sorted parameters, backend, dtype and rule.
pub fn case_id(workload: &str, params: &BTreeMap<String, String>, backend: &str, dtype: &str, rule: &str) -> String {
    let p: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{workload}[{}]/{backend}/{dtype}/{rule}", p.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_ids_do_not_depend_on_parameter_insertion_order() {
        let mut a = BTreeMap::new();
        a.insert("n".to_string(), "1000".to_string());
        a.insert("k".to_string(), "10".to_string());
        let mut b = BTreeMap::new();
        b.insert("k".to_string(), "10".to_string());
        b.insert("n".to_string(), "1000".to_string());
        assert_eq!(case_id("hist-add", &a, "cpu", "f32", "auto"), case_id("hist-add", &b, "cpu", "f32", "auto"));
        assert_eq!(case_id("hist-add", &a, "cpu", "f32", "auto"), "hist-add[k=10,n=1000]/cpu/f32/auto");
    }

    #[test]
    fn rows_round_trip_through_json_with_lowercase_status() {
        let row = ResultRow {
            schema_version: SCHEMA_VERSION,
            case_id: "x".into(),
            workload: "hist-add".into(),
            params: BTreeMap::new(),
            backend: "cpu".into(),
            dtype: "f64".into(),
            rule: "auto".into(),
            rule_used: None,
            threads: 2,
            seed: 1,
            primal: Some(Timing {
                min_s: 1.0,
                median_s: 2.0,
                max_s: 3.0,
                batch: 1,
                samples: 3,
                cv: 0.1,
                sample_s: vec![],
            }),
            vjp: Some(Timing {
                min_s: 4.0,
                median_s: 5.0,
                max_s: 6.0,
                batch: 1,
                samples: 3,
                cv: 0.2,
                sample_s: vec![4.0, 6.0, 5.0],
            }),
            jvp: None,
            primal_peak_bytes: Some(100),
            vjp_peak_bytes: Some(250),
            jvp_peak_bytes: None,
            checks: vec![],
            status: Status::Timeout,
            message: None,
            compile_s: Some(0.25),
            tool_version: Some("adgauge 0.1.0".into()),
            host: Some(Host {
                cpu_model: "CPU".into(),
                cores: 2,
                rustc: "rustc 1.91.0".into(),
                target_features: "sse2".into(),
            }),
        };
        let s = serde_json::to_string(&row).unwrap();
        assert!(s.contains("\"status\":\"timeout\""));
        let back: ResultRow = serde_json::from_str(&s).unwrap();
        assert_eq!(back, row);
        assert_eq!(back.vjp_overhead(), Some(2.5));
        assert_eq!(back.jvp_overhead(), None);
        assert_eq!(back.vjp_memory_ratio(), Some(2.5));
        assert_eq!(back.jvp_memory_ratio(), None);
    }
}
