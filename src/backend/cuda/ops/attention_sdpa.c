/* CUDA Attention (scaled dot-product attention, opsets 23-25), host side.
 *
 * Attributes and shapes are read as the CPU kernel (backend/cpu/attention_sdpa.c) reads them. Every GEMM operand
 * is float32 in the 4-D layout [batch, heads, seq, size]: float32 4-D inputs are used in place, 3-D and
 * float16/bfloat16 inputs are staged (Q and K multiplied by sqrt(scale) and rounded to their type, as the
 * reference does). The query heads that share a kv head (GQA: head h reads kv head h / (q_heads / kv_heads))
 * are then one stack of rep * q_len rows, so one (batch, kv head) unit is one member of a strided batch:
 *   scores = alpha * Q.K^T      cuBLASLt, past keys and new keys as two GEMMs into one score row
 *   rows kernel                 rounding, softcap, mask/causal/window/padding bias, softmax, qk output
 *   Y = P.V                     cuBLASLt, past values then new values (beta 1)
 * Units go in chunks so the score block stays within ATTN_SCORE_BUDGET floats. All temporaries come from one
 * cuda_scratch request; everything is queued on x->stream. Attention without past, causal or window options,
 * softcap or extra outputs (what the fusion of BERT-style graphs produces) skips all of that: one fused kernel
 * (kernels/attention_flash.cu on tensor cores for float16/bfloat16, attention_flash_f32.cu for float32) reads Q,
 * K, V in place and writes Y. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/kernels/attention_flash.h"
#include "backend/cuda/kernels/attention_sdpa.h"
#include "backend/cuda/ops/attention_internal.h"
#include "core/status.h"
#include "graph/shape/attention_params.h"

/* Score floats per chunk of (batch, kv head) units (a single unit may exceed it). */
#define ATTN_SCORE_BUDGET ((int64_t)1 << 26)
/* Units per chunk stay within what a strided-batched cuBLASLt call is sure to take. */
#define ATTN_MAX_BATCH 65535

/* ---- cuBLASLt (file-local; the recurrent family has its own copy) ---- */

/* Row-major strided-batched C[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C in float32. */
typedef struct rm_gemm_desc {
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    int64_t lda, ldb, ldc; /* row strides in elements */
    int64_t sa, sb, sc;    /* batch strides in elements */
} rm_gemm_desc;

/* Largest power of two up to 256 dividing the address and the batch stride in bytes: the alignment the cuBLASLt
 * heuristic may assume (it assumes 256 unless told). */
static uint32_t lt_alignment(const void *p, int64_t stride_elems, size_t elem) {
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)stride_elems * elem | 256u;
    return (uint32_t)(v & (~v + 1));
}

#define LT_TRY(call)                                                                                              \
    do {                                                                                                          \
        st = (call);                                                                                              \
        if (st != CUBLAS_STATUS_SUCCESS) goto done;                                                               \
    } while (0)

