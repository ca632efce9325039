/* CUDA kernels of the linalg family (host side): MatMul (numpy batching) and Gemm through cuBLASLt; integers through
 * the kernels of kernels/linalg.cu.
 *
 * Row-major Y[m, n] = A[m, k] B[k, n] is column-major Y^T = B^T A^T, so cuBLASLt's "A" operand is our B and its
 * "B" our A, with M = n and N = m; no data is transposed. float runs CUBLAS_COMPUTE_32F (TF32 off), float16 and
 * bfloat16 accumulate in float32, double in CUBLAS_COMPUTE_64F. Matmul descriptors, layouts and the heuristic's
 * algorithm are cached per problem (dtype, dims, strides, pointer alignment, device) in a process-wide table
 * that only grows: entries are immutable once published, so any session thread may use them without holding
 * the lock. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/linalg.h"
#include "core/status.h"
#include "graph/shape/linalg_params.h"

/* ---- cuBLASLt plans ---- */

/* An activation in the GEMM's epilogue: cuBLASLt's GELU is the tanh form, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))). */
typedef enum lt_activation { LT_ACT_NONE = 0, LT_ACT_RELU = 1, LT_ACT_GELU = 2 } lt_activation;

/* Everything a plan's descriptors and algorithm depend on; compared with memcmp, so always zero-filled first. */
typedef struct lt_key {
    int device;
    int dtype;
    int tf32;             /* float32 with TF32 tensor cores (session precision "tf32") */
    int trans_a, trans_b; /* cuBLASLt operands (A = our B, B = our A) */
    int bias;             /* CUBLASLT_EPILOGUE_BIAS (a per-row vector of D) */
    int act;              /* lt_activation in the epilogue: RELU / GELU, or RELU_BIAS / GELU_BIAS with bias */
    int align_a, align_b, align_c, align_bias;
    int64_t m, n, k;                /* cuBLASLt's column-major M, N, K */
    int64_t rows_a, cols_a, lda;    /* stored shapes (before op) */
    int64_t rows_b, cols_b, ldb;
    int64_t ldc;
    int64_t batch, stride_a, stride_b, stride_c;
    size_t workspace;
} lt_key;

typedef struct lt_plan {
    lt_key key;
    cublasLtMatmulDesc_t desc; /* NULL for bias plans: the bias pointer lives in the descriptor, so each call makes its own */
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    bool supported; /* false: cuBLASLt has no algorithm (remembered so the heuristic is not asked again) */
    bool cached;    /* owned by the table; else the caller releases it after the call */
} lt_plan;

#define LT_SLOTS 2048 /* open addressing, kept at most half full */
#define LT_MAX_PLANS (LT_SLOTS / 2)
static lt_plan *lt_table[LT_SLOTS];
static int lt_count;
static pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t key_hash(const void *key, size_t size) {
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < size; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static cudaDataType_t lt_data_type(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_DOUBLE: return CUDA_R_64F;
    case CINFER_DTYPE_FLOAT16: return CUDA_R_16F;
    case CINFER_DTYPE_BFLOAT16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

static void lt_plan_release(lt_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    p->desc = NULL;
    p->la = p->lb = p->lc = NULL;
}

static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                int64_t batch, int64_t stride) {
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, type, (uint64_t)rows, (uint64_t)cols, ld);
    if (st != CUBLAS_STATUS_SUCCESS || batch <= 1) return st;
    int32_t count = (int32_t)batch;
    st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return st;
}

