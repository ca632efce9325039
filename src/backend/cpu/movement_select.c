/* CPU kernels of the movement family's data-dependent selections: NonZero, Compress, Unique.
 *
 * Their output shapes follow the input values (OP_FLAG_DATA_DEPENDENT, graph/op_schema.h): each output buffer is
 * sized by the schema's upper bound, and the kernel writes the actual dims into out[k] with the data packed at the
 * start, which is what the runtime reads to plan the rest of the graph (docs/engine.md "Data-dependent shapes"). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"
#include "graph/op_schema.h"

/* Whether element i is non-zero: floats by value (-0.0 is zero, NaN is not), every other type by its bytes. */
static bool element_nonzero(const tensor *x, int64_t i) {
    if (dtype_is_float(x->dtype)) return cpu_load_f64(x->data, x->dtype, i) != 0.0;
    size_t es = cinfer_dtype_size(x->dtype);
    const unsigned char *p = (const unsigned char *)x->data + (size_t)i * es;
    for (size_t b = 0; b < es; b++)
        if (p[b]) return true;
    return false;
}

cinfer_status cpu_run_nonzero(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0];
    int64_t numel = tensor_numel(x), count = 0;
    for (int64_t i = 0; i < numel; i++) count += element_nonzero(x, i);
    int rank = x->ndim > 0 ? x->ndim : 1;
    if (count > out[0].dims[1] || rank != out[0].dims[0])
        return core_error(CINFER_ERR_RUNTIME, "NonZero node '%s': %lld non-zero elements, room for %lld", n->name,
                          (long long)count, (long long)out[0].dims[1]);
    int64_t *y = out[0].data;
    int64_t j = 0, coord[CINFER_MAX_DIMS] = {0};
    for (int64_t i = 0; i < numel; i++) {
        if (element_nonzero(x, i)) {
            for (int d = 0; d < rank; d++) y[d * count + j] = x->ndim > 0 ? coord[d] : 0;
            j++;
        }
        for (int d = x->ndim - 1; d >= 0; d--) { /* row-major odometer */
            if (++coord[d] < x->dims[d]) break;
            coord[d] = 0;
        }
    }
    out[0].dims[1] = count;
    return CINFER_OK;
}

/* x as [outer, len, inner] around the node's optional "axis" attribute; without it (axis -1) x is flattened:
 * outer = inner = 1, len = its element count. Compress and Unique select along it. */
static cinfer_status split_at_optional_axis(const graph_node *n, const tensor *x, int64_t *outer, int64_t *len,
                                            int64_t *inner, int *axis) {
    *outer = 1, *len = tensor_numel(x), *inner = 1, *axis = -1;
    if (!graph_node_attr(n, "axis")) return CINFER_OK;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 0), x->ndim, axis));
    *len = x->dims[*axis];
    for (int d = 0; d < *axis; d++) *outer *= x->dims[d];
    for (int d = *axis + 1; d < x->ndim; d++) *inner *= x->dims[d];
    return CINFER_OK;
}

cinfer_status cpu_run_compress(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    (void)num_out;
    const tensor *x = &in[0], *cond = &in[1];
    const unsigned char *c = cond->data;
    int64_t outer, len, inner;
    int axis;
    CINFER_TRY(split_at_optional_axis(n, x, &outer, &len, &inner, &axis));
    int64_t selected = 0;
    for (int64_t j = 0; j < cond->dims[0]; j++) {
        if (!c[j]) continue;
        if (j >= len)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "Compress node '%s': condition entry %lld is true but the "
                              "input has %lld %s", n->name, (long long)j, (long long)len, axis >= 0 ? "slices" : "elements");
        selected++;
    }
    size_t slice = (size_t)inner * cinfer_dtype_size(x->dtype);
    char *dst = out[0].data;
    const char *src = x->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < cond->dims[0] && j < len; j++)
            if (c[j]) {
                memcpy(dst, src + ((size_t)o * (size_t)len + (size_t)j) * slice, slice);
                dst += slice;
            }
    if (axis >= 0) out[0].dims[axis] = selected;
    else out[0].dims[0] = selected;
    return CINFER_OK;
}

/* ---- Unique: items (elements, or slices along axis gathered into rows) compared lexicographically ---- */

typedef struct unique_items {
    const char *rows;   /* items row-major: item i at rows + i * row_len elements */
    int64_t row_len;    /* elements per item */
    cinfer_dtype dtype;
} unique_items;

