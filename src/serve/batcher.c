/* Dynamic batcher: policy from the model config (including the padding opt-in), batch formation over the model
 * queue (Triton's preferred-size / max-delay rule, one shape group per batch), input gathering with optional
 * padding, and output scattering (zero-copy row views into the batch's outputs, copies where trimmed). */
#include "batcher.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_pool.h"

/* ---- policy ---- */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static const char *param(const model_config *cfg, const char *key) {
    for (size_t i = 0; i < cfg->num_params; i++)
        if (!strcmp(cfg->params[i].key, key)) return cfg->params[i].value;
    return NULL;
}

static int find_tensor(const config_tensor *ts, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name)) return (int)i;
    return -1;
}

/* Copies s[0..n) without surrounding blanks into out (size cap). */
static void trimmed(char *out, size_t cap, const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (n >= cap) n = cap - 1;
    memcpy(out, s, n);
    out[n] = 0;
}

/* The next non-empty item of a comma-separated list, trimmed, into item; advances *s. False at the end. */
static bool next_list_item(const char **s, char *item, size_t cap) {
    while (**s) {
        const char *comma = strchr(*s, ',');
        size_t n = comma ? (size_t)(comma - *s) : strlen(*s);
        trimmed(item, cap, *s, n);
        *s += n + (comma ? 1 : 0);
        if (item[0]) return true;
    }
    return false;
}

/* Splits "NAME:DIM" at its last ':' (names may contain ':'). Returns 0 with *dim in [0, 1000), else -1. */
static int split_name_dim(char *s, char **name, long *dim) {
    char *c = strrchr(s, ':');
    if (!c || c == s) return -1;
    *c = 0;
    char *end;
    errno = 0;
    long v = strtol(c + 1, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    if (errno || end == c + 1 || *end || v < 0 || v >= 1000) return -1;
    *name = s;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    *dim = v;
    return 0;
}

static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xff, man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e), h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)h;
}

/* Encodes the text `v` as one element of dtype t into out. Returns 0, or -1 when it is not a number of that
 * type or out of its range. */
static int encode_value(const char *v, cinfer_dtype t, unsigned char out[8]) {
    char *end;
    memset(out, 0, 8);
    if (t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16) {
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno == ERANGE) return -1;
        if (t == CINFER_DTYPE_DOUBLE) {
            memcpy(out, &d, 8);
        } else {
            float f = (float)d;
            if (isinf(f) && !isinf(d)) return -1;
            if (t == CINFER_DTYPE_FLOAT) {
                memcpy(out, &f, 4);
            } else if (t == CINFER_DTYPE_FLOAT16) {
                uint16_t h = float_to_half(f);
                memcpy(out, &h, 2);
            } else {
                uint32_t x;
                memcpy(&x, &f, 4);
                uint16_t h = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
                memcpy(out, &h, 2);
            }
        }
        return 0;
    }
    if (t == CINFER_DTYPE_BOOL) {
        if (!strcmp(v, "0") || !strcmp(v, "false")) out[0] = 0;
        else if (!strcmp(v, "1") || !strcmp(v, "true")) out[0] = 1;
        else return -1;
        return 0;
    }
    int is_unsigned = t == CINFER_DTYPE_UINT8 || t == CINFER_DTYPE_UINT16 || t == CINFER_DTYPE_UINT32 || t == CINFER_DTYPE_UINT64;
    size_t esz = cinfer_dtype_size(t);
    if (!esz) return -1;
    errno = 0;
    if (is_unsigned) {
        if (strchr(v, '-')) return -1;
        unsigned long long u = strtoull(v, &end, 0);
        if (end == v || *end || errno) return -1;
        if (esz < 8 && u >> (esz * 8)) return -1;
        memcpy(out, &u, esz); /* little-endian: the low bytes */
        return 0;
    }
    long long s = strtoll(v, &end, 0);
    if (end == v || *end || errno) return -1;
    if (esz < 8) {
        long long lim = 1LL << (esz * 8 - 1);
        if (s < -lim || s >= lim) return -1;
    }
    memcpy(out, &s, esz);
    return 0;
}

static void dims_text(char *buf, size_t n, const config_tensor *t) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndims && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Checks that config dim `dim` (batch dim not counted) of t exists and is variable. */
static int check_pad_dim(const model_config *cfg, const char *key, const char *item, const config_tensor *t, long dim,
                         serve_error *e) {
    char dt[160];
    dims_text(dt, sizeof dt, t);
    if (dim >= t->ndims) {
        serve_fail(e, SERVE_BAD_REQUEST,
                   "model '%s' parameter '%s', item '%s': '%s' has dims %s, so dim %ld does not exist (dims count "
                   "from 0 as in config.pbtxt, without the batch dim)",
                   cfg->name, key, item, t->name, dt, dim);
        return -1;
    }
    if (t->dims[dim] != -1) {
        serve_fail(e, SERVE_BAD_REQUEST,
                   "model '%s' parameter '%s', item '%s': dim %ld of '%s' (dims %s) is fixed at %" PRId64
                   "; only variable (-1) dims can be padded",
                   cfg->name, key, item, dim, t->name, dt, t->dims[dim]);
        return -1;
    }
    return 0;
}

static int parse_pad_inputs(batcher_policy *p, const model_config *cfg, const char *text, serve_error *e) {
    const char *key = BATCHER_PARAM_PAD_INPUTS;
    int any = 0;
    char item[256], copy[256];
    for (const char *s = text; next_list_item(&s, item, sizeof item);) {
        snprintf(copy, sizeof copy, "%s", item);
        char *eq = strrchr(copy, '='), *name;
        long dim;
        if (eq) *eq = 0;
        if (!eq || split_name_dim(copy, &name, &dim) != 0) {
            serve_fail(e, SERVE_BAD_REQUEST,
                       "model '%s' parameter '%s': item '%s' is not INPUT:DIM=VALUE (e.g. \"tokens:0=0, mask:0=0\")",
                       cfg->name, key, item);
            return -1;
        }
        char value[64];
        trimmed(value, sizeof value, eq + 1, strlen(eq + 1));
        int k = find_tensor(cfg->inputs, cfg->num_inputs, name);
        if (k < 0) {
            serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s', item '%s': '%s' is not an input of the model",
                       cfg->name, key, item, name);
            return -1;
        }
        const config_tensor *t = &cfg->inputs[k];
        if (check_pad_dim(cfg, key, item, t, dim, e) != 0) return -1;
        batcher_pad *pd = &p->pad[k];
        unsigned char v[8];
        if (encode_value(value, t->dtype, v) != 0) {
            serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s', item '%s': pad value '%s' is not a %s value",
                       cfg->name, key, item, value, config_type_name(t->dtype));
            return -1;
        }
        if (pd->dims && memcmp(pd->value, v, sizeof v) != 0) {
            serve_fail(e, SERVE_BAD_REQUEST,
                       "model '%s' parameter '%s', item '%s': input '%s' is padded with two different values",
                       cfg->name, key, item, name);
            return -1;
        }
        memcpy(pd->value, v, sizeof v);
        pd->dims |= 1u << (dim + 1);
        pd->esz = cinfer_dtype_size(t->dtype);
        any = 1;
    }
    if (!any) {
        serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s' lists no input (give INPUT:DIM=VALUE, ...)",
                   cfg->name, key);
        return -1;
    }
    return 0;
}

static int parse_pad_outputs(batcher_policy *p, const model_config *cfg, const char *text, serve_error *e) {
    const char *key = BATCHER_PARAM_PAD_OUTPUTS;
    char item[256], copy[256];
    for (const char *s = text; next_list_item(&s, item, sizeof item);) {
        snprintf(copy, sizeof copy, "%s", item);
        char *eq = strchr(copy, '='), *oname, *iname;
        long odim, idim;
        if (eq) *eq = 0;
        if (!eq || split_name_dim(copy, &oname, &odim) != 0 || split_name_dim(eq + 1, &iname, &idim) != 0) {
            serve_fail(e, SERVE_BAD_REQUEST,
                       "model '%s' parameter '%s': item '%s' is not OUTPUT:DIM=INPUT:DIM (e.g. \"per_token:0=mask:0\")",
                       cfg->name, key, item);
            return -1;
        }
        while (isspace((unsigned char)*iname)) iname++;
        int o = find_tensor(cfg->outputs, cfg->num_outputs, oname), k = find_tensor(cfg->inputs, cfg->num_inputs, iname);
        if (o < 0 || k < 0) {
            serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s', item '%s': '%s' is not an %s of the model",
                       cfg->name, key, item, o < 0 ? oname : iname, o < 0 ? "output" : "input");
            return -1;
        }
        if (check_pad_dim(cfg, key, item, &cfg->outputs[o], odim, e) != 0) return -1;
        if (!(p->pad[k].dims & (1u << (idim + 1)))) {
            serve_fail(e, SERVE_BAD_REQUEST,
                       "model '%s' parameter '%s', item '%s': dim %ld of input '%s' is not padded (list it in '%s')",
                       cfg->name, key, item, idim, iname, BATCHER_PARAM_PAD_INPUTS);
            return -1;
        }
        if (p->trim[o].dim) {
            serve_fail(e, SERVE_BAD_REQUEST,
                       "model '%s' parameter '%s', item '%s': output '%s' is listed twice (one trimmed dim per output)",
                       cfg->name, key, item, oname);
            return -1;
        }
        p->trim[o] = (batcher_trim){.dim = (int)odim + 1, .input = (size_t)k, .input_dim = (int)idim + 1};
    }
    return 0;
}

