/* KServe v2 infer codec. Requests: JSON parsed with jansson; `data` (flat or nested) converted to a dense
 * little-endian buffer in the declared datatype; binary tensors (Inference-Header-Content-Length) referenced
 * in place; shared-memory tensors resolved to their region. Binding checks names, datatypes, shapes
 * (batch dim included when the model batches) and byte sizes against the model config, and reads shared-memory
 * inputs (pread, never a mapping: see shm.h). Responses: JSON `data` or binary tensors appended after the JSON
 * header; shared-memory outputs written into their region (pwrite). */
#include "kserve_codec.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "copy_pool.h" /* COPY_POOL_MIN_BYTES: what the gather copies into page-locked memory itself */

static const struct {
    const char *name;
    cinfer_dtype dtype;
} KS_TYPES[] = {
    {"BOOL", CINFER_DTYPE_BOOL},   {"UINT8", CINFER_DTYPE_UINT8},   {"UINT16", CINFER_DTYPE_UINT16}, {"UINT32", CINFER_DTYPE_UINT32},
    {"UINT64", CINFER_DTYPE_UINT64}, {"INT8", CINFER_DTYPE_INT8},   {"INT16", CINFER_DTYPE_INT16},   {"INT32", CINFER_DTYPE_INT32},
    {"INT64", CINFER_DTYPE_INT64}, {"FP16", CINFER_DTYPE_FLOAT16},  {"FP32", CINFER_DTYPE_FLOAT},    {"FP64", CINFER_DTYPE_DOUBLE},
    {"BYTES", CINFER_DTYPE_STRING}, {"BF16", CINFER_DTYPE_BFLOAT16},
};

/* ---- the parse arena ----
 * Parsing one request's JSON makes some 50 small jansson allocations (nodes, keys, hash buckets, token buffers), and
 * every one is freed before kserve_parse_infer returns (the request keeps copies, never a json_t). While a parse runs
 * they come from a bump arena of the parsing thread, reset when it returns; kserve_codec_init routes jansson's
 * allocations through the two functions below, which are plain malloc/free outside a parse, once the arena is full,
 * and for every pointer outside the calling thread's arena (so a json_t made anywhere else is freed as before). */
#define PARSE_ARENA_SIZE (32u << 10)

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static pthread_key_t arena_key; /* frees a thread's arena when the thread exits */
static _Thread_local struct {
    unsigned char *base;
    size_t used;
    int active;
} parse_arena;

static void *codec_json_malloc(size_t n) {
    if (parse_arena.active) {
        size_t a = (n + 15) & ~(size_t)15;
        if (a >= n && a <= PARSE_ARENA_SIZE - parse_arena.used) {
            void *p = parse_arena.base + parse_arena.used;
            parse_arena.used += a;
            return p;
        }
    }
    return malloc(n);
}

static void codec_json_free(void *p) {
    unsigned char *c = p, *b = parse_arena.base;
    if (b && c >= b && c < b + PARSE_ARENA_SIZE) return; /* reclaimed when the parse ends */
    free(p);
}

static void arena_init_once(void) {
    if (pthread_key_create(&arena_key, free) != 0) return; /* no arena: parsing allocates as before */
    json_set_alloc_funcs(codec_json_malloc, codec_json_free);
}

void kserve_codec_init(void) { pthread_once(&arena_once, arena_init_once); }

/* Starts using the calling thread's arena (allocated on its first parse); returns 0 when there is none. */
static int arena_begin(void) {
    if (!parse_arena.base) {
        json_malloc_t m;
        json_free_t f;
        json_get_alloc_funcs(&m, &f);
        if (m != codec_json_malloc) return 0; /* kserve_codec_init was not called (unit tests, fuzzing) */
        parse_arena.base = malloc(PARSE_ARENA_SIZE);
        if (!parse_arena.base) return 0;
        pthread_setspecific(arena_key, parse_arena.base);
    }
    parse_arena.used = 0;
    parse_arena.active = 1;
    return 1;
}

/* Every json_t of the parse is freed by now: the arena is empty again. */
static void arena_end(void) {
    parse_arena.active = 0;
    parse_arena.used = 0;
}

cinfer_dtype kserve_dtype_from_name(const char *name) {
    for (size_t i = 0; i < sizeof KS_TYPES / sizeof KS_TYPES[0]; i++)
        if (strcmp(KS_TYPES[i].name, name) == 0) return KS_TYPES[i].dtype;
    return CINFER_DTYPE_UNDEFINED;
}

const char *kserve_dtype_name(cinfer_dtype t) {
    for (size_t i = 0; i < sizeof KS_TYPES / sizeof KS_TYPES[0]; i++)
        if (KS_TYPES[i].dtype == t) return KS_TYPES[i].name;
    return "INVALID";
}

