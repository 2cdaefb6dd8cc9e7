//! Hand tracking (`ht`) end to end: `adgauge tool` answers GradBench's `ht` messages (objective
//! and jacobian, simple and complicated) with values computed by hand on a hand-made model,
//! `adgauge eval` reads ADBench's hand files, `check` passes on every CPU device, and a served
//! `adgauge tool` passes the checks of the engine in a suite.

use crate::common;

use common::{adgauge, close, json, numbers, python_with, stdout, temp_file};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_adgauge");

/// GradBench's `HTInput` (its README's types) for a hand-made model: 22 bones, each a child of
/// bone 0, identity base transforms; v0 = e_x on bone 0, v1 = e_y on bone 2 (x angle theta[6],
/// z angle theta[7]), v2 = e_z half on bone 3 (x angle theta[8]) and half on bone 0; the points
/// at the origin. `us` empty: simple, one point per vertex; else one point on the triangle.
fn tiny_input(theta: &[f64], us: Option<[f64; 2]>) -> Value {
    let id = serde_json::json!([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]);
    let mut weights = vec![vec![0.0; 22]; 3];
    weights[0][0] = 1.0;
    weights[1][2] = 1.0;
    weights[2][3] = 0.5;
    weights[2][0] = 0.5;
    let (correspondences, points, us) = match us {
        None => {
            (serde_json::json!([0, 1, 2]), serde_json::json!([[0, 0, 0], [0, 0, 0], [0, 0, 0]]), serde_json::json!([]))
        }
        Some(u) => (serde_json::json!([0]), serde_json::json!([[0, 0, 0]]), serde_json::json!([u])),
    };
    serde_json::json!({
        "theta": theta,
        "data": {
            "model": {
                "bone_count": 22,
                "bone_names": (0..22).map(|i| format!("bone{i}")).collect::<Vec<_>>(),
                "parents": (0..22).map(|i| if i == 0 { -1 } else { 0 }).collect::<Vec<_>>(),
                "base_relatives": vec![id.clone(); 22],
                "inverse_base_absolutes": vec![id; 22],
                "base_positions": [[1, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1]],
                "weights": weights,
                "triangles": [[0, 1, 2]],
                "is_mirrored": false,
            },
            "correspondences": correspondences,
            "points": points,
        },
        "us": us,
        "min_runs": 2,
        "min_seconds": 0,
    })
}

fn evaluate(id: i64, function: &str, input: &Value) -> Value {
    serde_json::json!({"id": id, "kind": "evaluate", "module": "ht", "function": function, "input": input})
}

