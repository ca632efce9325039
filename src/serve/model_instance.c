/* The instances of a model version and where they run: instance_group resolved to devices (placement), each
 * instance's lanes and their scheduler entries, lanes dropped when they do not fit, --probe-max-batch, and the
 * failed-device marks that make a version unavailable. Runs at load (single-threaded) except the device checks,
 * which read and set the atomic marks from any thread (model_version_internal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_pool.h"
#include "faults.h"
#include "log.h"
#include "model_version_internal.h"

int model_version_check_devices(model_version *mv) {
    int failed = 0;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        int dev = instance_gpu(inst);
        if (dev < 0) { /* never asked; marked only by the test fault device_fail (faults.h) */
            failed += atomic_load(&inst->device_failed);
            continue;
        }
        cinfer_device_info info;
        if (!atomic_load(&inst->device_failed) && cinfer_cuda_device_info(dev, &info) == CINFER_OK && info.failed) {
            atomic_store(&inst->device_failed, 1);
            log_error("model '%s' version %s instance %s: device %s has failed (sticky CUDA error); the model is not "
                      "ready and the server reports not live until the process restarts", mv->name, mv->version_str,
                      inst->name, inst->device);
        }
        failed += atomic_load(&inst->device_failed);
    }
    return failed;
}

int model_version_unavailable(const model_version *mv, serve_error *e) {
    for (size_t i = 0; i < mv->num_instances; i++)
        if (atomic_load(&mv->instances[i].device_failed)) {
            serve_fail(e, SERVE_UNAVAILABLE, "model '%s' version %s is unavailable: its device %s failed with %s and "
                                             "refuses work until the server restarts", mv->name, mv->version_str,
                       mv->instances[i].device, instance_gpu(&mv->instances[i]) >= 0
                                                    ? "a sticky CUDA error"
                                                    : "an injected device failure (" FAULTS_ENV " device_fail)");
            return 1;
        }
    return 0;
}

/* The GPUs this process sees (cinfer_cuda_device_count); 0 with the reason in `why` when there are none. */
static int visible_gpus(char *why, size_t n) {
    int count = 0;
    if (cinfer_cuda_device_count(&count) != CINFER_OK) {
        snprintf(why, n, "%s", cinfer_last_error());
        return 0;
    }
    if (count <= 0) snprintf(why, n, "the CUDA driver reports no device");
    return count > 0 ? count : 0;
}

/* Resolves the config's instance groups to devices, as Triton does: KIND_CPU groups give `count` CPU instances;
 * KIND_GPU groups give `count` instances on each listed GPU, or on every visible GPU when none is listed; KIND_AUTO
 * groups (and the default group, one instance, used when the config has none) follow --device: "auto" means every
 * visible GPU, else the CPU; "cuda" every visible GPU; "cuda:N" GPU N; "cpu" the CPU. Resolved groups are written
 * back into the config (kind CPU/GPU and the GPU list), so GET .../config shows where instances went. */
