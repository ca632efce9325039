/* Op schemas of the attention family: Attention, RotaryEmbedding, Swish, SwiGLU and the recurrent ops. */
#include <math.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/attention_params.h"

/* The CPU kernels compute in float32 (float16/bfloat16 through float32 with rounding at the reference's
 * op boundaries); double is left out. */
static const cinfer_dtype attn_float_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16,
                                                CINFER_DTYPE_UNDEFINED};

static bool present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

static cinfer_status expect_rank(const graph_node *n, const tensor *t, const char *what, int rank) {
    char s[128];
    if (t->ndim != rank)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must be %d-D, got shape %s", n->op_type, n->name,
                          what, rank, tensor_shape_str(t, s, sizeof s));
    return CINFER_OK;
}

static cinfer_status expect_dim(const graph_node *n, const tensor *t, const char *what, int d, int64_t want,
                                const char *meaning) {
    char s[128];
    if (t->dims[d] != want)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected dim %d to be %lld (%s)",
                          n->op_type, n->name, what, tensor_shape_str(t, s, sizeof s), d, (long long)want, meaning);
    return CINFER_OK;
}

static cinfer_status expect_same_dtype(const graph_node *n, const tensor *t, const char *what, const tensor *ref,
                                       const char *ref_what) {
    if (t->dtype != ref->dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has dtype %s, expected %s like %s", n->op_type,
                          n->name, what, cinfer_dtype_name(t->dtype), cinfer_dtype_name(ref->dtype), ref_what);
    return CINFER_OK;
}

/* Splits a 3-D [batch, seq, heads * size] input into its head size. */
static cinfer_status split_heads(const graph_node *n, const tensor *t, const char *what, int64_t heads,
                                 const char *heads_attr, int64_t *size) {
    char s[128];
    if (heads <= 0 || t->dims[2] % heads != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected its last dim to be a "
                          "multiple of %s = %lld", n->op_type, n->name, what, tensor_shape_str(t, s, sizeof s),
                          heads_attr, (long long)heads);
    *size = t->dims[2] / heads;
    return CINFER_OK;
}

static void set_shape(tensor *out, cinfer_dtype dt, int ndim, const int64_t *dims) {
    out->dtype = dt;
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++) out->dims[d] = dims[d];
}

/* ---- Attention (opset 23; 24 adds nonpad_kv_seqlen; 25 adds left/right_window_size) ---- */

void attention_packed_thirds(const tensor *packed, int64_t width, tensor thirds[3]) {
    const size_t es = cinfer_dtype_size(packed->dtype);
    for (int i = 0; i < 3; i++) {
        thirds[i] = *packed;
        thirds[i].dims[2] = width;
        thirds[i].data = packed->data ? (char *)packed->data + (size_t)(i * width) * es : NULL;
        thirds[i].host_data = NULL;
    }
}

