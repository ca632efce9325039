/* Op schemas of the signal family: windows, DFT, STFT, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool, Det. */
#include <math.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/signal_params.h"

static const cinfer_dtype float_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16,
                                           CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED};

static bool present(const tensor *in, int num_in, int i) {
    return i >= 0 && i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

/* Reads input i as one integer: it must be a known integer scalar (or a one-element vector). */
static cinfer_status int_scalar(const graph_node *n, const tensor *in, int i, const char *what, int64_t *v) {
    if (!dtype_is_integer(in[i].dtype) || in[i].ndim > 1 || tensor_numel(&in[i]) != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must be an integer scalar, got %s rank %d",
                          n->op_type, n->name, what, cinfer_dtype_name(in[i].dtype), in[i].ndim);
    if (!in[i].data)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the value of %s is not known", n->op_type, n->name,
                          what);
    *v = tensor_get_int(&in[i], 0);
    return CINFER_OK;
}

/* The output_datatype attribute of the window ops and MelWeightMatrix: float types only. */
static cinfer_status output_datatype(const graph_node *n, cinfer_dtype *t) {
    int64_t v = graph_attr_int(n, "output_datatype", CINFER_DTYPE_FLOAT);
    for (int k = 0; float_types[k] != CINFER_DTYPE_UNDEFINED; k++)
        if ((int64_t)float_types[k] == v) {
            *t = float_types[k];
            return CINFER_OK;
        }
    return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': output_datatype %lld is not a float type", n->op_type,
                      n->name, (long long)v);
}

/* ---- HannWindow, HammingWindow, BlackmanWindow ---- */

static cinfer_status infer_window(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    int64_t size = 0;
    CINFER_TRY(int_scalar(n, in, 0, "size", &size));
    if (size < 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': size %lld is negative", n->op_type, n->name,
                          (long long)size);
    CINFER_TRY(output_datatype(n, &out[0].dtype));
    out[0].ndim = 1;
    out[0].dims[0] = size;
    return CINFER_OK;
}

void signal_compute_window(const graph_node *n, int64_t size, signal_window *w) {
    w->denom = graph_attr_int(n, "periodic", 1) != 0 ? (double)size : (double)(size - 1);
    w->a0 = 0.5, w->a1 = 0.5, w->a2 = 0.0;
    if (strcmp(n->op_type, "HammingWindow") == 0) {
        w->a0 = 25.0 / 46.0;
        w->a1 = 1.0 - w->a0;
    } else if (strcmp(n->op_type, "BlackmanWindow") == 0) {
        w->a0 = 0.42;
        w->a2 = 0.08;
    }
}

/* ---- DFT ---- */

/* DFT-20 takes the axis as input 2 (default -2); earlier opsets as an attribute (default 1). */
static cinfer_status dft_axis(const graph_node *n, const tensor *in, int num_in, int rank, int *axis) {
    int64_t a = 0;
    if (n->opset >= 20) {
        a = -2;
        if (present(in, num_in, 2)) CINFER_TRY(int_scalar(n, in, 2, "axis", &a));
    } else {
        if (present(in, num_in, 2))
            return core_error(CINFER_ERR_INVALID_MODEL, "DFT node '%s': opset %lld takes the axis as an attribute, "
                              "not as input 2", n->name, (long long)n->opset);
        a = graph_attr_int(n, "axis", 1);
    }
    CINFER_TRY(shape_normalize_axis(n, a, rank, axis));
    if (*axis == rank - 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "DFT node '%s': axis %lld is the complex dim", n->name,
                          (long long)a);
    return CINFER_OK;
}

static cinfer_status infer_dft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    const tensor *x = &in[0];
    if (x->ndim < 2 || (x->dims[x->ndim - 1] != 1 && x->dims[x->ndim - 1] != 2))
        return core_error(CINFER_ERR_INVALID_MODEL, "DFT node '%s': input must have rank >= 2 and last dim 1 (real) "
                          "or 2 (complex)", n->name);
    int axis = 0;
    CINFER_TRY(dft_axis(n, in, num_in, x->ndim, &axis));
    bool inverse = graph_attr_int(n, "inverse", 0) != 0, onesided = graph_attr_int(n, "onesided", 0) != 0;
    int64_t len = inverse && onesided ? 2 * (x->dims[axis] - 1) : x->dims[axis];
    if (present(in, num_in, 1)) CINFER_TRY(int_scalar(n, in, 1, "dft_length", &len));
    if (len < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "DFT node '%s': dft_length %lld must be positive", n->name,
                          (long long)len);
    shape_copy(&out[0], x);
    out[0].dims[axis] = onesided && !inverse ? len / 2 + 1 : len;
    out[0].dims[x->ndim - 1] = inverse && onesided ? 1 : 2;
    return CINFER_OK;
}

