/* Session options: the one table of the options cinfer_session_create takes, its parser and its public listing.
 *
 * Each entry says an option's key, type, allowed values, default, documentation and the session_options field it
 * fills; the parser, every error message about an option, cinfer_num_session_options / cinfer_session_option_info
 * (and through them `cinfer options`, the CLI's help and cinfer-server's cinfer_<key> parameters) come from here.
 * Adding an option is one entry plus the code that uses its field.
 */
#include "runtime/session_options.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "runtime/session_internal.h"

typedef enum option_type {
    OPTION_BOOL, /* "0" or "1" into a bool */
    OPTION_INT,  /* a decimal integer in [min, max] into a long */
    OPTION_ENUM, /* one of `names` into an int: its index */
} option_type;

typedef struct option_entry {
    const char *key;           /* a prefix option's prefix ("dim."): its keys are the prefix plus a name */
    bool is_prefix;            /* the one prefix option, dim.NAME, fills num_dims / dim_names / dim_values */
    option_type type;
    long min, max;             /* OPTION_INT; max LONG_MAX: no upper bound */
    const char *noun;          /* OPTION_INT: what the number is, for messages ("a count from 0 to 1024") */
    const char *const *names;  /* OPTION_ENUM: the values, NULL-terminated, in the order of the field's enum */
    const char *default_value; /* parsed like a given value; NULL: left out, the option is off (the field is 0) */
    const char *doc;           /* what the option does: what cinfer_session_option_info hands out as `doc` */
    size_t offset;             /* the field in session_options */
} option_entry;

static const char *const precision_names[] = {"fp32", "tf32", "fp16", "bf16", NULL};  /* session_precision order */
static const char *const gpu_wait_names[] = {"spin", "block", NULL};                  /* session_gpu_wait order */

#define FIELD(name) offsetof(session_options, name)

static const option_entry option_table[] = {
    {.key = "threads", .type = OPTION_INT, .min = 0, .max = 1024, .noun = "count", .default_value = "0",
     .offset = FIELD(threads),
     .doc = "Number of CPU threads the CPU backend runs kernels on; 0: all cores."},
    {.key = "precision", .type = OPTION_ENUM, .names = precision_names, .default_value = "fp32",
     .offset = FIELD(precision),
     .doc = "fp32: float32, TF32 off. tf32: float32 data, TF32 tensor-core GEMMs and convolutions on GPUs (the same "
            "as fp32 on the CPU). fp16 | bf16: weights converted once per model, float32 inputs cast down on entry and "
            "outputs cast back up, so callers keep the model's dtypes; softmax, normalisations and reductions "
            "accumulate in float32."},
    {.key = "deterministic", .type = OPTION_BOOL, .default_value = "0", .offset = FIELD(deterministic),
     .doc = "1: only algorithms whose results are bitwise identical run to run (GPU: deterministic cuDNN algorithms, "
            "no split reductions with atomics; the CPU backend always is)."},
    {.key = "cuda_graphs", .type = OPTION_BOOL, .default_value = "1", .offset = FIELD(cuda_graphs),
     .doc = "GPU sessions. 1: each plan (one set of input shapes) runs plain on its first run, is captured into a "
            "CUDA graph on its second and replayed from then on, so a run costs one launch; capture is skipped with "
            "profile=1 or guard_bytes, and a plan that cannot be captured runs plain (counted in "
            "cinfer_run_stats.graph_fallbacks). 0: plain launches always."},
    {.key = "gpu_wait", .type = OPTION_ENUM, .names = gpu_wait_names, .default_value = "spin",
     .offset = FIELD(gpu_wait),
     .doc = "GPU sessions: how a run waits for its stream at the end. spin: lowest latency; a core busy for the whole "
            "GPU time. block: sleeps on a blocking CUDA event; the core is free for other work, the wake-up adds some "
            "microseconds."},
    {.key = "profile", .type = OPTION_BOOL, .default_value = "0", .offset = FIELD(profile),
     .doc = "1: time every node (read with cinfer_session_node_profile; costs a clock read per node)."},
    {.key = "guard_bytes", .type = OPTION_INT, .min = 0, .max = 1 << 20, .noun = "count", .default_value = "0",
     .offset = FIELD(guard_bytes),
     .doc = "Debugging (the differential op tests use it). N > 0: every intermediate and output gets its own block "
            "with N guard bytes around it, filled with a pattern and checked after each run, so an out-of-bounds write "
            "fails the run naming the value and node. 0: off."},
    {.key = "copy_chunks", .type = OPTION_INT, .min = 0, .max = PLAN_MAX_CHUNKS, .noun = "count",
     .default_value = "0", .offset = FIELD(copy_chunks),
     .doc = "GPU sessions: chunked copies of pointwise models (every node elementwise, reading values of its "
            "output's shape or one-element constants, like an image windowing step): cinfer_session_run_into between "
            "page-locked buffers splits the run into chunks whose uploads, compute and downloads overlap on two copy "
            "streams. 0: chunks of about 4 MiB of inputs and outputs, when that makes two or more. 1: never split. "
            "N: N chunks. Outputs are the same bytes either way; a chunked run shows N copies each way in "
            "cinfer_run_stats."},
    {.key = "timeline", .type = OPTION_BOOL, .default_value = "0", .offset = FIELD(timeline),
     .doc = "GPU sessions. 1: times every run with CUDA events: each copy and each stretch of the model's compute "
            "becomes a span with its stream and start and end (read with cinfer_session_timeline), which shows how "
            "copies and compute overlap. Each span costs two event records (about 2 us of host time); outputs are "
            "unchanged. A CPU session refuses it."},
    {.key = "max_batch", .type = OPTION_INT, .min = 1, .max = 1L << 40, .noun = "batch size",
     .offset = FIELD(max_batch),
     .doc = "Device backends: capacity planning at creation. The model's weights plus a run's activations and io at "
            "batch N (the first dim of each input; other dynamic dims from dim.NAME) must leave 20% of the device's "
            "memory (or its configured limit) free, else creation fails with the figures. Left out: no check."},
    {.key = "dim.", .is_prefix = true, .type = OPTION_INT, .min = 1, .max = LONG_MAX, .noun = "size",
     .offset = FIELD(dim_values),
     .doc = "For max_batch: the largest value of the inputs' dynamic dim named NAME (one option per dim name)."},
};

