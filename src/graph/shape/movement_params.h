/* Parameters of the movement ops that both their schemas (shapes) and their kernels (copies) work out. */
#ifndef CINFER_GRAPH_SHAPE_MOVEMENT_PARAMS_H
#define CINFER_GRAPH_SHAPE_MOVEMENT_PARAMS_H

#include "core/status.h"
#include "graph/graph.h"

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

#endif
