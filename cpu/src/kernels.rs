//! Elementwise, reduction and indexing kernels of the CPU device, generic over the element type.
//!
//! Work is split into fixed-size blocks (independent of the thread count, so results never
//! depend on it) and run on rayon below `PAR_MIN` elements sequentially.

use rayon::prelude::*;

use crate::{BinaryOp, Elem, HistOp, Operand, UnaryOp, general};

/// Below this many elements a kernel runs sequentially: spawning costs more than it saves.
/// Measured here (2 cores): at 2^15, BA ba2's ops (36455 observations, just above it) ran in
/// parallel and took 2.3x as long as sequentially (primal 6.6 -> 2.9 ms at 2^16), and 2^14 made
/// ba1 (31843) 2x slower; GMM, LSTM and k-means did not move.
pub const PAR_MIN: usize = 1 << 16;
/// Below this much work a loop whose steps are cheaper than an elementwise op's element (a
/// multiply-add of a register-tiled matrix product, an instruction of a fused staged loop) runs
/// on the calling thread. At `PAR_MIN` such loops took ~50 us and were handed to the pool: GMM
/// d10's objective (a 1000 x 10 x 50 product) took 0.155 or 0.22 ms from run to run, by whether
/// the pool's workers were awake, and its tangent loops (a few instructions over 50k elements)
/// ran 1.8x slower staged.
pub const PAR_MIN_WORK: usize = 8 * PAR_MIN;
/// Block length of parallel elementwise loops.
pub const BLOCK: usize = 1 << 14;

/// `out[i] = f(i)` for every i, in parallel blocks.
#[inline]
pub fn fill_with<T: Send, F: Fn(usize) -> T + Sync>(out: &mut [T], f: F) {
    if out.len() < PAR_MIN {
        fill_block(out, 0, &f);
    } else {
        out.par_chunks_mut(BLOCK).enumerate().for_each(|(c, block)| fill_block(block, c * BLOCK, &f));
    }
}

/// `block[j] = f(base + j)`. Never inlined, for its signature: `block` is a `&mut` parameter,
/// so the compiler knows its stores alias nothing that `f` reads, and keeps `f`'s slices in
/// registers (inlined into the chunk closure, the loop reloaded them after every store: `*`'s
/// adjoint gather ran at about half speed).
#[inline(never)]
fn fill_block<T, F: Fn(usize) -> T>(block: &mut [T], base: usize, f: &F) {
    for (j, o) in block.iter_mut().enumerate() {
        *o = f(base + j);
    }
}

/// `out[i] = f(i, out[i])`, in the blocks of [`fill_with`].
pub fn update_with<T: Copy + Send, F: Fn(usize, T) -> T + Sync>(out: &mut [T], f: F) {
    if out.len() < PAR_MIN {
        update_block(out, 0, &f);
    } else {
        out.par_chunks_mut(BLOCK).enumerate().for_each(|(c, block)| update_block(block, c * BLOCK, &f));
    }
}

/// `block[j] = f(base + j, block[j])`; never inlined, as [`fill_block`].
#[inline(never)]
fn update_block<T: Copy, F: Fn(usize, T) -> T>(block: &mut [T], base: usize, f: &F) {
    for (j, o) in block.iter_mut().enumerate() {
        *o = f(base + j, *o);
    }
}

/// `acc[i] = acc[i] + c[i]` over equal lengths, in the blocks of [`fill_with`].
pub fn add_into<T: Elem + Send + Sync>(acc: &mut [T], c: &[T]) {
    debug_assert_eq!(acc.len(), c.len());
    let add = |a: &mut [T], c: &[T]| a.iter_mut().zip(c).for_each(|(a, &c)| *a = *a + c);
    if acc.len() < PAR_MIN {
        add(acc, c);
    } else {
        acc.par_chunks_mut(BLOCK).zip(c.par_chunks(BLOCK)).for_each(|(a, c)| add(a, c));
    }
}

