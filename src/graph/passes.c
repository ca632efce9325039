/* Load-time graph passes: topological sort, schema binding, Identity/Dropout removal, constant folding,
 * Conv+BatchNormalization folding, dead-node removal, and marking the shape subgraphs that are evaluated
 * on the host while planning.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"

void graph_recount_uses(graph *g) {
    for (int v = 0; v < g->num_values; v++) {
        g->values[v].num_consumers = 0;
        g->values[v].producer = -1;
    }
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        if (n->removed) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] >= 0) g->values[n->inputs[k]].num_consumers++;
        for (int k = 0; k < n->num_outputs; k++)
            if (n->outputs[k] >= 0) g->values[n->outputs[k]].producer = i;
    }
}

cinfer_status graph_sort(graph *g) {
    int n = g->num_nodes;
    /* producer of each value, checking single assignment */
    int *producer = malloc(sizeof(int) * (size_t)(g->num_values ? g->num_values : 1));
    int *missing = calloc((size_t)(n ? n : 1), sizeof(int));
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *queue = malloc(sizeof(int) * (size_t)(n ? n : 1));
    cinfer_status st = CINFER_OK;
    if (!producer || !missing || !order || !queue) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while sorting the graph");
        goto done;
    }
    for (int v = 0; v < g->num_values; v++) producer[v] = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].num_outputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v < 0) continue;
            if (producer[v] >= 0 || g->values[v].kind != VALUE_INTERMEDIATE) {
                st = core_error(CINFER_ERR_INVALID_MODEL, "value '%s' is assigned more than once (node '%s')",
                                g->values[v].name, g->nodes[i].name);
                goto done;
            }
            producer[v] = i;
        }
    /* consumers of each value as a compressed list, so each edge is visited once */
    int *first = calloc((size_t)g->num_values + 1, sizeof(int));
    int total_edges = 0;
    if (!first) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while sorting the graph");
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].num_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0) {
                first[g->nodes[i].inputs[k] + 1]++;
                total_edges++;
            }
    for (int v = 0; v < g->num_values; v++) first[v + 1] += first[v];
    int *edges = malloc(sizeof(int) * (size_t)(total_edges ? total_edges : 1));
    int *fill = calloc((size_t)g->num_values + 1, sizeof(int));
    if (!edges || !fill) {
        free(first);
        free(edges);
        free(fill);
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while sorting the graph");
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].num_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0) edges[first[v] + fill[v]++] = i;
        }
    free(fill);
    int head = 0, tail = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < g->nodes[i].num_inputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v < 0) continue;
            if (g->values[v].kind == VALUE_INTERMEDIATE && producer[v] < 0) {
                free(first);
                free(edges);
                st = core_error(CINFER_ERR_INVALID_MODEL,
                                "node '%s' (%s) uses '%s', which no node, model input or initializer provides",
                                g->nodes[i].name, g->nodes[i].op_type, g->values[v].name);
                goto done;
            }
            if (producer[v] >= 0) missing[i]++;
        }
        if (missing[i] == 0) queue[tail++] = i;
    }
    int count = 0;
    while (head < tail) {
        int i = queue[head++];
        order[count++] = i;
        for (int k = 0; k < g->nodes[i].num_outputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v < 0) continue;
            for (int e = first[v]; e < first[v + 1]; e++)
                if (--missing[edges[e]] == 0) queue[tail++] = edges[e];
        }
    }
    free(first);
    free(edges);
    if (count != n) {
        for (int i = 0; i < n; i++)
            if (missing[i] > 0) {
                st = core_error(CINFER_ERR_INVALID_MODEL, "the graph has a cycle through node '%s' (%s)",
                                g->nodes[i].name, g->nodes[i].op_type);
                goto done;
            }
    }
    graph_node *sorted = malloc(sizeof(graph_node) * (size_t)(g->cap_nodes ? g->cap_nodes : 1));
    if (!sorted) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while sorting the graph");
        goto done;
    }
    for (int i = 0; i < n; i++) sorted[i] = g->nodes[order[i]];
    free(g->nodes);
    g->nodes = sorted;
    graph_recount_uses(g);
done:
    free(producer);
    free(missing);
    free(order);
    free(queue);
    return st;
}

