/* CPU kernels of the image family. */
#include "backend/cpu/cpu_kernels.h"

const cpu_kernel cpu_image_kernels[] = {
    {NULL, NULL},
};
