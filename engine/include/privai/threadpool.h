/*
 * A fixed pool of worker threads created once at model load.
 *
 * threadpool_run() runs fn(ctx, i, n) for i in 0..n-1 on the n threads
 * (the calling thread is thread 0) and returns when all are done.  Workers
 * spin briefly between jobs, because a decode step issues hundreds of short
 * jobs and waking a sleeping thread costs more than most of them, and then
 * sleep on a condition variable so an idle engine uses no CPU.
 */
#ifndef PRIVAI_THREADPOOL_H
#define PRIVAI_THREADPOOL_H

typedef void (*threadpool_fn)(void *ctx, int ith, int nth);

struct threadpool;

/* Start n_threads - 1 workers (n_threads >= 1).  Returns PRIVAI_OK or
 * PRIVAI_ENOMEM / PRIVAI_EIO. */
int threadpool_new(int n_threads, struct threadpool **ret_pool);
void threadpool_free(struct threadpool *p);
int threadpool_size(const struct threadpool *p);
void threadpool_run(struct threadpool *p, threadpool_fn fn, void *ctx);

#endif
