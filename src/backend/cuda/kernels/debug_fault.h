/* Fault injection launcher (tests only; see cuda_backend.c). */
#ifndef CINFER_CUDA_DEBUG_FAULT_H
#define CINFER_CUDA_DEBUG_FAULT_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Queues a kernel that writes to an invalid address: the context's next synchronisation fails stickily. */
cudaError_t cuda_launch_illegal_write(cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif
