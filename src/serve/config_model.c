/* ModelConfig from config.pbtxt: maps the generic text-format tree (config_text.c) onto model_config, one
 * function per message type, rejecting unknown and duplicated fields with their position. Also the
 * auto-completion from the ONNX model, the consistency check against it, and the JSON printer. */
#include "config_model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_text.h"

static const struct {
    const char *name;
    cinfer_dtype dtype;
} TYPE_NAMES[] = {
    {"TYPE_BOOL", CINFER_DTYPE_BOOL},     {"TYPE_UINT8", CINFER_DTYPE_UINT8},   {"TYPE_UINT16", CINFER_DTYPE_UINT16},
    {"TYPE_UINT32", CINFER_DTYPE_UINT32}, {"TYPE_UINT64", CINFER_DTYPE_UINT64}, {"TYPE_INT8", CINFER_DTYPE_INT8},
    {"TYPE_INT16", CINFER_DTYPE_INT16},   {"TYPE_INT32", CINFER_DTYPE_INT32},   {"TYPE_INT64", CINFER_DTYPE_INT64},
    {"TYPE_FP16", CINFER_DTYPE_FLOAT16},  {"TYPE_FP32", CINFER_DTYPE_FLOAT},    {"TYPE_FP64", CINFER_DTYPE_DOUBLE},
    {"TYPE_STRING", CINFER_DTYPE_STRING}, {"TYPE_BF16", CINFER_DTYPE_BFLOAT16},
};

cinfer_dtype config_dtype_from_type_name(const char *name) {
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (strcmp(TYPE_NAMES[i].name, name) == 0) return TYPE_NAMES[i].dtype;
    return CINFER_DTYPE_UNDEFINED;
}

const char *config_type_name(cinfer_dtype t) {
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (TYPE_NAMES[i].dtype == t) return TYPE_NAMES[i].name;
    return "TYPE_INVALID";
}

/* ---- reading the tree ---- */

typedef struct cctx {
    const char *file;
    serve_error *e;
    char ignored[1024]; /* Triton fields accepted but not used: "path (line N), ..." */
} cctx;

static int cfail(cctx *c, const config_field *f, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int cfail(cctx *c, const config_field *f, const char *path, const char *fmt, ...) {
    char what[sizeof c->e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (f)
        return serve_fail(c->e, SERVE_BAD_REQUEST, "%s: line %d, column %d: field '%s': %s", c->file, f->line, f->col,
                          path, what);
    return serve_fail(c->e, SERVE_BAD_REQUEST, "%s: field '%s': %s", c->file, path, what);
}

static const char *kind_name(config_kind k) {
    switch (k) {
    case CONFIG_STRING: return "a string";
    case CONFIG_NUMBER: return "a number";
    case CONFIG_IDENT: return "an identifier";
    default: return "a message";
    }
}

/* Singular fields may appear once; `repeated` lists the names that may repeat. */
static int check_duplicates(cctx *c, const config_msg *m, const char *path, const char *const *repeated) {
    for (size_t i = 0; i < m->num_fields; i++) {
        int rep = 0;
        for (const char *const *r = repeated; r && *r; r++) rep |= strcmp(*r, m->fields[i].name) == 0;
        if (rep) continue;
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->fields[j].name, m->fields[i].name) == 0)
                return cfail(c, &m->fields[i], path, "'%s' is not a repeated field but is given more than once (first at line %d)",
                             m->fields[i].name, m->fields[j].line);
    }
    return 0;
}

/* Triton ModelConfig fields that tune parts cinfer does not have (TensorRT, the ONNX Runtime session, Triton's rate
 * limiter, repository agents, ...): accepted so existing configs load, each noted for one log line at load. Fields
 * whose meaning changes results (batch_input, sequence batching, ensembles, ...) are refused instead. */
static const char *const IGNORED_FIELDS[] = {
    "ModelConfig.runtime", "ModelConfig.cc_model_filenames", "ModelConfig.metric_tags", "ModelConfig.model_operations",
    "ModelConfig.model_repository_agents", "instance_group.rate_limiter", "instance_group.secondary_devices",
    "instance_group.profile", "instance_group.passive", "instance_group.host_policy", "optimization.graph",
    "optimization.priority", "optimization.execution_accelerators", "optimization.input_pinned_memory",
    "optimization.output_pinned_memory", "optimization.gather_kernel_buffer_threshold", "optimization.eager_batching",
    "optimization.cuda.graph_spec", NULL,
};

static void note_ignored(cctx *c, const char *what, int line) {
    size_t n = strlen(c->ignored);
    if (n + 1 < sizeof c->ignored)
        snprintf(c->ignored + n, sizeof c->ignored - n, "%s%s (line %d)", n ? ", " : "", what, line);
}

/* True (and noted) when `name` inside message `msg_path` is a Triton field cinfer accepts and ignores. */
static int ignored_field(cctx *c, const config_field *f, const char *msg_path) {
    char path[160];
    snprintf(path, sizeof path, "%s.%s", msg_path, f->name);
    for (const char *const *i = IGNORED_FIELDS; *i; i++)
        if (!strcmp(*i, path)) {
            note_ignored(c, strncmp(path, "ModelConfig.", 12) ? path : path + 12, f->line);
            return 1;
        }
    return 0;
}

static int unknown(cctx *c, const config_field *f, const char *msg_path, const char *known) {
    return cfail(c, f, msg_path, "unknown field '%s' (cinfer supports: %s)", f->name, known);
}

static int get_string(cctx *c, const config_field *f, const char *path, char **out) {
    if (f->kind != CONFIG_STRING) return cfail(c, f, path, "expected a string, got %s", kind_name(f->kind));
    char *s = strdup(f->text);
    if (!s) return cfail(c, f, path, "out of memory");
    free(*out);
    *out = s;
    return 0;
}

/* Upper bounds of config values that size allocations or feed time arithmetic (microseconds * 1000 must not
 * overflow): clear load errors instead of wrapped deadlines or absurd buffers. */
#define CONFIG_MAX_BATCH (1 << 20)
#define CONFIG_MAX_MICROSECONDS ((int64_t)86400 * 1000000) /* one day */

static int get_int(cctx *c, const config_field *f, const char *path, int64_t lo, int64_t hi, int64_t *out) {
    if (f->kind != CONFIG_NUMBER) return cfail(c, f, path, "expected an integer, got %s", kind_name(f->kind));
    errno = 0;
    char *end;
    long long v = strtoll(f->text, &end, 0);
    if (errno || *end) return cfail(c, f, path, "'%s' is not an integer", f->text);
    if (v < lo || v > hi) return cfail(c, f, path, "%lld is out of range [%" PRId64 ", %" PRId64 "]", v, lo, hi);
    *out = v;
    return 0;
}

