/* CUDA kernels of the reduce family (host side): Reduce*, ArgMax/ArgMin, MeanVarianceNormalization and the
 * family's table. Attributes and shapes -> a grouped reduction geometry -> launches of kernels/reduce.cu. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/ops/reduce_internal.h"
#include "graph/shape/reduce_params.h"

/* Groups x's dims for a reduction over mask: size-1 dims dropped, neighbours with the same status merged
 * (their strides then chain), kept and reduced groups listed in order with their input strides. */
static void geom_build(const tensor *x, const bool *mask, cuda_reduce_geom *g) {
    reduce_groups grp;
    reduce_group_dims(x, mask, &grp);
    const int64_t *gsize = grp.size, *gstride = grp.stride;
    const bool *gred = grp.reduced;
    const int ng = grp.count;
    memset(g, 0, sizeof *g);
    g->outputs = 1;
    g->red = 1;
    for (int k = 0; k < ng; k++) {
        if (gred[k]) {
            g->red_dims[g->nred] = gsize[k];
            g->red_strides[g->nred++] = gstride[k];
            g->red *= gsize[k];
        } else {
            g->keep_dims[g->nkeep] = gsize[k];
            g->keep_strides[g->nkeep++] = gstride[k];
            g->outputs *= gsize[k];
        }
    }
    g->inner = ng > 0 && !gred[ng - 1] ? gsize[ng - 1] : 1;
}

/* Which (op, dtype) pairs have kernels: the CPU kernels' set (bool only for max/min, folded as uint8). */
static bool reduce_supports(cuda_reduce_op op, cinfer_dtype t) {
    if (cuda_red_is_float(t)) return true;
    return cuda_red_is_int(t) && op != CUDA_REDUCE_L2 && op != CUDA_REDUCE_LOG_SUM && op != CUDA_REDUCE_LOG_SUM_EXP;
}

/* Asks kernels/reduce.cu for its scratch, takes it, and launches. */
static cinfer_status launch_reduce(cuda_exec *x, const graph_node *n, cuda_reduce_op op, cinfer_dtype dt,
                                   const void *src, void *dst, const cuda_reduce_geom *g, bool last) {
    size_t bytes = 0;
    cudaError_t err = cuda_reduce(op, dt, src, dst, g, last, NULL, &bytes, x->stream);
    if (err != cudaSuccess) return cuda_check_launch(n, "reduce (plan)", err);
    void *scratch = NULL;
    if (bytes > 0 && !(scratch = cuda_scratch(x, bytes)))
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': no device scratch for %zu bytes of partial results",
                          n->op_type, n->name, bytes);
    return cuda_check_launch(n, "reduce", cuda_reduce(op, dt, src, dst, g, last, scratch, NULL, x->stream));
}

static cinfer_status run_reduce_op(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   cuda_reduce_op op) {
    cinfer_dtype dt = in[0].dtype;
    bool is_bool = dt == CINFER_DTYPE_BOOL;
    if (is_bool && op != CUDA_REDUCE_MAX && op != CUDA_REDUCE_MIN) return cuda_unsupported_dtype(n, dt);
    cinfer_dtype kdt = is_bool ? CINFER_DTYPE_UINT8 : dt;
    if (!reduce_supports(op, kdt)) return cuda_unsupported_dtype(n, dt);
    if (num_in > CUDA_RED_MAX_INPUTS)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %d inputs", n->op_type, n->name, num_in);
    tensor host[CUDA_RED_MAX_INPUTS];
    cuda_host_views(in, num_in, host); /* the axes input's value lives on the host */
    bool mask[CINFER_MAX_DIMS];
    CINFER_TRY(reduce_compute_axes(n, host, num_in, mask));
    int64_t total = tensor_numel(&out[0]);
    if (total == 0) return CINFER_OK;
    cuda_reduce_geom g;
    geom_build(&in[0], mask, &g);
    if (g.outputs != total)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output has %lld elements, expected %lld",
                          n->op_type, n->name, (long long)total, (long long)g.outputs);
    if (is_bool && g.red == 0) /* the empty set: false for max, true for min */
        return cuda_check_launch(n, "reduce (empty set)",
                                 cudaMemsetAsync(out[0].data, op == CUDA_REDUCE_MAX ? 0 : 1, (size_t)total, x->stream));
    return launch_reduce(x, n, op, kdt, in[0].data, out[0].data, &g, false);
}

