/* CPU kernels of Cast and CastLike between every numeric dtype, bool, float16 and bfloat16. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/elementwise_internal.h"
#include "core/status.h"

#define CAST_PAR_MIN 65536 /* below this many elements the cast stays on one thread */
#define CAST_CHUNK 1024    /* elements staged at a time for float16/bfloat16 */

/* Float to integer without undefined behaviour: NaN and out-of-range values give the integer
 * "indefinite" value x86 produces (INT_MIN), narrower types wrap from int32 like numpy does. */
static inline int64_t cast_f_i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN;
}
static inline int32_t cast_f_i32(double v) {
    return (v > -2147483649.0 && v < 2147483648.0) ? (int32_t)v : INT32_MIN;
}
static inline uint64_t cast_f_u64(double v) {
    return (v >= 9223372036854775808.0 && v < 18446744073709551616.0) ? (uint64_t)v : (uint64_t)cast_f_i64(v);
}

/* CV_<source kind>_<destination>(x): one element */
#define CV_FLT_f32(x) ((float)(x))
#define CV_INT_f32(x) ((float)(x))
#define CV_FLT_f64(x) ((double)(x))
#define CV_INT_f64(x) ((double)(x))
#define CV_FLT_i8(x) ((int8_t)cast_f_i32(x))
#define CV_INT_i8(x) ((int8_t)(x))
#define CV_FLT_i16(x) ((int16_t)cast_f_i32(x))
#define CV_INT_i16(x) ((int16_t)(x))
#define CV_FLT_i32(x) (cast_f_i32(x))
#define CV_INT_i32(x) ((int32_t)(x))
#define CV_FLT_i64(x) (cast_f_i64(x))
#define CV_INT_i64(x) ((int64_t)(x))
#define CV_FLT_u8(x) ((uint8_t)cast_f_i32(x))
#define CV_INT_u8(x) ((uint8_t)(x))
#define CV_FLT_u16(x) ((uint16_t)cast_f_i32(x))
#define CV_INT_u16(x) ((uint16_t)(x))
#define CV_FLT_u32(x) ((uint32_t)cast_f_i64(x))
#define CV_INT_u32(x) ((uint32_t)(x))
#define CV_FLT_u64(x) (cast_f_u64(x))
#define CV_INT_u64(x) ((uint64_t)(x))
#define CV_FLT_b8(x) ((uint8_t)((x) != 0))
#define CV_INT_b8(x) ((uint8_t)((x) != 0))

/* M(suffix, C type, kind, DTYPE) */
#define CAST_SRCS(M)                                                                                           \
    M(f32, float, FLT, FLOAT) M(f64, double, FLT, DOUBLE) M(i8, int8_t, INT, INT8) M(i16, int16_t, INT, INT16)  \
    M(i32, int32_t, INT, INT32) M(i64, int64_t, INT, INT64) M(u8, uint8_t, INT, UINT8)                         \
    M(u16, uint16_t, INT, UINT16) M(u32, uint32_t, INT, UINT32) M(u64, uint64_t, INT, UINT64)                  \
    M(b8, uint8_t, INT, BOOL)
#define CAST_DSTS(M, S, ST, SK)                                                                                \
    M(S, ST, SK, f32, float, FLOAT) M(S, ST, SK, f64, double, DOUBLE) M(S, ST, SK, i8, int8_t, INT8)           \
    M(S, ST, SK, i16, int16_t, INT16) M(S, ST, SK, i32, int32_t, INT32) M(S, ST, SK, i64, int64_t, INT64)      \
    M(S, ST, SK, u8, uint8_t, UINT8) M(S, ST, SK, u16, uint16_t, UINT16) M(S, ST, SK, u32, uint32_t, UINT32)   \
    M(S, ST, SK, u64, uint64_t, UINT64) M(S, ST, SK, b8, uint8_t, BOOL)

typedef void (*cast_fn)(const void *x, void *y, int64_t n);

