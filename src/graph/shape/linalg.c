/* Op schemas of the linalg family: MatMul (numpy matmul), Gemm, MatMulInteger and QLinearMatMul. */
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/linalg_params.h"

static const cinfer_dtype matmul_types[] = {
    CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16,
    CINFER_DTYPE_INT32, CINFER_DTYPE_INT64, CINFER_DTYPE_UINT32, CINFER_DTYPE_UINT64,
    CINFER_DTYPE_INT8,  CINFER_DTYPE_UINT8, CINFER_DTYPE_INT16,  CINFER_DTYPE_UINT16,
    CINFER_DTYPE_UNDEFINED,
};

static cinfer_status check_operands(const graph_node *n, const tensor *in) {
    CINFER_TRY(shape_expect_dtype(n, in, 0, matmul_types));
    if (in[1].dtype != in[0].dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': A has dtype %s but B has %s, they must match",
                          n->op_type, n->name, cinfer_dtype_name(in[0].dtype), cinfer_dtype_name(in[1].dtype));
    return CINFER_OK;
}

/* numpy matmul's geometry of A and B, whatever their dtypes. */
static cinfer_status matmul_geometry(const graph_node *n, const tensor *a, const tensor *b, linalg_matmul *p) {
    char sa[128], sb[128];
    if (a->ndim < 1 || b->ndim < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': operands must have rank >= 1, got A %s and B %s",
                          n->op_type, n->name, tensor_shape_str(a, sa, sizeof sa), tensor_shape_str(b, sb, sizeof sb));
    int64_t k_a = a->dims[a->ndim - 1];
    int64_t k_b = b->ndim == 1 ? b->dims[0] : b->dims[b->ndim - 2];
    if (k_a != k_b)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': inner dimensions differ: A %s has %lld columns, B %s has %lld rows",
                          n->op_type, n->name, tensor_shape_str(a, sa, sizeof sa), (long long)k_a,
                          tensor_shape_str(b, sb, sizeof sb), (long long)k_b);
    p->m = a->ndim == 1 ? 1 : a->dims[a->ndim - 2];
    p->k = k_a;
    p->n = b->ndim == 1 ? 1 : b->dims[b->ndim - 1];
    /* broadcast the batch dims (all but the matrix dims); strides in whole matrices */
    int ra = a->ndim > 2 ? a->ndim - 2 : 0, rb = b->ndim > 2 ? b->ndim - 2 : 0;
    p->a_batch_rank = ra;
    p->b_batch_rank = rb;
    p->nb = ra > rb ? ra : rb;
    p->batch = 1;
    int64_t acc_a = 1, acc_b = 1;
    for (int d = p->nb - 1; d >= 0; d--) {
        int ia = d - (p->nb - ra), ib = d - (p->nb - rb);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "%s node '%s': batch dimensions of A %s and B %s cannot be broadcast", n->op_type,
                              n->name, tensor_shape_str(a, sa, sizeof sa), tensor_shape_str(b, sb, sizeof sb));
        p->batch_dims[d] = da == 1 ? db : da;
        p->stride_a[d] = da == 1 ? 0 : acc_a;
        p->stride_b[d] = db == 1 ? 0 : acc_b;
        acc_a *= da;
        acc_b *= db;
        p->batch *= p->batch_dims[d];
    }
    int rank = p->nb + (a->ndim > 1) + (b->ndim > 1);
    if (rank > CINFER_MAX_DIMS)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': result rank %d exceeds %d", n->op_type, n->name, rank,
                          CINFER_MAX_DIMS);
    return CINFER_OK;
}

cinfer_status linalg_compute_matmul(const graph_node *n, const tensor *in, linalg_matmul *p) {
    CINFER_TRY(check_operands(n, in));
    return matmul_geometry(n, &in[0], &in[1], p);
}

/* numpy matmul: a 1-D A gains a leading 1, a 1-D B a trailing 1 (both removed from the result);
 * the dims before the last two broadcast. */
