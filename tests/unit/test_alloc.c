/* Unit tests for the caching allocator core, run on the CPU over a fake device with limits, failures and manual events. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/caching_allocator.h"
#include "core/status.h"
#include "test_util.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define FAKE_MAX_SEGS 4096
#define FAKE_MAX_EVENTS 4096

typedef struct {
    bool done;
    int stream;
} fake_event;

/* A "device" over host malloc: a byte capacity, injectable failures, and events the test completes by hand. */
typedef struct {
    size_t capacity, used;
    int fail_next;
    size_t n_mallocs;
    struct {
        void *ptr;
        size_t size;
    } segs[FAKE_MAX_SEGS];
    size_t n_segs;
    fake_event *events[FAKE_MAX_EVENTS];
    size_t n_events;
} fake_dev;

static cinfer_status fake_malloc(void *ctx, size_t bytes, void **ptr) {
    fake_dev *f = ctx;
    if (f->fail_next > 0) {
        f->fail_next--;
        return CINFER_ERR_OUT_OF_MEMORY;
    }
    if (bytes > f->capacity - f->used || f->n_segs == FAKE_MAX_SEGS) return CINFER_ERR_OUT_OF_MEMORY;
    void *p = malloc(bytes);
    if (!p) return CINFER_ERR_OUT_OF_MEMORY;
    f->segs[f->n_segs].ptr = p;
    f->segs[f->n_segs].size = bytes;
    f->n_segs++;
    f->used += bytes;
    f->n_mallocs++;
    *ptr = p;
    return CINFER_OK;
}

static void fake_free(void *ctx, void *ptr) {
    fake_dev *f = ctx;
    for (size_t i = 0; i < f->n_segs; i++) {
        if (f->segs[i].ptr == ptr) {
            f->used -= f->segs[i].size;
            f->segs[i] = f->segs[--f->n_segs];
            free(ptr);
            return;
        }
    }
    fprintf(stderr, "fake_free: unknown pointer %p\n", ptr);
    abort();
}

static cinfer_status fake_event_record(void *ctx, int stream, void **event) {
    fake_dev *f = ctx;
    if (f->n_events == FAKE_MAX_EVENTS) return CINFER_ERR_RUNTIME;
    fake_event *e = calloc(1, sizeof *e);
    if (!e) return CINFER_ERR_OUT_OF_MEMORY;
    e->stream = stream;
    f->events[f->n_events++] = e;
    *event = e;
    return CINFER_OK;
}

static bool fake_event_query(void *ctx, void *event) {
    (void)ctx;
    return ((fake_event *)event)->done;
}

static void fake_event_destroy(void *ctx, void *event) {
    fake_dev *f = ctx;
    for (size_t i = 0; i < f->n_events; i++) {
        if (f->events[i] == event) {
            f->events[i] = f->events[--f->n_events];
            free(event);
            return;
        }
    }
    abort();
}

/* Completes the events recorded on `stream` (-1: all). */
static void fake_complete(fake_dev *f, int stream) {
    for (size_t i = 0; i < f->n_events; i++)
        if (stream < 0 || f->events[i]->stream == stream) f->events[i]->done = true;
}

static cinfer_status fake_synchronize(void *ctx) {
    fake_complete(ctx, -1);
    return CINFER_OK;
}

static const struct alloc_device_i fake_iface = {
    .malloc = fake_malloc,
    .free = fake_free,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .event_destroy = fake_event_destroy,
    .synchronize = fake_synchronize,
    .total_bytes = 0,
};

static caching_allocator *make(fake_dev *f, size_t capacity) {
    memset(f, 0, sizeof *f);
    f->capacity = capacity;
    struct alloc_device_i d = fake_iface;
    d.total_bytes = capacity;
    caching_allocator *a = NULL;
    CHECK(alloc_create(&d, f, &a) == CINFER_OK);
    return a;
}

static struct alloc_stats stats(caching_allocator *a) {
    struct alloc_stats s;
    alloc_get_stats(a, &s);
    return s;
}

static void finish(caching_allocator *a, fake_dev *f) {
    alloc_destroy(a);
    CHECK(f->n_segs == 0);
    CHECK(f->used == 0);
    CHECK(f->n_events == 0);
}

