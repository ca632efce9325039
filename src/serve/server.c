/* Server lifecycle: HTTP listeners first (so liveness answers while models load), then the repository loads (the
 * GPUs starting meanwhile on a thread);
 * on stop the listener is quiesced, every model is drained (queued requests finish), in-flight responses are
 * sent, and then the daemons and the repository are freed. */
#include "server.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cinfer/cinfer.h"
#include "kserve_codec.h"
#include "log.h"

/* Starts the GPUs that instances may use (--device auto or cuda: every visible one; cuda:N: that one) while
 * server_start reads the repository's models: the driver and each primary context take about 0.4 s in a fresh
 * process on an H200 host, which would otherwise come after the first model's load (bench/gpu/server_start.py).
 * Errors are left for the sessions, which report them per model. CINFER_SERVER_EARLY_DEVICES=0 turns it off. */
static void *start_devices(void *device) {
    const char *d = device;
    int first = 0, count = 0;
    if (!strncmp(d, "cuda:", 5)) {
        first = atoi(d + 5);
        count = 1;
    } else if (cinfer_cuda_device_count(&count) != CINFER_OK) {
        return NULL;
    }
    for (int i = first; i < first + count; i++) {
        cinfer_device_info info;
        (void)cinfer_cuda_device_info(i, &info);
    }
    return NULL;
}

static int start_serving(const server_options *opt, server **out, serve_error *e);

int server_start(const server_options *opt, server **out, serve_error *e) {
    *out = NULL;
    const char *early = getenv("CINFER_SERVER_EARLY_DEVICES");
    pthread_t starter;
    const bool starting = opt->device && strcmp(opt->device, "cpu") != 0 && !(early && !strcmp(early, "0")) &&
                          pthread_create(&starter, NULL, start_devices, (void *)opt->device) == 0;
    const int rc = start_serving(opt, out, e);
    if (starting) pthread_join(starter, NULL); /* long done by now, or a load waited on the same driver start */
    return rc;
}

static int start_serving(const server_options *opt, server **out, serve_error *e) {
    server *s = calloc(1, sizeof *s);
    if (!s) return serve_fail(e, 500, "out of memory");
    s->opt = *opt;
    kserve_codec_init();
    model_load_options lo = {.device = opt->device, .threads = opt->threads, .default_max_batch = opt->default_max_batch,
                            .probe_max_batch = opt->probe_max_batch, .precision = opt->precision,
                            .disable_auto_complete = !opt->auto_complete_config};
    if (shm_registry_create(&s->shm, e) != 0) goto err;
    if (repo_create(opt->model_repository, opt->control_mode, &lo, &s->repo, e) != 0) goto err;
    http_options ho = {.host = opt->host, .port = opt->http_port, .what = "HTTP", .threads = opt->http_threads,
                       .max_body = opt->max_input_bytes, .idle_timeout_s = opt->http_idle_timeout_s,
                       .header_timeout_s = opt->http_header_timeout_s, .body_timeout_s = opt->http_body_timeout_s,
                       .max_connections = opt->http_max_connections,
                       .max_connections_per_ip = opt->http_max_connections_per_ip, .handler = kserve_handle,
                       .finisher = kserve_finish, .authorize = kserve_authorize, .ctx = s};
    if (http_server_start(&ho, &s->http, e) != 0) goto err;
    if (opt->metrics_port > 0) {
        metrics_options mt = {.device = opt->device};
        if (metrics_create(&mt, &s->page, e) != 0) goto err;
        /* the metrics page gets the same timeouts, and few connections: a scraper needs one or two */
        http_options mo = {.host = opt->host, .port = opt->metrics_port, .what = "metrics", .threads = 1, .max_body = 1 << 16,
                           .idle_timeout_s = opt->http_idle_timeout_s, .header_timeout_s = opt->http_header_timeout_s,
                           .body_timeout_s = opt->http_body_timeout_s, .max_connections = SERVER_METRICS_CONNECTIONS,
                           .handler = kserve_handle_metrics, .finisher = kserve_finish, .ctx = s};
        if (http_server_start(&mo, &s->metrics, e) != 0) goto err;
    }
    log_info("listening on %s:%d (HTTP/KServe v2)%s", opt->host, opt->http_port, opt->metrics_port > 0 ? "" : "; metrics off");
    if (opt->metrics_port > 0) log_info("metrics on %s:%d/metrics", opt->host, opt->metrics_port);
    int failed = repo_load_startup(s->repo, opt->load_models, opt->num_load_models);
    if (failed && opt->exit_on_error) {
        serve_fail(e, SERVE_BAD_REQUEST, "%d model%s failed to load at start-up (--exit-on-error=true); the reasons are "
                   "logged above", failed, failed == 1 ? "" : "s");
        goto err;
    }
    if (failed) log_warn("%d model%s failed to load; see the errors above and POST /v2/repository/index", failed, failed == 1 ? "" : "s");
    log_info("server ready: model repository '%s', control mode %s", opt->model_repository,
             opt->control_mode == REPO_CONTROL_NONE ? "none" : opt->control_mode == REPO_CONTROL_POLL ? "poll" : "explicit");
    *out = s;
    return 0;
err:
    http_server_stop(s->metrics);
    http_server_stop(s->http);
    metrics_free(s->page);
    repo_free(s->repo);
    shm_registry_free(s->shm);
    free(s);
    return -1;
}

void server_stop(server *s) {
    if (!s) return;
    atomic_store(&s->shutting_down, 1);
    http_server_quiesce(s->http);
    log_info("shutting down: finishing %d in-flight request%s", http_server_inflight(s->http),
             http_server_inflight(s->http) == 1 ? "" : "s");
    repo_retire_all(s->repo); /* queued and running requests complete; their connections are resumed */
    /* wait for the resumed connections to send their responses */
    struct timespec ts = {0, 2 * 1000 * 1000};
    for (int i = 0; i < 5000 && http_server_inflight(s->http) > 0; i++) nanosleep(&ts, NULL);
    http_server_stop(s->http);
    http_server_stop(s->metrics);
    metrics_free(s->page);
    repo_free(s->repo);
    shm_registry_free(s->shm); /* after every request is gone: none can still acquire a region */
    free(s);
    log_info("server stopped");
}
