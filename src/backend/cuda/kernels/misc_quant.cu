// QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked) and DynamicQuantizeLinear kernels, following the
// CPU kernel's arithmetic path by path (float32 fast paths, then the general double/float rules).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/misc.h"

namespace cinfer_cuda {
namespace {

// Element i of a float, float16, bfloat16, double or integer array whose dtype is known at run time, as double.
__device__ __forceinline__ double load_any(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return ((const float *)p)[i];
    case CINFER_DTYPE_DOUBLE: return ((const double *)p)[i];
    case CINFER_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case CINFER_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CINFER_DTYPE_INT8: return ((const int8_t *)p)[i];
    case CINFER_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case CINFER_DTYPE_INT16: return ((const int16_t *)p)[i];
    case CINFER_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case CINFER_DTYPE_INT32: return ((const int32_t *)p)[i];
    case CINFER_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case CINFER_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case CINFER_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    default: return 0;
    }
}

// Writes v as element i of a float-typed array (half types round through float, as cpu_store_f64).
__device__ __forceinline__ void store_float_any(void *p, cinfer_dtype t, int64_t i, double v) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case CINFER_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case CINFER_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case CINFER_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    default: break;
    }
}

// Where the scale of element e lives (the CPU's quant_param_index).
__device__ __forceinline__ int64_t quant_param(const cuda_quant_layout &q, int64_t e) {
    if (q.per_tensor) return 0;
    int64_t i = e % q.inner, r = e / q.inner;
    int64_t a = r % q.len, o = r / q.len;
    if (q.block == 0) return a;
    int64_t blocks = (q.len + q.block - 1) / q.block;
    return (o * blocks + a / q.block) * q.inner + i;
}

