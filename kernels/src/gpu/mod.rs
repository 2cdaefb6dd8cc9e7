//! The kernel device: every primitive of the op API implemented once by launching kernels of the
//! shared kernel source (`kernels/kernels/`, see [`crate::kernel_source`]) through a small
//! [`KernelRuntime`]. The OpenCL device ([`crate::OpenCl`]) and the CUDA device
//! ([`crate::Cuda`]) are this device over their runtimes, so no kernel logic or launch
//! sequence exists twice: a runtime only allocates, copies, compiles a program per
//! (dtype, operator) and launches a kernel by name with [`Arg`]s.
//!
//! Native kernels: creation/read-back, full, unary/binary/select/index_eq, reduce, gather,
//! gather_index, scatter, reduce_by_index (atomics; local-memory sub-histograms for small k), the
//! arg-histogram (packed 64-bit atomic for f32, two passes for f64), the `*` rule kernels,
//! combine/partials, fold_adjoint, total_form_adjoint, the dual-number histogram and the chunked
//! general rule (on GPUs a work-group per chunk, each work-item folding one slice of it into a row
//! of k in local memory and the rows merged or scanned across the group, where the device's
//! work-group limit and local memory give at least MIN_CHUNK_GROUP such rows; else, and on CPU
//! devices, one work-item per chunk), `sort_by_key` / `sort_by_key_ranked` (a stable LSD radix
//! sort: per-chunk digit counts, their prefix, an in-order scatter per chunk) and `scan` (chunk
//! sweeps, a carry pass over the chunks, a fix-up of the positions before each chunk's first
//! segment start), and `linear_recurrence` (the same three phases over affine maps, with the CPU
//! device's order of operations), and the dense ops: `broadcast_to` and `sum_to` over (outer,
//! broadcast, inner) views one broadcast run at a time, `arg_reduce_axis` (long lines in fixed
//! blocks, then the blocks' winners in order), and `matmul` in square tiles staged in local memory,
//! every transpose and batch form. Every primitive runs on the device; none goes through the CPU.
//!
//! The device counts what crosses the host boundary ([`Device::transfers`]: uploads of tensors
//! and indices, read-backs, and a gather's range check when an index tensor's range is not
//! known) and the bytes of its live buffers with their peak ([`Device::device_memory`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::checks::{broadcast_shape, same_dtype, same_len};
use crate::device::{Device, DeviceMemory, Transfers};
use crate::ops::{ChunkedHist, Extremum, IndexMeta, Operand, OutOfRange, ScanSpec, TensorMeta};
use crate::ops::{DenseOps, ElementwiseOps, HistOps, IndexOps, ReduceOps, RuleKernels, ScanOps, TensorOps};
use crate::shape;
use crate::{BinaryOp, DType, HistOp, IndexDType, OpError, Result, UnaryOp};

mod bandwidth;
// The op families, one file each (burn's layout).
mod ops;
pub use bandwidth::{CopyBandwidth, copy_bandwidth};

/// A device buffer of raw bytes (values or indices) with its element count.
pub struct RawBuf<B> {
    pub buf: B,
    pub len: usize,
    /// The device's memory accounting, released with the buffer (None for buffers a runtime
    /// allocates outside a device, e.g. in tests).
    tracked: Option<Tracked>,
}

/// What one kernel device (and its clones) has done: host<->device transfers and the bytes of
/// its live device buffers with their peak. Shared by every clone of a device, separate per
/// [`KernelDevice::new`], so concurrent users (tests) do not see each other's traffic.
#[derive(Debug, Default)]
struct Counters {
    uploads: AtomicU64,
    downloads: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    in_use: AtomicUsize,
    peak: AtomicUsize,
}

/// Bytes of one live buffer, counted in [`Counters`] until it drops.
struct Tracked {
    counters: Arc<Counters>,
    bytes: usize,
}

