//! GradBench's four simple evals (`hello`, `lse`, `det`, `ode`) end to end: `adgauge tool`
//! answers each module's messages in the shapes GradBench's `run.py` sends them, `adgauge eval`
//! prints values computed by hand on every available device, `adgauge tool` driven as an external
//! tool passes the engine's checks, and the JAX and PyTorch adapters answer the four modules
//! (skipped with the reason when the tools' Python is absent; a failure when `ADGAUGE_REQUIRE`
//! lists `jax` or `pytorch`).

use crate::common;

use common::{adgauge, close, converse_program, json, numbers, opencl_available, python_with, stderr, temp_file};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_adgauge");

/// [[2, 0, 1], [1, 3, 2], [1, 1, 2]]: det = 2 (6 - 2) - 0 + 1 (1 - 3) = 6, and its cofactors by
/// hand, row by row: (4, 0, -2), (1, 3, -2), (-3, -3, 6).
const DET_A: [f64; 9] = [2.0, 0.0, 1.0, 1.0, 3.0, 2.0, 1.0, 1.0, 2.0];
const DET_COFACTORS: [f64; 9] = [4.0, 0.0, -2.0, 1.0, 3.0, -2.0, -3.0, -3.0, 6.0];

/// ode with n = 4: RK4 integrates the degree <= 4 polynomial solution exactly, so y(2) =
/// (2 x0, 2 x0 x1, 8/6 x0 x1 x2, 16/24 x0 x1 x2 x3) and the last element's gradient is the
/// product of the other three times 2/3.
const ODE_X: [f64; 4] = [0.5, 1.5, 2.0, 0.75];

fn ode_closed_form() -> (Vec<f64>, Vec<f64>) {
    let [a, b, c, d] = ODE_X;
    let p = a * b * c * d;
    (
        vec![2.0 * a, 2.0 * a * b, a * b * c * 8.0 / 6.0, p * 16.0 / 24.0],
        ODE_X.iter().map(|x| p / x * 2.0 / 3.0).collect(),
    )
}

/// lse of (0, ln 3): ln(1 + 3) = ln 4, softmax (1/4, 3/4).
fn lse_x() -> Vec<f64> {
    vec![0.0, 3f64.ln()]
}

fn all_close(got: &[f64], want: &[f64], tol: f64) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(a, b)| close(*a, *b, tol))
}

/// An `evaluate` message as GradBench's `SingleModuleValidatedEval.evaluate` writes it: the
/// input with the eval's run settings merged in, and a description.
fn evaluate(id: i64, module: &str, function: &str, input: Value, description: &str) -> Value {
    let mut input = input;
    input["min_runs"] = 1.into();
    input["min_seconds"] = 0.into();
    json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input, "description": description})
}

/// Each eval's session as its `run.py` sends it: start (with the eval's name), define, then
/// evaluations each followed by the eval's analysis of the response.
fn session(module: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let mut lines =
        vec![json!({"id": 0, "kind": "start", "eval": module}), json!({"id": 1, "kind": "define", "module": module})];
    for (function, input) in calls {
        let id = lines.len() as i64;
        lines.push(if module == "hello" {
            // hello's inputs are bare numbers, without run settings or a description.
            json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input})
        } else {
            evaluate(id, module, function, input.clone(), "case")
        });
        lines.push(json!({"id": id + 1, "kind": "analysis", "of": id, "valid": true}));
    }
    lines
}

/// The outputs of a session's evaluations (every response successful, ids in order).
fn outputs(module: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let responses = common::converse(&["tool"], &session(module, calls));
    let ids: Vec<i64> = responses.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (0..2 + 2 * calls.len() as i64).collect::<Vec<_>>(), "{module}");
    assert_eq!(responses[0]["tool"], "adgauge");
    assert_eq!(responses[1]["success"], true, "{module}: {}", responses[1]);
    responses[2..]
        .iter()
        .step_by(2)
        .map(|r| {
            assert_eq!(r["success"], true, "{module}: {r}");
            assert!(!r["timings"].as_array().unwrap().is_empty(), "{module}: {r}");
            r["output"].clone()
        })
        .collect()
}

