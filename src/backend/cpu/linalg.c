/* CPU kernels of the linalg family: MatMul (numpy batching), Gemm, MatMulInteger and QLinearMatMul. */

/* float and double go to OpenBLAS, float16/bfloat16 through float32 staging, integers through plain loops
 * that wrap like numpy. */
#include <limits.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "backend/cpu/elementwise_internal.h"
#include "core/status.h"
#include "graph/shape/linalg_params.h"

/* ---- float staging for float16 / bfloat16 ---- */

typedef cinfer_status (*kernel_fn)(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* 64-byte aligned regions of the one scratch request */
static size_t align_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* Runs `fn` on float32 copies of the half-precision inputs and output 0, then converts back. The copies
 * share one cpu_scratch request; the float32 kernels request none of their own. */
static cinfer_status run_staged(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                kernel_fn fn) {
    tensor sin[3], sout = out[0];
    size_t off[3], total = 0;
    if (num_in > 3) num_in = 3;
    for (int i = 0; i < num_in; i++) {
        off[i] = total;
        if (in[i].dtype != CINFER_DTYPE_UNDEFINED) total += align_up((size_t)tensor_numel(&in[i]) * sizeof(float));
    }
    size_t out_off = total;
    total += align_up((size_t)tensor_numel(&out[0]) * sizeof(float));
    char *base = cpu_scratch(total > 0 ? total : 1);
    if (!base)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate float32 staging buffers",
                          n->op_type, n->name);
    for (int i = 0; i < num_in; i++) {
        sin[i] = in[i];
        if (in[i].dtype == CINFER_DTYPE_UNDEFINED) continue;
        sin[i].dtype = CINFER_DTYPE_FLOAT;
        sin[i].data = base + off[i];
        cpu_convert_half_to_float(in[i].dtype, in[i].data, sin[i].data, tensor_numel(&in[i]));
    }
    sout.dtype = CINFER_DTYPE_FLOAT;
    sout.data = base + out_off;
    cinfer_status st = fn(n, sin, num_in, &sout, num_out > 1 ? 1 : num_out);
    if (st == CINFER_OK) cpu_convert_float_to_half(out[0].dtype, sout.data, out[0].data, tensor_numel(&out[0]));
    return st;
}

static cinfer_status check_blas_dims(const graph_node *n, int64_t m, int64_t nn, int64_t k) {
    if (m > INT_MAX || nn > INT_MAX || k > INT_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': matrix dims %lldx%lldx%lld exceed the BLAS int range",
                          n->op_type, n->name, (long long)m, (long long)nn, (long long)k);
    return CINFER_OK;
}

/* ---- typed row-major C[m,n] = A[m,k] * B[k,n] ---- */

typedef void (*matmul_fn)(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c);

static void matmul_f32(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c) {
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0f, a, (int)k, b, 1, 0.0f, c, 1);
    else if (m == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, 1.0f, b, (int)n, a, 1, 0.0f, c, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n,
                    0.0f, c, (int)n);
}

static void matmul_f64(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c) {
    if (n == 1)
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0, a, (int)k, b, 1, 0.0, c, 1);
    else if (m == 1)
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, 1.0, b, (int)n, a, 1, 0.0, c, 1);
    else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0, a, (int)k, b, (int)n, 0.0,
                    c, (int)n);
}

/* Small float products, run in parallel over batches (no BLAS call per tiny matrix). */
static void matmul_f32_small(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c) {
    for (int64_t i = 0; i < m; i++) {
        float *cr = c + i * n;
        for (int64_t j = 0; j < n; j++) cr[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            float av = a[i * k + p];
            const float *br = b + p * n;
            for (int64_t j = 0; j < n; j++) cr[j] += av * br[j];
        }
    }
}

