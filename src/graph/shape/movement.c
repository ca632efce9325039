/* Op schemas of the movement family: reshapes, transposes, concat/split/slice, gathers and scatters, padding,
 * constants and other ops that move or generate data without arithmetic. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/movement_params.h"

/* ---------------------------------------------------------------- helpers */

static bool has_input(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

static bool is_index_dtype(cinfer_dtype t) { return t == CINFER_DTYPE_INT32 || t == CINFER_DTYPE_INT64; }

/* Reads the values of a 0-D/1-D int32/int64 input that decides shapes (at most `max` of them). */
static cinfer_status read_ints(const graph_node *n, const tensor *t, const char *what, int64_t *vals, int max,
                               int *count) {
    if (!is_index_dtype(t->dtype))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must be int32 or int64, got %s", n->op_type,
                          n->name, what, cinfer_dtype_name(t->dtype));
    if (t->ndim > 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must be 1-D, got rank %d", n->op_type, n->name,
                          what, t->ndim);
    int64_t num = tensor_numel(t);
    if (num > max)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': %s has %lld values, at most %d are supported",
                          n->op_type, n->name, what, (long long)num, max);
    if (num > 0 && !t->data)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the value of %s is not known while planning",
                          n->op_type, n->name, what);
    for (int64_t i = 0; i < num; i++) vals[i] = tensor_get_int(t, i);
    *count = (int)num;
    return CINFER_OK;
}

/* Reads the one value of a scalar (or 1-element) input as double, e.g. Range's start. */
static cinfer_status read_scalar(const graph_node *n, const tensor *t, const char *what, double *v) {
    if (tensor_numel(t) != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s must hold one value, got %lld", n->op_type,
                          n->name, what, (long long)tensor_numel(t));
    if (!t->data)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the value of %s is not known while planning",
                          n->op_type, n->name, what);
    *v = tensor_get_double(t, 0);
    return CINFER_OK;
}

static cinfer_status check_rank(const graph_node *n, int rank) {
    if (rank > CINFER_MAX_DIMS)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': output rank %d exceeds the supported %d", n->op_type,
                          n->name, rank, CINFER_MAX_DIMS);
    return CINFER_OK;
}

/* Output sizes come from values (Expand's shape, Tile's repeats, pads...): refuse ones whose byte count
 * overflows, so no later product wraps around to a small allocation. */
static cinfer_status check_size(const graph_node *n, const tensor *t) {
    if (!tensor_size_fits(t)) {
        char sa[200];
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': output shape %s is too large", n->op_type, n->name,
                          tensor_shape_str(t, sa, sizeof sa));
    }
    return CINFER_OK;
}

static cinfer_status check_same_dtype(const graph_node *n, const tensor *in, int a, int b) {
    if (in[a].dtype != in[b].dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': inputs %d and %d have dtypes %s and %s, they must match",
                          n->op_type, n->name, a, b, cinfer_dtype_name(in[a].dtype), cinfer_dtype_name(in[b].dtype));
    return CINFER_OK;
}

static cinfer_status check_index_input(const graph_node *n, const tensor *in, int i) {
    if (!is_index_dtype(in[i].dtype))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': indices (input %d) must be int32 or int64, got %s",
                          n->op_type, n->name, i, cinfer_dtype_name(in[i].dtype));
    return CINFER_OK;
}

/* ---------------------------------------------------------------- reshapes */

static cinfer_status infer_reshape(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int64_t shape[CINFER_MAX_DIMS];
    int count;
    CINFER_TRY(read_ints(n, &in[1], "the shape (input 1)", shape, CINFER_MAX_DIMS, &count));
    bool allowzero = graph_attr_int(n, "allowzero", 0) != 0;
    int infer_at = -1;
    int64_t known = 1;
    bool has_zero = false;
    out[0].dtype = in[0].dtype;
    out[0].ndim = count;
    for (int i = 0; i < count; i++) {
        int64_t d = shape[i];
        if (d == -1) {
            if (infer_at >= 0)
                return core_error(CINFER_ERR_INVALID_MODEL, "Reshape node '%s': the shape has more than one -1", n->name);
            infer_at = i;
            continue;
        }
        if (d < -1)
            return core_error(CINFER_ERR_INVALID_MODEL, "Reshape node '%s': shape value %lld at index %d is invalid",
                              n->name, (long long)d, i);
        if (d == 0 && !allowzero) {
            if (i >= in[0].ndim)
                return core_error(CINFER_ERR_INVALID_MODEL,
                                  "Reshape node '%s': shape index %d is 0 (copy the input dim) but the input has rank %d",
                                  n->name, i, in[0].ndim);
            d = in[0].dims[i];
        }
        if (d == 0) has_zero = true;
        out[0].dims[i] = d;
        if (d > 0 && known > INT64_MAX / 16 / d)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Reshape node '%s': shape value %lld at index %d is too large",
                              n->name, (long long)d, i);
        known *= d;
    }
    int64_t total = tensor_numel(&in[0]);
    char sa[160], sb[160];
    if (infer_at >= 0) {
        if (has_zero && allowzero)
            return core_error(CINFER_ERR_INVALID_MODEL, "Reshape node '%s': with allowzero=1 the shape may not hold both 0 and -1",
                              n->name);
        if (known == 0 || total % known != 0) {
            out[0].dims[infer_at] = 1;
            return core_error(CINFER_ERR_INVALID_ARGUMENT,
                              "Reshape node '%s': cannot reshape %s (%lld elements) to %s with -1 at index %d", n->name,
                              tensor_shape_str(&in[0], sa, sizeof sa), (long long)total,
                              tensor_shape_str(&out[0], sb, sizeof sb), infer_at);
        }
        out[0].dims[infer_at] = total / known;
    } else if (known != total) {
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Reshape node '%s': cannot reshape %s (%lld elements) to %s (%lld elements)",
                          n->name, tensor_shape_str(&in[0], sa, sizeof sa), (long long)total,
                          tensor_shape_str(&out[0], sb, sizeof sb), (long long)known);
    }
    return CINFER_OK;
}

static cinfer_status infer_flatten(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int r = in[0].ndim;
    int64_t axis = graph_attr_int(n, "axis", 1);
    if (axis < -r || axis > r)
        return core_error(CINFER_ERR_INVALID_MODEL, "Flatten node '%s': axis %lld is out of range [%d, %d] for rank %d",
                          n->name, (long long)axis, -r, r, r);
    if (axis < 0) axis += r;
    int64_t a = 1, b = 1;
    for (int d = 0; d < r; d++) {
        if (d < axis) a *= in[0].dims[d];
        else b *= in[0].dims[d];
    }
    out[0].dtype = in[0].dtype;
    out[0].ndim = 2;
    out[0].dims[0] = a;
    out[0].dims[1] = b;
    return CINFER_OK;
}

