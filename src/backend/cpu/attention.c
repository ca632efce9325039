/* CPU kernels of the attention family: the kernel table, RotaryEmbedding, Swish, SwiGLU, LinearAttention and
 * CausalConvWithState (the ops that carry a recurrent state across calls). Attention itself is in attention_sdpa.c. */

/* float16/bfloat16 compute in float32. RotaryEmbedding rounds to the input type after each step the ONNX
 * reference takes in it (node tests compare at rtol 1e-3, below one bfloat16 ulp); Swish and SwiGLU round
 * once, as their float16 test data is made. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/attention_internal.h"
#include "core/status.h"
#include "graph/shape/attention_params.h"

/* Elementwise loops shorter than this stay on one thread. */
#define ATTN_PAR_MIN 32768

/* ---- RotaryEmbedding ---- */

/* Rotates one head row x[0, rot) by (c, s) pairs into y; the tail [rot, head) is copied. Products and sums
 * round to the input type as the reference's numpy expression does. */
static void rotate_row(const void *x, void *y, cinfer_dtype t, int64_t off, const void *cs, const void *sn,
                       int64_t coff, int64_t half, int64_t head, bool interleaved, rnd_mode r) {
    for (int64_t j = 0; j < half; j++) {
        int64_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
        float x1 = load_f(x, t, off + i1), x2 = load_f(x, t, off + i2);
        float c = load_f(cs, t, coff + j), s = load_f(sn, t, coff + j);
        float re = rnd(r, rnd(r, c * x1) - rnd(r, s * x2));
        float im = rnd(r, rnd(r, s * x1) + rnd(r, c * x2));
        store_f(y, t, off + i1, re);
        store_f(y, t, off + i2, im);
    }
    size_t es = cinfer_dtype_size(t);
    if (head > 2 * half)
        memcpy((char *)y + (size_t)(off + 2 * half) * es, (const char *)x + (size_t)(off + 2 * half) * es,
               (size_t)(head - 2 * half) * es);
}

static cinfer_status run_rotary(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0];
    cinfer_dtype t = x->dtype;
    if (!is_attn_float(t)) return cpu_unsupported_dtype(n, t);
    attention_rotary a;
    CINFER_TRY(attention_compute_rotary(n, in, num_in, &a));
    const bool rank4 = a.rank4, interleaved = a.interleaved;
    const int64_t batch = a.batch, heads = a.heads, seq = a.seq, head = a.head, half = a.rot / 2;
    const int64_t *pos = num_in > 3 && in[3].dtype != CINFER_DTYPE_UNDEFINED ? in[3].data : NULL;
    CINFER_TRY(attention_check_positions(n, pos, batch * seq, a.max_positions));
    rnd_mode r = rnd_for(t);
    int64_t rows = batch * seq * heads;
#pragma omp parallel for num_threads(cpu_num_threads()) if (rows * head > ATTN_PAR_MIN)
    for (int64_t idx = 0; idx < rows; idx++) {
        int64_t h = idx % heads, bs = idx / heads, b = bs / seq, s = bs % seq;
        int64_t off = rank4 ? ((b * heads + h) * seq + s) * head : bs * heads * head + h * head;
        int64_t coff = (pos ? pos[bs] : bs) * half;
        rotate_row(x->data, out[0].data, t, off, in[1].data, in[2].data, coff, half, head, interleaved, r);
    }
    return CINFER_OK;
}

/* ---- Swish, SwiGLU: x * sigmoid(alpha * x) ---- */

/* float16/bfloat16 compute in float32 and round once, as the SwiGLU float16 node test's expected values
 * are made (the reference op rounds the sigmoid first: a one-ulp difference at most). */
static inline float swish(float x, float alpha) { return x / (1.0f + expf(-alpha * x)); }

static cinfer_status run_swish(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    cinfer_dtype t = in[0].dtype;
    if (!is_attn_float(t)) return cpu_unsupported_dtype(n, t);
    float alpha = graph_attr_float(n, "alpha", 1.0f);
    int64_t cnt = tensor_numel(&in[0]);
    const void *x = in[0].data;
    void *y = out[0].data;
    if (t == CINFER_DTYPE_FLOAT) {
        const float *xf = x;
        float *yf = y;
#pragma omp parallel for num_threads(cpu_num_threads()) if (cnt > ATTN_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) yf[i] = swish(xf[i], alpha);
    } else {
#pragma omp parallel for num_threads(cpu_num_threads()) if (cnt > ATTN_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) store_f(y, t, i, swish(load_f(x, t, i), alpha));
    }
    return CINFER_OK;
}