/* Integers accumulate in the unsigned type of the same width: wraps like numpy, no signed overflow. */
#define DEFINE_MATMUL_INT(name, T, U)                                                                      \
    static void name(int64_t m, int64_t n, int64_t k, const void *av, const void *bv, void *cv) {         \
        const T *a = av, *b = bv;                                                                          \
        T *c = cv;                                                                                         \
        for (int64_t i = 0; i < m; i++) {                                                                  \
            U *cr = (U *)(c + i * n);                                                                      \
            for (int64_t j = 0; j < n; j++) cr[j] = 0;                                                     \
            for (int64_t p = 0; p < k; p++) {                                                              \
                U x = (U)a[i * k + p];                                                                     \
                const T *br = b + p * n;                                                                   \
                for (int64_t j = 0; j < n; j++) cr[j] = (U)(cr[j] + (U)(x * (U)br[j]));                   \
            }                                                                                              \
        }                                                                                                  \
    }
DEFINE_MATMUL_INT(matmul_i8, int8_t, uint8_t)
DEFINE_MATMUL_INT(matmul_u8, uint8_t, uint8_t)
DEFINE_MATMUL_INT(matmul_i16, int16_t, uint16_t)
DEFINE_MATMUL_INT(matmul_u16, uint16_t, uint16_t)
DEFINE_MATMUL_INT(matmul_i32, int32_t, uint32_t)
DEFINE_MATMUL_INT(matmul_u32, uint32_t, uint32_t)
DEFINE_MATMUL_INT(matmul_i64, int64_t, uint64_t)
DEFINE_MATMUL_INT(matmul_u64, uint64_t, uint64_t)

static matmul_fn matmul_for(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return matmul_f32;
    case CINFER_DTYPE_DOUBLE: return matmul_f64;
    case CINFER_DTYPE_INT8: return matmul_i8;
    case CINFER_DTYPE_UINT8: return matmul_u8;
    case CINFER_DTYPE_INT16: return matmul_i16;
    case CINFER_DTYPE_UINT16: return matmul_u16;
    case CINFER_DTYPE_INT32: return matmul_i32;
    case CINFER_DTYPE_UINT32: return matmul_u32;
    case CINFER_DTYPE_INT64: return matmul_i64;
    case CINFER_DTYPE_UINT64: return matmul_u64;
    default: return NULL;
    }
}

/* ---- MatMul ---- */

/* Offsets, in whole matrices, of A's and B's operands for batch i of the broadcast batch dims bdims[nb]
 * (sa, sb: the operands' batch strides, 0 where one broadcasts). */
static inline void batch_offsets(int64_t i, int nb, const int64_t *bdims, const int64_t *sa, const int64_t *sb,
                                 int64_t *oa, int64_t *ob) {
    int64_t rem = i, a = 0, b = 0;
    for (int d = nb - 1; d >= 0; d--) {
        int64_t idx = rem % bdims[d];
        rem /= bdims[d];
        a += idx * sa[d];
        b += idx * sb[d];
    }
    *oa = a;
    *ob = b;
}

static cinfer_status run_matmul(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const tensor *a = &in[0], *b = &in[1];
    tensor *y = &out[0];
    if (cpu_is_half(a->dtype)) return run_staged(n, in, num_in, out, num_out, run_matmul);
    matmul_fn mm = matmul_for(a->dtype);
    if (!mm) return cpu_unsupported_dtype(n, a->dtype);
    linalg_matmul p; /* dims and broadcast batch geometry */
    CINFER_TRY(linalg_compute_matmul(n, in, &p));
    size_t es = cinfer_dtype_size(a->dtype);
    const int64_t m = p.m, k = p.k, nn = p.n, batch = p.batch;
    int64_t total = tensor_numel(y);
    if (total == 0) return CINFER_OK;
    if (k == 0) {
        memset(y->data, 0, (size_t)total * es);
        return CINFER_OK;
    }
    const int nb = p.nb, rb = p.b_batch_rank;
    const int64_t *bdims = p.batch_dims, *sa = p.stride_a, *sb = p.stride_b;
    const char *ap = a->data, *bp = b->data;
    char *yp = y->data;
    /* B without batch dims: the batches of A stack into one tall product */
    if (rb == 0) {
        CINFER_TRY(check_blas_dims(n, batch * m, nn, k));
        mm(batch * m, nn, k, ap, bp, yp);
        return CINFER_OK;
    }
    CINFER_TRY(check_blas_dims(n, m, nn, k));
    int threads = cpu_num_threads();
    /* many small products: spread over the threads rather than a BLAS call per tiny matrix (when there is
     * enough work to pay for the fork) */
    if (a->dtype == CINFER_DTYPE_FLOAT && threads > 1 && batch >= 2 && m * nn * k <= 32768 &&
        batch * m * nn * k >= ((int64_t)1 << 17)) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t i = 0; i < batch; i++) {
            int64_t oa, ob;
            batch_offsets(i, nb, bdims, sa, sb, &oa, &ob);
            matmul_f32_small(m, nn, k, (const float *)ap + oa * m * k, (const float *)bp + ob * k * nn,
                             (float *)yp + i * m * nn);
        }
        return CINFER_OK;
    }
    for (int64_t i = 0; i < batch; i++) {
        int64_t oa, ob;
        batch_offsets(i, nb, bdims, sa, sb, &oa, &ob);
        mm(m, nn, k, ap + (size_t)(oa * m * k) * es, bp + (size_t)(ob * k * nn) * es, yp + (size_t)(i * m * nn) * es);
    }
    return CINFER_OK;
}