static int get_bool(cctx *c, const config_field *f, const char *path, int *out) {
    if (f->kind == CONFIG_IDENT && (!strcmp(f->text, "true") || !strcmp(f->text, "True") || !strcmp(f->text, "t"))) {
        *out = 1;
        return 0;
    }
    if (f->kind == CONFIG_IDENT && (!strcmp(f->text, "false") || !strcmp(f->text, "False") || !strcmp(f->text, "f"))) {
        *out = 0;
        return 0;
    }
    if (f->kind == CONFIG_NUMBER && (!strcmp(f->text, "0") || !strcmp(f->text, "1"))) {
        *out = f->text[0] == '1';
        return 0;
    }
    return cfail(c, f, path, "expected true or false, got %s '%s'", kind_name(f->kind), f->text ? f->text : "{...}");
}

/* An enum value by name (or by number, as text format allows); `names` is NULL-terminated in value order. */
static int get_enum(cctx *c, const config_field *f, const char *path, const char *const *names, int *out) {
    int n = 0;
    while (names[n]) n++;
    if (f->kind == CONFIG_IDENT) {
        for (int i = 0; i < n; i++)
            if (strcmp(names[i], f->text) == 0) {
                *out = i;
                return 0;
            }
    } else if (f->kind == CONFIG_NUMBER) {
        int64_t v;
        if (get_int(c, f, path, 0, n - 1, &v) != 0) return -1;
        *out = (int)v;
        return 0;
    }
    char known[512] = "";
    for (int i = 0; i < n; i++) {
        strncat(known, names[i], sizeof known - strlen(known) - 1);
        if (i + 1 < n) strncat(known, ", ", sizeof known - strlen(known) - 1);
    }
    return cfail(c, f, path, "'%s' is not one of %s", f->text ? f->text : "{...}", known);
}

static int expect_msg(cctx *c, const config_field *f, const char *path) {
    if (f->kind != CONFIG_MESSAGE) return cfail(c, f, path, "expected a message { ... }, got %s", kind_name(f->kind));
    return 0;
}

static int push_dim(cctx *c, const config_field *f, const char *path, int *ndims, int64_t *dims) {
    int64_t v;
    if (get_int(c, f, path, -1, INT64_MAX, &v) != 0) return -1;
    if (*ndims >= CINFER_MAX_DIMS) return cfail(c, f, path, "more than %d dims", CINFER_MAX_DIMS);
    if (*ndims < 0) *ndims = 0;
    dims[(*ndims)++] = v;
    return 0;
}

static int get_dtype(cctx *c, const config_field *f, const char *path, cinfer_dtype *out) {
    if (f->kind != CONFIG_IDENT) return cfail(c, f, path, "expected a TYPE_* name, got %s", kind_name(f->kind));
    cinfer_dtype t = config_dtype_from_type_name(f->text);
    if (t == CINFER_DTYPE_UNDEFINED)
        return cfail(c, f, path, "'%s' is not a data type (TYPE_BOOL, TYPE_UINT8..TYPE_UINT64, TYPE_INT8..TYPE_INT64, "
                                 "TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_BF16, TYPE_STRING)", f->text);
    *out = t;
    return 0;
}

static const char *const FORMATS[] = {"FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW", NULL};

static int parse_tensor(cctx *c, const config_field *tf, int is_input, config_tensor *t) {
    const char *path = is_input ? "input" : "output";
    char p[128];
    if (expect_msg(c, tf, path) != 0) return -1;
    const config_msg *m = &tf->msg;
    static const char *const rep[] = {"dims", NULL};
    if (check_duplicates(c, m, path, rep) != 0) return -1;
    t->ndims = -1;
    int has_type = 0;
    for (size_t i = 0; i < m->num_fields; i++) {
        const config_field *f = &m->fields[i];
        snprintf(p, sizeof p, "%s.%s", path, f->name);
        int rc = 0;
        if (!strcmp(f->name, "name")) rc = get_string(c, f, p, &t->name);
        else if (!strcmp(f->name, "data_type")) rc = get_dtype(c, f, p, &t->dtype), has_type = 1;
        else if (!strcmp(f->name, "dims")) rc = push_dim(c, f, p, &t->ndims, t->dims);
        else if (!strcmp(f->name, "is_shape_tensor")) rc = get_bool(c, f, p, &t->is_shape_tensor);
        else if (is_input && !strcmp(f->name, "optional")) rc = get_bool(c, f, p, &t->optional);
        else if (is_input && !strcmp(f->name, "allow_ragged_batch")) rc = get_bool(c, f, p, &t->allow_ragged_batch);
        else if (is_input && !strcmp(f->name, "format")) {
            int v;
            rc = get_enum(c, f, p, FORMATS, &v);
            if (!rc) {
                free(t->format);
                t->format = strdup(FORMATS[v]);
            }
        } else if (!is_input && !strcmp(f->name, "label_filename")) rc = get_string(c, f, p, &t->label_filename);
        else if (!strcmp(f->name, "reshape"))
            rc = cfail(c, f, p, "reshape is not supported by cinfer (give the model's own dims)");
        else
            rc = unknown(c, f, path, is_input ? "name, data_type, format, dims, is_shape_tensor, optional, allow_ragged_batch"
                                              : "name, data_type, dims, label_filename, is_shape_tensor");
        if (rc) return -1;
    }
    if (!t->name || !t->name[0]) return cfail(c, tf, path, "an %s needs a name", path);
    if (!has_type) return cfail(c, tf, path, "%s '%s' needs a data_type", path, t->name);
    if (t->ndims < 0) return cfail(c, tf, path, "%s '%s' needs dims (use [-1] for a variable dim)", path, t->name);
    if (t->is_shape_tensor) return cfail(c, tf, path, "%s '%s': shape tensors are not supported by cinfer", path, t->name);
    return 0;
}

static const char *const KINDS[] = {"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL", NULL};

static int parse_group(cctx *c, const config_field *gf, config_instance_group *g) {
    const char *path = "instance_group";
    char p[128];
    if (expect_msg(c, gf, path) != 0) return -1;
    static const char *const rep[] = {"gpus", "profile", "secondary_devices", NULL};
    if (check_duplicates(c, &gf->msg, path, rep) != 0) return -1;
    g->count = 1;
    for (size_t i = 0; i < gf->msg.num_fields; i++) {
        const config_field *f = &gf->msg.fields[i];
        snprintf(p, sizeof p, "%s.%s", path, f->name);
        int64_t v;
        int rc = 0;
        if (!strcmp(f->name, "name")) rc = get_string(c, f, p, &g->name);
        else if (!strcmp(f->name, "kind")) {
            rc = get_enum(c, f, p, KINDS, &g->kind);
            if (!rc && g->kind == 3) rc = cfail(c, f, p, "KIND_MODEL is not supported by cinfer");
        } else if (!strcmp(f->name, "count")) {
            rc = get_int(c, f, p, 1, 1024, &v);
            g->count = (int)v;
        } else if (!strcmp(f->name, "gpus")) {
            rc = get_int(c, f, p, 0, 1023, &v);
            if (!rc) {
                int *ng = realloc(g->gpus, (g->num_gpus + 1) * sizeof *ng);
                if (!ng) return cfail(c, f, p, "out of memory");
                g->gpus = ng;
                g->gpus[g->num_gpus++] = (int)v;
            }
        } else if (!ignored_field(c, f, "instance_group"))
            rc = unknown(c, f, path, "name, kind, count, gpus");
        if (rc) return -1;
    }
    if (g->num_gpus && g->kind == CONFIG_KIND_CPU) return cfail(c, gf, path, "gpus given for a KIND_CPU group");
    return 0;
}

