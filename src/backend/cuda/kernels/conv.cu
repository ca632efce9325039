// Kernels of the conv family: pad / crop / bias + Relu around cuDNN's convolutions, direct Conv and ConvTranspose
// for what cuDNN does not take, BatchNormalization, and the pools (one thread per output; no atomics anywhere).
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/conv.h"

using namespace cinfer_cuda;

// The conv family's dtypes: the float types, plus int8/uint8 (MaxPool's, and whatever the CPU stages through float).
#define CONV_DISPATCH(DTYPE, T, BODY, DEFAULT)                                                            \
    switch (DTYPE) {                                                                                      \
        CUDA_FLOAT_CASES(BODY)                                                                            \
        CUDA_DTYPE_CASE(CINFER_DTYPE_INT8, int8_t, BODY)                                                  \
        CUDA_DTYPE_CASE(CINFER_DTYPE_UINT8, uint8_t, BODY)                                                \
    default: DEFAULT;                                                                                     \
    }

namespace {

// Compute type: double for double, float for everything else (int8/uint8 as the CPU's float32 staging).
template <typename T> struct cmp { using type = typename acc<T>::type; };
template <> struct cmp<int8_t> { using type = float; };
template <> struct cmp<uint8_t> { using type = float; };

template <typename T> __device__ __forceinline__ typename cmp<T>::type ld(const T &v) {
    if constexpr (std::is_integral<T>::value) return (float)v;
    else return load(v);
}

// Integers round to nearest (even) and clamp, like the CPU's lrintf(clamp(v)); floats go through store().
template <typename T, typename A> __device__ __forceinline__ T st(A v) {
    if constexpr (std::is_integral<T>::value) {
        const float lo = std::is_signed<T>::value ? -128.0f : 0.0f, hi = std::is_signed<T>::value ? 127.0f : 255.0f;
        return (T)rintf(fminf(fmaxf((float)v, lo), hi));
    } else {
        return store<T>(v);
    }
}

__device__ __forceinline__ float c_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double c_sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float c_abs(float v) { return fabsf(v); }
__device__ __forceinline__ double c_abs(double v) { return fabs(v); }
__device__ __forceinline__ float c_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double c_pow(double a, double b) { return pow(a, b); }

// ---- pad / crop / bias ----

template <typename T>
__global__ void shift_kernel(const T *src, T *dst, int64_t total, conv_shift sh, const T *bias, int64_t channels) {
    using A = typename cmp<T>::type;
    const int64_t dsize = sh.dst[0] * sh.dst[1] * sh.dst[2], ssize = sh.src[0] * sh.src[1] * sh.src[2];
    CUDA_GRID_STRIDE(i, total) {
        const int64_t p = i / dsize, o = i % dsize;
        const int64_t o2 = o % sh.dst[2], o1 = (o / sh.dst[2]) % sh.dst[1], o0 = o / (sh.dst[2] * sh.dst[1]);
        const int64_t s0 = o0 - sh.off[0], s1 = o1 - sh.off[1], s2 = o2 - sh.off[2];
        A v = (A)0;
        if (s0 >= 0 && s0 < sh.src[0] && s1 >= 0 && s1 < sh.src[1] && s2 >= 0 && s2 < sh.src[2])
            v = ld(src[p * ssize + (s0 * sh.src[1] + s1) * sh.src[2] + s2]);
        if (bias) v += ld(bias[p % channels]);
        dst[i] = st<T>(v);
    }
}

// I: the index type (32-bit where the tensor allows: 64-bit division is slow on the GPU). Channels-last Convs call it
// with size 1, one "plane" per element.
template <typename T, typename I>
__global__ void bias_act_kernel(T *y, I total, I channels, I size, const T *bias, bool fill, bool relu,
                                const T *residual) {
    using A = typename cmp<T>::type;
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += (I)(blockDim.x * gridDim.x)) {
        A v = fill ? (A)0 : ld(y[i]);
        if (bias) v += ld(bias[(i / size) % channels]);
        if (residual) v += ld(residual[i]);
        if (relu) v = v > (A)0 ? v : (A)0;
        y[i] = st<T>(v);
    }
}

// Per-plane form for planes of at least kPlaneMin elements: blockIdx.y walks the planes (one channel each, so no
// division per element), x the elements of a plane.
constexpr int64_t kPlaneMin = 128;

