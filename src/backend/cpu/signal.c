/* CPU kernels of the signal family. */
#include "backend/cpu/cpu_kernels.h"

const cpu_kernel cpu_signal_kernels[] = {
    {NULL, NULL},
};
