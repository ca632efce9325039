/* The CPU backend: host memory, kernel lookup in the op's family table, thread count for OpenMP/OpenBLAS. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/status.h"
#include "graph/op_schema.h"

/* One table per family (graph/op_families.h), indexed by family id. */
static const cpu_kernel *const kernel_tables[OP_FAMILY_COUNT] = {
#define KERNEL_TABLE_ENTRY(ID, name) [OP_FAMILY_##ID] = cpu_##name##_kernels,
    OP_FAMILIES(KERNEL_TABLE_ENTRY)
#undef KERNEL_TABLE_ENTRY
};

static _Thread_local int current_threads = 1;
/* The count this thread last gave openblas_set_num_threads (0: never). OpenMP OpenBLAS (the build the README
 * installs) follows the calling thread's OpenMP thread count, so a thread that never set it runs BLAS with every
 * core, whatever another thread set: each thread sets its own. */
static _Thread_local int blas_threads;

/* Scratch buffers: each CPU backend owns one; direct calls (constant folding, host shape nodes) share a
 * thread-local one. cpu_run_node points `current_scratch` at the backend's for the length of a node. */
typedef struct scratch_buffer {
    void *data;
    size_t size;
} scratch_buffer;
static _Thread_local scratch_buffer default_scratch;
static _Thread_local scratch_buffer *current_scratch;

void *cpu_scratch(size_t bytes) {
    scratch_buffer *sb = current_scratch ? current_scratch : &default_scratch;
    if (bytes > sb->size) {
        size_t grown = bytes + bytes / 4; /* some headroom: shapes of later nodes often grow a little */
        void *p = core_aligned_alloc(grown);
        if (!p) return NULL;
        core_aligned_free(sb->data);
        sb->data = p;
        sb->size = grown;
    }
    return sb->data;
}

int cpu_num_threads(void) { return current_threads; }
void cpu_set_num_threads(int n) { current_threads = n > 0 ? n : 1; }

cinfer_status cpu_unsupported_dtype(const graph_node *n, cinfer_dtype t) {
    return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': the CPU backend has no kernel for dtype %s",
                      n->op_type, n->name, cinfer_dtype_name(t));
}

/* The kernel of a registered op, looked up in its schema's family table; NULL if that table lacks it. */
static const cpu_kernel *find_schema_kernel(const op_schema *schema) {
    op_family family = op_schema_family(schema);
    if (family == OP_FAMILY_COUNT) return NULL;
    for (const cpu_kernel *k = kernel_tables[family]; k->op_type; k++)
        if (strcmp(k->op_type, schema->op_type) == 0) return k;
    return NULL;
}

/* Every kernel belongs to an op with a schema, so an op without one has none. */
static const cpu_kernel *find_kernel(const char *op_type) {
    const op_schema *schema = op_schema_find(NULL, op_type);
    return schema ? find_schema_kernel(schema) : NULL;
}

bool backend_cpu_has_op(const char *op_type) { return find_kernel(op_type) != NULL; }

/* Kernel per schema-registry row, built once, so running a node does not search by name. */
static const cpu_kernel **kernel_by_schema;
static size_t num_schemas;
static pthread_once_t kernel_index_once = PTHREAD_ONCE_INIT;

static void build_kernel_index(void) {
    size_t count = op_schema_count();
    const cpu_kernel **table = calloc(count ? count : 1, sizeof *table);
    if (!table) return; /* lookups fall back to the name search */
    for (size_t i = 0; i < count; i++) table[i] = find_schema_kernel(op_schema_at(i));
    kernel_by_schema = table;
    num_schemas = count;
}

cinfer_status backend_cpu_run_node(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    pthread_once(&kernel_index_once, build_kernel_index);
    const cpu_kernel *k = NULL;
    if (kernel_by_schema && n->schema_index >= 0 && (size_t)n->schema_index < num_schemas)
        k = kernel_by_schema[n->schema_index];
    else
        k = find_kernel(n->op_type);
    if (!k) return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': no CPU kernel", n->op_type, n->name);
    return k->run(n, in, num_in, out, num_out);
}