template <typename T>
__global__ void bias_act_planes(T *y, int64_t planes, int64_t channels, int64_t size, const T *bias, bool fill,
                                bool relu, const T *residual) {
    using A = typename cmp<T>::type;
    for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        const A b = bias ? ld(bias[pl % channels]) : (A)0;
        T *row = y + pl * size;
        const T *res = residual ? residual + pl * size : nullptr;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < size; j += (int64_t)blockDim.x * gridDim.x) {
            A v = fill ? b : ld(row[j]) + b;
            if (res) v += ld(res[j]);
            if (relu) v = v > (A)0 ? v : (A)0;
            row[j] = st<T>(v);
        }
    }
}

inline dim3 planes_grid(int64_t planes, int64_t size) {
    int64_t gx = (size + kBlock - 1) / kBlock;
    if (gx > 4096) gx = 4096;
    return dim3((unsigned)gx, (unsigned)(planes < 65535 ? planes : 65535));
}

// ---- direct convolutions ----

// One thread per output; consecutive threads take consecutive output columns.
template <typename T>
__global__ void conv_direct_kernel(const T *x, const T *w, const T *bias, T *y, int64_t total, int64_t c, int64_t m,
                                   int64_t group, conv_geom g, bool relu) {
    using A = typename cmp<T>::type;
    const int64_t cg = c / group, mg = m / group;
    const int64_t out_size = g.out[0] * g.out[1] * g.out[2], in_size = g.in[0] * g.in[1] * g.in[2];
    const int64_t k_size = g.k[0] * g.k[1] * g.k[2];
    CUDA_GRID_STRIDE(i, total) {
        const int64_t o = i % out_size, nm = i / out_size, mi = nm % m, ni = nm / m;
        const int64_t ow = o % g.out[2], oh = (o / g.out[2]) % g.out[1], od = o / (g.out[2] * g.out[1]);
        const T *xg = x + (ni * c + (mi / mg) * cg) * in_size;
        const T *wm = w + mi * cg * k_size;
        A sum = (A)0;
        for (int64_t ci = 0; ci < cg; ci++) {
            const T *xc = xg + ci * in_size, *wc = wm + ci * k_size;
            for (int64_t kd = 0; kd < g.k[0]; kd++) {
                const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
                if (id < 0 || id >= g.in[0]) continue;
                for (int64_t kh = 0; kh < g.k[1]; kh++) {
                    const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                    if (ih < 0 || ih >= g.in[1]) continue;
                    const T *xrow = xc + (id * g.in[1] + ih) * g.in[2];
                    const T *wrow = wc + (kd * g.k[1] + kh) * g.k[2];
                    for (int64_t kw = 0; kw < g.k[2]; kw++) {
                        const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
                        if (iw < 0 || iw >= g.in[2]) continue;
                        sum += ld(xrow[iw]) * ld(wrow[kw]);
                    }
                }
            }
        }
        if (bias) sum += ld(bias[mi]);
        if (relu) sum = sum > (A)0 ? sum : (A)0;
        y[i] = st<T>(sum);
    }
}

