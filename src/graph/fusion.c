/* Load-time fusion passes that cut kernels per run without changing results beyond float rounding:
 *
 *  - common subexpressions: a node equal to an earlier one (same op, inputs and attributes) is dropped and its
 *    uses read the earlier outputs (BERT exports rebuild the same attention mask in every layer);
 *  - GELU: x * 0.5 * (1 + erf(x / sqrt(2))), in the orders exporters write it, becomes one Gelu node
 *    (five elementwise kernels -> one);
 *  - Softmax NaN guard: Where(IsNaN(p), 0, p) after a Softmax becomes the Softmax's "cinfer_nan_to_zero";
 *  - Relu(Conv(x) + r): the Conv adds the residual r (and applies the Relu) in its bias pass;
 *  - LayerNormalization(a + b) with a and b of one shape (BERT's residual joins): the LayerNorm reads b as a 4th
 *    input and adds it as it loads the row;
 *  - MatMul(X, W) + b with constant W and b: a Gemm with a bias epilogue over X's rows (reshaped around it), W
 *    stored transposed ([N, K], transB = 1: nn.Linear's layout, for which cuBLASLt has its faster kernels);
 *  - scale folding: Mul(Linear(x), c) or Div(Linear(x), c) with a scalar constant c, where only Reshape/Transpose-like reindexing sits
 *    between, folds c into the Linear's weight and bias (attention's 1/sqrt(sqrt(d)) on Q and K);
 *  - attention (graph_fuse_attention, after the others): softmax(Q.K^T * s + mask).V between the head split and
 *    merge of 3-D projections becomes one Attention node (opset 23 semantics, 3-D inputs), which the GPU runs as one
 *    fused kernel (tensor cores in half precision, FMA units in float32), and the CPU with no layout copies; then
 *    its Q, K and V projections of one input become one GEMM whose output it reads in thirds ("cinfer_packed_qkv");
 *  - elementwise chains (graph_fuse_elementwise_chains, before the attention): runs of float elementwise steps with scalar constants
 *    (Sub, Div, Add, Clip, Relu, Sigmoid...) become one ElementwiseChain node, one pass over memory instead of one
 *    per step; in half-precision graphs it also takes in the precision casts at its ends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"
#include "graph/shape/elementwise_chain.h"

static bool is_op(const graph_node *n, const char *op) { return !n->removed && strcmp(n->op_type, op) == 0; }

static int producer_node(const graph *g, int v) { return v >= 0 ? g->values[v].producer : -1; }

/* Read by exactly one node and not a model output: a pass may rewrite its producer. */
static bool single_use(const graph *g, int v) { return v >= 0 && g->values[v].num_consumers == 1 && !g->values[v].is_output; }

/* Read by exactly one node for its contents (Shape-like readers of its dims only do not count), and not a model
 * output: rewriting how it is computed keeps its shape, so those readers are unaffected. */
static bool single_data_use(const graph *g, int v) {
    if (v < 0 || g->values[v].is_output) return false;
    int uses = 0;
    for (int i = 0; i < g->num_nodes && uses <= 1; i++) {
        const graph_node *n = &g->nodes[i];
        if (n->removed || (n->schema && (n->schema->flags & OP_FLAG_SHAPE_ONLY))) continue;
        for (int k = 0; k < n->num_inputs; k++) uses += n->inputs[k] == v;
    }
    return uses == 1;
}

/* The first node reading value v, Shape-like readers of its dims skipped when `data_only`; -1 when none. Where
 * single_use(v) (single_data_use(v)) holds, it is the one reader (of its contents). */
static int first_consumer(const graph *g, int v, bool data_only) {
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *n = &g->nodes[i];
        if (n->removed || (data_only && n->schema && (n->schema->flags & OP_FLAG_SHAPE_ONLY))) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] == v) return i;
    }
    return -1;
}

static int only_consumer(const graph *g, int v) { return first_consumer(g, v, false); }

static bool scalar_float(const graph *g, int v, double *out) {
    if (v < 0 || g->values[v].kind != VALUE_CONSTANT) return false;
    const tensor *t = &g->values[v].constant;
    if (t->dtype != CINFER_DTYPE_FLOAT || tensor_numel(t) != 1) return false;
    *out = ((const float *)t->data)[0];
    return true;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-5 * fabs(b); }

/* For a binary node with one scalar-constant operand near `want`, the other operand; else -1. */
static int other_operand(const graph *g, const graph_node *n, double want, bool either_order) {
    double c;
    if (n->num_inputs != 2) return -1;
    if (scalar_float(g, n->inputs[1], &c) && near(c, want)) return n->inputs[0];
    if (either_order && scalar_float(g, n->inputs[0], &c) && near(c, want)) return n->inputs[1];
    return -1;
}

/* Points every use of value `from` at `to`. */
static void replace_uses(graph *g, int from, int to) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        if (n->removed) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] == from) n->inputs[k] = to;
    }
}

/* ---- common subexpressions ---- */

static bool same_attr(const graph_attr *a, const graph_attr *b) {
    if (strcmp(a->name, b->name) != 0 || a->type != b->type || a->n != b->n) return false;
    switch (a->type) {
    case ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case ATTR_INT: return a->i == b->i;
    case ATTR_STRING: return memcmp(a->s, b->s, a->n) == 0;
    case ATTR_FLOATS: return memcmp(a->floats, b->floats, sizeof(float) * a->n) == 0;
    case ATTR_INTS: return memcmp(a->ints, b->ints, sizeof(int64_t) * a->n) == 0;
    case ATTR_STRINGS:
        for (size_t i = 0; i < a->n; i++)
            if (strcmp(a->strings[i], b->strings[i]) != 0) return false;
        return true;
    case ATTR_TENSOR:
        return a->t.dtype == b->t.dtype && a->t.ndim == b->t.ndim &&
               memcmp(a->t.dims, b->t.dims, sizeof(int64_t) * (size_t)a->t.ndim) == 0 &&
               tensor_nbytes(&a->t) == tensor_nbytes(&b->t) && memcmp(a->t.data, b->t.data, tensor_nbytes(&a->t)) == 0;
    }
    return false;
}

static bool same_node(const graph_node *a, const graph_node *b) {
    if (strcmp(a->op_type, b->op_type) != 0 || strcmp(a->domain, b->domain) != 0 || a->opset != b->opset ||
        a->num_inputs != b->num_inputs || a->num_outputs != b->num_outputs || a->num_attrs != b->num_attrs)
        return false;
    if (memcmp(a->inputs, b->inputs, sizeof(int) * (size_t)a->num_inputs) != 0) return false;
    for (int i = 0; i < a->num_attrs; i++) {
        const graph_attr *other = graph_node_attr(b, a->attrs[i].name);
        if (!other || !same_attr(&a->attrs[i], other)) return false;
    }
    return true;
}

/* Ops whose every run differs, or with no inputs to compare by. */
static bool never_merged(const graph_node *n) {
    return n->num_inputs == 0 || strncmp(n->op_type, "Random", 6) == 0 || strcmp(n->op_type, "Bernoulli") == 0 ||
           strcmp(n->op_type, "Multinomial") == 0;
}

static uint64_t node_key(const graph_node *n) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = n->op_type; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    for (int k = 0; k < n->num_inputs; k++) h = (h ^ (uint64_t)(uint32_t)n->inputs[k]) * 1099511628211ull;
    return h;
}

/* Small constants with equal contents become one value, so nodes reading copies of the same constant compare equal
 * (exporters write one scalar per layer). */
#define DEDUP_MAX_BYTES 4096

static void merge_equal_constants(graph *g) {
    bool any = false;
    for (int v = 0; v < g->num_values; v++) {
        const graph_value *a = &g->values[v];
        if (a->kind != VALUE_CONSTANT || a->is_output || tensor_nbytes(&a->constant) > DEDUP_MAX_BYTES || !a->num_consumers)
            continue;
        for (int u = 0; u < v; u++) {
            const graph_value *b = &g->values[u];
            if (b->kind != VALUE_CONSTANT || !b->num_consumers || b->constant.dtype != a->constant.dtype ||
                b->constant.ndim != a->constant.ndim ||
                memcmp(b->constant.dims, a->constant.dims, sizeof(int64_t) * (size_t)a->constant.ndim) != 0 ||
                tensor_nbytes(&b->constant) != tensor_nbytes(&a->constant) ||
                memcmp(b->constant.data, a->constant.data, tensor_nbytes(&a->constant)) != 0)
                continue;
            replace_uses(g, v, u);
            g->values[v].num_consumers = 0;
            any = true;
            break;
        }
    }
    if (any) graph_recount_uses(g);
}

