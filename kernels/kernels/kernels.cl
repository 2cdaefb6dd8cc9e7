/* adgauge's device kernels, written once in the OpenCL C dialect and compiled for OpenCL
 * (prelude_opencl.h) and CUDA (prelude_cuda.h). The host concatenates
 *   defines (T, IDX_T, USE_F64, the operator's expressions) + prelude + atomics.h + this file
 * and builds one program per (dtype, index dtype, operator). IDX_T (int or long) is the type of
 * the indices a kernel is given (histogram bins, gather/scatter indices, sort keys, scan
 * segments), so i32 indices are read as 4 bytes; positions the device produces (permutations,
 * ranks, arg positions, zero counts) are always i64. Every kernel is one-dimensional, takes its
 * element count and returns early past it (CUDA launches round the grid up).
 *
 * Semantics follow the CPU device (backends/src/cpu): indices outside [0, k) are ignored,
 * min/max keep the left operand on ties and rank NaN beyond every number, the arg-histogram
 * gives ties to the lowest position (dest sits at -1); a histogram's NaN propagates. */

/* ---- elementwise ---- */

KERNEL void fill(GLOBAL T *out, i64 n, T v) {
    i64 i = GID0;
    if (i < n) out[i] = v;
}

KERNEL void fill_i64(GLOBAL i64 *out, i64 n, i64 v) {
    i64 i = GID0;
    if (i < n) out[i] = v;
}

/* Two branches so that exp never overflows (the unary op and the LSTM kernels). */
FUNC T sigmoid_of(T v) {
    if (v >= (T)0) return (T)1 / ((T)1 + exp(-v));
    T e = exp(v);
    return e / ((T)1 + e);
}

/* Op codes follow the order of `UnaryOp` in backends/src/ops.rs. */
KERNEL void unary(GLOBAL T *out, GLOBAL const T *x, i64 n, int op) {
    i64 i = GID0;
    if (i >= n) return;
    T v = x[i];
    T r;
    switch (op) {
    case 0: r = -v; break;
    case 1: r = exp(v); break;
    case 2: r = log(v); break;
    case 3: r = log1p(v); break;
    case 4: r = sin(v); break;
    case 5: r = cos(v); break;
    case 6: r = sqrt(v); break;
    case 7: r = tanh(v); break;
    case 8: r = sigmoid_of(v); break;
    case 9: r = fabs(v); break;
    case 10: r = v > (T)0 ? (T)1 : (v < (T)0 ? (T)-1 : (T)0); break;
    case 11: r = (T)1 / v; break;
    default: r = v * v; break;
    }
    out[i] = r;
}

/* Op codes follow `BinaryOp`. sa, sb are 1, or 0 to broadcast a one-element operand. */
KERNEL void binary(GLOBAL T *out, GLOBAL const T *a, GLOBAL const T *b, i64 n, i64 sa, i64 sb, int op) {
    i64 i = GID0;
    if (i >= n) return;
    T x = a[i * sa], y = b[i * sb];
    T r;
    switch (op) {
    case 0: r = x + y; break;
    case 1: r = x - y; break;
    case 2: r = x * y; break;
    case 3: r = x / y; break;
    case 4: r = pow(x, y); break;
    case 5: r = y < x ? y : x; break;
    case 6: r = y > x ? y : x; break;
    case 7: r = x < y ? (T)1 : (T)0; break;
    case 8: r = x <= y ? (T)1 : (T)0; break;
    case 9: r = x > y ? (T)1 : (T)0; break;
    case 10: r = x >= y ? (T)1 : (T)0; break;
    default: r = x == y ? (T)1 : (T)0; break;
    }
    out[i] = r;
}

KERNEL void select_t(GLOBAL T *out, GLOBAL const T *m, GLOBAL const T *a, GLOBAL const T *b, i64 n, i64 sa, i64 sb) {
    i64 i = GID0;
    if (i < n) out[i] = m[i] != (T)0 ? a[i * sa] : b[i * sb];
}

KERNEL void index_eq(GLOBAL T *out, GLOBAL const IDX_T *ix, i64 n, i64 value) {
    i64 i = GID0;
    if (i < n) out[i] = ix[i] == value ? (T)1 : (T)0;
}

/* The program's operator, elementwise (side: 0 combine, 1 d1, 2 d2). */
KERNEL void combine(GLOBAL T *out, GLOBAL const T *a, GLOBAL const T *b, i64 n, i64 sa, i64 sb, int side) {
    i64 i = GID0;
    if (i >= n) return;
    T x = a[i * sa], y = b[i * sb];
    out[i] = side == 0 ? op_combine(x, y) : (side == 1 ? op_d1(x, y) : op_d2(x, y));
}

/* d2(l, a) * d1(l op a, r) * g, and 0 where g == 0. */
KERNEL void fold_adjoint(GLOBAL T *out, GLOBAL const T *l, GLOBAL const T *a, GLOBAL const T *r, GLOBAL const T *g,
                         i64 n, i64 sg) {
    i64 i = GID0;
    if (i >= n) return;
    T gi = g[i * sg];
    if (gi == (T)0) {
        out[i] = (T)0;
        return;
    }
    T y = op_combine(l[i], a[i]);
    out[i] = op_chain(op_chain(op_d2(l[i], a[i]), op_d1(y, r[i])), gi);
}

/* total(vals[i], hist[b]) * hist_bar[b], 0 out of range or where the adjoint is 0. */
KERNEL void total_form_adjoint(GLOBAL T *out, GLOBAL const IDX_T *ix, GLOBAL const T *vals, GLOBAL const T *hist,
                               GLOBAL const T *g, i64 n, i64 k) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    out[i] = (b < 0 || b >= k || g[b] == (T)0) ? (T)0 : op_total(vals[i], hist[b]) * g[b];
}

