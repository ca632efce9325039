/* The loaded model behind cinfer_model: the optimised graph plus load-time facts. */
#ifndef CINFER_RUNTIME_MODEL_H
#define CINFER_RUNTIME_MODEL_H

#include "graph/graph.h"

typedef struct op_count {
    const char *op_type; /* points into a node of the graph */
    size_t count;
} op_count;

struct cinfer_model {
    graph *graph;
    cinfer_model_stats stats;
    op_count *op_counts;
    size_t num_op_counts;
};

#endif
