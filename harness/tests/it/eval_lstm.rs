//! `adgauge eval lstm` end to end: objective and gradient (reverse and forward mode) on a small
//! generated ADBench-format file against the hand-derived reference, in both dtypes; malformed
//! files exit 2 naming the file and line.

use crate::common;

use adgauge_datasets::lstm::LstmInput;
use adgauge_workloads::lstm;

use common::{adgauge, close, json};

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    common::temp_file("eval-lstm", name, text)
}

#[test]
fn eval_lstm_prints_objective_and_gradient_in_every_mode_and_dtype() {
    let s = LstmInput::generate(2, 6, 3, 21);
    let path = temp_file("small.txt", &s.to_text().unwrap());
    let p = path.to_str().unwrap();
    let (f64_f, f64_g) = lstm::manual::<f64>(&s);
    for (dtype, tol) in [("f64", 1e-11), ("f32", 1e-4)] {
        let v = json(&adgauge(&["eval", "lstm", "--input", p, "--dtype", dtype]));
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
        assert!(close(v["objective"].as_f64().unwrap(), f64_f, tol), "{v}");
        for mode in ["vjp", "jvp"] {
            let v = json(&adgauge(&["eval", "lstm", "--input", p, "--mode", mode, "--dtype", dtype]));
            assert!(close(v["objective"].as_f64().unwrap(), f64_f, tol), "{mode} {dtype}: {v}");
            let g: Vec<f64> = v["gradient"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            assert_eq!(g.len(), 8 * 2 * 3 + 3 * 3);
            for (a, b) in g.iter().zip(&f64_g) {
                assert!(close(*a, *b, tol * 10.0), "{mode} {dtype}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn malformed_lstm_files_exit_2_naming_file_and_line() {
    let text = LstmInput::generate(1, 2, 2, 0).to_text().unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[6] = "0.5 x";
    let path = temp_file("bad.txt", &(lines.join("\n") + "\n"));
    let out = adgauge(&["eval", "lstm", "--input", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.txt") && err.contains('7'), "{err}");
    let out = adgauge(&["eval", "lstm", "--input", "/nonexistent/lstm.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/lstm.txt"));
}
