/* libmicrohttpd glue. MHD runs an internal epoll thread pool with suspend/resume enabled. Each request gets an
 * http_request on its first callback, when its headers are complete: there the framing is checked (RFC 9112 §6.3:
 * one Content-Length, or Transfer-Encoding chunked alone), the path decoded (no NUL, at most HTTP_MAX_PATH), and a
 * too large declared body refused; such an answer is queued at once, so MHD reads no body and closes the connection
 * after it. Body chunks are then appended (a chunked body past max_body is read and discarded so the client gets
 * its 413); the final callback decodes Content-Encoding and calls the route handler. A suspended request is
 * re-entered after MHD_resume_connection, when the finisher builds the response. The completion callback frees the
 * request and decrements the in-flight count. Connections are counted (MHD_OPTION_NOTIFY_CONNECTION) and refused
 * past max_connections by the accept policy; idle ones time out after idle_timeout_s (suspended ones never do), and
 * a request's headers and body must arrive within their deadlines (http_deadline.h: each connection's clock is
 * opened and closed by the connection notifications, and moved on by the request callbacks). */
#include "http_server.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "http_deadline.h"
#include "listen_socket.h"
#include "log.h"

struct http_server {
    struct MHD_Daemon *d;
    http_options opt;
    http_deadlines *deadlines; /* NULL when --http-header-timeout and --http-body-timeout are both off */
    _Atomic int inflight;
    _Atomic int connections;       /* open connections (MHD_OPTION_NOTIFY_CONNECTION) */
    _Atomic long long refused_log_s; /* when a refusal past max_connections was last logged (one line a second) */
    _Atomic long long ip_refused_log_s; /* the same for max_connections_per_ip */
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
    http_clock *clock;            /* the connection's deadline clock (NULL: none) */
    char *buf;
    size_t len, cap;
    size_t expect;                /* Content-Length (0 when absent): the body buffer grows to it and no further */
    size_t received;              /* body bytes seen so far (kept or not) */
    size_t full_chunk;            /* the largest body chunk so far, taken for a full read (peer_probe_due) */
    long long probed_ms;          /* when peer_closed last looked at the client's end (monotonic ms) */
    char *inflated;
    int too_large;
    char *path;                   /* the decoded path r->url points to */
    int denied;                   /* the authorizer refused the request: answer deny, read and drop the body */
    serve_error deny;
    const char *challenge;        /* WWW-Authenticate value of a 401 (static string) */
    int closing;                  /* the response ends the connection (Connection: close) */
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

/* recv's answer to a one-byte peek at the connection's socket without waiting: 0 once the client closed its end,
 * -1 with errno EAGAIN while it is open and quiet; 1 when there is no socket to ask. */
static ssize_t peek_peer(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
}

int http_request_client_gone(http_request *r) { return peek_peer(r->priv->conn) == 0; }

/* The client closed its end (or its socket failed). libmicrohttpd's epoll loop is edge-triggered and takes a short
 * read as "drained", so a close that arrived together with the headers (or a part of the body) raises no new event
 * and is never read: the connection then waited for the rest of the body forever. Probed while a body is still due
 * (at chunks peer_probe_due picks). */
static int peer_closed(struct MHD_Connection *conn) {
    ssize_t n = peek_peer(conn);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* While a body streams in full reads, the client's end is looked at this often at most. */
#define HTTP_PEER_PROBE_MS 100

/* Whether a body chunk calls for peer_closed, a system call that each chunk of a large body used to pay. A close
 * that came with the body's last bytes is missed only after a short read: libmicrohttpd clears a connection's
 * read-ready state when a read comes back short, while after a full one it reads again and meets the close itself.
 * A chunk as large as the largest so far is taken for a full read (the read buffer's size) and probed once every
 * HTTP_PEER_PROBE_MS at most; any other is probed. That period also covers a client writing equal pieces that never
 * fill the buffer: a close right after one is seen at its next probe-due chunk or, when none comes, by the idle
 * timeout or the body deadline. */
static int peer_probe_due(struct http_private *p, size_t chunk) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    long long now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    int full = chunk == p->full_chunk;
    if (chunk > p->full_chunk) p->full_chunk = chunk;
    if (full && now_ms - p->probed_ms < HTTP_PEER_PROBE_MS) return 0;
    p->probed_ms = now_ms;
    return 1;
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
    if (p->closing) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(p->conn, (unsigned)p->status, resp);
    MHD_destroy_response(resp);
    p->state = REQ_ANSWERED;
    return ret;
}

/* Connection: close on a response that ends the connection (a framing error, a refused body): MHD closes after it
 * anyway once it answered before reading the body, and the header tells the client so. */
static enum MHD_Result send_closing_error(http_request *r, int status, const char *fmt, const char *arg) {
    serve_error e = {0};
    serve_fail(&e, status, fmt, arg);
    http_respond_error(r, &e);
    r->priv->closing = 1;
    return send_response(r);
}

/* RFC 9112 §6.3 framing, from every header line (MHD_lookup_connection_value sees only the first of each name). */
typedef struct framing {
    int content_lengths, transfer_encodings;
    const char *content_length, *transfer_encoding;
    int lengths_differ;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!value) value = "";
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (f->content_lengths++ && strcmp(value, f->content_length)) f->lengths_differ = 1;
        if (!f->content_length) f->content_length = value;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->transfer_encodings++;
        if (!f->transfer_encoding) f->transfer_encoding = value;
    }
    return MHD_YES;
}

