// CUDA kernels of the elementwise family's broadcasting ops: binary arithmetic, comparisons, logic, Pow (same
// and mixed dtypes), Where, plus the copy and Mean scaling the variadic ops need. Semantics follow
// backend/cpu/elementwise.c element for element: integer wrap-around, Div/Mod sign rules, shift ranges, NaN
// propagation of Min/Max, float16/bfloat16 computed in float32 and rounded once per op.
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/elementwise_internal.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::ew;

namespace {

// ------------------------------------------------------------------------------------------------
// Which (op, dtype) pairs exist: the CPU kernel table's rows.
template <int OP> constexpr bool bool_out_v = OP >= CUDA_EW_EQUAL;

template <int OP, class Tag> constexpr bool binary_has() {
    using T = typename Tag::type;
    if constexpr (Tag::is_bool) {
        return OP == CUDA_EW_EQUAL || OP == CUDA_EW_AND || OP == CUDA_EW_OR || OP == CUDA_EW_XOR;
    } else if constexpr (is_float_v<T>) {
        if (OP == CUDA_EW_POW_SCALAR) return std::is_same_v<T, float> || std::is_same_v<T, double>;
        return OP <= CUDA_EW_PRELU || (OP >= CUDA_EW_EQUAL && OP <= CUDA_EW_LESS_EQUAL);
    } else {
        if (OP == CUDA_EW_POW_SCALAR) return false;
        if (OP == CUDA_EW_PRELU) return std::is_signed_v<T>;
        return OP <= CUDA_EW_SHIFT_RIGHT || (OP >= CUDA_EW_EQUAL && OP <= CUDA_EW_LESS_EQUAL);
    }
}

// ------------------------------------------------------------------------------------------------
// Integer power with wrap-around; a negative exponent gives 1/base^|e| truncated.
__device__ __forceinline__ int64_t ipow(int64_t base, int64_t e) {
    if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)base;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}
__device__ __forceinline__ uint64_t upow(uint64_t b, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}

// numpy's float mod: the result takes the divisor's sign.
template <typename A> __device__ __forceinline__ A pymod(A x, A y) {
    A m = m_fmod(x, y);
    if (m != 0) {
        if ((y < 0) != (m < 0)) m += y;
    } else {
        m = m_copysign((A)0, y);
    }
    return m;
}

// float/double arithmetic (float16/bfloat16 arrive here as float).
template <int OP, typename A> __device__ __forceinline__ A float_apply(A x, A y) {
    if constexpr (OP == CUDA_EW_ADD) return x + y;
    else if constexpr (OP == CUDA_EW_SUB) return x - y;
    else if constexpr (OP == CUDA_EW_MUL) return x * y;
    else if constexpr (OP == CUDA_EW_DIV) return x / y;
    else if constexpr (OP == CUDA_EW_FMOD) return m_fmod(x, y);
    else if constexpr (OP == CUDA_EW_PMOD) return pymod(x, y);
    else if constexpr (OP == CUDA_EW_MAX) return (x > y || x != x) ? x : y;
    else if constexpr (OP == CUDA_EW_MIN) return (x < y || x != x) ? x : y;
    else if constexpr (OP == CUDA_EW_POW) return m_pow(x, y);
    else if constexpr (OP == CUDA_EW_POW_SCALAR) {
        // the CPU's scalar-exponent shortcuts, so both backends round alike
        if (y == (A)2) return x * x;
        if (y == (A)0.5) return m_sqrt(x);
        if constexpr (std::is_same_v<A, float>) {
            if (y == 3.0f) return x * x * x;
            if (y == 1.0f) return x;
            if (y == -1.0f) return 1.0f / x;
        }
        return m_pow(x, y);
    } else {
        static_assert(OP == CUDA_EW_PRELU, "float op");
        return x < 0 ? x * y : x;
    }
}

