/* Triton's ModelConfig (the fields cinfer supports) read from config.pbtxt, auto-completed from the ONNX
 * model, checked against it, and printed as the JSON of GET /v2/models/{m}/config. */
#ifndef SERVE_CONFIG_MODEL_H
#define SERVE_CONFIG_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "serve_error.h"

typedef struct config_tensor {
    char *name;
    cinfer_dtype dtype;
    int ndims;                        /* -1 until known */
    int64_t dims[CINFER_MAX_DIMS];    /* without the batch dim; -1 = variable */
    char *format;                     /* FORMAT_NONE | FORMAT_NHWC | FORMAT_NCHW (inputs) */
    char *label_filename;             /* outputs */
    int is_shape_tensor, optional, allow_ragged_batch;
} config_tensor;

enum { CONFIG_KIND_AUTO = 0, CONFIG_KIND_GPU = 1, CONFIG_KIND_CPU = 2 };

typedef struct config_instance_group {
    char *name;
    int kind; /* CONFIG_KIND_* */
    int count;
    int *gpus;
    size_t num_gpus;
} config_instance_group;

typedef struct config_queue_policy {
    int timeout_action_delay;       /* 0 REJECT, 1 DELAY */
    uint64_t default_timeout_us;    /* 0 = none */
    int allow_timeout_override;
    uint32_t max_queue_size;        /* 0 = unbounded */
} config_queue_policy;

typedef struct config_dynamic_batching {
    int present;
    int64_t *preferred_batch_size;
    size_t num_preferred;
    uint64_t max_queue_delay_us;
    int preserve_ordering;
    uint32_t priority_levels;       /* 0 = one level */
    uint32_t default_priority_level;
    config_queue_policy default_queue_policy;
} config_dynamic_batching;

enum { CONFIG_VERSIONS_LATEST = 0, CONFIG_VERSIONS_ALL = 1, CONFIG_VERSIONS_SPECIFIC = 2 };

typedef struct config_version_policy {
    int kind;                       /* CONFIG_VERSIONS_* */
    uint32_t num_versions;          /* latest */
    int64_t *versions;              /* specific */
    size_t num_specific;
} config_version_policy;

typedef struct config_warmup_input {
    char *key;
    cinfer_dtype dtype;
    int ndims;
    int64_t dims[CINFER_MAX_DIMS];
    int random_data;                /* 0: zero_data */
} config_warmup_input;

typedef struct config_warmup {
    char *name;
    uint32_t batch_size, count;
    config_warmup_input *inputs;
    size_t num_inputs;
} config_warmup;

typedef struct config_param {
    char *key, *value;
} config_param;

typedef struct model_config {
    char *name, *platform, *backend, *default_model_filename;
    int max_batch_size;
    int has_max_batch_size;         /* written in config.pbtxt */
    config_tensor *inputs, *outputs;
    size_t num_inputs, num_outputs;
    config_instance_group *groups;
    size_t num_groups;
    config_dynamic_batching dynamic_batching;
    int has_sequence_batching, has_ensemble;
    config_version_policy version_policy;
    config_warmup *warmups;
    size_t num_warmups;
    int cuda_graphs, cuda_busy_wait_events, cuda_output_copy_stream;
    int cuda_graphs_given;      /* optimization.cuda.graphs was written: false turns the engine's CUDA graphs off */
    int decoupled, response_cache;
    config_param *params;
    size_t num_params;
    /* Triton settings that map onto the engine: parameters { key: "intra_op_thread_count" } (ONNX Runtime's CPU
     * threads; 0 = not given) and a TensorRT accelerator's precision_mode FP16 ("fp16"; "" = not given). The
     * server's cinfer_* parameters win over both. */
    int intra_op_threads;
    char accelerator_precision[8];
    char *ignored;              /* Triton fields accepted but not used, "path (line N), ...", logged at load; or NULL */
} model_config;

/* Whether the model batches (max_batch_size >= 1): its inputs and outputs then carry a leading batch dim that the
 * config's dims leave out, requests may be batched together, and inferences count rows. The one test of it. */
static inline bool config_batches(const model_config *cfg) { return cfg->max_batch_size > 0; }

#define CONFIG_PARAM_INTRA_OP_THREADS "intra_op_thread_count"

/* Parses config.pbtxt text into cfg (zeroed first). Unknown fields, wrong kinds of value and out-of-range
 * numbers are errors (400) with "<file>: line L, column C: field 'input.dims': ..." in e. */
int config_model_parse(const char *text, size_t len, const char *file, model_config *cfg, serve_error *e);
/* A config with defaults only (a model directory without config.pbtxt). */
int config_model_init_default(model_config *cfg, const char *name);
/* Fills what the config leaves out from the loaded model: inputs and outputs (names, types, dims) and, when the
 * config sets neither max_batch_size nor inputs and every input and output has a dynamic first dim,
 * max_batch_size = default_max_batch (0 disables) with dynamic_batching {} (as Triton's ONNX backend). `note`
 * receives a sentence saying what was chosen ("" when nothing). Then checks the config against the model (names,
 * types, dims, batch dim). Returns 0 or -1 with the reason in e (400). */
int config_model_complete(model_config *cfg, const cinfer_model *model, int default_max_batch, char *note,
                          size_t note_len, serve_error *e);
/* The config as Triton prints it (snake_case, every field, enums as strings). New reference. */
json_t *config_model_to_json(const model_config *cfg);
void config_model_free(model_config *cfg);

/* TYPE_FP32 <-> CINFER_DTYPE_FLOAT. Unknown names give CINFER_DTYPE_UNDEFINED; unknown dtypes "TYPE_INVALID". */
cinfer_dtype config_dtype_from_type_name(const char *name);
const char *config_type_name(cinfer_dtype t);

#endif
