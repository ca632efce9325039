/* Op schemas of the conv family: Conv, ConvTranspose, BatchNormalization and the pools. */
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"

enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID };

/* The sliding-window attributes of a conv or pool node, validated against the input rank. */
typedef struct window {
    int nsp; /* spatial rank */
    int auto_pad;
    bool ceil_mode;
    int64_t k[CINFER_MAX_DIMS], s[CINFER_MAX_DIMS], d[CINFER_MAX_DIMS];
    int64_t pb[CINFER_MAX_DIMS], pe[CINFER_MAX_DIMS]; /* explicit pads (begin, end) */
} window;

static const cinfer_dtype float_types[] = {
    CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED,
};
static const cinfer_dtype maxpool_types[] = {
    CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16,
    CINFER_DTYPE_INT8,  CINFER_DTYPE_UINT8,  CINFER_DTYPE_UNDEFINED,
};

static cinfer_status read_ints(const graph_node *n, const char *name, int want, int64_t min, int64_t dflt,
                               int64_t *dst) {
    size_t cnt = 0;
    const int64_t *v = graph_attr_ints(n, name, &cnt);
    if (!v) {
        for (int i = 0; i < want; i++) dst[i] = dflt;
        return CINFER_OK;
    }
    if ((int)cnt != want)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': attribute %s has %zu values, expected %d",
                          n->op_type, n->name, name, cnt, want);
    for (int i = 0; i < want; i++) {
        if (v[i] < min)
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': attribute %s[%d] is %lld, expected >= %lld",
                              n->op_type, n->name, name, i, (long long)v[i], (long long)min);
        dst[i] = v[i];
    }
    return CINFER_OK;
}

/* Reads kernel_shape (or takes it from the weights w), strides, dilations, pads and auto_pad. */
static cinfer_status read_window(const graph_node *n, const tensor *x, const tensor *w, bool use_dilation,
                                 bool use_ceil, window *win) {
    char sx[128], sw[128];
    memset(win, 0, sizeof *win);
    if (x->ndim < 3)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input X %s must have rank >= 3 (N, C, spatial...)",
                          n->op_type, n->name, tensor_shape_str(x, sx, sizeof sx));
    win->nsp = x->ndim - 2;
    int nsp = win->nsp;
    size_t kcnt = 0;
    const int64_t *ks = graph_attr_ints(n, "kernel_shape", &kcnt);
    if (ks) {
        CINFER_TRY(read_ints(n, "kernel_shape", nsp, 1, 1, win->k));
        if (w)
            for (int i = 0; i < nsp; i++)
                if (w->dims[i + 2] != win->k[i])
                    return core_error(CINFER_ERR_INVALID_MODEL,
                                      "%s node '%s': kernel_shape[%d] is %lld but the weights W %s have %lld there",
                                      n->op_type, n->name, i, (long long)win->k[i],
                                      tensor_shape_str(w, sw, sizeof sw), (long long)w->dims[i + 2]);
    } else if (w) {
        for (int i = 0; i < nsp; i++) win->k[i] = w->dims[i + 2];
    } else {
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': attribute kernel_shape is required", n->op_type,
                          n->name);
    }
    for (int i = 0; i < nsp; i++)
        if (win->k[i] < 1)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "%s node '%s': kernel size %lld in spatial dim %d, expected >= 1", n->op_type, n->name,
                              (long long)win->k[i], i);
    CINFER_TRY(read_ints(n, "strides", nsp, 1, 1, win->s));
    if (use_dilation) CINFER_TRY(read_ints(n, "dilations", nsp, 1, 1, win->d));
    else
        for (int i = 0; i < nsp; i++) win->d[i] = 1;
    int64_t pads[2 * CINFER_MAX_DIMS];
    CINFER_TRY(read_ints(n, "pads", 2 * nsp, 0, 0, pads));
    for (int i = 0; i < nsp; i++) {
        win->pb[i] = pads[i];
        win->pe[i] = pads[nsp + i];
    }
    const char *ap = graph_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == '\0') win->auto_pad = PAD_NOTSET;
    else if (strcmp(ap, "SAME_UPPER") == 0) win->auto_pad = PAD_SAME_UPPER;
    else if (strcmp(ap, "SAME_LOWER") == 0) win->auto_pad = PAD_SAME_LOWER;
    else if (strcmp(ap, "VALID") == 0) win->auto_pad = PAD_VALID;
    else
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': auto_pad is '%s', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                          n->op_type, n->name, ap);
    win->ceil_mode = use_ceil && graph_attr_int(n, "ceil_mode", 0) != 0;
    return CINFER_OK;
}

