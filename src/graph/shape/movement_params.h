/* Parameters of the movement ops that both their schemas (shapes) and their kernels (copies) work out. */
#ifndef CINFER_GRAPH_SHAPE_MOVEMENT_PARAMS_H
#define CINFER_GRAPH_SHAPE_MOVEMENT_PARAMS_H

#include "core/status.h"
#include "graph/graph.h"
#include "graph/shape/movement_types.h"

/* Slice: per input axis the first element, the step and the element count (axes not sliced have
 * start 0, step 1, count = dim). */
typedef struct movement_slice {
    int ndim;
    int64_t start[CINFER_MAX_DIMS], step[CINFER_MAX_DIMS], count[CINFER_MAX_DIMS];
} movement_slice;

/* Works out Slice's parameters from data's shape and the starts/ends/axes/steps values. */
cinfer_status movement_compute_slice(const graph_node *n, const tensor *in, int num_in, movement_slice *p);

typedef enum movement_pad_mode {
    MOVEMENT_PAD_CONSTANT = 0,
    MOVEMENT_PAD_REFLECT,
    MOVEMENT_PAD_EDGE,
    MOVEMENT_PAD_WRAP,
} movement_pad_mode;

/* Pad: pads before/after each axis of data (negative pads crop) and the mode. */
typedef struct movement_pad {
    int ndim;
    int64_t begin[CINFER_MAX_DIMS], end[CINFER_MAX_DIMS];
    movement_pad_mode mode;
} movement_pad;

/* Works out Pad's parameters from data's shape, the pads/axes values and the mode attribute. */
cinfer_status movement_compute_pad(const graph_node *n, const tensor *in, int num_in, movement_pad *p);

/* Transpose: perm[0..rank) from the perm attribute (a permutation of the input's axes; default: reversed). */
cinfer_status movement_compute_transpose(const graph_node *n, const tensor *x, int perm[CINFER_MAX_DIMS]);

/* DepthToSpace / SpaceToDepth (blocksize, mode DCR or CRD): X [N, C, H, W] seen as the 6-D `view`, whose axes
 * permuted by `perm` give the output [N, C', H', W'] (`out`) in 6-D form. */
typedef struct movement_depth_space {
    int64_t view[6];
    int perm[6];
    int64_t out[4];
} movement_depth_space;

cinfer_status movement_compute_depth_space(const graph_node *n, const tensor *x, movement_depth_space *p);

/* ScatterND / ScatterElements: the reduction attribute (none, add, mul, max or min). */
cinfer_status movement_read_reduction(const graph_node *n, movement_reduction *r);

/* Shape (opset 15): the start/end attributes, negative ones counted from the end, clamped to [0, rank]. */
void movement_shape_range(const graph_node *n, int rank, int64_t *start, int64_t *end);

/* The views the copying ops read their input through (the output is contiguous in the view's dims). */

/* A contiguous tensor of the given dims with its axes permuted by perm (Transpose, DepthToSpace). */
void movement_view_permute(int ndim, const int64_t *dims, const int *perm, movement_view *v);

/* Slice of x: the view from x's element *base on; false (and nothing set) when the slice is empty. */
bool movement_view_slice(const movement_slice *p, const tensor *x, movement_view *v, int64_t *base);

/* Expand: x broadcast to y's shape. */
void movement_view_expand(const tensor *x, const tensor *y, movement_view *v);

/* Tile: each output axis d of size rep * dim read as [rep, dim], the repeat not moving in x. */
void movement_view_tile(const tensor *x, const tensor *y, movement_view *v);

#endif
