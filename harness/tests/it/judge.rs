//! adgauge as a judge no tool can hang, crash or fool: planted protocol faults (a tool that
//! stops reading, floods a line, crashes at define, answers twice, omits `success`, reports
//! absurd or dispatch-only timings) end their cases as error rows or the `timing` finding
//! within their timeouts; a restarted tool is started and defined again; an interrupted run or
//! an isolated case killed at its limit leaves no tool process behind (read from the process
//! table); `adgauge tool` refuses what `eval` refuses (the memory limit, a line's length).

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{adgauge, planted, python_available, temp_file};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_adgauge");

/// A unique tag for one test's tool processes (the planted tool ignores `--tag`).
fn tag(test: &str) -> String {
    format!("judge-{test}-{}", std::process::id())
}

/// The command lines of running processes that contain `marker` (from /proc).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        // A zombie has an empty command line: it is gone but for its exit status.
        if line.contains(marker) {
            found.push(format!("{}: {line}", name.to_string_lossy()));
        }
    }
    found
}

/// Waits for `child` at most `limit`; kills it and fails past that.
fn wait_at_most(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a suite with `--json` (at most `limit`), returning the exit code and the rows.
fn run_suite(suite: &str, name: &str, extra: &[&str], limit: Duration) -> (Option<i32>, Vec<Value>) {
    let path = temp_file("judge", name, suite);
    let mut args = vec!["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"];
    args.extend(extra);
    let mut child = Command::new(BIN).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let read = |mut p: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = p.read_to_end(&mut v);
            v
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = wait_at_most(&mut child, limit, name);
    let output = std::process::Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() };
    (output.status.code(), common::case_rows(&output))
}

fn row<'a>(rows: &'a [Value], workload: &str, tool: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["workload"] == workload && r["backend"] == tool)
        .unwrap_or_else(|| panic!("no row {workload} {tool}: {rows:#?}"))
}

fn tool(name: &str, fault: &str, tag: &str, extra: &str) -> String {
    format!("      - {{name: {name}, command: \"python3 {} --fault {fault} --tag {tag}\"{extra}}}\n", planted())
}

#[test]
fn misbehaving_tools_become_error_rows_within_their_timeouts_and_leave_nothing_behind() {
    if !python_available() {
        return;
    }
    let t = tag("faults");
    let mut tools = String::new();
    for (name, fault, extra) in [
        ("fine", "none", ""),
        ("flood", "flood", ", max_response_bytes: 1048576"),
        ("crashdefine", "crash-define", ""),
        ("twice", "twice", ""),
        ("nosuccess", "no-success", ""),
        ("absurd", "absurd-timing", ""),
        ("zero", "zero-timing", ""),
        ("dispatch", "dispatch", ""),
    ] {
        tools += &tool(name, fault, &t, &format!(", timeout_s: 5{extra}"));
    }
    // A message of about 1.5 MB (n = 100000, timed without validation) fills the pipe of a tool
    // that stops reading: the write itself must time out.
    let suite = format!(
        "name: faults\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n{tools}  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [100000]\n    k: [9]\n    dtypes: [f64]\n    validate: false\n    tools:\n{}",
        tool("stop", "stop-reading", &t, ", timeout_s: 1")
    );
    let (code, rows) = run_suite(&suite, "faults.yaml", &[], Duration::from_secs(120));
    assert_eq!(code, Some(1), "{rows:#?}");
    assert_eq!(rows.len(), 9, "{rows:#?}");
    let fine = row(&rows, "hist-add", "fine");
    assert_eq!(fine["status"], "ok", "{fine}");
    // Every external row carries the timing check; a tool timing its computation passes it.
    let timing = fine["checks"].as_array().unwrap().iter().find(|c| c["name"] == "timing").cloned();
    assert_eq!(timing.as_ref().map(|c| c["passed"].clone()), Some(Value::Bool(true)), "{fine}");
    for (name, words) in [
        ("flood", vec!["message", "evaluate hist.", "longer than its bound of 1048576 bytes"]),
        ("crashdefine", vec!["(define hist)", "exited before answering", "planted crash at define"]),
        ("twice", vec!["evaluate hist.", "second"]),
        ("nosuccess", vec!["evaluate hist.", "has no `success`"]),
        ("absurd", vec!["evaluate hist.", "more than the", "adgauge measured for the whole exchange"]),
        ("zero", vec!["evaluate hist.", "reported as 0 ns"]),
        ("stop", vec!["evaluate hist.", "did not read the message", "within 1s"]),
    ] {
        let r = row(&rows, "hist-add", name);
        assert_eq!(r["status"], "error", "{name}: {r}");
        let message = r["message"].as_str().unwrap();
        assert!(message.contains(&format!("tool {name}: message ")), "{name}: {message}");
        for w in words {
            assert!(message.contains(w), "{name}: '{w}' not in: {message}");
        }
    }
    // A tool that times the dispatch of its work, not the work, is flagged.
    let dispatch = row(&rows, "hist-add", "dispatch");
    assert_eq!(dispatch["status"], "failed", "{dispatch}");
    let message = dispatch["message"].as_str().unwrap();
    assert!(message.contains("timing: implausible (reports dispatch time?)"), "{message}");
    let check = dispatch["checks"].as_array().unwrap().iter().find(|c| c["name"] == "timing").unwrap();
    assert_eq!(check["passed"], false, "{dispatch}");
    assert!(check["worst"].as_f64().unwrap() > 20.0, "{dispatch}");
    let left = processes_with(&t);
    assert!(left.is_empty(), "tool processes outlived the run: {left:#?}");
}

