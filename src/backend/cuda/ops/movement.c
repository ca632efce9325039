/* CUDA kernels of the movement family (host side): attributes and shapes -> launches of kernels/movement.cu
 * (strided copies, concat/split, pad, trilu, generated tensors) and kernels/movement_index.cu (gathers, scatters,
 * OneHot). Values that decide parameters (Slice's starts, Pad's pads, Range's start) come from host_data; generated
 * tensors travel to the device inside kernel arguments, never as host->device copies. */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/movement.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/shape/movement_params.h"

/* movement_pad_args.mode carries movement_pad_mode; the kernel switches on these values. */
_Static_assert(MOVEMENT_PAD_CONSTANT == 0 && MOVEMENT_PAD_REFLECT == 1 && MOVEMENT_PAD_EDGE == 2 && MOVEMENT_PAD_WRAP == 3,
               "kernels/movement.cu's pad_source assumes these values");

/* ---------------------------------------------------------------- helpers */

static bool has_input(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

static cinfer_status check_copyable(const graph_node *n, const tensor *t) {
    if (cinfer_dtype_size(t->dtype) == 0) return cuda_unsupported_dtype(n, t->dtype);
    return CINFER_OK;
}

static cinfer_status check_index_dtype(const graph_node *n, const tensor *t, const char *what) {
    if (t->dtype != CINFER_DTYPE_INT32 && t->dtype != CINFER_DTYPE_INT64)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': %s must be int32 or int64 on CUDA, got %s", n->op_type,
                          n->name, what, cinfer_dtype_name(t->dtype));
    return CINFER_OK;
}

/* A parameter input's value must have been known while planning. */
static cinfer_status check_host_value(const graph_node *n, const tensor *t, const char *what) {
    if (tensor_numel(t) > 0 && !t->host_data)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the value of %s is not known while planning (the CUDA "
                          "kernel reads it on the host)", n->op_type, n->name, what);
    return CINFER_OK;
}

static int64_t prod(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= dims[d];
    return p;
}

static int normalize_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* Device-to-device copy on the node's stream; nothing when the planner aliased dst over src. */
static cinfer_status copy_device(cuda_exec *x, const graph_node *n, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return CINFER_OK;
    return cuda_check_launch(n, "device copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, x->stream));
}

static cinfer_status copy_view(cuda_exec *x, const graph_node *n, void *dst, const void *src, size_t es,
                               const movement_view *v) {
    return cuda_check_launch(n, "strided copy", movement_launch_view_copy(dst, src, es, v, x->stream));
}

/* dst = src (dims) transposed by perm. */
static cinfer_status permute_copy(cuda_exec *x, const graph_node *n, void *dst, const void *src, size_t es, int ndim,
                                  const int64_t *dims, const int *perm) {
    movement_view v;
    movement_view_permute(ndim, dims, perm, &v);
    return copy_view(x, n, dst, src, es, &v);
}

/* ---------------------------------------------------------------- reshapes, transposes */

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the bytes are unchanged. */
static cinfer_status run_copy(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    return copy_device(x, n, out[0].data, in[0].data, tensor_nbytes(&out[0]));
}

static cinfer_status run_transpose(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    int perm[CINFER_MAX_DIMS];
    CINFER_TRY(movement_compute_transpose(n, &in[0], perm));
    return permute_copy(x, n, out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), in[0].ndim, in[0].dims, perm);
}

static cinfer_status run_depth_space(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                     int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    movement_depth_space p; /* X as 6-D, permuted into the output */
    CINFER_TRY(movement_compute_depth_space(n, &in[0], &p));
    return permute_copy(x, n, out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), 6, p.view, p.perm);
}

/* ---------------------------------------------------------------- concat, split, slice */

/* Adds part (cols columns per outer index, at column col0 of the wide tensor) to the batch, launching the batch
 * when it is full. */
static cinfer_status concat_add(cuda_exec *x, const graph_node *n, movement_concat_batch *b, void *part, int64_t cols,
                                int64_t col0, size_t es, bool to_wide) {
    if (b->count == MOVEMENT_CONCAT_BATCH) {
        CINFER_TRY(cuda_check_launch(n, to_wide ? "concat" : "split", movement_launch_concat(b, es, to_wide, x->stream)));
        b->count = 0;
    }
    int k = b->count++;
    b->part[k] = part;
    b->wide_col0[k] = col0;
    b->cum[k + 1] = b->cum[k] + cols;
    return CINFER_OK;
}

