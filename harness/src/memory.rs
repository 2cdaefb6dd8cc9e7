//! Peak-memory measurement through a counting global allocator. While [`allocations_during`] runs it counts
//! every byte allocated and freed in the process, so it is only meaningful when nothing else
//! runs concurrently: `adgauge run` measures one untimed evaluation at a time.
//!
//! The counted allocator is mimalloc, not the system's: tape-based AD makes several small
//! allocations per op, and glibc's malloc (with its fastbin consolidation when a large block is
//! freed after many small ones) took about 45% of an LSTM gradient here. The counts are of
//! requested bytes, so they do not depend on the allocator underneath.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use mimalloc::MiMalloc as Inner;

/// mimalloc plus counters of the bytes allocated while [`allocations_during`] runs.
pub struct Counting;

/// While set ([`allocations_during`]), every allocation and free goes into [`NET`] and its high-water mark
/// [`PEAK`], byte for byte, from every thread. Otherwise the allocator only reads this flag:
/// counting costs a locked add per allocation (an always-on shared counter took a third of an
/// LSTM gradient's time here), so it runs only in the untimed evaluation that measures a mode's
/// peak, never in a timed one. Counting every byte is what makes a small case's footprint (a
/// histogram of 100 values: a few KB) a measured number rather than 0.
static COUNTING: AtomicBool = AtomicBool::new(false);
static NET: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn changed(delta: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        let now = NET.fetch_add(delta, Ordering::Relaxed) + delta;
        if delta > 0 {
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

/// What [`allocations_during`] saw, counted byte for byte across all threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocations {
    /// Bytes allocated and not freed by the end (negative when more was freed than allocated).
    pub net: isize,
    /// The most bytes live at once above what was live at the start (0 if nothing was added).
    pub peak: usize,
}

/// Runs `f` with exact counting and returns its result with what it allocated. Process-wide:
/// allocations of other threads in the meantime count too, so only one measurement runs at a
/// time and nothing else should (`adgauge run` measures one evaluation at a time).
pub fn allocations_during<R>(f: impl FnOnce() -> R) -> (R, Allocations) {
    NET.store(0, Ordering::SeqCst);
    PEAK.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let r = f();
    COUNTING.store(false, Ordering::SeqCst);
    let net = NET.load(Ordering::SeqCst);
    (r, Allocations { net, peak: PEAK.load(Ordering::SeqCst).max(0) as usize })
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
/// gradient's profile here). Peaks are unaffected: [`allocations_during`] counts requested bytes.
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
    fn the_purge_delay_is_mimallocs_option_15() {
        // The default of mi_option_purge_delay is 10 ms: if index 15 named another option, the
        // value read before setting would not be 10 (or another run already set it).
        let before = purge_delay_ms();
        assert!(before == 10 || before == PURGE_DELAY_MS, "option 15 reads {before}");
        keep_freed_pages();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }
}
