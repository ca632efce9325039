/* Op schemas of the misc family: CumSum/CumProd, Einsum, the losses, (De)QuantizeLinear, ReverseSequence, BitCast. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/misc_params.h"

static const cinfer_dtype float_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16,
                                           CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_UNDEFINED};
static const cinfer_dtype index_types[] = {CINFER_DTYPE_INT32, CINFER_DTYPE_INT64, CINFER_DTYPE_UNDEFINED};
static const cinfer_dtype cum_types[] = {CINFER_DTYPE_FLOAT,  CINFER_DTYPE_DOUBLE, CINFER_DTYPE_FLOAT16,
                                         CINFER_DTYPE_BFLOAT16, CINFER_DTYPE_INT32, CINFER_DTYPE_INT64,
                                         CINFER_DTYPE_UINT32, CINFER_DTYPE_UINT64, CINFER_DTYPE_UNDEFINED};

static bool present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

/* ---------------------------------------------------------------------------------------------------
 * CumSum, CumProd
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status infer_cum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(shape_expect_dtype(n, in, 0, cum_types));
    CINFER_TRY(shape_expect_dtype(n, in, 1, index_types));
    if (in[1].ndim > 1 || tensor_numel(&in[1]) != 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': axis must hold one value, got rank %d with %lld",
                          n->op_type, n->name, in[1].ndim, (long long)tensor_numel(&in[1]));
    if (!in[1].data)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': the axis value is not known", n->op_type, n->name);
    if (in[0].ndim < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': x must have rank >= 1", n->op_type, n->name);
    int axis = 0;
    CINFER_TRY(shape_normalize_axis(n, tensor_get_int(&in[1], 0), in[0].ndim, &axis));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * Einsum
 * ------------------------------------------------------------------------------------------------- */

static bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Splits off one subscript term (up to ',' or the end), counting letters and noting an ellipsis. */
static cinfer_status scan_term(const graph_node *n, const char *s, size_t len, int *letters, bool *ellipsis) {
    *letters = 0;
    *ellipsis = false;
    for (size_t i = 0; i < len; i++) {
        if (is_letter(s[i])) {
            (*letters)++;
        } else if (s[i] == '.' && len - i >= 3 && s[i + 1] == '.' && s[i + 2] == '.' && !*ellipsis) {
            *ellipsis = true;
            i += 2;
        } else {
            return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': unexpected '%c' in the equation (letters, "
                              "one '...' per term, ',' and '->' only)", n->name, s[i]);
        }
    }
    return CINFER_OK;
}

