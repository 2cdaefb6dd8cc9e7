//! A bounded, seeded smoke of the fuzz targets' entry points (`fuzz/`, run by
//! `scripts/fuzz.sh` on the nightly toolchain), for CI on the stable one: valid inputs of every
//! parser mutated a few hundred times each (bytes changed, cut, repeated, interesting tokens
//! inserted), and each mutant must give a value or an error, never a panic. Seeded, so a
//! failure reproduces; the mutant that panicked is printed.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use adgauge_backends::{AnyDevice, Cpu, DType};
use adgauge_datasets::ba::BaInput;
use adgauge_datasets::gmm::GmmInput;
use adgauge_datasets::lstm::LstmInput;
use adgauge_harness::protocol;
use adgauge_workloads::workload::{EvalRequest, Mode};
use rand::RngExt;

use common::{adgauge, temp_file};

/// Tokens that broke parsers before: signs, zero, huge and tiny numbers, non-finite spellings,
/// empty containers, separators.
const TOKENS: [&str; 22] = [
    "-1",
    "0",
    "1e308",
    "-1e308",
    "1e39",
    "4294967296",
    "18446744073709551616",
    "nan",
    "\"inf\"",
    "\"-inf\"",
    "[]",
    "{}",
    "null",
    "\"\"",
    ",",
    "\n",
    " ",
    "1e-320",
    "-0",
    "[[",
    "]]",
    "\"k\": 0,",
];

