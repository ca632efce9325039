/* Public model API: load (file or memory), optimise, describe inputs/outputs, op histogram. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "onnx/contrib_ops.h"
#include "onnx/onnx_loader.h"
#include "onnx/opset_upgrade.h"
#include "runtime/model.h"
#include "backend/backend.h"
#include "backend/cuda_module.h"

/* The node evaluator the graph passes fold constants and probe shapes with: the CPU kernels, which every session's
 * host shape nodes run on too (session.c), so a folded value is what a plan would have computed. Stateless. */
static bool cpu_evaluator_has_op(void *ctx, const char *op_type) {
    (void)ctx;
    return backend_cpu_has_op(op_type);
}

static cinfer_status cpu_evaluator_run_node(void *ctx, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                            int num_out) {
    (void)ctx;
    return backend_cpu_run_node(n, in, num_in, out, num_out);
}

static const struct graph_evaluator_i cpu_evaluator = {
    .has_op = cpu_evaluator_has_op,
    .run_node = cpu_evaluator_run_node,
};

static cinfer_status build_stats(cinfer_model *m) {
    graph *g = m->graph;
    m->stats.opset = g->opset;
    m->stats.num_nodes = (size_t)g->num_nodes;
    m->stats.num_nodes_original = (size_t)g->num_nodes_original;
    for (int v = 0; v < g->num_values; v++)
        if (g->values[v].kind == VALUE_CONSTANT) {
            m->stats.num_parameters += (size_t)tensor_numel(&g->values[v].constant);
            m->stats.parameter_bytes += tensor_nbytes(&g->values[v].constant);
        }
    m->op_counts = calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof(op_count));
    if (!m->op_counts) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < g->num_nodes; i++) {
        if (g->nodes[i].host_eval) m->stats.num_host_shape_nodes++;
        size_t j = 0;
        while (j < m->num_op_counts && strcmp(m->op_counts[j].op_type, g->nodes[i].op_type) != 0) j++;
        if (j == m->num_op_counts) m->op_counts[m->num_op_counts++].op_type = g->nodes[i].op_type;
        m->op_counts[j].count++;
    }
    return CINFER_OK;
}

cinfer_status cinfer_model_load_from_memory(const void *bytes, size_t size, const char *base_dir, cinfer_model **out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_model_load_from_memory: out is NULL");
    *out = NULL;
    graph *g = NULL;
    CINFER_TRY(onnx_load_graph(bytes, size, base_dir, &g));
    g->evaluator = (graph_evaluator){.iface = &cpu_evaluator, .context = NULL};
    cinfer_status st = graph_sort(g);
    if (st == CINFER_OK) st = graph_bind_schemas(g);
    if (st == CINFER_OK) st = graph_optimize(g);
    if (st == CINFER_OK) st = graph_sort(g);
    cinfer_model *m = NULL;
    if (st == CINFER_OK) {
        m = calloc(1, sizeof *m);
        if (!m) st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == CINFER_OK) {
        m->graph = g;
        pthread_mutex_init(&m->precision_lock, NULL);
        st = build_stats(m);
        if (st != CINFER_OK) {
            cinfer_model_free(m);
            return st;
        }
        *out = m;
        return CINFER_OK;
    }
    graph_free(g);
    return st;
}

/* Reads the file at `path` into *bytes (malloc'd, the caller frees it) and *size. */
static cinfer_status read_model_file(const char *path, char **bytes, size_t *size) {
    *bytes = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return core_error(CINFER_ERR_IO, "cannot open model '%s': %s", path, strerror(errno));
    long length = -1;
    if (fseek(f, 0, SEEK_END) == 0) length = ftell(f);
    if (length < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return core_error(CINFER_ERR_IO, "cannot read model '%s'", path);
    }
    *bytes = malloc((size_t)length + 1);
    if (!*bytes) {
        fclose(f);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "model '%s': cannot allocate %ld bytes", path, length);
    }
    cinfer_status st = CINFER_OK;
    if (fread(*bytes, 1, (size_t)length, f) != (size_t)length) st = core_error(CINFER_ERR_IO, "cannot read model '%s'", path);
    fclose(f);
    if (st != CINFER_OK) {
        free(*bytes);
        *bytes = NULL;
    }
    *size = (size_t)length;
    return st;
}

