/* CPU kernels of the conv family: Conv, ConvTranspose, BatchNormalization and the pools (ConvInteger and QLinearConv
 * in conv_quant.c). */

/* Conv runs the direct kernel of conv_direct.c where the shape suits it, else im2col + sgemm (X itself
 * for 1x1 convs), and a direct loop for depthwise; ConvTranspose runs sgemm + col2im. A Relu the graph
 * optimiser folded in ("cinfer_fused_relu") is applied while each output block is still in cache. All
 * kernels compute in float32; double, float16, bfloat16 (and int8/uint8 for MaxPool) go through float32
 * staging copies. Spatial ranks 1-3 run as 3-D with leading size-1 dims, so one loop nest serves them all
 * and the innermost loop always walks the last (contiguous) dim. Scratch: one cpu_scratch request per
 * call (see `scratch`). */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/conv_direct.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"
#include "graph/shape/conv_params.h"

cinfer_status cpu_run_qconv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* Work (elements touched) below which a kernel stays on the calling thread: a fork/join with a worker
 * that has to wake up (or is preempted on a busy machine) costs more than such small loops save. */
#define PAR_MIN_WORK ((int64_t)1 << 17)

/* Conv builds its patch matrix in blocks of about this many floats (1 MiB: within a core's L2). */
#ifndef CONV_BLOCK_FLOATS
#define CONV_BLOCK_FLOATS ((int64_t)1 << 18)
#endif

static int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/* The indices i in [0, count) with 0 <= i*s + off < limit, as [*lo, *hi). */
static void valid_range(int64_t count, int64_t s, int64_t off, int64_t limit, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : ceil_div(-off, s);
    int64_t h = ceil_div(limit - off, s);
    if (l > count) l = count;
    if (h > count) h = count;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

static cinfer_status out_of_memory(const graph_node *n) {
    return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate scratch memory", n->op_type, n->name);
}

/* ---- scratch memory ---- */

/* Every kernel call makes one cpu_scratch request and carves its regions out of it at 64-byte offsets.
 * The float32 staging of other dtypes runs the kernel twice: once to size its regions (`measure`), then
 * for real on the tail of the one request that also holds the staged copies. */
typedef struct scratch {
    bool measure; /* record `size` and return before touching any tensor data */
    size_t size;
    char *base; /* run on this region (staging took the request); NULL: request one */
} scratch;

#define SCRATCH_ALIGN ((size_t)64)
static size_t align_up(size_t bytes) { return (bytes + SCRATCH_ALIGN - 1) & ~(SCRATCH_ALIGN - 1); }

/* Hands out regions of the given sizes (NULL for size 0). Returns true when the kernel must return *st
 * now: in measure mode (after recording the size) or when the memory cannot be had. */
static bool scratch_take(const graph_node *n, scratch *sc, const size_t *bytes, void **regions, int count,
                         cinfer_status *st) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += align_up(bytes[i]);
    *st = CINFER_OK;
    if (sc->measure) {
        sc->size = total;
        return true;
    }
    char *base = sc->base;
    if (!base && total > 0) {
        base = cpu_scratch(total);
        if (!base) {
            *st = out_of_memory(n);
            return true;
        }
    }
    for (int i = 0; i < count; i++) {
        regions[i] = bytes[i] ? base : NULL;
        if (bytes[i]) base += align_up(bytes[i]); /* base is NULL when every region is empty */
    }
    return false;
}

/* For kernels without scratch: true (return CINFER_OK) in measure mode. */
static bool scratch_measuring(scratch *sc) {
    if (sc->measure) sc->size = 0;
    return sc->measure;
}

/* ---- float32 staging for the other dtypes ---- */

static bool staged_dtype(cinfer_dtype t) {
    return t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16 ||
           t == CINFER_DTYPE_INT8 || t == CINFER_DTYPE_UINT8;
}

