/* Unit tests of the config.pbtxt reader: the generic text-format parser (messages, lists, strings with escapes,
 * numbers, enums, comments, errors with positions) and the ModelConfig mapping (fields, defaults, errors). */
#include <stdlib.h>
#include <string.h>

#include "config_model.h"
#include "config_text.h"
#include "test_util.h"

static int parse_ok(const char *text, config_msg *m) {
    serve_error err = {0};
    int rc = config_text_parse(text, strlen(text), m, &err);
    if (rc) fprintf(stderr, "unexpected parse error: %s\n", err.msg);
    return rc == 0;
}

static void check_parse_error(const char *text, const char *needle) {
    config_msg m;
    serve_error err = {0};
    int rc = config_text_parse(text, strlen(text), &m, &err);
    CHECK(rc == -1 && err.code == SERVE_BAD_REQUEST);
    if (rc == -1 && !strstr(err.msg, needle)) {
        test_failures++;
        fprintf(stderr, "FAIL: error \"%s\" does not mention \"%s\"\n", err.msg, needle);
    }
    if (rc == 0) config_msg_free(&m);
}

static void test_text_format(void) {
    config_msg m;
    const char *t = "# a comment\n"
                    "name: \"a\\tb\\\"c\\x41\\101\" 'd'  # joined literals\n"
                    "dims: [ 1, -1, 0x10 ]\n"
                    "kind: KIND_GPU, f: 1.5e-3; neg: -inf\n"
                    "sub { inner < x: true > list: [{a: 1}, {a: 2}] }\n"
                    "sub2: { }\n";
    CHECK(parse_ok(t, &m));
    CHECK(m.num_fields == 9);
    CHECK(!strcmp(m.fields[0].name, "name") && m.fields[0].kind == CONFIG_STRING);
    CHECK(!strcmp(m.fields[0].text, "a\tb\"cAAd"));
    CHECK(m.fields[1].kind == CONFIG_NUMBER && !strcmp(m.fields[1].text, "1"));
    CHECK(!strcmp(m.fields[2].text, "-1") && !strcmp(m.fields[3].text, "0x10"));
    CHECK(m.fields[3].line == 3);
    CHECK(m.fields[4].kind == CONFIG_IDENT && !strcmp(m.fields[4].text, "KIND_GPU"));
    CHECK(!strcmp(m.fields[5].text, "1.5e-3"));
    CHECK(m.fields[6].kind == CONFIG_NUMBER && !strcmp(m.fields[6].text, "-inf"));
    const config_field *sub = &m.fields[7];
    CHECK(sub->kind == CONFIG_MESSAGE && sub->msg.num_fields == 3);
    CHECK(sub->msg.fields[0].kind == CONFIG_MESSAGE && sub->msg.fields[0].msg.num_fields == 1);
    CHECK(!strcmp(sub->msg.fields[2].name, "list") && !strcmp(sub->msg.fields[2].msg.fields[0].text, "2"));
    CHECK(m.fields[8].kind == CONFIG_MESSAGE && m.fields[8].msg.num_fields == 0);
    config_msg_free(&m);
    config_msg_free(NULL);

    check_parse_error("name: \"abc", "line 1, column 7: unterminated string");
    check_parse_error("a {\n b: 1\n", "line 1, column 3: message opened here is not closed");
    check_parse_error("a: [1, 2", "expected ',' or ']'");
    check_parse_error("a 1", "expected ':' or '{' after field name 'a'");
    check_parse_error("a: }", "line 1, column 4: expected a value for field 'a'");
    check_parse_error("}", "unexpected '}'");
    check_parse_error("a: \"\\q\"", "unknown escape");
    check_parse_error("a: -foo", "expected a number after '-'");
}

static int cfg_ok(const char *text, model_config *c) {
    serve_error err = {0};
    int rc = config_model_parse(text, strlen(text), "config.pbtxt", c, &err);
    if (rc) fprintf(stderr, "unexpected config error: %s\n", err.msg);
    return rc == 0;
}

static void check_cfg_error(const char *text, const char *needle) {
    model_config c;
    serve_error err = {0};
    int rc = config_model_parse(text, strlen(text), "config.pbtxt", &c, &err);
    CHECK(rc == -1 && err.code == SERVE_BAD_REQUEST);
    if (rc == -1 && !strstr(err.msg, needle)) {
        test_failures++;
        fprintf(stderr, "FAIL: error \"%s\" does not mention \"%s\"\n", err.msg, needle);
    }
    if (rc == 0) config_model_free(&c);
}

