// CUDA kernels of the normalisations over contiguous rows: LayerNormalization, RMSNormalization,
// InstanceNormalization and GroupNormalization; and LRN, across channels.
//
// One block per row (a warp per row, held in registers, for rows of at most 1024): mean, then the squared
// deviations from it (two passes, as the CPU, so a large mean does not cancel the variance away), then the
// affine apply. Block-wide sums are folded in a fixed order
// that every thread sees identically. y may alias x: each element is read and written by one thread, and
// the statistics passes end behind a barrier.
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_device.cuh"

namespace cinfer_cuda {
namespace {

__device__ __forceinline__ int64_t param_offset(const cuda_norm_param &p, int64_t c) {
    return p.ndim == 0 ? c : red::index_offset(c, p.ndim, p.dims, p.strides);
}

// Mean (0 when rms) and variance of a row of n elements; every thread of the block gets the same values.
template <typename T, typename F>
__device__ __forceinline__ void row_stats(const T *xr, int64_t n, bool rms, F *smem, F *mean, F *var) {
    F m = 0;
    if (!rms) {
        F s = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += load(xr[j]);
        m = red::block_allreduce(s, red::Add{}, smem) / (F)n;
    }
    F q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        F d = load(xr[j]) - m;
        q += d * d;
    }
    *mean = m;
    *var = red::block_allreduce(q, red::Add{}, smem) / (F)n;
}

template <typename T>
__global__ void layer_norm_kernel(const T *x, void *y, cinfer_dtype y_dtype, int64_t rows, int64_t cols,
                                  cuda_norm_param scale, cuda_norm_param bias, double eps, bool rms,
                                  cuda_norm_stat mean_out, cuda_norm_stat inv_out) {
    using F = typename acc<T>::type;
    __shared__ F smem[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * cols;
        F mean, var;
        row_stats(xr, cols, rms, smem, &mean, &var);
        const F inv = (F)(1.0 / sqrt((double)var + eps)); /* in double, as the CPU */
        if (threadIdx.x == 0) {
            if (mean_out.data) red::store_any(mean_out.data, mean_out.dtype, row, mean);
            if (inv_out.data) red::store_any(inv_out.data, inv_out.dtype, row, inv);
        }
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            F v = (load(xr[j]) - mean) * inv * (F)red::load_any(scale.data, scale.dtype, param_offset(scale, j));
            if (bias.data) v += (F)red::load_any(bias.data, bias.dtype, param_offset(bias, j));
            red::store_any(y, y_dtype, row * cols + j, v);
        }
    }
}

// A warp-per-row kernel's 1/sqrt(var + eps) from its lanes' squared deviations q; lane 0 stores the statistics.
template <typename F>
__device__ __forceinline__ F warp_row_inv(F q, F mean, int cols, double eps, int lane, int64_t row,
                                          const cuda_norm_stat &mean_out, const cuda_norm_stat &inv_out) {
    const F var = red::warp_allreduce(q, red::Add{}) / (F)cols;
    const F inv = (F)(1.0 / sqrt((double)var + eps)); /* in double, as the CPU */
    if (lane == 0) {
        if (mean_out.data) red::store_any(mean_out.data, mean_out.dtype, row, mean);
        if (inv_out.data) red::store_any(inv_out.data, inv_out.dtype, row, inv);
    }
    return inv;
}

// Rows of at most 1024: one warp per row, the row read once into registers (the block-per-row kernel above read it
// three times behind barriers, ~3x below memory speed on BERT's 768-wide rows). Same statistics and affine apply.
template <typename T, int K>
__global__ void layer_norm_warp_kernel(const T *x, const T *res, void *y, cinfer_dtype y_dtype, int64_t rows, int cols,
                                       cuda_norm_param scale, cuda_norm_param bias, double eps, bool rms,
                                       cuda_norm_stat mean_out, cuda_norm_stat inv_out) {
    using F = typename acc<T>::type;
    const int lane = (int)(threadIdx.x & 31);
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += warps) {
        const T *xr = x + row * cols;
        F v[K];
        F s = 0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = lane + 32 * k;
            v[k] = j < cols ? load(xr[j]) + (res ? load(res[row * cols + j]) : F(0)) : F(0);
            s += v[k];
        }
        const F mean = rms ? F(0) : red::warp_allreduce(s, red::Add{}) / (F)cols;
        F q = 0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (lane + 32 * k < cols) {
                const F d = v[k] - mean;
                q += d * d;
            }
        }
        const F inv = warp_row_inv(q, mean, cols, eps, lane, row, mean_out, inv_out);
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = lane + 32 * k;
            if (j < cols) {
                F o = (v[k] - mean) * inv * (F)red::load_any(scale.data, scale.dtype, param_offset(scale, j));
                if (bias.data) o += (F)red::load_any(bias.data, bias.dtype, param_offset(bias, j));
                red::store_any(y, y_dtype, row * cols + j, o);
            }
        }
    }
}

