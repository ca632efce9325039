/* C prototypes of the misc family's launchers (kernels/misc.cu, misc_einsum.cu, misc_quant.cu) and their argument
 * structs, passed by value to the kernels. */
#ifndef CINFER_CUDA_KERNELS_MISC_H
#define CINFER_CUDA_KERNELS_MISC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels/index_check.h"
#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- CumSum, CumProd */

/* x viewed as [outer, len, inner]: each (outer, inner) lane scans along len, one thread per lane, in the CPU's
 * order (half types round the running value each step; signed integers wrap). y may be x. */
cudaError_t cuda_misc_cum(cinfer_dtype dtype, bool prod, const void *x, void *y, int64_t outer, int64_t len,
                          int64_t inner, bool exclusive, bool reverse, cudaStream_t stream);

/* ---------------------------------------------------------------- losses */

/* NegativeLogLikelihoodLoss (softmax false) and SoftmaxCrossEntropyLoss over x [N, C, D...] (D: the product of
 * the trailing dims), target [N, D...] (int32 or int64), optional weight [C]. reduction none writes loss [N, D...];
 * sum and mean write one value, reduced without atomics in a fixed order through `partials`. A target outside
 * [0, C) that is not ignore_index makes its loss NaN and is reported through `check` (the CPU refuses it). */
typedef struct cuda_loss_args {
    bool softmax;
    int reduction; /* 0 none, 1 sum, 2 mean */
    bool has_ignore;
    int64_t ignore_index;
    int64_t N, C, D;
    cuda_index_check check;
} cuda_loss_args;
/* Doubles of scratch the reduced losses need for partial sums (0 for reduction none). */
size_t cuda_misc_loss_partials(const cuda_loss_args *a);
cudaError_t cuda_misc_loss(cinfer_dtype dtype, const void *x, cinfer_dtype target_dtype, const void *target,
                           const void *weight, void *loss, void *log_prob, double *partials, const cuda_loss_args *a,
                           cudaStream_t stream);

/* ---------------------------------------------------------------- ReverseSequence */

/* x [d0, d1, inner...] with the batch on dim batch_axis (0 or 1) and time on the other; lens int32 or int64. */
cudaError_t cuda_misc_reverse_sequence(size_t elem_size, const void *x, cinfer_dtype lens_dtype, const void *lens,
                                       void *y, int batch_axis, int64_t batch, int64_t time, int64_t inner,
                                       cudaStream_t stream);

/* ---------------------------------------------------------------- Einsum */

#define CUDA_EINSUM_MAX_OPERANDS 8
#define CUDA_EINSUM_MAX_SUMMED 16

/* out[o] = sum over the summed labels of the product of the operands, each read through per-label element strides
 * (0 where a size-1 dim broadcasts; summed over repeats, a diagonal). */
typedef struct cuda_einsum_args {
    int num_operands, out_ndim, num_summed;
    const void *operand[CUDA_EINSUM_MAX_OPERANDS];
    int64_t out_size[CINFER_MAX_DIMS];
    int64_t out_stride[CUDA_EINSUM_MAX_OPERANDS][CINFER_MAX_DIMS];
    int64_t summed_size[CUDA_EINSUM_MAX_SUMMED];
    int64_t summed_stride[CUDA_EINSUM_MAX_OPERANDS][CUDA_EINSUM_MAX_SUMMED];
    int64_t summed_count;
} cuda_einsum_args;
cudaError_t cuda_misc_einsum(cinfer_dtype dtype, const cuda_einsum_args *a, void *y, int64_t count,
                             cudaStream_t stream);

/* ---------------------------------------------------------------- QuantizeLinear, DequantizeLinear */

/* x viewed as [outer, len, inner] around the quantization axis; the scale of element (o, a, i) is at 0 (per
 * tensor), a (per axis) or (o * ceil(len / block) + a / block) * inner + i (blocked). */
typedef struct cuda_quant_layout {
    int64_t outer, len, inner;
    int64_t block; /* 0: per tensor or per axis */
    bool per_tensor;
} cuda_quant_layout;

/* y = saturate(round_half_even(x / scale) + zero_point); x and scale float, float16, bfloat16, double or int32;
 * y and zero_point (may be NULL) uint8, int8, uint16 or int16. */
cudaError_t cuda_misc_quantize(cinfer_dtype x_dtype, const void *x, cinfer_dtype scale_dtype, const void *scale,
                               const void *zero_point, cinfer_dtype y_dtype, void *y, const cuda_quant_layout *q,
                               cudaStream_t stream);
/* y = (x - zero_point) * scale; x and zero_point uint8, int8, uint16, int16 or int32; scale and y float types. */
cudaError_t cuda_misc_dequantize(cinfer_dtype x_dtype, const void *x, cinfer_dtype scale_dtype, const void *scale,
                                 const void *zero_point, cinfer_dtype y_dtype, void *y, const cuda_quant_layout *q,
                                 cudaStream_t stream);

/* DynamicQuantizeLinear of float32 x into uint8 y; y_scale (float) and y_zero_point (uint8) may be NULL.
 * `scratch` holds cuda_misc_dynamic_quantize_scratch(count) bytes. */
size_t cuda_misc_dynamic_quantize_scratch(int64_t count);
cudaError_t cuda_misc_dynamic_quantize(const float *x, uint8_t *y, float *y_scale, uint8_t *y_zero_point,
                                       int64_t count, void *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
