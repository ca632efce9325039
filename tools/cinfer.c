/* cinfer command-line tool: run a model on .npy inputs, inspect it, list ops, benchmark it. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cinfer/cinfer.h"

#define MAX_CLI_INPUTS 64
#define MAX_CLI_OPTIONS 64 /* session options one command takes */

static void usage(FILE *f) {
    fprintf(f,
            "cinfer %s: ONNX inference engine\n"
            "usage:\n"
            "  cinfer run MODEL.onnx --input NAME=FILE.npy [...] --output-dir DIR [--device cpu|cuda[:N]] [--threads N]\n"
            "             [--precision P] [--deterministic] [--option KEY=VALUE ...] [--timings]\n"
            "  cinfer inspect MODEL.onnx [--batch N] [--dim NAME=VALUE ...] [--device cpu|cuda[:N]]\n"
            "  cinfer ops\n"
            "  cinfer bench MODEL.onnx [--batch N] [--iters K] [--warmup W] [--threads N] [--device cpu|cuda[:N]]\n"
            "               [--dim NAME=VALUE ...] [--int-high N] [--input NAME=FILE.npy ...] [--profile]\n"
            "               [--precision P] [--deterministic] [--option KEY=VALUE ...] [--timeline]\n"
            "  cinfer options              list the session options (--option KEY=VALUE), their values and defaults\n"
            "  cinfer gpus                 list the CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies)\n"
            "  cinfer version\n"
            "Dynamic dims: the first dynamic dim of each input is the batch (--batch, default 1); other\n"
            "dynamic dims take --dim NAME=VALUE by their symbolic name, else 1.\n"
            "--option KEY=VALUE sets a session option (cinfer options lists them; the engine checks the value);\n"
            "--threads N, --precision P and --deterministic are --option threads=N, precision=P, deterministic=1.\n"
            "--timings: run prints how long each step took (model load, session, run, outputs) to stderr.\n"
            "--profile: bench prints the time per op type (session option profile=1).\n"
            "--timeline (GPU): bench then runs a second session with CUDA events around each copy and stretch of\n"
            "compute and prints one run's spans (which stream, when), showing how copies and compute overlap.\n",
            cinfer_version());
}

/* Prints `text` from column `indent` in lines of at most `width` columns, breaking at spaces. */
static void print_wrapped(FILE *f, const char *text, int indent, int width) {
    while (*text) {
        int room = width - indent, len = (int)strlen(text);
        if (len > room) {
            len = room;
            while (len > 0 && text[len] != ' ') len--;
            if (len == 0) len = (int)strcspn(text, " "); /* a word longer than the line: on a line of its own */
        }
        fprintf(f, "%*s%.*s\n", indent, "", len, text);
        text += len;
        while (*text == ' ') text++;
    }
}

/* The engine's session options (cinfer_session_option_info): key, type, values, default, then what it does. */
static void print_session_options(FILE *f) {
    fprintf(f, "session options (--option KEY=VALUE; cinfer-server: config parameter cinfer_KEY):\n");
    for (size_t i = 0; i < cinfer_num_session_options(); i++) {
        cinfer_option_info info;
        if (cinfer_session_option_info(i, &info) != CINFER_OK) continue;
        char key[64];
        snprintf(key, sizeof key, "%s%s", info.key, info.is_prefix ? "NAME" : "");
        fprintf(f, "  %-14s %-5s %s (default: %s)\n", key, info.type, info.values, info.default_value);
        print_wrapped(f, info.doc, 6, 116);
    }
}

