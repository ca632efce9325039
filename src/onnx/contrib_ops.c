/* onnxruntime's com.microsoft contrib ops, lowered at import onto default-domain ops cinfer already runs.
 *
 * onnxruntime's transformer optimizer and Hugging Face Optimum write fused nodes of the com.microsoft domain
 * (SkipLayerNormalization, Attention, FastGelu, ...). Each is rewritten here as the standard ops it stands for,
 * with onnxruntime's reference semantics (docs/ContribOperators.md), so both backends run them without new
 * kernels and the optimiser's own fusions (Gelu, LayerNorm + residual Add, MatMul + bias, the fused Attention)
 * apply to the result. The attention ops become ONNX Attention (opset 23 semantics: 3-D inputs with head
 * counts, or 4-D), their masks an additive float mask built from the contrib forms. MatMulNBits with constant
 * weights is dequantized once at load into a float weight constant (reference semantics; fast int paths are the
 * quantization work's). What cannot be mapped exactly fails here by name rather than running differently.
 *
 * Names: each new value and node is "<contrib node>/<what>", so errors and profiles point back at the source.
 */
#include "onnx/contrib_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define CONTRIB_DOMAIN "com.microsoft"
/* Emitted nodes carry at least this default-domain opset: Gelu's approximate (20), RMSNormalization, Attention and
 * RotaryEmbedding (23), Swish (24); older ops read the same at any version from 13 on. */
#define LOWERED_MIN_OPSET 24

typedef struct lowering {
    graph *g;
    int node;            /* the contrib node's index; re-read through g->nodes, which appends may move */
    char name[256];
    char op[64];
    char domain[64];
    int64_t version;     /* the node's version of its domain */
    int64_t opset;       /* the default-domain opset the new nodes carry */
    int nin, nout;
    int in[GRAPH_MAX_NODE_IO], out[GRAPH_MAX_NODE_IO];
} lowering;

static const graph_node *src(const lowering *L) { return &L->g->nodes[L->node]; }

/* "node 'x' (com.microsoft.Attention, version 1): " before every error of this file. */
#define LERR(L, code, fmt, ...)                                                                                  \
    core_error(code, "node '%s' (%s.%s, version %lld): " fmt, (L)->name, (L)->domain[0] ? (L)->domain : "ai.onnx", \
               (L)->op, (long long)(L)->version, __VA_ARGS__)

static bool has_in(const lowering *L, int k) { return k < L->nin && L->in[k] >= 0; }

/* An output is used when a node reads it or it is a model output (uses are counted before lowering starts). */
static bool out_used(const lowering *L, int k) {
    if (k >= L->nout || L->out[k] < 0) return false;
    const graph_value *v = &L->g->values[L->out[k]];
    return v->num_consumers > 0 || v->is_output;
}

/* Fails naming the first attribute of the node not in `known` (a NULL-terminated list). */
static cinfer_status check_attrs(const lowering *L, const char *const *known) {
    const graph_node *n = src(L);
    for (int a = 0; a < n->num_attrs; a++) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++) ok = strcmp(*k, n->attrs[a].name) == 0;
        if (!ok) return LERR(L, CINFER_ERR_UNSUPPORTED, "attribute '%s' is not supported", n->attrs[a].name);
    }
    return CINFER_OK;
}

/* Fails when int attribute `attr` is set to anything but one of the two accepted values. */
static cinfer_status expect_int_attr(const lowering *L, const char *attr, int64_t ok1, int64_t ok2, const char *why) {
    int64_t v = graph_attr_int(src(L), attr, ok1);
    if (v != ok1 && v != ok2)
        return LERR(L, CINFER_ERR_UNSUPPORTED, "attribute '%s' = %lld is not supported (%s)", attr, (long long)v, why);
    return CINFER_OK;
}

static cinfer_status refuse_input(const lowering *L, int k, const char *what, const char *why) {
    if (has_in(L, k)) return LERR(L, CINFER_ERR_UNSUPPORTED, "input %d (%s) is not supported: %s", k, what, why);
    return CINFER_OK;
}

static cinfer_status refuse_output(const lowering *L, int k, const char *what, const char *why) {
    if (out_used(L, k)) return LERR(L, CINFER_ERR_UNSUPPORTED, "output %d (%s) is not supported: %s", k, what, why);
    return CINFER_OK;
}

/* ---- building blocks: values, constants, nodes ---- */

static cinfer_status new_value(lowering *L, const char *what, int *v) {
    char base[512];
    snprintf(base, sizeof base, "%s/%s", L->name, what);
    *v = graph_new_value(L->g, base);
    return *v < 0 ? core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory lowering node '%s'", L->name) : CINFER_OK;
}

