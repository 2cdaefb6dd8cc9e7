//! Suites: which cases to run, described in YAML (`adgauge run --suite FILE`); the default suite
//! is embedded in the binary (`suites/default.yaml`), so `cargo run --release` needs no file.
//!
//! ```yaml
//! name: quick
//! seed: 20261122
//! timing: {samples: 5, min_sample_ms: 5, time_limit_s: 0.4, case_time_limit_s: 120}  # warm_up_ms: 5 x min_sample_ms
//! tolerances: {fd-vjp: {f32: 2e-3}}     # overrides of the built-in table
//! cases:
//!   - workload: hist                    # a registered workload family
//!     ops: [add, mul, min, max]         # ...then the keys of its schema
//!     n: [1000000]
//!     k: [10, 1000]
//!     rules: [auto, general-sort]       # workloads with rules: default all
//!     dtypes: [f32]                     # default [f32]
//!     tools: [cpu]                      # default [cpu]; `backends` is an alias
//!     modes: [primal, vjp, jvp]         # which modes to time; default all three
//!     validate: true                    # default true
//! ```
//!
//! Nothing here knows a workload: an entry's `workload:` picks a [`Workload`] from the
//! registry, whose schema ([`ParamSpec`]s) says which keys the entry may set, their defaults and
//! bounds. An entry expands into the product of its lists in schema order (the first key is
//! the outermost loop), then dtypes, tools and rules.
//!
//! Unknown keys, workloads, tools and bad values are errors that name the file, line and column
//! and list the valid names.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value as Json;
use serde_saphyr::Spanned;

use adgauge_backends::DType;
use adgauge_workloads::{Mode, ParamKind, ParamSpec, Params, Value, Workload};

use crate::external::{ExternalSpec, parse_tool_cmd};
use crate::pipeline::Case;
use crate::timing::Budget;
use crate::tools::Tools;
use crate::validation::CheckKind;

/// The default suite, embedded.
pub const DEFAULT_SUITE: &str = include_str!("../../suites/default.yaml");

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct TimingFile {
    samples: Option<u64>,
    min_sample_ms: Option<f64>,
    warm_up_ms: Option<f64>,
    time_limit_s: Option<f64>,
    case_time_limit_s: Option<f64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ToleranceFile {
    f32: Option<f64>,
    f64: Option<f64>,
}

/// One entry of `cases:` as written: keys with their values and where they are.
type EntryFile = BTreeMap<String, Spanned<Json>>;

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
    cases: Vec<EntryFile>,
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
    /// The external tools the suite's cases may name (defined in it or on the command line).
    pub external: Vec<ExternalSpec>,
    /// Cases whose size the memory limit refuses: case id -> the error (the suite's
    /// `file:line:column`, the formula and the bytes). Kept apart rather than failing the parse
    /// so that a `--filter` or `--shard` that leaves them out still runs (a nightly suite's
    /// 10^8-element shard on one machine, its small ones on a 7 GB runner);
    /// [`Suite::check_memory`] refuses the selected ones before anything runs.
    pub refused: BTreeMap<String, String>,
}

impl Suite {
    /// The first selected case whose size the memory limit refuses, as its error.
    pub fn check_memory(&self, selected: &[Case]) -> Result<(), String> {
        match selected.iter().find_map(|c| self.refused.get(&c.id())) {
            Some(message) => Err(message.clone()),
            None => Ok(()),
        }
    }
}

/// The seed suites use unless they set one.
pub const DEFAULT_SEED: u64 = 20_261_122;

/// Keys every entry may set, whatever its workload (`backends` reads the same as `tools`).
const COMMON_KEYS: [&str; 7] = ["workload", "dtypes", "tools", "backends", "modes", "validate", "rules"];

/// The most cases a suite may expand to: more is a typo in a list (a run of 10^5 cases would take
/// days), and the product of long lists would otherwise be built in memory before anything runs.
const MAX_CASES: usize = 100_000;

/// The longest time a suite may set (a day): longer values are typos, and `Duration` cannot
/// hold every f64.
const MAX_SECONDS: f64 = 86_400.0;

