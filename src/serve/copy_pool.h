/* A few helper threads that split one large host copy (a GPU lane gathering a batch into its page-locked buffer)
 * between them and the caller, so the gather of batch k+1 finishes while the other lane's batch k still computes. */
#ifndef SERVE_COPY_POOL_H
#define SERVE_COPY_POOL_H

#include <stddef.h>

typedef struct copy_job {
    void *dst;
    const void *src;
    size_t bytes;
} copy_job;

typedef struct copy_pool copy_pool;

/* Starts `helpers` threads (they sleep on a semaphore between copies). NULL when out of memory or threads; callers
 * then copy alone. */
copy_pool *copy_pool_create(int helpers);
/* Copies every job, the bytes split evenly between the helpers and the caller (a job may be cut between two of
 * them); returns when all is copied. A NULL pool, or less than COPY_POOL_MIN_BYTES in all, copies on the caller's
 * thread. Not reentrant: one caller per pool. */
#define COPY_POOL_MIN_BYTES (1u << 20)
void copy_pool_run(copy_pool *p, const copy_job *jobs, size_t n);
void copy_pool_destroy(copy_pool *p);

#endif
