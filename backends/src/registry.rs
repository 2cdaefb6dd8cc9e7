//! The device registry: the one place that lists the devices adgauge knows. Everything that
//! needs "every device" (the `backends` command, the built-in tools of a suite, `--backend`
//! parsing) goes through [`DEVICES`], and code that must run on an opened device of any kind
//! takes an [`AnyDevice`] and dispatches once with [`with_device!`](crate::with_device).
//!
//! Adding a device: implement [`Device`] for it, add a variant to [`AnyDevice`] and to
//! [`with_device!`](crate::with_device), and add one [`DeviceKind`] line to [`DEVICES`].

use crate::device::DeviceStatus;
use crate::gpu::{CopyBandwidth, copy_bandwidth};
use crate::{Cpu, CpuStaged, Cuda, DType, Device, OpError, OpenCl, Result, Traced};

/// An opened device of any kind. Cloning is cheap (every device shares its runtime).
#[derive(Clone)]
pub enum AnyDevice {
    Cpu(Cpu),
    CpuStaged(CpuStaged),
    CpuTraced(Traced<Cpu>),
    CpuJit(Traced<CpuStaged>),
    OpenCl(OpenCl),
    Cuda(Cuda),
}

/// Runs `$body` with `$d` bound to the concrete device inside an [`AnyDevice`]: the body is
/// compiled once per device type, so generic code over [`Device`] runs on any of them.
#[macro_export]
macro_rules! with_device {
    ($dev:expr, |$d:ident| $body:expr) => {
        match $dev {
            $crate::AnyDevice::Cpu($d) => $body,
            $crate::AnyDevice::CpuStaged($d) => $body,
            $crate::AnyDevice::CpuTraced($d) => $body,
            $crate::AnyDevice::CpuJit($d) => $body,
            $crate::AnyDevice::OpenCl($d) => $body,
            $crate::AnyDevice::Cuda($d) => $body,
        }
    };
}

/// One kind of device: its name (`--backend NAME`, a suite's `tools:`), how to probe it without
/// side effects, and how to open it.
pub struct DeviceKind {
    pub name: &'static str,
    pub probe: fn() -> DeviceStatus,
    /// Opens the device with this many CPU worker threads (used by the CPU devices only).
    pub open: fn(Option<usize>) -> Result<AnyDevice>,
    /// Opens the device over an open CPU device, sharing its thread pool and buffer cache (the
    /// CPU devices; `None` for devices of their own).
    pub on_cpu: Option<fn(Cpu) -> Result<AnyDevice>>,
    /// Times device-to-device copies of (bytes, copies) and checks the result: the roofline of
    /// `adgauge backends --bandwidth` (the kernel devices; `None` for the CPU devices).
    pub copy_bandwidth: Option<fn(usize, usize) -> Result<CopyBandwidth>>,
}

/// A CPU device's status: always available, `what` it is, on the pool's threads.
fn cpu_status(name: &'static str, what: &str) -> DeviceStatus {
    let threads = rayon::current_num_threads();
    DeviceStatus { name, available: true, detail: format!("{what}, {threads} threads") }
}

fn probe_cpu() -> DeviceStatus {
    cpu_status("cpu", "rayon")
}

fn probe_cpu_staged() -> DeviceStatus {
    cpu_status("cpu-staged", "the CPU device with elementwise chains deferred and fused")
}

fn probe_cpu_traced() -> DeviceStatus {
    cpu_status("cpu-traced", "the CPU device, each timed call recorded once and replayed")
}

fn probe_cpu_jit() -> DeviceStatus {
    cpu_status("cpu-jit", "the staged CPU device, each timed call recorded once and replayed")
}

fn probe_cpu_jit_flush() -> DeviceStatus {
    if !adgauge_cpu::subnormals::available() {
        return DeviceStatus {
            name: "cpu-jit-flush",
            available: false,
            detail: "flushing subnormals needs an x86-64 CPU (FTZ and DAZ)".into(),
        };
    }
    cpu_status("cpu-jit-flush", "cpu-jit with subnormals flushed to zero (FTZ and DAZ), as XLA's CPU code computes")
}

fn cpu_on(cpu: Cpu) -> Result<AnyDevice> {
    Ok(AnyDevice::Cpu(cpu))
}

fn cpu_staged_on(cpu: Cpu) -> Result<AnyDevice> {
    Ok(AnyDevice::CpuStaged(CpuStaged::on(cpu)?))
}

fn cpu_traced_on(cpu: Cpu) -> Result<AnyDevice> {
    Ok(AnyDevice::CpuTraced(Traced::new(cpu)))
}

/// `ADGAUGE_JIT=replay` keeps `cpu-jit`'s recordings as calls (no compiled programs): the
/// compiler's A/B in one build.
fn cpu_jit_on(cpu: Cpu) -> Result<AnyDevice> {
    let staged = CpuStaged::on(cpu)?;
    let replay_only = std::env::var("ADGAUGE_JIT").is_ok_and(|v| v == "replay");
    Ok(AnyDevice::CpuJit(if replay_only { Traced::new(staged) } else { Traced::compiling(staged) }))
}

