/*
 * A background thread that sleeps until asked (a kick), a time passes, or
 * it is told to stop: what the model hasher and the backup schedule share.
 */
#ifndef PRIVAI_ADMIN_WORKER_H
#define PRIVAI_ADMIN_WORKER_H

#include <pthread.h>
#include <stdint.h>

struct worker {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, kick;
};

/* Start fn(arg) on a new thread: 0, or APP_EIO (nothing to stop). */
int worker_start(struct worker *w, void *(*fn)(void *), void *arg);
/* Wake the thread from worker_wait. */
void worker_kick(struct worker *w);
/* Ask the thread to end and wait for it. */
void worker_stop(struct worker *w);
/* In the thread: sleep up to `seconds` or until kicked; 0 when told to
 * stop, else 1.  A kick during the work before it is not lost. */
int worker_wait(struct worker *w, int64_t seconds);
/* In the thread: whether it was told to stop. */
int worker_stopping(struct worker *w);

#endif
