/* cinfer's graph IR: values (tensors) and nodes in topological order, attributes, and the passes on it.
 *
 * A value is anything an edge carries: a model input, a constant (initializer or folded), or a node output.
 * Nodes refer to values by index; a missing optional input is -1. Static shapes may hold -1 (dynamic)
 * dims; concrete shapes are worked out per plan (runtime/plan.c) by the op schemas in graph/shape/.
 */
#ifndef CINFER_GRAPH_H
#define CINFER_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

/* Most inputs or outputs one node may have (the loader refuses more; kernels keep arrays of this size). */
#define GRAPH_MAX_NODE_IO 256

typedef enum value_kind {
    VALUE_INTERMEDIATE = 0, /* produced by a node */
    VALUE_INPUT,            /* model input, given by the caller */
    VALUE_CONSTANT,         /* initializer or folded constant; `constant` holds host data */
} value_kind;

typedef struct graph_value {
    char *name;
    value_kind kind;
    cinfer_dtype dtype;             /* CINFER_DTYPE_UNDEFINED when not known statically */
    int ndim;                       /* -1 when the rank is not known statically */
    int64_t dims[CINFER_MAX_DIMS];  /* -1 for dynamic dims */
    char *dim_names[CINFER_MAX_DIMS];
    tensor constant;                /* VALUE_CONSTANT: owned data (core_aligned_alloc) */
    int producer;                   /* node index, or -1 */
    int num_consumers;              /* node uses (a node using it twice counts twice) */
    bool is_output;                 /* a model output */
    bool value_needed;              /* its *value* decides some shape: evaluated on the host while planning */
    bool shape_probed;              /* ndim/dims/dim_names were worked out by graph_infer_static_shapes (the same
                                       schemas a plan runs), not taken from the file's value_info */
} graph_value;

typedef enum attr_type {
    ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_STRING = 3, ATTR_TENSOR = 4,
    ATTR_FLOATS = 6, ATTR_INTS = 7, ATTR_STRINGS = 8,
} attr_type;

typedef struct graph_attr {
    char *name;
    attr_type type;
    float f;
    int64_t i;
    char *s;         /* ATTR_STRING (NUL-terminated; len in n) */
    float *floats;   /* ATTR_FLOATS */
    int64_t *ints;   /* ATTR_INTS */
    char **strings;  /* ATTR_STRINGS */
    size_t n;        /* element count of the list, or string length */
    tensor t;        /* ATTR_TENSOR: owned data */
} graph_attr;

struct op_schema;
typedef struct graph_node {
    char *name;      /* never NULL: "<op_type>_<index>" when the file gives none */
    char *op_type;
    char *domain;    /* "" for the default ONNX domain */
    int64_t opset;   /* the model's opset for this node's domain: selects version semantics */
    int num_inputs;
    int *inputs;     /* value indices, -1 for an omitted optional input */
    int num_outputs;
    int *outputs;    /* value indices, -1 for an omitted optional output */
    int num_attrs;
    graph_attr *attrs;
    const struct op_schema *schema; /* resolved by graph_bind_schemas */
    int schema_index;               /* position of schema in the registry: backends index kernel tables by it */
    bool host_eval;  /* evaluated on the host while planning (shape subgraph) */
    bool removed;    /* dropped by a pass; graph_compact deletes it */
} graph_node;

/* How the passes evaluate a node on the host while loading (constant folding, graph/passes.c; the shape probes'
 * host-evaluated shape subgraphs, graph/static_shapes.c) and which ops count as supported (graph_bind_schemas).
 * Kernels live in the backends, above graph/ in the layering, so the runtime fills this in (runtime/model.c, with
 * the CPU kernels) and hands it down in graph.evaluator; graph/ includes no backend. Both slots are required. The
 * table and its context must outlive every graph that refers to them (graph_clone copies the reference), and may
 * be used from several threads at once for different graphs. */