static int parse_queue_policy(cctx *c, const config_field *qf, const char *path, config_queue_policy *q) {
    char p[160];
    if (expect_msg(c, qf, path) != 0 || check_duplicates(c, &qf->msg, path, NULL) != 0) return -1;
    static const char *const actions[] = {"REJECT", "DELAY", NULL};
    for (size_t i = 0; i < qf->msg.num_fields; i++) {
        const config_field *f = &qf->msg.fields[i];
        snprintf(p, sizeof p, "%s.%s", path, f->name);
        int64_t v;
        int rc = 0;
        if (!strcmp(f->name, "timeout_action")) rc = get_enum(c, f, p, actions, &q->timeout_action_delay);
        else if (!strcmp(f->name, "default_timeout_microseconds")) {
            rc = get_int(c, f, p, 0, CONFIG_MAX_MICROSECONDS, &v);
            q->default_timeout_us = (uint64_t)v;
        } else if (!strcmp(f->name, "allow_timeout_override")) rc = get_bool(c, f, p, &q->allow_timeout_override);
        else if (!strcmp(f->name, "max_queue_size")) {
            rc = get_int(c, f, p, 0, UINT32_MAX, &v);
            q->max_queue_size = (uint32_t)v;
        } else
            rc = unknown(c, f, path, "timeout_action, default_timeout_microseconds, allow_timeout_override, max_queue_size");
        if (rc) return -1;
    }
    return 0;
}

static int parse_dynamic_batching(cctx *c, const config_field *df, config_dynamic_batching *d) {
    const char *path = "dynamic_batching";
    char p[128];
    if (expect_msg(c, df, path) != 0) return -1;
    static const char *const rep[] = {"preferred_batch_size", NULL};
    if (check_duplicates(c, &df->msg, path, rep) != 0) return -1;
    d->present = 1;
    for (size_t i = 0; i < df->msg.num_fields; i++) {
        const config_field *f = &df->msg.fields[i];
        snprintf(p, sizeof p, "%s.%s", path, f->name);
        int64_t v;
        int rc = 0;
        if (!strcmp(f->name, "preferred_batch_size")) {
            rc = get_int(c, f, p, 1, INT32_MAX, &v);
            if (!rc) {
                int64_t *np = realloc(d->preferred_batch_size, (d->num_preferred + 1) * sizeof *np);
                if (!np) return cfail(c, f, p, "out of memory");
                d->preferred_batch_size = np;
                np[d->num_preferred++] = v;
            }
        } else if (!strcmp(f->name, "max_queue_delay_microseconds")) {
            rc = get_int(c, f, p, 0, CONFIG_MAX_MICROSECONDS, &v);
            d->max_queue_delay_us = (uint64_t)v;
        } else if (!strcmp(f->name, "preserve_ordering")) rc = get_bool(c, f, p, &d->preserve_ordering);
        else if (!strcmp(f->name, "priority_levels")) {
            rc = get_int(c, f, p, 0, 1000, &v);
            d->priority_levels = (uint32_t)v;
        } else if (!strcmp(f->name, "default_priority_level")) {
            rc = get_int(c, f, p, 0, 1000, &v);
            d->default_priority_level = (uint32_t)v;
        } else if (!strcmp(f->name, "default_queue_policy")) rc = parse_queue_policy(c, f, p, &d->default_queue_policy);
        else if (!strcmp(f->name, "priority_queue_policy"))
            rc = cfail(c, f, p, "per-priority queue policies are not supported yet (use default_queue_policy)");
        else
            rc = unknown(c, f, path, "preferred_batch_size, max_queue_delay_microseconds, preserve_ordering, "
                                     "priority_levels, default_priority_level, default_queue_policy");
        if (rc) return -1;
    }
    if (d->priority_levels && (d->default_priority_level < 1 || d->default_priority_level > d->priority_levels))
        return cfail(c, df, path, "default_priority_level %u must be in [1, priority_levels = %u]", d->default_priority_level,
                     d->priority_levels);
    if (!d->priority_levels && d->default_priority_level)
        return cfail(c, df, path, "default_priority_level is set but priority_levels is 0");
    return 0;
}

static int parse_version_policy(cctx *c, const config_field *vf, config_version_policy *v) {
    const char *path = "version_policy";
    char p[128];
    if (expect_msg(c, vf, path) != 0) return -1;
    if (vf->msg.num_fields != 1)
        return cfail(c, vf, path, "give exactly one of latest { num_versions: N }, all { }, specific { versions: [...] }");
    const config_field *f = &vf->msg.fields[0];
    snprintf(p, sizeof p, "%s.%s", path, f->name);
    if (expect_msg(c, f, p) != 0) return -1;
    if (!strcmp(f->name, "all")) {
        if (f->msg.num_fields) return unknown(c, &f->msg.fields[0], p, "(none)");
        v->kind = CONFIG_VERSIONS_ALL;
        return 0;
    }
    if (!strcmp(f->name, "latest")) {
        v->kind = CONFIG_VERSIONS_LATEST;
        v->num_versions = 1;
        if (check_duplicates(c, &f->msg, p, NULL) != 0) return -1;
        for (size_t i = 0; i < f->msg.num_fields; i++) {
            const config_field *g = &f->msg.fields[i];
            int64_t n;
            if (strcmp(g->name, "num_versions") != 0) return unknown(c, g, p, "num_versions");
            if (get_int(c, g, "version_policy.latest.num_versions", 1, UINT32_MAX, &n) != 0) return -1;
            v->num_versions = (uint32_t)n;
        }
        return 0;
    }
    if (!strcmp(f->name, "specific")) {
        v->kind = CONFIG_VERSIONS_SPECIFIC;
        for (size_t i = 0; i < f->msg.num_fields; i++) {
            const config_field *g = &f->msg.fields[i];
            int64_t n;
            if (strcmp(g->name, "versions") != 0) return unknown(c, g, p, "versions");
            if (get_int(c, g, "version_policy.specific.versions", 1, INT64_MAX, &n) != 0) return -1;
            int64_t *nv = realloc(v->versions, (v->num_specific + 1) * sizeof *nv);
            if (!nv) return cfail(c, g, p, "out of memory");
            v->versions = nv;
            nv[v->num_specific++] = n;
        }
        if (!v->num_specific) return cfail(c, f, p, "specific needs at least one version");
        return 0;
    }
    return unknown(c, f, path, "latest, all, specific");
}

