/* CPU kernels of the elementwise family's broadcasting ops (binary, Where, variadic) and its kernel table.
 *
 * Binary arithmetic, comparisons and logic, Pow, PRelu, Where and Min/Max/Sum/Mean are here; the unary ops
 * and Clip are in elementwise_unary.c, Cast and CastLike in elementwise_cast.c. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/elementwise_internal.h"
#include "core/status.h"

#define EW_PAR_MIN 32768 /* below this many elements a kernel stays on one thread */
#define EW_CHUNK 256     /* elements converted at a time for float16/bfloat16 */
/* The inner loops read element i of every operand before writing element i, so an output sharing
 * input 0's buffer is safe: tell GCC there is no other dependence, so it vectorises without
 * runtime alias checks. */
#if defined(__GNUC__) && !defined(__clang__)
#define EW_IVDEP _Pragma("GCC ivdep")
#else
#define EW_IVDEP /* clang: runtime alias checks (its assume_safety warns on loops it cannot vectorise) */
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Broadcast plan: the output dims with size-1 dims dropped and neighbours merged where every operand
 * broadcasts alike. The innermost dim then has operand strides of 0 or 1, so the inner loops see a
 * contiguous row or a repeated scalar: [N,C,H,W]+[C,1,1] becomes rows of H*W against one value,
 * [B,S,H]+[H] rows of H against one row. */
typedef struct ew_plan {
    int nops; /* operands, 1..3 */
    int ndim; /* >= 1 */
    int64_t dims[CINFER_MAX_DIMS];
    int64_t strides[3][CINFER_MAX_DIMS];
    int64_t total;
} ew_plan;

