// Shared by the fused attention kernels (attention_flash.cu: float16/bfloat16 on tensor cores; attention_flash_f32.cu:
// float32): asynchronous copies to shared memory, the mask's element kinds, the device's limits.
#ifndef CINFER_CUDA_ATTENTION_FLASH_CUH
#define CINFER_CUDA_ATTENTION_FLASH_CUH

#include <math.h>
#include <stdint.h>

#include <atomic>
#include <initializer_list>

#include "backend/cuda/kernels/attention_flash.h"
#include "backend/cuda/kernels/common.cuh"

namespace cinfer_cuda {
namespace flash {

// 16 bytes global -> shared without passing through registers; src_bytes 0 fills zeros (rows past the end)
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    const unsigned at = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

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

// The current device's opt-in shared memory a block and SM count: asked of the runtime once per device, read on
// every run (the fits checks, then the launches). Inline: one cache for every file that includes this.
struct device_limits {
    int optin, sms;
};
inline cudaError_t current_device_limits(device_limits *out) {
    constexpr int kDevices = 64;
    static std::atomic<int> optin[kDevices], sms[kDevices];  // 0 until asked
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    const bool cached = device >= 0 && device < kDevices;
    if (cached && (out->optin = optin[device].load(std::memory_order_acquire)) > 0) {
        out->sms = sms[device].load(std::memory_order_relaxed);
        return cudaSuccess;
    }
    if ((e = cudaDeviceGetAttribute(&out->optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&out->sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return e;
    if (cached) {
        sms[device].store(out->sms, std::memory_order_relaxed);  // before optin, which marks the entry filled
        optin[device].store(out->optin, std::memory_order_release);
    }
    return cudaSuccess;
}

// Opts `kernel` in to `bytes` of dynamic shared memory (above the 48 KiB default: a host-side attribute, set before
// the launch) with all of L1 as shared memory, which bounds the blocks per SM (the driver's default split allowed the
// half-precision kernel 3 where it now fits more).
template <typename Kernel> cudaError_t opt_in_shared_memory(Kernel kernel, size_t bytes) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    return e;
}

// What a finished row's output is multiplied by (the Attention reference's rules, backend/cpu/attention_sdpa.c):
// 1 / sum; 0 for a row fully masked (no mask value other than -inf) or of -inf scores only, NaN instead where the
// node replaced an unguarded Softmax (empty_rows_nan); NaN for a NaN score (or +inf, whose exp is NaN), 0 instead
// with the NaN guard (nan_to_zero). sum: the row's sum of exponentials; row_max: its running maximum.
__device__ __forceinline__ float flash_row_scale(const attn_flash_args &a, float sum, float row_max, bool masked,
                                                 bool any_open) {
    const bool is_bad = sum != sum || row_max == INFINITY;
    const bool zero = (masked && !any_open) || (!is_bad && !(sum > 0.0f));
    return zero ? (a.empty_rows_nan ? NAN : 0.0f) : is_bad ? (a.nan_to_zero ? 0.0f : NAN) : 1.0f / sum;
}

// The checks both kernels make of their arguments: head size 32, 64 or 128; dims within what the grids index in
// int (work items of 64 queries, with room for an index plus the grid size); 16-byte rows (every stride a multiple
// of `per16` elements, the bases aligned); a mask type the kernels read.
inline bool flash_args_fit(const attn_flash_args *a, int64_t per16) {
    if (a->hd != 32 && a->hd != 64 && a->hd != 128) return false;
    if (a->sq <= 0 || a->skv <= 0 || a->batch <= 0 || a->batch > 65535 || a->qh <= 0 || a->qh > 65535) return false;
    if (a->kvh <= 0 || a->qh % a->kvh != 0) return false;
    if (a->sq > INT32_MAX || a->skv > INT32_MAX || a->batch * a->qh * ((a->sq + 63) / 64) > INT32_MAX / 2) return false;
    const int64_t strides[] = {a->q_sb, a->q_sh, a->q_ss, a->kv_sb, a->kv_sh, a->kv_ss, a->y_sb, a->y_sh, a->y_ss};
    for (int64_t s : strides)
        if (s % per16 != 0) return false;
    for (const void *p : {a->q, a->k, a->v, (const void *)a->y})
        if (((uintptr_t)p & 15u) != 0) return false;
    return !a->mask || a->mask_dtype == CINFER_DTYPE_FLOAT || a->mask_dtype == CINFER_DTYPE_FLOAT16 ||
           a->mask_dtype == CINFER_DTYPE_BFLOAT16 || a->mask_dtype == CINFER_DTYPE_BOOL;
}

}  // namespace flash
}  // namespace cinfer_cuda
#endif
