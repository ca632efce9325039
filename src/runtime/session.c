/* Sessions: a model bound to a backend, with plans cached per input signature.
 *
 * A plan fixes every value's shape for one set of input shapes (plus the values of inputs that decide
 * shapes), holds the host-evaluated shape-subgraph results, and the arena offsets from the liveness
 * planner. Running with a cached plan does no per-op allocation: only the output buffers handed to the
 * caller are allocated.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/planner.h"
#include "runtime/model.h"

#define PLAN_CACHE_SIZE 8

typedef struct plan {
    unsigned char *signature;
    size_t signature_len;
    tensor *values;        /* per value: concrete dtype/dims; data bound per run or fixed (constants, host) */
    int64_t *offsets;      /* arena offset per value or -1 */
    void **host_owned;     /* per value: buffer owned by the plan (host-evaluated results), or NULL */
    bool *node_runs;
    void *arena;
    size_t arena_bytes;
    uint64_t last_used;
} plan;

struct cinfer_session {
    const cinfer_model *model;
    backend *backend;
    plan *plans[PLAN_CACHE_SIZE];
    uint64_t clock;
    unsigned char *signature; /* this run's input signature, reused across runs (grown on demand) */
    size_t signature_cap;
    pthread_mutex_t lock;    /* runs on one session are serialised (plans and arenas are per session) */
    bool profile;            /* option "profile": time every node */
    double *node_seconds;    /* per node, summed over runs (profile only) */
    uint64_t *node_calls;
};

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void plan_free(cinfer_session *s, plan *p) {
    if (!p) return;
    if (p->host_owned)
        for (int v = 0; v < s->model->graph->num_values; v++) core_aligned_free(p->host_owned[v]);
    if (p->arena) s->backend->iface->release(s->backend, p->arena);
    free(p->signature);
    free(p->values);
    free(p->offsets);
    free(p->host_owned);
    free(p->node_runs);
    free(p);
}

cinfer_status cinfer_session_create(const cinfer_model *model, const char *device, const char *const *option_keys,
                                    const char *const *option_values, size_t num_options, cinfer_session **out) {
    if (!model || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_create: model and out are required");
    *out = NULL;
    int threads = 0;
    bool profile = false;
    for (size_t i = 0; i < num_options; i++) {
        const char *k = option_keys[i], *v = option_values[i];
        if (strcmp(k, "threads") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 0 || n > 1024)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "session option 'threads': '%s' is not a count from 0 to 1024", v);
            threads = (int)n;
        } else if (strcmp(k, "profile") == 0) {
            if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "session option 'profile': '%s' is not 0 or 1", v);
            profile = v[0] == '1';
        } else {
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "unknown session option '%s' (known: threads, profile)", k);
        }
    }
    if (device && strcmp(device, "cpu") != 0)
        return core_error(CINFER_ERR_UNSUPPORTED, "device '%s' is not available (this build has: cpu)", device);
    cinfer_session *s = calloc(1, sizeof *s);
    if (!s) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    s->model = model;
    pthread_mutex_init(&s->lock, NULL);
    s->profile = profile;
    if (profile) {
        size_t count = (size_t)(model->graph->num_nodes ? model->graph->num_nodes : 1);
        s->node_seconds = calloc(count, sizeof(double));
        s->node_calls = calloc(count, sizeof(uint64_t));
        if (!s->node_seconds || !s->node_calls) {
            free(s->node_seconds);
            free(s->node_calls);
            free(s);
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    cinfer_status st = backend_cpu_create(threads, &s->backend);
    if (st != CINFER_OK) {
        free(s->node_seconds);
        free(s->node_calls);
        free(s);
        return st;
    }
    for (int i = 0; i < model->graph->num_nodes; i++)
        if (!s->backend->iface->supports_op(s->backend, &model->graph->nodes[i])) {
            cinfer_session_free(s);
            return core_error(CINFER_ERR_UNSUPPORTED, "node '%s': the %s backend has no %s", model->graph->nodes[i].name,
                              s->backend->iface->name, model->graph->nodes[i].op_type);
        }
    *out = s;
    return CINFER_OK;
}

void cinfer_session_free(cinfer_session *session) {
    if (!session) return;
    for (int i = 0; i < PLAN_CACHE_SIZE; i++) plan_free(session, session->plans[i]);
    if (session->backend) session->backend->iface->free(session->backend);
    free(session->node_seconds);
    free(session->node_calls);
    free(session->signature);
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
        tensor tw = {.ndim = v->ndim > 0 ? v->ndim : 0}, tg = {.ndim = t->ndim};
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
        if (!t->data && input_bytes(t) > 0 && (need_data || v->value_needed))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "input '%s': data is NULL%s", v->name,
                              v->value_needed ? " (its values decide shapes, so data is required)" : "");
    }
    return CINFER_OK;
}

