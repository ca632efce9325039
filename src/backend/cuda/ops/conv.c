/* CUDA kernels of the conv family (host side): attributes and shapes -> launches of kernels/conv.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_conv_kernels[] = {
    {NULL, NULL},
};