/* A matmul descriptor for the key (and, for bias plans, that bias pointer). */
static cublasStatus_t lt_desc(cublasLtMatmulDesc_t *desc, const lt_key *k, const void *bias) {
    bool dbl = k->dtype == CINFER_DTYPE_DOUBLE;
    cublasComputeType_t compute = dbl ? CUBLAS_COMPUTE_64F : k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t st = cublasLtMatmulDescCreate(desc, compute, dbl ? CUDA_R_64F : CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    st = cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (st == CUBLAS_STATUS_SUCCESS && k->act != LT_ACT_NONE && !k->bias) {
        cublasLtEpilogue_t epi = k->act == LT_ACT_RELU ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU;
        st = cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    }
    if (st == CUBLAS_STATUS_SUCCESS && k->bias) {
        cublasLtEpilogue_t epi = k->act == LT_ACT_RELU   ? CUBLASLT_EPILOGUE_RELU_BIAS
                                 : k->act == LT_ACT_GELU ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                         : CUBLASLT_EPILOGUE_BIAS;
        int32_t bias_type = (int32_t)lt_data_type((cinfer_dtype)k->dtype);
        st = cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulDescDestroy(*desc);
        *desc = NULL;
    }
    return st;
}

#define LT_MAX_RANK 15
/* CINFER_GEMM_ALGO_RANK: which of the heuristic's algorithms a GEMM takes (0, its first, by default; up to
 * LT_MAX_RANK): for measuring the alternatives (another kernel, or one without cuBLASLt's memset before each
 * call) against the first. Read once. */
static int gemm_algo_rank(void) {
    static int rank = -1;
    int r = __atomic_load_n(&rank, __ATOMIC_RELAXED);
    if (r < 0) {
        const char *v = getenv("CINFER_GEMM_ALGO_RANK");
        r = v ? atoi(v) : 0;
        r = r < 0 ? 0 : r > LT_MAX_RANK ? LT_MAX_RANK : r;
        __atomic_store_n(&rank, r, __ATOMIC_RELAXED);
    }
    return r;
}

/* Builds descriptors and asks the heuristic for one algorithm. CUBLAS_STATUS_NOT_SUPPORTED when it has none. */
static cublasStatus_t lt_plan_build(cuda_exec *x, lt_plan *p, const void *bias) {
    const lt_key *k = &p->key;
    cudaDataType_t type = lt_data_type((cinfer_dtype)k->dtype);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st = lt_desc(&desc, k, bias);
    if (st == CUBLAS_STATUS_SUCCESS) st = lt_layout(&p->la, type, k->rows_a, k->cols_a, k->lda, k->batch, k->stride_a);
    if (st == CUBLAS_STATUS_SUCCESS) st = lt_layout(&p->lb, type, k->rows_b, k->cols_b, k->ldb, k->batch, k->stride_b);
    if (st == CUBLAS_STATUS_SUCCESS) st = lt_layout(&p->lc, type, k->m, k->n, k->ldc, k->batch, k->stride_c);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS) {
        size_t ws = k->workspace;
        uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_c, (uint32_t)k->align_c};
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        /* the heuristic's first algorithm; CINFER_GEMM_ALGO_RANK (tuning) takes its n-th where it has that many */
        cublasLtMatmulHeuristicResult_t result[LT_MAX_RANK + 1];
        const int rank = gemm_algo_rank();
        int found = 0;
        memset(result, 0, sizeof result);
        st = cublasLtMatmulAlgoGetHeuristic(x->lt, desc, p->la, p->lb, p->lc, p->lc, pref, rank + 1, result, &found);
        const int pick = found > rank && result[rank].state == CUBLAS_STATUS_SUCCESS ? rank : 0;
        if (st == CUBLAS_STATUS_SUCCESS && (found < 1 || result[pick].state != CUBLAS_STATUS_SUCCESS))
            st = CUBLAS_STATUS_NOT_SUPPORTED;
        if (st == CUBLAS_STATUS_SUCCESS) p->algo = result[pick].algo;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && !k->bias) p->desc = desc;
    else if (desc) cublasLtMatmulDescDestroy(desc);
    if (st != CUBLAS_STATUS_SUCCESS) lt_plan_release(p);
    return st;
}

/* The cached plan for key, built on first use; or, once the table is full, a plan in *tmp that the caller
 * releases. */
