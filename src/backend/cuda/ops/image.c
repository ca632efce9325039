/* CUDA kernels of the image family (host side): attributes and shapes -> launches of kernels/image.cu, and the
 * table (Resize lives in ops/image_resize.c). */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/image.h"
#include "core/status.h"

/* defined in ops/image_resize.c */
cinfer_status cuda_image_run_resize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out);

/* ---------------------------------------------------------------- GridSample, AffineGrid */

static cinfer_status run_grid_sample(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0], *grid = &in[1];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (!dtype_is_float(grid->dtype)) return cuda_unsupported_dtype(n, grid->dtype);
    const char *ms = graph_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear");
    const char *ps = graph_attr_string(n, "padding_mode", "zeros");
    cuda_grid_sample_args a;
    memset(&a, 0, sizeof a);
    a.mode = strcmp(ms, "nearest") == 0 ? CUDA_GS_NEAREST
             : (strcmp(ms, "cubic") == 0 || strcmp(ms, "bicubic") == 0) ? CUDA_GS_CUBIC : CUDA_GS_LINEAR;
    a.pad = strcmp(ps, "border") == 0 ? CUDA_GS_BORDER : strcmp(ps, "reflection") == 0 ? CUDA_GS_REFLECTION
                                                                                         : CUDA_GS_ZEROS;
    a.align = graph_attr_int(n, "align_corners", 0) != 0;
    a.r = X->ndim - 2;
    if (a.r < 1 || a.r > 3 || grid->ndim != X->ndim)
        return core_error(CINFER_ERR_UNSUPPORTED, "GridSample node '%s': X of rank %d (1 to 3 spatial dims are "
                          "supported)", n->name, X->ndim);
    a.N = X->dims[0];
    a.C = X->dims[1];
    a.P = 1;
    a.plane = 1;
    for (int d = 0; d < a.r; d++) {
        a.P *= grid->dims[1 + d];
        a.len[d] = X->dims[2 + d];
        a.plane *= X->dims[2 + d];
    }
    a.stride[a.r - 1] = 1;
    for (int d = a.r - 2; d >= 0; d--) a.stride[d] = a.stride[d + 1] * X->dims[3 + d];
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (a.plane == 0) /* nothing to sample from: every mode reads padding */
        return cuda_check_launch(n, "GridSample zero fill",
                                 cudaMemsetAsync(y->data, 0, tensor_nbytes(y), x->stream));
    return cuda_check_launch(n, "GridSample",
                             cuda_image_grid_sample(X->dtype, X->data, grid->dtype, grid->data, y->data, &a, x->stream));
}

static cinfer_status run_affine_grid(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out) {
    (void)num_in; (void)num_out;
    const tensor *theta = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(theta->dtype)) return cuda_unsupported_dtype(n, theta->dtype);
    bool align = graph_attr_int(n, "align_corners", 0) != 0;
    int r = y->ndim - 2; /* 2 or 3 spatial dims */
    if (r < 1 || r > 3)
        return core_error(CINFER_ERR_UNSUPPORTED, "AffineGrid node '%s': output of rank %d", n->name, y->ndim);
    if (tensor_numel(y) == 0) return CINFER_OK;
    return cuda_check_launch(n, "AffineGrid",
                             cuda_image_affine_grid(theta->dtype, theta->data, y->data, y->dims[0], r, &y->dims[1],
                                                    align, x->stream));
}

/* ---------------------------------------------------------------- CenterCropPad, Col2Im */

static cinfer_status run_center_crop_pad(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                         int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0];
    tensor *y = &out[0];
    size_t es = cinfer_dtype_size(X->dtype);
    if (es == 0) return cuda_unsupported_dtype(n, X->dtype);
    if (tensor_numel(y) == 0) return CINFER_OK;
    cuda_crop_pad_args a;
    memset(&a, 0, sizeof a);
    a.ndim = X->ndim;
    tensor_strides(X, a.in_stride);
    for (int d = 0; d < X->ndim; d++) {
        int64_t in_len = X->dims[d], out_len = y->dims[d];
        a.out_dims[d] = out_len;
        a.in_off[d] = in_len > out_len ? (in_len - out_len) / 2 : 0;
        a.out_off[d] = out_len > in_len ? (out_len - in_len) / 2 : 0;
        a.len[d] = in_len < out_len ? in_len : out_len;
    }
    return cuda_check_launch(n, "CenterCropPad",
                             cuda_image_center_crop_pad(es, X->data, y->data, tensor_numel(y), &a, x->stream));
}

static cinfer_status run_col2im(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_out;
    const tensor *X = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (num_in < 3 || !in[1].host_data || !in[2].host_data)
        return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': image_shape and block_shape must be known "
                          "while planning", n->name);
    tensor host[3];
    cuda_host_views(in, 3, host);
    cuda_col2im_args a;
    memset(&a, 0, sizeof a);
    a.r = (int)tensor_numel(&host[1]);
    if (a.r < 1 || a.r > CINFER_MAX_DIMS - 2 || tensor_numel(&host[2]) != a.r)
        return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': image_shape has %d values", n->name, a.r);
    size_t nd = 0, np = 0, ns = 0;
    const int64_t *dil = graph_attr_ints(n, "dilations", &nd), *pads = graph_attr_ints(n, "pads", &np),
                  *str = graph_attr_ints(n, "strides", &ns);
    a.block = a.blocks = a.plane = 1;
    for (int d = 0; d < a.r; d++) {
        a.img[d] = tensor_get_int(&host[1], d);
        a.blk[d] = tensor_get_int(&host[2], d);
        a.dil[d] = dil ? dil[d] : 1;
        a.str[d] = str ? str[d] : 1;
        a.pad[d] = pads ? pads[d] : 0;
        int64_t pe = pads ? pads[d + a.r] : 0;
        if (a.str[d] <= 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': stride %lld", n->name, (long long)a.str[d]);
        a.nb[d] = (a.img[d] + a.pad[d] + pe - a.dil[d] * (a.blk[d] - 1) - 1) / a.str[d] + 1;
        a.block *= a.blk[d];
        a.blocks *= a.nb[d];
        a.plane *= a.img[d];
    }
    a.NC = y->dims[0] * y->dims[1];
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (X->dims[2] != a.blocks || X->dims[1] != y->dims[1] * a.block)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Col2Im node '%s': input does not match the block layout",
                          n->name);
    return cuda_check_launch(n, "Col2Im", cuda_image_col2im(X->dtype, X->data, y->data, &a, x->stream));
}

const cuda_kernel cuda_image_kernels[] = {
    {"Resize", cuda_image_run_resize},
    {"GridSample", run_grid_sample},
    {"AffineGrid", run_affine_grid},
    {"CenterCropPad", run_center_crop_pad},
    {"Col2Im", run_col2im},
    {NULL, NULL},
};
