// Signal kernels other than DFT/STFT: windows, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool, Det (ports of
// the CPU kernels; explicit round-to-nearest multiplies where the CPU's exact geometry matters, so nvcc cannot
// contract them into FMAs).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/signal.h"

namespace cinfer_cuda {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kLn10 = 2.302585092994045684017991454684364208;

// A double result stored the way the CPU's cpu_store_f64 does: half types round through float.
template <typename T> __device__ __forceinline__ T store_f64(double v) {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) return store<T>((float)v);
    else return (T)v;
}

// Element i of an array whose dtype is only known at run time, as double (integers and float types).
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

__device__ __forceinline__ int64_t load_int_any(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_INT64: return ((const int64_t *)p)[i];
    case CINFER_DTYPE_INT32: return ((const int32_t *)p)[i];
    case CINFER_DTYPE_INT16: return ((const int16_t *)p)[i];
    case CINFER_DTYPE_INT8: return ((const int8_t *)p)[i];
    case CINFER_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case CINFER_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case CINFER_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case CINFER_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    default: return (int64_t)load_any(p, t, i);
    }
}

// ---------------------------------------------------------------- windows

template <typename T>
__global__ void window_kernel(T *y, int64_t size, double denom, double a0, double a1, double a2) {
    CUDA_GRID_STRIDE(i, size) {
        double v = 1.0; // a symmetric window of one point would divide by zero: it is 1, as in PyTorch
        if (denom > 0) {
            double t = __dmul_rn(kTwoPi, (double)i) / denom;
            v = a0 - __dmul_rn(a1, cos(t)) + __dmul_rn(a2, cos(2 * t));
        }
        y[i] = store_f64<T>(v);
    }
}

