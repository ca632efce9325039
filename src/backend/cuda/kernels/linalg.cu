// Kernels of the linalg family: Gemm's broadcast-C prefill and the integer MatMul / Gemm (cuBLASLt does the
// floating-point GEMMs; see ops/linalg.c).
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/linalg.h"

using namespace cinfer_cuda;

namespace {

template <typename T> __global__ void fill_c_float(const T *c, int64_t crows, int64_t ccols, double scale, T *y, int64_t m,
                                                   int64_t n) {
    using A = typename acc<T>::type;
    const A s = (A)scale;
    CUDA_GRID_STRIDE(i, m * n) {
        if (!c) {
            y[i] = store<T>((A)0);
            continue;
        }
        int64_t r = i / n, col = i % n;
        int64_t off = (crows == 1 ? 0 : r) * ccols + (ccols == 1 ? 0 : col);
        y[i] = store<T>(s * load(c[off]));
    }
}

template <typename T> __global__ void fill_c_int(const T *c, int64_t crows, int64_t ccols, T *y, int64_t m, int64_t n) {
    CUDA_GRID_STRIDE(i, m * n) {
        if (!c) {
            y[i] = 0;
            continue;
        }
        int64_t r = i / n, col = i % n;
        y[i] = c[(crows == 1 ? 0 : r) * ccols + (ccols == 1 ? 0 : col)];
    }
}

// Wide unsigned type for wrapping products: the low bits of the product and sum are those of the narrow type,
// and no operand promotes to a signed int (whose overflow would be undefined).
template <typename T> using wide_unsigned = typename std::conditional<sizeof(T) <= 4, uint32_t, uint64_t>::type;

// One thread per output element; consecutive threads take consecutive columns, so the reads of B and the
// writes of Y are coalesced and A's element is shared by the warp.
template <typename T> __global__ void int_matmul(const T *a, const T *b, T *y, int64_t total, linalg_batch bt, int64_t m,
                                                 int64_t n, int64_t k) {
    using W = wide_unsigned<T>;
    const int64_t mn = m * n;
    CUDA_GRID_STRIDE(idx, total) {
        int64_t bi = idx / mn, r = idx % mn, i = r / n, j = r % n;
        int64_t oa = 0, ob = 0, rem = bi;
        for (int d = bt.nb - 1; d >= 0; d--) {
            int64_t q = rem % bt.dims[d];
            rem /= bt.dims[d];
            oa += q * bt.sa[d];
            ob += q * bt.sb[d];
        }
        const T *ar = a + oa * m * k + i * k;
        const T *bc = b + ob * k * n + j;
        W sum = 0;
        for (int64_t p = 0; p < k; p++) sum += (W)ar[p] * (W)bc[p * n];
        y[idx] = (T)sum;
    }
}

template <typename T> __global__ void int_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                                               const T *a, const T *b, double beta, bool has_c, T *y) {
    using U = typename std::make_unsigned<T>::type;
    using W = wide_unsigned<T>;
    const bool plain = alpha == 1.0 && (!has_c || beta == 1.0);
    CUDA_GRID_STRIDE(idx, m * n) {
        int64_t i = idx / n, j = idx % n;
        W sum = 0;
        for (int64_t p = 0; p < k; p++) {
            W av = (W)(ta ? a[p * m + i] : a[i * k + p]);
            W bv = (W)(tb ? b[j * k + p] : b[p * n + j]);
            sum += av * bv;
        }
        U acc = (U)sum;
        if (plain) y[idx] = (T)(has_c ? (U)(acc + (U)y[idx]) : acc);
        else y[idx] = (T)(alpha * (double)(T)acc + (has_c ? beta * (double)y[idx] : 0.0));
    }
}

// Host-side launch helpers: the dispatch macros split their arguments at commas, so each <<<...>>> sits here.
template <typename T>
void launch_fill_c(const void *c, int64_t crows, int64_t ccols, double scale, void *y, int64_t m, int64_t n,
                   cudaStream_t stream) {
    if constexpr (std::is_integral<T>::value)
        fill_c_int<T><<<grid_for(m * n), kBlock, 0, stream>>>((const T *)c, crows, ccols, (T *)y, m, n);
    else
        fill_c_float<T><<<grid_for(m * n), kBlock, 0, stream>>>((const T *)c, crows, ccols, scale, (T *)y, m, n);
}

template <typename T>
void launch_int_matmul(const void *a, const void *b, void *y, int64_t total, const linalg_batch &bt, int64_t m,
                       int64_t n, int64_t k, cudaStream_t stream) {
    int_matmul<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)a, (const T *)b, (T *)y, total, bt, m, n, k);
}

template <typename T>
void launch_int_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a, const void *b,
                     double beta, bool has_c, void *y, cudaStream_t stream) {
    int_gemm<T><<<grid_for(m * n), kBlock, 0, stream>>>(ta, tb, m, n, k, alpha, (const T *)a, (const T *)b, beta,
                                                        has_c, (T *)y);
}

}  // namespace

extern "C" cudaError_t linalg_launch_fill_c(cinfer_dtype dtype, const void *c, int64_t crows, int64_t ccols, double scale,
                                            void *y, int64_t m, int64_t n, cudaStream_t stream) {
    if (m * n == 0) return cudaSuccess;
    switch (dtype) {
    case CINFER_DTYPE_FLOAT:
    case CINFER_DTYPE_DOUBLE:
    case CINFER_DTYPE_FLOAT16:
    case CINFER_DTYPE_BFLOAT16:
        CUDA_DISPATCH_FLOATS(dtype, T, launch_fill_c<T>(c, crows, ccols, scale, y, m, n, stream),
                             return cudaErrorInvalidValue)
        break;
    default:
        CUDA_DISPATCH_INTS(dtype, T, launch_fill_c<T>(c, crows, ccols, scale, y, m, n, stream),
                           return cudaErrorInvalidValue)
    }
    return cudaGetLastError();
}

extern "C" cudaError_t linalg_launch_int_matmul(cinfer_dtype dtype, const void *a, const void *b, void *y, int64_t batch,
                                                linalg_batch bt, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
    const int64_t total = batch * m * n;
    if (total == 0) return cudaSuccess;
    CUDA_DISPATCH_INTS(dtype, T, launch_int_matmul<T>(a, b, y, total, bt, m, n, k, stream),
                       return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t linalg_launch_int_gemm(cinfer_dtype dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                              int64_t k, double alpha, const void *a, const void *b, double beta,
                                              bool has_c, void *y, cudaStream_t stream) {
    if (m * n == 0) return cudaSuccess;
    CUDA_DISPATCH_INTS(dtype, T, launch_int_gemm<T>(trans_a, trans_b, m, n, k, alpha, a, b, beta, has_c, y, stream),
                       return cudaErrorInvalidValue)
    return cudaGetLastError();
}
