/* CPU kernels of the linalg family: MatMul (numpy batching) and Gemm. */

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

const cpu_kernel cpu_linalg_kernels[] = {
    {"MatMul", run_matmul},
    {"Gemm", run_gemm},
    {NULL, NULL},
};
