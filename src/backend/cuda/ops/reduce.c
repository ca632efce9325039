/* CUDA kernels of the reduce family (host side): attributes and shapes -> launches of kernels/reduce.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_reduce_kernels[] = {
    {NULL, NULL},
};