cinfer_status misc_parse_einsum(const graph_node *n, const tensor *in, int num_in, misc_einsum *e) {
    const char *raw = graph_attr_string(n, "equation", NULL);
    if (!raw)
        return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': the equation attribute is missing", n->name);
    char eq[1024];
    size_t len = 0;
    for (const char *c = raw; *c; c++) {
        if (*c == ' ' || *c == '\t' || *c == '\n') continue;
        if (len + 1 >= sizeof eq)
            return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': the equation is too long", n->name);
        eq[len++] = *c;
    }
    eq[len] = '\0';
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : len;
    memset(e, 0, sizeof *e);
    e->num_operands = num_in;

    /* pass 1: the terms, their letter counts, the ellipsis rank */
    size_t term_start[GRAPH_MAX_NODE_IO], term_len[GRAPH_MAX_NODE_IO];
    int term_letters[GRAPH_MAX_NODE_IO];
    bool term_ell[GRAPH_MAX_NODE_IO];
    int nterms = 0, ell_rank = 0;
    for (size_t pos = 0;;) {
        size_t end = pos;
        while (end < lhs_len && eq[end] != ',') end++;
        if (nterms >= num_in)
            return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': the equation '%s' has more terms than the "
                              "%d inputs", n->name, raw, num_in);
        term_start[nterms] = pos;
        term_len[nterms] = end - pos;
        CINFER_TRY(scan_term(n, eq + pos, end - pos, &term_letters[nterms], &term_ell[nterms]));
        const tensor *t = &in[nterms];
        int extra = t->ndim - term_letters[nterms];
        if (term_ell[nterms] ? extra < 0 : extra != 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': term %d of '%s' names %d dims, input %d has "
                              "rank %d", n->name, nterms, raw, term_letters[nterms], nterms, t->ndim);
        if (term_ell[nterms] && extra > ell_rank) ell_rank = extra;
        nterms++;
        if (end >= lhs_len) break;
        pos = end + 1;
    }
    if (nterms != num_in)
        return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': the equation '%s' has %d terms for %d inputs",
                          n->name, raw, nterms, num_in);

    /* pass 2: label ids (ellipsis dims first), sizes */
    int letter_id[128];
    int letter_count[128];
    for (int c = 0; c < 128; c++) letter_id[c] = -1, letter_count[c] = 0;
    e->num_labels = ell_rank;
    for (int l = 0; l < MISC_EINSUM_MAX_LABELS; l++) e->label_size[l] = -1;
    for (int k = 0; k < nterms; k++) {
        const tensor *t = &in[k];
        const char *s = eq + term_start[k];
        int dim = 0, extra = t->ndim - term_letters[k];
        e->op_ndim[k] = t->ndim;
        for (size_t i = 0; i < term_len[k]; i++) {
            if (s[i] == '.') {
                for (int j = 0; j < extra; j++, dim++) {
                    int l = ell_rank - extra + j;
                    e->op_label[k][dim] = (signed char)l;
                    int64_t d = t->dims[dim];
                    if (e->label_size[l] == -1 || e->label_size[l] == 1) e->label_size[l] = d;
                    else if (d != 1 && d != e->label_size[l])
                        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Einsum node '%s': input %d's broadcast dim %d "
                                          "has size %lld, another input has %lld", n->name, k, dim, (long long)d,
                                          (long long)e->label_size[l]);
                }
                i += 2;
                continue;
            }
            unsigned char c = (unsigned char)s[i];
            if (letter_id[c] < 0) letter_id[c] = e->num_labels++;
            letter_count[c]++;
            int l = letter_id[c];
            e->op_label[k][dim] = (signed char)l;
            int64_t d = t->dims[dim];
            if (e->label_size[l] == -1) e->label_size[l] = d;
            else if (e->label_size[l] != d)
                return core_error(CINFER_ERR_INVALID_ARGUMENT, "Einsum node '%s': label '%c' has size %lld in input %d "
                                  "and %lld elsewhere", n->name, c, (long long)d, k, (long long)e->label_size[l]);
            dim++;
        }
    }
    for (int l = 0; l < ell_rank; l++)
        if (e->label_size[l] < 0) e->label_size[l] = 1;

    /* the output: explicit after '->', else the broadcast dims then the letters used once, sorted */
    e->out_ndim = 0;
    if (arrow) {
        const char *s = arrow + 2;
        size_t olen = strlen(s);
        int letters = 0;
        bool ell = false;
        CINFER_TRY(scan_term(n, s, olen, &letters, &ell));
        if (letters + (ell ? ell_rank : 0) > CINFER_MAX_DIMS)
            return core_error(CINFER_ERR_UNSUPPORTED, "Einsum node '%s': the output has more than %d dims", n->name,
                              CINFER_MAX_DIMS);
        bool used[128] = {false};
        for (size_t i = 0; i < olen; i++) {
            if (s[i] == '.') {
                for (int l = 0; l < ell_rank; l++) e->out_label[e->out_ndim++] = (signed char)l;
                i += 2;
                continue;
            }
            unsigned char c = (unsigned char)s[i];
            if (letter_id[c] < 0)
                return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': output label '%c' is in no input",
                                  n->name, c);
            if (used[c])
                return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': output label '%c' is repeated", n->name,
                                  c);
            used[c] = true;
            e->out_label[e->out_ndim++] = (signed char)letter_id[c];
        }
    } else {
        for (int l = 0; l < ell_rank; l++) e->out_label[e->out_ndim++] = (signed char)l;
        for (int c = 0; c < 128; c++) {
            if (letter_count[c] != 1) continue;
            if (e->out_ndim >= CINFER_MAX_DIMS)
                return core_error(CINFER_ERR_UNSUPPORTED, "Einsum node '%s': the output has more than %d dims",
                                  n->name, CINFER_MAX_DIMS);
            e->out_label[e->out_ndim++] = (signed char)letter_id[c];
        }
    }
    return CINFER_OK;
}

