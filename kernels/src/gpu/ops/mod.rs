//! The op API on the kernel device, one op family per file: each holds the family's trait
//! implementation for [`KernelDevice`](super::KernelDevice) over any [`KernelRuntime`](super::KernelRuntime).

mod dense;
mod elementwise;
mod hist;
mod index;
mod reduce;
mod rule_kernels;
mod scan;
mod tensor;
