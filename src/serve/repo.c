/* Model repository: scans <dir>/<model>/ folders, reads config.pbtxt (or auto-completes), picks versions by the
 * version policy, loads them (model_version_load), and swaps the served set under a short lock so lookups never
 * wait for a load. Loads, unloads and polls are serialised by a second lock; retired versions are drained and
 * freed outside the lookup lock. */
#include "repo.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_model.h"
#include "log.h"

typedef struct repo_entry {
    int64_t version;
    char version_str[24];
    const char *state; /* "READY" | "UNAVAILABLE" */
    char *reason;
    model_version *mv; /* a counted reference when READY */
} repo_entry;

typedef struct repo_model {
    char *name;
    repo_entry *entries; /* versions of the last successful load attempt, failed ones included */
    size_t num_entries;
    char *reason;        /* why the model has no entries (config error, unloaded, never loaded) */
    int wanted;          /* should be loaded: counts for strict readiness */
    char *signature;     /* poll mode: file times and sizes at the last load */
    int present;         /* poll scan bookkeeping */
} repo_model;

struct repo {
    char *dir;
    repo_control mode;
    model_load_options opt;
    char device[64];
    pthread_mutex_t lock; /* guards models and their entries */
    pthread_mutex_t ops;  /* serialises load / unload / poll */
    repo_model **models;
    size_t num_models;
    int started;
};

static char *path_join3(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + (c ? strlen(c) : 0) + 3;
    char *p = malloc(n);
    if (!p) return NULL;
    if (c) snprintf(p, n, "%s/%s/%s", a, b, c);
    else snprintf(p, n, "%s/%s", a, b);
    return p;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int valid_name(const char *name) {
    return name[0] && name[0] != '.' && !strchr(name, '/') && strlen(name) < 256;
}

static int parse_version(const char *s, int64_t *v) {
    if (!s[0] || strlen(s) > 18) return -1;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return -1;
    *v = strtoll(s, NULL, 10);
    return 0;
}

static void entries_free_list(repo_entry *e, size_t n) {
    for (size_t i = 0; i < n; i++) free(e[i].reason);
    free(e);
}

repo_control repo_mode(const repo *r) { return r->mode; }

int repo_create(const char *dir, repo_control mode, const model_load_options *opt, repo **out, serve_error *e) {
    *out = NULL;
    if (!is_dir(dir)) return serve_fail(e, SERVE_BAD_REQUEST, "model repository '%s' is not a folder: %s", dir, strerror(errno ? errno : ENOTDIR));
    repo *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(dir))) {
        free(r);
        return serve_fail(e, SERVE_INTERNAL, "out of memory");
    }
    r->mode = mode;
    r->opt = *opt;
    snprintf(r->device, sizeof r->device, "%s", opt->device ? opt->device : "cpu");
    r->opt.device = r->device;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->ops, NULL);
    *out = r;
    return 0;
}

/* Finds or adds the entry of model `name` (lock held). */
static repo_model *model_entry(repo *r, const char *name, int create) {
    for (size_t i = 0; i < r->num_models; i++)
        if (!strcmp(r->models[i]->name, name)) return r->models[i];
    if (!create) return NULL;
    repo_model **nm = realloc(r->models, (r->num_models + 1) * sizeof *nm);
    if (!nm) return NULL;
    r->models = nm;
    repo_model *m = calloc(1, sizeof *m);
    if (!m || !(m->name = strdup(name))) {
        free(m);
        return NULL;
    }
    nm[r->num_models++] = m;
    return m;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int cmp_asc(const void *a, const void *b) { return -cmp_desc(a, b); }

/* Version folders of a model, highest first. */
static int list_versions(const char *model_dir, int64_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(model_dir);
    if (!d) return -1;
    struct dirent *de;
    size_t cap = 0;
    while ((de = readdir(d)) != NULL) {
        int64_t v;
        if (parse_version(de->d_name, &v) != 0) continue;
        char *p = path_join3(model_dir, de->d_name, NULL);
        int dir = p && is_dir(p);
        free(p);
        if (!dir) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            int64_t *nv = realloc(*out, cap * sizeof *nv);
            if (!nv) {
                closedir(d);
                return -1;
            }
            *out = nv;
        }
        (*out)[(*n)++] = v;
    }
    closedir(d);
    if (*n) qsort(*out, *n, sizeof **out, cmp_desc);
    return 0;
}

static int read_file(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!b || err) {
        free(b);
        return -1;
    }
    *text = b;
    *len = n;
    return 0;
}