// Integer arithmetic: wrap-around through the unsigned twin; never a trap (x/0 = 0, MIN/-1 wraps).
template <int OP, typename T> __device__ __forceinline__ T int_apply(T x, T y) {
    using UT = utype<T>;
    constexpr bool is_signed = std::is_signed_v<T>;
    constexpr int64_t bits = 8 * (int64_t)sizeof(T);
    if constexpr (OP == CUDA_EW_ADD) return (T)((UT)x + (UT)y);
    else if constexpr (OP == CUDA_EW_SUB) return (T)((UT)x - (UT)y);
    else if constexpr (OP == CUDA_EW_MUL) return (T)(1u * (UT)x * (UT)y);
    else if constexpr (OP == CUDA_EW_DIV) {
        if (y == 0) return 0;
        if constexpr (is_signed) {
            if (y == -1) return (T)(0u - (UT)x);
        }
        return (T)(x / y);
    } else if constexpr (OP == CUDA_EW_FMOD || OP == CUDA_EW_PMOD) {
        if (y == 0) return 0;
        if constexpr (is_signed) {
            if (y == -1) return 0;
            T r = (T)(x % y);
            if (OP == CUDA_EW_PMOD && r != 0 && ((r < 0) != (y < 0))) return (T)(r + y);
            return r;
        } else {
            return (T)(x % y);
        }
    } else if constexpr (OP == CUDA_EW_MAX) return x > y ? x : y;
    else if constexpr (OP == CUDA_EW_MIN) return x < y ? x : y;
    else if constexpr (OP == CUDA_EW_POW) {
        if constexpr (is_signed) return (T)ipow((int64_t)x, (int64_t)y);
        else return (T)upow((uint64_t)x, (uint64_t)y);
    } else if constexpr (OP == CUDA_EW_PRELU) return x < 0 ? (T)(1u * (UT)x * (UT)y) : x;
    else if constexpr (OP == CUDA_EW_BITWISE_AND) return (T)(x & y);
    else if constexpr (OP == CUDA_EW_BITWISE_OR) return (T)(x | y);
    else if constexpr (OP == CUDA_EW_BITWISE_XOR) return (T)(x ^ y);
    else if constexpr (OP == CUDA_EW_SHIFT_LEFT) {
        // a negative shift or one of the bit width or more gives 0
        bool ok = (int64_t)y >= 0 && (int64_t)y < bits;
        return ok ? (T)((1u * (UT)x) << y) : (T)0;
    } else {
        static_assert(OP == CUDA_EW_SHIFT_RIGHT, "integer op");
        // out of range: filled with the sign
        bool ok = (int64_t)y >= 0 && (int64_t)y < bits;
        if (ok) return (T)(x >> y);
        if constexpr (is_signed) return x < 0 ? (T)-1 : (T)0;
        else return (T)0;
    }
}

// One output element from x (input 0) and y (input 1), both already loaded (half types as float).
template <int OP, class Tag, typename A = typename acc<typename Tag::type>::type>
__device__ __forceinline__ auto binary_apply(A x, A y) {
    using T = typename Tag::type;
    if constexpr (Tag::is_bool) {
        bool bx = x != 0, by = y != 0;
        if constexpr (OP == CUDA_EW_EQUAL) return (uint8_t)(bx == by);
        else if constexpr (OP == CUDA_EW_AND) return (uint8_t)(bx && by);
        else if constexpr (OP == CUDA_EW_OR) return (uint8_t)(bx || by);
        else return (uint8_t)(bx != by);
    } else if constexpr (OP == CUDA_EW_EQUAL) return (uint8_t)(x == y);
    else if constexpr (OP == CUDA_EW_GREATER) return (uint8_t)(x > y);
    else if constexpr (OP == CUDA_EW_GREATER_EQUAL) return (uint8_t)(x >= y);
    else if constexpr (OP == CUDA_EW_LESS) return (uint8_t)(x < y);
    else if constexpr (OP == CUDA_EW_LESS_EQUAL) return (uint8_t)(x <= y);
    else if constexpr (is_float_v<T>) return float_apply<OP, A>(x, y);
    else return int_apply<OP, T>(x, y);
}

// How a kernel finds its operands' elements: all have the output's shape (offset == index), or broadcast with
// 32-bit index math (the output has under 2^32 elements, so every offset fits), or with 64-bit.
enum { kSameShape, kBroadcast32, kBroadcast64 };

inline int index_mode(const cuda_broadcast *bc, int num_ops, int64_t n) {
    bool same = true;
    for (int k = 0; k < num_ops; k++) same = same && bc->full[k];
    if (same) return kSameShape;
    return n <= (int64_t)UINT32_MAX ? kBroadcast32 : kBroadcast64;
}