/// Parses a suite; `source` names the file in errors (which carry line:column).
pub fn parse_suite(text: &str, source: &str) -> Result<Suite, String> {
    parse_suite_with(text, source, &[])
}

/// [`parse_suite`] with external tools already defined (`--tool-cmd`) that entries may name.
pub fn parse_suite_with(text: &str, source: &str, external: &[ExternalSpec]) -> Result<Suite, String> {
    // YAML 1.2 booleans only: under YAML 1.1 the key `n` would read as `false`.
    let options = serde_saphyr::options! { strict_booleans: true, };
    let file: SuiteFile = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| locate_unknown_field(text, source, &e.to_string()))?;
    let seed = file.seed.unwrap_or(DEFAULT_SEED);
    let min_sample = Duration::from_millis(5);
    let mut budget = Budget {
        min_sample,
        samples: 5,
        time_limit: Duration::from_millis(400),
        warm_up: Budget::default_warm_up(min_sample),
    };
    let mut case_limit = Duration::from_secs(120);
    let seconds = |what: &str, x: f64| -> Result<Duration, String> {
        if x.is_finite() && x > 0.0 && x <= MAX_SECONDS {
            Ok(Duration::from_secs_f64(x))
        } else {
            Err(format!("{source}: timing.{what} must be a positive number of seconds up to {MAX_SECONDS}, got {x}"))
        }
    };
    if let Some(t) = &file.timing {
        if let Some(s) = t.samples {
            if s == 0 || s > 1_000_000 {
                return Err(format!("{source}: timing.samples must be in [1, 1000000], got {s}"));
            }
            budget.samples = s as usize;
        }
        if let Some(ms) = t.min_sample_ms {
            budget.min_sample =
                seconds("min_sample_ms", ms / 1e3).map_err(|e| e.replace("seconds", "seconds (/ 1000)"))?;
            budget.warm_up = Budget::default_warm_up(budget.min_sample);
        }
        if let Some(ms) = t.warm_up_ms {
            // 0 is allowed: the single warm-up call only.
            budget.warm_up = if ms == 0.0 {
                Duration::ZERO
            } else {
                seconds("warm_up_ms", ms / 1e3).map_err(|e| {
                    e.replace("a positive number of seconds", "0 or a positive number of seconds (/ 1000)")
                })?
            };
        }
        if let Some(s) = t.time_limit_s {
            budget.time_limit = seconds("time_limit_s", s)?;
        }
        if let Some(s) = t.case_time_limit_s {
            case_limit = seconds("case_time_limit_s", s)?;
        }
    }
    let mut tolerances = BTreeMap::new();
    for (name, t) in &file.tolerances {
        let kind = CheckKind::from_name(name).ok_or_else(|| {
            format!("{source}: tolerances: unknown check '{name}' (known: {})", CheckKind::names().join(", "))
        })?;
        for (dt, v) in [(DType::F32, t.f32), (DType::F64, t.f64)] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("{source}: tolerances.{name}.{dt} must be a positive number, got {v}"));
                }
                tolerances.insert((kind, dt), v);
            }
        }
    }
    if file.cases.is_empty() {
        return Err(format!("{source}: cases: is empty (a suite lists at least one entry)"));
    }
    let mut cases = Vec::new();
    let mut refused = BTreeMap::new();
    let mut external = external.to_vec();
    for (g, entry) in file.cases.iter().enumerate() {
        let at = Entry { text, source, g, entry };
        cases.extend(at.expand(seed, &mut external, &mut refused)?);
        if cases.len() > MAX_CASES {
            return Err(format!("{source}: cases: the suite expands to more than {MAX_CASES} cases (at cases[{g}])"));
        }
    }
    if let Some(dup) = Case::first_duplicate(&cases) {
        return Err(format!("{source}: case {dup} is listed twice"));
    }
    Ok(Suite {
        name: file.name,
        description: file.description,
        seed,
        budget,
        case_limit,
        tolerances,
        cases,
        external,
        refused,
    })
}

