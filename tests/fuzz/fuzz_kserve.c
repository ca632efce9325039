/* libFuzzer target: the KServe v2 infer request decoder (src/serve/kserve_codec.c) as the HTTP layer drives it.
 * Input: a first line holding the Inference-Header-Content-Length value (empty line: header absent; checked as
 * http_server.c checks it), then the body. Each body is parsed, its shared-memory references resolved against
 * one registered 4 KiB region named "r0", bound to each of a few fixed model configs (batched and not, every
 * datatype, one single-input model for raw binary bodies) and, when binding succeeds, a response echoing the
 * bound inputs as outputs is encoded. A refusal is the expected outcome; a crash, a sanitizer report, a leak,
 * or an error without an HTTP status and a message is a bug. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include "config_model.h"
#include "kserve_codec.h"
#include "shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The models requests are bound to. Outputs y<k> mirror inputs x<k> (same datatype and dims) except BYTES. */
static const char *CONFIGS[] = {
    /* batched, three inputs of three datatype families */
    "name: \"batched\" max_batch_size: 8 input [{name: \"x0\" data_type: TYPE_FP32 dims: [2]},"
    "{name: \"x1\" data_type: TYPE_INT64 dims: [-1]}, {name: \"x2\" data_type: TYPE_STRING dims: [1]}]"
    "output [{name: \"y0\" data_type: TYPE_FP32 dims: [2]}, {name: \"y1\" data_type: TYPE_INT64 dims: [-1]}]",
    /* one input, not batched: raw binary bodies (Inference-Header-Content-Length: 0) bind here */
    "name: \"single\" input [{name: \"x0\" data_type: TYPE_FP32 dims: [-1, 2]}]"
    "output [{name: \"y0\" data_type: TYPE_FP32 dims: [-1, 2]}]",
    /* binary-only datatypes, batched */
    "name: \"half\" max_batch_size: 4 input [{name: \"x0\" data_type: TYPE_FP16 dims: [2]},"
    "{name: \"x1\" data_type: TYPE_BF16 dims: [-1]}] output [{name: \"y0\" data_type: TYPE_FP16 dims: [2]},"
    "{name: \"y1\" data_type: TYPE_BF16 dims: [-1]}]",
    /* every other datatype, not batched */
    "name: \"typed\" input [{name: \"x0\" data_type: TYPE_BOOL dims: [-1]}, {name: \"x1\" data_type: TYPE_UINT8 dims: [-1]},"
    "{name: \"x2\" data_type: TYPE_INT8 dims: [-1]}, {name: \"x3\" data_type: TYPE_INT16 dims: [-1]},"
    "{name: \"x4\" data_type: TYPE_UINT16 dims: [-1]}, {name: \"x5\" data_type: TYPE_INT32 dims: [-1]},"
    "{name: \"x6\" data_type: TYPE_UINT32 dims: [-1]}, {name: \"x7\" data_type: TYPE_UINT64 dims: [-1]},"
    "{name: \"x8\" data_type: TYPE_FP64 dims: [-1]}]"
    "output [{name: \"y0\" data_type: TYPE_BOOL dims: [-1]}, {name: \"y1\" data_type: TYPE_UINT8 dims: [-1]},"
    "{name: \"y2\" data_type: TYPE_INT8 dims: [-1]}, {name: \"y3\" data_type: TYPE_INT16 dims: [-1]},"
    "{name: \"y4\" data_type: TYPE_UINT16 dims: [-1]}, {name: \"y5\" data_type: TYPE_INT32 dims: [-1]},"
    "{name: \"y6\" data_type: TYPE_UINT32 dims: [-1]}, {name: \"y7\" data_type: TYPE_UINT64 dims: [-1]},"
    "{name: \"y8\" data_type: TYPE_FP64 dims: [-1]}]",
};
#define NUM_CONFIGS (sizeof CONFIGS / sizeof CONFIGS[0])

static model_config g_cfg[NUM_CONFIGS];
static shm_registry *g_shm;
static int g_verbose; /* FUZZ_VERBOSE=1: print each input's outcome per config (to check that seeds decode) */

static void fuzz_abort(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_kserve: %s: %s\n", what, detail);
    abort();
}

