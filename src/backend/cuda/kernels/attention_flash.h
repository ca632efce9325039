/* Launchers of the fused attention kernels: Y = softmax(scale * Q.K^T + mask).V for Q, K, V with head size 32, 64 or
 * 128, one pass over the keys per 64 or 128 queries with a float32 online softmax, so neither the scores nor a
 * head-major copy of Q, K, V or Y ever reach device memory. float16/bfloat16 run on tensor cores
 * (kernels/attention_flash.cu), float32 on the FMA units (kernels/attention_flash_f32.cu). Plain C types only. */
#ifndef CINFER_CUDA_KERNELS_ATTENTION_FLASH_H
#define CINFER_CUDA_KERNELS_ATTENTION_FLASH_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The mask is read per score from global memory, or staged in shared memory with each K/V tile: one row per
 * (batch, head) when it is the same for every query, a row per query otherwise (half-precision kernel: 1- and
 * 2-byte masks; float32 kernel: any mask, every row, with 16-byte aligned rows). */
enum { ATTN_FLASH_MASK_LOADED = 0, ATTN_FLASH_MASK_ROW = 1, ATTN_FLASH_MASK_ROWS = 2 };

/* Element (b, h, i, d) of Q is q[b * q_sb + h * q_sh + i * q_ss + d] (3-D [batch, seq, heads * size] and 4-D
 * [batch, heads, seq, size] both fit); K and V likewise with kv head h / (qh / kvh); Y like Q. */
typedef struct attn_flash_args {
    const void *q, *k, *v;
    void *y;
    int64_t batch, qh, kvh, sq, skv, hd;
    int64_t q_sb, q_sh, q_ss, kv_sb, kv_sh, kv_ss, y_sb, y_sh, y_ss;
    float scale;
    const void *mask;  /* additive float (float, float16, bfloat16) or bool (True attends) mask, or NULL */
    cinfer_dtype mask_dtype;
    int64_t mlen, ms_b, ms_h, ms_q; /* mask row length (keys past it are masked) and broadcast strides */
    bool mask_pairs;   /* set by attn_flash_fits: mask elements 2k, 2k + 1 of a row load as one */
    int mask_stage;    /* set by attn_flash_fits: how the kernel reads the mask (ATTN_FLASH_MASK_*) */
    int warps;         /* set by attn_flash_fits: 4 or 8 warps (64 or 128 queries) a work item */
    bool nan_to_zero;  /* a NaN probability row becomes zeros (the fused Softmax NaN guard) */
    bool empty_rows_nan; /* a row of -inf scores (with the mask) is NaN, not zeros (a fused unguarded Softmax) */
} attn_flash_args;

/* Whether attn_flash_run takes this head size, dtype, alignment (16-byte rows) and the current device's shared
 * memory; sets a->mask_pairs, a->mask_stage and a->warps. */
bool attn_flash_fits(cinfer_dtype t, attn_flash_args *a);

/* Launches the kernel for arguments attn_flash_fits accepted (it is not checked again on this per-run path). */
cudaError_t attn_flash_run(cinfer_dtype t, const attn_flash_args *a, cudaStream_t stream);

/* The float32 kernel's own check and launch (attn_flash_fits and attn_flash_run call them for float32). */
bool attn_flash_f32_fits(attn_flash_args *a);
cudaError_t attn_flash_f32_run(const attn_flash_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
