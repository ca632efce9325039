/* Where the index kernels (Gather, GatherElements, GatherND, LookupConcat, ScatterND, ScatterElements; the class
 * targets of NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss; the batch indices of RoiAlign / MaxRoiPool)
 * report an index out of range (after the negative wrap, where the op has one), which the CPU backend refuses: the
 * kernel reads zero, skips the write or gives NaN as before, and stores `tag` (nonzero, names the node:
 * cuda_backend.c) into *flag unless it already holds one. *flag is page-locked host memory the device addresses
 * directly (unified addressing), so the backend reads it after the run's existing synchronisation with no copy, and
 * a pointer captured in a CUDA graph stays valid. flag NULL: nothing is reported. Plain C, passed by value to
 * kernels (docs/cuda.md "Indices out of range"). */
#ifndef CINFER_CUDA_KERNELS_INDEX_CHECK_H
#define CINFER_CUDA_KERNELS_INDEX_CHECK_H

typedef struct cuda_index_check {
    int *flag;
    int tag;
} cuda_index_check;

#ifdef __CUDACC__
/* Device side: an index out of range leaves the node's tag in the flag unless an earlier report is there (the first
 * node that met one is named). Plain volatile accesses, not atomics: the flag is host memory, and any of the racing
 * writers' tags (all this node's) will do. Only bad indices pay for it. */
static __device__ __forceinline__ void cuda_report_bad_index(cuda_index_check c) {
    if (c.flag && *(volatile int *)c.flag == 0) *(volatile int *)c.flag = c.tag;
}
#endif

#endif
