/*
 * The continuous-batching scheduler on the f16 fixture model: concurrent
 * greedy requests produce what the same requests produce one at a time,
 * also when a small KV pool forces preemption; a repeated prompt hits the
 * prefix cache; prompt logprobs match the golden logits' log-softmax; a
 * cancelled request frees its blocks; bad requests are refused by name.
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "testlib.h"
#include "privai/scheduler.h"
#include "server/metrics.h"

#define MODEL "tiny-llama-spm-f16"
#define NREQ 6
#define GEN 10

static int32_t prompts[NREQ][64];
static int plen[NREQ];

static int
load_ids(const char *dir, int pi, int32_t *ids)
{
	char path[1024];
	size_t len;
	int n = 0;
	const cJSON *it;

	snprintf(path, sizeof(path), "%s/golden/%s.p%d.json", dir, MODEL, pi);
	char *js = read_file(path, &len);
	cJSON *j = js ? cJSON_Parse(js) : NULL;
	free(js);
	const cJSON *arr = j != NULL ? cJSON_GetObjectItem(j, "prompt_ids") : NULL;
	cJSON_ArrayForEach (it, arr)
		if (n < 64)
			ids[n++] = (int32_t)it->valuedouble;
	cJSON_Delete(j);
	return n;
}

static struct sched_request *
greedy_request(int i, int max_tokens)
{
	struct sched_request *r = sched_request_new(plen[i], max_tokens, -1, 0);

	if (r == NULL)
		return NULL;
	memcpy(r->prompt, prompts[i], (size_t)plen[i] * sizeof(int32_t));
	sampler_params_default(&r->sampling);
	r->sampling.temperature = 0;
	r->ignore_eos = 1;
	return r;
}

static void
wait_done(struct scheduler *s, struct sched_request *r)
{
	enum finish_reason f = FINISH_NONE;

	/* a minute is far beyond any of these; a hang is a failure, not a stall */
	for (int i = 0; i < 60 && f == FINISH_NONE; i++)
		scheduler_wait(s, r, r->max_tokens, 1000, &f);
	CHECK(f != FINISH_NONE, "request finished in time");
}

/* The server's metrics, fed by the scheduler under test (its observer),
 * as privai-engine serve keeps them. */
static struct serving_metrics metrics_seen;

static struct sched_observer
fresh_metrics(void)
{
	serving_metrics_init(&metrics_seen);
	return serving_metrics_observer(&metrics_seen);
}

/* Run all NREQ requests at once on a scheduler; out[i] gets their tokens. */
static int
run_all(const struct engine_model *m, const struct tokenizer *tok, int n_blocks, int max_seqs, int32_t out[NREQ][GEN],
	int *preemptions, float temperature, float top_p)
{
	struct engine_ctx_params cp = {
		.n_ctx = 128, .n_batch = 32, .n_threads = 2, .n_kv_blocks = n_blocks, .device = test_device()
	};
	struct scheduler_params sp = { .max_seqs = max_seqs, .max_queue = 64, .observer = fresh_metrics() };
	struct engine_ctx *c;
	struct scheduler *s;
	struct sched_request *r[NREQ];
	char err[PRIVAI_ERR_LEN];
	int ok = 1;

	if (engine_ctx_new(m, &cp, &c, err) < 0 || scheduler_new(c, tok, &sp, &s, err) < 0) {
		CHECK(0, "%s", err);
		return -1;
	}
	for (int i = 0; i < NREQ; i++) {
		r[i] = greedy_request(i, GEN);
		if (r[i] != NULL && temperature > 0) { /* the OpenAI defaults: the unfiltered draw */
			r[i]->sampling.temperature = temperature;
			r[i]->sampling.top_k = 0;
			r[i]->sampling.top_p = top_p; /* below 1: the filtered draw */
			r[i]->sampling.min_p = 0;
			r[i]->sampling.seed = 100 + (uint64_t)i;
		}
		ok &= r[i] != NULL && scheduler_submit(s, r[i], err) == 0;
	}
	for (int i = 0; i < NREQ && ok; i++) {
		wait_done(s, r[i]);
		ok &= r[i]->n_out == GEN && r[i]->finish == FINISH_LENGTH;
		memcpy(out[i], r[i]->out, sizeof(out[i]));
	}
	char *metrics = serving_metrics_text(&metrics_seen, s, "t");
	const char *p = metrics ? strstr(metrics, "\nvllm:num_preemptions_total{") : NULL;
	*preemptions = p ? atoi(strchr(p, '}') + 1) : -1;
	free(metrics);
	for (int i = 0; i < NREQ; i++)
		sched_request_put(s, r[i]);
	scheduler_free(s);
	engine_ctx_free(c);
	return ok ? 0 : -1;
}