cinfer_status attention_compute_sdpa(const graph_node *n, const tensor *in, int num_in, attention_sdpa *p) {
    const tensor *q = &in[0], *k = &in[1], *v = &in[2];
    char s1[128], s2[128];
    /* the fusion's packed form: inputs 0..2 are one [batch, seq, 3 * width] value, checked here on the real shape */
    tensor thirds[3];
    int64_t packed = 0;
    if (graph_attr_int(n, "cinfer_packed_qkv", 0)) {
        if (q->ndim != 3 || q->dims[2] % 3 != 0 || num_in > 4)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s' (fused Q/K/V projections): the packed "
                              "projections have shape %s, expected [batch, seq, 3 * width] and no past inputs",
                              n->name, tensor_shape_str(q, s1, sizeof s1));
        packed = q->dims[2] / 3;
        attention_packed_thirds(q, packed, thirds);
        q = &thirds[0], k = &thirds[1], v = &thirds[2];
    }
    CINFER_TRY(shape_expect_dtype(n, in, 0, attn_float_types));
    CINFER_TRY(expect_same_dtype(n, k, "K", q, "Q"));
    CINFER_TRY(shape_expect_dtype(n, in, 2, attn_float_types));
    int rank = q->ndim;
    if (rank != 3 && rank != 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': Q must be 3-D or 4-D, got shape %s", n->name,
                          tensor_shape_str(q, s1, sizeof s1));
    CINFER_TRY(expect_rank(n, k, "K (same rank as Q)", rank));
    CINFER_TRY(expect_rank(n, v, "V (same rank as Q)", rank));
    int64_t batch = q->dims[0];
    CINFER_TRY(expect_dim(n, k, "K", 0, batch, "batch size of Q"));
    CINFER_TRY(expect_dim(n, v, "V", 0, batch, "batch size of Q"));
    int64_t attr_qh = graph_attr_int(n, "q_num_heads", 0), attr_kvh = graph_attr_int(n, "kv_num_heads", 0);
    int64_t qh, kvh, sq, skv, hd = 0, hdk = 0, hdv = 0;
    if (rank == 3) {
        if (attr_qh <= 0 || attr_kvh <= 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': 3-D inputs need positive q_num_heads and "
                              "kv_num_heads attributes, got %lld and %lld", n->name, (long long)attr_qh,
                              (long long)attr_kvh);
        qh = attr_qh;
        kvh = attr_kvh;
        CINFER_TRY(split_heads(n, q, "Q", qh, "q_num_heads", &hd));
        CINFER_TRY(split_heads(n, k, "K", kvh, "kv_num_heads", &hdk));
        CINFER_TRY(split_heads(n, v, "V", kvh, "kv_num_heads", &hdv));
        sq = q->dims[1];
        skv = k->dims[1];
        CINFER_TRY(expect_dim(n, v, "V", 1, skv, "sequence length of K"));
    } else {
        qh = q->dims[1];
        kvh = k->dims[1];
        sq = q->dims[2];
        skv = k->dims[2];
        hd = q->dims[3];
        hdk = k->dims[3];
        hdv = v->dims[3];
        CINFER_TRY(expect_dim(n, v, "V", 1, kvh, "head count of K"));
        CINFER_TRY(expect_dim(n, v, "V", 2, skv, "sequence length of K"));
        if ((attr_qh > 0 && attr_qh != qh) || (attr_kvh > 0 && attr_kvh != kvh))
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': q_num_heads/kv_num_heads attributes "
                              "(%lld/%lld) disagree with the 4-D Q %s and K %s", n->name, (long long)attr_qh,
                              (long long)attr_kvh, tensor_shape_str(q, s1, sizeof s1),
                              tensor_shape_str(k, s2, sizeof s2));
    }
    if (hdk != hd)
        return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': Q head size %lld and K head size %lld differ "
                          "(Q %s, K %s)", n->name, (long long)hd, (long long)hdk, tensor_shape_str(q, s1, sizeof s1),
                          tensor_shape_str(k, s2, sizeof s2));
    if (kvh <= 0 || qh % kvh != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': %lld query heads are not a multiple of %lld "
                          "key/value heads", n->name, (long long)qh, (long long)kvh);

    int64_t past = 0;
    bool has_pk = present(in, num_in, 4), has_pv = present(in, num_in, 5);
    if (has_pk != has_pv)
        return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': past_key and past_value must be given "
                          "together", n->name);
    if (has_pk) {
        const tensor *pk = &in[4], *pv = &in[5];
        CINFER_TRY(expect_same_dtype(n, pk, "past_key", k, "K"));
        CINFER_TRY(expect_same_dtype(n, pv, "past_value", v, "V"));
        CINFER_TRY(expect_rank(n, pk, "past_key", 4));
        CINFER_TRY(expect_rank(n, pv, "past_value", 4));
        past = pk->dims[2];
        const int64_t want_k[4] = {batch, kvh, past, hd}, want_v[4] = {batch, kvh, past, hdv};
        static const char *const meaning[4] = {"batch size", "key/value heads", "past length of past_key", "head size"};
        for (int d = 0; d < 4; d++) {
            CINFER_TRY(expect_dim(n, pk, "past_key", d, want_k[d], meaning[d]));
            CINFER_TRY(expect_dim(n, pv, "past_value", d, want_v[d], d == 3 ? "head size of V" : meaning[d]));
        }
    }
    int64_t total = past + skv;

    if (present(in, num_in, 6)) {
        const tensor *np = &in[6];
        if (np->dtype != CINFER_DTYPE_INT64)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': nonpad_kv_seqlen has dtype %s, expected "
                              "int64", n->name, cinfer_dtype_name(np->dtype));
        CINFER_TRY(expect_rank(n, np, "nonpad_kv_seqlen", 1));
        CINFER_TRY(expect_dim(n, np, "nonpad_kv_seqlen", 0, batch, "batch size"));
        if (has_pk)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': nonpad_kv_seqlen cannot be combined with "
                              "past_key/past_value", n->name);
    }

    if (present(in, num_in, 3)) {
        const tensor *m = &in[3];
        if (m->dtype != CINFER_DTYPE_BOOL && !dtype_is_float(m->dtype) && !dtype_is_integer(m->dtype))
            return core_error(CINFER_ERR_UNSUPPORTED, "Attention node '%s': attn_mask has dtype %s, expected bool or "
                              "a number type", n->name, cinfer_dtype_name(m->dtype));
        if (m->ndim < 1 || m->ndim > 4)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': attn_mask must have rank 1 to 4, got "
                              "shape %s", n->name, tensor_shape_str(m, s1, sizeof s1));
        /* right-aligned against [batch, q_heads, q_len, total_kv]; a short last dim is padded (masked) */
        const int64_t full[4] = {batch, qh, sq, total};
        for (int d = 0; d < m->ndim; d++) {
            int fd = 4 - m->ndim + d;
            int64_t md = m->dims[d];
            bool ok = fd == 3 ? md <= total : (md == 1 || md == full[fd]);
            if (!ok)
                return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': attn_mask has shape %s, expected it "
                                  "to broadcast to [batch=%lld, q_heads=%lld, q_len=%lld, kv_len<=%lld]", n->name,
                                  tensor_shape_str(m, s1, sizeof s1), (long long)batch, (long long)qh, (long long)sq,
                                  (long long)total);
        }
        /* made by graph/fusion.c from Add(scores, mask) + Softmax: the Add would broadcast a mask whose last dim is 1
         * where Attention pads it with -inf; the fusion proved that dim the key length from static shapes, and this
         * checks it again on the real shapes (a caller can pass inputs whose like-named dims differ) */
        bool fused = graph_node_attr(n, "cinfer_nan_to_zero") || graph_node_attr(n, "cinfer_empty_rows_nan");
        if (fused && m->dims[m->ndim - 1] != total)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Attention node '%s' (fused from the model's attention "
                              "pattern): the mask added to the scores has shape %s, expected its last dim to be the "
                              "key length %lld", n->name, tensor_shape_str(m, s1, sizeof s1), (long long)total);
    }

    int64_t mode = graph_attr_int(n, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': qk_matmul_output_mode is %lld, expected 0..3",
                          n->name, (long long)mode);
    p->has_softmax_precision = graph_node_attr(n, "softmax_precision") != NULL;
    p->softmax_precision = CINFER_DTYPE_FLOAT;
    if (p->has_softmax_precision) {
        int64_t sp = graph_attr_int(n, "softmax_precision", 1);
        if (sp != CINFER_DTYPE_FLOAT && sp != CINFER_DTYPE_FLOAT16 && sp != CINFER_DTYPE_BFLOAT16 &&
            sp != CINFER_DTYPE_DOUBLE)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': softmax_precision is %lld, expected a "
                              "float type (1, 10, 11 or 16)", n->name, (long long)sp);
        p->softmax_precision = (cinfer_dtype)sp;
    }
    p->left = p->right = -1;
    if (n->opset >= 25) {
        int64_t lw = graph_attr_int(n, "left_window_size", -1), rw = graph_attr_int(n, "right_window_size", -1);
        if (lw < -1 || rw < -1)
            return core_error(CINFER_ERR_INVALID_MODEL, "Attention node '%s': left/right_window_size are %lld/%lld, "
                              "expected -1 or >= 0", n->name, (long long)lw, (long long)rw);
        p->left = lw;
        p->right = rw;
    }
    p->window = p->left >= 0 || p->right >= 0;
    p->rank3 = rank == 3;
    p->batch = batch, p->qh = qh, p->kvh = kvh, p->sq = sq, p->skv = skv, p->hd = hd, p->hdv = hdv;
    p->has_past = has_pk, p->past = past, p->total = total;
    p->mode = (int)mode;
    p->causal = graph_attr_int(n, "is_causal", 0) != 0;
    p->softcap = graph_attr_float(n, "softcap", 0.0f);
    p->scale = graph_node_attr(n, "scale") ? (double)graph_attr_float(n, "scale", 1.0f) : 1.0 / sqrt((double)hd);
    p->packed = packed;
    return CINFER_OK;
}