static void test_rounding_and_pools(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    void *p1, *p2, *p3, *p4, *p5, *z = (void *)1;
    CHECK(alloc_malloc(a, 0, 0, &z) == CINFER_OK && z == NULL);
    CHECK(alloc_malloc(a, 1, 0, &p1) == CINFER_OK && p1);
    CHECK(stats(a).allocated_bytes == 512);
    CHECK(stats(a).reserved_bytes == 2 * MiB); /* small segment */
    CHECK(alloc_malloc(a, MiB, 0, &p2) == CINFER_OK);
    CHECK(stats(a).reserved_bytes == 2 * MiB); /* still fits the small segment */
    CHECK((char *)p2 == (char *)p1 + 512);
    CHECK(alloc_malloc(a, MiB + 1, 0, &p3) == CINFER_OK);
    CHECK(stats(a).allocated_bytes == 512 + MiB + MiB + 512);
    CHECK(stats(a).reserved_bytes == 22 * MiB); /* large request < 10 MiB -> 20 MiB segment */
    /* Other streams, so the 19 MiB tail of that segment cannot serve them. */
    CHECK(alloc_malloc(a, 11 * MiB, 1, &p4) == CINFER_OK);
    CHECK(stats(a).reserved_bytes == 34 * MiB); /* >= 10 MiB -> rounded to 2 MiB */
    CHECK(alloc_malloc(a, 10 * MiB + 1, 2, &p5) == CINFER_OK);
    CHECK(stats(a).reserved_bytes == 46 * MiB);
    CHECK(stats(a).num_device_mallocs == 4);
    CHECK(stats(a).active_blocks == 5);
    alloc_free(a, p1);
    alloc_free(a, p2);
    alloc_free(a, p3);
    alloc_free(a, p4);
    alloc_free(a, p5);
    alloc_free(a, NULL);
    CHECK(stats(a).allocated_bytes == 0 && stats(a).active_blocks == 0);
    finish(a, &f);
}

static void test_reuse(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    void *p, *q, *r, *s;
    CHECK(alloc_malloc(a, 4096, 0, &p) == CINFER_OK);
    CHECK(alloc_malloc(a, 5 * MiB, 0, &r) == CINFER_OK);
    size_t n = stats(a).num_device_mallocs;
    alloc_free(a, p);
    alloc_free(a, r);
    CHECK(alloc_malloc(a, 4000, 0, &q) == CINFER_OK);
    CHECK(q == p);
    CHECK(alloc_malloc(a, 5 * MiB, 0, &s) == CINFER_OK);
    CHECK(s == r);
    CHECK(stats(a).num_device_mallocs == n);
    CHECK(stats(a).reserved_bytes == 22 * MiB);
    alloc_free(a, q);
    alloc_free(a, s);
    finish(a, &f);
}

static void test_split_coalesce(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    /* Large pool: four 3 MiB blocks in one 20 MiB segment; the 8 MiB tail is too small for 9 MiB. */
    void *b[4], *big;
    for (int i = 0; i < 4; i++) CHECK(alloc_malloc(a, 3 * MiB, 0, &b[i]) == CINFER_OK);
    CHECK(stats(a).num_device_mallocs == 1);
    for (int i = 1; i < 4; i++) CHECK((char *)b[i] == (char *)b[i - 1] + 3 * MiB);
    alloc_free(a, b[1]); /* middle first, then both neighbours */
    CHECK(stats(a).inactive_split_bytes == 3 * MiB + 8 * MiB);
    alloc_free(a, b[0]);
    alloc_free(a, b[2]);
    CHECK(alloc_malloc(a, 9 * MiB, 0, &big) == CINFER_OK);
    CHECK(big == b[0]);
    CHECK(stats(a).num_device_mallocs == 1);
    alloc_free(a, big);
    alloc_free(a, b[3]);
    CHECK(stats(a).inactive_split_bytes == 0); /* everything merged back into one free segment */
    CHECK(stats(a).reserved_bytes == 20 * MiB);

    /* Small pool: 256 KiB blocks in a 2 MiB segment. */
    void *s[4], *m;
    for (int i = 0; i < 4; i++) CHECK(alloc_malloc(a, 256 * KiB, 0, &s[i]) == CINFER_OK);
    CHECK(stats(a).num_device_mallocs == 2);
    alloc_free(a, s[1]);
    alloc_free(a, s[2]);
    alloc_free(a, s[0]);
    CHECK(alloc_malloc(a, 768 * KiB, 0, &m) == CINFER_OK);
    CHECK(m == s[0]); /* best fit: the merged 768 KiB, not the 1 MiB tail */
    CHECK(stats(a).num_device_mallocs == 2);
    alloc_free(a, m);
    alloc_free(a, s[3]);
    finish(a, &f);
}

