/* Sessions: a model bound to a backend, with plans cached per input signature.
 *
 * A plan fixes every value's shape for one set of input shapes (plus the values of inputs that decide
 * shapes), holds the host-evaluated shape-subgraph results, and the arena offsets from the liveness
 * planner. Running with a cached plan does no per-op allocation: only the output buffers handed to the
 * caller are allocated.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda_module.h"
#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/planner.h"
#include "runtime/fault_backend.h"
#include "runtime/model.h"
#include "runtime/session_internal.h"
#include "runtime/session_options.h"

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void session_plan_free(cinfer_session *s, plan *p) {
    if (!p) return;
    for (int c = 0; c < PLAN_STAGE_CHILDREN; c++) session_plan_free(s, p->children[c]);
    free(p->external);
    chunks_free(s, p);
    if (p->host_owned)
        for (int v = 0; v < s->graph->num_values; v++) core_aligned_free(p->host_owned[v]);
    if (p->graph_exec) s->backend->iface->graph_destroy(s->backend, p->graph_exec);
    if (p->arena) s->backend->iface->release(s->backend, p->arena);
    if (p->io_block) s->backend->iface->release(s->backend, p->io_block);
    free(p->signature);
    free(p->values);
    free(p->offsets);
    free(p->host_owned);
    free(p->node_runs);
    free(p);
}

static cinfer_status bind_inputs(const graph *g, const cinfer_tensor *inputs, size_t num_inputs, bool need_data,
                                 const cinfer_tensor **bound);

/* Capacity planning (device backends, option max_batch): weights + the activations and io of a run at the
 * largest batch must leave at least CAPACITY_HEADROOM of the device's memory (or its configured limit) free. */
#define CAPACITY_HEADROOM 0.20

static cinfer_status check_capacity(cinfer_session *s, const session_options *opts) {
    long max_batch = opts->max_batch;
    const graph *g = s->graph;
    backend *b = s->backend;
    if (!b->iface->device_memory) return CINFER_OK; /* host memory: nothing to plan against */
    if (g->num_inputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model inputs");
    cinfer_tensor shapes[256];
    const cinfer_tensor *bound[256];
    for (int i = 0; i < g->num_inputs; i++) {
        const graph_value *v = &g->values[g->inputs[i]];
        cinfer_tensor *t = &shapes[i];
        memset(t, 0, sizeof *t);
        t->name = v->name;
        t->dtype = v->dtype;
        t->ndim = v->ndim < 0 ? 0 : v->ndim;
        if (v->value_needed)
            return core_error(CINFER_ERR_UNSUPPORTED, "capacity planning: input '%s' decides shapes by its values; "
                              "plan this model without max_batch", v->name);
        for (int d = 0; d < t->ndim; d++) {
            t->dims[d] = v->dims[d];
            if (t->dims[d] >= 0) continue;
            if (d == 0) {
                t->dims[d] = max_batch;
                continue;
            }
            for (size_t k = 0; k < opts->num_dims; k++)
                if (v->dim_names[d] && strcmp(opts->dim_names[k], v->dim_names[d]) == 0)
                    t->dims[d] = opts->dim_values[k];
            if (t->dims[d] <= 0)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "capacity planning: input '%s' dim %d ('%s') is dynamic: "
                                  "give its largest value with session option dim.%s=N", v->name, d,
                                  v->dim_names[d] ? v->dim_names[d] : "?", v->dim_names[d] ? v->dim_names[d] : "<name>");
        }
    }
    CINFER_TRY(bind_inputs(g, shapes, (size_t)g->num_inputs, false, bound));
    plan *p;
    CINFER_TRY(session_build_plan(s, bound, NULL, 0, true, NULL, &p));
    size_t run_bytes = p->arena_bytes;
    for (int i = 0; i < g->num_inputs; i++) run_bytes += tensor_nbytes(&p->values[g->inputs[i]]);
    for (int k = 0; k < g->num_outputs; k++) run_bytes += tensor_nbytes(&p->values[g->outputs[k]]);
    session_plan_free(s, p);
    size_t capacity = 0, in_use = 0;
    CINFER_TRY(b->iface->device_memory(b, &capacity, &in_use));
    /* in_use already holds this session's weights and workspace */
    double headroom = (double)capacity - (double)in_use - (double)run_bytes;
    if (headroom < CAPACITY_HEADROOM * (double)capacity)
        return core_error(CINFER_ERR_OUT_OF_MEMORY,
                          "capacity planning on %s: a batch of %ld needs %.1f MiB of activations and io on top of %.1f MiB "
                          "in use, leaving %.1f MiB of %.1f MiB free; at least %.0f%% must stay free (lower max_batch or "
                          "raise the device's memory limit)",
                          b->iface->name, max_batch, (double)run_bytes / 1048576.0, (double)in_use / 1048576.0,
                          headroom / 1048576.0, (double)capacity / 1048576.0, CAPACITY_HEADROOM * 100);
    return CINFER_OK;
}

/* Every node that runs on the backend (not the host-evaluated shape nodes) must have a kernel there; names
 * every missing op with its first node at once. A device backend's missing nodes run on the CPU kernels instead
 * (cpu_fallback, as onnxruntime does), when the CPU has them: those are listed once on stderr. */
static cinfer_status check_backend_ops(cinfer_session *s, int threads) {
    const graph *g = s->graph;
    backend *b = s->backend;
    char missing[1024];
    size_t used = 0;
    int count = 0;
    missing[0] = '\0';
    bool device = !b->iface->host_memory;
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *n = &g->nodes[i];
        if (n->host_eval || b->iface->supports_op(b, n)) continue;
        if (device && backend_cpu_has_op(n->op_type)) {
            if (!s->cpu_fallback && !(s->cpu_fallback = calloc((size_t)g->num_nodes, sizeof(bool))))
                return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
            s->cpu_fallback[i] = true;
            s->num_cpu_fallback++;
            continue;
        }
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !g->nodes[j].host_eval && strcmp(g->nodes[j].op_type, n->op_type) == 0 &&
                   !b->iface->supports_op(b, &g->nodes[j]);
        if (seen) continue;
        count++;
        if (used < sizeof missing - 80)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%s (node '%s')", count > 1 ? ", " : "",
                                     n->op_type, n->name);
    }
    if (count)
        return core_error(CINFER_ERR_UNSUPPORTED, "the %s backend has no kernel for %d op type%s of this model: %s",
                          b->iface->name, count, count > 1 ? "s" : "", missing);
    if (!s->num_cpu_fallback) return CINFER_OK;
    CINFER_TRY(backend_cpu_create(threads, &s->host_backend));
    used = 0;
    size_t listed = 0;
    for (int i = 0; i < g->num_nodes && used < sizeof missing - 80; i++)
        if (s->cpu_fallback[i])
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%s '%s'", listed++ ? ", " : "",
                                     g->nodes[i].op_type, g->nodes[i].name);
    fprintf(stderr, "cinfer: model '%s' on %s: %zu node%s without a %s kernel run on the CPU (inputs copied to the host, "
            "outputs back; the plans that hold them run without CUDA graphs): %s%s\n",
            g->name && g->name[0] ? g->name : "?", b->iface->name, s->num_cpu_fallback,
            s->num_cpu_fallback > 1 ? "s" : "", b->iface->name, missing, listed < s->num_cpu_fallback ? ", ..." : "");
    return CINFER_OK;
}

/* Data-dependent shapes: the nodes with OP_FLAG_DATA_DEPENDENT that run on the backend end the stages of a run
 * (host-evaluated ones are run while planning, where their actual shapes are read at once). */
static cinfer_status find_stage_ends(cinfer_session *s) {
    const graph *g = s->graph;
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *n = &g->nodes[i];
        if (n->host_eval || !(n->schema->flags & OP_FLAG_DATA_DEPENDENT)) continue;
        if (!s->stage_ends && !(s->stage_ends = malloc(sizeof(int) * (size_t)g->num_nodes)))
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        s->stage_ends[s->num_stage_ends++] = i;
    }
    if (s->num_stage_ends && !(s->run_values = calloc((size_t)g->num_values, sizeof(tensor))))
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    return CINFER_OK;
}

