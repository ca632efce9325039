// Kernels of Attention: float32 staging of Q/K/V, the per-row bias/softcap/softmax pass between the QK^T and PV
// GEMMs (ops/attention_sdpa.c runs those through cuBLASLt), and the output and present-key/value copies.
//
// The row pass follows the CPU kernel (backend/cpu/attention_sdpa.c) step by step, rounding to the input type
// where the ONNX reference computes in it. Low-precision softmax sums are taken in numpy's pairwise order
// (float16) or one rounded add at a time (bfloat16), as the CPU kernel does, so ties fall on the same side.
#include <math.h>

#include "backend/cuda/kernels/attention_sdpa.h"
#include "backend/cuda/kernels/common.cuh"

using namespace cinfer_cuda;

namespace {

// Rows of up to this many scores are worked on in shared memory (with the kernel's static arrays, about 3.3 KiB,
// under the 48 KiB a launch gets without opting in).
constexpr int64_t kSmemRow = 11264;
// Leaves of the pairwise-sum tree of a shared-memory row: each leaf holds at least 64 elements.
constexpr int kMaxLeaves = 192;

__device__ __forceinline__ float rnd(int mode, float v) {
    if (mode == ATTN_RND_F16) return __half2float(__float2half_rn(v));
    if (mode == ATTN_RND_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

// attn_mask element as the CPU kernel reads it: bool True attends (0) and False masks (-inf); numbers as float.
__device__ float load_mask(const void *m, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return ((const float *)m)[i];
    case CINFER_DTYPE_BOOL: return ((const uint8_t *)m)[i] ? 0.0f : -INFINITY;
    case CINFER_DTYPE_FLOAT16: return __half2float(((const __half *)m)[i]);
    case CINFER_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)m)[i]);
    case CINFER_DTYPE_DOUBLE: return (float)((const double *)m)[i];
    case CINFER_DTYPE_INT8: return (float)(double)((const int8_t *)m)[i];
    case CINFER_DTYPE_INT16: return (float)(double)((const int16_t *)m)[i];
    case CINFER_DTYPE_INT32: return (float)(double)((const int32_t *)m)[i];
    case CINFER_DTYPE_INT64: return (float)(double)((const int64_t *)m)[i];
    case CINFER_DTYPE_UINT8: return (float)(double)((const uint8_t *)m)[i];
    case CINFER_DTYPE_UINT16: return (float)(double)((const uint16_t *)m)[i];
    case CINFER_DTYPE_UINT32: return (float)(double)((const uint32_t *)m)[i];
    case CINFER_DTYPE_UINT64: return (float)(double)((const uint64_t *)m)[i];
    default: return NAN;
    }
}

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// Reduction over the block (blockDim.x a multiple of 32); every thread gets the result. All threads must call it.
template <typename Op> __device__ float block_reduce(float v, Op op, float identity, float *red) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (int)(blockDim.x >> 5);
    __syncthreads(); // an earlier reduction's readers are done with red
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < warps ? red[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A leaf of numpy's pairwise float sum: fewer than 8 elements one by one, else 8 accumulators and a tail.
__device__ float pairwise_leaf(const float *a, int64_t n) {
    if (n < 8) {
        float r = 0.0f;
        for (int64_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    float r[8];
    for (int j = 0; j < 8; j++) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - n % 8; i += 8)
        for (int j = 0; j < 8; j++) r[j] += a[i + j];
    float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
}

// Explicit stack of the pairwise walk (in shared memory: only one thread walks, and a local-memory stack would
// be reserved for every resident thread). 40 levels cover any n below 2^39.
constexpr int kWalkDepth = 40;
struct WalkStack {
    int64_t off[kWalkDepth], len[kWalkDepth];
    float left[kWalkDepth];
    bool in_right[kWalkDepth];
};

// numpy's pairwise summation tree over n elements: ranges of <= 128 elements are leaves, longer ones split at
// n/2 rounded down to a multiple of 8 and add left + right. Visits the leaves in order (leaf(off, len) gives
// a leaf's sum) without recursion.
template <typename Leaf> __device__ float pairwise_walk(int64_t n, Leaf leaf, WalkStack &st) {
    if (n <= 128) return leaf((int64_t)0, n);
    int top = 0;
    st.off[0] = 0;
    st.len[0] = n;
    float ret = 0.0f;
    bool returning = false;
    while (top >= 0) {
        if (!returning) {
            if (st.len[top] <= 128) {
                ret = leaf(st.off[top], st.len[top]);
                top--;
                returning = true;
            } else {
                int64_t n2 = st.len[top] / 2;
                n2 -= n2 % 8;
                st.in_right[top] = false;
                st.off[top + 1] = st.off[top];
                st.len[top + 1] = n2;
                top++;
            }
        } else if (!st.in_right[top]) { // left child done: descend into the right one
            st.left[top] = ret;
            st.in_right[top] = true;
            int64_t n2 = st.len[top] / 2;
            n2 -= n2 % 8;
            st.off[top + 1] = st.off[top] + n2;
            st.len[top + 1] = st.len[top] - n2;
            top++;
            returning = false;
        } else {
            ret = st.left[top] + ret;
            top--;
        }
    }
    return ret;
}

// One block per score row (grid-stride over rows); see attn_row in backend/cpu/attention_sdpa.c for the steps.
// The row lives in shared memory when use_smem (dynamic shared size total floats), else in place in global memory.
template <typename T> __global__ void rows_kernel(attn_row_args a, bool use_smem) {
    extern __shared__ float srow[];
    __shared__ float red[32];
    __shared__ float leaf_sum[kMaxLeaves];
    __shared__ int leaf_off[kMaxLeaves], leaf_len[kMaxLeaves];
    __shared__ int num_leaves;
    __shared__ float row_sum;
    __shared__ WalkStack walk;
    const int64_t L = a.total;
    for (int64_t r = blockIdx.x; r < a.nrows; r += gridDim.x) {
        const int64_t R = a.row0 + r, i = R % a.sq, h = (R / a.sq) % a.qh, b = R / (a.sq * a.qh);
        float *g = a.scores + r * L;
        float *x = use_smem ? srow : g;
        T *qk = a.qk ? (T *)a.qk + R * L : nullptr;

        // the product rounded to the input type, then the softcap
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
            float v = rnd(a.rt, g[j]);
            if (a.softcap > 0.0f) v = rnd(a.rb, rnd(a.rb, tanhf(rnd(a.rb, v / a.softcap))) * a.softcap);
            x[j] = v;
            if (qk && a.mode <= 1) qk[j] = store<T>(v);
        }

        // the additive bias: the mask (padded with -inf past its length) and -inf outside the keys [lo, hi)
        // that the causal and window frontiers and the padding leave; a row whose bias is -inf everywhere is
        // fully masked and gives zeros
        bool all_masked = false;
        if (a.mask || a.causal || a.window || a.nonpad) {
            const int64_t off = a.has_past ? a.past : a.nonpad ? a.nonpad[b] - a.sq : 0;
            int64_t lo = 0, hi = L;
            if (a.causal && i + off + 1 < hi) hi = i + off + 1;
            if (a.window && a.right >= 0 && i + off + a.right + 1 < hi) hi = i + off + a.right + 1;
            if (a.window && a.left >= 0 && i + off - a.left > lo) lo = i + off - a.left;
            if (a.nonpad && a.nonpad[b] < hi) hi = a.nonpad[b];
            if (hi < lo) hi = lo;
            if (!a.mask) {
                for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
                    if (j < lo || j >= hi) x[j] += -INFINITY;
                all_masked = hi <= lo;
            } else {
                const int64_t mrow = b * a.ms_b + h * a.ms_h + i * a.ms_q;
                float bmax = -INFINITY, bnan = 0.0f;
                for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
                    float bv = j < a.mlen ? load_mask(a.mask, a.mask_dtype, mrow + j) : -INFINITY;
                    if (j < lo || j >= hi) bv += -INFINITY;
                    if (bv != bv) bnan = 1.0f;
                    else bmax = fmaxf(bmax, bv);
                    x[j] = rnd(a.rb, x[j] + bv);
                }
                bmax = block_reduce(bmax, MaxOp(), -INFINITY, red);
                bnan = block_reduce(bnan, MaxOp(), 0.0f, red);
                all_masked = bnan == 0.0f && bmax == -INFINITY;
            }
        }
        if (qk && a.mode == 2)
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) qk[j] = store<T>(x[j]);

        // softmax in the softmax precision; a NaN anywhere makes the row NaN
        const bool plain = a.rs == ATTN_RND_NONE && a.rt == ATTN_RND_NONE;
        float m = -INFINITY, nan = 0.0f;
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
            float v = x[j];
            if (a.rs != ATTN_RND_NONE) {
                v = rnd(a.rs, v);
                x[j] = v;
            }
            if (v != v) nan = 1.0f;
            else m = fmaxf(m, v);
        }
        m = block_reduce(m, MaxOp(), -INFINITY, red);
        nan = block_reduce(nan, MaxOp(), 0.0f, red);
        const float safe = m == -INFINITY ? 0.0f : m;
        if (nan != 0.0f || (a.empty_rows_nan && m == -INFINITY)) {
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) x[j] = NAN;
        } else if (plain) {
            float s = 0.0f;
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
                float e = expf(x[j] - safe);
                x[j] = e;
                s += e;
            }
            s = block_reduce(s, SumOp(), 0.0f, red);
            const float inv = s == 0.0f ? 1.0f : 1.0f / s;
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) x[j] *= inv;
        } else {
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) x[j] = rnd(a.rs, expf(rnd(a.rs, x[j] - safe)));
            __syncthreads();
            if (a.rs == ATTN_RND_BF16) { // bfloat16 adds round one by one (ml_dtypes' add loop)
                if (threadIdx.x == 0) {
                    float s = 0.0f;
                    for (int64_t j = 0; j < L; j++) s = rnd(ATTN_RND_BF16, s + x[j]);
                    row_sum = s;
                }
            } else if (use_smem && L > 128) { // leaves in parallel, the tree on one thread
                if (threadIdx.x == 0) {
                    int count = 0;
                    pairwise_walk(L, [&](int64_t o, int64_t len) {
                        leaf_off[count] = (int)o;
                        leaf_len[count] = (int)len;
                        count++;
                        return 0.0f;
                    }, walk);
                    num_leaves = count;
                }
                __syncthreads();
                for (int t = threadIdx.x; t < num_leaves; t += blockDim.x)
                    leaf_sum[t] = pairwise_leaf(x + leaf_off[t], leaf_len[t]);
                __syncthreads();
                if (threadIdx.x == 0) {
                    int k = 0;
                    row_sum = rnd(a.rs, pairwise_walk(L, [&](int64_t, int64_t) { return leaf_sum[k++]; }, walk));
                }
            } else {
                if (threadIdx.x == 0)
                    row_sum = rnd(a.rs, pairwise_walk(L, [&](int64_t o, int64_t len) {
                                      return pairwise_leaf(x + o, len);
                                  }, walk));
            }
            __syncthreads();
            float s = row_sum;
            if (s == 0.0f) s = 1.0f;
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) x[j] = rnd(a.rs, x[j] / s);
        }
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
            float v = all_masked && !a.empty_rows_nan ? 0.0f : x[j];
            if (a.nan_to_zero && v != v) v = 0.0f;
            if (a.rt != a.rs && a.rt != ATTN_RND_NONE) v = rnd(a.rt, v);
            if (qk && a.mode == 3) qk[j] = store<T>(v);
            g[j] = v;
        }
        __syncthreads(); // the next row reuses the shared row and the scalars
    }
}