/// Expands to a `match` on a [`UnaryOp`] with one arm per operator, each running `$body` with
/// `$op` bound to that operator as a constant: a loop in an arm inlines one function (and
/// vectorises where that function can) instead of matching on the operator per element.
macro_rules! per_unary_op {
    ($u:expr, |$op:ident| $body:expr) => {
        match $u {
            UnaryOp::Neg => {
                let $op = UnaryOp::Neg;
                $body
            }
            UnaryOp::Exp => {
                let $op = UnaryOp::Exp;
                $body
            }
            UnaryOp::Log => {
                let $op = UnaryOp::Log;
                $body
            }
            UnaryOp::Log1p => {
                let $op = UnaryOp::Log1p;
                $body
            }
            UnaryOp::Sin => {
                let $op = UnaryOp::Sin;
                $body
            }
            UnaryOp::Cos => {
                let $op = UnaryOp::Cos;
                $body
            }
            UnaryOp::Sqrt => {
                let $op = UnaryOp::Sqrt;
                $body
            }
            UnaryOp::Tanh => {
                let $op = UnaryOp::Tanh;
                $body
            }
            UnaryOp::Sigmoid => {
                let $op = UnaryOp::Sigmoid;
                $body
            }
            UnaryOp::Abs => {
                let $op = UnaryOp::Abs;
                $body
            }
            UnaryOp::Sign => {
                let $op = UnaryOp::Sign;
                $body
            }
            UnaryOp::Recip => {
                let $op = UnaryOp::Recip;
                $body
            }
            UnaryOp::Square => {
                let $op = UnaryOp::Square;
                $body
            }
        }
    };
}

/// `out[i] = unary(op, x[i])`: vmath's vector loop where it has one, else one loop per operator
/// ([`per_unary_op`]).
pub fn unary_map<T: Elem>(op: UnaryOp, xs: &[T], out: &mut [T]) {
    // vmath's vector loop where it has one: the same functions as `unary`, so every path that
    // maps an operator (eager, in place, staged) gets the same bits and the vector loop. Under
    // a vector's worth of elements (particle's 2-vectors) choosing a copy of the loop costs more
    // than the elements.
    if super::vmath::vectorised(op) && xs.len() >= 8 {
        return super::vmath::map_unary(op, xs, out);
    }
    per_unary_op!(op, |u| out.iter_mut().zip(xs).for_each(|(o, &x)| *o = unary(u, x)))
}

/// `out[i] = unary_adjoint(op, x[i], y[i], g[i])`, one loop per operator ([`per_unary_op`]).
pub fn unary_adjoint_map<T: Elem>(op: UnaryOp, xs: &[T], ys: &[T], gs: &[T], out: &mut [T]) {
    per_unary_op!(op, |u| out
        .iter_mut()
        .zip(xs.iter().zip(ys).zip(gs))
        .for_each(|(o, ((&x, &y), &g))| *o = unary_adjoint(u, x, y, g)))
}

/// Sets every element to `value`, in parallel blocks.
pub fn par_fill<T: Copy + Send + Sync>(out: &mut [T], value: T) {
    if out.len() < PAR_MIN {
        out.fill(value);
    } else {
        out.par_chunks_mut(BLOCK).for_each(|b| b.fill(value));
    }
}

/// Copies `src` into `out`, in parallel blocks.
pub fn par_copy<T: Copy + Send + Sync>(out: &mut [T], src: &[T]) {
    if out.len() < PAR_MIN {
        out.copy_from_slice(src);
    } else {
        out.par_chunks_mut(BLOCK).zip(src.par_chunks(BLOCK)).for_each(|(o, s)| o.copy_from_slice(s));
    }
}

/// A raw pointer that parallel tasks share to write disjoint elements of one buffer (scatters
/// by a permutation, whose targets never collide).
#[derive(Clone, Copy)]
pub struct SyncPtr<T>(*mut T);

