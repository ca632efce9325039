/* A loaded model version: load + config completion, instances (one session and one worker thread each),
 * warm-up, the worker loop (pop, check deadline and cancellation, run, record statistics, complete), and the
 * drain-then-free retirement used by unload, reload and shutdown. */
#include "model_version.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

void model_version_ref(model_version *mv) { atomic_fetch_add(&mv->refs, 1); }

void model_version_unref(model_version *mv) {
    if (!mv) return;
    if (atomic_fetch_sub(&mv->refs, 1) == 1) {
        pthread_mutex_lock(&mv->ref_lock);
        pthread_cond_broadcast(&mv->ref_zero);
        pthread_mutex_unlock(&mv->ref_lock);
    }
}

static void fail_request(model_version *mv, model_request *r, stats_fail_reason why) {
    r->end_ns = stats_now_ns();
    stats_record_failure(&mv->stats, why, r->end_ns - r->arrival_ns);
    atomic_fetch_sub(&mv->stats.pending, 1);
    r->done(r);
}

/* Runs one request on this instance's session. */
static void run_request(model_instance *inst, model_request *r) {
    model_version *mv = inst->owner;
    r->start_ns = stats_now_ns();
    if (r->deadline_ns && r->start_ns > r->deadline_ns) {
        serve_fail(&r->error, SERVE_UNAVAILABLE, "request timeout expired: the request to model '%s' waited %" PRIu64
                                                 " us in the queue", mv->name, (r->start_ns - r->arrival_ns) / 1000);
        fail_request(mv, r, STATS_REJECTED);
        return;
    }
    if (r->cancelled && r->cancelled(r)) {
        serve_fail(&r->error, SERVE_BAD_REQUEST, "request to model '%s' was cancelled: the client disconnected", mv->name);
        fail_request(mv, r, STATS_CANCELED);
        return;
    }
    size_t no = cinfer_model_num_outputs(mv->model);
    r->outputs = calloc(no ? no : 1, sizeof *r->outputs);
    if (!r->outputs) {
        serve_fail(&r->error, SERVE_INTERNAL, "model '%s': out of memory for the outputs", mv->name);
        fail_request(mv, r, STATS_OTHER);
        return;
    }
    r->num_outputs = no;
    r->input_end_ns = stats_now_ns();
    cinfer_status st = cinfer_session_run(inst->session, r->inputs, r->num_inputs, r->outputs, no);
    r->infer_end_ns = stats_now_ns();
    if (st != CINFER_OK) {
        int code = st == CINFER_ERR_INVALID_ARGUMENT ? SERVE_BAD_REQUEST
                   : st == CINFER_ERR_UNSUPPORTED    ? SERVE_UNSUPPORTED
                                                     : SERVE_INTERNAL;
        serve_fail(&r->error, code, "model '%s' version %s failed to run: %s: %s", mv->name, mv->version_str,
                   cinfer_status_name(st), cinfer_last_error());
        model_request_free_outputs(r);
        r->num_outputs = 0;
        fail_request(mv, r, code == SERVE_BAD_REQUEST ? STATS_OTHER : STATS_BACKEND);
        return;
    }
    r->end_ns = stats_now_ns();
    uint64_t in = r->input_end_ns - r->start_ns, infer = r->infer_end_ns - r->input_end_ns, out = r->end_ns - r->infer_end_ns;
    stats_record_execution(&mv->stats, mv->cfg.max_batch_size > 0 ? r->batch_size : 1, in, infer, out);
    stats_record_success(&mv->stats, r->start_ns - r->arrival_ns, in, infer, out, r->end_ns - r->arrival_ns);
    atomic_fetch_sub(&mv->stats.pending, 1);
    r->done(r);
}

static void *worker_main(void *arg) {
    model_instance *inst = arg;
    model_request *r;
    while ((r = model_queue_pop(&inst->owner->queue)) != NULL) run_request(inst, r);
    return NULL;
}

int model_version_submit(model_version *mv, model_request *r, serve_error *e) {
    atomic_fetch_add(&mv->stats.pending, 1);
    if (model_queue_push(&mv->queue, r, mv->name, e) != 0) {
        atomic_fetch_sub(&mv->stats.pending, 1);
        stats_record_failure(&mv->stats, e->code == SERVE_UNAVAILABLE ? STATS_REJECTED : STATS_OTHER,
                             stats_now_ns() - r->arrival_ns);
        return -1;
    }
    return 0;
}

