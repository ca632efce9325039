// Kernels of the recurrent family (LSTM, GRU, RNN): the gate and state updates of one time step for every
// direction, batch row and hidden unit, plus bias folding, initial and final states. The GEMMs (input projection
// of all steps, the recurrent product per step) run through cuBLASLt from ops/recurrent.c.
//
// The arithmetic follows the CPU kernel (backend/cpu/recurrent.c) expression by expression in the compute type
// (float32, or double for double); products and sums use the _rn intrinsics so they are not fused into FMAs and
// round as the CPU's do. Per-batch sequence lengths are read on the device: rows past their length are left as
// they are (the CPU kernel skips them), and a length outside [0, seq] turns the row's outputs into NaN.
#include <math.h>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/recurrent.h"

using namespace cinfer_cuda;

namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float exp_c(float x) { return expf(x); }
__device__ __forceinline__ double exp_c(double x) { return exp(x); }
__device__ __forceinline__ float tanh_c(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_c(double x) { return tanh(x); }
__device__ __forceinline__ float log1p_c(float x) { return log1pf(x); }
__device__ __forceinline__ double log1p_c(double x) { return log1p(x); }

template <typename C> __device__ C act_apply(const recurrent_act &a, C x) {
    const C al = (C)a.alpha, be = (C)a.beta, zero = (C)0, one = (C)1;
    switch (a.kind) {
    case RECURRENT_ACT_SIGMOID: return one / (one + exp_c(-x));
    case RECURRENT_ACT_TANH: return tanh_c(x);
    case RECURRENT_ACT_RELU: return x > 0 ? x : zero;
    case RECURRENT_ACT_AFFINE: return add_rn(mul_rn(al, x), be);
    case RECURRENT_ACT_LEAKY_RELU: return x >= 0 ? x : mul_rn(al, x);
    case RECURRENT_ACT_THRESHOLDED_RELU: return x > al ? x : zero;
    case RECURRENT_ACT_SCALED_TANH: return mul_rn(al, tanh_c(mul_rn(be, x)));
    case RECURRENT_ACT_HARD_SIGMOID: {
        const C v = add_rn(mul_rn(al, x), be);
        return v < 0 ? zero : v > 1 ? one : v;
    }
    case RECURRENT_ACT_ELU: return x >= 0 ? x : mul_rn(al, exp_c(x) - one);
    case RECURRENT_ACT_SOFTSIGN: return x / (one + (x < 0 ? -x : x));
    case RECURRENT_ACT_SOFTPLUS: return x > 0 ? x + log1p_c(exp_c(-x)) : log1p_c(exp_c(x)); // no overflow for large x
    default: return x;
    }
}

template <typename C> __device__ __forceinline__ C clip_to(const rnn_step_args &a, C x) {
    if (!a.has_clip) return x;
    const C c = (C)a.clip;
    return x < -c ? -c : x > c ? c : x;
}

// One time step; one thread per (direction, batch row, hidden unit) j, which owns gates j, H + j, ... of its row.
template <typename T> __global__ void step_kernel(rnn_step_args a, int64_t n) {
    using C = typename acc<T>::type;
    const int64_t S = a.seq, B = a.batch, H = a.hidden, G = a.gates, GH = G * H;
    CUDA_GRID_STRIDE(idx, n) {
        const int64_t j = idx % H, db = idx / H, b = db % B, d = db / B;
        int64_t len = S;
        if (a.lens) len = a.lens64 ? ((const int64_t *)a.lens)[b] : (int64_t)((const int32_t *)a.lens)[b];
        const bool bad = len < 0 || len > S; // the CPU kernel refuses the run: this row runs all steps as NaN
        if (bad) len = S;
        C *tmp = (C *)a.tmp + db * H;
        if (a.step >= len) {
            if (a.phase == RNN_PHASE_GRU_RESET) tmp[j] = (C)0; // keeps the second GEMM's input defined
            continue;
        }
        const int64_t t = a.reverse || d == 1 ? len - 1 - a.step : a.step;
        const C *xr = (const C *)a.xw + (d * S * B + (a.layout ? b * S + t : t * B + b)) * GH;
        const C *bias = (const C *)a.bias + d * GH;
        C *g = (C *)a.hr + db * GH, *h = (C *)a.h + db * H;
        const recurrent_act *act = a.act[d];
        C hn, cn = (C)0;
        if (a.phase == RNN_PHASE_GRU_RESET) { // z and r; z stays in the gate buffer for the hidden phase
            const C z = act_apply(act[0], clip_to(a, add_rn(g[j], add_rn(xr[j], bias[j]))));
            const C r = act_apply(act[0], clip_to(a, add_rn(g[H + j], add_rn(xr[H + j], bias[H + j]))));
            g[j] = z;
            tmp[j] = mul_rn(r, h[j]);
            continue;
        }
        if (a.phase == RNN_PHASE_GRU_HIDDEN) {
            const C pr = ((const C *)a.tmp2)[db * H + j];
            const C gh = act_apply(act[1], clip_to(a, add_rn(add_rn(xr[2 * H + j], bias[2 * H + j]), pr)));
            const C z = g[j];
            hn = add_rn(mul_rn(sub_rn((C)1, z), gh), mul_rn(z, h[j]));
        } else if (G == 4) { // LSTM, gates i, o, f, c
            C *cp = (C *)a.c + db * H;
            const C cprev = cp[j];
            C gi = add_rn(g[j], add_rn(xr[j], bias[j]));
            C go = add_rn(g[H + j], add_rn(xr[H + j], bias[H + j]));
            C gf = add_rn(g[2 * H + j], add_rn(xr[2 * H + j], bias[2 * H + j]));
            C gc = add_rn(g[3 * H + j], add_rn(xr[3 * H + j], bias[3 * H + j]));
            const T *pd = a.p ? (const T *)a.p + d * 3 * H : nullptr;
            if (pd) {
                gi = add_rn(gi, mul_rn((C)load(pd[j]), cprev));
                gf = add_rn(gf, mul_rn((C)load(pd[2 * H + j]), cprev));
            }
            gi = act_apply(act[0], clip_to(a, gi));
            gf = a.input_forget ? sub_rn((C)1, gi) : act_apply(act[0], clip_to(a, gf));
            gc = act_apply(act[1], clip_to(a, gc));
            cn = add_rn(mul_rn(gf, cprev), mul_rn(gi, gc));
            if (pd) go = add_rn(go, mul_rn((C)load(pd[H + j]), cn));
            go = act_apply(act[0], clip_to(a, go));
            hn = mul_rn(go, act_apply(act[2], cn));
            cp[j] = bad ? (C)NAN : cn;
        } else if (G == 3) { // GRU with linear_before_reset: the recurrent h-gate product is scaled by r
            const C z = act_apply(act[0], clip_to(a, add_rn(g[j], add_rn(xr[j], bias[j]))));
            const C r = act_apply(act[0], clip_to(a, add_rn(g[H + j], add_rn(xr[H + j], bias[H + j]))));
            const C rbh = ((const C *)a.rbh)[d * H + j];
            C gh = add_rn(add_rn(xr[2 * H + j], bias[2 * H + j]), mul_rn(r, add_rn(g[2 * H + j], rbh)));
            gh = act_apply(act[1], clip_to(a, gh));
            hn = add_rn(mul_rn(sub_rn((C)1, z), gh), mul_rn(z, h[j]));
        } else { // RNN
            hn = act_apply(act[0], clip_to(a, add_rn(g[j], add_rn(xr[j], bias[j]))));
        }
        if (bad) hn = (C)NAN;
        h[j] = hn;
        if (a.y) {
            const int64_t ND = a.ndir;
            const int64_t off = a.layout ? ((b * S + t) * ND + d) * H : ((t * ND + d) * B + b) * H;
            ((T *)a.y)[off + j] = store<T>(hn);
        }
    }
}

template <typename T> __global__ void to_float_kernel(const T *src, float *dst, int64_t n) {
    CUDA_GRID_STRIDE(i, n) dst[i] = load(src[i]);
}

// bias[d][j] = Wb + Rb; GRU's hidden gate under linear_before_reset keeps Wb only and rbh = Rbh.
template <typename T>
__global__ void bias_kernel(const T *bvec, typename acc<T>::type *bias, typename acc<T>::type *rbh, int64_t gh,
                            int64_t hidden, bool gru_lbr, int64_t nbias, int64_t n) {
    using C = typename acc<T>::type;
    CUDA_GRID_STRIDE(i, n) {
        if (i < nbias) {
            const int64_t d = i / gh, j = i % gh;
            C v = (C)0;
            if (bvec) {
                const T *bd = bvec + d * 2 * gh;
                v = gru_lbr && j >= 2 * hidden ? (C)load(bd[j]) : add_rn((C)load(bd[j]), (C)load(bd[gh + j]));
            }
            bias[i] = v;
        } else {
            const int64_t k = i - nbias, d = k / hidden, j = k % hidden;
            rbh[k] = gru_lbr && bvec ? (C)load(bvec[d * 2 * gh + gh + 2 * hidden + j]) : (C)0;
        }
    }
}

// Offset of (d, b) in initial_h/initial_c/Y_h/Y_c: [nd, batch, H] for layout 0, [batch, nd, H] for layout 1.
__device__ __forceinline__ int64_t state_offset(int64_t d, int64_t b, int64_t nd, int64_t batch, int64_t hidden,
                                                int layout) {
    return layout ? (b * nd + d) * hidden : (d * batch + b) * hidden;
}

template <typename T>
__global__ void init_kernel(const T *h0, const T *c0, typename acc<T>::type *h, typename acc<T>::type *c, int64_t nd,
                            int64_t batch, int64_t hidden, int layout, int64_t n) {
    using C = typename acc<T>::type;
    CUDA_GRID_STRIDE(i, n) {
        const int64_t j = i % hidden, db = i / hidden, b = db % batch, d = db / batch;
        const int64_t off = state_offset(d, b, nd, batch, hidden, layout) + j;
        h[i] = h0 ? (C)load(h0[off]) : (C)0;
        if (c) c[i] = c0 ? (C)load(c0[off]) : (C)0;
    }
}

template <typename T>
__global__ void final_kernel(const typename acc<T>::type *h, const typename acc<T>::type *c, T *yh, T *yc, int64_t nd,
                             int64_t batch, int64_t hidden, int layout, int64_t n) {
    CUDA_GRID_STRIDE(i, n) {
        const int64_t j = i % hidden, db = i / hidden, b = db % batch, d = db / batch;
        const int64_t off = state_offset(d, b, nd, batch, hidden, layout) + j;
        if (yh) yh[off] = store<T>(h[i]);
        if (yc) yc[off] = store<T>(c[i]);
    }
}

// Launch wrappers: the dtype dispatch takes its body as one macro argument, and <<<...>>> commas would split it.
template <typename T> void launch_step(const rnn_step_args &a, int64_t n, cudaStream_t stream) {
    step_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(a, n);
}

template <typename T> void launch_to_float(const void *src, float *dst, int64_t n, cudaStream_t stream) {
    to_float_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)src, dst, n);
}

