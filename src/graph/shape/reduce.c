/* Op schemas of the reduce family: Reduce*, ArgMax/ArgMin, TopK, Softmax-like and normalisation ops. */
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/reduce_params.h"

static const cinfer_dtype float_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16,
                                           CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED};

static bool present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

cinfer_status reduce_compute_axes(const graph_node *n, const tensor *in, int num_in, bool mask[CINFER_MAX_DIMS]) {
    int rank = in[0].ndim;
    for (int d = 0; d < CINFER_MAX_DIMS; d++) mask[d] = false;
    int64_t count = 0;
    const int64_t *attr = NULL;
    const tensor *axes = NULL;
    if (present(in, num_in, 1)) {
        axes = &in[1];
        if (!dtype_is_integer(axes->dtype))
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axes input has dtype %s, expected int64",
                              n->op_type, n->name, cinfer_dtype_name(axes->dtype));
        if (axes->ndim > 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axes input has rank %d, expected 1",
                              n->op_type, n->name, axes->ndim);
        count = tensor_numel(axes);
        if (count > 0 && !axes->data)
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the axes input's value is not known",
                              n->op_type, n->name);
    } else {
        size_t c = 0;
        attr = graph_attr_ints(n, "axes", &c);
        count = attr ? (int64_t)c : 0;
    }
    if (count == 0) {
        if (!graph_attr_int(n, "noop_with_empty_axes", 0))
            for (int d = 0; d < rank; d++) mask[d] = true;
        return CINFER_OK;
    }
    for (int64_t k = 0; k < count; k++) {
        int64_t a = axes ? tensor_get_int(axes, k) : attr[k];
        int64_t na = a < 0 ? a + rank : a;
        if (na < 0 || na >= rank)
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axis %lld is out of range for rank %d",
                              n->op_type, n->name, (long long)a, rank);
        if (mask[na])
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axis %lld is listed twice",
                              n->op_type, n->name, (long long)a);
        mask[na] = true;
    }
    return CINFER_OK;
}

cinfer_status reduce_compute_mvn_axes(const graph_node *n, const tensor *x, bool mask[CINFER_MAX_DIMS]) {
    size_t count = 0;
    const int64_t *axes = graph_attr_ints(n, "axes", &count);
    static const int64_t dflt[3] = {0, 2, 3};
    for (int d = 0; d < CINFER_MAX_DIMS; d++) mask[d] = false;
    if (!axes) {
        if (x->ndim < 4)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "%s node '%s': the default axes [0,2,3] need rank >= 4, got %d", n->op_type, n->name,
                              x->ndim);
        axes = dflt;
        count = 3;
    }
    for (size_t k = 0; k < count; k++) {
        int a = 0;
        CINFER_TRY(shape_normalize_axis(n, axes[k], x->ndim, &a));
        if (mask[a])
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axis %lld is listed twice", n->op_type,
                              n->name, (long long)axes[k]);
        mask[a] = true;
    }
    return CINFER_OK;
}

void reduce_group_dims(const tensor *x, const bool *mask, reduce_groups *g) {
    g->count = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->dims[d] == 1) continue;
        if (g->count > 0 && g->reduced[g->count - 1] == mask[d]) {
            g->size[g->count - 1] *= x->dims[d];
        } else {
            g->size[g->count] = x->dims[d];
            g->reduced[g->count] = mask[d];
            g->count++;
        }
    }
    int64_t s = 1;
    for (int k = g->count - 1; k >= 0; k--) {
        g->stride[k] = s;
        s *= g->size[k];
    }
}

void reduce_split_rows(const tensor *x, int axis, reduce_rows *r) {
    int64_t o = 1, i = 1;
    for (int d = 0; d < axis; d++) o *= x->dims[d];
    for (int d = axis + 1; d < x->ndim; d++) i *= x->dims[d];
    r->axis = axis;
    r->outer = o;
    r->len = x->ndim > 0 ? x->dims[axis] : 1;
    r->inner = i;
}

