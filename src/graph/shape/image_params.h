/* Parameters of the image ops that both their schemas (shapes) and their kernels (CPU and CUDA) work out. */
#ifndef CINFER_GRAPH_SHAPE_IMAGE_PARAMS_H
#define CINFER_GRAPH_SHAPE_IMAGE_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"

typedef enum image_resize_mode { RESIZE_NEAREST, RESIZE_LINEAR, RESIZE_CUBIC } image_resize_mode;

typedef enum image_coord_mode {
    COORD_HALF_PIXEL,
    COORD_HALF_PIXEL_SYMMETRIC,
    COORD_PYTORCH_HALF_PIXEL,
    COORD_ALIGN_CORNERS,
    COORD_ASYMMETRIC,
    COORD_TF_CROP_AND_RESIZE,
} image_coord_mode;

typedef enum image_nearest_mode {
    NEAREST_ROUND_PREFER_FLOOR,
    NEAREST_ROUND_PREFER_CEIL,
    NEAREST_FLOOR,
    NEAREST_CEIL,
    NEAREST_SIMPLE, /* Resize-10: truncate when upsampling, ceil when downsampling (as onnxruntime) */
} image_nearest_mode;

/* Resize, all axes of X: the output size, the scale the coordinate mapping divides by, the region of
 * interest (tf_crop_and_resize), and whether the axis is resized at all (identity axes are skipped). */
typedef struct image_resize {
    int ndim;
    int64_t out_dims[CINFER_MAX_DIMS];
    double scale[CINFER_MAX_DIMS];
    double roi_start[CINFER_MAX_DIMS], roi_end[CINFER_MAX_DIMS];
    bool resized[CINFER_MAX_DIMS];
    image_resize_mode mode;
    image_coord_mode coord;
    image_nearest_mode nearest;
    float cubic_a;
    bool exclude_outside, antialias;
    float extrapolation_value;
} image_resize;

/* Works out Resize's parameters from X's shape, the roi/scales/sizes values and the attributes. */
cinfer_status image_compute_resize(const graph_node *n, const tensor *in, int num_in, image_resize *p);

/* The dtypes linear and cubic Resize interpolate (floats and integers; nearest copies any dtype). */
bool image_resize_interpolable(cinfer_dtype t);

/* Linear/cubic taps per output position along an axis of the given scale: 2 (linear) or 4 (cubic), widened by
 * 1/scale when an antialiased filter downsamples. */
int image_resize_tap_count(const image_resize *p, double scale);

/* The order of the separable linear/cubic passes over the resized axes: shrinking axes first, then the
 * innermost first, so the gather-like innermost pass runs on the smaller data and the row-combining passes on
 * the larger. Fills order[0..count) and returns the count (0 for nearest, which gathers all axes at once). */
int image_resize_pass_order(const image_resize *p, int order[CINFER_MAX_DIMS]);

#endif