static cinfer_status run_concat(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &out[0]));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    int r = out[0].ndim, axis = normalize_axis(graph_attr_int(n, "axis", 0), r);
    size_t es = cinfer_dtype_size(out[0].dtype);
    int64_t inner = prod(out[0].dims, axis + 1, r);
    movement_concat_batch b = {.count = 0, .outer = prod(out[0].dims, 0, axis), .wide_cols = out[0].dims[axis] * inner,
                               .wide = out[0].data};
    int64_t col0 = 0;
    for (int i = 0; i < num_in; i++) {
        int64_t cols = in[i].dims[axis] * inner;
        if (cols > 0) CINFER_TRY(concat_add(x, n, &b, in[i].data, cols, col0, es, true));
        col0 += cols;
    }
    return cuda_check_launch(n, "concat", movement_launch_concat(&b, es, true, x->stream));
}

static cinfer_status run_split(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in;
    CINFER_TRY(check_copyable(n, &in[0]));
    if (tensor_numel(&in[0]) == 0) return CINFER_OK;
    int r = in[0].ndim, axis = normalize_axis(graph_attr_int(n, "axis", 0), r);
    size_t es = cinfer_dtype_size(in[0].dtype);
    int64_t inner = prod(in[0].dims, axis + 1, r);
    movement_concat_batch b = {.count = 0, .outer = prod(in[0].dims, 0, axis), .wide_cols = in[0].dims[axis] * inner,
                               .wide = in[0].data};
    int64_t col0 = 0;
    for (int k = 0; k < num_out; k++) {
        int64_t cols = out[k].dims[axis] * inner;
        if (cols > 0 && out[k].data) CINFER_TRY(concat_add(x, n, &b, out[k].data, cols, col0, es, false));
        col0 += cols;
    }
    return cuda_check_launch(n, "split", movement_launch_concat(&b, es, false, x->stream));
}

static cinfer_status run_slice(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    for (int i = 1; i < num_in; i++)
        if (has_input(in, num_in, i)) CINFER_TRY(check_host_value(n, &in[i], "starts/ends/axes/steps"));
    tensor host[5];
    cuda_host_views(in, num_in < 5 ? num_in : 5, host);
    movement_slice p;
    CINFER_TRY(movement_compute_slice(n, host, num_in < 5 ? num_in : 5, &p));
    size_t es = cinfer_dtype_size(in[0].dtype);
    movement_view v;
    int64_t base;
    if (!movement_view_slice(&p, &in[0], &v, &base)) return CINFER_OK; /* empty */
    return copy_view(x, n, out[0].data, (const char *)in[0].data + base * (int64_t)es, es, &v);
}

/* ---------------------------------------------------------------- gathers */

/* The indices of a gather or scatter that moves nothing (an empty output, slice or data) are still checked, as the
 * CPU checks each one: rows of k values, value j against dims[j]. */
static cinfer_status check_indices_only(cuda_exec *x, const graph_node *n, const tensor *idx, int k,
                                        const int64_t *dims, int64_t rows) {
    movement_index_rows_args a = {.k = k};
    for (int j = 0; j < k; j++) a.dims[j] = dims[j];
    return cuda_check_launch(n, "index check",
                             movement_launch_index_rows_check(idx->data, idx->dtype == CINFER_DTYPE_INT64, &a, rows,
                                                              x->index_check, x->stream));
}

static cinfer_status run_gather(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1];
    CINFER_TRY(check_copyable(n, data));
    CINFER_TRY(check_index_dtype(n, idx, "indices"));
    int r = data->ndim, axis = normalize_axis(graph_attr_int(n, "axis", 0), r);
    if (tensor_numel(&out[0]) == 0) return check_indices_only(x, n, idx, 1, &data->dims[axis], tensor_numel(idx));
    return cuda_check_launch(n, "gather",
                             movement_launch_gather(out[0].data, data->data, idx->data, idx->dtype == CINFER_DTYPE_INT64,
                                                    cinfer_dtype_size(data->dtype), prod(data->dims, 0, axis),
                                                    data->dims[axis], tensor_numel(idx), prod(data->dims, axis + 1, r),
                                                    x->index_check, x->stream));
}

