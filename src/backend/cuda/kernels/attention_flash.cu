// Fused attention for float16/bfloat16: Y = softmax(scale * Q.K^T + mask).V without the score tensor in memory.
//
// One block of 4 warps takes 64 queries of one (batch, head); each warp owns 16 of them. The block walks the keys in
// tiles of 64: K and V tiles go to shared memory, each warp forms its 16x64 score block with WMMA (tensor cores,
// float32 accumulation), adds scale and mask along the rows (coalesced), then each lane pair updates one row's
// running maximum and sum (online softmax in float32, no warp-wide reductions), writes the probabilities as T and
// rescales its float32 output row before the warp adds P.V (WMMA again). The mask, the fully
// masked rule (zeros) and NaN rows follow the Attention reference (backend/cpu/attention_sdpa.c); what differs is
// rounding only: the scores and probabilities stay float32 where the reference rounds them to T.
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include "backend/cuda/kernels/attention_flash.h"
#include "backend/cuda/kernels/common.cuh"

using namespace cinfer_cuda;
using namespace nvcuda;

namespace {

constexpr int kQueries = 64;  // queries per block
constexpr int kKeys = 64;     // keys per tile
constexpr int kWarps = 4;     // each owns kQueries / kWarps = 16 query rows
constexpr int kRows = 16;

// Shared-memory row strides (elements): padded so WMMA tiles stay 32-byte aligned and banks spread.
template <int D> struct flash_layout {
    static constexpr int ldh = D + 8;       // Q, K, V tiles (T)
    static constexpr int lds = kKeys + 4;   // scores (float)
    static constexpr int ldp = kKeys + 8;   // probabilities (T)
    static constexpr int ldo = D + 4;       // output accumulator (float)
    static constexpr size_t q_bytes = (size_t)kQueries * ldh * 2, kv_bytes = (size_t)kKeys * ldh * 2;
    static constexpr size_t s_bytes = (size_t)kWarps * kRows * lds * 4, p_bytes = (size_t)kWarps * kRows * ldp * 2;
    static constexpr size_t o_bytes = (size_t)kWarps * kRows * ldo * 4;
    static constexpr size_t bytes = q_bytes + 2 * kv_bytes + s_bytes + p_bytes + o_bytes;
};

// The additive bias of mask element j: bool True attends (0) and False masks (-inf); past mlen: -inf.
__device__ __forceinline__ float mask_bias(const attn_flash_args &a, const char *row, int64_t j) {
    if (j >= a.mlen) return -INFINITY;
    switch (a.mask_dtype) {
    case CINFER_DTYPE_FLOAT: return ((const float *)row)[j];
    case CINFER_DTYPE_FLOAT16: return __half2float(((const __half *)row)[j]);
    case CINFER_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)row)[j]);
    default: return ((const uint8_t *)row)[j] ? 0.0f : -INFINITY;
    }
}

