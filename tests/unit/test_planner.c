/* Unit tests of graph/planner: reuse after last use, in-place hand-over, and on random DAGs that no two
 * values alive at the same time share bytes. */
#include <stdlib.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"
#include "graph/planner.h"
#include "test_util.h"

static const op_schema plain_schema = {"Plain", NULL, 0, 0, 0, -1};
static const op_schema inplace_schema = {"InPlace", NULL, 0, OP_FLAG_INPLACE, 0, -1};

static int add_value(graph *g, int i) {
    char name[32];
    snprintf(name, sizeof name, "v%d", i);
    return graph_intern_value(g, name);
}

/* x -> n0 -> v1 -> n1 -> v2 -> ... -> vN (model output) */
static graph *make_chain(int length, const op_schema *schema) {
    graph *g = graph_create();
    int prev = add_value(g, 0);
    g->values[prev].kind = VALUE_INPUT;
    for (int i = 1; i <= length; i++) {
        int v = add_value(g, i);
        int idx = graph_add_node(g, "n", schema->op_type, "", 18, &prev, 1, &v, 1);
        g->nodes[idx].schema = schema;
        prev = v;
    }
    g->values[prev].is_output = true;
    return g;
}

static void test_chain(const op_schema *schema, size_t expected_arena) {
    graph *g = make_chain(6, schema);
    bool runs[6];
    tensor shapes[7];
    bool in_arena[7];
    int64_t offsets[7];
    for (int i = 0; i < 6; i++) runs[i] = true;
    for (int v = 0; v < 7; v++) {
        shapes[v] = (tensor){.dtype = CINFER_DTYPE_UINT8, .ndim = 1, .dims = {1000}};
        in_arena[v] = v != 0 && v != 6; /* input and output live outside */
    }
    size_t arena = 0;
    CHECK(graph_plan_memory(g, runs, shapes, in_arena, offsets, &arena) == CINFER_OK);
    CHECK(arena == expected_arena);
    CHECK(offsets[0] == -1 && offsets[6] == -1);
    for (int v = 1; v < 6; v++) CHECK(offsets[v] >= 0 && offsets[v] % PLANNER_ALIGNMENT == 0);
    graph_free(g);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_random(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random DAG: node i consumes 1-3 earlier values; checks disjointness of simultaneously live blocks. */
static void test_random_dag(int num_nodes) {
    graph *g = graph_create();
    int x = add_value(g, 0);
    g->values[x].kind = VALUE_INPUT;
    for (int i = 0; i < num_nodes; i++) {
        int ins[3], nin = 1 + (int)(next_random() % 3);
        for (int k = 0; k < nin; k++) ins[k] = (int)(next_random() % (uint64_t)g->num_values);
        int out = add_value(g, i + 1);
        int idx = graph_add_node(g, "n", "X", "", 18, ins, nin, &out, 1);
        g->nodes[idx].schema = next_random() % 2 ? &inplace_schema : &plain_schema;
    }
    g->values[g->num_values - 1].is_output = true;
    int nv = g->num_values;
    bool *runs = calloc((size_t)num_nodes, sizeof(bool)), *in_arena = calloc((size_t)nv, sizeof(bool));
    size_t *bytes = calloc((size_t)nv, sizeof(size_t));
    tensor *shapes = calloc((size_t)nv, sizeof(tensor));
    int64_t *offsets = calloc((size_t)nv, sizeof(int64_t));
    int *start = calloc((size_t)nv, sizeof(int)), *end = calloc((size_t)nv, sizeof(int));
    for (int i = 0; i < num_nodes; i++) runs[i] = true;
    size_t total = 0;
    for (int v = 0; v < nv; v++) {
        bytes[v] = 1 + next_random() % 5000;
        shapes[v] = (tensor){.dtype = CINFER_DTYPE_UINT8, .ndim = 1, .dims = {(int64_t)bytes[v]}};
        in_arena[v] = v != 0 && !g->values[v].is_output;
        if (in_arena[v]) total += bytes[v];
        start[v] = v - 1; /* value v is produced by node v-1 */
        end[v] = start[v];
    }
    for (int i = 0; i < num_nodes; i++)
        for (int k = 0; k < g->nodes[i].num_inputs; k++)
            if (end[g->nodes[i].inputs[k]] < i) end[g->nodes[i].inputs[k]] = i;
    size_t arena = 0;
    CHECK(graph_plan_memory(g, runs, shapes, in_arena, offsets, &arena) == CINFER_OK);
    CHECK(arena < total + (size_t)nv * PLANNER_ALIGNMENT);
    int conflicts = 0;
    for (int u = 1; u < nv; u++)
        for (int v = u + 1; v < nv; v++) {
            if (!in_arena[u] || !in_arena[v]) continue;
            if (start[u] > end[v] || start[v] > end[u]) continue; /* never alive together */
            /* allowed: v written in place over u at the node where u dies */
            const graph_node *n = &g->nodes[start[v]];
            if (end[u] == start[v] && n->inputs[0] == u && n->schema == &inplace_schema && offsets[u] == offsets[v]) continue;
            bool disjoint = offsets[u] + (int64_t)bytes[u] <= offsets[v] || offsets[v] + (int64_t)bytes[v] <= offsets[u];
            if (!disjoint) conflicts++;
        }
    CHECK(conflicts == 0);
    free(runs); free(in_arena); free(bytes); free(shapes); free(offsets); free(start); free(end);
    graph_free(g);
}

/* An in-place op whose output has other element count or size than its input must not take its block:
 * int32 [1,4] (16 bytes) -> bool [4,4] (16 bytes) would be overwritten while still being read. */
static void test_inplace_needs_same_layout(void) {
    graph *g = make_chain(2, &inplace_schema);
    bool runs[2] = {true, true};
    tensor shapes[3] = {{.dtype = CINFER_DTYPE_INT32, .ndim = 2, .dims = {1, 4}},
                        {.dtype = CINFER_DTYPE_INT32, .ndim = 2, .dims = {1, 4}},
                        {.dtype = CINFER_DTYPE_BOOL, .ndim = 2, .dims = {4, 4}}};
    bool in_arena[3] = {false, true, true};
    g->values[2].is_output = false;
    int64_t offsets[3];
    size_t arena = 0;
    CHECK(graph_plan_memory(g, runs, shapes, in_arena, offsets, &arena) == CINFER_OK);
    CHECK(offsets[1] != offsets[2]);
    CHECK(arena == 2 * PLANNER_ALIGNMENT);
    graph_free(g);
}

int main(void) {
    test_inplace_needs_same_layout();
    test_chain(&plain_schema, 2048);   /* two live 1000-byte blocks (1024 aligned) at a time */
    test_chain(&inplace_schema, 1024); /* every node writes over its input */
    for (int i = 0; i < 50; i++) test_random_dag(10 + i * 4);
    TEST_MAIN_END();
}