static cinfer_status merge_common_subexpressions(graph *g) {
    merge_equal_constants(g);
    int cap = 64;
    while (cap < 2 * g->num_nodes + 2) cap *= 2;
    int *table = malloc(sizeof(int) * (size_t)cap);
    if (!table) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while merging common subexpressions");
    for (int i = 0; i < cap; i++) table[i] = -1;
    bool any = false;
    for (int i = 0; i < g->num_nodes; i++) { /* topological order: a merge's new inputs are already final */
        graph_node *n = &g->nodes[i];
        if (n->removed || never_merged(n)) continue;
        uint32_t slot = (uint32_t)node_key(n) & (uint32_t)(cap - 1);
        int match = -1;
        for (; table[slot] >= 0; slot = (slot + 1) & (uint32_t)(cap - 1))
            if (same_node(&g->nodes[table[slot]], n)) {
                match = table[slot];
                break;
            }
        bool mergeable = match >= 0;
        for (int k = 0; mergeable && k < n->num_outputs; k++)
            mergeable = n->outputs[k] < 0 || (!g->values[n->outputs[k]].is_output && g->nodes[match].outputs[k] >= 0);
        if (!mergeable) {
            if (match < 0) table[slot] = i;
            continue;
        }
        for (int k = 0; k < n->num_outputs; k++)
            if (n->outputs[k] >= 0) replace_uses(g, n->outputs[k], g->nodes[match].outputs[k]);
        n->removed = true;
        any = true;
    }
    free(table);
    if (any) graph_recount_uses(g);
    return CINFER_OK;
}

/* ---- GELU ---- */

static cinfer_status become_gelu(graph_node *n, int x) {
    char *op = strdup("Gelu");
    if (!op) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while fusing GELU at '%s'", n->name);
    free(n->op_type);
    n->op_type = op;
    n->inputs[0] = x;
    n->num_inputs = 1;
    for (int a = 0; a < n->num_attrs; a++) graph_attr_clear(&n->attrs[a]);
    n->num_attrs = 0;
    n->schema = op_schema_find("", "Gelu");
    n->schema_index = op_schema_index(n->schema);
    return CINFER_OK;
}

static cinfer_status fuse_gelu(graph *g) {
    if (!op_schema_find("", "Gelu")) return CINFER_OK;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *erf = &g->nodes[i];
        if (!is_op(erf, "Erf") || erf->num_inputs != 1 || !single_use(g, erf->inputs[0]) ||
            !single_use(g, erf->outputs[0]))
            continue;
        int scale = producer_node(g, erf->inputs[0]);
        if (scale < 0) continue;
        const graph_node *sn = &g->nodes[scale];
        int x = is_op(sn, "Div") ? other_operand(g, sn, sqrt(2.0), false)
                : is_op(sn, "Mul") ? other_operand(g, sn, 1.0 / sqrt(2.0), true) : -1;
        if (x < 0) continue;
        int add = only_consumer(g, erf->outputs[0]);
        if (add < 0 || !is_op(&g->nodes[add], "Add") || other_operand(g, &g->nodes[add], 1.0, true) != erf->outputs[0] ||
            !single_use(g, g->nodes[add].outputs[0]))
            continue;
        int p = g->nodes[add].outputs[0];
        int m1 = only_consumer(g, p);
        if (m1 < 0 || !is_op(&g->nodes[m1], "Mul") || g->nodes[m1].num_inputs != 2 || !single_use(g, g->nodes[m1].outputs[0]))
            continue;
        const graph_node *mn = &g->nodes[m1];
        int h = mn->outputs[0];
        int m2 = only_consumer(g, h);
        if (m2 < 0 || !is_op(&g->nodes[m2], "Mul") || g->nodes[m2].num_inputs != 2) continue;
        const graph_node *m2n = &g->nodes[m2];
        bool half_first = other_operand(g, mn, 0.5, true) == p &&                      /* (0.5 * p) * x */
                          ((m2n->inputs[0] == x && m2n->inputs[1] == h) || (m2n->inputs[0] == h && m2n->inputs[1] == x));
        bool x_first = ((mn->inputs[0] == x && mn->inputs[1] == p) || (mn->inputs[0] == p && mn->inputs[1] == x)) &&
                       other_operand(g, m2n, 0.5, true) == h;                          /* (x * p) * 0.5 */
        if (!half_first && !x_first) continue;
        CINFER_TRY(become_gelu(&g->nodes[m2], x));
        g->nodes[scale].removed = g->nodes[i].removed = g->nodes[add].removed = g->nodes[m1].removed = true;
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

/* ---- Softmax NaN guard ---- */

static bool scalar_zero(const graph *g, int v) {
    if (v < 0 || g->values[v].kind != VALUE_CONSTANT || tensor_numel(&g->values[v].constant) != 1) return false;
    const tensor *t = &g->values[v].constant;
    switch (t->dtype) {
    case CINFER_DTYPE_FLOAT: return ((const float *)t->data)[0] == 0.0f;
    case CINFER_DTYPE_DOUBLE: return ((const double *)t->data)[0] == 0.0;
    case CINFER_DTYPE_FLOAT16:
    case CINFER_DTYPE_BFLOAT16: return (((const uint16_t *)t->data)[0] & 0x7FFF) == 0;
    default: return false;
    }
}

/* Where(IsNaN(p), 0, p) after p = Softmax(x) (PyTorch's scaled_dot_product_attention export guards fully masked
 * rows so) becomes the Softmax's own "cinfer_nan_to_zero": two kernels and a pass over the scores saved. */
static cinfer_status fuse_softmax_nan_guard(graph *g) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *sm = &g->nodes[i];
        if (!is_op(sm, "Softmax") || graph_node_attr(sm, "cinfer_nan_to_zero")) continue;
        int p = sm->outputs[0];
        if (g->values[p].is_output || g->values[p].num_consumers != 2) continue;
        int isnan = -1, where = -1;
        for (int j = i + 1; j < g->num_nodes; j++) {
            const graph_node *n = &g->nodes[j];
            if (n->removed) continue;
            if (is_op(n, "IsNaN") && n->inputs[0] == p) isnan = j;
            else if (is_op(n, "Where") && n->num_inputs == 3 && n->inputs[2] == p) where = j;
        }
        if (isnan < 0 || where < 0) continue;
        const graph_node *w = &g->nodes[where];
        if (w->inputs[0] != g->nodes[isnan].outputs[0] || !single_use(g, w->inputs[0]) || !scalar_zero(g, w->inputs[1]) ||
            g->values[w->outputs[0]].is_output)
            continue;
        CINFER_TRY(graph_node_add_int_attr(sm, "cinfer_nan_to_zero", 1));
        replace_uses(g, g->nodes[where].outputs[0], p);
        g->nodes[where].removed = g->nodes[isnan].removed = true;
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

/* ---- scale folding ---- */

static bool is_reindexing(const graph_node *n) {
    return is_op(n, "Reshape") || is_op(n, "Transpose") || is_op(n, "Squeeze") || is_op(n, "Unsqueeze") ||
           is_op(n, "Flatten");
}

/* A new constant holding `src` times c (src may be shared with other nodes, so it is never scaled in place). */
static int scaled_copy(graph *g, int src, double c) {
    char name[512];
    snprintf(name, sizeof name, "%s/scaled", g->values[src].name);
    int v = graph_new_constant(g, name, &g->values[src].constant);
    if (v < 0) return -1;
    tensor *t = &g->values[v].constant;
    float *data = t->data;
    for (int64_t i = 0, count = tensor_numel(t); i < count; i++) data[i] = (float)(data[i] * c);
    return v;
}

/* scaled_copy of src by c, made once per (src, c): layers that share a weight and its scale (ALBERT's shared query and
 * key projections, scaled by the dynamo exporter's attention scale) share one scaled copy instead of one each. memo_of
 * and memo_scale (num_memo entries, -1: none yet) remember the last copy of each value that existed before the pass. */
static int shared_scaled_copy(graph *g, int src, double c, int *memo_of, double *memo_scale, int num_memo) {
    if (src < num_memo && memo_of[src] >= 0 && memo_scale[src] == c) return memo_of[src];
    int v = scaled_copy(g, src, c);
    if (v >= 0 && src < num_memo) {
        memo_of[src] = v;
        memo_scale[src] = c;
    }
    return v;
}

static cinfer_status fold_scales(graph *g) {
    const int num_memo = g->num_values;
    int *memo_of = malloc((size_t)(num_memo ? num_memo : 1) * sizeof *memo_of);
    double *memo_scale = malloc((size_t)(num_memo ? num_memo : 1) * sizeof *memo_scale);
    if (!memo_of || !memo_scale) goto oom;
    for (int v = 0; v < num_memo; v++) memo_of[v] = -1;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *mul = &g->nodes[i];
        bool div = is_op(mul, "Div");
        if ((!div && !is_op(mul, "Mul")) || mul->num_inputs != 2 || g->values[mul->outputs[0]].is_output) continue;
        double c;
        int v = scalar_float(g, mul->inputs[1], &c) ? mul->inputs[0]
                : !div && scalar_float(g, mul->inputs[0], &c) ? mul->inputs[1] : -1;
        if (div) c = 1.0 / c; /* x / c: the scale is 1/c */
        if (v < 0 || g->values[v].kind == VALUE_CONSTANT || !isfinite(c) || c == 0) continue;
        int u = v;
        while (single_data_use(g, u) && producer_node(g, u) >= 0 && is_reindexing(&g->nodes[producer_node(g, u)]))
            u = g->nodes[producer_node(g, u)].inputs[0];
        if (!single_data_use(g, u) || producer_node(g, u) < 0) continue;
        int add = -1, matmul = producer_node(g, u), bias = -1;
        if (is_op(&g->nodes[matmul], "Add")) {
            add = matmul;
            const graph_node *an = &g->nodes[add];
            int m = graph_is_float_constant(g, an->inputs[1]) ? an->inputs[0] : graph_is_float_constant(g, an->inputs[0]) ? an->inputs[1] : -1;
            if (m < 0 || !single_data_use(g, m) || producer_node(g, m) < 0) continue;
            bias = m == an->inputs[0] ? an->inputs[1] : an->inputs[0];
            if (g->values[bias].constant.ndim > 1) continue; /* a per-output-column vector or a scalar only */
            matmul = producer_node(g, m);
        }
        const graph_node *mm = &g->nodes[matmul];
        if (!is_op(mm, "MatMul") || !graph_is_float_constant(g, mm->inputs[1])) continue;
        int w = shared_scaled_copy(g, mm->inputs[1], c, memo_of, memo_scale, num_memo);
        int b = bias >= 0 ? shared_scaled_copy(g, bias, c, memo_of, memo_scale, num_memo) : -2;
        if (w < 0 || b == -1) goto oom;
        g->nodes[matmul].inputs[1] = w;
        if (add >= 0) {
            graph_node *an = &g->nodes[add];
            an->inputs[an->inputs[0] == bias ? 0 : 1] = b;
        }
        mul = &g->nodes[i];
        replace_uses(g, mul->outputs[0], v);
        mul->removed = true;
        graph_recount_uses(g);
    }
    free(memo_of);
    free(memo_scale);
    return CINFER_OK;
oom:
    free(memo_of);
    free(memo_scale);
    return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while folding a scale into a MatMul's weight");
}

