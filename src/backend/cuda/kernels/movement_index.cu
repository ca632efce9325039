// CUDA kernels of the movement family driven by index tensors: Gather, GatherElements, GatherND, OneHot, and
// ScatterND/ScatterElements (keys, a stable CUB radix sort, then in-order application of each run of duplicates).
// Indices never address memory unchecked: out-of-range gathers read zero, out-of-range scatters are skipped, and
// both report the index through the run's cuda_index_check (index_check.h), so the run fails as on the CPU.
#include <type_traits>

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/movement.h"
#include "backend/cuda/kernels/movement_dispatch.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::movement;

namespace {

// Wraps a negative index once; false when it is still outside [0, size).
__device__ __forceinline__ bool wrap_index(int64_t &v, int64_t size) {
    if (v < 0) v += size;
    return v >= 0 && v < size;
}

// ---------------------------------------------------------------- gathers

// U: index arithmetic type (uint32_t when every offset fits, else uint64_t).
template <typename T, typename Idx, typename U>
__global__ void gather_kernel(T *__restrict__ dst, const T *__restrict__ src, const Idx *__restrict__ idx, U axis_size,
                              U count, U inner, U total, const cuda_index_check check) {
    for (U i = (U)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (U)blockDim.x * gridDim.x) {
        U e = i % inner, t = i / inner, j = t % count, o = t / count;
        int64_t v = (int64_t)idx[j];
        if (wrap_index(v, (int64_t)axis_size)) {
            dst[i] = src[(o * axis_size + (U)v) * inner + e];
        } else {
            dst[i] = T{};
            cuda_report_bad_index(check);
        }
    }
}

template <typename T, typename Idx>
__global__ void gather_elements_kernel(T *__restrict__ dst, const T *__restrict__ src, const Idx *__restrict__ idx,
                                       const __grid_constant__ movement_elements_args a, int64_t total,
                                       const cuda_index_check check) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t rem = i, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t dim = a.idx_dims[d];
            if (d != a.axis) off += (rem % dim) * a.data_strides[d];
            rem /= dim;
        }
        int64_t v = (int64_t)idx[i];
        if (wrap_index(v, a.axis_size)) {
            dst[i] = src[off + v * a.data_strides[a.axis]];
        } else {
            dst[i] = T{};
            cuda_report_bad_index(check);
        }
    }
}

template <typename T, typename Idx>
__global__ void gather_nd_kernel(T *__restrict__ dst, const T *__restrict__ src, const Idx *__restrict__ idx,
                                 const __grid_constant__ movement_gather_nd_args a, int64_t total,
                                 const cuda_index_check check) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t row = i / a.slice, e = i % a.slice;
        int64_t off = (row / a.per_batch) * a.data_batch;
        bool valid = true;
        for (int j = 0; j < a.k; j++) {
            int64_t v = (int64_t)idx[row * a.k + j];
            if (wrap_index(v, a.dims[j])) off += v * a.strides[j];
            else valid = false;
        }
        dst[i] = valid ? src[off + e] : T{};
        if (!valid) cuda_report_bad_index(check);
    }
}

// OneHot's index value as int64, false when out of range. Floats truncate; NaN and huge values are out of range.
template <typename Idx> __device__ __forceinline__ bool onehot_index(Idx raw, int64_t depth, int64_t &v) {
    if constexpr (std::is_integral<Idx>::value) {
        v = (int64_t)raw;
    } else {
        double x = (double)load(raw);
        if (!(x > -(double)depth - 1 && x < (double)depth)) return false;
        v = (int64_t)x;
    }
    return wrap_index(v, depth);
}

template <typename T, typename Idx>
__global__ void onehot_kernel(T *__restrict__ dst, const Idx *__restrict__ idx, const T *__restrict__ values,
                              int64_t depth, int64_t inner, int64_t total) {
    T off_value = values[0], on_value = values[1];
    CUDA_GRID_STRIDE(i, total) {
        int64_t e = i % inner, t = i / inner, pos = t % depth, o = t / depth;
        int64_t v;
        bool hit = onehot_index(idx[o * inner + e], depth, v) && v == pos;
        dst[i] = hit ? on_value : off_value;
    }
}

// ---------------------------------------------------------------- scatters

constexpr size_t kScratchAlign = 256;

