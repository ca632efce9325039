/* Op schemas of the image family: Resize, GridSample, AffineGrid, CenterCropPad, Col2Im. */
#include <math.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/image_params.h"

static const cinfer_dtype float_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16,
                                           CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED};

static bool present(const tensor *in, int num_in, int i) {
    return i >= 0 && i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

/* Present and not empty: Resize takes an empty roi/scales/sizes for "not given". */
static bool given(const tensor *in, int num_in, int i) {
    return present(in, num_in, i) && tensor_numel(&in[i]) > 0;
}

/* Checks that input i is a known 1-D (or scalar) integer tensor and returns its element count. */
static cinfer_status expect_int_vector(const graph_node *n, const tensor *in, int i, const char *what, int64_t *count) {
    if (!dtype_is_integer(in[i].dtype) || in[i].ndim > 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must be a 1-D int64 tensor, got %s rank %d",
                          n->op_type, n->name, what, cinfer_dtype_name(in[i].dtype), in[i].ndim);
    *count = tensor_numel(&in[i]);
    if (*count > 0 && !in[i].data)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the value of %s is not known", n->op_type, n->name,
                          what);
    return CINFER_OK;
}

/* Normalises a list of axes for rank r, refusing repeats. */
static cinfer_status normalize_axes(const graph_node *n, const int64_t *axes, size_t count, int r, int *out) {
    bool seen[CINFER_MAX_DIMS] = {false};
    if (count > (size_t)r)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %zu axes given for rank %d", n->op_type, n->name,
                          count, r);
    for (size_t k = 0; k < count; k++) {
        int a = 0;
        CINFER_TRY(shape_normalize_axis(n, axes[k], r, &a));
        if (seen[a])
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axis %lld is listed twice", n->op_type,
                              n->name, (long long)axes[k]);
        seen[a] = true;
        out[k] = a;
    }
    return CINFER_OK;
}

static bool near_one(double v) { return fabs(v - 1.0) <= 1e-9 * fmax(1.0, fabs(v)); }
static bool near_zero(double v) { return fabs(v) <= 1e-9; }

/* ---------------------------------------------------------------------------------------------------
 * Resize
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status resize_attrs(const graph_node *n, image_resize *p) {
    const char *mode = graph_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") == 0) p->mode = RESIZE_NEAREST;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0) p->mode = RESIZE_LINEAR;
    else if (strcmp(mode, "cubic") == 0 || strcmp(mode, "bicubic") == 0) p->mode = RESIZE_CUBIC;
    else
        return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': mode '%s' is not nearest, linear or cubic",
                          n->name, mode);

    const char *ct =
        graph_attr_string(n, "coordinate_transformation_mode", n->opset < 11 ? "asymmetric" : "half_pixel");
    static const struct { const char *name; image_coord_mode mode; } coords[] = {
        {"half_pixel", COORD_HALF_PIXEL},         {"half_pixel_symmetric", COORD_HALF_PIXEL_SYMMETRIC},
        {"pytorch_half_pixel", COORD_PYTORCH_HALF_PIXEL}, {"align_corners", COORD_ALIGN_CORNERS},
        {"asymmetric", COORD_ASYMMETRIC},         {"tf_crop_and_resize", COORD_TF_CROP_AND_RESIZE},
    };
    size_t c = 0;
    while (c < sizeof coords / sizeof coords[0] && strcmp(ct, coords[c].name) != 0) c++;
    if (c == sizeof coords / sizeof coords[0])
        return core_error(CINFER_ERR_UNSUPPORTED, "Resize node '%s': coordinate_transformation_mode '%s' is not "
                          "supported", n->name, ct);
    p->coord = coords[c].mode;

    const char *nm = graph_attr_string(n, "nearest_mode", n->opset < 11 ? "simple" : "round_prefer_floor");
    if (strcmp(nm, "round_prefer_floor") == 0) p->nearest = NEAREST_ROUND_PREFER_FLOOR;
    else if (strcmp(nm, "round_prefer_ceil") == 0) p->nearest = NEAREST_ROUND_PREFER_CEIL;
    else if (strcmp(nm, "floor") == 0) p->nearest = NEAREST_FLOOR;
    else if (strcmp(nm, "ceil") == 0) p->nearest = NEAREST_CEIL;
    else if (strcmp(nm, "simple") == 0 && n->opset < 11) p->nearest = NEAREST_SIMPLE;
    else
        return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': nearest_mode '%s' is not supported", n->name,
                          nm);

    p->cubic_a = graph_attr_float(n, "cubic_coeff_a", -0.75f);
    p->exclude_outside = graph_attr_int(n, "exclude_outside", 0) != 0;
    p->extrapolation_value = graph_attr_float(n, "extrapolation_value", 0.0f);
    /* antialias only changes linear and cubic filters (nearest ignores it) */
    p->antialias = graph_attr_int(n, "antialias", 0) != 0 && p->mode != RESIZE_NEAREST;
    return CINFER_OK;
}

