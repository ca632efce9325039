// Fused attention for float32: Y = softmax(scale * Q.K^T + mask).V without the score tensor in memory, on the FMA
// units (float32 sessions have no tensor-core path: TF32 is opt-in, and its products would not be float32's).
//
// A block of 128 threads takes 64 queries of one (batch, head) and walks the keys in tiles of 64. Q, K and V go to
// shared memory with cp.async in three streams of groups: Q with the first K; each V while its tile's scores are
// computed; each next K while this tile's P.V runs, so neither product waits for its operand's load. Thread
// (ty, tx) of a 16 x 8 grid owns query rows ty + 16i (i < 4): their scores at keys tx + 8j (j < 8) and their output
// at head columns 4tx + 32c onwards (c < D / 32). Both products are register tiles, each 16-byte operand load
// feeding 16 FMAs (12 loads a warp for 128 FMAs a step of 4), and a warp's loads touch each shared-memory bank once
// (rows padded so 4 query rows, 8 key rows or a 128-byte row segment fall in distinct banks). A row's softmax state
// (running max and sum, the output's rescaling) stays with its 8 threads, joined by shuffles; P goes through shared
// memory to the threads of the output columns. The mask, the fully masked rule (zeros) and NaN rows follow the
// half-precision kernel (attention_flash.cu) and so the Attention reference (backend/cpu/attention_sdpa.c). What
// differs from the reference is rounding: the scale multiplies each score (the reference scales Q and K by its
// square root) and exponentials are exp2 of log2(e)-scaled differences from the row maximum (within 2 ulp).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/attention_flash.cuh"
#include "backend/cuda/kernels/attention_flash.h"
#include "backend/cuda/kernels/common.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::flash;