/* ---- STFT ---- */

static cinfer_status infer_stft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    const tensor *x = &in[0];
    if (x->ndim != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': signal must be [batch, length, 1 or 2]", n->name);
    int64_t step = 0, flen = -1;
    CINFER_TRY(int_scalar(n, in, 1, "frame_step", &step));
    if (step < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': frame_step %lld must be positive", n->name,
                          (long long)step);
    if (present(in, num_in, 3)) CINFER_TRY(int_scalar(n, in, 3, "frame_length", &flen));
    if (present(in, num_in, 2)) {
        if (in[2].dtype != x->dtype || in[2].ndim != 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': window must be 1-D of the signal's dtype",
                              n->name);
        if (flen >= 0 && in[2].dims[0] != flen)
            return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': window length %lld != frame_length %lld",
                              n->name, (long long)in[2].dims[0], (long long)flen);
        flen = in[2].dims[0];
    }
    if (flen < 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': neither window nor frame_length is given",
                          n->name);
    if (flen < 1 || flen > x->dims[1])
        return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': frame_length %lld is not in [1, %lld]", n->name,
                          (long long)flen, (long long)x->dims[1]);
    bool onesided = graph_attr_int(n, "onesided", 1) != 0;
    out[0].dtype = x->dtype;
    out[0].ndim = 4;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = 1 + (x->dims[1] - flen) / step;
    out[0].dims[2] = onesided ? flen / 2 + 1 : flen;
    out[0].dims[3] = 2;
    return CINFER_OK;
}

/* ---- MelWeightMatrix ---- */

static cinfer_status infer_mel(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    int64_t bins = 0, len = 0;
    CINFER_TRY(int_scalar(n, in, 0, "num_mel_bins", &bins));
    CINFER_TRY(int_scalar(n, in, 1, "dft_length", &len));
    if (bins < 1 || len < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "MelWeightMatrix node '%s': num_mel_bins %lld and dft_length "
                          "%lld must be positive", n->name, (long long)bins, (long long)len);
    if (!dtype_is_integer(in[2].dtype) || tensor_numel(&in[2]) != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "MelWeightMatrix node '%s': sample_rate must be an integer "
                          "scalar", n->name);
    for (int i = 3; i < 5; i++)
        if (!dtype_is_float(in[i].dtype) || tensor_numel(&in[i]) != 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "MelWeightMatrix node '%s': %s must be a float scalar",
                              n->name, i == 3 ? "lower_edge_hertz" : "upper_edge_hertz");
    CINFER_TRY(output_datatype(n, &out[0].dtype));
    out[0].ndim = 2;
    out[0].dims[0] = len / 2 + 1;
    out[0].dims[1] = bins;
    return CINFER_OK;
}

cinfer_status signal_compute_mel(const graph_node *n, int64_t bins, int64_t nspec, int64_t len, int64_t rate,
                                 double lo_hz, double hi_hz, signal_mel *m) {
    if (rate <= 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "MelWeightMatrix node '%s': sample_rate %lld must be positive",
                          n->name, (long long)rate);
    m->bins = bins;
    m->nspec = nspec;
    m->len = len;
    m->rate = rate;
    m->lo_mel = 2595.0 * log1p(lo_hz / 700.0) / log(10.0);
    double hi_mel = 2595.0 * log1p(hi_hz / 700.0) / log(10.0);
    m->step = (hi_mel - m->lo_mel) / (double)(bins + 2);
    return CINFER_OK;
}

int64_t signal_mel_edge(const signal_mel *m, int64_t i) {
    double hz = 700.0 * expm1(((double)i * m->step + m->lo_mel) / 2595.0 * log(10.0));
    return (int64_t)floor((double)(m->len + 1) * hz / (double)m->rate);
}

