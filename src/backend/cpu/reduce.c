/* CPU kernels of the reduce family: Reduce*, ArgMax/ArgMin, MeanVarianceNormalization, and the table. */
#include <stdlib.h>

#include "backend/cpu/reduce_internal.h"
#include "graph/shape/reduce_params.h"

/* ---------------------------------------------------------------------------------------------------
 * Reduction plan. Input dims are grouped (size-1 dims dropped, neighbours with the same reduced/kept
 * status merged); a trailing kept group becomes `inner`, contiguous in memory. Output element
 * (o, i) folds input elements base[o] + roff[r] + i over r < red.
 * ------------------------------------------------------------------------------------------------- */
typedef struct reduce_plan {
    int64_t outer, red, inner;
    int64_t *base; /* per outer index; NULL: o * red * inner */
    int64_t *roff; /* per reduced index; NULL: r * inner */
} reduce_plan;

static void plan_free(reduce_plan *p) {
    free(p->base);
    free(p->roff);
}

/* Fills tab with the input offsets of every index over the groups first, first+2, ..., last, in
 * row-major order (an odometer, last group fastest). */
static void plan_offsets(const int64_t *gsize, const int64_t *gstride, int first, int last, int64_t *tab,
                         int64_t count) {
    int64_t idx[CINFER_MAX_DIMS] = {0};
    int64_t off = 0;
    for (int64_t k = 0; k < count; k++) {
        tab[k] = off;
        for (int g = last; g >= first; g -= 2) {
            idx[g]++;
            off += gstride[g];
            if (idx[g] < gsize[g]) break;
            off -= idx[g] * gstride[g];
            idx[g] = 0;
        }
    }
}

static cinfer_status plan_build(const graph_node *n, const tensor *x, const bool *mask, reduce_plan *p) {
    reduce_groups grp;
    reduce_group_dims(x, mask, &grp);
    const int64_t *gsize = grp.size, *gstride = grp.stride;
    const bool *gred = grp.reduced;
    int ng = grp.count;
    p->inner = 1;
    p->base = p->roff = NULL;
    if (ng > 0 && !gred[ng - 1]) p->inner = gsize[--ng];
    p->outer = 1;
    p->red = 1;
    for (int g = 0; g < ng; g++) {
        if (gred[g]) p->red *= gsize[g];
        else p->outer *= gsize[g];
    }
    if (ng <= 2) return CINFER_OK; /* [reduced] or [kept, reduced]: plain strides */
    /* groups alternate and end reduced: kept ones sit at ng-2, ng-4, ..., reduced at ng-1, ng-3, ... */
    p->base = malloc(sizeof(int64_t) * (size_t)(p->outer > 0 ? p->outer : 1));
    p->roff = malloc(sizeof(int64_t) * (size_t)(p->red > 0 ? p->red : 1));
    if (!p->base || !p->roff) {
        plan_free(p);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': out of memory for the reduction plan",
                          n->op_type, n->name);
    }
    plan_offsets(gsize, gstride, ng % 2, ng - 2, p->base, p->outer);
    plan_offsets(gsize, gstride, (ng - 1) % 2, ng - 1, p->roff, p->red);
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * Generic reduction engine, instantiated per (op, dtype) by macro. INIT is the fold's identity, FOLD
 * updates `acc` with `v`, FINAL turns `acc` (and the count R) into the result.
 * ------------------------------------------------------------------------------------------------- */
typedef void (*reduce_fn)(const reduce_plan *p, const void *x, void *y);

#define RED_BLK 64