/* ---- MatMul + bias -> Gemm ---- */

static int const_i64(graph *g, const char *base, const int64_t *vals, int count) {
    tensor t = {.dtype = CINFER_DTYPE_INT64, .ndim = 1, .dims = {count}, .data = (void *)vals};
    return graph_new_constant(g, base, &t);
}

static int add_fused_node(graph *g, const char *base, const char *op, const int *in, int nin, int out) {
    char name[512];
    snprintf(name, sizeof name, "%s/%s", base, op);
    int i = graph_add_node(g, name, op, "", g->opset, in, nin, &out, 1);
    if (i < 0) return -1;
    g->nodes[i].schema = op_schema_find("", op);
    g->nodes[i].schema_index = op_schema_index(g->nodes[i].schema);
    return g->nodes[i].schema ? i : -1;
}

/* CINFER_GEMM_TRANSPOSED_WEIGHTS=0 keeps the fused Gemms' weights as the file has them (to compare). */
static bool transposed_weights_wanted(void) {
    const char *v = getenv("CINFER_GEMM_TRANSPOSED_WEIGHTS");
    return !v || strcmp(v, "0") != 0;
}

/* A new constant holding the float [K, N] constant value w transposed to [N, K]; -1 on OOM. Made as a copy of w's
 * bytes (w's own buffer stays until compaction) and transposed into place from w's buffer, in 32 x 32 blocks so both
 * sides stream through the cache (BERT-base's 72 weights, 85 M floats, at load). */
static int transposed_constant(graph *g, const char *base, int w) {
    enum { BLOCK = 32 };
    const float *src = g->values[w].constant.data;
    const int64_t K = g->values[w].constant.dims[0], N = g->values[w].constant.dims[1];
    tensor shape = {.dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {N, K}, .data = (void *)src};
    char name[512];
    snprintf(name, sizeof name, "%s/weight_t", base);
    int v = graph_new_constant(g, name, &shape); /* may move g->values, not the buffers */
    if (v < 0) return -1;
    float *t = g->values[v].constant.data;
    for (int64_t k0 = 0; k0 < K; k0 += BLOCK)
        for (int64_t n0 = 0; n0 < N; n0 += BLOCK)
            for (int64_t k = k0; k < k0 + BLOCK && k < K; k++)
                for (int64_t n = n0; n < n0 + BLOCK && n < N; n++) t[n * K + k] = src[k * N + n];
    return v;
}

/* Y = MatMul(X, W) + b, W a 2-D constant [K, N], b a constant of N elements (or a scalar): one GEMM with a bias
 * epilogue over X seen as [rows, K] (GPU: cuBLASLt's BIAS epilogue, and one GEMM over every row instead of a
 * batched one per leading index). X of rank > 2 is reshaped on both sides; the output shape comes from Shape(X),
 * evaluated on the host while planning, so it costs nothing per run. W is stored transposed for transB = 1: on the
 * H200, cuBLASLt gives float32 [K, N] weights a CUTLASS SIMT kernel about 5% slower than the one it gives the
 * transposed layout (BERT-base's 72 GEMMs, bench/BENCHMARKS.md); CPU BLAS reads either. */
static cinfer_status fuse_matmul_bias(graph *g, bool *changed) {
    if (!op_schema_find("", "Gemm") || !op_schema_find("", "Shape") || !op_schema_find("", "Slice") ||
        !op_schema_find("", "Concat") || !op_schema_find("", "Reshape"))
        return CINFER_OK;
    int num_nodes = g->num_nodes; /* nodes added below are not revisited */
    const bool transpose = transposed_weights_wanted();
    /* a weight several MatMuls share (ALBERT's layers) is transposed once: its transposed value, or -1 */
    const int num_values = g->num_values;
    int *transposed_of = malloc((size_t)(num_values ? num_values : 1) * sizeof *transposed_of);
    if (!transposed_of) goto oom;
    for (int v = 0; v < num_values; v++) transposed_of[v] = -1;
    for (int i = 0; i < num_nodes; i++) {
        if (!is_op(&g->nodes[i], "Add") || g->nodes[i].num_inputs != 2) continue;
        int a0 = g->nodes[i].inputs[0], a1 = g->nodes[i].inputs[1];
        int bias = graph_is_float_constant(g, a1) ? a1 : graph_is_float_constant(g, a0) ? a0 : -1;
        int m = bias == a1 ? a0 : a1;
        if (bias < 0 || !single_use(g, m) || producer_node(g, m) < 0) continue;
        int mm = producer_node(g, m);
        if (!is_op(&g->nodes[mm], "MatMul") || !graph_is_float_constant(g, g->nodes[mm].inputs[1])) continue;
        const tensor *w = &g->values[g->nodes[mm].inputs[1]].constant, *b = &g->values[bias].constant;
        int x = g->nodes[mm].inputs[0];
        const graph_value *xv = &g->values[x];
        if (w->ndim != 2 || xv->ndim < 2 || xv->dtype != CINFER_DTYPE_FLOAT || g->values[x].kind == VALUE_CONSTANT) continue;
        int64_t K = w->dims[0], Nn = w->dims[1];
        if (xv->dims[xv->ndim - 1] != K) continue; /* the rank and last dim must be known statically */
        if (!(tensor_numel(b) == 1 || (tensor_numel(b) == Nn && b->dims[b->ndim - 1] == Nn))) continue;
        int y = g->nodes[i].outputs[0];
        char base[512];
        snprintf(base, sizeof base, "%s", g->nodes[mm].name);
        int wv = g->nodes[mm].inputs[1], gemm = -1;
        const bool rows_already = xv->ndim == 2;
        /* new values may move g->values: w, b and xv are not read past this point */
        if (transpose && transposed_of[wv] < 0 && (transposed_of[wv] = transposed_constant(g, base, wv)) < 0) goto oom;
        if (transpose) wv = transposed_of[wv];
        if (rows_already) { /* already 2-D: Gemm in place of the MatMul and Add */
            int in[3] = {x, wv, bias};
            if ((gemm = add_fused_node(g, base, "Gemm", in, 3, y)) < 0) goto oom;
        } else {
            int64_t flat[2] = {-1, K}, zero = 0, minus1 = -1, last = Nn;
            char name[512];
            snprintf(name, sizeof name, "%s/rows", base);
            int x2 = graph_new_value(g, name), flat_shape = const_i64(g, "cinfer_gemm_flat", flat, 2);
            snprintf(name, sizeof name, "%s/gemm", base);
            int y2 = graph_new_value(g, name);
            snprintf(name, sizeof name, "%s/x_shape", base);
            int xs = graph_new_value(g, name);
            snprintf(name, sizeof name, "%s/lead", base);
            int lead = graph_new_value(g, name);
            snprintf(name, sizeof name, "%s/y_shape", base);
            int ys = graph_new_value(g, name);
            int c0 = const_i64(g, "cinfer_zero", &zero, 1), cm1 = const_i64(g, "cinfer_minus1", &minus1, 1),
                cn = const_i64(g, "cinfer_n", &last, 1);
            if (x2 < 0 || flat_shape < 0 || y2 < 0 || xs < 0 || lead < 0 || ys < 0 || c0 < 0 || cm1 < 0 || cn < 0) goto oom;
            int r1[2] = {x, flat_shape}, gm[3] = {x2, wv, bias}, sh[1] = {x}, sl[4] = {xs, c0, cm1, c0}, cc[2] = {lead, cn},
                r2[2] = {y2, ys};
            if (add_fused_node(g, base, "Reshape", r1, 2, x2) < 0 || (gemm = add_fused_node(g, base, "Gemm", gm, 3, y2)) < 0 ||
                add_fused_node(g, base, "Shape", sh, 1, xs) < 0 || add_fused_node(g, base, "Slice", sl, 4, lead) < 0)
                goto oom;
            int concat = add_fused_node(g, base, "Concat", cc, 2, ys);
            if (concat < 0 || add_fused_node(g, base, "Reshape", r2, 2, y) < 0) goto oom;
            if (graph_node_add_int_attr(&g->nodes[concat], "axis", 0) != CINFER_OK) goto oom;
        }
        if (transpose && graph_node_add_int_attr(&g->nodes[gemm], "transB", 1) != CINFER_OK) goto oom;
        g->nodes[i].removed = g->nodes[mm].removed = true;
        *changed = true;
        graph_recount_uses(g);
    }
    free(transposed_of);
    return CINFER_OK;
oom:
    free(transposed_of);
    return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while fusing a MatMul and its bias");
}