void misc_einsum_label_strides(const misc_einsum *e, const tensor *t, int k, int64_t *ls) {
    int64_t st[CINFER_MAX_DIMS];
    tensor_strides(t, st);
    for (int l = 0; l < e->num_labels; l++) ls[l] = 0;
    for (int d = 0; d < t->ndim; d++) {
        int l = e->op_label[k][d];
        if (t->dims[d] == 1 && e->label_size[l] != 1) continue;
        ls[l] += st[d];
    }
}

static cinfer_status infer_einsum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    for (int k = 0; k < num_in; k++) {
        if (in[k].dtype != in[0].dtype)
            return core_error(CINFER_ERR_INVALID_MODEL, "Einsum node '%s': input %d has dtype %s, input 0 %s", n->name,
                              k, cinfer_dtype_name(in[k].dtype), cinfer_dtype_name(in[0].dtype));
    }
    if (cinfer_dtype_size(in[0].dtype) == 0 || in[0].dtype == CINFER_DTYPE_BOOL)
        return core_error(CINFER_ERR_UNSUPPORTED, "Einsum node '%s': inputs have dtype %s", n->name,
                          cinfer_dtype_name(in[0].dtype));
    misc_einsum *e = malloc(sizeof *e); /* large (per-operand label tables): off the stack */
    if (!e) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
    cinfer_status st = misc_parse_einsum(n, in, num_in, e);
    if (st == CINFER_OK) {
        out[0].dtype = in[0].dtype;
        out[0].ndim = e->out_ndim;
        for (int d = 0; d < e->out_ndim; d++) out[0].dims[d] = e->label_size[e->out_label[d]];
    }
    free(e);
    return st;
}

/* ---------------------------------------------------------------------------------------------------
 * NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status check_loss_inputs(const graph_node *n, const tensor *in, int num_in) {
    CINFER_TRY(shape_expect_dtype(n, in, 0, float_types));
    CINFER_TRY(shape_expect_dtype(n, in, 1, index_types));
    const tensor *x = &in[0], *t = &in[1];
    char sx[128], st[128];
    bool ok = x->ndim >= 2 && t->ndim == x->ndim - 1 && t->dims[0] == x->dims[0];
    for (int d = 2; ok && d < x->ndim; d++) ok = t->dims[d - 1] == x->dims[d];
    if (!ok)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input %s and target %s do not match ([N,C,d1,...] "
                          "and [N,d1,...])", n->op_type, n->name, tensor_shape_str(x, sx, sizeof sx),
                          tensor_shape_str(t, st, sizeof st));
    if (present(in, num_in, 2)) {
        if (in[2].dtype != x->dtype || in[2].ndim != 1 || in[2].dims[0] != x->dims[1])
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': weights must be a %s vector of C = %lld values",
                              n->op_type, n->name, cinfer_dtype_name(x->dtype), (long long)x->dims[1]);
    }
    const char *red = graph_attr_string(n, "reduction", "mean");
    if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean"))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': reduction '%s' is not none, sum or mean",
                          n->op_type, n->name, red);
    return CINFER_OK;
}

static cinfer_status infer_loss(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(check_loss_inputs(n, in, num_in));
    const char *red = graph_attr_string(n, "reduction", "mean");
    if (strcmp(red, "none") == 0) {
        shape_copy(&out[0], &in[1]);
        out[0].dtype = in[0].dtype;
    } else {
        out[0].dtype = in[0].dtype;
        out[0].ndim = 0;
    }
    if (num_out > 1) shape_copy(&out[1], &in[0]); /* SoftmaxCrossEntropyLoss's log_prob */
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear
 * ------------------------------------------------------------------------------------------------- */

static bool quant_type(cinfer_dtype t) {
    return t == CINFER_DTYPE_INT8 || t == CINFER_DTYPE_UINT8 || t == CINFER_DTYPE_INT16 || t == CINFER_DTYPE_UINT16;
}

/* Scale (and zero point) must be one value (per tensor), a [dims[axis]] vector (per axis), or, with
 * block_size, x's shape with dims[axis] divided into ceil(dims[axis] / block_size) blocks. */