static cublasStatus_t lt_plan_get(cuda_exec *x, const lt_key *key, const void *bias, lt_plan *tmp, lt_plan **out) {
    uint64_t slot = key_hash(key, sizeof *key) & (LT_SLOTS - 1);
    pthread_mutex_lock(&lt_lock);
    while (lt_table[slot] && memcmp(&lt_table[slot]->key, key, sizeof *key) != 0) slot = (slot + 1) & (LT_SLOTS - 1);
    if (lt_table[slot]) {
        *out = lt_table[slot];
        pthread_mutex_unlock(&lt_lock);
        return (*out)->supported ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    }
    /* built under the lock: once per problem, and no two threads build the same plan */
    lt_plan *p = lt_count < LT_MAX_PLANS ? calloc(1, sizeof *p) : NULL;
    if (!p) {
        p = tmp;
        memset(p, 0, sizeof *p);
    }
    memcpy(&p->key, key, sizeof *key); /* padding too: keys compare with memcmp */
    cublasStatus_t st = lt_plan_build(x, p, bias);
    p->supported = st == CUBLAS_STATUS_SUCCESS;
    if (p != tmp && (st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED)) {
        p->cached = true;
        lt_table[slot] = p;
        lt_count++;
    } else if (p != tmp) {
        free(p);
        p = NULL;
    }
    pthread_mutex_unlock(&lt_lock);
    *out = st == CUBLAS_STATUS_SUCCESS ? p : NULL;
    return st;
}

/* One GEMM problem in cuBLASLt's column-major terms: D = alpha * op(A) op(B) + beta * C with C = D, repeated
 * `batch` times at the given element strides, for each of `groups` (a, b, d) pointer triples. */
typedef struct lt_gemm {
    cinfer_dtype dtype;
    bool trans_a, trans_b;
    int64_t m, n, k;
    int64_t rows_a, cols_a, lda, rows_b, cols_b, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c;
    double alpha, beta;
    const void *bias; /* per-row bias of D (epilogue), or NULL */
    lt_activation act; /* of D in the epilogue (a fused Relu or Gelu) */
} lt_gemm;

static void lt_key_fill(cuda_exec *x, const lt_gemm *g, const uintptr_t *pa, const uintptr_t *pb, const uintptr_t *pc,
                        int groups, lt_key *key) {
    memset(key, 0, sizeof *key);
    key->tf32 = x->allow_tf32 && g->dtype == CINFER_DTYPE_FLOAT;
    size_t es = cinfer_dtype_size(g->dtype);
    key->device = x->device;
    key->dtype = (int)g->dtype;
    key->trans_a = g->trans_a;
    key->trans_b = g->trans_b;
    key->bias = g->bias != NULL;
    key->act = (int)g->act;
    key->m = g->m;
    key->n = g->n;
    key->k = g->k;
    key->rows_a = g->rows_a;
    key->cols_a = g->cols_a;
    key->lda = g->lda;
    key->rows_b = g->rows_b;
    key->cols_b = g->cols_b;
    key->ldb = g->ldb;
    key->ldc = g->ldc;
    key->batch = g->batch;
    key->stride_a = g->batch > 1 ? g->stride_a : 0;
    key->stride_b = g->batch > 1 ? g->stride_b : 0;
    key->stride_c = g->batch > 1 ? g->stride_c : 0;
    key->workspace = x->workspace_bytes;
    /* the alignment every call of this run satisfies: all base pointers and, when batched, the byte strides */
    const uintptr_t *ptrs[3] = {pa, pb, pc};
    int64_t strides[3] = {key->stride_a, key->stride_b, key->stride_c};
    int *align[3] = {&key->align_a, &key->align_b, &key->align_c};
    for (int o = 0; o < 3; o++) {
        uintptr_t bits = 256 | (uintptr_t)((size_t)strides[o] * es);
        for (int i = 0; i < groups; i++) bits |= ptrs[o][i];
        *align[o] = (int)(bits & (~bits + 1));
    }
    if (g->bias) {
        uintptr_t bits = 256 | (uintptr_t)g->bias;
        key->align_bias = (int)(bits & (~bits + 1));
    }
}

/* Runs the GEMM for each pointer group. CINFER_ERR_UNSUPPORTED (without a message) when cuBLASLt has no
 * algorithm, so the caller can split the problem; other failures carry their message. */
