/* CPU kernel of Resize: nearest as one index gather (any dtype), linear and cubic as separable 1-D passes. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "core/status.h"
#include "graph/shape/image_params.h"

#define PAR_MIN 32768 /* output elements below which a pass stays on one thread */

/* Per resized axis: for each output position, the first input index of its window is not enough once
 * indices are clamped at the borders, so every tap keeps its own (clamped) index. */
typedef struct axis_taps {
    int64_t in_len, out_len;
    int n;                 /* taps per output position */
    int64_t *idx;          /* [out_len * n] */
    float *coef;           /* [out_len * n]; nearest keeps only idx[x] (n = 1) */
    unsigned char *extrap; /* [out_len]: the position lies outside the crop box (tf_crop_and_resize) */
} axis_taps;

/* Output position y's coordinate in the input (ONNX coordinate_transformation_mode); `outside` is set
 * for tf_crop_and_resize positions outside the input. */
static double source_coord(const image_resize *p, int a, int64_t y, int64_t in_len, int64_t out_len, bool *outside) {
    double scale = p->scale[a], yd = (double)y, in = (double)in_len;
    double out_w = scale * in; /* the unrounded output length */
    *outside = false;
    switch (p->coord) {
    case COORD_ALIGN_CORNERS: return out_w == 1 ? 0.0 : yd * (in - 1) / (out_w - 1);
    case COORD_ASYMMETRIC: return yd / scale;
    case COORD_TF_CROP_AND_RESIZE: {
        double r0 = p->roi_start[a], r1 = p->roi_end[a];
        double x = out_w == 1 ? (r1 - r0) * (in - 1) / 2 : yd * (r1 - r0) * (in - 1) / (out_w - 1);
        x += r0 * (in - 1);
        *outside = x < 0 || x > in - 1;
        return x;
    }
    case COORD_PYTORCH_HALF_PIXEL: return out_w == 1 ? -0.5 : (yd + 0.5) / scale - 0.5;
    case COORD_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)out_len / out_w, center = in / 2;
        return center * (1 - adjustment) + (yd + 0.5) / scale - 0.5;
    }
    case COORD_HALF_PIXEL:
    default: return (yd + 0.5) / scale - 0.5;
    }
}

/* Taps per output position: 2 (nearest picks one of them), 2 (linear), 4 (cubic); antialiased filters
 * widen by 1/scale when downsampling. */
static double cubic_weight(double x, double A) {
    x = fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* Filter weights for a position whose distance from the tap just left of it is `ratio` in (0, 1]. */
static void tap_weights(const image_resize *p, double ratio, double scale, int n, double *w) {
    double A = p->cubic_a, s = scale < 1 ? scale : 1;
    if (p->mode == RESIZE_NEAREST) {
        bool hi;
        if (ratio == 1) hi = true;
        else switch (p->nearest) {
            case NEAREST_ROUND_PREFER_CEIL: hi = ratio >= 0.5; break;
            case NEAREST_FLOOR: hi = false; break;
            case NEAREST_CEIL: hi = true; break;
            case NEAREST_SIMPLE: hi = scale < 1; break;
            case NEAREST_ROUND_PREFER_FLOOR:
            default: hi = ratio > 0.5; break;
            }
        w[0] = hi ? 0 : 1;
        w[1] = hi ? 1 : 0;
        return;
    }
    if (!p->antialias) {
        if (p->mode == RESIZE_LINEAR) {
            w[0] = 1 - ratio;
            w[1] = ratio;
        } else {
            w[0] = cubic_weight(ratio + 1, A);
            w[1] = cubic_weight(ratio, A);
            w[2] = cubic_weight(1 - ratio, A);
            w[3] = cubic_weight(2 - ratio, A);
        }
        return;
    }
    /* antialias: the filter stretched by 1/s, sampled at the taps, normalised */
    int first = 1 - n / 2;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        double arg = ((double)(first + k) - ratio) * s;
        double v = p->mode == RESIZE_LINEAR ? fmax(0.0, fmin(1.0, 1 - fabs(arg))) : cubic_weight(arg, A);
        w[k] = v;
        sum += v;
    }
    if (sum != 0)
        for (int k = 0; k < n; k++) w[k] /= sum;
}

