/* Where the index kernels (Gather, GatherElements, GatherND, LookupConcat, ScatterND, ScatterElements) report an
 * index out of range (after the negative wrap), which the CPU backend refuses: the kernel reads zero or skips the
 * write as before, and stores `tag` (nonzero, names the node: cuda_backend.c) into *flag unless it already holds
 * one. *flag is page-locked host memory the device addresses directly (unified addressing), so the backend reads
 * it after the run's existing synchronisation with no copy, and a pointer captured in a CUDA graph stays valid.
 * flag NULL: nothing is reported. Plain C, passed by value to kernels (docs/cuda.md "Indices out of range"). */
#ifndef CINFER_CUDA_KERNELS_INDEX_CHECK_H
#define CINFER_CUDA_KERNELS_INDEX_CHECK_H

typedef struct cuda_index_check {
    int *flag;
    int tag;
} cuda_index_check;

#endif