static double
metric(struct scheduler *s, const char *name)
{
	char *t = serving_metrics_text(&metrics_seen, s, "t"), key[128];
	double v = -1;

	snprintf(key, sizeof(key), "\n%s{", name);
	const char *p = t ? strstr(t, key) : NULL;
	if (p != NULL)
		v = atof(strchr(p, '}') + 1);
	free(t);
	return v;
}

static void
test_prefix_logprobs_cancel(const char *dir, const struct engine_model *m, const struct tokenizer *tok)
{
	struct engine_ctx_params cp = {
		.n_ctx = 128, .n_batch = 32, .n_threads = 2, .n_kv_blocks = 32, .device = test_device()
	};
	struct scheduler_params sp = { .max_seqs = 4, .max_queue = 2, .observer = fresh_metrics() };
	struct engine_ctx *c;
	struct scheduler *s;
	char err[PRIVAI_ERR_LEN], path[1024];
	int V = m->hp.n_vocab;

	if (engine_ctx_new(m, &cp, &c, err) < 0 || scheduler_new(c, tok, &sp, &s, err) < 0) {
		CHECK(0, "%s", err);
		return;
	}
	/* the same prompt twice: the second run finds its first block cached */
	struct sched_request *a = greedy_request(0, 2), *b = greedy_request(0, 2);
	CHECK(scheduler_submit(s, a, err) == 0, "submit a");
	wait_done(s, a);
	CHECK(scheduler_submit(s, b, err) == 0, "submit b");
	wait_done(s, b);
	CHECK(a->n_cached_prompt == 0 && b->n_cached_prompt == 16, "prefix cache: %d then %d tokens cached",
	      a->n_cached_prompt, b->n_cached_prompt);
	CHECK(memcmp(a->out, b->out, 2 * sizeof(int32_t)) == 0, "a cached prefix gives the same tokens");
	CHECK(metric(s, "vllm:prefix_cache_hits_total") == 16, "hits in the metrics");
	sched_request_put(s, a);
	sched_request_put(s, b);

	/* prompt logprobs against log_softmax(golden logits) */
	size_t llen;
	snprintf(path, sizeof(path), "%s/golden/%s.p1.logits.f32", dir, MODEL);
	float *gold = (float *)read_file(path, &llen);
	struct sched_request *lp = sched_request_new(plen[0], 1, 3, 1);
	memcpy(lp->prompt, prompts[0], (size_t)plen[0] * sizeof(int32_t));
	sampler_params_default(&lp->sampling);
	lp->sampling.temperature = 0;
	double worst = INFINITY;
	if (gold != NULL && V > 0 && llen == (size_t)plen[0] * V * sizeof(float) && scheduler_submit(s, lp, err) == 0) {
		wait_done(s, lp);
		worst = 0;
		for (int p = 1; p < plen[0]; p++) {
			const float *L = gold + (size_t)(p - 1) * V;
			double mx = -INFINITY, sum = 0;
			for (int v = 0; v < V; v++)
				mx = fmax(mx, L[v]);
			for (int v = 0; v < V; v++)
				sum += exp(L[v] - mx);
			double want = L[prompts[0][p]] - mx - log(sum);
			worst = fmax(worst, fabs(want - lp->prompt_logprob[p]));
		}
		CHECK(lp->prompt_top[3].logprob >= lp->prompt_top[4].logprob, "top logprobs are sorted");
	}
	CHECK(worst < 0.02, "prompt logprobs match the golden log-softmax (worst %.2e nats)", worst);
	CHECK(isnan(lp->prompt_logprob[0]), "the first prompt token has no logprob");
	free(gold);
	sched_request_put(s, lp);

	/* cancel after the first token: blocks come back */
	struct sched_request *x = greedy_request(1, 60);
	enum finish_reason f;
	CHECK(scheduler_submit(s, x, err) == 0, "submit x");
	scheduler_wait(s, x, 0, 5000, &f);
	scheduler_cancel(s, x);
	wait_done(s, x);
	CHECK(x->finish == FINISH_ABORT && x->n_out < 60, "cancelled after %d tokens", x->n_out);
	CHECK(metric(s, "vllm:kv_cache_usage_perc") == 0, "no blocks in use after the cancel");
	sched_request_put(s, x);

	/* refusals */
	struct sched_request *big = greedy_request(0, 128 - plen[0] + 1);
	CHECK(scheduler_submit(s, big, err) == PRIVAI_EINVAL && strstr(err, "maximum context length is 128"),
	      "prompt + max_tokens over the context: %s", err);
	sched_request_put(s, big);
	struct sched_request *badtok = greedy_request(0, 1);
	badtok->prompt[3] = V;
	CHECK(scheduler_submit(s, badtok, err) == PRIVAI_EINVAL && strstr(err, "outside the vocabulary"),
	      "bad token id: %s", err);
	sched_request_put(s, badtok);
	CHECK(scheduler_drain(s, 1000) == 0, "drain with nothing running");
	struct sched_request *late = greedy_request(0, 1);
	CHECK(scheduler_submit(s, late, err) == PRIVAI_EUNAVAIL, "no admission while draining");
	sched_request_put(s, late);
	scheduler_free(s);
	engine_ctx_free(c);
}

