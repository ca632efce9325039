// CUDA kernels of the movement family, copies and generated tensors: strided view copies (Transpose, Slice, Split,
// Expand, Tile, DepthToSpace), a tiled transpose, Concat/Split batches, Pad, Trilu, fills (ConstantOfShape, Shape,
// Constant, EyeLike, Range). Data moves by element size only.
#include <string.h>

#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/movement.h"
#include "backend/cuda/kernels/movement_dispatch.cuh"

using namespace cinfer_cuda;
using namespace cinfer_cuda::movement;

namespace {

// ---------------------------------------------------------------- strided copies

// Drops size-1 dims and merges neighbours that are contiguous in the source. Returns the element count.
int64_t view_simplify(movement_view *v) {
    int64_t total = 1;
    int m = 0;
    for (int d = 0; d < v->ndim; d++) {
        total *= v->dims[d];
        if (v->dims[d] == 1) continue;
        if (m > 0 && v->stride[m - 1] == v->stride[d] * v->dims[d]) {
            v->dims[m - 1] *= v->dims[d];
            v->stride[m - 1] = v->stride[d];
        } else {
            v->dims[m] = v->dims[d];
            v->stride[m] = v->stride[d];
            m++;
        }
    }
    v->ndim = m;
    return total;
}

// True when every output index and every source offset (which may be negative) fits in 31 bits, so the
// kernels can index in 32-bit arithmetic (64-bit division is several times slower on the GPU).
bool view_fits32(const movement_view *v, int64_t total) {
    const int64_t limit = (int64_t)1 << 31;
    if (total >= limit) return false;
    int64_t reach = 0;
    for (int d = 0; d < v->ndim; d++) {
        int64_t s = v->stride[d] < 0 ? -v->stride[d] : v->stride[d];
        if (s >= limit) return false;
        reach += s * (v->dims[d] - 1); // dims < 2^31 and s < 2^31: no overflow, and the running sum stays below 2^62
        if (reach >= limit) return false;
    }
    return true;
}

// Index types of a copy: U counts output elements (unsigned so the grid-stride step cannot overflow it),
// S accumulates signed source offsets.
template <typename T, typename U, typename S>
__global__ void view_copy_kernel(T *__restrict__ dst, const T *__restrict__ src, const __grid_constant__ movement_view v,
                                 U total) {
    for (U i = (U)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (U)blockDim.x * gridDim.x) {
        U rem = i;
        S off = 0;
        for (int d = v.ndim - 1; d >= 0; d--) {
            U dim = (U)v.dims[d];
            off += (S)(rem % dim) * (S)v.stride[d];
            rem /= dim;
        }
        dst[i] = src[off];
    }
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// Batched 2-D transpose through shared memory: out [outer.., R, C] where R is contiguous in the source
// (stride 1) and C has stride cs. Reads are coalesced along R, writes along C. v holds the outer dims.
template <typename T, typename S>
__global__ void transpose_tiles_kernel(T *__restrict__ dst, const T *__restrict__ src, const __grid_constant__ movement_view v,
                                       S R, S C, S cs, S row_tiles, S col_tiles, S tiles) {
    __shared__ T tile[kTile][kTile + 1];
    for (S t = blockIdx.x; t < tiles; t += gridDim.x) {
        S per_batch = row_tiles * col_tiles;
        S b = t / per_batch, rem = t % per_batch;
        S r0 = (rem / col_tiles) * kTile, c0 = (rem % col_tiles) * kTile;
        S boff = 0, bb = b;
        for (int d = v.ndim - 1; d >= 0; d--) {
            S dim = (S)v.dims[d];
            boff += (bb % dim) * (S)v.stride[d];
            bb /= dim;
        }
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
            S r = r0 + threadIdx.x, c = c0 + j;
            if (r < R && c < C) tile[j][threadIdx.x] = src[boff + r + c * cs];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
            S r = r0 + j, c = c0 + threadIdx.x;
            if (r < R && c < C) dst[(b * R + r) * C + c] = tile[threadIdx.x][j];
        }
        __syncthreads(); // the tile is refilled by the next iteration
    }
}

template <typename T, typename S>
cudaError_t launch_transpose_tiles(void *dst, const void *src, const movement_view &v, int64_t total,
                                   cudaStream_t stream) {
    int m = v.ndim;
    movement_view outer_view = v;
    outer_view.ndim = m - 2;
    S R = (S)v.dims[m - 2], C = (S)v.dims[m - 1], cs = (S)v.stride[m - 1];
    S row_tiles = (R + kTile - 1) / kTile, col_tiles = (C + kTile - 1) / kTile;
    S batch = (S)(total / ((int64_t)R * C));
    S tiles = batch * row_tiles * col_tiles;
    unsigned grid = grid_for((int64_t)tiles, 1);
    transpose_tiles_kernel<T, S><<<grid, dim3(kTile, kTileRows), 0, stream>>>((T *)dst, (const T *)src, outer_view, R,
                                                                             C, cs, row_tiles, col_tiles, tiles);
    return cudaGetLastError();
}

// Copies move aligned groups of elements as one wider unit (up to 16 bytes, one vector load and store): a view whose
// last dim is contiguous is rewritten in units of `unit` bytes when the last dim, every other stride and both
// pointers allow it. Returns the unit (elem_size when nothing widens).
size_t view_widen(movement_view *v, size_t elem_size, const void *dst, const void *src) {
    int m = v->ndim;
    if (m == 0 || v->stride[m - 1] != 1) return elem_size;
    for (size_t unit = 16; unit > elem_size; unit /= 2) {
        int64_t f = (int64_t)(unit / elem_size);
        bool ok = v->dims[m - 1] % f == 0 && (uintptr_t)dst % unit == 0 && (uintptr_t)src % unit == 0;
        for (int d = 0; ok && d < m - 1; d++) ok = v->stride[d] % f == 0;
        if (!ok) continue;
        v->dims[m - 1] /= f;
        for (int d = 0; d < m - 1; d++) v->stride[d] /= f;
        return unit;
    }
    return elem_size;
}

// The same for a Concat/Split batch: every part's columns and offsets and every pointer must allow the unit.
size_t concat_widen(movement_concat_batch *b, size_t elem_size) {
    for (size_t unit = 16; unit > elem_size; unit /= 2) {
        int64_t f = (int64_t)(unit / elem_size);
        bool ok = b->wide_cols % f == 0 && (uintptr_t)b->wide % unit == 0;
        for (int k = 0; ok && k < b->count; k++)
            ok = b->cum[k + 1] % f == 0 && b->wide_col0[k] % f == 0 && (uintptr_t)b->part[k] % unit == 0;
        if (!ok) continue;
        b->wide_cols /= f;
        for (int k = 0; k < b->count; k++) {
            b->cum[k + 1] /= f;
            b->wide_col0[k] /= f;
        }
        return unit;
    }
    return elem_size;
}

template <typename T>
cudaError_t launch_view_copy(void *dst, const void *src, const movement_view &v, int64_t total, cudaStream_t stream) {
    int m = v.ndim;
    bool fits32 = view_fits32(&v, total);
    // a real transpose (the contiguous source dim is not the output's last): tiles keep both sides coalesced
    if (m >= 2 && v.stride[m - 2] == 1 && v.stride[m - 1] != 1 && v.stride[m - 1] != 0 && v.dims[m - 2] >= 4 &&
        v.dims[m - 1] >= 4) {
        return fits32 ? launch_transpose_tiles<T, int32_t>(dst, src, v, total, stream)
                      : launch_transpose_tiles<T, int64_t>(dst, src, v, total, stream);
    }
    unsigned grid = grid_for(total);
    if (fits32)
        view_copy_kernel<T, uint32_t, int32_t><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)src, v, (uint32_t)total);
    else
        view_copy_kernel<T, uint64_t, int64_t><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)src, v, (uint64_t)total);
    return cudaGetLastError();
}