/// One entry of `cases:` being read: knows where it is, for messages.
struct Entry<'a> {
    text: &'a str,
    source: &'a str,
    g: usize,
    entry: &'a EntryFile,
}

impl Entry<'_> {
    /// `file:line:column: cases[g].key: message`, pointing at `needle` when it is found on or
    /// after the value's line (a list element, or the key itself), else at the value.
    fn error(&self, key: &str, needle: Option<&str>, message: &str) -> String {
        let (line, column) = match self.entry.get(key) {
            Some(v) => {
                let (l, c) = (v.referenced.line() as usize, v.referenced.column() as usize);
                needle.and_then(|n| find_word(self.text, l, n)).unwrap_or((l, c))
            }
            None => match self.entry.get("workload") {
                Some(v) => (v.referenced.line() as usize, v.referenced.column() as usize),
                None => (0, 0),
            },
        };
        if line == 0 {
            format!("{}: cases[{}]: {key}: {message}", self.source, self.g)
        } else {
            format!("{}:{line}:{column}: cases[{}].{key}: {message}", self.source, self.g)
        }
    }

    fn get(&self, key: &str) -> Option<&Json> {
        self.entry.get(key).map(|v| &v.value)
    }

    /// A list value (a single scalar reads as a list of one).
    fn list(&self, key: &str, default: Option<Json>) -> Result<Vec<Json>, String> {
        let value = match (self.get(key), default) {
            (Some(v), _) => v.clone(),
            (None, Some(d)) => d,
            (None, None) => return Err(self.error(key, None, "missing (this workload needs it)")),
        };
        let items = match value {
            Json::Array(items) => items,
            other => vec![other],
        };
        if items.is_empty() {
            return Err(self.error(key, None, "is empty"));
        }
        Ok(items)
    }

    /// A list of names, each checked by `parse` (whose error names the bad one).
    fn names<T>(
        &self,
        key: &str,
        default: Option<Json>,
        what: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        self.list(key, default)?
            .iter()
            .map(|v| match v {
                Json::String(s) => parse(s).map_err(|e| self.error(key, Some(s), &e)),
                other => Err(self.error(key, None, &format!("expected {what} names, got {other}"))),
            })
            .collect()
    }

    fn whole(&self, key: &str, v: &Json, min: u64, max: u64) -> Result<u64, String> {
        let text = v.to_string();
        match v.as_u64() {
            Some(x) if (min..=max).contains(&x) => Ok(x),
            Some(x) => Err(self.error(key, Some(&text), &format!("{x} is outside [{min}, {max}]"))),
            None => Err(self.error(key, Some(&text), &format!("expected a whole number in [{min}, {max}], got {v}"))),
        }
    }

    /// The values of one schema key: each a set of (parameter, value) pairs.
    fn values(&self, spec: &ParamSpec) -> Result<Vec<Vec<(String, Value)>>, String> {
        let key = spec.key;
        let default = spec.default.map(|d| serde_json::from_str::<Json>(d).unwrap_or(Json::Null));
        let one = |v: Value| vec![(key.to_string(), v)];
        match &spec.kind {
            ParamKind::Ints { min, max } => {
                self.list(key, default)?.iter().map(|v| Ok(one(Value::Int(self.whole(key, v, *min, *max)?)))).collect()
            }
            ParamKind::Float { min, max } => {
                let v = match (self.get(key), default) {
                    (Some(v), _) => v.clone(),
                    (None, Some(d)) => d,
                    (None, None) => return Err(self.error(key, None, "missing (this workload needs it)")),
                };
                match v.as_f64() {
                    Some(x) if x >= *min && x <= *max => Ok(vec![one(Value::Float(x))]),
                    _ => Err(self.error(key, None, &format!("must be a number in [{min}, {max}], got {v}"))),
                }
            }
            ParamKind::Names { choices } => {
                let what = key.trim_end_matches('s');
                self.names(key, default, what, |s| {
                    if choices.iter().any(|c| c == s) {
                        Ok(one(Value::Name(s.to_string())))
                    } else {
                        Err(format!("unknown {what} '{s}' (known: {})", choices.join(", ")))
                    }
                })
            }
            ParamKind::Tuples { names, min, max } => self
                .list(key, default)?
                .iter()
                .map(|t| match t {
                    Json::Array(xs) if xs.len() == names.len() => names
                        .iter()
                        .zip(xs)
                        .map(|(name, x)| Ok((name.to_string(), Value::Int(self.whole(key, x, *min, *max)?))))
                        .collect(),
                    other => Err(self.error(
                        key,
                        None,
                        &format!("expected [{}] lists of whole numbers, got {other}", names.join(", ")),
                    )),
                })
                .collect(),
        }
    }

    /// The entry's cases: the product of its schema keys (in schema order, the first outermost),
    /// then dtypes, tools and rules.
    /// The entry's tools: names of built-in or already defined external tools, or external tools
    /// defined here as `{name: NAME, command: "COMMAND", timeout_s: SECONDS,
    /// max_response_bytes: BYTES}`.
    fn tools(&self, key: &str, external: &mut Vec<ExternalSpec>) -> Result<Vec<String>, String> {
        let builtin = Tools::builtin_names();
        let mut names = Vec::new();
        for item in self.list(key, Some(Json::from(["cpu"])))? {
            let name = match &item {
                Json::String(s) => {
                    if !builtin.contains(&s.as_str()) && !external.iter().any(|t| &t.name == s) {
                        let mut known: Vec<String> = builtin.iter().map(|b| b.to_string()).collect();
                        known.extend(external.iter().map(|t| t.name.clone()));
                        let message = format!("unknown tool '{s}' (known: {})", known.join(", "));
                        return Err(self.error(key, Some(s), &message));
                    }
                    s.clone()
                }
                Json::Object(map) => {
                    let spec = self.external_tool(key, map)?;
                    match external.iter().find(|t| t.name == spec.name) {
                        Some(t) if t != &spec => {
                            let message = format!("tool '{}' is defined twice with different commands", spec.name);
                            return Err(self.error(key, Some(&spec.name), &message));
                        }
                        Some(_) => {}
                        None => external.push(spec.clone()),
                    }
                    spec.name
                }
                other => {
                    return Err(self.error(
                        key,
                        None,
                        &format!("expected tool names or {{name, command}}, got {other}"),
                    ));
                }
            };
            names.push(name);
        }
        Ok(names)
    }

    fn external_tool(&self, key: &str, map: &serde_json::Map<String, Json>) -> Result<ExternalSpec, String> {
        const FIELDS: [&str; 4] = ["name", "command", "timeout_s", "max_response_bytes"];
        if let Some(extra) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(self.error(
                key,
                Some(extra),
                &format!("unknown field `{extra}` of a tool (valid: {})", FIELDS.join(", ")),
            ));
        }
        let text = |field: &str| match map.get(field) {
            Some(Json::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(self.error(key, None, &format!("a tool needs a non-empty string `{field}`"))),
        };
        let mut spec = parse_tool_cmd(&format!("{}={}", text("name")?, text("command")?))
            .map_err(|e| self.error(key, None, &e))?;
        if Tools::builtin_names().contains(&spec.name.as_str()) {
            return Err(self.error(key, Some(&spec.name), &format!("'{}' is a built-in tool's name", spec.name)));
        }
        if let Some(t) = map.get("timeout_s") {
            match t.as_f64() {
                Some(x) if x > 0.0 && x <= MAX_SECONDS => spec.timeout = Duration::from_secs_f64(x),
                _ => return Err(self.error(key, None, &format!("timeout_s must be in (0, {MAX_SECONDS}], got {t}"))),
            }
        }
        if let Some(b) = map.get("max_response_bytes") {
            match b.as_u64() {
                Some(x) if x >= 1024 => spec.max_response_bytes = x,
                _ => {
                    let message = format!("max_response_bytes must be a whole number of bytes >= 1024, got {b}");
                    return Err(self.error(key, None, &message));
                }
            }
        }
        Ok(spec)
    }

    /// The entry's cases; those whose size the memory limit refuses also go into `refused`
    /// (case id -> error) for [`Suite::check_memory`].
    fn expand(
        &self,
        seed: u64,
        external: &mut Vec<ExternalSpec>,
        refused: &mut BTreeMap<String, String>,
    ) -> Result<Vec<Case>, String> {
        let family = match self.get("workload") {
            Some(Json::String(s)) => s.as_str(),
            Some(other) => return Err(self.error("workload", None, &format!("expected a workload name, got {other}"))),
            None => return Err(self.error("workload", None, "missing (every entry names its workload)")),
        };
        let workload: &'static dyn Workload =
            adgauge_workloads::registry().iter().copied().find(|w| w.family() == family).ok_or_else(|| {
                let known = adgauge_workloads::families().join(", ");
                self.error("workload", Some(family), &format!("unknown workload '{family}' (known: {known})"))
            })?;
        let schema = workload.schema();
        let rules = workload.rules();
        for key in self.entry.keys() {
            let known = COMMON_KEYS.contains(&key.as_str()) && (key != "rules" || !rules.is_empty());
            if !known && !schema.iter().any(|s| s.key == key) {
                let mut valid: Vec<&str> = schema.iter().map(|s| s.key).collect();
                valid.extend(COMMON_KEYS.iter().filter(|&&k| k != "workload" && (k != "rules" || !rules.is_empty())));
                let message = format!("unknown field `{key}` for workload {family} (valid: {})", valid.join(", "));
                return Err(self.error(key, Some(&format!("{key}:")), &message));
            }
        }
        if self.entry.contains_key("tools") && self.entry.contains_key("backends") {
            return Err(self.error("backends", None, "give tools or its alias backends, not both"));
        }
        let mut combos = vec![Params::default()];
        for spec in &schema {
            let values = self.values(spec)?;
            if combos.len().saturating_mul(values.len()) > MAX_CASES {
                return Err(self.error(spec.key, None, &format!("the entry expands to more than {MAX_CASES} cases")));
            }
            combos = combos
                .iter()
                .flat_map(|p| {
                    values.iter().map(move |pairs| {
                        let mut p = p.clone();
                        p.0.extend(pairs.iter().cloned());
                        p
                    })
                })
                .collect();
        }
        let refusals: Vec<Option<String>> = combos
            .iter()
            .map(|params| {
                let need = workload.footprint(params)?;
                need.check().err().map(|message| self.error(need.key, None, &message))
            })
            .collect();
        let dtypes = self.names("dtypes", Some(Json::from(["f32"])), "dtype", |s| s.parse::<DType>())?;
        let tools_key = if self.entry.contains_key("backends") { "backends" } else { "tools" };
        let tools = self.tools(tools_key, external)?;
        let modes = self.names("modes", Some(Json::from(["primal", "vjp", "jvp"])), "mode", |s| match s.parse() {
            Ok(m) if Mode::TIMED.contains(&m) => Ok(m),
            _ => Err(format!("unknown mode '{s}' (expected primal, vjp or jvp)")),
        })?;
        let validate = match self.get("validate") {
            None => true,
            Some(Json::Bool(b)) => *b,
            Some(other) => return Err(self.error("validate", None, &format!("expected true or false, got {other}"))),
        };
        let rules: Vec<String> = if rules.is_empty() {
            vec!["-".to_string()]
        } else {
            let all = Json::from(rules.clone());
            self.names("rules", Some(all), "rule", |s| {
                if rules.iter().any(|r| r == s) {
                    Ok(s.to_string())
                } else {
                    Err(format!("unknown rule '{s}' (known: {})", rules.join(", ")))
                }
            })?
        };
        let count = [dtypes.len(), tools.len(), rules.len()].iter().fold(combos.len(), |n, m| n.saturating_mul(*m));
        if count > MAX_CASES {
            let message = format!("the entry expands to {count} cases, more than {MAX_CASES}");
            return Err(self.error("workload", None, &message));
        }
        let mut cases = Vec::new();
        for (params, refusal) in combos.iter().zip(&refusals) {
            for &dtype in &dtypes {
                for tool in &tools {
                    // An external tool computes the same under every rule name (GradBench's
                    // protocol has none): it is asked once, under the entry's first rule.
                    let rules_of_tool = if external.iter().any(|t| &t.name == tool) { &rules[..1] } else { &rules[..] };
                    for rule in rules_of_tool {
                        let case = Case {
                            workload,
                            name: workload.case_name(params),
                            params: params.clone(),
                            rule: rule.clone(),
                            dtype,
                            tool: tool.clone(),
                            modes: modes.clone(),
                            validate,
                            seed,
                        };
                        if let Some(message) = refusal {
                            refused.insert(case.id(), message.clone());
                        }
                        cases.push(case);
                    }
                }
            }
        }
        Ok(cases)
    }
}

