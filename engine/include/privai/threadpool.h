/*
 * A fixed pool of worker threads created once per context.
 *
 * threadpool_run() cuts a job into threadpool_parts() parts (fewer while
 * fewer threads take part: threadpool_width()) and runs
 * fn(ctx, i, parts) once for every part i, each on whichever pool thread
 * takes it first (the calling thread is thread 0 and takes parts too), and
 * returns when all are done.  Parts are handed out as threads come free,
 * so a thread the kernel has descheduled (the CPUs are shared with other
 * engines and services) delays one part, not a fixed share of every job.
 * A part that needs per-thread scratch indexes it with threadpool_self().
 * The parts come in runs of THREADPOOL_PARTS_PER_THREAD, one a thread:
 * thread t takes the parts of run t (parts t * THREADPOOL_PARTS_PER_THREAD
 * on) first, in order, then what is left of the other runs, so a job that
 * lays a run's parts side by side has each thread work through one
 * stretch of its data.
 * Workers spin up to 100 us between jobs, because a decode
 * step issues hundreds of short jobs and waking a sleeping thread costs
 * more than most of them, and then sleep, so an idle engine uses no CPU.
 */
#ifndef PRIVAI_THREADPOOL_H
#define PRIVAI_THREADPOOL_H

typedef void (*threadpool_fn)(void *ctx, int ith, int nth);

/* A run's parts (nth is a multiple of it, or 1).  Eight, not four: a
 * traced build of the 1B-class decode on 2 threads had its threads
 * waiting for each other's last part 1.5 % of the matmul jobs' time
 * (Q8_0; Q4_K_M 2.2 %) against 3.8 % (4.6 %) with four
 * (docs/performance.md). */
#define THREADPOOL_PARTS_PER_THREAD 8

struct threadpool;

/* Start n_threads - 1 workers (n_threads >= 1).  Returns PRIVAI_OK or
 * PRIVAI_ENOMEM / PRIVAI_EIO. */
int threadpool_new(int n_threads, struct threadpool **ret_pool);
void threadpool_free(struct threadpool *p);
int threadpool_size(const struct threadpool *p);
/* on: when the pool's threads keep waiting for a CPU (other processes on
 * the same cores), run jobs on the calling thread alone until the CPUs
 * are free again, and run no more threads than the calling thread's CPUs
 * have cores when its affinity shrinks (threadpool_adapt.h has the
 * rules).  Off by default; the CPU backend turns it on unless told to
 * keep every thread. */
void threadpool_adapt(struct threadpool *p, int on);
/* on: the width's cap counts the CPUs the caller may run on, not their
 * cores (a pool asked for more threads than cores: the hyperthreads
 * wanted).  Off by default. */
void threadpool_count_cpus(struct threadpool *p, int on);
/* The threads taking part in jobs now: threadpool_size(), fewer on fewer
 * CPUs, or 1 while adapting to busy CPUs.  Callable from any thread. */
int threadpool_width(const struct threadpool *p);
/* How many parts threadpool_run() cuts a job into at full width (1 for
 * one thread). */
int threadpool_parts(const struct threadpool *p);
/* The pool thread running the calling part: 0 .. threadpool_size() - 1. */
int threadpool_self(void);
/* The default pool size: physical cores among the CPUs this process may
 * run on (sched_getaffinity, so a CPU set given by systemd is honoured). */
int threadpool_default_threads(void);
void threadpool_run(struct threadpool *p, threadpool_fn fn, void *ctx);

#endif
