/* CUDA kernels of the reduce family's row ops (host side): Softmax, LogSoftmax, Hardmax, LpNormalization,
 * LayerNormalization, RMSNormalization, InstanceNormalization, GroupNormalization. Attributes and shapes ->
 * launches of kernels/reduce_softmax.cu and kernels/reduce_norm.cu, with the CPU kernels' semantics. */
#include <string.h>

#include "backend/cuda/ops/reduce_ops.h"

/* ---- Softmax, LogSoftmax, Hardmax, LpNormalization ---- */

/* Rows along the axis: opset 13 uses one axis; older opsets flatten dims [axis, rank) into the row. */
static cinfer_status softmax_split(const graph_node *n, const tensor *t, int64_t *outer, int64_t *len,
                                   int64_t *inner) {
    int axis = 0;
    CINFER_TRY(cuda_red_axis(n, graph_attr_int(n, "axis", n->opset >= 13 ? -1 : 1), t->ndim, &axis));
    cuda_red_split(t, axis, outer, len, inner);
    if (n->opset < 13) {
        *len *= *inner;
        *inner = 1;
    }
    return CINFER_OK;
}

static cinfer_status run_row_mode(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out, int64_t outer,
                                  int64_t len, int64_t inner, cuda_softmax_mode mode) {
    if (outer * len * inner == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_softmax(mode, in[0].dtype, in[0].data, out[0].data, outer, len, inner,
                                                 x->stream));
}

static cinfer_status run_softmax_like(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out,
                                      cuda_softmax_mode mode) {
    if (!cuda_red_is_float(in[0].dtype)) return cuda_unsupported_dtype(n, in[0].dtype);
    int64_t outer, len, inner;
    CINFER_TRY(softmax_split(n, &in[0], &outer, &len, &inner));
    return run_row_mode(x, n, in, out, outer, len, inner, mode);
}

cinfer_status cuda_red_run_softmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in;
    (void)num_out;
    return run_softmax_like(x, n, in, out, CUDA_SOFTMAX);
}

cinfer_status cuda_red_run_log_softmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out) {
    (void)num_in;
    (void)num_out;
    return run_softmax_like(x, n, in, out, CUDA_LOG_SOFTMAX);
}

cinfer_status cuda_red_run_hardmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in;
    (void)num_out;
    return run_softmax_like(x, n, in, out, CUDA_HARDMAX);
}

/* LpNormalization: x / ||x||_p along the axis (p 1 or 2), 0 where the norm is 0. */
cinfer_status cuda_red_run_lp_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in;
    (void)num_out;
    if (!cuda_red_is_float(in[0].dtype)) return cuda_unsupported_dtype(n, in[0].dtype);
    int axis = 0;
    CINFER_TRY(cuda_red_axis(n, graph_attr_int(n, "axis", -1), in[0].ndim, &axis));
    int64_t p = graph_attr_int(n, "p", 2);
    if (p != 1 && p != 2)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': p is %lld, only 1 and 2 are supported", n->op_type,
                          n->name, (long long)p);
    int64_t outer, len, inner;
    cuda_red_split(&in[0], axis, &outer, &len, &inner);
    return run_row_mode(x, n, in, out, outer, len, inner, p == 1 ? CUDA_LP_NORM_1 : CUDA_LP_NORM_2);
}

/* ---- LayerNormalization, RMSNormalization ---- */

/* Describes parameter p (Scale or B) per column of the normalised tail x.dims[axis:] under numpy
 * broadcasting; an error when it does not broadcast there or varies along the rows (the CPU's rules). */
static cinfer_status norm_param(const graph_node *n, const tensor *p, const tensor *t, int axis,
                                cuda_norm_param *out) {
    memset(out, 0, sizeof *out);
    if (!cuda_red_is_float(p->dtype))
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': a parameter has dtype %s, expected a float type",
                          n->op_type, n->name, cinfer_dtype_name(p->dtype));
    out->data = p->data;
    out->dtype = p->dtype;
    int64_t cols = 1;
    for (int d = axis; d < t->ndim; d++) cols *= t->dims[d];
    if (tensor_numel(p) == cols) return CINFER_OK; /* broadcastable with equal size: identical layout */
    int tail = t->ndim - axis;
    int64_t s = 1;
    for (int k = tail - 1; k >= 0; k--) {
        int pd = p->ndim - (tail - k);
        int64_t xd = t->dims[axis + k], pdim = pd >= 0 ? p->dims[pd] : 1;
        if (pdim != 1 && pdim != xd)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': a parameter's dim %lld does not broadcast "
                              "onto %lld", n->op_type, n->name, (long long)pdim, (long long)xd);
        out->dims[k] = xd;
        out->strides[k] = pdim == 1 ? 0 : s;
        s *= pdim;
    }
    if (s != tensor_numel(p))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': a parameter varies along the rows, not only "
                          "along the normalised dims", n->op_type, n->name);
    out->ndim = tail;
    return CINFER_OK;
}

