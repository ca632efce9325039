/* Split host copies (copy_pool.h): each helper copies its share of the jobs' concatenated bytes. */
#include "copy_pool.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

typedef struct helper {
    copy_pool *pool;
    int index; /* its share is the index-th (the caller takes the last) */
    sem_t start;
    pthread_t thread;
} helper;

struct copy_pool {
    helper *helpers;
    int num_helpers;
    sem_t done;
    int stopping;
    const copy_job *jobs; /* the copy in progress */
    size_t num_jobs, total;
};

/* Copies bytes [from, to) of the jobs' concatenation. */
static void copy_range(const copy_job *jobs, size_t n, size_t from, size_t to) {
    size_t base = 0;
    for (size_t i = 0; i < n && base < to; base += jobs[i].bytes, i++) {
        size_t lo = from > base ? from - base : 0, end = base + jobs[i].bytes;
        size_t hi = (to < end ? to : end) - base;
        if (lo < hi) memcpy((char *)jobs[i].dst + lo, (const char *)jobs[i].src + lo, hi - lo);
    }
}

/* Share k of `shares` equal parts of total, rounded to 4 KiB so two threads rarely write one page's lines. */
static void share_of(size_t total, int k, int shares, size_t *from, size_t *to) {
    size_t part = (total / (size_t)shares + 4095) / 4096 * 4096;
    *from = part * (size_t)k < total ? part * (size_t)k : total;
    *to = k == shares - 1 || part * (size_t)(k + 1) > total ? total : part * (size_t)(k + 1);
}

static void *helper_main(void *arg) {
    helper *h = arg;
    copy_pool *p = h->pool;
    for (;;) {
        while (sem_wait(&h->start) != 0 && errno == EINTR) {}
        if (p->stopping) return NULL;
        size_t from, to;
        share_of(p->total, h->index, p->num_helpers + 1, &from, &to);
        copy_range(p->jobs, p->num_jobs, from, to);
        sem_post(&p->done);
    }
}

copy_pool *copy_pool_create(int helpers) {
    copy_pool *p = calloc(1, sizeof *p);
    if (!p || helpers < 1 || !(p->helpers = calloc((size_t)helpers, sizeof *p->helpers))) {
        free(p);
        return NULL;
    }
    sem_init(&p->done, 0, 0);
    for (int i = 0; i < helpers; i++) {
        helper *h = &p->helpers[i];
        h->pool = p;
        h->index = i;
        sem_init(&h->start, 0, 0);
        if (pthread_create(&h->thread, NULL, helper_main, h) != 0) {
            sem_destroy(&h->start);
            break;
        }
        p->num_helpers++;
    }
    if (!p->num_helpers) {
        copy_pool_destroy(p);
        return NULL;
    }
    return p;
}

void copy_pool_run(copy_pool *p, const copy_job *jobs, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += jobs[i].bytes;
    if (!p || total < COPY_POOL_MIN_BYTES) {
        for (size_t i = 0; i < n; i++) memcpy(jobs[i].dst, jobs[i].src, jobs[i].bytes);
        return;
    }
    p->jobs = jobs;
    p->num_jobs = n;
    p->total = total;
    for (int i = 0; i < p->num_helpers; i++) sem_post(&p->helpers[i].start); /* the post publishes the fields */
    size_t from, to;
    share_of(total, p->num_helpers, p->num_helpers + 1, &from, &to);
    copy_range(jobs, n, from, to);
    for (int i = 0; i < p->num_helpers; i++)
        while (sem_wait(&p->done) != 0 && errno == EINTR) {}
}

void copy_pool_destroy(copy_pool *p) {
    if (!p) return;
    p->stopping = 1;
    for (int i = 0; i < p->num_helpers; i++) sem_post(&p->helpers[i].start);
    for (int i = 0; i < p->num_helpers; i++) {
        pthread_join(p->helpers[i].thread, NULL);
        sem_destroy(&p->helpers[i].start);
    }
    sem_destroy(&p->done);
    free(p->helpers);
    free(p);
}