static cinfer_status run_swiglu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    cinfer_dtype t = in[0].dtype;
    if (!is_attn_float(t)) return cpu_unsupported_dtype(n, t);
    float alpha = graph_attr_float(n, "alpha", 1.0f);
    int64_t cnt = tensor_numel(&in[0]);
    const void *a = in[0].data, *b = in[1].data;
    void *y = out[0].data;
    /* y may share a's buffer: element i is read before it is written */
    if (t == CINFER_DTYPE_FLOAT) {
        const float *af = a, *bf = b;
        float *yf = y;
#pragma omp parallel for num_threads(cpu_num_threads()) if (cnt > ATTN_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) yf[i] = swish(af[i], alpha) * bf[i];
    } else {
#pragma omp parallel for num_threads(cpu_num_threads()) if (cnt > ATTN_PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) store_f(y, t, i, swish(load_f(a, t, i), alpha) * load_f(b, t, i));
    }
    return CINFER_OK;
}

/* ---- LinearAttention ---- */

/* The reference keeps the state in float32 whatever the input type and steps through time:
 *   S *= exp(decay_t)                     (gated rules)
 *   v_t = beta_t * (v_t - S^T k_t)        (delta rules)
 *   S += k_t v_t^T
 *   o_t = scale * q_t^T S                 (each query head reads its kv head's state)
 * One (batch, kv head) pair per task; the pairs are independent. */
static cinfer_status run_linear_attention(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const tensor *q = &in[0], *k = &in[1], *v = &in[2];
    cinfer_dtype t = q->dtype;
    if (!is_attn_float(t)) return cpu_unsupported_dtype(n, t);
    attention_linear a;
    CINFER_TRY(attention_compute_linear(n, in, num_in, &a));
    const int64_t qh = a.qh, kvh = a.kvh, B = a.batch, T = a.seq, dk = a.dk, dv = a.dv, group = qh / kvh;
    const tensor *past = attn_present(in, num_in, 3) ? &in[3] : NULL;
    const tensor *decay = attn_present(in, num_in, 4) ? &in[4] : NULL;
    const tensor *beta = attn_present(in, num_in, 5) ? &in[5] : NULL;
    const float scale = a.scale;
    const int64_t dec_w = decay ? decay->dims[2] : 0, beta_w = beta ? beta->dims[2] : 0;
    tensor *state_out = num_out > 1 && out[1].data ? &out[1] : NULL;

    int nt = cpu_num_threads();
    int64_t tasks = B * kvh;
    if (nt > tasks) nt = tasks > 0 ? (int)tasks : 1;
    int64_t per_thread = dk * dv + dv + 16;
    float *work = cpu_scratch((size_t)(nt * per_thread) * sizeof(float));
    if (!work)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "LinearAttention node '%s': cannot allocate scratch", n->name);

