// Resize kernels: per-axis tap tables (a port of the CPU kernel's coordinate and filter rules), the nearest
// gather over all axes, and the separable linear/cubic pass.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/image.h"

namespace cinfer_cuda {
namespace {

// The coordinate arithmetic uses explicit round-to-nearest multiplies so nvcc cannot contract a*b+c into an FMA:
// nearest-mode ties and window starts must come out exactly as on the CPU reference.

__device__ double resize_source_coord(const cuda_resize_axis &a, int64_t y, bool *outside) {
    double scale = a.scale, yd = (double)y, in = (double)a.in_len;
    double out_w = __dmul_rn(scale, in); // the unrounded output length
    *outside = false;
    switch (a.coord) {
    case CUDA_COORD_ALIGN_CORNERS: return out_w == 1 ? 0.0 : __dmul_rn(yd, in - 1) / (out_w - 1);
    case CUDA_COORD_ASYMMETRIC: return yd / scale;
    case CUDA_COORD_TF_CROP_AND_RESIZE: {
        double r0 = a.roi_start, r1 = a.roi_end;
        double x = out_w == 1 ? __dmul_rn(r1 - r0, in - 1) / 2
                              : __dmul_rn(__dmul_rn(yd, r1 - r0), in - 1) / (out_w - 1);
        x = x + __dmul_rn(r0, in - 1);
        *outside = x < 0 || x > in - 1;
        return x;
    }
    case CUDA_COORD_PYTORCH_HALF_PIXEL: return out_w == 1 ? -0.5 : (yd + 0.5) / scale - 0.5;
    case CUDA_COORD_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)a.out_len / out_w, center = in / 2;
        return __dmul_rn(center, 1 - adjustment) + (yd + 0.5) / scale - 0.5;
    }
    case CUDA_COORD_HALF_PIXEL:
    default: return (yd + 0.5) / scale - 0.5;
    }
}

__device__ double cubic_weight(double x, double A) {
    x = fabs(x);
    if (x <= 1) return __dmul_rn(__dmul_rn(__dmul_rn(A + 2, x) - (A + 3), x), x) + 1;
    if (x < 2) return __dmul_rn(__dmul_rn(__dmul_rn(A, x) - __dmul_rn(5, A), x) + __dmul_rn(8, A), x) - __dmul_rn(4, A);
    return 0;
}

// Unnormalised weight of tap k (of n) for a position `ratio` past the tap just left of it.
__device__ double raw_weight(const cuda_resize_axis &a, double ratio, int n, int k) {
    double A = a.cubic_a;
    if (!a.antialias) {
        if (a.mode == CUDA_RESIZE_LINEAR) return k == 0 ? 1 - ratio : ratio;
        switch (k) {
        case 0: return cubic_weight(ratio + 1, A);
        case 1: return cubic_weight(ratio, A);
        case 2: return cubic_weight(1 - ratio, A);
        default: return cubic_weight(2 - ratio, A);
        }
    }
    // antialias: the filter stretched by 1/s, sampled at the taps (normalised by the caller)
    double s = a.scale < 1 ? a.scale : 1;
    int first = 1 - n / 2;
    double arg = __dmul_rn((double)(first + k) - ratio, s);
    return a.mode == CUDA_RESIZE_LINEAR ? fmax(0.0, fmin(1.0, 1 - fabs(arg))) : cubic_weight(arg, A);
}