template <typename T>
cudaError_t launch_window(void *y, int64_t size, double denom, double a0, double a1, double a2, cudaStream_t s) {
    window_kernel<T><<<grid_for(size), kBlock, 0, s>>>((T *)y, size, denom, a0, a1, a2);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- MelWeightMatrix

// Bin of mel edge k (the CPU's edge[k]).
__device__ int64_t mel_edge(int64_t k, double step, double lo_mel, int64_t len, int64_t rate) {
    double hz = 700.0 * expm1((__dmul_rn((double)k, step) + lo_mel) / 2595.0 * kLn10);
    return (int64_t)floor((double)(len + 1) * hz / (double)rate);
}

template <typename T>
__global__ void mel_kernel(T *y, int64_t bins, int64_t nspec, int64_t len, cinfer_dtype rt, const void *rate_p,
                           cinfer_dtype lt, const void *lo_p, cinfer_dtype ht, const void *hi_p) {
    int64_t rate = load_int_any(rate_p, rt, 0);
    double lo = load_any(lo_p, lt, 0), hi = load_any(hi_p, ht, 0);
    double lo_mel = 2595.0 * log1p(lo / 700.0) / kLn10, hi_mel = 2595.0 * log1p(hi / 700.0) / kLn10;
    double step = (hi_mel - lo_mel) / (double)(bins + 2);
    CUDA_GRID_STRIDE(o, nspec * bins) {
        if (rate <= 0) {
            y[o] = store_f64<T>(NAN);
            continue;
        }
        int64_t j = o / bins, i = o % bins;
        int64_t l = mel_edge(i, step, lo_mel, len, rate), c = mel_edge(i + 1, step, lo_mel, len, rate),
                h = mel_edge(i + 2, step, lo_mel, len, rate);
        // the CPU writes the rising edge [l, c], then the falling one [c, h) over it
        double v = 0;
        if (c == l) {
            if (j == c) v = 1.0;
        } else if (j >= l && j <= c) {
            v = (double)(j - l) / (double)(c - l);
        }
        if (j >= c && j < h) v = (double)(h - j) / (double)(h - c);
        y[o] = store_f64<T>(v);
    }
}

template <typename T>
cudaError_t launch_mel(void *y, int64_t bins, int64_t nspec, int64_t len, cinfer_dtype rt, const void *rate,
                       cinfer_dtype lt, const void *lo, cinfer_dtype ht, const void *hi, cudaStream_t s) {
    mel_kernel<T><<<grid_for(nspec * bins), kBlock, 0, s>>>((T *)y, bins, nspec, len, rt, rate, lt, lo, ht, hi);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- RoiAlign

// Rounds v to float when the geometry runs in float32 (the CPU's fr): the grid sizes come from ceil() and the
// taps from truncation, so they must follow the input precision to agree on boundary cases.
__device__ __forceinline__ double fr(double v, bool f32) { return f32 ? (double)(float)v : v; }

template <typename T>
__global__ void roi_align_kernel(const T *x, cinfer_dtype rt, const void *rois, cinfer_dtype it, const void *bidx,
                                 T *y, cuda_roi_args a) {
    const bool f32 = !std::is_same<T, double>::value;
    const int64_t H = a.H, W = a.W, PH = a.PH, PW = a.PW;
    int64_t total = a.R * a.C * PH * PW;
    CUDA_GRID_STRIDE(o, total) {
        int64_t pw = o % PW, ph = (o / PW) % PH, rc = o / (PW * PH);
        int64_t r = rc / a.C, c = rc % a.C;
        int64_t b = load_int_any(bidx, it, r);
        double roi[4];
        if (b < 0 || b >= a.N) cuda_report_bad_index(a.check); // the CPU refuses it
        bool bad = b < 0 || b >= a.N || H <= 0 || W <= 0;
        for (int k = 0; k < 4; k++) {
            roi[k] = load_any(rois, rt, r * 4 + k);
            bad |= !isfinite(roi[k]);
        }
        if (bad) { // the CPU reports an error
            y[o] = store_f64<T>(NAN);
            continue;
        }
        double off = a.half_pixel ? 0.5 : 0.0;
        double x0 = fr(fr(__dmul_rn(roi[0], a.spatial_scale), f32) - off, f32);
        double y0 = fr(fr(__dmul_rn(roi[1], a.spatial_scale), f32) - off, f32);
        double x1 = fr(fr(__dmul_rn(roi[2], a.spatial_scale), f32) - off, f32);
        double y1 = fr(fr(__dmul_rn(roi[3], a.spatial_scale), f32) - off, f32);
        double rw = fr(x1 - x0, f32), rh = fr(y1 - y0, f32);
        if (!a.half_pixel) {
            rw = fmax(rw, 1.0);
            rh = fmax(rh, 1.0);
        }
        double bh = fr(rh / (double)PH, f32), bw = fr(rw / (double)PW, f32);
        int64_t gh = a.sampling_ratio > 0 ? a.sampling_ratio : (int64_t)ceil(bh);
        int64_t gw = a.sampling_ratio > 0 ? a.sampling_ratio : (int64_t)ceil(bw);
        double count = (double)(gh * gw > 1 ? gh * gw : 1);
        const T *plane = x + (b * a.C + c) * H * W;
        double acc = 0.0;
        bool first = true;
        for (int64_t iy = 0; iy < gh; iy++) {
            double yy = fr(fr(y0 + fr(__dmul_rn((double)ph, bh), f32), f32) +
                               fr(fr(__dmul_rn((double)iy + 0.5, bh), f32) / (double)gh, f32), f32);
            for (int64_t ix = 0; ix < gw; ix++) {
                double xx = fr(fr(x0 + fr(__dmul_rn((double)pw, bw), f32), f32) +
                                   fr(fr(__dmul_rn((double)ix + 0.5, bw), f32) / (double)gw, f32), f32);
                double v = 0.0;
                if (H > 0 && W > 0 && !(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)) { /* empty X: no taps */
                    double sy = fmax(yy, 0.0), sx = fmax(xx, 0.0);
                    int64_t ylo = (int64_t)sy, xlo = (int64_t)sx, yhi, xhi;
                    if (ylo >= H - 1) {
                        yhi = ylo = H - 1;
                        sy = (double)ylo;
                    } else {
                        yhi = ylo + 1;
                    }
                    if (xlo >= W - 1) {
                        xhi = xlo = W - 1;
                        sx = (double)xlo;
                    } else {
                        xhi = xlo + 1;
                    }
                    double ly = fr(sy - (double)ylo, f32), lx = fr(sx - (double)xlo, f32);
                    double hy = fr(1.0 - ly, f32), hx = fr(1.0 - lx, f32);
                    double v1 = __dmul_rn(__dmul_rn(hy, hx), (double)load<T>(plane[ylo * W + xlo]));
                    double v2 = __dmul_rn(__dmul_rn(hy, lx), (double)load<T>(plane[ylo * W + xhi]));
                    double v3 = __dmul_rn(__dmul_rn(ly, hx), (double)load<T>(plane[yhi * W + xlo]));
                    double v4 = __dmul_rn(__dmul_rn(ly, lx), (double)load<T>(plane[yhi * W + xhi]));
                    // max mode takes the largest weighted corner, as the ONNX reference does
                    v = a.max_mode ? fmax(fmax(v1, v2), fmax(v3, v4)) : v1 + v2 + v3 + v4;
                }
                if (a.max_mode) acc = first ? v : fmax(acc, v);
                else acc += v;
                first = false;
            }
        }
        if (!a.max_mode) acc /= count;
        y[o] = store_f64<T>(acc);
    }
}

template <typename T>
cudaError_t launch_roi_align(const void *x, cinfer_dtype rt, const void *rois, cinfer_dtype it, const void *bidx,
                             void *y, const cuda_roi_args *a, cudaStream_t s) {
    roi_align_kernel<T><<<grid_for(a->R * a->C * a->PH * a->PW), kBlock, 0, s>>>((const T *)x, rt, rois, it, bidx,
                                                                                 (T *)y, *a);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- MaxRoiPool

template <typename T>
__global__ void max_roi_pool_kernel(const T *x, cinfer_dtype rt, const void *rois, T *y, cuda_roi_args a) {
    const int64_t H = a.H, W = a.W, PH = a.PH, PW = a.PW;
    int64_t total = a.R * a.C * PH * PW;
    CUDA_GRID_STRIDE(o, total) {
        int64_t pw = o % PW, ph = (o / PW) % PH, rc = o / (PW * PH);
        int64_t r = rc / a.C, c = rc % a.C;
        double bv = load_any(rois, rt, r * 5);
        bool bad = !(bv >= 0 && bv < (double)a.N);
        if (bad) cuda_report_bad_index(a.check); // the CPU refuses it
        double v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = load_any(rois, rt, r * 5 + 1 + k) * a.spatial_scale;
            bad |= !(fabs(v[k]) < 1e15);
        }
        if (bad) { // the CPU reports an error
            y[o] = store_f64<T>(NAN);
            continue;
        }
        int64_t b = (int64_t)bv;
        int64_t xs = (int64_t)round(v[0]), ys = (int64_t)round(v[1]);
        int64_t xe = (int64_t)round(v[2]), ye = (int64_t)round(v[3]);
        int64_t rh = ye - ys + 1 > 1 ? ye - ys + 1 : 1, rw = xe - xs + 1 > 1 ? xe - xs + 1 : 1;
        double bh = (double)rh / (double)PH, bw = (double)rw / (double)PW;
        int64_t h0 = (int64_t)floor((double)ph * bh) + ys, h1 = (int64_t)ceil((double)(ph + 1) * bh) + ys;
        int64_t w0 = (int64_t)floor((double)pw * bw) + xs, w1 = (int64_t)ceil((double)(pw + 1) * bw) + xs;
        h0 = h0 < 0 ? 0 : h0 > H ? H : h0;
        h1 = h1 < 0 ? 0 : h1 > H ? H : h1;
        w0 = w0 < 0 ? 0 : w0 > W ? W : w0;
        w1 = w1 < 0 ? 0 : w1 > W ? W : w1;
        double m = 0.0; // an empty bin outputs 0
        if (h1 > h0 && w1 > w0) {
            m = -INFINITY;
            const T *plane = x + (b * a.C + c) * H * W;
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) m = fmax(m, (double)load<T>(plane[h * W + w]));
        }
        y[o] = store_f64<T>(m);
    }
}

template <typename T>
cudaError_t launch_max_roi_pool(const void *x, cinfer_dtype rt, const void *rois, void *y, const cuda_roi_args *a,
                                cudaStream_t s) {
    max_roi_pool_kernel<T><<<grid_for(a->R * a->C * a->PH * a->PW), kBlock, 0, s>>>((const T *)x, rt, rois, (T *)y,
                                                                                    *a);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- ROI batch indices alone

// For rois whose output is empty (no channels or bins), which compute nothing but whose batch indices the CPU still
// checks: one out of range is reported. bidx NULL: MaxRoiPool's, column 0 of each roi.
__global__ void roi_batch_check_kernel(cinfer_dtype rt, const void *rois, cinfer_dtype it, const void *bidx,
                                       cuda_roi_args a) {
    CUDA_GRID_STRIDE(r, a.R) {
        bool ok;
        if (bidx) {
            int64_t b = load_int_any(bidx, it, r);
            ok = b >= 0 && b < a.N;
        } else {
            double bv = load_any(rois, rt, r * 5);
            ok = bv >= 0 && bv < (double)a.N;
        }
        if (!ok) cuda_report_bad_index(a.check);
    }
}

cudaError_t launch_roi_batch_check(cinfer_dtype rt, const void *rois, cinfer_dtype it, const void *bidx,
                                   const cuda_roi_args *a, cudaStream_t s) {
    if (a->R <= 0 || !a->check.flag) return cudaSuccess;
    roi_batch_check_kernel<<<grid_for(a->R), kBlock, 0, s>>>(rt, rois, it, bidx, *a);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- MaxUnpool

// Flat position in y of element e (its index re-expressed in y's dims), or -1 when the index is out of range.
__device__ __forceinline__ int64_t unpool_target(const cuda_unpool_args &a, cinfer_dtype it, const void *ind,
                                                 int64_t e) {
    int64_t idx = load_int_any(ind, it, e);
    if (idx < 0 || idx >= a.total) return -1;
    int64_t o = 0, rest = idx, mul = 1;
    for (int d = a.ndim - 1; d >= 0; d--) {
        o += (rest % a.dims[d]) * mul;
        rest /= a.dims[d];
        mul *= a.y_dims[d];
    }
    return o < a.y_count ? o : -1;
}

__global__ void unpool_claim_kernel(cinfer_dtype it, const void *ind, long long *winner, cuda_unpool_args a) {
    CUDA_GRID_STRIDE(e, a.x_count) {
        int64_t o = unpool_target(a, it, ind, e);
        if (o >= 0) atomicMax(&winner[o], (long long)e); // the largest e is the one the CPU writes last
    }
}

template <typename T>
__global__ void unpool_write_kernel(const T *x, cinfer_dtype it, const void *ind, T *y, const long long *winner,
                                    cuda_unpool_args a) {
    CUDA_GRID_STRIDE(e, a.x_count) {
        int64_t o = unpool_target(a, it, ind, e);
        if (o >= 0 && winner[o] == (long long)e) y[o] = x[e];
    }
}

template <typename T>
cudaError_t launch_unpool_write(const void *x, cinfer_dtype it, const void *ind, void *y, const long long *winner,
                                const cuda_unpool_args *a, cudaStream_t s) {
    unpool_write_kernel<T><<<grid_for(a->x_count), kBlock, 0, s>>>((const T *)x, it, ind, (T *)y, winner, *a);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- Det
// One block per matrix: thread 0 picks the pivot (the CPU's first-largest rule) and keeps the determinant; the
// threads swap rows and eliminate together.

constexpr int kDetBlock = 128;

template <typename T>
__global__ void __launch_bounds__(kDetBlock) det_kernel(const T *x, T *y, int64_t batch, int64_t m, double *work) {
    __shared__ double s_det;
    __shared__ int64_t s_pivot;
    __shared__ bool s_stop;
    const int tid = threadIdx.x;
    for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
        double *a = work + b * m * m;
        for (int64_t i = tid; i < m * m; i += blockDim.x) a[i] = (double)load<T>(x[b * m * m + i]);
        if (tid == 0) {
            s_det = 1.0;
            s_stop = false;
        }
        __syncthreads();
        for (int64_t c = 0; c < m; c++) {
            if (tid == 0) {
                if (s_det == 0.0) {
                    s_stop = true;
                } else {
                    int64_t p = c;
                    for (int64_t i = c + 1; i < m; i++)
                        if (fabs(a[i * m + c]) > fabs(a[p * m + c])) p = i;
                    if (a[p * m + c] == 0.0) {
                        s_det = 0.0;
                        s_stop = true;
                    } else {
                        s_pivot = p;
                        if (p != c) s_det = -s_det;
                    }
                }
            }
            __syncthreads();
            if (s_stop) break;
            int64_t p = s_pivot;
            if (p != c)
                for (int64_t j = tid; j < m; j += blockDim.x) {
                    double t = a[c * m + j];
                    a[c * m + j] = a[p * m + j];
                    a[p * m + j] = t;
                }
            __syncthreads();
            double piv = a[c * m + c];
            if (tid == 0) s_det *= piv;
            int64_t n = m - c - 1;
            for (int64_t q = tid; q < n * n; q += blockDim.x) {
                int64_t i = c + 1 + q / n, j = c + 1 + q % n;
                double f = a[i * m + c] / piv;
                a[i * m + j] = a[i * m + j] - __dmul_rn(f, a[c * m + j]);
            }
            __syncthreads();
        }
        if (tid == 0) y[b] = store_f64<T>(s_det);
        __syncthreads(); // s_det and s_stop are reset for the next matrix
    }
}

template <typename T>
cudaError_t launch_det(const void *x, void *y, int64_t batch, int64_t m, double *work, cudaStream_t s) {
    unsigned grid = batch < 65535LL * 8 ? (unsigned)batch : 65535u * 8;
    det_kernel<T><<<grid, kDetBlock, 0, s>>>((const T *)x, (T *)y, batch, m, work);
    return cudaGetLastError();
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_signal_window(cinfer_dtype dtype, void *y, int64_t size, double denom, double a0,
                                          double a1, double a2, cudaStream_t stream) {
    if (size <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_window<T>(y, size, denom, a0, a1, a2, stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_signal_mel(cinfer_dtype dtype, void *y, int64_t bins, int64_t nspec, int64_t dft_length,
                                       cinfer_dtype rate_dtype, const void *rate, cinfer_dtype lo_dtype,
                                       const void *lo, cinfer_dtype hi_dtype, const void *hi, cudaStream_t stream) {
    if (bins * nspec <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T,
                         return launch_mel<T>(y, bins, nspec, dft_length, rate_dtype, rate, lo_dtype, lo, hi_dtype, hi,
                                              stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_signal_roi_align(cinfer_dtype dtype, const void *x, cinfer_dtype rois_dtype,
                                             const void *rois, cinfer_dtype index_dtype, const void *batch_indices,
                                             void *y, const cuda_roi_args *a, cudaStream_t stream) {
    if (a->R * a->C * a->PH * a->PW <= 0)
        return launch_roi_batch_check(rois_dtype, rois, index_dtype, batch_indices, a, stream);
    CUDA_DISPATCH_FLOATS(dtype, T,
                         return launch_roi_align<T>(x, rois_dtype, rois, index_dtype, batch_indices, y, a, stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_signal_max_roi_pool(cinfer_dtype dtype, const void *x, cinfer_dtype rois_dtype,
                                                const void *rois, void *y, const cuda_roi_args *a,
                                                cudaStream_t stream) {
    if (a->R * a->C * a->PH * a->PW <= 0)
        return launch_roi_batch_check(rois_dtype, rois, CINFER_DTYPE_UNDEFINED, NULL, a, stream);
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_max_roi_pool<T>(x, rois_dtype, rois, y, a, stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_signal_max_unpool(size_t elem_size, const void *x, cinfer_dtype index_dtype,
                                              const void *indices, void *y, long long *winner,
                                              const cuda_unpool_args *a, cudaStream_t stream) {
    if (a->y_count <= 0) return cudaSuccess;
    cudaError_t err = cudaMemsetAsync(y, 0, (size_t)a->y_count * elem_size, stream);
    if (err != cudaSuccess) return err;
    if (a->x_count <= 0) return cudaSuccess;
    err = cudaMemsetAsync(winner, 0xff, (size_t)a->y_count * sizeof(long long), stream); // -1: no claim
    if (err != cudaSuccess) return err;
    unpool_claim_kernel<<<grid_for(a->x_count), kBlock, 0, stream>>>(index_dtype, indices, winner, *a);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    CUDA_DISPATCH_BY_SIZE(elem_size, T, return launch_unpool_write<T>(x, index_dtype, indices, y, winner, a, stream),
                          return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_signal_det(cinfer_dtype dtype, const void *x, void *y, int64_t batch, int64_t m,
                                       double *work, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_det<T>(x, y, batch, m, work, stream), return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}
