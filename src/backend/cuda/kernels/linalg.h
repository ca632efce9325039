/* C prototypes of the linalg family's launchers (kernels/linalg.cu): the small kernels around cuBLASLt GEMMs
 * (Gemm's C prefill) and the integer MatMul / Gemm that cuBLASLt does not cover. */
#ifndef CINFER_CUDA_KERNELS_LINALG_H
#define CINFER_CUDA_KERNELS_LINALG_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Broadcast batch dims of a MatMul: output batch b (row-major over dims[0..nb)) reads A's matrix number
 * sum(idx[d] * sa[d]) and B's sum(idx[d] * sb[d]) (0 where an operand broadcasts). nb == 0: one matrix. */
typedef struct linalg_batch {
    int nb;
    int64_t dims[CINFER_MAX_DIMS];
    int64_t sa[CINFER_MAX_DIMS];
    int64_t sb[CINFER_MAX_DIMS];
} linalg_batch;

/* Y[m, n] = scale * C broadcast (C has crows x ccols, each 1 or the full extent), or 0 when c is NULL.
 * Float types compute in float (double for double); integers copy C (scale ignored). */
cudaError_t linalg_launch_fill_c(cinfer_dtype dtype, const void *c, int64_t crows, int64_t ccols, double scale, void *y,
                                 int64_t m, int64_t n, cudaStream_t stream);

/* Integer MatMul over broadcast batches: Y[b] = A[oa(b)] (m x k) * B[ob(b)] (k x n), accumulating in the unsigned
 * type of the same width (wraps like numpy). Any integer dtype. */
cudaError_t linalg_launch_int_matmul(cinfer_dtype dtype, const void *a, const void *b, void *y, int64_t batch,
                                     linalg_batch bt, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

/* Integer Gemm, Y holding broadcast C already when has_c: with alpha == 1 and (no C or beta == 1) Y = op(A) op(B)
 * (+ C) wrapping in the unsigned type; else Y = (T)(alpha * (double)(T)acc + beta * (double)C), as the CPU does. */
cudaError_t linalg_launch_int_gemm(cinfer_dtype dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                   double alpha, const void *a, const void *b, double beta, bool has_c, void *y,
                                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
