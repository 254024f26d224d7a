/*
 * The scheduler's insides, shared by scheduler.c (the client-facing API and
 * lifecycle) and sched_step.c (one iteration of the batching loop).  What
 * it does is reported through p.observer (privai/scheduler.h): the
 * library keeps no metrics of its own.
 */
#ifndef PRIVAI_SCHED_INTERNAL_H
#define PRIVAI_SCHED_INTERNAL_H

#include "privai/kv_cache.h"
#include "privai/scheduler.h"

/* A request the scheduler has admitted: its tokens so far (prompt, then
 * generated), how many of them the cache holds, and its blocks. */
struct seq {
	struct sched_request *req;
	struct kv_seq kv;
	int32_t *tokens;
	int n_tokens, cap;
	int n_computed;
	struct sampler *smp;
	/* this step */
	int chunk;    /* tokens in the batch */
	int row0;     /* batch row of its first token */
	int sample;   /* the chunk ends at its last token: sample after */
	int32_t next; /* the token sampled after it (pick_tokens), for publish */
};

struct scheduler {
	struct engine_ctx *ctx;
	const struct tokenizer *tok;
	struct scheduler_params p;
	int n_vocab, n_ctx, n_batch;
	int grouped; /* rank 0 of a tensor-parallel group: pinged when idle */
	struct kv_pool *pool;
	pthread_t thread;
	int thread_started, mutex_ready;

	/* under mu */
	pthread_mutex_t mu;
	pthread_cond_t wake; /* work arrived or a request was cancelled */
	pthread_cond_t idle; /* a request finished (drain waits on it) */
	struct sched_request *q_head, *q_tail;
	int n_queued;
	int n_active; /* running + preempted */
	int n_preempted_shared;
	int draining, stopping, abort_all;
	int in_forward;                      /* a forward pass runs (without the lock) */
	pthread_cond_t forward_done;         /* ... and has ended */
	int lora_users[ENGINE_MAX_LORA + 1]; /* requests queued or running per adapter */
	struct sched_gauges gauges;          /* running and the KV pool's, as of the last step */

	/* scheduler thread only */
	struct seq **running;
	int n_running;
	struct seq **preempted; /* oldest first; resumed before the queue */
	int n_preempted;
	struct seq **picks; /* those sampling after this step (pick_tokens) */
	int n_picks;
	int32_t *eog;
	int n_eog;
	int32_t *b_tok, *b_pos, *b_rows;
	float *logits;      /* n_batch x n_vocab: the rows a forward pass brings back */
	float *hidden;      /* n_batch x n_embd: their final hidden states, for embeddings */
	int32_t *b_adapter; /* n_batch: each token's LoRA adapter (0 none) */
	int n_embd;
	const int32_t **b_table;
};

/* One iteration; returns 0 when the thread should exit. */
int sched_step(struct scheduler *s);
void sched_request_free(struct sched_request *r);

#endif
