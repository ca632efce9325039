/* Entry points the elementwise kernel files share (elementwise.c, elementwise_unary.c, elementwise_cast.c,
 * elementwise_chain.c; linalg.c runs a Gemm's fused Relu through cpu_run_unary_op). */
#ifndef CINFER_CPU_ELEMENTWISE_INTERNAL_H
#define CINFER_CPU_ELEMENTWISE_INTERNAL_H

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h" /* cpu_convert_half_to_float / cpu_convert_float_to_half */

cinfer_status cpu_run_unary_op(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_clip(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_cast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_elementwise_chain(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

#endif