template <typename T>
__global__ void stage_kernel(const T *src, float *dst, int64_t heads, int64_t seq, int64_t size, int64_t row_ld,
                             float scale, int mode, int64_t n) {
    CUDA_GRID_STRIDE(o, n) {
        int64_t si = o;
        if (row_ld) {  // 3-D
            const int64_t d = o % size, t = o / size, s = t % seq, bh = t / seq, h = bh % heads, b = bh / heads;
            si = (b * seq + s) * row_ld + h * size + d;
        }
        dst[o] = rnd(mode, (float)load(src[si]) * scale);
    }
}

template <typename T>
__global__ void store_kernel(const float *yf, T *y, int64_t qh, int64_t sq, int64_t hdv, bool rank3, int64_t n) {
    CUDA_GRID_STRIDE(o, n) {
        int64_t si = o;
        if (rank3) { // o walks y [batch, sq, qh, hdv]
            const int64_t d = o % hdv, t = o / hdv, h = t % qh, bs = t / qh, s = bs % sq, b = bs / sq;
            si = ((b * qh + h) * sq + s) * hdv + d;
        }
        y[o] = store<T>(yf[si]);
    }
}

template <typename U>
__global__ void present_kernel(const U *past, const U *cur, U *present, int64_t kvh, int64_t past_len, int64_t seq,
                               int64_t width, int64_t row_ld, int64_t n) {
    const int64_t total = past_len + seq;
    CUDA_GRID_STRIDE(o, n) {
        const int64_t d = o % width, t = o / width, ti = t % total, bg = t / total;
        if (ti < past_len) {
            present[o] = past[(bg * past_len + ti) * width + d];
        } else {
            const int64_t s = ti - past_len, g = bg % kvh, b = bg / kvh;
            present[o] = cur[row_ld ? (b * seq + s) * row_ld + g * width + d : (bg * seq + s) * width + d];
        }
    }
}