// v / s rounded half to even, plus z, saturated; NaN goes low (the CPU's quant_one: clamping first keeps the
// rounding exact).
__device__ __forceinline__ float quant_one(float v, float s, float z, float lo, float hi) {
    v = v / s;
    v = !(v > -1048576.0f) ? -1048576.0f : v;
    v = v > 1048576.0f ? 1048576.0f : v;
    v = rintf(v) + z;
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

template <typename Y> struct quant_range;
template <> struct quant_range<uint8_t> { static constexpr float lo = 0, hi = 255; };
template <> struct quant_range<int8_t> { static constexpr float lo = -128, hi = 127; };
template <> struct quant_range<uint16_t> { static constexpr float lo = 0, hi = 65535; };
template <> struct quant_range<int16_t> { static constexpr float lo = -32768, hi = 32767; };

template <typename Y>
__global__ void quantize_kernel(cinfer_dtype xt, const void *x, cinfer_dtype st, const void *scale, const Y *zp, Y *y,
                                int64_t count, cuda_quant_layout q) {
    const float lo = quant_range<Y>::lo, hi = quant_range<Y>::hi;
    // float32 x and scale: float arithmetic throughout (the CPU's vectorised path)
    const bool fast = xt == CINFER_DTYPE_FLOAT && st == CINFER_DTYPE_FLOAT;
    const bool in_float = xt == CINFER_DTYPE_FLOAT || xt == CINFER_DTYPE_FLOAT16 || xt == CINFER_DTYPE_BFLOAT16;
    // the quotient rounds to the half type when the scale has it too
    const int round_half = st == xt ? (xt == CINFER_DTYPE_FLOAT16 ? 1 : xt == CINFER_DTYPE_BFLOAT16 ? 2 : 0) : 0;
    CUDA_GRID_STRIDE(e, count) {
        int64_t p = quant_param(q, e);
        if (fast) {
            float z = zp ? (float)zp[p] : 0.0f;
            y[e] = (Y)(int32_t)quant_one(((const float *)x)[e], ((const float *)scale)[p], z, lo, hi);
            continue;
        }
        double v;
        if (in_float) {
            float f = (float)load_any(x, xt, e) / (float)load_any(scale, st, p);
            if (round_half == 1) f = __half2float(__float2half_rn(f));
            else if (round_half == 2) f = __bfloat162float(__float2bfloat16_rn(f));
            v = f;
        } else {
            v = load_any(x, xt, e) / load_any(scale, st, p);
        }
        v = rint(v);
        if (v != v) v = 0;
        if (zp) v += (double)zp[p];
        y[e] = (Y)(v < lo ? lo : v > hi ? hi : v);
    }
}

template <typename Y>
cudaError_t launch_quantize(cinfer_dtype xt, const void *x, cinfer_dtype st, const void *scale, const void *zp,
                            void *y, int64_t count, const cuda_quant_layout *q, cudaStream_t stream) {
    quantize_kernel<Y><<<grid_for(count), kBlock, 0, stream>>>(xt, x, st, scale, (const Y *)zp, (Y *)y, count, *q);
    return cudaGetLastError();
}

template <typename X>
__global__ void dequantize_kernel(const X *x, cinfer_dtype st, const void *scale, const X *zp, cinfer_dtype yt,
                                  void *y, int64_t count, cuda_quant_layout q) {
    // float32 scale and output from a narrow integer: float arithmetic (the CPU's vectorised path)
    const bool fast = st == CINFER_DTYPE_FLOAT && yt == CINFER_DTYPE_FLOAT && !std::is_same<X, int32_t>::value;
    const bool wide = std::is_same<X, int32_t>::value || yt == CINFER_DTYPE_DOUBLE;
    CUDA_GRID_STRIDE(e, count) {
        int64_t p = quant_param(q, e);
        if (fast) {
            float z = zp ? (float)zp[p] : 0.0f;
            ((float *)y)[e] = ((float)x[e] - z) * ((const float *)scale)[p];
            continue;
        }
        double d = (double)x[e] - (zp ? (double)zp[p] : 0.0);
        double s = load_any(scale, st, p);
        double v = wide ? d * s : (double)((float)d * (float)s);
        store_float_any(y, yt, e, v);
    }
}

template <typename X>
cudaError_t launch_dequantize(const void *x, cinfer_dtype st, const void *scale, const void *zp, cinfer_dtype yt,
                              void *y, int64_t count, const cuda_quant_layout *q, cudaStream_t stream) {
    dequantize_kernel<X><<<grid_for(count), kBlock, 0, stream>>>((const X *)x, st, scale, (const X *)zp, yt, y, count,
                                                                 *q);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- DynamicQuantizeLinear
// min and max over integer keys that order like the floats (sign-magnitude turned two's complement), as the CPU
// does, starting at 0 so the range takes in 0: per block into partials, then one block for the parameters.

constexpr int kMinMaxBlock = 256;
constexpr unsigned kMinMaxMaxBlocks = 1024;

unsigned minmax_grid(int64_t count) {
    unsigned g = grid_for(count, kMinMaxBlock);
    return g < kMinMaxMaxBlocks ? g : kMinMaxMaxBlocks;
}

__device__ __forceinline__ int32_t order_key(float f) {
    int32_t b = __float_as_int(f);
    return b ^ ((b >> 31) & 0x7fffffff);
}

__device__ void block_minmax(int32_t mn, int32_t mx, int32_t *smn, int32_t *smx) {
    smn[threadIdx.x] = mn;
    smx[threadIdx.x] = mx;
    __syncthreads();
    for (int s = kMinMaxBlock / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            smn[threadIdx.x] = min(smn[threadIdx.x], smn[threadIdx.x + s]);
            smx[threadIdx.x] = max(smx[threadIdx.x], smx[threadIdx.x + s]);
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(kMinMaxBlock) minmax_kernel(const float *x, int64_t count, int32_t *partials) {
    __shared__ int32_t smn[kMinMaxBlock], smx[kMinMaxBlock];
    int32_t mn = 0, mx = 0;
    CUDA_GRID_STRIDE(i, count) {
        int32_t k = order_key(x[i]);
        mn = min(mn, k);
        mx = max(mx, k);
    }
    block_minmax(mn, mx, smn, smx);
    if (threadIdx.x == 0) {
        partials[2 * blockIdx.x] = smn[0];
        partials[2 * blockIdx.x + 1] = smx[0];
    }
}

// params[0] = scale, params[1] = the rounded zero point, both float32 like the reference.
__global__ void __launch_bounds__(kMinMaxBlock) dq_params_kernel(const int32_t *partials, unsigned blocks,
                                                                 float *params, float *y_scale, uint8_t *y_zp) {
    __shared__ int32_t smn[kMinMaxBlock], smx[kMinMaxBlock];
    int32_t mn = 0, mx = 0;
    for (unsigned k = threadIdx.x; k < blocks; k += kMinMaxBlock) {
        mn = min(mn, partials[2 * k]);
        mx = max(mx, partials[2 * k + 1]);
    }
    block_minmax(mn, mx, smn, smx);
    if (threadIdx.x != 0) return;
    int32_t kmn = smn[0], kmx = smx[0];
    kmx ^= (kmx >> 31) & 0x7fffffff;
    kmn ^= (kmn >> 31) & 0x7fffffff;
    float fmx = __int_as_float(kmx), fmn = __int_as_float(kmn);
    float scale = (fmx == fmn ? 1.0f : fmx - fmn) / 255.0f;
    float zp = 0.0f - fmn / scale;
    zp = zp < 0 ? 0 : zp > 255 ? 255 : zp;
    float zpi = rintf(zp);
    params[0] = scale;
    params[1] = zpi;
    if (y_scale) *y_scale = scale;
    if (y_zp) *y_zp = (uint8_t)zpi;
}

__global__ void dq_apply_kernel(const float *x, uint8_t *y, int64_t count, const float *params) {
    float scale = params[0], zpi = params[1];
    CUDA_GRID_STRIDE(i, count) y[i] = (uint8_t)(int32_t)quant_one(x[i], scale, zpi, 0.0f, 255.0f);
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_misc_quantize(cinfer_dtype x_dtype, const void *x, cinfer_dtype scale_dtype,
                                          const void *scale, const void *zero_point, cinfer_dtype y_dtype, void *y,
                                          const cuda_quant_layout *q, cudaStream_t stream) {
    int64_t count = q->outer * q->len * q->inner;
    if (count <= 0) return cudaSuccess;
    switch (y_dtype) {
    case CINFER_DTYPE_UINT8: return launch_quantize<uint8_t>(x_dtype, x, scale_dtype, scale, zero_point, y, count, q, stream);
    case CINFER_DTYPE_INT8: return launch_quantize<int8_t>(x_dtype, x, scale_dtype, scale, zero_point, y, count, q, stream);
    case CINFER_DTYPE_UINT16:
        return launch_quantize<uint16_t>(x_dtype, x, scale_dtype, scale, zero_point, y, count, q, stream);
    case CINFER_DTYPE_INT16: return launch_quantize<int16_t>(x_dtype, x, scale_dtype, scale, zero_point, y, count, q, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cuda_misc_dequantize(cinfer_dtype x_dtype, const void *x, cinfer_dtype scale_dtype,
                                            const void *scale, const void *zero_point, cinfer_dtype y_dtype, void *y,
                                            const cuda_quant_layout *q, cudaStream_t stream) {
    int64_t count = q->outer * q->len * q->inner;
    if (count <= 0) return cudaSuccess;
    switch (x_dtype) {
    case CINFER_DTYPE_UINT8: return launch_dequantize<uint8_t>(x, scale_dtype, scale, zero_point, y_dtype, y, count, q, stream);
    case CINFER_DTYPE_INT8: return launch_dequantize<int8_t>(x, scale_dtype, scale, zero_point, y_dtype, y, count, q, stream);
    case CINFER_DTYPE_UINT16:
        return launch_dequantize<uint16_t>(x, scale_dtype, scale, zero_point, y_dtype, y, count, q, stream);
    case CINFER_DTYPE_INT16: return launch_dequantize<int16_t>(x, scale_dtype, scale, zero_point, y_dtype, y, count, q, stream);
    case CINFER_DTYPE_INT32: return launch_dequantize<int32_t>(x, scale_dtype, scale, zero_point, y_dtype, y, count, q, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" size_t cuda_misc_dynamic_quantize_scratch(int64_t count) {
    return (2 * (size_t)minmax_grid(count > 0 ? count : 1) + 2) * sizeof(int32_t);
}

extern "C" cudaError_t cuda_misc_dynamic_quantize(const float *x, uint8_t *y, float *y_scale, uint8_t *y_zero_point,
                                                  int64_t count, void *scratch, cudaStream_t stream) {
    unsigned grid = minmax_grid(count > 0 ? count : 1);
    int32_t *partials = (int32_t *)scratch;
    float *params = (float *)(partials + 2 * (size_t)grid);
    // with no elements the range is [0, 0]: the kernels still produce y_scale and y_zero_point
    minmax_kernel<<<grid, kMinMaxBlock, 0, stream>>>(x, count, partials);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    dq_params_kernel<<<1, kMinMaxBlock, 0, stream>>>(partials, grid, params, y_scale, y_zero_point);
    err = cudaGetLastError();
    if (err != cudaSuccess || count <= 0) return err;
    dq_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, count, params);
    return cudaGetLastError();
}