/* Appends op(ins) -> outs in the default domain; *added (may be NULL) points at the node until the next append. */
static cinfer_status emit(lowering *L, const char *op, const int *ins, int nin, const int *outs, int nout,
                          graph_node **added) {
    char name[512];
    snprintf(name, sizeof name, "%s/%s", L->name, op);
    int i = graph_add_node(L->g, name, op, "", L->opset, ins, nin, outs, nout);
    if (i < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory lowering node '%s'", L->name);
    if (added) *added = &L->g->nodes[i];
    return CINFER_OK;
}

/* emit() with one new output value named <node>/<what>, returned in *result. */
static cinfer_status emit1(lowering *L, const char *op, const int *ins, int nin, const char *what, int *result,
                           graph_node **added) {
    CINFER_TRY(new_value(L, what, result));
    return emit(L, op, ins, nin, result, 1, added);
}

static cinfer_status add_float_attr(graph_node *n, const char *name, float f) {
    graph_attr *a = NULL;
    CINFER_TRY(graph_node_add_attr(n, name, &a));
    a->type = ATTR_FLOAT;
    a->f = f;
    return CINFER_OK;
}

static cinfer_status add_string_attr(graph_node *n, const char *name, const char *s) {
    graph_attr *a = NULL;
    CINFER_TRY(graph_node_add_attr(n, name, &a));
    a->type = ATTR_STRING;
    a->s = strdup(s);
    if (!a->s) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    a->n = strlen(s);
    return CINFER_OK;
}

/* Copies attribute `name` of the contrib node, if set, onto n (under the name `as`). */
static cinfer_status copy_attr(const lowering *L, graph_node *n, const char *name, const char *as) {
    const graph_attr *a = graph_node_attr(src(L), name);
    if (!a) return CINFER_OK;
    if (a->type == ATTR_INT) return graph_node_add_int_attr(n, as, a->i);
    if (a->type == ATTR_FLOAT) return add_float_attr(n, as, a->f);
    return LERR(L, CINFER_ERR_INVALID_MODEL, "attribute '%s' has type %d, expected an int or a float", name, a->type);
}

/* A constant of `count` values copied from `data` (dims as given; ndim 0 for a scalar). */
static cinfer_status new_constant(lowering *L, const char *what, cinfer_dtype dt, int ndim, const int64_t *dims,
                                  const void *data, int *v) {
    tensor t = {.dtype = dt, .ndim = ndim, .data = (void *)data};
    for (int d = 0; d < ndim; d++) t.dims[d] = dims[d];
    char base[512];
    snprintf(base, sizeof base, "%s/%s", L->name, what);
    *v = graph_new_constant(L->g, base, &t);
    return *v < 0 ? core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory lowering node '%s'", L->name) : CINFER_OK;
}

static cinfer_status const_ints(lowering *L, const char *what, const int64_t *vals, int64_t count, int *v) {
    return new_constant(L, what, CINFER_DTYPE_INT64, 1, &count, vals, v);
}

static cinfer_status const_scalar_i64(lowering *L, const char *what, int64_t x, int *v) {
    return new_constant(L, what, CINFER_DTYPE_INT64, 0, NULL, &x, v);
}

static cinfer_status const_scalar_f32(lowering *L, const char *what, float x, int *v) {
    return new_constant(L, what, CINFER_DTYPE_FLOAT, 0, NULL, &x, v);
}

static cinfer_status op2(lowering *L, const char *op, int a, int b, const char *what, int *r) {
    const int ins[2] = {a, b};
    return emit1(L, op, ins, 2, what, r, NULL);
}

/* Shape(x)[start:end] as a 1-D int64 value. */
static cinfer_status shape_part(lowering *L, int x, int64_t start, int64_t end, const char *what, int *r) {
    graph_node *n = NULL;
    CINFER_TRY(emit1(L, "Shape", &x, 1, what, r, &n));
    CINFER_TRY(graph_node_add_int_attr(n, "start", start));
    return graph_node_add_int_attr(n, "end", end);
}

static cinfer_status cast_to(lowering *L, int x, cinfer_dtype to, const char *what, int *r) {
    graph_node *n = NULL;
    CINFER_TRY(emit1(L, "Cast", &x, 1, what, r, &n));
    return graph_node_add_int_attr(n, "to", to);
}

/* op(x, an int64 constant <what>_<suffix> holding `ints`): the form of Reshape's shape and Unsqueeze's axes. */
static cinfer_status op_with_ints(lowering *L, const char *op, int x, const int64_t *ints, int count,
                                  const char *suffix, const char *what, int *r) {
    int c;
    char cname[160];
    snprintf(cname, sizeof cname, "%s_%s", what, suffix);
    CINFER_TRY(const_ints(L, cname, ints, count, &c));
    return op2(L, op, x, c, what, r);
}

static cinfer_status reshape(lowering *L, int x, const int64_t *shape, int count, const char *what, int *r) {
    return op_with_ints(L, "Reshape", x, shape, count, "shape", what, r);
}

static cinfer_status transpose(lowering *L, int x, const int64_t *perm, int count, const char *what, int *r) {
    graph_node *n = NULL;
    graph_attr *a = NULL;
    CINFER_TRY(emit1(L, "Transpose", &x, 1, what, r, &n));
    CINFER_TRY(graph_node_add_attr(n, "perm", &a));
    a->type = ATTR_INTS;
    a->ints = malloc(sizeof(int64_t) * (size_t)count);
    if (!a->ints) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(a->ints, perm, sizeof(int64_t) * (size_t)count);
    a->n = (size_t)count;
    return CINFER_OK;
}

static cinfer_status unsqueeze(lowering *L, int x, const int64_t *axes, int count, const char *what, int *r) {
    return op_with_ints(L, "Unsqueeze", x, axes, count, "axes", what, r);
}

/* Splits x along `axis` into `parts` outputs (new values <what>_0...) of the sizes in `sizes` (an int64 value). */
static cinfer_status split(lowering *L, int x, int sizes, int64_t axis, int parts, const char *what, int *outs) {
    for (int k = 0; k < parts; k++) {
        char vn[160];
        snprintf(vn, sizeof vn, "%s_%d", what, k);
        CINFER_TRY(new_value(L, vn, &outs[k]));
    }
    graph_node *n = NULL;
    const int ins[2] = {x, sizes};
    CINFER_TRY(emit(L, "Split", ins, 2, outs, parts, &n));
    return graph_node_add_int_attr(n, "axis", axis);
}

/* ---- what is known of a value before shapes are inferred ---- */

static int producer_of(const graph *g, int v) { return v >= 0 ? g->values[v].producer : -1; }

/* The rank of value v as far as the file tells it (value_info, inputs, constants), else followed back through the
 * ops whose output rank follows from their inputs'; -1 when unknown. The contrib masks and position ids come in
 * several ranks that mean different things, and the rank decides the lowering. */
static int static_rank(const graph *g, int v, int depth) {
    if (v < 0 || depth > 32) return -1;
    const graph_value *gv = &g->values[v];
    if (gv->kind == VALUE_CONSTANT) return gv->constant.ndim;
    if (gv->ndim >= 0) return gv->ndim;
    int p = producer_of(g, v);
    if (p < 0) return -1;
    const graph_node *n = &g->nodes[p];
    const char *op = n->op_type;
    if (!strcmp(n->domain, CONTRIB_DOMAIN)) {
        if (!strcmp(op, "EmbedLayerNormalization") && n->num_outputs > 1 && n->outputs[1] == v) return 1;
        return n->num_inputs > 0 ? static_rank(g, n->inputs[0], depth + 1) : -1;
    }
    static const char *const same_rank[] = {"Cast", "Identity", "Not", "Neg", "Abs", "Relu", "Sigmoid", "Tanh",
                                            "Softmax", "Clip", "Gelu", "Erf", "Sqrt", "Exp", "Log", "Transpose",
                                            "LayerNormalization", "CumSum", NULL};
    for (const char *const *s = same_rank; *s; s++)
        if (!strcmp(op, *s)) return n->num_inputs > 0 ? static_rank(g, n->inputs[0], depth + 1) : -1;
    static const char *const broadcast[] = {"Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "And", "Or",
                                            "Where", "Pow", "MatMul", NULL};
    for (const char *const *s = broadcast; *s; s++)
        if (!strcmp(op, *s)) {
            int r = 0;
            for (int k = 0; k < n->num_inputs; k++) {
                int rk = static_rank(g, n->inputs[k], depth + 1);
                if (rk < 0) return -1;
                if (rk > r) r = rk;
            }
            return r;
        }
    if ((!strcmp(op, "Reshape") || !strcmp(op, "Expand")) && n->num_inputs > 1 && n->inputs[1] >= 0 &&
        g->values[n->inputs[1]].kind == VALUE_CONSTANT)
        return (int)tensor_numel(&g->values[n->inputs[1]].constant);
    if ((!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze")) && n->num_inputs > 1 && n->inputs[1] >= 0 &&
        g->values[n->inputs[1]].kind == VALUE_CONSTANT) {
        int r = static_rank(g, n->inputs[0], depth + 1);
        int k = (int)tensor_numel(&g->values[n->inputs[1]].constant);
        return r < 0 ? -1 : !strcmp(op, "Unsqueeze") ? r + k : r - k;
    }
    if (!strcmp(op, "Gather") && n->num_inputs > 1) {
        int r = static_rank(g, n->inputs[0], depth + 1), ri = static_rank(g, n->inputs[1], depth + 1);
        return r < 0 || ri < 0 ? -1 : r - 1 + ri;
    }
    return -1;
}

static cinfer_status require_rank(const lowering *L, int k, const char *what, int *rank) {
    *rank = static_rank(L->g, L->in[k], 0);
    if (*rank < 0)
        return LERR(L, CINFER_ERR_UNSUPPORTED, "cannot tell the rank of input %d (%s, value '%s') at load, and its "
                    "forms differ by rank: give its shape in the model's value_info", k, what,
                    L->g->values[L->in[k]].name);
    return CINFER_OK;
}

/* ---- activations ---- */

static cinfer_status lower_gelu(lowering *L) {
    static const char *const known[] = {NULL};
    CINFER_TRY(check_attrs(L, known));
    return emit(L, "Gelu", L->in, 1, L->out, 1, NULL);
}

/* BiasGelu(A, B) = Gelu(A + B); FastGelu(X, bias?) = the tanh-form Gelu of X (+ bias). */
static cinfer_status lower_bias_gelu(lowering *L, bool tanh_form) {
    static const char *const known[] = {NULL};
    CINFER_TRY(check_attrs(L, known));
    int x = L->in[0];
    if (has_in(L, 1)) CINFER_TRY(op2(L, "Add", x, L->in[1], "biased", &x));
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "Gelu", &x, 1, L->out, 1, &n));
    return tanh_form ? add_string_attr(n, "approximate", "tanh") : CINFER_OK;
}

/* QuickGelu: x * sigmoid(alpha * x), which is ONNX Swish with the same alpha. */
static cinfer_status lower_quick_gelu(lowering *L) {
    static const char *const known[] = {"alpha", NULL};
    CINFER_TRY(check_attrs(L, known));
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "Swish", L->in, 1, L->out, 1, &n));
    return add_float_attr(n, "alpha", graph_attr_float(src(L), "alpha", 1.702f));
}

/* BiasAdd(X, bias, skip) = X + bias + skip. */
static cinfer_status lower_bias_add(lowering *L) {
    static const char *const known[] = {NULL};
    CINFER_TRY(check_attrs(L, known));
    int s;
    CINFER_TRY(op2(L, "Add", L->in[0], L->in[1], "biased", &s));
    const int ins[2] = {s, L->in[2]};
    return emit(L, "Add", ins, 2, L->out, 1, NULL);
}

/* ---- normalisations ---- */

/* input + skip (+ bias), written to output `sum_out` when that is used (input_skip_bias_sum). */
static cinfer_status skip_sum(lowering *L, int bias_in, int sum_out, int *sum) {
    bool bias = has_in(L, bias_in), keep = out_used(L, sum_out);
    if (!bias && keep) {
        const int ins[2] = {L->in[0], L->in[1]};
        *sum = L->out[sum_out];
        return emit(L, "Add", ins, 2, sum, 1, NULL);
    }
    CINFER_TRY(op2(L, "Add", L->in[0], L->in[1], "skip_sum", sum));
    if (!bias) return CINFER_OK;
    const int ins[2] = {*sum, L->in[bias_in]};
    if (keep) {
        *sum = L->out[sum_out];
        return emit(L, "Add", ins, 2, sum, 1, NULL);
    }
    return emit1(L, "Add", ins, 2, "bias_sum", sum, NULL);
}