cinfer_status reduce_compute_softmax(const graph_node *n, const tensor *x, reduce_rows *r) {
    int axis = 0;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", n->opset >= 13 ? -1 : 1), x->ndim, &axis));
    reduce_split_rows(x, axis, r);
    if (n->opset < 13) {
        r->len *= r->inner;
        r->inner = 1;
    }
    return CINFER_OK;
}

cinfer_status reduce_compute_arg(const graph_node *n, const tensor *x, reduce_arg *a) {
    int axis = 0;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), x->ndim, &axis));
    a->is_max = strcmp(n->op_type, "ArgMax") == 0;
    if (x->ndim > 0 && x->dims[axis] == 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': axis %d has size 0, there is no %s",
                          n->op_type, n->name, axis, a->is_max ? "maximum" : "minimum");
    reduce_split_rows(x, axis, &a->rows);
    a->last = graph_attr_int(n, "select_last_index", 0) != 0;
    a->keepdims = graph_attr_int(n, "keepdims", 1) != 0;
    return CINFER_OK;
}

cinfer_status reduce_compute_topk(const graph_node *n, const tensor *in, int num_in, const tensor *values,
                                  reduce_topk *t) {
    if (in[0].ndim < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "TopK node '%s': X must have rank >= 1, got a scalar", n->name);
    int axis = 0;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", -1), in[0].ndim, &axis));
    if (num_in < 2 || !dtype_is_integer(in[1].dtype) || tensor_numel(&in[1]) != 1 || !in[1].data)
        return core_error(CINFER_ERR_INVALID_MODEL, "TopK node '%s': K must be a known 1-element int64 tensor",
                          n->name);
    t->k = tensor_get_int(&in[1], 0);
    if (t->k < 0 || t->k > in[0].dims[axis])
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "TopK node '%s': K is %lld, expected 0 <= K <= %lld (axis %d)",
                          n->name, (long long)t->k, (long long)in[0].dims[axis], axis);
    reduce_split_rows(&in[0], axis, &t->rows);
    if (values && (values->ndim != in[0].ndim || values->dims[axis] != t->k))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "TopK node '%s': Values output does not have K=%lld along "
                          "axis %d", n->name, (long long)t->k, axis);
    t->largest = graph_attr_int(n, "largest", 1) != 0;
    t->sorted = graph_attr_int(n, "sorted", 1) != 0;
    return CINFER_OK;
}

cinfer_status reduce_compute_lp_norm(const graph_node *n, const tensor *x, reduce_rows *r, int64_t *p) {
    int axis = 0;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", -1), x->ndim, &axis));
    *p = graph_attr_int(n, "p", 2);
    if (*p != 1 && *p != 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': p is %lld, expected 1 or 2", n->op_type, n->name,
                          (long long)*p);
    reduce_split_rows(x, axis, r);
    return CINFER_OK;
}

cinfer_status reduce_compute_layer_norm(const graph_node *n, const tensor *x, reduce_layer_norm *p) {
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", -1), x->ndim, &p->axis));
    p->rows = p->cols = 1;
    for (int d = 0; d < x->ndim; d++) *(d < p->axis ? &p->rows : &p->cols) *= x->dims[d];
    p->epsilon = graph_attr_float(n, "epsilon", 1e-5f);
    return CINFER_OK;
}

cinfer_status reduce_norm_param_layout(const graph_node *n, const tensor *p, const tensor *x, int axis,
                                       int64_t stride[CINFER_MAX_DIMS], bool *dense) {
    int64_t cols = 1;
    for (int d = axis; d < x->ndim; d++) cols *= x->dims[d];
    *dense = tensor_numel(p) == cols; /* broadcastable with equal size: identical layout */
    if (*dense) return CINFER_OK;
    int tail = x->ndim - axis;
    int64_t s = 1;
    for (int k = tail - 1; k >= 0; k--) {
        int pd = p->ndim - (tail - k);
        int64_t xd = x->dims[axis + k], pdim = pd >= 0 ? p->dims[pd] : 1;
        if (pdim != 1 && pdim != xd)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': a parameter's dim %lld does not broadcast "
                              "onto %lld", n->op_type, n->name, (long long)pdim, (long long)xd);
        stride[k] = pdim == 1 ? 0 : s;
        s *= pdim;
    }
    if (s != tensor_numel(p))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': a parameter varies along the rows, not only "
                          "along the normalised dims", n->op_type, n->name);
    return CINFER_OK;
}

