/* CUDA kernels of the recurrent family (host side): LSTM, GRU and RNN.
 *
 * Attributes and shapes are read by graph/shape/recurrent_params.h, as for the CPU kernel. Per node:
 *   X * W^T for every step and direction     one cuBLASLt GEMM per direction, into xw
 *   per step: H * R^T for both directions    one strided-batched cuBLASLt GEMM (batch = directions), into hr
 *             gates and states               one step kernel (GRU without linear_before_reset: the reset half,
 *                                            a second GEMM (r * H) * Rh^T, then the hidden half)
 * float and double compute in their type; float16/bfloat16 stage X, W and R to float32 and compute in float32,
 * rounding once when Y, Y_h and Y_c are written (as the CPU kernel does). The GEMM descriptors and algorithms
 * are chosen once per node and reused for every step; nothing waits on the host between steps.
 * sequence_lens stays on the device: the step kernel masks rows past their length. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/recurrent.h"
#include "core/status.h"
#include "graph/shape/recurrent_params.h"

/* ---- cuBLASLt (file-local; the attention family has its own copy) ---- */

/* A row-major strided-batched GEMM C[m, n] = alpha * A[m, k] . B[n, k]^T + beta * C, planned once (descriptors
 * and algorithm) and run as often as needed on pointers of the alignment it was planned for. */
typedef struct lt_plan {
    cudaDataType_t dt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l1, l2, l3; /* column-major view: B^T (first operand), A^T, C^T */
    cublasLtMatmulAlgo_t algo;
} lt_plan;

static void lt_plan_free(lt_plan *p) {
    if (p->l3) cublasLtMatrixLayoutDestroy(p->l3);
    if (p->l2) cublasLtMatrixLayoutDestroy(p->l2);
    if (p->l1) cublasLtMatrixLayoutDestroy(p->l1);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

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

/* Plans C = A . B^T (row-major, lda/ldb/ldc row strides, sa/sb/sc batch strides) for `batch` members. cuBLASLt is
 * column-major: it computes C^T = B . A^T, with B (stored n x k row-major, k x n column-major) transposed. a, b, c
 * are the first pointers the plan will run on; runs may add multiples of sa/sb/sc to them (the alignment the plan
 * assumes allows for that, also with batch 1). */
static cinfer_status lt_plan_init(cuda_exec *x, const graph_node *n, const char *what, lt_plan *p, cudaDataType_t dt,
                                  int64_t m, int64_t nn, int64_t k, const void *a, int64_t lda, int64_t sa,
                                  const void *b, int64_t ldb, int64_t sb, const void *c, int64_t ldc, int64_t sc,
                                  int64_t batch) {
    memset(p, 0, sizeof *p);
    p->dt = dt;
    const size_t es = dt == CUDA_R_64F ? sizeof(double) : sizeof(float);
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st;
    const cublasOperation_t op1 = CUBLAS_OP_T, op2 = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, dt == CUDA_R_64F ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, dt));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->l1, dt, (uint64_t)k, (uint64_t)nn, ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->l2, dt, (uint64_t)k, (uint64_t)m, lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->l3, dt, (uint64_t)nn, (uint64_t)m, ldc));
    if (batch > 1) {
        const int32_t count = (int32_t)batch;
        LT_TRY(cublasLtMatrixLayoutSetAttribute(p->l1, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(p->l2, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(p->l3, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(p->l1, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(p->l2, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(p->l3, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc));
    }
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = x->workspace_bytes;
    const uint32_t al1 = lt_alignment(b, sb, es), al2 = lt_alignment(a, sa, es), al3 = lt_alignment(c, sc, es);
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al1, sizeof al1));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al2, sizeof al2));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al3, sizeof al3));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al3, sizeof al3));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    memset(&heur, 0, sizeof heur);
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(x->lt, p->op, p->l1, p->l2, p->l3, p->l3, pref, 1, &heur, &found));
    if (found == 0) {
        st = CUBLAS_STATUS_NOT_SUPPORTED;
        goto done;
    }
    p->algo = heur.algo;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) lt_plan_free(p);
    return cuda_check_cublas(n, what, st);
}

/* C = A . B^T + beta * C on the planned shapes (alpha 1); beta is 0 or 1. */
static cinfer_status lt_plan_run(cuda_exec *x, const graph_node *n, const char *what, const lt_plan *p,
                                 const void *a, const void *b, void *c) {
    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const bool dbl = p->dt == CUDA_R_64F;
    return cuda_check_cublas(n, what, cublasLtMatmul(x->lt, p->op, dbl ? (const void *)&one_d : (const void *)&one_f,
                                                     b, p->l1, a, p->l2,
                                                     dbl ? (const void *)&zero_d : (const void *)&zero_f, c, p->l3, c,
                                                     p->l3, &p->algo, x->workspace, x->workspace_bytes, x->stream));
}

/* ---- LSTM, GRU, RNN ---- */

static bool has(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED && in[i].data != NULL;
}