// ---------------------------------------------------------------- concat, split

template <typename T, bool kToWide>
__global__ void concat_kernel(const __grid_constant__ movement_concat_batch b, int64_t total) {
    int64_t batch_cols = b.cum[b.count];
    CUDA_GRID_STRIDE(i, total) {
        int64_t o = i / batch_cols, j = i % batch_cols;
        int lo = 0, hi = b.count - 1; // the part holding column j: the last k with cum[k] <= j
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (b.cum[mid] <= j) lo = mid;
            else hi = mid - 1;
        }
        int64_t jj = j - b.cum[lo], cols = b.cum[lo + 1] - b.cum[lo];
        T *part = (T *)b.part[lo] + o * cols + jj;
        T *wide = (T *)b.wide + o * b.wide_cols + b.wide_col0[lo] + jj;
        if (kToWide) *wide = *part;
        else *part = *wide;
    }
}

// ---------------------------------------------------------------- pad, trilu

// Input coordinate for padded coordinate i of an axis of n elements; -1 means the constant value.
__device__ __forceinline__ int64_t pad_source(int64_t i, int64_t n, int mode) {
    if (i >= 0 && i < n) return i;
    if (n <= 0) return -1;
    switch (mode) {
    case 2: return i < 0 ? 0 : n - 1; // MOVEMENT_PAD_EDGE
    case 3: return ((i % n) + n) % n; // MOVEMENT_PAD_WRAP
    case 1: {                         // MOVEMENT_PAD_REFLECT, numpy-style repeated reflection
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
        return m < n ? m : period - m;
    }
    default: return -1;
    }
}