/* Signature: each input's dims, plus the bytes of inputs whose values decide shapes (bind_inputs made sure
 * those have data). Written into the session's reusable buffer: a run allocates nothing to look up its plan. */
static cinfer_status make_signature(cinfer_session *s, const cinfer_tensor **bound, size_t *out_len) {
    const graph *g = s->model->graph;
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

static cinfer_status build_plan(cinfer_session *s, const cinfer_tensor **bound, unsigned char *signature,
                                size_t signature_len, plan **out) {
    const graph *g = s->model->graph;
    int nv = g->num_values;
    plan *p = calloc(1, sizeof *p);
    bool *in_arena = NULL;
    cinfer_status st = CINFER_OK;
    if (!p) {
        free(signature);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    }
    p->signature = signature;
    p->signature_len = signature_len;
    p->values = calloc((size_t)(nv ? nv : 1), sizeof(tensor));
    p->offsets = calloc((size_t)(nv ? nv : 1), sizeof(int64_t));
    p->host_owned = calloc((size_t)(nv ? nv : 1), sizeof(void *));
    p->node_runs = calloc((size_t)(g->num_nodes ? g->num_nodes : 1), sizeof(bool));
    in_arena = calloc((size_t)(nv ? nv : 1), sizeof(bool));
    if (!p->values || !p->offsets || !p->host_owned || !p->node_runs || !in_arena) {
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
        }
    }
    /* shapes, in order; shape subgraphs evaluated on the host as we go */
    for (int i = 0; i < g->num_nodes; i++) {
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
            for (int k = 0; k < n->num_outputs; k++)
                if (n->outputs[k] < 0) core_aligned_free(outs[k].data);
            if (st != CINFER_OK) goto fail;
        } else {
            p->node_runs[i] = true;
        }
    }
    /* memory: intermediates of nodes that run go to the arena; model outputs get their own buffers */
    for (int i = 0; i < g->num_nodes; i++) {
        if (!p->node_runs[i]) continue;
        const graph_node *n = &g->nodes[i];
        for (int k = 0; k < n->num_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            in_arena[v] = !g->values[v].is_output;
        }
    }
    st = graph_plan_memory(g, p->node_runs, p->values, in_arena, p->offsets, &p->arena_bytes);
    if (st != CINFER_OK) goto fail;
    st = s->backend->iface->alloc(s->backend, p->arena_bytes, &p->arena);
    if (st != CINFER_OK) goto fail;
    for (int v = 0; v < nv; v++)
        if (p->offsets[v] >= 0) p->values[v].data = (char *)p->arena + p->offsets[v];
    free(in_arena);
    *out = p;
    return CINFER_OK;
fail:
    free(in_arena);
    plan_free(s, p);
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
    CINFER_TRY(build_plan(s, bound, own, len, &p));
    int slot = free_slot >= 0 ? free_slot : oldest;
    plan_free(s, s->plans[slot]);
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
    const graph *g = session->model->graph;
    const cinfer_tensor *bound[256];
    if (g->num_inputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model inputs");
    CINFER_TRY(bind_inputs(g, inputs, num_inputs, false, bound));
    plan *p;
    CINFER_TRY(find_or_build_plan(session, bound, &p));
    *arena_bytes = p->arena_bytes;
    return CINFER_OK;
}

static cinfer_status session_run_locked(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        cinfer_tensor *outputs, size_t num_outputs);

cinfer_status cinfer_session_run(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                 cinfer_tensor *outputs, size_t num_outputs) {
    if (!session) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_run: session is NULL");
    pthread_mutex_lock(&session->lock);
    cinfer_status st = session_run_locked(session, inputs, num_inputs, outputs, num_outputs);
    pthread_mutex_unlock(&session->lock);
    return st;
}

