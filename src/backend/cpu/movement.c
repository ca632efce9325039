/* CPU kernels of the movement family: dtype-generic copies (reshape, transpose, concat, split, slice, gathers,
 * scatters, pad, tile, expand), generated tensors (Constant, ConstantOfShape, Range, EyeLike, OneHot) and
 * shape queries. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "core/status.h"
#include "graph/shape/movement_params.h"

#define PAR_BYTES ((size_t)1 << 18) /* copies below this many bytes stay on one thread */

/* ---------------------------------------------------------------- helpers */

static bool has_input(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

static int64_t index_at(const tensor *t, int64_t i) {
    return t->dtype == CINFER_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Every element copy goes through memcpy so no float is read through an integer lvalue; fixed sizes
 * compile to single moves. */
static inline void copy_block(char *dst, const char *src, size_t bytes) {
    switch (bytes) {
    case 1: memcpy(dst, src, 1); break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, bytes); break;
    }
}

/* Plain copy; skipped when the planner aliased output over input (OP_FLAG_ALIAS). Large copies split
 * over threads. */
static void copy_bytes(void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    int64_t chunks = bytes >= 4 * PAR_BYTES && cpu_num_threads() > 1 ? cpu_num_threads() : 1;
#pragma omp parallel for num_threads(cpu_num_threads()) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        size_t b0 = bytes * (size_t)c / (size_t)chunks, b1 = bytes * (size_t)(c + 1) / (size_t)chunks;
        memcpy((char *)dst + b0, (const char *)src + b0, b1 - b0);
    }
}

/* Fills `count` elements of `es` bytes with the element at `value`. */
static void fill_pattern(char *dst, int64_t count, size_t es, const void *value) {
    if (count <= 0) return;
    size_t total = (size_t)count * es;
    bool zero = true;
    for (size_t i = 0; i < es; i++)
        if (((const unsigned char *)value)[i]) zero = false;
    if (zero || es == 1) {
        memset(dst, zero ? 0 : *(const unsigned char *)value, total);
        return;
    }
    memcpy(dst, value, es);
    for (size_t filled = es; filled < total;) { /* doubling: log2(count) memcpy calls */
        size_t c = filled < total - filled ? filled : total - filled;
        memcpy(dst + filled, dst, c);
        filled += c;
    }
}

/* Writes v as one element of dtype t (generated tensors: Range, EyeLike). */
static void store_double(cinfer_dtype t, void *dst, double v) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: { float x = (float)v; memcpy(dst, &x, 4); break; }
    case CINFER_DTYPE_DOUBLE: memcpy(dst, &v, 8); break;
    case CINFER_DTYPE_FLOAT16: { uint16_t x = dtype_float_to_half((float)v); memcpy(dst, &x, 2); break; }
    case CINFER_DTYPE_BFLOAT16: { uint16_t x = dtype_float_to_bf16((float)v); memcpy(dst, &x, 2); break; }
    case CINFER_DTYPE_INT8: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
    case CINFER_DTYPE_UINT8: { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); break; }
    case CINFER_DTYPE_BOOL: { uint8_t x = v != 0; memcpy(dst, &x, 1); break; }
    case CINFER_DTYPE_INT16: { int16_t x = (int16_t)v; memcpy(dst, &x, 2); break; }
    case CINFER_DTYPE_UINT16: { uint16_t x = (uint16_t)v; memcpy(dst, &x, 2); break; }
    case CINFER_DTYPE_INT32: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
    case CINFER_DTYPE_UINT32: { uint32_t x = (uint32_t)v; memcpy(dst, &x, 4); break; }
    case CINFER_DTYPE_INT64: { int64_t x = (int64_t)v; memcpy(dst, &x, 8); break; }
    case CINFER_DTYPE_UINT64: { uint64_t x = (uint64_t)v; memcpy(dst, &x, 8); break; }
    default: break;
    }
}

static cinfer_status check_copyable(const graph_node *n, const tensor *t) {
    if (cinfer_dtype_size(t->dtype) == 0) return cpu_unsupported_dtype(n, t->dtype);
    return CINFER_OK;
}

static cinfer_status index_error(const graph_node *n, int64_t index, int axis, int64_t size) {
    return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': index %lld is out of range for axis %d of size %lld",
                      n->op_type, n->name, (long long)index, axis, (long long)size);
}

/* Wraps a negative index once and checks it against size. */
static bool wrap_index(int64_t *v, int64_t size) {
    if (*v < 0) *v += size;
    return *v >= 0 && *v < size;
}

/* ---------------------------------------------------------------- strided copies */

/* What a copy reads: a movement_view (graph/shape/movement_types.h), built by movement_params.h. */

/* Drops size-1 dims and merges neighbours that are contiguous in the source, so the inner loop is as
 * long as possible. Returns the element count. */
