/* CPU kernels of the image family: GridSample, AffineGrid, CenterCropPad, Col2Im, and the table (Resize lives in
 * image_resize.c). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"

#define PAR_MIN 16384 /* output elements below which a kernel stays on one thread */

/* defined in image_resize.c */
cinfer_status cpu_run_resize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* ---------------------------------------------------------------------------------------------------
 * GridSample: per output point, the taps of each spatial dim (1 nearest, 2 linear, 4 cubic) combine into
 * at most 4^3 (offset, weight) pairs, applied to every channel.
 * ------------------------------------------------------------------------------------------------- */

enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };
enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };

/* Folds x back into [lo, hi] by mirroring at the borders (as PyTorch's grid sampler). */
static double gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        double dx = lo - x;
        double k = floor(dx / range), rem = dx - k * range;
        return fmod(k, 2) == 0 ? lo + rem : hi - rem;
    }
    if (x > hi) {
        double dx = x - hi;
        double k = floor(dx / range), rem = dx - k * range;
        return fmod(k, 2) == 0 ? hi - rem : lo + rem;
    }
    return x;
}

/* Index i of a dim of length len under the padding mode; false when it reads padding (zeros). */
static bool gs_index(int64_t i, int64_t len, int pad, double lo, double hi, int64_t *out) {
    if (pad == GS_ZEROS) {
        *out = i;
        return i >= 0 && i < len;
    }
    if (pad == GS_REFLECTION) i = (int64_t)gs_reflect((double)i, lo, hi);
    *out = i < 0 ? 0 : i >= len ? len - 1 : i;
    return true;
}

