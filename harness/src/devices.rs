//! Backend selection: turns `--backend NAME` into a device, or into the exit-4 error that says why
//! it is unavailable. Commands are generic over the device; [`with_device!`](crate::with_device) dispatches once on
//! the opened backend.

use adgauge_backends::{Cpu, Cuda, OpenCl, probe_devices};

use crate::exit::{bad_input, unavailable};

/// An opened device of any kind.
#[derive(Clone)]
pub enum AnyDevice {
    Cpu(Cpu),
    OpenCl(OpenCl),
    Cuda(Cuda),
}

/// Runs `$body` with `$d` bound to the concrete device inside an [`AnyDevice`].
#[macro_export]
macro_rules! with_device {
    ($dev:expr, |$d:ident| $body:expr) => {
        match $dev {
            $crate::devices::AnyDevice::Cpu($d) => $body,
            $crate::devices::AnyDevice::OpenCl($d) => $body,
            $crate::devices::AnyDevice::Cuda($d) => $body,
        }
    };
}

/// Starts the named backend's device (exit 4 with the reason when it is unavailable).
pub fn open_device(name: &str, threads: Option<usize>) -> anyhow::Result<AnyDevice> {
    match name {
        "cpu" => Ok(AnyDevice::Cpu(Cpu::new(threads)?)),
        "opencl" => {
            OpenCl::new().map(AnyDevice::OpenCl).map_err(|e| unavailable(format!("backend opencl is unavailable: {e}")))
        }
        "cuda" => {
            Cuda::new().map(AnyDevice::Cuda).map_err(|e| unavailable(format!("backend cuda is unavailable: {e}")))
        }
        other => match probe_devices().into_iter().find(|d| d.name == other) {
            Some(status) => Err(unavailable(format!("backend {other} is unavailable: {}", status.detail))),
            None => {
                let known: Vec<&str> = probe_devices().iter().map(|d| d.name).collect();
                Err(bad_input(format!("unknown backend '{other}' (known: {})", known.join(", "))))
            }
        },
    }
}