cinfer_status reduce_compute_seg_norm(const graph_node *n, const tensor *x, reduce_seg_norm *p) {
    if (x->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input has rank %d, expected >= 2 ([N,C,...])",
                          n->op_type, n->name, x->ndim);
    p->batch = x->dims[0];
    p->channels = x->dims[1];
    p->spatial = 1;
    for (int d = 2; d < x->ndim; d++) p->spatial *= x->dims[d];
    p->groups = p->channels;
    p->per_group = false;
    if (strcmp(n->op_type, "GroupNormalization") == 0) {
        p->groups = graph_attr_int(n, "num_groups", 0);
        if (p->groups <= 0 || p->channels % p->groups != 0)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "%s node '%s': num_groups is %lld, expected a positive divisor of the channel count %lld",
                              n->op_type, n->name, (long long)p->groups, (long long)p->channels);
        p->per_group = n->opset < 21; /* opset 18-20: scale and bias per group; from 21: per channel */
    }
    p->param_len = p->per_group ? p->groups : p->channels;
    p->epsilon = graph_attr_float(n, "epsilon", 1e-5f);
    return CINFER_OK;
}

cinfer_status reduce_compute_lrn(const graph_node *n, const tensor *x, reduce_lrn *p) {
    if (x->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "LRN node '%s': input has rank %d, expected >= 2 ([N,C,...])",
                          n->name, x->ndim);
    if (!graph_node_attr(n, "size"))
        return core_error(CINFER_ERR_INVALID_MODEL, "LRN node '%s': the required attribute 'size' is missing", n->name);
    p->size = graph_attr_int(n, "size", 0);
    if (p->size < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "LRN node '%s': size is %lld, expected >= 1", n->name,
                          (long long)p->size);
    p->batch = x->dims[0];
    p->channels = x->dims[1];
    p->spatial = 1;
    for (int d = 2; d < x->ndim; d++) p->spatial *= x->dims[d];
    p->alpha = graph_attr_float(n, "alpha", 1e-4f);
    p->beta = graph_attr_float(n, "beta", 0.75f);
    p->bias = graph_attr_float(n, "bias", 1.0f);
    return CINFER_OK;
}

cinfer_status reduce_check_lrn_run(const graph_node *n, const tensor *x, const tensor *y, reduce_lrn *p) {
    if (y->dtype != x->dtype)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "LRN node '%s': output has dtype %s, expected %s", n->name,
                          cinfer_dtype_name(y->dtype), cinfer_dtype_name(x->dtype));
    CINFER_TRY(reduce_compute_lrn(n, x, p));
    if (p->batch * p->channels * p->spatial != 0 && y->data == x->data) /* a channel's output reads its neighbours */
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "LRN node '%s': the output may not share the input's buffer",
                          n->name);
    return CINFER_OK;
}

static cinfer_status infer_reduce(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    bool mask[CINFER_MAX_DIMS];
    CINFER_TRY(reduce_compute_axes(n, in, num_in, mask));
    bool keep = graph_attr_int(n, "keepdims", 1) != 0;
    out[0].dtype = in[0].dtype;
    out[0].ndim = 0;
    for (int d = 0; d < in[0].ndim; d++) {
        if (!mask[d]) out[0].dims[out[0].ndim++] = in[0].dims[d];
        else if (keep) out[0].dims[out[0].ndim++] = 1;
    }
    return CINFER_OK;
}

static cinfer_status infer_arg(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    reduce_arg a;
    CINFER_TRY(reduce_compute_arg(n, &in[0], &a));
    out[0].dtype = CINFER_DTYPE_INT64;
    out[0].ndim = 0;
    for (int d = 0; d < in[0].ndim; d++) {
        if (d != a.rows.axis) out[0].dims[out[0].ndim++] = in[0].dims[d];
        else if (a.keepdims) out[0].dims[out[0].ndim++] = 1;
    }
    return CINFER_OK;
}

