/* CPU kernels of the unary elementwise ops (math, activations, IsNaN/IsInf, Not, BitwiseNot) and Clip. */
#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backend/cpu/elementwise_internal.h"
#include "core/status.h"

#define UN_PAR_MIN 16384 /* below this many elements a kernel stays on one thread */
#define UN_CHUNK 512     /* elements converted at a time for float16/bfloat16 */
/* element i is read before element i is written (the output may share the input's buffer) */
#if defined(__GNUC__) && !defined(__clang__)
#define UN_IVDEP _Pragma("GCC ivdep")
#else
#define UN_IVDEP /* clang: runtime alias checks (its assume_safety warns on loops it cannot vectorise) */
#endif


/* Loop body: EXPR computes one output from x; T is the input type, UT its unsigned twin. */
#define UN_BODY(TT, UTT, TO, EXPR)                                                                             \
    typedef TT T;                                                                                              \
    typedef UTT UT __attribute__((unused));                                                                    \
    const T *xs = px;                                                                                          \
    TO *ys = py;                                                                                               \
    (void)p;                                                                                                   \
    UN_IVDEP for (int64_t i = 0; i < n; i++) {                                                                 \
        T x = xs[i];                                                                                           \
        ys[i] = (TO)(EXPR);                                                                                    \
    }

#define UN_DEF(name, TT, UTT, TO, EXPR)                                                                        \
    static void name(const void *px, void *py, int64_t n, const un_params *p) { UN_BODY(TT, UTT, TO, EXPR) }

/* float32 and float64 versions; FE and DE are the expressions for each (float16/bfloat16 use float32) */
#define UN_FLOAT(name, FE, DE)                                                                                 \
    UN_DEF(name##_f32, float, float, float, FE) UN_DEF(name##_f64, double, double, double, DE)

/* Compute-bound float32 loops (exp, erf, tanh...) are also built for AVX2+FMA and AVX-512 and picked at
 * load time: the portable build only assumes SSE2, four lanes. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define UN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define UN_CLONES
#endif
#define UN_FLOAT_FAST(name, FE, DE)                                                                            \
    UN_CLONES static void name##_f32(const void *px, void *py, int64_t n, const un_params *p) {                \
        UN_BODY(float, float, float, FE)                                                                       \
    }                                                                                                          \
    UN_DEF(name##_f64, double, double, double, DE)

/* Integer versions: M(name, sfx, DTYPE, T, UT, EXPR) */
#define UN_SIGNED(M, name, e)                                                                                  \
    M(name, i8, INT8, int8_t, uint8_t, e) M(name, i16, INT16, int16_t, uint16_t, e)                             \
    M(name, i32, INT32, int32_t, uint32_t, e) M(name, i64, INT64, int64_t, uint64_t, e)
#define UN_UNSIGNED(M, name, e)                                                                                \
    M(name, u8, UINT8, uint8_t, uint8_t, e) M(name, u16, UINT16, uint16_t, uint16_t, e)                         \
    M(name, u32, UINT32, uint32_t, uint32_t, e) M(name, u64, UINT64, uint64_t, uint64_t, e)
#define UN_DEF_INT(name, sfx, DT, T, UT, e) UN_DEF(name##_##sfx, T, UT, T, e)
#define UN_ENTRY(name, sfx, DT, T, UT, e) [CINFER_DTYPE_##DT] = name##_##sfx,
#define UN_FLOAT_ENTRIES(name) [CINFER_DTYPE_FLOAT] = name##_f32, [CINFER_DTYPE_DOUBLE] = name##_f64,

/* ---- float32 math the compiler can vectorise (libm calls cannot be): branch-free, every lane computes
 * each path and selects. Max errors measured against double libm over all floats. ---- */
/* exp(x): x = n*ln2 + r with |r| <= ln2/2, e^r by a polynomial (Cephes' expf coefficients), 2^n applied
 * as two factors so huge and subnormal results stay right (within 1 ulp). */
static inline float fm_expf(float x) {
    const float hi = 88.72283935546875f, lo = -103.972084045410f;
    float xc = cpu_select_f32(!(x >= lo), lo, x); /* NaN too, so the int conversion below stays in range */
    xc = cpu_select_f32(xc > hi, hi, xc);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    int32_t ni = (int32_t)n, h1 = ni / 2, h2 = ni - h1;
    float y = p * cpu_bits_f32((uint32_t)(h1 + 127) << 23) * cpu_bits_f32((uint32_t)(h2 + 127) << 23);
    y = cpu_select_f32(x < lo, 0.0f, y);
    y = cpu_select_f32(x > hi, INFINITY, y);
    return cpu_select_f32(x != x, x, y);
}
/* tanh: odd polynomial below 0.625 (Cephes' tanhf coefficients), 1 - 2/(e^2|x| + 1) above (1.4 ulp) */
static inline float fm_tanhf(float x) {
    float a = fabsf(x), z = x * x;
    float ps = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
                3.33332819422e-1f) * z * x + x;
    float pl = 1.0f - 2.0f / (fm_expf(2.0f * a) + 1.0f);
    pl = cpu_select_f32(x < 0, -pl, pl);
    return cpu_select_f32(a < 0.625f, ps, pl);
}
/* erf below |x| = 0.921875: x*P(x^2), a least-squares fit of erf(x)/x (2.8 ulp in float) */
#define FM_ERF_SPLIT 0.921875f
static inline float fm_erf_small(float x) {
    float z = x * x;
    float p = -0.000607823225325658f;
    p = p * z + 0.0050104487524071815f;
    p = p * z - 0.026778466339413602f;
    p = p * z + 0.11282144889447783f;
    p = p * z - 0.3761252522710255f;
    p = p * z + 1.12837915432909f;
    return x * p;
}
/* erfc(a) for a in [0.921875, 3.92]: exp(Q(a - 2.4)), Q a least-squares fit of log(erfc); relative error
 * about 2e-6. a is clamped to 3.92, past which erf is 1 in float. */
