/* CPU kernels of the normalisations over rows: LayerNormalization, RMSNormalization, InstanceNormalization,
 * GroupNormalization, LRN (LpNormalization, one pass along an axis, is with Softmax in reduce_softmax.c). Each row's
 * statistics take two passes (mean, then squared deviations) over data that stays in cache; OpenMP spreads the rows. */
#include <stdlib.h>

#include "backend/cpu/cpu_staging.h"
#include "backend/cpu/reduce_internal.h"
#include "graph/shape/reduce_params.h"

/* ---- per-row statistics: float uses the vectorised lanes, double plain loops ---- */
static inline double sum_f64(const double *x, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += x[j];
    return s;
}
static inline double sumsq_f64(const double *x, int64_t n, double c) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += (x[j] - c) * (x[j] - c);
    return s;
}
static inline double sum_f32(const float *x, int64_t n) { return cpu_red_sum_f32(x, n); }
static inline double sumsq_f32(const float *x, int64_t n, float c) { return cpu_red_sumsq_f32(x, n, c); }

/* Mean and 1/sqrt(var + eps) of a row (rms: mean 0, variance = mean of squares). */
#define DEFINE_ROW_STATS(NAME, T, SUM, SUMSQ)                                                                 \
    static inline void NAME(const T *x, int64_t n, double eps, bool rms, T *mean, T *inv) {                   \
        double m = rms ? 0.0 : SUM(x, n) / (double)n;                                                         \
        double var = SUMSQ(x, n, (T)m) / (double)n;                                                           \
        *mean = (T)m;                                                                                         \
        *inv = (T)(1.0 / sqrt(var + eps));                                                                    \
    }
DEFINE_ROW_STATS(row_stats_f32, float, sum_f32, sumsq_f32)
DEFINE_ROW_STATS(row_stats_f64, double, sum_f64, sumsq_f64)

/* Writes one statistic (LayerNormalization's Mean / InvStdDev, dtype from stash_type). */
static void store_stat(tensor *t, int64_t i, double v) { cpu_store_f64(t->data, t->dtype, i, v); }

static bool stat_dtype_ok(const tensor *t) {
    return t->dtype == CINFER_DTYPE_FLOAT || t->dtype == CINFER_DTYPE_DOUBLE || cpu_red_is_half(t->dtype);
}

/* Returns p laid out per column of the normalised tail x.dims[axis:] (numpy broadcast): p's own data
 * when it already has that layout, else a new buffer in *owned (freed by the caller). */
static cinfer_status expand_param(const graph_node *n, const tensor *p, const tensor *x, int axis, size_t esize,
                                  const void **data, void **owned) {
    *owned = NULL;
    *data = p->data;
    int64_t pstride[CINFER_MAX_DIMS]; /* per tail dim: stride in p, 0 where broadcast */
    bool dense;
    CINFER_TRY(reduce_norm_param_layout(n, p, x, axis, pstride, &dense));
    if (dense) return CINFER_OK;
    int64_t cols = 1;
    for (int d = axis; d < x->ndim; d++) cols *= x->dims[d];
    int tail = x->ndim - axis;
    char *buf = malloc(esize * (size_t)(cols > 0 ? cols : 1));
    if (!buf) return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': out of memory", n->op_type, n->name);
    int64_t idx[CINFER_MAX_DIMS] = {0};
    for (int64_t c = 0; c < cols; c++) {
        int64_t off = 0;
        for (int k = 0; k < tail; k++) off += idx[k] * pstride[k];
        memcpy(buf + (size_t)c * esize, (const char *)p->data + (size_t)off * esize, esize);
        for (int k = tail - 1; k >= 0; k--) {
            if (++idx[k] < x->dims[axis + k]) break;
            idx[k] = 0;
        }
    }
    *owned = buf;
    *data = buf;
    return CINFER_OK;
}

/* y = (x - mean) * inv * scale (+ bias) over a row; y may be x (then one pointer: GCC runs two-pointer
 * loops scalar when its overlap check fails). */