static void stage_in(const tensor *t, float *f) {
    int64_t cnt = tensor_numel(t);
    switch (t->dtype) {
    case CINFER_DTYPE_DOUBLE: for (int64_t i = 0; i < cnt; i++) f[i] = (float)((const double *)t->data)[i]; break;
    case CINFER_DTYPE_FLOAT16:
    case CINFER_DTYPE_BFLOAT16: cpu_convert_half_to_float(t->dtype, t->data, f, cnt); break;
    case CINFER_DTYPE_INT8: for (int64_t i = 0; i < cnt; i++) f[i] = ((const int8_t *)t->data)[i]; break;
    case CINFER_DTYPE_UINT8: for (int64_t i = 0; i < cnt; i++) f[i] = ((const uint8_t *)t->data)[i]; break;
    default: break;
    }
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

static void stage_out(tensor *t, const float *f) {
    int64_t cnt = tensor_numel(t);
    switch (t->dtype) {
    case CINFER_DTYPE_DOUBLE: for (int64_t i = 0; i < cnt; i++) ((double *)t->data)[i] = f[i]; break;
    case CINFER_DTYPE_FLOAT16:
    case CINFER_DTYPE_BFLOAT16: cpu_convert_float_to_half(t->dtype, f, t->data, cnt); break;
    case CINFER_DTYPE_INT8:
        for (int64_t i = 0; i < cnt; i++) ((int8_t *)t->data)[i] = (int8_t)lrintf(clampf(f[i], -128.0f, 127.0f));
        break;
    case CINFER_DTYPE_UINT8:
        for (int64_t i = 0; i < cnt; i++) ((uint8_t *)t->data)[i] = (uint8_t)lrintf(clampf(f[i], 0.0f, 255.0f));
        break;
    default: break;
    }
}

/* A float32 kernel body: in measure mode it validates, records its scratch size and returns. */
typedef cinfer_status (*impl_fn)(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                 scratch *sc);

#define STAGE_MAX 8

/* Sets s to t, made a float32 view when t needs staging; returns where its copy goes in the staging block
 * (advancing *total past it), or SIZE_MAX when it is used as it is. */
static size_t plan_stage(const tensor *t, tensor *s, size_t *total) {
    *s = *t;
    if (!t->data || !staged_dtype(t->dtype)) return SIZE_MAX;
    size_t off = *total;
    *total += align_up((size_t)tensor_numel(t) * sizeof(float));
    s->dtype = CINFER_DTYPE_FLOAT;
    return off;
}

/* Runs fn with every non-float32 floating (or int8/uint8) input and output replaced by a float32 copy. */
static cinfer_status run_staged(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                impl_fn fn) {
    if (num_in > STAGE_MAX || num_out > STAGE_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': too many operands to stage", n->op_type, n->name);
    tensor sin[STAGE_MAX], sout[STAGE_MAX];
    size_t off_in[STAGE_MAX], off_out[STAGE_MAX], total = 0;
    /* the staged operands keep their data pointers while measuring (present/absent is all that is read) */
    for (int i = 0; i < num_in; i++) off_in[i] = plan_stage(&in[i], &sin[i], &total);
    for (int j = 0; j < num_out; j++) off_out[j] = plan_stage(&out[j], &sout[j], &total);
    scratch sc = {.measure = true, .size = 0, .base = NULL};
    CINFER_TRY(fn(n, sin, num_in, sout, num_out, &sc));
    char *base = cpu_scratch(total + sc.size > 0 ? total + sc.size : 1);
    if (!base) return out_of_memory(n);
    for (int i = 0; i < num_in; i++)
        if (off_in[i] != SIZE_MAX) {
            sin[i].data = base + off_in[i];
            stage_in(&in[i], sin[i].data);
        }
    for (int j = 0; j < num_out; j++)
        if (off_out[j] != SIZE_MAX) sout[j].data = base + off_out[j];
    sc = (scratch){.measure = false, .size = sc.size, .base = base + total};
    cinfer_status st = fn(n, sin, num_in, sout, num_out, &sc);
    if (st == CINFER_OK)
        for (int j = 0; j < num_out; j++)
            if (off_out[j] != SIZE_MAX) stage_out(&out[j], sout[j].data);
    return st;
}

/* Float32 inputs and outputs run directly; the staged dtypes through run_staged; others are refused. */
static cinfer_status dispatch(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                              impl_fn fn) {
    const tensor *x = &in[0];
    if (x->dtype == CINFER_DTYPE_FLOAT) {
        bool mixed = false; /* BatchNormalization may mix float types (T1/T2 from opset 15) */
        for (int i = 0; i < num_in; i++) mixed |= in[i].data && staged_dtype(in[i].dtype);
        for (int j = 0; j < num_out; j++) mixed |= out[j].data && staged_dtype(out[j].dtype);
        if (!mixed) {
            scratch sc = {.measure = false, .size = 0, .base = NULL};
            return fn(n, in, num_in, out, num_out, &sc);
        }
        return run_staged(n, in, num_in, out, num_out, fn);
    }
    return staged_dtype(x->dtype) ? run_staged(n, in, num_in, out, num_out, fn) : cpu_unsupported_dtype(n, x->dtype);
}

/* max(0, .) over `rows` rows of `cols` floats, `ld` apart: the fused Relu of a Conv. */
static void relu_rows(float *y, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * ld;
        for (int64_t i = 0; i < cols; i++) row[i] = row[i] > 0.0f ? row[i] : 0.0f;
    }
}

/* Fills each [plane] of y (planes of `size` floats, channel = plane % m) with the bias or zero. */
static void fill_bias(float *y, int64_t planes, int64_t m, int64_t size, const float *bias, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (planes * size >= PAR_MIN_WORK)
    for (int64_t p = 0; p < planes; p++) {
        float v = bias ? bias[p % m] : 0.0f, *dst = y + p * size;
        for (int64_t i = 0; i < size; i++) dst[i] = v;
    }
}

/* ---- Conv ---- */

/* col[(c, kd, kh, kw), q*W + ow] = x[c, od*s - p + kd*d, oh*s - p + kh*d, ow*s - p + kw*d] (0 in the
 * padding) for the output rows q = od*H + oh in [q0, q1); a row of col holds (q1 - q0) * W values. */
static void im2col(const float *x, int64_t channels, const conv_geom *g, const int64_t *ranges, int64_t q0, int64_t q1,
                   float *col, int threads) {
    const int64_t w = g->out[2], ldc = (q1 - q0) * w, out1 = g->out[1], k1 = g->k[1], k2 = g->k[2];
    const int64_t heads = channels * g->k[0] * k1; /* (c, kd, kh): each owns k2 consecutive rows of col */
    const int64_t *kw_lo = ranges, *kw_hi = ranges + k2, *kh_lo = ranges + 2 * k2, *kh_hi = kh_lo + k1;
#pragma omp parallel for num_threads(threads) schedule(static) if (heads * k2 * ldc >= PAR_MIN_WORK)
    for (int64_t head = 0; head < heads; head++) {
        const int64_t c = head / (g->k[0] * k1), kd = (head / k1) % g->k[0], kh = head % k1;
        const float *xc = x + c * g->in_size;
        for (int64_t kw = 0; kw < k2; kw++) {
            const int64_t r = head * k2 + kw;
            float *dst = col + r * ldc;
            const int64_t off = kw * g->d[2] - g->pb[2], lo = kw_lo[kw], hi = kw_hi[kw];
            /* unit strides in the last two dims and rows as long as the input's: the valid rows of one depth
             * slice are one contiguous run of X, copied at once; the padding columns are zeroed afterwards
             * (they picked up the ends of neighbouring rows) */
            const bool runs = g->s[1] == 1 && g->s[2] == 1 && w == g->in[2] && hi > lo;
            const int64_t oh_lo = kh_lo[kh], oh_hi = kh_hi[kh];
            for (int64_t q = q0; q < q1;) {
                const int64_t od = q / out1, oh_a = q % out1;
                const int64_t oh_b = oh_a + (q1 - q) < out1 ? oh_a + (q1 - q) : out1;
                const int64_t id = od * g->s[0] - g->pb[0] + kd * g->d[0];
                float *dplane = dst + (q - q0) * w; /* output row oh_a */
                q += oh_b - oh_a;
                if (id < 0 || id >= g->in[0]) {
                    memset(dplane, 0, (size_t)((oh_b - oh_a) * w) * sizeof(float));
                    continue;
                }
                const float *xplane = xc + id * g->in[1] * g->in[2];
                if (runs) {
                    const int64_t a = oh_lo > oh_a ? oh_lo : oh_a, b = oh_hi < oh_b ? oh_hi : oh_b;
                    if (b <= a) {
                        memset(dplane, 0, (size_t)((oh_b - oh_a) * w) * sizeof(float));
                        continue;
                    }
                    const int64_t ih0 = a + kh * g->d[1] - g->pb[1];
                    memset(dplane, 0, (size_t)((a - oh_a) * w + lo) * sizeof(float));
                    memcpy(dplane + (a - oh_a) * w + lo, xplane + ih0 * g->in[2] + lo + off,
                           (size_t)((b - a - 1) * w + hi - lo) * sizeof(float));
                    for (int64_t oh = a; oh < b; oh++) {
                        float *drow = dplane + (oh - oh_a) * w;
                        for (int64_t ow = 0; ow < lo; ow++) drow[ow] = 0.0f;
                        for (int64_t ow = hi; ow < w; ow++) drow[ow] = 0.0f;
                    }
                    memset(dplane + (b - 1 - oh_a) * w + hi, 0, (size_t)((oh_b - b + 1) * w - hi) * sizeof(float));
                    continue;
                }
                for (int64_t oh = oh_a; oh < oh_b; oh++) {
                    const int64_t ih = oh * g->s[1] - g->pb[1] + kh * g->d[1];
                    float *drow = dplane + (oh - oh_a) * w;
                    if (ih < 0 || ih >= g->in[1]) {
                        memset(drow, 0, (size_t)w * sizeof(float));
                        continue;
                    }
                    const float *xs = xplane + ih * g->in[2] + off;
                    for (int64_t ow = 0; ow < lo; ow++) drow[ow] = 0.0f;
                    if (g->s[2] == 1) {
                        if (hi > lo) memcpy(drow + lo, xs + lo, (size_t)(hi - lo) * sizeof(float));
                    } else if (g->s[2] == 2) { /* constant stride: vectorises */
                        for (int64_t ow = lo; ow < hi; ow++) drow[ow] = xs[2 * ow];
                    } else {
                        const int64_t s2 = g->s[2];
                        for (int64_t ow = lo; ow < hi; ow++) drow[ow] = xs[ow * s2];
                    }
                    for (int64_t ow = hi; ow < w; ow++) drow[ow] = 0.0f;
                }
            }
        }
    }
}

/* Depthwise 3x3 (2-D, no dilation, row stride 1 or 2), one output row in one pass: the interior outputs
 * take all nine taps in registers; rows outside the input read the zero row `zrow`. False when the
 * window does not fit. */
#define DW_LOOP(S)                                                                                         \
    for (int64_t ow = ilo; ow < ihi; ow++) {                                                               \
        const int64_t o = ow * (S) - pb2;                                                                  \
        yrow[ow] += w0 * r0[o] + w1 * r0[o + 1] + w2 * r0[o + 2] + w3 * r1[o] + w4 * r1[o + 1] +          \
                    w5 * r1[o + 2] + w6 * r2[o] + w7 * r2[o + 1] + w8 * r2[o + 2];                         \
    }
static bool depthwise_row_3x3(const float *xc, const float *wm, float *yrow, const conv_geom *g, int64_t oh,
                              const int64_t *kw_lo, const int64_t *kw_hi, const float *zrow) {
    const int64_t s2 = g->s[2], pb2 = g->pb[2], in2 = g->in[2], out2 = g->out[2];
    if (g->k[0] != 1 || g->k[1] != 3 || g->k[2] != 3 || g->d[1] != 1 || g->d[2] != 1 || (s2 != 1 && s2 != 2))
        return false;
    const float *r[3];
    float wk[9];
    for (int kh = 0; kh < 3; kh++) {
        int64_t ih = oh * g->s[1] - g->pb[1] + kh;
        bool in = ih >= 0 && ih < g->in[1];
        r[kh] = in ? xc + ih * in2 : zrow;
        for (int kw = 0; kw < 3; kw++) wk[kh * 3 + kw] = in ? wm[kh * 3 + kw] : 0.0f;
    }
    const float *r0 = r[0], *r1 = r[1], *r2 = r[2];
    const float w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3], w4 = wk[4], w5 = wk[5], w6 = wk[6], w7 = wk[7],
                w8 = wk[8];
    int64_t ilo = kw_lo[0] > kw_lo[2] ? kw_lo[0] : kw_lo[2], ihi = kw_hi[0] < kw_hi[2] ? kw_hi[0] : kw_hi[2];
    if (ilo < kw_lo[1]) ilo = kw_lo[1];
    if (ihi > kw_hi[1]) ihi = kw_hi[1];
    if (ihi < ilo) ihi = ilo;
    for (int64_t ow = 0; ow < out2; ow++) { /* edge outputs, tap by tap */
        if (ow == ilo) ow = ihi;
        if (ow >= out2) break;
        float acc = 0.0f;
        for (int kw = 0; kw < 3; kw++)
            if (ow >= kw_lo[kw] && ow < kw_hi[kw]) {
                int64_t iw = ow * s2 - pb2 + kw;
                acc += wk[kw] * r0[iw] + wk[3 + kw] * r1[iw] + wk[6 + kw] * r2[iw];
            }
        yrow[ow] += acc;
    }
    if (s2 == 1) DW_LOOP(1)
    else DW_LOOP(2)
    return true;
}

