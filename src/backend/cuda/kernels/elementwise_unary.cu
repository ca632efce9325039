// CUDA kernels of the unary elementwise ops (math, activations, IsNaN/IsInf, Not, BitwiseNot) and Clip.
// Semantics follow backend/cpu/elementwise_unary.c: the same expressions per precision (float32 and
// float64 differ where the CPU's do), float16/bfloat16 through float32, the same dtype coverage.
#include <limits>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/elementwise_internal.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::ew;

namespace {

template <int OP> constexpr bool unary_bool_out_v = OP == CUDA_EW_ISNAN || OP == CUDA_EW_ISINF;

// Which (op, dtype) pairs exist: the CPU op table's rows.
template <int OP, class Tag> constexpr bool unary_has() {
    using T = typename Tag::type;
    if constexpr (Tag::is_bool) {
        return OP == CUDA_EW_NOT;
    } else if constexpr (is_float_v<T>) {
        return OP != CUDA_EW_NOT && OP != CUDA_EW_BITWISE_NOT;
    } else if constexpr (std::is_signed_v<T>) {
        return OP == CUDA_EW_NEG || OP == CUDA_EW_ABS || OP == CUDA_EW_SIGN || OP == CUDA_EW_RELU ||
               OP == CUDA_EW_BITWISE_NOT;
    } else {
        return OP == CUDA_EW_ABS || OP == CUDA_EW_SIGN || OP == CUDA_EW_BITWISE_NOT;
    }
}

// The CPU's clamp to [0, 1] (NaN passes through).
template <typename A> __device__ __forceinline__ A clamp01(A v) { return v > (A)1 ? (A)1 : v < (A)0 ? (A)0 : v; }

template <typename A> __device__ __forceinline__ A softplus(A x) {
    return x > 0 ? x + m_log1p(m_exp(-x)) : m_log1p(m_exp(x));
}

constexpr double kGeluK = 0.7978845608028654; // sqrt(2/pi)

// float/double ops (float16/bfloat16 arrive as float). F: the float32 expression where it differs from double.
template <int OP, typename A> __device__ __forceinline__ A float_unary(A x, const cuda_ew_unary_params &p) {
    constexpr bool F = std::is_same_v<A, float>;
    if constexpr (OP == CUDA_EW_SQRT) return m_sqrt(x);
    else if constexpr (OP == CUDA_EW_EXP) return m_exp(x);
    else if constexpr (OP == CUDA_EW_LOG) return m_log(x);
    else if constexpr (OP == CUDA_EW_NEG) return -x;
    else if constexpr (OP == CUDA_EW_ABS) return m_fabs(x);
    else if constexpr (OP == CUDA_EW_RECIPROCAL) return (A)1 / x;
    else if constexpr (OP == CUDA_EW_ERF) return m_erf(x);
    else if constexpr (OP == CUDA_EW_FLOOR) return m_floor(x);
    else if constexpr (OP == CUDA_EW_CEIL) return m_ceil(x);
    else if constexpr (OP == CUDA_EW_ROUND) return m_rint(x); // halves to even, like numpy
    else if constexpr (OP == CUDA_EW_SIGN) return x > 0 ? (A)1 : x < 0 ? (A)-1 : x; // NaN stays NaN
    else if constexpr (OP == CUDA_EW_SIN) return m_sin(x);
    else if constexpr (OP == CUDA_EW_COS) return m_cos(x);
    else if constexpr (OP == CUDA_EW_TAN) return m_tan(x);
    else if constexpr (OP == CUDA_EW_ASIN) return m_asin(x);
    else if constexpr (OP == CUDA_EW_ACOS) return m_acos(x);
    else if constexpr (OP == CUDA_EW_ATAN) return m_atan(x);
    else if constexpr (OP == CUDA_EW_SINH) return m_sinh(x);
    else if constexpr (OP == CUDA_EW_COSH) return m_cosh(x);
    else if constexpr (OP == CUDA_EW_TANH) return m_tanh(x);
    else if constexpr (OP == CUDA_EW_ASINH) return m_asinh(x);
    else if constexpr (OP == CUDA_EW_ACOSH) return m_acosh(x);
    else if constexpr (OP == CUDA_EW_ATANH) return m_atanh(x);
    else if constexpr (OP == CUDA_EW_RELU) return x < 0 ? (A)0 : x; // NaN passes through
    else if constexpr (OP == CUDA_EW_LEAKY_RELU) return x < 0 ? (A)p.alpha * x : x;
    else if constexpr (OP == CUDA_EW_SIGMOID) return (A)1 / ((A)1 + m_exp(-x));
    else if constexpr (OP == CUDA_EW_HARD_SIGMOID) return clamp01((A)p.alpha * x + (A)p.beta);
    else if constexpr (OP == CUDA_EW_HARD_SWISH) {
        if constexpr (F) return x * clamp01(x * (1.0f / 6) + 0.5f);
        else return x * clamp01(x / 6 + 0.5);
    } else if constexpr (OP == CUDA_EW_SOFTPLUS) return softplus(x);
    else if constexpr (OP == CUDA_EW_SOFTSIGN) return x / ((A)1 + m_fabs(x));
    else if constexpr (OP == CUDA_EW_ELU) return x < 0 ? (A)p.alpha * m_expm1(x) : x;
    else if constexpr (OP == CUDA_EW_SELU) {
        // float: (gamma * alpha) in float first, as the CPU's left-to-right float expression
        if constexpr (F) return x > 0 ? p.gamma * x : p.gamma * p.alpha * expm1f(x);
        else return x > 0 ? (double)p.gamma * x : (double)p.gamma * p.alpha * expm1(x);
    } else if constexpr (OP == CUDA_EW_CELU) {
        A alpha = (A)p.alpha;
        return (x > 0 ? x : (A)0) + m_fmin((A)0, alpha * m_expm1(x / alpha));
    } else if constexpr (OP == CUDA_EW_THRESHOLDED_RELU) return x > (A)p.alpha ? x : (A)0;
    else if constexpr (OP == CUDA_EW_MISH) {
        if constexpr (F) {
            // x*tanh(ln(1 + e^x)) = x*n/(n + 2) with n = e^x(e^x + 2); x itself once e^x swamps the 2
            if (x > 20.0f) return x;
            if (x < -100.0f) return -0.0f;
            float e = expf(x), n = e * (e + 2.0f);
            return x * n / (n + 2.0f);
        } else {
            return x * tanh(softplus(x));
        }
    } else if constexpr (OP == CUDA_EW_SHRINK) {
        A lambd = (A)p.alpha, bias = (A)p.beta;
        return x < -lambd ? x + bias : x > lambd ? x - bias : (A)0;
    } else if constexpr (OP == CUDA_EW_GELU) {
        // 0.5*x*(1 + erf(x/sqrt2)) as 0.5*x*erfc(-x/sqrt2): no cancellation in the negative tail
        if constexpr (F) return 0.5f * x * erfcf(-x * 0.70710678118654752f);
        else return 0.5 * x * erfc(-x * 0.70710678118654752);
    } else if constexpr (OP == CUDA_EW_GELU_TANH) {
        // 0.5*x*(1 + tanh(u)) as x*sigmoid(2u); below -100 the result is -0 (-inf/inf would be NaN)
        A u = (A)kGeluK * (x + (A)0.044715 * x * x * x);
        return x < (A)-100 ? (A)-0.0 : x / ((A)1 + m_exp((A)-2 * u));
    } else if constexpr (OP == CUDA_EW_ISNAN) return x != x;
    else if constexpr (OP == CUDA_EW_ISINF) {
        const A inf = (A)INFINITY;
        return ((p.flag & 1) && x == inf) || ((p.flag & 2) && x == -inf);
    } else {
        static_assert(OP < 0, "no float version of this op");
        return x;
    }
}

// Integer ops: wrap-around through the unsigned twin (Neg/Abs of MIN stay MIN).
template <int OP, typename T> __device__ __forceinline__ T int_unary(T x) {
    using UT = utype<T>;
    if constexpr (OP == CUDA_EW_NEG) return (T)(0u - (UT)x);
    else if constexpr (OP == CUDA_EW_ABS) {
        if constexpr (std::is_signed_v<T>) return x < 0 ? (T)(0u - (UT)x) : x;
        else return x;
    } else if constexpr (OP == CUDA_EW_SIGN) {
        if constexpr (std::is_signed_v<T>) return (T)((x > 0) - (x < 0));
        else return (T)(x > 0);
    } else if constexpr (OP == CUDA_EW_RELU) return x < 0 ? (T)0 : x;
    else {
        static_assert(OP == CUDA_EW_BITWISE_NOT, "integer op");
        return (T)~x;
    }
}

// GELU above -3 for a value stored in a half type: erfc(|x|/sqrt2) as Abramowitz & Stegun 7.1.26's
// t.poly(t).exp(-z^2), t = 1/(1 + p z) (absolute error < 1.5e-7), branch-free on the fast reciprocal and exp units.
// Relative error < 6e-5 over [-3, inf) (worst at -3; checked in float32 against a float64 erfc), a tenth of a
// float16 half-ulp; erff's two-branch polynomial had bounded the kernel (BERT's GELUs, 82 us a layer at b128
// against a ~42 us memory floor). It is written for the instruction count, which bounds it still (Nsight Compute:
// 0.91 instructions issued per scheduler cycle, 35 a value): the flush-to-zero reciprocal and exp2 (no denormal
// fix-ups around them; the values they see are normal or go to 0 anyway), exp(-z^2) as 2^-(w^2) with w = x
// sqrt(log2(e) / 2), the 1/2 of 0.5 erfc folded into the coefficients, and x (1 - q) for x >= 0, which keeps +inf
// (x - x q would be inf - inf).
__device__ __forceinline__ float gelu_half_range(float x) {
    const float t = rcp_approx(fmaf(0.3275911f * 0.70710678118654752f, fabsf(x), 1.0f));
    const float w = x * 0.84932180028801904f;
    const float half_poly = fmaf(t, fmaf(t, fmaf(t, fmaf(t, 0.5307027145f, -0.7265760135f), 0.7107068705f),
                                         -0.142248368f), 0.127414796f);
    const float q = t * half_poly * exp2_approx(-w * w);  // 0.5 erfc(|x| / sqrt2)
    return x * (x >= 0.0f ? 1.0f - q : q);              // 0.5 x (1 + erf(x / sqrt2)) either side of 0
}

// float_unary for a value stored as T; half-type GELU takes gelu_half_range on [-3, inf] (erfcf below -3 and for
// NaN).
template <int OP, class T, class A> __device__ __forceinline__ auto stored_unary(A x, const cuda_ew_unary_params &p) {
    if constexpr (OP == CUDA_EW_GELU && sizeof(T) == 2 && std::is_same<A, float>::value) {
        return x >= -3.0f ? gelu_half_range(x) : float_unary<OP>(x, p);
    } else {
        return float_unary<OP>(x, p);
    }
}

template <int OP, class Tag>
__global__ void unary_kernel(const typename Tag::type *x, void *y, int64_t n, cuda_ew_unary_params p) {
    using T = typename Tag::type;
    CUDA_GRID_STRIDE(i, n) {
        // element i is read before it is written: y may be x
        if constexpr (Tag::is_bool) {
            ((uint8_t *)y)[i] = x[i] == 0;
        } else if constexpr (is_float_v<T>) {
            auto r = stored_unary<OP, T>(load(x[i]), p);
            if constexpr (unary_bool_out_v<OP>) ((uint8_t *)y)[i] = (uint8_t)r;
            else ((T *)y)[i] = store<T>(r);
        } else {
            ((T *)y)[i] = int_unary<OP, T>(x[i]);
        }
    }
}

// unary_kernel for float types in 16-byte chunks (n a multiple of the chunk, x and y 16-byte aligned); the same
// arithmetic per element. Each thread takes chunks c and c + stride together, both loads in flight before either is
// computed (one per thread left the memory system idle between them). y may be x: a chunk is read whole before it
// is written.
template <int OP, class Tag>
__global__ void unary_vec_kernel(const typename Tag::type *x, typename Tag::type *y, int64_t chunks,
                                 cuda_ew_unary_params p) {
    using T = typename Tag::type;
    using V = vec16<T>;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += 2 * stride) {
        const bool second = c + stride < chunks;
        V in[2], out;
        in[0] = reinterpret_cast<const V *>(x)[c];
        if (second) in[1] = reinterpret_cast<const V *>(x)[c + stride];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (h == 1 && !second) break;
            if constexpr (OP == CUDA_EW_GELU && sizeof(T) == 2) {
                // the fast form on every value, one branch a chunk for those below -3 (or NaN), not one a value
                bool tail = false;
#pragma unroll
                for (int k = 0; k < V::n; k++) {
                    const float v = load(in[h].v[k]);
                    tail |= !(v >= -3.0f);
                    out.v[k] = store<T>(gelu_half_range(v));
                }
                if (tail) {
#pragma unroll
                    for (int k = 0; k < V::n; k++) {
                        const float v = load(in[h].v[k]);
                        if (!(v >= -3.0f)) out.v[k] = store<T>(float_unary<OP>(v, p));
                    }
                }
            } else {
#pragma unroll
                for (int k = 0; k < V::n; k++) out.v[k] = store<T>(stored_unary<OP, T>(load(in[h].v[k]), p));
            }
            reinterpret_cast<V *>(y)[c + h * stride] = out;
        }
    }
}

