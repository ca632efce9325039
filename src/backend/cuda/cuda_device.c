/* CUDA devices as this process sees them: enumeration, per-device caching allocators (device and pinned host
 * memory), the sticky-error failure flag, shared weights, and the functions of the module's table (cuda_module_entry.c
 * hands the table to the engine). */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_kernels.h"
#include "graph/op_schema.h"

static cuda_device_state *devices[CUDA_MAX_DEVICES];
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;

bool cuda_error_is_sticky(cudaError_t err) {
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
        return true;
    default:
        return false;
    }
}

cinfer_status cuda_check(int ordinal, cudaError_t err, const char *what) {
    if (err == cudaSuccess) return CINFER_OK;
    char msg[400];
    snprintf(msg, sizeof msg, "%s on cuda:%d failed: %s (%s)", what, ordinal, cudaGetErrorString(err), cudaGetErrorName(err));
    if (cuda_error_is_sticky(err)) {
        cuda_device_mark_failed(ordinal, msg);
        return core_error(CINFER_ERR_RUNTIME, "%s; the device's context is lost, so cuda:%d is marked failed and refuses "
                          "all further work until the process restarts", msg, ordinal);
    }
    /* A refused call (a copy range past its allocation, say) also sets the thread's last error; consumed here, or
     * the next kernel launch's cudaGetLastError() would report it and fail a run that did nothing wrong */
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s", msg);
    return core_error(CINFER_ERR_RUNTIME, "%s", msg);
}

void cuda_device_mark_failed(int ordinal, const char *why) {
    if (ordinal < 0 || ordinal >= CUDA_MAX_DEVICES) return;
    pthread_mutex_lock(&devices_lock);
    cuda_device_state *d = devices[ordinal];
    if (d && !atomic_load(&d->failed)) {
        snprintf(d->failure, sizeof d->failure, "%s", why);
        atomic_store(&d->failed, true);
        fprintf(stderr, "cinfer: cuda:%d marked failed: %s\n", ordinal, why);
    }
    pthread_mutex_unlock(&devices_lock);
}

cinfer_status cuda_device_usable(const cuda_device_state *d) {
    if (atomic_load(&d->failed))
        return core_error(CINFER_ERR_RUNTIME, "cuda:%d is marked failed after a sticky CUDA error (%s); restart the process",
                          d->ordinal, d->failure);
    return CINFER_OK;
}

void cuda_device_sync_begin(cuda_device_state *d) { pthread_rwlock_wrlock(&d->capture_lock); }
void cuda_device_sync_end(cuda_device_state *d) { pthread_rwlock_unlock(&d->capture_lock); }

/* ---- raw interfaces under the caching allocators ---- */

static cudaStream_t stream_of(cuda_device_state *d, int id) {
    return id > 0 && id < CUDA_MAX_STREAMS ? d->streams[id] : (cudaStream_t)0;
}

static cinfer_status raw_device_malloc(void *ctx, size_t bytes, void **ptr) {
    cuda_device_state *d = ctx;
    CINFER_TRY(cuda_check(d->ordinal, cudaSetDevice(d->ordinal), "cudaSetDevice"));
    cudaError_t err = cudaMalloc(ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky: clear it so later calls do not see it */
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "cudaMalloc of %zu bytes on cuda:%d: out of memory", bytes, d->ordinal);
    }
    return cuda_check(d->ordinal, err, "cudaMalloc");
}

static void raw_device_free(void *ctx, void *ptr) {
    cuda_device_state *d = ctx;
    cudaSetDevice(d->ordinal);
    cuda_device_sync_begin(d);
    cudaError_t err = cudaFree(ptr);
    cuda_device_sync_end(d);
    if (err != cudaSuccess) cuda_check(d->ordinal, err, "cudaFree");
}

static cinfer_status raw_pinned_malloc(void *ctx, size_t bytes, void **ptr) {
    cuda_device_state *d = ctx;
    CINFER_TRY(cuda_check(d->ordinal, cudaSetDevice(d->ordinal), "cudaSetDevice"));
    cudaError_t err = cudaHostAlloc(ptr, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "cudaHostAlloc of %zu pinned bytes: out of memory", bytes);
    }
    return cuda_check(d->ordinal, err, "cudaHostAlloc");
}

static void raw_pinned_free(void *ctx, void *ptr) {
    cuda_device_state *d = ctx;
    cuda_device_sync_begin(d);
    cudaError_t err = cudaFreeHost(ptr);
    cuda_device_sync_end(d);
    if (err != cudaSuccess) cuda_check(d->ordinal, err, "cudaFreeHost");
}

