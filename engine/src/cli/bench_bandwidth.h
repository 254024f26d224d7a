#ifndef PRIVAI_BENCH_BANDWIDTH_H
#define PRIVAI_BENCH_BANDWIDTH_H

#include <stddef.h>

#include "privai/threadpool.h"

/*
 * The read bandwidth bench's generation bound comes from: a buffer of a
 * model's weights' size (at most BW_PROBE_MAX) summed by a pool of the
 * decode's thread count.  Opened once, run around every repetition: on a
 * shared host the memory bus moved 45 to 73 GB/s between two runs a
 * second apart, so a bound measured once, after the runs, said little of
 * the minutes the tokens were made in.
 */
struct bw_probe {
	struct threadpool *pool;
	void *buf;
	size_t bytes;
};

/* 0, or -1 where the buffer or the pool could not be had (no bound then). */
int bw_probe_open(struct bw_probe *p, size_t model_bytes, int threads);
/* GB/s now: the best of a few passes, plain loads and loads that ask
 * for lines ahead as each CPU's decode kernels do, in turn. */
double bw_probe_run(struct bw_probe *p);
void bw_probe_close(struct bw_probe *p);
/* Seconds on the monotonic clock, for bench's timings and the probe's. */
double bench_now(void);

#endif