// rows x D elements of T from src (row stride ld elements) into shared dst (stride ldh), 16 bytes at a time; rows
// from `valid` on are zeros.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int64_t ld, int rows, int valid) {
    constexpr int chunks = D / 8;  // 8 elements of 2 bytes = 16 bytes
    for (int c = threadIdx.x; c < rows * chunks; c += blockDim.x) {
        int r = c / chunks, col = (c % chunks) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < valid) v = *reinterpret_cast<const uint4 *>(src + (int64_t)r * ld + col);
        *reinterpret_cast<uint4 *>(dst + r * flash_layout<D>::ldh + col) = v;
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32) flash_attention(attn_flash_args a) {
    using L = flash_layout<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sq = reinterpret_cast<T *>(smem);
    T *sk = reinterpret_cast<T *>(smem + L::q_bytes);
    T *sv = reinterpret_cast<T *>(smem + L::q_bytes + L::kv_bytes);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *ss = reinterpret_cast<float *>(smem + L::q_bytes + 2 * L::kv_bytes) + warp * kRows * L::lds;
    T *sp = reinterpret_cast<T *>(smem + L::q_bytes + 2 * L::kv_bytes + L::s_bytes) + warp * kRows * L::ldp;
    float *so = reinterpret_cast<float *>(smem + L::q_bytes + 2 * L::kv_bytes + L::s_bytes + L::p_bytes) +
                warp * kRows * L::ldo;

    const int64_t b = blockIdx.z, h = blockIdx.y, q0 = (int64_t)blockIdx.x * kQueries;
    const int64_t kh = h / (a.qh / a.kvh);
    const T *qp = static_cast<const T *>(a.q) + b * a.q_sb + h * a.q_sh + q0 * a.q_ss;
    const T *kp = static_cast<const T *>(a.k) + b * a.kv_sb + kh * a.kv_sh;
    const T *vp = static_cast<const T *>(a.v) + b * a.kv_sb + kh * a.kv_sh;
    const int q_valid = (int)min((int64_t)kQueries, a.sq - q0);
    load_tile<T, D>(sq, qp, a.q_ss, kQueries, q_valid);
    for (int e = lane; e < kRows * L::ldo; e += 32) so[e] = 0.0f;

    // per-row state: lanes 2r and 2r + 1 both hold row r's (they split its columns: even and odd)
    const int my_row = lane >> 1, my_half = lane & 1;
    float row_max = -INFINITY, row_sum = 0.0f;
    bool row_bad = false;
    unsigned open_rows = 0;  // bit r: some mask value of row r is not -inf (lane-wide OR below)

    const char *mask_base = nullptr;
    const size_t mask_elem = a.mask_dtype == CINFER_DTYPE_FLOAT ? 4 : a.mask_dtype == CINFER_DTYPE_BOOL ? 1 : 2;
    if (a.mask) mask_base = static_cast<const char *>(a.mask) + (size_t)(b * a.ms_b + h * a.ms_h) * mask_elem;

    // K and V tiles are fetched into registers one tile ahead, so their global latency hides behind the current
    // tile's work (the kernel was bound by those waits with loads issued right before use)
    constexpr int kChunks = D / 8, kPer = kKeys * kChunks / (kWarps * 32);  // 16-byte chunks per thread
    uint4 k_next[kPer], v_next[kPer];
    auto fetch = [&](int64_t k0) {
        const int valid = (int)min((int64_t)kKeys, a.skv - k0);
#pragma unroll
        for (int u = 0; u < kPer; u++) {
            const int c = threadIdx.x + u * kWarps * 32, r = c / kChunks, col = (c % kChunks) * 8;
            const int64_t at = (k0 + r) * a.kv_ss + col;
            k_next[u] = r < valid ? *reinterpret_cast<const uint4 *>(kp + at) : make_uint4(0, 0, 0, 0);
            v_next[u] = r < valid ? *reinterpret_cast<const uint4 *>(vp + at) : make_uint4(0, 0, 0, 0);
        }
    };
    fetch(0);
    for (int64_t k0 = 0; k0 < a.skv; k0 += kKeys) {
        const int k_valid = (int)min((int64_t)kKeys, a.skv - k0);
        __syncthreads();  // the previous tile's K and V are no longer read
#pragma unroll
        for (int u = 0; u < kPer; u++) {
            const int c = threadIdx.x + u * kWarps * 32, r = c / kChunks, col = (c % kChunks) * 8;
            *reinterpret_cast<uint4 *>(sk + r * L::ldh + col) = k_next[u];
            *reinterpret_cast<uint4 *>(sv + r * L::ldh + col) = v_next[u];
        }
        __syncthreads();
        if (k0 + kKeys < a.skv) fetch(k0 + kKeys);

        // this tile's mask values, issued before the products so their latency overlaps them: element
        // t * 32 + lane is row t / 2, column lane + 32 * (t % 2)
        float bias[2 * kRows];
#pragma unroll
        for (int t = 0; t < 2 * kRows; t++) {
            const int r = t >> 1, col = lane + 32 * (t & 1);
            const int64_t i = q0 + warp * kRows + r;
            bias[t] = mask_base && i < a.sq && col < k_valid
                          ? mask_bias(a, mask_base + (size_t)(i * a.ms_q) * mask_elem, k0 + col) : 0.0f;
        }

        // S[16 x 64] = Q rows of this warp . K^T
#pragma unroll
        for (int n = 0; n < kKeys / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, sq + warp * kRows * L::ldh + kk * 16, L::ldh);
                wmma::load_matrix_sync(fb, sk + n * 16 * L::ldh + kk * 16, L::ldh);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(ss + n * 16, acc, L::lds, wmma::mem_row_major);
        }
        __syncwarp();

        // scale and bias, the whole warp along each row (coalesced); keys past the end are -inf
#pragma unroll
        for (int t = 0; t < 2 * kRows; t++) {
            const int r = t >> 1, col = lane + 32 * (t & 1);
            float v = -INFINITY;
            if (col < k_valid) {
                v = ss[r * L::lds + col] * a.scale + bias[t];
                if (!(bias[t] == -INFINITY)) open_rows |= 1u << r;  // NaN counts as open, as in the reference
            }
            ss[r * L::lds + col] = v;
        }
        __syncwarp();

        // online softmax of the tile: lane pair (2r, 2r + 1) takes row r, even and odd columns
        float x[kKeys / 2], tile_max = -INFINITY;
        bool bad = false;
#pragma unroll
        for (int c = 0; c < kKeys / 2; c++) {
            x[c] = ss[my_row * L::lds + 2 * c + my_half];
            bad = bad || x[c] != x[c];
            tile_max = fmaxf(tile_max, x[c]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        const int partner_bad = __shfl_xor_sync(0xffffffffu, (int)bad, 1);  // every lane shuffles
        row_bad = row_bad || bad || partner_bad;
        const float m_new = fmaxf(row_max, tile_max);
        float alpha = 1.0f, sum = 0.0f;
        T *prow = sp + my_row * L::ldp + my_half;
        if (m_new != -INFINITY) {  // else every score so far is -inf: nothing to add yet
            alpha = row_max == -INFINITY ? 0.0f : __expf(row_max - m_new);
#pragma unroll
            for (int c = 0; c < kKeys / 2; c++) {
                const float p = __expf(x[c] - m_new);
                sum += p;
                prow[2 * c] = store<T>(p);
            }
        } else {
#pragma unroll
            for (int c = 0; c < kKeys / 2; c++) prow[2 * c] = store<T>(0.0f);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        row_max = m_new;
        row_sum = row_sum * alpha + sum;
        float *orow = so + my_row * L::ldo + my_half;
#pragma unroll
        for (int d = 0; d < D / 2; d++) orow[2 * d] *= alpha;
        __syncwarp();

        // O[16 x D] += P[16 x 64] . V[64 x D]
#pragma unroll
        for (int n = 0; n < D / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, so + n * 16, L::ldo, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < kKeys / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, sp + kk * 16, L::ldp);
                wmma::load_matrix_sync(fb, sv + kk * 16 * L::ldh + n * 16, L::ldh);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(so + n * 16, acc, L::ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }

    // Y rows: O / sum; fully masked rows are zeros; NaN rows (a NaN score, or +inf, whose exp is NaN) are NaN or,
    // with the guard, zeros; rows whose every score is -inf are zeros, as the unfused CUDA path gives. The warp
    // writes row by row (coalesced), each row's state taken from its lane pair.
    open_rows = __reduce_or_sync(0xffffffffu, open_rows);
    const bool bad_row = row_bad || row_max == INFINITY;
    const bool zero_row = (a.mask && !((open_rows >> my_row) & 1u)) || (!bad_row && !(row_sum > 0.0f));
    const float my_scale = zero_row ? 0.0f : bad_row ? (a.nan_to_zero ? 0.0f : NAN) : 1.0f / row_sum;
    T *yp = static_cast<T *>(a.y) + b * a.y_sb + h * a.y_sh;
    for (int r = 0; r < kRows; r++) {
        const float row_scale = __shfl_sync(0xffffffffu, my_scale, 2 * r);
        const int64_t i = q0 + warp * kRows + r;
        if (i >= a.sq) break;
        for (int d = lane; d < D; d += 32) {
            // 0 * inf or 0 * NaN must still give the zero rows zeros
            const float v = row_scale == 0.0f ? 0.0f : so[r * L::ldo + d] * row_scale;
            yp[i * a.y_ss + d] = store<T>(v);
        }
    }
}

template <typename T, int D> cudaError_t launch(const attn_flash_args *a, cudaStream_t stream) {
    const size_t smem = flash_layout<D>::bytes;
    // above the 48 KiB default: opt in (a host-side attribute, set before the first launch)
    cudaError_t e = cudaFuncSetAttribute(flash_attention<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((a->sq + kQueries - 1) / kQueries), (unsigned)a->qh, (unsigned)a->batch);
    flash_attention<T, D><<<grid, kWarps * 32, smem, stream>>>(*a);
    return cudaGetLastError();
}

template <typename T> cudaError_t launch_size(const attn_flash_args *a, cudaStream_t stream) {
    switch (a->hd) {
    case 32: return launch<T, 32>(a, stream);
    case 64: return launch<T, 64>(a, stream);
    case 128: return launch<T, 128>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

extern "C" bool attn_flash_fits(cinfer_dtype t, const attn_flash_args *a) {
    if (t != CINFER_DTYPE_FLOAT16 && t != CINFER_DTYPE_BFLOAT16) return false;
    if (a->hd != 32 && a->hd != 64 && a->hd != 128) return false;
    if (a->sq <= 0 || a->skv <= 0 || a->batch <= 0 || a->batch > 65535 || a->qh <= 0 || a->qh > 65535) return false;
    if (a->kvh <= 0 || a->qh % a->kvh != 0 || (a->sq + kQueries - 1) / kQueries > INT32_MAX) return false;
    // 16-byte rows: every stride a multiple of 8 elements and the bases aligned
    const int64_t strides[] = {a->q_sb, a->q_sh, a->q_ss, a->kv_sb, a->kv_sh, a->kv_ss};
    for (int64_t s : strides)
        if (s % 8 != 0) return false;
    if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v)) return false;
    if (a->mask && a->mask_dtype != CINFER_DTYPE_FLOAT && a->mask_dtype != CINFER_DTYPE_FLOAT16 &&
        a->mask_dtype != CINFER_DTYPE_BFLOAT16 && a->mask_dtype != CINFER_DTYPE_BOOL)
        return false;
    return true;
}

extern "C" cudaError_t attn_flash_run(cinfer_dtype t, const attn_flash_args *a, cudaStream_t stream) {
    if (!attn_flash_fits(t, a)) return cudaErrorInvalidValue;
    if (t == CINFER_DTYPE_FLOAT16) return launch_size<__half>(a, stream);
    return launch_size<__nv_bfloat16>(a, stream);
}