// SAFETY: the pointer is only used for writes to disjoint elements (see `write`).
unsafe impl<T: Send> Send for SyncPtr<T> {}
unsafe impl<T: Send> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    pub fn new(s: &mut [T]) -> SyncPtr<T> {
        SyncPtr(s.as_mut_ptr())
    }

    /// The elements `[start, start + len)`, to read.
    ///
    /// # Safety
    /// They must be in bounds of the slice the pointer came from, that slice must outlive the
    /// borrow, and no task may write them meanwhile.
    #[inline(always)]
    pub unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a [T] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(self.0.add(start), len) }
    }

    /// The elements `[start, start + len)`, to write.
    ///
    /// # Safety
    /// As [`SyncPtr::slice`], and no other borrow of them may exist meanwhile.
    #[inline(always)]
    pub unsafe fn slice_mut<'a>(self, start: usize, len: usize) -> &'a mut [T] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }

    /// Writes `x` at `i`.
    ///
    /// # Safety
    /// `i` must be in bounds of the slice the pointer came from, that slice must outlive every
    /// use, and no other task may access element `i` concurrently.
    #[inline(always)]
    pub unsafe fn write(self, i: usize, x: T) {
        // SAFETY: guaranteed by the caller.
        unsafe { *self.0.add(i) = x }
    }
}

#[inline]
/// `g * op'(x)` for y = op(x), with the operations in the order of
/// [`crate::composed::elementwise::unary_vjp_composed`] so that both round alike. `sign` has no
/// adjoint (the caller returns None).
pub fn unary_adjoint<T: Elem>(op: UnaryOp, x: T, y: T, g: T) -> T {
    let one = T::one();
    match op {
        UnaryOp::Neg => -g,
        UnaryOp::Exp => g * y,
        UnaryOp::Log => g / x,
        UnaryOp::Log1p => g / (x + one),
        // vmath's sin and cos, the functions of `unary` (module docs of `crate::vmath`): the
        // composed adjoint multiplies by the device's own cos, and the two must round alike.
        UnaryOp::Sin => g * super::vmath::cos(x),
        UnaryOp::Cos => -(g * super::vmath::sin(x)),
        UnaryOp::Sqrt => (g * T::of_f64(0.5)) / y,
        UnaryOp::Tanh => g * (one - y * y),
        UnaryOp::Sigmoid => g * (y * (one - y)),
        UnaryOp::Abs => g * unary(UnaryOp::Sign, x),
        UnaryOp::Sign => T::zero(),
        UnaryOp::Recip => -(g * (y * y)),
        UnaryOp::Square => (g * T::of_f64(2.0)) * x,
    }
}

pub fn unary<T: Elem>(op: UnaryOp, x: T) -> T {
    let one = T::one();
    match op {
        UnaryOp::Neg => -x,
        // exp, ln, tanh, sigmoid, sin and cos are vmath's branch-free versions (their loops
        // vectorise; `vmath::map_unary` runs them over the eager device's slices).
        UnaryOp::Exp => super::vmath::exp(x),
        UnaryOp::Log => super::vmath::ln(x),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Sin => super::vmath::sin(x),
        UnaryOp::Cos => super::vmath::cos(x),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => super::vmath::tanh(x),
        UnaryOp::Sigmoid => super::vmath::sigmoid(x),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sign => {
            if x > T::zero() {
                one
            } else if x < T::zero() {
                -one
            } else {
                T::zero()
            }
        }
        UnaryOp::Recip => one / x,
        UnaryOp::Square => x * x,
    }
}

#[inline]
fn truth<T: Elem>(b: bool) -> T {
    if b { T::one() } else { T::zero() }
}

#[inline]
pub fn binary<T: Elem>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        // The left operand wins ties, matching the asymmetric partials of min and max.
        BinaryOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
        BinaryOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
        BinaryOp::Lt => truth(a < b),
        BinaryOp::Le => truth(a <= b),
        BinaryOp::Gt => truth(a > b),
        BinaryOp::Ge => truth(a >= b),
        BinaryOp::Eq => truth(a == b),
    }
}

/// The histogram operator on elements.
#[inline]
pub fn combine<T: Elem>(op: HistOp, a: T, b: T) -> T {
    match op {
        HistOp::Add => a + b,
        HistOp::Mul => crate::general::mul_absorbing(a, b),
        HistOp::Min => crate::general::min_combine(a, b),
        HistOp::Max => crate::general::max_combine(a, b),
        HistOp::General(g) => (g.fns::<T>().combine)(a, b),
    }
}