#define DEFINE_ROW_APPLY(NAME, T)                                                                             \
    static inline void NAME(const T *x, T *y, int64_t n, T mean, T inv, const T *scale, const T *bias) {     \
        if (x == y) {                                                                                         \
            if (bias)                                                                                         \
                for (int64_t j = 0; j < n; j++) y[j] = (y[j] - mean) * inv * scale[j] + bias[j];              \
            else                                                                                              \
                for (int64_t j = 0; j < n; j++) y[j] = (y[j] - mean) * inv * scale[j];                        \
        } else {                                                                                              \
            if (bias)                                                                                         \
                for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * inv * scale[j] + bias[j];              \
            else                                                                                              \
                for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * inv * scale[j];                        \
        }                                                                                                     \
    }                                                                                                         \
    /* y = (x - mean) * a + b with scalar a, b (one channel segment) */                                       \
    static inline void NAME##_seg(const T *x, T *y, int64_t n, T mean, T a, T b) {                            \
        if (x == y)                                                                                           \
            for (int64_t j = 0; j < n; j++) y[j] = (y[j] - mean) * a + b;                                     \
        else                                                                                                  \
            for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * a + b;                                     \
    }
DEFINE_ROW_APPLY(row_apply_f32, float)
DEFINE_ROW_APPLY(row_apply_f64, double)

/* LayerNormalization / RMSNormalization over rows of `cols`. */
#define DEFINE_LAYER_NORM(NAME, T, STATS, APPLY, CLONES)                                                      \
    static CLONES void NAME##_row(const T *x, T *y, int64_t cols, const T *scale, const T *bias, double eps,  \
                                  bool rms, T *mean, T *inv) {                                                \
        STATS(x, cols, eps, rms, mean, inv);                                                                  \
        APPLY(x, y, cols, *mean, *inv, scale, bias);                                                          \
    }                                                                                                         \
    static void NAME(const T *x, const T *res, T *y, int64_t rows, int64_t cols, const T *scale, const T *bias, \
                     double eps, bool rms, tensor *mean_out, tensor *inv_out) {                               \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(rows * cols > CPU_RED_PAR_MIN && rows > 1)") \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            T mean, inv;                                                                                      \
            const T *xr = x + r * cols;                                                                       \
            if (res) { /* the fused residual: the row's sum first, in Y (it may be X itself) */               \
                T *yr = y + r * cols;                                                                         \
                for (int64_t j = 0; j < cols; j++) yr[j] = xr[j] + res[r * cols + j];                         \
                xr = yr;                                                                                      \
            }                                                                                                 \
            NAME##_row(xr, y + r * cols, cols, scale, bias, eps, rms, &mean, &inv);                           \
            if (mean_out) store_stat(mean_out, r, mean);                                                      \
            if (inv_out) store_stat(inv_out, r, inv);                                                         \
        }                                                                                                     \
    }
DEFINE_LAYER_NORM(layer_norm_f32, float, row_stats_f32, row_apply_f32, CPU_RED_CLONES)
DEFINE_LAYER_NORM(layer_norm_f64, double, row_stats_f64, row_apply_f64, )

static cinfer_status run_layer_or_rms(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                      bool rms) {
    cinfer_dtype dt = in[0].dtype;
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    reduce_layer_norm lp;
    CINFER_TRY(reduce_compute_layer_norm(n, &in[0], &lp));
    const int axis = lp.axis;
    const int64_t rows = lp.rows, cols = lp.cols;
    const double eps = lp.epsilon;
    tensor *mean_out = NULL, *inv_out = NULL;
    if (!rms && num_out > 1 && out[1].data) mean_out = &out[1];
    if (!rms && num_out > 2 && out[2].data) inv_out = &out[2];
    if ((mean_out && (!stat_dtype_ok(mean_out) || tensor_numel(mean_out) != rows)) ||
        (inv_out && (!stat_dtype_ok(inv_out) || tensor_numel(inv_out) != rows)))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': Mean/InvStdDev outputs must be float tensors "
                          "of %lld elements", n->op_type, n->name, (long long)rows);
    if (rows * cols == 0) return CINFER_OK;
    size_t esize = dt == CINFER_DTYPE_FLOAT ? sizeof(float) : sizeof(double);
    const void *scale = NULL, *bias = NULL;
    void *own_scale = NULL, *own_bias = NULL;
    for (int i = 1; i < 3; i++)
        if (cpu_red_present(in, num_in, i) && in[i].dtype != dt)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': input %d has dtype %s, expected %s",
                              n->op_type, n->name, i, cinfer_dtype_name(in[i].dtype), cinfer_dtype_name(dt));
    if (!cpu_red_present(in, num_in, 1))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': Scale is missing", n->op_type, n->name);
    CINFER_TRY(expand_param(n, &in[1], &in[0], axis, esize, &scale, &own_scale));
    if (!rms && cpu_red_present(in, num_in, 2)) {
        cinfer_status st = expand_param(n, &in[2], &in[0], axis, esize, &bias, &own_bias);
        if (st != CINFER_OK) {
            free(own_scale);
            return st;
        }
    }
    /* the fused residual Add of graph/fusion.c (LayerNorm(X + R); half types arrive here as float32) */
    const void *res = !rms && cpu_red_present(in, num_in, 3) ? in[3].data : NULL;
    if (res && (in[3].dtype != dt || tensor_numel(&in[3]) != rows * cols)) {
        free(own_scale);
        free(own_bias);
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': the fused residual must match X", n->op_type,
                          n->name);
    }
    if (dt == CINFER_DTYPE_FLOAT)
        layer_norm_f32(in[0].data, res, out[0].data, rows, cols, scale, bias, eps, rms, mean_out, inv_out);
    else
        layer_norm_f64(in[0].data, res, out[0].data, rows, cols, scale, bias, eps, rms, mean_out, inv_out);
    free(own_scale);
    free(own_bias);
    return CINFER_OK;
}

