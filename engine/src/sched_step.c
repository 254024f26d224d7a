/*
 * One iteration of the batching loop: cancellations, admission, batch
 * assembly (with preemption when blocks run out), the forward pass, then
 * sampling and publishing.  See scheduler.c for who owns what.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "sched_internal.h"

static void
seq_free(struct scheduler *s, struct seq *q)
{
	kv_seq_release(s->pool, &q->kv);
	sampler_free(q->smp);
	free(q->tokens);
	free(q);
}

/* Under the lock: publish the end of a request and drop the scheduler's
 * reference (the request may be freed here). */
static void
finish_locked(struct scheduler *s, struct sched_request *r, enum finish_reason f, const char *why)
{
	double now = sched_now();

	r->finish = f;
	r->t_finish = now;
	if (r->adapter > 0 && r->adapter <= ENGINE_MAX_LORA)
		s->lora_users[r->adapter]--;
	if (why != NULL)
		snprintf(r->error, sizeof(r->error), "%s", why);
	if (s->p.observer.finished != NULL)
		s->p.observer.finished(s->p.observer.arg, r);
	pthread_cond_broadcast(&r->cond);
	if (--r->refs == 0)
		sched_request_free(r);
	pthread_cond_broadcast(&s->idle);
}

static void
remove_at(struct seq **arr, int *n, int i)
{
	memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof(*arr)); /* NOLINT(bugprone-sizeof-expression) */
	(*n)--;
}

static int
index_of(struct seq **arr, int n, const struct seq *q)
{
	for (int i = 0; i < n; i++)
		if (arr[i] == q)
			return i;
	return -1;
}

/* What a request the client cancelled finishes as: its own reason (a stop
 * sequence it found), an abort for everything on abort_all. */
static enum finish_reason
cancel_reason(const struct scheduler *s, const struct sched_request *r)
{
	return r->cancelled && !s->abort_all && r->cancelled_as != FINISH_NONE ? r->cancelled_as : FINISH_ABORT;
}

/* Under the lock: drop cancelled requests (all of them on abort_all). */
static void
reap_cancelled(struct scheduler *s)
{
	struct sched_request **link = &s->q_head, *r;

	s->q_tail = NULL;
	while ((r = *link) != NULL) {
		if (r->cancelled || s->abort_all) {
			*link = r->next;
			s->n_queued--;
			finish_locked(s, r, cancel_reason(s, r), NULL);
		} else {
			s->q_tail = r;
			link = &r->next;
		}
	}
	for (int i = s->n_running - 1; i >= 0; i--) {
		struct seq *q = s->running[i];
		if (q->req->cancelled || s->abort_all) {
			remove_at(s->running, &s->n_running, i);
			s->n_active--;
			finish_locked(s, q->req, cancel_reason(s, q->req), NULL);
			seq_free(s, q);
		}
	}
	for (int i = s->n_preempted - 1; i >= 0; i--) {
		struct seq *q = s->preempted[i];
		if (q->req->cancelled || s->abort_all) {
			remove_at(s->preempted, &s->n_preempted, i);
			s->n_active--;
			s->n_preempted_shared--;
			finish_locked(s, q->req, cancel_reason(s, q->req), NULL);
			seq_free(s, q);
		}
	}
}

static struct seq *
seq_new(struct scheduler *s, struct sched_request *r)
{
	struct seq *q = calloc(1, sizeof(*q));

	if (q == NULL)
		return NULL;
	q->req = r;
	q->cap = r->n_prompt + r->max_tokens;
	q->tokens = malloc((size_t)q->cap * sizeof(int32_t));
	if (q->tokens == NULL || sampler_new(&r->sampling, s->n_vocab, &q->smp) < 0) {
		free(q->tokens);
		free(q);
		return NULL;
	}
	memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
	q->n_tokens = r->n_prompt;
	kv_seq_init(&q->kv);
	return q;
}

/* Under the lock: move preempted sequences, then queued requests, into the
 * running set while there are slots and blocks for their whole prompt. */
