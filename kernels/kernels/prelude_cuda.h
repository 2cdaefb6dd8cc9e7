/* CUDA prelude: maps the kernel dialect's macros onto CUDA C++ (NVRTC, no includes).
 * The host prepends `#define T float|double`, `#define USE_F64 0|1` and the operator's
 * C expressions (OP_*_EXPR, OP_NEUTRAL) before this file. Launches are one-dimensional:
 * grid = ceil(global / block), so every kernel checks its index against its element count. */
#define KERNEL extern "C" __global__
#define GLOBAL
/* CUDA pointers into shared memory are generic pointers: no qualifier on pointer types. */
#define LOCAL
#define FUNC __device__ static __forceinline__
#define GID0 ((long)(blockIdx.x * (long)blockDim.x + threadIdx.x))
#define LID0 ((long)threadIdx.x)
#define GRP0 ((long)blockIdx.x)
#define LSIZE0 ((long)blockDim.x)
#define BARRIER() __syncthreads()
#define FENCE() __threadfence()

/* OpenCL passes local memory as a kernel argument; CUDA has one dynamic shared-memory block per
 * launch instead. LOCAL_ARG keeps the parameter list (and so the host's argument positions)
 * identical: on CUDA it is an unused int the launcher passes as 0, and LOCAL_BIND, the kernel
 * body's first statement, names the dynamic shared memory (sized by the launcher). */
#define LOCAL_ARG(type, name) int name##_unused_
#define LOCAL_BIND(type, name)                                                                 \
    extern __shared__ __align__(16) unsigned char adgauge_shared_[];                           \
    type *name = (type *)adgauge_shared_

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

#define AS_U32(x) __float_as_uint(x)
#define AS_F32(x) __uint_as_float(x)
#define AS_U64(x) ((u64)__double_as_longlong(x))
#define AS_F64(x) __longlong_as_double((long long)(x))

/* Atomics work on generic pointers in CUDA: the same macros serve global and shared memory. */
#define CAS32(p, o, n) atomicCAS((u32 *)(p), (o), (n))
#define CAS64(p, o, n) atomicCAS((u64 *)(p), (o), (n))
#define ATOMIC_MIN_U64(p, v) atomicMin((u64 *)(p), (u64)(v))
#define ATOMIC_MIN_I64(p, v) atomicMin((long long *)(p), (long long)(v))
#define ATOMIC_MAX_I64(p, v) atomicMax((long long *)(p), (long long)(v))
#define ATOMIC_ADD_I64(p, v) atomicAdd((u64 *)(p), (u64)(v))
#define LOCAL_CAS32(p, o, n) atomicCAS((u32 *)(p), (o), (n))
#define LOCAL_CAS64(p, o, n) atomicCAS((u64 *)(p), (o), (n))
/* OpenCL C built-ins the kernels use under their OpenCL names (the math functions exp, log,
 * log1p, fabs, fmax, hypot, pow, isnan, isinf, ... exist in CUDA with float and double
 * overloads). */
#define min(a, b) ((a) < (b) ? (a) : (b))