/* Squeeze's axes (input 1, optional): normalised into a bitmask of removed dims. */
static cinfer_status infer_squeeze(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    int r = in[0].ndim;
    unsigned remove = 0;
    int64_t axes[CINFER_MAX_DIMS];
    int count = 0;
    if (has_input(in, num_in, 1)) CINFER_TRY(read_ints(n, &in[1], "axes (input 1)", axes, CINFER_MAX_DIMS, &count));
    if (count == 0) {
        for (int d = 0; d < r; d++)
            if (in[0].dims[d] == 1) remove |= 1u << d;
    } else {
        for (int i = 0; i < count; i++) {
            if (axes[i] < -r || axes[i] >= r)
                return core_error(CINFER_ERR_INVALID_MODEL, "Squeeze node '%s': axis %lld is out of range for rank %d",
                                  n->name, (long long)axes[i], r);
            int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
            if (in[0].dims[a] != 1)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "Squeeze node '%s': dim %d has size %lld, expected 1",
                                  n->name, a, (long long)in[0].dims[a]);
            remove |= 1u << a;
        }
    }
    out[0].dtype = in[0].dtype;
    out[0].ndim = 0;
    for (int d = 0; d < r; d++)
        if (!(remove & (1u << d))) out[0].dims[out[0].ndim++] = in[0].dims[d];
    return CINFER_OK;
}

static cinfer_status infer_unsqueeze(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int64_t axes[CINFER_MAX_DIMS];
    int count;
    CINFER_TRY(read_ints(n, &in[1], "axes (input 1)", axes, CINFER_MAX_DIMS, &count));
    int r = in[0].ndim + count;
    CINFER_TRY(check_rank(n, r));
    unsigned inserted = 0;
    for (int i = 0; i < count; i++) {
        if (axes[i] < -r || axes[i] >= r)
            return core_error(CINFER_ERR_INVALID_MODEL, "Unsqueeze node '%s': axis %lld is out of range for output rank %d",
                              n->name, (long long)axes[i], r);
        int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
        if (inserted & (1u << a))
            return core_error(CINFER_ERR_INVALID_MODEL, "Unsqueeze node '%s': axis %d is given twice", n->name, a);
        inserted |= 1u << a;
    }
    out[0].dtype = in[0].dtype;
    out[0].ndim = r;
    for (int d = 0, k = 0; d < r; d++) out[0].dims[d] = (inserted & (1u << d)) ? 1 : in[0].dims[k++];
    return CINFER_OK;
}

cinfer_status movement_compute_transpose(const graph_node *n, const tensor *x, int perm[CINFER_MAX_DIMS]) {
    int r = x->ndim;
    size_t count;
    const int64_t *p = graph_attr_ints(n, "perm", &count);
    if (!p) {
        for (int d = 0; d < r; d++) perm[d] = r - 1 - d;
        return CINFER_OK;
    }
    if ((int)count != r)
        return core_error(CINFER_ERR_INVALID_MODEL, "Transpose node '%s': perm has %zu entries, the input has rank %d",
                          n->name, count, r);
    unsigned seen = 0;
    for (int d = 0; d < r; d++) {
        if (p[d] < 0 || p[d] >= r || (seen & (1u << p[d])))
            return core_error(CINFER_ERR_INVALID_MODEL, "Transpose node '%s': perm is not a permutation of 0..%d",
                              n->name, r - 1);
        seen |= 1u << p[d];
        perm[d] = (int)p[d];
    }
    return CINFER_OK;
}

void movement_view_permute(int ndim, const int64_t *dims, const int *perm, movement_view *v) {
    int64_t strides[MOVEMENT_VIEW_DIMS], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        v->dims[d] = dims[perm[d]];
        v->stride[d] = strides[perm[d]];
    }
}

bool movement_view_slice(const movement_slice *p, const tensor *x, movement_view *v, int64_t *base) {
    int64_t strides[CINFER_MAX_DIMS];
    tensor_strides(x, strides);
    for (int d = 0; d < p->ndim; d++)
        if (p->count[d] == 0) return false;
    v->ndim = p->ndim;
    *base = 0;
    for (int d = 0; d < p->ndim; d++) {
        v->dims[d] = p->count[d];
        /* a huge step over one element never multiplies */
        v->stride[d] = p->count[d] > 1 ? strides[d] * p->step[d] : 0;
        *base += p->start[d] * strides[d];
    }
    return true;
}

void movement_view_expand(const tensor *x, const tensor *y, movement_view *v) {
    int R = y->ndim, r = x->ndim;
    int64_t strides[CINFER_MAX_DIMS];
    tensor_strides(x, strides);
    v->ndim = R;
    for (int d = 0; d < R; d++) {
        int id = d - (R - r);
        v->dims[d] = y->dims[d];
        v->stride[d] = id >= 0 && x->dims[id] != 1 ? strides[id] : 0;
    }
}

void movement_view_tile(const tensor *x, const tensor *y, movement_view *v) {
    int r = x->ndim;
    int64_t strides[CINFER_MAX_DIMS];
    tensor_strides(x, strides);
    v->ndim = 2 * r;
    for (int d = 0; d < r; d++) {
        v->dims[2 * d] = y->dims[d] / x->dims[d];
        v->stride[2 * d] = 0;
        v->dims[2 * d + 1] = x->dims[d];
        v->stride[2 * d + 1] = strides[d];
    }
}

static cinfer_status infer_transpose(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int perm[CINFER_MAX_DIMS];
    CINFER_TRY(movement_compute_transpose(n, &in[0], perm));
    out[0].dtype = in[0].dtype;
    out[0].ndim = in[0].ndim;
    for (int d = 0; d < in[0].ndim; d++) out[0].dims[d] = in[0].dims[perm[d]];
    return CINFER_OK;
}

/* ---------------------------------------------------------------- concat, split, slice */

static cinfer_status infer_concat(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    if (num_in < 1) return core_error(CINFER_ERR_INVALID_MODEL, "Concat node '%s': has no inputs", n->name);
    int r = in[0].ndim;
    if (r == 0) return core_error(CINFER_ERR_INVALID_MODEL, "Concat node '%s': inputs must have rank >= 1", n->name);
    int axis;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), r, &axis));
    shape_copy(&out[0], &in[0]);
    char sa[160], sb[160];
    for (int i = 1; i < num_in; i++) {
        CINFER_TRY(check_same_dtype(n, in, 0, i));
        if (in[i].ndim != r)
            return core_error(CINFER_ERR_INVALID_MODEL, "Concat node '%s': input %d has rank %d, input 0 has rank %d",
                              n->name, i, in[i].ndim, r);
        for (int d = 0; d < r; d++)
            if (d != axis && in[i].dims[d] != in[0].dims[d])
                return core_error(CINFER_ERR_INVALID_ARGUMENT,
                                  "Concat node '%s': input %d has shape %s, input 0 has %s; only axis %d may differ",
                                  n->name, i, tensor_shape_str(&in[i], sa, sizeof sa), tensor_shape_str(&in[0], sb, sizeof sb),
                                  axis);
        out[0].dims[axis] += in[i].dims[axis];
    }
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

