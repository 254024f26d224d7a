/*
 * How many of a pool's threads should take part in its jobs when the CPUs
 * are shared.  A job waits for its last part, so a pool whose threads the
 * kernel keeps preempting (another engine, a compile, the admin on the
 * same cores) spends its time waiting for whichever thread is off a CPU.
 * The signal is the kernel's own: the time each thread spent runnable but
 * not running (/proc/.../schedstat, "run_delay").  When the working
 * threads waited for a CPU for more than CONTENDED of a window, the pool
 * narrows to its calling thread alone; it goes back to full width when a
 * probe of it finds the CPUs free, or when running narrow did not take the
 * contention away (busy processes that do not yield: then more threads
 * get more of the CPUs).  A lone thread beside busy processes waits in
 * bursts (0 % one window, 50 % the next, as the scheduler hands out
 * slices), so narrowing is judged on the mean over its windows.  Alone on its CPUs a pool's threads wait well
 * under 1 % of the time and it never narrows.
 *
 * pool_adapt_decide() is the state machine alone, fed a window's waiting
 * share, so that tests can drive it; pool_adapt_width() reads the clock
 * and the threads' schedstat and calls it.
 */
#ifndef PRIVAI_THREADPOOL_ADAPT_H
#define PRIVAI_THREADPOOL_ADAPT_H

#include <stdatomic.h>
#include <stdint.h>

#define ADAPT_EVERY 32                    /* jobs between clock reads */
#define ADAPT_WINDOW_NS 100000000LL       /* 100 ms: many decode steps, a few time slices */
#define ADAPT_CONTENDED 0.20              /* share of a window a working thread waited for a CPU */
#define ADAPT_STILL_CONTENDED 5           /* narrow windows, at least, before judging narrowing */
#define ADAPT_RETRY_MIN_NS 1000000000LL   /* first probe of the other width after 1 s ... */
#define ADAPT_RETRY_MAX_NS 8000000000LL   /* ... doubling each time it fails, up to 8 s */
#define ADAPT_NARROW_MAX_NS 32000000000LL /* narrowing that did not help: retried up to 32 s apart */

struct pool_adapt {
	int width_max;                /* the pool's threads */
	int width;                    /* threads that take part now: 1 or width_max */
	int probing;                  /* this full-width window is a probe */
	int narrow_n;                 /* windows since narrowing ... */
	double narrow_share;          /* ... and the sum of their shares */
	int64_t probe_at, probe_ns;   /* when narrow, when to try full width again */
	int64_t narrow_at, narrow_ns; /* after narrowing did not help, when to try it again */
	/* what pool_adapt_width() reads */
	unsigned runs;
	int64_t t0, delay0;
	int caller, caller_fd; /* the thread running jobs, and its schedstat */
	int *fds;              /* workers' schedstat, -1 until opened */
	int broken;            /* schedstat cannot be read here: stay at full width */
};

/* width_max >= 1.  Returns 0, or -1 out of memory. */
int pool_adapt_init(struct pool_adapt *a, int width_max);
void pool_adapt_free(struct pool_adapt *a);
/* One window ended at now_ns; share: the time the working threads waited
 * for a CPU over the window's length times their number.  Returns the
 * width for the next window. */
int pool_adapt_decide(struct pool_adapt *a, int64_t now_ns, double share);
/* Before a job: the width to run it at.  tids[i] is worker i's thread id
 * (0 while unknown; tids[0] is unused: the caller is thread 0). */
int pool_adapt_width(struct pool_adapt *a, const atomic_int *tids);

#endif
