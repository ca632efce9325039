/* cinfer-server: the KServe v2 HTTP inference server. Parses flags, blocks SIGINT/SIGTERM in every thread and
 * waits for them in main (driving repository polls in poll mode), then stops gracefully and exits 0. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cinfer/cinfer.h"
#include "log.h"
#include "server.h"

static const char USAGE[] =
    "usage: cinfer-server --model-repository DIR [options]\n"
    "\n"
    "Serves the ONNX models of a Triton-layout model repository over the KServe v2 HTTP protocol\n"
    "(<DIR>/<model>/config.pbtxt, <DIR>/<model>/<version>/model.onnx; config.pbtxt is optional).\n"
    "\n"
    "options:\n"
    "  --model-repository DIR        the model repository folder (required)\n"
    "  --host ADDR                   address to listen on, IPv4 or IPv6 literal (default 127.0.0.1)\n"
    "  --http-port N                 KServe v2 HTTP port (default 8000)\n"
    "  --metrics-port N              Prometheus metrics port, GET /metrics; 0 disables (default 8002)\n"
    "  --model-control-mode MODE     none: load every model at start, no load/unload API (default)\n"
    "                                poll: like none, and rescan the repository every --repository-poll-secs\n"
    "                                explicit: load only --load-model models; load/unload through the API\n"
    "  --load-model NAME             explicit mode: load NAME at start (repeatable; '*' loads all)\n"
    "  --repository-poll-secs N      poll mode: seconds between rescans (default 15)\n"
    "  --device DEV                  device of instances whose instance_group says KIND_AUTO or nothing:\n"
    "                                auto (one instance per visible GPU, the CPU when there is none; default),\n"
    "                                cpu, cuda (every visible GPU) or cuda:N\n"
    "  --threads N                   engine CPU threads per model instance (default: the engine's, all cores)\n"
    "  --http-threads N              HTTP thread pool size (default 4)\n"
    "  --max-input-bytes N           request body limit in bytes, after decompression (default 67108864 = 64 MiB)\n"
    "  --strict-readiness true|false true: /v2/health/ready only when every model is ready (default true);\n"
    "                                false: ready once start-up loading is done, even if a model failed\n"
    "  --default-max-batch-size N    max_batch_size given to models without config whose inputs and outputs all\n"
    "                                have a dynamic first dim (default 4; 0 = never batch them)\n"
    "  --exit-timeout-secs N         on SIGTERM/SIGINT, wait at most N s for queued and running requests (default 30)\n"
    "  --log-format text|json        log line format on stderr (default text)\n"
    "  --log-verbose                 also log debug lines\n"
    "  --version                     print the version and exit\n"
    "  --help                        print this help and exit\n"
    "\n"
    "exit status: 0 after a graceful stop, 1 when the server cannot start, 2 for bad flags.\n";

static int bad_flag(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "cinfer-server: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\nrun 'cinfer-server --help' for the list of flags\n");
    return 2;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !*v || *end || x < lo || x > hi) {
        char range[64];
        snprintf(range, sizeof range, "an integer from %ld to %ld", lo, hi);
        return bad_flag("%s needs %s", flag, range) ? -1 : -1;
    }
    *out = x;
    return 0;
}

static atomic_int stopped; /* set once the graceful stop is complete: the watchdog then stands down */

static void *watchdog(void *arg) {
    int secs = (int)(intptr_t)arg;
    struct timespec ts = {secs, 0};
    nanosleep(&ts, NULL);
    if (atomic_load(&stopped)) return NULL;
    log_error("shutdown did not finish within %d s (--exit-timeout-secs); exiting with requests unfinished", secs);
    _exit(1);
    return NULL;
}