/* ---- Conv + residual Add (+ Relu) ---- */

/* Gives node n the internal 4th input v (optional inputs before it absent) and marks it "cinfer_fused_add". */
static cinfer_status add_fused_input(graph_node *n, int v) {
    int *ins = realloc(n->inputs, sizeof(int) * 4);
    if (!ins) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while fusing '%s'", n->name);
    n->inputs = ins;
    while (n->num_inputs < 3) n->inputs[n->num_inputs++] = -1;
    n->inputs[3] = v;
    n->num_inputs = 4;
    return graph_node_add_int_attr(n, "cinfer_fused_add", 1);
}

/* Dim da of a and dim db of b are statically the same: equal known sizes, or dynamic dims of one name (the same
 * symbol is the same size; an unnamed or differently named one could be 1 on one side, where an Add would
 * broadcast). */
static bool same_dim(const graph_value *a, int da, const graph_value *b, int db) {
    if (a->ndim <= da || b->ndim <= db) return false;
    if (a->dims[da] > 0 || b->dims[db] > 0) return a->dims[da] == b->dims[db];
    return a->dim_names[da] && b->dim_names[db] && strcmp(a->dim_names[da], b->dim_names[db]) == 0;
}

/* Equal static shapes: every dim the same by same_dim. A dynamic dim past the batch counts only where both shapes
 * were probed (graph_infer_static_shapes): a file's names for intermediate dims are the exporter's word. */
/* v's static dtype and shape are cinfer's own, not a file's claim: probed, or a model input (checked when bound). */
static bool shape_known(const graph_value *v) { return v->shape_probed || v->kind == VALUE_INPUT; }

static bool same_static_shape(const graph *g, int a, int b) {
    if (a < 0 || b < 0) return false; /* an absent input (empty name) */
    const graph_value *x = &g->values[a], *y = &g->values[b];
    if (x->ndim < 1 || x->ndim != y->ndim) return false;
    bool probed = shape_known(x) && shape_known(y);
    for (int d = 0; d < x->ndim; d++)
        if (!same_dim(x, d, y, d) || (d > 0 && x->dims[d] < 0 && !probed)) return false;
    return true;
}

/* Relu(Conv(x) + r) or Conv(x) + r with r shaped like the Conv's output (ResNet's residual joins): the Conv reads r
 * as a 4th input ("cinfer_fused_add", plus "cinfer_fused_add_relu") and adds it, and the Relu, in the pass that
 * already adds its bias after cuDNN: the Add and the Relu kernels and two passes over the activations go. */
static cinfer_status fuse_conv_residual(graph *g, bool *changed) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *add = &g->nodes[i];
        if (!is_op(add, "Add") || add->num_inputs != 2) continue;
        for (int side = 0; side < 2; side++) {
            int c = add->inputs[side], r = add->inputs[1 - side];
            int cv = producer_node(g, c);
            if (c < 0 || r < 0 || c == r || cv < 0 || !single_use(g, c) || g->values[r].kind == VALUE_CONSTANT) continue;
            graph_node *conv = &g->nodes[cv];
            if (!is_op(conv, "Conv") || conv->num_inputs > 3 || graph_node_attr(conv, "cinfer_fused_relu") ||
                graph_node_attr(conv, "cinfer_fused_add") || !same_static_shape(g, c, r))
                continue;
            int out = add->outputs[0], relu = -1;
            if (single_use(g, out)) {
                int k = only_consumer(g, out);
                if (k >= 0 && is_op(&g->nodes[k], "Relu")) relu = k;
            }
            CINFER_TRY(add_fused_input(conv, r));
            if (relu >= 0) CINFER_TRY(graph_node_add_int_attr(conv, "cinfer_fused_add_relu", 1));
            conv->outputs[0] = relu >= 0 ? g->nodes[relu].outputs[0] : out;
            add->removed = true;
            if (relu >= 0) g->nodes[relu].removed = true;
            *changed = true; /* r may come later in the order than the Conv: the caller sorts again */
            graph_recount_uses(g);
            break;
        }
    }
    return CINFER_OK;
}

/* ---- residual Add + LayerNormalization ---- */

/* LayerNormalization(a + b), the sum used nowhere else, a and b of one static shape, only Y wanted: the LayerNorm
 * reads b as a 4th input ("cinfer_fused_add") and adds it while it loads each row, so the Add kernel and its pass
 * over the activations go (post-LN transformers have two per layer). */
