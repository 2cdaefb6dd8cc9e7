//! The CPU device: rayon over fixed-size blocks, a caching allocator, and histogram kernels with
//! per-chunk private rows. Results never depend on the thread count.

pub mod dense;
mod fold;
mod hist;
pub(crate) mod kernels;
mod lae;
mod lstm;
mod pool;
pub mod roofline;
pub(crate) mod scan;
mod segments;
mod simd;
mod sort;
pub mod staged;
mod vmath;
/// The histogram kernels' size constants and plans, for the size-switch list (`crate::sizes`).
pub(crate) mod hist_sizes {
    pub(crate) use super::hist::{MIN_CHUNK, PARTITION_MIN_BINS_BYTES, SMALL_K, SPLIT_PAIR_ROW_BYTES};
    #[cfg(test)]
    pub(crate) use super::hist::{Plan, SUBS, adjoint_window_bins, split_pair_rows};
}

use std::sync::Arc;

use crate::device::Device;
use rayon::prelude::*;

use crate::checks::{broadcast_shape, same_dtype, same_len};
use crate::ops::{ChunkedHist, Extremum, IndexMeta, Operand, OutOfRange, ScanSpec, TensorMeta};
use crate::ops::{DenseOps, ElementwiseOps, HistOps, IndexOps, ReduceOps, RuleKernels, ScanOps, TensorOps};
use crate::rules::hist::Relative;
use crate::{BinaryOp, DType, Elem, HistOp, IndexDType, IndexElem, OpError, Result, UnaryOp};
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