/* v == 0 ? c1[b] : (v infinite ? c2[b] sign(v) : (c0[b] == 0 ? 0 : c0[b] / v)), 0 out of range. */
KERNEL void prod_vals_adjoint(GLOBAL T *out, GLOBAL const IDX_T *ix, GLOBAL const T *vals, GLOBAL const T *c0,
                              GLOBAL const T *c1, GLOBAL const T *c2, i64 n, i64 k) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b < 0 || b >= k) {
        out[i] = (T)0;
        return;
    }
    T v = vals[i];
    out[i] = v == (T)0 ? c1[b] : (isinf(v) ? (v > (T)0 ? c2[b] : -c2[b]) : (c0[b] == (T)0 ? (T)0 : c0[b] / v));
}

/* ---- reductions: each work-item folds a contiguous chunk (fixed chunk length, so results
 * do not depend on the launch), then a second launch folds the partials in order. ---- */

KERNEL void reduce_chunks(GLOBAL T *out, GLOBAL const T *x, i64 n, i64 chunk, i64 chunks) {
    i64 c = GID0;
    if (c >= chunks) return;
    i64 end = min(n, (c + 1) * chunk);
    T acc = (T)OP_NEUTRAL;
    for (i64 i = c * chunk; i < end; i++) acc = op_combine(acc, x[i]);
    out[c] = acc;
}

/* ---- indexing ---- */

/* Out-of-range indices read `fill`; with `record` they also record the first offending
 * position in *bad (unread otherwise). */
KERNEL void gather(GLOBAL T *out, GLOBAL const T *src, GLOBAL const IDX_T *ix, i64 n, i64 len, T fill,
                   GLOBAL i64 *bad, int record) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b >= 0 && b < len) {
        out[i] = src[b];
    } else {
        out[i] = fill;
        if (record) ATOMIC_MIN_I64(bad, i);
    }
}

KERNEL void gather_index(GLOBAL IDX_T *out, GLOBAL const IDX_T *src, GLOBAL const IDX_T *ix, i64 n, i64 len) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    out[i] = (b >= 0 && b < len) ? src[b] : -1;
}

/* Scatter, last write wins: the highest position per bin, then one write per bin. */
/* Index dtype conversions, for gather_index between tensors of different index dtypes. */
KERNEL void widen_index(GLOBAL i64 *out, GLOBAL const IDX_T *ix, i64 n) {
    i64 i = GID0;
    if (i < n) out[i] = ix[i];
}

/* Entries outside IDX_T become -1 (out of range for any source of fewer than 2^31 entries). */
KERNEL void narrow_index(GLOBAL IDX_T *out, GLOBAL const i64 *ix, i64 n) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    out[i] = (b >= -2147483648L && b <= 2147483647L) ? (IDX_T)b : (IDX_T)-1;
}

KERNEL void scatter_winner(GLOBAL i64 *win, GLOBAL const IDX_T *ix, i64 n, i64 k) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b >= 0 && b < k) ATOMIC_MAX_I64(&win[b], i);
}

KERNEL void scatter_apply(GLOBAL T *out, GLOBAL const T *vals, GLOBAL const i64 *win, i64 k) {
    i64 b = GID0;
    if (b < k && win[b] >= 0) out[b] = vals[win[b]];
}

/* ---- generalised histograms ---- */

/* hist starts as a copy of dest; every in-range element is combined in atomically. */
KERNEL void hist_atomic(GLOBAL T *hist, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n, i64 k) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b >= 0 && b < k) atomic_op_t(&hist[b], vals[i]);
}

/* Small k: one private sub-histogram per work-group in local memory (local atomics), merged
 * into the global histogram at the end. `sub` holds k elements: a local-memory argument on
 * OpenCL, dynamic shared memory on CUDA (see LOCAL_ARG / LOCAL_BIND in the preludes). */
KERNEL void hist_local(GLOBAL T *hist, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n, i64 k,
                       LOCAL_ARG(T, sub), i64 per_group) {
    LOCAL_BIND(T, sub);
    for (i64 b = LID0; b < k; b += LSIZE0) sub[b] = (T)OP_NEUTRAL;
    BARRIER();
    i64 start = GRP0 * per_group;
    i64 end = min(n, start + per_group);
    for (i64 i = start + LID0; i < end; i += LSIZE0) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            LOCAL T *p = &sub[b];
#if USE_F64
            u64 old_ = AS_U64(*(volatile LOCAL T *)p);
            for (;;) {
                u64 want_ = AS_U64(op_combine(AS_F64(old_), vals[i]));
                if (want_ == old_) break;
                u64 seen_ = LOCAL_CAS64(p, old_, want_);
                if (seen_ == old_) break;
                old_ = seen_;
            }
#else
            u32 old_ = AS_U32(*(volatile LOCAL T *)p);
            for (;;) {
                u32 want_ = AS_U32(op_combine(AS_F32(old_), vals[i]));
                if (want_ == old_) break;
                u32 seen_ = LOCAL_CAS32(p, old_, want_);
                if (seen_ == old_) break;
                old_ = seen_;
            }
#endif
        }
    }
    BARRIER();
    for (i64 b = LID0; b < k; b += LSIZE0) {
        T v = sub[b];
        if (AS_UT(v) != AS_UT((T)OP_NEUTRAL)) atomic_op_t(&hist[b], v);
    }
}

/* Per bin: the product of the finite non-zero values times the infinite ones' signs, the
 * number of zeros (z) and the number of infinities (m). */
KERNEL void prod_nonzero(GLOBAL T *p, GLOBAL i64 *z, GLOBAL i64 *m, GLOBAL const IDX_T *ix, GLOBAL const T *vals,
                         i64 n, i64 k) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b < 0 || b >= k) return;
    T v = vals[i];
    if (v == (T)0) {
        ATOMIC_ADD_I64(&z[b], 1);
    } else if (isinf(v)) {
        ATOMIC_ADD_I64(&m[b], 1);
        if (v < (T)0) atomic_mul_t(&p[b], (T)-1);
    } else {
        atomic_mul_t(&p[b], v);
    }
}

/* Arg-histograms rank NaN beyond every number (general::right_wins): a NaN's value key is 0,
 * below every number's, so the first NaN (dest first) wins its bin. */
#if !USE_F64
/* Arg-histogram for f32: one packed 64-bit atomic min per element. keys start at dest's key
 * (position -1). */