/* Fills the tap table of one axis. For nearest only the chosen index is kept (n becomes 1). */
static void build_taps(const image_resize *p, int a, axis_taps *t) {
    int n = image_resize_tap_count(p, p->scale[a]);
    double w[4096];
    for (int64_t y = 0; y < t->out_len; y++) {
        bool outside = false;
        double x = source_coord(p, a, y, t->in_len, t->out_len, &outside);
        /* a NaN or huge roi must not turn into out-of-range integer conversions */
        if (x != x) {
            x = 0;
            outside = p->coord == COORD_TF_CROP_AND_RESIZE;
        }
        x = fmax(-1e12, fmin(1e12, x));
        t->extrap[y] = outside;
        double fl = floor(x);
        double ratio = x == fl ? 1.0 : x - fl;
        tap_weights(p, ratio, p->scale[a], n, w);
        /* the n taps nearest to x, ties to the lower side (the ONNX reference's window rule) */
        int pad = (n + 1) / 2;
        double xp = x + pad, pf = floor(xp), frac = xp - pf;
        int64_t off = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1)
                                 : (frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1);
        int64_t start = (int64_t)pf + off - pad;
        if (p->exclude_outside && p->mode != RESIZE_NEAREST) {
            double sum = 0;
            for (int k = 0; k < n; k++) {
                int64_t i = start + k;
                if (i < 0 || i >= t->in_len) w[k] = 0;
                sum += w[k];
            }
            if (sum != 0)
                for (int k = 0; k < n; k++) w[k] /= sum;
        }
        if (p->mode == RESIZE_NEAREST) {
            int64_t i = start + (w[1] != 0 ? 1 : 0);
            t->idx[y] = i < 0 ? 0 : i >= t->in_len ? t->in_len - 1 : i;
            continue;
        }
        for (int k = 0; k < n; k++) {
            int64_t i = start + k;
            t->idx[y * n + k] = i < 0 ? 0 : i >= t->in_len ? t->in_len - 1 : i;
            t->coef[y * n + k] = (float)w[k];
        }
    }
    t->n = p->mode == RESIZE_NEAREST ? 1 : n;
}

/* ---------------------------------------------------------------- element conversion */

/* Integers through double lose nothing below 2^53; everything else works in float. */
static bool work_in_double(cinfer_dtype t) {
    return t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_INT32 || t == CINFER_DTYPE_UINT32 ||
           t == CINFER_DTYPE_INT64 || t == CINFER_DTYPE_UINT64;
}

