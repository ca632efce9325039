// CUDA kernels of Reduce*, ArgMax/ArgMin and MeanVarianceNormalization over any set of axes.
//
// Design: the host groups the input dims (reduce.h: cuda_reduce_geom). Two kernels fold them:
//  - rows: the last group is reduced (contiguous runs along r): G threads (a warp or more) per output,
//    striding over r, then a warp-shuffle and shared-memory tree;
//  - cols: the last group is kept: consecutive threads take consecutive outputs (coalesced), and Y threads
//    per output split r, folded through shared memory in thread order.
// When there are too few outputs to fill the GPU, r is cut into `splits` slices (grid.y), each writing a
// partial accumulator to scratch, and a third kernel folds the slices in order. Every fold order is fixed
// by the shapes alone, so results are bitwise reproducible (no atomics).
#include <limits>
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/reduce_device.cuh"

namespace cinfer_cuda {
namespace {

__device__ __forceinline__ int64_t keep_offset(const cuda_reduce_geom &g, int64_t o) {
    return red::index_offset(o, g.nkeep, g.keep_dims, g.keep_strides);
}
__device__ __forceinline__ int64_t red_offset(const cuda_reduce_geom &g, int64_t r) {
    if (g.nred == 1) return r * g.red_strides[0];
    return red::index_offset(r, g.nred, g.red_dims, g.red_strides);
}

// ---- accumulators: float types in acc<T> (float, or double for double), integers in 64 bits ----
template <typename T, bool = std::is_integral<T>::value> struct accum {
    using type = typename acc<T>::type;
};
template <typename T> struct accum<T, true> {
    using type = typename std::conditional<std::is_signed<T>::value, int64_t, uint64_t>::type;
};
template <typename T> using accum_t = typename accum<T>::type;

// Integer folds wrap around (through uint64_t: signed overflow is undefined), as the CPU kernels do.
template <typename A> __device__ __forceinline__ A add_w(A a, A b) {
    if constexpr (std::is_integral<A>::value) return (A)((uint64_t)a + (uint64_t)b);
    else return a + b;
}
template <typename A> __device__ __forceinline__ A mul_w(A a, A b) {
    if constexpr (std::is_integral<A>::value) return (A)((uint64_t)a * (uint64_t)b);
    else return a * b;
}
template <typename A> __device__ __forceinline__ A abs_w(A v) {
    if constexpr (std::is_integral<A>::value && std::is_signed<A>::value) return v < 0 ? (A)(0 - (uint64_t)v) : v;
    else if constexpr (std::is_integral<A>::value) return v;
    else return red::abs_t(v);
}

// ---- fold operations: init (identity), fold(acc, element, r), combine(lower slice, higher slice), final ----
enum SumKind { kSum, kMean, kL1, kL2, kLogSum, kSumSquare, kProd };

template <typename T, int K> struct SumLikeOp {
    using A = accum_t<T>;
    using Out = T;
    __device__ __forceinline__ A init() const { return K == kProd ? A(1) : A(0); }
    __device__ __forceinline__ A fold(A a, const T &x, int64_t) const {
        A v = (A)load(x);
        if constexpr (K == kProd) return mul_w(a, v);
        else if constexpr (K == kL1) return add_w(a, abs_w(v));
        else if constexpr (K == kL2 || K == kSumSquare) return add_w(a, mul_w(v, v));
        else return add_w(a, v);
    }
    __device__ __forceinline__ A combine(A a, A b) const { return K == kProd ? mul_w(a, b) : add_w(a, b); }
    __device__ __forceinline__ Out final(A a, int64_t count) const {
        if constexpr (K == kMean) {
            if constexpr (std::is_integral<A>::value) return store<T>(count ? (A)(a / (A)count) : A(0));
            else return store<T>(a / (A)count); /* 0/0: NaN for an empty set, as the CPU */
        } else if constexpr (K == kL2) {
            return store<T>(red::sqrt_t(a));
        } else if constexpr (K == kLogSum) {
            return store<T>(red::log_t(a));
        } else {
            return store<T>(a);
        }
    }
};

// Max / min: a NaN wins (numpy's rule); integers start from the type's extreme.
template <typename T, bool kMin> struct ExtremeOp {
    using A = accum_t<T>;
    using Out = T;
    __device__ __forceinline__ static bool beats(A v, A a) { return (kMin ? v < a : v > a) || red::is_nan(v); }
    __device__ __forceinline__ A init() const {
        if constexpr (std::is_integral<T>::value)
            return kMin ? (A)std::numeric_limits<T>::max() : (A)std::numeric_limits<T>::lowest();
        else return kMin ? red::pos_inf<A>() : -red::pos_inf<A>();
    }
    __device__ __forceinline__ A fold(A a, const T &x, int64_t) const {
        A v = (A)load(x);
        return beats(v, a) ? v : a;
    }
    __device__ __forceinline__ A combine(A a, A b) const {
        if (red::is_nan(a)) return a;
        return beats(b, a) ? b : a;
    }
    __device__ __forceinline__ Out final(A a, int64_t) const { return store<T>(a); }
};

// log(sum(exp(x))) as the CPU computes it: the largest finite value m factored out (0 when there is none),
// a NaN gives NaN, a +inf gives +inf. Kept online as (m, sum of exp(x - m)) so slices combine.
template <typename T> struct LogSumExpOp {
    using F = typename acc<T>::type;
    struct A {
        F m, s;
        int flags; /* 1: a NaN was seen, 2: a +inf was seen */
    };
    using Out = T;
    __device__ __forceinline__ A init() const { return A{-red::pos_inf<F>(), F(0), 0}; }
    __device__ __forceinline__ A fold(A a, const T &x, int64_t) const {
        F v = load(x);
        if (v != v) a.flags |= 1;
        else if (v == red::pos_inf<F>()) a.flags |= 2;
        else if (v == -red::pos_inf<F>()) return a; /* exp(-inf - m) adds 0 */
        else if (v > a.m) {
            a.s = a.s * red::exp_t(a.m - v) + F(1); /* a.m == -inf: 0 * 0 + 1 */
            a.m = v;
        } else {
            a.s += red::exp_t(v - a.m);
        }
        return a;
    }
    __device__ __forceinline__ A combine(A a, A b) const {
        int flags = a.flags | b.flags;
        if (a.m < b.m) {
            A t = a;
            a = b;
            b = t;
        }
        if (b.m == -red::pos_inf<F>()) return A{a.m, a.s, flags}; /* b has no finite values: b.s is 0 */
        return A{a.m, a.s + b.s * red::exp_t(b.m - a.m), flags};
    }
    __device__ __forceinline__ Out final(A a, int64_t) const {
        if (a.flags & 1) return store<T>(red::quiet_nan<F>());
        if (a.flags & 2) return store<T>(red::pos_inf<F>());
        F m = a.m == -red::pos_inf<F>() ? F(0) : a.m;
        return store<T>(m + red::log_t(a.s));
    }
};

// ArgMax / ArgMin: a NaN counts as the extreme; ties take the lower index, or the higher with
// select_last_index. The rule is a total order on (value, index), so any fold order gives the CPU's answer.
template <typename T> struct ArgOp {
    using V = typename acc<T>::type; /* float for the half types; integers compare as themselves */
    struct A {
        V v;
        int64_t i; /* -1: nothing seen */
    };
    using Out = int64_t;
    bool is_max, last;
    __device__ __forceinline__ A init() const { return A{V(0), -1}; }
    __device__ __forceinline__ A pick_index(A a, A b) const { return (last ? a.i > b.i : a.i < b.i) ? a : b; }
    __device__ __forceinline__ A combine(A a, A b) const {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        bool an = red::is_nan(a.v), bn = red::is_nan(b.v);
        if (an || bn) return an && bn ? pick_index(a, b) : an ? a : b;
        if (a.v == b.v) return pick_index(a, b);
        return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
    }
    __device__ __forceinline__ A fold(A a, const T &x, int64_t r) const { return combine(a, A{load(x), r}); }
    __device__ __forceinline__ Out final(A a, int64_t) const { return a.i; }
};

// ---- kernels ----
template <typename T, typename Op>
__global__ void reduce_rows_kernel(const T *__restrict__ x, typename Op::Out *__restrict__ y,
                                   typename Op::A *__restrict__ partial, cuda_reduce_geom g, Op op, int64_t slice) {
    using A = typename Op::A;
    __shared__ A warp_part[kBlock / 32];
    const int G = (int)blockDim.x, W = (int)blockDim.y, tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int lane = tx & 31, warp = (ty * G + tx) >> 5, warps_per_out = G >> 5;
    const int64_t r0 = (int64_t)blockIdx.y * slice, r1 = r0 + slice < g.red ? r0 + slice : g.red;
    auto combine = [&](A a, A b) { return op.combine(a, b); };
    for (int64_t ob = (int64_t)blockIdx.x * W; ob < g.outputs; ob += (int64_t)gridDim.x * W) {
        const int64_t o = ob + ty;
        A a = op.init();
        if (o < g.outputs) {
            const T *xo = x + keep_offset(g, o);
            for (int64_t r = r0 + tx; r < r1; r += G) a = op.fold(a, xo[red_offset(g, r)], r);
        }
        a = red::warp_reduce(a, combine);
        if (warps_per_out > 1) {
            if (lane == 0) warp_part[warp] = a;
            __syncthreads();
            if (tx == 0)
                for (int w = 1; w < warps_per_out; w++) a = op.combine(a, warp_part[warp + w]);
            __syncthreads();
        }
        if (tx == 0 && o < g.outputs) {
            if (gridDim.y == 1) y[o] = op.final(a, g.red);
            else partial[(int64_t)blockIdx.y * g.outputs + o] = a;
        }
    }
}

template <typename T, typename Op>
__global__ void reduce_cols_kernel(const T *__restrict__ x, typename Op::Out *__restrict__ y,
                                   typename Op::A *__restrict__ partial, cuda_reduce_geom g, Op op, int64_t slice) {
    using A = typename Op::A;
    __shared__ A part[kBlock];
    const int X = (int)blockDim.x, Y = (int)blockDim.y, tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int64_t r0 = (int64_t)blockIdx.y * slice, r1 = r0 + slice < g.red ? r0 + slice : g.red;
    for (int64_t ob = (int64_t)blockIdx.x * X; ob < g.outputs; ob += (int64_t)gridDim.x * X) {
        const int64_t o = ob + tx;
        A a = op.init();
        if (o < g.outputs) {
            const T *xo = x + keep_offset(g, o);
            for (int64_t r = r0 + ty; r < r1; r += Y) a = op.fold(a, xo[red_offset(g, r)], r);
        }
        if (Y > 1) {
            part[ty * X + tx] = a;
            __syncthreads();
            if (ty == 0)
                for (int k = 1; k < Y; k++) a = op.combine(a, part[k * X + tx]);
            __syncthreads();
        }
        if (ty == 0 && o < g.outputs) {
            if (gridDim.y == 1) y[o] = op.final(a, g.red);
            else partial[(int64_t)blockIdx.y * g.outputs + o] = a;
        }
    }
}

// Folds the slices' partials of each output in slice order.
template <typename Op>
__global__ void reduce_finish_kernel(const typename Op::A *__restrict__ partial, typename Op::Out *__restrict__ y,
                                     int64_t outputs, int splits, int64_t count, Op op) {
    CUDA_GRID_STRIDE(o, outputs) {
        typename Op::A a = partial[o];
        for (int s = 1; s < splits; s++) a = op.combine(a, partial[(int64_t)s * outputs + o]);
        y[o] = op.final(a, count);
    }
}

// Launch shape, a function of the geometry alone (so the same shapes always fold in the same order).
struct reduce_plan {
    bool rows;
    int bx, by;
    unsigned grid_x;
    int splits;
    int64_t slice;
};

reduce_plan plan_reduce(const cuda_reduce_geom &g) {
    reduce_plan p;
    const int64_t R = g.red;
    int64_t per_block, min_slice;
    if (g.inner == 1 && R >= 16) {
        int G = R <= 128 ? 32 : R <= 256 ? 64 : R <= 512 ? 128 : 256;
        p.rows = true;
        p.bx = G;
        p.by = kBlock / G;
        per_block = p.by;
        min_slice = (int64_t)G * 16;
    } else {
        /* the last group kept, or rows too short for a warp: thread(s) per output */
        int Y = g.inner == 1 ? 1 : R >= 64 ? 8 : R >= 16 ? 4 : R >= 4 ? 2 : 1;
        p.rows = false;
        p.bx = kBlock / Y;
        p.by = Y;
        per_block = p.bx;
        min_slice = (int64_t)Y * 64;
    }
    const int64_t blocks = (g.outputs + per_block - 1) / per_block;
    int64_t splits = 1;
    if (blocks < 512 && R >= 2 * min_slice) {
        splits = (512 + blocks - 1) / blocks;
        if (splits > R / min_slice) splits = R / min_slice;
        if (splits > 1024) splits = 1024;
    }
    p.slice = R;
    if (splits > 1) {
        p.slice = (R + splits - 1) / splits;
        splits = (R + p.slice - 1) / p.slice;
    }
    p.splits = (int)splits;
    p.grid_x = red::blocks_for(blocks);
    return p;
}

template <typename T, typename Op>
cudaError_t run_reduce(Op op, const void *xv, void *yv, const cuda_reduce_geom &g, void *scratch, size_t *bytes,
                       cudaStream_t stream) {
    using A = typename Op::A;
    using Out = typename Op::Out;
    const reduce_plan p = plan_reduce(g);
    const size_t need = p.splits > 1 ? (size_t)p.splits * (size_t)g.outputs * sizeof(A) : 0;
    if (bytes) {
        *bytes = need;
        return cudaSuccess;
    }
    if (need && !scratch) return cudaErrorInvalidValue;
    const T *x = (const T *)xv;
    Out *y = (Out *)yv;
    A *part = (A *)scratch;
    dim3 block((unsigned)p.bx, (unsigned)p.by), grid(p.grid_x, (unsigned)p.splits);
    if (p.rows) reduce_rows_kernel<T, Op><<<grid, block, 0, stream>>>(x, y, part, g, op, p.slice);
    else reduce_cols_kernel<T, Op><<<grid, block, 0, stream>>>(x, y, part, g, op, p.slice);
    if (p.splits > 1) {
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
        reduce_finish_kernel<Op><<<grid_for(g.outputs), kBlock, 0, stream>>>(part, y, g.outputs, p.splits, g.red, op);
    }
    return cudaGetLastError();
}

// ---- MeanVarianceNormalization ----
template <typename T> __global__ void mvn_rows_kernel(const T *x, T *y, cuda_reduce_geom g) {
    __shared__ double smem[32];
    const double count = (double)g.red;
    for (int64_t o = blockIdx.x; o < g.outputs; o += gridDim.x) {
        const int64_t base = keep_offset(g, o);
        double s = 0, q = 0;
        for (int64_t r = threadIdx.x; r < g.red; r += blockDim.x) s += (double)load(x[base + red_offset(g, r)]);
        const double mean = red::block_allreduce(s, red::Add{}, smem) / count;
        for (int64_t r = threadIdx.x; r < g.red; r += blockDim.x) {
            double d = (double)load(x[base + red_offset(g, r)]) - mean;
            q += d * d;
        }
        const double inv = 1.0 / (sqrt(red::block_allreduce(q, red::Add{}, smem) / count) + 1e-9);
        for (int64_t r = threadIdx.x; r < g.red; r += blockDim.x) {
            const int64_t k = base + red_offset(g, r);
            y[k] = store<T>(((double)load(x[k]) - mean) * inv);
        }
    }
}

template <typename T> __global__ void mvn_cols_kernel(const T *x, T *y, cuda_reduce_geom g) {
    const double count = (double)g.red;
    CUDA_GRID_STRIDE(o, g.outputs) {
        const int64_t base = keep_offset(g, o);
        double s = 0, q = 0;
        for (int64_t r = 0; r < g.red; r++) s += (double)load(x[base + red_offset(g, r)]);
        const double mean = s / count;
        for (int64_t r = 0; r < g.red; r++) {
            double d = (double)load(x[base + red_offset(g, r)]) - mean;
            q += d * d;
        }
        const double inv = 1.0 / (sqrt(q / count) + 1e-9);
        for (int64_t r = 0; r < g.red; r++) {
            const int64_t k = base + red_offset(g, r);
            y[k] = store<T>(((double)load(x[k]) - mean) * inv);
        }
    }
}

}  // namespace
}  // namespace cinfer_cuda

