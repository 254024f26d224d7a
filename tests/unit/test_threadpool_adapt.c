/*
 * The pool's width on shared CPUs (threadpool_adapt.h): the state machine
 * fed waiting shares, then a real pool on one CPU beside a busy thread,
 * which must fall back to its calling thread and still run every part,
 * and the fixture model's logits, the same bit for bit at either width.
 */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "privai/model.h"
#include "privai/status.h"
#include "privai/threadpool.h"
#include "threadpool_adapt.h"

#define S 1000000000LL /* a second in ns */
#define W ADAPT_WINDOW_NS

/* Feed `n` windows of `share` and `rate` jobs a second from *t on;
 * returns the last width. */
static int
feed(struct pool_adapt *a, int64_t *t, int n, double share, double rate)
{
	int w = a->width;

	for (int i = 0; i < n; i++) {
		*t += W;
		w = pool_adapt_decide(a, *t, share, rate);
	}
	return w;
}

/* A probe's windows, all waiting `share`: the first runs `first` jobs a
 * second (it is not judged), the rest `rate`; returns the width after. */
static int
probe(struct pool_adapt *a, int64_t *t, double share, double first, double rate)
{
	feed(a, t, 1, share, first);
	return feed(a, t, ADAPT_PROBE_WINDOWS - 1, share, rate);
}