// Calls f(std::integral_constant<int, OP>{}) for op; false for an unknown op.
template <class F> bool with_unary_op(cuda_ew_unary_op op, F &&f) {
#define EW_OP_CASE(OP)                                                                                   \
    case OP: f(std::integral_constant<int, OP>{}); return true;
    switch (op) {
        EW_OP_CASE(CUDA_EW_SQRT)
        EW_OP_CASE(CUDA_EW_EXP)
        EW_OP_CASE(CUDA_EW_LOG)
        EW_OP_CASE(CUDA_EW_NEG)
        EW_OP_CASE(CUDA_EW_ABS)
        EW_OP_CASE(CUDA_EW_RECIPROCAL)
        EW_OP_CASE(CUDA_EW_ERF)
        EW_OP_CASE(CUDA_EW_FLOOR)
        EW_OP_CASE(CUDA_EW_CEIL)
        EW_OP_CASE(CUDA_EW_ROUND)
        EW_OP_CASE(CUDA_EW_SIGN)
        EW_OP_CASE(CUDA_EW_SIN)
        EW_OP_CASE(CUDA_EW_COS)
        EW_OP_CASE(CUDA_EW_TAN)
        EW_OP_CASE(CUDA_EW_ASIN)
        EW_OP_CASE(CUDA_EW_ACOS)
        EW_OP_CASE(CUDA_EW_ATAN)
        EW_OP_CASE(CUDA_EW_SINH)
        EW_OP_CASE(CUDA_EW_COSH)
        EW_OP_CASE(CUDA_EW_TANH)
        EW_OP_CASE(CUDA_EW_ASINH)
        EW_OP_CASE(CUDA_EW_ACOSH)
        EW_OP_CASE(CUDA_EW_ATANH)
        EW_OP_CASE(CUDA_EW_RELU)
        EW_OP_CASE(CUDA_EW_LEAKY_RELU)
        EW_OP_CASE(CUDA_EW_SIGMOID)
        EW_OP_CASE(CUDA_EW_HARD_SIGMOID)
        EW_OP_CASE(CUDA_EW_HARD_SWISH)
        EW_OP_CASE(CUDA_EW_SOFTPLUS)
        EW_OP_CASE(CUDA_EW_SOFTSIGN)
        EW_OP_CASE(CUDA_EW_ELU)
        EW_OP_CASE(CUDA_EW_SELU)
        EW_OP_CASE(CUDA_EW_CELU)
        EW_OP_CASE(CUDA_EW_THRESHOLDED_RELU)
        EW_OP_CASE(CUDA_EW_MISH)
        EW_OP_CASE(CUDA_EW_SHRINK)
        EW_OP_CASE(CUDA_EW_GELU)
        EW_OP_CASE(CUDA_EW_GELU_TANH)
        EW_OP_CASE(CUDA_EW_ISNAN)
        EW_OP_CASE(CUDA_EW_ISINF)
        EW_OP_CASE(CUDA_EW_NOT)
        EW_OP_CASE(CUDA_EW_BITWISE_NOT)
    }
#undef EW_OP_CASE
    return false;
}

