/* Internal tensor view (dtype, shape, data) and dtype helpers shared by the graph and the backends. */
#ifndef CINFER_CORE_TENSOR_H
#define CINFER_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"

/* A view: never owns `data`. Row-major, contiguous. ndim 0 is a scalar (one element). */
typedef struct tensor {
    cinfer_dtype dtype;
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];
    void *data;
    /* Device backends only: a host copy of the data when the value is known while planning (constants,
     * shape-subgraph results, inputs whose values decide shapes), so kernels can read parameters such as
     * Slice's starts without a device round trip. NULL otherwise; host backends leave it NULL. */
    const void *host_data;
} tensor;

int64_t tensor_numel(const tensor *t);
size_t tensor_nbytes(const tensor *t);
/* False when t's byte count exceeds TENSOR_MAX_BYTES (or a product of its dims would overflow on the way): shapes
 * from callers and from values (Expand, Tile, ConstantOfShape...) are checked with it before anything is sized by
 * tensor_nbytes, whose products would otherwise wrap around to a small allocation. An empty tensor fits. */
#define TENSOR_MAX_BYTES ((int64_t)1 << 56)
bool tensor_size_fits(const tensor *t);
/* Row-major strides in elements for t's dims. */
void tensor_strides(const tensor *t, int64_t strides[CINFER_MAX_DIMS]);
bool tensor_same_shape(const tensor *a, const tensor *b);
/* "[2,3,4]" into buf; returns buf. */
const char *tensor_shape_str(const tensor *t, char *buf, size_t size);
/* Reads element i of an integer (int32/int64/...) or float tensor as int64 / double. */
int64_t tensor_get_int(const tensor *t, int64_t i);
double tensor_get_double(const tensor *t, int64_t i);

bool dtype_is_float(cinfer_dtype t);   /* float16/bfloat16/float/double */
bool dtype_is_integer(cinfer_dtype t); /* signed or unsigned integer (not bool) */
bool dtype_is_signed(cinfer_dtype t);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float dtype_half_to_float(uint16_t h);
uint16_t dtype_float_to_half(float f);
float dtype_bf16_to_float(uint16_t b);
uint16_t dtype_float_to_bf16(float f);

/* Aligned host allocation (64 bytes) for tensors and arenas. free with core_aligned_free. */
void *core_aligned_alloc(size_t bytes);
void core_aligned_free(void *p);

#endif