int64_t kserve_numel(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* "[1,16]" into buf; returns buf. Only for error messages (called where the message is written, never ahead). */
static const char *shape_text(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? "," : "", shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

void kserve_infer_request_free(kserve_infer_request *r) {
    if (!r) return;
    free(r->id);
    for (size_t i = 0; i < r->num_inputs; i++) {
        free(r->inputs[i].name);
        if (r->inputs[i].owned_pinned) cinfer_cuda_host_free(r->pinned_device, r->inputs[i].owned);
        else free(r->inputs[i].owned);
        free(r->inputs[i].shm.region);
        shm_region_release(r->inputs[i].shm.held);
    }
    free(r->inputs);
    for (size_t i = 0; i < r->num_outputs; i++) {
        free(r->outputs[i].name);
        free(r->outputs[i].shm.region);
        shm_region_release(r->outputs[i].shm.held);
    }
    free(r->outputs);
    memset(r, 0, sizeof *r);
}

/* ---- JSON data -> dense buffer ---- */

typedef struct conv {
    const char *input;
    cinfer_dtype dtype;
    unsigned char *out; /* numeric types: numel * size bytes */
    size_t esz, idx, numel;
    unsigned char *bytes; /* BYTES: growable */
    size_t blen, bcap;
    serve_error *e;
} conv;

static int put_scalar(conv *c, json_t *v) {
    if (c->dtype == CINFER_DTYPE_STRING) {
        if (!json_is_string(v))
            return serve_fail(c->e, SERVE_BAD_REQUEST, "input '%s': BYTES data element %zu is not a string", c->input, c->idx);
        size_t n = json_string_length(v);
        if (n > UINT32_MAX) return serve_fail(c->e, SERVE_BAD_REQUEST, "input '%s': string element too long", c->input);
        if (c->blen + 4 + n > c->bcap) {
            size_t cap = c->bcap ? c->bcap * 2 : 256;
            while (cap < c->blen + 4 + n) cap *= 2;
            unsigned char *nb = realloc(c->bytes, cap);
            if (!nb) return serve_fail(c->e, SERVE_INTERNAL, "out of memory");
            c->bytes = nb;
            c->bcap = cap;
        }
        uint32_t len = (uint32_t)n;
        memcpy(c->bytes + c->blen, &len, 4);
        memcpy(c->bytes + c->blen + 4, json_string_value(v), n);
        c->blen += 4 + n;
        c->idx++;
        return 0;
    }
    if (c->idx >= c->numel) {
        c->idx++; /* counted for the error message */
        return 0;
    }
    void *dst = c->out + c->idx * c->esz;
    const char *want = NULL;
    if (c->dtype == CINFER_DTYPE_BOOL) {
        if (!json_is_boolean(v)) want = "true or false";
        else *(uint8_t *)dst = json_is_true(v) ? 1 : 0;
    } else if (c->dtype == CINFER_DTYPE_FLOAT || c->dtype == CINFER_DTYPE_DOUBLE) {
        if (!json_is_number(v)) want = "a number";
        else if (c->dtype == CINFER_DTYPE_FLOAT) *(float *)dst = (float)json_number_value(v);
        else *(double *)dst = json_number_value(v);
    } else {
        if (!json_is_integer(v)) {
            want = "an integer";
        } else {
            json_int_t x = json_integer_value(v);
            int ok = 1;
            switch (c->dtype) {
            case CINFER_DTYPE_INT8: ok = x >= INT8_MIN && x <= INT8_MAX; if (ok) *(int8_t *)dst = (int8_t)x; break;
            case CINFER_DTYPE_INT16: ok = x >= INT16_MIN && x <= INT16_MAX; if (ok) *(int16_t *)dst = (int16_t)x; break;
            case CINFER_DTYPE_INT32: ok = x >= INT32_MIN && x <= INT32_MAX; if (ok) *(int32_t *)dst = (int32_t)x; break;
            case CINFER_DTYPE_INT64: *(int64_t *)dst = (int64_t)x; break;
            case CINFER_DTYPE_UINT8: ok = x >= 0 && x <= UINT8_MAX; if (ok) *(uint8_t *)dst = (uint8_t)x; break;
            case CINFER_DTYPE_UINT16: ok = x >= 0 && x <= UINT16_MAX; if (ok) *(uint16_t *)dst = (uint16_t)x; break;
            case CINFER_DTYPE_UINT32: ok = x >= 0 && x <= UINT32_MAX; if (ok) *(uint32_t *)dst = (uint32_t)x; break;
            case CINFER_DTYPE_UINT64: ok = x >= 0; if (ok) *(uint64_t *)dst = (uint64_t)x; break;
            default: ok = 0;
            }
            if (!ok)
                return serve_fail(c->e, SERVE_BAD_REQUEST, "input '%s': data element %zu (%lld) is out of range for %s", c->input,
                                  c->idx, (long long)x, kserve_dtype_name(c->dtype));
        }
    }
    if (want)
        return serve_fail(c->e, SERVE_BAD_REQUEST, "input '%s': data element %zu must be %s for datatype %s", c->input, c->idx,
                          want, kserve_dtype_name(c->dtype));
    c->idx++;
    return 0;
}

static int convert(conv *c, json_t *v, int depth) {
    if (depth > CINFER_MAX_DIMS + 1)
        return serve_fail(c->e, SERVE_BAD_REQUEST, "input '%s': data is nested deeper than any tensor shape", c->input);
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (convert(c, x, depth + 1) != 0) return -1;
        return 0;
    }
    return put_scalar(c, v);
}

/* ---- request parsing ---- */

static const char *RESERVED_SEQ[] = {"sequence_id", "sequence_start", "sequence_end", NULL};

static int parse_request_params(json_t *params, kserve_infer_request *r, serve_error *e) {
    if (!params) return 0;
    if (!json_is_object(params)) return serve_fail(e, SERVE_BAD_REQUEST, "request 'parameters' must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(params, key, v) {
        for (const char **s = RESERVED_SEQ; *s; s++)
            if (!strcmp(key, *s))
                return serve_fail(e, SERVE_BAD_REQUEST, "sequence batching is not supported: request parameter '%s' "
                                                        "needs a sequence model, which cinfer does not serve yet", key);
        if (!strcmp(key, "priority") || !strcmp(key, "timeout")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return serve_fail(e, SERVE_BAD_REQUEST, "request parameter '%s' must be a non-negative integer", key);
            if (key[0] == 'p') r->priority = (uint64_t)json_integer_value(v);
            else r->timeout_us = (uint64_t)json_integer_value(v);
        } else if (!strcmp(key, "binary_data_output")) {
            if (!json_is_boolean(v)) return serve_fail(e, SERVE_BAD_REQUEST, "request parameter 'binary_data_output' must be a boolean");
            r->binary_data_output = json_is_true(v);
        } else if (!strncmp(key, "shared_memory", 13)) {
            return serve_fail(e, SERVE_BAD_REQUEST, "request parameter '%s' belongs in the parameters of an input or a "
                                                    "requested output, not of the request", key);
        } else if (!strncmp(key, "triton_", 7)) {
            return serve_fail(e, SERVE_BAD_REQUEST, "request parameter '%s' is reserved (names starting with 'triton_' "
                                                    "are Triton's) and not known to cinfer", key);
        }
        /* other custom parameters are accepted and ignored, as Triton passes them to backends */
    }
    return 0;
}

/* Reads one shared_memory_* parameter `key` of input or output `name` (kind "input" / "output") into ref.
 * Returns 0, or -1 on a bad value or an unknown shared_memory_* key. */
static int parse_shm_param(const char *kind, const char *name, const char *key, json_t *v, kserve_shm_ref *ref,
                           serve_error *e) {
    if (!strcmp(key, "shared_memory_region")) {
        if (!json_is_string(v) || !json_string_length(v))
            return serve_fail(e, SERVE_BAD_REQUEST, "%s '%s': shared_memory_region must be a non-empty string", kind, name);
        free(ref->region);
        if (!(ref->region = strdup(json_string_value(v)))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
        return 0;
    }
    uint64_t *dst = !strcmp(key, "shared_memory_offset") ? &ref->offset
                    : !strcmp(key, "shared_memory_byte_size") ? &ref->byte_size : NULL;
    if (!dst)
        return serve_fail(e, SERVE_BAD_REQUEST, "%s '%s': unknown parameter '%s' (shared memory takes shared_memory_region, "
                                                "shared_memory_offset and shared_memory_byte_size)", kind, name, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return serve_fail(e, SERVE_BAD_REQUEST, "%s '%s': %s must be a non-negative integer", kind, name, key);
    *dst = (uint64_t)json_integer_value(v);
    return 0;
}

/* After every parameter of an input or output was read: shared_memory_byte_size and _offset need a region, and a
 * region needs a byte size (Triton's rule). */
static int check_shm_params(const char *kind, const char *name, json_t *params, const kserve_shm_ref *ref,
                            serve_error *e) {
    int has_size = json_object_get(params, "shared_memory_byte_size") != NULL,
        has_offset = json_object_get(params, "shared_memory_offset") != NULL;
    if (!ref->region && (has_size || has_offset))
        return serve_fail(e, SERVE_BAD_REQUEST, "%s '%s': shared_memory_%s is given without shared_memory_region", kind,
                          name, has_size ? "byte_size" : "offset");
    if (ref->region && !has_size)
        return serve_fail(e, SERVE_BAD_REQUEST, "%s '%s': shared_memory_region '%s' needs shared_memory_byte_size", kind,
                          name, ref->region);
    return 0;
}

/* Duplicate names in a list of n: up to NAMES_PAIRWISE_MAX are compared pairwise (no allocation on the common
 * path); longer lists go through a jansson object used as a set, whose hash is seeded at random per process, so
 * checking n names is O(n) expected whatever names a client picks (80,000 outputs took 17 s pairwise). */
#define NAMES_PAIRWISE_MAX 16

typedef struct name_check {
    json_t *set;   /* NULL while pairwise */
    size_t total;  /* names the list will have */
} name_check;

/* Returns 1 when `name` equals one of `earlier` (the k names checked before it, at `stride` bytes apart from
 * the first), 0 after recording it, -1 when out of memory. */
static int name_check_add(name_check *c, const char *name, const void *earlier, size_t stride, size_t k) {
    if (c->total <= NAMES_PAIRWISE_MAX) {
        for (size_t i = 0; i < k; i++)
            if (!strcmp(*(char *const *)((const char *)earlier + i * stride), name)) return 1;
        return 0;
    }
    if (!c->set && !(c->set = json_object())) return -1;
    if (json_object_get(c->set, name)) return 1;
    return json_object_set_new_nocheck(c->set, name, json_null()) == 0 ? 0 : -1; /* names came from JSON: UTF-8 */
}

static int parse_input(json_t *jin, size_t index, kserve_input *in, int *binary_size_set, size_t *binary_size,
                       serve_error *e) {
    if (!json_is_object(jin)) return serve_fail(e, SERVE_BAD_REQUEST, "inputs[%zu] must be a JSON object", index);
    json_t *name = json_object_get(jin, "name"), *shape = json_object_get(jin, "shape"),
           *dt = json_object_get(jin, "datatype"), *params = json_object_get(jin, "parameters");
    if (!json_is_string(name)) return serve_fail(e, SERVE_BAD_REQUEST, "inputs[%zu]: 'name' must be a string", index);
    in->name = strdup(json_string_value(name));
    if (!in->name) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    if (!json_is_string(dt)) return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': 'datatype' must be a string", in->name);
    in->dtype = kserve_dtype_from_name(json_string_value(dt));
    if (in->dtype == CINFER_DTYPE_UNDEFINED)
        return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': unknown datatype '%s' (BOOL, UINT8, UINT16, UINT32, UINT64, INT8, "
                                                "INT16, INT32, INT64, FP16, FP32, FP64, BF16, BYTES)", in->name, json_string_value(dt));
    if (!json_is_array(shape)) return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': 'shape' must be an array of integers", in->name);
    if (json_array_size(shape) > CINFER_MAX_DIMS)
        return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape has %zu dims, cinfer supports at most %d", in->name,
                          json_array_size(shape), CINFER_MAX_DIMS);
    size_t i;
    json_t *d;
    json_array_foreach(shape, i, d) {
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape[%zu] must be a non-negative integer", in->name, i);
        in->shape[in->ndim++] = json_integer_value(d);
    }
    *binary_size_set = 0;
    if (params) {
        if (!json_is_object(params)) return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': 'parameters' must be an object", in->name);
        const char *key;
        json_t *v;
        json_object_foreach(params, key, v) {
            if (!strcmp(key, "binary_data_size")) {
                if (!json_is_integer(v) || json_integer_value(v) < 0)
                    return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': binary_data_size must be a non-negative integer", in->name);
                *binary_size_set = 1;
                *binary_size = (size_t)json_integer_value(v);
            } else if (!strncmp(key, "shared_memory", 13)) {
                if (parse_shm_param("input", in->name, key, v, &in->shm, e) != 0) return -1;
            } else if (!strncmp(key, "triton_", 7)) {
                return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': parameter '%s' is reserved and not known to cinfer", in->name, key);
            }
        }
        if (check_shm_params("input", in->name, params, &in->shm, e) != 0) return -1;
    }
    return 0;
}

int kserve_parse_infer(const char *body, size_t len, long long header_len, kserve_infer_request *r, serve_error *e) {
    memset(r, 0, sizeof *r);
    r->pinned_device = -1;
    if (header_len == 0) { /* raw binary: the whole body is the single input */
        r->raw = 1;
        r->raw_data = body;
        r->raw_size = len;
        r->binary_data_output = 1;
        return 0;
    }
    size_t jlen = len;
    if (header_len > 0) {
        if ((unsigned long long)header_len > len)
            return serve_fail(e, SERVE_BAD_REQUEST, "Inference-Header-Content-Length is %lld but the body has only %zu bytes",
                              header_len, len);
        jlen = (size_t)header_len;
    }
    json_error_t jerr;
    int arena = arena_begin();
    json_t *root = json_loadb(body, jlen, 0, &jerr);
    if (!root) {
        if (arena) arena_end();
        return serve_fail(e, SERVE_BAD_REQUEST, "malformed JSON in the request at line %d, column %d: %s", jerr.line, jerr.column,
                          jerr.text);
    }
    int rc = -1;
    name_check input_names = {0}, output_names = {0};
    if (!json_is_object(root)) {
        serve_fail(e, SERVE_BAD_REQUEST, "the request must be a JSON object");
        goto done;
    }
    json_t *id = json_object_get(root, "id"), *inputs = json_object_get(root, "inputs"),
           *outputs = json_object_get(root, "outputs");
    if (id) {
        if (!json_is_string(id)) {
            serve_fail(e, SERVE_BAD_REQUEST, "request 'id' must be a string");
            goto done;
        }
        if (!(r->id = strdup(json_string_value(id)))) goto oom;
    }
    if (parse_request_params(json_object_get(root, "parameters"), r, e) != 0) goto done;
    if (!json_is_array(inputs) || json_array_size(inputs) == 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "the request needs a non-empty 'inputs' array");
        goto done;
    }
    size_t n = json_array_size(inputs);
    if (!(r->inputs = calloc(n, sizeof *r->inputs))) goto oom;
    input_names.total = n;
    const char *bin = body + jlen;
    size_t bin_left = len - jlen;
    for (size_t i = 0; i < n; i++) {
        kserve_input *in = &r->inputs[i];
        r->num_inputs++;
        int has_bin = 0;
        size_t bsize = 0;
        json_t *jin = json_array_get(inputs, i);
        if (parse_input(jin, i, in, &has_bin, &bsize, e) != 0) goto done;
        int seen = name_check_add(&input_names, in->name, &r->inputs[0].name, sizeof *r->inputs, i);
        if (seen < 0) goto oom;
        if (seen) {
            serve_fail(e, SERVE_BAD_REQUEST, "input '%s' is given twice", in->name);
            goto done;
        }
        json_t *data = json_object_get(jin, "data");
        int64_t numel = kserve_numel(in->shape, in->ndim);
        char shp[128];
        if (numel < 0) {
            serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape %s is too large", in->name,
                       shape_text(shp, sizeof shp, in->shape, in->ndim));
            goto done;
        }
        if (in->shm.region) { /* data comes from the region: kserve_resolve_shm */
            if (data || has_bin) {
                serve_fail(e, SERVE_BAD_REQUEST, "input '%s' has shared_memory_region and also %s; give the data one way",
                           in->name, data ? "'data'" : "binary_data_size");
                goto done;
            }
            continue;
        }
        if (has_bin) {
            if (data) {
                serve_fail(e, SERVE_BAD_REQUEST, "input '%s' has both 'data' and binary_data_size", in->name);
                goto done;
            }
            if (header_len < 0) {
                serve_fail(e, SERVE_BAD_REQUEST, "input '%s' has binary_data_size but the request has no "
                                                 "Inference-Header-Content-Length header", in->name);
                goto done;
            }
            if (bsize > bin_left) {
                serve_fail(e, SERVE_BAD_REQUEST, "input '%s': binary_data_size %zu exceeds the %zu bytes of binary data left "
                                                 "in the body", in->name, bsize, bin_left);
                goto done;
            }
            in->data = bin;
            in->byte_size = bsize;
            bin += bsize;
            bin_left -= bsize;
            continue;
        }
        if (!data) {
            serve_fail(e, SERVE_BAD_REQUEST, "input '%s' has neither 'data' nor a binary_data_size parameter", in->name);
            goto done;
        }
        if (in->dtype == CINFER_DTYPE_FLOAT16 || in->dtype == CINFER_DTYPE_BFLOAT16) {
            serve_fail(e, SERVE_BAD_REQUEST, "input '%s': datatype %s is only supported as binary data (binary tensor extension), "
                                             "not in JSON 'data'", in->name, kserve_dtype_name(in->dtype));
            goto done;
        }
        conv c = {.input = in->name, .dtype = in->dtype, .esz = cinfer_dtype_size(in->dtype), .numel = (size_t)numel, .e = e};
        if (in->dtype != CINFER_DTYPE_STRING) {
            if (numel > (int64_t)(len * 64 + 64)) { /* JSON can't hold this many elements: refuse before allocating */
                serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape %s has %" PRId64 " elements, more than the request can hold",
                           in->name, shape_text(shp, sizeof shp, in->shape, in->ndim), numel);
                goto done;
            }
            if (!(c.out = malloc(numel ? (size_t)numel * c.esz : 1))) goto oom;
        }
        int crc = convert(&c, data, 0);
        in->owned = c.out ? (void *)c.out : (void *)c.bytes;
        if (c.out) free(c.bytes);
        if (crc != 0) goto done;
        if (c.idx != (size_t)numel) {
            serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape %s needs %" PRId64 " elements but 'data' has %zu", in->name,
                       shape_text(shp, sizeof shp, in->shape, in->ndim), numel, c.idx);
            goto done;
        }
        in->data = in->owned;
        in->byte_size = c.out ? (size_t)numel * c.esz : c.blen;
    }
    if (bin_left) {
        serve_fail(e, SERVE_BAD_REQUEST, "the body has %zu bytes of binary data that no input's binary_data_size accounts for", bin_left);
        goto done;
    }
    if (outputs) {
        if (!json_is_array(outputs)) {
            serve_fail(e, SERVE_BAD_REQUEST, "request 'outputs' must be an array");
            goto done;
        }
        size_t no = json_array_size(outputs);
        if (no && !(r->outputs = calloc(no, sizeof *r->outputs))) goto oom;
        output_names.total = no;
        for (size_t i = 0; i < no; i++) {
            json_t *jo = json_array_get(outputs, i), *nm = json_object_get(jo, "name"), *p = json_object_get(jo, "parameters");
            if (!json_is_string(nm)) {
                serve_fail(e, SERVE_BAD_REQUEST, "outputs[%zu]: 'name' must be a string", i);
                goto done;
            }
            kserve_output *o = &r->outputs[r->num_outputs++];
            o->binary = -1;
            if (!(o->name = strdup(json_string_value(nm)))) goto oom;
            int seen = name_check_add(&output_names, o->name, &r->outputs[0].name, sizeof *r->outputs, r->num_outputs - 1);
            if (seen < 0) goto oom;
            if (seen) {
                serve_fail(e, SERVE_BAD_REQUEST, "output '%s' is requested twice", o->name);
                goto done;
            }
            if (p && !json_is_object(p)) {
                serve_fail(e, SERVE_BAD_REQUEST, "output '%s': 'parameters' must be an object", o->name);
                goto done;
            }
            const char *key;
            json_t *v;
            if (p) json_object_foreach(p, key, v) {
                if (!strcmp(key, "binary_data")) {
                    if (!json_is_boolean(v)) {
                        serve_fail(e, SERVE_BAD_REQUEST, "output '%s': binary_data must be a boolean", o->name);
                        goto done;
                    }
                    o->binary = json_is_true(v);
                } else if (!strcmp(key, "classification")) {
                    serve_fail(e, SERVE_BAD_REQUEST, "output '%s': the classification extension is not supported", o->name);
                    goto done;
                } else if (!strncmp(key, "shared_memory", 13)) {
                    if (parse_shm_param("output", o->name, key, v, &o->shm, e) != 0) goto done;
                } else if (!strncmp(key, "triton_", 7)) {
                    serve_fail(e, SERVE_BAD_REQUEST, "output '%s': parameter '%s' is reserved and not known to cinfer", o->name, key);
                    goto done;
                }
            }
            if (p) {
                if (check_shm_params("output", o->name, p, &o->shm, e) != 0) goto done;
                if (o->shm.region && o->binary == 1) {
                    serve_fail(e, SERVE_BAD_REQUEST, "output '%s' sets both shared_memory_region and binary_data: true; "
                                                     "an output goes either into shared memory or into the response", o->name);
                    goto done;
                }
            }
        }
    }
    rc = 0;
    goto done;