static int64_t view_simplify(movement_view *v) {
    int64_t total = 1;
    int m = 0;
    for (int d = 0; d < v->ndim; d++) {
        total *= v->dims[d];
        if (v->dims[d] == 1) continue;
        if (m > 0 && v->stride[m - 1] == v->stride[d] * v->dims[d]) {
            v->dims[m - 1] *= v->dims[d];
            v->stride[m - 1] = v->stride[d];
        } else {
            v->dims[m] = v->dims[d];
            v->stride[m] = v->stride[d];
            m++;
        }
    }
    v->ndim = m;
    return total;
}

static void copy_row(char *dst, const char *src, int64_t count, int64_t stride, size_t es) {
    if (stride == 1) {
        memcpy(dst, src, (size_t)count * es);
        return;
    }
    if (stride == 0) {
        fill_pattern(dst, count, es, src);
        return;
    }
#define STRIDED_ROW(ES) for (int64_t i = 0; i < count; i++) memcpy(dst + i * (ES), src + i * stride * (int64_t)(ES), (ES))
    switch (es) {
    case 1: STRIDED_ROW(1); break;
    case 2: STRIDED_ROW(2); break;
    case 4: STRIDED_ROW(4); break;
    case 8: STRIDED_ROW(8); break;
    default: STRIDED_ROW(es); break;
    }
#undef STRIDED_ROW
}

/* Source offset (elements) of outer index o over dims [0, last). */
static int64_t view_offset(const movement_view *v, int last, int64_t o, int64_t *idx) {
    int64_t off = 0;
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = o % v->dims[d];
        o /= v->dims[d];
        off += idx[d] * v->stride[d];
    }
    return off;
}

/* Batched 2-D transpose in 32x32 tiles: out [.., R, C] where R is contiguous in the source and C strided. */
static void copy_transposed_tiles(char *dst, const char *src, size_t es, const movement_view *v, int64_t total) {
    enum { T = 32 };
    int m = v->ndim;
    int64_t R = v->dims[m - 2], C = v->dims[m - 1], cs = v->stride[m - 1];
    int64_t batch = total / (R * C), row_tiles = (R + T - 1) / T, jobs = batch * row_tiles;
    bool par = (size_t)total * es >= PAR_BYTES && jobs > 1;
#pragma omp parallel for num_threads(cpu_num_threads()) if (par) schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        int64_t idx[MOVEMENT_VIEW_DIMS];
        int64_t b = j / row_tiles, r0 = (j % row_tiles) * T, r1 = r0 + T < R ? r0 + T : R;
        char *db = dst + (size_t)(b * R * C) * es;
        const char *sb = src + view_offset(v, m - 2, b, idx) * (int64_t)es;
        for (int64_t c0 = 0; c0 < C; c0 += T) {
            int64_t c1 = c0 + T < C ? c0 + T : C;
#define TILE(ES)                                                                                     \
    for (int64_t r = r0; r < r1; r++)                                                                \
        for (int64_t c = c0; c < c1; c++) memcpy(db + (r * C + c) * (ES), sb + (r + c * cs) * (int64_t)(ES), (ES))
            switch (es) {
            case 1: TILE(1); break;
            case 2: TILE(2); break;
            case 4: TILE(4); break;
            case 8: TILE(8); break;
            default: TILE(es); break;
            }
#undef TILE
        }
    }
}

/* dst (contiguous, v's dims) = the elements of src that v describes. */
static void copy_view(char *dst, const char *src, size_t es, movement_view v) {
    int64_t total = view_simplify(&v);
    if (total == 0) return;
    if (v.ndim == 0) {
        memcpy(dst, src, es);
        return;
    }
    int m = v.ndim;
    if (m >= 2 && v.stride[m - 2] == 1 && v.stride[m - 1] != 1 && v.stride[m - 1] != 0) {
        copy_transposed_tiles(dst, src, es, &v, total);
        return;
    }
    int64_t inner = v.dims[m - 1], istride = v.stride[m - 1], outer = total / inner;
    int64_t chunks = 1;
    if ((size_t)total * es >= PAR_BYTES && cpu_num_threads() > 1)
        chunks = outer < 4 * cpu_num_threads() ? outer : 4 * cpu_num_threads();
#pragma omp parallel for num_threads(cpu_num_threads()) if (chunks > 1) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t o0 = outer * c / chunks, o1 = outer * (c + 1) / chunks;
        int64_t idx[MOVEMENT_VIEW_DIMS];
        int64_t off = view_offset(&v, m - 1, o0, idx);
        for (int64_t o = o0; o < o1; o++) {
            copy_row(dst + (size_t)(o * inner) * es, src + off * (int64_t)es, inner, istride, es);
            for (int d = m - 2; d >= 0; d--) { /* odometer over the outer dims */
                off += v.stride[d];
                if (++idx[d] < v.dims[d]) break;
                off -= v.stride[d] * v.dims[d];
                idx[d] = 0;
            }
        }
    }
}

