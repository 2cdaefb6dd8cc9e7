/* OpenCL prelude: maps the kernel dialect's macros onto OpenCL C 1.2.
 * The host prepends `#define T float|double`, `#define USE_F64 0|1` and the operator's
 * C expressions (OP_*_EXPR, OP_NEUTRAL) before this file. */
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable
#if USE_F64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define KERNEL __kernel
#define GLOBAL __global
#define LOCAL __local
#define FUNC static inline
#define GID0 ((long)get_global_id(0))
#define LID0 ((long)get_local_id(0))
#define GRP0 ((long)get_group_id(0))
#define LSIZE0 ((long)get_local_size(0))
/* A local-memory buffer parameter (its size is set by the host per launch); LOCAL_BIND is
 * for CUDA, where the buffer is dynamic shared memory instead. */
#define LOCAL_ARG(type, name) LOCAL type *name
#define LOCAL_BIND(type, name) (void)0
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)

typedef ulong u64;
typedef uint u32;
typedef long i64;

#define AS_U32(x) as_uint(x)
#define AS_F32(x) as_float(x)
#define AS_U64(x) as_ulong(x)
#define AS_F64(x) as_double(x)

/* Atomics on global memory (32- and 64-bit compare-exchange, 64-bit integer min/max/add). */
#define CAS32(p, o, n) atomic_cmpxchg((volatile GLOBAL u32 *)(p), (o), (n))
#define CAS64(p, o, n) atom_cmpxchg((volatile GLOBAL u64 *)(p), (o), (n))
#define ATOMIC_MIN_U64(p, v) atom_min((volatile GLOBAL u64 *)(p), (v))
#define ATOMIC_MIN_I64(p, v) atom_min((volatile GLOBAL i64 *)(p), (v))
#define ATOMIC_MAX_I64(p, v) atom_max((volatile GLOBAL i64 *)(p), (v))
#define ATOMIC_ADD_I64(p, v) atom_add((volatile GLOBAL i64 *)(p), (v))
#define LOCAL_CAS32(p, o, n) atomic_cmpxchg((volatile LOCAL u32 *)(p), (o), (n))
#define LOCAL_CAS64(p, o, n) atom_cmpxchg((volatile LOCAL u64 *)(p), (o), (n))