/* LookupConcat (internal; graph/fusion_lookup.c): every piece in one launch per MOVEMENT_LOOKUP_MAX of them. */
static cinfer_status run_lookup_concat(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                       int num_out) {
    (void)num_out;
    lookup_part parts[GRAPH_MAX_NODE_IO];
    int count = 0;
    int64_t outer = 0, width = 0;
    CINFER_TRY(movement_lookup_parts(n, in, num_in, &out[0], parts, &count, &outer, &width));
    CINFER_TRY(check_copyable(n, &out[0]));
    for (int k = 0; k < count; k++)
        if (parts[k].lookup) CINFER_TRY(check_index_dtype(n, &in[parts[k].input + 1], "indices"));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    movement_lookup_batch b;
    memset(&b, 0, sizeof b);
    b.dst = out[0].data;
    b.outer = outer;
    b.width = width;
    b.check = x->index_check;
    for (int k = 0; k < count; k++) {
        const lookup_part *p = &parts[k];
        if (p->inner == 0) continue;
        movement_lookup_piece *q = &b.p[b.n++];
        q->src = in[p->input].data;
        q->idx = p->lookup ? in[p->input + 1].data : NULL;
        q->idx_is_64 = p->lookup && in[p->input + 1].dtype == CINFER_DTYPE_INT64;
        q->inner = p->inner;
        q->col0 = p->col0;
        q->row = p->row;
        q->rows = p->rows;
        if (b.n == MOVEMENT_LOOKUP_MAX || k == count - 1) {
            CINFER_TRY(cuda_check_launch(n, "lookup concat",
                                         movement_launch_lookup_concat(&b, cinfer_dtype_size(out[0].dtype), x->stream)));
            b.n = 0;
        }
    }
    if (b.n)
        CINFER_TRY(cuda_check_launch(n, "lookup concat",
                                     movement_launch_lookup_concat(&b, cinfer_dtype_size(out[0].dtype), x->stream)));
    return CINFER_OK;
}

/* GatherElements / ScatterElements: where index position i points in data. */
static void elements_args(movement_elements_args *a, const graph_node *n, const tensor *data, const tensor *idx) {
    memset(a, 0, sizeof *a);
    a->ndim = data->ndim;
    a->axis = normalize_axis(graph_attr_int(n, "axis", 0), data->ndim);
    a->axis_size = data->dims[a->axis];
    for (int d = 0; d < idx->ndim; d++) a->idx_dims[d] = idx->dims[d];
    tensor_strides(data, a->data_strides);
}

static cinfer_status run_gather_elements(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                         int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1];
    CINFER_TRY(check_copyable(n, data));
    CINFER_TRY(check_index_dtype(n, idx, "indices"));
    int64_t total = tensor_numel(idx);
    if (total == 0) return CINFER_OK;
    movement_elements_args a;
    elements_args(&a, n, data, idx);
    return cuda_check_launch(n, "gather elements",
                             movement_launch_gather_elements(out[0].data, data->data, idx->data,
                                                             idx->dtype == CINFER_DTYPE_INT64,
                                                             cinfer_dtype_size(data->dtype), &a, total, x->index_check,
                                                             x->stream));
}

static cinfer_status run_gather_nd(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1];
    CINFER_TRY(check_copyable(n, data));
    CINFER_TRY(check_index_dtype(n, idx, "indices"));
    int r = data->ndim, q = idx->ndim, b = (int)graph_attr_int(n, "batch_dims", 0);
    int k = (int)idx->dims[q - 1];
    if (tensor_numel(&out[0]) == 0) return check_indices_only(x, n, idx, k, &data->dims[b], prod(idx->dims, 0, q - 1));
    int64_t ds[CINFER_MAX_DIMS];
    tensor_strides(data, ds);
    movement_gather_nd_args a = {.k = k, .per_batch = prod(idx->dims, b, q - 1), .slice = prod(data->dims, b + k, r),
                                 .data_batch = prod(data->dims, b, r)};
    for (int j = 0; j < k; j++) {
        a.dims[j] = data->dims[b + j];
        a.strides[j] = ds[b + j];
    }
    return cuda_check_launch(n, "gather nd",
                             movement_launch_gather_nd(out[0].data, data->data, idx->data, idx->dtype == CINFER_DTYPE_INT64,
                                                       cinfer_dtype_size(data->dtype), &a, prod(idx->dims, 0, q - 1),
                                                       x->index_check, x->stream));
}

