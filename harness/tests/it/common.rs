//! Helpers shared by the end-to-end tests: run the binary, read its JSON, write temporary input
//! files, run a measurement in a process of its own, and skip a test that needs an absent GPU
//! runtime (or fail when `ADGAUGE_REQUIRE` lists it, as CI does).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs the adgauge binary with `args`, measuring a run's roofline over 1 MiB (the tests check
/// that it is recorded, not its value; the default 256 MiB takes seconds in a debug build).
pub fn adgauge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adgauge")).args(args).env("ADGAUGE_ROOFLINE_BYTES", "1048576").output().unwrap()
}

/// Sends protocol lines to `adgauge ARGS` (a `tool` command) on stdin and returns its responses,
/// asserting a clean exit.
pub fn converse(args: &[&str], lines: &[Value]) -> Vec<Value> {
    converse_program(env!("CARGO_BIN_EXE_adgauge"), args, lines)
}

/// Sends protocol lines to `program ARGS` on stdin and returns its responses, asserting a clean
/// exit.
pub fn converse_program(program: impl AsRef<std::ffi::OsStr>, args: &[&str], lines: &[Value]) -> Vec<Value> {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let mut child = Command::new(program).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
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

/// The external tools' Python: `ADGAUGE_TOOLS_PYTHON`, else `python` in `ADGAUGE_TOOLS_VENV` or
/// `~/.cache/adgauge-tools-venv` (where `scripts/setup-tools.sh` puts it).
pub fn tools_python() -> PathBuf {
    if let Some(p) = std::env::var_os("ADGAUGE_TOOLS_PYTHON").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let venv = std::env::var_os("ADGAUGE_TOOLS_VENV").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/adgauge-tools-venv")
    });
    venv.join("bin/python")
}

/// The tools' Python when it imports `module`; otherwise prints why the test skips (or fails,
/// with `word` in `ADGAUGE_REQUIRE`).
pub fn python_with(module: &str, word: &str) -> Option<PathBuf> {
    let python = tools_python();
    let why = match Command::new(&python).args(["-c", &format!("import {module}")]).output() {
        Ok(o) if o.status.success() => return Some(python),
        Ok(o) => String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("").to_string(),
        Err(e) => e.to_string(),
    };
    let why = format!("{} cannot import {module}: {why}", python.display());
    adgauge_testkit::skip(word, why, "export ADGAUGE_TOOLS_PYTHON=\"$(scripts/setup-tools.sh)\"");
    None
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The rows `adgauge run --json` printed (one JSON object per case and mode, the run file's
/// columns), put back together as one JSON object per case in the rows' own layout
/// (`ResultRow`), checks in name order.
pub fn case_rows(out: &Output) -> Vec<Value> {
    let text = stdout(out);
    if text.trim().is_empty() {
        return Vec::new();
    }
    let (_, rows) = adgauge_reports::store::rows_from_json_lines(&text, std::path::Path::new("stdout"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    rows.iter().map(|r| serde_json::to_value(r).unwrap()).collect()
}

/// The JSON object a successful command printed.
pub fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Writes `text` to `name` in a folder of this test binary (`group` keeps binaries apart).
pub fn temp_file(group: &str, name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("adgauge-{group}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// ADBench's rho, bounded below by 1 in the denominator: |a - b| <= tol max(1, |a| + |b|).
pub fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (a.abs() + b.abs()).max(1.0)
}

/// Every number in a JSON value (nested arrays flattened in order; non-finite ones as eval
/// spells them).
pub fn numbers(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(xs) => xs.iter().flat_map(numbers).collect(),
        // eval prints non-finite values as strings ("inf", "-inf", "nan").
        Value::String(s) => vec![s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))],
        other => vec![other.as_f64().unwrap()],
    }
}

/// Whether the OpenCL device starts; when it does not, prints why (a skip) or, with `opencl` in
/// `ADGAUGE_REQUIRE`, fails the test.
pub fn opencl_available() -> bool {
    match adgauge_backends::OpenCl::new() {
        Ok(_) => true,
        Err(e) => {
            adgauge_testkit::device_unavailable("opencl", e);
            false
        }
    }
}

/// [`opencl_available`] for the CUDA device (`cuda` in `ADGAUGE_REQUIRE`).
pub fn cuda_available() -> bool {
    match adgauge_backends::Cuda::new() {
        Ok(_) => true,
        Err(e) => {
            adgauge_testkit::device_unavailable("cuda", e);
            false
        }
    }
}

/// The planted-bug GradBench tool (`tools/planted/run.py`), as an absolute path.
pub fn planted() -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/planted/run.py");
    script.canonicalize().unwrap().display().to_string()
}

/// Whether python3 runs (the planted tool is a Python script); when it does not, prints why (a
/// skip) or, with `python` in `ADGAUGE_REQUIRE`, fails the test.
pub fn python_available() -> bool {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        adgauge_testkit::skip(
            "python",
            "python3 does not run (the planted-bug tool is a Python script)",
            "install python3 (stdlib only)",
        );
    }
    ok
}

/// Runs `body`, the test named `test` in this binary (`module::function`), in a process of its
/// own with no other test beside it: for the counting allocator's measurements, whose figures
/// are process-wide. The test's own call re-runs this binary on that one test and checks that
/// it ran and passed; in that child (`ADGAUGE_TEST_ALONE` names the test), it runs `body`.
pub fn alone(test: &str, body: impl FnOnce()) {
    const VAR: &str = "ADGAUGE_TEST_ALONE";
    if std::env::var(VAR).as_deref() == Ok(test) {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out =
        Command::new(exe).args([test, "--exact", "--test-threads=1", "--nocapture"]).env(VAR, test).output().unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{test}, alone in its process, failed:\n{text}");
    assert!(stdout(&out).contains("1 passed"), "{test} did not run alone in its process:\n{text}");
}