/* SkipLayerNormalization(input, skip, gamma, beta?, bias?) -> (output, mean?, inv_std_var?, input_skip_bias_sum?):
 * LayerNormalization over the last axis of input + skip (+ bias); mean and inv_std_var are LayerNormalization's own. */
static cinfer_status lower_skip_layer_norm(lowering *L) {
    static const char *const known[] = {"epsilon", NULL};
    CINFER_TRY(check_attrs(L, known));
    int sum;
    CINFER_TRY(skip_sum(L, 4, 3, &sum));
    const int ins[3] = {sum, L->in[2], has_in(L, 3) ? L->in[3] : -1};
    int outs[3] = {L->out[0], out_used(L, 1) ? L->out[1] : -1, out_used(L, 2) ? L->out[2] : -1};
    int nout = outs[2] >= 0 ? 3 : outs[1] >= 0 ? 2 : 1;
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "LayerNormalization", ins, has_in(L, 3) ? 3 : 2, outs, nout, &n));
    CINFER_TRY(graph_node_add_int_attr(n, "axis", -1));
    return add_float_attr(n, "epsilon", graph_attr_float(src(L), "epsilon", 1e-12f));
}

/* SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) -> (output, mean, inv_std_var, input_skip_bias_sum?):
 * RMSNormalization over the last axis of input + skip (+ bias). */
static cinfer_status lower_skip_rms_norm(lowering *L) {
    static const char *const known[] = {"epsilon", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(refuse_output(L, 1, "mean", "a training output RMS normalisation has no use for"));
    CINFER_TRY(refuse_output(L, 2, "inv_std_var", "a training output; RMSNormalization does not give it"));
    int sum;
    CINFER_TRY(skip_sum(L, 3, 3, &sum));
    const int ins[2] = {sum, L->in[2]};
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "RMSNormalization", ins, 2, L->out, 1, &n));
    CINFER_TRY(graph_node_add_int_attr(n, "axis", -1));
    return add_float_attr(n, "epsilon", graph_attr_float(src(L), "epsilon", 1e-12f));
}

/* SimplifiedLayerNormalization(X, scale) (onnxruntime's, default domain): RMSNormalization with the same attributes. */
static cinfer_status lower_rms_norm(lowering *L) {
    static const char *const known[] = {"axis", "epsilon", "stash_type", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(refuse_output(L, 1, "inv_std_var", "a training output; RMSNormalization does not give it"));
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "RMSNormalization", L->in, 2, L->out, 1, &n));
    CINFER_TRY(graph_node_add_int_attr(n, "axis", graph_attr_int(src(L), "axis", -1)));
    CINFER_TRY(add_float_attr(n, "epsilon", graph_attr_float(src(L), "epsilon", 1e-5f)));
    return graph_node_add_int_attr(n, "stash_type", graph_attr_int(src(L), "stash_type", 1));
}

/* EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding, segment_embedding?, gamma,
 * beta, mask?, position_ids?) -> (output, mask_index?, embedding_sum?):
 * LayerNormalization(word[ids] + position[pos] + segment[segment_ids]); positions default to 0..S-1;
 * mask_index is the count of non-zero mask entries of each row. */
static cinfer_status lower_embed_layer_norm(lowering *L) {
    static const char *const known[] = {"epsilon", "mask_index_type", NULL};
    CINFER_TRY(check_attrs(L, known));
    int ids = L->in[0], word, pos_rows, pos, sum;
    const int gw[2] = {L->in[2], ids};
    CINFER_TRY(emit1(L, "Gather", gw, 2, "word", &word, NULL));
    if (has_in(L, 8)) {
        const int gp[2] = {L->in[3], L->in[8]};
        CINFER_TRY(emit1(L, "Gather", gp, 2, "position", &pos, NULL));
    } else { /* rows 0..S-1 of the position table, broadcast over the batch */
        int seq, zero, axis0;
        CINFER_TRY(shape_part(L, ids, 1, 2, "seq_len", &seq));
        const int64_t z = 0;
        CINFER_TRY(const_ints(L, "zero", &z, 1, &zero));
        CINFER_TRY(const_ints(L, "axis0", &z, 1, &axis0));
        const int sl[4] = {L->in[3], zero, seq, axis0};
        CINFER_TRY(emit1(L, "Slice", sl, 4, "position", &pos_rows, NULL));
        pos = pos_rows;
    }
    CINFER_TRY(op2(L, "Add", word, pos, "word_position", &sum));
    if (has_in(L, 1) && has_in(L, 4)) {
        int seg;
        const int gs[2] = {L->in[4], L->in[1]};
        CINFER_TRY(emit1(L, "Gather", gs, 2, "segment", &seg, NULL));
        if (out_used(L, 2)) {
            const int ins[2] = {sum, seg};
            int s2 = L->out[2];
            CINFER_TRY(emit(L, "Add", ins, 2, &s2, 1, NULL));
            sum = s2;
        } else {
            CINFER_TRY(op2(L, "Add", sum, seg, "embedding_sum", &sum));
        }
    } else if (has_in(L, 1) != has_in(L, 4)) {
        return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "segment_ids and segment_embedding must be given together");
    } else if (out_used(L, 2)) {
        const int ins[1] = {sum};
        CINFER_TRY(emit(L, "Identity", ins, 1, &L->out[2], 1, NULL));
    }
    const int ln[3] = {sum, L->in[5], L->in[6]};
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "LayerNormalization", ln, 3, L->out, 1, &n));
    CINFER_TRY(graph_node_add_int_attr(n, "axis", -1));
    CINFER_TRY(add_float_attr(n, "epsilon", graph_attr_float(src(L), "epsilon", 1e-12f)));
    if (out_used(L, 1)) {
        if (!has_in(L, 7))
            return LERR(L, CINFER_ERR_UNSUPPORTED, "%s", "output 1 (mask_index) is used but no mask (input 7) is given");
        int nz, zero, counted, axes;
        CINFER_TRY(const_scalar_i64(L, "mask_zero", 0, &zero));
        int m64;
        CINFER_TRY(cast_to(L, L->in[7], CINFER_DTYPE_INT64, "mask_i64", &m64));
        CINFER_TRY(op2(L, "Equal", m64, zero, "mask_is_zero", &nz));
        int keep;
        CINFER_TRY(emit1(L, "Not", &nz, 1, "mask_is_set", &keep, NULL));
        CINFER_TRY(cast_to(L, keep, CINFER_DTYPE_INT32, "mask_ones", &counted));
        const int64_t ax = 1;
        CINFER_TRY(const_ints(L, "mask_axis", &ax, 1, &axes));
        const int rs[2] = {counted, axes};
        CINFER_TRY(emit(L, "ReduceSum", rs, 2, &L->out[1], 1, &n));
        CINFER_TRY(graph_node_add_int_attr(n, "keepdims", 0));
    }
    return CINFER_OK;
}

/* ---- attention ---- */

/* Float32 additive attention mask, broadcastable to [B, heads, S, T], from onnxruntime's mask forms (input k):
 * a raw mask [B, T] or [B, S, T] (entries > 0 attend, the rest get mask_filter_value), or 1-D key lengths [B]
 * (right padding: keys at or past the length are masked) or [2B] (exclusive ends then inclusive starts: left
 * padding). `batch` and `keys` are 1-D int64 values holding B and T. */
