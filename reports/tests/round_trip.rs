//! Every real of a result row reads back as written, bit for bit (NaN as NaN), through every
//! file the harness writes and reads: the run's CSV, its JSON lines (`run --json`), the partial
//! file of a run in progress, the rows' own JSON (the `--isolate` pipe) and the Parquet twin.
//! A check's worst error is NaN or infinite exactly when a derivative is: serde_json wrote such
//! a real as `null`, and the row could not be read back (the partial file, the pipe, the JSON
//! lines). Times are finite and not negative, and a non-finite time is refused by every reader,
//! naming the field.

use std::collections::BTreeMap;
use std::path::Path;

use adgauge_reports::store::run_parquet;
use adgauge_reports::store::{json_lines, parse_csv, parse_partial, rows_from_json_lines, to_csv};
use adgauge_reports::{Check, RandomRate, ResultRow, Roofline, RunInfo, SCHEMA_VERSION, Status, Timing};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use proptest::num::f64 as reals;
use proptest::prelude::*;

/// Any real: every class, with NaN, the infinities, -0.0 and subnormals of both signs often.
fn any_real() -> impl Strategy<Value = f64> {
    prop_oneof![
        reals::ANY,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        (1u64..1 << 52).prop_map(f64::from_bits),
        (1u64..1 << 52).prop_map(|b| -f64::from_bits(b)),
    ]
}

/// A time: finite and not negative (-0.0 and subnormals included).
fn time() -> impl Strategy<Value = f64> {
    prop_oneof![
        reals::POSITIVE | reals::ZERO | reals::NORMAL | reals::SUBNORMAL,
        Just(-0.0),
        Just(f64::MAX),
        (1u64..1 << 52).prop_map(f64::from_bits),
        1e-9..10.0f64,
    ]
}

/// A rate of the roofline: finite and above zero.
fn rate() -> impl Strategy<Value = f64> {
    reals::POSITIVE | reals::NORMAL | reals::SUBNORMAL
}

fn timing() -> impl Strategy<Value = Timing> {
    (time(), time(), time(), 1usize..1000, 0usize..100, time(), prop::collection::vec(time(), 0..4)).prop_map(
        |(min_s, median_s, max_s, batch, samples, cv, mut sample_s)| {
            // Readers refuse a median that is not its samples' (store::check_timing): an odd
            // count of samples and their middle one (the mean of two middle times near f64::MAX
            // would not be finite).
            if sample_s.len().is_multiple_of(2) {
                sample_s.pop();
            }
            let median_s = if sample_s.is_empty() {
                median_s
            } else {
                let mut sorted = sample_s.clone();
                sorted.sort_by(f64::total_cmp);
                sorted[sorted.len() / 2]
            };
            Timing { min_s, median_s, max_s, batch, samples, cv, sample_s }
        },
    )
}

/// Checks in the validation's order (a run's file lists them in the order first run).
const CHECKS: [&str; 4] = ["dot-product", "fd-vjp", "oracle.vjp", "perturbation"];

fn checks() -> impl Strategy<Value = Vec<Check>> {
    prop::sample::subsequence(CHECKS.to_vec(), 0..=CHECKS.len()).prop_flat_map(|names| {
        let n = names.len();
        (Just(names), prop::collection::vec((any_real(), any_real(), any::<bool>()), n)).prop_map(|(names, values)| {
            names
                .into_iter()
                .zip(values)
                .map(|(name, (worst, tolerance, passed))| Check { name: name.into(), worst, tolerance, passed })
                .collect()
        })
    })
}

fn status() -> impl Strategy<Value = Status> {
    prop::sample::select(vec![Status::Ok, Status::Failed, Status::Error, Status::Skipped, Status::Timeout])
}

/// Text a field may hold: commas, quotes, newlines, tabs, non-ASCII.
fn text() -> impl Strategy<Value = String> {
    "[ -~\t\n\"é∂]{1,16}"
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,8}"
}

/// A parameter's value: a count or a word (JSON lines type a parameter column as numbers where
/// every value parses as one, so a word that parses, `inf`, is left out).
fn param() -> impl Strategy<Value = String> {
    prop_oneof![any::<u32>().prop_map(|n| n.to_string()), "[g-m_]{1,6}"]
}

