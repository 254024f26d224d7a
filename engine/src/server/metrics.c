/* Prometheus text exposition of the serving metrics (vLLM names). */
#include <stdio.h>
#include <string.h>

#include "privai/collective.h"
#include "privai/scheduler.h"
#include "server/metrics.h"

/* vLLM's bucket boundaries, in seconds */
static const double ttft_bounds[] = {
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
	1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};
static const double itl_bounds[] = {
	0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
};
static const double latency_bounds[] = {
	0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,   20.0,
	30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
};

/* vLLM's 1-2-5 series for token counts */
static const double token_bounds[] = {
	1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000,
};

#define NBOUNDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

void
histogram_init(struct histogram *h, enum hist_kind kind)
{
	memset(h, 0, sizeof(*h));
	switch (kind) {
	case HIST_TTFT:
		h->bounds = ttft_bounds;
		h->n_bounds = NBOUNDS(ttft_bounds);
		break;
	case HIST_ITL:
		h->bounds = itl_bounds;
		h->n_bounds = NBOUNDS(itl_bounds);
		break;
	case HIST_LATENCY:
		h->bounds = latency_bounds;
		h->n_bounds = NBOUNDS(latency_bounds);
		break;
	case HIST_TOKENS:
		h->bounds = token_bounds;
		h->n_bounds = NBOUNDS(token_bounds);
		break;
	}
}

void
histogram_observe(struct histogram *h, double v)
{
	int i = 0;

	while (i < h->n_bounds && v > h->bounds[i])
		i++;
	h->counts[i]++;
	h->count++;
	h->sum += v;
}

void
serving_metrics_init(struct serving_metrics *m)
{
	memset(m, 0, sizeof(*m));
	histogram_init(&m->ttft, HIST_TTFT);
	histogram_init(&m->itl, HIST_ITL);
	histogram_init(&m->e2e, HIST_LATENCY);
	histogram_init(&m->queue, HIST_LATENCY);
	histogram_init(&m->prompt_len, HIST_TOKENS);
	histogram_init(&m->gen_len, HIST_TOKENS);
	histogram_init(&m->max_tokens, HIST_TOKENS);
	histogram_init(&m->prefill, HIST_LATENCY);
	histogram_init(&m->decode, HIST_LATENCY);
	histogram_init(&m->inference, HIST_LATENCY);
}

static void
head(struct strbuf *b, const char *name, const char *type, const char *help)
{
	strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
counter(struct strbuf *b, const char *name, const char *help, const char *lbl, uint64_t v)
{
	head(b, name, "counter", help);
	strbuf_printf(b, "%s{%s} %llu\n", name, lbl, (unsigned long long)v);
}

static void
gauge(struct strbuf *b, const char *name, const char *help, const char *lbl, double v)
{
	head(b, name, "gauge", help);
	strbuf_printf(b, "%s{%s} %.17g\n", name, lbl, v);
}

/* A counter of seconds. */
static void
counter_s(struct strbuf *b, const char *name, const char *help, const char *lbl, double v)
{
	head(b, name, "counter", help);
	strbuf_printf(b, "%s{%s} %.9f\n", name, lbl, v);
}

static void
histogram(struct strbuf *b, const char *name, const char *help, const char *lbl, const struct histogram *h)
{
	uint64_t cum = 0;

	head(b, name, "histogram", help);
	for (int i = 0; i < h->n_bounds; i++) {
		cum += h->counts[i];
		strbuf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, lbl, h->bounds[i], (unsigned long long)cum);
	}
	strbuf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, lbl, (unsigned long long)h->count);
	strbuf_printf(b, "%s_sum{%s} %.17g\n", name, lbl, h->sum);
	strbuf_printf(b, "%s_count{%s} %llu\n", name, lbl, (unsigned long long)h->count);
}

