/* CPU kernel of Attention (scaled dot-product attention, opsets 23-25). */

/* Per (batch, query head, block of query rows): the QK^T GEMM through OpenBLAS into a score block, the bias
 * (mask, causal/window frontiers, padding), a row-wise softmax, the PV GEMM. GQA maps query head h to kv
 * head h / (q_heads / kv_heads); past keys/values are a second GEMM operand rather than a concatenation. */

/* Low precision: the ONNX reference computes every step (Q*scale, K*scale, the QK product, softcap, the
 * mask add, x - max, exp, the row sum, the division, the PV product) in the input type, and the node
 * tests compare bfloat16 results at rtol 1e-3, below one bfloat16 ulp. So the float32 pipeline rounds to
 * the input type at each of those boundaries (`rnd`); for float32 rounding is a no-op and the scale is
 * folded into the GEMM's alpha. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/attention_internal.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"
#include "graph/shape/attention_params.h"

/* Query rows per task: bounds the per-thread score block to QBLK x kv_len floats. */
#define QBLK 64

static void store_row(void *dst, cinfer_dtype t, int64_t off, const float *src, int64_t n) {
    if (t == CINFER_DTYPE_FLOAT) memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
    else cpu_convert_float_to_half(t, src, (uint16_t *)dst + off, n);
}

typedef struct attn_plan {
    int64_t batch, qh, kvh, sq, skv, past, total, hd, hdv;
    bool rank3;
    float alpha;   /* multiplies Q.K^T in the GEMM (1 when Q and K were prescaled) */
    float softcap; /* > 0: softcap * tanh(x / softcap), already rounded like rb */
    int mode;      /* qk_matmul_output_mode */
    bool causal, window;
    int64_t left, right;
    bool has_past;
    bool nan_to_zero; /* "cinfer_nan_to_zero": a fused Softmax NaN guard (graph/fusion.c) */
    bool empty_rows_nan; /* "cinfer_empty_rows_nan": a row every score of which is -inf (with the bias) is NaN, as
                            the unguarded Softmax that graph/fusion.c replaced gives it, not zeros */
    rnd_mode rt; /* rounding to the input type after the QK product and at the end */
    rnd_mode rb; /* rounding of the softcap and the bias add */
    rnd_mode rs; /* rounding inside the softmax (softmax_precision, else like rb) */
    /* attn_mask as float [.., .., mq, mlen], broadcast strides (0 on size-1 dims) */
    const float *mask;
    int64_t mlen, ms_b, ms_h, ms_q;
    const int64_t *nonpad;
    /* operands in float32; ld* are row strides in elements (3-D inputs interleave the heads) */
    const float *q, *k, *v, *pk, *pv;
    int64_t ldq, ldk, ldv;
    void *y;
    cinfer_dtype yt;
    int64_t ldy;
    /* GQA: the query heads sharing a kv head form one stack of rows (one GEMM operand, K/V read once) when
     * their rows are evenly spaced: always for 4-D, for 3-D only with one query; ldqs/ldys: row strides */
    int64_t stack, ldqs, ldys;
    void *qk; /* qk_matmul_output or NULL */
    cinfer_dtype qkt;
} attn_plan;

/* Frontier offset of batch b for the causal and window masks: past length with an internal cache,
 * nonpad_kv_seqlen[b] - q_len with an external one, else 0. */
static int64_t mask_offset(const attn_plan *p, int64_t b) {
    if (p->has_past) return p->past;
    if (p->nonpad) return p->nonpad[b] - p->sq;
    return 0;
}

/* numpy's pairwise float sum (8 accumulators, halves above 128 elements): the reference's row sums are
 * rounded to float16 afterwards, and the same summation order keeps ties on the same side. */
