/* KServe v2 inference codec: parses an infer request body (JSON, or JSON + binary tensors), resolves inputs and
 * outputs that live in system shared-memory regions, binds the inputs to a model config (names, datatypes,
 * shapes, sizes), and encodes the response (JSON and binary outputs; shared-memory outputs written in place). */
#ifndef SERVE_KSERVE_CODEC_H
#define SERVE_KSERVE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "config_model.h"
#include "serve_error.h"
#include "shm.h"

/* A tensor held in a system shared-memory region: the parameters shared_memory_region, shared_memory_offset
 * (default 0) and shared_memory_byte_size of an input or a requested output. */
typedef struct kserve_shm_ref {
    char *region;            /* NULL: not in shared memory */
    uint64_t offset, byte_size;
    shm_region *held;        /* reference taken by kserve_resolve_shm, dropped by kserve_infer_request_free */
} kserve_shm_ref;

typedef struct kserve_input {
    char *name;
    cinfer_dtype dtype;      /* CINFER_DTYPE_STRING for BYTES */
    int ndim;
    int64_t shape[CINFER_MAX_DIMS];
    const void *data;        /* little-endian elements; BYTES: 4-byte length + bytes per element */
    size_t byte_size;
    void *owned;             /* data converted from JSON or read from shared memory, freed with the request */
    int owned_pinned;        /* owned is page-locked memory of the request's pinned_device */
    kserve_shm_ref shm;      /* data in shared memory: resolved by kserve_resolve_shm, read by kserve_bind_inputs */
} kserve_input;

typedef struct kserve_output {
    char *name;
    int binary;              /* -1: not said (request default applies), 0 JSON, 1 binary */
    kserve_shm_ref shm;      /* written into shared memory instead of the response (shm.byte_size = capacity) */
} kserve_output;

typedef struct kserve_infer_request {
    char *id;                /* echoed when given */
    kserve_input *inputs;
    size_t num_inputs;
    kserve_output *outputs;  /* NULL/0 = every output */
    size_t num_outputs;
    int binary_data_output;  /* request parameter, default 0 */
    uint64_t priority;
    uint64_t timeout_us;
    int raw;                 /* Inference-Header-Content-Length: 0 - the body is the one input's bytes */
    const void *raw_data;
    size_t raw_size;
    int pinned_device;       /* >= 0: shared-memory inputs are read into page-locked memory of this GPU, so that
                              * its upload is a DMA straight from the one copy; -1 (parsing's default): ordinary
                              * memory. Set between parsing and binding. */
} kserve_infer_request;

/* Parses an infer request. header_len is the Inference-Header-Content-Length value, or -1 when absent (the
 * body is all JSON). Binary tensor data is referenced in place: `body` must outlive the request.
 * Errors are 400 with a message naming the input and field. */
int kserve_parse_infer(const char *body, size_t len, long long header_len, kserve_infer_request *out, serve_error *e);
/* Once per process, before the HTTP threads start: routes jansson's allocations so that each parse takes its JSON
 * nodes from a per-thread arena (kserve_codec.c). Without it parsing works the same, with malloc. */
void kserve_codec_init(void);
void kserve_infer_request_free(kserve_infer_request *r);

/* Resolves the request's shared-memory references against `reg` (after kserve_parse_infer, before
 * kserve_bind_inputs): each such input and output holds its region and its range is checked against the
 * window (an input's byte size = shared_memory_byte_size, checked against the shape by binding). The regions
 * stay open until kserve_infer_request_free, even if unregistered meanwhile. Nothing is read yet.
 * Errors are 400 naming the input or output and the region: unknown region, range past the region's end. */
int kserve_resolve_shm(kserve_infer_request *r, shm_registry *reg, serve_error *e);

/* Checks the request against the model config and builds the engine tensors for every config input. An input in
 * shared memory is read here (shm_region_read, once its byte size matches the shape; a BYTES input before its
 * elements are counted) into a 64-byte-aligned buffer the request owns: the one copy out of the region, after
 * which nothing reads the region; a region whose object was shrunk is a 400 naming it.
 * *batch_size receives the first dim for batching models (else 1). `tensors` has room for cfg->num_inputs.
 * Also checks that requested outputs exist, that FP16/BF16/BYTES outputs are not asked for as JSON, and that a
 * shared-memory output's range can hold the output when the config fixes its size. */
int kserve_bind_inputs(kserve_infer_request *r, const model_config *cfg, cinfer_tensor *tensors, int64_t *batch_size,
                       serve_error *e);

/* Encodes the response for `outputs` (every model output, in model order; only the requested ones are sent).
 * Shared-memory outputs are written into their region (shm_region_write: one copy, as a binary output's copy into
 * the body) and listed without data (Triton's way); one that does not fit its shared_memory_byte_size, or whose
 * region's object was shrunk below the range, is a 400. *body is malloc'ed; *json_len is the length of the JSON part when
 * binary data follows, else 0. */
int kserve_encode_response(const kserve_infer_request *r, const char *model_name, const char *version,
                           const cinfer_tensor *outputs, size_t num_outputs, char **body, size_t *body_len,
                           size_t *json_len, serve_error *e);

/* "FP32" <-> CINFER_DTYPE_FLOAT ("BYTES" <-> CINFER_DTYPE_STRING); unknown -> UNDEFINED / "INVALID". */
cinfer_dtype kserve_dtype_from_name(const char *name);
const char *kserve_dtype_name(cinfer_dtype t);
/* Element count of a shape; -1 when a dim is negative or the count overflows. */
int64_t kserve_numel(const int64_t *shape, int ndim);

#endif