static cinfer_status infer_matmul(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *a = &in[0], *b = &in[1];
    linalg_matmul p;
    CINFER_TRY(linalg_compute_matmul(n, in, &p));
    out[0].dtype = a->dtype;
    out[0].ndim = 0;
    for (int i = 0; i < p.nb; i++) out[0].dims[out[0].ndim++] = p.batch_dims[i];
    if (a->ndim > 1) out[0].dims[out[0].ndim++] = p.m;
    if (b->ndim > 1) out[0].dims[out[0].ndim++] = p.n;
    return CINFER_OK;
}

cinfer_status linalg_compute_gemm(const graph_node *n, const tensor *in, int num_in, linalg_gemm *p) {
    const tensor *a = &in[0], *b = &in[1];
    char sa[128], sb[128];
    CINFER_TRY(check_operands(n, in));
    if (a->ndim != 2 || b->ndim != 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "Gemm node '%s': A and B must be 2-D, got A %s and B %s", n->name,
                          tensor_shape_str(a, sa, sizeof sa), tensor_shape_str(b, sb, sizeof sb));
    bool ta = graph_attr_int(n, "transA", 0) != 0, tb = graph_attr_int(n, "transB", 0) != 0;
    int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
    int64_t kb = tb ? b->dims[1] : b->dims[0], nn = tb ? b->dims[0] : b->dims[1];
    if (k != kb)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "Gemm node '%s': inner dimensions differ: op(A) is %lldx%lld (A %s, transA=%d), op(B) is "
                          "%lldx%lld (B %s, transB=%d)",
                          n->name, (long long)m, (long long)k, tensor_shape_str(a, sa, sizeof sa), ta, (long long)kb,
                          (long long)nn, tensor_shape_str(b, sb, sizeof sb), tb);
    p->trans_a = ta;
    p->trans_b = tb;
    p->alpha = graph_attr_float(n, "alpha", 1.0f);
    p->beta = graph_attr_float(n, "beta", 1.0f);
    p->m = m;
    p->n = nn;
    p->k = k;
    p->has_c = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED;
    p->c_rows = p->c_cols = 1;
    if (p->has_c) {
        const tensor *c = &in[2];
        if (c->dtype != a->dtype)
            return core_error(CINFER_ERR_INVALID_MODEL, "Gemm node '%s': C has dtype %s but A has %s, they must match",
                              n->name, cinfer_dtype_name(c->dtype), cinfer_dtype_name(a->dtype));
        bool ok = c->ndim <= 2;
        for (int i = 0; ok && i < c->ndim; i++) {
            int64_t want = i == c->ndim - 1 ? nn : m;
            ok = c->dims[i] == 1 || c->dims[i] == want;
        }
        if (!ok)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "Gemm node '%s': C %s cannot be broadcast to the result shape [%lld,%lld]", n->name,
                              tensor_shape_str(c, sa, sizeof sa), (long long)m, (long long)nn);
        p->c_rows = c->ndim == 2 ? c->dims[0] : 1;
        p->c_cols = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
    }
    return CINFER_OK;
}

/* Y = alpha * op(A) * op(B) + beta * C, A and B 2-D, C unidirectionally broadcastable to [M, N]. */
static cinfer_status infer_gemm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    linalg_gemm p = {0}; /* GCC cannot tell that a failed call returns before p is read */
    CINFER_TRY(linalg_compute_gemm(n, in, num_in, &p));
    out[0].dtype = in[0].dtype;
    out[0].ndim = 2;
    out[0].dims[0] = p.m;
    out[0].dims[1] = p.n;
    return CINFER_OK;
}

/* ---- MatMulInteger, QLinearMatMul ---- */

static const cinfer_dtype int8_types[] = {CINFER_DTYPE_INT8, CINFER_DTYPE_UINT8, CINFER_DTYPE_UNDEFINED};
static const cinfer_dtype scale_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16,
                                           CINFER_DTYPE_UNDEFINED};

/* Quantization parameter i (a zero point of `zp_of`'s dtype, or a scale when zp_of is NULL): NULL when optional
 * and absent; one value, or (along: "row of A", "column of B") a vector of len values, one per `along`. */
