/* Caching device-memory allocator core (PyTorch-style pools, splitting, per-stream reuse, OOM ladder) over a raw device interface. */
#ifndef CINFER_ALLOC_CACHING_ALLOCATOR_H
#define CINFER_ALLOC_CACHING_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer/cinfer.h"

/* Raw device the allocator sits on. Streams are small ints, 0 = default stream. */
struct alloc_device_i {
    cinfer_status (*malloc)(void *ctx, size_t bytes, void **ptr);
    void (*free)(void *ctx, void *ptr);
    /* Events let a block freed while other streams still use it wait until their work is done. */
    cinfer_status (*event_record)(void *ctx, int stream, void **event);
    bool (*event_query)(void *ctx, void *event); /* true once the event has completed */
    void (*event_destroy)(void *ctx, void *event);
    cinfer_status (*synchronize)(void *ctx);     /* waits for all streams; afterwards every event completes */
    size_t total_bytes;                          /* device capacity, for alloc_set_limit_fraction; 0 = unknown */
};

struct alloc_stats {
    size_t allocated_bytes;      /* held by callers: sum of live requests rounded to 512 B */
    size_t reserved_bytes;       /* sum of device segments held */
    size_t active_blocks;        /* live allocations */
    size_t peak_allocated_bytes;
    size_t peak_reserved_bytes;
    size_t num_device_mallocs;
    size_t num_device_frees;
    size_t num_alloc_retries;    /* times a request had to release cache / synchronize and retry */
    size_t num_ooms;             /* requests that failed with CINFER_ERR_OUT_OF_MEMORY */
    size_t inactive_split_bytes; /* free bytes inside segments that are partly in use (fragmentation) */
};

typedef struct caching_allocator caching_allocator;

/* Rounding and pool constants (exposed for tests and callers sizing their requests). */
#define ALLOC_MIN_BLOCK ((size_t)512)
#define ALLOC_SMALL_SIZE ((size_t)1 << 20)       /* requests <= this use the small pool */
#define ALLOC_SMALL_BUFFER ((size_t)2 << 20)     /* small-pool segment size */
#define ALLOC_LARGE_BUFFER ((size_t)20 << 20)    /* large-pool segment for requests < ALLOC_MIN_LARGE_ALLOC */
#define ALLOC_MIN_LARGE_ALLOC ((size_t)10 << 20)
#define ALLOC_ROUND_LARGE ((size_t)2 << 20)      /* bigger requests get their own segment, rounded to this */

/* `dev` is copied; `ctx` is passed to every device call. */
cinfer_status alloc_create(const struct alloc_device_i *dev, void *ctx, caching_allocator **out);
/* Returns every segment to the device (live blocks included) and destroys pending events. NULL ok. */
void alloc_destroy(caching_allocator *a);

/* bytes == 0 gives *ptr = NULL and CINFER_OK. */
cinfer_status alloc_malloc(caching_allocator *a, size_t bytes, int stream, void **ptr);
/* NULL ok. A block used by other streams (alloc_record_stream) is cached only once their events complete. */
void alloc_free(caching_allocator *a, void *ptr);
/* Marks that `stream` also uses the live block at `ptr`. */
cinfer_status alloc_record_stream(caching_allocator *a, void *ptr, int stream);
/* Returns blocks whose cross-stream events have all completed to the free pools. */
void alloc_process_events(caching_allocator *a);
/* Returns cached segments that are wholly free (any stream) to the device. */
void alloc_empty_cache(caching_allocator *a);

void alloc_get_stats(caching_allocator *a, struct alloc_stats *out);
void alloc_reset_peak(caching_allocator *a);

/* Cap on reserved bytes; 0 = no limit. */
cinfer_status alloc_set_limit(caching_allocator *a, size_t bytes);
/* Cap as a fraction (0, 1] of dev->total_bytes; 0 removes the limit. */
cinfer_status alloc_set_limit_fraction(caching_allocator *a, double fraction);
size_t alloc_get_limit(caching_allocator *a);
/* Blocks larger than this are never split and serve only requests >= it; 0 = no such limit. */
cinfer_status alloc_set_max_split_size(caching_allocator *a, size_t bytes);
size_t alloc_get_max_split_size(caching_allocator *a);

#endif
