/* HTTP front end over libmicrohttpd: an epoll thread pool that reads request bodies (size limit, gzip/deflate),
 * hands each complete request to a route handler, and lets the handler park the connection (suspend) while a
 * worker computes the answer, then resume it from any thread. Knows nothing about KServe. */
#ifndef SERVE_HTTP_SERVER_H
#define SERVE_HTTP_SERVER_H

#include <jansson.h>
#include <stddef.h>

#include "serve_error.h"

typedef struct http_server http_server;
typedef struct http_request http_request;

typedef enum http_result { HTTP_DONE, HTTP_PENDING } http_result;

/* Route handler, called on an HTTP thread once the body is complete. Either fills the response (http_respond_*)
 * and returns HTTP_DONE, or calls http_request_suspend, arranges for http_request_resume to be called later
 * (from any thread), stores its state in req->pending, and returns HTTP_PENDING. */
typedef http_result (*http_handler)(void *ctx, http_request *req);
/* Called on an HTTP thread after a resume; must fill the response. */
typedef void (*http_finisher)(void *ctx, http_request *req);
/* Optional; called on an HTTP thread when a request's headers have arrived, before its body is read. Returns 0 to
 * go on, or -1 with the error in `e` (its code the status) and *challenge the WWW-Authenticate value (or NULL):
 * the body is then read and discarded, the handler is never called, and that error is the answer. */
typedef int (*http_authorizer)(void *ctx, http_request *req, const char **challenge, serve_error *e);

/* Longest decoded request path routed; a longer one is refused (414), never cut. */
#define HTTP_MAX_PATH 2048

struct http_request {
    const char *method;
    const char *url;              /* the path, percent-decoded (no query); never holds a NUL */
    const char *body;             /* complete (and decompressed) body; not NUL-terminated */
    size_t body_len;
    long long infer_header_len;   /* Inference-Header-Content-Length, -1 when absent */
    void *pending;                /* handler state of a suspended request */
    void (*pending_free)(void *); /* called when the request is finished */
    /* private */
    struct http_private *priv;
};

typedef struct http_options {
    const char *host;             /* IPv4 or IPv6 literal */
    int port;
    const char *what;             /* the front end, named in errors ("HTTP", "metrics"); NULL = "HTTP" */
    int threads;                  /* thread pool size */
    size_t max_body;              /* bytes after decompression; a larger Content-Length is refused (413) unread */
    unsigned idle_timeout_s;      /* a connection silent this long (reading a request, or kept alive between
                                   * requests) is closed; 0 = never. A request waiting on its answer is not idle */
    unsigned header_timeout_s;    /* a request's line and headers must arrive within this of its start (the
                                   * connection's opening, or its first byte on a kept-alive one); 0 = no deadline */
    unsigned body_timeout_s;      /* a request's body must arrive within this of its headers' end; 0 = no deadline */
    unsigned max_connections;     /* open connections; past it a new one is closed at once. 0 = libmicrohttpd's
                                   * default (1020) */
    unsigned max_connections_per_ip; /* open connections from one client address; past it a new one from there is
                                   * closed at once. 0 = no such limit */
    http_handler handler;
    http_finisher finisher;
    http_authorizer authorize;    /* NULL: every request goes to the handler */
    void *ctx;
} http_options;

int http_server_start(const http_options *opt, http_server **out, serve_error *e);
/* Stops accepting new connections (existing ones are still served). */
void http_server_quiesce(http_server *s);
/* Requests started and not yet finished (answered and sent). */
int http_server_inflight(http_server *s);
/* Stops the threads and frees. NULL is a no-op. */
void http_server_stop(http_server *s);

void http_request_suspend(http_request *r);
void http_request_resume(http_request *r);
/* Nonzero when the client closed its connection (probed without blocking). */
int http_request_client_gone(http_request *r);
const char *http_request_header(http_request *r, const char *name);

/* Responses. Each replaces any previous one. */
void http_respond_empty(http_request *r, int status);
void http_respond_json(http_request *r, int status, json_t *body); /* takes the reference */
void http_respond_error(http_request *r, const serve_error *e);    /* {"error": msg} with e->code */
void http_respond_text(http_request *r, int status, const char *content_type, char *body, size_t len); /* takes body */
/* A malloc'ed body; json_len > 0 adds Inference-Header-Content-Length and octet-stream content type. */
void http_respond_infer(http_request *r, char *body, size_t len, size_t json_len);

#endif