cinfer_status graph_bind_schemas(graph *g) {
    char list[3072];
    size_t used = 0;
    int unsupported = 0;
    list[0] = '\0';
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        n->schema = op_schema_find(n->domain, n->op_type);
        n->schema_index = n->schema ? op_schema_index(n->schema) : -1;
        if (n->schema && backend_cpu_has_op(n->op_type)) {
            const op_schema *s = n->schema;
            if (n->num_inputs < s->min_inputs || (s->max_inputs >= 0 && n->num_inputs > s->max_inputs))
                return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': has %d inputs, expected %d to %d", n->op_type,
                                  n->name, n->num_inputs, s->min_inputs, s->max_inputs);
            /* every op's first output is required but the recurrences' (their Y may be left out for Y_h alone); the
             * passes read output 0 of the ops they match */
            bool optional_first = !strcmp(n->op_type, "LSTM") || !strcmp(n->op_type, "GRU") || !strcmp(n->op_type, "RNN");
            if (!optional_first && (n->num_outputs < 1 || n->outputs[0] < 0))
                return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': output 0 is missing (it is required)",
                                  n->op_type, n->name);
            continue;
        }
        n->schema = NULL;
        unsupported++;
        if (used < sizeof list - 200)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s%s%s (node '%s')", unsupported > 1 ? ", " : "",
                                     n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type, n->name);
    }
    if (unsupported)
        return core_error(CINFER_ERR_UNSUPPORTED, "%d node%s use%s ops cinfer does not support: %s%s", unsupported,
                          unsupported > 1 ? "s" : "", unsupported > 1 ? "" : "s", list,
                          used >= sizeof list - 200 ? ", ..." : "");
    return CINFER_OK;
}


/* Identity and inference-mode Dropout forward their input: uses of the output are pointed at the input
 * (through chains of them) in one pass over the graph. */
static cinfer_status remove_identities(graph *g) {
    int *forward = malloc(sizeof(int) * (size_t)(g->num_values ? g->num_values : 1));
    if (!forward) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while removing Identity nodes");
    for (int v = 0; v < g->num_values; v++) forward[v] = v;
    bool any = false;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        bool identity = strcmp(n->op_type, "Identity") == 0;
        bool dropout = strcmp(n->op_type, "Dropout") == 0;
        if (!identity && !dropout) continue;
        if (n->num_inputs < 1 || n->inputs[0] < 0 || n->num_outputs < 1 || n->outputs[0] < 0) continue;
        if (dropout && n->num_outputs > 1 && n->outputs[1] >= 0 &&
            (g->values[n->outputs[1]].num_consumers > 0 || g->values[n->outputs[1]].is_output))
            continue; /* the mask is used: keep the node */
        if (dropout && n->num_inputs > 2 && n->inputs[2] >= 0) {
            const graph_value *tm = &g->values[n->inputs[2]];
            if (tm->kind != VALUE_CONSTANT || tensor_get_int(&tm->constant, 0) != 0) continue; /* training mode */
        }
        int out = n->outputs[0];
        if (g->values[out].is_output) continue; /* the output name must survive */
        forward[out] = n->inputs[0];
        n->removed = true;
        any = true;
    }
    if (any) {
        /* nodes are in topological order, so an Identity's input was forwarded before its output */
        for (int i = 0; i < g->num_nodes; i++) {
            graph_node *n = &g->nodes[i];
            if (n->removed && forward[n->outputs[0]] != n->outputs[0])
                forward[n->outputs[0]] = forward[forward[n->outputs[0]]];
        }
        for (int i = 0; i < g->num_nodes; i++)
            for (int k = 0; k < g->nodes[i].num_inputs; k++)
                if (g->nodes[i].inputs[k] >= 0) g->nodes[i].inputs[k] = forward[g->nodes[i].inputs[k]];
        graph_recount_uses(g);
    }
    free(forward);
    return CINFER_OK;
}

/* Static-knowledge view of a value for shape inference: dims and, for constants, data. */
static void value_view(const graph *g, int v, tensor *t) {
    memset(t, 0, sizeof *t);
    if (v < 0) return;
    const graph_value *gv = &g->values[v];
    if (gv->kind == VALUE_CONSTANT) {
        *t = gv->constant;
        return;
    }
    t->dtype = gv->dtype;
    t->ndim = gv->ndim < 0 ? 0 : gv->ndim;
    for (int d = 0; d < t->ndim; d++) t->dims[d] = gv->dims[d];
}