/* LookupConcat (movement_params.h): each piece's shape (a lookup's is Gather's, then the optional Unsqueeze),
 * then Concat's rules over them. *pieces gets the piece shapes (room for num_in). */
static cinfer_status lookup_piece_shapes(const graph_node *n, const tensor *in, int num_in, tensor *pieces,
                                         int *count) {
    size_t ncodes = 0;
    const int64_t *codes = graph_attr_ints(n, "cinfer_pieces", &ncodes);
    int k = 0, i = 0;
    for (size_t c = 0; codes && c < ncodes; c++) {
        if (codes[c] == LOOKUP_PLAIN) {
            if (i >= num_in) break;
            pieces[k++] = in[i++];
            continue;
        }
        if (i + 1 >= num_in || codes[c] < LOOKUP_NO_UNSQUEEZE) break;
        const tensor *table = &in[i], *idx = &in[i + 1];
        i += 2;
        if (table->ndim < 1 || !is_index_dtype(idx->dtype))
            return core_error(CINFER_ERR_INVALID_MODEL, "LookupConcat node '%s': piece %d needs a table of rank >= 1 and "
                              "int32/int64 indices", n->name, k);
        tensor *t = &pieces[k++];
        memset(t, 0, sizeof *t);
        t->dtype = table->dtype;
        int r = idx->ndim + table->ndim - 1 + (codes[c] >= 0);
        if (r > CINFER_MAX_DIMS || codes[c] > idx->ndim + table->ndim - 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "LookupConcat node '%s': piece %d has a bad rank", n->name, k - 1);
        int64_t dims[CINFER_MAX_DIMS];
        int q = 0;
        for (int d = 0; d < idx->ndim; d++) dims[q++] = idx->dims[d];
        for (int d = 1; d < table->ndim; d++) dims[q++] = table->dims[d];
        for (int d = 0, src = 0; d < r; d++) t->dims[d] = d == codes[c] ? 1 : dims[src++];
        t->ndim = r;
    }
    if (!codes || k == 0 || i != num_in || (size_t)k != ncodes)
        return core_error(CINFER_ERR_INVALID_MODEL, "LookupConcat node '%s': its pieces do not match its %d inputs",
                          n->name, num_in);
    *count = k;
    return CINFER_OK;
}

static cinfer_status infer_lookup_concat(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    tensor pieces[GRAPH_MAX_NODE_IO];
    int count = 0;
    CINFER_TRY(lookup_piece_shapes(n, in, num_in, pieces, &count));
    return infer_concat(n, pieces, count, out, num_out);
}

cinfer_status movement_lookup_parts(const graph_node *n, const tensor *in, int num_in, const tensor *y,
                                    lookup_part *parts, int *count, int64_t *outer, int64_t *width) {
    tensor pieces[GRAPH_MAX_NODE_IO];
    CINFER_TRY(lookup_piece_shapes(n, in, num_in, pieces, count));
    int axis;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), y->ndim, &axis));
    int64_t o = 1, col = 0;
    for (int d = 0; d < axis; d++) o *= y->dims[d];
    size_t ncodes = 0;
    const int64_t *codes = graph_attr_ints(n, "cinfer_pieces", &ncodes);
    for (int k = 0, i = 0; k < *count; k++) {
        lookup_part *p = &parts[k];
        p->input = i;
        p->lookup = codes[k] != LOOKUP_PLAIN;
        p->inner = 1;
        for (int d = axis; d < pieces[k].ndim; d++) p->inner *= pieces[k].dims[d];
        p->col0 = col;
        col += p->inner;
        p->row = p->rows = 0;
        if (p->lookup) {
            const tensor *table = &in[i];
            p->rows = table->dims[0];
            p->row = 1;
            for (int d = 1; d < table->ndim; d++) p->row *= table->dims[d];
            if (p->row > 0 && p->inner % p->row != 0)
                return core_error(CINFER_ERR_INVALID_MODEL, "LookupConcat node '%s': piece %d splits table rows", n->name, k);
        }
        i += p->lookup ? 2 : 1;
    }
    *outer = o;
    *width = col;
    return CINFER_OK;
}

static cinfer_status infer_split(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    int r = in[0].ndim;
    int axis;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), r, &axis));
    if (r == 0) return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': the input must have rank >= 1", n->name);
    int64_t dim = in[0].dims[axis];
    for (int k = 0; k < num_out; k++) shape_copy(&out[k], &in[0]);
    if (has_input(in, num_in, 1) && tensor_numel(&in[1]) > 0) { /* an empty split counts as none */
        const tensor *s = &in[1];
        if (!is_index_dtype(s->dtype) || s->ndim > 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': split (input 1) must be a 1-D int64 tensor", n->name);
        if (tensor_numel(s) != num_out)
            return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': split has %lld values for %d outputs", n->name,
                              (long long)tensor_numel(s), num_out);
        if (num_out > 0 && !s->data)
            return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': the value of split is not known while planning",
                              n->name);
        int64_t sum = 0;
        for (int k = 0; k < num_out; k++) {
            int64_t v = tensor_get_int(s, k);
            if (v < 0 || v > dim)
                return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': split value %lld is out of range for dim %lld",
                                  n->name, (long long)v, (long long)dim);
            out[k].dims[axis] = v;
            sum += v;
        }
        if (sum != dim)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Split node '%s': split values sum to %lld, axis %d has size %lld",
                              n->name, (long long)sum, axis, (long long)dim);
        return CINFER_OK;
    }
    int64_t parts = num_out;
    if (n->opset >= 18 && graph_node_attr(n, "num_outputs")) {
        parts = graph_attr_int(n, "num_outputs", num_out);
        if (parts != num_out)
            return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': num_outputs is %lld but the node has %d outputs",
                              n->name, (long long)parts, num_out);
    }
    if (parts < 1) return core_error(CINFER_ERR_INVALID_MODEL, "Split node '%s': has no outputs", n->name);
    if (dim % parts == 0) {
        for (int k = 0; k < num_out; k++) out[k].dims[axis] = dim / parts;
        return CINFER_OK;
    }
    if (n->opset < 18)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Split node '%s': axis %d of size %lld does not split into %lld equal parts",
                          n->name, axis, (long long)dim, (long long)parts);
    /* opset 18: every part has ceil(dim / parts), the last one what is left */
    int64_t each = (dim + parts - 1) / parts, last = dim - each * (parts - 1);
    if (last < 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Split node '%s': axis %d of size %lld cannot be split into %lld parts",
                          n->name, axis, (long long)dim, (long long)parts);
    for (int k = 0; k < num_out; k++) out[k].dims[axis] = k == num_out - 1 ? last : each;
    return CINFER_OK;
}