oom:
    serve_fail(e, SERVE_INTERNAL, "out of memory while parsing the request");
done:
    json_decref(input_names.set); /* before the arena ends: their nodes may live in it */
    json_decref(output_names.set);
    json_decref(root);
    if (arena) arena_end();
    if (rc) kserve_infer_request_free(r);
    return rc;
}

/* ---- shared memory ---- */

int kserve_resolve_shm(kserve_infer_request *r, shm_registry *reg, serve_error *e) {
    char what[160];
    for (size_t i = 0; i < r->num_inputs; i++) {
        kserve_input *in = &r->inputs[i];
        if (!in->shm.region || in->shm.held) continue;
        snprintf(what, sizeof what, "input '%s'", in->name);
        if (shm_acquire(reg, in->shm.region, in->shm.offset, in->shm.byte_size, what, &in->shm.held, e) != 0) return -1;
        if (in->shm.byte_size > SIZE_MAX - 128)
            return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shared_memory_byte_size %" PRIu64 " is too large", in->name,
                              in->shm.byte_size);
        in->data = NULL; /* read by kserve_bind_inputs once the size is checked against the shape */
        in->byte_size = (size_t)in->shm.byte_size;
    }
    for (size_t i = 0; i < r->num_outputs; i++) {
        kserve_output *o = &r->outputs[i];
        if (!o->shm.region || o->shm.held) continue;
        snprintf(what, sizeof what, "output '%s'", o->name);
        if (shm_acquire(reg, o->shm.region, o->shm.offset, o->shm.byte_size, what, &o->shm.held, e) != 0) return -1;
    }
    return 0;
}

