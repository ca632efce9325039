/* The op families: the one list that groups ops in the schema registry and in both backends.
 *
 * A family's code carries its name in every tree: graph/shape/<family>.c (schemas), backend/cpu/<family>.c,
 * backend/cuda/ops/<family>.c (host side) and backend/cuda/kernels/<family>.cu + <family>.h (kernels and their
 * launchers). A family split over several files names the other parts <family>_<part> (reduce_topk.c,
 * reduce_topk.cu), the same part name in every tree that has it. tests/unit/test_op_families.c checks the trees
 * against this list.
 *
 * Each family <name> defines shape_<name>_schemas[], cpu_<name>_kernels[] and cuda_<name>_kernels[]; the
 * registry (op_registry.c) and the backends' kernel lookups (cpu_backend.c, cuda_ops.c) build their tables from
 * OP_FAMILIES, so a family added here without its tables fails to link. The order is the registry's order
 * (op_schema_at indices and lookup precedence follow it): add new families at the end.
 */
#ifndef CINFER_GRAPH_OP_FAMILIES_H
#define CINFER_GRAPH_OP_FAMILIES_H

/* X(ID, name): OP_FAMILY_<ID> is the family's id, <name> its file stem and table infix. */
#define OP_FAMILIES(X)                                                                                               \
    X(ELEMENTWISE, elementwise) /* unary, binary with broadcasting, compare, logic, Where, Cast, ElementwiseChain */ \
    X(LINALG, linalg)           /* MatMul, Gemm, MatMulInteger, QLinearMatMul */                                     \
    X(CONV, conv)               /* Conv, ConvTranspose, BatchNormalization, pools, ConvInteger, QLinearConv */       \
    X(REDUCE, reduce)           /* Reduce*, ArgMax/ArgMin, TopK, Softmax-like ops, normalisations */                 \
    X(MOVEMENT, movement)       /* reshapes, transposes, concat/split/slice, gathers, scatters, pads, generators */  \
    X(ATTENTION, attention)     /* Attention, RotaryEmbedding, Swish, SwiGLU, LinearAttention, CausalConvWithState */ \
    X(IMAGE, image)             /* Resize, GridSample, AffineGrid, CenterCropPad, Col2Im */                          \
    X(MISC, misc)               /* CumSum/CumProd, Einsum, losses, (De)QuantizeLinear, ReverseSequence, BitCast */   \
    X(RECURRENT, recurrent)     /* LSTM, GRU, RNN */                                                                 \
    X(SIGNAL, signal)           /* windows, DFT, STFT, MelWeightMatrix, RoiAlign, MaxRoiPool, MaxUnpool, Det */

typedef enum op_family {
#define OP_FAMILY_ENUM_ENTRY(ID, name) OP_FAMILY_##ID,
    OP_FAMILIES(OP_FAMILY_ENUM_ENTRY)
#undef OP_FAMILY_ENUM_ENTRY
        OP_FAMILY_COUNT
} op_family;

/* The family's file stem ("reduce"); NULL for an id outside [0, OP_FAMILY_COUNT). */
const char *op_family_name(op_family family);

#endif
