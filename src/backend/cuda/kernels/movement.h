/* Launchers of the movement family's kernels (kernels/movement.cu, kernels/movement_index.cu) for ops/movement.c:
 * plain C types only. Every launcher queues its work on `stream` and returns cudaGetLastError() (or the first
 * error of a call it makes); `elem_size` is the element size in bytes (1, 2, 4 or 8), data moves by size only. */
#ifndef CINFER_CUDA_KERNELS_MOVEMENT_H
#define CINFER_CUDA_KERNELS_MOVEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels/index_check.h"
#include "cinfer/cinfer.h"
#include "graph/shape/movement_types.h" /* movement_view, movement_reduction */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- strided copies (movement.cu) */


/* dst (contiguous, v's dims) = the elements of src that v describes. Simplifies the view first (drops size-1
 * dims, merges contiguous neighbours) and takes a tiled path for transposes. */
cudaError_t movement_launch_view_copy(void *dst, const void *src, size_t elem_size, const movement_view *v,
                                      cudaStream_t stream);

/* Up to MOVEMENT_COPY_BATCH_MAX device-to-device copies in one launch (dst[k] <- bytes[k] bytes of src[k]; the
 * ranges must not overlap): a session's device-resident inputs in one kernel, where a copy-engine operation each
 * costs microseconds of latency apiece. Every pointer must be device-accessible. */
#define MOVEMENT_COPY_BATCH_MAX 64
typedef struct movement_copy_batch {
    void *dst[MOVEMENT_COPY_BATCH_MAX];
    const void *src[MOVEMENT_COPY_BATCH_MAX];
    size_t bytes[MOVEMENT_COPY_BATCH_MAX];
    int n;
} movement_copy_batch;
cudaError_t movement_launch_copy_batch(const movement_copy_batch *b, cudaStream_t stream);

/* Concat / Split: a batch of parts joined along an axis into (Concat) or cut out of (Split) the `wide` tensor,
 * both seen as [outer, cols]. Part k has part_cols[k] columns per outer index (never 0) and starts at column
 * wide_col0[k] of the wide tensor. */
#define MOVEMENT_CONCAT_BATCH 48

typedef struct movement_concat_batch {
    int count;
    int64_t outer;
    int64_t wide_cols;                          /* columns of the wide tensor per outer index */
    int64_t cum[MOVEMENT_CONCAT_BATCH + 1];     /* prefix sums of the parts' columns */
    int64_t wide_col0[MOVEMENT_CONCAT_BATCH];
    void *part[MOVEMENT_CONCAT_BATCH];
    void *wide;
} movement_concat_batch;

/* to_wide: copy the parts into wide (Concat); otherwise wide into the parts (Split). */
cudaError_t movement_launch_concat(const movement_concat_batch *b, size_t elem_size, bool to_wide, cudaStream_t stream);

/* Pad: per output dim the padded size and, for the input, its stride, the cropped elements skipped at the
 * start (`skip`), the elements kept (`keep`) and the padded elements before them (`lead`). `mode` holds a
 * movement_pad_mode value (graph/shape/movement_params.h): 0 constant, 1 reflect, 2 edge, 3 wrap. `value` points
 * at the device constant (NULL: zero). */
typedef struct movement_pad_args {
    int ndim;
    int mode;
    int64_t out_dims[CINFER_MAX_DIMS];
    int64_t in_strides[CINFER_MAX_DIMS];
    int64_t skip[CINFER_MAX_DIMS];
    int64_t keep[CINFER_MAX_DIMS];
    int64_t lead[CINFER_MAX_DIMS];
} movement_pad_args;

cudaError_t movement_launch_pad(void *dst, const void *src, const void *value, size_t elem_size,
                                const movement_pad_args *a, int64_t total, cudaStream_t stream);

/* Trilu on `mats` matrices [rows, cols]: keeps j >= i + k (upper) or j <= i + k (lower), zeros the rest.
 * dst may equal src. */
