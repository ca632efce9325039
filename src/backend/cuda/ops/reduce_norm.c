/* CUDA kernels of the reduce family's normalisations (host side): LayerNormalization, RMSNormalization,
 * InstanceNormalization, GroupNormalization, LRN. Attributes and shapes -> launches of kernels/reduce_norm.cu, with the
 * CPU kernels' semantics (backend/cpu/reduce_norm.c). */
#include <string.h>

#include "backend/cuda/ops/reduce_internal.h"
#include "graph/shape/reduce_params.h"

/* ---- LayerNormalization, RMSNormalization ---- */

/* Describes parameter p (Scale or B) per column of the normalised tail x.dims[axis:] under numpy
 * broadcasting (reduce_norm_param_layout); ndim 0 when p holds one value per column in their order. */
static cinfer_status norm_param(const graph_node *n, const tensor *p, const tensor *t, int axis,
                                cuda_norm_param *out) {
    memset(out, 0, sizeof *out);
    if (!cuda_red_is_float(p->dtype))
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': a parameter has dtype %s, expected a float type",
                          n->op_type, n->name, cinfer_dtype_name(p->dtype));
    out->data = p->data;
    out->dtype = p->dtype;
    int64_t stride[CINFER_MAX_DIMS];
    bool dense;
    CINFER_TRY(reduce_norm_param_layout(n, p, t, axis, stride, &dense));
    if (dense) return CINFER_OK;
    out->ndim = t->ndim - axis;
    for (int k = 0; k < out->ndim; k++) {
        out->dims[k] = t->dims[axis + k];
        out->strides[k] = stride[k];
    }
    return CINFER_OK;
}

static cinfer_status run_layer_or_rms(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out, bool rms) {
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt)) return cuda_unsupported_dtype(n, dt);
    if (!cuda_red_is_float(out[0].dtype)) return cuda_unsupported_dtype(n, out[0].dtype);
    reduce_layer_norm p;
    CINFER_TRY(reduce_compute_layer_norm(n, &in[0], &p));
    const int axis = p.axis;
    const int64_t rows = p.rows, cols = p.cols;
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
    /* the fused residual Add of graph/fusion.c: LayerNorm(X + R) */
    const void *res = !rms && cuda_red_present(in, num_in, 3) ? in[3].data : NULL;
    if (res && (in[3].dtype != dt || out[0].dtype != dt || tensor_numel(&in[3]) != rows * cols))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': the fused residual must match X", n->op_type,
                          n->name);
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_layer_norm(dt, in[0].data, res, out[0].dtype, out[0].data, rows, cols, scale,
                                                    bias, p.epsilon, rms, stat[0], stat[1], x->stream));
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

/* InstanceNormalization, GroupNormalization (reduce_compute_seg_norm): x [batch, channels, spatial...] normalised
 * per (batch item, group of channels / groups channels); scale and bias per channel, or per group. */
static cinfer_status run_seg_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out) {
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt)) return cuda_unsupported_dtype(n, dt);
    reduce_seg_norm p;
    CINFER_TRY(reduce_compute_seg_norm(n, &in[0], &p));
    if (p.groups <= 0 || p.channels % p.groups != 0) /* InstanceNormalization of 0 channels */
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': %lld groups do not divide %lld channels",
                          n->op_type, n->name, (long long)p.groups, (long long)p.channels);
    cuda_norm_param param[2];
    for (int i = 1; i < 3; i++) {
        if (!cuda_red_present(in, num_in, i) || !cuda_red_is_float(in[i].dtype) || tensor_numel(&in[i]) != p.param_len)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': input %d must be a float tensor of %lld "
                              "elements", n->op_type, n->name, i, (long long)p.param_len);
        memset(&param[i - 1], 0, sizeof param[i - 1]);
        param[i - 1].data = in[i].data;
        param[i - 1].dtype = in[i].dtype;
    }
    if (p.batch * p.channels * p.spatial == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_group_norm(dt, in[0].data, out[0].data, p.batch, p.channels, p.spatial,
                                                    p.groups, p.per_group, param[0], param[1], p.epsilon, x->stream));
}

cinfer_status cuda_red_run_instance_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                         tensor *out, int num_out) {
    (void)num_out;
    return run_seg_norm(x, n, in, num_in, out);
}

cinfer_status cuda_red_run_group_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out) {
    (void)num_out;
    return run_seg_norm(x, n, in, num_in, out);
}

/* ---- LRN ---- */

/* LRN (reduce_compute_lrn): across the channels of x [batch, channels, spatial...], out of place. */
cinfer_status cuda_red_run_lrn(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in;
    (void)num_out;
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt)) return cuda_unsupported_dtype(n, dt);
    reduce_lrn p;
    CINFER_TRY(reduce_check_lrn_run(n, &in[0], &out[0], &p));
    if (p.batch * p.channels * p.spatial == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_lrn(dt, in[0].data, out[0].data, p.batch, p.channels, p.spatial, p.size,
                                             p.alpha, p.beta, p.bias, x->stream));
}