cinfer_status cpu_run_layer_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (cpu_red_is_half(in[0].dtype)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_layer_norm);
    return run_layer_or_rms(n, in, num_in, out, num_out, false);
}

cinfer_status cpu_run_rms_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (cpu_red_is_half(in[0].dtype)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_rms_norm);
    return run_layer_or_rms(n, in, num_in, out, num_out, true);
}

/* Instance and group normalisation: rows of `cols` = `segs` channel segments of `seg` elements; each
 * segment has its own scale and bias (param_of(row, segment) picks the index). */
#define DEFINE_SEG_NORM(NAME, T, STATS, APPLY, CLONES)                                                        \
    static CLONES void NAME##_row(const T *x, T *y, int64_t segs, int64_t seg, const T *scale, const T *bias, \
                                  double eps) {                                                               \
        T mean, inv;                                                                                          \
        STATS(x, segs * seg, eps, false, &mean, &inv);                                                        \
        for (int64_t k = 0; k < segs; k++)                                                                    \
            APPLY(x + k * seg, y + k * seg, seg, mean, inv * scale[k], bias[k]);                              \
    }                                                                                                         \
    static void NAME(const T *x, T *y, int64_t rows, int64_t segs, int64_t seg, const T *scale, const T *bias, \
                     double eps, int64_t groups, bool per_group) {                                            \
        const int64_t cols = segs * seg;                                                                      \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(rows * cols > CPU_RED_PAR_MIN && rows > 1)") \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            int64_t g = r % groups;                                                                           \
            if (per_group) {                                                                                  \
                /* one scale and bias for the whole group: a 1-segment row */                                 \
                NAME##_row(x + r * cols, y + r * cols, 1, cols, scale + g, bias + g, eps);                    \
            } else {                                                                                          \
                NAME##_row(x + r * cols, y + r * cols, segs, seg, scale + g * segs, bias + g * segs, eps);    \
            }                                                                                                 \
        }                                                                                                     \
    }
DEFINE_SEG_NORM(seg_norm_f32, float, row_stats_f32, row_apply_f32_seg, CPU_RED_CLONES)
DEFINE_SEG_NORM(seg_norm_f64, double, row_stats_f64, row_apply_f64_seg, )

/* InstanceNormalization, GroupNormalization: their geometry from reduce_compute_seg_norm. */
static cinfer_status run_seg_norm(const graph_node *n, const tensor *in, int num_in, tensor *out) {
    cinfer_dtype dt = in[0].dtype;
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    reduce_seg_norm p;
    CINFER_TRY(reduce_compute_seg_norm(n, &in[0], &p));
    const int64_t groups = p.groups, spatial = p.spatial;
    if (groups <= 0 || p.channels % groups != 0) /* InstanceNormalization of 0 channels */
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': %lld groups do not divide %lld channels",
                          n->op_type, n->name, (long long)groups, (long long)p.channels);
    for (int i = 1; i < 3; i++)
        if (!cpu_red_present(in, num_in, i) || in[i].dtype != dt || tensor_numel(&in[i]) != p.param_len)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': input %d must be a %s tensor of %lld "
                              "elements", n->op_type, n->name, i, cinfer_dtype_name(dt), (long long)p.param_len);
    int64_t rows = p.batch * groups, segs = p.channels / groups;
    if (rows * segs * spatial == 0) return CINFER_OK;
    if (dt == CINFER_DTYPE_FLOAT)
        seg_norm_f32(in[0].data, out[0].data, rows, segs, spatial, in[1].data, in[2].data, p.epsilon, groups,
                     p.per_group);
    else
        seg_norm_f64(in[0].data, out[0].data, rows, segs, spatial, in[1].data, in[2].data, p.epsilon, groups,
                     p.per_group);
    return CINFER_OK;
}

