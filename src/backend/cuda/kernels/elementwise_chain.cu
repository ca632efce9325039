// CUDA kernel of the internal ElementwiseChain op: each element through the program of
// graph/shape/elementwise_chain.h (the arithmetic the CPU kernel runs, compiled here), four elements per thread
// step with one load and one store each where the buffers are aligned.
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/elementwise_internal.cuh"
#include "graph/shape/elementwise_chain.h"

using namespace cinfer_cuda;

namespace {

constexpr int kChainVec = 4;

template <typename T> struct alignas(kChainVec * sizeof(T)) chain_vec {
    T v[kChainVec];
};

// The program is a __grid_constant__ parameter: chain_apply takes its address without a local copy. Chunks of
// kChainVec elements move as one access when `vectors`; the elements past the last whole chunk, and every element
// otherwise, one by one. y may be x (same element size): each chunk is read whole before it is written.
template <typename X, typename Y>
__global__ void chain_kernel(const X *x, Y *y, int64_t n, bool vectors, const __grid_constant__ chain_program p) {
    int64_t done = 0;
    if (vectors) {
        const int64_t chunks = n / kChainVec;
        CUDA_GRID_STRIDE(c, chunks) {
            chain_vec<X> in = reinterpret_cast<const chain_vec<X> *>(x)[c];
            chain_vec<Y> out;
#pragma unroll
            for (int k = 0; k < kChainVec; k++) out.v[k] = store<Y>(chain_apply(&p, (float)load(in.v[k])));
            reinterpret_cast<chain_vec<Y> *>(y)[c] = out;
        }
        done = chunks * kChainVec;
    }
    CUDA_GRID_STRIDE(i, n - done) y[done + i] = store<Y>(chain_apply(&p, (float)load(x[done + i])));
}

// Calls f(T{}) with the element type of a float, float16 or bfloat16 dtype; false for another.
template <class F> bool with_chain_type(cinfer_dtype t, F &&f) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: f(float{}); return true;
    case CINFER_DTYPE_FLOAT16: f(__half{}); return true;
    case CINFER_DTYPE_BFLOAT16: f(__nv_bfloat16{}); return true;
    default: return false;
    }
}

}  // namespace

extern "C" cudaError_t cuda_ew_chain(cinfer_dtype xt, cinfer_dtype yt, const void *x, void *y, int64_t n,
                                     const chain_program *program, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool launched = false;
    with_chain_type(xt, [&](auto xtag) {
        with_chain_type(yt, [&](auto ytag) {
            using X = decltype(xtag);
            using Y = decltype(ytag);
            const bool vectors = ((uintptr_t)x % sizeof(chain_vec<X>)) == 0 && ((uintptr_t)y % sizeof(chain_vec<Y>)) == 0;
            chain_kernel<X, Y><<<grid_for(vectors ? (n + kChainVec - 1) / kChainVec : n), kBlock, 0, stream>>>(
                (const X *)x, (Y *)y, n, vectors, *program);
            launched = true;
        });
    });
    if (!launched) return cudaErrorNotSupported;
    return cudaGetLastError();
}