#define REDUCE_ENTRY(NAME, OP)                                                                                \
    static cinfer_status NAME(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,   \
                              int num_out) {                                                                  \
        (void)num_out;                                                                                        \
        return run_reduce_op(x, n, in, num_in, out, OP);                                                      \
    }
REDUCE_ENTRY(run_reduce_sum, CUDA_REDUCE_SUM)
REDUCE_ENTRY(run_reduce_mean, CUDA_REDUCE_MEAN)
REDUCE_ENTRY(run_reduce_max, CUDA_REDUCE_MAX)
REDUCE_ENTRY(run_reduce_min, CUDA_REDUCE_MIN)
REDUCE_ENTRY(run_reduce_prod, CUDA_REDUCE_PROD)
REDUCE_ENTRY(run_reduce_l1, CUDA_REDUCE_L1)
REDUCE_ENTRY(run_reduce_l2, CUDA_REDUCE_L2)
REDUCE_ENTRY(run_reduce_log_sum, CUDA_REDUCE_LOG_SUM)
REDUCE_ENTRY(run_reduce_log_sum_exp, CUDA_REDUCE_LOG_SUM_EXP)
REDUCE_ENTRY(run_reduce_sum_square, CUDA_REDUCE_SUM_SQUARE)

/* ArgMax / ArgMin along `axis` (keepdims only changes the output's shape, not its order). */
static cinfer_status run_arg(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_in;
    (void)num_out;
    cinfer_dtype dt = in[0].dtype;
    if (!reduce_supports(CUDA_REDUCE_ARG_MAX, dt)) return cuda_unsupported_dtype(n, dt);
    reduce_arg a;
    CINFER_TRY(reduce_compute_arg(n, &in[0], &a));
    const int64_t outer = a.rows.outer, inner = a.rows.inner;
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    if (tensor_numel(&out[0]) != outer * inner)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output has %lld elements, expected %lld",
                          n->op_type, n->name, (long long)tensor_numel(&out[0]), (long long)(outer * inner));
    bool mask[CINFER_MAX_DIMS] = {false};
    mask[a.rows.axis] = true;
    cuda_reduce_geom g;
    geom_build(&in[0], mask, &g);
    cuda_reduce_op op = a.is_max ? CUDA_REDUCE_ARG_MAX : CUDA_REDUCE_ARG_MIN;
    return launch_reduce(x, n, op, dt, in[0].data, out[0].data, &g, a.last);
}

/* MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes` (default [0,2,3]). */
static cinfer_status run_mvn(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_in;
    (void)num_out;
    cinfer_dtype dt = in[0].dtype;
    if (!cuda_red_is_float(dt)) return cuda_unsupported_dtype(n, dt);
    bool mask[CINFER_MAX_DIMS];
    CINFER_TRY(reduce_compute_mvn_axes(n, &in[0], mask));
    if (tensor_numel(&in[0]) == 0) return CINFER_OK;
    cuda_reduce_geom g;
    geom_build(&in[0], mask, &g);
    return cuda_check_launch(n, "mean-variance normalization",
                             cuda_reduce_mvn(dt, in[0].data, out[0].data, &g, x->stream));
}

const cuda_kernel cuda_reduce_kernels[] = {
    {"ReduceSum", run_reduce_sum},
    {"ReduceMean", run_reduce_mean},
    {"ReduceMax", run_reduce_max},
    {"ReduceMin", run_reduce_min},
    {"ReduceProd", run_reduce_prod},
    {"ReduceL1", run_reduce_l1},
    {"ReduceL2", run_reduce_l2},
    {"ReduceLogSum", run_reduce_log_sum},
    {"ReduceLogSumExp", run_reduce_log_sum_exp},
    {"ReduceSumSquare", run_reduce_sum_square},
    {"ArgMax", run_arg},
    {"ArgMin", run_arg},
    {"TopK", cuda_red_run_topk},
    {"Softmax", cuda_red_run_softmax},
    {"LogSoftmax", cuda_red_run_log_softmax},
    {"Hardmax", cuda_red_run_hardmax},
    {"LayerNormalization", cuda_red_run_layer_norm},
    {"RMSNormalization", cuda_red_run_rms_norm},
    {"InstanceNormalization", cuda_red_run_instance_norm},
    {"GroupNormalization", cuda_red_run_group_norm},
    {"MeanVarianceNormalization", run_mvn},
    {"LpNormalization", cuda_red_run_lp_norm},
    {"LRN", cuda_red_run_lrn},
    {NULL, NULL},
};
