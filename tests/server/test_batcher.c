/* Unit tests of the dynamic batcher without threads or clocks: batch formation over a model queue (Triton's
 * preferred-size / max-delay rule, shape groups, priorities, caps, expired requests, models that do not batch),
 * the padding parameters (parsing and errors), gathering with padding and scattering with trimming. */
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "config_model.h"
#include "copy_pool.h"
#include "model_queue.h"
#include "test_util.h"

#define MS 1000000ull

static int parse_cfg(const char *text, model_config *cfg) {
    serve_error err = {0};
    int rc = config_model_parse(text, strlen(text), "config.pbtxt", cfg, &err);
    if (rc) fprintf(stderr, "unexpected config error: %s\n", err.msg);
    return rc == 0;
}

/* A request with one FP32 input x of shape [rows, cols] (data not needed for formation). */
typedef struct test_req {
    model_request r;
    cinfer_tensor in[2];
} test_req;

static void make_req(test_req *t, int64_t rows, int64_t cols, uint64_t arrival, uint32_t priority) {
    memset(t, 0, sizeof *t);
    t->in[0] = (cinfer_tensor){.name = "x", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {rows, cols}};
    t->r.inputs = t->in;
    t->r.num_inputs = 1;
    t->r.batch_size = rows;
    t->r.arrival_ns = arrival;
    t->r.priority = priority;
}

static model_queue_policy one_level = {.levels = 1};

static void push(model_queue *q, test_req *t) {
    serve_error e = {0};
    CHECK(model_queue_push(q, &t->r, "m", &e) == 0);
}

static const char *BATCH_CFG = "name: \"m\" max_batch_size: 16 input { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] } "
                               "output { name: \"y\" data_type: TYPE_FP32 dims: [ -1 ] } ";

static void test_preferred_and_delay(void) {
    model_config cfg;
    char text[1024];
    serve_error err = {0};
    snprintf(text, sizeof text, "%s dynamic_batching { preferred_batch_size: [ 8, 4 ] max_queue_delay_microseconds: 1000 }",
             BATCH_CFG);
    CHECK(parse_cfg(text, &cfg));
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == 0);
    CHECK(p.dynamic && p.max_batch == 8 && p.num_preferred == 2 && p.preferred[0] == 4 && p.max_delay_ns == MS);
    model_queue q;
    CHECK(model_queue_init(&q, &one_level) == 0);
    batcher_batch b;
    CHECK(batcher_batch_init(&b, &p) == 0 && b.cap == 8);
    uint64_t wake;
    test_req r[12];
    /* 5 single requests: the largest preferred size that can be formed (4) goes at once, no waiting */
    for (int i = 0; i < 5; i++) make_req(&r[i], 1, 3, 100 + (uint64_t)i, 0), push(&q, &r[i]);
    CHECK(batcher_form(&p, &q, 200, &b, &wake) == BATCHER_READY);
    CHECK(b.n == 4 && b.total == 4 && b.reqs[0] == &r[0].r && b.reqs[3] == &r[3].r);
    /* one left: not a preferred size, the batch could grow: wait until its delay runs out */
    CHECK(batcher_form(&p, &q, 300, &b, &wake) == BATCHER_WAIT && b.n == 0 && wake == r[4].r.arrival_ns + MS);
    CHECK(batcher_form(&p, &q, r[4].r.arrival_ns + MS, &b, &wake) == BATCHER_READY && b.n == 1 && b.reqs[0] == &r[4].r);
    CHECK(batcher_form(&p, &q, 0, &b, &wake) == BATCHER_EMPTY);
    /* 3 + 3 + 3 rows: 6 is not preferred, 9 exceeds the cap (8): the batch cannot grow, so 6 goes now */
    for (int i = 0; i < 3; i++) make_req(&r[i], 3, 3, 1000 + (uint64_t)i, 0), push(&q, &r[i]);
    CHECK(batcher_form(&p, &q, 1010, &b, &wake) == BATCHER_READY && b.n == 2 && b.total == 6);
    CHECK(batcher_form(&p, &q, 1010, &b, &wake) == BATCHER_WAIT && q.size == 1);
    make_req(&r[3], 5, 3, 1020, 0), push(&q, &r[3]); /* 3 + 5 = 8, the largest preferred size */
    CHECK(batcher_form(&p, &q, 1030, &b, &wake) == BATCHER_READY && b.n == 2 && b.total == 8);
    /* a request larger than the cap (16 > 8) runs alone, right away */
    make_req(&r[0], 16, 3, 2000, 0), push(&q, &r[0]);
    CHECK(batcher_form(&p, &q, 2000, &b, &wake) == BATCHER_READY && b.n == 1 && b.total == 16);
    /* a closing queue sends what it has without waiting */
    make_req(&r[0], 1, 3, 3000, 0), push(&q, &r[0]);
    model_queue_close(&q);
    CHECK(batcher_form(&p, &q, 3000, &b, &wake) == BATCHER_READY && b.n == 1);
    batcher_batch_free(&b);
    model_queue_destroy(&q);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

