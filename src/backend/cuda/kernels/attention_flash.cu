// Fused attention for float16/bfloat16: Y = softmax(scale * Q.K^T + mask).V without the score tensor in memory.
//
// One block of 4 warps takes 64 queries of one (batch, head); each warp owns 16 of them. The block walks the keys in
// tiles of 64 (K and V copied to shared memory with cp.async, one tile ahead, double-buffered). Each warp keeps its
// scores, probabilities and output in registers, in the fragment layouts of the tensor cores' m16n8k16 mma.sync
// (operands loaded with ldmatrix): S = Q.K^T, then scale, mask and an online softmax in float32 (row maxima and
// sums shared by the 4 threads of a row group), then O += P.V with P passed on in registers as the A operand. The
// mask, the fully masked rule (zeros) and NaN rows follow the Attention reference (backend/cpu/attention_sdpa.c);
// what differs is rounding and range: the scores and probabilities stay float32 where the reference rounds them to
// T (so a score past T's range stays finite here, where the reference's would be inf).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "backend/cuda/kernels/attention_flash.h"
#include "backend/cuda/kernels/common.cuh"

using namespace cinfer_cuda;

namespace {

constexpr int kQueries = 64;  // queries per block
constexpr int kKeys = 64;     // keys per tile
constexpr int kWarps = 4;     // each owns kQueries / kWarps = 16 query rows
constexpr int kRows = 16;

// Shared memory: the Q, K and V tiles, rows padded by 16 bytes so the 8 row addresses of an ldmatrix fall in
// distinct banks.
template <int D> struct flash_layout {
    static constexpr int ld = D + 8;
    static constexpr size_t tile_bytes = (size_t)kKeys * ld * 2;
    static constexpr size_t bytes = 5 * tile_bytes;  // Q, and K and V twice (the next tile loads during this one)
};

// 16 bytes global -> shared without passing through registers; src_bytes 0 fills zeros (rows past the end)
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    const unsigned at = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void *p) {
    const unsigned at = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void *p) {
    const unsigned at = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}

// c[16 x 8] += a[16 x 16] . b[16 x 8], float32 accumulation
template <typename T> __device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <> __device__ __forceinline__ void mma16816<__half>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a T pair in one register, the first in the low half (the lower column of a fragment).
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&v);
}
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&v);
}

// The mask's element type, a template parameter so the per-element loads carry no type dispatch.
template <typename M> struct mask_kind;
template <> struct mask_kind<float> { static __device__ __forceinline__ float bias(float v) { return v; } };
template <> struct mask_kind<__half> { static __device__ __forceinline__ float bias(__half v) { return __half2float(v); } };
template <> struct mask_kind<__nv_bfloat16> {
    static __device__ __forceinline__ float bias(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <> struct mask_kind<bool> {  // True attends (0), False masks (-inf)
    static __device__ __forceinline__ float bias(bool v) { return v ? 0.0f : -INFINITY; }
};
struct no_mask {};

// The additive bias of element j of a mask row; past mlen: -inf.
template <typename M> __device__ __forceinline__ float mask_bias(const M *row, int64_t j, int64_t mlen) {
    return j < mlen ? mask_kind<M>::bias(row[j]) : -INFINITY;
}

template <typename M> struct alignas(2 * sizeof(M)) mask_pair { M lo, hi; };

// The biases of elements j (even) and j + 1 of a mask row (none: 0); one load for both when `pairs` (every row
// starts at an even element of a mask aligned for pairs) and both are within mlen. (Issuing these loads a tile
// ahead, or before the products, needed registers that spilled, and measured slower.)
template <typename M>
__device__ __forceinline__ void mask_bias2(const M *row, int64_t j, int64_t mlen, bool pairs, float &b0, float &b1) {
    if (!row) {
        b0 = b1 = 0.0f;
    } else if (pairs && j + 1 < mlen) {
        const mask_pair<M> two = *reinterpret_cast<const mask_pair<M> *>(row + j);
        b0 = mask_kind<M>::bias(two.lo);
        b1 = mask_kind<M>::bias(two.hi);
    } else {
        b0 = mask_bias(row, j, mlen);
        b1 = mask_bias(row, j + 1, mlen);
    }
}

// rows x D elements of T from src (row stride ld elements) into shared dst (stride D + 8), 16 bytes at a time; rows
// from `valid` on are zeros.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int64_t ld, int rows, int valid) {
    constexpr int chunks = D / 8;  // 8 elements of 2 bytes = 16 bytes
    for (int c = threadIdx.x; c < rows * chunks; c += blockDim.x) {
        int r = c / chunks, col = (c % chunks) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < valid) v = *reinterpret_cast<const uint4 *>(src + (int64_t)r * ld + col);
        *reinterpret_cast<uint4 *>(dst + r * flash_layout<D>::ld + col) = v;
    }
}

