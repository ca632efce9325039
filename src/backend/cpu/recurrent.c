/* CPU kernels of the recurrent family: LSTM, GRU and RNN (float, double; float16/bfloat16 via float32 staging). */

/* The time loop is written once for a scalar type RNN_T: this file includes itself twice, once with
 * RNN_T float and once with double, to get both instances without a macro-sized function body.
 * Per direction, X*W^T for all time steps is one GEMM; each step does one GEMM H*R^T (two for GRU with
 * linear_before_reset=0, whose recurrent product needs r*H first) and the gates elementwise. */
#ifndef RNN_T

#include <math.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"
#include "graph/shape/recurrent_params.h"

/* The node's parameters (graph/shape/recurrent_params.h). */
typedef recurrent_params rnn_params;

/* Data of the inputs and outputs (NULL when omitted), all of one scalar type. */
typedef struct rnn_data {
    const void *x, *w, *r, *b, *h0, *c0, *p;
    void *y, *yh, *yc;
    const int64_t *lens; /* per-batch sequence lengths, NULL: all seq */
} rnn_data;

/* Element count of the time loop's work memory (see the typed run function for the regions). */
static size_t rnn_work_elems(const rnn_params *p) {
    int64_t gh = p->gates * p->hidden;
    return (size_t)(p->seq * p->batch * gh + p->batch * gh + 4 * p->batch * p->hidden + gh);
}

static size_t align_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

#define RNN_T float
#define RNN_FN(name) name##_f32
#define RNN_GEMM cblas_sgemm
#define RNN_EXP expf
#define RNN_TANH tanhf
#define RNN_LOG1P log1pf
#include "backend/cpu/recurrent.c"
#undef RNN_T
#undef RNN_FN
#undef RNN_GEMM
#undef RNN_EXP
#undef RNN_TANH
#undef RNN_LOG1P

#define RNN_T double
#define RNN_FN(name) name##_f64
#define RNN_GEMM cblas_dgemm
#define RNN_EXP exp
#define RNN_TANH tanh
#define RNN_LOG1P log1p
#include "backend/cpu/recurrent.c"
#undef RNN_T
#undef RNN_FN
#undef RNN_GEMM
#undef RNN_EXP
#undef RNN_TANH
#undef RNN_LOG1P

static bool has(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED && in[i].data != NULL;
}

static cinfer_status rnn_kernel(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                int gates) {
    const tensor *x = &in[0];
    cinfer_dtype t = x->dtype;
    if (t != CINFER_DTYPE_FLOAT && t != CINFER_DTYPE_DOUBLE && !cpu_is_half(t)) return cpu_unsupported_dtype(n, t);
    rnn_params p;
    CINFER_TRY(recurrent_compute_params(n, in, num_in, &p));
    CINFER_TRY(recurrent_read_activations(n, &p));
    if (p.seq > INT32_MAX / 2 || p.batch * p.seq > INT32_MAX || p.gates * p.hidden > INT32_MAX ||
        p.input_size > INT32_MAX)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': dimensions exceed the BLAS int range", n->op_type,
                          n->name);

    /* one scratch request: lengths, then float32 staging (half types only), then the work regions */
    bool half = cpu_is_half(t);
    size_t esz = t == CINFER_DTYPE_DOUBLE ? sizeof(double) : sizeof(float);
    size_t total = align_up((size_t)p.batch * sizeof(int64_t));
    static const int in_idx[7] = {0, 1, 2, 3, 5, 6, 7};
    size_t in_off[7] = {0}, out_off[3] = {0};
    int n_outs = gates == 4 ? 3 : 2;
    if (half) {
        for (int k = 0; k < 7; k++)
            if (has(in, num_in, in_idx[k])) {
                in_off[k] = total;
                total += align_up((size_t)tensor_numel(&in[in_idx[k]]) * sizeof(float));
            }
        for (int j = 0; j < n_outs && j < num_out; j++)
            if (out[j].data) {
                out_off[j] = total;
                total += align_up((size_t)tensor_numel(&out[j]) * sizeof(float));
            }
    }
    size_t work_off = total;
    total += rnn_work_elems(&p) * esz;
    char *base = cpu_scratch(total);
    if (!base)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate %zu bytes of work memory",
                          n->op_type, n->name, total);

    const int64_t *seq_lens = NULL;
    if (has(in, num_in, 4)) {
        int64_t *lens = (int64_t *)base;
        for (int64_t b = 0; b < p.batch; b++) {
            lens[b] = tensor_get_int(&in[4], b);
            if (lens[b] < 0 || lens[b] > p.seq)
                return core_error(CINFER_ERR_INVALID_ARGUMENT,
                                  "%s node '%s': sequence_lens[%lld] = %lld is outside [0, seq_length=%lld]",
                                  n->op_type, n->name, (long long)b, (long long)lens[b], (long long)p.seq);
        }
        seq_lens = lens;
    }

    const void *ip[7];
    for (int k = 0; k < 7; k++) {
        int i = in_idx[k];
        ip[k] = NULL;
        if (!has(in, num_in, i)) continue;
        if (half) {
            cpu_convert_half_to_float(t, in[i].data, (float *)(base + in_off[k]), tensor_numel(&in[i]));
            ip[k] = base + in_off[k];
        } else {
            ip[k] = in[i].data;
        }
    }
    void *op[3] = {NULL, NULL, NULL};
    for (int j = 0; j < n_outs && j < num_out; j++)
        if (out[j].data) op[j] = half ? (void *)(base + out_off[j]) : out[j].data;
    rnn_data io = {ip[0], ip[1], ip[2], ip[3], ip[4], gates == 4 ? ip[5] : NULL, gates == 4 ? ip[6] : NULL,
                   op[0], op[1], op[2], seq_lens};
    if (t == CINFER_DTYPE_DOUBLE)
        rnn_run_f64(&p, &io, (double *)(base + work_off));
    else
        rnn_run_f32(&p, &io, (float *)(base + work_off));
    if (half)
        for (int j = 0; j < n_outs && j < num_out; j++)
            if (out[j].data) cpu_convert_float_to_half(t, op[j], out[j].data, tensor_numel(&out[j]));
    return CINFER_OK;
}

