/* One loaded version of a model: the engine model, its instances (each with one or more lanes: a session and a
 * worker thread each), its request queue and its statistics. Reference-counted: the repository holds one reference while the version is
 * served, and every HTTP request that uses it holds one until its response is encoded. */
#ifndef SERVE_MODEL_VERSION_H
#define SERVE_MODEL_VERSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "config_model.h"
#include "model_queue.h"
#include "scheduler.h"
#include "serve_error.h"
#include "stats.h"

typedef struct model_load_options {
    const char *device;     /* KIND_AUTO groups and the default group: "auto" (every visible GPU, else the CPU),
                             * "cpu", "cuda" (every visible GPU) or "cuda:N" */
    int threads;            /* session "threads" option; 0 = engine default */
    int default_max_batch;  /* max_batch_size chosen by auto-completion (0 = never batch) */
    int probe_max_batch;    /* --probe-max-batch: find the largest batch each GPU instance fits (docs/resilience.md) */
    const char *precision;  /* --precision: session option "precision" of models whose config does not set it */
    int disable_auto_complete; /* --disable-auto-complete-config: the config must list inputs and outputs; nothing is
                                * completed from the ONNX file (batching included) */
} model_load_options;

/* Config parameters passed to the engine as session options (docs/server.md): MODEL_PARAM_SESSION_PREFIX + a key
 * the engine lists (cinfer_session_option_info), e.g. "cinfer_precision" -> "precision". The engine checks the
 * values; a bad one fails the load with its message. MODEL_MAX_SESSION_OPTIONS: room for every option once, 64
 * dim.NAME options (the engine's most) and the probe's max_batch. */
#define MODEL_PARAM_SESSION_PREFIX "cinfer_"
#define MODEL_MAX_SESSION_OPTIONS 80

/* OOM adaptation (docs/resilience.md): after an execution runs out of memory the instance's batch cap drops to the
 * largest batch that then succeeded; every MODEL_OOM_RECOVER_AFTER successful executions in a row raise it by
 * max(1, max_batch / MODEL_OOM_RECOVER_DIVISOR) until it is back at the policy's max. The config parameter
 * MODEL_PARAM_OOM_RECOVER_AFTER overrides the count for one model. */
#define MODEL_OOM_RECOVER_AFTER 8
#define MODEL_OOM_RECOVER_DIVISOR 16
#define MODEL_PARAM_OOM_RECOVER_AFTER "cinfer_oom_recover_after"

/* Lanes (docs/server.md): an instance runs up to `num_lanes` batches at once, each on its own lane - a session (on
 * a GPU: its own stream, device buffers and graphs; the weights are shared), a worker thread, and its own pinned
 * gather buffers - so while one lane computes batch k, another gathers batch k+1 on the host and uploads it, and
 * the first lane's download and scatter overlap the second's compute. Default: MODEL_GPU_LANES on a GPU, 1 on the
 * CPU (whose session already uses every core); the config parameter MODEL_PARAM_LANES sets it for every instance. */
#define MODEL_PARAM_LANES "cinfer_instance_lanes"
#define MODEL_GPU_LANES 2
#define MODEL_MAX_LANES 8
/* Helper threads per GPU lane splitting its gather copy (copy_pool.h): 4-way with the lane's own thread. */
#define MODEL_GATHER_HELPERS 3

typedef struct model_lane {
    struct model_instance *inst;
    size_t sched_index;          /* the scheduler's entry for this lane */
    cinfer_session *session;
    pthread_t thread;
    int started;
    batcher_batch batch;         /* the batch being run */
    batcher_scratch scratch;     /* gathered inputs, reused */
    cinfer_tensor *inputs;       /* the batch's input tensors (num_inputs) */
    int output_device;           /* >= 0: outputs land in page-locked memory of this GPU (run_session); -1: malloc'd */
} model_lane;

