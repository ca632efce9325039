/* Graph IR construction, lookup and attribute accessors. */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

graph *graph_create(void) { return calloc(1, sizeof(graph)); }

void graph_attr_clear(graph_attr *a) {
    free(a->name);
    free(a->s);
    free(a->floats);
    free(a->ints);
    if (a->strings)
        for (size_t i = 0; i < a->n; i++) free(a->strings[i]);
    free(a->strings);
    core_aligned_free(a->t.data);
    memset(a, 0, sizeof *a);
}

static void node_clear(graph_node *n) {
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->inputs);
    free(n->outputs);
    for (int i = 0; i < n->num_attrs; i++) graph_attr_clear(&n->attrs[i]);
    free(n->attrs);
    memset(n, 0, sizeof *n);
}

static void value_clear(graph_value *v) {
    free(v->name);
    for (int i = 0; i < CINFER_MAX_DIMS; i++) free(v->dim_names[i]);
    core_aligned_free(v->constant.data);
    memset(v, 0, sizeof *v);
}

void graph_free(graph *g) {
    if (!g) return;
    for (int i = 0; i < g->num_values; i++) value_clear(&g->values[i]);
    for (int i = 0; i < g->num_nodes; i++) node_clear(&g->nodes[i]);
    free(g->values);
    free(g->value_index);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->name);
    free(g->base_dir);
    free(g);
}

static char *dup_or_null(const char *s, bool *ok) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *ok = false;
    return d;
}

static void *dup_bytes(const void *src, size_t bytes, bool aligned, bool *ok) {
    if (!src) return NULL;
    void *d = aligned ? core_aligned_alloc(bytes) : malloc(bytes ? bytes : 1);
    if (!d) {
        *ok = false;
        return NULL;
    }
    if (bytes) memcpy(d, src, bytes);
    return d;
}

static void attr_copy(graph_attr *dst, const graph_attr *src, bool *ok) {
    *dst = *src;
    dst->name = dup_or_null(src->name, ok);
    dst->s = src->s ? dup_bytes(src->s, src->n + 1, false, ok) : NULL;
    dst->floats = dup_bytes(src->floats, sizeof(float) * src->n, false, ok);
    dst->ints = dup_bytes(src->ints, sizeof(int64_t) * src->n, false, ok);
    dst->strings = NULL;
    if (src->strings) {
        dst->strings = calloc(src->n ? src->n : 1, sizeof(char *));
        if (!dst->strings) *ok = false;
        else
            for (size_t i = 0; i < src->n; i++) dst->strings[i] = dup_or_null(src->strings[i], ok);
    }
    dst->t.data = dup_bytes(src->t.data, tensor_nbytes(&src->t), true, ok);
}

graph *graph_clone(const graph *src) {
    graph *g = graph_create();
    if (!g) return NULL;
    bool ok = true;
    g->opset = src->opset;
    g->name = dup_or_null(src->name, &ok);
    g->base_dir = dup_or_null(src->base_dir, &ok);
    g->num_nodes_original = src->num_nodes_original;
    g->evaluator = src->evaluator;
    g->values = calloc((size_t)(src->num_values ? src->num_values : 1), sizeof *g->values);
    g->nodes = calloc((size_t)(src->num_nodes ? src->num_nodes : 1), sizeof *g->nodes);
    g->inputs = dup_bytes(src->inputs, sizeof(int) * (size_t)src->num_inputs, false, &ok);
    g->outputs = dup_bytes(src->outputs, sizeof(int) * (size_t)src->num_outputs, false, &ok);
    if (!g->values || !g->nodes) ok = false;
    if (!ok) {
        graph_free(g);
        return NULL;
    }
    g->cap_values = src->num_values ? src->num_values : 1;
    g->cap_nodes = src->num_nodes ? src->num_nodes : 1;
    g->num_inputs = src->num_inputs;
    g->num_outputs = src->num_outputs;
    for (int v = 0; v < src->num_values; v++, g->num_values++) {
        const graph_value *s = &src->values[v];
        graph_value *d = &g->values[v];
        *d = *s;
        d->name = dup_or_null(s->name, &ok);
        for (int k = 0; k < CINFER_MAX_DIMS; k++) d->dim_names[k] = dup_or_null(s->dim_names[k], &ok);
        d->constant.data = s->kind == VALUE_CONSTANT ? dup_bytes(s->constant.data, tensor_nbytes(&s->constant), true, &ok)
                                                     : NULL;
    }
    for (int i = 0; i < src->num_nodes; i++, g->num_nodes++) {
        const graph_node *s = &src->nodes[i];
        graph_node *d = &g->nodes[i];
        *d = *s;
        d->name = dup_or_null(s->name, &ok);
        d->op_type = dup_or_null(s->op_type, &ok);
        d->domain = dup_or_null(s->domain, &ok);
        d->inputs = dup_bytes(s->inputs, sizeof(int) * (size_t)s->num_inputs, false, &ok);
        d->outputs = dup_bytes(s->outputs, sizeof(int) * (size_t)s->num_outputs, false, &ok);
        d->attrs = s->num_attrs ? calloc((size_t)s->num_attrs, sizeof *d->attrs) : NULL;
        d->num_attrs = 0;
        if (s->num_attrs && !d->attrs) ok = false;
        for (int a = 0; d->attrs && a < s->num_attrs; a++, d->num_attrs++) attr_copy(&d->attrs[a], &s->attrs[a], &ok);
    }
    if (!ok || !graph_reindex_values(g)) {
        graph_free(g);
        return NULL;
    }
    return g;
}

