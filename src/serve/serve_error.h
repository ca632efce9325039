/* Errors inside the server: an HTTP status (Triton's mapping) plus a message naming the model, input or field.
 * The one convention of src/serve/: a fallible function takes `serve_error *e` last and returns 0, or -1 with the
 * status and message set where the error was found (serve_fail); callers pass e on or answer with it, never
 * rewrap its text into another buffer. Engine calls report through cinfer_last_error(), turned into a serve_error
 * at the call. */
#ifndef SERVE_ERROR_H
#define SERVE_ERROR_H

#include <stdarg.h>
#include <stdio.h>

/* HTTP statuses used for KServe errors (Triton's mapping of its error codes). */
enum {
    SERVE_BAD_REQUEST = 400,  /* invalid argument */
    SERVE_NOT_FOUND = 404,    /* unknown model, version or route */
    SERVE_BAD_METHOD = 405,   /* known route, wrong method */
    SERVE_TOO_MANY_REQUESTS = 429, /* queue full, for models whose config asks for 429 instead of 503 */
    SERVE_INTERNAL = 500,     /* a bug or an engine failure */
    SERVE_UNSUPPORTED = 501,  /* valid, but not implemented by cinfer */
    SERVE_UNAVAILABLE = 503,  /* not ready, queue full, queue timeout, shutting down */
};

typedef struct serve_error {
    int code;       /* HTTP status; 0 while no error was set */
    char msg[1024]; /* human text; truncated on purpose when longer */
} serve_error;

/* Records an error in `e` (may be NULL) and returns -1, so callers write `return serve_fail(e, 400, ...)`. */
static inline int serve_fail(serve_error *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int serve_fail(serve_error *e, int code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return -1;
}

#endif
