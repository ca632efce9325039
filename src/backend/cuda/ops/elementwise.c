/* CUDA kernels of the elementwise family (host side): attributes and shapes -> launches of kernels/elementwise*.cu.
 *
 * Binary ops broadcast through a compacted cuda_broadcast; the variadic Min/Max/Sum/Mean chain binary steps
 * like the CPU (out = op(in0, in1), then out = op(out, in_k)), so float16 rounds after every step as there.
 * Dtype coverage and semantics are the CPU backend's (backend/cpu/elementwise*.c); the *_supported calls of
 * the kernel side say what exists, and anything else is reported as unsupported, never run. */
#include <float.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/elementwise.h"
#include "graph/shape/elementwise_chain.h"
#include "core/status.h"
#include "core/tensor.h"

/* cuda_broadcast_init, then size-1 dims dropped and neighbours merged where every operand's strides chain,
 * so the kernels' per-element index walk has as few dims as the broadcast allows ([N,C,H,W] + [C,1,1] is
 * two dims, equal shapes one). */
static void ew_broadcast_plan(cuda_broadcast *bc, const tensor *const *ops, int num_ops, const tensor *out) {
    cuda_broadcast_init(bc, ops, num_ops, out);
    int nd = 0;
    for (int d = 0; d < bc->ndim; d++) {
        if (bc->dims[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < num_ops && merge; k++) merge = bc->stride[k][nd - 1] == bc->stride[k][d] * bc->dims[d];
        if (merge) {
            bc->dims[nd - 1] *= bc->dims[d];
            for (int k = 0; k < 3; k++) bc->stride[k][nd - 1] = bc->stride[k][d];
        } else {
            bc->dims[nd] = bc->dims[d];
            for (int k = 0; k < 3; k++) bc->stride[k][nd] = bc->stride[k][d];
            nd++;
        }
    }
    bc->ndim = nd; /* 0: every operand has one element */
}

static cinfer_status ew_unsupported_pair(const graph_node *n, cinfer_dtype a, cinfer_dtype b) {
    return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the CUDA backend has no kernel for dtypes %s and %s",
                      n->op_type, n->name, cinfer_dtype_name(a), cinfer_dtype_name(b));
}

/* out = op(a, b) with broadcasting; out may be a (in place, or a variadic step). */
static cinfer_status ew_binary(cuda_exec *x, const graph_node *n, cuda_ew_binary_op op, const tensor *a,
                               const tensor *b, tensor *out) {
    if (a->dtype != b->dtype) return ew_unsupported_pair(n, a->dtype, b->dtype);
    if (!cuda_ew_binary_supported(op, a->dtype)) return cuda_unsupported_dtype(n, a->dtype);
    int64_t total = tensor_numel(out);
    if (total == 0) return CINFER_OK;
    cuda_broadcast bc;
    const tensor *ops[2] = {a, b};
    ew_broadcast_plan(&bc, ops, 2, out);
    return cuda_check_launch(n, "binary elementwise kernel",
                             cuda_ew_binary(op, a->dtype, a->data, b->data, out->data, &bc, total, x->stream));
}

#define EW_BINARY_KERNEL(name, op)                                                                             \
    static cinfer_status name(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,    \
                              int num_out) {                                                                   \
        (void)num_in; (void)num_out;                                                                           \
        return ew_binary(x, n, op, &in[0], &in[1], &out[0]);                                                   \
    }
EW_BINARY_KERNEL(run_add, CUDA_EW_ADD)
EW_BINARY_KERNEL(run_sub, CUDA_EW_SUB)
EW_BINARY_KERNEL(run_mul, CUDA_EW_MUL)
EW_BINARY_KERNEL(run_div, CUDA_EW_DIV)
EW_BINARY_KERNEL(run_prelu, CUDA_EW_PRELU)
EW_BINARY_KERNEL(run_bitwise_and, CUDA_EW_BITWISE_AND)
EW_BINARY_KERNEL(run_bitwise_or, CUDA_EW_BITWISE_OR)
EW_BINARY_KERNEL(run_bitwise_xor, CUDA_EW_BITWISE_XOR)
EW_BINARY_KERNEL(run_equal, CUDA_EW_EQUAL)
EW_BINARY_KERNEL(run_greater, CUDA_EW_GREATER)
EW_BINARY_KERNEL(run_greater_equal, CUDA_EW_GREATER_EQUAL)
EW_BINARY_KERNEL(run_less, CUDA_EW_LESS)
EW_BINARY_KERNEL(run_less_equal, CUDA_EW_LESS_EQUAL)
EW_BINARY_KERNEL(run_and, CUDA_EW_AND)
EW_BINARY_KERNEL(run_or, CUDA_EW_OR)
EW_BINARY_KERNEL(run_xor, CUDA_EW_XOR)