// ------------------------------------------------------------------------------------------------
// Clip: bounds read on the device; absent ones are the attribute value (Clip-6) or the dtype's extreme.
template <typename T> __device__ __forceinline__ typename acc<T>::type clip_bound(const void *p, bool has_attr,
                                                                                  float attr, bool upper) {
    using A = typename acc<T>::type;
    if (p) return load(*(const T *)p);
    if (has_attr) return (A)attr;
    if constexpr (is_float_v<T>) return upper ? (A)INFINITY : (A)-INFINITY;
    else return upper ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
}

template <typename T> __global__ void clip_kernel(const T *x, T *y, int64_t n, cuda_ew_clip_bounds b) {
    using A = typename acc<T>::type;
    const A lo = clip_bound<T>(b.lo, b.attr_lo, b.attr_lo_value, false);
    const A hi = clip_bound<T>(b.hi, b.attr_hi, b.attr_hi_value, true);
    CUDA_GRID_STRIDE(i, n) {
        T xv = x[i]; // y may be x: read before write
        A v = load(xv);
        if constexpr (is_half_v<T>) {
            if (v != v) { // NaN keeps its bits
                y[i] = xv;
                continue;
            }
        }
        v = v < lo ? lo : v;
        y[i] = store<T>(v > hi ? hi : v); // lo > hi gives hi (numpy)
    }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
extern "C" bool cuda_ew_unary_supported(cuda_ew_unary_op op, cinfer_dtype t) {
    bool has = false;
    with_unary_op(op, [&](auto opc) {
        dispatch_dtype(t, [&](auto tag) { has = unary_has<decltype(opc)::value, decltype(tag)>(); });
    });
    return has;
}

extern "C" cudaError_t cuda_ew_unary(cuda_ew_unary_op op, cinfer_dtype t, const void *x, void *y, int64_t n,
                                     cuda_ew_unary_params params, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool launched = false;
    with_unary_op(op, [&](auto opc) {
        constexpr int OP = decltype(opc)::value;
        dispatch_dtype(t, [&](auto tag) {
            using Tag = decltype(tag);
            using T = typename Tag::type;
            if constexpr (unary_has<OP, Tag>()) {
                launched = true;
                if constexpr (!Tag::is_bool && vec_ok<T> && !unary_bool_out_v<OP>) {
                    constexpr int V = vec16<T>::n;
                    if (n % V == 0 && aligned16(x) && aligned16(y)) {
                        unary_vec_kernel<OP, Tag><<<grid_for((n / V + 1) / 2), kBlock, 0, stream>>>((const T *)x, (T *)y,
                                                                                                    n / V, params);
                        return;
                    }
                }
                unary_kernel<OP, Tag><<<grid_for(n), kBlock, 0, stream>>>((const T *)x, y, n, params);
            }
        });
    });
    if (!launched) return cudaErrorNotSupported;
    return cudaGetLastError();
}

extern "C" bool cuda_ew_clip_supported(cinfer_dtype t) {
    return t != CINFER_DTYPE_BOOL && dispatch_dtype(t, [](auto) {});
}

extern "C" cudaError_t cuda_ew_clip(cinfer_dtype t, const void *x, void *y, int64_t n, cuda_ew_clip_bounds bounds,
                                    cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool launched = false;
    dispatch_dtype(t, [&](auto tag) {
        using Tag = decltype(tag);
        using T = typename Tag::type;
        if constexpr (!Tag::is_bool) {
            clip_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)x, (T *)y, n, bounds);
            launched = true;
        }
    });
    if (!launched) return cudaErrorNotSupported;
    return cudaGetLastError();
}