/// `v[i] = op(v[i])` with the loops of `Cpu::unary`, through a copy of each run of elements on
/// the stack (the loops read one slice and write another). The operators are elementwise, so
/// the values do not depend on how the elements are split.
fn unary_in_place<T: CpuElem>(op: UnaryOp, v: &mut [T]) {
    let map: fn(UnaryOp, &[T], &mut [T]) =
        if vmath::vectorised(op) { vmath::map_unary::<T> } else { kernels::unary_map::<T> };
    let run = |block: &mut [T]| {
        let mut copy = [T::zero(); 256];
        for part in block.chunks_mut(256) {
            copy[..part.len()].copy_from_slice(part);
            map(op, &copy[..part.len()], part);
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
        let mut b = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("adgauge-cpu-{i}"));
        if let Some(t) = threads {
            b = b.num_threads(t.max(1));
        }
        let pool = b.build().map_err(|e| OpError::Device(format!("cannot start CPU threads: {e}")))?;
        let nthreads = pool.current_num_threads();
        Ok(Cpu { inner: Arc::new(CpuInner { pool: Pool::new(), threads: pool, nthreads }) })
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
        if work < kernels::PAR_MIN { f() } else { self.install(f) }
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

    /// An index tensor of `X` from entries already checked to fit.
    fn index_t<X: CpuIndexElem>(&self, data: &[i64]) -> CpuIndex {
        let mut out = self.pool().take::<X>(data.len());
        self.run(data.len(), || fill_with(&mut out, |i| X::of_idx(data[i])));
        self.wrap_index(out)
    }

    fn sort_t<X: CpuIndexElem>(&self, keys: &CpuIndex, num_keys: usize) -> Result<(Vec<i64>, Vec<i64>)> {
        let ks = keys.slice::<X>()?;
        Ok(self.run(keys.len(), || sort::sort_with_ranks(ks, num_keys)))
    }

    fn gather_index_t<S: CpuIndexElem, X: CpuIndexElem>(&self, src: &CpuIndex, idx: &CpuIndex) -> Result<CpuIndex> {
        let (s, ix) = (src.slice::<S>()?, idx.slice::<X>()?);
        let mut out = self.pool().take::<S>(ix.len());
        self.run(idx.len(), || fill_with(&mut out, |i| ix[i].bin(s.len()).map_or(S::of_idx(-1), |b| s[b])));
        Ok(self.wrap_index(out))
    }

    fn gather_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        src: &CpuTensor,
        idx: &CpuIndex,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (g, k, ix) = (g.slice::<T>()?, src.numel(), idx.slice::<X>()?);
        let mut out = self.pool().take::<T>(k);
        out.fill(T::of_f64(HistOp::Add.neutral()));
        for (i, &v) in g.iter().enumerate() {
            if let Some(b) = ix[i].bin(k) {
                out[b] = out[b] + v;
            }
        }
        Ok(self.wrap(out, src.shape.clone()))
    }

    fn tensor_t<T: CpuElem>(&self, data: &[f64], shape: &[usize]) -> Result<CpuTensor> {
        let mut out = self.pool().take::<T>(data.len());
        fill_with(&mut out, |i| T::of_f64(data[i]));
        Ok(self.wrap(out, shape.to_vec()))
    }

    fn full_t<T: CpuElem>(&self, shape: &[usize], value: f64) -> Result<CpuTensor> {
        let n = shape.iter().product();
        Ok(self.wrap(self.pool().filled(n, T::of_f64(value)), shape.to_vec()))
    }

    fn to_vec_t<T: CpuElem>(&self, t: &CpuTensor) -> Result<Vec<f64>> {
        Ok(t.slice::<T>()?.iter().map(|v| v.as_f64()).collect())
    }

    fn unary_t<T: CpuElem>(&self, op: UnaryOp, x: &CpuTensor) -> Result<CpuTensor> {
        let xs = x.slice::<T>()?;
        let mut out = self.pool().take::<T>(xs.len());
        // vmath's vector loop where it has one (the same functions as `kernels::unary`), else
        // one loop per operator.
        let map: fn(UnaryOp, &[T], &mut [T]) =
            if vmath::vectorised(op) { vmath::map_unary::<T> } else { kernels::unary_map::<T> };
        if xs.len() < kernels::PAR_MIN {
            map(op, xs, &mut out);
        } else {
            out.par_chunks_mut(kernels::BLOCK).zip(xs.par_chunks(kernels::BLOCK)).for_each(|(o, x)| map(op, x, o));
        }
        Ok(self.wrap(out, x.shape.clone()))
    }

    fn unary_adjoint_t<T: CpuElem>(
        &self,
        op: UnaryOp,
        x: &CpuTensor,
        y: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (xs, ys, gs) = (x.slice::<T>()?, y.slice::<T>()?, g.slice::<T>()?);
        if ys.len() != xs.len() || gs.len() != xs.len() {
            return Err(OpError::Shape {
                op: "unary_adjoint",
                detail: format!("x {:?}, y {:?}, adjoint {:?}", x.shape, y.shape, g.shape),
            });
        }
        let mut out = self.pool().take::<T>(xs.len());
        if xs.len() < kernels::PAR_MIN {
            kernels::unary_adjoint_map(op, xs, ys, gs, &mut out);
        } else {
            out.par_chunks_mut(kernels::BLOCK)
                .zip(
                    xs.par_chunks(kernels::BLOCK).zip(ys.par_chunks(kernels::BLOCK)).zip(gs.par_chunks(kernels::BLOCK)),
                )
                .for_each(|(o, ((x, y), g))| kernels::unary_adjoint_map(op, x, y, g, o));
        }
        Ok(self.wrap(out, g.shape.clone()))
    }

    fn binary_t<T: CpuElem>(&self, op: BinaryOp, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        per_binary_op!(op, T, f => self.zip_t::<T>("binary", a, b, f))
    }

    /// `out[i] = f(a[i], b[i])` with broadcasting of a one-element operand.
    fn zip_t<T: CpuElem>(
        &self,
        name: &'static str,
        a: &CpuTensor,
        b: &CpuTensor,
        f: impl Fn(T, T) -> T + Sync,
    ) -> Result<CpuTensor> {
        let shape = broadcast_shape(name, &a.shape, &b.shape)?;
        let (xs, ys) = (a.slice::<T>()?, b.slice::<T>()?);
        let n: usize = shape.iter().product();
        let mut out = self.pool().take::<T>(n);
        match (xs.len() == n, ys.len() == n) {
            (true, true) => fill_with(&mut out, |i| f(xs[i], ys[i])),
            (false, true) => {
                let x = xs[0];
                fill_with(&mut out, |i| f(x, ys[i]))
            }
            (true, false) => {
                let y = ys[0];
                fill_with(&mut out, |i| f(xs[i], y))
            }
            (false, false) => unreachable!("broadcast_shape admits no such pair"),
        }
        Ok(self.wrap(out, shape))
    }

    fn select_t<T: CpuElem>(&self, mask: &CpuTensor, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let n = mask.numel();
        let (ms, xs, ys) = (mask.slice::<T>()?, a.slice::<T>()?, b.slice::<T>()?);
        for (what, len) in [("a", xs.len()), ("b", ys.len())] {
            if len != n && len != 1 {
                return Err(OpError::Shape { op: "select", detail: format!("mask has {n} elements, {what} {len}") });
            }
        }
        let (sx, sy) = (usize::from(xs.len() == n && n != 1), usize::from(ys.len() == n && n != 1));
        let mut out = self.pool().take::<T>(n);
        // A stride of 0 broadcasts a one-element operand. A select, not a branch: masks of
        // data-dependent conditions (the `*` rule's bins with a zero) are random.
        fill_with(&mut out, |i| std::hint::select_unpredictable(ms[i] != T::zero(), xs[i * sx], ys[i * sy]));
        Ok(self.wrap(out, mask.shape.clone()))
    }

    fn index_eq_t<T: CpuElem, X: CpuIndexElem>(&self, i: &CpuIndex, value: i64) -> Result<CpuTensor> {
        let ix = i.slice::<X>()?;
        let mut out = self.pool().take::<T>(ix.len());
        fill_with(&mut out, |j| if ix[j].idx() == value { T::one() } else { T::zero() });
        Ok(self.wrap(out, vec![ix.len()]))
    }

    fn reduce_t<T: CpuElem>(&self, op: HistOp, x: &CpuTensor) -> Result<CpuTensor> {
        let r = kernels::reduce(op, x.slice::<T>()?);
        let mut out = self.pool().take::<T>(1);
        out[0] = r;
        Ok(self.wrap(out, vec![1]))
    }

    fn gather_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        src: &CpuTensor,
        idx: &CpuIndex,
        oob: OutOfRange,
    ) -> Result<CpuTensor> {
        let s = src.slice::<T>()?;
        let ix = idx.slice::<X>()?;
        let len = s.len();
        let fill = match oob {
            OutOfRange::Fill(v) => T::of_f64(v),
            OutOfRange::Error => {
                if let Some(position) = ix.iter().position(|&b| b.bin(len).is_none()) {
                    return Err(OpError::IndexOutOfRange { op: "gather", index: ix[position].idx(), position, len });
                }
                T::zero()
            }
        };
        let mut out = self.pool().take::<T>(ix.len());
        fill_with(&mut out, |i| ix[i].bin(len).map_or(fill, |b| s[b]));
        Ok(self.wrap(out, vec![ix.len()]))
    }

    fn stack_t<T: CpuElem>(&self, parts: &[CpuTensor], shape: Vec<usize>) -> Result<CpuTensor> {
        let m = parts[0].numel();
        let mut out = self.pool().take::<T>(m * parts.len());
        for (o, p) in out.chunks_mut(m.max(1)).zip(parts) {
            o.copy_from_slice(p.slice::<T>()?);
        }
        Ok(self.wrap(out, shape))
    }

    fn unstack_t<T: CpuElem>(&self, x: &CpuTensor, n: usize, row: Vec<usize>) -> Result<Vec<CpuTensor>> {
        let m: usize = row.iter().product();
        let xs = x.slice::<T>()?;
        (0..n)
            .map(|j| {
                let mut out = self.pool().take::<T>(m);
                out.copy_from_slice(&xs[j * m..(j + 1) * m]);
                Ok(self.wrap(out, row.clone()))
            })
            .collect()
    }

    fn scatter_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        idx: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = idx.slice::<X>()?;
        same_len("scatter", "indices vs values", ix.len(), v.len())?;
        let mut out = self.pool().take::<T>(d.len());
        par_copy(&mut out, d);
        let k = d.len();
        for (j, &b) in ix.iter().enumerate() {
            if let Some(b) = b.bin(k) {
                out[b] = v[j];
            }
        }
        Ok(self.wrap(out, dest.shape.clone()))
    }

    fn reduce_by_index_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("reduce_by_index", "indices vs values", ix.len(), v.len())?;
        let (k, pool) = (d.len(), self.pool());
        if let fold::Kind::LogAddExp = fold::kind(op)
            && let Some(out) = lae::hist(pool, d, ix, v, CpuTensor::relative_shift_under(dest, vals, inds))
        {
            return Ok(self.wrap(out, dest.shape.clone()));
        }
        let neutral = T::of_f64(op.neutral());
        // One fold type per operator (`with_fold!`), so each inner loop is specialised.
        let totals = match fold::kind(op) {
            // Plain products in the hot loop (the absorbing product's branches cost 1.4x at
            // k = 10^3); they differ from it only where a zero met an inf or a NaN, which leaves
            // a NaN total: then the histogram is refolded with zeros absorbing. Zeros' signs are
            // evened out when dest is combined in below.
            fold::Kind::Mul => {
                let plain = scalar_totals(pool, ix, k, neutral, v, fold::PlainMulF);
                if plain.iter().any(|t| t.is_nan()) {
                    scalar_totals(pool, ix, k, neutral, v, fold::MulF)
                } else {
                    plain
                }
            }
            fold::Kind::Min => extremum_bin_totals(pool, ix, k, v, Extremum::Min),
            fold::Kind::Max => extremum_bin_totals(pool, ix, k, v, Extremum::Max),
            _ => with_fold!(op, T, f => scalar_totals(pool, ix, k, neutral, v, f)),
        };
        #[cfg(feature = "planted-slowdown")]
        if let fold::Kind::Add = fold::kind(op) {
            planted::add_fold_again(pool, ix, k, v);
        }
        let mut out = pool.take::<T>(k);
        kernels::combine_into(op, d, &totals, &mut out);
        Ok(self.wrap(out, dest.shape.clone()))
    }

    fn arg_reduce_by_index_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        ext: Extremum,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<(CpuTensor, CpuIndex)> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("arg_reduce_by_index", "indices vs values", ix.len(), v.len())?;
        let (k, pool) = (d.len(), self.pool());
        let mut vals_out = pool.take::<T>(k);
        let mut pos_out = pool.take::<i64>(k);
        // u32 positions when n allows (8-byte accumulators for f32 instead of 16).
        macro_rules! finish {
            ($p:ty) => {{
                let totals = match ext {
                    Extremum::Min => self.arg_totals::<T, X, $p, false>(ix, v, k),
                    Extremum::Max => self.arg_totals::<T, X, $p, true>(ix, v, k),
                };
                // dest sits at position -1: it wins every tie.
                fill_with(&mut vals_out, |b| {
                    let (tv, tp) = totals[b];
                    if ext.beats(tv, tp.pos(), d[b], -1) { tv } else { d[b] }
                });
                fill_with(&mut pos_out, |b| {
                    let (tv, tp) = totals[b];
                    if ext.beats(tv, tp.pos(), d[b], -1) { tp.pos() } else { -1 }
                });
            }};
        }
        if ix.len() < u32::MAX as usize {
            finish!(u32)
        } else {
            finish!(i64)
        }
        Ok((self.wrap(vals_out, dest.shape.clone()), self.wrap_index(pos_out)))
    }

    /// Per-bin (winning value, position) of the elements alone; empty bins hold
    /// (neutral, P::NONE), which any element beats.
    fn arg_totals<T: CpuElem, X: IndexElem, P: ArgPos, const MAX: bool>(
        &self,
        ix: &[X],
        v: &[T],
        k: usize,
    ) -> Buf<(T, P)> {
        let ext = if MAX { Extremum::Max } else { Extremum::Min };
        let neutral = if MAX { T::neg_infinity() } else { T::infinity() };
        // `beats` with positions compared as P (the order of P matches that of i64 here).
        let wins = |a: T, pa: P, b: T, pb: P| ext.beats(a, pa, b, pb);
        hist::bin_totals(
            self.pool(),
            ix,
            k,
            (neutral, P::NONE),
            |a, i| {
                let p = P::of(i);
                if wins(v[i], p, a.0, a.1) {
                    *a = (v[i], p)
                }
            },
            |a, b| {
                if wins(b.0, b.1, a.0, a.1) {
                    *a = b
                }
            },
        )
    }

    #[allow(clippy::type_complexity)]
    fn prod_nonzero_by_index_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        k: usize,
    ) -> Result<(CpuTensor, CpuIndex, CpuIndex)> {
        let v = vals.slice::<T>()?;
        let ix = inds.slice::<X>()?;
        same_len("prod_nonzero_by_index", "indices vs values", ix.len(), v.len())?;
        let pool = self.pool();
        // A vector scan first (a sequential read of the values): which counts are needed. Data
        // with neither zeros nor infinities folds the product alone, in 4-byte rows like the
        // primal's; with zeros, (product, zeros) in rows of 8 bytes for f32 and u32 counts; with
        // an infinity, every count (12 bytes). At k = 10^6 the random updates slow with the
        // bytes of the rows (n = 10^7, f32: 40 ms with 12-byte rows, 25 with 8-byte ones).
        let (any_zero, any_infinity) = zeros_and_infinities(v);
        let no_counts = || pool.filled::<i64>(k, 0);
        macro_rules! count {
            ($c:ty) => {{
                let (mut p, mut z) = (pool.take::<T>(k), pool.take::<i64>(k));
                if !any_infinity {
                    let totals = hist::bin_totals(
                        pool,
                        ix,
                        k,
                        (T::one(), 0 as $c),
                        |a, i| {
                            let x = v[i];
                            let zero = x == T::zero();
                            a.1 += <$c>::from(zero);
                            a.0 = a.0 * if zero { T::one() } else { x };
                        },
                        |a, b| *a = (a.0 * b.0, a.1 + b.1),
                    );
                    fill_with(&mut p, |b| totals[b].0);
                    fill_with(&mut z, |b| totals[b].1 as i64);
                    (p, z, no_counts())
                } else {
                    let totals = hist::bin_totals(
                        pool,
                        ix,
                        k,
                        (T::one(), 0 as $c, 0 as $c),
                        |a, i| {
                            let x = v[i];
                            if x == T::zero() {
                                a.1 += 1
                            } else if x.is_infinite() {
                                count_infinity(&mut a.0, &mut a.2, x)
                            } else {
                                a.0 = a.0 * x
                            }
                        },
                        |a, b| *a = (a.0 * b.0, a.1 + b.1, a.2 + b.2),
                    );
                    let mut m = pool.take::<i64>(k);
                    fill_with(&mut p, |b| totals[b].0);
                    fill_with(&mut z, |b| totals[b].1 as i64);
                    fill_with(&mut m, |b| totals[b].2 as i64);
                    (p, z, m)
                }
            }};
        }
        let (p, z, m) = if !any_zero && !any_infinity {
            (scalar_totals(pool, ix, k, T::one(), v, fold::PlainMulF), no_counts(), no_counts())
        } else if ix.len() < u32::MAX as usize {
            count!(u32)
        } else {
            count!(i64)
        };
        Ok((self.wrap(p, vec![k]), self.wrap_index(z), self.wrap_index(m)))
    }

    fn prod_vals_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        c0: &CpuTensor,
        c1: &CpuTensor,
        c2: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (v, z0, z1, z2) = (vals.slice::<T>()?, c0.slice::<T>()?, c1.slice::<T>()?, c2.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("prod_vals_adjoint", "indices vs values", ix.len(), v.len())?;
        same_len("prod_vals_adjoint", "c0 vs c1", z0.len(), z1.len())?;
        same_len("prod_vals_adjoint", "c0 vs c2", z0.len(), z2.len())?;
        let k = z0.len();
        let mut out = self.pool().take::<T>(v.len());
        if k == 0 {
            fill_with(&mut out, |_| T::zero());
            return Ok(self.wrap(out, vals.shape.clone()));
        }
        // Selects, not branches: c0 is 0 in every bin with a zero (about two bins in three of
        // the benchmark's data), so a branch on it mispredicted at random. An out-of-range
        // element reads bin 0 and is then set to 0.
        fill_with(&mut out, |i| {
            let b = ix[i].idx();
            let inside = (b as u64) < k as u64;
            let at = if inside { b as usize } else { 0 };
            let (x, c0, c1) = (v[i], z0[at], z1[at]);
            let q = c0 / x;
            // A zero c0 gives 0 even at a NaN value (a bin whose adjoint is 0). Selects the
            // compiler must keep (`select_unpredictable`): as plain `if`s it branched around the
            // division, and the branch on c0 mispredicted at random.
            let r = std::hint::select_unpredictable(c0 == T::zero(), T::zero(), q);
            let r = std::hint::select_unpredictable(x == T::zero(), c1, r);
            // A branch, not a select: infinite values are rare, and c2 is read only for them.
            let r = if x.is_infinite() { infinite_factor_adjoint(z2[at], x) } else { r };
            if inside { r } else { T::zero() }
        });
        Ok(self.wrap(out, vals.shape.clone()))
    }

    /// [`HistOps::relative_inputs`]: the bins' maxima in one histogram pass (the same fold and
    /// order as `reduce_by_index` with max, so the same anchors), then each input relative to
    /// its anchor in one pass (out-of-range elements relative to the neutral anchor, as the
    /// composition's gather fills them).
    #[allow(clippy::type_complexity)]
    fn relative_inputs_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        kind: Relative,
        dest: &CpuTensor,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("relative_inputs", "indices vs values", ix.len(), v.len())?;
        // One loop per kind (a kind read inside the loops kept its branches there).
        let (anchor, dest_rel, vals_rel) = match kind {
            Relative::Shift => self.relative_of::<T, X, false>(d, ix, v),
            Relative::Scale => self.relative_of::<T, X, true>(d, ix, v),
        };
        let k = d.len();
        let (mut dest_rel, mut vals_rel) =
            (self.wrap(dest_rel, dest.shape.clone()), self.wrap(vals_rel, vals.shape.clone()));
        if kind == Relative::Shift {
            dest_rel.peaks_at_zero_under = Some(inds.data.clone());
            vals_rel.peaks_at_zero_under = Some(inds.data.clone());
        }
        Ok((self.wrap(anchor, vec![k]), dest_rel, vals_rel))
    }

    /// [`Cpu::relative_inputs_t`] for one kind: `SCALE` (hypot: magnitudes, x / m) or not
    /// (logaddexp: x - m).
    fn relative_of<T: CpuElem, X: CpuIndexElem, const SCALE: bool>(
        &self,
        d: &[T],
        ix: &[X],
        v: &[T],
    ) -> (Buf<T>, Buf<T>, Buf<T>) {
        let (k, pool) = (d.len(), self.pool());
        let max = fold::MaxF;
        let (empty, neutral) = if SCALE { (T::zero(), T::one()) } else { (T::neg_infinity(), T::zero()) };
        let magnitude = |x: T| if SCALE { x.abs() } else { x };
        let totals = hist::bin_totals(
            pool,
            ix,
            k,
            T::neg_infinity(),
            |a, i| *a = max.combine(*a, magnitude(v[i])),
            |a, b| *a = max.combine(*a, b),
        );
        let mut anchor = pool.take::<T>(k);
        fill_with(&mut anchor, |b| {
            let m = kernels::combine(HistOp::Max, magnitude(d[b]), totals[b]);
            if m == empty { neutral } else { m }
        });
        let relative = |x: T, a: T| {
            if SCALE {
                if x.abs() == a { kernels::unary(UnaryOp::Sign, x) } else { x / a }
            } else if x == a {
                T::zero()
            } else {
                x - a
            }
        };
        let mut dest_rel = pool.take::<T>(k);
        fill_with(&mut dest_rel, |b| relative(d[b], anchor[b]));
        let mut vals_rel = pool.take::<T>(v.len());
        fill_with(&mut vals_rel, |i| {
            let b = ix[i].idx();
            let inside = (b as u64) < k as u64;
            // A select (bin 0 read, then not used), not a branch: out-of-range indices come at
            // random.
            let a = if k == 0 { neutral } else { anchor[if inside { b as usize } else { 0 }] };
            relative(v[i], if inside { a } else { neutral })
        });
        (anchor, dest_rel, vals_rel)
    }

    fn fold_adjoint_t<T: CpuElem>(
        &self,
        op: HistOp,
        l: &CpuTensor,
        a: &CpuTensor,
        r: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (ls, xs, rs, gs) = (l.slice::<T>()?, a.slice::<T>()?, r.slice::<T>()?, g.slice::<T>()?);
        let n = xs.len();
        same_len("fold_adjoint", "l vs a", ls.len(), n)?;
        same_len("fold_adjoint", "r vs a", rs.len(), n)?;
        if gs.len() != n && gs.len() != 1 {
            return Err(OpError::Shape { op: "fold_adjoint", detail: format!("g has {} elements, a {n}", gs.len()) });
        }
        let sg = usize::from(gs.len() == n);
        let mut out = self.pool().take::<T>(n);
        with_fold!(op, T, f => fill_with(&mut out, |i| {
            let gi = gs[i * sg];
            if gi == T::zero() {
                return T::zero();
            }
            let y = f.combine(ls[i], xs[i]);
            f.chain3(f.d2(ls[i], xs[i]), f.d1(y, rs[i]), gi)
        }));
        Ok(self.wrap(out, a.shape.clone()))
    }

    fn sorted_vals_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        dest: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (v, d, g) = (vals.slice::<T>()?, dest.slice::<T>()?, hist_bar.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("sorted_vals_adjoint", "indices vs values", ix.len(), v.len())?;
        same_len("sorted_vals_adjoint", "dest vs hist_bar", d.len(), g.len())?;
        let (pool, neutral) = (self.pool(), T::of_f64(op.neutral()));
        let mut out = pool.take::<T>(v.len());
        with_fold!(op, T, f => if v.len() <= u32::MAX as usize {
            segments::sorted_adjoint::<u32, _, _, _>(pool, f, neutral, ix, v, d, g, &mut out)
        } else {
            segments::sorted_adjoint::<usize, _, _, _>(pool, f, neutral, ix, v, d, g, &mut out)
        });
        Ok(self.wrap(out, vals.shape.clone()))
    }

    fn total_form_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        hist: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        let total = op
            .general()
            .and_then(|g| g.fns::<T>().total)
            .ok_or_else(|| OpError::Unsupported(format!("the operator {op} has no total form")))?;
        let (v, h, g) = (vals.slice::<T>()?, hist.slice::<T>()?, hist_bar.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("total_form_adjoint", "indices vs values", ix.len(), v.len())?;
        same_len("total_form_adjoint", "hist vs hist_bar", h.len(), g.len())?;
        let k = h.len();
        let mut out = self.pool().take::<T>(v.len());
        if let fold::Kind::LogAddExp = fold::kind(op)
            && k > 0
        {
            lae::total_adjoint(self.pool(), ix, v, h, g, &mut out);
        } else {
            fill_with(&mut out, |i| match ix[i].bin(k) {
                Some(b) if g[b] != T::zero() => total(v[i], h[b]) * g[b],
                _ => T::zero(),
            });
        }
        Ok(self.wrap(out, vals.shape.clone()))
    }

    fn scan_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        x: &CpuTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<CpuTensor> {
        let xs = x.slice::<T>()?;
        let keys = segments.map(|s| s.slice::<X>()).transpose()?;
        if let Some(k) = keys {
            same_len("scan", "segments vs values", k.len(), xs.len())?;
        }
        let mut out = self.pool().take::<T>(xs.len());
        let neutral = T::of_f64(op.neutral());
        with_fold!(op, T, f => scan::scan(&mut out, xs, neutral, |a, b| f.combine(a, b), spec, keys));
        Ok(self.wrap(out, x.shape.clone()))
    }

    fn linear_recurrence_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        a: &CpuTensor,
        b: &CpuTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<CpuTensor> {
        let (xa, xb) = (a.slice::<T>()?, b.slice::<T>()?);
        same_len("linear_recurrence", "a vs b", xa.len(), xb.len())?;
        let keys = segments.map(|s| s.slice::<X>()).transpose()?;
        if let Some(k) = keys {
            same_len("linear_recurrence", "segments vs values", k.len(), xa.len())?;
        }
        let mut out = self.pool().take::<T>(xa.len());
        scan::linear_recurrence(&mut out, xa, xb, spec, keys);
        Ok(self.wrap(out, a.shape.clone()))
    }

    /// [`HistOps::relative_reduce_by_index_dual`] of logaddexp.
    fn lae_dual_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<Option<(CpuTensor, CpuTensor)>> {
        let (d, dd, ix, v, vd) =
            dual_operands::<T, X>("relative_reduce_by_index_dual", dest, dest_dot, inds, vals, vals_dot)?;
        Ok(lae::hist_dual(self.pool(), d, dd, ix, v, vd, false)
            .map(|(h, hd)| (self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone()))))
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_by_index_dual_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor)> {
        let (d, dd, ix, v, vd) = dual_operands::<T, X>("reduce_by_index_dual", dest, dest_dot, inds, vals, vals_dot)?;
        let (k, pool) = (d.len(), self.pool());
        if let fold::Kind::LogAddExp = fold::kind(op)
            && let Some((h, hd)) =
                lae::hist_dual(pool, d, dd, ix, v, vd, CpuTensor::relative_shift_under(dest, vals, inds))
        {
            return Ok((self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone())));
        }
        if let fold::Kind::Add = fold::kind(op)
            && hist::split_pair_rows::<T>(k)
        {
            let (h, hd) = add_dual_in_two_passes(pool, d, dd, ix, v, vd);
            return Ok((self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone())));
        }
        let mut h = pool.take::<T>(k);
        let mut hd = pool.take::<T>(k);
        let neutral = (T::of_f64(op.neutral()), T::zero());
        let totals = match fold::kind(op) {
            // As the primal: plain products, refolded with zeros absorbing only where a zero met
            // an inf (a NaN value or tangent total).
            fold::Kind::Mul => {
                let plain = dual_totals(pool, ix, k, neutral, v, vd, fold::PlainMulF);
                if plain.iter().any(|&(a, b)| a.is_nan() || b.is_nan()) {
                    dual_totals(pool, ix, k, neutral, v, vd, fold::MulF)
                } else {
                    plain
                }
            }
            _ => with_fold!(op, T, f => dual_totals(pool, ix, k, neutral, v, vd, f)),
        };
        with_fold!(op, T, f => {
            fill_with(&mut h, |b| f.lift((d[b], dd[b]), totals[b]).0);
            fill_with(&mut hd, |b| f.lift((d[b], dd[b]), totals[b]).1);
        });
        Ok((self.wrap(h, dest.shape.clone()), self.wrap(hd, dest.shape.clone())))
    }

    fn reduce_by_index_chunked_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        dest: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<ChunkedHist<CpuTensor>> {
        let (d, v) = (dest.slice::<T>()?, vals.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        same_len("reduce_by_index_chunked", "indices vs values", ix.len(), v.len())?;
        let k = d.len();
        let neutral = T::of_f64(op.neutral());
        with_fold!(op, T, f => self.chunked_forward(f, dest, d, v, ix, k, neutral))
    }

    #[allow(clippy::too_many_arguments)]
    fn chunked_forward<T: CpuElem, X: IndexElem, F: Fold<T>>(
        &self,
        f: F,
        dest: &CpuTensor,
        d: &[T],
        v: &[T],
        ix: &[X],
        k: usize,
        neutral: T,
    ) -> Result<ChunkedHist<CpuTensor>> {
        let pool = self.pool();
        let comb = |a: T, b: T| f.combine(a, b);
        let (plan, rows) =
            hist::chunk_totals(pool, ix, k, neutral, |a, i| *a = comb(*a, v[i]), |a, b| *a = comb(*a, b));
        let c = plan.chunks;
        // Row c of the prefix: dest folded with chunk totals 0..c; of the suffix: the totals of
        // chunks c+1.. (right-associated; the operator is associative).
        let mut pre = pool.take::<T>(c * k);
        let mut suf = pool.take::<T>(c * k);
        par_copy(&mut pre[..k], d);
        for ci in 1..c {
            let (done, rest) = pre.split_at_mut(ci * k);
            let prev = &done[(ci - 1) * k..];
            let t = &rows[(ci - 1) * k..ci * k];
            fill_with(&mut rest[..k], |b| comb(prev[b], t[b]));
        }
        par_fill(&mut suf[(c - 1) * k..], neutral);
        for ci in (0..c - 1).rev() {
            let (head, tail) = suf.split_at_mut((ci + 1) * k);
            let next = &tail[..k];
            let t = &rows[(ci + 1) * k..(ci + 2) * k];
            fill_with(&mut head[ci * k..], |b| comb(t[b], next[b]));
        }
        let mut elements = pool.take::<T>(k);
        fill_with(&mut elements, |b| (1..c).fold(rows[b], |acc, ci| comb(acc, rows[ci * k + b])));
        let mut hist = pool.take::<T>(k);
        fill_with(&mut hist, |b| comb(d[b], elements[b]));
        Ok(ChunkedHist {
            hist: self.wrap(hist, dest.shape.clone()),
            elements: self.wrap(elements, dest.shape.clone()),
            chunk_prefix: self.wrap(pre, vec![c, k]),
            chunk_suffix: self.wrap(suf, vec![c, k]),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn chunked_vals_adjoint_t<T: CpuElem, X: CpuIndexElem>(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        chunk_prefix: &CpuTensor,
        chunk_suffix: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        let (v, pre, suf, g) =
            (vals.slice::<T>()?, chunk_prefix.slice::<T>()?, chunk_suffix.slice::<T>()?, hist_bar.slice::<T>()?);
        let ix = inds.slice::<X>()?;
        let (n, k) = (v.len(), g.len());
        same_len("chunked_vals_adjoint", "indices vs values", ix.len(), n)?;
        let plan = hist::Plan::new(n, k);
        if chunk_prefix.shape != [plan.chunks, k] || chunk_suffix.shape != [plan.chunks, k] {
            return Err(OpError::Shape {
                op: "chunked_vals_adjoint",
                detail: format!(
                    "chunk carries {:?} and {:?} do not fit {} chunks of {k} bins",
                    chunk_prefix.shape, chunk_suffix.shape, plan.chunks
                ),
            });
        }
        let mut out = self.pool().take::<T>(n);
        with_fold!(op, T, f => self.chunked_adjoint(f, plan, ix, v, pre, suf, g, &mut out));
        Ok(self.wrap(out, vals.shape.clone()))
    }

    /// The general rule's value adjoint, chunk by chunk in parallel ([`hist::adjoint_chunk`]:
    /// a forward pass from the chunk's prefix row, a backward pass from its suffix row, by bin
    /// windows when k bins outgrow L2).
    #[allow(clippy::too_many_arguments)]
    fn chunked_adjoint<T: CpuElem, X: IndexElem, F: Fold<T>>(
        &self,
        f: F,
        plan: hist::Plan,
        ix: &[X],
        v: &[T],
        pre: &[T],
        suf: &[T],
        g: &[T],
        out: &mut [T],
    ) {
        let (k, pool) = (g.len(), self.pool());
        let window_bins = hist::adjoint_window_bins::<T>(k, plan.chunk_len);
        let chunk = |ci: usize, o: &mut [T]| {
            let start = ci * plan.chunk_len;
            let (ix, v) = (&ix[start..start + o.len()], &v[start..start + o.len()]);
            let (pre, suf) = (&pre[ci * k..(ci + 1) * k], &suf[ci * k..(ci + 1) * k]);
            hist::adjoint_chunk(f, pool, ix, v, pre, suf, g, o, window_bins);
        };
        if plan.chunks == 1 {
            chunk(0, out);
        } else {
            out.par_chunks_mut(plan.chunk_len).enumerate().for_each(|(ci, o)| chunk(ci, o));
        }
    }
}

/// The index dtype of optional scan segments (any, when there are none).
fn seg_dtype(segments: Option<&CpuIndex>) -> IndexDType {
    segments.map_or(IndexDType::I64, |s| s.index_dtype())
}

impl TensorOps for Cpu {
    type T = CpuTensor;
    type I = CpuIndex;

    fn engine_name(&self) -> String {
        "cpu".into()
    }
    fn carries_derivatives(&self) -> bool {
        false
    }

    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<CpuTensor> {
        let n: usize = shape.iter().product();
        same_len("tensor", "data length vs shape", data.len(), n)?;
        self.run(data.len(), || by_dtype!(dtype, self.tensor_t(data, shape)))
    }

    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<CpuTensor> {
        self.run(shape.iter().product::<usize>(), || by_dtype!(dtype, self.full_t(shape, value)))
    }

    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<CpuIndex> {
        dtype.check(data)?;
        Ok(by_index_dtype!(dtype, self.index_t(data)))
    }

    fn to_vec(&self, t: &CpuTensor) -> Result<Vec<f64>> {
        by_dtype!(t.dtype(), self.to_vec_t(t))
    }

    fn index_to_vec(&self, i: &CpuIndex) -> Result<Vec<i64>> {
        Ok(i.to_i64())
    }

    fn reshape(&self, t: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        same_len("reshape", "element count", t.numel(), shape.iter().product())?;
        // The same elements in the same order: still relative to the same bins.
        Ok(CpuTensor {
            values: t.values.clone(),
            shape: shape.to_vec(),
            peaks_at_zero_under: t.peaks_at_zero_under.clone(),
        })
    }
}

impl ElementwiseOps for Cpu {
    fn unary(&self, op: UnaryOp, x: &CpuTensor) -> Result<CpuTensor> {
        self.run(x.numel(), || by_dtype!(x.dtype(), self.unary_t(op, x)))
    }

    fn binary(&self, op: BinaryOp, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("binary", a, b)?;
        self.run(a.numel().max(b.numel()), || by_dtype!(dt, self.binary_t(op, a, b)))
    }

    /// Adds into `acc`'s buffer when nothing else holds it and the shapes match: the reverse
    /// sweep of a tiny-op workload (the LSTM's parameter and state adjoints, accumulated once
    /// per step) otherwise allocates a tensor per accumulation.
    fn accumulate(&self, mut acc: CpuTensor, c: &CpuTensor) -> Result<CpuTensor> {
        if acc.shape == c.shape
            && let Some(values) = Arc::get_mut(&mut acc.values)
        {
            let n = c.numel();
            match (values, &*c.values) {
                (Values::F32(a), Values::F32(b)) => self.run(n, || kernels::add_into(a, b)),
                (Values::F64(a), Values::F64(b)) => self.run(n, || kernels::add_into(a, b)),
                _ => return self.add(&acc, c), // a dtype mix: add's error
            }
            // New values: no longer relative inputs.
            acc.peaks_at_zero_under = None;
            return Ok(acc);
        }
        self.add(&acc, c)
    }

    /// Writes into `x`'s buffer when nothing else holds it: a replay's dying operand then
    /// costs no allocation (the LSTM's thousands of 14-element tensors) and no fresh buffer
    /// (BA's 250 KB ones).
    fn unary_donated(&self, op: UnaryOp, mut x: CpuTensor) -> Result<CpuTensor> {
        let n = x.numel();
        match Arc::get_mut(&mut x.values) {
            Some(Values::F32(b)) => self.run(n, || unary_in_place::<f32>(op, b)),
            Some(Values::F64(b)) => self.run(n, || unary_in_place::<f64>(op, b)),
            None => return self.unary(op, &x),
        }
        x.peaks_at_zero_under = None;
        Ok(x)
    }

    /// Writes into the donor's buffer when nothing else holds it and the result has its shape
    /// (the other operand may broadcast into it); the same per-operator loops as `binary`.
    fn binary_donated(
        &self,
        op: BinaryOp,
        mut donor: CpuTensor,
        other: &CpuTensor,
        donor_is_a: bool,
    ) -> Result<CpuTensor> {
        let (a, b) = if donor_is_a { (&donor, other) } else { (other, &donor) };
        let fits = crate::checks::broadcast_is(&a.shape, &b.shape, donor_is_a);
        let n = donor.numel();
        match (fits, Arc::get_mut(&mut donor.values), &*other.values) {
            (true, Some(Values::F32(d)), Values::F32(o)) => self.run(n, || binary_in_place(op, d, o, donor_is_a)),
            (true, Some(Values::F64(d)), Values::F64(o)) => self.run(n, || binary_in_place(op, d, o, donor_is_a)),
            _ if donor_is_a => return self.binary(op, &donor, other),
            _ => return self.binary(op, other, &donor),
        }
        donor.peaks_at_zero_under = None;
        Ok(donor)
    }

    fn select(&self, mask: &CpuTensor, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        same_dtype("select", mask, a)?;
        let dt = same_dtype("select", a, b)?;
        self.run(mask.numel(), || by_dtype!(dt, self.select_t(mask, a, b)))
    }

    fn index_eq(&self, i: &CpuIndex, value: i64, dtype: DType) -> Result<CpuTensor> {
        self.run(i.len(), || by_dtypes!(dtype, i.index_dtype(), self.index_eq_t(i, value)))
    }

    fn combine(&self, op: HistOp, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("combine", a, b)?;
        self.run(a.numel().max(b.numel()), || match dt {
            DType::F32 => self.zip_t::<f32>("combine", a, b, |x, y| kernels::combine(op, x, y)),
            DType::F64 => self.zip_t::<f64>("combine", a, b, |x, y| kernels::combine(op, x, y)),
        })
    }

    fn combine_partial(&self, op: HistOp, side: Operand, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("combine_partial", a, b)?;
        self.run(a.numel().max(b.numel()), || match dt {
            DType::F32 => self.zip_t::<f32>("combine_partial", a, b, |x, y| kernels::partial(op, side, x, y)),
            DType::F64 => self.zip_t::<f64>("combine_partial", a, b, |x, y| kernels::partial(op, side, x, y)),
        })
    }
}

impl ReduceOps for Cpu {
    fn reduce(&self, op: HistOp, x: &CpuTensor) -> Result<CpuTensor> {
        self.run(x.numel(), || by_dtype!(x.dtype(), self.reduce_t(op, x)))
    }
}

impl IndexOps for Cpu {
    fn gather(&self, src: &CpuTensor, idx: &CpuIndex, oob: OutOfRange) -> Result<CpuTensor> {
        self.run(idx.len().max(src.numel()), || {
            by_dtypes!(src.dtype(), idx.index_dtype(), self.gather_t(src, idx, oob))
        })
    }

    fn scatter(&self, dest: &CpuTensor, idx: &CpuIndex, vals: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("scatter", dest, vals)?;
        self.run(dest.numel().max(idx.len()), || by_dtypes!(dt, idx.index_dtype(), self.scatter_t(dest, idx, vals)))
    }

    fn sort_by_key(&self, keys: &CpuIndex, num_keys: usize) -> Result<CpuIndex> {
        let (perm, _) = by_index_dtype!(keys.index_dtype(), self.sort_t(keys, num_keys))?;
        Ok(self.wrap_index(Buf::from_vec(perm, self.pool())))
    }

    fn sort_by_key_ranked(&self, keys: &CpuIndex, num_keys: usize) -> Result<(CpuIndex, CpuIndex)> {
        let (perm, ranks) = by_index_dtype!(keys.index_dtype(), self.sort_t(keys, num_keys))?;
        Ok((self.wrap_index(Buf::from_vec(perm, self.pool())), self.wrap_index(Buf::from_vec(ranks, self.pool()))))
    }

    fn stack(&self, parts: &[CpuTensor]) -> Result<CpuTensor> {
        let shape = crate::shape::stack_shape(parts.iter().map(|p| &p.shape[..]))?;
        for p in &parts[1..] {
            same_dtype("stack", &parts[0], p)?;
        }
        by_dtype!(parts[0].dtype(), self.stack_t(parts, shape))
    }

    fn unstack(&self, x: &CpuTensor) -> Result<Vec<CpuTensor>> {
        let (n, row) = crate::shape::unstack_shape(&x.shape)?;
        by_dtype!(x.dtype(), self.unstack_t(x, n, row))
    }

    /// The result has `src`'s index dtype (its entries are `src`'s, or -1).
    fn gather_index(&self, src: &CpuIndex, idx: &CpuIndex) -> Result<CpuIndex> {
        match (src.index_dtype(), idx.index_dtype()) {
            (IndexDType::I32, IndexDType::I32) => self.gather_index_t::<i32, i32>(src, idx),
            (IndexDType::I32, IndexDType::I64) => self.gather_index_t::<i32, i64>(src, idx),
            (IndexDType::I64, IndexDType::I32) => self.gather_index_t::<i64, i32>(src, idx),
            (IndexDType::I64, IndexDType::I64) => self.gather_index_t::<i64, i64>(src, idx),
        }
    }
}

impl HistOps for Cpu {
    /// `*` with many bins per value: the general chunked rule. `*`'s own rule runs a dozen
    /// k-sized ops and gathers k-sized coefficient rows; with k >= n/16 that outweighs the n
    /// elements, and for n up to 2^20 the chunked rule was 1.2-2.6x faster (f32 and f64, k from
    /// n/16 to 30n). From n = 2e6 on the two were within 0.84-1.13x of each other, and at 10^7
    /// the own rule won at every k/n up to 0.3 (`docs/performance.md`, "The histogram rule
    /// `auto`").
    fn auto_hist_rule(&self, op: HistOp, n: usize, k: usize) -> Option<crate::HistRule> {
        use crate::sizes::{AUTO_MUL_MAX_N, AUTO_MUL_VALUES_PER_BIN};
        (op == HistOp::Mul && n <= AUTO_MUL_MAX_N && k.saturating_mul(AUTO_MUL_VALUES_PER_BIN) >= n)
            .then_some(crate::HistRule::GeneralChunked)
    }

    fn reduce_by_index(&self, dest: &CpuTensor, op: HistOp, inds: &CpuIndex, vals: &CpuTensor) -> Result<CpuTensor> {
        let dt = same_dtype("reduce_by_index", dest, vals)?;
        self.run(inds.len().max(dest.numel()), || {
            by_dtypes!(dt, inds.index_dtype(), self.reduce_by_index_t(dest, op, inds, vals))
        })
    }

    fn arg_reduce_by_index(
        &self,
        dest: &CpuTensor,
        ext: Extremum,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<(CpuTensor, CpuIndex)> {
        let dt = same_dtype("arg_reduce_by_index", dest, vals)?;
        self.run(inds.len().max(dest.numel()), || {
            by_dtypes!(dt, inds.index_dtype(), self.arg_reduce_by_index_t(dest, ext, inds, vals))
        })
    }

    fn prod_nonzero_by_index(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        k: usize,
    ) -> Result<(CpuTensor, CpuIndex, CpuIndex)> {
        self.run(inds.len().max(k), || {
            by_dtypes!(vals.dtype(), inds.index_dtype(), self.prod_nonzero_by_index_t(inds, vals, k))
        })
    }

    fn prod_vals_adjoint(
        &self,
        inds: &CpuIndex,
        vals: &CpuTensor,
        c0: &CpuTensor,
        c1: &CpuTensor,
        c2: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("prod_vals_adjoint", vals, c0)?;
        same_dtype("prod_vals_adjoint", c0, c1)?;
        let dt = same_dtype("prod_vals_adjoint", c1, c2)?;
        self.run(inds.len(), || by_dtypes!(dt, inds.index_dtype(), self.prod_vals_adjoint_t(inds, vals, c0, c1, c2)))
    }

    /// logaddexp's: `lae::hist_dual` on the inputs as they are. Its shift is the relative
    /// inputs' anchor and its weights and sums are theirs, so the bits are the composition's;
    /// `None` where a bin's maximum is +inf (the composition's relative inputs handle it).
    fn relative_reduce_by_index_dual(
        &self,
        kind: Relative,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<Option<(CpuTensor, CpuTensor)>> {
        if kind != Relative::Shift || !matches!(fold::kind(op), fold::Kind::LogAddExp) {
            return Ok(None);
        }
        same_dtype("relative_reduce_by_index_dual", dest, vals)?;
        same_dtype("relative_reduce_by_index_dual", dest, dest_dot)?;
        let dt = same_dtype("relative_reduce_by_index_dual", vals, vals_dot)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.lae_dual_t(dest, dest_dot, inds, vals, vals_dot))
        })
    }

    fn relative_inputs(
        &self,
        kind: Relative,
        dest: &CpuTensor,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<Option<(CpuTensor, CpuTensor, CpuTensor)>> {
        let dt = same_dtype("relative_inputs", dest, vals)?;
        self.run(inds.len().max(dest.numel()), || {
            by_dtypes!(dt, inds.index_dtype(), self.relative_inputs_t(kind, dest, inds, vals))
        })
        .map(Some)
    }
}

impl ScanOps for Cpu {
    fn scan(&self, op: HistOp, x: &CpuTensor, spec: ScanSpec, segments: Option<&CpuIndex>) -> Result<CpuTensor> {
        self.run(x.numel(), || by_dtypes!(x.dtype(), seg_dtype(segments), self.scan_t(op, x, spec, segments)))
    }

    fn linear_recurrence(
        &self,
        a: &CpuTensor,
        b: &CpuTensor,
        spec: ScanSpec,
        segments: Option<&CpuIndex>,
    ) -> Result<CpuTensor> {
        let dt = same_dtype("linear_recurrence", a, b)?;
        self.run(a.numel(), || by_dtypes!(dt, seg_dtype(segments), self.linear_recurrence_t(a, b, spec, segments)))
    }
}

impl DenseOps for Cpu {
    fn broadcast_to(&self, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        dense::device::broadcast_to_op(self, x, shape)
    }

    fn sum_to(&self, x: &CpuTensor, shape: &[usize]) -> Result<CpuTensor> {
        dense::device::sum_to_op(self, x, shape)
    }

    fn matmul(&self, a: &CpuTensor, ta: bool, b: &CpuTensor, tb: bool) -> Result<CpuTensor> {
        dense::device::matmul_op(self, a, ta, b, tb)
    }

    fn arg_reduce_axis(&self, ext: Extremum, x: &CpuTensor, axis: usize) -> Result<(CpuTensor, CpuIndex)> {
        dense::device::arg_reduce_axis_op(self, ext, x, axis)
    }

    fn sq_dist(&self, a: &CpuTensor, c: &CpuTensor) -> Result<CpuTensor> {
        dense::device::sq_dist_op(self, a, c)
    }

    fn sum_sq_diff(&self, a: &CpuTensor, c: &CpuTensor) -> Result<CpuTensor> {
        match crate::shape::sum_sq_diff_rows(&a.shape, &c.shape) {
            Some(plan) => dense::device::sum_sq_diff_op(self, a, c, plan),
            None => crate::rules::dense::sum_sq_diff_composed(self, a, c),
        }
    }

    fn logsumexp_axis(&self, x: &CpuTensor, axis: usize) -> Result<CpuTensor> {
        dense::device::logsumexp_axis_op(self, x, axis)
    }

    fn lstm_cell(&self, x: &CpuTensor, state: &CpuTensor, params: &CpuTensor) -> Result<CpuTensor> {
        lstm::device::lstm_cell_op(self, x, state, params)
    }
}

impl RuleKernels for Cpu {
    /// One zero-filled output and one pass adding g into it, where the histogram would run as
    /// one sequential fold (a single chunk and row: the LSTM's rows of 14 into its state): the
    /// same additions in the same order as the composed form, without its zeros tensor, its
    /// copy of them and its reshape. Larger cases run the composed form.
    fn gather_adjoint(&self, src: &CpuTensor, idx: &CpuIndex, g: &CpuTensor) -> Result<CpuTensor> {
        let (n, k) = (g.numel(), src.numel());
        if hist::Plan::new(n, k).rows() > 1 || src.dtype() != g.dtype() {
            return crate::rules::indexing::gather_adjoint_composed(self, src, idx, g);
        }
        same_len("reduce_by_index", "indices vs values", idx.len(), n)?;
        by_dtypes!(g.dtype(), idx.index_dtype(), self.gather_adjoint_t(src, idx, g))
    }

    fn sum_sq_diff_adjoint(&self, a: &CpuTensor, c: &CpuTensor, g: &CpuTensor) -> Result<CpuTensor> {
        match crate::shape::sum_sq_diff_rows(&a.shape, &c.shape) {
            Some(plan) => dense::device::sum_sq_diff_adjoint_op(self, a, c, g, plan),
            None => crate::rules::dense::sum_sq_diff_adjoint_composed(self, a, c, g),
        }
    }

    fn logsumexp_adjoint(&self, x: &CpuTensor, y: &CpuTensor, g: &CpuTensor, axis: usize) -> Result<CpuTensor> {
        dense::device::logsumexp_adjoint_op(self, x, y, g, axis)
    }

    fn lstm_cell_vjp(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        lstm::device::lstm_cell_vjp_op(self, x, state, params, g)
    }

    fn lstm_cell_jvp(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        dx: &CpuTensor,
        dstate: &CpuTensor,
        dparams: &CpuTensor,
    ) -> Result<CpuTensor> {
        lstm::device::lstm_cell_jvp_op(self, [x, state, params, dx, dstate, dparams])
    }

    fn lstm_cell_gates(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
    ) -> Result<(CpuTensor, Option<CpuTensor>)> {
        lstm::device::lstm_cell_gates_op(self, x, state, params)
    }

    fn lstm_cell_vjp_saved(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        gates: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        lstm::device::lstm_cell_vjp_saved_op(self, [x, state, params, gates, g])
    }

    fn lstm_cell_jvp_saved(
        &self,
        x: &CpuTensor,
        state: &CpuTensor,
        params: &CpuTensor,
        gates: &CpuTensor,
        dx: &CpuTensor,
        dstate: &CpuTensor,
        dparams: &CpuTensor,
    ) -> Result<CpuTensor> {
        lstm::device::lstm_cell_jvp_saved_op(self, [x, state, params, dx, dstate, dparams], gates)
    }

    fn unary_adjoint(&self, op: UnaryOp, x: &CpuTensor, y: &CpuTensor, g: &CpuTensor) -> Result<Option<CpuTensor>> {
        if op == UnaryOp::Sign {
            return Ok(None);
        }
        let dt = same_dtype("unary_adjoint", x, g)?;
        same_dtype("unary_adjoint", y, g)?;
        self.run(x.numel(), || by_dtype!(dt, self.unary_adjoint_t(op, x, y, g))).map(Some)
    }

    fn fold_adjoint(
        &self,
        op: HistOp,
        l: &CpuTensor,
        a: &CpuTensor,
        r: &CpuTensor,
        g: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("fold_adjoint", l, a)?;
        same_dtype("fold_adjoint", r, a)?;
        let dt = same_dtype("fold_adjoint", g, a)?;
        self.run(a.numel(), || by_dtype!(dt, self.fold_adjoint_t(op, l, a, r, g)))
    }

    fn total_form_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        hist: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("total_form_adjoint", vals, hist)?;
        let dt = same_dtype("total_form_adjoint", hist, hist_bar)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.total_form_adjoint_t(op, inds, vals, hist, hist_bar))
        })
    }

    fn sorted_vals_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        dest: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("sorted_vals_adjoint", vals, dest)?;
        let dt = same_dtype("sorted_vals_adjoint", dest, hist_bar)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.sorted_vals_adjoint_t(op, inds, vals, dest, hist_bar))
        })
    }

    fn reduce_by_index_dual(
        &self,
        dest: &CpuTensor,
        dest_dot: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        vals_dot: &CpuTensor,
    ) -> Result<(CpuTensor, CpuTensor)> {
        same_dtype("reduce_by_index_dual", dest, dest_dot)?;
        same_dtype("reduce_by_index_dual", vals, vals_dot)?;
        let dt = same_dtype("reduce_by_index_dual", dest, vals)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.reduce_by_index_dual_t(dest, dest_dot, op, inds, vals, vals_dot))
        })
    }

    fn reduce_by_index_chunked(
        &self,
        dest: &CpuTensor,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
    ) -> Result<ChunkedHist<CpuTensor>> {
        let dt = same_dtype("reduce_by_index_chunked", dest, vals)?;
        self.run(inds.len(), || {
            by_dtypes!(dt, inds.index_dtype(), self.reduce_by_index_chunked_t(dest, op, inds, vals))
        })
    }

    fn chunked_vals_adjoint(
        &self,
        op: HistOp,
        inds: &CpuIndex,
        vals: &CpuTensor,
        chunk_prefix: &CpuTensor,
        chunk_suffix: &CpuTensor,
        hist_bar: &CpuTensor,
    ) -> Result<CpuTensor> {
        same_dtype("chunked_vals_adjoint", vals, chunk_prefix)?;
        same_dtype("chunked_vals_adjoint", vals, chunk_suffix)?;
        let dt = same_dtype("chunked_vals_adjoint", vals, hist_bar)?;
        self.run(inds.len(), || {
            by_dtypes!(
                dt,
                inds.index_dtype(),
                self.chunked_vals_adjoint_t(op, inds, vals, chunk_prefix, chunk_suffix, hist_bar)
            )
        })
    }
}

impl Device for Cpu {
    fn device_name(&self) -> String {
        format!("cpu ({} threads)", self.inner.nthreads)
    }
    fn threads(&self) -> usize {
        self.inner.nthreads
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