__global__ void resize_taps_kernel(cuda_resize_axis a, int64_t *idx, float *coef, unsigned char *extrap) {
    CUDA_GRID_STRIDE(y, a.out_len) {
        bool outside = false;
        double x = resize_source_coord(a, y, &outside);
        // a NaN or huge roi must not turn into out-of-range integer conversions
        if (x != x) {
            x = 0;
            outside = a.coord == CUDA_COORD_TF_CROP_AND_RESIZE;
        }
        x = fmax(-1e12, fmin(1e12, x));
        extrap[y] = outside;
        double fl = floor(x);
        double ratio = x == fl ? 1.0 : x - fl;
        int n = a.taps;
        // the n taps nearest to x, ties to the lower side (the ONNX reference's window rule)
        int pad = (n + 1) / 2;
        double xp = x + pad, pf = floor(xp), frac = xp - pf;
        int64_t off = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1)
                                 : (frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1);
        int64_t start = (int64_t)pf + off - pad;
        int64_t last = a.in_len - 1;
        if (a.mode == CUDA_RESIZE_NEAREST) {
            bool hi;
            if (ratio == 1) hi = true;
            else switch (a.nearest) {
                case CUDA_NEAREST_ROUND_PREFER_CEIL: hi = ratio >= 0.5; break;
                case CUDA_NEAREST_FLOOR: hi = false; break;
                case CUDA_NEAREST_CEIL: hi = true; break;
                case CUDA_NEAREST_SIMPLE: hi = a.scale < 1; break;
                case CUDA_NEAREST_ROUND_PREFER_FLOOR:
                default: hi = ratio > 0.5; break;
                }
            int64_t i = start + (hi ? 1 : 0);
            idx[y] = i < 0 ? 0 : i > last ? last : i;
            continue;
        }
        // the same double arithmetic as the CPU's weight array, recomputed per loop instead of stored
        double sum1 = 0;
        if (a.antialias)
            for (int k = 0; k < n; k++) sum1 += raw_weight(a, ratio, n, k);
        double sum2 = 0;
        if (a.exclude_outside)
            for (int k = 0; k < n; k++) {
                double w = raw_weight(a, ratio, n, k);
                if (a.antialias && sum1 != 0) w /= sum1;
                int64_t i = start + k;
                if (i >= 0 && i <= last) sum2 += w;
            }
        for (int k = 0; k < n; k++) {
            double w = raw_weight(a, ratio, n, k);
            if (a.antialias && sum1 != 0) w /= sum1;
            int64_t i = start + k;
            if (a.exclude_outside) {
                if (i < 0 || i > last) w = 0;
                if (sum2 != 0) w /= sum2;
            }
            idx[y * n + k] = i < 0 ? 0 : i > last ? last : i;
            coef[y * n + k] = (float)w;
        }
    }
}

template <typename T> __global__ void resize_nearest_kernel(const T *x, T *y, int64_t count, cuda_resize_gather g) {
    T fill;
    memcpy(&fill, &g.fill_bits, sizeof(T));
    CUDA_GRID_STRIDE(o, count) {
        int64_t rem = o, base = 0;
        bool outside = false;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t i = rem % g.out_dims[d];
            rem /= g.out_dims[d];
            base += g.idx[d][i] * g.in_stride[d];
            outside |= g.extrap[d][i] != 0;
        }
        y[o] = outside ? fill : x[base];
    }
}

// ---- element conversion between the stored dtype T and the work type W

template <typename T> struct int_range;
template <> struct int_range<int8_t> { static constexpr double lo = -128.0, hi = 127.0; };
template <> struct int_range<uint8_t> { static constexpr double lo = 0.0, hi = 255.0; };
template <> struct int_range<int16_t> { static constexpr double lo = -32768.0, hi = 32767.0; };
template <> struct int_range<uint16_t> { static constexpr double lo = 0.0, hi = 65535.0; };
template <> struct int_range<int32_t> { static constexpr double lo = -2147483648.0, hi = 2147483647.0; };
template <> struct int_range<uint32_t> { static constexpr double lo = 0.0, hi = 4294967295.0; };
template <> struct int_range<int64_t> { static constexpr double lo = -9223372036854775808.0, hi = 9223372036854774784.0; };
template <> struct int_range<uint64_t> { static constexpr double lo = 0.0, hi = 18446744073709549568.0; };

template <typename T, typename W> __device__ __forceinline__ W to_work(T v) { return (W)load<T>(v); }