/// `out[i] = combine(op, a[i], b[i])`, the operator chosen once: matched per element, it stayed
/// a jump table inside the loop.
pub fn combine_into<T: Elem>(op: HistOp, a: &[T], b: &[T], out: &mut [T]) {
    match op {
        HistOp::Add => fill_with(out, |i| a[i] + b[i]),
        HistOp::Mul => fill_with(out, |i| general::mul_absorbing(a[i], b[i])),
        HistOp::Min => fill_with(out, |i| general::min_combine(a[i], b[i])),
        HistOp::Max => fill_with(out, |i| general::max_combine(a[i], b[i])),
        HistOp::General(g) => {
            let f = g.fns::<T>().combine;
            fill_with(out, |i| f(a[i], b[i]))
        }
    }
}

/// The partial of `a op b` with respect to one operand (asymmetric for min/max: the left
/// operand wins ties).
#[inline]
pub fn partial<T: Elem>(op: HistOp, side: Operand, a: T, b: T) -> T {
    match (op, side) {
        (HistOp::Add, _) => T::one(),
        (HistOp::Mul, Operand::Left) => general::mul_d1(a, b),
        (HistOp::Mul, Operand::Right) => general::mul_d2(a, b),
        (HistOp::Min, Operand::Left) => general::min_d1(a, b),
        (HistOp::Min, Operand::Right) => general::min_d2(a, b),
        (HistOp::Max, Operand::Left) => general::max_d1(a, b),
        (HistOp::Max, Operand::Right) => general::max_d2(a, b),
        (HistOp::General(g), Operand::Left) => (g.fns::<T>().d1)(a, b),
        (HistOp::General(g), Operand::Right) => (g.fns::<T>().d2)(a, b),
    }
}

/// Reduces a slice with `op` over fixed blocks (deterministic for any thread count): below
/// [`PAR_MIN`] elements one [`fold_lanes`] of the whole slice, else one per [`BLOCK`] (in
/// parallel), their results folded in order.
pub fn reduce<T: Elem>(op: HistOp, x: &[T]) -> T {
    if x.len() < PAR_MIN {
        return fold_lanes(op, x);
    }
    let partials: Vec<T> = x.par_chunks(BLOCK).map(|s| fold_lanes(op, s)).collect();
    let neutral = T::of_f64(op.neutral());
    partials.iter().fold(neutral, |acc, &v| combine(op, acc, v))
}

/// Independent accumulators of [`fold_lanes`]: two AVX2 vectors of f64, so that the adds
/// overlap instead of waiting on one another (a single running sum is one add's latency per
/// element: the two passes of lse's primal were 55% of it).
pub const REDUCE_LANES: usize = 8;

/// `x` folded by `op`. `+`: element i goes to accumulator `i mod REDUCE_LANES` while whole groups of
/// [`REDUCE_LANES`] last, the accumulators are summed as a balanced tree ((0+1)+(2+3))+((4+5)+(6+7)),
/// then the rest are added in order: a fixed order for a given length, so every CPU path that
/// calls this gets the same bits. min/max: the same lanes, which give the left fold's own
/// result whenever the extremum is a nonzero number (values equal by `==` are then equal bit
/// for bit, so which of them wins does not show); where it is ±0 or NaN, whose equals differ
/// in their bits, the block is folded again from the left so that the earliest winner is the
/// one kept. `*` and general operators fold from the left.
pub fn fold_lanes<T: Elem>(op: HistOp, x: &[T]) -> T {
    // Every copy gives the same bits; for a handful of elements (particle's 2-vectors, a
    // compiled program's scalar reductions) choosing one costs more than the fold.
    if x.len() <= SHORT_FOLD {
        return fold_lanes_base(op, x);
    }
    if let (HistOp::Min | HistOp::Max, Some(r)) = (op, extremum_f64(op, x)) {
        return r;
    }
    crate::simd::dispatch!(fold_lanes_base | fold_lanes_avx2(op, x))
}

