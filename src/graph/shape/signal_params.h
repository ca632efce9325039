/* Parameters of the signal ops (windows, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool) that their schemas
 * (shapes) and their kernels (CPU and CUDA) work out, and the checks of input values both kernels make. A value
 * check is given a tensor whose data may be NULL (a CUDA input whose value the host does not know): it then
 * passes, and the device kernel guards itself. */
#ifndef CINFER_GRAPH_SHAPE_SIGNAL_PARAMS_H
#define CINFER_GRAPH_SHAPE_SIGNAL_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"

/* HannWindow, HammingWindow, BlackmanWindow: w[i] = a0 - a1 cos(t) + a2 cos(2t), t = 2 pi i / denom, with
 * denom = size (periodic) or size - 1; a window with denom <= 0 (one symmetric point) is 1. */
typedef struct signal_window {
    double denom, a0, a1, a2;
} signal_window;

void signal_compute_window(const graph_node *n, int64_t size, signal_window *w);

/* MelWeightMatrix: num_mel_bins triangular filters over the nspec = dft_length / 2 + 1 bins of a DFT; filter i
 * rises from edge i to edge i + 1 and falls to edge i + 2 (signal_mel_edge). */
typedef struct signal_mel {
    int64_t bins, nspec, len, rate;
    double lo_mel, step; /* the mel scale's start and the step between edges */
} signal_mel;

/* From num_mel_bins, dft_length, sample_rate (> 0) and the edge frequencies (the output's dims give bins and
 * nspec). */
cinfer_status signal_compute_mel(const graph_node *n, int64_t bins, int64_t nspec, int64_t len, int64_t rate,
                                 double lo_hz, double hi_hz, signal_mel *m);

/* The DFT bin of edge i in [0, bins + 2). */
int64_t signal_mel_edge(const signal_mel *m, int64_t i);

/* Every filter's edges lie in [0, nspec) and rise. */
cinfer_status signal_check_mel(const graph_node *n, const signal_mel *m);

/* RoiAlign's attributes. */
typedef struct signal_roi_align {
    bool max_mode;   /* mode "max" (else "avg") */
    bool half_pixel; /* coordinate_transformation_mode half_pixel (opset 16 default; before: output_half_pixel) */
    int64_t sampling_ratio;
    float spatial_scale;
} signal_roi_align;

void signal_compute_roi_align(const graph_node *n, signal_roi_align *p);

/* RoiAlign's batch_indices in [0, batch) and its rois [R, 4] finite. */
cinfer_status signal_check_roi_align(const graph_node *n, const tensor *rois, const tensor *batch_indices,
                                     int64_t batch);

/* MaxRoiPool's rois [R, 5]: batch index in [0, batch), the box (times spatial_scale) finite. */
cinfer_status signal_check_max_roi_pool(const graph_node *n, const tensor *rois, int64_t batch, float spatial_scale);

/* MaxUnpool: the unpooled shape of X (before any output_shape) from kernel_shape, strides and pads, and its
 * element count. */
cinfer_status signal_compute_unpool(const graph_node *n, const tensor *x, int64_t dims[CINFER_MAX_DIMS],
                                    int64_t *total);

/* MaxUnpool's indices (X's count of them) in [0, total). */
cinfer_status signal_check_unpool_indices(const graph_node *n, const tensor *indices, int64_t count, int64_t total);

#endif