/* Reads config.pbtxt (or the defaults when absent) into cfg. */
static int read_config(const char *model_dir, const char *name, int auto_complete, model_config *cfg, serve_error *e) {
    char *path = path_join3(model_dir, "config.pbtxt", NULL);
    if (!path) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    struct stat st;
    int rc;
    if (stat(path, &st) != 0 && !auto_complete) {
        rc = serve_fail(e, SERVE_BAD_REQUEST, "%s is missing: with auto-complete off (--disable-auto-complete-config) "
                        "every model needs a config.pbtxt that lists its inputs and outputs", path);
    } else if (stat(path, &st) != 0) {
        rc = config_model_init_default(cfg, name);
        if (rc) serve_fail(e, SERVE_INTERNAL, "out of memory");
    } else {
        char *text;
        size_t len;
        if (read_file(path, &text, &len) != 0) {
            rc = serve_fail(e, SERVE_BAD_REQUEST, "cannot read %s: %s", path, strerror(errno));
        } else {
            rc = config_model_parse(text, len, path, cfg, e);
            free(text);
            if (!rc && !cfg->name) {
                if (!(cfg->name = strdup(name))) rc = serve_fail(e, SERVE_INTERNAL, "out of memory");
            } else if (!rc && strcmp(cfg->name, name) != 0) {
                rc = serve_fail(e, SERVE_BAD_REQUEST, "%s: name '%s' differs from the model's folder name '%s'", path, cfg->name, name);
                config_model_free(cfg);
            }

        }
    }
    free(path);
    return rc;
}

/* A text that changes when config.pbtxt or any version's files change (poll mode). */
static char *model_signature(const char *dir, const char *name) {
    char *mdir = path_join3(dir, name, NULL);
    if (!mdir) return NULL;
    stats_text t = {0};
    struct stat st;
    char *cp = path_join3(mdir, "config.pbtxt", NULL);
    if (cp && stat(cp, &st) == 0)
        stats_text_printf(&t, "config:%lld.%09ld:%lld;", (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_size);
    free(cp);
    int64_t *vers;
    size_t nv;
    if (list_versions(mdir, &vers, &nv) == 0) {
        for (size_t i = 0; i < nv; i++) {
            char vs[24];
            snprintf(vs, sizeof vs, "%" PRId64, vers[i]);
            char *vdir = path_join3(mdir, vs, NULL);
            DIR *d = vdir ? opendir(vdir) : NULL;
            struct dirent *de;
            stats_text_printf(&t, "v%s:", vs);
            while (d && (de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.') continue;
                char *fp = path_join3(vdir, de->d_name, NULL);
                if (fp && stat(fp, &st) == 0)
                    stats_text_printf(&t, "%s:%lld.%09ld:%lld,", de->d_name, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                                      (long long)st.st_size);
                free(fp);
            }
            if (d) closedir(d);
            free(vdir);
        }
        free(vers);
    }
    free(mdir);
    if (t.oom) {
        free(t.d);
        return NULL;
    }
    if (!t.d) return strdup("");
    return t.d;
}

/* Loads the versions of `name` chosen by its policy into a new entry list (no lock held). Fails only when no
 * version could be loaded; failed versions are entries with reasons. */
static int load_versions(repo *r, const char *name, repo_entry **out, size_t *out_n, serve_error *e) {
    *out = NULL;
    *out_n = 0;
    char *mdir = path_join3(r->dir, name, NULL);
    if (!mdir) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    model_config cfg;
    int64_t *vers = NULL;
    size_t nv = 0;
    int rc = -1;
    if (read_config(mdir, name, !r->opt.disable_auto_complete, &cfg, e) != 0) goto done;
    if (cfg.ignored) /* once per load or reload of the model, not per version */
        log_warn("model '%s': config.pbtxt has Triton settings for parts cinfer does not have, ignored: %s", name, cfg.ignored);
    if (list_versions(mdir, &vers, &nv) != 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "cannot list the version folders of %s: %s", mdir, strerror(errno));
        goto done_cfg;
    }
    /* choose versions */
    int64_t *chosen = calloc(nv + cfg.version_policy.num_specific + 1, sizeof *chosen);
    size_t nc = 0;
    if (!chosen) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto done_cfg;
    }
    if (cfg.version_policy.kind == CONFIG_VERSIONS_SPECIFIC) {
        for (size_t i = 0; i < cfg.version_policy.num_specific; i++) chosen[nc++] = cfg.version_policy.versions[i];
    } else {
        for (size_t i = 0; i < nv; i++)
            if (cfg.version_policy.kind == CONFIG_VERSIONS_ALL || i < cfg.version_policy.num_versions) chosen[nc++] = vers[i];
    }
    qsort(chosen, nc, sizeof *chosen, cmp_asc); /* index and metadata list versions in ascending order */
    if (nc == 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "model '%s' has no version folders (expected %s/<version>/%s)", name, mdir,
                   cfg.default_model_filename ? cfg.default_model_filename : "model.onnx");
        free(chosen);
        goto done_cfg;
    }
    repo_entry *ents = calloc(nc, sizeof *ents);
    if (!ents) {
        free(chosen);
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto done_cfg;
    }
    size_t loaded = 0;
    char first_err[1024] = "";
    for (size_t i = 0; i < nc; i++) {
        repo_entry *en = &ents[i];
        en->version = chosen[i];
        snprintf(en->version_str, sizeof en->version_str, "%" PRId64, chosen[i]);
        en->state = "UNAVAILABLE";
        char *vdir = path_join3(mdir, en->version_str, NULL);
        char *file = vdir ? path_join3(vdir, cfg.default_model_filename ? cfg.default_model_filename : "model.onnx", NULL) : NULL;
        serve_error ve = {0};
        struct stat st;
        if (!file) {
            serve_fail(&ve, SERVE_INTERNAL, "out of memory");
        } else if (!is_dir(vdir)) {
            serve_fail(&ve, SERVE_BAD_REQUEST, "version %s of model '%s' is in the version policy but %s does not exist",
                       en->version_str, name, vdir);
        } else if (stat(file, &st) != 0) {
            serve_fail(&ve, SERVE_BAD_REQUEST, "model file %s not found", file);
        } else {
            model_config vcfg;
            if (read_config(mdir, name, !r->opt.disable_auto_complete, &vcfg, &ve) == 0 &&
                model_version_load(name, chosen[i], file, &vcfg, &r->opt, &en->mv, &ve) == 0) {
                en->state = "READY";
                loaded++;
                log_info("loaded model '%s' version %s (%zu instance%s on %s)", name, en->version_str, en->mv->num_instances,
                         en->mv->num_instances == 1 ? "" : "s", en->mv->instances[0].device);
            }
        }
        if (!en->mv) {
            en->reason = strdup(ve.msg);
            log_error("model '%s' version %s failed to load: %s", name, en->version_str, ve.msg);
            if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", ve.msg);
        }
        free(vdir);
        free(file);
    }
    free(chosen);
    *out = ents;
    *out_n = nc;
    if (loaded == 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "failed to load model '%s': %s", name, first_err);
        goto done_cfg;
    }
    rc = 0;