cinfer_status cpu_run_instance_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (cpu_red_is_half(in[0].dtype)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_instance_norm);
    return run_seg_norm(n, in, num_in, out);
}

cinfer_status cpu_run_group_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (cpu_red_is_half(in[0].dtype)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_group_norm);
    return run_seg_norm(n, in, num_in, out);
}

/* LRN over x [batch, channels, spatial]: the output row of channel c first holds the sum of squares over its window
 * of channels (y is not x: the schema keeps LRN out of place), then becomes x * (bias + alpha / size * sum)^-beta. */
#define DEFINE_LRN(NAME, T, POW)                                                                              \
    static void NAME(const T *x, T *y, const reduce_lrn *p) {                                                 \
        const int64_t channels = p->channels, spatial = p->spatial;                                           \
        const int64_t before = (p->size - 1) / 2, after = p->size - 1 - before; /* floor, ceil of (size-1)/2 */ \
        const T scale = (T)(p->alpha / (double)p->size), bias = (T)p->bias, neg_beta = (T)-p->beta;           \
        const int64_t rows = p->batch * channels;                                                             \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(rows * spatial * p->size > CPU_RED_PAR_MIN && rows > 1)") \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            const int64_t b = r / channels, c = r % channels;                                                 \
            const int64_t lo = c - before < 0 ? 0 : c - before;                                               \
            const int64_t hi = c + after >= channels ? channels - 1 : c + after;                              \
            T *yr = y + r * spatial;                                                                          \
            const T *xr = x + r * spatial;                                                                    \
            for (int64_t s = 0; s < spatial; s++) yr[s] = 0;                                                  \
            for (int64_t k = lo; k <= hi; k++) {                                                              \
                const T *xk = x + (b * channels + k) * spatial;                                               \
                for (int64_t s = 0; s < spatial; s++) yr[s] += xk[s] * xk[s];                                 \
            }                                                                                                 \
            for (int64_t s = 0; s < spatial; s++) yr[s] = xr[s] * POW(bias + scale * yr[s], neg_beta);        \
        }                                                                                                     \
    }
DEFINE_LRN(lrn_f32, float, powf)
DEFINE_LRN(lrn_f64, double, pow)

cinfer_status cpu_run_lrn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (cpu_red_is_half(in[0].dtype)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_lrn);
    cinfer_dtype dt = in[0].dtype;
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    reduce_lrn p;
    CINFER_TRY(reduce_check_lrn_run(n, &in[0], &out[0], &p));
    if (p.batch * p.channels * p.spatial == 0) return CINFER_OK;
    if (dt == CINFER_DTYPE_FLOAT)
        lrn_f32(in[0].data, out[0].data, &p);
    else
        lrn_f64(in[0].data, out[0].data, &p);
    return CINFER_OK;
}