static inline float fm_erfc_mid(float a) {
    float u = cpu_select_f32(a > 3.92f, 3.92f, a) - 2.4f;
    float q = 1.6546948118931583e-06f;
    q = q * u - 1.4586366136016508e-05f;
    q = q * u + 8.699400572700634e-05f;
    q = q * u - 0.00046952044107519277f;
    q = q * u + 0.0023875345540672914f;
    q = q * u - 0.011768134688574822f;
    q = q * u - 0.9405019411123033f;
    q = q * u - 5.164236598069937f;
    q = q * u - 7.280975060879346f;
    return fm_expf(q);
}
/* erf(x): the small-x polynomial, else 1 - erfc (2.8 ulp) */
static inline float fm_erff(float x) {
    float a = fabsf(x);
    float large = 1.0f - fm_erfc_mid(a);
    large = cpu_select_f32(x < 0, -large, large);
    return cpu_select_f32(a < FM_ERF_SPLIT, fm_erf_small(x), large);
}
/* Gelu 0.5*x*(1 + erf(x/sqrt2)); for z = x/sqrt2 past the split 1 + erf(z) is taken as erfc(-z) or
 * 2 - erfc(z), which avoids 1 + erf's cancellation in the negative tail; below z = -3.92 the result
 * (under 2e-8 in size) is 0. */
static inline float fm_geluf(float x) {
    float z = x * (float)M_SQRT1_2, a = fabsf(z);
    float c = cpu_select_f32(a > 3.92f, 0.0f, fm_erfc_mid(a));
    float s = cpu_select_f32(a < FM_ERF_SPLIT, 1.0f + fm_erf_small(z), cpu_select_f32(z < 0, c, 2.0f - c));
    return 0.5f * x * s;
}
/* Mish x*tanh(ln(1 + e^x)) = x*n/(n + 2) with n = e^x(e^x + 2); x itself once e^x swamps the 2 */
static inline float fm_mishf(float x) {
    float e = fm_expf(x), n = e * (e + 2.0f);
    float y = x * n / (n + 2.0f);
    y = cpu_select_f32(x < -100.0f, -0.0f, y);
    return cpu_select_f32(x > 20.0f, x, y);
}