/* A context and a scheduler on it, or a failed check and -1. */
static int
open_scheduler(const struct engine_model *m, const struct tokenizer *tok, const struct engine_ctx_params *cp,
	       const struct scheduler_params *sp, struct engine_ctx **c, struct scheduler **s)
{
	char err[PRIVAI_ERR_LEN];

	*c = NULL;
	if (engine_ctx_new(m, cp, c, err) < 0 || scheduler_new(*c, tok, sp, s, err) < 0) {
		engine_ctx_free(*c);
		CHECK(0, "%s", err);
		return -1;
	}
	return 0;
}

/* Chunked prefill: a 100-token prompt arriving while another request
 * decodes is spread over several passes, and the decoding request gets a
 * token in every one of them. */
static void
test_chunked_prefill(const struct engine_model *m, const struct tokenizer *tok)
{
	struct engine_ctx_params cp = {
		.n_ctx = 256, .n_batch = 32, .n_threads = 2, .n_kv_blocks = 64, .device = test_device()
	};
	struct scheduler_params sp = { .max_seqs = 4, .max_queue = 4, .observer = fresh_metrics() };
	struct engine_ctx *c;
	struct scheduler *s;
	char err[PRIVAI_ERR_LEN];
	enum finish_reason f;

	if (open_scheduler(m, tok, &cp, &sp, &c, &s) < 0)
		return;
	struct sched_request *a = greedy_request(0, 200);
	struct sched_request *b = sched_request_new(100, 1, -1, 0);
	for (int i = 0; i < 100; i++)
		b->prompt[i] = prompts[1][i % plen[1]];
	sampler_params_default(&b->sampling);
	b->sampling.temperature = 0;
	CHECK(scheduler_submit(s, a, err) == 0, "submit the decoding request");
	int n = 0;
	for (int i = 0; i < 100 && n < 2; i++)
		n = scheduler_wait(s, a, 1, 1000, &f);
	double passes0 = metric(s, "privai:forward_passes_total");
	scheduler_lock(s);
	int a_before = a->n_out;
	scheduler_unlock(s);
	CHECK(scheduler_submit(s, b, err) == 0, "submit the long prompt");
	wait_done(s, b);
	scheduler_lock(s);
	int a_after = a->n_out, a_running = a->finish == FINISH_NONE;
	scheduler_unlock(s);
	CHECK(a_running, "the decoding request was still running when the prompt finished");
	double passes = metric(s, "privai:forward_passes_total") - passes0;
	/* 100 prompt tokens in a 32-token budget shared with one decode token:
	 * at least 4 passes, each also advancing A by one */
	CHECK(passes >= 4 && a_after - a_before >= 4,
	      "prefill in %.0f passes; the decoding request gained %d tokens meanwhile", passes, a_after - a_before);
	printf("chunked prefill: 100 prompt tokens over %.0f passes, %d decode tokens for the other request "
	       "meanwhile\n",
	       passes, a_after - a_before);
	scheduler_cancel(s, a);
	wait_done(s, a);
	sched_request_put(s, a);
	sched_request_put(s, b);
	scheduler_free(s);
	engine_ctx_free(c);
}

