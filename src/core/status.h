/* Error reporting inside cinfer: set a thread-local message where an error is found, return the code. */
#ifndef CINFER_CORE_STATUS_H
#define CINFER_CORE_STATUS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cinfer/cinfer.h"

/* Records `fmt` as this thread's last error and returns `code`, so callers can write
 * `return core_error(CINFER_ERR_INVALID_MODEL, "node '%s': ...", name);`. */
cinfer_status core_error(cinfer_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with more context ("model 'x': " + old message). */
cinfer_status core_error_prefix(cinfer_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same two with a va_list: the engine hands these to the CUDA module (backend/cuda_module.h), whose
 * core_error and core_error_prefix forward to them, so there is one last error per thread. */
cinfer_status core_error_v(cinfer_status code, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
cinfer_status core_error_prefix_v(cinfer_status code, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

void core_clear_error(void);

/* Invariant check: aborts with file and line. For bugs, never for bad input. */
#define CINFER_ASSERT(cond)                                                                              \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "cinfer: assertion failed: %s at %s:%d\n", #cond, __FILE__, __LINE__);       \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

/* Propagates a non-OK status. */
#define CINFER_TRY(expr)                                                                                 \
    do {                                                                                                 \
        cinfer_status try_status_ = (expr);                                                              \
        if (try_status_ != CINFER_OK) return try_status_;                                                \
    } while (0)

#endif