/* ---- binding to the model config ---- */

static int output_known(const model_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->num_outputs; i++)
        if (!strcmp(cfg->outputs[i].name, name)) return 1;
    return 0;
}

static int count_bytes_elements(const unsigned char *p, size_t n, int64_t *count) {
    int64_t c = 0;
    size_t o = 0;
    while (o < n) {
        if (n - o < 4) return -1;
        uint32_t l;
        memcpy(&l, p + o, 4);
        if (n - o - 4 < l) return -1;
        o += 4 + (size_t)l;
        c++;
    }
    *count = c;
    return 0;
}

/* Reads a shared-memory input into an aligned buffer the request owns (the engine's alignment, as the copy of
 * unaligned binary data below): page-locked memory of the model's GPU when it has one and the input is under 1 MiB,
 * so the engine uploads it by DMA without staging it again, as it uploads a gathered batch. */
static int read_shm_input(kserve_input *in, int pinned_device, serve_error *e) {
    size_t cap = (in->byte_size + 63) / 64 * 64 + 64;
    void *copy = NULL;
    /* only below the gather's threshold: a larger request is copied into the lane's page-locked buffer anyway
     * (batcher.c gather_single), and page-locked memory held by queued requests is worth bounding */
    int pinned = pinned_device >= 0 && in->byte_size < COPY_POOL_MIN_BYTES &&
                 cinfer_cuda_host_alloc(pinned_device, cap, &copy) == CINFER_OK;
    if (!pinned && !(copy = aligned_alloc(64, cap))) /* no page-locked memory to be had: ordinary memory works */
        return serve_fail(e, SERVE_INTERNAL, "out of memory reading input '%s' from shared memory", in->name);
    char what[160];
    snprintf(what, sizeof what, "input '%s'", in->name);
    if (shm_region_read(in->shm.held, in->shm.offset, copy, in->byte_size, what, e) != 0) {
        if (pinned) cinfer_cuda_host_free(pinned_device, copy);
        else free(copy);
        return -1;
    }
    in->owned = copy; /* a shared-memory input has no other data */
    in->owned_pinned = pinned;
    in->data = copy;
    return 0;
}