static int cmd_options(void) {
    print_session_options(stdout);
    return 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The ordinal of a "cuda" / "cuda:N" device, -1 for any other (the session reports a bad one). */
static int cuda_ordinal(const char *device) {
    if (strncmp(device, "cuda", 4) != 0) return -1;
    return device[4] == ':' ? atoi(device + 5) : 0;
}

static int fail(const char *what) {
    fprintf(stderr, "cinfer: %s: %s\n", what, cinfer_last_error());
    return 1;
}

typedef struct cli_options {
    const char *model_path;
    const char *input_specs[MAX_CLI_INPUTS];
    int num_inputs;
    const char *dim_specs[MAX_CLI_INPUTS];
    int num_dims;
    const char *output_dir;
    const char *device;
    const char *threads;   /* the session options threads, precision and deterministic as given, for bench's */
    const char *precision; /* summary line (the last value of each; NULL / false: not given) */
    /* session options in the order given: --option KEY=VALUE and the flags that stand for one */
    const char *option_keys[MAX_CLI_OPTIONS], *option_values[MAX_CLI_OPTIONS];
    char option_key_text[MAX_CLI_OPTIONS][128];
    int num_options;
    long batch, iters, warmup, int_high;
    bool profile, deterministic, timings, timeline;
    bool batch_given; /* --batch was on the command line */
} cli_options;

/* Adds session option key=value (the engine checks it when the session is created); 0, or 2 when there are too
 * many or the key does not fit. */
static int add_session_option(cli_options *o, const char *key, size_t key_len, const char *value) {
    if (o->num_options == MAX_CLI_OPTIONS)
        return fprintf(stderr, "cinfer: more than %d session options\n", MAX_CLI_OPTIONS), 2;
    if (key_len == 0 || key_len >= sizeof o->option_key_text[0])
        return fprintf(stderr, "cinfer: session option key '%.*s' is empty or too long\n", (int)key_len, key), 2;
    char *copy = o->option_key_text[o->num_options];
    memcpy(copy, key, key_len);
    copy[key_len] = '\0';
    o->option_keys[o->num_options] = copy;
    o->option_values[o->num_options++] = value;
    if (strcmp(copy, "threads") == 0) o->threads = value;
    if (strcmp(copy, "precision") == 0) o->precision = value;
    if (strcmp(copy, "deterministic") == 0) o->deterministic = strcmp(value, "1") == 0;
    return 0;
}

/* Parses the options shared by the subcommands; returns 0 or prints the problem and returns 2. */
/* The subcommands' flags, parsed with getopt_long: "--flag VALUE" or "--flag=VALUE". */
enum cli_flag {
    CLI_INPUT = 256, CLI_DIM, CLI_OUTPUT_DIR, CLI_DEVICE, CLI_THREADS, CLI_PRECISION, CLI_OPTION, CLI_BATCH, CLI_ITERS,
    CLI_WARMUP, CLI_INT_HIGH, CLI_PROFILE, CLI_TIMINGS, CLI_TIMELINE, CLI_DETERMINISTIC,
};

static const struct option CLI_FLAGS[] = {
    {"input", required_argument, NULL, CLI_INPUT},         {"dim", required_argument, NULL, CLI_DIM},
    {"output-dir", required_argument, NULL, CLI_OUTPUT_DIR}, {"device", required_argument, NULL, CLI_DEVICE},
    {"threads", required_argument, NULL, CLI_THREADS},     {"precision", required_argument, NULL, CLI_PRECISION},
    {"option", required_argument, NULL, CLI_OPTION},       {"batch", required_argument, NULL, CLI_BATCH},
    {"iters", required_argument, NULL, CLI_ITERS},         {"warmup", required_argument, NULL, CLI_WARMUP},
    {"int-high", required_argument, NULL, CLI_INT_HIGH},   {"profile", no_argument, NULL, CLI_PROFILE},
    {"timings", no_argument, NULL, CLI_TIMINGS},           {"timeline", no_argument, NULL, CLI_TIMELINE},
    {"deterministic", no_argument, NULL, CLI_DETERMINISTIC}, {NULL, 0, NULL, 0},
};

/* "--flag=value" or "--flag" as typed, without the value, for messages. */
static const char *typed_flag(const char *arg, char *buf, size_t len) {
    const char *eq = strchr(arg, '=');
    snprintf(buf, len, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
    return buf;
}

/* Parses a subcommand's flags (argv[0] is the subcommand) and its one positional argument, the model; returns 0 or
 * prints the problem and returns 2. Flags and the model may come in any order. */
static int parse_options(int argc, char **argv, cli_options *o) {
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->batch = 1;
    o->iters = 100;
    o->warmup = 10;
    o->int_high = 2;
    opterr = 0; /* our own messages */
    optind = 1;
    for (;;) {
        int index = -1;
        int id = getopt_long(argc, argv, ":", CLI_FLAGS, &index);
        if (id == -1) break;
        char flag[64];
        /* unknown, or a value missing at the end: the flag is the element getopt_long just read */
        if (id == '?') return fprintf(stderr, "cinfer: unknown option %s\n", typed_flag(argv[optind - 1], flag, sizeof flag)), 2;
        if (id == ':') return fprintf(stderr, "cinfer: option %s needs a value\n", typed_flag(argv[optind - 1], flag, sizeof flag)), 2;
        snprintf(flag, sizeof flag, "--%s", CLI_FLAGS[index].name);
        const char *v = optarg;
        switch (id) {
        case CLI_INPUT:
            if (o->num_inputs == MAX_CLI_INPUTS) return fprintf(stderr, "cinfer: too many --input\n"), 2;
            o->input_specs[o->num_inputs++] = v;
            break;
        case CLI_DIM:
            if (o->num_dims == MAX_CLI_INPUTS) return fprintf(stderr, "cinfer: too many --dim\n"), 2;
            o->dim_specs[o->num_dims++] = v;
            break;
        case CLI_OUTPUT_DIR: o->output_dir = v; break;
        case CLI_DEVICE: o->device = v; break;
        /* aliases of session options: the engine checks their values */
        case CLI_THREADS: if (add_session_option(o, "threads", strlen("threads"), v)) return 2; break;
        case CLI_PRECISION: if (add_session_option(o, "precision", strlen("precision"), v)) return 2; break;
        case CLI_DETERMINISTIC: if (add_session_option(o, "deterministic", strlen("deterministic"), "1")) return 2; break;
        case CLI_OPTION: {
            const char *eq = strchr(v, '=');
            if (!eq) return fprintf(stderr, "cinfer: --option wants KEY=VALUE, got '%s'\n", v), 2;
            if (add_session_option(o, v, (size_t)(eq - v), eq + 1)) return 2;
            break;
        }
        case CLI_BATCH: case CLI_ITERS: case CLI_WARMUP: case CLI_INT_HIGH: {
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || !*v || *end || n < 0 || (n == 0 && id != CLI_WARMUP)) {
                fprintf(stderr, "cinfer: %s wants a positive integer, got '%s'\n", flag, v);
                return 2;
            }
            if (id == CLI_BATCH) o->batch = n, o->batch_given = true;
            else if (id == CLI_ITERS) o->iters = n;
            else if (id == CLI_WARMUP) o->warmup = n;
            else o->int_high = n;
            break;
        }
        case CLI_PROFILE: o->profile = true; break;
        case CLI_TIMINGS: o->timings = true; break;
        case CLI_TIMELINE: o->timeline = true; break;
        default: return fprintf(stderr, "cinfer: internal: option %d has no handler\n", id), 2;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (o->model_path) return fprintf(stderr, "cinfer: unexpected argument '%s'\n", argv[i]), 2;
        o->model_path = argv[i];
    }
    return 0;
}

/* Starts the CUDA device a session will run on (driver, primary context: about 0.4 s in a fresh process on an H200
 * host) while the main thread loads the model. Errors are left for the session to report. */
static void *start_device(void *ordinal) {
    cinfer_device_info info;
    (void)cinfer_cuda_device_info((int)(intptr_t)ordinal, &info);
    return NULL;
}

/* Loads the model and opens its session; *loaded_at (when not NULL): when the model was loaded (now_seconds). */
/* A session of `model` with the options o asks for, plus timeline=1 when `timeline`. */
static cinfer_status create_session(const cli_options *o, cinfer_model *model, bool timeline, cinfer_session **session) {
    const char *keys[MAX_CLI_OPTIONS + 2], *vals[MAX_CLI_OPTIONS + 2];
    size_t num_options = 0;
    for (int i = 0; i < o->num_options; i++) {
        keys[num_options] = o->option_keys[i];
        vals[num_options++] = o->option_values[i];
    }
    if (o->profile && !timeline) {
        keys[num_options] = "profile";
        vals[num_options++] = "1";
    }
    if (timeline) {
        keys[num_options] = "timeline";
        vals[num_options++] = "1";
    }
    return cinfer_session_create(model, o->device, keys, vals, num_options, session);
}

static int open_model(const cli_options *o, cinfer_model **model, cinfer_session **session, double *loaded_at) {
    *model = NULL;
    *session = NULL;
    if (!o->model_path) {
        fprintf(stderr, "cinfer: no model given\n");
        return 2;
    }
    pthread_t starter;
    const int gpu = cuda_ordinal(o->device);
    const bool starting = gpu >= 0 && pthread_create(&starter, NULL, start_device, (void *)(intptr_t)gpu) == 0;
    const cinfer_status loaded = cinfer_model_load(o->model_path, model);
    if (starting) pthread_join(starter, NULL);
    if (loaded != CINFER_OK) return fail("load");
    if (loaded_at) *loaded_at = now_seconds();
    if (create_session(o, *model, false, session) != CINFER_OK) {
        cinfer_model_free(*model);
        *model = NULL;
        return fail("session");
    }
    return 0;
}

static void print_shape(const cinfer_value_info *info) {
    if (info->ndim < 0) {
        printf("(unknown rank)");
        return;
    }
    printf("[");
    for (int d = 0; d < info->ndim; d++) {
        if (d) printf(", ");
        if (info->dims[d] >= 0) printf("%lld", (long long)info->dims[d]);
        else printf("%s", info->dim_names[d] ? info->dim_names[d] : "?");
    }
    printf("]");
}

/* The value --dim NAME=VALUE gives `name`, or -1 when no --dim names it. check_shape_options has checked the specs. */
static long dim_option(const cli_options *o, const char *name) {
    long value = -1;
    for (int k = 0; name && k < o->num_dims; k++) {
        const char *eq = strchr(o->dim_specs[k], '=');
        if (eq && strlen(name) == (size_t)(eq - o->dim_specs[k]) && strncmp(o->dim_specs[k], name, (size_t)(eq - o->dim_specs[k])) == 0)
            value = strtol(eq + 1, NULL, 10);
    }
    return value;
}

/* The index of the dim --batch sets in this input (its first dynamic dim, unless a --dim names it), or -1. */
static int batch_dim(const cli_options *o, const cinfer_value_info *info) {
    for (int d = 0; d < info->ndim; d++)
        if (info->dims[d] < 0) return dim_option(o, info->dim_names[d]) < 0 ? d : -1;
    return -1;
}

/* Concrete shape for a model input: first dynamic dim = batch, named dims from --dim, others 1. */
static int concrete_shape(const cli_options *o, const cinfer_value_info *info, cinfer_tensor *t) {
    t->name = info->name;
    t->dtype = info->dtype;
    t->ndim = info->ndim < 0 ? 0 : info->ndim;
    int batch_at = batch_dim(o, info);
    for (int d = 0; d < t->ndim; d++) {
        long value = info->dims[d] >= 0 ? info->dims[d] : d == batch_at ? o->batch : dim_option(o, info->dim_names[d]);
        t->dims[d] = value < 0 ? 1 : value;
    }
    return 0;
}

/* Refuses shape options that would make a figure describe something other than what ran: a --dim that is not
 * NAME=SIZE or names no dynamic dim of any input, and a --batch that no input takes (every batch dim fixed by the
 * model, or given by --dim, or every such input read from a file of another batch). Returns 0, or 2 (printed). */
static int check_shape_options(const cli_options *o, const cinfer_model *model, const cinfer_tensor *given) {
    size_t ni = cinfer_model_num_inputs(model);
    char dynamic[512] = "";
    for (size_t i = 0; i < ni; i++) {
        cinfer_value_info info;
        if (cinfer_model_input_info(model, i, &info) != CINFER_OK) return fail("inspect");
        for (int d = 0; d < info.ndim; d++)
            if (info.dims[d] < 0 && info.dim_names[d] && !strstr(dynamic, info.dim_names[d]))
                snprintf(dynamic + strlen(dynamic), sizeof dynamic - strlen(dynamic), "%s%s", dynamic[0] ? ", " : "",
                         info.dim_names[d]);
    }
    for (int k = 0; k < o->num_dims; k++) {
        const char *spec = o->dim_specs[k], *eq = strchr(spec, '=');
        char *end = NULL;
        long value = eq ? strtol(eq + 1, &end, 10) : 0;
        if (!eq || eq == spec || !eq[1] || *end || value < 1) {
            fprintf(stderr, "cinfer: --dim wants NAME=SIZE with SIZE >= 1, got '%s'\n", spec);
            return 2;
        }
        bool known = false;
        for (size_t i = 0; i < ni && !known; i++) {
            cinfer_value_info info;
            cinfer_model_input_info(model, i, &info);
            for (int d = 0; d < info.ndim; d++)
                known |= info.dims[d] < 0 && info.dim_names[d] && strlen(info.dim_names[d]) == (size_t)(eq - spec) &&
                         strncmp(info.dim_names[d], spec, (size_t)(eq - spec)) == 0;
        }
        if (!known) {
            fprintf(stderr, "cinfer: --dim %s: the model has no dynamic input dim named '%.*s' (named dynamic dims: %s)\n",
                    spec, (int)(eq - spec), spec, dynamic[0] ? dynamic : "none");
            return 2;
        }
    }
    if (!o->batch_given) return 0;
    bool taken = false;
    for (size_t i = 0; i < ni; i++) {
        cinfer_value_info info;
        cinfer_model_input_info(model, i, &info);
        int d = batch_dim(o, &info);
        if (d < 0) continue;
        for (int k = 0; given && k < o->num_inputs; k++)
            if (strcmp(given[k].name, info.name) == 0 && given[k].ndim > d && given[k].dims[d] != o->batch) {
                fprintf(stderr, "cinfer: --batch %ld: input '%s' is read from a file whose batch dim is %lld\n", o->batch,
                        info.name, (long long)given[k].dims[d]);
                return 2;
            }
        taken = true;
    }
    if (taken) return 0;
    fprintf(stderr, "cinfer: --batch %ld: no input of the model has a dynamic batch dim (the first dynamic dim of an "
                    "input, unless --dim sets it); the model runs at the shapes it was exported with: drop --batch\n",
            o->batch);
    return 2;
}

/* "batch N", or what a model of fixed shapes runs at (`colon`: "batch: N" for the bench header). */
static const char *batch_text(long batch, bool colon) {
    static char text[48];
    if (batch) snprintf(text, sizeof text, "batch%s %ld", colon ? ":" : "", batch);
    else snprintf(text, sizeof text, colon ? "batch: fixed by the model" : "the model's fixed shapes");
    return text;
}

/* The batch the runs carry: the size of the first dynamic dim of the first input that has one (set by --batch, by
 * --dim, or by an input file), as `inputs` hold it; 0 when every input shape is fixed (runs, not items). */
static long measured_batch(const cinfer_model *model, const cinfer_tensor *inputs) {
    for (size_t i = 0; i < cinfer_model_num_inputs(model); i++) {
        cinfer_value_info info;
        if (cinfer_model_input_info(model, i, &info) != CINFER_OK) continue;
        for (int d = 0; d < info.ndim; d++)
            if (info.dims[d] < 0 && inputs[i].ndim > d) return (long)inputs[i].dims[d];
    }
    return 0;
}

static size_t numel_of(const cinfer_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->dims[d];
    return n;
}

/* "[2,3,4]" into buf; returns buf. */
static const char *shape_text(const cinfer_tensor *t, char *buf, size_t size) {
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    if (len < size) snprintf(buf + len, size - len, "]");
    return buf;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Fills t with random values: floats in [-1, 1), integers in [0, int_high), bools 0/1. */
static int fill_random(cinfer_tensor *t, long int_high) {
    size_t n = numel_of(t), es = cinfer_dtype_size(t->dtype);
    t->data = malloc(n * es + 1);
    if (!t->data) return -1;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next() >> 11) / 9007199254740992.0;
        int64_t k = (int64_t)(rng_next() % (uint64_t)(int_high > 0 ? int_high : 1));
        switch (t->dtype) {
        case CINFER_DTYPE_FLOAT: ((float *)t->data)[i] = (float)(2 * u - 1); break;
        case CINFER_DTYPE_DOUBLE: ((double *)t->data)[i] = 2 * u - 1; break;
        case CINFER_DTYPE_INT64: ((int64_t *)t->data)[i] = k; break;
        case CINFER_DTYPE_INT32: ((int32_t *)t->data)[i] = (int32_t)k; break;
        case CINFER_DTYPE_BOOL: ((uint8_t *)t->data)[i] = (uint8_t)(k & 1); break;
        default: memset((char *)t->data + i * es, 0, es); break;
        }
    }
    return 0;
}

static int cmd_gpus(void) {
    int count = 0;
    if (cinfer_cuda_device_count(&count) != CINFER_OK) return fail("gpus");
    printf("%-6s %-28s %-42s %-4s %10s %10s %5s %s\n", "device", "name", "uuid", "cc", "total MiB", "free MiB", "SMs",
           "pci");
    for (int d = 0; d < count; d++) {
        cinfer_device_info info;
        if (cinfer_cuda_device_info(d, &info) != CINFER_OK) return fail("gpus");
        printf("cuda:%-1d %-28s %-42s %d.%d  %10zu %10zu %5d %04x:%02x:%02x%s\n", d, info.name, info.uuid,
               info.compute_major, info.compute_minor, info.total_memory >> 20, info.free_memory >> 20,
               info.multiprocessors, info.pci_domain, info.pci_bus, info.pci_device, info.failed ? "  FAILED" : "");
    }
    return 0;
}

/* The op table by domain: op, opsets it is accepted at, backends. */
static int cmd_ops(void) {
    static const char *const domains[] = {"ai.onnx", "com.microsoft", "cinfer"};
    printf("%-14s %-34s %-9s %s\n", "domain", "op", "opsets", "backends");
    for (size_t d = 0, n = cinfer_num_op_entries(); d < sizeof domains / sizeof domains[0] * n; d++) {
        cinfer_op_info op;
        if (cinfer_op_entry(d % n, &op) != CINFER_OK) return fail("ops");
        if (strcmp(op.domain, domains[d / n]) != 0) continue;
        char opsets[32] = "-";
        if (op.first_opset) snprintf(opsets, sizeof opsets, "%lld-%lld", (long long)op.first_opset, (long long)op.last_opset);
        printf("%-14s %-34s %-9s %s\n", op.domain, op.op_type, opsets, op.backends);
    }
    return 0;
}

/* Releases the data of inputs read from .npy files (NULL entries are skipped). */
static void free_npy_inputs(void **owned, int count) {
    for (int i = 0; i < count; i++) {
        cinfer_tensor t = {.data = owned[i]};
        cinfer_tensor_free_data(&t);
    }
}

/* Reads NAME=FILE.npy specs into tensors (names point into argv). */
static int read_inputs(const cli_options *o, cinfer_tensor *inputs, void **owned) {
    for (int i = 0; i < o->num_inputs; i++) {
        const char *spec = o->input_specs[i];
        const char *eq = strchr(spec, '=');
        if (!eq || eq == spec) {
            fprintf(stderr, "cinfer: --input wants NAME=FILE.npy, got '%s'\n", spec);
            return 2;
        }
        static char names[MAX_CLI_INPUTS][256];
        snprintf(names[i], sizeof names[i], "%.*s", (int)(eq - spec), spec);
        if (cinfer_npy_read(eq + 1, &inputs[i]) != CINFER_OK) {
            fprintf(stderr, "cinfer: input '%s': %s\n", names[i], cinfer_last_error());
            return 1;
        }
        inputs[i].name = names[i];
        owned[i] = inputs[i].data;
    }
    return 0;
}

/* mkdir -p: creates dir and its missing parents. */
static int make_dirs(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int cmd_run(const cli_options *o) {
    if (!o->output_dir) {
        fprintf(stderr, "cinfer run: --output-dir DIR is required\n");
        return 2;
    }
    cinfer_model *model;
    cinfer_session *session;
    const double t_start = now_seconds();
    double t_loaded = t_start;
    int rc = open_model(o, &model, &session, &t_loaded);
    if (rc) return rc;
    const double t_session = now_seconds();
    double t_ran = t_session;
    cinfer_tensor inputs[MAX_CLI_INPUTS];
    void *owned[MAX_CLI_INPUTS] = {0};
    cinfer_tensor *outputs = NULL;
    size_t num_outputs = cinfer_model_num_outputs(model);
    rc = read_inputs(o, inputs, owned);
    if (rc) goto done;
    outputs = calloc(num_outputs, sizeof *outputs);
    if (!outputs) {
        rc = 1;
        goto done;
    }
    if (cinfer_session_run(session, inputs, (size_t)o->num_inputs, outputs, num_outputs) != CINFER_OK) {
        rc = fail("run");
        goto done;
    }
    t_ran = now_seconds();
    if (make_dirs(o->output_dir) != 0) {
        fprintf(stderr, "cinfer: cannot create '%s': %s\n", o->output_dir, strerror(errno));
        rc = 1;
        goto done;
    }
    for (size_t k = 0; k < num_outputs; k++) {
        char path[4096], safe[256];
        snprintf(safe, sizeof safe, "%s", outputs[k].name);
        for (char *c = safe; *c; c++)
            if (*c == '/' || *c == '\\' || *c == ':') *c = '_'; /* output names may hold path characters */
        snprintf(path, sizeof path, "%s/%s.npy", o->output_dir, safe);
        const cinfer_tensor *t = &outputs[k];
        if (cinfer_npy_write(path, t) != CINFER_OK) {
            rc = fail("write output");
            goto done;
        }
        char shape[256];
        printf("%s: %s %s -> %s\n", t->name, cinfer_dtype_name(t->dtype), shape_text(t, shape, sizeof shape), path);
        size_t n = numel_of(t);
        if (t->dtype == CINFER_DTYPE_FLOAT && n) {
            printf("  values:");
            for (size_t i = 0; i < n && i < 8; i++) printf(" %.6g", ((const float *)t->data)[i]);
            printf("%s\n", n > 8 ? " ..." : "");
        }
    }
done:;
    const double t_written = now_seconds();
    if (outputs)
        for (size_t k = 0; k < num_outputs; k++) cinfer_tensor_free_data(&outputs[k]);
    free(outputs);
    free_npy_inputs(owned, o->num_inputs);
    cinfer_session_free(session);
    cinfer_model_free(model);
    const double t_end = now_seconds();
    if (o->timings && rc == 0) /* the input files are read between the session and the run */
        fprintf(stderr, "timings (ms): model load %.1f, session %.1f, inputs + first run %.1f, outputs %.1f, "
                "teardown %.1f, total %.1f\n", (t_loaded - t_start) * 1e3, (t_session - t_loaded) * 1e3,
                (t_ran - t_session) * 1e3, (t_written - t_ran) * 1e3, (t_end - t_written) * 1e3,
                (t_end - t_start) * 1e3);
    return rc;
}

/* "label: N (name, name, ...)", the names from one of the session's node lists. */
static void print_node_list(const char *label, const cinfer_session *session, size_t count,
                            const char *(*node)(const cinfer_session *, size_t)) {
    printf("%s: %zu%s", label, count, count ? " (" : "\n");
    for (size_t i = 0; i < count; i++) printf("%s%s", node(session, i), i + 1 < count ? ", " : ")\n");
}

/* Prints one unsupported node, the table's heading before the first (ctx: the model path). */
static void print_unsupported_node(const cinfer_node_ref *node, void *ctx) {
    static bool heading_printed;
    if (!heading_printed)
        printf("unsupported nodes of %s:\n  %-32s %-24s %-20s %s\n", (const char *)ctx, "node", "op", "domain", "opset");
    heading_printed = true;
    printf("  %-32s %-24s %-20s %lld\n", node->name, node->op_type, node->domain[0] ? node->domain : "ai.onnx",
           (long long)node->opset);
}

/* Lists every node of the model that cinfer cannot run; 1 when there is any, 0 when none (or the file does not
 * decode: the load that follows reports that). */
static int list_unsupported_nodes(const char *path) {
    size_t count = 0;
    if (!path || cinfer_model_unsupported_nodes(path, print_unsupported_node, (void *)path, &count) != CINFER_OK ||
        count == 0)
        return 0;
    fprintf(stderr, "cinfer: inspect: %zu node%s of '%s' use%s ops cinfer does not support (listed above); "
            "`cinfer ops` lists the supported ones\n", count, count > 1 ? "s" : "", path, count > 1 ? "" : "s");
    return 1;
}

static int cmd_inspect(const cli_options *o) {
    cinfer_model *model;
    cinfer_session *session;
    int rc = list_unsupported_nodes(o->model_path);
    if (rc) return rc;
    rc = open_model(o, &model, &session, NULL);
    if (rc) return rc;
    if ((rc = check_shape_options(o, model, NULL)) != 0) {
        cinfer_session_free(session);
        cinfer_model_free(model);
        return rc;
    }
    cinfer_model_stats st;
    cinfer_model_get_stats(model, &st);
    printf("model: %s\nopset: %lld\n", o->model_path, (long long)st.opset);
    size_t ni = cinfer_model_num_inputs(model), no = cinfer_model_num_outputs(model);
    cinfer_tensor inputs[MAX_CLI_INPUTS];
    printf("inputs:\n");
    for (size_t i = 0; i < ni && i < MAX_CLI_INPUTS; i++) {
        cinfer_value_info info;
        cinfer_model_input_info(model, i, &info);
        printf("  %-24s %-8s ", info.name, cinfer_dtype_name(info.dtype));
        print_shape(&info);
        printf("\n");
        memset(&inputs[i], 0, sizeof inputs[i]);
        concrete_shape(o, &info, &inputs[i]);
        if (fill_random(&inputs[i], 1) != 0) { /* values of shape-deciding inputs: zeros are safest */
            fprintf(stderr, "cinfer: out of memory\n");
            return 1;
        }
    }
    printf("outputs:\n");
    for (size_t i = 0; i < no; i++) {
        cinfer_value_info info;
        cinfer_model_output_info(model, i, &info);
        printf("  %-24s %-8s ", info.name, cinfer_dtype_name(info.dtype));
        print_shape(&info);
        printf("\n");
    }
    printf("nodes: %zu (file: %zu; after Identity/Dropout removal, constant and Conv+BN folding, common subexpressions, "
           "the fusions (GELU, Softmax NaN guard, scales, MatMul + bias, Conv/Gemm + Relu, Gemm + Gelu, residual "
           "adds, elementwise chains, attention with its Q/K/V projections as one GEMM) and dead-node removal)\n",
           st.num_nodes, st.num_nodes_original);
    printf("ops:\n");
    for (size_t i = 0; i < cinfer_model_num_op_types(model); i++) {
        const char *op;
        size_t count;
        cinfer_model_op_type(model, i, &op, &count);
        printf("  %-24s %zu\n", op, count);
    }
    printf("parameters: %zu (%.2f MiB)\n", st.num_parameters, st.parameter_bytes / 1048576.0);
    print_node_list("host-evaluated shape nodes", session, cinfer_session_num_host_nodes(session),
                    cinfer_session_host_node);
    size_t fallback = cinfer_session_num_fallback_nodes(session);
    if (fallback) print_node_list("nodes run on the CPU (no kernel on the device)", session, fallback,
                                  cinfer_session_fallback_node);
    size_t arena;
    if (cinfer_session_plan_memory(session, inputs, ni, &arena) == CINFER_OK)
        printf("planned activation memory at %s: %zu bytes (%.2f MiB)\n", batch_text(measured_batch(model, inputs), false), arena,
               arena / 1048576.0);
    else
        rc = fail("plan");
    for (size_t i = 0; i < ni && i < MAX_CLI_INPUTS; i++) free(inputs[i].data);
    cinfer_session_free(session);
    cinfer_model_free(model);
    return rc;
}


static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Time per op type over all timed runs (warm-up included), largest first. */
static void print_profile(const cinfer_model *model, const cinfer_session *session, long runs) {
    cinfer_model_stats st;
    cinfer_model_get_stats(model, &st);
    size_t num_types = cinfer_model_num_op_types(model);
    double *per_type = calloc(num_types ? num_types : 1, sizeof(double));
    size_t *order = calloc(num_types ? num_types : 1, sizeof(size_t));
    if (!per_type || !order) {
        free(per_type);
        free(order);
        return;
    }
    double total = 0;
    for (size_t i = 0; i < st.num_nodes; i++) {
        const char *name, *op;
        double ms;
        uint64_t calls;
        if (cinfer_session_node_profile(session, i, &name, &op, &ms, &calls) != CINFER_OK) continue;
        for (size_t t = 0; t < num_types; t++) {
            const char *type;
            cinfer_model_op_type(model, t, &type, NULL);
            if (strcmp(type, op) == 0) per_type[t] += ms;
        }
        total += ms;
    }
    for (size_t t = 0; t < num_types; t++) order[t] = t;
    for (size_t a = 0; a < num_types; a++) /* few types: selection sort */
        for (size_t b = a + 1; b < num_types; b++)
            if (per_type[order[b]] > per_type[order[a]]) {
                size_t tmp = order[a];
                order[a] = order[b];
                order[b] = tmp;
            }
    printf("\nprofile (per run, %ld runs):\n%-24s %6s %10s %7s\n", runs, "op", "nodes", "ms", "share");
    for (size_t k = 0; k < num_types; k++) {
        const char *type;
        size_t count;
        cinfer_model_op_type(model, order[k], &type, &count);
        printf("%-24s %6zu %10.4f %6.1f%%\n", type, count, per_type[order[k]] / (double)runs,
               total > 0 ? 100.0 * per_type[order[k]] / total : 0.0);
    }
    free(per_type);
    free(order);
}

/* One bench run: into the caller's page-locked outputs, or into outputs the session allocates (freed by the caller). */
static cinfer_status bench_run(cinfer_session *s, const cinfer_tensor *inputs, size_t ni, cinfer_tensor *outputs, size_t no,
                               bool outputs_pinned) {
    return outputs_pinned ? cinfer_session_run_into(s, inputs, ni, outputs, no) : cinfer_session_run(s, inputs, ni, outputs, no);
}

typedef struct span_edge {
    double at;
    int step; /* +1 a span starts, -1 one ends */
} span_edge;

static int compare_edge(const void *a, const void *b) {
    const span_edge *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at ? 1 : x->step - y->step; /* an end before a start at the same time */
}

/* Microseconds during which two or more of the spans run at once: a sweep over their starts and ends. */
static double two_or_more_us(const cinfer_span *spans, size_t count) {
    span_edge *edges = malloc(2 * count * sizeof *edges);
    if (!edges) return 0;
    for (size_t i = 0; i < count; i++) {
        edges[2 * i] = (span_edge){spans[i].start_us, 1};
        edges[2 * i + 1] = (span_edge){spans[i].end_us, -1};
    }
    qsort(edges, 2 * count, sizeof *edges, compare_edge);
    double together = 0;
    int running = 0;
    for (size_t i = 0; i < 2 * count; i++) {
        if (running >= 2) together += edges[i].at - edges[i - 1].at;
        running += edges[i].step;
    }
    free(edges);
    return together;
}

/* bench --timeline: a second session with timeline=1 runs the same io three times (plain, captured, replayed) and
 * the last run's spans are printed, times from its first span, with the share of the run when two or more run at
 * once (the copy engines and the SMs busy together). */
static int print_timeline(const cli_options *o, cinfer_model *model, const cinfer_tensor *inputs, size_t ni,
                          cinfer_tensor *outputs, size_t no, bool outputs_pinned) {
    static const char *const kinds[] = {"upload", "compute", "download", "device copy"};
    static const char *const streams[] = {"session", "upload", "download"};
    cinfer_session *timed;
    if (create_session(o, model, true, &timed) != CINFER_OK) return fail("timeline session");
    cinfer_span *spans = calloc(CINFER_TIMELINE_MAX_SPANS, sizeof *spans);
    size_t count = 0;
    int rc = spans ? 0 : 1;
    for (int run = 0; run < 3 && !rc; run++) {
        if (bench_run(timed, inputs, ni, outputs, no, outputs_pinned) != CINFER_OK) rc = fail("timeline run");
        for (size_t k = 0; k < no && !outputs_pinned; k++) cinfer_tensor_free_data(&outputs[k]);
    }
    if (!rc && cinfer_session_timeline(timed, spans, CINFER_TIMELINE_MAX_SPANS, &count) != CINFER_OK) rc = fail("timeline");
    if (!rc && count) {
        if (count > CINFER_TIMELINE_MAX_SPANS) count = CINFER_TIMELINE_MAX_SPANS;
        double first = spans[0].start_us, last = spans[0].end_us, summed = 0;
        for (size_t i = 0; i < count; i++) {
            first = fmin(first, spans[i].start_us);
            last = fmax(last, spans[i].end_us);
            summed += spans[i].end_us - spans[i].start_us;
        }
        printf("timeline of one run (us from its first span; CUDA events, session option timeline):\n");
        printf("%-12s %-9s %10s %10s %10s %10s\n", "", "stream", "MiB", "start", "end", "us");
        for (size_t i = 0; i < count; i++) {
            const cinfer_span *s = &spans[i];
            printf("%-12s %-9s %10.2f %10.1f %10.1f %10.1f\n", s->kind >= 0 && s->kind < 4 ? kinds[s->kind] : "?",
                   s->stream >= 0 && s->stream < 3 ? streams[s->stream] : "?", (double)s->bytes / 1048576.0,
                   s->start_us - first, s->end_us - first, s->end_us - s->start_us);
        }
        double together = two_or_more_us(spans, count);
        printf("end to end %.1f us, spans summed %.1f us, two or more at once %.1f us (%.0f%%)\n", last - first, summed,
               together, last > first ? 100.0 * together / (last - first) : 0.0);
    }
    free(spans);
    cinfer_session_free(timed);
    return rc;
}

static int cmd_bench(const cli_options *o) {
    if (o->timeline && cuda_ordinal(o->device) < 0) {
        fprintf(stderr, "cinfer: --timeline times a GPU's streams: it needs --device cuda[:N], not '%s'\n", o->device);
        return 2;
    }
    cinfer_model *model;
    cinfer_session *session;
    int rc = open_model(o, &model, &session, NULL);
    if (rc) return rc;
    size_t ni = cinfer_model_num_inputs(model), no = cinfer_model_num_outputs(model);
    cinfer_tensor inputs[MAX_CLI_INPUTS];
    void *owned[MAX_CLI_INPUTS] = {0};
    cinfer_tensor given[MAX_CLI_INPUTS];
    void *pinned[MAX_CLI_INPUTS] = {0}, **pinned_out = NULL;
    /* on a GPU the inputs sit in page-locked memory, as a server's batch buffers do: the timing then shows the
     * engine's host round trip (one DMA per input), not a staging memcpy of pageable memory */
    int gpu = cuda_ordinal(o->device);
    double *times = calloc((size_t)o->iters, sizeof(double));
    cinfer_tensor *outputs = calloc(no ? no : 1, sizeof *outputs);
    if (!times || !outputs || ni > MAX_CLI_INPUTS) {
        rc = 1;
        goto done;
    }
    rc = read_inputs(o, given, owned);
    if (!rc) rc = check_shape_options(o, model, given);
    if (rc) goto done;
    for (size_t i = 0; i < ni; i++) {
        cinfer_value_info info;
        cinfer_model_input_info(model, i, &info);
        memset(&inputs[i], 0, sizeof inputs[i]);
        int from_file = -1;
        for (int k = 0; k < o->num_inputs; k++)
            if (strcmp(given[k].name, info.name) == 0) from_file = k;
        if (from_file >= 0) {
            inputs[i] = given[from_file]; /* data stays owned by owned[] */
            continue;
        }
        concrete_shape(o, &info, &inputs[i]);
        if (fill_random(&inputs[i], o->int_high) != 0) {
            rc = 1;
            goto done;
        }
    }
    size_t num_pinned = 0;
    for (size_t i = 0; gpu >= 0 && i < ni; i++) {
        if (!cinfer_dtype_size(inputs[i].dtype)) continue; /* strings: no flat bytes to pin */
        size_t bytes = numel_of(&inputs[i]) * cinfer_dtype_size(inputs[i].dtype);
        if (cinfer_cuda_host_alloc(gpu, bytes ? bytes : 1, &pinned[i]) != CINFER_OK) continue; /* pageable then */
        memcpy(pinned[i], inputs[i].data, bytes);
        num_pinned++;
    }
    cinfer_tensor run_inputs[MAX_CLI_INPUTS];
    for (size_t i = 0; i < ni; i++) {
        run_inputs[i] = inputs[i];
        if (pinned[i]) run_inputs[i].data = pinned[i];
    }
    /* on a GPU the outputs are page-locked too, allocated once as a server's are and filled in place
     * (cinfer_session_run_into): without it every run allocated its outputs in pageable memory and copied them
     * through the staging buffer, which at BERT-base b128 (50 MiB of output) took five times the inference */
    pinned_out = calloc(no ? no : 1, sizeof *pinned_out);
    if (!pinned_out) {
        rc = 1;
        goto done;
    }
    bool outputs_pinned = gpu >= 0 && cinfer_session_output_info(session, run_inputs, ni, outputs, no) == CINFER_OK;
    for (size_t k = 0; k < no && outputs_pinned; k++) {
        size_t bytes = numel_of(&outputs[k]) * cinfer_dtype_size(outputs[k].dtype);
        outputs_pinned = cinfer_dtype_size(outputs[k].dtype) > 0 &&
                         cinfer_cuda_host_alloc(gpu, bytes ? bytes : 1, &pinned_out[k]) == CINFER_OK;
        outputs[k].data = pinned_out[k];
    }
    if (!outputs_pinned) /* strings, or no page-locked memory: the session allocates them per run */
        for (size_t k = 0; k < no; k++) {
            cinfer_cuda_host_free(gpu, pinned_out[k]);
            pinned_out[k] = outputs[k].data = NULL;
        }
    for (long it = 0; it < o->warmup + o->iters; it++) {
        double t0 = now_seconds();
        if (bench_run(session, run_inputs, ni, outputs, no, outputs_pinned) != CINFER_OK) {
            rc = fail("run");
            goto done;
        }
        double t1 = now_seconds();
        for (size_t k = 0; k < no && !outputs_pinned; k++) cinfer_tensor_free_data(&outputs[k]);
        if (it >= o->warmup) times[it - o->warmup] = (t1 - t0) * 1e3;
    }
    double total = 0;
    for (long i = 0; i < o->iters; i++) total += times[i];
    qsort(times, (size_t)o->iters, sizeof(double), compare_double);
#define PCT(p) times[(size_t)fmin((double)(o->iters - 1), floor((p) / 100.0 * (double)o->iters))]
    const char *io = gpu < 0 ? ""
                     : num_pinned < ni ? "  inputs: pageable"
                     : outputs_pinned ? "  io: page-locked"
                                      : "  inputs: page-locked, outputs: allocated per run";
    /* items/s only when the runs carry a known batch; a model of fixed shapes is timed in runs/s */
    const long batch = measured_batch(model, run_inputs);
    printf("model: %s  device: %s  precision: %s%s  %s  iters: %ld  threads: %s%s\n", o->model_path, o->device,
           o->precision ? o->precision : "fp32", o->deterministic ? " (deterministic)" : "", batch_text(batch, true), o->iters,
           o->threads ? o->threads : "all", io);
    printf("%-10s %10s %10s %10s %10s %10s %14s\n", "", "mean ms", "p50 ms", "p90 ms", "p99 ms", "min ms",
           batch ? "items/s" : "runs/s");
    printf("%-10s %10.3f %10.3f %10.3f %10.3f %10.3f %14.1f\n", "latency", total / (double)o->iters, PCT(50), PCT(90),
           PCT(99), times[0], (double)(batch ? batch : 1) * (double)o->iters / (total / 1e3));
    cinfer_run_stats rs;
    if (cinfer_session_last_run_stats(session, &rs) == CINFER_OK && (rs.host_to_device_copies || rs.device_to_host_copies))
        printf("copies per run: %llu host->device (%llu bytes), %llu device->host (%llu bytes)\n",
               (unsigned long long)rs.host_to_device_copies, (unsigned long long)rs.host_to_device_bytes,
               (unsigned long long)rs.device_to_host_copies, (unsigned long long)rs.device_to_host_bytes);
    if (rs.graph_captures || rs.graph_fallbacks)
        printf("CUDA graphs: last run %s; plans captured %llu, not capturable %llu\n",
               rs.graph_replayed ? "replayed a graph" : "ran plain", (unsigned long long)rs.graph_captures,
               (unsigned long long)rs.graph_fallbacks);
    if (o->profile) print_profile(model, session, o->warmup + o->iters);
    if (o->timeline) rc = print_timeline(o, model, run_inputs, ni, outputs, no, outputs_pinned);
done:
    for (size_t i = 0; i < ni && i < MAX_CLI_INPUTS; i++) {
        bool from_file = false;
        for (int k = 0; k < o->num_inputs; k++) from_file = from_file || inputs[i].data == owned[k];
        if (!from_file) free(inputs[i].data);
    }
    free_npy_inputs(owned, o->num_inputs);
    for (size_t i = 0; i < ni && i < MAX_CLI_INPUTS; i++)
        if (pinned[i]) cinfer_cuda_host_free(gpu, pinned[i]);
    for (size_t k = 0; pinned_out && k < no; k++) cinfer_cuda_host_free(gpu, pinned_out[k]);
    free(pinned_out);
    free(times);
    free(outputs);
    cinfer_session_free(session);
    cinfer_model_free(model);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        printf("\n");
        print_session_options(stdout);
        return 0;
    }
    if (strcmp(cmd, "options") == 0) return cmd_options();
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("cinfer %s\n", cinfer_version());
        return 0;
    }
    if (strcmp(cmd, "ops") == 0) return cmd_ops();
    if (strcmp(cmd, "gpus") == 0) return cmd_gpus();
    cli_options o;
    int rc = parse_options(argc - 1, argv + 1, &o);
    if (rc) return rc;
    if (strcmp(cmd, "run") == 0) return cmd_run(&o);
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(&o);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(&o);
    fprintf(stderr, "cinfer: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
