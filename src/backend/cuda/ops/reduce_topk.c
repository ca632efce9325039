/* CUDA kernel of TopK (host side): K from the host copy of input 1, checks as the CPU kernel, then
 * kernels/reduce_topk.cu with its scratch. */
#include <limits.h>

#include "backend/cuda/ops/reduce_ops.h"

static bool topk_dtype_ok(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT:
    case CINFER_DTYPE_DOUBLE:
    case CINFER_DTYPE_FLOAT16:
    case CINFER_DTYPE_BFLOAT16:
    case CINFER_DTYPE_INT8:
    case CINFER_DTYPE_INT16:
    case CINFER_DTYPE_INT32:
    case CINFER_DTYPE_INT64:
    case CINFER_DTYPE_UINT8:
    case CINFER_DTYPE_UINT16:
    case CINFER_DTYPE_UINT32:
    case CINFER_DTYPE_UINT64: return true;
    default: return false;
    }
}

cinfer_status cuda_red_run_topk(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (!topk_dtype_ok(dt)) return cuda_unsupported_dtype(n, dt);
    if (in[0].ndim < 1)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "TopK node '%s': X must have rank >= 1, got a scalar", n->name);
    int axis = 0;
    CINFER_TRY(cuda_red_axis(n, graph_attr_int(n, "axis", -1), in[0].ndim, &axis));
    if (num_in > CUDA_RED_MAX_INPUTS)
        return core_error(CINFER_ERR_INVALID_MODEL, "TopK node '%s': %d inputs", n->name, num_in);
    tensor host[CUDA_RED_MAX_INPUTS];
    cuda_host_views(in, num_in, host);
    if (num_in < 2 || !host[1].data || tensor_numel(&host[1]) != 1 || !dtype_is_integer(host[1].dtype))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "TopK node '%s': K must be a 1-element int64 tensor whose "
                          "value is known on the host", n->name);
    int64_t k = tensor_get_int(&host[1], 0);
    int64_t outer, len, inner;
    cuda_red_split(&in[0], axis, &outer, &len, &inner);
    if (k < 0 || k > len)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "TopK node '%s': K is %lld, expected 0 <= K <= %lld",
                          n->name, (long long)k, (long long)len);
    if (out[0].ndim != in[0].ndim || out[0].dims[axis] != k)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "TopK node '%s': Values output does not have K=%lld along "
                          "axis %d", n->name, (long long)k, axis);
    if (k == 0 || outer * inner == 0) return CINFER_OK;
    if (len > INT32_MAX ||
        (len > CUDA_TOPK_CHUNK && k > CUDA_TOPK_CHUNK / 2 && outer * inner * len > INT_MAX))
        return core_error(CINFER_ERR_UNSUPPORTED, "TopK node '%s': K=%lld of rows of %lld over %lld rows is beyond "
                          "the CUDA kernel's 32-bit sort", n->name, (long long)k, (long long)len,
                          (long long)(outer * inner));
    bool largest = graph_attr_int(n, "largest", 1) != 0;
    int64_t *idx = num_out > 1 && out[1].data ? out[1].data : NULL;
    size_t bytes = 0;
    cudaError_t err = cuda_reduce_topk(dt, in[0].data, out[0].data, idx, outer, len, inner, k, largest, NULL, &bytes,
                                       x->stream);
    if (err != cudaSuccess) return cuda_check_launch(n, "TopK (plan)", err);
    void *scratch = NULL;
    if (bytes > 0 && !(scratch = cuda_scratch(x, bytes)))
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "TopK node '%s': no device scratch for %zu bytes", n->name, bytes);
    return cuda_check_launch(n, "TopK", cuda_reduce_topk(dt, in[0].data, out[0].data, idx, outer, len, inner, k,
                                                         largest, scratch, NULL, x->stream));
}
