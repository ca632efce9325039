/* Op schemas: for each ONNX op cinfer knows, how its output dtypes and shapes follow from its inputs.
 *
 * Schemas are backend-independent (the CPU and CUDA backends share them). One table per op family
 * (graph/op_families.h) lives in graph/shape/<family>.c; op_registry.c joins them in the families' order.
 * Adding an op: docs/engine.md "Adding an op".
 */
#ifndef CINFER_GRAPH_OP_SCHEMA_H
#define CINFER_GRAPH_OP_SCHEMA_H

#include "graph/graph.h"
#include "graph/op_families.h"

/* Works out output dtypes and shapes. `in[i]` carries dtype and dims of input i; dtype is
 * CINFER_DTYPE_UNDEFINED for an omitted optional input; `in[i].data` is non-NULL when the value is
 * known on the host (constants, host-evaluated shape subgraphs, value inputs): it is always non-NULL
 * for inputs flagged in `value_inputs`. Fill out[j].dtype/ndim/dims (data is left alone).
 * On bad input return core_error(CINFER_ERR_INVALID_MODEL or _UNSUPPORTED, "<op> node '<name>': ...").
 * Every declared output is passed; an omitted optional output still gets a shape (ignored). */
typedef cinfer_status (*op_infer_fn)(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

enum {
    OP_FLAG_SHAPE_ONLY = 1u << 0, /* outputs depend on input shapes only (Shape, Size): always host-known */
    OP_FLAG_INPLACE = 1u << 1,    /* output 0 may share input 0's buffer (elementwise, same size) */
    OP_FLAG_ALIAS = 1u << 2,      /* output 0 is input 0's bytes with another shape (Reshape, Squeeze,
                                     Unsqueeze, Flatten): the planner may alias when input 0 dies here */
    OP_FLAG_POINTWISE = 1u << 3,  /* output element i depends only on element i of each (broadcast) input: a run
                                     splits into runs over element ranges (session chunked copies) */
    OP_FLAG_DATA_DEPENDENT = 1u << 4, /* output shapes follow input *values* computed at run time (NonZero, Unique,
                                         Compress, NonMaxSuppression): infer gives an upper bound of every output's
                                         dims (the rank is exact); the kernel writes each output's actual dims into
                                         out[k].ndim/dims (each at most the bound), its data packed row-major at the
                                         start of the buffer. A plan stops at such a node (docs/engine.md "Data-
                                         dependent shapes") */
};

typedef struct op_schema {
    const char *op_type;
    op_infer_fn infer;
    uint32_t value_inputs; /* bit i set: input i's *value* decides output shapes (Reshape's shape, ...) */
    uint32_t flags;
    int min_inputs, max_inputs; /* max -1: variadic */
} op_schema;

/* Finds the schema for (domain, op_type); domain "" or "ai.onnx" is the default one. NULL if none. */
const op_schema *op_schema_find(const char *domain, const char *op_type);
/* Iterates all schemas: index < op_schema_count(). */
size_t op_schema_count(void);
const op_schema *op_schema_at(size_t index);
/* Position of a schema returned by op_schema_find/op_schema_at; -1 if it is not a registry row. */
int op_schema_index(const op_schema *schema);

/* The family a schema belongs to: the family whose table holds it (schema from op_schema_find/op_schema_at).
 * Backends look an op's kernel up in the same family's table. OP_FAMILY_COUNT if it is not a registry row. */
op_family op_schema_family(const op_schema *schema);

/* Family tables shape_<family>_schemas[] (graph/shape/<family>.c), each ending with a row whose op_type is NULL. */
#define OP_SCHEMA_TABLE_DECL(ID, name) extern const op_schema shape_##name##_schemas[];
OP_FAMILIES(OP_SCHEMA_TABLE_DECL)
#undef OP_SCHEMA_TABLE_DECL

/* ---- helpers for schema writers (graph/shape/shape_common.c) ---- */
/* Numpy-style multidirectional broadcast of a and b into out (dims/ndim only). */
cinfer_status shape_broadcast(const graph_node *n, const tensor *a, const tensor *b, tensor *out);
/* Normalises axis into [0, rank) (negative counts from the end); error names the node. */
cinfer_status shape_normalize_axis(const graph_node *n, int64_t axis, int rank, int *out_axis);
/* Copies dtype and dims of src into dst. */
void shape_copy(tensor *dst, const tensor *src);
/* out = same shape and dtype as in[0]: for unary elementwise ops. */
cinfer_status shape_infer_same_as_first(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
/* Checks that input i is present and has one of the allowed dtypes (list ends with UNDEFINED). */
cinfer_status shape_expect_dtype(const graph_node *n, const tensor *in, int i, const cinfer_dtype *allowed);

#endif
