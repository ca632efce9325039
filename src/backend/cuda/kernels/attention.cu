// Kernels of the attention family other than Attention: RotaryEmbedding, Swish, SwiGLU, LinearAttention and
// CausalConvWithState, each following its CPU kernel (backend/cpu/attention.c).
//
// float16/bfloat16 compute in float32 and round where the CPU kernel rounds. Products and sums that the CPU
// evaluates separately use the _rn intrinsics so they are not fused into FMAs and round as there.
#include <math.h>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/common.cuh"

using namespace cinfer_cuda;

namespace {

// Whether T is float16 (CausalConvWithState rounds its sum for float16 only).
template <typename T> struct IsFloat16 { static constexpr bool value = false; };
template <> struct IsFloat16<__half> { static constexpr bool value = true; };

// v rounded to T and back (identity for float).
template <typename T> __device__ __forceinline__ float round_to(float v) { return (float)load(store<T>(v)); }

__device__ __forceinline__ float swish(float x, float alpha) { return x / (1.0f + expf(-alpha * x)); }

// Element i of a float32, float16 or bfloat16 array of runtime dtype t.
__device__ __forceinline__ float load_dyn(const void *p, cinfer_dtype t, int64_t i) {
    if (t == CINFER_DTYPE_FLOAT) return ((const float *)p)[i];
    if (t == CINFER_DTYPE_FLOAT16) return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

__device__ __forceinline__ void store_dyn(void *p, cinfer_dtype t, int64_t i, float v) {
    if (t == CINFER_DTYPE_FLOAT) ((float *)p)[i] = v;
    else if (t == CINFER_DTYPE_FLOAT16) ((__half *)p)[i] = __float2half_rn(v);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
}

struct RotaryGeom {
    int64_t heads, seq, head, half, max_pos;
    bool rank4, interleaved;
};

// One thread per output element; element c of a head row is half of the pair (i1, i2) it belongs to.
template <typename T>
__global__ void rotary_kernel(const T *x, const T *cs, const T *sn, const int64_t *pos, T *y, RotaryGeom g,
                              int64_t n) {
    CUDA_GRID_STRIDE(e, n) {
        const int64_t row = e / g.head, c = e % g.head;
        if (c >= 2 * g.half) {
            y[e] = x[e];
            continue;
        }
        // rows are (b, h, s) for 4-D and (b, s, h) for 3-D inputs
        const int64_t bs = g.rank4 ? (row / (g.heads * g.seq)) * g.seq + row % g.seq : row / g.heads;
        const int64_t p = pos ? pos[bs] : bs;
        if (pos && (p < 0 || p >= g.max_pos)) { // the CPU kernel refuses the run; here the row turns NaN
            y[e] = store<T>(NAN);
            continue;
        }
        int64_t j;
        bool first;
        if (g.interleaved) {
            j = c >> 1;
            first = (c & 1) == 0;
        } else {
            first = c < g.half;
            j = first ? c : c - g.half;
        }
        const int64_t base = row * g.head;
        const int64_t i1 = g.interleaved ? 2 * j : j, i2 = g.interleaved ? 2 * j + 1 : j + g.half;
        const float x1 = load(x[base + i1]), x2 = load(x[base + i2]);
        const float cv = load(cs[p * g.half + j]), sv = load(sn[p * g.half + j]);
        const float v = first ? round_to<T>(__fsub_rn(round_to<T>(__fmul_rn(cv, x1)), round_to<T>(__fmul_rn(sv, x2))))
                              : round_to<T>(__fadd_rn(round_to<T>(__fmul_rn(sv, x1)), round_to<T>(__fmul_rn(cv, x2))));
        y[e] = store<T>(v);
    }
}

template <typename T> __global__ void swish_kernel(const T *x, T *y, int64_t n, float alpha) {
    CUDA_GRID_STRIDE(i, n) y[i] = store<T>(swish((float)load(x[i]), alpha));
}

template <typename T> __global__ void swiglu_kernel(const T *a, const T *b, T *y, int64_t n, float alpha) {
    CUDA_GRID_STRIDE(i, n) {
        const float av = load(a[i]), bv = load(b[i]); // y may be a: read before writing
        y[i] = store<T>(swish(av, alpha) * bv);
    }
}

// LinearAttention, one block per (batch, kv head) task; the state S[dk, dv] is float32 as in the reference:
//   S *= exp(decay_t); v_t = beta_t * (v_t - S^T k_t); S += k_t v_t^T; o_t = scale * q_t^T S (per query head).
// Dynamic shared memory: kq[dk] (k_t, then q_t), vt[dv], then S when it fits.
template <typename T> __global__ void linear_kernel(attn_linear_args a) {
    extern __shared__ float sh[];
    const int64_t dk = a.dk, dv = a.dv, kvh = a.kvh, group = a.qh / a.kvh, tasks = a.batch * kvh;
    float *kq = sh, *vt = sh + dk;
    const T *q = (const T *)a.q, *k = (const T *)a.k, *v = (const T *)a.v;
    T *y = (T *)a.y;
    for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
        const int64_t b = task / kvh, g = task % kvh;
        float *S = a.state ? a.state + task * dk * dv : sh + dk + dv;
        for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x)
            S[e] = a.past ? load_dyn(a.past, a.past_dtype, task * dk * dv + e) : 0.0f;
        for (int64_t s = 0; s < a.seq; s++) {
            const int64_t bt = b * a.seq + s, koff = bt * kvh * dk + g * dk, voff = bt * kvh * dv + g * dv;
            if (a.decay)
                for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) {
                    const int64_t d = e / dv;
                    const int64_t di = a.decay_width == kvh ? bt * kvh + g : bt * a.decay_width + g * dk + d;
                    S[e] = __fmul_rn(S[e], expf(load_dyn(a.decay, a.decay_dtype, di)));
                }
            for (int64_t d = threadIdx.x; d < dk; d += blockDim.x) kq[d] = load(k[koff + d]);
            for (int64_t m = threadIdx.x; m < dv; m += blockDim.x) vt[m] = load(v[voff + m]);
            __syncthreads(); // S decayed, k_t and v_t loaded
            if (a.beta) {
                const float bb = load_dyn(a.beta, a.beta_dtype, bt * a.beta_width + (a.beta_width == 1 ? 0 : g));
                for (int64_t m = threadIdx.x; m < dv; m += blockDim.x) {
                    float r = 0.0f;
                    for (int64_t d = 0; d < dk; d++) r = __fadd_rn(r, __fmul_rn(S[d * dv + m], kq[d]));
                    vt[m] = __fmul_rn(bb, __fsub_rn(vt[m], r));
                }
                __syncthreads();
            }
            for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x)
                S[e] = __fadd_rn(S[e], __fmul_rn(kq[e / dv], vt[e % dv]));
            __syncthreads(); // S updated; kq free for q_t
            for (int64_t r = 0; r < group; r++) {
                const int64_t h = g * group + r, qoff = bt * a.qh * dk + h * dk, ooff = bt * a.qh * dv + h * dv;
                for (int64_t d = threadIdx.x; d < dk; d += blockDim.x) kq[d] = load(q[qoff + d]);
                __syncthreads();
                for (int64_t m = threadIdx.x; m < dv; m += blockDim.x) {
                    float o = 0.0f;
                    for (int64_t d = 0; d < dk; d++) o = __fadd_rn(o, __fmul_rn(kq[d], S[d * dv + m]));
                    y[ooff + m] = store<T>(__fmul_rn(a.scale, o));
                }
                __syncthreads(); // before kq and S change again
            }
        }
        if (a.state_out)
            for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x)
                store_dyn(a.state_out, a.state_dtype, task * dk * dv + e, S[e]);
        __syncthreads(); // the next task reuses the shared state
    }
}