/* dst = src (dims) transposed by perm. */
static void permute_copy(char *dst, const char *src, size_t es, int ndim, const int64_t *dims, const int *perm) {
    movement_view v;
    movement_view_permute(ndim, dims, perm, &v);
    copy_view(dst, src, es, v);
}

/* ---------------------------------------------------------------- reshapes, transposes */

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the bytes are unchanged. */
static cinfer_status run_copy(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    copy_bytes(out[0].data, in[0].data, tensor_nbytes(&out[0]));
    return CINFER_OK;
}

static cinfer_status run_transpose(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    int perm[CINFER_MAX_DIMS];
    CINFER_TRY(movement_compute_transpose(n, &in[0], perm));
    permute_copy(out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), in[0].ndim, in[0].dims, perm);
    return CINFER_OK;
}

static cinfer_status run_depth_space(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    movement_depth_space p; /* X as 6-D, permuted into the output */
    CINFER_TRY(movement_compute_depth_space(n, &in[0], &p));
    permute_copy(out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), 6, p.view, p.perm);
    return CINFER_OK;
}

/* ---------------------------------------------------------------- concat, split, slice */

static int64_t prod(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= dims[d];
    return p;
}

static cinfer_status run_concat(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &out[0]));
    int r = out[0].ndim;
    int64_t axis = graph_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    size_t es = cinfer_dtype_size(out[0].dtype);
    int64_t outer = prod(out[0].dims, 0, (int)axis), inner = prod(out[0].dims, (int)axis + 1, r);
    int64_t out_rows = out[0].dims[axis], row0 = 0;
    char *dst = out[0].data;
    for (int i = 0; i < num_in; i++) {
        size_t block = (size_t)(in[i].dims[axis] * inner) * es;
        const char *src = in[i].data;
        bool par = block * (size_t)outer >= PAR_BYTES && outer > 1;
        if (block > 0) {
#pragma omp parallel for num_threads(cpu_num_threads()) if (par) schedule(static)
            for (int64_t o = 0; o < outer; o++)
                memcpy(dst + (size_t)((o * out_rows + row0) * inner) * es, src + (size_t)o * block, block);
        }
        row0 += in[i].dims[axis];
    }
    return CINFER_OK;
}

static cinfer_status run_split(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    CINFER_TRY(check_copyable(n, &in[0]));
    int r = in[0].ndim;
    int64_t axis = graph_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    size_t es = cinfer_dtype_size(in[0].dtype);
    int64_t strides[CINFER_MAX_DIMS];
    tensor_strides(&in[0], strides);
    int64_t offset = 0;
    for (int k = 0; k < num_out; k++) {
        movement_view v = {.ndim = r};
        for (int d = 0; d < r; d++) {
            v.dims[d] = out[k].dims[d];
            v.stride[d] = strides[d];
        }
        if (out[k].data) copy_view(out[k].data, (const char *)in[0].data + offset * strides[axis] * (int64_t)es, es, v);
        offset += out[k].dims[axis];
    }
    return CINFER_OK;
}

static cinfer_status run_slice(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    movement_slice p;
    CINFER_TRY(movement_compute_slice(n, in, num_in, &p));
    size_t es = cinfer_dtype_size(in[0].dtype);
    movement_view v;
    int64_t base;
    if (!movement_view_slice(&p, &in[0], &v, &base)) return CINFER_OK; /* empty */
    copy_view(out[0].data, (const char *)in[0].data + base * (int64_t)es, es, v);
    return CINFER_OK;
}

/* ---------------------------------------------------------------- gathers */

static cinfer_status run_gather(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    const tensor *data = &in[0], *idx = &in[1];
    int r = data->ndim;
    int64_t axis = graph_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    int64_t size = data->dims[axis], count = tensor_numel(idx);
    for (int64_t j = 0; j < count; j++) {
        int64_t v = index_at(idx, j);
        if (!wrap_index(&v, size)) return index_error(n, index_at(idx, j), (int)axis, size);
    }
    size_t es = cinfer_dtype_size(data->dtype);
    int64_t outer = prod(data->dims, 0, (int)axis), inner = prod(data->dims, (int)axis + 1, r);
    size_t block = (size_t)inner * es;
    int64_t jobs = outer * count;
    const char *src = data->data;
    char *dst = out[0].data;
    bool par = block * (size_t)jobs >= PAR_BYTES;
#pragma omp parallel for num_threads(cpu_num_threads()) if (par) schedule(static)
    for (int64_t t = 0; t < jobs; t++) {
        int64_t o = t / count, v = index_at(idx, t % count);
        if (v < 0) v += size;
        copy_block(dst + (size_t)t * block, src + (size_t)(o * size + v) * block, block);
    }
    return CINFER_OK;
}

/* LookupConcat (internal; graph/fusion_lookup.c): each piece's rows copied into their columns of the output seen
 * as [outer, width]; lookups check their indices first, as Gather does. */