/// By hand: bone 2 turns e_y to Rz(g) Rx(a) e_y = (-sin g cos a, cos g cos a, sin a), bone 3
/// turns e_z to (0, -sin b, cos b), blended half and half with e_z; the global rotation (0, 0,
/// pi/2) maps (x, y, z) to (-y, x, z); then the translation t; the residuals are minus the posed
/// vertices. Their derivatives: -I along t; along a, minus G (sin g sin a, -cos g sin a, cos a)
/// for v1; along b, minus G (0, -cos b / 2, -sin b / 2) for v2; nothing along theta[9].
#[test]
fn adgauge_tool_answers_gradbench_ht_messages_with_the_hand_computed_values() {
    let (a, g, b) = (0.3f64, -0.4f64, 0.7f64);
    let t = [0.5, -1.0, 2.0];
    let mut theta = vec![0.0; 26];
    theta[2] = std::f64::consts::FRAC_PI_2;
    theta[3..6].copy_from_slice(&t);
    (theta[6], theta[7], theta[8]) = (a, g, b);
    let rot = |v: [f64; 3]| [-v[1], v[0], v[2]];
    let local = [
        [1.0, 0.0, 0.0],
        [-g.sin() * a.cos(), g.cos() * a.cos(), a.sin()],
        [0.0, -0.5 * b.sin(), 0.5 * (b.cos() + 1.0)],
    ];
    let posed: Vec<[f64; 3]> = local.iter().map(|&v| rot(v)).map(|v| [v[0] + t[0], v[1] + t[1], v[2] + t[2]]).collect();
    let d_a = rot([g.sin() * a.sin(), -g.cos() * a.sin(), a.cos()]);
    let d_b = rot([0.0, -0.5 * b.cos(), -0.5 * b.sin()]);
    let u = [0.2, 0.3];
    let r = common::converse(
        &["tool"],
        &[
            serde_json::json!({"id": 0, "kind": "start", "eval": "ht"}),
            serde_json::json!({"id": 1, "kind": "define", "module": "ht"}),
            evaluate(2, "objective", &tiny_input(&theta, None)),
            evaluate(3, "jacobian", &tiny_input(&theta, None)),
            evaluate(4, "objective", &tiny_input(&theta, Some(u))),
            evaluate(5, "jacobian", &tiny_input(&theta, Some(u))),
            evaluate(6, "hessian", &tiny_input(&theta, None)),
        ],
    );
    assert_eq!(r[1]["success"], true, "{}", r[1]);
    for response in &r[2..6] {
        assert_eq!(response["success"], true, "{response}");
        assert_eq!(response["timings"].as_array().unwrap().len(), 2, "{response}");
    }
    assert_eq!(r[6]["success"], false);
    assert!(r[6]["error"].as_str().unwrap().contains("no function 'hessian'"), "{}", r[6]);
    // Simple: 9 residuals; the Jacobian 9 rows of 26.
    let obj = numbers(&r[2]["output"]);
    assert_eq!(obj.len(), 9);
    for (k, &e) in obj.iter().enumerate() {
        assert!(close(e, -posed[k / 3][k % 3], 1e-14), "objective[{k}] = {e}");
    }
    let jac = r[3]["output"].as_array().unwrap();
    assert_eq!(jac.len(), 9);
    for (row, values) in jac.iter().enumerate() {
        let (v, j) = (row / 3, row % 3);
        let values = numbers(values);
        assert_eq!(values.len(), 26);
        for k in 0..3 {
            assert!(close(values[3 + k], if k == j { -1.0 } else { 0.0 }, 1e-14), "row {row} translation {k}");
        }
        assert!(close(values[6], if v == 1 { -d_a[j] } else { 0.0 }, 1e-14), "row {row} d/da");
        assert!(close(values[8], if v == 2 { -d_b[j] } else { 0.0 }, 1e-14), "row {row} d/db");
        assert_eq!(values[9], 0.0, "row {row}: theta[9] moves no vertex");
    }
    // Complicated: one point at u0 v0 + u1 v1 + (1 - u0 - u1) v2; its Jacobian 3 rows of 2 + 26,
    // d/du0 = v2 - v0 and d/du1 = v2 - v1 (the residual is minus the point).
    let obj = numbers(&r[4]["output"]);
    let jac = r[5]["output"].as_array().unwrap();
    assert_eq!((obj.len(), jac.len()), (3, 3));
    for j in 0..3 {
        let want = -(u[0] * posed[0][j] + u[1] * posed[1][j] + 0.5 * posed[2][j]);
        assert!(close(obj[j], want, 1e-14), "objective[{j}] = {}", obj[j]);
        let values = numbers(&jac[j]);
        assert_eq!(values.len(), 28);
        assert!(close(values[0], posed[2][j] - posed[0][j], 1e-14), "row {j} d/du0");
        assert!(close(values[1], posed[2][j] - posed[1][j], 1e-14), "row {j} d/du1");
        assert!(close(values[2 + 6], -u[1] * d_a[j], 1e-14), "row {j} d/da");
        assert!(close(values[2 + 8], -0.5 * d_b[j], 1e-14), "row {j} d/db");
    }
}