/* Output spatial sizes of a conv or pool; out[0..nsp). */
static cinfer_status window_output(const graph_node *n, const tensor *x, const window *win, int64_t *out) {
    char sx[128];
    for (int i = 0; i < win->nsp; i++) {
        int64_t in = x->dims[i + 2], s = win->s[i];
        int64_t dk = (win->k[i] - 1) * win->d[i] + 1;
        int64_t o;
        if (win->auto_pad == PAD_SAME_UPPER || win->auto_pad == PAD_SAME_LOWER) {
            o = (in + s - 1) / s;
        } else {
            int64_t pb = win->auto_pad == PAD_VALID ? 0 : win->pb[i];
            int64_t pe = win->auto_pad == PAD_VALID ? 0 : win->pe[i];
            int64_t num = in + pb + pe - dk;
            if (num < 0)
                return core_error(CINFER_ERR_INVALID_MODEL,
                                  "%s node '%s': input X %s has %lld in spatial dim %d (pads %lld+%lld), smaller than "
                                  "the dilated kernel size %lld",
                                  n->op_type, n->name, tensor_shape_str(x, sx, sizeof sx), (long long)in, i,
                                  (long long)pb, (long long)pe, (long long)dk);
            if (win->ceil_mode) {
                o = (num + s - 1) / s + 1;
                /* the last window must start inside the input or the left padding */
                if ((o - 1) * s >= in + pb) o--;
            } else {
                o = num / s + 1;
            }
        }
        if (o < 1 && in > 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': output spatial dim %d would be %lld", n->op_type,
                              n->name, i, (long long)o);
        out[i] = o < 0 ? 0 : o;
    }
    return CINFER_OK;
}

static cinfer_status check_float_input(const graph_node *n, const tensor *in, int num_in, int i, const char *what,
                                       cinfer_dtype want) {
    if (i >= num_in || in[i].dtype == CINFER_DTYPE_UNDEFINED)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input %s is missing", n->op_type, n->name, what);
    if (in[i].dtype != want)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input %s has dtype %s, expected %s like X",
                          n->op_type, n->name, what, cinfer_dtype_name(in[i].dtype), cinfer_dtype_name(want));
    return CINFER_OK;
}

static cinfer_status check_bias(const graph_node *n, const tensor *in, int num_in, int64_t m) {
    char sb[128];
    if (num_in < 3 || in[2].dtype == CINFER_DTYPE_UNDEFINED) return CINFER_OK;
    CINFER_TRY(check_float_input(n, in, num_in, 2, "B", in[0].dtype));
    if (in[2].ndim != 1 || in[2].dims[0] != m)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': bias B has shape %s, expected [%lld]", n->op_type,
                          n->name, tensor_shape_str(&in[2], sb, sizeof sb), (long long)m);
    return CINFER_OK;
}

/* Conv / ConvTranspose: checks X and W (float types, one rank >= 3) and reads group (>= 1). */
static cinfer_status check_conv_operands(const graph_node *n, const tensor *in, int num_in, int64_t *group) {
    const tensor *x = &in[0], *w = &in[1];
    char sx[128], sw[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    CINFER_TRY(check_float_input(n, in, num_in, 1, "W", x->dtype));
    if (x->ndim < 3 || w->ndim != x->ndim)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': X %s and W %s must have the same rank >= 3 (N, C, spatial...)", n->op_type,
                          n->name, tensor_shape_str(x, sx, sizeof sx), tensor_shape_str(w, sw, sizeof sw));
    *group = graph_attr_int(n, "group", 1);
    if (*group < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': group is %lld, expected >= 1", n->op_type,
                          n->name, (long long)*group);
    return CINFER_OK;
}