/* Elements rounded up to 256 bytes, so every carved region stays aligned for cuBLASLt. */
static int64_t align_elems(int64_t count, size_t es) {
    const int64_t per = (int64_t)(256 / es);
    return (count + per - 1) / per * per;
}

static cinfer_status rnn_kernel(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out, int gates) {
    const tensor *xt = &in[0];
    const cinfer_dtype t = xt->dtype;
    const bool half = t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
    if (t != CINFER_DTYPE_FLOAT && t != CINFER_DTYPE_DOUBLE && !half) return cuda_unsupported_dtype(n, t);
    recurrent_params p;
    CINFER_TRY(recurrent_compute_params(n, in, num_in, &p));
    CINFER_TRY(recurrent_read_activations(n, &p));
    rnn_step_args s;
    memset(&s, 0, sizeof s);
    s.gates = gates;
    s.layout = p.layout;
    s.seq = p.seq;
    s.batch = p.batch;
    s.ndir = p.ndir;
    s.hidden = p.hidden;
    s.reverse = p.reverse;
    s.lbr = p.lbr;
    s.input_forget = p.input_forget;
    s.has_clip = p.has_clip;
    s.clip = p.clip;
    memcpy(s.act, p.act, sizeof s.act);
    const int64_t S = s.seq, B = s.batch, IN = p.input_size, H = s.hidden, ND = s.ndir, GH = gates * H;

    if (has(in, num_in, 4)) {
        const tensor *sl = &in[4];
        if (sl->dtype != CINFER_DTYPE_INT32 && sl->dtype != CINFER_DTYPE_INT64)
            return cuda_unsupported_dtype(n, sl->dtype);
        s.lens = sl->data;
        s.lens64 = sl->dtype == CINFER_DTYPE_INT64;
        /* device data: checked here only when the host knows it; otherwise the step kernel turns the rows of a
         * length outside [0, seq] into NaN */
        if (sl->host_data)
            for (int64_t b = 0; b < B; b++) {
                const int64_t len =
                    s.lens64 ? ((const int64_t *)sl->host_data)[b] : ((const int32_t *)sl->host_data)[b];
                if (len < 0 || len > S)
                    return core_error(CINFER_ERR_INVALID_ARGUMENT,
                                      "%s node '%s': sequence_lens[%lld] = %lld is outside [0, seq_length=%lld]",
                                      n->op_type, n->name, (long long)b, (long long)len, (long long)S);
            }
    }
    void *y = num_out > 0 && out[0].data ? out[0].data : NULL;
    void *yh = num_out > 1 && out[1].data ? out[1].data : NULL;
    void *yc = gates == 4 && num_out > 2 && out[2].data ? out[2].data : NULL;
    if (B == 0 || H == 0 || ND == 0) return CINFER_OK;

    /* one scratch request: float32 staging of X, W, R (half types), then xw, hr, h, c, tmp, tmp2, bias, rbh */
    const size_t es = t == CINFER_DTYPE_DOUBLE ? sizeof(double) : sizeof(float);
    const int64_t nx = half ? align_elems(S * B * IN, es) : 0, nw = half ? align_elems(ND * GH * IN, es) : 0;
    const int64_t nr = half ? align_elems(ND * GH * H, es) : 0;
    const int64_t nxw = align_elems(ND * S * B * GH, es), nhr = align_elems(ND * B * GH, es);
    const int64_t nst = align_elems(ND * B * H, es), nbias = align_elems(ND * GH, es), nrbh = align_elems(ND * H, es);
    const int64_t elems = nx + nw + nr + nxw + nhr + 4 * nst + nbias + nrbh;
    char *base = cuda_scratch(x, (size_t)elems * es);
    if (!base)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate %zu bytes of device scratch",
                          n->op_type, n->name, (size_t)elems * es);
    char *cur = base;
#define CARVE(count) (cur += (size_t)(count) * es, cur - (size_t)(count) * es)
    char *xs = CARVE(nx), *ws = CARVE(nw), *rs = CARVE(nr), *xw = CARVE(nxw), *hr = CARVE(nhr);
    char *h = CARVE(nst), *c = CARVE(nst), *tmp = CARVE(nst), *tmp2 = CARVE(nst), *bias = CARVE(nbias);
    char *rbh = CARVE(nrbh);