static cinfer_status infer_attention(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    attention_sdpa p;
    CINFER_TRY(attention_compute_sdpa(n, in, num_in, &p));
    if (!p.rank3) {
        const int64_t y[4] = {p.batch, p.qh, p.sq, p.hdv};
        set_shape(&out[0], in[0].dtype, 4, y);
    } else {
        const int64_t y[3] = {p.batch, p.sq, p.qh * p.hdv};
        set_shape(&out[0], in[0].dtype, 3, y);
    }
    const int64_t pk[4] = {p.batch, p.kvh, p.total, p.hd}, pv[4] = {p.batch, p.kvh, p.total, p.hdv};
    const int64_t qk[4] = {p.batch, p.qh, p.sq, p.total};
    if (num_out > 1) set_shape(&out[1], in[1].dtype, 4, pk);
    if (num_out > 2) set_shape(&out[2], in[2].dtype, 4, pv);
    if (num_out > 3) set_shape(&out[3], in[0].dtype, 4, qk);
    return CINFER_OK;
}

/* ---- RotaryEmbedding (opset 23) ---- */

cinfer_status attention_compute_rotary(const graph_node *n, const tensor *in, int num_in, attention_rotary *p) {
    const tensor *x = &in[0], *cs = &in[1], *sn = &in[2];
    char s1[128], s2[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, attn_float_types));
    CINFER_TRY(expect_same_dtype(n, cs, "cos_cache", x, "X"));
    CINFER_TRY(expect_same_dtype(n, sn, "sin_cache", x, "X"));
    int64_t batch, seq, head = 0, heads;
    if (x->ndim == 4) {
        batch = x->dims[0];
        heads = x->dims[1];
        seq = x->dims[2];
        head = x->dims[3];
    } else if (x->ndim == 3) {
        heads = graph_attr_int(n, "num_heads", 0);
        if (heads <= 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': a 3-D input needs a positive "
                              "num_heads attribute, got %lld", n->name, (long long)heads);
        CINFER_TRY(split_heads(n, x, "X", heads, "num_heads", &head));
        batch = x->dims[0];
        seq = x->dims[1];
    } else {
        return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': X must be 3-D or 4-D, got shape %s",
                          n->name, tensor_shape_str(x, s1, sizeof s1));
    }
    int64_t rot = graph_attr_int(n, "rotary_embedding_dim", 0);
    if (rot == 0) rot = head;
    if (rot < 0 || rot > head || rot % 2 != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': rotary_embedding_dim is %lld, expected "
                          "an even number <= head size %lld", n->name, (long long)rot, (long long)head);
    if (!tensor_same_shape(cs, sn))
        return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': cos_cache %s and sin_cache %s must "
                          "have the same shape", n->name, tensor_shape_str(cs, s1, sizeof s1),
                          tensor_shape_str(sn, s2, sizeof s2));
    if (present(in, num_in, 3)) {
        const tensor *pos = &in[3];
        if (pos->dtype != CINFER_DTYPE_INT64)
            return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': position_ids has dtype %s, "
                              "expected int64", n->name, cinfer_dtype_name(pos->dtype));
        if (pos->ndim != 2 || pos->dims[0] != batch || pos->dims[1] != seq)
            return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': position_ids has shape %s, "
                              "expected [batch=%lld, seq=%lld]", n->name, tensor_shape_str(pos, s1, sizeof s1),
                              (long long)batch, (long long)seq);
        if (cs->ndim != 2 || cs->dims[1] != rot / 2)
            return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': with position_ids, cos_cache must "
                              "be [max_positions, %lld], got %s", n->name, (long long)(rot / 2),
                              tensor_shape_str(cs, s1, sizeof s1));
    } else if (cs->ndim != 3 || cs->dims[0] != batch || cs->dims[1] != seq || cs->dims[2] != rot / 2) {
        return core_error(CINFER_ERR_INVALID_MODEL, "RotaryEmbedding node '%s': without position_ids, cos_cache must "
                          "be [batch=%lld, seq=%lld, %lld], got %s", n->name, (long long)batch, (long long)seq,
                          (long long)(rot / 2), tensor_shape_str(cs, s1, sizeof s1));
    }
    *p = (attention_rotary){.rank4 = x->ndim == 4, .batch = batch, .heads = heads, .seq = seq, .head = head,
                            .rot = rot, .interleaved = graph_attr_int(n, "interleaved", 0) != 0,
                            .has_positions = present(in, num_in, 3), .max_positions = cs->dims[0]};
    return CINFER_OK;
}