static cinfer_status lt_run(cuda_exec *x, const graph_node *n, const lt_gemm *g, const uintptr_t *pa,
                            const uintptr_t *pb, const uintptr_t *pc, int groups) {
    lt_key key;
    lt_key_fill(x, g, pa, pb, pc, groups, &key);
    lt_plan tmp, *plan = NULL;
    cublasStatus_t st = lt_plan_get(x, &key, g->bias, &tmp, &plan);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return CINFER_ERR_UNSUPPORTED;
    CINFER_TRY(cuda_check_cublas(n, "cuBLASLt plan", st));
    cublasLtMatmulDesc_t desc = plan->desc;
    if (g->bias) st = lt_desc(&desc, &key, g->bias);
    bool dbl = g->dtype == CINFER_DTYPE_DOUBLE;
    float alpha_f = (float)g->alpha, beta_f = (float)g->beta;
    const void *alpha = dbl ? (const void *)&g->alpha : (const void *)&alpha_f;
    const void *beta = dbl ? (const void *)&g->beta : (const void *)&beta_f;
    for (int i = 0; i < groups && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmul(x->lt, desc, alpha, (const void *)pa[i], plan->la, (const void *)pb[i], plan->lb, beta,
                            (const void *)pc[i], plan->lc, (void *)pc[i], plan->lc, &plan->algo, x->workspace,
                            x->workspace_bytes, x->stream);
    if (g->bias && desc) cublasLtMatmulDescDestroy(desc);
    if (!plan->cached) lt_plan_release(plan);
    return cuda_check_cublas(n, "cublasLtMatmul", st);
}

static bool lt_dtype(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
}

static bool int_dtype(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_INT8:
    case CINFER_DTYPE_UINT8:
    case CINFER_DTYPE_INT16:
    case CINFER_DTYPE_UINT16:
    case CINFER_DTYPE_INT32:
    case CINFER_DTYPE_UINT32:
    case CINFER_DTYPE_INT64:
    case CINFER_DTYPE_UINT64: return true;
    default: return false;
    }
}

static cinfer_status check_dims(const graph_node *n, int64_t m, int64_t nn, int64_t k) {
    if (m > INT32_MAX || nn > INT32_MAX || k > INT32_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': matrix dims %lldx%lldx%lld exceed the int32 range",
                          n->op_type, n->name, (long long)m, (long long)nn, (long long)k);
    return CINFER_OK;
}

/* ---- MatMul ---- */

/* Pointer groups per cuBLASLt call list: a call list longer than this runs in several lists. */
#define GROUP_CHUNK 256

/* Y[batch] = A[oa] B[ob] for broadcast batches through cuBLASLt: the trailing batch dims over which both operands
 * step evenly (each either contiguous or broadcast there) form one strided-batched GEMM; the leading dims left
 * over are looped on the host, one GEMM call per index. */
