/* Old default-domain opsets (1-12) mapped onto the semantics cinfer's op schemas implement (see opset_upgrade.c). */
#ifndef CINFER_ONNX_OPSET_UPGRADE_H
#define CINFER_ONNX_OPSET_UPGRADE_H

#include "graph/graph.h"

/* The lowest default-domain opset whose ops the schemas and kernels take exactly as the file writes them; older
 * models are upgraded node by node onto it. */
#define OPSET_UPGRADE_TARGET 13

/* The opset at which the version of default-domain op `op_type` that is in effect at `opset` came in (its
 * since_version), from onnx's schema history; 0 when the op does not exist at that opset (not yet, deprecated, or
 * not an ONNX op). */
int opset_since_version(const char *op_type, int64_t opset);
/* The opsets at which default-domain op `op_type` exists: *first is its first version's since_version, *last the
 * newest opset of the pinned onnx schema history, or the one before the version that deprecates it. False (both 0)
 * when it is not an ONNX op. */
bool opset_op_range(const char *op_type, int *first, int *last);

/* Rewrites every default-domain node of g (as the loader built it, g->opset below OPSET_UPGRADE_TARGET) onto
 * today's semantics: attributes that later became inputs become constant inputs, removed attributes with a fixed
 * meaning are dropped or turned into their later form, Upsample becomes Resize-10, old broadcast flags become
 * numpy broadcasting. A rewritten node records the opset whose semantics it now has (node->opset); one whose version
 * the schemas implement as it is (Softmax-1's 2-D coercion, Resize-10, ...) keeps the model's. Constants and helper
 * nodes are appended (graph_sort orders them). Fails with CINFER_ERR_UNSUPPORTED naming the node, op, version and
 * attribute for an old attribute or semantics cinfer cannot map, and with CINFER_ERR_INVALID_MODEL for an op the
 * model's opset does not have or an attribute its version does not define. A no-op for g->opset >=
 * OPSET_UPGRADE_TARGET. */
cinfer_status onnx_upgrade_opset(graph *g);

#endif
