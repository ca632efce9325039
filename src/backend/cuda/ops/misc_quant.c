/* CUDA QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked) and DynamicQuantizeLinear (host side):
 * the CPU kernel's layout rules -> launches of kernels/misc_quant.cu. */
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/misc.h"
#include "core/status.h"

cinfer_status cuda_misc_run_quantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out);
cinfer_status cuda_misc_run_dequantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out);
cinfer_status cuda_misc_run_dynamic_quantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                             tensor *out, int num_out);

/* x viewed as [outer, len, inner] around the quantization axis (the CPU's quant_layout_init). */
static void layout_init(const graph_node *n, const tensor *X, const tensor *scale, cuda_quant_layout *q) {
    q->block = n->opset >= 21 ? graph_attr_int(n, "block_size", 0) : 0;
    q->per_tensor = q->block == 0 && tensor_numel(scale) == 1 && scale->ndim <= 1;
    int64_t axis = graph_attr_int(n, "axis", 1);
    if (axis < 0) axis += X->ndim;
    if (q->per_tensor || axis < 0 || axis >= X->ndim) {
        q->outer = 1;
        q->len = 1;
        q->inner = tensor_numel(X);
        q->per_tensor = true;
        return;
    }
    q->outer = q->inner = 1;
    for (int d = 0; d < axis; d++) q->outer *= X->dims[d];
    for (int d = (int)axis + 1; d < X->ndim; d++) q->inner *= X->dims[d];
    q->len = X->dims[axis];
}

static bool quant_int(cinfer_dtype t) {
    return t == CINFER_DTYPE_UINT8 || t == CINFER_DTYPE_INT8 || t == CINFER_DTYPE_UINT16 || t == CINFER_DTYPE_INT16;
}

static bool quant_source(cinfer_dtype t) {
    return dtype_is_float(t) || t == CINFER_DTYPE_INT32;
}

static const tensor *zero_point(const tensor *in, int num_in) {
    return num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
}

cinfer_status cuda_misc_run_quantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out) {
    (void)num_out;
    const tensor *X = &in[0], *scale = &in[1], *zp = zero_point(in, num_in);
    tensor *y = &out[0];
    if (!quant_int(y->dtype)) return cuda_unsupported_dtype(n, y->dtype);
    if (!quant_source(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (!quant_source(scale->dtype)) return cuda_unsupported_dtype(n, scale->dtype);
    if (zp && zp->dtype != y->dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "QuantizeLinear node '%s': y_zero_point has dtype %s, y %s",
                          n->name, cinfer_dtype_name(zp->dtype), cinfer_dtype_name(y->dtype));
    cuda_quant_layout q;
    layout_init(n, X, scale, &q);
    if (tensor_numel(X) == 0) return CINFER_OK;
    return cuda_check_launch(n, "QuantizeLinear",
                             cuda_misc_quantize(X->dtype, X->data, scale->dtype, scale->data, zp ? zp->data : NULL,
                                                y->dtype, y->data, &q, x->stream));
}

cinfer_status cuda_misc_run_dequantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out) {
    (void)num_out;
    const tensor *X = &in[0], *scale = &in[1], *zp = zero_point(in, num_in);
    tensor *y = &out[0];
    if (!quant_int(X->dtype) && X->dtype != CINFER_DTYPE_INT32) return cuda_unsupported_dtype(n, X->dtype);
    if (!dtype_is_float(scale->dtype)) return cuda_unsupported_dtype(n, scale->dtype);
    if (!dtype_is_float(y->dtype)) return cuda_unsupported_dtype(n, y->dtype);
    if (zp && zp->dtype != X->dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "DequantizeLinear node '%s': x_zero_point has dtype %s, x %s",
                          n->name, cinfer_dtype_name(zp->dtype), cinfer_dtype_name(X->dtype));
    cuda_quant_layout q;
    layout_init(n, X, scale, &q);
    if (tensor_numel(X) == 0) return CINFER_OK;
    return cuda_check_launch(n, "DequantizeLinear",
                             cuda_misc_dequantize(X->dtype, X->data, scale->dtype, scale->data, zp ? zp->data : NULL,
                                                  y->dtype, y->data, &q, x->stream));
}

cinfer_status cuda_misc_run_dynamic_quantize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                             tensor *out, int num_out) {
    (void)num_in;
    const tensor *X = &in[0];
    if (X->dtype != CINFER_DTYPE_FLOAT) return cuda_unsupported_dtype(n, X->dtype);
    if (out[0].dtype != CINFER_DTYPE_UINT8) return cuda_unsupported_dtype(n, out[0].dtype);
    int64_t count = tensor_numel(X);
    void *scratch = cuda_scratch(x, cuda_misc_dynamic_quantize_scratch(count));
    if (!scratch)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "DynamicQuantizeLinear node '%s': out of device scratch", n->name);
    float *y_scale = num_out > 1 && out[1].data ? out[1].data : NULL;
    uint8_t *y_zp = num_out > 2 && out[2].data ? out[2].data : NULL;
    return cuda_check_launch(n, "DynamicQuantizeLinear",
                             cuda_misc_dynamic_quantize(X->data, out[0].data, y_scale, y_zp, count, scratch,
                                                        x->stream));
}
