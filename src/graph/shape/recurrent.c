/* Op schemas of the recurrent family (shape and dtype inference): LSTM, GRU, RNN. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/recurrent_params.h"

static const cinfer_dtype rnn_types[] = {
    CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED,
};

static bool present(const tensor *in, int num_in, int i) { return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED; }

cinfer_status recurrent_compute_params(const graph_node *n, const tensor *in, int num_in, recurrent_params *p) {
    (void)num_in;
    char sa[128];
    memset(p, 0, sizeof *p);
    p->gates = strcmp(n->op_type, "LSTM") == 0 ? 4 : strcmp(n->op_type, "GRU") == 0 ? 3 : 1;
    const char *dir = graph_attr_string(n, "direction", "forward");
    if (!strcmp(dir, "forward") || !strcmp(dir, "reverse"))
        p->ndir = 1;
    else if (!strcmp(dir, "bidirectional"))
        p->ndir = 2;
    else
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': direction '%s' is not forward, reverse or bidirectional", n->op_type, n->name,
                          dir);
    p->reverse = strcmp(dir, "reverse") == 0;
    int64_t layout = graph_attr_int(n, "layout", 0);
    if (layout != 0 && layout != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': layout must be 0 or 1, got %lld", n->op_type,
                          n->name, (long long)layout);
    p->layout = (int)layout;
    const tensor *x = &in[0], *r = &in[2];
    if (x->ndim != 3)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': X has shape %s, expected %s", n->op_type, n->name,
                          tensor_shape_str(x, sa, sizeof sa),
                          layout ? "[batch_size, seq_length, input_size]" : "[seq_length, batch_size, input_size]");
    p->seq = layout ? x->dims[1] : x->dims[0];
    p->batch = layout ? x->dims[0] : x->dims[1];
    p->input_size = x->dims[2];
    if (r->ndim != 3 || r->dtype != x->dtype)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': R has shape %s (%s), expected [num_directions, %d*hidden_size, hidden_size] "
                          "of X's dtype %s",
                          n->op_type, n->name, tensor_shape_str(r, sa, sizeof sa), cinfer_dtype_name(r->dtype),
                          p->gates, cinfer_dtype_name(x->dtype));
    p->hidden = graph_attr_int(n, "hidden_size", r->dims[2]);
    if (p->hidden <= 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': hidden_size must be positive, got %lld",
                          n->op_type, n->name, (long long)p->hidden);
    p->lbr = graph_attr_int(n, "linear_before_reset", 0) != 0;
    p->input_forget = graph_attr_int(n, "input_forget", 0) != 0;
    p->has_clip = graph_node_attr(n, "clip") != NULL;
    p->clip = graph_attr_float(n, "clip", 0.0f);
    return CINFER_OK;
}

/* Names as the spec spells them (matched case-insensitively), with the defaults for a missing alpha/beta. */
static const struct {
    const char *name;
    int kind;
    bool has_alpha, has_beta;
    float alpha, beta;
} act_table[] = {
    {"Sigmoid", RECURRENT_ACT_SIGMOID, false, false, 0.0f, 0.0f},
    {"Tanh", RECURRENT_ACT_TANH, false, false, 0.0f, 0.0f},
    {"Relu", RECURRENT_ACT_RELU, false, false, 0.0f, 0.0f},
    {"Affine", RECURRENT_ACT_AFFINE, true, true, 1.0f, 0.0f},
    {"LeakyRelu", RECURRENT_ACT_LEAKY_RELU, true, false, 0.01f, 0.0f},
    {"ThresholdedRelu", RECURRENT_ACT_THRESHOLDED_RELU, true, false, 1.0f, 0.0f},
    {"ScaledTanh", RECURRENT_ACT_SCALED_TANH, true, true, 1.0f, 1.0f},
    {"HardSigmoid", RECURRENT_ACT_HARD_SIGMOID, true, true, 0.2f, 0.5f},
    {"Elu", RECURRENT_ACT_ELU, true, false, 1.0f, 0.0f},
    {"Softsign", RECURRENT_ACT_SOFTSIGN, false, false, 0.0f, 0.0f},
    {"Softplus", RECURRENT_ACT_SOFTPLUS, false, false, 0.0f, 0.0f},
};

cinfer_status recurrent_read_activations(const graph_node *n, recurrent_params *p) {
    static const char *const defaults[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    const int nact = p->gates == 4 ? 3 : p->gates == 3 ? 2 : 1;
    const char *const *names = defaults[nact - 1];
    size_t count = (size_t)nact;
    const graph_attr *a = graph_node_attr(n, "activations");
    if (a && a->type == ATTR_STRINGS && a->n > 0) {
        names = (const char *const *)a->strings;
        count = a->n;
    }
    if (count != (size_t)nact && count != (size_t)(nact * p->ndir))
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': activations lists %zu functions, expected %d (or %d per direction)",
                          n->op_type, n->name, count, nact * (int)p->ndir, nact);
    size_t na = 0, nb = 0, ia = 0, ib = 0;
    const float *alphas = graph_attr_floats(n, "activation_alpha", &na);
    const float *betas = graph_attr_floats(n, "activation_beta", &nb);
    for (int64_t d = 0; d < p->ndir; d++) {
        for (int k = 0; k < nact; k++) {
            const size_t idx = count == (size_t)nact ? (size_t)k : (size_t)(d * nact + k);
            const char *name = names[idx];
            size_t t = 0;
            const size_t nt = sizeof act_table / sizeof act_table[0];
            while (t < nt && strcasecmp(act_table[t].name, name) != 0) t++;
            if (t == nt)
                return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': unknown activation function '%s'",
                                  n->op_type, n->name, name);
            recurrent_act *f = &p->act[d][k];
            f->kind = act_table[t].kind;
            f->alpha = act_table[t].alpha;
            f->beta = act_table[t].beta;
            if (act_table[t].has_alpha && alphas && ia < na) f->alpha = alphas[ia++];
            if (act_table[t].has_beta && betas && ib < nb) f->beta = betas[ib++];
        }
        if (count == (size_t)nact && d == 0 && p->ndir == 2) {
            /* the second direction repeats the first's functions and parameters */
            memcpy(p->act[1], p->act[0], sizeof p->act[0]);
            break;
        }
    }
    return CINFER_OK;
}

