/* Channels-last layout for the half-precision graphs the CUDA backend runs (graph_to_channels_last).
 *
 * cuDNN's tensor-core convolutions read and write [N, H, W, C]; handed [N, C, H, W] they transpose in and out
 * around every call (the H200 kernel trace of ResNet-50 fp16 showed those transposes beside each convolution).
 * Here 2-D Convs with constant weights take the internal attribute "cinfer_channels_last" (graph/shape/
 * conv_params.h says what it means), their weights are reordered once to [M, kh, kw, C / group], and the layout
 * spreads forward through what does not care about it: the pools, elementwise ops whose other operands are
 * channels-last too or constants (reordered alike), casts and elementwise chains. A global pool (or a ReduceMean
 * over both spatial axes, which becomes one) ends the region for free ([N, 1, 1, C] and [N, C, 1, 1] are the same
 * bytes). Everything else reads the channels-first value through one Transpose, as do model outputs; a
 * channels-first value entering a Conv goes through one Transpose the other way. Values keep their names for the
 * channels-first meaning; the channels-last twins are "<name>/nhwc". */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"

static bool is_op(const graph_node *n, const char *op) { return strcmp(n->op_type, op) == 0; }

static bool half_dtype(cinfer_dtype t) { return t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16; }

static bool is_constant(const graph *g, int v) { return v >= 0 && g->values[v].kind == VALUE_CONSTANT; }

/* Ops whose every output element depends on the same-index element of their tensor inputs only (shapes
 * broadcasting), so a consistent reordering of all their rank-4 operands reorders their output alike. */
static bool layout_free_op(const graph_node *n) {
    static const char *const ops[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "Elu", "HardSigmoid",
                                      "HardSwish", "Gelu", "Erf", "Exp", "Neg", "Abs", "Sqrt", "Cast",
                                      "ElementwiseChain", "Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", NULL};
    if (n->domain[0]) return false;
    for (int i = 0; ops[i]; i++)
        if (is_op(n, ops[i])) return true;
    return false;
}

/* A pad-free, symmetric 2-D window: what the channels-last kernels and cuDNN's NHWC calls take. */
static bool plain_2d_window(const graph_node *n) {
    const char *auto_pad = graph_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(auto_pad, "NOTSET") != 0 && strcmp(auto_pad, "VALID") != 0) return false;
    size_t count = 0;
    const int64_t *pads = graph_attr_ints(n, "pads", &count);
    if (pads && (count != 4 || pads[0] != pads[2] || pads[1] != pads[3])) return false;
    const int64_t *k = graph_attr_ints(n, "kernel_shape", &count);
    return !k || count == 2;
}

static bool conv_candidate(const graph *g, const graph_node *n) {
    if (!is_op(n, "Conv") || n->domain[0] || n->num_inputs < 2 || n->num_outputs != 1 || !plain_2d_window(n))
        return false;
    int w = n->inputs[1];
    if (!is_constant(g, w)) return false;
    const tensor *wt = &g->values[w].constant;
    return wt->ndim == 4 && half_dtype(wt->dtype) && tensor_numel(wt) > 0;
}

/* MaxPool without Indices, AveragePool: 2-D, floor mode, undilated. */
static bool pool_candidate(const graph_node *n) {
    if (n->domain[0] || !(is_op(n, "MaxPool") || is_op(n, "AveragePool"))) return false;
    if (n->num_outputs > 1 && n->outputs[1] >= 0) return false;
    size_t count = 0;
    const int64_t *k = graph_attr_ints(n, "kernel_shape", &count);
    if (!k || count != 2 || !plain_2d_window(n) || graph_attr_int(n, "ceil_mode", 0) != 0 ||
        graph_attr_int(n, "storage_order", 0) != 0)
        return false;
    const int64_t *d = graph_attr_ints(n, "dilations", &count);
    return !d || (count == 2 && d[0] == 1 && d[1] == 1);
}