static void
admit(struct scheduler *s)
{
	while (s->n_running < s->p.max_seqs) {
		struct sched_request *r;
		struct seq *q;
		int resumed = s->n_preempted > 0;

		if (resumed) {
			q = s->preempted[0];
		} else if ((r = s->q_head) != NULL) {
			if ((q = seq_new(s, r)) == NULL) {
				s->q_head = r->next;
				if (s->q_head == NULL)
					s->q_tail = NULL;
				s->n_queued--;
				finish_locked(s, r, FINISH_ERROR, "out of memory");
				continue;
			}
		} else {
			break;
		}
		r = q->req;
		/* every prompt row is needed by prompt logprobs and mean pooling */
		int all_rows = r->prompt_logprobs || r->pooling == SCHED_POOL_MEAN;
		/* an adapter's keys differ from the base model's: never shared */
		int hits = all_rows || r->adapter ? 0 : kv_seq_match_prefix(s->pool, &q->kv, q->tokens, q->n_tokens);
		if (hits < 0 || kv_seq_reserve(s->pool, &q->kv, q->n_tokens) < 0) {
			kv_seq_release(s->pool, &q->kv);
			if (!resumed)
				seq_free(s, q);
			break;
		}
		q->n_computed = hits;
		if (resumed) {
			remove_at(s->preempted, &s->n_preempted, 0);
			s->n_preempted_shared--;
		} else {
			s->q_head = r->next;
			if (s->q_head == NULL)
				s->q_tail = NULL;
			s->n_queued--;
			s->n_active++;
			r->t_scheduled = sched_now();
			r->n_cached_prompt = hits;
			/* prompt logprobs compute every prompt token: no cache was asked */
			if (s->p.observer.scheduled != NULL)
				s->p.observer.scheduled(s->p.observer.arg, r->t_scheduled - r->t_arrival, r->n_prompt,
							!all_rows, hits);
		}
		s->running[s->n_running++] = q;
	}
}

/* Give up the youngest running sequence not yet in this step's batch other
 * than `keep` (or `keep` itself when there is none); its tokens stay, its
 * blocks go, and it will be recomputed when resumed. */
static struct seq *
preempt_one(struct scheduler *s, const struct seq *keep)
{
	struct seq *victim = NULL;

	for (int i = s->n_running - 1; i >= 0 && victim == NULL; i--)
		if (s->running[i] != keep && s->running[i]->chunk == 0)
			victim = s->running[i];
	if (victim == NULL)
		victim = (struct seq *)keep;
	remove_at(s->running, &s->n_running, index_of(s->running, s->n_running, victim));
	kv_seq_release(s->pool, &victim->kv);
	victim->n_computed = 0;
	if (victim->req->pooling == SCHED_POOL_MEAN) /* its sum starts over with the recomputation */
		memset(victim->req->embedding, 0, (size_t)s->n_embd * sizeof(float));
	s->preempted[s->n_preempted++] = victim;
	s->n_preempted_shared++;
	if (s->p.observer.preempted != NULL)
		s->p.observer.preempted(s->p.observer.arg);
	return victim;
}

struct step_batch {
	int n, n_out;
	int hidden;  /* an embedding request is in it: bring the hidden states back */
	int adapter; /* a LoRA request is in it */
};

static void
add_chunk(struct scheduler *s, struct seq *q, int chunk, struct step_batch *b)
{
	const struct sched_request *r = q->req;
	int want_all = (r->prompt_logprobs && q->n_computed < r->n_prompt) || r->pooling == SCHED_POOL_MEAN;

	b->hidden |= r->pooling != SCHED_POOL_NONE;
	b->adapter |= r->adapter != 0;
	q->chunk = chunk;
	q->row0 = b->n_out;
	q->sample = q->n_computed + chunk == q->n_tokens;
	for (int t = 0; t < chunk; t++) {
		int i = b->n++;
		s->b_tok[i] = q->tokens[q->n_computed + t];
		s->b_pos[i] = q->n_computed + t;
		s->b_table[i] = q->kv.blocks;
		s->b_adapter[i] = r->adapter;
		if (want_all || (q->sample && t == chunk - 1))
			s->b_rows[b->n_out++] = i;
	}
}

/* Under the lock: decoding sequences first (one token each), then prompt
 * chunks, within the token budget of one forward pass. */
static void
build_batch(struct scheduler *s, struct step_batch *b)
{
	int budget = s->n_batch;

	b->n = b->n_out = b->hidden = b->adapter = 0;
	for (int i = 0; i < s->n_running; i++)
		s->running[i]->chunk = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < s->n_running && budget > 0; i++) {
			struct seq *q = s->running[i];
			int pending = q->n_tokens - q->n_computed;
			if (q->chunk > 0 || (pass == 0) != (pending == 1))
				continue;
			int chunk = pending < budget ? pending : budget;
			int gone = 0;
			while (!gone && kv_seq_reserve(s->pool, &q->kv, q->n_computed + chunk) < 0)
				gone = preempt_one(s, q) == q;
			i = index_of(s->running, s->n_running, q);
			if (gone) {
				i = -1; /* the array changed; rescan (chunk marks what is done) */
				continue;
			}
			add_chunk(s, q, chunk, b);
			budget -= chunk;
		}
	}
}

