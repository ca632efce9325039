/* CUDA kernels of the signal family (host side): windows, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool, Det ->
 * launches of kernels/signal.cu, and the table (DFT and STFT live in ops/signal_dft.c). Inputs the CPU validates
 * by value are checked here when their host copies are known; otherwise the kernels mark bad entries with NaN
 * (or skip them) rather than read out of bounds. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/signal.h"
#include "core/status.h"

/* defined in ops/signal_dft.c */
cinfer_status cuda_signal_run_dft(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out);
cinfer_status cuda_signal_run_stft(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);

/* ---- HannWindow, HammingWindow, BlackmanWindow: cosine sums over n / N, N = size (periodic) or size - 1 ---- */

static cinfer_status run_window(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)in; (void)num_in; (void)num_out;
    tensor *y = &out[0];
    if (!dtype_is_float(y->dtype)) return cuda_unsupported_dtype(n, y->dtype);
    int64_t size = y->dims[0];
    double denom = graph_attr_int(n, "periodic", 1) != 0 ? (double)size : (double)(size - 1);
    double a0 = 0.5, a1 = 0.5, a2 = 0.0; /* a0 - a1 cos(t) + a2 cos(2t) */
    if (strcmp(n->op_type, "HammingWindow") == 0) {
        a0 = 25.0 / 46.0;
        a1 = 1.0 - a0;
    } else if (strcmp(n->op_type, "BlackmanWindow") == 0) {
        a0 = 0.42;
        a2 = 0.08;
    }
    if (size <= 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type, cuda_signal_window(y->dtype, y->data, size, denom, a0, a1, a2, x->stream));
}

/* ---- MelWeightMatrix: triangular filters between mel-spaced DFT bins ---- */

/* The CPU's checks, when sample_rate and the edges are known on the host. */
static cinfer_status check_mel(const graph_node *n, const tensor *host, int64_t bins, int64_t nspec, int64_t len) {
    int64_t rate = tensor_get_int(&host[2], 0);
    double lo = tensor_get_double(&host[3], 0), hi = tensor_get_double(&host[4], 0);
    if (rate <= 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "MelWeightMatrix node '%s': sample_rate %lld must be positive",
                          n->name, (long long)rate);
    double lo_mel = 2595.0 * log1p(lo / 700.0) / log(10.0), hi_mel = 2595.0 * log1p(hi / 700.0) / log(10.0);
    double step = (hi_mel - lo_mel) / (double)(bins + 2);
    int64_t edge[3];
    for (int64_t i = 0; i < bins; i++) {
        for (int k = 0; k < 3; k++) {
            double hz = 700.0 * expm1(((double)(i + k) * step + lo_mel) / 2595.0 * log(10.0));
            edge[k] = (int64_t)floor((double)(len + 1) * hz / (double)rate);
        }
        if (edge[0] < 0 || edge[2] >= nspec || edge[1] < edge[0] || edge[2] < edge[1])
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "MelWeightMatrix node '%s': filter %lld spans bins "
                              "[%lld, %lld] outside [0, %lld)", n->name, (long long)i, (long long)edge[0],
                              (long long)edge[2], (long long)nspec);
    }
    return CINFER_OK;
}

static cinfer_status run_mel(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_out;
    tensor *y = &out[0];
    if (!dtype_is_float(y->dtype)) return cuda_unsupported_dtype(n, y->dtype);
    if (num_in < 5 || !in[1].host_data)
        return core_error(CINFER_ERR_INVALID_MODEL, "MelWeightMatrix node '%s': dft_length must be known while "
                          "planning", n->name);
    if (!dtype_is_integer(in[2].dtype)) return cuda_unsupported_dtype(n, in[2].dtype);
    if (!dtype_is_float(in[3].dtype)) return cuda_unsupported_dtype(n, in[3].dtype);
    if (!dtype_is_float(in[4].dtype)) return cuda_unsupported_dtype(n, in[4].dtype);
    tensor host[5];
    cuda_host_views(in, 5, host);
    int64_t bins = y->dims[1], nspec = y->dims[0], len = tensor_get_int(&host[1], 0);
    if (in[2].host_data && in[3].host_data && in[4].host_data) CINFER_TRY(check_mel(n, host, bins, nspec, len));
    if (tensor_numel(y) == 0) return CINFER_OK;
    return cuda_check_launch(n, "MelWeightMatrix",
                             cuda_signal_mel(y->dtype, y->data, bins, nspec, len, in[2].dtype, in[2].data, in[3].dtype,
                                             in[3].data, in[4].dtype, in[4].data, x->stream));
}

