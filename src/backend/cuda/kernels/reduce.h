/* C prototypes of the reduce family's CUDA launchers (kernels/reduce*.cu) and the plain structs they take. */
#ifndef CINFER_CUDA_KERNELS_REDUCE_H
#define CINFER_CUDA_KERNELS_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A reduction over any set of axes, after grouping: size-1 dims dropped, neighbouring dims with the same
 * kept/reduced status merged. Output element o (row-major over the kept groups) folds the input elements
 * keep_offset(o) + red_offset(r) for r < red, each offset the row-major decomposition of its index over
 * the groups' dims times their input strides. inner: size of the last group when it is kept (stride 1,
 * consecutive outputs read consecutive inputs), else 1. */
typedef struct cuda_reduce_geom {
    int64_t outputs; /* product of the kept groups */
    int64_t red;     /* product of the reduced groups: elements folded per output (0 for an empty set) */
    int64_t inner;
    int nkeep, nred;
    int64_t keep_dims[CINFER_MAX_DIMS], keep_strides[CINFER_MAX_DIMS];
    int64_t red_dims[CINFER_MAX_DIMS], red_strides[CINFER_MAX_DIMS];
} cuda_reduce_geom;

typedef enum cuda_reduce_op {
    CUDA_REDUCE_SUM,
    CUDA_REDUCE_MEAN,
    CUDA_REDUCE_MAX,
    CUDA_REDUCE_MIN,
    CUDA_REDUCE_PROD,
    CUDA_REDUCE_L1,
    CUDA_REDUCE_L2,
    CUDA_REDUCE_LOG_SUM,
    CUDA_REDUCE_LOG_SUM_EXP,
    CUDA_REDUCE_SUM_SQUARE,
    CUDA_REDUCE_ARG_MAX, /* output int64: index along the single reduced group */
    CUDA_REDUCE_ARG_MIN,
} cuda_reduce_op;

/* Reduce* and ArgMax/ArgMin over g (g->outputs > 0). x and y have dtype dt (y int64 for the Arg ops);
 * float types fold in float (double for double), integers in 64 bits with wrap-around. Deterministic: a
 * fixed number of threads per output, partial results combined in a fixed order.
 * With scratch_bytes non-NULL: only stores the device scratch the call needs (0 when none) and returns.
 * Else runs with `scratch` of that size. cudaErrorInvalidValue for an (op, dtype) without a kernel. */
cudaError_t cuda_reduce(cuda_reduce_op op, cinfer_dtype dt, const void *x, void *y, const cuda_reduce_geom *g,
                        bool select_last_index, void *scratch, size_t *scratch_bytes, cudaStream_t stream);

/* MeanVarianceNormalization over g's reduced set: y = (x - mean) / (sqrt(var) + 1e-9) at x's offsets,
 * statistics in double. dt: a float type. */
cudaError_t cuda_reduce_mvn(cinfer_dtype dt, const void *x, void *y, const cuda_reduce_geom *g, cudaStream_t stream);

/* ---- row ops along one axis: x seen as [outer, len, inner] (outer * len * inner > 0) ---- */
typedef enum cuda_softmax_mode {
    CUDA_SOFTMAX,
    CUDA_LOG_SOFTMAX,
    CUDA_HARDMAX, /* 1 at the first maximum (a NaN counts as the maximum), else 0 */
    CUDA_LP_NORM_1,
    CUDA_LP_NORM_2, /* x / ||x||_p, 0 where the norm is 0 */
} cuda_softmax_mode;

/* dt: a float type. float16/bfloat16 Softmax rounds step by step as the CPU reference does. y may be x.
 * nan_to_zero (CUDA_SOFTMAX, the fused "cinfer_nan_to_zero"): a row whose result is NaN is written as zeros. */
cudaError_t cuda_reduce_softmax(cuda_softmax_mode mode, cinfer_dtype dt, const void *x, void *y, int64_t outer,
                                int64_t len, int64_t inner, bool nan_to_zero, cudaStream_t stream);

/* ---- normalisations ---- */

/* A per-column parameter (scale or bias) of rows of `cols`: element c reads data[offset(c)], offset(c) = c
 * when ndim is 0, else the row-major decomposition of c over dims with strides (0 on broadcast dims). */
typedef struct cuda_norm_param {
    const void *data; /* NULL: absent */
    cinfer_dtype dtype; /* a float type */
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];
    int64_t strides[CINFER_MAX_DIMS];
} cuda_norm_param;

/* A statistic output (LayerNormalization's Mean / InvStdDev): one value per row, any float dtype. */
typedef struct cuda_norm_stat {
    void *data; /* NULL: not wanted */
    cinfer_dtype dtype;
} cuda_norm_stat;

/* LayerNormalization (rms false) / RMSNormalization (rms true) over contiguous rows of `cols`:
 * y = (x - mean) * inv * scale + bias with inv = 1/sqrt(var + eps) (rms: mean 0, var = mean of squares).
 * x: dt; y: y_dtype (a float type). y may be x. residual (or NULL): the fused Add of graph/fusion.c, dt, x's shape,
 * y_dtype == dt: the rows are those of x + residual (summed in float32 for half types; rows over 1024 are summed
 * into y first, rounded to dt). */
cudaError_t cuda_reduce_layer_norm(cinfer_dtype dt, const void *x, const void *residual, cinfer_dtype y_dtype, void *y,
                                   int64_t rows, int64_t cols, cuda_norm_param scale, cuda_norm_param bias, double eps,
                                   bool rms,
                                   cuda_norm_stat mean, cuda_norm_stat inv_std, cudaStream_t stream);

/* Instance/GroupNormalization: x [batch, channels, spatial] as rows = batch * groups of (channels / groups)
 * channels; statistics per row, then y = (x - mean) * inv * scale[p] + bias[p] with p the channel, or the
 * group when per_group. scale and bias: full layout (ndim 0). y may be x. */
cudaError_t cuda_reduce_group_norm(cinfer_dtype dt, const void *x, void *y, int64_t batch, int64_t channels,
                                   int64_t spatial, int64_t groups, bool per_group, cuda_norm_param scale,
                                   cuda_norm_param bias, double eps, cudaStream_t stream);

/* LRN: x and y [batch, channels, spatial] of dt (a float type), y not x: y = x * (bias + alpha / size * sum)^-beta,
 * sum the squares of x over the channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] in range, in float
 * (double for double). size >= 1. */
cudaError_t cuda_reduce_lrn(cinfer_dtype dt, const void *x, void *y, int64_t batch, int64_t channels, int64_t spatial,
                            int64_t size, double alpha, double beta, double bias, cudaStream_t stream);

/* ---- TopK ---- */

/* Longest row one block sorts in shared memory; longer rows go through candidate passes (k up to half of
 * it) or a whole-row radix sort (larger k: needs outer * len * inner <= INT_MAX). */
#define CUDA_TOPK_CHUNK 4096

/* The k best (largest or smallest) of each row along the axis of x [outer, len, inner], best first; order
 * by value (NaN above everything), ties by the lower index. values: dt, [outer, k, inner]; indices (int64,
 * may be NULL) likewise. 0 < k <= len, len <= INT32_MAX. Scratch as for cuda_reduce. */
cudaError_t cuda_reduce_topk(cinfer_dtype dt, const void *x, void *values, int64_t *indices, int64_t outer,
                             int64_t len, int64_t inner, int64_t k, bool largest, void *scratch,
                             size_t *scratch_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
