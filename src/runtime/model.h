/* The loaded model behind cinfer_model: the optimised graph plus load-time facts. */
#ifndef CINFER_RUNTIME_MODEL_H
#define CINFER_RUNTIME_MODEL_H

#include <pthread.h>

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
    /* Half-precision copies of the graph (float16, bfloat16; then the same with channels-last convolutions for the
     * CUDA backend), made on first use by a session that asks for them. */
    pthread_mutex_t precision_lock;
    graph *half_graphs[4];
};

/* The graph sessions of compute type `compute` run: the model's own for float32, else its converted copy
 * (made once, then shared); for a CUDA session (`cuda`) a half-precision copy also computes its 2-D convolutions
 * channels-last (graph/layout.c), unless the environment says CINFER_CHANNELS_LAST=0. */
cinfer_status model_graph_for_precision(const cinfer_model *model, cinfer_dtype compute, bool cuda, const graph **out);

#endif
