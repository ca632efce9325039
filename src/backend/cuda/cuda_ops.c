/* Joins the CUDA family tables and holds the helpers every family's host side shares. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "graph/op_schema.h"

/* One table per family (graph/op_families.h), indexed by family id. */
static const cuda_kernel *const kernel_tables[OP_FAMILY_COUNT] = {
#define KERNEL_TABLE_ENTRY(ID, name) [OP_FAMILY_##ID] = cuda_##name##_kernels,
    OP_FAMILIES(KERNEL_TABLE_ENTRY)
#undef KERNEL_TABLE_ENTRY
};

/* Every kernel belongs to an op with a schema: the op's kernel is looked up in its schema's family table. */
const cuda_kernel *cuda_find_kernel(const char *op_type) {
    const op_schema *schema = op_schema_find(NULL, op_type);
    op_family family = schema ? op_schema_family(schema) : OP_FAMILY_COUNT;
    if (family == OP_FAMILY_COUNT) return NULL;
    for (const cuda_kernel *k = kernel_tables[family]; k->op_type; k++)
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