/* One input channel per group (depthwise): direct loop per output plane, row by row so the output row
 * stays in L1 from its bias through every tap to the fused Relu. kw_lo/kw_hi: per tap of the last dim, the
 * outputs whose input lies inside the row. */
static void conv_depthwise(const float *x, const float *w, const float *bias, float *y, int64_t batch, int64_t c_in,
                           int64_t m_out, const conv_geom *g, const int64_t *kw_lo, const int64_t *kw_hi,
                           const float *zrow, bool relu, int threads) {
    const int64_t per_group = m_out / c_in;
#pragma omp parallel for num_threads(threads) schedule(static) \
    if (batch * m_out * g->out_size * g->k_size >= PAR_MIN_WORK)
    for (int64_t p = 0; p < batch * m_out; p++) {
        const int64_t nidx = p / m_out, m = p % m_out, s2 = g->s[2];
        const float *xc = x + (nidx * c_in + m / per_group) * g->in_size;
        const float *wm = w + m * g->k_size;
        const float bv = bias ? bias[m] : 0.0f;
        float *yc = y + p * g->out_size;
        for (int64_t od = 0; od < g->out[0]; od++)
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                float *yrow = yc + (od * g->out[1] + oh) * g->out[2];
                for (int64_t ow = 0; ow < g->out[2]; ow++) yrow[ow] = bv;
                if (!zrow || !depthwise_row_3x3(xc, wm, yrow, g, oh, kw_lo, kw_hi, zrow))
                    for (int64_t kd = 0; kd < g->k[0]; kd++) {
                        int64_t id = od * g->s[0] - g->pb[0] + kd * g->d[0];
                        if (id < 0 || id >= g->in[0]) continue;
                        for (int64_t kh = 0; kh < g->k[1]; kh++) {
                            int64_t ih = oh * g->s[1] - g->pb[1] + kh * g->d[1];
                            if (ih < 0 || ih >= g->in[1]) continue;
                            const float *xrow = xc + (id * g->in[1] + ih) * g->in[2];
                            const float *wrow = wm + (kd * g->k[1] + kh) * g->k[2];
                            for (int64_t kw = 0; kw < g->k[2]; kw++) {
                                const float wv = wrow[kw];
                                const float *xs = xrow + kw * g->d[2] - g->pb[2];
                                const int64_t lo = kw_lo[kw], hi = kw_hi[kw];
                                if (s2 == 1)
                                    for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += wv * xs[ow];
                                else if (s2 == 2)
                                    for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += wv * xs[2 * ow];
                                else
                                    for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += wv * xs[ow * s2];
                            }
                        }
                    }
                if (relu) relu_rows(yrow, 1, g->out[2], 0);
            }
    }
}

/* The direct kernel while (stream positions it computes) / (outputs) stays under this: im2col + sgemm
 * spends about that much more on building and packing the patch matrix. */
#ifndef CONV_DIRECT_MAX_RATIO
#define CONV_DIRECT_MAX_RATIO 1.5
#endif
/* Each tile of the direct kernel reads all of the group's weights: past about L2 size they would stream
 * from memory, where sgemm's blocking does better. */
#ifndef CONV_DIRECT_MAX_WEIGHT_BYTES
#define CONV_DIRECT_MAX_WEIGHT_BYTES ((int64_t)1 << 20)
#endif
/* 1x1 convs without padding or stride need no patch matrix: sgemm reads X itself */
#ifndef CONV_DIRECT_MAX_RATIO_1X1
#define CONV_DIRECT_MAX_RATIO_1X1 1.2
#endif