cinfer_status cinfer_session_create(const cinfer_model *model, const char *device, const char *const *option_keys,
                                    const char *const *option_values, size_t num_options, cinfer_session **out) {
    if (!model || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_create: model and out are required");
    *out = NULL;
    session_options opts;
    CINFER_TRY(session_options_parse(option_keys, option_values, num_options, &opts));
    int cuda_ordinal = -1;
    if (device && strcmp(device, "cpu") != 0) {
        bool valid = false;
        if (!device_parse_cuda(device, &cuda_ordinal, &valid))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "device '%s' is not known (devices: cpu, cuda, cuda:N)", device);
        if (!valid) return core_error(CINFER_ERR_INVALID_ARGUMENT, "device '%s': expected cuda or cuda:N with N >= 0", device);
    }
    const graph *run_graph;
    cinfer_dtype compute = opts.precision == PRECISION_FP16   ? CINFER_DTYPE_FLOAT16
                           : opts.precision == PRECISION_BF16 ? CINFER_DTYPE_BFLOAT16
                                                              : CINFER_DTYPE_FLOAT;
    CINFER_TRY(model_graph_for_precision(model, compute, cuda_ordinal >= 0, &run_graph));
    cinfer_session *s = calloc(1, sizeof *s);
    if (!s) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    s->model = model;
    s->graph = run_graph;

    pthread_mutex_init(&s->lock, NULL);
    s->profile = opts.profile;
    s->cuda_graphs = opts.cuda_graphs;
    s->guard_bytes = (size_t)opts.guard_bytes;
    s->copy_chunks = opts.copy_chunks;
    s->timeline = opts.timeline;
    if (opts.profile) {
        size_t count = (size_t)(run_graph->num_nodes ? run_graph->num_nodes : 1);
        s->node_seconds = calloc(count, sizeof(double));
        s->node_calls = calloc(count, sizeof(uint64_t));
        if (!s->node_seconds || !s->node_calls) {
            free(s->node_seconds);
            free(s->node_calls);
            free(s);
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    cinfer_status st;
    if (cuda_ordinal >= 0) {
        const cuda_module_api *m = device_cuda_module();
        cuda_backend_options opt = {.device = cuda_ordinal, .allow_tf32 = opts.precision == PRECISION_TF32,
                                    .deterministic = opts.deterministic,
                                    .blocking_wait = opts.gpu_wait == GPU_WAIT_BLOCK};
        st = m ? m->backend_create(&opt, run_graph, &s->backend) : CINFER_ERR_UNSUPPORTED;
        if (st != CINFER_OK) core_error_prefix(st, "device '%s': ", device);
    } else {
        st = backend_cpu_create((int)opts.threads, &s->backend);
    }
    if (st != CINFER_OK) {
        free(s->node_seconds);
        free(s->node_calls);
        free(s);
        return st;
    }
    fault_backend_wrap(&s->backend, run_graph); /* test-only fault points, off unless CINFER_FAULT_INJECTION=1 */
    st = check_backend_ops(s, (int)opts.threads);
    if (st == CINFER_OK) st = find_stage_ends(s);
    if (st == CINFER_OK && opts.timeline) {
        backend *b = s->backend;
        st = b->iface->timeline_enable ? b->iface->timeline_enable(b)
                                       : core_error(CINFER_ERR_INVALID_ARGUMENT, "session option 'timeline': the %s backend "
                                                    "has no streams to time (GPU sessions only)", b->iface->name);
    }
    if (st == CINFER_OK && opts.max_batch > 0) st = check_capacity(s, &opts);
    if (st != CINFER_OK) {
        cinfer_session_free(s);
        return st;
    }
    *out = s;
    return CINFER_OK;
}

void cinfer_session_free(cinfer_session *session) {
    if (!session) return;
    for (int i = 0; i < PLAN_CACHE_SIZE; i++) session_plan_free(session, session->plans[i]);
    if (session->backend) session->backend->iface->free(session->backend);
    if (session->host_backend) session->host_backend->iface->free(session->host_backend);
    free(session->cpu_fallback);
    core_aligned_free(session->fallback_host);
    free(session->stage_ends);
    free(session->run_values);
    free(session->node_seconds);
    free(session->node_calls);
    free(session->signature);
    free(session->guard_host);
    core_aligned_free(session->aligned_inputs);
    pthread_mutex_destroy(&session->lock);
    free(session);
}

void cinfer_tensor_free_data(cinfer_tensor *t) {
    if (!t) return;
    core_aligned_free(t->data);
    t->data = NULL;
}

/* Matches caller tensors to model inputs (by name, else by position) and checks dtype and shape. */
/* Bytes of a caller's tensor (its rank already checked). */
static size_t input_bytes(const cinfer_tensor *t) {
    tensor view = {.dtype = t->dtype, .ndim = t->ndim};
    memcpy(view.dims, t->dims, sizeof view.dims);
    return tensor_nbytes(&view);
}

/* need_data false (planning only): data may be NULL, except for inputs whose values decide shapes. */
static cinfer_status bind_inputs(const graph *g, const cinfer_tensor *inputs, size_t num_inputs, bool need_data,
                                 const cinfer_tensor **bound) {
    for (int i = 0; i < g->num_inputs; i++) bound[i] = NULL;
    for (size_t k = 0; k < num_inputs; k++) {
        const cinfer_tensor *t = &inputs[k];
        int idx = -1;
        if (t->name) {
            for (int i = 0; i < g->num_inputs; i++)
                if (strcmp(g->values[g->inputs[i]].name, t->name) == 0) idx = i;
            if (idx < 0) {
                char names[1024];
                size_t used = 0;
                names[0] = '\0';
                for (int i = 0; i < g->num_inputs && used < sizeof names - 64; i++)
                    used += (size_t)snprintf(names + used, sizeof names - used, "%s'%s'", i ? ", " : "", g->values[g->inputs[i]].name);
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s' is not an input of the model (inputs: %s)", t->name, names);
            }
        } else {
            if (k >= (size_t)g->num_inputs)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "%zu inputs given, the model has %d", num_inputs, g->num_inputs);
            idx = (int)k;
        }
        if (bound[idx]) return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s' is given twice", g->values[g->inputs[idx]].name);
        bound[idx] = t;
    }
    for (int i = 0; i < g->num_inputs; i++) {
        const graph_value *v = &g->values[g->inputs[i]];
        const cinfer_tensor *t = bound[i];
        if (!t) return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s' is missing", v->name);
        if (t->dtype != v->dtype)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': expected dtype %s, got %s", v->name,
                              cinfer_dtype_name(v->dtype), cinfer_dtype_name(t->dtype));
        if (t->ndim < 0 || t->ndim > CINFER_MAX_DIMS)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': rank %d is out of range", v->name, t->ndim);
        char want[256], got[256];
        tensor tw = {.ndim = v->ndim > 0 ? v->ndim : 0}, tg = {.dtype = t->dtype, .ndim = t->ndim};
        for (int d = 0; d < tw.ndim; d++) tw.dims[d] = v->dims[d];
        for (int d = 0; d < t->ndim; d++) tg.dims[d] = t->dims[d];
        if (v->ndim >= 0 && v->ndim != t->ndim)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': expected rank %d %s, got rank %d %s", v->name, v->ndim,
                              tensor_shape_str(&tw, want, sizeof want), t->ndim, tensor_shape_str(&tg, got, sizeof got));
        for (int d = 0; d < t->ndim; d++) {
            if (t->dims[d] < 0)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': dim %d is negative (%lld)", v->name, d, (long long)t->dims[d]);
            if (v->ndim >= 0 && v->dims[d] >= 0 && v->dims[d] != t->dims[d])
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': dim %d must be %lld, got %lld (expected shape %s, got %s)",
                                  v->name, d, (long long)v->dims[d], (long long)t->dims[d],
                                  tensor_shape_str(&tw, want, sizeof want), tensor_shape_str(&tg, got, sizeof got));
        }
        if (!tensor_size_fits(&tg))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': shape %s is too large (more than %lld bytes)",
                              v->name, tensor_shape_str(&tg, got, sizeof got), (long long)TENSOR_MAX_BYTES);
        if (!t->data && input_bytes(t) > 0 && (need_data || v->value_needed))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': data is NULL%s", v->name,
                              v->value_needed ? " (its values decide shapes, so data is required)" : "");
    }
    return CINFER_OK;
}

/* Signature: each input's dims, plus the bytes of inputs whose values decide shapes (bind_inputs made sure
 * those have data). Written into the session's reusable buffer: a run allocates nothing to look up its plan. */
static cinfer_status make_signature(cinfer_session *s, const cinfer_tensor **bound, size_t *out_len) {
    const graph *g = s->graph;
    size_t len = 0;
    for (int i = 0; i < g->num_inputs; i++) {
        len += sizeof(int) + sizeof(int64_t) * (size_t)bound[i]->ndim;
        if (g->values[g->inputs[i]].value_needed) {
            len += input_bytes(bound[i]);
        }
    }
    if (len > s->signature_cap) {
        unsigned char *grown = realloc(s->signature, len);
        if (!grown) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        s->signature = grown;
        s->signature_cap = len;
    }
    unsigned char *p = s->signature;
    for (int i = 0; i < g->num_inputs; i++) {
        memcpy(p, &bound[i]->ndim, sizeof(int));
        p += sizeof(int);
        memcpy(p, bound[i]->dims, sizeof(int64_t) * (size_t)bound[i]->ndim);
        p += sizeof(int64_t) * (size_t)bound[i]->ndim;
        if (g->values[g->inputs[i]].value_needed) {
            size_t nb = input_bytes(bound[i]);
            if (nb) memcpy(p, bound[i]->data, nb);
            p += nb;
        }
    }
    *out_len = len;
    return CINFER_OK;
}

static size_t align_io(size_t n) { return (n + 255) & ~(size_t)255; }

/* Device backends: constants point at the device's shared weights; model inputs, produced model outputs and
 * host-known values that device nodes read get slots in the plan's io block, the host-known ones uploaded now.
 * Every value the host knows keeps its host copy in host_data (kernels read parameters there; outputs that are
 * host-known are copied from there). */