/* BATCHER_PARAM_BUCKETS into p->buckets (ascending, unique, ending with the max batch). */
static int parse_buckets(batcher_policy *p, const model_config *cfg, serve_error *e) {
    const char *v = param(cfg, BATCHER_PARAM_BUCKETS);
    if (!v) v = "auto";
    if (!p->dynamic || p->max_batch <= 1 || !strcmp(v, "none")) return 0;
    int64_t list[64];
    size_t n = 0;
    if (!strcmp(v, "auto") || !strcmp(v, "pow2")) {
        p->buckets_gpu_only = !strcmp(v, "auto");
        for (int64_t b = 1; b < p->max_batch && n < 32; b *= 2) list[n++] = b;
        for (size_t i = 0; i < p->num_preferred && n < 63; i++) list[n++] = p->preferred[i];
    } else {
        char item[64];
        for (const char *s = v; next_list_item(&s, item, sizeof item);) {
            char *end;
            errno = 0;
            long long b = strtoll(item, &end, 10);
            if (end == item || errno || b < 1 || *end || n == 63) {
                serve_fail(e, SERVE_BAD_REQUEST,
                           "model '%s': parameter '%s' is '%s': use auto, none, pow2 or a list of batch sizes "
                           "like 1,2,4,8 (at most 63)",
                           cfg->name, BATCHER_PARAM_BUCKETS, v);
                return -1;
            }
            if (b < p->max_batch) list[n++] = b;
        }
    }
    list[n++] = p->max_batch;
    qsort(list, n, sizeof list[0], cmp_i64);
    p->buckets = malloc(n * sizeof *p->buckets);
    if (!p->buckets) {
        serve_fail(e, SERVE_INTERNAL, "model '%s': out of memory", cfg->name);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!p->num_buckets || p->buckets[p->num_buckets - 1] != list[i]) p->buckets[p->num_buckets++] = list[i];
    return 0;
}

int64_t batcher_bucket(const batcher_policy *p, int64_t total, int gpu, int64_t cap) {
    if (!p->num_buckets || (p->buckets_gpu_only && !gpu)) return total;
    for (size_t i = 0; i < p->num_buckets; i++)
        if (p->buckets[i] >= total) return cap > 0 && p->buckets[i] > cap ? total : p->buckets[i];
    return total;
}