static cinfer_status matmul_lt(cuda_exec *x, const graph_node *n, const tensor *a, const tensor *b, tensor *y,
                               const linalg_batch *bt, int64_t m, int64_t nn, int64_t k) {
    size_t es = cinfer_dtype_size(a->dtype);
    /* the split: dims [split, nb) batch inside cuBLASLt, with per-step matrix strides ca, cb (0 or 1 matrix) */
    int split = bt->nb;
    int64_t inner = 1, ca = -1, cb = -1;
    while (split > 0) {
        int d = split - 1;
        int64_t dim = bt->dims[d];
        if (dim != 1) {
            /* dims [d, nb) stay affine when this dim's stride is c * inner for the c chosen so far */
            int64_t na = ca >= 0 ? ca : (bt->sa[d] == 0 ? 0 : (bt->sa[d] == inner ? 1 : -1));
            int64_t nbv = cb >= 0 ? cb : (bt->sb[d] == 0 ? 0 : (bt->sb[d] == inner ? 1 : -1));
            if (na < 0 || nbv < 0 || bt->sa[d] != na * inner || bt->sb[d] != nbv * inner) break;
            ca = na;
            cb = nbv;
            inner *= dim;
        }
        split--;
    }
    if (ca < 0) ca = 0;
    if (cb < 0) cb = 0;
    int64_t outer = 1;
    for (int d = 0; d < split; d++) outer *= bt->dims[d];
    if (inner > INT32_MAX) return core_error(CINFER_ERR_UNSUPPORTED, "MatMul node '%s': batch exceeds int32", n->name);
    lt_gemm g = {
        .dtype = a->dtype, .trans_a = false, .trans_b = false, .m = nn, .n = m, .k = k,
        .rows_a = nn, .cols_a = k, .lda = nn, /* our B, column-major n x k */
        .rows_b = k, .cols_b = m, .ldb = k,   /* our A, column-major k x m */
        .ldc = nn, .batch = inner, .stride_a = cb * k * nn, .stride_b = ca * m * k, .stride_c = m * nn,
        .alpha = 1.0, .beta = 0.0, .bias = NULL,
    };
    uintptr_t pa[GROUP_CHUNK], pb[GROUP_CHUNK], pc[GROUP_CHUNK];
    for (int64_t o0 = 0; o0 < outer; o0 += GROUP_CHUNK) {
        int cnt = 0;
        for (int64_t o = o0; o < outer && o < o0 + GROUP_CHUNK; o++, cnt++) {
            int64_t rem = o, oa = 0, ob = 0;
            for (int d = split - 1; d >= 0; d--) {
                int64_t q = rem % bt->dims[d];
                rem /= bt->dims[d];
                oa += q * bt->sa[d];
                ob += q * bt->sb[d];
            }
            pa[cnt] = (uintptr_t)((const char *)b->data + (size_t)(ob * k * nn) * es);
            pb[cnt] = (uintptr_t)((const char *)a->data + (size_t)(oa * m * k) * es);
            pc[cnt] = (uintptr_t)((char *)y->data + (size_t)(o * inner * m * nn) * es);
        }
        cinfer_status st = lt_run(x, n, &g, pa, pb, pc, cnt);
        if (st == CINFER_ERR_UNSUPPORTED && inner > 1) {
            /* no batched algorithm (a broadcast operand's zero stride, say): one GEMM per matrix */
            lt_gemm one = g;
            one.batch = 1;
            st = CINFER_OK;
            for (int i = 0; i < cnt && st == CINFER_OK; i++)
                for (int64_t j0 = 0; j0 < inner && st == CINFER_OK; j0 += GROUP_CHUNK) {
                    uintptr_t qa[GROUP_CHUNK], qb[GROUP_CHUNK], qc[GROUP_CHUNK];
                    int c2 = 0;
                    for (int64_t j = j0; j < inner && j < j0 + GROUP_CHUNK; j++, c2++) {
                        qa[c2] = pa[i] + (uintptr_t)((size_t)(j * g.stride_a) * es);
                        qb[c2] = pb[i] + (uintptr_t)((size_t)(j * g.stride_b) * es);
                        qc[c2] = pc[i] + (uintptr_t)((size_t)(j * g.stride_c) * es);
                    }
                    st = lt_run(x, n, &one, qa, qb, qc, c2);
                }
        }
        if (st == CINFER_ERR_UNSUPPORTED)
            return core_error(CINFER_ERR_UNSUPPORTED, "MatMul node '%s': cuBLASLt has no algorithm for %s %lldx%lldx%lld",
                              n->name, cinfer_dtype_name(a->dtype), (long long)m, (long long)nn, (long long)k);
        CINFER_TRY(st);
    }
    return CINFER_OK;
}

static cinfer_status run_matmul(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *a = &in[0], *b = &in[1];
    tensor *y = &out[0];
    if (!lt_dtype(a->dtype) && !int_dtype(a->dtype)) return cuda_unsupported_dtype(n, a->dtype);
    linalg_matmul p; /* dims and broadcast batch geometry */
    CINFER_TRY(linalg_compute_matmul(n, in, &p));
    int64_t m = p.m;
    const int64_t k = p.k, nn = p.n, batch = p.batch;
    int64_t total = tensor_numel(y);
    if (total == 0) return CINFER_OK;
    if (k == 0)
        return cuda_check_launch(n, "MatMul zero fill",
                                 cudaMemsetAsync(y->data, 0, (size_t)total * cinfer_dtype_size(y->dtype), x->stream));
    const int rb = p.b_batch_rank;
    linalg_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.nb = p.nb;
    for (int d = 0; d < p.nb; d++) {
        bt.dims[d] = p.batch_dims[d];
        bt.sa[d] = p.stride_a[d];
        bt.sb[d] = p.stride_b[d];
    }
    if (batch * m * nn != total)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "MatMul node '%s': output holds %lld values, expected %lld",
                          n->name, (long long)total, (long long)(batch * m * nn));
    if (int_dtype(a->dtype))
        return cuda_check_launch(n, "integer MatMul",
                                 linalg_launch_int_matmul(a->dtype, a->data, b->data, y->data, batch, bt, m, nn, k,
                                                          x->stream));
    /* B without batch dims: A's batches stack into one tall product */
    if (rb == 0 && bt.nb > 0) {
        m *= batch;
        bt.nb = 0;
    }
    CINFER_TRY(check_dims(n, m, nn, k));
    return matmul_lt(x, n, a, b, y, &bt, m, nn, k);
}

