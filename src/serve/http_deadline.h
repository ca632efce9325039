/* Whole-request read deadlines of an HTTP listener: a request's line and headers must arrive within header_s of
 * its start, and its body within body_s of the headers' end. libmicrohttpd has only a silence timeout, reset by
 * every byte, so a client trickling a byte now and then held its connection for ever; this is the clock it lacks.
 *
 * One watcher thread per listener wakes every HTTP_DEADLINE_TICK_MS and shuts down (shutdown(2), both directions)
 * the socket of each connection past its deadline: libmicrohttpd's epoll loop then sees the end of the stream and
 * closes the connection on its own thread, as for any client that left. The client gets no answer (libmicrohttpd
 * can only answer once the headers, or the whole body, are in), just the connection closed. Each cut is logged with
 * its reason, one line a second at most per reason (a count and the first peer's address).
 *
 * When a request starts: the first request's clock starts when the connection is accepted. On a kept-alive
 * connection the next request's clock starts with its first byte, which the watcher sees from the kernel's
 * TCP_INFO (the time of the last data received, newer than the end of the previous answer): the silence before it
 * is the idle timeout's business, not this one's.
 *
 * Threads and ownership: the per-connection clocks are owned by the registry (http_deadline_open .. _close, called
 * by libmicrohttpd's connection notifications on its threads); the phase changes come from the request handler's
 * thread; the watcher reads them. A clock's phase and deadline are one atomic word, so a phase change and a cut
 * never both win: a handler that finds its clock cut drops the request. The socket is shut down under the registry
 * lock, and a connection is removed under it before libmicrohttpd closes the descriptor, so the watcher never
 * touches a descriptor that has been closed (and perhaps reused). */
#ifndef SERVE_HTTP_DEADLINE_H
#define SERVE_HTTP_DEADLINE_H

#include "serve_error.h"

#define HTTP_DEADLINE_TICK_MS 250 /* how often the watcher looks: a cut comes at most this late */

typedef struct http_deadlines http_deadlines;
typedef struct http_clock http_clock;

/* Starts the watcher of one listener; `what` names it in the log ("HTTP", "metrics"). header_s / body_s = 0 turn
 * that deadline off; with both 0 no thread is started, *out is NULL and every call below is a no-op. */
int http_deadlines_start(const char *what, unsigned header_s, unsigned body_s, http_deadlines **out, serve_error *e);
/* Stops the watcher and frees. Call after every connection was closed (http_deadline_close). NULL is a no-op. */
void http_deadlines_stop(http_deadlines *d);

/* A connection was accepted on socket fd: its first request's header clock starts now. NULL when d is NULL or
 * memory is short (then the connection has no deadline, only the idle timeout). */
http_clock *http_deadline_open(http_deadlines *d, int fd);
/* The connection is closing (before its descriptor is closed): the clock is forgotten and freed. NULL is a no-op. */
void http_deadline_close(http_deadlines *d, http_clock *c);

/* The request's headers are complete; body_follows: a body is to be read (its clock starts now). Returns -1 when
 * the clock was cut already (the connection is being closed: drop the request), else 0. NULL returns 0. */
int http_deadline_headers_done(http_deadlines *d, http_clock *c, int body_follows);
/* The body is complete: no deadline while the request is computed and answered. */
void http_deadline_body_done(http_clock *c);
/* The request is finished and the connection may be kept alive: the next request's clock starts with its first
 * byte. */
void http_deadline_request_done(http_clock *c);
/* Nonzero once the watcher cut the connection. */
int http_deadline_cut(const http_clock *c);

#endif