#define CAST_DEF(S, ST, SK, D, DT, DDT)                                                                        \
    static void cast_##S##_##D(const void *px, void *py, int64_t n) {                                          \
        const ST *restrict x = px;                                                                             \
        DT *restrict y = py;                                                                                   \
        for (int64_t i = 0; i < n; i++) y[i] = CV_##SK##_##D(x[i]);                                            \
    }
#define CAST_DEF_FROM(S, ST, SK, SDT) CAST_DSTS(CAST_DEF, S, ST, SK)
CAST_SRCS(CAST_DEF_FROM)

#define CAST_ENTRY(S, ST, SK, D, DT, DDT) [CINFER_DTYPE_##DDT] = cast_##S##_##D,
#define CAST_ROW(S, ST, SK, SDT) [CINFER_DTYPE_##SDT] = {CAST_DSTS(CAST_ENTRY, S, ST, SK)},
static const cast_fn cast_table[CINFER_DTYPE_BFLOAT16 + 1][CINFER_DTYPE_BFLOAT16 + 1] = {CAST_SRCS(CAST_ROW)};

/* ---- float16/bfloat16 <-> float32 in bulk, branch-free so the loops vectorise (same results as
 * dtype_half_to_float / dtype_float_to_half: round to nearest even, NaN kept quiet) ---- */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CAST_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CAST_CLONES
#endif

static inline uint32_t cast_sel(bool c, uint32_t a, uint32_t b) {
    uint32_t m = 0u - (uint32_t)c;
    return (a & m) | (b & ~m);
}

CAST_CLONES static void cast_f16_to_f32(const uint16_t *restrict src, float *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t h = src[i], e = h & 0x7c00, sign = (h & 0x8000) << 16;
        uint32_t normal = ((h & 0x7fff) << 13) + 0x38000000u;   /* rebias the exponent by 127 - 15 */
        uint32_t special = ((h & 0x7fff) << 13) + 0x70000000u;  /* inf/NaN: exponent 255 */
        /* subnormal: 0.5 + m*2^-24 is exact in float; subtracting 0.5 leaves m*2^-24 */
        uint32_t sub = cpu_f32_bits(cpu_bits_f32(0x3f000000u | (h & 0x3ff)) - 0.5f);
        dst[i] = cpu_bits_f32(sign | cast_sel(e == 0, sub, cast_sel(e == 0x7c00, special, normal)));
    }
}

CAST_CLONES static void cast_f32_to_f16(const float *restrict src, uint16_t *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = cpu_f32_bits(src[i]), a = x & 0x7fffffffu, sign = (x >> 16) & 0x8000;
        /* normal: drop 13 bits with round to nearest even; a carry may roll into the exponent (or inf) */
        uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1)) >> 13;
        /* below 2^-14: adding 0.5 rounds |f| to a multiple of 2^-24, the half subnormal step */
        uint32_t sub = cpu_f32_bits(cpu_bits_f32(a) + 0.5f) - 0x3f000000u;
        uint32_t h = cast_sel(a < 0x38800000u, sub, normal);
        h = cast_sel(a >= 0x47800000u, 0x7c00u, h);
        h = cast_sel(a > 0x7f800000u, 0x7e00u, h);
        dst[i] = (uint16_t)(sign | h);
    }
}

static void cast_bf16_to_f32(const uint16_t *restrict src, float *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_bits_f32((uint32_t)src[i] << 16);
}

static void cast_f32_to_bf16(const float *restrict src, uint16_t *restrict dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = cpu_f32_bits(src[i]);
        uint32_t r = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
        dst[i] = (uint16_t)cast_sel((x & 0x7fffffffu) > 0x7f800000u, (x >> 16) | 0x40, r);
    }
}

/* Converts n float16 (t FLOAT16) or bfloat16 values to float32; used by the other elementwise files. */
void cpu_convert_half_to_float(cinfer_dtype t, const uint16_t *src, float *dst, int64_t n) {
    if (t == CINFER_DTYPE_FLOAT16) cast_f16_to_f32(src, dst, n);
    else cast_bf16_to_f32(src, dst, n);
}
void cpu_convert_float_to_half(cinfer_dtype t, const float *src, uint16_t *dst, int64_t n) {
    if (t == CINFER_DTYPE_FLOAT16) cast_f32_to_f16(src, dst, n);
    else cast_f32_to_bf16(src, dst, n);
}