static cinfer_status bind_device_values(cinfer_session *s, plan *p) {
    const graph *g = s->graph;
    backend *b = s->backend;
    int nv = g->num_values;
    bool *read_on_device = calloc((size_t)(nv ? nv : 1), sizeof(bool));
    int64_t *slot = malloc(sizeof(int64_t) * (size_t)(nv ? nv : 1));
    cinfer_status st = CINFER_OK;
    if (!read_on_device || !slot) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning");
        goto done;
    }
    for (int i = 0; i < g->num_nodes; i++) {
        if (!p->node_runs[i]) continue;
        for (int k = 0; k < g->nodes[i].num_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0) read_on_device[g->nodes[i].inputs[k]] = true;
    }
    p->io_bytes = 0;
    for (int v = 0; v < nv; v++) {
        const graph_value *gv = &g->values[v];
        tensor *t = &p->values[v];
        slot[v] = -1;
        if (gv->kind == VALUE_CONSTANT) {
            t->host_data = gv->constant.data;
            t->data = read_on_device[v] ? b->iface->constant_data(b, v) : NULL;
            continue;
        }
        bool produced_on_device = gv->producer >= 0 && p->node_runs[gv->producer];
        if (p->host_owned[v]) t->host_data = p->host_owned[v];
        bool needs_slot = (p->host_owned[v] && read_on_device[v]) ||
                          (gv->kind == VALUE_INPUT && !gv->value_needed && p->stage == 0) ||
                          (gv->is_output && produced_on_device && p->offsets[v] < 0);
        if (!needs_slot) {
            if (p->host_owned[v]) t->data = NULL; /* host-only: nothing on the device reads it */
            continue;
        }
        slot[v] = (int64_t)p->io_bytes;
        p->io_bytes += align_io(tensor_nbytes(t) ? tensor_nbytes(t) : 1);
    }
    st = b->iface->alloc(b, p->io_bytes, &p->io_block);
    if (st != CINFER_OK) goto done;
    for (int v = 0; v < nv; v++) {
        if (slot[v] < 0) continue;
        tensor *t = &p->values[v];
        t->data = (char *)p->io_block + slot[v];
        if (p->host_owned[v]) {
            st = b->iface->copy_to_device(b, t->data, p->host_owned[v], tensor_nbytes(t));
            if (st != CINFER_OK) goto done;
        }
    }
    st = b->iface->synchronize ? b->iface->synchronize(b) : CINFER_OK;
done:
    free(read_on_device);
    free(slot);
    return st;
}

/* Copying device-resident io through the plan's own buffers costs two memory passes per byte; launching a plan's
 * nodes one by one instead of replaying its CUDA graph (whose addresses are fixed) costs a few microseconds a node.
 * Binding the caller's buffers (cinfer_session_run_device) pays when the copies would move more than this many
 * bytes per node (an H200 copies about 4 MiB on the device in 2 us): a property of the plan, decided once. */
#define CALLER_BIND_BYTES_PER_NODE ((size_t)4 << 20)

/* Bytes of model input i that a device run copies into the plan's own buffer (0: none; host-evaluated inputs stay
 * on the host, an empty one keeps its own non-NULL slot, so an optional input's presence reads the same). */
static size_t device_input_bytes(const graph *g, const plan *p, int i) {
    const tensor *t = &p->values[g->inputs[i]];
    return g->values[g->inputs[i]].value_needed || !t->data ? 0 : tensor_nbytes(t);
}

static bool caller_binding_pays(const graph *g, const plan *p) {
    size_t copy_bytes = 0, nodes = 0;
    for (int i = 0; i < g->num_nodes; i++) nodes += p->node_runs[i];
    for (int i = 0; i < g->num_inputs; i++) copy_bytes += device_input_bytes(g, p, i);
    for (int k = 0; k < g->num_outputs; k++) copy_bytes += tensor_nbytes(&p->values[g->outputs[k]]);
    return copy_bytes >= nodes * CALLER_BIND_BYTES_PER_NODE;
}

/* ---- data-dependent shapes: stage keys ---- */

/* A stage's key: the actual output shapes of the node that ended the stage before (its ndim, then its dims, per
 * output), serialised into buf (NULL: only measured). Returns the length. */
static size_t stage_key(const graph_node *n, const tensor *values, unsigned char *buf) {
    size_t len = 0;
    for (int k = 0; k < n->num_outputs; k++) {
        int ndim = n->outputs[k] >= 0 ? values[n->outputs[k]].ndim : 0;
        if (buf) {
            memcpy(buf + len, &ndim, sizeof ndim);
            if (ndim) memcpy(buf + len + sizeof ndim, values[n->outputs[k]].dims, sizeof(int64_t) * (size_t)ndim);
        }
        len += sizeof ndim + sizeof(int64_t) * (size_t)ndim;
    }
    return len;
}

/* Node i ended stage j < the stage being planned: its outputs take the actual shapes in the key of stage j + 1 (the
 * plan being built, p, or one of its ancestors), each checked against the schema's bound in outs. */
static cinfer_status apply_stage_key(const cinfer_session *s, const plan *p, int j, const graph_node *n, tensor *outs) {
    const plan *keyed = p;
    while (keyed && keyed->stage != j + 1) keyed = keyed->parent;
    CINFER_ASSERT(keyed != NULL);
    const unsigned char *key = keyed->signature;
    size_t at = 0;
    for (int k = 0; k < n->num_outputs; k++) {
        int ndim;
        memcpy(&ndim, key + at, sizeof ndim);
        at += sizeof ndim;
        if (n->outputs[k] < 0) {
            at += sizeof(int64_t) * (size_t)ndim;
            continue;
        }
        bool fits = ndim == outs[k].ndim;
        for (int d = 0; fits && d < ndim; d++) {
            int64_t dim;
            memcpy(&dim, key + at + sizeof(int64_t) * (size_t)d, sizeof dim);
            fits = dim >= 0 && dim <= outs[k].dims[d];
            outs[k].dims[d] = dim;
        }
        at += sizeof(int64_t) * (size_t)ndim;
        if (!fits)
            return core_error(CINFER_ERR_RUNTIME, "%s node '%s': the kernel reported output %d of a shape beyond the "
                              "schema's bound", n->op_type, n->name, k);
    }
    (void)s;
    return CINFER_OK;
}

