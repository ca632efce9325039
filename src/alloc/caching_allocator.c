/* Caching device-memory allocator: segments carved into blocks, best-fit per (stream, size), cross-stream events, OOM ladder. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "alloc/caching_allocator.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* Same-segment neighbours larger than this may still be used for an oversize request (caps waste). */
#define ALLOC_OVERSIZE_SLACK ALLOC_LARGE_BUFFER

typedef struct alloc_block {
    char *ptr;
    size_t size;           /* bytes of the segment this block covers */
    size_t req;            /* rounded request while allocated (what stats count) */
    int stream;            /* owning stream: only it reuses the block from the pool */
    bool small;            /* which pool the segment belongs to */
    bool allocated;        /* true from malloc until it is back in a pool (also while events pend) */
    int event_count;       /* outstanding cross-stream events */
    int *uses;             /* other streams recorded via alloc_record_stream */
    size_t n_uses, cap_uses;
    struct alloc_block *prev, *next; /* neighbours in the same segment, by address */
} alloc_block;

/* Sorted array of block pointers; the order is given by the comparator used with it. */
typedef struct {
    alloc_block **v;
    size_t n, cap;
} alloc_vec;

typedef struct {
    void *event;
    alloc_block *block;
} alloc_pending;

struct caching_allocator {
    struct alloc_device_i dev;
    void *ctx;
    pthread_mutex_t mu;
    alloc_vec small_pool, large_pool; /* free blocks by (stream, size, ptr) */
    alloc_vec live;                   /* allocated blocks by ptr, for free/record_stream lookup */
    alloc_vec segments;               /* first block of each segment (that struct stays the head) */
    alloc_pending *pending;
    size_t n_pending, cap_pending;
    size_t limit, max_split;
    struct alloc_stats st;
};

/* ---- sorted vectors ---- */

static int alloc_cmp_free(const alloc_block *x, const alloc_block *y) {
    if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    if (x->ptr != y->ptr) return (uintptr_t)x->ptr < (uintptr_t)y->ptr ? -1 : 1;
    return 0;
}

static int alloc_cmp_ptr(const alloc_block *x, const alloc_block *y) {
    if (x->ptr == y->ptr) return 0;
    return (uintptr_t)x->ptr < (uintptr_t)y->ptr ? -1 : 1;
}

typedef int (*alloc_cmp_fn)(const alloc_block *, const alloc_block *);

/* First index whose element is not less than key. */
static size_t alloc_lower_bound(const alloc_vec *v, const alloc_block *key, alloc_cmp_fn cmp) {
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp(v->v[mid], key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool alloc_vec_insert(alloc_vec *v, alloc_block *b, alloc_cmp_fn cmp) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        alloc_block **nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return false;
        v->v = nv;
        v->cap = cap;
    }
    size_t i = alloc_lower_bound(v, b, cmp);
    memmove(v->v + i + 1, v->v + i, (v->n - i) * sizeof *v->v);
    v->v[i] = b;
    v->n++;
    return true;
}

static bool alloc_vec_remove(alloc_vec *v, alloc_block *b, alloc_cmp_fn cmp) {
    size_t i = alloc_lower_bound(v, b, cmp);
    if (i >= v->n || v->v[i] != b) return false;
    memmove(v->v + i, v->v + i + 1, (v->n - i - 1) * sizeof *v->v);
    v->n--;
    return true;
}

/* ---- helpers ---- */

static alloc_vec *alloc_pool_of(caching_allocator *a, const alloc_block *b) {
    return b->small ? &a->small_pool : &a->large_pool;
}

static size_t alloc_round(size_t bytes) {
    return (bytes + ALLOC_MIN_BLOCK - 1) / ALLOC_MIN_BLOCK * ALLOC_MIN_BLOCK;
}

static size_t alloc_segment_size(size_t size) {
    if (size <= ALLOC_SMALL_SIZE) return ALLOC_SMALL_BUFFER;
    if (size < ALLOC_MIN_LARGE_ALLOC) return ALLOC_LARGE_BUFFER;
    return (size + ALLOC_ROUND_LARGE - 1) / ALLOC_ROUND_LARGE * ALLOC_ROUND_LARGE;
}