cinfer_status movement_compute_slice(const graph_node *n, const tensor *in, int num_in, movement_slice *p) {
    int r = in[0].ndim;
    int64_t starts[CINFER_MAX_DIMS], ends[CINFER_MAX_DIMS], axes[CINFER_MAX_DIMS], steps[CINFER_MAX_DIMS];
    int ns, ne, na, nst;
    CINFER_TRY(read_ints(n, &in[1], "starts (input 1)", starts, CINFER_MAX_DIMS, &ns));
    CINFER_TRY(read_ints(n, &in[2], "ends (input 2)", ends, CINFER_MAX_DIMS, &ne));
    if (ns != ne)
        return core_error(CINFER_ERR_INVALID_MODEL, "Slice node '%s': starts has %d values, ends has %d", n->name, ns, ne);
    if (has_input(in, num_in, 3)) {
        CINFER_TRY(read_ints(n, &in[3], "axes (input 3)", axes, CINFER_MAX_DIMS, &na));
        if (na != ns)
            return core_error(CINFER_ERR_INVALID_MODEL, "Slice node '%s': axes has %d values, starts has %d", n->name, na, ns);
    } else {
        for (int i = 0; i < ns; i++) axes[i] = i;
    }
    if (has_input(in, num_in, 4)) {
        CINFER_TRY(read_ints(n, &in[4], "steps (input 4)", steps, CINFER_MAX_DIMS, &nst));
        if (nst != ns)
            return core_error(CINFER_ERR_INVALID_MODEL, "Slice node '%s': steps has %d values, starts has %d", n->name, nst, ns);
    } else {
        for (int i = 0; i < ns; i++) steps[i] = 1;
    }
    p->ndim = r;
    for (int d = 0; d < r; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = in[0].dims[d];
    }
    unsigned seen = 0;
    for (int i = 0; i < ns; i++) {
        if (axes[i] < -r || axes[i] >= r)
            return core_error(CINFER_ERR_INVALID_MODEL, "Slice node '%s': axis %lld is out of range for rank %d", n->name,
                              (long long)axes[i], r);
        int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
        if (seen & (1u << a))
            return core_error(CINFER_ERR_INVALID_MODEL, "Slice node '%s': axis %d is given twice", n->name, a);
        seen |= 1u << a;
        int64_t step = steps[i], dim = in[0].dims[a], s = starts[i], e = ends[i];
        if (step == 0) return core_error(CINFER_ERR_INVALID_MODEL, "Slice node '%s': step for axis %d is 0", n->name, a);
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        int64_t count;
        if (step > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            count = e > s ? (e - s - 1) / step + 1 : 0;
        } else {
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            int64_t neg = step == INT64_MIN ? INT64_MAX : -step;
            count = s > e ? (s - e - 1) / neg + 1 : 0;
        }
        p->start[a] = count > 0 ? s : 0;
        p->step[a] = step;
        p->count[a] = count;
    }
    return CINFER_OK;
}

static cinfer_status infer_slice(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    movement_slice p;
    CINFER_TRY(movement_compute_slice(n, in, num_in, &p));
    out[0].dtype = in[0].dtype;
    out[0].ndim = p.ndim;
    for (int d = 0; d < p.ndim; d++) out[0].dims[d] = p.count[d];
    return CINFER_OK;
}

/* ---------------------------------------------------------------- gathers and scatters */

static cinfer_status infer_gather(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int r = in[0].ndim, q = in[1].ndim;
    if (r < 1) return core_error(CINFER_ERR_INVALID_MODEL, "Gather node '%s': data must have rank >= 1", n->name);
    CINFER_TRY(check_index_input(n, in, 1));
    int axis;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), r, &axis));
    CINFER_TRY(check_rank(n, r - 1 + q));
    out[0].dtype = in[0].dtype;
    out[0].ndim = r - 1 + q;
    int k = 0;
    for (int d = 0; d < axis; d++) out[0].dims[k++] = in[0].dims[d];
    for (int d = 0; d < q; d++) out[0].dims[k++] = in[1].dims[d];
    for (int d = axis + 1; d < r; d++) out[0].dims[k++] = in[0].dims[d];
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

/* GatherElements and ScatterElements: indices has data's rank and fits inside it except along axis. */
static cinfer_status check_elements_indices(const graph_node *n, const tensor *data, const tensor *idx, int *axis) {
    int r = data->ndim;
    char sa[160], sb[160];
    if (r < 1) return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': data must have rank >= 1", n->op_type, n->name);
    if (!is_index_dtype(idx->dtype))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': indices must be int32 or int64, got %s", n->op_type,
                          n->name, cinfer_dtype_name(idx->dtype));
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), r, axis));
    if (idx->ndim != r)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': indices have rank %d, data has rank %d", n->op_type,
                          n->name, idx->ndim, r);
    for (int d = 0; d < r; d++)
        if (d != *axis && idx->dims[d] > data->dims[d])
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': indices shape %s does not fit data shape %s at dim %d",
                              n->op_type, n->name, tensor_shape_str(idx, sa, sizeof sa), tensor_shape_str(data, sb, sizeof sb), d);
    return CINFER_OK;
}

static cinfer_status infer_gather_elements(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int axis;
    CINFER_TRY(check_elements_indices(n, &in[0], &in[1], &axis));
    shape_copy(&out[0], &in[1]);
    out[0].dtype = in[0].dtype;
    return CINFER_OK;
}

static cinfer_status infer_gather_nd(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1];
    int r = data->ndim, q = idx->ndim;
    CINFER_TRY(check_index_input(n, in, 1));
    int64_t b = graph_attr_int(n, "batch_dims", 0);
    if (r < 1 || q < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "GatherND node '%s': data and indices must have rank >= 1", n->name);
    if (b < 0 || b >= q || b >= r)
        return core_error(CINFER_ERR_INVALID_MODEL, "GatherND node '%s': batch_dims %lld must be below both ranks (%d, %d)",
                          n->name, (long long)b, r, q);
    int64_t k = idx->dims[q - 1];
    if (k < 1 || k > r - b)
        return core_error(CINFER_ERR_INVALID_MODEL, "GatherND node '%s': the last indices dim is %lld, expected 1 to %lld",
                          n->name, (long long)k, (long long)(r - b));
    for (int d = 0; d < b; d++)
        if (idx->dims[d] != data->dims[d])
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "GatherND node '%s': batch dim %d is %lld in indices, %lld in data",
                              n->name, d, (long long)idx->dims[d], (long long)data->dims[d]);
    int rank = q - 1 + r - (int)(b + k);
    CINFER_TRY(check_rank(n, rank));
    out[0].dtype = data->dtype;
    out[0].ndim = rank;
    int j = 0;
    for (int d = 0; d < q - 1; d++) out[0].dims[j++] = idx->dims[d];
    for (int d = (int)(b + k); d < r; d++) out[0].dims[j++] = data->dims[d];
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