static void
test_decide(void)
{
	struct pool_adapt a;
	int64_t t = 0;

	CHECK(pool_adapt_init(&a, 4) == 0 && a.width == 4, "a pool starts at full width");
	/* alone on its CPUs (waits under 1 %): never narrows */
	CHECK(feed(&a, &t, 1000, 0.01, 100) == 4, "100 s alone at 1 %% waiting: still 4 threads");
	CHECK(feed(&a, &t, 1, ADAPT_CONTENDED, 100) == 4, "waiting exactly the threshold is not contention");

	/* another engine arrives: both narrow, and then nobody waits */
	CHECK(feed(&a, &t, 1, 0.45, 60) == 1, "one window waiting 45 %%: the caller alone");
	CHECK(feed(&a, &t, 9, 0.0, 80) == 1, "narrow and free for 0.9 s: stays narrow");
	CHECK(feed(&a, &t, 1, 0.0, 80) == 4 && a.probing, "after 1 s narrow, a probe at full width");
	CHECK(feed(&a, &t, ADAPT_PROBE_WINDOWS - 1, 0.40, 70) == 4 && a.probing,
	      "a probe that waits runs %d windows before it is judged", ADAPT_PROBE_WINDOWS);
	CHECK(feed(&a, &t, 1, 0.40, 70) == 1,
	      "the probe waits (the other engine is still there) and is slower: narrow");
	CHECK(feed(&a, &t, 19, 0.0, 80) == 1, "the next probe waits twice as long (2 s)");
	CHECK(feed(&a, &t, 1, 0.0, 80) == 4 && a.probing, "probe after 2 s");
	CHECK(probe(&a, &t, 0.35, 80, 100) == 1 && a.probe_ns == 4 * S,
	      "25 %% faster, where the lone thread ran free, is within the margin (%.2f): narrow", ADAPT_WIDE_GAIN);
	for (int i = 0; i < 10; i++) { /* 4 s, then 8 s, and no further */
		feed(&a, &t, (int)(a.probe_ns / W), 0.0, 80);
		probe(&a, &t, 0.30, 80, 80);
	}
	CHECK(a.probe_ns == ADAPT_RETRY_MAX_NS, "probes back off to 8 s (%lld)", (long long)a.probe_ns);
	CHECK(feed(&a, &t, (int)(a.probe_ns / W), 0.0, 80) == 4 && a.probing, "a probe is due");
	/* the other engine left: the probe finds free CPUs and full width stays */
	CHECK(feed(&a, &t, 1, 0.02, 100) == 4 && !a.probing, "the probe is free: full width again at once");
	CHECK(a.probe_ns == ADAPT_RETRY_MIN_NS, "and the probe interval starts over at 1 s");
	CHECK(feed(&a, &t, 100, 0.02, 100) == 4, "and stays");

	/* busy processes that do not yield, and jobs that gain from more
	 * threads all the same (a memory-bound model) */
	CHECK(feed(&a, &t, 1, 0.50, 150) == 1, "contended: narrow");
	CHECK(feed(&a, &t, 9, 0.33, 100) == 1, "a lone thread waiting a third of the time is no reason to widen");
	CHECK(feed(&a, &t, 1, 0.33, 100) == 4 && a.probing, "the probe after 1 s");
	CHECK(probe(&a, &t, 0.50, 150, 150) == 4 && !a.probing && a.narrow_ns == 2 * S,
	      "it waits half the time but runs 1.5x the jobs: full width stays, and narrowing backs off");
	CHECK(feed(&a, &t, 9, 0.50, 150) == 4, "contended at full width, but narrowing is not retried for 1 s");
	CHECK(feed(&a, &t, 1, 0.50, 150) == 1, "after 1 s it is tried again");
	CHECK(feed(&a, &t, 9, 0.33, 100) == 1 && feed(&a, &t, 1, 0.33, 100) == 4 && a.probing, "probe after 1 s");
	CHECK(probe(&a, &t, 0.50, 60, 125) == 4 && a.narrow_ns == 4 * S,
	      "a slow first window is not judged, and 25 %% faster beside a lone thread that waited a "
	      "third of the time clears the margin for oversubscribed CPUs (%.2f): full width",
	      ADAPT_WIDE_GAIN_SHARED);
	CHECK(feed(&a, &t, 20, 0.50, 125) == 1, "narrowing tried again after 2 s");
	CHECK(feed(&a, &t, 9, 0.33, 100) == 1 && feed(&a, &t, 1, 0.33, 100) == 4 && a.probing, "probe after 1 s");
	CHECK(probe(&a, &t, 0.50, 200, 105) == 1 && a.narrow_ns == ADAPT_RETRY_MIN_NS && a.probe_ns == 2 * S,
	      "a fast first window is not judged either, and 5 %% faster is within even that margin: "
	      "narrow, and the next probe in 2 s");

	/* beside busy processes, short jobs (a small model): narrow is faster */
	CHECK(feed(&a, &t, 19, 0.33, 100) == 1 && feed(&a, &t, 1, 0.33, 100) == 4 && a.probing, "probe after 2 s");
	CHECK(probe(&a, &t, 0.50, 72, 72) == 1 && a.probe_ns == 4 * S, "the probe ran 72 %% of the jobs: narrow");
	/* a lone thread's rate moves from window to window as the scheduler
	 * hands out slices: the mean of the narrow windows is the yardstick */
	for (int i = 0; i < 39; i++)
		feed(&a, &t, 1, i % 2 ? 0.50 : 0.0, i % 2 ? 60 : 140);
	CHECK(a.width == 1 && feed(&a, &t, 1, 0.0, 100) == 4 && a.probing,
	      "probe after 4 s of 60 and 140 jobs a second");
	CHECK(probe(&a, &t, 0.40, 135, 135) == 4, "135 against a mean of 101: wide");
	/* the busy processes go and another engine comes: the narrow windows
	 * run free, and the probe is judged by the wide margin again */
	CHECK(feed(&a, &t, 10, 0.45, 60) == 1, "contended: narrow after the 1 s it was not retried");
	CHECK(feed(&a, &t, 40, 0.0, 80) == 4 && a.probing, "probe after 4 s of free windows");
	CHECK(probe(&a, &t, 0.40, 100, 100) == 1, "25 %% faster, the lone thread free this time: narrow");

	/* its CPUs shrink to 2 cores: at most 2, and contention narrows
	 * and probes within those */
	pool_adapt_cap(&a, 2);
	CHECK(a.width == 2 && feed(&a, &t, 10, 0.02, 100) == 2, "capped at 2 threads of 4, and stays");
	CHECK(feed(&a, &t, 1, 0.45, 60) == 1 && feed(&a, &t, 9, 0.0, 80) == 1, "contended: narrow");
	CHECK(feed(&a, &t, 1, 0.0, 80) == 2 && a.probing, "the probe runs the 2 threads the CPUs allow, not 4");
	pool_adapt_cap(&a, 1);
	CHECK(a.width == 1 && feed(&a, &t, 30, 0.0, 80) == 1, "one core: never wider");
	pool_adapt_cap(&a, 9);
	CHECK(a.width == 4 && feed(&a, &t, 10, 0.0, 80) == 4, "more cores than threads: the 4 it has");
	pool_adapt_free(&a);

	CHECK(pool_adapt_init(&a, 1) == 0, "a one-thread pool");
	CHECK(feed(&a, &t, 5, 0.9, 100) == 1, "has nothing to narrow");
	pool_adapt_free(&a);
}