cinfer_status signal_check_mel(const graph_node *n, const signal_mel *m) {
    for (int64_t i = 0; i < m->bins; i++) {
        int64_t l = signal_mel_edge(m, i), c = signal_mel_edge(m, i + 1), h = signal_mel_edge(m, i + 2);
        if (l < 0 || h >= m->nspec || c < l || h < c)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "MelWeightMatrix node '%s': filter %lld spans bins "
                              "[%lld, %lld] outside [0, %lld)", n->name, (long long)i, (long long)l, (long long)h,
                              (long long)m->nspec);
    }
    return CINFER_OK;
}

/* ---- RoiAlign, MaxRoiPool ---- */

void signal_compute_roi_align(const graph_node *n, signal_roi_align *p) {
    p->max_mode = strcmp(graph_attr_string(n, "mode", "avg"), "max") == 0;
    /* opsets before 16 only had the output_half_pixel behaviour */
    const char *ct = graph_attr_string(n, "coordinate_transformation_mode",
                                       n->opset < 16 ? "output_half_pixel" : "half_pixel");
    p->half_pixel = strcmp(ct, "half_pixel") == 0;
    p->sampling_ratio = graph_attr_int(n, "sampling_ratio", 0);
    p->spatial_scale = graph_attr_float(n, "spatial_scale", 1.0f);
}

cinfer_status signal_check_roi_align(const graph_node *n, const tensor *rois, const tensor *batch_indices,
                                     int64_t batch) {
    if (!rois->data || !batch_indices->data) return CINFER_OK;
    int64_t count = rois->ndim > 0 ? rois->dims[0] : 0;
    for (int64_t r = 0; r < count; r++) {
        int64_t b = tensor_get_int(batch_indices, r);
        if (b < 0 || b >= batch)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "RoiAlign node '%s': batch_indices[%lld] = %lld is not "
                              "in [0, %lld)", n->name, (long long)r, (long long)b, (long long)batch);
        for (int k = 0; k < 4; k++)
            if (!isfinite(tensor_get_double(rois, r * 4 + k)))
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "RoiAlign node '%s': roi %lld is not finite", n->name,
                                  (long long)r);
    }
    return CINFER_OK;
}

cinfer_status signal_check_max_roi_pool(const graph_node *n, const tensor *rois, int64_t batch, float spatial_scale) {
    if (!rois->data) return CINFER_OK;
    int64_t count = rois->ndim > 0 ? rois->dims[0] : 0;
    double scale = spatial_scale;
    for (int64_t r = 0; r < count; r++) {
        double bv = tensor_get_double(rois, r * 5);
        if (!(bv >= 0 && bv < (double)batch))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxRoiPool node '%s': roi %lld has batch index %g, not "
                              "in [0, %lld)", n->name, (long long)r, bv, (long long)batch);
        for (int k = 1; k < 5; k++)
            if (!(fabs(tensor_get_double(rois, r * 5 + k) * scale) < 1e15))
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxRoiPool node '%s': roi %lld is not finite",
                                  n->name, (long long)r);
    }
    return CINFER_OK;
}

static cinfer_status infer_roi(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    bool align = strcmp(n->op_type, "RoiAlign") == 0;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    const tensor *x = &in[0], *rois = &in[1];
    int cols = align ? 4 : 5;
    if (x->ndim != 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': X must be 4-D (N, C, H, W), got rank %d",
                          n->op_type, n->name, x->ndim);
    if (rois->dtype != x->dtype || rois->ndim != 2 || rois->dims[1] != cols)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': rois must be [num_rois, %d] of X's dtype",
                          n->op_type, n->name, cols);
    int64_t oh = 1, ow = 1;
    if (align) {
        const tensor *bi = &in[2];
        if (!dtype_is_integer(bi->dtype) || bi->ndim != 1 || bi->dims[0] != rois->dims[0])
            return core_error(CINFER_ERR_INVALID_MODEL, "RoiAlign node '%s': batch_indices must be an integer "
                              "vector of num_rois (%lld) entries", n->name, (long long)rois->dims[0]);
        oh = graph_attr_int(n, "output_height", 1);
        ow = graph_attr_int(n, "output_width", 1);
        const char *mode = graph_attr_string(n, "mode", "avg");
        if (strcmp(mode, "avg") != 0 && strcmp(mode, "max") != 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "RoiAlign node '%s': mode '%s' is not avg or max", n->name,
                              mode);
        const char *ct = graph_attr_string(n, "coordinate_transformation_mode", "half_pixel");
        if (strcmp(ct, "half_pixel") != 0 && strcmp(ct, "output_half_pixel") != 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "RoiAlign node '%s': coordinate_transformation_mode '%s' is "
                              "not half_pixel or output_half_pixel", n->name, ct);
    } else {
        size_t count = 0;
        const int64_t *ps = graph_attr_ints(n, "pooled_shape", &count);
        if (!ps || count != 2)
            return core_error(CINFER_ERR_INVALID_MODEL, "MaxRoiPool node '%s': pooled_shape must hold 2 ints",
                              n->name);
        oh = ps[0];
        ow = ps[1];
    }
    if (oh < 1 || ow < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': output size %lldx%lld must be positive",
                          n->op_type, n->name, (long long)oh, (long long)ow);
    out[0].dtype = x->dtype;
    out[0].ndim = 4;
    out[0].dims[0] = rois->dims[0];
    out[0].dims[1] = x->dims[1];
    out[0].dims[2] = oh;
    out[0].dims[3] = ow;
    return CINFER_OK;
}

