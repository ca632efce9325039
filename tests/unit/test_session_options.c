/* Unit tests of the session options table (src/runtime/session_options.c): every listed option is documented, has
 * a default the parser takes and fills its own field; the error texts come from the table, per type and for an
 * unknown key. A key added to the table without a doc, or without a case in expected_fields, fails here. */
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "cinfer/cinfer.h"
#include "runtime/session_options.h"
#include "test_util.h"

static cinfer_status parse1(const char *key, const char *value, session_options *out) {
    return session_options_parse(&key, &value, 1, out);
}

static bool nonempty(const char *s) { return s && s[0]; }

/* Every entry of the listing: documented, typed, its values and default said, keys unique; past the end: not found. */
static void test_listing(void) {
    size_t n = cinfer_num_session_options();
    CHECK(n >= 11);
    for (size_t i = 0; i < n; i++) {
        cinfer_option_info info;
        CHECK(cinfer_session_option_info(i, &info) == CINFER_OK);
        CHECK(nonempty(info.key));
        CHECK(nonempty(info.doc) && strlen(info.doc) > 20);
        CHECK(nonempty(info.values));
        CHECK(nonempty(info.default_value));
        CHECK(strcmp(info.type, "bool") == 0 || strcmp(info.type, "int") == 0 || strcmp(info.type, "enum") == 0);
        CHECK(!info.is_prefix || info.key[strlen(info.key) - 1] == '.');
        for (size_t j = 0; j < i; j++) {
            cinfer_option_info other;
            cinfer_session_option_info(j, &other);
            CHECK(strcmp(other.key, info.key) != 0);
        }
    }
    cinfer_option_info info;
    CHECK(cinfer_session_option_info(n, &info) == CINFER_ERR_NOT_FOUND);
    CHECK_ERROR_MENTIONS("out of range");
    CHECK(cinfer_session_option_info(0, NULL) == CINFER_ERR_INVALID_ARGUMENT);
}

/* Giving an option its listed default changes nothing; "none" means leaving it out. */
static void test_defaults(void) {
    session_options none, given;
    CHECK(session_options_parse(NULL, NULL, 0, &none) == CINFER_OK);
    CHECK(none.threads == 0 && none.precision == PRECISION_FP32 && !none.deterministic && none.cuda_graphs &&
          none.gpu_wait == GPU_WAIT_SPIN && !none.profile && none.guard_bytes == 0 && none.copy_chunks == 0 &&
          !none.timeline && none.max_batch == 0 && none.num_dims == 0);
    for (size_t i = 0; i < cinfer_num_session_options(); i++) {
        cinfer_option_info info;
        cinfer_session_option_info(i, &info);
        if (strcmp(info.default_value, "none") == 0) continue;
        CHECK(parse1(info.key, info.default_value, &given) == CINFER_OK);
        CHECK(given.threads == none.threads && given.precision == none.precision &&
              given.deterministic == none.deterministic && given.cuda_graphs == none.cuda_graphs &&
              given.gpu_wait == none.gpu_wait && given.profile == none.profile &&
              given.guard_bytes == none.guard_bytes && given.copy_chunks == none.copy_chunks &&
              given.timeline == none.timeline && given.max_batch == none.max_batch && given.num_dims == 0);
    }
}

/* One case per listed key: a value other than the default, and whether it landed in that option's field. */
static bool check_field(const char *key, const session_options *o) {
    if (strcmp(key, "threads") == 0) return o->threads == 7;
    if (strcmp(key, "precision") == 0) return o->precision == PRECISION_BF16;
    if (strcmp(key, "deterministic") == 0) return o->deterministic;
    if (strcmp(key, "cuda_graphs") == 0) return !o->cuda_graphs;
    if (strcmp(key, "gpu_wait") == 0) return o->gpu_wait == GPU_WAIT_BLOCK;
    if (strcmp(key, "profile") == 0) return o->profile;
    if (strcmp(key, "guard_bytes") == 0) return o->guard_bytes == 64;
    if (strcmp(key, "copy_chunks") == 0) return o->copy_chunks == 3;
    if (strcmp(key, "timeline") == 0) return o->timeline;
    if (strcmp(key, "max_batch") == 0) return o->max_batch == 32;
    if (strcmp(key, "dim.") == 0)
        return o->num_dims == 1 && strcmp(o->dim_names[0], "seq") == 0 && o->dim_values[0] == 128;
    fprintf(stderr, "FAIL: session option '%s' has no case in test_session_options.c\n", key);
    return false;
}