static cinfer_status additive_mask(lowering *L, int k, int batch, int keys, float filter, int *result) {
    int rank;
    CINFER_TRY(require_rank(L, k, k == 3 ? "mask_index" : "key_padding_mask", &rank));
    int m = L->in[k], fz, ff;
    CINFER_TRY(const_scalar_f32(L, "mask_zero", 0.0f, &fz));
    CINFER_TRY(const_scalar_f32(L, "mask_filter", filter, &ff));
    if (rank == 2 || rank == 3) {
        int mf, attend, add, shape, one, minus1, tail;
        CINFER_TRY(cast_to(L, m, CINFER_DTYPE_FLOAT, "mask_float", &mf));
        CINFER_TRY(op2(L, "Greater", mf, fz, "mask_attend", &attend));
        const int w[3] = {attend, fz, ff};
        CINFER_TRY(emit1(L, "Where", w, 3, "mask_additive", &add, NULL));
        /* [B, 1, -1, T]: [B, T] -> [B, 1, 1, T], [B, S, T] -> [B, 1, S, T] */
        const int64_t o = 1, mo = -1;
        CINFER_TRY(const_ints(L, "mask_one", &o, 1, &one));
        CINFER_TRY(const_ints(L, "mask_any", &mo, 1, &minus1));
        CINFER_TRY(shape_part(L, m, -1, INT64_MAX, "mask_len", &tail));
        const int parts[4] = {batch, one, minus1, tail};
        graph_node *n = NULL;
        CINFER_TRY(emit1(L, "Concat", parts, 4, "mask_shape", &shape, &n));
        CINFER_TRY(graph_node_add_int_attr(n, "axis", 0));
        return op2(L, "Reshape", add, shape, "mask_4d", result);
    }
    if (rank != 1)
        return LERR(L, CINFER_ERR_UNSUPPORTED, "input %d (mask) has rank %d; the supported forms are [B], [2B], [B, T] "
                    "and [B, S, T]", k, rank);
    /* ends = m[0:B]; starts = (m[B:] followed by B zeros)[0:B]: zeros for the [B] form, m[B:2B] for the [2B] form */
    int m64, zero1, big, ends, rest, zeros, padded, starts, axis0;
    CINFER_TRY(cast_to(L, m, CINFER_DTYPE_INT64, "mask_i64", &m64));
    const int64_t z = 0, huge = INT64_MAX;
    CINFER_TRY(const_ints(L, "mask_start0", &z, 1, &zero1));
    CINFER_TRY(const_ints(L, "mask_axis0", &z, 1, &axis0));
    CINFER_TRY(const_ints(L, "mask_to_end", &huge, 1, &big));
    const int s1[4] = {m64, zero1, batch, axis0};
    CINFER_TRY(emit1(L, "Slice", s1, 4, "mask_ends", &ends, NULL));
    const int s2[4] = {m64, batch, big, axis0};
    CINFER_TRY(emit1(L, "Slice", s2, 4, "mask_rest", &rest, NULL));
    graph_node *n = NULL;
    CINFER_TRY(emit1(L, "ConstantOfShape", &batch, 1, "mask_zeros", &zeros, &n));
    {
        graph_attr *a = NULL;
        CINFER_TRY(graph_node_add_attr(n, "value", &a));
        a->type = ATTR_TENSOR;
        a->t = (tensor){.dtype = CINFER_DTYPE_INT64, .ndim = 1, .dims = {1}};
        a->t.data = core_aligned_alloc(sizeof(int64_t));
        if (!a->t.data) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        *(int64_t *)a->t.data = 0;
    }
    const int cc[2] = {rest, zeros};
    CINFER_TRY(emit1(L, "Concat", cc, 2, "mask_rest_padded", &padded, &n));
    CINFER_TRY(graph_node_add_int_attr(n, "axis", 0));
    const int s3[4] = {padded, zero1, batch, axis0};
    CINFER_TRY(emit1(L, "Slice", s3, 4, "mask_starts", &starts, NULL));
    /* key j attends when starts[b] <= j < ends[b] */
    int t0, t1, keys_scalar, range, e2, s2d, lt, ge, ok, add, one_axis;
    CINFER_TRY(const_scalar_i64(L, "range_start", 0, &t0));
    CINFER_TRY(const_scalar_i64(L, "range_step", 1, &t1));
    CINFER_TRY(const_ints(L, "keys_axis", &z, 1, &one_axis));
    CINFER_TRY(op2(L, "Squeeze", keys, one_axis, "keys_scalar", &keys_scalar));
    const int rg[3] = {t0, keys_scalar, t1};
    CINFER_TRY(emit1(L, "Range", rg, 3, "key_positions", &range, NULL));
    const int64_t ax1 = 1;
    CINFER_TRY(unsqueeze(L, ends, &ax1, 1, "mask_ends_2d", &e2));
    CINFER_TRY(unsqueeze(L, starts, &ax1, 1, "mask_starts_2d", &s2d));
    CINFER_TRY(op2(L, "Less", range, e2, "before_end", &lt));
    CINFER_TRY(op2(L, "GreaterOrEqual", range, s2d, "from_start", &ge));
    CINFER_TRY(op2(L, "And", lt, ge, "mask_attend", &ok));
    const int w[3] = {ok, fz, ff};
    CINFER_TRY(emit1(L, "Where", w, 3, "mask_additive", &add, NULL));
    const int64_t axes[2] = {1, 2};
    return unsqueeze(L, add, axes, 2, "mask_4d", result);
}

/* The attn_mask input for ONNX Attention: the additive mask (if any) plus attention_bias (input `bias_in`, if any,
 * cast to float32). -1 when there is neither. */
static cinfer_status attention_mask(lowering *L, int mask_in, int bias_in, int batch, int keys, float filter,
                                    int *result) {
    *result = -1;
    if (has_in(L, mask_in)) CINFER_TRY(additive_mask(L, mask_in, batch, keys, filter, result));
    if (has_in(L, bias_in)) {
        int b;
        CINFER_TRY(cast_to(L, L->in[bias_in], CINFER_DTYPE_FLOAT, "attention_bias_float", &b));
        if (*result < 0) *result = b;
        else CINFER_TRY(op2(L, "Add", *result, b, "mask_and_bias", result));
    }
    return CINFER_OK;
}

/* Appends ONNX Attention(q, k, v, mask) with 3-D inputs (heads from the attributes) or 4-D ones (heads = -1);
 * outs: output, present_key, present_value (-1 where not wanted). */
static cinfer_status emit_attention(lowering *L, int q, int k, int v, int mask, int64_t q_heads, int64_t kv_heads,
                                    bool causal, const int *outs) {
    const int ins[4] = {q, k, v, mask};
    int nout = outs[2] >= 0 ? 3 : outs[1] >= 0 ? 2 : 1;
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "Attention", ins, mask >= 0 ? 4 : 3, outs, nout, &n));
    if (q_heads > 0) {
        CINFER_TRY(graph_node_add_int_attr(n, "q_num_heads", q_heads));
        CINFER_TRY(graph_node_add_int_attr(n, "kv_num_heads", kv_heads));
    }
    if (causal) CINFER_TRY(graph_node_add_int_attr(n, "is_causal", 1));
    CINFER_TRY(copy_attr(L, n, "scale", "scale"));
    return copy_attr(L, n, "softcap", "softcap");
}

static cinfer_status positive_attr(const lowering *L, const char *attr, int64_t *v) {
    *v = graph_attr_int(src(L), attr, 0);
    if (*v <= 0) return LERR(L, CINFER_ERR_INVALID_MODEL, "attribute '%s' must be positive, got %lld", attr, (long long)*v);
    return CINFER_OK;
}

/* Attention(input, weights, bias?, mask_index?, past?, attention_bias?, past_sequence_length?) -> (output, present?):
 * [Q K V] = input . weights (+ bias), split by qkv_hidden_sizes (equal thirds by default), then ONNX Attention with
 * num_heads for Q, K and V; unidirectional is causal; present = [K; V] as [2, B, heads, S, head_size]. */
