//! Suites: which cases to run, described in YAML (`adgauge run --suite FILE`); the default suite
//! is embedded in the binary (`suites/default.yaml`), so `cargo run --release` needs no file.
//!
//! ```yaml
//! name: quick
//! seed: 20261122
//! timing: {samples: 5, min_sample_ms: 5, time_limit_s: 0.4, case_time_limit_s: 120}
//! tolerances: {fd-vjp: {f32: 2e-3}}     # overrides of the built-in table
//! cases:
//!   - workload: hist                    # the tag: one entry kind per workload family
//!     ops: [add, mul, min, max]
//!     rules: [auto, special, general-sort, general-chunked]
//!     n: [1000000]
//!     k: [10, 1000]
//!     dist: [uniform]                   # default [uniform]
//!     out_of_range: 0.05                # default 0.05
//!     dtypes: [f32]                     # default [f32]
//!     backends: [cpu]                   # default [cpu]
//!     modes: [primal, vjp, jvp]         # which modes to time; default all three
//!   - workload: kmeans                  # n points, k centres, d dimensions
//!     n: [10000]
//!     k: [10]
//!     d: [8]
//!   - workload: gmm                     # ADBench's generator: d dimensions, k components
//!     d: [2]
//!     k: [5]
//!     n: [1000]
//!   - workload: lstm                    # l layers, c characters, b bits (default [14])
//!     l: [2]
//!     c: [1024]
//! ```
//!
//! The classic entries take the same `dtypes`, `backends`, `modes` and `validate` keys.
//!
//! Unknown keys and bad values are errors that name the line and column.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use adgauge_backends::{DType, HistOp, HistRule};
use adgauge_datasets::hist::IndexDist;
use adgauge_workloads::HistWorkload;

use crate::classic::{ClassicKind, ClassicSpec};
use crate::timing::Budget;
use crate::validation::CheckKind;

/// The default suite, embedded.
pub const DEFAULT_SUITE: &str = include_str!("../../suites/default.yaml");

/// A value read from its text form with `FromStr`, so that YAML errors point at the bad value.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Parsed<T>(T);

impl<'de, T: FromStr<Err = String>> Deserialize<'de> for Parsed<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        T::from_str(&s).map(Parsed).map_err(serde::de::Error::custom)
    }
}

