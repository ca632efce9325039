/* A loaded model version, its life: load (config completion, instances and lanes planned by model_instance.c,
 * sessions created and warmed up, one worker per lane started), the references HTTP requests hold, submission,
 * statistics, and the drain-then-free retirement used by unload, reload and shutdown. What the workers do is in
 * model_execute.c; the shared internals and their lock discipline are in model_version_internal.h. */
#include "model_version.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_pool.h"
#include "faults.h"
#include "log.h"
#include "model_version_internal.h"

void model_version_ref(model_version *mv) { atomic_fetch_add(&mv->refs, 1); }

void model_version_unref(model_version *mv) {
    if (!mv) return;
    if (atomic_fetch_sub(&mv->refs, 1) == 1) {
        /* the retiring thread frees mv once it sees drained, so this is the last touch of mv here */
        pthread_mutex_lock(&mv->ref_lock);
        mv->drained = 1;
        pthread_cond_broadcast(&mv->ref_zero);
        pthread_mutex_unlock(&mv->ref_lock);
    }
}

/* Runs warm-up w on a lane's session: its inputs filled with zeros or a fixed pseudo-random pattern, `count` runs.
 * *engine: the engine's status of a failed warm-up run (CINFER_OK when it failed before running). */
static int warmup_run(model_version *mv, model_lane *lane, const config_warmup *w, serve_error *e, cinfer_status *engine) {
    *engine = CINFER_OK;
    size_t n = w->num_inputs;
    cinfer_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    size_t no = cinfer_model_num_outputs(mv->model);
    cinfer_tensor *outs = calloc(no ? no : 1, sizeof *outs);
    int rc = -1;
    if (!ts || !outs) {
        serve_fail(e, SERVE_INTERNAL, "warm-up '%s': out of memory", w->name);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const config_warmup_input *in = &w->inputs[i];
        cinfer_tensor *t = &ts[i];
        t->name = in->key;
        t->dtype = in->dtype;
        size_t esz = cinfer_dtype_size(in->dtype);
        if (!esz) {
            serve_fail(e, SERVE_BAD_REQUEST, "warm-up '%s' input '%s': data type %s cannot be generated", w->name, in->key,
                       config_type_name(in->dtype));
            goto done;
        }
        if (config_batches(&mv->cfg)) t->dims[t->ndim++] = w->batch_size;
        for (int d = 0; d < in->ndims && t->ndim < CINFER_MAX_DIMS; d++) t->dims[t->ndim++] = in->dims[d];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= (size_t)(t->dims[d] < 0 ? 1 : t->dims[d]);
        t->data = calloc(numel ? numel : 1, esz);
        if (!t->data) {
            serve_fail(e, SERVE_INTERNAL, "warm-up '%s' input '%s': out of memory", w->name, in->key);
            goto done;
        }
        if (in->random_data) {
            uint32_t x = 12345u + (uint32_t)i;
            unsigned char *b = t->data;
            for (size_t k = 0; k < numel * esz; k++) {
                x = x * 1664525u + 1013904223u;
                b[k] = (unsigned char)(x >> 24);
            }
            if (in->dtype == CINFER_DTYPE_FLOAT) /* random bytes make NaNs: use small values instead */
                for (size_t k = 0; k < numel; k++) ((float *)t->data)[k] = (float)((k * 2654435761u) % 1000) / 1000.0f;
            if (in->dtype == CINFER_DTYPE_BOOL)
                for (size_t k = 0; k < numel; k++) b[k] &= 1;
        }
    }
    for (uint32_t c = 0; c < w->count; c++) {
        cinfer_status st = cinfer_session_run(lane->session, ts, n, outs, no);
        for (size_t k = 0; k < no; k++) cinfer_tensor_free_data(&outs[k]);
        if (st != CINFER_OK) {
            *engine = st;
            serve_fail(e, SERVE_BAD_REQUEST, "warm-up '%s' failed: %s", w->name, cinfer_last_error());
            goto done;
        }
    }
    rc = 0;
done:
    for (size_t i = 0; ts && i < n; i++) free(ts[i].data);
    free(ts);
    free(outs);
    return rc;
}

static void free_version(model_version *mv) {
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        for (size_t l = 0; l < inst->num_lanes; l++) {
            model_lane *lane = &inst->lanes[l];
            cinfer_session_free(lane->session);
            batcher_batch_free(&lane->batch);
            batcher_scratch_free(&lane->scratch);
            copy_pool_destroy(lane->scratch.pool);
            free(lane->inputs);
        }
        free(inst->lanes);
        pthread_mutex_destroy(&inst->cap_lock);
    }
    free(mv->instances);
    cinfer_model_free(mv->model);
    scheduler_destroy(&mv->sched);
    stats_model_destroy(&mv->stats);
    config_model_free(&mv->cfg);
    pthread_mutex_destroy(&mv->ref_lock);
    pthread_cond_destroy(&mv->ref_zero);
    free(mv->name);
    free(mv);
}