impl Tracked {
    fn new(counters: Arc<Counters>, bytes: usize) -> Tracked {
        let now = counters.in_use.fetch_add(bytes, Ordering::Relaxed) + bytes;
        counters.peak.fetch_max(now, Ordering::Relaxed);
        Tracked { counters, bytes }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.counters.in_use.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A kernel argument.
pub enum Arg<'a, B> {
    Buf(&'a RawBuf<B>),
    I64(i64),
    I32(i32),
    /// A scalar of the program's element type.
    Val(f64, DType),
    /// Local (OpenCL) or dynamic shared (CUDA) memory of this many bytes; see `LOCAL_ARG` in
    /// the preludes.
    Local(usize),
}

/// Element types that cross the host/device boundary as plain bytes.
///
/// # Safety
/// Implementors have no padding and every bit pattern is a valid value.
pub unsafe trait Pod: Copy + Default + 'static {}
// SAFETY: primitive numbers: no padding, every bit pattern valid.
unsafe impl Pod for f32 {}
// SAFETY: as above.
unsafe impl Pod for f64 {}
// SAFETY: as above.
unsafe impl Pod for i64 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for u8 {}

/// What a platform (OpenCL, CUDA) provides to the kernel device. One runtime per process,
/// shared by all clones of the device. Every method reports failures as [`OpError`]s; none
/// panics.
pub trait KernelRuntime: Send + Sync + Sized + 'static {
    /// The platform's buffer handle.
    type Raw: Send + Sync + 'static;

    /// The engine name (`opencl`, `cuda`), also the device's name in `adgauge backends`.
    const ENGINE: &'static str;

    /// The process-wide runtime, started on first use, or why it cannot start.
    fn get() -> std::result::Result<Arc<Self>, String>;
    /// Platform and device, e.g. `Portable Computing Language / cpu-haswell`.
    fn describe(&self) -> String;
    /// Compute units (OpenCL) or streaming multiprocessors (CUDA).
    fn compute_units(&self) -> usize;
    /// Largest work-group / thread block.
    fn max_group(&self) -> usize;
    /// Local / shared memory per work-group in bytes.
    fn local_mem(&self) -> usize;
    /// Whether the device is a CPU (an OpenCL CPU device such as PoCL), where a work-group runs
    /// on one core and one work-item per chunk is the right shape; false by default.
    fn is_cpu(&self) -> bool {
        false
    }
    /// Whether f64 kernels run.
    fn has_f64(&self) -> bool;
    /// Total time spent compiling programs so far (reported apart from run time).
    fn compile_time(&self) -> Duration;

    /// A new uninitialised buffer of `bytes` bytes (callers ask for at least 8: no platform
    /// has empty buffers).
    fn alloc_bytes(&self, bytes: usize) -> Result<Self::Raw>;
    /// Writes `src` to the start of `dst` (blocking: `src` may be dropped on return).
    fn write(&self, dst: &mut Self::Raw, src: &[u8]) -> Result<()>;
    /// Reads the first `dst.len()` bytes of `src` (blocking).
    fn read(&self, src: &Self::Raw, dst: &mut [u8]) -> Result<()>;
    /// Copies the first `bytes` bytes of `src` to `dst` (queued).
    fn copy_bytes(&self, src: &Self::Raw, dst: &mut Self::Raw, bytes: usize) -> Result<()>;
    /// Waits for every queued command.
    fn finish(&self) -> Result<()>;
    /// Launches kernel `name` of the (dtype, op, index dtype) program over `global` work-items in groups of
    /// `local` (the runtime's choice when `None`); work-items past `global` may run and must
    /// return early (every kernel checks its count). Nothing runs when `global` is 0. The
    /// program is compiled on first use and cached.
    #[allow(clippy::too_many_arguments)] // the program's three keys, the kernel and its launch
    fn launch(
        &self,
        dtype: DType,
        op: HistOp,
        index: IndexDType,
        name: &'static str,
        global: usize,
        local: Option<usize>,
        args: &[Arg<'_, Self::Raw>],
    ) -> Result<()>;
    /// Compiles the (dtype, op, index dtype) program (through the cache) and looks up every
    /// kernel in it; returns the kernel names.
    fn build(&self, dtype: DType, op: HistOp, index: IndexDType) -> Result<Vec<&'static str>>;

    fn check_dtype(&self, dtype: DType) -> Result<()> {
        if dtype == DType::F64 && !self.has_f64() {
            return Err(OpError::Unsupported(format!("f64 on {}: the device lacks fp64", self.describe())));
        }
        Ok(())
    }

    /// A new uninitialised buffer of `len` elements of `elem_size` bytes.
    fn alloc(&self, len: usize, elem_size: usize) -> Result<RawBuf<Self::Raw>> {
        let bytes = len
            .checked_mul(elem_size)
            .ok_or_else(|| OpError::Device(format!("a buffer of {len} elements overflows usize")))?;
        Ok(RawBuf { buf: self.alloc_bytes(bytes.max(8))?, len, tracked: None })
    }

    /// Uploads plain-old-data elements.
    fn upload<E: Pod>(&self, data: &[E]) -> Result<RawBuf<Self::Raw>> {
        let mut b = self.alloc(data.len(), size_of::<E>())?;
        if !data.is_empty() {
            // SAFETY: E is Pod (no padding), so its memory is initialised bytes; the view covers
            // exactly the slice and lives no longer than it.
            let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, size_of_val(data)) };
            self.write(&mut b.buf, bytes)?;
        }
        Ok(b)
    }