// Gather form of ConvTranspose: output o takes input i where i * s - pb + t * d == o.
template <typename T>
__global__ void conv_transpose_direct_kernel(const T *x, const T *w, const T *bias, T *y, int64_t total, int64_t c,
                                             int64_t m, int64_t group, conv_geom g) {
    using A = typename cmp<T>::type;
    const int64_t cg = c / group, mg = m / group;
    const int64_t out_size = g.out[0] * g.out[1] * g.out[2], in_size = g.in[0] * g.in[1] * g.in[2];
    const int64_t k_size = g.k[0] * g.k[1] * g.k[2];
    CUDA_GRID_STRIDE(i, total) {
        const int64_t o = i % out_size, nm = i / out_size, mi = nm % m, ni = nm / m;
        const int64_t ow = o % g.out[2], oh = (o / g.out[2]) % g.out[1], od = o / (g.out[2] * g.out[1]);
        const int64_t gi = mi / mg, ml = mi % mg;
        A sum = bias ? ld(bias[mi]) : (A)0;
        for (int64_t ci = 0; ci < cg; ci++) {
            const int64_t cc = gi * cg + ci;
            const T *xc = x + (ni * c + cc) * in_size, *wc = w + (cc * mg + ml) * k_size;
            for (int64_t kd = 0; kd < g.k[0]; kd++) {
                const int64_t td = od + g.pb[0] - kd * g.d[0];
                if (td < 0 || td % g.s[0] != 0 || td / g.s[0] >= g.in[0]) continue;
                const int64_t id = td / g.s[0];
                for (int64_t kh = 0; kh < g.k[1]; kh++) {
                    const int64_t th = oh + g.pb[1] - kh * g.d[1];
                    if (th < 0 || th % g.s[1] != 0 || th / g.s[1] >= g.in[1]) continue;
                    const int64_t ih = th / g.s[1];
                    for (int64_t kw = 0; kw < g.k[2]; kw++) {
                        const int64_t tw = ow + g.pb[2] - kw * g.d[2];
                        if (tw < 0 || tw % g.s[2] != 0 || tw / g.s[2] >= g.in[2]) continue;
                        const int64_t iw = tw / g.s[2];
                        sum += ld(xc[(id * g.in[1] + ih) * g.in[2] + iw]) * ld(wc[(kd * g.k[1] + kh) * g.k[2] + kw]);
                    }
                }
            }
        }
        y[i] = st<T>(sum);
    }
}

// ---- pools ----

// One thread per output. The window's taps are walked directly (no divisions per tap): a tap counts as padded
// when it lies inside input + pads in every dim, and as valid when it lies inside the input. I is the index type
// of the output decomposition (32-bit when the output is small enough: 64-bit division is slow on the GPU).
template <typename T, typename I>
__global__ void pool_kernel(const T *x, T *y, int64_t *indices, int64_t total, conv_geom g, int kind, bool include_pad,
                            int64_t p, bool col_major) {
    using A = typename cmp<T>::type;
    const int64_t in_size = g.in[0] * g.in[1] * g.in[2];
    const I out1 = (I)g.out[1], out2 = (I)g.out[2], out12 = (I)(g.out[1] * g.out[2]), out0 = (I)g.out[0];
    const A pa = (A)p;
    CUDA_GRID_STRIDE(i, total) {
        const I ii = (I)i, q = ii / out12;
        const I ow = ii % out2, oh = (ii / out2) % out1, od = q % out0, pl = q / out0;
        const int64_t st0 = (int64_t)od * g.s[0] - g.pb[0], st1 = (int64_t)oh * g.s[1] - g.pb[1];
        const int64_t st2 = (int64_t)ow * g.s[2] - g.pb[2];
        const T *xc = x + (int64_t)pl * in_size;
        A acc_v = (A)0;
        int64_t best_i = -1, valid = 0, padded = 0;
        for (int64_t kd = 0; kd < g.k[0]; kd++) {
            const int64_t id = st0 + kd * g.d[0];
            if (id < -g.pb[0] || id >= g.in[0] + g.pe[0]) continue;
            const bool v0 = id >= 0 && id < g.in[0];
            for (int64_t kh = 0; kh < g.k[1]; kh++) {
                const int64_t ih = st1 + kh * g.d[1];
                if (ih < -g.pb[1] || ih >= g.in[1] + g.pe[1]) continue;
                const bool v01 = v0 && ih >= 0 && ih < g.in[1];
                const T *row = xc + (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = 0; kw < g.k[2]; kw++) {
                    const int64_t iw = st2 + kw * g.d[2];
                    if (iw < -g.pb[2] || iw >= g.in[2] + g.pe[2]) continue;
                    padded++;
                    if (!v01 || iw < 0 || iw >= g.in[2]) continue;
                    valid++;
                    const A v = ld(row[iw]);
                    if (kind == CONV_POOL_MAX) {
                        if (best_i < 0 || v > acc_v) { // the first maximum wins
                            acc_v = v;
                            best_i = col_major ? id + ih * g.in[0] + iw * g.in[0] * g.in[1]
                                               : (id * g.in[1] + ih) * g.in[2] + iw;
                        }
                    } else if (kind == CONV_POOL_AVG) {
                        acc_v += v;
                    } else if (p == 1) {
                        acc_v += c_abs(v);
                    } else if (p == 2) {
                        acc_v += v * v;
                    } else {
                        acc_v += c_pow(c_abs(v), pa);
                    }
                }
            }
        }
        A r;
        if (kind == CONV_POOL_MAX) {
            r = acc_v; // 0 when no tap lies in the input
            if (indices) indices[i] = best_i < 0 ? -1 : (int64_t)pl * in_size + best_i;
        } else if (kind == CONV_POOL_AVG) {
            const int64_t cnt = include_pad ? padded : valid;
            r = cnt > 0 ? acc_v / (A)cnt : (A)0;
        } else if (p == 1) {
            r = acc_v;
        } else if (p == 2) {
            r = c_sqrt(acc_v);
        } else {
            r = c_pow(acc_v, (A)1 / pa);
        }
        y[i] = st<T>(r);
    }
}

