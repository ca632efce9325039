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

/* LookupConcat (internal; graph/fusion_lookup.c): Concat(axis) of pieces, each a plain input or a table lookup
 * Unsqueeze(Gather(table, indices, axis 0), u) (u optional), the lookups' indices int32 or int64. Attribute
 * "cinfer_pieces" holds one code per piece: LOOKUP_PLAIN (one input), LOOKUP_NO_UNSQUEEZE or the unsqueeze axis
 * u >= 0 (two inputs: table, indices). The fusion only forms it where each lookup's table dims lie after the concat
 * axis, so every piece is whole table rows per outer index. */
#define LOOKUP_PLAIN (-2)
#define LOOKUP_NO_UNSQUEEZE (-1)

/* One piece of a LookupConcat as the kernels copy it: the output seen as [outer, width], the piece filling columns
 * [col0, col0 + inner) of each outer index from its plain input, or from `inner / row` table rows of `row` elements
 * picked by consecutive indices (rows: the table's first dim). */
typedef struct lookup_part {
    int input; /* the plain input, or the table (the indices are input + 1) */
    bool lookup;
    int64_t inner, col0, row, rows;
} lookup_part;

/* Reads n's pieces against its inputs and output y: parts[0..*count) (room for num_in), *outer and *width. */
cinfer_status movement_lookup_parts(const graph_node *n, const tensor *in, int num_in, const tensor *y,
                                    lookup_part *parts, int *count, int64_t *outer, int64_t *width);

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
