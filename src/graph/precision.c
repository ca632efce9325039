/* Precision conversion: rewrites a float32 graph to compute in float16 or bfloat16 (session option "precision").
 *
 * Done once per (model, precision) on a copy of the optimised graph, so weights are converted at load and shared
 * by every session of that precision. Callers keep the model's dtypes: float inputs are cast down right after
 * entry and float outputs cast back up before leaving. Values whose contents decide shapes (evaluated on the host
 * while planning) stay float32. Softmax, LayerNormalization and reductions keep accumulating in float32 inside
 * their kernels whatever the storage type, so only storage and GEMM/convolution inputs lose precision.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"

/* Quantized graphs mix float scales with integer data under type rules of their own: not converted. */
static bool is_quantization_op(const char *op) {
    static const char *const ops[] = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                                      "QLinearMatMul",  "MatMulInteger",    "ConvInteger",           NULL};
    for (int i = 0; ops[i]; i++)
        if (strcmp(op, ops[i]) == 0) return true;
    return false;
}

/* Inputs that the ONNX type rules keep in float32 whatever the data type is (Resize's roi). */
static bool keeps_float(const graph_node *n, int input) { return strcmp(n->op_type, "Resize") == 0 && input == 1; }

/* Float to half storage, saturating finite values to the type's range (float16 tops out at 65504: a mask
 * constant of -3.4e38 must become -65504, not -inf, or 0 * mask turns into NaN). */
static uint16_t to_half(float f, cinfer_dtype half) {
    if (half == CINFER_DTYPE_BFLOAT16) return dtype_float_to_bf16(f);
    if (isfinite(f)) f = f > 65504.0f ? 65504.0f : f < -65504.0f ? -65504.0f : f;
    return dtype_float_to_half(f);
}

static cinfer_status convert_tensor(tensor *t, cinfer_dtype half, const char *what) {
    int64_t count = tensor_numel(t);
    uint16_t *h = core_aligned_alloc((size_t)count * sizeof(uint16_t));
    if (!h) return core_error(CINFER_ERR_OUT_OF_MEMORY, "precision conversion: out of memory converting %s", what);
    const float *f = t->data;
    for (int64_t i = 0; i < count; i++) h[i] = to_half(f[i], half);
    core_aligned_free(t->data);
    t->data = h;
    t->dtype = half;
    return CINFER_OK;
}

/* Adds Cast(from) -> to with the given target dtype. */
static cinfer_status add_cast(graph *g, int from, int to, cinfer_dtype dtype) {
    char name[512];
    snprintf(name, sizeof name, "cinfer_precision_cast/%s", g->values[to].name);
    int idx = graph_add_node(g, name, "Cast", "", g->opset, &from, 1, &to, 1);
    if (idx < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "precision conversion: out of memory adding '%s'", name);
    return graph_node_add_int_attr(&g->nodes[idx], "to", dtype);
}

/* Points the uses of `from` by nodes on the device (not host-evaluated, not float-only inputs) at `to`;
 * returns how many there were. */
static int repoint_device_uses(graph *g, int from, int to) {
    int count = 0;
    for (int i = 0; i < g->num_nodes; i++) {
        graph_node *n = &g->nodes[i];
        if (n->host_eval) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] == from && !keeps_float(n, k)) {
                n->inputs[k] = to;
                count++;
            }
    }
    return count;
}

static bool has_device_uses(const graph *g, int v) {
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *n = &g->nodes[i];
        if (n->host_eval) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] == v && !keeps_float(n, k)) return true;
    }
    return false;
}

/* Float results chosen by attribute (Cast's "to", the generators' "dtype"/"output_datatype", ConstantOfShape's
 * value) now produce the half type. */
static cinfer_status convert_node_types(graph_node *n, cinfer_dtype half) {
    static const char *const type_attrs[] = {"to", "dtype", "output_datatype", NULL};
    for (int a = 0; a < n->num_attrs; a++) {
        graph_attr *at = &n->attrs[a];
        for (int k = 0; type_attrs[k]; k++)
            if (at->type == ATTR_INT && strcmp(at->name, type_attrs[k]) == 0 && at->i == CINFER_DTYPE_FLOAT) at->i = half;
    }
    if (strcmp(n->op_type, "ConstantOfShape") == 0) {
        graph_attr *value = (graph_attr *)graph_node_attr(n, "value");
        if (value && value->type == ATTR_TENSOR && value->t.dtype == CINFER_DTYPE_FLOAT)
            return convert_tensor(&value->t, half, "ConstantOfShape's value");
        if (!value) { /* the default is a float32 zero */
            const uint16_t zero = 0;
            return graph_node_add_scalar_tensor_attr(n, "value", half, &zero);
        }
    }
    return CINFER_OK;
}