static void test_no_preferred(void) {
    model_config cfg;
    char text[1024];
    serve_error err = {0};
    snprintf(text, sizeof text, "%s dynamic_batching { }", BATCH_CFG);
    CHECK(parse_cfg(text, &cfg));
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == 0 && p.max_batch == 16 && p.max_delay_ns == 0);
    model_queue q;
    CHECK(model_queue_init(&q, &one_level) == 0);
    batcher_batch b;
    CHECK(batcher_batch_init(&b, &p) == 0);
    test_req r[20];
    uint64_t wake;
    /* no delay: as large as possible up to max_batch_size, and whatever is there otherwise */
    for (int i = 0; i < 20; i++) make_req(&r[i], 1, 2, 10, 0), push(&q, &r[i]);
    CHECK(batcher_form(&p, &q, 10, &b, &wake) == BATCHER_READY && b.n == 16);
    CHECK(batcher_form(&p, &q, 10, &b, &wake) == BATCHER_READY && b.n == 4 && b.reqs[0] == &r[16].r);
    batcher_batch_free(&b);
    model_queue_destroy(&q);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

static void test_groups_priorities_expiry(void) {
    model_config cfg;
    char text[1024];
    serve_error err = {0};
    snprintf(text, sizeof text, "%s dynamic_batching { preferred_batch_size: 3 max_queue_delay_microseconds: 1000 "
                                "priority_levels: 2 default_priority_level: 2 }", BATCH_CFG);
    CHECK(parse_cfg(text, &cfg));
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == 0 && p.max_batch == 3);
    model_queue q;
    model_queue_policy two = {.levels = 2, .default_level = 2};
    CHECK(model_queue_init(&q, &two) == 0);
    batcher_batch b;
    CHECK(batcher_batch_init(&b, &p) == 0);
    test_req r[8];
    uint64_t wake;
    /* shapes [1,3] and [1,5] interleaved: never mixed, each group batches its own */
    make_req(&r[0], 1, 3, 100, 0), push(&q, &r[0]);
    make_req(&r[1], 1, 5, 101, 0), push(&q, &r[1]);
    make_req(&r[2], 1, 5, 102, 0), push(&q, &r[2]);
    make_req(&r[3], 1, 3, 103, 0), push(&q, &r[3]);
    make_req(&r[4], 1, 5, 104, 0), push(&q, &r[4]);
    /* the [1,3] group (first in line) waits for its delay, but the [1,5] group reached a preferred size: it goes */
    CHECK(batcher_form(&p, &q, 200, &b, &wake) == BATCHER_READY && b.n == 3);
    CHECK(b.reqs[0] == &r[1].r && b.reqs[1] == &r[2].r && b.reqs[2] == &r[4].r);
    CHECK(batcher_form(&p, &q, 200, &b, &wake) == BATCHER_WAIT && wake == 100 + MS);
    /* a high-priority request of the same shape joins ahead of the waiting ones and completes the preferred size */
    make_req(&r[5], 1, 3, 300, 1), push(&q, &r[5]);
    CHECK(batcher_form(&p, &q, 300, &b, &wake) == BATCHER_READY && b.n == 3);
    CHECK(b.reqs[0] == &r[5].r && b.reqs[1] == &r[0].r && b.reqs[2] == &r[3].r);
    /* expired requests are taken out (never batched) and reported; the rest still batches */
    make_req(&r[0], 1, 3, 400, 0), r[0].r.timeout_us = 10, push(&q, &r[0]);
    make_req(&r[1], 1, 3, 401, 0), push(&q, &r[1]);
    make_req(&r[2], 1, 3, 402, 0), r[2].r.timeout_us = 5, push(&q, &r[2]);
    CHECK(r[0].r.deadline_ns == 400 + 10000);
    CHECK(batcher_form(&p, &q, 402 + MS, &b, &wake) == BATCHER_READY && b.n == 1 && b.reqs[0] == &r[1].r);
    CHECK(b.expired == &r[0].r && r[0].r.next == &r[2].r && r[2].r.next == NULL);
    CHECK(q.size == 0 && q.total_batch == 0);
    /* priority out of range: 400 */
    serve_error e = {0};
    make_req(&r[6], 1, 3, 500, 3);
    CHECK(model_queue_push(&q, &r[6].r, "m", &e) == -1 && e.code == 400 && strstr(e.msg, "priority 3 is out of range"));
    batcher_batch_free(&b);
    model_queue_destroy(&q);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

