/* cinfer public C API: status codes, tensors, models, sessions. The only header users include.
 *
 * Conventions (after ONNX Runtime's C API):
 *  - every fallible call returns a cinfer_status; CINFER_OK is 0. On failure the message, naming the
 *    model, node, input, field or dtype it is about, is read with cinfer_last_error() (per thread).
 *  - opaque handles come in create/free pairs; *_free(NULL) is a no-op.
 *  - options that will grow are key/value strings so the ABI stays stable.
 *
 * Typical use:
 *     cinfer_model *m;   cinfer_model_load("model.onnx", &m);
 *     cinfer_session *s; cinfer_session_create(m, "cpu", NULL, NULL, 0, &s);
 *     cinfer_tensor in = {.name = "x", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 4}, .data = buf};
 *     cinfer_tensor out[1];
 *     cinfer_session_run(s, &in, 1, out, 1);  ...  cinfer_tensor_free_data(&out[0]);
 *     cinfer_session_free(s); cinfer_model_free(m);
 */
#ifndef CINFER_H
#define CINFER_H

#include <stddef.h>
#include <stdint.h>

/* Marks what libcinfer.so exports: the engine is built with hidden visibility, so the functions marked here are
 * its whole ABI and everything else stays inside the library. */
#if defined(__GNUC__) || defined(__clang__)
#define CINFER_API __attribute__((visibility("default")))
#else
#define CINFER_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define CINFER_VERSION_MAJOR 0
#define CINFER_VERSION_MINOR 1
#define CINFER_VERSION_PATCH 0

/* Most dimensions a tensor may have. */
#define CINFER_MAX_DIMS 8

typedef enum cinfer_status {
    CINFER_OK = 0,
    CINFER_ERR_INVALID_ARGUMENT = 1, /* caller passed a wrong name, dtype, shape or option */
    CINFER_ERR_INVALID_MODEL = 2,    /* the model file is malformed or inconsistent */
    CINFER_ERR_UNSUPPORTED = 3,      /* valid, but an op, dtype or attribute cinfer does not implement */
    CINFER_ERR_OUT_OF_MEMORY = 4,
    CINFER_ERR_IO = 5,        /* a file could not be read or written */
    CINFER_ERR_RUNTIME = 6,   /* a kernel or backend failed while running */
    CINFER_ERR_NOT_FOUND = 7, /* a name or index that does not exist */
} cinfer_status;

/* Element types. Values equal ONNX TensorProto.DataType so they can be passed through. */
typedef enum cinfer_dtype {
    CINFER_DTYPE_UNDEFINED = 0,
    CINFER_DTYPE_FLOAT = 1,
    CINFER_DTYPE_UINT8 = 2,
    CINFER_DTYPE_INT8 = 3,
    CINFER_DTYPE_UINT16 = 4,
    CINFER_DTYPE_INT16 = 5,
    CINFER_DTYPE_INT32 = 6,
    CINFER_DTYPE_INT64 = 7,
    CINFER_DTYPE_STRING = 8,
    CINFER_DTYPE_BOOL = 9,
    CINFER_DTYPE_FLOAT16 = 10,
    CINFER_DTYPE_DOUBLE = 11,
    CINFER_DTYPE_UINT32 = 12,
    CINFER_DTYPE_UINT64 = 13,
    CINFER_DTYPE_BFLOAT16 = 16,
} cinfer_dtype;

/* A dense, row-major tensor. For inputs the caller owns `data`; `name` selects the model input
 * (NULL means "by position"). Outputs are filled by cinfer_session_run with data the caller
 * releases with cinfer_tensor_free_data. */
typedef struct cinfer_tensor {
    const char *name;
    cinfer_dtype dtype;
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];
    void *data;
} cinfer_tensor;

/* Static description of a model input or output. A dim of -1 is dynamic; dim_names[i] then holds
 * its symbolic name ("batch") or NULL. ndim is -1 when the model gives no shape. Strings belong
 * to the model. */
typedef struct cinfer_value_info {
    const char *name;
    cinfer_dtype dtype;
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];
    const char *dim_names[CINFER_MAX_DIMS];
} cinfer_value_info;

/* Load-time facts about a model (after graph optimisation). */
typedef struct cinfer_model_stats {
    int64_t opset;               /* default-domain opset the model imports */
    size_t num_nodes;            /* nodes left after optimisation */
    size_t num_nodes_original;   /* nodes in the file */
    size_t num_parameters;       /* elements in initializers and folded constants */
    size_t parameter_bytes;
    size_t num_host_shape_nodes; /* nodes evaluated on the host while planning (shape subgraphs) */
} cinfer_model_stats;

