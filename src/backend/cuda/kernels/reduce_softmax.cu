// CUDA kernels of the ops along one axis of [outer, len, inner]: Softmax, LogSoftmax, Hardmax, LpNormalization.
//
// inner == 1 (rows contiguous): one block per row, block-wide reductions every thread sees identically; Softmax
// rows of at most 1024 (float, float16) take a warp each, the row held in registers.
// inner > 1: one thread per (outer, inner) column walking the axis; consecutive threads read consecutive
// columns, so every pass is coalesced. Both are deterministic. y may alias x: every element is read by the
// thread that later writes it, and whole-row reads finish behind a barrier (or in the same thread) first.
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_device.cuh"

namespace cinfer_cuda {
namespace {

template <typename T> constexpr bool is_16bit() {
    return std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
}

// v rounded to T and back (the float16/bfloat16 Softmax's intermediate rounding).
template <typename T> __device__ __forceinline__ float round_to(float v) { return load(store<T>(v)); }

// Hardmax's running choice: the first maximum, a NaN counting as the maximum (ArgMax's rule).
template <typename F> struct best_t {
    F v;
    int64_t i; /* -1: none */
};
struct FirstMax {
    template <typename F> __device__ __forceinline__ best_t<F> operator()(best_t<F> a, best_t<F> b) const {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        bool an = a.v != a.v, bn = b.v != b.v;
        if (an || bn) return an && bn ? (a.i < b.i ? a : b) : an ? a : b;
        if (a.v == b.v) return a.i < b.i ? a : b;
        return a.v > b.v ? a : b;
    }
};

// ---- inner == 1: one block per contiguous row ----
template <typename T, int M>
__global__ void softmax_rows_kernel(const T *x, T *y, int64_t rows, int64_t len, bool nan_to_zero) {
    using F = typename acc<T>::type;
    __shared__ F smem[32];
    __shared__ best_t<F> best_smem[32];
    const int64_t tid = threadIdx.x, step = blockDim.x;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * len;
        T *yr = y + row * len;
        if constexpr (M == CUDA_SOFTMAX || M == CUDA_LOG_SOFTMAX) {
            F m = -red::pos_inf<F>();
            for (int64_t j = tid; j < len; j += step) {
                F v = load(xr[j]);
                m = v > m ? v : m; /* a NaN is skipped here and poisons the sum below */
            }
            m = red::block_allreduce(m, red::Max{}, smem);
            if constexpr (M == CUDA_SOFTMAX && is_16bit<T>()) {
                /* the CPU reference's rounding: x - max and exp rounded to T, the sum (float16: in float, then
                 * rounded; bfloat16: element by element in bfloat16, in order), the quotient rounded */
                F s = 0;
                for (int64_t j = tid; j < len; j += step) {
                    F e = round_to<T>(expf(round_to<T>(load(xr[j]) - m)));
                    yr[j] = store<T>(e);
                    s += e;
                }
                if constexpr (std::is_same<T, __half>::value) {
                    s = red::block_allreduce(s, red::Add{}, smem);
                } else {
                    __syncthreads(); /* every e is in yr */
                    if (tid == 0) {
                        s = load(yr[0]);
                        for (int64_t j = 1; j < len; j++) s = round_to<T>(s + load(yr[j]));
                        smem[0] = s;
                    }
                    __syncthreads();
                    s = smem[0];
                    __syncthreads(); /* smem is reused by the next row's reductions */
                }
                s = round_to<T>(s);
                const bool zero = nan_to_zero && s != s; /* a NaN row (all -inf, a NaN or +inf in it) -> 0 */
                for (int64_t j = tid; j < len; j += step) yr[j] = store<T>(zero ? F(0) : load(yr[j]) / s);
            } else {
                F s = 0;
                for (int64_t j = tid; j < len; j += step) s += red::exp_t(load(xr[j]) - m);
                s = red::block_allreduce(s, red::Add{}, smem);
                if constexpr (M == CUDA_SOFTMAX) {
                    const bool zero = nan_to_zero && s != s;
                    for (int64_t j = tid; j < len; j += step)
                        yr[j] = store<T>(zero ? F(0) : red::exp_t(load(xr[j]) - m) / s);
                } else {
                    const F c = m + red::log_t(s);
                    for (int64_t j = tid; j < len; j += step) yr[j] = store<T>(load(xr[j]) - c);
                }
            }
        } else if constexpr (M == CUDA_HARDMAX) {
            best_t<F> b{F(0), -1};
            for (int64_t j = tid; j < len; j += step) b = FirstMax{}(b, best_t<F>{load(xr[j]), j});
            b = red::block_allreduce(b, FirstMax{}, best_smem);
            for (int64_t j = tid; j < len; j += step) yr[j] = store<T>(j == b.i ? F(1) : F(0));
        } else {
            F s = 0;
            for (int64_t j = tid; j < len; j += step) {
                F v = load(xr[j]);
                s += M == CUDA_LP_NORM_1 ? red::abs_t(v) : v * v;
            }
            s = red::block_allreduce(s, red::Add{}, smem);
            const F norm = M == CUDA_LP_NORM_1 ? s : red::sqrt_t(s);
            for (int64_t j = tid; j < len; j += step) yr[j] = store<T>(norm == F(0) ? F(0) : load(xr[j]) / norm);
        }
    }
}

// ---- inner == 1, rows of at most 1024, Softmax in float or float16: one warp per row, the row in registers ----
// Attention's 128-long rows left the block-per-row kernel 32-thread blocks with barriers and the row read
// three times (~10x below memory speed). Same per-element arithmetic and roundings as softmax_rows_kernel;
// the sums fold in a fixed butterfly order, so runs are deterministic.
template <typename T, int K>
__global__ void softmax_warp_rows_kernel(const T *x, T *y, int64_t rows, int len, bool nan_to_zero) {
    using F = typename acc<T>::type;
    const int lane = (int)(threadIdx.x & 31);
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += warps) {
        const T *xr = x + row * len;
        T *yr = y + row * len;
        F v[K];
        F m = -red::pos_inf<F>();
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = lane + 32 * k;
            v[k] = j < len ? load(xr[j]) : -red::pos_inf<F>();
            m = v[k] > m ? v[k] : m; /* a NaN is skipped here and poisons the sum below */
        }
        m = red::warp_allreduce(m, red::Max{});
        F s = 0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (lane + 32 * k < len) {
                if constexpr (is_16bit<T>()) v[k] = round_to<T>(expf(round_to<T>(v[k] - m)));
                else v[k] = red::exp_t(v[k] - m);
                s += v[k];
            }
        }
        s = red::warp_allreduce(s, red::Add{});
        if constexpr (is_16bit<T>()) s = round_to<T>(s);
        const bool zero = nan_to_zero && s != s; /* a NaN row (all -inf, a NaN or +inf in it) -> 0 */
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = lane + 32 * k;
            if (j < len) yr[j] = store<T>(zero ? F(0) : v[k] / s);
        }
    }
}