static void test_max_split(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    CHECK(alloc_set_max_split_size(a, 4 * MiB) == CINFER_OK);
    CHECK(alloc_get_max_split_size(a) == 4 * MiB);
    CHECK(alloc_set_max_split_size(a, 1000) == CINFER_ERR_INVALID_ARGUMENT);
    void *p, *q, *r, *t;
    CHECK(alloc_malloc(a, 12 * MiB, 0, &p) == CINFER_OK);
    alloc_free(a, p);
    size_t n = stats(a).num_device_mallocs;
    /* 2 MiB < max_split: must not take (or split) the cached 12 MiB block. */
    CHECK(alloc_malloc(a, 2 * MiB, 0, &q) == CINFER_OK);
    CHECK(q != p);
    CHECK(stats(a).num_device_mallocs == n + 1);
    /* 8 MiB >= max_split: reuses the 12 MiB block whole. */
    CHECK(alloc_malloc(a, 8 * MiB, 0, &r) == CINFER_OK);
    CHECK(r == p);
    CHECK(stats(a).num_device_mallocs == n + 1);
    CHECK(stats(a).allocated_bytes == 10 * MiB);
    /* Nothing split off the 12 MiB segment: its 4 MiB slack is not a free block. */
    CHECK(stats(a).inactive_split_bytes == 18 * MiB); /* only the tail of q's 20 MiB segment */
    alloc_free(a, r);
    alloc_free(a, q);
    alloc_destroy(a);

    /* Without max_split the same 12 MiB block is split for a 2 MiB request. */
    a = make(&f, 1024 * MiB);
    CHECK(alloc_malloc(a, 12 * MiB, 0, &p) == CINFER_OK);
    alloc_free(a, p);
    CHECK(alloc_malloc(a, 2 * MiB, 0, &t) == CINFER_OK);
    CHECK(t == p && stats(a).num_device_mallocs == 1);
    alloc_free(a, t);
    finish(a, &f);
}

static void test_stream_separation(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    void *p, *q, *r;
    CHECK(alloc_malloc(a, 4096, 1, &p) == CINFER_OK);
    alloc_free(a, p);
    CHECK(alloc_malloc(a, 4096, 2, &q) == CINFER_OK);
    CHECK(q != p);
    CHECK(stats(a).num_device_mallocs == 2);
    CHECK(alloc_malloc(a, 4096, 1, &r) == CINFER_OK);
    CHECK(r == p);
    alloc_free(a, q);
    alloc_free(a, r);
    finish(a, &f);
}