cinfer_status attention_check_positions(const graph_node *n, const int64_t *pos, int64_t count,
                                        int64_t max_positions) {
    for (int64_t i = 0; pos && i < count; i++)
        if (pos[i] < 0 || pos[i] >= max_positions)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "RotaryEmbedding node '%s': position_ids[%lld] is %lld, "
                              "expected 0 <= id < %lld (cos_cache rows)", n->name, (long long)i, (long long)pos[i],
                              (long long)max_positions);
    return CINFER_OK;
}

static cinfer_status infer_rotary(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    attention_rotary p;
    CINFER_TRY(attention_compute_rotary(n, in, num_in, &p));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

/* ---- Swish (opset 24), SwiGLU ---- */

static cinfer_status infer_swish(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, attn_float_types));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

static cinfer_status infer_swiglu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    char s1[128], s2[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, attn_float_types));
    CINFER_TRY(expect_same_dtype(n, &in[1], "B", &in[0], "A"));
    if (!tensor_same_shape(&in[0], &in[1]))
        return core_error(CINFER_ERR_INVALID_MODEL, "SwiGLU node '%s': A %s and B %s must have the same shape (no "
                          "broadcasting)", n->name, tensor_shape_str(&in[0], s1, sizeof s1),
                          tensor_shape_str(&in[1], s2, sizeof s2));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

