/* Background threads that wait for work (worker.h). */
#include <errno.h>
#include <time.h>

#include "status.h"
#include "worker.h"

int
worker_start(struct worker *w, void *(*fn)(void *), void *arg)
{
	w->stop = w->kick = 0;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->thread, NULL, fn, arg) != 0) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		return APP_EIO;
	}
	return 0;
}

static void
wake(struct worker *w, int stop)
{
	pthread_mutex_lock(&w->mu);
	if (stop)
		w->stop = 1;
	else
		w->kick = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void
worker_kick(struct worker *w)
{
	wake(w, 0);
}

void
worker_stop(struct worker *w)
{
	wake(w, 1);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
}

int
worker_wait(struct worker *w, int64_t seconds)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds;
	pthread_mutex_lock(&w->mu);
	while (!w->stop && !w->kick)
		if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT)
			break;
	w->kick = 0;
	int go_on = !w->stop;
	pthread_mutex_unlock(&w->mu);
	return go_on;
}

int
worker_stopping(struct worker *w)
{
	pthread_mutex_lock(&w->mu);
	int s = w->stop;
	pthread_mutex_unlock(&w->mu);
	return s;
}