/// `adgauge eval` on ADBench's hand files (vendored) gives what `adgauge tool` gives for the
/// same problem sent as GradBench's message; malformed files are named with their line.
#[test]
fn eval_reads_adbench_hand_files_and_agrees_with_the_tool() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../datasets/data/ht");
    for (name, file) in
        [("ht-simple", "simple_hand1_t26_c100.txt"), ("ht-complicated", "complicated_hand1_t26_c100.txt")]
    {
        let path = format!("{dir}/{file}");
        let local = json(&adgauge(&["eval", name, "--input", &path, "--mode", "jvp"]));
        let h = adgauge_datasets::ht::HandInput::read(std::path::Path::new(&path), None).unwrap();
        let mut input = adgauge_workloads::ht::gradbench_input(&h);
        input["min_runs"] = 1.into();
        let r = common::converse(
            &["tool"],
            &[
                serde_json::json!({"id": 0, "kind": "define", "module": "ht"}),
                evaluate(1, "objective", &input),
                evaluate(2, "jacobian", &input),
            ],
        );
        assert_eq!(local["objective"].as_array().unwrap().len(), 300);
        assert_eq!(r[1]["output"], local["objective"], "{name}");
        assert_eq!(r[2]["output"], local["jacobian"], "{name}");
        let width = if name == "ht-simple" { 26 } else { 28 };
        assert_eq!(local["jacobian"][299].as_array().unwrap().len(), width);
    }
    let bad = temp_file("ht", "hand_bad.txt", &format!("2 26\n1 0.5 0.5 0.5\n7 0.5 0.5\n{}", "0\n".repeat(26)));
    std::fs::create_dir_all(bad.parent().unwrap().join("model")).unwrap();
    for f in ["bones.txt", "vertices.txt", "triangles.txt"] {
        std::fs::copy(format!("{dir}/model/{f}"), bad.parent().unwrap().join("model").join(f)).unwrap();
    }
    let out = adgauge(&["eval", "ht-simple", "--input", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = common::stderr(&out);
    assert!(e.contains("hand_bad.txt:3: expected 4 numbers (point 1: vertex x y z), found 3 numbers"), "{e}");
}

#[test]
fn check_passes_on_the_cpu_devices() {
    for backend in ["cpu", "cpu-jit"] {
        let out = adgauge(&["check", "--backend", backend, "--workload", "ht-simple", "--workload", "ht-complicated"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        for check in ["dot-product", "fd-jvp", "fd-vjp", "full-jacobian", "manual"] {
            assert_eq!(text.lines().filter(|l| l.contains(check) && l.ends_with("ok")).count(), 4, "{check}: {text}");
        }
    }
}

/// `adgauge tool` as an external tool in a suite: GradBench's `ht` calls are timed (objective
/// as primal, jacobian as jvp), and the tool's Jacobian passes the engine's checks.
#[test]
fn a_served_adgauge_tool_passes_the_ht_checks_in_a_suite() {
    let suite = format!(
        "name: self-ht\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: ht\n    variant: [simple, complicated]\n    c: [20]\n    dtypes: [f64]\n    modes: [primal, jvp]\n    tools: [cpu, {{name: self, command: \"{BIN} tool\"}}]\n"
    );
    let path = temp_file("ht", "self.yaml", &suite);
    let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    let rows = common::case_rows(&out);
    assert_eq!(out.status.code(), Some(0), "{rows:#?}");
    for name in ["ht-simple", "ht-complicated"] {
        let ext = rows.iter().find(|r| r["workload"] == name && r["backend"] == "self").unwrap();
        assert_eq!(ext["status"], "ok", "{ext}");
        let checks: Vec<&str> = ext["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        for want in ["dot-product", "fd-jvp", "fd-vjp", "manual", "timing"] {
            assert!(checks.contains(&want), "{name}: {checks:?}");
        }
        assert!(ext["jvp"]["median_s"].as_f64().unwrap() > 0.0, "{ext}");
    }
}

/// The JAX and PyTorch adapters' `ht` (`tools/*/ht.py`) pass every check in both variants.
#[test]
fn the_adapters_pass_the_ht_checks() {
    for (tool, module) in [("jax", "jax"), ("pytorch", "torch")] {
        let Some(python) = python_with(module, tool) else { continue };
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tools/{tool}/run.py"));
        let suite = format!(
            "name: {tool}-ht\ntiming: {{samples: 2, min_sample_ms: 1, time_limit_s: 0.05}}\ncases:\n  - workload: ht\n    variant: [simple, complicated]\n    c: [10]\n    dtypes: [f64]\n    modes: [primal, jvp]\n    tools: [{{name: {tool}, command: \"{} {}\", timeout_s: 300}}]\n",
            python.display(),
            script.canonicalize().unwrap().display()
        );
        let path = temp_file("ht", &format!("{tool}.yaml"), &suite);
        let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
        let rows = common::case_rows(&out);
        assert_eq!(out.status.code(), Some(0), "{tool}: {rows:#?}");
        assert_eq!(rows.len(), 2, "{tool}: {rows:#?}");
        for r in &rows {
            assert_eq!(r["status"], "ok", "{tool}: {r}");
            let checks = r["checks"].as_array().unwrap();
            assert!(checks.iter().all(|c| c["passed"] == true), "{tool}: {r}");
            for want in ["dot-product", "fd-jvp", "fd-vjp", "manual"] {
                assert!(checks.iter().any(|c| c["name"] == want), "{tool}: {want}: {r}");
            }
        }
    }
}