int batcher_policy_init(batcher_policy *p, const model_config *cfg, serve_error *e) {
    memset(p, 0, sizeof *p);
    p->mask_input = -1;
    p->num_inputs = cfg->num_inputs;
    p->num_outputs = cfg->num_outputs;
    p->dynamic = config_batches(cfg) && cfg->dynamic_batching.present;
    p->max_batch = 1;
    const config_dynamic_batching *d = &cfg->dynamic_batching;
    if (p->dynamic) {
        p->max_delay_ns = d->max_queue_delay_us * 1000u;
        if (d->num_preferred) {
            p->preferred = malloc(d->num_preferred * sizeof *p->preferred);
            if (!p->preferred) goto oom;
            memcpy(p->preferred, d->preferred_batch_size, d->num_preferred * sizeof *p->preferred);
            qsort(p->preferred, d->num_preferred, sizeof *p->preferred, cmp_i64);
            for (size_t i = 0; i < d->num_preferred; i++)
                if (!p->num_preferred || p->preferred[p->num_preferred - 1] != p->preferred[i])
                    p->preferred[p->num_preferred++] = p->preferred[i];
        }
        p->max_batch = p->num_preferred ? p->preferred[p->num_preferred - 1] : cfg->max_batch_size;
    }
    if (parse_buckets(p, cfg, e) != 0) return -1;
    const char *pin = param(cfg, BATCHER_PARAM_PAD_INPUTS), *pmask = param(cfg, BATCHER_PARAM_PAD_MASK),
               *pout = param(cfg, BATCHER_PARAM_PAD_OUTPUTS);
    if (!pin && !pmask && !pout) return 0;
    if (!pin) {
        serve_fail(e, SERVE_BAD_REQUEST,
                   "model '%s': parameter '%s' needs '%s' (which inputs pad, along which dim, with what value)",
                   cfg->name, pmask ? BATCHER_PARAM_PAD_MASK : BATCHER_PARAM_PAD_OUTPUTS, BATCHER_PARAM_PAD_INPUTS);
        goto fail;
    }
    if (!p->dynamic) {
        serve_fail(e, SERVE_BAD_REQUEST,
                   "model '%s': parameter '%s' needs a batching model with dynamic batching (max_batch_size >= 1 "
                   "and a dynamic_batching block); it has max_batch_size %d%s",
                   cfg->name, BATCHER_PARAM_PAD_INPUTS, cfg->max_batch_size,
                   d->present ? "" : " and no dynamic_batching");
        goto fail;
    }
    p->pad = calloc(cfg->num_inputs ? cfg->num_inputs : 1, sizeof *p->pad);
    p->trim = calloc(cfg->num_outputs ? cfg->num_outputs : 1, sizeof *p->trim);
    if (!p->pad || !p->trim) goto oom;
    if (parse_pad_inputs(p, cfg, pin, e) != 0) goto fail;
    char mask[256];
    trimmed(mask, sizeof mask, pmask ? pmask : "", pmask ? strlen(pmask) : 0);
    p->mask_input = find_tensor(cfg->inputs, cfg->num_inputs, mask);
    if (!mask[0] || p->mask_input < 0 || !p->pad[p->mask_input].dims) {
        serve_fail(e, SERVE_BAD_REQUEST,
                   "model '%s': padding needs parameter '%s' naming the padded input that masks the padding out "
                   "(got '%s'%s)",
                   cfg->name, BATCHER_PARAM_PAD_MASK, mask,
                   !mask[0] ? ": missing" : p->mask_input < 0 ? ": not an input" : ": not listed in " BATCHER_PARAM_PAD_INPUTS);
        goto fail;
    }
    if (pout && parse_pad_outputs(p, cfg, pout, e) != 0) goto fail;
    return 0;
oom:
    serve_fail(e, SERVE_INTERNAL, "model '%s': out of memory building the batcher", cfg->name);
fail:
    batcher_policy_free(p);
    return -1;
}

void batcher_policy_free(batcher_policy *p) {
    if (!p) return;
    free(p->preferred);
    free(p->buckets);
    free(p->pad);
    free(p->trim);
    memset(p, 0, sizeof *p);
    p->mask_input = -1;
}

/* ---- formation ---- */

int batcher_batch_init(batcher_batch *b, const batcher_policy *p) {
    memset(b, 0, sizeof *b);
    b->cap = p->max_batch > 1 ? (size_t)p->max_batch : 1;
    b->reqs = calloc(b->cap, sizeof *b->reqs);
    return b->reqs ? 0 : -1;
}

void batcher_batch_free(batcher_batch *b) {
    if (!b) return;
    free(b->reqs);
    memset(b, 0, sizeof *b);
}

int batcher_compatible(const batcher_policy *p, const model_request *a, const model_request *b) {
    if (!p->dynamic) return 0;
    for (size_t k = 0; k < p->num_inputs; k++) {
        const cinfer_tensor *x = &a->inputs[k], *y = &b->inputs[k];
        if (x->ndim != y->ndim) return 0;
        uint32_t padded = p->pad ? p->pad[k].dims : 0;
        for (int d = 1; d < x->ndim; d++)
            if (!(padded & (1u << d)) && x->dims[d] != y->dims[d]) return 0;
    }
    return 1;
}

static int is_preferred(const batcher_policy *p, int64_t n) {
    return p->num_preferred && bsearch(&n, p->preferred, p->num_preferred, sizeof n, cmp_i64) != NULL;
}

typedef struct group {
    model_request *first;
    int64_t total, best_total, fit_total;
    size_t count, best_count, fit_count; /* fit: the longest prefix whose total is a bucket size */
    int closed; /* cannot grow: cap reached, or the next request of this shape does not fit */
} group;

static int64_t req_batch(const model_request *r) { return r->batch_size > 0 ? r->batch_size : 1; }

batcher_decision batcher_form(const batcher_policy *p, model_queue *q, uint64_t now, batcher_batch *b, uint64_t *wake_ns) {
    return batcher_form_capped(p, q, now, 0, 0, b, wake_ns);
}

