/* Instance scheduler: instances pull batches from the model queue when free (least-loaded wake-up, one waker at a
 * time, timed waits for the batcher's max delay), and completions are released in arrival order when the model
 * asks for preserve_ordering. */
#include "scheduler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stats.h"

int scheduler_init(scheduler *s, const model_config *cfg, size_t num_instances, const size_t *lane_group,
                   const char *model_name, serve_error *e) {
    memset(s, 0, sizeof *s);
    s->model_name = model_name;
    const config_dynamic_batching *d = &cfg->dynamic_batching;
    model_queue_policy qp = {.levels = d->priority_levels, .default_level = d->default_priority_level,
                             .max_size = d->default_queue_policy.max_queue_size,
                             .default_timeout_us = d->default_queue_policy.default_timeout_us,
                             .allow_timeout_override = d->default_queue_policy.allow_timeout_override,
                             .full_status = SERVE_UNAVAILABLE};
    for (size_t i = 0; i < cfg->num_params; i++) {
        if (strcmp(cfg->params[i].key, SCHEDULER_PARAM_QUEUE_FULL_STATUS) != 0) continue;
        const char *v = cfg->params[i].value;
        if (!strcmp(v, "429")) qp.full_status = SERVE_TOO_MANY_REQUESTS;
        else if (strcmp(v, "503") != 0) {
            serve_fail(e, SERVE_BAD_REQUEST,
                       "model '%s' parameter '%s' is '%s': use \"503\" (Triton's answer when the queue is full) "
                       "or \"429\" (Too Many Requests)",
                       model_name, SCHEDULER_PARAM_QUEUE_FULL_STATUS, v);
            return -1;
        }
    }
    if (batcher_policy_init(&s->policy, cfg, e) != 0) return -1;
    if (model_queue_init(&s->queue, &qp) != 0) goto oom;
    s->inst = calloc(num_instances ? num_instances : 1, sizeof *s->inst);
    if (!s->inst) goto oom;
    s->num_instances = num_instances;
    for (size_t i = 0; i < num_instances; i++) {
        s->inst[i].slots = 1;
        s->inst[i].group = lane_group ? lane_group[i] : i;
        if (s->inst[i].group >= s->num_groups) s->num_groups = s->inst[i].group + 1;
    }
    s->group_load = calloc(s->num_groups ? s->num_groups : 1, sizeof *s->group_load);
    if (!s->group_load) goto oom;
    for (size_t i = 0; i < num_instances; i++) sem_init(&s->inst[i].wake, 0, 0);
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->order_lock, NULL);
    s->preserve_ordering = d->present && d->preserve_ordering;
    s->wake_threshold = s->policy.num_preferred ? s->policy.preferred[0] : s->policy.max_batch;
    s->initialised = 1;
    return 0;
oom:
    serve_fail(e, SERVE_INTERNAL, "model '%s': out of memory creating the scheduler", model_name);
    batcher_policy_free(&s->policy);
    model_queue_destroy(&s->queue);
    free(s->inst);
    s->inst = NULL;
    free(s->group_load);
    s->group_load = NULL;
    return -1;
}

void scheduler_destroy(scheduler *s) {
    if (!s || !s->initialised) return;
    for (size_t i = 0; i < s->num_instances; i++) sem_destroy(&s->inst[i].wake);
    free(s->inst);
    free(s->group_load);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->order_lock);
    model_queue_destroy(&s->queue);
    batcher_policy_free(&s->policy);
    s->initialised = 0;
}

/* With the lock held: picks one parked instance that may have work, unless one is already on its way, and marks it
 * signaled. Returns its wake-up semaphore, which the caller posts after unlocking, or NULL. (Posting under the lock
 * would wake the worker straight into the lock the caller still holds: a futex wait, a wake-up and an extra context
 * switch per request. A semaphore rather than a condition variable because glibc's pthread_cond_wait re-takes the
 * mutex as contended, so the worker's next unlock is a futex system call even when nobody waits.) The semaphore
 * lives as long as the scheduler, which outlives every caller.
 * `arrival`: called for a new request, which only matters to an instance waiting on a delay timer when the queue
 * may now hold a full enough batch. Otherwise a parked lane of the least-loaded instance is woken (fewest batches in
 * flight over the instance's lanes, then the lane parked longest, which spreads batches over the instances when the
 * load is light). */