static cinfer_status raw_event_record(void *ctx, int stream, void **event) {
    cuda_device_state *d = ctx;
    cudaEvent_t ev;
    CINFER_TRY(cuda_check(d->ordinal, cudaSetDevice(d->ordinal), "cudaSetDevice"));
    CINFER_TRY(cuda_check(d->ordinal, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
    cinfer_status st = cuda_check(d->ordinal, cudaEventRecord(ev, stream_of(d, stream)), "cudaEventRecord");
    if (st != CINFER_OK) {
        cudaEventDestroy(ev);
        return st;
    }
    *event = ev;
    return CINFER_OK;
}

static bool raw_event_query(void *ctx, void *event) {
    cuda_device_state *d = ctx;
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);
    if (err == cudaErrorNotReady) return false;
    if (err != cudaSuccess) {
        cuda_check(d->ordinal, err, "cudaEventQuery");
        return atomic_load(&d->failed); /* a lost context never completes: let the block go with the device */
    }
    return true;
}

static void raw_event_destroy(void *ctx, void *event) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);
}

static cinfer_status raw_synchronize(void *ctx) {
    cuda_device_state *d = ctx;
    CINFER_TRY(cuda_check(d->ordinal, cudaSetDevice(d->ordinal), "cudaSetDevice"));
    cuda_device_sync_begin(d);
    cudaError_t err = cudaDeviceSynchronize();
    cuda_device_sync_end(d);
    return cuda_check(d->ordinal, err, "cudaDeviceSynchronize");
}

/* ---- device table ---- */

cinfer_status cuda_device_count(int *count) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0)) {
        (void)cudaGetLastError();
        return core_error(CINFER_ERR_NOT_FOUND, "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=%s)",
                          getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "<unset>");
    }
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice || err == cudaErrorInitializationError) {
        (void)cudaGetLastError();
        return core_error(CINFER_ERR_NOT_FOUND, "CUDA is not usable here: %s (%s)", cudaGetErrorString(err),
                          err == cudaErrorInsufficientDriver ? "no NVIDIA driver is loaded, or it is older than this CUDA runtime"
                                                             : "the driver could not initialise a device");
    }
    if (err != cudaSuccess) return core_error(CINFER_ERR_RUNTIME, "cudaGetDeviceCount failed: %s", cudaGetErrorString(err));
    *count = n;
    return CINFER_OK;
}

static cinfer_status check_ordinal(int ordinal) {
    int n = 0;
    CINFER_TRY(cuda_device_count(&n));
    if (ordinal < 0 || ordinal >= n || ordinal >= CUDA_MAX_DEVICES)
        return core_error(CINFER_ERR_NOT_FOUND, "cuda:%d does not exist: %d CUDA device%s visible (cuda:0%s%d)", ordinal, n,
                          n == 1 ? " is" : "s are", n > 1 ? "..cuda:" : "", n > 1 ? n - 1 : 0);
    return CINFER_OK;
}

cinfer_status cuda_device_timeline_epoch(cuda_device_state *d, cudaStream_t stream, cudaEvent_t *out) {
    pthread_mutex_lock(&d->lock);
    cinfer_status st = CINFER_OK;
    if (!d->timeline_epoch) {
        cudaEvent_t ev = NULL;
        st = cuda_check(d->ordinal, cudaEventCreate(&ev), "cudaEventCreate (timeline epoch)");
        if (st == CINFER_OK) st = cuda_check(d->ordinal, cudaEventRecord(ev, stream), "cudaEventRecord (timeline epoch)");
        if (st == CINFER_OK) st = cuda_check(d->ordinal, cudaEventSynchronize(ev), "cudaEventSynchronize (timeline epoch)");
        if (st == CINFER_OK) d->timeline_epoch = ev;
        else if (ev) cudaEventDestroy(ev);
    }
    *out = d->timeline_epoch;
    pthread_mutex_unlock(&d->lock);
    return st;
}