static bool global_pool_candidate(const graph_node *n) {
    return !n->domain[0] && (is_op(n, "GlobalAveragePool") || is_op(n, "GlobalMaxPool"));
}

/* ReduceMean over the two spatial axes of a rank-4 float value, keeping them (how torch's dynamo exporter writes
 * adaptive average pooling to 1x1): GlobalAveragePool. Only where H and W are statically non-zero (over nothing,
 * ReduceMean gives NaN where the pool gives 0); not ReduceMax, whose NaN rule the pool does not share. */
static const char *reduce_as_global_pool(const graph *g, const graph_node *n) {
    if (!is_op(n, "ReduceMean") || n->domain[0] || graph_attr_int(n, "keepdims", 1) != 1 || n->num_outputs != 1 ||
        n->num_inputs < 1 || n->inputs[0] < 0)
        return NULL;
    const graph_value *x = &g->values[n->inputs[0]];
    if (!(half_dtype(x->dtype) || x->dtype == CINFER_DTYPE_FLOAT || x->dtype == CINFER_DTYPE_DOUBLE) || x->ndim != 4 ||
        x->dims[2] <= 0 || x->dims[3] <= 0)
        return NULL;
    size_t count = 0;
    const int64_t *axes = graph_attr_ints(n, "axes", &count);
    if (n->num_inputs > 1 && n->inputs[1] >= 0) {
        const tensor *t = is_constant(g, n->inputs[1]) ? &g->values[n->inputs[1]].constant : NULL;
        if (!t || t->dtype != CINFER_DTYPE_INT64 || t->ndim != 1) return NULL;
        axes = t->data;
        count = (size_t)t->dims[0];
    }
    if (!axes || count != 2) return NULL;
    int64_t a = axes[0] < 0 ? axes[0] + 4 : axes[0], b = axes[1] < 0 ? axes[1] + 4 : axes[1];
    if (!((a == 2 && b == 3) || (a == 3 && b == 2))) return NULL;
    return "GlobalAveragePool";
}

/* Rewrites node n as the global pool `op` of its input 0 (attributes dropped; graph_bind_schemas rebinds it). */
static cinfer_status become_global_pool(graph_node *n, const char *op) {
    char *op_type = strdup(op);
    if (!op_type) return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory at '%s'", n->name);
    free(n->op_type);
    n->op_type = op_type;
    for (int a = 0; a < n->num_attrs; a++) graph_attr_clear(&n->attrs[a]);
    n->num_attrs = 0;
    n->num_inputs = 1;
    return CINFER_OK;
}

/* Reorders a constant of rank <= 4 as its channels-first broadcast [1.., C, H, W] would be read channels-last:
 * dims [a, b, c, d] (left-padded with 1s) become [a, c, d, b], the data moved with them. */
static bool reorder_constant(const tensor *src, tensor *dst) {
    int64_t d4[4] = {1, 1, 1, 1};
    for (int i = 0; i < src->ndim; i++) d4[4 - src->ndim + i] = src->dims[i];
    *dst = *src;
    dst->ndim = 4;
    dst->dims[0] = d4[0];
    dst->dims[1] = d4[2];
    dst->dims[2] = d4[3];
    dst->dims[3] = d4[1];
    size_t es = cinfer_dtype_size(src->dtype);
    dst->data = malloc(tensor_nbytes(src) ? tensor_nbytes(src) : 1);
    if (!dst->data) return false;
    const char *s = src->data;
    char *o = dst->data;
    for (int64_t a = 0; a < d4[0]; a++)
        for (int64_t b = 0; b < d4[1]; b++)
            for (int64_t c = 0; c < d4[2]; c++)
                for (int64_t d = 0; d < d4[3]; d++) {
                    int64_t from = ((a * d4[1] + b) * d4[2] + c) * d4[3] + d;
                    int64_t to = ((a * d4[2] + c) * d4[3] + d) * d4[1] + b;
                    memcpy(o + to * es, s + from * es, es);
                }
    return true;
}