static cinfer_status run_layer_or_rms(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out, bool rms) {
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt)) return cuda_unsupported_dtype(n, dt);
    if (!cuda_red_is_float(out[0].dtype)) return cuda_unsupported_dtype(n, out[0].dtype);
    int axis = 0;
    CINFER_TRY(cuda_red_axis(n, graph_attr_int(n, "axis", -1), in[0].ndim, &axis));
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < in[0].ndim; d++) *(d < axis ? &rows : &cols) *= in[0].dims[d];
    /* Mean / InvStdDev (LayerNormalization only): one value per row in the stash type's dtype */
    cuda_norm_stat stat[2] = {{NULL, CINFER_DTYPE_FLOAT}, {NULL, CINFER_DTYPE_FLOAT}};
    for (int k = 0; k < 2 && !rms; k++) {
        const tensor *t = 1 + k < num_out ? &out[1 + k] : NULL;
        if (!t || !t->data) continue;
        if (!cuda_red_is_float(t->dtype) || tensor_numel(t) != rows)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': Mean/InvStdDev outputs must be float "
                              "tensors of %lld elements", n->op_type, n->name, (long long)rows);
        stat[k].data = t->data;
        stat[k].dtype = t->dtype;
    }
    if (rows * cols == 0) return CINFER_OK;
    if (!cuda_red_present(in, num_in, 1))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': Scale is missing", n->op_type, n->name);
    cuda_norm_param scale, bias;
    CINFER_TRY(norm_param(n, &in[1], &in[0], axis, &scale));
    memset(&bias, 0, sizeof bias);
    bias.dtype = CINFER_DTYPE_FLOAT;
    if (!rms && cuda_red_present(in, num_in, 2)) CINFER_TRY(norm_param(n, &in[2], &in[0], axis, &bias));
    double eps = graph_attr_float(n, "epsilon", 1e-5f);
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_layer_norm(dt, in[0].data, out[0].dtype, out[0].data, rows, cols, scale,
                                                    bias, eps, rms, stat[0], stat[1], x->stream));
}

cinfer_status cuda_red_run_layer_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out) {
    return run_layer_or_rms(x, n, in, num_in, out, num_out, false);
}

cinfer_status cuda_red_run_rms_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out) {
    return run_layer_or_rms(x, n, in, num_in, out, num_out, true);
}

/* ---- InstanceNormalization, GroupNormalization ---- */

/* x [batch, channels, spatial...] normalised per (batch item, group of channels / groups channels); scale and
 * bias per channel, or per group when per_group (GroupNormalization before opset 21). */
static cinfer_status run_seg_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int64_t groups, bool per_group) {
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt)) return cuda_unsupported_dtype(n, dt);
    if (in[0].ndim < 2 || num_in < 3)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': expected X of rank >= 2, scale and bias",
                          n->op_type, n->name);
    int64_t batch = in[0].dims[0], channels = in[0].dims[1], spatial = 1;
    for (int d = 2; d < in[0].ndim; d++) spatial *= in[0].dims[d];
    if (groups <= 0 || channels % groups != 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': %lld groups do not divide %lld channels",
                          n->op_type, n->name, (long long)groups, (long long)channels);
    int64_t plen = per_group ? groups : channels;
    cuda_norm_param param[2];
    for (int i = 1; i < 3; i++) {
        if (!cuda_red_present(in, num_in, i) || !cuda_red_is_float(in[i].dtype) || tensor_numel(&in[i]) != plen)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': input %d must be a float tensor of %lld "
                              "elements", n->op_type, n->name, i, (long long)plen);
        memset(&param[i - 1], 0, sizeof param[i - 1]);
        param[i - 1].data = in[i].data;
        param[i - 1].dtype = in[i].dtype;
    }
    double eps = graph_attr_float(n, "epsilon", 1e-5f);
    if (batch * channels * spatial == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_group_norm(dt, in[0].data, out[0].data, batch, channels, spatial, groups,
                                                    per_group, param[0], param[1], eps, x->stream));
}

cinfer_status cuda_red_run_instance_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                         tensor *out, int num_out) {
    (void)num_out;
    int64_t channels = in[0].ndim >= 2 ? in[0].dims[1] : 0;
    return run_seg_norm(x, n, in, num_in, out, channels, false);
}

cinfer_status cuda_red_run_group_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out) {
    (void)num_out;
    int64_t groups = graph_attr_int(n, "num_groups", 0);
    return run_seg_norm(x, n, in, num_in, out, groups, n->opset < 21);
}