FUNC u64 arg_key_packed(T v, i64 pos, int is_max) {
    return isnan(v) ? (u64)(u32)(pos + 1) : pack_arg(v, pos, is_max);
}

KERNEL void arg_packed_init(GLOBAL u64 *keys, GLOBAL const T *dest, i64 k, int is_max) {
    i64 b = GID0;
    if (b < k) keys[b] = arg_key_packed(dest[b], -1, is_max);
}

KERNEL void arg_packed(GLOBAL u64 *keys, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n, i64 k, int is_max) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b < 0 || b >= k) return;
    u64 key = arg_key_packed(vals[i], i, is_max);
    if (key < keys[b]) ATOMIC_MIN_U64(&keys[b], key);
}

KERNEL void arg_packed_final(GLOBAL T *out_v, GLOBAL i64 *out_p, GLOBAL const u64 *keys, GLOBAL const T *dest,
                             GLOBAL const T *vals, i64 k) {
    i64 b = GID0;
    if (b >= k) return;
    i64 pos = (i64)(u32)(keys[b] & 0xffffffffu) - 1;
    out_p[b] = pos;
    out_v[b] = pos < 0 ? dest[b] : vals[pos];
}
#endif

/* Arg-histogram, two passes (f64, where no 128-bit atomic exists): the winning value key per
 * bin, then the lowest position holding it; dest (position -1) wins when it holds it. */
#if USE_F64
#define KEYT(v, is_max) (isnan(v) ? (u64)0 : (is_max ? ~key64(v) : key64(v)))
#else
#define KEYT(v, is_max) (isnan(v) ? (u64)0 : (u64)(is_max ? ~key32(v) : key32(v)))
#endif

KERNEL void arg_value_init(GLOBAL u64 *wv, GLOBAL i64 *pos, GLOBAL const T *dest, i64 k, int is_max) {
    i64 b = GID0;
    if (b >= k) return;
    wv[b] = KEYT(dest[b], is_max);
    pos[b] = 0x7fffffffffffffffl;
}

KERNEL void arg_value(GLOBAL u64 *wv, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n, i64 k, int is_max) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b < 0 || b >= k) return;
    u64 key = KEYT(vals[i], is_max);
    if (key < wv[b]) ATOMIC_MIN_U64(&wv[b], key);
}

KERNEL void arg_position(GLOBAL i64 *pos, GLOBAL const u64 *wv, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n,
                         i64 k, int is_max) {
    i64 i = GID0;
    if (i >= n) return;
    i64 b = ix[i];
    if (b < 0 || b >= k) return;
    if (KEYT(vals[i], is_max) == wv[b]) ATOMIC_MIN_I64(&pos[b], i);
}

KERNEL void arg_two_pass_final(GLOBAL T *out_v, GLOBAL i64 *out_p, GLOBAL const u64 *wv, GLOBAL const i64 *pos,
                               GLOBAL const T *dest, GLOBAL const T *vals, i64 k, int is_max) {
    i64 b = GID0;
    if (b >= k) return;
    T d = dest[b];
    if (KEYT(d, is_max) == wv[b]) {
        out_p[b] = -1;
        out_v[b] = d;
    } else {
        out_p[b] = pos[b];
        out_v[b] = vals[pos[b]];
    }
}

/* ---- chunked histograms (deterministic): work-item c folds the elements of chunk c, in
 * order, into its own row of k accumulators; rows are merged per bin in chunk order. ---- */

KERNEL void chunk_rows(GLOBAL T *rows, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n, i64 k, i64 chunk,
                       i64 chunks) {
    i64 c = GID0;
    if (c >= chunks) return;
    GLOBAL T *row = rows + c * k;
    for (i64 b = 0; b < k; b++) row[b] = (T)OP_NEUTRAL;
    i64 end = min(n, (c + 1) * chunk);
    for (i64 i = c * chunk; i < end; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) row[b] = op_combine(row[b], vals[i]);
    }
}

/* Per bin: prefix rows (dest folded with the totals of the earlier chunks), suffix rows (the
 * totals of the later chunks), the fold of the elements alone, and dest op elements. */
KERNEL void chunk_carries(GLOBAL T *pre, GLOBAL T *suf, GLOBAL T *elements, GLOBAL T *hist, GLOBAL const T *dest,
                          GLOBAL const T *rows, i64 k, i64 chunks) {
    i64 b = GID0;
    if (b >= k) return;
    T acc = dest[b];
    for (i64 c = 0; c < chunks; c++) {
        pre[c * k + b] = acc;
        acc = op_combine(acc, rows[c * k + b]);
    }
    T s = (T)OP_NEUTRAL;
    for (i64 c = chunks - 1; c >= 0; c--) {
        suf[c * k + b] = s;
        s = op_combine(rows[c * k + b], s);
    }
    T e = rows[b];
    for (i64 c = 1; c < chunks; c++) e = op_combine(e, rows[c * k + b]);
    elements[b] = e;
    hist[b] = op_combine(dest[b], e);
}

/* The chunked rule's value adjoint: work-item c re-runs its chunk's running array forwards
 * from its prefix row (l, and y1 = l op a) and backwards from its suffix row (r). `run` is
 * scratch of chunks * k, `y1` scratch of n. */
KERNEL void chunked_adjoint(GLOBAL T *out, GLOBAL T *y1, GLOBAL T *run, GLOBAL const IDX_T *ix, GLOBAL const T *vals,
                            GLOBAL const T *pre, GLOBAL const T *suf, GLOBAL const T *g, i64 n, i64 k, i64 chunk,
                            i64 chunks) {
    i64 c = GID0;
    if (c >= chunks) return;
    GLOBAL T *row = run + c * k;
    i64 start = c * chunk, end = min(n, (c + 1) * chunk);
    for (i64 b = 0; b < k; b++) row[b] = pre[c * k + b];
    for (i64 i = start; i < end; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            T l = row[b], a = vals[i];
            T y = op_combine(l, a);
            row[b] = y;
            y1[i] = y;
            out[i] = op_d2(l, a);
        } else {
            out[i] = (T)0;
        }
    }
    for (i64 b = 0; b < k; b++) row[b] = suf[c * k + b];
    for (i64 i = end - 1; i >= start; i--) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            T r = row[b];
            row[b] = op_combine(vals[i], r);
            T gb = g[b];
            out[i] = gb == (T)0 ? (T)0 : op_chain(op_chain(out[i], op_d1(y1[i], r)), gb);
        }
    }
}