// Offsets of output index i in operands 0..K-1, one division per dim shared by all operands (a full operand's
// strides are the output's own, a one-element operand's are 0, so no special cases are needed).
template <int K, typename I> __device__ __forceinline__ void broadcast_offsets(const cuda_broadcast &bc, I i, I *off) {
#pragma unroll
    for (int k = 0; k < K; k++) off[k] = 0;
    for (int d = bc.ndim - 1; d >= 0; d--) {
        I dim = (I)bc.dims[d];
        I q = i / dim;
        I r = i - q * dim;
#pragma unroll
        for (int k = 0; k < K; k++) off[k] += r * (I)bc.stride[k][d];
        i = q;
    }
}

template <int K, int Mode> __device__ __forceinline__ void operand_offsets(const cuda_broadcast &bc, int64_t i,
                                                                            int64_t *off) {
    if constexpr (Mode == kSameShape) {
#pragma unroll
        for (int k = 0; k < K; k++) off[k] = i;
    } else if constexpr (Mode == kBroadcast32) {
        uint32_t o[K];
        broadcast_offsets<K, uint32_t>(bc, (uint32_t)i, o);
#pragma unroll
        for (int k = 0; k < K; k++) off[k] = o[k];
    } else {
        broadcast_offsets<K, int64_t>(bc, i, off);
    }
}

// No __restrict__: out may be a.
template <int OP, class Tag, int Mode>
__global__ void binary_kernel(const typename Tag::type *a, const typename Tag::type *b, void *out, cuda_broadcast bc,
                              int64_t n) {
    using T = typename Tag::type;
    CUDA_GRID_STRIDE(i, n) {
        int64_t off[2];
        operand_offsets<2, Mode>(bc, i, off);
        auto r = binary_apply<OP, Tag>(load(a[off[0]]), load(b[off[1]]));
        if constexpr (bool_out_v<OP>) ((uint8_t *)out)[i] = r;
        else ((T *)out)[i] = store<T>(r);
    }
}

// Float arithmetic (the ops BERT-style graphs run on large tensors) in 16-byte chunks of the output: operands of
// the output's shape move in one load each; broadcast ones (an attention mask, a bias) have their offsets
// computed once per chunk instead of per element, since the chunk stays in one row of the last dim. The same
// arithmetic per element as binary_kernel. out may be a or b: a chunk is read whole before it is written.
template <int OP> constexpr bool chunk_op = OP == CUDA_EW_ADD || OP == CUDA_EW_SUB || OP == CUDA_EW_MUL ||
                                            OP == CUDA_EW_DIV;

template <int OP, class Tag, bool Same>
__global__ void binary_chunk_kernel(const typename Tag::type *a, const typename Tag::type *b, typename Tag::type *out,
                                    cuda_broadcast bc, int64_t chunks) {
    using T = typename Tag::type;
    using V = vec16<T>;
    CUDA_GRID_STRIDE(c, chunks) {
        V r;
        if constexpr (Same) {
            const V va = reinterpret_cast<const V *>(a)[c], vb = reinterpret_cast<const V *>(b)[c];
#pragma unroll
            for (int k = 0; k < V::n; k++) r.v[k] = store<T>(binary_apply<OP, Tag>(load(va.v[k]), load(vb.v[k])));
        } else {
            const int last = bc.ndim - 1;
            const uint32_t sa = (uint32_t)bc.stride[0][last], sb = (uint32_t)bc.stride[1][last];
            uint32_t off[2];
            broadcast_offsets<2, uint32_t>(bc, (uint32_t)(c * V::n), off);
#pragma unroll
            for (int k = 0; k < V::n; k++)
                r.v[k] = store<T>(binary_apply<OP, Tag>(load(a[off[0] + k * sa]), load(b[off[1] + k * sb])));
        }
        reinterpret_cast<V *>(out)[c] = r;
    }
}

