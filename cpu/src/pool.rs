//! The CPU device's caching allocator.
//!
//! Freshly allocated large outputs cost more than the kernels that fill them (first-touch page
//! faults: a 40 MB gather into a new buffer takes 20-30 ms here, into a reused one 4-10 ms), so
//! buffers go back to a pool when their last handle drops and are handed out again for the next
//! request of the same element type and length, as PyTorch's caching allocator does. A recycled
//! buffer holds stale values: kernels overwrite every element they hand out.
//!
//! Large buffers are also *coloured*: each starts at its own offset into its allocation. The
//! allocator hands out large blocks at addresses equal modulo 2 MB (64 MB with mimalloc), so
//! without it element i of every array shares its low address bits with element i of every other
//! array of the same element size: a loop reading i32 indices and f32 values and writing f32
//! results then stalls on 4K aliasing (a load that seems to depend on an earlier store to another
//! array) and competes for the same cache sets. That made i32-indexed histograms 10-30% slower
//! than i64-indexed ones (whose 8-byte elements drift out of step with the 4-byte values).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Upper bound on the bytes the pool keeps cached (idle); more is freed. Overridable with
/// `ADGAUGE_POOL_BYTES`.
const DEFAULT_LIMIT: usize = 4 << 30;

/// Buffers smaller than this are not worth caching (the allocator's own caches serve them).
const MIN_CACHED_BYTES: usize = 64 << 10;

/// Buffers from this size on are coloured (see the module docs).
const MIN_COLOURED_BYTES: usize = 1 << 20;
/// The colours: offsets `c * COLOUR_STEP` for c in 0..COLOURS, distinct modulo 4096 (the step
/// is 320 modulo 4096, and 320 c = 0 mod 4096 only at c = 64) and spread over 64 KB of
/// cache-set period; whole cache lines, so SIMD alignment is kept.
const COLOURS: usize = 16;
const COLOUR_STEP: usize = 4096 + 320;

/// Idle buffers: each a `Coloured<T>` behind `Any`.
type Shelf = Vec<Box<dyn Any + Send>>;

/// An allocation and the offset of the buffer's first element in it.
struct Coloured<T> {
    data: Vec<T>,
    offset: usize,
}

#[derive(Default)]
struct Shelves {
    by_kind: HashMap<(TypeId, usize), Shelf>,
    bytes: usize,
}

/// A cache of idle buffers keyed by element type and length.
pub struct Pool {
    shelves: Mutex<Shelves>,
    limit: usize,
    /// Buffers of a cached size that no idle one could serve (allocated anew).
    misses: AtomicUsize,
    /// The colour of the next coloured allocation.
    next_colour: AtomicUsize,
}

impl Pool {
    pub fn new() -> Arc<Pool> {
        let limit = std::env::var("ADGAUGE_POOL_BYTES").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_LIMIT);
        Arc::new(Pool {
            shelves: Mutex::new(Shelves::default()),
            limit,
            misses: AtomicUsize::new(0),
            next_colour: AtomicUsize::new(0),
        })
    }

    /// A buffer of `len` elements with unspecified (but initialised) contents.
    pub fn take<T: Copy + Default + Send + 'static>(self: &Arc<Self>, len: usize) -> Buf<T> {
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= MIN_CACHED_BYTES {
            let mut shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(shelf) = shelves.by_kind.get_mut(&(TypeId::of::<T>(), len))
                && let Some(boxed) = shelf.pop()
                && let Ok(c) = boxed.downcast::<Coloured<T>>()
            {
                shelves.bytes -= c.data.len() * std::mem::size_of::<T>();
                return Buf { data: c.data, offset: c.offset, len, pool: Some(self.clone()) };
            }
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        let offset = if bytes >= MIN_COLOURED_BYTES {
            let colour = self.next_colour.fetch_add(1, Ordering::Relaxed) % COLOURS;
            colour * COLOUR_STEP / std::mem::size_of::<T>().max(1)
        } else {
            0
        };
        Buf {
            // Zero-filled allocations come from calloc: no work until pages are touched.
            data: vec![T::default(); offset + len],
            offset,
            len,
            // Small buffers never return to the pool: skip the handle (two atomic operations
            // per tensor, which show on the tiny tensors of the LSTM).
            pool: (bytes >= MIN_CACHED_BYTES).then(|| self.clone()),
        }
    }

    /// A buffer filled with `value`.
    pub fn filled<T: Copy + Default + Send + Sync + 'static>(self: &Arc<Self>, len: usize, value: T) -> Buf<T> {
        let mut b = self.take(len);
        super::kernels::par_fill(&mut b, value);
        b
    }

    fn give<T: Send + 'static>(&self, data: Vec<T>, offset: usize, len: usize) {
        let bytes = data.len() * std::mem::size_of::<T>();
        if len * std::mem::size_of::<T>() < MIN_CACHED_BYTES {
            return;
        }
        let mut shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
        if shelves.bytes + bytes > self.limit {
            return; // dropped here: freed
        }
        shelves.bytes += bytes;
        shelves.by_kind.entry((TypeId::of::<T>(), len)).or_default().push(Box::new(Coloured { data, offset }));
    }

    /// Frees every cached buffer (before a memory measurement, or to give memory back).
    pub fn trim(&self) {
        let mut shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
        shelves.by_kind.clear();
        shelves.bytes = 0;
    }

    /// How many buffers of a cached size were allocated anew so far: a program that repeats
    /// the same calls stops adding to it once the cache holds what one run frees.
    pub fn misses(&self) -> usize {
        self.misses.load(Ordering::Relaxed)
    }

    /// Bytes currently held idle in the cache.
    pub fn cached_bytes(&self) -> usize {
        self.shelves.lock().map(|s| s.bytes).unwrap_or(0)
    }
}

