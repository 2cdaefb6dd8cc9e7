//! Devices: what the harness needs beyond the op API (a name, synchronisation, the buffer cache,
//! transfer and memory counts, traced replay), and the availability status a device's probe
//! reports.

use crate::Ops;

/// A device executes the op API's primitives on buffers it owns.
pub trait Device: Ops {
    /// Human-readable name, e.g. `cpu (2 threads)`.
    fn device_name(&self) -> String;
    /// Worker threads (CPU) or compute units the device uses.
    fn threads(&self) -> usize;
    /// Whether the device flushes subnormal numbers to zero (operands and results), as XLA's
    /// CPU code does; IEEE arithmetic, subnormals kept, otherwise.
    fn flushes_subnormals(&self) -> bool {
        false
    }
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
    /// Host<->device transfers this device (with its clones) has made so far, or None for a
    /// device whose tensors live in host memory (the CPU). Workloads that leave their inputs
    /// and intermediates on the device make none between upload and read-back.
    fn transfers(&self) -> Option<Transfers> {
        None
    }
    /// Bytes of device buffers in use now and their peak since the device opened or the last
    /// [`Device::reset_peak_device_memory`], or None for a device that does not track them.
    fn device_memory(&self) -> Option<DeviceMemory> {
        None
    }
    /// Starts a new peak at the bytes in use now.
    fn reset_peak_device_memory(&self) {}
    /// Runs `body`, one timed call of a prepared case, whose trace `cell` keeps between calls.
    /// Eager devices just run it; a traced device (the facade's `Traced`) records what it
    /// issues on the first call and replays the recording on later ones.
    fn run_traced<E: From<crate::OpError>>(
        &self,
        _cell: &TraceCell,
        body: &mut dyn FnMut() -> Result<(), E>,
    ) -> Result<(), E> {
        body()
    }
}

/// Where a traced device keeps the recording of one timed body between calls (one per
/// prepared case and mode); empty, and unused, on every other device.
#[derive(Default)]
pub struct TraceCell(std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>);

impl TraceCell {
    /// The recording slot, which only a traced device reads or fills.
    pub fn slot(&self) -> &std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>> {
        &self.0
    }
}

/// Host<->device copies, counted by the kernel devices at each buffer read or write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Host-to-device writes (tensor and index uploads).
    pub uploads: u64,
    /// Device-to-host reads (read-backs of tensors, indices and check results).
    pub downloads: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

impl Transfers {
    /// Uploads and downloads together.
    pub fn count(&self) -> u64 {
        self.uploads + self.downloads
    }

    /// What happened between `earlier` and `self` (both from one device, `earlier` taken
    /// first).
    pub fn since(&self, earlier: &Transfers) -> Transfers {
        Transfers {
            uploads: self.uploads - earlier.uploads,
            downloads: self.downloads - earlier.downloads,
            bytes_up: self.bytes_up - earlier.bytes_up,
            bytes_down: self.bytes_down - earlier.bytes_down,
        }
    }
}

/// Device buffer memory of one device, in bytes: what adgauge asked the driver for, from each
/// buffer's allocation to the drop of its last handle. The driver may round allocations up, and
/// may keep a dropped buffer until the queued kernels that use it have run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes of the device buffers alive now.
    pub in_use: usize,
    /// The most bytes alive at once since the device opened or the peak was last reset.
    pub peak: usize,
}

/// Whether a device kind can be used on this machine, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    pub name: &'static str,
    pub available: bool,
    /// What was found (device model, version) or why the device is unavailable.
    pub detail: String,
}