#[test]
fn adgauge_tool_answers_hello_as_gradbench_runs_it() {
    // run.py: x = 1; four times y = square(x), x = double(y), each on the previous output.
    let mut x = json!(1.0);
    for (want_square, want_double) in [(1.0, 2.0), (4.0, 8.0), (64.0, 128.0), (16384.0, 32768.0)] {
        let out = outputs("hello", &[("square", x.clone())]);
        assert_eq!(out[0], json!(want_square));
        let out = outputs("hello", &[("double", out[0].clone())]);
        assert_eq!(out[0], json!(want_double));
        x = out[0].clone();
    }
}

#[test]
fn adgauge_tool_answers_lse_det_and_ode_with_hand_computed_values() {
    let out = outputs("lse", &[("primal", json!({"x": lse_x()})), ("gradient", json!({"x": lse_x()}))]);
    assert!(close(out[0].as_f64().unwrap(), 4f64.ln(), 1e-15), "{}", out[0]);
    assert!(all_close(&numbers(&out[1]), &[0.25, 0.75], 1e-15), "{}", out[1]);

    let det = json!({"A": DET_A, "ell": 3});
    let out = outputs("det", &[("primal", det.clone()), ("gradient", det)]);
    assert_eq!(out[0], json!(6.0));
    assert_eq!(numbers(&out[1]), DET_COFACTORS);

    let (y, g) = ode_closed_form();
    let ode = json!({"x": ODE_X, "s": 3});
    let out = outputs("ode", &[("primal", ode.clone()), ("gradient", ode)]);
    assert!(all_close(&numbers(&out[0]), &y, 1e-14), "{} vs {y:?}", out[0]);
    assert!(all_close(&numbers(&out[1]), &g, 1e-14), "{} vs {g:?}", out[1]);
}

#[test]
fn adgauge_tool_refuses_bad_inputs_naming_the_field() {
    let lines = [
        json!({"id": 0, "kind": "start", "eval": "det"}),
        evaluate(1, "det", "primal", json!({"A": [1, 2, 3], "ell": 2}), "bad"),
        evaluate(2, "ode", "gradient", json!({"x": [0.5], "s": 0}), "bad"),
        evaluate(3, "lse", "primal", json!({"x": [1, "nan"]}), "bad"),
        json!({"id": 4, "kind": "evaluate", "module": "hello", "function": "square", "input": {"x": 1}}),
        evaluate(5, "det", "inverse", json!({"A": [1], "ell": 1}), "bad"),
        evaluate(6, "det", "primal", json!({"A": [1e39], "ell": 1}), "bad"),
    ];
    let responses = common::converse(&["tool", "--dtype", "f32"], &lines);
    let error = |i: usize| {
        assert_eq!(responses[i]["success"], false, "{}", responses[i]);
        responses[i]["error"].as_str().unwrap().to_string()
    };
    assert!(error(1).contains("det.primal input: field A: 3 entries, but ell = 2 needs 4"), "{}", error(1));
    assert!(error(2).contains("ode.gradient input: field s: expected a whole number in [1,"), "{}", error(2));
    assert!(error(3).contains("lse.primal input: field x[1]: must be finite"), "{}", error(3));
    assert!(error(4).contains("hello.square input: input: expected a number"), "{}", error(4));
    assert!(error(5).contains("det: no function 'inverse' (known: primal, gradient)"), "{}", error(5));
    assert!(error(6).contains("field A[0]: 1e39 overflows f32"), "{}", error(6));
}