static cinfer_status kernel_lstm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return rnn_kernel(n, in, num_in, out, num_out, 4);
}
static cinfer_status kernel_gru(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return rnn_kernel(n, in, num_in, out, num_out, 3);
}
static cinfer_status kernel_rnn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return rnn_kernel(n, in, num_in, out, num_out, 1);
}

const cpu_kernel cpu_recurrent_kernels[] = {
    {"LSTM", kernel_lstm},
    {"GRU", kernel_gru},
    {"RNN", kernel_rnn},
    {NULL, NULL},
};

#else /* ---- typed time loop, instantiated above for float and double ---- */

static void RNN_FN(act_apply)(const recurrent_act *a, RNN_T *x, int64_t n) {
    const RNN_T al = (RNN_T)a->alpha, be = (RNN_T)a->beta;
    switch (a->kind) {
    case RECURRENT_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) x[i] = (RNN_T)1 / ((RNN_T)1 + RNN_EXP(-x[i]));
        break;
    case RECURRENT_ACT_TANH:
        for (int64_t i = 0; i < n; i++) x[i] = RNN_TANH(x[i]);
        break;
    case RECURRENT_ACT_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0;
        break;
    case RECURRENT_ACT_AFFINE:
        for (int64_t i = 0; i < n; i++) x[i] = al * x[i] + be;
        break;
    case RECURRENT_ACT_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] >= 0 ? x[i] : al * x[i];
        break;
    case RECURRENT_ACT_THRESHOLDED_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > al ? x[i] : 0;
        break;
    case RECURRENT_ACT_SCALED_TANH:
        for (int64_t i = 0; i < n; i++) x[i] = al * RNN_TANH(be * x[i]);
        break;
    case RECURRENT_ACT_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            RNN_T v = al * x[i] + be;
            x[i] = v < 0 ? 0 : v > 1 ? 1 : v;
        }
        break;
    case RECURRENT_ACT_ELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] >= 0 ? x[i] : al * (RNN_EXP(x[i]) - 1);
        break;
    case RECURRENT_ACT_SOFTSIGN:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1 + (x[i] < 0 ? -x[i] : x[i]));
        break;
    case RECURRENT_ACT_SOFTPLUS:
        /* log(1 + e^x) without overflow for large x */
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] > 0 ? x[i] + RNN_LOG1P(RNN_EXP(-x[i])) : RNN_LOG1P(RNN_EXP(x[i]));
        break;
    default: break;
    }
}

static void RNN_FN(clip)(const rnn_params *p, RNN_T *x, int64_t n) {
    if (!p->has_clip) return;
    const RNN_T c = (RNN_T)p->clip;
    for (int64_t i = 0; i < n; i++) x[i] = x[i] < -c ? -c : x[i] > c ? c : x[i];
}