batcher_decision batcher_form_capped(const batcher_policy *p, model_queue *q, uint64_t now, int64_t cap, int gpu,
                                     batcher_batch *b, uint64_t *wake_ns) {
    int64_t max_batch = cap > 0 && cap < p->max_batch ? cap : p->max_batch;
    b->n = 0;
    b->total = 0;
    b->expired = NULL;
    *wake_ns = 0;
    model_request **expired_tail = &b->expired;
    group g[BATCHER_MAX_GROUPS];
    size_t ng = 0;
    model_request *nx;
    for (model_request *r = model_queue_first(q); r; r = nx) {
        nx = model_queue_next(q, r);
        if (r->deadline_ns && now > r->deadline_ns) {
            model_queue_unlink(q, r);
            *expired_tail = r;
            expired_tail = &r->next;
            continue;
        }
        size_t k = 0;
        while (k < ng && !batcher_compatible(p, g[k].first, r)) k++;
        if (k == ng) {
            if (ng == BATCHER_MAX_GROUPS || (!p->dynamic && ng == 1)) continue;
            g[ng++] = (group){.first = r};
        }
        group *G = &g[k];
        if (G->closed) continue;
        int64_t bs = req_batch(r);
        if (G->count && G->total + bs > max_batch) {
            G->closed = 1;
        } else {
            G->total += bs;
            G->count++;
            if (is_preferred(p, G->total)) {
                G->best_total = G->total;
                G->best_count = G->count;
            }
            if (G->total >= BATCHER_SPLIT_MIN && batcher_bucket(p, G->total, gpu, cap) == G->total) {
                G->fit_total = G->total;
                G->fit_count = G->count;
            }
            if (G->total >= max_batch) G->closed = 1;
        }
        if (k == 0 && G->closed) break; /* the first group is ready: nothing behind it changes that */
    }
    for (size_t k = 0; k < ng; k++) {
        group *G = &g[k];
        uint64_t due = G->first->arrival_ns + p->max_delay_ns;
        int delay_over = q->closed || p->max_delay_ns == 0 || now >= due;
        size_t take = 0;
        if (G->best_count && !delay_over) take = G->best_count; /* the largest preferred size it can form */
        else if (G->closed || delay_over) take = G->count;      /* the largest batch possible, or the delay ran out */
        if (take == G->count && G->fit_count < G->count && G->fit_total >= BATCHER_SPLIT_MIN) {
            int64_t bucket = batcher_bucket(p, G->total, gpu, cap); /* what this batch would run as */
            if (4 * (bucket - G->total) > bucket) take = G->fit_count; /* the rest waits for the next free lane */
        }
        if (!take) {
            if (!*wake_ns || due < *wake_ns) *wake_ns = due;
            continue;
        }
        /* take the group's first `take` requests: the same walk as above, so the same requests */
        model_request *first = G->first;
        for (model_request *r = first; r && b->n < take; r = nx) {
            nx = model_queue_next(q, r);
            if (r != first && !batcher_compatible(p, first, r)) continue;
            model_queue_unlink(q, r);
            b->reqs[b->n++] = r;
            b->total += req_batch(r);
        }
        *wake_ns = 0;
        return BATCHER_READY;
    }
    return ng ? BATCHER_WAIT : BATCHER_EMPTY;
}

/* ---- gather ---- */

static void scratch_release(batcher_scratch *s, size_t k) {
    if (s->is_pinned[k]) cinfer_cuda_host_free(s->device, s->buf[k]);
    else free(s->buf[k]);
    s->buf[k] = NULL;
    s->is_pinned[k] = false;
}

void batcher_scratch_free(batcher_scratch *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) scratch_release(s, i);
    free(s->buf);
    free(s->cap);
    free(s->is_pinned);
    free(s->jobs);
    s->buf = NULL; /* the instance's choice (pinned, device, pool) stays */
    s->cap = NULL;
    s->is_pinned = NULL;
    s->jobs = NULL;
    s->jobs_cap = 0;
    s->n = 0;
}