/* ---- numerically careful helpers ---- */
static inline float softplusf(float x) { return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
static inline double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static inline float clamp01f(float v) { return cpu_select_f32(v > 1.0f, 1.0f, cpu_select_f32(v < 0.0f, 0.0f, v)); }
static inline double clamp01(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

/* ---- math ---- */
/* sqrtf with errno semantics does not vectorise: use the SSE instruction directly where there is one */
static void un_sqrt_f32(const void *px, void *py, int64_t n, const un_params *p) {
    const float *x = px;
    float *y = py;
    int64_t i = 0;
    (void)p;
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; i++) y[i] = sqrtf(x[i]);
}
UN_DEF(un_sqrt_f64, double, double, double, sqrt(x))
UN_FLOAT_FAST(un_exp, fm_expf(x), exp(x))
UN_FLOAT(un_log, logf(x), log(x))
UN_FLOAT_FAST(un_reciprocal, 1.0f / x, 1.0 / x)
UN_FLOAT_FAST(un_erf, fm_erff(x), erf(x))
UN_FLOAT_FAST(un_floor, floorf(x), floor(x))
UN_FLOAT_FAST(un_ceil, ceilf(x), ceil(x))
UN_FLOAT_FAST(un_round, rintf(x), rint(x)) /* default rounding mode: halves to even, like numpy */
UN_FLOAT(un_sin, sinf(x), sin(x))
UN_FLOAT(un_cos, cosf(x), cos(x))
UN_FLOAT(un_tan, tanf(x), tan(x))
UN_FLOAT(un_asin, asinf(x), asin(x))
UN_FLOAT(un_acos, acosf(x), acos(x))
UN_FLOAT(un_atan, atanf(x), atan(x))
UN_FLOAT(un_sinh, sinhf(x), sinh(x))
UN_FLOAT(un_cosh, coshf(x), cosh(x))
UN_FLOAT_FAST(un_tanh, fm_tanhf(x), tanh(x))
UN_FLOAT(un_asinh, asinhf(x), asinh(x))
UN_FLOAT(un_acosh, acoshf(x), acosh(x))
UN_FLOAT(un_atanh, atanhf(x), atanh(x))
UN_FLOAT(un_neg, -x, -x)
UN_SIGNED(UN_DEF_INT, un_neg, (T)(0u - (UT)x))
UN_FLOAT(un_abs, fabsf(x), fabs(x))
UN_SIGNED(UN_DEF_INT, un_abs, x < 0 ? (T)(0u - (UT)x) : x)
UN_UNSIGNED(UN_DEF_INT, un_abs, x)
UN_FLOAT(un_sign, x > 0 ? 1.0f : x < 0 ? -1.0f : x, x > 0 ? 1.0 : x < 0 ? -1.0 : x) /* NaN stays NaN */
UN_SIGNED(UN_DEF_INT, un_sign, (x > 0) - (x < 0))
UN_UNSIGNED(UN_DEF_INT, un_sign, x > 0)
UN_SIGNED(UN_DEF_INT, un_bnot, ~x)
UN_UNSIGNED(UN_DEF_INT, un_bnot, ~x)
UN_DEF(un_not_b8, uint8_t, uint8_t, uint8_t, x == 0)

/* ---- activations (alpha, beta, gamma from attributes) ---- */
UN_FLOAT(un_relu, x < 0 ? 0.0f : x, x < 0 ? 0.0 : x) /* NaN passes through */
UN_SIGNED(UN_DEF_INT, un_relu, x < 0 ? 0 : x)
UN_FLOAT(un_leaky_relu, cpu_select_f32(x < 0, p->alpha * x, x), x < 0 ? p->alpha * x : x)
UN_FLOAT_FAST(un_sigmoid, 1.0f / (1.0f + fm_expf(-x)), 1.0 / (1.0 + exp(-x)))
UN_FLOAT_FAST(un_hard_sigmoid, clamp01f(p->alpha * x + p->beta), clamp01((double)p->alpha * x + p->beta))
UN_FLOAT_FAST(un_hard_swish, x * clamp01f(x * (1.0f / 6) + 0.5f), x * clamp01(x / 6 + 0.5))
UN_FLOAT(un_softplus, softplusf(x), softplus(x))
UN_FLOAT_FAST(un_softsign, x / (1.0f + fabsf(x)), x / (1.0 + fabs(x)))
UN_FLOAT(un_elu, x < 0 ? p->alpha * expm1f(x) : x, x < 0 ? p->alpha * expm1(x) : x)
UN_FLOAT(un_selu, x > 0 ? p->gamma * x : p->gamma * p->alpha * expm1f(x),
         x > 0 ? p->gamma * x : (double)p->gamma * p->alpha * expm1(x))
UN_FLOAT(un_celu, (x > 0 ? x : 0.0f) + fminf(0.0f, p->alpha * expm1f(x / p->alpha)),
         (x > 0 ? x : 0.0) + fmin(0.0, p->alpha * expm1(x / p->alpha)))
UN_FLOAT(un_thresholded_relu, x > p->alpha ? x : 0.0f, x > p->alpha ? x : 0.0)
UN_FLOAT_FAST(un_mish, fm_mishf(x), x * tanh(softplus(x)))
UN_FLOAT(un_shrink, cpu_select_f32(x < -p->alpha, x + p->beta, cpu_select_f32(x > p->alpha, x - p->beta, 0.0f)),
         x < -p->alpha ? x + p->beta : x > p->alpha ? x - p->beta : 0.0)
UN_FLOAT_FAST(un_gelu, fm_geluf(x), 0.5 * x * erfc(-x * M_SQRT1_2))
#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
/* 0.5*x*(1 + tanh(u)) computed as x*sigmoid(2u): the same value without 1 + tanh's cancellation in the
 * negative tail */
static inline float fm_gelu_tanhf(float x) {
    float u = (float)GELU_K * (x + 0.044715f * x * x * x);
    return cpu_select_f32(x < -100.0f, -0.0f, x / (1.0f + fm_expf(-2.0f * u))); /* -inf/inf would be NaN */
}
static inline double gelu_tanh(double x) {
    double u = GELU_K * (x + 0.044715 * x * x * x);
    return x < -100.0 ? -0.0 : x / (1.0 + exp(-2.0 * u));
}
UN_FLOAT_FAST(un_gelu_tanh, fm_gelu_tanhf(x), gelu_tanh(x))

/* ---- bool results ---- */
/* IsInf flag bits: 1 detect positive, 2 detect negative */
UN_DEF(un_isnan_f32, float, float, uint8_t, x != x)
UN_DEF(un_isnan_f64, double, double, uint8_t, x != x)
UN_DEF(un_isnan_f16, uint16_t, uint16_t, uint8_t, (x & 0x7fff) > 0x7c00)
UN_DEF(un_isnan_bf16, uint16_t, uint16_t, uint8_t, (x & 0x7fff) > 0x7f80)
UN_DEF(un_isinf_f32, float, float, uint8_t, ((p->flag & 1) && x == INFINITY) || ((p->flag & 2) && x == -INFINITY))
UN_DEF(un_isinf_f64, double, double, uint8_t, ((p->flag & 1) && x == INFINITY) || ((p->flag & 2) && x == -INFINITY))
UN_DEF(un_isinf_f16, uint16_t, uint16_t, uint8_t, ((p->flag & 1) && x == 0x7c00) || ((p->flag & 2) && x == 0xfc00))
UN_DEF(un_isinf_bf16, uint16_t, uint16_t, uint8_t, ((p->flag & 1) && x == 0x7f80) || ((p->flag & 2) && x == 0xff80))

/* ---- op table ---- */
typedef struct un_op {
    const char *name;
    un_fn fn[CINFER_DTYPE_BFLOAT16 + 1]; /* by input dtype */
    bool half_via_float;                 /* float16/bfloat16 run the FLOAT entry on converted chunks */
} un_op;

#define UN_FLOAT_OP(opname, fname) {opname, {UN_FLOAT_ENTRIES(fname)}, true}
static const un_op un_ops[] = {
    UN_FLOAT_OP("Sqrt", un_sqrt), UN_FLOAT_OP("Exp", un_exp), UN_FLOAT_OP("Log", un_log),
    UN_FLOAT_OP("Reciprocal", un_reciprocal), UN_FLOAT_OP("Erf", un_erf), UN_FLOAT_OP("Floor", un_floor),
    UN_FLOAT_OP("Ceil", un_ceil), UN_FLOAT_OP("Round", un_round), UN_FLOAT_OP("Sin", un_sin),
    UN_FLOAT_OP("Cos", un_cos), UN_FLOAT_OP("Tan", un_tan), UN_FLOAT_OP("Asin", un_asin), UN_FLOAT_OP("Acos", un_acos),
    UN_FLOAT_OP("Atan", un_atan), UN_FLOAT_OP("Sinh", un_sinh), UN_FLOAT_OP("Cosh", un_cosh),
    UN_FLOAT_OP("Tanh", un_tanh), UN_FLOAT_OP("Asinh", un_asinh), UN_FLOAT_OP("Acosh", un_acosh),
    UN_FLOAT_OP("Atanh", un_atanh),
    {"Neg", {UN_FLOAT_ENTRIES(un_neg) UN_SIGNED(UN_ENTRY, un_neg, 0)}, true},
    {"Abs", {UN_FLOAT_ENTRIES(un_abs) UN_SIGNED(UN_ENTRY, un_abs, 0) UN_UNSIGNED(UN_ENTRY, un_abs, 0)}, true},
    {"Sign", {UN_FLOAT_ENTRIES(un_sign) UN_SIGNED(UN_ENTRY, un_sign, 0) UN_UNSIGNED(UN_ENTRY, un_sign, 0)}, true},
    {"BitwiseNot", {UN_SIGNED(UN_ENTRY, un_bnot, 0) UN_UNSIGNED(UN_ENTRY, un_bnot, 0)}, false},
    {"Not", {[CINFER_DTYPE_BOOL] = un_not_b8}, false},
    {"Relu", {UN_FLOAT_ENTRIES(un_relu) UN_SIGNED(UN_ENTRY, un_relu, 0)}, true},
    UN_FLOAT_OP("LeakyRelu", un_leaky_relu), UN_FLOAT_OP("Sigmoid", un_sigmoid),
    UN_FLOAT_OP("HardSigmoid", un_hard_sigmoid), UN_FLOAT_OP("HardSwish", un_hard_swish),
    UN_FLOAT_OP("Softplus", un_softplus), UN_FLOAT_OP("Softsign", un_softsign), UN_FLOAT_OP("Elu", un_elu),
    UN_FLOAT_OP("Selu", un_selu), UN_FLOAT_OP("Celu", un_celu), UN_FLOAT_OP("ThresholdedRelu", un_thresholded_relu),
    UN_FLOAT_OP("Mish", un_mish), UN_FLOAT_OP("Shrink", un_shrink), UN_FLOAT_OP("Gelu", un_gelu),
    {"IsNaN",
     {[CINFER_DTYPE_FLOAT] = un_isnan_f32, [CINFER_DTYPE_DOUBLE] = un_isnan_f64, [CINFER_DTYPE_FLOAT16] = un_isnan_f16,
      [CINFER_DTYPE_BFLOAT16] = un_isnan_bf16},
     false},
    {"IsInf",
     {[CINFER_DTYPE_FLOAT] = un_isinf_f32, [CINFER_DTYPE_DOUBLE] = un_isinf_f64, [CINFER_DTYPE_FLOAT16] = un_isinf_f16,
      [CINFER_DTYPE_BFLOAT16] = un_isinf_bf16},
     false},
};
static const un_op un_gelu_tanh_op = UN_FLOAT_OP("Gelu", un_gelu_tanh);

static const un_op *un_find(const char *op_type) {
    for (size_t i = 0; i < sizeof un_ops / sizeof un_ops[0]; i++)
        if (strcmp(un_ops[i].name, op_type) == 0) return &un_ops[i];
    return NULL;
}

un_fn cpu_unary_f32_loop(const char *op_type) {
    const un_op *op = un_find(op_type);
    return op ? op->fn[CINFER_DTYPE_FLOAT] : NULL;
}

/* Reads the op's attributes (ONNX defaults) into p. */
static cinfer_status un_read_params(const graph_node *n, un_params *p) {
    const char *op = n->op_type;
    memset(p, 0, sizeof *p);
    if (strcmp(op, "LeakyRelu") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 0.01f);
    } else if (strcmp(op, "HardSigmoid") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 0.2f);
        p->beta = graph_attr_float(n, "beta", 0.5f);
    } else if (strcmp(op, "Elu") == 0 || strcmp(op, "Celu") == 0 || strcmp(op, "ThresholdedRelu") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 1.0f);
        if (op[0] == 'C' && p->alpha == 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "Celu node '%s': alpha is 0, expected a nonzero value",
                              n->name);
    } else if (strcmp(op, "Selu") == 0) {
        p->alpha = graph_attr_float(n, "alpha", 1.67326319217681884765625f);
        p->gamma = graph_attr_float(n, "gamma", 1.05070102214813232421875f);
    } else if (strcmp(op, "Shrink") == 0) {
        p->alpha = graph_attr_float(n, "lambd", 0.5f);
        p->beta = graph_attr_float(n, "bias", 0.0f);
    } else if (strcmp(op, "IsInf") == 0) {
        p->flag = (graph_attr_int(n, "detect_positive", 1) ? 1 : 0) | (graph_attr_int(n, "detect_negative", 1) ? 2 : 0);
    }
    return CINFER_OK;
}

