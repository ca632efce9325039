/* libmicrohttpd glue. MHD runs an internal epoll thread pool with suspend/resume enabled. Each request gets an
 * http_request on its first callback; body chunks are appended (bounded by max_body; a too large body is read
 * and discarded so the client can get its 400); the final callback decodes Content-Encoding and calls the
 * route handler. A suspended request is re-entered after MHD_resume_connection, when the finisher builds the
 * response. The completion callback frees the request and decrements the in-flight count. */
#include "http_server.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "listen_socket.h"
#include "log.h"

struct http_server {
    struct MHD_Daemon *d;
    http_options opt;
    _Atomic int inflight;
    int quiesced;
    MHD_socket listen_fd; /* handed back by MHD_quiesce_daemon: closed after MHD_stop_daemon (http_server_quiesce) */
};

enum { REQ_READING, REQ_PENDING, REQ_ANSWERED };

#define HTTP_BODY_PRESIZE (64u << 10) /* bodies up to this declared length get their buffer in one allocation */
/* libmicrohttpd's memory per connection (its default is 32 KiB): the request line and headers must fit in it (else
 * 431), the read buffer is half of it, and it clears the whole of it for every request on a kept-alive connection
 * (with 32 KiB that clearing, 48 KiB of memset per request, was the largest user-space cost of a small inference). */
#define HTTP_CONNECTION_MEMORY (16u << 10)

struct http_private {
    http_server *srv;
    struct MHD_Connection *conn;
    char *buf;
    size_t len, cap;
    size_t expect;                /* Content-Length (0 when absent): the body buffer grows to it and no further */
    char *inflated;
    int too_large;
    int denied;                   /* the authorizer refused the request: answer deny, read and drop the body */
    serve_error deny;
    const char *challenge;        /* WWW-Authenticate value of a 401 (static string) */
    int state;
    /* response */
    int status;
    char *resp;
    size_t resp_len;
    const char *content_type;
    long long resp_header_len;
};

/* A request and its private state in one allocation. */
struct http_request_block {
    http_request r;
    struct http_private p;
};

static void set_resp(http_request *r, int status, const char *ctype, char *body, size_t len, long long hlen) {
    struct http_private *p = r->priv;
    free(p->resp);
    p->status = status;
    p->content_type = ctype;
    p->resp = body;
    p->resp_len = len;
    p->resp_header_len = hlen;
}

void http_respond_empty(http_request *r, int status) { set_resp(r, status, NULL, NULL, 0, -1); }

void http_respond_text(http_request *r, int status, const char *content_type, char *body, size_t len) {
    set_resp(r, status, content_type, body, len, -1);
}

void http_respond_json(http_request *r, int status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"error\":\"out of memory while encoding the response\"}";
        s = strdup(oom);
        status = 500;
    }
    set_resp(r, status, "application/json", s, s ? strlen(s) : 0, -1);
}

void http_respond_error(http_request *r, const serve_error *e) {
    http_respond_json(r, e->code ? e->code : 500, json_pack("{s:s}", "error", e->msg));
}

void http_respond_infer(http_request *r, char *body, size_t len, size_t json_len) {
    if (json_len) set_resp(r, 200, "application/octet-stream", body, len, (long long)json_len);
    else set_resp(r, 200, "application/json", body, len, -1);
}

void http_request_suspend(http_request *r) {
    r->priv->state = REQ_PENDING; /* before suspending: a resume may follow at once from a worker */
    MHD_suspend_connection(r->priv->conn);
}
void http_request_resume(http_request *r) { MHD_resume_connection(r->priv->conn); }

int http_request_client_gone(http_request *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->priv->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;
}

const char *http_request_header(http_request *r, const char *name) {
    return MHD_lookup_connection_value(r->priv->conn, MHD_HEADER_KIND, name);
}

