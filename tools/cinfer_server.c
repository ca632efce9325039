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
#include "auth.h"
#include "log.h"
#include "model_queue.h"
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
    "  --max-tensor-elements N       element limit of one input tensor of an infer request (default 67108864)\n"
    "  --max-request-elements N      element limit summed over an infer request's inputs (default 134217728)\n"
    "  --control-token-file PATH     bearer token for /v2/repository/* and /v2/*sharedmemory/* (or the environment\n"
    "                                variable CINFER_CONTROL_TOKEN); without one these endpoints are open\n"
    "  --inference-token-file PATH   bearer token for inference, model metadata, config and statistics (or\n"
    "                                CINFER_INFERENCE_TOKEN); health endpoints and /metrics stay open (docs/security.md)\n"
    "  --strict-readiness true|false true: /v2/health/ready only when every model is ready (default true);\n"
    "                                false: ready once start-up loading is done, even if a model failed\n"
    "  --default-max-batch-size N    max_batch_size given to models without config whose inputs and outputs all\n"
    "                                have a dynamic first dim (default 4; 0 = never batch them)\n"
    "  --probe-max-batch             at load, find for each GPU instance of a batching model the largest batch that\n"
    "                                fits with 20% headroom (binary search over the engine's max_batch check); it is\n"
    "                                logged, shown in the statistics and caps the instance's batches (docs/resilience.md)\n"
    "  --precision P                 engine precision of models whose config has no cinfer_precision parameter:\n"
    "                                fp32 (default; TF32 off), tf32, fp16 or bf16 (weights converted once at load;\n"
    "                                tensors keep the model's dtypes on the wire)\n"
    "  --cuda-memory-limit X         cap every visible GPU's caching allocator: bytes (X > 1) or a fraction of its\n"
    "                                memory (0 < X <= 1), e.g. to test OOM adaptation (docs/resilience.md)\n"
    "  --pinned-output-memory BYTES  most page-locked memory the outputs of responses in flight may hold (a GPU lane's\n"
    "                                outputs go there by DMA; past it they are malloc'd); default an eighth of the\n"
    "                                host's memory, at most 4 GiB; 0 = never\n"
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
                        .strict_readiness = 1, .default_max_batch = 4, .shutdown_timeout_s = 30,
                        .max_tensor_elements = (int64_t)1 << 26, .max_request_elements = (int64_t)1 << 27};
    const char *control_token_file = NULL, *inference_token_file = NULL;
    const char **loads = calloc((size_t)argc + 1, sizeof *loads);
    size_t nloads = 0;
    int json_log = 0, verbose = 0;
    double cuda_limit = 0; /* --cuda-memory-limit: 0 = none */
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
        if (!strcmp(a, "--probe-max-batch")) {
            o.probe_max_batch = 1;
            continue;
        }
        if (!strcmp(a, "--control-token") || !strcmp(a, "--inference-token") || !strncmp(a, "--control-token=", 16) ||
            !strncmp(a, "--inference-token=", 18)) {
            free(loads);
            return bad_flag("%s: tokens are never taken on the command line, where ps shows them; use %s-file PATH or "
                            "the environment variable CINFER_CONTROL_TOKEN / CINFER_INFERENCE_TOKEN", a,
                            strncmp(a, "--control", 9) ? "--inference-token" : "--control-token");
        }
        static const char *const with_value[] = {"--model-repository", "--host", "--http-port", "--metrics-port",
                                                 "--model-control-mode", "--load-model", "--repository-poll-secs", "--device",
                                                 "--precision", "--threads", "--http-threads", "--max-input-bytes", "--strict-readiness",
                                                 "--default-max-batch-size", "--exit-timeout-secs", "--log-format",
                                                 "--max-tensor-elements", "--max-request-elements", "--control-token-file",
                                                 "--inference-token-file", "--cuda-memory-limit", "--pinned-output-memory", NULL};
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
        else if (!strcmp(a, "--max-tensor-elements")) rc = parse_int(a, v, 1, (long)1 << 40, &x), o.max_tensor_elements = x;
        else if (!strcmp(a, "--max-request-elements")) rc = parse_int(a, v, 1, (long)1 << 40, &x), o.max_request_elements = x;
        else if (!strcmp(a, "--control-token-file")) control_token_file = v;
        else if (!strcmp(a, "--inference-token-file")) inference_token_file = v;
        else if (!strcmp(a, "--load-model")) loads[nloads++] = v;
        else if (!strcmp(a, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "tf32") && strcmp(v, "fp16") && strcmp(v, "bf16"))
                rc = bad_flag("--precision '%s': use fp32, tf32, fp16 or bf16%s", v, "");
            o.precision = v;
        }
        else if (!strcmp(a, "--cuda-memory-limit")) {
            char *end;
            errno = 0;
            cuda_limit = strtod(v, &end);
            if (errno || !*v || *end || !(cuda_limit > 0) || cuda_limit > 1e15)
                rc = bad_flag("--cuda-memory-limit '%s': give bytes (> 1) or a fraction of each GPU's memory (0 < X <= 1)%s", v, "");
        }
        else if (!strcmp(a, "--pinned-output-memory")) {
            char *end;
            errno = 0;
            unsigned long long bytes = strtoull(v, &end, 10);
            if (errno || !*v || *end || v[0] == '-') rc = bad_flag("--pinned-output-memory '%s': give bytes (0 = never)%s", v, "");
            else model_pinned_outputs_set_budget((size_t)bytes);
        }
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
    serve_error te = {0};
    if (auth_load_token(control_token_file, "CINFER_CONTROL_TOKEN", &o.tokens.control, &te) != 0 ||
        auth_load_token(inference_token_file, "CINFER_INFERENCE_TOKEN", &o.tokens.inference, &te) != 0) {
        log_error("cannot start: %s", te.msg);
        auth_tokens_free(&o.tokens);
        free(loads);
        return 2;
    }
    int loopback = !strcmp(o.host, "127.0.0.1") || !strcmp(o.host, "::1") || !strncmp(o.host, "127.", 4);
    if (!loopback && !o.tokens.control)
        log_warn("listening on %s without a control token: anyone who can reach the port can load and unload models and "
                 "map shared memory (see docs/security.md)", o.host);
    log_info("access control: control endpoints %s, inference endpoints %s", o.tokens.control ? "need the control token"
             : o.tokens.inference ? "need the inference token" : "open", o.tokens.inference ? "need a token" : "open");

    /* every thread inherits this mask: the signals are only ever taken by sigwait below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (cuda_limit > 0) { /* before any model loads, so every session on the GPUs plans against the cap */
        int ndev = 0;
        if (cinfer_cuda_device_count(&ndev) != CINFER_OK || ndev <= 0) {
            log_error("cannot start: --cuda-memory-limit needs a GPU: %s", ndev ? cinfer_last_error() : "none is visible");
            auth_tokens_free(&o.tokens);
            free(loads);
            return 1;
        }
        for (int d = 0; d < ndev; d++) {
            if (cinfer_cuda_set_memory_limit(d, cuda_limit > 1 ? (size_t)cuda_limit : 0, cuda_limit > 1 ? 0 : cuda_limit) !=
                CINFER_OK) {
                log_error("cannot start: --cuda-memory-limit on cuda:%d: %s", d, cinfer_last_error());
                auth_tokens_free(&o.tokens);
                free(loads);
                return 1;
            }
            log_info("cuda:%d: caching allocator capped at %s %g (--cuda-memory-limit)", d,
                     cuda_limit > 1 ? "bytes" : "fraction", cuda_limit);
        }
    }
    server *s;
    serve_error e = {0};
    if (server_start(&o, &s, &e) != 0) {
        log_error("cannot start: %s", e.msg);
        auth_tokens_free(&o.tokens);
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
    auth_tokens_free(&o.tokens);
    free(loads);
    return 0;
}
