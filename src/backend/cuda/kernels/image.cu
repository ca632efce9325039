// Image kernels other than Resize: GridSample, AffineGrid, CenterCropPad, Col2Im (ports of the CPU kernels; one
// thread per output element).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/image.h"

namespace cinfer_cuda {
namespace {

// A double result stored the way the CPU's cpu_store_f64 does: half types round through float.
template <typename T> __device__ __forceinline__ T store_f64(double v) {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) return store<T>((float)v);
    else return (T)v;
}

// Element i of a float-typed array whose dtype is only known at run time, as double.
__device__ __forceinline__ double load_float_any(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return ((const float *)p)[i];
    case CINFER_DTYPE_DOUBLE: return ((const double *)p)[i];
    case CINFER_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case CINFER_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return 0;
    }
}

// ---------------------------------------------------------------- GridSample
// Coordinates use explicit round-to-nearest arithmetic (no FMA contraction) so taps and nearest choices agree
// with the CPU reference bit for bit.

// Folds x back into [lo, hi] by mirroring at the borders (as PyTorch's grid sampler).
__device__ double gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        double dx = lo - x;
        double k = floor(dx / range), rem = dx - __dmul_rn(k, range);
        return fmod(k, 2) == 0 ? lo + rem : hi - rem;
    }
    if (x > hi) {
        double dx = x - hi;
        double k = floor(dx / range), rem = dx - __dmul_rn(k, range);
        return fmod(k, 2) == 0 ? hi - rem : lo + rem;
    }
    return x;
}

// Index i of a dim of length len under the padding mode; false when it reads padding (zeros).
__device__ bool gs_index(int64_t i, int64_t len, int pad, double lo, double hi, int64_t *out) {
    if (pad == CUDA_GS_ZEROS) {
        *out = i;
        return i >= 0 && i < len;
    }
    if (pad == CUDA_GS_REFLECTION) i = (int64_t)gs_reflect((double)i, lo, hi);
    *out = i < 0 ? 0 : i >= len ? len - 1 : i;
    return true;
}

__device__ void gs_cubic_coeffs(float t, float c[4]) {
    const float A = -0.75f;
    float x = t + 1;
    c[0] = __fmul_rn(__fmul_rn(__fmul_rn(A, x) - 5 * A, x) + 8 * A, x) - 4 * A;
    x = t;
    c[1] = __fmul_rn(__fmul_rn(__fmul_rn(A + 2, x) - (A + 3), x), x) + 1;
    x = 1 - t;
    c[2] = __fmul_rn(__fmul_rn(__fmul_rn(A + 2, x) - (A + 3), x), x) + 1;
    x = 2 - t;
    c[3] = __fmul_rn(__fmul_rn(__fmul_rn(A, x) - 5 * A, x) + 8 * A, x) - 4 * A;
}