template <typename T>
__global__ void pad_kernel(T *__restrict__ dst, const T *__restrict__ src, const T *__restrict__ value,
                           const __grid_constant__ movement_pad_args a, int64_t total) {
    T fill = value ? *value : T(0);
    CUDA_GRID_STRIDE(i, total) {
        int64_t rem = i, off = 0;
        bool padded = false;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t dim = a.out_dims[d];
            int64_t s = pad_source(rem % dim - a.lead[d], a.keep[d], a.mode);
            rem /= dim;
            if (s < 0) padded = true;
            else off += (a.skip[d] + s) * a.in_strides[d];
        }
        dst[i] = padded ? fill : src[off];
    }
}

template <typename T>
__global__ void trilu_kernel(T *dst, const T *src, int64_t rows, int64_t cols, int64_t k, bool upper, int64_t total) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t j = i % cols, r = (i / cols) % rows, edge = r + k;
        bool keep = upper ? j >= edge : j <= edge;
        T v = src[i]; // read before writing: dst may be src
        dst[i] = keep ? v : T(0);
    }
}

// ---------------------------------------------------------------- generated tensors

template <typename T> __global__ void fill_kernel(T *dst, T value, int64_t count) {
    CUDA_GRID_STRIDE(i, count) dst[i] = value;
}

constexpr size_t kInlineBytes = 4000; // kernel arguments stay under the classic 4 KB limit

struct inline_bytes {
    unsigned char bytes[kInlineBytes];
};

__global__ void write_bytes_kernel(unsigned char *dst, const __grid_constant__ inline_bytes b, int64_t count) {
    CUDA_GRID_STRIDE(i, count) dst[i] = b.bytes[i];
}

template <typename T> __global__ void eye_kernel(T *dst, int64_t cols, int64_t k, T one, int64_t total) {
    CUDA_GRID_STRIDE(i, total) {
        int64_t r = i / cols, j = i % cols;
        dst[i] = j - r == k ? one : T(0);
    }
}

template <typename T> __global__ void range_float_kernel(T *dst, double start, double delta, int64_t count) {
    // separate multiply and add (no fused multiply-add) and through float like the CPU's store_double, so every
    // dtype rounds as on the CPU
    CUDA_GRID_STRIDE(i, count) {
        double v = __dadd_rn(start, __dmul_rn((double)i, delta));
        if constexpr (std::is_same<T, double>::value) dst[i] = v;
        else dst[i] = store<T>((float)v);
    }
}

template <typename T> __global__ void range_int_kernel(T *dst, uint64_t start, uint64_t delta, int64_t count) {
    CUDA_GRID_STRIDE(i, count) dst[i] = (T)(int64_t)(start + (uint64_t)i * delta); // wraps like the CPU
}

template <typename T> T value_from_bits(uint64_t bits) {
    T v;
    memcpy(&v, &bits, sizeof v); // little-endian: the low bytes
    return v;
}

// ---------------------------------------------------------------- batched device copies

// Copy k of the batch in block row k: 16-byte words where both ends are aligned, then the tail bytes.
__global__ void copy_batch_kernel(const __grid_constant__ movement_copy_batch b) {
    const int k = blockIdx.y;
    const char *src = (const char *)b.src[k];
    char *dst = (char *)b.dst[k];
    const size_t bytes = b.bytes[k], stride = (size_t)blockDim.x * gridDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if ((((uintptr_t)src | (uintptr_t)dst) & 15) == 0) {
        const size_t words = bytes / 16;
        for (size_t i = first; i < words; i += stride) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
        done = words * 16;
    }
    for (size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
}

}  // namespace

extern "C" cudaError_t movement_launch_view_copy(void *dst, const void *src, size_t elem_size, const movement_view *view,
                                                 cudaStream_t stream) {
    movement_view v = *view;
    int64_t total = view_simplify(&v);
    if (total == 0) return cudaSuccess;
    if (v.ndim == 0 || (v.ndim == 1 && v.stride[0] == 1)) // contiguous: one device-to-device copy
        return cudaMemcpyAsync(dst, src, (size_t)total * elem_size, cudaMemcpyDeviceToDevice, stream);
    size_t unit = view_widen(&v, elem_size, dst, src);
    total = total / (int64_t)(unit / elem_size);
    return dispatch_copy_unit(unit, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_view_copy<T>(dst, src, v, total, stream);
    });
}