static cinfer_status conv_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                               scratch *sc) {
    (void)num_out;
    const tensor *x = &in[0], *w = &in[1];
    const tensor *b = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    if (w->dtype != CINFER_DTYPE_FLOAT || (b && b->dtype != CINFER_DTYPE_FLOAT))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Conv node '%s': X, W and B must share one dtype", n->name);
    conv_geom g;
    int64_t group;
    CINFER_TRY(conv_compute_conv(n, x, w, b, y, "CPU", &g, &group));
    int64_t batch = x->dims[0], c = x->dims[1], m = y->dims[1];
    int64_t cg = c / group, mg = m / group, kdim = cg * g.k_size;
    if (mg > INT32_MAX || g.out_size > INT32_MAX || kdim >= INT32_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "Conv node '%s': dims exceed the BLAS int range", n->name);
    const bool relu = graph_attr_int(n, "cinfer_fused_relu", 0) != 0;
    int threads = cpu_num_threads();
    float *yp = y->data;
    const float *xp = x->data, *wp = w->data, *bp = b ? b->data : NULL;
    if (batch * m * g.out_size == 0) return CINFER_OK;
    cinfer_status st;
    void *reg[3];
    if (cg == 0 || g.in_size == 0) {
        if (scratch_measuring(sc)) return CINFER_OK;
        fill_bias(yp, batch * m, m, g.out_size, bp, threads);
        if (relu) relu_rows(yp, batch * m, g.out_size, g.out_size);
        return CINFER_OK;
    }
    if (cg == 1 && group > 1) {
        bool fast3 = g.k[0] == 1 && g.k[1] == 3 && g.k[2] == 3; /* the 3x3 row kernel reads a zero row */
        size_t bytes[2] = {(size_t)(2 * g.k[2]) * sizeof(int64_t), fast3 ? (size_t)g.in[2] * sizeof(float) : 0};
        if (scratch_take(n, sc, bytes, reg, 2, &st)) return st;
        int64_t *kw_range = reg[0];
        float *zrow = reg[1];
        for (int64_t kw = 0; kw < g.k[2]; kw++)
            valid_range(g.out[2], g.s[2], kw * g.d[2] - g.pb[2], g.in[2], &kw_range[kw], &kw_range[g.k[2] + kw]);
        if (zrow) memset(zrow, 0, bytes[1]);
        conv_depthwise(xp, wp, bp, yp, batch, c, m, &g, kw_range, kw_range + g.k[2], zrow, relu, threads);
        return CINFER_OK;
    }
    bool pointwise = true;
    for (int i = 0; i < 3; i++)
        pointwise = pointwise && g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0 && g.pe[i] == 0;
    conv_direct dp;
    double ratio = 0.0;
    if (mg * kdim * (int64_t)sizeof(float) <= CONV_DIRECT_MAX_WEIGHT_BYTES &&
        conv_direct_plan(&dp, cg, mg, g.in, g.out, g.k, g.s, g.d, g.pb, &ratio) &&
        ratio <= (pointwise ? CONV_DIRECT_MAX_RATIO_1X1 : CONV_DIRECT_MAX_RATIO)) {
        size_t bytes[2] = {conv_direct_input_floats(&dp) * sizeof(float),
                           conv_direct_offset_count(&dp) * sizeof(int64_t)};
        if (scratch_take(n, sc, bytes, reg, 2, &st)) return st;
        float *xs = reg[0];
        int64_t *toff = reg[1];
        conv_direct_offsets(&dp, toff);
        for (int64_t ni = 0; ni < batch; ni++)
            for (int64_t gi = 0; gi < group; gi++)
                conv_direct_run(&dp, xp + (ni * c + gi * cg) * g.in_size, wp + gi * mg * kdim, bp ? bp + gi * mg : NULL,
                                toff, relu, xs, yp + (ni * m + gi * mg) * g.out_size, threads);
        return CINFER_OK;
    }
    if (pointwise) { /* X itself is the right-hand matrix; column blocks keep the fused Relu's pass in cache */
        if (scratch_measuring(sc)) return CINFER_OK;
        int64_t nstep = relu ? CONV_BLOCK_FLOATS / mg : g.out_size;
        if (nstep < 64) nstep = 64;
        if (b) fill_bias(yp, batch * m, m, g.out_size, bp, threads);
        for (int64_t ni = 0; ni < batch; ni++)
            for (int64_t gi = 0; gi < group; gi++)
                for (int64_t j0 = 0; j0 < g.out_size; j0 += nstep) {
                    const int64_t nc = g.out_size - j0 < nstep ? g.out_size - j0 : nstep;
                    float *yb = yp + (ni * m + gi * mg) * g.out_size + j0;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mg, (int)nc, (int)kdim, 1.0f,
                                wp + gi * mg * kdim, (int)kdim, xp + (ni * c + gi * cg) * g.in_size + j0,
                                (int)g.out_size, b ? 1.0f : 0.0f, yb, (int)g.out_size);
                    if (relu) relu_rows(yb, mg, nc, g.out_size);
                }
        return CINFER_OK;
    }
    /* The bias rides in the GEMM as one more column of W against a row of ones under the patches, which
     * saves a pass over Y. The patches are built a block of output rows at a time, so that block stays in
     * cache for the GEMM (and for the fused Relu after it). */
    const int64_t kb = b ? kdim + 1 : kdim, qn = g.out[0] * g.out[1];
    int64_t qstep = CONV_BLOCK_FLOATS / (kb * g.out[2]);
    if (qstep < 1) qstep = 1;
    if (qstep > qn) qstep = qn;
    size_t bytes[3] = {(size_t)kb * (size_t)(qstep * g.out[2]) * sizeof(float),
                       b ? (size_t)m * (size_t)kb * sizeof(float) : 0,
                       (size_t)(2 * (g.k[1] + g.k[2])) * sizeof(int64_t)};
    if (scratch_take(n, sc, bytes, reg, 3, &st)) return st;
    float *col = reg[0], *wb = reg[1];
    int64_t *ranges = reg[2];
    if (b) {
        for (int64_t i = 0; i < m; i++) {
            memcpy(wb + i * kb, wp + i * kdim, (size_t)kdim * sizeof(float));
            wb[i * kb + kdim] = bp[i];
        }
    }
    const float *wm = b ? wb : wp;
    /* per tap: the valid output range along the row (kw) and along the rows (kh) */
    for (int64_t kw = 0; kw < g.k[2]; kw++)
        valid_range(g.out[2], g.s[2], kw * g.d[2] - g.pb[2], g.in[2], &ranges[kw], &ranges[g.k[2] + kw]);
    for (int64_t kh = 0; kh < g.k[1]; kh++)
        valid_range(g.out[1], g.s[1], kh * g.d[1] - g.pb[1], g.in[1], &ranges[2 * g.k[2] + kh],
                    &ranges[2 * g.k[2] + g.k[1] + kh]);
    for (int64_t ni = 0; ni < batch; ni++)
        for (int64_t gi = 0; gi < group; gi++)
            for (int64_t q0 = 0; q0 < qn; q0 += qstep) {
                const int64_t q1 = q0 + qstep < qn ? q0 + qstep : qn, ncols = (q1 - q0) * g.out[2];
                float *yb = yp + (ni * m + gi * mg) * g.out_size + q0 * g.out[2];
                im2col(xp + (ni * c + gi * cg) * g.in_size, cg, &g, ranges, q0, q1, col, threads);
                if (b)
                    for (int64_t i = 0; i < ncols; i++) col[kdim * ncols + i] = 1.0f;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mg, (int)ncols, (int)kb, 1.0f,
                            wm + gi * mg * kb, (int)kb, col, (int)ncols, 0.0f, yb, (int)g.out_size);
                if (relu) relu_rows(yb, mg, ncols, g.out_size);
            }
    return CINFER_OK;
}