static atomic_int stop_hog;

static void *
hog(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&stop_hog, memory_order_relaxed))
		;
	return NULL;
}

/* The most threads whose parts fit in the bits of a tally's mask */
#define MAX_TALLY_THREADS (63 / THREADPOOL_PARTS_PER_THREAD)

struct tally {
	atomic_int ran;     /* parts run in this job */
	atomic_int nth;     /* the parts the job was cut into */
	atomic_long mask;   /* which of them ran */
	atomic_int threads; /* which pool threads ran them (bits) */
};

static void
count_part(void *ctx, int ith, int nth)
{
	struct tally *t = ctx;
	volatile double x = 0; /* a few microseconds of work a part */

	for (int i = 0; i < 2000; i++)
		x += i * 0.5;
	atomic_store(&t->nth, nth);
	atomic_fetch_or(&t->mask, 1L << ith);
	atomic_fetch_or(&t->threads, 1 << threadpool_self());
	atomic_fetch_add(&t->ran, 1);
}

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * S + ts.tv_nsec;
}

static cpu_set_t old_cpus;
static pthread_t hog_thread;

/* Pin this thread, and the threads it starts from now on, to its first
 * allowed CPU; 0, or -1 (with a SKIP) where schedstat is missing. */
static int
pin_to_one_cpu(void)
{
	cpu_set_t one;
	int first = -1;

	if (access("/proc/thread-self/schedstat", R_OK) != 0) {
		SKIP("this kernel has no schedstat: the pool stays at full width");
		return -1;
	}
	CHECK(sched_getaffinity(0, sizeof(old_cpus), &old_cpus) == 0, "affinity read");
	for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &old_cpus))
			first = c;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	CHECK(sched_setaffinity(0, sizeof(one), &one) == 0, "pinned to CPU %d", first);
	return 0;
}

static void
unpin(void)
{
	CHECK(sched_setaffinity(0, sizeof(old_cpus), &old_cpus) == 0, "affinity restored");
}

static void
start_hog(void)
{
	atomic_store(&stop_hog, 0);
	CHECK(pthread_create(&hog_thread, NULL, hog, NULL) == 0, "busy thread");
}

static void
stop_hog_and_unpin(void)
{
	atomic_store(&stop_hog, 1);
	pthread_join(hog_thread, NULL);
	unpin();
}

/* Two pool threads and a busy thread on one CPU: the threads wait for
 * the CPU most of the time, so the pool must narrow, and every job must
 * still run whole. */
static void
test_one_cpu(void)
{
	struct threadpool *p;

	if (pin_to_one_cpu() < 0)
		return;
	CHECK(threadpool_new(2, &p) == 0, "pool of 2");
	threadpool_adapt(p, 1);
	start_hog();

	long jobs = 0, whole = 0, narrowed = 0;
	int64_t t0 = now_ns();
	/* a deadline, not a timing: windows are 100 ms, 20 s is far beyond */
	while (now_ns() - t0 < 20 * S && narrowed < 200) {
		struct tally t = { 0 };
		threadpool_run(p, count_part, &t);
		jobs++;
		int nth = atomic_load(&t.nth);
		whole += atomic_load(&t.ran) == nth && atomic_load(&t.mask) == (1L << nth) - 1;
		narrowed += nth == 1 && threadpool_width(p) == 1;
	}
	stop_hog_and_unpin();
	CHECK(narrowed >= 200, "the pool ran on its calling thread alone beside the busy thread (%ld of %ld jobs)",
	      narrowed, jobs);
	CHECK(whole == jobs, "every part of every job ran once, narrow or wide (%ld of %ld jobs)", whole, jobs);
	threadpool_adapt(p, 0);
	CHECK(threadpool_width(p) == 2, "adapting off: full width again");
	threadpool_free(p);
}

