/* Liveness-based activation memory planner (after ggml-alloc): one arena, offsets reused best-fit. */
#ifndef CINFER_GRAPH_PLANNER_H
#define CINFER_GRAPH_PLANNER_H

#include "graph/graph.h"

#define PLANNER_ALIGNMENT 64

/* Assigns arena offsets to the outputs of the nodes that run.
 *   node_runs[i]     node i executes on the backend (host-evaluated and folded nodes do not)
 *   shapes[v]        dtype and dims of value v at this plan's shapes (data ignored)
 *   in_arena[v]      value v lives in the arena (false for model inputs, outputs, constants, host values)
 * A value's block is freed after its last consumer ran; a node whose schema allows it writes output 0
 * over input 0 when that input dies at the node and has the same size. Model inputs and outputs are never
 * in the arena, so never reused. Writes offsets[v] (-1 when not in the arena) and the arena size. */
cinfer_status graph_plan_memory(const graph *g, const bool *node_runs, const tensor *shapes, const bool *in_arena,
                                int64_t *offsets, size_t *arena_bytes);

/* graph_plan_memory where kept[v] (may be NULL) marks arena values that must outlive the nodes that run: their blocks
 * are never freed or written in place (a staged plan's values that later stages read, its model outputs). */
cinfer_status graph_plan_memory_kept(const graph *g, const bool *node_runs, const tensor *shapes, const bool *in_arena,
                                     const bool *kept, int64_t *offsets, size_t *arena_bytes);

/* Debugging layout: every arena value gets its own block with `guard_bytes` (rounded up to the alignment) of
 * guard space before and after it, nothing is reused or written in place. The runtime fills the arena with a
 * pattern before a run and checks the guards after it, so an out-of-bounds write names its value. */
cinfer_status graph_plan_memory_guarded(const graph *g, const bool *node_runs, const tensor *shapes, const bool *in_arena,
                                        size_t guard_bytes, int64_t *offsets, size_t *arena_bytes);

#endif