done_cfg:
    config_model_free(&cfg);
done:
    free(vers);
    free(mdir);
    return rc;
}

static void retire_entries(repo_entry *ents, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ents[i].mv) model_version_retire(ents[i].mv);
    entries_free_list(ents, n);
}

/* Loads or reloads `name` (ops lock held), at startup, on POST .../load and in poll mode alike. Every failure is
 * logged once with its reason: a version that fails by itself in load_versions (naming the version), anything
 * else here (the model's config, its version folders, an unknown model). */
static int load_model_locked(repo *r, const char *name, serve_error *e) {
    if (!valid_name(name)) {
        serve_fail(e, SERVE_BAD_REQUEST, "'%s' is not a valid model name", name);
        log_error("model '%s' failed to load: %s", name, e->msg);
        return -1;
    }
    char *mdir = path_join3(r->dir, name, NULL);
    int exists = mdir && is_dir(mdir);
    free(mdir);
    if (!exists) {
        serve_fail(e, SERVE_NOT_FOUND, "model '%s' is not in the model repository '%s'", name, r->dir);
        log_error("model '%s' failed to load: %s", name, e->msg);
        return -1;
    }
    char *sig = r->mode == REPO_CONTROL_POLL ? model_signature(r->dir, name) : NULL;
    repo_entry *ents;
    size_t n;
    int rc = load_versions(r, name, &ents, &n, e);
    const size_t n_tried = n; /* versions tried; 0 when the model failed before (config, version folders) */
    pthread_mutex_lock(&r->lock);
    repo_model *m = model_entry(r, name, 1);
    if (!m) {
        pthread_mutex_unlock(&r->lock);
        retire_entries(ents, n);
        free(sig);
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        log_error("model '%s' failed to load: %s", name, e->msg);
        return -1;
    }
    m->wanted = 1;
    free(m->signature);
    m->signature = sig;
    int had_ready = 0;
    for (size_t i = 0; i < m->num_entries; i++) had_ready |= m->entries[i].mv != NULL;
    repo_entry *old = NULL;
    size_t old_n = 0;
    if (rc == 0 || !had_ready) {
        /* swap in the new set (a failed reload keeps serving the versions already loaded) */
        old = m->entries;
        old_n = m->num_entries;
        m->entries = ents;
        m->num_entries = n;
        free(m->reason);
        m->reason = rc == 0 ? NULL : strdup(e->msg);
        ents = NULL;
        n = 0;
    }
    pthread_mutex_unlock(&r->lock);
    /* versions that were tried logged their own reasons (load_versions); a failure before them is logged here */
    const char *kept = had_ready ? "; the versions already loaded stay in service" : "";
    if (rc != 0 && !n_tried)
        log_error("model '%s' failed to %s: %s%s", name, had_ready ? "reload" : "load", e->msg, kept);
    else if (rc != 0 && had_ready)
        log_error("model '%s' failed to reload: no version loaded (the reasons are above)%s", name, kept);
    retire_entries(old, old_n);
    retire_entries(ents, n);
    return rc;
}