/// [`fold_lanes`]'s min or max of f64 in explicit vectors, where the running CPU has them.
///
/// Why not the generic lanes: the compiler vectorised that loop into full-width vectors in
/// one build and into 128-bit ones with shuffles in another, from the same source (lse's
/// primal moved by 0.15 ms, 14%). Any grouping gives the same result here: the lanes' result
/// is used only where it is a nonzero number, which is then the true extremum whatever the
/// order (every NaN propagates to it, and a ±0 makes the caller fold again from the left), so
/// these take 32 lanes (four independent vectors) rather than 8.
fn extremum_f64<T: Elem>(op: HistOp, x: &[T]) -> Option<T> {
    #[cfg(target_arch = "x86_64")]
    {
        let xs = crate::simd::f64s(x)?;
        let r = if crate::simd::avx512() {
            // SAFETY: the running CPU has AVX-512 F.
            unsafe { extremum_avx512(xs, op) }
        } else if crate::simd::avx2_fma() {
            // SAFETY: the running CPU has AVX2.
            unsafe { extremum_avx2(xs, op) }
        } else {
            return None;
        };
        let r = if r == 0.0 || r.is_nan() { xs.iter().fold(op.neutral(), |acc, &v| combine(op, acc, v)) } else { r };
        Some(T::of_f64(r))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (op, x);
        None
    }
}

/// Number of f64 lanes [`extremum_avx512`] and [`extremum_avx2`] fold into.
#[cfg(target_arch = "x86_64")]
const EXTREMUM_LANES: usize = 32;

/// The lanes joined, then the rest of `x` past its whole groups, by `op`'s own combine.
#[cfg(target_arch = "x86_64")]
fn extremum_finish(op: HistOp, lanes: &[f64; EXTREMUM_LANES], rest: &[f64]) -> f64 {
    lanes.iter().chain(rest).fold(op.neutral(), |acc, &v| combine(op, acc, v))
}

/// # Safety
/// The running CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn extremum_avx512(x: &[f64], op: HistOp) -> f64 {
    use std::arch::x86_64::*;
    let max = op == HistOp::Max;
    let mut acc = [_mm512_set1_pd(op.neutral()); 4];
    let mut groups = x.chunks_exact(EXTREMUM_LANES);
    for g in &mut groups {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: a group holds 4 x 8 elements.
            let v = unsafe { _mm512_loadu_pd(g.as_ptr().add(8 * k)) };
            // `a` is a number, and `v` is not at least as good as it (NaN compares unordered).
            let number = _mm512_cmp_pd_mask::<_CMP_ORD_Q>(*a, *a);
            let better =
                if max { _mm512_cmp_pd_mask::<_CMP_NLE_UQ>(v, *a) } else { _mm512_cmp_pd_mask::<_CMP_NGE_UQ>(v, *a) };
            *a = _mm512_mask_mov_pd(*a, number & better, v);
        }
    }
    let mut lanes = [0.0; EXTREMUM_LANES];
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds 4 x 8 elements.
        unsafe { _mm512_storeu_pd(lanes.as_mut_ptr().add(8 * k), *a) };
    }
    extremum_finish(op, &lanes, groups.remainder())
}

/// # Safety
/// The running CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn extremum_avx2(x: &[f64], op: HistOp) -> f64 {
    use std::arch::x86_64::*;
    let max = op == HistOp::Max;
    let mut acc = [_mm256_set1_pd(op.neutral()); 8];
    let mut groups = x.chunks_exact(EXTREMUM_LANES);
    for g in &mut groups {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: a group holds 8 x 4 elements.
            let v = unsafe { _mm256_loadu_pd(g.as_ptr().add(4 * k)) };
            let number = _mm256_cmp_pd::<_CMP_ORD_Q>(*a, *a);
            let better = if max { _mm256_cmp_pd::<_CMP_NLE_UQ>(v, *a) } else { _mm256_cmp_pd::<_CMP_NGE_UQ>(v, *a) };
            *a = _mm256_blendv_pd(*a, v, _mm256_and_pd(number, better));
        }
    }
    let mut lanes = [0.0; EXTREMUM_LANES];
    for (k, a) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds 8 x 4 elements.
        unsafe { _mm256_storeu_pd(lanes.as_mut_ptr().add(4 * k), *a) };
    }
    extremum_finish(op, &lanes, groups.remainder())
}

/// Folds of at most this many elements take [`fold_lanes`]'s baseline copy directly.
pub const SHORT_FOLD: usize = 16;

crate::simd::widest!(fold_lanes_base, fold_lanes_avx2, <T: Elem>(op: HistOp, x: &[T]) -> T);

