/* The load-time pass order: which passes run, in what order, and why there. The passes live in their own files
 * (graph/passes.c, graph/static_shapes.c, graph/fusion.c, graph/fusion_lookup.c), each editing the graph through
 * graph/upkeep.c's helpers; only this file calls more than one of them, so no pass file depends on another.
 */
#include "core/status.h"
#include "graph/graph.h"

cinfer_status graph_optimize(graph *g) {
    CINFER_TRY(graph_remove_identities(g));
    CINFER_TRY(graph_fold_constants(g));
    CINFER_TRY(graph_fold_conv_batchnorm(g));
    CINFER_TRY(graph_fuse_activations(g));
    graph_mark_host_values(g); /* the probes evaluate the shape subgraphs as a plan would */
    CINFER_TRY(graph_infer_static_shapes(g));
    CINFER_TRY(graph_fuse(g));
    CINFER_TRY(graph_fuse_activations(g)); /* the Gemms graph_fuse made from MatMul + bias */
    CINFER_TRY(graph_fuse_lookup_concat(g));
    CINFER_TRY(graph_fuse_elementwise_chains(g));
    graph_remove_dead_nodes(g);
    graph_compact(g);
    graph_mark_host_values(g);
    return graph_fuse_attention(g);
}