/* Fills a warm-up tensor with zeros or a fixed pseudo-random pattern. */
static int warmup_run(model_version *mv, model_instance *inst, const config_warmup *w, serve_error *e) {
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
        if (mv->cfg.max_batch_size > 0) t->dims[t->ndim++] = w->batch_size;
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
        cinfer_status st = cinfer_session_run(inst->session, ts, n, outs, no);
        for (size_t k = 0; k < no; k++) cinfer_tensor_free_data(&outs[k]);
        if (st != CINFER_OK) {
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
    for (size_t i = 0; i < mv->num_instances; i++) cinfer_session_free(mv->instances[i].session);
    free(mv->instances);
    cinfer_model_free(mv->model);
    model_queue_destroy(&mv->queue);
    stats_model_destroy(&mv->stats);
    config_model_free(&mv->cfg);
    pthread_mutex_destroy(&mv->ref_lock);
    pthread_cond_destroy(&mv->ref_zero);
    free(mv->name);
    free(mv);
}

/* Lists the devices of the instances the config asks for (default: one instance on opt->device). */
static int plan_instances(model_version *mv, const model_load_options *opt, serve_error *e) {
    size_t total = 0;
    for (size_t g = 0; g < mv->cfg.num_groups; g++) {
        const config_instance_group *grp = &mv->cfg.groups[g];
        total += (size_t)grp->count * (grp->num_gpus ? grp->num_gpus : 1);
    }
    if (!mv->cfg.num_groups) total = 1;
    mv->instances = calloc(total, sizeof *mv->instances);
    if (!mv->instances) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    size_t k = 0;
    if (!mv->cfg.num_groups) snprintf(mv->instances[k++].device, sizeof mv->instances[0].device, "%s", opt->device);
    for (size_t g = 0; g < mv->cfg.num_groups; g++) {
        const config_instance_group *grp = &mv->cfg.groups[g];
        size_t ndev = grp->num_gpus ? grp->num_gpus : 1;
        for (size_t d = 0; d < ndev; d++)
            for (int c = 0; c < grp->count; c++) {
                char *dev = mv->instances[k++].device;
                size_t n = sizeof mv->instances[0].device;
                if (grp->kind == CONFIG_KIND_CPU) snprintf(dev, n, "cpu");
                else if (grp->num_gpus) snprintf(dev, n, "cuda:%d", grp->gpus[d]);
                else if (grp->kind == CONFIG_KIND_GPU) snprintf(dev, n, "%s", strncmp(opt->device, "cuda", 4) ? "cuda" : opt->device);
                else snprintf(dev, n, "%s", opt->device);
            }
    }
    mv->num_instances = total;
    return 0;
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
    char note[512], cerr[1024];
    if (config_model_complete(&mv->cfg, mv->model, opt->default_max_batch, note, sizeof note, cerr, sizeof cerr) != 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "%s", cerr);
        goto err;
    }
    if (note[0]) log_info("model '%s' version %" PRId64 ": %s", name, version, note);
    cinfer_model_stats ms;
    if (cinfer_model_get_stats(mv->model, &ms) == CINFER_OK) mv->memory_bytes = ms.parameter_bytes;
    const config_dynamic_batching *db = &mv->cfg.dynamic_batching;
    if (stats_model_init(&mv->stats, mv->cfg.max_batch_size) != 0 ||
        model_queue_init(&mv->queue, db->priority_levels, db->default_priority_level, db->default_queue_policy.max_queue_size,
                         db->default_queue_policy.default_timeout_us, db->default_queue_policy.allow_timeout_override) != 0) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto err;
    }
    if (plan_instances(mv, opt, e) != 0) goto err;
    if (!mv->cfg.num_groups) { /* print the default group in the config, as Triton's auto-completion does */
        if (!(mv->cfg.groups = calloc(1, sizeof *mv->cfg.groups))) {
            serve_fail(e, SERVE_INTERNAL, "out of memory");
            goto err;
        }
        mv->cfg.num_groups = 1;
        mv->cfg.groups[0].count = 1;
        mv->cfg.groups[0].kind = strncmp(mv->instances[0].device, "cuda", 4) ? CONFIG_KIND_CPU : CONFIG_KIND_GPU;
    }
    char threads[16];
    snprintf(threads, sizeof threads, "%d", opt->threads);
    const char *keys[] = {"threads"}, *vals[] = {threads};
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        inst->owner = mv;
        if (cinfer_session_create(mv->model, inst->device, keys, vals, opt->threads > 0 ? 1 : 0, &inst->session) != CINFER_OK) {
            serve_fail(e, SERVE_BAD_REQUEST, "instance %zu on device '%s': %s", i, inst->device, cinfer_last_error());
            goto err;
        }
        for (size_t w = 0; w < mv->cfg.num_warmups; w++)
            if (warmup_run(mv, inst, &mv->cfg.warmups[w], e) != 0) goto err;
    }
    for (size_t i = 0; i < mv->num_instances; i++) {
        if (pthread_create(&mv->instances[i].thread, NULL, worker_main, &mv->instances[i]) != 0) {
            serve_fail(e, SERVE_INTERNAL, "cannot start the worker thread of instance %zu", i);
            goto err;
        }
        mv->instances[i].started = 1;
    }
    *out = mv;
    return 0;
err:
    if (mv->queue.head) model_queue_close(&mv->queue);
    for (size_t i = 0; i < mv->num_instances; i++)
        if (mv->instances[i].started) pthread_join(mv->instances[i].thread, NULL);
    free_version(mv);
    return -1;
}

void model_version_retire(model_version *mv) {
    if (!mv) return;
    model_queue_close(&mv->queue);
    for (size_t i = 0; i < mv->num_instances; i++)
        if (mv->instances[i].started) pthread_join(mv->instances[i].thread, NULL);
    model_version_unref(mv);
    pthread_mutex_lock(&mv->ref_lock);
    while (atomic_load(&mv->refs) > 0) pthread_cond_wait(&mv->ref_zero, &mv->ref_lock);
    pthread_mutex_unlock(&mv->ref_lock);
    free_version(mv);
}