namespace {

constexpr int kQueries = 64, kKeys = 64, kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory (floats): Q, K and V [64][D + 4], P [64][64 + 8]. Q's 4 rows ty.. (stride 1 row) and K's 8 rows
// tx + 8j fall 4 banks apart (D + 4 = 4 mod 32); P's 4 rows ty.. 8 banks apart, for its 8-float row segments.
constexpr int kPitchP = kKeys + 8;
constexpr size_t f32_smem_bytes(int d) {
    return sizeof(float) * ((size_t)3 * kKeys * (d + 4) + (size_t)kQueries * kPitchP);
}

__device__ __forceinline__ float4 lds4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

// STAGED: the mask's 64 x 64 tile is copied (cp.async) into P's buffer while the scores are computed, each row read
// there by the warp that then overwrites it with the row's probabilities; else each score's mask element is loaded
// from global memory (L1 rarely holds it: ncu had 34% of the kernel's stalls on those loads).
template <int D, typename M, bool STAGED>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 3 : 1) flash_attention_f32(attn_flash_args a) {
    constexpr bool masked = !std::is_same<M, no_mask>::value;
    using MT = typename std::conditional<masked, M, float>::type;
    constexpr int LD = D + 4, OC = D / 32, kChunks = D / 4;  // OC: 4-column groups of the output a thread
    extern __shared__ __align__(16) float fsm[];
    float *const sq = fsm, *const sk = sq + kQueries * LD, *const sv = sk + kKeys * LD, *const sp = sv + kKeys * LD;
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;

    // the block's work: 64 queries of (batch b, head h), query blocks fastest (the blocks of one head share K, V in L2)
    const int q_blocks = (int)((a.sq + kQueries - 1) / kQueries);
    const int bh = (int)blockIdx.x / q_blocks, b = bh / (int)a.qh, h = bh % (int)a.qh;
    const int q0 = ((int)blockIdx.x - bh * q_blocks) * kQueries, kh = h / (int)(a.qh / a.kvh);
    const int tiles = (int)((a.skv + kKeys - 1) / kKeys);
    const float *kp = static_cast<const float *>(a.k) + b * a.kv_sb + kh * a.kv_sh;
    const float *vp = static_cast<const float *>(a.v) + b * a.kv_sb + kh * a.kv_sh;

    // rows [0, valid) of a 64-row tile as one cp.async batch; rows past them zero-fill (from a readable address)
    auto load_tile = [&](float *dst, const float *src, int64_t stride, int64_t valid) {
        for (int c = threadIdx.x; c < 64 * kChunks; c += kThreads) {
            const int r = c / kChunks, col = (c % kChunks) * 4;
            cp_async16(dst + r * LD + col, src + (r < valid ? r : 0) * stride + col, r < valid ? 16 : 0);
        }
    };
    const MT *mask_base = masked ? static_cast<const MT *>(a.mask) + b * a.ms_b + h * a.ms_h : nullptr;
    // the mask's tile of keys k0.. into P's buffer (row r at byte r * kPitchP * 4): elements past mlen zero-fill
    // (masked by index below), rows past the queries too (never read: those rows are not written); a mask the same
    // for every query is copied to every row
    constexpr int kMaskPerChunk = 16 / (int)sizeof(MT), kMaskChunks = kKeys / kMaskPerChunk;
    auto load_mask = [&](int64_t k0) {
        if constexpr (STAGED) {
            for (int c = threadIdx.x; c < kQueries * kMaskChunks; c += kThreads) {
                const int r = c / kMaskChunks, e = (c % kMaskChunks) * kMaskPerChunk;
                const int64_t left = a.mlen - (k0 + e);
                int bytes = left <= 0 ? 0 : left >= kMaskPerChunk ? 16 : (int)left * (int)sizeof(MT);
                if (q0 + r >= a.sq) bytes = 0;
                const MT *src = bytes ? mask_base + (q0 + r) * a.ms_q + k0 + e : mask_base;
                cp_async16(reinterpret_cast<unsigned char *>(sp + r * kPitchP) + e * sizeof(MT), src, bytes);
            }
        }
        cp_async_commit();  // an empty group otherwise: the waits below count the same groups either way
    };
    // groups in flight at a tile's start: K, the mask, V (the waits count them)
    load_tile(sq, static_cast<const float *>(a.q) + b * a.q_sb + h * a.q_sh + q0 * a.q_ss, a.q_ss, a.sq - q0);
    load_tile(sk, kp, a.kv_ss, a.skv);
    cp_async_commit();
    load_mask(0);
    load_tile(sv, vp, a.kv_ss, a.skv);
    cp_async_commit();

    // rows ty + 16i: running max, partial sum (this thread's columns; summed over the row's threads at
    // the end, NaN once a score was NaN), whether a mask value was not -inf, the output columns
    float run_max[4], run_sum[4], o[4][OC][4];
    bool open[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        run_max[i] = -INFINITY, run_sum[i] = 0.0f, open[i] = false;
#pragma unroll
        for (int c = 0; c < OC; c++) o[i][c][0] = o[i][c][1] = o[i][c][2] = o[i][c][3] = 0.0f;
    }

    for (int tile = 0; tile < tiles; tile++) {
        const int64_t k0 = (int64_t)tile * kKeys;
        const int k_valid = (int)min((int64_t)kKeys, a.skv - k0);
        cp_async_wait<2>();  // Q and this K (the mask and V may still be on their way)
        __syncthreads();

        // S = Q . K^T for rows ty + 16i, keys tx + 8j
        float s[4][8];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) s[i][j] = 0.0f;
#pragma unroll 1
        for (int d = 0; d < D; d += 4) {
            float4 q[4];
#pragma unroll
            for (int i = 0; i < 4; i++) q[i] = lds4(sq + (ty + 16 * i) * LD + d);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float4 k = lds4(sk + (tx + 8 * j) * LD + d);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    s[i][j] = fmaf(q[i].x, k.x, s[i][j]);
                    s[i][j] = fmaf(q[i].y, k.y, s[i][j]);
                    s[i][j] = fmaf(q[i].z, k.z, s[i][j]);
                    s[i][j] = fmaf(q[i].w, k.w, s[i][j]);
                }
            }
        }

        if constexpr (STAGED) {
            cp_async_wait<1>();  // the mask (V may still be on its way)
            __syncthreads();
        }

        // scale, mask, keys past the end; the online softmax of each row over its 8 threads (lanes xor 1, 2, 4).
        // Scores stay in natural units and only their differences from the row maximum are scaled by log2(e): a
        // finite mask of -FLT_MAX (the exporters' "minus infinity") scaled first would become -inf, and a row masked
        // wholly by it would come out zeros instead of the reference's uniform average.
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t row = q0 + ty + 16 * i;
            // the row's mask elements for keys k0.. (staged: the tile's own row)
            const MT *mask_row = !masked || row >= a.sq ? nullptr
                                 : STAGED ? reinterpret_cast<const MT *>(sp + (ty + 16 * i) * kPitchP)
                                          : mask_base + row * a.ms_q + k0;
            float bias[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                bias[j] = !mask_row                  ? 0.0f
                          : k0 + tx + 8 * j < a.mlen ? mask_kind<MT>::bias(mask_row[tx + 8 * j])
                                                     : -INFINITY;
            if constexpr (STAGED) __syncwarp();  // the row's staged mask is read before its probabilities overwrite it
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float v = -INFINITY;
                if (tx + 8 * j < k_valid) {
                    v = fmaf(s[i][j], a.scale, bias[j]);
                    if (masked && !(bias[j] == -INFINITY)) open[i] = true;  // NaN counts as open, as in the reference
                }
                s[i][j] = v;
                tile_max = fmaxf(tile_max, v);
            }
