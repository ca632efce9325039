/* Static shapes of intermediate values, worked out at load by probing, for the fusions that need them.
 *
 * Many files describe no intermediate shapes (torch's legacy exporter writes no value_info), so a fusion could not
 * tell that an Add joins two tensors of one shape or that a Reshape splits [batch, seq, 768] into 12 heads. Rather
 * than a symbolic shape algebra beside the op schemas, the graph is shape-inferred by those same schemas, the way a
 * plan is (shape subgraphs evaluated on the host), at four probe sizes of its dynamic input dims (probe_size). A
 * dim of one size in every probe that reached it is static; one that follows a named input dim in every probe takes
 * its name; any other (batch * seq, say) is dynamic and unnamed; a rank that differs between probes is unknown.
 * Values no probe pair reached (a node the first sizes fail, or one after a data-dependent node such as NonZero, whose
 * output shapes follow values computed at run time) keep what the file said.
 *
 * This samples the sizes rather than proving a rule for all of them: shape arithmetic that only sizes outside the
 * probes reveal (a clamp at 2000) would be missed. The probes cover the forms exporters write (dims copied through
 * Shape/Gather/Concat, products, slices and clamps of them, size-1 broadcasting), and the fused Attention checks its
 * mask at plan time again (graph/shape/attention.c), as a guard.
 *
 * What the probes find replaces the file's value_info for the value (shape_probed): it is what a plan will compute,
 * while the file's shapes are the exporter's claim. Model inputs and outputs keep the file's description (callers
 * see it). */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"

enum { NUM_PROBES = 4 };
/* Shape subgraphs are small; a host-evaluated node bigger than this (a file asking for a huge ConstantOfShape, say)
 * is left unknown rather than computed at load. */
#define PROBE_MAX_HOST_BYTES ((size_t)16 << 20)

/* Size of the index-th dynamic input dim in each probe:
 *  0 and 1: 40 + 3i and 70 + 5i tell the dims apart: no constant offset or factor takes one dim's sizes to
 *           another's in both (differences 3k against 5k, ratios (40+3a)/(40+3b) against (70+5a)/(70+5b));
 *  2:       1 everywhere: a clamp, a slice or a round-up that the first two sizes pass alike (Min(s, 32), Slice to
 *           32, padding to an even length) gives another size here, and a Squeeze of a size-1 dim another rank;
 *  3:       1009 + 4i: large, for the clamps above the first sizes (Min(s, 512)).
 * A claim (a static size, a symbol, the rank) must hold in every probe that reached the value; a probe that stops
 * before it (a model that takes at most 512 positions fails at 1009) means the model refuses those sizes. */
static int64_t probe_size(int index, int probe) {
    switch (probe) {
    case 0: return 40 + 3 * (int64_t)index;
    case 1: return 70 + 5 * (int64_t)index;
    case 2: return 1;
    default: return 1009 + 4 * (int64_t)index;
    }
}

typedef struct symbol_table {
    int count;
    const char **names; /* the input dims' names (the graph owns them) */
} symbol_table;

/* The index of the symbol named `name`, added when new; -1 on OOM. */
static int symbol_index(symbol_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->names[i], name) == 0) return i;
    const char **grown = realloc(t->names, sizeof *grown * (size_t)(t->count + 1));
    if (!grown) return -1;
    t->names = grown;
    t->names[t->count] = name;
    return t->count++;
}

typedef struct probe {
    tensor *values; /* per value: dtype and dims (and host data where known) */
    bool *known;
    void **owned; /* host data the probe computed */
} probe;

static void probe_free(const graph *g, probe *p) {
    if (p->owned)
        for (int v = 0; v < g->num_values; v++) core_aligned_free(p->owned[v]);
    free(p->values);
    free(p->known);
    free(p->owned);
}

/* Infers node n's outputs from p's inputs (and evaluates it on the host when it computes a shape). False when it
 * cannot be at these sizes: an input unknown, a shape error, a host input without data. */