static cinfer_status fuse_layer_norm_residual(graph *g, bool *changed) {
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *ln = &g->nodes[i];
        if (!is_op(ln, "LayerNormalization") || ln->num_inputs > 3 || ln->num_inputs < 2 ||
            graph_node_attr(ln, "cinfer_fused_add"))
            continue;
        bool extra_outputs = false; /* Mean / InvStdDev: the unfused kernel's statistics of a + b */
        for (int k = 1; k < ln->num_outputs; k++)
            extra_outputs = extra_outputs || (ln->outputs[k] >= 0 && (g->values[ln->outputs[k]].num_consumers > 0 ||
                                                                       g->values[ln->outputs[k]].is_output));
        int sum = ln->inputs[0], av = producer_node(g, sum);
        if (extra_outputs || av < 0 || !single_use(g, sum)) continue;
        graph_node *add = &g->nodes[av];
        if (!is_op(add, "Add") || add->num_inputs != 2) continue;
        int a = add->inputs[0], b = add->inputs[1];
        if (a == b || !same_static_shape(g, a, b) || !same_static_shape(g, a, sum)) continue;
        ln->inputs[0] = a;
        CINFER_TRY(add_fused_input(ln, b));
        add->removed = true;
        *changed = true;
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

/* ---- attention: softmax(Q.K^T * s + mask).V between head splits -> one Attention node ---- */

/* The int64 values of a 1-D int64 constant (at most max of them), or -1. */
static int const_ints(const graph *g, int v, int64_t *out, int max) {
    if (v < 0 || g->values[v].kind != VALUE_CONSTANT) return -1;
    const tensor *t = &g->values[v].constant;
    int64_t count = tensor_numel(t);
    if (t->dtype != CINFER_DTYPE_INT64 || t->ndim > 1 || count > max) return -1;
    memcpy(out, t->data, (size_t)count * sizeof(int64_t));
    return (int)count;
}

static bool has_perm(const graph_node *n, const int64_t *want, size_t rank) {
    size_t count = 0;
    const int64_t *perm = graph_attr_ints(n, "perm", &count);
    return perm && count == rank && memcmp(perm, want, rank * sizeof(int64_t)) == 0;
}

/* The product of an ElementwiseChain's steps when every one is a multiplication or division by a constant (two
 * scales in a row, which the chain fusion made one node before the attention fusion ran); false otherwise. */
static bool chain_scale(const graph_node *n, double *scale) {
    chain_program p;
    if (!is_op(n, "ElementwiseChain") || graph_node_attr(n, "cinfer_chain_to")) return false;
    if (chain_program_read(n, &p) != CINFER_OK) {
        core_clear_error();
        return false;
    }
    double product = 1.0;
    for (int s = 0; s < p.num_steps; s++) {
        if ((p.op[s] != CHAIN_MUL && p.op[s] != CHAIN_DIV) || !isfinite(p.a[s]) || p.a[s] == 0) return false;
        product *= p.op[s] == CHAIN_MUL ? p.a[s] : 1.0 / p.a[s];
    }
    *scale *= product;
    return true;
}

/* v = the value read through scalar-constant Mul/Div nodes (or chains of them) read only here; their product goes
 * into *scale. */
static int peel_scale(const graph *g, int v, double *scale) {
    for (;;) {
        int p = producer_node(g, v);
        if (p < 0 || !single_data_use(g, v)) return v;
        const graph_node *n = &g->nodes[p];
        if (chain_scale(n, scale)) {
            v = n->inputs[0];
            continue;
        }
        bool div = is_op(n, "Div");
        if (!div && !is_op(n, "Mul")) return v;
        double c;
        int x = scalar_float(g, n->inputs[1], &c) ? n->inputs[0] : !div && scalar_float(g, n->inputs[0], &c) ? n->inputs[1] : -1;
        if (x < 0 || !isfinite(c) || c == 0) return v;
        *scale *= div ? 1.0 / c : c;
        v = x;
    }
}

/* The first two entries of a Reshape target keep dims 0 and 1 of x (rank >= 2, static): each copies it (0 without
 * allowzero), names its known size, or is the one -1 beside an entry that does. */
static bool keeps_leading_dims(const graph_value *x, const int64_t *target, bool allowzero) {
    bool kept[2];
    for (int d = 0; d < 2; d++)
        kept[d] = (target[d] == 0 && !allowzero) || (target[d] > 0 && x->dims[d] == target[d]);
    return (kept[0] && kept[1]) || (kept[0] && target[1] == -1) || (kept[1] && target[0] == -1);
}

/* Reshape node rn makes a rank-`rank` value whose dims 0 and 1 are those of the 3-D value ref (its input's, where a
 * target entry copies one) and whose last ones are static, set into last[]: read from its constant target, or (a
 * target computed from Shape(x), as torch's legacy exporter writes) from the output's static shape, which
 * graph_infer_static_shapes derived as a plan will. */
static bool reshape_keeps_leading(const graph *g, const graph_node *rn, int ref, int rank, int64_t *last) {
    const graph_value *rv = &g->values[ref], *yv = &g->values[rn->outputs[0]];
    int64_t target[4];
    bool kept;
    if (rv->ndim != 3) return false;
    if (const_ints(g, rn->inputs[1], target, rank) == rank) {
        kept = keeps_leading_dims(rv, target, graph_attr_int(rn, "allowzero", 0) != 0);
    } else {
        if (yv->ndim != rank || !yv->shape_probed) return false; /* a file's claim alone does not do */
        memcpy(target, yv->dims, sizeof(int64_t) * (size_t)rank);
        kept = same_dim(yv, 0, rv, 0) && same_dim(yv, 1, rv, 1);
    }
    for (int d = 2; d < rank; d++) {
        if (target[d] <= 0 || target[d] > INT32_MAX) return false;
        last[d - 2] = target[d];
    }
    return kept;
}

/* v = Transpose(perm)(Reshape(x3, [a, b, heads, size])) read only here, x3 [batch, seq, heads * size] of static
 * rank 3 whose batch and seq the Reshape keeps: returns x3 (-1 when v is not that) with the head count and size. */
static int split_heads_of(const graph *g, int v, const int64_t *perm, int *heads, int *size) {
    int t = producer_node(g, v);
    if (t < 0 || !single_data_use(g, v) || !is_op(&g->nodes[t], "Transpose") || !has_perm(&g->nodes[t], perm, 4)) return -1;
    int r4 = g->nodes[t].inputs[0], r = producer_node(g, r4);
    if (r < 0 || !single_data_use(g, r4) || !is_op(&g->nodes[r], "Reshape")) return -1;
    const graph_node *rn = &g->nodes[r];
    int64_t target[4]; /* the head count and size at 2 and 3 */
    int x3 = rn->inputs[0];
    if (!reshape_keeps_leading(g, rn, x3, 4, target + 2)) return -1;
    if (g->values[x3].dims[2] != target[2] * target[3]) return -1;
    *heads = (int)target[2];
    *size = (int)target[3];
    return x3;
}

/* A Slice bound on a rank-4 shape: negative counts from the end; clamped to [0, 4]. */
static int64_t clamp_axis(int64_t x) {
    if (x < 0) x += 4;
    return x < 0 ? 0 : x > 4 ? 4 : x;
}

/* v = Slice(Shape(src), [lo], [hi]) on the axis 0 with step 1, for a rank-4 src: sets [*lo, *hi) clamped to [0, 4]. */
static bool shape_slice_of(const graph *g, int v, int src, int64_t *lo, int64_t *hi) {
    int s = producer_node(g, v);
    if (s < 0 || !is_op(&g->nodes[s], "Slice")) return false;
    const graph_node *sl = &g->nodes[s];
    int sh = producer_node(g, sl->inputs[0]);
    if (sh < 0 || !is_op(&g->nodes[sh], "Shape") || g->nodes[sh].inputs[0] != src ||
        graph_attr_int(&g->nodes[sh], "start", 0) != 0 || graph_node_attr(&g->nodes[sh], "end"))
        return false;
    int64_t b[1], e[1], one[1];
    if (sl->num_inputs < 3 || const_ints(g, sl->inputs[1], b, 1) != 1 || const_ints(g, sl->inputs[2], e, 1) != 1) return false;
    if (sl->num_inputs > 3 && sl->inputs[3] >= 0 && (const_ints(g, sl->inputs[3], one, 1) != 1 || one[0] != 0)) return false;
    if (sl->num_inputs > 4 && sl->inputs[4] >= 0 && (const_ints(g, sl->inputs[4], one, 1) != 1 || one[0] != 1)) return false;
    *lo = clamp_axis(b[0]);
    *hi = clamp_axis(e[0]);
    return true;
}

/* v = Concat(axis 0) of int64 constants and slices of Shape(src): spells it as dim indices of src (>= 0) and
 * constants (c encoded as -10 - c for c >= -1, so -1 -> -9). Returns the entry count or -1. */
static int shape_spelling(const graph *g, int v, int src, int64_t *out, int max) {
    int c = producer_node(g, v);
    if (c < 0 || !is_op(&g->nodes[c], "Concat") || graph_attr_int(&g->nodes[c], "axis", 0) != 0) return -1;
    const graph_node *cn = &g->nodes[c];
    int count = 0;
    for (int k = 0; k < cn->num_inputs; k++) {
        int64_t vals[4], lo, hi;
        int n = const_ints(g, cn->inputs[k], vals, 4);
        if (n >= 0) {
            for (int j = 0; j < n; j++) {
                if (count == max || vals[j] < -1) return -1;
                out[count++] = -10 - vals[j];
            }
        } else if (shape_slice_of(g, cn->inputs[k], src, &lo, &hi)) {
            for (int64_t d = lo; d < hi; d++) {
                if (count == max) return -1;
                out[count++] = d;
            }
        } else {
            return -1;
        }
    }
    return count;
}

/* kt = K4 with its last two axes swapped: Transpose[0,1,3,2](K4), or the exporters' 3-D round trip
 * Reshape(Transpose[0,2,1](Reshape(K4, [-1, dim 2, dim 3])), [dim 0, dim 1, dim 3, dim 2]). Returns K4 or -1. */
static int swapped_last_two(const graph *g, int kt) {
    static const int64_t swap4[4] = {0, 1, 3, 2}, swap3[3] = {0, 2, 1};
    int p = producer_node(g, kt);
    if (p < 0 || !single_data_use(g, kt)) return -1;
    const graph_node *n = &g->nodes[p];
    if (is_op(n, "Transpose")) return has_perm(n, swap4, 4) ? n->inputs[0] : -1;
    if (!is_op(n, "Reshape")) return -1;
    int t3 = n->inputs[0], t = producer_node(g, t3);
    if (t < 0 || !single_data_use(g, t3) || !is_op(&g->nodes[t], "Transpose") || !has_perm(&g->nodes[t], swap3, 3)) return -1;
    int r3 = g->nodes[t].inputs[0], r = producer_node(g, r3);
    if (r < 0 || !single_data_use(g, r3) || !is_op(&g->nodes[r], "Reshape")) return -1;
    int k4 = g->nodes[r].inputs[0];
    int64_t a[4], b[5];
    if (shape_spelling(g, g->nodes[r].inputs[1], k4, a, 4) != 3 || a[0] != -9 || a[1] != 2 || a[2] != 3) return -1;
    if (shape_spelling(g, n->inputs[1], k4, b, 5) != 4 || b[0] != 0 || b[1] != 1 || b[2] != 3 || b[3] != 2) return -1;
    return k4;
}

/* Y = Reshape(Transpose[0,2,1,3](MatMul(Softmax(MatMul(Q4, K4^T) * s + mask), V4)), [., ., heads * vsize]), where
 * Q4, K4, V4 split the heads of 3-D projections q, k, v ([batch, seq, heads, size] then [0,2,1,3]): the shape
 * exporters give BERT-style self-attention. It becomes Attention(q, k, v, mask) with 3-D inputs (opset 23), whose
 * CUDA kernel runs it without the score tensor in memory or the layout copies. Where the Softmax had the NaN guard,
 * the node carries it; where it had none, the node keeps its NaN for a row of -inf scores (a row masked wholly by
 * -inf, say), which Attention's own rule makes zeros. Every shape the pattern relies on is checked statically (with
 * the shapes graph_infer_static_shapes found where targets are computed): the projections are rank 3 with
 * heads * size last, the split and merge Reshapes keep batch and sequence, K and V share them, and the mask
 * broadcasts to the scores without enlarging them, its last dim the key length. */
static cinfer_status fuse_attention(graph *g, bool *changed) {
    static const int64_t heads_first[4] = {0, 2, 1, 3}, k_transposed[4] = {0, 2, 3, 1};
    if (!op_schema_find("", "Attention")) return CINFER_OK;
    int num_nodes = g->num_nodes;
    for (int i = 0; i < num_nodes; i++) {
        const graph_node *pv = &g->nodes[i];
        if (!is_op(pv, "MatMul")) continue;
        /* out: Transpose[0,2,1,3] then Reshape to [., ., heads * vsize] (Shape readers of the steps aside: they
         * read dims, which stay) */
        int o4 = pv->outputs[0], ot = first_consumer(g, o4, true);
        if (!single_data_use(g, o4) || ot < 0) continue;
        int r4 = g->nodes[ot].outputs[0];
        if (is_op(&g->nodes[ot], "Reshape") && same_static_shape(g, o4, r4) && single_data_use(g, r4))
            ot = first_consumer(g, r4, true); /* a Reshape to the shape it has (torch's legacy SDPA export) */
        if (ot < 0 || !is_op(&g->nodes[ot], "Transpose") || !has_perm(&g->nodes[ot], heads_first, 4)) continue;
        int ot_out = g->nodes[ot].outputs[0], orsh = first_consumer(g, ot_out, true);
        if (!single_data_use(g, ot_out) || orsh < 0 || !is_op(&g->nodes[orsh], "Reshape")) continue;
        /* P = Softmax over the last axis */
        int p = pv->inputs[0], sm = producer_node(g, p);
        if (sm < 0 || !single_data_use(g, p) || !is_op(&g->nodes[sm], "Softmax")) continue;
        const graph_node *smn = &g->nodes[sm];
        int64_t axis = graph_attr_int(smn, "axis", smn->opset >= 13 ? -1 : 1);
        if (axis != -1 && axis != 3) continue;
        /* scores (times scalars) plus an optional mask */
        double scale = 1.0;
        int x = smn->inputs[0], mask = -1, qk = -1;
        int add = producer_node(g, x);
        if (add >= 0 && single_data_use(g, x) && is_op(&g->nodes[add], "Add")) {
            for (int side = 0; side < 2 && qk < 0; side++) {
                double s = 1.0;
                int cand = peel_scale(g, g->nodes[add].inputs[side], &s), mm = producer_node(g, cand);
                if (mm >= 0 && single_data_use(g, cand) && is_op(&g->nodes[mm], "MatMul")) {
                    qk = mm;
                    scale = s;
                    mask = g->nodes[add].inputs[1 - side];
                }
            }
        } else {
            int cand = peel_scale(g, x, &scale), mm = producer_node(g, cand);
            if (mm >= 0 && single_data_use(g, cand) && is_op(&g->nodes[mm], "MatMul")) qk = mm;
        }
        if (qk < 0) continue;
        const bool nan_to_zero = graph_attr_int(smn, "cinfer_nan_to_zero", 0) != 0;
        /* Q4 . K4^T and V4, heads split from 3-D projections */
        int hq, dq, hk, dk, hv, dv;
        int q3 = split_heads_of(g, peel_scale(g, g->nodes[qk].inputs[0], &scale), heads_first, &hq, &dq);
        int kt = peel_scale(g, g->nodes[qk].inputs[1], &scale);
        int k3 = split_heads_of(g, kt, k_transposed, &hk, &dk);
        if (k3 < 0) {
            int k4 = swapped_last_two(g, kt);
            /* K4 is also read by the Shape nodes of the round trip: those read only its dims */
            k3 = k4 < 0 ? -1 : split_heads_of(g, k4, heads_first, &hk, &dk);
        }
        int v3 = split_heads_of(g, pv->inputs[1], heads_first, &hv, &dv);
        if (q3 < 0 || k3 < 0 || v3 < 0 || hq != hk || hq != hv || dq != dk || !isfinite(scale) || scale <= 0) continue;
        /* K and V of one batch and length; Attention's Y [batch, q seq, heads * vsize] is what the merge makes */
        const graph_value *qv = &g->values[q3], *kv = &g->values[k3], *vv = &g->values[v3];
        if (!same_dim(kv, 0, qv, 0) || !same_dim(vv, 0, qv, 0) || !same_dim(vv, 1, kv, 1)) continue;
        int64_t merged;
        if (!reshape_keeps_leading(g, &g->nodes[orsh], q3, 3, &merged) || merged != (int64_t)hq * dv) continue;
        if (mask >= 0) {
            /* the mask broadcasts to the scores [batch, heads, q seq, k seq] without enlarging them, and its last dim
             * is the key length (Attention pads a shorter mask with -inf where Add would broadcast a 1) */
            const graph_value *mv = &g->values[mask];
            bool fits = mv->ndim >= 1 && mv->ndim <= 4 && same_dim(mv, mv->ndim - 1, kv, 1);
            for (int d = 0; fits && d < mv->ndim - 1; d++) {
                int at = 4 - mv->ndim + d; /* its axis among the scores' */
                fits = mv->dims[d] == 1 || (at == 0 && same_dim(mv, d, qv, 0)) || (at == 1 && mv->dims[d] == hq) ||
                       (at == 2 && same_dim(mv, d, qv, 1));
            }
            if (!fits) continue;
        }
        int y = g->nodes[orsh].outputs[0];
        int in[4] = {q3, k3, v3, mask};
        char name[512];
        snprintf(name, sizeof name, "%s/Attention", g->nodes[qk].name);
        g->nodes[orsh].removed = true; /* its output is now the Attention's; the rest dies with no readers */
        int a = graph_add_node(g, name, "Attention", "", 23, in, mask >= 0 ? 4 : 3, &y, 1);
        if (a < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory fusing attention at '%s'", name);
        graph_node *an = &g->nodes[a];
        an->schema = op_schema_find("", "Attention");
        an->schema_index = op_schema_index(an->schema);
        graph_attr *sa;
        CINFER_TRY(graph_node_add_int_attr(an, "q_num_heads", hq));
        CINFER_TRY(graph_node_add_int_attr(an, "kv_num_heads", hq));
        CINFER_TRY(graph_node_add_attr(an, "scale", &sa));
        sa->type = ATTR_FLOAT;
        sa->f = (float)scale;
        /* a row of -inf scores: zeros behind the NaN guard, NaN from an unguarded Softmax (Attention's own rule
         * gives zeros) */
        CINFER_TRY(graph_node_add_int_attr(an, nan_to_zero ? "cinfer_nan_to_zero" : "cinfer_empty_rows_nan", 1));
        *changed = true;
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

/* ---- the Q, K and V projections of one input -> one GEMM ---- */

/* CINFER_PACK_QKV=0 keeps the three projection GEMMs apart (to compare). */
static bool pack_qkv_wanted(void) {
    const char *v = getenv("CINFER_PACK_QKV");
    return !v || strcmp(v, "0") != 0;
}

/* What fuse_matmul_bias made of y = MatMul(x, W) + b on a 3-D x: Reshape(Gemm(Reshape(x, [-1, K]), W, b),
 * Concat(lead, [N])), y read only by the node that asks. */
typedef struct projection {
    int x, rows, lead;   /* x, x as [rows, K] (the first Reshape's output), x's leading dims (the Concat's first) */
    int weight, bias;    /* float constants: W [N, K] with transB, else [K, N]; b of N elements */
    int64_t k, n;
    bool trans_b;
} projection;

static bool projection_of(const graph *g, int y, projection *p) {
    int r2 = producer_node(g, y);
    if (r2 < 0 || !single_use(g, y) || !is_op(&g->nodes[r2], "Reshape") || g->nodes[r2].num_inputs != 2) return false;
    int y2 = g->nodes[r2].inputs[0], gm = producer_node(g, y2), cc = producer_node(g, g->nodes[r2].inputs[1]);
    if (gm < 0 || !single_use(g, y2) || !is_op(&g->nodes[gm], "Gemm") || g->nodes[gm].num_inputs != 3) return false;
    if (cc < 0 || !is_op(&g->nodes[cc], "Concat") || g->nodes[cc].num_inputs != 2) return false;
    const graph_node *gn = &g->nodes[gm];
    for (int a = 0; a < gn->num_attrs; a++) /* alpha, beta or transA would change what the GEMM computes */
        if (strcmp(gn->attrs[a].name, "transB") != 0) return false;
    int r1 = producer_node(g, gn->inputs[0]);
    if (r1 < 0 || !is_op(&g->nodes[r1], "Reshape")) return false;
    p->x = g->nodes[r1].inputs[0], p->rows = gn->inputs[0], p->lead = g->nodes[cc].inputs[0];
    p->weight = gn->inputs[1], p->bias = gn->inputs[2];
    if (!graph_is_float_constant(g, p->weight) || !graph_is_float_constant(g, p->bias)) return false;
    const graph_value *last = &g->values[g->nodes[cc].inputs[1]]; /* the Concat's [N] */
    const tensor *w = &g->values[p->weight].constant;
    if (w->ndim != 2 || last->kind != VALUE_CONSTANT) return false;
    p->trans_b = graph_attr_int(gn, "transB", 0) != 0;
    p->n = w->dims[p->trans_b ? 0 : 1], p->k = w->dims[p->trans_b ? 1 : 0];
    return tensor_numel(&g->values[p->bias].constant) == p->n && last->constant.dtype == CINFER_DTYPE_INT64 &&
           tensor_numel(&last->constant) == 1 && ((const int64_t *)last->constant.data)[0] == p->n;
}

/* A new float constant of the three projections' weights side by side ([3N, K] with transB, else [K, 3N]) or
 * biases ([3N]); -1 on OOM. */
static int packed_constant(graph *g, const char *base, const projection *pr, bool weights) {
    const int64_t n = pr[0].n, k = pr[0].k, rows = weights && !pr[0].trans_b ? k : 1;
    const int64_t piece = weights && pr[0].trans_b ? n * k : n; /* floats of one projection in a row */
    float *buf = malloc((size_t)(rows * 3 * piece) * sizeof *buf);
    if (!buf) return -1;
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < 3; i++) {
            const float *src = g->values[weights ? pr[i].weight : pr[i].bias].constant.data;
            memcpy(buf + (r * 3 + i) * piece, src + r * piece, (size_t)piece * sizeof *buf);
        }
    tensor t = {.dtype = CINFER_DTYPE_FLOAT, .ndim = weights ? 2 : 1, .data = buf};
    if (!weights) t.dims[0] = 3 * n;
    else if (pr[0].trans_b) t.dims[0] = 3 * n, t.dims[1] = k;
    else t.dims[0] = k, t.dims[1] = 3 * n;
    char name[512];
    snprintf(name, sizeof name, "%s/%s", base, weights ? "qkv_weight" : "qkv_bias");
    int v = graph_new_constant(g, name, &t);
    free(buf);
    return v;
}

/* Attention(q, k, v) whose q, k and v are projections of one x (self-attention; fuse_matmul_bias's Gemms, one head
 * count for all three) reads one GEMM's output instead, [batch, seq, 3 * width] with Q, K and V its column thirds
 * ("cinfer_packed_qkv"): one kernel over x where there were three, and a GEMM three times as wide (BERT-base: 24
 * GEMMs a run fewer). The attention kernels read the thirds in place, rows 3 * width apart. */
static cinfer_status pack_qkv_projections(graph *g, bool *changed) {
    if (!pack_qkv_wanted()) return CINFER_OK;
    const int num_nodes = g->num_nodes;
    for (int i = 0; i < num_nodes; i++) {
        const graph_node *an = &g->nodes[i];
        if (!is_op(an, "Attention") || an->num_outputs != 1 || an->num_inputs < 3 || an->num_inputs > 4 ||
            graph_node_attr(an, "cinfer_packed_qkv"))
            continue;
        const int64_t heads = graph_attr_int(an, "q_num_heads", 0);
        if (heads <= 0 || graph_attr_int(an, "kv_num_heads", 0) != heads) continue;
        projection pr[3];
        bool fits = true;
        for (int j = 0; j < 3 && fits; j++) fits = projection_of(g, an->inputs[j], &pr[j]);
        for (int j = 1; j < 3 && fits; j++)
            fits = pr[j].x == pr[0].x && pr[j].k == pr[0].k && pr[j].n == pr[0].n && pr[j].trans_b == pr[0].trans_b;
        if (!fits) continue;
        char base[512], name[512];
        snprintf(base, sizeof base, "%s", an->name);
        const int64_t width3 = 3 * pr[0].n;
        const int w = packed_constant(g, base, pr, true), b = packed_constant(g, base, pr, false);
        const int last = const_i64(g, "cinfer_n", &width3, 1);
        snprintf(name, sizeof name, "%s/qkv_rows", base);
        const int rows = graph_new_value(g, name);
        snprintf(name, sizeof name, "%s/qkv_shape", base);
        const int shape = graph_new_value(g, name);
        snprintf(name, sizeof name, "%s/qkv", base);
        const int packed = graph_new_value(g, name);
        if (w < 0 || b < 0 || last < 0 || rows < 0 || shape < 0 || packed < 0)
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory packing the Q/K/V projections of '%s'", base);
        const int gm_in[3] = {pr[0].rows, w, b}, cc_in[2] = {pr[0].lead, last}, rs_in[2] = {rows, shape};
        const int gemm = add_fused_node(g, base, "Gemm", gm_in, 3, rows);
        const int concat = add_fused_node(g, base, "Concat", cc_in, 2, shape);
        if (gemm < 0 || concat < 0 || add_fused_node(g, base, "Reshape", rs_in, 2, packed) < 0)
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory packing the Q/K/V projections of '%s'", base);
        CINFER_TRY(graph_node_add_int_attr(&g->nodes[concat], "axis", 0));
        if (pr[0].trans_b) CINFER_TRY(graph_node_add_int_attr(&g->nodes[gemm], "transB", 1));
        graph_node *node = &g->nodes[i]; /* adding nodes may have moved it */
        for (int j = 0; j < 3; j++) node->inputs[j] = packed;
        CINFER_TRY(graph_node_add_int_attr(node, "cinfer_packed_qkv", 1));
        *changed = true;
        graph_recount_uses(g); /* the three projections' outputs now have no reader */
    }
    return CINFER_OK;
}

cinfer_status graph_fuse(graph *g) {
    graph_recount_uses(g);
    CINFER_TRY(merge_common_subexpressions(g));
    CINFER_TRY(fuse_gelu(g));
    CINFER_TRY(fuse_softmax_nan_guard(g));
    CINFER_TRY(fold_scales(g));
    bool added = false;
    CINFER_TRY(fuse_matmul_bias(g, &added));
    CINFER_TRY(fuse_conv_residual(g, &added));
    CINFER_TRY(fuse_layer_norm_residual(g, &added));
    if (added) { /* new nodes went to the end: put them in order for the passes after this one */
        graph_compact(g);
        CINFER_TRY(graph_sort(g));
    }
    return CINFER_OK;
}

cinfer_status graph_fuse_attention(graph *g) {
    graph_recount_uses(g);
    bool fused = false;
    CINFER_TRY(fuse_attention(g, &fused));
    if (!fused) return CINFER_OK;
    graph_compact(g);
    CINFER_TRY(graph_sort(g)); /* the new nodes went to the end: dead-node removal walks in order */
    graph_remove_dead_nodes(g); /* the head splits, the K transpose's shape arithmetic, the scores */
    graph_compact(g);
    bool packed = false;
    CINFER_TRY(pack_qkv_projections(g, &packed));
    if (packed) {
        CINFER_TRY(graph_sort(g));
        graph_remove_dead_nodes(g); /* the three projection GEMMs and their reshapes */
        graph_compact(g);
    }
    graph_mark_host_values(g);
    return CINFER_OK;
}

/* ---- elementwise chains: runs of float steps with scalar constants -> one ElementwiseChain node ---- */

/* c is a float constant of one element that broadcasting against a value of rank `rank` leaves its shape alone. */
static bool chain_constant(const graph *g, int c, int rank, float *out) {
    double v;
    if (!scalar_float(g, c, &v) || g->values[c].constant.ndim > rank) return false;
    *out = (float)v;
    return true;
}

/* Node n as a step on the float value v (its only non-constant input): sets the opcode and constants. */
static bool chain_step_of(const graph *g, const graph_node *n, int v, unsigned char *op, float *a, float *b) {
    const graph_value *vv = &g->values[v];
    if (n->removed || n->domain[0] || n->num_outputs != 1 || n->outputs[0] < 0 || vv->dtype != CINFER_DTYPE_FLOAT ||
        !shape_known(vv))
        return false;
    const int rank = vv->ndim < 0 ? 0 : vv->ndim; /* an unknown rank: scalars only */
    *a = *b = 0.0f;
    for (int k = 0; k < CHAIN_NUM_OPS; k++) {
        const char *unary = chain_unary_op_type(k);
        if (!unary || strcmp(n->op_type, unary) != 0) continue;
        if (n->num_inputs != 1 || n->inputs[0] != v) return false;
        *op = (unsigned char)k;
        if (k == CHAIN_LEAKY_RELU) *a = graph_attr_float(n, "alpha", 0.01f);
        return true;
    }
    if (strcmp(n->op_type, "Clip") == 0) { /* opset >= 11 (the loader's floor is 13): bounds are inputs */
        if (n->num_inputs < 1 || n->inputs[0] != v) return false;
        *op = CHAIN_CLIP;
        *a = -INFINITY;
        *b = INFINITY;
        for (int k = 1; k < n->num_inputs; k++)
            if (n->inputs[k] >= 0 && !chain_constant(g, n->inputs[k], 0, k == 1 ? a : b)) return false;
        return true;
    }
    static const struct { const char *op_type; chain_op op, reversed; } binary[] = {
        {"Add", CHAIN_ADD, CHAIN_ADD}, {"Sub", CHAIN_SUB, CHAIN_RSUB},
        {"Mul", CHAIN_MUL, CHAIN_MUL}, {"Div", CHAIN_DIV, CHAIN_RDIV},
    };
    for (size_t k = 0; k < sizeof binary / sizeof binary[0]; k++)
        if (strcmp(n->op_type, binary[k].op_type) == 0) {
            if (n->num_inputs != 2) return false;
            int side = n->inputs[0] == v ? 0 : n->inputs[1] == v ? 1 : -1;
            if (side < 0 || n->inputs[1 - side] == v || !chain_constant(g, n->inputs[1 - side], rank, a)) return false;
            *op = (unsigned char)(side == 0 ? binary[k].op : binary[k].reversed);
            return true;
        }
    return false;
}

/* Rewrites node n in place as ElementwiseChain(x) -> y with the given program (its position stays valid: x is
 * its input already, and y's readers come after the run's last node). */
static cinfer_status become_chain(graph_node *n, int x, int y, const int64_t *ops, const float *args, int steps) {
    char *op_type = strdup("ElementwiseChain");
    if (!op_type) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory fusing the chain at '%s'", n->name);
    free(n->op_type);
    n->op_type = op_type;
    for (int a = 0; a < n->num_attrs; a++) graph_attr_clear(&n->attrs[a]);
    n->num_attrs = 0;
    n->inputs[0] = x;
    n->num_inputs = 1;
    n->outputs[0] = y;
    n->schema = op_schema_find("", "ElementwiseChain");
    n->schema_index = op_schema_index(n->schema);
    graph_attr *at;
    CINFER_TRY(graph_node_add_attr(n, "cinfer_chain_ops", &at));
    CINFER_TRY(graph_node_add_attr(n, "cinfer_chain_args", &at));
    graph_attr *ops_attr = &n->attrs[0], *args_attr = &n->attrs[1]; /* the second add may have moved the first */
    ops_attr->type = ATTR_INTS;
    ops_attr->ints = malloc(sizeof(int64_t) * (size_t)steps);
    args_attr->type = ATTR_FLOATS;
    args_attr->floats = malloc(sizeof(float) * 2 * (size_t)steps);
    if (!ops_attr->ints || !args_attr->floats)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory fusing the chain at '%s'", n->name);
    memcpy(ops_attr->ints, ops, sizeof(int64_t) * (size_t)steps);
    memcpy(args_attr->floats, args, sizeof(float) * 2 * (size_t)steps);
    ops_attr->n = (size_t)steps;
    args_attr->n = 2 * (size_t)steps;
    return CINFER_OK;
}

cinfer_status graph_fuse_elementwise_chains(graph *g) {
    if (!op_schema_find("", "ElementwiseChain")) return CINFER_OK;
    graph_recount_uses(g);
    bool fused = false;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *head = &g->nodes[i];
        if (head->removed || head->num_inputs < 1) continue;
        /* the run's input: the head's one non-constant input */
        int x = -1;
        for (int k = 0; k < head->num_inputs && x < 0; k++)
            if (head->inputs[k] >= 0 && g->values[head->inputs[k]].kind != VALUE_CONSTANT) x = head->inputs[k];
        int64_t ops[CHAIN_MAX_STEPS];
        float args[2 * CHAIN_MAX_STEPS];
        int nodes[CHAIN_MAX_STEPS], steps = 0, v = x;
        unsigned char op;
        for (int at = i; x >= 0 && at >= 0 && steps < CHAIN_MAX_STEPS;) {
            if (!chain_step_of(g, &g->nodes[at], v, &op, &args[2 * steps], &args[2 * steps + 1])) break;
            ops[steps] = op;
            nodes[steps++] = at;
            v = g->nodes[at].outputs[0];
            at = single_use(g, v) ? only_consumer(g, v) : -1; /* an intermediate read elsewhere ends the run */
        }
        if (steps < 2) continue;
        for (int k = 1; k < steps; k++) g->nodes[nodes[k]].removed = true;
        CINFER_TRY(become_chain(head, x, v, ops, args, steps));
        fused = true;
    }
    if (fused) {
        graph_compact(g);
        graph_recount_uses(g);
    }
    return CINFER_OK;
}

/* In a half-precision graph, the casts graph_convert_precision put around a chain (float model input -> half,
 * half -> float model output) go into the chain: it reads and writes float directly, one pass instead of three
 * (the image pipeline: Cast, Sub, Div, Add, Clip, Cast -> one kernel), and without the two roundings to half. */
/* Node i is a Cast graph_convert_precision added (it names them so). */
static bool precision_cast(const graph *g, int i) {
    static const char prefix[] = "cinfer_precision_cast/";
    return i >= 0 && is_op(&g->nodes[i], "Cast") && strncmp(g->nodes[i].name, prefix, sizeof prefix - 1) == 0;
}

cinfer_status graph_chain_absorb_casts(graph *g) {
    graph_recount_uses(g);
    bool changed = false;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *c = &g->nodes[i];
        if (!is_op(c, "ElementwiseChain")) continue;
        int in = c->inputs[0], p = producer_node(g, in), out = c->outputs[0];
        int k = single_use(g, out) ? only_consumer(g, out) : -1;
        bool from_float = precision_cast(g, p) && single_use(g, in) &&
                          g->values[g->nodes[p].inputs[0]].dtype == CINFER_DTYPE_FLOAT;
        bool to_float = precision_cast(g, k) && graph_attr_int(&g->nodes[k], "to", 0) == CINFER_DTYPE_FLOAT;
        if (!from_float && !to_float) continue;
        /* the output type is said outright: it no longer follows the input's */
        CINFER_TRY(graph_node_add_int_attr(c, "cinfer_chain_to", to_float ? CINFER_DTYPE_FLOAT : g->values[in].dtype));
        if (from_float) {
            c->inputs[0] = g->nodes[p].inputs[0];
            g->nodes[p].removed = true;
        }
        if (to_float) {
            c->outputs[0] = g->nodes[k].outputs[0];
            g->nodes[k].removed = true;
        }
        changed = true;
        graph_recount_uses(g);
    }
    if (changed) graph_compact(g);
    return CINFER_OK;
}
