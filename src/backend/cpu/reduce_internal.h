/* Internal helpers shared by the reduce-family CPU kernels (reduce.c and its parts reduce_*.c). */
#ifndef CINFER_CPU_REDUCE_INTERNAL_H
#define CINFER_CPU_REDUCE_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"

/* Loops smaller than this many elements stay on one thread. */
#define CPU_RED_PAR_MIN 32768

/* The hot row kernels are also compiled for AVX-512 and AVX2 and picked when the library loads (function
 * multiversioning through ifunc): the build targets baseline x86-64, i.e. 4-wide SSE. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_RED_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_RED_CLONES
#endif

static inline bool cpu_red_present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED && in[i].data != NULL;
}

/* exp(x) in float with a relative error under 3e-7, written with plain arithmetic and bit moves so
 * loops calling it vectorise (libm's expf is a scalar call). Flushes to 0 below -86.6 (results under
 * 3e-38), +inf above 88.7, NaN stays NaN. Out-of-range inputs are computed unclamped and then masked
 * with integer ops: a float select (x < lo ? lo : x) makes GCC split paths, and with trapping math
 * it then refuses to vectorise. */
static inline float cpu_red_expf(float x) {
    /* n = round(x / ln2) by the 1.5*2^23 trick, r = x - n*ln2 in two parts for accuracy */
    const float magic = 12582912.0f;
    float t = x * 1.44269504088896341f + magic;
    float nf = t - magic;
    uint32_t ni = cpu_f32_bits(t) - cpu_f32_bits(magic);
    float r = x - nf * 0.693145751953125f;
    r = r - nf * 1.428606765330187e-06f;
    /* e^r on |r| <= ln2/2: Taylor to degree 6 */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n as 2^(n-1) * 2: n reaches 128 near the top of the range */
    float y = p * cpu_bits_f32((ni + 126u) << 23) * 2.0f;
    uint32_t lo = 0u - (uint32_t)(x < -86.6f), hi = 0u - (uint32_t)(x > 88.7f);
    uint32_t yb = cpu_f32_bits(y) & ~lo;
    return cpu_bits_f32((yb & ~hi) | (0x7f800000u & hi));
}

/* Sum of n floats: 16 float lanes over blocks, blocks added in double so long rows stay accurate. */
static inline double cpu_red_sum_f32(const float *x, int64_t n) {
    double total = 0;
    for (int64_t b = 0; b < n; b += 4096) {
        int64_t e = b + 4096 < n ? b + 4096 : n, j = b;
        float acc[16] = {0};
        for (; j + 16 <= e; j += 16)
            for (int l = 0; l < 16; l++) acc[l] += x[j + l];
        float s = 0;
        for (; j < e; j++) s += x[j];
        for (int l = 0; l < 16; l++) s += acc[l];
        total += s;
    }
    return total;
}

/* Sum of (x - c)^2 over n floats, accumulated like cpu_red_sum_f32. */
static inline double cpu_red_sumsq_f32(const float *x, int64_t n, float c) {
    double total = 0;
    for (int64_t b = 0; b < n; b += 4096) {
        int64_t e = b + 4096 < n ? b + 4096 : n, j = b;
        float acc[16] = {0};
        for (; j + 16 <= e; j += 16)
            for (int l = 0; l < 16; l++) {
                float d = x[j + l] - c;
                acc[l] += d * d;
            }
        float s = 0;
        for (; j < e; j++) s += (x[j] - c) * (x[j] - c);
        for (int l = 0; l < 16; l++) s += acc[l];
        total += s;
    }
    return total;
}

/* Largest (is_min: smallest) of n floats, +-inf for none. A NaN may be skipped: see cpu_red_has_nan_f32.
 * The omp simd pragma lets GCC turn the select into max/min instructions. */
#define CPU_RED_EXTREME_LANES(CMP)                                                                            \
    for (; j + 16 <= n; j += 16) {                                                                            \
        _Pragma("omp simd")                                                                                   \
        for (int l = 0; l < 16; l++) acc[l] = x[j + l] CMP acc[l] ? x[j + l] : acc[l];                        \
    }                                                                                                         \
    for (; j < n; j++) m = x[j] CMP m ? x[j] : m;                                                             \
    for (int l = 0; l < 16; l++) m = acc[l] CMP m ? acc[l] : m;

static inline float cpu_red_minmax_f32(const float *x, int64_t n, bool is_min) {
    float acc[16], m = is_min ? INFINITY : -INFINITY;
    int64_t j = 0;
    for (int l = 0; l < 16; l++) acc[l] = m;
    if (is_min) {
        CPU_RED_EXTREME_LANES(<)
    } else {
        CPU_RED_EXTREME_LANES(>)
    }
    return m;
}

static inline float cpu_red_max_f32(const float *x, int64_t n) { return cpu_red_minmax_f32(x, n, false); }

/* Whether any of n floats is NaN, by integer tests on the bits (vectorises, raises no FP flags). */
static inline bool cpu_red_has_nan_f32(const float *x, int64_t n) {
    uint32_t any = 0;
    for (int64_t j = 0; j < n; j++) any |= (uint32_t)((cpu_f32_bits(x[j]) & 0x7fffffffu) > 0x7f800000u);
    return any != 0;
}

/* Largest (is_min: smallest) of n floats with numpy's NaN rule: the first NaN when there is one. */
static inline float cpu_red_extreme_f32(const float *x, int64_t n, bool is_min) {
    if (cpu_red_has_nan_f32(x, n))
        for (int64_t j = 0; j < n; j++)
            if (x[j] != x[j]) return x[j];
    return cpu_red_minmax_f32(x, n, is_min);
}

/* Runs `fn` with every float16/bfloat16 input and output replaced by a float32 copy, then writes the
 * float outputs back: the kernels' float code serves the half types. */
cinfer_status cpu_run_as_float(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                               cpu_kernel_fn fn);
static inline bool cpu_red_is_half(cinfer_dtype t) { return cpu_is_half(t); }

/* Kernels living in the family's other files (registered in reduce.c's table). */
cinfer_status cpu_run_topk(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_softmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_log_softmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_hardmax(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_layer_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_rms_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_instance_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_group_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_lp_norm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_lrn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

#endif