static void alloc_note_peaks(caching_allocator *a) {
    if (a->st.allocated_bytes > a->st.peak_allocated_bytes) a->st.peak_allocated_bytes = a->st.allocated_bytes;
    if (a->st.reserved_bytes > a->st.peak_reserved_bytes) a->st.peak_reserved_bytes = a->st.reserved_bytes;
}

static void alloc_block_destroy(alloc_block *b) {
    free(b->uses);
    free(b);
}

/* Puts a no-longer-used block back in its pool, merging with free neighbours so the segment can become whole again. */
static void alloc_return_block(caching_allocator *a, alloc_block *b) {
    alloc_vec *pool = alloc_pool_of(a, b);
    b->allocated = false;
    b->n_uses = 0;
    b->req = 0;
    alloc_block *p = b->prev;
    if (p && !p->allocated) {
        alloc_vec_remove(pool, p, alloc_cmp_free);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        alloc_block_destroy(b);
        b = p;
    }
    alloc_block *n = b->next;
    if (n && !n->allocated) {
        alloc_vec_remove(pool, n, alloc_cmp_free);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        alloc_block_destroy(n);
    }
    /* Inserting can only fail on realloc; then the block is lost to reuse but stays accounted in its segment. */
    (void)alloc_vec_insert(pool, b, alloc_cmp_free);
}

static void alloc_process_events_locked(caching_allocator *a) {
    size_t i = 0;
    while (i < a->n_pending) {
        alloc_pending *pe = &a->pending[i];
        if (!a->dev.event_query(a->ctx, pe->event)) {
            i++;
            continue;
        }
        a->dev.event_destroy(a->ctx, pe->event);
        alloc_block *b = pe->block;
        a->pending[i] = a->pending[--a->n_pending];
        if (--b->event_count == 0) alloc_return_block(a, b);
    }
}

static bool alloc_is_oversize(const caching_allocator *a, size_t size) {
    return a->max_split && size >= a->max_split;
}

/* Best fit on `stream` in the pool for `size`; removes and returns it, or NULL. */
static alloc_block *alloc_find_free(caching_allocator *a, size_t size, int stream) {
    alloc_vec *pool = size <= ALLOC_SMALL_SIZE ? &a->small_pool : &a->large_pool;
    alloc_block key = {.ptr = NULL, .size = size, .stream = stream};
    size_t i = alloc_lower_bound(pool, &key, alloc_cmp_free);
    if (i >= pool->n) return NULL;
    alloc_block *b = pool->v[i];
    if (b->stream != stream) return NULL;
    if (pool == &a->small_pool) goto take; /* small segments are always splittable */
    /* Unsplittable oversize blocks would be wasted on small requests... */
    if (!alloc_is_oversize(a, size) && alloc_is_oversize(a, b->size)) return NULL;
    /* ...and on oversize requests much smaller than them. */
    if (alloc_is_oversize(a, size) && b->size >= size + ALLOC_OVERSIZE_SLACK) return NULL;
take:
    alloc_vec_remove(pool, b, alloc_cmp_free);
    return b;
}

/* Frees every wholly free cached segment; returns bytes released. */
static size_t alloc_release_cached(caching_allocator *a) {
    size_t released = 0;
    size_t i = 0;
    while (i < a->segments.n) {
        alloc_block *h = a->segments.v[i];
        if (h->allocated || h->next) {
            i++;
            continue;
        }
        alloc_vec_remove(alloc_pool_of(a, h), h, alloc_cmp_free);
        memmove(a->segments.v + i, a->segments.v + i + 1, (a->segments.n - i - 1) * sizeof *a->segments.v);
        a->segments.n--;
        a->dev.free(a->ctx, h->ptr);
        a->st.reserved_bytes -= h->size;
        a->st.num_device_frees++;
        released += h->size;
        alloc_block_destroy(h);
    }
    return released;
}

