/* Bearer tokens for the KServe listener. Routes fall into three scopes: health (open, so orchestrator probes
 * need no secret), inference (everything a client of a model uses) and control (what changes the server: the
 * repository API and shared-memory registration). Tokens come from a file or an environment variable; the
 * comparison touches every byte of the expected token whatever the input, so its timing says nothing about
 * how much of a guess was right. */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TOKEN_MIN 16
#define TOKEN_MAX 4096

/* Copies the n-th '/'-separated non-empty segment of url (the decoded path: no query string, and a '?' in it came
 * from %3F, so it is a character like any other, as for the routing) into out; 0 when found. */
static int url_segment(const char *url, int n, char *out, size_t cap) {
    const char *p = url;
    for (int k = 0;; k++) {
        while (*p == '/') p++;
        if (!*p) return -1;
        size_t len = strcspn(p, "/");
        if (k == n) {
            if (len >= cap) len = cap - 1;
            memcpy(out, p, len);
            out[len] = 0;
            return 0;
        }
        p += len;
    }
}

auth_scope auth_route_scope(const char *url) {
    char s0[8], s1[32];
    if (url_segment(url, 0, s0, sizeof s0) != 0 || strcmp(s0, "v2") != 0) return AUTH_INFERENCE;
    if (url_segment(url, 1, s1, sizeof s1) != 0) return AUTH_INFERENCE; /* GET /v2: server metadata */
    if (!strcmp(s1, "health")) return AUTH_OPEN;
    if (!strcmp(s1, "repository") || !strcmp(s1, "systemsharedmemory") || !strcmp(s1, "cudasharedmemory"))
        return AUTH_CONTROL;
    return AUTH_INFERENCE;
}

int auth_equal(const char *expected, const char *given) {
    size_t el = strlen(expected), gl = strlen(given);
    volatile unsigned char d = (unsigned char)(el != gl);
    for (size_t i = 0; i < el; i++) {
        unsigned char g = i < gl ? (unsigned char)given[i] : 0;
        d |= (unsigned char)expected[i] ^ g;
    }
    return d == 0;
}

static int check_token(const char *tok, const char *source, serve_error *e) {
    size_t n = strlen(tok);
    if (n < TOKEN_MIN || n > TOKEN_MAX)
        return serve_fail(e, 400, "the token from %s has %zu characters; it needs %d to %d (use a random one, e.g. "
                                  "'openssl rand -hex 32')", source, n, TOKEN_MIN, TOKEN_MAX);
    for (size_t i = 0; i < n; i++)
        if (tok[i] <= ' ' || tok[i] > '~')
            return serve_fail(e, 400, "the token from %s has a space or a non-printable character at offset %zu "
                                      "(printable ASCII only)", source, i);
    return 0;
}

int auth_load_token(const char *file, const char *env, char **out, serve_error *e) {
    *out = NULL;
    const char *ev = env ? getenv(env) : NULL;
    if (ev && !*ev) ev = NULL;
    if (file && ev) return serve_fail(e, 400, "a token is given both by a file (%s) and by the environment variable %s: "
                                              "give one", file, env);
    char source[512];
    char *tok = NULL;
    if (ev) {
        snprintf(source, sizeof source, "environment variable %s", env);
        tok = strdup(ev);
        if (!tok) return serve_fail(e, 500, "out of memory");
    } else if (file) {
        snprintf(source, sizeof source, "file %s", file);
        FILE *f = fopen(file, "rb");
        if (!f) return serve_fail(e, 400, "cannot read the token file %s: %s", file, strerror(errno));
        tok = calloc(1, TOKEN_MAX + 2);
        size_t n = tok ? fread(tok, 1, TOKEN_MAX + 1, f) : 0;
        fclose(f);
        if (!tok) return serve_fail(e, 500, "out of memory");
        while (n && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' ' || tok[n - 1] == '\t')) n--;
        tok[n] = 0;
        if (memchr(tok, 0, n)) { /* a NUL inside: strlen would cut the token short */
            free(tok);
            return serve_fail(e, 400, "the token file %s contains a NUL byte", file);
        }
    } else {
        return 0;
    }
    if (check_token(tok, source, e) != 0) {
        free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}

/* The token of an "Authorization: Bearer <token>" header (scheme case-insensitive), or NULL. */
static const char *bearer(const char *h) {
    if (!h) return NULL;
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    return h;
}

int auth_check(const auth_tokens *t, auth_scope scope, const char *authorization, const char **challenge, serve_error *e) {
    const char *need1 = NULL, *need2 = NULL; /* either is accepted */
    if (scope == AUTH_CONTROL) need1 = t->control ? t->control : t->inference;
    else if (scope == AUTH_INFERENCE) need1 = t->inference ? t->inference : NULL, need2 = t->inference ? t->control : NULL;
    if (!need1 && !need2) return 0;
    const char *given = bearer(authorization);
    /* both comparisons always run, so the answer's timing does not say which token was close */
    int ok = given ? auth_equal(need1 ? need1 : "", given) : 0;
    ok |= given && need2 ? auth_equal(need2, given) : 0;
    if (ok && *given) return 0;
    const char *what = scope == AUTH_CONTROL ? "the control token" : "the inference token (or the control token)";
    if (!given) {
        *challenge = "Bearer realm=\"cinfer\"";
        return serve_fail(e, 401, "this endpoint needs %s: send 'Authorization: Bearer <token>'%s", what,
                          authorization ? " (the Authorization header is not a Bearer token)" : "");
    }
    *challenge = "Bearer realm=\"cinfer\", error=\"invalid_token\"";
    return serve_fail(e, 401, "the bearer token is not valid for this endpoint (it needs %s)", what);
}

void auth_tokens_free(auth_tokens *t) {
    if (!t) return;
    free(t->control);
    free(t->inference);
    t->control = t->inference = NULL;
}