/* Inflates gzip or zlib/raw deflate into p->inflated, bounded by max_body. */
static int inflate_body(http_request *r, const char *enc, serve_error *e) {
    struct http_private *p = r->priv;
    size_t max = p->srv->opt.max_body;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int gz = !strcasecmp(enc, "gzip") || !strcasecmp(enc, "x-gzip");
    if (inflateInit2(&zs, gz ? 15 + 16 : 15 + 32) != Z_OK) return serve_fail(e, 500, "zlib initialisation failed");
    size_t cap = p->len * 4 + 1024, n = 0;
    if (cap > max + 1) cap = max + 1;
    char *out = malloc(cap);
    int rc = -1;
    if (!out) {
        serve_fail(e, 500, "out of memory");
        goto done;
    }
    zs.next_in = (unsigned char *)p->buf;
    zs.avail_in = (uInt)p->len;
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                serve_fail(e, 400, "the decompressed request body exceeds the limit of %zu bytes (--max-input-bytes)", max);
                goto done;
            }
            size_t nc = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *no = realloc(out, nc);
            if (!no) {
                serve_fail(e, 500, "out of memory");
                goto done;
            }
            out = no;
            cap = nc;
        }
        zs.next_out = (unsigned char *)out + n;
        zs.avail_out = (uInt)(cap - n);
        int z = inflate(&zs, Z_NO_FLUSH);
        n = cap - zs.avail_out;
        if (z == Z_STREAM_END) break;
        if (z != Z_OK && !(z == Z_BUF_ERROR && zs.avail_out == 0)) {
            serve_fail(e, 400, "the request body is not valid %s data: %s", enc, zs.msg ? zs.msg : "truncated");
            goto done;
        }
    }
    if (n > max) {
        serve_fail(e, 400, "the decompressed request body exceeds the limit of %zu bytes (--max-input-bytes)", max);
        goto done;
    }
    p->inflated = out;
    out = NULL;
    r->body = p->inflated;
    r->body_len = n;
    rc = 0;
done:
    free(out);
    inflateEnd(&zs);
    return rc;
}

