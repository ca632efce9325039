/* CUDA kernels of the misc family (host side): CumSum/CumProd, the losses, ReverseSequence, BitCast, and the table
 * (Einsum lives in ops/misc_einsum.c, the quantize ops in ops/misc_quant.c). */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/misc.h"
#include "core/status.h"

/* defined in ops/misc_einsum.c and ops/misc_quant.c */
cinfer_status cuda_misc_run_einsum(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);
cinfer_status cuda_misc_run_quantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out);
cinfer_status cuda_misc_run_dequantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out);
cinfer_status cuda_misc_run_dynamic_quantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                             tensor *out, int num_out);

/* ---------------------------------------------------------------- CumSum, CumProd */

static cinfer_status run_cum(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0];
    bool prod = strcmp(n->op_type, "CumProd") == 0;
    switch (X->dtype) {
    case CINFER_DTYPE_FLOAT: case CINFER_DTYPE_DOUBLE: case CINFER_DTYPE_FLOAT16: case CINFER_DTYPE_BFLOAT16:
    case CINFER_DTYPE_INT32: case CINFER_DTYPE_INT64: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64: break;
    default: return cuda_unsupported_dtype(n, X->dtype);
    }
    /* the axis is a value input: its host copy is known while planning */
    if (!in[1].host_data || tensor_numel(&in[1]) != 1)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': axis must be one known value", n->op_type,
                          n->name);
    tensor axis_view;
    cuda_host_views(&in[1], 1, &axis_view);
    int64_t axis = tensor_get_int(&axis_view, 0), a = axis < 0 ? axis + X->ndim : axis;
    if (a < 0 || a >= X->ndim)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': axis %lld is out of range for rank %d",
                          n->op_type, n->name, (long long)axis, X->ndim);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; d++) outer *= X->dims[d];
    for (int d = (int)a + 1; d < X->ndim; d++) inner *= X->dims[d];
    if (tensor_numel(X) == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_misc_cum(X->dtype, prod, X->data, out[0].data, outer, X->dims[a], inner,
                                           graph_attr_int(n, "exclusive", 0) != 0,
                                           graph_attr_int(n, "reverse", 0) != 0, x->stream));
}

/* ---------------------------------------------------------------- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss */

static cinfer_status run_loss(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    const tensor *X = &in[0], *target = &in[1];
    const tensor *weight = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (target->dtype != CINFER_DTYPE_INT32 && target->dtype != CINFER_DTYPE_INT64)
        return cuda_unsupported_dtype(n, target->dtype);
    if (weight && weight->dtype != X->dtype)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': weights of dtype %s for input %s", n->op_type,
                          n->name, cinfer_dtype_name(weight->dtype), cinfer_dtype_name(X->dtype));
    if (X->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input has rank %d", n->op_type, n->name, X->ndim);
    cuda_loss_args a;
    memset(&a, 0, sizeof a);
    a.softmax = strcmp(n->op_type, "SoftmaxCrossEntropyLoss") == 0;
    const graph_attr *ii = graph_node_attr(n, "ignore_index");
    a.has_ignore = ii != NULL;
    a.ignore_index = ii ? ii->i : 0;
    const char *red = graph_attr_string(n, "reduction", "mean");
    a.reduction = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : 2;
    a.N = X->dims[0];
    a.C = X->dims[1];
    a.D = 1;
    for (int d = 2; d < X->ndim; d++) a.D *= X->dims[d];
    a.check = x->index_check;
    void *log_prob = a.softmax && num_out > 1 && out[1].data ? out[1].data : NULL;
    size_t parts = cuda_misc_loss_partials(&a);
    double *partials = NULL;
    if (parts) {
        partials = cuda_scratch(x, parts * sizeof(double));
        if (!partials)
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': out of device scratch", n->op_type, n->name);
    }
    return cuda_check_launch(n, n->op_type,
                             cuda_misc_loss(X->dtype, X->data, target->dtype, target->data,
                                            weight ? weight->data : NULL, out[0].data, log_prob, partials, &a,
                                            x->stream));
}

/* ---------------------------------------------------------------- ReverseSequence, BitCast */

static cinfer_status run_reverse_sequence(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                          tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0], *lens = &in[1];
    size_t es = cinfer_dtype_size(X->dtype);
    if (es == 0) return cuda_unsupported_dtype(n, X->dtype);
    if (lens->dtype != CINFER_DTYPE_INT32 && lens->dtype != CINFER_DTYPE_INT64)
        return cuda_unsupported_dtype(n, lens->dtype);
    int batch_axis = (int)graph_attr_int(n, "batch_axis", 1);
    if ((batch_axis != 0 && batch_axis != 1) || X->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "ReverseSequence node '%s': batch_axis %d for rank %d", n->name,
                          batch_axis, X->ndim);
    int64_t B = X->dims[batch_axis], T = X->dims[1 - batch_axis], inner = 1;
    for (int d = 2; d < X->ndim; d++) inner *= X->dims[d];
    if (lens->host_data) { /* known lengths: the CPU's check; unknown ones are clamped on the device */
        tensor view;
        cuda_host_views(lens, 1, &view);
        for (int64_t b = 0; b < B && b < tensor_numel(&view); b++) {
            int64_t l = tensor_get_int(&view, b);
            if (l < 0 || l > T)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "ReverseSequence node '%s': sequence_lens[%lld] is "
                                  "%lld, expected 0..%lld", n->name, (long long)b, (long long)l, (long long)T);
        }
    }
    if (tensor_numel(X) == 0) return CINFER_OK;
    return cuda_check_launch(n, "ReverseSequence",
                             cuda_misc_reverse_sequence(es, X->data, lens->dtype, lens->data, out[0].data, batch_axis,
                                                        B, T, inner, x->stream));
}

static cinfer_status run_bitcast(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out) {
    (void)num_in; (void)num_out;
    size_t bytes = tensor_nbytes(&in[0]);
    if (!bytes || out[0].data == in[0].data) return CINFER_OK;
    return cuda_check_launch(n, "BitCast copy",
                             cudaMemcpyAsync(out[0].data, in[0].data, bytes, cudaMemcpyDeviceToDevice, x->stream));
}

const cuda_kernel cuda_misc_kernels[] = {
    {"CumSum", run_cum},
    {"CumProd", run_cum},
    {"Einsum", cuda_misc_run_einsum},
    {"NegativeLogLikelihoodLoss", run_loss},
    {"SoftmaxCrossEntropyLoss", run_loss},
    {"QuantizeLinear", cuda_misc_run_quantize},
    {"DequantizeLinear", cuda_misc_run_dequantize},
    {"DynamicQuantizeLinear", cuda_misc_run_dynamic_quantize},
    {"ReverseSequence", run_reverse_sequence},
    {"BitCast", run_bitcast},
    {NULL, NULL},
};