cinfer_status session_build_plan(cinfer_session *s, const cinfer_tensor **bound, unsigned char *signature,
                                 size_t signature_len, bool dry, const plan *parent, plan **out) {
    const graph *g = s->graph;
    int nv = g->num_values;
    plan *p = calloc(1, sizeof *p);
    bool *in_arena = NULL, *kept = NULL;
    cinfer_status st = CINFER_OK;
    if (!p) {
        free(signature);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    }
    p->signature = signature;
    p->signature_len = signature_len;
    p->parent = parent;
    /* the node range this plan runs: the whole graph, or its stage (dry plans size the whole graph at the bounds) */
    bool staged = s->num_stage_ends > 0 && !dry;
    p->stage = parent ? parent->stage + 1 : 0;
    p->stage_begin = parent ? parent->stage_end + 1 : 0;
    p->stage_end = staged && p->stage < s->num_stage_ends ? s->stage_ends[p->stage] : g->num_nodes - 1;
    p->values = calloc((size_t)(nv ? nv : 1), sizeof(tensor));
    p->offsets = calloc((size_t)(nv ? nv : 1), sizeof(int64_t));
    p->host_owned = calloc((size_t)(nv ? nv : 1), sizeof(void *));
    p->node_runs = calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof(bool));
    p->external = calloc((size_t)(nv ? nv : 1), sizeof(int));
    in_arena = calloc((size_t)(nv ? nv : 1), sizeof(bool));
    kept = calloc((size_t)(nv ? nv : 1), sizeof(bool));
    if (!p->values || !p->offsets || !p->host_owned || !p->node_runs || !p->external || !in_arena || !kept) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning");
        goto fail;
    }
    for (int v = 0; v < nv; v++) {
        const graph_value *gv = &g->values[v];
        if (gv->kind == VALUE_CONSTANT) p->values[v] = gv->constant;
    }
    for (int i = 0; i < g->num_inputs; i++) {
        int v = g->inputs[i];
        tensor *t = &p->values[v];
        t->dtype = bound[i]->dtype;
        t->ndim = bound[i]->ndim;
        memcpy(t->dims, bound[i]->dims, sizeof t->dims);
        if (g->values[v].value_needed) { /* the plan keeps its own copy: the caller's buffer changes per run */
            p->host_owned[v] = core_aligned_alloc(tensor_nbytes(t));
            if (!p->host_owned[v]) {
                st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning");
                goto fail;
            }
            if (tensor_nbytes(t)) memcpy(p->host_owned[v], bound[i]->data, tensor_nbytes(t));
            t->data = p->host_owned[v];
        } else if (p->stage > 0) {
            p->external[p->num_external++] = v; /* stage 0 holds the run's copy */
        }
    }
    /* shapes, in order up to the stage's end; shape subgraphs evaluated on the host as we go */
    int stage_of_node = 0; /* the stage node i belongs to */
    for (int i = 0; i <= p->stage_end; i++) {
        const graph_node *n = &g->nodes[i];
        tensor in[GRAPH_MAX_NODE_IO], outs[GRAPH_MAX_NODE_IO];
        for (int k = 0; k < n->num_inputs; k++) {
            if (n->inputs[k] < 0) memset(&in[k], 0, sizeof in[k]);
            else in[k] = p->values[n->inputs[k]];
            if (!n->host_eval && n->inputs[k] >= 0 && g->values[n->inputs[k]].kind == VALUE_INPUT &&
                !g->values[n->inputs[k]].value_needed)
                in[k].data = NULL; /* a caller's buffer: not known while planning */
        }
        memset(outs, 0, sizeof(tensor) * (size_t)n->num_outputs);
        st = n->schema->infer(n, in, n->num_inputs, outs, n->num_outputs);
        if (st != CINFER_OK) goto fail;
        bool ends_stage = staged && stage_of_node < s->num_stage_ends && s->stage_ends[stage_of_node] == i;
        if (ends_stage && stage_of_node < p->stage) { /* an earlier stage's end: its actual shapes */
            st = apply_stage_key(s, p, stage_of_node, n, outs);
            if (st != CINFER_OK) goto fail;
        }
        for (int k = 0; k < n->num_outputs; k++) {
            if (outs[k].ndim > CINFER_MAX_DIMS || outs[k].ndim < 0) {
                st = core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': output %d has rank %d", n->op_type, n->name, k, outs[k].ndim);
                goto fail;
            }
            for (int d = 0; d < outs[k].ndim; d++)
                if (outs[k].dims[d] < 0) {
                    st = core_error(CINFER_ERR_RUNTIME, "%s node '%s': inferred a negative dim for output %d", n->op_type, n->name, k);
                    goto fail;
                }
            if (!tensor_size_fits(&outs[k])) {
                char shape[256];
                st = core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output %d of shape %s would be more than %lld bytes",
                                n->op_type, n->name, k, tensor_shape_str(&outs[k], shape, sizeof shape),
                                (long long)TENSOR_MAX_BYTES);
                goto fail;
            }
            if (n->outputs[k] >= 0) {
                outs[k].data = NULL;
                p->values[n->outputs[k]] = outs[k];
            }
        }
        if (n->host_eval) {
            for (int k = 0; k < n->num_outputs; k++) {
                outs[k].data = core_aligned_alloc(tensor_nbytes(&outs[k]));
                if (!outs[k].data) {
                    for (int j = 0; j < k; j++)
                        if (n->outputs[j] < 0) core_aligned_free(outs[j].data);
                    st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning");
                    goto fail;
                }
                if (n->outputs[k] >= 0) {
                    p->host_owned[n->outputs[k]] = outs[k].data;
                    p->values[n->outputs[k]].data = outs[k].data;
                }
            }
            st = backend_cpu_run_node(n, in, n->num_inputs, outs, n->num_outputs);
            for (int k = 0; k < n->num_outputs; k++) {
                if (n->outputs[k] < 0) core_aligned_free(outs[k].data);
                else if (n->schema->flags & OP_FLAG_DATA_DEPENDENT) { /* the kernel wrote the actual shape */
                    p->values[n->outputs[k]].ndim = outs[k].ndim;
                    memcpy(p->values[n->outputs[k]].dims, outs[k].dims, sizeof outs[k].dims);
                }
            }
            if (st != CINFER_OK) goto fail;
        } else if (i >= p->stage_begin) {
            p->node_runs[i] = true;
            /* a node on the CPU (cpu_fallback) or one that ends a stage needs the host mid-run: no CUDA graph */
            if ((s->cpu_fallback && s->cpu_fallback[i]) || ends_stage) p->graph_impossible = true;
        } else {
            for (int k = 0; k < n->num_outputs; k++)
                if (n->outputs[k] >= 0) p->external[p->num_external++] = n->outputs[k];
        }
        if (ends_stage) stage_of_node++;
    }
    /* memory: intermediates of nodes that run go to the arena; model outputs get their own buffers, except in staged
     * runs, where outputs (copied out at the end) and values later stages read stay in the arena, kept */
    for (int i = p->stage_begin; i <= p->stage_end; i++) {
        if (!p->node_runs[i]) continue;
        const graph_node *n = &g->nodes[i];
        for (int k = 0; k < n->num_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            in_arena[v] = !g->values[v].is_output || s->guard_bytes || staged; /* guarded: outputs are checked too */
            kept[v] = staged && g->values[v].is_output;
        }
    }
    for (int i = p->stage_end + 1; staged && i < g->num_nodes; i++)
        for (int k = 0; k < g->nodes[i].num_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0 && in_arena[g->nodes[i].inputs[k]]) kept[g->nodes[i].inputs[k]] = true;
    if (s->guard_bytes)
        st = graph_plan_memory_guarded(g, p->node_runs, p->values, in_arena, s->guard_bytes, p->offsets, &p->arena_bytes);
    else
        st = graph_plan_memory_kept(g, p->node_runs, p->values, in_arena, kept, p->offsets, &p->arena_bytes);
    if (st != CINFER_OK) goto fail;
    if (dry) {
        free(in_arena);
        free(kept);
        *out = p;
        return CINFER_OK;
    }
    st = s->backend->iface->alloc(s->backend, p->arena_bytes, &p->arena);
    if (st != CINFER_OK) goto fail;
    for (int v = 0; v < nv; v++)
        if (p->offsets[v] >= 0) p->values[v].data = (char *)p->arena + p->offsets[v];
    if (!s->backend->iface->host_memory) {
        st = bind_device_values(s, p);
        if (st != CINFER_OK) goto fail;
        p->caller_binding_pays = !staged && caller_binding_pays(g, p);
    }
    if (p->graph_impossible && s->cuda_graphs && s->backend->iface->graph_begin) s->graph_fallbacks++;
    free(in_arena);
    free(kept);
    *out = p;
    return CINFER_OK;
fail:
    free(in_arena);
    free(kept);
    session_plan_free(s, p);
    return st;
}

static cinfer_status find_or_build_plan(cinfer_session *s, const cinfer_tensor **bound, plan **out) {
    size_t len = 0;
    CINFER_TRY(make_signature(s, bound, &len));
    const unsigned char *sig = s->signature;
    int free_slot = -1, oldest = 0;
    for (int i = 0; i < PLAN_CACHE_SIZE; i++) {
        plan *p = s->plans[i];
        if (!p) {
            if (free_slot < 0) free_slot = i;
            continue;
        }
        if (p->signature_len == len && memcmp(p->signature, sig, len) == 0) {
            p->last_used = ++s->clock;
            *out = p;
            return CINFER_OK;
        }
        if (s->plans[oldest] && p->last_used < s->plans[oldest]->last_used) oldest = i;
    }
    unsigned char *own = malloc(len ? len : 1); /* the plan keeps its own copy */
    if (!own) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    if (len) memcpy(own, sig, len);
    plan *p;
    CINFER_TRY(session_build_plan(s, bound, own, len, false, NULL, &p));
    int slot = free_slot >= 0 ? free_slot : oldest;
    session_plan_free(s, s->plans[slot]);
    s->plans[slot] = p;
    p->last_used = ++s->clock;
    *out = p;
    return CINFER_OK;
}

static cinfer_status plan_memory_locked(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        size_t *arena_bytes);

cinfer_status cinfer_session_plan_memory(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                         size_t *arena_bytes) {
    if (!session) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_plan_memory: session is NULL");
    pthread_mutex_lock(&session->lock);
    cinfer_status st = plan_memory_locked(session, inputs, num_inputs, arena_bytes);
    pthread_mutex_unlock(&session->lock);
    return st;
}

