// Fused attention for float16/bfloat16: Y = softmax(scale * Q.K^T + mask).V without the score tensor in memory.
//
// A work item is 16 W queries of one (batch, head), W warps (4, or 8 past 64 queries, so K and V are read once for
// 128 queries), each warp owning 16 queries. The grid is what fits on the GPU at once; each block walks its items as
// one stream of 64-key tiles: Q, K and V (and a staged mask) go to shared memory with cp.async, the next tile (the
// next item's Q with it) during this one, double-buffered. A 1- or 2-byte mask, or one the same for every query, is
// staged too, so its elements cost no global load per score. Each warp keeps its scores, probabilities and output
// in registers, in the fragment layouts of the tensor cores' m16n8k16 mma.sync (operands loaded with ldmatrix):
// S = Q.K^T, then scale, mask and an online softmax in float32 (row maxima and sums shared by the 4 threads of a row
// group), then O += P.V with P passed on in registers as the A operand. The mask, the fully masked rule (zeros) and
// NaN rows follow the Attention reference (backend/cpu/attention_sdpa.c); what differs is rounding and range: the
// scores and probabilities stay float32 where the reference rounds them to T (so a score past T's range stays
// finite here, where the reference's would be inf).
#include <math.h>
#include <stdint.h>

#include <atomic>
#include <type_traits>

#include "backend/cuda/kernels/attention_flash.h"
#include "backend/cuda/kernels/attention_flash.cuh"
#include "backend/cuda/kernels/common.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::flash;

