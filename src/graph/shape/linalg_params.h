/* Parameters of the linalg ops (MatMul, Gemm, MatMulInteger, QLinearMatMul) that both their schemas (shapes) and
 * their kernels (CPU and CUDA) work out: numpy matmul's matrix dims and broadcast batch geometry, Gemm's transposes,
 * scalars and C, and the quantized products' zero points and scales. */
#ifndef CINFER_GRAPH_SHAPE_LINALG_PARAMS_H
#define CINFER_GRAPH_SHAPE_LINALG_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"

/* MatMul (numpy matmul): A [..., m, k] (a 1-D A is [1, k]) times B [..., k, n] (a 1-D B is [k, 1]); the dims
 * before the last two broadcast. Output batch b (row-major over batch_dims[0..nb)) multiplies A's matrix number
 * sum(idx[d] * stride_a[d]) by B's sum(idx[d] * stride_b[d]): strides in whole matrices, 0 where an operand
 * broadcasts (or lacks the dim). */
typedef struct linalg_matmul {
    int64_t m, k, n;
    int a_batch_rank, b_batch_rank; /* A's and B's own batch dims (rank - 2, or 0) */
    int nb;                         /* broadcast batch rank: the larger of the two */
    int64_t batch_dims[CINFER_MAX_DIMS], stride_a[CINFER_MAX_DIMS], stride_b[CINFER_MAX_DIMS];
    int64_t batch; /* product of batch_dims */
} linalg_matmul;

/* Checks A and B (one supported dtype, rank >= 1, inner dims equal, batch dims broadcastable, result rank within
 * CINFER_MAX_DIMS) and works out the geometry. */
cinfer_status linalg_compute_matmul(const graph_node *n, const tensor *in, linalg_matmul *p);

/* MatMulInteger (A, B, a_zero_point?, b_zero_point?) and QLinearMatMul (a, a_scale, a_zero_point, b, b_scale,
 * b_zero_point, y_scale, y_zero_point): A and B int8 or uint8 (each its own), numpy matmul's geometry; the zero
 * points have their operand's dtype; each zero point and scale of A is one value or one per row of A ([m]), of B
 * one value or one per column of B ([n]); y's are one value. Pointers into the node's inputs, NULL when absent
 * (the scales and y's are absent for MatMulInteger). */
typedef struct linalg_qmatmul {
    linalg_matmul mm;
    bool qlinear;
    const tensor *a_zp, *b_zp, *a_scale, *b_scale, *y_scale, *y_zp;
} linalg_qmatmul;

cinfer_status linalg_compute_qmatmul(const graph_node *n, const tensor *in, int num_in, linalg_qmatmul *p);

/* Gemm: Y [m, n] = alpha * op(A) [m, k] * op(B) [k, n] + beta * C, C (optional) unidirectionally broadcast from
 * [c_rows, c_cols] (each 1 or the full extent). */
typedef struct linalg_gemm {
    bool trans_a, trans_b;
    float alpha, beta;
    int64_t m, n, k;
    bool has_c;
    int64_t c_rows, c_cols;
} linalg_gemm;

/* Checks A and B (one supported dtype, 2-D, inner dims equal) and C (A's dtype, broadcastable to [m, n]) and
 * reads the attributes. */
cinfer_status linalg_compute_gemm(const graph_node *n, const tensor *in, int num_in, linalg_gemm *p);

#endif