static bool probe_node(const graph *g, const graph_node *n, probe *p) {
    tensor in[GRAPH_MAX_NODE_IO], out[GRAPH_MAX_NODE_IO];
    /* a data-dependent node's outputs (NonZero...) have shapes no probe size decides: they and what follows from
     * them stay as the file describes them; evaluated on the host, its kernel gives the actual shape */
    if ((n->schema->flags & OP_FLAG_DATA_DEPENDENT) && !n->host_eval) return false;
    for (int k = 0; k < n->num_inputs; k++) {
        int v = n->inputs[k];
        if (v < 0) {
            memset(&in[k], 0, sizeof in[k]);
            continue;
        }
        if (!p->known[v]) return false;
        in[k] = p->values[v];
        bool reads_data = n->host_eval || (k < 32 && ((n->schema->value_inputs >> k) & 1u));
        if (reads_data && !in[k].data && !(n->schema->flags & OP_FLAG_SHAPE_ONLY) && tensor_nbytes(&in[k]) > 0)
            return false; /* a value input's data: the caller's, unknown at load */
    }
    memset(out, 0, sizeof(tensor) * (size_t)n->num_outputs);
    if (n->schema->infer(n, in, n->num_inputs, out, n->num_outputs) != CINFER_OK) {
        core_clear_error();
        return false;
    }
    for (int k = 0; k < n->num_outputs; k++) {
        if (out[k].ndim < 0 || out[k].ndim > CINFER_MAX_DIMS || !tensor_size_fits(&out[k])) return false;
        for (int d = 0; d < out[k].ndim; d++)
            if (out[k].dims[d] < 0) return false;
        out[k].data = NULL;
    }
    if (n->host_eval) {
        size_t bytes = 0;
        for (int k = 0; k < n->num_outputs; k++) bytes += tensor_nbytes(&out[k]);
        if (bytes > PROBE_MAX_HOST_BYTES) return false;
        bool ok = true;
        for (int k = 0; k < n->num_outputs && ok; k++) ok = (out[k].data = core_aligned_alloc(tensor_nbytes(&out[k]))) != NULL;
        ok = ok && graph_evaluate_node(g, n, in, n->num_inputs, out, n->num_outputs) == CINFER_OK;
        if (!ok) {
            core_clear_error();
            for (int k = 0; k < n->num_outputs; k++) core_aligned_free(out[k].data);
            return false;
        }
    }
    for (int k = 0; k < n->num_outputs; k++) {
        int v = n->outputs[k];
        if (v < 0) {
            core_aligned_free(out[k].data);
            continue;
        }
        p->values[v] = out[k];
        p->owned[v] = out[k].data;
        p->known[v] = true;
    }
    return true;
}

