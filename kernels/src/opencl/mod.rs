//! The OpenCL device: the [kernel device](crate::gpu) over the OpenCL runtime (opencl3,
//! libOpenCL loaded at run time, so the build needs no OpenCL SDK). Programs are built from the
//! shared kernel source with `prelude_opencl.h`; PoCL runs them on the CPU where no GPU is
//! present, which is how the CUDA kernels' logic is exercised too.

mod runtime;

use crate::device::DeviceStatus;
use crate::gpu::{GpuIndex, GpuTensor, KernelDevice};
pub use runtime::{ClRuntime, DEVICE_ENV};

/// The OpenCL device. Cloning is cheap; all clones share the process-wide context.
pub type OpenCl = KernelDevice<ClRuntime>;
/// A value tensor in an OpenCL buffer.
pub type OclTensor = GpuTensor<ClRuntime>;
/// An index tensor (i64) in an OpenCL buffer.
pub type OclIndex = GpuIndex<ClRuntime>;

/// What `adgauge backends` prints for OpenCL.
pub fn probe() -> DeviceStatus {
    match runtime::runtime() {
        Ok(rt) => DeviceStatus {
            name: "opencl",
            available: true,
            detail: format!(
                "platform {}, device {}, fp64 {}, {} compute units",
                rt.platform,
                rt.device_name,
                if rt.fp64 { "yes" } else { "no" },
                rt.compute_units
            ),
        },
        Err(reason) => DeviceStatus { name: "opencl", available: false, detail: reason },
    }
}