/* CINFER_SERVE_TEST_SLOW_INSTANCE=<model>:<index>:<ms>[,...] (test-only): instance <index> of <model> sleeps
 * <ms> after every execution, so the scheduler's load balancing can be tested. Read at load. */
static void apply_test_slowdown(model_version *mv) {
    const char *env = getenv("CINFER_SERVE_TEST_SLOW_INSTANCE");
    if (!env || !env[0]) return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *c2 = strrchr(item, ':');
        if (!c2) continue;
        *c2 = 0;
        char *c1 = strrchr(item, ':');
        if (!c1) continue;
        *c1 = 0;
        unsigned long idx = strtoul(c1 + 1, NULL, 10), ms = strtoul(c2 + 1, NULL, 10);
        if (strcmp(item, mv->name) != 0 || idx >= mv->num_instances) continue;
        mv->instances[idx].test_delay_ms = (unsigned)(ms > 60000 ? 60000 : ms);
        log_warn("model '%s' instance %lu (%s) is slowed down by %lu ms per execution (CINFER_SERVE_TEST_SLOW_INSTANCE, "
                 "for tests only)", mv->name, idx, mv->instances[idx].name, ms);
    }
}

/* The session options of the model's instances: threads, the server's --precision, Triton's optimization { cuda {
 * graphs: false } }, then every config parameter MODEL_PARAM_SESSION_PREFIX + a key the engine lists
 * (cinfer_session_option_info; for a prefix key such as dim., the prefix and a name: cinfer_dim.seq), which win.
 * The engine alone checks the values; other cinfer_* parameters are the server's own or ignored. Returns the count. */
static size_t session_options(const model_version *mv, const model_load_options *opt, char *threads, size_t threads_len,
                              const char **keys, const char **vals) {
    size_t n = 0;
    /* Triton's ONNX Runtime thread count and TensorRT FP16 mode map onto the engine (config_model.h); they beat the
     * server's flags, and the cinfer_* parameters below beat them */
    int nthreads = mv->cfg.intra_op_threads > 0 ? mv->cfg.intra_op_threads : opt->threads;
    if (nthreads > 0) {
        snprintf(threads, threads_len, "%d", nthreads);
        keys[n] = "threads";
        vals[n++] = threads;
    }
    const char *precision = mv->cfg.accelerator_precision[0] ? mv->cfg.accelerator_precision : opt->precision;
    if (precision) {
        keys[n] = "precision";
        vals[n++] = precision;
    }
    if (mv->cfg.cuda_graphs_given && !mv->cfg.cuda_graphs) { /* Triton's optimization { cuda { graphs: false } } */
        keys[n] = "cuda_graphs";
        vals[n++] = "0";
    }
    size_t prefix_len = strlen(MODEL_PARAM_SESSION_PREFIX);
    for (size_t i = 0; i < mv->cfg.num_params; i++) {
        if (strncmp(mv->cfg.params[i].key, MODEL_PARAM_SESSION_PREFIX, prefix_len) != 0) continue;
        const char *key = mv->cfg.params[i].key + prefix_len;
        bool listed = false;
        for (size_t o = 0; o < cinfer_num_session_options() && !listed; o++) {
            cinfer_option_info info;
            if (cinfer_session_option_info(o, &info) != CINFER_OK) continue;
            size_t len = strlen(info.key);
            listed = info.is_prefix ? strncmp(key, info.key, len) == 0 && key[len] : strcmp(key, info.key) == 0;
        }
        if (!listed) continue;
        size_t j = 0;
        while (j < n && strcmp(keys[j], key) != 0) j++;
        if (j == n && n == MODEL_MAX_SESSION_OPTIONS - 1) break; /* one slot stays for max_batch (probe) */
        keys[j] = key;
        vals[j] = mv->cfg.params[i].value;
        if (j == n) n++;
    }
    return n;
}

static void join_workers(model_version *mv) {
    for (size_t i = 0; i < mv->num_instances; i++)
        for (size_t l = 0; l < mv->instances[i].num_lanes; l++)
            if (mv->instances[i].lanes[l].started) pthread_join(mv->instances[i].lanes[l].thread, NULL);
}