static void test_record_stream(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    void *p, *q, *r, *s;
    CHECK(alloc_malloc(a, 4096, 1, &p) == CINFER_OK);
    CHECK(alloc_record_stream(a, p, 2) == CINFER_OK);
    CHECK(alloc_record_stream(a, p, 2) == CINFER_OK); /* duplicate: one event */
    CHECK(alloc_record_stream(a, p, 1) == CINFER_OK); /* owner: no event */
    CHECK(alloc_record_stream(a, (char *)p + 1, 2) == CINFER_ERR_INVALID_ARGUMENT);
    alloc_free(a, p);
    CHECK(f.n_events == 1 && f.events[0]->stream == 2);
    CHECK(stats(a).allocated_bytes == 0);
    /* Stream 2 may still be using p: it must not be handed out. */
    CHECK(alloc_malloc(a, 4096, 1, &q) == CINFER_OK);
    CHECK(q != p);
    alloc_process_events(a);
    CHECK(alloc_malloc(a, 4096, 1, &r) == CINFER_OK);
    CHECK(r != p && r != q);
    alloc_free(a, r);
    fake_complete(&f, 2);
    CHECK(alloc_malloc(a, 4096, 1, &s) == CINFER_OK);
    CHECK(s == p); /* the event completed: p is back (checked on this malloc) */
    CHECK(f.n_events == 0);

    /* Two using streams: reusable only once both have completed; explicit processing. */
    CHECK(alloc_record_stream(a, s, 2) == CINFER_OK);
    CHECK(alloc_record_stream(a, s, 3) == CINFER_OK);
    alloc_free(a, s);
    CHECK(f.n_events == 2);
    fake_complete(&f, 3);
    alloc_process_events(a);
    CHECK(f.n_events == 1);
    CHECK(alloc_malloc(a, 4096, 1, &r) == CINFER_OK);
    CHECK(r != p);
    alloc_free(a, r);
    fake_complete(&f, 2);
    alloc_process_events(a);
    CHECK(f.n_events == 0);
    CHECK(alloc_malloc(a, 4096, 1, &r) == CINFER_OK);
    CHECK(r == p);
    alloc_free(a, r);
    alloc_free(a, q);

    /* Destroy with an event still pending releases it and the segment. */
    CHECK(alloc_malloc(a, 4096, 1, &r) == CINFER_OK);
    CHECK(alloc_record_stream(a, r, 5) == CINFER_OK);
    alloc_free(a, r);
    CHECK(f.n_events == 1);
    finish(a, &f);
}

static void test_oom_retry(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 40 * MiB);
    void *p, *q;
    CHECK(alloc_malloc(a, 5 * MiB, 0, &p) == CINFER_OK);
    alloc_free(a, p); /* cached 20 MiB segment */
    f.fail_next = 1;
    CHECK(alloc_malloc(a, 11 * MiB, 1, &q) == CINFER_OK); /* other stream: cache cannot serve it */
    struct alloc_stats s = stats(a);
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.num_device_frees == 1);
    CHECK(s.num_ooms == 0);
    CHECK(s.reserved_bytes == 12 * MiB);
    alloc_free(a, q);

    /* Pending events are waited for (synchronize) when memory runs out. */
    void *r, *t;
    CHECK(alloc_malloc(a, 30 * MiB, 0, &r) == CINFER_OK); /* 30 MiB segment; 12 MiB cached one freed */
    CHECK(alloc_record_stream(a, r, 2) == CINFER_OK);
    alloc_free(a, r);
    CHECK(alloc_malloc(a, 30 * MiB, 0, &t) == CINFER_OK);
    CHECK(t == r);
    CHECK(f.n_events == 0);
    alloc_free(a, t);
    finish(a, &f);
}

static void test_hard_oom(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 40 * MiB);
    void *p, *q = (void *)1;
    CHECK(alloc_malloc(a, 3 * MiB, 0, &p) == CINFER_OK);
    core_clear_error();
    CHECK(alloc_malloc(a, 50 * MiB, 0, &q) == CINFER_ERR_OUT_OF_MEMORY);
    CHECK(q == NULL);
    CHECK_ERROR_MENTIONS("52428800");
    CHECK_ERROR_MENTIONS("reserved");
    CHECK_ERROR_MENTIONS("stream 0");
    CHECK(stats(a).num_ooms == 1);
    CHECK(stats(a).num_alloc_retries == 1);
    CHECK(stats(a).allocated_bytes == 3 * MiB); /* p untouched */
    alloc_free(a, p);
    finish(a, &f);
}

