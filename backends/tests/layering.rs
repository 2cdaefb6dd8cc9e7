//! Layering rules of the op API that the compiler does not check (docs/ARCHITECTURE.md):
//!
//! * the ops modules (`src/ops/`) are device-independent: they never import or name a device, so
//!   the CPU device is not reachable from them and no import circle runs through `cpu/`;
//! * no provided method computes on the host: none reads a tensor back (`to_vec`,
//!   `index_to_vec`) or uploads one (`tensor`, `index`, `index_as`). A device that lacks a primitive returns
//!   `OpError::Unsupported` naming it instead of inheriting a host fallback.

use std::fs;
use std::path::Path;

/// Code (comments stripped) of every file under `src/ops/`, with file names and line numbers.
fn ops_code() -> Vec<(String, usize, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ops");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).expect("src/ops exists") {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").to_string();
            out.push((name.clone(), n + 1, code));
        }
    }
    assert!(out.len() > 100, "src/ops looks empty");
    out
}

#[test]
fn ops_modules_name_no_device() {
    let devices = ["crate::cpu", "crate::gpu", "crate::opencl", "crate::cuda", "Cpu", "KernelDevice", "OpenCl", "Cuda"];
    for (file, line, code) in ops_code() {
        for d in devices {
            assert!(!code.contains(d), "src/ops/{file}:{line} names a device ({d}): {code}");
        }
    }
}

#[test]
fn no_provided_op_moves_tensors_between_host_and_device() {
    let transfers = ["self.to_vec(", "self.index_to_vec(", "self.tensor(", "self.index(", "self.index_as("];
    let code = ops_code();
    // The one exception: `index`, the i64 shortcut of the upload `index_as` itself.
    let shortcut = code.iter().position(|(f, _, c)| f == "tensor.rs" && c.contains("fn index(&self, data: &[i64])"));
    let shortcut = shortcut.expect("TensorOps::index is in src/ops/tensor.rs") + 1;
    for (n, (file, line, code)) in code.iter().enumerate() {
        if n == shortcut {
            assert!(code.trim() == "self.index_as(data, IndexDType::I64)", "the index shortcut changed: {code}");
            continue;
        }
        for t in transfers {
            assert!(!code.contains(t), "src/ops/{file}:{line} moves data across the host boundary ({t}): {code}");
        }
    }
}
