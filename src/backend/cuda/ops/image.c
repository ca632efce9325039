/* CUDA kernels of the image family (host side): attributes and shapes -> launches of kernels/image.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_image_kernels[] = {
    {NULL, NULL},
};