static cinfer_status run_onehot(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_in; (void)num_out;
    const tensor *idx = &in[0], *values = &in[2];
    CINFER_TRY(check_copyable(n, values));
    if (!dtype_is_integer(idx->dtype) && !dtype_is_float(idx->dtype))
        return core_error(CINFER_ERR_UNSUPPORTED, "OneHot node '%s': indices of dtype %s are not supported", n->name,
                          cinfer_dtype_name(idx->dtype));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    int r = out[0].ndim, axis = normalize_axis(graph_attr_int(n, "axis", -1), r);
    return cuda_check_launch(n, "one hot",
                             movement_launch_onehot(out[0].data, idx->data, idx->dtype, values->data,
                                                    cinfer_dtype_size(values->dtype), prod(out[0].dims, 0, axis),
                                                    out[0].dims[axis], prod(out[0].dims, axis + 1, r), x->stream));
}

/* ---------------------------------------------------------------- scatters */

/* What ScatterND and ScatterElements share: checks, out = data, and the scratch for the keys and the sort. */
static cinfer_status scatter_begin(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out,
                                   movement_reduction red, int64_t rows, uint64_t sentinel, void **scratch,
                                   size_t *scratch_bytes) {
    const tensor *data = &in[0], *idx = &in[1];
    if (cinfer_dtype_size(data->dtype) == 0 || (red != MOVEMENT_RED_NONE && data->dtype == CINFER_DTYPE_BOOL))
        return cuda_unsupported_dtype(n, data->dtype);
    CINFER_TRY(check_index_dtype(n, idx, "indices"));
    CINFER_TRY(copy_device(x, n, out[0].data, data->data, tensor_nbytes(data)));
    *scratch = NULL;
    if (rows == 0 || tensor_numel(data) == 0) return CINFER_OK;
    CINFER_TRY(cuda_check_launch(n, "scatter sort size",
                                 movement_scatter_scratch_bytes(rows, movement_scatter_key_bits(sentinel), scratch_bytes)));
    *scratch = cuda_scratch(x, *scratch_bytes);
    if (!*scratch)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': no device memory for %zu bytes of scatter scratch",
                          n->op_type, n->name, *scratch_bytes);
    return CINFER_OK;
}

static cinfer_status run_scatter_nd(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                    int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1], *upd = &in[2];
    movement_reduction red;
    CINFER_TRY(movement_read_reduction(n, &red));
    int r = data->ndim, q = idx->ndim, k = (int)idx->dims[q - 1];
    int64_t rows = prod(idx->dims, 0, q - 1), slice = prod(data->dims, k, r);
    uint64_t sentinel = (uint64_t)prod(data->dims, 0, k); /* slots are [0, sentinel) */
    void *scratch;
    size_t scratch_bytes = 0;
    CINFER_TRY(scatter_begin(x, n, in, out, red, rows, sentinel, &scratch, &scratch_bytes));
    if (!scratch || slice == 0) return check_indices_only(x, n, idx, k, data->dims, rows); /* empty data or slices */
    movement_scatter_nd_args a = {.k = k};
    for (int j = 0; j < k; j++) {
        a.dims[j] = data->dims[j];
        a.slot_strides[j] = prod(data->dims, j + 1, k);
    }
    bool idx64 = idx->dtype == CINFER_DTYPE_INT64;
    CINFER_TRY(cuda_check_launch(n, "scatter nd keys",
                                 movement_launch_scatter_nd_keys(scratch, idx->data, idx64, &a, rows, sentinel,
                                                                 x->index_check, x->stream)));
    return cuda_check_launch(n, "scatter nd",
                             movement_launch_scatter_apply(scratch, scratch_bytes, out[0].data, upd->data, data->dtype, red,
                                                           rows, slice, sentinel, movement_scatter_key_bits(sentinel),
                                                           x->stream));
}