/* scheduler_wait_after: tokens that come before not_before do not end the
 * wait, they are taken together at it; the request's end ends it at once. */
static void
test_wait_after(const struct engine_model *m, const struct tokenizer *tok)
{
	struct engine_ctx_params cp = { .n_ctx = 256, .n_batch = 32, .n_threads = 2, .device = test_device() };
	struct scheduler_params sp = { .max_seqs = 2, .max_queue = 2, .observer = fresh_metrics() };
	struct engine_ctx *c;
	struct scheduler *s;
	char err[PRIVAI_ERR_LEN];
	enum finish_reason f;

	if (open_scheduler(m, tok, &cp, &sp, &c, &s) < 0)
		return;
	struct sched_request *a = greedy_request(0, 200);
	CHECK(scheduler_submit(s, a, err) == 0, "submit");
	int n = 0;
	for (int i = 0; i < 100 && n < 1; i++)
		n = scheduler_wait(s, a, 0, 1000, &f);
	/* tokens come within 10 ms, but the wait ends no sooner; the 200
	 * take longer than that on any machine, and their end would be later
	 * still */
	double not_before = scheduler_clock() + 0.01;
	int got = scheduler_wait_after(s, a, n, not_before, 10000, &f);
	double back = scheduler_clock();
	CHECK(back >= not_before && got > n, "the wait ended %.4f s after not_before with tokens %d -> %d",
	      back - not_before, n, got);
	/* past not_before the next tokens wake the wait, not its timeout or
	 * the request's end: it returns with the request still running (the
	 * 200 tokens take longer than 21 of them; the end would come with
	 * all 200, a missed wake-up after a minute) */
	double t0 = scheduler_clock();
	n = got;
	got = scheduler_wait_after(s, a, n + 20, t0, 60000, &f);
	CHECK(f == FINISH_NONE && got > n + 20 && got < 200 && scheduler_clock() - t0 < 30,
	      "tokens past not_before end the wait: %d -> %d tokens, finish %d, after %.1f s", n, got, (int)f,
	      scheduler_clock() - t0);
	/* with not_before and the timeout far ahead, the request's end still
	 * ends the wait: it comes within seconds even under a sanitizer; a
	 * wait that missed it would last the whole minute */
	t0 = scheduler_clock();
	got = scheduler_wait_after(s, a, got, t0 + 3600, 60000, &f);
	CHECK(f == FINISH_LENGTH && got == 200 && scheduler_clock() - t0 < 30,
	      "the end ends the wait: %d tokens, finish %d, after %.1f s", got, (int)f, scheduler_clock() - t0);
	/* a finished request returns at once, whatever not_before says */
	struct sched_request *b = greedy_request(1, 1);
	CHECK(scheduler_submit(s, b, err) == 0, "submit b");
	wait_done(s, b);
	t0 = scheduler_clock();
	got = scheduler_wait_after(s, b, 1, t0 + 3600, 60000, &f);
	CHECK(got == 1 && f == FINISH_LENGTH && scheduler_clock() - t0 < 30,
	      "a finished request returns at once: %d tokens after %.1f s", got, scheduler_clock() - t0);
	sched_request_put(s, a);
	sched_request_put(s, b);
	scheduler_free(s);
	engine_ctx_free(c);
}

/* The pooled vector computed directly: every row of one forward pass over
 * the whole prompt, pooled and normalised here. */
