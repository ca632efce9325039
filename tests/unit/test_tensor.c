/* Unit tests of core/tensor: dtype table, fp16/bf16 conversion, shape helpers, schema broadcast helper. */
#include <math.h>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/op_schema.h"
#include "test_util.h"

static void test_half(void) {
    float values[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        CHECK(dtype_half_to_float(dtype_float_to_half(values[i])) == values[i]);
    CHECK(dtype_float_to_half(1e6f) == 0x7c00);                 /* overflow -> inf */
    CHECK(isnan(dtype_half_to_float(dtype_float_to_half(NAN))));
    CHECK(dtype_float_to_half(1.0f + 1.0f / 2048) == 0x3c00);    /* tie rounds to even */
    CHECK(dtype_float_to_half(1.0f + 3.0f / 2048) == 0x3c02);
    CHECK(dtype_bf16_to_float(dtype_float_to_bf16(1.5f)) == 1.5f);
    CHECK(dtype_float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);     /* tie to even */
}

static void test_shapes(void) {
    tensor a = {.dtype = CINFER_DTYPE_FLOAT, .ndim = 3, .dims = {2, 1, 4}};
    tensor b = {.dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {3, 1}};
    tensor c = {0};
    graph_node n = {.name = "n0", .op_type = "Add"};
    CHECK(shape_broadcast(&n, &a, &b, &c) == CINFER_OK);
    CHECK(c.ndim == 3 && c.dims[0] == 2 && c.dims[1] == 3 && c.dims[2] == 4);
    tensor bad = {.dtype = CINFER_DTYPE_FLOAT, .ndim = 1, .dims = {3}};
    CHECK(shape_broadcast(&n, &a, &bad, &c) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("[2,1,4] and [3]");
    int axis;
    CHECK(shape_normalize_axis(&n, -1, 3, &axis) == CINFER_OK && axis == 2);
    CHECK(shape_normalize_axis(&n, 3, 3, &axis) == CINFER_ERR_INVALID_MODEL);
    CHECK(tensor_numel(&a) == 8 && tensor_nbytes(&a) == 32);
    int64_t strides[CINFER_MAX_DIMS];
    tensor_strides(&a, strides);
    CHECK(strides[0] == 4 && strides[1] == 4 && strides[2] == 1);
    tensor scalar = {.dtype = CINFER_DTYPE_INT64, .ndim = 0};
    CHECK(tensor_numel(&scalar) == 1);
    CHECK(cinfer_dtype_size(CINFER_DTYPE_BFLOAT16) == 2 && cinfer_dtype_size(CINFER_DTYPE_STRING) == 0);
    CHECK(strcmp(cinfer_dtype_name(CINFER_DTYPE_DOUBLE), "float64") == 0);
}

int main(void) {
    test_half();
    test_shapes();
    TEST_MAIN_END();
}
