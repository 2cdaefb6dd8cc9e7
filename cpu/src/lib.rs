//! The CPU device: rayon over fixed-size blocks, a caching allocator, and histogram kernels with
//! per-chunk private rows. Results never depend on the thread count.
//!
//! [`Cpu`] implements the op API (`adgauge-ops`) eagerly, each op a parallel kernel over host
//! memory; [`CpuStaged`] defers elementwise chains and runs each as one fused pass. This crate
//! depends on the op API only: the AD engines are not reachable from it.

pub mod compiled;
pub mod dense;
mod fold;
mod hist;
pub(crate) mod kernels;
mod lae;
mod lstm;
mod pool;
mod quotient;
pub mod roofline;
pub(crate) mod scan;
mod segments;
mod simd;
mod sort;
pub mod staged;
pub mod subnormals;
mod vmath;

pub use staged::CpuStaged;
/// The size constants and plans of the histogram code, for the size-switch list
/// (`adgauge_backends::sizes`), which `check` sweeps and a test there holds complete.
pub mod hist_sizes {
    pub use super::hist::{
        MIN_CHUNK, PARTITION_MIN_BINS_BYTES, Plan, SMALL_K, SPLIT_PAIR_ROW_BYTES, SUBS, adjoint_window_bins,
        split_pair_rows,
    };
    pub use super::kernels::PAR_MIN;
    pub use super::scan::PARALLEL_SCAN_MIN;
    pub use super::sort::COUNTING_MAX;
    pub use super::staged::STAGE_MIN;
    pub use super::{AUTO_MUL_MAX_N, AUTO_MUL_VALUES_PER_BIN};
}

/// The CPU's `auto` takes general-chunked for `*` up to this many values...
pub const AUTO_MUL_MAX_N: usize = 1 << 20;
/// ...with at least one bin per this many values (docs/performance.md).
pub const AUTO_MUL_VALUES_PER_BIN: usize = 16;

use std::sync::Arc;

use rayon::prelude::*;

// The op API under the paths the device's code names it by (`crate::DType`,
// `crate::shape::...`).
#[allow(unused_imports)]
use adgauge_ops::*;

use adgauge_ops::checks::{broadcast_shape, same_dtype, same_len};
use adgauge_ops::{BinaryOp, DType, Device, Elem, HistOp, IndexDType, IndexElem, OpError, Relative, Result, UnaryOp};
use adgauge_ops::{ChunkedHist, Extremum, IndexMeta, Operand, OutOfRange, ScanSpec, TensorMeta};
use adgauge_ops::{DenseOps, ElementwiseOps, HistOps, IndexOps, ReduceOps, RuleKernels, ScanOps, TensorOps};
use fold::{Fold, with_fold};
use kernels::{BLOCK, PAR_MIN, fill_with, par_copy, par_fill};
pub use pool::{Buf, Pool};

/// Values of a CPU tensor.
enum Values {
    F32(Buf<f32>),
    F64(Buf<f64>),
}

/// Element types the CPU device stores.
trait CpuElem: Elem {
    fn wrap(b: Buf<Self>) -> Values;
    fn view(v: &Values) -> Option<&[Self]>;
}

impl CpuElem for f32 {
    fn wrap(b: Buf<Self>) -> Values {
        Values::F32(b)
    }
    fn view(v: &Values) -> Option<&[Self]> {
        match v {
            Values::F32(b) => Some(b),
            Values::F64(_) => None,
        }
    }
}

impl CpuElem for f64 {
    fn wrap(b: Buf<Self>) -> Values {
        Values::F64(b)
    }
    fn view(v: &Values) -> Option<&[Self]> {
        match v {
            Values::F64(b) => Some(b),
            Values::F32(_) => None,
        }
    }
}

/// Entries of a CPU index tensor.
enum IndexVals {
    I32(Buf<i32>),
    I64(Buf<i64>),
}

/// Index element types the CPU device stores: the kernels are generic over them, so an i32
/// histogram reads 4-byte indices in its hot loop.
trait CpuIndexElem: IndexElem {
    fn wrap(b: Buf<Self>) -> IndexVals;
    fn view(v: &IndexVals) -> Option<&[Self]>;
}

impl CpuIndexElem for i32 {
    fn wrap(b: Buf<Self>) -> IndexVals {
        IndexVals::I32(b)
    }
    fn view(v: &IndexVals) -> Option<&[Self]> {
        match v {
            IndexVals::I32(b) => Some(b),
            IndexVals::I64(_) => None,
        }
    }
}