/// One mutant of `text`: one to four edits.
fn mutate(text: &str, rng: &mut impl RngExt) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let at = if b.is_empty() { 0 } else { rng.random_range(0..b.len()) };
        match rng.random_range(0..5) {
            0 if !b.is_empty() => b[at] = b" -.,:[]{}\"0123456789eE\n"[rng.random_range(0..23)],
            1 => {
                let end = (at + rng.random_range(1..16)).min(b.len());
                b.drain(at..end);
            }
            2 => {
                let end = (at + rng.random_range(1..32)).min(b.len());
                let piece = b[at..end].to_vec();
                b.splice(at..at, piece);
            }
            3 => b.truncate(at),
            _ => {
                let t = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
                b.splice(at..at, t.iter().copied());
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Runs `f` on `rounds` mutants of each seed text; a panic fails naming the mutant.
fn smoke(name: &str, seeds: &[String], rounds: usize, f: impl Fn(&str)) {
    let mut rng = adgauge_datasets::rng(0xf022 ^ name.len() as u64);
    for seed in seeds {
        for _ in 0..rounds {
            let input = mutate(seed, &mut rng);
            if catch_unwind(AssertUnwindSafe(|| f(&input))).is_err() {
                let shown: String = input.chars().take(2000).collect();
                panic!("{name}: panicked on this input:\n{shown}");
            }
        }
    }
}

#[test]
fn eval_json_inputs_never_panic() {
    adgauge_datasets::limits::set_max_bytes(256 << 20);
    let device = AnyDevice::Cpu(Cpu::new(Some(1)).unwrap());
    let hist = r#"{"k": 3, "inds": [0, 2, -1, 2, 1], "vals": [1.5, 2, 3, 0.5, 1], "dest": [0, 1, 2], "hist_bar": [1, -1, 2], "vals_dot": [1, 0, 0, 1, 2], "dest_dot": [0, 1, 0]}"#;
    let kmeans = r#"{"points": [[1, 2], [0.5, -1], [3, 3]], "centres": [[0, 0], [2, 2]]}"#;
    let cases: Vec<(&str, &str)> = ["hist-add", "hist-mul", "hist-min", "hist-max", "hist-logaddexp", "hist-hypot"]
        .into_iter()
        .map(|w| (w, hist))
        .chain([("kmeans", kmeans)])
        .chain([("hello", "1.5"), ("lse", r#"{"x": [0.5, 1, -2]}"#), ("det", r#"{"A": [1, 2, 3, 4], "ell": 2}"#)])
        .chain([("ode", r#"{"x": [0.5, 0.25], "s": 1}"#)])
        .collect();
    for (i, (name, seed)) in cases.into_iter().enumerate() {
        let w = adgauge_workloads::find(name).unwrap();
        smoke(name, &[seed.to_string()], 120, |text| {
            for (j, mode) in [Mode::Primal, Mode::Vjp, Mode::Jvp].into_iter().enumerate() {
                let req = EvalRequest {
                    name: name.to_string(),
                    text: text.to_string(),
                    source: "smoke".into(),
                    mode: Some(mode),
                    dtype: if (i + j) % 2 == 0 { DType::F64 } else { DType::F32 },
                    rule: None,
                    options: Default::default(),
                };
                let _ = w.eval(&req, &device);
            }
        });
    }
}

#[test]
fn adbench_readers_never_panic_and_errors_name_a_line() {
    adgauge_datasets::limits::set_max_bytes(256 << 20);
    let gmm = vec![
        GmmInput::generate(2, 3, 5, 1).to_text(false).unwrap(),
        GmmInput::generate_replicated(2, 2, 4, 2).to_text(true).unwrap(),
    ];
    smoke("gmm", &gmm, 300, |t| {
        for replicate in [None, Some(true), Some(false)] {
            if let Err(e) = GmmInput::parse(t, "smoke", replicate) {
                assert!(e.line().is_some(), "{e}");
            }
        }
    });
    let ba = vec![BaInput::generate(2, 3, 4, 0).to_text().unwrap()];
    smoke("ba", &ba, 300, |t| {
        if let Err(e) = BaInput::parse(t, "smoke") {
            assert!(e.line().is_some(), "{e}");
        }
    });
    let lstm = vec![LstmInput::generate(1, 3, 2, 0).to_text().unwrap()];
    smoke("lstm", &lstm, 300, |t| {
        if let Err(e) = LstmInput::parse(t, "smoke") {
            assert!(e.line().is_some(), "{e}");
        }
    });
}

#[test]
fn result_csv_files_never_panic_the_reader() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../reports/tests/fixtures");
    let mut seeds = Vec::new();
    for f in ["schema1.csv", "schema2.csv"] {
        let text = std::fs::read_to_string(format!("{fixtures}/{f}")).unwrap();
        let (run, rows) = adgauge_reports::store::parse_csv(&text, f.as_ref()).unwrap();
        seeds.push(adgauge_reports::store::to_csv(&run, &rows));
        seeds.push(text);
    }
    smoke("result csv", &seeds, 150, |t| {
        let _ = adgauge_reports::store::parse_csv(t, "smoke.csv".as_ref());
    });
}

#[test]
fn protocol_lines_never_panic_and_round_trip() {
    let lines = [
        r#"{"id": 0, "kind": "start", "eval": "hist", "config": {"a": 1}}"#,
        r#"{"id": 1, "kind": "define", "module": "hist"}"#,
        r#"{"id": 2, "kind": "evaluate", "module": "hist", "function": "vjp", "input": {"op": "add", "k": 1, "inds": [0], "vals": [1], "dest": [0], "hist_bar": [1], "min_runs": 1, "min_seconds": 0}}"#,
        r#"{"id": 3, "kind": "analysis", "of": 2, "valid": true}"#,
    ];
    let seeds: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    smoke("protocol", &seeds, 300, |t| {
        if let Ok(m) = serde_json::from_str::<protocol::Message>(t) {
            let again = serde_json::to_string(&m).unwrap();
            assert_eq!(serde_json::from_str::<protocol::Message>(&again).ok(), Some(m));
        }
    });
}

/// The suite reader lives in the binary: mutants of a small suite go through `run --list`
/// (parse and expand only), each exit 0 or 2 with a message, never a panic (exit 101).
#[test]
fn suite_yaml_never_panics_the_binary() {
    let suite = "name: smoke\nseed: 7\ntiming: {samples: 3, min_sample_ms: 1, time_limit_s: 0.1}\ntolerances: {fd-vjp: {f32: 2e-3}}\ncases:\n  - workload: hist\n    ops: [add, min]\n    rules: [auto]\n    n: [100]\n    k: [10]\n    dtypes: [f32, f64]\n  - workload: ba\n    sizes: [[2, 3, 4]]\n  - workload: gmm\n    d: [2]\n    k: [3]\n    n: [10]\n";
    let mut rng = adgauge_datasets::rng(0x5eed);
    for i in 0..60 {
        let text = mutate(suite, &mut rng);
        let path = temp_file("fuzz-smoke", &format!("s{i}.yaml"), &text);
        let out = adgauge(&["--max-memory", "256M", "run", "--suite", path.to_str().unwrap(), "--list"]);
        let code = out.status.code();
        assert!(
            matches!(code, Some(0) | Some(2)),
            "exit {code:?} on:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