// Launch wrappers: the dtype dispatch macros take their body as one argument, and <<<...>>> commas would split it.
template <typename T>
void launch_stage(const void *src, float *dst, int64_t heads, int64_t seq, int64_t size, int64_t row_ld,
                  float scale, int mode, int64_t n, cudaStream_t stream) {
    stage_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)src, dst, heads, seq, size, row_ld, scale, mode,
                                                        n);
}

template <typename T>
void launch_rows(const attn_row_args &a, bool use_smem, unsigned grid, int threads, size_t smem, cudaStream_t stream) {
    rows_kernel<T><<<grid, threads, smem, stream>>>(a, use_smem);
}

template <typename T>
void launch_store(const float *yf, void *y, int64_t qh, int64_t sq, int64_t hdv, bool rank3, int64_t n,
                  cudaStream_t stream) {
    store_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(yf, (T *)y, qh, sq, hdv, rank3, n);
}

template <typename U>
void launch_present(const void *past, const void *cur, void *present, int64_t kvh, int64_t past_len, int64_t seq,
                    int64_t width, int64_t row_ld, int64_t n, cudaStream_t stream) {
    present_kernel<U><<<grid_for(n), kBlock, 0, stream>>>((const U *)past, (const U *)cur, (U *)present, kvh,
                                                          past_len, seq, width, row_ld, n);
}

} // namespace