static float pairwise_sum(const float *a, int64_t n) {
    if (n < 8) {
        float r = 0.0f;
        for (int64_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

/* exp(x) for x <= 0 (or -inf) within about 1e-7 relative, 0 below -86; written with integer masks instead
 * of branches so that the softmax loop vectorises (libm's expf is a call per element). n = round(x/ln2)
 * comes from the 1.5*2^23 trick, r = x - n*ln2 in two parts, e^r by its Taylor series to degree 7.
 * Not reduce_internal.h's cpu_red_expf (degree 6, other cut-offs): kept so attention results stay as they are. */
static inline float exp_nonpos(float x) {
    const float magic = 12582912.0f;
    float t = x * 1.44269504088896341f + magic;
    float nf = t - magic;
    uint32_t ni = cpu_f32_bits(t) - cpu_f32_bits(magic);
    float r = x - nf * 0.693145751953125f;
    r = r - nf * 1.428606765330187e-06f;
    float q = 1.0f / 5040.0f;
    q = q * r + 1.0f / 720.0f;
    q = q * r + 1.0f / 120.0f;
    q = q * r + 1.0f / 24.0f;
    q = q * r + 1.0f / 6.0f;
    q = q * r + 0.5f;
    q = q * r + 1.0f;
    q = q * r + 1.0f;
    /* x >= -86 (positive bit patterns too) */
    uint32_t keep = (uint32_t)(cpu_f32_bits(x) <= 0xC2AC0000u) * 0xFFFFFFFFu;
    return cpu_bits_f32((cpu_f32_bits(q) + (ni << 23)) & keep);
}

/* Maximum of x[0, n) into *max; returns whether some element is NaN. Works on order-preserving integer
 * keys (negative floats get their magnitude bits flipped) so that it vectorises: float compares do not
 * under the build's IEEE settings. */
static bool row_max(const float *x, int64_t n, float *max) {
    int32_t km = INT32_MIN;
    uint32_t nan = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = cpu_f32_bits(x[j]);
        nan |= (uint32_t)((u & 0x7FFFFFFFu) > 0x7F800000u);
        int32_t k = (int32_t)(u ^ ((uint32_t)((int32_t)u >> 31) >> 1));
        km = k > km ? k : km;
    }
    uint32_t um = (uint32_t)km;
    *max = n > 0 ? cpu_bits_f32(um ^ ((uint32_t)((int32_t)um >> 31) >> 1)) : -INFINITY;
    return nan != 0;
}

/* Float32 softmax of x[0, n) in place, m its maximum (no NaN in x). */
static void softmax_f32(float *x, int64_t n, float m) {
    float safe = m == -INFINITY ? 0.0f : m;
    for (int64_t j = 0; j < n; j++) x[j] = exp_nonpos(x[j] - safe);
    float sum = pairwise_sum(x, n);
    float inv = sum == 0.0f ? 1.0f : 1.0f / sum;
    for (int64_t j = 0; j < n; j++) x[j] *= inv;
}

/* Softmax of x[0, n) with every reference step rounded to rs (float16/bfloat16, or none for a float32
 * softmax whose result is rounded to a low-precision input type afterwards). */
static void softmax_rounded(float *x, int64_t n, rnd_mode rs) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    float safe = m == -INFINITY ? 0.0f : m, s;
    for (int64_t j = 0; j < n; j++) x[j] = rnd(rs, expf(rnd(rs, x[j] - safe)));
    if (rs == RND_BF16) { /* bfloat16 adds round one by one (ml_dtypes' add loop) */
        s = 0.0f;
        for (int64_t j = 0; j < n; j++) s = rnd(rs, s + x[j]);
    } else {
        s = rnd(rs, pairwise_sum(x, n));
    }
    if (s == 0.0f) s = 1.0f;
    for (int64_t j = 0; j < n; j++) x[j] = rnd(rs, x[j] / s);
}

/* Bias, softmax and guards on one score row x[total] of query i in (b, h). Columns from ncols on were not
 * computed (every query of the block masks them): they come out as probability 0. */
static void attn_row(const attn_plan *p, float *x, int64_t b, int64_t h, int64_t i, int64_t ncols) {
    const int64_t L = p->total;
    const rnd_mode rt = p->rt, rb = p->rb, rs = p->rs;
    int64_t qk_off = ((b * p->qh + h) * p->sq + i) * L;
    if (rt != RND_NONE)
        for (int64_t j = 0; j < ncols; j++) x[j] = rnd(rt, x[j]);
    if (p->softcap > 0) {
        float c = p->softcap;
        for (int64_t j = 0; j < ncols; j++) x[j] = rnd(rb, rnd(rb, tanhf(rnd(rb, x[j] / c))) * c);
    }
    if (p->qk && p->mode <= 1) store_row(p->qk, p->qkt, qk_off, x, L);

    /* The additive bias: the mask (padded with -inf past its length) plus -inf outside the keys the causal
     * and window frontiers and the padding leave, [lo, hi). A row whose bias is -inf everywhere is fully
     * masked and gives zeros (decided on the bias, as the reference does, not on the scores). */
    bool all_masked = ncols == 0;
    if (p->mask || p->causal || p->window || p->nonpad) {
        int64_t off = mask_offset(p, b), lo = 0, hi = ncols;
        if (p->causal && i + off + 1 < hi) hi = i + off + 1;
        if (p->window && p->right >= 0 && i + off + p->right + 1 < hi) hi = i + off + p->right + 1;
        if (p->window && p->left >= 0 && i + off - p->left > lo) lo = i + off - p->left;
        if (p->nonpad && p->nonpad[b] < hi) hi = p->nonpad[b];
        if (hi < lo) hi = lo;
        if (!p->mask) {
            int64_t lo_c = lo < ncols ? lo : ncols;
            for (int64_t j = 0; j < lo_c; j++) x[j] += -INFINITY;
            for (int64_t j = hi > lo_c ? hi : lo_c; j < ncols; j++) x[j] += -INFINITY;
            all_masked = hi <= lo;
        } else {
            const float *mrow = p->mask + b * p->ms_b + h * p->ms_h + i * p->ms_q;
            float bmax = -INFINITY;
            bool bnan = false;
            for (int64_t j = 0; j < ncols; j++) {
                float bv = j < p->mlen ? mrow[j] : -INFINITY;
                if (j < lo || j >= hi) bv += -INFINITY;
                if (bv != bv) bnan = true;
                else if (bv > bmax) bmax = bv;
                x[j] = rnd(rb, x[j] + bv);
            }
            all_masked = !bnan && bmax == -INFINITY;
        }
    }
    if (p->qk && p->mode == 2) store_row(p->qk, p->qkt, qk_off, x, L);

    /* softmax in the softmax precision; a NaN anywhere makes the row NaN (numpy's max propagates it) */
    bool nan = false;
    float m = 0.0f;
    if (rs == RND_NONE && rt == RND_NONE) {
        nan = row_max(x, ncols, &m);
    } else {
        if (rs != RND_NONE)
            for (int64_t j = 0; j < ncols; j++) x[j] = rnd(rs, x[j]);
        for (int64_t j = 0; j < ncols; j++) nan |= x[j] != x[j];
    }
    if (!nan && p->empty_rows_nan && ncols > 0) {
        nan = true;
        for (int64_t j = 0; j < ncols && nan; j++) nan = x[j] == -INFINITY;
    }
    if (nan)
        for (int64_t j = 0; j < ncols; j++) x[j] = NAN;
    else if (rs == RND_NONE && rt == RND_NONE)
        softmax_f32(x, ncols, m);
    else
        softmax_rounded(x, ncols, rs);
    if (all_masked && !p->empty_rows_nan) memset(x, 0, (size_t)ncols * sizeof *x);
    if (p->nan_to_zero) /* the fused Softmax's Where(IsNaN(p), 0, p) */
        for (int64_t j = 0; j < ncols; j++) x[j] = x[j] != x[j] ? 0.0f : x[j];
    if (ncols < L) memset(x + ncols, 0, (size_t)(L - ncols) * sizeof *x);
    if (rt != rs && rt != RND_NONE)
        for (int64_t j = 0; j < ncols; j++) x[j] = rnd(rt, x[j]);
    if (p->qk && p->mode == 3) store_row(p->qk, p->qkt, qk_off, x, L);
}

/* c[m, n] = alpha * a[m, k] . b[n, k]^T; a single row (decoding) as a matrix-vector product. */
static inline void gemm_nt(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float *c, int64_t ldc) {
    if (m == 1) {
        memset(c, 0, (size_t)n * sizeof *c); /* scratch may hold NaN, which a scaling by beta = 0 could keep */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, alpha, b, (int)ldb, a, 1, 0.0f, c, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                    (int)ldb, 0.0f, c, (int)ldc);
    }
}