// Calls f(std::integral_constant<int, OP>{}) for op; false for an unknown op.
template <class F> bool with_binary_op(cuda_ew_binary_op op, F &&f) {
#define EW_OP_CASE(OP)                                                                                   \
    case OP: f(std::integral_constant<int, OP>{}); return true;
    switch (op) {
        EW_OP_CASE(CUDA_EW_ADD)
        EW_OP_CASE(CUDA_EW_SUB)
        EW_OP_CASE(CUDA_EW_MUL)
        EW_OP_CASE(CUDA_EW_DIV)
        EW_OP_CASE(CUDA_EW_FMOD)
        EW_OP_CASE(CUDA_EW_PMOD)
        EW_OP_CASE(CUDA_EW_MAX)
        EW_OP_CASE(CUDA_EW_MIN)
        EW_OP_CASE(CUDA_EW_POW)
        EW_OP_CASE(CUDA_EW_POW_SCALAR)
        EW_OP_CASE(CUDA_EW_PRELU)
        EW_OP_CASE(CUDA_EW_BITWISE_AND)
        EW_OP_CASE(CUDA_EW_BITWISE_OR)
        EW_OP_CASE(CUDA_EW_BITWISE_XOR)
        EW_OP_CASE(CUDA_EW_SHIFT_LEFT)
        EW_OP_CASE(CUDA_EW_SHIFT_RIGHT)
        EW_OP_CASE(CUDA_EW_EQUAL)
        EW_OP_CASE(CUDA_EW_GREATER)
        EW_OP_CASE(CUDA_EW_GREATER_EQUAL)
        EW_OP_CASE(CUDA_EW_LESS)
        EW_OP_CASE(CUDA_EW_LESS_EQUAL)
        EW_OP_CASE(CUDA_EW_AND)
        EW_OP_CASE(CUDA_EW_OR)
        EW_OP_CASE(CUDA_EW_XOR)
    }
#undef EW_OP_CASE
    return false;
}

// ------------------------------------------------------------------------------------------------
// Mixed-dtype Pow: element access by runtime dtype, as tensor_get_int / tensor_get_double do.
__device__ int64_t read_int(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_INT64: return ((const int64_t *)p)[i];
    case CINFER_DTYPE_INT32: return ((const int32_t *)p)[i];
    case CINFER_DTYPE_INT16: return ((const int16_t *)p)[i];
    case CINFER_DTYPE_INT8: return ((const int8_t *)p)[i];
    case CINFER_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case CINFER_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case CINFER_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case CINFER_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case CINFER_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}
__device__ double read_double(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return ((const float *)p)[i];
    case CINFER_DTYPE_DOUBLE: return ((const double *)p)[i];
    case CINFER_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case CINFER_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return (double)read_int(p, t, i);
    }
}
// double -> int64 without undefined behaviour: NaN and out-of-range values give INT64_MIN (x86's value).
__device__ __forceinline__ int64_t double_to_i64(double v) {
    if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
    return (int64_t)v;
}
__device__ void write_double(void *p, cinfer_dtype t, int64_t i, double v) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case CINFER_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    // through float, as the CPU does (two roundings)
    case CINFER_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case CINFER_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case CINFER_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)double_to_i64(v); break;
    case CINFER_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)double_to_i64(v); break;
    case CINFER_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)double_to_i64(v); break;
    case CINFER_DTYPE_INT64: ((int64_t *)p)[i] = double_to_i64(v); break;
    case CINFER_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)double_to_i64(v); break;
    case CINFER_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)double_to_i64(v); break;
    case CINFER_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)double_to_i64(v); break;
    case CINFER_DTYPE_UINT64:
        ((uint64_t *)p)[i] = v >= 9223372036854775808.0 && v < 18446744073709551616.0 ? (uint64_t)v
                                                                                      : (uint64_t)double_to_i64(v);
        break;
    default: break;
    }
}
__device__ void write_int(void *p, cinfer_dtype t, int64_t i, int64_t v) {
    switch (t) {
    case CINFER_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case CINFER_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case CINFER_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case CINFER_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
    case CINFER_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case CINFER_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case CINFER_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case CINFER_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: break;
    }
}

