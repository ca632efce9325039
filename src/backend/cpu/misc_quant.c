/* CPU kernels of QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked) and DynamicQuantizeLinear. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"

#define PAR_MIN 65536 /* elements below which a kernel stays on one thread */

cinfer_status cpu_run_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_dequantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_dynamic_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* Where the scale of element (o, a, i) of x viewed as [outer, len, inner] around the quantization axis
 * lives: per tensor always 0; per axis a; blocked (o * blocks + a / block) * inner + i. */
typedef struct quant_layout {
    int64_t outer, len, inner;
    int64_t block; /* 0: per tensor or per axis */
    bool per_tensor;
} quant_layout;

static void quant_layout_init(const graph_node *n, const tensor *x, const tensor *scale, quant_layout *q) {
    q->block = n->opset >= 21 ? graph_attr_int(n, "block_size", 0) : 0;
    q->per_tensor = q->block == 0 && tensor_numel(scale) == 1 && scale->ndim <= 1;
    int64_t axis = graph_attr_int(n, "axis", 1);
    if (axis < 0) axis += x->ndim;
    if (q->per_tensor || axis < 0 || axis >= x->ndim) {
        q->outer = 1;
        q->len = 1;
        q->inner = tensor_numel(x);
        q->per_tensor = true;
        return;
    }
    q->outer = q->inner = 1;
    for (int d = 0; d < axis; d++) q->outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) q->inner *= x->dims[d];
    q->len = x->dims[axis];
}

static inline int64_t quant_param_index(const quant_layout *q, int64_t o, int64_t a, int64_t i) {
    if (q->per_tensor) return 0;
    if (q->block == 0) return a;
    int64_t blocks = (q->len + q->block - 1) / q->block;
    return (o * blocks + a / q->block) * q->inner + i;
}

/* Per row (o, a) of x: where its scales start and how they step along the inner positions (blocked
 * quantization keeps one scale per inner position; the others one per row). */
static inline int64_t quant_row_param(const quant_layout *q, int64_t o, int64_t a, int64_t *step) {
    *step = q->block != 0 && !q->per_tensor ? 1 : 0;
    return quant_param_index(q, o, a, 0);
}

/* Rounds half to even for |v| < 2^22 without a libm call, so the loops vectorise (default rounding mode). */
static inline float round_even(float v) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (v + magic) - magic;
}

/* v / s rounded half to even, plus z, saturated. Clamping first (NaN goes low, as the reference's int
 * cast of NaN does) keeps the rounding trick exact. */
static inline float quant_one(float v, float s, float z, float lo, float hi) {
    v = v / s;
    v = cpu_select_f32(!(v > -1048576.0f), -1048576.0f, v);
    v = cpu_select_f32(v > 1048576.0f, 1048576.0f, v);
    v = round_even(v) + z;
    v = cpu_select_f32(v < lo, lo, v);
    return cpu_select_f32(v > hi, hi, v);
}