static cinfer_status lower_attention(lowering *L) {
    static const char *const known[] = {"num_heads", "scale", "mask_filter_value", "unidirectional", "qkv_hidden_sizes",
                                        "do_rotary", "past_present_share_buffer", "rotary_embedding_dim", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(expect_int_attr(L, "do_rotary", 0, 0, "rotary embedding inside Attention"));
    CINFER_TRY(expect_int_attr(L, "past_present_share_buffer", 0, 0, "a shared KV-cache buffer"));
    CINFER_TRY(expect_int_attr(L, "unidirectional", 0, 1, "it is 0 or 1"));
    CINFER_TRY(refuse_input(L, 4, "past", "the KV cache (past state) is not supported; export without past"));
    CINFER_TRY(refuse_input(L, 6, "past_sequence_length", "a shared KV-cache buffer"));
    int64_t heads;
    CINFER_TRY(positive_attr(L, "num_heads", &heads));
    int64_t sizes[3];
    size_t nq = 0;
    const int64_t *qkv = graph_attr_ints(src(L), "qkv_hidden_sizes", &nq);
    const graph_value *w = &L->g->values[L->in[1]];
    if (qkv) {
        if (nq != 3)
            return LERR(L, CINFER_ERR_INVALID_MODEL, "attribute 'qkv_hidden_sizes' has %zu values, expected 3", nq);
        memcpy(sizes, qkv, sizeof sizes);
    } else {
        int64_t width = w->kind == VALUE_CONSTANT ? w->constant.dims[1] : w->ndim == 2 ? w->dims[1] : -1;
        if (width <= 0 || width % 3 != 0)
            return LERR(L, CINFER_ERR_UNSUPPORTED, "cannot split weights '%s' into Q, K and V: its width %lld is not "
                        "known at load or not a multiple of 3 (give qkv_hidden_sizes)", w->name, (long long)width);
        sizes[0] = sizes[1] = sizes[2] = width / 3;
    }
    for (int i = 0; i < 3; i++)
        if (sizes[i] <= 0 || sizes[i] % heads != 0)
            return LERR(L, CINFER_ERR_INVALID_MODEL, "hidden size %lld of %c is not a positive multiple of num_heads "
                        "%lld", (long long)sizes[i], "QKV"[i], (long long)heads);
    int proj, split_sizes, qkv_parts[3];
    const int mm[2] = {L->in[0], L->in[1]};
    CINFER_TRY(emit1(L, "MatMul", mm, 2, "qkv", &proj, NULL));
    if (has_in(L, 2)) CINFER_TRY(op2(L, "Add", proj, L->in[2], "qkv_biased", &proj));
    CINFER_TRY(const_ints(L, "qkv_sizes", sizes, 3, &split_sizes));
    CINFER_TRY(split(L, proj, split_sizes, 2, 3, "qkv", qkv_parts));
    int batch = -1, keys = -1, mask;
    if (has_in(L, 3)) {
        CINFER_TRY(shape_part(L, L->in[0], 0, 1, "batch", &batch));
        CINFER_TRY(shape_part(L, L->in[0], 1, 2, "keys", &keys));
    }
    CINFER_TRY(attention_mask(L, 3, 5, batch, keys, graph_attr_float(src(L), "mask_filter_value", -10000.0f), &mask));
    bool present = out_used(L, 1);
    if (present && sizes[1] != sizes[2])
        return LERR(L, CINFER_ERR_UNSUPPORTED, "output 1 (present) stacks K and V, whose hidden sizes differ (%lld, %lld)",
                    (long long)sizes[1], (long long)sizes[2]);
    int outs[3] = {L->out[0], -1, -1};
    if (present) {
        CINFER_TRY(new_value(L, "present_key", &outs[1]));
        CINFER_TRY(new_value(L, "present_value", &outs[2]));
    }
    CINFER_TRY(emit_attention(L, qkv_parts[0], qkv_parts[1], qkv_parts[2], mask, heads, heads,
                              graph_attr_int(src(L), "unidirectional", 0) != 0, outs));
    if (present) {
        int k5, v5;
        const int64_t ax0 = 0;
        CINFER_TRY(unsqueeze(L, outs[1], &ax0, 1, "present_key_5d", &k5));
        CINFER_TRY(unsqueeze(L, outs[2], &ax0, 1, "present_value_5d", &v5));
        const int cc[2] = {k5, v5};
        graph_node *n = NULL;
        CINFER_TRY(emit(L, "Concat", cc, 2, &L->out[1], 1, &n));
        CINFER_TRY(graph_node_add_int_attr(n, "axis", 0));
    }
    return CINFER_OK;
}

/* Packed [B, S, N, parts, H] -> `parts` tensors [B, S, N * H]. */
static cinfer_status unpack_heads(lowering *L, int packed, int parts, const char *what, int *outs) {
    int sizes, pieces[3];
    const int64_t ones[3] = {1, 1, 1};
    CINFER_TRY(const_ints(L, "packed_sizes", ones, parts, &sizes));
    CINFER_TRY(split(L, packed, sizes, 3, parts, what, pieces));
    const int64_t flat[3] = {0, 0, -1};
    for (int i = 0; i < parts; i++) {
        char vn[64];
        snprintf(vn, sizeof vn, "%s_flat_%d", what, i);
        CINFER_TRY(reshape(L, pieces[i], flat, 3, vn, &outs[i]));
    }
    return CINFER_OK;
}

/* MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?, attention_bias?, past_key?, past_value?, ...)
 * -> (output, present_key?, present_value?, qk?): Q, K, V as given 3-D (bias added in thirds), packed QKV
 * [B, S, N, 3, H], packed KV [B, L, N, 2, H], or K and V already split into heads [B, N, L, H]. */
static cinfer_status lower_multi_head_attention(lowering *L) {
    static const char *const known[] = {"num_heads", "scale", "mask_filter_value", "unidirectional", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(expect_int_attr(L, "unidirectional", 0, 1, "it is 0 or 1"));
    CINFER_TRY(refuse_input(L, 6, "past_key", "the KV cache is not supported; export without past"));
    CINFER_TRY(refuse_input(L, 7, "past_value", "the KV cache is not supported; export without past"));
    CINFER_TRY(refuse_input(L, 8, "past_sequence_length", "a shared KV-cache buffer"));
    CINFER_TRY(refuse_input(L, 9, "cache_indirection", "beam-search cache indirection"));
    CINFER_TRY(refuse_output(L, 3, "qk", "the attention probabilities are not given"));
    int64_t heads;
    CINFER_TRY(positive_attr(L, "num_heads", &heads));
    int qrank, krank = 0;
    CINFER_TRY(require_rank(L, 0, "query", &qrank));
    if (has_in(L, 1)) CINFER_TRY(require_rank(L, 1, "key", &krank));
    int q = L->in[0], k = -1, v = -1;
    bool bnsh = false;
    if (qrank == 5) { /* packed QKV */
        if (has_in(L, 1) || has_in(L, 2))
            return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "a packed QKV query [B, S, N, 3, H] takes no key or value");
        CINFER_TRY(refuse_input(L, 3, "bias", "with packed QKV"));
        int parts[3];
        CINFER_TRY(unpack_heads(L, q, 3, "qkv", parts));
        q = parts[0], k = parts[1], v = parts[2];
    } else if (qrank != 3) {
        return LERR(L, CINFER_ERR_INVALID_MODEL, "query has rank %d, expected 3 or 5 (packed QKV)", qrank);
    } else if (krank == 5) { /* packed KV */
        if (has_in(L, 2))
            return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "a packed KV key [B, L, N, 2, H] takes no value");
        CINFER_TRY(refuse_input(L, 3, "bias", "with packed KV"));
        int parts[2];
        CINFER_TRY(unpack_heads(L, L->in[1], 2, "kv", parts));
        k = parts[0], v = parts[1];
    } else if (krank == 4) { /* K and V already [B, N, L, H] (cross attention with a computed cache) */
        CINFER_TRY(refuse_input(L, 3, "bias", "with key and value given as [B, N, L, H]"));
        if (!has_in(L, 2)) return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "a 4-D key needs a 4-D value");
        k = L->in[1], v = L->in[2];
        bnsh = true;
    } else if (krank == 3) {
        if (!has_in(L, 2)) return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "key is given without value");
        k = L->in[1], v = L->in[2];
        if (has_in(L, 3)) { /* bias = [bias_q, bias_k, bias_v], split by the widths of Q, K and V */
            int wq, wk, wv, widths, b[3];
            CINFER_TRY(shape_part(L, q, 2, 3, "q_width", &wq));
            CINFER_TRY(shape_part(L, k, 2, 3, "k_width", &wk));
            CINFER_TRY(shape_part(L, v, 2, 3, "v_width", &wv));
            const int cc[3] = {wq, wk, wv};
            graph_node *n = NULL;
            CINFER_TRY(emit1(L, "Concat", cc, 3, "bias_widths", &widths, &n));
            CINFER_TRY(graph_node_add_int_attr(n, "axis", 0));
            CINFER_TRY(split(L, L->in[3], widths, 0, 3, "bias", b));
            CINFER_TRY(op2(L, "Add", q, b[0], "q_biased", &q));
            CINFER_TRY(op2(L, "Add", k, b[1], "k_biased", &k));
            CINFER_TRY(op2(L, "Add", v, b[2], "v_biased", &v));
        }
    } else {
        return LERR(L, CINFER_ERR_UNSUPPORTED, "%s", "query without key (self attention with past) is not supported: "
                    "give key and value, or packed QKV");
    }
    int batch = -1, keys = -1, mask;
    if (has_in(L, 4)) {
        CINFER_TRY(shape_part(L, q, 0, 1, "batch", &batch));
        CINFER_TRY(shape_part(L, k, bnsh ? 2 : 1, bnsh ? 3 : 2, "keys", &keys));
    }
    CINFER_TRY(attention_mask(L, 4, 5, batch, keys, graph_attr_float(src(L), "mask_filter_value", -10000.0f), &mask));
    bool causal = graph_attr_int(src(L), "unidirectional", 0) != 0;
    int outs[3] = {L->out[0], out_used(L, 1) ? L->out[1] : -1, out_used(L, 2) ? L->out[2] : -1};
    if (!bnsh) return emit_attention(L, q, k, v, mask, heads, heads, causal, outs);
    /* 4-D Attention: Q [B, S, N*H] -> [B, N, S, H]; the output back to [B, S, N*Hv] */
    int q4, qt, y4, yt;
    const int64_t split_shape[4] = {0, 0, heads, -1}, perm[4] = {0, 2, 1, 3}, flat[3] = {0, 0, -1};
    CINFER_TRY(reshape(L, q, split_shape, 4, "q_heads", &q4));
    CINFER_TRY(transpose(L, q4, perm, 4, "q_bnsh", &qt));
    CINFER_TRY(new_value(L, "output_bnsh", &y4));
    const int o4[3] = {y4, outs[1], outs[2]};
    CINFER_TRY(emit_attention(L, qt, k, v, mask, 0, 0, causal, o4));
    CINFER_TRY(transpose(L, y4, perm, 4, "output_bsnh", &yt));
    int sh;
    CINFER_TRY(const_ints(L, "output_shape", flat, 3, &sh));
    const int rs[2] = {yt, sh};
    return emit(L, "Reshape", rs, 2, &L->out[0], 1, NULL);
}

/* GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k, total_sequence_length, ...) for the
 * prompt (no KV cache): ONNX Attention with num_heads query heads over kv_num_heads key/value heads, causal by
 * default, keys at or past seqlens_k[b] + 1 masked; present_key/present_value are the new K and V [B, kv, S, H]. */
static cinfer_status lower_group_query_attention(lowering *L) {
    static const char *const known[] = {"num_heads", "kv_num_heads", "scale", "softcap", "local_window_size",
                                        "do_rotary", "rotary_interleaved", "causal", "qk_output", "smooth_softmax",
                                        "k_quant_type", "v_quant_type", "kv_cache_bit_width", "sliding_window_cache",
                                        "qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(expect_int_attr(L, "local_window_size", -1, -1, "local (sliding-window) attention"));
    CINFER_TRY(expect_int_attr(L, "sliding_window_cache", 0, 0, "a windowed KV cache"));
    CINFER_TRY(expect_int_attr(L, "do_rotary", 0, 0, "rotary embedding inside GroupQueryAttention"));
    CINFER_TRY(expect_int_attr(L, "qk_output", 0, 0, "the QK output"));
    CINFER_TRY(expect_int_attr(L, "smooth_softmax", -1, 0, "smooth softmax"));
    CINFER_TRY(expect_int_attr(L, "causal", 1, 0, "it is 0 or 1"));
    for (int i = 0; i < 2; i++) {
        const char *attr = i ? "v_quant_type" : "k_quant_type", *q = graph_attr_string(src(L), attr, "NONE");
        if (strcmp(q, "NONE") != 0)
            return LERR(L, CINFER_ERR_UNSUPPORTED, "attribute '%s' = '%s' is not supported (a quantized KV cache)",
                        attr, q);
    }
    static const char *const later[][2] = {
        {"past_key", "the KV cache is not supported (prompt only): export without past"},
        {"past_value", "the KV cache is not supported (prompt only): export without past"},
    };
    CINFER_TRY(refuse_input(L, 3, later[0][0], later[0][1]));
    CINFER_TRY(refuse_input(L, 4, later[1][0], later[1][1]));
    CINFER_TRY(refuse_input(L, 7, "cos_cache", "rotary embedding inside GroupQueryAttention"));
    CINFER_TRY(refuse_input(L, 8, "sin_cache", "rotary embedding inside GroupQueryAttention"));
    CINFER_TRY(refuse_input(L, 9, "position_ids", "rotary embedding inside GroupQueryAttention"));
    CINFER_TRY(refuse_input(L, 11, "head_sink", "per-head softmax sinks"));
    CINFER_TRY(refuse_input(L, 12, "k_scale", "a quantized KV cache"));
    CINFER_TRY(refuse_input(L, 13, "v_scale", "a quantized KV cache"));
    CINFER_TRY(refuse_input(L, 14, "q_norm_weight", "per-head Q/K RMS normalisation"));
    CINFER_TRY(refuse_input(L, 15, "k_norm_weight", "per-head Q/K RMS normalisation"));
    CINFER_TRY(refuse_input(L, 16, "query_seqlens", "right-padded query chunks"));
    CINFER_TRY(refuse_output(L, 3, "output_qk", "the QK values are not given"));
    if (!has_in(L, 5)) return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "input 5 (seqlens_k) is required");
    int64_t heads, kv_heads;
    CINFER_TRY(positive_attr(L, "num_heads", &heads));
    CINFER_TRY(positive_attr(L, "kv_num_heads", &kv_heads));
    if (heads % kv_heads != 0)
        return LERR(L, CINFER_ERR_INVALID_MODEL, "num_heads %lld is not a multiple of kv_num_heads %lld",
                    (long long)heads, (long long)kv_heads);
    int q = L->in[0], k, v;
    if (!has_in(L, 1) && !has_in(L, 2)) { /* packed [B, S, (N + 2 kv) H]: widths N*H, kv*H, kv*H */
        int width, parts, per_head, widths, pieces[3];
        CINFER_TRY(shape_part(L, q, 2, 3, "packed_width", &width));
        const int64_t total_heads = heads + 2 * kv_heads, mult[3] = {heads, kv_heads, kv_heads};
        CINFER_TRY(const_ints(L, "head_count", &total_heads, 1, &parts));
        CINFER_TRY(op2(L, "Div", width, parts, "head_size", &per_head));
        int m;
        CINFER_TRY(const_ints(L, "head_multiples", mult, 3, &m));
        CINFER_TRY(op2(L, "Mul", per_head, m, "packed_widths", &widths));
        CINFER_TRY(split(L, q, widths, 2, 3, "qkv", pieces));
        q = pieces[0], k = pieces[1], v = pieces[2];
    } else if (has_in(L, 1) && has_in(L, 2)) {
        k = L->in[1], v = L->in[2];
    } else {
        return LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "key and value must be given together (or neither, packed QKV)");
    }
    /* key j of batch b attends when j < seqlens_k[b] + 1 */
    int keys, keys_scalar, lens, one, total, t0, t1, range, total2d, attend, ax, mask;
    CINFER_TRY(shape_part(L, k, 1, 2, "keys", &keys));
    const int64_t zero = 0;
    CINFER_TRY(const_ints(L, "keys_axis", &zero, 1, &ax));
    CINFER_TRY(op2(L, "Squeeze", keys, ax, "keys_scalar", &keys_scalar));
    CINFER_TRY(cast_to(L, L->in[5], CINFER_DTYPE_INT64, "seqlens_i64", &lens));
    CINFER_TRY(const_scalar_i64(L, "one", 1, &one));
    CINFER_TRY(op2(L, "Add", lens, one, "total_lengths", &total));
    CINFER_TRY(const_scalar_i64(L, "range_start", 0, &t0));
    CINFER_TRY(const_scalar_i64(L, "range_step", 1, &t1));
    const int rg[3] = {t0, keys_scalar, t1};
    CINFER_TRY(emit1(L, "Range", rg, 3, "key_positions", &range, NULL));
    const int64_t ax1 = 1, axes[2] = {1, 2};
    CINFER_TRY(unsqueeze(L, total, &ax1, 1, "total_lengths_2d", &total2d));
    CINFER_TRY(op2(L, "Less", range, total2d, "key_attend", &attend));
    CINFER_TRY(unsqueeze(L, attend, axes, 2, "key_mask", &mask));
    if (has_in(L, 10)) { /* attention_bias on top: the bool mask as an additive one */
        int fz, fi, add, b;
        CINFER_TRY(const_scalar_f32(L, "mask_zero", 0.0f, &fz));
        CINFER_TRY(const_scalar_f32(L, "mask_off", -INFINITY, &fi));
        const int w[3] = {mask, fz, fi};
        CINFER_TRY(emit1(L, "Where", w, 3, "key_mask_additive", &add, NULL));
        CINFER_TRY(cast_to(L, L->in[10], CINFER_DTYPE_FLOAT, "attention_bias_float", &b));
        CINFER_TRY(op2(L, "Add", add, b, "mask_and_bias", &mask));
    }
    int outs[3] = {L->out[0], out_used(L, 1) ? L->out[1] : -1, out_used(L, 2) ? L->out[2] : -1};
    return emit_attention(L, q, k, v, mask, heads, kv_heads, graph_attr_int(src(L), "causal", 1) != 0, outs);
}

/* RotaryEmbedding (com.microsoft)(input, position_ids, cos_cache, sin_cache) -> ONNX RotaryEmbedding(input, cos_cache,
 * sin_cache, position_ids [B, S]); a position_ids of shape [1] is the offset of positions offset..offset+S-1. */
