/* Host-side helpers shared by the reduce family's CUDA op files (ops/reduce*.c) and the entry points that
 * ops/reduce.c's table names. */
#ifndef CINFER_CUDA_OPS_REDUCE_OPS_H
#define CINFER_CUDA_OPS_REDUCE_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/reduce.h"
#include "core/status.h"
#include "core/tensor.h"

/* Inputs a reduce-family node can have (Reduce*: 2, LayerNormalization: 3, ...), with room to spare. */
#define CUDA_RED_MAX_INPUTS 8

static inline bool cuda_red_present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED && in[i].data != NULL;
}

static inline bool cuda_red_is_float(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 ||
           t == CINFER_DTYPE_BFLOAT16;
}

/* Normalises an axis attribute (rank 0 accepts axis 0), as the CPU kernels do. */
static inline cinfer_status cuda_red_axis(const graph_node *n, int64_t axis, int rank, int *out) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= (rank == 0 ? 1 : rank))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': axis %lld is out of range for rank %d",
                          n->op_type, n->name, (long long)axis, rank);
    *out = (int)a;
    return CINFER_OK;
}

/* Splits t's dims around `axis`: outer = product before, len = dims[axis], inner = product after. */
static inline void cuda_red_split(const tensor *t, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    int64_t o = 1, i = 1;
    for (int d = 0; d < axis; d++) o *= t->dims[d];
    for (int d = axis + 1; d < t->ndim; d++) i *= t->dims[d];
    *outer = o;
    *len = t->ndim > 0 ? t->dims[axis] : 1;
    *inner = i;
}

/* Entry points in ops/reduce_norm.c and ops/reduce_topk.c (cuda_kernel_fn signature). */
cinfer_status cuda_red_run_softmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);
cinfer_status cuda_red_run_log_softmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out);
cinfer_status cuda_red_run_hardmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);
cinfer_status cuda_red_run_lp_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);
cinfer_status cuda_red_run_layer_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out);
cinfer_status cuda_red_run_rms_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out);
cinfer_status cuda_red_run_instance_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                         tensor *out, int num_out);
cinfer_status cuda_red_run_group_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out);
cinfer_status cuda_red_run_topk(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out);

#endif
