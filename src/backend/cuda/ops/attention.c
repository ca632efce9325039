/* CUDA kernels of the attention family (host side): the kernel table, RotaryEmbedding, Swish, SwiGLU,
 * LinearAttention and CausalConvWithState; Attention itself is in attention_sdpa.c. Attributes and shapes come
 * from graph/shape/attention_params.h, as for the CPU kernels. */
#include <string.h>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/ops/attention_internal.h"
#include "core/status.h"
#include "graph/shape/attention_params.h"

/* ---- RotaryEmbedding ---- */

static cinfer_status run_rotary(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_out;
    const tensor *xt = &in[0];
    const cinfer_dtype t = xt->dtype;
    if (!cuda_attn_is_float(t)) return cuda_unsupported_dtype(n, t);
    attention_rotary a;
    CINFER_TRY(attention_compute_rotary(n, in, num_in, &a));
    const bool rank4 = a.rank4, interleaved = a.interleaved;
    const int64_t batch = a.batch, heads = a.heads, seq = a.seq, head = a.head, half = a.rot / 2;
    const bool has_pos = num_in > 3 && in[3].dtype != CINFER_DTYPE_UNDEFINED && in[3].data != NULL;
    const int64_t max_pos = in[1].dims[0];
    /* Position ids are device data: they can be checked here only when the host knows them (constants); the kernel
     * turns the rows of any other out-of-range id into NaN. */
    if (has_pos) CINFER_TRY(attention_check_positions(n, in[3].host_data, batch * seq, max_pos));
    return cuda_check_launch(n, "rotary", attn_rotary(t, xt->data, in[1].data, in[2].data,
                                                      has_pos ? (const int64_t *)in[3].data : NULL, out[0].data,
                                                      batch * seq * heads, heads, seq, head, half, max_pos, rank4,
                                                      interleaved, x->stream));
}

/* ---- Swish, SwiGLU: x * sigmoid(alpha * x) ---- */

static cinfer_status run_swish(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in;
    (void)num_out;
    const cinfer_dtype t = in[0].dtype;
    if (!cuda_attn_is_float(t)) return cuda_unsupported_dtype(n, t);
    return cuda_check_launch(n, "swish", attn_swish(t, in[0].data, out[0].data, tensor_numel(&in[0]),
                                                    graph_attr_float(n, "alpha", 1.0f), x->stream));
}

static cinfer_status run_swiglu(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_in;
    (void)num_out;
    const cinfer_dtype t = in[0].dtype;
    if (!cuda_attn_is_float(t)) return cuda_unsupported_dtype(n, t);
    return cuda_check_launch(n, "swiglu", attn_swiglu(t, in[0].data, in[1].data, out[0].data, tensor_numel(&in[0]),
                                                      graph_attr_float(n, "alpha", 1.0f), x->stream));
}

/* ---- LinearAttention ---- */

static cinfer_status run_linear_attention(cuda_exec *x, const graph_node *n, const tensor *in, int num_in,
                                          tensor *out, int num_out) {
    const tensor *q = &in[0], *k = &in[1], *v = &in[2];
    const cinfer_dtype t = q->dtype;
    if (!cuda_attn_is_float(t)) return cuda_unsupported_dtype(n, t);
    attention_linear lp;
    CINFER_TRY(attention_compute_linear(n, in, num_in, &lp));
    attn_linear_args a = {.qh = lp.qh, .kvh = lp.kvh, .batch = lp.batch, .seq = lp.seq, .dk = lp.dk, .dv = lp.dv,
                          .t = t, .q = q->data, .k = k->data, .v = v->data, .y = out[0].data, .scale = lp.scale};
    if (cuda_attn_present(in, num_in, 3)) {
        a.past = in[3].data;
        a.past_dtype = in[3].dtype;
    }
    if (cuda_attn_present(in, num_in, 4)) {
        a.decay = in[4].data;
        a.decay_dtype = in[4].dtype;
        a.decay_width = in[4].dims[2];
    }
    if (cuda_attn_present(in, num_in, 5)) {
        a.beta = in[5].data;
        a.beta_dtype = in[5].dtype;
        a.beta_width = in[5].dims[2];
    }
    const cinfer_dtype types[3] = {a.past_dtype, a.decay_dtype, a.beta_dtype};
    const void *given[3] = {a.past, a.decay, a.beta};
    for (int i = 0; i < 3; i++)
        if (given[i] && !cuda_attn_is_float(types[i])) return cuda_unsupported_dtype(n, types[i]);
    if (num_out > 1 && out[1].data) {
        a.state_out = out[1].data;
        a.state_dtype = out[1].dtype;
    }
    if (a.batch * a.kvh == 0) return CINFER_OK;
    if (a.dk + a.dv > ATTN_LINEAR_SMEM_FLOATS)
        return core_error(CINFER_ERR_UNSUPPORTED, "LinearAttention node '%s': d_k + d_v = %lld exceeds the %d the "
                          "CUDA kernel keeps in shared memory", n->name, (long long)(a.dk + a.dv),
                          ATTN_LINEAR_SMEM_FLOATS);
    if (a.dk * a.dv + a.dk + a.dv > ATTN_LINEAR_SMEM_FLOATS) { /* the states live in device scratch */
        const size_t bytes = (size_t)(a.batch * a.kvh * a.dk * a.dv) * sizeof(float);
        a.state = cuda_scratch(x, bytes);
        if (!a.state)
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "LinearAttention node '%s': cannot allocate %zu bytes of "
                              "device scratch", n->name, bytes);
    }
    return cuda_check_launch(n, "linear attention", attn_linear(&a, x->stream));
}

/* ---- CausalConvWithState ---- */

static cinfer_status run_causal_conv(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out) {
    const tensor *xt = &in[0], *w = &in[1];
    const cinfer_dtype t = xt->dtype;
    if (!cuda_attn_is_float(t)) return cuda_unsupported_dtype(n, t);
    attention_causal_conv p;
    CINFER_TRY(attention_compute_causal_conv(n, in, num_in, &p));
    const int64_t batch = p.batch, channels = p.channels, len = p.len, k = p.k;
    const bool silu = p.silu;
    const void *bias = cuda_attn_present(in, num_in, 2) ? in[2].data : NULL;
    const void *past = cuda_attn_present(in, num_in, 3) ? in[3].data : NULL;
    void *state = num_out > 1 && out[1].data ? out[1].data : NULL;
    return cuda_check_launch(n, "causal conv", attn_causal_conv(t, xt->data, w->data, bias, past, out[0].data, state,
                                                                batch, channels, len, k, silu, x->stream));
}

const cuda_kernel cuda_attention_kernels[] = {
    {"Attention", cuda_run_attention},
    {"RotaryEmbedding", run_rotary},
    {"Swish", run_swish},
    {"SwiGLU", run_swiglu},
    {"LinearAttention", run_linear_attention},
    {"CausalConvWithState", run_causal_conv},
    {NULL, NULL},
};