/* Raw binary request: shape from the config, a single variable dim inferred from the byte size. */
static int bind_raw(kserve_infer_request *r, const model_config *cfg, serve_error *e) {
    if (cfg->num_inputs != 1)
        return serve_fail(e, SERVE_BAD_REQUEST, "a raw binary request (Inference-Header-Content-Length: 0) needs a model with "
                                                "exactly one input; model '%s' has %zu", cfg->name, cfg->num_inputs);
    const config_tensor *t = &cfg->inputs[0];
    size_t esz = cinfer_dtype_size(t->dtype);
    if (!esz) return serve_fail(e, SERVE_BAD_REQUEST, "raw binary requests are not supported for BYTES input '%s'", t->name);
    if (!(r->inputs = calloc(1, sizeof *r->inputs)) || !(r->inputs[0].name = strdup(t->name)))
        return serve_fail(e, SERVE_INTERNAL, "out of memory");
    r->num_inputs = 1;
    kserve_input *in = &r->inputs[0];
    in->dtype = t->dtype;
    in->data = r->raw_data;
    in->byte_size = r->raw_size;
    if (config_batches(cfg)) in->shape[in->ndim++] = 1;
    int var = -1;
    int64_t fixed = 1;
    for (int d = 0; d < t->ndims; d++) {
        if (t->dims[d] < 0) {
            if (var >= 0)
                return serve_fail(e, SERVE_BAD_REQUEST, "raw binary request: input '%s' has more than one variable dim, so its "
                                                        "shape cannot be inferred from the body size", t->name);
            var = in->ndim;
            in->shape[in->ndim++] = 0;
        } else {
            fixed *= t->dims[d];
            in->shape[in->ndim++] = t->dims[d];
        }
    }
    if (r->raw_size % esz || (fixed && (r->raw_size / esz) % (size_t)fixed) || (!fixed && r->raw_size))
        return serve_fail(e, SERVE_BAD_REQUEST, "raw binary request: %zu bytes is not a whole number of elements of input '%s'",
                          r->raw_size, t->name);
    if (var >= 0) in->shape[var] = fixed ? (int64_t)(r->raw_size / esz) / fixed : 0;
    return 0;
}

