/* Helpers the op schemas share: broadcasting, axis normalisation, dtype checks. */
#include "core/status.h"
#include "graph/op_schema.h"

cinfer_status shape_broadcast(const graph_node *n, const tensor *a, const tensor *b, tensor *out) {
    int rank = a->ndim > b->ndim ? a->ndim : b->ndim;
    char sa[128], sb[128];
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - a->ndim), ib = i - (rank - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': shapes %s and %s cannot be broadcast",
                              n->op_type, n->name, tensor_shape_str(a, sa, sizeof sa), tensor_shape_str(b, sb, sizeof sb));
        out->dims[i] = da == 1 ? db : da;
    }
    out->ndim = rank;
    return CINFER_OK;
}

cinfer_status shape_normalize_axis(const graph_node *n, int64_t axis, int rank, int *out_axis) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= (rank == 0 ? 1 : rank))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axis %lld is out of range for rank %d",
                          n->op_type, n->name, (long long)axis, rank);
    *out_axis = (int)a;
    return CINFER_OK;
}

void shape_copy(tensor *dst, const tensor *src) {
    dst->dtype = src->dtype;
    dst->ndim = src->ndim;
    for (int i = 0; i < src->ndim; i++) dst->dims[i] = src->dims[i];
}

cinfer_status shape_infer_same_as_first(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)n; (void)num_in; (void)num_out;
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

cinfer_status shape_expect_dtype(const graph_node *n, const tensor *in, int i, const cinfer_dtype *allowed) {
    for (const cinfer_dtype *t = allowed; *t != CINFER_DTYPE_UNDEFINED; t++)
        if (in[i].dtype == *t) return CINFER_OK;
    return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': input %d has dtype %s, which this op does not support",
                      n->op_type, n->name, i, cinfer_dtype_name(in[i].dtype));
}
