/*
 * How many of a pool's threads should take part in its jobs when the CPUs
 * are shared.  A job waits for its last part, so a pool whose threads the
 * kernel keeps preempting (another engine, a compile, the admin on the
 * same cores) spends its time waiting for whichever thread is off a CPU.
 * The signal is the kernel's own: the time each thread spent runnable but
 * not running (/proc/.../schedstat, "run_delay").  When the working
 * threads waited for a CPU for more than CONTENDED of a window, the pool
 * narrows to its calling thread alone.  A probe at full width, after 1 s
 * narrow and then backing off to 8 s, decides whether it goes back: when
 * the CPUs were free in any of its windows, or when its windows ran more
 * jobs a second than the narrow windows did by WIDE_GAIN (beside busy
 * processes that never yield, more threads get more of the CPUs: a
 * memory-bound model's long jobs can gain from that, where a small
 * model's short ones lose more to waiting for a preempted thread; the
 * jobs a second measure it).  A probe that waits runs PROBE_WINDOWS
 * windows and its first is not judged: threads woken after a narrow
 * spell can start out of step with the others' time slices (beside two
 * busy processes, 2 of 15 of the 1B-class model's probes read 0.84-0.90x
 * the narrow rate in their first window and 1.19-1.26x in the two after
 * it, docs/performance.md), and one window is too noisy to judge by.
 * The margin is wide because beside another engine a wider pool's gain
 * is mostly the other's loss: two 1B-class engines that each took a 10 %
 * gain ended slower together than two narrow ones.  Two narrow engines
 * on two CPUs leave each lone thread a CPU of its own, though; a lone
 * thread that waited for a CPU itself (mean share over CONTENDED) sits
 * beside threads that oversubscribe the CPUs already, and a wider pool
 * only claims its threads' share of them: WIDE_GAIN_SHARED suffices.
 * Waiting alone is no sign either way: a lone thread beside two busy
 * processes on two CPUs waits a third of the time and still runs faster
 * than two threads (the fixture model: 1160-1280 tokens/s against 870-920,
 * docs/performance.md).  Alone on its CPUs a pool's threads wait well
 * under 1 % of the time and it never narrows.
 *
 * The CPUs themselves can change under a running engine: the admin moves
 * a deployment that holds no CPUs of its own onto whichever CPUs the
 * others leave it (its affinity, or its unit's AllowedCPUs=).  A pool
 * wider than its CPUs only waits for its own preempted threads, so every
 * window also reads the calling thread's affinity, and the pool's width
 * is capped at the physical cores in it (at the CPUs, where the pool was
 * asked for more threads than cores: the hyperthreads wanted).  The
 * threads past the cap sleep until the CPUs come back; a pool started
 * with more threads than its CPUs have cores (serve --max-threads) runs
 * them as its CPUs grow, and never more than it has.
 *
 * pool_adapt_decide() is the state machine alone, fed a window's waiting
 * share and jobs a second, so that tests can drive it; pool_adapt_width()
 * reads the clock, counts the jobs and reads the threads' schedstat.
 */
#ifndef PRIVAI_THREADPOOL_ADAPT_H
#define PRIVAI_THREADPOOL_ADAPT_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#define ADAPT_EVERY 32                    /* jobs between clock reads */
#define ADAPT_WINDOW_NS 100000000LL       /* 100 ms: many decode steps, a few time slices */
#define ADAPT_CONTENDED 0.20              /* share of a window a working thread waited for a CPU */
#define ADAPT_WIDE_GAIN 1.30              /* a contended probe goes wide when this much faster */
#define ADAPT_WIDE_GAIN_SHARED 1.10       /* ... or this, where the lone thread waited too */
#define ADAPT_PROBE_WINDOWS 3             /* a probe's windows: the first settles, the rest count */
#define ADAPT_RETRY_MIN_NS 1000000000LL   /* first probe of the other width after 1 s ... */
#define ADAPT_RETRY_MAX_NS 8000000000LL   /* ... doubling each time it fails, up to 8 s */
#define ADAPT_NARROW_MAX_NS 32000000000LL /* narrowing that did not help: retried up to 32 s apart */

struct pool_adapt {
	int width_max;                /* the pool's threads */
	int width_cap;                /* those its CPUs can run (pool_adapt_cap) */
	int width;                    /* threads that take part now: 1 or width_cap */
	int probing;                  /* full width on probation: its windows so far + 1, or 0 */
	double probe_rate;            /* the sum of the judged probe windows' jobs a second */
	int narrow_n;                 /* windows since narrowing ... */
	double narrow_rate;           /* ... the sum of their jobs a second ... */
	double narrow_share;          /* ... and of their waiting shares */
	int64_t probe_at, probe_ns;   /* when narrow, when to try full width again */
	int64_t narrow_at, narrow_ns; /* after narrowing did not help, when to try it again */
	/* what pool_adapt_width() reads */
	unsigned runs, runs0; /* jobs asked for, and at the window's start */
	int64_t t0, delay0;
	int caller, caller_fd; /* the thread running jobs, and its schedstat */
	int *fds;              /* workers' schedstat, -1 until opened */
	int broken;            /* schedstat cannot be read here: stay at the cap */
	cpu_set_t cpus;        /* the caller's CPUs as last read */
	int per_cpu;           /* the cap counts CPUs, not cores (threadpool_count_cpus) */
};

/* The monotonic clock in ns: the windows' and the pool's spins' */
int64_t pool_now_ns(void);
/* width_max >= 1.  Returns 0, or -1 out of memory. */
int pool_adapt_init(struct pool_adapt *a, int width_max);
void pool_adapt_free(struct pool_adapt *a);
/* One window ended at now_ns; share: the time the working threads waited
 * for a CPU over the window's length times their number; rate: the jobs
 * it ran a second.  Returns the width for the next window. */
int pool_adapt_decide(struct pool_adapt *a, int64_t now_ns, double share, double rate);
/* A new cap (1..width_max): the state machine starts over at it. */
void pool_adapt_cap(struct pool_adapt *a, int cap);
/* The physical cores among the CPUs of `set` (hyperthread siblings count
 * once), at least 1. */
int pool_cores(const cpu_set_t *set);
/* Before a job: the width to run it at.  tids[i] is worker i's thread id
 * (0 while unknown; tids[0] is unused: the caller is thread 0). */
int pool_adapt_width(struct pool_adapt *a, const atomic_int *tids);

#endif