#define DEFINE_QUANT_F32(NAME, T, LO, HI)                                                                     \
    static void NAME(const float *x, const float *scale, const T *zp, T *y, const quant_layout *q) {          \
        int64_t rows = q->outer * q->len, inner = q->inner;                                                   \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(rows * inner > PAR_MIN)")                 \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            int64_t step, p0 = quant_row_param(q, r / q->len, r % q->len, &step);                            \
            const float *xr = x + r * inner;                                                                  \
            T *yr = y + r * inner;                                                                            \
            if (step == 0) { /* one scale for the row: a loop the compiler vectorises */                     \
                float sc = scale[p0], z = zp ? (float)zp[p0] : 0.0f;                                          \
                for (int64_t i = 0; i < inner; i++) yr[i] = (T)(int32_t)quant_one(xr[i], sc, z, LO, HI);     \
            } else {                                                                                          \
                for (int64_t i = 0; i < inner; i++)                                                           \
                    yr[i] = (T)(int32_t)quant_one(xr[i], scale[p0 + i], zp ? (float)zp[p0 + i] : 0.0f, LO, HI); \
            }                                                                                                 \
        }                                                                                                     \
    }
DEFINE_QUANT_F32(quantize_f32_u8, uint8_t, 0, 255)
DEFINE_QUANT_F32(quantize_f32_i8, int8_t, -128, 127)
DEFINE_QUANT_F32(quantize_f32_u16, uint16_t, 0, 65535)
DEFINE_QUANT_F32(quantize_f32_i16, int16_t, -32768, 32767)

static void quantize_f32(const float *x, const float *scale, const void *zp, void *y, cinfer_dtype t,
                         const quant_layout *q) {
    switch (t) {
    case CINFER_DTYPE_UINT8: quantize_f32_u8(x, scale, zp, y, q); break;
    case CINFER_DTYPE_INT8: quantize_f32_i8(x, scale, zp, y, q); break;
    case CINFER_DTYPE_UINT16: quantize_f32_u16(x, scale, zp, y, q); break;
    case CINFER_DTYPE_INT16: quantize_f32_i16(x, scale, zp, y, q); break;
    default: break;
    }
}

#define DEFINE_DEQUANT_F32(NAME, T)                                                                           \
    static void NAME(const T *x, const float *scale, const T *zp, float *y, const quant_layout *q) {          \
        int64_t rows = q->outer * q->len, inner = q->inner;                                                   \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(rows * inner > PAR_MIN)")                 \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            int64_t step, p0 = quant_row_param(q, r / q->len, r % q->len, &step);                            \
            const T *xr = x + r * inner;                                                                      \
            float *yr = y + r * inner;                                                                        \
            if (step == 0) {                                                                                  \
                float sc = scale[p0], z = zp ? (float)zp[p0] : 0.0f;                                          \
                for (int64_t i = 0; i < inner; i++) yr[i] = ((float)xr[i] - z) * sc;                         \
            } else {                                                                                          \
                for (int64_t i = 0; i < inner; i++)                                                           \
                    yr[i] = ((float)xr[i] - (zp ? (float)zp[p0 + i] : 0.0f)) * scale[p0 + i];                 \
            }                                                                                                 \
        }                                                                                                     \
    }
DEFINE_DEQUANT_F32(dequantize_u8, uint8_t)
DEFINE_DEQUANT_F32(dequantize_i8, int8_t)
DEFINE_DEQUANT_F32(dequantize_u16, uint16_t)
DEFINE_DEQUANT_F32(dequantize_i16, int16_t)

static void dequantize_f32(const void *x, cinfer_dtype t, const float *scale, const void *zp, float *y,
                           const quant_layout *q) {
    switch (t) {
    case CINFER_DTYPE_UINT8: dequantize_u8(x, scale, zp, y, q); break;
    case CINFER_DTYPE_INT8: dequantize_i8(x, scale, zp, y, q); break;
    case CINFER_DTYPE_UINT16: dequantize_u16(x, scale, zp, y, q); break;
    case CINFER_DTYPE_INT16: dequantize_i16(x, scale, zp, y, q); break;
    default: break;
    }
}

static double load_any(const tensor *t, int64_t i) { return tensor_get_double(t, i); }

static bool quant_range(cinfer_dtype t, double *lo, double *hi) {
    switch (t) {
    case CINFER_DTYPE_UINT8: *lo = 0; *hi = 255; return true;
    case CINFER_DTYPE_INT8: *lo = -128; *hi = 127; return true;
    case CINFER_DTYPE_UINT16: *lo = 0; *hi = 65535; return true;
    case CINFER_DTYPE_INT16: *lo = -32768; *hi = 32767; return true;
    default: return false;
    }
}

static void store_int(void *p, cinfer_dtype t, int64_t i, double v) {
    switch (t) {
    case CINFER_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case CINFER_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case CINFER_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case CINFER_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    default: break;
    }
}

/* y = saturate(round_half_even(x / scale) + zero_point). The division runs in x's precision: float for
 * float32 and the half types (rounded back to the half type when scale has it too), double otherwise. */
cinfer_status cpu_run_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0], *scale = &in[1];
    const tensor *zp = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    double lo, hi;
    if (!quant_range(y->dtype, &lo, &hi)) return cpu_unsupported_dtype(n, y->dtype);
    quant_layout q;
    quant_layout_init(n, x, scale, &q);
    if (x->dtype == CINFER_DTYPE_FLOAT && scale->dtype == CINFER_DTYPE_FLOAT) {
        quantize_f32(x->data, scale->data, zp ? zp->data : NULL, y->data, y->dtype, &q);
        return CINFER_OK;
    }
    bool in_float = x->dtype == CINFER_DTYPE_FLOAT || x->dtype == CINFER_DTYPE_FLOAT16 ||
                    x->dtype == CINFER_DTYPE_BFLOAT16;
    int round_half = scale->dtype == x->dtype ? (x->dtype == CINFER_DTYPE_FLOAT16 ? 1
                                                 : x->dtype == CINFER_DTYPE_BFLOAT16 ? 2 : 0) : 0;
    int64_t rows = q.outer * q.len;
#pragma omp parallel for num_threads(cpu_num_threads()) if (tensor_numel(x) > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r / q.len, a = r % q.len;
        for (int64_t i = 0; i < q.inner; i++) {
            int64_t e = r * q.inner + i, p = quant_param_index(&q, o, a, i);
            double v;
            if (in_float) {
                float f = (float)load_any(x, e) / (float)load_any(scale, p);
                if (round_half == 1) f = dtype_half_to_float(dtype_float_to_half(f));
                else if (round_half == 2) f = dtype_bf16_to_float(dtype_float_to_bf16(f));
                v = f;
            } else {
                v = load_any(x, e) / load_any(scale, p);
            }
            v = nearbyint(v);
            if (v != v) v = 0;
            if (zp) v += load_any(zp, p);
            store_int(y->data, y->dtype, e, v < lo ? lo : v > hi ? hi : v);
        }
    }
    return CINFER_OK;
}

