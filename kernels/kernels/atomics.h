/* Atomics shared by both dialects, one signature per operation (global memory).
 * T is float or double; UT the unsigned integer of the same width. Float add/mul and general
 * operators run a compare-exchange loop around the operator's C expression; min/max are CAS
 * loops too (a combine that does not change the bits skips the exchange). */
#if USE_F64
typedef u64 UT;
#define AS_UT(x) AS_U64(x)
#define AS_T(x) AS_F64(x)
#define CAS_T(p, o, n) CAS64(p, o, n)
#else
typedef u32 UT;
#define AS_UT(x) AS_U32(x)
#define AS_T(x) AS_F32(x)
#define CAS_T(p, o, n) CAS32(p, o, n)
#endif

/* min/max's winner (general::right_wins): b beats a, the left operand of a fold, when it is
 * NaN and a is not, or smaller (larger); NaN ranks beyond every number, ties keep a. */
#define RIGHT_WINS_MIN(a, b) ((a) == (a) && !((b) >= (a)))
#define RIGHT_WINS_MAX(a, b) ((a) == (a) && !((b) <= (a)))

/* The operator (injected by the host as expressions over a, b and a, t). */
FUNC T op_combine(T a, T b) { return OP_COMBINE_EXPR; }
FUNC T op_d1(T a, T b) { return OP_D1_EXPR; }
FUNC T op_d2(T a, T b) { return OP_D2_EXPR; }
/* The product of two chain-rule factors (partials, tangents, adjoints): plain, except for `*`
 * (OP_CHAIN_ABSORBS), whose zero factors absorb an infinite one (0 x inf = 0; a NaN factor
 * stays NaN), as the CPU's Fold::chain. */
FUNC T op_chain(T p, T q) {
    T x = p * q;
    return OP_CHAIN_ABSORBS && isnan(x) && !isnan(p) && !isnan(q) ? (T)0 : x;
}
FUNC T op_total(T a, T t) { return OP_TOTAL_EXPR; }

/* *p = EXPR(cur, v) atomically, where cur is the current value. */
#define CAS_LOOP(p, v, EXPR)                                                                   \
    do {                                                                                       \
        UT old_ = *(volatile GLOBAL UT *)(p);                                                  \
        for (;;) {                                                                             \
            T cur = AS_T(old_);                                                                \
            T nv_ = EXPR(cur, v);                                                              \
            UT want_ = AS_UT(nv_);                                                             \
            if (want_ == old_) break;                                                          \
            UT seen_ = CAS_T((GLOBAL UT *)(p), old_, want_);                                   \
            if (seen_ == old_) break;                                                          \
            old_ = seen_;                                                                      \
        }                                                                                      \
    } while (0)

#define ADD_EXPR_(a, b) ((a) + (b))
#define MUL_EXPR_(a, b) ((a) * (b))

FUNC void atomic_add_t(GLOBAL T *p, T v) { CAS_LOOP(p, v, ADD_EXPR_); }
FUNC void atomic_mul_t(GLOBAL T *p, T v) { CAS_LOOP(p, v, MUL_EXPR_); }
/* The general operator (the program's OP_COMBINE_EXPR). */
FUNC void atomic_op_t(GLOBAL T *p, T v) { CAS_LOOP(p, v, op_combine); }

/* Monotone maps from floats to unsigned integers: a < b (as floats, -0 == 0) iff
 * key(a) < key(b). Callers map NaN themselves (the arg-histograms rank it first). */
FUNC u32 key32(float v) {
    if (v == 0.0f) v = 0.0f;
    u32 u = AS_U32(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
#if USE_F64
FUNC u64 key64(double v) {
    if (v == 0.0) v = 0.0;
    u64 u = AS_U64(v);
    return (u & 0x8000000000000000ul) ? ~u : (u | 0x8000000000000000ul);
}
#endif

/* Packed arg-min (max inverts the value key): the value key in the high 32 bits, position + 1
 * in the low 32 bits, so dest's position -1 packs lowest and wins ties; one 64-bit atomic min
 * picks the lowest value, then the lowest position. */
FUNC u64 pack_arg(float v, i64 pos, int is_max) {
    u32 k = key32(v);
    if (is_max) k = ~k;
    return ((u64)k << 32) | (u64)(u32)(pos + 1);
}