static void
reference_embedding(const struct engine_model *m, const int32_t *ids, int n, int pooling, float *out)
{
	struct engine_ctx_params cp = { .n_ctx = 256, .n_batch = 256, .n_threads = 2, .device = test_device() };
	struct engine_ctx *c;
	struct engine_ctx_info ci;
	char err[PRIVAI_ERR_LEN];
	int32_t pos[256], rows[256], blocks[16];
	const int32_t *table[256];

	if (engine_ctx_new(m, &cp, &c, err) < 0) {
		CHECK(0, "%s", err);
		return;
	}
	engine_ctx_info(c, &ci);
	for (int b = 0; b < 16; b++)
		blocks[b] = b;
	for (int i = 0; i < n; i++) {
		pos[i] = i;
		rows[i] = i;
		table[i] = blocks;
	}
	float *logits = malloc((size_t)n * ci.n_vocab * sizeof(float));
	float *hidden = malloc((size_t)n * ci.n_embd * sizeof(float));
	struct compute_batch b = { n, ids, pos, table, n, rows, 0 };
	CHECK(logits && hidden && engine_forward_ex(c, &b, NULL, logits, hidden, err) == 0, "reference pass: %s", err);
	double norm = 0;
	for (int d = 0; d < ci.n_embd; d++) {
		double v = 0;
		for (int i = pooling == SCHED_POOL_MEAN ? 0 : n - 1; i < n; i++)
			v += hidden[(size_t)i * ci.n_embd + d];
		out[d] = (float)v;
		norm += v * v;
	}
	for (int d = 0; d < ci.n_embd; d++)
		out[d] = (float)(out[d] / sqrt(norm));
	free(logits);
	free(hidden);
	engine_ctx_free(c);
}

/* Embedding requests through the batcher, chunked (a 32-token budget)
 * and beside a decoding request, against the direct computation. */
static void
test_embeddings(const struct engine_model *m, const struct tokenizer *tok)
{
	struct engine_ctx_params cp = {
		.n_ctx = 256, .n_batch = 32, .n_threads = 2, .n_kv_blocks = 64, .device = test_device()
	};
	struct scheduler_params sp = { .max_seqs = 4, .max_queue = 8, .observer = fresh_metrics() };
	struct engine_ctx *c;
	struct engine_ctx_info ci;
	struct scheduler *s;
	char err[PRIVAI_ERR_LEN];
	int32_t ids[100];

	if (engine_ctx_new(m, &cp, &c, err) < 0 || scheduler_new(c, tok, &sp, &s, err) < 0) {
		CHECK(0, "%s", err);
		return;
	}
	engine_ctx_info(c, &ci);
	for (int i = 0; i < 100; i++)
		ids[i] = prompts[1][i % plen[1]];
	struct sched_request *gen = greedy_request(0, 60), *e[2];
	CHECK(scheduler_submit(s, gen, err) == 0, "submit a decoding request");
	for (int k = 0; k < 2; k++) {
		e[k] = sched_request_new(100, 1, -1, 0);
		memcpy(e[k]->prompt, ids, sizeof(ids));
		e[k]->pooling = k == 0 ? SCHED_POOL_MEAN : SCHED_POOL_LAST;
		e[k]->embedding = calloc((size_t)ci.n_embd, sizeof(float));
		CHECK(scheduler_submit(s, e[k], err) == 0, "submit an embedding request");
	}
	float *want = malloc((size_t)ci.n_embd * sizeof(float));
	for (int k = 0; k < 2; k++) {
		wait_done(s, e[k]);
		reference_embedding(m, ids, 100, e[k]->pooling, want);
		double worst = 0, norm = 0;
		for (int d = 0; d < ci.n_embd; d++) {
			double diff = fabs((double)e[k]->embedding[d] - want[d]);
			worst = diff > worst ? diff : worst;
			norm += (double)e[k]->embedding[d] * e[k]->embedding[d];
		}
		CHECK(e[k]->finish == FINISH_STOP && e[k]->n_out == 0 && worst < 1e-4 && fabs(norm - 1) < 1e-4,
		      "%s pooling of 100 tokens in 32-token chunks beside decoding: max diff %.2g from one pass, "
		      "norm %.6f",
		      k == 0 ? "mean" : "last-token", worst, norm);
		sched_request_put(s, e[k]);
	}
	free(want);
	scheduler_cancel(s, gen);
	wait_done(s, gen);
	sched_request_put(s, gen);
	scheduler_free(s);
	engine_ctx_free(c);
}

