/* C prototypes of the conv family's launchers (kernels/conv.cu): the kernels around cuDNN's convolutions (pad,
 * crop, bias + Relu), direct convolutions for what cuDNN does not take, BatchNormalization and the pools.
 * Dtypes: float, double, float16, bfloat16, and int8/uint8 (computed in float, stored rounded and clamped, as
 * the CPU's float32 staging does). */
#ifndef CINFER_CUDA_KERNELS_CONV_H
#define CINFER_CUDA_KERNELS_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cinfer/cinfer.h"
#include "graph/shape/conv_types.h" /* conv_geom: the window in 3-D form */

#ifdef __cplusplus
extern "C" {
#endif

/* dst[p, o] = src[p, o - off] where that lies inside src (else 0), plus bias[p % channels] when bias is given:
 * padding (off = lead pads) and cropping (off = -crop) of `planes` 3-D planes. */
typedef struct conv_shift {
    int64_t src[3], dst[3], off[3];
} conv_shift;

cudaError_t conv_launch_shift(cinfer_dtype dtype, const void *src, void *dst, int64_t planes, conv_shift sh,
                              const void *bias, int64_t channels, cudaStream_t stream);

/* y[p, i] = (fill ? 0 : y[p, i]) + bias[p % channels] (bias may be NULL) + residual[p, i] (may be NULL: the fused
 * residual Add of "cinfer_fused_add"), then max(0, .) when relu. A channels-last Y [rows, channels] is `rows *
 * channels` planes of size 1. */
cudaError_t conv_launch_bias_act(cinfer_dtype dtype, void *y, int64_t planes, int64_t channels, int64_t plane_size,
                                 const void *bias, bool fill, bool relu, const void *residual, cudaStream_t stream);

/* Direct Conv: y[n, m] = act(bias[m] + sum over the group's channels and taps of x * w). W is [m, c / group, k...]. */
cudaError_t conv_launch_direct(cinfer_dtype dtype, const void *x, const void *w, const void *bias, void *y,
                               int64_t batch, int64_t c, int64_t m, int64_t group, conv_geom g, bool relu,
                               cudaStream_t stream);

/* Direct ConvTranspose (gather form, no atomics): y[n, m, o] = bias[m] + sum of x[n, c, i] * w[c, m % (m / group), t]
 * over o = i * s - pb + t * d. W is [c, m / group, k...]. */
cudaError_t conv_launch_transpose_direct(cinfer_dtype dtype, const void *x, const void *w, const void *bias, void *y,
                                         int64_t batch, int64_t c, int64_t m, int64_t group, conv_geom g,
                                         cudaStream_t stream);

enum { CONV_POOL_MAX, CONV_POOL_AVG, CONV_POOL_LP };

/* MaxPool / AveragePool / LpPool over `planes` planes. Taps outside the input are skipped; an average divides
 * by the taps inside the input (or, with include_pad, inside input + pads); a window without taps gives 0
 * (and index -1). indices (int64, may be NULL): flat index into X of the first maximum, row-major or, with
 * col_major, column-major over the spatial dims. */
cudaError_t conv_launch_pool(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t *indices, int64_t planes,
                             conv_geom g, bool include_pad, int64_t p, bool col_major, cudaStream_t stream);

/* Global pools: y[p] = max / mean / Lp norm of the `size` values of plane p (0 for empty planes). */
cudaError_t conv_launch_global_pool(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t planes,
                                    int64_t size, int64_t p, cudaStream_t stream);

/* Channels-last MaxPool / AveragePool (no Indices): x [batch, spatial..., channels] -> y [batch, out..., channels],
 * under conv_launch_pool's window rules. */
cudaError_t conv_launch_pool_nhwc(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t batch,
                                  int64_t channels, conv_geom g, bool include_pad, cudaStream_t stream);

/* Channels-last global pools: y[n, c] = max / mean / Lp norm of x[n, s, c] over the `size` positions s. */
cudaError_t conv_launch_global_pool_nhwc(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t batch,
                                         int64_t channels, int64_t size, int64_t p, cudaStream_t stream);

/* BatchNormalization's per-channel parameters (each of its own float dtype, as from opset 15). */
typedef struct conv_bn_params {
    const void *scale, *bias, *mean, *var;
    cinfer_dtype scale_t, bias_t, mean_t, var_t;
    double eps, momentum;
    int64_t channels;
} conv_bn_params;

/* table[2c] = a, table[2c + 1] = shift with a = scale / sqrt(var + eps), shift = bias - mean * a; both rounded
 * to float32 unless x_dtype is double (the CPU computes them so). */
cudaError_t conv_launch_bn_table(cinfer_dtype x_dtype, conv_bn_params bp, double *table, cudaStream_t stream);

/* Training mode: the batch mean and (population) variance of each channel of x [batch, c, size] give the table
 * as above; running_mean / running_var (dtype mean_t, may be NULL) get mean * momentum + stat * (1 - momentum). */
cudaError_t conv_launch_bn_train(cinfer_dtype dtype, const void *x, int64_t batch, int64_t size, conv_bn_params bp,
                                 double *table, void *running_mean, void *running_var, cudaStream_t stream);

/* y = x * table[2c] + table[2c + 1] for x [batch, c, size]; y may be x. */
cudaError_t conv_launch_bn_apply(cinfer_dtype dtype, const void *x, void *y, int64_t total, int64_t channels,
                                 int64_t size, const double *table, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