cinfer_status cinfer_model_load(const char *path, cinfer_model **out) {
    if (!path || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_model_load: path and out are required");
    *out = NULL;
    char *bytes = NULL, *copy = NULL;
    size_t size = 0;
    CINFER_TRY(read_model_file(path, &bytes, &size));
    cinfer_status st = (copy = strdup(path)) ? CINFER_OK : core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == CINFER_OK) st = cinfer_model_load_from_memory(bytes, size, dirname(copy), out);
    if (st != CINFER_OK) core_error_prefix(st, "model '%s': ", path);
    free(copy);
    free(bytes);
    return st;
}

cinfer_status cinfer_model_unsupported_nodes(const char *path, void (*visit)(const cinfer_node_ref *node, void *ctx),
                                             void *ctx, size_t *count) {
    if (count) *count = 0;
    if (!path) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_model_unsupported_nodes: path is required");
    char *bytes = NULL, *copy = NULL;
    size_t size = 0;
    graph *g = NULL;
    CINFER_TRY(read_model_file(path, &bytes, &size));
    cinfer_status st = (copy = strdup(path)) ? CINFER_OK : core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == CINFER_OK) st = onnx_load_graph(bytes, size, dirname(copy), &g);
    if (st != CINFER_OK) {
        core_error_prefix(st, "model '%s': ", path);
        goto done;
    }
    g->evaluator = (graph_evaluator){.iface = &cpu_evaluator, .context = NULL}; /* what cinfer_model_load binds with */
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *n = &g->nodes[i];
        if (graph_node_supported(g, n)) continue;
        if (count) (*count)++;
        cinfer_node_ref ref = {.name = n->name, .op_type = n->op_type, .domain = n->domain, .opset = n->opset};
        if (visit) visit(&ref, ctx);
    }
done:
    graph_free(g);
    free(copy);
    free(bytes);
    return st;
}

void cinfer_model_free(cinfer_model *model) {
    if (!model) return;
    graph_free(model->graph);
    for (int i = 0; i < 4; i++) /* slots 2, 3 may share the graph of 0, 1 */
        if (i < 2 || model->half_graphs[i] != model->half_graphs[i - 2]) graph_free(model->half_graphs[i]);
    pthread_mutex_destroy(&model->precision_lock);
    free(model->op_counts);
    free(model);
}

size_t cinfer_model_num_inputs(const cinfer_model *model) { return model ? (size_t)model->graph->num_inputs : 0; }
size_t cinfer_model_num_outputs(const cinfer_model *model) { return model ? (size_t)model->graph->num_outputs : 0; }

static void fill_info(const graph_value *v, cinfer_value_info *out) {
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->ndim = v->ndim;
    for (int d = 0; d < v->ndim && d < CINFER_MAX_DIMS; d++) {
        out->dims[d] = v->dims[d];
        out->dim_names[d] = v->dim_names[d];
    }
}