static cinfer_status run_lookup_concat(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    lookup_part parts[GRAPH_MAX_NODE_IO];
    int count = 0;
    int64_t outer = 0, width = 0;
    CINFER_TRY(movement_lookup_parts(n, in, num_in, &out[0], parts, &count, &outer, &width));
    CINFER_TRY(check_copyable(n, &out[0]));
    const size_t es = cinfer_dtype_size(out[0].dtype);
    char *dst = out[0].data;
    for (int k = 0; k < count; k++) {
        const lookup_part *p = &parts[k];
        const char *src = in[p->input].data;
        if (!p->lookup) {
            for (int64_t o = 0; o < outer; o++)
                copy_block(dst + (size_t)(o * width + p->col0) * es, src + (size_t)(o * p->inner) * es,
                           (size_t)p->inner * es);
            continue;
        }
        const tensor *idx = &in[p->input + 1];
        int64_t count_idx = tensor_numel(idx);
        for (int64_t j = 0; j < count_idx; j++) {
            int64_t v = index_at(idx, j);
            if (!wrap_index(&v, p->rows)) return index_error(n, index_at(idx, j), 0, p->rows);
        }
        if (p->row == 0) continue;
        const int64_t per_outer = p->inner / p->row;
        const size_t row_bytes = (size_t)p->row * es;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t r = 0; r < per_outer; r++) {
                int64_t v = index_at(idx, o * per_outer + r);
                if (v < 0) v += p->rows;
                copy_block(dst + (size_t)(o * width + p->col0 + r * p->row) * es, src + (size_t)v * row_bytes, row_bytes);
            }
    }
    return CINFER_OK;
}

/* GatherElements / ScatterElements: walks the index tensor in order; each step gives the data element
 * (offset in elements) that index position i addresses along the node's axis. */
typedef struct elements_walk {
    const tensor *idx;
    int r, axis;
    int64_t size; /* data->dims[axis] */
    int64_t ds[CINFER_MAX_DIMS], coord[CINFER_MAX_DIMS];
    int64_t base; /* data offset of coord with the axis coordinate left out */
} elements_walk;

static void elements_walk_init(elements_walk *w, const graph_node *n, const tensor *data, const tensor *idx) {
    memset(w, 0, sizeof *w);
    w->idx = idx;
    w->r = data->ndim;
    int64_t axis = graph_attr_int(n, "axis", 0);
    if (axis < 0) axis += w->r;
    w->axis = (int)axis;
    w->size = data->dims[axis];
    tensor_strides(data, w->ds);
}

/* Data offset for index position i (the walk's next one) into *off, then advances; an out-of-range index is
 * an error. */
static cinfer_status elements_walk_next(const graph_node *n, elements_walk *w, int64_t i, int64_t *off) {
    int64_t v = index_at(w->idx, i);
    if (!wrap_index(&v, w->size)) return index_error(n, index_at(w->idx, i), w->axis, w->size);
    *off = w->base + v * w->ds[w->axis];
    for (int d = w->r - 1; d >= 0; d--) {
        if (d != w->axis) w->base += w->ds[d];
        if (++w->coord[d] < w->idx->dims[d]) break;
        if (d != w->axis) w->base -= w->ds[d] * w->idx->dims[d];
        w->coord[d] = 0;
    }
    return CINFER_OK;
}

static cinfer_status run_gather_elements(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    const tensor *data = &in[0], *idx = &in[1];
    size_t es = cinfer_dtype_size(data->dtype);
    int64_t count = tensor_numel(idx);
    elements_walk w;
    elements_walk_init(&w, n, data, idx);
    const char *src = data->data;
    char *dst = out[0].data;
    for (int64_t i = 0; i < count; i++) {
        int64_t off = 0;
        CINFER_TRY(elements_walk_next(n, &w, i, &off));
        copy_block(dst + (size_t)i * es, src + (size_t)off * es, es);
    }
    return CINFER_OK;
}

static cinfer_status run_gather_nd(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    const tensor *data = &in[0], *idx = &in[1];
    int r = data->ndim, q = idx->ndim, b = (int)graph_attr_int(n, "batch_dims", 0);
    int k = (int)idx->dims[q - 1];
    size_t es = cinfer_dtype_size(data->dtype);
    int64_t batches = prod(idx->dims, 0, b), per_batch = prod(idx->dims, b, q - 1);
    int64_t slice = prod(data->dims, b + k, r), data_batch = prod(data->dims, b, r);
    int64_t ds[CINFER_MAX_DIMS];
    tensor_strides(data, ds);
    size_t block = (size_t)slice * es;
    const char *src = data->data;
    char *dst = out[0].data;
    for (int64_t bi = 0; bi < batches; bi++)
        for (int64_t m = 0; m < per_batch; m++) {
            int64_t row = bi * per_batch + m, off = bi * data_batch;
            for (int j = 0; j < k; j++) {
                int64_t v = index_at(idx, row * k + j), size = data->dims[b + j];
                if (!wrap_index(&v, size)) return index_error(n, index_at(idx, row * k + j), b + j, size);
                off += v * ds[b + j];
            }
            if (block) memcpy(dst + (size_t)row * block, src + (size_t)off * es, block);
        }
    return CINFER_OK;
}

