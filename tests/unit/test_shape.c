/* Unit tests of shape inference through the op schemas: broadcasting, Reshape's 0 and -1, Slice clamping,
 * Conv/Pool output sizes with pads, strides, dilations and auto_pad, Concat/Gather/Transpose, and the clear
 * errors for shapes that do not fit. */
#include <stdlib.h>

#include "core/status.h"
#include "graph/op_schema.h"
#include "test_util.h"

static graph_attr attrs[8];
static int num_attrs;

static void attr_ints(const char *name, int n, const int64_t *v) {
    graph_attr *a = &attrs[num_attrs++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = ATTR_INTS;
    a->ints = (int64_t *)v;
    a->n = (size_t)n;
}

static void attr_int(const char *name, int64_t v) {
    graph_attr *a = &attrs[num_attrs++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = ATTR_INT;
    a->i = v;
}

static void attr_string(const char *name, const char *v) {
    graph_attr *a = &attrs[num_attrs++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = ATTR_STRING;
    a->s = (char *)v;
    a->n = strlen(v);
}

static tensor make(cinfer_dtype dtype, int ndim, const int64_t *dims, void *data) {
    tensor t = {.dtype = dtype, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) t.dims[i] = dims[i];
    return t;
}

/* Runs op_type's schema with the attributes set so far (then clears them); returns the status. */
static cinfer_status infer(const char *op_type, tensor *in, int num_in, tensor *out, int num_out) {
    graph_node n = {.name = "node0", .op_type = (char *)op_type, .domain = "", .opset = 18, .attrs = attrs,
                    .num_attrs = num_attrs, .num_inputs = num_in, .num_outputs = num_out};
    const op_schema *s = op_schema_find("", op_type);
    CHECK(s != NULL);
    if (!s) return CINFER_ERR_UNSUPPORTED;
    memset(out, 0, sizeof(tensor) * (size_t)num_out);
    cinfer_status st = s->infer(&n, in, num_in, out, num_out);
    num_attrs = 0;
    return st;
}

static bool dims_are(const tensor *t, int ndim, const int64_t *dims) {
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

static void test_reshape(void) {
    int64_t xd[] = {2, 3, 4}, sd[] = {3};
    int64_t target[] = {0, -1, 2};
    tensor in[2] = {make(CINFER_DTYPE_FLOAT, 3, xd, NULL), make(CINFER_DTYPE_INT64, 1, sd, target)}, out[1];
    CHECK(infer("Reshape", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 3, (int64_t[]){2, 6, 2}));
    int64_t bad[] = {5, -1, 7};
    in[1].data = bad;
    CHECK(infer("Reshape", in, 2, out, 1) != CINFER_OK);
    CHECK_ERROR_MENTIONS("node0");
}

static void test_broadcast_ops(void) {
    int64_t ad[] = {4, 1, 3}, bd[] = {5, 1};
    tensor in[2] = {make(CINFER_DTYPE_FLOAT, 3, ad, NULL), make(CINFER_DTYPE_FLOAT, 2, bd, NULL)}, out[1];
    CHECK(infer("Mul", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 3, (int64_t[]){4, 5, 3}) && out[0].dtype == CINFER_DTYPE_FLOAT);
    CHECK(infer("Less", in, 2, out, 1) == CINFER_OK && out[0].dtype == CINFER_DTYPE_BOOL);
    int64_t cd[] = {4};
    in[1] = make(CINFER_DTYPE_FLOAT, 1, cd, NULL);
    CHECK(infer("Add", in, 2, out, 1) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("cannot be broadcast");
}

static void test_conv_and_pool(void) {
    int64_t xd[] = {1, 3, 224, 224}, wd[] = {64, 3, 7, 7};
    tensor in[2] = {make(CINFER_DTYPE_FLOAT, 4, xd, NULL), make(CINFER_DTYPE_FLOAT, 4, wd, NULL)}, out[1];
    static const int64_t strides[] = {2, 2}, pads[] = {3, 3, 3, 3};
    attr_ints("strides", 2, strides);
    attr_ints("pads", 4, pads);
    CHECK(infer("Conv", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){1, 64, 112, 112}));
    attr_string("auto_pad", "SAME_UPPER");
    attr_ints("strides", 2, strides);
    CHECK(infer("Conv", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){1, 64, 112, 112}));
    static const int64_t dil[] = {2, 2};
    attr_ints("dilations", 2, dil);
    CHECK(infer("Conv", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){1, 64, 212, 212}));
    int64_t wrong[] = {64, 4, 7, 7}; /* 4 input channels per group, the input has 3 */
    in[1] = make(CINFER_DTYPE_FLOAT, 4, wrong, NULL);
    CHECK(infer("Conv", in, 2, out, 1) != CINFER_OK);
    CHECK_ERROR_MENTIONS("node0");

    int64_t pd[] = {1, 64, 112, 112};
    tensor pin[1] = {make(CINFER_DTYPE_FLOAT, 4, pd, NULL)};
    static const int64_t k3[] = {3, 3}, s2[] = {2, 2}, p1[] = {1, 1, 1, 1};
    attr_ints("kernel_shape", 2, k3);
    attr_ints("strides", 2, s2);
    attr_ints("pads", 4, p1);
    CHECK(infer("MaxPool", pin, 1, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){1, 64, 56, 56}));
    int64_t od[] = {1, 1, 5, 5};
    pin[0] = make(CINFER_DTYPE_FLOAT, 4, od, NULL);
    attr_ints("kernel_shape", 2, k3);
    attr_ints("strides", 2, s2);
    attr_int("ceil_mode", 1);
    CHECK(infer("AveragePool", pin, 1, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){1, 1, 2, 2}));
    attr_ints("kernel_shape", 2, s2);
    attr_ints("strides", 2, s2);
    attr_int("ceil_mode", 1);
    CHECK(infer("AveragePool", pin, 1, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){1, 1, 3, 3}));
}