int model_version_load(const char *name, int64_t version, const char *path, model_config *cfg,
                       const model_load_options *opt, model_version **out, serve_error *e) {
    *out = NULL;
    model_version *mv = calloc(1, sizeof *mv);
    if (!mv) {
        config_model_free(cfg);
        return serve_fail(e, SERVE_INTERNAL, "out of memory");
    }
    mv->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    pthread_mutex_init(&mv->ref_lock, NULL);
    pthread_cond_init(&mv->ref_zero, NULL);
    atomic_init(&mv->refs, 1);
    mv->version = version;
    snprintf(mv->version_str, sizeof mv->version_str, "%" PRId64, version);
    mv->name = strdup(name);
    if (!mv->name) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto err;
    }
    if (cinfer_model_load(path, &mv->model) != CINFER_OK) {
        serve_fail(e, SERVE_BAD_REQUEST, "%s", cinfer_last_error());
        goto err;
    }
    char note[512];
    if (opt->disable_auto_complete && (mv->cfg.num_inputs == 0 || mv->cfg.num_outputs == 0)) {
        serve_fail(e, SERVE_BAD_REQUEST, "config.pbtxt lists no %s: with auto-complete off (--disable-auto-complete-config) "
                   "it must list the model's inputs and outputs", mv->cfg.num_inputs == 0 ? "input" : "output");
        goto err;
    }
    /* with completion off, only the consistency check runs: nothing is filled in, batching is not switched on */
    if (config_model_complete(&mv->cfg, mv->model, opt->disable_auto_complete ? 0 : opt->default_max_batch, note,
                              sizeof note, e) != 0)
        goto err;
    if (note[0]) log_info("model '%s' version %" PRId64 ": %s", name, version, note);
    cinfer_model_stats ms;
    if (cinfer_model_get_stats(mv->model, &ms) == CINFER_OK) mv->memory_bytes = ms.parameter_bytes;
    if (stats_model_init(&mv->stats, mv->cfg.max_batch_size) != 0) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto err;
    }
    if (model_plan_instances(mv, opt, e) != 0) goto err;
    size_t *lane_group = NULL, num_lanes = 0;
    if (model_plan_lanes(mv, &lane_group, &num_lanes, e) != 0) {
        free(lane_group);
        goto err;
    }
    int sched_rc = scheduler_init(&mv->sched, &mv->cfg, num_lanes, lane_group, mv->name, e);
    free(lane_group);
    if (sched_rc != 0) goto err;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        inst->owner = mv;
        for (size_t l = 0; l < inst->num_lanes; l++) {
            model_lane *lane = &inst->lanes[l];
            scheduler_set_gpu(&mv->sched, lane->sched_index, instance_gpu(inst) >= 0);
            lane->inputs = calloc(mv->cfg.num_inputs ? mv->cfg.num_inputs : 1, sizeof *lane->inputs);
            if (!lane->inputs || batcher_batch_init(&lane->batch, &mv->sched.policy) != 0) {
                serve_fail(e, SERVE_INTERNAL, "out of memory");
                goto err;
            }
        }
    }
    apply_test_slowdown(mv);
    mv->oom_recover_after = MODEL_OOM_RECOVER_AFTER;
    for (size_t i = 0; i < mv->cfg.num_params; i++) {
        if (strcmp(mv->cfg.params[i].key, MODEL_PARAM_OOM_RECOVER_AFTER) != 0) continue;
        char *end;
        unsigned long long v = strtoull(mv->cfg.params[i].value, &end, 10);
        if (*end || v < 1 || v > 1000000000ull || mv->cfg.params[i].value[0] == '-') {
            serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s' is '%s': give a count of executions from 1 to 1000000000",
                       name, MODEL_PARAM_OOM_RECOVER_AFTER, mv->cfg.params[i].value);
            goto err;
        }
        mv->oom_recover_after = v;
    }
    if (faults_enabled())
        log_warn("model '%s': fault injection is on (%s=%s): executions may fail on purpose; for tests only", name, FAULTS_ENV,
                 getenv(FAULTS_ENV));
    if (faults_engine_enabled())
        log_warn("model '%s': the engine's fault points are on (CINFER_FAULT_ALLOC=%s, CINFER_FAULT_COPY=%s): allocations "
                 "and copies may fail on purpose; for tests only", name, getenv("CINFER_FAULT_ALLOC") ? getenv("CINFER_FAULT_ALLOC") : "",
                 getenv("CINFER_FAULT_COPY") ? getenv("CINFER_FAULT_COPY") : "");
    char threads[16];
    const char *keys[MODEL_MAX_SESSION_OPTIONS], *vals[MODEL_MAX_SESSION_OPTIONS];
    size_t num_options = session_options(mv, opt, threads, sizeof threads, keys, vals);
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        for (size_t l = 0; l < inst->num_lanes; l++) {
            model_lane *lane = &inst->lanes[l];
            cinfer_status st = cinfer_session_create(mv->model, inst->device, keys, vals, num_options, &lane->session);
            for (size_t w = 0; st == CINFER_OK && w < mv->cfg.num_warmups; w++)
                if (warmup_run(mv, lane, &mv->cfg.warmups[w], e, &st) != 0 && st == CINFER_OK) goto err;
            if (st == CINFER_ERR_OUT_OF_MEMORY && l > 0) { /* the instance runs with the lanes that fit */
                log_warn("model '%s' instance %s (%s): lane %zu of %zu does not fit (%s); the instance runs %zu lane%s",
                         mv->name, inst->name, inst->device, l + 1, inst->num_lanes, cinfer_last_error(), l, l == 1 ? "" : "s");
                model_drop_lanes(inst, l);
                break;
            }
            if (st != CINFER_OK) {
                if (!e->msg[0])
                    serve_fail(e, SERVE_BAD_REQUEST, "instance %s on device '%s': %s", inst->name, inst->device,
                               cinfer_last_error());
                goto err;
            }
            inst->lanes_running = l + 1;
        }
    }
    if (opt->probe_max_batch) model_probe_max_batch(mv, keys, vals, num_options);
    for (size_t i = 0; i < mv->num_instances; i++)
        for (size_t l = 0; l < mv->instances[i].lanes_running; l++) {
            model_lane *lane = &mv->instances[i].lanes[l];
            if (pthread_create(&lane->thread, NULL, model_lane_worker, lane) != 0) {
                serve_fail(e, SERVE_INTERNAL, "cannot start the worker thread of instance %s lane %zu", mv->instances[i].name, l);
                goto err;
            }
            lane->started = 1;
        }
    *out = mv;
    return 0;