/* Runs [lo, hi): directly, or for float16/bfloat16 through float32 chunks. */
static void un_range(un_fn f, cinfer_dtype half, const void *x, void *y, size_t ein, size_t eout, int64_t lo,
                     int64_t hi, const un_params *p) {
    if (half == CINFER_DTYPE_UNDEFINED) {
        f((const char *)x + (size_t)lo * ein, (char *)y + (size_t)lo * eout, hi - lo, p);
        return;
    }
    float buf[UN_CHUNK];
    const uint16_t *hx = x;
    uint16_t *hy = y;
    for (int64_t i0 = lo; i0 < hi; i0 += UN_CHUNK) {
        int64_t m = hi - i0 < UN_CHUNK ? hi - i0 : UN_CHUNK;
        cpu_convert_half_to_float(half, hx + i0, buf, m);
        f(buf, buf, m, p);
        cpu_convert_float_to_half(half, buf, hy + i0, m);
    }
}

static void un_exec(un_fn f, cinfer_dtype half, const void *x, void *y, size_t ein, size_t eout, int64_t total,
                    const un_params *p) {
    int nt = cpu_num_threads();
    if (nt > total / (UN_PAR_MIN / 4)) nt = (int)(total / (UN_PAR_MIN / 4));
    if (total < UN_PAR_MIN || nt <= 1) {
        if (total > 0) un_range(f, half, x, y, ein, eout, 0, total, p);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        un_range(f, half, x, y, ein, eout, total * t / T, total * (t + 1) / T, p);
    }
}