impl CpuIndexElem for i64 {
    fn wrap(b: Buf<Self>) -> IndexVals {
        IndexVals::I64(b)
    }
    fn view(v: &IndexVals) -> Option<&[Self]> {
        match v {
            IndexVals::I64(b) => Some(b),
            IndexVals::I32(_) => None,
        }
    }
}

/// Positions in arg-histogram accumulators: u32 when n allows, else i64; `NONE` (an empty
/// accumulator) is above every real position.
trait ArgPos: Copy + Default + PartialOrd + Send + Sync + 'static {
    const NONE: Self;
    fn of(i: usize) -> Self;
    fn pos(self) -> i64;
}

impl ArgPos for u32 {
    const NONE: Self = u32::MAX;
    #[inline(always)]
    fn of(i: usize) -> Self {
        i as u32
    }
    #[inline(always)]
    fn pos(self) -> i64 {
        if self == u32::MAX { i64::MAX } else { self as i64 }
    }
}

impl ArgPos for i64 {
    const NONE: Self = i64::MAX;
    #[inline(always)]
    fn of(i: usize) -> Self {
        i as i64
    }
    #[inline(always)]
    fn pos(self) -> i64 {
        self
    }
}

/// A value tensor on the CPU: shared, immutable storage plus a shape.
#[derive(Clone)]
pub struct CpuTensor {
    values: Arc<Values>,
    shape: Vec<usize>,
    /// `Some(ix)` on the relative inputs of logaddexp (`HistOps::relative_inputs`, `Relative::Shift`)
    /// built under the index `ix`: every bin's largest input, dest's included, is 0 (or the bin
    /// is -inf only, or NaN), so a logaddexp histogram of them under the same index needs no
    /// pass for its bins' maxima. The index is held, so that its buffer cannot be freed and
    /// another index take its address.
    peaks_at_zero_under: Option<Arc<IndexVals>>,
}

impl CpuTensor {
    /// Whether `dest` and `vals` are relative logaddexp inputs built together under `inds`
    /// (see `peaks_at_zero_under`).
    fn relative_shift_under(dest: &CpuTensor, vals: &CpuTensor, inds: &CpuIndex) -> bool {
        let under = |t: &CpuTensor| t.peaks_at_zero_under.as_ref().is_some_and(|ix| Arc::ptr_eq(ix, &inds.data));
        under(dest) && under(vals)
    }
}

impl TensorMeta for CpuTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn dtype(&self) -> DType {
        match *self.values {
            Values::F32(_) => DType::F32,
            Values::F64(_) => DType::F64,
        }
    }
}

impl CpuTensor {
    fn slice<T: CpuElem>(&self) -> Result<&[T]> {
        T::view(&self.values).ok_or_else(|| {
            OpError::Device(format!("internal: tensor is {} but {} was expected", self.dtype(), T::DTYPE))
        })
    }
}

impl std::fmt::Debug for CpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuTensor({}, {:?})", self.dtype(), self.shape)
    }
}

/// An index tensor on the CPU.
#[derive(Clone)]
pub struct CpuIndex {
    data: Arc<IndexVals>,
}

impl IndexMeta for CpuIndex {
    fn len(&self) -> usize {
        match &*self.data {
            IndexVals::I32(b) => b.len(),
            IndexVals::I64(b) => b.len(),
        }
    }
    fn index_dtype(&self) -> IndexDType {
        match &*self.data {
            IndexVals::I32(_) => IndexDType::I32,
            IndexVals::I64(_) => IndexDType::I64,
        }
    }
}

impl CpuIndex {
    fn slice<X: CpuIndexElem>(&self) -> Result<&[X]> {
        X::view(&self.data).ok_or_else(|| {
            OpError::Device(format!("internal: index is {} but {} was expected", self.index_dtype(), X::DTYPE))
        })
    }

    /// The entries widened to i64.
    fn to_i64(&self) -> Vec<i64> {
        match &*self.data {
            IndexVals::I32(b) => b.iter().map(|&v| v as i64).collect(),
            IndexVals::I64(b) => b.to_vec(),
        }
    }
}

impl std::fmt::Debug for CpuIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuIndex({}, {})", self.index_dtype(), self.len())
    }
}

struct CpuInner {
    pool: Arc<Pool>,
    threads: rayon::ThreadPool,
    nthreads: usize,
    /// Subnormals flushed to zero on every thread computing for the device ([`subnormals`]).
    flush: bool,
}

/// The CPU device. Cloning is cheap and shares the thread pool and buffer cache.
#[derive(Clone)]
pub struct Cpu {
    inner: Arc<CpuInner>,
}