/* Conv with the fused residual Add of graph/fusion.c ("cinfer_fused_add", input 3 shaped like Y, then the Relu of
 * "cinfer_fused_add_relu"): the convolution, then one pass adding R (float32 here: run_staged converted it). */
static cinfer_status conv_residual_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                        scratch *sc) {
    CINFER_TRY(conv_impl(n, in, num_in < 3 ? num_in : 3, out, num_out, sc));
    /* sc->measure, not scratch_measuring(): that would reset the size conv_impl just measured */
    if (num_in < 4 || in[3].dtype == CINFER_DTYPE_UNDEFINED || sc->measure) return CINFER_OK;
    float *y = out[0].data;
    const float *r = in[3].data;
    const bool relu = graph_attr_int(n, "cinfer_fused_add_relu", 0) != 0;
    const int64_t count = tensor_numel(&out[0]);
#pragma omp parallel for num_threads(cpu_num_threads()) schedule(static) if (count >= PAR_MIN_WORK)
    for (int64_t i = 0; i < count; i++) {
        float v = y[i] + r[i];
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
    return CINFER_OK;
}

static cinfer_status run_conv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return dispatch(n, in, num_in, out, num_out, num_in > 3 ? conv_residual_impl : conv_impl);
}

/* ---- ConvTranspose ---- */

/* y[m, i*s - p + k*d] += col[(m, k), i] for one group of output channels. */
static void col2im(const float *col, int64_t channels, const conv_geom *g, float *y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) \
    if (channels * g->k_size * g->in_size >= PAR_MIN_WORK)
    for (int64_t mc = 0; mc < channels; mc++) {
        float *yc = y + mc * g->out_size;
        for (int64_t t = 0; t < g->k_size; t++) {
            int64_t kw = t % g->k[2], kh = (t / g->k[2]) % g->k[1], kd = t / (g->k[1] * g->k[2]);
            const float *crow = col + (mc * g->k_size + t) * g->in_size;
            int64_t off = kw * g->d[2] - g->pb[2], lo, hi;
            valid_range(g->in[2], g->s[2], off, g->out[2], &lo, &hi);
            for (int64_t id = 0; id < g->in[0]; id++) {
                int64_t od = id * g->s[0] - g->pb[0] + kd * g->d[0];
                if (od < 0 || od >= g->out[0]) continue;
                for (int64_t ih = 0; ih < g->in[1]; ih++) {
                    int64_t oh = ih * g->s[1] - g->pb[1] + kh * g->d[1];
                    if (oh < 0 || oh >= g->out[1]) continue;
                    float *yrow = yc + (od * g->out[1] + oh) * g->out[2];
                    const float *src = crow + (id * g->in[1] + ih) * g->in[2];
                    int64_t s = g->s[2];
                    for (int64_t iw = lo; iw < hi; iw++) yrow[iw * s + off] += src[iw];
                }
            }
        }
    }
}

static cinfer_status conv_transpose_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                         scratch *sc) {
    (void)num_out;
    const tensor *x = &in[0], *w = &in[1];
    const tensor *b = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    if (w->dtype != CINFER_DTYPE_FLOAT || (b && b->dtype != CINFER_DTYPE_FLOAT))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "ConvTranspose node '%s': X, W and B must share one dtype",
                          n->name);
    conv_geom g;
    int64_t group;
    CINFER_TRY(conv_compute_conv(n, x, w, b, y, "CPU", &g, &group));
    int64_t batch = x->dims[0], c = x->dims[1], m = y->dims[1];
    int64_t cg = c / group, mg = m / group, rows = mg * g.k_size;
    if (rows > INT32_MAX || g.in_size > INT32_MAX || cg > INT32_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "ConvTranspose node '%s': dims exceed the BLAS int range", n->name);
    int threads = cpu_num_threads();
    float *yp = y->data;
    const float *xp = x->data, *wp = w->data;
    if (batch * m * g.out_size == 0) return CINFER_OK;
    const bool gemm = cg > 0 && g.in_size > 0 && rows > 0;
    size_t bytes = gemm ? (size_t)rows * (size_t)g.in_size * sizeof(float) : 0;
    void *reg;
    cinfer_status st;
    if (scratch_take(n, sc, &bytes, &reg, 1, &st)) return st;
    fill_bias(yp, batch * m, m, g.out_size, b ? b->data : NULL, threads);
    if (!gemm) return CINFER_OK;
    float *col = reg;
    for (int64_t ni = 0; ni < batch; ni++)
        for (int64_t gi = 0; gi < group; gi++) {
            /* col[(m, k), i] = sum_c W[c, (m, k)] * X[c, i] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)g.in_size, (int)cg, 1.0f,
                        wp + gi * cg * rows, (int)rows, xp + (ni * c + gi * cg) * g.in_size, (int)g.in_size, 0.0f, col,
                        (int)g.in_size);
            col2im(col, mg, &g, yp + (ni * m + gi * mg) * g.out_size, threads);
        }
    return CINFER_OK;
}

static cinfer_status run_conv_transpose(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return dispatch(n, in, num_in, out, num_out, conv_transpose_impl);
}

/* ---- BatchNormalization ---- */

static cinfer_status batchnorm_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                    scratch *sc) {
    const tensor *x = &in[0];
    if (num_in < 5 || x->ndim < 2)
        return core_error(CINFER_ERR_INVALID_ARGUMENT,
                          "BatchNormalization node '%s': needs X of rank >= 2 and 4 parameters", n->name);
    int64_t batch = x->dims[0], c = x->dims[1], total = tensor_numel(x);
    int64_t size = batch * c > 0 ? total / (batch * c) : 0;
    for (int i = 1; i < 5; i++)
        if (in[i].dtype != CINFER_DTYPE_FLOAT || tensor_numel(&in[i]) != c)
            return core_error(CINFER_ERR_INVALID_ARGUMENT,
                              "BatchNormalization node '%s': input %d must be float and hold %lld values", n->name, i,
                              (long long)c);
    const float *scale = in[1].data, *bias = in[2].data, *mean = in[3].data, *var = in[4].data;
    double eps = graph_attr_float(n, "epsilon", 1e-5f);
    bool training = n->opset >= 14 ? graph_attr_int(n, "training_mode", 0) != 0 : false;
    if (n->opset < 14)
        for (int j = 1; j < num_out; j++)
            if (out[j].data)
                return core_error(CINFER_ERR_UNSUPPORTED,
                                  "BatchNormalization node '%s': training outputs of BatchNormalization-9 are not "
                                  "supported",
                                  n->name);
    const float *xp = x->data;
    float *yp = out[0].data;
    int threads = cpu_num_threads();
    double momentum = graph_attr_float(n, "momentum", 0.9f);
    float *run_mean = num_out > 1 ? out[1].data : NULL, *run_var = num_out > 2 ? out[2].data : NULL;
    if (training && ((run_mean && tensor_numel(&out[1]) != c) || (run_var && tensor_numel(&out[2]) != c)))
        return core_error(CINFER_ERR_INVALID_ARGUMENT,
                          "BatchNormalization node '%s': running mean/var outputs must hold %lld values", n->name,
                          (long long)c);
    if (scratch_measuring(sc)) return CINFER_OK;
    if (!training) {
#pragma omp parallel for num_threads(threads) schedule(static) if (total >= PAR_MIN_WORK)
        for (int64_t p = 0; p < batch * c; p++) {
            int64_t ch = p % c;
            float a = (float)(scale[ch] / sqrt((double)var[ch] + eps));
            float sh = (float)(bias[ch] - (double)mean[ch] * a);
            const float *src = xp + p * size;
            float *dst = yp + p * size;
            for (int64_t i = 0; i < size; i++) dst[i] = src[i] * a + sh;
        }
        return CINFER_OK;
    }
    /* training mode: normalise with the batch statistics, update the running ones */
#pragma omp parallel for num_threads(threads) schedule(static) if (total >= PAR_MIN_WORK)
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0.0, sq = 0.0, cnt = (double)(batch * size);
        for (int64_t ni = 0; ni < batch; ni++) {
            const float *src = xp + (ni * c + ch) * size;
            for (int64_t i = 0; i < size; i++) sum += src[i];
        }
        double mu = cnt > 0 ? sum / cnt : 0.0;
        for (int64_t ni = 0; ni < batch; ni++) {
            const float *src = xp + (ni * c + ch) * size;
            for (int64_t i = 0; i < size; i++) sq += (src[i] - mu) * (src[i] - mu);
        }
        double v = cnt > 0 ? sq / cnt : 0.0;
        float a = (float)(scale[ch] / sqrt(v + eps)), sh = (float)(bias[ch] - mu * a);
        for (int64_t ni = 0; ni < batch; ni++) {
            const float *src = xp + (ni * c + ch) * size;
            float *dst = yp + (ni * c + ch) * size;
            for (int64_t i = 0; i < size; i++) dst[i] = src[i] * a + sh;
        }
        if (run_mean) run_mean[ch] = (float)(mean[ch] * momentum + mu * (1.0 - momentum));
        if (run_var) run_var[ch] = (float)(var[ch] * momentum + v * (1.0 - momentum));
    }
    return CINFER_OK;
}