typedef struct model_instance {
    struct model_version *owner;
    char name[64];               /* "<group name>_<k>", as Triton names instances */
    int kind;                    /* CONFIG_KIND_CPU or CONFIG_KIND_GPU */
    char device[32];
    model_lane *lanes;
    size_t num_lanes;            /* planned (each has a scheduler entry) */
    size_t lanes_running;        /* with a session and a worker: a GPU lane past the first whose session does not fit
                                  * in memory is left out (logged), so a tight device still serves with fewer lanes */
    unsigned test_delay_ms;      /* test-only slowdown per execution (CINFER_SERVE_TEST_SLOW_INSTANCE) */
    _Atomic uint64_t executions, inferences; /* batches run and the inferences in them */
    _Atomic uint64_t padded_rows; /* rows added to executions to reach a batch-size bucket (BATCHER_PARAM_BUCKETS) */
    _Atomic int busy;            /* lanes running a batch now */
    _Atomic int64_t batch_cap;   /* most inferences per execution now; 0 = the policy's max (no OOM seen) */
    pthread_mutex_t cap_lock;    /* the lanes' cap updates (read-modify-write of batch_cap and cap_successes) */
    uint64_t cap_successes;      /* successful executions since the cap last moved (under cap_lock) */
    _Atomic uint64_t oom_events; /* executions on this instance that ran out of memory */
    _Atomic uint64_t isolation_retries; /* batches of several requests refused as invalid data, rerun one by one */
    int64_t probed_max_batch;    /* --probe-max-batch result; 0 = not probed */
    _Atomic int device_failed;   /* 1 once its GPU reported a sticky error (cinfer_device_info.failed), or the test
                                  * fault device_fail marked it (faults.h) */
} model_instance;

typedef struct model_version {
    char *name;
    int64_t version;
    char version_str[24];
    model_config cfg;            /* completed from the model and checked against it */
    cinfer_model *model;
    model_instance *instances;
    size_t num_instances;
    scheduler sched;             /* request queue, dynamic batcher, instance scheduling */
    stats_model stats;
    uint64_t memory_bytes;       /* parameters held by the loaded model */
    _Atomic uint64_t oom_retries; /* executions that ran out of memory (cinfer_oom_retries_total) */
    _Atomic uint64_t isolation_retries; /* batches refused as invalid data, rerun one request at a time
                                         * (cinfer_isolation_retries_total) */
    uint64_t oom_recover_after;  /* successful executions before the cap is raised one step */
    _Atomic int refs;
    pthread_mutex_t ref_lock;
    pthread_cond_t ref_zero;
    int drained;                 /* set under ref_lock by the unref that took refs to zero */
} model_version;

/* Loads `path` (an .onnx file) as version `version` of model `name` with `cfg` (taken over, also on failure),
 * completes and checks the config, creates the instances and their lanes, runs the config's warm-ups on every lane
 * and starts one worker per lane. On success *out has one reference (the caller's). Errors name the model, version and cause. */
int model_version_load(const char *name, int64_t version, const char *path, model_config *cfg,
                       const model_load_options *opt, model_version **out, serve_error *e);
/* Queues r for execution; r->done is called later from a worker. Fails (503 or 429 full, 503 closing, 400 priority). */
int model_version_submit(model_version *mv, model_request *r, serve_error *e);
/* The version's model_stats[] entry (stats_model_json) plus "instance_stats": per instance its name, kind,
 * device, lanes, execution_count, inference_count and in_flight (batches running now) - cinfer's addition, showing
 * where the scheduler sent the batches. */
json_t *model_version_stats_json(const model_version *mv);
/* Asks the engine whether the GPUs of mv's instances have failed (cinfer_cuda_device_info(...).failed; CPU
 * instances are not asked, so CPU-only models never load CUDA) and marks those instances. Returns how many
 * instances are on a failed device (CPU instances count when the test fault device_fail marked them, faults.h). */
int model_version_check_devices(model_version *mv);
/* 1 with a 503 in e (naming the model and device) when an instance of mv is on a failed device: the version is
 * not ready and refuses inference until the process restarts. Reads the marks only (no engine call). */
int model_version_unavailable(const model_version *mv, serve_error *e);
void model_version_ref(model_version *mv);
void model_version_unref(model_version *mv);
/* Drains and frees a version already out of the repository's lookups: drops the caller's reference and waits until
 * no other holder is left (every request that looked the version up has been queued, run and answered, so none is
 * refused), then stops the workers and frees sessions and the model. NULL is a no-op. */
void model_version_retire(model_version *mv);

#endif
