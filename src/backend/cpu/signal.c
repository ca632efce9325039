/* CPU kernels of the signal family: windows, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool, Det, and the table
 * (DFT and STFT live in signal_dft.c). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"
#include "graph/shape/signal_params.h"

#define PAR_MIN 16384 /* output elements below which a kernel stays on one thread */

/* defined in signal_dft.c */
cinfer_status cpu_run_dft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_stft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

static const double two_pi = 6.283185307179586476925286766559;

/* ---- HannWindow, HammingWindow, BlackmanWindow: cosine sums over n / N, N = size (periodic) or size - 1 ---- */

static cinfer_status run_window(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)in;
    (void)num_in;
    (void)num_out;
    tensor *y = &out[0];
    int64_t size = y->dims[0];
    signal_window w; /* a0 - a1 cos(t) + a2 cos(2t) */
    signal_compute_window(n, size, &w);
    const double denom = w.denom, a0 = w.a0, a1 = w.a1, a2 = w.a2;
    for (int64_t i = 0; i < size; i++) {
        /* a symmetric window of one point would divide by zero: it is 1, as in PyTorch */
        double t = denom > 0 ? two_pi * (double)i / denom : 0.0;
        double v = denom > 0 ? a0 - a1 * cos(t) + a2 * cos(2 * t) : 1.0;
        cpu_store_f64(y->data, y->dtype, i, v);
    }
    return CINFER_OK;
}

/* ---- MelWeightMatrix: triangular filters between mel-spaced DFT bins ---- */

static cinfer_status run_mel(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    tensor *y = &out[0];
    int64_t bins = y->dims[1], nspec = y->dims[0];
    signal_mel m;
    CINFER_TRY(signal_compute_mel(n, bins, nspec, tensor_get_int(&in[1], 0), tensor_get_int(&in[2], 0),
                                  tensor_get_double(&in[3], 0), tensor_get_double(&in[4], 0), &m));
    CINFER_TRY(signal_check_mel(n, &m));
    int64_t *edge = cpu_scratch((size_t)(bins + 2) * sizeof(int64_t));
    if (!edge) return core_error(CINFER_ERR_OUT_OF_MEMORY, "MelWeightMatrix node '%s': no scratch", n->name);
    for (int64_t i = 0; i < bins + 2; i++) edge[i] = signal_mel_edge(&m, i);
    memset(y->data, 0, tensor_nbytes(y));
    for (int64_t i = 0; i < bins; i++) {
        int64_t l = edge[i], c = edge[i + 1], h = edge[i + 2];
        if (c == l) {
            cpu_store_f64(y->data, y->dtype, c * bins + i, 1.0);
        } else {
            for (int64_t j = l; j <= c; j++)
                cpu_store_f64(y->data, y->dtype, j * bins + i, (double)(j - l) / (double)(c - l));
        }
        for (int64_t j = c; j < h; j++)
            cpu_store_f64(y->data, y->dtype, j * bins + i, (double)(h - j) / (double)(h - c));
    }
    return CINFER_OK;
}

/* ---- RoiAlign: bilinear samples on a grid per output bin, averaged or maxed ---- */

/* Rounds v to float when the geometry runs in float32: the grid sizes come from ceil() and the taps from
 * truncation, so they must follow the input precision (as the reference and ONNX Runtime do) to agree on
 * boundary cases. Rounding each double result of a float op gives exactly the float32 result. */
static inline double fr(double v, bool f32) { return f32 ? (double)(float)v : v; }
/* Sample points per bin side when sampling_ratio is 0: ceil(bin size). A NaN or negative bin (NaN/inf ROI
 * coordinates or spatial_scale) takes no samples, and a bin is sampled at most 2^16 times per side: casting a
 * NaN or huge double to int64 is undefined, and ROIs of 1e30 pixels would loop for hours (found by
 * tests/fuzz/fuzz_model.c). */
static inline int64_t roi_grid_count(double bin) { return bin > 0.0 ? (int64_t)ceil(fmin(bin, 65536.0)) : 0; }

static cinfer_status run_roi_align(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0], *rois = &in[1], *bidx = &in[2];
    tensor *y = &out[0];
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t R = y->dims[0], PH = y->dims[2], PW = y->dims[3];
    signal_roi_align a;
    signal_compute_roi_align(n, &a);
    const bool max_mode = a.max_mode, half_pixel = a.half_pixel;
    const int64_t ratio = a.sampling_ratio;
    const double scale = a.spatial_scale;
    bool f32 = x->dtype != CINFER_DTYPE_DOUBLE;
    CINFER_TRY(signal_check_roi_align(n, rois, bidx, N));
