// Device helpers shared by the reduce family's kernels (reduce*.cu): offsets over grouped dims, warp and
// block reductions that every thread sees identically, float math by type, loads/stores of a runtime dtype.
#ifndef CINFER_CUDA_REDUCE_DEVICE_CUH
#define CINFER_CUDA_REDUCE_DEVICE_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"

namespace cinfer_cuda {
namespace red {

// Offset of row-major index idx over dims[0..n) with the given element strides (n may be 0).
__device__ __forceinline__ int64_t index_offset(int64_t idx, int n, const int64_t *dims, const int64_t *strides) {
    int64_t off = 0;
    for (int d = n - 1; d > 0; d--) {
        int64_t q = idx / dims[d];
        off += (idx - q * dims[d]) * strides[d];
        idx = q;
    }
    if (n > 0) off += idx * strides[0];
    return off;
}

// Shuffles any trivially copyable value (size a multiple of 4) word by word.
template <typename V> __device__ __forceinline__ V shfl_down(V v, int delta) {
    static_assert(sizeof(V) % 4 == 0, "shuffled values are whole 32-bit words");
    constexpr int kWords = (int)(sizeof(V) / 4);
    int w[kWords];
    memcpy(w, &v, sizeof(V));
#pragma unroll
    for (int i = 0; i < kWords; i++) w[i] = __shfl_down_sync(0xffffffffu, w[i], delta);
    memcpy(&v, w, sizeof(V));
    return v;
}

// Lane 0 gets the fold of the warp's 32 values (combine(lower lane, higher lane)); other lanes get partials.
template <typename V, typename F> __device__ __forceinline__ V warp_reduce(V v, F combine) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = combine(v, shfl_down(v, d));
    return v;
}

// Every lane of the warp gets the same fold of its 32 values (xor butterfly: lanes i and i^d combine the same
// pair, and combine is commutative, so all end with identical bits). Float and double values.
template <typename V, typename F> __device__ __forceinline__ V warp_allreduce(V v, F combine) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}

// Every thread of a 1-D block (blockDim.x a multiple of 32, at most 1024) gets the same fold of all the
// block's values: warps fold to lane 0, then each thread folds the warp results in warp order. `smem` holds
// 32 values; the leading barrier lets a block call this repeatedly with the same smem.
template <typename V, typename F> __device__ __forceinline__ V block_allreduce(V v, F combine, V *smem) {
    v = warp_reduce(v, combine);
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31), warps = (int)(blockDim.x >> 5);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < warps; w++) v = combine(v, smem[w]);
    return v;
}

struct Add {
    template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
// Max that ignores nothing special: callers keep NaN out (the Softmax rule: the row maximum skips NaN).
struct Max {
    template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return b > a ? b : a; }
};

template <typename V> __device__ __forceinline__ bool is_nan(V v) { return v != v; }

__device__ __forceinline__ float exp_t(float v) { return expf(v); }
__device__ __forceinline__ double exp_t(double v) { return exp(v); }
__device__ __forceinline__ float log_t(float v) { return logf(v); }
__device__ __forceinline__ double log_t(double v) { return log(v); }
__device__ __forceinline__ float sqrt_t(float v) { return sqrtf(v); }
__device__ __forceinline__ double sqrt_t(double v) { return sqrt(v); }
__device__ __forceinline__ float abs_t(float v) { return fabsf(v); }
__device__ __forceinline__ double abs_t(double v) { return fabs(v); }

template <typename V> __device__ __forceinline__ V pos_inf() { return (V)INFINITY; }
template <typename V> __device__ __forceinline__ V quiet_nan() { return (V)NAN; }

// Element i of a float tensor whose dtype is known only at run time (parameters, statistics outputs).
__device__ __forceinline__ double load_any(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_DOUBLE: return ((const double *)p)[i];
    case CINFER_DTYPE_FLOAT16: return (double)__half2float(((const __half *)p)[i]);
    case CINFER_DTYPE_BFLOAT16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return (double)((const float *)p)[i];
    }
}
// Single rounding for float, double and the half types (from a float value: the half types round once).
template <typename V> __device__ __forceinline__ void store_any(void *p, cinfer_dtype t, int64_t i, V v) {
    switch (t) {
    case CINFER_DTYPE_DOUBLE: ((double *)p)[i] = (double)v; break;
    case CINFER_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case CINFER_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

// Threads for one block per row of `len` elements: a power of two from 32 to 1024, about 4 elements each.
inline int row_threads(int64_t len) {
    int t = 32;
    while (t < 1024 && (int64_t)t * 4 < len) t <<= 1;
    return t;
}

// Blocks for a grid-stride loop over `items` blocks' worth of work (1 item per block).
inline unsigned blocks_for(int64_t items) {
    if (items < 1) return 1;
    return items > 65535LL * 16 ? 65535u * 16 : (unsigned)items;
}

// Values per lane for a row of `len` held in registers by one warp: 1, 2, 4, ..., 32 (len <= 1024), else 0.
inline int warp_row_values(int64_t len) {
    int k = 1;
    while (k <= 32 && (int64_t)k * 32 < len) k <<= 1;
    return k <= 32 ? k : 0;
}

// Calls f(std::integral_constant<int, K>{}) for K = warp_row_values(len); false when the row is too long.
template <class Fn> bool with_warp_row_values(int64_t len, Fn &&f) {
    switch (warp_row_values(len)) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    case 16: f(std::integral_constant<int, 16>{}); return true;
    case 32: f(std::integral_constant<int, 32>{}); return true;
    default: return false;
    }
}

// Blocks of kWarpRowThreads threads (a row per warp) for `rows` rows.
constexpr int kWarpRowThreads = 128;
inline unsigned warp_row_blocks(int64_t rows) {
    return blocks_for((rows + kWarpRowThreads / 32 - 1) / (kWarpRowThreads / 32));
}

}  // namespace red
}  // namespace cinfer_cuda

#endif