/* ---- the chunked kernels with a work-group per chunk (same chunks, same results up to the
 * association of each chunk's fold): the chunk splits into LSIZE0 contiguous slices, one per
 * work-item, and each work-item folds its slice into its own row of k in local memory
 * (part[lid * k + b]). chunk_rows_group then merges the rows in slice order by a tree whose
 * steps spread (pair, bin) over the whole group; chunked_adjoint_group turns the rows into each
 * slice's carries (an exclusive scan across the slices per bin, seeded with the chunk's prefix
 * row forwards and its suffix row backwards) and re-runs every slice from its carries. A chunk
 * takes O(chunk / LSIZE0 + k log LSIZE0) steps (O(chunk / LSIZE0 + LSIZE0) per bin for the
 * adjoint) instead of O(chunk). The host sizes LSIZE0 from the device's work-group limit and
 * local memory (LSIZE0 * k elements) and runs the one-work-item kernels where it does not fit. */

KERNEL void chunk_rows_group(GLOBAL T *rows, GLOBAL const IDX_T *ix, GLOBAL const T *vals, i64 n, i64 k, i64 chunk,
                             LOCAL_ARG(T, part)) {
    LOCAL_BIND(T, part);
    i64 c = GRP0, lid = LID0, size = LSIZE0;
    i64 end = min(n, (c + 1) * chunk);
    i64 slice = (chunk + size - 1) / size;
    i64 s0 = min(end, c * chunk + lid * slice), s1 = min(end, s0 + slice);
    LOCAL T *row = part + lid * k;
    for (i64 b = 0; b < k; b++) row[b] = (T)OP_NEUTRAL;
    for (i64 i = s0; i < s1; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) row[b] = op_combine(row[b], vals[i]);
    }
    BARRIER();
    for (i64 w = 1; w < size; w *= 2) {
        i64 pairs = (size - w + 2 * w - 1) / (2 * w); /* left rows j * 2w with a right row j * 2w + w */
        for (i64 t = lid; t < pairs * k; t += size) {
            i64 left = (t / k) * 2 * w, b = t % k;
            part[left * k + b] = op_combine(part[left * k + b], part[(left + w) * k + b]);
        }
        BARRIER();
    }
    for (i64 b = lid; b < k; b += size) rows[c * k + b] = part[b];
}

KERNEL void chunked_adjoint_group(GLOBAL T *out, GLOBAL T *y1, GLOBAL const IDX_T *ix, GLOBAL const T *vals,
                                  GLOBAL const T *pre, GLOBAL const T *suf, GLOBAL const T *g, i64 n, i64 k,
                                  i64 chunk, LOCAL_ARG(T, part)) {
    LOCAL_BIND(T, part);
    i64 c = GRP0, lid = LID0, size = LSIZE0;
    i64 end = min(n, (c + 1) * chunk);
    i64 slice = (chunk + size - 1) / size;
    i64 s0 = min(end, c * chunk + lid * slice), s1 = min(end, s0 + slice);
    LOCAL T *row = part + lid * k;
    /* Forwards: the slices' totals, their exclusive scan from the prefix row, then each slice's
     * running array from its carry gives l and l op a. */
    for (i64 b = 0; b < k; b++) row[b] = (T)OP_NEUTRAL;
    for (i64 i = s0; i < s1; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) row[b] = op_combine(row[b], vals[i]);
    }
    BARRIER();
    for (i64 b = lid; b < k; b += size) {
        T acc = pre[c * k + b];
        for (i64 j = 0; j < size; j++) {
            T t = part[j * k + b];
            part[j * k + b] = acc;
            acc = op_combine(acc, t);
        }
    }
    BARRIER();
    for (i64 i = s0; i < s1; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            T l = row[b], a = vals[i];
            T y = op_combine(l, a);
            row[b] = y;
            y1[i] = y;
            out[i] = op_d2(l, a);
        } else {
            out[i] = (T)0;
        }
    }
    BARRIER();
    /* Backwards: the same from the suffix row, folding each element in front of what follows. */
    for (i64 b = 0; b < k; b++) row[b] = (T)OP_NEUTRAL;
    for (i64 i = s1 - 1; i >= s0; i--) {
        i64 b = ix[i];
        if (b >= 0 && b < k) row[b] = op_combine(vals[i], row[b]);
    }
    BARRIER();
    for (i64 b = lid; b < k; b += size) {
        T acc = suf[c * k + b];
        for (i64 j = size - 1; j >= 0; j--) {
            T t = part[j * k + b];
            part[j * k + b] = acc;
            acc = op_combine(t, acc);
        }
    }
    BARRIER();
    for (i64 i = s1 - 1; i >= s0; i--) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            T r = row[b];
            row[b] = op_combine(vals[i], r);
            T gb = g[b];
            out[i] = gb == (T)0 ? (T)0 : op_chain(op_chain(out[i], op_d1(y1[i], r)), gb);
        }
    }
}

/* The histogram of dual numbers under the lifted operator
 * (a, da) op (b, db) = (a op b, d1(a, b) da + d2(a, b) db), chunked like chunk_rows. */
KERNEL void dual_rows(GLOBAL T *rows, GLOBAL T *rows_dot, GLOBAL const IDX_T *ix, GLOBAL const T *vals,
                      GLOBAL const T *vals_dot, i64 n, i64 k, i64 chunk, i64 chunks) {
    i64 c = GID0;
    if (c >= chunks) return;
    GLOBAL T *row = rows + c * k;
    GLOBAL T *rowd = rows_dot + c * k;
    for (i64 b = 0; b < k; b++) {
        row[b] = (T)OP_NEUTRAL;
        rowd[b] = (T)0;
    }
    i64 end = min(n, (c + 1) * chunk);
    for (i64 i = c * chunk; i < end; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            T a = row[b], x = vals[i];
            rowd[b] = op_chain(op_d1(a, x), rowd[b]) + op_chain(op_d2(a, x), vals_dot[i]);
            row[b] = op_combine(a, x);
        }
    }
}

