/* Whole-request read deadlines of an HTTP listener (http_deadline.h): a registry of connection clocks and the
 * watcher thread that cuts those past their deadline. */
#include "http_deadline.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"

/* A clock's state word: (time in ms << 3) | phase. The time is the deadline in the reading phases (0 = none) and
 * when the connection went idle in PHASE_IDLE. */
enum { PHASE_HEADERS, PHASE_BODY, PHASE_BUSY, PHASE_IDLE, PHASE_CUT };
#define PHASE_BITS 3
#define PHASE_MASK 7u

/* Data received this long after a kept-alive connection went idle starts the next request's clock; closer to it, it
 * may be the end of the previous request seen through the kernel's coarse clock (TCP_INFO counts in jiffies). A
 * request that really began then is either complete before long or keeps trickling, and a later byte starts it. */
#define IDLE_DATA_MARGIN_MS 100

enum { CUT_HEADERS, CUT_BODY, CUT_REASONS };

struct http_clock {
    _Atomic uint64_t state;
    int fd;
    http_clock *prev, *next; /* the registry's list, under its lock */
};

struct http_deadlines {
    const char *what;
    long long header_ms, body_ms; /* 0 = off */
    pthread_mutex_t lock;         /* the list, stopping, and the log counts */
    pthread_cond_t wake;
    http_clock *head;
    int stopping;
    pthread_t thread;
    /* cuts not yet logged, per reason: how many, the first one's peer, and when that reason was last logged */
    int cut_count[CUT_REASONS];
    char cut_peer[CUT_REASONS][64];
    long long cut_logged_ms[CUT_REASONS];
};

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint64_t pack(long long ms, unsigned phase) { return (uint64_t)ms << PHASE_BITS | phase; }
static unsigned phase_of(uint64_t st) { return (unsigned)(st & PHASE_MASK); }
static long long time_of(uint64_t st) { return (long long)(st >> PHASE_BITS); }

/* "address:port" of the socket's peer, or "an unknown address". */
static void peer_name(int fd, char *out, size_t n) {
    struct sockaddr_storage a = {.ss_family = AF_UNSPEC};
    socklen_t len = sizeof a;
    char host[INET6_ADDRSTRLEN];
    if (getpeername(fd, (struct sockaddr *)&a, &len) != 0) a.ss_family = AF_UNSPEC;
    if (a.ss_family == AF_INET && inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, sizeof host))
        snprintf(out, n, "%s:%u", host, ntohs(((struct sockaddr_in *)&a)->sin_port));
    else if (a.ss_family == AF_INET6 && inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, sizeof host))
        snprintf(out, n, "[%s]:%u", host, ntohs(((struct sockaddr_in6 *)&a)->sin6_port));
    else
        snprintf(out, n, "an unknown address");
}

/* When the kernel last received data on the socket (monotonic ms), or -1 when it cannot say. */
static long long last_data_at(int fd, long long now) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return -1;
    return now - (long long)ti.tcpi_last_data_recv;
}

static void log_cuts(http_deadlines *d, long long now, int force) {
    for (int r = 0; r < CUT_REASONS; r++) {
        if (!d->cut_count[r] || (!force && now - d->cut_logged_ms[r] < 1000)) continue;
        int n = d->cut_count[r];
        if (r == CUT_HEADERS)
            log_warn("%s: closed %d connection%s (the first from %s) whose request line and headers did not arrive "
                     "within %lld s of the request's start (--http-header-timeout)", d->what, n, n == 1 ? "" : "s",
                     d->cut_peer[r], d->header_ms / 1000);
        else
            log_warn("%s: closed %d connection%s (the first from %s) whose request body did not arrive within %lld s of "
                     "its headers (--http-body-timeout)", d->what, n, n == 1 ? "" : "s", d->cut_peer[r],
                     d->body_ms / 1000);
        d->cut_count[r] = 0;
        d->cut_logged_ms[r] = now;
    }
}