namespace {

constexpr int kKeys = 64;   // keys per tile
constexpr int kRows = 16;   // query rows per warp

// How the mask reaches the scores: loaded from global memory per score pair (MASK_LOADED), or copied to shared
// memory with the K/V tile, one row when it is the same for every query (MASK_ROW), a row per query otherwise
// (MASK_ROWS; 1- and 2-byte masks, which keep the block count per SM).
enum { MASK_LOADED = ATTN_FLASH_MASK_LOADED, MASK_ROW = ATTN_FLASH_MASK_ROW, MASK_ROWS = ATTN_FLASH_MASK_ROWS };

// Shared memory: the Q tile (16 W rows) twice (the next item's loads during this one), K and V twice (the next
// tile loads during this one), rows padded by 16 bytes so the 8 row addresses of an ldmatrix fall in distinct
// banks; then two staged mask tiles (rows of 64 elements of MB bytes, padded by 16 bytes so the 8 rows a warp reads
// at once fall in distinct banks).
constexpr size_t flash_q_bytes(int d, int w) { return (size_t)kRows * w * (d + 8) * 2; }
constexpr size_t flash_mask_tile(int w, int mb, int stage) {
    return (size_t)(stage == MASK_ROWS ? kRows * w : stage == MASK_ROW ? 1 : 0) * (kKeys * mb + 16);
}
constexpr size_t flash_smem_bytes(int d, int w, int mb, int stage) {
    return 2 * flash_q_bytes(d, w) + 4 * (size_t)kKeys * (d + 8) * 2 + 2 * flash_mask_tile(w, mb, stage);
}
template <int D, int W, int MB, int STAGE> struct flash_layout {
    static constexpr int ld = D + 8;
    static constexpr int queries = kRows * W;
    static constexpr size_t mask_at = 2 * flash_q_bytes(D, W) + 4 * (size_t)kKeys * ld * 2;
    static constexpr int mask_pitch = kKeys * MB + 16;
    static constexpr int mask_rows = STAGE == MASK_ROWS ? queries : STAGE == MASK_ROW ? 1 : 0;
    static constexpr size_t mask_tile = flash_mask_tile(W, MB, STAGE);
    static constexpr size_t bytes = flash_smem_bytes(D, W, MB, STAGE);
    static_assert(bytes == mask_at + 2 * (size_t)mask_rows * mask_pitch, "flash_smem_bytes is this layout");
};

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

// A work item: 16 W queries of one (batch, head); items are numbered (batch, head, query block), query blocks fastest.
// Its decomposition (three integer divisions) is worked out once per item, not per tile. (attn_flash_fits keeps the
// item count, and so every index here, within int.)
struct flash_item {
    int b, h, kh, q0;  // batch, query head, its key/value head, first query
};
__device__ __forceinline__ flash_item item_at(int item, int q_blocks, int qh, int group, int queries) {
    // one query block a head (sequences up to 16 W queries) and one query head a key head are the common cases:
    // no division for them
    const int bh = q_blocks == 1 ? item : item / q_blocks, b = bh / qh, h = bh - b * qh;
    return {b, h, group == 1 ? h : h / group, (item - bh * q_blocks) * queries};
}

// Whether mask row `row` (of keys < min(skv, mlen)) holds a value other than -inf (NaN counts, as in the reference):
// asked only for a row whose scores were all -inf or NaN, so the products never track it. The 4 lanes of the row
// group (converged here: they share the row and its maximum) each read every fourth key.
template <typename M>
__device__ __forceinline__ bool mask_row_open(const M *row, int64_t keys, int t, int lane) {
    bool open = false;
    for (int64_t j = t; j < keys; j += 4) open |= !(mask_kind<M>::bias(row[j]) == -INFINITY);
    const unsigned group = 0xFu << (lane & ~3);
    int any = open ? 1 : 0;
    any |= __shfl_xor_sync(group, any, 1);
    any |= __shfl_xor_sync(group, any, 2);
    return any != 0;
}

// Fragment coordinates (PTX m16n8k16): lane = 4 * g + t; an accumulator tile [16 x 8] holds c0, c1 at row g,
// columns 2t and 2t + 1, and c2, c3 at row g + 8, the same columns. M: the mask's element type, or no_mask.
// STAGE: how the mask is read (MASK_LOADED, MASK_ROW, MASK_ROWS).
// Each block walks its items (blockIdx.x, + gridDim.x, ...) as one stream of key tiles: the next tile's copies,
// the next item's Q among them, are issued before this tile's products, so a block never waits for an item's first
// loads with nothing to do (a sequence of 128 keys is just two tiles: those waits had bounded the kernel).
// The kernel is bound by its instruction stream (Nsight Compute: 0.6 instructions issued per scheduler cycle,
// tensor-core instructions 5% of them), so the per-score and per-tile work is kept to what the result needs: an
// item's indices are worked out once, the copies take one add a row, the scores become base-2 exponents with one
// multiply-add, and whether a fully masked row is open is only asked of rows that need it (mask_row_open).
template <typename T, int D, int W, typename M, int STAGE>
__global__ void __launch_bounds__(W * 32, (D <= 64 ? 16 : 8) / W) flash_attention(attn_flash_args a) {
    constexpr bool masked = !std::is_same<M, no_mask>::value;
    using MT = typename std::conditional<masked, M, float>::type;
    using L = flash_layout<D, W, (int)sizeof(MT), STAGE>;
    constexpr int LD = L::ld, kQueries = L::queries, kThreads = W * 32;
    constexpr int kChunks = D / 8;                  // 16-byte chunks per row
    constexpr int kRowStep = kThreads / kChunks;    // rows one pass of the block's threads copies
    static_assert(kKeys % kRowStep == 0 && kQueries % kRowStep == 0, "tiles are whole passes");
    constexpr float kLog2e = 1.4426950408889634f;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sq = reinterpret_cast<T *>(smem);  // Q tile of item parity p at sq + p kQueries LD
    // K tile of buffer i at sq + (2 kQueries + 2 i kKeys) LD, its V tile right after
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int copy_row = threadIdx.x / kChunks, copy_col = (threadIdx.x % kChunks) * 8;  // this thread's copies

    const int q_blocks = (int)((a.sq + kQueries - 1) / kQueries), items = (int)(a.batch * a.qh * q_blocks);
    const int tiles = (int)((a.skv + kKeys - 1) / kKeys), group = (int)(a.qh / a.kvh);
    // element (row rr of the staged rows, key column col) of buffer buf's mask tile
    auto staged_mask = [&](int buf, int rr) {
        return reinterpret_cast<const MT *>(smem + L::mask_at + buf * L::mask_tile + rr * L::mask_pitch);
    };
    auto mask_of = [&](const flash_item &w) {
        return masked ? static_cast<const MT *>(a.mask) + w.b * a.ms_b + w.h * a.ms_h : nullptr;
    };

    // The copies of key tile k0 of item w into buffer buf (with the item's Q into Q buffer qbuf when k0 is 0) as
    // one cp.async group: K, V and a staged mask's elements; rows past the end zero-fill (from a readable address).
    auto issue = [&](const flash_item &w, int64_t k0, int buf, int qbuf) {
        if (k0 == 0) {
            const T *qp = static_cast<const T *>(a.q) + w.b * a.q_sb + w.h * a.q_sh + w.q0 * a.q_ss + copy_col;
            const int valid = (int)min((int64_t)kQueries, a.sq - w.q0);
            T *dst = sq + (qbuf * kQueries + copy_row) * LD + copy_col;
#pragma unroll
            for (int i = 0; i < kQueries / kRowStep; i++) {
                const int r = copy_row + i * kRowStep;
                cp_async16(dst + i * kRowStep * LD, qp + (int64_t)(r < valid ? r : 0) * a.q_ss, r < valid ? 16 : 0);
            }
        }
        // this thread's first row and the stride between its rows: one add a row (a row past the end zero-fills
        // from the tensor's first element, which is readable)
        const int64_t row_at = w.b * a.kv_sb + w.kh * a.kv_sh + (k0 + copy_row) * a.kv_ss + copy_col;
        const int64_t step = kRowStep * a.kv_ss;
        const T *kbase = static_cast<const T *>(a.k), *vbase = static_cast<const T *>(a.v);
        const int valid = (int)min((int64_t)kKeys, a.skv - k0);
        T *dst = sq + (2 * kQueries + 2 * buf * kKeys + copy_row) * LD + copy_col;
#pragma unroll
        for (int i = 0; i < kKeys / kRowStep; i++) {
            const bool in = copy_row + i * kRowStep < valid;
            const int64_t at = in ? row_at + i * step : 0;
            cp_async16(dst + i * kRowStep * LD, kbase + at, in ? 16 : 0);
            cp_async16(dst + (kKeys + i * kRowStep) * LD, vbase + at, in ? 16 : 0);
        }
        if constexpr (STAGE != MASK_LOADED) {
            // elements past mlen, and rows past the queries, zero-fill here; the reads below mask them by index.
            // A fixed number of passes (the chunk count is known here) with the row stride added per pass: the
            // loop the compiler made of a thread-strided one had taken most of this function's instructions.
            constexpr int per_chunk = 16 / (int)sizeof(MT), row_chunks = kKeys / per_chunk;
            constexpr int rows_per_pass = kThreads / row_chunks;
            constexpr int passes = (L::mask_rows + rows_per_pass - 1) / rows_per_pass;
            static_assert(kThreads % row_chunks == 0, "a pass copies whole rows");
            const int rr0 = threadIdx.x / row_chunks, e = (threadIdx.x % row_chunks) * per_chunk;
            const MT *mask_base = mask_of(w);
            const MT *src0 = mask_base + (STAGE == MASK_ROWS ? (w.q0 + rr0) * a.ms_q : 0) + k0 + e;
            const int64_t pass_stride = STAGE == MASK_ROWS ? rows_per_pass * a.ms_q : 0;
            const int64_t left = a.mlen - (k0 + e);  // this thread's elements left in each row
            const int chunk_bytes = left <= 0 ? 0 : left >= per_chunk ? 16 : (int)left * (int)sizeof(MT);
#pragma unroll
            for (int i = 0; i < passes; i++) {
                const int rr = rr0 + i * rows_per_pass;
                if (L::mask_rows % rows_per_pass != 0 && rr >= L::mask_rows) break;
                const int bytes = STAGE == MASK_ROWS && w.q0 + rr >= a.sq ? 0 : chunk_bytes;
                cp_async16((void *)(staged_mask(buf, rr) + e), bytes ? src0 + i * pass_stride : mask_base, bytes);
            }
        }
        cp_async_commit();
    };

    int item = (int)blockIdx.x, tile = 0;
    if (item >= items) return;
    int buf = 0, qbuf = 0;
    flash_item w = item_at(item, q_blocks, (int)a.qh, group, kQueries), next_w = w;
    issue(w, 0, 0, 0);

    // this warp's Q rows as A fragments, one per 16 columns of the head (loaded at an item's first tile)
    unsigned qf[D / 16][4];
    // rows g and g + 8 of the warp: running max, partial sum (this thread's columns; summed over the row group at
    // the end; NaN once a score was NaN)
    float run_max[2], run_sum[2];
    float o[D / 8][4];
    int row0 = 0;  // the rows are row0 and row0 + 8
    const MT *mask_rows[2] = {nullptr, nullptr};  // MASK_LOADED: the rows' mask rows (rows past the queries: none)

    for (;;) {
        int next_item = item, next_tile = tile + 1;
        if (next_tile == tiles) next_item += (int)gridDim.x, next_tile = 0;
        const bool has_next = next_item < items;
        if (has_next) {
            // its buffers were last read in the previous tile (and its Q buffer in the previous item's first),
            // behind the barrier at the end of each tile
            if (next_tile == 0) next_w = item_at(next_item, q_blocks, (int)a.qh, group, kQueries);
            issue(next_w, (int64_t)next_tile * kKeys, buf ^ 1, next_tile == 0 ? qbuf ^ 1 : qbuf);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // this tile's K and V (and Q, for an item's first) are in place for every warp
        const int64_t k0 = (int64_t)tile * kKeys;
        if (tile == 0) {
            row0 = w.q0 + warp * kRows + g;
            run_max[0] = run_max[1] = -INFINITY;
            run_sum[0] = run_sum[1] = 0.0f;
#pragma unroll
            for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
            if (masked && STAGE == MASK_LOADED)
                for (int r = 0; r < 2; r++)
                    mask_rows[r] = row0 + 8 * r < a.sq ? mask_of(w) + (row0 + 8 * r) * a.ms_q : nullptr;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                ldmatrix_x4(qf[kk], sq + (qbuf * kQueries + warp * kRows + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                        kk * 16 + 8 * (lane >> 4));
        }
        const int k_valid = (int)min((int64_t)kKeys, a.skv - k0);
        const T *tk = sq + (2 * kQueries + 2 * buf * kKeys) * LD, *tv = tk + kKeys * LD;

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
        // here: it makes its row's sum NaN, which the end reads. A tile whose keys and staged mask elements are all
        // there (every tile of a sequence that is a multiple of 64) takes the copy of this without index checks.
        const int m_valid = (int)max((int64_t)0, min((int64_t)kKeys, a.mlen - k0));  // staged elements within mlen
        float tile_max[2] = {-INFINITY, -INFINITY};
        auto scores = [&](auto full_tile) {
            constexpr bool FULL = decltype(full_tile)::value;
#pragma unroll
            for (int j = 0; j < kKeys / 8; j++) {
                const int col = 8 * j + 2 * t;
                float bias[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
                if constexpr (STAGE == MASK_ROW) {
                    const mask_pair<MT> two = *reinterpret_cast<const mask_pair<MT> *>(staged_mask(buf, 0) + col);
                    bias[0][0] = bias[1][0] = FULL || col < m_valid ? mask_kind<MT>::bias(two.lo) : -INFINITY;
                    bias[0][1] = bias[1][1] = FULL || col + 1 < m_valid ? mask_kind<MT>::bias(two.hi) : -INFINITY;
                } else if constexpr (STAGE == MASK_ROWS) {
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const mask_pair<MT> two =
                            *reinterpret_cast<const mask_pair<MT> *>(staged_mask(buf, warp * kRows + g + 8 * r) + col);
                        bias[r][0] = FULL || col < m_valid ? mask_kind<MT>::bias(two.lo) : -INFINITY;
                        bias[r][1] = FULL || col + 1 < m_valid ? mask_kind<MT>::bias(two.hi) : -INFINITY;
                    }
                } else if constexpr (masked) {
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        mask_bias2(mask_rows[r], k0 + col, a.mlen, a.mask_pairs, bias[r][0], bias[r][1]);
                }
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const float v = FULL || col + e < k_valid ? fmaf(s[j][2 * r + e], a.scale, bias[r][e]) : -INFINITY;
                        s[j][2 * r + e] = v;
                        tile_max[r] = fmaxf(tile_max[r], v);
                    }
            }
        };
        if (k_valid == kKeys && (STAGE == MASK_LOADED || m_valid == kKeys)) scores(std::true_type{});
        else scores(std::false_type{});
        // p = 2^((score - max) log2 e) as one multiply-add and an ex2. -max log2 e is rounded once, so p at the
        // maximum is 2^d for d up to half its ulp: a row maximum past +-1024 (a row masked wholly by a large finite
        // value, -1e4 or -1e9 or -FLT_MAX, which exporters use for minus infinity) takes the subtraction first,
        // exact at the maximum, instead (the warp's rows decide together; below 1024, |d| <= 2^-14).
        float alpha[2], base[2], neg_base2[2];
        bool huge = false;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            const float m_new = fmaxf(run_max[r], tile_max[r]);
            // every score so far -inf: nothing to add yet (alpha 1; exp(-inf - 0) = 0 below)
            alpha[r] = m_new == -INFINITY ? 1.0f : run_max[r] == -INFINITY ? 0.0f : __expf(run_max[r] - m_new);
            run_max[r] = m_new;
            base[r] = m_new == -INFINITY ? 0.0f : m_new;
            huge |= !(fabsf(base[r]) <= 1024.0f);
            neg_base2[r] = -base[r] * kLog2e;
        }
        float tile_sum[2] = {0.0f, 0.0f};
        auto probabilities = [&](auto exact_subtraction) {
#pragma unroll
            for (int j = 0; j < kKeys / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float p = decltype(exact_subtraction)::value
                                        ? __expf(s[j][e] - base[e >> 1])
                                        : exp2_approx(fmaf(s[j][e], kLog2e, neg_base2[e >> 1]));
                    s[j][e] = p;
                    tile_sum[e >> 1] += p;
                }
        };
        if (__any_sync(0xffffffffu, huge)) probabilities(std::true_type{});
        else probabilities(std::false_type{});
#pragma unroll
        for (int r = 0; r < 2; r++) run_sum[r] = run_sum[r] * alpha[r] + tile_sum[r];
        if (tile != 0) {  // an item's first tile finds O zero
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                o[j][0] *= alpha[0], o[j][1] *= alpha[0];
                o[j][2] *= alpha[1], o[j][3] *= alpha[1];
            }
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

        if (tile == tiles - 1) {
            // Y rows: O times flash_row_scale (1 / sum, or the zero and NaN rows' rules), put together in this warp's
            // own rows of the Q tile (its fragments are in registers since the item's first tile; the next item's
            // Q goes to the other buffer) and stored as whole 16-byte chunks of each row
            T *yp = static_cast<T *>(a.y) + (int64_t)w.b * a.y_sb + (int64_t)w.h * a.y_sh;
            T *rows_out = sq + (qbuf * kQueries + warp * kRows) * LD;
            __syncwarp();
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float sum = run_sum[r];
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                const int64_t row = row0 + 8 * r;
                // a finite or +inf maximum came from a score whose mask value was not -inf
                bool any_open = true;
                // (asked only where it decides: a row of -inf or NaN scores whose sum is NaN; a zero sum is the
                // zero row either way)
                if (masked && run_max[r] == -INFINITY && sum != sum && row < a.sq)
                    any_open = mask_row_open(mask_of(w) + row * a.ms_q, min(a.skv, a.mlen), t, lane);
                const float scale = flash_row_scale(a, sum, run_max[r], masked, any_open);
                T *out = rows_out + (g + 8 * r) * LD + 2 * t;
                if (scale == 0.0f) {  // a zero row: zeros, where 0 * inf or 0 * NaN in O would not be
#pragma unroll
                    for (int j = 0; j < D / 8; j++) *reinterpret_cast<unsigned *>(out + 8 * j) = pack2<T>(0.0f, 0.0f);
                } else {
#pragma unroll
                    for (int j = 0; j < D / 8; j++)
                        *reinterpret_cast<unsigned *>(out + 8 * j) = pack2<T>(o[j][2 * r] * scale, o[j][2 * r + 1] * scale);
                }
            }
            __syncwarp();
            const int64_t first_row = (int64_t)w.q0 + warp * kRows;
#pragma unroll
            for (int c = lane; c < kRows * kChunks; c += 32) {
                const int rr = c / kChunks, cc = (c % kChunks) * 8;
                if (first_row + rr < a.sq)  // Y rows are 16-byte aligned
                    *reinterpret_cast<uint4 *>(yp + (first_row + rr) * a.y_ss + cc) =
                        *reinterpret_cast<const uint4 *>(rows_out + rr * LD + cc);
            }
        }
        __syncthreads();  // every warp is done with this tile's buffers before the next issue reuses them
        if (!has_next) break;
        if (next_tile == 0) qbuf ^= 1, w = next_w;
        item = next_item, tile = next_tile, buf ^= 1;
    }
}