typedef struct cpu_context {
    int threads;
    scratch_buffer scratch;
} cpu_context;

static void cpu_free(backend *b) {
    if (!b) return;
    cpu_context *ctx = b->context;
    if (ctx) core_aligned_free(ctx->scratch.data);
    free(b->context);
    free(b);
}

static bool cpu_supports_op(const backend *b, const graph_node *n) {
    (void)b;
    return (n->domain == NULL || n->domain[0] == '\0' || strcmp(n->domain, "ai.onnx") == 0) &&
           find_kernel(n->op_type) != NULL;
}

static cinfer_status cpu_alloc(backend *b, size_t bytes, void **out) {
    (void)b;
    *out = core_aligned_alloc(bytes);
    if (!*out) return core_error(CINFER_ERR_OUT_OF_MEMORY, "CPU backend: cannot allocate %zu bytes", bytes);
    return CINFER_OK;
}

static void cpu_release(backend *b, void *ptr) {
    (void)b;
    core_aligned_free(ptr);
}

static cinfer_status cpu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes) memcpy(dst, src, bytes);
    return CINFER_OK;
}

static cinfer_status cpu_run_node(backend *b, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out) {
    cpu_context *ctx = b->context;
    cpu_set_num_threads(ctx->threads);
    /* call into OpenBLAS only when this thread runs a session with another count than its last */
    if (blas_threads != ctx->threads) {
        openblas_set_num_threads(ctx->threads);
        blas_threads = ctx->threads;
    }
    current_scratch = &ctx->scratch;
    cinfer_status st = backend_cpu_run_node(n, in, num_in, out, num_out);
    current_scratch = NULL;
    return st;
}

static const struct backend_i cpu_iface = {
    .name = "cpu",
    .free = cpu_free,
    .supports_op = cpu_supports_op,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .run_node = cpu_run_node,
    .synchronize = NULL,
    .host_memory = true,
};

cinfer_status backend_cpu_create(int threads, backend **out) {
    backend *b = calloc(1, sizeof *b);
    cpu_context *ctx = calloc(1, sizeof *ctx);
    if (!b || !ctx) {
        free(b);
        free(ctx);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "CPU backend: out of memory");
    }
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    ctx->threads = threads;
    b->iface = &cpu_iface;
    b->context = ctx;
    *out = b;
    return CINFER_OK;
}

static void broadcast_strides(const tensor *x, const tensor *out, int64_t *stride, bool *full, bool *scalar) {
    int64_t s = 1;
    int off = out->ndim - x->ndim;
    for (int d = out->ndim - 1; d >= 0; d--) {
        int xd = d - off;
        int64_t dim = xd >= 0 ? x->dims[xd] : 1;
        stride[d] = dim == 1 ? 0 : s;
        s *= dim;
    }
    *full = tensor_numel(x) == tensor_numel(out);
    *scalar = tensor_numel(x) == 1;
}

void cpu_broadcast_init(cpu_broadcast *bc, const tensor *a, const tensor *b, const tensor *out) {
    memset(bc, 0, sizeof *bc);
    bc->ndim = out->ndim;
    for (int d = 0; d < out->ndim; d++) bc->dims[d] = out->dims[d];
    broadcast_strides(a, out, bc->stride_a, &bc->a_full, &bc->a_scalar);
    broadcast_strides(b, out, bc->stride_b, &bc->b_full, &bc->b_scalar);
}

void cpu_broadcast_init3(cpu_broadcast *bc, const tensor *a, const tensor *b, const tensor *c, const tensor *out) {
    bool full, scalar;
    cpu_broadcast_init(bc, a, b, out);
    broadcast_strides(c, out, bc->stride_c, &full, &scalar);
}