/* Integer outputs round half to even and saturate (the reference's saturate_cast). */
static double clamp_round(double v, double lo, double hi) {
    if (v != v) return 0;
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

#define DEFINE_CONVERT(W)                                                                                     \
    static void load_##W(cinfer_dtype t, const void *src, W *dst, int64_t count) {                           \
        switch (t) {                                                                                          \
        case CINFER_DTYPE_FLOAT: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const float *)src)[i]; break; \
        case CINFER_DTYPE_DOUBLE: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const double *)src)[i]; break; \
        case CINFER_DTYPE_FLOAT16:                                                                            \
            for (int64_t i = 0; i < count; i++) dst[i] = (W)dtype_half_to_float(((const uint16_t *)src)[i]);  \
            break;                                                                                            \
        case CINFER_DTYPE_BFLOAT16:                                                                           \
            for (int64_t i = 0; i < count; i++) dst[i] = (W)dtype_bf16_to_float(((const uint16_t *)src)[i]);  \
            break;                                                                                            \
        case CINFER_DTYPE_INT8: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const int8_t *)src)[i]; break; \
        case CINFER_DTYPE_UINT8: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const uint8_t *)src)[i]; break; \
        case CINFER_DTYPE_INT16: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const int16_t *)src)[i]; break; \
        case CINFER_DTYPE_UINT16: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const uint16_t *)src)[i]; break; \
        case CINFER_DTYPE_INT32: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const int32_t *)src)[i]; break; \
        case CINFER_DTYPE_UINT32: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const uint32_t *)src)[i]; break; \
        case CINFER_DTYPE_INT64: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const int64_t *)src)[i]; break; \
        case CINFER_DTYPE_UINT64: for (int64_t i = 0; i < count; i++) dst[i] = (W)((const uint64_t *)src)[i]; break; \
        default: break;                                                                                       \
        }                                                                                                     \
    }                                                                                                         \
    static void store_##W(cinfer_dtype t, const W *src, void *dst, int64_t count) {                          \
        switch (t) {                                                                                          \
        case CINFER_DTYPE_FLOAT: for (int64_t i = 0; i < count; i++) ((float *)dst)[i] = (float)src[i]; break; \
        case CINFER_DTYPE_DOUBLE: for (int64_t i = 0; i < count; i++) ((double *)dst)[i] = (double)src[i]; break; \
        case CINFER_DTYPE_FLOAT16:                                                                            \
            for (int64_t i = 0; i < count; i++) ((uint16_t *)dst)[i] = dtype_float_to_half((float)src[i]);    \
            break;                                                                                            \
        case CINFER_DTYPE_BFLOAT16:                                                                           \
            for (int64_t i = 0; i < count; i++) ((uint16_t *)dst)[i] = dtype_float_to_bf16((float)src[i]);    \
            break;                                                                                            \
        case CINFER_DTYPE_INT8:                                                                               \
            for (int64_t i = 0; i < count; i++) ((int8_t *)dst)[i] = (int8_t)clamp_round(src[i], -128, 127);  \
            break;                                                                                            \
        case CINFER_DTYPE_UINT8:                                                                              \
            for (int64_t i = 0; i < count; i++) ((uint8_t *)dst)[i] = (uint8_t)clamp_round(src[i], 0, 255);   \
            break;                                                                                            \
        case CINFER_DTYPE_INT16:                                                                              \
            for (int64_t i = 0; i < count; i++) ((int16_t *)dst)[i] = (int16_t)clamp_round(src[i], -32768, 32767); \
            break;                                                                                            \
        case CINFER_DTYPE_UINT16:                                                                             \
            for (int64_t i = 0; i < count; i++) ((uint16_t *)dst)[i] = (uint16_t)clamp_round(src[i], 0, 65535); \
            break;                                                                                            \
        case CINFER_DTYPE_INT32:                                                                              \
            for (int64_t i = 0; i < count; i++)                                                               \
                ((int32_t *)dst)[i] = (int32_t)clamp_round(src[i], -2147483648.0, 2147483647.0);              \
            break;                                                                                            \
        case CINFER_DTYPE_UINT32:                                                                             \
            for (int64_t i = 0; i < count; i++) ((uint32_t *)dst)[i] = (uint32_t)clamp_round(src[i], 0, 4294967295.0); \
            break;                                                                                            \
        case CINFER_DTYPE_INT64:                                                                              \
            for (int64_t i = 0; i < count; i++)                                                               \
                ((int64_t *)dst)[i] = (int64_t)clamp_round(src[i], -9223372036854775808.0, 9223372036854774784.0); \
            break;                                                                                            \
        case CINFER_DTYPE_UINT64:                                                                             \
            for (int64_t i = 0; i < count; i++)                                                               \
                ((uint64_t *)dst)[i] = (uint64_t)clamp_round(src[i], 0, 18446744073709549568.0);              \
            break;                                                                                            \
        default: break;                                                                                       \
        }                                                                                                     \
    }

DEFINE_CONVERT(float)
DEFINE_CONVERT(double)

/* ---------------------------------------------------------------- separable pass */

#define XBLOCK 64 /* output positions per parallel job when the axis is innermost */

/* One 1-D resize along an axis: src viewed as [outer, in_len, inner], dst as [outer, out_len, inner].
 * Innermost axis (inner 1): each output is a dot product of its taps. Otherwise whole rows of `inner`
 * elements combine, which vectorises. */