#pragma omp parallel for num_threads(cpu_num_threads()) if (R * C * PH * PW > PAR_MIN)
    for (int64_t rc = 0; rc < R * C; rc++) {
        int64_t r = rc / C, c = rc % C;
        int64_t b = tensor_get_int(bidx, r);
        double off = half_pixel ? 0.5 : 0.0;
        double x0 = fr(fr(cpu_load_f64(rois->data, rois->dtype, r * 4 + 0) * scale, f32) - off, f32);
        double y0 = fr(fr(cpu_load_f64(rois->data, rois->dtype, r * 4 + 1) * scale, f32) - off, f32);
        double x1 = fr(fr(cpu_load_f64(rois->data, rois->dtype, r * 4 + 2) * scale, f32) - off, f32);
        double y1 = fr(fr(cpu_load_f64(rois->data, rois->dtype, r * 4 + 3) * scale, f32) - off, f32);
        double rw = fr(x1 - x0, f32), rh = fr(y1 - y0, f32);
        if (!half_pixel) {
            rw = fmax(rw, 1.0);
            rh = fmax(rh, 1.0);
        }
        double bh = fr(rh / (double)PH, f32), bw = fr(rw / (double)PW, f32);
        int64_t gh = ratio > 0 ? ratio : roi_grid_count(bh);
        int64_t gw = ratio > 0 ? ratio : roi_grid_count(bw);
        double count = (double)(gh * gw > 1 ? gh * gw : 1);
        int64_t plane = (b * C + c) * H * W;
        for (int64_t ph = 0; ph < PH; ph++)
            for (int64_t pw = 0; pw < PW; pw++) {
                double acc = 0.0;
                bool first = true;
                for (int64_t iy = 0; iy < gh; iy++) {
                    double yy = fr(fr(y0 + fr((double)ph * bh, f32), f32) +
                                       fr(fr(((double)iy + 0.5) * bh, f32) / (double)gh, f32), f32);
                    for (int64_t ix = 0; ix < gw; ix++) {
                        double xx = fr(fr(x0 + fr((double)pw * bw, f32), f32) +
                                           fr(fr(((double)ix + 0.5) * bw, f32) / (double)gw, f32), f32);
                        double v = 0.0;
                        if (H > 0 && W > 0 && !(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)) { /* empty X: no taps */
                            double sy = fmax(yy, 0.0), sx = fmax(xx, 0.0);
                            int64_t ylo = (int64_t)sy, xlo = (int64_t)sx, yhi, xhi;
                            if (ylo >= H - 1) {
                                yhi = ylo = H - 1;
                                sy = (double)ylo;
                            } else {
                                yhi = ylo + 1;
                            }
                            if (xlo >= W - 1) {
                                xhi = xlo = W - 1;
                                sx = (double)xlo;
                            } else {
                                xhi = xlo + 1;
                            }
                            double ly = fr(sy - (double)ylo, f32), lx = fr(sx - (double)xlo, f32);
                            double hy = fr(1.0 - ly, f32), hx = fr(1.0 - lx, f32);
                            double v1 = hy * hx * cpu_load_f64(x->data, x->dtype, plane + ylo * W + xlo);
                            double v2 = hy * lx * cpu_load_f64(x->data, x->dtype, plane + ylo * W + xhi);
                            double v3 = ly * hx * cpu_load_f64(x->data, x->dtype, plane + yhi * W + xlo);
                            double v4 = ly * lx * cpu_load_f64(x->data, x->dtype, plane + yhi * W + xhi);
                            /* max mode takes the largest weighted corner, as the ONNX reference does */
                            v = max_mode ? fmax(fmax(v1, v2), fmax(v3, v4)) : v1 + v2 + v3 + v4;
                        }
                        if (max_mode) acc = first ? v : fmax(acc, v);
                        else acc += v;
                        first = false;
                    }
                }
                if (!max_mode) acc /= count;
                cpu_store_f64(y->data, y->dtype, (rc * PH + ph) * PW + pw, acc);
            }
    }
    return CINFER_OK;
}

/* ---- MaxRoiPool: max over the integer bins of each rounded ROI (rois rows: batch, x1, y1, x2, y2) ---- */

static cinfer_status run_max_roi_pool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0], *rois = &in[1];
    tensor *y = &out[0];
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t R = y->dims[0], PH = y->dims[2], PW = y->dims[3];
    const float spatial_scale = graph_attr_float(n, "spatial_scale", 1.0f);
    const double scale = spatial_scale;
    CINFER_TRY(signal_check_max_roi_pool(n, rois, N, spatial_scale));
