/* Op schemas of the conv family: Conv, ConvTranspose, BatchNormalization, the pools, ConvInteger and QLinearConv. */
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/conv_params.h"

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

/* The window's op-dependent attributes: dilations exist from AveragePool-19 and LpPool-18 on (always for the
 * others), ceil_mode for the pools (LpPool from 18), output_padding for ConvTranspose. */
static void window_attrs(const graph_node *n, bool *use_dilation, bool *use_ceil, bool *transpose) {
    bool avg = strcmp(n->op_type, "AveragePool") == 0, lp = strcmp(n->op_type, "LpPool") == 0;
    *use_dilation = avg ? n->opset >= 19 : lp ? n->opset >= 18 : true;
    *use_ceil = avg || strcmp(n->op_type, "MaxPool") == 0 || (lp && n->opset >= 18);
    *transpose = strcmp(n->op_type, "ConvTranspose") == 0;
}

cinfer_status conv_read_window(const graph_node *n, const tensor *x, const tensor *w, conv_window *win) {
    char sx[128], sw[128];
    bool use_dilation, use_ceil, transpose;
    window_attrs(n, &use_dilation, &use_ceil, &transpose);
    memset(win, 0, sizeof *win);
    if (x->ndim < 3)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input X %s must have rank >= 3 (N, C, spatial...)",
                          n->op_type, n->name, tensor_shape_str(x, sx, sizeof sx));
    win->nsp = x->ndim - 2;
    win->transpose = transpose;
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
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == '\0') win->auto_pad = CONV_AUTO_PAD_NOTSET;
    else if (strcmp(ap, "SAME_UPPER") == 0) win->auto_pad = CONV_AUTO_PAD_SAME_UPPER;
    else if (strcmp(ap, "SAME_LOWER") == 0) win->auto_pad = CONV_AUTO_PAD_SAME_LOWER;
    else if (strcmp(ap, "VALID") == 0) win->auto_pad = CONV_AUTO_PAD_VALID;
    else
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': auto_pad is '%s', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                          n->op_type, n->name, ap);
    win->ceil_mode = use_ceil && graph_attr_int(n, "ceil_mode", 0) != 0;
    if (transpose) CINFER_TRY(read_ints(n, "output_padding", nsp, 0, 0, win->opad));
    return CINFER_OK;
}

static bool same_pad(const conv_window *win) {
    return win->auto_pad == CONV_AUTO_PAD_SAME_UPPER || win->auto_pad == CONV_AUTO_PAD_SAME_LOWER;
}

/* ConvTranspose: output_shape (spatial dims, or all dims) when given, else from the input, strides, kernel,
 * output_padding and pads. */
static cinfer_status transpose_output(const graph_node *n, const tensor *x, const conv_window *win, int64_t *out) {
    char sx[128];
    int nsp = win->nsp;
    size_t ocnt = 0;
    const int64_t *oshape = graph_attr_ints(n, "output_shape", &ocnt);
    if (oshape && (int)ocnt != nsp && (int)ocnt != nsp + 2)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "ConvTranspose node '%s': output_shape has %zu values, expected %d (spatial dims)", n->name,
                          ocnt, nsp);
    for (int i = 0; i < nsp; i++) {
        int64_t in_sz = x->dims[i + 2], dk = (win->k[i] - 1) * win->d[i] + 1, o;
        if (oshape) o = oshape[(int)ocnt - nsp + i];
        else if (same_pad(win)) o = in_sz * win->s[i];
        else if (win->auto_pad == CONV_AUTO_PAD_VALID) o = win->s[i] * (in_sz - 1) + win->opad[i] + dk;
        else o = win->s[i] * (in_sz - 1) + win->opad[i] + dk - win->pb[i] - win->pe[i];
        if (o < 1)
            return core_error(CINFER_ERR_INVALID_MODEL,
                              "ConvTranspose node '%s': output spatial dim %d would be %lld (input %s, pads %lld+%lld)",
                              n->name, i, (long long)o, tensor_shape_str(x, sx, sizeof sx), (long long)win->pb[i],
                              (long long)win->pe[i]);
        out[i] = o;
    }
    return CINFER_OK;
}

