//! The Rust peers (`harness/src/peers/`, off-by-default features) judged by the same checks as
//! every tool: each test runs only where its feature is compiled in (`cargo test --features
//! peers`) and says so where it is not. The expected values are the histogram semantics worked
//! by hand; the classifications are what the checks must find without knowing the crate.

use crate::common;

use std::process::Command;

use common::adgauge;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_adgauge");

/// Runs `adgauge run` on the peers' suite for these operators and tools; its rows.
#[allow(dead_code)]
fn rows(ops: &str, tools: &str, modes: &str) -> Vec<Value> {
    rows_sized(ops, tools, modes, "n: [2000]\n    k: [16]")
}

/// As [`rows`], with the suite's size lines given.
#[allow(dead_code)]
fn rows_sized(ops: &str, tools: &str, modes: &str, size: &str) -> Vec<Value> {
    let suite = format!(
        "name: peers-test\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: hist\n    ops: [{ops}]\n    rules: [auto]\n    {size}\n    dtypes: [f64]\n    modes: [{modes}]\n    tools: [{tools}]\n"
    );
    let path = common::temp_file(
        "peers",
        &format!("{}-{}-{}.yaml", tools.replace(", ", "-"), ops.replace(", ", "-"), size.len()),
        &suite,
    );
    let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    common::case_rows(&out)
}

#[allow(dead_code)]
fn row<'a>(rows: &'a [Value], workload: &str, tool: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["workload"] == workload && r["backend"] == tool)
        .unwrap_or_else(|| panic!("{workload} {tool}"))
}

/// One `vjp` of the `hist` module through `adgauge tool --backend PEER`.
#[allow(dead_code)]
fn peer_vjp(peer: &str, input: Value) -> Value {
    let out = common::converse(
        &["tool", "--backend", peer],
        &[
            serde_json::json!({"id": 0, "kind": "start"}),
            serde_json::json!({"id": 1, "kind": "define", "module": "hist"}),
            serde_json::json!({"id": 2, "kind": "evaluate", "module": "hist", "function": "vjp", "input": input}),
        ],
    );
    assert_eq!(out[2]["success"], true, "{out:?}");
    out[2]["output"].clone()
}

#[allow(dead_code)]
fn numbers(v: &Value) -> Vec<f64> {
    common::numbers(v)
}

/// What a failure message's per-argument breakdown, `(vals 1.1e-12 ok, dest 1.1e-1 wrong)`,
/// says of argument `arg`: "ok" or "wrong".
#[allow(dead_code)]
fn verdict<'a>(message: &'a str, arg: &str) -> Option<&'a str> {
    let parts = message.rsplit_once(" (")?.1.strip_suffix(')')?;
    parts.split(", ").find_map(|p| p.strip_prefix(arg)?.strip_prefix(' ')?.split(' ').nth(1))
}