size_t align_up(size_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// The scratch carved into keys and rows (in and out of the sort) and the sort's storage.
struct scatter_scratch {
    uint64_t *keys_in, *keys_out;
    int64_t *rows_in, *rows_out;
    void *sort_storage;
    size_t sort_bytes;
};

scatter_scratch scatter_carve(void *base, int64_t rows, size_t sort_bytes) {
    size_t keys = align_up((size_t)rows * sizeof(uint64_t)), idx = align_up((size_t)rows * sizeof(int64_t));
    char *p = (char *)base;
    scatter_scratch s;
    s.keys_in = (uint64_t *)p;
    s.keys_out = (uint64_t *)(p + keys);
    s.rows_in = (int64_t *)(p + 2 * keys);
    s.rows_out = (int64_t *)(p + 2 * keys + idx);
    s.sort_storage = p + 2 * keys + 2 * idx;
    s.sort_bytes = sort_bytes;
    return s;
}

size_t scatter_arrays_bytes(int64_t rows) {
    return 2 * align_up((size_t)rows * sizeof(uint64_t)) + 2 * align_up((size_t)rows * sizeof(int64_t));
}

template <typename Idx>
__global__ void scatter_nd_keys_kernel(uint64_t *keys, int64_t *rows_of, const Idx *__restrict__ idx,
                                       const __grid_constant__ movement_scatter_nd_args a, int64_t rows, uint64_t sentinel,
                                       const cuda_index_check check) {
    CUDA_GRID_STRIDE(r, rows) {
        int64_t slot = 0;
        bool valid = true;
        for (int j = 0; j < a.k; j++) {
            int64_t v = (int64_t)idx[r * a.k + j];
            if (wrap_index(v, a.dims[j])) slot += v * a.slot_strides[j];
            else valid = false;
        }
        keys[r] = valid ? (uint64_t)slot : sentinel;
        rows_of[r] = r;
        if (!valid) cuda_report_bad_index(check);
    }
}

template <typename Idx>
__global__ void scatter_elements_keys_kernel(uint64_t *keys, int64_t *rows_of, const Idx *__restrict__ idx,
                                             const __grid_constant__ movement_elements_args a, int64_t rows,
                                             uint64_t sentinel, const cuda_index_check check) {
    CUDA_GRID_STRIDE(i, rows) {
        int64_t rem = i, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t dim = a.idx_dims[d];
            if (d != a.axis) off += (rem % dim) * a.data_strides[d];
            rem /= dim;
        }
        int64_t v = (int64_t)idx[i];
        const bool valid = wrap_index(v, a.axis_size);
        keys[i] = valid ? (uint64_t)(off + v * a.data_strides[a.axis]) : sentinel;
        rows_of[i] = i;
        if (!valid) cuda_report_bad_index(check);
    }
}

// reduction none: after the stable sort the last row of each run of equal keys is the one the CPU's in-order
// loop leaves behind, so only that row writes.
template <typename T>
__global__ void scatter_assign_kernel(T *dst, const T *__restrict__ upd, const uint64_t *__restrict__ keys,
                                      const int64_t *__restrict__ rows_of, int64_t rows, int64_t slice, uint64_t sentinel,
                                      int64_t total) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t p = i / slice, e = i % slice;
        uint64_t key = keys[p];
        if (key == sentinel || (p + 1 < rows && keys[p + 1] == key)) continue;
        dst[(int64_t)key * slice + e] = upd[rows_of[p] * slice + e];
    }
}

// One reduction step rounded to T, as the CPU stores every intermediate. Integer add/mul wrap (unsigned).
template <typename T> __device__ __forceinline__ T reduce_step(T a, T b, int red) {
    if constexpr (std::is_integral<T>::value) {
        using U = typename std::conditional<(sizeof(T) > 4), uint64_t, uint32_t>::type;
        switch (red) {
        case MOVEMENT_RED_ADD: return (T)((U)a + (U)b);
        case MOVEMENT_RED_MUL: return (T)((U)a * (U)b);
        case MOVEMENT_RED_MAX: return a > b ? a : b;
        default: return a < b ? a : b;
        }
    } else {
        using A = typename acc<T>::type;
        A x = load(a), y = load(b), z;
        switch (red) {
        case MOVEMENT_RED_ADD: z = x + y; break;
        case MOVEMENT_RED_MUL: z = x * y; break;
        case MOVEMENT_RED_MAX: z = x > y ? x : y; break;
        default: z = x < y ? x : y; break;
        }
        return store<T>(z);
    }
}