int repo_load_model(repo *r, const char *name, serve_error *e) {
    pthread_mutex_lock(&r->ops);
    int rc = load_model_locked(r, name, e);
    pthread_mutex_unlock(&r->ops);
    return rc;
}

static int unload_model_locked(repo *r, const char *name, const char *reason, serve_error *e) {
    pthread_mutex_lock(&r->lock);
    repo_model *m = model_entry(r, name, 0);
    if (!m) {
        pthread_mutex_unlock(&r->lock);
        return serve_fail(e, SERVE_NOT_FOUND, "model '%s' is not in the model repository", name);
    }
    repo_entry *old = m->entries;
    size_t old_n = m->num_entries;
    /* keep index entries, marked unloaded, without their versions */
    repo_entry *kept = old_n ? calloc(old_n, sizeof *kept) : NULL;
    for (size_t i = 0; kept && i < old_n; i++) {
        kept[i].version = old[i].version;
        memcpy(kept[i].version_str, old[i].version_str, sizeof kept[i].version_str);
        kept[i].state = "UNAVAILABLE";
        kept[i].reason = strdup(reason);
    }
    m->entries = kept;
    m->num_entries = kept ? old_n : 0;
    m->wanted = 0;
    free(m->reason);
    m->reason = strdup(reason);
    pthread_mutex_unlock(&r->lock);
    size_t retired = 0;
    for (size_t i = 0; i < old_n; i++) retired += old[i].mv != NULL;
    retire_entries(old, old_n);
    log_info("unloaded model '%s' (%zu version%s drained and freed)", name, retired, retired == 1 ? "" : "s");
    return 0;
}

int repo_unload_model(repo *r, const char *name, serve_error *e) {
    pthread_mutex_lock(&r->ops);
    int rc = unload_model_locked(r, name, "unloaded", e);
    pthread_mutex_unlock(&r->ops);
    return rc;
}

/* Names of the model folders, sorted. */
static int scan_folders(repo *r, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(r->dir);
    if (!d) return -1;
    struct dirent *de;
    size_t cap = 0;
    while ((de = readdir(d)) != NULL) {
        if (!valid_name(de->d_name)) continue;
        char *p = path_join3(r->dir, de->d_name, NULL);
        int dir = p && is_dir(p);
        free(p);
        if (!dir) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, cap * sizeof *nn);
            if (!nn) break;
            *names = nn;
        }
        if (!((*names)[*n] = strdup(de->d_name))) break;
        (*n)++;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++)
        for (size_t j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) > 0; j--) {
            char *t = (*names)[j];
            (*names)[j] = (*names)[j - 1];
            (*names)[j - 1] = t;
        }
    return 0;
}