/* The channels-last twin of constant v (one per constant: later uses share it); -1 on OOM. */
static int constant_twin(graph *g, int *twin, int v) {
    if (twin[v] >= 0) return twin[v];
    tensor t;
    if (!reorder_constant(&g->values[v].constant, &t)) return -1;
    char name[512];
    snprintf(name, sizeof name, "%s/nhwc", g->values[v].name);
    int c = graph_new_constant(g, name, &t);
    free(t.data);
    if (c >= 0) twin[v] = c;
    return c;
}

/* A new value named "<v>/nhwc" with v's type and its static dims reordered channels-last. */
static int value_twin(graph *g, int v) {
    char name[512];
    snprintf(name, sizeof name, "%s/nhwc", g->values[v].name);
    int t = graph_new_value(g, name);
    if (t < 0) return -1;
    const graph_value *src = &g->values[v];
    graph_value *dst = &g->values[t];
    dst->dtype = src->dtype;
    dst->shape_probed = src->shape_probed;
    dst->ndim = src->ndim == 4 ? 4 : -1;
    if (dst->ndim == 4) {
        static const int from[4] = {0, 2, 3, 1};
        for (int i = 0; i < 4; i++) {
            dst->dims[i] = src->dims[from[i]];
            if (src->dim_names[from[i]] && !(dst->dim_names[i] = strdup(src->dim_names[from[i]]))) return -1;
        }
    }
    return t;
}

static cinfer_status add_transpose(graph *g, int from, int to, bool to_last) {
    static const int64_t to_last_perm[4] = {0, 2, 3, 1}, to_first_perm[4] = {0, 3, 1, 2};
    char name[512];
    snprintf(name, sizeof name, "cinfer_layout/%s", g->values[to].name);
    int idx = graph_add_node(g, name, "Transpose", "", g->opset, &from, 1, &to, 1);
    graph_attr *a;
    if (idx < 0 || graph_node_add_attr(&g->nodes[idx], "perm", &a) != CINFER_OK)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory adding '%s'", name);
    a->type = ATTR_INTS;
    a->ints = malloc(4 * sizeof(int64_t));
    if (!a->ints) return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory adding '%s'", name);
    memcpy(a->ints, to_last ? to_last_perm : to_first_perm, 4 * sizeof(int64_t));
    a->n = 4;
    return CINFER_OK;
}

typedef struct layout_state {
    int *last;     /* value -> its channels-last twin, or -1 */
    int *constant; /* constant -> its reordered twin, or -1 */
    int num_values;
} layout_state;

static bool grow(layout_state *s, int num_values) {
    if (num_values <= s->num_values) return true;
    int cap = num_values * 2;
    int *last = realloc(s->last, (size_t)cap * sizeof(int));
    if (!last) return false;
    s->last = last;
    int *constant = realloc(s->constant, (size_t)cap * sizeof(int));
    if (!constant) return false;
    s->constant = constant;
    for (int i = s->num_values; i < cap; i++) s->last[i] = s->constant[i] = -1;
    s->num_values = cap;
    return true;
}

/* Whether node n (visited in order) turns channels-last, given which of its inputs already are. */
static bool wants_channels_last(const graph *g, const layout_state *s, const graph_node *n) {
    if (conv_candidate(g, n)) return true;
    int x = n->num_inputs > 0 ? n->inputs[0] : -1;
    if (pool_candidate(n) || global_pool_candidate(n) || reduce_as_global_pool(g, n))
        return x >= 0 && s->last[x] >= 0;
    if (!layout_free_op(n) || n->num_outputs != 1 || n->outputs[0] < 0) return false;
    /* an op that only makes a model output (the conversion's output Cast) stays channels-first: its input's
     * Transpose is no dearer than its output's, and saved when that input is read channels-first elsewhere too */
    const graph_value *y = &g->values[n->outputs[0]];
    if (y->is_output && y->num_consumers == 0) return false;
    bool any = false;
    for (int i = 0; i < n->num_inputs; i++) {
        int v = n->inputs[i];
        if (v < 0) continue;
        if (s->last[v] >= 0) {
            any = true;
        } else if (!(is_op(n, "Clip") && i > 0)) {
            /* another operand: a constant of rank <= 4 reorders; anything else keeps the node channels-first */
            if (!is_constant(g, v) || g->values[v].constant.ndim > 4) return false;
        }
    }
    return any;
}

