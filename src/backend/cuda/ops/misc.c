/* CUDA kernels of the misc family (host side): attributes and shapes -> launches of kernels/misc.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_misc_kernels[] = {
    {NULL, NULL},
};
