/* Helpers shared by the attention-family CPU kernels (attention.c, attention_sdpa.c). */
#ifndef CINFER_CPU_ATTENTION_INTERNAL_H
#define CINFER_CPU_ATTENTION_INTERNAL_H

#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"
#include "core/status.h"

/* The kernels are float32, float16 or bfloat16; the low-precision types compute in float32 and round back
 * to their type (`rnd`) where the ONNX reference computes in that type. */
typedef enum { RND_NONE, RND_F16, RND_BF16 } rnd_mode;

static inline float rnd(rnd_mode m, float v) {
    if (m == RND_F16) return dtype_half_to_float(dtype_float_to_half(v));
    if (m == RND_BF16) return dtype_bf16_to_float(dtype_float_to_bf16(v));
    return v;
}

static inline rnd_mode rnd_for(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT16 ? RND_F16 : t == CINFER_DTYPE_BFLOAT16 ? RND_BF16 : RND_NONE;
}

static inline bool is_attn_float(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
}

/* Element i of a float32, float16 or bfloat16 (any other t) array. */
static inline float load_f(const void *p, cinfer_dtype t, int64_t i) {
    if (t == CINFER_DTYPE_FLOAT) return ((const float *)p)[i];
    if (t == CINFER_DTYPE_FLOAT16) return dtype_half_to_float(((const uint16_t *)p)[i]);
    return dtype_bf16_to_float(((const uint16_t *)p)[i]);
}

static inline void store_f(void *p, cinfer_dtype t, int64_t i, float v) {
    if (t == CINFER_DTYPE_FLOAT) ((float *)p)[i] = v;
    else if (t == CINFER_DTYPE_FLOAT16) ((uint16_t *)p)[i] = dtype_float_to_half(v);
    else ((uint16_t *)p)[i] = dtype_float_to_bf16(v);
}

/* Whether optional input i was given. */
static inline bool attn_present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED && in[i].data != NULL;
}

/* Attention (attention_sdpa.c), registered in attention.c's table. */
cinfer_status cpu_run_attention(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

#endif
