/* Unit tests of core/npy: round trips for each dtype and rank, and refusal of malformed files. */
#include <stdlib.h>
#include <unistd.h>

#include "core/npy.h"
#include "core/status.h"
#include "test_util.h"

static void test_round_trip(cinfer_dtype dtype, int ndim, const int64_t *dims) {
    char path[] = "/tmp/cinfer_npy_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    tensor t = {.dtype = dtype, .ndim = ndim};
    for (int i = 0; i < ndim; i++) t.dims[i] = dims[i];
    size_t nb = tensor_nbytes(&t);
    t.data = malloc(nb + 1);
    for (size_t i = 0; i < nb; i++) ((unsigned char *)t.data)[i] = (unsigned char)(i * 7 + 3);
    CHECK(npy_write_file(path, &t) == CINFER_OK);
    tensor r;
    CHECK(npy_read_file(path, &r) == CINFER_OK);
    CHECK(r.dtype == dtype && r.ndim == ndim);
    for (int i = 0; i < ndim; i++) CHECK(r.dims[i] == dims[i]);
    CHECK(nb == 0 || memcmp(r.data, t.data, nb) == 0);
    core_aligned_free(r.data);
    free(t.data);
    unlink(path);
}

static void test_malformed(void) {
    tensor t;
    CHECK(npy_parse("hello world", 11, "junk", &t) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("bad magic");
    /* a header that promises more data than present */
    const char header[] = "\x93NUMPY\x01\x00\x46\x00{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }          \n";
    CHECK(npy_parse(header, sizeof header - 1, "short", &t) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("truncated");
    const char fortran[] = "\x93NUMPY\x01\x00\x46\x00{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }             \n\0\0\0\0";
    CHECK(npy_parse(fortran, sizeof fortran - 1, "fortran", &t) == CINFER_ERR_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("Fortran");
    const char objects[] = "\x93NUMPY\x01\x00\x46\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }              \n\0\0\0\0\0\0\0\0";
    CHECK(npy_parse(objects, sizeof objects - 1, "objects", &t) == CINFER_ERR_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("|O");
    /* a header length pointing past the end of the file */
    const char cut[] = "\x93NUMPY\x01\x00\xff\x00{'descr'";
    CHECK(npy_parse(cut, sizeof cut - 1, "cut", &t) == CINFER_ERR_INVALID_ARGUMENT);
    CHECK(npy_read_file("/nonexistent/x.npy", &t) == CINFER_ERR_IO);
    CHECK_ERROR_MENTIONS("/nonexistent/x.npy");
}

int main(void) {
    int64_t d1[] = {5}, d2[] = {2, 3}, d4[] = {2, 1, 3, 4}, d0[] = {0, 3};
    test_round_trip(CINFER_DTYPE_FLOAT, 2, d2);
    test_round_trip(CINFER_DTYPE_FLOAT, 0, d1);
    test_round_trip(CINFER_DTYPE_INT64, 1, d1);
    test_round_trip(CINFER_DTYPE_BOOL, 4, d4);
    test_round_trip(CINFER_DTYPE_FLOAT16, 2, d2);
    test_round_trip(CINFER_DTYPE_DOUBLE, 2, d0);
    test_round_trip(CINFER_DTYPE_UINT8, 4, d4);
    test_malformed();
    TEST_MAIN_END();
}