extern "C" cudaError_t movement_launch_concat(const movement_concat_batch *b, size_t elem_size, bool to_wide,
                                              cudaStream_t stream) {
    if (b->count <= 0 || b->outer * b->cum[b->count] <= 0) return cudaSuccess;
    movement_concat_batch wide = *b;
    size_t unit = concat_widen(&wide, elem_size);
    int64_t total = wide.outer * wide.cum[wide.count];
    unsigned grid = grid_for(total);
    return dispatch_copy_unit(unit, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (to_wide) concat_kernel<T, true><<<grid, kBlock, 0, stream>>>(wide, total);
        else concat_kernel<T, false><<<grid, kBlock, 0, stream>>>(wide, total);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_pad(void *dst, const void *src, const void *value, size_t elem_size,
                                           const movement_pad_args *a, int64_t total, cudaStream_t stream) {
    if (total <= 0) return cudaSuccess;
    unsigned grid = grid_for(total);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        pad_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)src, (const T *)value, *a, total);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_trilu(void *dst, const void *src, size_t elem_size, int64_t mats, int64_t rows,
                                             int64_t cols, int64_t k, bool upper, cudaStream_t stream) {
    int64_t total = mats * rows * cols;
    if (total <= 0) return cudaSuccess;
    if (k > cols) k = cols + 1; // keeps row + k from overflowing; the result is the same
    if (k < -rows) k = -rows - 1;
    unsigned grid = grid_for(total);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        trilu_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, (const T *)src, rows, cols, k, upper, total);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_fill(void *dst, size_t elem_size, int64_t count, uint64_t value_bits,
                                            cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    unsigned grid = grid_for(count);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        fill_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, value_from_bits<T>(value_bits), count);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_copy_batch(const movement_copy_batch *b, cudaStream_t stream) {
    if (b->n <= 0 || b->n > MOVEMENT_COPY_BATCH_MAX) return b->n == 0 ? cudaSuccess : cudaErrorInvalidValue;
    size_t most = 0;
    for (int k = 0; k < b->n; k++) most = b->bytes[k] > most ? b->bytes[k] : most;
    if (most == 0) return cudaSuccess;
    size_t blocks = (most / 16 + 255) / 256;
    blocks = blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks;
    copy_batch_kernel<<<dim3((unsigned)blocks, (unsigned)b->n), 256, 0, stream>>>(*b);
    return cudaGetLastError();
}

extern "C" cudaError_t movement_launch_write_bytes(void *dst, const void *bytes, size_t count, cudaStream_t stream) {
    for (size_t done = 0; done < count; done += kInlineBytes) {
        size_t n = count - done < kInlineBytes ? count - done : kInlineBytes;
        inline_bytes b;
        memcpy(b.bytes, (const unsigned char *)bytes + done, n);
        write_bytes_kernel<<<grid_for((int64_t)n), kBlock, 0, stream>>>((unsigned char *)dst + done, b, (int64_t)n);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
}

extern "C" cudaError_t movement_launch_eye(void *dst, size_t elem_size, int64_t rows, int64_t cols, int64_t k,
                                           uint64_t one_bits, cudaStream_t stream) {
    int64_t total = rows * cols;
    if (total <= 0) return cudaSuccess;
    unsigned grid = grid_for(total);
    return dispatch_by_size(elem_size, [&](auto tag) {
        using T = typename decltype(tag)::type;
        eye_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, cols, k, value_from_bits<T>(one_bits), total);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t movement_launch_range(void *dst, cinfer_dtype dtype, int64_t count, double start_f, double delta_f,
                                             int64_t start_i, int64_t delta_i, cudaStream_t stream) {
    if (count <= 0) return cudaSuccess;
    unsigned grid = grid_for(count);
    uint64_t su = (uint64_t)start_i, du = (uint64_t)delta_i;
    switch (dtype) {
    case CINFER_DTYPE_INT16: range_int_kernel<int16_t><<<grid, kBlock, 0, stream>>>((int16_t *)dst, su, du, count); break;
    case CINFER_DTYPE_INT32: range_int_kernel<int32_t><<<grid, kBlock, 0, stream>>>((int32_t *)dst, su, du, count); break;
    case CINFER_DTYPE_INT64: range_int_kernel<int64_t><<<grid, kBlock, 0, stream>>>((int64_t *)dst, su, du, count); break;
    default:
        return dispatch_numeric(dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            if constexpr (std::is_integral<T>::value) return cudaErrorInvalidValue; // only int16/32/64 above
            else {
                range_float_kernel<T><<<grid, kBlock, 0, stream>>>((T *)dst, start_f, delta_f, count);
                return cudaGetLastError();
            }
        });
    }
    return cudaGetLastError();
}