/* One probe: inputs at their static dims, dynamic ones at probe sizes (a named dim at its symbol's). */
static cinfer_status run_probe(const graph *g, symbol_table *symbols, int which, probe *p) {
    int nv = g->num_values > 0 ? g->num_values : 1;
    p->values = calloc((size_t)nv, sizeof *p->values);
    p->known = calloc((size_t)nv, sizeof *p->known);
    p->owned = calloc((size_t)nv, sizeof *p->owned);
    if (!p->values || !p->known || !p->owned) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while inferring shapes");
    for (int v = 0; v < g->num_values; v++)
        if (g->values[v].kind == VALUE_CONSTANT) {
            p->values[v] = g->values[v].constant;
            p->known[v] = true;
        }
    int unnamed = 0;
    for (int i = 0; i < g->num_inputs; i++) {
        const graph_value *gv = &g->values[g->inputs[i]];
        if (gv->ndim < 0 || gv->dtype == CINFER_DTYPE_UNDEFINED) continue;
        tensor *t = &p->values[g->inputs[i]];
        t->dtype = gv->dtype;
        t->ndim = gv->ndim;
        for (int d = 0; d < gv->ndim; d++) {
            if (gv->dims[d] >= 0) {
                t->dims[d] = gv->dims[d];
                continue;
            }
            int s = gv->dim_names[d] ? symbol_index(symbols, gv->dim_names[d]) : -1;
            if (gv->dim_names[d] && s < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while inferring shapes");
            /* unnamed dims take sizes after every possible symbol's, so none matches a symbol */
            t->dims[d] = probe_size(s >= 0 ? s : g->num_inputs * CINFER_MAX_DIMS + unnamed++, which);
        }
        p->known[g->inputs[i]] = tensor_size_fits(t); /* a file may declare [2^32, 2^32, 8]: that input stays unknown */
    }
    for (int i = 0; i < g->num_nodes; i++)
        if (!g->nodes[i].removed) probe_node(g, &g->nodes[i], p);
    return CINFER_OK;
}

/* Sets dim d of v: a static size, or dynamic with the name (NULL: unnamed). */
static cinfer_status set_dim(graph_value *v, int d, int64_t size, const char *name) {
    char *copy = NULL;
    if (name && !(copy = strdup(name))) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while inferring shapes");
    free(v->dim_names[d]);
    v->dim_names[d] = copy;
    v->dims[d] = size;
    return CINFER_OK;
}

/* Writes what every probe that reached v agrees on into v (see the file comment); v was reached by probes 0 and 1. */
static cinfer_status record_value(graph_value *v, const probe *probes, int index, const symbol_table *symbols) {
    const tensor *a = &probes[0].values[index];
    bool same_rank = true;
    for (int p = 1; p < NUM_PROBES; p++)
        if (probes[p].known[index])
            same_rank = same_rank && probes[p].values[index].ndim == a->ndim && probes[p].values[index].dtype == a->dtype;
    for (int d = 0; d < CINFER_MAX_DIMS; d++) CINFER_TRY(set_dim(v, d, -1, NULL));
    v->shape_probed = same_rank;
    if (!same_rank) { /* the rank follows the sizes (a Squeeze of a dim that can be 1): not static */
        v->ndim = -1;
        return CINFER_OK;
    }
    if (v->dtype == CINFER_DTYPE_UNDEFINED) v->dtype = a->dtype;
    v->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        bool fixed = true;
        for (int p = 1; p < NUM_PROBES; p++)
            if (probes[p].known[index]) fixed = fixed && probes[p].values[index].dims[d] == a->dims[d];
        if (fixed) {
            v->dims[d] = a->dims[d];
            continue;
        }
        const char *name = NULL;
        for (int s = 0; s < symbols->count && !name; s++) {
            bool follows = true;
            for (int p = 0; p < NUM_PROBES; p++)
                if (probes[p].known[index]) follows = follows && probes[p].values[index].dims[d] == probe_size(s, p);
            if (follows) name = symbols->names[s];
        }
        CINFER_TRY(set_dim(v, d, -1, name)); /* dynamic: a symbol's name, or none (batch * seq, say) */
    }
    return CINFER_OK;
}

cinfer_status graph_infer_static_shapes(graph *g) {
    probe probes[NUM_PROBES] = {{0}};
    symbol_table symbols = {0};
    cinfer_status st = CINFER_OK;
    for (int p = 0; p < NUM_PROBES && st == CINFER_OK; p++) st = run_probe(g, &symbols, p, &probes[p]);
    for (int v = 0; v < g->num_values && st == CINFER_OK; v++) {
        graph_value *gv = &g->values[v];
        if (gv->kind != VALUE_INTERMEDIATE || gv->is_output || !probes[0].known[v] || !probes[1].known[v]) continue;
        st = record_value(gv, probes, v, &symbols);
    }
    for (int p = 0; p < NUM_PROBES; p++) probe_free(g, &probes[p]);
    free(symbols.names);
    return st;
}