cinfer_status conv_window_output(const graph_node *n, const tensor *x, const conv_window *win, int64_t *out) {
    char sx[128];
    if (win->transpose) return transpose_output(n, x, win, out);
    for (int i = 0; i < win->nsp; i++) {
        int64_t in = x->dims[i + 2], s = win->s[i];
        int64_t dk = (win->k[i] - 1) * win->d[i] + 1;
        int64_t o;
        if (same_pad(win)) {
            o = (in + s - 1) / s;
        } else {
            int64_t pb = win->auto_pad == CONV_AUTO_PAD_VALID ? 0 : win->pb[i];
            int64_t pe = win->auto_pad == CONV_AUTO_PAD_VALID ? 0 : win->pe[i];
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

static int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

void conv_window_pads(const conv_window *win, int i, int64_t in, int64_t out, int64_t *pb, int64_t *pe) {
    int64_t dk = (win->k[i] - 1) * win->d[i] + 1;
    if (same_pad(win)) {
        bool upper = win->auto_pad == CONV_AUTO_PAD_SAME_UPPER;
        int64_t total;
        if (win->transpose) {
            total = win->s[i] * (in - 1) + win->opad[i] + dk - out;
            *pb = upper ? floor_div(total, 2) : total - floor_div(total, 2);
        } else {
            total = (out - 1) * win->s[i] + dk - in;
            if (total < 0) total = 0;
            *pb = upper ? total / 2 : total - total / 2;
        }
        *pe = total - *pb;
    } else if (win->auto_pad == CONV_AUTO_PAD_VALID) {
        *pb = *pe = 0;
    } else {
        *pb = win->pb[i];
        *pe = win->pe[i];
    }
}

cinfer_status conv_compute_geom(const graph_node *n, const tensor *x, const tensor *y, const tensor *w,
                                const char *backend, conv_geom *g) {
    int nsp = x->ndim - 2;
    if (nsp < 1 || nsp > 3 || y->ndim != x->ndim || (w && w->ndim != x->ndim))
        return core_error(CINFER_ERR_UNSUPPORTED,
                          "%s node '%s': the %s kernel handles 1-3 spatial dims, got X rank %d (W, Y must match)",
                          n->op_type, n->name, backend, x->ndim);
    conv_window win;
    CINFER_TRY(conv_read_window(n, x, w, &win));
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        g->in[i] = g->out[i] = g->k[i] = g->s[i] = g->d[i] = 1;
        g->pb[i] = g->pe[i] = 0;
    }
    for (int i = 0; i < nsp; i++) {
        int j = off + i;
        g->in[j] = x->dims[2 + i];
        g->out[j] = y->dims[2 + i];
        g->k[j] = win.k[i];
        g->s[j] = win.s[i];
        g->d[j] = win.d[i];
        conv_window_pads(&win, i, g->in[j], g->out[j], &g->pb[j], &g->pe[j]);
    }
    g->in_size = g->in[0] * g->in[1] * g->in[2];
    g->out_size = g->out[0] * g->out[1] * g->out[2];
    g->k_size = g->k[0] * g->k[1] * g->k[2];
    return CINFER_OK;
}

cinfer_status conv_compute_conv(const graph_node *n, const tensor *x, const tensor *w, const tensor *b,
                                const tensor *y, const char *backend, conv_geom *geom, int64_t *group) {
    CINFER_TRY(conv_compute_geom(n, x, y, w, backend, geom));
    bool transpose = strcmp(n->op_type, "ConvTranspose") == 0;
    int64_t g = graph_attr_int(n, "group", 1);
    int64_t batch = x->dims[0], c = x->dims[1], m = y->dims[1];
    int64_t w_out = transpose ? w->dims[1] * g : w->dims[0], w_in = transpose ? w->dims[0] : w->dims[1] * g;
    if (g < 1 || c % g || m % g || w_out != m || w_in != c || batch != y->dims[0] || (b && tensor_numel(b) != m))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': X, W, B shapes do not fit group %lld",
                          n->op_type, n->name, (long long)g);
    *group = g;
    return CINFER_OK;
}

cinfer_status conv_read_pool(const graph_node *n, conv_pool *p) {
    int64_t order = graph_attr_int(n, "storage_order", 0);
    if (strcmp(n->op_type, "MaxPool") == 0 && order != 0 && order != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxPool node '%s': storage_order is %lld, expected 0 or 1",
                          n->name, (long long)order);
    p->col_major = order == 1;
    p->include_pad = graph_attr_int(n, "count_include_pad", 0) != 0;
    p->p = graph_attr_int(n, "p", 2);
    if (p->p < 1 && (strcmp(n->op_type, "LpPool") == 0 || strcmp(n->op_type, "GlobalLpPool") == 0))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': p is %lld, expected >= 1", n->op_type, n->name,
                          (long long)p->p);
    return CINFER_OK;
}