static void test_queue_policy(void) {
    model_queue q;
    model_queue_policy pol = {.levels = 1, .max_size = 2, .default_timeout_us = 100, .full_status = 429};
    CHECK(model_queue_init(&q, &pol) == 0);
    test_req r[3];
    serve_error e = {0};
    make_req(&r[0], 1, 1, 1000, 0), r[0].r.timeout_us = 500, push(&q, &r[0]);
    make_req(&r[1], 1, 1, 1000, 0), r[1].r.timeout_us = 50, push(&q, &r[1]);
    CHECK(r[0].r.deadline_ns == 1000 + 100000); /* may not lengthen the default without allow_timeout_override */
    CHECK(r[1].r.deadline_ns == 1000 + 50000);  /* may shorten it */
    CHECK(r[0].r.seq == 0 && r[1].r.seq == 1);
    make_req(&r[2], 1, 1, 1000, 0);
    CHECK(model_queue_push(&q, &r[2].r, "m", &e) == -1 && e.code == 429 &&
          !strcmp(e.msg, "exceeds maximum queue size: model 'm' already has 2 queued requests"));
    model_queue_close(&q);
    CHECK(model_queue_push(&q, &r[2].r, "m", &e) == -1 && e.code == 503);
    model_queue_destroy(&q);
    pol = (model_queue_policy){.levels = 1, .default_timeout_us = 100, .allow_timeout_override = 1};
    CHECK(model_queue_init(&q, &pol) == 0);
    make_req(&r[0], 1, 1, 1000, 0), r[0].r.timeout_us = 500, push(&q, &r[0]);
    CHECK(r[0].r.deadline_ns == 1000 + 500000);
    model_queue_destroy(&q);
}

static void test_not_dynamic(void) {
    model_config cfg;
    serve_error err = {0};
    CHECK(parse_cfg(BATCH_CFG, &cfg)); /* max_batch_size 16 but no dynamic_batching: every request alone, as Triton */
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == 0 && !p.dynamic && p.max_batch == 1);
    model_queue q;
    CHECK(model_queue_init(&q, &one_level) == 0);
    batcher_batch b;
    CHECK(batcher_batch_init(&b, &p) == 0);
    test_req r[3];
    uint64_t wake;
    for (int i = 0; i < 3; i++) make_req(&r[i], 2, 3, 10, 0), push(&q, &r[i]);
    for (int i = 0; i < 3; i++)
        CHECK(batcher_form(&p, &q, 10, &b, &wake) == BATCHER_READY && b.n == 1 && b.reqs[0] == &r[i].r && b.total == 2);
    CHECK(batcher_form(&p, &q, 10, &b, &wake) == BATCHER_EMPTY);
    batcher_batch_free(&b);
    model_queue_destroy(&q);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

