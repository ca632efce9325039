/* CUDA Resize (host side): image_compute_resize on the host views of roi/scales/sizes, tap tables built on the
 * device (no host->device copy), then the nearest gather or the separable linear/cubic passes of
 * kernels/image_resize.cu, in the CPU kernel's pass order. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/image.h"
#include "core/status.h"
#include "graph/shape/image_params.h"

cinfer_status cuda_image_run_resize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out);

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

static int kernel_mode(image_resize_mode m) {
    switch (m) {
    case RESIZE_LINEAR: return CUDA_RESIZE_LINEAR;
    case RESIZE_CUBIC: return CUDA_RESIZE_CUBIC;
    case RESIZE_NEAREST:
    default: return CUDA_RESIZE_NEAREST;
    }
}

static int kernel_coord(image_coord_mode c) {
    switch (c) {
    case COORD_HALF_PIXEL_SYMMETRIC: return CUDA_COORD_HALF_PIXEL_SYMMETRIC;
    case COORD_PYTORCH_HALF_PIXEL: return CUDA_COORD_PYTORCH_HALF_PIXEL;
    case COORD_ALIGN_CORNERS: return CUDA_COORD_ALIGN_CORNERS;
    case COORD_ASYMMETRIC: return CUDA_COORD_ASYMMETRIC;
    case COORD_TF_CROP_AND_RESIZE: return CUDA_COORD_TF_CROP_AND_RESIZE;
    case COORD_HALF_PIXEL:
    default: return CUDA_COORD_HALF_PIXEL;
    }
}

static int kernel_nearest(image_nearest_mode m) {
    switch (m) {
    case NEAREST_ROUND_PREFER_CEIL: return CUDA_NEAREST_ROUND_PREFER_CEIL;
    case NEAREST_FLOOR: return CUDA_NEAREST_FLOOR;
    case NEAREST_CEIL: return CUDA_NEAREST_CEIL;
    case NEAREST_SIMPLE: return CUDA_NEAREST_SIMPLE;
    case NEAREST_ROUND_PREFER_FLOOR:
    default: return CUDA_NEAREST_ROUND_PREFER_FLOOR;
    }
}

/* Integer outputs round half to even and saturate (the reference's saturate_cast). */
static double clamp_round(double v, double lo, double hi) {
    if (v != v) return 0;
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

/* The extrapolation value as one element of dtype t, converted as the CPU kernel's store_one does. */
static uint64_t fill_bits(cinfer_dtype t, float value) {
    double v = cuda_resize_work_double(t) ? (double)value : (double)(float)value;
    uint64_t bits = 0;
    switch (t) {
    case CINFER_DTYPE_FLOAT: { float f = (float)v; memcpy(&bits, &f, sizeof f); break; }
    case CINFER_DTYPE_DOUBLE: memcpy(&bits, &v, sizeof v); break;
    case CINFER_DTYPE_FLOAT16: bits = dtype_float_to_half((float)v); break;
    case CINFER_DTYPE_BFLOAT16: bits = dtype_float_to_bf16((float)v); break;
    case CINFER_DTYPE_INT8: bits = (uint8_t)(int8_t)clamp_round(v, -128, 127); break;
    case CINFER_DTYPE_UINT8: bits = (uint8_t)clamp_round(v, 0, 255); break;
    case CINFER_DTYPE_INT16: bits = (uint16_t)(int16_t)clamp_round(v, -32768, 32767); break;
    case CINFER_DTYPE_UINT16: bits = (uint16_t)clamp_round(v, 0, 65535); break;
    case CINFER_DTYPE_INT32: bits = (uint32_t)(int32_t)clamp_round(v, -2147483648.0, 2147483647.0); break;
    case CINFER_DTYPE_UINT32: bits = (uint32_t)clamp_round(v, 0, 4294967295.0); break;
    case CINFER_DTYPE_INT64:
        bits = (uint64_t)(int64_t)clamp_round(v, -9223372036854775808.0, 9223372036854774784.0);
        break;
    case CINFER_DTYPE_UINT64: bits = (uint64_t)clamp_round(v, 0, 18446744073709549568.0); break;
    default: break; /* bool: the CPU leaves the fill at zero */
    }
    return bits;
}

cinfer_status cuda_image_run_resize(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out) {
    (void)num_out;
    const tensor *X = &in[0];
    tensor *y = &out[0];
    if (num_in > 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': %d inputs, at most 4 expected", n->name, num_in);
    tensor host[4];
    cuda_host_views(in, num_in, host);
    image_resize p;
    CINFER_TRY(image_compute_resize(n, host, num_in, &p));
    int r = X->ndim;
    if (tensor_numel(y) == 0) return CINFER_OK;
    size_t es = cinfer_dtype_size(X->dtype);
    if (es == 0) return cuda_unsupported_dtype(n, X->dtype);
    bool nearest = p.mode == RESIZE_NEAREST;
    if (!nearest && !image_resize_interpolable(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);

    /* pass order (linear, cubic): image_resize_pass_order's, as the CPU kernel's */
    int order[CINFER_MAX_DIMS], passes = image_resize_pass_order(&p, order);
    if (!nearest && passes == 0) {
        if (y->data == X->data) return CINFER_OK;
        return cuda_check_launch(n, "Resize copy",
                                 cudaMemcpyAsync(y->data, X->data, tensor_nbytes(X), cudaMemcpyDeviceToDevice,
                                                 x->stream));
    }

    /* one scratch request: the tap tables (nearest: every axis), then up to two work buffers */
    int ntaps[CINFER_MAX_DIMS];
    size_t table_bytes = 0;
    for (int d = 0; d < r; d++) {
        ntaps[d] = 0;
        if (!nearest && !p.resized[d]) continue;
        ntaps[d] = nearest ? 2 : image_resize_tap_count(&p, p.scale[d]);
        if (!nearest && ntaps[d] > 4096)
            return core_error(CINFER_ERR_UNSUPPORTED, "Resize node '%s': the antialias filter of axis %d needs %d taps",
                              n->name, d, ntaps[d]);
        size_t cnt = (size_t)y->dims[d] * (size_t)(nearest ? 1 : ntaps[d]);
        table_bytes += align256(cnt * sizeof(int64_t)) + (nearest ? 0 : align256(cnt * sizeof(float))) +
                       align256((size_t)y->dims[d]);
    }
    bool dbl = cuda_resize_work_double(X->dtype);
    size_t ws = dbl ? sizeof(double) : sizeof(float);
    int64_t cur[CINFER_MAX_DIMS], buf_elems = 0;
    for (int d = 0; d < r; d++) cur[d] = X->dims[d];
    for (int j = 0; j + 1 < passes; j++) { /* the last pass writes y */
        cur[order[j]] = y->dims[order[j]];
        int64_t sz = 1;
        for (int k = 0; k < r; k++) sz *= cur[k];
        if (sz > buf_elems) buf_elems = sz;
    }
    size_t buf_bytes = align256((size_t)buf_elems * ws);
    int nbufs = passes > 2 ? 2 : passes > 1 ? 1 : 0;
    char *scratch = cuda_scratch(x, table_bytes + (size_t)nbufs * buf_bytes);
    if (!scratch) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Resize node '%s': out of device scratch", n->name);

    int64_t *idx[CINFER_MAX_DIMS] = {NULL};
    float *coef[CINFER_MAX_DIMS] = {NULL};
    unsigned char *extrap[CINFER_MAX_DIMS] = {NULL};
    char *cursor = scratch;
    for (int d = 0; d < r; d++) {
        if (!ntaps[d]) continue;
        size_t cnt = (size_t)y->dims[d] * (size_t)(nearest ? 1 : ntaps[d]);
        idx[d] = (int64_t *)cursor;
        cursor += align256(cnt * sizeof(int64_t));
        if (!nearest) {
            coef[d] = (float *)cursor;
            cursor += align256(cnt * sizeof(float));
        }
        extrap[d] = (unsigned char *)cursor;
        cursor += align256((size_t)y->dims[d]);
        cuda_resize_axis ax = {
            .mode = kernel_mode(p.mode),
            .coord = kernel_coord(p.coord),
            .nearest = kernel_nearest(p.nearest),
            .taps = ntaps[d],
            .exclude_outside = p.exclude_outside,
            .antialias = p.antialias,
            .cubic_a = p.cubic_a,
            .scale = p.scale[d],
            .roi_start = p.roi_start[d],
            .roi_end = p.roi_end[d],
            .in_len = X->dims[d],
            .out_len = y->dims[d],
        };
        CINFER_TRY(cuda_check_launch(n, "Resize taps", cuda_image_resize_taps(&ax, idx[d], coef[d], extrap[d],
                                                                             x->stream)));
    }

    if (nearest) {
        cuda_resize_gather g;
        memset(&g, 0, sizeof g);
        g.ndim = r;
        tensor_strides(X, g.in_stride);
        for (int d = 0; d < r; d++) {
            g.out_dims[d] = y->dims[d];
            g.idx[d] = idx[d];
            g.extrap[d] = extrap[d];
        }
        g.fill_bits = fill_bits(X->dtype, p.extrapolation_value);
        return cuda_check_launch(n, "Resize nearest",
                                 cuda_image_resize_nearest(es, X->data, y->data, tensor_numel(y), &g, x->stream));
    }

    void *bufs[2] = {cursor, cursor + buf_bytes};
    const void *src = X->data;
    bool src_work = false;
    int which = 0;
    for (int d = 0; d < r; d++) cur[d] = X->dims[d];
    for (int j = 0; j < passes; j++) {
        int a = order[j];
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < a; k++) outer *= cur[k];
        for (int k = a + 1; k < r; k++) inner *= cur[k];
        bool last = j == passes - 1;
        void *dst = last ? y->data : bufs[which];
        CINFER_TRY(cuda_check_launch(n, "Resize pass",
                                     cuda_image_resize_pass(X->dtype, src, src_work, dst, !last, outer, cur[a],
                                                            y->dims[a], inner, ntaps[a], idx[a], coef[a], extrap[a],
                                                            (double)p.extrapolation_value, x->stream)));
        cur[a] = y->dims[a];
        src = dst;
        src_work = true;
        which ^= 1;
    }
    return CINFER_OK;
}
