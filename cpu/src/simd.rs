//! Wider vectors for the hottest dense loops, chosen at run time. The crate is compiled for
//! baseline x86-64 (SSE2: two f64 per vector) so that one binary runs on any x86-64 machine,
//! including the machines the release binaries are carried to. A kernel is written once as an
//! `#[inline(always)]` function; [`wider!`] compiles a copy of it with AVX2 and FMA enabled
//! (four f64 per vector) and [`dispatch!`] calls that copy when the running CPU has both;
//! [`widest!`] adds a copy with AVX-512 (eight f64 per vector) beside it, for the kernels that
//! measured faster with it. Only the vector width changes: Rust never contracts `a * b + c`
//! into a fused multiply-add, an explicit `mul_add` is correctly rounded in every copy (an
//! instruction in the wide ones, libm's `fma` in the baseline one), and the kernels fix their
//! order of additions, so every copy gives bit-identical results.

/// Whether the running CPU has AVX2 and FMA (std caches the answers).
#[inline]
pub fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the running CPU has the AVX-512 subsets the widest copies are compiled with
/// (F, DQ and VL).
#[inline]
pub fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x` as a slice of f64, when `T` is f64: for the kernels written for f64 alone (the
/// AVX-512 exp, the extremum, ht's tiny products), which the generic code hands its slices.
pub fn f64s<T: 'static>(x: &[T]) -> Option<&[f64]> {
    // SAFETY: `T` is `f64` (the type ids are equal), so the slice is one of f64.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f64>())
        .then(|| unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f64>(), x.len()) })
}

/// [`f64s`] for a mutable slice.
pub fn f64s_mut<T: 'static>(x: &mut [T]) -> Option<&mut [f64]> {
    // SAFETY: as in `f64s`.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f64>())
        .then(|| unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<f64>(), x.len()) })
}

/// `wider!(kernel, kernel_avx2, <T: Bound>(arg: Type, ..) -> Ret)` (the generic parameter and
/// the result optional) defines `kernel_avx2`: `kernel` inlined into a function compiled with
/// AVX2 and FMA (x86-64 only).
macro_rules! wider {
    ($base:ident, $wide:ident, $(<$t:ident: $bound:path>)?($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        fn $wide$(<$t: $bound>)?($($arg: $ty),*) $(-> $ret)? {
            $base($($arg),*)
        }
    };
}

/// `widest!(..)`, as [`wider!`], defines a `kernel_avx2` that also holds a copy compiled with
/// AVX-512 (F, DQ, VL), which it calls where the running CPU has AVX-512. For the kernels
/// measured faster with it (the vector maths, the reductions, the compiled programs' binary
/// ops); the matrix products, squared distances and LSTM cells measured slower (k-means'
/// primal at n = 10^5, four interleaved rounds, min 30.8 -> 40.8 ms) and keep AVX2.
macro_rules! widest {
    ($base:ident, $wide:ident, $(<$t:ident: $bound:path>)?($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        /// # Safety
        /// The running CPU has AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        #[allow(clippy::too_many_arguments)]
        #[inline(always)]
        unsafe fn $wide$(<$t: $bound>)?($($arg: $ty),*) $(-> $ret)? {
            $crate::simd::wider!($base, avx2, $(<$t: $bound>)?($($arg: $ty),*) $(-> $ret)?);
            #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            fn avx512$(<$t: $bound>)?($($arg: $ty),*) $(-> $ret)? {
                $base($($arg),*)
            }
            if $crate::simd::avx512() {
                // SAFETY: the running CPU has AVX-512 (and, by the caller, AVX2 and FMA).
                unsafe { avx512($($arg),*) }
            } else {
                // SAFETY: the caller's contract.
                unsafe { avx2($($arg),*) }
            }
        }
    };
}

/// `dispatch!(kernel | kernel_avx2 (args..))`: the AVX2 copy when the CPU has AVX2 and FMA,
/// else the baseline one.
macro_rules! dispatch {
    ($base:ident | $wide:ident ($($arg:expr),* $(,)?)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if $crate::simd::avx2_fma() {
                // SAFETY: the running CPU has AVX2 and FMA, the features `$wide` is compiled with.
                unsafe { $wide($($arg),*) }
            } else {
                $base($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $base($($arg),*)
        }
    }};
}

pub(crate) use {dispatch, wider, widest};