/// A timed mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Primal,
    Vjp,
    Jvp,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "primal" => Ok(Mode::Primal),
            "vjp" => Ok(Mode::Vjp),
            "jvp" => Ok(Mode::Jvp),
            _ => Err(format!("unknown mode '{s}' (expected primal, vjp or jvp)")),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct TimingFile {
    samples: Option<usize>,
    min_sample_ms: Option<f64>,
    time_limit_s: Option<f64>,
    case_time_limit_s: Option<f64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ToleranceFile {
    f32: Option<f64>,
    f64: Option<f64>,
}

fn default_dists() -> Vec<Parsed<IndexDist>> {
    vec![Parsed(IndexDist::Uniform)]
}
fn default_oob() -> f64 {
    0.05
}
fn default_dtypes() -> Vec<Parsed<DType>> {
    vec![Parsed(DType::F32)]
}
fn default_backends() -> Vec<String> {
    vec!["cpu".into()]
}
fn default_modes() -> Vec<Parsed<Mode>> {
    vec![Parsed(Mode::Primal), Parsed(Mode::Vjp), Parsed(Mode::Jvp)]
}
fn default_rules() -> Vec<Parsed<HistRule>> {
    HistRule::ALL.iter().map(|&r| Parsed(r)).collect()
}
fn yes() -> bool {
    true
}

#[derive(Deserialize, Debug)]
#[serde(tag = "workload", rename_all = "kebab-case", deny_unknown_fields)]
enum GroupFile {
    Hist {
        ops: Vec<Parsed<HistOp>>,
        #[serde(default = "default_rules")]
        rules: Vec<Parsed<HistRule>>,
        n: Vec<usize>,
        k: Vec<usize>,
        #[serde(default = "default_dists")]
        dist: Vec<Parsed<IndexDist>>,
        #[serde(default = "default_oob")]
        out_of_range: f64,
        #[serde(default = "default_dtypes")]
        dtypes: Vec<Parsed<DType>>,
        #[serde(default = "default_backends")]
        backends: Vec<String>,
        #[serde(default = "default_modes")]
        modes: Vec<Parsed<Mode>>,
        #[serde(default = "yes")]
        validate: bool,
    },
    Kmeans {
        n: Vec<usize>,
        k: Vec<usize>,
        d: Vec<usize>,
        #[serde(default = "default_dtypes")]
        dtypes: Vec<Parsed<DType>>,
        #[serde(default = "default_backends")]
        backends: Vec<String>,
        #[serde(default = "default_modes")]
        modes: Vec<Parsed<Mode>>,
        #[serde(default = "yes")]
        validate: bool,
    },
    Gmm {
        d: Vec<usize>,
        k: Vec<usize>,
        n: Vec<usize>,
        #[serde(default = "default_dtypes")]
        dtypes: Vec<Parsed<DType>>,
        #[serde(default = "default_backends")]
        backends: Vec<String>,
        #[serde(default = "default_modes")]
        modes: Vec<Parsed<Mode>>,
        #[serde(default = "yes")]
        validate: bool,
    },
    /// ADBench's D-LSTM: l layers, c characters, b bits per character (ADBench's files: 14).
    Lstm {
        l: Vec<usize>,
        c: Vec<usize>,
        #[serde(default = "default_lstm_bits")]
        b: Vec<usize>,
        #[serde(default = "default_dtypes")]
        dtypes: Vec<Parsed<DType>>,
        #[serde(default = "default_backends")]
        backends: Vec<String>,
        #[serde(default = "default_modes")]
        modes: Vec<Parsed<Mode>>,
        #[serde(default = "yes")]
        validate: bool,
    },
    /// Bundle adjustment: explicit (n, m, p) triples (sizes do not combine as a product; the
    /// ADBench files' sizes are listed, and the problems generated as those files are).
    Ba {
        sizes: Vec<[usize; 3]>,
        #[serde(default = "default_dtypes")]
        dtypes: Vec<Parsed<DType>>,
        #[serde(default = "default_backends")]
        backends: Vec<String>,
        #[serde(default = "default_modes")]
        modes: Vec<Parsed<Mode>>,
        #[serde(default = "yes")]
        validate: bool,
    },
}

fn default_lstm_bits() -> Vec<usize> {
    vec![14]
}

/// A case of any workload family.
#[derive(Clone, Debug, PartialEq)]
pub enum Case {
    Hist(CaseSpec),
    Classic(ClassicSpec),
}

impl Case {
    pub fn id(&self) -> String {
        match self {
            Case::Hist(c) => c.id(),
            Case::Classic(c) => c.id(),
        }
    }

    /// A row with the case's identity and nothing measured.
    pub fn empty_row(&self, threads: usize) -> adgauge_reports::ResultRow {
        match self {
            Case::Hist(c) => crate::runner::empty_row(threads, c),
            Case::Classic(c) => c.empty_row(threads),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    name: String,
    #[serde(default)]
    description: Option<String>,
    seed: Option<u64>,
    timing: Option<TimingFile>,
    #[serde(default)]
    tolerances: BTreeMap<String, ToleranceFile>,
    cases: Vec<GroupFile>,
}

/// One case of a suite.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseSpec {
    pub workload: HistWorkload,
    pub n: usize,
    pub k: usize,
    pub dist: IndexDist,
    pub out_of_range: f64,
    pub dtype: DType,
    pub rule: HistRule,
    pub seed: u64,
    pub backend: String,
    pub modes: Vec<Mode>,
    pub validate: bool,
}

impl CaseSpec {
    pub fn params(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("n".into(), self.n.to_string());
        p.insert("k".into(), self.k.to_string());
        p.insert("dist".into(), self.dist.name().into());
        p.insert("oob".into(), self.out_of_range.to_string());
        p
    }

    /// The stable case id.
    pub fn id(&self) -> String {
        adgauge_reports::case_id(
            &self.workload.name(),
            &self.params(),
            &self.backend,
            self.dtype.name(),
            self.rule.name(),
        )
    }

    pub fn times(&self, m: Mode) -> bool {
        self.modes.contains(&m)
    }
}

/// A parsed suite: its cases and the settings that apply to all of them.
#[derive(Clone, Debug)]
pub struct Suite {
    pub name: String,
    pub description: Option<String>,
    pub seed: u64,
    pub budget: Budget,
    pub case_limit: Duration,
    /// Tolerance overrides: (check, dtype) -> tolerance.
    pub tolerances: BTreeMap<(CheckKind, DType), f64>,
    pub cases: Vec<Case>,
}

/// The seed suites use unless they set one.
pub const DEFAULT_SEED: u64 = 20_261_122;

/// Parses a suite; `source` names the file in errors (which carry line:column).
pub fn parse_suite(text: &str, source: &str) -> Result<Suite, String> {
    // YAML 1.2 booleans only: under YAML 1.1 the key `n` would read as `false`.
    let options = serde_saphyr::options! { strict_booleans: true, };
    let file: SuiteFile = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| locate_unknown_field(text, source, &e.to_string()))?;
    let seed = file.seed.unwrap_or(DEFAULT_SEED);
    let mut budget =
        Budget { min_sample: Duration::from_millis(5), samples: 5, time_limit: Duration::from_millis(400) };
    let mut case_limit = Duration::from_secs(120);
    let positive = |what: &str, x: f64| -> Result<f64, String> {
        if x.is_finite() && x > 0.0 {
            Ok(x)
        } else {
            Err(format!("{source}: timing.{what} must be a positive number, got {x}"))
        }
    };
    if let Some(t) = &file.timing {
        if let Some(s) = t.samples {
            if s == 0 {
                return Err(format!("{source}: timing.samples must be at least 1"));
            }
            budget.samples = s;
        }
        if let Some(ms) = t.min_sample_ms {
            budget.min_sample = Duration::from_secs_f64(positive("min_sample_ms", ms)? / 1e3);
        }
        if let Some(s) = t.time_limit_s {
            budget.time_limit = Duration::from_secs_f64(positive("time_limit_s", s)?);
        }
        if let Some(s) = t.case_time_limit_s {
            case_limit = Duration::from_secs_f64(positive("case_time_limit_s", s)?);
        }
    }
    let mut tolerances = BTreeMap::new();
    for (name, t) in &file.tolerances {
        let kind = CheckKind::from_name(name).ok_or_else(|| {
            format!("{source}: tolerances: unknown check '{name}' (known: {})", CheckKind::names().join(", "))
        })?;
        for (dt, v) in [(DType::F32, t.f32), (DType::F64, t.f64)] {
            if let Some(v) = v {
                tolerances.insert(
                    (kind, dt),
                    positive(&format!("tolerances.{name}.{dt}"), v).map_err(|e| e.replace("timing.", ""))?,
                );
            }
        }
    }
    let mut cases = Vec::new();
    for (g, group) in file.cases.iter().enumerate() {
        match group {
            // The classic workloads are expanded below.
            GroupFile::Kmeans { .. } | GroupFile::Gmm { .. } | GroupFile::Lstm { .. } => {}
            GroupFile::Ba { sizes, dtypes, backends, modes, validate } => {
                for &[n, m, p] in sizes {
                    if n == 0 || m == 0 || p == 0 {
                        return Err(format!("{source}: cases[{g}]: BA sizes must be positive (n={n}, m={m}, p={p})"));
                    }
                    for (dtype, backend) in dtypes.iter().flat_map(|d| backends.iter().map(move |b| (d.0, b))) {
                        cases.push(Case::Classic(ClassicSpec {
                            kind: ClassicKind::Ba { n, m, p },
                            dtype,
                            seed,
                            backend: backend.clone(),
                            modes: modes.iter().map(|m| m.0).collect(),
                            validate: *validate,
                        }));
                    }
                }
            }
            GroupFile::Hist { ops, rules, n, k, dist, out_of_range, dtypes, backends, modes, validate } => {
                if !(0.0..=1.0).contains(out_of_range) {
                    return Err(format!("{source}: cases[{g}].out_of_range must be in [0, 1], got {out_of_range}"));
                }
                for (what, list_empty) in
                    [("ops", ops.is_empty()), ("rules", rules.is_empty()), ("n", n.is_empty()), ("k", k.is_empty())]
                {
                    if list_empty {
                        return Err(format!("{source}: cases[{g}].{what} is empty"));
                    }
                }
                for &op in ops {
                    for &size in n {
                        for &bins in k {
                            for &d in dist {
                                for &dtype in dtypes {
                                    for backend in backends {
                                        for &rule in rules {
                                            cases.push(Case::Hist(CaseSpec {
                                                workload: HistWorkload { op: op.0 },
                                                n: size,
                                                k: bins,
                                                dist: d.0,
                                                out_of_range: *out_of_range,
                                                dtype: dtype.0,
                                                rule: rule.0,
                                                seed,
                                                backend: backend.clone(),
                                                modes: modes.iter().map(|m| m.0).collect(),
                                                validate: *validate,
                                            }));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for group in &file.cases {
        let (kmeans, d_list, k_list, n_list, dtypes, backends, modes, validate) = match group {
            GroupFile::Hist { .. } | GroupFile::Ba { .. } => continue,
            GroupFile::Lstm { l, c, b, dtypes, backends, modes, validate } => {
                for (&l, &c, &b) in l.iter().flat_map(|l| c.iter().flat_map(move |c| b.iter().map(move |b| (l, c, b))))
                {
                    if l == 0 || c < 2 || b == 0 {
                        return Err(format!("{source}: LSTM sizes need l >= 1, c >= 2, b >= 1 (l={l}, c={c}, b={b})"));
                    }
                    for &dtype in dtypes {
                        for backend in backends {
                            cases.push(Case::Classic(ClassicSpec {
                                kind: ClassicKind::Lstm { l, c, b },
                                dtype: dtype.0,
                                seed,
                                backend: backend.clone(),
                                modes: modes.iter().map(|m| m.0).collect(),
                                validate: *validate,
                            }));
                        }
                    }
                }
                continue;
            }
            GroupFile::Kmeans { n, k, d, dtypes, backends, modes, validate } => {
                (true, d, k, n, dtypes, backends, modes, validate)
            }
            GroupFile::Gmm { d, k, n, dtypes, backends, modes, validate } => {
                (false, d, k, n, dtypes, backends, modes, validate)
            }
        };
        for &n in n_list {
            for &k in k_list {
                for &d in d_list {
                    if n == 0 || k == 0 || d == 0 {
                        return Err(format!("{source}: sizes must be positive (n={n}, k={k}, d={d})"));
                    }
                    for &dtype in dtypes {
                        for backend in backends {
                            let kind =
                                if kmeans { ClassicKind::Kmeans { n, k, d } } else { ClassicKind::Gmm { d, k, n } };
                            cases.push(Case::Classic(ClassicSpec {
                                kind,
                                dtype: dtype.0,
                                seed,
                                backend: backend.clone(),
                                modes: modes.iter().map(|m| m.0).collect(),
                                validate: *validate,
                            }));
                        }
                    }
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = cases.iter().find(|c| !seen.insert(c.id())) {
        return Err(format!("{source}: case {} is listed twice", dup.id()));
    }
    Ok(Suite { name: file.name, description: file.description, seed, budget, case_limit, tolerances, cases })
}

/// Errors inside an internally tagged entry carry the entry's position, not the offending key's
/// or value's (serde buffers the entry before choosing the variant): point the error at the
/// unknown key (`unknown field `x``) or the bad value (`unknown rule 'x'`) itself.
fn locate_unknown_field(text: &str, source: &str, message: &str) -> String {
    let first_line = message.lines().next().unwrap_or(message);
    let between = |open: &str, close: char| first_line.split(open).nth(1).and_then(|r| r.split(close).next());
    let (needle, what) = match (between("unknown field `", '`'), between(" '", '\'')) {
        (Some(key), _) => (format!("{key}:"), format!("unknown field `{key}`")),
        (None, Some(value)) => (value.to_string(), first_line.split(": ").last().unwrap_or(first_line).to_string()),
        (None, None) => return format!("{source}: {message}"),
    };
    let from_line: usize = first_line
        .split("line ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    for (i, line) in text.lines().enumerate().skip(from_line.saturating_sub(1)) {
        let found = if needle.ends_with(':') {
            let trimmed = line.trim_start_matches([' ', '-']);
            trimmed.starts_with(&needle).then(|| line.len() - trimmed.len())
        } else {
            line.match_indices(&needle).map(|(at, _)| at).find(|&at| {
                let before = line[..at].chars().last().is_none_or(|c| !c.is_alphanumeric() && c != '-');
                let after = line[at + needle.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric() && c != '-');
                before && after
            })
        };
        if let Some(col) = found {
            return format!("{source}:{}:{}: {what}\n{message}", i + 1, col + 1);
        }
    }
    format!("{source}: {message}")
}

/// The embedded default suite.
pub fn default_suite() -> Suite {
    parse_suite(DEFAULT_SUITE, "suites/default.yaml (embedded)")
        .unwrap_or_else(|e| panic!("the embedded default suite is invalid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_and_shipped_suites_parse_with_unique_ids() {
        let d = default_suite();
        assert!(d.cases.len() >= 16);
        assert!(d.cases.iter().any(|c| c.id() == "hist-add[dist=uniform,k=10,n=1000000,oob=0.05]/cpu/f32/auto"));
        for (name, text) in [
            ("quick", include_str!("../../suites/quick.yaml")),
            ("nightly", include_str!("../../suites/nightly.yaml")),
            ("overhead", include_str!("../../suites/overhead.yaml")),
            ("classic", include_str!("../../suites/classic.yaml")),
        ] {
            let s = parse_suite(text, name).unwrap();
            assert!(!s.cases.is_empty(), "{name}");
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_name_line_and_column() {
        let unknown = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n    bogus: 1\n";
        let e = parse_suite(unknown, "s.yaml").unwrap_err();
        assert!(e.contains("bogus") && e.contains("7"), "{e}");
        let bad_rule =
            "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [magic]\n    n: [10]\n    k: [2]\n";
        let e = parse_suite(bad_rule, "s.yaml").unwrap_err();
        assert!(e.starts_with("s.yaml:5:13: unknown rule 'magic'"), "{e}");
        let bad_workload = "name: x\ncases:\n  - workload: nope\n";
        assert!(parse_suite(bad_workload, "s.yaml").unwrap_err().contains("nope"));
        let bad_n = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [-3]\n    k: [2]\n";
        assert!(parse_suite(bad_n, "s.yaml").is_err());
        let oob = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n    out_of_range: 2\n";
        assert!(parse_suite(oob, "s.yaml").unwrap_err().contains("out_of_range"));
    }

    #[test]
    fn settings_and_tolerance_overrides_apply() {
        let text = "name: t\nseed: 5\ntiming: {samples: 3, time_limit_s: 1.5}\ntolerances: {fd-vjp: {f32: 0.002}}\ncases:\n  - workload: hist\n    ops: [add, max]\n    rules: [auto]\n    n: [100]\n    k: [3, 4]\n    dtypes: [f32, f64]\n    modes: [primal, vjp]\n";
        let s = parse_suite(text, "t").unwrap();
        assert_eq!(s.cases.len(), 2 * 2 * 2);
        assert_eq!(s.seed, 5);
        assert_eq!(s.budget.samples, 3);
        assert_eq!(s.budget.time_limit, Duration::from_millis(1500));
        assert_eq!(s.tolerances.get(&(CheckKind::FdVjp, DType::F32)), Some(&0.002));
        assert!(s.cases.iter().all(|c| match c {
            Case::Hist(c) => c.times(Mode::Vjp) && !c.times(Mode::Jvp) && c.seed == 5,
            Case::Classic(_) => false,
        }));
        let classic = "name: c\ncases:\n  - workload: kmeans\n    n: [100]\n    k: [3]\n    d: [2, 4]\n  - workload: gmm\n    d: [2]\n    k: [5]\n    n: [50]\n  - workload: lstm\n    l: [1, 2]\n    c: [8]\n    backends: [opencl]\n";
        let s = parse_suite(classic, "c").unwrap();
        let ids: Vec<String> = s.cases.iter().map(Case::id).collect();
        assert_eq!(
            ids,
            [
                "kmeans[d=2,k=3,n=100]/cpu/f32/-",
                "kmeans[d=4,k=3,n=100]/cpu/f32/-",
                "gmm[d=2,k=5,n=50]/cpu/f32/-",
                "lstm[b=14,c=8,l=1]/opencl/f32/-",
                "lstm[b=14,c=8,l=2]/opencl/f32/-"
            ]
        );
        let short = "name: c\ncases:\n  - workload: lstm\n    l: [1]\n    c: [1]\n";
        assert!(parse_suite(short, "c").unwrap_err().contains("c >= 2"));
        let ba = "name: b\ncases:\n  - workload: ba\n    sizes: [[2, 3, 4], [5, 6, 7]]\n    dtypes: [f64]\n";
        let ids: Vec<String> = parse_suite(ba, "b").unwrap().cases.iter().map(Case::id).collect();
        assert_eq!(ids, ["ba[m=3,n=2,p=4]/cpu/f64/-", "ba[m=6,n=5,p=7]/cpu/f64/-"]);
        let bad = "name: b\ncases:\n  - workload: ba\n    sizes: [[2, 0, 4]]\n";
        assert!(parse_suite(bad, "b").unwrap_err().contains("positive"));
        let short = "name: b\ncases:\n  - workload: ba\n    sizes: [[2, 4]]\n";
        assert!(parse_suite(short, "b").is_err());
    }
}