fn row() -> impl Strategy<Value = ResultRow> {
    let identity = (
        name(),
        prop::collection::btree_map(prop::sample::select(vec!["n", "k", "w", "dist"]), param(), 0..3),
        name(),
        prop::sample::select(vec!["f32", "f64"]),
        name(),
        prop::option::of(name()),
        1usize..64,
        any::<u64>(),
    );
    let measured = (
        prop::option::of(timing()),
        prop::option::of(timing()),
        prop::option::of(timing()),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
    );
    let outcome = (checks(), status(), prop::option::of(text()), prop::option::of(time()), prop::option::of(text()));
    (identity, measured, outcome).prop_map(
        |(
            (workload, params, backend, dtype, rule, rule_used, threads, seed),
            (primal, vjp, jvp, primal_peak_bytes, vjp_peak_bytes, jvp_peak_bytes),
            (checks, status, message, compile_s, tool_version),
        )| {
            let params: BTreeMap<String, String> = params.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            ResultRow {
                schema_version: SCHEMA_VERSION,
                case_id: String::new(),
                workload,
                params,
                backend,
                dtype: dtype.into(),
                rule,
                rule_used,
                threads,
                seed,
                primal,
                vjp,
                jvp,
                primal_peak_bytes,
                vjp_peak_bytes,
                jvp_peak_bytes,
                checks,
                status,
                message,
                compile_s,
                tool_version,
                host: None,
            }
        },
    )
}

fn roofline() -> impl Strategy<Value = Roofline> {
    (1usize..64, rate(), prop::collection::vec((1usize..1 << 40, rate(), rate()), 0..3)).prop_map(
        |(threads, seq_read_gb_s, random)| Roofline {
            threads,
            seq_read_gb_s,
            random: random
                .into_iter()
                .map(|(bins, reads_per_s, updates_per_s)| RandomRate { bins, reads_per_s, updates_per_s })
                .collect(),
            tools: vec!["cpu".into()],
        },
    )
}

/// A run of one to three rows (their case ids distinct).
fn run() -> impl Strategy<Value = (RunInfo, Vec<ResultRow>)> {
    (prop::option::of(roofline()), prop::collection::vec(row(), 1..4)).prop_map(|(roofline, mut rows)| {
        for (i, r) in rows.iter_mut().enumerate() {
            r.case_id = format!("case-{i}");
        }
        let info = RunInfo {
            run_id: "20261128T000000Z-1-ab".into(),
            timestamp: "2026-11-28T00:00:00Z".into(),
            git_revision: "abc".into(),
            adgauge_version: "0.1.0".into(),
            machine: "host".into(),
            cpu_model: "cpu".into(),
            cores: 2,
            governor: "unknown".into(),
            suite: "prop".into(),
            roofline,
            interrupted: None,
            selection: None,
        };
        (info, rows)
    })
}

/// A real as compared here: its bits, every NaN one value.
fn bits(x: f64) -> u64 {
    if x.is_nan() { u64::MAX } else { x.to_bits() }
}

/// Every real of a row, named, as [`bits`].
fn row_reals(r: &ResultRow) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (mode, t) in [("primal", &r.primal), ("vjp", &r.vjp), ("jvp", &r.jvp)] {
        if let Some(t) = t {
            for (f, x) in [("min_s", t.min_s), ("median_s", t.median_s), ("max_s", t.max_s), ("cv", t.cv)] {
                out.push((format!("{mode}.{f}"), bits(x)));
            }
            out.extend(t.sample_s.iter().enumerate().map(|(i, x)| (format!("{mode}.sample_s[{i}]"), bits(*x))));
        }
    }
    for c in &r.checks {
        out.push((format!("check.{}.worst", c.name), bits(c.worst)));
        out.push((format!("check.{}.tolerance", c.name), bits(c.tolerance)));
    }
    if let Some(c) = r.compile_s {
        out.push(("compile_s".into(), bits(c)));
    }
    out
}