/* ---- LinearAttention (opset 27): recurrent state [batch, kv_heads, d_k, d_v] ---- */

cinfer_status attention_compute_linear(const graph_node *n, const tensor *in, int num_in, attention_linear *p) {
    const tensor *q = &in[0], *k = &in[1], *v = &in[2];
    char s1[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, attn_float_types));
    CINFER_TRY(expect_same_dtype(n, k, "key", q, "query"));
    CINFER_TRY(expect_same_dtype(n, v, "value", q, "query"));
    CINFER_TRY(expect_rank(n, q, "query", 3));
    CINFER_TRY(expect_rank(n, k, "key", 3));
    CINFER_TRY(expect_rank(n, v, "value", 3));
    int64_t qh = graph_attr_int(n, "q_num_heads", 0), kvh = graph_attr_int(n, "kv_num_heads", 0);
    if (qh <= 0 || kvh <= 0 || qh % kvh != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "LinearAttention node '%s': q_num_heads (%lld) must be a positive "
                          "multiple of kv_num_heads (%lld)", n->name, (long long)qh, (long long)kvh);
    int64_t b = q->dims[0], t = q->dims[1], dk = 0, dv = 0;
    CINFER_TRY(split_heads(n, q, "query", qh, "q_num_heads", &dk));
    CINFER_TRY(split_heads(n, v, "value", kvh, "kv_num_heads", &dv));
    for (int i = 1; i < 3; i++) {
        CINFER_TRY(expect_dim(n, &in[i], i == 1 ? "key" : "value", 0, b, "batch size of query"));
        CINFER_TRY(expect_dim(n, &in[i], i == 1 ? "key" : "value", 1, t, "sequence length of query"));
    }
    CINFER_TRY(expect_dim(n, k, "key", 2, kvh * dk, "kv_num_heads * d_k"));
    const char *rule = graph_attr_string(n, "update_rule", "gated_delta");
    bool gating = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0;
    bool delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0;
    if (!gating && !delta && strcmp(rule, "linear") != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "LinearAttention node '%s': update_rule is '%s', expected linear, "
                          "gated, delta or gated_delta", n->name, rule);
    bool has_decay = present(in, num_in, 4), has_beta = present(in, num_in, 5);
    if (gating != has_decay)
        return core_error(CINFER_ERR_INVALID_MODEL, "LinearAttention node '%s': update_rule '%s' %s the decay input",
                          n->name, rule, gating ? "requires" : "forbids");
    if (delta != has_beta)
        return core_error(CINFER_ERR_INVALID_MODEL, "LinearAttention node '%s': update_rule '%s' %s the beta input",
                          n->name, rule, delta ? "requires" : "forbids");
    if (present(in, num_in, 3)) {
        const tensor *ps = &in[3];
        CINFER_TRY(shape_expect_dtype(n, in, 3, attn_float_types));
        const int64_t want[4] = {b, kvh, dk, dv};
        static const char *const meaning[4] = {"batch size", "kv_num_heads", "d_k", "d_v"};
        CINFER_TRY(expect_rank(n, ps, "past_state", 4));
        for (int d = 0; d < 4; d++) CINFER_TRY(expect_dim(n, ps, "past_state", d, want[d], meaning[d]));
    }
    for (int i = 4; i <= 5; i++) {
        if (!present(in, num_in, i)) continue;
        const tensor *g = &in[i];
        const char *what = i == 4 ? "decay" : "beta";
        CINFER_TRY(shape_expect_dtype(n, in, i, attn_float_types));
        int64_t last = g->ndim == 3 ? g->dims[2] : -1;
        bool ok = g->ndim == 3 && g->dims[0] == b && g->dims[1] == t &&
                  (i == 4 ? (last == kvh || last == kvh * dk) : (last == kvh || last == 1));
        if (!ok)
            return core_error(CINFER_ERR_INVALID_MODEL, "LinearAttention node '%s': %s has shape %s, expected [%lld, "
                              "%lld, %s]", n->name, what, tensor_shape_str(g, s1, sizeof s1), (long long)b,
                              (long long)t, i == 4 ? "kv_num_heads or kv_num_heads*d_k" : "kv_num_heads or 1");
    }
    *p = (attention_linear){.batch = b, .seq = t, .qh = qh, .kvh = kvh, .dk = dk, .dv = dv, .gating = gating,
                            .delta = delta, .scale = graph_attr_float(n, "scale", 0.0f)};
    if (p->scale == 0.0f) p->scale = (float)(1.0 / sqrt((double)dk));
    return CINFER_OK;
}