static void test_model_config(void) {
    model_config c;
    const char *t = "name: \"resnet\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 8\n"
                    "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 3, -1 ] format: FORMAT_NCHW } ]\n"
                    "output { name: \"y\" data_type: TYPE_FP16 dims: 10 }\n"
                    "instance_group [ { kind: KIND_GPU count: 2 gpus: [0, 1] } ]\n"
                    "dynamic_batching { preferred_batch_size: [4, 8] max_queue_delay_microseconds: 100 priority_levels: 2\n"
                    "  default_priority_level: 2 default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 5000\n"
                    "  allow_timeout_override: true max_queue_size: 16 } }\n"
                    "version_policy: { specific: { versions: [1, 3] } }\n"
                    "optimization { cuda { graphs: true } }\n"
                    "parameters { key: \"pad\" value { string_value: \"x:0\" } }\n"
                    "model_warmup [ { name: \"w\" batch_size: 2 inputs { key: \"x\" value { data_type: TYPE_FP32 dims: [3, 4]"
                    " zero_data: true } } } ]\n";
    CHECK(cfg_ok(t, &c));
    CHECK(!strcmp(c.name, "resnet") && c.max_batch_size == 8 && c.has_max_batch_size);
    CHECK(c.num_inputs == 1 && c.inputs[0].dtype == CINFER_DTYPE_FLOAT && c.inputs[0].ndims == 2 && c.inputs[0].dims[1] == -1);
    CHECK(!strcmp(c.inputs[0].format, "FORMAT_NCHW"));
    CHECK(c.num_outputs == 1 && c.outputs[0].dtype == CINFER_DTYPE_FLOAT16 && c.outputs[0].dims[0] == 10);
    CHECK(c.num_groups == 1 && c.groups[0].kind == CONFIG_KIND_GPU && c.groups[0].count == 2 && c.groups[0].num_gpus == 2);
    CHECK(c.dynamic_batching.present && c.dynamic_batching.num_preferred == 2 && c.dynamic_batching.max_queue_delay_us == 100);
    CHECK(c.dynamic_batching.priority_levels == 2 && c.dynamic_batching.default_queue_policy.max_queue_size == 16);
    CHECK(c.dynamic_batching.default_queue_policy.default_timeout_us == 5000);
    CHECK(c.version_policy.kind == CONFIG_VERSIONS_SPECIFIC && c.version_policy.num_specific == 2);
    CHECK(c.cuda_graphs == 1);
    CHECK(c.num_params == 1 && !strcmp(c.params[0].key, "pad") && !strcmp(c.params[0].value, "x:0"));
    CHECK(c.num_warmups == 1 && c.warmups[0].batch_size == 2 && c.warmups[0].num_inputs == 1);
    json_t *j = config_model_to_json(&c);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK(strstr(s, "\"max_batch_size\":8") != NULL);
    CHECK(strstr(s, "\"data_type\":\"TYPE_FP16\"") != NULL);
    CHECK(strstr(s, "\"model_transaction_policy\":{\"decoupled\":false}") != NULL);
    CHECK(strstr(s, "\"response_cache\":{\"enable\":false}") != NULL);
    CHECK(strstr(s, "\"specific\":{\"versions\":[1,3]}") != NULL);
    free(s);
    json_decref(j);
    config_model_free(&c);
    config_model_free(NULL);

    CHECK(cfg_ok("", &c));
    CHECK(c.version_policy.kind == CONFIG_VERSIONS_LATEST && c.version_policy.num_versions == 1 && c.max_batch_size == 0);
    config_model_free(&c);

    check_cfg_error("max_batch_size: 4\nbogus: 1\n", "config.pbtxt: line 2, column 1: field 'ModelConfig': unknown field 'bogus'");
    check_cfg_error("input { name: \"x\" data_type: TYPE_FLOAT dims: 1 }", "'TYPE_FLOAT' is not a data type");
    check_cfg_error("input { name: \"x\" data_type: TYPE_FP32 }", "needs dims");
    check_cfg_error("max_batch_size: -1", "out of range");
    check_cfg_error("max_batch_size: 1 max_batch_size: 2", "given more than once");
    check_cfg_error("max_batch_size: \"4\"", "expected an integer, got a string");
    check_cfg_error("sequence_batching { }", "sequence batching is not supported");
    check_cfg_error("platform: \"tensorrt_plan\"", "'tensorrt_plan' is not supported");
    check_cfg_error("instance_group { kind: KIND_TPU }", "'KIND_TPU' is not one of KIND_AUTO, KIND_GPU, KIND_CPU");
    check_cfg_error("max_batch_size: 2 dynamic_batching { preferred_batch_size: 4 }", "exceeds max_batch_size 2");
    check_cfg_error("input { name: \"x\" data_type: TYPE_FP32 dims: 1 } input { name: \"x\" data_type: TYPE_FP32 dims: 1 }",
                    "listed twice");
    check_cfg_error("version_policy { latest { num_versions: 0 } }", "out of range");
    check_cfg_error("input { name: \"x\" data_type: TYPE_FP32 dims: 1 reshape { shape: 1 } }", "reshape is not supported");
    CHECK(config_dtype_from_type_name("TYPE_BF16") == CINFER_DTYPE_BFLOAT16);
    CHECK(!strcmp(config_type_name(CINFER_DTYPE_STRING), "TYPE_STRING"));
}

int main(void) {
    test_text_format();
    test_model_config();
    TEST_MAIN_END();
}