/* Evaluates node i whose inputs are all constants; its outputs become constants. */
static cinfer_status fold_node(graph *g, int i) {
    graph_node *n = &g->nodes[i];
    tensor in[GRAPH_MAX_NODE_IO], out[GRAPH_MAX_NODE_IO];
    for (int k = 0; k < n->num_inputs; k++) value_view(g, n->inputs[k], &in[k]);
    memset(out, 0, sizeof(tensor) * (size_t)n->num_outputs);
    CINFER_TRY(n->schema->infer(n, in, n->num_inputs, out, n->num_outputs));
    for (int k = 0; k < n->num_outputs; k++) {
        out[k].data = core_aligned_alloc(tensor_nbytes(&out[k]));
        if (!out[k].data) {
            for (int j = 0; j < k; j++) core_aligned_free(out[j].data);
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "node '%s': out of memory while folding constants", n->name);
        }
    }
    cinfer_status st = backend_cpu_run_node(n, in, n->num_inputs, out, n->num_outputs);
    if (st != CINFER_OK) {
        for (int k = 0; k < n->num_outputs; k++) core_aligned_free(out[k].data);
        return st;
    }
    for (int k = 0; k < n->num_outputs; k++) {
        if (n->outputs[k] < 0) {
            core_aligned_free(out[k].data);
            continue;
        }
        graph_value *v = &g->values[n->outputs[k]];
        v->kind = VALUE_CONSTANT;
        v->constant = out[k];
        v->dtype = out[k].dtype;
        v->ndim = out[k].ndim;
        for (int d = 0; d < v->ndim; d++) v->dims[d] = out[k].dims[d];
    }
    n->removed = true;
    return CINFER_OK;
}

static cinfer_status fold_constants(graph *g) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        if (n->removed) continue;
        bool all_const = true;
        for (int k = 0; k < n->num_inputs && all_const; k++)
            if (n->inputs[k] >= 0 && g->values[n->inputs[k]].kind != VALUE_CONSTANT) all_const = false;
        if (!all_const) continue;
        /* a constant model output keeps its node so the output stays an ordinary produced value */
        bool feeds_output = false;
        for (int k = 0; k < n->num_outputs; k++)
            if (n->outputs[k] >= 0 && g->values[n->outputs[k]].is_output) feeds_output = true;
        if (feeds_output) continue;
        CINFER_TRY(fold_node(g, i));
    }
    graph_recount_uses(g);
    return CINFER_OK;
}

bool graph_is_float_constant(const graph *g, int v) {
    return v >= 0 && g->values[v].kind == VALUE_CONSTANT && g->values[v].constant.dtype == CINFER_DTYPE_FLOAT;
}

