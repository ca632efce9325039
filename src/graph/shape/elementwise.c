/* Op schemas of the elementwise family: unary math, binary arithmetic with broadcasting, comparisons,
 * logic, Where, Cast, variadic Min/Max/Sum/Mean. */
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "graph/shape/elementwise_chain.h"

static bool present(const tensor *in, int num_in, int i) {
    return i < num_in && in[i].dtype != CINFER_DTYPE_UNDEFINED;
}

static cinfer_status expect_same_dtype(const graph_node *n, const tensor *in, int i, int j) {
    if (in[i].dtype != in[j].dtype)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "%s node '%s': inputs %d and %d have dtypes %s and %s, they must match", n->op_type,
                          n->name, i, j, cinfer_dtype_name(in[i].dtype), cinfer_dtype_name(in[j].dtype));
    return CINFER_OK;
}

static cinfer_status expect_bool(const graph_node *n, const tensor *in, int i) {
    if (in[i].dtype != CINFER_DTYPE_BOOL)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input %d has dtype %s, expected bool", n->op_type,
                          n->name, i, cinfer_dtype_name(in[i].dtype));
    return CINFER_OK;
}

/* Unary ops whose output has the input's dtype and shape. */
static cinfer_status infer_unary(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    if (in[0].dtype == CINFER_DTYPE_UNDEFINED)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input 0 is missing", n->op_type, n->name);
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

/* IsNaN, IsInf: the input's shape, bool. */
static cinfer_status infer_unary_to_bool(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(infer_unary(n, in, num_in, out, num_out));
    out[0].dtype = CINFER_DTYPE_BOOL;
    return CINFER_OK;
}

static cinfer_status infer_not(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(expect_bool(n, in, 0));
    return infer_unary(n, in, num_in, out, num_out);
}

static cinfer_status infer_gelu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const char *approx = graph_attr_string(n, "approximate", "none");
    if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "Gelu node '%s': approximate is '%s', expected 'none' or 'tanh'",
                          n->name, approx);
    return infer_unary(n, in, num_in, out, num_out);
}

/* Binary ops on two inputs of one dtype; the output has that dtype and the broadcast shape. */
static cinfer_status infer_binary(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(expect_same_dtype(n, in, 0, 1));
    CINFER_TRY(shape_broadcast(n, &in[0], &in[1], &out[0]));
    out[0].dtype = in[0].dtype;
    return CINFER_OK;
}

static cinfer_status infer_bitshift(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const char *dir = graph_attr_string(n, "direction", "");
    if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "BitShift node '%s': direction is '%s', expected 'LEFT' or 'RIGHT'",
                          n->name, dir);
    return infer_binary(n, in, num_in, out, num_out);
}

/* Comparisons: same-dtype inputs, bool output of the broadcast shape. */
static cinfer_status infer_compare(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(infer_binary(n, in, num_in, out, num_out));
    out[0].dtype = CINFER_DTYPE_BOOL;
    return CINFER_OK;
}

/* And, Or, Xor: bool inputs and output. */
static cinfer_status infer_logical(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    CINFER_TRY(expect_bool(n, in, 0));
    CINFER_TRY(expect_bool(n, in, 1));
    return infer_binary(n, in, num_in, out, num_out);
}

/* Pow: the exponent may have another numeric dtype (opset 15); the output has the base's dtype. */
static cinfer_status infer_pow(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    for (int i = 0; i < 2; i++)
        if (!dtype_is_float(in[i].dtype) && !dtype_is_integer(in[i].dtype))
            return core_error(CINFER_ERR_UNSUPPORTED, "Pow node '%s': input %d has dtype %s, expected a numeric dtype",
                              n->name, i, cinfer_dtype_name(in[i].dtype));
    CINFER_TRY(shape_broadcast(n, &in[0], &in[1], &out[0]));
    out[0].dtype = in[0].dtype;
    return CINFER_OK;
}

/* PRelu: slope broadcasts to X (one direction); the output is X's shape. */
static cinfer_status infer_prelu(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(expect_same_dtype(n, in, 0, 1));
    char sx[128], ss[128];
    bool ok = in[1].ndim <= in[0].ndim;
    for (int i = 0; ok && i < in[1].ndim; i++) {
        int64_t ds = in[1].dims[in[1].ndim - 1 - i], dx = in[0].dims[in[0].ndim - 1 - i];
        ok = ds == 1 || ds == dx;
    }
    if (!ok)
        return core_error(CINFER_ERR_INVALID_ARGUMENT,
                          "PRelu node '%s': slope shape %s does not broadcast to X shape %s", n->name,
                          tensor_shape_str(&in[1], ss, sizeof ss), tensor_shape_str(&in[0], sx, sizeof sx));
    shape_copy(&out[0], &in[0]);
    return CINFER_OK;
}

