// Shared by every kernels/*.cu: launch geometry, dtype dispatch, float conversions for half types, broadcast offsets.
#ifndef CINFER_CUDA_COMMON_CUH
#define CINFER_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/kernels/kernel_types.h"
#include "cinfer/cinfer.h"

namespace cinfer_cuda {

constexpr int kBlock = 256;

// Grid for a grid-stride loop over n elements: enough blocks to fill the GPU, capped so huge tensors loop.
inline unsigned grid_for(int64_t n, int block = kBlock) {
    int64_t blocks = (n + block - 1) / block;
    if (blocks < 1) blocks = 1;
    if (blocks > 65535LL * 8) blocks = 65535LL * 8;
    return (unsigned)blocks;
}

#define CUDA_GRID_STRIDE(i, n)                                                                            \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

// 2^x and 1/x on the special-function unit, flush-to-zero (no denormal fix-ups around them: callers take the
// approximation where its inputs are normal, or a flushed result is negligible): one instruction each.
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Arithmetic type: half types compute in float, everything else in itself.
template <typename T> struct acc { using type = T; };
template <> struct acc<__half> { using type = float; };
template <> struct acc<__nv_bfloat16> { using type = float; };

template <typename T> __device__ __forceinline__ typename acc<T>::type load(const T &v) { return v; }
template <> __device__ __forceinline__ float load<__half>(const __half &v) { return __half2float(v); }
template <> __device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16 &v) { return __bfloat162float(v); }

template <typename T, typename A> __device__ __forceinline__ T store(A v) { return (T)v; }
template <> __device__ __forceinline__ __half store<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half store<__half, double>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, double>(double v) {
    return __float2bfloat16_rn((float)v);
}

// Flat offset of output index i in operand k of a broadcast.
__device__ __forceinline__ int64_t broadcast_offset(const cuda_broadcast &bc, int k, int64_t i) {
    if (bc.full[k]) return i;
    if (bc.scalar[k]) return 0;
    int64_t off = 0;
    for (int d = bc.ndim - 1; d >= 0; d--) {
        int64_t dim = bc.dims[d];
        off += (i % dim) * bc.stride[k][d];
        i /= dim;
    }
    return off;
}

}  // namespace cinfer_cuda

// Dtype dispatch: runs BODY with the type name `T` bound to the element type of DTYPE; unknown types fall to
// DEFAULT. BODY must not contain unparenthesised commas (a <<<grid, block>>> launch has them): wrap a launch in a
// small template function. Usage: CUDA_DISPATCH_FLOATS(dtype, T, return launch<T>(args), return cudaErrorInvalidValue)
#define CUDA_DTYPE_CASE(ENUM, TYPE, BODY)                                                                 \
    case ENUM: {                                                                                          \
        using T = TYPE;                                                                                   \
        BODY;                                                                                             \
    } break;
#define CUDA_FLOAT_CASES(BODY)                                                                            \
    CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT, float, BODY)                                                      \
    CUDA_DTYPE_CASE(CINFER_DTYPE_DOUBLE, double, BODY)                                                    \
    CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT16, __half, BODY)                                                   \
    CUDA_DTYPE_CASE(CINFER_DTYPE_BFLOAT16, __nv_bfloat16, BODY)
#define CUDA_INT_CASES(BODY)                                                                              \
    CUDA_DTYPE_CASE(CINFER_DTYPE_INT8, int8_t, BODY)                                                      \
    CUDA_DTYPE_CASE(CINFER_DTYPE_INT16, int16_t, BODY)                                                    \
    CUDA_DTYPE_CASE(CINFER_DTYPE_INT32, int32_t, BODY)                                                    \
    CUDA_DTYPE_CASE(CINFER_DTYPE_INT64, int64_t, BODY)                                                    \
    CUDA_DTYPE_CASE(CINFER_DTYPE_UINT8, uint8_t, BODY)                                                    \
    CUDA_DTYPE_CASE(CINFER_DTYPE_UINT16, uint16_t, BODY)                                                  \
    CUDA_DTYPE_CASE(CINFER_DTYPE_UINT32, uint32_t, BODY)                                                  \
    CUDA_DTYPE_CASE(CINFER_DTYPE_UINT64, uint64_t, BODY)
#define CUDA_DISPATCH_FLOATS(DTYPE, T, BODY, DEFAULT)                                                     \
    switch (DTYPE) {                                                                                      \
        CUDA_FLOAT_CASES(BODY)                                                                            \
    default: DEFAULT;                                                                                     \
    }
#define CUDA_DISPATCH_INTS(DTYPE, T, BODY, DEFAULT)                                                       \
    switch (DTYPE) {                                                                                      \
        CUDA_INT_CASES(BODY)                                                                              \
    default: DEFAULT;                                                                                     \
    }
#define CUDA_DISPATCH_NUMERIC(DTYPE, T, BODY, DEFAULT)                                                    \
    switch (DTYPE) {                                                                                      \
        CUDA_FLOAT_CASES(BODY)                                                                            \
        CUDA_INT_CASES(BODY)                                                                              \
    default: DEFAULT;                                                                                     \
    }
// Element size only (data movement: Transpose, Gather, Concat, ...): T is an unsigned integer of that width.
#define CUDA_DISPATCH_BY_SIZE(ELEM_SIZE, T, BODY, DEFAULT)                                                \
    switch (ELEM_SIZE) {                                                                                  \
        CUDA_DTYPE_CASE(1, uint8_t, BODY)                                                                 \
        CUDA_DTYPE_CASE(2, uint16_t, BODY)                                                                \
        CUDA_DTYPE_CASE(4, uint32_t, BODY)                                                                \
        CUDA_DTYPE_CASE(8, uint64_t, BODY)                                                                \
    default: DEFAULT;                                                                                     \
    }

#endif