/* c[m, n] = a[m, k] . b[k, n] + beta * c */
static inline void gemm_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m == 1) {
        if (beta == 0.0f) memset(c, 0, (size_t)n * sizeof *c);
        cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, 1.0f, b, (int)ldb, a, 1, beta, c, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
    }
}

/* One task: rows [r0, r0 + rows) of the stack of query rows of heads h0.. (row r is query r % sq of head
 * h0 + r / sq) in batch b; all heads of a stack share one kv head. s: rows x total scores, ybuf: rows x hdv. */
static void attn_task(const attn_plan *p, int64_t b, int64_t h0, int64_t r0, int64_t rows, float *s, float *ybuf) {
    const int64_t L = p->total, sq = p->sq, g = h0 / (p->qh / p->kvh);
    const float *qb, *kb, *vb;
    int64_t yoff;
    if (p->rank3 && p->stack > 1) { /* one query (sq == 1): row r is head h0 + r, hd (hdv) apart */
        qb = p->q + b * p->ldq + (h0 + r0) * p->hd;
        kb = p->k + b * p->skv * p->ldk + g * p->hd;
        vb = p->v + b * p->skv * p->ldv + g * p->hdv;
        yoff = b * p->ldy + (h0 + r0) * p->hdv;
    } else if (p->rank3) {
        qb = p->q + (b * sq + r0) * p->ldq + h0 * p->hd;
        kb = p->k + b * p->skv * p->ldk + g * p->hd;
        vb = p->v + b * p->skv * p->ldv + g * p->hdv;
        yoff = (b * sq + r0) * p->ldy + h0 * p->hdv;
    } else {
        qb = p->q + ((b * p->qh + h0) * sq + r0) * p->hd;
        kb = p->k + (b * p->kvh + g) * p->skv * p->hd;
        vb = p->v + (b * p->kvh + g) * p->skv * p->hdv;
        yoff = ((b * p->qh + h0) * sq + r0) * p->hdv;
    }
    const float *pkb = p->pk ? p->pk + (b * p->kvh + g) * p->past * p->hd : NULL;
    const float *pvb = p->pv ? p->pv + (b * p->kvh + g) * p->past * p->hdv : NULL;

    /* Keys every row of the block masks for sure (causal future, right window edge, padding) need no
     * products: their probability is 0. Only when the scores are an output does every column get computed.
     * (Were a masked score NaN or +inf, the reference's row would turn NaN; that case is not followed.) */
    int64_t ncols = L;
    if (!p->qk) {
        int64_t off = mask_offset(p, b);
        int64_t last = r0 / sq != (r0 + rows - 1) / sq ? sq - 1 : (r0 + rows - 1) % sq;
        if (p->causal && last + off + 1 < ncols) ncols = last + off + 1;
        if (p->window && p->right >= 0 && last + off + p->right + 1 < ncols) ncols = last + off + p->right + 1;
        if (p->nonpad && p->nonpad[b] < ncols) ncols = p->nonpad[b];
        if (ncols < 0) ncols = 0;
    }
    int64_t npast = ncols < p->past ? ncols : p->past, nnew = ncols - npast;
    if (p->hd == 0)
        for (int64_t r = 0; r < rows; r++) memset(s + r * L, 0, (size_t)ncols * sizeof *s);
    if (p->hd > 0) {
        if (npast > 0) gemm_nt(rows, npast, p->hd, p->alpha, qb, p->ldqs, pkb, p->hd, s, L);
        if (nnew > 0) gemm_nt(rows, nnew, p->hd, p->alpha, qb, p->ldqs, kb, p->ldk, s + p->past, L);
    }
    for (int64_t r = 0; r < rows; r++) attn_row(p, s + r * L, b, h0 + (r0 + r) / sq, (r0 + r) % sq, ncols);
    if (p->hdv == 0) return;

    /* float output straight from the GEMM; the others through ybuf, rounded once (numpy's float-accumulated
     * matmul for float16; bfloat16 matmul promotes to float32 and is cast back) */
    bool direct = p->yt == CINFER_DTYPE_FLOAT;
    float *c = direct ? (float *)p->y + yoff : ybuf;
    int64_t ldc = direct ? p->ldys : p->hdv;
    if (ncols == 0) {
        for (int64_t r = 0; r < rows; r++) memset(c + r * ldc, 0, (size_t)p->hdv * sizeof *c);
    } else {
        if (npast > 0) gemm_nn(rows, p->hdv, npast, s, L, pvb, p->hdv, 0.0f, c, ldc);
        if (nnew > 0) gemm_nn(rows, p->hdv, nnew, s + p->past, L, vb, p->ldv, npast > 0 ? 1.0f : 0.0f, c, ldc);
    }
    if (!direct)
        for (int64_t r = 0; r < rows; r++) store_row(p->y, p->yt, yoff + r * p->ldys, c + r * ldc, p->hdv);
}