static int scratch_reserve(batcher_scratch *s, size_t n, size_t k, size_t bytes) {
    if (s->n < n) {
        void **nb = realloc(s->buf, n * sizeof *nb);
        if (!nb) return -1;
        s->buf = nb;
        size_t *nc = realloc(s->cap, n * sizeof *nc);
        if (!nc) return -1;
        s->cap = nc;
        bool *np = realloc(s->is_pinned, n * sizeof *np);
        if (!np) return -1;
        s->is_pinned = np;
        for (size_t i = s->n; i < n; i++) s->buf[i] = NULL, s->cap[i] = 0, s->is_pinned[i] = false;
        s->n = n;
    }
    if (s->cap[k] >= bytes) return 0;
    size_t cap = (bytes + bytes / 2 + 63) / 64 * 64;
    void *nb = NULL;
    bool pinned = s->pinned && cinfer_cuda_host_alloc(s->device, cap, &nb) == CINFER_OK;
    if (!pinned && !(nb = aligned_alloc(64, cap))) return -1; /* no pinned memory to be had: ordinary memory works */
    scratch_release(s, k);
    s->buf[k] = nb;
    s->cap[k] = cap;
    s->is_pinned[k] = pinned;
    return 0;
}

static size_t numel_from(const int64_t *dims, int from, int ndim) {
    size_t n = 1;
    for (int d = from; d < ndim; d++) n *= (size_t)dims[d];
    return n;
}

static void fill(unsigned char *dst, size_t count, const batcher_pad *pd) {
    int zero = 1;
    for (size_t i = 0; i < pd->esz; i++) zero &= pd->value[i] == 0;
    if (zero) {
        memset(dst, 0, count * pd->esz);
        return;
    }
    for (size_t i = 0; i < count; i++) memcpy(dst + i * pd->esz, pd->value, pd->esz);
}

/* Copies tensor t into dst laid out with dims odims (same rank, each >= t's), the rest filled with the pad. */
static void copy_padded(unsigned char *dst, const int64_t *odims, const cinfer_tensor *t, size_t esz, const batcher_pad *pd) {
    int nd = t->ndim;
    fill(dst, (size_t)t->dims[0] * numel_from(odims, 1, nd), pd);
    size_t ostride[CINFER_MAX_DIMS];
    ostride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) ostride[d] = ostride[d + 1] * (size_t)odims[d + 1];
    size_t rows = numel_from(t->dims, 0, nd - 1), row = (size_t)t->dims[nd - 1] * esz;
    int64_t idx[CINFER_MAX_DIMS] = {0};
    const unsigned char *src = t->data;
    for (size_t r = 0; r < rows; r++) {
        size_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += (size_t)idx[d] * ostride[d];
        memcpy(dst + off * esz, src, row);
        src += row;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < t->dims[d]) break;
            idx[d] = 0;
        }
    }
}

static int jobs_reserve(batcher_scratch *s, size_t n) {
    if (s->jobs_cap >= n) return 0;
    copy_job *nj = realloc(s->jobs, n * sizeof *nj);
    if (!nj) return -1;
    s->jobs = nj;
    s->jobs_cap = n;
    return 0;
}

/* One request as it came (its dims untouched: the model may not batch). Host lanes read its tensors in place. A GPU
 * lane copies inputs of COPY_POOL_MIN_BYTES or more in all into its page-locked buffers: the memcpy the engine would
 * make into its staging buffer anyway, here split over the helpers, after which the upload is one DMA and a pointwise
 * model's run can go in chunks. */
static int gather_single(const batcher_policy *p, const model_request *r, batcher_scratch *s, cinfer_tensor *in) {
    size_t total = 0, num_jobs = 0;
    for (size_t k = 0; k < p->num_inputs; k++) {
        in[k] = r->inputs[k];
        total += numel_from(in[k].dims, 0, in[k].ndim) * cinfer_dtype_size(in[k].dtype);
    }
    if (!s->pinned || total < COPY_POOL_MIN_BYTES || jobs_reserve(s, p->num_inputs) != 0) return 0;
    for (size_t k = 0; k < p->num_inputs; k++) {
        size_t bytes = numel_from(in[k].dims, 0, in[k].ndim) * cinfer_dtype_size(in[k].dtype);
        /* strings and empty tensors stay; so does an input whose buffer could only be ordinary memory */
        if (!bytes || !in[k].data || scratch_reserve(s, p->num_inputs, k, bytes) != 0 || !s->is_pinned[k]) continue;
        s->jobs[num_jobs++] = (copy_job){s->buf[k], in[k].data, bytes};
        in[k].data = s->buf[k];
    }
    copy_pool_run(s->pool, s->jobs, num_jobs);
    return 0;
}