static enum MHD_Result send_response(http_request *r) {
    struct http_private *p = r->priv;
    struct MHD_Response *resp;
    if (p->resp) {
        resp = MHD_create_response_from_buffer(p->resp_len, p->resp, MHD_RESPMEM_MUST_FREE);
        if (resp) p->resp = NULL;
    } else {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) return MHD_NO;
    if (p->content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, p->content_type);
    if (p->resp_header_len >= 0) {
        char v[24], *d = v + sizeof v;
        unsigned long long x = (unsigned long long)p->resp_header_len;
        *--d = 0;
        do {
            *--d = (char)('0' + x % 10);
            x /= 10;
        } while (x);
        MHD_add_response_header(resp, "Inference-Header-Content-Length", d);
    }
    if (p->challenge) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, p->challenge);
    enum MHD_Result ret = MHD_queue_response(p->conn, (unsigned)p->status, resp);
    MHD_destroy_response(resp);
    p->state = REQ_ANSWERED;
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version;
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r) {
        struct http_request_block *blk = calloc(1, sizeof *blk);
        if (!blk) return MHD_NO;
        r = &blk->r;
        struct http_private *p = &blk->p;
        r->priv = p;
        r->method = method;
        r->url = url;
        r->infer_header_len = -1;
        p->srv = s;
        p->conn = conn;
        p->resp_header_len = -1;
        atomic_fetch_add(&s->inflight, 1);
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long clen = cl ? strtoull(cl, NULL, 10) : 0;
        if (clen > s->opt.max_body) p->too_large = 1;
        else p->expect = (size_t)clen;
        if (s->opt.authorize && s->opt.authorize(s->opt.ctx, r, &p->challenge, &p->deny) != 0) p->denied = 1;
        return MHD_YES;
    }
    struct http_private *p = r->priv;
    if (*upload_size) {
        if (!p->too_large && !p->denied) {
            if (p->len + *upload_size > s->opt.max_body) {
                p->too_large = 1;
                free(p->buf);
                p->buf = NULL;
                p->len = p->cap = 0;
            } else {
                if (p->len + *upload_size > p->cap) {
                    /* the first allocation takes the whole declared body when it is at most HTTP_BODY_PRESIZE (one
                     * malloc per request), else the buffer doubles as the data arrives (so a client cannot make it
                     * allocate more than that ahead of its data), never past the declared length */
                    size_t need = p->len + *upload_size;
                    size_t cap = p->cap ? p->cap : p->expect && p->expect <= HTTP_BODY_PRESIZE ? p->expect : 4096;
                    while (cap < need) cap *= 2;
                    if (p->expect >= need && cap > p->expect) cap = p->expect;
                    char *nb = realloc(p->buf, cap);
                    if (!nb) return MHD_NO;
                    p->buf = nb;
                    p->cap = cap;
                }
                memcpy(p->buf + p->len, upload_data, *upload_size);
                p->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (p->state == REQ_PENDING) {
        s->opt.finisher(s->opt.ctx, r);
        return send_response(r);
    }
    if (p->state == REQ_ANSWERED) return MHD_YES;
    serve_error e = {0};
    if (p->denied) {
        http_respond_error(r, &p->deny);
        return send_response(r);
    }
    if (p->too_large) {
        serve_fail(&e, 400, "the request body exceeds the limit of %zu bytes (--max-input-bytes)", s->opt.max_body);
        http_respond_error(r, &e);
        return send_response(r);
    }
    r->body = p->buf ? p->buf : "";
    r->body_len = p->len;
    const char *enc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (enc && strcasecmp(enc, "identity") != 0) {
        if (strcasecmp(enc, "gzip") && strcasecmp(enc, "x-gzip") && strcasecmp(enc, "deflate")) {
            serve_fail(&e, 400, "unsupported Content-Encoding '%s' (gzip, deflate or identity)", enc);
            http_respond_error(r, &e);
            return send_response(r);
        }
        if (inflate_body(r, enc, &e) != 0) {
            http_respond_error(r, &e);
            return send_response(r);
        }
    }
    const char *ihl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    if (ihl) {
        char *end;
        long long v = strtoll(ihl, &end, 10);
        if (*ihl == 0 || *end || v < 0) {
            serve_fail(&e, 400, "Inference-Header-Content-Length '%s' is not a non-negative integer", ihl);
            http_respond_error(r, &e);
            return send_response(r);
        }
        r->infer_header_len = v;
    }
    if (s->opt.handler(s->opt.ctx, r) == HTTP_PENDING) return MHD_YES;
    return send_response(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    (void)toe;
    http_server *s = cls;
    http_request *r = *con_cls;
    if (!r) return;
    if (r->pending_free) r->pending_free(r->pending);
    free(r->priv->buf);
    free(r->priv->inflated);
    free(r->priv->resp);
    free((struct http_request_block *)r); /* r is the block's first member */
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    log_warn("http: %s", msg);
}

int http_server_start(const http_options *opt, http_server **out, serve_error *e) {
    *out = NULL;
    http_server *s = calloc(1, sizeof *s);
    if (!s) return serve_fail(e, 500, "out of memory");
    s->opt = *opt;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (strchr(opt->host, ':')) flags |= MHD_USE_IPv6;
    /* bound here, not by libmicrohttpd, whose address reuse option also set SO_REUSEPORT: a second server then shared
     * the port (listen_socket.h) */
    int fd;
    if (listen_socket_open(opt->host, opt->port, opt->what ? opt->what : "HTTP", &fd, e) != 0) {
        free(s);
        return -1;
    }
    /* a pool of one is no pool: then MHD runs one internal polling thread and must not be given a pool size */
    struct MHD_OptionItem pool[] = {{MHD_OPTION_THREAD_POOL_SIZE, opt->threads, NULL}, {MHD_OPTION_END, 0, NULL}};
    if (opt->threads < 2) pool[0].option = MHD_OPTION_END;
    s->d = MHD_start_daemon(flags, (uint16_t)opt->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_ARRAY, pool,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY, MHD_OPTION_END);
    if (!s->d) {
        /* not closed: libmicrohttpd may have closed it already on some failure paths, and closing a reused descriptor
         * would hit another file; the server does not start, so the process exits soon */
        free(s);
        return serve_fail(e, 500, "cannot serve %s on %s:%d (libmicrohttpd failed to start: its reason is logged "
                                  "above)", opt->what ? opt->what : "HTTP", opt->host, opt->port);
    }
    *out = s; /* the daemon owns fd now: MHD_stop_daemon closes it, unless quiesced (http_server_quiesce) */
    return 0;
}

/* New connections are refused from here on, while requests in flight finish. MHD_quiesce_daemon hands the listening
 * socket back, but a thread-pool worker may still be taking it out of its own epoll set: closing it now made that
 * epoll_ctl fail with EBADF, which libmicrohttpd treats as fatal (abort at SIGTERM under load, seen in CI). So it is
 * only shut down here, which stops the listening on Linux, and closed once the daemon has stopped. */
void http_server_quiesce(http_server *s) {
    if (!s || s->quiesced) return;
    s->listen_fd = MHD_quiesce_daemon(s->d);
    if (s->listen_fd != MHD_INVALID_SOCKET) shutdown(s->listen_fd, SHUT_RDWR);
    s->quiesced = 1;
}

int http_server_inflight(http_server *s) { return s ? atomic_load(&s->inflight) : 0; }

void http_server_stop(http_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    if (s->quiesced && s->listen_fd != MHD_INVALID_SOCKET) close(s->listen_fd);
    free(s);
}