#define DEFINE_PASS(W)                                                                                        \
    static void pass_##W(const W *src, W *dst, int64_t outer, int64_t inner, const axis_taps *t, W fill) {    \
        const int64_t L = t->out_len, IL = t->in_len;                                                        \
        const int n = t->n;                                                                                   \
        if (inner == 1) {                                                                                     \
            int64_t blocks = (L + XBLOCK - 1) / XBLOCK;                                                       \
            _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * L > PAR_MIN)")                \
            for (int64_t job = 0; job < outer * blocks; job++) {                                              \
                int64_t o = job / blocks, x0 = (job % blocks) * XBLOCK;                                       \
                int64_t x1 = x0 + XBLOCK < L ? x0 + XBLOCK : L;                                               \
                const W *s = src + o * IL;                                                                    \
                W *d = dst + o * L;                                                                           \
                for (int64_t x = x0; x < x1; x++) {                                                           \
                    const int64_t *ix = t->idx + x * n;                                                       \
                    const float *c = t->coef + x * n;                                                         \
                    W acc;                                                                                    \
                    if (n == 2) acc = (W)c[0] * s[ix[0]] + (W)c[1] * s[ix[1]];                                \
                    else if (n == 4)                                                                          \
                        acc = (W)c[0] * s[ix[0]] + (W)c[1] * s[ix[1]] + (W)c[2] * s[ix[2]] + (W)c[3] * s[ix[3]]; \
                    else {                                                                                    \
                        acc = 0;                                                                              \
                        for (int k = 0; k < n; k++) acc += (W)c[k] * s[ix[k]];                                \
                    }                                                                                         \
                    d[x] = t->extrap[x] ? fill : acc;                                                         \
                }                                                                                             \
            }                                                                                                 \
            return;                                                                                           \
        }                                                                                                     \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * L * inner > PAR_MIN)")            \
        for (int64_t job = 0; job < outer * L; job++) {                                                       \
            int64_t o = job / L, x = job % L;                                                                 \
            const W *s = src + o * IL * inner;                                                                \
            W *d = dst + job * inner;                                                                         \
            if (t->extrap[x]) {                                                                               \
                for (int64_t i = 0; i < inner; i++) d[i] = fill;                                              \
                continue;                                                                                     \
            }                                                                                                 \
            const int64_t *ix = t->idx + x * n;                                                               \
            const float *c = t->coef + x * n;                                                                 \
            if (n == 2) {                                                                                     \
                const W *r0 = s + ix[0] * inner, *r1 = s + ix[1] * inner;                                     \
                W c0 = (W)c[0], c1 = (W)c[1];                                                                 \
                if (c0 == 0) for (int64_t i = 0; i < inner; i++) d[i] = r1[i];                                \
                else for (int64_t i = 0; i < inner; i++) d[i] = c0 * r0[i] + c1 * r1[i];                      \
                continue;                                                                                     \
            }                                                                                                 \
            if (n == 4) {                                                                                     \
                const W *r0 = s + ix[0] * inner, *r1 = s + ix[1] * inner, *r2 = s + ix[2] * inner,            \
                        *r3 = s + ix[3] * inner;                                                              \
                W c0 = (W)c[0], c1 = (W)c[1], c2 = (W)c[2], c3 = (W)c[3];                                     \
                for (int64_t i = 0; i < inner; i++) d[i] = c0 * r0[i] + c1 * r1[i] + c2 * r2[i] + c3 * r3[i]; \
                continue;                                                                                     \
            }                                                                                                 \
            for (int64_t i = 0; i < inner; i++) d[i] = 0;                                                     \
            for (int k = 0; k < n; k++) {                                                                     \
                W ck = (W)c[k];                                                                               \
                if (ck == 0) continue;                                                                        \
                const W *row = s + ix[k] * inner;                                                             \
                for (int64_t i = 0; i < inner; i++) d[i] += ck * row[i];                                      \
            }                                                                                                 \
        }                                                                                                     \
    }

DEFINE_PASS(float)
DEFINE_PASS(double)

/* ---------------------------------------------------------------- nearest gather */

/* Writes v as one element of dtype t (the extrapolation value). */
static void store_one(cinfer_dtype t, void *dst, double v) {
    if (work_in_double(t)) store_double(t, &v, dst, 1);
    else {
        float f = (float)v;
        store_float(t, &f, dst, 1);
    }
}