static cinfer_status infer_conv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0], *w = &in[1];
    char sx[128], sw[128];
    int64_t group = 1;
    CINFER_TRY(check_conv_operands(n, in, num_in, &group));
    int64_t c = x->dims[1], m = w->dims[0];
    if (w->dims[1] * group != c)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "Conv node '%s': X %s has %lld channels but W %s with group %lld expects %lld (W[1] * group)",
                          n->name, tensor_shape_str(x, sx, sizeof sx), (long long)c, tensor_shape_str(w, sw, sizeof sw),
                          (long long)group, (long long)(w->dims[1] * group));
    if (m % group != 0)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "Conv node '%s': W %s has %lld output channels, not a multiple of group %lld", n->name,
                          tensor_shape_str(w, sw, sizeof sw), (long long)m, (long long)group);
    CINFER_TRY(check_bias(n, in, num_in, m));
    window win;
    CINFER_TRY(read_window(n, x, w, true, false, &win));
    int64_t sp[CINFER_MAX_DIMS];
    CINFER_TRY(window_output(n, x, &win, sp));
    out[0].dtype = x->dtype;
    out[0].ndim = x->ndim;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = m;
    for (int i = 0; i < win.nsp; i++) out[0].dims[i + 2] = sp[i];
    return CINFER_OK;
}

static cinfer_status infer_conv_transpose(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                          int num_out) {
    (void)num_out;
    const tensor *x = &in[0], *w = &in[1];
    char sx[128], sw[128];
    int64_t group = 1;
    CINFER_TRY(check_conv_operands(n, in, num_in, &group));
    int64_t c = x->dims[1];
    if (w->dims[0] != c || c % group != 0)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "ConvTranspose node '%s': X %s has %lld channels; W %s must have as many in dim 0 and they "
                          "must divide by group %lld",
                          n->name, tensor_shape_str(x, sx, sizeof sx), (long long)c, tensor_shape_str(w, sw, sizeof sw),
                          (long long)group);
    int64_t m = w->dims[1] * group;
    CINFER_TRY(check_bias(n, in, num_in, m));
    window win;
    CINFER_TRY(read_window(n, x, w, true, false, &win));
    int nsp = win.nsp;
    int64_t opad[CINFER_MAX_DIMS];
    CINFER_TRY(read_ints(n, "output_padding", nsp, 0, 0, opad));
    size_t ocnt = 0;
    const int64_t *oshape = graph_attr_ints(n, "output_shape", &ocnt);
    if (oshape && (int)ocnt != nsp && (int)ocnt != nsp + 2)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "ConvTranspose node '%s': output_shape has %zu values, expected %d (spatial dims)", n->name,
                          ocnt, nsp);
    out[0].dtype = x->dtype;
    out[0].ndim = x->ndim;
    out[0].dims[0] = x->dims[0];
    out[0].dims[1] = m;
    for (int i = 0; i < nsp; i++) {
        int64_t in_sz = x->dims[i + 2], dk = (win.k[i] - 1) * win.d[i] + 1, o;
        if (oshape) o = oshape[(int)ocnt - nsp + i];
        else if (win.auto_pad == PAD_SAME_UPPER || win.auto_pad == PAD_SAME_LOWER) o = in_sz * win.s[i];
        else if (win.auto_pad == PAD_VALID) o = win.s[i] * (in_sz - 1) + opad[i] + dk;
        else o = win.s[i] * (in_sz - 1) + opad[i] + dk - win.pb[i] - win.pe[i];
        if (o < 1)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "ConvTranspose node '%s': output spatial dim %d would be %lld (input %s, pads %lld+%lld)",
                              n->name, i, (long long)o, tensor_shape_str(x, sx, sizeof sx), (long long)win.pb[i],
                              (long long)win.pe[i]);
        out[0].dims[i + 2] = o;
    }
    return CINFER_OK;
}

