//! adgauge's kernel devices: the op API implemented once over a small kernel runtime
//! ([`gpu::KernelDevice`]), and that device over OpenCL ([`OpenCl`]) and CUDA ([`Cuda`]),
//! both loaded at run time. Both run one shared kernel source ([`kernel_source`], the files under
//! `kernels/kernels/`) behind per-target preludes, as the Futhark runtime does; PoCL runs the
//! OpenCL form on a CPU, which is how CI exercises the CUDA kernels' logic.
//!
//! This crate depends on the op API only (`adgauge-ops`).

pub mod cuda;
pub mod gpu;
pub mod kernel_source;
pub mod opencl;

pub use cuda::Cuda;
pub use opencl::OpenCl;

// The op API under the paths the devices' code names it by (`crate::DType`,
// `crate::ops::TensorOps`, `crate::shape`).
use adgauge_ops as ops;
#[allow(unused_imports)]
use adgauge_ops::*;
