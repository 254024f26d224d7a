/*
 * Thread pool: one job at a time, cut into more parts than threads and
 * handed out as threads come free, so that a thread the kernel has
 * descheduled (another engine, a compile, the admin on the same CPUs)
 * holds up at most the part it is in, never a fixed share of every job.
 *
 * The parts come in runs, THREADPOOL_PARTS_PER_THREAD a thread: thread t
 * takes the parts of run t first, in order, then those left in the other
 * runs.  A matmul lays a run's parts side by side (split_falling), so a
 * thread streams one stretch of the weights from end to end.  With one
 * counter for all, a thread's parts lay between the other threads' and
 * each started a new stream, cold to the prefetchers: the time in a Q4_0
 * decode's parts is a median 4 % lower over seven alternating runs
 * (docs/performance.md).
 *
 * Each run's counter is a 64-bit word on its own cache line, which its
 * own thread takes without contention: the job's generation in the high
 * half, the run's next part in the low half.  A part is taken with a
 * compare-and-swap that also checks the generation, so a thread that
 * slept through a whole job cannot take a part of the next one with the
 * previous job's arguments.
 *
 * run():   store fn/ctx/parts, done = 0, each run's counter = (gen+1, 0),
 *          then state = gen+1 (release), wake sleepers, take parts like
 *          everyone, then wait for done == parts: spin briefly, then
 *          sleep until the last part's thread signals.
 * worker:  wait for a new generation in state (spin briefly, then sleep),
 *          take parts until none is left in any run, done++ after each.
 * Spins are short (SPIN_NS, 100 us): long enough to bridge the gaps
 * between the back-to-back jobs of a decode step, short enough that a
 * thread waiting on a descheduled peer gives its CPU back to that peer.
 *
 * With threadpool_adapt() on, the caller also watches how long the pool's
 * threads wait for a CPU (threadpool_adapt.c) and runs jobs alone while
 * other processes keep them waiting: a part cannot be taken back from a
 * preempted thread, so on oversubscribed CPUs every job would otherwise
 * wait out someone else's time slice.  It also caps the width at the
 * cores of the CPUs the caller may run on now: the threads past it sleep
 * on width_cv until those CPUs come back.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "privai/status.h"
#include "privai/threadpool.h"
#include "threadpool_adapt.h"

/* How long a waiting thread spins before it sleeps, in time: a pause
 * instruction takes 11 ns on the AMX Xeon and less on many other CPUs,
 * so 2000 pauses, what this was, spun 22 us there.  A decode step's
 * waits outlast that (the other thread's last part, the serial steps
 * between jobs): Q8_0 decode on the 1B-class model switched threads 27
 * times a token, 3 with 100 us, and the fixture served 7-10 % faster
 * (docs/performance.md). */
#ifndef SPIN_NS
#define SPIN_NS 100000
#endif
#define SPIN_CLOCK_EVERY 32 /* pauses between reads of the clock */

/* A run's counter, alone on its cache line */
struct run {
	_Alignas(64) _Atomic uint64_t next; /* generation << 32 | next part of the run */
};

struct worker {
	struct threadpool *pool;
	int index;
	pthread_t thread;
};

struct threadpool {
	int n;
	struct worker *workers;
	atomic_int *tids; /* workers' thread ids, for their schedstat */
	int adapt_on;
	struct pool_adapt adapt; /* touched by the calling thread only */
	atomic_int width;        /* adapt.width, for threadpool_width() from anywhere */
	threadpool_fn fn;
	void *ctx;
	atomic_int parts;
	_Atomic uint64_t state; /* generation << 32: a new job */
	struct run *runs;       /* n of them, width in use */
	atomic_int done;        /* parts finished in this generation */
	atomic_int sleepers;    /* workers asleep on cv */
	atomic_int waiting;     /* the caller asleep on done_cv */
	atomic_int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv, done_cv;
	pthread_cond_t width_cv; /* workers past the width sleep on it */
};

static _Thread_local int self_index;

/* 1 while a spin that has made *spins turns since *since may go on;
 * both start at 0, and the first turn reads the clock. */
