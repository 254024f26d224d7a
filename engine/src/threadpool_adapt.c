/*
 * The pool's width under contention (threadpool_adapt.h says why and
 * when).  Everything here runs on the thread calling threadpool_run(), so
 * the state needs no locking.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "threadpool_adapt.h"

int
pool_adapt_init(struct pool_adapt *a, int width_max)
{
	*a = (struct pool_adapt){
		.width_max = width_max,
		.width_cap = width_max,
		.width = width_max,
		.probe_ns = ADAPT_RETRY_MIN_NS,
		.narrow_ns = ADAPT_RETRY_MIN_NS,
		.caller_fd = -1,
	};
	CPU_ZERO(&a->cpus); /* no CPUs: the first read differs */
	if ((a->fds = malloc((size_t)width_max * sizeof(*a->fds))) == NULL)
		return -1;
	for (int i = 0; i < width_max; i++)
		a->fds[i] = -1;
	return 0;
}

void
pool_adapt_free(struct pool_adapt *a)
{
	if (a->fds != NULL)
		for (int i = 0; i < a->width_max; i++)
			if (a->fds[i] >= 0)
				close(a->fds[i]);
	if (a->caller_fd >= 0)
		close(a->caller_fd);
	free(a->fds);
	a->fds = NULL;
	a->caller_fd = -1;
}

static int64_t
twice_capped(int64_t ns, int64_t max)
{
	return ns * 2 > max ? max : ns * 2;
}

static void
narrow(struct pool_adapt *a, int64_t now)
{
	a->width = 1;
	a->narrow_n = 0;
	a->narrow_rate = 0;
	a->narrow_share = 0;
	a->probe_at = now + a->probe_ns;
}

void
pool_adapt_cap(struct pool_adapt *a, int cap)
{
	a->width_cap = cap < 1 ? 1 : cap > a->width_max ? a->width_max : cap;
	a->width = a->width_cap;
	a->probing = 0;
	a->probe_ns = a->narrow_ns = ADAPT_RETRY_MIN_NS;
	a->narrow_at = 0;
}

/* The width a probe that waited for CPUs keeps: full, when its judged
 * windows ran enough more jobs a second than the narrow ones did. */
static int
probe_wins(const struct pool_adapt *a)
{
	if (a->narrow_n == 0)
		return 0;
	double wide = a->probe_rate / (ADAPT_PROBE_WINDOWS - 1);
	double narrow = a->narrow_rate / a->narrow_n;
	/* a lone thread that waited itself: the CPUs were oversubscribed
	 * before this pool widened, so more threads only claim their share */
	double gain = a->narrow_share / a->narrow_n > ADAPT_CONTENDED ? ADAPT_WIDE_GAIN_SHARED : ADAPT_WIDE_GAIN;

	return wide > gain * narrow;
}

int
pool_adapt_decide(struct pool_adapt *a, int64_t now, double share, double rate)
{
	int contended = share > ADAPT_CONTENDED;

	if (a->width_cap == 1)
		return a->width = 1;
	if (a->width == a->width_cap) {
		if (a->probing) {
			if (!contended) { /* the CPUs are free again */
				a->probing = 0;
				a->probe_ns = ADAPT_RETRY_MIN_NS;
				return a->width;
			}
			/* the first window is not judged: threads woken from
			 * sleep start out of step with the others' time slices */
			if (a->probing++ > 1)
				a->probe_rate += rate;
			if (a->probing <= ADAPT_PROBE_WINDOWS)
				return a->width;
			a->probing = 0;
			if (probe_wins(a)) {
				/* contended, and faster for it: the others on these CPUs
				 * do not yield, and more threads get more of them */
				a->narrow_at = now + a->narrow_ns;
				a->narrow_ns = twice_capped(a->narrow_ns, ADAPT_NARROW_MAX_NS);
				return a->width;
			}
			a->narrow_ns = ADAPT_RETRY_MIN_NS; /* narrow was the faster */
			a->probe_ns = twice_capped(a->probe_ns, ADAPT_RETRY_MAX_NS);
			narrow(a, now);
		} else if (contended && now >= a->narrow_at) {
			narrow(a, now);
		}
		return a->width;
	}
	a->narrow_rate += rate;
	a->narrow_share += share;
	a->narrow_n++;
	if (now >= a->probe_at) {
		a->width = a->width_cap;
		a->probing = 1;
		a->probe_rate = 0;
	}
	return a->width;
}

