/*
 * Serving metrics in Prometheus text format, named and bucketed as vLLM
 * names them so existing dashboards work unchanged.  Plain counters and
 * fixed-bucket histograms, fed by the scheduler's observer callbacks and
 * read under the scheduler's lock: the scheduler itself keeps none.
 */
#ifndef PRIVAI_METRICS_H
#define PRIVAI_METRICS_H

#include <stdint.h>

#include "privai/collective.h"
#include "privai/scheduler.h"
#include "server/strbuf.h"

#define HIST_MAX_BUCKETS 24

struct histogram {
	const double *bounds;
	int n_bounds;
	uint64_t counts[HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last is +Inf */
	uint64_t count;
	double sum;
};

enum hist_kind { HIST_TTFT, HIST_ITL, HIST_LATENCY, HIST_TOKENS };

void histogram_init(struct histogram *h, enum hist_kind kind);
void histogram_observe(struct histogram *h, double v);

struct serving_metrics {
	uint64_t prompt_tokens, generation_tokens;
	uint64_t prefix_queries, prefix_hits; /* in tokens, as vLLM counts them */
	uint64_t preemptions;
	uint64_t success[5]; /* by finish_reason */
	uint64_t forward_passes, batched_tokens;
	struct histogram ttft, itl, e2e, queue;
	/* per finished request, as vLLM keeps them */
	struct histogram prompt_len, gen_len, max_tokens; /* in tokens */
	struct histogram prefill, decode, inference;      /* seconds: first scheduled to first token,
							   * first token to finish, and both */
	/* set once the context exists: what its memory went to */
	double kv_cache_bytes;      /* the KV pool, as the backend stores it */
	double device_memory_bytes; /* the GPU's memory; 0 on the CPU */
	double device_budget_bytes; /* --gpu-memory-utilization of it; 0 without a budget */
	/* a model split over ranks (privai/collective.h): the group, whose
	 * counters the forward passes move (read here without a lock: a
	 * scrape may see a pass's counts partly added), and rank 0's weights */
	const struct coll *tp_group;
	double tp_weight_bytes;
};

void serving_metrics_init(struct serving_metrics *m);

/* The observer (privai/scheduler.h) that feeds m: put it in the
 * scheduler's params.  Its callbacks run under the scheduler's lock. */
struct sched_observer serving_metrics_observer(struct serving_metrics *m);

/* Prometheus text of m and s's gauges, malloc'd (NULL when out of
 * memory); takes s's lock to read them. */
char *serving_metrics_text(const struct serving_metrics *m, struct scheduler *s, const char *model_name);

#endif
