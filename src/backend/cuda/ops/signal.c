/* CUDA kernels of the signal family (host side): attributes and shapes -> launches of kernels/signal.cu. */
#include "backend/cuda/cuda_kernels.h"

const cuda_kernel cuda_signal_kernels[] = {
    {NULL, NULL},
};