macro_rules! by_dtype {
    ($dt:expr, $s:ident . $m:ident ( $($a:expr),* $(,)? )) => {
        match $dt {
            DType::F32 => $s.$m::<f32>($($a),*),
            DType::F64 => $s.$m::<f64>($($a),*),
        }
    };
}

/// [`by_dtype!`] over the value dtype and the index dtype: `$m::<T, X>`.
macro_rules! by_dtypes {
    ($dt:expr, $it:expr, $s:ident . $m:ident ( $($a:expr),* $(,)? )) => {
        match ($dt, $it) {
            (DType::F32, IndexDType::I32) => $s.$m::<f32, i32>($($a),*),
            (DType::F32, IndexDType::I64) => $s.$m::<f32, i64>($($a),*),
            (DType::F64, IndexDType::I32) => $s.$m::<f64, i32>($($a),*),
            (DType::F64, IndexDType::I64) => $s.$m::<f64, i64>($($a),*),
        }
    };
}

/// [`by_dtype!`] over the index dtype alone: `$m::<X>`.
macro_rules! by_index_dtype {
    ($it:expr, $s:ident . $m:ident ( $($a:expr),* $(,)? )) => {
        match $it {
            IndexDType::I32 => $s.$m::<i32>($($a),*),
            IndexDType::I64 => $s.$m::<i64>($($a),*),
        }
    };
}

/// Evaluates `$body` with `$f` bound to `op`'s function on `$t`. The arithmetic operators get a
/// closure (so a loop) of their own: dispatching on `op` per element was most of the time of
/// the many small elementwise ops of LSTM-like workloads.
macro_rules! per_binary_op {
    ($op:expr, $t:ty, $f:ident => $body:expr) => {
        match $op {
            BinaryOp::Add => {
                let $f = |x: $t, y: $t| x + y;
                $body
            }
            BinaryOp::Sub => {
                let $f = |x: $t, y: $t| x - y;
                $body
            }
            BinaryOp::Mul => {
                let $f = |x: $t, y: $t| x * y;
                $body
            }
            BinaryOp::Div => {
                let $f = |x: $t, y: $t| x / y;
                $body
            }
            other => {
                let $f = move |x: $t, y: $t| kernels::binary(other, x, y);
                $body
            }
        }
    };
}

// The op families, one file each (burn's layout); declared after the dtype macros above, which
// their bodies use.
mod ops;

/// `v[i] = op(v[i])` with the loops of `Cpu::unary`, through a copy of each run of elements on
/// the stack (the loops read one slice and write another). The operators are elementwise, so
/// the values do not depend on how the elements are split.
fn unary_in_place<T: CpuElem>(op: UnaryOp, v: &mut [T]) {
    let run = |block: &mut [T]| {
        let mut copy = [T::zero(); 256];
        for part in block.chunks_mut(256) {
            copy[..part.len()].copy_from_slice(part);
            kernels::unary_map(op, &copy[..part.len()], part);
        }
    };
    if v.len() < kernels::PAR_MIN {
        run(v);
    } else {
        v.par_chunks_mut(kernels::BLOCK).for_each(run);
    }
}

/// `d = d op o` (or `o op d` when the donor `d` was the right operand), `o` of `d`'s length or
/// one element; the per-operator loops of `Cpu::binary_t` ([`per_binary_op!`]).
fn binary_in_place<T: CpuElem>(op: BinaryOp, d: &mut [T], o: &[T], donor_is_a: bool) {
    fn zip<T: CpuElem>(d: &mut [T], o: &[T], donor_is_a: bool, f: impl Fn(T, T) -> T + Sync) {
        match (o.len() == d.len(), donor_is_a) {
            (true, true) => kernels::update_with(d, |i, x| f(x, o[i])),
            (true, false) => kernels::update_with(d, |i, x| f(o[i], x)),
            (false, true) => kernels::update_with(d, |_, x| f(x, o[0])),
            (false, false) => kernels::update_with(d, |_, x| f(o[0], x)),
        }
    }
    per_binary_op!(op, T, f => zip(d, o, donor_is_a, f))
}