// Fragment coordinates (PTX m16n8k16): lane = 4 * g + t; an accumulator tile [16 x 8] holds c0, c1 at row g,
// columns 2t and 2t + 1, and c2, c3 at row g + 8, the same columns. M: the mask's element type, or no_mask.
template <typename T, int D, typename M>
__global__ void __launch_bounds__(kWarps * 32, D <= 64 ? 4 : 2) flash_attention(attn_flash_args a) {
    constexpr int LD = flash_layout<D>::ld;
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    extern __shared__ __align__(128) unsigned char smem[];
    T *sq = reinterpret_cast<T *>(smem);
    // K tile of buffer i at sq + (kQueries + 2 i kKeys) LD, its V tile right after
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;

    const int64_t b = blockIdx.z, h = blockIdx.y, q0 = (int64_t)blockIdx.x * kQueries;
    const int64_t kh = h / (a.qh / a.kvh);
    const T *qp = static_cast<const T *>(a.q) + b * a.q_sb + h * a.q_sh + q0 * a.q_ss;
    const T *kp = static_cast<const T *>(a.k) + b * a.kv_sb + kh * a.kv_sh;
    const T *vp = static_cast<const T *>(a.v) + b * a.kv_sb + kh * a.kv_sh;

    // K and V tiles go to shared memory asynchronously, one tile ahead of the one being worked on
    auto fetch = [&](int64_t k0, int buf) {
        const int valid = (int)min((int64_t)kKeys, a.skv - k0);
        for (int c = threadIdx.x; c < kKeys * kChunks; c += kWarps * 32) {
            const int r = c / kChunks, col = (c % kChunks) * 8;
            const int64_t at = (k0 + (r < valid ? r : 0)) * a.kv_ss + col;  // a readable address even when zero-filled
            T *tile = sq + (kQueries + 2 * buf * kKeys) * LD + r * LD + col;
            cp_async16(tile, kp + at, r < valid ? 16 : 0);
            cp_async16(tile + kKeys * LD, vp + at, r < valid ? 16 : 0);
        }
        cp_async_commit();
    };
    fetch(0, 0);
    load_tile<T, D>(sq, qp, a.q_ss, kQueries, (int)min((int64_t)kQueries, a.sq - q0));
    __syncthreads();

    // this warp's Q rows as A fragments, one per 16 columns of the head
    unsigned qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldmatrix_x4(qf[kk], sq + (warp * kRows + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + kk * 16 + 8 * (lane >> 4));

    // rows g and g + 8 of the warp: running max, partial sum (this thread's columns; summed over the row group at
    // the end; NaN once a score was NaN), whether a mask value was not -inf
    const int64_t row0 = q0 + warp * kRows + g, rows[2] = {row0, row0 + 8};
    float run_max[2] = {-INFINITY, -INFINITY}, run_sum[2] = {0.0f, 0.0f};
    bool open[2] = {false, false};
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    constexpr bool masked = !std::is_same<M, no_mask>::value;
    using MT = typename std::conditional<masked, M, float>::type;
    const MT *mask_rows[2] = {nullptr, nullptr};  // rows past the queries read none
    if (masked)
        for (int r = 0; r < 2; r++)
            if (rows[r] < a.sq)
                mask_rows[r] = static_cast<const MT *>(a.mask) + b * a.ms_b + h * a.ms_h + rows[r] * a.ms_q;

    for (int64_t k0 = 0, it = 0; k0 < a.skv; k0 += kKeys, it++) {
        const int k_valid = (int)min((int64_t)kKeys, a.skv - k0), buf = (int)(it & 1);
        if (k0 + kKeys < a.skv) {
            fetch(k0 + kKeys, buf ^ 1);  // its buffer was last read in the previous tile, behind the barrier below
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // this tile's K and V are in place for every warp
        const T *tk = sq + (kQueries + 2 * buf * kKeys) * LD, *tv = tk + kKeys * LD;

        // S[16 x 64] = Q . K^T: K's rows are B's columns, loaded two key groups of 8 at a time
        float s[kKeys / 8][4];
#pragma unroll
        for (int j = 0; j < kKeys / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int jj = 0; jj < kKeys / 16; jj++) {
                unsigned kb[4];
                ldmatrix_x4(kb, tk + (16 * jj + (lane & 7) + 8 * (lane >> 4)) * LD + kk * 16 + 8 * ((lane >> 3) & 1));
                mma16816<T>(s[2 * jj], qf[kk], kb[0], kb[1]);
                mma16816<T>(s[2 * jj + 1], qf[kk], kb[2], kb[3]);
            }

        // scale, mask, keys past the end; then the online softmax of rows g and g + 8. A NaN score needs no check
        // here: it makes its row's sum NaN, which the end reads.
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < kKeys / 8; j++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int col = 8 * j + 2 * t;
                float bias[2] = {0.0f, 0.0f};
                if (masked) mask_bias2(mask_rows[r], k0 + col, a.mlen, a.mask_pairs, bias[0], bias[1]);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float v = -INFINITY;
                    if (col + e < k_valid) {
                        v = fmaf(s[j][2 * r + e], a.scale, bias[e]);
                        if (masked && !(bias[e] == -INFINITY)) open[r] = true;  // NaN counts as open, as in the reference
                    }
                    s[j][2 * r + e] = v;
                    tile_max[r] = fmaxf(tile_max[r], v);
                }
            }
        float alpha[2], base[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            const float m_new = fmaxf(run_max[r], tile_max[r]);
            // every score so far -inf: nothing to add yet (alpha 1; exp(-inf - 0) = 0 below)
            alpha[r] = m_new == -INFINITY ? 1.0f : run_max[r] == -INFINITY ? 0.0f : __expf(run_max[r] - m_new);
            run_max[r] = m_new;
            base[r] = m_new == -INFINITY ? 0.0f : m_new;
        }
        float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < kKeys / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = __expf(s[j][e] - base[e >> 1]);
                s[j][e] = p;
                tile_sum[e >> 1] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) run_sum[r] = run_sum[r] * alpha[r] + tile_sum[r];
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            o[j][0] *= alpha[0], o[j][1] *= alpha[0];
            o[j][2] *= alpha[1], o[j][3] *= alpha[1];
        }

        // O += P . V: P's accumulator tiles 2kk, 2kk + 1 are the A fragment of keys 16kk..16kk + 15; V's rows come
        // transposed (ldmatrix .trans) as B, two groups of 8 head columns at a time
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; kk++) {
            const unsigned pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                    pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dd = 0; dd < D / 16; dd++) {
                unsigned vb[4];
                ldmatrix_x4_trans(vb, tv + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 16 * dd + 8 * (lane >> 4));
                mma16816<T>(o[2 * dd], pa, vb[0], vb[1]);
                mma16816<T>(o[2 * dd + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads();  // every warp is done with this tile's buffers before the next fetch reuses them
    }

    // Y rows: O / sum; fully masked rows are zeros; NaN rows (a NaN score, or +inf, whose exp is NaN) are NaN or,
    // with the guard, zeros; rows whose every score is -inf are zeros, as the unfused CUDA path gives (NaN, as a
    // Softmax gives them, where the node replaced an unguarded one: empty_rows_nan)
    T *yp = static_cast<T *>(a.y) + b * a.y_sb + h * a.y_sh;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float sum = run_sum[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        int any_open = open[r] ? 1 : 0;
        any_open |= __shfl_xor_sync(0xffffffffu, any_open, 1);
        any_open |= __shfl_xor_sync(0xffffffffu, any_open, 2);
        if (rows[r] >= a.sq) continue;
        const bool is_bad = sum != sum || run_max[r] == INFINITY;  // a NaN score (or +inf, whose exp is NaN)
        const bool zero = (masked && !any_open) || (!is_bad && !(sum > 0.0f));
        const float scale = zero ? (a.empty_rows_nan ? NAN : 0.0f) : is_bad ? (a.nan_to_zero ? 0.0f : NAN) : 1.0f / sum;
        T *yr = yp + rows[r] * a.y_ss;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            // 0 * inf or 0 * NaN must still give the zero rows zeros
            const float v0 = scale == 0.0f ? 0.0f : o[j][2 * r] * scale, v1 = scale == 0.0f ? 0.0f : o[j][2 * r + 1] * scale;
            *reinterpret_cast<unsigned *>(yr + 8 * j + 2 * t) = pack2<T>(v0, v1);  // Y rows are 16-byte aligned
        }
    }
}

