/* Parameters of the misc ops that both their schemas (shapes) and their kernels (CPU and CUDA) work out. */
#ifndef CINFER_GRAPH_SHAPE_MISC_PARAMS_H
#define CINFER_GRAPH_SHAPE_MISC_PARAMS_H

#include "core/status.h"
#include "graph/graph.h"

/* Distinct labels an Einsum may use: 52 letters plus the broadcast dims an ellipsis stands for. */
#define MISC_EINSUM_MAX_LABELS (52 + CINFER_MAX_DIMS)

/* A parsed Einsum equation checked against the operand shapes. Labels are numbered 0..num_labels-1;
 * every operand dim and output dim names one. A label may repeat within an operand (a diagonal). */
typedef struct misc_einsum {
    int num_operands;
    int num_labels;
    int64_t label_size[MISC_EINSUM_MAX_LABELS];
    int op_ndim[GRAPH_MAX_NODE_IO];
    signed char op_label[GRAPH_MAX_NODE_IO][CINFER_MAX_DIMS];
    int out_ndim;
    signed char out_label[CINFER_MAX_DIMS];
} misc_einsum;

/* Parses the node's equation for the given operands; errors name the node and the problem. */
cinfer_status misc_parse_einsum(const graph_node *n, const tensor *in, int num_in, misc_einsum *e);

/* Per label, the element stride that label advances in operand k of shape t (summed over repeated labels: a
 * diagonal; 0 where a size-1 dim broadcasts); ls holds e->num_labels entries. */
void misc_einsum_label_strides(const misc_einsum *e, const tensor *t, int k, int64_t *ls);

#endif