/* ---------------------------------------------------------------- scatters */

static cinfer_status check_reducible(const graph_node *n, cinfer_dtype t, movement_reduction red) {
    if (cinfer_dtype_size(t) == 0 || (red != MOVEMENT_RED_NONE && t == CINFER_DTYPE_BOOL))
        return cpu_unsupported_dtype(n, t);
    return CINFER_OK;
}

/* dst[i] = dst[i] (red) src[i] for count elements. Integer add/mul wrap (computed unsigned). */
static void reduce_into(char *dst, const char *src, int64_t count, cinfer_dtype t, movement_reduction red) {
    if (red == MOVEMENT_RED_NONE) {
        memcpy(dst, src, (size_t)count * cinfer_dtype_size(t));
        return;
    }
#define RED_INT(T, U)                                                                                 \
    for (int64_t i = 0; i < count; i++) {                                                             \
        T a, b;                                                                                       \
        memcpy(&a, dst + i * (int64_t)sizeof(T), sizeof(T));                                          \
        memcpy(&b, src + i * (int64_t)sizeof(T), sizeof(T));                                          \
        switch (red) {                                                                                \
        case MOVEMENT_RED_ADD: a = (T)((U)a + (U)b); break;                                                    \
        case MOVEMENT_RED_MUL: a = (T)((U)a * (U)b); break;                                                    \
        case MOVEMENT_RED_MAX: a = a > b ? a : b; break;                                                       \
        default: a = a < b ? a : b; break;                                                            \
        }                                                                                             \
        memcpy(dst + i * (int64_t)sizeof(T), &a, sizeof(T));                                         \
    }
#define RED_FLOAT(T, LOAD, STORE)                                                                     \
    for (int64_t i = 0; i < count; i++) {                                                             \
        T a, b;                                                                                       \
        LOAD(a, dst + i * es);                                                                        \
        LOAD(b, src + i * es);                                                                        \
        switch (red) {                                                                                \
        case MOVEMENT_RED_ADD: a = a + b; break;                                                               \
        case MOVEMENT_RED_MUL: a = a * b; break;                                                               \
        case MOVEMENT_RED_MAX: a = a > b ? a : b; break;                                                       \
        default: a = a < b ? a : b; break;                                                            \
        }                                                                                             \
        STORE(dst + i * es, a);                                                                       \
    }
#define LOAD_RAW(x, p) memcpy(&(x), (p), sizeof(x))
#define STORE_RAW(p, x) memcpy((p), &(x), sizeof(x))
#define LOAD_HALF(x, p) do { uint16_t h_; memcpy(&h_, (p), 2); (x) = dtype_half_to_float(h_); } while (0)
#define STORE_HALF(p, x) do { uint16_t h_ = dtype_float_to_half(x); memcpy((p), &h_, 2); } while (0)
#define LOAD_BF16(x, p) do { uint16_t h_; memcpy(&h_, (p), 2); (x) = dtype_bf16_to_float(h_); } while (0)
#define STORE_BF16(p, x) do { uint16_t h_ = dtype_float_to_bf16(x); memcpy((p), &h_, 2); } while (0)
    int64_t es = (int64_t)cinfer_dtype_size(t);
    switch (t) {
    case CINFER_DTYPE_FLOAT: RED_FLOAT(float, LOAD_RAW, STORE_RAW); break;
    case CINFER_DTYPE_DOUBLE: RED_FLOAT(double, LOAD_RAW, STORE_RAW); break;
    case CINFER_DTYPE_FLOAT16: RED_FLOAT(float, LOAD_HALF, STORE_HALF); break;
    case CINFER_DTYPE_BFLOAT16: RED_FLOAT(float, LOAD_BF16, STORE_BF16); break;
    case CINFER_DTYPE_INT8: RED_INT(int8_t, uint32_t); break;
    case CINFER_DTYPE_UINT8: RED_INT(uint8_t, uint32_t); break;
    case CINFER_DTYPE_INT16: RED_INT(int16_t, uint32_t); break;
    case CINFER_DTYPE_UINT16: RED_INT(uint16_t, uint32_t); break;
    case CINFER_DTYPE_INT32: RED_INT(int32_t, uint32_t); break;
    case CINFER_DTYPE_UINT32: RED_INT(uint32_t, uint32_t); break;
    case CINFER_DTYPE_INT64: RED_INT(int64_t, uint64_t); break;
    case CINFER_DTYPE_UINT64: RED_INT(uint64_t, uint64_t); break;
    default: break;
    }
#undef RED_INT
#undef RED_FLOAT
#undef LOAD_RAW
#undef STORE_RAW
#undef LOAD_HALF
#undef STORE_HALF
#undef LOAD_BF16
#undef STORE_BF16
}

