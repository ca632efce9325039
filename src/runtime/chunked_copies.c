/* Chunked copies: a pointwise plan's run between page-locked host buffers, split into chunk plans over element ranges
 * of the plan's own io buffers, so that the uploads, the compute and the downloads of different chunks overlap on
 * the backend's copy streams (copy_overlapped). Session option "copy_chunks"; docs/cuda.md. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/status.h"
#include "graph/op_schema.h"
#include "runtime/session_internal.h"

/* Frees a plan's chunk plans (plan_chunks); their io is the plan's, so only their own memory goes. */
void chunks_free(cinfer_session *s, plan *p) {
    for (int c = 0; c < p->num_chunks; c++) session_plan_free(s, p->chunks[c]);
    free(p->chunks);
    free(p->chunk_first);
    p->chunks = NULL;
    p->chunk_first = NULL;
    p->num_chunks = 0;
}

static bool same_dims(const tensor *a, const tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* Whether every element of the plan's outputs is computed from the same element of its inputs alone: every node
 * runs on the device and is pointwise (OP_FLAG_POINTWISE), reading values of its output's shape or one-element
 * constants; every model input and output has the same count of elements (*elements). Such a run splits into runs
 * over element ranges that give the same bytes. */
static bool plan_is_pointwise(const cinfer_session *s, const plan *p, int64_t *elements) {
    const graph *g = s->graph;
    if (!g->num_inputs || !g->num_outputs || !g->num_nodes) return false;
    const int64_t n = tensor_numel(&p->values[g->inputs[0]]);
    for (int i = 0; i < g->num_inputs; i++)
        if (g->values[g->inputs[i]].value_needed || tensor_numel(&p->values[g->inputs[i]]) != n) return false;
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k], producer = g->values[v].producer;
        if (producer < 0 || tensor_numel(&p->values[v]) != n) return false;
    }
    for (int i = 0; i < g->num_nodes; i++) {
        const graph_node *nd = &g->nodes[i];
        if (!p->node_runs[i] || !nd->schema || !(nd->schema->flags & OP_FLAG_POINTWISE) || nd->outputs[0] < 0) return false;
        const tensor *y = &p->values[nd->outputs[0]];
        for (int k = 0; k < nd->num_outputs; k++)
            if (nd->outputs[k] >= 0 && !same_dims(&p->values[nd->outputs[k]], y)) return false;
        if (tensor_numel(y) != n) return false;
        for (int k = 0; k < nd->num_inputs; k++) {
            int v = nd->inputs[k];
            if (v < 0 || same_dims(&p->values[v], y)) continue;
            if (g->values[v].kind != VALUE_CONSTANT || tensor_numel(&p->values[v]) != 1) return false;
        }
    }
    *elements = n;
    return true;
}

/* How many chunks a pointwise plan of `elements` elements and `io_bytes` of inputs and outputs splits into (1: not
 * split), and *length, the elements of each but the last. */
static int chunk_count(const cinfer_session *s, int64_t elements, size_t io_bytes, int64_t *length) {
    int64_t want = s->copy_chunks;
    if (want == 0) {
        want = (int64_t)(io_bytes / CHUNK_IO_BYTES);
        if (want > PLAN_MAX_CHUNKS) want = PLAN_MAX_CHUNKS;
    }
    if (want < 2) return 1;
    int64_t len = (elements + want - 1) / want;
    len = (len + CHUNK_ALIGN_ELEMENTS - 1) / CHUNK_ALIGN_ELEMENTS * CHUNK_ALIGN_ELEMENTS;
    *length = len;
    return (int)((elements + len - 1) / len);
}

/* One chunk's plan: the model on inputs of `length` elements (rank 1), its model inputs and outputs pointed at
 * element `first` of the whole plan's buffers instead of buffers of its own. */
static cinfer_status build_chunk_plan(cinfer_session *s, const plan *whole, int64_t first, int64_t length, plan **out) {
    const graph *g = s->graph;
    cinfer_tensor shapes[256];
    const cinfer_tensor *bound[256];
    for (int i = 0; i < g->num_inputs; i++) {
        memset(&shapes[i], 0, sizeof shapes[i]);
        shapes[i].dtype = whole->values[g->inputs[i]].dtype;
        shapes[i].ndim = 1;
        shapes[i].dims[0] = length;
        bound[i] = &shapes[i];
    }
    unsigned char *signature = malloc(1); /* chunk plans live in their whole plan, never in the cache */
    if (!signature) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    plan *c;
    CINFER_TRY(session_build_plan(s, bound, signature, 0, false, NULL, &c));
    if (c->io_block) s->backend->iface->release(s->backend, c->io_block); /* inputs and outputs only: pointwise */
    c->io_block = NULL;
    c->io_bytes = 0;
    c->caller_binding_pays = false;
    for (int i = 0; i < g->num_inputs; i++) {
        int v = g->inputs[i];
        c->values[v].data = (char *)whole->values[v].data + (size_t)first * cinfer_dtype_size(c->values[v].dtype);
    }
    for (int k = 0; k < g->num_outputs; k++) {
        int v = g->outputs[k];
        c->values[v].data = (char *)whole->values[v].data + (size_t)first * cinfer_dtype_size(c->values[v].dtype);
    }
    *out = c;
    return CINFER_OK;
}