/* Copies `rows` rows of `width` elements (source row stride `ld`) in the tensors' own dtype. */
static void copy_rows(void *dst, const void *src, int64_t rows, int64_t width, int64_t ld, size_t es) {
    if (width == ld) {
        memcpy(dst, src, (size_t)(rows * width) * es);
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        memcpy((char *)dst + (size_t)(r * width) * es, (const char *)src + (size_t)(r * ld) * es, (size_t)width * es);
}

/* present = concat(past, new) along the sequence axis, per (batch, kv head). */
static void write_present(const attn_plan *p, tensor *out, const tensor *past, const tensor *cur, int64_t width,
                          int64_t ld) {
    size_t es = cinfer_dtype_size(out->dtype);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->kvh; g++) {
            char *dst = (char *)out->data + (size_t)((b * p->kvh + g) * p->total * width) * es;
            if (p->past > 0)
                memcpy(dst, (const char *)past->data + (size_t)((b * p->kvh + g) * p->past * width) * es,
                       (size_t)(p->past * width) * es);
            int64_t src_off = p->rank3 ? b * p->skv * ld + g * width : (b * p->kvh + g) * p->skv * width;
            const char *src = (const char *)cur->data + (size_t)src_off * es;
            copy_rows(dst + (size_t)(p->past * width) * es, src, p->skv, width, ld, es);
        }
}