/* cuBLASLt is column-major: it computes C^T = op(B)^T . op(A)^T on the same memory, so its first operand is B. */
static cinfer_status rm_gemm(cuda_exec *x, const graph_node *n, const char *what, const rm_gemm_desc *d, float alpha,
                             const float *a, const float *b, float beta, float *c) {
    const cudaDataType_t dt = CUDA_R_32F;
    const size_t es = sizeof(float);
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t l1 = NULL, l2 = NULL, l3 = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st;
    const cublasOperation_t op1 = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, dt));
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1));
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2));
    /* B row-major [k, n] is column-major n x k (k x n when transposed); A likewise; C is n x m */
    const uint64_t rows1 = (uint64_t)(d->trans_b ? d->k : d->n), cols1 = (uint64_t)(d->trans_b ? d->n : d->k);
    const uint64_t rows2 = (uint64_t)(d->trans_a ? d->m : d->k), cols2 = (uint64_t)(d->trans_a ? d->k : d->m);
    LT_TRY(cublasLtMatrixLayoutCreate(&l1, dt, rows1, cols1, d->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&l2, dt, rows2, cols2, d->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&l3, dt, (uint64_t)d->n, (uint64_t)d->m, d->ldc));
    if (d->batch > 1) {
        const int32_t count = (int32_t)d->batch;
        const int64_t s1 = d->sb, s2 = d->sa, s3 = d->sc;
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l1, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l2, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l3, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l1, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s1, sizeof s1));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l2, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s2, sizeof s2));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l3, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s3, sizeof s3));
    }
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = x->workspace_bytes;
    const uint32_t al1 = lt_alignment(b, d->batch > 1 ? d->sb : 0, es);
    const uint32_t al2 = lt_alignment(a, d->batch > 1 ? d->sa : 0, es);
    const uint32_t al3 = lt_alignment(c, d->batch > 1 ? d->sc : 0, es);
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al1, sizeof al1));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al2, sizeof al2));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al3, sizeof al3));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al3, sizeof al3));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    memset(&heur, 0, sizeof heur);
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(x->lt, op, l1, l2, l3, l3, pref, 1, &heur, &found));
    if (found == 0) {
        st = CUBLAS_STATUS_NOT_SUPPORTED;
        goto done;
    }
    LT_TRY(cublasLtMatmul(x->lt, op, &alpha, b, l1, a, l2, &beta, c, l3, c, l3, &heur.algo, x->workspace,
                          x->workspace_bytes, x->stream));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (l3) cublasLtMatrixLayoutDestroy(l3);
    if (l2) cublasLtMatrixLayoutDestroy(l2);
    if (l1) cublasLtMatrixLayoutDestroy(l1);
    if (op) cublasLtMatmulDescDestroy(op);
    return cuda_check_cublas(n, what, st);
}

/* ---- Attention ---- */

/* v rounded to float16/bfloat16 and back (the CPU kernel's rnd). */
static float host_rnd(int mode, float v) {
    if (mode == ATTN_RND_F16) return dtype_half_to_float(dtype_float_to_half(v));
    if (mode == ATTN_RND_BF16) return dtype_bf16_to_float(dtype_float_to_bf16(v));
    return v;
}

static int rnd_for(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT16 ? ATTN_RND_F16 : t == CINFER_DTYPE_BFLOAT16 ? ATTN_RND_BF16 : ATTN_RND_NONE;
}

/* Floats rounded up to 256 bytes, so every carved region stays aligned for cuBLASLt. */
static int64_t align_floats(int64_t n) { return (n + 63) & ~(int64_t)63; }

