/* KServe v2 routes: URL dispatch, health, server and model metadata, model config, statistics, repository
 * index/load/unload, and inference (parse + bind on the HTTP thread, queue, suspend; the worker's completion
 * resumes the connection and kserve_finish encodes the response). Also the route of the Prometheus page (metrics.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/cinfer.h"
#include "kserve_codec.h"
#include "log.h"
#include "model_version.h"
#include "server.h"

#define MAX_SEGS 8

/* Splits the decoded path "/v2/models/m/versions/1/infer" into segments (in place in buf); -1 when it does not
 * fit (never cut: a cut path was routed as its prefix) or has more than MAX_SEGS segments. The query string is
 * not part of it (http_server.c), so a '?' here came from %3F and is part of a segment. */
static int split_path(const char *url, char *buf, size_t n, char **segs) {
    size_t len = strlen(url);
    if (len >= n) return -1;
    memcpy(buf, url, len + 1);
    int k = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (k == MAX_SEGS) return -1;
        segs[k++] = t;
    }
    return k;
}

static void respond_fail(http_request *r, int code, const char *fmt, const char *arg) {
    serve_error e = {0};
    serve_fail(&e, code, fmt, arg);
    http_respond_error(r, &e);
}

static int method_is(const http_request *r, const char *m) { return strcmp(r->method, m) == 0; }

/* Wrong method on a known route: 405. Returns 1 when the method is right. */
static int want_method(http_request *r, const char *m) {
    if (method_is(r, m)) return 1;
    serve_error e = {0};
    serve_fail(&e, SERVE_BAD_METHOD, "method %s is not allowed on %s (use %s)", r->method, r->url, m);
    http_respond_error(r, &e);
    return 0;
}