// Rows of C * 32 * E elements (E = 16 bytes of T: 8 of a half type, 4 floats) with y, scale and bias contiguous in
// T: the warp-per-row kernel above with 16-byte loads and stores and no per-element type dispatch. BERT's 768-wide
// LayerNorms ran at a third of memory speed through the generic one in half precision, and at a fifth in float32
// (141 us a call at b128 on the H200).
template <typename T, int C>
__global__ void layer_norm_vec_kernel(const T *x, const T *res, T *y, int64_t rows, const T *scale, const T *bias,
                                      double eps, bool rms, cuda_norm_stat mean_out, cuda_norm_stat inv_out) {
    constexpr int E = 16 / (int)sizeof(T);
    constexpr int cols = C * 32 * E;
    const int lane = (int)(threadIdx.x & 31);
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += warps) {
        float v[C][E];
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            const int64_t at = row * cols + (c * 32 + lane) * E;
            uint4 raw = *reinterpret_cast<const uint4 *>(x + at);
            const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
            for (int k = 0; k < E; k++) v[c][k] = load(e[k]);
            if (res) {
                raw = *reinterpret_cast<const uint4 *>(res + at);
#pragma unroll
                for (int k = 0; k < E; k++) v[c][k] += load(e[k]);
            }
#pragma unroll
            for (int k = 0; k < E; k++) s += v[c][k];
        }
        const float mean = rms ? 0.0f : red::warp_allreduce(s, red::Add{}) / (float)cols;
        float q = 0.0f;
#pragma unroll
        for (int c = 0; c < C; c++)
#pragma unroll
            for (int k = 0; k < E; k++) q += (v[c][k] - mean) * (v[c][k] - mean);
        const float inv = warp_row_inv(q, mean, cols, eps, lane, row, mean_out, inv_out);
#pragma unroll
        for (int c = 0; c < C; c++) {
            const int col = (c * 32 + lane) * E;
            uint4 sraw = *reinterpret_cast<const uint4 *>(scale + col), braw = make_uint4(0, 0, 0, 0), out;
            if (bias) braw = *reinterpret_cast<const uint4 *>(bias + col);
            const T *se = reinterpret_cast<const T *>(&sraw), *be = reinterpret_cast<const T *>(&braw);
            T *oe = reinterpret_cast<T *>(&out);
#pragma unroll
            for (int k = 0; k < E; k++) oe[k] = store<T>((v[c][k] - mean) * inv * load(se[k]) + load(be[k]));
            *reinterpret_cast<uint4 *>(y + row * cols + col) = out;
        }
    }
}

template <typename T, int C>
void launch_layer_norm_vec(const void *x, const void *res, void *y, int64_t rows, cuda_norm_param scale,
                           cuda_norm_param bias, double eps, bool rms, cuda_norm_stat mean, cuda_norm_stat inv,
                           cudaStream_t stream) {
    layer_norm_vec_kernel<T, C><<<red::warp_row_blocks(rows), red::kWarpRowThreads, 0, stream>>>(
        (const T *)x, (const T *)res, (T *)y, rows, (const T *)scale.data, (const T *)bias.data, eps, rms, mean, inv);
}