/// The slices of a dual histogram's operands (dest, its tangent, indices, values, their
/// tangents), their lengths checked against each other; `op` names the op in errors.
#[allow(clippy::type_complexity)]
fn dual_operands<'a, T: CpuElem, X: CpuIndexElem>(
    op: &'static str,
    dest: &'a CpuTensor,
    dest_dot: &'a CpuTensor,
    inds: &'a CpuIndex,
    vals: &'a CpuTensor,
    vals_dot: &'a CpuTensor,
) -> Result<(&'a [T], &'a [T], &'a [X], &'a [T], &'a [T])> {
    let (d, dd) = (dest.slice::<T>()?, dest_dot.slice::<T>()?);
    let (v, vd) = (vals.slice::<T>()?, vals_dot.slice::<T>()?);
    let ix = inds.slice::<X>()?;
    same_len(op, "indices vs values", ix.len(), v.len())?;
    same_len(op, "values vs tangents", v.len(), vd.len())?;
    same_len(op, "dest vs tangents", d.len(), dd.len())?;
    Ok((d, dd, ix, v, vd))
}

/// A slowdown planted in `+`'s primal histogram fold (`reduce_by_index` with `+`, which its VJP
/// runs too; its JVP folds pairs and is left alone), in builds with the `planted-slowdown`
/// feature only: the fold is done again on the first part of the elements and the result thrown
/// away, so that the case does `ADGAUGE_PLANTED_SLOWDOWN` times the fold's work (default 1.2).
/// It is how docs/gate.md measures what `adgauge compare` and `adgauge gate` detect: a real
/// computation made slower, as a regression would make it.
#[cfg(feature = "planted-slowdown")]
mod planted {
    use std::sync::{Arc, OnceLock};

    use super::{Elem, IndexElem, Pool, fold, scalar_totals};

    /// The planted factor (at least 1).
    pub fn factor() -> f64 {
        static FACTOR: OnceLock<f64> = OnceLock::new();
        *FACTOR.get_or_init(|| {
            std::env::var("ADGAUGE_PLANTED_SLOWDOWN")
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|f| f.is_finite() && *f >= 1.0)
                .unwrap_or(1.2)
        })
    }

    /// Folds `+` again over prefixes of the elements adding up to (factor - 1) n of them, and
    /// throws the totals away. Out of line, so that the function it is called from is compiled
    /// as without the feature but for one call (two builds differ by their code's layout too:
    /// docs/gate.md).
    #[inline(never)]
    pub fn add_fold_again<T: Elem, X: IndexElem>(pool: &Arc<Pool>, ix: &[X], k: usize, v: &[T]) {
        let n = ix.len().min(v.len());
        let extra = factor() - 1.0;
        let fold = |m: usize| {
            std::hint::black_box(scalar_totals(pool, &ix[..m], k, T::zero(), &v[..m], fold::AddF));
        };
        for _ in 0..extra.floor() as usize {
            fold(n);
        }
        let m = ((extra - extra.floor()) * n as f64).round() as usize;
        if m > 0 {
            fold(m.min(n));
        }
    }
}

/// Per-bin totals of the operator `f` over `v`.
fn scalar_totals<T: Elem, X: IndexElem, F: fold::Fold<T>>(
    pool: &Arc<Pool>,
    ix: &[X],
    k: usize,
    neutral: T,
    v: &[T],
    f: F,
) -> Buf<T> {
    hist::value_totals(pool, ix, v, k, neutral, |a, x| *a = f.combine(*a, x), |a, b| *a = f.combine(*a, b))
}

/// Per-bin minima or maxima of `v` (+inf or -inf for an empty bin): the histogram primal's and
/// logaddexp's maxima ([`extremum_totals`]).
pub(crate) fn extremum_bin_totals<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    ix: &[X],
    k: usize,
    v: &[T],
    ext: Extremum,
) -> Buf<T> {
    extremum_totals(pool, ix, k, v, ext).0
}

/// Per-bin totals of min or max with one compare per element, on the guess that no value is
/// NaN, and whether the guess failed. `x < acc` (min: a `minss`) agrees with the NaN ranking of
/// [`crate::general::right_wins`] (two compares) wherever `x` is a number, a NaN accumulator
/// included (no number beats it, so it stays), and among equals the accumulator, the earlier
/// element, stays. The fold notes a NaN value as it goes (a branch never taken on NaN-free data,
/// off the path from the bin's load to its store); if it saw one, the histogram is folded again
/// with the ranking. Measured (`hist_overhead`, n = 10^7, 2 threads, ms, the ranking's fold ->
/// this one, three interleaved rounds): f32, i32 indices: k = 10^4 7.8-9.2 -> 6.5-7.1, 10^5
/// 9.0-9.5 -> 8.0-9.0, 10^6 11.9-13.0 -> 10.3-11.2; f64, i64 indices: k = 10 7.4-8.1 -> 6.2-6.5,
/// 10^3 6.3-6.5 -> 5.2-5.8 (10^6 within that hour's noise, 15-42 either way); f32 at k = 10 and
/// 10^3 the same as the earlier one-compare fold of NaN-free blocks, which checked each block of
/// 1024 values before folding it and lost beyond L1 (k = 10^6: 13.4 -> 18.5).
fn extremum_totals<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    ix: &[X],
    k: usize,
    v: &[T],
    ext: Extremum,
) -> (Buf<T>, bool) {
    match ext {
        Extremum::Min => one_compare_totals(pool, ix, k, T::infinity(), v, fold::MinF, |x, acc| x < acc),
        Extremum::Max => one_compare_totals(pool, ix, k, T::neg_infinity(), v, fold::MaxF, |x, acc| x > acc),
    }
}