/* The n most likely entries of row L, best first, as logprobs (lse the
 * row's logits_log_sum_exp()). */
static void
top_n(const float *L, int V, float lse, int n, struct token_logprob *top)
{
	int32_t ids[SCHED_TOP_MAX];

	assert(n <= SCHED_TOP_MAX);
	logits_top_n(L, V, n, ids);
	for (int k = 0; k < n; k++) {
		top[k].id = ids[k];
		top[k].logprob = L[ids[k]] - lse;
	}
}

static int
is_eog(const struct scheduler *s, int32_t id)
{
	for (int i = 0; i < s->n_eog; i++)
		if (s->eog[i] == id)
			return 1;
	return 0;
}

static double
note_token_time(struct scheduler *s, struct sched_request *r)
{
	double now = sched_now();

	if (r->n_out == 1)
		r->t_first = now;
	if (s->p.observer.token != NULL)
		s->p.observer.token(s->p.observer.arg, r->n_out == 1, now - (r->n_out == 1 ? r->t_arrival : r->t_last));
	r->t_last = now;
	return now;
}

/* Whether the chunk's rows hold logprobs of its prompt tokens to record. */
static int
prompt_rows(const struct seq *q)
{
	const struct sched_request *r = q->req;

	return q->chunk > 0 && r->pooling == SCHED_POOL_NONE && r->prompt_logprobs && q->n_computed < r->n_prompt;
}

/* The logits row a sequence samples from after this step, its chunk's
 * last (the rows of its prompt come back too while it asks for their
 * logprobs); -1 when it does not sample. */
static int
sample_row(const struct seq *q)
{
	const struct sched_request *r = q->req;

	if (q->chunk == 0 || !q->sample || r->pooling != SCHED_POOL_NONE)
		return -1;
	return q->row0 + (prompt_rows(q) ? q->chunk : 1) - 1;
}

/* Without the lock: the next token from logits row L (which the masks
 * modify) into q->next, its logprobs into the request's arrays at n_out
 * (no reader looks there before publish moves n_out, under the lock),
 * and the sampler and the constraint advanced past it.  Reads and
 * writes nothing another sequence's does. */
static void
pick_token(const struct scheduler *s, struct seq *q, float *L)
{
	struct sched_request *r = q->req;
	int V = s->n_vocab, k = r->n_out, ntop = r->top_logprobs > 0 ? r->top_logprobs : 0;
	float lse = 0;

	/* logprobs are of the model's own distribution, before any mask */
	if (r->top_logprobs >= 0) {
		lse = logits_log_sum_exp(L, V);
		top_n(L, V, lse, ntop, r->out_top + (size_t)k * ntop);
	}
	if (k < r->min_tokens)
		for (int i = 0; i < s->n_eog; i++)
			L[s->eog[i]] = -INFINITY;
	if (r->constraint != NULL)
		r->constraint->mask(r->constraint->state, L, V);
	int32_t tok = sampler_sample(q->smp, L);
	sampler_accept(q->smp, tok);
	if (r->constraint != NULL)
		r->constraint->accept(r->constraint->state, tok);
	if (r->top_logprobs >= 0)
		r->out_logprob[k] = L[tok] - lse; /* a sampled token was not masked */
	q->next = tok;
}

/* Without the lock, as pick_token(): logprobs of the prompt tokens this
 * chunk's rows predict (no reader looks at them before the request ends). */
static void
record_prompt_logprobs(struct scheduler *s, struct seq *q, const float *logits)
{
	struct sched_request *r = q->req;
	int V = s->n_vocab, ntop = r->top_logprobs > 0 ? r->top_logprobs : 0;

	for (int t = 0; t < q->chunk; t++) {
		int p = q->n_computed + t + 1; /* the prompt token this row predicts */
		if (p >= r->n_prompt)
			break;
		const float *L = logits + (size_t)(q->row0 + t) * V;
		float lse = logits_log_sum_exp(L, V);
		r->prompt_logprob[p] = L[r->prompt[p]] - lse;
		top_n(L, V, lse, ntop, r->prompt_top + (size_t)p * ntop);
	}
}