/* Conv followed by an inference BatchNormalization: scale the weights and bias, drop the BN. */
static cinfer_status fold_conv_batchnorm(graph *g) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *bn = &g->nodes[i];
        if (bn->removed || strcmp(bn->op_type, "BatchNormalization") != 0 || bn->num_inputs != 5) continue;
        if (graph_attr_int(bn, "training_mode", 0) != 0) continue;
        bool extra_outputs = false;
        for (int k = 1; k < bn->num_outputs; k++)
            if (bn->outputs[k] >= 0) extra_outputs = true;
        if (extra_outputs) continue;
        int y = bn->inputs[0];
        if (y < 0 || g->values[y].producer < 0 || g->values[y].num_consumers != 1 || g->values[y].is_output) continue;
        graph_node *conv = &g->nodes[g->values[y].producer];
        if (conv->removed || strcmp(conv->op_type, "Conv") != 0 || conv->num_outputs != 1) continue;
        int w = conv->inputs[1], b = conv->num_inputs > 2 ? conv->inputs[2] : -1;
        if (!graph_is_float_constant(g, w) || (b >= 0 && !graph_is_float_constant(g, b))) continue;
        bool params_const = true;
        for (int k = 1; k < 5; k++) params_const = params_const && graph_is_float_constant(g, bn->inputs[k]);
        if (!params_const) continue;
        const tensor *W = &g->values[w].constant;
        int64_t cout = W->dims[0];
        const float *scale = g->values[bn->inputs[1]].constant.data, *shift = g->values[bn->inputs[2]].constant.data;
        const float *mean = g->values[bn->inputs[3]].constant.data, *var = g->values[bn->inputs[4]].constant.data;
        for (int k = 1; k < 5; k++)
            if (tensor_numel(&g->values[bn->inputs[k]].constant) != cout) params_const = false;
        if (!params_const || W->ndim < 3) continue;
        float eps = graph_attr_float(bn, "epsilon", 1e-5f);

        /* new weight and bias values, so a weight shared with another node stays intact */
        char name[512];
        snprintf(name, sizeof name, "%s/bn_folded_weight", conv->name);
        int nw = graph_new_value(g, name);
        snprintf(name, sizeof name, "%s/bn_folded_bias", conv->name);
        int nb = graph_new_value(g, name);
        if (nw < 0 || nb < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        W = &g->values[w].constant; /* values may have moved */
        tensor nwt = *W, nbt = {.dtype = CINFER_DTYPE_FLOAT, .ndim = 1, .dims = {cout}};
        nwt.data = core_aligned_alloc(tensor_nbytes(W));
        nbt.data = core_aligned_alloc(sizeof(float) * (size_t)cout);
        if (!nwt.data || !nbt.data) {
            core_aligned_free(nwt.data);
            core_aligned_free(nbt.data);
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        }
        int64_t per_out = tensor_numel(W) / cout;
        const float *old_b = b >= 0 ? g->values[b].constant.data : NULL;
        for (int64_t c = 0; c < cout; c++) {
            float s = scale[c] / sqrtf(var[c] + eps);
            for (int64_t j = 0; j < per_out; j++)
                ((float *)nwt.data)[c * per_out + j] = ((const float *)W->data)[c * per_out + j] * s;
            ((float *)nbt.data)[c] = ((old_b ? old_b[c] : 0.0f) - mean[c]) * s + shift[c];
        }
        graph_value *vw = &g->values[nw], *vb = &g->values[nb];
        vw->kind = vb->kind = VALUE_CONSTANT;
        vw->constant = nwt;
        vb->constant = nbt;
        vw->dtype = vb->dtype = CINFER_DTYPE_FLOAT;
        vw->ndim = nwt.ndim;
        for (int d = 0; d < nwt.ndim; d++) vw->dims[d] = nwt.dims[d];
        vb->ndim = 1;
        vb->dims[0] = cout;
        if (conv->num_inputs < 3) {
            int *ins = realloc(conv->inputs, sizeof(int) * 3);
            if (!ins) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
            conv->inputs = ins;
            conv->num_inputs = 3;
        }
        conv->inputs[1] = nw;
        conv->inputs[2] = nb;
        conv->outputs[0] = bn->outputs[0];
        bn->removed = true;
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

/* Conv or Gemm followed by Relu, or Gemm followed by Gelu (its output used by nothing else; a Reshape may sit
 * between, its output then the activation's): the Conv or Gemm applies the activation itself while its output is
 * in cache (a GPU Gemm in cuBLASLt's RELU(_BIAS) or GELU(_BIAS) epilogue), marked by the internal attribute
 * "cinfer_fused_relu", or "cinfer_fused_gelu" (1: the erf form, 2: the tanh form), that every backend's Conv and
 * Gemm honour. max(0, .) commutes with the rounding to a half type, so a
 * fused Relu gives the same bits; for the Gelu, see the CUDA Gemm (backend/cuda/ops/linalg.c). */
static cinfer_status fuse_activations(graph *g) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *act = &g->nodes[i];
        if (act->removed || act->num_inputs != 1 || act->inputs[0] < 0) continue;
        const bool relu = strcmp(act->op_type, "Relu") == 0, gelu = strcmp(act->op_type, "Gelu") == 0;
        if (!relu && !gelu) continue;
        const char *form = gelu ? graph_attr_string(act, "approximate", "none") : "";
        if (gelu && strcmp(form, "none") != 0 && strcmp(form, "tanh") != 0) continue; /* the schema names the error */
        int y = act->inputs[0];
        const graph_value *yv = &g->values[y];
        if (yv->producer < 0 || yv->num_consumers != 1 || yv->is_output) continue;
        graph_node *p = &g->nodes[yv->producer], *last = p; /* last: the node whose output the activation's becomes */
        if (!p->removed && strcmp(p->op_type, "Reshape") == 0 && p->inputs[0] >= 0) {
            /* an elementwise activation commutes with a Reshape: the one fuse_matmul_bias puts after its Gemms */
            const graph_value *rv = &g->values[p->inputs[0]];
            if (rv->producer < 0 || rv->num_consumers != 1 || rv->is_output) continue;
            p = &g->nodes[rv->producer];
        }
        if (p->removed || (strcmp(p->op_type, "Gemm") != 0 && (gelu || strcmp(p->op_type, "Conv") != 0)) ||
            graph_node_attr(p, "cinfer_fused_relu") || graph_node_attr(p, "cinfer_fused_gelu"))
            continue;
        if (relu) CINFER_TRY(graph_node_add_int_attr(p, "cinfer_fused_relu", 1));
        else CINFER_TRY(graph_node_add_int_attr(p, "cinfer_fused_gelu", strcmp(form, "tanh") == 0 ? 2 : 1));
        last->outputs[0] = act->outputs[0];
        act->removed = true;
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

void graph_remove_dead_nodes(graph *g) {
    bool *live = calloc((size_t)(g->num_values ? g->num_values : 1), sizeof(bool));
    if (!live) return; /* an optimisation only */
    for (int k = 0; k < g->num_outputs; k++) live[g->outputs[k]] = true;
    for (int i = g->num_nodes - 1; i >= 0; i--) {
        graph_node *n = &g->nodes[i];
        if (n->removed) continue;
        bool used = false;
        for (int k = 0; k < n->num_outputs; k++)
            if (n->outputs[k] >= 0 && live[n->outputs[k]]) used = true;
        if (!used) {
            n->removed = true;
            continue;
        }
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] >= 0) live[n->inputs[k]] = true;
    }
    free(live);
    graph_recount_uses(g);
}