// The value a global pool adds for one element (sums run in double).
__device__ __forceinline__ double global_term(double v, int kind, int64_t p) {
    if (kind == CONV_POOL_AVG) return v;
    if (p == 2) return v * v;
    return p == 1 ? fabs(v) : pow(fabs(v), (double)p);
}

__device__ __forceinline__ double global_finish(double sum, int kind, int64_t p, int64_t size) {
    if (kind == CONV_POOL_AVG) return size > 0 ? sum / (double)size : 0.0;
    if (p == 2) return sqrt(sum);
    return p == 1 ? sum : pow(sum, 1.0 / (double)p);
}

// Small planes: one thread per plane. channels_last > 0: x is [N, size, channels_last] and plane pl = (n, c), so the
// threads of a warp read consecutive channels of one position together (graph/layout.c's global pools).
template <typename T>
__global__ void global_pool_thread(const T *x, T *y, int64_t planes, int64_t size, int kind, int64_t p,
                                   int64_t channels_last) {
    using A = typename cmp<T>::type;
    const int64_t step = channels_last > 0 ? channels_last : 1;
    CUDA_GRID_STRIDE(pl, planes) {
        const T *src = channels_last > 0 ? x + (pl / channels_last) * size * channels_last + pl % channels_last
                                         : x + pl * size;
        if (kind == CONV_POOL_MAX) {
            A mx = size > 0 ? ld(src[0]) : (A)0;
            for (int64_t i = 1; i < size; i++) {
                const A v = ld(src[i * step]);
                mx = v > mx ? v : mx;
            }
            y[pl] = st<T>(mx);
        } else {
            double sum = 0.0;
            for (int64_t i = 0; i < size; i++) sum += global_term((double)ld(src[i * step]), kind, p);
            y[pl] = st<T>((A)global_finish(sum, kind, p, size));
        }
    }
}

// Large planes: one block per plane, a shared-memory tree over the threads' partials.
template <typename T>
__global__ void global_pool_block(const T *x, T *y, int64_t planes, int64_t size, int kind, int64_t p) {
    using A = typename cmp<T>::type;
    __shared__ double part_sum[kBlock];
    __shared__ A part_max[kBlock];
    const int tid = threadIdx.x;
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        const T *src = x + pl * size;
        if (kind == CONV_POOL_MAX) {
            A mx = ld(src[0]);
            for (int64_t i = tid; i < size; i += blockDim.x) {
                const A v = ld(src[i]);
                mx = v > mx ? v : mx;
            }
            part_max[tid] = mx;
            __syncthreads();
            for (int s = blockDim.x / 2; s > 0; s >>= 1) {
                if (tid < s && part_max[tid + s] > part_max[tid]) part_max[tid] = part_max[tid + s];
                __syncthreads();
            }
            if (tid == 0) y[pl] = st<T>(part_max[0]);
        } else {
            double sum = 0.0;
            for (int64_t i = tid; i < size; i += blockDim.x) sum += global_term((double)ld(src[i]), kind, p);
            part_sum[tid] = sum;
            __syncthreads();
            for (int s = blockDim.x / 2; s > 0; s >>= 1) {
                if (tid < s) part_sum[tid] += part_sum[tid + s];
                __syncthreads();
            }
            if (tid == 0) y[pl] = st<T>((A)global_finish(part_sum[0], kind, p, size));
        }
        __syncthreads(); // the partials are reused by the next plane
    }
}

// Channels-last pools (x and y [N, spatial..., C]; graph/layout.c): one thread per V consecutive channels of one
// output position, so every tap is one coalesced (up to 16-byte) load per thread. I is the index type (32-bit when
// the tensors allow: 64-bit division is slow on the GPU). Max and average only, no Indices (the layout pass sends
// nothing else here); the window rules are pool_kernel's.
template <typename T, int V> struct alignas(sizeof(T) * V) vec_of { T v[V]; };

