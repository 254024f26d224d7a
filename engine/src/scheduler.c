/*
 * Continuous batching over the paged KV cache.
 *
 * The scheduler thread loops: admit (preempted sequences first, then the
 * queue, in arrival order, while blocks and sequence slots last), build one
 * batch (a token for every decoding sequence, then prompt chunks within the
 * token budget), run it unlocked, then sample and publish under the lock.
 * Client threads only touch the queue, their own request and the metrics,
 * always under s->mu; the running set, the KV pool and the engine context
 * belong to the scheduler thread alone.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "privai/kv_cache.h"
#include "privai/scheduler.h"
#include "sched_internal.h"

double
sched_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *
finish_reason_name(enum finish_reason f)
{
	switch (f) {
	case FINISH_STOP:
		return "stop";
	case FINISH_LENGTH:
		return "length";
	case FINISH_ABORT:
		return "abort";
	case FINISH_ERROR:
		return "error";
	case FINISH_NONE:
		break;
	}
	return NULL;
}

struct sched_request *
sched_request_new(int n_prompt, int max_tokens, int top_logprobs, int prompt_logprobs)
{
	struct sched_request *r = calloc(1, sizeof(*r));
	int ntop = top_logprobs > 0 ? top_logprobs : 0;

	if (r == NULL)
		return NULL;
	r->refs = 1;
	r->n_prompt = n_prompt;
	r->max_tokens = max_tokens;
	r->top_logprobs = top_logprobs;
	r->prompt_logprobs = prompt_logprobs;
	/* timed waits on the monotonic clock: a step of the wall clock
	 * neither cuts a wait short nor stretches it */
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0) {
		free(r);
		return NULL;
	}
	int cv = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&r->cond, &ca) == 0;
	pthread_condattr_destroy(&ca);
	if (!cv) {
		free(r);
		return NULL;
	}
	r->prompt = calloc(n_prompt > 0 ? (size_t)n_prompt : 1, sizeof(int32_t));
	r->out = calloc(max_tokens > 0 ? (size_t)max_tokens : 1, sizeof(int32_t));
	int ok = r->prompt != NULL && r->out != NULL;
	if (ok && top_logprobs >= 0) {
		r->out_logprob = calloc((size_t)max_tokens + 1, sizeof(float));
		r->out_top = calloc(((size_t)max_tokens + 1) * (ntop ? ntop : 1), sizeof(*r->out_top));
		ok = r->out_logprob != NULL && r->out_top != NULL;
	}
	if (ok && prompt_logprobs) {
		r->prompt_logprob = calloc((size_t)n_prompt + 1, sizeof(float));
		r->prompt_top = calloc(((size_t)n_prompt + 1) * (ntop ? ntop : 1), sizeof(*r->prompt_top));
		ok = r->prompt_logprob != NULL && r->prompt_top != NULL;
	}
	if (!ok) {
		r->refs = 0;
		sched_request_free(r);
		return NULL;
	}
	if (prompt_logprobs)
		r->prompt_logprob[0] = NAN;
	return r;
}

void
sched_request_free(struct sched_request *r)
{
	pthread_cond_destroy(&r->cond);
	if (r->constraint != NULL && r->constraint->release != NULL)
		r->constraint->release(r->constraint);
	free(r->prompt);
	free(r->out);
	free(r->out_logprob);
	free(r->out_top);
	free(r->prompt_logprob);
	free(r->prompt_top);
	free(r->bias_ids);
	free(r->bias);
	free(r->embedding);
	free(r);
}

