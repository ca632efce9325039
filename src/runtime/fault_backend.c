/* Test-only fault points (see fault_backend.h): a backend that forwards every call to the one it wraps, except that
 * allocations and copies first ask the rule in CINFER_FAULT_ALLOC / CINFER_FAULT_COPY whether to fail.
 *
 * Design: the wrapper owns its own copy of the inner interface table, with a shim in every slot the inner backend
 * fills (optional slots stay NULL, so the session sees the same shape of backend). Arming state (the rule text last
 * seen and the count of matching points since) is process-wide per variable, under one mutex: points are rare
 * (allocations once per plan, a few copies per run). Each wrapper also tracks the blocks it handed out, so an
 * injected failure reports the memory the session holds at that moment and freeing the session reports anything
 * never released: tests compare the two to show a failed plan gives back what it took. */
#include "runtime/fault_backend.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"

enum { POINT_ALLOC, POINT_COPY, NUM_POINTS };
enum { DIR_ANY, DIR_H2D, DIR_D2H, DIR_D2D };

static const char *const point_env[NUM_POINTS] = {FAULT_ENV_ALLOC, FAULT_ENV_COPY};

typedef struct arming {
    char text[512];          /* the rule as last read */
    struct timespec mtime;   /* of its file, when it came from one */
    unsigned long long seen; /* matching points since it was armed */
} arming;

static pthread_mutex_t arm_lock = PTHREAD_MUTEX_INITIALIZER;
static arming arms[NUM_POINTS];

typedef struct block {
    void *ptr;
    size_t bytes;
} block;

typedef struct fault_ctx {
    struct backend_i iface; /* the inner table with shims in its filled slots */
    backend *inner;
    const graph *graph;
    bool fake_device;       /* a host backend shown to the session as a device (copy points on a CPU) */
    pthread_mutex_t lock;   /* blocks: a session's calls are serialised, but be safe */
    block *blocks;
    size_t num_blocks, cap_blocks;
    unsigned long long allocs, releases;
} fault_ctx;

static fault_ctx *ctx_of(const backend *b) { return b->context; }
static backend *inner_of(const backend *b) { return ctx_of(b)->inner; }

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0];
}