template <typename T>
__global__ void grid_sample_kernel(const T *x, cinfer_dtype gt, const void *grid, T *y, cuda_grid_sample_args a) {
    const int taps = a.mode == CUDA_GS_NEAREST ? 1 : a.mode == CUDA_GS_LINEAR ? 2 : 4;
    const int r = a.r;
    int64_t total = a.N * a.C * a.P;
    CUDA_GRID_STRIDE(o, total) {
        int64_t pt = o % a.P, bc = o / a.P, b = bc / a.C;
        int64_t idx[3][4];
        float w[3][4];
        bool ok[3][4];
        for (int d = 0; d < r; d++) {
            int64_t len = a.len[d];
            // the grid's last axis lists coordinates innermost dim first (x, y, z)
            float g = (float)load_float_any(grid, gt, (b * a.P + pt) * r + (r - 1 - d));
            float c = a.align ? __fmul_rn((g + 1) / 2.0f, (float)(len - 1))
                              : (__fmul_rn(g + 1, (float)len) - 1) / 2.0f;
            double lo = a.align ? 0.0 : -0.5, hi = a.align ? (double)len - 1 : (double)len - 0.5;
            if (a.mode == CUDA_GS_NEAREST) c = rintf(c);
            if (c < lo || c > hi) {
                if (a.pad == CUDA_GS_BORDER) c = c < 0 ? 0.0f : c > (float)(len - 1) ? (float)(len - 1) : c;
                else if (a.pad == CUDA_GS_REFLECTION) c = (float)gs_reflect(c, lo, hi);
            }
            if (!isfinite(c)) c = -2; // NaN or inf coordinates read padding, never memory
            if (a.mode == CUDA_GS_NEAREST) {
                double cc = fmax(fmin((double)c, 1e15), -1e15);
                ok[d][0] = gs_index((int64_t)cc, len, a.pad, lo, hi, &idx[d][0]);
                w[d][0] = 1;
                continue;
            }
            float f = floorf(c);
            int64_t i0 = (int64_t)fmax(fmin((double)f, 1e15), -1e15);
            float t = c - f;
            if (a.mode == CUDA_GS_LINEAR) {
                w[d][0] = 1 - t;
                w[d][1] = t;
                for (int k = 0; k < 2; k++) ok[d][k] = gs_index(i0 + k, len, a.pad, lo, hi, &idx[d][k]);
            } else {
                gs_cubic_coeffs(t, w[d]);
                for (int k = 0; k < 4; k++) ok[d][k] = gs_index(i0 - 1 + k, len, a.pad, lo, hi, &idx[d][k]);
            }
        }
        int combos = 1;
        for (int d = 0; d < r; d++) combos *= taps;
        const T *xs = x + bc * a.plane;
        // float32 accumulates in float, the other types in double (as the CPU kernel)
        using A = typename std::conditional<std::is_same<T, float>::value, float, double>::type;
        A acc = 0;
        for (int k = 0; k < combos; k++) {
            int rem = k;
            int64_t off = 0;
            float wt = 1;
            bool valid = true;
            for (int d = r - 1; d >= 0; d--) {
                int t = rem % taps;
                rem /= taps;
                valid &= ok[d][t];
                off += idx[d][t] * a.stride[d];
                wt *= w[d][t];
            }
            if (!valid || wt == 0) continue;
            acc += (A)wt * (A)load<T>(xs[off]);
        }
        y[o] = store_f64<T>((double)acc);
    }
}

template <typename T>
cudaError_t launch_grid_sample(const void *x, cinfer_dtype gt, const void *grid, void *y,
                               const cuda_grid_sample_args *a, cudaStream_t stream) {
    int64_t total = a->N * a->C * a->P;
    grid_sample_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, gt, grid, (T *)y, *a);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- AffineGrid

struct affine_dims {
    int64_t len[3];
};

// Normalised coordinate of pixel i of len along one axis, in [-1, 1].
__device__ double base_coord(int64_t i, int64_t len, bool align) {
    if (align) return len == 1 ? -1.0 : -1.0 + __dmul_rn((double)i, 2.0 / (double)(len - 1));
    double step = 2.0 / (double)len;
    return -1.0 + step / 2 + __dmul_rn((double)i, step);
}

template <typename T>
__global__ void affine_grid_kernel(const T *theta, T *y, int64_t N, int r, affine_dims dims, bool align) {
    int64_t P = 1;
    for (int d = 0; d < r; d++) P *= dims.len[d];
    int64_t total = N * P * r;
    CUDA_GRID_STRIDE(q, total) {
        int row = (int)(q % r);
        int64_t job = q / r, b = job / P, rem = job % P;
        double base[4];
        // base[0] follows the innermost dim (x = w), then h, then d; the last one is homogeneous
        for (int d = r - 1; d >= 0; d--) {
            int64_t len = dims.len[d];
            base[r - 1 - d] = base_coord(rem % len, len, align);
            rem /= len;
        }
        base[r] = 1.0;
        const T *t = theta + (b * r + row) * (r + 1);
        double acc = 0;
        for (int k = 0; k <= r; k++) acc += (double)load<T>(t[k]) * base[k];
        y[q] = store_f64<T>(acc);
    }
}

template <typename T>
cudaError_t launch_affine_grid(const void *theta, void *y, int64_t N, int r, const affine_dims &dims, bool align,
                               cudaStream_t stream) {
    int64_t P = 1;
    for (int d = 0; d < r; d++) P *= dims.len[d];
    int64_t total = N * P * r;
    affine_grid_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)theta, (T *)y, N, r, dims, align);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- CenterCropPad