static cinfer_status infer_topk(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    reduce_topk t = {0}; /* GCC cannot tell that a failed call returns before t is read */
    CINFER_TRY(reduce_compute_topk(n, in, num_in, NULL, &t));
    shape_copy(&out[0], &in[0]);
    out[0].dims[t.rows.axis] = t.k;
    if (num_out > 1) {
        shape_copy(&out[1], &out[0]);
        out[1].dtype = CINFER_DTYPE_INT64;
    }
    return CINFER_OK;
}

/* Softmax, LogSoftmax, Hardmax: one axis (default -1 from opset 13, 1 before), output as input. */
static cinfer_status infer_softmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    reduce_rows rows;
    CINFER_TRY(reduce_compute_softmax(n, &in[0], &rows));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

static cinfer_status expect_same_dtype(const graph_node *n, const tensor *in, int i) {
    if (in[i].dtype != in[0].dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input %d has dtype %s, expected %s like input 0",
                          n->op_type, n->name, i, cinfer_dtype_name(in[i].dtype), cinfer_dtype_name(in[0].dtype));
    return CINFER_OK;
}

/* Checks that `p` broadcasts unidirectionally onto X's dims from `axis` on (numpy rules). */
static cinfer_status expect_broadcast_to_tail(const graph_node *n, const tensor *x, int axis, const tensor *p,
                                              const char *what) {
    int tail = x->ndim - axis;
    char sx[128], sp[128];
    for (int d = 0; d < p->ndim; d++) {
        int xd = x->ndim - p->ndim + d;
        bool ok = p->dims[d] == 1 || (xd >= 0 && p->dims[d] == x->dims[xd]);
        /* dims of p beyond the normalised tail must be 1 (the statistics are per row) */
        if (ok && p->dims[d] != 1 && x->ndim - xd > tail) ok = false;
        if (!ok)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "%s node '%s': %s has shape %s, which does not broadcast onto the normalised dims of X %s "
                              "(axis %d)", n->op_type, n->name, what, tensor_shape_str(p, sp, sizeof sp),
                              tensor_shape_str(x, sx, sizeof sx), axis);
    }
    return CINFER_OK;
}

static cinfer_dtype stash_dtype(const graph_node *n) {
    int64_t s = graph_attr_int(n, "stash_type", 1);
    return s == CINFER_DTYPE_BFLOAT16 || s == CINFER_DTYPE_DOUBLE || s == CINFER_DTYPE_FLOAT16 ? (cinfer_dtype)s
                                                                                                : CINFER_DTYPE_FLOAT;
}

static cinfer_status infer_layer_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    reduce_layer_norm p;
    CINFER_TRY(reduce_compute_layer_norm(n, &in[0], &p));
    const int axis = p.axis;
    for (int i = 1; i < 3; i++) {
        if (!present(in, num_in, i)) continue;
        CINFER_TRY(expect_same_dtype(n, in, i));
        CINFER_TRY(expect_broadcast_to_tail(n, &in[0], axis, &in[i], i == 1 ? "Scale" : "B"));
    }
    if (num_in > 3 && in[3].dtype != CINFER_DTYPE_UNDEFINED) {
        /* a 4th input only as the fused residual of graph/fusion.c: LayerNorm(X + R), R typed and shaped like X */
        char sr[128], sx[128];
        if (!graph_node_attr(n, "cinfer_fused_add"))
            return core_error(CINFER_ERR_INVALID_MODEL, "LayerNormalization node '%s': %d inputs given, it takes 2 or 3",
                              n->name, num_in);
        if (!tensor_same_shape(&in[3], &in[0]) || in[3].dtype != in[0].dtype)
            return core_error(CINFER_ERR_INVALID_MODEL, "LayerNormalization node '%s': the fused residual %s %s must match "
                              "X %s %s", n->name, cinfer_dtype_name(in[3].dtype), tensor_shape_str(&in[3], sr, sizeof sr),
                              cinfer_dtype_name(in[0].dtype), tensor_shape_str(&in[0], sx, sizeof sx));
    }
    shape_copy(&out[0], &in[0]);
    for (int k = 1; k < num_out && k < 3; k++) {
        shape_copy(&out[k], &in[0]);
        out[k].dtype = stash_dtype(n);
        for (int d = axis; d < in[0].ndim; d++) out[k].dims[d] = 1;
    }
    return CINFER_OK;
}