static cinfer_status plan_memory_locked(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        size_t *arena_bytes) {
    if (!session || !arena_bytes) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_plan_memory: NULL argument");
    const graph *g = session->graph;
    const cinfer_tensor *bound[256];
    if (g->num_inputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model inputs");
    CINFER_TRY(bind_inputs(g, inputs, num_inputs, false, bound));
    plan *p;
    CINFER_TRY(find_or_build_plan(session, bound, &p));
    *arena_bytes = p->arena_bytes;
    return CINFER_OK;
}

static cinfer_status session_run_locked(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        cinfer_tensor *outputs, size_t num_outputs, bool caller_outputs);
static cinfer_status check_device_outputs(const cinfer_session *s, const plan *p, const cinfer_tensor *outputs,
                                          size_t num_outputs, const char *fn);

#define GUARD_PATTERN 0xA5

/* Guarded layout: fills the whole arena with the pattern before the nodes run. */
static cinfer_status guard_fill(cinfer_session *s, plan *p) {
    if (p->arena_bytes > s->guard_host_bytes) {
        unsigned char *h = realloc(s->guard_host, p->arena_bytes);
        if (!h) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory for the guard image");
        s->guard_host = h;
        s->guard_host_bytes = p->arena_bytes;
    }
    memset(s->guard_host, GUARD_PATTERN, p->arena_bytes);
    return s->backend->iface->copy_to_device(s->backend, p->arena, s->guard_host, p->arena_bytes);
}

/* After the run: every arena byte outside the values' own bytes must still hold the pattern. */
static cinfer_status guard_check(cinfer_session *s, plan *p) {
    const graph *g = s->graph;
    backend *b = s->backend;
    CINFER_TRY(b->iface->copy_to_host(b, s->guard_host, p->arena, p->arena_bytes));
    if (b->iface->synchronize) CINFER_TRY(b->iface->synchronize(b));
    for (int v = 0; v < g->num_values; v++) {
        if (p->offsets[v] < 0) continue;
        size_t start = (size_t)p->offsets[v], end = start + tensor_nbytes(&p->values[v]);
        size_t guard = s->guard_bytes;
        size_t lo = start >= guard ? start - guard : 0, hi = end + guard < p->arena_bytes ? end + guard : p->arena_bytes;
        for (size_t i = lo; i < hi; i++) {
            if (i == start) i = end;
            if (i >= hi) break;
            if (s->guard_host[i] != GUARD_PATTERN) {
                int producer = g->values[v].producer;
                return core_error(CINFER_ERR_RUNTIME,
                                  "guard bytes %s value '%s' (output of %s node '%s') were overwritten at byte %lld "
                                  "relative to its start: an out-of-bounds write",
                                  i < start ? "before" : "after", g->values[v].name,
                                  producer >= 0 ? g->nodes[producer].op_type : "?",
                                  producer >= 0 ? g->nodes[producer].name : "?", (long long)i - (long long)start);
            }
        }
    }
    return CINFER_OK;
}

/* Host backends read caller inputs in place; kernels load whole elements, so an input whose data is not aligned
 * to its element size (a binary tensor right after a JSON header, say) is first copied to an aligned buffer. */
static cinfer_status bind_host_inputs(cinfer_session *s, plan *p, const cinfer_tensor **bound) {
    const graph *g = s->graph;
    size_t misaligned_bytes = 0;
    for (int i = 0; i < g->num_inputs; i++) {
        size_t es = cinfer_dtype_size(bound[i]->dtype);
        if (es > 1 && (uintptr_t)bound[i]->data % es) misaligned_bytes += (input_bytes(bound[i]) + 63) & ~(size_t)63;
    }
    if (misaligned_bytes > s->aligned_inputs_bytes) {
        void *grown = core_aligned_alloc(misaligned_bytes);
        if (!grown) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory aligning %zu input bytes", misaligned_bytes);
        core_aligned_free(s->aligned_inputs);
        s->aligned_inputs = grown;
        s->aligned_inputs_bytes = misaligned_bytes;
    }
    size_t used = 0;
    for (int i = 0; i < g->num_inputs; i++) {
        if (g->values[g->inputs[i]].value_needed) continue;
        void *data = bound[i]->data;
        size_t es = cinfer_dtype_size(bound[i]->dtype);
        if (es > 1 && (uintptr_t)data % es) {
            size_t nb = input_bytes(bound[i]);
            memcpy((char *)s->aligned_inputs + used, data, nb);
            data = (char *)s->aligned_inputs + used;
            used += (nb + 63) & ~(size_t)63;
        }
        p->values[g->inputs[i]].data = data;
    }
    return CINFER_OK;
}

/* cpu_fallback: node n of a device session on the CPU kernels. Its inputs come to the host (values the host
 * knows, constants and shape values, are read from their host copies), it runs on the session's CPU backend, and
 * its outputs go back to their device buffers; a data-dependent node's actual dims are passed on in out. The
 * device is synchronised once per such node (its producers must have finished); the uploads are staged, so the
 * host buffer is free for the next such node at once. */
static cinfer_status run_node_on_cpu(cinfer_session *s, const graph_node *n, const tensor *in, tensor *out) {
    backend *b = s->backend;
    size_t need = 0;
    for (int k = 0; k < n->num_inputs; k++)
        if (in[k].dtype != CINFER_DTYPE_UNDEFINED && !in[k].host_data) need += (tensor_nbytes(&in[k]) + 63) & ~(size_t)63;
    for (int k = 0; k < n->num_outputs; k++)
        if (out[k].data) need += (tensor_nbytes(&out[k]) + 63) & ~(size_t)63;
    if (need + 64 > s->fallback_host_bytes) {
        void *grown = core_aligned_alloc(need + 64);
        if (!grown)
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s' (run on the CPU): cannot allocate %zu host bytes",
                              n->op_type, n->name, need + 64);
        core_aligned_free(s->fallback_host);
        s->fallback_host = grown;
        s->fallback_host_bytes = need + 64;
    }
    tensor hin[GRAPH_MAX_NODE_IO], hout[GRAPH_MAX_NODE_IO];
    char *cursor = s->fallback_host;
    for (int k = 0; k < n->num_inputs; k++) {
        hin[k] = in[k];
        hin[k].host_data = NULL;
        if (in[k].dtype == CINFER_DTYPE_UNDEFINED) {
            hin[k].data = NULL;
        } else if (in[k].host_data) {
            hin[k].data = (void *)in[k].host_data;
        } else {
            size_t nb = tensor_nbytes(&in[k]);
            hin[k].data = cursor;
            if (nb) CINFER_TRY(b->iface->copy_to_host(b, cursor, in[k].data, nb));
            cursor += (nb + 63) & ~(size_t)63;
        }
    }
    if (b->iface->synchronize) CINFER_TRY(b->iface->synchronize(b));
    for (int k = 0; k < n->num_outputs; k++) {
        hout[k] = out[k];
        hout[k].host_data = NULL;
        if (!out[k].data) continue;
        hout[k].data = cursor;
        cursor += (tensor_nbytes(&out[k]) + 63) & ~(size_t)63;
    }
    CINFER_TRY(s->host_backend->iface->run_node(s->host_backend, n, hin, n->num_inputs, hout, n->num_outputs));
    for (int k = 0; k < n->num_outputs; k++) {
        if (!out[k].data) continue;
        size_t nb = tensor_nbytes(&hout[k]); /* a data-dependent output's actual size */
        if (nb) CINFER_TRY(b->iface->copy_to_device(b, out[k].data, hout[k].data, nb));
        out[k].ndim = hout[k].ndim;
        memcpy(out[k].dims, hout[k].dims, sizeof out[k].dims);
    }
    return CINFER_OK;
}

/* Runs the plan's backend nodes in order (cpu_fallback nodes on the CPU). In a staged run, a data-dependent node's
 * actual output dims (which its kernel wrote into out) go to session.run_values. */
static cinfer_status run_nodes(cinfer_session *session, plan *p) {
    const graph *g = session->graph;
    backend *b = session->backend;
    if (session->guard_bytes) CINFER_TRY(guard_fill(session, p));
    for (int i = 0; i < g->num_nodes; i++) {
        if (!p->node_runs[i]) continue;
        const graph_node *n = &g->nodes[i];
        tensor in[GRAPH_MAX_NODE_IO], out[GRAPH_MAX_NODE_IO];
        for (int k = 0; k < n->num_inputs; k++) {
            if (n->inputs[k] < 0) memset(&in[k], 0, sizeof in[k]);
            else in[k] = p->values[n->inputs[k]];
        }
        for (int k = 0; k < n->num_outputs; k++) {
            if (n->outputs[k] < 0) memset(&out[k], 0, sizeof out[k]);
            else out[k] = p->values[n->outputs[k]];
        }
        double t0 = session->profile ? monotonic_seconds() : 0;
        if (session->cpu_fallback && session->cpu_fallback[i]) CINFER_TRY(run_node_on_cpu(session, n, in, out));
        else CINFER_TRY(b->iface->run_node(b, n, in, n->num_inputs, out, n->num_outputs));
        if (session->run_values && (n->schema->flags & OP_FLAG_DATA_DEPENDENT))
            for (int k = 0; k < n->num_outputs; k++) {
                if (n->outputs[k] < 0) continue;
                tensor *actual = &session->run_values[n->outputs[k]];
                actual->ndim = out[k].ndim;
                memcpy(actual->dims, out[k].dims, sizeof actual->dims);
            }
        if (session->profile) {
            if (b->iface->synchronize) CINFER_TRY(b->iface->synchronize(b)); /* time the work, not the launch */
            session->node_seconds[i] += monotonic_seconds() - t0;
            session->node_calls[i]++;
        }
    }
    if (session->guard_bytes) CINFER_TRY(guard_check(session, p));
    return CINFER_OK;
}

/* Device backends: the plan's nodes, through a CUDA graph where possible. The first run of a plan is plain (it
 * builds the cuDNN/cuBLASLt plans and grows the scratch buffer, which capture must not do); the second is
 * captured and replayed; later ones replay. A plan whose capture fails (an op the driver cannot capture) keeps
 * running plain, counted as a fallback; an error while capturing is retried plain, so a real fault still shows. */
