/* Private to the CUDA module: per-device state shared by all sessions on a device (allocators, streams,
 * failure flag, weights), and error checks. */
#ifndef CINFER_CUDA_INTERNAL_H
#define CINFER_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <cuda_runtime_api.h>

#include "alloc/caching_allocator.h"
#include "backend/cuda_module.h"
#include "core/status.h"

#define CUDA_MAX_DEVICES 64
#define CUDA_MAX_STREAMS 1024 /* sessions per device at once (one stream each) */

typedef struct cuda_weights cuda_weights;

typedef struct cuda_device_state {
    int ordinal;
    size_t total_memory;
    caching_allocator *memory; /* device memory: weights, arenas, workspaces */
    caching_allocator *pinned; /* pinned host memory for staging copies */
    pthread_mutex_t lock;      /* guards streams[] and the weights list */
    /* CUDA graph captures hold it shared; calls that synchronise the whole device (cudaDeviceSynchronize, cudaFree,
     * cudaFreeHost, the synchronous weight upload, handle destruction) hold it exclusive, because one of them on
     * another thread invalidates a capture in progress (CUDA programming guide, stream capture). */
    pthread_rwlock_t capture_lock;
    cudaStream_t streams[CUDA_MAX_STREAMS]; /* allocator stream id s -> streams[s]; id 0 is the legacy stream */
    bool stream_used[CUDA_MAX_STREAMS];
    cuda_weights *weights; /* per-graph constants on this device, refcounted */
    cudaEvent_t timeline_epoch; /* session option "timeline": the zero of every span on this device; NULL until used */
    atomic_bool failed;
    char failure[512]; /* why the device was marked failed (written once, before `failed` is set) */
} cuda_device_state;

/* Exclusive section for a device-wide synchronising call (see capture_lock). */
void cuda_device_sync_begin(cuda_device_state *d);
void cuda_device_sync_end(cuda_device_state *d);

/* The state of `ordinal`, created on first use (allocators, cudaSetDevice checks). */
cinfer_status cuda_device_get(int ordinal, cuda_device_state **out);
/* OK, or an error naming the device and the sticky error that poisoned it. */
cinfer_status cuda_device_usable(const cuda_device_state *d);
/* Marks the device failed after a sticky error: every session on it refuses work from now on. */
void cuda_device_mark_failed(int ordinal, const char *why);

/* The device's timeline epoch (see timeline_epoch): recorded on `stream` and waited for the first time it is
 * asked for, so every event recorded after comes after it. */
cinfer_status cuda_device_timeline_epoch(cuda_device_state *d, cudaStream_t stream, cudaEvent_t *out);

/* Registers a stream for the allocator's cross-stream bookkeeping; returns its id (> 0) or -1 when full. */
int cuda_device_add_stream(cuda_device_state *d, cudaStream_t s);
void cuda_device_remove_stream(cuda_device_state *d, int id);

/* Checks a CUDA runtime result: OK, or an error with `what`, the device and CUDA's message. A sticky error
 * (the context is lost: illegal address, launch failure, ...) marks the device failed. */
cinfer_status cuda_check(int ordinal, cudaError_t err, const char *what);
bool cuda_error_is_sticky(cudaError_t err);

/* Constants of graph `g` on the device: uploaded on the first acquire, shared by later sessions, freed when
 * the last one releases them. */
cinfer_status cuda_weights_acquire(cuda_device_state *d, const graph *g, cuda_weights **out);
void cuda_weights_release(cuda_device_state *d, cuda_weights *w);
void *cuda_weights_data(const cuda_weights *w, int value);

/* The module's session backend (cuda_backend.c). */
cinfer_status cuda_backend_create(const cuda_backend_options *opt, const graph *g, backend **out);

/* The rest of the module's table (cuda_device.c; contracts in backend/cuda_module.h), which cuda_module_entry.c
 * hands the engine. */
cinfer_status cuda_device_count(int *count);
cinfer_status cuda_device_info(int ordinal, cinfer_device_info *out);
cinfer_status cuda_memory_stats(int ordinal, cinfer_memory_stats *out);
cinfer_status cuda_set_memory_limit(int ordinal, size_t bytes, double fraction);
cinfer_status cuda_empty_cache(int ordinal);
cinfer_status cuda_host_alloc(int ordinal, size_t bytes, void **out);
void cuda_host_free(int ordinal, void *p);
bool cuda_has_op(const char *op_type);

#endif