/// A computation of a fraction of a millisecond timed by its dispatch, behind a first call that
/// takes 300 ms (JAX compiles a function on its first call): 2 runs account for under 1 ms,
/// below what can be judged, so the runs are grown until they account for more; the row is
/// flagged. The same slow first call in an honest tool is not a finding.
#[test]
fn a_short_computation_timed_by_its_dispatch_is_flagged_behind_a_slow_first_call() {
    if !python_available() {
        return;
    }
    let t = tag("short");
    let tools = tool("honest", "none", &format!("{t} --first-call-ms 300"), ", timeout_s: 30")
        + &tool("async", "dispatch", &format!("{t} --dispatch-ms 0.3 --first-call-ms 300"), ", timeout_s: 30");
    let suite = format!(
        "name: short\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n{tools}"
    );
    let (code, rows) = run_suite(&suite, "short.yaml", &[], Duration::from_secs(120));
    assert_eq!(code, Some(1), "{rows:#?}");
    let honest = row(&rows, "hist-add", "honest");
    assert_eq!(honest["status"], "ok", "{honest}");
    let flagged = row(&rows, "hist-add", "async");
    assert_eq!(flagged["status"], "failed", "{flagged}");
    let message = flagged["message"].as_str().unwrap();
    assert!(message.contains("timing: implausible (reports dispatch time?)"), "{message}");
    // The finding names more runs than the 2 samples: the ones that made the time measurable.
    let runs: u64 = message
        .split_once(" run(s) are reported")
        .and_then(|(before, _)| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no run count in: {message}"));
    assert!(runs > 2, "{message}");
    assert!(processes_with(&t).is_empty());
}

/// A tool that crashes once: the next case's fresh process gets `start` and `define` again
/// (the planted tool refuses an `evaluate` of a module its process has not defined).
#[test]
fn a_restarted_tool_is_started_and_defined_again() {
    if !python_available() {
        return;
    }
    let t = tag("restart");
    let once = std::env::temp_dir().join(format!("{t}.crashed"));
    let _ = std::fs::remove_file(&once);
    let command = format!("python3 {} --fault crash-once --once {} --tag {t}", planted(), once.display());
    let suite = format!(
        "name: restart\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add, min]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n      - {{name: once, command: \"{command}\", timeout_s: 5}}\n"
    );
    let (code, rows) = run_suite(&suite, "restart.yaml", &[], Duration::from_secs(60));
    assert_eq!(code, Some(1), "{rows:#?}");
    let first = row(&rows, "hist-add", "once");
    assert_eq!(first["status"], "error", "{first}");
    assert!(first["message"].as_str().unwrap().contains("planted crash"), "{first}");
    let second = row(&rows, "hist-min", "once");
    assert_eq!(second["status"], "ok", "{second}");
    let _ = std::fs::remove_file(&once);
    assert!(processes_with(&t).is_empty());
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("adgauge-judge-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// SIGINT, SIGTERM and SIGHUP: the hanging tool is killed, the rows measured before are written, and
/// the exit code is 128 + the signal's number.
#[test]
fn an_interrupted_run_kills_its_tools_and_writes_what_it_measured() {
    if !python_available() {
        return;
    }
    for (signal, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let t = tag(&format!("interrupt-{signal}"));
        let waiting = std::env::temp_dir().join(format!("{t}.waiting"));
        let _ = std::fs::remove_file(&waiting);
        let suite = format!(
            "name: interrupted\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n      - cpu\n{}",
            tool("hang", "hang", &format!("{t} --once {}", waiting.display()), ", timeout_s: 600")
        );
        let path = temp_file("judge", &format!("interrupted-{signal}.yaml"), &suite);
        let out = fresh_dir(&format!("interrupt-{signal}"));
        let mut child = Command::new(BIN)
            .args(["run", "--suite", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The hanging tool makes its file when its first evaluate arrives: the cpu case is done
        // and the tool's case is in flight.
        let started = Instant::now();
        while !waiting.exists() {
            assert!(started.elapsed() < Duration::from_secs(60), "the hanging tool never got an evaluate");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&waiting);
        let kill = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let status = wait_at_most(&mut child, Duration::from_secs(20), "the interrupted run");
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(code), "SIG{signal}: {stderr}");
        assert!(stderr.contains(&format!("interrupted by SIG{signal}")), "{stderr}");
        let left = processes_with(&t);
        assert!(left.is_empty(), "SIG{signal}: tool processes outlived the run: {left:#?}");
        // The cpu case was measured before the signal and is in the run file; the interrupted
        // case is not.
        let files: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "csv"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?} ({stderr})");
        let csv = std::fs::read_to_string(&files[0]).unwrap();
        assert!(csv.contains("hist-add") && csv.contains(",cpu,"), "{csv}");
        assert!(!csv.contains(",hang,"), "{csv}");
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// `--isolate` kills a case's child at its time limit; the child's tool dies with it.
#[test]
fn an_isolated_case_killed_at_its_time_limit_leaves_no_tool_behind() {
    if !python_available() {
        return;
    }
    let t = tag("isolate");
    let suite = format!(
        "name: isolated\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05, case_time_limit_s: 1}}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [300]\n    k: [9]\n    dtypes: [f64]\n    tools:\n{}",
        tool("hang", "hang", &t, ", timeout_s: 600")
    );
    let (code, rows) = run_suite(&suite, "isolated.yaml", &["--isolate"], Duration::from_secs(60));
    assert_eq!(code, Some(1), "{rows:#?}");
    let r = row(&rows, "hist-add", "hang");
    assert_eq!(r["status"], "timeout", "{r}");
    // The child's tool is killed with it (no wait: the child kills its tools before exiting).
    let left = processes_with(&t);
    assert!(left.is_empty(), "tool processes outlived the isolated case: {left:#?}");
}

/// Sends `lines` to `adgauge ARGS` and returns its responses and exit code.
fn serve(args: &[&str], lines: &[String]) -> (Vec<Value>, Option<i32>, String) {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        // The server may stop reading (exit 2 on an overlong line).
        if writeln!(stdin, "{l}").is_err() {
            break;
        }
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let responses = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (responses, out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn evaluate(id: i64, module: &str, function: &str, input: &Value) -> String {
    serde_json::json!({"id": id, "kind": "evaluate", "module": module, "function": function, "input": input})
        .to_string()
}

#[test]
fn adgauge_tool_refuses_inputs_beyond_the_memory_limit_naming_field_and_bytes() {
    let cam = [0.01, -0.02, 0.03, 0.1, -0.2, 0.3, 700.0, 1.5, -2.5, 0.05, -0.005];
    let ba = serde_json::json!({"n": 1, "m": 1, "p": 40_000_000, "cam": cam, "x": [0.5, -0.25, 8.0], "w": 0.75, "feat": [3.0, -4.0]});
    let llsq = serde_json::json!({"x": [0.5], "n": 1u64 << 28});
    let (r, code, stderr) = serve(
        &["tool", "--max-memory", "1G"],
        &[
            evaluate(0, "llsq", "gradient", &llsq),
            evaluate(1, "ba", "objective", &ba),
            evaluate(2, "llsq", "primal", &serde_json::json!({"x": [1.0], "n": 3})),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(r.len(), 3, "{r:?}");
    let e = r[0]["error"].as_str().unwrap();
    assert_eq!(r[0]["success"], false);
    assert!(
        e.contains("field n = 268435456")
            && e.contains(&format!("needs {} bytes", (64u64 + 18) << 28))
            && e.contains("--max-memory"),
        "{e}"
    );
    let e = r[1]["error"].as_str().unwrap();
    assert_eq!(r[1]["success"], false);
    assert!(
        e.contains("sizes n m p = 1 1 40000000") && e.contains("bytes, more than the memory limit 1073741824"),
        "{e}"
    );
    // The server goes on: y = ((1 + 1)^2 + 1 + 0) / 2 at n = 3, x = (1): residuals -1 - 1, 0 - 1, 1 - 1.
    assert_eq!(r[2]["success"], true, "{}", r[2]);
    assert_eq!(r[2]["output"], 2.5);
}

#[test]
fn adgauge_tool_refuses_a_line_longer_than_its_bound() {
    let long = evaluate(1, "llsq", "primal", &serde_json::json!({"x": vec![0.5; 800], "n": 3}));
    assert!(long.len() > 2000);
    let (r, code, stderr) = serve(
        &["tool", "--max-input-bytes", "2000"],
        &[serde_json::json!({"id": 0, "kind": "define", "module": "llsq"}).to_string(), long],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(stderr.contains("<stdin>:2: a line longer than 2000 bytes (raise --max-input-bytes"), "{stderr}");
}

/// f32 values that overflow and one-character LSTM sequences are refused by `eval` (exit 2)
/// and `adgauge tool` (success: false) alike, naming the field.
#[test]
fn eval_and_the_server_refuse_the_same_inputs_naming_the_field() {
    use adgauge_datasets::lstm::LstmInput;
    let kmeans = serde_json::json!({"points": [[1.0, 2.0], [1e39, 0.0]], "centres": [[0.0, 0.0]]});
    let llsq = serde_json::json!({"x": [0.5, 1e39], "n": 4});
    let short = LstmInput::generate(1, 1, 2, 3);
    for (workload, name, text, field) in [
        ("kmeans", "kmeans.json", kmeans.to_string(), "field points[2]: 1e39 overflows f32"),
        ("llsq", "llsq.json", llsq.to_string(), "field x[1]: 1e39 overflows f32"),
    ] {
        let path = temp_file("judge", name, &text);
        let out = adgauge(&["eval", workload, "--input", path.to_str().unwrap(), "--dtype", "f32"]);
        assert_eq!(out.status.code(), Some(2), "{workload}: {}", common::stdout(&out));
        assert!(common::stderr(&out).contains(field), "{workload}: {}", common::stderr(&out));
    }
    let path = temp_file("judge", "lstm.txt", &short.to_text().unwrap());
    let out = adgauge(&["eval", "lstm", "--input", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stdout(&out));
    assert!(common::stderr(&out).contains("field sequence: 1 character(s); at least 2"), "{}", common::stderr(&out));
    let gb_kmeans = serde_json::json!({"points": [[1.0, 2.0], [1e39, 0.0]], "centroids": [[0.0, 0.0]]});
    let (r, code, stderr) = serve(
        &["tool", "--dtype", "f32"],
        &[
            evaluate(0, "kmeans", "cost", &gb_kmeans),
            evaluate(1, "llsq", "primal", &llsq),
            evaluate(2, "lstm", "objective", &adgauge_workloads::lstm::gradbench_input(&short)),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    for (response, field) in r.iter().zip([
        "field points[2]: 1e39 overflows f32",
        "field x[1]: 1e39 overflows f32",
        "field sequence: 1 character(s); at least 2",
    ]) {
        assert_eq!(response["success"], false, "{response}");
        assert!(response["error"].as_str().unwrap().contains(field), "{response}");
    }
}

#[test]
fn a_response_bound_below_a_kilobyte_is_refused_naming_the_key() {
    let suite = "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n    tools: [{name: t, command: \"true\", max_response_bytes: 10}]\n";
    let path = temp_file("judge", "bound.yaml", suite);
    let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--no-save"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stdout(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains("bound.yaml")
            && err.contains("max_response_bytes must be a whole number of bytes >= 1024, got 10"),
        "{err}"
    );
}
