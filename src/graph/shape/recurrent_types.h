/* Types of the recurrent family's parameters (recurrent_params.h) that the CPU kernels and the CUDA launchers
 * both take: the activation functions of LSTM, GRU and RNN. Plain C without includes, so kernels/recurrent.h
 * (compiled by nvcc as C++ too) can carry them to the device code. */
#ifndef CINFER_GRAPH_SHAPE_RECURRENT_TYPES_H
#define CINFER_GRAPH_SHAPE_RECURRENT_TYPES_H

/* The functions as the spec names them. */
enum {
    RECURRENT_ACT_SIGMOID,
    RECURRENT_ACT_TANH,
    RECURRENT_ACT_RELU,
    RECURRENT_ACT_AFFINE,
    RECURRENT_ACT_LEAKY_RELU,
    RECURRENT_ACT_THRESHOLDED_RELU,
    RECURRENT_ACT_SCALED_TANH,
    RECURRENT_ACT_HARD_SIGMOID,
    RECURRENT_ACT_ELU,
    RECURRENT_ACT_SOFTSIGN,
    RECURRENT_ACT_SOFTPLUS,
};

/* One function with its alpha and beta (as the node gives them, or their defaults). */
typedef struct recurrent_act {
    int kind; /* RECURRENT_ACT_* */
    float alpha, beta;
} recurrent_act;

#endif