static cinfer_status run_mod(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_in; (void)num_out;
    cuda_ew_binary_op op = graph_attr_int(n, "fmod", 0) ? CUDA_EW_FMOD : CUDA_EW_PMOD;
    return ew_binary(x, n, op, &in[0], &in[1], &out[0]);
}

static cinfer_status run_bitshift(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out) {
    (void)num_in; (void)num_out;
    bool left = strcmp(graph_attr_string(n, "direction", ""), "LEFT") == 0;
    return ew_binary(x, n, left ? CUDA_EW_SHIFT_LEFT : CUDA_EW_SHIFT_RIGHT, &in[0], &in[1], &out[0]);
}

/* Pow: same dtypes through the binary kernel (with the CPU's shortcuts for one float exponent, taken under the
 * CPU's conditions so both round alike); mixed dtypes (opset 15) element by element like the CPU. */
static cinfer_status run_pow(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_in; (void)num_out;
    const tensor *a = &in[0], *b = &in[1];
    if (a->dtype == b->dtype) {
        bool scalar_exponent = tensor_numel(b) == 1 && tensor_same_shape(a, &out[0]) &&
                               (a->dtype == CINFER_DTYPE_FLOAT || a->dtype == CINFER_DTYPE_DOUBLE);
        return ew_binary(x, n, scalar_exponent ? CUDA_EW_POW_SCALAR : CUDA_EW_POW, a, b, &out[0]);
    }
    bool numeric_a = dtype_is_float(a->dtype) || dtype_is_integer(a->dtype);
    bool numeric_b = dtype_is_float(b->dtype) || dtype_is_integer(b->dtype);
    if (!numeric_a || !numeric_b) return ew_unsupported_pair(n, a->dtype, b->dtype);
    int64_t total = tensor_numel(&out[0]);
    if (total == 0) return CINFER_OK;
    cuda_broadcast bc;
    const tensor *ops[2] = {a, b};
    ew_broadcast_plan(&bc, ops, 2, &out[0]);
    return cuda_check_launch(n, "mixed-dtype Pow kernel",
                             cuda_ew_pow_mixed(a->dtype, a->data, b->dtype, b->data, out[0].data, &bc, total,
                                               x->stream));
}

/* Where(cond, X, Y): a copy by element size, so every dtype of 1, 2, 4 or 8 bytes. */
static cinfer_status run_where(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in; (void)num_out;
    size_t es = cinfer_dtype_size(in[1].dtype);
    if (in[0].dtype != CINFER_DTYPE_BOOL)
        return core_error(CINFER_ERR_UNSUPPORTED, "Where node '%s': condition has dtype %s, the CUDA kernel takes bool",
                          n->name, cinfer_dtype_name(in[0].dtype));
    if (!(es == 1 || es == 2 || es == 4 || es == 8) || in[2].dtype != in[1].dtype)
        return ew_unsupported_pair(n, in[1].dtype, in[2].dtype);
    int64_t total = tensor_numel(&out[0]);
    if (total == 0) return CINFER_OK;
    cuda_broadcast bc;
    const tensor *ops[3] = {&in[0], &in[1], &in[2]};
    ew_broadcast_plan(&bc, ops, 3, &out[0]);
    return cuda_check_launch(n, "Where kernel",
                             cuda_ew_where(es, in[0].data, in[1].data, in[2].data, out[0].data, &bc, total, x->stream));
}

/* Variadic Min/Max/Sum/Mean: out = op(in0, in1), then out = op(out, in_k), each step broadcast to out's shape.
 * out may share in0's buffer (same shape then), which the first step reads element by element before writing. */
