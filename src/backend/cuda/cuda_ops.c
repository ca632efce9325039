/* Joins the CUDA family tables and holds the helpers every family's host side shares. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"

static const cuda_kernel *const kernel_tables[] = {
    cuda_elementwise_kernels, cuda_linalg_kernels,    cuda_conv_kernels,  cuda_reduce_kernels,
    cuda_movement_kernels,    cuda_attention_kernels, cuda_image_kernels, cuda_misc_kernels,
    cuda_recurrent_kernels,   cuda_signal_kernels,
};

const cuda_kernel *cuda_find_kernel(const char *op_type) {
    for (size_t f = 0; f < sizeof kernel_tables / sizeof kernel_tables[0]; f++)
        for (const cuda_kernel *k = kernel_tables[f]; k->op_type; k++)
            if (strcmp(k->op_type, op_type) == 0) return k;
    return NULL;
}

cinfer_status cuda_unsupported_dtype(const graph_node *n, cinfer_dtype t) {
    return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the CUDA backend has no kernel for dtype %s", n->op_type,
                      n->name, cinfer_dtype_name(t));
}

void cuda_host_views(const tensor *in, int num_in, tensor *host) {
    for (int i = 0; i < num_in; i++) {
        host[i] = in[i];
        host[i].data = (void *)in[i].host_data;
    }
}

void cuda_broadcast_init(cuda_broadcast *bc, const tensor *const *ops, int num_ops, const tensor *out) {
    memset(bc, 0, sizeof *bc);
    bc->ndim = out->ndim;
    for (int d = 0; d < out->ndim; d++) bc->dims[d] = out->dims[d];
    for (int k = 0; k < num_ops && k < 3; k++) {
        const tensor *x = ops[k];
        int64_t s = 1;
        int off = out->ndim - x->ndim;
        for (int d = out->ndim - 1; d >= 0; d--) {
            int xd = d - off;
            int64_t dim = xd >= 0 ? x->dims[xd] : 1;
            bc->stride[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
        bc->full[k] = tensor_numel(x) == tensor_numel(out);
        bc->scalar[k] = tensor_numel(x) == 1;
    }
}