static cinfer_status lower_rotary(lowering *L) {
    static const char *const known[] = {"num_heads", "rotary_embedding_dim", "interleaved", "is_packed_batching",
                                        "scale", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(expect_int_attr(L, "is_packed_batching", 0, 0, "ragged packed batches"));
    float scale = graph_attr_float(src(L), "scale", 1.0f);
    if (scale != 1.0f)
        return LERR(L, CINFER_ERR_UNSUPPORTED, "attribute 'scale' = %g is not supported (only 1)", (double)scale);
    int xrank, prank;
    CINFER_TRY(require_rank(L, 0, "input", &xrank));
    CINFER_TRY(require_rank(L, 1, "position_ids", &prank));
    if (xrank != 3 && xrank != 4) return LERR(L, CINFER_ERR_INVALID_MODEL, "input has rank %d, expected 3 or 4", xrank);
    int pos = L->in[1];
    if (prank == 1) { /* offset + 0..S-1, the same for every batch row */
        int seq, seq_scalar, ax, off, t0, t1, range, shifted, pos2, batch, shape;
        CINFER_TRY(shape_part(L, L->in[0], xrank == 3 ? 1 : 2, xrank == 3 ? 2 : 3, "seq_len", &seq));
        const int64_t zero = 0;
        CINFER_TRY(const_ints(L, "seq_axis", &zero, 1, &ax));
        CINFER_TRY(op2(L, "Squeeze", seq, ax, "seq_scalar", &seq_scalar));
        CINFER_TRY(op2(L, "Squeeze", L->in[1], ax, "position_offset", &off));
        CINFER_TRY(const_scalar_i64(L, "range_start", 0, &t0));
        CINFER_TRY(const_scalar_i64(L, "range_step", 1, &t1));
        const int rg[3] = {t0, seq_scalar, t1};
        CINFER_TRY(emit1(L, "Range", rg, 3, "positions", &range, NULL));
        CINFER_TRY(op2(L, "Add", range, off, "positions_shifted", &shifted));
        CINFER_TRY(unsqueeze(L, shifted, &zero, 1, "positions_row", &pos2));
        CINFER_TRY(shape_part(L, L->in[0], 0, 1, "batch", &batch));
        const int cc[2] = {batch, seq};
        graph_node *n = NULL;
        CINFER_TRY(emit1(L, "Concat", cc, 2, "positions_shape", &shape, &n));
        CINFER_TRY(graph_node_add_int_attr(n, "axis", 0));
        CINFER_TRY(op2(L, "Expand", pos2, shape, "position_ids_2d", &pos));
    } else if (prank != 2) {
        return LERR(L, CINFER_ERR_INVALID_MODEL, "position_ids has rank %d, expected 1 ([1]: an offset) or 2", prank);
    }
    int64_t heads = graph_attr_int(src(L), "num_heads", 0), rot = graph_attr_int(src(L), "rotary_embedding_dim", 0);
    int64_t interleaved = graph_attr_int(src(L), "interleaved", 0);
    int x = L->in[0];
    bool via_4d = false;
    int64_t head = 0;
    if (xrank == 3 && heads <= 0) { /* heads follow from the cache width: split [B, S, D] into [B, N, S, 2 * width] */
        const graph_value *cs = &L->g->values[L->in[2]];
        int64_t width = cs->kind == VALUE_CONSTANT ? cs->constant.dims[1] : cs->ndim == 2 ? cs->dims[1] : -1;
        if (rot != 0 || width <= 0)
            return LERR(L, CINFER_ERR_UNSUPPORTED, "%s", "a 3-D input without num_heads needs the head size from a "
                        "cos_cache of known shape and no rotary_embedding_dim");
        head = 2 * width;
        via_4d = true;
        const int64_t split_shape[4] = {0, 0, -1, head}, perm[4] = {0, 2, 1, 3};
        int x4;
        CINFER_TRY(reshape(L, x, split_shape, 4, "input_heads", &x4));
        CINFER_TRY(transpose(L, x4, perm, 4, "input_bnsh", &x));
    }
    const int ins[4] = {x, L->in[2], L->in[3], pos};
    int y = L->out[0];
    if (via_4d) CINFER_TRY(new_value(L, "output_bnsh", &y));
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "RotaryEmbedding", ins, 4, &y, 1, &n));
    if (interleaved) CINFER_TRY(graph_node_add_int_attr(n, "interleaved", 1));
    if (rot) CINFER_TRY(graph_node_add_int_attr(n, "rotary_embedding_dim", rot));
    if (xrank == 3 && heads > 0) CINFER_TRY(graph_node_add_int_attr(n, "num_heads", heads));
    if (!via_4d) return CINFER_OK;
    int yt, sh;
    const int64_t perm[4] = {0, 2, 1, 3}, flat[3] = {0, 0, -1};
    CINFER_TRY(transpose(L, y, perm, 4, "output_bsnh", &yt));
    CINFER_TRY(const_ints(L, "output_shape", flat, 3, &sh));
    const int rs[2] = {yt, sh};
    return emit(L, "Reshape", rs, 2, &L->out[0], 1, NULL);
}

/* ---- quantized weights ---- */

static float load_float(const tensor *t, int64_t i) {
    switch (t->dtype) {
    case CINFER_DTYPE_FLOAT: return ((const float *)t->data)[i];
    case CINFER_DTYPE_FLOAT16: return dtype_half_to_float(((const uint16_t *)t->data)[i]);
    case CINFER_DTYPE_BFLOAT16: return dtype_bf16_to_float(((const uint16_t *)t->data)[i]);
    default: return (float)tensor_get_double(t, i);
    }
}

