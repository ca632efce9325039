/* CPU kernels of the reduce family's ops along one axis of [outer, len, inner]: Softmax, LogSoftmax, Hardmax and
 * LpNormalization (as the CUDA backend groups them, reduce_softmax.cu). Softmax is numerically stable (the row
 * maximum is subtracted), with a vectorised path for the innermost axis and column tiles for the others. */
#include "backend/cpu/reduce_internal.h"
#include "graph/shape/reduce_params.h"

#define SM_BLK 64

/* The loops below come in two forms: y == x (in place) through one pointer, else two. GCC guards
 * two-pointer loops with an overlap check and runs them scalar when the buffers are the same. */

/* y[j] = exp(x[j] - m) */
static inline void exp_shift_f32(const float *x, float *y, int64_t n, float m) {
    if (x == y)
        for (int64_t j = 0; j < n; j++) y[j] = cpu_red_expf(y[j] - m);
    else
        for (int64_t j = 0; j < n; j++) y[j] = cpu_red_expf(x[j] - m);
}

/* y[j] = x[j] - c */
static inline void sub_f32(const float *x, float *y, int64_t n, float c) {
    if (x == y)
        for (int64_t j = 0; j < n; j++) y[j] -= c;
    else
        for (int64_t j = 0; j < n; j++) y[j] = x[j] - c;
}

/* One float row over the innermost axis; y may be x. */
static CPU_RED_CLONES void softmax_row_f32(const float *x, float *y, int64_t len, bool log_mode) {
    float m = cpu_red_max_f32(x, len);
    if (!log_mode) {
        exp_shift_f32(x, y, len, m);
        float inv = (float)(1.0 / cpu_red_sum_f32(y, len));
        for (int64_t j = 0; j < len; j++) y[j] *= inv;
    } else {
        /* exponentials go to a scratch block: y may alias x, which the last pass still reads */
        float tmp[256];
        double s = 0;
        for (int64_t b = 0; b < len; b += 256) {
            int64_t e = b + 256 < len ? 256 : len - b;
            exp_shift_f32(x + b, tmp, e, m);
            s += cpu_red_sum_f32(tmp, e);
        }
        sub_f32(x, y, len, m + (float)log(s));
    }
}

static void softmax_rows_f32(const float *x, float *y, int64_t rows, int64_t len, bool log_mode) {
#pragma omp parallel for num_threads(cpu_num_threads()) if (rows * len > CPU_RED_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) softmax_row_f32(x + r * len, y + r * len, len, log_mode);
}

static inline float exp_f32(float v) { return cpu_red_expf(v); }
static inline double exp_f64(double v) { return exp(v); }

/* The general layout [outer, len, inner]: tiles of up to SM_BLK columns, three passes over the rows. */
#define DEFINE_SOFTMAX_TILES(NAME, T, EXP, CLONES)                                                            \
    static CLONES void NAME##_tile(const T *xo, T *yo, int64_t len, int64_t inner, int64_t w, bool log_mode) { \
        T m[SM_BLK], s[SM_BLK];                                                                               \
        for (int64_t i = 0; i < w; i++) {                                                                     \
            m[i] = -INFINITY;                                                                                 \
            s[i] = 0;                                                                                         \
        }                                                                                                     \
        for (int64_t j = 0; j < len; j++)                                                                     \
            for (int64_t i = 0; i < w; i++) m[i] = xo[j * inner + i] > m[i] ? xo[j * inner + i] : m[i];      \
        if (!log_mode) {                                                                                      \
            for (int64_t j = 0; j < len; j++)                                                                 \
                for (int64_t i = 0; i < w; i++) {                                                             \
                    T e = EXP(xo[j * inner + i] - m[i]);                                                      \
                    yo[j * inner + i] = e;                                                                    \
                    s[i] += e;                                                                                \
                }                                                                                             \
            for (int64_t i = 0; i < w; i++) s[i] = 1 / s[i];                                                  \
            for (int64_t j = 0; j < len; j++)                                                                 \
                for (int64_t i = 0; i < w; i++) yo[j * inner + i] *= s[i];                                    \
        } else {                                                                                              \
            for (int64_t j = 0; j < len; j++)                                                                 \
                for (int64_t i = 0; i < w; i++) s[i] += EXP(xo[j * inner + i] - m[i]);                        \
            for (int64_t i = 0; i < w; i++) s[i] = m[i] + (T)log(s[i]);                                       \
            for (int64_t j = 0; j < len; j++)                                                                 \
                for (int64_t i = 0; i < w; i++) yo[j * inner + i] = xo[j * inner + i] - s[i];                 \
        }                                                                                                     \
    }                                                                                                         \
    static void NAME(const T *x, T *y, int64_t outer, int64_t len, int64_t inner, bool log_mode) {            \
        const int64_t nblk = (inner + SM_BLK - 1) / SM_BLK, tiles = outer * nblk;                             \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * len * inner > CPU_RED_PAR_MIN && tiles > 1)") \
        for (int64_t t = 0; t < tiles; t++) {                                                                 \
            int64_t o = t / nblk, i0 = (t % nblk) * SM_BLK;                                                   \
            int64_t w = inner - i0 < SM_BLK ? inner - i0 : SM_BLK;                                            \
            NAME##_tile(x + o * len * inner + i0, y + o * len * inner + i0, len, inner, w, log_mode);         \
        }                                                                                                     \
    }
