//! The one case pipeline, end to end, for every registered workload: suite tolerance overrides
//! and the per-case time limit apply to all of them (they were ignored for the classic workloads
//! before the pipeline was one), `--isolate` runs any of them, and the harness names no
//! workload outside the registry.

use crate::common;

use adgauge_workloads::{ParamKind, Value as Param, Workload, registry};
use common::{adgauge, stderr, temp_file};
use serde_json::Value;

/// A suite entry for `w` at its `adgauge check` size (built from its schema, so a new workload
/// is covered without touching this file), f64, with the settings `extra`.
fn entry(w: &dyn Workload, extra: &str) -> String {
    let name = w.check_names().remove(0);
    let params = w.check_params(&name);
    let mut yaml = format!("  - workload: {}\n", w.family());
    for spec in w.schema() {
        let value = |key: &str| params.0.get(key).cloned();
        let text = match &spec.kind {
            ParamKind::Tuples { names, .. } => {
                let xs: Vec<String> = names.iter().filter_map(|n| value(n)).map(|v| v.to_string()).collect();
                format!("[[{}]]", xs.join(", "))
            }
            ParamKind::Float { .. } => value(spec.key).map(|v| v.to_string()).unwrap_or_default(),
            _ => match value(spec.key) {
                Some(Param::Name(s)) => format!("[{s}]"),
                Some(v) => format!("[{v}]"),
                None => continue,
            },
        };
        yaml += &format!("    {}: {text}\n", spec.key);
    }
    if !w.rules().is_empty() {
        yaml += "    rules: [auto]\n";
    }
    yaml + "    dtypes: [f64]\n" + extra
}

fn suite(name: &str, header: &str, extra: &str) -> std::path::PathBuf {
    let entries: String = registry().iter().map(|w| entry(*w, extra)).collect();
    temp_file("pipeline", &format!("{name}.yaml"), &format!("name: {name}\n{header}cases:\n{entries}"))
}

fn rows(args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let out = adgauge(args);
    (out.status.code(), common::case_rows(&out))
}

