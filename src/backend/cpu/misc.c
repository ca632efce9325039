/* CPU kernels of the misc family: CumSum/CumProd, the losses, ReverseSequence, BitCast, and the table (Einsum
 * lives in misc_einsum.c, the quantize ops in misc_quant.c). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"

#define PAR_MIN 32768 /* elements below which a kernel stays on one thread */
#define LANES 256     /* CumSum/CumProd: inner positions scanned together */

/* defined in misc_einsum.c and misc_quant.c */
cinfer_status cpu_run_einsum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_dequantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_dynamic_quantize(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* ---------------------------------------------------------------------------------------------------
 * CumSum, CumProd: x viewed as [outer, len, inner]; each inner lane scans along len. Reads element i
 * before writing it, so the output may share the input's buffer.
 * ------------------------------------------------------------------------------------------------- */

/* T: storage type, A: accumulator type, LD/ST convert, OP folds v into acc, ID is the identity. Half
 * types round the running value to their precision each step, as a scan in that dtype does. */
#define DEFINE_SCAN(NAME, T, A, LD, ST, OP, ID)                                                               \
    static void NAME(const void *xv, void *yv, int64_t outer, int64_t len, int64_t inner, bool excl, bool rev) { \
        const T *x = xv;                                                                                      \
        T *y = yv;                                                                                            \
        int64_t chunks = (inner + LANES - 1) / LANES;                                                         \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(outer * len * inner > PAR_MIN)")          \
        for (int64_t job = 0; job < outer * chunks; job++) {                                                  \
            int64_t o = job / chunks, i0 = (job % chunks) * LANES;                                            \
            int64_t w = inner - i0 < LANES ? inner - i0 : LANES;                                              \
            A acc[LANES];                                                                                     \
            for (int64_t i = 0; i < w; i++) acc[i] = ID;                                                      \
            for (int64_t s = 0; s < len; s++) {                                                               \
                int64_t l = rev ? len - 1 - s : s;                                                            \
                int64_t base = (o * len + l) * inner + i0;                                                    \
                const T *xs = x + base;                                                                       \
                T *ys = y + base;                                                                             \
                if (excl) {                                                                                   \
                    for (int64_t i = 0; i < w; i++) {                                                         \
                        A v = LD(xs[i]);                                                                      \
                        ys[i] = ST(acc[i]);                                                                   \
                        acc[i] = OP(acc[i], v);                                                               \
                    }                                                                                         \
                } else {                                                                                      \
                    for (int64_t i = 0; i < w; i++) {                                                         \
                        acc[i] = OP(acc[i], LD(xs[i]));                                                       \
                        ys[i] = ST(acc[i]);                                                                   \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

#define ID_LD(v) (v)
#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))
#define H_LD(v) dtype_half_to_float(v)
#define H_ST(a) dtype_float_to_half(a)
#define B_LD(v) dtype_bf16_to_float(v)
#define B_ST(a) dtype_float_to_bf16(a)
/* signed integers wrap like the two's-complement hardware instead of overflowing (undefined in C) */
#define I32_ST(a) ((int32_t)(a))
#define I64_ST(a) ((int64_t)(a))
#define I32_LD(v) ((uint32_t)(v))
#define I64_LD(v) ((uint64_t)(v))
#define H_ADD(a, b) dtype_half_to_float(dtype_float_to_half((a) + (b)))
#define H_MUL(a, b) dtype_half_to_float(dtype_float_to_half((a) * (b)))
#define B_ADD(a, b) dtype_bf16_to_float(dtype_float_to_bf16((a) + (b)))
#define B_MUL(a, b) dtype_bf16_to_float(dtype_float_to_bf16((a) * (b)))

DEFINE_SCAN(cumsum_f32, float, float, ID_LD, ID_LD, ADD, 0.0f)
DEFINE_SCAN(cumsum_f64, double, double, ID_LD, ID_LD, ADD, 0.0)
DEFINE_SCAN(cumsum_f16, uint16_t, float, H_LD, H_ST, H_ADD, 0.0f)
DEFINE_SCAN(cumsum_bf16, uint16_t, float, B_LD, B_ST, B_ADD, 0.0f)
DEFINE_SCAN(cumsum_i32, int32_t, uint32_t, I32_LD, I32_ST, ADD, 0u)
DEFINE_SCAN(cumsum_i64, int64_t, uint64_t, I64_LD, I64_ST, ADD, 0u)
DEFINE_SCAN(cumsum_u32, uint32_t, uint32_t, ID_LD, ID_LD, ADD, 0u)
DEFINE_SCAN(cumsum_u64, uint64_t, uint64_t, ID_LD, ID_LD, ADD, 0u)
DEFINE_SCAN(cumprod_f32, float, float, ID_LD, ID_LD, MUL, 1.0f)
DEFINE_SCAN(cumprod_f64, double, double, ID_LD, ID_LD, MUL, 1.0)
DEFINE_SCAN(cumprod_f16, uint16_t, float, H_LD, H_ST, H_MUL, 1.0f)
DEFINE_SCAN(cumprod_bf16, uint16_t, float, B_LD, B_ST, B_MUL, 1.0f)
DEFINE_SCAN(cumprod_i32, int32_t, uint32_t, I32_LD, I32_ST, MUL, 1u)
DEFINE_SCAN(cumprod_i64, int64_t, uint64_t, I64_LD, I64_ST, MUL, 1u)
DEFINE_SCAN(cumprod_u32, uint32_t, uint32_t, ID_LD, ID_LD, MUL, 1u)
DEFINE_SCAN(cumprod_u64, uint64_t, uint64_t, ID_LD, ID_LD, MUL, 1u)

typedef void (*scan_fn)(const void *, void *, int64_t, int64_t, int64_t, bool, bool);

static cinfer_status run_cum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0];
    bool prod = strcmp(n->op_type, "CumProd") == 0;
    scan_fn f = NULL;
    switch (x->dtype) {
    case CINFER_DTYPE_FLOAT: f = prod ? cumprod_f32 : cumsum_f32; break;
    case CINFER_DTYPE_DOUBLE: f = prod ? cumprod_f64 : cumsum_f64; break;
    case CINFER_DTYPE_FLOAT16: f = prod ? cumprod_f16 : cumsum_f16; break;
    case CINFER_DTYPE_BFLOAT16: f = prod ? cumprod_bf16 : cumsum_bf16; break;
    case CINFER_DTYPE_INT32: f = prod ? cumprod_i32 : cumsum_i32; break;
    case CINFER_DTYPE_INT64: f = prod ? cumprod_i64 : cumsum_i64; break;
    case CINFER_DTYPE_UINT32: f = prod ? cumprod_u32 : cumsum_u32; break;
    case CINFER_DTYPE_UINT64: f = prod ? cumprod_u64 : cumsum_u64; break;
    default: return cpu_unsupported_dtype(n, x->dtype);
    }
    if (!in[1].data || tensor_numel(&in[1]) != 1)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': axis must be one known value", n->op_type,
                          n->name);
    int64_t a = tensor_get_int(&in[1], 0);
    if (a < 0) a += x->ndim;
    if (a < 0 || a >= x->ndim)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': axis %lld is out of range for rank %d",
                          n->op_type, n->name, (long long)tensor_get_int(&in[1], 0), x->ndim);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; d++) outer *= x->dims[d];
    for (int d = (int)a + 1; d < x->ndim; d++) inner *= x->dims[d];
    if (tensor_numel(x) == 0) return CINFER_OK;
    f(x->data, out[0].data, outer, x->dims[a], inner, graph_attr_int(n, "exclusive", 0) != 0,
      graph_attr_int(n, "reverse", 0) != 0);
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss: input [N, C, D...], target [N, D...]. Each (n, d)
 * takes -w[t] * logp[n, t, d]; ignored targets weigh 0; mean divides by the summed weights.
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status run_loss(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    const tensor *x = &in[0], *target = &in[1];
    bool softmax = strcmp(n->op_type, "SoftmaxCrossEntropyLoss") == 0;
    const tensor *weight = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    const graph_attr *ii_attr = graph_node_attr(n, "ignore_index");
    bool has_ii = ii_attr != NULL;
    int64_t ii = has_ii ? ii_attr->i : 0;
    const char *red = graph_attr_string(n, "reduction", "mean");
    bool none = strcmp(red, "none") == 0, mean = strcmp(red, "mean") == 0;
    tensor *log_prob = softmax && num_out > 1 && out[1].data ? &out[1] : NULL;
    if (x->dtype != CINFER_DTYPE_FLOAT && x->dtype != CINFER_DTYPE_DOUBLE && x->dtype != CINFER_DTYPE_FLOAT16 &&
        x->dtype != CINFER_DTYPE_BFLOAT16)
        return cpu_unsupported_dtype(n, x->dtype);
    int64_t N = x->dims[0], C = x->dims[1], D = 1;
    for (int d = 2; d < x->ndim; d++) D *= x->dims[d];
    /* float32 reads directly (the common case); other types through cpu_load_f64 */
    const float *xf = x->dtype == CINFER_DTYPE_FLOAT ? x->data : NULL;
#define XV(i) (xf ? (double)xf[i] : cpu_load_f64(x->data, x->dtype, (i)))
    int64_t count = N * D, bad = 0;
    int bad_seen = 0;
    double total = 0, wsum = 0;
#pragma omp parallel for num_threads(cpu_num_threads()) if (count * C > PAR_MIN) reduction(+ : total, wsum)
    for (int64_t j = 0; j < count; j++) {
        int64_t b = j / D, d = j % D, base = b * C * D + d;
        int64_t t = tensor_get_int(target, j);
        double shift = 0; /* SoftmaxCrossEntropyLoss: logp = x - max - log(sum(exp(x - max))) */
        if (softmax) {
            double m = -INFINITY, s = 0;
            for (int64_t c = 0; c < C; c++) {
                double v = XV(base + c * D);
                m = v > m ? v : m;
            }
            for (int64_t c = 0; c < C; c++) s += exp(XV(base + c * D) - m);
            shift = m + log(s);
            if (log_prob)
                for (int64_t c = 0; c < C; c++)
                    cpu_store_f64(log_prob->data, log_prob->dtype, base + c * D, XV(base + c * D) - shift);
        }
        double loss = 0, w = 0;
        if (!(has_ii && t == ii)) {
            if (t < 0 || t >= C) {
#pragma omp critical(cinfer_loss_bad)
                {
                    bad = t;
                    bad_seen = 1;
                }
                continue;
            }
            w = weight ? cpu_load_f64(weight->data, weight->dtype, t) : 1.0;
            loss = -w * (XV(base + t * D) - shift);
        }
        if (none) cpu_store_f64(out[0].data, out[0].dtype, j, loss);
        total += loss;
        wsum += w;
    }
#undef XV
    if (bad_seen)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': target %lld is out of range for C = %lld",
                          n->op_type, n->name, (long long)bad, (long long)C);
    if (!none) cpu_store_f64(out[0].data, out[0].dtype, 0, mean ? total / wsum : total);
    return CINFER_OK;
}

