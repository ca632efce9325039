/* Parameters of the attention-family ops (Attention, RotaryEmbedding, LinearAttention, CausalConvWithState) that
 * both their schemas (shapes) and their kernels (CPU and CUDA) work out. Each attention_compute_* validates the
 * node's inputs and attributes as the schema does and returns what the kernels need. */
#ifndef CINFER_GRAPH_SHAPE_ATTENTION_PARAMS_H
#define CINFER_GRAPH_SHAPE_ATTENTION_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"

/* Attention (opset 23; 24 adds nonpad_kv_seqlen; 25 adds left/right_window_size). */
typedef struct attention_sdpa {
    bool rank3;                /* Q, K, V [batch, seq, heads * size] (else 4-D [batch, heads, seq, size]) */
    int64_t batch, qh, kvh;    /* batch size, query heads, key/value heads */
    int64_t sq, skv, hd, hdv;  /* query length, new key/value length, Q/K head size, V head size */
    bool has_past;             /* past_key and past_value given */
    int64_t past, total;       /* past length, past + skv */
    int mode;                  /* qk_matmul_output_mode (0..3) */
    bool causal;               /* is_causal */
    int64_t left, right;       /* left/right_window_size (-1: none; opset 25) */
    bool window;               /* either window size given */
    float softcap;             /* softcap (0: none) */
    bool has_softmax_precision;
    cinfer_dtype softmax_precision;
    double scale;              /* scale, else 1 / sqrt(hd) */
    int64_t packed;            /* > 0: Q, K and V are the column thirds of input 0, [batch, seq, 3 * packed]
                                  ("cinfer_packed_qkv", graph/fusion.c's one GEMM for the three projections) */
} attention_sdpa;

/* Q, K and V of an Attention node whose input 0 packs them ("cinfer_packed_qkv"): views of `packed`
 * [batch, seq, 3 * width] as [batch, seq, width] tensors starting at its columns 0, width and 2 * width. Their rows
 * lie 3 * width elements apart, so only dims and data pointers may be read from them, never a contiguous block. */
void attention_packed_thirds(const tensor *packed, int64_t width, tensor thirds[3]);

cinfer_status attention_compute_sdpa(const graph_node *n, const tensor *in, int num_in, attention_sdpa *p);

/* RotaryEmbedding (opset 23): X [batch, heads, seq, head] or [batch, seq, num_heads * head]; the first rot
 * values of each head (rotary_embedding_dim, default all) rotate in rot / 2 pairs. */
typedef struct attention_rotary {
    bool rank4;
    int64_t batch, heads, seq, head, rot;
    bool interleaved;
    bool has_positions; /* position_ids given: the caches are [max_positions, rot / 2] */
    int64_t max_positions; /* cos_cache rows */
} attention_rotary;

cinfer_status attention_compute_rotary(const graph_node *n, const tensor *in, int num_in, attention_rotary *p);

/* RotaryEmbedding's position_ids values (count of them) in [0, max_positions); pos NULL (values not known
 * here) passes. */
cinfer_status attention_check_positions(const graph_node *n, const int64_t *pos, int64_t count,
                                        int64_t max_positions);

/* LinearAttention (opset 27): query [batch, seq, qh * dk], value [batch, seq, kvh * dv], the recurrent state
 * [batch, kvh, dk, dv]; scale (0 or absent: 1 / sqrt(dk)); the update rule's gating (decay) and delta (beta). */
typedef struct attention_linear {
    int64_t batch, seq, qh, kvh, dk, dv;
    float scale;
    bool gating, delta;
} attention_linear;

cinfer_status attention_compute_linear(const graph_node *n, const tensor *in, int num_in, attention_linear *p);

/* CausalConvWithState (opset 27): depthwise causal conv1d of input [batch, channels, len] with weight
 * [channels, 1, k], carrying the last k - 1 inputs; silu: activation silu (or swish). */
typedef struct attention_causal_conv {
    int64_t batch, channels, len, k;
    bool silu;
} attention_causal_conv;

cinfer_status attention_compute_causal_conv(const graph_node *n, const tensor *in, int num_in,
                                            attention_causal_conv *p);

#endif