DEFINE_SOFTMAX_TILES(softmax_tiles_f32, float, exp_f32, CPU_RED_CLONES)
DEFINE_SOFTMAX_TILES(softmax_tiles_f64, double, exp_f64, )

static cinfer_status run_softmax_mode(const graph_node *n, const tensor *in, tensor *out, bool log_mode) {
    reduce_rows r; /* rows along the axis (reduce_compute_softmax: older opsets flatten the tail into the row) */
    CINFER_TRY(reduce_compute_softmax(n, &in[0], &r));
    const int64_t outer = r.outer, len = r.len, inner = r.inner;
    if (outer * len * inner == 0) return CINFER_OK;
    if (in[0].dtype == CINFER_DTYPE_FLOAT) {
        if (inner == 1) softmax_rows_f32(in[0].data, out[0].data, outer, len, log_mode);
        else softmax_tiles_f32(in[0].data, out[0].data, outer, len, inner, log_mode);
    } else {
        softmax_tiles_f64(in[0].data, out[0].data, outer, len, inner, log_mode);
    }
    return CINFER_OK;
}

/* float16/bfloat16 Softmax rounded as the ONNX reference (numpy on low-precision arrays) rounds it: x - max and
 * exp rounded to the storage type, then the sum and the division. numpy sums float16 in float and rounds once,
 * but sums ml_dtypes' bfloat16 element by element in bfloat16, so the two differ only in how the sum rounds.
 * Rounding once at the end instead leaves about one element in ten an ulp off, beyond the node tests' rtol of
 * 1e-3 at 8 or 11 mantissa bits. y may be x. */
static inline float to_float16_type(cinfer_dtype t, uint16_t v) {
    return t == CINFER_DTYPE_BFLOAT16 ? dtype_bf16_to_float(v) : dtype_half_to_float(v);
}
static inline uint16_t from_float16_type(cinfer_dtype t, float v) {
    return t == CINFER_DTYPE_BFLOAT16 ? dtype_float_to_bf16(v) : dtype_float_to_half(v);
}
static inline float round_16(cinfer_dtype t, float v) { return to_float16_type(t, from_float16_type(t, v)); }

static void softmax_16bit_stepwise(cinfer_dtype t, const uint16_t *x, uint16_t *y, int64_t outer, int64_t len,
                                   int64_t inner) {
    bool sum_in_16bit = t == CINFER_DTYPE_BFLOAT16;
#pragma omp parallel for num_threads(cpu_num_threads()) if (outer * len * inner > CPU_RED_PAR_MIN && outer * inner > 1)
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t o = r / inner, i = r % inner;
        const uint16_t *xr = x + o * len * inner + i;
        uint16_t *yr = y + o * len * inner + i;
        float m = -INFINITY;
        for (int64_t j = 0; j < len; j++) {
            float v = to_float16_type(t, xr[j * inner]);
            m = v > m ? v : m;
        }
        float s = 0;
        for (int64_t j = 0; j < len; j++) {
            float e = round_16(t, expf(round_16(t, to_float16_type(t, xr[j * inner]) - m)));
            yr[j * inner] = from_float16_type(t, e);
            s = sum_in_16bit ? (j == 0 ? e : round_16(t, s + e)) : s + e;
        }
        s = round_16(t, s);
        for (int64_t j = 0; j < len; j++) yr[j * inner] = from_float16_type(t, to_float16_type(t, yr[j * inner]) / s);
    }
}

/* The fused "cinfer_nan_to_zero" (Softmax followed by Where(IsNaN(p), 0, p), set by graph/fusion.c): a NaN result
 * becomes 0. A softmax row is NaN as a whole or not at all, so this is the CUDA kernel's per-row rule too. */
static void nan_to_zero(tensor *t) {
    int64_t count = tensor_numel(t);
    if (t->dtype == CINFER_DTYPE_FLOAT) {
        float *y = t->data;
        for (int64_t i = 0; i < count; i++) y[i] = y[i] != y[i] ? 0.0f : y[i];
    } else if (t->dtype == CINFER_DTYPE_DOUBLE) {
        double *y = t->data;
        for (int64_t i = 0; i < count; i++) y[i] = y[i] != y[i] ? 0.0 : y[i];
    } else { /* float16 / bfloat16: NaN is an all-ones exponent with a non-zero mantissa */
        uint16_t *y = t->data;
        uint16_t exp_mask = t->dtype == CINFER_DTYPE_FLOAT16 ? 0x7C00 : 0x7F80, man_mask = t->dtype == CINFER_DTYPE_FLOAT16 ? 0x03FF : 0x007F;
        for (int64_t i = 0; i < count; i++)
            if ((y[i] & exp_mask) == exp_mask && (y[i] & man_mask)) y[i] = 0;
    }
}