cinfer_status cuda_run_attention(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out) {
    const tensor *q = &in[0], *k = &in[1], *v = &in[2];
    const cinfer_dtype qt = q->dtype, vt = v->dtype;
    if (!cuda_attn_is_float(qt)) return cuda_unsupported_dtype(n, qt);
    if (!cuda_attn_is_float(vt)) return cuda_unsupported_dtype(n, vt);

    attention_sdpa a;
    CINFER_TRY(attention_compute_sdpa(n, in, num_in, &a));
    tensor thirds[3]; /* the fusion's packed Q/K/V: views into input 0, rows 3 * width apart */
    if (a.packed) {
        attention_packed_thirds(&in[0], a.packed, thirds);
        q = &thirds[0], k = &thirds[1], v = &thirds[2];
    }
    const bool rank3 = a.rank3;
    const bool has_past = cuda_attn_present(in, num_in, 4) && cuda_attn_present(in, num_in, 5); /* with data */
    const int64_t batch = a.batch, qh = a.qh, kvh = a.kvh, sq = a.sq, skv = a.skv, hd = a.hd, hdv = a.hdv;
    const int64_t past = has_past ? a.past : 0, total = past + skv, rep = qh / kvh;
    /* element strides of 3-D rows: the heads interleave in a row, and packed rows hold Q, K and V */
    const int64_t q_row = a.packed ? 3 * a.packed : qh * hd, k_row = a.packed ? 3 * a.packed : kvh * hd;
    const int64_t v_row = a.packed ? 3 * a.packed : kvh * hdv;

    attn_row_args ra;
    memset(&ra, 0, sizeof ra);
    const float softcap = a.softcap;
    ra.rt = rnd_for(qt);
    /* bfloat16 divided by a Python float promotes to float32 in ml_dtypes: with a softcap the reference runs the
     * rest in float32 and casts the probabilities back */
    ra.rb = qt == CINFER_DTYPE_BFLOAT16 && softcap > 0 ? ATTN_RND_NONE : ra.rt;
    ra.rs = a.has_softmax_precision ? rnd_for(a.softmax_precision) : ra.rb;
    ra.mode = a.mode, ra.causal = a.causal, ra.left = a.left, ra.right = a.right, ra.window = a.window;
    ra.has_past = has_past;
    ra.nonpad = cuda_attn_present(in, num_in, 6) && !has_past ? (const int64_t *)in[6].data : NULL;
    ra.softcap = softcap > 0 ? host_rnd(ra.rb, softcap) : 0.0f;
    ra.qh = qh;
    ra.sq = sq;
    ra.total = total;
    ra.past = past;
    /* the reference multiplies Q and K each by sqrt(scale), cast to the input type */
    const float sf = host_rnd(ra.rt, (float)sqrt(a.scale));
    if (cuda_attn_present(in, num_in, 3)) {
        const tensor *mask = &in[3];
        int64_t md[4] = {1, 1, 1, 1};
        for (int d = 0; d < mask->ndim; d++) md[4 - mask->ndim + d] = mask->dims[d];
        ra.mask = mask->data;
        ra.mask_dtype = mask->dtype;
        ra.mlen = md[3];
        ra.ms_q = md[2] == 1 ? 0 : md[3];
        ra.ms_h = md[1] == 1 ? 0 : md[2] * md[3];
        ra.ms_b = md[0] == 1 ? 0 : md[1] * md[2] * md[3];
    }
    ra.qk = num_out > 3 && out[3].data ? out[3].data : NULL;
    ra.nan_to_zero = graph_attr_int(n, "cinfer_nan_to_zero", 0) != 0;
    ra.empty_rows_nan = graph_attr_int(n, "cinfer_empty_rows_nan", 0) != 0;

    /* the common case (BERT-style self-attention, what graph/fusion.c makes of the exported pattern) runs as one
     * fused kernel; the rest of Attention's options go the general way below */
    const bool want_extras = (num_out > 1 && out[1].data) || (num_out > 2 && out[2].data) || ra.qk;
    if (qt == vt && !has_past && !want_extras && !a.causal && !a.window && softcap == 0 && !ra.nonpad && hd == hdv &&
        (!a.has_softmax_precision || a.softmax_precision == CINFER_DTYPE_FLOAT) && tensor_numel(&out[0]) > 0) {
        attn_flash_args fa = {.q = q->data, .k = k->data, .v = v->data, .y = out[0].data, .batch = batch, .qh = qh,
                              .kvh = kvh, .sq = sq, .skv = skv, .hd = hd, .scale = (float)a.scale, .mask = ra.mask,
                              .mask_dtype = ra.mask_dtype, .mlen = ra.mlen, .ms_b = ra.ms_b, .ms_h = ra.ms_h,
                              .ms_q = ra.ms_q, .nan_to_zero = ra.nan_to_zero,
                              .empty_rows_nan = ra.empty_rows_nan};
        /* element strides of (batch, head, position); K and V share theirs (hd == hdv) */
        fa.q_sb = sq * q_row, fa.q_sh = rank3 ? hd : sq * hd, fa.q_ss = rank3 ? q_row : hd;
        fa.kv_sb = skv * k_row, fa.kv_sh = rank3 ? hd : skv * hd, fa.kv_ss = rank3 ? k_row : hd;
        fa.y_sb = sq * qh * hd, fa.y_sh = fa.q_sh, fa.y_ss = rank3 ? qh * hd : hd;
        if (attn_flash_fits(qt, &fa)) return cuda_check_launch(n, "fused attention", attn_flash_run(qt, &fa, x->stream));
    }

    /* present_key/present_value = concat(past, new) in their own dtype */
    if (num_out > 1 && out[1].data)
        CINFER_TRY(cuda_check_launch(n, "present_key",
                                     attn_sdpa_present(cinfer_dtype_size(out[1].dtype), has_past ? in[4].data : NULL,
                                                       k->data, out[1].data, batch, kvh, past, skv, hd,
                                                       rank3 ? k_row : 0, x->stream)));
    if (num_out > 2 && out[2].data)
        CINFER_TRY(cuda_check_launch(n, "present_value",
                                     attn_sdpa_present(cinfer_dtype_size(out[2].dtype), has_past ? in[5].data : NULL,
                                                       v->data, out[2].data, batch, kvh, past, skv, hdv,
                                                       rank3 ? v_row : 0, x->stream)));
    const int64_t rows_all = batch * qh * sq;
    const bool want_y = tensor_numel(&out[0]) > 0;
    if ((!want_y && !ra.qk) || rows_all == 0) return CINFER_OK;
    if (total == 0) /* no keys: every row is fully masked and Y is zero (qk_matmul_output is empty) */
        return want_y ? cuda_check_launch(n, "zero output",
                                          cudaMemsetAsync(out[0].data, 0, tensor_nbytes(&out[0]), x->stream))
                      : CINFER_OK;

    /* float32 4-D operands are read in place (the scale then goes into the GEMM's alpha); the rest is staged */
    const bool f32 = qt == CINFER_DTYPE_FLOAT, v32 = vt == CINFER_DTYPE_FLOAT;
    const bool qk_direct = f32 && !rank3, v_direct = v32 && !rank3, y_direct = f32 && !rank3;
    const float alpha = f32 ? sf * sf : 1.0f, qk_scale = f32 ? 1.0f : sf;
    const int64_t units = batch * kvh, rows = rep * sq, per_unit = rows * total;
    int64_t chunk = ATTN_SCORE_BUDGET / per_unit;
    if (chunk < 1) chunk = 1;
    if (chunk > units) chunk = units;
    if (chunk > ATTN_MAX_BATCH) chunk = ATTN_MAX_BATCH;

    const int64_t nq = qk_direct ? 0 : align_floats(rows_all * hd);
    const int64_t nk = qk_direct ? 0 : align_floats(units * skv * hd);
    const int64_t npk = has_past && !f32 ? align_floats(units * past * hd) : 0;
    const int64_t nv = v_direct ? 0 : align_floats(units * skv * hdv);
    const int64_t npv = has_past && !v32 ? align_floats(units * past * hdv) : 0;
    const int64_t ny = y_direct || hdv == 0 ? 0 : align_floats(rows_all * hdv);
    const int64_t ns = align_floats(chunk * per_unit);
    const size_t bytes = (size_t)(nq + nk + npk + nv + npv + ny + ns) * sizeof(float);
    float *base = cuda_scratch(x, bytes);
    if (!base)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "Attention node '%s': cannot allocate %zu bytes of device scratch",
                          n->name, bytes);
    float *qs_buf = base, *ks_buf = qs_buf + nq, *pks_buf = ks_buf + nk, *vs_buf = pks_buf + npk;
    float *pvs_buf = vs_buf + nv, *yf = pvs_buf + npv, *scores = yf + ny;

    const float *qs = q->data, *ks = k->data, *pks = has_past ? in[4].data : NULL;
    const float *vs = v->data, *pvs = has_past ? in[5].data : NULL;
    if (!qk_direct) {
        CINFER_TRY(cuda_check_launch(n, "stage Q", attn_sdpa_stage(qt, q->data, qs_buf, batch, qh, sq, hd,
                                                                   rank3 ? q_row : 0, qk_scale, ra.rt, x->stream)));
        CINFER_TRY(cuda_check_launch(n, "stage K", attn_sdpa_stage(qt, k->data, ks_buf, batch, kvh, skv, hd,
                                                                   rank3 ? k_row : 0, qk_scale, ra.rt, x->stream)));
        qs = qs_buf;
        ks = ks_buf;
    }
    if (has_past && !f32) {
        CINFER_TRY(cuda_check_launch(n, "stage past_key", attn_sdpa_stage(qt, in[4].data, pks_buf, batch, kvh, past,
                                                                          hd, 0, qk_scale, ra.rt, x->stream)));
        pks = pks_buf;
    }
    if (!v_direct) {
        CINFER_TRY(cuda_check_launch(n, "stage V", attn_sdpa_stage(vt, v->data, vs_buf, batch, kvh, skv, hdv,
                                                                   rank3 ? v_row : 0, 1.0f, ATTN_RND_NONE,
                                                                   x->stream)));
        vs = vs_buf;
    }
    if (has_past && !v32) {
        CINFER_TRY(cuda_check_launch(n, "stage past_value", attn_sdpa_stage(vt, in[5].data, pvs_buf, batch, kvh, past,
                                                                            hdv, 0, 1.0f, ATTN_RND_NONE,
                                                                            x->stream)));
        pvs = pvs_buf;
    }
    float *ydst = y_direct ? (float *)out[0].data : yf;

    for (int64_t u0 = 0; u0 < units; u0 += chunk) {
        const int64_t cnt = units - u0 < chunk ? units - u0 : chunk;
        const float *qa = qs + u0 * rows * hd;
        /* scores[unit][rows, total]: past keys in columns [0, past), new keys in [past, total) */
        if (hd == 0) {
            CINFER_TRY(cuda_check_launch(n, "zero scores", cudaMemsetAsync(scores, 0, (size_t)(cnt * per_unit) *
                                                                                       sizeof(float), x->stream)));
        } else {
            rm_gemm_desc g = {.trans_a = false, .trans_b = true, .m = rows, .k = hd, .batch = cnt, .lda = hd,
                              .ldb = hd, .ldc = total, .sa = rows * hd, .sc = per_unit};
            if (past > 0) {
                g.n = past;
                g.sb = past * hd;
                CINFER_TRY(rm_gemm(x, n, "Q.past_key^T GEMM", &g, alpha, qa, pks + u0 * past * hd, 0.0f, scores));
            }
            if (skv > 0) {
                g.n = skv;
                g.sb = skv * hd;
                CINFER_TRY(rm_gemm(x, n, "Q.K^T GEMM", &g, alpha, qa, ks + u0 * skv * hd, 0.0f, scores + past));
            }
        }
        ra.row0 = u0 * rows;
        ra.nrows = cnt * rows;
        ra.scores = scores;
        CINFER_TRY(cuda_check_launch(n, "softmax rows", attn_sdpa_rows(qt, &ra, x->stream)));
        if (hdv > 0 && want_y) {
            /* Y[unit][rows, hdv] = P[:, past part] . past_value + P[:, new part] . V */
            float *yc = ydst + u0 * rows * hdv;
            rm_gemm_desc g = {.trans_a = false, .trans_b = false, .m = rows, .n = hdv, .batch = cnt, .lda = total,
                              .ldb = hdv, .ldc = hdv, .sa = per_unit, .sc = rows * hdv};
            if (past > 0) {
                g.k = past;
                g.sb = past * hdv;
                CINFER_TRY(rm_gemm(x, n, "P.past_value GEMM", &g, 1.0f, scores, pvs + u0 * past * hdv, 0.0f, yc));
            }
            if (skv > 0) {
                g.k = skv;
                g.sb = skv * hdv;
                CINFER_TRY(rm_gemm(x, n, "P.V GEMM", &g, 1.0f, scores + past, vs + u0 * skv * hdv,
                                   past > 0 ? 1.0f : 0.0f, yc));
            }
        }
    }
    if (!y_direct && hdv > 0 && want_y)
        CINFER_TRY(cuda_check_launch(n, "store Y", attn_sdpa_store(qt, yf, out[0].data, batch, qh, sq, hdv, rank3,
                                                                   x->stream)));
    return CINFER_OK;
}
