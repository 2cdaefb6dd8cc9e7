//! Peak memory is measured to the byte whatever the case's size: a histogram of 100 values has a
//! footprint of a few KB (its resident inputs alone: 100 f32 values, 100 i64 indices, 10 f32
//! bins), which must show as such, not as 0 with a memory ratio of 0.

use crate::common;

use common::{adgauge, temp_file};
use serde_json::Value;

#[test]
fn a_small_case_has_a_measured_footprint_and_ratio() {
    let suite = "name: small\ntiming: {samples: 1, min_sample_ms: 1, time_limit_s: 0.05}\ncases:\n  - workload: hist\n    ops: [add]\n    rules: [auto]\n    n: [100]\n    k: [10]\n    tools: [cpu, cpu-traced]\n";
    let path = temp_file("memory", "small.yaml", suite);
    let out = adgauge(&["run", "--suite", path.to_str().unwrap(), "--json", "--no-save", "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 6, "two tools, three modes each");
    // The inputs every mode keeps resident: values, indices and the destination.
    let inputs = 100 * 4 + 100 * 8 + 10 * 4;
    for row in &rows {
        let what = format!("{} {}", row["case_id"], row["mode"]);
        let peak = row["peak_bytes"].as_u64().unwrap_or_else(|| panic!("{what}: no peak_bytes"));
        assert!(peak >= inputs, "{what}: peak {peak} < the inputs' {inputs} bytes");
        // A few KB, not the process's allocations.
        assert!(peak < 1 << 20, "{what}: peak {peak}");
        if row["mode"] != "primal" {
            let ratio = row["memory_ratio"].as_f64().unwrap_or_else(|| panic!("{what}: no memory_ratio"));
            assert!(ratio.is_finite() && ratio >= 0.5, "{what}: memory ratio {ratio}");
        }
    }
}
