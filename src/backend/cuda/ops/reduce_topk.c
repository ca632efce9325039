/* CUDA kernel of TopK (host side): K from the host copy of input 1, checks as the CPU kernel, then
 * kernels/reduce_topk.cu with its scratch. */
#include <limits.h>

#include "backend/cuda/ops/reduce_internal.h"
#include "graph/shape/reduce_params.h"

cinfer_status cuda_red_run_topk(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt) && !cuda_red_is_int(dt)) return cuda_unsupported_dtype(n, dt);
    if (num_in > CUDA_RED_MAX_INPUTS)
        return core_error(CINFER_ERR_INVALID_MODEL, "TopK node '%s': %d inputs", n->name, num_in);
    tensor host[CUDA_RED_MAX_INPUTS];
    cuda_host_views(in, num_in, host); /* K's value lives on the host */
    reduce_topk t;
    CINFER_TRY(reduce_compute_topk(n, host, num_in, &out[0], &t));
    const int64_t k = t.k, outer = t.rows.outer, len = t.rows.len, inner = t.rows.inner;
    if (k == 0 || outer * inner == 0) return CINFER_OK;
    if (len > INT32_MAX ||
        (len > CUDA_TOPK_CHUNK && k > CUDA_TOPK_CHUNK / 2 && outer * inner * len > INT_MAX))
        return core_error(CINFER_ERR_UNSUPPORTED, "TopK node '%s': K=%lld of rows of %lld over %lld rows is beyond "
                          "the CUDA kernel's 32-bit sort", n->name, (long long)k, (long long)len,
                          (long long)(outer * inner));
    const bool largest = t.largest;
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
