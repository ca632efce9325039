/* CUDA DFT and STFT (host side): axis, lengths and frame parameters from attributes and the host copies of the
 * value inputs -> launches of kernels/signal_dft.cu. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/signal.h"
#include "core/status.h"

cinfer_status cuda_signal_run_dft(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out);
cinfer_status cuda_signal_run_stft(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out);

static bool present(const tensor *in, int num_in, int i) {
    return i >= 0 && i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

/* Input i as one integer from its host copy (a value input: known while planning). */
static cinfer_status known_int(const graph_node *n, const tensor *in, int num_in, int i, const char *what,
                               int64_t *v) {
    if (!present(in, num_in, i) || !in[i].host_data || tensor_numel(&in[i]) < 1 || !dtype_is_integer(in[i].dtype))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must be an integer known while planning",
                          n->op_type, n->name, what);
    tensor view;
    cuda_host_views(&in[i], 1, &view);
    *v = tensor_get_int(&view, 0);
    return CINFER_OK;
}

cinfer_status cuda_signal_run_dft(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out) {
    (void)num_out;
    const tensor *X = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    int r = X->ndim;
    int64_t a = n->opset >= 20 ? -2 : graph_attr_int(n, "axis", 1);
    if (n->opset >= 20 && present(in, num_in, 2)) CINFER_TRY(known_int(n, in, num_in, 2, "axis", &a));
    int axis = (int)(a < 0 ? a + r : a);
    if (r < 2 || axis < 0 || axis >= r - 1 || y->ndim != r)
        return core_error(CINFER_ERR_INVALID_MODEL, "DFT node '%s': axis %lld does not fit input rank %d", n->name,
                          (long long)a, r);
    bool inverse = graph_attr_int(n, "inverse", 0) != 0, onesided = graph_attr_int(n, "onesided", 0) != 0;
    cuda_dft_args d;
    memset(&d, 0, sizeof d);
    d.inverse = inverse;
    d.c2r = inverse && onesided;
    d.n_in = X->dims[axis];
    d.n_out = y->dims[axis];
    d.len = d.c2r ? 2 * (d.n_in - 1) : d.n_in;
    if (present(in, num_in, 1)) CINFER_TRY(known_int(n, in, num_in, 1, "dft_length", &d.len));
    d.cin = X->dims[r - 1];
    d.cout = y->dims[r - 1];
    d.outer = d.inner = 1;
    for (int k = 0; k < axis; k++) d.outer *= X->dims[k];
    for (int k = axis + 1; k < r - 1; k++) d.inner *= X->dims[k];
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (d.len < 1 || d.n_out > d.len || (d.cin != 1 && d.cin != 2) || (d.cout != 1 && d.cout != 2))
        return core_error(CINFER_ERR_INVALID_MODEL, "DFT node '%s': dft_length %lld for %lld output bins", n->name,
                          (long long)d.len, (long long)d.n_out);
    /* a one-sided inverse reads only the first len/2+1 bins and mirrors the rest */
    d.take = d.c2r ? d.len / 2 + 1 : d.len;
    if (d.take > d.n_in) d.take = d.n_in;
    return cuda_check_launch(n, "DFT", cuda_signal_dft(X->dtype, X->data, y->data, &d, x->stream));
}

cinfer_status cuda_signal_run_stft(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_out;
    const tensor *X = &in[0];
    tensor *y = &out[0];
    if (!dtype_is_float(X->dtype)) return cuda_unsupported_dtype(n, X->dtype);
    const tensor *win = present(in, num_in, 2) ? &in[2] : NULL;
    if (win && win->dtype != X->dtype)
        return core_error(CINFER_ERR_UNSUPPORTED, "STFT node '%s': window of dtype %s for a %s signal", n->name,
                          cinfer_dtype_name(win->dtype), cinfer_dtype_name(X->dtype));
    if (X->ndim != 3 || y->ndim != 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': signal must be [batch, length, 1 or 2]", n->name);
    cuda_stft_args s;
    memset(&s, 0, sizeof s);
    CINFER_TRY(known_int(n, in, num_in, 1, "frame_step", &s.step));
    if (win) s.len = win->dims[0];
    else CINFER_TRY(known_int(n, in, num_in, 3, "frame_length", &s.len));
    s.batch = X->dims[0];
    s.sig = X->dims[1];
    s.cin = X->dims[2];
    s.frames = y->dims[1];
    s.bins = y->dims[2];
    if (tensor_numel(y) == 0) return CINFER_OK;
    if (s.len < 1 || s.bins > s.len || (s.cin != 1 && s.cin != 2))
        return core_error(CINFER_ERR_INVALID_MODEL, "STFT node '%s': frame_length %lld for %lld bins", n->name,
                          (long long)s.len, (long long)s.bins);
    return cuda_check_launch(n, "STFT",
                             cuda_signal_stft(X->dtype, X->data, win ? win->data : NULL, y->data, &s, x->stream));
}
