//! Inputs that used to crash or run unbounded (issue "Validation power and hardening"): each is
//! refused with exit 2 naming what is wrong, or computed, never a panic.

use crate::common;

use common::{adgauge, json, numbers, opencl_available, stderr, temp_file};

/// No bins: every index is out of range, so the histogram is empty and every adjoint of vals is 0
/// (semantics: out-of-range indices are ignored). The CPU device panicked here before.
#[test]
fn zero_bins_give_an_empty_histogram_for_every_operator_rule_and_mode() {
    let case = format!(
        r#"{{"k": 0, "inds": {inds:?}, "vals": {ones:?}, "dest": [], "hist_bar": [], "vals_dot": {ones:?}, "dest_dot": []}}"#,
        inds = [-1i64; 16],
        ones = [1.0f64; 16]
    );
    let path = temp_file("hardening", "k0.json", &case);
    let p = path.to_str().unwrap();
    let mut backends = vec!["cpu"];
    if opencl_available() {
        backends.push("opencl");
    }
    for backend in backends {
        for op in ["add", "mul", "min", "max", "logaddexp", "hypot"] {
            for rule in ["auto", "special", "general-sort", "general-chunked"] {
                let w = format!("hist-{op}");
                let at = format!("{w} {rule} on {backend}");
                let base = ["eval", &w, "--input", p, "--rule", rule, "--backend", backend];
                let primal = json(&adgauge(&base));
                assert_eq!(numbers(&primal["hist"]), Vec::<f64>::new(), "{at}");
                let vjp = json(&adgauge(&[&base[..], &["--mode", "vjp"]].concat()));
                assert_eq!(numbers(&vjp["vals_bar"]), vec![0.0; 16], "{at}");
                assert_eq!(numbers(&vjp["dest_bar"]), Vec::<f64>::new(), "{at}");
                let jvp = json(&adgauge(&[&base[..], &["--mode", "jvp"]].concat()));
                assert_eq!(numbers(&jvp["hist_dot"]), Vec::<f64>::new(), "{at}");
            }
        }
    }
}