cinfer_status image_compute_resize(const graph_node *n, const tensor *in, int num_in, image_resize *p) {
    const tensor *x = &in[0];
    int r = x->ndim;
    memset(p, 0, sizeof *p);
    p->ndim = r;
    CINFER_TRY(resize_attrs(n, p));
    for (int d = 0; d < r; d++) {
        p->out_dims[d] = x->dims[d];
        p->scale[d] = 1.0;
        p->roi_start[d] = 0.0;
        p->roi_end[d] = 1.0;
    }
    /* Resize-10: (X, scales); from 11: (X, roi, scales, sizes) */
    int roi_i = n->opset < 11 ? -1 : 1, scales_i = n->opset < 11 ? 1 : 2, sizes_i = n->opset < 11 ? -1 : 3;

    int axes[CINFER_MAX_DIMS];
    size_t naxes = (size_t)r;
    size_t cnt = 0;
    const int64_t *attr_axes = n->opset >= 18 ? graph_attr_ints(n, "axes", &cnt) : NULL;
    if (attr_axes) {
        CINFER_TRY(normalize_axes(n, attr_axes, cnt, r, axes));
        naxes = cnt;
    } else {
        for (int d = 0; d < r; d++) axes[d] = d;
    }

    bool has_scales = given(in, num_in, scales_i), has_sizes = given(in, num_in, sizes_i);
    if (has_scales && has_sizes)
        return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': both scales and sizes are given, expected one",
                          n->name);
    if (!has_scales && !has_sizes)
        return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': neither scales nor sizes is given", n->name);

    if (p->coord == COORD_TF_CROP_AND_RESIZE && given(in, num_in, roi_i)) {
        const tensor *roi = &in[roi_i];
        if (!dtype_is_float(roi->dtype) || !roi->data)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': roi must be a known float tensor", n->name);
        if (tensor_numel(roi) != 2 * (int64_t)naxes)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': roi has %lld values, expected %zu (2 x %s "
                              "%zu)", n->name, (long long)tensor_numel(roi), 2 * naxes,
                              attr_axes ? "axes" : "input rank", naxes);
        for (size_t k = 0; k < naxes; k++) {
            p->roi_start[axes[k]] = tensor_get_double(roi, (int64_t)k);
            p->roi_end[axes[k]] = tensor_get_double(roi, (int64_t)(naxes + k));
        }
    }

    if (has_scales) {
        const tensor *s = &in[scales_i];
        if (!dtype_is_float(s->dtype) || s->ndim > 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': scales must be a 1-D float tensor, got %s "
                              "rank %d", n->name, cinfer_dtype_name(s->dtype), s->ndim);
        if (!s->data)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': the value of scales is not known", n->name);
        if (tensor_numel(s) != (int64_t)naxes)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': scales has %lld values, %s is %zu", n->name,
                              (long long)tensor_numel(s), attr_axes ? "the axes count" : "input rank", naxes);
        for (size_t k = 0; k < naxes; k++) {
            int a = axes[k];
            /* the scale is a float32 value; output = floor(scale * input) computed in double */
            double sc = (double)(float)tensor_get_double(s, (int64_t)k);
            if (!(sc > 0) || !isfinite(sc))
                return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': scales[%zu] is %g, expected > 0",
                                  n->name, k, sc);
            double o = floor(sc * (double)x->dims[a]);
            if (o > 1e12)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "Resize node '%s': scales[%zu] = %g makes axis %d "
                                  "too large", n->name, k, sc, a);
            p->scale[a] = sc;
            p->out_dims[a] = (int64_t)o;
        }
    } else {
        const tensor *s = &in[sizes_i];
        int64_t count = 0;
        CINFER_TRY(expect_int_vector(n, in, sizes_i, "sizes", &count));
        if (count != (int64_t)naxes)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': sizes has %lld values, %s is %zu", n->name,
                              (long long)count, attr_axes ? "the axes count" : "input rank", naxes);
        const char *policy = n->opset >= 18 ? graph_attr_string(n, "keep_aspect_ratio_policy", "stretch") : "stretch";
        int pol = strcmp(policy, "stretch") == 0 ? 0 : strcmp(policy, "not_larger") == 0 ? 1
                  : strcmp(policy, "not_smaller") == 0 ? 2 : -1;
        if (pol < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': keep_aspect_ratio_policy '%s' is not "
                              "stretch, not_larger or not_smaller", n->name, policy);
        double keep = pol == 1 ? INFINITY : 0.0;
        for (size_t k = 0; k < naxes; k++) {
            int a = axes[k];
            int64_t v = tensor_get_int(s, (int64_t)k);
            if (v < 0 || v > ((int64_t)1 << 40))
                return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': sizes[%zu] is %lld", n->name, k,
                                  (long long)v);
            if (x->dims[a] == 0) {
                if (v != 0)
                    return core_error(CINFER_ERR_INVALID_ARGUMENT, "Resize node '%s': axis %d is empty and cannot be "
                                      "resized to %lld", n->name, a, (long long)v);
                continue;
            }
            double sc = (double)v / (double)x->dims[a];
            p->out_dims[a] = v;
            p->scale[a] = sc;
            if (pol == 1 && sc < keep) keep = sc;
            if (pol == 2 && sc > keep) keep = sc;
        }
        if (pol != 0) {
            for (size_t k = 0; k < naxes; k++) {
                int a = axes[k];
                if (x->dims[a] == 0) continue;
                p->scale[a] = keep;
                p->out_dims[a] = (int64_t)(keep * (double)x->dims[a] + 0.5);
            }
        }
    }
    for (int d = 0; d < r; d++) {
        if (x->dims[d] == 0 && p->out_dims[d] != 0)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Resize node '%s': axis %d is empty and cannot be resized",
                              n->name, d);
        bool roi_trivial = p->coord != COORD_TF_CROP_AND_RESIZE ||
                           (near_zero(p->roi_start[d]) && near_one(p->roi_end[d]));
        p->resized[d] = !(near_one(p->scale[d]) && p->out_dims[d] == x->dims[d] && roi_trivial);
    }
    return CINFER_OK;
}