/* Optional JSON body of repository requests: {} when empty. */
static json_t *body_json(http_request *r, serve_error *e) {
    if (r->body_len == 0) return json_object();
    json_error_t je;
    json_t *j = json_loadb(r->body, r->body_len, 0, &je);
    if (!j) {
        serve_fail(e, SERVE_BAD_REQUEST, "malformed JSON body at line %d, column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        serve_fail(e, SERVE_BAD_REQUEST, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* ---- metadata ---- */

static json_t *tensors_meta(const config_tensor *ts, size_t n, int batched) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_array();
        if (batched) json_array_append_new(shape, json_integer(-1));
        for (int d = 0; d < ts[i].ndims; d++) json_array_append_new(shape, json_integer(ts[i].dims[d]));
        json_array_append_new(a, json_pack("{s:s, s:s, s:o}", "name", ts[i].name, "datatype", kserve_dtype_name(ts[i].dtype),
                                           "shape", shape));
    }
    return a;
}

static void model_metadata(server *s, http_request *r, model_version *mv) {
    json_t *versions = json_array();
    json_t *index = repo_index_json(s->repo, 1);
    size_t i;
    json_t *en;
    json_array_foreach(index, i, en) {
        if (!strcmp(json_string_value(json_object_get(en, "name")), mv->name))
            json_array_append(versions, json_object_get(en, "version"));
    }
    json_decref(index);
    int batched = config_batches(&mv->cfg);
    http_respond_json(r, 200, json_pack("{s:s, s:o, s:s, s:o, s:o}", "name", mv->name, "versions", versions, "platform",
                                        "onnxruntime_onnx", "inputs", tensors_meta(mv->cfg.inputs, mv->cfg.num_inputs, batched),
                                        "outputs", tensors_meta(mv->cfg.outputs, mv->cfg.num_outputs, batched)));
}

/* ---- inference ---- */

/* One inference in flight. The response is encoded on the worker thread when the result is ready, and the model
 * reference is dropped there (or by the handler when queueing fails): an unload running on an HTTP thread may wait
 * for that reference, and must never wait for an HTTP thread (possibly itself) to resume a connection. */
typedef struct infer_job {
    model_request req;
    kserve_infer_request kreq;
    cinfer_tensor *tensors;   /* tensors_inline for up to 4 inputs, else allocated */
    cinfer_tensor tensors_inline[4];
    model_version *mv;
    http_request *http;
    bool half_closed;         /* the client had shut down its side when its request was queued: it awaits the answer */
    serve_error error;        /* set when queueing, running or encoding failed */
    char *body;               /* encoded response */
    size_t body_len, json_len;
} infer_job;

static void infer_job_free(void *p) {
    infer_job *j = p;
    if (!j) return;
    model_request_free_outputs(&j->req);
    kserve_infer_request_free(&j->kreq);
    if (j->tensors != j->tensors_inline) free(j->tensors);
    free(j->body);
    model_version_unref(j->mv);
    free(j);
}

/* Worker thread: encode, release the model, resume the connection. */
static void infer_done(model_request *req) {
    infer_job *j = req->user;
    if (req->error.code) {
        j->error = req->error;
    } else if (kserve_encode_response(&j->kreq, j->mv->name, j->mv->version_str, req->outputs, req->num_outputs, &j->body,
                                      &j->body_len, &j->json_len, &j->error) != 0) {
        if (!j->error.code) serve_fail(&j->error, SERVE_INTERNAL, "encoding the response failed");
    }
    model_request_free_outputs(req);
    model_version *mv = j->mv;
    j->mv = NULL;
    model_version_unref(mv);
    http_request_resume(j->http);
}

/* A request taken within INFER_PROBE_AFTER_NS of its arrival is not probed: its client is there a moment ago, and the
 * probe is a system call (a disconnect that quick is noticed when the response is sent, as one during the run). The
 * probe is for requests that waited in the queue, from clients that had not half-closed when it was queued. */
#define INFER_PROBE_AFTER_NS 1000000u

static int infer_cancelled(model_request *req) {
    infer_job *j = req->user;
    if (j->half_closed || stats_now_ns() - req->arrival_ns < INFER_PROBE_AFTER_NS) return 0;
    return http_request_client_gone(j->http);
}

/* --max-tensor-elements and --max-request-elements, on the shapes the request declares (before anything is bound or
 * allocated for them). A shape with a negative dim is left to binding, which names it. */
static int check_element_limits(const server *s, const kserve_infer_request *k, serve_error *e) {
    int64_t total = 0;
    for (size_t i = 0; i < k->num_inputs; i++) {
        int64_t n = kserve_numel(k->inputs[i].shape, k->inputs[i].ndim);
        if (n < 0) {
            int neg = 0;
            for (int d = 0; d < k->inputs[i].ndim; d++) neg |= k->inputs[i].shape[d] < 0;
            if (neg) continue;
            return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': the element count of its shape overflows", k->inputs[i].name);
        }
        if (s->opt.max_tensor_elements && n > s->opt.max_tensor_elements)
            return serve_fail(e, SERVE_BAD_REQUEST, "input '%s' has %" PRId64 " elements, more than the limit of %" PRId64
                              " per tensor (--max-tensor-elements)", k->inputs[i].name, n, s->opt.max_tensor_elements);
        total += n;
        if (s->opt.max_request_elements && total > s->opt.max_request_elements)
            return serve_fail(e, SERVE_BAD_REQUEST, "the request's inputs have more than %" PRId64 " elements in all "
                              "(--max-request-elements)", s->opt.max_request_elements);
    }
    return 0;
}

int kserve_authorize(void *ctx, http_request *r, const char **challenge, serve_error *e) {
    server *s = ctx;
    return auth_check(&s->opt.tokens, auth_route_scope(r->url), http_request_header(r, "Authorization"), challenge, e);
}

/* repo_foreach_version callback of the health routes: counts the versions on a failed GPU. */
static void check_devices(void *ctx, model_version *mv) {
    if (model_version_check_devices(mv)) ++*(int *)ctx;
}

/* The GPU every instance of mv runs on, or -1 (a CPU instance, or GPUs of more than one device): shared-memory
 * inputs are read into that GPU's page-locked memory, from which the engine uploads without another copy. */
static int model_input_device(const model_version *mv) {
    int device = -1;
    for (size_t i = 0; i < mv->num_instances; i++) {
        const model_instance *inst = &mv->instances[i];
        if (inst->kind != CONFIG_KIND_GPU || strncmp(inst->device, "cuda:", 5) != 0) return -1;
        int d = atoi(inst->device + 5);
        if (i && d != device) return -1;
        device = d;
    }
    return device;
}

static http_result handle_infer(server *s, http_request *r, const char *name, const char *version) {
    uint64_t arrival = stats_now_ns();
    serve_error e = {0};
    if (atomic_load(&s->shutting_down)) {
        serve_fail(&e, SERVE_UNAVAILABLE, "the server is shutting down and accepts no new inference requests");
        http_respond_error(r, &e);
        return HTTP_DONE;
    }
    infer_job *j = calloc(1, sizeof *j);
    if (!j) {
        serve_fail(&e, SERVE_INTERNAL, "out of memory");
        http_respond_error(r, &e);
        return HTTP_DONE;
    }
    if (repo_acquire(s->repo, name, version, &j->mv, &e) != 0) goto fail;
    if (model_version_unavailable(j->mv, &e)) goto fail_counted; /* its GPU failed: 503 until the restart */
    if (kserve_parse_infer(r->body, r->body_len, r->infer_header_len, &j->kreq, &e) != 0) goto fail_counted;
    if (kserve_resolve_shm(&j->kreq, s->shm, &e) != 0) goto fail_counted;
    j->kreq.pinned_device = model_input_device(j->mv);
    if (check_element_limits(s, &j->kreq, &e) != 0) goto fail_counted;
    size_t ni = j->mv->cfg.num_inputs;
    j->tensors = ni <= sizeof j->tensors_inline / sizeof j->tensors_inline[0] ? j->tensors_inline
                                                                             : calloc(ni, sizeof *j->tensors);
    if (!j->tensors) {
        serve_fail(&e, SERVE_INTERNAL, "out of memory");
        goto fail_counted;
    }
    int64_t batch = 1;
    if (kserve_bind_inputs(&j->kreq, &j->mv->cfg, j->tensors, &batch, &e) != 0) goto fail_counted;
    if (j->kreq.priority > UINT32_MAX) {
        serve_fail(&e, SERVE_BAD_REQUEST, "priority %" PRIu64 " is out of range", j->kreq.priority);
        goto fail_counted;
    }
    j->http = r;
    j->req.inputs = j->tensors;
    j->req.num_inputs = j->mv->cfg.num_inputs;
    j->req.batch_size = batch;
    j->req.priority = (uint32_t)j->kreq.priority;
    j->req.timeout_us = j->kreq.timeout_us;
    j->req.id = j->kreq.id;
    j->req.arrival_ns = arrival;
    j->req.done = infer_done;
    j->req.cancelled = infer_cancelled;
    /* A close already there when the request is whole came with it: a half-close (shutdown of the sending side, which
     * HTTP/1.1 allows) from a client still reading, unlike one that closes later, while its request waits. */
    j->half_closed = http_request_client_gone(r);
    j->req.user = j;
    r->pending = j;
    r->pending_free = infer_job_free;
    http_request_suspend(r);
    /* The worker may complete the request, and drop j's reference, before the submit returns: this call's own
     * reference keeps the model (and its scheduler, which signals the worker after unlocking) alive until then. */
    model_version *mv = j->mv;
    model_version_ref(mv);
    if (model_version_submit(mv, &j->req, &j->error) != 0) {
        j->mv = NULL;
        model_version_unref(mv);
        http_request_resume(r);
    }
    model_version_unref(mv);
    return HTTP_PENDING;
fail_counted:
    stats_record_failure(&j->mv->stats, STATS_OTHER, stats_now_ns() - arrival);
fail:
    http_respond_error(r, &e);
    infer_job_free(j);
    return HTTP_DONE;
}

void kserve_finish(void *ctx, http_request *r) {
    (void)ctx;
    infer_job *j = r->pending;
    if (j->error.code) {
        http_respond_error(r, &j->error);
    } else {
        http_respond_infer(r, j->body, j->body_len, j->json_len);
        j->body = NULL;
    }
}

/* ---- routes ---- */

static void handle_server_metadata(http_request *r) {
    http_respond_json(r, 200, json_pack("{s:s, s:s, s:[s, s, s, s, s, s, s]}", "name", "cinfer", "version", cinfer_version(),
                                        "extensions", "binary_tensor_data", "model_repository", "model_configuration",
                                        "statistics", "schedule_policy", "parameters", "system_shared_memory"));
}

/* /v2/systemsharedmemory[/region/{name}]/{status|register|unregister} (Triton's system shared-memory extension):
 * status is GET, the others POST; register needs a region name and {"key","offset"?,"byte_size"}; unregister
 * without a name drops every region. */
static void handle_system_shm(server *s, http_request *r, char **seg, int n) {
    serve_error e = {0};
    const char *name = NULL, *action = n == 3 ? seg[2] : n == 5 ? seg[4] : "";
    if ((n != 3 && n != 5) || (n == 5 && strcmp(seg[2], "region") != 0) ||
        (strcmp(action, "status") && strcmp(action, "register") && strcmp(action, "unregister"))) {
        respond_fail(r, SERVE_NOT_FOUND, "no such route: %s (system shared memory routes are /v2/systemsharedmemory"
                                         "[/region/NAME]/status|register|unregister)", r->url);
        return;
    }
    if (n == 5) name = seg[3];
    if (!want_method(r, strcmp(action, "status") ? "POST" : "GET")) return;
    if (!strcmp(action, "status")) {
        json_t *st = shm_status_json(s->shm, name, &e);
        if (!st) http_respond_error(r, &e);
        else http_respond_json(r, 200, st);
        return;
    }
    if (!strcmp(action, "unregister")) {
        shm_unregister(s->shm, name);
        http_respond_empty(r, 200);
        return;
    }
    if (!name) {
        respond_fail(r, SERVE_BAD_REQUEST, "%s", "registering system shared memory needs a region name: POST "
                                                 "/v2/systemsharedmemory/region/NAME/register");
        return;
    }
    json_t *b = body_json(r, &e);
    if (!b) {
        http_respond_error(r, &e);
        return;
    }
    json_t *key = json_object_get(b, "key"), *off = json_object_get(b, "offset"), *size = json_object_get(b, "byte_size");
    if (!json_is_string(key))
        serve_fail(&e, SERVE_BAD_REQUEST, "system shared memory register request for region '%s' needs 'key', a string "
                                          "(the shm_open name)", name);
    else if (off && (!json_is_integer(off) || json_integer_value(off) < 0))
        serve_fail(&e, SERVE_BAD_REQUEST, "system shared memory register request for region '%s': 'offset' must be a "
                                          "non-negative integer", name);
    else if (!json_is_integer(size) || json_integer_value(size) < 0)
        serve_fail(&e, SERVE_BAD_REQUEST, "system shared memory register request for region '%s' needs 'byte_size', a "
                                          "non-negative integer", name);
    else
        shm_register(s->shm, name, json_string_value(key), off ? (uint64_t)json_integer_value(off) : 0,
                     (uint64_t)json_integer_value(size), &e);
    json_decref(b);
    if (e.code) http_respond_error(r, &e);
    else http_respond_empty(r, 200);
}

static void handle_stats(server *s, http_request *r, const char *name, const char *version) {
    serve_error e = {0};
    json_t *j = repo_stats_json(s->repo, name, version, &e);
    if (!j) http_respond_error(r, &e);
    else http_respond_json(r, 200, j);
}

static void handle_repository(server *s, http_request *r, char **seg, int n) {
    serve_error e = {0};
    if (n == 3 && !strcmp(seg[2], "index")) {
        if (!want_method(r, "POST")) return;
        json_t *b = body_json(r, &e);
        if (!b) {
            http_respond_error(r, &e);
            return;
        }
        json_t *ready = json_object_get(b, "ready");
        int ready_only = json_is_true(ready);
        json_decref(b);
        http_respond_json(r, 200, repo_index_json(s->repo, ready_only));
        return;
    }
    if (n == 5 && !strcmp(seg[2], "models") && (!strcmp(seg[4], "load") || !strcmp(seg[4], "unload"))) {
        if (!want_method(r, "POST")) return;
        int load = !strcmp(seg[4], "load");
        if (repo_mode(s->repo) != REPO_CONTROL_EXPLICIT) {
            serve_fail(&e, SERVE_BAD_REQUEST, "explicit model %s is not allowed: the server runs with --model-control-mode %s "
                                              "(use explicit)", load ? "load" : "unload",
                       repo_mode(s->repo) == REPO_CONTROL_POLL ? "poll" : "none");
            http_respond_error(r, &e);
            return;
        }
        if (atomic_load(&s->shutting_down)) {
            serve_fail(&e, SERVE_UNAVAILABLE, "the server is shutting down");
            http_respond_error(r, &e);
            return;
        }
        json_t *b = body_json(r, &e);
        if (!b) {
            http_respond_error(r, &e);
            return;
        }
        json_t *params = json_object_get(b, "parameters");
        const char *key;
        json_t *v;
        if (params && !json_is_object(params)) {
            serve_fail(&e, SERVE_BAD_REQUEST, "'parameters' must be a JSON object");
        } else if (params) {
            json_object_foreach(params, key, v) {
                if (load && (!strcmp(key, "config") || !strncmp(key, "file:", 5))) {
                    serve_fail(&e, SERVE_UNSUPPORTED, "load parameter '%s' (config or file override) is not supported yet", key);
                    break;
                }
            }
        }
        json_decref(b);
        if (e.code) {
            http_respond_error(r, &e);
            return;
        }
        int rc = load ? repo_load_model(s->repo, seg[3], &e) : repo_unload_model(s->repo, seg[3], &e);
        if (rc != 0) http_respond_error(r, &e);
        else http_respond_empty(r, 200);
        return;
    }
    respond_fail(r, SERVE_NOT_FOUND, "no such route: %s", r->url);
}

http_result kserve_handle(void *ctx, http_request *r) {
    server *s = ctx;
    char buf[HTTP_MAX_PATH + 1], *seg[MAX_SEGS];
    int n = split_path(r->url, buf, sizeof buf, seg);
    if (n < 1 || strcmp(seg[0], "v2") != 0) {
        respond_fail(r, SERVE_NOT_FOUND, "no such route: %s (KServe v2 routes start with /v2)", r->url);
        return HTTP_DONE;
    }
    if (n == 1) {
        if (want_method(r, "GET")) handle_server_metadata(r);
        return HTTP_DONE;
    }
    if (!strcmp(seg[1], "health") && n == 3 && (!strcmp(seg[2], "live") || !strcmp(seg[2], "ready"))) {
        if (!method_is(r, "GET")) {
            want_method(r, "GET");
            return HTTP_DONE;
        }
        int ok = !atomic_load(&s->shutting_down) && (seg[2][0] == 'l' || repo_ready(s->repo, s->opt.strict_readiness));
        int failed = 0; /* a GPU in use hit a sticky CUDA error: not live (restart me) and not ready */
        repo_foreach_version(s->repo, check_devices, &failed);
        if (failed) ok = 0;
        http_respond_empty(r, ok ? 200 : 400);
        return HTTP_DONE;
    }
    if (!strcmp(seg[1], "repository")) {
        handle_repository(s, r, seg, n);
        return HTTP_DONE;
    }
    if (!strcmp(seg[1], "systemsharedmemory")) {
        handle_system_shm(s, r, seg, n);
        return HTTP_DONE;
    }
    if (!strcmp(seg[1], "cudasharedmemory")) {
        respond_fail(r, SERVE_UNSUPPORTED, "%s is not supported yet", seg[1]);
        return HTTP_DONE;
    }
    if (strcmp(seg[1], "models") != 0 || n < 3) {
        respond_fail(r, SERVE_NOT_FOUND, "no such route: %s", r->url);
        return HTTP_DONE;
    }
    if (n == 3 && !strcmp(seg[2], "stats")) {
        if (want_method(r, "GET")) handle_stats(s, r, NULL, NULL);
        return HTTP_DONE;
    }
    const char *name = seg[2], *version = NULL;
    int k = 3;
    if (n >= 5 && !strcmp(seg[3], "versions")) {
        version = seg[4];
        k = 5;
    }
    const char *action = k < n ? seg[k] : "";
    if (k + 1 < n || (k < n && strcmp(action, "ready") && strcmp(action, "config") && strcmp(action, "infer") &&
                      strcmp(action, "stats"))) {
        respond_fail(r, SERVE_NOT_FOUND, "no such route: %s", r->url);
        return HTTP_DONE;
    }
    if (!strcmp(action, "infer")) {
        if (!want_method(r, "POST")) return HTTP_DONE;
        return handle_infer(s, r, name, version);
    }
    if (!want_method(r, "GET")) return HTTP_DONE;
    if (!strcmp(action, "stats")) {
        handle_stats(s, r, name, version);
        return HTTP_DONE;
    }
    model_version *mv;
    serve_error e = {0};
    if (repo_acquire(s->repo, name, version, &mv, &e) != 0) {
        if (!strcmp(action, "ready") && e.code == SERVE_UNAVAILABLE) e.code = SERVE_BAD_REQUEST;
        http_respond_error(r, &e);
        return HTTP_DONE;
    }
    if (!strcmp(action, "ready")) {
        if (model_version_unavailable(mv, &e)) { /* on a failed GPU: not ready (400, as any not-ready model) */
            e.code = SERVE_BAD_REQUEST;
            http_respond_error(r, &e);
        } else {
            http_respond_empty(r, 200);
        }
    } else if (!strcmp(action, "config")) http_respond_json(r, 200, config_model_to_json(&mv->cfg));
    else model_metadata(s, r, mv);
    model_version_unref(mv);
    return HTTP_DONE;
}

http_result kserve_handle_metrics(void *ctx, http_request *r) {
    server *s = ctx;
    char buf[HTTP_MAX_PATH + 1], *seg[MAX_SEGS];
    int n = split_path(r->url, buf, sizeof buf, seg);
    if (n != 1 || strcmp(seg[0], "metrics") != 0) {
        respond_fail(r, SERVE_NOT_FOUND, "no such route: %s (the metrics page is /metrics)", r->url);
        return HTTP_DONE;
    }
    if (!want_method(r, "GET")) return HTTP_DONE;
    stats_text t = {0};
    metrics_write(s->page, s->repo, &t);
    if (t.oom) {
        free(t.d);
        respond_fail(r, SERVE_INTERNAL, "%s", "out of memory while writing the metrics");
        return HTTP_DONE;
    }
    http_respond_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", t.d ? t.d : strdup(""), t.n);
    return HTTP_DONE;
}
