/* Op schemas of the elementwise family: unary math, binary arithmetic with broadcasting, comparisons,
 * logic, Where, Cast, variadic Min/Max/Sum/Mean. */
#include "core/status.h"
#include "graph/op_schema.h"

static cinfer_status infer_binary(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    if (in[0].dtype != in[1].dtype)
        return core_error(CINFER_ERR_INVALID_MODEL, "%s node '%s': inputs have dtypes %s and %s, they must match",
                          n->op_type, n->name, cinfer_dtype_name(in[0].dtype), cinfer_dtype_name(in[1].dtype));
    CINFER_TRY(shape_broadcast(n, &in[0], &in[1], &out[0]));
    out[0].dtype = in[0].dtype;
    return CINFER_OK;
}

const op_schema shape_elementwise_schemas[] = {
    {"Add", infer_binary, 0, OP_FLAG_INPLACE, 2, 2},
    {"Relu", shape_infer_same_as_first, 0, OP_FLAG_INPLACE, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
