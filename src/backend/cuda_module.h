/* The table the CUDA backend module (libcinfer_cuda.so) hands the engine when runtime/device.c loads it.
 *
 * The engine never links CUDA: it dlopens the module the first time a CUDA device is asked for and calls
 * through this table. The module links the shared libcinfer, so both sides share one error state, one op
 * registry and one set of graph types.
 */
#ifndef CINFER_BACKEND_CUDA_MODULE_H
#define CINFER_BACKEND_CUDA_MODULE_H

#include "backend/backend.h"

#define CUDA_MODULE_ABI 4
#define CUDA_MODULE_ENTRY "cinfer_cuda_module"

/* Session-level choices the runtime passes to a CUDA backend. */
typedef struct cuda_backend_options {
    int device;                /* ordinal as this process sees it (CUDA_VISIBLE_DEVICES applied) */
    bool allow_tf32;           /* float32 GEMMs and convolutions may use TF32 tensor cores (precision "tf32") */
    bool deterministic;        /* only algorithms that give bitwise identical results run to run */
    bool blocking_wait;        /* the end-of-run wait sleeps on a blocking event instead of spinning ("gpu_wait") */
} cuda_backend_options;

typedef struct cuda_module_api {
    int abi; /* CUDA_MODULE_ABI */
    /* Visible devices; fails with a clear message when there is no driver or no device. */
    cinfer_status (*device_count)(int *count);
    cinfer_status (*device_info)(int device, cinfer_device_info *out);
    /* A backend for one session on `opt->device`. `g` is the model's graph: its constants are uploaded once
     * per device and shared by every session of that graph on that device. */
    cinfer_status (*backend_create)(const cuda_backend_options *opt, const graph *g, backend **out);
    cinfer_status (*memory_stats)(int device, cinfer_memory_stats *out);
    /* bytes > 0: cap in bytes; else fraction in (0, 1] of the device's memory; both 0: no cap. */
    cinfer_status (*set_memory_limit)(int device, size_t bytes, double fraction);
    cinfer_status (*empty_cache)(int device);
    /* Page-locked host memory from the device's pinned cache, and its return. */
    cinfer_status (*host_alloc)(int device, size_t bytes, void **out);
    void (*host_free)(int device, void *p);
    /* CUDA kernels the module has, by op type. */
    bool (*has_op)(const char *op_type);
} cuda_module_api;

typedef const cuda_module_api *(*cuda_module_entry_fn)(void);

/* Engine side (runtime/device.c): the loaded module, or NULL with the reason set as the last error. */
const cuda_module_api *device_cuda_module(void);
/* Parses "cuda", "cuda:N"; returns false when `device` is not a CUDA device name. */
bool device_parse_cuda(const char *device, int *ordinal, bool *valid);

#endif