// The vectorised kernel takes the call (true) when its conditions hold.
template <typename T>
bool layer_norm_vec(cinfer_dtype dt, const void *x, const void *res, cinfer_dtype y_dtype, void *y, int64_t rows,
                    int64_t cols, cuda_norm_param scale, cuda_norm_param bias, double eps, bool rms,
                    cuda_norm_stat mean, cuda_norm_stat inv, cudaStream_t stream) {
    if constexpr (sizeof(T) != 2 && !std::is_same<T, float>::value) { /* half types and float only */
        return false;
    } else {
        constexpr int lane_span = 32 * 16 / (int)sizeof(T);  // elements a warp covers with one 16-byte access a lane
        if (y_dtype != dt || scale.ndim != 0 || scale.dtype != dt || cols % lane_span != 0) return false;
        if (bias.data && (bias.ndim != 0 || bias.dtype != dt)) return false;
        const void *ptrs[] = {x, res, y, scale.data, bias.data};
        for (const void *p : ptrs)
            if (((uintptr_t)p & 15u) != 0) return false;
        const int64_t c = cols / lane_span;
        if (c < 1 || cols > 1024) return false; /* at most 32 floats a lane */
        switch (c) {
        case 1: launch_layer_norm_vec<T, 1>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 2: launch_layer_norm_vec<T, 2>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 3: launch_layer_norm_vec<T, 3>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 4: launch_layer_norm_vec<T, 4>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 5: launch_layer_norm_vec<T, 5>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 6: launch_layer_norm_vec<T, 6>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 7: launch_layer_norm_vec<T, 7>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        case 8: launch_layer_norm_vec<T, 8>(x, res, y, rows, scale, bias, eps, rms, mean, inv, stream); return true;
        default: return false;
        }
    }
}

// Rows of `segs` channels of `spatial` elements; row r is group r % groups of its batch item.
template <typename T>
__global__ void group_norm_kernel(const T *x, T *y, int64_t rows, int64_t segs, int64_t spatial, int64_t groups,
                                  bool per_group, cuda_norm_param scale, cuda_norm_param bias, double eps) {
    using F = typename acc<T>::type;
    __shared__ F smem[32];
    const int64_t cols = segs * spatial;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * cols;
        T *yr = y + row * cols;
        const int64_t g = row % groups;
        F mean, var;
        row_stats(xr, cols, false, smem, &mean, &var);
        const F inv = (F)(1.0 / sqrt((double)var + eps));
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const int64_t p = per_group ? g : g * segs + j / spatial;
            const F a = inv * (F)red::load_any(scale.data, scale.dtype, p);
            const F b = (F)red::load_any(bias.data, bias.dtype, p);
            yr[j] = store<T>((load(xr[j]) - mean) * a + b);
        }
    }
}

// LRN: one thread per output element of x [batch, channels, spatial]; its window of channels is read at the same
// spatial position, so neighbouring threads read neighbouring addresses.
template <typename T>
__global__ void lrn_kernel(const T *x, T *y, int64_t total, int64_t channels, int64_t spatial, int64_t before,
                           int64_t after, double scale, double bias, double neg_beta) {
    using F = typename acc<T>::type;
    CUDA_GRID_STRIDE(i, total) {
        const int64_t s = i % spatial, c = (i / spatial) % channels, b = i / (spatial * channels);
        const int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after >= channels ? channels - 1 : c + after;
        const T *xb = x + b * channels * spatial + s;
        F sum = 0;
        for (int64_t k = lo; k <= hi; k++) {
            const F v = load(xb[k * spatial]);
            sum += v * v;
        }
        const F base = (F)bias + (F)scale * sum;
        F factor;
        if constexpr (std::is_same<F, double>::value)
            factor = pow(base, neg_beta);
        else
            factor = powf(base, (float)neg_beta);
        y[i] = store<T>(load(x[i]) * factor);
    }
}

template <typename T>
cudaError_t run_lrn(const void *x, void *y, int64_t batch, int64_t channels, int64_t spatial, int64_t size,
                    double alpha, double beta, double bias, cudaStream_t stream) {
    const int64_t total = batch * channels * spatial, before = (size - 1) / 2, after = size - 1 - before;
    lrn_kernel<T><<<grid_for(total), kBlock, 0, stream>>>((const T *)x, (T *)y, total, channels, spatial, before,
                                                          after, alpha / (double)size, bias, -beta);
    return cudaGetLastError();
}

