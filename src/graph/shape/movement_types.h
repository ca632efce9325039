/* Types of the movement family's parameters (movement_params.h) that the CPU kernels and the CUDA launchers both
 * take: strided views and the scatters' reduction. Plain C that includes only <stdint.h> and core/tensor.h (for the
 * rank limit a tensor has, CINFER_MAX_DIMS; graph/ builds on core/ alone), so kernels/movement.h (compiled by nvcc
 * as C++ too) can carry them to the device code. */
#ifndef CINFER_GRAPH_SHAPE_MOVEMENT_TYPES_H
#define CINFER_GRAPH_SHAPE_MOVEMENT_TYPES_H

#include <stdint.h>

#include "core/tensor.h"

#define MOVEMENT_VIEW_DIMS (2 * CINFER_MAX_DIMS) /* Tile views each dim as (repeat, dim) */

/* What a copy reads: the (contiguous) output's dims and, per dim, the source stride in elements. A stride may be
 * 0 (repeat an element: Expand, Tile) or negative (Slice with negative steps). */
typedef struct movement_view {
    int ndim;
    int64_t dims[MOVEMENT_VIEW_DIMS];
    int64_t stride[MOVEMENT_VIEW_DIMS];
} movement_view;

/* ScatterND / ScatterElements: how an update combines with the element it lands on (attribute reduction). */
typedef enum movement_reduction {
    MOVEMENT_RED_NONE = 0, /* replace */
    MOVEMENT_RED_ADD,
    MOVEMENT_RED_MUL,
    MOVEMENT_RED_MAX,
    MOVEMENT_RED_MIN,
} movement_reduction;

#endif