static sem_t *wake_one(scheduler *s, int arrival) {
    scheduler_instance *best = NULL, *timed = NULL;
    for (size_t i = 0; i < s->num_instances; i++) {
        scheduler_instance *x = &s->inst[i];
        if (!x->parked) continue;
        if (x->signaled) return NULL;
        if (x->timed) {
            if (!timed) timed = x;
            continue;
        }
        if (x->in_flight >= x->slots) continue;
        int load = s->group_load[x->group], best_load = best ? s->group_load[best->group] : 0;
        if (!best || load < best_load || (load == best_load && x->parked_since < best->parked_since)) best = x;
    }
    if (timed) {
        if (arrival && s->queue.total_batch < s->wake_threshold) return NULL; /* its timer still decides */
        best = timed;
    }
    if (!best) return NULL;
    best->signaled = 1;
    return &best->wake;
}

int scheduler_submit(scheduler *s, model_request *r, serve_error *e) {
    pthread_mutex_lock(&s->lock);
    int rc = model_queue_push(&s->queue, r, s->model_name, e);
    sem_t *wake = rc == 0 ? wake_one(s, 1) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (wake) sem_post(wake);
    return rc;
}

int scheduler_next(scheduler *s, size_t i, batcher_batch *b) {
    scheduler_instance *me = &s->inst[i];
    pthread_mutex_lock(&s->lock);
    for (;;) {
        me->signaled = 0;
        uint64_t now = stats_now_ns(), wake_ns;
        batcher_decision d = batcher_form_capped(&s->policy, &s->queue, now, me->cap, me->gpu, b, &wake_ns);
        if (d == BATCHER_READY || b->expired) {
            me->in_flight++;
            s->group_load[me->group]++;
            sem_t *wake = s->queue.size ? wake_one(s, 0) : NULL; /* more left: let another instance look */
            pthread_mutex_unlock(&s->lock);
            if (wake) sem_post(wake);
            return 1;
        }
        if (d == BATCHER_EMPTY && s->queue.closed) {
            pthread_mutex_unlock(&s->lock);
            return 0;
        }
        me->parked = 1;
        me->timed = wake_ns != 0;
        me->parked_since = now;
        pthread_mutex_unlock(&s->lock);
        /* Timeout, wake-up or a stale post (one whose wake-up a timeout overtook): look again either way. A post
         * made while parked is never lost: the semaphore keeps it until the wait below takes it. */
        if (wake_ns) {
            struct timespec ts = {.tv_sec = (time_t)(wake_ns / 1000000000u), .tv_nsec = (long)(wake_ns % 1000000000u)};
            while (sem_clockwait(&me->wake, CLOCK_MONOTONIC, &ts) != 0 && errno == EINTR) {}
        } else {
            while (sem_wait(&me->wake) != 0 && errno == EINTR) {}
        }
        pthread_mutex_lock(&s->lock);
        me->parked = 0;
        me->timed = 0;
    }
}

void scheduler_batch_done(scheduler *s, size_t i) {
    pthread_mutex_lock(&s->lock);
    s->inst[i].in_flight--;
    s->group_load[s->inst[i].group]--;
    pthread_mutex_unlock(&s->lock);
}

void scheduler_set_gpu(scheduler *s, size_t i, int gpu) { s->inst[i].gpu = gpu; }

void scheduler_set_cap(scheduler *s, size_t i, int64_t cap) {
    pthread_mutex_lock(&s->lock);
    s->inst[i].cap = cap;
    pthread_mutex_unlock(&s->lock);
}

void scheduler_complete(scheduler *s, model_request *r) {
    if (!s->preserve_ordering) {
        r->done(r);
        return;
    }
    pthread_mutex_lock(&s->order_lock);
    model_request **p = &s->finished;
    while (*p && (*p)->seq < r->seq) p = &(*p)->next;
    r->next = *p;
    *p = r;
    if (s->releasing) { /* the thread releasing now will reach r in turn */
        pthread_mutex_unlock(&s->order_lock);
        return;
    }
    s->releasing = 1;
    while (s->finished && s->finished->seq == s->next_release) {
        model_request *x = s->finished;
        s->finished = x->next;
        x->next = NULL;
        s->next_release++;
        pthread_mutex_unlock(&s->order_lock);
        x->done(x); /* may free x; called in arrival order, one at a time */
        pthread_mutex_lock(&s->order_lock);
    }
    s->releasing = 0;
    pthread_mutex_unlock(&s->order_lock);
}

void scheduler_close(scheduler *s) {
    pthread_mutex_lock(&s->lock);
    model_queue_close(&s->queue);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < s->num_instances; i++) sem_post(&s->inst[i].wake); /* each looks again and sees closed */
}

size_t scheduler_queued(scheduler *s) {
    pthread_mutex_lock(&s->lock);
    size_t n = s->queue.size;
    pthread_mutex_unlock(&s->lock);
    return n;
}
