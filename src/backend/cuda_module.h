/* The hand-over between the engine and the CUDA backend module (libcinfer_cuda.so), which runtime/device.c loads.
 *
 * The engine never links CUDA: it dlopens the module the first time a CUDA device is asked for, calls the module's
 * one exported function (CUDA_MODULE_ENTRY) with the host table below, and calls the module through the table it
 * gets back. libcinfer.so exports the public API (cinfer_*) and nothing else, so the module binds to no engine
 * internal by name: it links its own copy of the stateless internals it uses (dtype and tensor helpers, graph
 * attribute readers, the op schema table and op-parameter code: cinfer_internals in CMakeLists.txt), and reaches
 * the state that must be one through the host table: the error state, so a message set in the module is what
 * cinfer_last_error() reads. Graphs, tensors and schema indices cross as plain data.
 *
 * Each side checks the other's identity: the ABI number (the layout of these two tables) and the build id, a token
 * made at each configure (CMakeLists.txt), because a module from another build may lay out graphs, tensors or the
 * schema table differently even where the ABI number agrees. A mismatch is refused with both values named.
 */
#ifndef CINFER_BACKEND_CUDA_MODULE_H
#define CINFER_BACKEND_CUDA_MODULE_H

#include <stdarg.h>

#include "backend/backend.h"

#define CUDA_MODULE_ABI 5
#define CUDA_MODULE_ENTRY "cinfer_cuda_module"

/* The module's entry, the one symbol libcinfer_cuda.so exports (it is built with hidden visibility and a version
 * script that keeps everything else local). */
#define CUDA_MODULE_EXPORT __attribute__((visibility("default")))

/* What the engine hands the module: its identity, and the engine state the module shares instead of copying. */
typedef struct cuda_module_host {
    int abi;              /* CUDA_MODULE_ABI; the first member in every ABI */
    const char *build_id; /* the engine's CINFER_BUILD_ID */
    /* The engine's per-thread last error (core_error_v, core_error_prefix_v): the module's core_error and
     * core_error_prefix forward here. */
    cinfer_status (*error_v)(cinfer_status code, const char *fmt, va_list ap);
    cinfer_status (*error_prefix_v)(cinfer_status code, const char *fmt, va_list ap);
} cuda_module_host;

/* Session-level choices the runtime passes to a CUDA backend. */
typedef struct cuda_backend_options {
    int device;                /* ordinal as this process sees it (CUDA_VISIBLE_DEVICES applied) */
    bool allow_tf32;           /* float32 GEMMs and convolutions may use TF32 tensor cores (precision "tf32") */
    bool deterministic;        /* only algorithms that give bitwise identical results run to run */
    bool blocking_wait;        /* the end-of-run wait sleeps on a blocking event instead of spinning ("gpu_wait") */
} cuda_backend_options;

typedef struct cuda_module_api {
    int abi;              /* CUDA_MODULE_ABI; the first member in every ABI, so the engine can read it from any module */
    const char *build_id; /* the module's CINFER_BUILD_ID */
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

/* The entry: the module's table, always (so the engine can name the module's ABI and build id when they differ).
 * The module takes `host` into use only when its abi and build_id are the module's own; the engine uses the table
 * only when the table's are the engine's own. Either way nothing else of the module runs under a foreign engine. */
typedef const cuda_module_api *(*cuda_module_entry_fn)(const cuda_module_host *host);

/* Engine side (runtime/device.c): the loaded module, or NULL with the reason set as the last error. */
const cuda_module_api *device_cuda_module(void);
/* Parses "cuda", "cuda:N"; returns false when `device` is not a CUDA device name. */
bool device_parse_cuda(const char *device, int *ordinal, bool *valid);

#endif