static cinfer_status ew_variadic(cuda_exec *x, const graph_node *n, cuda_ew_binary_op op, const tensor *in, int num_in,
                                 tensor *out) {
    cinfer_dtype t = in[0].dtype;
    if (num_in == 1) { /* a copy, whatever the dtype (as on the CPU) */
        size_t es = cinfer_dtype_size(t);
        if (!(es == 1 || es == 2 || es == 4 || es == 8)) return cuda_unsupported_dtype(n, t);
        return cuda_check_launch(n, "copy kernel",
                                 cuda_ew_copy(es, in[0].data, out->data, tensor_numel(out), x->stream));
    }
    for (int k = 1; k < num_in; k++)
        if (in[k].dtype != t) return ew_unsupported_pair(n, t, in[k].dtype);
    if (!cuda_ew_binary_supported(op, t)) return cuda_unsupported_dtype(n, t);
    if (tensor_numel(out) == 0) return CINFER_OK;
    CINFER_TRY(ew_binary(x, n, op, &in[0], &in[1], out));
    for (int k = 2; k < num_in; k++) CINFER_TRY(ew_binary(x, n, op, out, &in[k], out));
    return CINFER_OK;
}

static cinfer_status run_max(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_out;
    return ew_variadic(x, n, CUDA_EW_MAX, in, num_in, &out[0]);
}
static cinfer_status run_min(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_out;
    return ew_variadic(x, n, CUDA_EW_MIN, in, num_in, &out[0]);
}
static cinfer_status run_sum(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                             int num_out) {
    (void)num_out;
    return ew_variadic(x, n, CUDA_EW_ADD, in, num_in, &out[0]);
}
static cinfer_status run_mean(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    (void)num_out;
    cinfer_dtype t = in[0].dtype;
    if (!dtype_is_float(t)) return cuda_unsupported_dtype(n, t);
    CINFER_TRY(ew_variadic(x, n, CUDA_EW_ADD, in, num_in, &out[0]));
    if (num_in == 1) return CINFER_OK; /* x/1 == x */
    return cuda_check_launch(n, "Mean scaling kernel",
                             cuda_ew_mean_scale(t, out[0].data, tensor_numel(&out[0]), num_in, x->stream));
}

/* ------------------------------------------------------------------------------------------------ */
/* Unary ops */

static const struct {
    const char *op_type;
    cuda_ew_unary_op op;
} ew_unary_ops[] = {
    {"Sqrt", CUDA_EW_SQRT},
    {"Exp", CUDA_EW_EXP},
    {"Log", CUDA_EW_LOG},
    {"Neg", CUDA_EW_NEG},
    {"Abs", CUDA_EW_ABS},
    {"Reciprocal", CUDA_EW_RECIPROCAL},
    {"Erf", CUDA_EW_ERF},
    {"Floor", CUDA_EW_FLOOR},
    {"Ceil", CUDA_EW_CEIL},
    {"Round", CUDA_EW_ROUND},
    {"Sign", CUDA_EW_SIGN},
    {"Sin", CUDA_EW_SIN},
    {"Cos", CUDA_EW_COS},
    {"Tan", CUDA_EW_TAN},
    {"Asin", CUDA_EW_ASIN},
    {"Acos", CUDA_EW_ACOS},
    {"Atan", CUDA_EW_ATAN},
    {"Sinh", CUDA_EW_SINH},
    {"Cosh", CUDA_EW_COSH},
    {"Tanh", CUDA_EW_TANH},
    {"Asinh", CUDA_EW_ASINH},
    {"Acosh", CUDA_EW_ACOSH},
    {"Atanh", CUDA_EW_ATANH},
    {"Relu", CUDA_EW_RELU},
    {"LeakyRelu", CUDA_EW_LEAKY_RELU},
    {"Sigmoid", CUDA_EW_SIGMOID},
    {"HardSigmoid", CUDA_EW_HARD_SIGMOID},
    {"HardSwish", CUDA_EW_HARD_SWISH},
    {"Softplus", CUDA_EW_SOFTPLUS},
    {"Softsign", CUDA_EW_SOFTSIGN},
    {"Elu", CUDA_EW_ELU},
    {"Selu", CUDA_EW_SELU},
    {"Celu", CUDA_EW_CELU},
    {"ThresholdedRelu", CUDA_EW_THRESHOLDED_RELU},
    {"Mish", CUDA_EW_MISH},
    {"Shrink", CUDA_EW_SHRINK},
    {"Gelu", CUDA_EW_GELU},
    {"IsNaN", CUDA_EW_ISNAN},
    {"IsInf", CUDA_EW_ISINF},
    {"Not", CUDA_EW_NOT},
    {"BitwiseNot", CUDA_EW_BITWISE_NOT},
};

