/* CUDA kernels of the reduce family's ops along one axis of [outer, len, inner] (host side): Softmax, LogSoftmax,
 * Hardmax, LpNormalization. Attributes and shapes -> launches of kernels/reduce_softmax.cu, with the CPU kernels'
 * semantics (backend/cpu/reduce_softmax.c). */
#include "backend/cuda/ops/reduce_internal.h"
#include "graph/shape/reduce_params.h"

/* ---- Softmax, LogSoftmax, Hardmax, LpNormalization ---- */

static cinfer_status run_row_mode(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out, int64_t outer,
                                  int64_t len, int64_t inner, cuda_softmax_mode mode) {
    if (outer * len * inner == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             cuda_reduce_softmax(mode, in[0].dtype, in[0].data, out[0].data, outer, len, inner,
                                                 mode == CUDA_SOFTMAX && graph_attr_int(n, "cinfer_nan_to_zero", 0) != 0,
                                                 x->stream));
}

static cinfer_status run_softmax_like(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out,
                                      cuda_softmax_mode mode) {
    if (!cuda_red_is_float(in[0].dtype)) return cuda_unsupported_dtype(n, in[0].dtype);
    reduce_rows r; /* rows along the axis (reduce_compute_softmax: older opsets flatten the tail into the row) */
    CINFER_TRY(reduce_compute_softmax(n, &in[0], &r));
    return run_row_mode(x, n, in, out, r.outer, r.len, r.inner, mode);
}

cinfer_status cuda_red_run_softmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in;
    (void)num_out;
    return run_softmax_like(x, n, in, out, CUDA_SOFTMAX);
}

cinfer_status cuda_red_run_log_softmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out) {
    (void)num_in;
    (void)num_out;
    return run_softmax_like(x, n, in, out, CUDA_LOG_SOFTMAX);
}

cinfer_status cuda_red_run_hardmax(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in;
    (void)num_out;
    return run_softmax_like(x, n, in, out, CUDA_HARDMAX);
}

/* LpNormalization: x / ||x||_p along the axis (p 1 or 2), 0 where the norm is 0. */
cinfer_status cuda_red_run_lp_norm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in;
    (void)num_out;
    if (!cuda_red_is_float(in[0].dtype)) return cuda_unsupported_dtype(n, in[0].dtype);
    reduce_rows r;
    int64_t p;
    CINFER_TRY(reduce_compute_lp_norm(n, &in[0], &r, &p));
    return run_row_mode(x, n, in, out, r.outer, r.len, r.inner, p == 1 ? CUDA_LP_NORM_1 : CUDA_LP_NORM_2);
}