static int
spin_on(int *spins, int64_t *since)
{
	if ((*spins)++ % SPIN_CLOCK_EVERY != 0)
		return 1;
	int64_t now = pool_now_ns();
	if (*spins == 1)
		*since = now;
	return now - *since < SPIN_NS;
}

static void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

int
threadpool_self(void)
{
	return self_index;
}

int
threadpool_parts(const struct threadpool *p)
{
	return p->n == 1 ? 1 : p->n * THREADPOOL_PARTS_PER_THREAD;
}

/* Take and run the parts of run r of generation gen until none is left;
 * returns 0, or -1 once the generation has moved on (the job is over). */
static int
take_run(struct threadpool *p, uint32_t gen, int r, int parts)
{
	_Atomic uint64_t *c = &p->runs[r].next;
	uint64_t v = atomic_load_explicit(c, memory_order_acquire);

	for (;;) {
		if ((uint32_t)(v >> 32) != gen)
			return -1;
		if ((int)(uint32_t)v >= THREADPOOL_PARTS_PER_THREAD)
			return 0;
		if (!atomic_compare_exchange_weak_explicit(c, &v, v + 1, memory_order_acq_rel, memory_order_acquire))
			continue;
		p->fn(p->ctx, r * THREADPOOL_PARTS_PER_THREAD + (int)(uint32_t)v, parts);
		if (atomic_fetch_add(&p->done, 1) + 1 == parts && atomic_load(&p->waiting)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
		v = atomic_load_explicit(c, memory_order_acquire);
	}
}

/* Take and run parts of generation `gen` until none is left: this
 * thread's own run first, then what is left of the others. */
static void
take_parts(struct threadpool *p, uint32_t gen)
{
	int parts = atomic_load_explicit(&p->parts, memory_order_relaxed);
	int runs = parts / THREADPOOL_PARTS_PER_THREAD;

	/* parts is this job's once the generation read was (its store came
	 * first); a thread a job late finds another generation in the runs */
	for (int k = 0; k < runs; k++)
		if (take_run(p, gen, (self_index + k) % runs, parts) < 0)
			return;
}

static uint32_t
generation(struct threadpool *p)
{
	return (uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >> 32);
}

/* A worker past the pool's width (its CPUs were taken: threadpool_adapt.h)
 * sleeps until the width takes it in again. */
static void
park(struct threadpool *p, int index)
{
	pthread_mutex_lock(&p->mu);
	while (index >= atomic_load(&p->width) && !atomic_load(&p->stop))
		pthread_cond_wait(&p->width_cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void
set_width(struct threadpool *p, int width)
{
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->width, width);
	pthread_cond_broadcast(&p->width_cv);
	pthread_mutex_unlock(&p->mu);
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct threadpool *p = w->pool;
	/* generation 0 is "no job yet"; a job may be published before this
	 * thread first runs, so do not read the counter here */
	uint32_t seen = 0;

	self_index = w->index;
	atomic_store_explicit(&p->tids[w->index], (int)syscall(SYS_gettid), memory_order_release);
	for (;;) {
		uint32_t g;
		int spins = 0;
		int64_t since = 0;
		while ((g = generation(p)) == seen) {
			if (spin_on(&spins, &since)) {
				cpu_relax();
				continue;
			}
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (generation(p) == seen)
				pthread_cond_wait(&p->cv, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
			spins = 0;
		}
		seen = g;
		if (atomic_load(&p->stop))
			return NULL;
		/* relaxed: a stale width costs one job an extra thread, no more */
		if (w->index >= atomic_load_explicit(&p->width, memory_order_relaxed)) {
			park(p, w->index);
			continue;
		}
		take_parts(p, g);
	}
}

static void
wake_all(struct threadpool *p)
{
	/* taking the mutex orders the generation bump before a sleeper's re-check */
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
}

/* Until every part of the job is done: the last of them may be running on
 * a thread that is not scheduled now, so sleep rather than spin long. */
static void
wait_done(struct threadpool *p)
{
	int parts = atomic_load_explicit(&p->parts, memory_order_relaxed);
	int spins = 0;
	int64_t since = 0;

	while (atomic_load_explicit(&p->done, memory_order_acquire) < parts) {
		if (spin_on(&spins, &since)) {
			cpu_relax();
			continue;
		}
		pthread_mutex_lock(&p->mu);
		atomic_store(&p->waiting, 1); /* seq_cst: pairs with done++ then the load of waiting */
		while (atomic_load(&p->done) < parts)
			pthread_cond_wait(&p->done_cv, &p->mu);
		atomic_store(&p->waiting, 0);
		pthread_mutex_unlock(&p->mu);
		return;
	}
}

int
threadpool_new(int n_threads, struct threadpool **ret_pool)
{
	struct threadpool *p;

	if (n_threads < 1 || n_threads > 4096)
		return PRIVAI_EINVAL;
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return PRIVAI_ENOMEM;
	p->n = n_threads;
	atomic_init(&p->width, n_threads);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	pthread_cond_init(&p->width_cv, NULL);
	if ((p->workers = calloc((size_t)n_threads, sizeof(*p->workers))) == NULL ||
	    (p->tids = calloc((size_t)n_threads, sizeof(*p->tids))) == NULL ||
	    (p->runs = aligned_alloc(_Alignof(struct run), (size_t)n_threads * sizeof(*p->runs))) == NULL ||
	    pool_adapt_init(&p->adapt, n_threads) < 0) {
		free(p->workers);
		free(p->tids);
		free(p->runs);
		free(p);
		return PRIVAI_ENOMEM;
	}
	for (int i = 1; i < n_threads; i++) {
		p->workers[i].pool = p;
		p->workers[i].index = i;
		if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
			p->n = i; /* free() joins only the ones that started */
			threadpool_free(p);
			return PRIVAI_EIO;
		}
	}
	*ret_pool = p;
	return PRIVAI_OK;
}

void
threadpool_free(struct threadpool *p)
{
	if (p == NULL)
		return;
	atomic_store(&p->stop, 1);
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->state, (uint64_t)1 << 32);
	pthread_cond_broadcast(&p->cv);
	pthread_cond_broadcast(&p->width_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->workers[i].thread, NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->width_cv);
	pool_adapt_free(&p->adapt);
	free(p->runs);
	free(p->tids);
	free(p->workers);
	free(p);
}

int
threadpool_size(const struct threadpool *p)
{
	return p->n;
}

void
threadpool_adapt(struct threadpool *p, int on)
{
	p->adapt_on = on;
	if (!on) {
		p->adapt.width = p->n;
		set_width(p, p->n);
	}
}

void
threadpool_count_cpus(struct threadpool *p, int on)
{
	p->adapt.per_cpu = on != 0;
}

int
threadpool_width(const struct threadpool *p)
{
	return atomic_load_explicit(&p->width, memory_order_relaxed);
}

void
threadpool_run(struct threadpool *p, threadpool_fn fn, void *ctx)
{
	int width = p->n;

	if (p->adapt_on) {
		width = pool_adapt_width(&p->adapt, p->tids);
		/* stored only on a change: workers spin on this cache line */
		if (width != atomic_load_explicit(&p->width, memory_order_relaxed))
			set_width(p, width);
		if (width == 1) {
			fn(ctx, 0, 1);
			return;
		}
	}
	if (p->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	uint32_t gen = generation(p) + 1;
	p->fn = fn;
	p->ctx = ctx;
	/* as many parts a thread at any width: fewer threads, fewer parts */
	atomic_store_explicit(&p->parts, width * THREADPOOL_PARTS_PER_THREAD, memory_order_relaxed);
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	for (int r = 0; r < width; r++)
		atomic_store_explicit(&p->runs[r].next, (uint64_t)gen << 32, memory_order_relaxed);
	atomic_store(&p->state, (uint64_t)gen << 32); /* seq_cst: publishes the above, pairs with sleepers++ */
	wake_all(p);
	take_parts(p, gen);
	wait_done(p);
}

/* Physical cores among the CPUs this process may run on: hyperthread
 * siblings share a core's units, and a pool wider than the allowed CPUs
 * only makes its threads wait for each other. */
int
threadpool_default_threads(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 1;
	return pool_cores(&set);
}