/* The node's op and attributes (ONNX defaults), as the CPU reads them. */
static cinfer_status ew_unary_read(const graph_node *n, cuda_ew_unary_op *op, cuda_ew_unary_params *p) {
    const char *t = n->op_type;
    bool found = false;
    for (size_t i = 0; i < sizeof ew_unary_ops / sizeof ew_unary_ops[0] && !found; i++)
        if (strcmp(ew_unary_ops[i].op_type, t) == 0) {
            *op = ew_unary_ops[i].op;
            found = true;
        }
    if (!found) return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': no CUDA kernel", t, n->name);
    memset(p, 0, sizeof *p);
    if (strcmp(t, "Gelu") == 0) {
        if (strcmp(graph_attr_string(n, "approximate", "none"), "tanh") == 0) *op = CUDA_EW_GELU_TANH;
    } else if (strcmp(t, "LeakyRelu") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 0.01f);
    } else if (strcmp(t, "HardSigmoid") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 0.2f);
        p->beta = graph_attr_float(n, "beta", 0.5f);
    } else if (strcmp(t, "Elu") == 0 || strcmp(t, "Celu") == 0 || strcmp(t, "ThresholdedRelu") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 1.0f);
        if (t[0] == 'C' && p->alpha == 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Celu node '%s': alpha is 0, expected a nonzero value",
                              n->name);
    } else if (strcmp(t, "Selu") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 1.67326319217681884765625f);
        p->gamma = graph_attr_float(n, "gamma", 1.05070102214813232421875f);
    } else if (strcmp(t, "Shrink") == 0) {
        p->alpha = graph_attr_float(n, "lambd", 0.5f);
        p->beta = graph_attr_float(n, "bias", 0.0f);
    } else if (strcmp(t, "IsInf") == 0) {
        p->flag = (graph_attr_int(n, "detect_positive", 1) ? 1 : 0) | (graph_attr_int(n, "detect_negative", 1) ? 2 : 0);
    }
    return CINFER_OK;
}

static cinfer_status run_unary(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in; (void)num_out;
    cuda_ew_unary_op op = CUDA_EW_SQRT;
    cuda_ew_unary_params p;
    CINFER_TRY(ew_unary_read(n, &op, &p));
    if (!cuda_ew_unary_supported(op, in[0].dtype)) return cuda_unsupported_dtype(n, in[0].dtype);
    return cuda_check_launch(n, "unary elementwise kernel",
                             cuda_ew_unary(op, in[0].dtype, in[0].data, out[0].data, tensor_numel(&out[0]), p,
                                           x->stream));
}

/* Clip(x, min?, max?): the bounds stay on the device and the kernel reads them. Before opset 11 they are the
 * float attributes min and max (default: the float range) instead. */
static cinfer_status run_clip(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    (void)num_out;
    cinfer_dtype t = in[0].dtype;
    if (!cuda_ew_clip_supported(t)) return cuda_unsupported_dtype(n, t);
    cuda_ew_clip_bounds b;
    memset(&b, 0, sizeof b);
    for (int i = 1; i < 3 && i < num_in; i++) {
        if (in[i].dtype == CINFER_DTYPE_UNDEFINED || !in[i].data) continue;
        if (in[i].dtype != t) return ew_unsupported_pair(n, t, in[i].dtype);
        if (i == 1) b.lo = in[i].data;
        else b.hi = in[i].data;
    }
    if (n->opset < 11 && dtype_is_float(t)) {
        if (!b.lo) {
            b.attr_lo = true;
            b.attr_lo_value = graph_attr_float(n, "min", -FLT_MAX);
        }
        if (!b.hi) {
            b.attr_hi = true;
            b.attr_hi_value = graph_attr_float(n, "max", FLT_MAX);
        }
    }
    return cuda_check_launch(n, "Clip kernel",
                             cuda_ew_clip(t, in[0].data, out[0].data, tensor_numel(&out[0]), b, x->stream));
}