static cinfer_status infer_rms_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    reduce_layer_norm p;
    CINFER_TRY(reduce_compute_layer_norm(n, &in[0], &p));
    CINFER_TRY(expect_same_dtype(n, in, 1));
    CINFER_TRY(expect_broadcast_to_tail(n, &in[0], p.axis, &in[1], "scale"));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

/* Checks that input i is a 1-D tensor of `len` elements (per-channel or per-group parameters). */
static cinfer_status expect_vector(const graph_node *n, const tensor *in, int i, int64_t len, const char *what) {
    CINFER_TRY(expect_same_dtype(n, in, i));
    if (tensor_numel(&in[i]) != len || in[i].ndim > 1) {
        char s[128];
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected [%lld]", n->op_type,
                          n->name, what, tensor_shape_str(&in[i], s, sizeof s), (long long)len);
    }
    return CINFER_OK;
}

/* InstanceNormalization, GroupNormalization: scale and bias per channel (or per group). */
static cinfer_status infer_seg_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    reduce_seg_norm p = {0}; /* GCC cannot tell that a failed call returns before p is read */
    CINFER_TRY(reduce_compute_seg_norm(n, &in[0], &p));
    bool group = strcmp(n->op_type, "GroupNormalization") == 0;
    CINFER_TRY(expect_vector(n, in, 1, p.param_len, "scale"));
    CINFER_TRY(expect_vector(n, in, 2, p.param_len, group ? "bias" : "B"));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

static cinfer_status infer_mvn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    bool mask[CINFER_MAX_DIMS];
    CINFER_TRY(reduce_compute_mvn_axes(n, &in[0], mask));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

static cinfer_status infer_lp_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    reduce_rows rows;
    int64_t p;
    CINFER_TRY(reduce_compute_lp_norm(n, &in[0], &rows, &p));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

static cinfer_status infer_lrn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    reduce_lrn p;
    CINFER_TRY(reduce_compute_lrn(n, &in[0], &p));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

const op_schema shape_reduce_schemas[] = {
    {"ReduceSum", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceMean", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceMax", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceMin", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceProd", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceL1", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceL2", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceLogSum", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceLogSumExp", infer_reduce, 1u << 1, 0, 1, 2},
    {"ReduceSumSquare", infer_reduce, 1u << 1, 0, 1, 2},
    {"ArgMax", infer_arg, 0, 0, 1, 1},
    {"ArgMin", infer_arg, 0, 0, 1, 1},
    {"TopK", infer_topk, 1u << 1, 0, 2, 2},
    {"Softmax", infer_softmax, 0, OP_FLAG_INPLACE, 1, 1},
    {"LogSoftmax", infer_softmax, 0, OP_FLAG_INPLACE, 1, 1},
    {"Hardmax", infer_softmax, 0, 0, 1, 1},
    {"LayerNormalization", infer_layer_norm, 0, OP_FLAG_INPLACE, 2, 4}, /* the 4th: the fused residual (graph/fusion.c) */
    {"RMSNormalization", infer_rms_norm, 0, OP_FLAG_INPLACE, 2, 2},
    {"InstanceNormalization", infer_seg_norm, 0, OP_FLAG_INPLACE, 3, 3},
    {"GroupNormalization", infer_seg_norm, 0, OP_FLAG_INPLACE, 3, 3},
    {"MeanVarianceNormalization", infer_mvn, 0, 0, 1, 1},
    {"LpNormalization", infer_lp_norm, 0, OP_FLAG_INPLACE, 1, 1},
    {"LRN", infer_lrn, 0, 0, 1, 1}, /* not in place: a channel's output reads its neighbours' inputs */
    {NULL, NULL, 0, 0, 0, 0},
};