void graph_compact(graph *g) {
    int kept = 0;
    for (int i = 0; i < g->num_nodes; i++) {
        if (g->nodes[i].removed) {
            graph_node *n = &g->nodes[i];
            free(n->name); free(n->op_type); free(n->domain); free(n->inputs); free(n->outputs);
            for (int a = 0; a < n->num_attrs; a++) graph_attr_clear(&n->attrs[a]);
            free(n->attrs);
            continue;
        }
        g->nodes[kept++] = g->nodes[i];
    }
    g->num_nodes = kept;
    graph_recount_uses(g);

    /* drop values nothing refers to (folded intermediates, replaced weights) */
    int *remap = malloc(sizeof(int) * (size_t)(g->num_values ? g->num_values : 1));
    if (!remap) return;
    int nv = 0;
    for (int v = 0; v < g->num_values; v++) {
        graph_value *gv = &g->values[v];
        bool referenced = gv->num_consumers > 0 || gv->producer >= 0 || gv->is_output || gv->kind == VALUE_INPUT;
        if (!referenced) {
            free(gv->name);
            for (int d = 0; d < CINFER_MAX_DIMS; d++) free(gv->dim_names[d]);
            core_aligned_free(gv->constant.data);
            remap[v] = -1;
            continue;
        }
        remap[v] = nv;
        g->values[nv++] = *gv;
    }
    g->num_values = nv;
    graph_reindex_values(g); /* on OOM lookups by name fail; nothing after load looks values up by name */
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] >= 0) n->inputs[k] = remap[n->inputs[k]];
        for (int k = 0; k < n->num_outputs; k++)
            if (n->outputs[k] >= 0) n->outputs[k] = remap[n->outputs[k]];
    }
    for (int k = 0; k < g->num_inputs; k++) g->inputs[k] = remap[g->inputs[k]];
    for (int k = 0; k < g->num_outputs; k++) g->outputs[k] = remap[g->outputs[k]];
    free(remap);
    graph_recount_uses(g);
}

/* A value is "needed" when its contents decide a shape (Reshape's target, Slice's starts...). Such
 * values and everything they derive from (up to a Shape op, which needs only its input's shape) are
 * computed on the host while planning. */
static void mark_value_needed(graph *g) {
    for (int v = 0; v < g->num_values; v++) g->values[v].value_needed = false;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        n->host_eval = false;
        for (int k = 0; k < n->num_inputs && k < 32; k++)
            if ((n->schema->value_inputs >> k) & 1u)
                if (n->inputs[k] >= 0) g->values[n->inputs[k]].value_needed = true;
    }
    for (int i = g->num_nodes - 1; i >= 0; i--) {
        graph_node *n = &g->nodes[i];
        bool needed = false;
        for (int k = 0; k < n->num_outputs; k++)
            if (n->outputs[k] >= 0 && g->values[n->outputs[k]].value_needed) needed = true;
        if (!needed) continue;
        n->host_eval = true;
        if (n->schema->flags & OP_FLAG_SHAPE_ONLY) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] >= 0) g->values[n->inputs[k]].value_needed = true;
    }
}

void graph_mark_host_values(graph *g) { mark_value_needed(g); }

cinfer_status graph_optimize(graph *g) {
    CINFER_TRY(remove_identities(g));
    CINFER_TRY(fold_constants(g));
    CINFER_TRY(fold_conv_batchnorm(g));
    CINFER_TRY(fuse_activations(g));
    mark_value_needed(g); /* the probes evaluate the shape subgraphs as a plan would */
    CINFER_TRY(graph_infer_static_shapes(g));
    CINFER_TRY(graph_fuse(g));
    CINFER_TRY(fuse_activations(g)); /* the Gemms graph_fuse made from MatMul + bias */
    CINFER_TRY(graph_fuse_lookup_concat(g));
    CINFER_TRY(graph_fuse_elementwise_chains(g));
    graph_remove_dead_nodes(g);
    graph_compact(g);
    mark_value_needed(g);
    return graph_fuse_attention(g);
}