typedef struct cinfer_model cinfer_model;
typedef struct cinfer_session cinfer_session;

/* ---- library ---- */
CINFER_API const char *cinfer_version(void);                 /* "0.1.0" */
CINFER_API const char *cinfer_last_error(void);              /* message of this thread's last failure, or "" */
CINFER_API const char *cinfer_status_name(cinfer_status s);  /* "CINFER_ERR_UNSUPPORTED" */
CINFER_API const char *cinfer_dtype_name(cinfer_dtype t);    /* "float32", "int64", ... */
CINFER_API size_t cinfer_dtype_size(cinfer_dtype t);         /* bytes per element; 0 for undefined/string */

/* ---- models ---- */
/* Loads an ONNX model file. External data files are resolved relative to the model's folder and
 * may not escape it. An unsupported construct fails naming its nodes (name, op, domain, opset: the first 20 and
 * their count) at once. */
CINFER_API cinfer_status cinfer_model_load(const char *path, cinfer_model **out);
/* Same from bytes in memory; base_dir (may be NULL) is where external data files live. */
CINFER_API cinfer_status cinfer_model_load_from_memory(const void *bytes, size_t size, const char *base_dir,
                                                       cinfer_model **out);
CINFER_API void cinfer_model_free(cinfer_model *model);
/* A node of a model file as cinfer_model_unsupported_nodes reports it: its name, op type, domain ("" is the default
 * ONNX domain) and the opset version the model imports that domain at. The strings live until the callback returns. */
typedef struct cinfer_node_ref {
    const char *name;
    const char *op_type;
    const char *domain;
    int64_t opset;
} cinfer_node_ref;
/* Every node of the ONNX file at `path` that cinfer cannot run, all at once (cinfer_model_load names the first 20):
 * `visit` (may be NULL) is called for each in graph order, *count (may be NULL) gets how many. Returns CINFER_OK when
 * the file decodes, however many nodes are unsupported; a file that does not decode fails as cinfer_model_load does. */
CINFER_API cinfer_status cinfer_model_unsupported_nodes(const char *path,
                                                        void (*visit)(const cinfer_node_ref *node, void *ctx),
                                                        void *ctx, size_t *count);

CINFER_API size_t cinfer_model_num_inputs(const cinfer_model *model);
CINFER_API size_t cinfer_model_num_outputs(const cinfer_model *model);
CINFER_API cinfer_status cinfer_model_input_info(const cinfer_model *model, size_t index, cinfer_value_info *out);
CINFER_API cinfer_status cinfer_model_output_info(const cinfer_model *model, size_t index, cinfer_value_info *out);
CINFER_API cinfer_status cinfer_model_get_stats(const cinfer_model *model, cinfer_model_stats *out);
/* Op histogram of the optimised graph: entry `index` < cinfer_model_num_op_types(). */
CINFER_API size_t cinfer_model_num_op_types(const cinfer_model *model);
CINFER_API cinfer_status cinfer_model_op_type(const cinfer_model *model, size_t index, const char **op_type,
                                              size_t *count);

/* ---- ops ---- */
/* Number of op types cinfer implements, and their names with a comma list of backends ("cpu", or "cpu,cuda" where
 * the CUDA module loads: an NVIDIA driver is present). */
CINFER_API size_t cinfer_num_supported_ops(void);
CINFER_API cinfer_status cinfer_supported_op(size_t index, const char **op_type, const char **backends);
/* The op table `cinfer ops` prints: one entry per op a model may use. domain "ai.onnx" (the default domain; opsets
 * first_opset..last_opset of the pinned onnx schema history; files older than opset 13 are upgraded at load),
 * "com.microsoft" (onnxruntime's contrib ops, domain version 1, lowered at load onto ONNX ops) or "cinfer" (the
 * engine's own ops that its passes make; opsets 0). backends as cinfer_supported_op gives them. */
typedef struct cinfer_op_info {
    const char *op_type;
    const char *domain;
    int64_t first_opset, last_opset;
    const char *backends;
} cinfer_op_info;
CINFER_API size_t cinfer_num_op_entries(void);
CINFER_API cinfer_status cinfer_op_entry(size_t index, cinfer_op_info *out);