cinfer_status graph_node_add_attr(graph_node *n, const char *name, graph_attr **out) {
    graph_attr *attrs = realloc(n->attrs, sizeof(graph_attr) * (size_t)(n->num_attrs + 1));
    if (!attrs) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory adding attribute '%s' to node '%s'", name, n->name);
    n->attrs = attrs;
    graph_attr *a = &n->attrs[n->num_attrs];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    if (!a->name) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory adding attribute '%s' to node '%s'", name, n->name);
    n->num_attrs++;
    *out = a;
    return CINFER_OK;
}

cinfer_status graph_node_add_int_attr(graph_node *n, const char *name, int64_t value) {
    graph_attr *a = NULL; /* set when the call succeeds; GCC cannot tell that core_error returns non-OK */
    CINFER_TRY(graph_node_add_attr(n, name, &a));
    a->type = ATTR_INT;
    a->i = value;
    return CINFER_OK;
}

cinfer_status graph_node_add_scalar_tensor_attr(graph_node *n, const char *name, cinfer_dtype dtype, const void *value) {
    graph_attr *a = NULL;
    CINFER_TRY(graph_node_add_attr(n, name, &a));
    a->type = ATTR_TENSOR;
    a->t.dtype = dtype;
    a->t.ndim = 1;
    a->t.dims[0] = 1;
    size_t size = cinfer_dtype_size(dtype);
    if (!(a->t.data = core_aligned_alloc(size)))
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "node '%s': out of memory for attribute '%s'", n->name, name);
    memcpy(a->t.data, value, size);
    return CINFER_OK;
}

/* FNV-1a: names are short; a simple hash keeps lookups O(1) so loading stays linear in the model size. */
static uint32_t name_hash(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) h = (h ^ *c) * 16777619u;
    return h;
}

static void index_insert(graph *g, int value) {
    uint32_t mask = (uint32_t)g->value_index_cap - 1;
    uint32_t slot = name_hash(g->values[value].name) & mask;
    while (g->value_index[slot] >= 0) slot = (slot + 1) & mask;
    g->value_index[slot] = value;
}

bool graph_reindex_values(graph *g) {
    int cap = 64;
    while (cap < 2 * g->num_values + 2) cap *= 2;
    int *index = malloc(sizeof(int) * (size_t)cap);
    if (!index) return false;
    for (int i = 0; i < cap; i++) index[i] = -1;
    free(g->value_index);
    g->value_index = index;
    g->value_index_cap = cap;
    for (int v = 0; v < g->num_values; v++) index_insert(g, v);
    return true;
}

int graph_find_value(const graph *g, const char *name) {
    if (!g->value_index) return -1;
    uint32_t mask = (uint32_t)g->value_index_cap - 1;
    for (uint32_t slot = name_hash(name) & mask; g->value_index[slot] >= 0; slot = (slot + 1) & mask)
        if (strcmp(g->values[g->value_index[slot]].name, name) == 0) return g->value_index[slot];
    return -1;
}