int kserve_bind_inputs(kserve_infer_request *r, const model_config *cfg, cinfer_tensor *tensors, int64_t *batch_size,
                       serve_error *e) {
    if (r->raw && !r->num_inputs && bind_raw(r, cfg, e) != 0) return -1;
    int batched = config_batches(cfg);
    int64_t batch = -1;
    for (size_t i = 0; i < r->num_inputs; i++) {
        const kserve_input *in = &r->inputs[i];
        size_t k;
        for (k = 0; k < cfg->num_inputs && strcmp(cfg->inputs[k].name, in->name) != 0; k++) {}
        if (k == cfg->num_inputs) {
            char names[512] = "";
            for (size_t j = 0; j < cfg->num_inputs; j++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", j ? ", " : "", cfg->inputs[j].name);
            return serve_fail(e, SERVE_BAD_REQUEST, "unexpected inference input '%s' for model '%s' (its inputs: %s)", in->name,
                              cfg->name, names);
        }
    }
    for (size_t k = 0; k < cfg->num_inputs; k++) {
        const config_tensor *t = &cfg->inputs[k];
        const kserve_input *in = NULL;
        for (size_t i = 0; i < r->num_inputs && !in; i++)
            if (!strcmp(r->inputs[i].name, t->name)) in = &r->inputs[i];
        if (!in)
            return serve_fail(e, SERVE_BAD_REQUEST, "expected %zu inputs but got %zu inputs for model '%s': input '%s' is missing",
                              cfg->num_inputs, r->num_inputs, cfg->name, t->name);
        if (in->shm.region && !in->shm.held)
            return serve_fail(e, SERVE_INTERNAL, "input '%s': shared memory region '%s' was not resolved before binding",
                              in->name, in->shm.region);
        if (in->dtype != t->dtype)
            return serve_fail(e, SERVE_BAD_REQUEST, "inference input '%s' data-type is '%s', but model '%s' expects '%s'", in->name,
                              kserve_dtype_name(in->dtype), cfg->name, kserve_dtype_name(t->dtype));
        char got[128], want[160];
        int64_t full[CINFER_MAX_DIMS + 1];
        int fn = 0;
        if (batched) full[fn++] = -1;
        for (int d = 0; d < t->ndims; d++) full[fn++] = t->dims[d];
        int ok = in->ndim == fn;
        for (int d = 0; ok && d < fn; d++) ok = full[d] < 0 || full[d] == in->shape[d];
        if (!ok)
            return serve_fail(e, SERVE_BAD_REQUEST, "unexpected shape for input '%s' for model '%s'. Expected %s, got %s%s", in->name,
                              cfg->name, shape_text(want, sizeof want, full, fn), shape_text(got, sizeof got, in->shape, in->ndim),
                              batched ? " (the first dim is the batch)" : "");
        if (batched) {
            if (in->shape[0] < 1 || in->shape[0] > cfg->max_batch_size)
                return serve_fail(e, SERVE_BAD_REQUEST, "inference request batch-size %" PRId64 " for input '%s' must be in "
                                                        "[1, %d] (max_batch_size of model '%s')", in->shape[0], in->name,
                                  cfg->max_batch_size, cfg->name);
            if (batch >= 0 && in->shape[0] != batch)
                return serve_fail(e, SERVE_BAD_REQUEST, "input '%s' has batch size %" PRId64 " but another input has %" PRId64
                                                        "; all inputs of model '%s' must share the batch dim", in->name,
                                  in->shape[0], batch, cfg->name);
            batch = in->shape[0];
        }
        int64_t numel = kserve_numel(in->shape, in->ndim);
        if (in->shm.held && in->dtype != CINFER_DTYPE_STRING) {
            size_t need = (size_t)numel * cinfer_dtype_size(in->dtype);
            if (in->byte_size != need)
                return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape %s of %s needs %zu bytes but %zu were given", in->name,
                                  shape_text(got, sizeof got, in->shape, in->ndim), kserve_dtype_name(in->dtype), need,
                                  in->byte_size);
        }
        if (in->shm.held && !in->data && read_shm_input((kserve_input *)in, r->pinned_device, e) != 0) return -1;
        if (in->dtype == CINFER_DTYPE_STRING) {
            int64_t count;
            if (count_bytes_elements(in->data, in->byte_size, &count) != 0)
                return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': BYTES data is malformed (each element is a 4-byte "
                                                        "little-endian length then that many bytes)", in->name);
            if (count != numel)
                return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape %s needs %" PRId64 " BYTES elements but the data has "
                                                        "%" PRId64, in->name, shape_text(got, sizeof got, in->shape, in->ndim),
                                  numel, count);
        } else {
            size_t need = (size_t)numel * cinfer_dtype_size(in->dtype);
            if (in->byte_size != need)
                return serve_fail(e, SERVE_BAD_REQUEST, "input '%s': shape %s of %s needs %zu bytes but %zu were given", in->name,
                                  shape_text(got, sizeof got, in->shape, in->ndim), kserve_dtype_name(in->dtype), need,
                                  in->byte_size);
        }
        size_t esz = cinfer_dtype_size(in->dtype);
        if (esz > 1 && ((uintptr_t)in->data % esz) != 0) {
            /* binary data starts wherever the JSON header ended: copy it to an aligned buffer for the engine */
            kserve_input *w = (kserve_input *)in;
            void *copy = aligned_alloc(64, (in->byte_size + 63) / 64 * 64 + 64);
            if (!copy) return serve_fail(e, SERVE_INTERNAL, "out of memory copying input '%s'", in->name);
            memcpy(copy, in->data, in->byte_size);
            free(w->owned);
            w->owned = copy;
            w->data = copy;
        }
        cinfer_tensor *ct = &tensors[k];
        memset(ct, 0, sizeof *ct);
        ct->name = t->name;
        ct->dtype = t->dtype;
        ct->ndim = in->ndim;
        memcpy(ct->dims, in->shape, sizeof ct->dims);
        ct->data = (void *)in->data;
    }
    *batch_size = batched ? batch : 1;
    for (size_t i = 0; i < r->num_outputs; i++) {
        const kserve_output *o = &r->outputs[i];
        if (!output_known(cfg, o->name))
            return serve_fail(e, SERVE_BAD_REQUEST, "unexpected inference output '%s' for model '%s'", o->name, cfg->name);
    }
    for (size_t k = 0; k < cfg->num_outputs; k++) {
        const config_tensor *t = &cfg->outputs[k];
        int wanted = r->num_outputs == 0, binary = r->binary_data_output;
        const kserve_output *req_out = NULL;
        for (size_t i = 0; i < r->num_outputs; i++)
            if (!strcmp(r->outputs[i].name, t->name)) {
                wanted = 1;
                req_out = &r->outputs[i];
                if (r->outputs[i].binary >= 0) binary = r->outputs[i].binary;
            }
        if (req_out && req_out->shm.region) {
            /* the config fixes the size when no dim is variable: refuse a range too small before running */
            size_t esz = cinfer_dtype_size(t->dtype);
            int64_t numel = batched ? batch : 1;
            for (int d = 0; d < t->ndims && numel >= 0; d++) numel = t->dims[d] < 0 ? -1 : numel * t->dims[d];
            if (esz && numel >= 0 && (uint64_t)numel * esz > req_out->shm.byte_size)
                return serve_fail(e, SERVE_BAD_REQUEST, "output '%s' of model '%s' needs %" PRIu64 " bytes but its "
                                                        "shared_memory_byte_size is %" PRIu64, t->name, cfg->name,
                                  (uint64_t)numel * esz, req_out->shm.byte_size);
            continue;
        }
        if (wanted && !binary && (t->dtype == CINFER_DTYPE_FLOAT16 || t->dtype == CINFER_DTYPE_BFLOAT16))
            return serve_fail(e, SERVE_BAD_REQUEST, "output '%s' of model '%s' has datatype %s, which is only returned as binary "
                                                    "data: request it with \"binary_data\": true", t->name, cfg->name,
                              kserve_dtype_name(t->dtype));
    }
    return 0;
}