    /// Downloads `b.len` elements of type E.
    fn download<E: Pod>(&self, b: &RawBuf<Self::Raw>) -> Result<Vec<E>> {
        let mut out = vec![E::default(); b.len];
        if b.len > 0 {
            // SAFETY: E is Pod (every bit pattern valid), so writing arbitrary bytes into `out`
            // is sound; the view covers exactly `out` and the read is blocking.
            let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, size_of_val(&out[..])) };
            self.read(&b.buf, bytes)?;
        }
        Ok(out)
    }

    /// Copies `bytes` bytes from `src` to `dst`.
    fn copy(&self, src: &RawBuf<Self::Raw>, dst: &mut RawBuf<Self::Raw>, bytes: usize) -> Result<()> {
        if bytes > 0 { self.copy_bytes(&src.buf, &mut dst.buf, bytes) } else { Ok(()) }
    }
}

/// A device buffer of runtime R.
type Buf<R> = RawBuf<<R as KernelRuntime>::Raw>;

/// A value tensor in a device buffer.
pub struct GpuTensor<R: KernelRuntime> {
    buf: Arc<Buf<R>>,
    shape: Vec<usize>,
    dtype: DType,
}

impl<R: KernelRuntime> Clone for GpuTensor<R> {
    fn clone(&self) -> Self {
        GpuTensor { buf: self.buf.clone(), shape: self.shape.clone(), dtype: self.dtype }
    }
}

impl<R: KernelRuntime> TensorMeta for GpuTensor<R> {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl<R: KernelRuntime> std::fmt::Debug for GpuTensor<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}Tensor({}, {:?})", R::ENGINE, self.dtype, self.shape)
    }
}

/// An index tensor (i32 or i64) in a device buffer.
pub struct GpuIndex<R: KernelRuntime> {
    buf: Arc<Buf<R>>,
    dtype: IndexDType,
    /// Every entry lies in `lo..=hi`, when known (uploads, sort permutations, winners' positions):
    /// a gather that must reject out-of-range indices then needs no device-side check, whose
    /// verdict would have to be read back.
    bounds: Option<(i64, i64)>,
}

impl<R: KernelRuntime> Clone for GpuIndex<R> {
    fn clone(&self) -> Self {
        GpuIndex { buf: self.buf.clone(), dtype: self.dtype, bounds: self.bounds }
    }
}

impl<R: KernelRuntime> IndexMeta for GpuIndex<R> {
    fn len(&self) -> usize {
        self.buf.len
    }
    fn index_dtype(&self) -> IndexDType {
        self.dtype
    }
}

impl<R: KernelRuntime> std::fmt::Debug for GpuIndex<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}Index({}, {})", R::ENGINE, self.dtype, self.buf.len)
    }
}

/// Which program a kernel runs in: the value dtype and the index dtype (`IDX_T`), i64 unless
/// the kernel reads an index tensor of the caller's.
#[derive(Clone, Copy)]
struct Prog(DType, IndexDType);

impl From<DType> for Prog {
    fn from(dtype: DType) -> Prog {
        Prog(dtype, IndexDType::I64)
    }
}

impl From<(DType, IndexDType)> for Prog {
    fn from((dtype, index): (DType, IndexDType)) -> Prog {
        Prog(dtype, index)
    }
}

/// The kernel device over runtime R. Cloning is cheap; all clones share the process-wide
/// runtime.
pub struct KernelDevice<R: KernelRuntime> {
    rt: Arc<R>,
    counters: Arc<Counters>,
    /// Whether the chunked kernels may run a work-group per chunk (see [`chunk_group`]): on by
    /// default except on CPU devices, where a work-group runs on one core and its slices and
    /// barriers only add work (PoCL: about 2x slower at k = 16).
    group_chunks: bool,
}

impl<R: KernelRuntime> Clone for KernelDevice<R> {
    fn clone(&self) -> Self {
        KernelDevice { rt: self.rt.clone(), counters: self.counters.clone(), group_chunks: self.group_chunks }
    }
}

/// Work-group size of histogram kernels with local memory.
const GROUP: usize = 64;
/// Work-group size of the one-work-item-per-chunk launches (see `launch_chunks`).
const CHUNK_GROUP: usize = 4;
/// Most chunks of the chunked kernels (one work-item each).
const MAX_CHUNKS: usize = 256;
/// Fewest elements per chunk of the chunked kernels.
pub const MIN_CHUNK: usize = 1024;
/// Bins from which `reduce_by_index` folds into global memory atomically rather than into
/// per-group sub-histograms in local memory (also bounded by the local memory and by n >= 4 k).
pub const LOCAL_MAX_K: usize = 1024;
/// Most elements of the chunk rows (chunks * k).
const ROWS_BUDGET: usize = 1 << 24;

/// Most work-items of a work-group of the cooperative chunk kernels (`*_group`).
const MAX_CHUNK_GROUP: usize = 256;
/// Fewest work-items for which a cooperative launch beats one work-item per chunk.
const MIN_CHUNK_GROUP: usize = 8;