/* ---- CUDA devices ----
 * The CUDA backend is a module (libcinfer_cuda.so beside libcinfer.so, or the path in CINFER_CUDA_MODULE)
 * loaded on first use, so CPU-only programs never load CUDA. Devices are numbered as the process sees them:
 * CUDA_VISIBLE_DEVICES (indices, GPU-<uuid> or MIG-<uuid>) applies. Without the module, a driver or a device,
 * these calls fail with a message saying which. */
typedef struct cinfer_device_info {
    int index;                /* ordinal as this process sees it */
    char name[256];
    char uuid[96];            /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (a MIG instance's own UUID under MIG) */
    int compute_major, compute_minor;
    size_t total_memory, free_memory;
    int multiprocessors;
    int pci_bus, pci_device, pci_domain;
    int failed;               /* 1 after a sticky CUDA error: the device refuses work until the process restarts */
} cinfer_device_info;
CINFER_API cinfer_status cinfer_cuda_device_count(int *count);
CINFER_API cinfer_status cinfer_cuda_device_info(int device, cinfer_device_info *out);

/* The device's caching allocator (weights, activation arenas, workspaces of every session on it). */
typedef struct cinfer_memory_stats {
    size_t allocated_bytes;      /* held by live allocations */
    size_t reserved_bytes;       /* device memory the cache holds (allocated + cached) */
    size_t active_blocks;
    size_t peak_allocated_bytes;
    size_t peak_reserved_bytes;
    size_t num_device_mallocs;   /* cudaMalloc calls */
    size_t num_device_frees;
    size_t num_alloc_retries;    /* requests that had to free the cache and retry */
    size_t num_ooms;             /* requests that failed */
    size_t inactive_split_bytes; /* free bytes inside partly used segments (fragmentation) */
    size_t limit_bytes;          /* cap on reserved bytes, 0 = none */
    size_t pinned_reserved_bytes; /* pinned host staging memory held */
} cinfer_memory_stats;
CINFER_API cinfer_status cinfer_cuda_memory_stats(int device, cinfer_memory_stats *out);
/* Caps the device's reserved memory: bytes > 0, else a fraction (0, 1] of its total; 0 and 0 remove the cap. */
CINFER_API cinfer_status cinfer_cuda_set_memory_limit(int device, size_t bytes, double fraction);
/* Returns cached, unused device memory to the driver. */
CINFER_API cinfer_status cinfer_cuda_empty_cache(int device);

/* Page-locked host memory from CUDA device `device`'s pinned cache (cudaHostAlloc'd once, then reused), for buffers
 * a GPU session reads inputs from or writes outputs to on every run: the session's copies from and to page-locked
 * memory go straight to the DMA engines, skipping its staging buffer and the memcpy into it. Counted in
 * cinfer_memory_stats.pinned_reserved_bytes. CINFER_ERR_UNSUPPORTED (the reason as the last error) without the
 * CUDA module, a driver or the device: use ordinary memory then. Free with cinfer_cuda_host_free on the same
 * device; NULL is ignored. */
CINFER_API cinfer_status cinfer_cuda_host_alloc(int device, size_t bytes, void **out);
CINFER_API void cinfer_cuda_host_free(int device, void *p);

/* ---- sessions ---- */
/* Creates a session running `model` on `device`: "cpu", or "cuda" / "cuda:N" (CUDA device N, default 0).
 * Options are n key/value string pairs (a repeated key: the last wins); an unknown key or a value the option does
 * not take fails with CINFER_ERR_INVALID_ARGUMENT naming both. The options (CPU threads, precision, determinism,
 * CUDA graphs, profiling, timelines, capacity planning, ...), what each takes, its default and what it does are
 * listed by cinfer_session_option_info below, which `cinfer options` and `cinfer --help` print; cinfer-server
 * passes a model's config parameter cinfer_<key> on as option <key>. */
CINFER_API cinfer_status cinfer_session_create(const cinfer_model *model, const char *device,
                                               const char *const *option_keys, const char *const *option_values,
                                               size_t num_options, cinfer_session **out);
CINFER_API void cinfer_session_free(cinfer_session *session);

/* The session options, from the one table the engine parses them with: entry `index` < cinfer_num_session_options()
 * (CINFER_ERR_NOT_FOUND past the end). Strings are the library's and live as long as the process. */
typedef struct cinfer_option_info {
    const char *key;           /* "threads"; for a family of keys, their common prefix ("dim.") and is_prefix 1 */
    int is_prefix;             /* 1: every key that is `key` followed by a name ("dim.batch") is this option */
    const char *type;          /* "bool", "int" or "enum" */
    const char *values;        /* what the option takes: "0 or 1", "0 to 1024", ">= 1", "fp32, tf32, fp16 or bf16" */
    const char *default_value; /* the value a session has without the option; "none": left out, the option is off */
    const char *doc;           /* what it does, one paragraph */
} cinfer_option_info;
CINFER_API size_t cinfer_num_session_options(void);
CINFER_API cinfer_status cinfer_session_option_info(size_t index, cinfer_option_info *out);

/* Runs the model. `inputs` give every model input (matched by name, or by position when name is NULL).
 * `outputs` receives num_outputs tensors in model output order (num_outputs must equal
 * cinfer_model_num_outputs); free each with cinfer_tensor_free_data. Plans are cached per input shape, so
 * the first run at a new shape plans memory and later runs reuse the plan.
 * Thread safety: runs on one session are serialised; for parallel runs create one session per thread
 * (sessions share the model, which is read-only once loaded). */
CINFER_API cinfer_status cinfer_session_run(cinfer_session *session, const cinfer_tensor *inputs, size_t num_inputs,
                                            cinfer_tensor *outputs, size_t num_outputs);

/* Plans for the given input shapes without running and reports the activation arena size in bytes
 * (the planned peak of intermediate tensors). Input data may be NULL except for inputs whose values
 * decide shapes (rare: e.g. a Reshape target fed as a model input). */
CINFER_API cinfer_status cinfer_session_plan_memory(cinfer_session *session, const cinfer_tensor *inputs,
                                                    size_t num_inputs, size_t *arena_bytes);

/* Names of the nodes that the last plan evaluated on the host (shape subgraphs), one per call. */
CINFER_API size_t cinfer_session_num_host_nodes(const cinfer_session *session);
CINFER_API const char *cinfer_session_host_node(const cinfer_session *session, size_t index);

/* Device sessions: the nodes whose op the device has no kernel for, which run on the CPU kernels inside the session
 * (their inputs copied to the host and their outputs back, as onnxruntime does; listed once on stderr when the
 * session is made), one name per call in execution order; 0 and NULL on CPU sessions. A plan holding such a node
 * runs without a CUDA graph (counted in cinfer_run_stats.graph_fallbacks). */
CINFER_API size_t cinfer_session_num_fallback_nodes(const cinfer_session *session);
CINFER_API const char *cinfer_session_fallback_node(const cinfer_session *session, size_t index);

/* Profile of node `index` (0 <= index < cinfer_model_stats.num_nodes, in execution order) summed over the
 * runs so far: its name, op type, total milliseconds and number of executions (0 for nodes evaluated on the
 * host while planning). Needs the session option profile=1. */
CINFER_API cinfer_status cinfer_session_node_profile(const cinfer_session *session, size_t index,
                                                     const char **node_name, const char **op_type, double *total_ms,
                                                     uint64_t *calls);

/* Counters of the session's last run: host<->device copies it made (0 on the CPU). A run copies each model
 * input to the device once and each output back once; values the host already knows (shape subgraphs,
 * constants) are not copied per run. */
typedef struct cinfer_run_stats {
    uint64_t host_to_device_copies;
    uint64_t device_to_host_copies;
    uint64_t host_to_device_bytes;
    uint64_t device_to_host_bytes;
    /* CUDA Graphs (session option cuda_graphs, on by default on GPUs): graph_replayed is 1 when the last run
     * replayed a captured graph; graph_captures and graph_fallbacks count, over the session's life, the plans
     * captured and the plans that could not be captured and run with plain launches. */
    uint64_t graph_replayed;
    uint64_t graph_captures;
    uint64_t graph_fallbacks;
    /* cinfer_session_run_device: 1 when the last run's nodes read the caller's inputs and wrote its outputs in
     * place (plain launches) because copying them through the plan's own buffers would have cost more; 0 when it
     * copied (and replayed the plan's graph, where it has one). */
    uint64_t caller_buffers_bound;
} cinfer_run_stats;
CINFER_API cinfer_status cinfer_session_last_run_stats(const cinfer_session *session, cinfer_run_stats *out);

/* The timeline of the session's last run (session option timeline=1): one span per host-to-device copy, device-to-
 * device copy, device-to-host copy and stretch of compute (a CUDA graph replay, or the node launches between two
 * copies), in the order they were queued. Times are microseconds from the device's timeline epoch (the first
 * timeline session on the device), so spans of sessions on one device share a clock: two sessions running at once
 * show how their work overlaps. Within a run times are exact to CUDA events' 0.5 us; the run's start is a float
 * milliseconds offset from the epoch, so it loses resolution as the process ages (about 1 us after 16 s, 8 us after
 * two minutes). Waits for the run's events when the run was queued without a wait (cinfer_session_run_device).
 * *count is the number of spans of the run (at most CINFER_TIMELINE_MAX_SPANS are kept); the first
 * min(*count, capacity) are written. CINFER_ERR_INVALID_ARGUMENT when the option is off. */
typedef enum cinfer_span_kind {
    CINFER_SPAN_UPLOAD = 0,      /* host to device */
    CINFER_SPAN_COMPUTE = 1,     /* the model's kernels */
    CINFER_SPAN_DOWNLOAD = 2,    /* device to host */
    CINFER_SPAN_DEVICE_COPY = 3, /* device to device (cinfer_session_run_device's inputs and outputs) */
} cinfer_span_kind;
typedef struct cinfer_span {
    int kind;     /* cinfer_span_kind */
    int stream;   /* 0: the session's stream; 1, 2: its upload and download streams (chunked copies) */
    uint64_t bytes; /* copies: bytes moved; compute: 0 */
    double start_us, end_us;
} cinfer_span;
#define CINFER_TIMELINE_MAX_SPANS 4096
CINFER_API cinfer_status cinfer_session_timeline(cinfer_session *session, cinfer_span *spans, size_t capacity,
                                                 size_t *count);

/* cinfer_session_run with the caller's output buffers: outputs[i] describe what the model produces for these
 * inputs (dtype, ndim, dims: cinfer_session_output_info fills them; a mismatch is refused naming the output, what
 * the inputs give and what was described) and point to enough host memory, which the run fills; nothing is
 * allocated and nothing is to be freed. On a GPU, page-locked buffers (cinfer_cuda_host_alloc, cudaHostAlloc) are
 * filled by DMA straight from device memory; pageable ones through the staging buffer. */
CINFER_API cinfer_status cinfer_session_run_into(cinfer_session *session, const cinfer_tensor *inputs,
                                                 size_t num_inputs, cinfer_tensor *outputs, size_t num_outputs);

/* Device-resident io: inputs and outputs already in the session's memory (CUDA device pointers on the session's
 * device; host pointers for "cpu"), so nothing crosses PCIe. outputs[i] describe what the model produces for
 * these inputs (dtype, ndim, dims: cinfer_session_output_info fills them) and point to enough memory. The work is
 * queued on `stream` (a cudaStream_t; NULL = the legacy default stream): the session's work starts after what is
 * already queued there, and later work on `stream` sees the outputs. The call returns without waiting for the
 * GPU (the CPU backend runs synchronously). Inputs whose values decide shapes need cinfer_session_run. */
CINFER_API cinfer_status cinfer_session_run_device(cinfer_session *session, const cinfer_tensor *inputs,
                                                   size_t num_inputs, cinfer_tensor *outputs, size_t num_outputs,
                                                   void *stream);
/* Output names, dtypes and shapes (data left NULL) for these input shapes; plans if needed. Input data may be
 * NULL. */
CINFER_API cinfer_status cinfer_session_output_info(cinfer_session *session, const cinfer_tensor *inputs,
                                                    size_t num_inputs, cinfer_tensor *outputs, size_t num_outputs);

/* Releases output data allocated by cinfer_session_run and clears t->data. */
CINFER_API void cinfer_tensor_free_data(cinfer_tensor *t);

/* ---- .npy files (numpy format 1.0-3.0, little-endian, C order; what `cinfer run` reads and writes) ---- */
/* Reads a .npy file into *out: dtype, ndim, dims and data (name NULL); release the data with
 * cinfer_tensor_free_data. Fails naming the file when it is missing or malformed, Fortran-ordered, or of a dtype other
 * than little-endian numeric or bool. */
CINFER_API cinfer_status cinfer_npy_read(const char *path, cinfer_tensor *out);
/* Writes t (dtype, ndim, dims, data; name unused) as a version 1.0 .npy file. */
CINFER_API cinfer_status cinfer_npy_write(const char *path, const cinfer_tensor *t);

#ifdef __cplusplus
}
#endif
#endif /* CINFER_H */