/* Gets a new segment from the device, honouring the limit; NULL on failure (device or limit). */
static alloc_block *alloc_new_segment(caching_allocator *a, size_t seg, size_t size, int stream) {
    if (a->limit && (seg > a->limit || a->st.reserved_bytes > a->limit - seg)) return NULL;
    alloc_block *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    void *p = NULL;
    if (a->dev.malloc(a->ctx, seg, &p) != CINFER_OK || !p) {
        free(b);
        return NULL;
    }
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = size <= ALLOC_SMALL_SIZE;
    if (!alloc_vec_insert(&a->segments, b, alloc_cmp_ptr)) {
        a->dev.free(a->ctx, p);
        free(b);
        return NULL;
    }
    a->st.reserved_bytes += seg;
    a->st.num_device_mallocs++;
    alloc_note_peaks(a);
    return b;
}

/* Oversize requests never split. Cached oversize blocks only reach oversize requests (alloc_find_free), so they
 * are never split either; a fresh segment for a smaller request is split as usual. */
static bool alloc_should_split(const caching_allocator *a, const alloc_block *b, size_t size) {
    size_t rest = b->size - size;
    if (b->small) return rest >= ALLOC_MIN_BLOCK;
    if (alloc_is_oversize(a, size)) return false;
    return rest > ALLOC_SMALL_SIZE;
}

static size_t alloc_free_cached_bytes(const caching_allocator *a) {
    size_t s = 0;
    for (size_t i = 0; i < a->small_pool.n; i++) s += a->small_pool.v[i]->size;
    for (size_t i = 0; i < a->large_pool.n; i++) s += a->large_pool.v[i]->size;
    return s;
}

/* ---- API ---- */

cinfer_status alloc_create(const struct alloc_device_i *dev, void *ctx, caching_allocator **out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_create: out is NULL");
    *out = NULL;
    if (!dev || !dev->malloc || !dev->free || !dev->event_record || !dev->event_query || !dev->event_destroy ||
        !dev->synchronize)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_create: device interface is NULL or incomplete");
    caching_allocator *a = calloc(1, sizeof *a);
    if (!a) return core_error(CINFER_ERR_OUT_OF_MEMORY, "alloc_create: out of host memory");
    a->dev = *dev;
    a->ctx = ctx;
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        free(a);
        return core_error(CINFER_ERR_RUNTIME, "alloc_create: pthread_mutex_init failed");
    }
    *out = a;
    return CINFER_OK;
}

void alloc_destroy(caching_allocator *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n_pending; i++) a->dev.event_destroy(a->ctx, a->pending[i].event);
    for (size_t i = 0; i < a->segments.n; i++) {
        alloc_block *h = a->segments.v[i];
        a->dev.free(a->ctx, h->ptr);
        while (h) {
            alloc_block *n = h->next;
            alloc_block_destroy(h);
            h = n;
        }
    }
    free(a->pending);
    free(a->small_pool.v);
    free(a->large_pool.v);
    free(a->live.v);
    free(a->segments.v);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

