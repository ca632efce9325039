/* C prototypes of the elementwise family's launchers (kernels/elementwise.cu, elementwise_unary.cu,
 * elementwise_cast.cu), called by ops/elementwise.c. Every launcher queues on `stream` and returns
 * cudaGetLastError(); the *_supported functions say beforehand which dtypes a launcher has. */
#ifndef CINFER_CUDA_KERNELS_ELEMENTWISE_H
#define CINFER_CUDA_KERNELS_ELEMENTWISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels/kernel_types.h"
#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Binary ops on two operands of one dtype (float16/bfloat16 computed in float32, like the CPU). */
typedef enum cuda_ew_binary_op {
    CUDA_EW_ADD,
    CUDA_EW_SUB,
    CUDA_EW_MUL,
    CUDA_EW_DIV,        /* integers: truncating, x/0 = 0, MIN/-1 wraps */
    CUDA_EW_FMOD,       /* Mod fmod=1: sign of the dividend */
    CUDA_EW_PMOD,       /* Mod fmod=0: sign of the divisor (Python) */
    CUDA_EW_MAX,        /* NaN propagates */
    CUDA_EW_MIN,
    CUDA_EW_POW,
    CUDA_EW_POW_SCALAR, /* float/double base, one exponent for all: 2, 0.5 (and float 3, 1, -1) without pow */
    CUDA_EW_PRELU,      /* b is the slope */
    CUDA_EW_BITWISE_AND,
    CUDA_EW_BITWISE_OR,
    CUDA_EW_BITWISE_XOR,
    CUDA_EW_SHIFT_LEFT,
    CUDA_EW_SHIFT_RIGHT,
    CUDA_EW_EQUAL, /* bool output from here on */
    CUDA_EW_GREATER,
    CUDA_EW_GREATER_EQUAL,
    CUDA_EW_LESS,
    CUDA_EW_LESS_EQUAL,
    CUDA_EW_AND, /* bool operands */
    CUDA_EW_OR,
    CUDA_EW_XOR,
} cuda_ew_binary_op;

/* Unary ops: output has the input's dtype, except IsNaN/IsInf (bool). */
typedef enum cuda_ew_unary_op {
    CUDA_EW_SQRT,
    CUDA_EW_EXP,
    CUDA_EW_LOG,
    CUDA_EW_NEG,
    CUDA_EW_ABS,
    CUDA_EW_RECIPROCAL,
    CUDA_EW_ERF,
    CUDA_EW_FLOOR,
    CUDA_EW_CEIL,
    CUDA_EW_ROUND,
    CUDA_EW_SIGN,
    CUDA_EW_SIN,
    CUDA_EW_COS,
    CUDA_EW_TAN,
    CUDA_EW_ASIN,
    CUDA_EW_ACOS,
    CUDA_EW_ATAN,
    CUDA_EW_SINH,
    CUDA_EW_COSH,
    CUDA_EW_TANH,
    CUDA_EW_ASINH,
    CUDA_EW_ACOSH,
    CUDA_EW_ATANH,
    CUDA_EW_RELU,
    CUDA_EW_LEAKY_RELU,
    CUDA_EW_SIGMOID,
    CUDA_EW_HARD_SIGMOID,
    CUDA_EW_HARD_SWISH,
    CUDA_EW_SOFTPLUS,
    CUDA_EW_SOFTSIGN,
    CUDA_EW_ELU,
    CUDA_EW_SELU,
    CUDA_EW_CELU,
    CUDA_EW_THRESHOLDED_RELU,
    CUDA_EW_MISH,
    CUDA_EW_SHRINK,
    CUDA_EW_GELU,
    CUDA_EW_GELU_TANH,
    CUDA_EW_ISNAN,
    CUDA_EW_ISINF,
    CUDA_EW_NOT,
    CUDA_EW_BITWISE_NOT,
} cuda_ew_unary_op;