err:
    if (mv->sched.initialised) scheduler_close(&mv->sched);
    join_workers(mv);
    free_version(mv);
    return -1;
}

/* Drain first, then stop: the version is already out of the lookups, so only requests that looked it up before
 * hold references, and each holds its own until it is answered (kserve_routes.c). Waiting for the count to reach
 * zero before closing the queue lets every one of them, including those still parsing their body when the version
 * was swapped out, be queued and run here. Closing first (as unload once did) refused those with 503 "unloading":
 * under load a reload lost every request between its lookup and its submit. Once drained the queue is empty and
 * nothing can submit any more, so the close only ends the workers. drained (not refs == 0) is the condition, so mv
 * is not freed while the last unref still holds ref_lock. */
void model_version_retire(model_version *mv) {
    if (!mv) return;
    model_version_unref(mv);
    pthread_mutex_lock(&mv->ref_lock);
    while (!mv->drained) pthread_cond_wait(&mv->ref_zero, &mv->ref_lock);
    pthread_mutex_unlock(&mv->ref_lock);
    scheduler_close(&mv->sched);
    join_workers(mv);
    free_version(mv);
}

int model_version_submit(model_version *mv, model_request *r, serve_error *e) {
    atomic_fetch_add(&mv->stats.pending, 1);
    if (scheduler_submit(&mv->sched, r, e) != 0) {
        atomic_fetch_sub(&mv->stats.pending, 1);
        int full = e->code == SERVE_UNAVAILABLE || e->code == SERVE_TOO_MANY_REQUESTS;
        stats_record_failure(&mv->stats, full ? STATS_REJECTED : STATS_OTHER, stats_now_ns() - r->arrival_ns);
        return -1;
    }
    return 0;
}

json_t *model_version_stats_json(const model_version *mv) {
    json_t *j = stats_model_json(&mv->stats, mv->name, mv->version_str, mv->memory_bytes);
    json_t *a = json_array();
    for (size_t i = 0; i < mv->num_instances; i++) {
        const model_instance *inst = &mv->instances[i];
        int64_t cap = atomic_load(&inst->batch_cap);
        json_t *x = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:b}", "name", inst->name, "kind",
                              inst->kind == CONFIG_KIND_GPU ? "KIND_GPU" : "KIND_CPU", "device", inst->device,
                              "lanes", (json_int_t)inst->lanes_running,
                              "execution_count", (json_int_t)atomic_load(&inst->executions),
                              "inference_count", (json_int_t)atomic_load(&inst->inferences),
                              "padded_rows", (json_int_t)atomic_load(&inst->padded_rows),
                              "in_flight", atomic_load(&inst->busy),
                              "batch_cap", (json_int_t)(cap ? cap : mv->sched.policy.max_batch),
                              "oom_events", (json_int_t)atomic_load(&inst->oom_events),
                              "isolation_retries", (json_int_t)atomic_load(&inst->isolation_retries),
                              "device_failed", atomic_load(&inst->device_failed));
        if (x && inst->probed_max_batch) json_object_set_new(x, "probed_max_batch", json_integer(inst->probed_max_batch));
        json_array_append_new(a, x);
    }
    if (j) json_object_set_new(j, "instance_stats", a);
    else json_decref(a);
    return j;
}
