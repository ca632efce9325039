/* cinfer-server: the KServe v2 HTTP inference server. Parses flags, blocks SIGINT/SIGTERM in every thread and
 * waits for them in main (driving repository polls in poll mode), then stops gracefully and exits 0. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
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
    "Flags take their value as '--flag VALUE' or '--flag=VALUE'; booleans are true|false (also 1|0, on|off, yes|no).\n"
    "\n"
    "options:\n"
    "  --model-repository DIR        the model repository folder (required; Triton's --model-store is an alias)\n"
    "  --host ADDR                   address to listen on, IPv4 or IPv6 literal (default 127.0.0.1;\n"
    "                                Triton's --http-address is an alias)\n"
    "  --http-port N                 KServe v2 HTTP port (default 8000)\n"
    "  --metrics-port N              Prometheus metrics port, GET /metrics; 0 disables (default 8002)\n"
    "  --allow-metrics BOOL          false: no metrics listener (the same as --metrics-port 0)\n"
    "  --model-control-mode MODE     none: load every model at start, no load/unload API (default)\n"
    "                                poll: like none, and rescan the repository every --repository-poll-secs\n"
    "                                explicit: load only --load-model models; load/unload through the API\n"
    "  --load-model NAME             explicit mode: load NAME at start (repeatable; '*' loads all)\n"
    "  --repository-poll-secs N      poll mode: seconds between rescans (default 15)\n"
    "  --disable-auto-complete-config  every model needs a config.pbtxt that lists its inputs and outputs; nothing is\n"
    "                                completed from the ONNX file (no batching is switched on for a model that does\n"
    "                                not ask for it). --strict-model-config=true, deprecated in Triton, is the same\n"
    "  --exit-on-error BOOL          true: exit 1 when a model fails to load at start-up (default false: the model is\n"
    "                                reported, skipped, and the others are served)\n"
    "  --device DEV                  device of instances whose instance_group says KIND_AUTO or nothing:\n"
    "                                auto (one instance per visible GPU, the CPU when there is none; default),\n"
    "                                cpu, cuda (every visible GPU) or cuda:N\n"
    "  --threads N                   engine CPU threads per model instance (default: the engine's, all cores)\n"
    "  --http-threads N              HTTP thread pool size (default 4; Triton's --http-thread-count is an alias)\n"
    "  --max-input-bytes N           request body limit in bytes, after decompression (default 67108864 = 64 MiB);\n"
    "                                a larger Content-Length is answered 413 before the body is read\n"
    "  --http-idle-timeout SECS      close a connection silent this long: while its request's headers or body are\n"
    "                                read, or kept alive between requests (default 60; 0 = never). A request waiting\n"
    "                                on its inference is not idle\n"
    "  --http-header-timeout SECS    a request's line and headers must arrive within SECS of its start (the\n"
    "                                connection's opening; on a kept-alive connection, its first byte), however\n"
    "                                steadily they trickle; else the connection is closed (default 30; 0 = off)\n"
    "  --http-body-timeout SECS      a request's body must arrive within SECS of its headers; else the connection\n"
    "                                is closed (default 300; 0 = off)\n"
    "  --http-max-connections N      open HTTP connections; past N a new connection is closed at once (default: the\n"
    "                                descriptor limit, raised towards its hard limit, less 256, at most 4096)\n"
    "  --http-max-connections-per-ip N  open HTTP connections from one client address; past N a new one from it is\n"
    "                                closed at once (default 0 = no such limit: behind a proxy or on loopback every\n"
    "                                client has the same address)\n"
    "  --max-tensor-elements N       element limit of one input tensor of an infer request (default 67108864)\n"
    "  --max-request-elements N      element limit summed over an infer request's inputs (default 134217728)\n"
    "  --control-token-file PATH     bearer token for /v2/repository/* and /v2/*sharedmemory/* (or the environment\n"
    "                                variable CINFER_CONTROL_TOKEN); without one these endpoints are open\n"
    "  --inference-token-file PATH   bearer token for inference, model metadata, config and statistics (or\n"
    "                                CINFER_INFERENCE_TOKEN); health endpoints and /metrics stay open (docs/security.md)\n"
    "  --strict-readiness BOOL       true: /v2/health/ready only when every model is ready (default true);\n"
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
    "  --log-format text|json        log line format on stderr (default text; Triton's 'default' and 'ISO8601' mean\n"
    "                                text, whose timestamps are ISO 8601)\n"
    "  --log-verbose[=N]             N >= 1 (or no value): also log debug lines; 0: do not (default 0)\n"
    "  --log-info BOOL, --log-warning BOOL, --log-error BOOL\n"
    "                                log lines of that level (default true each)\n"
    "  --version                     print the version and exit\n"
    "  --help                        print this help and exit\n"
    "\n"
    "Triton flags: --grpc-port and --allow-grpc=true are refused (cinfer-server has no gRPC endpoint yet: KServe v2\n"
    "over HTTP only); --allow-grpc=false and --allow-http=true are accepted. Triton flags that tune parts cinfer does\n"
    "not have (--backend-directory, --backend-config, --repoagent-directory, --id, --model-load-thread-count,\n"
    "--pinned-memory-pool-byte-size, --cuda-memory-pool-byte-size, --metrics-interval-ms, --allow-gpu-metrics,\n"
    "--allow-cpu-metrics, --buffer-manager-thread-count) are accepted and logged once as ignored.\n"
    "\n"
    "exit status: 0 after a graceful stop, 1 when the server cannot start, 2 for bad flags.\n";

static int bad_flag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_flag(const char *fmt, ...) {
    fprintf(stderr, "cinfer-server: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nrun 'cinfer-server --help' for the list of flags\n");
    return 2;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !*v || *end || x < lo || x > hi) return bad_flag("%s needs an integer from %ld to %ld", flag, lo, hi);
    *out = x;
    return 0;
}

/* Triton's boolean spellings: true/false, 1/0, on/off, yes/no (any case). */
static int parse_bool(const char *flag, const char *v, int *out) {
    static const char *const yes[] = {"true", "1", "on", "yes"}, *const no[] = {"false", "0", "off", "no"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) return *out = 1, 0;
        if (!strcasecmp(v, no[i])) return *out = 0, 0;
    }
    return bad_flag("%s '%s': use true or false", flag, v);
}