/* ---- response ---- */

static json_t *data_json(const cinfer_tensor *t, int64_t numel) {
    json_t *a = json_array();
    const void *d = t->data;
    for (int64_t i = 0; i < numel; i++) {
        json_t *v;
        switch (t->dtype) {
        case CINFER_DTYPE_BOOL: v = json_boolean(((const uint8_t *)d)[i]); break;
        case CINFER_DTYPE_UINT8: v = json_integer(((const uint8_t *)d)[i]); break;
        case CINFER_DTYPE_UINT16: v = json_integer(((const uint16_t *)d)[i]); break;
        case CINFER_DTYPE_UINT32: v = json_integer(((const uint32_t *)d)[i]); break;
        case CINFER_DTYPE_UINT64: v = json_integer((json_int_t)((const uint64_t *)d)[i]); break;
        case CINFER_DTYPE_INT8: v = json_integer(((const int8_t *)d)[i]); break;
        case CINFER_DTYPE_INT16: v = json_integer(((const int16_t *)d)[i]); break;
        case CINFER_DTYPE_INT32: v = json_integer(((const int32_t *)d)[i]); break;
        case CINFER_DTYPE_INT64: v = json_integer(((const int64_t *)d)[i]); break;
        case CINFER_DTYPE_FLOAT: {
            double x = ((const float *)d)[i];
            v = isfinite(x) ? json_real(x) : json_null(); /* JSON has no NaN/Inf */
            break;
        }
        case CINFER_DTYPE_DOUBLE: {
            double x = ((const double *)d)[i];
            v = isfinite(x) ? json_real(x) : json_null();
            break;
        }
        default: v = json_null();
        }
        json_array_append_new(a, v);
    }
    return a;
}

/* The response header is written directly (no jansson tree, no json_dumps copy): a growable buffer whose first
 * allocation also holds the binary outputs, which are appended after the JSON text. Strings are escaped as jansson
 * escapes them (", \, control characters; UTF-8 passes through). JSON `data` arrays still go through jansson
 * (data_json), so their number formatting is jansson's. */
typedef struct sbuf {
    char *d;
    size_t n, cap;
    int oom;
} sbuf;

static int sb_reserve(sbuf *b, size_t more) {
    if (b->oom) return -1;
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap * 2; /* the first reservation is exact: it holds the binary outputs too */
    if (cap < b->n + more) cap = b->n + more;
    char *nd = realloc(b->d, cap);
    if (!nd) {
        b->oom = 1;
        return -1;
    }
    b->d = nd;
    b->cap = cap;
    return 0;
}

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (sb_reserve(b, n) != 0) return;
    memcpy(b->d + b->n, s, n);
    b->n += n;
}

#define SB_LIT(b, lit) sb_put((b), (lit), sizeof(lit) - 1)

static void sb_str(sbuf *b, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    if (sb_reserve(b, n + 2) != 0) return;
    b->d[b->n++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            if (sb_reserve(b, 2) != 0) return; /* this character and the closing quote */
            b->d[b->n++] = (char)c;
            continue;
        }
        char e[6] = {'\\', 0};
        size_t k = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            memcpy(e, "\\u00", 4);
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            k = 6;
        }
        sb_put(b, e, k);
    }
    SB_LIT(b, "\"");
}