/* Attributes of the unary ops (ONNX defaults filled in by the host). */
typedef struct cuda_ew_unary_params {
    float alpha, beta, gamma; /* Shrink: alpha = lambd, beta = bias */
    int flag;                 /* IsInf: 1 detect positive, 2 detect negative */
} cuda_ew_unary_params;

/* Clip bounds: lo/hi are device scalars of x's dtype (read on the device) or NULL; without one, a bound
 * from the Clip-6 attributes (attr_*) or else the dtype's extreme. */
typedef struct cuda_ew_clip_bounds {
    const void *lo, *hi;
    bool attr_lo, attr_hi;
    float attr_lo_value, attr_hi_value;
} cuda_ew_clip_bounds;

/* ---- elementwise.cu ---- */
bool cuda_ew_binary_supported(cuda_ew_binary_op op, cinfer_dtype t);
/* out[i] = op(a[bc offset 0], b[bc offset 1]) for i < n; out may be a when a has out's shape. */
cudaError_t cuda_ew_binary(cuda_ew_binary_op op, cinfer_dtype t, const void *a, const void *b, void *out,
                           const cuda_broadcast *bc, int64_t n, cudaStream_t stream);
/* Pow with base and exponent of different numeric dtypes (opset 15): in int64 when both are integers (uint64
 * when one is), else in double; the result is cast to the base's dtype. */
cudaError_t cuda_ew_pow_mixed(cinfer_dtype ta, const void *a, cinfer_dtype tb, const void *b, void *out,
                              const cuda_broadcast *bc, int64_t n, cudaStream_t stream);
/* out[i] = cond[..] ? x[..] : y[..] for elements of elem_size bytes (1, 2, 4 or 8). */
cudaError_t cuda_ew_where(size_t elem_size, const void *cond, const void *x, const void *y, void *out,
                          const cuda_broadcast *bc, int64_t n, cudaStream_t stream);
/* Copies n elements of elem_size bytes (1, 2, 4 or 8) from src to dst. */
cudaError_t cuda_ew_copy(size_t elem_size, const void *src, void *dst, int64_t n, cudaStream_t stream);
/* Mean's last step: data[i] /= count (float: times (float)(1.0/count), like the CPU). */
cudaError_t cuda_ew_mean_scale(cinfer_dtype t, void *data, int64_t n, int count, cudaStream_t stream);

/* ---- elementwise_unary.cu ---- */
bool cuda_ew_unary_supported(cuda_ew_unary_op op, cinfer_dtype t);
/* y[i] = op(x[i]) for i < n; y may be x. */
cudaError_t cuda_ew_unary(cuda_ew_unary_op op, cinfer_dtype t, const void *x, void *y, int64_t n,
                          cuda_ew_unary_params params, cudaStream_t stream);
bool cuda_ew_clip_supported(cinfer_dtype t);
/* y[i] = min(max(x[i], lo), hi) for i < n (NaN stays NaN; lo > hi gives hi); y may be x. */
cudaError_t cuda_ew_clip(cinfer_dtype t, const void *x, void *y, int64_t n, cuda_ew_clip_bounds bounds,
                         cudaStream_t stream);

/* ---- elementwise_cast.cu ---- */
/* Whether Cast handles dtype t as a source or a target (every numeric dtype, bool, float16, bfloat16). */
bool cuda_ew_cast_supported(cinfer_dtype t);
/* y[i] = (to)x[i] for i < n with the CPU's rounding and out-of-range rules; from != to. */
cudaError_t cuda_ew_cast(cinfer_dtype from, cinfer_dtype to, const void *x, void *y, int64_t n,
                         cudaStream_t stream);

/* ---- elementwise_chain.cu ---- */
struct chain_program;
/* y[i] = chain_apply(program, x[i]) for i < n (graph/shape/elementwise_chain.h), x and y each float, float16 or
 * bfloat16 (they may differ); y may be x when the types have one size. cudaErrorNotSupported for other dtypes. */
cudaError_t cuda_ew_chain(cinfer_dtype xt, cinfer_dtype yt, const void *x, void *y, int64_t n,
                          const struct chain_program *program, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