cinfer_status alloc_malloc(caching_allocator *a, size_t bytes, int stream, void **ptr) {
    if (!a || !ptr) return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_malloc: allocator or ptr is NULL");
    *ptr = NULL;
    if (bytes == 0) return CINFER_OK;
    if (bytes > SIZE_MAX / 2) {
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "alloc_malloc: cannot allocate %zu bytes on stream %d", bytes,
                          stream);
    }
    size_t size = alloc_round(bytes);
    size_t seg = alloc_segment_size(size);
    pthread_mutex_lock(&a->mu);
    /* Cheap: lets blocks whose streams have finished be reused now. */
    alloc_process_events_locked(a);
    alloc_block *b = alloc_find_free(a, size, stream);
    if (!b) b = alloc_new_segment(a, seg, size, stream);
    if (!b) {
        /* OOM ladder: give back what is cached, wait for the streams, and try again. */
        a->st.num_alloc_retries++;
        alloc_release_cached(a);
        if (a->dev.synchronize(a->ctx) == CINFER_OK) alloc_process_events_locked(a);
        b = alloc_find_free(a, size, stream);
        if (!b) {
            alloc_release_cached(a); /* events may have freed whole segments */
            b = alloc_new_segment(a, seg, size, stream);
        }
    }
    if (!b) {
        a->st.num_ooms++;
        cinfer_status s = core_error(
            CINFER_ERR_OUT_OF_MEMORY,
            "device out of memory: tried to allocate %zu bytes (rounded %zu, segment %zu) on stream %d; "
            "allocated %zu bytes, reserved %zu bytes, limit %zu bytes%s, free cached %zu bytes, device total %zu bytes",
            bytes, size, seg, stream, a->st.allocated_bytes, a->st.reserved_bytes, a->limit,
            a->limit ? "" : " (none)", alloc_free_cached_bytes(a), a->dev.total_bytes);
        pthread_mutex_unlock(&a->mu);
        return s;
    }
    if (alloc_should_split(a, b, size)) {
        alloc_block *rest = calloc(1, sizeof *rest);
        if (rest) {
            rest->ptr = b->ptr + size;
            rest->size = b->size - size;
            rest->stream = b->stream;
            rest->small = b->small;
            rest->prev = b;
            rest->next = b->next;
            if (b->next) b->next->prev = rest;
            b->next = rest;
            b->size = size;
            if (!alloc_vec_insert(alloc_pool_of(a, rest), rest, alloc_cmp_free)) {
                /* Undo: keep the block whole rather than lose the tail. */
                b->next = rest->next;
                if (rest->next) rest->next->prev = b;
                b->size += rest->size;
                free(rest);
            }
        }
    }
    b->allocated = true;
    b->req = size;
    b->n_uses = 0;
    if (!alloc_vec_insert(&a->live, b, alloc_cmp_ptr)) {
        alloc_return_block(a, b);
        pthread_mutex_unlock(&a->mu);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "alloc_malloc: out of host memory for bookkeeping");
    }
    a->st.allocated_bytes += size;
    a->st.active_blocks++;
    alloc_note_peaks(a);
    *ptr = b->ptr;
    pthread_mutex_unlock(&a->mu);
    return CINFER_OK;
}

static alloc_block *alloc_find_live(caching_allocator *a, void *ptr) {
    alloc_block key = {.ptr = ptr};
    size_t i = alloc_lower_bound(&a->live, &key, alloc_cmp_ptr);
    if (i < a->live.n && a->live.v[i]->ptr == (char *)ptr) return a->live.v[i];
    return NULL;
}

void alloc_free(caching_allocator *a, void *ptr) {
    if (!a || !ptr) return;
    pthread_mutex_lock(&a->mu);
    alloc_block *b = alloc_find_live(a, ptr);
    if (!b) {
        pthread_mutex_unlock(&a->mu);
        core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_free: %p was not allocated here (or freed twice)", ptr);
        return;
    }
    alloc_vec_remove(&a->live, b, alloc_cmp_ptr);
    a->st.allocated_bytes -= b->req;
    a->st.active_blocks--;
    /* Other streams may still read/write it: cache it only after their queued work is done. */
    for (size_t i = 0; i < b->n_uses; i++) {
        void *ev = NULL;
        if (a->n_pending == a->cap_pending) {
            size_t cap = a->cap_pending ? a->cap_pending * 2 : 16;
            alloc_pending *np = realloc(a->pending, cap * sizeof *np);
            if (!np) {
                a->dev.synchronize(a->ctx); /* fall back to waiting for everything */
                continue;
            }
            a->pending = np;
            a->cap_pending = cap;
        }
        if (a->dev.event_record(a->ctx, b->uses[i], &ev) != CINFER_OK) {
            a->dev.synchronize(a->ctx);
            continue;
        }
        a->pending[a->n_pending++] = (alloc_pending){ev, b};
        b->event_count++;
    }
    b->n_uses = 0;
    if (b->event_count == 0) alloc_return_block(a, b);
    pthread_mutex_unlock(&a->mu);
}

