// Einsum kernel: one thread per output element sums the product of the operands over the summed labels (an
// odometer over their strides), in double for float types and wrapping uint64 for integers, as the CPU's loop.
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/misc.h"

namespace cinfer_cuda {
namespace {

template <typename T> __device__ __forceinline__ T store_f64(double v) {
    if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) return store<T>((float)v);
    else return (T)v;
}

template <typename T>
__global__ void einsum_kernel(cuda_einsum_args a, T *y, int64_t count) {
    // integers multiply and add as uint64: wrapping, as two's-complement hardware, with no overflow UB
    using A = typename std::conditional<std::is_integral<T>::value, uint64_t, double>::type;
    const int nops = a.num_operands, nsum = a.num_summed;
    CUDA_GRID_STRIDE(q, count) {
        int64_t off[CUDA_EINSUM_MAX_OPERANDS];
        for (int k = 0; k < nops; k++) off[k] = 0;
        int64_t rem = q;
        for (int d = a.out_ndim - 1; d >= 0; d--) {
            int64_t i = rem % a.out_size[d];
            rem /= a.out_size[d];
            for (int k = 0; k < nops; k++) off[k] += i * a.out_stride[k][d];
        }
        int64_t idx[CUDA_EINSUM_MAX_SUMMED];
        for (int s = 0; s < nsum; s++) idx[s] = 0;
        A acc = 0;
        for (int64_t rr = 0; rr < a.summed_count; rr++) {
            A prod = 1;
            for (int k = 0; k < nops; k++) {
                T v = ((const T *)a.operand[k])[off[k]];
                if constexpr (std::is_integral<T>::value) prod *= (A)v;
                else prod *= (A)load<T>(v);
            }
            acc += prod;
            // odometer over the summed labels, last fastest
            for (int s = nsum - 1; s >= 0; s--) {
                for (int k = 0; k < nops; k++) off[k] += a.summed_stride[k][s];
                if (++idx[s] < a.summed_size[s]) break;
                for (int k = 0; k < nops; k++) off[k] -= idx[s] * a.summed_stride[k][s];
                idx[s] = 0;
            }
        }
        if constexpr (std::is_integral<T>::value) y[q] = (T)acc;
        else y[q] = store_f64<T>(acc);
    }
}

template <typename T>
cudaError_t launch_einsum(const cuda_einsum_args *a, void *y, int64_t count, cudaStream_t stream) {
    einsum_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(*a, (T *)y, count);
    return cudaGetLastError();
}

} // namespace
} // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_misc_einsum(cinfer_dtype dtype, const cuda_einsum_args *a, void *y, int64_t count,
                                        cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    CUDA_DISPATCH_NUMERIC(dtype, T, return launch_einsum<T>(a, y, count, stream), return cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
}