template <typename T, int V, typename I>
__global__ void pool_nhwc_kernel(const T *x, T *y, I total, I groups, conv_geom g, int kind, bool include_pad) {
    using A = typename cmp<T>::type;
    using W = vec_of<T, V>;
    const I in0 = (I)g.in[0], in1 = (I)g.in[1], in2 = (I)g.in[2], out0 = (I)g.out[0], out1 = (I)g.out[1],
            out2 = (I)g.out[2], c = groups * V;
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += (I)(blockDim.x * gridDim.x)) {
        const I grp = i % groups, q = i / groups;
        const I ow = q % out2, oh = (q / out2) % out1, od = (q / (out2 * out1)) % out0, n = q / (out2 * out1 * out0);
        const int64_t st0 = (int64_t)od * g.s[0] - g.pb[0], st1 = (int64_t)oh * g.s[1] - g.pb[1];
        const int64_t st2 = (int64_t)ow * g.s[2] - g.pb[2];
        const T *xn = x + (size_t)n * in0 * in1 * in2 * c + (size_t)grp * V;
        A acc_v[V];
        for (int e = 0; e < V; e++) acc_v[e] = (A)0;
        int valid = 0, padded = 0;
        for (int64_t kd = 0; kd < g.k[0]; kd++) {
            const int64_t id = st0 + kd * g.d[0];
            if (id < -g.pb[0] || id >= g.in[0] + g.pe[0]) continue;
            for (int64_t kh = 0; kh < g.k[1]; kh++) {
                const int64_t ih = st1 + kh * g.d[1];
                if (ih < -g.pb[1] || ih >= g.in[1] + g.pe[1]) continue;
                for (int64_t kw = 0; kw < g.k[2]; kw++) {
                    const int64_t iw = st2 + kw * g.d[2];
                    if (iw < -g.pb[2] || iw >= g.in[2] + g.pe[2]) continue;
                    padded++;
                    if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2]) continue;
                    const W w = *reinterpret_cast<const W *>(xn + (((I)id * in1 + (I)ih) * in2 + (I)iw) * c);
                    for (int e = 0; e < V; e++) {
                        const A v = ld(w.v[e]);
                        if (kind == CONV_POOL_MAX) acc_v[e] = valid == 0 || v > acc_v[e] ? v : acc_v[e];
                        else acc_v[e] += v;
                    }
                    valid++;
                }
            }
        }
        const int cnt = include_pad ? padded : valid;
        W out;
        for (int e = 0; e < V; e++)
            out.v[e] = st<T>(kind == CONV_POOL_MAX ? acc_v[e] : cnt > 0 ? acc_v[e] / (A)cnt : (A)0);
        *reinterpret_cast<W *>(y + (size_t)i * V) = out;
    }
}

// ---- BatchNormalization ----

__device__ __forceinline__ double load_any(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return ((const float *)p)[i];
    case CINFER_DTYPE_DOUBLE: return ((const double *)p)[i];
    case CINFER_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case CINFER_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return 0.0;
    }
}

__device__ __forceinline__ void store_any(void *p, cinfer_dtype t, int64_t i, double v) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case CINFER_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case CINFER_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case CINFER_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    default: break;
    }
}

// a = scale / sqrt(var + eps), shift = bias - mean * a (each rounded to float32 unless X is double).
__device__ __forceinline__ void bn_coeffs(const conv_bn_params &bp, int64_t ch, double mean, double var,
                                          bool round_float, double *table) {
    const double scale = load_any(bp.scale, bp.scale_t, ch), bias = load_any(bp.bias, bp.bias_t, ch);
    double a = scale / sqrt(var + bp.eps);
    if (round_float) a = (double)(float)a;
    double shift = bias - mean * a;
    if (round_float) shift = (double)(float)shift;
    table[2 * ch] = a;
    table[2 * ch + 1] = shift;
}

__global__ void bn_table_kernel(conv_bn_params bp, double *table, bool round_float) {
    CUDA_GRID_STRIDE(ch, bp.channels) {
        bn_coeffs(bp, ch, load_any(bp.mean, bp.mean_t, ch), load_any(bp.var, bp.var_t, ch), round_float, table);
    }
}