/// [`extremum_totals`] for one extremum: `beats(x, acc)` is its one compare, `ranking` the
/// NaN-ranking fold that merges the rows and refolds after a NaN.
fn one_compare_totals<T: Elem, X: IndexElem, F: fold::Fold<T>>(
    pool: &Arc<Pool>,
    ix: &[X],
    k: usize,
    neutral: T,
    v: &[T],
    ranking: F,
    beats: impl Fn(T, T) -> bool + Sync,
) -> (Buf<T>, bool) {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let nan_seen = AtomicBool::new(false);
    let totals = hist::value_totals(
        pool,
        ix,
        v,
        k,
        neutral,
        |a, x: T| {
            if x.is_nan() {
                nan_seen.store(true, Relaxed);
            }
            *a = if beats(x, *a) { x } else { *a }
        },
        |a, b| *a = ranking.combine(*a, b),
    );
    if nan_seen.load(Relaxed) { (scalar_totals(pool, ix, k, neutral, v, ranking), true) } else { (totals, false) }
}

/// Whether some value is zero, and whether some value is infinite (NaN is neither).
fn zeros_and_infinities<T: Elem>(v: &[T]) -> (bool, bool) {
    let scan =
        |c: &[T]| c.iter().fold((false, false), |(z, i), &x| (z | (x == T::zero()), i | (x.abs() == T::infinity())));
    if v.len() < PAR_MIN {
        scan(v)
    } else {
        v.par_chunks(BLOCK).map(scan).reduce(|| (false, false), |a, b| (a.0 | b.0, a.1 | b.1))
    }
}

/// `prod_nonzero_by_index`'s step for an infinite value (rare: out of the hot loop's way): it
/// is counted, and only its sign joins the product.
#[cold]
#[inline(never)]
fn count_infinity<T: CpuElem, C: std::ops::AddAssign + From<u8>>(p: &mut T, infs: &mut C, x: T) {
    *infs += C::from(1);
    *p = *p * x.signum();
}

/// `prod_vals_adjoint` at an infinite value: `c2 sign(x)` (rare: out of the hot loop's way).
#[cold]
#[inline(never)]
fn infinite_factor_adjoint<T: CpuElem>(c2: T, x: T) -> T {
    c2 * x.signum()
}

/// Per-bin totals of the lifted (dual-number) operator `f` over `(v, vd)`.
fn dual_totals<T: CpuElem, X: IndexElem, F: fold::Fold<T>>(
    pool: &Arc<Pool>,
    ix: &[X],
    k: usize,
    neutral: (T, T),
    v: &[T],
    vd: &[T],
    f: F,
) -> Buf<(T, T)> {
    hist::bin_totals(pool, ix, k, neutral, |acc, i| *acc = f.lift(*acc, (v[i], vd[i])), |acc, b| *acc = f.lift(*acc, b))
}

/// `+`'s histogram and tangent past [`hist::SPLIT_PAIR_ROW_BYTES`]: the values and the tangents
/// each in a scalar fold, then dest and its tangent added, the same additions in the same order
/// as the pair fold's lift (`1 x` a tangent is that tangent): the same bits.
fn add_dual_in_two_passes<T: Elem, X: IndexElem>(
    pool: &Arc<Pool>,
    d: &[T],
    dd: &[T],
    ix: &[X],
    v: &[T],
    vd: &[T],
) -> (Buf<T>, Buf<T>) {
    let k = d.len();
    let (s, sd) =
        (scalar_totals(pool, ix, k, T::zero(), v, fold::AddF), scalar_totals(pool, ix, k, T::zero(), vd, fold::AddF));
    let (mut h, mut hd) = (pool.take::<T>(k), pool.take::<T>(k));
    kernels::combine_into(HistOp::Add, d, &s, &mut h);
    kernels::combine_into(HistOp::Add, dd, &sd, &mut hd);
    (h, hd)
}

