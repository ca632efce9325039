/* CPU kernels of the elementwise family. */
#include "backend/cpu/cpu_kernels.h"

static cinfer_status run_add(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    if (in[0].dtype != CINFER_DTYPE_FLOAT) return cpu_unsupported_dtype(n, in[0].dtype);
    cpu_broadcast bc;
    cpu_broadcast_init(&bc, &in[0], &in[1], &out[0]);
    const float *a = in[0].data, *b = in[1].data;
    float *c = out[0].data;
    int64_t total = tensor_numel(&out[0]);
    for (int64_t i = 0; i < total; i++) {
        int64_t oa, ob;
        cpu_broadcast_offsets(&bc, i, &oa, &ob);
        c[i] = a[oa] + b[ob];
    }
    return CINFER_OK;
}

static cinfer_status run_relu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    if (in[0].dtype != CINFER_DTYPE_FLOAT) return cpu_unsupported_dtype(n, in[0].dtype);
    const float *x = in[0].data;
    float *y = out[0].data;
    int64_t total = tensor_numel(&out[0]);
    for (int64_t i = 0; i < total; i++) y[i] = x[i] > 0 ? x[i] : 0;
    return CINFER_OK;
}

const cpu_kernel cpu_elementwise_kernels[] = {
    {"Add", run_add},
    {"Relu", run_relu},
    {NULL, NULL},
};