/* The rule text of point kind k (empty when off or its file cannot be read); *mtime the file's time, if any. */
static void read_rule(int k, char *buf, size_t n, struct timespec *mtime) {
    const char *v = getenv(point_env[k]);
    buf[0] = 0;
    memset(mtime, 0, sizeof *mtime);
    if (!v || !v[0]) return;
    if (v[0] != '@') {
        snprintf(buf, n, "%s", v);
        return;
    }
    struct stat st;
    if (stat(v + 1, &st) == 0) *mtime = st.st_mtim;
    FILE *f = fopen(v + 1, "rb");
    if (!f) return;
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = 0;
    fclose(f);
    while (got && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ')) buf[--got] = 0;
}

/* Does this point (kind k, of `bytes`, copy direction dir) fail? When it does, the reason is in why. */
static bool point_fails(const backend *b, int k, size_t bytes, int dir, char *why, size_t why_len) {
    char text[512];
    struct timespec mtime;
    read_rule(k, text, sizeof text, &mtime);
    if (!text[0]) return false;
    unsigned long long nth = 0, min_bytes = 0;
    int want_dir = DIR_ANY;
    const char *want_graph = NULL;
    char parsed[sizeof text];
    snprintf(parsed, sizeof parsed, "%s", text);
    char *save = NULL;
    for (char *kv = strtok_r(parsed, ", \t\r\n", &save); kv; kv = strtok_r(NULL, ", \t\r\n", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = 0;
        const char *val = eq + 1;
        if (!strcmp(kv, "nth")) nth = strtoull(val, NULL, 10);
        else if (!strcmp(kv, "min_bytes")) min_bytes = strtoull(val, NULL, 10);
        else if (!strcmp(kv, "graph")) want_graph = val;
        else if (!strcmp(kv, "dir"))
            want_dir = !strcmp(val, "h2d") ? DIR_H2D : !strcmp(val, "d2h") ? DIR_D2H : !strcmp(val, "d2d") ? DIR_D2D : -1;
    }
    const char *gname = ctx_of(b)->graph && ctx_of(b)->graph->name ? ctx_of(b)->graph->name : "";
    pthread_mutex_lock(&arm_lock);
    arming *a = &arms[k];
    if (strcmp(a->text, text) != 0 || a->mtime.tv_sec != mtime.tv_sec || a->mtime.tv_nsec != mtime.tv_nsec) {
        snprintf(a->text, sizeof a->text, "%s", text); /* (re-)armed: count from here */
        a->mtime = mtime;
        a->seen = 0;
    }
    bool match = (!want_graph || !strcmp(want_graph, gname)) && bytes >= min_bytes &&
                 (want_dir == DIR_ANY || want_dir == dir);
    unsigned long long number = match ? ++a->seen : 0;
    pthread_mutex_unlock(&arm_lock);
    if (!match || (nth && number != nth)) return false;
    fault_ctx *c = ctx_of(b);
    pthread_mutex_lock(&c->lock);
    size_t held = 0, nb = c->num_blocks;
    for (size_t i = 0; i < c->num_blocks; i++) held += c->blocks[i].bytes;
    pthread_mutex_unlock(&c->lock);
    const char *what = k == POINT_ALLOC ? "allocation"
                       : dir == DIR_H2D ? "host-to-device copy"
                       : dir == DIR_D2H ? "device-to-host copy"
                                        : "device-to-device copy";
    snprintf(why, why_len, "injected %s failure: %s #%llu of %zu bytes on %s%s for graph '%s' (%s=%s); the session held "
             "%zu backend blocks, %zu bytes, before it", k == POINT_ALLOC ? "allocation" : "copy", what, number, bytes,
             c->inner->iface->name, c->fake_device ? " (as a device)" : "", gname, point_env[k], text, nb, held);
    fprintf(stderr, "cinfer: fault injection: %s\n", why);
    return true;
}

/* ---- shims ---- */

static void fault_free(backend *b) {
    fault_ctx *c = ctx_of(b);
    size_t held = 0;
    for (size_t i = 0; i < c->num_blocks; i++) held += c->blocks[i].bytes;
    fprintf(stderr, "cinfer: fault injection: backend %s of graph '%s' freed: %llu allocations, %llu releases, %zu blocks "
            "(%zu bytes) never released\n", c->inner->iface->name, c->graph && c->graph->name ? c->graph->name : "",
            c->allocs, c->releases, c->num_blocks, held);
    c->inner->iface->free(c->inner);
    pthread_mutex_destroy(&c->lock);
    free(c->blocks);
    free(c);
    free(b);
}

static bool fault_supports_op(const backend *b, const graph_node *n) {
    return inner_of(b)->iface->supports_op(inner_of(b), n);
}

static cinfer_status fault_alloc(backend *b, size_t bytes, void **out) {
    char why[1024];
    *out = NULL;
    if (point_fails(b, POINT_ALLOC, bytes, DIR_ANY, why, sizeof why)) return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s", why);
    fault_ctx *c = ctx_of(b);
    pthread_mutex_lock(&c->lock);
    if (c->num_blocks == c->cap_blocks) {
        size_t cap = c->cap_blocks ? c->cap_blocks * 2 : 16;
        block *grown = realloc(c->blocks, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&c->lock);
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "fault injection: out of memory tracking blocks");
        }
        c->blocks = grown;
        c->cap_blocks = cap;
    }
    cinfer_status st = c->inner->iface->alloc(c->inner, bytes, out);
    if (st == CINFER_OK) {
        c->blocks[c->num_blocks++] = (block){*out, bytes};
        c->allocs++;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

static void fault_release(backend *b, void *ptr) {
    fault_ctx *c = ctx_of(b);
    if (ptr) {
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->num_blocks; i++)
            if (c->blocks[i].ptr == ptr) {
                c->blocks[i] = c->blocks[--c->num_blocks];
                c->releases++;
                break;
            }
        pthread_mutex_unlock(&c->lock);
    }
    c->inner->iface->release(c->inner, ptr);
}

static cinfer_status fault_copy_to_device(backend *b, void *dst, const void *src, size_t bytes) {
    char why[1024];
    if (point_fails(b, POINT_COPY, bytes, DIR_H2D, why, sizeof why)) return core_error(CINFER_ERR_RUNTIME, "%s", why);
    return inner_of(b)->iface->copy_to_device(inner_of(b), dst, src, bytes);
}

static cinfer_status fault_copy_to_host(backend *b, void *dst, const void *src, size_t bytes) {
    char why[1024];
    if (point_fails(b, POINT_COPY, bytes, DIR_D2H, why, sizeof why)) return core_error(CINFER_ERR_RUNTIME, "%s", why);
    return inner_of(b)->iface->copy_to_host(inner_of(b), dst, src, bytes);
}

static cinfer_status fault_copy_on_device(backend *b, void *dst, const void *src, size_t bytes) {
    char why[1024];
    if (point_fails(b, POINT_COPY, bytes, DIR_D2D, why, sizeof why)) return core_error(CINFER_ERR_RUNTIME, "%s", why);
    return inner_of(b)->iface->copy_on_device(inner_of(b), dst, src, bytes);
}

/* Overlapped copies are copy points too; a host backend shown as a device copies by memcpy and calls all its
 * memory page-locked, so chunked copies run (and fail where asked) on a CPU. */
static cinfer_status fault_copy_overlapped(backend *b, void *dst, const void *src, size_t bytes, bool to_device) {
    char why[1024];
    if (point_fails(b, POINT_COPY, bytes, to_device ? DIR_H2D : DIR_D2H, why, sizeof why))
        return core_error(CINFER_ERR_RUNTIME, "%s", why);
    backend *in = inner_of(b);
    if (in->iface->copy_overlapped) return in->iface->copy_overlapped(in, dst, src, bytes, to_device);
    if (bytes) memcpy(dst, src, bytes);
    return CINFER_OK;
}

static bool fault_host_pinned(backend *b, const void *p, size_t bytes) {
    backend *in = inner_of(b);
    return in->iface->host_pinned ? in->iface->host_pinned(in, p, bytes) : ctx_of(b)->fake_device;
}

static cinfer_status fault_join_stream(backend *b, void *stream, bool session_waits) {
    return inner_of(b)->iface->join_stream(inner_of(b), stream, session_waits);
}

static cinfer_status fault_run_node(backend *b, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return inner_of(b)->iface->run_node(inner_of(b), n, in, num_in, out, num_out);
}

static cinfer_status fault_synchronize(backend *b) {
    backend *in = inner_of(b);
    return in->iface->synchronize ? in->iface->synchronize(in) : CINFER_OK;
}

static cinfer_status fault_begin_run(backend *b, const char *label) {
    return inner_of(b)->iface->begin_run(inner_of(b), label);
}

static void fault_end_run(backend *b) { inner_of(b)->iface->end_run(inner_of(b)); }

/* A host backend shown as a device: its "device copy" of a constant is the graph's own host data. */
static void *fault_constant_data(backend *b, int v) {
    fault_ctx *c = ctx_of(b);
    if (c->inner->iface->constant_data) return c->inner->iface->constant_data(c->inner, v);
    return c->graph->values[v].constant.data;
}

static cinfer_status fault_device_memory(backend *b, size_t *capacity, size_t *in_use) {
    return inner_of(b)->iface->device_memory(inner_of(b), capacity, in_use);
}

static void fault_last_run_stats(const backend *b, cinfer_run_stats *out) {
    inner_of(b)->iface->last_run_stats(inner_of(b), out);
}

static cinfer_status fault_timeline_enable(backend *b) { return inner_of(b)->iface->timeline_enable(inner_of(b)); }

static cinfer_status fault_timeline_read(backend *b, cinfer_span *spans, size_t capacity, size_t *count) {
    return inner_of(b)->iface->timeline_read(inner_of(b), spans, capacity, count);
}

void fault_backend_wrap(backend **b, const graph *g) {
    const char *gate = getenv(FAULT_ENV_GATE);
    if (!gate || strcmp(gate, "1") != 0 || !b || !*b) return;
    bool alloc_on = env_on(FAULT_ENV_ALLOC), copy_on = env_on(FAULT_ENV_COPY);
    if (!alloc_on && !copy_on) return;
    backend *inner = *b, *w = calloc(1, sizeof *w);
    fault_ctx *c = calloc(1, sizeof *c);
    if (!w || !c) {
        free(w);
        free(c);
        fprintf(stderr, "cinfer: fault injection: out of memory for the wrapper; this session has no fault points\n");
        return;
    }
    const struct backend_i *ii = inner->iface;
    c->inner = inner;
    c->graph = g;
    c->fake_device = copy_on && ii->host_memory;
    pthread_mutex_init(&c->lock, NULL);
    /* every slot set here, none copied: a slot added to backend_i needs its shim (a copied one would get the
     * wrapper's context); until then it stays NULL, which optional slots mean "not supported" */
    memset(&c->iface, 0, sizeof c->iface);
    c->iface.name = ii->name;
    c->iface.free = fault_free;
    c->iface.supports_op = fault_supports_op;
    c->iface.alloc = fault_alloc;
    c->iface.release = fault_release;
    c->iface.copy_to_device = fault_copy_to_device;
    c->iface.copy_to_host = fault_copy_to_host;
    c->iface.copy_on_device = ii->copy_on_device ? fault_copy_on_device : NULL;
    c->iface.join_stream = ii->join_stream ? fault_join_stream : NULL;
    c->iface.copy_overlapped = ii->copy_overlapped || c->fake_device ? fault_copy_overlapped : NULL;
    c->iface.host_pinned = ii->host_pinned || c->fake_device ? fault_host_pinned : NULL;
    c->iface.run_node = fault_run_node;
    c->iface.synchronize = ii->synchronize || c->fake_device ? fault_synchronize : NULL;
    c->iface.begin_run = ii->begin_run ? fault_begin_run : NULL;
    c->iface.end_run = ii->end_run ? fault_end_run : NULL;
    c->iface.constant_data = ii->constant_data || c->fake_device ? fault_constant_data : NULL;
    c->iface.device_memory = ii->device_memory ? fault_device_memory : NULL;
    c->iface.last_run_stats = ii->last_run_stats ? fault_last_run_stats : NULL;
    c->iface.timeline_enable = ii->timeline_enable ? fault_timeline_enable : NULL;
    c->iface.timeline_read = ii->timeline_read ? fault_timeline_read : NULL;
    c->iface.host_memory = ii->host_memory && !c->fake_device;
    w->iface = &c->iface;
    w->context = c;
    *b = w;
    fprintf(stderr, "cinfer: fault injection: %s backend of graph '%s' wrapped (%s=%s, %s=%s)%s\n", ii->name,
            g && g->name ? g->name : "", FAULT_ENV_ALLOC, alloc_on ? getenv(FAULT_ENV_ALLOC) : "",
            FAULT_ENV_COPY, copy_on ? getenv(FAULT_ENV_COPY) : "",
            c->fake_device ? "; the host backend runs as a device (copies by memcpy)" : "");
}
