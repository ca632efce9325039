/* CUDA kernels of the linalg family (host side): attributes and shapes -> launches of kernels/linalg.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_linalg_kernels[] = {
    {NULL, NULL},
};
