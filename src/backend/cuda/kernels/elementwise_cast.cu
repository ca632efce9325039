// CUDA kernels of Cast and CastLike between every numeric dtype, bool, float16 and bfloat16, with the CPU's
// rules (backend/cpu/elementwise_cast.c): float -> integer truncates, and NaN or out-of-range values give the
// x86 "indefinite" INT_MIN (narrow types wrap from int32, uint32 from int64), where CUDA's own conversion
// would saturate; double and integers reach float16/bfloat16 with one rounding.
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/elementwise_internal.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::ew;

namespace {

__device__ __forceinline__ int64_t cast_f_i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN;
}
__device__ __forceinline__ int32_t cast_f_i32(double v) {
    return (v > -2147483649.0 && v < 2147483648.0) ? (int32_t)v : INT32_MIN;
}
__device__ __forceinline__ uint64_t cast_f_u64(double v) {
    return (v >= 9223372036854775808.0 && v < 18446744073709551616.0) ? (uint64_t)v : (uint64_t)cast_f_i64(v);
}

// double -> float rounded to odd: exact when d fits, else the neighbour with an odd last bit. Rounding that
// to float16/bfloat16 (far fewer bits) then gives the correctly rounded result, as the CPU computes it.
__device__ __forceinline__ float round_to_odd_float(double d) {
    float f = __double2float_rn(d);
    if ((double)f != d && d == d) {
        if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
        f = __uint_as_float(__float_as_uint(f) | 1u);
    }
    return f;
}

// From a float value (float32 or float64; float16/bfloat16 come as float32) to D.
template <class DTag, typename F> __device__ __forceinline__ typename DTag::type cast_from_float(F v) {
    using D = typename DTag::type;
    if constexpr (DTag::is_bool) return (uint8_t)(v != 0);
    else if constexpr (std::is_same_v<D, float>) return (float)v;
    else if constexpr (std::is_same_v<D, double>) return (double)v;
    else if constexpr (std::is_same_v<D, __half>) {
        if constexpr (std::is_same_v<F, float>) return __float2half_rn(v);
        else return __float2half_rn(round_to_odd_float(v));
    } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
        if constexpr (std::is_same_v<F, float>) return __float2bfloat16_rn(v);
        else return __float2bfloat16_rn(round_to_odd_float(v));
    } else if constexpr (std::is_same_v<D, int64_t>) return cast_f_i64(v);
    else if constexpr (std::is_same_v<D, uint64_t>) return cast_f_u64(v);
    else if constexpr (std::is_same_v<D, uint32_t>) return (uint32_t)cast_f_i64(v);
    else return (D)cast_f_i32(v); // int32 and the 8/16-bit types, which wrap from int32
}

// From an integer or bool (stored as uint8_t) to D.
template <class DTag, typename S> __device__ __forceinline__ typename DTag::type cast_from_int(S x) {
    using D = typename DTag::type;
    if constexpr (DTag::is_bool) return (uint8_t)(x != 0);
    else if constexpr (std::is_same_v<D, __half>) return __float2half_rn(round_to_odd_float((double)x));
    else if constexpr (std::is_same_v<D, __nv_bfloat16>) return __float2bfloat16_rn(round_to_odd_float((double)x));
    else return (D)x; // float/double round to nearest; integers wrap
}

template <class STag, class DTag>
__global__ void cast_kernel(const typename STag::type *__restrict__ x, typename DTag::type *__restrict__ y,
                            int64_t n) {
    using S = typename STag::type;
    CUDA_GRID_STRIDE(i, n) {
        if constexpr (is_half_v<S>) y[i] = cast_from_float<DTag>(load(x[i]));
        else if constexpr (std::is_floating_point_v<S>) y[i] = cast_from_float<DTag>(x[i]);
        else y[i] = cast_from_int<DTag>(x[i]);
    }
}

}  // namespace

extern "C" bool cuda_ew_cast_supported(cinfer_dtype t) { return dispatch_dtype(t, [](auto) {}); }

extern "C" cudaError_t cuda_ew_cast(cinfer_dtype from, cinfer_dtype to, const void *x, void *y, int64_t n,
                                    cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool launched = false;
    dispatch_dtype(from, [&](auto stag) {
        dispatch_dtype(to, [&](auto dtag) {
            using STag = decltype(stag);
            using DTag = decltype(dtag);
            cast_kernel<STag, DTag><<<grid_for(n), kBlock, 0, stream>>>((const typename STag::type *)x,
                                                                        (typename DTag::type *)y, n);
            launched = true;
        });
    });
    if (!launched) return cudaErrorNotSupported;
    return cudaGetLastError();
}
