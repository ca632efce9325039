/* Optional bearer-token access control for the KServe listener: which token class each route needs, tokens read
 * from a file or an environment variable (never from the command line, where ps shows them), and the check of an
 * Authorization header in constant time. docs/security.md says which endpoints each token protects. */
#ifndef SERVE_AUTH_H
#define SERVE_AUTH_H

#include <stddef.h>

#include "serve_error.h"

/* What a route needs. OPEN routes (health) never ask for a token. */
typedef enum auth_scope { AUTH_OPEN, AUTH_INFERENCE, AUTH_CONTROL } auth_scope;

typedef struct auth_tokens {
    char *control;   /* repository index/load/unload, shared-memory registration; NULL = not configured */
    char *inference; /* inference, model metadata/config/ready, statistics, server metadata; NULL = not configured */
} auth_tokens;

/* The scope of a request to the KServe listener (method is not needed: a route's scope does not depend on it).
 * url is the decoded path, with or without a query string. */
auth_scope auth_route_scope(const char *url);

/* Reads one token from `file` (its whole content, trailing newlines and spaces dropped) or from the environment
 * variable `env` (either may be NULL; both set is an error naming them). *out is NULL when neither is set.
 * A token must be 16 to 4096 printable ASCII characters without spaces; errors name the source and the rule. */
int auth_load_token(const char *file, const char *env, char **out, serve_error *e);

/* Decides a request: 0 when allowed; otherwise -1 with a 401 error in `e` and *challenge set to the value of the
 * WWW-Authenticate header (RFC 6750: 'Bearer realm="cinfer"', with error="invalid_token" when a token was given).
 * Control routes take the control token, or the inference token when only that one is configured; inference
 * routes take either token. `authorization` is the request's Authorization header (NULL when absent). */
int auth_check(const auth_tokens *t, auth_scope scope, const char *authorization, const char **challenge, serve_error *e);

/* 1 when a and b are equal. Runs in time that depends only on the lengths, never on where they differ. */
int auth_equal(const char *expected, const char *given);

void auth_tokens_free(auth_tokens *t);

#endif