int
main(void)
{
	const char *dir = fixtures_dir();
	char path[1024], err[PRIVAI_ERR_LEN];
	struct engine_model *m = NULL;
	struct tokenizer *tok = NULL;
	static int32_t seq_out[NREQ][GEN], par_out[NREQ][GEN], small_out[NREQ][GEN];
	int pre_seq, pre_par, pre_small;

	if (dir == NULL)
		return test_summary();
	snprintf(path, sizeof(path), "%s/models/%s.gguf", dir, MODEL);
	if (engine_model_load(path, &m, err) < 0 || tokenizer_load(m->file, &tok, err) < 0) {
		CHECK(0, "%s", err);
		return test_summary();
	}
	/* six prompts: the two golden ones and truncations of them */
	plen[0] = load_ids(dir, 1, prompts[0]);
	plen[1] = load_ids(dir, 2, prompts[1]);
	for (int i = 2; i < NREQ; i++) {
		plen[i] = plen[i % 2] - 3 * i;
		memcpy(prompts[i], prompts[i % 2], (size_t)plen[i] * sizeof(int32_t));
	}
	CHECK(plen[0] > 16 && plen[1] > 16, "golden prompts");

	CHECK(run_all(m, tok, 64, 1, seq_out, &pre_seq, 0, 1) == 0, "one at a time");
	CHECK(run_all(m, tok, 64, 8, par_out, &pre_par, 0, 1) == 0, "all at once");
	/* 8 blocks = one 128-token context: at most 2 of these fit together */
	CHECK(run_all(m, tok, 8, 8, small_out, &pre_small, 0, 1) == 0, "all at once in a small pool");
	int same_par = 0, same_small = 0;
	for (int i = 0; i < NREQ; i++) {
		same_par += memcmp(seq_out[i], par_out[i], sizeof(seq_out[i])) == 0;
		same_small += memcmp(seq_out[i], small_out[i], sizeof(seq_out[i])) == 0;
	}
	CHECK(same_par == NREQ, "batched greedy equals sequential for %d of %d", same_par, NREQ);
	CHECK(same_small == NREQ, "with preemption too, %d of %d", same_small, NREQ);
	CHECK(pre_seq == 0 && pre_small > 0, "the small pool preempted (%d times)", pre_small);
	printf("scheduler: %d requests x %d tokens; %d preemptions in the small pool\n", NREQ, GEN, pre_small);
	/* sampled at temperature 1, each request with its own seed: in a
	 * batch each request still draws what it draws alone (its own
	 * sampler; the batch's logits differ from one token's by rounding
	 * only, which moves a draw about once in a million) */
	CHECK(run_all(m, tok, 64, 1, seq_out, &pre_seq, 1.0f, 1.0f) == 0, "sampled, one at a time");
	CHECK(run_all(m, tok, 64, 8, par_out, &pre_par, 1.0f, 1.0f) == 0, "sampled, all at once");
	same_par = 0;
	for (int i = 0; i < NREQ; i++)
		same_par += memcmp(seq_out[i], par_out[i], sizeof(seq_out[i])) == 0;
	CHECK(same_par == NREQ, "batched sampling equals sequential for %d of %d", same_par, NREQ);
	/* the same with top_p 0.9: the batch's draws run side by side on the
	 * pool's threads (pick_tokens), each on its own row and sampler */
	CHECK(run_all(m, tok, 64, 1, seq_out, &pre_seq, 1.0f, 0.9f) == 0, "top_p 0.9, one at a time");
	CHECK(run_all(m, tok, 64, 8, par_out, &pre_par, 1.0f, 0.9f) == 0, "top_p 0.9, all at once");
	same_par = 0;
	int differs = 0;
	for (int i = 0; i < NREQ; i++) {
		same_par += memcmp(seq_out[i], par_out[i], sizeof(seq_out[i])) == 0;
		differs |= i > 0 && memcmp(par_out[i], par_out[0], sizeof(par_out[i])) != 0;
	}
	CHECK(same_par == NREQ && differs, "batched top_p sampling equals sequential for %d of %d", same_par, NREQ);

	test_prefix_logprobs_cancel(dir, m, tok);
	test_chunked_prefill(m, tok);
	test_wait_after(m, tok);
	test_embeddings(m, tok);
	tokenizer_free(tok);
	engine_model_free(m);
	return test_summary();
}