int main(int argc, char **argv) {
    server_options o = {.host = "127.0.0.1", .http_port = 8000, .metrics_port = 8002, .control_mode = REPO_CONTROL_NONE,
                        .poll_secs = 15, .device = "auto", .http_threads = 4, .max_input_bytes = 64u << 20,
                        .strict_readiness = 1, .default_max_batch = 4, .shutdown_timeout_s = 30};
    const char **loads = calloc((size_t)argc + 1, sizeof *loads);
    size_t nloads = 0;
    int json_log = 0, verbose = 0;
    if (!loads) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            free(loads);
            return 0;
        }
        if (!strcmp(a, "--version")) {
            printf("cinfer-server %s\n", cinfer_version());
            free(loads);
            return 0;
        }
        if (!strcmp(a, "--log-verbose")) {
            verbose = 1;
            continue;
        }
        static const char *const with_value[] = {"--model-repository", "--host", "--http-port", "--metrics-port",
                                                 "--model-control-mode", "--load-model", "--repository-poll-secs", "--device",
                                                 "--threads", "--http-threads", "--max-input-bytes", "--strict-readiness",
                                                 "--default-max-batch-size", "--exit-timeout-secs", "--log-format", NULL};
        int known = 0;
        for (const char *const *w = with_value; *w; w++) known |= !strcmp(*w, a);
        if (!known) {
            free(loads);
            return bad_flag("unknown flag '%s'%s", a, a[0] == '-' ? "" : " (flags start with --)");
        }
        if (i + 1 >= argc) {
            free(loads);
            return bad_flag("%s needs a value%s", a, "");
        }
        const char *v = argv[++i];
        long x;
        int rc = 0;
        if (!strcmp(a, "--model-repository")) o.model_repository = v;
        else if (!strcmp(a, "--host")) o.host = v;
        else if (!strcmp(a, "--http-port")) rc = parse_int(a, v, 0, 65535, &x), o.http_port = (int)x;
        else if (!strcmp(a, "--metrics-port")) rc = parse_int(a, v, 0, 65535, &x), o.metrics_port = (int)x;
        else if (!strcmp(a, "--repository-poll-secs")) rc = parse_int(a, v, 1, 86400, &x), o.poll_secs = (int)x;
        else if (!strcmp(a, "--threads")) rc = parse_int(a, v, 0, 1024, &x), o.threads = (int)x;
        else if (!strcmp(a, "--http-threads")) rc = parse_int(a, v, 1, 256, &x), o.http_threads = (int)x;
        else if (!strcmp(a, "--max-input-bytes")) rc = parse_int(a, v, 1024, (long)1 << 40, &x), o.max_input_bytes = (size_t)x;
        else if (!strcmp(a, "--default-max-batch-size")) rc = parse_int(a, v, 0, 1 << 20, &x), o.default_max_batch = (int)x;
        else if (!strcmp(a, "--exit-timeout-secs")) rc = parse_int(a, v, 1, 86400, &x), o.shutdown_timeout_s = (int)x;
        else if (!strcmp(a, "--load-model")) loads[nloads++] = v;
        else if (!strcmp(a, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda") && strncmp(v, "cuda:", 5))
                rc = bad_flag("--device '%s': use cpu, cuda or cuda:N, or auto%s", v, "");
            o.device = v;
        } else if (!strcmp(a, "--strict-readiness")) {
            if (!strcmp(v, "true")) o.strict_readiness = 1;
            else if (!strcmp(v, "false")) o.strict_readiness = 0;
            else rc = bad_flag("--strict-readiness '%s': use true or false%s", v, "");
        } else if (!strcmp(a, "--log-format")) {
            if (!strcmp(v, "json")) json_log = 1;
            else if (strcmp(v, "text")) rc = bad_flag("--log-format '%s': use text or json%s", v, "");
        } else if (!strcmp(a, "--model-control-mode")) {
            if (!strcmp(v, "none")) o.control_mode = REPO_CONTROL_NONE;
            else if (!strcmp(v, "poll")) o.control_mode = REPO_CONTROL_POLL;
            else if (!strcmp(v, "explicit")) o.control_mode = REPO_CONTROL_EXPLICIT;
            else rc = bad_flag("--model-control-mode '%s': use none, poll or explicit%s", v, "");
        }
        if (rc) {
            free(loads);
            return 2;
        }
    }
    if (!o.model_repository) {
        free(loads);
        return bad_flag("--model-repository DIR is required%s%s", "", "");
    }
    if (nloads && o.control_mode != REPO_CONTROL_EXPLICIT) {
        free(loads);
        return bad_flag("--load-model needs --model-control-mode explicit%s%s", "", "");
    }
    if (o.http_port && o.http_port == o.metrics_port) {
        free(loads);
        return bad_flag("--http-port and --metrics-port are both %s%s", argv[0] ? "the same port" : "", "");
    }
    o.load_models = loads;
    o.num_load_models = nloads;
    log_set_format(json_log);
    if (verbose) log_set_min_level(LOG_DEBUG);

    /* every thread inherits this mask: the signals are only ever taken by sigwait below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    server *s;
    serve_error e = {0};
    if (server_start(&o, &s, &e) != 0) {
        log_error("cannot start: %s", e.msg);
        free(loads);
        return 1;
    }
    int sig = 0;
    while (!sig) {
        if (o.control_mode == REPO_CONTROL_POLL) {
            struct timespec ts = {o.poll_secs, 0};
            sig = sigtimedwait(&set, NULL, &ts);
            if (sig < 0) {
                sig = 0;
                if (errno == EAGAIN) repo_poll(s->repo);
            }
        } else if (sigwait(&set, &sig) != 0) {
            sig = 0;
        }
    }
    log_info("received %s: stopping gracefully", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pthread_t wd;
    if (pthread_create(&wd, NULL, watchdog, (void *)(intptr_t)o.shutdown_timeout_s) == 0) pthread_detach(wd);
    server_stop(s);
    atomic_store(&stopped, 1);
    free(loads);
    return 0;
}