template <typename T, int D, typename M> cudaError_t launch(const attn_flash_args *a, cudaStream_t stream) {
    const size_t smem = flash_layout<D>::bytes;
    // above the 48 KiB default: opt in (a host-side attribute, set before the first launch)
    cudaError_t e = cudaFuncSetAttribute(flash_attention<T, D, M>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    // all of L1 as shared memory: the block count per SM is bound by it (the driver's default split allowed 3)
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(flash_attention<T, D, M>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((a->sq + kQueries - 1) / kQueries), (unsigned)a->qh, (unsigned)a->batch);
    flash_attention<T, D, M><<<grid, kWarps * 32, smem, stream>>>(*a);
    return cudaGetLastError();
}

template <typename T, int D> cudaError_t launch_mask(const attn_flash_args *a, cudaStream_t stream) {
    if (!a->mask) return launch<T, D, no_mask>(a, stream);
    switch (a->mask_dtype) {
    case CINFER_DTYPE_FLOAT: return launch<T, D, float>(a, stream);
    case CINFER_DTYPE_FLOAT16: return launch<T, D, __half>(a, stream);
    case CINFER_DTYPE_BFLOAT16: return launch<T, D, __nv_bfloat16>(a, stream);
    case CINFER_DTYPE_BOOL: return launch<T, D, bool>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T> cudaError_t launch_size(const attn_flash_args *a, cudaStream_t stream) {
    switch (a->hd) {
    case 32: return launch_mask<T, 32>(a, stream);
    case 64: return launch_mask<T, 64>(a, stream);
    case 128: return launch_mask<T, 128>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

extern "C" bool attn_flash_fits(cinfer_dtype t, attn_flash_args *a) {
    if (t != CINFER_DTYPE_FLOAT16 && t != CINFER_DTYPE_BFLOAT16) return false;
    if (a->hd != 32 && a->hd != 64 && a->hd != 128) return false;
    if (a->sq <= 0 || a->skv <= 0 || a->batch <= 0 || a->batch > 65535 || a->qh <= 0 || a->qh > 65535) return false;
    if (a->kvh <= 0 || a->qh % a->kvh != 0 || (a->sq + kQueries - 1) / kQueries > INT32_MAX) return false;
    // 16-byte rows: every stride a multiple of 8 elements and the bases aligned
    const int64_t strides[] = {a->q_sb, a->q_sh, a->q_ss, a->kv_sb, a->kv_sh, a->kv_ss, a->y_sb, a->y_sh, a->y_ss};
    for (int64_t s : strides)
        if (s % 8 != 0) return false;
    if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v) || !aligned16(a->y)) return false;
    if (a->mask && a->mask_dtype != CINFER_DTYPE_FLOAT && a->mask_dtype != CINFER_DTYPE_FLOAT16 &&
        a->mask_dtype != CINFER_DTYPE_BFLOAT16 && a->mask_dtype != CINFER_DTYPE_BOOL)
        return false;
    if (a->mask) {
        const size_t pair = 2 * cinfer_dtype_size(a->mask_dtype);
        a->mask_pairs = ((uintptr_t)a->mask % pair) == 0 && a->ms_b % 2 == 0 && a->ms_h % 2 == 0 && a->ms_q % 2 == 0;
    }
    return true;
}

extern "C" cudaError_t attn_flash_run(cinfer_dtype t, const attn_flash_args *a, cudaStream_t stream) {
    if (t == CINFER_DTYPE_FLOAT16) return launch_size<__half>(a, stream);
    if (t == CINFER_DTYPE_BFLOAT16) return launch_size<__nv_bfloat16>(a, stream);
    return cudaErrorInvalidValue;
}