static const char *PAD_CFG = "name: \"p\" max_batch_size: 8 dynamic_batching { } "
                             "input [ { name: \"tok\" data_type: TYPE_INT64 dims: [ -1, 2 ] },"
                             "        { name: \"mask\" data_type: TYPE_FP32 dims: [ -1 ] } ] "
                             "output [ { name: \"pooled\" data_type: TYPE_FP32 dims: [ 2 ] },"
                             "         { name: \"per_tok\" data_type: TYPE_FP32 dims: [ -1 ] } ] ";

static void check_policy_error(const char *params, const char *needle) {
    model_config cfg;
    char text[2048];
    serve_error err = {0};
    snprintf(text, sizeof text, "%s %s", PAD_CFG, params);
    if (!parse_cfg(text, &cfg)) {
        test_failures++;
        return;
    }
    batcher_policy p;
    int rc = batcher_policy_init(&p, &cfg, &err);
    CHECK(rc == -1 && err.code == SERVE_BAD_REQUEST);
    if (rc == -1 && !strstr(err.msg, needle)) {
        test_failures++;
        fprintf(stderr, "FAIL: error \"%s\" does not mention \"%s\"\n", err.msg, needle);
    }
    if (rc == 0) batcher_policy_free(&p);
    config_model_free(&cfg);
}

#define PARAM(k, v) "parameters { key: \"" k "\" value { string_value: \"" v "\" } } "

static void test_padding_params(void) {
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:0=0"), "padding needs parameter 'cinfer_pad_mask'");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:1=0") PARAM("cinfer_pad_mask", "tok"),
                       "dim 1 of 'tok' (dims [-1, 2]) is fixed at 2; only variable (-1) dims can be padded");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:2=0") PARAM("cinfer_pad_mask", "tok"), "dim 2 does not exist");
    check_policy_error(PARAM("cinfer_pad_inputs", "nope:0=0") PARAM("cinfer_pad_mask", "nope"),
                       "'nope' is not an input of the model");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:0=300000000000000000000") PARAM("cinfer_pad_mask", "tok"),
                       "pad value '300000000000000000000' is not a TYPE_INT64 value");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok=0") PARAM("cinfer_pad_mask", "tok"), "is not INPUT:DIM=VALUE");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:0=0") PARAM("cinfer_pad_mask", "mask"), "not listed in cinfer_pad_inputs");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:0=0, mask:0=0") PARAM("cinfer_pad_mask", "mask")
                           PARAM("cinfer_pad_outputs", "pooled:0=mask:0"),
                       "dim 0 of 'pooled' (dims [2]) is fixed at 2");
    check_policy_error(PARAM("cinfer_pad_inputs", "tok:0=0, mask:0=0") PARAM("cinfer_pad_mask", "mask")
                           PARAM("cinfer_pad_outputs", "per_tok:0=mask:1"),
                       "dim 1 of input 'mask' is not padded");
    check_policy_error(PARAM("cinfer_pad_mask", "mask"), "parameter 'cinfer_pad_mask' needs 'cinfer_pad_inputs'");
    /* padding needs the dynamic batcher */
    model_config cfg;
    serve_error err = {0};
    CHECK(parse_cfg("name: \"p\" max_batch_size: 0 input { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] } "
                    PARAM("cinfer_pad_inputs", "x:0=0") PARAM("cinfer_pad_mask", "x"), &cfg));
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == -1 && strstr(err.msg, "needs a batching model with dynamic batching"));
    config_model_free(&cfg);
}

/* Parses `text` and builds its policy; false (counted as a failure, the config freed) when either fails. */
static bool policy_from(const char *text, model_config *cfg, batcher_policy *p) {
    serve_error err = {0};
    if (!parse_cfg(text, cfg)) {
        test_failures++;
        return false;
    }
    if (batcher_policy_init(p, cfg, &err) != 0) {
        fprintf(stderr, "unexpected: %s\n", err.msg);
        test_failures++;
        config_model_free(cfg);
        return false;
    }
    return true;
}