#define NUM_OPTIONS (sizeof option_table / sizeof option_table[0])

/* What an option takes, as the listing shows it: "0 or 1", "fp32, tf32, fp16 or bf16", "0 to 1024", ">= 1". */
static void format_values(const option_entry *e, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    switch (e->type) {
    case OPTION_BOOL:
        snprintf(buf, len, "0 or 1");
        break;
    case OPTION_INT:
        if (e->max == LONG_MAX) snprintf(buf, len, ">= %ld", e->min);
        else snprintf(buf, len, "%ld to %ld", e->min, e->max);
        break;
    case OPTION_ENUM:
        for (size_t i = 0; e->names[i] && used < len; i++)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", i == 0 ? "" : e->names[i + 1] ? ", " : " or ",
                                     e->names[i]);
        break;
    }
}

/* Parses `value` into `field` as entry e's type; false when e does not take it. */
static bool parse_value(const option_entry *e, const char *value, void *field) {
    switch (e->type) {
    case OPTION_BOOL:
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) return false;
        *(bool *)field = value[0] == '1';
        return true;
    case OPTION_INT: {
        char *end;
        long n = strtol(value, &end, 10);
        if (*end || n < e->min || n > e->max) return false;
        *(long *)field = n;
        return true;
    }
    case OPTION_ENUM:
        for (int i = 0; e->names[i]; i++)
            if (strcmp(value, e->names[i]) == 0) {
                *(int *)field = i;
                return true;
            }
        return false;
    }
    return false;
}

static cinfer_status bad_value(const option_entry *e, const char *key, const char *value) {
    char values[128];
    format_values(e, values, sizeof values);
    if (e->type != OPTION_INT)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "session option '%s': '%s' is not %s", key, value, values);
    return core_error(CINFER_ERR_INVALID_ARGUMENT, "session option '%s': '%s' is not a %s %s%s", key, value, e->noun,
                      e->max == LONG_MAX ? "" : "from ", values);
}

static cinfer_status unknown_key(const char *key) {
    char known[512];
    size_t used = 0;
    known[0] = '\0';
    for (size_t i = 0; i < NUM_OPTIONS && used < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s%s", i ? ", " : "", option_table[i].key,
                                 option_table[i].is_prefix ? "NAME" : "");
    return core_error(CINFER_ERR_INVALID_ARGUMENT, "unknown session option '%s' (known: %s)", key, known);
}

cinfer_status session_options_parse(const char *const *keys, const char *const *values, size_t n,
                                    session_options *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < NUM_OPTIONS; i++) {
        const option_entry *e = &option_table[i];
        if (e->default_value) CINFER_ASSERT(parse_value(e, e->default_value, (char *)out + e->offset));
    }
    for (size_t k = 0; k < n; k++) {
        const char *key = keys[k], *value = values[k];
        const option_entry *e = NULL;
        for (size_t i = 0; i < NUM_OPTIONS && !e; i++) {
            const option_entry *c = &option_table[i];
            size_t len = strlen(c->key);
            if (c->is_prefix ? strncmp(key, c->key, len) == 0 && key[len] : strcmp(key, c->key) == 0) e = c;
        }
        if (!e) return unknown_key(key);
        if (!e->is_prefix) {
            if (!parse_value(e, value, (char *)out + e->offset)) return bad_value(e, key, value);
            continue;
        }
        long dim;
        if (!parse_value(e, value, &dim)) return bad_value(e, key, value);
        if (out->num_dims == SESSION_MAX_DIMS)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "more than %d %sNAME options", SESSION_MAX_DIMS, e->key);
        out->dim_names[out->num_dims] = key + strlen(e->key);
        out->dim_values[out->num_dims++] = dim;
    }
    return CINFER_OK;
}

/* The listing's values texts, made once from the table (the strings it hands out live as long as the process). */
static char listed_values[NUM_OPTIONS][128];
static pthread_once_t listed_values_once = PTHREAD_ONCE_INIT;

static void format_listed_values(void) {
    for (size_t i = 0; i < NUM_OPTIONS; i++) format_values(&option_table[i], listed_values[i], sizeof listed_values[i]);
}

size_t cinfer_num_session_options(void) { return NUM_OPTIONS; }

cinfer_status cinfer_session_option_info(size_t index, cinfer_option_info *out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_session_option_info: out is required");
    if (index >= NUM_OPTIONS)
        return core_error(CINFER_ERR_NOT_FOUND, "session option index %zu out of range (%zu options)", index,
                          (size_t)NUM_OPTIONS);
    static const char *const type_names[] = {[OPTION_BOOL] = "bool", [OPTION_INT] = "int", [OPTION_ENUM] = "enum"};
    pthread_once(&listed_values_once, format_listed_values);
    const option_entry *e = &option_table[index];
    out->key = e->key;
    out->is_prefix = e->is_prefix;
    out->type = type_names[e->type];
    out->values = listed_values[index];
    out->default_value = e->default_value ? e->default_value : "none";
    out->doc = e->doc;
    return CINFER_OK;
}
