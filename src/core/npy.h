/* numpy .npy file reading and writing (format versions 1.0-3.0, little-endian, C order). */
#ifndef CINFER_CORE_NPY_H
#define CINFER_CORE_NPY_H

#include "core/tensor.h"

/* Reads a .npy file into *out; out->data is allocated with core_aligned_alloc (free with core_aligned_free). */
cinfer_status npy_read_file(const char *path, tensor *out);
/* Parses .npy bytes in memory (same contract). */
cinfer_status npy_parse(const void *bytes, size_t size, const char *what, tensor *out);
/* Writes t as a version 1.0 .npy file. */
cinfer_status npy_write_file(const char *path, const tensor *t);

#endif