static int parse_warmup(cctx *c, const config_field *wf, config_warmup *w) {
    const char *path = "model_warmup";
    char p[160];
    if (expect_msg(c, wf, path) != 0) return -1;
    static const char *const rep[] = {"inputs", NULL};
    if (check_duplicates(c, &wf->msg, path, rep) != 0) return -1;
    w->count = 1;
    w->batch_size = 1;
    for (size_t i = 0; i < wf->msg.num_fields; i++) {
        const config_field *f = &wf->msg.fields[i];
        snprintf(p, sizeof p, "%s.%s", path, f->name);
        int64_t v;
        int rc = 0;
        if (!strcmp(f->name, "name")) rc = get_string(c, f, p, &w->name);
        else if (!strcmp(f->name, "batch_size")) {
            rc = get_int(c, f, p, 1, CONFIG_MAX_BATCH, &v);
            w->batch_size = (uint32_t)v;
        } else if (!strcmp(f->name, "count")) {
            rc = get_int(c, f, p, 1, 1000000, &v);
            w->count = (uint32_t)v;
        } else if (!strcmp(f->name, "inputs")) {
            /* map<string, WarmupInput>: inputs { key: "x" value { data_type: TYPE_FP32 dims: [..] zero_data: true } } */
            if (expect_msg(c, f, p) != 0) return -1;
            config_warmup_input in = {.ndims = 0};
            int has_data = 0;
            const config_field *val = NULL;
            for (size_t k = 0; k < f->msg.num_fields && !rc; k++) {
                const config_field *g = &f->msg.fields[k];
                if (!strcmp(g->name, "key")) rc = get_string(c, g, "model_warmup.inputs.key", &in.key);
                else if (!strcmp(g->name, "value")) val = g;
                else rc = unknown(c, g, p, "key, value");
            }
            if (!rc && (!in.key || !val)) rc = cfail(c, f, p, "a warm-up input needs key and value");
            if (!rc) rc = expect_msg(c, val, "model_warmup.inputs.value");
            for (size_t k = 0; !rc && k < val->msg.num_fields; k++) {
                const config_field *g = &val->msg.fields[k];
                int b = 0;
                if (!strcmp(g->name, "data_type")) rc = get_dtype(c, g, "model_warmup.inputs.value.data_type", &in.dtype);
                else if (!strcmp(g->name, "dims")) rc = push_dim(c, g, "model_warmup.inputs.value.dims", &in.ndims, in.dims);
                else if (!strcmp(g->name, "zero_data")) rc = get_bool(c, g, "model_warmup.inputs.value.zero_data", &b), has_data = 1;
                else if (!strcmp(g->name, "random_data")) {
                    rc = get_bool(c, g, "model_warmup.inputs.value.random_data", &b);
                    in.random_data = b;
                    has_data = 1;
                } else if (!strcmp(g->name, "input_data_file"))
                    rc = cfail(c, g, "model_warmup.inputs.value.input_data_file", "input_data_file is not supported yet (use zero_data or random_data)");
                else
                    rc = unknown(c, g, "model_warmup.inputs.value", "data_type, dims, zero_data, random_data");
            }
            if (!rc && !has_data) rc = cfail(c, f, p, "warm-up input '%s' needs zero_data or random_data", in.key);
            if (!rc && in.dtype == CINFER_DTYPE_UNDEFINED) rc = cfail(c, f, p, "warm-up input '%s' needs data_type", in.key);
            if (!rc) {
                config_warmup_input *ni = realloc(w->inputs, (w->num_inputs + 1) * sizeof *ni);
                if (!ni) rc = cfail(c, f, p, "out of memory");
                else {
                    w->inputs = ni;
                    ni[w->num_inputs++] = in;
                    in.key = NULL;
                }
            }
            free(in.key);
        } else
            rc = unknown(c, f, path, "name, batch_size, inputs, count");
        if (rc) return -1;
    }
    if (!w->name) return cfail(c, wf, path, "a warm-up needs a name");
    return 0;
}

/* optimization { execution_accelerators { gpu_execution_accelerator [{ name: "tensorrt" parameters { key: "precision_mode"
 * value: "FP16" } }] } }: TensorRT's FP16 precision mode maps onto the engine's fp16 (weights converted once, tensors
 * keep their dtypes on the wire); everything else here tunes an accelerator cinfer does not have and is ignored. */
static int parse_accelerators(cctx *c, const config_field *af, model_config *cfg) {
    const char *path = "optimization.execution_accelerators";
    if (expect_msg(c, af, path) != 0) return -1;
    int mapped = 0;
    for (size_t i = 0; i < af->msg.num_fields; i++) {
        const config_field *list = &af->msg.fields[i];
        if (list->kind != CONFIG_MESSAGE) continue; /* lists and scalars alike carry nothing cinfer maps */
        const char *name = NULL, *precision = NULL;
        for (size_t k = 0; k < list->msg.num_fields; k++) {
            const config_field *g = &list->msg.fields[k];
            if (!strcmp(g->name, "name") && g->kind == CONFIG_STRING) name = g->text;
            if (strcmp(g->name, "parameters") || g->kind != CONFIG_MESSAGE) continue;
            const char *key = NULL, *value = NULL;
            for (size_t j = 0; j < g->msg.num_fields; j++) {
                const config_field *kv = &g->msg.fields[j];
                if (kv->kind != CONFIG_STRING) continue;
                if (!strcmp(kv->name, "key")) key = kv->text;
                if (!strcmp(kv->name, "value")) value = kv->text;
            }
            if (key && value && !strcmp(key, "precision_mode")) precision = value;
        }
        if (!strcmp(list->name, "gpu_execution_accelerator") && name && !strcmp(name, "tensorrt") && precision &&
            !strcasecmp(precision, "FP16")) {
            snprintf(cfg->accelerator_precision, sizeof cfg->accelerator_precision, "fp16");
            mapped = 1;
        }
    }
    if (mapped) return 0;
    note_ignored(c, path, af->line);
    return 0;
}

