/* libFuzzer target: bytes as a .npy file -> npy_parse (src/core/npy.c, used for `cinfer run` inputs and test
 * data). A parsed tensor must hold exactly the bytes its dtype and shape say, all readable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/npy.h"
#include "core/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tensor t;
    if (npy_parse(data, size, "fuzz.npy", &t) != CINFER_OK) return 0;
    int64_t numel = 1;
    for (int d = 0; d < t.ndim; d++)
        if (t.dims[d] < 0 || __builtin_mul_overflow(numel, t.dims[d], &numel)) {
            fprintf(stderr, "fuzz_npy: accepted a shape whose element count overflows (dim %d = %lld)\n", d, (long long)t.dims[d]);
            abort();
        }
    size_t nbytes = tensor_nbytes(&t);
    if (nbytes > size) {
        fprintf(stderr, "fuzz_npy: a %zu-byte file gave a tensor of %zu bytes\n", size, nbytes);
        abort();
    }
    volatile unsigned sum = 0;
    for (size_t i = 0; i < nbytes; i++) sum += ((const unsigned char *)t.data)[i];
    core_aligned_free(t.data);
    return 0;
}
