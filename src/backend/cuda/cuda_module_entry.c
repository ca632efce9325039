/* The module's side of the hand-over (backend/cuda_module.h): its identity and table, the entry the engine calls,
 * and core_error / core_error_prefix, which write the engine's per-thread last error through the host table.
 *
 * Built into libcinfer_cuda.so only: a program that links the module's code directly (bench/gpu/bench_alloc.c)
 * has no engine to hand it a host and links src/core/status.c in place of this file.
 */
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "cinfer_build_id.h"

/* Set once by the entry, which the engine calls under its pthread_once before it calls anything else of ours. */
static const cuda_module_host *engine;

cinfer_status core_error(cinfer_status code, const char *fmt, ...) {
    CINFER_ASSERT(engine != NULL);
    va_list ap;
    va_start(ap, fmt);
    engine->error_v(code, fmt, ap);
    va_end(ap);
    return code;
}

cinfer_status core_error_prefix(cinfer_status code, const char *fmt, ...) {
    CINFER_ASSERT(engine != NULL);
    va_list ap;
    va_start(ap, fmt);
    engine->error_prefix_v(code, fmt, ap);
    va_end(ap);
    return code;
}

static const cuda_module_api module_api = {
    .abi = CUDA_MODULE_ABI,
    .build_id = CINFER_BUILD_ID,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .backend_create = cuda_backend_create,
    .memory_stats = cuda_memory_stats,
    .set_memory_limit = cuda_set_memory_limit,
    .empty_cache = cuda_empty_cache,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .has_op = cuda_has_op,
};

CUDA_MODULE_EXPORT const cuda_module_api *cinfer_cuda_module(const cuda_module_host *host) {
    /* abi is read alone first: a host of another ABI may not have build_id where this one does. */
    if (host && host->abi == CUDA_MODULE_ABI && host->build_id && strcmp(host->build_id, CINFER_BUILD_ID) == 0)
        engine = host;
    return &module_api;
}
