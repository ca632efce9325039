// CUDA kernels of TopK: the k best of each row along an axis, best first, in the CPU kernel's order
// (by value with NaN above everything, ties by the lower index).
//
// Rows of up to CUDA_TOPK_CHUNK elements: one block per row sorts (value, index) pairs in shared memory
// (bitonic) and writes the first k. Longer rows with k <= CUDA_TOPK_CHUNK / 2: each chunk of a row is sorted
// the same way and keeps its k best as candidates in scratch; passes over the candidates repeat until one
// chunk per row is left (each pass at least halves the row). Longer rows with larger k: a segmented radix
// sort of the whole rows (CUB, stable, so equal values stay in index order). All paths are deterministic.
#include <cub/device/device_segmented_radix_sort.cuh>

#include <limits.h>
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_device.cuh"

namespace cinfer_cuda {
namespace {

// Whether (av, ai) comes before (bv, bi); ai < 0 marks an empty slot, which comes after everything.
template <typename V>
__device__ __forceinline__ bool topk_before(V av, int32_t ai, V bv, int32_t bi, bool largest) {
    if (ai < 0) return false;
    if (bi < 0) return true;
    const bool an = red::is_nan(av), bn = red::is_nan(bv);
    const bool gt = av > bv || (an && !bn), lt = av < bv || (bn && !an);
    if (gt || lt) return largest ? gt : lt;
    return ai < bi;
}

// Where a pass reads its rows: the input itself (cand_v NULL) or the previous pass's candidates.
template <typename T, typename V> struct topk_source {
    const T *x;
    int64_t len, inner; /* input: row r = (o, i) reads x[o * len * inner + j * inner + i] */
    const V *cand_v;
    const int32_t *cand_i;
    int64_t n; /* entries per row: len for the input, else the candidate row length */
};

// Where a pass writes: the outputs (final pass) or the next candidates, `m` per chunk.
template <typename T, typename V> struct topk_sink {
    T *values;
    int64_t *indices; /* may be NULL */
    int64_t k, inner;
    V *next_v;
    int32_t *next_i;
    int64_t m;
    bool final_pass;
};

// Byte offset of the index array behind P values in shared memory (16-aligned for any value size).
__host__ __device__ __forceinline__ size_t topk_index_offset(int P, size_t value_size) {
    return ((size_t)P * value_size + 15) & ~(size_t)15;
}

template <typename T, typename V>
__global__ void topk_chunk_kernel(topk_source<T, V> src, topk_sink<T, V> dst, int64_t rows, int64_t chunks,
                                  int P, bool largest) {
    extern __shared__ __align__(16) unsigned char topk_smem[];
    V *sv = (V *)topk_smem;
    int32_t *si = (int32_t *)(topk_smem + topk_index_offset(P, sizeof(V)));
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {
        const int64_t row = item / chunks, chunk = item - row * chunks;
        const int64_t start = chunk * CUDA_TOPK_CHUNK;
        const int64_t cnt = src.n - start < CUDA_TOPK_CHUNK ? src.n - start : CUDA_TOPK_CHUNK;
        const int64_t o = row / src.inner, i = row - o * src.inner;
        for (int t = tid; t < P; t += nt) {
            V v = V(0);
            int32_t idx = -1;
            if (t < cnt) {
                const int64_t j = start + t;
                if (src.cand_v) {
                    v = src.cand_v[row * src.n + j];
                    idx = src.cand_i[row * src.n + j];
                } else {
                    v = load(src.x[(o * src.len + j) * src.inner + i]);
                    idx = (int32_t)j;
                }
            }
            sv[t] = v;
            si[t] = idx;
        }
        __syncthreads();
        for (int size = 2; size <= P; size <<= 1) {
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                for (int t = tid; t < P / 2; t += nt) {
                    const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                    const bool up = (lo & size) == 0; /* this run ends best first */
                    if (topk_before(sv[hi], si[hi], sv[lo], si[lo], largest) == up) {
                        V tv = sv[lo];
                        sv[lo] = sv[hi];
                        sv[hi] = tv;
                        int32_t ti = si[lo];
                        si[lo] = si[hi];
                        si[hi] = ti;
                    }
                }
                __syncthreads();
            }
        }
        if (dst.final_pass) {
            /* one chunk per row: the row's k best are sorted[0, k), all valid since k <= the row's length */
            for (int64_t t = tid; t < dst.k; t += nt) {
                const int64_t off = (o * dst.k + t) * dst.inner + i;
                dst.values[off] = store<T>(sv[t]);
                if (dst.indices) dst.indices[off] = si[t];
            }
        } else {
            for (int64_t t = tid; t < dst.m; t += nt) {
                const int64_t off = row * chunks * dst.m + chunk * dst.m + t;
                dst.next_v[off] = t < P ? sv[t] : V(0);
                dst.next_i[off] = t < P ? si[t] : -1;
            }
        }
        __syncthreads(); /* the next item reuses the shared arrays */
    }
}

inline int pow2_at_least(int64_t n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

template <typename T, typename V>
cudaError_t launch_chunks(const topk_source<T, V> &src, const topk_sink<T, V> &dst, int64_t rows, bool largest,
                          cudaStream_t stream) {
    const int64_t chunks = (src.n + CUDA_TOPK_CHUNK - 1) / CUDA_TOPK_CHUNK;
    const int P = pow2_at_least(src.n < CUDA_TOPK_CHUNK ? src.n : CUDA_TOPK_CHUNK);
    int threads = P / 2;
    threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
    const size_t smem = topk_index_offset(P, sizeof(V)) + (size_t)P * sizeof(int32_t); /* <= 48 KiB */
    topk_chunk_kernel<T, V><<<red::blocks_for(rows * chunks), threads, smem, stream>>>(src, dst, rows, chunks, P,
                                                                                       largest);
    return cudaGetLastError();
}

size_t align_up(size_t v) { return (v + 255) & ~(size_t)255; }

// ---- whole-row radix sort (long rows, large k) ----
// Keys for the sort: NaN made one positive quiet NaN (sorted above +inf), -0 made +0 (equal, index order).
template <typename K> __device__ __forceinline__ K sort_key(K v) {
    if constexpr (std::is_floating_point<K>::value) {
        if (v != v) return red::quiet_nan<K>();
        if (v == K(0)) return K(0);
    }
    return v;
}

template <typename T, typename K>
__global__ void topk_keys_kernel(const T *x, K *keys, int32_t *idx, int32_t *offsets, int64_t rows, int64_t len,
                                 int64_t inner) {
    CUDA_GRID_STRIDE(e, rows * len) {
        const int64_t row = e / len, j = e - row * len;
        const int64_t o = row / inner, i = row - o * inner;
        keys[e] = sort_key((K)load(x[(o * len + j) * inner + i]));
        idx[e] = (int32_t)j;
        if (e <= rows) offsets[e] = (int32_t)(e * len); /* rows * len > rows here: len > CUDA_TOPK_CHUNK */
    }
}

template <typename T>
__global__ void topk_gather_kernel(const T *x, const int32_t *sorted_idx, T *values, int64_t *indices, int64_t rows,
                                   int64_t len, int64_t inner, int64_t k) {
    CUDA_GRID_STRIDE(e, rows * k) {
        const int64_t row = e / k, t = e - row * k;
        const int64_t o = row / inner, i = row - o * inner;
        const int64_t j = sorted_idx[row * len + t];
        const int64_t off = (o * k + t) * inner + i;
        values[off] = x[(o * len + j) * inner + i]; /* the input's own bits: -0 and NaN payloads kept */
        if (indices) indices[off] = j;
    }
}

template <typename T>
cudaError_t run_radix(const T *x, T *values, int64_t *indices, int64_t outer, int64_t len, int64_t inner, int64_t k,
                      bool largest, void *scratch, size_t *scratch_bytes, cudaStream_t stream) {
    using K = typename acc<T>::type;
    const int64_t rows = outer * inner, total = rows * len;
    if (total > INT_MAX || rows + 1 > INT_MAX) return cudaErrorNotSupported;
    const int n = (int)total, segs = (int)rows;
    size_t temp = 0;
    cudaError_t err;
    if (largest)
        err = cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, temp, (const K *)nullptr, (K *)nullptr,
                                                                 (const int32_t *)nullptr, (int32_t *)nullptr, n,
                                                                 segs, (const int32_t *)nullptr,
                                                                 (const int32_t *)nullptr, 0, (int)sizeof(K) * 8,
                                                                 stream);
    else
        err = cub::DeviceSegmentedRadixSort::SortPairs(nullptr, temp, (const K *)nullptr, (K *)nullptr,
                                                       (const int32_t *)nullptr, (int32_t *)nullptr, n, segs,
                                                       (const int32_t *)nullptr, (const int32_t *)nullptr, 0,
                                                       (int)sizeof(K) * 8, stream);
    if (err != cudaSuccess) return err;
    const size_t keys_bytes = align_up((size_t)n * sizeof(K)), idx_bytes = align_up((size_t)n * sizeof(int32_t));
    const size_t off_bytes = align_up((size_t)(rows + 1) * sizeof(int32_t));
    const size_t need = 2 * keys_bytes + 2 * idx_bytes + off_bytes + align_up(temp);
    if (scratch_bytes) {
        *scratch_bytes = need;
        return cudaSuccess;
    }
    if (!scratch) return cudaErrorInvalidValue;
    unsigned char *p = (unsigned char *)scratch;
    K *keys_in = (K *)p, *keys_out = (K *)(p + keys_bytes);
    int32_t *idx_in = (int32_t *)(p + 2 * keys_bytes), *idx_out = (int32_t *)(p + 2 * keys_bytes + idx_bytes);
    int32_t *offsets = (int32_t *)(p + 2 * keys_bytes + 2 * idx_bytes);
    void *tmp = p + 2 * keys_bytes + 2 * idx_bytes + off_bytes;
    topk_keys_kernel<T, K><<<grid_for(total), kBlock, 0, stream>>>(x, keys_in, idx_in, offsets, rows, len, inner);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    if (largest)
        err = cub::DeviceSegmentedRadixSort::SortPairsDescending(tmp, temp, keys_in, keys_out, idx_in, idx_out, n,
                                                                 segs, (const int32_t *)offsets, (const int32_t *)offsets + 1, 0,
                                                                 (int)sizeof(K) * 8, stream);
    else
        err = cub::DeviceSegmentedRadixSort::SortPairs(tmp, temp, keys_in, keys_out, idx_in, idx_out, n, segs,
                                                       (const int32_t *)offsets, (const int32_t *)offsets + 1, 0,
                                                       (int)sizeof(K) * 8, stream);
    if (err != cudaSuccess) return err;
    topk_gather_kernel<T><<<grid_for(rows * k), kBlock, 0, stream>>>(x, idx_out, values, indices, rows, len, inner,
                                                                     k);
    return cudaGetLastError();
}

template <typename T>
cudaError_t run_topk(const void *xv, void *vv, int64_t *indices, int64_t outer, int64_t len, int64_t inner,
                     int64_t k, bool largest, void *scratch, size_t *scratch_bytes, cudaStream_t stream) {
    using V = typename acc<T>::type; /* float for the half types: order and values are exact */
    const T *x = (const T *)xv;
    T *values = (T *)vv;
    const int64_t rows = outer * inner;
    if (len > INT32_MAX) return cudaErrorNotSupported;
    if (len > CUDA_TOPK_CHUNK && k > CUDA_TOPK_CHUNK / 2)
        return run_radix<T>(x, values, indices, outer, len, inner, k, largest, scratch, scratch_bytes, stream);

    topk_source<T, V> src{x, len, inner, nullptr, nullptr, len};
    topk_sink<T, V> dst{values, indices, k, inner, nullptr, nullptr, k, true};
    if (len <= CUDA_TOPK_CHUNK) {
        if (scratch_bytes) {
            *scratch_bytes = 0;
            return cudaSuccess;
        }
        return launch_chunks(src, dst, rows, largest, stream);
    }
    /* candidate passes: the first keeps k per chunk of the input, the largest candidate rows of all */
    const int64_t first_n = (len + CUDA_TOPK_CHUNK - 1) / CUDA_TOPK_CHUNK * k;
    const size_t buf_entries = (size_t)rows * (size_t)first_n;
    const size_t v_bytes = align_up(buf_entries * sizeof(V)), i_bytes = align_up(buf_entries * sizeof(int32_t));
    if (scratch_bytes) {
        *scratch_bytes = 2 * (v_bytes + i_bytes);
        return cudaSuccess;
    }
    if (!scratch) return cudaErrorInvalidValue;
    unsigned char *p = (unsigned char *)scratch;
    V *buf_v[2] = {(V *)p, (V *)(p + v_bytes + i_bytes)};
    int32_t *buf_i[2] = {(int32_t *)(p + v_bytes), (int32_t *)(p + 2 * v_bytes + i_bytes)};
    int cur = 0;
    int64_t n = len;
    for (;;) {
        const int64_t chunks = (n + CUDA_TOPK_CHUNK - 1) / CUDA_TOPK_CHUNK;
        dst.final_pass = chunks == 1;
        dst.next_v = buf_v[cur];
        dst.next_i = buf_i[cur];
        src.n = n;
        cudaError_t err = launch_chunks(src, dst, rows, largest, stream);
        if (err != cudaSuccess || dst.final_pass) return err;
        src.cand_v = buf_v[cur];
        src.cand_i = buf_i[cur];
        n = chunks * k;
        cur ^= 1;
    }
}

}  // namespace
}  // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_reduce_topk(cinfer_dtype dt, const void *x, void *values, int64_t *indices,
                                        int64_t outer, int64_t len, int64_t inner, int64_t k, bool largest,
                                        void *scratch, size_t *scratch_bytes, cudaStream_t stream) {
    CUDA_DISPATCH_NUMERIC(dt, T,
                          return run_topk<T>(x, values, indices, outer, len, inner, k, largest, scratch,
                                             scratch_bytes, stream),
                          return cudaErrorInvalidValue)
    return cudaErrorInvalidValue;
}
