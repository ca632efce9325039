/* Entry points the elementwise kernel files share (elementwise.c, elementwise_unary.c, elementwise_cast.c,
 * elementwise_chain.c; linalg.c runs a Gemm's fused Relu through cpu_run_unary_op). */
#ifndef CINFER_CPU_ELEMENTWISE_INTERNAL_H
#define CINFER_CPU_ELEMENTWISE_INTERNAL_H

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h" /* cpu_convert_half_to_float / cpu_convert_float_to_half */

/* Unary op parameters (attributes with the ONNX defaults) and a loop over n elements of x into y, the element types
 * the function's own (elementwise_unary.c). */
typedef struct un_params {
    float alpha, beta, gamma;
    int flag;
} un_params;
typedef void (*un_fn)(const void *x, void *y, int64_t n, const un_params *p);
/* The float32 loop cpu_run_unary_op runs for op_type (Relu, Exp, Sigmoid...; y may be x), for kernels that apply it
 * to float buffers of their own (ElementwiseChain: the same results bit for bit); NULL when there is none. */
un_fn cpu_unary_f32_loop(const char *op_type);

cinfer_status cpu_run_unary_op(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_clip(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_cast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_elementwise_chain(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

#endif