/// The work-group size of the cooperative chunk kernels for chunks of `chunk` elements and k
/// bins of `elem` bytes: the largest power of two within the device's work-group limit (and
/// MAX_CHUNK_GROUP) whose slice rows (`group * k` elements) fill at most half the local memory
/// and are no more than the chunk's elements (initialising, merging and scanning the rows then
/// costs no more than folding the chunk), or None below MIN_CHUNK_GROUP (then one work-item runs
/// each chunk). From the device's properties and (n, k) only.
fn chunk_group(max_group: usize, local_mem: usize, chunk: usize, k: usize, elem: usize) -> Option<usize> {
    let by_mem = (local_mem / 2) / (k.max(1) * elem);
    let by_work = chunk / k.max(1);
    let cap = max_group.min(MAX_CHUNK_GROUP).min(by_mem).min(by_work);
    if cap < MIN_CHUNK_GROUP {
        return None;
    }
    Some(1 << (usize::BITS - 1 - cap.leading_zeros()))
}

/// The chunk plan of the chunked kernels: (chunks, chunk length), from (n, k) only.
fn chunk_plan(n: usize, k: usize) -> (usize, usize) {
    let by_size = n / MIN_CHUNK;
    let by_k = ROWS_BUDGET / k.max(1);
    let chunks = by_size.min(by_k).clamp(1, MAX_CHUNKS);
    (chunks, n.div_ceil(chunks).max(1))
}

/// A sweep's output buffer and shape, and its chunks (None for an empty input).
type SweepSetup<R> = (Buf<R>, Vec<usize>, Option<Sweep<R>>);

/// The chunks of a three-phase sweep and their buffers: end states, carries, heads.
struct Sweep<R: KernelRuntime> {
    chunks: usize,
    ends: Buf<R>,
    carries: Buf<R>,
    heads: Buf<R>,
    /// Elements and chunk length, as kernel arguments.
    n: i64,
    chunk: i64,
}

/// Most bits per radix pass (as the CPU device's radix sort): one pass up to 2048 buckets, two
/// up to 2^22; the counts table (chunks x 2^bits, at most 4 MiB) stays small.
const RADIX_BITS: usize = 11;

/// The radix sort's passes, from (n, num_keys) only.
struct RadixPlan {
    passes: usize,
    /// Bits per pass (the passes split the bits evenly, so small key ranges get small tables).
    width: usize,
    radix: usize,
    chunks: usize,
    chunk: usize,
}

impl RadixPlan {
    fn new(n: usize, num_keys: usize) -> RadixPlan {
        // Buckets run to num_keys (the bucket of out-of-range keys); at least one pass, so even
        // a single bucket writes the (identity) permutation.
        let bits = (u64::BITS - (num_keys as u64).leading_zeros()).max(1) as usize;
        let passes = bits.div_ceil(RADIX_BITS);
        let width = bits.div_ceil(passes);
        let (chunks, chunk) = chunk_plan(n, 1);
        RadixPlan { passes, width, radix: 1 << width, chunks, chunk }
    }
}

/// Stride of an operand in a broadcasting op of n elements: 0 for a broadcast single element.
fn stride(len: usize, n: usize) -> i64 {
    i64::from(len == n && n != 1)
}

fn unary_code(op: UnaryOp) -> i32 {
    op as i32
}

fn binary_code(op: BinaryOp) -> i32 {
    op as i32
}

const ADD: HistOp = HistOp::Add;

/// Block length of long reductions along an axis (sum_to, arg_reduce_axis).
const AXIS_BLOCK: usize = 1024;

/// How a reduction over R of an (O, R, Q) view is cut: (block length, blocks). Few outputs
/// (fewer than 4096 lines) with long lines are cut into fixed blocks so that more work-items
/// share the work; the cut depends on the shape only, so results are deterministic.
fn axis_blocks(o: usize, r: usize, q: usize) -> (usize, usize) {
    if o * q < 4096 && r > 2 * AXIS_BLOCK { (AXIS_BLOCK, r.div_ceil(AXIS_BLOCK)) } else { (r.max(1), 1) }
}

/// Work-groups a matrix product should have before its inner dimension is split.
const MATMUL_GROUPS: usize = 64;
/// Fewest inner-dimension elements per split of a matrix product.
const MATMUL_MIN_SPLIT: usize = 256;

/// How a matrix product with `groups` output tiles and inner dimension `k` is split: (splits,
/// inner elements per split). Products with few output tiles and a long inner dimension are
/// split until they have about MATMUL_GROUPS work-groups; from the shape only, so results are
/// deterministic.
fn matmul_splits(groups: usize, k: usize) -> (usize, usize) {
    let splits = MATMUL_GROUPS.div_ceil(groups.max(1)).min(k / MATMUL_MIN_SPLIT).max(1);
    (splits, k.div_ceil(splits).max(1))
}

impl<R: KernelRuntime> KernelDevice<R> {
    /// Opens the process-wide device of this runtime (selected by its environment variable),
    /// or says why it is unavailable.
    pub fn new() -> Result<Self> {
        let rt = R::get().map_err(OpError::Device)?;
        let group_chunks = !rt.is_cpu();
        Ok(KernelDevice { rt, counters: Arc::default(), group_chunks })
    }