template <typename T>
void launch_bias(const void *b, void *bias, void *rbh, int64_t nd, int gates, int64_t hidden, bool lbr,
                 cudaStream_t stream) {
    using C = typename acc<T>::type;
    const int64_t gh = gates * hidden, nbias = nd * gh, n = nbias + nd * hidden;
    bias_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)b, (C *)bias, (C *)rbh, gh, hidden,
                                                       gates == 3 && lbr, nbias, n);
}

template <typename T>
void launch_init(const void *h0, const void *c0, void *h, void *c, int64_t nd, int64_t batch, int64_t hidden,
                 int layout, cudaStream_t stream) {
    using C = typename acc<T>::type;
    const int64_t n = nd * batch * hidden;
    init_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const T *)h0, (const T *)c0, (C *)h, (C *)c, nd, batch, hidden,
                                                       layout, n);
}

template <typename T>
void launch_final(const void *h, const void *c, void *yh, void *yc, int64_t nd, int64_t batch, int64_t hidden,
                  int layout, cudaStream_t stream) {
    using C = typename acc<T>::type;
    const int64_t n = nd * batch * hidden;
    final_kernel<T><<<grid_for(n), kBlock, 0, stream>>>((const C *)h, (const C *)c, (T *)yh, (T *)yc, nd, batch,
                                                        hidden, layout, n);
}

} // namespace

