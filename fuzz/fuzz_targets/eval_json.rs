//! `adgauge eval`'s JSON inputs, parsed and evaluated on the CPU: the first byte picks the
//! workload (every histogram operator, k-means, llsq) and the mode, the rest is the input text.
//! Any outcome but a panic (or an abort) is fine: errors are values.
#![no_main]

use adgauge_backends::{AnyDevice, Cpu, DType, Device, with_device};
use adgauge_workloads::workload::{EvalRequest, Mode};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 8] = ["hist-add", "hist-mul", "hist-min", "hist-max", "hist-logaddexp", "hist-hypot", "kmeans", "llsq"];

/// One CPU device for the whole run (a device per input leaked its thread pool each time).
static DEVICE: std::sync::OnceLock<AnyDevice> = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    // Sizes are bounded by the memory limit, checked before allocation.
    adgauge_datasets::limits::set_max_bytes(64 << 20);
    let name = NAMES[pick as usize % NAMES.len()];
    let mode = [Mode::Primal, Mode::Vjp, Mode::Jvp][(pick as usize / NAMES.len()) % 3];
    let Some(w) = adgauge_workloads::find(name) else { return };
    let device = DEVICE.get_or_init(|| AnyDevice::Cpu(Cpu::new(Some(1)).expect("a CPU device")));
    let req = EvalRequest {
        name: name.to_string(),
        text: text.to_string(),
        source: "fuzz".into(),
        mode: Some(mode),
        dtype: if pick & 0x80 != 0 { DType::F32 } else { DType::F64 },
        rule: None,
        options: Default::default(),
    };
    let _ = w.eval(&req, device);
    // The device's buffer cache keeps what one input allocated; across millions of inputs of
    // every size that reads as a leak to -rss_limit_mb.
    with_device!(device, |d| d.trim_cache());
});