static void ew_plan_init(ew_plan *p, const tensor *const *ops, int nops, const tensor *out) {
    int64_t st[3][CINFER_MAX_DIMS];
    for (int k = 0; k < nops; k++) {
        int off = out->ndim - ops[k]->ndim;
        int64_t s = 1;
        for (int d = out->ndim - 1; d >= 0; d--) {
            int64_t dim = d >= off ? ops[k]->dims[d - off] : 1;
            st[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    p->nops = nops;
    p->ndim = 0;
    p->total = 1;
    unsigned prev = 0;
    for (int d = 0; d < out->ndim; d++) {
        p->total *= out->dims[d];
        if (out->dims[d] == 1) continue;
        unsigned pattern = 0;
        for (int k = 0; k < nops; k++) pattern |= (st[k][d] != 0) << k;
        if (p->ndim > 0 && pattern == prev) {
            /* merging outer with inner: the inner stride is the merged dim's stride */
            p->dims[p->ndim - 1] *= out->dims[d];
            for (int k = 0; k < nops; k++) p->strides[k][p->ndim - 1] = st[k][d];
        } else {
            p->dims[p->ndim] = out->dims[d];
            for (int k = 0; k < nops; k++) p->strides[k][p->ndim] = st[k][d];
            p->ndim++;
        }
        prev = pattern;
    }
    if (p->ndim == 0) { /* one element */
        p->ndim = 1;
        p->dims[0] = 1;
        for (int k = 0; k < nops; k++) p->strides[k][0] = 0;
    }
}

struct ew_ctx;
/* Processes n output elements: operand k starts at in[k] and steps by s[k] (0 or 1) elements. */
typedef void (*ew_seg_fn)(const void *const in[3], const int64_t s[3], void *out, int64_t n, const struct ew_ctx *ctx);

typedef struct ew_ctx {
    ew_seg_fn inner;      /* float16/bfloat16 adapter: the float32 segment it wraps */
    cinfer_dtype half;    /* FLOAT16 or BFLOAT16 for the adapter */
    bool out_half;        /* adapter: the output is half too (else bool) */
    size_t esize[3];      /* operand element sizes in bytes */
    size_t osize;         /* output element size */
} ew_ctx;

/* Runs f over output elements [lo, hi), walking the plan's outer dims like an odometer. */
static void ew_range(const ew_plan *p, ew_seg_fn f, const void *const base[3], void *out, const ew_ctx *ctx,
                     int64_t lo, int64_t hi) {
    int nd = p->ndim, k;
    int64_t inner = p->dims[nd - 1], idx[CINFER_MAX_DIMS] = {0}, off[3] = {0, 0, 0}, s[3] = {0, 0, 0};
    for (k = 0; k < p->nops; k++) s[k] = p->strides[k][nd - 1];
    int64_t row = lo / inner, col = lo % inner;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = row % p->dims[d];
        row /= p->dims[d];
        for (k = 0; k < p->nops; k++) off[k] += idx[d] * p->strides[k][d];
    }
    while (lo < hi) {
        int64_t m = inner - col < hi - lo ? inner - col : hi - lo;
        const void *ptr[3] = {NULL, NULL, NULL};
        for (k = 0; k < p->nops; k++) ptr[k] = (const char *)base[k] + (size_t)(off[k] + col * s[k]) * ctx->esize[k];
        f(ptr, s, (char *)out + (size_t)lo * ctx->osize, m, ctx);
        lo += m;
        col = 0;
        for (int d = nd - 2; d >= 0; d--) {
            for (k = 0; k < p->nops; k++) off[k] += p->strides[k][d];
            if (++idx[d] < p->dims[d]) break;
            for (k = 0; k < p->nops; k++) off[k] -= p->strides[k][d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

static void ew_exec(const ew_plan *p, ew_seg_fn f, const void *const base[3], void *out, const ew_ctx *ctx) {
    int64_t total = p->total;
    if (total <= 0) return;
    int nt = cpu_num_threads();
    if (nt > total / (EW_PAR_MIN / 4)) nt = (int)(total / (EW_PAR_MIN / 4));
    if (total < EW_PAR_MIN || nt <= 1) {
        ew_range(p, f, base, out, ctx, 0, total);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        ew_range(p, f, base, out, ctx, total * t / T, total * (t + 1) / T);
    }
}

/* float16/bfloat16 operands: converts chunks to float32, runs the float32 segment, converts back. */
static void seg_half_adapter(const void *const in[3], const int64_t s[3], void *out, int64_t n, const ew_ctx *ctx) {
    float buf[2][EW_CHUNK], res[EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        const void *fin[3] = {buf[0], buf[1], NULL};
        for (int k = 0; k < 2; k++) {
            const uint16_t *h = (const uint16_t *)in[k] + i0 * s[k];
            cpu_convert_half_to_float(ctx->half, h, buf[k], s[k] ? m : 1);
        }
        if (ctx->out_half) {
            ctx->inner(fin, s, res, m, ctx);
            cpu_convert_float_to_half(ctx->half, res, (uint16_t *)out + i0, m);
        } else {
            ctx->inner(fin, s, (uint8_t *)out + i0, m, ctx);
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Binary segments. EXPR computes one output from x (input 0) and y (input 1); inside it T is the
 * operand type and UT its unsigned twin (wrap-around integer arithmetic without signed overflow). */
#define EW_SEG2(name, TT, UTT, TC, EXPR)                                                                       \
    static void name(const void *const in[3], const int64_t s[3], void *out, int64_t n, const ew_ctx *ctx) {   \
        typedef TT T;                                                                                          \
        typedef UTT UT __attribute__((unused));                                                                \
        const T *a = in[0], *b = in[1];                                                                        \
        TC *c = out;                                                                                           \
        (void)ctx;                                                                                             \
        if (s[0] && s[1]) {                                                                                    \
            EW_IVDEP for (int64_t i = 0; i < n; i++) {                                                         \
                T x = a[i], y = b[i];                                                                          \
                (void)y;                                                                                       \
                c[i] = (TC)(EXPR);                                                                             \
            }                                                                                                  \
        } else if (s[0]) {                                                                                     \
            const T y = b[0];                                                                                  \
            (void)y;                                                                                           \
            EW_IVDEP for (int64_t i = 0; i < n; i++) {                                                         \
                T x = a[i];                                                                                    \
                c[i] = (TC)(EXPR);                                                                             \
            }                                                                                                  \
        } else if (s[1]) {                                                                                     \
            const T x = a[0];                                                                                  \
            EW_IVDEP for (int64_t i = 0; i < n; i++) {                                                         \
                T y = b[i];                                                                                    \
                (void)y;                                                                                       \
                c[i] = (TC)(EXPR);                                                                             \
            }                                                                                                  \
        } else {                                                                                               \
            const T x = a[0], y = b[0];                                                                        \
            (void)y;                                                                                           \
            for (int64_t i = 0; i < n; i++) c[i] = (TC)(EXPR);                                                 \
        }                                                                                                      \
    }

/* Type lists: M(op, suffix, DTYPE, T, UT, EXPR) */
#define EW_FLOATS(M, op, e) M(op, f32, FLOAT, float, float, e) M(op, f64, DOUBLE, double, double, e)
#define EW_SIGNED(M, op, e)                                                                                    \
    M(op, i8, INT8, int8_t, uint8_t, e) M(op, i16, INT16, int16_t, uint16_t, e)                                 \
    M(op, i32, INT32, int32_t, uint32_t, e) M(op, i64, INT64, int64_t, uint64_t, e)
#define EW_UNSIGNED(M, op, e)                                                                                  \
    M(op, u8, UINT8, uint8_t, uint8_t, e) M(op, u16, UINT16, uint16_t, uint16_t, e)                             \
    M(op, u32, UINT32, uint32_t, uint32_t, e) M(op, u64, UINT64, uint64_t, uint64_t, e)
#define EW_BOOLS(M, op, e) M(op, b8, BOOL, uint8_t, uint8_t, e)

#define EW_DEF_SAME(op, sfx, DT, T, UT, e) EW_SEG2(seg_##op##_##sfx, T, UT, T, e)
#define EW_DEF_BOOL(op, sfx, DT, T, UT, e) EW_SEG2(seg_##op##_##sfx, T, UT, uint8_t, e)
#define EW_ENTRY(op, sfx, DT, T, UT, e) [CINFER_DTYPE_##DT] = seg_##op##_##sfx,

/* Per-dtype segment table of one binary op; float16/bfloat16 run the FLOAT entry through the adapter. */
typedef struct ew_binop {
    ew_seg_fn fn[CINFER_DTYPE_BFLOAT16 + 1];
    bool bool_out;
} ew_binop;

/* wrap-around integer helpers */
static inline int64_t ew_ipow(int64_t base, int64_t e) {
    if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0; /* 1/base^|e| truncated */
    uint64_t r = 1, b = (uint64_t)base;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}
static inline uint64_t ew_upow(uint64_t b, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}
static inline bool ew_shift_ok(int64_t s, int bits) { return s >= 0 && s < bits; }
/* numpy's float mod: the result takes the divisor's sign */
static inline double ew_pymod(double x, double y) {
    double m = fmod(x, y);
    if (m != 0) {
        if ((y < 0) != (m < 0)) m += y;
    } else {
        m = copysign(0.0, y);
    }
    return m;
}
static inline float ew_pymodf(float x, float y) {
    float m = fmodf(x, y);
    if (m != 0) {
        if ((y < 0) != (m < 0)) m += y;
    } else {
        m = copysignf(0.0f, y);
    }
    return m;
}

/* ---- arithmetic ---- */
EW_FLOATS(EW_DEF_SAME, add, x + y)
EW_SIGNED(EW_DEF_SAME, add, (T)((UT)x + (UT)y))
EW_UNSIGNED(EW_DEF_SAME, add, (T)(x + y))
EW_FLOATS(EW_DEF_SAME, sub, x - y)
EW_SIGNED(EW_DEF_SAME, sub, (T)((UT)x - (UT)y))
EW_UNSIGNED(EW_DEF_SAME, sub, (T)(x - y))
EW_FLOATS(EW_DEF_SAME, mul, x * y)
EW_SIGNED(EW_DEF_SAME, mul, (T)(1u * (UT)x * (UT)y))
EW_UNSIGNED(EW_DEF_SAME, mul, (T)(1u * x * y))
/* integer division truncates toward zero (ONNX reference); x/0 gives 0 and MIN/-1 wraps, never a trap */
EW_FLOATS(EW_DEF_SAME, div, x / y)
EW_SIGNED(EW_DEF_SAME, div, y == 0 ? 0 : y == -1 ? (T)(0u - (UT)x) : (T)(x / y))
EW_UNSIGNED(EW_DEF_SAME, div, y == 0 ? 0 : (T)(x / y))
/* Mod fmod=1: C fmod / %, sign of the dividend */
EW_SEG2(seg_fmod_f32, float, float, float, fmodf(x, y))
EW_SEG2(seg_fmod_f64, double, double, double, fmod(x, y))
EW_SIGNED(EW_DEF_SAME, fmod, y == 0 || y == -1 ? 0 : (T)(x % y))
EW_UNSIGNED(EW_DEF_SAME, fmod, y == 0 ? 0 : (T)(x % y))
/* Mod fmod=0: Python's %, sign of the divisor */
EW_SEG2(seg_pmod_f32, float, float, float, ew_pymodf(x, y))
EW_SEG2(seg_pmod_f64, double, double, double, ew_pymod(x, y))
EW_SIGNED(EW_DEF_SAME, pmod,
          y == 0 || y == -1 ? 0 : (T)((x % y != 0 && ((x % y < 0) != (y < 0))) ? x % y + y : x % y))
EW_UNSIGNED(EW_DEF_SAME, pmod, y == 0 ? 0 : (T)(x % y))
/* Min/Max propagate NaN like numpy */
EW_FLOATS(EW_DEF_SAME, max, (x > y || x != x) ? x : y)
EW_SIGNED(EW_DEF_SAME, max, x > y ? x : y)
EW_UNSIGNED(EW_DEF_SAME, max, x > y ? x : y)
EW_FLOATS(EW_DEF_SAME, min, (x < y || x != x) ? x : y)
EW_SIGNED(EW_DEF_SAME, min, x < y ? x : y)
EW_UNSIGNED(EW_DEF_SAME, min, x < y ? x : y)
/* same-dtype Pow */
EW_SEG2(seg_pow_f32, float, float, float, powf(x, y))
EW_SEG2(seg_pow_f64, double, double, double, pow(x, y))
EW_SIGNED(EW_DEF_SAME, pow, (T)ew_ipow(x, y))
EW_UNSIGNED(EW_DEF_SAME, pow, (T)ew_upow(x, y))
/* PRelu: y is the slope */
EW_FLOATS(EW_DEF_SAME, prelu, x < 0 ? x * y : x)
EW_SIGNED(EW_DEF_SAME, prelu, x < 0 ? (T)(1u * (UT)x * (UT)y) : x)
/* bitwise */
EW_SIGNED(EW_DEF_SAME, band, x & y)
EW_UNSIGNED(EW_DEF_SAME, band, x & y)
EW_SIGNED(EW_DEF_SAME, bor, x | y)
EW_UNSIGNED(EW_DEF_SAME, bor, x | y)
EW_SIGNED(EW_DEF_SAME, bxor, x ^ y)
EW_UNSIGNED(EW_DEF_SAME, bxor, x ^ y)
/* shifts by a negative amount or the bit width or more: left gives 0, right fills with the sign */
EW_SIGNED(EW_DEF_SAME, shl, ew_shift_ok((int64_t)y, 8 * (int)sizeof(T)) ? (T)((UT)x << y) : 0)
EW_UNSIGNED(EW_DEF_SAME, shl, ew_shift_ok((int64_t)y, 8 * (int)sizeof(T)) ? (T)(1u * x << y) : 0)
EW_SIGNED(EW_DEF_SAME, shr, ew_shift_ok((int64_t)y, 8 * (int)sizeof(T)) ? (T)(x >> y) : (x < 0 ? -1 : 0))
EW_UNSIGNED(EW_DEF_SAME, shr, ew_shift_ok((int64_t)y, 8 * (int)sizeof(T)) ? (T)(x >> y) : 0)
/* comparisons and logic */
EW_FLOATS(EW_DEF_BOOL, eq, x == y)
EW_SIGNED(EW_DEF_BOOL, eq, x == y)
EW_UNSIGNED(EW_DEF_BOOL, eq, x == y)
EW_BOOLS(EW_DEF_BOOL, eq, (x != 0) == (y != 0))
EW_FLOATS(EW_DEF_BOOL, gt, x > y)
EW_SIGNED(EW_DEF_BOOL, gt, x > y)
EW_UNSIGNED(EW_DEF_BOOL, gt, x > y)
EW_FLOATS(EW_DEF_BOOL, ge, x >= y)
EW_SIGNED(EW_DEF_BOOL, ge, x >= y)
EW_UNSIGNED(EW_DEF_BOOL, ge, x >= y)
EW_FLOATS(EW_DEF_BOOL, lt, x < y)
EW_SIGNED(EW_DEF_BOOL, lt, x < y)
EW_UNSIGNED(EW_DEF_BOOL, lt, x < y)
EW_FLOATS(EW_DEF_BOOL, le, x <= y)
EW_SIGNED(EW_DEF_BOOL, le, x <= y)
EW_UNSIGNED(EW_DEF_BOOL, le, x <= y)
EW_BOOLS(EW_DEF_BOOL, and, (x != 0) & (y != 0))
EW_BOOLS(EW_DEF_BOOL, or, (x != 0) | (y != 0))
EW_BOOLS(EW_DEF_BOOL, xor, (x != 0) != (y != 0))

#define EW_ALL_NUM(op) EW_FLOATS(EW_ENTRY, op, 0) EW_SIGNED(EW_ENTRY, op, 0) EW_UNSIGNED(EW_ENTRY, op, 0)
#define EW_ALL_INT(op) EW_SIGNED(EW_ENTRY, op, 0) EW_UNSIGNED(EW_ENTRY, op, 0)

static const ew_binop op_add = {{EW_ALL_NUM(add)}, false};
static const ew_binop op_sub = {{EW_ALL_NUM(sub)}, false};
static const ew_binop op_mul = {{EW_ALL_NUM(mul)}, false};
static const ew_binop op_div = {{EW_ALL_NUM(div)}, false};
static const ew_binop op_fmod = {{EW_ALL_NUM(fmod)}, false};
static const ew_binop op_pmod = {{EW_ALL_NUM(pmod)}, false};
static const ew_binop op_max = {{EW_ALL_NUM(max)}, false};
static const ew_binop op_min = {{EW_ALL_NUM(min)}, false};
static const ew_binop op_pow = {{EW_ALL_NUM(pow)}, false};
static const ew_binop op_prelu = {{EW_FLOATS(EW_ENTRY, prelu, 0) EW_SIGNED(EW_ENTRY, prelu, 0)}, false};
static const ew_binop op_band = {{EW_ALL_INT(band)}, false};
static const ew_binop op_bor = {{EW_ALL_INT(bor)}, false};
static const ew_binop op_bxor = {{EW_ALL_INT(bxor)}, false};
static const ew_binop op_shl = {{EW_ALL_INT(shl)}, false};
static const ew_binop op_shr = {{EW_ALL_INT(shr)}, false};
static const ew_binop op_eq = {{EW_ALL_NUM(eq) EW_BOOLS(EW_ENTRY, eq, 0)}, true};
static const ew_binop op_gt = {{EW_ALL_NUM(gt)}, true};
static const ew_binop op_ge = {{EW_ALL_NUM(ge)}, true};
static const ew_binop op_lt = {{EW_ALL_NUM(lt)}, true};
static const ew_binop op_le = {{EW_ALL_NUM(le)}, true};
static const ew_binop op_and = {{EW_BOOLS(EW_ENTRY, and, 0)}, true};
static const ew_binop op_or = {{EW_BOOLS(EW_ENTRY, or, 0)}, true};
static const ew_binop op_xor = {{EW_BOOLS(EW_ENTRY, xor, 0)}, true};

/* Pow with a scalar exponent: the common squares and roots without powf */
EW_SEG2(seg_sq_f32, float, float, float, x * x)
EW_SEG2(seg_sq_f64, double, double, double, x * x)
EW_SEG2(seg_cube_f32, float, float, float, x * x * x)
EW_SEG2(seg_sqrt_f32, float, float, float, sqrtf(x))
EW_SEG2(seg_sqrt_f64, double, double, double, sqrt(x))
EW_SEG2(seg_first_f32, float, float, float, x)
EW_SEG2(seg_inv_f32, float, float, float, 1.0f / x)

/* Runs a binary op over a and b into out (shapes already checked by the schema). */
static cinfer_status ew_binary(const graph_node *n, const ew_binop *op, const tensor *a, const tensor *b,
                               tensor *out) {
    cinfer_dtype t = a->dtype;
    bool half = t == CINFER_DTYPE_FLOAT16 || t == CINFER_DTYPE_BFLOAT16;
    ew_seg_fn f = ((unsigned)t <= CINFER_DTYPE_BFLOAT16) ? op->fn[half ? CINFER_DTYPE_FLOAT : t] : NULL;
    if (!f || b->dtype != t) return cpu_unsupported_dtype(n, t);
    ew_ctx ctx = {0};
    ctx.esize[0] = ctx.esize[1] = cinfer_dtype_size(t);
    ctx.osize = cinfer_dtype_size(out->dtype);
    if (half) {
        ctx.inner = f;
        ctx.half = t;
        ctx.out_half = !op->bool_out;
        f = seg_half_adapter;
    }
    ew_plan p;
    const tensor *ops[2] = {a, b};
    ew_plan_init(&p, ops, 2, out);
    const void *base[3] = {a->data, b->data, NULL};
    ew_exec(&p, f, base, out->data, &ctx);
    return CINFER_OK;
}

#define EW_BINARY_KERNEL(name, opvar)                                                                          \
    static cinfer_status name(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {   \
        (void)num_in; (void)num_out;                                                                           \
        return ew_binary(n, &opvar, &in[0], &in[1], &out[0]);                                                  \
    }
EW_BINARY_KERNEL(run_add, op_add)
EW_BINARY_KERNEL(run_sub, op_sub)
EW_BINARY_KERNEL(run_mul, op_mul)
EW_BINARY_KERNEL(run_div, op_div)
EW_BINARY_KERNEL(run_prelu, op_prelu)
EW_BINARY_KERNEL(run_bitwise_and, op_band)
EW_BINARY_KERNEL(run_bitwise_or, op_bor)
EW_BINARY_KERNEL(run_bitwise_xor, op_bxor)
EW_BINARY_KERNEL(run_equal, op_eq)
EW_BINARY_KERNEL(run_greater, op_gt)
EW_BINARY_KERNEL(run_greater_equal, op_ge)
EW_BINARY_KERNEL(run_less, op_lt)
EW_BINARY_KERNEL(run_less_equal, op_le)
EW_BINARY_KERNEL(run_and, op_and)
EW_BINARY_KERNEL(run_or, op_or)
EW_BINARY_KERNEL(run_xor, op_xor)

static cinfer_status run_mod(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    return ew_binary(n, graph_attr_int(n, "fmod", 0) ? &op_fmod : &op_pmod, &in[0], &in[1], &out[0]);
}

static cinfer_status run_bitshift(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    bool left = strcmp(graph_attr_string(n, "direction", ""), "LEFT") == 0;
    return ew_binary(n, left ? &op_shl : &op_shr, &in[0], &in[1], &out[0]);
}

/* Converts a numeric double to dtype t at p[i] without undefined behaviour (NaN and out-of-range
 * values wrap through int64 like the usual hardware conversion). */
static int64_t ew_double_to_i64(double v) {
    if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
    return (int64_t)v;
}
static void ew_store_double(cinfer_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case CINFER_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case CINFER_DTYPE_FLOAT16: ((uint16_t *)p)[i] = dtype_float_to_half((float)v); break;
    case CINFER_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = dtype_float_to_bf16((float)v); break;
    case CINFER_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)ew_double_to_i64(v); break;
    case CINFER_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)ew_double_to_i64(v); break;
    case CINFER_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)ew_double_to_i64(v); break;
    case CINFER_DTYPE_INT64: ((int64_t *)p)[i] = ew_double_to_i64(v); break;
    case CINFER_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)ew_double_to_i64(v); break;
    case CINFER_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)ew_double_to_i64(v); break;
    case CINFER_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)ew_double_to_i64(v); break;
    case CINFER_DTYPE_UINT64:
        ((uint64_t *)p)[i] = v >= 9223372036854775808.0 && v < 18446744073709551616.0 ? (uint64_t)v
                                                                                      : (uint64_t)ew_double_to_i64(v);
        break;
    default: break;
    }
}

static void ew_store_int(cinfer_dtype t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case CINFER_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case CINFER_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case CINFER_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case CINFER_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
    case CINFER_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case CINFER_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case CINFER_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case CINFER_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: break;
    }
}

/* Pow: same dtype through the segment table (scalar exponents 2, 3, 0.5, 1, -1 without pow); mixed
 * dtypes (opset 15) element by element in double (or int64 when both are integers), like numpy's
 * power followed by a cast to the base dtype. */
static cinfer_status run_pow(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *a = &in[0], *b = &in[1];
    if (a->dtype == b->dtype) {
        if (tensor_numel(b) == 1 && tensor_same_shape(a, &out[0]) &&
            (a->dtype == CINFER_DTYPE_FLOAT || a->dtype == CINFER_DTYPE_DOUBLE)) {
            double e = tensor_get_double(b, 0);
            bool f32 = a->dtype == CINFER_DTYPE_FLOAT;
            ew_seg_fn f = NULL;
            if (e == 2.0) f = f32 ? seg_sq_f32 : seg_sq_f64;
            else if (e == 0.5) f = f32 ? seg_sqrt_f32 : seg_sqrt_f64;
            else if (f32 && e == 3.0) f = seg_cube_f32;
            else if (f32 && e == 1.0) f = seg_first_f32;
            else if (f32 && e == -1.0) f = seg_inv_f32;
            if (f) {
                ew_ctx ctx = {0};
                ctx.esize[0] = ctx.esize[1] = ctx.osize = cinfer_dtype_size(a->dtype);
                ew_plan p;
                const tensor *ops[2] = {a, b};
                ew_plan_init(&p, ops, 2, &out[0]);
                const void *base[3] = {a->data, b->data, NULL};
                ew_exec(&p, f, base, out[0].data, &ctx);
                return CINFER_OK;
            }
        }
        return ew_binary(n, &op_pow, a, b, &out[0]);
    }
    cpu_broadcast bc;
    cpu_broadcast_init(&bc, a, b, &out[0]);
    int64_t total = tensor_numel(&out[0]);
    bool ints = dtype_is_integer(a->dtype) && dtype_is_integer(b->dtype);
    for (int64_t i = 0; i < total; i++) {
        int64_t oa, ob;
        cpu_broadcast_offsets(&bc, i, &oa, &ob);
        if (ints) {
            if (a->dtype == CINFER_DTYPE_UINT64 || b->dtype == CINFER_DTYPE_UINT64)
                ew_store_int(a->dtype, out[0].data, i,
                             (int64_t)ew_upow((uint64_t)tensor_get_int(a, oa), (uint64_t)tensor_get_int(b, ob)));
            else
                ew_store_int(a->dtype, out[0].data, i, ew_ipow(tensor_get_int(a, oa), tensor_get_int(b, ob)));
        } else {
            ew_store_double(a->dtype, out[0].data, i, pow(tensor_get_double(a, oa), tensor_get_double(b, ob)));
        }
    }
    return CINFER_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* Where: a pure copy, so one segment per element size serves every dtype. */
#define EW_WHERE_SEG(name, T)                                                                                  \
    static void name(const void *const in[3], const int64_t s[3], void *out, int64_t n, const ew_ctx *ctx) {   \
        const uint8_t *c = in[0];                                                                              \
        const T *x = in[1], *y = in[2];                                                                        \
        T *o = out;                                                                                            \
        (void)ctx;                                                                                             \
        if (s[0] && s[1] && s[2]) {                                                                            \
            EW_IVDEP for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];                                \
        } else if (s[0] && s[1]) { /* masking with a scalar fill, as attention masks do */                     \
            const T yv = y[0];                                                                                 \
            EW_IVDEP for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : yv;                                  \
        } else if (s[0] && s[2]) {                                                                             \
            const T xv = x[0];                                                                                 \
            EW_IVDEP for (int64_t i = 0; i < n; i++) o[i] = c[i] ? xv : y[i];                                  \
        } else if (!s[0]) { /* one condition for the whole row: copy or fill from one side */                  \
            const T *src = c[0] ? x : y;                                                                       \
            int64_t ss = c[0] ? s[1] : s[2];                                                                   \
            if (ss) memmove(o, src, (size_t)n * sizeof(T));                                                    \
            else for (int64_t i = 0; i < n; i++) o[i] = src[0];                                                \
        } else {                                                                                               \
            int64_t s0 = s[0], s1 = s[1], s2 = s[2];                                                           \
            for (int64_t i = 0; i < n; i++) o[i] = c[i * s0] ? x[i * s1] : y[i * s2];                          \
        }                                                                                                      \
    }
EW_WHERE_SEG(seg_where_1, uint8_t)
EW_WHERE_SEG(seg_where_2, uint16_t)
EW_WHERE_SEG(seg_where_4, uint32_t)
EW_WHERE_SEG(seg_where_8, uint64_t)

static cinfer_status run_where(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    size_t es = cinfer_dtype_size(in[1].dtype);
    ew_seg_fn f = es == 1 ? seg_where_1 : es == 2 ? seg_where_2 : es == 4 ? seg_where_4 : es == 8 ? seg_where_8 : NULL;
    if (!f || in[0].dtype != CINFER_DTYPE_BOOL) return cpu_unsupported_dtype(n, in[1].dtype);
    ew_ctx ctx = {0};
    ctx.esize[0] = 1;
    ctx.esize[1] = ctx.esize[2] = ctx.osize = es;
    ew_plan p;
    const tensor *ops[3] = {&in[0], &in[1], &in[2]};
    ew_plan_init(&p, ops, 3, &out[0]);
    const void *base[3] = {in[0].data, in[1].data, in[2].data};
    ew_exec(&p, f, base, out[0].data, &ctx);
    return CINFER_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* Variadic Min/Max/Sum/Mean: out = op(in0, in1), then out = op(out, in_k); each step broadcasts to
 * out's shape. out may share in0's buffer (same shape then), which the first step reads in order. */
static cinfer_status ew_variadic(const graph_node *n, const ew_binop *op, const tensor *in, int num_in, tensor *out) {
    if (num_in == 1) {
        if (out->data != in[0].data) memcpy(out->data, in[0].data, tensor_nbytes(out));
        return CINFER_OK;
    }
    CINFER_TRY(ew_binary(n, op, &in[0], &in[1], out));
    for (int k = 2; k < num_in; k++) CINFER_TRY(ew_binary(n, op, out, &in[k], out));
    return CINFER_OK;
}

static cinfer_status run_max(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    return ew_variadic(n, &op_max, in, num_in, &out[0]);
}
static cinfer_status run_min(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    return ew_variadic(n, &op_min, in, num_in, &out[0]);
}
static cinfer_status run_sum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    return ew_variadic(n, &op_add, in, num_in, &out[0]);
}
static cinfer_status run_mean(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    cinfer_dtype t = in[0].dtype;
    if (!dtype_is_float(t)) return cpu_unsupported_dtype(n, t);
    CINFER_TRY(ew_variadic(n, &op_add, in, num_in, &out[0]));
    int64_t total = tensor_numel(&out[0]);
    double inv = 1.0 / num_in;
    if (t == CINFER_DTYPE_FLOAT) {
        float *y = out[0].data, s = (float)inv;
        for (int64_t i = 0; i < total; i++) y[i] *= s;
    } else if (t == CINFER_DTYPE_DOUBLE) {
        double *y = out[0].data;
        for (int64_t i = 0; i < total; i++) y[i] /= num_in;
    } else {
        uint16_t *y = out[0].data;
        for (int64_t i = 0; i < total; i++) y[i] = cpu_half_store(t, cpu_half_load(t, y[i]) / (float)num_in);
    }
    return CINFER_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* Kernels of the other elementwise files. */

const cpu_kernel cpu_elementwise_kernels[] = {
    {"Add", run_add}, {"Sub", run_sub}, {"Mul", run_mul}, {"Div", run_div}, {"Mod", run_mod}, {"Pow", run_pow},
    {"PRelu", run_prelu}, {"BitwiseAnd", run_bitwise_and}, {"BitwiseOr", run_bitwise_or},
    {"BitwiseXor", run_bitwise_xor}, {"BitShift", run_bitshift},
    {"Equal", run_equal}, {"Greater", run_greater}, {"GreaterOrEqual", run_greater_equal}, {"Less", run_less},
    {"LessOrEqual", run_less_equal}, {"And", run_and}, {"Or", run_or}, {"Xor", run_xor},
    {"Where", run_where},
    {"Max", run_max}, {"Min", run_min}, {"Sum", run_sum}, {"Mean", run_mean},
    /* elementwise_unary.c */
    {"Sqrt", cpu_run_unary_op}, {"Exp", cpu_run_unary_op}, {"Log", cpu_run_unary_op}, {"Neg", cpu_run_unary_op},
    {"Abs", cpu_run_unary_op}, {"Reciprocal", cpu_run_unary_op}, {"Erf", cpu_run_unary_op},
    {"Floor", cpu_run_unary_op}, {"Ceil", cpu_run_unary_op}, {"Round", cpu_run_unary_op},
    {"Sign", cpu_run_unary_op}, {"Sin", cpu_run_unary_op}, {"Cos", cpu_run_unary_op}, {"Tan", cpu_run_unary_op},
    {"Asin", cpu_run_unary_op}, {"Acos", cpu_run_unary_op}, {"Atan", cpu_run_unary_op},
    {"Sinh", cpu_run_unary_op}, {"Cosh", cpu_run_unary_op}, {"Tanh", cpu_run_unary_op},
    {"Asinh", cpu_run_unary_op}, {"Acosh", cpu_run_unary_op}, {"Atanh", cpu_run_unary_op},
    {"Relu", cpu_run_unary_op}, {"LeakyRelu", cpu_run_unary_op}, {"Sigmoid", cpu_run_unary_op},
    {"HardSigmoid", cpu_run_unary_op}, {"HardSwish", cpu_run_unary_op}, {"Softplus", cpu_run_unary_op},
    {"Softsign", cpu_run_unary_op}, {"Elu", cpu_run_unary_op}, {"Selu", cpu_run_unary_op},
    {"Celu", cpu_run_unary_op}, {"ThresholdedRelu", cpu_run_unary_op}, {"Mish", cpu_run_unary_op},
    {"Shrink", cpu_run_unary_op}, {"Gelu", cpu_run_unary_op}, {"IsNaN", cpu_run_unary_op},
    {"IsInf", cpu_run_unary_op}, {"Not", cpu_run_unary_op}, {"BitwiseNot", cpu_run_unary_op},
    {"Clip", cpu_run_clip},
    /* elementwise_cast.c */
    {"Cast", cpu_run_cast}, {"CastLike", cpu_run_cast},
    /* elementwise_chain.c (internal) */
    {"ElementwiseChain", cpu_run_elementwise_chain},
    {NULL, NULL},
};