static cinfer_status check_quant_param(const graph_node *n, const tensor *x, const tensor *p, const char *what) {
    int64_t block = n->opset >= 21 ? graph_attr_int(n, "block_size", 0) : 0;
    char sx[128], sp[128];
    if (block < 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': block_size is %lld", n->op_type, n->name,
                          (long long)block);
    if (block == 0 && p->ndim <= 1 && tensor_numel(p) == 1) return CINFER_OK;
    int axis = 0;
    CINFER_TRY(shape_normalize_axis(n, graph_attr_int(n, "axis", 1), x->ndim, &axis));
    if (block == 0) {
        if (p->ndim != 1 || p->dims[0] != x->dims[axis])
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, expected one value or [%lld] "
                              "(axis %d of x %s)", n->op_type, n->name, what, tensor_shape_str(p, sp, sizeof sp),
                              (long long)x->dims[axis], axis, tensor_shape_str(x, sx, sizeof sx));
        return CINFER_OK;
    }
    bool ok = p->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; d++)
        ok = d == axis ? p->dims[d] == (x->dims[d] + block - 1) / block : p->dims[d] == x->dims[d];
    if (!ok)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s has shape %s, which does not block x %s along "
                          "axis %d with block_size %lld", n->op_type, n->name, what,
                          tensor_shape_str(p, sp, sizeof sp), tensor_shape_str(x, sx, sizeof sx), axis,
                          (long long)block);
    return CINFER_OK;
}

static cinfer_status infer_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    static const cinfer_dtype x_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_FLOAT16, CINFER_DTYPE_BFLOAT16,
                                           CINFER_DTYPE_DOUBLE, CINFER_DTYPE_INT32, CINFER_DTYPE_UNDEFINED};
    CINFER_TRY(shape_expect_dtype(n, in, 0, x_types));
    CINFER_TRY(shape_expect_dtype(n, in, 1, x_types));
    CINFER_TRY(check_quant_param(n, &in[0], &in[1], "y_scale"));
    cinfer_dtype t = CINFER_DTYPE_UINT8;
    int64_t od = n->opset >= 21 ? graph_attr_int(n, "output_dtype", 0) : 0;
    if (present(in, num_in, 2)) {
        t = in[2].dtype;
        if (od != 0 && od != (int64_t)t)
            return core_error(CINFER_ERR_INVALID_MODEL, "QuantizeLinear node '%s': output_dtype %lld differs from the "
                              "zero point's %s", n->name, (long long)od, cinfer_dtype_name(t));
        if (!tensor_same_shape(&in[1], &in[2]))
            return core_error(CINFER_ERR_INVALID_MODEL, "QuantizeLinear node '%s': y_zero_point's shape differs from "
                              "y_scale's", n->name);
    } else if (od != 0) {
        t = (cinfer_dtype)od;
    }
    if (!quant_type(t))
        return core_error(CINFER_ERR_UNSUPPORTED, "QuantizeLinear node '%s': quantizing to dtype %d (%s) is not "
                          "supported (int8, uint8, int16, uint16 are)", n->name, (int)t, cinfer_dtype_name(t));
    shape_copy(&out[0], &in[0]);
    out[0].dtype = t;
    return CINFER_OK;
}

static cinfer_status infer_dequantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    cinfer_dtype t = in[0].dtype;
    if (!quant_type(t) && t != CINFER_DTYPE_INT32)
        return core_error(CINFER_ERR_UNSUPPORTED, "DequantizeLinear node '%s': x has dtype %s (int8, uint8, int16, "
                          "uint16, int32 are supported)", n->name, cinfer_dtype_name(t));
    CINFER_TRY(shape_expect_dtype(n, in, 1, float_types));
    CINFER_TRY(check_quant_param(n, &in[0], &in[1], "x_scale"));
    if (present(in, num_in, 2)) {
        if (in[2].dtype != t)
            return core_error(CINFER_ERR_INVALID_MODEL, "DequantizeLinear node '%s': x_zero_point has dtype %s, x %s",
                              n->name, cinfer_dtype_name(in[2].dtype), cinfer_dtype_name(t));
        if (!tensor_same_shape(&in[1], &in[2]))
            return core_error(CINFER_ERR_INVALID_MODEL, "DequantizeLinear node '%s': x_zero_point's shape differs "
                              "from x_scale's", n->name);
    }
    cinfer_dtype o = in[1].dtype;
    int64_t od = n->opset >= 23 ? graph_attr_int(n, "output_dtype", 0) : 0;
    if (od != 0) o = (cinfer_dtype)od;
    if (o != CINFER_DTYPE_FLOAT && o != CINFER_DTYPE_FLOAT16 && o != CINFER_DTYPE_BFLOAT16 && o != CINFER_DTYPE_DOUBLE)
        return core_error(CINFER_ERR_INVALID_MODEL, "DequantizeLinear node '%s': output_dtype %lld is not a float type",
                          n->name, (long long)od);
    shape_copy(&out[0], &in[0]);
    out[0].dtype = o;
    return CINFER_OK;
}

