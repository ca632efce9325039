/* CPU DFT and STFT kernels: radix-2 FFT for power-of-two lengths, a direct O(n^2) transform otherwise. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"

cinfer_status cpu_run_dft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_stft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

static const double two_pi = 6.283185307179586476925286766559;

static bool present(const tensor *in, int num_in, int i) {
    return i >= 0 && i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

/* tw[2k], tw[2k+1] = cos, -sin of 2*pi*k/len: the forward twiddles (the inverse conjugates them). */
static void fill_twiddles(double *tw, int64_t len) {
    for (int64_t k = 0; k < len; k++) {
        double a = two_pi * (double)k / (double)len;
        tw[2 * k] = cos(a);
        tw[2 * k + 1] = -sin(a);
    }
}

/* Transforms len interleaved complex values in buf in place (unscaled); tmp holds 2*len doubles. */
static void transform(const double *tw, int64_t len, double *buf, double *tmp, bool inverse) {
    double sg = inverse ? -1.0 : 1.0;
    if ((len & (len - 1)) == 0) {
        /* iterative radix-2: bit-reversal permutation, then butterflies of growing span */
        for (int64_t i = 1, j = 0; i < len; i++) {
            int64_t bit = len >> 1;
            for (; j & bit; bit >>= 1) j ^= bit;
            j |= bit;
            if (i < j) {
                double r = buf[2 * i], m = buf[2 * i + 1];
                buf[2 * i] = buf[2 * j];
                buf[2 * i + 1] = buf[2 * j + 1];
                buf[2 * j] = r;
                buf[2 * j + 1] = m;
            }
        }
        for (int64_t m = 2; m <= len; m <<= 1) {
            int64_t half = m / 2, step = len / m;
            for (int64_t s = 0; s < len; s += m)
                for (int64_t j = 0; j < half; j++) {
                    double wr = tw[2 * j * step], wi = sg * tw[2 * j * step + 1];
                    double *a = buf + 2 * (s + j), *b = buf + 2 * (s + j + half);
                    double br = b[0] * wr - b[1] * wi, bi = b[0] * wi + b[1] * wr;
                    b[0] = a[0] - br;
                    b[1] = a[1] - bi;
                    a[0] += br;
                    a[1] += bi;
                }
        }
        return;
    }
    for (int64_t k = 0; k < len; k++) {
        double sr = 0, si = 0;
        int64_t idx = 0; /* (k * t) mod len, kept incrementally so it never overflows */
        for (int64_t t = 0; t < len; t++) {
            double wr = tw[2 * idx], wi = sg * tw[2 * idx + 1];
            sr += buf[2 * t] * wr - buf[2 * t + 1] * wi;
            si += buf[2 * t] * wi + buf[2 * t + 1] * wr;
            idx += k;
            if (idx >= len) idx -= len;
        }
        tmp[2 * k] = sr;
        tmp[2 * k + 1] = si;
    }
    memcpy(buf, tmp, (size_t)(2 * len) * sizeof(double));
}