    /// The same device with the chunked kernels' work-group per chunk allowed or not (where the
    /// rows fit), whatever the device type: the conformance suite checks the work-group kernels
    /// on PoCL this way.
    pub fn with_group_chunks(mut self, allowed: bool) -> Self {
        self.group_chunks = allowed;
        self
    }

    /// The work-group size of the chunked kernels for chunks of `chunk` elements and k bins of
    /// `bin_bytes` each in local memory, or None for one work-item per chunk.
    fn chunk_group(&self, chunk: usize, k: usize, bin_bytes: usize) -> Option<usize> {
        if !self.group_chunks {
            return None;
        }
        chunk_group(self.rt.max_group(), self.rt.local_mem(), chunk, k, bin_bytes)
    }

    /// A new uninitialised buffer of `len` elements of `elem_size` bytes, counted in this
    /// device's memory until it drops.
    fn alloc(&self, len: usize, elem_size: usize) -> Result<Buf<R>> {
        let b = self.rt.alloc(len, elem_size)?;
        Ok(self.track(b, elem_size))
    }

    fn track(&self, mut b: Buf<R>, elem_size: usize) -> Buf<R> {
        // The runtime allocates at least 8 bytes (see KernelRuntime::alloc).
        b.tracked = Some(Tracked::new(self.counters.clone(), (b.len * elem_size).max(8)));
        b
    }

    /// Uploads host data: one counted transfer (none for empty data, which moves no bytes).
    fn upload<E: Pod>(&self, data: &[E]) -> Result<Buf<R>> {
        let b = self.rt.upload(data)?;
        if !data.is_empty() {
            self.counters.uploads.fetch_add(1, Ordering::Relaxed);
            self.counters.bytes_up.fetch_add(size_of_val(data) as u64, Ordering::Relaxed);
        }
        Ok(self.track(b, size_of::<E>()))
    }

    /// Reads a buffer back: one counted transfer (none for an empty buffer).
    fn download<E: Pod>(&self, b: &Buf<R>) -> Result<Vec<E>> {
        let out = self.rt.download::<E>(b)?;
        if !out.is_empty() {
            self.counters.downloads.fetch_add(1, Ordering::Relaxed);
            self.counters.bytes_down.fetch_add(size_of_val(&out[..]) as u64, Ordering::Relaxed);
        }
        Ok(out)
    }

    /// Whether f64 works on this device.
    pub fn has_f64(&self) -> bool {
        self.rt.has_f64()
    }

    /// Time spent compiling kernels so far.
    pub fn compile_time(&self) -> Duration {
        self.rt.compile_time()
    }