cinfer_status conv_compute_pool(const graph_node *n, const tensor *in, const tensor *out, int num_out,
                                const char *backend, conv_geom *g, conv_pool *p) {
    const tensor *x = &in[0], *y = &out[0];
    CINFER_TRY(conv_compute_geom(n, x, y, NULL, backend, g));
    if (x->dims[0] != y->dims[0] || x->dims[1] != y->dims[1])
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output batch/channels differ from the input",
                          n->op_type, n->name);
    if (num_out > 1 && out[1].data && (out[1].dtype != CINFER_DTYPE_INT64 || tensor_numel(&out[1]) != tensor_numel(y)))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxPool node '%s': Indices must be int64 shaped like Y",
                          n->name);
    return conv_read_pool(n, p);
}

cinfer_status conv_compute_global_pool(const graph_node *n, const tensor *x, const tensor *y, int64_t *planes,
                                       int64_t *size, conv_pool *p) {
    if (x->ndim < 2)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': X must have rank >= 2", n->op_type, n->name);
    *planes = x->dims[0] * x->dims[1];
    if (tensor_numel(y) != *planes)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output must hold one value per (N, C)",
                          n->op_type, n->name);
    *size = *planes > 0 ? tensor_numel(x) / *planes : 0;
    return conv_read_pool(n, p);
}

bool conv_channels_last(const graph_node *n) { return graph_attr_int(n, "cinfer_channels_last", 0) != 0; }

void conv_channels_first_view(const tensor *t, tensor *view) {
    *view = *t;
    if (t->ndim < 3) return;
    view->dims[1] = t->dims[t->ndim - 1];
    for (int i = 2; i < t->ndim; i++) view->dims[i] = t->dims[i - 1];
}

void conv_dims_to_channels_last(tensor *t) {
    if (t->ndim < 3) return;
    int64_t c = t->dims[1];
    for (int i = 1; i < t->ndim - 1; i++) t->dims[i] = t->dims[i + 1];
    t->dims[t->ndim - 1] = c;
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

/* X and W of one rank >= 3, and group (>= 1). */
static cinfer_status check_conv_ranks(const graph_node *n, const tensor *x, const tensor *w, int64_t *group) {
    char sx[128], sw[128];
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

/* Conv / ConvTranspose: checks X and W (float types, one rank >= 3) and reads group (>= 1). */
static cinfer_status check_conv_operands(const graph_node *n, const tensor *in, int num_in, int64_t *group) {
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    CINFER_TRY(check_float_input(n, in, num_in, 1, "W", in[0].dtype));
    return check_conv_ranks(n, &in[0], &in[1], group);
}

/* Conv's channel rule: W [M, C / group, k...] with M a multiple of group. */
static cinfer_status check_conv_channels(const graph_node *n, const tensor *x, const tensor *w, int64_t group) {
    char sx[128], sw[128];
    int64_t c = x->dims[1], m = w->dims[0];
    if (w->dims[1] * group != c)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': X %s has %lld channels but W %s with group %lld expects %lld (W[1] * group)",
                          n->op_type, n->name, tensor_shape_str(x, sx, sizeof sx), (long long)c,
                          tensor_shape_str(w, sw, sizeof sw), (long long)group, (long long)(w->dims[1] * group));
    if (m % group != 0)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': W %s has %lld output channels, not a multiple of group %lld", n->op_type,
                          n->name, tensor_shape_str(w, sw, sizeof sw), (long long)m, (long long)group);
    return CINFER_OK;
}

/* Y of a conv or pool: X's dtype, batch and window output sizes, `channels` channels. */
static cinfer_status window_shape(const graph_node *n, const tensor *x, const tensor *w, int64_t channels, tensor *y) {
    conv_window win;
    CINFER_TRY(conv_read_window(n, x, w, &win));
    int64_t sp[CINFER_MAX_DIMS];
    CINFER_TRY(conv_window_output(n, x, &win, sp));
    y->dtype = x->dtype;
    y->ndim = x->ndim;
    y->dims[0] = x->dims[0];
    y->dims[1] = channels;
    for (int i = 0; i < win.nsp; i++) y->dims[i + 2] = sp[i];
    return CINFER_OK;
}