#undef CARVE
    const void *X = xt->data, *W = in[1].data, *R = in[2].data;
    if (half) {
        CINFER_TRY(cuda_check_launch(n, "stage X", rnn_to_float(t, X, (float *)xs, S * B * IN, x->stream)));
        CINFER_TRY(cuda_check_launch(n, "stage W", rnn_to_float(t, W, (float *)ws, ND * GH * IN, x->stream)));
        CINFER_TRY(cuda_check_launch(n, "stage R", rnn_to_float(t, R, (float *)rs, ND * GH * H, x->stream)));
        X = xs;
        W = ws;
        R = rs;
    }
    CINFER_TRY(cuda_check_launch(n, "bias", rnn_prepare_bias(t, has(in, num_in, 3) ? in[3].data : NULL, bias, rbh, ND,
                                                             gates, H, s.lbr, x->stream)));
    CINFER_TRY(cuda_check_launch(n, "initial state",
                                 rnn_init_state(t, has(in, num_in, 5) ? in[5].data : NULL,
                                                gates == 4 && has(in, num_in, 6) ? in[6].data : NULL, h,
                                                gates == 4 ? c : NULL, ND, B, H, s.layout, x->stream)));
    if (y && s.lens) /* steps past a length stay 0 */
        CINFER_TRY(cuda_check_launch(n, "zero Y", cudaMemsetAsync(y, 0, tensor_nbytes(&out[0]), x->stream)));

    const cudaDataType_t dt = t == CINFER_DTYPE_DOUBLE ? CUDA_R_64F : CUDA_R_32F;
    cinfer_status rc = CINFER_OK;
    lt_plan proj, rec, rec_h;
    memset(&proj, 0, sizeof proj);
    memset(&rec, 0, sizeof rec);
    memset(&rec_h, 0, sizeof rec_h);
    if (S > 0) {
        /* xw[d] = X . W[d]^T: X rows are (t, b) for layout 0 and (b, t) for layout 1, one GEMM either way */
        if (IN == 0) {
            rc = cuda_check_launch(n, "zero projections", cudaMemsetAsync(xw, 0, (size_t)(ND * S * B * GH) * es,
                                                                          x->stream));
        } else {
            rc = lt_plan_init(x, n, "X.W^T GEMM", &proj, dt, S * B, GH, IN, X, IN, 0, W, IN, GH * IN, xw, GH,
                              S * B * GH, 1);
            for (int64_t d = 0; d < ND && rc == CINFER_OK; d++)
                rc = lt_plan_run(x, n, "X.W^T GEMM", &proj, X, (const char *)W + (size_t)(d * GH * IN) * es,
                                 xw + (size_t)(d * S * B * GH) * es);
        }
        /* hr[d] = h[d] . R[d]^T for every direction at once (GRU without linear_before_reset: the z and r rows of
         * R only; its hidden-gate product is rec_h on r * h) */
        const bool gru_split = gates == 3 && !s.lbr;
        if (rc == CINFER_OK)
            rc = lt_plan_init(x, n, "H.R^T GEMM", &rec, dt, B, gru_split ? 2 * H : GH, H, h, H, B * H, R, H, GH * H,
                              hr, GH, B * GH, ND);
        if (rc == CINFER_OK && gru_split)
            rc = lt_plan_init(x, n, "(r*H).Rh^T GEMM", &rec_h, dt, B, H, H, tmp, H, B * H,
                              (const char *)R + (size_t)(2 * H * H) * es, H, GH * H, tmp2, H, B * H, ND);
        s.xw = xw;
        s.bias = bias;
        s.rbh = rbh;
        s.tmp2 = tmp2;
        s.hr = hr;
        s.h = h;
        s.c = c;
        s.tmp = tmp;
        s.p = gates == 4 && has(in, num_in, 7) ? in[7].data : NULL;
        s.y = y;
        for (int64_t step = 0; step < S && rc == CINFER_OK; step++) {
            s.step = step;
            rc = lt_plan_run(x, n, "H.R^T GEMM", &rec, h, R, hr);
            if (rc != CINFER_OK) break;
            s.phase = gru_split ? RNN_PHASE_GRU_RESET : RNN_PHASE_CELL;
            rc = cuda_check_launch(n, "step", rnn_step(t, &s, x->stream));
            if (rc != CINFER_OK || !gru_split) continue;
            rc = lt_plan_run(x, n, "(r*H).Rh^T GEMM", &rec_h, tmp, (const char *)R + (size_t)(2 * H * H) * es, tmp2);
            if (rc != CINFER_OK) break;
            s.phase = RNN_PHASE_GRU_HIDDEN;
            rc = cuda_check_launch(n, "step", rnn_step(t, &s, x->stream));
        }
    }
    lt_plan_free(&proj);
    lt_plan_free(&rec);
    lt_plan_free(&rec_h);
    CINFER_TRY(rc);
    return cuda_check_launch(n, "final state",
                             rnn_store_state(t, h, gates == 4 ? c : NULL, yh, yc, ND, B, H, s.layout, x->stream));
}

static cinfer_status kernel_lstm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out) {
    return rnn_kernel(x, n, in, num_in, out, num_out, 4);
}
static cinfer_status kernel_gru(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    return rnn_kernel(x, n, in, num_in, out, num_out, 3);
}
static cinfer_status kernel_rnn(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    return rnn_kernel(x, n, in, num_in, out, num_out, 1);
}

const cuda_kernel cuda_recurrent_kernels[] = {
    {"LSTM", kernel_lstm},
    {"GRU", kernel_gru},
    {"RNN", kernel_rnn},
    {NULL, NULL},
};
