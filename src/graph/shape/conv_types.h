/* Types of the conv family's parameters (conv_params.h) that the CPU kernels and the CUDA launchers both take:
 * the 3-D window geometry. Plain C that includes only <stdint.h>, so kernels/conv.h (compiled by nvcc as C++
 * too) can carry it to the device code. */
#ifndef CINFER_GRAPH_SHAPE_CONV_TYPES_H
#define CINFER_GRAPH_SHAPE_CONV_TYPES_H

#include <stdint.h>

/* A sliding window in 3-D form (spatial ranks 1 and 2 run with leading size-1 dims, so one loop nest serves
 * them all and the innermost loop walks the last, contiguous, dim): input and output spatial dims, kernel,
 * strides, dilations, the begin and end pads in effect (auto_pad applied), and the products of in, out, k. */
typedef struct conv_geom {
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
    int64_t in_size, out_size, k_size;
} conv_geom;

#endif