static void gs_cubic_coeffs(float t, float c[4]) {
    const float A = -0.75f;
    float x = t + 1;
    c[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    x = t;
    c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
    x = 1 - t;
    c[2] = ((A + 2) * x - (A + 3)) * x * x + 1;
    x = 2 - t;
    c[3] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

static cinfer_status run_grid_sample(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0], *grid = &in[1];
    tensor *y = &out[0];
    if (!dtype_is_float(x->dtype)) return cpu_unsupported_dtype(n, x->dtype);
    if (!dtype_is_float(grid->dtype)) return cpu_unsupported_dtype(n, grid->dtype);
    const char *ms = graph_attr_string(n, "mode", n->opset < 20 ? "bilinear" : "linear");
    int mode = strcmp(ms, "nearest") == 0 ? GS_NEAREST
               : (strcmp(ms, "cubic") == 0 || strcmp(ms, "bicubic") == 0) ? GS_CUBIC : GS_LINEAR;
    const char *ps = graph_attr_string(n, "padding_mode", "zeros");
    int pad = strcmp(ps, "border") == 0 ? GS_BORDER : strcmp(ps, "reflection") == 0 ? GS_REFLECTION : GS_ZEROS;
    bool align = graph_attr_int(n, "align_corners", 0) != 0;
    int r = x->ndim - 2;
    int64_t N = x->dims[0], C = x->dims[1], P = 1, plane = 1;
    for (int d = 0; d < r; d++) {
        P *= grid->dims[1 + d];
        plane *= x->dims[2 + d];
    }
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (plane == 0) { /* nothing to sample from: every mode reads padding */
        for (int64_t i = 0; i < tensor_numel(y); i++) cpu_store_f64(y->data, y->dtype, i, 0.0);
        return CINFER_OK;
    }
    int64_t stride[3] = {1, 1, 1};
    for (int d = r - 2; d >= 0; d--) stride[d] = stride[d + 1] * x->dims[3 + d];
    int taps = mode == GS_NEAREST ? 1 : mode == GS_LINEAR ? 2 : 4;

#pragma omp parallel for num_threads(cpu_num_threads()) if (N * P * C > PAR_MIN)
    for (int64_t job = 0; job < N * P; job++) {
        int64_t b = job / P, pt = job % P;
        int64_t idx[3][4];
        float w[3][4];
        bool ok[3][4];
        for (int d = 0; d < r; d++) {
            int64_t len = x->dims[2 + d];
            /* the grid's last axis lists coordinates innermost dim first (x, y, z) */
            float g = (float)cpu_load_f64(grid->data, grid->dtype, (b * P + pt) * r + (r - 1 - d));
            float c = align ? (g + 1) / 2.0f * (float)(len - 1) : ((g + 1) * (float)len - 1) / 2.0f;
            double lo = align ? 0.0 : -0.5, hi = align ? (double)len - 1 : (double)len - 0.5;
            if (mode == GS_NEAREST) c = nearbyintf(c);
            if (c < lo || c > hi) {
                if (pad == GS_BORDER) c = c < 0 ? 0.0f : c > (float)(len - 1) ? (float)(len - 1) : c;
                else if (pad == GS_REFLECTION) c = (float)gs_reflect(c, lo, hi);
            }
            if (!isfinite(c)) c = -2; /* NaN or inf coordinates read padding, never memory */
            if (mode == GS_NEAREST) {
                /* reflection and border already folded c inside; trunc as the reference's int cast */
                double cc = fmax(fmin((double)c, 1e15), -1e15);
                ok[d][0] = gs_index((int64_t)cc, len, pad, lo, hi, &idx[d][0]);
                w[d][0] = 1;
                continue;
            }
            float f = floorf(c);
            int64_t i0 = (int64_t)fmax(fmin((double)f, 1e15), -1e15);
            float t = c - f;
            if (mode == GS_LINEAR) {
                w[d][0] = 1 - t;
                w[d][1] = t;
                for (int k = 0; k < 2; k++) ok[d][k] = gs_index(i0 + k, len, pad, lo, hi, &idx[d][k]);
            } else {
                gs_cubic_coeffs(t, w[d]);
                for (int k = 0; k < 4; k++) ok[d][k] = gs_index(i0 - 1 + k, len, pad, lo, hi, &idx[d][k]);
            }
        }
        /* combine the taps of all dims */
        int64_t offs[64];
        float wts[64];
        int m = 0, total = 1;
        for (int d = 0; d < r; d++) total *= taps;
        for (int k = 0; k < total; k++) {
            int rem = k;
            int64_t off = 0;
            float wt = 1;
            bool valid = true;
            for (int d = r - 1; d >= 0; d--) {
                int t = rem % taps;
                rem /= taps;
                valid &= ok[d][t];
                off += idx[d][t] * stride[d];
                wt *= w[d][t];
            }
            if (!valid || wt == 0) continue;
            offs[m] = off;
            wts[m] = wt;
            m++;
        }
        for (int64_t c = 0; c < C; c++) {
            int64_t base = (b * C + c) * plane;
            int64_t o = (b * C + c) * P + pt;
            if (x->dtype == CINFER_DTYPE_FLOAT) {
                const float *xs = (const float *)x->data + base;
                float acc = 0;
                for (int k = 0; k < m; k++) acc += wts[k] * xs[offs[k]];
                ((float *)y->data)[o] = acc;
            } else {
                double acc = 0;
                for (int k = 0; k < m; k++)
                    acc += (double)wts[k] * cpu_load_f64(x->data, x->dtype, base + offs[k]);
                cpu_store_f64(y->data, y->dtype, o, acc);
            }
        }
    }
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * AffineGrid: grid[n, (d,) h, w] = theta[n] @ [x_w, y_h, (z_d,) 1] over the normalised base grid.
 * ------------------------------------------------------------------------------------------------- */

/* Normalised coordinate of pixel i of len along one axis, in [-1, 1]. */
static double base_coord(int64_t i, int64_t len, bool align) {
    if (align) return len == 1 ? -1.0 : -1.0 + (double)i * (2.0 / (double)(len - 1));
    double step = 2.0 / (double)len;
    return -1.0 + step / 2 + (double)i * step;
}

static cinfer_status run_affine_grid(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *theta = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(theta->dtype)) return cpu_unsupported_dtype(n, theta->dtype);
    bool align = graph_attr_int(n, "align_corners", 0) != 0;
    int r = y->ndim - 2; /* 2 or 3 spatial dims */
    int64_t N = y->dims[0], P = 1;
    for (int d = 0; d < r; d++) P *= y->dims[1 + d];
    if (N * P == 0) return CINFER_OK;
#pragma omp parallel for num_threads(cpu_num_threads()) if (N * P > PAR_MIN)
    for (int64_t job = 0; job < N * P; job++) {
        int64_t b = job / P, rem = job % P;
        double base[4];
        /* base[0] follows the innermost dim (x = w), then h, then d; the last one is homogeneous */
        for (int d = r - 1; d >= 0; d--) {
            int64_t len = y->dims[1 + d];
            base[r - 1 - d] = base_coord(rem % len, len, align);
            rem /= len;
        }
        base[r] = 1.0;
        for (int row = 0; row < r; row++) {
            double acc = 0;
            int64_t t0 = (b * r + row) * (r + 1);
            for (int k = 0; k <= r; k++) acc += cpu_load_f64(theta->data, theta->dtype, t0 + k) * base[k];
            cpu_store_f64(y->data, y->dtype, job * r + row, acc);
        }
    }
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * CenterCropPad: zero the output, copy the centred overlap of input and output.
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status run_center_crop_pad(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    size_t es = cinfer_dtype_size(x->dtype);
    if (es == 0) return cpu_unsupported_dtype(n, x->dtype);
    int r = x->ndim;
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (r == 0) {
        memcpy(y->data, x->data, es);
        return CINFER_OK;
    }
    memset(y->data, 0, tensor_nbytes(y));
    int64_t in_off[CINFER_MAX_DIMS] = {0}, out_off[CINFER_MAX_DIMS] = {0}, len[CINFER_MAX_DIMS] = {0};
    int64_t rows = 1;
    for (int d = 0; d < r; d++) {
        int64_t a = x->dims[d], b = y->dims[d];
        in_off[d] = a > b ? (a - b) / 2 : 0;
        out_off[d] = b > a ? (b - a) / 2 : 0;
        len[d] = a < b ? a : b;
        if (d < r - 1) rows *= len[d];
    }
    if (rows == 0 || len[r - 1] == 0) return CINFER_OK;
    int64_t xs[CINFER_MAX_DIMS], ys[CINFER_MAX_DIMS];
    tensor_strides(x, xs);
    tensor_strides(y, ys);
    for (int64_t row = 0; row < rows; row++) {
        int64_t rem = row, xo = in_off[r - 1], yo = out_off[r - 1];
        for (int d = r - 2; d >= 0; d--) {
            int64_t i = rem % len[d];
            rem /= len[d];
            xo += (i + in_off[d]) * xs[d];
            yo += (i + out_off[d]) * ys[d];
        }
        memcpy((char *)y->data + (size_t)yo * es, (const char *)x->data + (size_t)xo * es, (size_t)len[r - 1] * es);
    }
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * Col2Im: sums every column of each block back into the image (the inverse of im2col).
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status run_col2im(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(x->dtype)) return cpu_unsupported_dtype(n, x->dtype);
    int r = (int)tensor_numel(&in[1]);
    size_t nd = 0, np = 0, ns = 0;
    const int64_t *dil = graph_attr_ints(n, "dilations", &nd), *pads = graph_attr_ints(n, "pads", &np),
                  *str = graph_attr_ints(n, "strides", &ns);
    int64_t img[CINFER_MAX_DIMS], blk[CINFER_MAX_DIMS], nb[CINFER_MAX_DIMS], di[CINFER_MAX_DIMS], st[CINFER_MAX_DIMS],
        pb[CINFER_MAX_DIMS];
    int64_t block = 1, blocks = 1, plane = 1;
    for (int d = 0; d < r; d++) {
        img[d] = tensor_get_int(&in[1], d);
        blk[d] = tensor_get_int(&in[2], d);
        di[d] = dil ? dil[d] : 1;
        st[d] = str ? str[d] : 1;
        pb[d] = pads ? pads[d] : 0;
        int64_t pe = pads ? pads[d + r] : 0;
        nb[d] = (img[d] + pb[d] + pe - di[d] * (blk[d] - 1) - 1) / st[d] + 1;
        block *= blk[d];
        blocks *= nb[d];
        plane *= img[d];
    }
    int64_t N = y->dims[0], C = y->dims[1], istr[CINFER_MAX_DIMS];
    for (int d = r - 1; d >= 0; d--) istr[d] = d == r - 1 ? 1 : istr[d + 1] * img[d + 1];
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (x->dims[2] != blocks || x->dims[1] != C * block)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Col2Im node '%s': input does not match the block layout",
                          n->name);
    double *acc = cpu_scratch((size_t)(N * C * plane) * sizeof(double));
    if (!acc) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Col2Im node '%s': out of memory for scratch", n->name);
#pragma omp parallel for num_threads(cpu_num_threads()) if (N * C * plane > PAR_MIN)
    for (int64_t nc = 0; nc < N * C; nc++) {
        double *dst = acc + nc * plane;
        for (int64_t i = 0; i < plane; i++) dst[i] = 0;
        for (int64_t kk = 0; kk < block; kk++) {
            int64_t koff[CINFER_MAX_DIMS], rem = kk;
            for (int d = r - 1; d >= 0; d--) {
                koff[d] = rem % blk[d];
                rem /= blk[d];
            }
            int64_t row = (nc * block + kk) * blocks; /* x[n, c*block + kk, :] */
            for (int64_t bi = 0; bi < blocks; bi++) {
                int64_t brem = bi, off = 0;
                bool inside = true;
                for (int d = r - 1; d >= 0; d--) {
                    int64_t bpos = brem % nb[d];
                    brem /= nb[d];
                    int64_t p = bpos * st[d] - pb[d] + koff[d] * di[d];
                    if (p < 0 || p >= img[d]) {
                        inside = false;
                        break;
                    }
                    off += p * istr[d];
                }
                if (inside) dst[off] += cpu_load_f64(x->data, x->dtype, row + bi);
            }
        }
    }
    int64_t total = N * C * plane;
    for (int64_t i = 0; i < total; i++) cpu_store_f64(y->data, y->dtype, i, acc[i]);
    return CINFER_OK;
}

const cpu_kernel cpu_image_kernels[] = {
    {"Resize", cpu_run_resize},
    {"GridSample", run_grid_sample},
    {"AffineGrid", run_affine_grid},
    {"CenterCropPad", run_center_crop_pad},
    {"Col2Im", run_col2im},
    {NULL, NULL},
};