static void test_gather_scatter_padded(void) {
    model_config cfg;
    char text[2048];
    snprintf(text, sizeof text, "%s %s", PAD_CFG,
             PARAM("cinfer_pad_inputs", " tok:0=-1 , mask:0=0 ") PARAM("cinfer_pad_mask", "mask")
                 PARAM("cinfer_pad_outputs", "per_tok:0=mask:0"));
    batcher_policy p;
    if (!policy_from(text, &cfg, &p)) return;
    CHECK(p.pad[0].dims == 2u && p.pad[1].dims == 2u && p.mask_input == 1);
    int64_t m1 = -1;
    CHECK(!memcmp(p.pad[0].value, &m1, 8));
    CHECK(p.trim[0].dim == 0 && p.trim[1].dim == 1 && p.trim[1].input == 1 && p.trim[1].input_dim == 1);
    /* request A: 1 row, length 2; request B: 2 rows, length 3. Different lengths batch together. */
    int64_t tokA[1 * 2 * 2] = {1, 2, 3, 4}, tokB[2 * 3 * 2] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    float maskA[2] = {1, 1}, maskB[6] = {1, 1, 1, 1, 1, 0};
    cinfer_tensor inA[2] = {{.name = "tok", .dtype = CINFER_DTYPE_INT64, .ndim = 3, .dims = {1, 2, 2}, .data = tokA},
                            {.name = "mask", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 2}, .data = maskA}};
    cinfer_tensor inB[2] = {{.name = "tok", .dtype = CINFER_DTYPE_INT64, .ndim = 3, .dims = {2, 3, 2}, .data = tokB},
                            {.name = "mask", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {2, 3}, .data = maskB}};
    model_request a = {.inputs = inA, .num_inputs = 2, .batch_size = 1}, bq = {.inputs = inB, .num_inputs = 2, .batch_size = 2};
    CHECK(batcher_compatible(&p, &a, &bq));
    model_request *reqs[2] = {&a, &bq};
    batcher_batch b = {.reqs = reqs, .n = 2, .cap = 2, .total = 3};
    batcher_scratch s = {0};
    cinfer_tensor in[2];
    serve_error e = {0};
    CHECK(batcher_gather(&p, &b, &s, in, &e) == 0);
    CHECK(in[0].ndim == 3 && in[0].dims[0] == 3 && in[0].dims[1] == 3 && in[0].dims[2] == 2);
    CHECK(in[1].dims[0] == 3 && in[1].dims[1] == 3);
    const int64_t want_tok[18] = {1, 2, 3, 4, -1, -1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const float want_mask[9] = {1, 1, 0, 1, 1, 1, 1, 1, 0};
    CHECK(!memcmp(in[0].data, want_tok, sizeof want_tok));
    CHECK(!memcmp(in[1].data, want_mask, sizeof want_mask));
    /* outputs as the engine would return them: pooled [3, 2], per_tok [3, 3] */
    cinfer_tensor *outs = calloc(2, sizeof *outs);
    float *pooled = aligned_alloc(64, 64), *per_tok = aligned_alloc(64, 64);
    for (int i = 0; i < 6; i++) pooled[i] = (float)i;
    for (int i = 0; i < 9; i++) per_tok[i] = 10.0f + (float)i;
    outs[0] = (cinfer_tensor){.name = "pooled", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {3, 2}, .data = pooled};
    outs[1] = (cinfer_tensor){.name = "per_tok", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {3, 3}, .data = per_tok};
    CHECK(batcher_scatter(&p, &b, outs, MODEL_OUTPUTS_MALLOCED, "p", &cfg, &e) == 0);
    CHECK(a.num_outputs == 2 && a.batch && a.batch == bq.batch);
    CHECK(a.outputs[0].dims[0] == 1 && a.outputs[0].data == pooled);              /* a view: rows 0..1 */
    CHECK(bq.outputs[0].dims[0] == 2 && bq.outputs[0].data == pooled + 2);        /* rows 1..3 */
    CHECK(a.outputs[1].ndim == 2 && a.outputs[1].dims[0] == 1 && a.outputs[1].dims[1] == 2); /* trimmed to length 2 */
    CHECK(((float *)a.outputs[1].data)[0] == 10 && ((float *)a.outputs[1].data)[1] == 11);
    CHECK(bq.outputs[1].dims[1] == 3 && bq.outputs[1].data == per_tok + 3); /* full length: a view */
    model_request_free_outputs(&a);
    model_request_free_outputs(&bq); /* the last reference frees the engine outputs (ASan checks) */
    CHECK(a.outputs == NULL && bq.batch == NULL);
    /* an output that does not keep the batch dim is refused with a message naming it */
    outs = calloc(2, sizeof *outs);
    outs[0] = (cinfer_tensor){.name = "pooled", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 2}, .data = aligned_alloc(64, 64)};
    outs[1] = (cinfer_tensor){.name = "per_tok", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {3, 3}, .data = aligned_alloc(64, 64)};
    CHECK(batcher_scatter(&p, &b, outs, MODEL_OUTPUTS_MALLOCED, "p", &cfg, &e) == -1 && strstr(e.msg, "output 'pooled' has first dim 1 for a batch of 3"));
    CHECK(a.outputs == NULL && bq.outputs == NULL);
    batcher_scratch_free(&s);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

