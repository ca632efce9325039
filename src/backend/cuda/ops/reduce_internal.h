/* Host-side helpers shared by the reduce family's CUDA op files (ops/reduce.c and its parts ops/reduce_*.c) and the
 * entry points that ops/reduce.c's table names. */
#ifndef CINFER_CUDA_OPS_REDUCE_INTERNAL_H
#define CINFER_CUDA_OPS_REDUCE_INTERNAL_H

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

/* The integer dtypes the family's kernels take: signed and unsigned, 8 to 64 bits. */
static inline bool cuda_red_is_int(cinfer_dtype t) {
    switch (t) {
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

/* Entry points in ops/reduce_softmax.c, ops/reduce_norm.c and ops/reduce_topk.c (cuda_kernel_fn signature). */
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
cinfer_status cuda_red_run_lrn(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out);
cinfer_status cuda_red_run_topk(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out);

#endif
