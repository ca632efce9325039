/* CPU kernels of the attention family. */
#include "backend/cpu/cpu_kernels.h"

const cpu_kernel cpu_attention_kernels[] = {
    {NULL, NULL},
};