/* dual_rows with a work-group per chunk, like chunk_rows_group: values in part[0, LSIZE0 * k),
 * tangents in part[LSIZE0 * k, 2 * LSIZE0 * k); the tree merges dual rows under the lifted
 * operator. */
KERNEL void dual_rows_group(GLOBAL T *rows, GLOBAL T *rows_dot, GLOBAL const IDX_T *ix, GLOBAL const T *vals,
                            GLOBAL const T *vals_dot, i64 n, i64 k, i64 chunk, LOCAL_ARG(T, part)) {
    LOCAL_BIND(T, part);
    i64 c = GRP0, lid = LID0, size = LSIZE0;
    i64 end = min(n, (c + 1) * chunk);
    i64 slice = (chunk + size - 1) / size;
    i64 s0 = min(end, c * chunk + lid * slice), s1 = min(end, s0 + slice);
    LOCAL T *dot = part + size * k;
    LOCAL T *row = part + lid * k;
    LOCAL T *rowd = dot + lid * k;
    for (i64 b = 0; b < k; b++) {
        row[b] = (T)OP_NEUTRAL;
        rowd[b] = (T)0;
    }
    for (i64 i = s0; i < s1; i++) {
        i64 b = ix[i];
        if (b >= 0 && b < k) {
            T a = row[b], x = vals[i];
            rowd[b] = op_chain(op_d1(a, x), rowd[b]) + op_chain(op_d2(a, x), vals_dot[i]);
            row[b] = op_combine(a, x);
        }
    }
    BARRIER();
    for (i64 w = 1; w < size; w *= 2) {
        i64 pairs = (size - w + 2 * w - 1) / (2 * w);
        for (i64 t = lid; t < pairs * k; t += size) {
            i64 l = (t / k) * 2 * w * k + t % k, r = l + w * k;
            T a = part[l], x = part[r];
            dot[l] = op_chain(op_d1(a, x), dot[l]) + op_chain(op_d2(a, x), dot[r]);
            part[l] = op_combine(a, x);
        }
        BARRIER();
    }
    for (i64 b = lid; b < k; b += size) {
        rows[c * k + b] = part[b];
        rows_dot[c * k + b] = dot[b];
    }
}

KERNEL void dual_merge(GLOBAL T *hist, GLOBAL T *hist_dot, GLOBAL const T *dest, GLOBAL const T *dest_dot,
                       GLOBAL const T *rows, GLOBAL const T *rows_dot, i64 k, i64 chunks) {
    i64 b = GID0;
    if (b >= k) return;
    T t = rows[b], td = rows_dot[b];
    for (i64 c = 1; c < chunks; c++) {
        T x = rows[c * k + b], xd = rows_dot[c * k + b];
        td = op_chain(op_d1(t, x), td) + op_chain(op_d2(t, x), xd);
        t = op_combine(t, x);
    }
    T d = dest[b];
    hist_dot[b] = op_chain(op_d1(d, t), dest_dot[b]) + op_chain(op_d2(d, t), td);
    hist[b] = op_combine(d, t);
}

/* ---- stable sort by key: LSD radix sort over the bucket of each key (the key itself when it is
 * in [0, num_keys), num_keys for any other key, compared as unsigned like the CPU device), a few
 * bits per pass. Work-item c owns the fixed chunk c of the current permutation and handles it
 * sequentially: counting its digits, then scattering its elements in order to its own slots.
 * Chunk boundaries depend on n only, so every pass is stable and the result deterministic. The
 * counts table is chunk-major (counts[c * radix + d]) so a work-item's row is contiguous. ---- */

FUNC u64 sort_bucket(i64 key, u64 num_keys) { return (u64)key < num_keys ? (u64)key : num_keys; }

/* `first`: the input permutation is the identity (perm is not read), which saves an iota pass. */
KERNEL void radix_counts(GLOBAL i64 *counts, GLOBAL const IDX_T *keys, GLOBAL const i64 *perm, i64 n, i64 num_keys,
                         i64 chunk, i64 chunks, int shift, i64 radix, int first) {
    i64 c = GID0;
    if (c >= chunks) return;
    GLOBAL i64 *row = counts + c * radix;
    for (i64 d = 0; d < radix; d++) row[d] = 0;
    i64 end = min(n, (c + 1) * chunk);
    for (i64 i = c * chunk; i < end; i++) {
        i64 p = first ? i : perm[i];
        row[(sort_bucket(keys[p], (u64)num_keys) >> shift) & (u64)(radix - 1)] += 1;
    }
}

/* The exclusive prefix of the counts in (digit, chunk) order (each chunk's first slot per digit),
 * in three steps that keep every loop short: per digit the total over the chunks, their
 * prefix (one work-item, at most 2^11 digits), then per digit the prefix down its column. */
KERNEL void radix_totals(GLOBAL i64 *totals, GLOBAL const i64 *counts, i64 chunks, i64 radix) {
    i64 d = GID0;
    if (d >= radix) return;
    i64 sum = 0;
    for (i64 c = 0; c < chunks; c++) sum += counts[c * radix + d];
    totals[d] = sum;
}

KERNEL void radix_totals_scan(GLOBAL i64 *totals, i64 radix) {
    if (GID0 != 0) return;
    i64 next = 0;
    for (i64 d = 0; d < radix; d++) {
        i64 here = totals[d];
        totals[d] = next;
        next += here;
    }
}

KERNEL void radix_offsets(GLOBAL i64 *counts, GLOBAL const i64 *totals, i64 chunks, i64 radix) {
    i64 d = GID0;
    if (d >= radix) return;
    i64 next = totals[d];
    for (i64 c = 0; c < chunks; c++) {
        i64 here = counts[c * radix + d];
        counts[c * radix + d] = next;
        next += here;
    }
}

/* `ranks_out` (written on the last pass when `want_ranks`, else unread): where each element lands,
 * the inverse permutation, for free where the slot is known. */