/* ---- Gemm ---- */

static cinfer_status gemm_product(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  lt_activation act, bool *act_done);

/* CINFER_GELU_EPILOGUE=0: a fused erf Gelu in half precision runs as its own kernel after the GEMM (to compare).
 * Read once: this is on every Gemm launch. */
static bool gelu_epilogue_wanted(void) {
    static int wanted = -1;
    int w = __atomic_load_n(&wanted, __ATOMIC_RELAXED);
    if (w < 0) {
        const char *v = getenv("CINFER_GELU_EPILOGUE");
        w = !v || strcmp(v, "0") != 0;
        __atomic_store_n(&wanted, w, __ATOMIC_RELAXED);
    }
    return w != 0;
}

/* Gemm with its fused activation (graph/passes.c) in cuBLASLt's epilogue, one kernel: a Relu ("cinfer_fused_relu";
 * a NaN product may come out as 0 there, where a separate Relu passes NaN) in RELU / RELU_BIAS, a Gelu
 * ("cinfer_fused_gelu": 1 the erf form, 2 the tanh form) in GELU / GELU_BIAS. That epilogue is the tanh form, so an
 * erf Gelu goes there only in float16/bfloat16, where the two forms' largest difference (4.7e-4, near x = 2.7) is
 * below the rounding of the pre-activation it replaces (a float16 ulp is 2e-3 there: the epilogue applies the Gelu to
 * the float32 sum, before any rounding); in float32 the erf Gelu kernel runs after the GEMM. Where cuBLASLt has no
 * such algorithm, and for the integer and empty products, the activation's kernel runs after. */
static cinfer_status run_gemm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    (void)num_out;
    const cinfer_dtype t = in[0].dtype;
    const bool relu = graph_attr_int(n, "cinfer_fused_relu", 0) != 0;
    const int64_t gelu = graph_attr_int(n, "cinfer_fused_gelu", 0);
    const bool half = t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
    const bool epilogue = lt_dtype(t) && t != CINFER_DTYPE_DOUBLE; /* cuBLASLt's epilogues: float and half types */
    lt_activation act = LT_ACT_NONE;
    if (relu && epilogue) act = LT_ACT_RELU;
    if ((gelu == 2 && epilogue) || (gelu == 1 && half && gelu_epilogue_wanted())) act = LT_ACT_GELU;
    bool done = false;
    cinfer_status st = gemm_product(x, n, in, num_in, out, act, &done);
    if (st == CINFER_ERR_UNSUPPORTED && act != LT_ACT_NONE) st = gemm_product(x, n, in, num_in, out, LT_ACT_NONE, &done);
    if (st != CINFER_OK || (!relu && !gelu) || done || tensor_numel(&out[0]) == 0) return st;
    const cuda_ew_unary_op op = relu ? CUDA_EW_RELU : gelu == 2 ? CUDA_EW_GELU_TANH : CUDA_EW_GELU;
    if (!cuda_ew_unary_supported(op, out[0].dtype)) {
        if (relu) return CINFER_OK; /* unsigned: max(0, y) is y */
        return cuda_unsupported_dtype(n, out[0].dtype);
    }
    cuda_ew_unary_params none = {0};
    return cuda_check_launch(n, relu ? "Gemm fused Relu" : "Gemm fused Gelu",
                             cuda_ew_unary(op, out[0].dtype, out[0].data, out[0].data, tensor_numel(&out[0]), none,
                                           x->stream));
}

