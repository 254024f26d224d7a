/*
 * sched_setattr for the calling thread (thread_sched.h says why).
 */
#include <errno.h>
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
	a.size = sizeof(a);
	a.policy = (uint32_t)policy;
	a.flags = 0;
	a.priority = 0;
	a.runtime = slice_ns;
	return syscall(SYS_sched_setattr, 0, &a, 0) == 0 ? 0 : -1;
}