static cinfer_status infer_batchnorm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const tensor *x = &in[0];
    char sx[128], sp[128];
    static const char *names[] = {"X", "scale", "B", "input_mean", "input_var"};
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    if (x->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "BatchNormalization node '%s': X %s must have rank >= 2 (N, C, ...)", n->name,
                          tensor_shape_str(x, sx, sizeof sx));
    int64_t c = x->dims[1];
    for (int i = 1; i < 5; i++) {
        if (i >= num_in || in[i].dtype == CINFER_DTYPE_UNDEFINED)
            return core_error(CINFER_ERR_INVALID_MODEL, "BatchNormalization node '%s': input %s is missing", n->name,
                              names[i]);
        if (!dtype_is_float(in[i].dtype))
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "BatchNormalization node '%s': input %s has dtype %s, expected a float type", n->name,
                              names[i], cinfer_dtype_name(in[i].dtype));
        if (in[i].ndim != 1 || in[i].dims[0] != c)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "BatchNormalization node '%s': input %s has shape %s, expected [%lld] (channels of X %s)",
                              n->name, names[i], tensor_shape_str(&in[i], sp, sizeof sp), (long long)c,
                              tensor_shape_str(x, sx, sizeof sx));
    }
    shape_copy(&out[0], x);
    /* training outputs: running mean and variance (opset >= 14), saved mean and variance (older) */
    for (int j = 1; j < num_out; j++) {
        out[j].dtype = in[3].dtype;
        out[j].ndim = 1;
        out[j].dims[0] = c;
    }
    return CINFER_OK;
}

static cinfer_status infer_pool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                const cinfer_dtype *types, bool use_dilation, bool use_ceil) {
    (void)num_in;
    CINFER_TRY(shape_expect_dtype(n, in, 0, types));
    window win;
    CINFER_TRY(read_window(n, &in[0], NULL, use_dilation, use_ceil, &win));
    int64_t sp[CINFER_MAX_DIMS];
    CINFER_TRY(window_output(n, &in[0], &win, sp));
    out[0].dtype = in[0].dtype;
    out[0].ndim = in[0].ndim;
    out[0].dims[0] = in[0].dims[0];
    out[0].dims[1] = in[0].dims[1];
    for (int i = 0; i < win.nsp; i++) out[0].dims[i + 2] = sp[i];
    for (int j = 1; j < num_out; j++) {
        shape_copy(&out[j], &out[0]);
        out[j].dtype = CINFER_DTYPE_INT64;
    }
    return CINFER_OK;
}

static cinfer_status infer_maxpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    int64_t order = graph_attr_int(n, "storage_order", 0);
    if (order != 0 && order != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxPool node '%s': storage_order is %lld, expected 0 or 1",
                          n->name, (long long)order);
    return infer_pool(n, in, num_in, out, num_out, maxpool_types, true, true);
}

static cinfer_status infer_avgpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    /* dilations exist from AveragePool-19 on */
    return infer_pool(n, in, num_in, out, num_out, float_types, n->opset >= 19, true);
}

static cinfer_status check_p(const graph_node *n) {
    int64_t p = graph_attr_int(n, "p", 2);
    if (p < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': p is %lld, expected >= 1", n->op_type, n->name,
                          (long long)p);
    return CINFER_OK;
}

static cinfer_status infer_lppool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(check_p(n));
    /* dilations and ceil_mode exist from LpPool-18 on */
    return infer_pool(n, in, num_in, out, num_out, float_types, n->opset >= 18, n->opset >= 18);
}

static cinfer_status infer_global_pool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    char sx[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    if (in[0].ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': X %s must have rank >= 2 (N, C, spatial...)",
                          n->op_type, n->name, tensor_shape_str(&in[0], sx, sizeof sx));
    if (strcmp(n->op_type, "GlobalLpPool") == 0) CINFER_TRY(check_p(n));
    shape_copy(&out[0], &in[0]);
    for (int i = 2; i < out[0].ndim; i++) out[0].dims[i] = 1;
    return CINFER_OK;
}

const op_schema shape_conv_schemas[] = {
    {"Conv", infer_conv, 0, 0, 2, 3},
    {"ConvTranspose", infer_conv_transpose, 0, 0, 2, 3},
    {"BatchNormalization", infer_batchnorm, 0, 0, 5, 5},
    {"MaxPool", infer_maxpool, 0, 0, 1, 1},
    {"AveragePool", infer_avgpool, 0, 0, 1, 1},
    {"LpPool", infer_lppool, 0, 0, 1, 1},
    {"GlobalAveragePool", infer_global_pool, 0, 0, 1, 1},
    {"GlobalMaxPool", infer_global_pool, 0, 0, 1, 1},
    {"GlobalLpPool", infer_global_pool, 0, 0, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