/* One output row of the last axis: element j comes from src[idx[j]] (or the fill value). */
#define DEFINE_GATHER_ROW(NAME, T)                                                                            \
    static void NAME(char *out, const char *src, const int64_t *idx, const unsigned char *ext, int64_t w,     \
                     const void *fill) {                                                                      \
        T *o = (T *)out, f;                                                                                   \
        const T *s = (const T *)src;                                                                          \
        memcpy(&f, fill, sizeof f);                                                                           \
        for (int64_t j = 0; j < w; j++) o[j] = ext[j] ? f : s[idx[j]];                                        \
    }
DEFINE_GATHER_ROW(gather_row8, uint8_t)
DEFINE_GATHER_ROW(gather_row16, uint16_t)
DEFINE_GATHER_ROW(gather_row32, uint32_t)
DEFINE_GATHER_ROW(gather_row64, uint64_t)

#define ROW_CHUNK 64 /* output rows per parallel job */

/* Nearest for every axis at once: out[o] = x[sum_d idx_d[o_d] * stride_d]. Consecutive output rows that
 * read the same input row (upsampling) are copied from the row just written. */
static void gather_nearest(const tensor *x, tensor *y, const axis_taps *taps, const void *fill) {
    int r = y->ndim;
    size_t es = cinfer_dtype_size(x->dtype);
    int64_t in_stride[CINFER_MAX_DIMS];
    tensor_strides(x, in_stride);
    int64_t W = y->dims[r - 1], rows = tensor_numel(y) / W;
    const axis_taps *last = &taps[r - 1];
    const char *src = x->data;
    char *dst = y->data;
    void (*row_fn)(char *, const char *, const int64_t *, const unsigned char *, int64_t, const void *) =
        es == 1 ? gather_row8 : es == 2 ? gather_row16 : es == 4 ? gather_row32 : gather_row64;
    int64_t jobs = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for num_threads(cpu_num_threads()) if (rows * W > PAR_MIN && jobs > 1)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t prev_base = -1;
        bool prev_outside = false;
        int64_t end = (job + 1) * ROW_CHUNK < rows ? (job + 1) * ROW_CHUNK : rows;
        for (int64_t row = job * ROW_CHUNK; row < end; row++) {
            int64_t rem = row, base = 0;
            bool outside = false;
            for (int d = r - 2; d >= 0; d--) {
                int64_t i = rem % y->dims[d];
                rem /= y->dims[d];
                base += taps[d].idx[i] * in_stride[d];
                outside |= taps[d].extrap[i] != 0;
            }
            char *out = dst + (size_t)(row * W) * es;
            if (row > job * ROW_CHUNK && base == prev_base && outside == prev_outside) {
                memcpy(out, out - (size_t)W * es, (size_t)W * es);
                continue;
            }
            prev_base = base;
            prev_outside = outside;
            if (outside) {
                for (int64_t j = 0; j < W; j++) memcpy(out + (size_t)j * es, fill, es);
            } else {
                row_fn(out, src + (size_t)base * es, last->idx, last->extrap, W, fill);
            }
        }
    }
}

/* ---------------------------------------------------------------- kernel */

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

cinfer_status cpu_run_resize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

