/* Parameters of the recurrent ops (LSTM, GRU, RNN) that both their schemas (shapes) and their kernels (CPU and
 * CUDA) work out: direction, layout, the dims, the gate options and the activation functions. */
#ifndef CINFER_GRAPH_SHAPE_RECURRENT_PARAMS_H
#define CINFER_GRAPH_SHAPE_RECURRENT_PARAMS_H

#include <stdbool.h>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/shape/recurrent_types.h"

typedef struct recurrent_params {
    int gates;            /* 4 LSTM (i, o, f, c), 3 GRU (z, r, h), 1 RNN */
    int64_t ndir;         /* 1, or 2 (bidirectional) */
    bool reverse;         /* direction "reverse" (direction 1 of a bidirectional node always is) */
    int layout;           /* 0: X [seq, batch, input], 1: X [batch, seq, input] */
    int64_t seq, batch, input_size, hidden;
    bool lbr;             /* GRU's linear_before_reset */
    bool input_forget;    /* LSTM's coupled input and forget gates */
    bool has_clip;
    float clip;
    recurrent_act act[2][3]; /* [direction][f, g, h] (recurrent_read_activations) */
} recurrent_params;

/* Reads direction and layout (validated), the dims from X (rank 3) and R ([num_directions, gates*hidden,
 * hidden] of X's dtype), hidden_size (> 0; R's last dim when absent) and the gate options. The activations are
 * left to recurrent_read_activations. */
cinfer_status recurrent_compute_params(const graph_node *n, const tensor *in, int num_in, recurrent_params *p);

/* Reads activations / activation_alpha / activation_beta into p->act (p->gates and p->ndir set): one function
 * list for every direction or one per direction; alpha and beta values are consumed in list order by the
 * functions that take them. An unknown function is CINFER_ERR_UNSUPPORTED. */
cinfer_status recurrent_read_activations(const graph_node *n, recurrent_params *p);

#endif