template <typename T, int D, int W, typename M, int STAGE> cudaError_t launch_warps(const attn_flash_args *a, cudaStream_t stream) {
    using L = flash_layout<D, W, std::is_same<M, no_mask>::value ? 4 : (int)sizeof(M), STAGE>;
    auto kernel = flash_attention<T, D, W, M, STAGE>;
    cudaError_t e = opt_in_shared_memory(kernel, L::bytes);
    if (e != cudaSuccess) return e;
    // as many blocks as fit on the GPU at once, each walking its share of the items (fewer when there are fewer)
    static std::atomic<int> per_sm{0};  // the same for every device of the build's architecture
    int blocks = per_sm.load(std::memory_order_relaxed);
    if (!blocks) {
        if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, W * 32, L::bytes)) != cudaSuccess)
            return e;
        per_sm.store(blocks, std::memory_order_relaxed);
    }
    device_limits lim;
    if ((e = current_device_limits(&lim)) != cudaSuccess) return e;
    const int64_t items = a->batch * a->qh * ((a->sq + L::queries - 1) / L::queries);
    const int64_t resident = (int64_t)lim.sms * (blocks > 0 ? blocks : 1);
    kernel<<<(unsigned)(items < resident ? items : resident), W * 32, L::bytes, stream>>>(*a);
    return cudaGetLastError();
}