static cinfer_status run_scatter_nd(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1], *upd = &in[2];
    movement_reduction red;
    CINFER_TRY(movement_read_reduction(n, &red));
    CINFER_TRY(check_reducible(n, data->dtype, red));
    int r = data->ndim, q = idx->ndim, k = (int)idx->dims[q - 1];
    size_t es = cinfer_dtype_size(data->dtype);
    copy_bytes(out[0].data, data->data, tensor_nbytes(data));
    int64_t ds[CINFER_MAX_DIMS], rows = prod(idx->dims, 0, q - 1), slice = prod(data->dims, k, r);
    tensor_strides(data, ds);
    char *dst = out[0].data;
    const char *src = upd->data;
    for (int64_t row = 0; row < rows; row++) {
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t v = index_at(idx, row * k + j);
            if (!wrap_index(&v, data->dims[j])) return index_error(n, index_at(idx, row * k + j), j, data->dims[j]);
            off += v * ds[j];
        }
        if (slice) reduce_into(dst + (size_t)off * es, src + (size_t)(row * slice) * es, slice, data->dtype, red);
    }
    return CINFER_OK;
}

static cinfer_status run_scatter_elements(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1], *upd = &in[2];
    movement_reduction red;
    CINFER_TRY(movement_read_reduction(n, &red));
    CINFER_TRY(check_reducible(n, data->dtype, red));
    size_t es = cinfer_dtype_size(data->dtype);
    copy_bytes(out[0].data, data->data, tensor_nbytes(data));
    int64_t count = tensor_numel(idx);
    elements_walk w;
    elements_walk_init(&w, n, data, idx);
    char *dst = out[0].data;
    const char *src = upd->data;
    for (int64_t i = 0; i < count; i++) {
        int64_t off = 0;
        CINFER_TRY(elements_walk_next(n, &w, i, &off));
        reduce_into(dst + (size_t)off * es, src + (size_t)i * es, 1, data->dtype, red);
    }
    return CINFER_OK;
}

static cinfer_status run_onehot(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *idx = &in[0], *values = &in[2];
    CINFER_TRY(check_copyable(n, values));
    int r = out[0].ndim;
    int64_t axis = graph_attr_int(n, "axis", -1);
    if (axis < 0) axis += r;
    int64_t depth = out[0].dims[axis];
    size_t es = cinfer_dtype_size(values->dtype);
    const char *off_value = values->data, *on_value = off_value + es;
    char *dst = out[0].data;
    fill_pattern(dst, tensor_numel(&out[0]), es, off_value);
    int64_t outer = prod(out[0].dims, 0, (int)axis), inner = prod(out[0].dims, (int)axis + 1, r);
    bool float_idx = dtype_is_float(idx->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t v;
            if (float_idx) { /* fractional indices truncate; NaN and huge values are out of range */
                double x = tensor_get_double(idx, o * inner + i);
                if (!(x > -(double)depth - 1 && x < (double)depth)) continue;
                v = (int64_t)x;
            } else {
                v = tensor_get_int(idx, o * inner + i);
            }
            if (!wrap_index(&v, depth)) continue; /* out-of-range indices give an all-off row */
            memcpy(dst + (size_t)((o * depth + v) * inner + i) * es, on_value, es);
        }
    return CINFER_OK;
}

/* ---------------------------------------------------------------- broadcasting copies, padding */

static cinfer_status run_expand(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    movement_view v;
    movement_view_expand(&in[0], &out[0], &v);
    copy_view(out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), v);
    return CINFER_OK;
}

static cinfer_status run_tile(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    movement_view v; /* output axis d of size rep*dim read as [rep, dim] */
    movement_view_tile(&in[0], &out[0], &v);
    copy_view(out[0].data, in[0].data, cinfer_dtype_size(in[0].dtype), v);
    return CINFER_OK;
}

/* Input coordinate for padded coordinate i of an axis of n elements; -1 means the constant value. */
static int64_t pad_source(int64_t i, int64_t n, movement_pad_mode mode) {
    if (i >= 0 && i < n) return i;
    if (n <= 0) return -1;
    switch (mode) {
    case MOVEMENT_PAD_EDGE: return i < 0 ? 0 : n - 1;
    case MOVEMENT_PAD_WRAP: return ((i % n) + n) % n;
    case MOVEMENT_PAD_REFLECT: {
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1), m = ((i % period) + period) % period; /* numpy-style repeated reflection */
        return m < n ? m : period - m;
    }
    default: return -1;
    }
}