/* ---------------------------------------------------------------------------------------------------
 * ReverseSequence, BitCast
 * ------------------------------------------------------------------------------------------------- */

static cinfer_status run_reverse_sequence(const graph_node *n, const tensor *in, int num_in, tensor *out,
                                          int num_out) {
    (void)num_in; (void)num_out;
    const tensor *x = &in[0], *lens = &in[1];
    size_t es = cinfer_dtype_size(x->dtype);
    if (es == 0) return cpu_unsupported_dtype(n, x->dtype);
    int batch_axis = (int)graph_attr_int(n, "batch_axis", 1);
    int64_t B = x->dims[batch_axis], T = x->dims[1 - batch_axis], inner = 1;
    for (int d = 2; d < x->ndim; d++) inner *= x->dims[d];
    for (int64_t b = 0; b < B; b++) {
        int64_t l = tensor_get_int(lens, b);
        if (l < 0 || l > T)
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "ReverseSequence node '%s': sequence_lens[%lld] is %lld, "
                              "expected 0..%lld", n->name, (long long)b, (long long)l, (long long)T);
    }
    size_t row = (size_t)inner * es;
#pragma omp parallel for num_threads(cpu_num_threads()) if (B * T * inner > PAR_MIN)
    for (int64_t job = 0; job < B * T; job++) {
        int64_t b = job / T, t = job % T, l = tensor_get_int(lens, b);
        int64_t src_t = t < l ? l - 1 - t : t;
        int64_t dst_row = batch_axis == 0 ? b * T + t : t * B + b;
        int64_t src_row = batch_axis == 0 ? b * T + src_t : src_t * B + b;
        memcpy((char *)out[0].data + (size_t)dst_row * row, (const char *)x->data + (size_t)src_row * row, row);
    }
    return CINFER_OK;
}

static cinfer_status run_bitcast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)n; (void)num_in; (void)num_out;
    size_t bytes = tensor_nbytes(&in[0]);
    if (bytes && out[0].data != in[0].data) memcpy(out[0].data, in[0].data, bytes);
    return CINFER_OK;
}

const cpu_kernel cpu_misc_kernels[] = {
    {"CumSum", run_cum},
    {"CumProd", run_cum},
    {"Einsum", cpu_run_einsum},
    {"NegativeLogLikelihoodLoss", run_loss},
    {"SoftmaxCrossEntropyLoss", run_loss},
    {"QuantizeLinear", cpu_run_quantize},
    {"DequantizeLinear", cpu_run_dequantize},
    {"DynamicQuantizeLinear", cpu_run_dynamic_quantize},
    {"ReverseSequence", run_reverse_sequence},
    {"BitCast", run_bitcast},
    {NULL, NULL},
};