/* Checks that optional input i (when given) has dtype T and the expected dims. */
static cinfer_status expect_shape(const graph_node *n, const tensor *in, int num_in, int i, const char *name,
                                  int ndim, const int64_t *dims, const char *layout_text) {
    if (!present(in, num_in, i)) return CINFER_OK;
    char sa[128];
    if (in[i].dtype != in[0].dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has dtype %s but X has %s, they must match",
                          n->op_type, n->name, name, cinfer_dtype_name(in[i].dtype), cinfer_dtype_name(in[0].dtype));
    bool ok = in[i].ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = in[i].dims[d] == dims[d];
    if (!ok) {
        char want[128];
        tensor w = {.ndim = ndim};
        for (int d = 0; d < ndim; d++) w.dims[d] = dims[d];
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected %s = %s", n->op_type,
                          n->name, name, tensor_shape_str(&in[i], sa, sizeof sa), layout_text,
                          tensor_shape_str(&w, want, sizeof want));
    }
    return CINFER_OK;
}

/* Shared by the three ops: gates is 4 (LSTM), 3 (GRU) or 1 (RNN). */
static cinfer_status infer_rnn_common(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                      int gates) {
    char sa[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, rnn_types));
    recurrent_params p;
    CINFER_TRY(recurrent_compute_params(n, in, num_in, &p));
    const tensor *x = &in[0];
    const int64_t nd = p.ndir, seq = p.seq, batch = p.batch, isz = p.input_size, hs = p.hidden;
    const int layout = p.layout;
    int64_t d3[3];
    char txt[96];
    snprintf(txt, sizeof txt, "[num_directions, %d*hidden_size, input_size]", gates);
    d3[0] = nd, d3[1] = gates * hs, d3[2] = isz;
    if (!present(in, num_in, 1)) /* required; expect_shape passes over absent optional inputs */
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': W is missing, expected %s", n->op_type, n->name, txt);
    CINFER_TRY(expect_shape(n, in, num_in, 1, "W", 3, d3, txt));
    snprintf(txt, sizeof txt, "[num_directions, %d*hidden_size, hidden_size]", gates);
    d3[2] = hs;
    CINFER_TRY(expect_shape(n, in, num_in, 2, "R", 3, d3, txt));
    snprintf(txt, sizeof txt, "[num_directions, %d*hidden_size]", 2 * gates);
    d3[1] = 2 * gates * hs;
    CINFER_TRY(expect_shape(n, in, num_in, 3, "B", 2, d3, txt));
    if (present(in, num_in, 4)) {
        const tensor *sl = &in[4];
        if ((sl->dtype != CINFER_DTYPE_INT32 && sl->dtype != CINFER_DTYPE_INT64) || sl->ndim != 1 ||
            sl->dims[0] != batch)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "%s node '%s': sequence_lens has shape %s (%s), expected int32 [batch_size] = [%lld]",
                              n->op_type, n->name, tensor_shape_str(sl, sa, sizeof sa), cinfer_dtype_name(sl->dtype),
                              (long long)batch);
    }
    int64_t hdims[3] = {layout ? batch : nd, layout ? nd : batch, hs};
    const char *htxt = layout ? "[batch_size, num_directions, hidden_size]" : "[num_directions, batch_size, hidden_size]";
    CINFER_TRY(expect_shape(n, in, num_in, 5, "initial_h", 3, hdims, htxt));
    if (gates == 4) {
        CINFER_TRY(expect_shape(n, in, num_in, 6, "initial_c", 3, hdims, htxt));
        d3[1] = 3 * hs;
        CINFER_TRY(expect_shape(n, in, num_in, 7, "P", 2, d3, "[num_directions, 3*hidden_size]"));
    }
    if (num_out > 0) {
        out[0].dtype = x->dtype;
        out[0].ndim = 4;
        int64_t yd[4] = {seq, nd, batch, hs}, yl[4] = {batch, seq, nd, hs};
        memcpy(out[0].dims, layout ? yl : yd, sizeof yd);
    }
    for (int j = 1; j < num_out && j < (gates == 4 ? 3 : 2); j++) {
        out[j].dtype = x->dtype;
        out[j].ndim = 3;
        memcpy(out[j].dims, hdims, sizeof hdims);
    }
    if (num_out > (gates == 4 ? 3 : 2))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': has %d outputs, at most %d allowed", n->op_type,
                          n->name, num_out, gates == 4 ? 3 : 2);
    return CINFER_OK;
}

static cinfer_status infer_lstm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return infer_rnn_common(n, in, num_in, out, num_out, 4);
}
static cinfer_status infer_gru(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return infer_rnn_common(n, in, num_in, out, num_out, 3);
}
static cinfer_status infer_rnn(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return infer_rnn_common(n, in, num_in, out, num_out, 1);
}

const op_schema shape_recurrent_schemas[] = {
    {"LSTM", infer_lstm, 0, 0, 3, 8},
    {"GRU", infer_gru, 0, 0, 3, 6},
    {"RNN", infer_rnn, 0, 0, 3, 6},
    {NULL, NULL, 0, 0, 0, 0},
};