#define DEFINE_REDUCE(NAME, T, A, LD, ST, INIT, FOLD, FINAL)                                                  \
    static void NAME(const reduce_plan *p, const void *xv, void *yv) {                                        \
        const T *x = xv;                                                                                      \
        T *y = yv;                                                                                            \
        const int64_t O = p->outer, R = p->red, I = p->inner;                                                 \
        const int64_t nblk = (I + RED_BLK - 1) / RED_BLK, tiles = O * nblk;                                   \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(O * R * I > CPU_RED_PAR_MIN && tiles > 1)") \
        for (int64_t t = 0; t < tiles; t++) {                                                                 \
            int64_t o = t / nblk, i0 = (t % nblk) * RED_BLK;                                                  \
            int64_t len = I - i0 < RED_BLK ? I - i0 : RED_BLK;                                                \
            const T *xo = x + (p->base ? p->base[o] : o * R * I) + i0;                                        \
            T *yo = y + o * I + i0;                                                                           \
            if (len == 1) {                                                                                   \
                A acc = INIT;                                                                                 \
                for (int64_t r = 0; r < R; r++) {                                                             \
                    A v = LD(xo[p->roff ? p->roff[r] : r * I]);                                               \
                    FOLD;                                                                                     \
                }                                                                                             \
                yo[0] = ST(FINAL);                                                                            \
                continue;                                                                                     \
            }                                                                                                 \
            A accs[RED_BLK];                                                                                  \
            for (int64_t i = 0; i < len; i++) accs[i] = INIT;                                                 \
            for (int64_t r = 0; r < R; r++) {                                                                 \
                const T *xr = xo + (p->roff ? p->roff[r] : r * I);                                            \
                for (int64_t i = 0; i < len; i++) {                                                           \
                    A acc = accs[i], v = LD(xr[i]);                                                           \
                    FOLD;                                                                                     \
                    accs[i] = acc;                                                                            \
                }                                                                                             \
            }                                                                                                 \
            for (int64_t i = 0; i < len; i++) {                                                               \
                A acc = accs[i];                                                                              \
                yo[i] = ST(FINAL);                                                                            \
            }                                                                                                 \
        }                                                                                                     \
    }

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LSE, R_SUMSQ, R_COUNT };