static cinfer_status run_batchnorm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return dispatch(n, in, num_in, out, num_out, batchnorm_impl);
}

/* ---- MaxPool, AveragePool, LpPool ---- */

enum { POOL_MAX, POOL_AVG, POOL_LP };

/* Per spatial dim and output position: first valid input index, valid taps, taps inside the padding;
 * per tap of the last dim: the output range [lo, hi) whose input lies inside the row. */
typedef struct pool_taps {
    int64_t *first[3], *valid[3], *padded[3];
    int64_t *kw_lo, *kw_hi;
} pool_taps;

static size_t pool_taps_bytes(const conv_geom *g) {
    return (size_t)(3 * (g->out[0] + g->out[1] + g->out[2]) + 2 * g->k[2]) * sizeof(int64_t);
}

/* buf: pool_taps_bytes(g) of scratch */
static void pool_taps_init(pool_taps *t, const conv_geom *g, int64_t *buf) {
    int64_t *p = buf;
    for (int i = 0; i < 3; i++) {
        t->first[i] = p;
        t->valid[i] = p + g->out[i];
        t->padded[i] = p + 2 * g->out[i];
        p += 3 * g->out[i];
        for (int64_t o = 0; o < g->out[i]; o++) {
            int64_t st = o * g->s[i] - g->pb[i], lo, hi, plo, phi;
            valid_range(g->k[i], g->d[i], st, g->in[i], &lo, &hi);
            valid_range(g->k[i], g->d[i], st + g->pb[i], g->in[i] + g->pb[i] + g->pe[i], &plo, &phi);
            t->first[i][o] = st + lo * g->d[i];
            t->valid[i][o] = hi - lo;
            t->padded[i][o] = phi - plo;
        }
    }
    t->kw_lo = p;
    t->kw_hi = p + g->k[2];
    for (int64_t kw = 0; kw < g->k[2]; kw++)
        valid_range(g->out[2], g->s[2], kw * g->d[2] - g->pb[2], g->in[2], &t->kw_lo[kw], &t->kw_hi[kw]);
}

#define POOL_MAXOP(a, b) ((a) > (b) ? (a) : (b))
#define POOL_SUMOP(a, b) ((a) + (b))
/* Interior outputs of a window with 3 rows (r0..r2) and K = 2 or 3 taps per row at stride S: all taps
 * of one output in registers, one store. */
#define POOL_FAST_LOOP(OP, K, S)                                                                           \
    for (int64_t ow = ilo; ow < ihi; ow++) {                                                               \
        const int64_t o = ow * (S) - pb2;                                                                  \
        float a0 = OP(r0[o], r0[o + 1]), a1 = OP(r1[o], r1[o + 1]), a2 = OP(r2[o], r2[o + 1]);             \
        if ((K) == 3) {                                                                                    \
            a0 = OP(a0, r0[o + 2]);                                                                        \
            a1 = OP(a1, r1[o + 2]);                                                                        \
            a2 = OP(a2, r2[o + 2]);                                                                        \
        }                                                                                                  \
        yrow[ow] = OP(OP(a0, a1), a2) * scale;                                                             \
    }

/* The common 2-D pools (2x2 or 3x3 windows, stride 1 or 2, no dilation along the row). Returns false
 * when the window does not fit, and the caller takes the general path. */