/* ---- MaxUnpool ---- */

cinfer_status signal_compute_unpool(const graph_node *n, const tensor *in, int64_t dims[CINFER_MAX_DIMS],
                                    int64_t *total) {
    const tensor *x = &in[0];
    int sp = x->ndim - 2;
    size_t nk = 0, np_ = 0, ns = 0;
    const int64_t *k = graph_attr_ints(n, "kernel_shape", &nk);
    const int64_t *pads = graph_attr_ints(n, "pads", &np_);
    const int64_t *strides = graph_attr_ints(n, "strides", &ns);
    if (sp < 1 || !k || (int)nk != sp || (pads && (int)np_ != 2 * sp) || (strides && (int)ns != sp))
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': X rank %d does not match kernel_shape, "
                          "pads or strides", n->name, x->ndim);
    if (!dtype_is_integer(in[1].dtype) || !tensor_same_shape(&in[1], x))
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': indices must be integers of X's shape",
                          n->name);
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    *total = x->dims[0] * x->dims[1];
    for (int d = 0; d < sp; d++) {
        int64_t s = strides ? strides[d] : 1;
        if (k[d] < 1 || s < 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': kernel_shape and strides must be "
                              "positive", n->name);
        int64_t p = pads ? pads[d] + pads[sp + d] : 0;
        dims[2 + d] = (x->dims[2 + d] - 1) * s - p + k[d];
        if (dims[2 + d] < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': negative output dim", n->name);
        *total *= dims[2 + d];
    }
    return CINFER_OK;
}

cinfer_status signal_check_unpool_indices(const graph_node *n, const tensor *indices, int64_t count, int64_t total) {
    for (int64_t e = 0; indices->data && e < count; e++) {
        int64_t idx = tensor_get_int(indices, e);
        if (idx < 0 || idx >= total)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxUnpool node '%s': index %lld at position %lld is not "
                              "in [0, %lld)", n->name, (long long)idx, (long long)e, (long long)total);
    }
    return CINFER_OK;
}

static cinfer_status infer_maxunpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    const tensor *x = &in[0];
    int64_t dims[CINFER_MAX_DIMS], total;
    CINFER_TRY(signal_compute_unpool(n, in, dims, &total));
    shape_copy(&out[0], x);
    for (int d = 2; d < x->ndim; d++) out[0].dims[d] = dims[d];
    if (present(in, num_in, 2)) {
        const tensor *os = &in[2];
        if (!dtype_is_integer(os->dtype) || os->ndim != 1 || os->dims[0] != x->ndim)
            return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': output_shape must be an integer "
                              "vector of %d entries", n->name, x->ndim);
        for (int d = 0; d < x->ndim; d++) {
            int64_t v = tensor_get_int(os, d);
            /* the values land in the leading corner of output_shape, so it may only grow the inferred one */
            if (v < out[0].dims[d] || (d < 2 && v != x->dims[d]))
                return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': output_shape dim %d (%lld) is "
                                  "smaller than the unpooled %lld", n->name, d, (long long)v,
                                  (long long)out[0].dims[d]);
            out[0].dims[d] = v;
        }
    }
    return CINFER_OK;
}

/* ---- Det ---- */