extern "C" cudaError_t rnn_to_float(cinfer_dtype t, const void *src, float *dst, int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    switch (t) {
        CUDA_DTYPE_CASE(CINFER_DTYPE_FLOAT16, __half, launch_to_float<T>(src, dst, n, stream))
        CUDA_DTYPE_CASE(CINFER_DTYPE_BFLOAT16, __nv_bfloat16, launch_to_float<T>(src, dst, n, stream))
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// The dispatch macros bind the element type to the name T.
extern "C" cudaError_t rnn_prepare_bias(cinfer_dtype t, const void *b, void *bias, void *rbh, int64_t nd, int gates,
                                        int64_t hidden, bool lbr, cudaStream_t stream) {
    if (nd * gates * hidden == 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(t, T, launch_bias<T>(b, bias, rbh, nd, gates, hidden, lbr, stream),
                         return cudaErrorInvalidValue);
    return cudaGetLastError();
}

extern "C" cudaError_t rnn_init_state(cinfer_dtype t, const void *h0, const void *c0, void *h, void *c, int64_t nd,
                                      int64_t batch, int64_t hidden, int layout, cudaStream_t stream) {
    if (nd * batch * hidden == 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(t, T, launch_init<T>(h0, c0, h, c, nd, batch, hidden, layout, stream),
                         return cudaErrorInvalidValue);
    return cudaGetLastError();
}

extern "C" cudaError_t rnn_step(cinfer_dtype t, const rnn_step_args *args, cudaStream_t stream) {
    const int64_t n = args->ndir * args->batch * args->hidden;
    if (n == 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(t, T, launch_step<T>(*args, n, stream), return cudaErrorInvalidValue);
    return cudaGetLastError();
}

extern "C" cudaError_t rnn_store_state(cinfer_dtype t, const void *h, const void *c, void *yh, void *yc, int64_t nd,
                                       int64_t batch, int64_t hidden, int layout, cudaStream_t stream) {
    if (nd * batch * hidden == 0 || (!yh && !yc)) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(t, T, launch_final<T>(h, c, yh, yc, nd, batch, hidden, layout, stream),
                         return cudaErrorInvalidValue);
    return cudaGetLastError();
}