cinfer_status alloc_record_stream(caching_allocator *a, void *ptr, int stream) {
    if (!a || !ptr) return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_record_stream: allocator or ptr is NULL");
    pthread_mutex_lock(&a->mu);
    alloc_block *b = alloc_find_live(a, ptr);
    if (!b) {
        pthread_mutex_unlock(&a->mu);
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_record_stream: %p is not a live allocation", ptr);
    }
    if (stream == b->stream) goto done; /* the owner's order already protects the block */
    for (size_t i = 0; i < b->n_uses; i++)
        if (b->uses[i] == stream) goto done;
    if (b->n_uses == b->cap_uses) {
        size_t cap = b->cap_uses ? b->cap_uses * 2 : 4;
        int *nu = realloc(b->uses, cap * sizeof *nu);
        if (!nu) {
            pthread_mutex_unlock(&a->mu);
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "alloc_record_stream: out of host memory");
        }
        b->uses = nu;
        b->cap_uses = cap;
    }
    b->uses[b->n_uses++] = stream;
done:
    pthread_mutex_unlock(&a->mu);
    return CINFER_OK;
}

void alloc_process_events(caching_allocator *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    alloc_process_events_locked(a);
    pthread_mutex_unlock(&a->mu);
}

void alloc_empty_cache(caching_allocator *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    alloc_release_cached(a);
    pthread_mutex_unlock(&a->mu);
}

void alloc_get_stats(caching_allocator *a, struct alloc_stats *out) {
    if (!a || !out) return;
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    /* Walk segments rather than track incrementally: simple and always right. */
    size_t frag = 0;
    for (size_t i = 0; i < a->segments.n; i++) {
        alloc_block *h = a->segments.v[i];
        if (!h->allocated && !h->next) continue; /* wholly free: cache, not fragmentation */
        for (alloc_block *b = h; b; b = b->next)
            if (!b->allocated) frag += b->size;
    }
    out->inactive_split_bytes = frag;
    pthread_mutex_unlock(&a->mu);
}

void alloc_reset_peak(caching_allocator *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->st.peak_allocated_bytes = a->st.allocated_bytes;
    a->st.peak_reserved_bytes = a->st.reserved_bytes;
    pthread_mutex_unlock(&a->mu);
}

cinfer_status alloc_set_limit(caching_allocator *a, size_t bytes) {
    if (!a) return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_set_limit: allocator is NULL");
    pthread_mutex_lock(&a->mu);
    a->limit = bytes;
    pthread_mutex_unlock(&a->mu);
    return CINFER_OK;
}

cinfer_status alloc_set_limit_fraction(caching_allocator *a, double fraction) {
    if (!a) return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_set_limit_fraction: allocator is NULL");
    if (!(fraction >= 0.0 && fraction <= 1.0))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_set_limit_fraction: fraction %g is not in [0, 1]",
                          fraction);
    if (fraction > 0.0 && a->dev.total_bytes == 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_set_limit_fraction: device total_bytes is unknown");
    size_t bytes = (size_t)(fraction * (double)a->dev.total_bytes);
    if (fraction > 0.0 && bytes == 0) bytes = 1; /* a tiny fraction still means "a limit", not "none" */
    return alloc_set_limit(a, bytes);
}

size_t alloc_get_limit(caching_allocator *a) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    size_t l = a->limit;
    pthread_mutex_unlock(&a->mu);
    return l;
}

cinfer_status alloc_set_max_split_size(caching_allocator *a, size_t bytes) {
    if (!a) return core_error(CINFER_ERR_INVALID_ARGUMENT, "alloc_set_max_split_size: allocator is NULL");
    if (bytes && bytes <= ALLOC_SMALL_SIZE)
        return core_error(CINFER_ERR_INVALID_ARGUMENT,
                          "alloc_set_max_split_size: %zu bytes must exceed the small-pool cutoff %zu", bytes,
                          ALLOC_SMALL_SIZE);
    pthread_mutex_lock(&a->mu);
    a->max_split = bytes;
    pthread_mutex_unlock(&a->mu);
    return CINFER_OK;
}

size_t alloc_get_max_split_size(caching_allocator *a) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    size_t m = a->max_split;
    pthread_mutex_unlock(&a->mu);
    return m;
}