/* ---- RoiAlign, MaxRoiPool ---- */

static cinfer_status run_roi_align(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0], *rois = &in[1], *bidx = &in[2];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (!dtype_is_float(rois->dtype)) return cuda_unsupported_dtype(n, rois->dtype);
    if (!dtype_is_integer(bidx->dtype)) return cuda_unsupported_dtype(n, bidx->dtype);
    if (X->ndim != 4 || y->ndim != 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "RoiAlign node '%s': X must be [N, C, H, W]", n->name);
    cuda_roi_args a;
    memset(&a, 0, sizeof a);
    a.N = X->dims[0], a.C = X->dims[1], a.H = X->dims[2], a.W = X->dims[3];
    a.R = y->dims[0], a.PH = y->dims[2], a.PW = y->dims[3];
    a.max_mode = strcmp(graph_attr_string(n, "mode", "avg"), "max") == 0;
    /* opsets before 16 only had the output_half_pixel behaviour */
    const char *ct = graph_attr_string(n, "coordinate_transformation_mode",
                                       n->opset < 16 ? "output_half_pixel" : "half_pixel");
    a.half_pixel = strcmp(ct, "half_pixel") == 0;
    a.sampling_ratio = graph_attr_int(n, "sampling_ratio", 0);
    a.spatial_scale = graph_attr_float(n, "spatial_scale", 1.0f);
    if (bidx->host_data && rois->host_data) {
        tensor host[3];
        cuda_host_views(in, 3, host);
        for (int64_t r = 0; r < a.R; r++) {
            int64_t b = tensor_get_int(&host[2], r);
            if (b < 0 || b >= a.N)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "RoiAlign node '%s': batch_indices[%lld] = %lld is not "
                                  "in [0, %lld)", n->name, (long long)r, (long long)b, (long long)a.N);
            for (int k = 0; k < 4; k++)
                if (!isfinite(tensor_get_double(&host[1], r * 4 + k)))
                    return core_error(CINFER_ERR_INVALID_ARGUMENT, "RoiAlign node '%s': roi %lld is not finite",
                                      n->name, (long long)r);
        }
    }
    if (tensor_numel(y) == 0) return CINFER_OK;
    return cuda_check_launch(n, "RoiAlign",
                             cuda_signal_roi_align(X->dtype, X->data, rois->dtype, rois->data, bidx->dtype, bidx->data,
                                                   y->data, &a, x->stream));
}

static cinfer_status run_max_roi_pool(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                      int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0], *rois = &in[1];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (!dtype_is_float(rois->dtype)) return cuda_unsupported_dtype(n, rois->dtype);
    if (X->ndim != 4 || y->ndim != 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxRoiPool node '%s': X must be [N, C, H, W]", n->name);
    cuda_roi_args a;
    memset(&a, 0, sizeof a);
    a.N = X->dims[0], a.C = X->dims[1], a.H = X->dims[2], a.W = X->dims[3];
    a.R = y->dims[0], a.PH = y->dims[2], a.PW = y->dims[3];
    a.spatial_scale = graph_attr_float(n, "spatial_scale", 1.0f);
    if (rois->host_data) {
        tensor view;
        cuda_host_views(rois, 1, &view);
        for (int64_t r = 0; r < a.R; r++) {
            double bv = tensor_get_double(&view, r * 5);
            if (!(bv >= 0 && bv < (double)a.N))
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxRoiPool node '%s': roi %lld has batch index %g, "
                                  "not in [0, %lld)", n->name, (long long)r, bv, (long long)a.N);
            for (int k = 1; k < 5; k++)
                if (!(fabs(tensor_get_double(&view, r * 5 + k) * a.spatial_scale) < 1e15))
                    return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxRoiPool node '%s': roi %lld is not finite",
                                      n->name, (long long)r);
        }
    }
    if (tensor_numel(y) == 0) return CINFER_OK;
    return cuda_check_launch(n, "MaxRoiPool",
                             cuda_signal_max_roi_pool(X->dtype, X->data, rois->dtype, rois->data, y->data, &a,
                                                      x->stream));
}