cinfer_status session_run_device_nodes(cinfer_session *s, plan *p) {
    backend *b = s->backend;
    s->graph_replayed = false;
    if (!s->cuda_graphs || !b->iface->graph_begin || s->profile || s->guard_bytes || p->graph_impossible)
        return run_nodes(s, p);
    if (p->device_runs == 0) { /* a failed first run (out of memory, say) must not count as the warm-up */
        CINFER_TRY(run_nodes(s, p));
        p->device_runs++;
        return CINFER_OK;
    }
    if (p->graph_exec) {
        bool stale = false;
        CINFER_TRY(b->iface->graph_launch(b, p->graph_exec, &stale));
        if (!stale) {
            s->graph_replayed = true;
            return CINFER_OK;
        }
        b->iface->graph_destroy(b, p->graph_exec); /* session memory it used has moved: capture again */
        p->graph_exec = NULL;
    }
    cinfer_status st = b->iface->graph_begin(b);
    if (st == CINFER_OK) {
        st = run_nodes(s, p);
        p->graph_exec = b->iface->graph_end(b, st == CINFER_OK);
    }
    if (!p->graph_exec) {
        if (++p->capture_failures >= 3) {
            p->graph_impossible = true;
            s->graph_fallbacks++;
        }
        return run_nodes(s, p);
    }
    s->graph_captures++;
    bool stale = false;
    CINFER_TRY(b->iface->graph_launch(b, p->graph_exec, &stale));
    s->graph_replayed = !stale;
    return stale ? run_nodes(s, p) : CINFER_OK;
}

#define CALLER_BIND_ALIGN 256 /* what the plan's own io buffers guarantee the kernels */

static bool ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
    return (uintptr_t)a < (uintptr_t)b + bn && (uintptr_t)b < (uintptr_t)a + an;
}

/* cinfer_session_run_device: whether the plan's nodes can read the caller's inputs and write its outputs in place
 * of the plan's own io buffers, where that beats copying (p->caller_binding_pays). Every buffer must be
 * this device's memory, as aligned as the plan's, with no output overlapping another buffer; every output must be
 * produced by a node (listed once). The planner already keeps model inputs and outputs out of the arena and never
 * writes an input, which is what host backends rely on when they read caller inputs in place. */
static bool caller_buffers_bindable(cinfer_session *s, const plan *p, const cinfer_tensor **bound,
                                    const cinfer_tensor *outputs) {
    const graph *g = s->graph;
    backend *b = s->backend;
    if (!p->caller_binding_pays || !b->iface->owns_device_range || s->guard_bytes) return false;
    for (int i = 0; i < g->num_inputs; i++) {
        size_t nb = device_input_bytes(g, p, i);
        if (!nb) continue;
        if ((uintptr_t)bound[i]->data % CALLER_BIND_ALIGN || !b->iface->owns_device_range(b, bound[i]->data, nb))
            return false;
    }
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k];
        const graph_value *gv = &g->values[v];
        size_t nb = tensor_nbytes(&p->values[v]);
        if (gv->producer < 0 || !p->node_runs[gv->producer] || !nb) return false;
        if ((uintptr_t)outputs[k].data % CALLER_BIND_ALIGN || !b->iface->owns_device_range(b, outputs[k].data, nb))
            return false;
        for (int j = 0; j < k; j++)
            if (g->outputs[j] == v || ranges_overlap(outputs[j].data, tensor_nbytes(&p->values[g->outputs[j]]),
                                                     outputs[k].data, nb))
                return false;
        for (int i = 0; i < g->num_inputs; i++)
            if (ranges_overlap(bound[i]->data, input_bytes(bound[i]), outputs[k].data, nb)) return false;
    }
    return true;
}

/* The plan's nodes on the caller's buffers (caller_buffers_bindable said yes), plain launches; the plan's own
 * buffer addresses are put back afterwards, for its CUDA graph and later runs. */
static cinfer_status run_on_caller_buffers(cinfer_session *s, plan *p, const cinfer_tensor **bound,
                                           cinfer_tensor *outputs) {
    const graph *g = s->graph;
    void *own_inputs[256], *own_outputs[256];
    for (int i = 0; i < g->num_inputs; i++) {
        tensor *t = &p->values[g->inputs[i]];
        own_inputs[i] = t->data;
        if (device_input_bytes(g, p, i)) t->data = bound[i]->data; /* the inputs caller_buffers_bindable checked */
    }
    for (int k = 0; k < g->num_outputs; k++) {
        own_outputs[k] = p->values[g->outputs[k]].data;
        p->values[g->outputs[k]].data = outputs[k].data;
    }
    cinfer_status st = run_nodes(s, p);
    for (int k = g->num_outputs - 1; k >= 0; k--) p->values[g->outputs[k]].data = own_outputs[k];
    for (int i = 0; i < g->num_inputs; i++) p->values[g->inputs[i]].data = own_inputs[i];
    s->graph_replayed = false;
    s->caller_buffers_bound = st == CINFER_OK;
    return st;
}

/* ---- chunked copies: pointwise models from and to page-locked host memory ---- */

/* Device backends: inputs in, nodes, produced outputs out; host-known outputs come from their host copies.
 * Caller buffers are host memory (copies through pinned staging, then a wait for the stream) or, for
 * cinfer_session_run_device, device memory (device-to-device copies, nothing waited for). */
static cinfer_status run_on_device(cinfer_session *session, plan *p, const cinfer_tensor **bound, cinfer_tensor *outputs,
                                   bool caller_on_device) {
    const graph *g = session->graph;
    backend *b = session->backend;
    session->caller_buffers_bound = false;
    if (caller_on_device && caller_buffers_bindable(session, p, bound, outputs))
        return run_on_caller_buffers(session, p, bound, outputs);
    if (!caller_on_device && chunks_run_here(session, p, bound, outputs)) return chunks_run(session, p, bound, outputs);
    cinfer_status (*copy_in)(backend *, void *, const void *, size_t) =
        caller_on_device ? b->iface->copy_on_device : b->iface->copy_to_device;
    /* device-resident inputs go in one batch call where the backend has one (up to RUN_BATCH_COPIES of them) */
    enum { RUN_BATCH_COPIES = 64 };
    void *dsts[RUN_BATCH_COPIES];
    const void *srcs[RUN_BATCH_COPIES];
    size_t sizes[RUN_BATCH_COPIES], batched = 0;
    bool batch = caller_on_device && b->iface->copy_on_device_batch && g->num_inputs <= RUN_BATCH_COPIES;
    for (int i = 0; i < g->num_inputs; i++) {
        const tensor *t = &p->values[g->inputs[i]];
        if (g->values[g->inputs[i]].value_needed || !t->data) continue;
        size_t nb = tensor_nbytes(t);
        if (batch && nb) {
            dsts[batched] = t->data;
            srcs[batched] = bound[i]->data;
            sizes[batched++] = nb;
        } else if (!batch) {
            CINFER_TRY(copy_in(b, t->data, bound[i]->data, nb));
        }
    }
    if (batched) CINFER_TRY(b->iface->copy_on_device_batch(b, dsts, srcs, sizes, batched));
    CINFER_TRY(session_run_device_nodes(session, p));
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k];
        const tensor *t = &p->values[v];
        size_t nb = tensor_nbytes(t);
        if (!nb) continue;
        const graph_value *gv = &g->values[v];
        const void *host_src = t->host_data;
        if (gv->producer >= 0 && p->node_runs[gv->producer]) {
            CINFER_TRY(caller_on_device ? b->iface->copy_on_device(b, outputs[k].data, t->data, nb)
                                        : b->iface->copy_to_host(b, outputs[k].data, t->data, nb));
            continue;
        }
        for (int i = 0; i < g->num_inputs && !host_src; i++)
            if (g->inputs[i] == v) {
                if (caller_on_device) CINFER_TRY(b->iface->copy_on_device(b, outputs[k].data, bound[i]->data, nb));
                else memcpy(outputs[k].data, bound[i]->data, nb);
            }
        if (host_src) {
            if (caller_on_device) CINFER_TRY(b->iface->copy_to_device(b, outputs[k].data, host_src, nb));
            else memcpy(outputs[k].data, host_src, nb);
        }
    }
    return caller_on_device ? CINFER_OK : b->iface->synchronize(b);
}

/* Host backends: caller inputs are read in place (bind_host_inputs), produced outputs written straight into the
 * caller's buffers (first listing wins); outputs that are inputs, constants, host values or repeated are copied. */
static cinfer_status run_on_host(cinfer_session *session, plan *p, cinfer_tensor *outputs) {
    const graph *g = session->graph;
    backend *b = session->backend;
    bool produced_direct[256] = {0};
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k];
        bool first = true;
        for (int j = 0; j < k; j++) first = first && g->outputs[j] != v;
        if (first && !session->guard_bytes && g->values[v].producer >= 0 && p->node_runs[g->values[v].producer]) {
            p->values[v].data = outputs[k].data;
            produced_direct[k] = true;
        }
    }
    cinfer_status st = run_nodes(session, p);
    if (st == CINFER_OK && b->iface->synchronize) st = b->iface->synchronize(b);
    if (b->iface->end_run) b->iface->end_run(b);
    CINFER_TRY(st);
    for (int k = 0; k < g->num_outputs; k++) {
        if (produced_direct[k]) continue;
        const tensor *t = &p->values[g->outputs[k]];
        if (tensor_nbytes(t)) memcpy(outputs[k].data, t->data, tensor_nbytes(t));
    }
    return CINFER_OK;
}

/* ---- data-dependent shapes: staged runs ---- */

/* The plan of the stage after `parent` for the actual shapes the run produced (session.run_values) at the node that
 * ended parent's stage: a cached child, or a new one in the least recently used slot. */
