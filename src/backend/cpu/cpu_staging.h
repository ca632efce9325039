/* Float staging helpers shared by the CPU kernels: float loads/stores via double, bit casts, half converters. */
#ifndef CINFER_CPU_STAGING_H
#define CINFER_CPU_STAGING_H

#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

/* Element i of a float, double, float16 or bfloat16 array as double (0 for other types). */
static inline double cpu_load_f64(const void *p, cinfer_dtype t, int64_t i) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return ((const float *)p)[i];
    case CINFER_DTYPE_DOUBLE: return ((const double *)p)[i];
    case CINFER_DTYPE_FLOAT16: return dtype_half_to_float(((const uint16_t *)p)[i]);
    case CINFER_DTYPE_BFLOAT16: return dtype_bf16_to_float(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

/* Writes v as element i of a float, double, float16 or bfloat16 array (half types round through float;
 * other types are left alone). */
static inline void cpu_store_f64(void *p, cinfer_dtype t, int64_t i, double v) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case CINFER_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case CINFER_DTYPE_FLOAT16: ((uint16_t *)p)[i] = dtype_float_to_half((float)v); break;
    case CINFER_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = dtype_float_to_bf16((float)v); break;
    default: break;
    }
}

static inline bool cpu_is_half(cinfer_dtype t) { return t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16; }

/* One float16 (t FLOAT16) or bfloat16 value to float32 and back. */
static inline float cpu_half_load(cinfer_dtype t, uint16_t v) {
    return t == CINFER_DTYPE_FLOAT16 ? dtype_half_to_float(v) : dtype_bf16_to_float(v);
}
static inline uint16_t cpu_half_store(cinfer_dtype t, float v) {
    return t == CINFER_DTYPE_FLOAT16 ? dtype_float_to_half(v) : dtype_float_to_bf16(v);
}

/* The bits of a float32 and back (memcpy: no aliasing questions, compiles to a register move). */
static inline uint32_t cpu_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float cpu_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* c ? a : b through a bit mask: GCC will not if-convert a float ternary under trapping math (nor one whose
 * arm it sank a trapping FP op into), and the branch would keep loops from vectorising. */
static inline float cpu_select_f32(bool c, float a, float b) {
    uint32_t m = 0u - (uint32_t)c;
    return cpu_bits_f32((cpu_f32_bits(a) & m) | (cpu_f32_bits(b) & ~m));
}

/* Bulk float16/bfloat16 <-> float32 conversion (t selects which 16-bit format), bit-identical to
 * dtype_half_to_float / dtype_float_to_half / dtype_bf16_to_float / dtype_float_to_bf16 but vectorised.
 * Defined in elementwise_cast.c. */
void cpu_convert_half_to_float(cinfer_dtype t, const uint16_t *src, float *dst, int64_t n);
void cpu_convert_float_to_half(cinfer_dtype t, const float *src, uint16_t *dst, int64_t n);

#endif