int batcher_gather(const batcher_policy *p, const batcher_batch *b, batcher_scratch *s, cinfer_tensor *in, serve_error *e) {
    int64_t rows = b->rows > b->total ? b->rows : b->total;
    if (b->n == 1 && rows == b->total) return gather_single(p, b->reqs[0], s, in);
    size_t num_jobs = 0;
    if (jobs_reserve(s, b->n * p->num_inputs) != 0)
        return serve_fail(e, SERVE_INTERNAL, "out of memory gathering a batch of %" PRId64, rows);
    for (size_t k = 0; k < p->num_inputs; k++) {
        const cinfer_tensor *t0 = &b->reqs[0]->inputs[k];
        cinfer_tensor *o = &in[k];
        *o = *t0;
        o->dims[0] = rows;
        uint32_t padded = p->pad ? p->pad[k].dims : 0;
        for (int d = 1; d < o->ndim; d++)
            if (padded & (1u << d))
                for (size_t i = 1; i < b->n; i++)
                    if (b->reqs[i]->inputs[k].dims[d] > o->dims[d]) o->dims[d] = b->reqs[i]->inputs[k].dims[d];
        size_t esz = cinfer_dtype_size(o->dtype);
        if (!esz) return serve_fail(e, SERVE_UNSUPPORTED, "input '%s': data type %s cannot be batched", o->name, cinfer_dtype_name(o->dtype));
        size_t row = numel_from(o->dims, 1, o->ndim) * esz;
        if (scratch_reserve(s, p->num_inputs, k, (size_t)rows * row + 1) != 0)
            return serve_fail(e, SERVE_INTERNAL, "out of memory gathering input '%s' for a batch of %" PRId64, o->name, rows);
        unsigned char *dst = s->buf[k];
        for (size_t i = 0; i < b->n; i++) {
            const cinfer_tensor *t = &b->reqs[i]->inputs[k];
            int same = 1;
            for (int d = 1; d < t->ndim && same; d++) same = t->dims[d] == o->dims[d];
            if (same) s->jobs[num_jobs++] = (copy_job){dst, t->data, (size_t)t->dims[0] * row};
            else copy_padded(dst, o->dims, t, esz, &p->pad[k]);
            dst += (size_t)t->dims[0] * row;
        }
        o->data = s->buf[k];
    }
    copy_pool_run(s->pool, s->jobs, num_jobs);
    for (size_t k = 0; k < p->num_inputs && rows > b->total; k++) {
        /* bucket rows: copies of the first row (real data, so no model sees values it was never meant to get) */
        size_t row = numel_from(in[k].dims, 1, in[k].ndim) * cinfer_dtype_size(in[k].dtype);
        unsigned char *dst = (unsigned char *)s->buf[k] + (size_t)b->total * row;
        for (int64_t r = b->total; r < rows; r++, dst += row) memcpy(dst, s->buf[k], row);
    }
    return 0;
}

/* ---- scatter ---- */

