//! A rule of the op API that the compiler does not check (docs/ARCHITECTURE.md): no provided
//! method of an op family, and no composed form, computes on the host. None reads a tensor back
//! (`to_vec`, `index_to_vec`) or uploads one (`tensor`, `index`, `index_as`): a device that lacks a
//! primitive returns `OpError::Unsupported` naming it instead of inheriting a host fallback. (That
//! the op API names no device is the compiler's to check: this crate depends on no other.)

use std::fs;
use std::path::Path;

/// The op families' files and the composed forms.
const FILES: [&str; 13] = [
    "tensor.rs",
    "elementwise.rs",
    "reduce.rs",
    "index.rs",
    "hist.rs",
    "scan.rs",
    "dense.rs",
    "rule_kernels.rs",
    "composed/dense.rs",
    "composed/elementwise.rs",
    "composed/hist.rs",
    "composed/indexing.rs",
    "composed/lstm.rs",
];

/// Code (comments stripped) of the op families and the composed forms, with file names and line
/// numbers.
fn ops_code() -> Vec<(String, usize, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for name in FILES {
        let text = fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("src/{name}: {e}"));
        let name = name.to_string();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").to_string();
            out.push((name.clone(), n + 1, code));
        }
    }
    assert!(out.len() > 1000, "the op API looks empty");
    out
}

#[test]
fn no_provided_op_moves_tensors_between_host_and_device() {
    // A provided method calls its own engine (`self`); a composed form the engine it is given
    // (`b`, or `o` where `b` is a batch size).
    let transfers: Vec<String> = ["self", "b", "o"]
        .iter()
        .flat_map(|r| ["to_vec", "index_to_vec", "tensor", "index", "index_as"].map(|m| format!("{r}.{m}(")))
        .collect();
    let code = ops_code();
    // The one exception: `index`, the i64 shortcut of the upload `index_as` itself.
    let shortcut = code.iter().position(|(f, _, c)| f == "tensor.rs" && c.contains("fn index(&self, data: &[i64])"));
    let shortcut = shortcut.expect("TensorOps::index is in src/tensor.rs") + 1;
    for (n, (file, line, code)) in code.iter().enumerate() {
        if n == shortcut {
            assert!(code.trim() == "self.index_as(data, IndexDType::I64)", "the index shortcut changed: {code}");
            continue;
        }
        for t in &transfers {
            assert!(!code.contains(t.as_str()), "src/{file}:{line} moves data across the host boundary ({t}): {code}");
        }
    }
}