cinfer_status cpu_run_dft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    int r = x->ndim;
    int64_t a = n->opset >= 20 ? -2 : graph_attr_int(n, "axis", 1);
    if (n->opset >= 20 && present(in, num_in, 2)) a = tensor_get_int(&in[2], 0);
    int axis = (int)(a < 0 ? a + r : a);
    bool inverse = graph_attr_int(n, "inverse", 0) != 0, onesided = graph_attr_int(n, "onesided", 0) != 0;
    bool c2r = inverse && onesided;
    int64_t n_in = x->dims[axis], n_out = y->dims[axis];
    int64_t len = c2r ? 2 * (n_in - 1) : n_in;
    if (present(in, num_in, 1)) len = tensor_get_int(&in[1], 0);
    int64_t cin = x->dims[r - 1], cout = y->dims[r - 1];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < r - 1; d++) inner *= x->dims[d];
    if (tensor_numel(y) == 0) return CINFER_OK;

    double *tw = cpu_scratch((size_t)(6 * len) * sizeof(double));
    if (!tw) return core_error(CINFER_ERR_OUT_OF_MEMORY, "DFT node '%s': no scratch for length %lld", n->name,
                               (long long)len);
    double *buf = tw + 2 * len, *tmp = buf + 2 * len;
    fill_twiddles(tw, len);
    /* a one-sided inverse reads only the first len/2+1 bins and mirrors the rest */
    int64_t take = c2r ? len / 2 + 1 : len;
    if (take > n_in) take = n_in;
    double scale = inverse ? 1.0 / (double)len : 1.0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t ib = (o * n_in * inner + i) * cin, is = inner * cin;
            memset(buf, 0, (size_t)(2 * len) * sizeof(double));
            for (int64_t t = 0; t < take; t++) {
                buf[2 * t] = cpu_load_f64(x->data, x->dtype, ib + t * is);
                if (cin == 2) buf[2 * t + 1] = cpu_load_f64(x->data, x->dtype, ib + t * is + 1);
            }
            if (c2r) {
                /* Hermitian completion; the imaginary parts of DC and Nyquist cannot survive a real output */
                buf[1] = 0;
                if (len % 2 == 0) buf[len + 1] = 0;
                for (int64_t k = len / 2 + 1; k < len; k++) {
                    buf[2 * k] = buf[2 * (len - k)];
                    buf[2 * k + 1] = -buf[2 * (len - k) + 1];
                }
            }
            transform(tw, len, buf, tmp, inverse);
            int64_t ob = (o * n_out * inner + i) * cout, os = inner * cout;
            for (int64_t k = 0; k < n_out; k++) {
                cpu_store_f64(y->data, y->dtype, ob + k * os, buf[2 * k] * scale);
                if (cout == 2) cpu_store_f64(y->data, y->dtype, ob + k * os + 1, buf[2 * k + 1] * scale);
            }
        }
    return CINFER_OK;
}

cinfer_status cpu_run_stft(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *x = &in[0];
    tensor *y = &out[0];
    int64_t step = tensor_get_int(&in[1], 0);
    const tensor *win = present(in, num_in, 2) ? &in[2] : NULL;
    int64_t len = win ? win->dims[0] : tensor_get_int(&in[3], 0);
    int64_t batch = x->dims[0], sig = x->dims[1], cin = x->dims[2];
    int64_t frames = y->dims[1], bins = y->dims[2];
    if (tensor_numel(y) == 0) return CINFER_OK;

    double *tw = cpu_scratch((size_t)(6 * len) * sizeof(double));
    if (!tw) return core_error(CINFER_ERR_OUT_OF_MEMORY, "STFT node '%s': no scratch for length %lld", n->name,
                               (long long)len);
    double *buf = tw + 2 * len, *tmp = buf + 2 * len;
    fill_twiddles(tw, len);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t f = 0; f < frames; f++) {
            int64_t start = f * step;
            for (int64_t t = 0; t < len; t++) {
                double w = win ? cpu_load_f64(win->data, win->dtype, t) : 1.0;
                bool inside = start + t < sig;
                int64_t src = ((b * sig) + start + t) * cin;
                buf[2 * t] = inside ? w * cpu_load_f64(x->data, x->dtype, src) : 0.0;
                buf[2 * t + 1] = inside && cin == 2 ? w * cpu_load_f64(x->data, x->dtype, src + 1) : 0.0;
            }
            transform(tw, len, buf, tmp, false);
            int64_t ob = (b * frames + f) * bins * 2;
            for (int64_t k = 0; k < bins; k++) {
                cpu_store_f64(y->data, y->dtype, ob + 2 * k, buf[2 * k]);
                cpu_store_f64(y->data, y->dtype, ob + 2 * k + 1, buf[2 * k + 1]);
            }
        }
    return CINFER_OK;
}