// Q, K, V and the output are float32, float16 or bfloat16 (the CPU kernel's types).
#define ATTN_DISPATCH(DTYPE, T, BODY)                                                                             \
    switch (DTYPE) {                                                                                              \
        CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT, float, BODY)                                                          \
        CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT16, __half, BODY)                                                       \
        CUDA_DTYPE_CASE(CINFER_DTYPE_BFLOAT16, __nv_bfloat16, BODY)                                               \
    default: return cudaErrorInvalidValue;                                                                        \
    }

extern "C" cudaError_t attn_sdpa_stage(cinfer_dtype t, const void *src, float *dst, int64_t batch, int64_t heads,
                                       int64_t seq, int64_t size, int64_t row_ld, float scale, int rnd_mode,
                                       cudaStream_t stream) {
    const int64_t n = batch * heads * seq * size;
    if (n == 0) return cudaSuccess;
    ATTN_DISPATCH(t, T, launch_stage<T>(src, dst, heads, seq, size, row_ld, scale, rnd_mode, n, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_sdpa_rows(cinfer_dtype qk_dtype, const attn_row_args *args, cudaStream_t stream) {
    if (args->nrows == 0 || args->total == 0) return cudaSuccess;
    const bool use_smem = args->total <= kSmemRow;
    const size_t smem = use_smem ? (size_t)args->total * sizeof(float) : 0;
    const int threads = args->total <= 64 ? 64 : args->total <= 128 ? 128 : 256;
    const unsigned grid = (unsigned)(args->nrows < (1 << 20) ? args->nrows : (1 << 20));
    ATTN_DISPATCH(qk_dtype, T, launch_rows<T>(*args, use_smem, grid, threads, smem, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_sdpa_store(cinfer_dtype t, const float *yf, void *y, int64_t batch, int64_t qh,
                                       int64_t sq, int64_t hdv, bool rank3, cudaStream_t stream) {
    const int64_t n = batch * qh * sq * hdv;
    if (n == 0) return cudaSuccess;
    ATTN_DISPATCH(t, T, launch_store<T>(yf, y, qh, sq, hdv, rank3, n, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_sdpa_present(size_t elem_size, const void *past, const void *cur, void *present,
                                         int64_t batch, int64_t kvh, int64_t past_len, int64_t seq, int64_t width,
                                         int64_t row_ld, cudaStream_t stream) {
    const int64_t n = batch * kvh * (past_len + seq) * width;
    if (n == 0) return cudaSuccess;
    // the dispatch macros bind the element type to the name T
    CUDA_DISPATCH_BY_SIZE(elem_size, T,
                          launch_present<T>(past, cur, present, kvh, past_len, seq, width, row_ld, n, stream),
                          return cudaErrorInvalidValue);
    return cudaGetLastError();
}
