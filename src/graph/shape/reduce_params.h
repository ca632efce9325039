/* Parameters of the reduce ops that both their schemas (shapes) and their CPU kernels work out. */
#ifndef CINFER_GRAPH_SHAPE_REDUCE_PARAMS_H
#define CINFER_GRAPH_SHAPE_REDUCE_PARAMS_H

#include "core/status.h"
#include "graph/graph.h"

/* Which axes a Reduce* node reduces (mask[d] for d < rank of input 0): the `axes` input when present
 * (ReduceSum from 13, the others from 18), else the `axes` attribute (older opsets). Empty axes mean all
 * axes, or none with noop_with_empty_axes. */
cinfer_status reduce_compute_axes(const graph_node *n, const tensor *in, int num_in, bool mask[CINFER_MAX_DIMS]);

#endif
