/* Plain structs shared by the host side (C11, ops/) and the kernels (CUDA C++, kernels/): passed by value to kernels. */
#ifndef CINFER_CUDA_KERNEL_TYPES_H
#define CINFER_CUDA_KERNEL_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major broadcast of up to three operands to an output shape: per operand the element stride of each
 * output dim (0 on broadcast dims). full[k]: operand k has the output's shape (offset == index);
 * scalar[k]: operand k has one element. Filled by cuda_broadcast_init (host side). */
typedef struct cuda_broadcast {
    int ndim;
    int64_t dims[CINFER_MAX_DIMS];
    int64_t stride[3][CINFER_MAX_DIMS];
    bool full[3];
    bool scalar[3];
} cuda_broadcast;

#ifdef __cplusplus
}
#endif
#endif