/* Every thread of this process onto `set`, as the admin moves a
 * deployment's threads (supervisor.c) or systemd its unit's. */
static int
move_process(const cpu_set_t *set)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int moved = 0, failed = 0;

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);
		if (end == de->d_name || *end != '\0')
			continue;
		if (sched_setaffinity((pid_t)tid, sizeof(*set), set) != 0)
			failed++;
		else
			moved++;
	}
	closedir(d);
	return failed == 0 && moved > 0 ? 0 : -1;
}

/* Jobs on `p` until its width has read `want` for 200 jobs and at least
 * `busy` threads ran parts of those after the first 100 (bit 30: one of
 * them was not cut into THREADPOOL_PARTS_PER_THREAD parts a thread of
 * `want`), or 20 s pass (a
 * deadline, not a timing: the width follows the CPUs at the next 100 ms
 * window).  Returns the threads (bits) that ran parts of those jobs, or
 * -1 when the width never settled. */
static int
run_until_width(struct threadpool *p, int want, int busy, long *jobs, long *whole)
{
	int64_t t0 = now_ns();
	int settled = 0, ran = 0;

	while (now_ns() - t0 < 20 * S && (settled < 200 || __builtin_popcount((unsigned)ran) < busy)) {
		struct tally t = { 0 };
		threadpool_run(p, count_part, &t);
		(*jobs)++;
		int nth = atomic_load(&t.nth);
		*whole += atomic_load(&t.ran) == nth && atomic_load(&t.mask) == (1L << nth) - 1;
		if (threadpool_width(p) != want)
			settled = ran = 0;
		else if (++settled > 100 && nth == (want > 1 ? THREADPOOL_PARTS_PER_THREAD * want : 1))
			ran |= atomic_load(&t.threads);
		else if (settled > 100)
			ran |= 1 << 30; /* cut for another width */
	}
	return settled >= 200 ? ran : -1;
}

/* A pool one thread wider than the process's cores runs only as many
 * threads as they are, the others asleep; moved onto one CPU, the
 * calling thread alone; moved back, as many as the cores again; every
 * job whole throughout.  (Up to MAX_TALLY_THREADS threads: a job's parts
 * are bits of a long.) */
static void
test_follows_cpus(void)
{
	struct threadpool *p;
	cpu_set_t all, one;
	long jobs = 0, whole = 0;
	int first = -1, cores = threadpool_default_threads();
	int n = cores + 1 < MAX_TALLY_THREADS ? cores + 1 : MAX_TALLY_THREADS, full = cores < n ? cores : n;

	if (access("/proc/thread-self/schedstat", R_OK) != 0) {
		SKIP("this kernel has no schedstat");
		return;
	}
	CHECK(sched_getaffinity(0, sizeof(all), &all) == 0, "affinity read");
	for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &all))
			first = c;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	CHECK(threadpool_new(n, &p) == 0, "pool of %d", n);
	threadpool_adapt(p, 1);

	/* the threads past the width never run a part; below it, at least
	 * two do (where there are two cores) */
	int busy = full > 1 ? 2 : 1;
	int ran = run_until_width(p, full, busy, &jobs, &whole);
	CHECK(ran > 0 && ran < 1 << full && __builtin_popcount((unsigned)ran) >= busy,
	      "on %d cores a pool of %d runs %d threads (threads %#x)", cores, n, full, ran);
	CHECK(move_process(&one) == 0, "the process moved onto CPU %d", first);
	ran = run_until_width(p, 1, 1, &jobs, &whole);
	CHECK(ran == 1, "on one CPU only the calling thread runs parts (threads %#x)", ran);
	CHECK(move_process(&all) == 0, "the process moved back");
	ran = run_until_width(p, full, busy, &jobs, &whole);
	CHECK(ran > 0 && ran < 1 << full && __builtin_popcount((unsigned)ran) >= busy,
	      "back on %d cores: %d threads again (threads %#x)", cores, full, ran);
	CHECK(whole == jobs, "every part of every job ran once at every width (%ld of %ld jobs)", whole, jobs);
	threadpool_free(p);
}