int repo_load_startup(repo *r, const char *const *names, size_t n) {
    pthread_mutex_lock(&r->ops);
    char **folders;
    size_t nf;
    int failed = 0;
    if (scan_folders(r, &folders, &nf) != 0) {
        log_error("cannot read the model repository '%s': %s", r->dir, strerror(errno));
        nf = 0;
        folders = NULL;
    }
    int all = r->mode != REPO_CONTROL_EXPLICIT;
    for (size_t i = 0; i < n; i++) all |= !strcmp(names[i], "*");
    for (size_t i = 0; i < nf; i++) {
        int want = all;
        for (size_t k = 0; k < n && !want; k++) want = !strcmp(names[k], folders[i]);
        if (want) {
            serve_error e = {0};
            if (load_model_locked(r, folders[i], &e) != 0) failed++;
        } else {
            pthread_mutex_lock(&r->lock);
            repo_model *m = model_entry(r, folders[i], 1);
            if (m && !m->reason) m->reason = strdup("not loaded (model control mode explicit: POST /v2/repository/models/<name>/load)");
            pthread_mutex_unlock(&r->lock);
        }
    }
    for (size_t k = 0; k < n; k++) {
        if (!strcmp(names[k], "*")) continue;
        int found = 0;
        for (size_t i = 0; i < nf; i++) found |= !strcmp(names[k], folders[i]);
        if (!found) {
            log_error("--load-model %s: no such model folder in '%s'", names[k], r->dir);
            failed++;
        }
    }
    for (size_t i = 0; i < nf; i++) free(folders[i]);
    free(folders);
    pthread_mutex_lock(&r->lock);
    r->started = 1;
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_unlock(&r->ops);
    return failed;
}

void repo_poll(repo *r) {
    pthread_mutex_lock(&r->ops);
    char **folders;
    size_t nf;
    if (scan_folders(r, &folders, &nf) != 0) {
        pthread_mutex_unlock(&r->ops);
        return;
    }
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->num_models; i++) r->models[i]->present = 0;
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < nf; i++) {
        char *sig = model_signature(r->dir, folders[i]);
        pthread_mutex_lock(&r->lock);
        repo_model *m = model_entry(r, folders[i], 0);
        int changed = !m || !m->signature || !sig || strcmp(m->signature, sig) != 0;
        if (m) m->present = 1;
        pthread_mutex_unlock(&r->lock);
        free(sig);
        if (changed) {
            log_info("poll: model '%s' is new or changed; loading", folders[i]);
            serve_error e = {0};
            load_model_locked(r, folders[i], &e);
            pthread_mutex_lock(&r->lock);
            m = model_entry(r, folders[i], 0);
            if (m) m->present = 1;
            pthread_mutex_unlock(&r->lock);
        }
    }
    for (size_t i = 0;; i++) {
        pthread_mutex_lock(&r->lock);
        if (i >= r->num_models) {
            pthread_mutex_unlock(&r->lock);
            break;
        }
        repo_model *m = r->models[i];
        int gone = !m->present && m->wanted;
        char *name = gone ? strdup(m->name) : NULL;
        pthread_mutex_unlock(&r->lock);
        if (name) {
            log_info("poll: model folder '%s' was removed; unloading", name);
            serve_error e = {0};
            unload_model_locked(r, name, "removed from the repository", &e);
            free(name);
        }
    }
    for (size_t i = 0; i < nf; i++) free(folders[i]);
    free(folders);
    pthread_mutex_unlock(&r->ops);
}