static cinfer_status infer_dynamic_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                            int num_out) {
    (void)num_in;
    static const cinfer_dtype x_types[] = {CINFER_DTYPE_FLOAT, CINFER_DTYPE_UNDEFINED};
    CINFER_TRY(shape_expect_dtype(n, in, 0, x_types));
    shape_copy(&out[0], &in[0]);
    out[0].dtype = CINFER_DTYPE_UINT8;
    if (num_out > 1) {
        out[1].dtype = CINFER_DTYPE_FLOAT;
        out[1].ndim = 0;
    }
    if (num_out > 2) {
        out[2].dtype = CINFER_DTYPE_UINT8;
        out[2].ndim = 0;
    }
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * ReverseSequence, BitCast
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status infer_reverse_sequence(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                            int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0];
    if (cinfer_dtype_size(x->dtype) == 0)
        return core_error(CINFER_ERR_UNSUPPORTED, "ReverseSequence node '%s': input has dtype %s", n->name,
                          cinfer_dtype_name(x->dtype));
    CINFER_TRY(shape_expect_dtype(n, in, 1, index_types));
    int64_t b = graph_attr_int(n, "batch_axis", 1), t = graph_attr_int(n, "time_axis", 0);
    if ((b != 0 && b != 1) || (t != 0 && t != 1) || b == t)
        return core_error(CINFER_ERR_INVALID_MODEL, "ReverseSequence node '%s': batch_axis %lld and time_axis %lld "
                          "must be 0 and 1 in some order", n->name, (long long)b, (long long)t);
    if (x->ndim < 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "ReverseSequence node '%s': input has rank %d, expected >= 2",
                          n->name, x->ndim);
    if (in[1].ndim != 1 || in[1].dims[0] != x->dims[b])
        return core_error(CINFER_ERR_INVALID_MODEL, "ReverseSequence node '%s': sequence_lens must be a vector of the "
                          "batch size %lld", n->name, (long long)x->dims[b]);
    shape_copy(&out[0], x);
    return CINFER_OK;
}

static cinfer_status infer_bitcast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    int64_t to = graph_attr_int(n, "to", 0);
    size_t from_size = cinfer_dtype_size(in[0].dtype), to_size = cinfer_dtype_size((cinfer_dtype)to);
    if (from_size == 0 || to_size == 0)
        return core_error(CINFER_ERR_UNSUPPORTED, "BitCast node '%s': cannot cast %s to dtype %lld", n->name,
                          cinfer_dtype_name(in[0].dtype), (long long)to);
    if (from_size != to_size)
        return core_error(CINFER_ERR_INVALID_MODEL, "BitCast node '%s': %s has %zu bytes, %s %zu; they must match",
                          n->name, cinfer_dtype_name(in[0].dtype), from_size, cinfer_dtype_name((cinfer_dtype)to),
                          to_size);
    shape_copy(&out[0], &in[0]);
    out[0].dtype = (cinfer_dtype)to;
    return CINFER_OK;
}

const op_schema shape_misc_schemas[] = {
    {"CumSum", infer_cum, 1u << 1, OP_FLAG_INPLACE, 2, 2},
    {"CumProd", infer_cum, 1u << 1, OP_FLAG_INPLACE, 2, 2},
    {"Einsum", infer_einsum, 0, 0, 1, -1},
    {"NegativeLogLikelihoodLoss", infer_loss, 0, 0, 2, 3},
    {"SoftmaxCrossEntropyLoss", infer_loss, 0, 0, 2, 3},
    {"QuantizeLinear", infer_quantize, 0, 0, 2, 3},
    {"DequantizeLinear", infer_dequantize, 0, 0, 2, 3},
    {"DynamicQuantizeLinear", infer_dynamic_quantize, 0, 0, 1, 1},
    {"ReverseSequence", infer_reverse_sequence, 0, 0, 2, 2},
    {"BitCast", infer_bitcast, 0, OP_FLAG_ALIAS, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