/* C[M, N] (row stride ldc) = A[M, K] B[N, K]^T, the one product the recurrences take. K == 0 gives zeros and an
 * empty C nothing, without BLAS: a leading dimension of 0 is outside its contract (OpenBLAS read through NULL
 * there), and empty operands may have no buffer. */
static void RNN_FN(gemm_abt)(int64_t M, int64_t N, int64_t K, const RNN_T *A, const RNN_T *B, RNN_T *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(RNN_T));
        return;
    }
    RNN_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1, A, (int)K, B, (int)K, 0, C, (int)ldc);
}

/* Work regions (elements): xw [seq*batch, G*H] input projections of all steps, hr [batch, G*H] recurrent
 * products then gates, h and c [batch, H] states, tmp and tmp2 [batch, H], bias [G*H]. */
static void RNN_FN(rnn_run)(const rnn_params *p, const rnn_data *io, RNN_T *work) {
    const int64_t S = p->seq, B = p->batch, IN = p->input_size, H = p->hidden, G = p->gates, GH = G * H, ND = p->ndir;
    RNN_T *xw = work, *hr = xw + S * B * GH, *h = hr + B * GH, *c = h + B * H, *tmp = c + B * H;
    RNN_T *tmp2 = tmp + B * H, *bias = tmp2 + B * H;
    const RNN_T *X = io->x, *W = io->w, *R = io->r, *Bv = io->b, *H0 = io->h0, *C0 = io->c0, *P = io->p;
    RNN_T *Y = io->y, *YH = io->yh, *YC = io->yc;
    const bool gru_split = G == 3 && !p->lbr; /* recurrent h-gate product needs r first */
    const bool gru_lbr = G == 3 && p->lbr;
    if (Y && io->lens) memset(Y, 0, (size_t)(S * ND * B * H) * sizeof(RNN_T)); /* steps past a length stay 0 */

    for (int64_t d = 0; d < ND; d++) {
        const bool rev = p->reverse || d == 1;
        const recurrent_act *act = p->act[d];
        /* W or R hold no elements (and no buffer) when a size is 0: no offset from NULL */
        const RNN_T *Wd = W ? W + d * GH * IN : NULL, *Rd = R ? R + d * GH * H : NULL, *bd = Bv ? Bv + d * 2 * GH : NULL;
        const RNN_T *pd = P ? P + d * 3 * H : NULL;
        /* Wb + Rb folded into one bias, except GRU's Rbh under linear_before_reset (it is scaled by r) */
        for (int64_t j = 0; j < GH; j++) bias[j] = bd ? bd[j] + bd[GH + j] : 0;
        const RNN_T *rbh = gru_lbr && bd ? bd + GH + 2 * H : NULL;
        if (rbh)
            for (int64_t j = 2 * H; j < GH; j++) bias[j] = bd[j];

        /* X rows are (t, b) for layout 0 and (b, t) for layout 1: one GEMM either way */
        RNN_FN(gemm_abt)(S * B, GH, IN, X, Wd, xw, GH);
        for (int64_t b = 0; b < B; b++) {
            int64_t off = p->layout ? (b * ND + d) * H : (d * B + b) * H;
            if (H0) memcpy(h + b * H, H0 + off, (size_t)H * sizeof(RNN_T));
            else memset(h + b * H, 0, (size_t)H * sizeof(RNN_T));
            if (C0) memcpy(c + b * H, C0 + off, (size_t)H * sizeof(RNN_T));
            else memset(c + b * H, 0, (size_t)H * sizeof(RNN_T));
        }

        for (int64_t s = 0; s < S; s++) {
            const int64_t nr = gru_split ? 2 * H : GH;
            RNN_FN(gemm_abt)(B, nr, H, h, Rd, hr, GH);
#pragma omp parallel for num_threads(cpu_num_threads()) if (B * GH > 16384)
            for (int64_t b = 0; b < B; b++) {
                const int64_t len = io->lens ? io->lens[b] : S;
                if (s >= len) continue;
                const int64_t t = rev ? len - 1 - s : s;
                const RNN_T *xr = xw + (p->layout ? b * S + t : t * B + b) * GH;
                RNN_T *g = hr + b * GH, *hb = h + b * H, *cb = c + b * H, *tb = tmp + b * H;
                /* GRU's h gate is completed below (it needs r) */
                const int64_t nx = G == 3 ? 2 * H : GH;
                for (int64_t j = 0; j < nx; j++) g[j] += xr[j] + bias[j];
                if (G == 4) {
                    RNN_T *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
                    if (pd)
                        for (int64_t j = 0; j < H; j++) {
                            gi[j] += pd[j] * cb[j];
                            gf[j] += pd[2 * H + j] * cb[j];
                        }
                    RNN_FN(clip)(p, gi, H);
                    RNN_FN(clip)(p, gf, H);
                    RNN_FN(clip)(p, gc, H);
                    RNN_FN(act_apply)(&act[0], gi, H);
                    if (p->input_forget)
                        for (int64_t j = 0; j < H; j++) gf[j] = 1 - gi[j];
                    else
                        RNN_FN(act_apply)(&act[0], gf, H);
                    RNN_FN(act_apply)(&act[1], gc, H);
                    for (int64_t j = 0; j < H; j++) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
                    if (pd)
                        for (int64_t j = 0; j < H; j++) go[j] += pd[H + j] * cb[j];
                    RNN_FN(clip)(p, go, H);
                    RNN_FN(act_apply)(&act[0], go, H);
                    memcpy(tb, cb, (size_t)H * sizeof(RNN_T));
                    RNN_FN(act_apply)(&act[2], tb, H);
                    for (int64_t j = 0; j < H; j++) hb[j] = go[j] * tb[j];
                } else if (G == 3) {
                    RNN_FN(clip)(p, g, 2 * H);
                    RNN_FN(act_apply)(&act[0], g, 2 * H);
                    RNN_T *gz = g, *gr = g + H, *gh = g + 2 * H;
                    if (gru_split) {
                        for (int64_t j = 0; j < H; j++) tb[j] = gr[j] * hb[j];
                        continue; /* finished after the second GEMM below */
                    }
                    for (int64_t j = 0; j < H; j++)
                        gh[j] = xr[2 * H + j] + bias[2 * H + j] + gr[j] * (gh[j] + (rbh ? rbh[j] : 0));
                    RNN_FN(clip)(p, gh, H);
                    RNN_FN(act_apply)(&act[1], gh, H);
                    for (int64_t j = 0; j < H; j++) hb[j] = (1 - gz[j]) * gh[j] + gz[j] * hb[j];
                } else {
                    RNN_FN(clip)(p, g, H);
                    RNN_FN(act_apply)(&act[0], g, H);
                    memcpy(hb, g, (size_t)H * sizeof(RNN_T));
                }
            }
            if (gru_split) {
                /* inactive rows of tmp hold stale values; their products are never read */
                RNN_FN(gemm_abt)(B, H, H, tmp, Rd ? Rd + 2 * H * H : NULL, tmp2, H);
#pragma omp parallel for num_threads(cpu_num_threads()) if (B * GH > 16384)
                for (int64_t b = 0; b < B; b++) {
                    const int64_t len = io->lens ? io->lens[b] : S;
                    if (s >= len) continue;
                    const int64_t t = rev ? len - 1 - s : s;
                    const RNN_T *xr = xw + (p->layout ? b * S + t : t * B + b) * GH;
                    RNN_T *gz = hr + b * GH, *gh = gz + 2 * H, *hb = h + b * H, *pr = tmp2 + b * H;
                    for (int64_t j = 0; j < H; j++) gh[j] = xr[2 * H + j] + bias[2 * H + j] + pr[j];
                    RNN_FN(clip)(p, gh, H);
                    RNN_FN(act_apply)(&act[1], gh, H);
                    for (int64_t j = 0; j < H; j++) hb[j] = (1 - gz[j]) * gh[j] + gz[j] * hb[j];
                }
            }
            if (Y)
                for (int64_t b = 0; b < B; b++) {
                    const int64_t len = io->lens ? io->lens[b] : S;
                    if (s >= len) continue;
                    const int64_t t = rev ? len - 1 - s : s;
                    int64_t off = p->layout ? ((b * S + t) * ND + d) * H : ((t * ND + d) * B + b) * H;
                    memcpy(Y + off, h + b * H, (size_t)H * sizeof(RNN_T));
                }
        }
        for (int64_t b = 0; b < B; b++) {
            int64_t off = p->layout ? (b * ND + d) * H : (d * B + b) * H;
            if (YH) memcpy(YH + off, h + b * H, (size_t)H * sizeof(RNN_T));
            if (YC) memcpy(YC + off, c + b * H, (size_t)H * sizeof(RNN_T));
        }
    }
}

#endif