/* double -> float16/bfloat16 with one rounding: round to odd into float32 (24 bits, more than two
 * beyond the target's), then round to nearest even into the target. */
static uint16_t cast_double_to_half(cinfer_dtype t, double d) {
    float f = (float)d;
    if ((double)f != d && d == d) {
        if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
        uint32_t bits;
        memcpy(&bits, &f, 4);
        bits |= 1;
        memcpy(&f, &bits, 4);
    }
    return t == CINFER_DTYPE_FLOAT16 ? dtype_float_to_half(f) : dtype_float_to_bf16(f);
}

static void cast_range(cinfer_dtype from, cinfer_dtype to, const void *xv, void *yv, int64_t lo, int64_t hi) {
    size_t es = cinfer_dtype_size(from), ed = cinfer_dtype_size(to);
    const char *x = (const char *)xv + (size_t)lo * es;
    char *y = (char *)yv + (size_t)lo * ed;
    int64_t n = hi - lo;
    if (!cpu_is_half(from) && !cpu_is_half(to)) {
        cast_table[from][to](x, y, n);
        return;
    }
    float fbuf[CAST_CHUNK];
    double dbuf[CAST_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CAST_CHUNK) {
        int64_t m = n - i0 < CAST_CHUNK ? n - i0 : CAST_CHUNK;
        const char *xs = x + (size_t)i0 * es;
        char *ys = y + (size_t)i0 * ed;
        if (cpu_is_half(from)) {
            if (to == CINFER_DTYPE_FLOAT) {
                cpu_convert_half_to_float(from, (const uint16_t *)xs, (float *)ys, m);
                continue;
            }
            cpu_convert_half_to_float(from, (const uint16_t *)xs, fbuf, m);
            if (cpu_is_half(to)) cpu_convert_float_to_half(to, fbuf, (uint16_t *)ys, m);
            else cast_table[CINFER_DTYPE_FLOAT][to](fbuf, ys, m);
        } else if (from == CINFER_DTYPE_FLOAT) {
            cpu_convert_float_to_half(to, (const float *)xs, (uint16_t *)ys, m);
        } else {
            cast_table[from][CINFER_DTYPE_DOUBLE](xs, dbuf, m);
            uint16_t *o = (uint16_t *)ys;
            for (int64_t i = 0; i < m; i++) o[i] = cast_double_to_half(to, dbuf[i]);
        }
    }
}

static bool cast_known(cinfer_dtype t) {
    return (unsigned)t <= CINFER_DTYPE_BFLOAT16 && (cpu_is_half(t) || cast_table[t][CINFER_DTYPE_FLOAT] != NULL);
}

/* Cast (target from the 'to' attribute) and CastLike (target is input 1's dtype); the schema has set
 * out[0].dtype. The float8 'saturate' attribute does not apply to the dtypes cinfer holds. */
cinfer_status cpu_run_cast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    cinfer_dtype from = in[0].dtype, to = out[0].dtype;
    if (!cast_known(from)) return cpu_unsupported_dtype(n, from);
    if (!cast_known(to)) return cpu_unsupported_dtype(n, to);
    int64_t total = tensor_numel(&out[0]);
    if (total <= 0) return CINFER_OK;
    if (from == to) {
        if (out[0].data != in[0].data) memcpy(out[0].data, in[0].data, tensor_nbytes(&out[0]));
        return CINFER_OK;
    }
    int nt = cpu_num_threads();
    if (nt > total / (CAST_PAR_MIN / 4)) nt = (int)(total / (CAST_PAR_MIN / 4));
    if (total < CAST_PAR_MIN || nt <= 1) {
        cast_range(from, to, in[0].data, out[0].data, 0, total);
        return CINFER_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        cast_range(from, to, in[0].data, out[0].data, total * t / T, total * (t + 1) / T);
    }
    return CINFER_OK;
}