void
sched_request_put(struct scheduler *s, struct sched_request *r)
{
	int last;

	if (r == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	last = --r->refs == 0;
	pthread_mutex_unlock(&s->mu);
	if (last)
		sched_request_free(r);
}

void
scheduler_lock(struct scheduler *s)
{
	pthread_mutex_lock(&s->mu);
}

void
scheduler_unlock(struct scheduler *s)
{
	pthread_mutex_unlock(&s->mu);
}

int
scheduler_max_context(const struct scheduler *s)
{
	return s->n_ctx;
}

int
scheduler_submit(struct scheduler *s, struct sched_request *r, char *err)
{
	int rc = PRIVAI_OK;

	if (r->n_prompt < 1)
		return privai_fail(err, PRIVAI_EINVAL, "the prompt is empty");
	if (r->top_logprobs > SCHED_TOP_MAX)
		return privai_fail(err, PRIVAI_EINVAL, "top_logprobs is %d; at most %d", r->top_logprobs,
				   SCHED_TOP_MAX);
	if (r->max_tokens < 1 || r->n_prompt > s->n_ctx - r->max_tokens)
		return privai_fail(err, PRIVAI_EINVAL,
				   "this model's maximum context length is %d tokens; the prompt has %d and max_tokens "
				   "is %d",
				   s->n_ctx, r->n_prompt, r->max_tokens);
	for (int i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab)
			return privai_fail(err, PRIVAI_EINVAL, "token id %d is outside the vocabulary (0..%d)",
					   r->prompt[i], s->n_vocab - 1);
	if (r->t_arrival == 0)
		r->t_arrival = sched_now();
	pthread_mutex_lock(&s->mu);
	if (s->draining || s->stopping) {
		rc = privai_fail(err, PRIVAI_EUNAVAIL, "the server is shutting down");
	} else if (s->n_queued >= s->p.max_queue) {
		rc = privai_fail(err, PRIVAI_EBUSY, "the request queue is full (%d waiting)", s->n_queued);
	} else if (r->adapter != 0 && !engine_ctx_lora_loaded(s->ctx, r->adapter)) {
		rc = privai_fail(err, PRIVAI_EINVAL, "the LoRA adapter was unloaded");
	} else {
		if (r->adapter > 0)
			s->lora_users[r->adapter]++;
		r->refs++;
		r->next = NULL;
		if (s->q_tail != NULL)
			s->q_tail->next = r;
		else
			s->q_head = r;
		s->q_tail = r;
		s->n_queued++;
		pthread_cond_signal(&s->wake);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* The CLOCK_REALTIME instant ms from now, for pthread_cond_timedwait. */
static void
deadline_in(int ms, struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

double
scheduler_clock(void)
{
	return sched_now();
}

static struct timespec
monotonic_at(double t)
{
	struct timespec ts;

	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

int
scheduler_wait_after(struct scheduler *s, struct sched_request *r, int seen, double not_before, int timeout_ms,
		     enum finish_reason *finish)
{
	double deadline = sched_now() + timeout_ms * 1e-3;
	int n;

	pthread_mutex_lock(&s->mu);
	while (r->finish == FINISH_NONE) {
		double now = sched_now();
		if ((r->n_out > seen && now >= not_before) || now >= deadline)
			break;
		/* Before not_before our own timer wakes us and takes what came
		 * meanwhile: a token does not (HUGE_VAL), for the scheduler's
		 * wake-up of a sleeping thread is a system call and, in a VM, an
		 * interrupt to another CPU: 27 us of its step on this one's
		 * hypervisor, where the timer would wake us a moment later
		 * anyway.  Past not_before the next token wakes us. */
		r->wake_after = now < not_before ? HUGE_VAL : 0;
		struct timespec ts = monotonic_at(now < not_before && not_before < deadline ? not_before : deadline);
		pthread_cond_timedwait(&r->cond, &s->mu, &ts);
	}
	r->wake_after = 0;
	n = r->n_out;
	*finish = r->finish;
	pthread_mutex_unlock(&s->mu);
	return n;
}

int
scheduler_wait(struct scheduler *s, struct sched_request *r, int seen, int timeout_ms, enum finish_reason *finish)
{
	return scheduler_wait_after(s, r, seen, 0, timeout_ms, finish);
}

int
scheduler_max_queue(const struct scheduler *s)
{
	return s->p.max_queue;
}

static void
cancel_as(struct scheduler *s, struct sched_request *r, enum finish_reason why)
{
	pthread_mutex_lock(&s->mu);
	if (r->finish == FINISH_NONE && !r->cancelled) {
		r->cancelled = 1;
		r->cancelled_as = why;
		pthread_cond_signal(&s->wake);
	}
	pthread_mutex_unlock(&s->mu);
}

void
scheduler_cancel(struct scheduler *s, struct sched_request *r)
{
	cancel_as(s, r, FINISH_ABORT);
}

void
scheduler_stop(struct scheduler *s, struct sched_request *r)
{
	cancel_as(s, r, FINISH_STOP);
}

int
scheduler_drain(struct scheduler *s, int timeout_ms)
{
	double deadline = sched_now() + timeout_ms / 1000.0;
	int aborted = 0;

	pthread_mutex_lock(&s->mu);
	s->draining = 1;
	while (s->n_queued + s->n_active > 0 && sched_now() < deadline) {
		struct timespec ts;
		deadline_in(50, &ts);
		pthread_cond_timedwait(&s->idle, &s->mu, &ts);
	}
	if (s->n_queued + s->n_active > 0) {
		aborted = s->n_queued + s->n_active;
		s->abort_all = 1;
		pthread_cond_signal(&s->wake);
		while (s->n_queued + s->n_active > 0)
			pthread_cond_wait(&s->idle, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return aborted;
}

void
scheduler_gauges(struct scheduler *s, struct sched_gauges *g)
{
	*g = s->gauges;
	g->waiting = s->n_queued + s->n_preempted_shared;
}

static void *scheduler_main(void *arg);

int
scheduler_new(struct engine_ctx *ctx, const struct tokenizer *tok, const struct scheduler_params *p,
	      struct scheduler **ret, char *err)
{
	struct scheduler *s = calloc(1, sizeof(*s));
	struct engine_ctx_info ci;
	int V;

	if (s == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	engine_ctx_info(ctx, &ci);
	V = ci.n_vocab;
	s->ctx = ctx;
	s->tok = tok;
	s->p = *p;
	s->n_vocab = V;
	s->n_ctx = ci.n_ctx;
	s->n_batch = ci.n_batch;
	s->grouped = ci.tp_size > 1;
	if (s->p.max_seqs < 1)
		s->p.max_seqs = 1;
	if (s->p.max_seqs > ci.n_batch)
		s->p.max_seqs = ci.n_batch;
	if (s->p.max_queue < 0)
		s->p.max_queue = 0;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->wake, NULL);
	pthread_cond_init(&s->idle, NULL);
	pthread_cond_init(&s->forward_done, NULL);
	s->mutex_ready = 1;
	if ((long)ci.n_kv_blocks * ENGINE_KV_BLOCK < ci.n_ctx) {
		scheduler_free(s);
		return privai_fail(err, PRIVAI_EINVAL, "a KV pool of %d blocks cannot hold one sequence of %d tokens",
				   ci.n_kv_blocks, ci.n_ctx);
	}
	/* arrays of pointers: sizeof(struct seq *) is meant (NOLINT: clang-tidy 14 takes it for a mistake) */
	s->running = calloc((size_t)s->p.max_seqs, sizeof(*s->running));     /* NOLINT(bugprone-sizeof-expression) */
	s->preempted = calloc((size_t)s->p.max_seqs, sizeof(*s->preempted)); /* NOLINT(bugprone-sizeof-expression) */
	s->picks = calloc((size_t)s->p.max_seqs, sizeof(*s->picks));         /* NOLINT(bugprone-sizeof-expression) */
	s->b_tok = calloc((size_t)ci.n_batch, sizeof(int32_t));
	s->b_pos = calloc((size_t)ci.n_batch, sizeof(int32_t));
	s->b_rows = calloc((size_t)ci.n_batch, sizeof(int32_t));
	s->b_table = calloc((size_t)ci.n_batch, sizeof(*s->b_table));
	s->eog = calloc((size_t)V, sizeof(int32_t));
	s->logits = calloc((size_t)ci.n_batch * (size_t)V, sizeof(float));
	s->n_embd = ci.n_embd;
	s->hidden = calloc((size_t)ci.n_batch * (size_t)ci.n_embd, sizeof(float));
	s->b_adapter = calloc((size_t)ci.n_batch, sizeof(int32_t));
	if (s->logits == NULL || s->hidden == NULL || s->b_adapter == NULL || s->running == NULL ||
	    s->preempted == NULL || s->picks == NULL || s->b_tok == NULL || s->b_pos == NULL || s->b_rows == NULL ||
	    s->b_table == NULL || s->eog == NULL || kv_pool_new(ci.n_kv_blocks, ENGINE_KV_BLOCK, &s->pool) < 0) {
		scheduler_free(s);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for the scheduler");
	}
	for (int32_t id = 0; id < V; id++)
		if (tokenizer_is_eog(tok, id))
			s->eog[s->n_eog++] = id;
	s->gauges.kv_blocks = ci.n_kv_blocks;
	s->gauges.cpu_threads = s->gauges.cpu_threads_active = ci.n_threads;
	if (pthread_create(&s->thread, NULL, scheduler_main, s) != 0) {
		scheduler_free(s);
		return privai_fail(err, PRIVAI_ENOMEM, "cannot start the scheduler thread");
	}
	s->thread_started = 1;
	*ret = s;
	return PRIVAI_OK;
}

void
scheduler_free(struct scheduler *s)
{
	if (s == NULL)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->mu);
		s->stopping = 1;
		s->abort_all = 1;
		pthread_cond_signal(&s->wake);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
	}
	kv_pool_free(s->pool);
	free(s->running);
	free(s->preempted);
	free(s->picks);
	free(s->b_tok);
	free(s->logits);
	free(s->hidden);
	free(s->b_adapter);
	free(s->b_pos);
	free(s->b_rows);
	free(s->b_table);
	free(s->eog);
	if (s->mutex_ready) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->wake);
		pthread_cond_destroy(&s->idle);
		pthread_cond_destroy(&s->forward_done);
	}
	free(s);
}

static void *
scheduler_main(void *arg)
{
	struct scheduler *s = arg;

	while (sched_step(s))
		;
	return NULL;
}

int
scheduler_lora_add(struct scheduler *s, struct lora_adapter *a, char *err)
{
	int k;

	pthread_mutex_lock(&s->mu);
	while (s->in_forward)
		pthread_cond_wait(&s->forward_done, &s->mu);
	k = engine_ctx_add_lora(s->ctx, a, err);
	pthread_mutex_unlock(&s->mu);
	return k;
}

int
scheduler_lora_remove(struct scheduler *s, int k, struct lora_adapter **ret, char *err)
{
	int rc = PRIVAI_OK;

	pthread_mutex_lock(&s->mu);
	while (s->in_forward)
		pthread_cond_wait(&s->forward_done, &s->mu);
	if (!engine_ctx_lora_loaded(s->ctx, k))
		rc = privai_fail(err, PRIVAI_EINVAL, "no adapter %d", k);
	else if (s->lora_users[k] > 0)
		rc = privai_fail(err, PRIVAI_EBUSY, "%d request(s) use the adapter; unload it when they are done",
				 s->lora_users[k]);
	else
		*ret = engine_ctx_remove_lora(s->ctx, k);
	pthread_mutex_unlock(&s->mu);
	return rc;
}