fn run_reals(info: &RunInfo) -> Vec<(String, u64)> {
    let Some(r) = &info.roofline else { return Vec::new() };
    let mut out = vec![("seq_read_gb_s".to_string(), bits(r.seq_read_gb_s))];
    for x in &r.random {
        out.push((format!("reads_per_s@{}", x.bins), bits(x.reads_per_s)));
        out.push((format!("updates_per_s@{}", x.bins), bits(x.updates_per_s)));
    }
    out
}

/// The row with every real zeroed (compared with `==` once the reals are compared as bits).
fn without_reals(r: &ResultRow) -> ResultRow {
    let zero = |t: &Option<Timing>| {
        t.as_ref().map(|t| Timing {
            min_s: 0.0,
            median_s: 0.0,
            max_s: 0.0,
            cv: 0.0,
            sample_s: vec![0.0; t.sample_s.len()],
            ..t.clone()
        })
    };
    ResultRow {
        primal: zero(&r.primal),
        vjp: zero(&r.vjp),
        jvp: zero(&r.jvp),
        checks: r.checks.iter().map(|c| Check { worst: 0.0, tolerance: 0.0, ..c.clone() }).collect(),
        compile_s: r.compile_s.map(|_| 0.0),
        ..r.clone()
    }
}

fn without_run_reals(info: &RunInfo) -> RunInfo {
    let mut info = info.clone();
    if let Some(r) = &mut info.roofline {
        r.seq_read_gb_s = 0.0;
        for x in &mut r.random {
            (x.reads_per_s, x.updates_per_s) = (0.0, 0.0);
        }
    }
    info
}

/// `Err` naming what differs between the run written and the run read back through `how`.
fn same(how: &str, want: &(RunInfo, Vec<ResultRow>), got: &(RunInfo, Vec<ResultRow>)) -> Result<(), TestCaseError> {
    prop_assert_eq!(run_reals(&got.0), run_reals(&want.0), "{}: the run's reals", how);
    prop_assert_eq!(without_run_reals(&got.0), without_run_reals(&want.0), "{}: the run", how);
    prop_assert_eq!(got.1.len(), want.1.len(), "{}: rows", how);
    // A file lists checks in the order the run first ran them, for all its rows alike.
    let sorted = |r: &ResultRow| {
        let mut r = r.clone();
        r.checks.sort_by(|a, b| a.name.cmp(&b.name));
        r
    };
    for (g, w) in got.1.iter().zip(&want.1) {
        let (g, w) = (&sorted(g), &sorted(w));
        prop_assert_eq!(row_reals(g), row_reals(w), "{}: the reals of {}", how, w.case_id);
        prop_assert_eq!(without_reals(g), without_reals(w), "{}: row {}", how, w.case_id);
    }
    Ok(())
}

/// The partial file of a run in progress, as `RunWriter` writes it: the run's information, then
/// one row per line, each in the rows' own JSON.
fn partial_text(info: &RunInfo, rows: &[ResultRow]) -> String {
    let mut text = serde_json::to_string(info).unwrap() + "\n";
    for r in rows {
        text += &(serde_json::to_string(r).unwrap() + "\n");
    }
    text
}

/// A Parquet double as [`bits`] (None: null, or not a double).
fn parquet_real(f: &Field) -> Option<u64> {
    match f {
        Field::Double(x) => Some(bits(*x)),
        _ => None,
    }
}

