/* Launchers of the Attention kernels (kernels/attention_sdpa.cu): operand staging, the per-row bias/softmax pass
 * between the two GEMMs, and the output and present-key/value copies. Plain C types only. */
#ifndef CINFER_CUDA_KERNELS_ATTENTION_SDPA_H
#define CINFER_CUDA_KERNELS_ATTENTION_SDPA_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rounding to the input type at the reference's op boundaries (the CPU kernel's rnd_mode). */
enum { ATTN_RND_NONE = 0, ATTN_RND_F16 = 1, ATTN_RND_BF16 = 2 };

/* One chunk of score rows for attn_sdpa_rows. Row r of the chunk is global row row0 + r = (b * qh + h) * sq + i
 * (query i of head h in batch b); its scores[r * total, (r + 1) * total) hold alpha * Q.K^T in float32 and are
 * replaced by the probabilities. */
typedef struct attn_row_args {
    int64_t qh, sq, total, past;
    int64_t row0, nrows;
    float *scores;
    void *qk;           /* qk_matmul_output [batch, qh, sq, total] in the Q dtype, or NULL */
    int mode;           /* qk_matmul_output_mode */
    float softcap;      /* > 0: softcap * tanh(x / softcap), already rounded like rb */
    int rt, rb, rs;     /* ATTN_RND_*: after the product, softcap and bias add, inside the softmax */
    bool causal, window, has_past;
    int64_t left, right;
    const void *mask;   /* attn_mask (any number type or bool), right-aligned broadcast strides; NULL: none */
    cinfer_dtype mask_dtype;
    int64_t mlen, ms_b, ms_h, ms_q;
    const int64_t *nonpad; /* nonpad_kv_seqlen [batch] on the device, or NULL */
    bool nan_to_zero;   /* "cinfer_nan_to_zero": NaN probabilities become 0 (a fused Softmax NaN guard) */
    bool empty_rows_nan; /* "cinfer_empty_rows_nan": a row of -inf scores is NaN (a fused unguarded Softmax) */
} attn_row_args;

/* dst[b, h, s, d] (float32, [batch, heads, seq, size]) = round(src * scale) from a 4-D src of the same layout
 * (row_ld 0) or a 3-D src [batch, seq, heads * size] whose rows lie row_ld elements apart (heads * size, or more
 * for Attention's packed Q/K/V). t: float, float16 or bfloat16. */
cudaError_t attn_sdpa_stage(cinfer_dtype t, const void *src, float *dst, int64_t batch, int64_t heads, int64_t seq,
                            int64_t size, int64_t row_ld, float scale, int rnd, cudaStream_t stream);

/* Bias, softcap, softmax and qk_matmul_output of a chunk of score rows; qk_dtype is the Q dtype. */
cudaError_t attn_sdpa_rows(cinfer_dtype qk_dtype, const attn_row_args *args, cudaStream_t stream);

/* y (t: float, float16 or bfloat16; 4-D [batch, qh, sq, hdv] or 3-D [batch, sq, qh * hdv]) from the float32
 * result yf [batch, qh, sq, hdv], rounded once. */
cudaError_t attn_sdpa_store(cinfer_dtype t, const float *yf, void *y, int64_t batch, int64_t qh, int64_t sq,
                            int64_t hdv, bool rank3, cudaStream_t stream);

/* present [batch, kvh, past + seq, width] = concat(past (or none), cur) along the sequence axis, cur 4-D
 * [batch, kvh, seq, width] (row_ld 0) or 3-D [batch, seq, kvh * width] with rows row_ld elements apart; elements
 * of elem_size bytes. */
cudaError_t attn_sdpa_present(size_t elem_size, const void *past, const void *cur, void *present, int64_t batch,
                              int64_t kvh, int64_t past_len, int64_t seq, int64_t width, int64_t row_ld,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
