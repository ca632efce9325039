/* The model repository: Triton's layout (<repo>/<model>/config.pbtxt, <repo>/<model>/<version>/model.onnx),
 * version policies, load / unload / reload (drain first), polling for changes, the index, and lookups that
 * hand out counted references to loaded versions. Thread-safe; loads and unloads are serialised. */
#ifndef SERVE_REPO_H
#define SERVE_REPO_H

#include <jansson.h>

#include "model_version.h"
#include "serve_error.h"
#include "stats.h"

typedef enum repo_control { REPO_CONTROL_NONE, REPO_CONTROL_POLL, REPO_CONTROL_EXPLICIT } repo_control;

typedef struct repo repo;

/* Opens the repository folder (it must exist). Nothing is loaded yet. */
int repo_create(const char *dir, repo_control mode, const model_load_options *opt, repo **out, serve_error *e);
/* Takes every version out of service and drains it (queued requests finish, then sessions are freed);
 * lookups fail from then on. For shutdown, while the HTTP threads still run. NULL is a no-op. */
void repo_retire_all(repo *r);
/* Frees the repository (retiring whatever is still loaded). No other thread may use it any more. NULL is a no-op. */
void repo_free(repo *r);

/* Loads every model folder (modes none and poll), or only `names` (explicit mode, "*" = all). A model that fails
 * is recorded as UNAVAILABLE with its reason and does not stop the others. Returns the number that failed. */
int repo_load_startup(repo *r, const char *const *names, size_t n);
/* Loads (or reloads) one model from its folder: new versions are loaded first, then swapped in, then the old
 * ones are drained and freed. Errors: 404 unknown folder, 400 load failure (with the reason). */
int repo_load_model(repo *r, const char *name, serve_error *e);
/* Drains and frees every version of `name`. Errors: 404 unknown, 400 not loaded. */
int repo_unload_model(repo *r, const char *name, serve_error *e);
/* Mode poll: rescans the folder; loads new or changed models, unloads removed ones. */
void repo_poll(repo *r);

/* A counted reference to the version `version` (NULL or "" = the highest ready one) of model `name`.
 * Errors: 404 unknown model or version, 400 malformed version, 503 not ready. Release with model_version_unref. */
int repo_acquire(repo *r, const char *name, const char *version, model_version **out, serve_error *e);
/* 1 when every model that should be loaded is READY (strict), or always once start-up is done (not strict). */
int repo_ready(repo *r, int strict);
repo_control repo_mode(const repo *r);

/* [{"name","version","state","reason"}]; ready_only keeps READY entries. A loaded version with an instance on a
 * failed device (model_version_check_devices) is UNAVAILABLE, its reason naming the device. New reference. */
json_t *repo_index_json(repo *r, int ready_only);
/* {"model_stats":[...]} for all models (name NULL) or one model (version NULL = all its versions). */
json_t *repo_stats_json(repo *r, const char *name, const char *version, serve_error *e);
/* Calls fn for every loaded version, in model then version order, under the repository's lock: fn must be quick
 * and must not call into the repository; it may take a reference (model_version_ref) to use the version later. */
void repo_foreach_version(repo *r, void (*fn)(void *ctx, model_version *mv), void *ctx);

#endif