template <typename T> __global__ void crop_pad_kernel(const T *x, T *y, int64_t count, cuda_crop_pad_args a) {
    CUDA_GRID_STRIDE(o, count) {
        int64_t rem = o, src = 0;
        bool inside = true;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t i = rem % a.out_dims[d] - a.out_off[d];
            rem /= a.out_dims[d];
            inside &= i >= 0 && i < a.len[d];
            src += (i + a.in_off[d]) * a.in_stride[d];
        }
        y[o] = inside ? x[src] : (T)0;
    }
}

template <typename T>
cudaError_t launch_crop_pad(const void *x, void *y, int64_t count, const cuda_crop_pad_args *a, cudaStream_t stream) {
    crop_pad_kernel<T><<<grid_for(count), kBlock, 0, stream>>>((const T *)x, (T *)y, count, *a);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- Col2Im
// A gather: each image element sums, kernel offset by kernel offset (the CPU's order), the one column entry that
// lands on it.

template <typename T> __global__ void col2im_kernel(const T *x, T *y, cuda_col2im_args a) {
    int64_t total = a.NC * a.plane;
    CUDA_GRID_STRIDE(q, total) {
        int64_t nc = q / a.plane, p = q % a.plane;
        int64_t pos[CINFER_MAX_DIMS];
        for (int d = a.r - 1; d >= 0; d--) {
            pos[d] = p % a.img[d];
            p /= a.img[d];
        }
        double acc = 0;
        for (int64_t kk = 0; kk < a.block; kk++) {
            int64_t koff[CINFER_MAX_DIMS], rem = kk;
            for (int d = a.r - 1; d >= 0; d--) {
                koff[d] = rem % a.blk[d];
                rem /= a.blk[d];
            }
            int64_t bi = 0;
            bool hit = true;
            for (int d = 0; d < a.r && hit; d++) {
                int64_t v = pos[d] + a.pad[d] - koff[d] * a.dil[d];
                if (v < 0 || v % a.str[d] != 0 || v / a.str[d] >= a.nb[d]) hit = false;
                else bi = bi * a.nb[d] + v / a.str[d];
            }
            if (hit) acc += (double)load<T>(x[(nc * a.block + kk) * a.blocks + bi]);
        }
        y[q] = store_f64<T>(acc);
    }
}

template <typename T>
cudaError_t launch_col2im(const void *x, void *y, const cuda_col2im_args *a, cudaStream_t stream) {
    col2im_kernel<T><<<grid_for(a->NC * a->plane), kBlock, 0, stream>>>((const T *)x, (T *)y, *a);
    return cudaGetLastError();
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_image_grid_sample(cinfer_dtype x_dtype, const void *x, cinfer_dtype grid_dtype,
                                              const void *grid, void *y, const cuda_grid_sample_args *a,
                                              cudaStream_t stream) {
    if (a->N * a->C * a->P <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(x_dtype, T, return launch_grid_sample<T>(x, grid_dtype, grid, y, a, stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_image_affine_grid(cinfer_dtype dtype, const void *theta, void *y, int64_t N, int r,
                                              const int64_t *dims, bool align, cudaStream_t stream) {
    if (r < 1 || r > 3) return cudaErrorInvalidValue;
    affine_dims ad = {{1, 1, 1}};
    int64_t total = N * r;
    for (int d = 0; d < r; d++) {
        ad.len[d] = dims[d];
        total *= dims[d];
    }
    if (total <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_affine_grid<T>(theta, y, N, r, ad, align, stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_image_center_crop_pad(size_t elem_size, const void *x, void *y, int64_t count,
                                                  const cuda_crop_pad_args *a, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    CUDA_DISPATCH_BY_SIZE(elem_size, T, return launch_crop_pad<T>(x, y, count, a, stream),
                          return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_image_col2im(cinfer_dtype dtype, const void *x, void *y, const cuda_col2im_args *a,
                                         cudaStream_t stream) {
    if (a->NC * a->plane <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_col2im<T>(x, y, a, stream), return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}