/* Every long flag. Values >= FLAG_FIRST keep the switch readable; the name is recovered from this table for
 * messages, so a flag's spelling lives in one place. */
enum flag_id {
    FLAG_FIRST = 256,
    FLAG_MODEL_REPOSITORY, FLAG_HOST, FLAG_HTTP_PORT, FLAG_METRICS_PORT, FLAG_ALLOW_METRICS, FLAG_GRPC_PORT,
    FLAG_ALLOW_GRPC, FLAG_ALLOW_HTTP, FLAG_CONTROL_MODE, FLAG_LOAD_MODEL, FLAG_POLL_SECS, FLAG_NO_AUTO_COMPLETE,
    FLAG_STRICT_MODEL_CONFIG, FLAG_EXIT_ON_ERROR, FLAG_DEVICE, FLAG_THREADS, FLAG_HTTP_THREADS, FLAG_MAX_INPUT_BYTES,
    FLAG_HTTP_IDLE_TIMEOUT, FLAG_HTTP_HEADER_TIMEOUT, FLAG_HTTP_BODY_TIMEOUT, FLAG_HTTP_MAX_CONNECTIONS,
    FLAG_HTTP_MAX_CONNECTIONS_PER_IP,
    FLAG_MAX_TENSOR_ELEMENTS, FLAG_MAX_REQUEST_ELEMENTS, FLAG_CONTROL_TOKEN_FILE, FLAG_INFERENCE_TOKEN_FILE,
    FLAG_STRICT_READINESS, FLAG_DEFAULT_MAX_BATCH, FLAG_PROBE_MAX_BATCH, FLAG_PRECISION, FLAG_CUDA_MEMORY_LIMIT,
    FLAG_PINNED_OUTPUT_MEMORY, FLAG_EXIT_TIMEOUT, FLAG_LOG_FORMAT, FLAG_LOG_VERBOSE, FLAG_LOG_INFO, FLAG_LOG_WARNING,
    FLAG_LOG_ERROR, FLAG_VERSION, FLAG_HELP, FLAG_TOKEN_ON_COMMAND_LINE, FLAG_TRITON_IGNORED,
};

