/* CUDA kernels of the signal family (host side): windows, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool, Det ->
 * launches of kernels/signal.cu, and the table (DFT and STFT live in ops/signal_dft.c). Inputs the CPU validates
 * by value are checked here when their host copies are known; otherwise the kernels mark bad entries with NaN
 * (or skip them) rather than read out of bounds. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/signal.h"
#include "core/status.h"
#include "graph/shape/signal_params.h"

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
    signal_window w; /* a0 - a1 cos(t) + a2 cos(2t) */
    signal_compute_window(n, size, &w);
    if (size <= 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_signal_window(y->dtype, y->data, size, w.denom, w.a0, w.a1, w.a2, x->stream));
}

/* ---- MelWeightMatrix: triangular filters between mel-spaced DFT bins ---- */

/* The CPU's checks (signal_check_mel), when sample_rate and the edges are known on the host. */
static cinfer_status check_mel(const graph_node *n, const tensor *host, int64_t bins, int64_t nspec, int64_t len) {
    signal_mel m;
    CINFER_TRY(signal_compute_mel(n, bins, nspec, len, tensor_get_int(&host[2], 0), tensor_get_double(&host[3], 0),
                                  tensor_get_double(&host[4], 0), &m));
    return signal_check_mel(n, &m);
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
    signal_roi_align p;
    signal_compute_roi_align(n, &p);
    a.max_mode = p.max_mode;
    a.half_pixel = p.half_pixel;
    a.sampling_ratio = p.sampling_ratio;
    a.spatial_scale = p.spatial_scale;
    a.check = x->index_check;
    tensor host[3]; /* checked when both are known on the host */
    cuda_host_views(in, 3, host);
    CINFER_TRY(signal_check_roi_align(n, &host[1], &host[2], a.N));
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
    a.check = x->index_check;
    tensor view; /* checked when known on the host */
    cuda_host_views(rois, 1, &view);
    CINFER_TRY(signal_check_max_roi_pool(n, &view, a.N, a.spatial_scale));
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
    int r = X->ndim;
    if (y->ndim != r)
        return core_error(CINFER_ERR_INVALID_MODEL, "MaxUnpool node '%s': kernel_shape, pads and strides do not fit X "
                          "of rank %d", n->name, r);
    cuda_unpool_args a;
    memset(&a, 0, sizeof a);
    a.ndim = r;
    CINFER_TRY(signal_compute_unpool(n, in, a.dims, &a.total)); /* the unpooled shape */
    for (int d = 0; d < r; d++) {
        a.y_dims[d] = y->dims[d];
        if (a.dims[d] <= 0 && a.total > 0) a.total = 0; /* an empty unpooled shape takes no index */
    }
    a.x_count = tensor_numel(X);
    a.y_count = tensor_numel(y);
    tensor view; /* checked when known on the host */
    cuda_host_views(ind, 1, &view);
    CINFER_TRY(signal_check_unpool_indices(n, &view, a.x_count, a.total));
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
