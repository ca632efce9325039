/* CUDA kernels of the attention family (host side): attributes and shapes -> launches of kernels/attention.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_attention_kernels[] = {
    {NULL, NULL},
};
