/* Tensor shape helpers, dtype table and fp16/bf16 conversion. */
#include "core/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t tensor_numel(const tensor *t) {
    /* an empty tensor first: [2^32, 2^32, 0] has no elements, but the product of its first dims would overflow */
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

size_t tensor_nbytes(const tensor *t) { return (size_t)tensor_numel(t) * cinfer_dtype_size(t->dtype); }

bool tensor_size_fits(const tensor *t) {
    int64_t total = (int64_t)(cinfer_dtype_size(t->dtype) ? cinfer_dtype_size(t->dtype) : 1);
    bool too_large = false;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] == 0) return true;
        if (t->dims[d] < 0 || total > TENSOR_MAX_BYTES / t->dims[d]) too_large = true;
        else total *= t->dims[d];
    }
    return !too_large;
}

void tensor_strides(const tensor *t, int64_t strides[CINFER_MAX_DIMS]) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= t->dims[i];
    }
}

bool tensor_same_shape(const tensor *a, const tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

const char *tensor_shape_str(const tensor *t, char *buf, size_t size) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)t->dims[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

int64_t tensor_get_int(const tensor *t, int64_t i) {
    switch (t->dtype) {
    case CINFER_DTYPE_INT64: return ((const int64_t *)t->data)[i];
    case CINFER_DTYPE_INT32: return ((const int32_t *)t->data)[i];
    case CINFER_DTYPE_INT16: return ((const int16_t *)t->data)[i];
    case CINFER_DTYPE_INT8: return ((const int8_t *)t->data)[i];
    case CINFER_DTYPE_UINT8: return ((const uint8_t *)t->data)[i];
    case CINFER_DTYPE_UINT16: return ((const uint16_t *)t->data)[i];
    case CINFER_DTYPE_UINT32: return ((const uint32_t *)t->data)[i];
    case CINFER_DTYPE_UINT64: return (int64_t)((const uint64_t *)t->data)[i];
    case CINFER_DTYPE_BOOL: return ((const uint8_t *)t->data)[i] != 0;
    case CINFER_DTYPE_FLOAT: return (int64_t)((const float *)t->data)[i];
    case CINFER_DTYPE_DOUBLE: return (int64_t)((const double *)t->data)[i];
    default: return 0;
    }
}

double tensor_get_double(const tensor *t, int64_t i) {
    switch (t->dtype) {
    case CINFER_DTYPE_FLOAT: return ((const float *)t->data)[i];
    case CINFER_DTYPE_DOUBLE: return ((const double *)t->data)[i];
    case CINFER_DTYPE_FLOAT16: return dtype_half_to_float(((const uint16_t *)t->data)[i]);
    case CINFER_DTYPE_BFLOAT16: return dtype_bf16_to_float(((const uint16_t *)t->data)[i]);
    default: return (double)tensor_get_int(t, i);
    }
}

size_t cinfer_dtype_size(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: case CINFER_DTYPE_INT32: case CINFER_DTYPE_UINT32: return 4;
    case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT8: case CINFER_DTYPE_BOOL: return 1;
    case CINFER_DTYPE_UINT16: case CINFER_DTYPE_INT16: case CINFER_DTYPE_FLOAT16: case CINFER_DTYPE_BFLOAT16: return 2;
    case CINFER_DTYPE_INT64: case CINFER_DTYPE_DOUBLE: case CINFER_DTYPE_UINT64: return 8;
    default: return 0;
    }
}

const char *cinfer_dtype_name(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return "float32";
    case CINFER_DTYPE_UINT8: return "uint8";
    case CINFER_DTYPE_INT8: return "int8";
    case CINFER_DTYPE_UINT16: return "uint16";
    case CINFER_DTYPE_INT16: return "int16";
    case CINFER_DTYPE_INT32: return "int32";
    case CINFER_DTYPE_INT64: return "int64";
    case CINFER_DTYPE_STRING: return "string";
    case CINFER_DTYPE_BOOL: return "bool";
    case CINFER_DTYPE_FLOAT16: return "float16";
    case CINFER_DTYPE_DOUBLE: return "float64";
    case CINFER_DTYPE_UINT32: return "uint32";
    case CINFER_DTYPE_UINT64: return "uint64";
    case CINFER_DTYPE_BFLOAT16: return "bfloat16";
    default: return "undefined";
    }
}

bool dtype_is_float(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 ||
           t == CINFER_DTYPE_BFLOAT16;
}

bool dtype_is_integer(cinfer_dtype t) {
    switch (t) {
    case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT8: case CINFER_DTYPE_UINT16: case CINFER_DTYPE_INT16:
    case CINFER_DTYPE_INT32: case CINFER_DTYPE_INT64: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64:
        return true;
    default: return false;
    }
}

bool dtype_is_signed(cinfer_dtype t) {
    return t == CINFER_DTYPE_INT8 || t == CINFER_DTYPE_INT16 || t == CINFER_DTYPE_INT32 || t == CINFER_DTYPE_INT64 ||
           dtype_is_float(t);
}

float dtype_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t dtype_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 0x1f) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}

float dtype_bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t dtype_float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

void *core_aligned_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}

void core_aligned_free(void *p) { free(p); }
