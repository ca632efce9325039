/* Thread-local last-error text behind cinfer_last_error(), and status names. */
#include "core/status.h"

#include <stdarg.h>
#include <string.h>

#define ERROR_TEXT_MAX 4096

static _Thread_local char last_error[ERROR_TEXT_MAX];

cinfer_status core_error_v(cinfer_status code, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return code;
}

cinfer_status core_error(cinfer_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    core_error_v(code, fmt, ap);
    va_end(ap);
    return code;
}

cinfer_status core_error_prefix_v(cinfer_status code, const char *fmt, va_list ap) {
    char prefix[1024], old[ERROR_TEXT_MAX];
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s%s", prefix, old);
    return code;
}

cinfer_status core_error_prefix(cinfer_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    core_error_prefix_v(code, fmt, ap);
    va_end(ap);
    return code;
}

void core_clear_error(void) { last_error[0] = '\0'; }

const char *cinfer_last_error(void) { return last_error; }

const char *cinfer_status_name(cinfer_status s) {
    switch (s) {
    case CINFER_OK: return "CINFER_OK";
    case CINFER_ERR_INVALID_ARGUMENT: return "CINFER_ERR_INVALID_ARGUMENT";
    case CINFER_ERR_INVALID_MODEL: return "CINFER_ERR_INVALID_MODEL";
    case CINFER_ERR_UNSUPPORTED: return "CINFER_ERR_UNSUPPORTED";
    case CINFER_ERR_OUT_OF_MEMORY: return "CINFER_ERR_OUT_OF_MEMORY";
    case CINFER_ERR_IO: return "CINFER_ERR_IO";
    case CINFER_ERR_RUNTIME: return "CINFER_ERR_RUNTIME";
    case CINFER_ERR_NOT_FOUND: return "CINFER_ERR_NOT_FOUND";
    }
    return "CINFER_ERR_UNKNOWN";
}

const char *cinfer_version(void) {
#define CINFER_STR2(x) #x
#define CINFER_STR(x) CINFER_STR2(x)
    return CINFER_STR(CINFER_VERSION_MAJOR) "." CINFER_STR(CINFER_VERSION_MINOR) "." CINFER_STR(CINFER_VERSION_PATCH);
}
