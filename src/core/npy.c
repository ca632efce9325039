/* numpy .npy reader/writer: magic, version, a Python-dict header with descr/fortran_order/shape, raw data. */
#include "core/npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

static const struct {
    const char *descr;
    cinfer_dtype dtype;
} descr_table[] = {
    {"<f4", CINFER_DTYPE_FLOAT}, {"<f8", CINFER_DTYPE_DOUBLE}, {"<f2", CINFER_DTYPE_FLOAT16},
    {"<i8", CINFER_DTYPE_INT64}, {"<i4", CINFER_DTYPE_INT32},  {"<i2", CINFER_DTYPE_INT16},
    {"|i1", CINFER_DTYPE_INT8},  {"|u1", CINFER_DTYPE_UINT8},  {"<u2", CINFER_DTYPE_UINT16},
    {"<u4", CINFER_DTYPE_UINT32}, {"<u8", CINFER_DTYPE_UINT64}, {"|b1", CINFER_DTYPE_BOOL},
};
#define NUM_DESCR (sizeof descr_table / sizeof descr_table[0])

/* Finds `key` in the header dict and returns a pointer just after its ':' (skipping spaces). */
static const char *header_value(const char *header, const char *key) {
    const char *p = strstr(header, key);
    if (!p) return NULL;
    p = strchr(p + strlen(key), ':');
    if (!p) return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

cinfer_status npy_parse(const void *bytes, size_t size, const char *what, tensor *out) {
    const unsigned char *b = bytes;
    memset(out, 0, sizeof *out);
    if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: not a .npy file (bad magic)", what);
    unsigned major = b[6];
    size_t header_len, header_start;
    if (major == 1) {
        header_len = (size_t)b[8] | ((size_t)b[9] << 8);
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: truncated .npy header", what);
        header_len = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        header_start = 12;
    } else {
        return core_error(CINFER_ERR_UNSUPPORTED, "%s: .npy format version %u is not supported", what, major);
    }
    if (header_start + header_len > size || header_len > 65536)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: truncated .npy header", what);
    char *header = malloc(header_len + 1);
    if (!header) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(header, b + header_start, header_len);
    header[header_len] = '\0';
    cinfer_status st = CINFER_OK;

    const char *descr = header_value(header, "'descr'");
    const char *fortran = header_value(header, "'fortran_order'");
    const char *shape = header_value(header, "'shape'");
    if (!descr || !fortran || !shape || *descr != '\'' || *shape != '(') {
        st = core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: malformed .npy header", what);
        goto done;
    }
    out->dtype = CINFER_DTYPE_UNDEFINED;
    for (size_t i = 0; i < NUM_DESCR; i++) {
        size_t len = strlen(descr_table[i].descr);
        if (strncmp(descr + 1, descr_table[i].descr, len) == 0 && descr[1 + len] == '\'') out->dtype = descr_table[i].dtype;
    }
    if (out->dtype == CINFER_DTYPE_UNDEFINED) {
        const char *end = strchr(descr + 1, '\'');
        st = core_error(CINFER_ERR_UNSUPPORTED, "%s: .npy dtype '%.*s' is not supported (little-endian numeric or bool only)",
                        what, end ? (int)(end - descr - 1) : 8, descr + 1);
        goto done;
    }
    if (strncmp(fortran, "False", 5) != 0) {
        st = core_error(CINFER_ERR_UNSUPPORTED, "%s: Fortran-ordered .npy arrays are not supported (save with C order)", what);
        goto done;
    }
    const char *p = shape + 1;
    out->ndim = 0;
    int64_t numel = 1;
    while (1) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || errno) {
            st = core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: malformed shape in .npy header", what);
            goto done;
        }
        if (out->ndim == CINFER_MAX_DIMS) {
            st = core_error(CINFER_ERR_UNSUPPORTED, "%s: more than %d dims", what, CINFER_MAX_DIMS);
            goto done;
        }
        if (d && numel > INT64_MAX / d) { /* the element count would overflow (found by tests/fuzz/fuzz_npy.c) */
            st = core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: .npy shape has more than 2^63 elements", what);
            goto done;
        }
        numel *= d;
        out->dims[out->ndim++] = d;
        p = end;
    }
    size_t data_start = header_start + header_len, esz = cinfer_dtype_size(out->dtype);
    if ((uint64_t)numel > (size - data_start) / esz) {
        st = core_error(CINFER_ERR_INVALID_ARGUMENT, "%s: .npy data is truncated (%zu bytes, shape needs %lld elements of %zu bytes)",
                        what, size - data_start, (long long)numel, esz);
        goto done;
    }
    size_t nbytes = (size_t)numel * esz;
    out->data = core_aligned_alloc(nbytes);
    if (!out->data) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", what, nbytes);
        goto done;
    }
    if (nbytes) memcpy(out->data, b + data_start, nbytes);