int batcher_scatter(const batcher_policy *p, const batcher_batch *b, cinfer_tensor *outs, model_output_memory memory,
                    const char *model_name, const model_config *cfg, serve_error *e) {
    size_t no = p->num_outputs;
    int64_t rows = b->rows > b->total ? b->rows : b->total;
    for (size_t j = 0; j < no && rows > b->total; j++) /* bucket rows are dropped: the first `total` rows are kept */
        if (outs[j].ndim >= 1 && outs[j].dims[0] == rows) outs[j].dims[0] = b->total;
    if (b->n == 1) {
        model_request *r = b->reqs[0];
        r->outputs = outs;
        r->num_outputs = no;
        r->outputs_own_data = 1;
        r->outputs_memory = memory;
        return 0;
    }
    model_batch_outputs *h = calloc(1, sizeof *h);
    if (!h) {
        model_outputs_free_data(outs, no, memory);
        free(outs);
        return serve_fail(e, SERVE_INTERNAL, "model '%s': out of memory scattering a batch of %" PRId64, model_name, b->total);
    }
    h->tensors = outs;
    h->num = no;
    h->memory = memory;
    atomic_init(&h->refs, 1); /* this function's own reference, dropped at the end */
    for (size_t j = 0; j < no; j++) {
        const cinfer_tensor *o = &outs[j];
        if (o->ndim < 1 || o->dims[0] != b->total) {
            serve_fail(e, SERVE_INTERNAL, "model '%s' output '%s' has first dim %" PRId64 " for a batch of %" PRId64
                                          ": the model does not keep the batch dim", model_name, cfg->outputs[j].name,
                       o->ndim < 1 ? 0 : o->dims[0], b->total);
            goto fail;
        }
        if (!cinfer_dtype_size(o->dtype)) {
            serve_fail(e, SERVE_UNSUPPORTED, "model '%s' output '%s': data type %s cannot be batched", model_name,
                       cfg->outputs[j].name, cinfer_dtype_name(o->dtype));
            goto fail;
        }
        const batcher_trim *tr = p->trim ? &p->trim[j] : NULL;
        if (tr && tr->dim) {
            int64_t longest = 0;
            for (size_t i = 0; i < b->n; i++)
                if (b->reqs[i]->inputs[tr->input].dims[tr->input_dim] > longest) longest = b->reqs[i]->inputs[tr->input].dims[tr->input_dim];
            if (tr->dim >= o->ndim || o->dims[tr->dim] != longest) {
                serve_fail(e, SERVE_INTERNAL, "model '%s' output '%s': dim %d is %" PRId64 " but the batch's padded length of input "
                                              "'%s' dim %d is %" PRId64 " (check parameter '%s')", model_name, cfg->outputs[j].name,
                           tr->dim - 1, tr->dim < o->ndim ? o->dims[tr->dim] : 0, cfg->inputs[tr->input].name,
                           tr->input_dim - 1, longest, BATCHER_PARAM_PAD_OUTPUTS);
                goto fail;
            }
        }
    }
    int64_t row0 = 0;
    for (size_t i = 0; i < b->n; i++) {
        model_request *r = b->reqs[i];
        r->outputs = calloc(no ? no : 1, sizeof *r->outputs);
        if (!r->outputs) goto oom;
        r->num_outputs = no;
        r->batch = h;
        atomic_fetch_add(&h->refs, 1);
        size_t copy_bytes = 0;
        for (size_t j = 0; j < no; j++) {
            const batcher_trim *tr = p->trim ? &p->trim[j] : NULL;
            const cinfer_tensor *o = &outs[j];
            if (!tr || !tr->dim) continue;
            int64_t len = r->inputs[tr->input].dims[tr->input_dim];
            if (len < o->dims[tr->dim])
                copy_bytes += ((size_t)r->batch_size * numel_from(o->dims, 1, o->ndim) / (size_t)o->dims[tr->dim] * (size_t)len *
                                   cinfer_dtype_size(o->dtype) + 63) / 64 * 64;
        }
        unsigned char *copy = NULL;
        if (copy_bytes && !(copy = r->output_copy = aligned_alloc(64, copy_bytes))) goto oom;
        for (size_t j = 0; j < no; j++) {
            const cinfer_tensor *o = &outs[j];
            cinfer_tensor *ro = &r->outputs[j];
            *ro = *o;
            ro->dims[0] = r->batch_size;
            size_t esz = cinfer_dtype_size(o->dtype), row = numel_from(o->dims, 1, o->ndim) * esz;
            const unsigned char *src = (const unsigned char *)o->data + (size_t)row0 * row;
            const batcher_trim *tr = p->trim ? &p->trim[j] : NULL;
            int64_t len = tr && tr->dim ? r->inputs[tr->input].dims[tr->input_dim] : 0;
            if (!tr || !tr->dim || len == o->dims[tr->dim]) {
                ro->data = (void *)src;
                continue;
            }
            /* trim dim d back to this request's length: outer blocks of L*inner bytes, keep len*inner of each */
            int d = tr->dim;
            size_t inner = numel_from(o->dims, d + 1, o->ndim) * esz;
            size_t outer = (size_t)r->batch_size * numel_from(o->dims, 1, d);
            for (size_t x = 0; x < outer; x++) memcpy(copy + x * (size_t)len * inner, src + x * (size_t)o->dims[d] * inner, (size_t)len * inner);
            ro->dims[d] = len;
            ro->data = copy;
            copy += ((size_t)r->batch_size * numel_from(ro->dims, 1, ro->ndim) * esz + 63) / 64 * 64;
        }
        row0 += r->batch_size;
    }
    model_batch_outputs_release(h);
    return 0;
oom:
    serve_fail(e, SERVE_INTERNAL, "model '%s': out of memory scattering a batch of %" PRId64, model_name, b->total);
fail:
    for (size_t i = 0; i < b->n; i++)
        if (b->reqs[i]->batch == h) model_request_free_outputs(b->reqs[i]);
        else {
            free(b->reqs[i]->outputs);
            b->reqs[i]->outputs = NULL;
            b->reqs[i]->num_outputs = 0;
        }
    model_batch_outputs_release(h);
    return -1;
}