static cinfer_status run_scatter_elements(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                          int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1], *upd = &in[2];
    movement_reduction red;
    CINFER_TRY(movement_read_reduction(n, &red));
    int64_t rows = tensor_numel(idx);
    uint64_t sentinel = (uint64_t)tensor_numel(data); /* slots are data's elements */
    void *scratch;
    size_t scratch_bytes = 0;
    CINFER_TRY(scatter_begin(x, n, in, out, red, rows, sentinel, &scratch, &scratch_bytes));
    movement_elements_args a;
    elements_args(&a, n, data, idx);
    if (!scratch) return check_indices_only(x, n, idx, 1, &a.axis_size, rows); /* empty data */
    bool idx64 = idx->dtype == CINFER_DTYPE_INT64;
    CINFER_TRY(cuda_check_launch(n, "scatter elements keys",
                                 movement_launch_scatter_elements_keys(scratch, idx->data, idx64, &a, rows, sentinel,
                                                                       x->index_check, x->stream)));
    return cuda_check_launch(n, "scatter elements",
                             movement_launch_scatter_apply(scratch, scratch_bytes, out[0].data, upd->data, data->dtype, red,
                                                           rows, 1, sentinel, movement_scatter_key_bits(sentinel),
                                                           x->stream));
}

/* ---------------------------------------------------------------- broadcasting copies, padding */

static cinfer_status run_expand(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    movement_view v;
    movement_view_expand(&in[0], &out[0], &v);
    return copy_view(x, n, out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), &v);
}

static cinfer_status run_tile(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    movement_view v; /* output axis d of size rep*dim read as [rep, dim] */
    movement_view_tile(&in[0], &out[0], &v);
    return copy_view(x, n, out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), &v);
}

static cinfer_status run_pad(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    CINFER_TRY(check_host_value(n, &in[1], "pads (input 1)"));
    if (has_input(in, num_in, 3)) CINFER_TRY(check_host_value(n, &in[3], "axes (input 3)"));
    tensor host[4];
    int nh = num_in < 4 ? num_in : 4;
    cuda_host_views(in, nh, host);
    movement_pad p;
    CINFER_TRY(movement_compute_pad(n, host, nh, &p));
    size_t es = cinfer_dtype_size(in[0].dtype);
    int64_t total = tensor_numel(&out[0]);
    if (total == 0) return CINFER_OK;
    int r = in[0].ndim;
    if (r == 0) return copy_device(x, n, out[0].data, in[0].data, es);
    /* the constant is read on the device: it need not be known while planning */
    const void *value = has_input(in, num_in, 2) && tensor_numel(&in[2]) == 1 && in[2].dtype == in[0].dtype ? in[2].data
                                                                                                             : NULL;
    /* negative pads crop first (as onnxruntime does), so per axis the source is the `keep` elements from `skip` on,
     * and the output has `lead` padded elements before them */
    movement_pad_args a = {.ndim = r, .mode = (int)p.mode};
    tensor_strides(&in[0], a.in_strides);
    for (int d = 0; d < r; d++) {
        a.out_dims[d] = out[0].dims[d];
        a.skip[d] = p.begin[d] < 0 ? -p.begin[d] : 0;
        a.keep[d] = in[0].dims[d] - a.skip[d] - (p.end[d] < 0 ? -p.end[d] : 0);
        a.lead[d] = p.begin[d] > 0 ? p.begin[d] : 0;
    }
    return cuda_check_launch(n, "pad", movement_launch_pad(out[0].data, in[0].data, value, es, &a, total, x->stream));
}

/* ---------------------------------------------------------------- shapes and generated tensors */

static cinfer_status write_bytes(cuda_exec *x, const graph_node *n, void *dst, const void *bytes, size_t count) {
    if (count == 0) return CINFER_OK;
    return cuda_check_launch(n, "write constant", movement_launch_write_bytes(dst, bytes, count, x->stream));
}

