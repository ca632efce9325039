/* Launchers of the attention-family kernels other than Attention (kernels/attention.cu): RotaryEmbedding, Swish,
 * SwiGLU, LinearAttention and CausalConvWithState. Plain C types only; dtypes are float32, float16 or bfloat16. */
#ifndef CINFER_CUDA_KERNELS_ATTENTION_H
#define CINFER_CUDA_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RotaryEmbedding over rows = batch * seq * heads head rows of `head` elements: the first 2 * half rotate by
 * (cos, sin) pairs, the rest is copied. pos: position_ids [batch * seq] on the device or NULL (the caches are
 * then [batch * seq, half]); a position outside [0, max_pos) gives NaN in its row. */
cudaError_t attn_rotary(cinfer_dtype t, const void *x, const void *cos_cache, const void *sin_cache,
                        const int64_t *pos, void *y, int64_t rows, int64_t heads, int64_t seq, int64_t head,
                        int64_t half, int64_t max_pos, bool rank4, bool interleaved, cudaStream_t stream);

/* y = x * sigmoid(alpha * x) */
cudaError_t attn_swish(cinfer_dtype t, const void *x, void *y, int64_t n, float alpha, cudaStream_t stream);

/* y = a * sigmoid(alpha * a) * b; y may be a */
cudaError_t attn_swiglu(cinfer_dtype t, const void *a, const void *b, void *y, int64_t n, float alpha,
                        cudaStream_t stream);

/* Shared memory a LinearAttention block may use for its state (floats); past it the state lives in `state`. */
#define ATTN_LINEAR_SMEM_FLOATS 12288

typedef struct attn_linear_args {
    int64_t batch, seq, qh, kvh, dk, dv;
    int64_t decay_width, beta_width; /* last dims of decay and beta (0 when absent) */
    float scale;
    cinfer_dtype t; /* query, key, value and output */
    const void *q, *k, *v;
    void *y;
    const void *past, *decay, *beta; /* NULL when absent */
    cinfer_dtype past_dtype, decay_dtype, beta_dtype;
    void *state_out; /* present_state or NULL */
    cinfer_dtype state_dtype;
    float *state; /* batch * kvh * dk * dv floats of device memory when dk * dv + dk + dv exceeds
                     ATTN_LINEAR_SMEM_FLOATS, else NULL (the state stays in shared memory) */
} attn_linear_args;

/* LinearAttention: one block per (batch, kv head) steps through time with a float32 state. */
cudaError_t attn_linear(const attn_linear_args *args, cudaStream_t stream);

/* CausalConvWithState: x [batch, channels, len], w [channels, 1, k], bias [channels] or NULL, past [batch,
 * channels, k - 1] or NULL; y like x, state [batch, channels, k - 1] or NULL. */
cudaError_t attn_causal_conv(cinfer_dtype t, const void *x, const void *w, const void *bias, const void *past,
                             void *y, void *state, int64_t batch, int64_t channels, int64_t len, int64_t k,
                             bool silu, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
