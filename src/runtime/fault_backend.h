/* Test-only fault points in the engine (docs/resilience.md, "Fault injection"): a thin wrapper around a session's
 * backend (backend.h) that makes chosen backend allocations (plan arenas, io blocks) fail as out of memory and chosen
 * host<->device copies fail as runtime errors, so the error paths of the engine and the server can be tested without
 * a GPU.
 *
 * Off unless CINFER_FAULT_INJECTION=1 (the engine's existing test switch, docs/cuda.md) and CINFER_FAULT_ALLOC or
 * CINFER_FAULT_COPY is set; otherwise fault_backend_wrap leaves the backend untouched and costs three getenv calls
 * per session creation. Nothing is compiled out, as with the other switches: production never sets them. Each
 * variable holds one rule, or "@<path>": a file holding it, read again at every point (missing or empty: no
 * faults), so a test arms and disarms faults within one process. A rule is key=value pairs separated by commas or
 * white space, all of which must match:
 *   nth=<n>          the n-th matching point after arming fails (once); without it every matching point fails
 *   min_bytes=<b>    only points of at least b bytes match
 *   graph=<name>     only sessions of the model whose graph is named <name> match
 *   dir=h2d|d2h|d2d  (CINFER_FAULT_COPY only) only copies in that direction match (d2d: copy_on_device)
 * Arming: the count of matching points starts again whenever the rule's text (or its file) changes.
 * With CINFER_FAULT_COPY set, a host backend (the CPU) is presented to the session as a device with its own memory
 * (copies by memcpy), so the session's device path - inputs up, outputs down - and its copy points run on a CPU. */
#ifndef CINFER_RUNTIME_FAULT_BACKEND_H
#define CINFER_RUNTIME_FAULT_BACKEND_H

#include "backend/backend.h"

#define FAULT_ENV_GATE "CINFER_FAULT_INJECTION"
#define FAULT_ENV_ALLOC "CINFER_FAULT_ALLOC"
#define FAULT_ENV_COPY "CINFER_FAULT_COPY"

/* Replaces *b by a wrapper that owns it when the switches above are on (graph g names the session's model);
 * leaves *b alone otherwise, or when the wrapper cannot be allocated (then it says so on stderr). */
void fault_backend_wrap(backend **b, const graph *g);

#endif