static cinfer_status infer_conv_channels_first(const graph_node *n, const tensor *in, int num_in, tensor *out) {
    const tensor *x = &in[0], *w = &in[1];
    int64_t group = 1;
    CINFER_TRY(check_conv_operands(n, in, num_in, &group));
    int64_t m = w->dims[0];
    CINFER_TRY(check_conv_channels(n, x, w, group));
    CINFER_TRY(check_bias(n, in, num_in, m));
    CINFER_TRY(window_shape(n, x, w, m, &out[0]));
    if (num_in < 4) return CINFER_OK;
    /* a 4th input only as the fused residual of graph/fusion.c, shaped and typed like Y */
    const tensor *r = &in[3];
    char sr[128], sy[128];
    if (!graph_node_attr(n, "cinfer_fused_add"))
        return core_error(CINFER_ERR_INVALID_MODEL, "Conv node '%s': %d inputs given, Conv takes 2 or 3", n->name, num_in);
    bool same = r->dtype == x->dtype && r->ndim == out[0].ndim;
    for (int d = 0; same && d < r->ndim; d++) same = r->dims[d] == out[0].dims[d];
    if (!same)
        return core_error(CINFER_ERR_INVALID_MODEL, "Conv node '%s': the fused residual %s %s must match Y %s %s", n->name,
                          cinfer_dtype_name(r->dtype), tensor_shape_str(r, sr, sizeof sr), cinfer_dtype_name(x->dtype),
                          tensor_shape_str(&out[0], sy, sizeof sy));
    return CINFER_OK;
}

/* A channels-last Conv is checked and shaped through the channels-first views of X, W and the residual. */
static cinfer_status infer_conv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    if (!conv_channels_last(n)) return infer_conv_channels_first(n, in, num_in, out);
    tensor view[4];
    for (int i = 0; i < num_in && i < 4; i++) {
        if (i == 2) view[i] = in[i];
        else conv_channels_first_view(&in[i], &view[i]);
    }
    CINFER_TRY(infer_conv_channels_first(n, view, num_in, out));
    conv_dims_to_channels_last(&out[0]);
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
    return window_shape(n, x, w, m, &out[0]);
}

static cinfer_status infer_batchnorm(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const tensor *x = &in[0];
    char sx[128], sp[128];
    static const char *const names[] = {"X", "scale", "B", "input_mean", "input_var"};
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

/* MaxPool, AveragePool, LpPool: the pool's own attributes are checked first, then X and the window. */
static cinfer_status infer_pool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out,
                                const cinfer_dtype *types) {
    (void)num_in;
    conv_pool pool;
    CINFER_TRY(conv_read_pool(n, &pool));
    CINFER_TRY(shape_expect_dtype(n, in, 0, types));
    const bool last = conv_channels_last(n);
    tensor x = in[0];
    if (last) conv_channels_first_view(&in[0], &x);
    CINFER_TRY(window_shape(n, &x, NULL, x.dims[1], &out[0]));
    if (last) conv_dims_to_channels_last(&out[0]);
    for (int j = 1; j < num_out; j++) {
        shape_copy(&out[j], &out[0]);
        out[j].dtype = CINFER_DTYPE_INT64;
    }
    return CINFER_OK;
}

static cinfer_status infer_maxpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return infer_pool(n, in, num_in, out, num_out, maxpool_types);
}

static cinfer_status infer_float_pool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    return infer_pool(n, in, num_in, out, num_out, float_types);
}

static cinfer_status infer_global_pool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    char sx[128];
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    if (in[0].ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': X %s must have rank >= 2 (N, C, spatial...)",
                          n->op_type, n->name, tensor_shape_str(&in[0], sx, sizeof sx));
    conv_pool pool;
    CINFER_TRY(conv_read_pool(n, &pool));
    tensor x = in[0];
    if (conv_channels_last(n)) conv_channels_first_view(&in[0], &x); /* Y stays [N, C, 1...] */
    shape_copy(&out[0], &x);
    for (int i = 2; i < out[0].ndim; i++) out[0].dims[i] = 1;
    return CINFER_OK;
}

/* ---- ConvInteger, QLinearConv ---- */

static const cinfer_dtype int8_types[] = {CINFER_DTYPE_INT8, CINFER_DTYPE_UINT8, CINFER_DTYPE_UNDEFINED};

/* Quantization parameter i: NULL when optional and absent; of `types`; one value, or (m > 0) one per output
 * channel. */
static cinfer_status qconv_param(const graph_node *n, const tensor *in, int num_in, int i, const char *what,
                                 const cinfer_dtype *types, bool required, int64_t m, const tensor **p) {
    char sp[128];
    *p = NULL;
    if (!required && (i >= num_in || in[i].dtype == CINFER_DTYPE_UNDEFINED)) return CINFER_OK;
    CINFER_TRY(shape_expect_dtype(n, in, i, types));
    const tensor *t = &in[i];
    bool one = t->ndim <= 1 && tensor_numel(t) == 1;
    if (!one && !(m > 0 && t->ndim == 1 && t->dims[0] == m))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected one value%s", n->op_type,
                          n->name, what, tensor_shape_str(t, sp, sizeof sp),
                          m > 0 ? " or one per output channel" : "");
    *p = t;
    return CINFER_OK;
}