int model_plan_instances(model_version *mv, const model_load_options *opt, serve_error *e) {
    model_config *cfg = &mv->cfg;
    if (!cfg->num_groups) { /* the default group, printed as Triton's auto-completion does */
        if (!(cfg->groups = calloc(1, sizeof *cfg->groups))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
        cfg->num_groups = 1;
        cfg->groups[0].count = 1;
        cfg->groups[0].kind = CONFIG_KIND_AUTO;
    }
    char why[512] = "";
    int ngpu = -1; /* asked lazily: CPU-only configs never touch CUDA */
    size_t total = 0;
    for (size_t g = 0; g < cfg->num_groups; g++) {
        config_instance_group *grp = &cfg->groups[g];
        const char *dev = opt->device && opt->device[0] ? opt->device : "auto";
        if (grp->kind == CONFIG_KIND_AUTO && !grp->num_gpus) {
            if (!strcmp(dev, "cpu")) {
                grp->kind = CONFIG_KIND_CPU;
            } else if (!strncmp(dev, "cuda:", 5)) {
                grp->kind = CONFIG_KIND_GPU;
                if (!(grp->gpus = malloc(sizeof *grp->gpus))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
                grp->gpus[0] = atoi(dev + 5);
                grp->num_gpus = 1;
            } else {
                if (ngpu < 0) ngpu = visible_gpus(why, sizeof why);
                if (!strcmp(dev, "cuda") && !ngpu)
                    return serve_fail(e, SERVE_BAD_REQUEST, "model '%s': --device cuda but no GPU is visible: %s", mv->name, why);
                grp->kind = ngpu ? CONFIG_KIND_GPU : CONFIG_KIND_CPU;
            }
        } else if (grp->kind == CONFIG_KIND_AUTO) {
            grp->kind = CONFIG_KIND_GPU; /* gpus listed */
        }
        if (grp->kind == CONFIG_KIND_GPU && !grp->num_gpus) {
            if (ngpu < 0) ngpu = visible_gpus(why, sizeof why);
            if (!ngpu)
                return serve_fail(e, SERVE_BAD_REQUEST, "model '%s' instance_group %zu is KIND_GPU but no GPU is visible: %s "
                                                        "(use KIND_CPU or KIND_AUTO)", mv->name, g, why);
            if (!(grp->gpus = malloc((size_t)ngpu * sizeof *grp->gpus))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
            for (int d = 0; d < ngpu; d++) grp->gpus[d] = d;
            grp->num_gpus = (size_t)ngpu;
        }
        total += (size_t)grp->count * (grp->kind == CONFIG_KIND_GPU ? grp->num_gpus : 1);
    }
    mv->instances = calloc(total, sizeof *mv->instances);
    if (!mv->instances) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    size_t k = 0;
    for (size_t g = 0; g < cfg->num_groups; g++) {
        const config_instance_group *grp = &cfg->groups[g];
        size_t ndev = grp->kind == CONFIG_KIND_GPU ? grp->num_gpus : 1;
        size_t c = 0;
        for (size_t d = 0; d < ndev; d++)
            for (int n = 0; n < grp->count; n++, c++) {
                model_instance *inst = &mv->instances[k++];
                pthread_mutex_init(&inst->cap_lock, NULL);
                inst->kind = grp->kind;
                if (grp->name) snprintf(inst->name, sizeof inst->name, "%s_%zu", grp->name, c);
                else snprintf(inst->name, sizeof inst->name, "%s_%zu_%zu", mv->name, g, c);
                if (grp->kind == CONFIG_KIND_CPU) snprintf(inst->device, sizeof inst->device, "cpu");
                else snprintf(inst->device, sizeof inst->device, "cuda:%d", grp->gpus[d]);
            }
    }
    mv->num_instances = total;
    return 0;
}

/* Lanes from `from` on do not run: their sessions (and the memory a failed warm-up left cached) and gather
 * helpers go now; their scheduler entries stay, never parked, so no batch goes to them. */
void model_drop_lanes(model_instance *inst, size_t from) {
    for (size_t l = from; l < inst->num_lanes; l++) {
        cinfer_session_free(inst->lanes[l].session);
        inst->lanes[l].session = NULL;
        copy_pool_destroy(inst->lanes[l].scratch.pool);
        inst->lanes[l].scratch.pool = NULL;
    }
    if (instance_gpu(inst) >= 0) cinfer_cuda_empty_cache(instance_gpu(inst));
}

/* Gives every instance its lanes (MODEL_PARAM_LANES, else MODEL_GPU_LANES on a GPU and 1 on the CPU) and fills
 * *lane_group (the instance of each scheduler entry, malloc'd) and *num_lanes (their count). */
int model_plan_lanes(model_version *mv, size_t **lane_group, size_t *num_lanes, serve_error *e) {
    long given = 0;
    for (size_t i = 0; i < mv->cfg.num_params; i++) {
        if (strcmp(mv->cfg.params[i].key, MODEL_PARAM_LANES) != 0) continue;
        const char *v = mv->cfg.params[i].value;
        char *end;
        given = strtol(v, &end, 10);
        if (end == v || *end || given < 1 || given > MODEL_MAX_LANES)
            return serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s' is '%s': give the batches each instance runs at "
                                                    "once, from 1 to %d", mv->name, MODEL_PARAM_LANES, v, MODEL_MAX_LANES);
    }
    size_t total = 0;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        size_t n = given ? (size_t)given : instance_gpu(inst) >= 0 ? MODEL_GPU_LANES : 1;
        if (!(inst->lanes = calloc(n, sizeof *inst->lanes))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
        inst->num_lanes = n;
        total += inst->num_lanes;
    }
    if (!(*lane_group = malloc(total * sizeof **lane_group))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        for (size_t l = 0; l < inst->num_lanes; l++, k++) {
            model_lane *lane = &inst->lanes[l];
            lane->inst = inst;
            lane->sched_index = k;
            lane->scratch.pinned = instance_gpu(inst) >= 0; /* batches gathered into page-locked memory */
            lane->scratch.device = instance_gpu(inst);
            lane->output_device = instance_gpu(inst); /* and its outputs come back into page-locked memory */
            /* a GPU lane's gather (tens of MB for an image batch) is split over helpers; without them it copies alone */
            if (instance_gpu(inst) >= 0) lane->scratch.pool = copy_pool_create(MODEL_GATHER_HELPERS);
            (*lane_group)[k] = i;
        }
    }
    *num_lanes = total;
    return 0;
}

/* --probe-max-batch: for each GPU instance of a batching model, the largest batch B in 1..max_batch_size for which
 * a session with option max_batch=B can be created on its device (the engine's capacity check: weights plus a
 * run's activations and io at batch B leave 20% of the device's memory, or its limit, free). Binary search; the
 * result is logged, shown in the statistics (instance_stats[].probed_max_batch) and becomes the instance's batch
 * cap when lower than the policy's max. CPU instances are not probed (host memory is not planned). */
void model_probe_max_batch(model_version *mv, const char *const *session_keys, const char *const *session_vals,
                           size_t num_session_options) {
    if (!config_batches(&mv->cfg)) {
        log_info("model '%s': --probe-max-batch skipped: the model does not batch (max_batch_size 0)", mv->name);
        return;
    }
    char bs[24];
    const char *keys[MODEL_MAX_SESSION_OPTIONS], *vals[MODEL_MAX_SESSION_OPTIONS];
    size_t num_options = num_session_options; /* < MODEL_MAX_SESSION_OPTIONS: session_options keeps a slot free */
    memcpy(keys, session_keys, num_options * sizeof *keys);
    memcpy(vals, session_vals, num_options * sizeof *vals);
    keys[num_options] = "max_batch";
    vals[num_options++] = bs;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        if (instance_gpu(inst) < 0) {
            log_info("model '%s' instance %s (%s): --probe-max-batch skipped: CPU instances are not probed (host memory "
                     "is not planned)", mv->name, inst->name, inst->device);
            continue;
        }
        int64_t lo = 0, hi = mv->cfg.max_batch_size; /* lo fits (0: nothing known to fit), hi + 1 does not */
        char last[512] = "";
        while (lo < hi) {
            int64_t mid = lo + (hi - lo + 1) / 2;
            /* the instance's lanes run a batch each at once: their activations together, the weights once (shared) */
            snprintf(bs, sizeof bs, "%" PRId64, mid * (int64_t)inst->lanes_running); /* >= 1 once loaded */
            cinfer_session *probe = NULL;
            if (cinfer_session_create(mv->model, inst->device, keys, vals, num_options, &probe) == CINFER_OK) {
                lo = mid;
            } else {
                hi = mid - 1;
                snprintf(last, sizeof last, "%s", cinfer_last_error());
            }
            cinfer_session_free(probe);
        }
        inst->probed_max_batch = lo;
        if (lo == 0) {
            log_warn("model '%s' instance %s (%s): --probe-max-batch found no batch that fits with 20%% headroom: %s",
                     mv->name, inst->name, inst->device, last);
            continue;
        }
        log_info("model '%s' instance %s (%s): --probe-max-batch: the largest batch that fits with 20%% headroom is %" PRId64
                 " (max_batch_size %d; per lane, %zu lane%s running at once)%s%s", mv->name, inst->name, inst->device, lo,
                 mv->cfg.max_batch_size, inst->lanes_running, inst->lanes_running == 1 ? "" : "s",
                 last[0] ? "; the next size up: " : "", last);
        if (lo < mv->sched.policy.max_batch) {
            pthread_mutex_lock(&inst->cap_lock);
            model_instance_set_cap_locked(inst, lo);
            pthread_mutex_unlock(&inst->cap_lock);
        }
    }
}
