// What the elementwise family's .cu files share: a dtype dispatch that tells bool from uint8, type traits,
// and float/double overloads of the math functions so one template serves both precisions.
#ifndef CINFER_CUDA_ELEMENTWISE_INTERNAL_CUH
#define CINFER_CUDA_ELEMENTWISE_INTERNAL_CUH

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"

namespace cinfer_cuda {
namespace ew {

// A dtype at compile time: its storage type, and whether it is bool (stored as uint8_t, but with its own
// semantics: nonzero is true).
template <typename S, bool IsBool = false> struct dtype_tag {
    using type = S;
    static constexpr bool is_bool = IsBool;
};

template <typename T> constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T> constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;
template <typename T> constexpr bool is_int_v = std::is_integral_v<T>;

// Calls f(dtype_tag<...>{}) for dtype t; false when t is not one of the dtypes below.
template <class F> inline bool dispatch_dtype(cinfer_dtype t, F &&f) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: f(dtype_tag<float>{}); return true;
    case CINFER_DTYPE_DOUBLE: f(dtype_tag<double>{}); return true;
    case CINFER_DTYPE_FLOAT16: f(dtype_tag<__half>{}); return true;
    case CINFER_DTYPE_BFLOAT16: f(dtype_tag<__nv_bfloat16>{}); return true;
    case CINFER_DTYPE_INT8: f(dtype_tag<int8_t>{}); return true;
    case CINFER_DTYPE_INT16: f(dtype_tag<int16_t>{}); return true;
    case CINFER_DTYPE_INT32: f(dtype_tag<int32_t>{}); return true;
    case CINFER_DTYPE_INT64: f(dtype_tag<int64_t>{}); return true;
    case CINFER_DTYPE_UINT8: f(dtype_tag<uint8_t>{}); return true;
    case CINFER_DTYPE_UINT16: f(dtype_tag<uint16_t>{}); return true;
    case CINFER_DTYPE_UINT32: f(dtype_tag<uint32_t>{}); return true;
    case CINFER_DTYPE_UINT64: f(dtype_tag<uint64_t>{}); return true;
    case CINFER_DTYPE_BOOL: f(dtype_tag<uint8_t, true>{}); return true;
    default: return false;
    }
}

// 16 bytes of T, moved with one load or store: float16 elements handled one at a time left the memory system a
// third used. vec_ok<T>: the float types whose elementwise kernels take this path.
template <typename T> struct alignas(16) vec16 {
    static constexpr int n = (int)(16 / sizeof(T));
    T v[n];
};
template <typename T>
constexpr bool vec_ok = std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Unsigned twin of an integer type, for wrap-around arithmetic without signed overflow.
template <typename T> using utype = std::make_unsigned_t<T>;

// float/double overloads: templates written against A (float or double) call these.
#define EW_MATH1(name)                                                                                    \
    __device__ __forceinline__ float m_##name(float x) { return name##f(x); }                            \
    __device__ __forceinline__ double m_##name(double x) { return name(x); }
#define EW_MATH2(name)                                                                                    \
    __device__ __forceinline__ float m_##name(float x, float y) { return name##f(x, y); }                \
    __device__ __forceinline__ double m_##name(double x, double y) { return name(x, y); }
EW_MATH1(sqrt)
EW_MATH1(exp)
EW_MATH1(expm1)
EW_MATH1(log)
EW_MATH1(log1p)
EW_MATH1(erf)
EW_MATH1(erfc)
EW_MATH1(floor)
EW_MATH1(ceil)
EW_MATH1(rint)
EW_MATH1(sin)
EW_MATH1(cos)
EW_MATH1(tan)
EW_MATH1(asin)
EW_MATH1(acos)
EW_MATH1(atan)
EW_MATH1(sinh)
EW_MATH1(cosh)
EW_MATH1(tanh)
EW_MATH1(asinh)
EW_MATH1(acosh)
EW_MATH1(atanh)
EW_MATH1(fabs)
EW_MATH2(fmod)
EW_MATH2(pow)
EW_MATH2(fmin)
EW_MATH2(copysign)
#undef EW_MATH1
#undef EW_MATH2

}  // namespace ew
}  // namespace cinfer_cuda

#endif
