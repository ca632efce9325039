/* The internal ElementwiseChain op: a run of float elementwise steps applied to each element in float32 in one pass
 * (graph_fuse_elementwise_chains in graph/fusion.c folds Sub, Div, Add, Clip, Relu... with scalar constants into
 * one).
 *
 * Its program (which steps, with which constants) and the per-element math live here, in plain C. The CUDA kernel
 * (backend/cuda/kernels/elementwise_chain.cu) runs chain_apply per element; the CPU kernel
 * (backend/cpu/elementwise_chain.c) runs the same steps one at a time over L1-sized blocks so each vectorises, its
 * unary steps through the single ops' own loops. The node carries the program as the internal attributes
 * "cinfer_chain_ops" (one opcode per step), "cinfer_chain_args" (two floats per step) and, where it also absorbed
 * a precision cast at its output, "cinfer_chain_to" (the output dtype; else the input's).
 */
#ifndef CINFER_GRAPH_SHAPE_ELEMENTWISE_CHAIN_H
#define CINFER_GRAPH_SHAPE_ELEMENTWISE_CHAIN_H

#include <math.h>

#define CHAIN_MAX_STEPS 16

/* Steps; a and b are the step's two constants. The comparisons keep NaN as the single ops do (Relu and Clip pass
 * it through). */
typedef enum chain_op {
    CHAIN_ADD,        /* x + a */
    CHAIN_SUB,        /* x - a */
    CHAIN_RSUB,       /* a - x */
    CHAIN_MUL,        /* x * a */
    CHAIN_DIV,        /* x / a */
    CHAIN_RDIV,       /* a / x */
    CHAIN_CLIP,       /* x below a -> a, above b -> b */
    CHAIN_RELU,       /* x < 0 -> 0 */
    CHAIN_LEAKY_RELU, /* x < 0 -> a * x */
    CHAIN_SIGMOID,
    CHAIN_TANH,
    CHAIN_EXP,
    CHAIN_LOG,
    CHAIN_ABS,
    CHAIN_NEG,
    CHAIN_SQRT,
    CHAIN_ERF,
    CHAIN_NUM_OPS
} chain_op;

typedef struct chain_program {
    int num_steps;
    unsigned char op[CHAIN_MAX_STEPS];
    float a[CHAIN_MAX_STEPS], b[CHAIN_MAX_STEPS];
} chain_program;

#ifdef __CUDACC__
#define CHAIN_FN static __host__ __device__ __forceinline__
#else
#define CHAIN_FN static inline
#endif

/* One element through the program (the CUDA kernel's; the CPU kernel's step loops use these formulas). */
CHAIN_FN float chain_apply(const chain_program *p, float x) {
    for (int s = 0; s < p->num_steps; s++) {
        const float a = p->a[s], b = p->b[s];
        switch (p->op[s]) {
        case CHAIN_ADD: x = x + a; break;
        case CHAIN_SUB: x = x - a; break;
        case CHAIN_RSUB: x = a - x; break;
        case CHAIN_MUL: x = x * a; break;
        case CHAIN_DIV: x = x / a; break;
        case CHAIN_RDIV: x = a / x; break;
        case CHAIN_CLIP: x = x < a ? a : x; x = x > b ? b : x; break;
        case CHAIN_RELU: x = x < 0.0f ? 0.0f : x; break;
        case CHAIN_LEAKY_RELU: x = x < 0.0f ? a * x : x; break;
        case CHAIN_SIGMOID: x = 1.0f / (1.0f + expf(-x)); break;
        case CHAIN_TANH: x = tanhf(x); break;
        case CHAIN_EXP: x = expf(x); break;
        case CHAIN_LOG: x = logf(x); break;
        case CHAIN_ABS: x = fabsf(x); break;
        case CHAIN_NEG: x = -x; break;
        case CHAIN_SQRT: x = sqrtf(x); break;
        case CHAIN_ERF: x = erff(x); break;
        default: break;
        }
    }
    return x;
}

#ifndef __CUDACC__
#include "graph/graph.h"

/* The single op a unary step is (the fusion matches it, the CPU kernel runs its float32 loop); NULL for the
 * arithmetic and Clip steps. */
static inline const char *chain_unary_op_type(int op) {
    switch (op) {
    case CHAIN_RELU: return "Relu";
    case CHAIN_LEAKY_RELU: return "LeakyRelu";
    case CHAIN_SIGMOID: return "Sigmoid";
    case CHAIN_TANH: return "Tanh";
    case CHAIN_EXP: return "Exp";
    case CHAIN_LOG: return "Log";
    case CHAIN_ABS: return "Abs";
    case CHAIN_NEG: return "Neg";
    case CHAIN_SQRT: return "Sqrt";
    case CHAIN_ERF: return "Erf";
    default: return NULL;
    }
}

/* Reads and checks node n's program (an ElementwiseChain node); the error names the node. */
cinfer_status chain_program_read(const graph_node *n, chain_program *p);
#endif

#endif