cinfer_status cpu_run_resize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    image_resize p;
    CINFER_TRY(image_compute_resize(n, in, num_in, &p));
    int r = x->ndim;
    if (tensor_numel(y) == 0) return CINFER_OK;
    size_t es = cinfer_dtype_size(x->dtype);
    if (es == 0) return cpu_unsupported_dtype(n, x->dtype);
    bool nearest = p.mode == RESIZE_NEAREST;
    if (!nearest && !image_resize_interpolable(x->dtype)) return cpu_unsupported_dtype(n, x->dtype);

    /* scratch: tap tables of every axis (nearest: all axes, identity ones included), then two work buffers */
    bool dbl = work_in_double(x->dtype);
    size_t ws = dbl ? sizeof(double) : sizeof(float);
    size_t table_bytes = 0;
    int ntaps[CINFER_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        ntaps[d] = 0;
        if (!p.resized[d] && !nearest) continue;
        ntaps[d] = nearest ? 1 : image_resize_tap_count(&p, p.scale[d]);
        if (!nearest && ntaps[d] > 4096)
            return core_error(CINFER_ERR_UNSUPPORTED, "Resize node '%s': the antialias filter of axis %d needs %d taps",
                              n->name, d, ntaps[d]);
        size_t cnt = (size_t)y->dims[d] * (size_t)(nearest ? 2 : ntaps[d]);
        table_bytes += align64(cnt * sizeof(int64_t)) + align64(cnt * sizeof(float)) + align64((size_t)y->dims[d]);
    }
    /* pass order (image_resize_pass_order): shrinking axes first, then the innermost first */
    int order[CINFER_MAX_DIMS], passes = image_resize_pass_order(&p, order);
    int64_t cur[CINFER_MAX_DIMS], buf_elems = 0;
    for (int d = 0; d < r; d++) cur[d] = x->dims[d];
    bool convert_in = (x->dtype != (dbl ? CINFER_DTYPE_DOUBLE : CINFER_DTYPE_FLOAT));
    if (convert_in && passes > 0) buf_elems = tensor_numel(x);
    for (int j = 0; j < passes; j++) {
        cur[order[j]] = y->dims[order[j]];
        int64_t sz = 1;
        for (int k = 0; k < r; k++) sz *= cur[k];
        if (sz > buf_elems) buf_elems = sz;
    }
    size_t buf_bytes = align64((size_t)buf_elems * ws);
    char *scratch = cpu_scratch(table_bytes + 2 * buf_bytes + 64);
    if (!scratch)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "Resize node '%s': out of memory for scratch", n->name);
    axis_taps taps[CINFER_MAX_DIMS];
    char *cursor = scratch;
    for (int d = 0; d < r; d++) {
        if (!ntaps[d]) continue;
        size_t cnt = (size_t)y->dims[d] * (size_t)(nearest ? 2 : ntaps[d]);
        taps[d].in_len = x->dims[d];
        taps[d].out_len = y->dims[d];
        taps[d].idx = (int64_t *)cursor;
        cursor += align64(cnt * sizeof(int64_t));
        taps[d].coef = (float *)cursor;
        cursor += align64(cnt * sizeof(float));
        taps[d].extrap = (unsigned char *)cursor;
        cursor += align64((size_t)y->dims[d]);
        build_taps(&p, d, &taps[d]);
    }

    if (nearest) {
        unsigned char fill[8] = {0};
        store_one(x->dtype, fill, p.extrapolation_value);
        gather_nearest(x, y, taps, fill);
        return CINFER_OK;
    }
    if (passes == 0) {
        if (y->data != x->data) memcpy(y->data, x->data, tensor_nbytes(x));
        return CINFER_OK;
    }

    void *bufs[2] = {cursor, cursor + buf_bytes};
    int which = 0;
    const void *src = x->data;
    if (convert_in) {
        if (dbl) load_double(x->dtype, x->data, bufs[0], tensor_numel(x));
        else load_float(x->dtype, x->data, bufs[0], tensor_numel(x));
        src = bufs[0];
        which = 1;
    }
    for (int d = 0; d < r; d++) cur[d] = x->dims[d];
    for (int j = 0; j < passes; j++) {
        int a = order[j];
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < a; k++) outer *= cur[k];
        for (int k = a + 1; k < r; k++) inner *= cur[k];
        bool final = j == passes - 1 && !convert_in;
        void *dst = final ? y->data : bufs[which];
        if (dbl) pass_double(src, dst, outer, inner, &taps[a], (double)p.extrapolation_value);
        else pass_float(src, dst, outer, inner, &taps[a], p.extrapolation_value);
        cur[a] = y->dims[a];
        src = dst;
        which ^= 1;
        if (final) return CINFER_OK;
    }
    if (dbl) store_double(y->dtype, src, y->data, tensor_numel(y));
    else store_float(y->dtype, src, y->data, tensor_numel(y));
    return CINFER_OK;
}
