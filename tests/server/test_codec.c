/* Unit tests of the KServe codec: JSON data (flat, nested, every JSON datatype, BYTES), the binary tensor
 * extension, raw binary bodies, binding to a config (names, datatypes, shapes, batch dims, sizes) and the
 * response encoding (JSON and binary outputs, requested subsets, id echo), and duplicate input and output names
 * found in long lists (80,000 names: the check is linear, see bench/BENCHMARKS.md for the time). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config_model.h"
#include "kserve_codec.h"
#include "test_util.h"

static void check_msg(const serve_error *e, int code, const char *needle) {
    CHECK(e->code == code);
    if (!strstr(e->msg, needle)) {
        test_failures++;
        fprintf(stderr, "FAIL: error \"%s\" does not mention \"%s\"\n", e->msg, needle);
    }
}

static void parse_fails(const char *body, long long hlen, const char *needle) {
    kserve_infer_request r;
    serve_error e = {0};
    CHECK(kserve_parse_infer(body, strlen(body), hlen, &r, &e) == -1);
    check_msg(&e, 400, needle);
}

static void test_parse_json(void) {
    const char *b = "{\"id\":\"r1\",\"parameters\":{\"priority\":2,\"timeout\":100,\"custom\":\"x\"},\"inputs\":["
                    "{\"name\":\"a\",\"shape\":[2,2],\"datatype\":\"FP32\",\"data\":[[1,2.5],[3,4]]},"
                    "{\"name\":\"b\",\"shape\":[3],\"datatype\":\"BOOL\",\"data\":[true,false,true]},"
                    "{\"name\":\"c\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"hi\",\"\"]},"
                    "{\"name\":\"d\",\"shape\":[2],\"datatype\":\"INT64\",\"data\":[-5,9007199254740993]},"
                    "{\"name\":\"e\",\"shape\":[1],\"datatype\":\"UINT8\",\"data\":[255]}],"
                    "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}]}";
    kserve_infer_request r;
    serve_error e = {0};
    CHECK(kserve_parse_infer(b, strlen(b), -1, &r, &e) == 0);
    CHECK(!strcmp(r.id, "r1") && r.priority == 2 && r.timeout_us == 100 && r.num_inputs == 5);
    const float *a = r.inputs[0].data;
    CHECK(r.inputs[0].byte_size == 16 && a[0] == 1.0f && a[1] == 2.5f && a[3] == 4.0f);
    const unsigned char *bo = r.inputs[1].data;
    CHECK(r.inputs[1].byte_size == 3 && bo[0] == 1 && bo[1] == 0 && bo[2] == 1);
    CHECK(r.inputs[2].byte_size == 4 + 2 + 4 && !memcmp(r.inputs[2].data, "\x02\0\0\0hi\0\0\0\0", 10));
    const int64_t *d = r.inputs[3].data;
    CHECK(d[0] == -5 && d[1] == 9007199254740993LL);
    CHECK(((const unsigned char *)r.inputs[4].data)[0] == 255);
    CHECK(r.num_outputs == 1 && r.outputs[0].binary == 1);
    kserve_infer_request_free(&r);
    kserve_infer_request_free(NULL);

    parse_fails("{", -1, "malformed JSON");
    parse_fails("[]", -1, "must be a JSON object");
    parse_fails("{\"inputs\":[]}", -1, "non-empty 'inputs'");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1]}]}", -1,
                "input 'a': shape [2] needs 2 elements but 'data' has 1");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP33\",\"data\":[1]}]}", -1, "unknown datatype 'FP33'");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[300]}]}", -1, "out of range for INT8");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"INT32\",\"data\":[1.5]}]}", -1, "must be an integer");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP16\",\"data\":[1]}]}", -1, "only supported as binary");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[-1],\"datatype\":\"FP32\",\"data\":[1]}]}", -1, "shape[0] must be a non-negative");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\"}]}", -1, "neither 'data' nor");
    parse_fails("{\"parameters\":{\"sequence_id\":1},\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
                -1, "sequence batching is not supported");
    parse_fails("{\"parameters\":{\"triton_x\":1},\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
                -1, "'triton_x' is reserved");
    parse_fails("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
                "{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}", -1, "given twice");
}

static void test_binary_and_bind(void) {
    /* model: x FP16 [-1, 2] batched (max 4), m BOOL [2]; outputs y FP16, z FP32 */
    model_config c;
    serve_error err = {0};
    const char *ct = "name: \"m\" max_batch_size: 4 input [{name: \"x\" data_type: TYPE_FP16 dims: [2]},"
                     "{name: \"m\" data_type: TYPE_BOOL dims: [2]}] output [{name: \"y\" data_type: TYPE_FP16 dims: [2]},"
                     "{name: \"z\" data_type: TYPE_FP32 dims: [1]}]";
    CHECK(config_model_parse(ct, strlen(ct), "config.pbtxt", &c, &err) == 0);
    const char *js = "{\"inputs\":[{\"name\":\"x\",\"shape\":[3,2],\"datatype\":\"FP16\",\"parameters\":{\"binary_data_size\":12}},"
                     "{\"name\":\"m\",\"shape\":[3,2],\"datatype\":\"BOOL\",\"parameters\":{\"binary_data_size\":6}}],"
                     "\"outputs\":[{\"name\":\"z\"}]}";
    size_t jl = strlen(js);
    char body[512];
    memcpy(body, js, jl);
    for (int i = 0; i < 18; i++) body[jl + i] = (char)(i < 12 ? 0x3c : 1);
    kserve_infer_request r;
    serve_error e = {0};
    CHECK(kserve_parse_infer(body, jl + 18, (long long)jl, &r, &e) == 0);
    cinfer_tensor ts[2];
    int64_t batch = 0;
    CHECK(kserve_bind_inputs(&r, &c, ts, &batch, &e) == 0);
    CHECK(batch == 3 && ts[0].dtype == CINFER_DTYPE_FLOAT16 && ts[0].ndim == 2 && ts[0].dims[0] == 3);
    /* in place when aligned for the element type, else an aligned copy with the same bytes */
    CHECK((uintptr_t)ts[0].data % 2 == 0 && !memcmp(ts[0].data, body + jl, 12));
    CHECK(ts[0].data == body + jl || (uintptr_t)(body + jl) % 2 != 0);
    CHECK(ts[1].data == body + jl + 12);

    /* encode: z requested as JSON */
    float z[3] = {1.5f, -2.0f, 0.25f};
    uint16_t y[6] = {0x3c00, 0, 0, 0, 0, 0};
    cinfer_tensor outs[2] = {{.name = "y", .dtype = CINFER_DTYPE_FLOAT16, .ndim = 2, .dims = {3, 2}, .data = y},
                             {.name = "z", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {3, 1}, .data = z}};
    char *out;
    size_t len, hl;
    CHECK(kserve_encode_response(&r, "m", "1", outs, 2, &out, &len, &hl, &e) == 0);
    CHECK(hl == 0 && len == strlen("{\"model_name\":\"m\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"z\",\"datatype\":\"FP32\","
                                   "\"shape\":[3,1],\"data\":[1.5,-2.0,0.25]}]}"));
    CHECK(strstr(out, "\"data\":[1.5,-2.0,0.25]") != NULL);
    free(out);
    kserve_infer_request_free(&r);

    /* all outputs binary (request parameter) */
    const char *js2 = "{\"id\":\"q\",\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],"
                      "\"datatype\":\"FP16\",\"parameters\":{\"binary_data_size\":4}},{\"name\":\"m\",\"shape\":[1,2],"
                      "\"datatype\":\"BOOL\",\"data\":[true,false]}]}";
    jl = strlen(js2);
    memcpy(body, js2, jl);
    memset(body + jl, 0, 4);
    CHECK(kserve_parse_infer(body, jl + 4, (long long)jl, &r, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, ts, &batch, &e) == 0 && batch == 1);
    outs[0].dims[0] = outs[1].dims[0] = 1;
    CHECK(kserve_encode_response(&r, "m", "1", outs, 2, &out, &len, &hl, &e) == 0);
    CHECK(hl > 0 && len == hl + 4 + 4);
    CHECK(!memcmp(out + hl, y, 4) && !memcmp(out + hl + 4, z, 4));
    CHECK(strstr(out, "\"id\":\"q\"") != NULL && strstr(out, "\"binary_data_size\":4") != NULL);
    free(out);
    kserve_infer_request_free(&r);

    /* binding errors */
    struct {
        const char *json;
        const char *needle;
    } bad[] = {
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}", "data-type is 'FP32', but model 'm' expects 'FP16'"},
        {"{\"inputs\":[{\"name\":\"q\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}", "unexpected inference input 'q'"},
        {"{\"inputs\":[{\"name\":\"m\",\"shape\":[1,2],\"datatype\":\"BOOL\",\"data\":[true,true]}]}", "input 'x' is missing"},
        {"{\"inputs\":[{\"name\":\"m\",\"shape\":[1,3],\"datatype\":\"BOOL\",\"data\":[true,true,true]},"
         "{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP16\",\"parameters\":{\"binary_data_size\":0}}]}",
         "input 'x': shape [1,2] of FP16 needs 4 bytes but 0 were given"},
        {"{\"inputs\":[{\"name\":\"m\",\"shape\":[5,2],\"datatype\":\"BOOL\",\"data\":[1,1,1,1,1,1,1,1,1,1]}]}", "must be true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        if (kserve_parse_infer(bad[i].json, strlen(bad[i].json), strlen(bad[i].json), &r, &e) == 0) {
            CHECK(kserve_bind_inputs(&r, &c, ts, &batch, &e) == -1);
            kserve_infer_request_free(&r);
        }
        check_msg(&e, 400, bad[i].needle);
    }
    const char *big = "{\"inputs\":[{\"name\":\"m\",\"shape\":[5,2],\"datatype\":\"BOOL\",\"data\":[true,true,true,true,true,true,"
                      "true,true,true,true]},{\"name\":\"x\",\"shape\":[5,2],\"datatype\":\"FP16\",\"parameters\":{\"binary_data_size\":20}}]}";
    char bigbody[1024];
    memcpy(bigbody, big, strlen(big));
    memset(bigbody + strlen(big), 0, 20);
    memset(&e, 0, sizeof e);
    CHECK(kserve_parse_infer(bigbody, strlen(big) + 20, strlen(big), &r, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, ts, &batch, &e) == -1);
    check_msg(&e, 400, "batch-size 5 for input");
    kserve_infer_request_free(&r);
    /* FP16 output asked for as JSON */
    const char *js3 = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP16\",\"parameters\":{\"binary_data_size\":4}},"
                      "{\"name\":\"m\",\"shape\":[1,2],\"datatype\":\"BOOL\",\"data\":[true,false]}],\"outputs\":[{\"name\":\"y\"}]}";
    jl = strlen(js3);
    memcpy(body, js3, jl);
    memset(body + jl, 0, 4);
    memset(&e, 0, sizeof e);
    CHECK(kserve_parse_infer(body, jl + 4, (long long)jl, &r, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, ts, &batch, &e) == -1);
    check_msg(&e, 400, "only returned as binary");
    kserve_infer_request_free(&r);
    /* binary size mismatch with the body */
    memset(&e, 0, sizeof e);
    CHECK(kserve_parse_infer(body, jl + 2, (long long)jl, &r, &e) == -1);
    check_msg(&e, 400, "binary_data_size 4 exceeds the 2 bytes");
    CHECK(kserve_parse_infer(body, jl + 6, (long long)jl, &r, &e) == -1);
    check_msg(&e, 400, "2 bytes of binary data that no input");
    config_model_free(&c);
}