static void test_each_option_fills_its_field(void) {
    static const struct {
        const char *key, *value;
    } given[] = {{"threads", "7"},  {"precision", "bf16"},   {"deterministic", "1"}, {"cuda_graphs", "0"},
                 {"gpu_wait", "block"}, {"profile", "1"}, {"guard_bytes", "64"}, {"copy_chunks", "3"},
                 {"timeline", "1"}, {"max_batch", "32"}, {"dim.seq", "128"}};
    for (size_t i = 0; i < cinfer_num_session_options(); i++) {
        cinfer_option_info info;
        cinfer_session_option_info(i, &info);
        const char *value = NULL, *key = NULL;
        for (size_t k = 0; k < sizeof given / sizeof given[0]; k++)
            if (info.is_prefix ? strncmp(given[k].key, info.key, strlen(info.key)) == 0
                               : strcmp(given[k].key, info.key) == 0)
                key = given[k].key, value = given[k].value;
        session_options o;
        CHECK(key && parse1(key, value, &o) == CINFER_OK && check_field(info.key, &o));
    }
}

static void test_error_texts(void) {
    session_options o;
    CHECK(parse1("timeline", "yes", &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("session option 'timeline': 'yes' is not 0 or 1");
    CHECK(parse1("precision", "fp8", &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("session option 'precision': 'fp8' is not fp32, tf32, fp16 or bf16");
    CHECK(parse1("threads", "1025", &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("session option 'threads': '1025' is not a count from 0 to 1024");
    CHECK(parse1("threads", "4x", &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("'4x' is not a count from 0 to 1024");
    CHECK(parse1("max_batch", "0", &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("session option 'max_batch': '0' is not a batch size from 1 to 1099511627776");
    CHECK(parse1("dim.seq", "0", &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("session option 'dim.seq': '0' is not a size >= 1");
    /* an unknown key, and the bare prefix, list every listed key */
    const char *unknown[] = {"thread", "dim."};
    for (size_t u = 0; u < 2; u++) {
        CHECK(parse1(unknown[u], "1", &o) == CINFER_ERR_INVALID_ARGUMENT);
        char head[64];
        snprintf(head, sizeof head, "unknown session option '%s' (known: threads, ", unknown[u]);
        CHECK_ERROR_MENTIONS(head);
        for (size_t i = 0; i < cinfer_num_session_options(); i++) {
            cinfer_option_info info;
            cinfer_session_option_info(i, &info);
            char listed[64];
            snprintf(listed, sizeof listed, "%s%s", info.key, info.is_prefix ? "NAME" : "");
            CHECK_ERROR_MENTIONS(listed);
        }
    }
}

static void test_repeats_and_dims(void) {
    session_options o;
    const char *keys[] = {"precision", "dim.seq", "precision", "dim.batch"};
    const char *values[] = {"fp16", "8", "tf32", "4"};
    CHECK(session_options_parse(keys, values, 4, &o) == CINFER_OK);
    CHECK(o.precision == PRECISION_TF32); /* the last one wins */
    CHECK(o.num_dims == 2 && strcmp(o.dim_names[1], "batch") == 0 && o.dim_values[1] == 4);
    const char *many_keys[SESSION_MAX_DIMS + 1], *many_values[SESSION_MAX_DIMS + 1];
    for (int i = 0; i <= SESSION_MAX_DIMS; i++) many_keys[i] = "dim.d", many_values[i] = "2";
    CHECK(session_options_parse(many_keys, many_values, SESSION_MAX_DIMS + 1, &o) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("more than 64 dim.NAME options");
}

int main(void) {
    test_listing();
    test_defaults();
    test_each_option_fills_its_field();
    test_error_texts();
    test_repeats_and_dims();
    TEST_MAIN_END();
}