    /// Builds the program of (dtype, op, index dtype) and looks up every kernel in it; returns
    /// the kernel names (a compile check of the whole source).
    pub fn build_program(&self, dtype: DType, op: HistOp, index: IndexDType) -> Result<Vec<&'static str>> {
        self.rt.build(dtype, op, index)
    }

    fn new_tensor(&self, shape: Vec<usize>, dtype: DType) -> Result<(Buf<R>, Vec<usize>)> {
        self.rt.check_dtype(dtype)?;
        let n = shape.iter().product();
        Ok((self.alloc(n, dtype.size_bytes())?, shape))
    }

    fn wrap(&self, b: Buf<R>, shape: Vec<usize>, dtype: DType) -> GpuTensor<R> {
        GpuTensor { buf: Arc::new(b), shape, dtype }
    }

    /// An i64 index tensor whose entries are known to lie in `lo..=hi`.
    fn wrap_index_within(&self, b: Buf<R>, lo: i64, hi: i64) -> GpuIndex<R> {
        GpuIndex { buf: Arc::new(b), dtype: IndexDType::I64, bounds: Some((lo, hi)) }
    }

    /// `ix` as a buffer of `dtype` entries: itself, or converted on the device (`widen_index`,
    /// `narrow_index`: entries outside i32 become -1).
    fn index_buf_as(&self, ix: &GpuIndex<R>, dtype: IndexDType) -> Result<Arc<Buf<R>>> {
        if ix.dtype == dtype {
            return Ok(ix.buf.clone());
        }
        let n = ix.buf.len;
        let out = self.alloc(n, dtype.size_bytes())?;
        let (name, prog) = match dtype {
            IndexDType::I64 => ("widen_index", ix.dtype),
            IndexDType::I32 => ("narrow_index", dtype),
        };
        self.launch((DType::F32, prog), ADD, name, n, &[Arg::Buf(&out), Arg::Buf(&ix.buf), Arg::I64(n as i64)])?;
        Ok(Arc::new(out))
    }

    /// Launches `name` in the program of `prog` (a dtype: its i64-index program; or a dtype and
    /// the index dtype of the index tensor the kernel reads).
    fn launch(
        &self,
        prog: impl Into<Prog>,
        op: HistOp,
        name: &'static str,
        global: usize,
        args: &[Arg<'_, R::Raw>],
    ) -> Result<()> {
        let Prog(dtype, index) = prog.into();
        self.rt.launch(dtype, op, index, name, global, None, args)
    }

    /// Launches a kernel with one work-item per chunk (each runs a sequential loop) in small
    /// work-groups: left to choose, PoCL puts the few hundred work-items into one or two large
    /// groups and so runs them on one or two threads (the sort took 2-3x longer); on CUDA small
    /// blocks spread the chunks over more multiprocessors.
    fn launch_chunks(
        &self,
        prog: impl Into<Prog>,
        op: HistOp,
        name: &'static str,
        chunks: usize,
        args: &[Arg<'_, R::Raw>],
    ) -> Result<()> {
        let Prog(dtype, index) = prog.into();
        self.rt.launch(dtype, op, index, name, chunks, Some(CHUNK_GROUP), args)
    }

    /// What the three-phase sweeps (scan, linear recurrence) share: the checks, the output
    /// and, unless `x` is empty, the chunk plan with the per-chunk buffers of phases 1 and 2.
    fn sweep_setup(&self, op: &'static str, x: &GpuTensor<R>, segments: Option<&GpuIndex<R>>) -> Result<SweepSetup<R>> {
        let (dt, n) = (x.dtype, x.buf.len);
        self.rt.check_dtype(dt)?;
        if let Some(s) = segments {
            same_len(op, "segments vs values", s.buf.len, n)?;
        }
        let (out, shape) = self.new_tensor(x.shape.clone(), dt)?;
        if n == 0 {
            return Ok((out, shape, None));
        }
        let (chunks, chunk) = chunk_plan(n, 1);
        let sweep = Sweep {
            chunks,
            ends: self.alloc(chunks, dt.size_bytes())?,
            carries: self.alloc(chunks, dt.size_bytes())?,
            heads: self.alloc(chunks, 8)?,
            n: n as i64,
            chunk: chunk as i64,
        };
        Ok((out, shape, Some(sweep)))
    }

    fn fill_raw(&self, b: &Buf<R>, value: f64, dtype: DType) -> Result<()> {
        self.launch(dtype, ADD, "fill", b.len, &[Arg::Buf(b), Arg::I64(b.len as i64), Arg::Val(value, dtype)])
    }

    fn fill_index_raw(&self, b: &Buf<R>, value: i64, dtype: DType) -> Result<()> {
        self.launch(dtype, ADD, "fill_i64", b.len, &[Arg::Buf(b), Arg::I64(b.len as i64), Arg::I64(value)])
    }

    fn copy_of(&self, t: &GpuTensor<R>) -> Result<Buf<R>> {
        let mut out = self.alloc(t.buf.len, t.dtype.size_bytes())?;
        self.rt.copy(&t.buf, &mut out, t.buf.len * t.dtype.size_bytes())?;
        Ok(out)
    }

    /// `combine` kernel with side 0 (combine), 1 (d1) or 2 (d2).
    fn combine_side(&self, op: HistOp, side: i32, a: &GpuTensor<R>, b: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        let dt = same_dtype("combine", a, b)?;
        let shape = broadcast_shape("combine", &a.shape, &b.shape)?;
        let (out, shape) = self.new_tensor(shape, dt)?;
        let n = out.len;
        self.launch(
            dt,
            op,
            "combine",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&a.buf),
                Arg::Buf(&b.buf),
                Arg::I64(n as i64),
                Arg::I64(stride(a.buf.len, n)),
                Arg::I64(stride(b.buf.len, n)),
                Arg::I32(side),
            ],
        )?;
        Ok(self.wrap(out, shape, dt))
    }

    /// `x` viewed as (O, R, Q) summed over R into a new O x Q buffer (two launches when the
    /// sum is cut into blocks, see [`axis_blocks`]).
    fn sum_orq(&self, dt: DType, x: &Buf<R>, o: usize, r: usize, q: usize) -> Result<Buf<R>> {
        let out = self.alloc(o * q, dt.size_bytes())?;
        let launch = |out: &Buf<R>, src: &Buf<R>, r: usize, rb: usize, blocks: usize| {
            self.launch(
                dt,
                ADD,
                "sum_orq",
                o * blocks * q,
                &[
                    Arg::Buf(out),
                    Arg::Buf(src),
                    Arg::I64(o as i64),
                    Arg::I64(r as i64),
                    Arg::I64(q as i64),
                    Arg::I64(rb as i64),
                    Arg::I64(blocks as i64),
                ],
            )
        };
        let (rb, blocks) = axis_blocks(o, r, q);
        if blocks == 1 {
            launch(&out, x, r, rb, 1)?;
        } else {
            let partial = self.alloc(o * blocks * q, dt.size_bytes())?;
            launch(&partial, x, r, rb, blocks)?;
            launch(&out, &partial, blocks, blocks, 1)?;
        }
        Ok(out)
    }

    /// The side of the matrix product's square tiles: 16 where a work-group of 256 and two
    /// tiles of local memory fit (every GPU), else the largest power of two that does.
    fn matmul_tile(&self, dt: DType) -> usize {
        let fits = |ts: usize| ts * ts <= self.rt.max_group() && 2 * ts * ts * dt.size_bytes() <= self.rt.local_mem();
        [16, 8, 4, 2].into_iter().find(|&ts| fits(ts)).unwrap_or(1)
    }

    fn arg_hist(
        &self,
        dest: &GpuTensor<R>,
        ext: Extremum,
        inds: &GpuIndex<R>,
        vals: &GpuTensor<R>,
    ) -> Result<(Buf<R>, Buf<R>)> {
        let dt = dest.dtype;
        let (k, n) = (dest.buf.len, vals.buf.len);
        let is_max = i32::from(ext == Extremum::Max);
        let out_v = self.alloc(k, dt.size_bytes())?;
        let out_p = self.alloc(k, 8)?;
        let (kk, nn) = (k as i64, n as i64);
        if dt == DType::F32 && n < u32::MAX as usize - 1 {
            let keys = self.alloc(k, 8)?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_packed_init",
                k,
                &[Arg::Buf(&keys), Arg::Buf(&dest.buf), Arg::I64(kk), Arg::I32(is_max)],
            )?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_packed",
                n,
                &[
                    Arg::Buf(&keys),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(nn),
                    Arg::I64(kk),
                    Arg::I32(is_max),
                ],
            )?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_packed_final",
                k,
                &[
                    Arg::Buf(&out_v),
                    Arg::Buf(&out_p),
                    Arg::Buf(&keys),
                    Arg::Buf(&dest.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(kk),
                ],
            )?;
        } else {
            let wv = self.alloc(k, 8)?;
            let pos = self.alloc(k, 8)?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_value_init",
                k,
                &[Arg::Buf(&wv), Arg::Buf(&pos), Arg::Buf(&dest.buf), Arg::I64(kk), Arg::I32(is_max)],
            )?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_value",
                n,
                &[
                    Arg::Buf(&wv),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(nn),
                    Arg::I64(kk),
                    Arg::I32(is_max),
                ],
            )?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_position",
                n,
                &[
                    Arg::Buf(&pos),
                    Arg::Buf(&wv),
                    Arg::Buf(&inds.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(nn),
                    Arg::I64(kk),
                    Arg::I32(is_max),
                ],
            )?;
            self.launch(
                (dt, inds.dtype),
                ADD,
                "arg_two_pass_final",
                k,
                &[
                    Arg::Buf(&out_v),
                    Arg::Buf(&out_p),
                    Arg::Buf(&wv),
                    Arg::Buf(&pos),
                    Arg::Buf(&dest.buf),
                    Arg::Buf(&vals.buf),
                    Arg::I64(kk),
                    Arg::I32(is_max),
                ],
            )?;
        }
        Ok((out_v, out_p))
    }

    /// The stable sort's permutation, and with `want_ranks` its inverse (written by the last
    /// pass): LSD radix passes over the bucket of each key (see `radix_counts` in kernels.cl),
    /// as many bits as the largest bucket, `num_keys`, needs.
    fn radix_sort(&self, keys: &GpuIndex<R>, num_keys: usize, want_ranks: bool) -> Result<(Buf<R>, Option<Buf<R>>)> {
        let n = keys.buf.len;
        let plan = RadixPlan::new(n, num_keys);
        let counts = self.alloc(plan.chunks * plan.radix, 8)?;
        let totals = self.alloc(plan.radix, 8)?;
        // A single pass needs no second permutation buffer.
        let bufs = [self.alloc(n, 8)?, self.alloc(if plan.passes > 1 { n } else { 0 }, 8)?];
        let ranks = if want_ranks { Some(self.alloc(n, 8)?) } else { None };
        for pass in 0..plan.passes {
            // Pass p writes bufs[p % 2] and reads the previous pass's output (on the first pass
            // the identity, which the kernels generate: the keys only stand in for the buffer).
            let out = &bufs[pass % 2];
            let input = if pass == 0 { &*keys.buf } else { &bufs[(pass + 1) % 2] };
            let common = || {
                [
                    Arg::I64(n as i64),
                    // As u64 bits: the kernels compare keys as unsigned, like the CPU device.
                    Arg::I64(num_keys as u64 as i64),
                    Arg::I64(plan.chunk as i64),
                    Arg::I64(plan.chunks as i64),
                    Arg::I32((pass * plan.width) as i32),
                    Arg::I64(plan.radix as i64),
                    Arg::I32(i32::from(pass == 0)),
                ]
            };
            let mut args = vec![Arg::Buf(&counts), Arg::Buf(&keys.buf), Arg::Buf(input)];
            args.extend(common());
            self.launch_chunks((DType::F32, keys.dtype), ADD, "radix_counts", plan.chunks, &args)?;
            let (cs, rx) = (Arg::I64(plan.chunks as i64), Arg::I64(plan.radix as i64));
            self.launch(
                (DType::F32, keys.dtype),
                ADD,
                "radix_totals",
                plan.radix,
                &[Arg::Buf(&totals), Arg::Buf(&counts), cs, rx],
            )?;
            self.launch(
                (DType::F32, keys.dtype),
                ADD,
                "radix_totals_scan",
                1,
                &[Arg::Buf(&totals), Arg::I64(plan.radix as i64)],
            )?;
            let (cs, rx) = (Arg::I64(plan.chunks as i64), Arg::I64(plan.radix as i64));
            self.launch(
                (DType::F32, keys.dtype),
                ADD,
                "radix_offsets",
                plan.radix,
                &[Arg::Buf(&counts), Arg::Buf(&totals), cs, rx],
            )?;
            let last = pass + 1 == plan.passes;
            // Unread unless wanted on the last pass: the counts stand in.
            let ranks_out = ranks.as_ref().filter(|_| last).unwrap_or(&counts);
            let mut args =
                vec![Arg::Buf(out), Arg::Buf(ranks_out), Arg::Buf(&counts), Arg::Buf(&keys.buf), Arg::Buf(input)];
            args.extend(common());
            args.push(Arg::I32(i32::from(last && want_ranks)));
            self.launch_chunks((DType::F32, keys.dtype), ADD, "radix_scatter", plan.chunks, &args)?;
        }
        let [even, odd] = bufs;
        // The last pass, passes - 1, wrote bufs[(passes - 1) % 2].
        Ok((if plan.passes % 2 == 1 { even } else { odd }, ranks))
    }
}

