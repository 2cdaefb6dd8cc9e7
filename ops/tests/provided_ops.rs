//! A rule of the op API that the compiler does not check (docs/ARCHITECTURE.md): no provided
//! method of an op family, and no composed form, computes on the host. None reads a tensor back
//! (`to_vec`, `index_to_vec`) or uploads one (`tensor`, `index`, `index_as`): a device that lacks a
//! primitive returns `OpError::Unsupported` naming it instead of inheriting a host fallback. (That
//! the op API names no device is the compiler's to check: this crate depends on no other.)

use std::fs;
use std::path::Path;

/// Code (comments stripped) of every file of the crate, with its path under `src/` and line
/// numbers: the op families and the composed forms, and the rest, which holds no engine method.
/// Every file is read, so a new op family cannot be left out.
fn ops_code() -> Vec<(String, usize, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for dir in [src.clone(), src.join("composed")] {
        let mut paths: Vec<_> = fs::read_dir(&dir).expect("src/ exists").map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "rs")) {
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = path.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("").to_string();
                out.push((name.clone(), n + 1, code));
            }
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
            assert!(!calls(code, t), "src/{file}:{line} moves data across the host boundary ({t}): {code}");
        }
    }
}

/// Whether `code` holds `call` with its receiver a whole name (`b.to_vec(` but not `ab.to_vec(`).
fn calls(code: &str, call: &str) -> bool {
    code.match_indices(call)
        .any(|(i, _)| !code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_'))
}