cinfer_status movement_read_reduction(const graph_node *n, movement_reduction *r) {
    static const char *const names[] = {"none", "add", "mul", "max", "min"}; /* movement_reduction's order */
    const char *red = graph_attr_string(n, "reduction", "none");
    for (int k = 0; k < 5; k++)
        if (strcmp(red, names[k]) == 0) {
            *r = (movement_reduction)k;
            return CINFER_OK;
        }
    return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': reduction '%s' is not one of none/add/mul/max/min",
                      n->op_type, n->name, red);
}

static cinfer_status check_reduction(const graph_node *n) {
    movement_reduction r;
    return movement_read_reduction(n, &r);
}

static cinfer_status infer_scatter_nd(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *data = &in[0], *idx = &in[1], *upd = &in[2];
    int r = data->ndim, q = idx->ndim;
    char sa[160], sb[160];
    CINFER_TRY(check_index_input(n, in, 1));
    CINFER_TRY(check_same_dtype(n, in, 0, 2));
    CINFER_TRY(check_reduction(n));
    if (r < 1 || q < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "ScatterND node '%s': data and indices must have rank >= 1", n->name);
    int64_t k = idx->dims[q - 1];
    if (k < 1 || k > r)
        return core_error(CINFER_ERR_INVALID_MODEL, "ScatterND node '%s': the last indices dim is %lld, expected 1 to %d",
                          n->name, (long long)k, r);
    /* updates: indices.shape[:-1] + data.shape[k:] */
    tensor want = {.ndim = q - 1 + r - (int)k};
    CINFER_TRY(check_rank(n, want.ndim));
    int j = 0;
    for (int d = 0; d < q - 1; d++) want.dims[j++] = idx->dims[d];
    for (int d = (int)k; d < r; d++) want.dims[j++] = data->dims[d];
    if (!tensor_same_shape(&want, upd))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "ScatterND node '%s': updates have shape %s, expected %s", n->name,
                          tensor_shape_str(upd, sa, sizeof sa), tensor_shape_str(&want, sb, sizeof sb));
    shape_copy(&out[0], data);
    return CINFER_OK;
}

static cinfer_status infer_scatter_elements(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    char sa[160], sb[160];
    int axis;
    CINFER_TRY(check_same_dtype(n, in, 0, 2));
    CINFER_TRY(check_reduction(n));
    CINFER_TRY(check_elements_indices(n, &in[0], &in[1], &axis));
    if (!tensor_same_shape(&in[1], &in[2]))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "ScatterElements node '%s': updates have shape %s, indices %s; they must match",
                          n->name, tensor_shape_str(&in[2], sa, sizeof sa), tensor_shape_str(&in[1], sb, sizeof sb));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

static cinfer_status infer_onehot(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int r = in[0].ndim + 1;
    CINFER_TRY(check_rank(n, r));
    double depth = 0;
    CINFER_TRY(read_scalar(n, &in[1], "depth (input 1)", &depth));
    if (!(depth >= 1 && depth < 9e18))
        return core_error(CINFER_ERR_INVALID_MODEL, "OneHot node '%s': depth %g must be a positive count", n->name, depth);
    if (tensor_numel(&in[2]) != 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "OneHot node '%s': values must hold 2 elements (off, on), got %lld",
                          n->name, (long long)tensor_numel(&in[2]));
    if (!dtype_is_integer(in[0].dtype) && !dtype_is_float(in[0].dtype))
        return core_error(CINFER_ERR_INVALID_MODEL, "OneHot node '%s': indices must be numeric, got %s", n->name,
                          cinfer_dtype_name(in[0].dtype));
    int64_t axis = graph_attr_int(n, "axis", -1);
    if (axis < -r || axis >= r)
        return core_error(CINFER_ERR_INVALID_MODEL, "OneHot node '%s': axis %lld is out of range for output rank %d", n->name,
                          (long long)axis, r);
    if (axis < 0) axis += r;
    out[0].dtype = in[2].dtype;
    out[0].ndim = r;
    for (int d = 0, k = 0; d < r; d++) out[0].dims[d] = d == axis ? (int64_t)depth : in[0].dims[k++];
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

/* ---------------------------------------------------------------- broadcasting copies, padding */

static cinfer_status infer_expand(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    tensor shape = {.dtype = in[0].dtype};
    int count;
    CINFER_TRY(read_ints(n, &in[1], "shape (input 1)", shape.dims, CINFER_MAX_DIMS, &count));
    shape.ndim = count;
    for (int d = 0; d < count; d++)
        if (shape.dims[d] < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Expand node '%s': shape value %lld is negative", n->name,
                              (long long)shape.dims[d]);
    CINFER_TRY(shape_broadcast(n, &in[0], &shape, &out[0]));
    out[0].dtype = in[0].dtype;
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

static cinfer_status infer_tile(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int64_t reps[CINFER_MAX_DIMS];
    int count;
    CINFER_TRY(read_ints(n, &in[1], "repeats (input 1)", reps, CINFER_MAX_DIMS, &count));
    if (count != in[0].ndim)
        return core_error(CINFER_ERR_INVALID_MODEL, "Tile node '%s': repeats has %d values, the input has rank %d", n->name,
                          count, in[0].ndim);
    shape_copy(&out[0], &in[0]);
    for (int d = 0; d < count; d++) {
        if (reps[d] < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Tile node '%s': repeat %lld for axis %d is negative", n->name,
                              (long long)reps[d], d);
        out[0].dims[d] *= reps[d];
    }
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

cinfer_status movement_compute_pad(const graph_node *n, const tensor *in, int num_in, movement_pad *p) {
    int r = in[0].ndim;
    const char *mode = graph_attr_string(n, "mode", "constant");
    if (strcmp(mode, "constant") == 0) p->mode = MOVEMENT_PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0) p->mode = MOVEMENT_PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0) p->mode = MOVEMENT_PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0 && n->opset >= 19) p->mode = MOVEMENT_PAD_WRAP;
    else
        return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': mode '%s' is not one of constant/reflect/edge%s", n->name,
                          mode, n->opset >= 19 ? "/wrap" : " (wrap needs opset 19)");
    if (has_input(in, num_in, 3) && n->opset < 18)
        return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': the axes input needs opset 18, the model has %lld",
                          n->name, (long long)n->opset);
    int64_t axes[CINFER_MAX_DIMS], pads[2 * CINFER_MAX_DIMS];
    int na = r, np;
    if (has_input(in, num_in, 3)) {
        CINFER_TRY(read_ints(n, &in[3], "axes (input 3)", axes, CINFER_MAX_DIMS, &na));
    } else {
        for (int d = 0; d < r; d++) axes[d] = d;
    }
    CINFER_TRY(read_ints(n, &in[1], "pads (input 1)", pads, 2 * CINFER_MAX_DIMS, &np));
    if (np != 2 * na)
        return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': pads has %d values, expected %d (2 per axis)", n->name,
                          np, 2 * na);
    p->ndim = r;
    for (int d = 0; d < r; d++) p->begin[d] = p->end[d] = 0;
    unsigned seen = 0;
    for (int i = 0; i < na; i++) {
        if (axes[i] < -r || axes[i] >= r)
            return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': axis %lld is out of range for rank %d", n->name,
                              (long long)axes[i], r);
        int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
        if (seen & (1u << a)) return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': axis %d is given twice", n->name, a);
        seen |= 1u << a;
        p->begin[a] = pads[i];
        p->end[a] = pads[na + i];
        const int64_t big = (int64_t)1 << 60; /* keeps dim + begin + end from overflowing */
        if (pads[i] < -big || pads[i] > big || pads[na + i] < -big || pads[na + i] > big)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Pad node '%s': pads %lld and %lld for axis %d are too large",
                              n->name, (long long)pads[i], (long long)pads[na + i], a);
    }
    for (int d = 0; d < r; d++) {
        int64_t dim = in[0].dims[d];
        if (dim + p->begin[d] + p->end[d] < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': pads %lld and %lld crop more than axis %d's %lld elements",
                              n->name, (long long)p->begin[d], (long long)p->end[d], d, (long long)dim);
        /* negative pads crop first; the other modes then pad from what is left */
        int64_t left = dim + (p->begin[d] < 0 ? p->begin[d] : 0) + (p->end[d] < 0 ? p->end[d] : 0);
        if (p->mode != MOVEMENT_PAD_CONSTANT && left <= 0 && (p->begin[d] > 0 || p->end[d] > 0))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Pad node '%s': mode '%s' cannot pad axis %d, which has no "
                              "elements (after cropping)", n->name, mode, d);
    }
    return CINFER_OK;
}