#[cfg(not(feature = "candle"))]
#[test]
fn a_peer_not_compiled_in_is_unavailable_with_its_feature() {
    let out = adgauge(&["check", "--backend", "candle", "--workload", "hist-add"]);
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("--features candle"), "{}", common::stderr(&out));
    let out = Command::new(BIN).args(["tool", "--backend", "candle"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    adgauge_testkit::skip(
        "candle",
        "the candle peer is not compiled in, so its findings are not tested",
        "cargo test --features candle",
    );
}

/// candle 0.11.1's `scatter_add` backward masks the initial tensor's gradient at every scattered
/// bin: dest's adjoint must be hist_bar (dest enters every bin once, added), candle gives 0
/// where a value landed. vals' adjoint, hist_bar gathered at each index, is right, and
/// `index_add` (the same sum) is right throughout.
#[cfg(feature = "candle")]
#[test]
fn candle_scatter_add_masks_the_dest_adjoint_and_the_checks_find_it() {
    // Bins 0 and 2 receive values, bin 1 none; position 3 is out of range.
    let input = serde_json::json!({"op": "add", "k": 3, "inds": [0, 2, 0, 5], "vals": [1, 2, 3, 4], "dest": [10, 20, 30], "hist_bar": [1, 2, 3]});
    let out = peer_vjp("candle", input.clone());
    assert_eq!(numbers(&out["hist"]), [14.0, 20.0, 32.0]);
    assert_eq!(numbers(&out["vals_bar"]), [1.0, 3.0, 1.0, 0.0]);
    assert_eq!(numbers(&out["dest_bar"]), [0.0, 2.0, 0.0], "the masked dest adjoint (right: [1, 2, 3])");
    let out = peer_vjp("candle-index-add", input);
    assert_eq!(numbers(&out["vals_bar"]), [1.0, 3.0, 1.0, 0.0]);
    assert_eq!(numbers(&out["dest_bar"]), [1.0, 2.0, 3.0]);

    // Where the values outnumber the bins (or fall short), candle's backward fails in its own
    // mask (`mask.scatter(indexes, zeros_like(init))`: indexes shaped like src, zeros like init):
    // the tool answers unsuccessfully, so its VJP is unsupported, naming candle's error.
    let rows_n_k = rows("add, logaddexp, hypot", "candle, candle-index-add", "primal, vjp");
    for w in ["hist-add", "hist-logaddexp", "hist-hypot"] {
        let failed = row(&rows_n_k, w, "candle");
        assert_eq!(failed["status"], "skipped", "{failed}");
        assert!(failed["message"].as_str().unwrap().contains("shape mismatch in scatter"), "{failed}");
        let right = row(&rows_n_k, w, "candle-index-add");
        assert_eq!(right["status"], "ok", "{right}");
    }
    // As many in-range values as bins: the backward runs, and dest's masked adjoint fails the
    // checks while the same sum by index_add passes.
    let rows = rows_sized(
        "add, logaddexp, hypot",
        "candle, candle-index-add",
        "primal, vjp",
        "n: [64]\n    k: [64]\n    out_of_range: 0",
    );
    for w in ["hist-add", "hist-logaddexp", "hist-hypot"] {
        let wrong = row(&rows, w, "candle");
        assert_eq!(wrong["status"], "failed", "{wrong}");
        // Argument by argument: vals' adjoint is right, dest's is wrong.
        let message = wrong["message"].as_str().unwrap();
        assert_eq!((verdict(message, "vals"), verdict(message, "dest")), (Some("ok"), Some("wrong")), "{message}");
        let right = row(&rows, w, "candle-index-add");
        assert_eq!(right["status"], "ok", "{right}");
    }
    // No forward mode: its JVP checks are absent, not failed.
    let checks: Vec<&str> = row(&rows, "hist-add", "candle-index-add")["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(checks.contains(&"oracle-vjp") && !checks.contains(&"fd-jvp"), "{checks:?}");
}

/// burn 0.22.1's scatter backward rules for Mul, Min and Max are written for unique indices
/// (its docs call duplicates' gradients undefined); a histogram has duplicates. Mul: a value's
/// adjoint must be dest times the other values of its bin, burn gives dest alone. Max: only the
/// winner gets the adjoint, burn gives it to every value above dest. Add is right.
#[cfg(feature = "burn")]
#[test]
fn burn_scatter_mul_min_max_are_wrong_with_duplicate_indices() {
    let case = |op: &str| serde_json::json!({"op": op, "k": 2, "inds": [0, 0, 1], "vals": [3, 5, 7], "dest": [2, 1], "hist_bar": [1, 1]});
    let mul = peer_vjp("burn", case("mul"));
    assert_eq!(numbers(&mul["hist"]), [30.0, 7.0]);
    assert_eq!(numbers(&mul["dest_bar"]), [15.0, 7.0]);
    assert_eq!(numbers(&mul["vals_bar"]), [2.0, 2.0, 1.0], "burn's rule (right: [10, 6, 1])");
    let max = peer_vjp("burn", case("max"));
    assert_eq!(numbers(&max["hist"]), [5.0, 7.0]);
    assert_eq!(numbers(&max["vals_bar"]), [1.0, 1.0, 1.0], "burn's rule (right: [0, 1, 1])");
    assert_eq!(numbers(&max["dest_bar"]), [0.0, 0.0]);
    let add = peer_vjp("burn", case("add"));
    assert_eq!(numbers(&add["vals_bar"]), [1.0, 1.0, 1.0]);
    assert_eq!(numbers(&add["dest_bar"]), [1.0, 1.0]);

    let rows = rows("add, mul, min, max", "burn", "primal, vjp");
    assert_eq!(row(&rows, "hist-add", "burn")["status"], "ok");
    for w in ["hist-mul", "hist-min", "hist-max"] {
        assert_eq!(row(&rows, w, "burn")["status"], "failed", "{}", row(&rows, w, "burn"));
    }
    // Mul: dest's adjoint (hist_bar times the bin's product of values) is right, vals' wrong.
    let message = row(&rows, "hist-mul", "burn")["message"].as_str().unwrap().to_string();
    assert_eq!((verdict(&message, "vals"), verdict(&message, "dest")), (Some("wrong"), Some("ok")), "{message}");
}

/// num-dual is forward mode only: its rows are validated in forward mode (finite differences
/// and the oracle of the JVP) and pass for every operator; the VJP is unsupported, not failed.
#[cfg(feature = "num-dual")]
#[test]
fn num_dual_is_validated_in_forward_mode() {
    let rows = rows("add, mul, min, max, logaddexp, hypot", "num-dual", "primal, vjp, jvp");
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
        let checks: Vec<&str> = r["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert!(checks.contains(&"fd-jvp") && checks.contains(&"oracle-jvp"), "{checks:?}");
        assert!(!checks.contains(&"oracle-vjp") && !checks.contains(&"fd-vjp"), "{checks:?}");
    }
    assert_eq!(rows.len(), 6);
}

/// ad_trait's reverse (`adr`) and forward (`adfn`) modes, every operator through its own
/// primitives: the checks pass.
#[cfg(feature = "ad-trait")]
#[test]
fn ad_trait_passes_every_check() {
    let rows = rows("add, mul, min, max, logaddexp, hypot", "ad-trait", "primal, vjp, jvp");
    assert_eq!(rows.len(), 6);
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
    }
    let out = peer_vjp(
        "ad-trait",
        serde_json::json!({"op": "mul", "k": 1, "inds": [0, 0], "vals": [3, 5], "dest": [2], "hist_bar": [1]}),
    );
    assert_eq!(numbers(&out["vals_bar"]), [10.0, 6.0]);
}