cinfer_status cpu_run_unary_op(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const un_op *op = strcmp(n->op_type, "Gelu") == 0 && strcmp(graph_attr_string(n, "approximate", "none"), "tanh") == 0
                          ? &un_gelu_tanh_op
                          : un_find(n->op_type);
    if (!op) return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': no CPU kernel", n->op_type, n->name);
    cinfer_dtype t = in[0].dtype;
    if ((unsigned)t > CINFER_DTYPE_BFLOAT16) return cpu_unsupported_dtype(n, t);
    un_fn f = op->fn[t];
    cinfer_dtype half = CINFER_DTYPE_UNDEFINED;
    if (!f && op->half_via_float && (t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16)) {
        f = op->fn[CINFER_DTYPE_FLOAT];
        half = t;
    }
    if (!f) return cpu_unsupported_dtype(n, t);
    un_params p;
    CINFER_TRY(un_read_params(n, &p));
    un_exec(f, half, in[0].data, out[0].data, cinfer_dtype_size(t), cinfer_dtype_size(out[0].dtype),
            tensor_numel(&out[0]), &p);
    return CINFER_OK;
}

/* ---- Clip(x, min?, max?): absent bounds are the dtype's extremes; min > max gives max (numpy) ---- */
#define CLIP_CASE(DT, TT, LO, HI)                                                                              \
    case CINFER_DTYPE_##DT: {                                                                                  \
        const TT *x = in[0].data;                                                                              \
        TT *y = out[0].data;                                                                                   \
        TT lo = has_lo ? *(const TT *)in[1].data : (LO), hi = has_hi ? *(const TT *)in[2].data : (HI);         \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if (total > 65536)")                         \
        for (int64_t i = 0; i < total; i++) {                                                                  \
            TT v = x[i];                                                                                       \
            v = v < lo ? lo : v;                                                                               \
            y[i] = v > hi ? hi : v;                                                                            \
        }                                                                                                      \
        return CINFER_OK;                                                                                      \
    }