/* A GPU lane (padding to the buckets) takes a bucket-sized prefix rather than padding a large batch by more than a
 * quarter; CPU lanes, small batches and nearly full buckets take everything as before. */
static void test_bucket_split(void) {
    model_config cfg;
    char text[1024];
    serve_error err = {0};
    snprintf(text, sizeof text, "name: \"m\" max_batch_size: 256 input { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] } "
             "output { name: \"y\" data_type: TYPE_FP32 dims: [ -1 ] } dynamic_batching { max_queue_delay_microseconds: 1000 }");
    CHECK(parse_cfg(text, &cfg));
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == 0 && p.max_batch == 256);
    model_queue q;
    CHECK(model_queue_init(&q, &one_level) == 0);
    batcher_batch b;
    CHECK(batcher_batch_init(&b, &p) == 0);
    static test_req r[256];
    uint64_t wake, late = 10 + 2 * MS; /* every request's delay is over */
    struct { int queued, gpu, first, second; } cases[] = {
        {72, 1, 64, 8},  /* bucket 128 would pad 56 rows: 64 now, 8 next */
        {72, 0, 72, 0},  /* a CPU lane does not pad, so it takes everything */
        {40, 1, 32, 8},  /* bucket 64 would pad 24 > 16 */
        {56, 1, 56, 0},  /* bucket 64 pads 8 <= 16: one batch */
        {5, 1, 5, 0},    /* the prefix 4 is below BATCHER_SPLIT_MIN: pad to 8 */
        {256, 1, 256, 0}, /* full */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int i = 0; i < cases[c].queued; i++) make_req(&r[i], 1, 2, 10, 0), push(&q, &r[i]);
        CHECK(batcher_form_capped(&p, &q, late, 0, cases[c].gpu, &b, &wake) == BATCHER_READY && b.n == (size_t)cases[c].first);
        if (cases[c].second)
            CHECK(batcher_form_capped(&p, &q, late, 0, cases[c].gpu, &b, &wake) == BATCHER_READY &&
                  b.n == (size_t)cases[c].second && b.reqs[0] == &r[cases[c].first].r);
        CHECK(batcher_form_capped(&p, &q, late, 0, cases[c].gpu, &b, &wake) == BATCHER_EMPTY);
    }
    /* before the delay is over nothing is taken short of the max batch */
    for (int i = 0; i < 72; i++) make_req(&r[i], 1, 2, 10, 0), push(&q, &r[i]);
    CHECK(batcher_form_capped(&p, &q, 20, 0, 1, &b, &wake) == BATCHER_WAIT && wake == 10 + MS);
    CHECK(batcher_form_capped(&p, &q, late, 0, 1, &b, &wake) == BATCHER_READY && b.n == 64);
    CHECK(batcher_form_capped(&p, &q, late, 0, 1, &b, &wake) == BATCHER_READY && b.n == 8);
    batcher_batch_free(&b);
    model_queue_destroy(&q);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