KERNEL void radix_scatter(GLOBAL i64 *perm_out, GLOBAL i64 *ranks_out, GLOBAL i64 *counts, GLOBAL const IDX_T *keys,
                          GLOBAL const i64 *perm, i64 n, i64 num_keys, i64 chunk, i64 chunks, int shift, i64 radix,
                          int first, int want_ranks) {
    i64 c = GID0;
    if (c >= chunks) return;
    GLOBAL i64 *slots = counts + c * radix;
    i64 end = min(n, (c + 1) * chunk);
    for (i64 i = c * chunk; i < end; i++) {
        i64 p = first ? i : perm[i];
        i64 d = (i64)((sort_bucket(keys[p], (u64)num_keys) >> shift) & (u64)(radix - 1));
        i64 slot = slots[d];
        perm_out[slot] = p;
        if (want_ranks) ranks_out[p] = slot;
        slots[d] = slot + 1;
    }
}

/* ---- scans (see backends/src/cpu/scan.rs, which these mirror): fixed chunks of the sweep,
 * (1) every chunk sweeps on its own as if a segment started at its first position, recording
 * its end state and its head (positions, in sweep order, before its first real segment start);
 * (2) one work-item turns these into the carry entering each chunk; (3) every head position is
 * combined with its chunk's carry. Chunk boundaries depend on n only: results are deterministic.
 * Segments are maximal runs of equal keys; without keys (has_keys 0, keys unread) there is one. */

FUNC int scan_starts(GLOBAL const IDX_T *keys, int has_keys, i64 j, i64 n, int reverse) {
    if (reverse) return j + 1 == n || (has_keys && keys[j] != keys[j + 1]);
    return j == 0 || (has_keys && keys[j] != keys[j - 1]);
}

KERNEL void scan_chunks(GLOBAL T *out, GLOBAL T *ends, GLOBAL i64 *heads, GLOBAL const T *x, GLOBAL const IDX_T *keys,
                        i64 n, i64 chunk, i64 chunks, int has_keys, int exclusive, int reverse) {
    i64 c = GID0;
    if (c >= chunks) return;
    i64 base = c * chunk;
    i64 len = min(n, base + chunk) - base;
    T acc = (T)OP_NEUTRAL;
    i64 head = len;
    for (i64 t = 0; t < len; t++) {
        i64 j = reverse ? base + len - 1 - t : base + t;
        if (scan_starts(keys, has_keys, j, n, reverse)) {
            if (head == len) head = t;
            acc = (T)OP_NEUTRAL;
        }
        if (exclusive) {
            out[j] = acc;
            acc = op_combine(acc, x[j]);
        } else {
            acc = op_combine(acc, x[j]);
            out[j] = acc;
        }
    }
    ends[c] = acc;
    heads[c] = head;
}

/* A chunk with a real segment start passes on its own end state; one without extends the
 * incoming carry. */
KERNEL void scan_carries(GLOBAL T *carries, GLOBAL const T *ends, GLOBAL const i64 *heads, i64 n, i64 chunk,
                         i64 chunks, int reverse) {
    if (GID0 != 0) return;
    T carry = (T)OP_NEUTRAL;
    for (i64 s = 0; s < chunks; s++) {
        i64 c = reverse ? chunks - 1 - s : s;
        carries[c] = carry;
        i64 len = min(n, (c + 1) * chunk) - c * chunk;
        carry = heads[c] < len ? ends[c] : op_combine(carry, ends[c]);
    }
}

/* One work-item per element: only head positions change. */
KERNEL void scan_fixup(GLOBAL T *out, GLOBAL const T *carries, GLOBAL const i64 *heads, i64 n, i64 chunk,
                       int reverse) {
    i64 j = GID0;
    if (j >= n) return;
    i64 c = j / chunk;
    i64 base = c * chunk;
    i64 t = reverse ? min(n, base + chunk) - 1 - j : j - base;
    if (t < heads[c]) out[j] = op_combine(carries[c], out[j]);
}

/* The linear recurrence y[j] = a[j] + b[j] * y[prev] from 0 at each segment start: the scan of
 * affine maps, in the same three phases as the scan (the CPU device's order of operations, so
 * both round alike). A zero multiplier cuts the dependence: no 0 * inf = NaN from an unrelated
 * state. */
FUNC T linrec_step(T y, T a, T b) {
    return b == (T)0 ? a : a + b * y;
}

FUNC T linrec_apply(T part, T product, T carry) {
    return product == (T)0 ? part : part + product * carry;
}

/* Phase 1: each chunk from 0 as if a segment started at its first position; its end state,
 * its head (positions before its first real segment start) and the product of the multipliers
 * over the head. */
KERNEL void linrec_chunks(GLOBAL T *out, GLOBAL T *ends, GLOBAL T *prods, GLOBAL i64 *heads, GLOBAL const T *a,
                          GLOBAL const T *b, GLOBAL const IDX_T *keys, i64 n, i64 chunk, i64 chunks, int has_keys,
                          int exclusive, int reverse) {
    i64 c = GID0;
    if (c >= chunks) return;
    i64 base = c * chunk;
    i64 len = min(n, base + chunk) - base;
    T y = (T)0;
    T prod = (T)1;
    i64 head = len;
    for (i64 t = 0; t < len; t++) {
        i64 j = reverse ? base + len - 1 - t : base + t;
        int starts = scan_starts(keys, has_keys, j, n, reverse);
        if (head == len) {
            if (starts) {
                head = t;
                y = (T)0;
            } else {
                prod = prod * b[j];
            }
        } else if (starts) {
            y = (T)0;
        }
        if (exclusive) {
            out[j] = y;
            y = linrec_step(y, a[j], b[j]);
        } else {
            y = linrec_step(y, a[j], b[j]);
            out[j] = y;
        }
    }
    ends[c] = y;
    prods[c] = prod;
    heads[c] = head;
}