/// The reals of the Parquet file's lines, named as [`row_reals`] names them, per case.
fn parquet_reals(bytes: Vec<u8>) -> BTreeMap<String, Vec<(String, u64)>> {
    let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
    let mut out: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    let mut checks: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    for line in reader.get_row_iter(None).unwrap() {
        let line = line.unwrap();
        let get = |name: &str| line.get_column_iter().find(|(n, _)| n.as_str() == name).map(|(_, f)| f.clone());
        let Some(Field::Str(case)) = get("case_id") else { panic!("a line without its case id") };
        let mode = match get("mode") {
            Some(Field::Str(m)) => m,
            _ => String::new(),
        };
        let mine = out.entry(case.clone()).or_default();
        if let Some(median) = get("median_s").as_ref().and_then(parquet_real) {
            mine.push((format!("{mode}.min_s"), get("min_s").as_ref().and_then(parquet_real).unwrap()));
            mine.push((format!("{mode}.median_s"), median));
            mine.push((format!("{mode}.max_s"), get("max_s").as_ref().and_then(parquet_real).unwrap()));
            mine.push((format!("{mode}.cv"), get("cv").as_ref().and_then(parquet_real).unwrap()));
            if let Some(Field::ListInternal(list)) = get("sample_s") {
                for (i, e) in list.elements().iter().enumerate() {
                    mine.push((format!("{mode}.sample_s[{i}]"), parquet_real(e).unwrap()));
                }
            }
        }
        // The case's columns repeat on every line of it: taken from its first.
        if checks.contains_key(&case) {
            continue;
        }
        let mut case_reals = Vec::new();
        for c in CHECKS {
            for f in ["worst", "tolerance"] {
                let column = format!("check.{c}.{f}");
                if let Some(x) = get(&column).as_ref().and_then(parquet_real) {
                    case_reals.push((column, x));
                }
            }
        }
        if let Some(x) = get("compile_s").as_ref().and_then(parquet_real) {
            case_reals.push(("compile_s".into(), x));
        }
        checks.insert(case, case_reals);
    }
    for (case, c) in checks {
        out.entry(case).or_default().extend(c);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_real_of_a_row_round_trips_through_every_file(run in run()) {
        let (info, rows) = &run;
        let csv = parse_csv(&to_csv(info, rows), Path::new("r.csv"));
        prop_assert!(csv.is_ok(), "csv: {}", csv.as_ref().unwrap_err());
        same("csv", &run, &csv.unwrap())?;
        let lines = json_lines(info, rows).join("\n");
        let json = rows_from_json_lines(&lines, Path::new("stdout"));
        prop_assert!(json.is_ok(), "json lines: {}", json.as_ref().unwrap_err());
        same("json lines", &run, &json.unwrap())?;
        let partial = parse_partial(&partial_text(info, rows), Path::new(".r.partial.jsonl"));
        prop_assert!(partial.is_ok(), "partial: {}", partial.as_ref().unwrap_err());
        same("partial", &run, &partial.unwrap())?;
        // The --isolate pipe: a child's row in the rows' own JSON, with its run's fields beside.
        for r in rows {
            let mut value = serde_json::to_value(r).unwrap();
            value.as_object_mut().unwrap().insert("run_id".into(), info.run_id.clone().into());
            let back: Result<ResultRow, _> = serde_json::from_str(&value.to_string());
            prop_assert!(back.is_ok(), "pipe: {}", back.as_ref().unwrap_err());
            let back = back.unwrap();
            prop_assert_eq!(row_reals(&back), row_reals(r), "pipe: the reals of {}", r.case_id);
            prop_assert_eq!(without_reals(&back), without_reals(r), "pipe");
        }
        let parquet = parquet_reals(run_parquet(info, rows).unwrap());
        for r in rows {
            let mut want = row_reals(r);
            let mut got = parquet.get(&r.case_id).cloned().unwrap_or_default();
            want.sort();
            got.sort();
            prop_assert_eq!(got, want, "parquet: the reals of {}", r.case_id);
        }
    }

    /// A time that is not finite cannot be a measurement: each reader refuses it, naming the
    /// field (never reading it as something else).
    #[test]
    fn a_non_finite_time_is_refused_by_every_reader_naming_it(
        run in run(), bad in prop::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY]),
        t in timing(),
    ) {
        let (info, mut rows) = run;
        rows[0].vjp = Some(Timing { median_s: bad, ..t });
        let csv = parse_csv(&to_csv(&info, &rows), Path::new("r.csv")).map(|_| ()).unwrap_err().to_string();
        prop_assert!(csv.contains("median_s"), "{}", csv);
        let lines = json_lines(&info, &rows).join("\n");
        let json = rows_from_json_lines(&lines, Path::new("stdout")).map(|_| ()).unwrap_err().to_string();
        prop_assert!(json.contains("median_s"), "{}", json);
        let partial = parse_partial(&partial_text(&info, &rows), Path::new("p")).map(|_| ()).unwrap_err().to_string();
        prop_assert!(partial.contains("vjp median_s"), "{}", partial);
    }
}