struct graph_evaluator_i {
    /* True when run_node can evaluate nodes of `op_type` (an ONNX op or one of cinfer's internal ops, named as in a
     * node's op_type). graph_bind_schemas refuses a model with a node whose op has no schema or is denied here,
     * naming every such node. */
    bool (*has_op)(void *ctx, const char *op_type);
    /* Evaluates node `n` (its schema bound) on host tensors. in[k] for k < num_in is input k: dtype, dims, and data
     * in host memory, except that an omitted optional input has dtype CINFER_DTYPE_UNDEFINED and NULL data, and an
     * input the node reads only the shape of (OP_FLAG_SHAPE_ONLY ops such as Shape) may have NULL data. out[k] for
     * k < num_out carries the dtype and dims n's schema inferred, with tensor_nbytes bytes of host memory at data
     * that the caller owns; run_node fills them and keeps no pointer to in or out. On failure it returns the error
     * set with core_error, naming the node; out's contents are then unspecified. */
    cinfer_status (*run_node)(void *ctx, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
};

typedef struct graph_evaluator {
    const struct graph_evaluator_i *iface; /* NULL until the runtime sets it: binding schemas needs it */
    void *context;                         /* passed to every slot */
} graph_evaluator;

typedef struct graph {
    char *name;
    int64_t opset;          /* default-domain opset */
    int num_values, cap_values;
    graph_value *values;
    int *value_index;       /* open-addressing hash of value names -> index (-1 empty); size value_index_cap */
    int value_index_cap;
    int num_nodes, cap_nodes;
    graph_node *nodes;      /* topological order after graph_sort */
    int num_inputs;
    int *inputs;            /* value indices of model inputs, in model order */
    int num_outputs;
    int *outputs;           /* value indices of model outputs, in model order */
    int num_nodes_original;
    char *base_dir;         /* folder of the model file, for external data */
    graph_evaluator evaluator; /* set by the runtime before graph_bind_schemas; graph_clone copies it */
} graph;

/* ---- construction (used by the loader and passes) ---- */
graph *graph_create(void);
void graph_free(graph *g);
/* A deep copy (values, constants, nodes, attributes); NULL on OOM. */
graph *graph_clone(const graph *src);
/* Returns the index of the value named `name`, creating an intermediate value if absent. -1 on OOM. */
int graph_intern_value(graph *g, const char *name);
int graph_find_value(const graph *g, const char *name);
/* Creates a new intermediate value named `base` (or base + ".N" when taken, so names stay unique). -1 on OOM. */
int graph_new_value(graph *g, const char *base);
/* Creates a constant value named `base` (or base + ".N") holding a copy of t (dtype, dims, data). -1 on OOM. */
int graph_new_constant(graph *g, const char *base, const tensor *t);
/* Appends a node; returns its index or -1 on OOM. inputs/outputs copied. */
int graph_add_node(graph *g, const char *name, const char *op_type, const char *domain, int64_t opset,
                   const int *inputs, int num_inputs, const int *outputs, int num_outputs);
void graph_attr_clear(graph_attr *a);
/* Appends an attribute named `name` (type and value left zero for the caller to fill); fails (clear error) on OOM. */
cinfer_status graph_node_add_attr(graph_node *n, const char *name, graph_attr **out);
/* Appends the int attribute name = value (the passes' internal markers such as "cinfer_fused_relu"). */
cinfer_status graph_node_add_int_attr(graph_node *n, const char *name, int64_t value);
/* Appends a tensor attribute of one element [1] of `dtype` copied from `value` (ConstantOfShape's value). */
cinfer_status graph_node_add_scalar_tensor_attr(graph_node *n, const char *name, cinfer_dtype dtype, const void *value);

/* ---- attributes ---- */
const graph_attr *graph_node_attr(const graph_node *n, const char *name);
int64_t graph_attr_int(const graph_node *n, const char *name, int64_t dflt);
float graph_attr_float(const graph_node *n, const char *name, float dflt);
/* Returns the string or dflt. */
const char *graph_attr_string(const graph_node *n, const char *name, const char *dflt);
/* Returns the list (and its length in *count) or NULL when absent. */
const int64_t *graph_attr_ints(const graph_node *n, const char *name, size_t *count);
const float *graph_attr_floats(const graph_node *n, const char *name, size_t *count);

/* ---- upkeep every pass calls after editing the graph (graph/upkeep.c; graph_reindex_values in graph/graph.c) ---- */
/* Orders nodes topologically and recomputes producers and consumer counts. Fails on cycles or
 * values used before any producer. */
cinfer_status graph_sort(graph *g);
/* Recomputes every value's producer and consumer count from the nodes not marked removed. */
void graph_recount_uses(graph *g);
/* A float32 constant (passes rewrite those: folding, fusion). */
bool graph_is_float_constant(const graph *g, int v);
/* True when node n's op is supported: it has a schema for its domain and g->evaluator's has_op accepts it
 * (g->evaluator must be set). */
bool graph_node_supported(const graph *g, const graph_node *n);
/* Resolves each node's schema; fails naming the unsupported nodes (name, op, domain, opset; the first 20 of them and
 * their count) at once. */
cinfer_status graph_bind_schemas(graph *g);
/* Evaluates node n on the host through g->evaluator (set: asserted); in, out and errors as its run_node states. */
cinfer_status graph_evaluate_node(const graph *g, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                  int num_out);
/* Marks the nodes no model output depends on as removed (graph_compact deletes them). */
void graph_remove_dead_nodes(graph *g);
/* Marks the values whose contents decide shapes and the nodes evaluated on the host for them (graph_optimize
 * does it; passes that add nodes afterwards call it again). */
void graph_mark_host_values(graph *g);
/* Deletes nodes marked removed and values nothing refers to. */
void graph_compact(graph *g);
/* Rebuilds the name index after values were moved or renumbered. Returns false on OOM. */
bool graph_reindex_values(graph *g);

/* ---- the load-time pass order (graph/optimize.c) ---- */
/* Runs the load-time optimisations: Identity/Dropout removal, constant folding, Conv+BN folding, activation fusion,
 * static shapes, fusions, dead-node removal; then marks the host-evaluated shape subgraphs. Needs g->evaluator. */
cinfer_status graph_optimize(graph *g);

/* ---- passes (graph/passes.c unless named; graph_optimize runs them in its order) ---- */
/* Identity and inference-mode Dropout nodes removed, their readers pointed at their input (kept where the output
 * is a model output, or Dropout's mask is read or training mode is on). */
cinfer_status graph_remove_identities(graph *g);
/* Nodes whose inputs are all constants are evaluated once (g->evaluator's run_node) and their outputs become
 * constants; a node that writes a model output is kept. */
cinfer_status graph_fold_constants(graph *g);
/* Conv followed by an inference BatchNormalization: the Conv gets new scaled weight and bias constants, the
 * BatchNormalization is dropped. */
cinfer_status graph_fold_conv_batchnorm(graph *g);
/* Conv/Gemm + Relu and Gemm + Gelu (a Reshape between looked through): the activation is dropped and the Conv or
 * Gemm marked "cinfer_fused_relu" or "cinfer_fused_gelu" (1: erf form, 2: tanh form), which every backend honours. */
cinfer_status graph_fuse_activations(graph *g);
/* Static shapes (graph/static_shapes.c) for the intermediate values, found by inferring the graph's shapes at four
 * probe sizes of its dynamic input dims: a dim equal in all is static, one that follows a named input dim takes its
 * name. Overrides the file's value_info (the probes compute what a plan will); leaves model inputs and outputs as the
 * file describes them. Needs bound schemas, the host values marked (evaluated by g->evaluator's run_node);
 * graph_optimize calls it before the fusions. */
cinfer_status graph_infer_static_shapes(graph *g);
/* Fusions that cut kernels (graph/fusion.c): common subexpressions merged, the erf GELU pattern as one Gelu node,
 * scalar scales after a MatMul(+bias) folded into its constants. Called by graph_optimize. */
cinfer_status graph_fuse(graph *g);
/* Table lookups (Gather on axis 0 of a constant, maybe Unsqueezed) joined by a Concat, two or more of them, become one
 * internal LookupConcat node that writes each row into its place (graph/fusion_lookup.c). Called by graph_optimize. */
cinfer_status graph_fuse_lookup_concat(graph *g);
/* BERT-style self-attention (softmax(Q.K^T * s + mask).V between head splits of 3-D projections) becomes one
 * Attention node, which the CUDA backend runs as a fused kernel (and the CPU's Attention kernel without the layout
 * copies). graph_optimize calls it last. Leaves the graph sorted, dead nodes removed, host values marked. */
cinfer_status graph_fuse_attention(graph *g);
/* Runs of float elementwise steps with scalar constants (Sub, Div, Add, Clip, Relu, Sigmoid...; each value between
 * read only by the next step) become one internal ElementwiseChain node (graph/shape/elementwise_chain.h): one pass
 * over memory instead of one per step. graph_optimize calls it after the fusions that take such ops
 * themselves (Conv/Gemm + Relu, GELU, scales). */
cinfer_status graph_fuse_elementwise_chains(graph *g);
/* Half-precision graphs (model.c, after graph_convert_precision): a chain reading a float model input through the
 * conversion's cast, or writing a float model output through one, reads or writes the float directly. */
cinfer_status graph_chain_absorb_casts(graph *g);
/* Half-precision graphs for the CUDA backend (model.c, last): 2-D Convs with constant weights compute channels-last
 * ("cinfer_channels_last", graph/shape/conv_params.h), the layout carried through pools and elementwise ops, with
 * Transposes only where channels-first readers or model outputs need them (graph/layout.c). *changed: whether any
 * node was rewritten. */
cinfer_status graph_to_channels_last(graph *g, bool *changed);
/* Converts a float32 model to run in float16 or bfloat16 (`half`), in place (precision.c): float constants are
 * converted once (saturating to the type's finite range), float model inputs are cast down after entry and float
 * outputs cast back up, so callers keep the model's dtypes; shape-deciding values stay as they are. */
cinfer_status graph_convert_precision(graph *g, cinfer_dtype half);

#endif