static cinfer_status run_pad(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    movement_pad p;
    CINFER_TRY(movement_compute_pad(n, in, num_in, &p));
    size_t es = cinfer_dtype_size(in[0].dtype);
    unsigned char value[16] = {0};
    if (has_input(in, num_in, 2) && tensor_numel(&in[2]) == 1 && in[2].dtype == in[0].dtype) memcpy(value, in[2].data, es);
    int r = in[0].ndim;
    int64_t total = tensor_numel(&out[0]);
    if (total == 0) return CINFER_OK;
    if (r == 0) {
        memcpy(out[0].data, in[0].data, es);
        return CINFER_OK;
    }
    /* negative pads crop first (as onnxruntime does), so per axis the source is the `keep` elements from
     * `skip` on, and the output has `lead` padded elements before them */
    int64_t strides[CINFER_MAX_DIMS], skip[CINFER_MAX_DIMS], keep[CINFER_MAX_DIMS], lead[CINFER_MAX_DIMS];
    tensor_strides(&in[0], strides);
    for (int d = 0; d < r; d++) {
        skip[d] = p.begin[d] < 0 ? -p.begin[d] : 0;
        keep[d] = in[0].dims[d] - skip[d] - (p.end[d] < 0 ? -p.end[d] : 0);
        lead[d] = p.begin[d] > 0 ? p.begin[d] : 0;
    }
    int last = r - 1;
    int64_t len = out[0].dims[last], rows = total / len;
    int64_t lo = lead[last] > len ? len : lead[last];
    int64_t hi = keep[last] > 0 ? lead[last] + keep[last] : lo;
    hi = hi > len ? len : hi;
    const char *src = in[0].data;
    char *dst = out[0].data;
    bool par = (size_t)total * es >= PAR_BYTES && rows > 1;
#pragma omp parallel for num_threads(cpu_num_threads()) if (par) schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        char *drow = dst + (size_t)(row * len) * es;
        int64_t off = 0, rem = row;
        bool pad_row = false;
        for (int d = last - 1; d >= 0; d--) {
            int64_t s = pad_source(rem % out[0].dims[d] - lead[d], keep[d], p.mode);
            rem /= out[0].dims[d];
            if (s < 0) pad_row = true;
            else off += (skip[d] + s) * strides[d];
        }
        if (pad_row) {
            fill_pattern(drow, len, es, value);
            continue;
        }
        const char *srow = src + (off + skip[last]) * (int64_t)es;
        for (int64_t o = 0; o < len; o++) {
            if (o == lo && hi > lo) { /* the part inside the input is one copy */
                memcpy(drow + (size_t)lo * es, srow + (lo - lead[last]) * (int64_t)es, (size_t)(hi - lo) * es);
                o = hi - 1;
                continue;
            }
            int64_t s = pad_source(o - lead[last], keep[last], p.mode);
            copy_block(drow + (size_t)o * es, s < 0 ? (const char *)value : srow + s * (int64_t)es, es);
        }
    }
    return CINFER_OK;
}

/* ---------------------------------------------------------------- shapes and generated tensors */

static cinfer_status run_shape(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    /* only in[0]'s dims: its data may be absent (OP_FLAG_SHAPE_ONLY) */
    int64_t s, e;
    movement_shape_range(n, in[0].ndim, &s, &e);
    int64_t *dst = out[0].data;
    for (int64_t i = 0; i < out[0].dims[0]; i++) dst[i] = in[0].dims[s + i];
    return CINFER_OK;
}

static cinfer_status run_size(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)n; (void)num_in; (void)num_out;
    *(int64_t *)out[0].data = tensor_numel(&in[0]);
    return CINFER_OK;
}

static cinfer_status run_constant_of_shape(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)in; (void)num_in; (void)num_out;
    const graph_attr *a = graph_node_attr(n, "value");
    static const float zero = 0.0f;
    const void *value = a && a->type == ATTR_TENSOR ? a->t.data : &zero;
    fill_pattern(out[0].data, tensor_numel(&out[0]), cinfer_dtype_size(out[0].dtype), value);
    return CINFER_OK;
}

static cinfer_status run_constant(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)in; (void)num_in; (void)num_out;
    const graph_attr *a = &n->attrs[0];
    size_t bytes = tensor_nbytes(&out[0]);
    switch (a->type) {
    case ATTR_TENSOR: copy_bytes(out[0].data, a->t.data, bytes); break;
    case ATTR_FLOAT: memcpy(out[0].data, &a->f, sizeof(float)); break;
    case ATTR_INT: memcpy(out[0].data, &a->i, sizeof(int64_t)); break;
    case ATTR_FLOATS: copy_bytes(out[0].data, a->floats, bytes); break;
    case ATTR_INTS: copy_bytes(out[0].data, a->ints, bytes); break;
    default: return core_error(CINFER_ERR_UNSUPPORTED, "Constant node '%s': attribute %s is not supported", n->name, a->name);
    }
    return CINFER_OK;
}