#[inline(always)]
fn fold_lanes_base<T: Elem>(op: HistOp, x: &[T]) -> T {
    let neutral = T::of_f64(op.neutral());
    let left_fold = |s: &[T]| s.iter().fold(neutral, |acc, &v| combine(op, acc, v));
    let lanes = |f: fn(T, T) -> T| {
        let mut acc = [neutral; REDUCE_LANES];
        let mut groups = x.chunks_exact(REDUCE_LANES);
        for g in &mut groups {
            for j in 0..REDUCE_LANES {
                acc[j] = f(acc[j], g[j]);
            }
        }
        let pairs = [f(acc[0], acc[1]), f(acc[2], acc[3]), f(acc[4], acc[5]), f(acc[6], acc[7])];
        let total = f(f(pairs[0], pairs[1]), f(pairs[2], pairs[3]));
        groups.remainder().iter().fold(total, |acc, &v| f(acc, v))
    };
    match op {
        HistOp::Add => {
            let mut sum = SumLanes::default();
            sum.add(x);
            sum.total()
        }
        HistOp::Min | HistOp::Max => {
            let r = lanes(if op == HistOp::Min { general::min_combine } else { general::max_combine });
            if r == T::zero() || r.is_nan() { left_fold(x) } else { r }
        }
        HistOp::Mul | HistOp::General(_) => left_fold(x),
    }
}

/// The sum in [`fold_lanes`]'s order (its `+` is one block of this), fed a block at a time:
/// a fused loop adds each block of a value while the block is in L1, without storing the
/// value. Every block but the last must be a whole number of [`REDUCE_LANES`] groups, as the
/// groups are counted from the start; [`SumLanes::total`] is then `fold_lanes(HistOp::Add,
/// ..)` of the blocks joined, bit for bit.
#[derive(Clone, Copy, Debug)]
pub struct SumLanes<T = f64> {
    acc: [T; REDUCE_LANES],
    rest: [T; REDUCE_LANES],
    rest_len: usize,
}

impl<T: Elem> Default for SumLanes<T> {
    fn default() -> Self {
        SumLanes { acc: [T::zero(); REDUCE_LANES], rest: [T::zero(); REDUCE_LANES], rest_len: 0 }
    }
}

impl<T: Elem> SumLanes<T> {
    /// Adds the next block.
    #[inline(always)]
    pub fn add(&mut self, x: &[T]) {
        debug_assert_eq!(self.rest_len, 0, "only the last block may end inside a group");
        let mut groups = x.chunks_exact(REDUCE_LANES);
        // The lanes in a local: through `self` the compiler stored every lane after every add
        // (a scalar add and store per element, an eighth of lse's primal).
        let mut acc = self.acc;
        for g in &mut groups {
            for (a, &v) in acc.iter_mut().zip(g) {
                *a = *a + v;
            }
        }
        self.acc = acc;
        let rest = groups.remainder();
        self.rest[..rest.len()].copy_from_slice(rest);
        self.rest_len = rest.len();
    }