static cinfer_status infer_pad(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    movement_pad p;
    CINFER_TRY(movement_compute_pad(n, in, num_in, &p));
    if (has_input(in, num_in, 2)) {
        if (tensor_numel(&in[2]) > 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "Pad node '%s': constant_value must be a scalar, got %lld values",
                              n->name, (long long)tensor_numel(&in[2]));
        if (tensor_numel(&in[2]) == 1) CINFER_TRY(check_same_dtype(n, in, 0, 2));
    }
    shape_copy(&out[0], &in[0]);
    for (int d = 0; d < p.ndim; d++) out[0].dims[d] += p.begin[d] + p.end[d];
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

/* ---------------------------------------------------------------- shapes and generated tensors */

void movement_shape_range(const graph_node *n, int r, int64_t *start, int64_t *end) {
    int64_t s = graph_attr_int(n, "start", 0), e = graph_attr_int(n, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    *start = s < 0 ? 0 : s > r ? r : s;
    *end = e < 0 ? 0 : e > r ? r : e;
}

static cinfer_status infer_shape(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int64_t s, e;
    movement_shape_range(n, in[0].ndim, &s, &e);
    out[0].dtype = CINFER_DTYPE_INT64;
    out[0].ndim = 1;
    out[0].dims[0] = e > s ? e - s : 0;
    return CINFER_OK;
}

static cinfer_status infer_size(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)n; (void)in; (void)num_in; (void)num_out;
    out[0].dtype = CINFER_DTYPE_INT64;
    out[0].ndim = 0;
    return CINFER_OK;
}

static cinfer_status infer_constant_of_shape(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int count;
    CINFER_TRY(read_ints(n, &in[0], "the shape (input 0)", out[0].dims, CINFER_MAX_DIMS, &count));
    out[0].ndim = count;
    for (int d = 0; d < count; d++)
        if (out[0].dims[d] < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "ConstantOfShape node '%s': shape value %lld is negative", n->name,
                              (long long)out[0].dims[d]);
    out[0].dtype = CINFER_DTYPE_FLOAT;
    const graph_attr *v = graph_node_attr(n, "value");
    if (v) {
        if (v->type != ATTR_TENSOR || tensor_numel(&v->t) != 1)
            return core_error(CINFER_ERR_INVALID_MODEL, "ConstantOfShape node '%s': value must be a one-element tensor", n->name);
        if (cinfer_dtype_size(v->t.dtype) == 0)
            return core_error(CINFER_ERR_UNSUPPORTED, "ConstantOfShape node '%s': value dtype %s is not supported", n->name,
                              cinfer_dtype_name(v->t.dtype));
        out[0].dtype = v->t.dtype;
    }
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

/* Constant: exactly one value attribute gives the output. */
static cinfer_status infer_constant(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)in; (void)num_in; (void)num_out;
    if (n->num_attrs != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "Constant node '%s': needs exactly one value attribute, has %d", n->name,
                          n->num_attrs);
    const graph_attr *a = &n->attrs[0];
    if (strcmp(a->name, "value") == 0 && a->type == ATTR_TENSOR) {
        if (cinfer_dtype_size(a->t.dtype) == 0)
            return core_error(CINFER_ERR_UNSUPPORTED, "Constant node '%s': value dtype %s is not supported", n->name,
                              cinfer_dtype_name(a->t.dtype));
        shape_copy(&out[0], &a->t);
    } else if (strcmp(a->name, "value_float") == 0 && a->type == ATTR_FLOAT) {
        out[0].dtype = CINFER_DTYPE_FLOAT;
        out[0].ndim = 0;
    } else if (strcmp(a->name, "value_int") == 0 && a->type == ATTR_INT) {
        out[0].dtype = CINFER_DTYPE_INT64;
        out[0].ndim = 0;
    } else if (strcmp(a->name, "value_floats") == 0 && a->type == ATTR_FLOATS) {
        out[0].dtype = CINFER_DTYPE_FLOAT;
        out[0].ndim = 1;
        out[0].dims[0] = (int64_t)a->n;
    } else if (strcmp(a->name, "value_ints") == 0 && a->type == ATTR_INTS) {
        out[0].dtype = CINFER_DTYPE_INT64;
        out[0].ndim = 1;
        out[0].dims[0] = (int64_t)a->n;
    } else if (strcmp(a->name, "value_string") == 0 || strcmp(a->name, "value_strings") == 0 ||
               strcmp(a->name, "sparse_value") == 0) {
        return core_error(CINFER_ERR_UNSUPPORTED, "Constant node '%s': attribute %s is not supported (strings and sparse "
                          "tensors)", n->name, a->name);
    } else {
        return core_error(CINFER_ERR_INVALID_MODEL, "Constant node '%s': attribute '%s' is not a valid value attribute",
                          n->name, a->name);
    }
    return CINFER_OK;
}

static cinfer_status infer_range(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(check_same_dtype(n, in, 0, 1));
    CINFER_TRY(check_same_dtype(n, in, 0, 2));
    cinfer_dtype t = in[0].dtype;
    if (!dtype_is_float(t) && t != CINFER_DTYPE_INT16 && t != CINFER_DTYPE_INT32 && t != CINFER_DTYPE_INT64)
        return core_error(CINFER_ERR_UNSUPPORTED, "Range node '%s': dtype %s is not supported", n->name, cinfer_dtype_name(t));
    int64_t count;
    if (dtype_is_float(t)) {
        double start = 0, limit = 0, delta = 0;
        CINFER_TRY(read_scalar(n, &in[0], "start", &start));
        CINFER_TRY(read_scalar(n, &in[1], "limit", &limit));
        CINFER_TRY(read_scalar(n, &in[2], "delta", &delta));
        if (delta == 0) return core_error(CINFER_ERR_INVALID_ARGUMENT, "Range node '%s': delta is 0", n->name);
        double c = ceil((limit - start) / delta);
        if (!(c < 9e18)) /* also catches NaN */
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Range node '%s': start %g, limit %g, delta %g give no finite count",
                              n->name, start, limit, delta);
        count = c > 0 ? (int64_t)c : 0;
    } else {
        double unused = 0;
        CINFER_TRY(read_scalar(n, &in[0], "start", &unused));
        CINFER_TRY(read_scalar(n, &in[1], "limit", &unused));
        CINFER_TRY(read_scalar(n, &in[2], "delta", &unused));
        int64_t start = tensor_get_int(&in[0], 0), limit = tensor_get_int(&in[1], 0), delta = tensor_get_int(&in[2], 0);
        if (delta == 0) return core_error(CINFER_ERR_INVALID_ARGUMENT, "Range node '%s': delta is 0", n->name);
        /* ceil((limit - start) / delta) without overflow: the inputs are at most 64-bit */
        double approx = ((double)limit - (double)start) / (double)delta;
        if (approx <= 0) {
            count = 0;
        } else if (approx > 9e18) {
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Range node '%s': the count overflows", n->name);
        } else {
            uint64_t diff = delta > 0 ? (uint64_t)limit - (uint64_t)start : (uint64_t)start - (uint64_t)limit;
            uint64_t step = delta > 0 ? (uint64_t)delta : (uint64_t)0 - (uint64_t)delta;
            count = (int64_t)((diff + step - 1) / step);
        }
    }
    out[0].dtype = t;
    out[0].ndim = 1;
    out[0].dims[0] = count;
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

static cinfer_status infer_dropout(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    shape_copy(&out[0], &in[0]);
    if (num_out > 1) {
        shape_copy(&out[1], &in[0]);
        out[1].dtype = CINFER_DTYPE_BOOL;
    }
    if (has_input(in, num_in, 1) && tensor_numel(&in[1]) != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "Dropout node '%s': ratio must be a scalar", n->name);
    if (has_input(in, num_in, 2) && (in[2].dtype != CINFER_DTYPE_BOOL || tensor_numel(&in[2]) != 1))
        return core_error(CINFER_ERR_INVALID_MODEL, "Dropout node '%s': training_mode must be a bool scalar", n->name);
    return CINFER_OK;
}

static cinfer_status infer_trilu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    if (in[0].ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "Trilu node '%s': the input must have rank >= 2, got %d", n->name, in[0].ndim);
    if (has_input(in, num_in, 1) && (!is_index_dtype(in[1].dtype) || tensor_numel(&in[1]) != 1))
        return core_error(CINFER_ERR_INVALID_MODEL, "Trilu node '%s': k must be an int64 scalar", n->name);
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

cinfer_status movement_compute_depth_space(const graph_node *n, const tensor *x, movement_depth_space *p) {
    bool to_space = strcmp(n->op_type, "DepthToSpace") == 0;
    int64_t bs = graph_attr_int(n, "blocksize", 0);
    const char *mode = graph_attr_string(n, "mode", "DCR");
    if (bs < 1 || bs > (1 << 20))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': blocksize must be 1 to 2^20, got %lld", n->op_type,
                          n->name, (long long)bs);
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': mode '%s' is not DCR or CRD", n->op_type, n->name, mode);
    if (x->ndim != 4)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the input must have rank 4, got %d", n->op_type, n->name,
                          x->ndim);
    bool dcr = strcmp(mode, "DCR") == 0;
    const int64_t *d = x->dims;
    if (to_space) { /* [N, C, H, W] seen as 6-D, then permuted into [N, C', H, bs, W, bs] */
        if (d[1] % (bs * bs) != 0)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "DepthToSpace node '%s': channels %lld are not a multiple of %lld",
                              n->name, (long long)d[1], (long long)(bs * bs));
        int64_t c = d[1] / (bs * bs);
        static const int p_dcr[6] = {0, 3, 4, 1, 5, 2}, p_crd[6] = {0, 1, 4, 2, 5, 3};
        const int64_t v_dcr[6] = {d[0], bs, bs, c, d[2], d[3]}, v_crd[6] = {d[0], c, bs, bs, d[2], d[3]};
        const int64_t o[4] = {d[0], c, d[2] * bs, d[3] * bs};
        memcpy(p->view, dcr ? v_dcr : v_crd, sizeof p->view);
        memcpy(p->perm, dcr ? p_dcr : p_crd, sizeof p->perm);
        memcpy(p->out, o, sizeof p->out);
    } else { /* [N, C, H', bs, W', bs] permuted so the block offsets join the channels */
        if (d[2] % bs != 0 || d[3] % bs != 0)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "SpaceToDepth node '%s': height %lld and width %lld must be "
                              "multiples of blocksize %lld", n->name, (long long)d[2], (long long)d[3], (long long)bs);
        static const int p_dcr[6] = {0, 3, 5, 1, 2, 4}, p_crd[6] = {0, 1, 3, 5, 2, 4};
        const int64_t v[6] = {d[0], d[1], d[2] / bs, bs, d[3] / bs, bs};
        const int64_t o[4] = {d[0], d[1] * bs * bs, d[2] / bs, d[3] / bs};
        memcpy(p->view, v, sizeof p->view);
        memcpy(p->perm, dcr ? p_dcr : p_crd, sizeof p->perm);
        memcpy(p->out, o, sizeof p->out);
    }
    return CINFER_OK;
}

