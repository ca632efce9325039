/* Per-model request queue: one FIFO per priority level under one mutex, a condition variable for the instance
 * workers, a size bound and per-request deadlines (checked by the worker before it runs a request). */
#include "model_queue.h"

#include <stdlib.h>
#include <string.h>

#include "stats.h"

void model_request_free_outputs(model_request *r) {
    if (!r) return;
    for (size_t i = 0; i < r->num_outputs; i++) cinfer_tensor_free_data(&r->outputs[i]);
    free(r->outputs);
    r->outputs = NULL;
    r->num_outputs = 0;
}

int model_queue_init(model_queue *q, uint32_t levels, uint32_t default_level, size_t max_size,
                     uint64_t default_timeout_us, int allow_timeout_override) {
    memset(q, 0, sizeof *q);
    q->levels = levels ? levels : 1;
    q->default_level = default_level ? default_level : (q->levels + 1) / 2;
    q->max_size = max_size;
    q->default_timeout_us = default_timeout_us;
    q->allow_timeout_override = allow_timeout_override;
    q->head = calloc(q->levels, sizeof *q->head);
    q->tail = calloc(q->levels, sizeof *q->tail);
    if (!q->head || !q->tail) {
        free(q->head);
        free(q->tail);
        return -1;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->ready, NULL);
    return 0;
}

void model_queue_destroy(model_queue *q) {
    if (!q || !q->head) return;
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->ready);
    free(q->head);
    free(q->tail);
    q->head = q->tail = NULL;
}

int model_queue_push(model_queue *q, model_request *r, const char *model_name, serve_error *e) {
    uint32_t level = r->priority ? r->priority : q->default_level;
    if (q->levels > 1 && level > q->levels)
        return serve_fail(e, SERVE_BAD_REQUEST, "priority %u is out of range for model '%s': it has %u priority levels (1 is highest)",
                          r->priority, model_name, q->levels);
    if (level > q->levels) level = q->levels; /* one level: priorities are accepted and ignored, as Triton */
    /* Triton's rule: a request may shorten, never lengthen, the default timeout unless override is allowed. */
    uint64_t timeout = q->default_timeout_us;
    if (r->timeout_us && (!timeout || q->allow_timeout_override || r->timeout_us < timeout)) timeout = r->timeout_us;
    r->deadline_ns = timeout ? r->arrival_ns + timeout * 1000u : 0;
    r->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        pthread_mutex_unlock(&q->lock);
        return serve_fail(e, SERVE_UNAVAILABLE, "model '%s' is unloading or the server is shutting down", model_name);
    }
    if (q->max_size && q->size >= q->max_size) {
        pthread_mutex_unlock(&q->lock);
        return serve_fail(e, SERVE_UNAVAILABLE, "exceeds maximum queue size: model '%s' already has %zu queued requests",
                          model_name, q->max_size);
    }
    uint32_t k = level - 1;
    if (q->tail[k]) q->tail[k]->next = r;
    else q->head[k] = r;
    q->tail[k] = r;
    q->size++;
    pthread_cond_signal(&q->ready);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

model_request *model_queue_pop(model_queue *q) {
    pthread_mutex_lock(&q->lock);
    while (q->size == 0 && !q->closed) pthread_cond_wait(&q->ready, &q->lock);
    model_request *r = NULL;
    for (uint32_t k = 0; k < q->levels && !r; k++) {
        if (!q->head[k]) continue;
        r = q->head[k];
        q->head[k] = r->next;
        if (!q->head[k]) q->tail[k] = NULL;
        r->next = NULL;
        q->size--;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

void model_queue_close(model_queue *q) {
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->ready);
    pthread_mutex_unlock(&q->lock);
}

size_t model_queue_size(model_queue *q) {
    pthread_mutex_lock(&q->lock);
    size_t n = q->size;
    pthread_mutex_unlock(&q->lock);
    return n;
}