static cinfer_status session_run_locked(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                        cinfer_tensor *outputs, size_t num_outputs) {
    if (!session || (!inputs && num_inputs) || (!outputs && num_outputs))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_run: NULL argument");
    const graph *g = session->model->graph;
    if (num_outputs != (size_t)g->num_outputs)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_run: room for %zu outputs given, the model has %d",
                          num_outputs, g->num_outputs);
    if (g->num_inputs > 256) return core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model inputs");
    const cinfer_tensor *bound[256];
    CINFER_TRY(bind_inputs(g, inputs, num_inputs, true, bound));
    plan *p;
    CINFER_TRY(find_or_build_plan(session, bound, &p));
    backend *b = session->backend;

    /* per run: caller inputs, fresh output buffers */
    for (int i = 0; i < g->num_inputs; i++)
        if (!g->values[g->inputs[i]].value_needed) p->values[g->inputs[i]].data = bound[i]->data;
    for (size_t k = 0; k < num_outputs; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    cinfer_status st = CINFER_OK;
    for (int k = 0; k < g->num_outputs; k++) {
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
    /* a produced output is written straight into the caller's buffer (first listing wins) */
    bool produced_direct[256] = {0};
    if (g->num_outputs > 256) {
        st = core_error(CINFER_ERR_UNSUPPORTED, "more than 256 model outputs");
        goto fail;
    }
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k];
        bool first = true;
        for (int j = 0; j < k; j++) first = first && g->outputs[j] != v;
        if (first && g->values[v].producer >= 0 && p->node_runs[g->values[v].producer]) {
            p->values[v].data = outputs[k].data;
            produced_direct[k] = true;
        }
    }
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
        st = b->iface->run_node(b, n, in, n->num_inputs, out, n->num_outputs);
        if (st != CINFER_OK) goto fail;
        if (session->profile) {
            if (b->iface->synchronize) b->iface->synchronize(b); /* asynchronous backends: time the work, not the launch */
            session->node_seconds[i] += monotonic_seconds() - t0;
            session->node_calls[i]++;
        }
    }
    if (b->iface->synchronize) {
        st = b->iface->synchronize(b);
        if (st != CINFER_OK) goto fail;
    }
    /* outputs that are inputs, constants, host values or repeated: copy */
    for (int k = 0; k < g->num_outputs; k++) {
        if (produced_direct[k]) continue;
        const tensor *t = &p->values[g->outputs[k]];
        if (tensor_nbytes(t)) memcpy(outputs[k].data, t->data, tensor_nbytes(t));
    }
    return CINFER_OK;
fail:
    for (size_t k = 0; k < num_outputs; k++) cinfer_tensor_free_data(&outputs[k]);
    return st;
}

size_t cinfer_session_num_host_nodes(const cinfer_session *session) {
    if (!session) return 0;
    size_t n = 0;
    for (int i = 0; i < session->model->graph->num_nodes; i++) n += session->model->graph->nodes[i].host_eval;
    return n;
}

const char *cinfer_session_host_node(const cinfer_session *session, size_t index) {
    if (!session) return NULL;
    for (int i = 0; i < session->model->graph->num_nodes; i++)
        if (session->model->graph->nodes[i].host_eval && index-- == 0) return session->model->graph->nodes[i].name;
    return NULL;
}

cinfer_status cinfer_session_node_profile(const cinfer_session *session, size_t index, const char **node_name,
                                          const char **op_type, double *total_ms, uint64_t *calls) {
    if (!session) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_node_profile: session is NULL");
    if (!session->profile)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "the session was not created with option profile=1");
    if (index >= (size_t)session->model->graph->num_nodes)
        return core_error(CINFER_ERR_NOT_FOUND, "node index %zu: the model has %d nodes", index, session->model->graph->num_nodes);
    const graph_node *n = &session->model->graph->nodes[index];
    if (node_name) *node_name = n->name;
    if (op_type) *op_type = n->op_type;
    if (total_ms) *total_ms = session->node_seconds[index] * 1e3;
    if (calls) *calls = session->node_calls[index];
    return CINFER_OK;
}
