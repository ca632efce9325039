/* C prototypes of the signal family's launchers (kernels/signal.cu, kernels/signal_dft.cu) and their argument
 * structs, passed by value to the kernels. */
#ifndef CINFER_CUDA_KERNELS_SIGNAL_H
#define CINFER_CUDA_KERNELS_SIGNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels/index_check.h"
#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- windows, MelWeightMatrix */

/* y[i] = a0 - a1 cos(2 pi i / denom) + a2 cos(4 pi i / denom); 1 where denom <= 0 (a one-point symmetric window). */
cudaError_t cuda_signal_window(cinfer_dtype dtype, void *y, int64_t size, double denom, double a0, double a1,
                               double a2, cudaStream_t stream);

/* y [nspec, bins] of triangular filters; sample_rate (an integer scalar) and the edges (float scalars) are read on
 * the device. A non-positive sample rate gives NaN (the CPU reports an error). */
cudaError_t cuda_signal_mel(cinfer_dtype dtype, void *y, int64_t bins, int64_t nspec, int64_t dft_length,
                            cinfer_dtype rate_dtype, const void *rate, cinfer_dtype lo_dtype, const void *lo,
                            cinfer_dtype hi_dtype, const void *hi, cudaStream_t stream);

/* ---------------------------------------------------------------- RoiAlign, MaxRoiPool */

typedef struct cuda_roi_args {
    int64_t N, C, H, W;    /* X */
    int64_t R, PH, PW;     /* output [R, C, PH, PW] */
    double spatial_scale;
    int64_t sampling_ratio; /* RoiAlign */
    bool max_mode;          /* RoiAlign: max instead of avg */
    bool half_pixel;        /* RoiAlign: coordinate_transformation_mode half_pixel */
    cuda_index_check check; /* where a batch index out of range is reported */
} cuda_roi_args;
/* Invalid ROIs (batch index out of range, non-finite coordinates) give NaN (the CPU refuses them); a batch index
 * out of range is also reported through a->check, so the run fails as on the CPU, and is checked even where the
 * output is empty (no channels or bins). */
cudaError_t cuda_signal_roi_align(cinfer_dtype dtype, const void *x, cinfer_dtype rois_dtype, const void *rois,
                                  cinfer_dtype index_dtype, const void *batch_indices, void *y,
                                  const cuda_roi_args *a, cudaStream_t stream);
/* The same for MaxRoiPool, whose batch index is column 0 of each roi. */
cudaError_t cuda_signal_max_roi_pool(cinfer_dtype dtype, const void *x, cinfer_dtype rois_dtype, const void *rois,
                                     void *y, const cuda_roi_args *a, cudaStream_t stream);

/* ---------------------------------------------------------------- MaxUnpool */

/* Scatters x to the flat indices of the unpooled shape `dims`, re-expressed in y's dims. Where indices repeat, the
 * last element wins (as the CPU's sequential loop): `winner` (y_count int64 of scratch) records it. Indices out of
 * range are skipped (the CPU reports an error). */
typedef struct cuda_unpool_args {
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];   /* the unpooled shape the indices refer to */
    int64_t y_dims[CINFER_MAX_DIMS]; /* the output shape (output_shape may pad it) */
    int64_t total;                   /* elements of dims */
    int64_t x_count, y_count;
} cuda_unpool_args;
cudaError_t cuda_signal_max_unpool(size_t elem_size, const void *x, cinfer_dtype index_dtype, const void *indices,
                                   void *y, long long *winner, const cuda_unpool_args *a, cudaStream_t stream);

/* ---------------------------------------------------------------- Det */

/* Determinants of `batch` m x m matrices by LU with partial pivoting, one block per matrix, in double;
 * `work` holds batch * m * m doubles. */
cudaError_t cuda_signal_det(cinfer_dtype dtype, const void *x, void *y, int64_t batch, int64_t m, double *work,
                            cudaStream_t stream);

/* ---------------------------------------------------------------- DFT, STFT */

/* x viewed as [outer, n_in, inner, cin], y as [outer, n_out, inner, cout]; a direct transform of length len per
 * output bin (zero padded or truncated to len; a one-sided inverse completes the Hermitian half). */
typedef struct cuda_dft_args {
    int64_t outer, inner, n_in, n_out, cin, cout;
    int64_t len, take; /* transform length; input bins read */
    bool inverse, c2r; /* c2r: inverse of a one-sided spectrum, real output */
} cuda_dft_args;
cudaError_t cuda_signal_dft(cinfer_dtype dtype, const void *x, void *y, const cuda_dft_args *a, cudaStream_t stream);

/* x [batch, sig, cin], optional window [len] of x's dtype, y [batch, frames, bins, 2]. */
typedef struct cuda_stft_args {
    int64_t batch, sig, cin, frames, bins, step, len;
} cuda_stft_args;
cudaError_t cuda_signal_stft(cinfer_dtype dtype, const void *x, const void *window, void *y, const cuda_stft_args *a,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
