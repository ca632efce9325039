/* CUDA kernels of the recurrent family (host side): attributes and shapes -> launches of kernels/recurrent.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_recurrent_kernels[] = {
    {NULL, NULL},
};