/* ---- Gemm ---- */

/* Copies C, unidirectionally broadcast, into every row of Y[m, n]. */
static void gemm_fill_c(const tensor *c, void *y, int64_t m, int64_t nn, size_t es) {
    int64_t crows = c->ndim == 2 ? c->dims[0] : 1, ccols = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
    const char *cp = c->data;
    char *yp = y;
    for (int64_t i = 0; i < m; i++) {
        const char *src = cp + (size_t)((crows == 1 ? 0 : i) * ccols) * es;
        char *dst = yp + (size_t)(i * nn) * es;
        if (ccols == nn) {
            memcpy(dst, src, (size_t)nn * es);
        } else {
            for (int64_t j = 0; j < nn; j++) memcpy(dst + (size_t)j * es, src, es);
        }
    }
}

#define DEFINE_GEMM_INT(name, T, U)                                                                        \
    static void name(bool ta, bool tb, int64_t m, int64_t nn, int64_t k, double alpha, const T *a,        \
                     const T *b, double beta, bool has_c, T *y) {                                          \
        bool plain = alpha == 1.0 && (!has_c || beta == 1.0);                                              \
        for (int64_t i = 0; i < m; i++)                                                                    \
            for (int64_t j = 0; j < nn; j++) {                                                             \
                U acc = 0;                                                                                 \
                for (int64_t p = 0; p < k; p++) {                                                          \
                    U x = (U)(ta ? a[p * m + i] : a[i * k + p]);                                           \
                    U w = (U)(tb ? b[j * k + p] : b[p * nn + j]);                                          \
                    acc = (U)(acc + (U)(x * w));                                                           \
                }                                                                                          \
                T *dst = &y[i * nn + j];                                                                   \
                if (plain) *dst = (T)(has_c ? (U)(acc + (U)*dst) : acc);                                   \
                else *dst = (T)(alpha * (double)(T)acc + (has_c ? beta * (double)*dst : 0.0));            \
            }                                                                                              \
    }
DEFINE_GEMM_INT(gemm_i32, int32_t, uint32_t)
DEFINE_GEMM_INT(gemm_u32, uint32_t, uint32_t)
DEFINE_GEMM_INT(gemm_i64, int64_t, uint64_t)
DEFINE_GEMM_INT(gemm_u64, uint64_t, uint64_t)

