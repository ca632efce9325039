/* Liveness-based memory planner: counts consumers, frees a block after its last consumer, best-fit reuse,
 * in-place output for elementwise/alias ops, coalescing of adjacent free blocks. */
#include "graph/planner.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "graph/op_schema.h"

typedef struct free_block {
    size_t offset, size;
} free_block;

typedef struct free_list {
    free_block *blocks;
    int count, cap;
    size_t end; /* arena high-water mark */
} free_list;

static size_t align_up(size_t n) { return (n + PLANNER_ALIGNMENT - 1) / PLANNER_ALIGNMENT * PLANNER_ALIGNMENT; }

static size_t list_alloc(free_list *fl, size_t size) {
    int best = -1;
    for (int i = 0; i < fl->count; i++)
        if (fl->blocks[i].size >= size && (best < 0 || fl->blocks[i].size < fl->blocks[best].size)) best = i;
    if (best >= 0) {
        size_t off = fl->blocks[best].offset;
        fl->blocks[best].offset += size;
        fl->blocks[best].size -= size;
        if (fl->blocks[best].size == 0) {
            memmove(&fl->blocks[best], &fl->blocks[best + 1], sizeof(free_block) * (size_t)(fl->count - best - 1));
            fl->count--;
        }
        return off;
    }
    /* grow: a free block touching the end is extended rather than wasted */
    if (fl->count > 0 && fl->blocks[fl->count - 1].offset + fl->blocks[fl->count - 1].size == fl->end) {
        size_t off = fl->blocks[fl->count - 1].offset;
        fl->end = off + size;
        fl->count--;
        return off;
    }
    size_t off = fl->end;
    fl->end += size;
    return off;
}

/* Inserts keeping offset order and merges neighbours. Returns false on OOM. */
static bool list_free(free_list *fl, size_t offset, size_t size) {
    int pos = 0;
    while (pos < fl->count && fl->blocks[pos].offset < offset) pos++;
    bool merge_prev = pos > 0 && fl->blocks[pos - 1].offset + fl->blocks[pos - 1].size == offset;
    bool merge_next = pos < fl->count && offset + size == fl->blocks[pos].offset;
    if (merge_prev && merge_next) {
        fl->blocks[pos - 1].size += size + fl->blocks[pos].size;
        memmove(&fl->blocks[pos], &fl->blocks[pos + 1], sizeof(free_block) * (size_t)(fl->count - pos - 1));
        fl->count--;
    } else if (merge_prev) {
        fl->blocks[pos - 1].size += size;
    } else if (merge_next) {
        fl->blocks[pos].offset = offset;
        fl->blocks[pos].size += size;
    } else {
        if (fl->count == fl->cap) {
            int cap = fl->cap ? fl->cap * 2 : 16;
            free_block *b = realloc(fl->blocks, sizeof(free_block) * (size_t)cap);
            if (!b) return false;
            fl->blocks = b;
            fl->cap = cap;
        }
        memmove(&fl->blocks[pos + 1], &fl->blocks[pos], sizeof(free_block) * (size_t)(fl->count - pos));
        fl->blocks[pos] = (free_block){offset, size};
        fl->count++;
    }
    return true;
}

/* Bytes a value occupies in the arena (zero-sized tensors still get a distinct block). */
static size_t block_size(const tensor *t) {
    size_t n = tensor_nbytes(t);
    return align_up(n ? n : 1);
}

cinfer_status graph_plan_memory(const graph *g, const bool *node_runs, const tensor *shapes, const bool *in_arena,
                                int64_t *offsets, size_t *arena_bytes) {
    return graph_plan_memory_kept(g, node_runs, shapes, in_arena, NULL, offsets, arena_bytes);
}