int64_t
pool_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A thread's time runnable but not running, in ns ("run_delay", the
 * second field of schedstat); -1 when it cannot be read. */
static int64_t
run_delay(int fd)
{
	char buf[128];
	long long run, delay;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if (sscanf(buf, "%lld %lld", &run, &delay) != 2 || delay < 0)
		return -1;
	return delay;
}

static int
open_schedstat(int tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* The waiting time of the caller and every worker known so far; sets
 * *changed when a worker's file was opened now (its whole past waiting
 * joins the sum, so this window cannot be judged).  -1: unreadable. */
static int64_t
total_delay(struct pool_adapt *a, const atomic_int *tids, int *changed)
{
	int64_t sum = run_delay(a->caller_fd);

	for (int i = 1; i < a->width_max && sum >= 0; i++) {
		if (a->fds[i] < 0) {
			int tid = atomic_load_explicit(&tids[i], memory_order_acquire);
			if (tid <= 0 || (a->fds[i] = open_schedstat(tid)) < 0)
				continue;
			*changed = 1;
		}
		int64_t d = run_delay(a->fds[i]);
		sum = d < 0 ? -1 : sum + d;
	}
	return sum;
}

int
pool_cores(const cpu_set_t *set)
{
	int n_allowed = 0, n_cores = 0;
	unsigned char seen[4096] = { 0 };

	for (int cpu = 0; cpu < CPU_SETSIZE && cpu < 4096; cpu++) {
		if (!CPU_ISSET(cpu, set))
			continue;
		n_allowed++;
		char path[96];
		int first = cpu;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
		FILE *f = fopen(path, "r");
		/* the list starts with the core's lowest CPU: count a core once */
		if (f != NULL) {
			if (fscanf(f, "%d", &first) != 1)
				first = cpu;
			fclose(f);
		}
		if (first < 0 || first >= 4096 || !seen[first]) {
			if (first >= 0 && first < 4096)
				seen[first] = 1;
			n_cores++;
		}
	}
	if (n_cores < 1)
		n_cores = n_allowed;
	return n_cores < 1 ? 1 : n_cores;
}

/* Caps the width at the CPUs the calling thread may run on now, where
 * they changed since the last window (the cores are counted only then:
 * a file a CPU).  Returns 1 when the cap moved. */
static int
follow_cpus(struct pool_adapt *a)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_EQUAL(&set, &a->cpus))
		return 0;
	a->cpus = set;
	int cap = a->per_cpu ? CPU_COUNT(&set) : pool_cores(&set);
	cap = cap < a->width_max ? cap : a->width_max;
	if (cap == a->width_cap)
		return 0;
	pool_adapt_cap(a, cap);
	return 1;
}

int
pool_adapt_width(struct pool_adapt *a, const atomic_int *tids)
{
	int changed = 0;

	if (a->width_max == 1 || ++a->runs % ADAPT_EVERY != 0)
		return a->width;
	int64_t now = pool_now_ns();
	int self = (int)syscall(SYS_gettid);
	if (self != a->caller) { /* another thread runs jobs now: start over */
		if (a->caller_fd >= 0)
			close(a->caller_fd);
		a->caller = self;
		a->caller_fd = open_schedstat(self);
		changed = 1;
	} else if (now - a->t0 < ADAPT_WINDOW_NS) {
		return a->width;
	}
	/* a window on other CPUs says nothing of these */
	changed |= follow_cpus(a);
	int64_t delay = a->broken || a->caller_fd < 0 ? -1 : total_delay(a, tids, &changed);
	if (delay < 0) {
		/* no schedstat (a kernel without CONFIG_SCHED_INFO): no
		 * narrowing, the CPUs' cap only */
		a->broken = 1;
		a->width = a->width_cap;
	} else if (!changed) {
		pool_adapt_decide(a, now, (double)(delay - a->delay0) / ((double)(now - a->t0) * a->width),
				  (double)(a->runs - a->runs0) * 1e9 / (double)(now - a->t0));
	}
	a->t0 = now;
	a->delay0 = delay;
	a->runs0 = a->runs;
	return a->width;
}
