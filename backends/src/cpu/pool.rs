//! The CPU device's caching allocator.
//!
//! Freshly allocated large outputs cost more than the kernels that fill them (first-touch page
//! faults: a 40 MB gather into a new buffer takes 20-30 ms here, into a reused one 4-10 ms), so
//! buffers go back to a pool when their last handle drops and are handed out again for the next
//! request of the same element type and length, as PyTorch's caching allocator does. A recycled
//! buffer holds stale values: kernels overwrite every element they hand out.

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

type Shelf = Vec<Box<dyn Any + Send>>;

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
}

impl Pool {
    pub fn new() -> Arc<Pool> {
        let limit = std::env::var("ADGAUGE_POOL_BYTES").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_LIMIT);
        Arc::new(Pool { shelves: Mutex::new(Shelves::default()), limit, misses: AtomicUsize::new(0) })
    }

    /// A buffer of `len` elements with unspecified (but initialised) contents.
    pub fn take<T: Copy + Default + Send + 'static>(self: &Arc<Self>, len: usize) -> Buf<T> {
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= MIN_CACHED_BYTES {
            let mut shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(shelf) = shelves.by_kind.get_mut(&(TypeId::of::<T>(), len))
                && let Some(boxed) = shelf.pop()
            {
                shelves.bytes -= bytes;
                if let Ok(v) = boxed.downcast::<Vec<T>>() {
                    return Buf { data: *v, pool: Some(self.clone()) };
                }
            }
        }
        if bytes >= MIN_CACHED_BYTES {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        Buf {
            // Zero-filled allocations come from calloc: no work until pages are touched.
            data: vec![T::default(); len],
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

    fn give<T: Send + 'static>(&self, v: Vec<T>) {
        let bytes = v.len() * std::mem::size_of::<T>();
        if bytes < MIN_CACHED_BYTES {
            return;
        }
        let mut shelves = self.shelves.lock().unwrap_or_else(|e| e.into_inner());
        if shelves.bytes + bytes > self.limit {
            return; // dropped here: freed
        }
        shelves.bytes += bytes;
        let len = v.len();
        shelves.by_kind.entry((TypeId::of::<T>(), len)).or_default().push(Box::new(v));
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
    data: Vec<T>,
    pool: Option<Arc<Pool>>,
}

impl<T: Send + 'static> Buf<T> {
    /// Wraps a vector that no pool has seen (it joins the pool when dropped).
    pub fn from_vec(data: Vec<T>, pool: &Arc<Pool>) -> Buf<T> {
        Buf { data, pool: Some(pool.clone()) }
    }
}

impl<T: Send + 'static> Drop for Buf<T> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(std::mem::take(&mut self.data));
        }
    }
}

impl<T: Send + 'static> Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: Send + 'static> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
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
    fn filled_overwrites_stale_contents() {
        let pool = Pool::new();
        let mut a = pool.take::<f64>(1 << 16);
        a.iter_mut().for_each(|x| *x = 7.0);
        drop(a);
        let b = pool.filled::<f64>(1 << 16, -1.5);
        assert!(b.iter().all(|&x| x == -1.5));
    }
}