cinfer_status graph_plan_memory_kept(const graph *g, const bool *node_runs, const tensor *shapes, const bool *in_arena,
                                     const bool *kept, int64_t *offsets, size_t *arena_bytes) {
    /* Values may share a block: an alias op's output (Reshape, Squeeze, Unsqueeze, Flatten) is a view of its input,
     * and an in-place op's output takes its input's block when that input's last read is here. A block is freed
     * when every value on it has been read for the last time: owner[v] names the value whose block v uses, and
     * block_reads[owner] counts the reads still to come of all the values on that block. */
    int nv = g->num_values;
    int *remaining = calloc((size_t)(nv ? nv : 1), sizeof(int));
    int *owner = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
    int *block_reads = calloc((size_t)(nv ? nv : 1), sizeof(int));
    free_list fl = {0};
    cinfer_status st = CINFER_OK;
    if (!remaining || !owner || !block_reads) {
        free(remaining);
        free(owner);
        free(block_reads);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning memory");
    }
    for (int v = 0; v < nv; v++) {
        offsets[v] = -1;
        owner[v] = v;
    }
    for (int i = 0; i < g->num_nodes; i++) {
        if (!node_runs[i]) continue;
        for (int k = 0; k < g->nodes[i].num_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0) remaining[g->nodes[i].inputs[k]]++;
    }
    /* a kept value counts one read that never comes: its block is never freed nor written in place */
    for (int v = 0; v < nv; v++) block_reads[v] = remaining[v] + (kept && kept[v]);
    for (int i = 0; i < g->num_nodes; i++) {
        if (!node_runs[i]) continue;
        const graph_node *n = &g->nodes[i];
        int share = -1; /* output 0 goes on input 0's block */
        if (n->schema && (n->schema->flags & (OP_FLAG_INPLACE | OP_FLAG_ALIAS)) && n->num_inputs > 0 &&
            n->num_outputs > 0) {
            int a = n->inputs[0], o = n->outputs[0];
            /* input 0 must be read nowhere else by this node: a multi-pass kernel (variadic Sum) would
             * otherwise read a later operand that aliases input 0 after overwriting it */
            int uses_here = 0;
            for (int k = 0; k < n->num_inputs; k++) uses_here += n->inputs[k] == a;
            bool fits = a >= 0 && o >= 0 && in_arena[a] && in_arena[o] && offsets[a] >= 0 && uses_here == 1 &&
                        tensor_numel(&shapes[a]) == tensor_numel(&shapes[o]) &&
                        cinfer_dtype_size(shapes[a].dtype) == cinfer_dtype_size(shapes[o].dtype);
            /* a view never writes, so any block will do; an in-place write only over a block nobody reads later */
            if (fits && ((n->schema->flags & OP_FLAG_ALIAS) || block_reads[owner[a]] == 1)) share = a;
        }
        for (int k = 0; k < n->num_outputs; k++) {
            int o = n->outputs[k];
            if (o < 0 || !in_arena[o]) continue;
            if (k == 0 && share >= 0) {
                offsets[o] = offsets[share];
                owner[o] = owner[share];
                block_reads[owner[o]] += remaining[o] + (kept && kept[o]);
                continue;
            }
            offsets[o] = (int64_t)list_alloc(&fl, block_size(&shapes[o]));
        }
        for (int k = 0; k < n->num_inputs; k++) {
            int a = n->inputs[k];
            if (a < 0 || !in_arena[a] || offsets[a] < 0) continue;
            int b = owner[a];
            if (--block_reads[b] > 0) continue;
            if (!list_free(&fl, (size_t)offsets[b], block_size(&shapes[b]))) {
                st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning memory");
                goto done;
            }
        }
        /* outputs nobody reads (unused optional outputs) die right away */
        for (int k = 0; k < n->num_outputs; k++) {
            int o = n->outputs[k];
            if (o >= 0 && in_arena[o] && remaining[o] == 0 && offsets[o] >= 0 && owner[o] == o && block_reads[o] == 0 &&
                !list_free(&fl, (size_t)offsets[o], block_size(&shapes[o]))) {
                st = core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory while planning memory");
                goto done;
            }
        }
    }
    *arena_bytes = fl.end;
done:
    free(remaining);
    free(owner);
    free(block_reads);
    free(fl.blocks);
    return st;
}

cinfer_status graph_plan_memory_guarded(const graph *g, const bool *node_runs, const tensor *shapes, const bool *in_arena,
                                        size_t guard_bytes, int64_t *offsets, size_t *arena_bytes) {
    size_t guard = align_up(guard_bytes);
    size_t cursor = guard;
    for (int v = 0; v < g->num_values; v++) offsets[v] = -1;
    for (int i = 0; i < g->num_nodes; i++) {
        if (!node_runs[i]) continue;
        for (int k = 0; k < g->nodes[i].num_outputs; k++) {
            int o = g->nodes[i].outputs[k];
            if (o < 0 || !in_arena[o] || offsets[o] >= 0) continue;
            offsets[o] = (int64_t)cursor;
            cursor += block_size(&shapes[o]) + guard;
        }
    }
    *arena_bytes = cursor;
    return CINFER_OK;
}