cinfer_status cinfer_model_input_info(const cinfer_model *model, size_t index, cinfer_value_info *out) {
    if (!model || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_model_input_info: NULL argument");
    if (index >= (size_t)model->graph->num_inputs)
        return core_error(CINFER_ERR_NOT_FOUND, "input index %zu: the model has %d inputs", index, model->graph->num_inputs);
    fill_info(&model->graph->values[model->graph->inputs[index]], out);
    return CINFER_OK;
}

cinfer_status cinfer_model_output_info(const cinfer_model *model, size_t index, cinfer_value_info *out) {
    if (!model || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_model_output_info: NULL argument");
    if (index >= (size_t)model->graph->num_outputs)
        return core_error(CINFER_ERR_NOT_FOUND, "output index %zu: the model has %d outputs", index, model->graph->num_outputs);
    fill_info(&model->graph->values[model->graph->outputs[index]], out);
    return CINFER_OK;
}

cinfer_status cinfer_model_get_stats(const cinfer_model *model, cinfer_model_stats *out) {
    if (!model || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_model_get_stats: NULL argument");
    *out = model->stats;
    return CINFER_OK;
}

size_t cinfer_model_num_op_types(const cinfer_model *model) { return model ? model->num_op_counts : 0; }

cinfer_status cinfer_model_op_type(const cinfer_model *model, size_t index, const char **op_type, size_t *count) {
    if (!model || index >= model->num_op_counts) return core_error(CINFER_ERR_NOT_FOUND, "op type index %zu out of range", index);
    if (op_type) *op_type = model->op_counts[index].op_type;
    if (count) *count = model->op_counts[index].count;
    return CINFER_OK;
}

size_t cinfer_num_supported_ops(void) { return op_schema_count(); }

cinfer_status cinfer_supported_op(size_t index, const char **op_type, const char **backends) {
    const op_schema *s = op_schema_at(index);
    if (!s) return core_error(CINFER_ERR_NOT_FOUND, "op index %zu out of range", index);
    if (op_type) *op_type = s->op_type;
    if (backends) {
        /* the CUDA module is asked only where it loads (an NVIDIA driver is present, runtime/device.c) */
        const cuda_module_api *m = device_cuda_module();
        bool cpu = backend_cpu_has_op(s->op_type), cuda = m && m->has_op(s->op_type);
        *backends = cpu && cuda ? "cpu,cuda" : cpu ? "cpu" : cuda ? "cuda" : "";
    }
    return CINFER_OK;
}

size_t cinfer_num_op_entries(void) { return op_schema_count() + onnx_contrib_op_count(); }

cinfer_status cinfer_op_entry(size_t index, cinfer_op_info *out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_op_entry: out is NULL");
    if (index >= cinfer_num_op_entries()) return core_error(CINFER_ERR_NOT_FOUND, "op entry %zu out of range", index);
    if (index >= op_schema_count()) { /* a contrib op: lowered at import onto ONNX ops both backends run */
        *out = (cinfer_op_info){.op_type = onnx_contrib_op_name(index - op_schema_count()), .domain = "com.microsoft",
                                .first_opset = 1, .last_opset = 1, .backends = "lowered to ONNX ops"};
        return CINFER_OK;
    }
    *out = (cinfer_op_info){0};
    CINFER_TRY(cinfer_supported_op(index, &out->op_type, &out->backends));
    int first, last;
    bool onnx = opset_op_range(out->op_type, &first, &last);
    out->domain = onnx ? "ai.onnx" : "cinfer";
    out->first_opset = first;
    out->last_opset = last;
    return CINFER_OK;
}

/* CINFER_CHANNELS_LAST=0 keeps the CUDA backend's half-precision convolutions channels-first (to compare). */
static bool channels_last_wanted(void) {
    const char *v = getenv("CINFER_CHANNELS_LAST");
    return !v || strcmp(v, "0") != 0;
}

/* Makes half_graphs[slot] under precision_lock: the converted copy of the model's graph, and for slots 2, 3 its
 * channels-last form, made from a conversion of its own (so a model only CUDA sessions run keeps one half copy of its
 * weights, not two). Where the layout pass finds nothing to change, slots 2/3 and 0/1 share one graph. */
static cinfer_status make_half_graph(cinfer_model *m, cinfer_dtype compute, int slot) {
    if (m->half_graphs[slot]) return CINFER_OK;
    const bool last = slot >= 2;
    graph *g = graph_clone(m->graph);
    cinfer_status st = g ? graph_convert_precision(g, compute)
                         : core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory copying the graph for half precision");
    if (st == CINFER_OK) st = graph_chain_absorb_casts(g);
    bool changed = false;
    if (st == CINFER_OK && last) st = graph_to_channels_last(g, &changed);
    if (st != CINFER_OK) {
        graph_free(g);
        return st;
    }
    int first = last ? slot - 2 : slot + 2; /* the other layout's slot */
    if (last && !changed && m->half_graphs[first]) { /* the same graph: share the one made before */
        graph_free(g);
        g = m->half_graphs[first];
    } else if (last && !changed) {
        m->half_graphs[first] = g;
    }
    m->half_graphs[slot] = g;
    return CINFER_OK;
}

cinfer_status model_graph_for_precision(const cinfer_model *model, cinfer_dtype compute, bool cuda, const graph **out) {
    if (compute == CINFER_DTYPE_FLOAT) {
        *out = model->graph;
        return CINFER_OK;
    }
    cinfer_model *m = (cinfer_model *)model; /* the cache is the only state a loaded model changes */
    int slot = (compute == CINFER_DTYPE_FLOAT16 ? 0 : 1) + (cuda && channels_last_wanted() ? 2 : 0);
    pthread_mutex_lock(&m->precision_lock);
    cinfer_status st = make_half_graph(m, compute, slot);
    *out = m->half_graphs[slot];
    pthread_mutex_unlock(&m->precision_lock);
    return st;
}
