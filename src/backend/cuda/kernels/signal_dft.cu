// DFT and STFT kernels: a direct O(len) sum per output bin in double (cuFFT is not linked), with the CPU kernel's
// conventions (zero padding or truncation to dft_length, one-sided output, Hermitian completion for a one-sided
// inverse, 1/len scaling of the inverse).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/signal.h"

namespace cinfer_cuda {
namespace {

template <typename T> __device__ __forceinline__ T store_f64(double v) {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) return store<T>((float)v);
    else return (T)v;
}

// cos and -sin of 2 pi idx / len: the forward twiddle (idx in [0, len)).
__device__ __forceinline__ void twiddle(int64_t idx, int64_t len, double *wr, double *wi) {
    double s, c;
    sincospi(2.0 * (double)idx / (double)len, &s, &c);
    *wr = c;
    *wi = -s;
}

template <typename T> __global__ void dft_kernel(const T *x, T *y, cuda_dft_args a) {
    const int64_t len = a.len, inner = a.inner;
    const double sg = a.inverse ? -1.0 : 1.0, scale = a.inverse ? 1.0 / (double)len : 1.0;
    int64_t total = a.outer * a.n_out * inner;
    CUDA_GRID_STRIDE(q, total) {
        int64_t i = q % inner, k = (q / inner) % a.n_out, o = q / (inner * a.n_out);
        const T *xs = x + (o * a.n_in * inner + i) * a.cin;
        const int64_t is = inner * a.cin;
        // beyond `take` the (non-completed) input is zero padding: those terms vanish
        int64_t terms = a.c2r ? len : a.take;
        double sr = 0, si = 0;
        int64_t idx = 0; // (k * t) mod len, kept incrementally so it never overflows
        int64_t kk = k % len;
        for (int64_t t = 0; t < terms; t++) {
            double br = 0, bi = 0;
            if (a.c2r) {
                // Hermitian completion of the first len/2 + 1 bins; the imaginary parts of DC and Nyquist cannot
                // survive a real output
                bool mirror = t > len / 2;
                int64_t src = mirror ? len - t : t;
                if (src < a.take) {
                    br = (double)load<T>(xs[src * is]);
                    if (a.cin == 2) bi = (double)load<T>(xs[src * is + 1]);
                }
                if (src == 0 || (len % 2 == 0 && src == len / 2)) bi = 0;
                if (mirror) bi = -bi;
            } else {
                br = (double)load<T>(xs[t * is]);
                if (a.cin == 2) bi = (double)load<T>(xs[t * is + 1]);
            }
            double wr, wi;
            twiddle(idx, len, &wr, &wi);
            wi *= sg;
            sr += br * wr - bi * wi;
            si += br * wi + bi * wr;
            idx += kk;
            if (idx >= len) idx -= len;
        }
        T *ys = y + (o * a.n_out * inner + k * inner + i) * a.cout;
        ys[0] = store_f64<T>(sr * scale);
        if (a.cout == 2) ys[1] = store_f64<T>(si * scale);
    }
}

template <typename T> cudaError_t launch_dft(const void *x, void *y, const cuda_dft_args *a, cudaStream_t s) {
    dft_kernel<T><<<grid_for(a->outer * a->n_out * a->inner), kBlock, 0, s>>>((const T *)x, (T *)y, *a);
    return cudaGetLastError();
}

template <typename T> __global__ void stft_kernel(const T *x, const T *win, T *y, cuda_stft_args a) {
    const int64_t len = a.len;
    int64_t total = a.batch * a.frames * a.bins;
    CUDA_GRID_STRIDE(q, total) {
        int64_t k = q % a.bins, f = (q / a.bins) % a.frames, b = q / (a.bins * a.frames);
        int64_t start = f * a.step;
        double sr = 0, si = 0;
        int64_t idx = 0, kk = k % len;
        for (int64_t t = 0; t < len; t++) {
            double br = 0, bi = 0;
            if (start + t < a.sig) {
                double w = win ? (double)load<T>(win[t]) : 1.0;
                int64_t src = (b * a.sig + start + t) * a.cin;
                br = w * (double)load<T>(x[src]);
                if (a.cin == 2) bi = w * (double)load<T>(x[src + 1]);
            }
            double wr, wi;
            twiddle(idx, len, &wr, &wi);
            sr += br * wr - bi * wi;
            si += br * wi + bi * wr;
            idx += kk;
            if (idx >= len) idx -= len;
        }
        y[2 * q] = store_f64<T>(sr);
        y[2 * q + 1] = store_f64<T>(si);
    }
}

template <typename T>
cudaError_t launch_stft(const void *x, const void *win, void *y, const cuda_stft_args *a, cudaStream_t s) {
    stft_kernel<T><<<grid_for(a->batch * a->frames * a->bins), kBlock, 0, s>>>((const T *)x, (const T *)win, (T *)y,
                                                                               *a);
    return cudaGetLastError();
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_signal_dft(cinfer_dtype dtype, const void *x, void *y, const cuda_dft_args *a,
                                       cudaStream_t stream) {
    if (a->outer * a->n_out * a->inner <= 0 || a->len <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_dft<T>(x, y, a, stream), return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_signal_stft(cinfer_dtype dtype, const void *x, const void *window, void *y,
                                        const cuda_stft_args *a, cudaStream_t stream) {
    if (a->batch * a->frames * a->bins <= 0 || a->len <= 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dtype, T, return launch_stft<T>(x, window, y, a, stream), return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}