// Sum over the block; every thread gets it.
__device__ __forceinline__ double block_sum(double v, double *part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    const double r = part[0];
    __syncthreads();
    return r;
}

// One block per channel: mean, then the variance around it (two passes, in double, as the CPU).
template <typename T>
__global__ void bn_train_kernel(const T *x, int64_t batch, int64_t size, conv_bn_params bp, double *table,
                                void *running_mean, void *running_var, bool round_float) {
    __shared__ double part[kBlock];
    const int64_t c = bp.channels, cnt = batch * size;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double sum = 0.0;
        for (int64_t j = threadIdx.x; j < cnt; j += blockDim.x)
            sum += (double)ld(x[((j / size) * c + ch) * size + j % size]);
        const double mu = cnt > 0 ? block_sum(sum, part) / (double)cnt : 0.0;
        double sq = 0.0;
        for (int64_t j = threadIdx.x; j < cnt; j += blockDim.x) {
            const double d = (double)ld(x[((j / size) * c + ch) * size + j % size]) - mu;
            sq += d * d;
        }
        const double var = cnt > 0 ? block_sum(sq, part) / (double)cnt : 0.0;
        if (threadIdx.x == 0) {
            bn_coeffs(bp, ch, mu, var, round_float, table);
            const double mom = bp.momentum;
            if (running_mean)
                store_any(running_mean, bp.mean_t, ch, load_any(bp.mean, bp.mean_t, ch) * mom + mu * (1.0 - mom));
            if (running_var)
                store_any(running_var, bp.mean_t, ch, load_any(bp.var, bp.var_t, ch) * mom + var * (1.0 - mom));
        }
    }
}

template <typename T>
__global__ void bn_apply_kernel(const T *x, T *y, int64_t total, int64_t c, int64_t size, const double *table) {
    using A = typename cmp<T>::type;
    CUDA_GRID_STRIDE(i, total) {
        const int64_t ch = (i / size) % c;
        y[i] = st<T>(ld(x[i]) * (A)table[2 * ch] + (A)table[2 * ch + 1]);
    }
}

template <typename T>
__global__ void bn_apply_planes(const T *x, T *y, int64_t planes, int64_t c, int64_t size, const double *table) {
    using A = typename cmp<T>::type;
    for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        const int64_t ch = pl % c;
        const A a = (A)table[2 * ch], b = (A)table[2 * ch + 1];
        const T *src = x + pl * size;
        T *dst = y + pl * size;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < size; j += (int64_t)blockDim.x * gridDim.x)
            dst[j] = st<T>(ld(src[j]) * a + b);
    }
}

// ---- host-side launch helpers (the dispatch macros split their arguments at commas: <<<...>>> sits here) ----

template <typename T>
void launch_shift(const void *src, void *dst, int64_t total, const conv_shift &sh, const void *bias, int64_t channels,
                  cudaStream_t stream) {
    shift_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)src, (T *)dst, total, sh, (const T *)bias,
                                                             channels);
}

template <typename T>
void launch_bias_act(void *y, int64_t total, int64_t channels, int64_t size, const void *bias, bool fill, bool relu,
                     const void *residual, cudaStream_t stream) {
    if (size >= kPlaneMin)
        bias_act_planes<T><<<planes_grid(total / size, size), kBlock, 0, stream>>>((T *)y, total / size, channels, size,
                                                                                    (const T *)bias, fill, relu,
                                                                                    (const T *)residual);
    else if (total <= INT32_MAX)
        bias_act_kernel<T, uint32_t><<<grid_for(total), kBlock, 0, stream>>>(
            (T *)y, (uint32_t)total, (uint32_t)channels, (uint32_t)size, (const T *)bias, fill, relu, (const T *)residual);
    else
        bias_act_kernel<T, int64_t><<<grid_for(total), kBlock, 0, stream>>>((T *)y, total, channels, size,
                                                                             (const T *)bias, fill, relu,
                                                                             (const T *)residual);
}

template <typename T>
void launch_direct(const void *x, const void *w, const void *bias, void *y, int64_t total, int64_t c, int64_t m,
                   int64_t group, const conv_geom &g, bool relu, cudaStream_t stream) {
    conv_direct_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (const T *)w, (const T *)bias, (T *)y,
                                                                   total, c, m, group, g, relu);
}

