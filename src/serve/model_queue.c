/* Per-model request queue: one doubly linked FIFO per priority level (so the batcher can take requests of one
 * shape from the middle), a size bound, sequence numbers and per-request deadlines. The caller holds the lock. */
#include "model_queue.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic size_t pinned_output_bytes; /* held by responses in flight */
static _Atomic size_t pinned_output_budget = SIZE_MAX; /* SIZE_MAX: not set yet, the default applies */

void model_pinned_outputs_set_budget(size_t bytes) { atomic_store(&pinned_output_budget, bytes == SIZE_MAX ? bytes - 1 : bytes); }

/* The budget; the default is worked out on first use and kept (sysconf asks the kernel: not once a batch). */
static size_t pinned_budget(void) {
    size_t budget = atomic_load(&pinned_output_budget);
    if (budget != SIZE_MAX) return budget;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t eighth = pages > 0 && page > 0 ? (size_t)pages / 8 * (size_t)page : 0;
    size_t fallback = eighth < ((size_t)4 << 30) ? eighth : (size_t)4 << 30;
    /* a budget set meanwhile wins: the exchange then fails and leaves it */
    if (!atomic_compare_exchange_strong(&pinned_output_budget, &budget, fallback)) return budget;
    return fallback;
}

bool model_pinned_outputs_take(size_t bytes) {
    const size_t budget = pinned_budget();
    size_t held = atomic_load(&pinned_output_bytes);
    do {
        if (bytes > budget || held > budget - bytes) return false;
    } while (!atomic_compare_exchange_weak(&pinned_output_bytes, &held, held + bytes));
    return true;
}

size_t model_pinned_outputs_held(void) { return atomic_load(&pinned_output_bytes); }

void model_outputs_free_data(cinfer_tensor *t, size_t n, model_output_memory memory) {
    for (size_t i = 0; i < n; i++) {
        if (memory.device < 0) {
            cinfer_tensor_free_data(&t[i]);
            continue;
        }
        cinfer_cuda_host_free(memory.device, t[i].data);
        t[i].data = NULL;
    }
    if (memory.device >= 0) atomic_fetch_sub(&pinned_output_bytes, memory.bytes);
}

void model_batch_outputs_release(model_batch_outputs *b) {
    if (!b) return;
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    model_outputs_free_data(b->tensors, b->num, b->memory);
    free(b->tensors);
    free(b);
}

void model_request_free_outputs(model_request *r) {
    if (!r) return;
    if (r->outputs_own_data) model_outputs_free_data(r->outputs, r->num_outputs, r->outputs_memory);
    model_batch_outputs_release(r->batch);
    r->batch = NULL;
    free(r->output_copy);
    r->output_copy = NULL;
    free(r->outputs);
    r->outputs = NULL;
    r->num_outputs = 0;
    r->outputs_own_data = 0;
}

int model_queue_init(model_queue *q, const model_queue_policy *policy) {
    memset(q, 0, sizeof *q);
    q->policy = *policy;
    q->policy.levels = policy->levels ? policy->levels : 1;
    q->policy.default_level = policy->default_level ? policy->default_level : (q->policy.levels + 1) / 2;
    if (q->policy.full_status != SERVE_TOO_MANY_REQUESTS) q->policy.full_status = SERVE_UNAVAILABLE;
    q->head = calloc(q->policy.levels, sizeof *q->head);
    q->tail = calloc(q->policy.levels, sizeof *q->tail);
    if (!q->head || !q->tail) {
        free(q->head);
        free(q->tail);
        q->head = q->tail = NULL;
        return -1;
    }
    return 0;
}

void model_queue_destroy(model_queue *q) {
    if (!q || !q->head) return;
    free(q->head);
    free(q->tail);
    q->head = q->tail = NULL;
}

int model_queue_push(model_queue *q, model_request *r, const char *model_name, serve_error *e) {
    const model_queue_policy *p = &q->policy;
    uint32_t level = r->priority ? r->priority : p->default_level;
    if (p->levels > 1 && level > p->levels)
        return serve_fail(e, SERVE_BAD_REQUEST, "priority %u is out of range for model '%s': it has %u priority levels (1 is highest)",
                          r->priority, model_name, p->levels);
    if (level > p->levels) level = p->levels; /* one level: priorities are accepted and ignored, as Triton */
    if (q->closed)
        return serve_fail(e, SERVE_UNAVAILABLE, "model '%s' is unloading or the server is shutting down", model_name);
    if (p->max_size && q->size >= p->max_size)
        return serve_fail(e, p->full_status, "exceeds maximum queue size: model '%s' already has %zu queued requests",
                          model_name, p->max_size);
    uint64_t timeout = p->default_timeout_us;
    if (r->timeout_us && (!timeout || p->allow_timeout_override || r->timeout_us < timeout)) timeout = r->timeout_us;
    /* a request's own timeout comes from its body: past a day it means "no deadline" rather than overflowing */
    if (timeout > UINT64_C(86400000000)) timeout = 0;
    r->deadline_ns = timeout ? r->arrival_ns + timeout * 1000u : 0;
    r->level = level - 1;
    r->seq = q->next_seq++;
    r->next = NULL;
    r->prev = q->tail[r->level];
    if (r->prev) r->prev->next = r;
    else q->head[r->level] = r;
    q->tail[r->level] = r;
    q->size++;
    q->total_batch += r->batch_size > 0 ? r->batch_size : 1;
    return 0;
}

model_request *model_queue_first(const model_queue *q) {
    for (uint32_t k = 0; k < q->policy.levels; k++)
        if (q->head[k]) return q->head[k];
    return NULL;
}

model_request *model_queue_next(const model_queue *q, const model_request *r) {
    if (r->next) return r->next;
    for (uint32_t k = r->level + 1; k < q->policy.levels; k++)
        if (q->head[k]) return q->head[k];
    return NULL;
}

void model_queue_unlink(model_queue *q, model_request *r) {
    if (r->prev) r->prev->next = r->next;
    else q->head[r->level] = r->next;
    if (r->next) r->next->prev = r->prev;
    else q->tail[r->level] = r->prev;
    r->next = r->prev = NULL;
    q->size--;
    q->total_batch -= r->batch_size > 0 ? r->batch_size : 1;
}

void model_queue_close(model_queue *q) { q->closed = 1; }