/* Where(cond, X, Y): three-way broadcast; output dtype is X's. */
static cinfer_status infer_where(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    CINFER_TRY(expect_bool(n, in, 0));
    CINFER_TRY(expect_same_dtype(n, in, 1, 2));
    tensor tmp = {0};
    CINFER_TRY(shape_broadcast(n, &in[0], &in[1], &tmp));
    CINFER_TRY(shape_broadcast(n, &tmp, &in[2], &out[0]));
    out[0].dtype = in[1].dtype;
    return CINFER_OK;
}

/* Min, Max, Sum, Mean: one or more inputs of one dtype, broadcast together. */
static cinfer_status infer_variadic(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    tensor acc = {0};
    for (int i = 0; i < num_in; i++) {
        if (!present(in, num_in, i))
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': input %d is missing", n->op_type, n->name, i);
        CINFER_TRY(expect_same_dtype(n, in, 0, i));
        if (i == 0) {
            shape_copy(&acc, &in[0]);
        } else {
            tensor next = {0};
            CINFER_TRY(shape_broadcast(n, &acc, &in[i], &next));
            next.dtype = acc.dtype;
            acc = next;
        }
    }
    shape_copy(&out[0], &acc);
    return CINFER_OK;
}

/* Clip(x, min?, max?): min and max, when given, are single values of x's dtype. */
static cinfer_status infer_clip(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    for (int i = 1; i < 3; i++) {
        if (!present(in, num_in, i)) continue;
        CINFER_TRY(expect_same_dtype(n, in, 0, i));
        if (tensor_numel(&in[i]) != 1) {
            char s[128];
            return core_error(CINFER_ERR_INVALID_ARGUMENT,
                              "Clip node '%s': input %d (%s) has shape %s, expected a scalar", n->name, i,
                              i == 1 ? "min" : "max", tensor_shape_str(&in[i], s, sizeof s));
        }
    }
    return infer_unary(n, in, num_in, out, num_out);
}

/* The dtypes cinfer can hold in a tensor (float8, int4, string and others are not). */
static bool dtype_storable(int64_t t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT8: case CINFER_DTYPE_UINT16:
    case CINFER_DTYPE_INT16: case CINFER_DTYPE_INT32: case CINFER_DTYPE_INT64: case CINFER_DTYPE_BOOL:
    case CINFER_DTYPE_FLOAT16: case CINFER_DTYPE_DOUBLE: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64:
    case CINFER_DTYPE_BFLOAT16:
        return true;
    default:
        return false;
    }
}

static cinfer_status infer_cast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    int64_t to = graph_attr_int(n, "to", -1);
    if (to < 0)
        return core_error(CINFER_ERR_INVALID_MODEL, "Cast node '%s': the 'to' attribute is missing", n->name);
    if (!dtype_storable(to))
        return core_error(CINFER_ERR_UNSUPPORTED, "Cast node '%s': target element type %lld is not supported", n->name,
                          (long long)to);
    CINFER_TRY(infer_unary(n, in, num_in, out, num_out));
    out[0].dtype = (cinfer_dtype)to;
    return CINFER_OK;
}

static cinfer_status infer_castlike(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    if (!dtype_storable(in[1].dtype))
        return core_error(CINFER_ERR_UNSUPPORTED, "CastLike node '%s': target dtype %s is not supported", n->name,
                          cinfer_dtype_name(in[1].dtype));
    CINFER_TRY(infer_unary(n, in, num_in, out, num_out));
    out[0].dtype = in[1].dtype;
    return CINFER_OK;
}

cinfer_status chain_program_read(const graph_node *n, chain_program *p) {
    size_t num_ops = 0, num_args = 0;
    const int64_t *ops = graph_attr_ints(n, "cinfer_chain_ops", &num_ops);
    const float *args = graph_attr_floats(n, "cinfer_chain_args", &num_args);
    if (!ops || !args || num_ops < 1 || num_ops > CHAIN_MAX_STEPS || num_args != 2 * num_ops)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': not a chain the optimiser made (%zu steps, %zu "
                          "constants; expected 1 to %d steps and 2 constants each)", n->op_type, n->name, num_ops,
                          num_args, CHAIN_MAX_STEPS);
    memset(p, 0, sizeof *p);
    p->num_steps = (int)num_ops;
    for (size_t s = 0; s < num_ops; s++) {
        if (ops[s] < 0 || ops[s] >= CHAIN_NUM_OPS)
            return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': step %zu has opcode %lld, expected 0 to %d",
                              n->op_type, n->name, s, (long long)ops[s], CHAIN_NUM_OPS - 1);
        p->op[s] = (unsigned char)ops[s];
        p->a[s] = args[2 * s];
        p->b[s] = args[2 * s + 1];
    }
    return CINFER_OK;
}

