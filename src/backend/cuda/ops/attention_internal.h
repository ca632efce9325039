/* Helpers shared by the attention-family CUDA host files (attention.c, attention_sdpa.c). */
#ifndef CINFER_CUDA_OPS_ATTENTION_INTERNAL_H
#define CINFER_CUDA_OPS_ATTENTION_INTERNAL_H

#include "backend/cuda/cuda_kernels.h"

/* The kernels are float32, float16 or bfloat16 (as on the CPU backend). */
static inline bool cuda_attn_is_float(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
}

/* Whether optional input i was given. */
static inline bool cuda_attn_present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED && in[i].data != NULL;
}

/* Attention (attention_sdpa.c), registered in attention.c's table. */
cinfer_status cuda_run_attention(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out);

#endif
