/*
 * The read bandwidth bench's generation bound comes from (bench_bandwidth.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_bandwidth.h"

double
bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* How a pass asks for lines ahead of its loads: not at all; a line 8 KB
 * ahead every 2304 bytes, as decode does on the Zens; every line 3 KB
 * ahead into L2; or every line that way and 1 KB ahead into L1 as well,
 * as one token's stream does on the Xeons (cpu_x86.h) */
enum { BW_PLAIN, BW_SPARSE, BW_DENSE_L2, BW_DENSE_L2_L1, BW_ASKS };

struct bw_job {
	const uint8_t *base;
	size_t bytes;
	int ask; /* BW_PLAIN .. BW_DENSE_L2_L1: the lines asked for ahead */
	uint64_t sums[256];
};

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu_x86.h" /* the kernels' distances: SPARSE_*, ONE_TOKEN_AHEAD, ONE_TOKEN_NEAR */

/* 256-bit loads, as the kernels use: a scalar loop cannot keep up with
 * the memory and would measure itself.  BW_SPARSE asks for a line 8 KB
 * ahead every 18 steps of 128 bytes, as the 8-row groups' decode does
 * where cpu_stream_prefetch is off (X8_STREAM_PREFETCH): on a Zen 5 that
 * decode read more than these loads alone did.  BW_DENSE_L2 asks for
 * every line ONE_TOKEN_AHEAD ahead into L2, as one token's stream did
 * where it is on: on the AMX Xeon, two threads over 1 GB read 34.6-35.4
 * GB/s that way (2 KB ahead) against 33.2-33.8 with the loads alone.
 * BW_DENSE_L2_L1 also asks for it ONE_TOKEN_NEAR ahead into L1, as that
 * stream does now: a scratch loop there read 34.7 GB/s that way, 33.5
 * with the L2 request alone (medians of 15 passes over 512 MB a thread). */
__attribute__((target("avx2"))) static uint64_t
sum_avx2(const uint8_t *p, size_t lo, size_t hi, int ask)
{
	__m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;

	for (size_t i = lo, k = 0; i + 128 <= hi; i += 128, k++) {
		if (ask == BW_SPARSE && k % (SPARSE_PERIOD / 128) == 0)
			_mm_prefetch((const char *)(p + i) + SPARSE_AHEAD, _MM_HINT_T0);
		if (ask == BW_DENSE_L2 || ask == BW_DENSE_L2_L1) {
			_mm_prefetch((const char *)(p + i) + ONE_TOKEN_AHEAD, _MM_HINT_T1);
			_mm_prefetch((const char *)(p + i) + ONE_TOKEN_AHEAD + 64, _MM_HINT_T1);
		}
		if (ask == BW_DENSE_L2_L1) {
			_mm_prefetch((const char *)(p + i) + ONE_TOKEN_NEAR, _MM_HINT_T0);
			_mm_prefetch((const char *)(p + i) + ONE_TOKEN_NEAR + 64, _MM_HINT_T0);
		}
		a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
		b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
		c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
		d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
	}
	a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
	return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 3);
}
#endif

static void
bw_worker(void *arg, int ith, int nth)
{
	struct bw_job *j = arg;
	size_t lo = j->bytes * (size_t)ith / (size_t)nth, hi = j->bytes * (size_t)(ith + 1) / (size_t)nth;
	uint64_t s[8] = { 0 };

#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2")) {
		j->sums[ith % 256] = sum_avx2(j->base, lo, hi, j->ask);
		return;
	}
#endif
	for (size_t i = lo; i + 64 <= hi; i += 64)
		for (int k = 0; k < 8; k++) {
			uint64_t v;
			memcpy(&v, j->base + i + 8 * k, 8);
			s[k] += v;
		}
	j->sums[ith % 256] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* The buffer is in 2 MB pages, as the repacked weights decode streams
 * are.  The probe read the file's own mapping before; the repack hands
 * those pages back, and a run where the page cache had let them go
 * measured the disk: 12 GB/s, decode at 188 % of its "bound"
 * (docs/performance.md).  At most BW_PROBE_MAX: far past every cache,
 * and a 70B model's size in memory a second time would not fit. */
#define BW_PROBE_MAX ((size_t)1 << 30)
/* passes a probe: each way of asking ahead twice */
#define BW_PROBE_PASSES (2 * BW_ASKS)

int
bw_probe_open(struct bw_probe *p, size_t model_bytes, int threads)
{
	size_t bytes = model_bytes < BW_PROBE_MAX ? model_bytes : BW_PROBE_MAX;

	memset(p, 0, sizeof(*p));
	bytes &= ~(size_t)127;
	if (bytes == 0 || posix_memalign(&p->buf, (size_t)2 << 20, bytes) != 0) {
		p->buf = NULL;
		return -1;
	}
	(void)madvise(p->buf, bytes, MADV_HUGEPAGE); /* a hint: THP may be off */
	memset(p->buf, 1, bytes);
	p->bytes = bytes;
	if (threadpool_new(threads, &p->pool) < 0) {
		bw_probe_close(p);
		return -1;
	}
	return 0;
}

double
bw_probe_run(struct bw_probe *p)
{
	struct bw_job j = { p->buf, p->bytes, 0, { 0 } };
	double best = 0;

	/* the loads alone and with each decode's prefetch, in turn: the
	 * fastest bounds what a decode can read */
	for (int pass = 0; pass < BW_PROBE_PASSES; pass++) {
		j.ask = pass % BW_ASKS;
		double t0 = bench_now();
		threadpool_run(p->pool, bw_worker, &j);
		double gbs = (double)j.bytes / (bench_now() - t0) / 1e9;
		best = gbs > best ? gbs : best;
	}
	return best;
}

void
bw_probe_close(struct bw_probe *p)
{
	if (p->pool != NULL)
		threadpool_free(p->pool);
	free(p->buf);
	memset(p, 0, sizeof(*p));
}
