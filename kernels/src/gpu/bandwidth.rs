//! The roofline of a kernel device: how fast it copies device memory to device memory. A
//! memory-bound kernel (a `+` histogram's primal reads each index and value once) can at best
//! move bytes at this rate, so its time next to this figure says how close it is to the
//! hardware (docs/gpu.md). The copy is the runtime's own (`cuMemcpyDtoD`, `clEnqueueCopyBuffer`),
//! not a kernel of ours, and its result is read back and compared, so a figure from a copy that
//! did not happen is an error rather than a number.

use std::time::Instant;

use super::KernelRuntime;
use crate::{OpError, Result};

/// What [`copy_bandwidth`] measured: `copies` timed copies of `bytes` bytes each.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyBandwidth {
    pub bytes: usize,
    pub copies: usize,
    /// Seconds of the fastest copy (launch to completion).
    pub best_s: f64,
    /// Median seconds of the copies.
    pub median_s: f64,
}

impl CopyBandwidth {
    /// Bytes moved per second by the fastest copy, counting every byte twice (read and written),
    /// the convention of STREAM's copy and of the vendors' device-to-device figures.
    pub fn best_bytes_per_s(&self) -> f64 {
        2.0 * self.bytes as f64 / self.best_s
    }

    /// [`CopyBandwidth::best_bytes_per_s`] for the median copy.
    pub fn median_bytes_per_s(&self) -> f64 {
        2.0 * self.bytes as f64 / self.median_s
    }
}

/// Copies a buffer of `bytes` bytes (rounded up to whole 8-byte words) to another on the device
/// of runtime R `copies` times after one untimed warm-up copy, timing each copy from its launch
/// to the queue's completion; then reads the destination back and compares it with the uploaded
/// pattern. Errors: the device cannot start, an allocation or copy fails, or the copy is wrong.
pub fn copy_bandwidth<R: KernelRuntime>(bytes: usize, copies: usize) -> Result<CopyBandwidth> {
    let rt = R::get().map_err(OpError::Device)?;
    let words = bytes.div_ceil(8).max(1);
    let bytes = words * 8;
    let copies = copies.max(1);
    // Distinct, position-dependent words: a copy that moved the wrong range or nothing fails
    // the comparison below (device memory is uninitialised, and could hold an older copy).
    let pattern: Vec<i64> =
        (0..words as i64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64) ^ 0x5A).collect();
    let src = rt.upload(&pattern)?;
    let mut dst = rt.alloc(words, 8)?;
    rt.copy(&src, &mut dst, bytes)?;
    rt.finish()?;
    let mut times = Vec::with_capacity(copies);
    for _ in 0..copies {
        let started = Instant::now();
        rt.copy(&src, &mut dst, bytes)?;
        rt.finish()?;
        times.push(started.elapsed().as_secs_f64());
    }
    let back: Vec<i64> = rt.download(&dst)?;
    if let Some(i) = back.iter().zip(&pattern).position(|(a, b)| a != b) {
        return Err(OpError::Device(format!(
            "{}: the device-to-device copy of {bytes} bytes is wrong at byte {} (read back {:#x}, uploaded {:#x})",
            R::ENGINE,
            8 * i,
            back[i],
            pattern[i]
        )));
    }
    times.sort_by(f64::total_cmp);
    let best_s = times[0].max(1e-9);
    let median_s = times[times.len() / 2].max(1e-9);
    Ok(CopyBandwidth { bytes, copies, best_s, median_s })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_count_each_byte_read_and_written() {
        let c = CopyBandwidth { bytes: 1 << 30, copies: 3, best_s: 0.5, median_s: 1.0 };
        assert_eq!(c.best_bytes_per_s(), 4.0 * (1u64 << 30) as f64);
        assert_eq!(c.median_bytes_per_s(), 2.0 * (1u64 << 30) as f64);
    }
}
