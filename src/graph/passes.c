/* Load-time graph passes that need no static shapes: Identity/Dropout removal, constant folding (through the
 * runtime's node evaluator, g->evaluator), Conv+BatchNormalization folding, and Conv/Gemm + activation fusion.
 * graph/optimize.c runs them in its order; they edit the graph with graph/upkeep.c's helpers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"

/* Identity and inference-mode Dropout forward their input: uses of the output are pointed at the input
 * (through chains of them) in one pass over the graph. */
cinfer_status graph_remove_identities(graph *g) {
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
    cinfer_status st = graph_evaluate_node(g, n, in, n->num_inputs, out, n->num_outputs);
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

cinfer_status graph_fold_constants(graph *g) {
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

/* Conv followed by an inference BatchNormalization: scale the weights and bias, drop the BN. */
cinfer_status graph_fold_conv_batchnorm(graph *g) {
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
cinfer_status graph_fuse_activations(graph *g) {
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