#[test]
fn eval_prints_hand_computed_values_on_every_device() {
    let files = [
        ("hello", temp_file("gradbench-basic", "hello.json", "-3")),
        ("lse", temp_file("gradbench-basic", "lse.json", &json!({"x": lse_x()}).to_string())),
        ("det", temp_file("gradbench-basic", "det.json", &json!({"A": DET_A, "ell": 3}).to_string())),
        ("ode", temp_file("gradbench-basic", "ode.json", &json!({"x": ODE_X, "s": 3}).to_string())),
    ];
    let mut backends = vec!["cpu", "cpu-jit"];
    if opencl_available() {
        backends.push("opencl");
    }
    let (ode_y, ode_g) = ode_closed_form();
    for backend in backends {
        for dtype in ["f64", "f32"] {
            // f32 values are compared at f32's precision.
            let tol = if dtype == "f32" { 1e-6 } else { 1e-14 };
            for mode in ["primal", "vjp", "jvp"] {
                for (name, path) in &files {
                    let args = ["eval", name, "--input", path.to_str().unwrap(), "--mode", mode, "--backend", backend];
                    let out = json(&adgauge(&[&args[..], &["--dtype", dtype]].concat()));
                    let at = format!("{name} {backend} {dtype} {mode}: {out}");
                    let (value, gradient) = match *name {
                        "hello" => (vec![9.0], vec![-6.0]),
                        "lse" => (vec![4f64.ln()], vec![0.25, 0.75]),
                        "det" => (vec![6.0], DET_COFACTORS.to_vec()),
                        _ => (ode_y.clone(), ode_g.clone()),
                    };
                    let field = if *name == "ode" { "y" } else { "objective" };
                    assert!(all_close(&numbers(&out[field]), &value, tol), "{at}");
                    if mode == "primal" {
                        assert!(out.get("gradient").is_none(), "{at}");
                    } else {
                        assert!(all_close(&numbers(&out["gradient"]), &gradient, tol), "{at}");
                    }
                }
            }
        }
    }
}

