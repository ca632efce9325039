// Fault injection for tests: a kernel that writes through an invalid device address, so the context is lost the
// way a real out-of-bounds bug loses it. Launched only when CINFER_FAULT_INJECTION=1 names a node to fail.
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/kernels/debug_fault.h"

__global__ void cinfer_illegal_write(int *p) { *p = 1; }

extern "C" cudaError_t cuda_launch_illegal_write(cudaStream_t stream) {
    cinfer_illegal_write<<<1, 1, 0, stream>>>((int *)(uintptr_t)0x10);
    return cudaGetLastError();
}