/* The fixture model's logits for a prompt, from a context of 2 threads
 * that adapts or not; with `busy`, on one CPU beside a busy thread until
 * the pool has narrowed.  Returns 0, or -1 (with a failed CHECK or SKIP). */
static int
model_logits(const char *path, int busy, float *out, size_t n_out)
{
	static const int32_t prompt[] = { 1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203, 29889 };
	int n = (int)(sizeof(prompt) / sizeof(prompt[0]));
	struct engine_ctx_params cp = { .n_ctx = 64, .n_threads = 2, .fixed_threads = !busy };
	struct engine_model *m = NULL;
	struct engine_ctx *ctx = NULL;
	char err[PRIVAI_ERR_LEN];
	int r = -1;

	if (busy && pin_to_one_cpu() < 0)
		return -1;
	if (engine_model_load(path, &m, err) < 0 || engine_ctx_new(m, &cp, &ctx, err) < 0) {
		CHECK(0, "%s: %s", path, err);
		goto out;
	}
	if ((size_t)n * (size_t)m->hp.n_vocab > n_out) {
		CHECK(0, "%s: more logits than the buffer", path);
		goto out;
	}
	if (busy)
		start_hog();
	int64_t t0 = now_ns();
	do { /* a deadline, not a timing: the pool narrows within a few windows */
		engine_ctx_reset(ctx);
		r = engine_decode(ctx, prompt, n, 1, out, err);
	} while (r == 0 && busy && engine_ctx_threads_active(ctx) != 1 && now_ns() - t0 < 20 * S);
	if (busy) {
		/* once more at the width it settled on */
		int width = engine_ctx_threads_active(ctx);
		engine_ctx_reset(ctx);
		r = r == 0 ? engine_decode(ctx, prompt, n, 1, out, err) : r;
		stop_hog_and_unpin();
		CHECK(width == 1 && engine_ctx_threads_active(ctx) == 1,
		      "the model's pool narrowed to one thread beside the busy thread (%d)", width);
	}
	CHECK(r == 0, "decode: %s", err);
	r = r == 0 ? n * m->hp.n_vocab : -1;
	engine_ctx_free(ctx);
	engine_model_free(m);
	return r;
out:
	if (busy)
		unpin();
	engine_ctx_free(ctx);
	engine_model_free(m);
	return r;
}

static void
test_model_same_logits(void)
{
	const char *dir = fixtures_dir();
	char path[1024];
	size_t cap = 12 * 32000;
	float *wide = malloc(cap * sizeof(float)), *narrow = malloc(cap * sizeof(float));

	if (dir == NULL || wide == NULL || narrow == NULL) {
		free(wide);
		free(narrow);
		return;
	}
	snprintf(path, sizeof(path), "%s/models/tiny-llama-spm-q8_0.gguf", dir);
	int n = model_logits(path, 0, wide, cap);
	int m = n > 0 ? model_logits(path, 1, narrow, cap) : -1;
	CHECK(n > 0 && m == n && memcmp(wide, narrow, (size_t)n * sizeof(float)) == 0,
	      "the logits of 12 tokens are the same bit for bit with 2 threads and with the pool narrowed to 1");
	free(wide);
	free(narrow);
}

int
main(void)
{
	test_decide();
	test_one_cpu();
	test_follows_cpus();
	test_model_same_logits();
	return test_summary();
}