static bool pool_row_fast(const float *xc, float *yrow, const conv_geom *g, const pool_taps *t, int64_t od, int64_t oh,
                          int kind, bool include_pad, const float *zrow) {
    const int64_t k2 = g->k[2], s2 = g->s[2], pb2 = g->pb[2], out2 = g->out[2], in2 = g->in[2];
    const int64_t n0 = t->valid[0][od], n1 = t->valid[1][oh];
    if (kind == POOL_LP || (kind == POOL_AVG && !zrow) || n0 * n1 > 3 || n0 * n1 == 0 || (k2 != 2 && k2 != 3) ||
        g->d[2] != 1 || (s2 != 1 && s2 != 2))
        return false;
    const float *rows[3] = {NULL, NULL, NULL};
    int nr = 0;
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            rows[nr++] = xc + ((t->first[0][od] + a * g->d[0]) * g->in[1] + t->first[1][oh] + b * g->d[1]) * in2;
    /* missing rows: repeat a row for max, a zero row for sums */
    const float *r0 = rows[0], *r1 = nr > 1 ? rows[1] : kind == POOL_MAX ? r0 : zrow;
    const float *r2 = nr > 2 ? rows[2] : kind == POOL_MAX ? r0 : zrow;
    int64_t ilo = 0, ihi = out2;
    for (int64_t kw = 0; kw < k2; kw++) {
        ilo = t->kw_lo[kw] > ilo ? t->kw_lo[kw] : ilo;
        ihi = t->kw_hi[kw] < ihi ? t->kw_hi[kw] : ihi;
    }
    if (ihi < ilo) ihi = ilo;
    int64_t rows_cnt = include_pad ? t->padded[0][od] * t->padded[1][oh] : n0 * n1;
    /* edge outputs: taps one by one */
    for (int64_t ow = 0; ow < out2; ow++) {
        if (ow == ilo) ow = ihi;
        if (ow >= out2) break;
        int64_t f = t->first[2][ow], nv = t->valid[2][ow];
        float acc = kind == POOL_MAX ? -INFINITY : 0.0f;
        for (int r = 0; r < nr; r++)
            for (int64_t c = 0; c < nv; c++)
                acc = kind == POOL_MAX ? POOL_MAXOP(acc, rows[r][f + c]) : acc + rows[r][f + c];
        if (kind == POOL_MAX) {
            yrow[ow] = nv > 0 ? acc : 0.0f;
        } else {
            int64_t cnt = rows_cnt * (include_pad ? t->padded[2][ow] : nv);
            yrow[ow] = cnt > 0 ? acc / (float)cnt : 0.0f;
        }
    }
    if (ihi <= ilo) return true;
    const float scale = kind == POOL_MAX ? 1.0f : 1.0f / (float)(rows_cnt * k2);
    if (kind == POOL_MAX) {
        if (k2 == 3 && s2 == 2) POOL_FAST_LOOP(POOL_MAXOP, 3, 2)
        else if (k2 == 3) POOL_FAST_LOOP(POOL_MAXOP, 3, 1)
        else if (s2 == 2) POOL_FAST_LOOP(POOL_MAXOP, 2, 2)
        else POOL_FAST_LOOP(POOL_MAXOP, 2, 1)
    } else {
        if (k2 == 3 && s2 == 2) POOL_FAST_LOOP(POOL_SUMOP, 3, 2)
        else if (k2 == 3) POOL_FAST_LOOP(POOL_SUMOP, 3, 1)
        else if (s2 == 2) POOL_FAST_LOOP(POOL_SUMOP, 2, 2)
        else POOL_FAST_LOOP(POOL_SUMOP, 2, 1)
    }
    return true;
}

/* One output row: every valid input row of the window folds into yrow, tap column by tap column, so
 * the inner loops run over contiguous outputs (vectorisable for strides 1 and 2). */
static void pool_row(const float *xc, float *yrow, const conv_geom *g, const pool_taps *t, int64_t od, int64_t oh,
                     int kind, bool include_pad, int64_t p) {
    const int64_t out2 = g->out[2], in1 = g->in[1], in2 = g->in[2], s2 = g->s[2], d2 = g->d[2], pb2 = g->pb[2];
    const int64_t n0 = t->valid[0][od], n1 = t->valid[1][oh], f0 = t->first[0][od], f1 = t->first[1][oh];
    const float init = kind == POOL_MAX ? -INFINITY : 0.0f;
    for (int64_t ow = 0; ow < out2; ow++) yrow[ow] = init;
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++) {
            const float *xrow = xc + ((f0 + a * g->d[0]) * in1 + f1 + b * g->d[1]) * in2;
            for (int64_t kw = 0; kw < g->k[2]; kw++) {
                const int64_t lo = t->kw_lo[kw], hi = t->kw_hi[kw];
                const float *xs = xrow + kw * d2 - pb2;
                if (kind == POOL_MAX) {
                    if (s2 == 1)
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] = xs[ow] > yrow[ow] ? xs[ow] : yrow[ow];
                    else if (s2 == 2)
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] = xs[2 * ow] > yrow[ow] ? xs[2 * ow] : yrow[ow];
                    else
                        for (int64_t ow = lo; ow < hi; ow++)
                            yrow[ow] = xs[ow * s2] > yrow[ow] ? xs[ow * s2] : yrow[ow];
                } else if (kind == POOL_AVG || p == 1) {
                    bool absval = kind == POOL_LP;
                    if (s2 == 1 && !absval)
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += xs[ow];
                    else if (s2 == 2 && !absval)
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += xs[2 * ow];
                    else if (!absval)
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += xs[ow * s2];
                    else
                        for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += fabsf(xs[ow * s2]);
                } else if (p == 2) {
                    for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += xs[ow * s2] * xs[ow * s2];
                } else {
                    for (int64_t ow = lo; ow < hi; ow++) yrow[ow] += powf(fabsf(xs[ow * s2]), (float)p);
                }
            }
        }
    if (kind == POOL_MAX) {
        for (int64_t ow = 0; ow < out2; ow++)
            if (n0 * n1 * t->valid[2][ow] == 0) yrow[ow] = 0.0f; /* window entirely in the padding */
    } else if (kind == POOL_AVG) {
        int64_t pad01 = t->padded[0][od] * t->padded[1][oh], val01 = n0 * n1;
        for (int64_t ow = 0; ow < out2; ow++) {
            int64_t cnt = include_pad ? pad01 * t->padded[2][ow] : val01 * t->valid[2][ow];
            yrow[ow] = cnt > 0 ? yrow[ow] / (float)cnt : 0.0f;
        }
    } else if (p == 2) {
        for (int64_t ow = 0; ow < out2; ow++) yrow[ow] = sqrtf(yrow[ow]);
    } else if (p != 1) {
        for (int64_t ow = 0; ow < out2; ow++) yrow[ow] = powf(yrow[ow], 1.0f / (float)p);
    }
}

/* MaxPool with the Indices output: flat index into X (row-major, or column-major over the spatial
 * dims when storage_order is 1), first maximum wins. */
static void maxpool_plane_indices(const float *xc, float *yc, int64_t *ic, int64_t base, const conv_geom *g,
                                  const pool_taps *t, bool col_major) {
    for (int64_t od = 0; od < g->out[0]; od++)
        for (int64_t oh = 0; oh < g->out[1]; oh++)
            for (int64_t ow = 0; ow < g->out[2]; ow++) {
                int64_t o = (od * g->out[1] + oh) * g->out[2] + ow;
                float best = 0.0f;
                int64_t bi = -1;
                for (int64_t a = 0; a < t->valid[0][od]; a++) {
                    int64_t id = t->first[0][od] + a * g->d[0];
                    for (int64_t b = 0; b < t->valid[1][oh]; b++) {
                        int64_t ih = t->first[1][oh] + b * g->d[1];
                        const float *row = xc + (id * g->in[1] + ih) * g->in[2];
                        for (int64_t c = 0; c < t->valid[2][ow]; c++) {
                            int64_t iw = t->first[2][ow] + c * g->d[2];
                            if (bi < 0 || row[iw] > best) {
                                best = row[iw];
                                bi = col_major ? id + ih * g->in[0] + iw * g->in[0] * g->in[1]
                                               : (id * g->in[1] + ih) * g->in[2] + iw;
                            }
                        }
                    }
                }
                yc[o] = best;
                ic[o] = bi < 0 ? -1 : base + bi;
            }
}