static void sb_int(sbuf *b, int64_t v) {
    char t[24], *p = t + sizeof t;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    sb_put(b, p, (size_t)(t + sizeof t - p));
}

int kserve_encode_response(const kserve_infer_request *r, const char *model_name, const char *version,
                           const cinfer_tensor *outputs, size_t num_outputs, char **body, size_t *body_len,
                           size_t *json_len, serve_error *e) {
    *body = NULL;
    *body_len = *json_len = 0;
    /* requested outputs in request order, else all in model order: which tensors, and how each is sent */
    size_t count = r->num_outputs ? r->num_outputs : num_outputs;
    const cinfer_tensor *picked_one[1], *bins_one[1], **picked = picked_one, **bins = bins_one;
    int is_bin_one[1], *is_bin = is_bin_one;
    size_t nbin = 0, bin_bytes = 0;
    sbuf b = {0};
    int rc = -1;
    if (count > 1) {
        picked = calloc(count, sizeof *picked);
        bins = calloc(count, sizeof *bins);
        is_bin = calloc(count, sizeof *is_bin);
        if (!picked || !bins || !is_bin) goto done;
    }
    for (size_t i = 0; i < count; i++) {
        const cinfer_tensor *t = NULL;
        int binary = r->binary_data_output;
        if (r->num_outputs) {
            for (size_t k = 0; k < num_outputs && !t; k++)
                if (!strcmp(outputs[k].name, r->outputs[i].name)) t = &outputs[k];
            if (r->outputs[i].binary >= 0) binary = r->outputs[i].binary;
        } else {
            t = &outputs[i];
        }
        if (!t) {
            serve_fail(e, SERVE_INTERNAL, "output '%s' was not produced by model '%s'", r->outputs[i].name, model_name);
            goto done;
        }
        if (t->dtype == CINFER_DTYPE_FLOAT16 || t->dtype == CINFER_DTYPE_BFLOAT16 || t->dtype == CINFER_DTYPE_STRING) binary = 1;
        const kserve_shm_ref *shm = r->num_outputs ? &r->outputs[i].shm : NULL;
        picked[i] = t;
        is_bin[i] = shm && shm->region ? -1 : binary;
        if (is_bin[i] == 1) bin_bytes += (size_t)kserve_numel(t->dims, t->ndim) * cinfer_dtype_size(t->dtype);
    }
    /* one allocation for the header (grown only when it passes 256 bytes plus the names) and the binary part */
    size_t guess = 256 + (r->id ? strlen(r->id) : 0) + strlen(model_name) + strlen(version);
    for (size_t i = 0; i < count; i++) guess += 96 + strlen(picked[i]->name);
    if (sb_reserve(&b, guess + bin_bytes + 1) != 0) goto done;
    SB_LIT(&b, "{");
    if (r->id) {
        SB_LIT(&b, "\"id\":");
        sb_str(&b, r->id);
        SB_LIT(&b, ",");
    }
    SB_LIT(&b, "\"model_name\":");
    sb_str(&b, model_name);
    SB_LIT(&b, ",\"model_version\":");
    sb_str(&b, version);
    SB_LIT(&b, ",\"outputs\":[");
    for (size_t i = 0; i < count; i++) {
        const cinfer_tensor *t = picked[i];
        int64_t numel = kserve_numel(t->dims, t->ndim);
        if (i) SB_LIT(&b, ",");
        SB_LIT(&b, "{\"name\":");
        sb_str(&b, t->name);
        SB_LIT(&b, ",\"datatype\":");
        sb_str(&b, kserve_dtype_name(t->dtype));
        SB_LIT(&b, ",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) SB_LIT(&b, ",");
            sb_int(&b, t->dims[d]);
        }
        SB_LIT(&b, "]");
        if (is_bin[i] < 0) { /* into the shared-memory region; the response lists the output without data */
            const kserve_shm_ref *shm = &r->outputs[i].shm;
            size_t nbytes = (size_t)numel * cinfer_dtype_size(t->dtype);
            if (!shm->held) {
                serve_fail(e, SERVE_INTERNAL, "output '%s': shared memory region '%s' was not resolved", t->name, shm->region);
                goto done;
            }
            if (nbytes > shm->byte_size) {
                serve_fail(e, SERVE_BAD_REQUEST, "output '%s' of model '%s' has %zu bytes, more than its "
                                                 "shared_memory_byte_size of %" PRIu64 " in region '%s'", t->name, model_name,
                           nbytes, shm->byte_size, shm->region);
                goto done;
            }
            char what[160];
            snprintf(what, sizeof what, "output '%s'", t->name);
            if (nbytes && shm_region_write(shm->held, shm->offset, t->data, nbytes, what, e) != 0) goto done;
        } else if (is_bin[i]) {
            SB_LIT(&b, ",\"parameters\":{\"binary_data_size\":");
            sb_int(&b, (int64_t)((size_t)numel * cinfer_dtype_size(t->dtype)));
            SB_LIT(&b, "}");
            bins[nbin++] = t;
        } else {
            json_t *a = data_json(t, numel);
            char *js = a ? json_dumps(a, JSON_COMPACT) : NULL;
            json_decref(a);
            if (!js) goto done;
            SB_LIT(&b, ",\"data\":");
            sb_put(&b, js, strlen(js));
            free(js);
        }
        SB_LIT(&b, "}");
    }
    SB_LIT(&b, "]}");
    size_t jl = b.n;
    if (sb_reserve(&b, bin_bytes + 1) != 0) goto done;
    for (size_t i = 0; i < nbin; i++) {
        size_t nb = (size_t)kserve_numel(bins[i]->dims, bins[i]->ndim) * cinfer_dtype_size(bins[i]->dtype);
        if (nb) memcpy(b.d + b.n, bins[i]->data, nb);
        b.n += nb;
    }
    b.d[b.n] = 0; /* not part of the body: lets the JSON-only body be read as a string */
    *body = b.d;
    *body_len = b.n;
    *json_len = nbin ? jl : 0;
    b.d = NULL;
    rc = 0;
done:
    if (rc && !e->code) serve_fail(e, SERVE_INTERNAL, "out of memory while encoding the response of model '%s'", model_name);
    if (picked != picked_one) free(picked);
    if (bins != bins_one) free(bins);
    if (is_bin != is_bin_one) free(is_bin);
    free(b.d);
    return rc;
}