/* Prometheus label values escape backslash, quote and newline. */
static void
label(char *out, size_t cap, const char *model_name)
{
	size_t n = 0;

	n += (size_t)snprintf(out, cap, "model_name=\"");
	for (const char *p = model_name; *p && n + 3 < cap; p++) {
		if (*p == '\\' || *p == '"' || *p == '\n')
			out[n++] = '\\';
		out[n++] = *p == '\n' ? 'n' : *p;
	}
	if (n + 2 <= cap) {
		out[n++] = '"';
		out[n] = '\0';
	}
}

static void
render(struct strbuf *b, const struct serving_metrics *m, const struct sched_gauges *g, const char *model_name)
{
	char lbl[512], fl[600];

	label(lbl, sizeof(lbl) - 8, model_name);
	gauge(b, "vllm:num_requests_running", "Requests in the running batch.", lbl, g->running);
	gauge(b, "vllm:num_requests_waiting", "Requests waiting to be scheduled.", lbl, g->waiting);
	gauge(b, "vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0 to 1).", lbl, g->kv_usage);
	counter(b, "vllm:prompt_tokens_total", "Prompt tokens processed.", lbl, m->prompt_tokens);
	counter(b, "vllm:generation_tokens_total", "Tokens generated.", lbl, m->generation_tokens);
	counter(b, "vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", lbl,
		m->prefix_queries);
	counter(b, "vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", lbl, m->prefix_hits);
	counter(b, "vllm:num_preemptions_total", "Sequences preempted for lack of KV blocks.", lbl, m->preemptions);
	head(b, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
	static const enum finish_reason reasons[] = { FINISH_STOP, FINISH_LENGTH, FINISH_ABORT, FINISH_ERROR };
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
		snprintf(fl, sizeof(fl), "%s,finished_reason=\"%s\"", lbl, finish_reason_name(reasons[i]));
		strbuf_printf(b, "vllm:request_success_total{%s} %llu\n", fl,
			      (unsigned long long)m->success[reasons[i]]);
	}
	histogram(b, "vllm:time_to_first_token_seconds", "Time to first token.", lbl, &m->ttft);
	histogram(b, "vllm:inter_token_latency_seconds", "Time between consecutive output tokens.", lbl, &m->itl);
	histogram(b, "vllm:e2e_request_latency_seconds", "Request latency from arrival to finish.", lbl, &m->e2e);
	histogram(b, "vllm:request_queue_time_seconds", "Time from arrival to first scheduling.", lbl, &m->queue);
	histogram(b, "vllm:request_prompt_tokens", "Prompt tokens of each finished request.", lbl, &m->prompt_len);
	histogram(b, "vllm:request_generation_tokens", "Tokens generated for each finished request.", lbl, &m->gen_len);
	histogram(b, "vllm:request_params_max_tokens", "The max_tokens of each finished request.", lbl, &m->max_tokens);
	histogram(b, "vllm:request_prefill_time_seconds", "From first scheduling to the first token.", lbl,
		  &m->prefill);
	histogram(b, "vllm:request_decode_time_seconds", "From the first token to the finish.", lbl, &m->decode);
	histogram(b, "vllm:request_inference_time_seconds", "From first scheduling to the finish.", lbl, &m->inference);
	gauge(b, "privai:kv_cache_blocks", "KV cache blocks in the pool.", lbl, g->kv_blocks);
	gauge(b, "privai:kv_cache_blocks_cached", "Unused KV blocks kept for prefix hits.", lbl, g->kv_blocks_cached);
	counter(b, "privai:forward_passes_total", "Batched forward passes run.", lbl, m->forward_passes);
	counter(b, "privai:batched_tokens_total", "Tokens run through forward passes.", lbl, m->batched_tokens);
	gauge(b, "privai:kv_cache_bytes", "Bytes of the KV cache pool.", lbl, m->kv_cache_bytes);
	if (g->cpu_threads > 0) {
		gauge(b, "privai:cpu_threads", "Compute threads of the CPU backend.", lbl, g->cpu_threads);
		gauge(b, "privai:cpu_threads_active",
		      "Of them at work now: at most the cores of its CPUs, 1 while other processes keep them waiting "
		      "for a CPU.",
		      lbl, g->cpu_threads_active);
	}
	if (m->tp_group != NULL) {
		const struct coll_stats *t = &m->tp_group->stats;
		gauge(b, "privai:tp_ranks", "Ranks the model is split over (tensor parallel).", lbl, m->tp_group->size);
		gauge(b, "privai:tp_weight_bytes", "Bytes of weights this rank (rank 0) holds.", lbl,
		      m->tp_weight_bytes);
		counter(b, "privai:tp_allreduce_total", "All-reduces of partial activations.", lbl, t->n_allreduce);
		counter(b, "privai:tp_allreduce_bytes_total", "Bytes this rank contributed to them.", lbl,
			t->allreduce_bytes);
		counter_s(b, "privai:tp_allreduce_seconds_total",
			  "Seconds inside them, waits for slower ranks included.", lbl, t->allreduce_s);
		counter(b, "privai:tp_steps_total", "Forward passes sent to the other ranks.", lbl, t->n_steps);
	}
	if (m->device_memory_bytes > 0) {
		gauge(b, "privai:device_memory_bytes", "Memory of the GPU the engine runs on.", lbl,
		      m->device_memory_bytes);
		gauge(b, "privai:device_memory_budget_bytes",
		      "The share of it the engine may hold (--gpu-memory-utilization): weights, buffers, KV cache.",
		      lbl, m->device_budget_bytes);
	}
}