static void test_raw_binary(void) {
    model_config c;
    serve_error err = {0};
    const char *ct = "name: \"r\" input [{name: \"x\" data_type: TYPE_FP32 dims: [-1, 2]}] output [{name: \"y\" data_type: TYPE_FP32 dims: [-1]}]";
    CHECK(config_model_parse(ct, strlen(ct), "config.pbtxt", &c, &err) == 0);
    float data[6] = {1, 2, 3, 4, 5, 6};
    kserve_infer_request r;
    serve_error e = {0};
    CHECK(kserve_parse_infer((const char *)data, sizeof data, 0, &r, &e) == 0 && r.raw);
    cinfer_tensor t;
    int64_t batch;
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == 0);
    CHECK(t.ndim == 2 && t.dims[0] == 3 && t.dims[1] == 2 && t.data == (void *)data);
    kserve_infer_request_free(&r);
    CHECK(kserve_parse_infer((const char *)data, 5, 0, &r, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == -1);
    check_msg(&e, 400, "not a whole number of elements");
    kserve_infer_request_free(&r);
    const char *js = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,3]}]}";
    CHECK(kserve_parse_infer(js, strlen(js), -1, &r, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == -1);
    check_msg(&e, 400, "unexpected shape for input 'x' for model 'r'. Expected [-1,2], got [1,3]");
    kserve_infer_request_free(&r);
    config_model_free(&c);
    CHECK(kserve_dtype_from_name("BYTES") == CINFER_DTYPE_STRING && !strcmp(kserve_dtype_name(CINFER_DTYPE_BFLOAT16), "BF16"));
    int64_t s[2] = {3, 4};
    CHECK(kserve_numel(s, 2) == 12);
}