using namespace cinfer_cuda;

extern "C" cudaError_t cuda_reduce(cuda_reduce_op op, cinfer_dtype dt, const void *x, void *y,
                                   const cuda_reduce_geom *g, bool select_last_index, void *scratch,
                                   size_t *scratch_bytes, cudaStream_t stream) {
#define RUN_REDUCE(OP) return run_reduce<T>(OP, x, y, *g, scratch, scratch_bytes, stream)
    switch (op) {
    case CUDA_REDUCE_SUM: CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((SumLikeOp<T, kSum>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_MEAN: CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((SumLikeOp<T, kMean>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_MAX: CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((ExtremeOp<T, false>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_MIN: CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((ExtremeOp<T, true>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_PROD: CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((SumLikeOp<T, kProd>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_L1: CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((SumLikeOp<T, kL1>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_L2: CUDA_DISPATCH_FLOATS(dt, T, RUN_REDUCE((SumLikeOp<T, kL2>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_LOG_SUM:
        CUDA_DISPATCH_FLOATS(dt, T, RUN_REDUCE((SumLikeOp<T, kLogSum>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_LOG_SUM_EXP:
        CUDA_DISPATCH_FLOATS(dt, T, RUN_REDUCE((LogSumExpOp<T>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_SUM_SQUARE:
        CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((SumLikeOp<T, kSumSquare>{})), return cudaErrorInvalidValue)
    case CUDA_REDUCE_ARG_MAX:
    case CUDA_REDUCE_ARG_MIN: {
        const bool is_max = op == CUDA_REDUCE_ARG_MAX;
        CUDA_DISPATCH_NUMERIC(dt, T, RUN_REDUCE((ArgOp<T>{is_max, select_last_index})), return cudaErrorInvalidValue)
    }
    }
#undef RUN_REDUCE
    return cudaErrorInvalidValue;
}

template <typename T>
static cudaError_t run_mvn(const void *x, void *y, const cuda_reduce_geom &g, cudaStream_t stream) {
    if (g.inner == 1)
        mvn_rows_kernel<T><<<red::blocks_for(g.outputs), red::row_threads(g.red), 0, stream>>>((const T *)x, (T *)y, g);
    else
        mvn_cols_kernel<T><<<grid_for(g.outputs), kBlock, 0, stream>>>((const T *)x, (T *)y, g);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_reduce_mvn(cinfer_dtype dt, const void *x, void *y, const cuda_reduce_geom *g,
                                       cudaStream_t stream) {
    CUDA_DISPATCH_FLOATS(dt, T, return run_mvn<T>(x, y, *g, stream), return cudaErrorInvalidValue)
    return cudaErrorInvalidValue;
}