cinfer_status cuda_device_get(int ordinal, cuda_device_state **out) {
    CINFER_TRY(check_ordinal(ordinal));
    pthread_mutex_lock(&devices_lock);
    cuda_device_state *d = devices[ordinal];
    cinfer_status st = CINFER_OK;
    if (!d) {
        d = calloc(1, sizeof *d);
        if (!d) {
            st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
            goto done;
        }
        d->ordinal = ordinal;
        pthread_mutex_init(&d->lock, NULL);
        pthread_rwlock_init(&d->capture_lock, NULL);
        size_t free_b = 0, total_b = 0;
        st = cuda_check(ordinal, cudaSetDevice(ordinal), "cudaSetDevice");
        if (st == CINFER_OK) st = cuda_check(ordinal, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        d->total_memory = total_b;
        struct alloc_device_i dev = {raw_device_malloc, raw_device_free, raw_event_record, raw_event_query,
                                     raw_event_destroy, raw_synchronize, total_b};
        struct alloc_device_i pin = {raw_pinned_malloc, raw_pinned_free, raw_event_record, raw_event_query,
                                     raw_event_destroy, raw_synchronize, 0};
        if (st == CINFER_OK) st = alloc_create(&dev, d, &d->memory);
        if (st == CINFER_OK) st = alloc_create(&pin, d, &d->pinned);
        if (st != CINFER_OK) {
            alloc_destroy(d->memory);
            alloc_destroy(d->pinned);
            pthread_mutex_destroy(&d->lock);
            pthread_rwlock_destroy(&d->capture_lock);
            free(d);
            goto done;
        }
        d->stream_used[0] = true; /* id 0: the legacy default stream */
        devices[ordinal] = d;
    }
    *out = d;
done:
    pthread_mutex_unlock(&devices_lock);
    return st;
}

int cuda_device_add_stream(cuda_device_state *d, cudaStream_t s) {
    int id = -1;
    pthread_mutex_lock(&d->lock);
    for (int i = 1; i < CUDA_MAX_STREAMS; i++)
        if (!d->stream_used[i]) {
            d->stream_used[i] = true;
            d->streams[i] = s;
            id = i;
            break;
        }
    pthread_mutex_unlock(&d->lock);
    return id;
}

void cuda_device_remove_stream(cuda_device_state *d, int id) {
    if (id <= 0 || id >= CUDA_MAX_STREAMS) return;
    alloc_process_events(d->memory); /* events recorded on this stream complete before it goes */
    pthread_mutex_lock(&d->lock);
    d->stream_used[id] = false;
    d->streams[id] = NULL;
    pthread_mutex_unlock(&d->lock);
}

/* ---- shared weights ---- */

struct cuda_weights {
    const graph *graph;
    int refs;
    void *block;        /* one device allocation holding every constant a device node reads */
    void **value_data;  /* per value: device pointer or NULL */
    cuda_weights *next;
};

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Constants read by nodes that run on the device (host-evaluated shape nodes read the host copies). */
static bool *device_constants(const graph *g) {
    bool *need = calloc((size_t)(g->num_values ? g->num_values : 1), sizeof(bool));
    if (!need) return NULL;
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *n = &g->nodes[i];
        if (n->host_eval) continue;
        for (int k = 0; k < n->num_inputs; k++)
            if (n->inputs[k] >= 0 && g->values[n->inputs[k]].kind == VALUE_CONSTANT) need[n->inputs[k]] = true;
    }
    for (int k = 0; k < g->num_outputs; k++) need[g->outputs[k]] = false; /* outputs copy from the host */
    return need;
}

static cinfer_status weights_upload(cuda_device_state *d, const graph *g, cuda_weights *w) {
    bool *need = device_constants(g);
    if (!need) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
    size_t total = 0;
    for (int v = 0; v < g->num_values; v++)
        if (need[v]) total += align256(tensor_nbytes(&g->values[v].constant));
    cinfer_status st = CINFER_OK;
    void *staging = NULL;
    if (total) {
        st = alloc_malloc(d->memory, total, 0, &w->block);
        if (st == CINFER_OK) st = alloc_malloc(d->pinned, total, 0, &staging);
    }
    if (st != CINFER_OK) {
        core_error_prefix(st, "uploading the model's %zu bytes of weights to cuda:%d: ", total, d->ordinal);
        goto done;
    }
    size_t off = 0;
    for (int v = 0; v < g->num_values; v++) {
        if (!need[v]) continue;
        const tensor *c = &g->values[v].constant;
        size_t nb = tensor_nbytes(c);
        if (nb) memcpy((char *)staging + off, c->data, nb);
        w->value_data[v] = (char *)w->block + off;
        off += align256(nb);
    }
    if (total) {
        cuda_device_sync_begin(d); /* a synchronous copy on the legacy stream */
        cudaError_t err = cudaMemcpy(w->block, staging, total, cudaMemcpyHostToDevice);
        cuda_device_sync_end(d);
        st = cuda_check(d->ordinal, err, "uploading weights");
    }
done:
    if (staging) alloc_free(d->pinned, staging);
    free(need);
    return st;
}

cinfer_status cuda_weights_acquire(cuda_device_state *d, const graph *g, cuda_weights **out) {
    pthread_mutex_lock(&d->lock);
    cinfer_status st = CINFER_OK;
    cuda_weights *w = d->weights;
    while (w && w->graph != g) w = w->next;
    if (w) {
        w->refs++;
        *out = w;
        goto done;
    }
    w = calloc(1, sizeof *w);
    if (w) w->value_data = calloc((size_t)(g->num_values ? g->num_values : 1), sizeof(void *));
    if (!w || !w->value_data) {
        if (w) free(w);
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
        goto done;
    }
    w->graph = g;
    w->refs = 1;
    st = cuda_check(d->ordinal, cudaSetDevice(d->ordinal), "cudaSetDevice");
    if (st == CINFER_OK) st = weights_upload(d, g, w);
    if (st != CINFER_OK) {
        if (w->block) alloc_free(d->memory, w->block);
        free(w->value_data);
        free(w);
        goto done;
    }
    w->next = d->weights;
    d->weights = w;
    *out = w;
done:
    pthread_mutex_unlock(&d->lock);
    return st;
}