/* A request with n inputs or n requested outputs named <p>0..<p>(n-1), where entry `dup_at` (if < n) repeats the
 * name of entry `dup_of` and, after it, entry `dup2_at` repeats `dup2_of` (a later duplicate must not be the one
 * reported). */
static char *many_names_request(int outputs, size_t n, size_t dup_at, size_t dup_of, size_t dup2_at, size_t dup2_of) {
    size_t cap = 128 + n * 80, len = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    len += (size_t)snprintf(b + len, cap - len, "{\"inputs\":[");
    if (outputs) len += (size_t)snprintf(b + len, cap - len, "{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],\"outputs\":[");
    for (size_t i = 0; i < n; i++) {
        size_t id = i == dup_at ? dup_of : i == dup2_at ? dup2_of : i;
        if (outputs) len += (size_t)snprintf(b + len, cap - len, "%s{\"name\":\"o%zu\"}", i ? "," : "", id);
        else len += (size_t)snprintf(b + len, cap - len, "%s{\"name\":\"i%zu\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}",
                                     i ? "," : "", id);
    }
    snprintf(b + len, cap - len, "]}");
    return b;
}

static void test_many_names(void) {
    const size_t none = (size_t)-1;
    /* around the switch from pairwise comparison to the hashed set, and at 80,000 */
    const size_t sizes[] = {2, 16, 17, 80000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        for (int outputs = 0; outputs <= 1; outputs++) {
            kserve_infer_request r;
            serve_error e = {0};
            char *b = many_names_request(outputs, n, none, 0, none, 0);
            CHECK(b && kserve_parse_infer(b, strlen(b), -1, &r, &e) == 0);
            CHECK((outputs ? r.num_outputs : r.num_inputs) == n);
            kserve_infer_request_free(&r);
            free(b);
            /* entry n-1 repeats entry 0; for n > 2 entry n-2 repeats entry 1 first, and is the one named */
            b = many_names_request(outputs, n, n - 1, 0, n > 2 ? n - 2 : none, 1);
            char want[64];
            snprintf(want, sizeof want, outputs ? "output 'o%d' is requested twice" : "input 'i%d' is given twice", n > 2 ? 1 : 0);
            memset(&e, 0, sizeof e);
            CHECK(b && kserve_parse_infer(b, strlen(b), -1, &r, &e) == -1);
            check_msg(&e, 400, want);
            free(b);
        }
    }
}

int main(void) {
    test_parse_json();
    test_many_names();
    test_binary_and_bind();
    test_raw_binary();
    TEST_MAIN_END();
}
