/*
 * thread_sched_set and thread_sched_defer (thread_sched.h): the calling
 * thread's policy and slice change, its nice value stays, and the
 * kernel's own view says so (sched_getscheduler, getpriority, /proc's
 * se.slice where the kernel keeps a thread's own slice).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "testlib.h"
#include "thread_sched.h"

/* The calling thread's se.slice in ns, or -1 where /proc has none. */
static long long
own_slice(void)
{
	char path[64], line[256];
	long long v = -1;

	snprintf(path, sizeof(path), "/proc/self/task/%ld/sched", (long)syscall(SYS_gettid));
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "se.slice", 8) == 0) {
			const char *colon = strchr(line, ':');
			v = colon != NULL ? atoll(colon + 1) : -1;
		}
	fclose(f);
	return v;
}

static void *
run(void *arg)
{
	(void)arg;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	long long def = own_slice();

	/* a nice value of its own (raising it needs no privilege) */
	CHECK(setpriority(PRIO_PROCESS, (id_t)tid, 5) == 0, "nice 5: %s", strerror(errno));
	CHECK(thread_sched_set(SCHED_BATCH, 0) == 0, "SCHED_BATCH: %s", strerror(errno));
	errno = 0;
	int nice = getpriority(PRIO_PROCESS, (id_t)tid);
	CHECK(sched_getscheduler(0) == SCHED_BATCH && nice == 5 && errno == 0,
	      "the policy is SCHED_BATCH (%d) and nice still 5 (%d)", sched_getscheduler(0), nice);
	CHECK(thread_sched_set(SCHED_OTHER, THREAD_SLICE_SHORT_NS) == 0, "SCHED_OTHER, short slice: %s",
	      strerror(errno));
	long long shorter = own_slice();
	nice = getpriority(PRIO_PROCESS, (id_t)tid);
	CHECK(sched_getscheduler(0) == SCHED_OTHER && nice == 5, "back to SCHED_OTHER (%d), nice still 5 (%d)",
	      sched_getscheduler(0), nice);
	if (def < 0 || shorter == def)
		SKIP("this kernel keeps no thread's own slice (Linux 6.12 on): se.slice %lld, %lld", def, shorter);
	else
		CHECK(shorter == (long long)THREAD_SLICE_SHORT_NS, "se.slice %lld, asked for %llu (default %lld)",
		      shorter, THREAD_SLICE_SHORT_NS, def);
	CHECK(thread_sched_set(SCHED_OTHER, 0) == 0 && (def < 0 || own_slice() == def),
	      "slice 0 gives the kernel's default back: %lld, default %lld", own_slice(), def);
	/* a network thread's two modes */
	CHECK(thread_sched_defer(1) == 0 && sched_getscheduler(0) == SCHED_BATCH, "deferred: SCHED_BATCH (%d)",
	      sched_getscheduler(0));
	CHECK(thread_sched_defer(0) == 0 && sched_getscheduler(0) == SCHED_OTHER &&
		      (def < 0 || shorter == def || own_slice() == (long long)THREAD_SLICE_SHORT_NS),
	      "not deferred: SCHED_OTHER (%d), the short slice (%lld)", sched_getscheduler(0), own_slice());
	/* a policy someone else chose stays (last: leaving SCHED_IDLE may take
	 * a privilege) */
	struct sched_param none = { 0 };
	CHECK(pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) == 0 &&
		      thread_sched_set(SCHED_OTHER, THREAD_SLICE_SHORT_NS) == 0 && sched_getscheduler(0) == SCHED_IDLE,
	      "SCHED_IDLE is kept: %d", sched_getscheduler(0));
	return NULL;
}

int
main(void)
{
	pthread_t t;

	/* on a thread of its own: the nice value and policy stay with it */
	if (pthread_create(&t, NULL, run, NULL) != 0) {
		CHECK(0, "cannot start a thread");
		return test_summary();
	}
	pthread_join(t, NULL);
	return test_summary();
}
