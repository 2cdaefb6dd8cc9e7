//! Devices: what the harness needs beyond the op API (a name, synchronisation, the buffer cache),
//! and the availability probe that `adgauge backends` prints.

use crate::Ops;

/// A device executes the op API's primitives on buffers it owns.
pub trait Device: Ops {
    /// Human-readable name, e.g. `cpu (2 threads)`.
    fn device_name(&self) -> String;
    /// Worker threads (CPU) or compute units the device uses.
    fn threads(&self) -> usize;
    /// Waits until every queued op has finished (timing needs this inside the timed region).
    fn synchronize(&self) -> crate::Result<()>;
    /// Releases cached buffers (before a memory measurement).
    fn trim_cache(&self);
    /// Total time this device's process-wide runtime has spent compiling kernels so far, or
    /// None for a device that compiles nothing (the CPU). The harness records the difference
    /// across a case apart from its timings.
    fn kernel_compile_time(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Whether a device kind can be used on this machine, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    pub name: &'static str,
    pub available: bool,
    /// What was found (device model, version) or why the device is unavailable.
    pub detail: String,
}

/// Probes every device kind adgauge knows. Never panics: an absent driver is a reported state.
pub fn probe_devices() -> Vec<DeviceStatus> {
    crate::registry::DEVICES.iter().map(|d| (d.probe)()).collect()
}