bool image_resize_interpolable(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: case CINFER_DTYPE_DOUBLE: case CINFER_DTYPE_FLOAT16: case CINFER_DTYPE_BFLOAT16:
    case CINFER_DTYPE_INT8: case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT16: case CINFER_DTYPE_UINT16:
    case CINFER_DTYPE_INT32: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_INT64: case CINFER_DTYPE_UINT64:
        return true;
    default: return false;
    }
}

int image_resize_tap_count(const image_resize *p, double scale) {
    double s = scale < 1 ? scale : 1;
    if (p->antialias && p->mode == RESIZE_LINEAR) return 2 - 2 * (int)(floor(-1 / s) + 1);
    if (p->antialias && p->mode == RESIZE_CUBIC) return 2 - 2 * (int)(floor(-2 / s) + 1);
    return p->mode == RESIZE_CUBIC ? 4 : 2;
}

int image_resize_pass_order(const image_resize *p, int order[CINFER_MAX_DIMS]) {
    int passes = 0;
    if (p->mode == RESIZE_NEAREST) return 0;
    for (int d = p->ndim - 1; d >= 0; d--) {
        if (!p->resized[d]) continue;
        int k = passes++;
        while (k > 0 && p->scale[order[k - 1]] > p->scale[d]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = d;
    }
    return passes;
}

static cinfer_status infer_resize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    if (cinfer_dtype_size(in[0].dtype) == 0)
        return core_error(CINFER_ERR_UNSUPPORTED, "Resize node '%s': X has dtype %s", n->name,
                          cinfer_dtype_name(in[0].dtype));
    if (in[0].ndim < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "Resize node '%s': X must have rank >= 1", n->name);
    image_resize p;
    CINFER_TRY(image_compute_resize(n, in, num_in, &p));
    out[0].dtype = in[0].dtype;
    out[0].ndim = in[0].ndim;
    for (int d = 0; d < in[0].ndim; d++) out[0].dims[d] = p.out_dims[d];
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * GridSample, AffineGrid
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status infer_grid_sample(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    CINFER_TRY(shape_expect_dtype(n, in, 1, float_types));
    const tensor *x = &in[0], *g = &in[1];
    int r = x->ndim - 2;
    if (r < 1 || (n->opset < 20 && r != 2))
        return core_error(CINFER_ERR_INVALID_MODEL, "GridSample node '%s': X has rank %d, expected %s", n->name,
                          x->ndim, n->opset < 20 ? "4 ([N,C,H,W])" : ">= 3 ([N,C,D1,...])");
    if (r > 3)
        return core_error(CINFER_ERR_UNSUPPORTED, "GridSample node '%s': %d spatial dims, at most 3 are supported",
                          n->name, r);
    char sx[128], sg[128];
    if (g->ndim != x->ndim || g->dims[0] != x->dims[0] || g->dims[g->ndim - 1] != r)
        return core_error(CINFER_ERR_INVALID_MODEL, "GridSample node '%s': grid has shape %s, expected [%lld,...,%d] "
                          "of rank %d for X %s", n->name, tensor_shape_str(g, sg, sizeof sg), (long long)x->dims[0], r,
                          x->ndim, tensor_shape_str(x, sx, sizeof sx));
    const char *mode = graph_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear");
    if (strcmp(mode, "bilinear") && strcmp(mode, "linear") && strcmp(mode, "nearest") && strcmp(mode, "bicubic") &&
        strcmp(mode, "cubic"))
        return core_error(CINFER_ERR_INVALID_MODEL, "GridSample node '%s': mode '%s' is not linear, nearest or cubic",
                          n->name, mode);
    const char *pad = graph_attr_string(n, "padding_mode", "zeros");
    if (strcmp(pad, "zeros") && strcmp(pad, "border") && strcmp(pad, "reflection"))
        return core_error(CINFER_ERR_INVALID_MODEL, "GridSample node '%s': padding_mode '%s' is not zeros, border or "
                          "reflection", n->name, pad);
    out[0].dtype = x->dtype;
    out[0].ndim = x->ndim;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = x->dims[1];
    for (int d = 0; d < r; d++) out[0].dims[2 + d] = g->dims[1 + d];
    return CINFER_OK;
}

static cinfer_status infer_affine_grid(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    int64_t count = 0;
    CINFER_TRY(expect_int_vector(n, in, 1, "size", &count));
    if (count != 4 && count != 5)
        return core_error(CINFER_ERR_INVALID_MODEL, "AffineGrid node '%s': size has %lld values, expected 4 "
                          "([N,C,H,W]) or 5 ([N,C,D,H,W])", n->name, (long long)count);
    int r = (int)count - 2;
    const tensor *t = &in[0];
    char st[128];
    if (t->ndim != 3 || t->dims[1] != r || t->dims[2] != r + 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "AffineGrid node '%s': theta has shape %s, expected [N,%d,%d]",
                          n->name, tensor_shape_str(t, st, sizeof st), r, r + 1);
    for (int k = 0; k < (int)count; k++)
        if (tensor_get_int(&in[1], k) < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "AffineGrid node '%s': size[%d] is negative", n->name, k);
    if (tensor_get_int(&in[1], 0) != t->dims[0])
        return core_error(CINFER_ERR_INVALID_MODEL, "AffineGrid node '%s': size[0] is %lld, theta has N = %lld",
                          n->name, (long long)tensor_get_int(&in[1], 0), (long long)t->dims[0]);
    out[0].dtype = t->dtype;
    out[0].ndim = r + 2;
    out[0].dims[0] = t->dims[0];
    for (int d = 0; d < r; d++) out[0].dims[1 + d] = tensor_get_int(&in[1], 2 + d);
    out[0].dims[r + 1] = r;
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * CenterCropPad, Col2Im
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status infer_center_crop_pad(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                           int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0];
    if (cinfer_dtype_size(x->dtype) == 0)
        return core_error(CINFER_ERR_UNSUPPORTED, "CenterCropPad node '%s': input has dtype %s", n->name,
                          cinfer_dtype_name(x->dtype));
    int axes[CINFER_MAX_DIMS];
    size_t naxes = 0;
    const int64_t *attr = graph_attr_ints(n, "axes", &naxes);
    if (attr) {
        CINFER_TRY(normalize_axes(n, attr, naxes, x->ndim, axes));
    } else {
        naxes = (size_t)x->ndim;
        for (int d = 0; d < x->ndim; d++) axes[d] = d;
    }
    int64_t count = 0;
    CINFER_TRY(expect_int_vector(n, in, 1, "shape", &count));
    if (count != (int64_t)naxes)
        return core_error(CINFER_ERR_INVALID_MODEL, "CenterCropPad node '%s': shape has %lld values, expected %zu",
                          n->name, (long long)count, naxes);
    shape_copy(&out[0], x);
    for (size_t k = 0; k < naxes; k++) {
        int64_t v = tensor_get_int(&in[1], (int64_t)k);
        if (v < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "CenterCropPad node '%s': shape[%zu] is %lld", n->name, k,
                              (long long)v);
        out[0].dims[axes[k]] = v;
    }
    return CINFER_OK;
}

static cinfer_status infer_col2im(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0];
    if (cinfer_dtype_size(x->dtype) == 0)
        return core_error(CINFER_ERR_UNSUPPORTED, "Col2Im node '%s': input has dtype %s", n->name,
                          cinfer_dtype_name(x->dtype));
    if (x->ndim != 3)
        return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': input has rank %d, expected 3 ([N, C*prod("
                          "block_shape), L])", n->name, x->ndim);
    int64_t r = 0, rb = 0;
    CINFER_TRY(expect_int_vector(n, in, 1, "image_shape", &r));
    CINFER_TRY(expect_int_vector(n, in, 2, "block_shape", &rb));
    if (r < 1 || r != rb || r > CINFER_MAX_DIMS - 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': image_shape has %lld values and block_shape "
                          "%lld, expected the same count in 1..%d", n->name, (long long)r, (long long)rb,
                          CINFER_MAX_DIMS - 2);
    size_t nd = 0, np = 0, ns = 0;
    const int64_t *dil = graph_attr_ints(n, "dilations", &nd), *pads = graph_attr_ints(n, "pads", &np),
                  *str = graph_attr_ints(n, "strides", &ns);
    if ((dil && nd != (size_t)r) || (pads && np != 2 * (size_t)r) || (str && ns != (size_t)r))
        return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': dilations/strides need %lld values and pads "
                          "%lld", n->name, (long long)r, 2 * (long long)r);
    int64_t block = 1, blocks = 1;
    for (int64_t d = 0; d < r; d++) {
        int64_t img = tensor_get_int(&in[1], d), k = tensor_get_int(&in[2], d);
        int64_t di = dil ? dil[d] : 1, s = str ? str[d] : 1, pb = pads ? pads[d] : 0, pe = pads ? pads[d + r] : 0;
        if (img <= 0 || k <= 0 || di <= 0 || s <= 0 || pb < 0 || pe < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': axis %lld has image size %lld, block %lld, "
                              "dilation %lld, stride %lld, pads %lld/%lld", n->name, (long long)d, (long long)img,
                              (long long)k, (long long)di, (long long)s, (long long)pb, (long long)pe);
        int64_t nb = (img + pb + pe - di * (k - 1) - 1);
        nb = nb < 0 ? 0 : nb / s + 1;
        if (nb < 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': the block does not fit into axis %lld",
                              n->name, (long long)d);
        block *= k;
        blocks *= nb;
    }
    if (x->dims[1] % block != 0 || x->dims[2] != blocks)
        return core_error(CINFER_ERR_INVALID_MODEL, "Col2Im node '%s': input is [%lld,%lld,%lld], expected dim 1 a "
                          "multiple of %lld and dim 2 = %lld blocks", n->name, (long long)x->dims[0],
                          (long long)x->dims[1], (long long)x->dims[2], (long long)block, (long long)blocks);
    out[0].dtype = x->dtype;
    out[0].ndim = (int)r + 2;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = x->dims[1] / block;
    for (int64_t d = 0; d < r; d++) out[0].dims[2 + d] = tensor_get_int(&in[1], d);
    return CINFER_OK;
}

const op_schema shape_image_schemas[] = {
    {"Resize", infer_resize, (1u << 1) | (1u << 2) | (1u << 3), 0, 1, 4},
    {"GridSample", infer_grid_sample, 0, 0, 2, 2},
    {"AffineGrid", infer_affine_grid, 1u << 1, 0, 2, 2},
    {"CenterCropPad", infer_center_crop_pad, 1u << 1, 0, 2, 2},
    {"Col2Im", infer_col2im, (1u << 1) | (1u << 2), 0, 3, 3},
    {NULL, NULL, 0, 0, 0, 0},
};
