//! The op API on the CPU device, one op family per file: each holds the family's trait
//! implementation for [`Cpu`](crate::Cpu) and the per-dtype bodies (`*_t`) its methods dispatch
//! to. The kernels they call are in the device's kernel modules (`hist`, `fold`, `scan`, `sort`,
//! `dense`, `lstm`, ...).

mod dense;
mod elementwise;
mod hist;
mod index;
mod reduce;
mod rule_kernels;
mod scan;
mod tensor;
