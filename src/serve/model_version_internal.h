/* Private to the model version: what model_version.c (load, references, retirement), model_instance.c (placement,
 * lanes, probe, failed devices) and model_execute.c (the workers, the out-of-memory cap) share.
 *
 * Ownership: the version owns its instances, each instance its lanes, each lane its session, batch, gather
 * scratch (with its copy helpers) and input tensor array. model_version_load creates them all before any worker
 * starts, and only free_version (model_version.c) frees them, after the workers were joined.
 *
 * Lock discipline:
 *  - Everything set during load (the config, the instances and their lanes, devices, the lanes' scheduler entries,
 *    lanes_running, probed_max_batch, oom_recover_after) is read-only once the first worker starts.
 *  - A lane's session, batch, scratch and inputs are touched only by that lane's worker thread.
 *  - The scheduler (scheduler.h) has its own lock; a worker calls into it holding no other lock.
 *  - inst->cap_lock guards the read-modify-write of batch_cap and cap_successes (lanes of one instance move the cap
 *    concurrently); batch_cap is atomic so statistics read it without the lock. Lock order: cap_lock, then the
 *    scheduler's lock (model_instance_set_cap_locked calls scheduler_set_cap).
 *  - The counters (executions, inferences, padded_rows, busy, oom_events, oom_retries, isolation_retries) are
 *    atomics, never locked.
 *  - device_failed goes from 0 to 1 once, from any thread, and never back: a failed device stays failed until the
 *    process restarts.
 *  - refs is atomic; ref_lock guards drained, which the unref that takes refs to zero sets and the retiring thread
 *    waits for (ref_zero). Retirement order: out of the repository's lookups, drained (every request holding a
 *    reference answered), then the scheduler closed, the workers joined, and freed; nothing is refused on the way.
 *
 * Invariants: every request a worker takes from the scheduler is completed exactly once (scheduler_complete), as
 * success or failure, before the worker takes the next batch; an out-of-memory retry or a failure-isolation rerun
 * never completes a request twice (execute reports an outcome other than EXEC_ANSWERED only with nothing
 * completed), and a rerun request runs alone, in the batch's order, at most once more. */
#ifndef SERVE_MODEL_VERSION_INTERNAL_H
#define SERVE_MODEL_VERSION_INTERNAL_H

#include <stdlib.h>
#include <string.h>

#include "model_version.h"

/* The CUDA device index of a GPU instance ("cuda:N"), -1 for a CPU instance. */
static inline int instance_gpu(const model_instance *inst) {
    return inst->kind == CONFIG_KIND_GPU && !strncmp(inst->device, "cuda:", 5) ? atoi(inst->device + 5) : -1;
}

/* ---- model_instance.c: placement, lanes, probe (called from model_version_load, single-threaded) ---- */

/* Resolves the config's instance groups to devices and creates mv->instances (written back into the config). */
int model_plan_instances(model_version *mv, const model_load_options *opt, serve_error *e);
/* Gives every instance its lanes; *lane_group (malloc'd) maps each scheduler entry to its instance. */
int model_plan_lanes(model_version *mv, size_t **lane_group, size_t *num_lanes, serve_error *e);
/* Frees the sessions and copy helpers of inst's lanes from `from` on (they do not fit and will not run). */
void model_drop_lanes(model_instance *inst, size_t from);
/* --probe-max-batch over the GPU instances, with the lanes' session options (fewer than MODEL_MAX_SESSION_OPTIONS:
 * the probe adds max_batch); lowers an instance's batch cap to what fits. */
void model_probe_max_batch(model_version *mv, const char *const *session_keys, const char *const *session_vals,
                           size_t num_session_options);

/* ---- model_execute.c: the workers and the batch cap ---- */

/* Sets the instance's batch cap (0 = none) and tells the scheduler (for each of its lanes). Caller holds cap_lock. */
void model_instance_set_cap_locked(model_instance *inst, int64_t cap);
/* A lane's worker thread (arg: its model_lane): runs batches until the scheduler is closed and drained. */
void *model_lane_worker(void *arg);

#endif