// out[b, c, l] = bias[c] + sum_j w[c, j] * padded[b, c, l + j], padded = concat(past or zeros, x); float16
// rounds the sum and the bias add as the reference's float16 matmul and add do; SiLU runs on the rounded value.
template <typename T>
__global__ void causal_conv_kernel(const T *x, const T *w, const T *bias, const T *past, T *y, int64_t channels,
                                   int64_t len, int64_t k, bool silu, int64_t n) {
    const int64_t P = k - 1;
    CUDA_GRID_STRIDE(e, n) {
        const int64_t bc = e / len, l = e % len, c = bc % channels;
        float acc = 0.0f;
        for (int64_t j = 0; j < k; j++) {
            const int64_t p = l + j;
            const float pv = p < P ? (past ? (float)load(past[bc * P + p]) : 0.0f) : (float)load(x[bc * len + p - P]);
            acc = __fadd_rn(acc, __fmul_rn((float)load(w[c * k + j]), pv));
        }
        if (IsFloat16<T>::value) acc = round_to<T>(acc);
        if (bias) acc = __fadd_rn(acc, (float)load(bias[c]));
        acc = round_to<T>(acc);
        if (silu) acc = acc * (1.0f / (1.0f + expf(-acc)));
        y[e] = store<T>(acc);
    }
}