#pragma omp parallel for num_threads(cpu_num_threads()) if (R * C * PH * PW > PAR_MIN)
    for (int64_t rc = 0; rc < R * C; rc++) {
        int64_t r = rc / C, c = rc % C;
        const int64_t b = (int64_t)cpu_load_f64(rois->data, rois->dtype, r * 5);
        int64_t xs = (int64_t)round(cpu_load_f64(rois->data, rois->dtype, r * 5 + 1) * scale);
        int64_t ys = (int64_t)round(cpu_load_f64(rois->data, rois->dtype, r * 5 + 2) * scale);
        int64_t xe = (int64_t)round(cpu_load_f64(rois->data, rois->dtype, r * 5 + 3) * scale);
        int64_t ye = (int64_t)round(cpu_load_f64(rois->data, rois->dtype, r * 5 + 4) * scale);
        int64_t rh = ye - ys + 1 > 1 ? ye - ys + 1 : 1, rw = xe - xs + 1 > 1 ? xe - xs + 1 : 1;
        double bh = (double)rh / (double)PH, bw = (double)rw / (double)PW;
        int64_t plane = (b * C + c) * H * W;
        for (int64_t ph = 0; ph < PH; ph++)
            for (int64_t pw = 0; pw < PW; pw++) {
                int64_t h0 = (int64_t)floor((double)ph * bh) + ys, h1 = (int64_t)ceil((double)(ph + 1) * bh) + ys;
                int64_t w0 = (int64_t)floor((double)pw * bw) + xs, w1 = (int64_t)ceil((double)(pw + 1) * bw) + xs;
                h0 = h0 < 0 ? 0 : h0 > H ? H : h0;
                h1 = h1 < 0 ? 0 : h1 > H ? H : h1;
                w0 = w0 < 0 ? 0 : w0 > W ? W : w0;
                w1 = w1 < 0 ? 0 : w1 > W ? W : w1;
                double m = 0.0; /* an empty bin outputs 0 */
                if (h1 > h0 && w1 > w0) {
                    m = -INFINITY;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) m = fmax(m, cpu_load_f64(x->data, x->dtype, plane + h * W + w));
                }
                cpu_store_f64(y->data, y->dtype, (rc * PH + ph) * PW + pw, m);
            }
    }
    return CINFER_OK;
}

/* ---- MaxUnpool: scatter X to the flat indices of the unpooled shape, placed in output's leading corner ---- */

static cinfer_status run_max_unpool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0], *ind = &in[1];
    tensor *y = &out[0];
    int r = x->ndim;
    int64_t dims[CINFER_MAX_DIMS], total; /* the unpooled shape */
    CINFER_TRY(signal_compute_unpool(n, in, dims, &total));
    int64_t count = tensor_numel(x);
    CINFER_TRY(signal_check_unpool_indices(n, ind, count, total));
    memset(y->data, 0, tensor_nbytes(y));
    size_t es = tensor_nbytes(y) / (size_t)(tensor_numel(y) > 0 ? tensor_numel(y) : 1);
    for (int64_t e = 0; e < count; e++) {
        int64_t idx = tensor_get_int(ind, e);
        /* re-express the index in output's (possibly larger) dims */
        int64_t o = 0, rest = idx, mul = 1;
        for (int d = r - 1; d >= 0; d--) {
            o += (rest % dims[d]) * mul;
            rest /= dims[d];
            mul *= y->dims[d];
        }
        memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)e * es, es);
    }
    return CINFER_OK;
}

/* ---- Det: LU with partial pivoting per matrix ---- */

static cinfer_status run_det(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    int64_t m = x->dims[x->ndim - 1], batch = tensor_numel(y);
    if (batch == 0) return CINFER_OK;
    double *a = cpu_scratch((size_t)(m * m > 0 ? m * m : 1) * sizeof(double));
    if (!a) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Det node '%s': no scratch for %lldx%lld", n->name,
                              (long long)m, (long long)m);
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = cpu_load_f64(x->data, x->dtype, b * m * m + i);
        double det = 1.0;
        for (int64_t c = 0; c < m && det != 0.0; c++) {
            int64_t p = c;
            for (int64_t i = c + 1; i < m; i++)
                if (fabs(a[i * m + c]) > fabs(a[p * m + c])) p = i;
            if (a[p * m + c] == 0.0) {
                det = 0.0;
                break;
            }
            if (p != c) {
                for (int64_t j = 0; j < m; j++) {
                    double t = a[c * m + j];
                    a[c * m + j] = a[p * m + j];
                    a[p * m + j] = t;
                }
                det = -det;
            }
            double piv = a[c * m + c];
            det *= piv;
            for (int64_t i = c + 1; i < m; i++) {
                double f = a[i * m + c] / piv;
                for (int64_t j = c + 1; j < m; j++) a[i * m + j] -= f * a[c * m + j];
            }
        }
        cpu_store_f64(y->data, y->dtype, b, det);
    }
    return CINFER_OK;
}

/* defined in signal_nms.c */
cinfer_status cpu_run_nms(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

const cpu_kernel cpu_signal_kernels[] = {
    {"HannWindow", run_window},
    {"HammingWindow", run_window},
    {"BlackmanWindow", run_window},
    {"DFT", cpu_run_dft},
    {"STFT", cpu_run_stft},
    {"MelWeightMatrix", run_mel},
    {"RoiAlign", run_roi_align},
    {"MaxRoiPool", run_max_roi_pool},
    {"MaxUnpool", run_max_unpool},
    {"Det", run_det},
    {"NonMaxSuppression", cpu_run_nms},
    {NULL, NULL},
};