#pragma unroll
            for (int x = 1; x < 8; x <<= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, x));
            const float m_new = fmaxf(run_max[i], tile_max);
            // every score so far -inf: nothing to add yet (alpha 1; 2^(-inf - 0) = 0 below)
            const float alpha =
                m_new == -INFINITY ? 1.0f : run_max[i] == -INFINITY ? 0.0f : exp2_approx((run_max[i] - m_new) * kLog2e);
            const float base = m_new == -INFINITY ? 0.0f : m_new;
            run_max[i] = m_new;
            float tile_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float p = exp2_approx((s[i][j] - base) * kLog2e);
                sp[(ty + 16 * i) * kPitchP + tx + 8 * j] = p;
                tile_sum += p;
            }
            run_sum[i] = run_sum[i] * alpha + tile_sum;
#pragma unroll
            for (int c = 0; c < OC; c++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][c][e] *= alpha;
        }
        __syncthreads();  // P is written and every thread is done with this K
        if (tile + 1 < tiles) {
            load_tile(sk, kp + (k0 + kKeys) * a.kv_ss, a.kv_ss, a.skv - k0 - kKeys);
            cp_async_commit();
            cp_async_wait<1>();  // this V (the next K may still be on its way)
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        // O += P . V for rows ty + 16i, columns 4tx + 32c ..
#pragma unroll 1
        for (int k = 0; k < kKeys; k += 4) {
            float4 p[4];
#pragma unroll
            for (int i = 0; i < 4; i++) p[i] = lds4(sp + (ty + 16 * i) * kPitchP + k);
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int c = 0; c < OC; c++) {
                    const float4 v = lds4(sv + (k + kk) * LD + 4 * tx + 32 * c);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float pk = kk == 0 ? p[i].x : kk == 1 ? p[i].y : kk == 2 ? p[i].z : p[i].w;
                        o[i][c][0] = fmaf(pk, v.x, o[i][c][0]);
                        o[i][c][1] = fmaf(pk, v.y, o[i][c][1]);
                        o[i][c][2] = fmaf(pk, v.z, o[i][c][2]);
                        o[i][c][3] = fmaf(pk, v.w, o[i][c][3]);
                    }
                }
        }
        __syncthreads();  // every thread is done with this V and P
        if (tile + 1 < tiles) {
            load_mask(k0 + kKeys);
            load_tile(sv, vp + (k0 + kKeys) * a.kv_ss, a.kv_ss, a.skv - k0 - kKeys);
            cp_async_commit();
        }
    }

    // Y rows: O times flash_row_scale (1 / sum, or the zero and NaN rows' rules)
    float *yp = static_cast<float *>(a.y) + b * a.y_sb + h * a.y_sh;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float sum = run_sum[i];
        int any_open = open[i] ? 1 : 0;