/* y = (x - zero_point) * scale, in float (double for int32 x), rounded to the output dtype. */
cinfer_status cpu_run_dequantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0], *scale = &in[1];
    const tensor *zp = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    quant_layout q;
    quant_layout_init(n, x, scale, &q);
    if (scale->dtype == CINFER_DTYPE_FLOAT && y->dtype == CINFER_DTYPE_FLOAT && x->dtype != CINFER_DTYPE_INT32) {
        dequantize_f32(x->data, x->dtype, scale->data, zp ? zp->data : NULL, y->data, &q);
        return CINFER_OK;
    }
    bool wide = x->dtype == CINFER_DTYPE_INT32 || y->dtype == CINFER_DTYPE_DOUBLE;
    int64_t rows = q.outer * q.len;
#pragma omp parallel for num_threads(cpu_num_threads()) if (tensor_numel(x) > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r / q.len, a = r % q.len;
        for (int64_t i = 0; i < q.inner; i++) {
            int64_t e = r * q.inner + i, p = quant_param_index(&q, o, a, i);
            double d = (double)tensor_get_int(x, e) - (zp ? (double)tensor_get_int(zp, p) : 0.0);
            double v = wide ? d * load_any(scale, p) : (double)((float)d * (float)load_any(scale, p));
            cpu_store_f64(y->data, y->dtype, e, v);
        }
    }
    return CINFER_OK;
}

/* uint8 quantization over the range [min(0, min x), max(0, max x)], in float32 like the reference. */
cinfer_status cpu_run_dynamic_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    const tensor *x = &in[0];
    if (x->dtype != CINFER_DTYPE_FLOAT) return cpu_unsupported_dtype(n, x->dtype);
    const float *xs = x->data;
    int64_t count = tensor_numel(x);
    /* min and max over integer keys that order like the floats (sign-magnitude turned two's complement):
     * integer max/min vectorise, float ones do not under trapping math. Starting at 0 takes in the 0. */
    int32_t kmx = 0, kmn = 0;
#pragma omp parallel for num_threads(cpu_num_threads()) if (count > PAR_MIN) reduction(max : kmx) reduction(min : kmn)
    for (int64_t i = 0; i < count; i++) {
        int32_t b;
        memcpy(&b, &xs[i], 4);
        int32_t k = b ^ ((b >> 31) & 0x7fffffff);
        kmx = k > kmx ? k : kmx;
        kmn = k < kmn ? k : kmn;
    }
    float mx, mn;
    kmx ^= (kmx >> 31) & 0x7fffffff;
    kmn ^= (kmn >> 31) & 0x7fffffff;
    memcpy(&mx, &kmx, 4);
    memcpy(&mn, &kmn, 4);
    float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    float zp = 0.0f - mn / scale;
    zp = zp < 0 ? 0 : zp > 255 ? 255 : zp;
    float zpi = nearbyintf(zp);
    uint8_t *y = out[0].data;
#pragma omp parallel for num_threads(cpu_num_threads()) if (count > PAR_MIN)
    for (int64_t i = 0; i < count; i++) {
        y[i] = (uint8_t)(int32_t)quant_one(xs[i], scale, zpi, 0.0f, 255.0f);
    }
    if (num_out > 1 && out[1].data) *(float *)out[1].data = scale;
    if (num_out > 2 && out[2].data) *(uint8_t *)out[2].data = (uint8_t)zpi;
    return CINFER_OK;
}