/* Splits a pointwise plan into chunk plans once (p->chunks), when the backend has overlapped copies and the size
 * (or option copy_chunks) asks for it. A plan that cannot be split runs whole; so does one whose chunk plans fail
 * to build (memory), which is logged. */
static void plan_chunks(cinfer_session *s, plan *p) {
    const graph *g = s->graph;
    p->chunks_checked = true;
    int64_t elements = 0, length = 0;
    if (!s->backend->iface->copy_overlapped || s->guard_bytes || s->profile || !plan_is_pointwise(s, p, &elements)) return;
    size_t io_bytes = 0;
    for (int i = 0; i < g->num_inputs; i++) io_bytes += tensor_nbytes(&p->values[g->inputs[i]]);
    for (int k = 0; k < g->num_outputs; k++) io_bytes += tensor_nbytes(&p->values[g->outputs[k]]);
    int count = chunk_count(s, elements, io_bytes, &length);
    if (count < 2) return;
    p->chunks = calloc((size_t)count, sizeof *p->chunks);
    p->chunk_first = calloc((size_t)count + 1, sizeof *p->chunk_first);
    cinfer_status st = p->chunks && p->chunk_first ? CINFER_OK : core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    for (int c = 0; st == CINFER_OK && c < count; c++) {
        p->chunk_first[c] = (int64_t)c * length;
        int64_t len = c == count - 1 ? elements - p->chunk_first[c] : length;
        st = build_chunk_plan(s, p, p->chunk_first[c], len, &p->chunks[c]);
        if (st == CINFER_OK) p->num_chunks = c + 1;
    }
    if (st == CINFER_OK) {
        p->chunk_first[count] = elements;
        return;
    }
    fprintf(stderr, "cinfer: model '%s': chunked copies off for this input shape (runs copy whole): %s\n",
            g->name ? g->name : "", cinfer_last_error());
    chunks_free(s, p);
}

/* Whether a host run of plan p goes in chunks: p splits, and every caller buffer is page-locked (pageable memory,
 * like cinfer_session_run's fresh outputs, goes through the staging buffer, which overlaps nothing). */
bool chunks_run_here(cinfer_session *s, plan *p, const cinfer_tensor **bound, const cinfer_tensor *outputs) {
    const graph *g = s->graph;
    backend *b = s->backend;
    if (!p->chunks_checked) plan_chunks(s, p);
    if (p->num_chunks < 2 || !b->iface->host_pinned) return false;
    for (int i = 0; i < g->num_inputs; i++)
        if (!b->iface->host_pinned(b, bound[i]->data, tensor_nbytes(&p->values[g->inputs[i]]))) return false;
    for (int k = 0; k < g->num_outputs; k++)
        if (!b->iface->host_pinned(b, outputs[k].data, tensor_nbytes(&p->values[g->outputs[k]]))) return false;
    return true;
}

/* Chunk by chunk: its inputs up (upload stream), its nodes (the session's stream, after its inputs), its outputs
 * down (download stream, after its nodes), so chunk c's download, chunk c+1's compute and the uploads after them
 * run at once; then one wait. */
cinfer_status chunks_run(cinfer_session *s, plan *p, const cinfer_tensor **bound, cinfer_tensor *outputs) {
    const graph *g = s->graph;
    backend *b = s->backend;
    for (int c = 0; c < p->num_chunks; c++) {
        plan *cp = p->chunks[c];
        const int64_t first = p->chunk_first[c];
        for (int i = 0; i < g->num_inputs; i++) {
            const tensor *t = &cp->values[g->inputs[i]];
            size_t offset = (size_t)first * cinfer_dtype_size(t->dtype);
            CINFER_TRY(b->iface->copy_overlapped(b, t->data, (const char *)bound[i]->data + offset, tensor_nbytes(t), true));
        }
        CINFER_TRY(session_run_device_nodes(s, cp));
        for (int k = 0; k < g->num_outputs; k++) {
            const tensor *t = &cp->values[g->outputs[k]];
            size_t offset = (size_t)first * cinfer_dtype_size(t->dtype);
            CINFER_TRY(b->iface->copy_overlapped(b, (char *)outputs[k].data + offset, t->data, tensor_nbytes(t), false));
        }
    }
    return b->iface->synchronize(b);
}