static int parse_optimization(cctx *c, const config_field *of, model_config *cfg) {
    const char *path = "optimization";
    if (expect_msg(c, of, path) != 0 || check_duplicates(c, &of->msg, path, NULL) != 0) return -1;
    for (size_t i = 0; i < of->msg.num_fields; i++) {
        const config_field *f = &of->msg.fields[i];
        if (!strcmp(f->name, "execution_accelerators")) {
            if (parse_accelerators(c, f, cfg) != 0) return -1;
            continue;
        }
        if (ignored_field(c, f, path)) continue;
        if (strcmp(f->name, "cuda") != 0) return unknown(c, f, path, "cuda");
        if (expect_msg(c, f, "optimization.cuda") != 0 || check_duplicates(c, &f->msg, "optimization.cuda", NULL) != 0) return -1;
        for (size_t k = 0; k < f->msg.num_fields; k++) {
            const config_field *g = &f->msg.fields[k];
            int rc;
            if (!strcmp(g->name, "graphs")) {
                rc = get_bool(c, g, "optimization.cuda.graphs", &cfg->cuda_graphs);
                cfg->cuda_graphs_given = 1;
            }
            else if (!strcmp(g->name, "busy_wait_events")) rc = get_bool(c, g, "optimization.cuda.busy_wait_events", &cfg->cuda_busy_wait_events);
            else if (!strcmp(g->name, "output_copy_stream")) rc = get_bool(c, g, "optimization.cuda.output_copy_stream", &cfg->cuda_output_copy_stream);
            else if (ignored_field(c, g, "optimization.cuda")) rc = 0;
            else rc = unknown(c, g, "optimization.cuda", "graphs, busy_wait_events, output_copy_stream");
            if (rc) return -1;
        }
    }
    return 0;
}

/* parameters { key: "k" value { string_value: "v" } } */
static int parse_param(cctx *c, const config_field *pf, model_config *cfg) {
    const char *path = "parameters";
    if (expect_msg(c, pf, path) != 0) return -1;
    char *key = NULL, *value = NULL;
    int rc = 0;
    for (size_t i = 0; i < pf->msg.num_fields && !rc; i++) {
        const config_field *f = &pf->msg.fields[i];
        if (!strcmp(f->name, "key")) rc = get_string(c, f, "parameters.key", &key);
        else if (!strcmp(f->name, "value")) {
            rc = expect_msg(c, f, "parameters.value");
            for (size_t k = 0; !rc && k < f->msg.num_fields; k++) {
                if (strcmp(f->msg.fields[k].name, "string_value") != 0) rc = unknown(c, &f->msg.fields[k], "parameters.value", "string_value");
                else rc = get_string(c, &f->msg.fields[k], "parameters.value.string_value", &value);
            }
        } else
            rc = unknown(c, f, path, "key, value");
    }
    if (!rc && !key) rc = cfail(c, pf, path, "a parameter needs a key");
    if (!rc && !strcmp(key, CONFIG_PARAM_INTRA_OP_THREADS)) {
        /* ONNX Runtime's per-session CPU thread count is the engine's "threads" */
        char *end;
        errno = 0;
        long n = value ? strtol(value, &end, 10) : -1;
        if (!value || errno || !*value || *end || n < 0 || n > 1024)
            rc = cfail(c, pf, path, "'%s' is '%s': expected a thread count from 0 (all cores) to 1024", key,
                       value ? value : "");
        else
            cfg->intra_op_threads = (int)n;
    } else if (!rc && strncmp(key, "cinfer_", 7) != 0) {
        char what[160];
        snprintf(what, sizeof what, "parameters '%s'", key);
        note_ignored(c, what, pf->line);
    }
    if (!rc) {
        config_param *np = realloc(cfg->params, (cfg->num_params + 1) * sizeof *np);
        if (!np) rc = cfail(c, pf, path, "out of memory");
        else {
            cfg->params = np;
            np[cfg->num_params].key = key;
            np[cfg->num_params].value = value ? value : strdup("");
            cfg->num_params++;
            key = value = NULL;
        }
    }
    free(key);
    free(value);
    return rc;
}

static int parse_enable_flag(cctx *c, const config_field *f, const char *path, const char *field, int *out) {
    if (expect_msg(c, f, path) != 0 || check_duplicates(c, &f->msg, path, NULL) != 0) return -1;
    for (size_t i = 0; i < f->msg.num_fields; i++) {
        if (strcmp(f->msg.fields[i].name, field) != 0) return unknown(c, &f->msg.fields[i], path, field);
        if (get_bool(c, &f->msg.fields[i], path, out) != 0) return -1;
    }
    return 0;
}

static void set_defaults(model_config *cfg) {
    cfg->version_policy.kind = CONFIG_VERSIONS_LATEST;
    cfg->version_policy.num_versions = 1;
}

int config_model_init_default(model_config *cfg, const char *name) {
    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    cfg->name = strdup(name);
    return cfg->name ? 0 : -1;
}