static cinfer_status run_range(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)n; (void)num_in; (void)num_out;
    cinfer_dtype t = out[0].dtype;
    int64_t count = out[0].dims[0];
    size_t es = cinfer_dtype_size(t);
    char *dst = out[0].data;
    if (dtype_is_float(t)) {
        double start = tensor_get_double(&in[0], 0), delta = tensor_get_double(&in[2], 0);
        for (int64_t i = 0; i < count; i++) store_double(t, dst + (size_t)i * es, start + (double)i * delta);
    } else {
        uint64_t start = (uint64_t)tensor_get_int(&in[0], 0), delta = (uint64_t)tensor_get_int(&in[2], 0);
        for (int64_t i = 0; i < count; i++) {
            int64_t v = (int64_t)(start + (uint64_t)i * delta); /* in range by construction of count */
            if (t == CINFER_DTYPE_INT64) memcpy(dst + i * 8, &v, 8);
            else if (t == CINFER_DTYPE_INT32) { int32_t x = (int32_t)v; memcpy(dst + i * 4, &x, 4); }
            else { int16_t x = (int16_t)v; memcpy(dst + i * 2, &x, 2); }
        }
    }
    return CINFER_OK;
}

static cinfer_status run_dropout(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(check_copyable(n, &in[0]));
    if (has_input(in, num_in, 2) && *(const uint8_t *)in[2].data) {
        double ratio = has_input(in, num_in, 1) ? tensor_get_double(&in[1], 0) : 0.5;
        if (ratio != 0)
            return core_error(CINFER_ERR_UNSUPPORTED, "Dropout node '%s': training_mode with ratio %g is not supported "
                              "(inference only)", n->name, ratio);
    }
    copy_bytes(out[0].data, in[0].data, tensor_nbytes(&out[0]));
    if (num_out > 1 && out[1].data) memset(out[1].data, 1, (size_t)tensor_numel(&out[1])); /* keep everything */
    return CINFER_OK;
}

static cinfer_status run_trilu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    CINFER_TRY(check_copyable(n, &in[0]));
    int r = in[0].ndim;
    int64_t k = has_input(in, num_in, 1) ? index_at(&in[1], 0) : 0;
    bool upper = graph_attr_int(n, "upper", 1) != 0;
    size_t es = cinfer_dtype_size(in[0].dtype);
    int64_t rows = in[0].dims[r - 2], cols = in[0].dims[r - 1], mats = prod(in[0].dims, 0, r - 2);
    copy_bytes(out[0].data, in[0].data, tensor_nbytes(&out[0]));
    if (k > cols) k = cols + 1; /* keeps i + k from overflowing; the result is the same */
    if (k < -rows) k = -rows - 1;
    char *dst = out[0].data;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            char *row = dst + (size_t)((m * rows + i) * cols) * es;
            int64_t edge = i + k; /* upper keeps j >= edge, lower keeps j <= edge */
            int64_t z0 = upper ? 0 : edge + 1, z1 = upper ? edge : cols;
            z0 = z0 < 0 ? 0 : z0 > cols ? cols : z0;
            z1 = z1 < 0 ? 0 : z1 > cols ? cols : z1;
            if (z1 > z0) memset(row + (size_t)z0 * es, 0, (size_t)(z1 - z0) * es);
        }
    return CINFER_OK;
}

static cinfer_status run_eye_like(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)in; (void)num_in; (void)num_out;
    cinfer_dtype t = out[0].dtype;
    size_t es = cinfer_dtype_size(t);
    int64_t rows = out[0].dims[0], cols = out[0].dims[1], k = graph_attr_int(n, "k", 0);
    char *dst = out[0].data;
    memset(dst, 0, tensor_nbytes(&out[0]));
    unsigned char one[8];
    store_double(t, one, 1.0);
    for (int64_t i = 0; i < rows; i++) {
        if (k > cols || k < -rows) break;
        int64_t j = i + k;
        if (j >= 0 && j < cols) memcpy(dst + (size_t)(i * cols + j) * es, one, es);
    }
    return CINFER_OK;
}

/* defined in movement_select.c: the data-dependent selections */
cinfer_status cpu_run_nonzero(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_compress(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_unique(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

const cpu_kernel cpu_movement_kernels[] = {
    {"Reshape", run_copy},
    {"Flatten", run_copy},
    {"Squeeze", run_copy},
    {"Unsqueeze", run_copy},
    {"Identity", run_copy},
    {"Transpose", run_transpose},
    {"Concat", run_concat},
    {"LookupConcat", run_lookup_concat},
    {"Split", run_split},
    {"Slice", run_slice},
    {"Gather", run_gather},
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
    {"NonZero", cpu_run_nonzero},
    {"Compress", cpu_run_compress},
    {"Unique", cpu_run_unique},
    {NULL, NULL},
};