// Integer outputs round half to even and saturate (NaN gives 0), as the reference's saturate_cast.
template <typename T, typename W> __device__ __forceinline__ T from_work(W v) {
    if constexpr (std::is_integral<T>::value) {
        double d = (double)v;
        if (d != d) return (T)0;
        d = rint(d);
        d = d < int_range<T>::lo ? int_range<T>::lo : d > int_range<T>::hi ? int_range<T>::hi : d;
        return (T)d;
    } else {
        return store<T>(v);
    }
}

template <typename T, typename W>
__global__ void resize_pass_kernel(const void *src, bool src_work, void *dst, bool dst_work, int64_t outer,
                                   int64_t in_len, int64_t out_len, int64_t inner, int n, const int64_t *idx,
                                   const float *coef, const unsigned char *extrap, W fill) {
    int64_t total = outer * out_len * inner;
    CUDA_GRID_STRIDE(q, total) {
        int64_t i = q % inner, t = q / inner;
        int64_t x = t % out_len, o = t / out_len;
        W acc = fill;
        if (!extrap[x]) {
            acc = 0;
            const int64_t *ix = idx + x * n;
            const float *c = coef + x * n;
            int64_t row = o * in_len;
            for (int k = 0; k < n; k++) {
                float ck = c[k];
                if (ck == 0) continue; // as the CPU's row loop: a zero weight never reads its tap
                int64_t s = (row + ix[k]) * inner + i;
                W v = src_work ? ((const W *)src)[s] : to_work<T, W>(((const T *)src)[s]);
                acc += (W)ck * v;
            }
        }
        if (dst_work) ((W *)dst)[q] = acc;
        else ((T *)dst)[q] = from_work<T, W>(acc);
    }
}

template <typename T>
cudaError_t launch_pass(const void *src, bool src_work, void *dst, bool dst_work, int64_t outer, int64_t in_len,
                        int64_t out_len, int64_t inner, int n, const int64_t *idx, const float *coef,
                        const unsigned char *extrap, double fill, bool dbl, cudaStream_t stream) {
    int64_t total = outer * out_len * inner;
    if (dbl)
        resize_pass_kernel<T, double><<<grid_for(total), kBlock, 0, stream>>>(
            src, src_work, dst, dst_work, outer, in_len, out_len, inner, n, idx, coef, extrap, fill);
    else
        resize_pass_kernel<T, float><<<grid_for(total), kBlock, 0, stream>>>(
            src, src_work, dst, dst_work, outer, in_len, out_len, inner, n, idx, coef, extrap, (float)fill);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_nearest(const void *x, void *y, int64_t count, const cuda_resize_gather *g, cudaStream_t stream) {
    resize_nearest_kernel<T><<<grid_for(count), kBlock, 0, stream>>>((const T *)x, (T *)y, count, *g);
    return cudaGetLastError();
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_image_resize_taps(const cuda_resize_axis *axis, int64_t *idx, float *coef,
                                              unsigned char *extrap, cudaStream_t stream) {
    if (axis->out_len <= 0) return cudaSuccess;
    resize_taps_kernel<<<grid_for(axis->out_len), kBlock, 0, stream>>>(*axis, idx, coef, extrap);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_image_resize_nearest(size_t elem_size, const void *x, void *y, int64_t count,
                                                 const cuda_resize_gather *g, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    CUDA_DISPATCH_BY_SIZE(elem_size, T, return launch_nearest<T>(x, y, count, g, stream),
                          return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_image_resize_pass(cinfer_dtype dtype, const void *src, bool src_work, void *dst,
                                              bool dst_work, int64_t outer, int64_t in_len, int64_t out_len,
                                              int64_t inner, int taps, const int64_t *idx, const float *coef,
                                              const unsigned char *extrap, double fill, cudaStream_t stream) {
    if (outer * out_len * inner <= 0) return cudaSuccess;
    bool dbl = cuda_resize_work_double(dtype);
    CUDA_DISPATCH_NUMERIC(dtype, T,
                          return launch_pass<T>(src, src_work, dst, dst_work, outer, in_len, out_len, inner, taps, idx,
                                                coef, extrap, fill, dbl, stream),
                          return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}