static cinfer_status qmatmul_param(const graph_node *n, const tensor *in, int num_in, int i, const char *what,
                                   const tensor *zp_of, bool required, const char *along, int64_t len,
                                   const tensor **p) {
    char sp[128];
    *p = NULL;
    if (!required && (i >= num_in || in[i].dtype == CINFER_DTYPE_UNDEFINED)) return CINFER_OK;
    const cinfer_dtype same[] = {zp_of ? zp_of->dtype : CINFER_DTYPE_UNDEFINED, CINFER_DTYPE_UNDEFINED};
    CINFER_TRY(shape_expect_dtype(n, in, i, zp_of ? same : scale_types));
    const tensor *t = &in[i];
    bool one = t->ndim <= 1 && tensor_numel(t) == 1;
    if (!one && !(along && t->ndim == 1 && t->dims[0] == len))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected one value%s%s (%lld)",
                          n->op_type, n->name, what, tensor_shape_str(t, sp, sizeof sp), along ? " or " : "",
                          along ? along : "", (long long)(along ? len : 1));
    *p = t;
    return CINFER_OK;
}

cinfer_status linalg_compute_qmatmul(const graph_node *n, const tensor *in, int num_in, linalg_qmatmul *p) {
    p->qlinear = strcmp(n->op_type, "QLinearMatMul") == 0;
    int ia = 0, ib = p->qlinear ? 3 : 1;
    const tensor *a = &in[ia], *b = &in[ib];
    CINFER_TRY(shape_expect_dtype(n, in, ia, int8_types));
    CINFER_TRY(shape_expect_dtype(n, in, ib, int8_types));
    CINFER_TRY(matmul_geometry(n, a, b, &p->mm));
    p->a_scale = p->b_scale = p->y_scale = p->y_zp = NULL;
    if (!p->qlinear) {
        CINFER_TRY(qmatmul_param(n, in, num_in, 2, "a_zero_point", a, false, "one per row of A", p->mm.m, &p->a_zp));
        return qmatmul_param(n, in, num_in, 3, "b_zero_point", b, false, "one per column of B", p->mm.n, &p->b_zp);
    }
    CINFER_TRY(qmatmul_param(n, in, num_in, 1, "a_scale", NULL, true, "one per row of A", p->mm.m, &p->a_scale));
    CINFER_TRY(qmatmul_param(n, in, num_in, 2, "a_zero_point", a, true, "one per row of A", p->mm.m, &p->a_zp));
    CINFER_TRY(qmatmul_param(n, in, num_in, 4, "b_scale", NULL, true, "one per column of B", p->mm.n, &p->b_scale));
    CINFER_TRY(qmatmul_param(n, in, num_in, 5, "b_zero_point", b, true, "one per column of B", p->mm.n, &p->b_zp));
    CINFER_TRY(qmatmul_param(n, in, num_in, 6, "y_scale", NULL, true, NULL, 0, &p->y_scale));
    CINFER_TRY(shape_expect_dtype(n, in, 7, int8_types));
    return qmatmul_param(n, in, num_in, 7, "y_zero_point", &in[7], true, NULL, 0, &p->y_zp);
}

/* numpy matmul's shape; int32 (MatMulInteger) or y_zero_point's dtype (QLinearMatMul). */
static cinfer_status infer_qmatmul(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    linalg_qmatmul p;
    CINFER_TRY(linalg_compute_qmatmul(n, in, num_in, &p));
    const tensor *a = &in[0], *b = &in[p.qlinear ? 3 : 1];
    out[0].dtype = p.qlinear ? p.y_zp->dtype : CINFER_DTYPE_INT32;
    out[0].ndim = 0;
    for (int i = 0; i < p.mm.nb; i++) out[0].dims[out[0].ndim++] = p.mm.batch_dims[i];
    if (a->ndim > 1) out[0].dims[out[0].ndim++] = p.mm.m;
    if (b->ndim > 1) out[0].dims[out[0].ndim++] = p.mm.n;
    return CINFER_OK;
}

const op_schema shape_linalg_schemas[] = {
    {"MatMul", infer_matmul, 0, 0, 2, 2},
    {"Gemm", infer_gemm, 0, 0, 2, 3},
    {"MatMulInteger", infer_qmatmul, 0, 0, 2, 4},
    {"QLinearMatMul", infer_qmatmul, 0, 0, 8, 8},
    {NULL, NULL, 0, 0, 0, 0},
};
