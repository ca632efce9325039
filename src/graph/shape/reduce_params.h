/* Parameters of the reduce-family ops that their schemas (shapes) and their kernels (CPU and CUDA) work out:
 * which axes a node reduces, how an input splits into rows around one axis, and the attributes of ArgMax/ArgMin,
 * TopK, the softmax-like ops and the normalisations. Where a schema validates what a kernel also reads, the one
 * routine here does both, so the kernels see exactly what the schema accepted. */
#ifndef CINFER_GRAPH_SHAPE_REDUCE_PARAMS_H
#define CINFER_GRAPH_SHAPE_REDUCE_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"

/* Which axes a Reduce* node reduces (mask[d] for d < rank of input 0): the `axes` input when present
 * (ReduceSum from 13, the others from 18), else the `axes` attribute (older opsets). Empty axes mean all
 * axes, or none with noop_with_empty_axes. */
cinfer_status reduce_compute_axes(const graph_node *n, const tensor *in, int num_in, bool mask[CINFER_MAX_DIMS]);

/* MeanVarianceNormalization's axes (attribute `axes`, default [0, 2, 3], which needs rank >= 4) as a mask. */
cinfer_status reduce_compute_mvn_axes(const graph_node *n, const tensor *x, bool mask[CINFER_MAX_DIMS]);

/* x's dims grouped for a reduction over mask: size-1 dims dropped, neighbours with the same status (reduced
 * or kept) merged into one group; sizes and row-major strides of the groups, in order. */
typedef struct reduce_groups {
    int count;
    int64_t size[CINFER_MAX_DIMS], stride[CINFER_MAX_DIMS];
    bool reduced[CINFER_MAX_DIMS];
} reduce_groups;

void reduce_group_dims(const tensor *x, const bool *mask, reduce_groups *g);

/* x as rows along one axis: outer = product of the dims before it, len = its size (1 for a scalar), inner =
 * product of the dims after it. */
typedef struct reduce_rows {
    int axis;
    int64_t outer, len, inner;
} reduce_rows;

void reduce_split_rows(const tensor *x, int axis, reduce_rows *r);

/* Softmax, LogSoftmax, Hardmax: rows along `axis` (default -1 from opset 13, 1 before); before opset 13 the
 * dims [axis, rank) flatten into one row (inner 1). */
cinfer_status reduce_compute_softmax(const graph_node *n, const tensor *x, reduce_rows *r);

/* ArgMax / ArgMin: rows along `axis` (which must not be empty), select_last_index and keepdims. */
typedef struct reduce_arg {
    reduce_rows rows;
    bool is_max, last, keepdims;
} reduce_arg;

cinfer_status reduce_compute_arg(const graph_node *n, const tensor *x, reduce_arg *a);

/* TopK: rows along `axis` (default -1; X of rank >= 1), K from input 1 (a known 1-element integer tensor,
 * 0 <= K <= the axis' size), largest and sorted. `values` (the kernels' Values output; NULL for none) must have
 * X's rank and K along the axis. */
typedef struct reduce_topk {
    reduce_rows rows;
    int64_t k;
    bool largest, sorted;
} reduce_topk;

cinfer_status reduce_compute_topk(const graph_node *n, const tensor *in, int num_in, const tensor *values,
                                  reduce_topk *t);

/* LpNormalization: rows along `axis` (default -1) and p (1 or 2). */
cinfer_status reduce_compute_lp_norm(const graph_node *n, const tensor *x, reduce_rows *r, int64_t *p);

/* LayerNormalization, RMSNormalization: the dims from `axis` (default -1) on are normalised: `rows` rows of
 * `cols` values; epsilon. */
typedef struct reduce_layer_norm {
    int axis;
    int64_t rows, cols;
    double epsilon;
} reduce_layer_norm;

cinfer_status reduce_compute_layer_norm(const graph_node *n, const tensor *x, reduce_layer_norm *p);

/* How a LayerNormalization / RMSNormalization parameter p (Scale, B) lies over the normalised tail of x
 * (x.dims[axis:], `tail` dims): stride[k] is p's stride along tail dim k (0 where p broadcasts). An error when
 * p does not broadcast there or varies along the rows. *dense: p holds exactly one value per column, in
 * the columns' order (the strides are then not needed). */
cinfer_status reduce_norm_param_layout(const graph_node *n, const tensor *p, const tensor *x, int axis,
                                       int64_t stride[CINFER_MAX_DIMS], bool *dense);

/* InstanceNormalization, GroupNormalization: X [batch, channels, spatial...] normalised per (batch item,
 * group of channels / groups channels); scale and bias hold param_len values: one per channel, or one per
 * group (per_group: GroupNormalization before opset 21). */
typedef struct reduce_seg_norm {
    int64_t batch, channels, spatial, groups, param_len;
    bool per_group;
    double epsilon;
} reduce_seg_norm;

cinfer_status reduce_compute_seg_norm(const graph_node *n, const tensor *x, reduce_seg_norm *p);

/* LRN: X [batch, channels, spatial...]; each element divided by (bias + alpha / size * the sum of squares over the
 * channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to [0, channels)) ^ beta. size >= 1. */
typedef struct reduce_lrn {
    int64_t batch, channels, spatial, size;
    double alpha, beta, bias;
} reduce_lrn;

cinfer_status reduce_compute_lrn(const graph_node *n, const tensor *x, reduce_lrn *p);
/* At run time: reduce_compute_lrn, and y (the output) of x's dtype and not in x's buffer unless empty (the kernels
 * work out of place). */
cinfer_status reduce_check_lrn_run(const graph_node *n, const tensor *x, const tensor *y, reduce_lrn *p);

#endif