static const struct option LONG_FLAGS[] = {
    {"model-repository", required_argument, NULL, FLAG_MODEL_REPOSITORY},
    {"model-store", required_argument, NULL, FLAG_MODEL_REPOSITORY},
    {"host", required_argument, NULL, FLAG_HOST},
    {"http-address", required_argument, NULL, FLAG_HOST},
    {"http-port", required_argument, NULL, FLAG_HTTP_PORT},
    {"metrics-port", required_argument, NULL, FLAG_METRICS_PORT},
    {"allow-metrics", required_argument, NULL, FLAG_ALLOW_METRICS},
    {"grpc-port", required_argument, NULL, FLAG_GRPC_PORT},
    {"allow-grpc", required_argument, NULL, FLAG_ALLOW_GRPC},
    {"allow-http", required_argument, NULL, FLAG_ALLOW_HTTP},
    {"model-control-mode", required_argument, NULL, FLAG_CONTROL_MODE},
    {"load-model", required_argument, NULL, FLAG_LOAD_MODEL},
    {"repository-poll-secs", required_argument, NULL, FLAG_POLL_SECS},
    {"disable-auto-complete-config", no_argument, NULL, FLAG_NO_AUTO_COMPLETE},
    {"strict-model-config", required_argument, NULL, FLAG_STRICT_MODEL_CONFIG},
    {"exit-on-error", required_argument, NULL, FLAG_EXIT_ON_ERROR},
    {"device", required_argument, NULL, FLAG_DEVICE},
    {"threads", required_argument, NULL, FLAG_THREADS},
    {"http-threads", required_argument, NULL, FLAG_HTTP_THREADS},
    {"http-thread-count", required_argument, NULL, FLAG_HTTP_THREADS},
    {"max-input-bytes", required_argument, NULL, FLAG_MAX_INPUT_BYTES},
    {"http-idle-timeout", required_argument, NULL, FLAG_HTTP_IDLE_TIMEOUT},
    {"http-header-timeout", required_argument, NULL, FLAG_HTTP_HEADER_TIMEOUT},
    {"http-body-timeout", required_argument, NULL, FLAG_HTTP_BODY_TIMEOUT},
    {"http-max-connections", required_argument, NULL, FLAG_HTTP_MAX_CONNECTIONS},
    {"http-max-connections-per-ip", required_argument, NULL, FLAG_HTTP_MAX_CONNECTIONS_PER_IP},
    {"max-tensor-elements", required_argument, NULL, FLAG_MAX_TENSOR_ELEMENTS},
    {"max-request-elements", required_argument, NULL, FLAG_MAX_REQUEST_ELEMENTS},
    {"control-token-file", required_argument, NULL, FLAG_CONTROL_TOKEN_FILE},
    {"inference-token-file", required_argument, NULL, FLAG_INFERENCE_TOKEN_FILE},
    {"strict-readiness", required_argument, NULL, FLAG_STRICT_READINESS},
    {"default-max-batch-size", required_argument, NULL, FLAG_DEFAULT_MAX_BATCH},
    {"probe-max-batch", no_argument, NULL, FLAG_PROBE_MAX_BATCH},
    {"precision", required_argument, NULL, FLAG_PRECISION},
    {"cuda-memory-limit", required_argument, NULL, FLAG_CUDA_MEMORY_LIMIT},
    {"pinned-output-memory", required_argument, NULL, FLAG_PINNED_OUTPUT_MEMORY},
    {"exit-timeout-secs", required_argument, NULL, FLAG_EXIT_TIMEOUT},
    {"log-format", required_argument, NULL, FLAG_LOG_FORMAT},
    {"log-verbose", optional_argument, NULL, FLAG_LOG_VERBOSE},
    {"log-info", required_argument, NULL, FLAG_LOG_INFO},
    {"log-warning", required_argument, NULL, FLAG_LOG_WARNING},
    {"log-error", required_argument, NULL, FLAG_LOG_ERROR},
    {"version", no_argument, NULL, FLAG_VERSION},
    {"help", no_argument, NULL, FLAG_HELP},
    /* refused: tokens are never taken on the command line, where ps shows them */
    {"control-token", optional_argument, NULL, FLAG_TOKEN_ON_COMMAND_LINE},
    {"inference-token", optional_argument, NULL, FLAG_TOKEN_ON_COMMAND_LINE},
    /* Triton tuning flags for parts cinfer does not have: accepted so launch scripts run, logged as ignored */
    {"backend-directory", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"backend-config", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"repoagent-directory", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"id", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"model-load-thread-count", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"pinned-memory-pool-byte-size", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"cuda-memory-pool-byte-size", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"metrics-interval-ms", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"allow-gpu-metrics", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"allow-cpu-metrics", required_argument, NULL, FLAG_TRITON_IGNORED},
    {"buffer-manager-thread-count", required_argument, NULL, FLAG_TRITON_IGNORED},
    {NULL, 0, NULL, 0},
};

