/* CUDA kernels of the movement family (host side): attributes and shapes -> launches of kernels/movement.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_movement_kernels[] = {
    {NULL, NULL},
};