char *
serving_metrics_text(const struct serving_metrics *m, struct scheduler *s, const char *model_name)
{
	struct strbuf b;
	struct sched_gauges g;

	strbuf_init(&b);
	scheduler_lock(s);
	scheduler_gauges(s, &g);
	render(&b, m, &g, model_name != NULL ? model_name : "");
	scheduler_unlock(s);
	return strbuf_take(&b);
}

/* The observer's callbacks: the scheduler holds its lock around each. */
static void
on_scheduled(void *arg, double queue_s, int n_prompt, int counted, int cached_tokens)
{
	struct serving_metrics *m = arg;

	histogram_observe(&m->queue, queue_s);
	m->prompt_tokens += (uint64_t)n_prompt;
	if (counted) {
		m->prefix_queries += (uint64_t)n_prompt;
		m->prefix_hits += (uint64_t)cached_tokens;
	}
}

static void
on_token(void *arg, int first, double gap_s)
{
	struct serving_metrics *m = arg;

	m->generation_tokens++;
	histogram_observe(first ? &m->ttft : &m->itl, gap_s);
}

static void
on_finished(void *arg, const struct sched_request *r)
{
	struct serving_metrics *m = arg;

	m->success[r->finish]++;
	histogram_observe(&m->e2e, r->t_finish - r->t_arrival);
	histogram_observe(&m->prompt_len, r->n_prompt);
	histogram_observe(&m->gen_len, r->n_out);
	histogram_observe(&m->max_tokens, r->max_tokens);
	if (r->t_scheduled > 0)
		histogram_observe(&m->inference, r->t_finish - r->t_scheduled);
	if (r->t_scheduled > 0 && r->t_first > 0) {
		histogram_observe(&m->prefill, r->t_first - r->t_scheduled);
		histogram_observe(&m->decode, r->t_finish - r->t_first);
	}
}

static void
on_preempted(void *arg)
{
	((struct serving_metrics *)arg)->preemptions++;
}

static void
on_forward(void *arg, int n_tokens)
{
	struct serving_metrics *m = arg;

	m->forward_passes++;
	m->batched_tokens += (uint64_t)n_tokens;
}

struct sched_observer
serving_metrics_observer(struct serving_metrics *m)
{
	struct sched_observer o = { m, on_scheduled, on_token, on_finished, on_preempted, on_forward };

	return o;
}
