// Misc kernels: CumSum/CumProd (one thread per scanned lane), the two losses (deterministic block reductions, no
// atomics) and ReverseSequence.
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/misc.h"

namespace cinfer_cuda {
namespace {

// A double result stored the way the CPU's cpu_store_f64 does: half types round through float.
template <typename T> __device__ __forceinline__ T store_f64(double v) {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) return store<T>((float)v);
    else return (T)v;
}

// ---------------------------------------------------------------- CumSum, CumProd

// Running value type: half types in float, signed integers unsigned (wrapping like two's-complement hardware).
template <typename T> struct cum_acc { using type = T; };
template <> struct cum_acc<__half> { using type = float; };
template <> struct cum_acc<__nv_bfloat16> { using type = float; };
template <> struct cum_acc<int32_t> { using type = uint32_t; };
template <> struct cum_acc<int64_t> { using type = uint64_t; };

// Folds v into acc; half types round the running value to their precision each step, as a scan in that dtype does.
template <typename T, bool PROD, typename A> __device__ __forceinline__ A cum_fold(A acc, A v) {
    A r = PROD ? acc * v : acc + v;
    if constexpr (std::is_same<T, __half>::value) return __half2float(__float2half_rn(r));
    else if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(__float2bfloat16_rn(r));
    else return r;
}

template <typename T, bool PROD>
__global__ void cum_kernel(const T *x, T *y, int64_t outer, int64_t len, int64_t inner, bool excl, bool rev) {
    using A = typename cum_acc<T>::type;
    int64_t lanes = outer * inner;
    CUDA_GRID_STRIDE(j, lanes) {
        int64_t o = j / inner, i = j % inner;
        A acc = PROD ? (A)1 : (A)0;
        for (int64_t s = 0; s < len; s++) {
            int64_t l = rev ? len - 1 - s : s;
            int64_t e = (o * len + l) * inner + i;
            A v = (A)load<T>(x[e]); // read before the write: y may be x
            if (excl) {
                y[e] = store<T>(acc);
                acc = cum_fold<T, PROD>(acc, v);
            } else {
                acc = cum_fold<T, PROD>(acc, v);
                y[e] = store<T>(acc);
            }
        }
    }
}

template <typename T>
cudaError_t launch_cum(bool prod, const void *x, void *y, int64_t outer, int64_t len, int64_t inner, bool excl,
                       bool rev, cudaStream_t stream) {
    unsigned grid = grid_for(outer * inner);
    if (prod) cum_kernel<T, true><<<grid, kBlock, 0, stream>>>((const T *)x, (T *)y, outer, len, inner, excl, rev);
    else cum_kernel<T, false><<<grid, kBlock, 0, stream>>>((const T *)x, (T *)y, outer, len, inner, excl, rev);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- losses

constexpr int kLossBlock = 256;
constexpr unsigned kLossMaxBlocks = 1024;

unsigned loss_grid(int64_t count) {
    unsigned g = grid_for(count, kLossBlock);
    return g < kLossMaxBlocks ? g : kLossMaxBlocks;
}

__device__ __forceinline__ int64_t load_index(cinfer_dtype t, const void *p, int64_t i) {
    return t == CINFER_DTYPE_INT32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

// Sums a and b over the block into s[0] (a tree of fixed shape: the same order every run).
__device__ void block_sum2(double a, double b, double *sa, double *sb) {
    sa[threadIdx.x] = a;
    sb[threadIdx.x] = b;
    __syncthreads();
    for (int s = kLossBlock / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sa[threadIdx.x] += sa[threadIdx.x + s];
            sb[threadIdx.x] += sb[threadIdx.x + s];
        }
        __syncthreads();
    }
}

// Per (n, d): loss = -w[t] * logp[n, t, d] (0 for an ignored target), written out for reduction none; otherwise
// each block leaves its sums of loss and weight in partials[2 * block].
template <typename T>
__global__ void __launch_bounds__(kLossBlock)
loss_kernel(const T *x, cinfer_dtype tt, const void *target, const T *weight, T *loss, T *log_prob,
            double *partials, cuda_loss_args a) {
    __shared__ double s_total[kLossBlock], s_wsum[kLossBlock];
    int64_t count = a.N * a.D, C = a.C, D = a.D;
    double total = 0, wsum = 0;
    CUDA_GRID_STRIDE(j, count) {
        int64_t b = j / D, d = j % D, base = b * C * D + d;
        int64_t t = load_index(tt, target, j);
        double shift = 0; // SoftmaxCrossEntropyLoss: logp = x - max - log(sum(exp(x - max)))
        if (a.softmax) {
            double m = -INFINITY, s = 0;
            for (int64_t c = 0; c < C; c++) {
                double v = (double)load<T>(x[base + c * D]);
                m = v > m ? v : m;
            }
            for (int64_t c = 0; c < C; c++) s += exp((double)load<T>(x[base + c * D]) - m);
            shift = m + log(s);
            if (log_prob)
                for (int64_t c = 0; c < C; c++)
                    log_prob[base + c * D] = store_f64<T>((double)load<T>(x[base + c * D]) - shift);
        }
        double l = 0, w = 0;
        if (!(a.has_ignore && t == a.ignore_index)) {
            if (t < 0 || t >= C) {
                // the CPU refuses it: NaN here, and the run fails through the index flag
                l = NAN;
                w = NAN;
                cuda_report_bad_index(a.check);
            } else {
                w = weight ? (double)load<T>(weight[t]) : 1.0;
                l = -w * ((double)load<T>(x[base + t * D]) - shift);
            }
        }
        if (a.reduction == 0) loss[j] = store_f64<T>(l);
        total += l;
        wsum += w;
    }
    if (!partials) return;
    block_sum2(total, wsum, s_total, s_wsum);
    if (threadIdx.x == 0) {
        partials[2 * blockIdx.x] = s_total[0];
        partials[2 * blockIdx.x + 1] = s_wsum[0];
    }
}

// One block folds the per-block sums into the reduced loss.
template <typename T>
__global__ void __launch_bounds__(kLossBlock) loss_reduce_kernel(const double *partials, unsigned blocks, T *loss,
                                                                 bool mean) {
    __shared__ double s_total[kLossBlock], s_wsum[kLossBlock];
    double total = 0, wsum = 0;
    for (unsigned k = threadIdx.x; k < blocks; k += kLossBlock) {
        total += partials[2 * k];
        wsum += partials[2 * k + 1];
    }
    block_sum2(total, wsum, s_total, s_wsum);
    if (threadIdx.x == 0) loss[0] = store_f64<T>(mean ? s_total[0] / s_wsum[0] : s_total[0]);
}

template <typename T>
cudaError_t launch_loss(const void *x, cinfer_dtype tt, const void *target, const void *weight, void *loss,
                        void *log_prob, double *partials, const cuda_loss_args &a, cudaStream_t stream) {
    int64_t count = a.N * a.D;
    if (count <= 0) {
        // nothing to sum: the reduced loss is 0 (sum) or 0/0 (mean), as the CPU's
        if (a.reduction == 0) return cudaSuccess;
        double *none = nullptr;
        loss_reduce_kernel<T><<<1, kLossBlock, 0, stream>>>(none, 0, (T *)loss, a.reduction == 2);
        return cudaGetLastError();
    }
    unsigned grid = loss_grid(count);
    double *parts = a.reduction == 0 ? nullptr : partials;
    loss_kernel<T><<<grid, kLossBlock, 0, stream>>>((const T *)x, tt, target, (const T *)weight, (T *)loss,
                                                     (T *)log_prob, parts, a);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || a.reduction == 0) return err;
    loss_reduce_kernel<T><<<1, kLossBlock, 0, stream>>>(partials, grid, (T *)loss, a.reduction == 2);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- ReverseSequence

template <typename T>
__global__ void reverse_sequence_kernel(const T *x, cinfer_dtype lt, const void *lens, T *y, int batch_axis,
                                        int64_t B, int64_t Tn, int64_t inner) {
    int64_t total = B * Tn * inner;
    CUDA_GRID_STRIDE(o, total) {
        int64_t row = o / inner, e = o % inner;
        int64_t b = batch_axis == 0 ? row / Tn : row % B;
        int64_t t = batch_axis == 0 ? row % Tn : row / B;
        int64_t l = load_index(lt, lens, b);
        l = l < 0 ? 0 : l > Tn ? Tn : l; // the CPU rejects such lengths; never read out of bounds
        int64_t src_t = t < l ? l - 1 - t : t;
        int64_t src_row = batch_axis == 0 ? b * Tn + src_t : src_t * B + b;
        y[o] = x[src_row * inner + e];
    }
}

template <typename T>
cudaError_t launch_reverse_sequence(const void *x, cinfer_dtype lt, const void *lens, void *y, int batch_axis,
                                    int64_t B, int64_t Tn, int64_t inner, cudaStream_t stream) {
    reverse_sequence_kernel<T><<<grid_for(B * Tn * inner), kBlock, 0, stream>>>((const T *)x, lt, lens, (T *)y,
                                                                               batch_axis, B, Tn, inner);
    return cudaGetLastError();
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_misc_cum(cinfer_dtype dtype, bool prod, const void *x, void *y, int64_t outer,
                                     int64_t len, int64_t inner, bool exclusive, bool reverse, cudaStream_t stream) {
    if (outer * len * inner <= 0) return cudaSuccess;
    switch (dtype) {
    case CINFER_DTYPE_FLOAT: return launch_cum<float>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_DOUBLE: return launch_cum<double>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_FLOAT16: return launch_cum<__half>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_BFLOAT16:
        return launch_cum<__nv_bfloat16>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_INT32: return launch_cum<int32_t>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_INT64: return launch_cum<int64_t>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_UINT32: return launch_cum<uint32_t>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    case CINFER_DTYPE_UINT64: return launch_cum<uint64_t>(prod, x, y, outer, len, inner, exclusive, reverse, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" size_t cuda_misc_loss_partials(const cuda_loss_args *a) {
    int64_t count = a->N * a->D;
    if (a->reduction == 0 || count <= 0) return 0;
    return 2 * (size_t)loss_grid(count);
}

extern "C" cudaError_t cuda_misc_loss(cinfer_dtype dtype, const void *x, cinfer_dtype target_dtype,
                                      const void *target, const void *weight, void *loss, void *log_prob,
                                      double *partials, const cuda_loss_args *a, cudaStream_t stream) {
    CUDA_DISPATCH_FLOATS(dtype, T,
                         return launch_loss<T>(x, target_dtype, target, weight, loss, log_prob, partials, *a, stream),
                         return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_misc_reverse_sequence(size_t elem_size, const void *x, cinfer_dtype lens_dtype,
                                                  const void *lens, void *y, int batch_axis, int64_t batch,
                                                  int64_t time, int64_t inner, cudaStream_t stream) {
    if (batch * time * inner <= 0) return cudaSuccess;
    CUDA_DISPATCH_BY_SIZE(elem_size, T,
                          return launch_reverse_sequence<T>(x, lens_dtype, lens, y, batch_axis, batch, time, inner,
                                                            stream),
                          return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}
