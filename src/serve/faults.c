/* Test-only fault injection (see faults.h): parses CINFER_SERVE_FAULTS (or the file it names) before each
 * execution and decides whether that execution fails. Costs one getenv per execution when off. */
#include "faults.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int faults_enabled(void) {
    const char *v = getenv(FAULTS_ENV);
    return v && v[0];
}

int faults_engine_enabled(void) {
    const char *gate = getenv("CINFER_FAULT_INJECTION"), *a = getenv("CINFER_FAULT_ALLOC"), *c = getenv("CINFER_FAULT_COPY");
    return gate && !strcmp(gate, "1") && ((a && a[0]) || (c && c[0]));
}

/* The rules text: the variable itself, or the contents of the file after '@' (empty when it cannot be read). */
static void read_rules(char *buf, size_t n) {
    const char *v = getenv(FAULTS_ENV);
    buf[0] = 0;
    if (!v || !v[0]) return;
    if (v[0] != '@') {
        snprintf(buf, n, "%s", v);
        return;
    }
    FILE *f = fopen(v + 1, "rb");
    if (!f) return;
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = 0;
    fclose(f);
}

cinfer_status faults_check_run(const char *model, int64_t batch, model_request *const *reqs, size_t n, char *msg,
                               size_t msg_len, int *device_failed) {
    *device_failed = 0;
    if (!faults_enabled()) return CINFER_OK;
    char buf[4096];
    read_rules(buf, sizeof buf);
    char *save = NULL;
    for (char *rule = strtok_r(buf, ",; \t\r\n", &save); rule; rule = strtok_r(NULL, ",; \t\r\n", &save)) {
        char *eq = strchr(rule, '='), *colon = eq ? strrchr(eq + 1, ':') : NULL;
        if (!eq || !colon) continue;
        *eq = 0;
        *colon = 0;
        const char *kind = rule, *name = eq + 1, *arg = colon + 1;
        if (strcmp(name, model) != 0) continue;
        if (!strcmp(kind, "oom_above")) {
            long long limit = strtoll(arg, NULL, 10);
            if (batch > limit) {
                snprintf(msg, msg_len, "injected out of memory: a batch of %" PRId64 " is above %lld (%s rule oom_above=%s:%s)",
                         batch, limit, FAULTS_ENV, name, arg);
                return CINFER_ERR_OUT_OF_MEMORY;
            }
        } else if (!strcmp(kind, "run_error") || !strcmp(kind, "device_fail")) {
            int dev = kind[0] == 'd';
            for (size_t i = 0; i < n; i++)
                if (reqs[i]->id && !strcmp(reqs[i]->id, arg)) {
                    snprintf(msg, msg_len, "injected %s for request '%s' (%s rule %s=%s:%s)",
                             dev ? "device failure (as a sticky CUDA error)" : "kernel failure", arg, FAULTS_ENV, kind,
                             name, arg);
                    *device_failed = dev;
                    return CINFER_ERR_RUNTIME;
                }
        }
    }
    return CINFER_OK;
}