#[test]
fn eval_refuses_malformed_files_with_exit_2() {
    for (name, text, want) in [
        ("det", r#"{"A": [1, 2], "ell": 1}"#, "field A: 2 entries, but ell = 1 needs 1"),
        ("ode", r#"{"x": [1, 2]}"#, "field s: missing"),
        ("lse", r#"{"x": []}"#, "field x: is empty"),
        ("hello", "[1]", "input: expected a number"),
    ] {
        let path = temp_file("gradbench-basic", &format!("bad-{name}.json"), text);
        let out = adgauge(&["eval", name, "--input", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{name}: {}", stderr(&out));
    }
}

/// The four evals at small sizes, each on the CPU device and on `tool`; the suite's rows.
fn run_on(tool: &str, command: &str, group: &str) -> (Option<i32>, Vec<Value>) {
    let suite = format!(
        "name: {tool}\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hello\n    x: 3.0\n    dtypes: [f64]\n    tools: [cpu, {{name: {tool}, command: \"{command}\", timeout_s: 300}}]\n  - workload: lse\n    n: [50]\n    dtypes: [f64]\n    tools: [cpu, {tool}]\n  - workload: det\n    ell: [4]\n    dtypes: [f64]\n    tools: [cpu, {tool}]\n  - workload: ode\n    n: [12]\n    s: [3]\n    dtypes: [f64]\n    tools: [cpu, {tool}]\n"
    );
    let path = temp_file(group, &format!("{tool}.yaml"), &suite);
    let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    (out.status.code(), common::case_rows(&out))
}

fn check_names(r: &Value) -> Vec<String> {
    let mut names: Vec<String> =
        r["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

/// Every external row is ok with every check passing, the gradient judged by finite differences
/// and the hand-derived reference, and both GradBench functions timed.
fn assert_judged_right(tool: &str, code: Option<i32>, rows: &[Value]) {
    assert_eq!(code, Some(0), "{rows:#?}");
    for w in ["hello", "lse", "det", "ode"] {
        let r = rows
            .iter()
            .find(|r| r["workload"] == w && r["backend"] == tool)
            .unwrap_or_else(|| panic!("{tool} {w}: {rows:#?}"));
        assert_eq!(r["status"], "ok", "{tool} {w}: {r}");
        assert!(r["checks"].as_array().unwrap().iter().all(|c| c["passed"] == true), "{tool} {w}: {r}");
        let names = check_names(r);
        for check in ["dot-product", "fd-vjp", "fd-jvp", "manual", "timing"] {
            assert!(names.iter().any(|n| n == check), "{tool} {w}: no {check}: {names:?}");
        }
        assert!(r["primal"]["median_s"].as_f64().unwrap() > 0.0, "{tool} {w}: {r}");
        assert!(r["vjp"]["median_s"].as_f64().unwrap() > 0.0, "{tool} {w}: {r}");
        let cpu = rows.iter().find(|r| r["workload"] == w && r["backend"] == "cpu").unwrap();
        assert_eq!(cpu["status"], "ok", "cpu {w}: {cpu}");
    }
}

#[test]
fn adgauge_as_an_external_tool_passes_the_checks_on_the_four_evals() {
    let (code, rows) = run_on("self", &format!("{BIN} tool"), "gradbench-basic-self");
    assert_judged_right("self", code, &rows);
}

fn adapter(tool: &str, python: &std::path::Path) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tools/{tool}/run.py"));
    format!("{} {}", python.display(), script.canonicalize().unwrap().display())
}

/// An adapter's answers to the four modules' GradBench messages, by hand as above.
fn assert_adapter_answers(tool: &str, python: &std::path::Path) {
    let command = adapter(tool, python);
    let mut parts = command.split(' ');
    let (program, script) = (parts.next().unwrap(), parts.next().unwrap());
    let (ode_y, ode_g) = ode_closed_form();
    let det = json!({"A": DET_A, "ell": 3});
    let ode = json!({"x": ODE_X, "s": 3});
    let lse = json!({"x": lse_x()});
    let mut lines = vec![json!({"id": 0, "kind": "start", "eval": "hello"})];
    let calls: [(&str, &str, Value); 8] = [
        ("hello", "square", json!(3.0)),
        ("hello", "double", json!(3.0)),
        ("lse", "primal", lse.clone()),
        ("lse", "gradient", lse),
        ("det", "primal", det.clone()),
        ("det", "gradient", det),
        ("ode", "primal", ode.clone()),
        ("ode", "gradient", ode),
    ];
    for (i, (module, function, input)) in calls.iter().enumerate() {
        let id = 1 + i as i64;
        lines.push(if *module == "hello" {
            json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input})
        } else {
            evaluate(id, module, function, input.clone(), "case")
        });
    }
    let responses = converse_program(program, &[script], &lines);
    assert_eq!(responses.len(), lines.len(), "{tool}: {responses:#?}");
    let out = |i: usize| {
        assert_eq!(responses[i]["success"], true, "{tool}: {}", responses[i]);
        numbers(&responses[i]["output"])
    };
    assert_eq!(out(1), [9.0], "{tool}");
    assert_eq!(out(2), [6.0], "{tool}");
    assert!(all_close(&out(3), &[4f64.ln()], 1e-15), "{tool}: {:?}", out(3));
    assert!(all_close(&out(4), &[0.25, 0.75], 1e-15), "{tool}: {:?}", out(4));
    assert!(all_close(&out(5), &[6.0], 1e-14), "{tool}: {:?}", out(5));
    assert!(all_close(&out(6), &DET_COFACTORS, 1e-14), "{tool}: {:?}", out(6));
    assert!(all_close(&out(7), &ode_y, 1e-14), "{tool}: {:?}", out(7));
    assert!(all_close(&out(8), &ode_g, 1e-14), "{tool}: {:?}", out(8));
    // And through the pipeline: the engine's checks pass on the adapter's derivatives.
    let (code, rows) = run_on(tool, &command, &format!("gradbench-basic-{tool}"));
    assert_judged_right(tool, code, &rows);
}

#[test]
fn jax_adapter_answers_the_four_evals() {
    let Some(python) = python_with("jax", "jax") else { return };
    assert_adapter_answers("jax", &python);
}

#[test]
fn pytorch_adapter_answers_the_four_evals() {
    let Some(python) = python_with("torch", "pytorch") else { return };
    assert_adapter_answers("pytorch", &python);
}