void cuda_weights_release(cuda_device_state *d, cuda_weights *w) {
    if (!w) return;
    pthread_mutex_lock(&d->lock);
    if (--w->refs == 0) {
        cuda_weights **p = &d->weights;
        while (*p && *p != w) p = &(*p)->next;
        if (*p) *p = w->next;
        if (w->block) alloc_free(d->memory, w->block);
        free(w->value_data);
        free(w);
    }
    pthread_mutex_unlock(&d->lock);
}

void *cuda_weights_data(const cuda_weights *w, int value) { return w->value_data[value]; }

/* ---- the module's table entries (cuda_module_entry.c gathers them) ---- */

static void format_uuid(const cudaUUID_t *u, char *out, size_t size) {
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
             b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

cinfer_status cuda_device_info(int ordinal, cinfer_device_info *out) {
    CINFER_TRY(check_ordinal(ordinal));
    struct cudaDeviceProp prop;
    CINFER_TRY(cuda_check(ordinal, cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
    memset(out, 0, sizeof *out);
    out->index = ordinal;
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    format_uuid(&prop.uuid, out->uuid, sizeof out->uuid);
    out->compute_major = prop.major;
    out->compute_minor = prop.minor;
    out->total_memory = prop.totalGlobalMem;
    out->multiprocessors = prop.multiProcessorCount;
    out->pci_bus = prop.pciBusID;
    out->pci_device = prop.pciDeviceID;
    out->pci_domain = prop.pciDomainID;
    size_t free_b = 0, total_b = 0;
    int previous = 0;
    cudaGetDevice(&previous);
    if (cudaSetDevice(ordinal) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) out->free_memory = free_b;
    cudaSetDevice(previous);
    pthread_mutex_lock(&devices_lock);
    out->failed = devices[ordinal] && atomic_load(&devices[ordinal]->failed);
    pthread_mutex_unlock(&devices_lock);
    return CINFER_OK;
}

cinfer_status cuda_memory_stats(int ordinal, cinfer_memory_stats *out) {
    cuda_device_state *d;
    CINFER_TRY(cuda_device_get(ordinal, &d));
    struct alloc_stats s, p;
    alloc_get_stats(d->memory, &s);
    alloc_get_stats(d->pinned, &p);
    memset(out, 0, sizeof *out);
    out->allocated_bytes = s.allocated_bytes;
    out->reserved_bytes = s.reserved_bytes;
    out->active_blocks = s.active_blocks;
    out->peak_allocated_bytes = s.peak_allocated_bytes;
    out->peak_reserved_bytes = s.peak_reserved_bytes;
    out->num_device_mallocs = s.num_device_mallocs;
    out->num_device_frees = s.num_device_frees;
    out->num_alloc_retries = s.num_alloc_retries;
    out->num_ooms = s.num_ooms;
    out->inactive_split_bytes = s.inactive_split_bytes;
    out->limit_bytes = alloc_get_limit(d->memory);
    out->pinned_reserved_bytes = p.reserved_bytes;
    return CINFER_OK;
}

cinfer_status cuda_set_memory_limit(int ordinal, size_t bytes, double fraction) {
    cuda_device_state *d;
    CINFER_TRY(cuda_device_get(ordinal, &d));
    if (bytes) return alloc_set_limit(d->memory, bytes);
    return alloc_set_limit_fraction(d->memory, fraction);
}

cinfer_status cuda_empty_cache(int ordinal) {
    cuda_device_state *d;
    CINFER_TRY(cuda_device_get(ordinal, &d));
    alloc_empty_cache(d->memory);
    alloc_empty_cache(d->pinned);
    return CINFER_OK;
}

cinfer_status cuda_host_alloc(int ordinal, size_t bytes, void **out) {
    cuda_device_state *d;
    CINFER_TRY(cuda_device_get(ordinal, &d));
    return alloc_malloc(d->pinned, bytes ? bytes : 1, 0, out);
}

void cuda_host_free(int ordinal, void *p) {
    cuda_device_state *d;
    if (p && cuda_device_get(ordinal, &d) == CINFER_OK) alloc_free(d->pinned, p);
}

bool cuda_has_op(const char *op_type) { return cuda_find_kernel(op_type) != NULL; }