static cinfer_status pool_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out, int kind,
                               scratch *sc) {
    (void)num_in;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    conv_geom g;
    conv_pool pool;
    CINFER_TRY(conv_compute_pool(n, in, out, num_out, "CPU", &g, &pool));
    int64_t *idx = num_out > 1 && out[1].data ? out[1].data : NULL;
    const bool col_major = pool.col_major, include_pad = pool.include_pad;
    const int64_t p = pool.p;
    int64_t planes = x->dims[0] * x->dims[1];
    if (planes * g.out_size == 0) return CINFER_OK;
    /* the tap tables, and for AveragePool a zero row that stands in for missing rows */
    size_t bytes[2] = {pool_taps_bytes(&g), kind == POOL_AVG ? (size_t)g.in[2] * sizeof(float) : 0};
    void *reg[2];
    cinfer_status st;
    if (scratch_take(n, sc, bytes, reg, 2, &st)) return st;
    pool_taps t;
    pool_taps_init(&t, &g, reg[0]);
    float *zrow = reg[1];
    if (zrow) memset(zrow, 0, bytes[1]);
    const float *xp = x->data;
    float *yp = y->data;
    int threads = cpu_num_threads();
#pragma omp parallel for num_threads(threads) schedule(static) \
    if (planes * g.out_size * g.k_size >= PAR_MIN_WORK)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xc = xp + pl * g.in_size;
        float *yc = yp + pl * g.out_size;
        if (idx) {
            maxpool_plane_indices(xc, yc, idx + pl * g.out_size, pl * g.in_size, &g, &t, col_major);
            continue;
        }
        for (int64_t od = 0; od < g.out[0]; od++)
            for (int64_t oh = 0; oh < g.out[1]; oh++) {
                float *yrow = yc + (od * g.out[1] + oh) * g.out[2];
                if (!pool_row_fast(xc, yrow, &g, &t, od, oh, kind, include_pad, zrow))
                    pool_row(xc, yrow, &g, &t, od, oh, kind, include_pad, p);
            }
    }
    return CINFER_OK;
}

static cinfer_status maxpool_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                  scratch *sc) {
    return pool_impl(n, in, num_in, out, num_out, POOL_MAX, sc);
}
static cinfer_status avgpool_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                  scratch *sc) {
    return pool_impl(n, in, num_in, out, num_out, POOL_AVG, sc);
}
static cinfer_status lppool_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                 scratch *sc) {
    return pool_impl(n, in, num_in, out, num_out, POOL_LP, sc);
}
static cinfer_status run_maxpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return dispatch(n, in, num_in, out, num_out, maxpool_impl);
}
static cinfer_status run_avgpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return dispatch(n, in, num_in, out, num_out, avgpool_impl);
}
static cinfer_status run_lppool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return dispatch(n, in, num_in, out, num_out, lppool_impl);
}

/* ---- global pools ---- */

/* Plane reductions in 16 independent lanes: a plain float loop must keep the serial order (one add or
 * compare latency per element); `omp simd` makes the lane loop a vector one. Sums end in double. */
#define POOL_LANES 16
static float plane_max(const float *x, int64_t size) {
    float lane[POOL_LANES];
    for (int j = 0; j < POOL_LANES; j++) lane[j] = x[0];
    int64_t i = 0;
    for (; i + POOL_LANES <= size; i += POOL_LANES) {
#pragma omp simd
        for (int j = 0; j < POOL_LANES; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    }
    float m = x[0];
    for (int j = 0; j < POOL_LANES; j++) m = lane[j] > m ? lane[j] : m;
    for (; i < size; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static double plane_sum(const float *x, int64_t size, bool squares) {
    float lane[POOL_LANES] = {0};
    int64_t i = 0;
    if (squares) {
        for (; i + POOL_LANES <= size; i += POOL_LANES) {
#pragma omp simd
            for (int j = 0; j < POOL_LANES; j++) lane[j] += x[i + j] * x[i + j];
        }
    } else {
        for (; i + POOL_LANES <= size; i += POOL_LANES) {
#pragma omp simd
            for (int j = 0; j < POOL_LANES; j++) lane[j] += x[i + j];
        }
    }
    double s = 0.0;
    for (int j = 0; j < POOL_LANES; j++) s += lane[j];
    for (; i < size; i++) s += squares ? (double)x[i] * x[i] : x[i];
    return s;
}

static cinfer_status global_pool_impl(const graph_node *n, const tensor *in, int kind, tensor *out, scratch *sc) {
    const tensor *x = &in[0];
    int64_t planes, size;
    conv_pool pool;
    CINFER_TRY(conv_compute_global_pool(n, x, &out[0], &planes, &size, &pool));
    const double p = (double)pool.p;
    if (scratch_measuring(sc)) return CINFER_OK;
    const float *xp = x->data;
    float *yp = out[0].data;
    int threads = cpu_num_threads();
#pragma omp parallel for num_threads(threads) schedule(static) if (planes * size >= PAR_MIN_WORK)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *src = xp + pl * size;
        if (kind == POOL_MAX) yp[pl] = size > 0 ? plane_max(src, size) : 0.0f;
        else if (kind == POOL_AVG) yp[pl] = size > 0 ? (float)(plane_sum(src, size, false) / (double)size) : 0.0f;
        else if (p == 2.0) yp[pl] = (float)sqrt(plane_sum(src, size, true));
        else {
            double sum = 0.0;
            for (int64_t i = 0; i < size; i++) sum += pow(fabs((double)src[i]), p);
            yp[pl] = (float)pow(sum, 1.0 / p);
        }
    }
    return CINFER_OK;
}

#define DEFINE_GLOBAL_POOL(name, kind)                                                                       \
    static cinfer_status name##_impl(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out, \
                                     scratch *sc) {                                                              \
        (void)num_in;                                                                                            \
        (void)num_out;                                                                                           \
        return global_pool_impl(n, in, kind, out, sc);                                                           \
    }                                                                                                            \
    static cinfer_status name(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {     \
        return dispatch(n, in, num_in, out, num_out, name##_impl);                                               \
    }
DEFINE_GLOBAL_POOL(run_global_avgpool, POOL_AVG)
DEFINE_GLOBAL_POOL(run_global_maxpool, POOL_MAX)
DEFINE_GLOBAL_POOL(run_global_lppool, POOL_LP)

const cpu_kernel cpu_conv_kernels[] = {
    {"Conv", run_conv},
    {"ConvTranspose", run_conv_transpose},
    {"BatchNormalization", run_batchnorm},
    {"MaxPool", run_maxpool},
    {"AveragePool", run_avgpool},
    {"LpPool", run_lppool},
    {"GlobalAveragePool", run_global_avgpool},
    {"GlobalMaxPool", run_global_maxpool},
    {"GlobalLpPool", run_global_lppool},
    {"ConvInteger", cpu_run_qconv},
    {"QLinearConv", cpu_run_qconv},
    {NULL, NULL},
};