static bool chain_float(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
}

/* ElementwiseChain (graph/shape/elementwise_chain.h): x's shape; its dtype, or "cinfer_chain_to". */
static cinfer_status infer_chain(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    chain_program p;
    CINFER_TRY(chain_program_read(n, &p));
    cinfer_dtype to = (cinfer_dtype)graph_attr_int(n, "cinfer_chain_to", in[0].dtype);
    if (!chain_float(in[0].dtype) || !chain_float(to))
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': %s to %s, expected float, float16 or bfloat16",
                          n->op_type, n->name, cinfer_dtype_name(in[0].dtype), cinfer_dtype_name(to));
    CINFER_TRY(infer_unary(n, in, num_in, out, num_out));
    out[0].dtype = to;
    return CINFER_OK;
}

#define UNARY(op) {op, infer_unary, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 1, 1}
#define BINARY(op) {op, infer_binary, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2}
#define COMPARE(op) {op, infer_compare, 0, OP_FLAG_POINTWISE, 2, 2}
#define VARIADIC(op) {op, infer_variadic, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 1, -1}

const op_schema shape_elementwise_schemas[] = {
    /* binary arithmetic (output 0 index-aligned with input 0 whenever they have the same size) */
    BINARY("Add"), BINARY("Sub"), BINARY("Mul"), BINARY("Div"), BINARY("Mod"),
    BINARY("BitwiseAnd"), BINARY("BitwiseOr"), BINARY("BitwiseXor"),
    {"BitShift", infer_bitshift, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2},
    {"Pow", infer_pow, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2},
    {"PRelu", infer_prelu, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2},
    /* comparisons and logic: bool output, so never in place (sizes can match by accident) */
    COMPARE("Equal"), COMPARE("Greater"), COMPARE("GreaterOrEqual"), COMPARE("Less"), COMPARE("LessOrEqual"),
    {"And", infer_logical, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2},
    {"Or", infer_logical, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2},
    {"Xor", infer_logical, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 2, 2},
    {"Not", infer_not, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 1, 1},
    {"Where", infer_where, 0, OP_FLAG_POINTWISE, 3, 3},
    VARIADIC("Min"), VARIADIC("Max"), VARIADIC("Sum"), VARIADIC("Mean"),
    /* unary math */
    UNARY("Sqrt"), UNARY("Exp"), UNARY("Log"), UNARY("Neg"), UNARY("Abs"), UNARY("Reciprocal"), UNARY("Erf"),
    UNARY("Floor"), UNARY("Ceil"), UNARY("Round"), UNARY("Sign"),
    UNARY("Sin"), UNARY("Cos"), UNARY("Tan"), UNARY("Asin"), UNARY("Acos"), UNARY("Atan"),
    UNARY("Sinh"), UNARY("Cosh"), UNARY("Tanh"), UNARY("Asinh"), UNARY("Acosh"), UNARY("Atanh"),
    UNARY("BitwiseNot"),
    /* activations */
    UNARY("Relu"), UNARY("LeakyRelu"), UNARY("Sigmoid"), UNARY("HardSigmoid"), UNARY("HardSwish"),
    UNARY("Softplus"), UNARY("Softsign"), UNARY("Elu"), UNARY("Selu"), UNARY("Celu"), UNARY("ThresholdedRelu"),
    UNARY("Mish"), UNARY("Shrink"),
    {"Gelu", infer_gelu, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 1, 1},
    {"Clip", infer_clip, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 1, 3},
    {"IsNaN", infer_unary_to_bool, 0, OP_FLAG_POINTWISE, 1, 1},
    {"IsInf", infer_unary_to_bool, 0, OP_FLAG_POINTWISE, 1, 1},
    {"Cast", infer_cast, 0, OP_FLAG_POINTWISE, 1, 1},
    {"CastLike", infer_castlike, 0, OP_FLAG_POINTWISE, 2, 2},
    /* internal (the optimiser's; a file naming it is refused at load) */
    {"ElementwiseChain", infer_chain, 0, OP_FLAG_INPLACE | OP_FLAG_POINTWISE, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