int config_model_parse(const char *text, size_t len, const char *file, model_config *cfg, serve_error *e) {
    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    cctx c = {.file = file, .e = e};
    config_msg root;
    serve_error text_error = {0};
    if (config_text_parse(text, len, &root, &text_error) != 0)
        return serve_fail(e, SERVE_BAD_REQUEST, "%s: %s", file, text_error.msg);
    static const char *const rep[] = {"input", "output", "instance_group", "model_warmup", "parameters", NULL};
    int rc = check_duplicates(&c, &root, "ModelConfig", rep);
    for (size_t i = 0; !rc && i < root.num_fields; i++) {
        const config_field *f = &root.fields[i];
        int64_t v;
        if (!strcmp(f->name, "name")) rc = get_string(&c, f, "name", &cfg->name);
        else if (!strcmp(f->name, "platform")) rc = get_string(&c, f, "platform", &cfg->platform);
        else if (!strcmp(f->name, "backend")) rc = get_string(&c, f, "backend", &cfg->backend);
        else if (!strcmp(f->name, "default_model_filename")) rc = get_string(&c, f, "default_model_filename", &cfg->default_model_filename);
        else if (!strcmp(f->name, "max_batch_size")) {
            rc = get_int(&c, f, "max_batch_size", 0, CONFIG_MAX_BATCH, &v);
            cfg->max_batch_size = (int)v;
            cfg->has_max_batch_size = 1;
        } else if (!strcmp(f->name, "input") || !strcmp(f->name, "output")) {
            int in = f->name[0] == 'i';
            config_tensor **arr = in ? &cfg->inputs : &cfg->outputs;
            size_t *n = in ? &cfg->num_inputs : &cfg->num_outputs;
            config_tensor *na = realloc(*arr, (*n + 1) * sizeof *na);
            if (!na) {
                rc = cfail(&c, f, f->name, "out of memory");
                break;
            }
            *arr = na;
            memset(&na[*n], 0, sizeof na[*n]);
            (*n)++;
            rc = parse_tensor(&c, f, in, &na[*n - 1]);
            for (size_t k = 0; !rc && k + 1 < *n; k++)
                if (!strcmp(na[k].name, na[*n - 1].name))
                    rc = cfail(&c, f, f->name, "%s '%s' is listed twice", f->name, na[k].name);
        } else if (!strcmp(f->name, "instance_group")) {
            config_instance_group *ng = realloc(cfg->groups, (cfg->num_groups + 1) * sizeof *ng);
            if (!ng) {
                rc = cfail(&c, f, f->name, "out of memory");
                break;
            }
            cfg->groups = ng;
            memset(&ng[cfg->num_groups], 0, sizeof ng[0]);
            rc = parse_group(&c, f, &ng[cfg->num_groups++]);
        } else if (!strcmp(f->name, "dynamic_batching")) rc = parse_dynamic_batching(&c, f, &cfg->dynamic_batching);
        else if (!strcmp(f->name, "sequence_batching")) cfg->has_sequence_batching = 1;
        else if (!strcmp(f->name, "ensemble_scheduling")) cfg->has_ensemble = 1;
        else if (!strcmp(f->name, "version_policy")) rc = parse_version_policy(&c, f, &cfg->version_policy);
        else if (!strcmp(f->name, "model_warmup")) {
            config_warmup *nw = realloc(cfg->warmups, (cfg->num_warmups + 1) * sizeof *nw);
            if (!nw) {
                rc = cfail(&c, f, f->name, "out of memory");
                break;
            }
            cfg->warmups = nw;
            memset(&nw[cfg->num_warmups], 0, sizeof nw[0]);
            rc = parse_warmup(&c, f, &nw[cfg->num_warmups++]);
        } else if (!strcmp(f->name, "optimization")) rc = parse_optimization(&c, f, cfg);
        else if (!strcmp(f->name, "parameters")) rc = parse_param(&c, f, cfg);
        else if (!strcmp(f->name, "model_transaction_policy"))
            rc = parse_enable_flag(&c, f, "model_transaction_policy", "decoupled", &cfg->decoupled);
        else if (!strcmp(f->name, "response_cache")) rc = parse_enable_flag(&c, f, "response_cache", "enable", &cfg->response_cache);
        else if (!ignored_field(&c, f, "ModelConfig"))
            rc = unknown(&c, f, "ModelConfig",
                         "name, platform, backend, default_model_filename, max_batch_size, input, output, instance_group, "
                         "dynamic_batching, version_policy, model_warmup, optimization, parameters, "
                         "model_transaction_policy, response_cache");
    }
    if (!rc && cfg->decoupled) rc = cfail(&c, NULL, "model_transaction_policy.decoupled", "decoupled models are not supported");
    if (!rc && cfg->response_cache) rc = cfail(&c, NULL, "response_cache.enable", "the response cache is not supported yet");
    if (!rc && cfg->has_sequence_batching)
        rc = cfail(&c, NULL, "sequence_batching", "sequence batching is not supported (remove sequence_batching)");
    if (!rc && cfg->has_ensemble) rc = cfail(&c, NULL, "ensemble_scheduling", "ensembles are not supported");
    if (!rc && cfg->platform && cfg->platform[0] && strcmp(cfg->platform, "onnxruntime_onnx") != 0)
        rc = cfail(&c, NULL, "platform", "'%s' is not supported (cinfer serves ONNX models: platform \"onnxruntime_onnx\")", cfg->platform);
    if (!rc && cfg->backend && cfg->backend[0] && strcmp(cfg->backend, "onnxruntime") != 0 && strcmp(cfg->backend, "cinfer") != 0)
        rc = cfail(&c, NULL, "backend", "'%s' is not supported (use \"onnxruntime\" or leave it out)", cfg->backend);
    if (!rc && cfg->default_model_filename &&
        (!cfg->default_model_filename[0] || strchr(cfg->default_model_filename, '/') || !strcmp(cfg->default_model_filename, ".") ||
         !strcmp(cfg->default_model_filename, "..")))
        rc = cfail(&c, NULL, "default_model_filename", "'%s' must be a file name inside the version folder (no '/', not '.' "
                   "or '..')", cfg->default_model_filename);
    if (!rc && cfg->dynamic_batching.present && !config_batches(cfg) && cfg->dynamic_batching.num_preferred)
        rc = cfail(&c, NULL, "dynamic_batching.preferred_batch_size", "needs max_batch_size >= 1");
    for (size_t i = 0; !rc && config_batches(cfg) && i < cfg->num_warmups; i++)
        if (cfg->warmups[i].batch_size > (uint32_t)cfg->max_batch_size)
            rc = cfail(&c, NULL, "model_warmup.batch_size", "%u (warm-up '%s') exceeds max_batch_size %d",
                       cfg->warmups[i].batch_size, cfg->warmups[i].name ? cfg->warmups[i].name : "", cfg->max_batch_size);
    for (size_t i = 0; !rc && i < cfg->dynamic_batching.num_preferred; i++)
        if (cfg->dynamic_batching.preferred_batch_size[i] > cfg->max_batch_size)
            rc = cfail(&c, NULL, "dynamic_batching.preferred_batch_size", "%" PRId64 " exceeds max_batch_size %d",
                       cfg->dynamic_batching.preferred_batch_size[i], cfg->max_batch_size);
    config_msg_free(&root);
    if (!rc && c.ignored[0] && !(cfg->ignored = strdup(c.ignored))) rc = cfail(&c, NULL, "ModelConfig", "out of memory");
    if (rc) {
        config_model_free(cfg);
        return -1;
    }
    return 0;
}

/* ---- completion from the model and consistency check ---- */

static int fill_tensor(config_tensor *t, const cinfer_value_info *vi, int strip_batch) {
    memset(t, 0, sizeof *t);
    t->name = strdup(vi->name);
    if (!t->name) return -1;
    t->dtype = vi->dtype;
    if (vi->ndim < 0) {
        t->ndims = 1;
        t->dims[0] = -1;
        return 0;
    }
    t->ndims = 0;
    for (int d = strip_batch ? 1 : 0; d < vi->ndim; d++) t->dims[t->ndims++] = vi->dims[d] < 0 ? -1 : vi->dims[d];
    return 0;
}

static void dims_text(char *buf, size_t n, const int64_t *dims, int nd) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", dims[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