/* The gather's split copy: odd-sized jobs over 1 MiB in all, cut between 4 threads at 4 KiB boundaries, arrive
 * byte for byte; below the threshold and without a pool the caller copies alone. */
static void test_copy_pool(void) {
    copy_pool *pool = copy_pool_create(3);
    CHECK(pool != NULL);
    size_t sizes[] = {1, 700001, 4096, 12345, 999999, 3, 65536};
    enum { NJ = sizeof sizes / sizeof sizes[0] };
    copy_job jobs[NJ];
    unsigned char *src[NJ], *dst[NJ];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NJ; i++) {
            src[i] = malloc(sizes[i]);
            dst[i] = calloc(1, sizes[i] + 1);
            for (size_t b = 0; b < sizes[i]; b++) src[i][b] = (unsigned char)(b * 31 + i * 7 + round);
            dst[i][sizes[i]] = 0xAB; /* guard byte */
            jobs[i] = (copy_job){dst[i], src[i], sizes[i]};
        }
        copy_pool_run(round == 2 ? NULL : pool, jobs, round == 1 ? 2 : NJ); /* round 1: 700 KB, under the threshold */
        for (int i = 0; i < NJ; i++) {
            int copied = round == 1 ? i < 2 : 1;
            CHECK(memcmp(dst[i], src[i], sizes[i]) == 0 || !copied);
            CHECK(dst[i][sizes[i]] == 0xAB);
            free(src[i]);
            free(dst[i]);
        }
    }
    /* a batch gathered through the pool, with bucket rows after it: the rows of both requests in order, then copies
     * of the first row */
    model_config cfg;
    char text[1024];
    serve_error err = {0};
    snprintf(text, sizeof text, "%s dynamic_batching { }", BATCH_CFG);
    CHECK(parse_cfg(text, &cfg));
    batcher_policy p;
    CHECK(batcher_policy_init(&p, &cfg, &err) == 0);
    enum { COLS = 50000 }; /* 200 KB per row: 3 + 2 rows, 1 MB in all */
    float *xa = malloc(3 * COLS * sizeof *xa), *xb = malloc(2 * COLS * sizeof *xb);
    for (size_t i = 0; i < 3 * COLS; i++) xa[i] = (float)i;
    for (size_t i = 0; i < 2 * COLS; i++) xb[i] = -(float)i;
    cinfer_tensor ta = {.name = "x", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {3, COLS}, .data = xa};
    cinfer_tensor tb = {.name = "x", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {2, COLS}, .data = xb};
    model_request ra = {.inputs = &ta, .num_inputs = 1, .batch_size = 3}, rb = {.inputs = &tb, .num_inputs = 1, .batch_size = 2};
    model_request *reqs[2] = {&ra, &rb};
    batcher_batch b = {.reqs = reqs, .n = 2, .cap = 2, .total = 5, .rows = 8};
    batcher_scratch sc = {.pool = copy_pool_create(3)};
    cinfer_tensor in;
    serve_error e = {0};
    CHECK(batcher_gather(&p, &b, &sc, &in, &e) == 0 && in.dims[0] == 8 && in.dims[1] == COLS);
    const float *g = in.data;
    CHECK(!memcmp(g, xa, 3 * COLS * sizeof *xa) && !memcmp(g + 3 * COLS, xb, 2 * COLS * sizeof *xb));
    for (int r = 5; r < 8; r++) CHECK(!memcmp(g + (size_t)r * COLS, xa, COLS * sizeof *xa));
    copy_pool_destroy(sc.pool);
    batcher_scratch_free(&sc);
    free(xa);
    free(xb);
    batcher_policy_free(&p);
    config_model_free(&cfg);
    copy_pool_destroy(pool);
}