/* ---- MaxUnpool: scatter X to the flat indices of the unpooled shape, placed in output's leading corner ---- */

static cinfer_status run_max_unpool(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0], *ind = &in[1];
    tensor *y = &out[0];
    size_t es = cinfer_dtype_size(y->dtype);
    if (es == 0) return cuda_unsupported_dtype(n, y->dtype);
    if (!dtype_is_integer(ind->dtype)) return cuda_unsupported_dtype(n, ind->dtype);
    int r = X->ndim, sp = r - 2;
    size_t nk = 0, np = 0, ns = 0;
    const int64_t *k = graph_attr_ints(n, "kernel_shape", &nk);
    const int64_t *pads = graph_attr_ints(n, "pads", &np);
    const int64_t *strides = graph_attr_ints(n, "strides", &ns);
    if (sp < 1 || y->ndim != r || !k || nk < (size_t)sp || (pads && np < 2 * (size_t)sp) ||
        (strides && ns < (size_t)sp))
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': kernel_shape, pads and strides do not fit X "
                          "of rank %d", n->name, r);
    cuda_unpool_args a;
    memset(&a, 0, sizeof a);
    a.ndim = r;
    a.dims[0] = X->dims[0];
    a.dims[1] = X->dims[1];
    a.total = X->dims[0] * X->dims[1];
    for (int d = 0; d < sp; d++) {
        a.dims[2 + d] = (X->dims[2 + d] - 1) * (strides ? strides[d] : 1) - (pads ? pads[d] + pads[sp + d] : 0) + k[d];
        a.total *= a.dims[2 + d];
    }
    for (int d = 0; d < r; d++) {
        a.y_dims[d] = y->dims[d];
        if (a.dims[d] <= 0 && a.total > 0) a.total = 0; /* an empty unpooled shape takes no index */
    }
    a.x_count = tensor_numel(X);
    a.y_count = tensor_numel(y);
    if (ind->host_data) {
        tensor view;
        cuda_host_views(ind, 1, &view);
        for (int64_t e = 0; e < a.x_count; e++) {
            int64_t idx = tensor_get_int(&view, e);
            if (idx < 0 || idx >= a.total)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "MaxUnpool node '%s': index %lld at position %lld is "
                                  "not in [0, %lld)", n->name, (long long)idx, (long long)e, (long long)a.total);
        }
    }
    if (a.y_count == 0) return CINFER_OK;
    long long *winner = NULL;
    if (a.x_count > 0) {
        winner = cuda_scratch(x, (size_t)a.y_count * sizeof(long long));
        if (!winner)
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "MaxUnpool node '%s': out of device scratch", n->name);
    }
    return cuda_check_launch(n, "MaxUnpool",
                             cuda_signal_max_unpool(es, X->data, ind->dtype, ind->data, y->data, winner, &a,
                                                    x->stream));
}

/* ---- Det: LU with partial pivoting per matrix ---- */

static cinfer_status run_det(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_in; (void)num_out;
    const tensor *X = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    if (X->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "Det node '%s': input has rank %d", n->name, X->ndim);
    int64_t m = X->dims[X->ndim - 1], batch = tensor_numel(y);
    if (batch == 0) return CINFER_OK;
    double *work = cuda_scratch(x, (size_t)(batch * m * m > 0 ? batch * m * m : 1) * sizeof(double));
    if (!work)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "Det node '%s': no device scratch for %lld %lldx%lld matrices",
                          n->name, (long long)batch, (long long)m, (long long)m);
    return cuda_check_launch(n, "Det", cuda_signal_det(X->dtype, X->data, y->data, batch, m, work, x->stream));
}

const cuda_kernel cuda_signal_kernels[] = {
    {"HannWindow", run_window},
    {"HammingWindow", run_window},
    {"BlackmanWindow", run_window},
    {"DFT", cuda_signal_run_dft},
    {"STFT", cuda_signal_run_stft},
    {"MelWeightMatrix", run_mel},
    {"RoiAlign", run_roi_align},
    {"MaxRoiPool", run_max_roi_pool},
    {"MaxUnpool", run_max_unpool},
    {"Det", run_det},
    {NULL, NULL},
};