template <typename T>
void launch_transpose_direct(const void *x, const void *w, const void *bias, void *y, int64_t total, int64_t c,
                             int64_t m, int64_t group, const conv_geom &g, cudaStream_t stream) {
    conv_transpose_direct_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (const T *)w,
                                                                             (const T *)bias, (T *)y, total, c, m,
                                                                             group, g);
}

template <typename T>
void launch_pool(int kind, const void *x, void *y, int64_t *indices, int64_t total, const conv_geom &g,
                 bool include_pad, int64_t p, bool col_major, cudaStream_t stream) {
    if (total <= INT32_MAX)
        pool_kernel<T, uint32_t><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (T *)y, indices, total, g, kind,
                                                                          include_pad, p, col_major);
    else
        pool_kernel<T, int64_t><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (T *)y, indices, total, g, kind,
                                                                         include_pad, p, col_major);
}

// Planes up to this size reduce in one thread each; larger ones in a block each.
constexpr int64_t kGlobalThreadMax = 64;

template <typename T>
void launch_global_pool(int kind, const void *x, void *y, int64_t planes, int64_t size, int64_t p,
                        cudaStream_t stream) {
    if (size <= kGlobalThreadMax) {
        global_pool_thread<T><<<grid_for(planes), kBlock, 0, stream>>>((const T *)x, (T *)y, planes, size, kind, p, 0);
    } else {
        const unsigned blocks = (unsigned)(planes < 65535LL * 8 ? planes : 65535LL * 8);
        global_pool_block<T><<<blocks, kBlock, 0, stream>>>((const T *)x, (T *)y, planes, size, kind, p);
    }
}

template <typename T>
void launch_bn_train(const void *x, int64_t batch, int64_t size, const conv_bn_params &bp, double *table,
                     void *running_mean, void *running_var, bool round_float, cudaStream_t stream) {
    const unsigned blocks = (unsigned)(bp.channels < 65535LL * 8 ? bp.channels : 65535LL * 8);
    bn_train_kernel<T><<<blocks, kBlock, 0, stream>>>((const T *)x, batch, size, bp, table, running_mean, running_var,
                                                       round_float);
}

template <typename T>
void launch_bn_apply(const void *x, void *y, int64_t total, int64_t c, int64_t size, const double *table,
                     cudaStream_t stream) {
    if (size >= kPlaneMin)
        bn_apply_planes<T><<<planes_grid(total / size, size), kBlock, 0, stream>>>((const T *)x, (T *)y, total / size, c,
                                                                                    size, table);
    else
        bn_apply_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (T *)y, total, c, size, table);
}

}  // namespace