/* log(sum(exp(x))) with the largest finite value factored out; two passes over the reduced set. */
#define DEFINE_LSE(NAME, T, LD, ST)                                                                           \
    static void NAME(const reduce_plan *p, const void *xv, void *yv) {                                        \
        const T *x = xv;                                                                                      \
        T *y = yv;                                                                                            \
        const int64_t O = p->outer, R = p->red, I = p->inner;                                                 \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(O * R * I > CPU_RED_PAR_MIN && O * I > 1)") \
        for (int64_t t = 0; t < O * I; t++) {                                                                 \
            int64_t o = t / I, i = t % I;                                                                     \
            const T *xo = x + (p->base ? p->base[o] : o * R * I) + i;                                         \
            double m = -INFINITY, s = 0;                                                                      \
            for (int64_t r = 0; r < R; r++) {                                                                 \
                double v = LD(xo[p->roff ? p->roff[r] : r * I]);                                              \
                if (v > m && v != INFINITY) m = v;                                                            \
            }                                                                                                 \
            if (m == -INFINITY) m = 0;                                                                        \
            for (int64_t r = 0; r < R; r++) s += exp(LD(xo[p->roff ? p->roff[r] : r * I]) - m);               \
            y[t] = ST(m + log(s));                                                                            \
        }                                                                                                     \
    }

/* Float types fold in double. */
#define F_LD(v) ((double)(v))
#define F32_ST(a) ((float)(a))
#define F64_ST(a) (a)
#define F16_LD(v) ((double)dtype_half_to_float(v))
#define F16_ST(a) dtype_float_to_half((float)(a))
#define BF16_LD(v) ((double)dtype_bf16_to_float(v))
#define BF16_ST(a) dtype_float_to_bf16((float)(a))

#define DEFINE_FLOAT_REDUCES(TN, T, LD, ST)                                                                    \
    DEFINE_REDUCE(rsum_##TN, T, double, LD, ST, 0.0, acc += v, acc)                                           \
    DEFINE_REDUCE(rmean_##TN, T, double, LD, ST, 0.0, acc += v, acc / (double)R)                              \
    DEFINE_REDUCE(rmax_##TN, T, double, LD, ST, -INFINITY, acc = (v > acc || v != v) ? v : acc, acc)          \
    DEFINE_REDUCE(rmin_##TN, T, double, LD, ST, INFINITY, acc = (v < acc || v != v) ? v : acc, acc)           \
    DEFINE_REDUCE(rprod_##TN, T, double, LD, ST, 1.0, acc *= v, acc)                                          \
    DEFINE_REDUCE(rl1_##TN, T, double, LD, ST, 0.0, acc += fabs(v), acc)                                      \
    DEFINE_REDUCE(rl2_##TN, T, double, LD, ST, 0.0, acc += v * v, sqrt(acc))                                  \
    DEFINE_REDUCE(rlogsum_##TN, T, double, LD, ST, 0.0, acc += v, log(acc))                                   \
    DEFINE_LSE(rlse_##TN, T, LD, ST)                                                                          \
    DEFINE_REDUCE(rsumsq_##TN, T, double, LD, ST, 0.0, acc += v * v, acc)                                     \
    static const reduce_fn reduce_fns_##TN[R_COUNT] = {rsum_##TN, rmean_##TN, rmax_##TN, rmin_##TN,         \
                                                       rprod_##TN, rl1_##TN, rl2_##TN, rlogsum_##TN,        \
                                                       rlse_##TN, rsumsq_##TN};

DEFINE_FLOAT_REDUCES(f32, float, F_LD, F32_ST)
DEFINE_FLOAT_REDUCES(f64, double, F_LD, F64_ST)
DEFINE_FLOAT_REDUCES(f16, uint16_t, F16_LD, F16_ST)
DEFINE_FLOAT_REDUCES(bf16, uint16_t, BF16_LD, BF16_ST)

/* Integer types fold in 64 bits with wrap-around (through uint64_t: signed overflow is undefined). */
#define I_LD(v) (v)
#define WADD(A, a, b) ((A)((uint64_t)(a) + (uint64_t)(b)))
#define WMUL(A, a, b) ((A)((uint64_t)(a) * (uint64_t)(b)))
#define SABS(v) ((v) < 0 ? (int64_t)(0 - (uint64_t)(v)) : (v))
#define UABS(v) (v)

#define DEFINE_INT_REDUCES(TN, T, A, LO, HI, ABS)                                                              \
    DEFINE_REDUCE(rsum_##TN, T, A, I_LD, (T), 0, acc = WADD(A, acc, v), acc)                                  \
    DEFINE_REDUCE(rmean_##TN, T, A, I_LD, (T), 0, acc = WADD(A, acc, v), R ? acc / (A)R : 0)                  \
    DEFINE_REDUCE(rmax_##TN, T, A, I_LD, (T), LO, acc = v > acc ? v : acc, acc)                               \
    DEFINE_REDUCE(rmin_##TN, T, A, I_LD, (T), HI, acc = v < acc ? v : acc, acc)                               \
    DEFINE_REDUCE(rprod_##TN, T, A, I_LD, (T), 1, acc = WMUL(A, acc, v), acc)                                 \
    DEFINE_REDUCE(rl1_##TN, T, A, I_LD, (T), 0, acc = WADD(A, acc, ABS(v)), acc)                              \
    DEFINE_REDUCE(rsumsq_##TN, T, A, I_LD, (T), 0, acc = WADD(A, acc, WMUL(A, v, v)), acc)                    \
    static const reduce_fn reduce_fns_##TN[R_COUNT] = {rsum_##TN, rmean_##TN, rmax_##TN, rmin_##TN,         \
                                                       rprod_##TN, rl1_##TN, NULL, NULL, NULL, rsumsq_##TN};

DEFINE_INT_REDUCES(i8, int8_t, int64_t, INT8_MIN, INT8_MAX, SABS)
DEFINE_INT_REDUCES(u8, uint8_t, uint64_t, 0, UINT8_MAX, UABS)
DEFINE_INT_REDUCES(i16, int16_t, int64_t, INT16_MIN, INT16_MAX, SABS)
DEFINE_INT_REDUCES(u16, uint16_t, uint64_t, 0, UINT16_MAX, UABS)
DEFINE_INT_REDUCES(i32, int32_t, int64_t, INT32_MIN, INT32_MAX, SABS)
DEFINE_INT_REDUCES(u32, uint32_t, uint64_t, 0, UINT32_MAX, UABS)
DEFINE_INT_REDUCES(i64, int64_t, int64_t, INT64_MIN, INT64_MAX, SABS)
DEFINE_INT_REDUCES(u64, uint64_t, uint64_t, 0, UINT64_MAX, UABS)

static const reduce_fn *reduce_table(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return reduce_fns_f32;
    case CINFER_DTYPE_DOUBLE: return reduce_fns_f64;
    case CINFER_DTYPE_FLOAT16: return reduce_fns_f16;
    case CINFER_DTYPE_BFLOAT16: return reduce_fns_bf16;
    case CINFER_DTYPE_INT8: return reduce_fns_i8;
    case CINFER_DTYPE_UINT8: return reduce_fns_u8;
    case CINFER_DTYPE_INT16: return reduce_fns_i16;
    case CINFER_DTYPE_UINT16: return reduce_fns_u16;
    case CINFER_DTYPE_INT32: return reduce_fns_i32;
    case CINFER_DTYPE_UINT32: return reduce_fns_u32;
    case CINFER_DTYPE_INT64: return reduce_fns_i64;
    case CINFER_DTYPE_UINT64: return reduce_fns_u64;
    default: return NULL;
    }
}

/* ---- float fast paths for plain layouts (one reduced block: [outer, red, inner]) ---- */
static bool fast_op_f32(int op) {
    return op == R_SUM || op == R_MEAN || op == R_MAX || op == R_MIN || op == R_SUMSQ || op == R_L2;
}

/* One contiguous row (the transformer case: ReduceMean over the last axis). */
static CPU_RED_CLONES float reduce_row_f32(int op, const float *x, int64_t len) {
    switch (op) {
    case R_SUM: return (float)cpu_red_sum_f32(x, len);
    case R_MEAN: return (float)(cpu_red_sum_f32(x, len) / (double)len);
    case R_MAX: return cpu_red_extreme_f32(x, len, false);
    case R_MIN: return cpu_red_extreme_f32(x, len, true);
    case R_SUMSQ: return (float)cpu_red_sumsq_f32(x, len, 0.0f);
    default: return (float)sqrt(cpu_red_sumsq_f32(x, len, 0.0f));
    }
}

/* w <= RED_BLK neighbouring columns over `len` rows of stride `stride`: float lanes across the columns,
 * sums flushed to double every 256 rows so long columns stay accurate. */
static CPU_RED_CLONES void reduce_cols_f32(int op, const float *x, float *y, int64_t len, int64_t stride, int64_t w) {
    float acc[RED_BLK], z[RED_BLK];
    if (op == R_MAX || op == R_MIN) {
        for (int64_t i = 0; i < w; i++) {
            acc[i] = op == R_MAX ? -INFINITY : INFINITY;
            z[i] = 0;
        }
        for (int64_t r = 0; r < len; r++) {
            const float *xr = x + r * stride;
            if (op == R_MAX)
                for (int64_t i = 0; i < w; i++) acc[i] = xr[i] > acc[i] ? xr[i] : acc[i];
            else
                for (int64_t i = 0; i < w; i++) acc[i] = xr[i] < acc[i] ? xr[i] : acc[i];
            for (int64_t i = 0; i < w; i++) z[i] += xr[i] * 0.0f;
        }
        for (int64_t i = 0; i < w; i++) {
            y[i] = acc[i];
            if (z[i] != z[i]) /* a NaN or an infinity: look for a NaN */
                for (int64_t r = 0; r < len; r++)
                    if (x[r * stride + i] != x[r * stride + i]) y[i] = x[r * stride + i];
        }
        return;
    }
    double tot[RED_BLK];
    for (int64_t i = 0; i < w; i++) tot[i] = 0;
    for (int64_t r0 = 0; r0 < len; r0 += 256) {
        int64_t r1 = r0 + 256 < len ? r0 + 256 : len;
        for (int64_t i = 0; i < w; i++) acc[i] = 0;
        if (op == R_SUMSQ || op == R_L2) {
            for (int64_t r = r0; r < r1; r++)
                for (int64_t i = 0; i < w; i++) acc[i] += x[r * stride + i] * x[r * stride + i];
        } else {
            for (int64_t r = r0; r < r1; r++)
                for (int64_t i = 0; i < w; i++) acc[i] += x[r * stride + i];
        }
        for (int64_t i = 0; i < w; i++) tot[i] += acc[i];
    }
    for (int64_t i = 0; i < w; i++)
        y[i] = (float)(op == R_MEAN ? tot[i] / (double)len : op == R_L2 ? sqrt(tot[i]) : tot[i]);
}

static void reduce_fast_f32(int op, const reduce_plan *p, const float *x, float *y) {
    const int64_t O = p->outer, R = p->red, I = p->inner;
    if (I == 1) {
#pragma omp parallel for num_threads(cpu_num_threads()) if (O * R > CPU_RED_PAR_MIN && O > 1)
        for (int64_t o = 0; o < O; o++) y[o] = reduce_row_f32(op, x + o * R, R);
        return;
    }
    const int64_t nblk = (I + RED_BLK - 1) / RED_BLK, tiles = O * nblk;
#pragma omp parallel for num_threads(cpu_num_threads()) if (O * R * I > CPU_RED_PAR_MIN && tiles > 1)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t o = t / nblk, i0 = (t % nblk) * RED_BLK;
        int64_t w = I - i0 < RED_BLK ? I - i0 : RED_BLK;
        reduce_cols_f32(op, x + o * R * I + i0, y + o * I + i0, R, I, w);
    }
}

static cinfer_status run_reduce_op(const graph_node *n, const tensor *in, int num_in, tensor *out, int op) {
    cinfer_dtype dt = in[0].dtype;
    bool is_bool = dt == CINFER_DTYPE_BOOL;
    if (is_bool && op != R_MAX && op != R_MIN) return cpu_unsupported_dtype(n, dt);
    const reduce_fn *tab = reduce_table(is_bool ? CINFER_DTYPE_UINT8 : dt);
    if (!tab || !tab[op]) return cpu_unsupported_dtype(n, dt);
    bool mask[CINFER_MAX_DIMS];
    CINFER_TRY(reduce_compute_axes(n, in, num_in, mask));
    int64_t total = tensor_numel(&out[0]);
    if (total == 0) return CINFER_OK;
    reduce_plan p;
    CINFER_TRY(plan_build(n, &in[0], mask, &p));
    if (p.outer * p.inner != total) {
        plan_free(&p);
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output has %lld elements, expected %lld",
                          n->op_type, n->name, (long long)total, (long long)(p.outer * p.inner));
    }
    if (is_bool && p.red == 0) {
        /* the empty set: false for max, true for min (uint8's 255 would not be a bool) */
        memset(out[0].data, op == R_MAX ? 0 : 1, (size_t)total);
    } else if (dt == CINFER_DTYPE_FLOAT && !p.roff && p.red > 0 && fast_op_f32(op)) {
        reduce_fast_f32(op, &p, in[0].data, out[0].data);
    } else {
        tab[op](&p, in[0].data, out[0].data);
    }
    plan_free(&p);
    return CINFER_OK;
}

#define REDUCE_ENTRY(NAME, OP)                                                                                \
    static cinfer_status NAME(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {  \
        (void)num_out;                                                                                        \
        return run_reduce_op(n, in, num_in, out, OP);                                                         \
    }
REDUCE_ENTRY(run_reduce_sum, R_SUM)
REDUCE_ENTRY(run_reduce_mean, R_MEAN)
REDUCE_ENTRY(run_reduce_max, R_MAX)
REDUCE_ENTRY(run_reduce_min, R_MIN)
REDUCE_ENTRY(run_reduce_prod, R_PROD)
REDUCE_ENTRY(run_reduce_l1, R_L1)
REDUCE_ENTRY(run_reduce_l2, R_L2)
REDUCE_ENTRY(run_reduce_log_sum, R_LOGSUM)
REDUCE_ENTRY(run_reduce_log_sum_exp, R_LSE)
REDUCE_ENTRY(run_reduce_sum_square, R_SUMSQ)

/* ---------------------------------------------------------------------------------------------------
 * ArgMax / ArgMin. NaN counts as the extreme (numpy's rule); ties take the first index, or the last with
 * select_last_index.
 * ------------------------------------------------------------------------------------------------- */
typedef void (*arg_fn)(const void *x, int64_t *y, int64_t outer, int64_t n, int64_t inner, bool is_max, bool last);

#define DEFINE_ARG(NAME, T, ISNAN)                                                                            \
    static void NAME(const void *xv, int64_t *y, int64_t outer, int64_t n, int64_t inner, bool is_max,        \
                     bool last) {                                                                             \
        const T *x = xv;                                                                                      \
        const int64_t nblk = (inner + RED_BLK - 1) / RED_BLK, tiles = outer * nblk;                           \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * n * inner > CPU_RED_PAR_MIN && tiles > 1)") \
        for (int64_t t = 0; t < tiles; t++) {                                                                 \
            int64_t o = t / nblk, i0 = (t % nblk) * RED_BLK;                                                  \
            int64_t len = inner - i0 < RED_BLK ? inner - i0 : RED_BLK;                                        \
            const T *xo = x + o * n * inner + i0;                                                             \
            T best[RED_BLK];                                                                                  \
            int64_t idx[RED_BLK];                                                                             \
            for (int64_t i = 0; i < len; i++) {                                                               \
                best[i] = xo[i];                                                                              \
                idx[i] = 0;                                                                                   \
            }                                                                                                 \
            for (int64_t j = 1; j < n; j++) {                                                                 \
                const T *xr = xo + j * inner;                                                                 \
                for (int64_t i = 0; i < len; i++) {                                                           \
                    T v = xr[i], b = best[i];                                                                 \
                    bool take;                                                                                \
                    if (ISNAN(b)) take = last && ISNAN(v);                                                    \
                    else if (ISNAN(v)) take = true;                                                           \
                    else if (is_max) take = last ? v >= b : v > b;                                            \
                    else take = last ? v <= b : v < b;                                                        \
                    if (take) {                                                                               \
                        best[i] = v;                                                                          \
                        idx[i] = j;                                                                           \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
            for (int64_t i = 0; i < len; i++) y[o * inner + i0 + i] = idx[i];                                 \
        }                                                                                                     \
    }

#define FISNAN(v) ((v) != (v))
#define NONAN(v) ((void)(v), 0)
DEFINE_ARG(arg_f32, float, FISNAN)
DEFINE_ARG(arg_f64, double, FISNAN)
DEFINE_ARG(arg_i8, int8_t, NONAN)
DEFINE_ARG(arg_u8, uint8_t, NONAN)
DEFINE_ARG(arg_i16, int16_t, NONAN)
DEFINE_ARG(arg_u16, uint16_t, NONAN)
DEFINE_ARG(arg_i32, int32_t, NONAN)
DEFINE_ARG(arg_u32, uint32_t, NONAN)
DEFINE_ARG(arg_i64, int64_t, NONAN)
DEFINE_ARG(arg_u64, uint64_t, NONAN)

/* A float row over the innermost axis: the extreme by vectorised lanes, then its first (last) position. */
static CPU_RED_CLONES int64_t arg_row_f32(const float *x, int64_t len, bool is_max, bool last) {
    float m = cpu_red_extreme_f32(x, len, !is_max);
    bool nan = m != m;
    if (last) {
        for (int64_t j = len - 1; j >= 0; j--)
            if (nan ? x[j] != x[j] : x[j] == m) return j;
    } else {
        for (int64_t j = 0; j < len; j++)
            if (nan ? x[j] != x[j] : x[j] == m) return j;
    }
    return 0;
}

static cinfer_status run_arg(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, run_arg);
    arg_fn fn;
    switch (dt) {
    case CINFER_DTYPE_FLOAT: fn = arg_f32; break;
    case CINFER_DTYPE_DOUBLE: fn = arg_f64; break;
    case CINFER_DTYPE_INT8: fn = arg_i8; break;
    case CINFER_DTYPE_UINT8: fn = arg_u8; break;
    case CINFER_DTYPE_INT16: fn = arg_i16; break;
    case CINFER_DTYPE_UINT16: fn = arg_u16; break;
    case CINFER_DTYPE_INT32: fn = arg_i32; break;
    case CINFER_DTYPE_UINT32: fn = arg_u32; break;
    case CINFER_DTYPE_INT64: fn = arg_i64; break;
    case CINFER_DTYPE_UINT64: fn = arg_u64; break;
    default: return cpu_unsupported_dtype(n, dt);
    }
    reduce_arg a;
    CINFER_TRY(reduce_compute_arg(n, &in[0], &a));
    const int64_t outer = a.rows.outer, len = a.rows.len, inner = a.rows.inner;
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    const bool is_max = a.is_max, last = a.last;
    if (dt == CINFER_DTYPE_FLOAT && inner == 1) {
        const float *x = in[0].data;
        int64_t *y = out[0].data;
#pragma omp parallel for num_threads(cpu_num_threads()) if (outer * len > CPU_RED_PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++) y[o] = arg_row_f32(x + o * len, len, is_max, last);
        return CINFER_OK;
    }
    fn(in[0].data, out[0].data, outer, len, inner, is_max, last);
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes` (default [0,2,3]), the
 * epsilon placement of the ONNX function body. Statistics in double.
 * ------------------------------------------------------------------------------------------------- */
#define DEFINE_MVN(NAME, T)                                                                                   \
    static void NAME(const reduce_plan *p, const T *x, T *y) {                                  \
        const int64_t O = p->outer, R = p->red, I = p->inner;                                                 \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(O * R * I > CPU_RED_PAR_MIN && O * I > 1)") \
        for (int64_t t = 0; t < O * I; t++) {                                                                 \
            int64_t o = t / I, i = t % I;                                                                     \
            const T *xo = x + (p->base ? p->base[o] : o * R * I) + i;                                         \
            T *yo = y + (p->base ? p->base[o] : o * R * I) + i;                                               \
            double s = 0, q = 0;                                                                              \
            for (int64_t r = 0; r < R; r++) s += xo[p->roff ? p->roff[r] : r * I];                            \
            double mean = s / (double)R;                                                                      \
            for (int64_t r = 0; r < R; r++) {                                                                 \
                double d = xo[p->roff ? p->roff[r] : r * I] - mean;                                           \
                q += d * d;                                                                                   \
            }                                                                                                 \
            double inv = 1.0 / (sqrt(q / (double)R) + 1e-9);                                                  \
            for (int64_t r = 0; r < R; r++) {                                                                 \
                int64_t k = p->roff ? p->roff[r] : r * I;                                                     \
                yo[k] = (T)((xo[k] - mean) * inv);                                                            \
            }                                                                                                 \
        }                                                                                                     \
    }
DEFINE_MVN(mvn_f32, float)
DEFINE_MVN(mvn_f64, double)

static cinfer_status run_mvn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, run_mvn);
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    bool mask[CINFER_MAX_DIMS];
    CINFER_TRY(reduce_compute_mvn_axes(n, &in[0], mask));
    if (tensor_numel(&in[0]) == 0) return CINFER_OK;
    reduce_plan p;
    CINFER_TRY(plan_build(n, &in[0], mask, &p));
    if (dt == CINFER_DTYPE_FLOAT) mvn_f32(&p, in[0].data, out[0].data);
    else mvn_f64(&p, in[0].data, out[0].data);
    plan_free(&p);
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * Half-type bridge: float32 copies of float16/bfloat16 tensors.
 * ------------------------------------------------------------------------------------------------- */
cinfer_status cpu_run_as_float(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                               cpu_kernel_fn fn) {
    enum { MAXT = 16 };
    if (num_in > MAXT || num_out > MAXT)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': too many inputs or outputs", n->op_type, n->name);
    tensor fin[MAXT] = {0}, fout[MAXT] = {0};
    void *bufs[2 * MAXT] = {NULL};
    int nb = 0;
    cinfer_status st = CINFER_OK;
    for (int i = 0; i < num_in + num_out && st == CINFER_OK; i++) {
        bool is_in = i < num_in;
        const tensor *src = is_in ? &in[i] : &out[i - num_in];
        tensor *dst = is_in ? &fin[i] : &fout[i - num_in];
        *dst = *src;
        if (!cpu_red_is_half(src->dtype)) continue;
        dst->dtype = CINFER_DTYPE_FLOAT; /* always: a half dtype left here would recurse */
        if (!src->data) continue;        /* an empty or omitted tensor */
        float *buf = malloc(sizeof(float) * (size_t)(tensor_numel(src) > 0 ? tensor_numel(src) : 1));
        if (!buf) {
            st = core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': out of memory", n->op_type, n->name);
            break;
        }
        bufs[nb++] = buf;
        if (is_in) cpu_convert_half_to_float(src->dtype, src->data, buf, tensor_numel(src));
        dst->data = buf;
    }
    if (st == CINFER_OK) st = fn(n, fin, num_in, fout, num_out);
    if (st == CINFER_OK)
        for (int k = 0; k < num_out; k++) {
            if (!cpu_red_is_half(out[k].dtype) || !out[k].data) continue;
            cpu_convert_float_to_half(out[k].dtype, fout[k].data, out[k].data, tensor_numel(&out[k]));
        }
    for (int i = 0; i < nb; i++) free(bufs[i]);
    return st;
}

const cpu_kernel cpu_reduce_kernels[] = {
    {"ReduceSum", run_reduce_sum},
    {"ReduceMean", run_reduce_mean},
    {"ReduceMax", run_reduce_max},
    {"ReduceMin", run_reduce_min},
    {"ReduceProd", run_reduce_prod},
    {"ReduceL1", run_reduce_l1},
    {"ReduceL2", run_reduce_l2},
    {"ReduceLogSum", run_reduce_log_sum},
    {"ReduceLogSumExp", run_reduce_log_sum_exp},
    {"ReduceSumSquare", run_reduce_sum_square},
    {"ArgMax", run_arg},
    {"ArgMin", run_arg},
    {"TopK", cpu_run_topk},
    {"Softmax", cpu_run_softmax},
    {"LogSoftmax", cpu_run_log_softmax},
    {"Hardmax", cpu_run_hardmax},
    {"LayerNormalization", cpu_run_layer_norm},
    {"RMSNormalization", cpu_run_rms_norm},
    {"InstanceNormalization", cpu_run_instance_norm},
    {"GroupNormalization", cpu_run_group_norm},
    {"MeanVarianceNormalization", run_mvn},
    {"LpNormalization", cpu_run_lp_norm},
    {"LRN", cpu_run_lrn},
    {NULL, NULL},
};