cinfer_status conv_compute_quant(const graph_node *n, const tensor *in, int num_in, conv_quant *q) {
    static const cinfer_dtype scale_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_UNDEFINED};
    static const cinfer_dtype bias_types[] = {CINFER_DTYPE_INT32, CINFER_DTYPE_UNDEFINED};
    char sb[128];
    q->qlinear = strcmp(n->op_type, "QLinearConv") == 0;
    int ix = 0, iw = q->qlinear ? 3 : 1;
    CINFER_TRY(shape_expect_dtype(n, in, ix, int8_types));
    CINFER_TRY(shape_expect_dtype(n, in, iw, int8_types));
    q->x = &in[ix];
    q->w = &in[iw];
    CINFER_TRY(check_conv_ranks(n, q->x, q->w, &q->group));
    CINFER_TRY(check_conv_channels(n, q->x, q->w, q->group));
    const cinfer_dtype x_type[] = {q->x->dtype, CINFER_DTYPE_UNDEFINED};
    const cinfer_dtype w_type[] = {q->w->dtype, CINFER_DTYPE_UNDEFINED};
    int64_t m = q->w->dims[0];
    q->x_scale = q->w_scale = q->y_scale = q->y_zp = q->bias = NULL;
    if (!q->qlinear) {
        CINFER_TRY(qconv_param(n, in, num_in, 2, "x_zero_point", x_type, false, 0, &q->x_zp));
        return qconv_param(n, in, num_in, 3, "w_zero_point", w_type, false, m, &q->w_zp);
    }
    CINFER_TRY(qconv_param(n, in, num_in, 1, "x_scale", scale_types, true, 0, &q->x_scale));
    CINFER_TRY(qconv_param(n, in, num_in, 2, "x_zero_point", x_type, true, 0, &q->x_zp));
    CINFER_TRY(qconv_param(n, in, num_in, 4, "w_scale", scale_types, true, m, &q->w_scale));
    CINFER_TRY(qconv_param(n, in, num_in, 5, "w_zero_point", w_type, true, m, &q->w_zp));
    CINFER_TRY(qconv_param(n, in, num_in, 6, "y_scale", scale_types, true, 0, &q->y_scale));
    CINFER_TRY(qconv_param(n, in, num_in, 7, "y_zero_point", int8_types, true, 0, &q->y_zp));
    CINFER_TRY(qconv_param(n, in, num_in, 8, "B", bias_types, false, m, &q->bias));
    if (q->bias && (q->bias->ndim != 1 || q->bias->dims[0] != m))
        return core_error(CINFER_ERR_INVALID_MODEL, "QLinearConv node '%s': bias B has shape %s, expected [%lld]",
                          n->name, tensor_shape_str(q->bias, sb, sizeof sb), (long long)m);
    return CINFER_OK;
}

/* Conv's shape; int32 (ConvInteger) or y_zero_point's dtype (QLinearConv). */
static cinfer_status infer_qconv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    conv_quant q;
    CINFER_TRY(conv_compute_quant(n, in, num_in, &q));
    CINFER_TRY(window_shape(n, q.x, q.w, q.w->dims[0], &out[0]));
    out[0].dtype = q.qlinear ? q.y_zp->dtype : CINFER_DTYPE_INT32;
    return CINFER_OK;
}

const op_schema shape_conv_schemas[] = {
    {"Conv", infer_conv, 0, 0, 2, 4}, /* the 4th: the fused residual (graph/fusion.c) */
    {"ConvInteger", infer_qconv, 0, 0, 2, 4},
    {"QLinearConv", infer_qconv, 0, 0, 8, 9},
    {"ConvTranspose", infer_conv_transpose, 0, 0, 2, 3},
    {"BatchNormalization", infer_batchnorm, 0, 0, 5, 5},
    {"MaxPool", infer_maxpool, 0, 0, 1, 1},
    {"AveragePool", infer_float_pool, 0, 0, 1, 1},
    {"LpPool", infer_float_pool, 0, 0, 1, 1},
    {"GlobalAveragePool", infer_global_pool, 0, 0, 1, 1},
    {"GlobalMaxPool", infer_global_pool, 0, 0, 1, 1},
    {"GlobalLpPool", infer_global_pool, 0, 0, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
