/*
 * Serving metrics in Prometheus text format, named and bucketed as vLLM
 * names them so existing dashboards work unchanged.  Plain counters and
 * fixed-bucket histograms; the owner serialises access (the scheduler's
 * lock).
 */
#ifndef PRIVAI_METRICS_H
#define PRIVAI_METRICS_H

#include <stdint.h>

#include "server/strbuf.h"

#define HIST_MAX_BUCKETS 24

struct histogram {
	const double *bounds;
	int n_bounds;
	uint64_t counts[HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last is +Inf */
	uint64_t count;
	double sum;
};

enum hist_kind { HIST_TTFT, HIST_ITL, HIST_LATENCY };

void histogram_init(struct histogram *h, enum hist_kind kind);
void histogram_observe(struct histogram *h, double v);

struct serving_metrics {
	uint64_t prompt_tokens, generation_tokens;
	uint64_t prefix_queries, prefix_hits; /* in tokens, as vLLM counts them */
	uint64_t preemptions;
	uint64_t success[5]; /* by finish_reason */
	uint64_t forward_passes, batched_tokens;
	struct histogram ttft, itl, e2e, queue;
};

void serving_metrics_init(struct serving_metrics *m);

/* Gauges come from the caller at render time. */
struct serving_gauges {
	int running, waiting;
	double kv_usage; /* 0..1 */
	int kv_blocks, kv_blocks_cached;
};

void serving_metrics_render(struct strbuf *b, const struct serving_metrics *m, const struct serving_gauges *g,
			    const char *model_name);

#endif