static cinfer_status infer_linear_attention(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                            int num_out) {
    attention_linear p;
    CINFER_TRY(attention_compute_linear(n, in, num_in, &p));
    /* the state keeps past_state's dtype, else the query's */
    cinfer_dtype state_dt = present(in, num_in, 3) ? in[3].dtype : in[0].dtype;
    const int64_t y[3] = {p.batch, p.seq, p.qh * p.dv}, st[4] = {p.batch, p.kvh, p.dk, p.dv};
    set_shape(&out[0], in[0].dtype, 3, y);
    if (num_out > 1) set_shape(&out[1], state_dt, 4, st);
    return CINFER_OK;
}

/* ---- CausalConvWithState (opset 27): depthwise causal conv1d carrying the last k-1 inputs ---- */

cinfer_status attention_compute_causal_conv(const graph_node *n, const tensor *in, int num_in,
                                            attention_causal_conv *p) {
    const tensor *x = &in[0], *w = &in[1];
    CINFER_TRY(shape_expect_dtype(n, in, 0, attn_float_types));
    CINFER_TRY(expect_same_dtype(n, w, "weight", x, "input"));
    CINFER_TRY(expect_rank(n, x, "input", 3));
    CINFER_TRY(expect_rank(n, w, "weight", 3));
    int64_t b = x->dims[0], c = x->dims[1], ks = w->dims[2];
    CINFER_TRY(expect_dim(n, w, "weight", 0, c, "channels of input"));
    CINFER_TRY(expect_dim(n, w, "weight", 1, 1, "depthwise"));
    if (ks < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "CausalConvWithState node '%s': kernel size is %lld, expected >= 1",
                          n->name, (long long)ks);
    if (present(in, num_in, 2)) {
        CINFER_TRY(expect_same_dtype(n, &in[2], "bias", x, "input"));
        CINFER_TRY(expect_rank(n, &in[2], "bias", 1));
        CINFER_TRY(expect_dim(n, &in[2], "bias", 0, c, "channels"));
    }
    if (present(in, num_in, 3)) {
        const tensor *ps = &in[3];
        CINFER_TRY(expect_same_dtype(n, ps, "past_state", x, "input"));
        CINFER_TRY(expect_rank(n, ps, "past_state", 3));
        CINFER_TRY(expect_dim(n, ps, "past_state", 0, b, "batch size"));
        CINFER_TRY(expect_dim(n, ps, "past_state", 1, c, "channels"));
        CINFER_TRY(expect_dim(n, ps, "past_state", 2, ks - 1, "kernel size - 1"));
    }
    const char *act = graph_attr_string(n, "activation", "none");
    if (strcmp(act, "none") != 0 && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "CausalConvWithState node '%s': activation is '%s', expected none, "
                          "silu or swish", n->name, act);
    *p = (attention_causal_conv){.batch = b, .channels = c, .len = x->dims[2], .k = ks,
                                 .silu = strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0};
    return CINFER_OK;
}

static cinfer_status infer_causal_conv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    attention_causal_conv p;
    CINFER_TRY(attention_compute_causal_conv(n, in, num_in, &p));
    shape_copy(&out[0], &in[0]);
    const int64_t st[3] = {p.batch, p.channels, p.k - 1};
    if (num_out > 1) set_shape(&out[1], in[0].dtype, 3, st);
    return CINFER_OK;
}

const op_schema shape_attention_schemas[] = {
    {"Attention", infer_attention, 0, 0, 3, 7},
    {"RotaryEmbedding", infer_rotary, 0, 0, 3, 4},
    {"Swish", infer_swish, 0, OP_FLAG_INPLACE, 1, 1},
    {"SwiGLU", infer_swiglu, 0, OP_FLAG_INPLACE, 2, 2},
    {"LinearAttention", infer_linear_attention, 0, 0, 3, 6},
    {"CausalConvWithState", infer_causal_conv, 0, 0, 2, 4},
    {NULL, NULL, 0, 0, 0, 0},
};
