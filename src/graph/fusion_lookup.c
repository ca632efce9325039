/* Table lookups joined by a Concat become one internal LookupConcat node (graph_fuse_lookup_concat).
 *
 * A DLRM-style recommender looks up one row of each of its 26 embedding tables (Gather on axis 0 of a constant,
 * often Unsqueezed) and stacks them with the dense features (Concat): 26 Gathers and a Concat, each a kernel of a
 * few microseconds of launch latency around almost no work. LookupConcat writes every piece straight into its place
 * in the Concat's output (graph/shape/movement_params.h says how it reads its inputs); a Concat with fewer than two
 * such lookups is left alone.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"
#include "graph/shape/movement_params.h"

static bool is_op(const graph_node *n, const char *op) {
    return !n->removed && !n->domain[0] && strcmp(n->op_type, op) == 0;
}

/* Read by exactly one node, once, and not a model output. */
static bool single_use(const graph *g, int v) {
    return v >= 0 && g->values[v].num_consumers == 1 && !g->values[v].is_output && !g->values[v].value_needed;
}

static int producer_of(const graph *g, int v) { return v >= 0 ? g->values[v].producer : -1; }

/* Unsqueeze's one axis (its constant axes input), normalised for an output of rank r; -1 when not exactly one. */
static int unsqueeze_axis(const graph *g, const graph_node *u, int r) {
    if (u->num_inputs < 2 || u->inputs[1] < 0 || g->values[u->inputs[1]].kind != VALUE_CONSTANT) return -1;
    const tensor *t = &g->values[u->inputs[1]].constant;
    if (t->dtype != CINFER_DTYPE_INT64 || tensor_numel(t) != 1) return -1;
    int64_t a = ((const int64_t *)t->data)[0];
    if (a < 0) a += r;
    return a >= 0 && a < r ? (int)a : -1;
}

typedef struct lookup_piece {
    int code;          /* LOOKUP_PLAIN, LOOKUP_NO_UNSQUEEZE or the unsqueeze axis */
    int value;         /* the plain input */
    int table, idx;    /* a lookup's inputs */
    int gather, unsq;  /* the nodes it replaces (-1: none) */
} lookup_piece;

/* Whether Concat input v (Concat axis attribute `axis`) is a table lookup the fused node can take: whole table rows
 * per outer index, so the axis must come before the table's trailing dims. */
static bool read_lookup(const graph *g, int v, int64_t axis, lookup_piece *p) {
    p->code = LOOKUP_PLAIN;
    p->value = v;
    p->gather = p->unsq = -1;
    if (!single_use(g, v)) return false;
    int node = producer_of(g, v), unsq = -1;
    if (node >= 0 && is_op(&g->nodes[node], "Unsqueeze")) {
        unsq = node;
        int x = g->nodes[node].inputs[0];
        node = single_use(g, x) ? producer_of(g, x) : -1;
    }
    if (node < 0 || !is_op(&g->nodes[node], "Gather") || g->nodes[node].num_inputs != 2) return false;
    const graph_node *gn = &g->nodes[node];
    int table = gn->inputs[0], idx = gn->inputs[1];
    if (table < 0 || idx < 0 || g->values[table].kind != VALUE_CONSTANT || g->values[idx].ndim < 0) return false;
    int tr = g->values[table].constant.ndim, q = g->values[idx].ndim, gr = q + tr - 1;
    if (tr < 1 || (graph_attr_int(gn, "axis", 0) != 0 && graph_attr_int(gn, "axis", 0) != -tr)) return false;
    int u = unsq >= 0 ? unsqueeze_axis(g, &g->nodes[unsq], gr + 1) : LOOKUP_NO_UNSQUEEZE;
    if (unsq >= 0 && u < 0) return false;
    int r = gr + (unsq >= 0), first_table_dim = q + (unsq >= 0 && u <= q);
    int64_t a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r || a > first_table_dim) return false;
    p->code = u;
    p->table = table;
    p->idx = idx;
    p->gather = node;
    p->unsq = unsq;
    return true;
}

/* Rewrites Concat node c as LookupConcat over the pieces (its name, output and axis kept). */
static cinfer_status become_lookup_concat(graph *g, int c, const lookup_piece *pieces, int count) {
    graph_node *n = &g->nodes[c];
    int num_inputs = 0;
    int *inputs = malloc(sizeof(int) * (size_t)(2 * count));
    int64_t *codes = malloc(sizeof(int64_t) * (size_t)count);
    char *op_type = strdup("LookupConcat");
    graph_attr *a = NULL;
    cinfer_status st = inputs && codes && op_type ? graph_node_add_attr(n, "cinfer_pieces", &a) : CINFER_ERR_OUT_OF_MEMORY;
    if (st != CINFER_OK) {
        free(inputs);
        free(codes);
        free(op_type);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory fusing the lookups of '%s'", n->name);
    }
    for (int k = 0; k < count; k++) {
        codes[k] = pieces[k].code;
        if (pieces[k].code == LOOKUP_PLAIN) {
            inputs[num_inputs++] = pieces[k].value;
        } else {
            inputs[num_inputs++] = pieces[k].table;
            inputs[num_inputs++] = pieces[k].idx;
            g->nodes[pieces[k].gather].removed = true;
            if (pieces[k].unsq >= 0) g->nodes[pieces[k].unsq].removed = true;
        }
    }
    a->type = ATTR_INTS;
    a->ints = codes;
    a->n = (size_t)count;
    free(n->op_type);
    n->op_type = op_type;
    free(n->inputs);
    n->inputs = inputs;
    n->num_inputs = num_inputs;
    return CINFER_OK;
}

cinfer_status graph_fuse_lookup_concat(graph *g) {
    graph_recount_uses(g);
    bool changed = false;
    for (int c = 0; c < g->num_nodes; c++) {
        const graph_node *n = &g->nodes[c];
        if (!is_op(n, "Concat") || n->host_eval || n->num_outputs != 1 || n->num_inputs < 2 ||
            n->num_inputs > GRAPH_MAX_NODE_IO / 2)
            continue;
        lookup_piece pieces[GRAPH_MAX_NODE_IO / 2];
        int lookups = 0;
        int64_t axis = graph_attr_int(n, "axis", 0);
        for (int k = 0; k < n->num_inputs; k++) lookups += read_lookup(g, n->inputs[k], axis, &pieces[k]);
        if (lookups < 2) continue;
        CINFER_TRY(become_lookup_concat(g, c, pieces, g->nodes[c].num_inputs));
        changed = true;
    }
    if (!changed) return CINFER_OK;
    graph_compact(g);
    CINFER_TRY(graph_bind_schemas(g));
    graph_recount_uses(g);
    return CINFER_OK;
}
