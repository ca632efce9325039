/* Parameters of the conv family (Conv, ConvTranspose, the pools, ConvInteger, QLinearConv) that both their schemas
 * (shapes) and their kernels (CPU and CUDA) work out: the sliding window's attributes, the output size, the pads auto_pad implies,
 * and the pools' own attributes. */
#ifndef CINFER_GRAPH_SHAPE_CONV_PARAMS_H
#define CINFER_GRAPH_SHAPE_CONV_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/shape/conv_types.h"

typedef enum conv_auto_pad {
    CONV_AUTO_PAD_NOTSET = 0,
    CONV_AUTO_PAD_SAME_UPPER,
    CONV_AUTO_PAD_SAME_LOWER,
    CONV_AUTO_PAD_VALID,
} conv_auto_pad;

/* The sliding-window attributes of a Conv, ConvTranspose, MaxPool, AveragePool or LpPool node. Which
 * attributes the node has follows its op and opset: dilations (all but AveragePool before 19 and LpPool
 * before 18, where they are 1), ceil_mode (the pools; LpPool from 18), output_padding (ConvTranspose; else
 * 0). pb/pe are the pads attribute (begin, end), whatever auto_pad says. */
typedef struct conv_window {
    int nsp; /* spatial rank: X's rank - 2 */
    conv_auto_pad auto_pad;
    bool ceil_mode;
    bool transpose; /* ConvTranspose: its SAME rule and output_padding */
    int64_t k[CINFER_MAX_DIMS], s[CINFER_MAX_DIMS], d[CINFER_MAX_DIMS];
    int64_t pb[CINFER_MAX_DIMS], pe[CINFER_MAX_DIMS];
    int64_t opad[CINFER_MAX_DIMS];
} conv_window;

/* Reads n's window for input x (rank >= 3: N, C, spatial...): kernel_shape (checked against the weights w
 * when w is given; taken from w when the attribute is absent; required without w), strides, dilations, pads,
 * auto_pad, ceil_mode and output_padding, each validated. */
cinfer_status conv_read_window(const graph_node *n, const tensor *x, const tensor *w, conv_window *win);

/* Conv and pool output spatial sizes (out[0..nsp)) for input x under win; ConvTranspose's with its
 * output_shape attribute when it has one. */
cinfer_status conv_window_output(const graph_node *n, const tensor *x, const conv_window *win, int64_t *out);

/* The begin and end pads in effect in spatial dim i between input size `in` and output size `out`: the pads
 * attribute (NOTSET), none (VALID), or the SAME split of what the output needs (the extra pad at the end for
 * SAME_UPPER, at the beginning for SAME_LOWER; ConvTranspose by its own rule). */
void conv_window_pads(const conv_window *win, int i, int64_t in, int64_t out, int64_t *pb, int64_t *pe);

/* The window of n for input x and (already shaped) output y in 3-D form, the kernel size from the weights w
 * when given (else from kernel_shape). The kernels handle 1-3 spatial dims: others are CINFER_ERR_UNSUPPORTED,
 * the error naming the backend ("CPU", "CUDA") whose kernel refuses. */
cinfer_status conv_compute_geom(const graph_node *n, const tensor *x, const tensor *y, const tensor *w,
                                const char *backend, conv_geom *g);

/* Conv / ConvTranspose as the kernels run them: the window in 3-D form (conv_compute_geom) and the operands
 * checked: X [N, C, ...], W ([M, C / group, k...] for Conv, [C, M / group, k...] for ConvTranspose), optional B
 * [M] (b NULL: none), Y [N, M, ...] and group >= 1 dividing C and M. */
cinfer_status conv_compute_conv(const graph_node *n, const tensor *x, const tensor *w, const tensor *b,
                                const tensor *y, const char *backend, conv_geom *g, int64_t *group);

/* ConvInteger (x, w, x_zero_point?, w_zero_point?) and QLinearConv (x, x_scale, x_zero_point, w, w_scale,
 * w_zero_point, y_scale, y_zero_point, B?): x and w int8 or uint8 (each its own) under Conv's rank, channel and
 * group rules; the zero points have their operand's dtype; x's and y's zero point and scale are one value, w's one
 * value or one per output channel [M]; scales float32; B int32 [M]. Pointers into the node's inputs, NULL when
 * absent (the scales, y's and B are absent for ConvInteger). */
typedef struct conv_quant {
    bool qlinear;
    int64_t group;
    const tensor *x, *w, *x_zp, *w_zp, *x_scale, *w_scale, *y_scale, *y_zp, *bias;
} conv_quant;

cinfer_status conv_compute_quant(const graph_node *n, const tensor *in, int num_in, conv_quant *q);

/* The pools' own attributes: MaxPool's storage_order (0 or 1), AveragePool's count_include_pad and the Lp
 * pools' p (>= 1; 2 elsewhere). */
typedef struct conv_pool {
    bool col_major;   /* storage_order 1: MaxPool's Indices count column-major over the spatial dims */
    bool include_pad; /* count_include_pad */
    int64_t p;
} conv_pool;

cinfer_status conv_read_pool(const graph_node *n, conv_pool *p);

/* MaxPool, AveragePool, LpPool as the kernels run them: the window of X (in[0]) for Y (out[0]) in 3-D form
 * (conv_compute_geom), Y's batch and channels those of X, MaxPool's Indices (out[1], when there and given
 * data) int64 and shaped like Y, and the pool's attributes. */
cinfer_status conv_compute_pool(const graph_node *n, const tensor *in, const tensor *out, int num_out,
                                const char *backend, conv_geom *g, conv_pool *p);

/* The global pools as the kernels run them: X (rank >= 2) as *planes = N * C planes of *size values each, Y
 * holding one value per plane, and the pool's attributes. */
cinfer_status conv_compute_global_pool(const graph_node *n, const tensor *x, const tensor *y, int64_t *planes,
                                       int64_t *size, conv_pool *p);

/* Channels-last nodes (internal attribute "cinfer_channels_last", set by graph/layout.c in half-precision CUDA
 * graphs): a Conv whose X, fused residual and Y are [N, spatial..., C] and whose W is [M, k..., C / group]; a
 * MaxPool or AveragePool whose X and Y are [N, spatial..., C]; a global pool whose X is [N, spatial..., C] and whose
 * Y keeps its ONNX shape [N, C, 1...] (the same bytes as [N, 1..., C]). */
bool conv_channels_last(const graph_node *n);
/* The channels-first view of a channels-last tensor: the same data, dims [N, C, spatial...] (for W: [M, C / group,
 * k...]). */
void conv_channels_first_view(const tensor *t, tensor *view);
/* Reorders channels-first dims [N, C, spatial...] to channels-last [N, spatial..., C], in place. */
void conv_dims_to_channels_last(tensor *t);

#endif