cudaError_t movement_launch_trilu(void *dst, const void *src, size_t elem_size, int64_t mats, int64_t rows,
                                  int64_t cols, int64_t k, bool upper, cudaStream_t stream);

/* ---------------------------------------------------------------- generated tensors (movement.cu) */

/* count elements of elem_size bytes, each the low elem_size bytes of value_bits (little-endian). */
cudaError_t movement_launch_fill(void *dst, size_t elem_size, int64_t count, uint64_t value_bits, cudaStream_t stream);

/* dst[0..bytes) = host bytes, passed to the device inside kernel arguments (no host->device copy); large blocks
 * take one launch per few KB. */
cudaError_t movement_launch_write_bytes(void *dst, const void *bytes, size_t count, cudaStream_t stream);

/* EyeLike: [rows, cols] with one_bits on the diagonal j = i + k, zero elsewhere. */
cudaError_t movement_launch_eye(void *dst, size_t elem_size, int64_t rows, int64_t cols, int64_t k, uint64_t one_bits,
                                cudaStream_t stream);

/* Range: dst[i] = start + i * delta; floats (float, double, float16, bfloat16) from the double pair, integers
 * (int16, int32, int64) from the wrapping 64-bit pair. */
cudaError_t movement_launch_range(void *dst, cinfer_dtype dtype, int64_t count, double start_f, double delta_f,
                                  int64_t start_i, int64_t delta_i, cudaStream_t stream);

/* ---------------------------------------------------------------- gathers (movement_index.cu) */

/* Every gather and scatter below reports an index out of range through `check` (index_check.h). */

/* LookupConcat (graph/fusion_lookup.c): up to MOVEMENT_LOOKUP_MAX pieces, piece k in block row k, written into
 * columns [col0, col0 + inner) of dst seen as [outer, width]: a plain piece from src ([outer, inner]), a lookup from
 * the table rows (`row` elements each, `rows` of them) its indices pick, inner / row consecutive indices per outer
 * index, negative ones wrapping once and out-of-range ones reading zero (as Gather here) and reported through
 * `check`. Counts in elements. */
#define MOVEMENT_LOOKUP_MAX 64
typedef struct movement_lookup_piece {
    const void *src, *idx; /* idx NULL: a plain piece */
    int idx_is_64;
    int64_t inner, col0, row, rows;
} movement_lookup_piece;
typedef struct movement_lookup_batch {
    void *dst;
    int64_t outer, width;
    int n;
    cuda_index_check check;
    movement_lookup_piece p[MOVEMENT_LOOKUP_MAX];
} movement_lookup_batch;
cudaError_t movement_launch_lookup_concat(const movement_lookup_batch *b, size_t elem_size, cudaStream_t stream);

/* Indices are int32 (idx_is_64 false) or int64; negative ones wrap once; out-of-range ones read zero and are
 * reported through `check`. */

/* Gather: data [outer, axis_size, inner], indices (count of them) -> out [outer, count, inner]. */
cudaError_t movement_launch_gather(void *dst, const void *src, const void *idx, bool idx_is_64, size_t elem_size,
                                   int64_t outer, int64_t axis_size, int64_t count, int64_t inner, cuda_index_check check,
                                   cudaStream_t stream);

/* GatherElements / ScatterElements: the index tensor's dims, data's strides and the axis. */
typedef struct movement_elements_args {
    int ndim;
    int axis;
    int64_t axis_size;
    int64_t idx_dims[CINFER_MAX_DIMS];
    int64_t data_strides[CINFER_MAX_DIMS];
} movement_elements_args;

cudaError_t movement_launch_gather_elements(void *dst, const void *src, const void *idx, bool idx_is_64,
                                            size_t elem_size, const movement_elements_args *a, int64_t total,
                                            cuda_index_check check, cudaStream_t stream);

/* GatherND: each index row (k values) picks a slice of `slice` elements; rows are grouped into batches of
 * per_batch rows, batch b reading data from b * data_batch. dims/strides: data's dims and strides for the k
 * indexed axes. */