impl Cpu {
    /// A CPU device on `threads` worker threads (all cores when `None`).
    pub fn new(threads: Option<usize>) -> Result<Cpu> {
        Cpu::open(threads, false)
    }

    /// A CPU device that flushes subnormal numbers to zero, operands and results, as XLA's CPU
    /// code does ([`subnormals`]): its worker threads from their start, the calling thread
    /// for the span of each op.
    pub fn flushing_subnormals(threads: Option<usize>) -> Result<Cpu> {
        if !subnormals::available() {
            return Err(OpError::Unsupported("flushing subnormals needs an x86-64 CPU (FTZ and DAZ)".into()));
        }
        Cpu::open(threads, true)
    }

    fn open(threads: Option<usize>, flush: bool) -> Result<Cpu> {
        let mut b = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("adgauge-cpu-{i}"));
        if let Some(t) = threads {
            b = b.num_threads(t.max(1));
        }
        if flush {
            b = b.start_handler(|_| subnormals::flush_this_thread());
        }
        let pool = b.build().map_err(|e| OpError::Device(format!("cannot start CPU threads: {e}")))?;
        let nthreads = pool.current_num_threads();
        Ok(Cpu { inner: Arc::new(CpuInner { pool: Pool::new(), threads: pool, nthreads, flush }) })
    }

    /// How many buffers of 64 KiB or more this device (and its clones) allocated anew rather
    /// than reused from its cache ([`Pool::misses`]).
    pub fn fresh_buffers(&self) -> usize {
        self.inner.pool.misses()
    }

    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.inner.threads.install(f)
    }

    /// Runs an op of about `work` elements: small ops run on the calling thread (handing them to
    /// the pool costs ~20 us, far more than the op; their kernels take sequential paths anyway),
    /// large ones on the device's thread pool.
    fn run<R: Send>(&self, work: usize, f: impl FnOnce() -> R + Send) -> R {
        if work < kernels::PAR_MIN {
            let _mode = subnormals::Mode::enter(self.inner.flush);
            f()
        } else {
            self.install(f)
        }
    }

    fn pool(&self) -> &Arc<Pool> {
        &self.inner.pool
    }

    fn wrap<T: CpuElem>(&self, b: Buf<T>, shape: Vec<usize>) -> CpuTensor {
        CpuTensor { values: Arc::new(T::wrap(b)), shape, peaks_at_zero_under: None }
    }

    fn wrap_index<X: CpuIndexElem>(&self, b: Buf<X>) -> CpuIndex {
        CpuIndex { data: Arc::new(X::wrap(b)) }
    }
}