static void
pick_worker(void *arg, int part, int parts)
{
	struct scheduler *s = arg;
	int lo = (int)((int64_t)s->n_picks * part / parts), hi = (int)((int64_t)s->n_picks * (part + 1) / parts);

	for (int i = lo; i < hi; i++) {
		struct seq *q = s->picks[i];
		int row = sample_row(q);
		if (prompt_rows(q))
			record_prompt_logprobs(s, q, s->logits);
		if (row >= 0)
			pick_token(s, q, s->logits + (size_t)row * (size_t)s->n_vocab);
	}
}

/* Without the lock, after the forward pass: each sequence's next token
 * and its prompt's logprobs, on the engine's threads side by side.  A draw with top_p over Llama 3's
 * vocabulary takes up to a millisecond; one after another under the lock
 * they held up the step and every HTTP thread waiting on the lock.  Only
 * this thread changes the running list, so it needs no lock to read. */
static void
pick_tokens(struct scheduler *s)
{
	s->n_picks = 0;
	for (int i = 0; i < s->n_running; i++)
		if (sample_row(s->running[i]) >= 0 || prompt_rows(s->running[i]))
			s->picks[s->n_picks++] = s->running[i];
	if (s->n_picks == 1) /* no hand-off for one */
		pick_worker(s, 0, 1);
	else if (s->n_picks > 1)
		engine_ctx_parallel(s->ctx, pick_worker, s);
}

/* Under the lock: publish the token pick_tokens() chose, and finish the
 * request when it is done.  Returns 1 when the request finished (q must
 * then be freed). */
static int
emit_token(struct scheduler *s, struct seq *q)
{
	struct sched_request *r = q->req;
	int32_t tok = q->next;

	r->out[r->n_out] = tok;
	r->n_out++;
	q->tokens[q->n_tokens++] = tok;
	if (note_token_time(s, r) >= r->wake_after)
		pthread_cond_broadcast(&r->cond);

	enum finish_reason f = FINISH_NONE;
	if (!r->ignore_eos && is_eog(s, tok))
		f = FINISH_STOP;
	else if (r->constraint != NULL && r->constraint->done(r->constraint->state))
		f = FINISH_STOP;
	else if (r->n_out >= r->max_tokens || q->n_tokens >= s->n_ctx)
		f = FINISH_LENGTH;
	if (f == FINISH_NONE)
		return 0;
	finish_locked(s, r, f, NULL);
	return 1;
}

/* Under the lock: an embedding request's rows of this chunk, summed for
 * mean pooling or taken when last; 1 when the request is done. */
static int
pool_rows(struct scheduler *s, struct seq *q)
{
	struct sched_request *r = q->req;
	int D = s->n_embd;
	float *e = r->embedding;

	if (r->pooling == SCHED_POOL_MEAN)
		for (int t = 0; t < q->chunk; t++) {
			const float *h = s->hidden + (size_t)(q->row0 + t) * D;
			for (int d = 0; d < D; d++)
				e[d] += h[d];
		}
	if (!q->sample)
		return 0;
	if (r->pooling == SCHED_POOL_LAST)
		memcpy(e, s->hidden + (size_t)q->row0 * D, (size_t)D * sizeof(float));
	double norm = 0;
	for (int d = 0; d < D; d++)
		norm += (double)e[d] * e[d];
	norm = sqrt(norm);
	for (int d = 0; d < D; d++)
		e[d] = norm > 0 ? (float)(e[d] / norm) : 0.0f;
	finish_locked(s, r, FINISH_STOP, NULL);
	return 1;
}

/* Under the lock, after the forward pass. */
static void
publish(struct scheduler *s, const struct step_batch *b)
{
	if (s->p.observer.forward != NULL)
		s->p.observer.forward(s->p.observer.arg, b->n);
	for (int i = 0; i < s->n_running; i++) {
		struct seq *q = s->running[i];
		if (q->chunk == 0)
			continue;
		if (q->req->pooling != SCHED_POOL_NONE) {
			q->n_computed += q->chunk;
			if (q->req->adapter == 0)
				kv_seq_commit(s->pool, &q->kv, q->tokens, q->n_computed);
			if (pool_rows(s, q)) {
				remove_at(s->running, &s->n_running, i--);
				s->n_active--;
				seq_free(s, q);
			}
			continue;
		}
		q->n_computed += q->chunk;
		if (q->req->adapter == 0) /* an adapter's blocks are not for others */
			kv_seq_commit(s->pool, &q->kv, q->tokens, q->n_computed);
		if (!q->sample)
			continue;
		if (emit_token(s, q)) {
			remove_at(s->running, &s->n_running, i--);
			s->n_active--;
			seq_free(s, q);
		}
	}
}