static void test_limit(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 100 * MiB);
    void *p, *q;
    CHECK(alloc_set_limit(a, 30 * MiB) == CINFER_OK);
    CHECK(alloc_get_limit(a) == 30 * MiB);
    CHECK(alloc_malloc(a, 5 * MiB, 0, &p) == CINFER_OK);
    CHECK(alloc_malloc(a, 5 * MiB, 1, &q) == CINFER_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_MENTIONS("limit 31457280");
    CHECK(stats(a).reserved_bytes == 20 * MiB);
    CHECK(stats(a).num_ooms == 1);
    CHECK(alloc_set_limit_fraction(a, 0.5) == CINFER_OK);
    CHECK(alloc_get_limit(a) == 50 * MiB);
    CHECK(alloc_malloc(a, 5 * MiB, 1, &q) == CINFER_OK);
    CHECK(alloc_set_limit_fraction(a, 1.5) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK(alloc_set_limit_fraction(a, 0.0) == CINFER_OK && alloc_get_limit(a) == 0);
    alloc_free(a, p);
    alloc_free(a, q);
    finish(a, &f);
}

static void test_stats_and_empty_cache(void) {
    fake_dev f;
    caching_allocator *a = make(&f, 1024 * MiB);
    void *x, *y, *z, *w;
    CHECK(alloc_malloc(a, 1000, 0, &x) == CINFER_OK);
    CHECK(alloc_malloc(a, 3 * MiB, 0, &y) == CINFER_OK);
    CHECK(alloc_malloc(a, 100, 0, &z) == CINFER_OK);
    struct alloc_stats s = stats(a);
    CHECK(s.allocated_bytes == 1024 + 3 * MiB + 512);
    CHECK(s.reserved_bytes == 22 * MiB);
    CHECK(s.active_blocks == 3);
    CHECK(s.peak_allocated_bytes == s.allocated_bytes);
    CHECK(s.inactive_split_bytes == (2 * MiB - 1536) + 17 * MiB);
    alloc_free(a, y);
    s = stats(a);
    CHECK(s.allocated_bytes == 1536);
    CHECK(s.active_blocks == 2);
    CHECK(s.peak_allocated_bytes == 1536 + 3 * MiB);
    CHECK(s.peak_reserved_bytes == 22 * MiB);
    CHECK(s.inactive_split_bytes == 2 * MiB - 1536); /* the whole free large segment is cache, not fragmentation */
    alloc_reset_peak(a);
    CHECK(stats(a).peak_allocated_bytes == 1536);
    CHECK(stats(a).peak_reserved_bytes == 22 * MiB);
    /* A second wholly free segment on another stream, then empty_cache: both whole ones go, the used one stays. */
    CHECK(alloc_malloc(a, 64, 3, &w) == CINFER_OK);
    alloc_free(a, w);
    CHECK(stats(a).reserved_bytes == 24 * MiB);
    alloc_empty_cache(a);
    s = stats(a);
    CHECK(s.reserved_bytes == 2 * MiB);
    CHECK(s.num_device_frees == 2);
    CHECK(f.n_segs == 1);
    CHECK(s.allocated_bytes == 1536);
    memset(x, 0xab, 1000); /* still valid memory */
    alloc_reset_peak(a);
    CHECK(stats(a).peak_reserved_bytes == 2 * MiB);
    alloc_free(a, x);
    alloc_free(a, z);
    alloc_empty_cache(a);
    CHECK(stats(a).reserved_bytes == 0 && f.n_segs == 0);
    finish(a, &f);
}

/* Deterministic PRNG so failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct {
    char *ptr;
    size_t size;
    int stream;
} live_block;

/* `tight`: a small device plus injected failures, so the OOM ladder runs under churn too. */
static void test_stress(size_t capacity, bool tight) {
    fake_dev f;
    caching_allocator *a = make(&f, capacity);
    enum { MAX_LIVE = 96, OPS = 6000 };
    live_block live[MAX_LIVE];
    size_t n_live = 0, ooms = 0;
    int bad_overlap = 0, bad_stats = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rng();
        bool do_alloc = n_live == 0 || (n_live < MAX_LIVE && (r & 3) != 0 && (r & 3) != 1) || (r % 5 == 0 && n_live < MAX_LIVE);
        if (do_alloc) {
            size_t size;
            uint64_t k = rng() % 100;
            if (k < 60) size = 1 + rng() % (64 * KiB);
            else if (k < 85) size = 1 + rng() % (2 * MiB);
            else size = 1 + rng() % (30 * MiB);
            int stream = (int)(rng() % 2);
            if (tight && rng() % 20 == 0) f.fail_next = 1;
            void *p = NULL;
            cinfer_status st = alloc_malloc(a, size, stream, &p);
            if (st != CINFER_OK) {
                CHECK(st == CINFER_ERR_OUT_OF_MEMORY);
                ooms++;
                continue;
            }
            size_t rs = (size + 511) / 512 * 512;
            for (size_t i = 0; i < n_live; i++) {
                char *b = live[i].ptr;
                if ((char *)p < b + live[i].size && b < (char *)p + rs) bad_overlap++;
            }
            ((char *)p)[0] = 1; /* touch both ends: ASan flags anything outside a fake segment */
            ((char *)p)[rs - 1] = 1;
            live[n_live++] = (live_block){p, rs, stream};
            if (rng() % 8 == 0) CHECK(alloc_record_stream(a, p, 1 - stream) == CINFER_OK);
        } else {
            size_t i = rng() % n_live;
            alloc_free(a, live[i].ptr);
            live[i] = live[--n_live];
        }
        if (rng() % 16 == 0) fake_complete(&f, (int)(rng() % 2));
        if (rng() % 200 == 0) alloc_empty_cache(a);
        if (rng() % 50 == 0) alloc_process_events(a);
        struct alloc_stats s = stats(a);
        size_t sum = 0;
        for (size_t i = 0; i < n_live; i++) sum += live[i].size;
        if (s.allocated_bytes != sum || s.active_blocks != n_live || s.reserved_bytes != f.used ||
            s.allocated_bytes > s.reserved_bytes || s.peak_allocated_bytes < s.allocated_bytes ||
            s.peak_reserved_bytes < s.reserved_bytes || s.num_device_mallocs - s.num_device_frees != f.n_segs ||
            s.inactive_split_bytes > s.reserved_bytes - s.allocated_bytes)
            bad_stats++;
    }
    CHECK(bad_overlap == 0);
    CHECK(bad_stats == 0);
    if (!tight) CHECK(ooms == 0); /* 1 GiB is ample */
    else CHECK(stats(a).num_alloc_retries > 0 && stats(a).num_ooms == ooms);
    f.fail_next = 0;
    for (size_t i = 0; i < n_live; i++) alloc_free(a, live[i].ptr);
    CHECK(stats(a).allocated_bytes == 0 && stats(a).active_blocks == 0);
    fake_complete(&f, -1);
    alloc_process_events(a);
    CHECK(f.n_events == 0);
    CHECK(stats(a).inactive_split_bytes == 0); /* all coalesced back into whole segments */
    alloc_empty_cache(a);
    CHECK(stats(a).reserved_bytes == 0 && f.n_segs == 0);
    printf("stress: %zu device mallocs, %zu ooms, peak reserved %zu MiB\n", stats(a).num_device_mallocs, ooms,
           stats(a).peak_reserved_bytes / MiB);
    finish(a, &f);
}