// Reductions: the thread of a run's first row folds the whole run in row order.
template <typename T>
__global__ void scatter_reduce_kernel(T *dst, const T *__restrict__ upd, const uint64_t *__restrict__ keys,
                                      const int64_t *__restrict__ rows_of, int64_t rows, int64_t slice, uint64_t sentinel,
                                      int red, int64_t total) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t p = i / slice, e = i % slice;
        uint64_t key = keys[p];
        if (key == sentinel || (p > 0 && keys[p - 1] == key)) continue;
        T *target = dst + (int64_t)key * slice + e;
        T a = *target;
        for (int64_t q = p; q < rows && keys[q] == key; q++) a = reduce_step(a, upd[rows_of[q] * slice + e], red);
        *target = a;
    }
}

template <typename Idx>
__global__ void index_rows_check_kernel(const Idx *__restrict__ idx, const __grid_constant__ movement_index_rows_args a,
                                        int64_t total, const cuda_index_check check) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t v = (int64_t)idx[i];
        if (!wrap_index(v, a.dims[i % a.k])) cuda_report_bad_index(check);
    }
}

__global__ void index_check_reset_kernel(int *flag) { *(volatile int *)flag = 0; }

cudaError_t sort_storage_bytes(int64_t rows, int key_bits, size_t *bytes) {
    *bytes = 0;
    return cub::DeviceRadixSort::SortPairs(nullptr, *bytes, (const uint64_t *)nullptr, (uint64_t *)nullptr,
                                           (const int64_t *)nullptr, (int64_t *)nullptr, rows, 0, key_bits);
}

// ---------------------------------------------------------------- LookupConcat

// Piece blockIdx.y of the batch in units of U (an element, or 16 bytes where every count and address allows):
// `scale` elements per unit.
template <typename U>
__device__ void lookup_piece_copy(const movement_lookup_batch &b, const movement_lookup_piece &p, int64_t scale) {
    const int64_t inner = p.inner / scale, width = b.width / scale, col0 = p.col0 / scale, total = b.outer * inner;
    U *dst = (U *)b.dst;
    const U *src = (const U *)p.src;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    if (!p.idx) {
        for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
            const int64_t o = e / inner, c = e % inner;
            dst[o * width + col0 + c] = src[e];
        }
        return;
    }
    const int64_t row = p.row / scale, per_outer = inner / row;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t o = e / inner, c = e % inner, r = c / row, d = c % row, k = o * per_outer + r;
        int64_t v = p.idx_is_64 ? ((const int64_t *)p.idx)[k] : (int64_t)((const int32_t *)p.idx)[k];
        if (v < 0) v += p.rows;
        U out{};
        if (v >= 0 && v < p.rows) out = src[v * row + d];
        else cuda_report_bad_index(b.check);
        dst[o * width + col0 + c] = out;
    }
}

template <typename E>
__global__ void lookup_concat_kernel(const __grid_constant__ movement_lookup_batch b, unsigned vector_mask_lo,
                                     unsigned vector_mask_hi) {
    const int k = blockIdx.y;
    const movement_lookup_piece &p = b.p[k];
    const bool vec = ((k < 32 ? vector_mask_lo >> k : vector_mask_hi >> (k - 32)) & 1u) != 0;
    if (vec) lookup_piece_copy<uint4>(b, p, (int64_t)(16 / sizeof(E)));
    else lookup_piece_copy<E>(b, p, 1);
}

}  // namespace

