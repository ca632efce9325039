/* onnxruntime's com.microsoft contrib ops -> default-domain ops, at import (see contrib_ops.c). */
#ifndef CINFER_ONNX_CONTRIB_OPS_H
#define CINFER_ONNX_CONTRIB_OPS_H

#include "graph/graph.h"

/* Rewrites every com.microsoft node of g (and the default-domain SimplifiedLayerNormalization onnxruntime registers)
 * as default-domain nodes with the same results, so every backend and the optimiser's fusions see only ONNX ops.
 * Runs on a freshly loaded graph (outputs marked, not yet sorted); the new nodes are appended, the contrib nodes
 * dropped (graph_sort orders them later). A contrib op cinfer does not know is left for graph_bind_schemas to
 * refuse with the others; a known one with an attribute, input or output form that cannot be mapped fails here,
 * naming the node, op, domain, version and what is unsupported. */
cinfer_status onnx_lower_contrib_ops(graph *g);

/* The com.microsoft ops onnx_lower_contrib_ops lowers (version 1 of the domain): entry index < onnx_contrib_op_count,
 * NULL past the end. */
size_t onnx_contrib_op_count(void);
const char *onnx_contrib_op_name(size_t index);

#endif
