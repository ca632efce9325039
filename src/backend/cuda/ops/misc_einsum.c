/* CUDA Einsum (host side): misc_parse_einsum on the operand shapes, per-label strides of every operand, then one
 * kernel that sums the products over the summed labels per output element (kernels/misc_einsum.cu). */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/misc.h"
#include "core/status.h"
#include "graph/shape/misc_params.h"

cinfer_status cuda_misc_run_einsum(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);

cinfer_status cuda_misc_run_einsum(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_out;
    cinfer_dtype t = in[0].dtype;
    switch (t) {
    case CINFER_DTYPE_FLOAT: case CINFER_DTYPE_DOUBLE: case CINFER_DTYPE_FLOAT16: case CINFER_DTYPE_BFLOAT16:
    case CINFER_DTYPE_INT32: case CINFER_DTYPE_INT64: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64:
    case CINFER_DTYPE_INT8: case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT16: case CINFER_DTYPE_UINT16: break;
    default: return cuda_unsupported_dtype(n, t);
    }
    for (int k = 1; k < num_in; k++)
        if (in[k].dtype != t)
            return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': input %d has dtype %s, input 0 %s", n->name,
                              k, cinfer_dtype_name(in[k].dtype), cinfer_dtype_name(t));
    misc_einsum e;
    CINFER_TRY(misc_parse_einsum(n, in, num_in, &e));
    int64_t count = tensor_numel(&out[0]);
    if (count == 0) return CINFER_OK;
    if (num_in > CUDA_EINSUM_MAX_OPERANDS)
        return core_error(CINFER_ERR_UNSUPPORTED, "Einsum node '%s': %d operands, the CUDA kernel takes at most %d",
                          n->name, num_in, CUDA_EINSUM_MAX_OPERANDS);

    cuda_einsum_args a;
    memset(&a, 0, sizeof a);
    a.num_operands = num_in;
    a.out_ndim = e.out_ndim;
    int64_t ls[CUDA_EINSUM_MAX_OPERANDS][MISC_EINSUM_MAX_LABELS];
    for (int k = 0; k < num_in; k++) {
        misc_einsum_label_strides(&e, &in[k], k, ls[k]);
        a.operand[k] = in[k].data;
    }
    bool in_out[MISC_EINSUM_MAX_LABELS] = {false};
    for (int d = 0; d < e.out_ndim; d++) {
        int l = e.out_label[d];
        in_out[l] = true;
        a.out_size[d] = e.label_size[l];
        for (int k = 0; k < num_in; k++) a.out_stride[k][d] = ls[k][l];
    }
    /* the summed labels: used by an operand, absent from the output */
    a.summed_count = 1;
    for (int l = 0; l < e.num_labels; l++) {
        bool used = false;
        for (int k = 0; k < num_in && !used; k++)
            for (int d = 0; d < e.op_ndim[k]; d++) used |= e.op_label[k][d] == l;
        if (in_out[l] || !used) continue;
        if (a.num_summed >= CUDA_EINSUM_MAX_SUMMED)
            return core_error(CINFER_ERR_UNSUPPORTED, "Einsum node '%s': more than %d summed labels", n->name,
                              CUDA_EINSUM_MAX_SUMMED);
        a.summed_size[a.num_summed] = e.label_size[l];
        for (int k = 0; k < num_in; k++) a.summed_stride[k][a.num_summed] = ls[k][l];
        a.summed_count *= e.label_size[l];
        a.num_summed++;
    }
    return cuda_check_launch(n, "Einsum", cuda_misc_einsum(t, &a, out[0].data, count, x->stream));
}