static cinfer_status gemm_product(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* Gemm, then the fused Relu or Gelu ("cinfer_fused_relu", "cinfer_fused_gelu": 1 erf, 2 tanh; graph/passes.c) in
 * place over Y through the activation's own kernel (half types are staged through float32 and get it there). */
static cinfer_status run_gemm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (cpu_is_half(in[0].dtype)) return run_staged(n, in, num_in, out, num_out, run_gemm);
    CINFER_TRY(gemm_product(n, in, num_in, out, num_out));
    const int64_t gelu = graph_attr_int(n, "cinfer_fused_gelu", 0);
    if (gelu) {
        graph_attr form = {.name = "approximate", .type = ATTR_STRING, .s = gelu == 2 ? "tanh" : "none"};
        form.n = strlen(form.s);
        graph_node act = {.name = n->name, .op_type = "Gelu", .domain = "", .num_attrs = 1, .attrs = &form};
        return cpu_run_unary_op(&act, out, 1, out, 1);
    }
    if (!graph_attr_int(n, "cinfer_fused_relu", 0) || out[0].dtype == CINFER_DTYPE_UINT32 ||
        out[0].dtype == CINFER_DTYPE_UINT64) /* unsigned: max(0, y) is y */
        return CINFER_OK;
    graph_node relu = {.name = n->name, .op_type = "Relu"};
    return cpu_run_unary_op(&relu, out, 1, out, 1);
}

static cinfer_status gemm_product(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *a = &in[0], *b = &in[1];
    const tensor *c = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    linalg_gemm p;
    CINFER_TRY(linalg_compute_gemm(n, in, num_in, &p));
    const bool ta = p.trans_a, tb = p.trans_b;
    const float alpha = p.alpha, beta = p.beta;
    const int64_t m = p.m, nn = p.n, k = p.k; /* Y is [m, nn] (the schema's shape) */
    CINFER_TRY(check_blas_dims(n, m, nn, k));
    size_t es = cinfer_dtype_size(a->dtype);
    if (m * nn == 0) return CINFER_OK;
    bool use_c = c && beta != 0.0f && tensor_numel(c) > 0;
    if (a->dtype != CINFER_DTYPE_FLOAT && a->dtype != CINFER_DTYPE_DOUBLE && a->dtype != CINFER_DTYPE_INT32 &&
        a->dtype != CINFER_DTYPE_UINT32 && a->dtype != CINFER_DTYPE_INT64 && a->dtype != CINFER_DTYPE_UINT64)
        return cpu_unsupported_dtype(n, a->dtype);
    if (use_c) gemm_fill_c(c, y->data, m, nn, es);
    int lda = (int)(a->dims[1] > 0 ? a->dims[1] : 1), ldb = (int)(b->dims[1] > 0 ? b->dims[1] : 1);
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
    switch (a->dtype) {
    case CINFER_DTYPE_FLOAT: {
        float *yp = y->data;
        if (k == 0) { /* BLAS would leave Y alone: scale C ourselves */
            for (int64_t i = 0; i < m * nn; i++) yp[i] = use_c ? beta * yp[i] : 0.0f;
            return CINFER_OK;
        }
        cblas_sgemm(CblasRowMajor, opa, opb, (int)m, (int)nn, (int)k, alpha, a->data, lda, b->data, ldb,
                    use_c ? beta : 0.0f, yp, (int)nn);
        return CINFER_OK;
    }
    case CINFER_DTYPE_DOUBLE: {
        double *yp = y->data;
        if (k == 0) {
            for (int64_t i = 0; i < m * nn; i++) yp[i] = use_c ? beta * yp[i] : 0.0;
            return CINFER_OK;
        }
        cblas_dgemm(CblasRowMajor, opa, opb, (int)m, (int)nn, (int)k, alpha, a->data, lda, b->data, ldb,
                    use_c ? beta : 0.0, yp, (int)nn);
        return CINFER_OK;
    }
    case CINFER_DTYPE_INT32: gemm_i32(ta, tb, m, nn, k, alpha, a->data, b->data, beta, use_c, y->data); break;
    case CINFER_DTYPE_UINT32: gemm_u32(ta, tb, m, nn, k, alpha, a->data, b->data, beta, use_c, y->data); break;
    case CINFER_DTYPE_INT64: gemm_i64(ta, tb, m, nn, k, alpha, a->data, b->data, beta, use_c, y->data); break;
    case CINFER_DTYPE_UINT64: gemm_u64(ta, tb, m, nn, k, alpha, a->data, b->data, beta, use_c, y->data); break;
    default: return cpu_unsupported_dtype(n, a->dtype);
    }
    return CINFER_OK;
}