static void
update_gauges(struct scheduler *s)
{
	struct kv_pool_stats st;

	kv_pool_stats(s->pool, &st);
	s->gauges.running = s->n_running;
	s->gauges.kv_usage = (double)st.n_used / st.n_blocks;
	s->gauges.kv_blocks = st.n_blocks;
	s->gauges.kv_blocks_cached = st.n_cached;
	s->gauges.cpu_threads_active = engine_ctx_threads_active(s->ctx);
}

/* How often an idle rank 0 checks that its group still answers: a rank
 * that died while nothing was asked is noticed this soon (plus the
 * group's deadline when it hung), not at the next request. */
#define PING_MS 2000

/* Nothing to run: wait for work, under the lock.  Rank 0 of a group
 * pings it when the wait runs out; a rank that does not answer ends
 * the group there (privai/collective.h), and whoever runs it restarts
 * it whole. */
static void
idle_wait(struct scheduler *s)
{
	struct timespec ts;
	char err[PRIVAI_ERR_LEN];

	if (!s->grouped) {
		pthread_cond_wait(&s->wake, &s->mu);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += PING_MS / 1000;
	if (pthread_cond_timedwait(&s->wake, &s->mu, &ts) != ETIMEDOUT || s->stopping || s->q_head != NULL)
		return;
	s->in_forward = 1;
	pthread_mutex_unlock(&s->mu);
	/* every transport ends the process on a failed collective; were one
	 * not to, the next forward pass would fail its requests with it */
	(void)engine_ping(s->ctx, err);
	pthread_mutex_lock(&s->mu);
	s->in_forward = 0;
	pthread_cond_broadcast(&s->forward_done);
}

int
sched_step(struct scheduler *s)
{
	struct step_batch b;
	char err[PRIVAI_ERR_LEN];

	pthread_mutex_lock(&s->mu);
	reap_cancelled(s);
	if (s->abort_all && !s->stopping)
		s->abort_all = 0;
	if (s->stopping) {
		update_gauges(s);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	admit(s);
	if (s->n_running == 0) {
		/* with nothing running every block is free or evictable, so a
		 * queued request that still cannot start never will */
		if (s->q_head != NULL && s->n_preempted == 0) {
			struct sched_request *r = s->q_head;
			s->q_head = r->next;
			if (s->q_head == NULL)
				s->q_tail = NULL;
			s->n_queued--;
			finish_locked(s, r, FINISH_ERROR, "the KV cache cannot hold this request");
		} else if (s->q_head == NULL) {
			update_gauges(s);
			idle_wait(s);
		}
		pthread_mutex_unlock(&s->mu);
		return 1;
	}
	build_batch(s, &b);
	update_gauges(s);
	s->in_forward = 1; /* adapters are not added or taken out meanwhile */
	pthread_mutex_unlock(&s->mu);

	struct compute_batch eb = { b.n, s->b_tok, s->b_pos, s->b_table, b.n_out, s->b_rows, 0 };
	int rc = b.n > 0 ? engine_forward_ex(s->ctx, &eb, b.adapter ? s->b_adapter : NULL, s->logits,
					     b.hidden ? s->hidden : NULL, err)
			 : PRIVAI_OK;
	if (rc >= 0)
		pick_tokens(s);

	pthread_mutex_lock(&s->mu);
	s->in_forward = 0;
	pthread_cond_broadcast(&s->forward_done);
	if (rc < 0) {
		/* an engine refusal is a scheduler bug: fail the batch, not the server */
		for (int i = s->n_running - 1; i >= 0; i--) {
			struct seq *q = s->running[i];
			if (q->chunk == 0)
				continue;
			remove_at(s->running, &s->n_running, i);
			s->n_active--;
			finish_locked(s, q->req, FINISH_ERROR, err);
			seq_free(s, q);
		}
	} else {
		publish(s, &b);
	}
	update_gauges(s);
	pthread_mutex_unlock(&s->mu);
	return 1;
}
