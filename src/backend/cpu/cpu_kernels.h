/* The CPU kernel tables: one per op family of graph/op_families.h (backend/cpu/<family>.c), joined by cpu_backend.c,
 * which looks an op up in its schema's family table. */
#ifndef CINFER_CPU_KERNELS_H
#define CINFER_CPU_KERNELS_H

#include <math.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_families.h"

/* Runs one node. Inputs and outputs are host tensors with final shapes; outputs are preallocated
 * (output 0 may share input 0's buffer when the schema has OP_FLAG_INPLACE/ALIAS; the planner then
 * guarantees the same element count and size and that no other input aliases it, so a kernel only has to
 * read element i before writing element i). An omitted optional input has dtype CINFER_DTYPE_UNDEFINED and data NULL.
 * On a dtype the kernel lacks return core_error(CINFER_ERR_UNSUPPORTED, "<op> node '<name>': ...").
 * Threads: kernels may parallelise with OpenMP over cpu_num_threads(). */
typedef cinfer_status (*cpu_kernel_fn)(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

typedef struct cpu_kernel {
    const char *op_type;
    cpu_kernel_fn run;
} cpu_kernel;

/* cpu_<family>_kernels[], each ending with a row whose op_type is NULL; a row's op is in the table's family. */
#define CPU_KERNEL_TABLE_DECL(ID, name) extern const cpu_kernel cpu_##name##_kernels[];
OP_FAMILIES(CPU_KERNEL_TABLE_DECL)
#undef CPU_KERNEL_TABLE_DECL

/* Thread count of the running session (set by the CPU backend before each node). */
int cpu_num_threads(void);
void cpu_set_num_threads(int n);

/* Scratch memory for the running kernel (im2col buffers, transposed copies): valid until the kernel returns,
 * owned by the session's CPU backend and grown to the largest request, so steady-state runs do not allocate.
 * Returns NULL when the memory cannot be had (report CINFER_ERR_OUT_OF_MEMORY). One live request per call:
 * a second call may move the first buffer. */
void *cpu_scratch(size_t bytes);

/* Error for a dtype the kernel does not implement. */
cinfer_status cpu_unsupported_dtype(const graph_node *n, cinfer_dtype t);

/* Broadcast iteration helper: for out index i (row-major over out dims) computes the flat offsets in
 * a and b. Prepares per-dim strides (0 on broadcast dims) once per call. */
typedef struct cpu_broadcast {
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];
    int64_t stride_a[CINFER_MAX_DIMS];
    int64_t stride_b[CINFER_MAX_DIMS];
    int64_t stride_c[CINFER_MAX_DIMS];
    bool a_full, b_full; /* a (b) has out's shape: offset == i */
    bool a_scalar, b_scalar;
} cpu_broadcast;
void cpu_broadcast_init(cpu_broadcast *bc, const tensor *a, const tensor *b, const tensor *out);
/* Adds a third operand (Where: cond, x, y) */
void cpu_broadcast_init3(cpu_broadcast *bc, const tensor *a, const tensor *b, const tensor *c, const tensor *out);
static inline void cpu_broadcast_offsets(const cpu_broadcast *bc, int64_t i, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int d = bc->ndim - 1; d >= 0; d--) {
        int64_t idx = i % bc->dims[d];
        i /= bc->dims[d];
        a += idx * bc->stride_a[d];
        b += idx * bc->stride_b[d];
    }
    *oa = a;
    *ob = b;
}
static inline int64_t cpu_broadcast_offset_c(const cpu_broadcast *bc, int64_t i) {
    int64_t c = 0;
    for (int d = bc->ndim - 1; d >= 0; d--) {
        c += (i % bc->dims[d]) * bc->stride_c[d];
        i /= bc->dims[d];
    }
    return c;
}

/* ---- the integer quantized ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) ---- */

/* Element i of an int8 or uint8 tensor. */
static inline int32_t cpu_load_q8(const tensor *t, int64_t i) {
    return t->dtype == CINFER_DTYPE_INT8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

/* Index into a quantization parameter that is one value or one per channel. */
static inline int64_t cpu_qparam_at(const tensor *p, int64_t channel) { return tensor_numel(p) == 1 ? 0 : channel; }

/* Element i of int8 or uint8 y (dtype t) = saturate(round_half_even(acc * scale) + zero_point), in float like
 * onnxruntime's requantisation: float32 multiplier and product, rounded to nearest even, then clamped. A NaN product
 * (a NaN or infinite scale, a zero y_scale) counts as 0, as in QuantizeLinear (misc_quant.c): never an undefined cast. */
static inline void cpu_requantize_q8(int32_t acc, float scale, int32_t zero_point, void *y, cinfer_dtype t,
                                     int64_t i) {
    float v = nearbyintf((float)acc * scale);
    if (v != v) v = 0.0f;
    v += (float)zero_point;
    float lo = t == CINFER_DTYPE_INT8 ? -128.0f : 0.0f, hi = t == CINFER_DTYPE_INT8 ? 127.0f : 255.0f;
    v = v < lo ? lo : v > hi ? hi : v;
    if (t == CINFER_DTYPE_INT8) ((int8_t *)y)[i] = (int8_t)v;
    else ((uint8_t *)y)[i] = (uint8_t)v;
}

#endif