/* ---- MatMulInteger, QLinearMatMul (exact reference kernels) ---- */

/* A's matrices of [rows, cols] minus their zero point (per tensor or per row), as int32. */
static void widen_rows(const tensor *a, const tensor *zp, int64_t rows, int64_t cols, int32_t *dst) {
    int64_t count = tensor_numel(a);
    for (int64_t e = 0; e < count; e++)
        dst[e] = cpu_load_q8(a, e) - (zp ? cpu_load_q8(zp, cpu_qparam_at(zp, (e / cols) % rows)) : 0);
}

/* B's matrices of [rows, cols] minus their zero point (per tensor or per column), as int32 and transposed, so
 * each output element is a dot product of two contiguous vectors. */
static void widen_cols_transposed(const tensor *b, const tensor *zp, int64_t rows, int64_t cols, int32_t *dst) {
    int64_t count = tensor_numel(b), size = rows * cols;
    for (int64_t e = 0; e < count; e++) {
        int64_t r = (e / cols) % rows, c = e % cols;
        dst[e - e % size + c * rows + r] = cpu_load_q8(b, e) - (zp ? cpu_load_q8(zp, cpu_qparam_at(zp, c)) : 0);
    }
}

/* Y = (A - a_zero_point) x (B - b_zero_point) accumulated in int32 (wrapping), numpy batching; QLinearMatMul then
 * requantises each element with a_scale * b_scale / y_scale (float) and y_zero_point. */
static cinfer_status run_qmatmul(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    linalg_qmatmul p;
    CINFER_TRY(linalg_compute_qmatmul(n, in, num_in, &p));
    const tensor *a = &in[0], *b = &in[p.qlinear ? 3 : 1];
    const int64_t m = p.mm.m, k = p.mm.k, nn = p.mm.n, jobs = p.mm.batch * m;
    int64_t na = tensor_numel(a), nbv = tensor_numel(b);
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    int32_t *wa = cpu_scratch(align_up((size_t)na * 4) + (size_t)nbv * 4 + 4);
    if (!wa)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate the widened operands", n->op_type,
                          n->name);
    int32_t *wb = wa + align_up((size_t)na * 4) / 4;
    widen_rows(a, p.a_zp, m, k, wa);
    widen_cols_transposed(b, p.b_zp, k, nn, wb);
    float y_scale = p.qlinear ? (float)tensor_get_double(p.y_scale, 0) : 0.0f;
    int32_t y_zp = p.qlinear ? cpu_load_q8(p.y_zp, 0) : 0;
#pragma omp parallel for num_threads(cpu_num_threads()) if (jobs * nn * k > 65536)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t i = job / m, r = job % m, oa, ob;
        batch_offsets(i, p.mm.nb, p.mm.batch_dims, p.mm.stride_a, p.mm.stride_b, &oa, &ob);
        const int32_t *ar = wa + (oa * m + r) * k;
        float a_scale = p.qlinear ? (float)tensor_get_double(p.a_scale, cpu_qparam_at(p.a_scale, r)) : 0.0f;
        for (int64_t c = 0; c < nn; c++) {
            const int32_t *bc = wb + ob * k * nn + c * k;
            uint32_t acc = 0; /* unsigned: int32 accumulation wraps rather than overflowing */
            for (int64_t j = 0; j < k; j++) acc += (uint32_t)(ar[j] * bc[j]);
            int64_t e = job * nn + c;
            if (!p.qlinear) {
                ((int32_t *)out[0].data)[e] = (int32_t)acc;
                continue;
            }
            float scale = a_scale * (float)tensor_get_double(p.b_scale, cpu_qparam_at(p.b_scale, c)) / y_scale;
            cpu_requantize_q8((int32_t)acc, scale, y_zp, out[0].data, out[0].dtype, e);
        }
    }
    return CINFER_OK;
}

const cpu_kernel cpu_linalg_kernels[] = {
    {"MatMul", run_matmul},
    {"Gemm", run_gemm},
    {"MatMulInteger", run_qmatmul},
    {"QLinearMatMul", run_qmatmul},
    {NULL, NULL},
};