/* Checks the framing of a request whose headers are complete; 0 when it is sound, else answers (and the connection
 * is closed after the answer: the end of this request, and so the start of a next one, is not known). */
static int refuse_bad_framing(http_request *r, enum MHD_Result *ret) {
    framing f = {0};
    MHD_get_connection_values(r->priv->conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.transfer_encodings && f.content_lengths) {
        *ret = send_closing_error(r, 400, "%s", "the request has both Transfer-Encoding and Content-Length (RFC 9112 "
                                              "6.3: ambiguous framing)");
        return -1;
    }
    if (f.transfer_encodings > 1 || (f.transfer_encodings && strcasecmp(f.transfer_encoding, "chunked"))) {
        *ret = send_closing_error(r, 501, "Transfer-Encoding '%s' is not supported (only a single 'chunked')",
                                  f.transfer_encodings > 1 ? "(several headers)" : f.transfer_encoding);
        return -1;
    }
    if (f.lengths_differ) {
        *ret = send_closing_error(r, 400, "%s", "the request has Content-Length headers with different values (RFC 9112 "
                                              "6.3: ambiguous framing)");
        return -1;
    }
    return 0;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decodes the raw path (libmicrohttpd is told to leave it as received) into p->path; an encoded NUL or a
 * path longer than HTTP_MAX_PATH is refused, so the route is always decided on the whole path as sent. A '%' not
 * followed by two hex digits stays as it is (as libmicrohttpd's own decoding did). */
static int decode_path(http_request *r, const char *raw, enum MHD_Result *ret) {
    size_t n = strlen(raw);
    char *out = malloc(n + 1), *o = out;
    if (!out) {
        *ret = MHD_NO;
        return -1;
    }
    for (const char *s = raw; *s; s++) {
        int hi, lo;
        if (*s == '%' && (hi = hex_digit(s[1])) >= 0 && (lo = hex_digit(s[2])) >= 0) {
            *o = (char)(hi * 16 + lo);
            s += 2;
            if (!*o) {
                free(out);
                *ret = send_closing_error(r, 400, "the request path has an encoded NUL (%s): not a valid path", "%00");
                return -1;
            }
            o++;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
    r->priv->path = out;
    r->url = out;
    if ((size_t)(o - out) > HTTP_MAX_PATH) {
        char what[64];
        snprintf(what, sizeof what, "%zu bytes, more than %d", (size_t)(o - out), HTTP_MAX_PATH);
        *ret = send_closing_error(r, 414, "the request path is too long (%s)", what);
        return -1;
    }
    return 0;
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
        r->url = "";
        r->infer_header_len = -1;
        p->srv = s;
        p->conn = conn;
        p->resp_header_len = -1;
        atomic_fetch_add(&s->inflight, 1);
        *con_cls = r;
        const union MHD_ConnectionInfo *sc = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        p->clock = sc ? sc->socket_context : NULL;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long clen = cl ? strtoull(cl, NULL, 10) : 0;
        int body_follows = clen || MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        if (http_deadline_headers_done(s->deadlines, p->clock, body_follows) != 0) return MHD_NO; /* cut: closing */
        /* headers only so far: an answer queued here is sent without reading the body, and MHD closes after it */
        enum MHD_Result ret;
        if (decode_path(r, url, &ret) != 0 || refuse_bad_framing(r, &ret) != 0) return ret;
        if (s->opt.authorize && s->opt.authorize(s->opt.ctx, r, &p->challenge, &p->deny) != 0) p->denied = 1;
        if (clen > s->opt.max_body) { /* before any 100 Continue: an Expect: 100-continue client never sends it */
            if (p->denied) { /* the missing token is the answer, as for any refused request */
                http_respond_error(r, &p->deny);
                p->closing = 1;
                return send_response(r);
            }
            char what[96];
            snprintf(what, sizeof what, "%llu bytes exceeds the limit of %zu bytes", clen, s->opt.max_body);
            return send_closing_error(r, 413, "the request body of %s (--max-input-bytes)", what);
        }
        p->expect = (size_t)clen;
        /* The client may have closed after the headers (peer_closed). Not ended here: a body that came with the
         * headers sits in libmicrohttpd's buffer, unseen by the probe, and a client that sent it all and shut its
         * side down is owed its answer; so the connection gets a short timeout instead, and the next chunk (if
         * any) ends it at once when it leaves the body short. */
        if (clen && peer_closed(conn)) MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
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
        p->received += *upload_size;
        size_t chunk = *upload_size;
        *upload_size = 0;
        if (http_deadline_cut(p->clock)) return MHD_NO; /* past --http-body-timeout: the connection is being closed */
        if (p->received < p->expect && peer_probe_due(p, chunk) && peer_closed(conn))
            return MHD_NO; /* the rest will never come */
        return MHD_YES;
    }
    if (p->state == REQ_PENDING) {
        s->opt.finisher(s->opt.ctx, r);
        return send_response(r);
    }
    if (p->state == REQ_ANSWERED) return MHD_YES;
    http_deadline_body_done(p->clock);
    serve_error e = {0};
    if (p->denied) {
        http_respond_error(r, &p->deny);
        return send_response(r);
    }
    if (p->too_large) {
        serve_fail(&e, 413, "the request body exceeds the limit of %zu bytes (--max-input-bytes)", s->opt.max_body);
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
    http_deadline_request_done(r->priv->clock); /* the connection may be kept alive for a next request */
    if (r->pending_free) r->pending_free(r->pending);
    free(r->priv->buf);
    free(r->priv->inflated);
    free(r->priv->resp);
    free(r->priv->path);
    free((struct http_request_block *)r); /* r is the block's first member */
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

/* Nonzero at most once a second per *last (the monotonic second of the last yes): refusals under a flood of
 * connections are logged once a second, not once each. */
static int once_a_second(_Atomic long long *last_s) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long last = atomic_load(last_s);
    return now.tv_sec > last && atomic_compare_exchange_strong(last_s, &last, (long long)now.tv_sec);
}

#define MHD_LIMIT_MESSAGE "Server reached connection limit"

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    http_server *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    /* libmicrohttpd's own limit is set out of reach (accept_policy is the limit), so this one is the per-address
     * limit's refusal: once a second, named by its flag, instead of a line per refused connection */
    if (s->opt.max_connections_per_ip && !strncmp(msg, MHD_LIMIT_MESSAGE, strlen(MHD_LIMIT_MESSAGE))) {
        if (once_a_second(&s->ip_refused_log_s))
            log_warn("%s: %u connections from one address are open (--http-max-connections-per-ip): new ones from "
                     "it are closed at once", s->opt.what ? s->opt.what : "HTTP", s->opt.max_connections_per_ip);
        return;
    }
    log_warn("http: %s", msg);
}

/* The path is decoded by decode_path, which refuses an encoded NUL: libmicrohttpd's own decoding wrote the NUL in
 * place and the path silently ended there. Query arguments, which nothing reads, stay as received too. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s) {
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* Counts the connections and keeps each one's deadline clock in its socket context. libmicrohttpd notifies the
 * close before it closes the descriptor, so the clock leaves the watcher's registry while the descriptor is valid. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&s->connections, 1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? http_deadline_open(s->deadlines, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_deadline_close(s->deadlines, *socket_context);
        *socket_context = NULL;
        atomic_fetch_sub(&s->connections, 1);
    }
}

/* Past max_connections a new connection is closed at once (the client sees its connection closed before any
 * answer), so the others are served and the listening socket never stops being polled: at libmicrohttpd's own limit
 * it stopped accepting, and new clients then waited in the backlog unanswered. The count may pass the limit by a few
 * when several pool threads accept at the same moment. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    (void)addr;
    (void)addrlen;
    http_server *s = cls;
    if (!s->opt.max_connections || (unsigned)atomic_load(&s->connections) < s->opt.max_connections) return MHD_YES;
    if (once_a_second(&s->refused_log_s))
        log_warn("%s: %u connections are open (--http-max-connections): new connections are closed at once",
                 s->opt.what ? s->opt.what : "HTTP", s->opt.max_connections);
    return MHD_NO;
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
    if (http_deadlines_start(opt->what, opt->header_timeout_s, opt->body_timeout_s, &s->deadlines, e) != 0) {
        free(s);
        return -1;
    }
    if (listen_socket_open(opt->host, opt->port, opt->what ? opt->what : "HTTP", &fd, e) != 0) {
        http_deadlines_stop(s->deadlines);
        free(s);
        return -1;
    }
    /* a pool of one is no pool: then MHD runs one internal polling thread and must not be given a pool size */
    struct MHD_OptionItem pool[] = {{MHD_OPTION_THREAD_POOL_SIZE, opt->threads, NULL}, {MHD_OPTION_END, 0, NULL}};
    if (opt->threads < 2) pool[0].option = MHD_OPTION_END;
    /* the connection limit is ours (accept_policy); libmicrohttpd's, which it splits among the pool's threads, is set
     * where no thread reaches it */
    unsigned threads = opt->threads < 2 ? 1u : (unsigned)opt->threads;
    struct MHD_OptionItem limit[] = {{MHD_OPTION_CONNECTION_LIMIT, (intptr_t)(opt->max_connections * threads + threads),
                                      NULL}, {MHD_OPTION_END, 0, NULL}};
    if (!opt->max_connections) limit[0].option = MHD_OPTION_END;
    /* per client address: libmicrohttpd's count (one table for the whole pool), checked before accept_policy; an
     * IPv6 client is counted per full address */
    struct MHD_OptionItem per_ip[] = {{MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)opt->max_connections_per_ip, NULL},
                                      {MHD_OPTION_END, 0, NULL}};
    if (!opt->max_connections_per_ip) per_ip[0].option = MHD_OPTION_END;
    s->d = MHD_start_daemon(flags, (uint16_t)opt->port, accept_policy, s, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_ARRAY, pool, MHD_OPTION_ARRAY, limit,
                            MHD_OPTION_ARRAY, per_ip,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, opt->idle_timeout_s,
                            MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY, MHD_OPTION_END);
    if (!s->d) {
        /* not closed: libmicrohttpd may have closed it already on some failure paths, and closing a reused descriptor
         * would hit another file; the server does not start, so the process exits soon */
        http_deadlines_stop(s->deadlines);
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
    MHD_stop_daemon(s->d); /* closes every connection: their clocks are gone before the watcher stops */
    if (s->quiesced && s->listen_fd != MHD_INVALID_SOCKET) close(s->listen_fd);
    http_deadlines_stop(s->deadlines);
    free(s);
}