// ---- inner > 1: one thread per column, walking the axis with stride inner ----
template <typename T, int M>
__global__ void softmax_cols_kernel(const T *x, T *y, int64_t outer, int64_t len, int64_t inner, bool nan_to_zero) {
    using F = typename acc<T>::type;
    CUDA_GRID_STRIDE(c, outer * inner) {
        const int64_t o = c / inner, i = c - o * inner;
        const T *xr = x + o * len * inner + i;
        T *yr = y + o * len * inner + i;
        if constexpr (M == CUDA_SOFTMAX || M == CUDA_LOG_SOFTMAX) {
            F m = -red::pos_inf<F>();
            for (int64_t j = 0; j < len; j++) {
                F v = load(xr[j * inner]);
                m = v > m ? v : m;
            }
            if constexpr (M == CUDA_SOFTMAX && is_16bit<T>()) {
                F s = 0;
                for (int64_t j = 0; j < len; j++) {
                    F e = round_to<T>(expf(round_to<T>(load(xr[j * inner]) - m)));
                    yr[j * inner] = store<T>(e);
                    if constexpr (std::is_same<T, __half>::value) s += e;
                    else s = j == 0 ? e : round_to<T>(s + e);
                }
                s = round_to<T>(s);
                const bool zero = nan_to_zero && s != s;
                for (int64_t j = 0; j < len; j++) yr[j * inner] = store<T>(zero ? F(0) : load(yr[j * inner]) / s);
            } else {
                F s = 0;
                for (int64_t j = 0; j < len; j++) s += red::exp_t(load(xr[j * inner]) - m);
                if constexpr (M == CUDA_SOFTMAX) {
                    const bool zero = nan_to_zero && s != s;
                    for (int64_t j = 0; j < len; j++)
                        yr[j * inner] = store<T>(zero ? F(0) : red::exp_t(load(xr[j * inner]) - m) / s);
                } else {
                    const F k = m + red::log_t(s);
                    for (int64_t j = 0; j < len; j++) yr[j * inner] = store<T>(load(xr[j * inner]) - k);
                }
            }
        } else if constexpr (M == CUDA_HARDMAX) {
            best_t<F> b{F(0), -1};
            for (int64_t j = 0; j < len; j++) b = FirstMax{}(b, best_t<F>{load(xr[j * inner]), j});
            for (int64_t j = 0; j < len; j++) yr[j * inner] = store<T>(j == b.i ? F(1) : F(0));
        } else {
            F s = 0;
            for (int64_t j = 0; j < len; j++) {
                F v = load(xr[j * inner]);
                s += M == CUDA_LP_NORM_1 ? red::abs_t(v) : v * v;
            }
            const F norm = M == CUDA_LP_NORM_1 ? s : red::sqrt_t(s);
            for (int64_t j = 0; j < len; j++)
                yr[j * inner] = store<T>(norm == F(0) ? F(0) : load(xr[j * inner]) / norm);
        }
    }
}