// pow(x, y) in double as the CPU's libm gives it: CUDA's pow may land an ulp below an exact integer power,
// which a cast to an integer output then truncates to the integer below. So integer powers below 2^64 are
// multiplied out exactly and rounded once; everything else goes to pow.
__device__ double pow_double(double x, double y) {
    if (y >= 0 && y <= 128 && y == floor(y) && x == floor(x) && fabs(x) < 18446744073709551616.0) {
        uint64_t base = (uint64_t)fabs(x), r = 1;
        int e = (int)y;
        bool overflow = false;
        if (base <= 1) {
            r = e == 0 ? 1 : base;
        } else {
            for (int k = 0; k < e && !overflow; k++) {
                overflow = __umul64hi(r, base) != 0;
                r *= base;
            }
        }
        if (!overflow) {
            double v = (double)r; // one rounding, to nearest
            return (x < 0 && (e & 1)) ? -v : v;
        }
    }
    return pow(x, y);
}

// ints: both operands integers (u64: one of them uint64); otherwise pow in double.
__global__ void pow_mixed_kernel(const void *a, cinfer_dtype ta, const void *b, cinfer_dtype tb, void *out,
                                 cuda_broadcast bc, int64_t n, bool ints, bool u64) {
    CUDA_GRID_STRIDE(i, n) {
        int64_t oa = broadcast_offset(bc, 0, i), ob = broadcast_offset(bc, 1, i);
        if (ints) {
            int64_t x = read_int(a, ta, oa), y = read_int(b, tb, ob);
            write_int(out, ta, i, u64 ? (int64_t)upow((uint64_t)x, (uint64_t)y) : ipow(x, y));
        } else {
            write_double(out, ta, i, pow_double(read_double(a, ta, oa), read_double(b, tb, ob)));
        }
    }
}

