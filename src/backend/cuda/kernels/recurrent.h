/* Launchers of the recurrent-family kernels (kernels/recurrent.cu): LSTM, GRU and RNN gates and states. Plain C
 * types only. t is the node's dtype (float, double, float16, bfloat16); the work buffers ("compute type") are
 * double for double and float32 otherwise. */
#ifndef CINFER_CUDA_KERNELS_RECURRENT_H
#define CINFER_CUDA_KERNELS_RECURRENT_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"
#include "graph/shape/recurrent_types.h" /* recurrent_act, RECURRENT_ACT_*: the activation functions */

#ifdef __cplusplus
extern "C" {
#endif

/* What one rnn_step launch does: the whole cell (LSTM, RNN, GRU with linear_before_reset), or GRU's two halves
 * around the second recurrent GEMM (z and r with tmp = r * h, then the hidden gate and h). */
enum { RNN_PHASE_CELL, RNN_PHASE_GRU_RESET, RNN_PHASE_GRU_HIDDEN };

/* One time step over every (direction, batch row, hidden unit). Buffers of the compute type: xw [nd, rows, G*H]
 * input projections with rows (t, b) for layout 0 and (b, t) for layout 1; hr [nd, batch, G*H] recurrent
 * products, gates afterwards; h, c, tmp, tmp2 [nd, batch, H]; bias [nd, G*H] (Wb + Rb, GRU's hidden gate Wb
 * only under linear_before_reset); rbh [nd, H] (GRU's Rbh, zeros when unused). Of the node's dtype: p [nd, 3H]
 * peepholes or NULL, y (output Y) or NULL. lens: sequence_lens on the device (int32 or int64) or NULL; a length
 * outside [0, seq] makes its batch row's outputs NaN. */
typedef struct rnn_step_args {
    int gates, phase;
    int64_t seq, batch, hidden, ndir, step;
    int layout;
    bool reverse, lbr, input_forget, has_clip;
    float clip;
    recurrent_act act[2][3]; /* [direction][f, g, h] */
    const void *lens;
    bool lens64;
    const void *xw, *bias, *rbh, *tmp2;
    void *hr, *h, *c, *tmp;
    const void *p;
    void *y;
} rnn_step_args;

/* dst (float32) = src (float16 or bfloat16), n elements. */
cudaError_t rnn_to_float(cinfer_dtype t, const void *src, float *dst, int64_t n, cudaStream_t stream);

/* bias [nd, G*H] and rbh [nd, H] (compute type) from B [nd, 2*G*H] of dtype t, or zeros when b is NULL. */
cudaError_t rnn_prepare_bias(cinfer_dtype t, const void *b, void *bias, void *rbh, int64_t nd, int gates,
                             int64_t hidden, bool lbr, cudaStream_t stream);

/* h, c [nd, batch, H] (compute type) from initial_h / initial_c of dtype t (layout 0: [nd, batch, H], 1: [batch,
 * nd, H]) or zeros when NULL; c may be NULL. */
cudaError_t rnn_init_state(cinfer_dtype t, const void *h0, const void *c0, void *h, void *c, int64_t nd,
                           int64_t batch, int64_t hidden, int layout, cudaStream_t stream);

cudaError_t rnn_step(cinfer_dtype t, const rnn_step_args *args, cudaStream_t stream);

/* Y_h / Y_c (dtype t, layout as the initial states; either may be NULL) from h and c. */
cudaError_t rnn_store_state(cinfer_dtype t, const void *h, const void *c, void *yh, void *yc, int64_t nd,
                            int64_t batch, int64_t hidden, int layout, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