typedef struct movement_gather_nd_args {
    int k;
    int64_t per_batch, slice, data_batch;
    int64_t dims[CINFER_MAX_DIMS];
    int64_t strides[CINFER_MAX_DIMS];
} movement_gather_nd_args;

cudaError_t movement_launch_gather_nd(void *dst, const void *src, const void *idx, bool idx_is_64, size_t elem_size,
                                      const movement_gather_nd_args *a, int64_t rows, cuda_index_check check,
                                      cudaStream_t stream);

/* OneHot: indices [outer, inner] (any integer or float dtype) -> dst [outer, depth, inner]; values is the
 * device pair (off, on) of elem_size bytes each. Out-of-range indices give an all-off row. */
cudaError_t movement_launch_onehot(void *dst, const void *idx, cinfer_dtype idx_dtype, const void *values,
                                   size_t elem_size, int64_t outer, int64_t depth, int64_t inner, cudaStream_t stream);

/* ---------------------------------------------------------------- scatters (movement_index.cu) */

/* A scatter runs in four steps so duplicate indices are applied in index order, exactly as the CPU does:
 * keys (per update row, the slot it writes, or `sentinel` when an index is out of range, which the keys kernel
 * reports through `check`), a stable radix sort
 * of (slot, row) pairs, then one thread per (run of equal slots, slice element) applying the run's updates in
 * row order. Scratch layout: keys_in, keys_out (uint64), rows_in, rows_out (int64), then the sort's own
 * temporary storage. */

/* Bits that hold every key in [0, sentinel]. */
int movement_scatter_key_bits(uint64_t sentinel);

/* Scratch bytes for `rows` update rows with keys of key_bits bits (sort storage included). */
cudaError_t movement_scatter_scratch_bytes(int64_t rows, int key_bits, size_t *bytes);

/* ScatterND keys: row r reads k index values; the slot is their row-major position over data's first k dims. */
typedef struct movement_scatter_nd_args {
    int k;
    int64_t dims[CINFER_MAX_DIMS];
    int64_t slot_strides[CINFER_MAX_DIMS];
} movement_scatter_nd_args;

cudaError_t movement_launch_scatter_nd_keys(void *scratch, const void *idx, bool idx_is_64,
                                            const movement_scatter_nd_args *a, int64_t rows, uint64_t sentinel,
                                            cuda_index_check check, cudaStream_t stream);

/* ScatterElements keys: index position i's slot is the data element it addresses. */
cudaError_t movement_launch_scatter_elements_keys(void *scratch, const void *idx, bool idx_is_64,
                                                  const movement_elements_args *a, int64_t rows, uint64_t sentinel,
                                                  cuda_index_check check, cudaStream_t stream);

/* Checks `rows` index rows of k values each, value j of a row against dims[j] (negative ones wrapping once), and
 * reports one out of range through `check`, moving nothing. For an op with nothing to move (an empty output, slice
 * or data) whose indices the CPU still checks one by one: Gather and ScatterElements (k = 1, the axis), GatherND and
 * ScatterND (the indexed dims). */
typedef struct movement_index_rows_args {
    int k;
    int64_t dims[CINFER_MAX_DIMS];
} movement_index_rows_args;
cudaError_t movement_launch_index_rows_check(const void *idx, bool idx_is_64, const movement_index_rows_args *a,
                                             int64_t rows, cuda_index_check check, cudaStream_t stream);

/* Clears check.flag in stream order (after the work queued before it), for a run that follows one whose end the
 * host never waited for (cinfer_session_run_device). */
cudaError_t movement_launch_index_check_reset(cuda_index_check check, cudaStream_t stream);

/* Sorts the keys and applies the updates: dst[slot * slice + e] (red)= updates[row * slice + e]. dst already
 * holds the data. reduction NONE moves elements by size (any dtype); the others need a numeric dtype. */
cudaError_t movement_launch_scatter_apply(void *scratch, size_t scratch_bytes, void *dst, const void *updates,
                                          cinfer_dtype dtype, movement_reduction red, int64_t rows, int64_t slice,
                                          uint64_t sentinel, int key_bits, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
