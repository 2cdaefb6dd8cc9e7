//! External tools over GradBench's protocol: `adgauge tool` driven by adgauge's own eval side
//! gives the in-process results, a planted AD bug is found by the checks, and faulty tools
//! (hangs, crashes, malformed lines, wrong ids, a missing command) become error or skipped rows
//! while the suite goes on.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::{adgauge, json, stderr, stdout, temp_file};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_adgauge");

fn planted() -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/planted/run.py");
    script.canonicalize().unwrap().display().to_string()
}

/// Whether python3 runs; when it does not, prints why (a skip) or, with `python` in
/// `ADGAUGE_REQUIRE`, fails the test.
fn python_available() -> bool {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !adgauge_datasets::adbench::is_required("python"),
            "ADGAUGE_REQUIRE has python, but python3 does not run"
        );
        eprintln!("skipped: python3 is not installed (the planted-bug tool is a Python script)");
    }
    ok
}

fn rows(suite: &str, name: &str) -> (Option<i32>, Vec<Value>) {
    let path = temp_file("external", name, suite);
    let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    (out.status.code(), common::case_rows(&out))
}

fn row<'a>(rows: &'a [Value], workload: &str, tool: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["workload"] == workload && r["backend"] == tool)
        .unwrap_or_else(|| panic!("{workload} {tool}"))
}

fn check_names(r: &Value) -> Vec<String> {
    r["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

/// Sends protocol lines to `adgauge tool` and returns its responses.
fn converse(lines: &[Value]) -> Vec<Value> {
    let mut child = Command::new(BIN).arg("tool").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    let out: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    out
}

#[test]
fn adgauge_tool_answers_as_eval_does_in_process() {
    let case = serde_json::json!({"op": "max", "k": 3, "inds": [0, 1, 0, 2, -1, 5, 0], "vals": [2, 0.5, 2, 3, 9, 9, 1],
        "dest": [2, 1, 3], "hist_bar": [1, 2, 3], "vals_dot": [1, 2, 3, 4, 5, 6, 7], "dest_dot": [0.5, 0.25, 1]});
    let llsq = serde_json::json!({"x": [0.5, 0.25], "n": 3});
    let evaluate = |id: i64, module: &str, function: &str, input: &Value| {
        let mut input = input.clone();
        input["min_runs"] = 2.into();
        serde_json::json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input})
    };
    let responses = converse(&[
        serde_json::json!({"id": 0, "kind": "start", "eval": "test"}),
        serde_json::json!({"id": 1, "kind": "define", "module": "hist"}),
        evaluate(2, "hist", "vjp", &case),
        evaluate(3, "hist", "jvp", &case),
        evaluate(4, "llsq", "gradient", &llsq),
        serde_json::json!({"id": 5, "kind": "define", "module": "nope"}),
        serde_json::json!({"id": 6, "kind": "analysis", "of": 2, "valid": true}),
    ]);
    let ids: Vec<i64> = responses.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(responses[0]["tool"], "adgauge");
    assert_eq!(responses[1]["success"], true);
    assert_eq!(responses[5]["success"], false);
    assert!(responses[5]["error"].as_str().unwrap().contains("unknown module 'nope'"));
    let path = temp_file("external", "case.json", &case.to_string());
    for (response, mode) in [(&responses[2], "vjp"), (&responses[3], "jvp")] {
        assert_eq!(response["timings"].as_array().unwrap().len(), 2, "{response}");
        let local = json(&adgauge(&["eval", "hist-max", "--input", path.to_str().unwrap(), "--mode", mode]));
        assert_eq!(response["output"], local, "{mode}");
    }
    // By hand (see eval_llsq.rs): the gradient is (1.5, -1.5).
    assert_eq!(responses[4]["output"], serde_json::json!([1.5, -1.5]));
}

#[test]
fn adgauge_as_an_external_tool_passes_the_checks_of_its_own_engine() {
    let suite = format!(
        "name: self\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add, min]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools: [cpu, {{name: self, command: \"{BIN} tool\"}}]\n  - workload: llsq\n    n: [40]\n    m: [5]\n    dtypes: [f64]\n    tools: [cpu, self]\n  - workload: lstm\n    l: [1]\n    c: [5]\n    b: [3]\n    dtypes: [f64]\n    tools: [cpu, self]\n  - workload: kmeans\n    n: [300]\n    k: [4]\n    d: [3]\n    dtypes: [f64]\n    tools: [cpu, self]\n  - workload: gmm\n    n: [40]\n    k: [3]\n    d: [3]\n    dtypes: [f64]\n    tools: [cpu, self]\n"
    );
    let (code, rows) = rows(&suite, "self.yaml");
    assert_eq!(code, Some(0), "{rows:#?}");
    for w in ["hist-add", "hist-min", "llsq", "lstm", "kmeans", "gmm"] {
        let (cpu, ext) = (row(&rows, w, "cpu"), row(&rows, w, "self"));
        assert_eq!((cpu["status"].as_str(), ext["status"].as_str()), (Some("ok"), Some("ok")), "{w}: {ext}");
        // The tool is judged by the checks of the engine, less those of engine internals (and
        // k-means' Hessian, which GradBench's module only returns inside its direction).
        let engine_only = ["rule-agreement", "manual-hessian"];
        let want: Vec<String> = check_names(cpu).into_iter().filter(|c| !engine_only.contains(&c.as_str())).collect();
        let mut got = check_names(ext);
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want, "{w}");
        assert!(ext["primal"]["median_s"].as_f64().unwrap() > 0.0, "{ext}");
        assert!(ext["vjp"]["median_s"].as_f64().unwrap() > 0.0, "{ext}");
    }
}