/* -1, 0, 1 as element a of item ia orders against element a of item ib (by value; float NaNs sort last). */
static int compare_elements(const unique_items *u, int64_t ia, int64_t ib) {
    size_t es = cinfer_dtype_size(u->dtype);
    for (int64_t e = 0; e < u->row_len; e++) {
        int64_t a = ia * u->row_len + e, b = ib * u->row_len + e;
        int r = 0;
        if (dtype_is_float(u->dtype)) {
            double x = cpu_load_f64(u->rows, u->dtype, a), y = cpu_load_f64(u->rows, u->dtype, b);
            bool xn = x != x, yn = y != y;
            r = xn || yn ? (int)xn - (int)yn : (x > y) - (x < y);
        } else if (dtype_is_signed(u->dtype)) {
            tensor t = {.dtype = u->dtype, .data = (void *)u->rows};
            int64_t x = tensor_get_int(&t, a), y = tensor_get_int(&t, b);
            r = (x > y) - (x < y);
        } else { /* unsigned and bool: little-endian bytes, most significant first */
            const unsigned char *x = (const unsigned char *)u->rows + (size_t)a * es;
            const unsigned char *y = (const unsigned char *)u->rows + (size_t)b * es;
            for (size_t k = es; k-- > 0 && !r;) r = (x[k] > y[k]) - (x[k] < y[k]);
        }
        if (r) return r;
    }
    return 0;
}

/* Stable merge sort of idx[0, n) by (item value, then position in idx). */
static void sort_items(const unique_items *u, int64_t *idx, int64_t *tmp, int64_t n) {
    if (n < 2) return;
    int64_t h = n / 2;
    sort_items(u, idx, tmp, h);
    sort_items(u, idx + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = compare_elements(u, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, sizeof *idx * (size_t)n);
}

cinfer_status cpu_run_unique(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in;
    const tensor *x = &in[0];
    size_t es = cinfer_dtype_size(x->dtype);
    int64_t outer, items, inner;
    int axis;
    CINFER_TRY(split_at_optional_axis(n, x, &outer, &items, &inner, &axis));
    int64_t row_len = axis >= 0 ? outer * inner : 1;
    /* rows: item j = the slice x[..., j, ...] flattened (outer-major); idx/tmp for the sort; group of each item */
    size_t row_bytes = (size_t)row_len * es;
    char *rows = axis >= 0 ? malloc(row_bytes * (size_t)(items ? items : 1)) : NULL;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(items ? items : 1) * 4);
    if ((axis >= 0 && !rows) || !idx) {
        free(rows);
        free(idx);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "Unique node '%s': out of memory for %lld items", n->name,
                          (long long)items);
    }
    int64_t *tmp = idx + items, *group_of = idx + 2 * items, *first = idx + 3 * items;
    if (axis >= 0)
        for (int64_t j = 0; j < items; j++)
            for (int64_t o = 0; o < outer; o++)
                memcpy(rows + (size_t)j * row_bytes + (size_t)(o * inner) * es,
                       (const char *)x->data + ((size_t)(o * items + j) * (size_t)inner) * es, (size_t)inner * es);
    unique_items u = {axis >= 0 ? rows : x->data, row_len, x->dtype};
    for (int64_t i = 0; i < items; i++) idx[i] = i;
    sort_items(&u, idx, tmp, items);
    /* groups in sorted order: first[g] = the first (smallest) position of group g, the stable sort's group head */
    int64_t groups = 0;
    for (int64_t i = 0; i < items; i++) {
        if (i == 0 || compare_elements(&u, idx[i - 1], idx[i]) != 0) first[groups++] = idx[i];
        group_of[idx[i]] = groups - 1;
    }
    /* output order of the groups: sorted (as found) or by first occurrence (sorted = 0); tmp maps group -> slot */
    bool sorted = graph_attr_int(n, "sorted", 1) != 0;
    if (sorted) {
        for (int64_t g = 0; g < groups; g++) tmp[g] = g;
    } else {
        int64_t slot = 0;
        for (int64_t i = 0; i < items; i++) /* positions in order: a group's first position meets it first */
            if (first[group_of[i]] == i) tmp[group_of[i]] = slot++;
    }
    tensor *y = &out[0];
    for (int64_t g = 0; g < groups; g++) {
        int64_t s = tmp[g], src = first[g];
        if (axis < 0) {
            memcpy((char *)y->data + (size_t)s * es, (const char *)x->data + (size_t)src * es, es);
            continue;
        }
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)y->data + ((size_t)(o * groups + s) * (size_t)inner) * es,
                   rows + (size_t)src * row_bytes + (size_t)(o * inner) * es, (size_t)inner * es);
    }
    if (num_out > 1 && out[1].data)
        for (int64_t g = 0; g < groups; g++) ((int64_t *)out[1].data)[tmp[g]] = first[g];
    if (num_out > 2 && out[2].data)
        for (int64_t i = 0; i < items; i++) ((int64_t *)out[2].data)[i] = tmp[group_of[i]];
    if (num_out > 3 && out[3].data) {
        int64_t *counts = out[3].data;
        for (int64_t g = 0; g < groups; g++) counts[g] = 0;
        for (int64_t i = 0; i < items; i++) counts[tmp[group_of[i]]]++;
    }
    free(rows);
    free(idx);
    if (axis >= 0) y->dims[axis] = groups;
    else y->dims[0] = groups;
    if (num_out > 1) out[1].dims[0] = groups;
    if (num_out > 3) out[3].dims[0] = groups;
    return CINFER_OK;
}