cinfer_status cpu_run_clip(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    bool has_lo = num_in > 1 && in[1].dtype != CINFER_DTYPE_UNDEFINED && in[1].data;
    bool has_hi = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED && in[2].data;
    int64_t total = tensor_numel(&out[0]);
    switch (in[0].dtype) {
    CLIP_CASE(FLOAT, float, -INFINITY, INFINITY)
    CLIP_CASE(DOUBLE, double, -INFINITY, INFINITY)
    CLIP_CASE(INT8, int8_t, INT8_MIN, INT8_MAX)
    CLIP_CASE(INT16, int16_t, INT16_MIN, INT16_MAX)
    CLIP_CASE(INT32, int32_t, INT32_MIN, INT32_MAX)
    CLIP_CASE(INT64, int64_t, INT64_MIN, INT64_MAX)
    CLIP_CASE(UINT8, uint8_t, 0, UINT8_MAX)
    CLIP_CASE(UINT16, uint16_t, 0, UINT16_MAX)
    CLIP_CASE(UINT32, uint32_t, 0, UINT32_MAX)
    CLIP_CASE(UINT64, uint64_t, 0, UINT64_MAX)
    case CINFER_DTYPE_FLOAT16:
    case CINFER_DTYPE_BFLOAT16: {
        cinfer_dtype t = in[0].dtype;
        const uint16_t *x = in[0].data;
        uint16_t *y = out[0].data;
        float lo = has_lo ? cpu_half_load(t, *(const uint16_t *)in[1].data) : -INFINITY;
        float hi = has_hi ? cpu_half_load(t, *(const uint16_t *)in[2].data) : INFINITY;
        for (int64_t i = 0; i < total; i++) {
            float v = cpu_half_load(t, x[i]);
            if (v != v) {
                y[i] = x[i];
                continue;
            }
            v = v < lo ? lo : v;
            y[i] = cpu_half_store(t, v > hi ? hi : v);
        }
        return CINFER_OK;
    }
    default:
        return cpu_unsupported_dtype(n, in[0].dtype);
    }
}