impl<R: KernelRuntime> Device for KernelDevice<R> {
    fn device_name(&self) -> String {
        format!("{} ({})", R::ENGINE, self.rt.describe())
    }
    fn threads(&self) -> usize {
        self.rt.compute_units()
    }
    fn synchronize(&self) -> Result<()> {
        self.rt.finish()
    }
    fn trim_cache(&self) {
        // Buffers are released when their last tensor drops; there is no cache to trim yet.
    }
    fn kernel_compile_time(&self) -> Option<std::time::Duration> {
        Some(self.rt.compile_time())
    }
    fn transfers(&self) -> Option<Transfers> {
        let c = &self.counters;
        Some(Transfers {
            uploads: c.uploads.load(Ordering::Relaxed),
            downloads: c.downloads.load(Ordering::Relaxed),
            bytes_up: c.bytes_up.load(Ordering::Relaxed),
            bytes_down: c.bytes_down.load(Ordering::Relaxed),
        })
    }
    fn device_memory(&self) -> Option<DeviceMemory> {
        let c = &self.counters;
        Some(DeviceMemory { in_use: c.in_use.load(Ordering::Relaxed), peak: c.peak.load(Ordering::Relaxed) })
    }
    fn reset_peak_device_memory(&self) {
        let c = &self.counters;
        c.peak.store(c.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_groups_fit_the_work_group_limit_the_local_memory_and_the_chunk() {
        // PoCL on a CPU: 4096 work-items, 1 MiB of local memory; chunks of 4000 elements.
        let pocl = |k, elem| chunk_group(4096, 1 << 20, 4000, k, elem);
        assert_eq!(pocl(1, 4), Some(MAX_CHUNK_GROUP));
        assert_eq!(pocl(16, 4), Some(128)); // 250 rows fit the chunk
        assert_eq!(pocl(400, 8), Some(8)); // 10 rows fit the chunk
        assert_eq!(pocl(501, 8), None);
        assert_eq!(chunk_group(4096, 1 << 20, 1 << 20, 1000, 8), Some(64)); // 65 rows fit in memory
        assert_eq!(chunk_group(4096, 1 << 20, 1 << 20, 8192, 8), Some(8));
        assert_eq!(chunk_group(4096, 1 << 20, 1 << 20, 8193, 8), None);
        // A small work-group limit caps the group; a power of two below it is used.
        assert_eq!(chunk_group(100, 48 << 10, 4000, 1, 4), Some(64));
        assert_eq!(chunk_group(7, 48 << 10, 4000, 1, 4), None);
        assert_eq!(chunk_group(256, 0, 4000, 1, 4), None);
        for (max_group, local_mem, chunk, k, elem) in
            [(1024, 48 << 10, 1 << 16, 37, 8), (256, 64 << 10, 1 << 16, 300, 4), (4096, 1 << 20, 1024, 1, 8)]
        {
            let g = chunk_group(max_group, local_mem, chunk, k, elem).unwrap();
            assert!(g.is_power_of_two() && g <= max_group && 2 * g * k * elem <= local_mem && g * k <= chunk, "{g}");
        }
    }
}