static void test_slice(void) {
    int64_t xd[] = {10, 20}, one[] = {2};
    int64_t starts[] = {-3, 100}, ends[] = {INT64_MAX, -1000}, axes[] = {0, 1}, steps[] = {1, -1};
    tensor in[5] = {make(CINFER_DTYPE_FLOAT, 2, xd, NULL), make(CINFER_DTYPE_INT64, 1, one, starts),
                    make(CINFER_DTYPE_INT64, 1, one, ends), make(CINFER_DTYPE_INT64, 1, one, axes),
                    make(CINFER_DTYPE_INT64, 1, one, steps)};
    tensor out[1];
    CHECK(infer("Slice", in, 5, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 2, (int64_t[]){3, 20}));
    int64_t zero_step[] = {1, 0};
    in[4].data = zero_step;
    CHECK(infer("Slice", in, 5, out, 1) != CINFER_OK);
}

static void test_movement(void) {
    int64_t ad[] = {2, 3, 4}, bd[] = {2, 5, 4};
    tensor in[2] = {make(CINFER_DTYPE_FLOAT, 3, ad, NULL), make(CINFER_DTYPE_FLOAT, 3, bd, NULL)}, out[2];
    attr_int("axis", 1);
    CHECK(infer("Concat", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 3, (int64_t[]){2, 8, 4}));
    attr_int("axis", 2);
    CHECK(infer("Concat", in, 2, out, 1) != CINFER_OK);
    CHECK_ERROR_MENTIONS("node0");

    static const int64_t perm[] = {2, 0, 1};
    attr_ints("perm", 3, perm);
    CHECK(infer("Transpose", in, 1, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 3, (int64_t[]){4, 2, 3}));

    int64_t id[] = {7, 2};
    tensor g[2] = {make(CINFER_DTYPE_FLOAT, 3, ad, NULL), make(CINFER_DTYPE_INT64, 2, id, NULL)};
    attr_int("axis", 1);
    CHECK(infer("Gather", g, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){2, 7, 2, 4}));

    tensor shp[1] = {make(CINFER_DTYPE_FLOAT, 3, ad, NULL)};
    CHECK(infer("Shape", shp, 1, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 1, (int64_t[]){3}) && out[0].dtype == CINFER_DTYPE_INT64);
}

static void test_matmul(void) {
    int64_t ad[] = {8, 1, 5, 6}, bd[] = {3, 6, 2};
    tensor in[2] = {make(CINFER_DTYPE_FLOAT, 4, ad, NULL), make(CINFER_DTYPE_FLOAT, 3, bd, NULL)}, out[1];
    CHECK(infer("MatMul", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 4, (int64_t[]){8, 3, 5, 2}));
    int64_t vd[] = {6};
    in[1] = make(CINFER_DTYPE_FLOAT, 1, vd, NULL);
    CHECK(infer("MatMul", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 3, (int64_t[]){8, 1, 5}));
    int64_t wd[] = {7, 2};
    in[1] = make(CINFER_DTYPE_FLOAT, 2, wd, NULL);
    CHECK(infer("MatMul", in, 2, out, 1) != CINFER_OK);
    CHECK_ERROR_MENTIONS("node0");
}

static void test_reduce(void) {
    int64_t xd[] = {2, 3, 4}, ad[] = {2};
    int64_t axes[] = {-1, 0};
    tensor in[2] = {make(CINFER_DTYPE_FLOAT, 3, xd, NULL), make(CINFER_DTYPE_INT64, 1, ad, axes)}, out[1];
    attr_int("keepdims", 0);
    CHECK(infer("ReduceSum", in, 2, out, 1) == CINFER_OK);
    CHECK(dims_are(&out[0], 1, (int64_t[]){3}));
    CHECK(infer("ReduceMean", in, 2, out, 1) == CINFER_OK); /* keepdims defaults to 1 */
    CHECK(dims_are(&out[0], 3, (int64_t[]){1, 3, 1}));
    int64_t bad_axes[] = {3, 0};
    in[1].data = bad_axes;
    CHECK(infer("ReduceMax", in, 2, out, 1) != CINFER_OK);
}

int main(void) {
    test_reshape();
    test_broadcast_ops();
    test_conv_and_pool();
    test_slice();
    test_movement();
    test_matmul();
    test_reduce();
    TEST_MAIN_END();
}