/* The `bits`-wide field `index` of a row packed from the low bits of each byte up. */
static unsigned packed_field(const uint8_t *row, int64_t index, int bits) {
    int64_t bit = index * bits;
    return (row[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);
}

/* MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?) with constant B: W[k, n] = (q[n, k] - zero[n, k / block]) *
 * scale[n, k / block] becomes a [K, N] constant of A's type, then A . W (+ bias). */
static cinfer_status lower_matmul_nbits(lowering *L) {
    static const char *const known[] = {"K", "N", "bits", "block_size", "accuracy_level", "weight_prepacked", NULL};
    CINFER_TRY(check_attrs(L, known));
    CINFER_TRY(expect_int_attr(L, "weight_prepacked", 0, 0, "weights prepacked for a GPU kernel"));
    CINFER_TRY(refuse_input(L, 4, "g_idx", "act-order group indices (deprecated)"));
    int64_t K, N, block;
    CINFER_TRY(positive_attr(L, "K", &K));
    CINFER_TRY(positive_attr(L, "N", &N));
    CINFER_TRY(positive_attr(L, "block_size", &block));
    int64_t bits = graph_attr_int(src(L), "bits", 4);
    if (bits != 2 && bits != 4 && bits != 8)
        return LERR(L, CINFER_ERR_UNSUPPORTED, "attribute 'bits' = %lld is not supported (2, 4 or 8)", (long long)bits);
    if (block < 16 || (block & (block - 1)) != 0)
        return LERR(L, CINFER_ERR_INVALID_MODEL, "block_size %lld is not a power of two >= 16", (long long)block);
    const graph_value *bv = &L->g->values[L->in[1]], *sv = &L->g->values[L->in[2]];
    const graph_value *zv = has_in(L, 3) ? &L->g->values[L->in[3]] : NULL;
    if (bv->kind != VALUE_CONSTANT || sv->kind != VALUE_CONSTANT || (zv && zv->kind != VALUE_CONSTANT))
        return LERR(L, CINFER_ERR_UNSUPPORTED, "%s", "B, scales and zero_points must be initializers (weights computed "
                    "at run time are not supported)");
    const tensor *B = &bv->constant, *S = &sv->constant, *Z = zv ? &zv->constant : NULL;
    int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
    if (B->dtype != CINFER_DTYPE_UINT8 || tensor_numel(B) != N * blocks * blob)
        return LERR(L, CINFER_ERR_INVALID_MODEL, "B '%s' must be uint8 [N=%lld, %lld blocks, %lld bytes], got %s with %lld "
                    "elements", bv->name, (long long)N, (long long)blocks, (long long)blob, cinfer_dtype_name(B->dtype),
                    (long long)tensor_numel(B));
    if (!dtype_is_float(S->dtype) || S->dtype == CINFER_DTYPE_DOUBLE || tensor_numel(S) != N * blocks)
        return LERR(L, CINFER_ERR_INVALID_MODEL, "scales '%s' must be float [N=%lld, %lld blocks], got %s with %lld "
                    "elements", sv->name, (long long)N, (long long)blocks, cinfer_dtype_name(S->dtype),
                    (long long)tensor_numel(S));
    int64_t zp_row = 0; /* packed zero points: bytes per row; 0 for unpacked (scales' type) */
    if (Z) {
        if (Z->dtype == CINFER_DTYPE_UINT8) {
            zp_row = (blocks * bits + 7) / 8;
            if (tensor_numel(Z) != N * zp_row)
                return LERR(L, CINFER_ERR_INVALID_MODEL, "packed zero_points '%s' must have %lld elements, got %lld",
                            zv->name, (long long)(N * zp_row), (long long)tensor_numel(Z));
        } else if (Z->dtype != S->dtype || tensor_numel(Z) != N * blocks) {
            return LERR(L, CINFER_ERR_INVALID_MODEL, "zero_points '%s' must be uint8 (packed) or %s [N, blocks]",
                        zv->name, cinfer_dtype_name(S->dtype));
        }
    }
    size_t es = cinfer_dtype_size(S->dtype);
    void *w = core_aligned_alloc((size_t)(K * N) * es);
    if (!w) return core_error(CINFER_ERR_OUT_OF_MEMORY, "node '%s': cannot allocate the dequantized weight", L->name);
    const uint8_t *q = B->data;
    float dflt = (float)(1 << (bits - 1));
    for (int64_t n = 0; n < N; n++)
        for (int64_t kb = 0; kb < blocks; kb++) {
            float scale = load_float(S, n * blocks + kb), zero = dflt;
            if (Z) zero = zp_row ? (float)packed_field((const uint8_t *)Z->data + n * zp_row, kb, (int)bits)
                                 : load_float(Z, n * blocks + kb);
            const uint8_t *blk = q + (n * blocks + kb) * blob;
            for (int64_t j = 0; j < block && kb * block + j < K; j++) {
                float x = ((float)packed_field(blk, j, (int)bits) - zero) * scale;
                int64_t at = (kb * block + j) * N + n;
                if (S->dtype == CINFER_DTYPE_FLOAT) ((float *)w)[at] = x;
                else if (S->dtype == CINFER_DTYPE_FLOAT16) ((uint16_t *)w)[at] = dtype_float_to_half(x);
                else ((uint16_t *)w)[at] = dtype_float_to_bf16(x);
            }
        }
    const int64_t dims[2] = {K, N};
    int wv;
    cinfer_status st = new_constant(L, "weight", S->dtype, 2, dims, w, &wv);
    core_aligned_free(w);
    CINFER_TRY(st);
    const int mm[2] = {L->in[0], wv};
    if (!has_in(L, 5)) return emit(L, "MatMul", mm, 2, L->out, 1, NULL);
    int y;
    CINFER_TRY(emit1(L, "MatMul", mm, 2, "matmul", &y, NULL));
    const int ad[2] = {y, L->in[5]};
    return emit(L, "Add", ad, 2, L->out, 1, NULL);
}

/* DequantizeLinear (com.microsoft)(x, x_scale, x_zero_point?): the default-domain op, per tensor or per `axis`. */
static cinfer_status lower_dequantize(lowering *L) {
    static const char *const known[] = {"axis", NULL};
    CINFER_TRY(check_attrs(L, known));
    graph_node *n = NULL;
    CINFER_TRY(emit(L, "DequantizeLinear", L->in, L->nin, L->out, 1, &n));
    return copy_attr(L, n, "axis", "axis");
}

/* ---- the pass ---- */

typedef struct contrib_op {
    const char *op_type;
    cinfer_status (*lower)(lowering *L);
    int max_inputs, max_outputs;
    uint32_t required; /* bit k: input k must be given */
} contrib_op;

static cinfer_status lower_bias_gelu_erf(lowering *L) { return lower_bias_gelu(L, false); }
static cinfer_status lower_fast_gelu(lowering *L) { return lower_bias_gelu(L, true); }

#define IN(k) (1u << (k))
static const contrib_op contrib_ops[] = {
    {"Gelu", lower_gelu, 1, 1, IN(0)},
    {"BiasGelu", lower_bias_gelu_erf, 2, 1, IN(0) | IN(1)},
    {"FastGelu", lower_fast_gelu, 2, 1, IN(0)},
    {"QuickGelu", lower_quick_gelu, 1, 1, IN(0)},
    {"BiasAdd", lower_bias_add, 3, 1, IN(0) | IN(1) | IN(2)},
    {"SkipLayerNormalization", lower_skip_layer_norm, 5, 4, IN(0) | IN(1) | IN(2)},
    {"SkipSimplifiedLayerNormalization", lower_skip_rms_norm, 4, 4, IN(0) | IN(1) | IN(2)},
    {"SimplifiedLayerNormalization", lower_rms_norm, 2, 2, IN(0) | IN(1)},
    {"EmbedLayerNormalization", lower_embed_layer_norm, 9, 3, IN(0) | IN(2) | IN(3) | IN(5) | IN(6)},
    {"Attention", lower_attention, 7, 2, IN(0) | IN(1)},
    {"MultiHeadAttention", lower_multi_head_attention, 10, 4, IN(0)},
    {"GroupQueryAttention", lower_group_query_attention, 17, 4, IN(0) | IN(5) | IN(6)},
    {"RotaryEmbedding", lower_rotary, 4, 1, IN(0) | IN(1) | IN(2) | IN(3)},
    {"MatMulNBits", lower_matmul_nbits, 6, 1, IN(0) | IN(1) | IN(2)},
    {"DequantizeLinear", lower_dequantize, 3, 1, IN(0) | IN(1)},
};
#undef IN

/* The row for node n: every com.microsoft op above, and onnxruntime's default-domain SimplifiedLayerNormalization
 * (it registers that one in the ONNX domain; ONNX itself has no such op). */
static const contrib_op *find_contrib(const graph_node *n) {
    bool contrib = strcmp(n->domain, CONTRIB_DOMAIN) == 0;
    bool onnx = !n->domain[0] || strcmp(n->domain, "ai.onnx") == 0;
    if (onnx && strcmp(n->op_type, "SimplifiedLayerNormalization") == 0) return &contrib_ops[7];
    if (!contrib) return NULL;
    for (size_t i = 0; i < sizeof contrib_ops / sizeof contrib_ops[0]; i++)
        if (strcmp(contrib_ops[i].op_type, n->op_type) == 0) return &contrib_ops[i];
    return NULL;
}

size_t onnx_contrib_op_count(void) { return sizeof contrib_ops / sizeof contrib_ops[0]; }

const char *onnx_contrib_op_name(size_t index) {
    return index < onnx_contrib_op_count() ? contrib_ops[index].op_type : NULL;
}

cinfer_status onnx_lower_contrib_ops(graph *g) {
    int count = g->num_nodes, lowered = 0;
    for (int i = 0; i < count; i++)
        if (find_contrib(&g->nodes[i])) lowered++;
    if (!lowered) return CINFER_OK;
    graph_recount_uses(g); /* out_used() reads the consumer counts */
    lowering *L = malloc(sizeof *L);
    if (!L) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    cinfer_status st = CINFER_OK;
    for (int i = 0; i < count && st == CINFER_OK; i++) {
        const graph_node *n = &g->nodes[i];
        const contrib_op *op = find_contrib(n);
        if (!op) continue;
        *L = (lowering){.g = g, .node = i, .version = n->opset, .opset = g->opset > LOWERED_MIN_OPSET ? g->opset
                                                                                                      : LOWERED_MIN_OPSET};
        snprintf(L->name, sizeof L->name, "%s", n->name);
        snprintf(L->op, sizeof L->op, "%s", n->op_type);
        snprintf(L->domain, sizeof L->domain, "%s", n->domain);
        L->nin = n->num_inputs;
        L->nout = n->num_outputs;
        memcpy(L->in, n->inputs, sizeof(int) * (size_t)n->num_inputs);
        memcpy(L->out, n->outputs, sizeof(int) * (size_t)n->num_outputs);
        if (strcmp(L->domain, CONTRIB_DOMAIN) == 0 && L->version != 1)
            st = LERR(L, CINFER_ERR_UNSUPPORTED, "version %lld of the com.microsoft domain is not known (only 1)",
                      (long long)L->version);
        else if (L->nin > op->max_inputs || L->nout < 1 || L->nout > op->max_outputs)
            st = LERR(L, CINFER_ERR_INVALID_MODEL, "%d inputs and %d outputs, expected at most %d inputs and 1 to %d "
                      "outputs", L->nin, L->nout, op->max_inputs, op->max_outputs);
        else if (L->out[0] < 0)
            st = LERR(L, CINFER_ERR_INVALID_MODEL, "%s", "output 0 is missing (it is required)");
        else
            for (int k = 0; k < 32 && st == CINFER_OK; k++)
                if (((op->required >> k) & 1u) && !has_in(L, k))
                    st = LERR(L, CINFER_ERR_INVALID_MODEL, "input %d is missing (it is required)", k);
        if (st == CINFER_OK) st = op->lower(L);
        g->nodes[i].removed = true; /* index i is stable: nodes are only appended */
    }
    free(L);
    if (st != CINFER_OK) return st;
    graph_compact(g); /* drops the contrib nodes, and weights only they read (MatMulNBits' packed B) */
    return CINFER_OK;
}