int config_model_complete(model_config *cfg, const cinfer_model *model, int default_max_batch, char *note,
                          size_t note_len, serve_error *e) {
    note[0] = 0;
    size_t ni = cinfer_model_num_inputs(model), no = cinfer_model_num_outputs(model);
    cinfer_value_info vi;
    if (!cfg->has_max_batch_size && cfg->num_inputs == 0 && default_max_batch > 0) {
        int all_dynamic = ni + no > 0;
        for (size_t i = 0; i < ni + no && all_dynamic; i++) {
            if ((i < ni ? cinfer_model_input_info(model, i, &vi) : cinfer_model_output_info(model, i - ni, &vi)) != CINFER_OK) return -1;
            all_dynamic = vi.ndim >= 1 && vi.dims[0] < 0;
        }
        if (all_dynamic) {
            cfg->max_batch_size = default_max_batch;
            cfg->dynamic_batching.present = 1; /* as Triton's ONNX backend: auto-completed batching uses the batcher */
            snprintf(note, note_len, "max_batch_size auto-completed to %d with dynamic batching because the first dim of every "
                                     "input and output is dynamic (set max_batch_size in config.pbtxt to change it, 0 to "
                                     "disable batching)", default_max_batch);
        }
    }
    int batched = config_batches(cfg);
    if (cfg->num_inputs == 0 && ni > 0) {
        cfg->inputs = calloc(ni, sizeof *cfg->inputs);
        if (!cfg->inputs) goto oom;
        for (size_t i = 0; i < ni; i++) {
            if (cinfer_model_input_info(model, i, &vi) != CINFER_OK || fill_tensor(&cfg->inputs[i], &vi, batched) != 0) goto oom;
            cfg->num_inputs++;
        }
    }
    if (cfg->num_outputs == 0 && no > 0) {
        cfg->outputs = calloc(no, sizeof *cfg->outputs);
        if (!cfg->outputs) goto oom;
        for (size_t i = 0; i < no; i++) {
            if (cinfer_model_output_info(model, i, &vi) != CINFER_OK) goto oom;
            if (fill_tensor(&cfg->outputs[i], &vi, batched && vi.ndim >= 1) != 0) goto oom;
            cfg->num_outputs++;
        }
    }
    /* consistency: every config tensor exists in the model with the same type and compatible dims */
    for (int pass = 0; pass < 2; pass++) {
        size_t n = pass ? cfg->num_outputs : cfg->num_inputs, nm = pass ? no : ni;
        const char *what = pass ? "output" : "input";
        for (size_t i = 0; i < n; i++) {
            const config_tensor *t = pass ? &cfg->outputs[i] : &cfg->inputs[i];
            size_t k;
            for (k = 0; k < nm; k++) {
                if ((pass ? cinfer_model_output_info(model, k, &vi) : cinfer_model_input_info(model, k, &vi)) != CINFER_OK) goto oom;
                if (!strcmp(vi.name, t->name)) break;
            }
            if (k == nm) {
                char names[512] = "";
                for (k = 0; k < nm; k++) {
                    if ((pass ? cinfer_model_output_info(model, k, &vi) : cinfer_model_input_info(model, k, &vi)) != CINFER_OK) goto oom;
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", k ? ", " : "", vi.name);
                }
                serve_fail(e, SERVE_BAD_REQUEST, "config %s '%s' is not an %s of the model (model %ss: %s)", what,
                           t->name, what, what, names);
                return -1;
            }
            if (vi.dtype != t->dtype) {
                serve_fail(e, SERVE_BAD_REQUEST, "config %s '%s' has data_type %s but the model's is %s", what, t->name,
                           config_type_name(t->dtype), config_type_name(vi.dtype));
                return -1;
            }
            if (vi.ndim < 0) continue;
            int64_t full[CINFER_MAX_DIMS + 1];
            int fn = 0;
            if (batched) full[fn++] = -1;
            for (int d = 0; d < t->ndims && fn <= CINFER_MAX_DIMS; d++) full[fn++] = t->dims[d];
            char want[160], have[160];
            dims_text(have, sizeof have, vi.dims, vi.ndim);
            if (batched && vi.ndim >= 1 && vi.dims[0] >= 0) {
                serve_fail(e, SERVE_BAD_REQUEST,
                           "max_batch_size is %d but model %s '%s' has a fixed first dim (shape %s); "
                           "batching needs a dynamic first dim (or set max_batch_size: 0)",
                           cfg->max_batch_size, what, t->name, have);
                return -1;
            }
            int ok = fn == vi.ndim;
            for (int d = 0; ok && d < fn; d++) ok = vi.dims[d] < 0 || full[d] < 0 || vi.dims[d] == full[d];
            if (!ok) {
                dims_text(want, sizeof want, t->dims, t->ndims);
                serve_fail(e, SERVE_BAD_REQUEST, "config %s '%s' has dims %s%s but the model's shape is %s", what,
                           t->name, want, batched ? " (plus the batch dim)" : "", have);
                return -1;
            }
        }
    }
    for (size_t k = 0; k < ni; k++) {
        if (cinfer_model_input_info(model, k, &vi) != CINFER_OK) goto oom;
        size_t i;
        for (i = 0; i < cfg->num_inputs && strcmp(cfg->inputs[i].name, vi.name) != 0; i++) {}
        if (i == cfg->num_inputs) {
            serve_fail(e, SERVE_BAD_REQUEST, "model input '%s' is missing from the config's input list", vi.name);
            return -1;
        }
    }
    return 0;
oom:
    serve_fail(e, SERVE_BAD_REQUEST, "reading the model's inputs and outputs failed: %s", cinfer_last_error());
    return -1;
}

/* ---- JSON ---- */

static json_t *dims_json(const int64_t *dims, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(dims[i]));
    return a;
}

static json_t *tensor_json(const config_tensor *t, int is_input) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(t->name));
    json_object_set_new(o, "data_type", json_string(config_type_name(t->dtype)));
    if (is_input) json_object_set_new(o, "format", json_string(t->format ? t->format : "FORMAT_NONE"));
    json_object_set_new(o, "dims", dims_json(t->dims, t->ndims < 0 ? 0 : t->ndims));
    if (!is_input) json_object_set_new(o, "label_filename", json_string(t->label_filename ? t->label_filename : ""));
    json_object_set_new(o, "is_shape_tensor", json_boolean(t->is_shape_tensor));
    json_object_set_new(o, "is_non_linear_format_io", json_false());
    if (is_input) {
        json_object_set_new(o, "allow_ragged_batch", json_boolean(t->allow_ragged_batch));
        json_object_set_new(o, "optional", json_boolean(t->optional));
    }
    return o;
}

static json_t *queue_policy_json(const config_queue_policy *q) {
    return json_pack("{s:s, s:I, s:b, s:I}", "timeout_action", q->timeout_action_delay ? "DELAY" : "REJECT",
                     "default_timeout_microseconds", (json_int_t)q->default_timeout_us, "allow_timeout_override",
                     q->allow_timeout_override, "max_queue_size", (json_int_t)q->max_queue_size);
}

