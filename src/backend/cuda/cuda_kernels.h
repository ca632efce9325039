/* The CUDA kernel tables (one per op family, ops/<family>.c) and what a kernel gets to run with.
 *
 * Split of work per family:
 *   ops/<family>.c          host C11: reads attributes and shapes, works out launch parameters, calls launchers
 *   kernels/<family>.cu     CUDA C++: the kernels and their extern "C" launchers (no graph types inside)
 *   kernels/<family>.h      C prototypes of those launchers (plain C types only: pointers, ints, cudaStream_t)
 * The families are graph/op_families.h's; cuda_ops.c joins their tables and looks an op up in its schema's family
 * table. Adding an op: docs/engine.md "Adding an op".
 */
#ifndef CINFER_CUDA_KERNELS_H
#define CINFER_CUDA_KERNELS_H

#include <stdbool.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_families.h"
#include "backend/cuda/kernels/kernel_types.h"
#include "backend/cuda/kernels/index_check.h"

/* Per-session execution state handed to every kernel. */
typedef struct cuda_exec {
    int device;                 /* CUDA ordinal as this process sees it */
    cudaStream_t stream;        /* every launch and async copy of the node goes here */
    cublasLtHandle_t lt;        /* cuBLASLt handle of the session */
    cudnnHandle_t dnn;          /* cuDNN handle bound to `stream` */
    void *workspace;            /* GEMM/convolution workspace on the device, CUDA_WORKSPACE_BYTES long */
    size_t workspace_bytes;
    bool allow_tf32;            /* precision "tf32": float32 GEMMs/convolutions may use TF32 tensor cores */
    bool deterministic;         /* only algorithms with run-to-run identical results */
    size_t large_workspace_bytes; /* the most workspace a convolution may take beyond `workspace` through
                                   * cuda_scratch: an eighth of the memory limit (or of the device), at most
                                   * CUDA_LARGE_WORKSPACE_BYTES; set by each run's begin (the limit may change) */
    struct cuda_backend_ctx *owner; /* for cuda_scratch (private to cuda_backend.c) */
    cuda_index_check index_check; /* where index kernels report an index out of range: the session's flag, tagged
                                   * with the running node by run_node; checked after the run (cuda_backend.c) */
} cuda_exec;

#define CUDA_WORKSPACE_BYTES ((size_t)64 << 20)

/* Runs one node on the device. Inputs and outputs are device tensors with final shapes, outputs
 * preallocated in the session's arena (output 0 may share input 0's buffer under the same rules as the CPU
 * backend: same element count and size, no other input aliases it, so read element i before writing i).
 * An omitted optional input has dtype CINFER_DTYPE_UNDEFINED and data NULL. Inputs whose values decide
 * shapes (the schema's value_inputs) and constants also carry `host_data`: read parameters from there, never
 * copy device data back to the host (a run's host<->device copies are counted and tested).
 * Work is queued on x->stream; a kernel must not synchronise and must not cudaMalloc (use cuda_scratch).
 * Errors: core_error(CINFER_ERR_UNSUPPORTED, "<op> node '<name>': ...") for a dtype or attribute the kernel
 * lacks; launch failures through cuda_check_launch. */
typedef cinfer_status (*cuda_kernel_fn)(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                        int num_out);

typedef struct cuda_kernel {
    const char *op_type;
    cuda_kernel_fn run;
} cuda_kernel;

/* cuda_<family>_kernels[] (ops/<family>.c), each ending with a row whose op_type is NULL; a row's op is in the
 * table's family. */
#define CUDA_KERNEL_TABLE_DECL(ID, name) extern const cuda_kernel cuda_##name##_kernels[];
OP_FAMILIES(CUDA_KERNEL_TABLE_DECL)
#undef CUDA_KERNEL_TABLE_DECL

/* Kernel for an op, or NULL (cuda_ops.c). */
const cuda_kernel *cuda_find_kernel(const char *op_type);

/* Device scratch for the running node (im2col buffers, index tables, reduction partials): valid until the
 * node's work on x->stream has run, grown to the largest request and reused, so steady-state runs do not
 * allocate. NULL when the memory cannot be had (report CINFER_ERR_OUT_OF_MEMORY). One live request per
 * node: a second call may move the first buffer. */
void *cuda_scratch(cuda_exec *x, size_t bytes);

/* Cap of cuda_exec.large_workspace_bytes. Large batches' fastest cuDNN algorithms need hundreds of MiB; a fixed
 * per-session workspace that size would not fit tight limits. */
#define CUDA_LARGE_WORKSPACE_BYTES ((size_t)1 << 30)

/* Device memory borrowed from the device's cache for the length of a synchronising call (cuDNN's algorithm
 * timing), given back at once; NULL when it cannot be had. Not while capturing. */
void *cuda_exec_temp_alloc(cuda_exec *x, size_t bytes);
void cuda_exec_temp_free(cuda_exec *x, void *p);

/* True while x's stream is being captured into a CUDA graph (nothing may synchronise or allocate). */
bool cuda_exec_capturing(const cuda_exec *x);
/* Brackets work that synchronises (cuDNN's algorithm timing): waits for graph captures on the device to end and
 * keeps new ones from starting, since a synchronising call on another thread would invalidate them. Never while
 * x itself is capturing. */
void cuda_exec_exclusive_begin(cuda_exec *x);
void cuda_exec_exclusive_end(cuda_exec *x);

/* After a launcher returns `err` (a cudaError_t): OK, or an error naming the node and `what`. A sticky
 * error (illegal address, launch failure) also marks the device failed. */
cinfer_status cuda_check_launch(const graph_node *n, const char *what, cudaError_t err);
cinfer_status cuda_check_cublas(const graph_node *n, const char *what, cublasStatus_t st);
cinfer_status cuda_check_cudnn(const graph_node *n, const char *what, cudnnStatus_t st);

/* Error for a dtype the kernel does not implement. */
cinfer_status cuda_unsupported_dtype(const graph_node *n, cinfer_dtype t);

/* Copies in[0..num_in) into `host` with data = host_data, so shared parameter code written against host tensors
 * (movement_compute_slice, reduce_compute_axes, ...) reads the host copies. Inputs without host data get
 * data NULL. */
void cuda_host_views(const tensor *in, int num_in, tensor *host);

/* Fills bc for operands ops[0..num_ops) broadcast to out's shape. */
void cuda_broadcast_init(cuda_broadcast *bc, const tensor *const *ops, int num_ops, const tensor *out);

#endif