static cinfer_status run_shape(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in; (void)num_out;
    /* only in[0]'s dims: its data may be absent (OP_FLAG_SHAPE_ONLY) */
    int64_t s, e;
    movement_shape_range(n, in[0].ndim, &s, &e);
    int64_t dims[CINFER_MAX_DIMS], count = out[0].dims[0];
    for (int64_t i = 0; i < count; i++) dims[i] = in[0].dims[s + i];
    return write_bytes(x, n, out[0].data, dims, (size_t)count * sizeof(int64_t));
}

static cinfer_status run_size(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    (void)num_in; (void)num_out;
    int64_t size = tensor_numel(&in[0]);
    return write_bytes(x, n, out[0].data, &size, sizeof size);
}

static cinfer_status run_constant_of_shape(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                           int num_out) {
    (void)in; (void)num_in; (void)num_out;
    size_t es = cinfer_dtype_size(out[0].dtype);
    if (es == 0) return cuda_unsupported_dtype(n, out[0].dtype);
    const graph_attr *a = graph_node_attr(n, "value");
    uint64_t bits = 0; /* default: float 0 */
    if (a && a->type == ATTR_TENSOR && a->t.data) memcpy(&bits, a->t.data, es);
    return cuda_check_launch(n, "fill", movement_launch_fill(out[0].data, es, tensor_numel(&out[0]), bits, x->stream));
}

static cinfer_status run_constant(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out) {
    (void)in; (void)num_in; (void)num_out;
    const graph_attr *a = &n->attrs[0];
    size_t bytes = tensor_nbytes(&out[0]);
    switch (a->type) {
    case ATTR_TENSOR: return write_bytes(x, n, out[0].data, a->t.data, bytes);
    case ATTR_FLOAT: return write_bytes(x, n, out[0].data, &a->f, sizeof(float));
    case ATTR_INT: return write_bytes(x, n, out[0].data, &a->i, sizeof(int64_t));
    case ATTR_FLOATS: return write_bytes(x, n, out[0].data, a->floats, bytes);
    case ATTR_INTS: return write_bytes(x, n, out[0].data, a->ints, bytes);
    default:
        return core_error(CINFER_ERR_UNSUPPORTED, "Constant node '%s': attribute %s is not supported", n->name, a->name);
    }
}

static cinfer_status run_range(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_out;
    CINFER_TRY(check_host_value(n, &in[0], "start (input 0)"));
    CINFER_TRY(check_host_value(n, &in[2], "delta (input 2)"));
    tensor host[3];
    cuda_host_views(in, num_in < 3 ? num_in : 3, host);
    cinfer_dtype t = out[0].dtype;
    double start_f = 0, delta_f = 0;
    int64_t start_i = 0, delta_i = 0;
    if (dtype_is_float(t)) {
        start_f = tensor_get_double(&host[0], 0);
        delta_f = tensor_get_double(&host[2], 0);
    } else if (t == CINFER_DTYPE_INT16 || t == CINFER_DTYPE_INT32 || t == CINFER_DTYPE_INT64) {
        start_i = tensor_get_int(&host[0], 0);
        delta_i = tensor_get_int(&host[2], 0);
    } else {
        return cuda_unsupported_dtype(n, t);
    }
    return cuda_check_launch(n, "range", movement_launch_range(out[0].data, t, out[0].dims[0], start_f, delta_f, start_i,
                                                               delta_i, x->stream));
}

static cinfer_status run_dropout(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out) {
    CINFER_TRY(check_copyable(n, &in[0]));
    if (has_input(in, num_in, 2)) { /* training_mode: only a ratio of 0 (or training off) is an identity */
        tensor host[3];
        cuda_host_views(in, 3, host);
        bool ratio_known = !has_input(in, num_in, 1) || in[1].host_data;
        double ratio = !has_input(in, num_in, 1) ? 0.5 : in[1].host_data ? tensor_get_double(&host[1], 0) : -1;
        if (!(ratio_known && ratio == 0)) {
            if (!in[2].host_data)
                return core_error(CINFER_ERR_UNSUPPORTED, "Dropout node '%s': training_mode is not known while planning "
                                  "(the CUDA kernel is inference only)", n->name);
            if (*(const uint8_t *)in[2].host_data) {
                if (!ratio_known)
                    return core_error(CINFER_ERR_UNSUPPORTED, "Dropout node '%s': training_mode with a ratio not known "
                                      "while planning is not supported (inference only)", n->name);
                return core_error(CINFER_ERR_UNSUPPORTED, "Dropout node '%s': training_mode with ratio %g is not "
                                  "supported (inference only)", n->name, ratio);
            }
        }
    }
    CINFER_TRY(copy_device(x, n, out[0].data, in[0].data, tensor_nbytes(&out[0])));
    if (num_out > 1 && out[1].data) /* keep everything */
        return cuda_check_launch(n, "dropout mask", movement_launch_fill(out[1].data, 1, tensor_numel(&out[1]), 1, x->stream));
    return CINFER_OK;
}