template <typename T, int M>
cudaError_t run_mode(const void *xv, void *yv, int64_t outer, int64_t len, int64_t inner, bool nan_to_zero,
                     cudaStream_t stream) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    if constexpr (M == CUDA_SOFTMAX && (std::is_same<T, float>::value || std::is_same<T, __half>::value)) {
        if (inner == 1 && red::with_warp_row_values(len, [&](auto kc) {
                softmax_warp_rows_kernel<T, decltype(kc)::value>
                    <<<red::warp_row_blocks(outer), red::kWarpRowThreads, 0, stream>>>(x, y, outer, (int)len, nan_to_zero);
            }))
            return cudaGetLastError();
    }
    if (inner == 1)
        softmax_rows_kernel<T, M><<<red::blocks_for(outer), red::row_threads(len), 0, stream>>>(x, y, outer, len,
                                                                                              nan_to_zero);
    else
        softmax_cols_kernel<T, M><<<grid_for(outer * inner), kBlock, 0, stream>>>(x, y, outer, len, inner, nan_to_zero);
    return cudaGetLastError();
}

template <typename T>
cudaError_t run_softmax(cuda_softmax_mode mode, const void *x, void *y, int64_t outer, int64_t len, int64_t inner,
                        bool nan_to_zero, cudaStream_t stream) {
    switch (mode) {
    case CUDA_SOFTMAX: return run_mode<T, CUDA_SOFTMAX>(x, y, outer, len, inner, nan_to_zero, stream);
    case CUDA_LOG_SOFTMAX: return run_mode<T, CUDA_LOG_SOFTMAX>(x, y, outer, len, inner, nan_to_zero, stream);
    case CUDA_HARDMAX: return run_mode<T, CUDA_HARDMAX>(x, y, outer, len, inner, nan_to_zero, stream);
    case CUDA_LP_NORM_1: return run_mode<T, CUDA_LP_NORM_1>(x, y, outer, len, inner, nan_to_zero, stream);
    case CUDA_LP_NORM_2: return run_mode<T, CUDA_LP_NORM_2>(x, y, outer, len, inner, nan_to_zero, stream);
    }
    return cudaErrorInvalidValue;
}

}  // namespace
}  // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_reduce_softmax(cuda_softmax_mode mode, cinfer_dtype dt, const void *x, void *y,
                                           int64_t outer, int64_t len, int64_t inner, bool nan_to_zero,
                                           cudaStream_t stream) {
    CUDA_DISPATCH_FLOATS(dt, T, return run_softmax<T>(mode, x, y, outer, len, inner, nan_to_zero, stream),
                         return cudaErrorInvalidValue)
    return cudaErrorInvalidValue;
}
