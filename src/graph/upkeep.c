/* Graph upkeep every pass calls after editing the graph: topological sort, use counts, schema binding (which ops
 * are supported: g->evaluator decides), dead-node removal, compaction, and marking the shape subgraphs that are
 * evaluated on the host while planning. The passes themselves (graph/passes.c, graph/fusion.c, ...) build on these
 * and never on each other; graph/optimize.c orders them.
 */
#include <stdlib.h>
#include <string.h>

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

bool graph_node_supported(const graph *g, const graph_node *n) {
    CINFER_ASSERT(g->evaluator.iface); /* the runtime sets it before binding (runtime/model.c) */
    return op_schema_find(n->domain, n->op_type) && g->evaluator.iface->has_op(g->evaluator.context, n->op_type);
}

/* Checks a supported node's input and output counts against its schema. */
static cinfer_status check_node_arity(const graph_node *n) {
    const op_schema *s = n->schema;
    if (n->num_inputs < s->min_inputs || (s->max_inputs >= 0 && n->num_inputs > s->max_inputs))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': has %d inputs, expected %d to %d", n->op_type,
                          n->name, n->num_inputs, s->min_inputs, s->max_inputs);
    /* every op's first output is required but the recurrences' (their Y may be left out for Y_h alone); the passes
     * read output 0 of the ops they match */
    bool optional_first = !strcmp(n->op_type, "LSTM") || !strcmp(n->op_type, "GRU") || !strcmp(n->op_type, "RNN");
    if (!optional_first && (n->num_outputs < 1 || n->outputs[0] < 0))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': output 0 is missing (it is required)", n->op_type,
                          n->name);
    return CINFER_OK;
}

cinfer_status graph_bind_schemas(graph *g) {
    enum { LISTED_MAX = 20 }; /* the error names this many unsupported nodes; `cinfer inspect` lists them all */
    char list[3072];
    size_t used = 0;
    int unsupported = 0, listed = 0;
    list[0] = '\0';
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        bool supported = graph_node_supported(g, n);
        n->schema = supported ? op_schema_find(n->domain, n->op_type) : NULL;
        n->schema_index = n->schema ? op_schema_index(n->schema) : -1;
        if (supported) {
            CINFER_TRY(check_node_arity(n));
            continue;
        }
        unsupported++;
        if (listed < LISTED_MAX && used < sizeof list - 200) {
            used += (size_t)snprintf(list + used, sizeof list - used, "%s'%.60s' (%.60s, %.60s v%lld)",
                                     listed ? ", " : "", n->name, n->op_type, n->domain[0] ? n->domain : "ai.onnx",
                                     (long long)n->opset);
            listed++;
        }
    }
    if (unsupported)
        return core_error(CINFER_ERR_UNSUPPORTED, "%d unsupported node%s (op, domain, opset): %s%s", unsupported,
                          unsupported > 1 ? "s" : "", list,
                          listed < unsupported ? ", ... (cinfer inspect lists them all)" : "");
    return CINFER_OK;
}

cinfer_status graph_evaluate_node(const graph *g, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out) {
    CINFER_ASSERT(g->evaluator.iface); /* the runtime sets it before binding (runtime/model.c) */
    return g->evaluator.iface->run_node(g->evaluator.context, n, in, num_in, out, num_out);
}

bool graph_is_float_constant(const graph *g, int v) {
    return v >= 0 && g->values[v].kind == VALUE_CONSTANT && g->values[v].constant.dtype == CINFER_DTYPE_FLOAT;
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
void graph_mark_host_values(graph *g) {
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