bool is_integer_dtype(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_INT8: case CINFER_DTYPE_INT16: case CINFER_DTYPE_INT32: case CINFER_DTYPE_INT64:
    case CINFER_DTYPE_UINT8: case CINFER_DTYPE_UINT16: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

// ------------------------------------------------------------------------------------------------
// Where: a pure copy, so one kernel per element size serves every dtype.
template <typename E, int Mode>
__global__ void where_kernel(const uint8_t *__restrict__ cond, const E *__restrict__ x, const E *__restrict__ y,
                             E *__restrict__ out, cuda_broadcast bc, int64_t n) {
    CUDA_GRID_STRIDE(i, n) {
        int64_t off[3];
        operand_offsets<3, Mode>(bc, i, off);
        out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
    }
}

template <typename E> __global__ void copy_kernel(const E *__restrict__ src, E *__restrict__ dst, int64_t n) {
    CUDA_GRID_STRIDE(i, n) dst[i] = src[i];
}

template <typename T> __global__ void mean_scale_kernel(T *data, int64_t n, int count) {
    CUDA_GRID_STRIDE(i, n) {
        if constexpr (std::is_same_v<T, float>) data[i] *= (float)(1.0 / count);
        else if constexpr (std::is_same_v<T, double>) data[i] /= count;
        else data[i] = store<T>(load(data[i]) / (float)count);
    }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
extern "C" bool cuda_ew_binary_supported(cuda_ew_binary_op op, cinfer_dtype t) {
    bool has = false;
    with_binary_op(op, [&](auto opc) {
        dispatch_dtype(t, [&](auto tag) { has = binary_has<decltype(opc)::value, decltype(tag)>(); });
    });
    return has;
}

extern "C" cudaError_t cuda_ew_binary(cuda_ew_binary_op op, cinfer_dtype t, const void *a, const void *b, void *out,
                                      const cuda_broadcast *bc, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool launched = false;
    int mode = index_mode(bc, 2, n);
    with_binary_op(op, [&](auto opc) {
        constexpr int OP = decltype(opc)::value;
        dispatch_dtype(t, [&](auto tag) {
            using Tag = decltype(tag);
            using T = typename Tag::type;
            if constexpr (binary_has<OP, Tag>()) {
                const T *ta = (const T *)a, *tb = (const T *)b;
                launched = true;
                if constexpr (!Tag::is_bool && vec_ok<T> && chunk_op<OP>) {
                    constexpr int V = vec16<T>::n;
                    const int64_t chunks = n / V;
                    if (mode == kSameShape && n % V == 0 && aligned16(a) && aligned16(b) && aligned16(out)) {
                        binary_chunk_kernel<OP, Tag, true><<<grid_for(chunks), kBlock, 0, stream>>>(ta, tb, (T *)out,
                                                                                                  *bc, chunks);
                        return;
                    }
                    if (mode == kBroadcast32 && bc->ndim > 0 && bc->dims[bc->ndim - 1] % V == 0 && aligned16(out)) {
                        binary_chunk_kernel<OP, Tag, false><<<grid_for(chunks), kBlock, 0, stream>>>(ta, tb, (T *)out,
                                                                                                   *bc, chunks);
                        return;
                    }
                }
                unsigned grid = grid_for(n);
                if (mode == kSameShape)
                    binary_kernel<OP, Tag, kSameShape><<<grid, kBlock, 0, stream>>>(ta, tb, out, *bc, n);
                else if (mode == kBroadcast32)
                    binary_kernel<OP, Tag, kBroadcast32><<<grid, kBlock, 0, stream>>>(ta, tb, out, *bc, n);
                else
                    binary_kernel<OP, Tag, kBroadcast64><<<grid, kBlock, 0, stream>>>(ta, tb, out, *bc, n);
            }
        });
    });
    if (!launched) return cudaErrorNotSupported;
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_ew_pow_mixed(cinfer_dtype ta, const void *a, cinfer_dtype tb, const void *b, void *out,
                                         const cuda_broadcast *bc, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool ints = is_integer_dtype(ta) && is_integer_dtype(tb);
    bool u64 = ta == CINFER_DTYPE_UINT64 || tb == CINFER_DTYPE_UINT64;
    pow_mixed_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, ta, b, tb, out, *bc, n, ints, u64);
    return cudaGetLastError();
}

template <typename E>
static void launch_where(int mode, const void *cond, const void *x, const void *y, void *out,
                         const cuda_broadcast *bc, int64_t n, cudaStream_t stream) {
    const uint8_t *c = (const uint8_t *)cond;
    const E *ex = (const E *)x, *ey = (const E *)y;
    unsigned grid = grid_for(n);
    if (mode == kSameShape)
        where_kernel<E, kSameShape><<<grid, kBlock, 0, stream>>>(c, ex, ey, (E *)out, *bc, n);
    else if (mode == kBroadcast32)
        where_kernel<E, kBroadcast32><<<grid, kBlock, 0, stream>>>(c, ex, ey, (E *)out, *bc, n);
    else
        where_kernel<E, kBroadcast64><<<grid, kBlock, 0, stream>>>(c, ex, ey, (E *)out, *bc, n);
}

extern "C" cudaError_t cuda_ew_where(size_t elem_size, const void *cond, const void *x, const void *y, void *out,
                                     const cuda_broadcast *bc, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    int mode = index_mode(bc, 3, n);
    switch (elem_size) {
    case 1: launch_where<uint8_t>(mode, cond, x, y, out, bc, n, stream); break;
    case 2: launch_where<uint16_t>(mode, cond, x, y, out, bc, n, stream); break;
    case 4: launch_where<uint32_t>(mode, cond, x, y, out, bc, n, stream); break;
    case 8: launch_where<uint64_t>(mode, cond, x, y, out, bc, n, stream); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_ew_copy(size_t elem_size, const void *src, void *dst, int64_t n, cudaStream_t stream) {
    if (n <= 0 || src == dst) return cudaSuccess;
    unsigned grid = grid_for(n);
    switch (elem_size) {
    case 1: copy_kernel<uint8_t><<<grid, kBlock, 0, stream>>>((const uint8_t *)src, (uint8_t *)dst, n); break;
    case 2: copy_kernel<uint16_t><<<grid, kBlock, 0, stream>>>((const uint16_t *)src, (uint16_t *)dst, n); break;
    case 4: copy_kernel<uint32_t><<<grid, kBlock, 0, stream>>>((const uint32_t *)src, (uint32_t *)dst, n); break;
    case 8: copy_kernel<uint64_t><<<grid, kBlock, 0, stream>>>((const uint64_t *)src, (uint64_t *)dst, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_ew_mean_scale(cinfer_dtype t, void *data, int64_t n, int count, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool launched = false;
    dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (is_float_v<T>) {
            mean_scale_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((T *)data, n, count);
            launched = true;
        }
    });
    if (!launched) return cudaErrorNotSupported;
    return cudaGetLastError();
}