static void setup(void) {
    serve_error err = {0};
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        if (config_model_parse(CONFIGS[i], strlen(CONFIGS[i]), "fuzz config", &g_cfg[i], &err) != 0)
            fuzz_abort("a built-in model config does not parse", err.msg);
    g_verbose = getenv("FUZZ_VERBOSE") != NULL;
    serve_error e = {0};
    if (shm_registry_create(&g_shm, &e) != 0) fuzz_abort("shm_registry_create", e.msg);
    char key[64];
    snprintf(key, sizeof key, "/cinfer_fuzz_kserve_%d", (int)getpid());
    int fd = shm_open(key, O_CREAT | O_RDWR | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) fuzz_abort("cannot create the POSIX shared-memory object", key);
    close(fd);
    int rc = shm_register(g_shm, "r0", key, 0, 4096, &e);
    shm_unlink(key); /* the mapping stays; nothing is left in /dev/shm */
    if (rc != 0) fuzz_abort("shm_register", e.msg);
}

/* A failure must carry an HTTP status and a message naming the problem. */
static void check_error(const serve_error *e, const char *step, const model_config *cfg) {
    if (e->code < 400 || e->code > 599 || !e->msg[0]) fuzz_abort(step, "failed without an HTTP status and a message");
    if (g_verbose) printf("  %-8s %d %s\n", cfg->name, e->code, e->msg);
}

static void run_one(const char *body, size_t len, long long header_len, const model_config *cfg) {
    kserve_infer_request r;
    serve_error e = {0};
    if (kserve_parse_infer(body, len, header_len, &r, &e) != 0) {
        check_error(&e, "kserve_parse_infer", cfg);
        return;
    }
    cinfer_tensor tensors[CINFER_MAX_DIMS + 16];
    int64_t batch = 0;
    if (kserve_resolve_shm(&r, g_shm, &e) != 0 || kserve_bind_inputs(&r, cfg, tensors, &batch, &e) != 0) {
        check_error(&e, "kserve_resolve_shm / kserve_bind_inputs", cfg);
        kserve_infer_request_free(&r);
        return;
    }
    /* echo: output y<k> is input x<k> (BYTES inputs have no output) */
    cinfer_tensor outs[CINFER_MAX_DIMS + 16];
    size_t n = 0;
    for (size_t k = 0; k < cfg->num_inputs && n < cfg->num_outputs; k++) {
        if (tensors[k].dtype == CINFER_DTYPE_STRING) continue;
        outs[n] = tensors[k];
        outs[n].name = cfg->outputs[n].name;
        n++;
    }
    /* every byte of every bound input must be readable (ASan checks the range) */
    volatile unsigned sum = 0;
    for (size_t k = 0; k < cfg->num_inputs; k++) {
        int64_t numel = kserve_numel(tensors[k].dims, tensors[k].ndim);
        size_t nb = tensors[k].dtype == CINFER_DTYPE_STRING ? 0 : (size_t)numel * cinfer_dtype_size(tensors[k].dtype);
        for (size_t b = 0; b < nb; b++) sum += ((const unsigned char *)tensors[k].data)[b];
    }
    char *resp = NULL;
    size_t resp_len = 0, json_len = 0;
    if (kserve_encode_response(&r, cfg->name, "1", outs, n, &resp, &resp_len, &json_len, &e) != 0)
        check_error(&e, "kserve_encode_response", cfg);
    else if (json_len > resp_len)
        fuzz_abort("kserve_encode_response", "the JSON part is longer than the body");
    else if (g_verbose)
        printf("  %-8s decoded, bound (batch %lld), response %zu bytes\n", cfg->name, (long long)batch, resp_len);
    free(resp);
    kserve_infer_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        setup();
        ready = 1;
    }
    const uint8_t *nl = memchr(data, '\n', size < 32 ? size : 32);
    if (!nl) return 0;
    char hdr[32];
    size_t hl = (size_t)(nl - data);
    memcpy(hdr, data, hl);
    hdr[hl] = '\0';
    long long header_len = -1;
    if (hl) { /* as http_server.c: a non-negative decimal integer, else 400 before the codec is reached */
        char *end;
        header_len = strtoll(hdr, &end, 10);
        if (*end || header_len < 0) return 0;
    }
    /* the body in its own allocation of exactly its size, as the HTTP layer hands it over */
    size_t len = size - hl - 1;
    char *body = malloc(len ? len : 1);
    if (!body) return 0;
    memcpy(body, nl + 1, len);
    for (size_t i = 0; i < NUM_CONFIGS; i++) run_one(body, len, header_len, &g_cfg[i]);
    free(body);
    return 0;
}