/* Y = alpha op(A) op(B) + beta C; *act_done: the activation ran in the epilogue (act and the GEMM path). */
static cinfer_status gemm_product(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  lt_activation act, bool *act_done) {
    *act_done = false;
    const tensor *a = &in[0], *b = &in[1];
    const tensor *c = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    if (!lt_dtype(a->dtype) && !int_dtype(a->dtype)) return cuda_unsupported_dtype(n, a->dtype);
    linalg_gemm p;
    CINFER_TRY(linalg_compute_gemm(n, in, num_in, &p));
    const bool ta = p.trans_a, tb = p.trans_b;
    const float alpha = p.alpha, beta = p.beta;
    const int64_t m = p.m, nn = p.n, k = p.k; /* Y is [m, nn] (the schema's shape) */
    CINFER_TRY(check_dims(n, m, nn, k));
    if (m * nn == 0) return CINFER_OK;
    bool use_c = c && beta != 0.0f && tensor_numel(c) > 0;
    const int64_t crows = use_c ? p.c_rows : 1, ccols = use_c ? p.c_cols : 1;
    const void *cdata = use_c ? c->data : NULL;
    if (int_dtype(a->dtype)) {
        if (use_c)
            CINFER_TRY(cuda_check_launch(n, "Gemm C fill",
                                         linalg_launch_fill_c(a->dtype, cdata, crows, ccols, 1.0, y->data, m, nn,
                                                              x->stream)));
        return cuda_check_launch(n, "integer Gemm",
                                 linalg_launch_int_gemm(a->dtype, ta, tb, m, nn, k, alpha, a->data, b->data, beta,
                                                        use_c, y->data, x->stream));
    }
    if (k == 0) /* no product: Y = beta * C (or 0) */
        return cuda_check_launch(n, "Gemm C fill",
                                 linalg_launch_fill_c(a->dtype, cdata, crows, ccols, beta, y->data, m, nn, x->stream));
    /* a row vector C with beta 1 rides in the GEMM's bias epilogue (a per-row vector of column-major D);
     * any other C is copied into Y first and accumulated with beta */
    bool bias = use_c && beta == 1.0f && crows == 1 && ccols == nn && a->dtype != CINFER_DTYPE_DOUBLE;
    lt_gemm g = {
        .dtype = a->dtype, .trans_a = tb, .trans_b = ta, .m = nn, .n = m, .k = k,
        .rows_a = tb ? k : nn, .cols_a = tb ? nn : k, .lda = tb ? k : nn, /* our B */
        .rows_b = ta ? m : k, .cols_b = ta ? k : m, .ldb = ta ? m : k,    /* our A */
        .ldc = nn, .batch = 1, .stride_a = 0, .stride_b = 0, .stride_c = 0,
        .alpha = alpha, .beta = 0.0, .bias = bias ? cdata : NULL, .act = act,
    };
    uintptr_t pa = (uintptr_t)b->data, pb = (uintptr_t)a->data, pc = (uintptr_t)y->data;
    cinfer_status st = CINFER_ERR_UNSUPPORTED;
    if (bias) st = lt_run(x, n, &g, &pa, &pb, &pc, 1);
    if (st == CINFER_ERR_UNSUPPORTED) { /* no epilogue algorithm: prefill instead */
        g.bias = NULL;
        if (use_c) {
            CINFER_TRY(cuda_check_launch(n, "Gemm C fill",
                                         linalg_launch_fill_c(a->dtype, cdata, crows, ccols, 1.0, y->data, m, nn,
                                                              x->stream)));
            g.beta = beta;
        }
        st = lt_run(x, n, &g, &pa, &pb, &pc, 1);
    }
    if (st == CINFER_ERR_UNSUPPORTED)
        return core_error(CINFER_ERR_UNSUPPORTED, "Gemm node '%s': cuBLASLt has no algorithm for %s %lldx%lldx%lld%s",
                          n->name, cinfer_dtype_name(a->dtype), (long long)m, (long long)nn, (long long)k,
                          act == LT_ACT_RELU ? " with a Relu epilogue" : act == LT_ACT_GELU ? " with a Gelu epilogue" : "");
    *act_done = st == CINFER_OK && act != LT_ACT_NONE;
    return st;
}

const cuda_kernel cuda_linalg_kernels[] = {
    {"MatMul", run_matmul},
    {"Gemm", run_gemm},
    {NULL, NULL},
};