static cinfer_status infer_det(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    const tensor *x = &in[0];
    if (x->ndim < 2 || x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
        return core_error(CINFER_ERR_INVALID_MODEL, "Det node '%s': input must be [..., M, M]", n->name);
    out[0].dtype = x->dtype;
    out[0].ndim = x->ndim - 2;
    for (int d = 0; d < x->ndim - 2; d++) out[0].dims[d] = x->dims[d];
    return CINFER_OK;
}


/* ---- NonMaxSuppression (OP_FLAG_DATA_DEPENDENT): int64 [selected, 3] of (batch, class, box); the bound is every
 * class of every batch keeping min(boxes, max_output_boxes_per_class) boxes (that input read when it is known,
 * else every box); the kernel writes the actual count (backend/cpu/signal_nms.c) ---- */

static cinfer_status infer_nms(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *boxes = &in[0], *scores = &in[1];
    /* float32 in ONNX; the half types of half-precision sessions (graph/precision.c) are read as float32 */
    if (!dtype_is_float(boxes->dtype) || !dtype_is_float(scores->dtype))
        return core_error(CINFER_ERR_UNSUPPORTED, "NonMaxSuppression node '%s': boxes and scores must be float, got "
                          "%s and %s", n->name, cinfer_dtype_name(boxes->dtype), cinfer_dtype_name(scores->dtype));
    if (boxes->ndim != 3 || scores->ndim != 3 || boxes->dims[2] != 4 || boxes->dims[0] != scores->dims[0] ||
        boxes->dims[1] != scores->dims[2]) {
        char bs[128], ss[128];
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "NonMaxSuppression node '%s': boxes %s and scores %s must be "
                          "[batches, boxes, 4] and [batches, classes, boxes]", n->name,
                          tensor_shape_str(boxes, bs, sizeof bs), tensor_shape_str(scores, ss, sizeof ss));
    }
    int64_t center = graph_attr_int(n, "center_point_box", 0);
    if (center != 0 && center != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "NonMaxSuppression node '%s': center_point_box is %lld, expected "
                          "0 or 1", n->name, (long long)center);
    for (int k = 2; k < num_in && k < 5; k++) {
        bool fits = k == 2 ? in[k].dtype == CINFER_DTYPE_INT64 : dtype_is_float(in[k].dtype);
        if (in[k].dtype != CINFER_DTYPE_UNDEFINED && (!fits || tensor_numel(&in[k]) != 1))
            return core_error(CINFER_ERR_INVALID_MODEL, "NonMaxSuppression node '%s': input %d must be one %s value", n->name,
                              k, k == 2 ? "int64" : "float");
    }
    int64_t per_class = boxes->dims[1];
    if (num_in < 3 || in[2].dtype == CINFER_DTYPE_UNDEFINED) per_class = 0;
    else if (in[2].data) {
        int64_t max_out = tensor_get_int(&in[2], 0);
        per_class = max_out <= 0 ? 0 : max_out < per_class ? max_out : per_class;
    }
    out[0].dtype = CINFER_DTYPE_INT64;
    out[0].ndim = 2;
    out[0].dims[0] = scores->dims[0] * scores->dims[1] * per_class;
    out[0].dims[1] = 3;
    return CINFER_OK;
}

const op_schema shape_signal_schemas[] = {
    {"HannWindow", infer_window, 1u << 0, 0, 1, 1},
    {"HammingWindow", infer_window, 1u << 0, 0, 1, 1},
    {"BlackmanWindow", infer_window, 1u << 0, 0, 1, 1},
    {"DFT", infer_dft, (1u << 1) | (1u << 2), 0, 1, 3},
    {"STFT", infer_stft, (1u << 1) | (1u << 3), 0, 2, 4},
    {"MelWeightMatrix", infer_mel, (1u << 0) | (1u << 1), 0, 5, 5},
    {"RoiAlign", infer_roi, 0, 0, 3, 3},
    {"MaxRoiPool", infer_roi, 0, 0, 2, 2},
    {"MaxUnpool", infer_maxunpool, 1u << 2, 0, 2, 3},
    {"Det", infer_det, 0, 0, 1, 1},
    {"NonMaxSuppression", infer_nms, 0, OP_FLAG_DATA_DEPENDENT, 2, 5},
    {NULL, NULL, 0, 0, 0, 0},
};
