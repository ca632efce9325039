/* Unit tests of the load-time passes over an injected node evaluator (graph_evaluator_i), a fake here rather than a
 * backend: constant folding evaluates through it with its context, schema binding refuses the ops it denies and
 * names them, and a clone keeps it. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "test_util.h"

typedef struct fake_evaluator {
    const char *denied_op; /* has_op says false for this op_type; NULL: none */
    int runs;
    char last_op[32];
} fake_evaluator;

static bool fake_has_op(void *ctx, const char *op_type) {
    const fake_evaluator *f = ctx;
    return !f->denied_op || strcmp(op_type, f->denied_op) != 0;
}

/* Evaluates float Add of two equal-shaped inputs, the only op the tests fold; anything else is an error. */
static cinfer_status fake_run_node(void *ctx, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    fake_evaluator *f = ctx;
    f->runs++;
    snprintf(f->last_op, sizeof f->last_op, "%s", n->op_type);
    if (strcmp(n->op_type, "Add") != 0 || num_in != 2 || num_out != 1 || !out[0].data)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the fake evaluator folds only Add", n->op_type, n->name);
    for (int64_t i = 0; i < tensor_numel(&out[0]); i++)
        ((float *)out[0].data)[i] = ((const float *)in[0].data)[i] + ((const float *)in[1].data)[i];
    return CINFER_OK;
}

static const struct graph_evaluator_i fake_iface = {.has_op = fake_has_op, .run_node = fake_run_node};

/* y = x * (a + b) with a, b constant [3] floats and x a model input [3]: the Add folds, the Mul stays. */
static graph *make_graph(fake_evaluator *f) {
    graph *g = graph_create();
    float a_data[3] = {1, 2, 3}, b_data[3] = {10, 20, 30};
    tensor a = {.dtype = CINFER_DTYPE_FLOAT, .ndim = 1, .dims = {3}, .data = a_data};
    tensor b = a;
    b.data = b_data;
    int va = graph_new_constant(g, "a", &a), vb = graph_new_constant(g, "b", &b);
    int x = graph_intern_value(g, "x"), c = graph_intern_value(g, "c"), y = graph_intern_value(g, "y");
    g->values[x].kind = VALUE_INPUT;
    g->values[x].dtype = CINFER_DTYPE_FLOAT;
    g->values[x].ndim = 1;
    g->values[x].dims[0] = 3;
    g->values[y].is_output = true;
    g->inputs = malloc(sizeof(int));
    g->outputs = malloc(sizeof(int));
    g->inputs[0] = x;
    g->outputs[0] = y;
    g->num_inputs = g->num_outputs = 1;
    int add_in[2] = {va, vb}, mul_in[2] = {x, c};
    graph_add_node(g, "add0", "Add", "", 18, add_in, 2, &c, 1);
    graph_add_node(g, "mul0", "Mul", "", 18, mul_in, 2, &y, 1);
    g->evaluator = (graph_evaluator){.iface = &fake_iface, .context = f};
    return g;
}

static void test_folding_goes_through_the_evaluator(void) {
    fake_evaluator f = {0};
    graph *g = make_graph(&f);
    CHECK(graph_sort(g) == CINFER_OK);
    CHECK(graph_bind_schemas(g) == CINFER_OK);
    CHECK(graph_optimize(g) == CINFER_OK);
    CHECK(f.runs == 1 && strcmp(f.last_op, "Add") == 0);
    CHECK(g->num_nodes == 1 && strcmp(g->nodes[0].op_type, "Mul") == 0);
    int c = g->nodes[0].inputs[1];
    CHECK(c >= 0 && g->values[c].kind == VALUE_CONSTANT);
    if (c >= 0 && g->values[c].kind == VALUE_CONSTANT) {
        const float *folded = g->values[c].constant.data;
        CHECK(folded[0] == 11 && folded[1] == 22 && folded[2] == 33);
    }
    graph_free(g);
}

static void test_evaluator_failure_fails_the_load(void) {
    fake_evaluator f = {0};
    graph *g = make_graph(&f);
    free(g->nodes[0].op_type); /* Sub: bound (the fake has every op) but not foldable by it */
    g->nodes[0].op_type = strdup("Sub");
    CHECK(graph_sort(g) == CINFER_OK);
    CHECK(graph_bind_schemas(g) == CINFER_OK);
    CHECK(graph_fold_constants(g) == CINFER_ERR_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("Sub node 'add0': the fake evaluator folds only Add");
    graph_free(g);
}

static void test_binding_refuses_denied_ops(void) {
    fake_evaluator f = {.denied_op = "Mul"};
    graph *g = make_graph(&f);
    CHECK(graph_sort(g) == CINFER_OK);
    CHECK(graph_bind_schemas(g) == CINFER_ERR_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("1 unsupported node (op, domain, opset): 'mul0' (Mul, ai.onnx v");
    CHECK(f.runs == 0);
    graph_free(g);
}

static void test_clone_keeps_the_evaluator(void) {
    fake_evaluator f = {0};
    graph *g = make_graph(&f);
    graph *copy = graph_clone(g);
    CHECK(copy && copy->evaluator.iface == &fake_iface && copy->evaluator.context == &f);
    graph_free(copy);
    graph_free(g);
}

int main(void) {
    test_folding_goes_through_the_evaluator();
    test_evaluator_failure_fails_the_load();
    test_binding_refuses_denied_ops();
    test_clone_keeps_the_evaluator();
    TEST_MAIN_END();
}