template <typename T, int D, typename M, int STAGE> cudaError_t launch(const attn_flash_args *a, cudaStream_t stream) {
    return a->warps == 8 ? launch_warps<T, D, 8, M, STAGE>(a, stream) : launch_warps<T, D, 4, M, STAGE>(a, stream);
}

template <typename T, int D, typename M> cudaError_t launch_staged(const attn_flash_args *a, cudaStream_t stream) {
    if constexpr (sizeof(M) <= 2)
        if (a->mask_stage == ATTN_FLASH_MASK_ROWS) return launch<T, D, M, MASK_ROWS>(a, stream);
    if (a->mask_stage == ATTN_FLASH_MASK_ROW) return launch<T, D, M, MASK_ROW>(a, stream);
    return launch<T, D, M, MASK_LOADED>(a, stream);
}

template <typename T, int D> cudaError_t launch_mask(const attn_flash_args *a, cudaStream_t stream) {
    if (!a->mask) return launch<T, D, no_mask, MASK_LOADED>(a, stream);
    switch (a->mask_dtype) {
    case CINFER_DTYPE_FLOAT: return launch_staged<T, D, float>(a, stream);
    case CINFER_DTYPE_FLOAT16: return launch_staged<T, D, __half>(a, stream);
    case CINFER_DTYPE_BFLOAT16: return launch_staged<T, D, __nv_bfloat16>(a, stream);
    case CINFER_DTYPE_BOOL: return launch_staged<T, D, bool>(a, stream);
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

}  // namespace

extern "C" bool attn_flash_fits(cinfer_dtype t, attn_flash_args *a) {
    if (t == CINFER_DTYPE_FLOAT) return attn_flash_f32_fits(a);
    if (t != CINFER_DTYPE_FLOAT16 && t != CINFER_DTYPE_BFLOAT16) return false;
    if (!flash_args_fit(a, 8)) return false;
    if (a->mask) {
        const size_t pair = 2 * cinfer_dtype_size(a->mask_dtype);
        a->mask_pairs = ((uintptr_t)a->mask % pair) == 0 && a->ms_b % 2 == 0 && a->ms_h % 2 == 0 && a->ms_q % 2 == 0;
        // mask rows whose 64-element tiles start 16-byte aligned are staged in shared memory: one row per
        // (batch, head), or (1- and 2-byte masks) a row per query
        const int64_t size = (int64_t)cinfer_dtype_size(a->mask_dtype);
        const bool aligned = ((uintptr_t)a->mask % 16) == 0 && (a->ms_b * size) % 16 == 0 &&
                             (a->ms_h * size) % 16 == 0 && (a->ms_q * size) % 16 == 0;
        a->mask_stage = !aligned ? ATTN_FLASH_MASK_LOADED
                        : a->ms_q == 0 ? ATTN_FLASH_MASK_ROW
                        : size <= 2    ? ATTN_FLASH_MASK_ROWS
                                       : ATTN_FLASH_MASK_LOADED;
    }
    // 8 warps (128 queries an item) past 64 queries, K and V then read half as often; within the device's shared
    // memory a block (an H200's 227 KiB takes every layout; smaller GPUs take 4 warps, or the mask from global
    // memory, or the general path)
    device_limits lim;
    if (current_device_limits(&lim) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    const int mb = a->mask ? (int)cinfer_dtype_size(a->mask_dtype) : 4;
    a->warps = a->sq > 64 ? 8 : 4;
    while (flash_smem_bytes((int)a->hd, a->warps, mb, a->mask_stage) > (size_t)lim.optin) {
        if (a->warps == 8) a->warps = 4;
        else if (a->mask_stage == ATTN_FLASH_MASK_ROWS) a->mask_stage = ATTN_FLASH_MASK_LOADED, a->warps = a->sq > 64 ? 8 : 4;
        else return false;
    }
    return true;
}

extern "C" cudaError_t attn_flash_run(cinfer_dtype t, const attn_flash_args *a, cudaStream_t stream) {
    if (t == CINFER_DTYPE_FLOAT) return attn_flash_f32_run(a, stream);
    if (t == CINFER_DTYPE_FLOAT16) return launch_size<__half>(a, stream);
    if (t == CINFER_DTYPE_BFLOAT16) return launch_size<__nv_bfloat16>(a, stream);
    return cudaErrorInvalidValue;
}