/// A buffer that returns to its pool when dropped.
pub struct Buf<T: Send + 'static> {
    /// The allocation; the buffer is `data[offset..offset + len]`.
    data: Vec<T>,
    offset: usize,
    len: usize,
    pool: Option<Arc<Pool>>,
}

impl<T: Send + 'static> Buf<T> {
    /// Wraps a vector that no pool has seen (it joins the pool when dropped).
    pub fn from_vec(data: Vec<T>, pool: &Arc<Pool>) -> Buf<T> {
        let len = data.len();
        Buf { data, offset: 0, len, pool: Some(pool.clone()) }
    }
}

impl<T: Send + 'static> Drop for Buf<T> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(std::mem::take(&mut self.data), self.offset, self.len);
        }
    }
}

impl<T: Send + 'static> Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data[self.offset..self.offset + self.len]
    }
}

impl<T: Send + 'static> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data[self.offset..self.offset + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_buffer_is_handed_out_again_with_its_old_contents() {
        let pool = Pool::new();
        let mut a = pool.take::<f32>(1 << 20);
        a[0] = 42.0;
        let ptr = a.as_ptr();
        drop(a);
        assert_eq!(pool.cached_bytes(), 4 << 20);
        let b = pool.take::<f32>(1 << 20);
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(b[0], 42.0);
        assert_eq!(pool.cached_bytes(), 0);
        assert_eq!(pool.misses(), 1, "the second request was served from the cache");
        // Another type or length does not reuse it.
        drop(b);
        let c = pool.take::<i32>(1 << 20);
        assert_ne!(c.as_ptr() as usize, ptr as usize);
        pool.trim();
        assert_eq!(pool.cached_bytes(), 0);
    }

    #[test]
    fn large_buffers_live_together_start_at_distinct_offsets_modulo_4096() {
        // The allocator aligns large blocks alike (mimalloc, or glibc's mmap: page plus a
        // header); the pool must not leave element i of every live array on the same low
        // address bits (4K aliasing between streams). What the pool controls is each buffer's
        // byte offset into its allocation (glibc also serves some large blocks from its heap,
        // at any address, so the addresses themselves prove nothing).
        let pool = Pool::new();
        let bufs: Vec<Buf<f32>> = (0..COLOURS).map(|_| pool.take::<f32>(1 << 20)).collect();
        let mut offsets: Vec<usize> =
            bufs.iter().map(|b| (b.as_ptr() as usize - b.data.as_ptr() as usize) % 4096).collect();
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), COLOURS, "offsets modulo 4096: {offsets:?}");
        // Offsets are whole cache lines from the allocation's start.
        assert!(bufs.iter().all(|b| b.len() == 1 << 20 && b.offset * 4 % 64 == 0));
        // A recycled buffer keeps its colour and its length, and the pool counts its whole
        // allocation.
        let (ptr, allocated) = (bufs[3].as_ptr(), bufs[3].data.len() * 4);
        drop(bufs);
        assert!(pool.cached_bytes() >= COLOURS << 22);
        let again: Vec<Buf<f32>> = (0..COLOURS).map(|_| pool.take::<f32>(1 << 20)).collect();
        assert!(again.iter().any(|b| b.as_ptr() == ptr && b.data.len() * 4 == allocated));
        assert_eq!(pool.cached_bytes(), 0);
        assert_eq!(pool.misses(), COLOURS);
    }

    #[test]
    fn filled_overwrites_stale_contents() {
        let pool = Pool::new();
        let mut a = pool.take::<f64>(1 << 16);
        a.iter_mut().for_each(|x| *x = 7.0);
        drop(a);
        let b = pool.filled::<f64>(1 << 16, -1.5);
        assert!(b.iter().all(|&x| x == -1.5));
    }
}