static cinfer_status infer_depth_space(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    movement_depth_space p;
    CINFER_TRY(movement_compute_depth_space(n, &in[0], &p));
    out[0].dtype = in[0].dtype;
    out[0].ndim = 4;
    memcpy(out[0].dims, p.out, sizeof p.out);
    CINFER_TRY(check_size(n, &out[0]));
    return CINFER_OK;
}

static cinfer_status infer_eye_like(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    if (in[0].ndim != 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "EyeLike node '%s': the input must have rank 2, got %d", n->name, in[0].ndim);
    shape_copy(&out[0], &in[0]);
    int64_t t = graph_attr_int(n, "dtype", in[0].dtype);
    if (cinfer_dtype_size((cinfer_dtype)t) == 0 || t == CINFER_DTYPE_STRING)
        return core_error(CINFER_ERR_UNSUPPORTED, "EyeLike node '%s': dtype %lld is not supported", n->name, (long long)t);
    out[0].dtype = (cinfer_dtype)t;
    return CINFER_OK;
}


/* ---- data-dependent selections (OP_FLAG_DATA_DEPENDENT): the dims here are upper bounds; the kernels write the
 * actual ones (backend/cpu/movement_select.c) ---- */

/* NonZero: int64 [rank, count] coordinates of the non-zero elements; a scalar counts as one element of rank 1 (as
 * onnxruntime does). Bound: every element. */