static cinfer_status softmax_any(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (dt == CINFER_DTYPE_BFLOAT16 || dt == CINFER_DTYPE_FLOAT16) {
        reduce_rows r;
        CINFER_TRY(reduce_compute_softmax(n, &in[0], &r));
        const int64_t outer = r.outer, len = r.len, inner = r.inner;
        if (outer * len * inner == 0) return CINFER_OK;
        softmax_16bit_stepwise(dt, in[0].data, out[0].data, outer, len, inner);
        return CINFER_OK;
    }
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, softmax_any);
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    return run_softmax_mode(n, in, out, false);
}

cinfer_status cpu_run_softmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(softmax_any(n, in, num_in, out, num_out));
    if (graph_attr_int(n, "cinfer_nan_to_zero", 0)) nan_to_zero(&out[0]);
    return CINFER_OK;
}

cinfer_status cpu_run_log_softmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_log_softmax);
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    return run_softmax_mode(n, in, out, true);
}

/* Hardmax: 1 at the first maximum of each row (a NaN counts as the maximum, as numpy's argmax), else 0. */
#define DEFINE_HARDMAX(NAME, T)                                                                               \
    static void NAME(const T *x, T *y, int64_t outer, int64_t len, int64_t inner) {                           \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * len * inner > CPU_RED_PAR_MIN && outer * inner > 1)") \
        for (int64_t t = 0; t < outer * inner; t++) {                                                         \
            int64_t o = t / inner, i = t % inner;                                                             \
            const T *xr = x + o * len * inner + i;                                                            \
            T *yr = y + o * len * inner + i;                                                                  \
            int64_t best = 0;                                                                                 \
            for (int64_t j = 1; j < len && xr[best * inner] == xr[best * inner]; j++)                         \
                if (xr[j * inner] > xr[best * inner] || xr[j * inner] != xr[j * inner]) best = j;             \
            for (int64_t j = 0; j < len; j++) yr[j * inner] = j == best ? 1 : 0;                              \
        }                                                                                                     \
    }
DEFINE_HARDMAX(hardmax_f32, float)
DEFINE_HARDMAX(hardmax_f64, double)

cinfer_status cpu_run_hardmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_hardmax);
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    reduce_rows r; /* rows along the axis (reduce_compute_softmax: older opsets flatten the tail into the row) */
    CINFER_TRY(reduce_compute_softmax(n, &in[0], &r));
    const int64_t outer = r.outer, len = r.len, inner = r.inner;
    if (outer * len * inner == 0) return CINFER_OK;
    if (dt == CINFER_DTYPE_FLOAT) hardmax_f32(in[0].data, out[0].data, outer, len, inner);
    else hardmax_f64(in[0].data, out[0].data, outer, len, inner);
    return CINFER_OK;
}

/* LpNormalization: x / ||x||_p along the axis (p 1 or 2), 0 where the norm is 0. */
#define DEFINE_LP_NORM(NAME, T)                                                                               \
    static void NAME(const T *x, T *y, int64_t outer, int64_t len, int64_t inner, bool l1) {                  \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * len * inner > CPU_RED_PAR_MIN && outer * inner > 1)") \
        for (int64_t t = 0; t < outer * inner; t++) {                                                         \
            int64_t o = t / inner, i = t % inner;                                                             \
            const T *xr = x + o * len * inner + i;                                                            \
            T *yr = y + o * len * inner + i;                                                                  \
            double s = 0;                                                                                     \
            for (int64_t j = 0; j < len; j++) {                                                               \
                double v = xr[j * inner];                                                                     \
                s += l1 ? fabs(v) : v * v;                                                                    \
            }                                                                                                 \
            double norm = l1 ? s : sqrt(s);                                                                   \
            for (int64_t j = 0; j < len; j++) yr[j * inner] = norm == 0 ? 0 : (T)(xr[j * inner] / norm);      \
        }                                                                                                     \
    }
DEFINE_LP_NORM(lp_norm_f32, float)
DEFINE_LP_NORM(lp_norm_f64, double)

cinfer_status cpu_run_lp_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_lp_norm);
    if (dt != CINFER_DTYPE_FLOAT && dt != CINFER_DTYPE_DOUBLE) return cpu_unsupported_dtype(n, dt);
    reduce_rows r;
    int64_t p;
    CINFER_TRY(reduce_compute_lp_norm(n, &in[0], &r, &p));
    const int64_t outer = r.outer, len = r.len, inner = r.inner;
    if (outer * len * inner == 0) return CINFER_OK;
    if (dt == CINFER_DTYPE_FLOAT) lp_norm_f32(in[0].data, out[0].data, outer, len, inner, p == 1);
    else lp_norm_f64(in[0].data, out[0].data, outer, len, inner, p == 1);
    return CINFER_OK;
}