// present_state = the last k - 1 columns of padded, copied in the input type.
template <typename T>
__global__ void causal_state_kernel(const T *x, const T *past, T *state, int64_t len, int64_t k, int64_t n) {
    const int64_t P = k - 1;
    CUDA_GRID_STRIDE(e, n) {
        const int64_t bc = e / P, p = len + e % P;
        state[e] = p < P ? (past ? past[bc * P + p] : store<T>(0.0f)) : x[bc * len + p - P];
    }
}

// Launch wrappers: the dtype dispatch takes its body as one macro argument, and <<<...>>> commas would split it.
template <typename T>
void launch_rotary(const void *x, const void *cs, const void *sn, const int64_t *pos, void *y, const RotaryGeom &g,
                   int64_t n, cudaStream_t stream) {
    rotary_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)x, (const T *)cs, (const T *)sn, pos, (T *)y, g,
                                                         n);
}

template <typename T> void launch_swish(const void *x, void *y, int64_t n, float alpha, cudaStream_t stream) {
    swish_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)x, (T *)y, n, alpha);
}

template <typename T>
void launch_swiglu(const void *a, const void *b, void *y, int64_t n, float alpha, cudaStream_t stream) {
    swiglu_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)a, (const T *)b, (T *)y, n, alpha);
}

template <typename T>
void launch_linear(const attn_linear_args &a, unsigned grid, int threads, size_t smem, cudaStream_t stream) {
    linear_kernel<T><<<grid, threads, smem, stream>>>(a);
}

template <typename T>
void launch_causal_conv(const void *x, const void *w, const void *bias, const void *past, void *y, void *state,
                        int64_t batch, int64_t channels, int64_t len, int64_t k, bool silu, cudaStream_t stream) {
    const int64_t n = batch * channels * len, ns = batch * channels * (k - 1);
    if (n > 0)
        causal_conv_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)x, (const T *)w, (const T *)bias,
                                                                  (const T *)past, (T *)y, channels, len, k, silu, n);
    if (state && ns > 0)
        causal_state_kernel<T><<<grid_for(ns), kBlock, 0, stream>>>((const T *)x, (const T *)past, (T *)state, len, k,
                                                                    ns);
}

} // namespace

#define ATTN_DISPATCH(DTYPE, BODY)                                                                                \
    switch (DTYPE) {                                                                                              \
        CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT, float, BODY)                                                          \
        CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT16, __half, BODY)                                                       \
        CUDA_DTYPE_CASE(CINFER_DTYPE_BFLOAT16, __nv_bfloat16, BODY)                                               \
    default: return cudaErrorInvalidValue;                                                                        \
    }

extern "C" cudaError_t attn_rotary(cinfer_dtype t, const void *x, const void *cos_cache, const void *sin_cache,
                                   const int64_t *pos, void *y, int64_t rows, int64_t heads, int64_t seq,
                                   int64_t head, int64_t half, int64_t max_pos, bool rank4, bool interleaved,
                                   cudaStream_t stream) {
    const int64_t n = rows * head;
    if (n == 0) return cudaSuccess;
    const RotaryGeom g = {heads, seq, head, half, max_pos, rank4, interleaved};
    ATTN_DISPATCH(t, launch_rotary<T>(x, cos_cache, sin_cache, pos, y, g, n, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_swish(cinfer_dtype t, const void *x, void *y, int64_t n, float alpha, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    ATTN_DISPATCH(t, launch_swish<T>(x, y, n, alpha, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_swiglu(cinfer_dtype t, const void *a, const void *b, void *y, int64_t n, float alpha,
                                   cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    ATTN_DISPATCH(t, launch_swiglu<T>(a, b, y, n, alpha, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_linear(const attn_linear_args *args, cudaStream_t stream) {
    const int64_t tasks = args->batch * args->kvh;
    if (tasks == 0) return cudaSuccess;
    const int64_t floats = args->dk + args->dv + (args->state ? 0 : args->dk * args->dv);
    if (floats > ATTN_LINEAR_SMEM_FLOATS) return cudaErrorInvalidValue;
    const size_t smem = (size_t)floats * sizeof(float);
    const unsigned grid = (unsigned)(tasks < 65535 * 8 ? tasks : 65535 * 8);
    ATTN_DISPATCH(args->t, launch_linear<T>(*args, grid, 256, smem, stream));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_causal_conv(cinfer_dtype t, const void *x, const void *w, const void *bias,
                                        const void *past, void *y, void *state, int64_t batch, int64_t channels,
                                        int64_t len, int64_t k, bool silu, cudaStream_t stream) {
    ATTN_DISPATCH(t, launch_causal_conv<T>(x, w, bias, past, y, state, batch, channels, len, k, silu, stream));
    return cudaGetLastError();
}