static cinfer_status find_or_build_stage(cinfer_session *s, plan *parent, const cinfer_tensor **bound, plan **out) {
    const graph_node *end = &s->graph->nodes[parent->stage_end];
    size_t len = stage_key(end, s->run_values, NULL);
    unsigned char *key = malloc(len ? len : 1);
    if (!key) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    stage_key(end, s->run_values, key);
    int slot = -1;
    for (int c = 0; c < PLAN_STAGE_CHILDREN; c++) {
        plan *child = parent->children[c];
        if (child && child->signature_len == len && memcmp(child->signature, key, len) == 0) {
            free(key);
            child->last_used = ++s->clock;
            *out = child;
            return CINFER_OK;
        }
        const plan *chosen = slot >= 0 ? parent->children[slot] : NULL;
        if (slot < 0 || (chosen && (!child || child->last_used < chosen->last_used))) slot = c; /* empty, else LRU */
    }
    plan *child;
    CINFER_TRY(session_build_plan(s, bound, key, len, false, parent, &child));
    session_plan_free(s, parent->children[slot]);
    parent->children[slot] = child;
    child->last_used = ++s->clock;
    *out = child;
    return CINFER_OK;
}

/* A staged run (graphs with data-dependent nodes on the backend): each stage's plan runs its nodes, the actual
 * shapes its last node produced pick (or plan) the next stage, and so on; the outputs are allocated at the end, at
 * their actual shapes, and copied from wherever they were produced. */
static cinfer_status run_staged(cinfer_session *session, plan *p, const cinfer_tensor **bound, cinfer_tensor *outputs) {
    const graph *g = session->graph;
    backend *b = session->backend;
    bool on_device = !b->iface->host_memory;
    tensor *produced = session->run_values;
    memset(produced, 0, sizeof(tensor) * (size_t)g->num_values);
    if (on_device) {
        for (int i = 0; i < g->num_inputs; i++) {
            const tensor *t = &p->values[g->inputs[i]];
            if (g->values[g->inputs[i]].value_needed || !t->data || !tensor_nbytes(t)) continue;
            CINFER_TRY(b->iface->copy_to_device(b, t->data, bound[i]->data, tensor_nbytes(t)));
        }
    } else {
        CINFER_TRY(bind_host_inputs(session, p, bound));
    }
    for (int i = 0; i < g->num_inputs; i++) produced[g->inputs[i]] = p->values[g->inputs[i]];
    for (;;) {
        for (int e = 0; e < p->num_external; e++) p->values[p->external[e]].data = produced[p->external[e]].data;
        CINFER_TRY(on_device ? session_run_device_nodes(session, p) : run_nodes(session, p));
        for (int i = p->stage_begin; i <= p->stage_end; i++) {
            const graph_node *n = &g->nodes[i];
            if (!p->node_runs[i]) continue;
            bool actual_dims = (n->schema->flags & OP_FLAG_DATA_DEPENDENT) != 0; /* run_nodes wrote them */
            for (int k = 0; k < n->num_outputs; k++) {
                int v = n->outputs[k];
                if (v < 0) continue;
                if (!actual_dims) produced[v] = p->values[v];
                produced[v].dtype = p->values[v].dtype;
                produced[v].data = p->values[v].data;
            }
        }
        if (p->stage == session->num_stage_ends) break;
        CINFER_TRY(find_or_build_stage(session, p, bound, &p));
    }
    /* outputs: produced ones from the stages' buffers, host-known ones (constants, shape values) from the last
     * plan's host copies, model inputs from the caller's buffers */
    cinfer_status st = CINFER_OK;
    for (int k = 0; k < g->num_outputs; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    for (int k = 0; k < g->num_outputs && st == CINFER_OK; k++) {
        int v = g->outputs[k];
        const graph_value *gv = &g->values[v];
        bool from_backend = gv->producer >= 0 && !g->nodes[gv->producer].host_eval;
        const tensor *t = from_backend ? &produced[v] : &p->values[v];
        const void *host_src = on_device ? t->host_data : t->data;
        for (int i = 0; i < g->num_inputs; i++)
            if (g->inputs[i] == v) host_src = bound[i]->data;
        outputs[k].name = gv->name;
        outputs[k].dtype = t->dtype;
        outputs[k].ndim = t->ndim;
        memcpy(outputs[k].dims, t->dims, sizeof t->dims);
        size_t nb = tensor_nbytes(t);
        outputs[k].data = core_aligned_alloc(nb);
        if (!outputs[k].data) {
            st = core_error(CINFER_ERR_OUT_OF_MEMORY, "output '%s': cannot allocate %zu bytes", gv->name, nb);
        } else if (nb && from_backend && on_device) {
            st = b->iface->copy_to_host(b, outputs[k].data, t->data, nb);
        } else if (nb) {
            memcpy(outputs[k].data, from_backend ? t->data : host_src, nb);
        }
    }
    if (st == CINFER_OK && on_device && b->iface->synchronize) st = b->iface->synchronize(b);
    if (st != CINFER_OK)
        for (int k = 0; k < g->num_outputs; k++) cinfer_tensor_free_data(&outputs[k]);
    return st;
}

/* The first data-dependent node of a staged graph, for errors of the entry points that need output shapes before
 * the run. */
static cinfer_status refuse_staged(const cinfer_session *s, const char *fn) {
    const graph_node *n = &s->graph->nodes[s->stage_ends[0]];
    return core_error(CINFER_ERR_UNSUPPORTED, "%s: this model's output shapes depend on values computed while it runs "
                      "(%s node '%s'), so they are known only after the run: use cinfer_session_run", fn, n->op_type,
                      n->name);
}

static cinfer_status session_run_entry(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                       cinfer_tensor *outputs, size_t num_outputs, bool caller_outputs) {
    if (!session)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: session is NULL",
                          caller_outputs ? "cinfer_session_run_into" : "cinfer_session_run");
    pthread_mutex_lock(&session->lock);
    cinfer_status st = session_run_locked(session, inputs, num_inputs, outputs, num_outputs, caller_outputs);
    pthread_mutex_unlock(&session->lock);
    return st;
}

cinfer_status cinfer_session_run(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                 cinfer_tensor *outputs, size_t num_outputs) {
    return session_run_entry(session, inputs, num_inputs, outputs, num_outputs, false);
}

cinfer_status cinfer_session_run_into(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                      cinfer_tensor *outputs, size_t num_outputs) {
    return session_run_entry(session, inputs, num_inputs, outputs, num_outputs, true);
}

/* caller_outputs: the caller's buffers, described as cinfer_session_output_info gives them, take the outputs
 * (cinfer_session_run_into); else fresh buffers are allocated and handed over. */