impl Device for Cpu {
    fn device_name(&self) -> String {
        format!("cpu ({} threads)", self.inner.nthreads)
    }
    fn threads(&self) -> usize {
        self.inner.nthreads
    }
    fn flushes_subnormals(&self) -> bool {
        self.inner.flush
    }
    fn synchronize(&self) -> Result<()> {
        Ok(()) // every CPU op has finished when it returns
    }
    fn trim_cache(&self) {
        self.inner.pool.trim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `+`'s forward histogram in two scalar passes gives the pair fold's bits: one chunk and
    /// several, rows in cache and beyond, values with both signs of zero, infinities and NaN.
    #[test]
    fn add_tangents_in_two_passes_are_the_pair_fold_bit_for_bit() {
        fn check<T: CpuElem, X: IndexElem>(n: usize, k: usize) {
            let pool = Pool::new();
            let special = [0.0, -0.0, f64::INFINITY, f64::NAN];
            let x = |i: usize, salt: usize| {
                let h = (i * 2654435761 + salt * 40503) % 1009;
                T::of_f64(if h < 4 { special[h] } else { h as f64 / 97.0 - 5.0 })
            };
            let ix: Vec<X> = (0..n).map(|i| X::of_idx(((i * 7919) % (k + 2)) as i64 - 1)).collect();
            let (v, vd): (Vec<T>, Vec<T>) = (0..n).map(|i| (x(i, 1), x(i, 2))).unzip();
            let (d, dd): (Vec<T>, Vec<T>) = (0..k).map(|b| (x(b, 3), x(b, 4))).unzip();
            let (h, hd) = add_dual_in_two_passes(&pool, &d, &dd, &ix, &v, &vd);
            let pairs = dual_totals(&pool, &ix, k, (T::zero(), T::zero()), &v, &vd, fold::AddF);
            let bits = |x: T| x.as_f64().to_bits();
            for b in 0..k {
                let (wh, whd) = fold::AddF.lift((d[b], dd[b]), pairs[b]);
                assert_eq!((bits(h[b]), bits(hd[b])), (bits(wh), bits(whd)), "n={n} k={k} bin {b}");
            }
        }
        for &(n, k) in &[(500usize, 7usize), (300_000, 2000), (300_000, 70_000)] {
            check::<f32, i32>(n, k);
            check::<f64, i64>(n, k);
        }
        // The switch: 6 MB of f32 pairs from 786 432 bins, of f64 from half that.
        assert!(!hist::split_pair_rows::<f32>(786_431) && hist::split_pair_rows::<f32>(786_432));
        assert!(!hist::split_pair_rows::<f64>(393_215) && hist::split_pair_rows::<f64>(393_216));
    }

    /// `prod_nonzero_by_index` by hand: per bin the product of the non-zero finite values times
    /// the signs of the infinite ones, the zeros and the infinities counted; out-of-range
    /// elements ignored. Each of the three folds (the product alone, with the zeros counted,
    /// with the infinities counted too) runs, chosen by what the values hold.
    #[test]
    fn products_of_nonzero_values_and_their_counts_by_hand() {
        let cpu = Cpu::new(None).unwrap();
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        // Bins: 0 {2, 0, -3}, 1 {0, 0, 5}, 2 {NaN}, 3 {1.5}; two elements out of range.
        let (ix, v) = (vec![0, 0, 0, 1, 1, 1, 2, 3, -1, 4], vec![2.0, 0.0, -3.0, 0.0, -0.0, 5.0, nan, 1.5, 0.0, 9.0]);
        let with_infs = |extra: &[(i64, f64)]| {
            let (mut ix, mut v) = (ix.clone(), v.clone());
            for &(b, x) in extra {
                ix.push(b);
                v.push(x);
            }
            (ix, v)
        };
        let no_zeros = (vec![0, 0, 1, 2, 3, 7], vec![2.0, -3.0, 5.0, nan, 1.5, 9.0]);
        let cases = [
            (no_zeros, vec![-6.0, 5.0, nan, 1.5], vec![0, 0, 0, 0], vec![0, 0, 0, 0]),
            (with_infs(&[]), vec![-6.0, 5.0, nan, 1.5], vec![1, 2, 0, 0], vec![0, 0, 0, 0]),
            // An infinity out of range changes nothing.
            (with_infs(&[(4, inf)]), vec![-6.0, 5.0, nan, 1.5], vec![1, 2, 0, 0], vec![0, 0, 0, 0]),
            // Bin 0 gains +inf, bin 3 -inf and +inf: their signs join the products.
            (
                with_infs(&[(0, inf), (3, -inf), (3, inf)]),
                vec![-6.0, 5.0, nan, -1.5],
                vec![1, 2, 0, 0],
                vec![1, 0, 0, 2],
            ),
        ];
        for dt in [DType::F32, DType::F64] {
            for it in [IndexDType::I32, IndexDType::I64] {
                for ((ix, v), p, zeros, infs) in &cases {
                    let (i, x) = (cpu.index_as(ix, it).unwrap(), cpu.tensor(v, &[v.len()], dt).unwrap());
                    let (gp, gz, gi) = cpu.prod_nonzero_by_index(&i, &x, 4).unwrap();
                    let gp = cpu.to_vec(&gp).unwrap();
                    for b in 0..4 {
                        assert!(gp[b] == p[b] || (gp[b].is_nan() && p[b].is_nan()), "{dt} {it} bin {b}: {gp:?}");
                    }
                    assert_eq!((&gz.to_i64(), &gi.to_i64()), (zeros, infs), "{dt} {it} {ix:?}");
                }
            }
        }
        // Across parallel chunks: products of +-1, +-2 and 1/2 are exact in any order.
        let (n, k) = (300_000usize, 70_000usize);
        let ix: Vec<i64> = (0..n).map(|i| ((i * 2654435761) % (k + 2)) as i64 - 1).collect();
        // Each fold: without zeros or infinities, with zeros, with both.
        for (zero, infinity) in [(false, false), (true, false), (true, true)] {
            let set = [1.0, -1.0, 2.0, if zero { 0.0 } else { 0.5 }, -0.5, 1.0, -2.0];
            let v: Vec<f64> =
                (0..n).map(|i| if infinity && i % 1001 == 0 { -inf } else { set[(i * 7919) % set.len()] }).collect();
            let (mut p, mut z, mut m) = (vec![1.0; k], vec![0i64; k], vec![0i64; k]);
            for (&b, &x) in ix.iter().zip(&v) {
                if b < 0 || b as usize >= k {
                    continue;
                }
                let b = b as usize;
                match x {
                    0.0 => z[b] += 1,
                    x if x.is_infinite() => {
                        m[b] += 1;
                        p[b] *= x.signum();
                    }
                    x => p[b] *= x,
                }
            }
            let (i, x) = (cpu.index_as(&ix, IndexDType::I32).unwrap(), cpu.tensor(&v, &[n], DType::F32).unwrap());
            let (gp, gz, gi) = cpu.prod_nonzero_by_index(&i, &x, k).unwrap();
            assert_eq!(cpu.to_vec(&gp).unwrap(), p, "infinity {infinity}");
            assert_eq!((z.iter().any(|&c| c > 0), m.iter().any(|&c| c > 0)), (zero, infinity));
            assert_eq!((gz.to_i64(), gi.to_i64()), (z, m), "infinity {infinity}");
        }
    }

    /// min/max's one-compare fold gives the two-compare ranking's totals bit for bit: on
    /// NaN-free data by itself (signed zeros tie and the earlier one stays; infinities), and with
    /// a NaN, which must end as its bin's total, by folding again with the ranking. Several
    /// chunks (n past `PAR_MIN`), tiny k (interleaved rows) and larger k.
    #[test]
    fn extremum_totals_are_the_two_compare_fold_bit_for_bit() {
        fn check<T: CpuElem, X: IndexElem>(make_index: impl Fn(usize) -> X) {
            let pool = Pool::new();
            let n = (1 << 17) + 5 * hist::STAGE_LEN + 17;
            // splitmix64 of (salt, i): independent streams per salt.
            let mix = |i: usize, salt: usize| {
                let mut z = ((salt as u64) << 32 | i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as usize
            };
            // Per bin kind: only signed zeros (the tie decides the sign), numbers with
            // infinities, plain numbers; with `nans`, bin 1 also gets NaNs in the third block.
            let kinds: [&[f64]; 3] =
                [&[0.0, -0.0], &[1.5, -2.25, f64::INFINITY, f64::NEG_INFINITY, -0.0], &[1.0, -1.0, 0.5]];
            // Bins whose total is +0 and -0: both must occur, or the ties decided nothing.
            let mut zero_signs = [0usize; 2];
            for k in [10usize, 300, 5000] {
                for nans in [false, true] {
                    let slot = |i: usize| mix(i, 1) % (k + 2);
                    let ix: Vec<X> = (0..n).map(|i| make_index(slot(i))).collect();
                    let v: Vec<T> = (0..n)
                        .map(|i| {
                            let third_block = (2 * hist::STAGE_LEN..3 * hist::STAGE_LEN).contains(&i);
                            // At k = 5000 a block holds too few of bin 1's: anywhere there.
                            if nans && (third_block || k > 1000) && slot(i) == 2 && mix(i, 2) % 3 == 0 {
                                T::of_f64(f64::NAN)
                            } else {
                                let set = kinds[slot(i) % 3];
                                T::of_f64(set[mix(i, 3) % set.len()])
                            }
                        })
                        .collect();
                    let bits = |t: &[T]| t.iter().map(|x| x.as_f64().to_bits()).collect::<Vec<_>>();
                    for (name, (fast, refolded), want) in [
                        (
                            "min",
                            extremum_totals(&pool, &ix, k, &v, Extremum::Min),
                            scalar_totals(&pool, &ix, k, T::of_f64(f64::INFINITY), &v, fold::MinF),
                        ),
                        (
                            "max",
                            extremum_totals(&pool, &ix, k, &v, Extremum::Max),
                            scalar_totals(&pool, &ix, k, T::of_f64(f64::NEG_INFINITY), &v, fold::MaxF),
                        ),
                    ] {
                        let nan_bins = want.iter().filter(|x| x.as_f64().is_nan()).count();
                        assert_eq!(nan_bins, usize::from(nans), "{name} k={k}: bin 1 is NaN with NaNs");
                        assert_eq!(refolded, nans, "{name} k={k}: folded again exactly when a value is NaN");
                        for x in want.iter().map(|x| x.as_f64()).filter(|&x| x == 0.0) {
                            zero_signs[usize::from(x.is_sign_negative())] += 1;
                        }
                        assert_eq!(bits(&fast), bits(&want), "{name} k={k} nans={nans} {}", T::DTYPE);
                    }
                }
            }
            assert!(zero_signs[0] > 0 && zero_signs[1] > 0, "bins of +0 and of -0: {zero_signs:?}");
        }
        check::<f32, i32>(|b| b as i32 - 1);
        check::<f64, i64>(|b| b as i64 - 1);
        check::<f32, i64>(|b| b as i64 - 1);
    }
}
