//! Backend selection: turns `--backend NAME` into a device, or into the exit-4 error that says why
//! it is unavailable.

use adgauge_backends::{Cpu, probe_devices};

use crate::exit::{bad_input, unavailable};

/// Starts the named backend's device.
pub fn open_cpu(name: &str, threads: Option<usize>) -> anyhow::Result<Cpu> {
    match name {
        "cpu" => Ok(Cpu::new(threads)?),
        other => match probe_devices().into_iter().find(|d| d.name == other) {
            Some(status) => Err(unavailable(format!("backend {other} is unavailable: {}", status.detail))),
            None => {
                let known: Vec<&str> = probe_devices().iter().map(|d| d.name).collect();
                Err(bad_input(format!("unknown backend '{other}' (known: {})", known.join(", "))))
            }
        },
    }
}