json_t *config_model_to_json(const model_config *cfg) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(cfg->name ? cfg->name : ""));
    json_object_set_new(o, "platform", json_string(cfg->platform ? cfg->platform : "onnxruntime_onnx"));
    json_object_set_new(o, "backend", json_string(cfg->backend ? cfg->backend : "onnxruntime"));
    json_object_set_new(o, "runtime", json_string(""));
    json_t *vp = json_object();
    if (cfg->version_policy.kind == CONFIG_VERSIONS_ALL) {
        json_object_set_new(vp, "all", json_object());
    } else if (cfg->version_policy.kind == CONFIG_VERSIONS_SPECIFIC) {
        json_object_set_new(vp, "specific", json_pack("{s:o}", "versions", dims_json(cfg->version_policy.versions,
                                                                                     (int)cfg->version_policy.num_specific)));
    } else {
        json_object_set_new(vp, "latest", json_pack("{s:I}", "num_versions", (json_int_t)cfg->version_policy.num_versions));
    }
    json_object_set_new(o, "version_policy", vp);
    json_object_set_new(o, "max_batch_size", json_integer(cfg->max_batch_size));
    json_t *a = json_array();
    for (size_t i = 0; i < cfg->num_inputs; i++) json_array_append_new(a, tensor_json(&cfg->inputs[i], 1));
    json_object_set_new(o, "input", a);
    a = json_array();
    for (size_t i = 0; i < cfg->num_outputs; i++) json_array_append_new(a, tensor_json(&cfg->outputs[i], 0));
    json_object_set_new(o, "output", a);
    json_object_set_new(o, "batch_input", json_array());
    json_object_set_new(o, "batch_output", json_array());
    json_object_set_new(o, "optimization",
                        json_pack("{s:s, s:{s:b, s:b, s:[], s:b}, s:{s:b}, s:{s:b}, s:i, s:b}", "priority", "PRIORITY_DEFAULT",
                                  "cuda", "graphs", cfg->cuda_graphs, "busy_wait_events", cfg->cuda_busy_wait_events,
                                  "graph_spec", "output_copy_stream", cfg->cuda_output_copy_stream, "input_pinned_memory",
                                  "enable", 1, "output_pinned_memory", "enable", 1, "gather_kernel_buffer_threshold", 0,
                                  "eager_batching", 0));
    if (cfg->dynamic_batching.present) {
        const config_dynamic_batching *d = &cfg->dynamic_batching;
        json_object_set_new(o, "dynamic_batching",
                            json_pack("{s:o, s:I, s:b, s:I, s:I, s:o, s:{}}", "preferred_batch_size",
                                      dims_json(d->preferred_batch_size, (int)d->num_preferred), "max_queue_delay_microseconds",
                                      (json_int_t)d->max_queue_delay_us, "preserve_ordering", d->preserve_ordering,
                                      "priority_levels", (json_int_t)d->priority_levels, "default_priority_level",
                                      (json_int_t)d->default_priority_level, "default_queue_policy",
                                      queue_policy_json(&d->default_queue_policy), "priority_queue_policy"));
    }
    a = json_array();
    for (size_t i = 0; i < cfg->num_groups; i++) {
        const config_instance_group *g = &cfg->groups[i];
        json_t *gpus = json_array();
        for (size_t k = 0; k < g->num_gpus; k++) json_array_append_new(gpus, json_integer(g->gpus[k]));
        char name[256];
        snprintf(name, sizeof name, "%s_%zu", cfg->name ? cfg->name : "model", i);
        json_array_append_new(a, json_pack("{s:s, s:s, s:i, s:o, s:[], s:[], s:b, s:s}", "name", g->name ? g->name : name,
                                           "kind", KINDS[g->kind], "count", g->count, "gpus", gpus, "secondary_devices",
                                           "profile", "passive", 0, "host_policy", ""));
    }
    json_object_set_new(o, "instance_group", a);
    json_object_set_new(o, "default_model_filename",
                        json_string(cfg->default_model_filename ? cfg->default_model_filename : "model.onnx"));
    json_object_set_new(o, "cc_model_filenames", json_object());
    json_object_set_new(o, "metric_tags", json_object());
    json_t *params = json_object();
    for (size_t i = 0; i < cfg->num_params; i++)
        json_object_set_new(params, cfg->params[i].key, json_pack("{s:s}", "string_value", cfg->params[i].value));
    json_object_set_new(o, "parameters", params);
    a = json_array();
    for (size_t i = 0; i < cfg->num_warmups; i++) {
        const config_warmup *w = &cfg->warmups[i];
        json_t *ins = json_object();
        for (size_t k = 0; k < w->num_inputs; k++) {
            const config_warmup_input *in = &w->inputs[k];
            json_t *v = json_pack("{s:s, s:o}", "data_type", config_type_name(in->dtype), "dims", dims_json(in->dims, in->ndims));
            json_object_set_new(v, in->random_data ? "random_data" : "zero_data", json_true());
            json_object_set_new(ins, in->key, v);
        }
        json_array_append_new(a, json_pack("{s:s, s:I, s:o, s:I}", "name", w->name, "batch_size", (json_int_t)w->batch_size,
                                           "inputs", ins, "count", (json_int_t)w->count));
    }
    json_object_set_new(o, "model_warmup", a);
    json_object_set_new(o, "model_transaction_policy", json_pack("{s:b}", "decoupled", cfg->decoupled));
    json_object_set_new(o, "response_cache", json_pack("{s:b}", "enable", cfg->response_cache));
    return o;
}

static void tensor_free(config_tensor *t) {
    free(t->name);
    free(t->format);
    free(t->label_filename);
}

void config_model_free(model_config *cfg) {
    if (!cfg) return;
    free(cfg->name);
    free(cfg->platform);
    free(cfg->backend);
    free(cfg->default_model_filename);
    free(cfg->ignored);
    for (size_t i = 0; i < cfg->num_inputs; i++) tensor_free(&cfg->inputs[i]);
    for (size_t i = 0; i < cfg->num_outputs; i++) tensor_free(&cfg->outputs[i]);
    free(cfg->inputs);
    free(cfg->outputs);
    for (size_t i = 0; i < cfg->num_groups; i++) {
        free(cfg->groups[i].name);
        free(cfg->groups[i].gpus);
    }
    free(cfg->groups);
    free(cfg->dynamic_batching.preferred_batch_size);
    free(cfg->version_policy.versions);
    for (size_t i = 0; i < cfg->num_warmups; i++) {
        free(cfg->warmups[i].name);
        for (size_t k = 0; k < cfg->warmups[i].num_inputs; k++) free(cfg->warmups[i].inputs[k].key);
        free(cfg->warmups[i].inputs);
    }
    free(cfg->warmups);
    for (size_t i = 0; i < cfg->num_params; i++) {
        free(cfg->params[i].key);
        free(cfg->params[i].value);
    }
    free(cfg->params);
    memset(cfg, 0, sizeof *cfg);
}
