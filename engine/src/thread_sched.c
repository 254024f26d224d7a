/*
 * sched_setattr for the calling thread, and what a thread that serves a
 * network peer asks of it (thread_sched.h).
 *
 * A stream's connection thread wakes once a stream interval to write the
 * tokens that came.  Woken on a CPU where the forward pass runs (the
 * kernel puts it back where it last ran, and the pool fills every CPU it
 * may use), it preempted a thread of that pass: the step waited for the
 * write, and the pool's other threads, finding no work, went to sleep and
 * had to be woken again.  Under SCHED_BATCH a waking thread preempts no
 * one: it runs when a CPU comes free (another thread of the pool sleeps)
 * or at the next tick, a few milliseconds at most, which a write of
 * buffered tokens can afford.
 *
 * A request's parse and its first token are the time to first token,
 * and there the opposite holds.  Under EEVDF (Linux 6.6 on) a woken
 * thread with the default slice waits for the running one to use up its
 * own before it may preempt it, and the pool's threads run without a
 * break while a request decodes: the first token's write waited for one
 * of them, up to 4-5 ms on 2 CPUs where the prompt took 0.7 (the fixture
 * model; a client beside it measured 1.7-5.5 ms for half the requests).
 * Outside its deferred writes such a thread asks for a short slice, and
 * woken it preempts at once.  privai-admin's relay of a deployment's
 * stream is the same kind of thread, one hop further.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "thread_sched.h"

/* struct sched_attr (linux/sched/types.h), which glibc 2.36 lacks */
struct thread_sched_attr {
	uint32_t size;
	uint32_t policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};

int
thread_sched_set(int policy, uint64_t slice_ns)
{
	struct thread_sched_attr a;

	memset(&a, 0, sizeof(a));
	/* read first: sched_setattr sets the nice value too */
	if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof(a), 0) != 0)
		return -1;
	/* a real-time or idle policy is the operator's choice: kept */
	if (a.policy != SCHED_OTHER && a.policy != SCHED_BATCH)
		return 0;
	a.size = sizeof(a);
	a.policy = (uint32_t)policy;
	a.flags = 0;
	a.priority = 0;
	a.runtime = slice_ns;
	return syscall(SYS_sched_setattr, 0, &a, 0) == 0 ? 0 : -1;
}

int
thread_sched_defer(int on)
{
	/* 0 as the thread was created, 1 a short slice, 2 deferred */
	static _Thread_local int mode;
	int want = on ? 2 : 1;

	if (mode == want)
		return 0;
	if (thread_sched_set(on ? SCHED_BATCH : SCHED_OTHER, on ? 0 : THREAD_SLICE_SHORT_NS) != 0)
		return -1;
	mode = want;
	return 0;
}