#pragma omp parallel num_threads(nt) if (nt > 1 && T * dk * dv * qh > 32768)
    {
        float *S = work + (int64_t)omp_get_thread_num() * per_thread, *vt = S + dk * dv;
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; task++) {
            int64_t b = task / kvh, g = task % kvh;
            if (past)
                for (int64_t i = 0; i < dk * dv; i++) S[i] = load_f(past->data, past->dtype, task * dk * dv + i);
            else
                memset(S, 0, (size_t)(dk * dv) * sizeof *S);
            for (int64_t s = 0; s < T; s++) {
                int64_t bt = b * T + s;
                int64_t koff = bt * kvh * dk + g * dk, voff = bt * kvh * dv + g * dv;
                if (decay) {
                    for (int64_t d = 0; d < dk; d++) {
                        int64_t di = dec_w == kvh ? bt * kvh + g : bt * dec_w + g * dk + d;
                        float f = expf(load_f(decay->data, decay->dtype, di));
                        for (int64_t m = 0; m < dv; m++) S[d * dv + m] *= f;
                    }
                }
                for (int64_t m = 0; m < dv; m++) vt[m] = load_f(v->data, t, voff + m);
                if (beta) {
                    float bb = load_f(beta->data, beta->dtype, bt * beta_w + (beta_w == 1 ? 0 : g));
                    for (int64_t m = 0; m < dv; m++) {
                        float r = 0.0f;
                        for (int64_t d = 0; d < dk; d++) r += S[d * dv + m] * load_f(k->data, t, koff + d);
                        vt[m] = bb * (vt[m] - r);
                    }
                }
                for (int64_t d = 0; d < dk; d++) {
                    float kd = load_f(k->data, t, koff + d);
                    for (int64_t m = 0; m < dv; m++) S[d * dv + m] += kd * vt[m];
                }
                for (int64_t r = 0; r < group; r++) {
                    int64_t h = g * group + r, qoff = bt * qh * dk + h * dk, ooff = bt * qh * dv + h * dv;
                    for (int64_t m = 0; m < dv; m++) vt[m] = 0.0f;
                    for (int64_t d = 0; d < dk; d++) {
                        float qd = load_f(q->data, t, qoff + d);
                        for (int64_t m = 0; m < dv; m++) vt[m] += qd * S[d * dv + m];
                    }
                    for (int64_t m = 0; m < dv; m++) store_f(out[0].data, out[0].dtype, ooff + m, scale * vt[m]);
                }
            }
            if (state_out)
                for (int64_t i = 0; i < dk * dv; i++)
                    store_f(state_out->data, state_out->dtype, task * dk * dv + i, S[i]);
        }
    }
    return CINFER_OK;
}

/* ---- CausalConvWithState ---- */

/* out[b,c,l] = bias[c] + sum_j w[c,j] * padded[b,c,l+j], padded = concat(past_state or zeros, input);
 * present_state = the last k-1 columns of padded. float16 rounds the convolution sum and the bias add as
 * the reference's float16 matmul and add do; the SiLU runs in float32 on the rounded value. */
static cinfer_status run_causal_conv_with_state(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                                int num_out) {
    const tensor *x = &in[0], *w = &in[1];
    cinfer_dtype t = x->dtype;
    if (!is_attn_float(t)) return cpu_unsupported_dtype(n, t);
    attention_causal_conv cc;
    CINFER_TRY(attention_compute_causal_conv(n, in, num_in, &cc));
    const int64_t B = cc.batch, C = cc.channels, L = cc.len, K = cc.k, P = K - 1;
    const tensor *bias = attn_present(in, num_in, 2) ? &in[2] : NULL;
    const tensor *past = attn_present(in, num_in, 3) ? &in[3] : NULL;
    const bool silu = cc.silu;
    rnd_mode r16 = t == CINFER_DTYPE_FLOAT16 ? RND_F16 : RND_NONE, r = rnd_for(t);
    tensor *state = num_out > 1 && out[1].data ? &out[1] : NULL;

    /* padded value at column p in [0, P + L) */
#define PADDED(bc, p)                                                                                            \
    ((p) < P ? (past ? load_f(past->data, t, (bc) * P + (p)) : 0.0f) : load_f(x->data, t, (bc) * L + (p) - P))
#pragma omp parallel for num_threads(cpu_num_threads()) if (B * C * L * K > 32768)
    for (int64_t bc = 0; bc < B * C; bc++) {
        int64_t c = bc % C;
        float bv = bias ? load_f(bias->data, t, c) : 0.0f;
        for (int64_t l = 0; l < L; l++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < K; j++) acc += load_f(w->data, t, c * K + j) * PADDED(bc, l + j);
            acc = rnd(r16, acc);
            if (bias) acc += bv;
            acc = rnd(r, acc);
            if (silu) acc = acc * (1.0f / (1.0f + expf(-acc)));
            store_f(out[0].data, t, bc * L + l, acc);
        }
        if (state)
            for (int64_t p = 0; p < P; p++) store_f(state->data, t, bc * P + p, PADDED(bc, L + p));
    }
#undef PADDED
    return CINFER_OK;
}

const cpu_kernel cpu_attention_kernels[] = {
    {"Attention", cpu_run_attention},
    {"RotaryEmbedding", run_rotary},
    {"Swish", run_swish},
    {"SwiGLU", run_swiglu},
    {"LinearAttention", run_linear_attention},
    {"CausalConvWithState", run_causal_conv_with_state},
    {NULL, NULL},
};