extern "C" cudaError_t conv_launch_shift(cinfer_dtype dtype, const void *src, void *dst, int64_t planes, conv_shift sh,
                                         const void *bias, int64_t channels, cudaStream_t stream) {
    const int64_t total = planes * sh.dst[0] * sh.dst[1] * sh.dst[2];
    if (total == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_shift<T>(src, dst, total, sh, bias, channels, stream), return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_bias_act(cinfer_dtype dtype, void *y, int64_t planes, int64_t channels,
                                            int64_t plane_size, const void *bias, bool fill, bool relu,
                                            const void *residual, cudaStream_t stream) {
    const int64_t total = planes * plane_size;
    if (total == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_bias_act<T>(y, total, channels, plane_size, bias, fill, relu, residual, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_direct(cinfer_dtype dtype, const void *x, const void *w, const void *bias, void *y,
                                          int64_t batch, int64_t c, int64_t m, int64_t group, conv_geom g, bool relu,
                                          cudaStream_t stream) {
    const int64_t total = batch * m * g.out[0] * g.out[1] * g.out[2];
    if (total == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_direct<T>(x, w, bias, y, total, c, m, group, g, relu, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_transpose_direct(cinfer_dtype dtype, const void *x, const void *w, const void *bias,
                                                    void *y, int64_t batch, int64_t c, int64_t m, int64_t group,
                                                    conv_geom g, cudaStream_t stream) {
    const int64_t total = batch * m * g.out[0] * g.out[1] * g.out[2];
    if (total == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_transpose_direct<T>(x, w, bias, y, total, c, m, group, g, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_pool(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t *indices,
                                        int64_t planes, conv_geom g, bool include_pad, int64_t p, bool col_major,
                                        cudaStream_t stream) {
    const int64_t total = planes * g.out[0] * g.out[1] * g.out[2];
    if (total == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_pool<T>(kind, x, y, indices, total, g, include_pad, p, col_major, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_global_pool(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t planes,
                                               int64_t size, int64_t p, cudaStream_t stream) {
    if (planes == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_global_pool<T>(kind, x, y, planes, size, p, stream), return cudaErrorInvalidValue)
    return cudaGetLastError();
}

template <typename T, int V>
void launch_pool_nhwc(int kind, const void *x, void *y, int64_t batch, int64_t channels, const conv_geom &g,
                      bool include_pad, cudaStream_t stream) {
    const int64_t groups = channels / V, total = batch * g.out[0] * g.out[1] * g.out[2] * groups;
    const int64_t elements = batch * channels * (g.in_size > g.out_size ? g.in_size : g.out_size);
    if (elements <= INT32_MAX)
        pool_nhwc_kernel<T, V, uint32_t><<<grid_for(total), kBlock, 0, stream>>>(
            (const T *)x, (T *)y, (uint32_t)total, (uint32_t)groups, g, kind, include_pad);
    else
        pool_nhwc_kernel<T, V, int64_t><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (T *)y, total, groups, g,
                                                                                kind, include_pad);
}

// 16-byte loads where the channel count allows them
template <typename T>
void launch_pool_nhwc_any(int kind, const void *x, void *y, int64_t batch, int64_t channels, const conv_geom &g,
                          bool include_pad, cudaStream_t stream) {
    constexpr int V = 16 / sizeof(T) > 0 ? (int)(16 / sizeof(T)) : 1;
    if (channels % V == 0) launch_pool_nhwc<T, V>(kind, x, y, batch, channels, g, include_pad, stream);
    else launch_pool_nhwc<T, 1>(kind, x, y, batch, channels, g, include_pad, stream);
}

extern "C" cudaError_t conv_launch_pool_nhwc(cinfer_dtype dtype, int kind, const void *x, void *y, int64_t batch,
                                             int64_t channels, conv_geom g, bool include_pad, cudaStream_t stream) {
    if (batch * g.out[0] * g.out[1] * g.out[2] * channels == 0) return cudaSuccess;
    if (kind != CONV_POOL_MAX && kind != CONV_POOL_AVG) return cudaErrorInvalidValue;
    CONV_DISPATCH(dtype, T, launch_pool_nhwc_any<T>(kind, x, y, batch, channels, g, include_pad, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_global_pool_nhwc(cinfer_dtype dtype, int kind, const void *x, void *y,
                                                    int64_t batch, int64_t channels, int64_t size, int64_t p,
                                                    cudaStream_t stream) {
    if (batch * channels == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T,
                  (global_pool_thread<T><<<grid_for(batch * channels), kBlock, 0, stream>>>(
                      (const T *)x, (T *)y, batch * channels, size, kind, p, channels)),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_bn_table(cinfer_dtype x_dtype, conv_bn_params bp, double *table,
                                            cudaStream_t stream) {
    if (bp.channels == 0) return cudaSuccess;
    bn_table_kernel<<<grid_for(bp.channels), kBlock, 0, stream>>>(bp, table, x_dtype != CINFER_DTYPE_DOUBLE);
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_bn_train(cinfer_dtype dtype, const void *x, int64_t batch, int64_t size,
                                            conv_bn_params bp, double *table, void *running_mean, void *running_var,
                                            cudaStream_t stream) {
    if (bp.channels == 0) return cudaSuccess;
    const bool round_float = dtype != CINFER_DTYPE_DOUBLE;
    CONV_DISPATCH(dtype, T,
                  launch_bn_train<T>(x, batch, size, bp, table, running_mean, running_var, round_float, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}

extern "C" cudaError_t conv_launch_bn_apply(cinfer_dtype dtype, const void *x, void *y, int64_t total,
                                            int64_t channels, int64_t size, const double *table, cudaStream_t stream) {
    if (total == 0) return cudaSuccess;
    CONV_DISPATCH(dtype, T, launch_bn_apply<T>(x, y, total, channels, size, table, stream),
                  return cudaErrorInvalidValue)
    return cudaGetLastError();
}