/// Every device adgauge knows, in the order `adgauge backends` lists them.
pub const DEVICES: &[DeviceKind] = &[
    DeviceKind {
        name: "cpu",
        probe: probe_cpu,
        open: |t| cpu_on(Cpu::new(t)?),
        on_cpu: Some(cpu_on),
        copy_bandwidth: None,
    },
    DeviceKind {
        name: "cpu-staged",
        probe: probe_cpu_staged,
        open: |t| cpu_staged_on(Cpu::new(t)?),
        on_cpu: Some(cpu_staged_on),
        copy_bandwidth: None,
    },
    DeviceKind {
        name: "cpu-traced",
        probe: probe_cpu_traced,
        open: |t| cpu_traced_on(Cpu::new(t)?),
        on_cpu: Some(cpu_traced_on),
        copy_bandwidth: None,
    },
    DeviceKind {
        name: "cpu-jit",
        probe: probe_cpu_jit,
        open: |t| cpu_jit_on(Cpu::new(t)?),
        on_cpu: Some(cpu_jit_on),
        copy_bandwidth: None,
    },
    // Its own CPU device: the flushing mode is its worker threads'.
    DeviceKind {
        name: "cpu-jit-flush",
        probe: probe_cpu_jit_flush,
        open: |t| cpu_jit_on(Cpu::flushing_subnormals(t)?),
        on_cpu: None,
        copy_bandwidth: None,
    },
    DeviceKind {
        name: "opencl",
        probe: crate::opencl::probe,
        open: |_| Ok(AnyDevice::OpenCl(OpenCl::new()?)),
        on_cpu: None,
        copy_bandwidth: Some(copy_bandwidth::<crate::opencl::ClRuntime>),
    },
    DeviceKind {
        name: "cuda",
        probe: crate::cuda::probe,
        open: |_| Ok(AnyDevice::Cuda(Cuda::new()?)),
        on_cpu: None,
        copy_bandwidth: Some(copy_bandwidth::<crate::cuda::CudaRuntime>),
    },
];

/// The registered device called `name`, if any.
pub fn device_kind(name: &str) -> Option<&'static DeviceKind> {
    DEVICES.iter().find(|d| d.name == name)
}

/// The names of every registered device.
pub fn device_names() -> Vec<&'static str> {
    DEVICES.iter().map(|d| d.name).collect()
}

impl AnyDevice {
    /// The registry name of this device's kind (`cpu`, `opencl`, `cuda`).
    pub fn kind(&self) -> &'static str {
        match self {
            AnyDevice::Cpu(_) => "cpu",
            AnyDevice::CpuStaged(_) => "cpu-staged",
            AnyDevice::CpuTraced(_) => "cpu-traced",
            AnyDevice::CpuJit(_) => "cpu-jit",
            AnyDevice::OpenCl(_) => "opencl",
            AnyDevice::Cuda(_) => "cuda",
        }
    }

    pub fn device_name(&self) -> String {
        with_device!(self, |d| d.device_name())
    }

    pub fn threads(&self) -> usize {
        with_device!(self, |d| d.threads())
    }

    /// Whether the device flushes subnormals to zero (`cpu-jit-flush`).
    pub fn flushes_subnormals(&self) -> bool {
        with_device!(self, |d| d.flushes_subnormals())
    }

    /// The calling thread in the device's floating-point mode while the guard lives: a
    /// flushing device's calls flush on the caller's thread too, where its small ops run.
    pub fn mode_guard(&self) -> Option<adgauge_cpu::subnormals::Mode> {
        adgauge_cpu::subnormals::Mode::enter(self.flushes_subnormals())
    }

    pub fn synchronize(&self) -> Result<()> {
        with_device!(self, |d| d.synchronize())
    }

    pub fn trim_cache(&self) {
        with_device!(self, |d| d.trim_cache())
    }

    pub fn kernel_compile_time(&self) -> Option<std::time::Duration> {
        with_device!(self, |d| d.kernel_compile_time())
    }

    pub fn device_memory(&self) -> Option<crate::device::DeviceMemory> {
        with_device!(self, |d| d.device_memory())
    }

    pub fn reset_peak_device_memory(&self) {
        with_device!(self, |d| d.reset_peak_device_memory())
    }

    pub fn transfers(&self) -> Option<crate::device::Transfers> {
        with_device!(self, |d| d.transfers())
    }

    /// Whether the device computes in `dtype`, and why not (a capability, known without
    /// running anything).
    pub fn supports_dtype(&self, dtype: DType) -> std::result::Result<(), String> {
        let fp64 = match self {
            AnyDevice::Cpu(_) | AnyDevice::CpuStaged(_) | AnyDevice::CpuTraced(_) | AnyDevice::CpuJit(_) => true,
            AnyDevice::OpenCl(d) => d.has_f64(),
            AnyDevice::Cuda(d) => d.has_f64(),
        };
        if dtype == DType::F64 && !fp64 {
            return Err(format!("f64 on {}: the device lacks fp64", self.device_name()));
        }
        Ok(())
    }
}

/// Opens the device called `name`. An unknown name is [`OpError::Unsupported`] listing the
/// known ones; a known device that cannot start is [`OpError::Device`] with the reason.
pub fn open_device(name: &str, threads: Option<usize>) -> Result<AnyDevice> {
    match device_kind(name) {
        Some(kind) => (kind.open)(threads),
        None => Err(OpError::Unsupported(format!("unknown backend '{name}' (known: {})", device_names().join(", ")))),
    }
}

/// Probes every device kind adgauge knows (what `adgauge backends` prints). Never panics: an
/// absent driver is a reported state.
pub fn probe_devices() -> Vec<DeviceStatus> {
    DEVICES.iter().map(|d| (d.probe)()).collect()
}