/* A float constant read by device nodes: converted in place, or (when the host or the caller also reads it as
 * float32) a converted copy for the device readers. */
static cinfer_status convert_constant(graph *g, int v, cinfer_dtype half) {
    graph_value *gv = &g->values[v];
    bool host_reads = gv->value_needed || gv->is_output;
    for (int i = 0; i < g->num_nodes && !host_reads; i++)
        for (int k = 0; k < g->nodes[i].num_inputs; k++)
            if (g->nodes[i].inputs[k] == v && keeps_float(&g->nodes[i], k)) host_reads = true;
    if (!host_reads) {
        gv->dtype = half;
        return convert_tensor(&gv->constant, half, gv->name);
    }
    char name[512];
    snprintf(name, sizeof name, "%s/%s", gv->name, half == CINFER_DTYPE_FLOAT16 ? "fp16" : "bf16");
    int copy = graph_new_constant(g, name, &gv->constant);
    if (copy < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "precision conversion: out of memory");
    g->values[copy].dtype = half;
    CINFER_TRY(convert_tensor(&g->values[copy].constant, half, name));
    repoint_device_uses(g, v, copy);
    return CINFER_OK;
}

cinfer_status graph_convert_precision(graph *g, cinfer_dtype half) {
    if (half != CINFER_DTYPE_FLOAT16 && half != CINFER_DTYPE_BFLOAT16)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "precision conversion: target must be float16 or bfloat16");
    for (int i = 0; i < g->num_nodes; i++)
        if (is_quantization_op(g->nodes[i].op_type))
            return core_error(CINFER_ERR_UNSUPPORTED,
                              "precision %s: the model is quantized (%s node '%s'); half precision applies to float32 models",
                              half == CINFER_DTYPE_FLOAT16 ? "fp16" : "bf16", g->nodes[i].op_type, g->nodes[i].name);
    for (int i = 0; i < g->num_nodes; i++)
        if (!g->nodes[i].host_eval) CINFER_TRY(convert_node_types(&g->nodes[i], half));
    int num_values = g->num_values; /* values added below are already converted */
    for (int v = 0; v < num_values; v++) {
        graph_value *gv = &g->values[v];
        if (gv->kind == VALUE_CONSTANT) {
            if (gv->constant.dtype == CINFER_DTYPE_FLOAT && has_device_uses(g, v)) CINFER_TRY(convert_constant(g, v, half));
        } else if (gv->kind == VALUE_INTERMEDIATE && !gv->value_needed && gv->dtype == CINFER_DTYPE_FLOAT && !gv->is_output) {
            gv->dtype = half; /* static type only; plans infer the real one */
        }
    }
    for (int i = 0; i < g->num_inputs; i++) {
        int v = g->inputs[i];
        if (g->values[v].dtype != CINFER_DTYPE_FLOAT || !has_device_uses(g, v)) continue;
        char name[512];
        snprintf(name, sizeof name, "%s/half", g->values[v].name);
        int low = graph_new_value(g, name);
        if (low < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "precision conversion: out of memory");
        g->values[low].dtype = half;
        repoint_device_uses(g, v, low);
        CINFER_TRY(add_cast(g, v, low, half));
    }
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k];
        const graph_value *gv = &g->values[v];
        if (gv->dtype != CINFER_DTYPE_FLOAT || gv->producer < 0 || g->nodes[gv->producer].host_eval) continue;
        bool seen = false;
        for (int j = 0; j < k; j++) seen = seen || g->outputs[j] == v;
        if (seen) continue;
        char name[512];
        snprintf(name, sizeof name, "%s/half", gv->name);
        int low = graph_new_value(g, name);
        if (low < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "precision conversion: out of memory");
        gv = &g->values[v];
        g->values[low].dtype = half;
        graph_node *producer = &g->nodes[gv->producer];
        for (int o = 0; o < producer->num_outputs; o++)
            if (producer->outputs[o] == v) producer->outputs[o] = low;
        repoint_device_uses(g, v, low);
        CINFER_TRY(add_cast(g, low, v, CINFER_DTYPE_FLOAT));
    }
    CINFER_TRY(graph_sort(g));
    CINFER_TRY(graph_bind_schemas(g));
    graph_mark_host_values(g);
    return CINFER_OK;
}