/* What the flags decide beyond server_options. */
typedef struct server_flags {
    server_options opt;
    const char *control_token_file, *inference_token_file;
    const char **loads;
    size_t num_loads;
    int json_log;
    long log_verbose;              /* --log-verbose level; >= 1 logs debug lines */
    int log_info, log_warning, log_error;
    double cuda_limit;             /* --cuda-memory-limit: 0 = none */
    char ignored[512];             /* Triton flags accepted and ignored, for one log line once logging is set up */
    int strict_model_config_given; /* deprecated in Triton: warned about once logging is set up */
} server_flags;

/* "--flag=value" -> "--flag", for messages about the flag itself. */
static const char *flag_name(const char *arg, char *buf, size_t len) {
    const char *eq = strchr(arg, '=');
    snprintf(buf, len, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
    return buf;
}

/* Applies one parsed flag; returns 0, or 2 after printing the problem. `flag` is the spelling the user typed. */
static int apply_flag(server_flags *f, int id, const char *flag, const char *v) {
    server_options *o = &f->opt;
    long x = 0;
    int b = 0;
    switch (id) {
    case FLAG_MODEL_REPOSITORY: o->model_repository = v; return 0;
    case FLAG_HOST: o->host = v; return 0;
    case FLAG_HTTP_PORT: return parse_int(flag, v, 0, 65535, &x) ? 2 : (o->http_port = (int)x, 0);
    case FLAG_METRICS_PORT: return parse_int(flag, v, 0, 65535, &x) ? 2 : (o->metrics_port = (int)x, 0);
    case FLAG_ALLOW_METRICS:
        if (parse_bool(flag, v, &b)) return 2;
        if (!b) o->metrics_port = 0;
        return 0;
    case FLAG_GRPC_PORT:
        return bad_flag("%s: cinfer-server has no gRPC endpoint yet (it serves KServe v2 over HTTP on --http-port); "
                        "remove %s, or pass --allow-grpc=false", flag, flag);
    case FLAG_ALLOW_GRPC:
        if (parse_bool(flag, v, &b)) return 2;
        return b ? bad_flag("%s=true: cinfer-server has no gRPC endpoint yet (KServe v2 over HTTP only)", flag) : 0;
    case FLAG_ALLOW_HTTP:
        if (parse_bool(flag, v, &b)) return 2;
        return b ? 0 : bad_flag("%s=false: HTTP is cinfer-server's only endpoint; it cannot be turned off", flag);
    case FLAG_CONTROL_MODE:
        if (!strcmp(v, "none")) o->control_mode = REPO_CONTROL_NONE;
        else if (!strcmp(v, "poll")) o->control_mode = REPO_CONTROL_POLL;
        else if (!strcmp(v, "explicit")) o->control_mode = REPO_CONTROL_EXPLICIT;
        else return bad_flag("%s '%s': use none, poll or explicit", flag, v);
        return 0;
    case FLAG_LOAD_MODEL: f->loads[f->num_loads++] = v; return 0;
    case FLAG_POLL_SECS: return parse_int(flag, v, 1, 86400, &x) ? 2 : (o->poll_secs = (int)x, 0);
    case FLAG_NO_AUTO_COMPLETE: o->auto_complete_config = 0; return 0;
    case FLAG_STRICT_MODEL_CONFIG:
        if (parse_bool(flag, v, &b)) return 2;
        o->auto_complete_config = !b;
        f->strict_model_config_given = 1;
        return 0;
    case FLAG_EXIT_ON_ERROR: return parse_bool(flag, v, &b) ? 2 : (o->exit_on_error = b, 0);
    case FLAG_DEVICE:
        if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda") && strncmp(v, "cuda:", 5))
            return bad_flag("%s '%s': use cpu, cuda or cuda:N, or auto", flag, v);
        o->device = v;
        return 0;
    case FLAG_THREADS: return parse_int(flag, v, 0, 1024, &x) ? 2 : (o->threads = (int)x, 0);
    case FLAG_HTTP_THREADS: return parse_int(flag, v, 1, 256, &x) ? 2 : (o->http_threads = (int)x, 0);
    case FLAG_MAX_INPUT_BYTES: return parse_int(flag, v, 1024, (long)1 << 40, &x) ? 2 : (o->max_input_bytes = (size_t)x, 0);
    case FLAG_HTTP_IDLE_TIMEOUT: return parse_int(flag, v, 0, 86400, &x) ? 2 : (o->http_idle_timeout_s = (unsigned)x, 0);
    case FLAG_HTTP_HEADER_TIMEOUT:
        return parse_int(flag, v, 0, 86400, &x) ? 2 : (o->http_header_timeout_s = (unsigned)x, 0);
    case FLAG_HTTP_BODY_TIMEOUT: return parse_int(flag, v, 0, 86400, &x) ? 2 : (o->http_body_timeout_s = (unsigned)x, 0);
    case FLAG_HTTP_MAX_CONNECTIONS:
        return parse_int(flag, v, 1, 1 << 20, &x) ? 2 : (o->http_max_connections = (unsigned)x, 0);
    case FLAG_HTTP_MAX_CONNECTIONS_PER_IP:
        return parse_int(flag, v, 0, 1 << 20, &x) ? 2 : (o->http_max_connections_per_ip = (unsigned)x, 0);
    case FLAG_MAX_TENSOR_ELEMENTS: return parse_int(flag, v, 1, (long)1 << 40, &x) ? 2 : (o->max_tensor_elements = x, 0);
    case FLAG_MAX_REQUEST_ELEMENTS: return parse_int(flag, v, 1, (long)1 << 40, &x) ? 2 : (o->max_request_elements = x, 0);
    case FLAG_CONTROL_TOKEN_FILE: f->control_token_file = v; return 0;
    case FLAG_INFERENCE_TOKEN_FILE: f->inference_token_file = v; return 0;
    case FLAG_STRICT_READINESS: return parse_bool(flag, v, &b) ? 2 : (o->strict_readiness = b, 0);
    case FLAG_DEFAULT_MAX_BATCH: return parse_int(flag, v, 0, 1 << 20, &x) ? 2 : (o->default_max_batch = (int)x, 0);
    case FLAG_PROBE_MAX_BATCH: o->probe_max_batch = 1; return 0;
    case FLAG_PRECISION:
        /* the engine validates it when the first model loads; here only the spelling, so a typo fails at once */
        if (strcmp(v, "fp32") && strcmp(v, "tf32") && strcmp(v, "fp16") && strcmp(v, "bf16"))
            return bad_flag("%s '%s': use fp32, tf32, fp16 or bf16", flag, v);
        o->precision = v;
        return 0;
    case FLAG_CUDA_MEMORY_LIMIT: {
        char *end;
        errno = 0;
        f->cuda_limit = strtod(v, &end);
        if (errno || !*v || *end || !(f->cuda_limit > 0) || f->cuda_limit > 1e15)
            return bad_flag("%s '%s': give bytes (> 1) or a fraction of each GPU's memory (0 < X <= 1)", flag, v);
        return 0;
    }
    case FLAG_PINNED_OUTPUT_MEMORY: {
        char *end;
        errno = 0;
        unsigned long long bytes = strtoull(v, &end, 10);
        if (errno || !*v || *end || v[0] == '-') return bad_flag("%s '%s': give bytes (0 = never)", flag, v);
        model_pinned_outputs_set_budget((size_t)bytes);
        return 0;
    }
    case FLAG_EXIT_TIMEOUT: return parse_int(flag, v, 1, 86400, &x) ? 2 : (o->shutdown_timeout_s = (int)x, 0);
    case FLAG_LOG_FORMAT:
        if (!strcmp(v, "json")) f->json_log = 1;
        else if (!strcmp(v, "text") || !strcmp(v, "default") || !strcmp(v, "ISO8601")) f->json_log = 0;
        else return bad_flag("%s '%s': use text or json", flag, v);
        return 0;
    case FLAG_LOG_VERBOSE: return v ? (parse_int(flag, v, 0, 1000000, &f->log_verbose) ? 2 : 0) : (f->log_verbose = 1, 0);
    case FLAG_LOG_INFO: return parse_bool(flag, v, &f->log_info) ? 2 : 0;
    case FLAG_LOG_WARNING: return parse_bool(flag, v, &f->log_warning) ? 2 : 0;
    case FLAG_LOG_ERROR: return parse_bool(flag, v, &f->log_error) ? 2 : 0;
    case FLAG_TOKEN_ON_COMMAND_LINE:
        return bad_flag("%s: tokens are never taken on the command line, where ps shows them; use %s-file PATH or the "
                        "environment variable %s", flag, flag,
                        strstr(flag, "control") ? "CINFER_CONTROL_TOKEN" : "CINFER_INFERENCE_TOKEN");
    case FLAG_TRITON_IGNORED:
        snprintf(f->ignored + strlen(f->ignored), sizeof f->ignored - strlen(f->ignored), "%s%s", f->ignored[0] ? ", " : "",
                 flag);
        return 0;
    default: return bad_flag("internal: flag %d has no handler", id);
    }
}

/* Parses argv with getopt_long into f. Returns 0 to run, 1 when --help/--version answered (exit 0), 2 for bad
 * flags (the problem printed). */
static int parse_flags(int argc, char **argv, server_flags *f) {
    opterr = 0; /* our own messages, which name the flag and the fix */
    optind = 1;
    for (;;) {
        int prev = optind; /* '+': no permuting, so the flag getopt_long reads next is argv[prev] */
        int id = getopt_long(argc, argv, "+:h", LONG_FLAGS, NULL);
        if (id == -1) break;
        char name[128];
        const char *typed = flag_name(argv[prev], name, sizeof name);
        if (id == '?') return bad_flag("unknown flag '%s'", typed);
        if (id == ':') return bad_flag("%s needs a value", typed);
        if (id == 'h' || id == FLAG_HELP) return fputs(USAGE, stdout), 1;
        if (id == FLAG_VERSION) return printf("cinfer-server %s\n", cinfer_version()), 1;
        const char *value = optarg;
        /* Triton takes "--log-verbose N" too: an optional value must otherwise be attached with '=' */
        if (id == FLAG_LOG_VERBOSE && !value && optind < argc && argv[optind][0] >= '0' && argv[optind][0] <= '9')
            value = argv[optind++];
        if (apply_flag(f, id, typed, value)) return 2;
    }
    if (optind < argc) return bad_flag("unexpected argument '%s' (flags start with --)", argv[optind]);
    if (!f->opt.model_repository) return bad_flag("--model-repository DIR is required");
    if (f->num_loads && f->opt.control_mode != REPO_CONTROL_EXPLICIT)
        return bad_flag("--load-model needs --model-control-mode explicit");
    if (f->opt.http_port && f->opt.http_port == f->opt.metrics_port)
        return bad_flag("--http-port and --metrics-port are both %d: use two ports, or --metrics-port 0", f->opt.http_port);
    f->opt.load_models = f->loads;
    f->opt.num_load_models = f->num_loads;
    return 0;
}

/* The lowest level logged: debug with --log-verbose >= 1, else the first of info, warning, error still on. */
static void set_log_level(const server_flags *f) {
    log_level min = f->log_verbose >= 1 ? LOG_DEBUG : f->log_info ? LOG_INFO : f->log_warning ? LOG_WARN : LOG_ERROR;
    if (!f->log_verbose && !f->log_info && !f->log_warning && !f->log_error) min = LOG_OFF;
    log_set_min_level(min);
}

/* Descriptors kept for everything but HTTP connections: model files, shared-memory regions, the metrics listener's
 * connections (SERVER_METRICS_CONNECTIONS), epoll sets and pipes, the CUDA driver. */
#define DESCRIPTOR_RESERVE 256
#define DEFAULT_MAX_CONNECTIONS 4096u

/* Raises the soft RLIMIT_NOFILE (up to the hard one) to fit the HTTP connections and the reserve, and returns the
 * connection limit to use: `asked` (0 = the default), lowered to what the descriptors allow. Past that limit accept()
 * would fail with EMFILE, and libmicrohttpd then stops accepting until a connection closes. */
static unsigned fit_descriptor_limit(unsigned asked) {
    const unsigned want = asked ? asked : DEFAULT_MAX_CONNECTIONS;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return want;
    const rlim_t need = (rlim_t)want + DESCRIPTOR_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit raised = {rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need ? rl.rlim_max : need, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl.rlim_cur = raised.rlim_cur;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return want;
    const unsigned room = rl.rlim_cur > 2 * DESCRIPTOR_RESERVE ? (unsigned)(rl.rlim_cur - DESCRIPTOR_RESERVE)
                                                               : (unsigned)(rl.rlim_cur / 2);
    if (asked)
        log_warn("--http-max-connections %u: the descriptor limit (RLIMIT_NOFILE %llu, hard limit %llu) leaves room for "
                 "%u; using %u (raise the hard limit, e.g. ulimit -Hn, to allow more)", asked,
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, room, room);
    return room;
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
    server_flags f = {
        .opt = {.host = "127.0.0.1", .http_port = 8000, .metrics_port = 8002, .control_mode = REPO_CONTROL_NONE,
                .poll_secs = 15, .device = "auto", .http_threads = 4, .max_input_bytes = 64u << 20,
                .strict_readiness = 1, .default_max_batch = 4, .shutdown_timeout_s = 30, .auto_complete_config = 1,
                .max_tensor_elements = (int64_t)1 << 26, .max_request_elements = (int64_t)1 << 27,
                .http_idle_timeout_s = 60, .http_header_timeout_s = 30, .http_body_timeout_s = 300},
        .log_info = 1, .log_warning = 1, .log_error = 1};
    f.loads = calloc((size_t)argc + 1, sizeof *f.loads);
    if (!f.loads) return 1;
    int parsed = parse_flags(argc, argv, &f);
    if (parsed) {
        free(f.loads);
        return parsed == 1 ? 0 : 2;
    }
    server_options o = f.opt;
    const char *control_token_file = f.control_token_file, *inference_token_file = f.inference_token_file;
    const char **loads = f.loads;
    double cuda_limit = f.cuda_limit;
    log_set_format(f.json_log);
    set_log_level(&f);
    if (f.ignored[0]) log_warn("ignored Triton flags (no such part in cinfer): %s", f.ignored);
    if (f.strict_model_config_given)
        log_warn("--strict-model-config is deprecated (as in Triton): use --disable-auto-complete-config");
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
    o.http_max_connections = fit_descriptor_limit(o.http_max_connections);
    if (o.http_max_connections_per_ip)
        log_info("HTTP connections from one address: at most %u open (--http-max-connections-per-ip)",
                 o.http_max_connections_per_ip);
    log_info("HTTP connections: at most %u open (--http-max-connections), idle ones closed after %u s "
             "(--http-idle-timeout; 0 = never); a request's headers must arrive within %u s (--http-header-timeout), "
             "its body within %u s (--http-body-timeout; 0 = no deadline)", o.http_max_connections,
             o.http_idle_timeout_s, o.http_header_timeout_s, o.http_body_timeout_s);
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