/// The first whole-word occurrence of `needle` at or after 1-based `line`, as (line, column).
fn find_word(text: &str, line: usize, needle: &str) -> Option<(usize, usize)> {
    for (i, l) in text.lines().enumerate().skip(line.saturating_sub(1)) {
        let hit = l.match_indices(needle).map(|(at, _)| at).find(|&at| {
            let before = l[..at].chars().last().is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '_');
            let after =
                l[at + needle.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '_');
            before && after
        });
        if let Some(at) = hit {
            return Some((i + 1, at + 1));
        }
    }
    None
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

    fn ids(s: &Suite) -> Vec<String> {
        s.cases.iter().map(Case::id).collect()
    }

    #[test]
    fn the_embedded_and_shipped_suites_parse_with_unique_ids() {
        let d = default_suite();
        assert!(d.cases.len() >= 16);
        assert!(
            d.cases
                .iter()
                .any(|c| c.id() == "hist-add[dist=uniform,index_dtype=i32,k=10,n=1000000,oob=0.05]/cpu/f32/auto")
        );
        for (name, text) in [
            ("quick", include_str!("../../suites/quick.yaml")),
            ("nightly", include_str!("../../suites/nightly.yaml")),
            ("overhead", include_str!("../../suites/overhead.yaml")),
            ("classic", include_str!("../../suites/classic.yaml")),
            ("staged", include_str!("../../suites/staged.yaml")),
            ("tools", include_str!("../../suites/tools.yaml")),
            ("performance", include_str!("../../suites/performance.yaml")),
            ("tools-quick", include_str!("../../suites/tools-quick.yaml")),
            ("opencl-classic", include_str!("../../suites/opencl-classic.yaml")),
            ("gradbench", include_str!("../../suites/gradbench.yaml")),
            ("evals-vs-jax", include_str!("../../suites/evals-vs-jax.yaml")),
            ("evals-vs-jax-paired", include_str!("../../suites/evals-vs-jax-paired.yaml")),
        ] {
            let s = parse_suite(text, name).unwrap();
            assert!(!s.cases.is_empty(), "{name}");
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_name_line_and_column() {
        let unknown = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n    bogus: 1\n";
        let e = parse_suite(unknown, "s.yaml").unwrap_err();
        assert!(e.starts_with("s.yaml:7:5: cases[0].bogus: unknown field `bogus`"), "{e}");
        assert!(e.contains("valid: ops, n, k, dist, out_of_range"), "{e}");
        let bad_rule =
            "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [magic]\n    n: [10]\n    k: [2]\n";
        let e = parse_suite(bad_rule, "s.yaml").unwrap_err();
        assert!(e.starts_with("s.yaml:5:13: cases[0].rules: unknown rule 'magic' (known: auto,"), "{e}");
        let bad_workload = "name: x\ncases:\n  - workload: nope\n";
        let e = parse_suite(bad_workload, "s.yaml").unwrap_err();
        assert!(e.starts_with("s.yaml:3:15: cases[0].workload: unknown workload 'nope' (known: hist, kmeans"), "{e}");
        let bad_n = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [-3]\n    k: [2]\n";
        assert!(
            parse_suite(bad_n, "s.yaml").unwrap_err().starts_with("s.yaml:5:9: cases[0].n: expected a whole number")
        );
        let oob = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n    out_of_range: 2\n";
        assert!(parse_suite(oob, "s.yaml").unwrap_err().contains("cases[0].out_of_range: must be a number in [0, 1]"));
        let zero_k = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [0]\n";
        assert!(parse_suite(zero_k, "s.yaml").unwrap_err().contains("cases[0].k: 0 is outside [1,"));
        let missing = "name: x\ncases:\n  - workload: kmeans\n    n: [10]\n    k: [2]\n";
        assert!(parse_suite(missing, "s.yaml").unwrap_err().contains("cases[0].d: missing"));
        let bad_tool = "name: x\ncases:\n  - workload: llsq\n    n: [10]\n    m: [2]\n    tools: [cpu, gpu]\n";
        let bad_tool = bad_tool.replace("llsq", "kmeans").replace("m: [2]", "k: [2]\n    d: [1]");
        let e = parse_suite(&bad_tool, "s.yaml").unwrap_err();
        assert!(
            e.starts_with(
                "s.yaml:7:18: cases[0].tools: unknown tool 'gpu' (known: cpu, cpu-staged, cpu-traced, cpu-jit, cpu-jit-flush, opencl, cuda, candle,"
            ),
            "{e}"
        );
        let rules_elsewhere =
            "name: x\ncases:\n  - workload: kmeans\n    n: [1]\n    k: [1]\n    d: [1]\n    rules: [auto]\n";
        assert!(
            parse_suite(rules_elsewhere, "s.yaml").unwrap_err().contains("unknown field `rules` for workload kmeans")
        );
        let huge = "name: x\ntiming: {case_time_limit_s: 1e300}\ncases: []\n";
        assert!(parse_suite(huge, "s.yaml").unwrap_err().contains("timing.case_time_limit_s"));
    }

    #[test]
    fn suites_that_expand_beyond_the_case_limit_are_refused_before_building_them() {
        // 400 n x 300 k = 120000 cases in one entry: refused at the key that crosses the limit.
        let list = |m: usize| (1..=m).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
        let entry = |n: usize, k: usize, rest: &str| {
            format!(
                "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [{}]\n    k: [{}]\n{rest}",
                list(n),
                list(k)
            )
        };
        let e = parse_suite(&entry(400, 300, "    rules: [auto]\n"), "s.yaml").unwrap_err();
        assert!(e.starts_with("s.yaml:6:8: cases[0].k: the entry expands to more than 100000 cases"), "{e}");
        // 100 n x 50 k = 5000 parameter sets pass; with 2 dtypes, 3 tools and 4 rules they make
        // 120000 cases (refused before the cases are built).
        let e = parse_suite(&entry(100, 50, "    dtypes: [f32, f64]\n    tools: [cpu, opencl, cuda]\n"), "s.yaml")
            .unwrap_err();
        assert!(e.contains("cases[0].workload: the entry expands to 120000 cases, more than 100000"), "{e}");
    }

    #[test]
    fn settings_and_tolerance_overrides_apply() {
        let text = "name: t\nseed: 5\ntiming: {samples: 3, time_limit_s: 1.5}\ntolerances: {fd-vjp: {f32: 0.002}}\ncases:\n  - workload: hist\n    ops: [add, max]\n    rules: [auto]\n    n: [100]\n    k: [3, 4]\n    dtypes: [f32, f64]\n    modes: [primal, vjp]\n";
        let s = parse_suite(text, "t").unwrap();
        assert_eq!(s.cases.len(), 2 * 2 * 2);
        assert_eq!(s.seed, 5);
        assert_eq!(s.budget.samples, 3);
        assert_eq!(s.budget.time_limit, Duration::from_millis(1500));
        assert_eq!(s.budget.warm_up, Duration::from_millis(25), "five default minimum samples");
        assert_eq!(s.tolerances.get(&(CheckKind::FdVjp, DType::F32)), Some(&0.002));
        // The warm-up follows the minimum sample unless set; 0 keeps the single warm-up call.
        let with = |timing: &str| parse_suite(&text.replace("{samples: 3, time_limit_s: 1.5}", timing), "t");
        assert_eq!(with("{min_sample_ms: 20}").unwrap().budget.warm_up, Duration::from_millis(100));
        assert_eq!(with("{min_sample_ms: 20, warm_up_ms: 300}").unwrap().budget.warm_up, Duration::from_millis(300));
        assert_eq!(with("{warm_up_ms: 0}").unwrap().budget.warm_up, Duration::ZERO);
        let e = with("{warm_up_ms: -1}").unwrap_err();
        assert!(e.contains("timing.warm_up_ms must be 0 or a positive number"), "{e}");
        assert!(s.cases.iter().all(|c| c.modes == [Mode::Primal, Mode::Vjp] && c.seed == 5));
        let classic = "name: c\ncases:\n  - workload: kmeans\n    n: [100]\n    k: [3]\n    d: [2, 4]\n  - workload: gmm\n    d: [2]\n    k: [5]\n    n: [50]\n  - workload: lstm\n    l: [1, 2]\n    c: [8]\n    backends: [opencl]\n";
        assert_eq!(
            ids(&parse_suite(classic, "c").unwrap()),
            [
                "kmeans[d=2,k=3,n=100]/cpu/f32/-",
                "kmeans[d=4,k=3,n=100]/cpu/f32/-",
                "gmm[d=2,k=5,n=50]/cpu/f32/-",
                "lstm[b=14,c=8,l=1]/opencl/f32/-",
                "lstm[b=14,c=8,l=2]/opencl/f32/-"
            ]
        );
        let short = "name: c\ncases:\n  - workload: lstm\n    l: [1]\n    c: [1]\n";
        assert!(parse_suite(short, "c").unwrap_err().contains("cases[0].c: 1 is outside [2,"));
        let ba = "name: b\ncases:\n  - workload: ba\n    sizes: [[2, 3, 4], [5, 6, 7]]\n    dtypes: [f64]\n";
        assert_eq!(ids(&parse_suite(ba, "b").unwrap()), ["ba[m=3,n=2,p=4]/cpu/f64/-", "ba[m=6,n=5,p=7]/cpu/f64/-"]);
        let bad = "name: b\ncases:\n  - workload: ba\n    sizes: [[2, 0, 4]]\n";
        assert!(parse_suite(bad, "b").unwrap_err().contains("0 is outside [1,"));
        let short = "name: b\ncases:\n  - workload: ba\n    sizes: [[2, 4]]\n";
        assert!(parse_suite(short, "b").unwrap_err().contains("expected [n, m, p] lists"));
    }

    #[test]
    fn an_external_tool_is_asked_once_per_case_not_once_per_rule() {
        let text = "name: t\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [special, auto]\n    n: [10]\n    k: [2]\n    tools: [cpu, {name: jax, command: \"python3 run.py\"}]\n";
        let s = parse_suite(text, "t").unwrap();
        assert_eq!(
            ids(&s),
            [
                "hist-add[dist=uniform,index_dtype=i32,k=2,n=10,oob=0.05]/cpu/f32/special",
                "hist-add[dist=uniform,index_dtype=i32,k=2,n=10,oob=0.05]/cpu/f32/auto",
                "hist-add[dist=uniform,index_dtype=i32,k=2,n=10,oob=0.05]/jax/f32/special",
            ]
        );
    }

    #[test]
    fn tools_and_backends_read_the_same() {
        let with = |key: &str| {
            format!(
                "name: t\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [10]\n    k: [2]\n    {key}: [cpu, opencl]\n"
            )
        };
        let (a, b) = (parse_suite(&with("tools"), "t").unwrap(), parse_suite(&with("backends"), "t").unwrap());
        assert_eq!(ids(&a), ids(&b));
        assert_eq!(
            ids(&a),
            [
                "hist-add[dist=uniform,index_dtype=i32,k=2,n=10,oob=0.05]/cpu/f32/auto",
                "hist-add[dist=uniform,index_dtype=i32,k=2,n=10,oob=0.05]/opencl/f32/auto"
            ]
        );
    }
}
