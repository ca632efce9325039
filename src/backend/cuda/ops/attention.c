/* CUDA kernels of the attention family (host side): the kernel table, RotaryEmbedding, Swish, SwiGLU,
 * LinearAttention and CausalConvWithState; Attention itself is in attention_sdpa.c. Attributes and shapes are
 * read as the CPU kernels (backend/cpu/attention.c, attention_recurrent.c) read them. */
#include <math.h>
#include <string.h>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/ops/attention_family.h"
#include "core/status.h"

/* ---- RotaryEmbedding ---- */

static cinfer_status run_rotary(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_out;
    const tensor *xt = &in[0];
    const cinfer_dtype t = xt->dtype;
    if (!cuda_attn_is_float(t)) return cuda_unsupported_dtype(n, t);
    const bool rank4 = xt->ndim == 4;
    const int64_t batch = xt->dims[0];
    int64_t heads, seq, head;
    if (rank4) {
        heads = xt->dims[1];
        seq = xt->dims[2];
        head = xt->dims[3];
    } else {
        heads = graph_attr_int(n, "num_heads", 1);
        if (heads <= 0)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "RotaryEmbedding node '%s': num_heads is %lld, expected > 0",
                              n->name, (long long)heads);
        seq = xt->dims[1];
        head = xt->dims[2] / heads;
    }
    int64_t rot = graph_attr_int(n, "rotary_embedding_dim", 0);
    if (rot == 0) rot = head;
    const int64_t half = rot / 2;
    const bool interleaved = graph_attr_int(n, "interleaved", 0) != 0;
    const bool has_pos = num_in > 3 && in[3].dtype != CINFER_DTYPE_UNDEFINED && in[3].data != NULL;
    const int64_t max_pos = in[1].dims[0];
    /* Position ids are device data: they can be checked here only when the host knows them (constants); the kernel
     * turns the rows of any other out-of-range id into NaN. */
    if (has_pos && in[3].host_data) {
        const int64_t *pos = in[3].host_data;
        for (int64_t i = 0; i < batch * seq; i++)
            if (pos[i] < 0 || pos[i] >= max_pos)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "RotaryEmbedding node '%s': position_ids[%lld] is %lld, "
                                  "expected 0 <= id < %lld (cos_cache rows)", n->name, (long long)i,
                                  (long long)pos[i], (long long)max_pos);
    }
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
    attn_linear_args a;
    memset(&a, 0, sizeof a);
    a.qh = graph_attr_int(n, "q_num_heads", 1);
    a.kvh = graph_attr_int(n, "kv_num_heads", 1);
    if (a.qh <= 0 || a.kvh <= 0 || a.qh % a.kvh != 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "LinearAttention node '%s': q_num_heads (%lld) must be a "
                          "positive multiple of kv_num_heads (%lld)", n->name, (long long)a.qh, (long long)a.kvh);
    a.batch = q->dims[0];
    a.seq = q->dims[1];
    a.dk = q->dims[2] / a.qh;
    a.dv = v->dims[2] / a.kvh;
    a.t = t;
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.y = out[0].data;
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
    a.scale = graph_attr_float(n, "scale", 0.0f);
    if (a.scale == 0.0f) a.scale = (float)(1.0 / sqrt((double)a.dk));
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
    const int64_t batch = xt->dims[0], channels = xt->dims[1], len = xt->dims[2], k = w->dims[2];
    const char *act = graph_attr_string(n, "activation", "none");
    const bool silu = strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0;
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