/* Cast (target from the 'to' attribute) and CastLike (input 1's dtype): the schema has set out[0].dtype. */
static cinfer_status run_cast(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    (void)num_in; (void)num_out;
    cinfer_dtype from = in[0].dtype, to = out[0].dtype;
    if (!cuda_ew_cast_supported(from) || !cuda_ew_cast_supported(to))
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the CUDA backend cannot cast %s to %s", n->op_type,
                          n->name, cinfer_dtype_name(from), cinfer_dtype_name(to));
    int64_t total = tensor_numel(&out[0]);
    if (from == to)
        return cuda_check_launch(n, "copy kernel",
                                 cuda_ew_copy(cinfer_dtype_size(from), in[0].data, out[0].data, total, x->stream));
    return cuda_check_launch(n, "Cast kernel", cuda_ew_cast(from, to, in[0].data, out[0].data, total, x->stream));
}

/* ElementwiseChain (internal, graph/fusion.c): the program's steps in one kernel. */
static cinfer_status run_chain(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                               int num_out) {
    (void)num_in; (void)num_out;
    chain_program prog;
    CINFER_TRY(chain_program_read(n, &prog));
    cudaError_t e = cuda_ew_chain(in[0].dtype, out[0].dtype, in[0].data, out[0].data, tensor_numel(&out[0]), &prog,
                                  x->stream);
    if (e == cudaErrorNotSupported)
        return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the CUDA backend runs it from %s to %s only between "
                          "float, float16 and bfloat16", n->op_type, n->name, cinfer_dtype_name(in[0].dtype),
                          cinfer_dtype_name(out[0].dtype));
    return cuda_check_launch(n, "elementwise chain kernel", e);
}

const cuda_kernel cuda_elementwise_kernels[] = {
    {"Add", run_add}, {"Sub", run_sub}, {"Mul", run_mul}, {"Div", run_div}, {"Mod", run_mod}, {"Pow", run_pow},
    {"PRelu", run_prelu}, {"BitwiseAnd", run_bitwise_and}, {"BitwiseOr", run_bitwise_or},
    {"BitwiseXor", run_bitwise_xor}, {"BitShift", run_bitshift},
    {"Equal", run_equal}, {"Greater", run_greater}, {"GreaterOrEqual", run_greater_equal}, {"Less", run_less},
    {"LessOrEqual", run_less_equal}, {"And", run_and}, {"Or", run_or}, {"Xor", run_xor},
    {"Where", run_where},
    {"Max", run_max}, {"Min", run_min}, {"Sum", run_sum}, {"Mean", run_mean},
    {"Sqrt", run_unary}, {"Exp", run_unary}, {"Log", run_unary}, {"Neg", run_unary}, {"Abs", run_unary},
    {"Reciprocal", run_unary}, {"Erf", run_unary}, {"Floor", run_unary}, {"Ceil", run_unary},
    {"Round", run_unary}, {"Sign", run_unary}, {"Sin", run_unary}, {"Cos", run_unary}, {"Tan", run_unary},
    {"Asin", run_unary}, {"Acos", run_unary}, {"Atan", run_unary}, {"Sinh", run_unary}, {"Cosh", run_unary},
    {"Tanh", run_unary}, {"Asinh", run_unary}, {"Acosh", run_unary}, {"Atanh", run_unary},
    {"Relu", run_unary}, {"LeakyRelu", run_unary}, {"Sigmoid", run_unary}, {"HardSigmoid", run_unary},
    {"HardSwish", run_unary}, {"Softplus", run_unary}, {"Softsign", run_unary}, {"Elu", run_unary},
    {"Selu", run_unary}, {"Celu", run_unary}, {"ThresholdedRelu", run_unary}, {"Mish", run_unary},
    {"Shrink", run_unary}, {"Gelu", run_unary}, {"IsNaN", run_unary}, {"IsInf", run_unary}, {"Not", run_unary},
    {"BitwiseNot", run_unary},
    {"Clip", run_clip},
    {"Cast", run_cast}, {"CastLike", run_cast},
    {"ElementwiseChain", run_chain},
    {NULL, NULL},
};