/* Float32 copy of a tensor (rows of its last dim lie `ld` elements apart in memory), each element optionally
 * multiplied by `scale` and rounded to `r`; the copy is contiguous. */
static void stage(float *dst, const tensor *t, int64_t ld, float scale, rnd_mode r) {
    const int64_t width = t->ndim ? t->dims[t->ndim - 1] : 1, cnt = tensor_numel(t);
    for (int64_t row = 0; width > 0 && row < cnt / width; row++)
        for (int64_t i = 0; i < width; i++)
            dst[row * width + i] = rnd(r, load_f(t->data, t->dtype, row * ld + i) * scale);
}

cinfer_status cpu_run_attention(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const tensor *q = &in[0], *k = &in[1], *v = &in[2];
    cinfer_dtype qt = q->dtype;
    if (qt != CINFER_DTYPE_FLOAT && qt != CINFER_DTYPE_FLOAT16 && qt != CINFER_DTYPE_BFLOAT16)
        return cpu_unsupported_dtype(n, qt);
    if (v->dtype != CINFER_DTYPE_FLOAT && v->dtype != CINFER_DTYPE_FLOAT16 && v->dtype != CINFER_DTYPE_BFLOAT16)
        return cpu_unsupported_dtype(n, v->dtype);

    attention_sdpa a;
    CINFER_TRY(attention_compute_sdpa(n, in, num_in, &a));
    tensor thirds[3]; /* the fusion's packed Q/K/V: views into input 0, rows 3 * width apart */
    if (a.packed) {
        attention_packed_thirds(&in[0], a.packed, thirds);
        q = &thirds[0], k = &thirds[1], v = &thirds[2];
    }
    attn_plan p = {.rank3 = a.rank3, .batch = a.batch, .qh = a.qh, .kvh = a.kvh, .sq = a.sq, .skv = a.skv,
                   .hd = a.hd, .hdv = a.hdv, .mode = a.mode, .causal = a.causal, .left = a.left, .right = a.right,
                   .window = a.window, .nan_to_zero = graph_attr_int(n, "cinfer_nan_to_zero", 0) != 0,
                   .empty_rows_nan = graph_attr_int(n, "cinfer_empty_rows_nan", 0) != 0};
    /* row strides in the inputs: 3-D inputs interleave the heads (packed ones the three projections too) */
    const int64_t ldq_in = a.packed ? 3 * a.packed : p.rank3 ? q->dims[2] : p.hd;
    const int64_t ldk_in = a.packed ? 3 * a.packed : p.rank3 ? k->dims[2] : p.hd;
    const int64_t ldv_in = a.packed ? 3 * a.packed : p.rank3 ? v->dims[2] : p.hdv;
    p.ldq = ldq_in, p.ldk = ldk_in, p.ldv = ldv_in;
    p.ldy = p.rank3 ? p.qh * p.hdv : p.hdv;
    p.has_past = attn_present(in, num_in, 4) && attn_present(in, num_in, 5); /* with data */
    p.past = p.has_past ? a.past : 0;
    p.total = p.past + p.skv;
    int64_t big = p.total > p.sq ? p.total : p.sq;
    if (big > INT_MAX / 2 || p.ldq > INT_MAX || p.ldk > INT_MAX || p.ldv > INT_MAX || p.ldy > INT_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "Attention node '%s': dims exceed the BLAS int range", n->name);

    const float softcap = a.softcap;
    p.rt = rnd_for(qt);
    /* bfloat16 divided by a Python float promotes to float32 in ml_dtypes: with a softcap the reference
     * runs the rest in float32 and casts the probabilities back */
    p.rb = qt == CINFER_DTYPE_BFLOAT16 && softcap > 0 ? RND_NONE : p.rt;
    p.rs = a.has_softmax_precision ? rnd_for(a.softmax_precision) : p.rb;
    p.nonpad = attn_present(in, num_in, 6) && !p.has_past ? in[6].data : NULL;
    p.softcap = softcap > 0 ? rnd(p.rb, softcap) : 0.0f;
    /* the reference multiplies Q and K each by sqrt(scale), cast to the input type */
    float sf = rnd(p.rt, (float)sqrt(a.scale));

    p.y = out[0].data;
    p.yt = out[0].dtype;
    p.qk = num_out > 3 && out[3].data ? out[3].data : NULL;
    p.qkt = num_out > 3 ? out[3].dtype : CINFER_DTYPE_UNDEFINED;

    if (num_out > 1 && out[1].data) write_present(&p, &out[1], &in[4], k, p.hd, ldk_in);
    if (num_out > 2 && out[2].data) write_present(&p, &out[2], &in[5], v, p.hdv, ldv_in);
    if (tensor_numel(&out[0]) == 0 && !p.qk) return CINFER_OK;

    /* scratch: float staging (low precision), the float mask, per-thread score and output blocks */
    bool stage_qk = qt != CINFER_DTYPE_FLOAT, stage_v = v->dtype != CINFER_DTYPE_FLOAT;
    if (p.rank3 && stage_qk) p.ldq = q->dims[2], p.ldk = k->dims[2]; /* the staged copies are contiguous */
    if (p.rank3 && stage_v) p.ldv = v->dims[2];
    const tensor *mask = attn_present(in, num_in, 3) ? &in[3] : NULL;
    int64_t nq = tensor_numel(q), nk = tensor_numel(k), nv = tensor_numel(v);
    int64_t npk = p.has_past ? tensor_numel(&in[4]) : 0, npv = p.has_past ? tensor_numel(&in[5]) : 0;
    /* a float32 mask is read in place; the others become float (bool: True attends (0), False masks (-inf)) */
    int64_t nmask = mask && mask->dtype != CINFER_DTYPE_FLOAT ? tensor_numel(mask) : 0;
    int nt = cpu_num_threads();
    int64_t rep = p.qh / p.kvh;
    p.stack = !p.rank3 || p.sq == 1 ? rep : 1;
    int64_t nqb = (p.stack * p.sq + QBLK - 1) / QBLK;
    if (p.stack > 1 && p.batch * p.kvh * nqb < nt) { /* too few tasks for the threads: one head each */
        p.stack = 1;
        nqb = (p.sq + QBLK - 1) / QBLK;
    }
    p.ldqs = p.rank3 && p.stack == 1 ? p.ldq : p.hd;
    p.ldys = p.rank3 && p.stack == 1 ? p.ldy : p.hdv;
    int64_t stack_rows = p.stack * p.sq, tasks = p.batch * (p.qh / p.stack) * nqb;
    if (nt > tasks) nt = tasks > 0 ? (int)tasks : 1;
    int64_t qrows = stack_rows < QBLK ? stack_rows : QBLK;
    int64_t per_thread = qrows * p.total + qrows * p.hdv + 16;
    int64_t floats = (stage_qk ? nq + nk + npk : 0) + (stage_v ? nv + npv : 0) + nmask + (int64_t)nt * per_thread;
    float *buf = cpu_scratch((size_t)floats * sizeof(float));
    if (!buf) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Attention node '%s': cannot allocate %lld bytes of scratch",
                                n->name, (long long)floats * 4);
    float *cur = buf;
    if (stage_qk) {
        float *sq_ = cur, *sk = cur + nq, *spk = cur + nq + nk;
        stage(sq_, q, ldq_in, sf, p.rt);
        stage(sk, k, ldk_in, sf, p.rt);
        if (p.has_past) stage(spk, &in[4], p.hd, sf, p.rt);
        p.q = sq_;
        p.k = sk;
        p.pk = p.has_past ? spk : NULL;
        p.alpha = 1.0f;
        cur += nq + nk + npk;
    } else {
        p.q = q->data;
        p.k = k->data;
        p.pk = p.has_past ? in[4].data : NULL;
        p.alpha = sf * sf;
    }
    if (stage_v) {
        stage(cur, v, ldv_in, 1.0f, RND_NONE);
        if (p.has_past) stage(cur + nv, &in[5], p.hdv, 1.0f, RND_NONE);
        p.v = cur;
        p.pv = p.has_past ? cur + nv : NULL;
        cur += nv + npv;
    } else {
        p.v = v->data;
        p.pv = p.has_past ? in[5].data : NULL;
    }
    if (mask) {
        float *mf = cur;
        if (mask->dtype == CINFER_DTYPE_FLOAT) {
            p.mask = mask->data;
        } else if (mask->dtype == CINFER_DTYPE_BOOL) {
            const uint8_t *mb = mask->data;
            for (int64_t i = 0; i < nmask; i++) mf[i] = mb[i] ? 0.0f : -INFINITY;
        } else if (mask->dtype == CINFER_DTYPE_FLOAT16 || mask->dtype == CINFER_DTYPE_BFLOAT16) {
            for (int64_t i = 0; i < nmask; i++) mf[i] = load_f(mask->data, mask->dtype, i);
        } else {
            for (int64_t i = 0; i < nmask; i++) mf[i] = (float)tensor_get_double(mask, i);
        }
        if (mask->dtype != CINFER_DTYPE_FLOAT) p.mask = mf;
        int64_t md[4] = {1, 1, 1, 1};
        for (int d = 0; d < mask->ndim; d++) md[4 - mask->ndim + d] = mask->dims[d];
        p.mlen = md[3];
        p.ms_q = md[2] == 1 ? 0 : md[3];
        p.ms_h = md[1] == 1 ? 0 : md[2] * md[3];
        p.ms_b = md[0] == 1 ? 0 : md[1] * md[2] * md[3];
        cur += nmask;
    }
    float *work = cur;

#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *s = work + (int64_t)omp_get_thread_num() * per_thread;
        float *ybuf = s + qrows * p.total;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t blk = t % nqb, unit = t / nqb, units_per_batch = p.qh / p.stack;
            int64_t r0 = blk * QBLK, rows = stack_rows - r0 < QBLK ? stack_rows - r0 : QBLK;
            attn_task(&p, unit / units_per_batch, (unit % units_per_batch) * p.stack, r0, rows, s, ybuf);
        }
    }
    return CINFER_OK;
}
