/* C prototypes of the image family's launchers (kernels/image.cu, kernels/image_resize.cu) and their argument
 * structs, passed by value to the kernels. */
#ifndef CINFER_CUDA_KERNELS_IMAGE_H
#define CINFER_CUDA_KERNELS_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- Resize */

/* Resize modes as the kernels see them (the host maps image_params.h's enums onto these). */
enum { CUDA_RESIZE_NEAREST, CUDA_RESIZE_LINEAR, CUDA_RESIZE_CUBIC };
enum {
    CUDA_COORD_HALF_PIXEL,
    CUDA_COORD_HALF_PIXEL_SYMMETRIC,
    CUDA_COORD_PYTORCH_HALF_PIXEL,
    CUDA_COORD_ALIGN_CORNERS,
    CUDA_COORD_ASYMMETRIC,
    CUDA_COORD_TF_CROP_AND_RESIZE,
};
enum {
    CUDA_NEAREST_ROUND_PREFER_FLOOR,
    CUDA_NEAREST_ROUND_PREFER_CEIL,
    CUDA_NEAREST_FLOOR,
    CUDA_NEAREST_CEIL,
    CUDA_NEAREST_SIMPLE,
};

/* One axis of a Resize: everything the tap table of that axis depends on. */
typedef struct cuda_resize_axis {
    int mode, coord, nearest;
    int taps; /* taps per output position before nearest picks one (2 for nearest) */
    bool exclude_outside, antialias;
    float cubic_a;
    double scale, roi_start, roi_end;
    int64_t in_len, out_len;
} cuda_resize_axis;

/* Linear and cubic passes run in double for these dtypes (integers through double lose nothing below 2^53),
 * in float otherwise: the CPU kernel's rule, shared by the host (buffer sizes) and the kernels. */
static inline bool cuda_resize_work_double(cinfer_dtype t) {
    return t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_INT32 || t == CINFER_DTYPE_UINT32 || t == CINFER_DTYPE_INT64 ||
           t == CINFER_DTYPE_UINT64;
}

/* Fills the tap table of one axis: idx[out_len * n] and coef[out_len * n] (nearest: idx[out_len] only, the chosen
 * index), extrap[out_len] (1: the position lies outside the tf_crop_and_resize box). */
cudaError_t cuda_image_resize_taps(const cuda_resize_axis *axis, int64_t *idx, float *coef, unsigned char *extrap,
                                   cudaStream_t stream);

/* Nearest over all axes at once: y[o] = x[sum_d idx_d[o_d] * in_stride_d], or the fill value where any axis
 * extrapolates. */
typedef struct cuda_resize_gather {
    int ndim;
    int64_t out_dims[CINFER_MAX_DIMS];
    int64_t in_stride[CINFER_MAX_DIMS];
    const int64_t *idx[CINFER_MAX_DIMS];
    const unsigned char *extrap[CINFER_MAX_DIMS];
    uint64_t fill_bits; /* the extrapolation value in the element's dtype, low bytes first */
} cuda_resize_gather;
cudaError_t cuda_image_resize_nearest(size_t elem_size, const void *x, void *y, int64_t count,
                                      const cuda_resize_gather *g, cudaStream_t stream);

/* One separable 1-D pass along an axis: src viewed as [outer, in_len, inner], dst as [outer, out_len, inner].
 * src (dst) holds the work type (float, or double per cuda_resize_work_double) when src_work (dst_work), else
 * dtype; integer dtypes are stored rounded half to even and saturated. */
cudaError_t cuda_image_resize_pass(cinfer_dtype dtype, const void *src, bool src_work, void *dst, bool dst_work,
                                   int64_t outer, int64_t in_len, int64_t out_len, int64_t inner, int taps,
                                   const int64_t *idx, const float *coef, const unsigned char *extrap, double fill,
                                   cudaStream_t stream);

/* ---------------------------------------------------------------- GridSample, AffineGrid */

enum { CUDA_GS_ZEROS, CUDA_GS_BORDER, CUDA_GS_REFLECTION };
enum { CUDA_GS_NEAREST, CUDA_GS_LINEAR, CUDA_GS_CUBIC };

typedef struct cuda_grid_sample_args {
    int mode, pad;
    bool align;
    int r;              /* spatial dims, 1..3 */
    int64_t N, C, P;    /* batch, channels, output points per (n, c) */
    int64_t len[3];     /* X's spatial dims */
    int64_t stride[3];  /* their element strides within one plane */
    int64_t plane;      /* elements of one (n, c) plane of X */
} cuda_grid_sample_args;
cudaError_t cuda_image_grid_sample(cinfer_dtype x_dtype, const void *x, cinfer_dtype grid_dtype, const void *grid,
                                   void *y, const cuda_grid_sample_args *a, cudaStream_t stream);

/* grid[n, p, row] = theta[n, row, :] . [base coords of p (innermost first), 1]; dims are the r spatial dims. */
cudaError_t cuda_image_affine_grid(cinfer_dtype dtype, const void *theta, void *y, int64_t N, int r,
                                   const int64_t *dims, bool align, cudaStream_t stream);

/* ---------------------------------------------------------------- CenterCropPad, Col2Im */

/* y[o] = x[o - out_off + in_off] inside the centred overlap (len), 0 elsewhere. */
typedef struct cuda_crop_pad_args {
    int ndim;
    int64_t out_dims[CINFER_MAX_DIMS];
    int64_t in_stride[CINFER_MAX_DIMS];
    int64_t in_off[CINFER_MAX_DIMS], out_off[CINFER_MAX_DIMS], len[CINFER_MAX_DIMS];
} cuda_crop_pad_args;
cudaError_t cuda_image_center_crop_pad(size_t elem_size, const void *x, void *y, int64_t count,
                                       const cuda_crop_pad_args *a, cudaStream_t stream);

/* Col2Im over r spatial dims: x [N, C * block, blocks] summed back into y [N, C, img...]. */
typedef struct cuda_col2im_args {
    int r;
    int64_t NC;                       /* N * C */
    int64_t img[CINFER_MAX_DIMS];     /* image dims */
    int64_t blk[CINFER_MAX_DIMS];     /* block (kernel) dims */
    int64_t nb[CINFER_MAX_DIMS];      /* blocks along each dim */
    int64_t dil[CINFER_MAX_DIMS], str[CINFER_MAX_DIMS], pad[CINFER_MAX_DIMS]; /* pad: the leading pads */
    int64_t block, blocks, plane;     /* products of blk, nb, img */
} cuda_col2im_args;
cudaError_t cuda_image_col2im(cinfer_dtype dtype, const void *x, void *y, const cuda_col2im_args *a,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