static cinfer_status session_run_locked(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        cinfer_tensor *outputs, size_t num_outputs, bool caller_outputs) {
    const char *fn = caller_outputs ? "cinfer_session_run_into" : "cinfer_session_run";
    if (!session || (!inputs && num_inputs) || (!outputs && num_outputs))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    const graph *g = session->graph;
    if (num_outputs != (size_t)g->num_outputs)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: room for %zu outputs given, the model has %d", fn,
                          num_outputs, g->num_outputs);
    if (g->num_inputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model inputs");
    if (session->num_stage_ends && caller_outputs) return refuse_staged(session, fn);
    const cinfer_tensor *bound[256];
    CINFER_TRY(bind_inputs(g, inputs, num_inputs, true, bound));
    plan *p;
    CINFER_TRY(find_or_build_plan(session, bound, &p));
    backend *b = session->backend;
    if (session->num_stage_ends) {
        cinfer_status st = b->iface->begin_run ? b->iface->begin_run(b, g->name && g->name[0] ? g->name : "cinfer run")
                                               : CINFER_OK;
        if (st == CINFER_OK) st = run_staged(session, p, bound, outputs);
        if (st != CINFER_OK && b->iface->synchronize) b->iface->synchronize(b);
        if (b->iface->end_run) b->iface->end_run(b);
        return st;
    }

    bool on_device = !b->iface->host_memory;
    if (g->num_outputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model outputs");
    if (caller_outputs) CINFER_TRY(check_device_outputs(session, p, outputs, num_outputs, fn));
    /* per run: caller inputs (a host backend reads them in place), fresh output buffers unless the caller's */
    if (!on_device) CINFER_TRY(bind_host_inputs(session, p, bound));
    if (!caller_outputs)
        for (size_t k = 0; k < num_outputs; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    cinfer_status st = CINFER_OK;
    for (int k = 0; k < g->num_outputs && !caller_outputs; k++) {
        int v = g->outputs[k];
        tensor *t = &p->values[v];
        outputs[k].name = g->values[v].name;
        outputs[k].dtype = t->dtype;
        outputs[k].ndim = t->ndim;
        memcpy(outputs[k].dims, t->dims, sizeof t->dims);
        outputs[k].data = core_aligned_alloc(tensor_nbytes(t));
        if (!outputs[k].data) {
            st = core_error(CINFER_ERR_OUT_OF_MEMORY, "output '%s': cannot allocate %zu bytes", g->values[v].name, tensor_nbytes(t));
            goto fail;
        }
    }
    if (b->iface->begin_run) {
        st = b->iface->begin_run(b, g->name && g->name[0] ? g->name : "cinfer run");
        if (st != CINFER_OK) goto fail;
    }
    if (on_device) {
        st = run_on_device(session, p, bound, outputs, false);
        if (st != CINFER_OK && b->iface->synchronize) b->iface->synchronize(b); /* drain before the buffers go */
        if (b->iface->end_run) b->iface->end_run(b);
        if (st != CINFER_OK) goto fail;
        return CINFER_OK;
    }
    st = run_on_host(session, p, outputs);
    if (st != CINFER_OK) goto fail;
    return CINFER_OK;
fail:
    for (size_t k = 0; k < num_outputs && !caller_outputs; k++) cinfer_tensor_free_data(&outputs[k]);
    return st;
}

cinfer_status cinfer_session_last_run_stats(const cinfer_session *session, cinfer_run_stats *out) {
    if (!session || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_last_run_stats: NULL argument");
    memset(out, 0, sizeof *out);
    if (session->backend->iface->last_run_stats) session->backend->iface->last_run_stats(session->backend, out);
    out->graph_replayed = session->graph_replayed;
    out->graph_captures = session->graph_captures;
    out->graph_fallbacks = session->graph_fallbacks;
    out->caller_buffers_bound = session->caller_buffers_bound;
    return CINFER_OK;
}

cinfer_status cinfer_session_timeline(cinfer_session *session, cinfer_span *spans, size_t capacity, size_t *count) {
    if (!session || !count || (!spans && capacity))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_timeline: NULL argument");
    *count = 0;
    pthread_mutex_lock(&session->lock);
    backend *b = session->backend;
    cinfer_status st = session->timeline && b->iface->timeline_read
                           ? b->iface->timeline_read(b, spans, capacity, count)
                           : core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_timeline: the session was made without "
                                        "the option timeline=1");
    pthread_mutex_unlock(&session->lock);
    return st;
}

size_t cinfer_session_num_host_nodes(const cinfer_session *session) {
    if (!session) return 0;
    size_t n = 0;
    for (int i = 0; i < session->graph->num_nodes; i++) n += session->graph->nodes[i].host_eval;
    return n;
}

const char *cinfer_session_host_node(const cinfer_session *session, size_t index) {
    if (!session) return NULL;
    for (int i = 0; i < session->graph->num_nodes; i++)
        if (session->graph->nodes[i].host_eval && index-- == 0) return session->graph->nodes[i].name;
    return NULL;
}

size_t cinfer_session_num_fallback_nodes(const cinfer_session *session) {
    return session ? session->num_cpu_fallback : 0;
}

const char *cinfer_session_fallback_node(const cinfer_session *session, size_t index) {
    if (!session || !session->cpu_fallback) return NULL;
    for (int i = 0; i < session->graph->num_nodes; i++)
        if (session->cpu_fallback[i] && index-- == 0) return session->graph->nodes[i].name;
    return NULL;
}

cinfer_status cinfer_session_node_profile(const cinfer_session *session, size_t index, const char **node_name,
                                          const char **op_type, double *total_ms, uint64_t *calls) {
    if (!session) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_node_profile: session is NULL");
    if (!session->profile)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "the session was not created with option profile=1");
    if (index >= (size_t)session->graph->num_nodes)
        return core_error(CINFER_ERR_NOT_FOUND, "node index %zu: the model has %d nodes", index, session->graph->num_nodes);
    const graph_node *n = &session->graph->nodes[index];
    if (node_name) *node_name = n->name;
    if (op_type) *op_type = n->op_type;
    if (total_ms) *total_ms = session->node_seconds[index] * 1e3;
    if (calls) *calls = session->node_calls[index];
    return CINFER_OK;
}

/* ---- device-resident io ---- */

/* Matches `outputs` (caller-described) against the plan's outputs: dtype, shape, and room (data non-NULL). */
static cinfer_status check_device_outputs(const cinfer_session *s, const plan *p, const cinfer_tensor *outputs,
                                          size_t num_outputs, const char *fn) {
    const graph *g = s->graph;
    if (num_outputs != (size_t)g->num_outputs)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: %zu outputs given, the model has %d", fn, num_outputs,
                          g->num_outputs);
    for (int k = 0; k < g->num_outputs; k++) {
        const tensor *t = &p->values[g->outputs[k]];
        const cinfer_tensor *o = &outputs[k];
        bool same = o->dtype == t->dtype && o->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = o->dims[d] == t->dims[d];
        if (!same) {
            char want[256], got[256];
            tensor tg = {.ndim = o->ndim >= 0 && o->ndim <= CINFER_MAX_DIMS ? o->ndim : 0};
            for (int d = 0; d < tg.ndim; d++) tg.dims[d] = o->dims[d];
            return core_error(CINFER_ERR_INVALID_ARGUMENT,
                              "output '%s': these inputs give %s %s, the caller's buffer is described as %s %s "
                              "(cinfer_session_output_info gives the right description)",
                              g->values[g->outputs[k]].name, cinfer_dtype_name(t->dtype), tensor_shape_str(t, want, sizeof want),
                              cinfer_dtype_name(o->dtype), tensor_shape_str(&tg, got, sizeof got));
        }
        if (!o->data && tensor_nbytes(t))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "output '%s': data is NULL", g->values[g->outputs[k]].name);
    }
    return CINFER_OK;
}

static cinfer_status bind_device_run(cinfer_session *s, const cinfer_tensor *inputs, size_t num_inputs, bool need_data,
                                     const cinfer_tensor **bound, plan **p) {
    const graph *g = s->graph;
    if (g->num_inputs > 256 || g->num_outputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model inputs or outputs");
    if (s->num_stage_ends)
        return refuse_staged(s, need_data ? "cinfer_session_run_device" : "cinfer_session_output_info");
    if (need_data)
        for (int i = 0; i < g->num_inputs; i++)
            if (g->values[g->inputs[i]].value_needed)
                return core_error(CINFER_ERR_UNSUPPORTED, "input '%s' decides shapes by its values, which the host must read: "
                                  "run this model with cinfer_session_run", g->values[g->inputs[i]].name);
    CINFER_TRY(bind_inputs(g, inputs, num_inputs, need_data, bound));
    return find_or_build_plan(s, bound, p);
}

cinfer_status cinfer_session_output_info(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                         cinfer_tensor *outputs, size_t num_outputs) {
    if (!session || (!inputs && num_inputs) || (!outputs && num_outputs))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_output_info: NULL argument");
    pthread_mutex_lock(&session->lock);
    const graph *g = session->graph;
    const cinfer_tensor *bound[256];
    plan *p = NULL;
    cinfer_status st = num_outputs == (size_t)g->num_outputs
                           ? bind_device_run(session, inputs, num_inputs, false, bound, &p)
                           : core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_output_info: room for %zu outputs given, "
                                        "the model has %d", num_outputs, g->num_outputs);
    for (int k = 0; st == CINFER_OK && k < g->num_outputs; k++) {
        const tensor *t = &p->values[g->outputs[k]];
        memset(&outputs[k], 0, sizeof outputs[k]);
        outputs[k].name = g->values[g->outputs[k]].name;
        outputs[k].dtype = t->dtype;
        outputs[k].ndim = t->ndim;
        memcpy(outputs[k].dims, t->dims, sizeof t->dims);
    }
    pthread_mutex_unlock(&session->lock);
    return st;
}

cinfer_status cinfer_session_run_device(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        cinfer_tensor *outputs, size_t num_outputs, void *stream) {
    if (!session || (!inputs && num_inputs) || (!outputs && num_outputs))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_run_device: NULL argument");
    pthread_mutex_lock(&session->lock);
    backend *b = session->backend;
    const graph *g = session->graph;
    const cinfer_tensor *bound[256];
    plan *p = NULL;
    cinfer_status st = bind_device_run(session, inputs, num_inputs, true, bound, &p);
    if (st == CINFER_OK) st = check_device_outputs(session, p, outputs, num_outputs, "cinfer_session_run_device");
    if (st == CINFER_OK && b->iface->host_memory) { /* host backends: "device memory" is host memory */
        st = bind_host_inputs(session, p, bound);
        if (st == CINFER_OK && b->iface->begin_run) st = b->iface->begin_run(b, g->name && g->name[0] ? g->name : "cinfer run");
        if (st == CINFER_OK) st = run_on_host(session, p, outputs);
    } else if (st == CINFER_OK && (!b->iface->join_stream || !b->iface->copy_on_device)) {
        st = core_error(CINFER_ERR_UNSUPPORTED, "the %s backend has no device-resident io", b->iface->name);
    } else if (st == CINFER_OK) {
        st = b->iface->begin_run ? b->iface->begin_run(b, g->name && g->name[0] ? g->name : "cinfer run") : CINFER_OK;
        if (st == CINFER_OK) {
            /* the session's stream starts after the caller's queued work (its inputs) and the caller's stream
             * continues after ours (its outputs) */
            st = b->iface->join_stream(b, stream, true);
            if (st == CINFER_OK) st = run_on_device(session, p, bound, outputs, true);
            if (st == CINFER_OK) st = b->iface->join_stream(b, stream, false);
            if (st != CINFER_OK && b->iface->synchronize) b->iface->synchronize(b);
            if (b->iface->end_run) b->iface->end_run(b);
        }
    }
    pthread_mutex_unlock(&session->lock);
    return st;
}