static cinfer_status rewrite_node(graph *g, layout_state *s, int i) {
    const char *what = g->nodes[i].name;
    const char *pool = reduce_as_global_pool(g, &g->nodes[i]);
    if (pool) CINFER_TRY(become_global_pool(&g->nodes[i], pool));
    bool conv = is_op(&g->nodes[i], "Conv"), global = global_pool_candidate(&g->nodes[i]);
    bool tagged = conv || global || pool_candidate(&g->nodes[i]);
    for (int j = 0; j < g->nodes[i].num_inputs; j++) {
        int v = g->nodes[i].inputs[j];
        if (v < 0) continue;
        if (!grow(s, g->num_values + 4))
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory at '%s'", what);
        int to = -1;
        if (conv && j == 1) {
            to = constant_twin(g, s->constant, v);
        } else if (conv && j == 2) {
            continue;
        } else if (is_op(&g->nodes[i], "Clip") && j > 0) {
            continue;
        } else if (s->last[v] >= 0) {
            to = s->last[v];
        } else if (is_constant(g, v)) {
            to = tensor_numel(&g->values[v].constant) == 1 ? v : constant_twin(g, s->constant, v);
        } else { /* a channels-first activation entering a Conv */
            to = value_twin(g, v);
            if (to >= 0) {
                s->last[v] = to;
                CINFER_TRY(add_transpose(g, v, to, true));
            }
        }
        if (to < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory at '%s'", what);
        g->nodes[i].inputs[j] = to;
    }
    if (tagged) CINFER_TRY(graph_node_add_int_attr(&g->nodes[i], "cinfer_channels_last", 1));
    if (global) return CINFER_OK; /* its output keeps the channels-first shape */
    int y = g->nodes[i].outputs[0];
    if (!grow(s, g->num_values + 2)) return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory");
    int t = value_twin(g, y);
    if (t < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory at '%s'", what);
    g->nodes[i].outputs[0] = t;
    s->last[y] = t;
    return CINFER_OK;
}

cinfer_status graph_to_channels_last(graph *g, bool *changed_out) {
    *changed_out = false;
    layout_state s = {0};
    cinfer_status st = grow(&s, g->num_values + 16)
                           ? CINFER_OK
                           : core_error(CINFER_ERR_OUT_OF_MEMORY, "channels-last layout: out of memory");
    bool changed = false;
    graph_recount_uses(g);
    const int num_nodes = g->num_nodes, num_values = g->num_values;
    for (int i = 0; i < num_nodes && st == CINFER_OK; i++) {
        if (g->nodes[i].removed || g->nodes[i].host_eval || !wants_channels_last(g, &s, &g->nodes[i])) continue;
        st = rewrite_node(g, &s, i);
        changed = true;
    }
    if (st == CINFER_OK && changed) {
        graph_recount_uses(g);
        /* the channels-first values still read (or returned) come back through one Transpose each */
        for (int v = 0; v < num_values && st == CINFER_OK; v++) {
            const graph_value *gv = &g->values[v];
            if (s.last[v] < 0 || gv->producer >= 0 || gv->kind != VALUE_INTERMEDIATE) continue;
            if (gv->num_consumers > 0 || gv->is_output) st = add_transpose(g, s.last[v], v, false);
        }
    }
    free(s.last);
    free(s.constant);
    if (st != CINFER_OK || !changed) return st;
    *changed_out = true;
    graph_recount_uses(g);
    graph_compact(g);
    CINFER_TRY(graph_sort(g));
    CINFER_TRY(graph_bind_schemas(g));
    graph_mark_host_values(g);
    return CINFER_OK;
}
