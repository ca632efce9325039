/* Entry points the elementwise kernel files share (elementwise.c, elementwise_unary.c, elementwise_cast.c). */
#ifndef CINFER_CPU_ELEMENTWISE_INTERNAL_H
#define CINFER_CPU_ELEMENTWISE_INTERNAL_H

#include "backend/cpu/cpu_kernels.h"

/* Bulk float16/bfloat16 <-> float conversion (t selects which 16-bit format), round to nearest even. */
void cpu_convert_half_to_float(cinfer_dtype t, const uint16_t *src, float *dst, int64_t n);
void cpu_convert_float_to_half(cinfer_dtype t, const float *src, uint16_t *dst, int64_t n);

cinfer_status cpu_run_unary_op(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_clip(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
cinfer_status cpu_run_cast(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

#endif