done:
    free(header);
    return st;
}

cinfer_status npy_read_file(const char *path, tensor *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return core_error(CINFER_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return core_error(CINFER_ERR_IO, "cannot read '%s'", path);
    }
    void *bytes = malloc((size_t)size + 1);
    if (!bytes) {
        fclose(f);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "'%s': cannot allocate %ld bytes", path, size);
    }
    size_t got = fread(bytes, 1, (size_t)size, f);
    fclose(f);
    cinfer_status st = got == (size_t)size ? npy_parse(bytes, (size_t)size, path, out)
                                           : core_error(CINFER_ERR_IO, "cannot read '%s'", path);
    free(bytes);
    return st;
}

cinfer_status npy_write_file(const char *path, const tensor *t) {
    const char *descr = NULL;
    for (size_t i = 0; i < NUM_DESCR; i++)
        if (descr_table[i].dtype == t->dtype) descr = descr_table[i].descr;
    if (!descr) return core_error(CINFER_ERR_UNSUPPORTED, "'%s': dtype %s cannot be written as .npy", path, cinfer_dtype_name(t->dtype));
    char header[512];
    int len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->ndim; i++)
        len += snprintf(header + len, sizeof header - (size_t)len, "%lld,%s", (long long)t->dims[i],
                        i + 1 < t->ndim ? " " : "");
    if (t->ndim > 1) len--; /* numpy writes (2, 3) but (5,) */
    len += snprintf(header + len, sizeof header - (size_t)len, "), }");
    /* pad with spaces so magic(6)+version(2)+len(2)+header ends on a 64-byte boundary, newline last */
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    memset(header + len, ' ', (size_t)pad);
    len += pad;
    header[len++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return core_error(CINFER_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
    size_t nbytes = tensor_nbytes(t);
    bool ok = fwrite(preamble, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len &&
              (nbytes == 0 || fwrite(t->data, 1, nbytes, f) == nbytes);
    if (fclose(f) != 0) ok = false;
    if (!ok) return core_error(CINFER_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return CINFER_OK;
}

/* ---- public API (cinfer.h): the same reader and writer over cinfer_tensor ---- */

cinfer_status cinfer_npy_read(const char *path, cinfer_tensor *out) {
    if (!path || !out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_npy_read: NULL argument");
    memset(out, 0, sizeof *out);
    tensor t;
    CINFER_TRY(npy_read_file(path, &t));
    out->dtype = t.dtype;
    out->ndim = t.ndim;
    memcpy(out->dims, t.dims, sizeof out->dims);
    out->data = t.data; /* core_aligned_alloc'd, which cinfer_tensor_free_data releases */
    return CINFER_OK;
}

cinfer_status cinfer_npy_write(const char *path, const cinfer_tensor *t) {
    if (!path || !t) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_npy_write: NULL argument");
    if (t->ndim < 0 || t->ndim > CINFER_MAX_DIMS)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "'%s': ndim %d is not in [0, %d]", path, t->ndim, CINFER_MAX_DIMS);
    tensor view = {.dtype = t->dtype, .ndim = t->ndim, .data = t->data};
    memcpy(view.dims, t->dims, sizeof view.dims);
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] < 0) return core_error(CINFER_ERR_INVALID_ARGUMENT, "'%s': dim %d is %lld", path, d, (long long)t->dims[d]);
    if (!tensor_size_fits(&view)) return core_error(CINFER_ERR_INVALID_ARGUMENT, "'%s': the tensor is too large", path);
    if (!t->data && tensor_nbytes(&view) > 0)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "'%s': tensor data is NULL", path);
    return npy_write_file(path, &view);
}