template <typename T>
cudaError_t run_layer_norm(cinfer_dtype dt, const void *x, const void *res, cinfer_dtype y_dtype, void *y, int64_t rows,
                           int64_t cols,
                           cuda_norm_param scale, cuda_norm_param bias, double eps, bool rms, cuda_norm_stat mean,
                           cuda_norm_stat inv, cudaStream_t stream) {
    if (layer_norm_vec<T>(dt, x, res, y_dtype, y, rows, cols, scale, bias, eps, rms, mean, inv, stream))
        return cudaGetLastError();
    if (red::with_warp_row_values(cols, [&](auto kc) {
            layer_norm_warp_kernel<T, decltype(kc)::value><<<red::warp_row_blocks(rows), red::kWarpRowThreads, 0, stream>>>(
                (const T *)x, (const T *)res, y, y_dtype, rows, (int)cols, scale, bias, eps, rms, mean, inv);
        }))
        return cudaGetLastError();
    if (res) { /* rows too long for registers: the elementwise Add into y first, then y normalised in place */
        cuda_broadcast same;
        memset(&same, 0, sizeof same);
        same.ndim = 1;
        same.dims[0] = rows * cols;
        for (int k = 0; k < 3; k++) same.stride[k][0] = 1, same.full[k] = true;
        cudaError_t err = cuda_ew_binary(CUDA_EW_ADD, dt, x, res, y, &same, rows * cols, stream);
        if (err != cudaSuccess) return err;
        x = y;
    }
    layer_norm_kernel<T><<<red::blocks_for(rows), red::row_threads(cols), 0, stream>>>(
        (const T *)x, y, y_dtype, rows, cols, scale, bias, eps, rms, mean, inv);
    return cudaGetLastError();
}

template <typename T>
cudaError_t run_group_norm(const void *x, void *y, int64_t rows, int64_t segs, int64_t spatial, int64_t groups,
                           bool per_group, cuda_norm_param scale, cuda_norm_param bias, double eps,
                           cudaStream_t stream) {
    group_norm_kernel<T><<<red::blocks_for(rows), red::row_threads(segs * spatial), 0, stream>>>(
        (const T *)x, (T *)y, rows, segs, spatial, groups, per_group, scale, bias, eps);
    return cudaGetLastError();
}

}  // namespace
}  // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_reduce_layer_norm(cinfer_dtype dt, const void *x, const void *residual,
                                              cinfer_dtype y_dtype, void *y, int64_t rows, int64_t cols,
                                              cuda_norm_param scale, cuda_norm_param bias, double eps, bool rms,
                                              cuda_norm_stat mean, cuda_norm_stat inv_std, cudaStream_t stream) {
    if (residual && y_dtype != dt) return cudaErrorInvalidValue;
    CUDA_DISPATCH_FLOATS(dt, T,
                         return run_layer_norm<T>(dt, x, residual, y_dtype, y, rows, cols, scale, bias, eps, rms, mean,
                                                  inv_std, stream),
                         return cudaErrorInvalidValue)
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_reduce_group_norm(cinfer_dtype dt, const void *x, void *y, int64_t batch,
                                              int64_t channels, int64_t spatial, int64_t groups, bool per_group,
                                              cuda_norm_param scale, cuda_norm_param bias, double eps,
                                              cudaStream_t stream) {
    const int64_t rows = batch * groups, segs = channels / groups;
    CUDA_DISPATCH_FLOATS(dt, T,
                         return run_group_norm<T>(x, y, rows, segs, spatial, groups, per_group, scale, bias, eps,
                                                  stream),
                         return cudaErrorInvalidValue)
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_reduce_lrn(cinfer_dtype dt, const void *x, void *y, int64_t batch, int64_t channels,
                                       int64_t spatial, int64_t size, double alpha, double beta, double bias,
                                       cudaStream_t stream) {
    if (size < 1 || x == y) return cudaErrorInvalidValue;
    if (batch * channels * spatial == 0) return cudaSuccess;
    CUDA_DISPATCH_FLOATS(dt, T, return run_lrn<T>(x, y, batch, channels, spatial, size, alpha, beta, bias, stream),
                         return cudaErrorInvalidValue)
    return cudaErrorInvalidValue;
}