static cinfer_status infer_nonzero(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    if (in[0].dtype == CINFER_DTYPE_UNDEFINED || in[0].dtype == CINFER_DTYPE_STRING)
        return core_error(CINFER_ERR_UNSUPPORTED, "NonZero node '%s': input of dtype %s", n->name,
                          cinfer_dtype_name(in[0].dtype));
    out[0].dtype = CINFER_DTYPE_INT64;
    out[0].ndim = 2;
    out[0].dims[0] = in[0].ndim > 0 ? in[0].ndim : 1;
    out[0].dims[1] = tensor_numel(&in[0]);
    return CINFER_OK;
}

/* Compress: the slices along `axis` (the flattened input without it) whose condition entry is true; a condition
 * shorter than the axis selects among its first entries; entries past the axis must be false (the kernel checks, as
 * numpy does). Bound: every slice. */
static cinfer_status infer_compress(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0], *cond = &in[1];
    if (cond->dtype != CINFER_DTYPE_BOOL || cond->ndim != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "Compress node '%s': condition must be a 1-D bool tensor, got %s of "
                          "rank %d", n->name, cinfer_dtype_name(cond->dtype), cond->ndim);
    out[0].dtype = x->dtype;
    if (!graph_node_attr(n, "axis")) {
        out[0].ndim = 1;
        out[0].dims[0] = cond->dims[0] < tensor_numel(x) ? cond->dims[0] : tensor_numel(x);
        return CINFER_OK;
    }
    int axis;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), x->ndim, &axis));
    shape_copy(&out[0], x);
    if (cond->dims[0] < x->dims[axis]) out[0].dims[axis] = cond->dims[0];
    return CINFER_OK;
}

/* Unique: Y (the unique elements, or slices along `axis`), indices and counts ([k] each, int64), inverse_indices
 * ([numel], or [dims[axis]]). Bound of k: every element (slice). */
static cinfer_status infer_unique(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    const tensor *x = &in[0];
    if (x->dtype == CINFER_DTYPE_UNDEFINED || x->dtype == CINFER_DTYPE_STRING)
        return core_error(CINFER_ERR_UNSUPPORTED, "Unique node '%s': input of dtype %s", n->name,
                          cinfer_dtype_name(x->dtype));
    int64_t items = tensor_numel(x);
    out[0].dtype = x->dtype;
    if (graph_node_attr(n, "axis")) {
        int axis;
        CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), x->ndim, &axis));
        shape_copy(&out[0], x);
        items = x->dims[axis];
    } else {
        out[0].ndim = 1;
        out[0].dims[0] = items;
    }
    for (int k = 1; k < num_out; k++) {
        out[k].dtype = CINFER_DTYPE_INT64;
        out[k].ndim = 1;
        out[k].dims[0] = items;
    }
    return CINFER_OK;
}

const op_schema shape_movement_schemas[] = {
    {"Reshape", infer_reshape, 1u << 1, OP_FLAG_ALIAS, 2, 2},
    {"Flatten", infer_flatten, 0, OP_FLAG_ALIAS, 1, 1},
    {"Squeeze", infer_squeeze, 1u << 1, OP_FLAG_ALIAS, 1, 2},
    {"Unsqueeze", infer_unsqueeze, 1u << 1, OP_FLAG_ALIAS, 2, 2},
    {"Identity", shape_infer_same_as_first, 0, OP_FLAG_ALIAS, 1, 1},
    {"Transpose", infer_transpose, 0, 0, 1, 1},
    {"Concat", infer_concat, 0, 0, 1, -1},
    {"LookupConcat", infer_lookup_concat, 0, 0, 2, -1}, /* internal: graph/fusion_lookup.c */
    {"Split", infer_split, 1u << 1, 0, 1, 2},
    {"Slice", infer_slice, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4), 0, 3, 5},
    {"Gather", infer_gather, 0, 0, 2, 2},
    {"GatherElements", infer_gather_elements, 0, 0, 2, 2},
    {"GatherND", infer_gather_nd, 0, 0, 2, 2},
    {"ScatterND", infer_scatter_nd, 0, 0, 3, 3},
    {"ScatterElements", infer_scatter_elements, 0, 0, 3, 3},
    {"OneHot", infer_onehot, 1u << 1, 0, 3, 3},
    {"Expand", infer_expand, 1u << 1, 0, 2, 2},
    {"Tile", infer_tile, 1u << 1, 0, 2, 2},
    {"Pad", infer_pad, (1u << 1) | (1u << 3), 0, 2, 4},
    {"Shape", infer_shape, 0, OP_FLAG_SHAPE_ONLY, 1, 1},
    {"Size", infer_size, 0, OP_FLAG_SHAPE_ONLY, 1, 1},
    {"ConstantOfShape", infer_constant_of_shape, 1u << 0, 0, 1, 1},
    {"Constant", infer_constant, 0, 0, 0, 0},
    {"Range", infer_range, (1u << 0) | (1u << 1) | (1u << 2), 0, 3, 3},
    /* ratio and training_mode do not change shapes, but kernels choose their path by them: host-known */
    {"Dropout", infer_dropout, (1u << 1) | (1u << 2), 0, 1, 3},
    {"Trilu", infer_trilu, 1u << 1, 0, 1, 2},
    {"DepthToSpace", infer_depth_space, 0, 0, 1, 1},
    {"SpaceToDepth", infer_depth_space, 0, 0, 1, 1},
    {"EyeLike", infer_eye_like, 0, 0, 1, 1},
    {"NonZero", infer_nonzero, 0, OP_FLAG_DATA_DEPENDENT, 1, 1},
    {"Compress", infer_compress, 0, OP_FLAG_DATA_DEPENDENT, 2, 2},
    {"Unique", infer_unique, 0, OP_FLAG_DATA_DEPENDENT, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