    /// The sum of every block added.
    #[inline(always)]
    pub fn total(&self) -> T {
        let a = &self.acc;
        let tree = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        self.rest[..self.rest_len].iter().fold(tree, |s, &v| s + v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigmoid_does_not_overflow_at_either_end() {
        assert_eq!(unary(UnaryOp::Sigmoid, -1000.0f32), 0.0);
        assert_eq!(unary(UnaryOp::Sigmoid, 1000.0f32), 1.0);
        assert!((unary(UnaryOp::Sigmoid, 0.0f64) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn min_and_max_keep_the_left_operand_on_ties() {
        let l = binary(BinaryOp::Min, 0.0f64, -0.0);
        assert!(l.is_sign_positive());
        let r = binary(BinaryOp::Max, -0.0f64, 0.0);
        assert!(r.is_sign_negative());
    }

    /// Fed block by block (whole groups, then a last block that ends inside one), the lanes
    /// give fold_lanes's sum of the whole, at lengths either side of a group.
    #[test]
    fn sums_fed_by_blocks_equal_fold_lanes_bit_for_bit() {
        let x: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.731).sin() * 10f64.powi(i % 9 - 4)).collect();
        for (len, block) in [(0, 8), (5, 8), (8, 8), (43, 16), (256 * 3 + 5, 256), (1000, 256), (1000, 8)] {
            let mut lanes = SumLanes::default();
            for b in x[..len].chunks(block) {
                lanes.add(b);
            }
            assert_eq!(lanes.total().to_bits(), fold_lanes(HistOp::Add, &x[..len]).to_bits(), "length {len}");
        }
    }

    /// The lanes' order written out for a length of 8k + 3: accumulator j sums elements j,
    /// j + 8, ... of the groups, the tree of the eight, then the three left over.
    #[test]
    fn sums_follow_the_documented_lane_order() {
        let x: Vec<f64> =
            (0..8 * 5 + 3).map(|i| 1.0 / (i as f64 + 0.37) * if i % 3 == 0 { -1e3 } else { 1.0 }).collect();
        let mut acc = [0.0f64; 8];
        for g in 0..5 {
            for j in 0..8 {
                acc[j] += x[8 * g + j];
            }
        }
        let tree = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        let want = ((tree + x[40]) + x[41]) + x[42];
        assert_eq!(fold_lanes(HistOp::Add, &x).to_bits(), want.to_bits());
        // Shorter than one group: a left fold from 0.
        assert_eq!(fold_lanes(HistOp::Add, &x[..5]).to_bits(), x[..5].iter().fold(0.0, |s, &v| s + v).to_bits());
        assert_eq!(fold_lanes(HistOp::Add, &[] as &[f64]), 0.0);
    }

    /// min and max by lanes are the left fold's result bit for bit, on data full of the
    /// values whose equals differ in their bits: ±0 and NaNs of different payloads.
    #[test]
    fn lane_extrema_equal_the_left_fold_bit_for_bit() {
        let nan_a = f64::from_bits(0x7ff8_0000_0000_0001);
        let nan_b = f64::from_bits(0xfff8_0000_0000_0002);
        let pool = [0.0, -0.0, 1.5, -1.5, 2.0, -7.0, f64::INFINITY, f64::NEG_INFINITY, nan_a, nan_b, 1e-310];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut cases = 0;
        for len in [0usize, 1, 3, 7, 8, 9, 16, 17, 31, 32, 33, 64, 100, 131] {
            for kinds in [2usize, 4, 6, 8, 11] {
                for _ in 0..40 {
                    let x: Vec<f64> = (0..len)
                        .map(|_| {
                            state =
                                state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                            pool[(state >> 33) as usize % kinds]
                        })
                        .collect();
                    for op in [HistOp::Min, HistOp::Max] {
                        let left = x.iter().fold(op.neutral(), |a, &v| combine(op, a, v));
                        assert_eq!(fold_lanes(op, &x).to_bits(), left.to_bits(), "{op:?} of {x:?}");
                        assert_eq!(fold_lanes_base(op, &x).to_bits(), left.to_bits(), "{op:?} of {x:?}");
                        // Each vector copy, where this CPU has it, whichever `fold_lanes` takes.
                        #[cfg(target_arch = "x86_64")]
                        for (has, copy) in [
                            (crate::simd::avx512(), extremum_avx512 as unsafe fn(&[f64], HistOp) -> f64),
                            (crate::simd::avx2_fma(), extremum_avx2),
                        ] {
                            if has {
                                // SAFETY: the running CPU has the copy's features.
                                let r = unsafe { copy(&x, op) };
                                if r != 0.0 && !r.is_nan() {
                                    assert_eq!(r.to_bits(), left.to_bits(), "{op:?} of {x:?}");
                                } else {
                                    assert!(left == 0.0 || left.is_nan(), "{op:?} of {x:?}: {r} for {left}");
                                }
                            }
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 14 * 5 * 40 * 2);
    }

    #[test]
    fn blocked_reduction_is_independent_of_the_thread_count() {
        let x: Vec<f32> = (0..200_000).map(|i| ((i * 7919) % 1000) as f32 * 1e-3).collect();
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let a = one.install(|| reduce(HistOp::Add, &x));
        let b = three.install(|| reduce(HistOp::Add, &x));
        assert_eq!(a.to_bits(), b.to_bits());
        let exact: f64 = x.iter().map(|&v| v as f64).sum();
        assert!((a as f64 - exact).abs() / exact < 1e-5);
    }
}