int repo_acquire(repo *r, const char *name, const char *version, model_version **out, serve_error *e) {
    *out = NULL;
    int64_t v = -1;
    if (version && version[0] && parse_version(version, &v) != 0)
        return serve_fail(e, SERVE_BAD_REQUEST, "version '%s' of model '%s' is not a version number", version, name);
    pthread_mutex_lock(&r->lock);
    repo_model *m = model_entry(r, name, 0);
    int rc = 0;
    if (!m) {
        rc = serve_fail(e, SERVE_NOT_FOUND, "unknown model: '%s' is not in the model repository", name);
        goto done;
    }
    repo_entry *best = NULL;
    for (size_t i = 0; i < m->num_entries; i++) {
        repo_entry *en = &m->entries[i];
        if (v >= 0 ? en->version == v : (en->mv && (!best || en->version > best->version))) {
            best = en;
            if (v >= 0) break;
        }
    }
    if (!best) {
        if (v >= 0) rc = serve_fail(e, SERVE_NOT_FOUND, "model '%s' has no version %" PRId64 " loaded", name, v);
        else rc = serve_fail(e, SERVE_UNAVAILABLE, "model '%s' is not ready: %s", name, m->reason ? m->reason : "no version is loaded");
        goto done;
    }
    if (!best->mv) {
        rc = serve_fail(e, SERVE_UNAVAILABLE, "model '%s' version %s is not ready: %s", name, best->version_str,
                        best->reason ? best->reason : "unavailable");
        goto done;
    }
    model_version_ref(best->mv);
    *out = best->mv;
done:
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int repo_ready(repo *r, int strict) {
    pthread_mutex_lock(&r->lock);
    int ready = r->started;
    for (size_t i = 0; ready && strict && i < r->num_models; i++) {
        repo_model *m = r->models[i];
        if (!m->wanted) continue;
        int any = 0;
        for (size_t k = 0; k < m->num_entries; k++) any |= m->entries[k].mv != NULL;
        ready = any;
    }
    pthread_mutex_unlock(&r->lock);
    return ready;
}

json_t *repo_index_json(repo *r, int ready_only) {
    json_t *a = json_array();
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->num_models; i++) {
        repo_model *m = r->models[i];
        if (m->num_entries == 0) {
            if (!ready_only)
                json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:s}", "name", m->name, "version", "", "state", "UNAVAILABLE",
                                                   "reason", m->reason ? m->reason : ""));
            continue;
        }
        for (size_t k = 0; k < m->num_entries; k++) {
            repo_entry *en = &m->entries[k];
            /* a loaded version whose device failed (sticky CUDA error) is UNAVAILABLE until the restart, its reason
             * the 503 its requests get (docs/resilience.md) */
            serve_error dead = {0};
            int failed = en->mv && model_version_check_devices(en->mv) && model_version_unavailable(en->mv, &dead);
            if (ready_only && (!en->mv || failed)) continue;
            json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:s}", "name", m->name, "version", en->version_str, "state",
                                               failed ? "UNAVAILABLE" : en->state, "reason",
                                               failed ? dead.msg : en->reason ? en->reason : ""));
        }
    }
    pthread_mutex_unlock(&r->lock);
    return a;
}

json_t *repo_stats_json(repo *r, const char *name, const char *version, serve_error *e) {
    int64_t v = -1;
    if (name && version && version[0] && parse_version(version, &v) != 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "version '%s' of model '%s' is not a version number", version, name);
        return NULL;
    }
    json_t *a = json_array();
    int found_model = 0, found_version = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->num_models; i++) {
        repo_model *m = r->models[i];
        if (name && strcmp(m->name, name) != 0) continue;
        found_model = 1;
        for (size_t k = 0; k < m->num_entries; k++) {
            repo_entry *en = &m->entries[k];
            if (!en->mv || (v >= 0 && en->version != v)) continue;
            found_version = 1;
            json_array_append_new(a, model_version_stats_json(en->mv));
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (name && !found_model) {
        json_decref(a);
        serve_fail(e, SERVE_NOT_FOUND, "unknown model: '%s' is not in the model repository", name);
        return NULL;
    }
    if (name && !found_version) {
        json_decref(a);
        if (v >= 0) serve_fail(e, SERVE_NOT_FOUND, "model '%s' has no version %" PRId64 " loaded", name, v);
        else serve_fail(e, SERVE_UNAVAILABLE, "model '%s' is not ready: no version is loaded", name);
        return NULL;
    }
    return json_pack("{s:o}", "model_stats", a);
}

void repo_foreach_version(repo *r, void (*fn)(void *ctx, model_version *mv), void *ctx) {
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->num_models; i++)
        for (size_t k = 0; k < r->models[i]->num_entries; k++)
            if (r->models[i]->entries[k].mv) fn(ctx, r->models[i]->entries[k].mv);
    pthread_mutex_unlock(&r->lock);
}

void repo_retire_all(repo *r) {
    if (!r) return;
    pthread_mutex_lock(&r->ops);
    for (size_t i = 0;; i++) {
        pthread_mutex_lock(&r->lock);
        if (i >= r->num_models) {
            pthread_mutex_unlock(&r->lock);
            break;
        }
        repo_model *m = r->models[i];
        repo_entry *ents = m->entries;
        size_t n = m->num_entries;
        m->entries = NULL;
        m->num_entries = 0;
        m->wanted = 0;
        free(m->reason);
        m->reason = strdup("the server is shutting down");
        pthread_mutex_unlock(&r->lock);
        retire_entries(ents, n);
    }
    pthread_mutex_unlock(&r->ops);
}

void repo_free(repo *r) {
    if (!r) return;
    repo_retire_all(r);
    for (size_t i = 0; i < r->num_models; i++) {
        free(r->models[i]->name);
        free(r->models[i]->reason);
        free(r->models[i]->signature);
        free(r->models[i]);
    }
    free(r->models);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->ops);
    free(r->dir);
    free(r);
}