int graph_intern_value(graph *g, const char *name) {
    int idx = graph_find_value(g, name);
    if (idx >= 0) return idx;
    if (g->num_values == g->cap_values) {
        int cap = g->cap_values ? g->cap_values * 2 : 64;
        graph_value *v = realloc(g->values, (size_t)cap * sizeof *v);
        if (!v) return -1;
        g->values = v;
        g->cap_values = cap;
    }
    graph_value *v = &g->values[g->num_values];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) return -1;
    v->ndim = -1;
    v->producer = -1;
    g->num_values++;
    if (2 * g->num_values + 2 > g->value_index_cap) {
        if (!graph_reindex_values(g)) return -1;
    } else {
        index_insert(g, g->num_values - 1);
    }
    return g->num_values - 1;
}

int graph_new_value(graph *g, const char *base) {
    char name[512];
    snprintf(name, sizeof name, "%s", base);
    for (int suffix = 1; graph_find_value(g, name) >= 0; suffix++) snprintf(name, sizeof name, "%s.%d", base, suffix);
    return graph_intern_value(g, name);
}

int graph_new_constant(graph *g, const char *base, const tensor *t) {
    tensor c = *t; /* t may point into g->values, which graph_new_value can move */
    c.data = core_aligned_alloc(tensor_nbytes(t));
    if (!c.data) return -1;
    memcpy(c.data, t->data, tensor_nbytes(t));
    int v = graph_new_value(g, base);
    if (v < 0) {
        core_aligned_free(c.data);
        return -1;
    }
    graph_value *gv = &g->values[v];
    gv->kind = VALUE_CONSTANT;
    gv->dtype = c.dtype;
    gv->ndim = c.ndim;
    memcpy(gv->dims, c.dims, sizeof gv->dims);
    gv->constant = c;
    return v;
}

int graph_add_node(graph *g, const char *name, const char *op_type, const char *domain, int64_t opset,
                   const int *inputs, int num_inputs, const int *outputs, int num_outputs) {
    if (g->num_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        graph_node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    graph_node *n = &g->nodes[g->num_nodes];
    memset(n, 0, sizeof *n);
    n->name = strdup(name);
    n->op_type = strdup(op_type);
    n->domain = strdup(domain ? domain : "");
    n->opset = opset;
    n->inputs = malloc(sizeof(int) * (size_t)(num_inputs ? num_inputs : 1));
    n->outputs = malloc(sizeof(int) * (size_t)(num_outputs ? num_outputs : 1));
    if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs) {
        node_clear(n);
        return -1;
    }
    if (num_inputs) memcpy(n->inputs, inputs, sizeof(int) * (size_t)num_inputs);
    if (num_outputs) memcpy(n->outputs, outputs, sizeof(int) * (size_t)num_outputs);
    n->num_inputs = num_inputs;
    n->num_outputs = num_outputs;
    return g->num_nodes++;
}

const graph_attr *graph_node_attr(const graph_node *n, const char *name) {
    for (int i = 0; i < n->num_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t graph_attr_int(const graph_node *n, const char *name, int64_t dflt) {
    const graph_attr *a = graph_node_attr(n, name);
    return a && a->type == ATTR_INT ? a->i : dflt;
}

float graph_attr_float(const graph_node *n, const char *name, float dflt) {
    const graph_attr *a = graph_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == ATTR_FLOAT) return a->f;
    if (a->type == ATTR_INT) return (float)a->i;
    return dflt;
}

const char *graph_attr_string(const graph_node *n, const char *name, const char *dflt) {
    const graph_attr *a = graph_node_attr(n, name);
    return a && a->type == ATTR_STRING ? a->s : dflt;
}

const int64_t *graph_attr_ints(const graph_node *n, const char *name, size_t *count) {
    const graph_attr *a = graph_node_attr(n, name);
    if (!a || a->type != ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    static const int64_t empty[1] = {0};
    return a->ints ? a->ints : empty;
}

const float *graph_attr_floats(const graph_node *n, const char *name, size_t *count) {
    const graph_attr *a = graph_node_attr(n, name);
    if (!a || a->type != ATTR_FLOATS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    static const float empty[1] = {0};
    return a->floats ? a->floats : empty;
}