/* Phase 2 (one work-item): the state entering each chunk. */
KERNEL void linrec_carries(GLOBAL T *carries, GLOBAL const T *ends, GLOBAL const T *prods, GLOBAL const i64 *heads,
                           i64 n, i64 chunk, i64 chunks, int reverse) {
    if (GID0 != 0) return;
    T carry = (T)0;
    for (i64 s = 0; s < chunks; s++) {
        i64 c = reverse ? chunks - 1 - s : s;
        carries[c] = carry;
        i64 len = min(n, (c + 1) * chunk) - c * chunk;
        carry = heads[c] < len ? ends[c] : linrec_apply(ends[c], prods[c], carry);
    }
}

/* Phase 3, one work-item per chunk: the head positions take the carry in through the running
 * product of their multipliers. */
KERNEL void linrec_fixup(GLOBAL T *out, GLOBAL const T *carries, GLOBAL const i64 *heads, GLOBAL const T *b, i64 n,
                         i64 chunk, i64 chunks, int exclusive, int reverse) {
    i64 c = GID0;
    if (c >= chunks) return;
    i64 base = c * chunk;
    i64 len = min(n, base + chunk) - base;
    T product = (T)1;
    T carry = carries[c];
    for (i64 t = 0; t < heads[c]; t++) {
        i64 j = reverse ? base + len - 1 - t : base + t;
        if (!exclusive) product = product * b[j];
        out[j] = linrec_apply(out[j], product, carry);
        if (exclusive) product = product * b[j];
    }
}

/* out[out_off + i] = x[x_off + i] for i < n: one part of a stack, or one row of an unstack. */
KERNEL void copy_range(GLOBAL T *out, i64 out_off, GLOBAL const T *x, i64 x_off, i64 n) {
    i64 i = GID0;
    if (i < n) out[out_off + i] = x[x_off + i];
}

/* ---- ADBench's diagonal LSTM cell (formulas in backends/src/rules/lstm.rs; backends/src/cpu/
 * lstm.rs performs the same operations in the same order). One work-item per lane j < b; the
 * state is [h; c] and the parameters [w_f, w_i, w_o, w_c, b_f, b_i, b_o, b_c], rows of b. ---- */

/* Lane j's gates f, i, o, z, new cell c' and tanh(c'), in g[0..6]. */
FUNC void lstm_lane(T *g, GLOBAL const T *x, GLOBAL const T *s, GLOBAL const T *p, i64 b, i64 j) {
    T xj = x[j], h = s[j];
    g[0] = sigmoid_of(xj * p[j] + p[4 * b + j]);
    g[1] = sigmoid_of(h * p[b + j] + p[5 * b + j]);
    g[2] = sigmoid_of(xj * p[2 * b + j] + p[6 * b + j]);
    g[3] = tanh(h * p[3 * b + j] + p[7 * b + j]);
    g[4] = s[b + j] * g[0] + g[1] * g[3];
    g[5] = tanh(g[4]);
}

KERNEL void lstm_cell(GLOBAL T *out, GLOBAL const T *x, GLOBAL const T *s, GLOBAL const T *p, i64 b) {
    i64 j = GID0;
    if (j >= b) return;
    T g[6];
    lstm_lane(g, x, s, p, b, j);
    out[j] = g[2] * g[5];
    out[b + j] = g[4];
}

KERNEL void lstm_cell_vjp(GLOBAL T *gx, GLOBAL T *gs, GLOBAL T *gp, GLOBAL const T *x, GLOBAL const T *s,
                          GLOBAL const T *p, GLOBAL const T *ga, i64 b) {
    i64 j = GID0;
    if (j >= b) return;
    T g[6];
    lstm_lane(g, x, s, p, b, j);
    T xj = x[j], h = s[j], c = s[b + j], gh = ga[j], gc = ga[b + j];
    T cbar = gc + (gh * g[2]) * ((T)1 - g[5] * g[5]);
    T af = (cbar * c) * (g[0] * ((T)1 - g[0]));
    T ai = (cbar * g[3]) * (g[1] * ((T)1 - g[1]));
    T ao = (gh * g[5]) * (g[2] * ((T)1 - g[2]));
    T ac = (cbar * g[1]) * ((T)1 - g[3] * g[3]);
    gx[j] = af * p[j] + ao * p[2 * b + j];
    gs[j] = ai * p[b + j] + ac * p[3 * b + j];
    gs[b + j] = cbar * g[0];
    gp[j] = af * xj;
    gp[b + j] = ai * h;
    gp[2 * b + j] = ao * xj;
    gp[3 * b + j] = ac * h;
    gp[4 * b + j] = af;
    gp[5 * b + j] = ai;
    gp[6 * b + j] = ao;
    gp[7 * b + j] = ac;
}

KERNEL void lstm_cell_jvp(GLOBAL T *out, GLOBAL const T *x, GLOBAL const T *s, GLOBAL const T *p,
                          GLOBAL const T *dx, GLOBAL const T *ds, GLOBAL const T *dp, i64 b) {
    i64 j = GID0;
    if (j >= b) return;
    T g[6];
    lstm_lane(g, x, s, p, b, j);
    T xj = x[j], h = s[j], c = s[b + j], dxj = dx[j], dh = ds[j], dc = ds[b + j];
    T df = ((dxj * p[j] + xj * dp[j]) + dp[4 * b + j]) * (g[0] * ((T)1 - g[0]));
    T di = ((dh * p[b + j] + h * dp[b + j]) + dp[5 * b + j]) * (g[1] * ((T)1 - g[1]));
    T dO = ((dxj * p[2 * b + j] + xj * dp[2 * b + j]) + dp[6 * b + j]) * (g[2] * ((T)1 - g[2]));
    T dz = ((dh * p[3 * b + j] + h * dp[3 * b + j]) + dp[7 * b + j]) * ((T)1 - g[3] * g[3]);
    T dcn = (dc * g[0] + c * df) + (di * g[3] + g[1] * dz);
    T dt = dcn * ((T)1 - g[5] * g[5]);
    out[j] = dO * g[5] + g[2] * dt;
    out[b + j] = dcn;
}

/* ---- dense ops (backends/src/cpu/dense.rs is the reference). Broadcasts and sums down to a
 * broadcast shape work on an (O, R, Q) view: O outer kept positions, R broadcast (summed)
 * positions, Q inner kept positions; the host splits other layouts into such views, one
 * broadcast run at a time. ---- */

