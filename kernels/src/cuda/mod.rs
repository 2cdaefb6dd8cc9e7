//! The CUDA device: the [kernel device](crate::gpu) over a thin cudarc launcher. Programs are
//! the shared kernel source with `prelude_cuda.h`, compiled by NVRTC to PTX at run time. libcuda
//! and libnvrtc are loaded at run time (cudarc's `dynamic-loading`), so the build needs no CUDA
//! toolkit and a machine without a driver reports the device unavailable with the reason.
//!
//! Without a GPU the kernels' logic is exercised through the OpenCL device (the same source on
//! PoCL), and `kernels/tests/nvrtc.rs` compiles every CUDA program to PTX when NVRTC is found.

mod runtime;

use crate::device::DeviceStatus;
use crate::gpu::{GpuIndex, GpuTensor, KernelDevice};
pub use runtime::{CudaRuntime, DEVICE_ENV, compile_ptx, nvrtc_available};

/// The CUDA device. Cloning is cheap; all clones share the process-wide context.
pub type Cuda = KernelDevice<CudaRuntime>;
/// A value tensor in CUDA device memory.
pub type CudaTensor = GpuTensor<CudaRuntime>;
/// An index tensor (i64) in CUDA device memory.
pub type CudaIndex = GpuIndex<CudaRuntime>;

/// What `adgauge backends` prints for CUDA.
pub fn probe() -> DeviceStatus {
    match runtime::runtime() {
        Ok(rt) => DeviceStatus {
            name: "cuda",
            available: true,
            detail: format!(
                "device {} ({}), compute capability {}.{}, {} SMs, NVRTC {}",
                rt.ordinal, rt.device_name, rt.capability.0, rt.capability.1, rt.sm_count, rt.nvrtc_version
            ),
        },
        Err(reason) => DeviceStatus { name: "cuda", available: false, detail: reason },
    }
}
