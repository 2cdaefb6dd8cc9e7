//! Peak-memory measurement through a counting global allocator. It counts the bytes live in the
//! process, so it is only meaningful when nothing else runs concurrently: `adgauge run` measures
//! one evaluation at a time (tests share one process and never read it).
//!
//! The counted allocator is mimalloc, not the system's: tape-based AD makes several small
//! allocations per op, and glibc's malloc (with its fastbin consolidation when a large block is
//! freed after many small ones) took about 45% of an LSTM gradient here. The counts are of
//! requested bytes, so they do not depend on the allocator underneath.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

use mimalloc::MiMalloc as Inner;

/// mimalloc plus a live-bytes counter and its high-water mark.
pub struct Counting;

/// Bytes live in the process, as flushed by the threads (signed: one thread may flush a free
/// of bytes another thread's allocation has not flushed yet).
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Each thread keeps its allocations and frees in a local count and adds it to [`LIVE`] once
/// it reaches this many bytes either way (and at once for any allocation this large). A locked
/// add to the shared counter on every allocation took 88% of the counter's time and a third of
/// an LSTM gradient's (tens of thousands of small tensors, their bookkeeping allocated by the
/// main thread while the CPU device's threads allocate too). The peak is therefore exact to
/// within this many bytes per thread, far below the buffers it is there to see.
const FLUSH_BYTES: isize = 64 << 10;

thread_local! {
    // `const`: no lazy initialisation and no destructor, so the allocator may use it anywhere.
    static PENDING: Cell<isize> = const { Cell::new(0) };
}

fn changed(delta: isize) {
    let flush = PENDING
        .try_with(|p| {
            let v = p.get() + delta;
            if v.abs() >= FLUSH_BYTES {
                p.set(0);
                v
            } else {
                p.set(v);
                0
            }
        })
        // A thread tearing down its locals counts directly.
        .unwrap_or(delta);
    if flush != 0 {
        let now = LIVE.fetch_add(flush, Ordering::Relaxed) + flush;
        // A plain load first: fetch_max is a locked compare-and-swap loop.
        if flush > 0 && now > PEAK.load(Ordering::Relaxed) {
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
    }
}

// SAFETY: forwards every call to mimalloc unchanged; the counters are only updated
// after a successful allocation and before a deallocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { Inner.alloc(layout) };
        if !p.is_null() {
            changed(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { Inner.alloc_zeroed(layout) };
        if !p.is_null() {
            changed(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { Inner.dealloc(ptr, layout) };
        changed(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { Inner.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            changed(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Bytes allocated and not yet freed (to within 64 KiB per thread).
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed).max(0) as usize
}

/// Runs `f` and returns its result with the peak bytes it added above what was live before.
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(base).max(0) as usize)
}

/// mimalloc's `mi_option_purge_delay`: its index in `mi_option_t`, 15 in both the v2 and v3
/// headers that libmimalloc-sys bundles (the crate exports no constant for it).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// How long mimalloc keeps freed memory committed before returning it to the OS, in ms.
pub const PURGE_DELAY_MS: i64 = 1000;

/// Keeps freed pages committed for [`PURGE_DELAY_MS`] instead of mimalloc's 10 ms. The engines
/// free and reallocate the same sizes on every evaluation, and samples are tens of ms apart:
/// with 10 ms, memory went back to the OS between evaluations and came back as fresh pages,
/// which the kernel zeroes on first touch (`clear_page_erms` was 8% of a GMM d = 20, K = 25
/// gradient's profile here). Peaks are unaffected: [`peak_during`] counts requested bytes.
pub fn keep_freed_pages() {
    // SAFETY: mi_option_set only stores the value; any value is valid for this option.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as std::ffi::c_long) }
}

/// mimalloc's purge delay now, in ms.
pub fn purge_delay_ms() -> i64 {
    // SAFETY: reads an option.
    unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) as i64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_small_allocations_add_up_in_the_peak() {
        // 4000 live allocations of 1 KiB each stay below the per-thread flush threshold one by
        // one; together they must show (to within the threshold this thread may still hold).
        let (n, peak) = peak_during(|| {
            let held: Vec<Vec<u8>> = (0..4000).map(|i| vec![i as u8; 1024]).collect();
            held.iter().map(|v| v.len()).sum::<usize>()
        });
        assert_eq!(n, 4000 * 1024);
        assert!(peak as isize >= 4000 * 1024 - FLUSH_BYTES, "peak {peak}");
    }

    #[test]
    fn the_purge_delay_is_mimallocs_option_15() {
        // The default of mi_option_purge_delay is 10 ms: if index 15 named another option, the
        // value read before setting would not be 10 (or another run already set it).
        let before = purge_delay_ms();
        assert!(before == 10 || before == PURGE_DELAY_MS, "option 15 reads {before}");
        keep_freed_pages();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }

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