#[test]
fn unbounded_inputs_and_thread_counts_are_refused() {
    let out = adgauge(&["--threads", "100000", "check", "--workload", "hist-add"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a thread count in [1, 1024]"), "{}", stderr(&out));
    let out = adgauge(&["eval", "hist-add", "--input", "/dev/zero", "--max-input-bytes", "65536"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/dev/zero: larger than 65536 bytes"), "{}", stderr(&out));
    let bytes = temp_file("hardening", "latin1.json", "{\"k\": 1}");
    std::fs::write(&bytes, b"{\"k\": 1, \"op\": \"\xe9\"}").unwrap();
    let out = adgauge(&["eval", "hist-add", "--input", bytes.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not UTF-8 text (invalid byte at offset 16)"), "{}", stderr(&out));
}

/// Inputs that used to be accepted silently: a key given twice (serde kept the last) and a
/// finite f64 that f32 cannot hold (it became inf). Both are now exit 2 naming the place.
#[test]
fn duplicate_keys_and_values_that_overflow_the_dtype_are_refused() {
    let twice = temp_file(
        "hardening",
        "twice.json",
        "{\"k\": 1, \"inds\": [0],\n \"vals\": [1], \"vals\": [2], \"dest\": [0]}",
    );
    let out = adgauge(&["eval", "hist-add", "--input", twice.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("duplicate key \"vals\" at line 2"), "{}", stderr(&out));
    let kmeans =
        temp_file("hardening", "twice-kmeans.json", "{\"points\": [[1]], \"centres\": [[0]], \"points\": [[2]]}");
    let out = adgauge(&["eval", "kmeans", "--input", kmeans.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("duplicate key \"points\""), "{}", stderr(&out));

    let big = temp_file("hardening", "big.json", "{\"k\": 2, \"inds\": [0, 1], \"vals\": [1, 1e39], \"dest\": [0, 0]}");
    let out = adgauge(&["eval", "hist-add", "--input", big.to_str().unwrap(), "--dtype", "f32"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("field vals[1]: 1e39 overflows f32"), "{}", stderr(&out));
    // The same input is fine in f64, and an explicit infinity stays allowed in f32.
    let sum = json(&adgauge(&["eval", "hist-add", "--input", big.to_str().unwrap(), "--dtype", "f64"]));
    assert_eq!(numbers(&sum["hist"]), vec![1.0, 1e39]);
    let inf = temp_file("hardening", "inf.json", "{\"k\": 1, \"inds\": [0], \"vals\": [\"inf\"], \"dest\": [0]}");
    let sum = json(&adgauge(&["eval", "hist-add", "--input", inf.to_str().unwrap(), "--dtype", "f32"]));
    assert_eq!(sum["hist"], serde_json::json!(["inf"]), "infinities print as the string \"inf\"");
}

/// hypot of an empty bin with dest -3 gave 3 on the CPU and -3 on OpenCL: a negative dest is
/// outside hypot's domain (bins are magnitudes) and is now refused on every device.
#[test]
fn a_negative_hypot_dest_is_refused_naming_it() {
    let case = temp_file("hardening", "hypot.json", "{\"k\": 2, \"inds\": [1], \"vals\": [-4], \"dest\": [3, -3]}");
    let mut backends = vec!["cpu"];
    if opencl_available() {
        backends.push("opencl");
    }
    for backend in backends {
        let out = adgauge(&["eval", "hist-hypot", "--input", case.to_str().unwrap(), "--backend", backend]);
        assert_eq!(out.status.code(), Some(2), "{backend}: {}", stderr(&out));
        assert!(stderr(&out).contains("field dest[1]: -3 is outside hypot's domain"), "{}", stderr(&out));
    }
    // Within the domain: bin 0 keeps its 3 (empty), bin 1 is hypot(0, -4) = 4.
    let ok = temp_file("hardening", "hypot-ok.json", "{\"k\": 2, \"inds\": [1], \"vals\": [-4], \"dest\": [3, 0]}");
    let h = json(&adgauge(&["eval", "hist-hypot", "--input", ok.to_str().unwrap()]));
    assert_eq!(numbers(&h["hist"]), vec![3.0, 4.0]);
}

/// Suite values that overflowed `Duration` or asked for absurd work: refused before running.
#[test]
fn absurd_suite_settings_are_refused_naming_the_field() {
    for (timing, field) in [
        ("{case_time_limit_s: 1e300}", "timing.case_time_limit_s"),
        ("{min_sample_ms: 1e22}", "timing.min_sample_ms"),
        ("{samples: 1000000000000}", "timing.samples"),
    ] {
        let text =
            format!("name: x\ntiming: {timing}\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n");
        let path = temp_file("hardening", "absurd.yaml", &text);
        let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--no-save"]);
        assert_eq!(out.status.code(), Some(2), "{timing}");
        assert!(stderr(&out).contains(field), "{timing}: {}", stderr(&out));
    }
    let zero_k = temp_file(
        "hardening",
        "k0.yaml",
        "name: x\ncases:\n  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [0]\n",
    );
    let out = adgauge(&["run", "--suite", zero_k.to_str().unwrap(), "--no-save"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("k0.yaml:6:9: cases[0].k: 0 is outside [1,"), "{}", stderr(&out));
}

/// `check` judges every histogram rule on the stress data (ties, neutral elements, several
/// chunks) against the oracle: a line per case (every rule, on i32 and on i64 indices), all
/// within the oracle's tolerance.
#[test]
#[ignore = "slow tier, 32 s in a debug build on 2 cores: .ci/run runs it"]
fn check_runs_the_stress_comparison_for_every_rule() {
    let out = adgauge(&["check", "--workload", "hist-max", "--workload", "hist-logaddexp", "--dtype", "f64"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" stress ")).collect();
    assert_eq!(lines.len(), 16, "{text}");
    for index in ["index_dtype=i32", "index_dtype=i64"] {
        assert_eq!(lines.iter().filter(|l| l.contains(index)).count(), 8, "{index}: {text}");
    }
    assert!(lines.iter().all(|l| l.ends_with("ok") && l.contains("tol 1.0e-10")), "{text}");
}

/// Sizes are checked against the memory limit before anything is allocated: replicated ADBench
/// headers (a 28-byte GMM file announcing 10^8 points took 16.5 GB; BA with p = 4e8 aborted)
/// and suite sizes (n = 2^32, BA with p = 10^8 aborted on allocation). Exit 2 names the field
/// and the bytes.
#[test]
fn sizes_beyond_the_memory_limit_are_refused_naming_the_field_and_bytes() {
    let gmm = temp_file("hardening", "rep.txt", "1 1 100000000\n0.0\n0.5\n0.1\n0.5\n1 0\n");
    let g = gmm.to_str().unwrap();
    let out = adgauge(&["--max-memory", "100M", "eval", "gmm", "--input", g, "--gmm-replicate-point"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let want = "rep.txt:1: header 'd k n' = 1 1 100000000: the replicated points (n*d*8) needs 800000000 bytes, \
                more than the memory limit 104857600";
    assert!(stderr(&out).contains(want), "{}", stderr(&out));
    // The points fit in 1 GiB; the evaluation (about 100 bytes per point) does not.
    let out = adgauge(&["--max-memory", "1G", "eval", "gmm", "--input", g, "--gmm-replicate-point"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("(n*k*d*100) + the parameters) needs 10000000008 bytes"), "{}", stderr(&out));

    let ba = temp_file("hardening", "ba.txt", &format!("1 1 400000000\n{}\n1 2 3\n1 2\n1\n", ["0.1"; 11].join(" ")));
    let out = adgauge(&["--max-memory", "1G", "eval", "ba", "--input", ba.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let want =
        "ba.txt:1: header 'n m p' = 1 1 400000000: the replicated problem ((11n + 3m + 5p)*8) needs 16000000112 bytes";
    assert!(stderr(&out).contains(want), "{}", stderr(&out));

    for (entry, want) in [
        ("  - workload: hist\n    ops: [add]\n    n: [4294967296]\n    k: [2]\n", "huge.yaml:5:8: cases[0].n: "),
        ("  - workload: ba\n    sizes: [[1, 1, 100000000]]\n", "huge.yaml:4:12: cases[0].sizes: "),
    ] {
        let suite = temp_file("hardening", "huge.yaml", &format!("name: x\ncases:\n{entry}"));
        let out = adgauge(&["--max-memory", "1G", "run", "--suite", suite.to_str().unwrap(), "--no-save"]);
        assert_eq!(out.status.code(), Some(2), "{entry}");
        assert!(
            stderr(&out).contains(want) && stderr(&out).contains("more than the memory limit 1073741824"),
            "{}",
            stderr(&out)
        );
    }
    let out = adgauge(&["--max-memory", "12Q", "check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'12Q' is not a byte count"), "{}", stderr(&out));
}

/// `merge` combined shards of different seeds or adgauge versions (relabelling 9.9.9's rows as
/// the first run's version) and files of different schemas (writing a file the history then
/// rejected). Now each is refused with exit 2 naming both files; shards of one run still merge.
#[test]
fn merge_refuses_runs_of_different_seeds_versions_and_schemas_naming_the_files() {
    let suite = temp_file(
        "hardening-merge",
        "two.yaml",
        "name: two\ntiming: {samples: 2, min_sample_ms: 0.1, time_limit_s: 0.01}\ncases:\n  - workload: hist\n    ops: [add, mul]\n    rules: [auto]\n    n: [50]\n    k: [3]\n    validate: false\n",
    );
    let dir = suite.parent().unwrap().to_path_buf();
    let mut shards = Vec::new();
    for i in 1..=2 {
        let out_dir = dir.join(format!("shard{i}"));
        let _ = std::fs::remove_dir_all(&out_dir);
        let shard = format!("{i}/2");
        let out = adgauge(&[
            "run",
            "--suite",
            suite.to_str().unwrap(),
            "--shard",
            &shard,
            "--out",
            out_dir.to_str().unwrap(),
            "--no-save",
            "--quiet",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let file = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "csv"))
            .unwrap();
        shards.push(file);
    }
    let merged = dir.join("merged");
    let _ = std::fs::remove_dir_all(&merged);
    let (a, b) = (shards[0].to_str().unwrap(), shards[1].to_str().unwrap());
    let out = adgauge(&["merge", a, b, "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let text = std::fs::read_to_string(&shards[1]).unwrap();
    for (name, from, to, what) in [
        ("seed.csv", ",20261122,", ",7,", "different seeds ([20261122] and [7])"),
        ("version.csv", ",0.1.0,", ",9.9.9,", "different adgauge versions (0.1.0 and 9.9.9)"),
    ] {
        assert!(text.contains(from), "{name}");
        let changed = temp_file("hardening-merge", name, &text.replace(from, to));
        let out = adgauge(&["merge", a, changed.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        let want = format!("{a} and {} are of {what}", changed.display());
        assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    }
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../reports/tests/fixtures");
    let (v1, v2) = (format!("{fixtures}/schema1.csv"), format!("{fixtures}/schema2.csv"));
    let out = adgauge(&["merge", &v1, a, "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let want = format!("are of different schemas (schema 1 and schema {})", adgauge_reports::SCHEMA_VERSION);
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    let before = std::fs::read_dir(&merged).unwrap().count();
    let out = adgauge(&["merge", &v1, &v2, "--out", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&merged).unwrap().count(), before, "nothing written");
}

/// Messages stay readable: a 1 MB op name or a 10 MB string in an input is cut to its start
/// and length (it was echoed in full); a suite's invalid UTF-8 names line and byte offset; an
/// empty `cases:` is refused (it ran zero cases with exit 0); a bad value names its own line.
#[test]
fn huge_strings_are_cut_and_bad_suites_name_line_offset_and_key() {
    let op = temp_file(
        "hardening-msg",
        "op.json",
        &format!(r#"{{"k": 1, "inds": [0], "vals": [1], "dest": [0], "op": "{}"}}"#, "x".repeat(1_000_000)),
    );
    let out = adgauge(&["eval", "hist-add", "--input", op.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.len() < 1000 && e.contains("field op: 'xxxx") && e.contains("... (1000002 bytes) does not match"),
        "{}",
        &e[..e.len().min(2000)]
    );
    let s = temp_file(
        "hardening-msg",
        "str.json",
        &format!(r#"{{"k": 1, "inds": [0], "vals": ["{}"], "dest": [0]}}"#, "a".repeat(10_000_000)),
    );
    let out = adgauge(&["eval", "hist-add", "--input", s.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.len() < 1000 && e.contains("field vals[0]: expected a number") && e.contains("(10000002 bytes)"),
        "{}",
        &e[..e.len().min(2000)]
    );

    let entry = "  - workload: hist\n    ops: [add]\n    n: [10]\n    k: [2]\n";
    let latin1 = temp_file("hardening-msg", "latin1.yaml", "");
    std::fs::write(&latin1, [format!("name: x\ncases:\n{entry}    dtypes: [f32, ").as_bytes(), b"\xff]\n"].concat())
        .unwrap();
    let out = adgauge(&["run", "--suite", latin1.to_str().unwrap(), "--no-save"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("latin1.yaml:7: not UTF-8 text (invalid byte at offset 90)"), "{}", stderr(&out));
    let empty = temp_file("hardening-msg", "empty.yaml", "name: x\ncases: []\n");
    let out = adgauge(&["run", "--suite", empty.to_str().unwrap(), "--no-save"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("empty.yaml: cases: is empty"), "{}", stderr(&out));
    let line10 = temp_file(
        "hardening-msg",
        "line10.yaml",
        &format!("name: x\ntiming: {{samples: 3}}\ncases:\n{entry}{}", entry.replace("[10]", "[-1]")),
    );
    let out = adgauge(&["run", "--suite", line10.to_str().unwrap(), "--no-save"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("line10.yaml:10:9: cases[1].n: expected a whole number in [0, 4294967296], got -1"),
        "{}",
        stderr(&out)
    );
}

/// Found by the eval_json fuzz target: llsq with one coefficient and n = 25001555 samples
/// (within its matrix-entry bound) took more than 2 GB in reverse mode. Its footprint is now
/// checked against the memory limit before evaluating.
#[test]
fn llsq_sample_counts_beyond_the_memory_limit_are_refused() {
    let case = temp_file("hardening", "llsq.json", r#"{"x": [0], "n": 25001555}"#);
    let out = adgauge(&["--max-memory", "256M", "eval", "llsq", "--input", case.to_str().unwrap(), "--mode", "vjp"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let want = format!(
        "llsq.json: field n = 25001555: this case (about 64 bytes per sample point and 18 per matrix entry (64n + 18nm)) needs {} bytes",
        (64 + 18) * 25001555u64
    );
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    let small = temp_file("hardening", "llsq-small.json", r#"{"x": [0.5], "n": 3}"#);
    let out = adgauge(&["--max-memory", "256M", "eval", "llsq", "--input", small.to_str().unwrap(), "--mode", "vjp"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The issue's numeric reproductions through `eval`, on every rule and device: `*` with values
/// whose product overflows into a zero dest (was NaN; zeros absorb: 0, adjoints 0 and dest's inf)
/// and logaddexp at an exact tie of magnitude 1e16 (was 1/1 on `auto`, 1/2 each elsewhere: the
/// tie splits evenly everywhere now).
#[test]
fn overflowed_products_and_large_logaddexp_ties_agree_on_every_rule_and_device() {
    let mul = temp_file(
        "hardening",
        "mul-overflow.json",
        r#"{"k": 1, "inds": [0, 0], "vals": [1e200, 1e200], "dest": [0], "hist_bar": [1]}"#,
    );
    let lae = temp_file(
        "hardening",
        "lae-tie.json",
        r#"{"k": 1, "inds": [0], "vals": [1e16], "dest": [1e16], "hist_bar": [1]}"#,
    );
    let mut backends = vec!["cpu"];
    if opencl_available() {
        backends.push("opencl");
    }
    for backend in backends {
        for rule in ["auto", "general-sort", "general-chunked"] {
            let at = format!("{rule} on {backend}");
            let run = |w: &str, input: &std::path::Path| {
                let args = [
                    "eval",
                    w,
                    "--input",
                    input.to_str().unwrap(),
                    "--mode",
                    "vjp",
                    "--rule",
                    rule,
                    "--backend",
                    backend,
                    "--dtype",
                    "f64",
                ];
                json(&adgauge(&args))
            };
            let got = run("hist-mul", &mul);
            assert_eq!(numbers(&got["hist"]), vec![0.0], "{at}");
            assert_eq!(numbers(&got["vals_bar"]), vec![0.0, 0.0], "{at}");
            assert_eq!(numbers(&got["dest_bar"]), vec![f64::INFINITY], "{at}");
            let got = run("hist-logaddexp", &lae);
            assert_eq!(numbers(&got["hist"]), vec![1e16], "{at}");
            assert_eq!((numbers(&got["vals_bar"]), numbers(&got["dest_bar"])), (vec![0.5], vec![0.5]), "{at}");
        }
    }
}
