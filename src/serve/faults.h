/* Test-only fault injection for the server (docs/resilience.md): makes chosen executions fail as if the engine had
 * run out of memory or a kernel had failed, so the OOM adaptation and the error paths can be tested on a CPU.
 *
 * Off unless the environment variable CINFER_SERVE_FAULTS is set (production never sets it; the server logs a
 * warning at every model load while it is on). Its value is a list of rules, or "@<path>": a file holding the
 * rules, read again before every execution (a missing or empty file means no faults), so a test can switch faults
 * on and off within one server run. Rules are separated by commas, semicolons or white space:
 *   oom_above=<model>:<n>    an execution of <model> with more than <n> inferences fails with CINFER_ERR_OUT_OF_MEMORY
 *   run_error=<model>:<id>   an execution of <model> holding a request whose "id" is <id> fails with CINFER_ERR_RUNTIME
 *   device_fail=<model>:<id> as run_error, and the instance's device is then marked failed as after a sticky CUDA
 *                            error (model not ready, 503, liveness 400): the failed-GPU path on a CPU instance
 * The existing CINFER_SERVE_TEST_SLOW_INSTANCE (model_version.c) slows an instance down; the engine's
 * CINFER_FAULT_INJECTION=1 CINFER_FAULT_NODE=<node> (docs/cuda.md) makes a real sticky CUDA error, and
 * CINFER_FAULT_INJECTION=1 with CINFER_FAULT_ALLOC / CINFER_FAULT_COPY fails engine allocations and copies
 * (src/runtime/fault_backend.h). */
#ifndef SERVE_FAULTS_H
#define SERVE_FAULTS_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "model_queue.h"

#define FAULTS_ENV "CINFER_SERVE_FAULTS"

/* 1 when CINFER_SERVE_FAULTS is set (to anything non-empty). */
int faults_enabled(void);

/* 1 when the engine's fault points are on (CINFER_FAULT_INJECTION=1 with CINFER_FAULT_ALLOC or CINFER_FAULT_COPY). */
int faults_engine_enabled(void);

/* Called before an execution of `model` running `batch` inferences from the n requests `reqs`. Returns CINFER_OK
 * (no fault: run the engine), or the status the execution must fail with, its message (naming the rule) in msg;
 * *device_failed is set to 1 when the rule also says the instance's device failed (device_fail). */
cinfer_status faults_check_run(const char *model, int64_t batch, model_request *const *reqs, size_t n, char *msg,
                               size_t msg_len, int *device_failed);

#endif