static void test_bad_args(void) {
    caching_allocator *a = NULL;
    struct alloc_device_i d = {0};
    CHECK(alloc_create(&d, NULL, &a) == CINFER_ERR_INVALID_ARGUMENT && a == NULL);
    CHECK(alloc_create(NULL, NULL, &a) == CINFER_ERR_INVALID_ARGUMENT);
    alloc_destroy(NULL);
    fake_dev f;
    a = make(&f, 100 * MiB);
    void *p;
    CHECK(alloc_malloc(a, 64, 0, &p) == CINFER_OK);
    alloc_free(a, (char *)p + 512); /* not ours: ignored, reported */
    CHECK_ERROR_MENTIONS("not allocated");
    CHECK(stats(a).active_blocks == 1);
    CHECK(alloc_malloc(a, SIZE_MAX, 0, &p) == CINFER_ERR_OUT_OF_MEMORY);
    finish(a, &f);
}

int main(void) {
    test_rounding_and_pools();
    test_reuse();
    test_split_coalesce();
    test_max_split();
    test_stream_separation();
    test_record_stream();
    test_oom_retry();
    test_hard_oom();
    test_limit();
    test_stats_and_empty_cache();
    test_stress(1024 * MiB, false);
    test_stress(160 * MiB, true);
    test_bad_args();
    TEST_MAIN_END();
}