/* One clock at one tick, under the lock. */
static void check(http_deadlines *d, http_clock *c, long long now) {
    uint64_t st = atomic_load(&c->state);
    unsigned phase = phase_of(st);
    long long t = time_of(st);
    if (phase == PHASE_IDLE) {
        if (!d->header_ms) return;
        long long at = last_data_at(c->fd, now);
        if (at > t + IDLE_DATA_MARGIN_MS) atomic_compare_exchange_strong(&c->state, &st, pack(at + d->header_ms, PHASE_HEADERS));
        return;
    }
    if ((phase != PHASE_HEADERS && phase != PHASE_BODY) || !t || now < t) return;
    if (!atomic_compare_exchange_strong(&c->state, &st, pack(0, PHASE_CUT))) return; /* the request moved on */
    int r = phase == PHASE_HEADERS ? CUT_HEADERS : CUT_BODY;
    if (!d->cut_count[r]++) peer_name(c->fd, d->cut_peer[r], sizeof d->cut_peer[r]); /* while it is connected */
    shutdown(c->fd, SHUT_RDWR); /* libmicrohttpd's loop sees the end of the stream and closes the connection */
}

static void *watch(void *arg) {
    http_deadlines *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += HTTP_DEADLINE_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&d->wake, &d->lock, &until);
        if (d->stopping) break;
        long long now = now_ms();
        for (http_clock *c = d->head; c; c = c->next) check(d, c, now);
        log_cuts(d, now, 0);
    }
    log_cuts(d, now_ms(), 1);
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

int http_deadlines_start(const char *what, unsigned header_s, unsigned body_s, http_deadlines **out, serve_error *e) {
    *out = NULL;
    if (!header_s && !body_s) return 0;
    http_deadlines *d = calloc(1, sizeof *d);
    if (!d) return serve_fail(e, 500, "out of memory");
    d->what = what ? what : "HTTP";
    d->header_ms = (long long)header_s * 1000;
    d->body_ms = (long long)body_s * 1000;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&d->lock, NULL);
    if (pthread_create(&d->thread, NULL, watch, d) != 0) {
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->lock);
        free(d);
        return serve_fail(e, 500, "cannot start the %s request deadline thread", what ? what : "HTTP");
    }
    *out = d;
    return 0;
}

void http_deadlines_stop(http_deadlines *d) {
    if (!d) return;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    for (http_clock *c = d->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

http_clock *http_deadline_open(http_deadlines *d, int fd) {
    if (!d) return NULL;
    http_clock *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    atomic_init(&c->state, pack(d->header_ms ? now_ms() + d->header_ms : 0, PHASE_HEADERS));
    pthread_mutex_lock(&d->lock);
    c->next = d->head;
    if (d->head) d->head->prev = c;
    d->head = c;
    pthread_mutex_unlock(&d->lock);
    return c;
}

void http_deadline_close(http_deadlines *d, http_clock *c) {
    if (!d || !c) return;
    pthread_mutex_lock(&d->lock);
    if (c->prev) c->prev->next = c->next;
    else d->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&d->lock);
    free(c);
}

int http_deadline_headers_done(http_deadlines *d, http_clock *c, int body_follows) {
    if (!d || !c) return 0;
    uint64_t want = body_follows && d->body_ms ? pack(now_ms() + d->body_ms, PHASE_BODY) : pack(0, PHASE_BUSY);
    uint64_t st = atomic_load(&c->state);
    do {
        if (phase_of(st) == PHASE_CUT) return -1;
    } while (!atomic_compare_exchange_weak(&c->state, &st, want));
    return 0;
}

/* Moves a clock that is not cut to `want`. */
static void move_to(http_clock *c, uint64_t want) {
    if (!c) return;
    uint64_t st = atomic_load(&c->state);
    while (phase_of(st) != PHASE_CUT && !atomic_compare_exchange_weak(&c->state, &st, want)) {}
}

void http_deadline_body_done(http_clock *c) { move_to(c, pack(0, PHASE_BUSY)); }

void http_deadline_request_done(http_clock *c) { move_to(c, pack(now_ms(), PHASE_IDLE)); }

int http_deadline_cut(const http_clock *c) { return c && phase_of(atomic_load(&c->state)) == PHASE_CUT; }