#pragma unroll
        for (int x = 1; x < 8; x <<= 1) {
            sum += __shfl_xor_sync(0xffffffffu, sum, x);
            any_open |= __shfl_xor_sync(0xffffffffu, any_open, x);
        }
        const int64_t row = q0 + ty + 16 * i;
        if (row >= a.sq) continue;
        const float scale = flash_row_scale(a, sum, run_max[i], masked, any_open);
#pragma unroll
        for (int c = 0; c < OC; c++) {  // 0 * inf or 0 * NaN must still give the zero rows zeros
            const float4 v = scale == 0.0f ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                                           : make_float4(o[i][c][0] * scale, o[i][c][1] * scale, o[i][c][2] * scale,
                                                         o[i][c][3] * scale);
            *reinterpret_cast<float4 *>(yp + row * a.y_ss + 4 * tx + 32 * c) = v;  // Y rows are 16-byte aligned
        }
    }
}

template <int D, typename M, bool STAGED> cudaError_t launch(const attn_flash_args *a, cudaStream_t stream) {
    auto kernel = flash_attention_f32<D, M, STAGED>;
    constexpr size_t bytes = f32_smem_bytes(D);
    const cudaError_t e = opt_in_shared_memory(kernel, bytes);
    if (e != cudaSuccess) return e;
    const int64_t blocks = a->batch * a->qh * ((a->sq + kQueries - 1) / kQueries);
    kernel<<<(unsigned)blocks, kThreads, bytes, stream>>>(*a);
    return cudaGetLastError();
}

template <int D, typename M> cudaError_t launch_staged(const attn_flash_args *a, cudaStream_t stream) {
    return a->mask_stage == ATTN_FLASH_MASK_ROWS ? launch<D, M, true>(a, stream) : launch<D, M, false>(a, stream);
}

template <int D> cudaError_t launch_mask(const attn_flash_args *a, cudaStream_t stream) {
    if (!a->mask) return launch<D, no_mask, false>(a, stream);
    switch (a->mask_dtype) {
    case CINFER_DTYPE_FLOAT: return launch_staged<D, float>(a, stream);
    case CINFER_DTYPE_FLOAT16: return launch_staged<D, __half>(a, stream);
    case CINFER_DTYPE_BFLOAT16: return launch_staged<D, __nv_bfloat16>(a, stream);
    case CINFER_DTYPE_BOOL: return launch_staged<D, bool>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

}  // namespace

extern "C" bool attn_flash_f32_fits(attn_flash_args *a) {
    if (!flash_args_fit(a, 4)) return false;
    device_limits lim;
    if (current_device_limits(&lim) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    // the mask is staged a row per query when its 64-element tiles start 16-byte aligned
    const int64_t size = a->mask ? (int64_t)cinfer_dtype_size(a->mask_dtype) : 0;
    const bool aligned = a->mask && ((uintptr_t)a->mask % 16) == 0 && (a->ms_b * size) % 16 == 0 &&
                         (a->ms_h * size) % 16 == 0 && (a->ms_q * size) % 16 == 0;
    a->mask_pairs = false, a->warps = kThreads / 32;
    a->mask_stage = aligned ? ATTN_FLASH_MASK_ROWS : ATTN_FLASH_MASK_LOADED;
    return f32_smem_bytes((int)a->hd) <= (size_t)lim.optin;
}

extern "C" cudaError_t attn_flash_f32_run(const attn_flash_args *a, cudaStream_t stream) {
    switch (a->hd) {
    case 32: return launch_mask<32>(a, stream);
    case 64: return launch_mask<64>(a, stream);
    case 128: return launch_mask<128>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}