/* out (O x R x Q) = x (O x Q) repeated along R; n = O R Q. */
KERNEL void broadcast_orq(GLOBAL T *out, GLOBAL const T *x, i64 n, i64 r, i64 q) {
    i64 i = GID0;
    if (i >= n) return;
    i64 row = i / q;
    out[i] = x[(row / r) * q + (i - row * q)];
}

/* Per (a, block, c) the sum over b in the block, b ascending: out is O x blocks x Q. Long sums
 * with few outputs are cut into fixed blocks (from the shape only) for parallelism; a second
 * launch over the partials (R = blocks, one block) adds them in block order. */
KERNEL void sum_orq(GLOBAL T *out, GLOBAL const T *x, i64 o, i64 r, i64 q, i64 rb, i64 blocks) {
    i64 i = GID0;
    if (i >= o * blocks * q) return;
    i64 c = i % q;
    i64 t = i / q;
    i64 blk = t % blocks, a = t / blocks;
    i64 b1 = min(r, (blk + 1) * rb);
    GLOBAL const T *p = x + a * r * q + c;
    T acc = (T)0;
    for (i64 b = blk * rb; b < b1; b++) acc += p[b * q];
    out[i] = acc;
}

/* Per (a, block, c) the minimum (is_max 0) or maximum over b in the block and its position:
 * the flat index into x, or with has_pos the entry of `in_pos` there (the second launch, over
 * the blocks' winners). Ties go to the lowest b; NaN never wins, but a NaN in first place
 * yields to the first non-NaN (as on the CPU), so an all-NaN line reports its first position. */
KERNEL void arg_axis(GLOBAL T *vals, GLOBAL i64 *pos, GLOBAL const T *x, GLOBAL const i64 *in_pos, i64 o, i64 r,
                     i64 q, i64 rb, i64 blocks, int is_max, int has_pos) {
    i64 i = GID0;
    if (i >= o * blocks * q) return;
    i64 c = i % q;
    i64 t = i / q;
    i64 blk = t % blocks, a = t / blocks;
    i64 b0 = blk * rb, b1 = min(r, (blk + 1) * rb);
    i64 j = (a * r + b0) * q + c;
    T v = x[j];
    i64 p = has_pos ? in_pos[j] : j;
    for (i64 b = b0 + 1; b < b1; b++) {
        j += q;
        T y = x[j];
        int better = (is_max ? y > v : y < v) || (isnan(v) && !isnan(y));
        if (better) {
            v = y;
            p = has_pos ? in_pos[j] : j;
        }
    }
    vals[i] = v;
    pos[i] = p;
}

/* out[batch] = op(a) op(b), m x n from m x k and k x n, in ts x ts tiles staged in local
 * memory (`tiles`: 2 ts^2 elements): one work-group of ts^2 work-items per output tile. With
 * `splits` > 1 the inner dimension is cut into chunks of kc, group s of them writing its partial
 * product to out + s * batches * m * n (summed by the host's next launch): a small output with
 * a long inner dimension (the adjoints of a product with many rows) would otherwise occupy only
 * a few work-groups. Groups are numbered split-major, then batch, tile row, tile column. Each
 * chunk is summed in ascending order and zero entries of op(a) contribute nothing, as on the
 * CPU (0 * inf never enters a sum). a_stride / b_stride are the batch strides (0 for an operand
 * shared by every batch). */
KERNEL void matmul_tiled(GLOBAL T *out, GLOBAL const T *a, GLOBAL const T *b, i64 m, i64 k, i64 n, i64 a_stride,
                         i64 b_stride, int ta, int tb, i64 batches, i64 tiles_n, i64 tiles_per_batch, i64 kc, i64 ts,
                         LOCAL_ARG(T, tiles)) {
    LOCAL_BIND(T, tiles);
    LOCAL T *as = tiles;
    LOCAL T *bs = tiles + ts * ts;
    i64 g = GRP0;
    i64 per_split = batches * tiles_per_batch;
    i64 s = g / per_split;
    g -= s * per_split;
    i64 bi = g / tiles_per_batch;
    i64 rem = g - bi * tiles_per_batch;
    i64 r0 = (rem / tiles_n) * ts, c0 = (rem % tiles_n) * ts;
    i64 lid = LID0;
    i64 li = lid / ts, lj = lid % ts;
    GLOBAL const T *ab = a + bi * a_stride;
    GLOBAL const T *bb = b + bi * b_stride;
    i64 kb = s * kc, ke = min(k, kb + kc);
    T acc = (T)0;
    for (i64 l0 = kb; l0 < ke; l0 += ts) {
        /* Consecutive work-items read consecutive addresses: for a transposed operand the tile
         * is read along its stored rows and written transposed into local memory. */
        if (ta) {
            i64 row = r0 + lj, col = l0 + li;
            as[lj * ts + li] = (row < m && col < ke) ? ab[col * m + row] : (T)0;
        } else {
            i64 row = r0 + li, col = l0 + lj;
            as[li * ts + lj] = (row < m && col < ke) ? ab[row * k + col] : (T)0;
        }
        if (tb) {
            i64 row = l0 + lj, col = c0 + li;
            bs[lj * ts + li] = (row < ke && col < n) ? bb[col * k + row] : (T)0;
        } else {
            i64 row = l0 + li, col = c0 + lj;
            bs[li * ts + lj] = (row < ke && col < n) ? bb[row * n + col] : (T)0;
        }
        BARRIER();
        i64 lend = min(ts, ke - l0);
        /* A select, not a branch, so that work-items stay in step (PoCL vectorises across
         * them); adding +0 leaves the sum unchanged, which starts at +0 and cannot become -0. */
        for (i64 l = 0; l < lend; l++) {
            T x = as[li * ts + l];
            T p = x * bs[l * ts + lj];
            acc += x != (T)0 ? p : (T)0;
        }
        BARRIER();
    }
    i64 row = r0 + li, col = c0 + lj;
    if (row < m && col < n) out[((s * batches + bi) * m + row) * n + col] = acc;
}