static cinfer_status run_trilu(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    int64_t k = 0;
    if (has_input(in, num_in, 1)) {
        CINFER_TRY(check_host_value(n, &in[1], "k (input 1)"));
        CINFER_TRY(check_index_dtype(n, &in[1], "k"));
        if (tensor_numel(&in[1]) > 0)
            k = in[1].dtype == CINFER_DTYPE_INT64 ? *(const int64_t *)in[1].host_data : *(const int32_t *)in[1].host_data;
    }
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    int r = in[0].ndim;
    bool upper = graph_attr_int(n, "upper", 1) != 0;
    return cuda_check_launch(n, "trilu",
                             movement_launch_trilu(out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype),
                                                   prod(in[0].dims, 0, r - 2), in[0].dims[r - 2], in[0].dims[r - 1], k,
                                                   upper, x->stream));
}

/* The bit pattern of 1 in dtype t (little-endian, low bytes). */
static bool one_bits(cinfer_dtype t, uint64_t *bits) {
    *bits = 0;
    switch (t) {
    case CINFER_DTYPE_FLOAT: { float v = 1.0f; memcpy(bits, &v, 4); return true; }
    case CINFER_DTYPE_DOUBLE: { double v = 1.0; memcpy(bits, &v, 8); return true; }
    case CINFER_DTYPE_FLOAT16: *bits = dtype_float_to_half(1.0f); return true;
    case CINFER_DTYPE_BFLOAT16: *bits = dtype_float_to_bf16(1.0f); return true;
    case CINFER_DTYPE_BOOL: case CINFER_DTYPE_INT8: case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT16:
    case CINFER_DTYPE_UINT16: case CINFER_DTYPE_INT32: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_INT64:
    case CINFER_DTYPE_UINT64: *bits = 1; return true;
    default: return false;
    }
}

static cinfer_status run_eye_like(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out) {
    (void)in; (void)num_in; (void)num_out;
    cinfer_dtype t = out[0].dtype;
    uint64_t one;
    if (!one_bits(t, &one)) return cuda_unsupported_dtype(n, t);
    return cuda_check_launch(n, "eye like",
                             movement_launch_eye(out[0].data, cinfer_dtype_size(t), out[0].dims[0], out[0].dims[1],
                                                 graph_attr_int(n, "k", 0), one, x->stream));
}

const cuda_kernel cuda_movement_kernels[] = {
    {"Reshape", run_copy},
    {"Flatten", run_copy},
    {"Squeeze", run_copy},
    {"Unsqueeze", run_copy},
    {"Identity", run_copy},
    {"Transpose", run_transpose},
    {"Concat", run_concat},
    {"Split", run_split},
    {"Slice", run_slice},
    {"Gather", run_gather},
    {"LookupConcat", run_lookup_concat},
    {"GatherElements", run_gather_elements},
    {"GatherND", run_gather_nd},
    {"ScatterND", run_scatter_nd},
    {"ScatterElements", run_scatter_elements},
    {"OneHot", run_onehot},
    {"Expand", run_expand},
    {"Tile", run_tile},
    {"Pad", run_pad},
    {"Shape", run_shape},
    {"Size", run_size},
    {"ConstantOfShape", run_constant_of_shape},
    {"Constant", run_constant},
    {"Range", run_range},
    {"Dropout", run_dropout},
    {"Trilu", run_trilu},
    {"DepthToSpace", run_depth_space},
    {"SpaceToDepth", run_depth_space},
    {"EyeLike", run_eye_like},
    {NULL, NULL},
};
