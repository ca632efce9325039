/* Op schemas of the recurrent family (shape and dtype inference): LSTM, GRU, RNN. */
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"

static const cinfer_dtype rnn_types[] = {
    CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED,
};

static bool present(const tensor *in, int num_in, int i) { return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED; }

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
    const char *dir = graph_attr_string(n, "direction", "forward");
    int64_t nd;
    if (!strcmp(dir, "forward") || !strcmp(dir, "reverse"))
        nd = 1;
    else if (!strcmp(dir, "bidirectional"))
        nd = 2;
    else
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': direction '%s' is not forward, reverse or bidirectional", n->op_type, n->name,
                          dir);
    int64_t layout = graph_attr_int(n, "layout", 0);
    if (layout != 0 && layout != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': layout must be 0 or 1, got %lld", n->op_type,
                          n->name, (long long)layout);
    const tensor *x = &in[0], *w = &in[1], *r = &in[2];
    if (x->ndim != 3)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': X has shape %s, expected %s", n->op_type, n->name,
                          tensor_shape_str(x, sa, sizeof sa),
                          layout ? "[batch_size, seq_length, input_size]" : "[seq_length, batch_size, input_size]");
    int64_t seq = layout ? x->dims[1] : x->dims[0], batch = layout ? x->dims[0] : x->dims[1], isz = x->dims[2];
    if (r->ndim != 3 || r->dtype != x->dtype)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': R has shape %s (%s), expected [num_directions, %d*hidden_size, hidden_size] "
                          "of X's dtype %s",
                          n->op_type, n->name, tensor_shape_str(r, sa, sizeof sa), cinfer_dtype_name(r->dtype), gates,
                          cinfer_dtype_name(x->dtype));
    int64_t hs = graph_attr_int(n, "hidden_size", r->dims[2]);
    if (hs <= 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': hidden_size must be positive, got %lld",
                          n->op_type, n->name, (long long)hs);
    int64_t d3[3];
    char txt[96];
    snprintf(txt, sizeof txt, "[num_directions, %d*hidden_size, input_size]", gates);
    d3[0] = nd, d3[1] = gates * hs, d3[2] = isz;
    CINFER_TRY(expect_shape(n, in, num_in, 1, "W", 3, d3, txt));
    (void)w;
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