#[test]
fn planted_bugs_are_found_and_faulty_tools_become_rows() {
    if !python_available() {
        return;
    }
    let tool = |name: &str, fault: &str, extra: &str| {
        format!("      - {{name: {name}, command: \"python3 {} --fault {fault}\"{extra}}}\n", planted())
    };
    let suite = format!(
        "name: planted\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n      - cpu\n{}{}{}{}{}{}      - {{name: ghost, command: \"/nonexistent/tool\"}}\n",
        tool("fine", "none", ""),
        tool("wrong", "wrong-dest", ""),
        tool("hang", "hang", ", timeout_s: 2"),
        tool("crash", "crash", ""),
        tool("garbage", "garbage", ""),
        tool("wrongid", "wrong-id", ""),
    );
    let (code, rows) = rows(&suite, "planted.yaml");
    assert_eq!(code, Some(1));
    assert_eq!(rows.len(), 8, "the suite goes on past every faulty tool: {rows:#?}");
    assert_eq!(row(&rows, "hist-add", "cpu")["status"], "ok");
    assert_eq!(row(&rows, "hist-add", "fine")["status"], "ok", "{}", row(&rows, "hist-add", "fine"));
    // dest's adjoint dropped: finite differences and the oracle see it; vals' adjoint is right.
    let wrong = row(&rows, "hist-add", "wrong");
    assert_eq!(wrong["status"], "failed", "{wrong}");
    let failed: Vec<&str> = wrong["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for check in ["fd-vjp", "oracle-vjp", "full-jacobian"] {
        assert!(failed.contains(&check), "{check} must fail: {wrong}");
    }
    assert!(!failed.contains(&"fd-jvp") && !failed.contains(&"oracle-jvp"), "forward mode is right: {wrong}");
    for (name, status, words) in [
        ("hang", "error", "no response within 2s"),
        ("crash", "error", "planted crash"),
        ("garbage", "error", "not a protocol line"),
        ("wrongid", "error", "has id"),
        ("ghost", "skipped", "/nonexistent/tool"),
    ] {
        let r = row(&rows, "hist-add", name);
        assert_eq!(r["status"], status, "{r}");
        let message = r["message"].as_str().unwrap();
        assert!(message.contains(name) && message.contains(words), "{name}: {message}");
    }
    // Every tool process was killed and reaped.
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(&planted()), "a planted tool is still running");
}

#[test]
fn a_single_unavailable_tool_exits_4_with_the_reason() {
    let out = adgauge(&["check", "--backend", "ghost", "--tool-cmd", "ghost=/nonexistent/tool", "--workload", "llsq"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("/nonexistent/tool"), "{}", stderr(&out));
    let out = adgauge(&["check", "--backend", "self", "--tool-cmd", &format!("self={BIN} tool"), "--workload", "llsq"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("llsq[m=8,n=100]/self/f64/-"), "{}", stdout(&out));
    assert!(stdout(&out).contains("f32 is not among its dtypes"), "{}", stdout(&out));
}

/// At a tie, a tool that splits the adjoint (and says so) gives a valid subgradient: a
/// convention; one that hands the whole adjoint to every tied entry is wrong. adgauge's engine
/// gives it to one winner.
#[test]
fn tie_conventions_are_told_apart_from_wrong_adjoints() {
    if !python_available() {
        return;
    }
    let script = planted();
    let suite = format!(
        "name: ties\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [max, min]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    modes: [vjp]\n    tools:\n      - cpu\n      - {{name: all, command: \"python3 {script} --fault tie-all\"}}\n      - {{name: split, command: \"python3 {script} --fault tie-split\"}}\n"
    );
    let (code, rows) = rows(&suite, "ties.yaml");
    assert_eq!(code, Some(1));
    for w in ["hist-max", "hist-min"] {
        let cpu = row(&rows, w, "cpu");
        assert_eq!(cpu["status"], "ok", "{cpu}");
        assert!(cpu["checks"].as_array().unwrap().iter().any(|c| c["name"] == "ties" && c["worst"] == 0.0), "{cpu}");
        let all = row(&rows, w, "all");
        assert_eq!(all["status"], "failed", "{all}");
        assert!(all["message"].as_str().unwrap().starts_with("ties worst"), "{all}");
        let split = row(&rows, w, "split");
        assert_eq!(split["status"], "ok", "{split}");
        assert!(split["message"].as_str().unwrap().contains("ties: convention: tie-policy split"), "{split}");
    }
    // The run table ends with the tools side by side, each with its finding.
    let path = temp_file("external", "ties.yaml", &suite);
    let table = stdout(&adgauge(&["run", "--suite", path.to_str().unwrap(), "--no-save", "--quiet"]));
    let compared = table.split("tools compared").nth(1).unwrap_or_else(|| panic!("{table}"));
    let line =
        |tool: &str| compared.lines().find(|l| l.split_whitespace().any(|w| w == tool)).unwrap_or("").to_string();
    assert!(line("all").contains("WRONG: ties worst"), "{compared}");
    assert!(
        line("split").contains("ok; ties: convention: tie-policy split") && line("split").contains("x)"),
        "{compared}"
    );
}
