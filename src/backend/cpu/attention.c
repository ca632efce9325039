/* CPU kernels of the attention family: the kernel table, RotaryEmbedding, Swish and SwiGLU. */

/* Attention itself is in attention_sdpa.c, LinearAttention and CausalConvWithState in attention_recurrent.c. */

/* float16/bfloat16 compute in float32. RotaryEmbedding rounds to the input type after each step the ONNX
 * reference takes in it (node tests compare at rtol 1e-3, below one bfloat16 ulp); Swish and SwiGLU round
 * once, as their float16 test data is made. */
#include <math.h>
#include <string.h>

#include "backend/cpu/attention_family.h"
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

const cpu_kernel cpu_attention_kernels[] = {
    {"Attention", cpu_run_attention},
    {"RotaryEmbedding", run_rotary},
    {"Swish", run_swish},
    {"SwiGLU", run_swiglu},
    {"LinearAttention", cpu_run_linear_attention},
    {"CausalConvWithState", cpu_run_causal_conv_with_state},
    {NULL, NULL},
};