#[test]
fn suite_tolerance_overrides_apply_to_every_workload() {
    // No finite difference agrees with a derivative to 1e-300: every case must fail fd-vjp,
    // and with the override's tolerance, not the table's.
    let path = suite("tolerances", "tolerances: {fd-vjp: {f64: 1e-300}}\n", "");
    let (code, rows) = rows(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    assert_eq!(code, Some(1));
    assert_eq!(rows.len(), registry().len());
    for row in &rows {
        assert_eq!(row["status"], "failed", "{row}");
        let fd = row["checks"].as_array().unwrap().iter().find(|c| c["name"] == "fd-vjp").unwrap();
        assert_eq!(fd["tolerance"], 1e-300, "{row}");
        assert_eq!(fd["passed"], false, "{row}");
        // Every other check keeps its tolerance from the table and passes.
        assert!(
            row["checks"].as_array().unwrap().iter().filter(|c| c["name"] != "fd-vjp").all(|c| c["passed"] == true)
        );
    }
}

#[test]
fn the_case_time_limit_applies_to_every_workload() {
    let path = suite("limit", "timing: {case_time_limit_s: 1e-9}\n", "    validate: false\n");
    let (code, rows) = rows(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    assert_eq!(code, Some(1));
    assert_eq!(rows.len(), registry().len());
    for row in &rows {
        assert_eq!(row["status"], "timeout", "{row}");
        assert!(row["message"].as_str().unwrap().contains("reached before timing"), "{row}");
        assert!(row["primal"].is_null(), "{row}");
    }
}

#[test]
fn isolate_runs_every_workload_in_a_child() {
    let path = suite("isolate", "timing: {samples: 1, min_sample_ms: 1, time_limit_s: 0.05}\n", "    modes: [vjp]\n");
    let (code, rows) = rows(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet", "--isolate"]);
    assert_eq!(code, Some(0), "{rows:?}");
    assert_eq!(rows.len(), registry().len());
    for row in &rows {
        assert_eq!(row["status"], "ok", "{row}");
        assert!(row["vjp"]["median_s"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["primal"].is_null(), "only vjp was asked for: {row}");
    }
}

#[test]
fn unknown_workloads_tools_and_parameters_exit_2_listing_the_valid_names() {
    let bad = temp_file(
        "pipeline",
        "bad.yaml",
        "name: b\ncases:\n  - workload: kmeans\n    n: [2]\n    k: [1]\n    dd: [1]\n",
    );
    let out = adgauge(&["run", "--suite", bad.to_str().unwrap(), "--no-save"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("bad.yaml:6:5: cases[0].dd: unknown field `dd`") && err.contains("valid: n, k, d"), "{err}");
    let out = adgauge(&["check", "--workload", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown workload 'nope' (known: hist-add,"), "{}", stderr(&out));
    let out = adgauge(&["check", "--backend", "tpu"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "unknown tool 'tpu' (known: cpu, cpu-staged, cpu-traced, cpu-jit, cpu-jit-flush, opencl, cuda, candle,"
        ),
        "{}",
        stderr(&out)
    );
    let out = adgauge(&["eval", "nope", "--input", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown workload 'nope'"), "{}", stderr(&out));
}

/// Comment and test-module text is allowed to mention workloads (examples, fixtures); code is
/// not: every dispatch on a workload goes through the registry.
fn code_tokens(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| !c.is_ascii_alphanumeric()).map(str::to_ascii_lowercase).collect::<Vec<_>>())
        .filter(|t| !t.is_empty())
        .collect()
}

#[test]
fn no_workload_is_named_in_the_harness_outside_the_registry() {
    let families: Vec<&str> = registry().iter().map(|w| w.family()).collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            files += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            for t in code_tokens(&text) {
                if families.contains(&t.as_str()) {
                    found.push(format!("{}: {t}", path.display()));
                }
            }
        }
    }
    assert!(files >= 10, "read only {files} files from {}", dir.display());
    assert!(found.is_empty(), "workload names in harness code: {found:?}");
    // The scan itself sees names where they are.
    assert_eq!(code_tokens("let x = run(\"kmeans\"); // gmm\n#[cfg(test)]\nlstm"), ["let", "x", "run", "kmeans"]);
}

/// On a kernel device the peak bytes of an evaluation include its device buffers: k-means'
/// gradient holds the n x k distance matrix (and its adjoint) on the device, so the peak is at
/// least n k 4 bytes in f32 whatever the host allocates.
#[test]
fn device_buffers_count_in_the_peak_memory_of_kernel_devices() {
    if !common::opencl_available() {
        return;
    }
    let text = "name: m\ntiming: {samples: 1, min_sample_ms: 1, time_limit_s: 0.05}\ncases:\n  - workload: kmeans\n    n: [20000]\n    k: [16]\n    d: [2]\n    dtypes: [f32]\n    tools: [opencl]\n    validate: false\n";
    let path = temp_file("pipeline", "memory.yaml", text);
    let (code, rows) = rows(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    assert_eq!(code, Some(0), "{rows:?}");
    let distances = 20000 * 16 * 4;
    for mode in ["primal", "vjp"] {
        let peak = rows[0][format!("{mode}_peak_bytes")].as_u64().unwrap();
        assert!(peak >= distances, "{mode}: {peak} bytes < the {distances} of the distance matrix");
    }
}

/// A histogram entry runs each of its index dtypes as a case of its own, the rows record it
/// (`param.index_dtype` in the file, part of the case id), and an entry without the key runs
/// i32.
#[test]
fn histogram_entries_run_and_record_each_index_dtype() {
    let entry = |op: &str, extra: &str| {
        format!(
            "  - {{workload: hist, ops: [{op}], rules: [auto], n: [3000], k: [10], dtypes: [f64], validate: false{extra}}}\n"
        )
    };
    let yaml =
        format!("name: index-dtypes\ncases:\n{}{}", entry("add", ", index_dtypes: [i32, i64]"), entry("min", ""));
    let path = temp_file("pipeline", "index-dtypes.yaml", &yaml);
    let out_dir = std::env::temp_dir().join(format!("adgauge-pipeline-{}-index-out", std::process::id()));
    let (code, rows) = rows(&[
        "run",
        "--suite",
        path.to_str().unwrap(),
        "--json",
        "--no-save",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    let seen: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (r["workload"].as_str().unwrap().to_string(), r["params"]["index_dtype"].as_str().unwrap().to_string())
        })
        .collect();
    let want: Vec<(String, String)> =
        [("hist-add", "i32"), ("hist-add", "i64"), ("hist-min", "i32")].map(|(w, t)| (w.into(), t.into())).to_vec();
    assert_eq!(seen, want);
    assert_ne!(rows[0]["case_id"], rows[1]["case_id"]);
    assert!(rows.iter().all(|r| r["status"] == "ok"), "{rows:?}");
    let file = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "csv"));
    let file = file.expect("a CSV file");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.lines().next().unwrap().split(',').any(|c| c == "param.index_dtype"), "{text}");
    let (_, saved) = adgauge_reports::store::read_run(&file).unwrap();
    let saved: Vec<&str> = saved.iter().map(|r| r.params["index_dtype"].as_str()).collect();
    assert_eq!(saved, ["i32", "i64", "i32"]);
}

/// A run with histograms on a CPU device measures the roofline once, before its cases, and
/// records it on every line of its file and its `--json` rows, with each histogram primal's
/// achieved bandwidth and fraction of it; `--wide` shows them as the `roofline` column. A run
/// without histograms records none (null, not zero). The roofline here is over 1 MiB
/// (`common::adgauge`).
#[test]
fn a_histogram_run_records_the_roofline_and_an_llsq_run_none() {
    let hist = "  - {workload: hist, ops: [add], rules: [auto], n: [3000], k: [10, 1000], dtypes: [f32], index_dtypes: [i32], validate: false}\n";
    let llsq = "  - {workload: llsq, n: [40], m: [5], dtypes: [f64], validate: false}\n";
    let run = |name: &str, entries: &str, wide: bool| {
        let path = temp_file("pipeline", &format!("{name}.yaml"), &format!("name: {name}\ncases:\n{entries}"));
        let dir = std::env::temp_dir().join(format!("adgauge-pipeline-{}-{name}-out", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let format = if wide { "--wide" } else { "--json" };
        let out =
            adgauge(&["run", "--suite", path.to_str().unwrap(), format, "--quiet", "--out", dir.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "csv"))
            .expect("a CSV file");
        (out, adgauge_reports::store::read_run(&file).unwrap())
    };
    let (out, (info, rows)) = run("roof-hist", &format!("{hist}{llsq}"), false);
    let roof = info.roofline.expect("a run with histograms on cpu records the roofline");
    assert_eq!(roof.tools, ["cpu"]);
    assert_eq!(roof.threads, rows[0].threads);
    assert_eq!(roof.random.iter().map(|r| r.bins).collect::<Vec<_>>(), [10, 1000]);
    assert!(roof.seq_read_gb_s > 0.0 && roof.random.iter().all(|r| r.reads_per_s > 0.0 && r.updates_per_s > 0.0));
    let lines: Vec<Value> = common::stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.iter().all(|l| l["roofline_bins"] == serde_json::json!([10.0, 1000.0])), "{lines:?}");
    assert!(lines.iter().all(|l| l["roofline_seq_read_gb_s"].as_f64() == Some(roof.seq_read_gb_s)));
    let primal_hist: Vec<&Value> =
        lines.iter().filter(|l| l["mode"] == "primal" && l["workload"] == "hist-add").collect();
    assert_eq!(primal_hist.len(), 2);
    for l in primal_hist {
        // n = 3000 i32 indices and f32 values, k f32 bins read and written.
        let bytes = 3000.0 * 8.0 + 2.0 * l["param.k"].as_f64().unwrap() * 4.0;
        let want = bytes / l["median_s"].as_f64().unwrap() / 1e9;
        let got = l["achieved_gb_s"].as_f64().unwrap();
        assert!((got - want).abs() <= 1e-12 * want, "{got} {want}");
        let fraction = l["roofline_fraction"].as_f64().unwrap();
        assert!((fraction - want / roof.seq_read_gb_s).abs() <= 1e-12 * fraction, "{l}");
    }
    // Not a histogram, or not a primal: no bandwidth.
    assert!(
        lines
            .iter()
            .filter(|l| l["mode"] != "primal" || l["workload"] == "llsq")
            .all(|l| l["achieved_gb_s"].is_null() && l["roofline_fraction"].is_null())
    );
    let (out, (info, _)) = run("roof-llsq", llsq, false);
    assert_eq!(info.roofline, None);
    for l in common::stdout(&out).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        for column in ["roofline_threads", "roofline_seq_read_gb_s", "roofline_bins", "roofline_tools"] {
            assert!(l[column].is_null(), "{column}: {l}");
        }
    }
    let (out, _) = run("roof-wide", hist, true);
    let table = common::stdout(&out);
    let header = table.lines().find(|l| l.starts_with("workload")).expect("the wide header");
    assert!(header.contains(" roofline  check"), "{header}");
    assert!(table.contains("  roofline (") && table.contains("sequential read"), "{table}");
    let row = table.lines().find(|l| l.starts_with("hist-add")).expect("a row");
    let at = header.find(" roofline").unwrap();
    // The column's 25 characters end where its header does; the run measured the update rate
    // at the case's k, so the cell has the bound too.
    let cell = &row[at + 9 - 25..at + 9];
    assert!(cell.contains(" GB/s ") && cell.contains("%, bound ") && cell.ends_with('%'), "{row}");
}
