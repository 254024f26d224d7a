/*
 * Thread pool: one job at a time, published through a generation counter.
 *
 * run():   store fn/ctx, pending = n-1, generation++ (release), broadcast
 *          if any worker sleeps, do share 0, spin until pending == 0.
 * worker:  wait for generation to change (spin, then sleep), do share i,
 *          pending-- (release).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "privai/status.h"
#include "privai/threadpool.h"

#define SPIN_ITERS 200000

struct worker {
	struct threadpool *pool;
	int index;
	pthread_t thread;
};

struct threadpool {
	int n;
	struct worker *workers;
	threadpool_fn fn;
	void *ctx;
	atomic_uint generation;
	atomic_int pending;
	atomic_int sleepers;
	atomic_int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct threadpool *p = w->pool;
	/* generation is 0 when workers are created; a job may be published
	 * before this thread first runs, so do not read the counter here */
	unsigned seen = 0;

	for (;;) {
		unsigned g;
		int spins = 0;
		while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
			if (++spins < SPIN_ITERS) {
				cpu_relax();
				continue;
			}
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (atomic_load(&p->generation) == seen)
				pthread_cond_wait(&p->cv, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
			spins = 0;
		}
		seen = g;
		if (atomic_load(&p->stop))
			return NULL;
		p->fn(p->ctx, w->index, p->n);
		atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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

int
threadpool_new(int n_threads, struct threadpool **ret_pool)
{
	struct threadpool *p;

	if (n_threads < 1)
		return PRIVAI_EINVAL;
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return PRIVAI_ENOMEM;
	p->n = n_threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if ((p->workers = calloc((size_t)n_threads, sizeof(*p->workers))) == NULL) {
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
	atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->workers[i].thread, NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->workers);
	free(p);
}

int
threadpool_size(const struct threadpool *p)
{
	return p->n;
}

void
threadpool_run(struct threadpool *p, threadpool_fn fn, void *ctx)
{
	if (p->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
	atomic_fetch_add(&p->generation, 1); /* seq_cst: pairs with sleepers++ */
	wake_all(p);
	fn(ctx, 0, p->n);
	int spins = 0;
	while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
		if (++spins < SPIN_ITERS)
			cpu_relax();
		else
			sched_yield();
	}
}
