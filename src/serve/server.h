/* The one server context: options, the model repository, the KServe HTTP listener and the metrics listener,
 * and the start / drain / stop sequence. tools/cinfer_server.c parses flags and handles signals around it. */
#ifndef SERVE_SERVER_H
#define SERVE_SERVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "http_server.h"
#include "metrics.h"
#include "repo.h"
#include "serve_error.h"
#include "shm.h"

/* Connections the metrics listener takes at once (beyond them new ones are closed): part of the descriptors kept in
 * reserve when --http-max-connections is sized to the process's limit (tools/cinfer_server.c). */
#define SERVER_METRICS_CONNECTIONS 64

typedef struct server_options {
    const char *model_repository;
    const char *host;
    int http_port;
    int metrics_port;              /* 0 = no metrics listener */
    repo_control control_mode;
    const char *const *load_models; /* explicit mode: models to load at start ("*" = all) */
    size_t num_load_models;
    int poll_secs;                 /* poll mode: seconds between rescans */
    const char *device;            /* "auto", "cpu", "cuda", "cuda:N" */
    int threads;                   /* engine threads per instance (0 = engine default) */
    int http_threads;
    size_t max_input_bytes;
    unsigned http_idle_timeout_s;  /* --http-idle-timeout: a silent connection is closed after it (0 = never) */
    unsigned http_header_timeout_s; /* --http-header-timeout: a request's line and headers arrive within it (0 = off) */
    unsigned http_body_timeout_s;  /* --http-body-timeout: a request's body arrives within it of its headers (0 = off) */
    unsigned http_max_connections; /* --http-max-connections: open HTTP connections; past it new ones are closed */
    unsigned http_max_connections_per_ip; /* --http-max-connections-per-ip: the same from one address (0 = off) */
    int64_t max_tensor_elements;   /* per input tensor of an infer request */
    int64_t max_request_elements;  /* summed over an infer request's inputs */
    auth_tokens tokens;            /* bearer tokens (auth.h); the server does not own them */
    int strict_readiness;
    int default_max_batch;
    int probe_max_batch;           /* --probe-max-batch: probe each GPU instance's largest batch at load */
    const char *precision;         /* --precision: engine precision of models whose config does not choose one */
    int shutdown_timeout_s;
    int auto_complete_config;      /* 0 (--disable-auto-complete-config): each model needs a complete config.pbtxt */
    int exit_on_error;             /* --exit-on-error: a model that fails to load at start-up stops the server */
} server_options;

typedef struct server {
    server_options opt;
    repo *repo;
    http_server *http, *metrics;
    metrics *page;                 /* the Prometheus page (metrics.c); NULL without a metrics listener */
    shm_registry *shm;             /* system shared-memory regions (kserve_routes.c) */
    _Atomic int shutting_down;
} server;

/* Starts the listeners, then loads the models (a model that fails is reported and skipped), the GPUs starting on a
 * thread meanwhile unless the device is "cpu". Fails only when a listener cannot start or the repository folder is
 * missing. */
int server_start(const server_options *opt, server **out, serve_error *e);
/* Graceful stop: stop accepting, refuse new inference with 503, finish queued and running requests, send their
 * responses, then free everything. NULL is a no-op. */
void server_stop(server *s);

/* KServe route handler and finisher (kserve_routes.c), and the metrics page handler. */
http_result kserve_handle(void *server_ctx, http_request *req);
void kserve_finish(void *server_ctx, http_request *req);
http_result kserve_handle_metrics(void *server_ctx, http_request *req);
/* The KServe listener's authorizer: the route's scope (auth.h) against the configured tokens. */
int kserve_authorize(void *server_ctx, http_request *req, const char **challenge, serve_error *e);

#endif