extern "C" cudaError_t movement_launch_lookup_concat(const movement_lookup_batch *b, size_t elem_size,
                                                     cudaStream_t stream) {
    if (b->n <= 0 || b->outer == 0) return cudaSuccess;
    if (b->n > MOVEMENT_LOOKUP_MAX) return cudaErrorInvalidValue;
    // 16-byte units for a piece whose counts, offsets and addresses all allow them
    const int64_t scale = (int64_t)(16 / elem_size);
    unsigned mask[2] = {0, 0};
    int64_t most = 0;
    for (int k = 0; k < b->n; k++) {
        const movement_lookup_piece *p = &b->p[k];
        bool vec = elem_size <= 16 && 16 % elem_size == 0 && b->width % scale == 0 && p->inner % scale == 0 &&
                   p->col0 % scale == 0 && (!p->idx || p->row % scale == 0) &&
                   (((uintptr_t)b->dst | (uintptr_t)p->src) & 15) == 0;
        if (vec) mask[k / 32] |= 1u << (k % 32);
        const int64_t units = b->outer * p->inner / (vec ? scale : 1);
        most = units > most ? units : most;
    }
    const unsigned blocks = (unsigned)(most / 256 + 1 < 1024 ? most / 256 + 1 : 1024);
    const dim3 grid(blocks, (unsigned)b->n);
    switch (elem_size) {
    case 1: lookup_concat_kernel<uint8_t><<<grid, 256, 0, stream>>>(*b, mask[0], mask[1]); break;
    case 2: lookup_concat_kernel<uint16_t><<<grid, 256, 0, stream>>>(*b, mask[0], mask[1]); break;
    case 4: lookup_concat_kernel<uint32_t><<<grid, 256, 0, stream>>>(*b, mask[0], mask[1]); break;
    case 8: lookup_concat_kernel<uint64_t><<<grid, 256, 0, stream>>>(*b, mask[0], mask[1]); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t movement_launch_gather(void *dst, const void *src, const void *idx, bool idx_is_64,
                                              size_t elem_size, int64_t outer, int64_t axis_size, int64_t count,
                                              int64_t inner, cuda_index_check check, cudaStream_t stream) {
    int64_t total = outer * count * inner;
    if (total <= 0) return cudaSuccess;
    // rows of `inner` elements move in units of up to 16 bytes when their length and the pointers allow it
    size_t unit = elem_size;
    for (size_t u = 16; u > elem_size; u /= 2) {
        int64_t f = (int64_t)(u / elem_size);
        if (inner % f == 0 && (uintptr_t)dst % u == 0 && (uintptr_t)src % u == 0) {
            unit = u;
            inner /= f;
            total /= f;
            break;
        }
    }
    bool fits32 = total < ((int64_t)1 << 31) && outer * axis_size * inner < ((int64_t)1 << 31);
    unsigned grid = grid_for(total);
    return dispatch_copy_unit(unit, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_index(idx_is_64, [&](auto itag) {
            using Idx = typename decltype(itag)::type;
            if (fits32)
                gather_kernel<T, Idx, uint32_t><<<grid, kBlock, 0, stream>>>(
                    (T *)dst, (const T *)src, (const Idx *)idx, (uint32_t)axis_size, (uint32_t)count, (uint32_t)inner,
                    (uint32_t)total, check);
            else
                gather_kernel<T, Idx, uint64_t><<<grid, kBlock, 0, stream>>>(
                    (T *)dst, (const T *)src, (const Idx *)idx, (uint64_t)axis_size, (uint64_t)count, (uint64_t)inner,
                    (uint64_t)total, check);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t movement_launch_gather_elements(void *dst, const void *src, const void *idx, bool idx_is_64,
                                                       size_t elem_size, const movement_elements_args *a, int64_t total,
                                                       cuda_index_check check, cudaStream_t stream) {
    if (total <= 0) return cudaSuccess;
    unsigned grid = grid_for(total);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_index(idx_is_64, [&](auto itag) {
            using Idx = typename decltype(itag)::type;
            gather_elements_kernel<T, Idx><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)src, (const Idx *)idx, *a,
                                                                        total, check);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t movement_launch_gather_nd(void *dst, const void *src, const void *idx, bool idx_is_64,
                                                 size_t elem_size, const movement_gather_nd_args *a, int64_t rows,
                                                 cuda_index_check check, cudaStream_t stream) {
    int64_t total = rows * a->slice;
    if (total <= 0) return cudaSuccess;
    unsigned grid = grid_for(total);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_index(idx_is_64, [&](auto itag) {
            using Idx = typename decltype(itag)::type;
            gather_nd_kernel<T, Idx><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)src, (const Idx *)idx, *a, total,
                                                                  check);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t movement_launch_onehot(void *dst, const void *idx, cinfer_dtype idx_dtype, const void *values,
                                              size_t elem_size, int64_t outer, int64_t depth, int64_t inner,
                                              cudaStream_t stream) {
    int64_t total = outer * depth * inner;
    if (total <= 0) return cudaSuccess;
    unsigned grid = grid_for(total);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return dispatch_numeric(idx_dtype, [&](auto itag) {
            using Idx = typename decltype(itag)::type;
            onehot_kernel<T, Idx><<<grid, kBlock, 0, stream>>>((T *)dst, (const Idx *)idx, (const T *)values, depth,
                                                               inner, total);
            return cudaGetLastError();
        });
    });
}

extern "C" cudaError_t movement_launch_index_rows_check(const void *idx, bool idx_is_64,
                                                        const movement_index_rows_args *a, int64_t rows,
                                                        cuda_index_check check, cudaStream_t stream) {
    int64_t total = rows * a->k;
    if (total <= 0 || !check.flag) return cudaSuccess;
    return dispatch_index(idx_is_64, [&](auto itag) {
        using Idx = typename decltype(itag)::type;
        index_rows_check_kernel<Idx><<<grid_for(total), kBlock, 0, stream>>>((const Idx *)idx, *a, total, check);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_index_check_reset(cuda_index_check check, cudaStream_t stream) {
    if (!check.flag) return cudaSuccess;
    index_check_reset_kernel<<<1, 1, 0, stream>>>(check.flag);
    return cudaGetLastError();
}

extern "C" int movement_scatter_key_bits(uint64_t sentinel) {
    int bits = 1;
    while (bits < 64 && (sentinel >> bits) != 0) bits++;
    return bits;
}

extern "C" cudaError_t movement_scatter_scratch_bytes(int64_t rows, int key_bits, size_t *bytes) {
    size_t sort_bytes = 0;
    cudaError_t err = sort_storage_bytes(rows, key_bits, &sort_bytes);
    *bytes = scatter_arrays_bytes(rows) + sort_bytes;
    return err;
}

extern "C" cudaError_t movement_launch_scatter_nd_keys(void *scratch, const void *idx, bool idx_is_64,
                                                       const movement_scatter_nd_args *a, int64_t rows,
                                                       uint64_t sentinel, cuda_index_check check, cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    scatter_scratch s = scatter_carve(scratch, rows, 0);
    unsigned grid = grid_for(rows);
    return dispatch_index(idx_is_64, [&](auto itag) {
        using Idx = typename decltype(itag)::type;
        scatter_nd_keys_kernel<Idx><<<grid, kBlock, 0, stream>>>(s.keys_in, s.rows_in, (const Idx *)idx, *a, rows,
                                                                 sentinel, check);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_scatter_elements_keys(void *scratch, const void *idx, bool idx_is_64,
                                                             const movement_elements_args *a, int64_t rows,
                                                             uint64_t sentinel, cuda_index_check check,
                                                             cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    scatter_scratch s = scatter_carve(scratch, rows, 0);
    unsigned grid = grid_for(rows);
    return dispatch_index(idx_is_64, [&](auto itag) {
        using Idx = typename decltype(itag)::type;
        scatter_elements_keys_kernel<Idx><<<grid, kBlock, 0, stream>>>(s.keys_in, s.rows_in, (const Idx *)idx, *a,
                                                                       rows, sentinel, check);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_scatter_apply(void *scratch, size_t scratch_bytes, void *dst, const void *updates,
                                                     cinfer_dtype dtype, movement_reduction red, int64_t rows,
                                                     int64_t slice, uint64_t sentinel, int key_bits,
                                                     cudaStream_t stream) {
    int64_t total = rows * slice;
    if (total <= 0) return cudaSuccess;
    size_t arrays = scatter_arrays_bytes(rows);
    if (scratch_bytes < arrays) return cudaErrorInvalidValue;
    scatter_scratch s = scatter_carve(scratch, rows, scratch_bytes - arrays);
    // stable: equal keys keep their row order, so runs of duplicates apply in index order
    cudaError_t err = cub::DeviceRadixSort::SortPairs(s.sort_storage, s.sort_bytes, (const uint64_t *)s.keys_in,
                                                      s.keys_out, (const int64_t *)s.rows_in, s.rows_out, rows, 0,
                                                      key_bits, stream);
    if (err != cudaSuccess) return err;
    unsigned grid = grid_for(total);
    if (red == MOVEMENT_RED_NONE) {
        return dispatch_by_size(cinfer_dtype_size(dtype), [&](auto tag) {
            using T = typename decltype(tag)::type;
            scatter_assign_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)updates, s.keys_out, s.rows_out,
                                                                  rows, slice, sentinel, total);
            return cudaGetLastError();
        });
    }
    return dispatch_numeric(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        scatter_reduce_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)updates, s.keys_out, s.rows_out,
                                                              rows, slice, sentinel, (int)red, total);
        return cudaGetLastError();
    });
}