/* The budget for page-locked outputs in flight: takes past it are refused, and freeing outputs (with no data here,
 * which the CUDA module is never asked to free) gives their bytes back. */
static void test_pinned_output_budget(void) {
    CHECK(model_pinned_outputs_take(1) && model_pinned_outputs_held() == 1); /* the default budget (host memory) */
    model_outputs_free_data(NULL, 0, (model_output_memory){0, 1});
    model_pinned_outputs_set_budget(100);
    CHECK(model_pinned_outputs_take(60) && model_pinned_outputs_held() == 60);
    CHECK(!model_pinned_outputs_take(41) && model_pinned_outputs_held() == 60);
    CHECK(model_pinned_outputs_take(40) && !model_pinned_outputs_take(1) && model_pinned_outputs_held() == 100);
    cinfer_tensor none[2] = {{0}};
    model_outputs_free_data(none, 2, (model_output_memory){0, 60});
    CHECK(model_pinned_outputs_held() == 40 && model_pinned_outputs_take(60) && !model_pinned_outputs_take(SIZE_MAX));
    model_outputs_free_data(NULL, 0, (model_output_memory){0, 100});
    model_outputs_free_data(NULL, 0, MODEL_OUTPUTS_MALLOCED); /* malloc'd outputs do not touch the budget */
    CHECK(model_pinned_outputs_held() == 0);
    model_pinned_outputs_set_budget(0); /* 0: page-locked outputs off */
    CHECK(!model_pinned_outputs_take(1));
}

/* One request is passed as it came, dims untouched. A GPU lane's scratch (pinned) takes a copy of a request of 1 MiB
 * or more when it gets page-locked memory; without a GPU it gets none, so the request's own tensor is passed (a copy
 * into ordinary memory would gain nothing). Either way the data and dims are the request's. */
static void test_gather_single_request(void) {
    model_config cfg;
    batcher_policy p;
    if (!policy_from(PAD_CFG, &cfg, &p)) return;
    const size_t n = (1u << 20) / 8 + 16; /* a little over 1 MiB of int64 */
    int64_t *tok = malloc(n * sizeof *tok);
    float mask[2] = {1, 1};
    CHECK(tok != NULL);
    if (!tok) return;
    for (size_t i = 0; i < n; i++) tok[i] = (int64_t)i;
    cinfer_tensor inputs[2] = {{.name = "tok", .dtype = CINFER_DTYPE_INT64, .ndim = 3, .dims = {1, (int64_t)n / 2, 2}, .data = tok},
                               {.name = "mask", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 2}, .data = mask}};
    model_request r = {.inputs = inputs, .num_inputs = 2, .batch_size = 1};
    model_request *reqs[1] = {&r};
    batcher_batch b = {.reqs = reqs, .n = 1, .cap = 1, .total = 1, .rows = 1};
    for (int pinned = 0; pinned < 2; pinned++) {
        batcher_scratch s = {.pinned = pinned != 0, .device = 0};
        cinfer_tensor in[2];
        serve_error e = {0};
        CHECK(batcher_gather(&p, &b, &s, in, &e) == 0);
        CHECK(in[0].ndim == 3 && in[0].dims[0] == 1 && in[0].dims[1] == (int64_t)n / 2 && in[0].dims[2] == 2);
        CHECK(!memcmp(in[0].data, tok, n * sizeof *tok) && !memcmp(in[1].data, mask, sizeof mask));
        if (!pinned) CHECK(in[0].data == tok && in[1].data == mask);
        else CHECK(in[0].data == tok || (s.n && in[0].data == s.buf[0] && s.is_pinned[0]));
        batcher_scratch_free(&s);
    }
    free(tok);
    batcher_policy_free(&p);
    config_model_free(&cfg);
}

int main(void) {
    test_pinned_output_budget();
    test_gather_single_request();
    test_preferred_and_delay();
    test_no_preferred();
    test_groups_priorities_expiry();
    test_queue_policy();
    test_not_dynamic();
    test_padding_params();
    test_gather_scatter_padded();
    test_bucket_split();
    test_copy_pool();
    TEST_MAIN_END();
}
