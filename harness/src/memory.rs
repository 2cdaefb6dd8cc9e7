//! Peak-memory measurement through a counting global allocator. It counts the bytes live in the
//! process, so it is only meaningful when nothing else runs concurrently: `adgauge run` measures
//! one evaluation at a time (tests share one process and never read it).
//!
//! The counted allocator is mimalloc, not the system's: tape-based AD makes several small
//! allocations per op, and glibc's malloc (with its fastbin consolidation when a large block is
//! freed after many small ones) took about 45% of an LSTM gradient here. The counts are of
//! requested bytes, so they do not depend on the allocator underneath.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use mimalloc::MiMalloc as Inner;

/// mimalloc plus a live-bytes counter and its high-water mark.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards every call to mimalloc unchanged; the counters are only updated
// after a successful allocation and before a deallocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { Inner.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { Inner.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { Inner.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { Inner.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

/// Bytes allocated and not yet freed.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Runs `f` and returns its result with the peak bytes it added above what was live before.
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = live_bytes();
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_temporary_allocation_shows_in_the_peak_but_not_in_live_bytes() {
        let before = live_bytes();
        let (sum, peak) = peak_during(|| {
            let v = vec![1u8; 64 << 20];
            v.iter().map(|&x| x as u64).sum::<u64>()
        });
        assert_eq!(sum, 64 << 20);
        // Other tests may allocate concurrently, which can only raise the peak.
        assert!(peak >= 64 << 20, "peak {peak}");
        assert!(live_bytes() < before + (64 << 20));
    }
}
