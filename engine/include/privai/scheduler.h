/*
 * The serving scheduler: continuous batching over the paged KV cache.
 *
 * One thread owns the engine context.  Each step it builds a batch of one
 * token for every decoding sequence plus prompt chunks of sequences still
 * prefilling (so a long prompt never stalls the streams), runs one forward
 * pass, samples, and publishes the new tokens to their requests.  New
 * requests join between steps; a full cache preempts the youngest sequence,
 * which is recomputed later (its prefix usually from the prefix cache).
 *
 * Client threads fill a sched_request, submit it, wait for tokens and may
 * cancel it; the request is reference counted between the two sides.
 */
#ifndef PRIVAI_SCHEDULER_H
#define PRIVAI_SCHEDULER_H

#include <pthread.h>
#include <stdint.h>

#include "privai/model.h"
#include "privai/sampler.h"
#include "privai/tokenizer.h"

#define SCHED_MAX_TOP_LOGPROBS 20

enum finish_reason { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ABORT, FINISH_ERROR };

const char *finish_reason_name(enum finish_reason f);

struct token_logprob {
	int32_t id;
	float logprob;
};

/* Restricts sampling (JSON mode).  mask() sets the logits of tokens that
 * may not come next to -INFINITY; accept() advances past a chosen token;
 * done() says the output is complete and generation should stop. */
struct token_constraint {
	void (*mask)(void *state, float *logits, int n_vocab);
	void (*accept)(void *state, int32_t id);
	int (*done)(const void *state);
	void (*release)(struct token_constraint *c); /* called when the request is freed */
	void *state;
};

enum { SCHED_POOL_NONE, SCHED_POOL_MEAN, SCHED_POOL_LAST };

/* The most top logprobs a request may ask for (OpenAI's limit). */
#define SCHED_TOP_MAX 20

struct sched_request {
	/* set by the client before submit, read-only afterwards */
	int32_t *prompt;
	int n_prompt;
	int max_tokens; /* > 0 */
	int min_tokens; /* end-of-generation tokens are masked until then */
	int ignore_eos;
	struct sampler_params sampling; /* its logit_bias arrays: bias_ids, bias below */
	int32_t *bias_ids;              /* logit_bias, owned (freed with the request) */
	float *bias;
	int top_logprobs;    /* -1: none; else logprob of each token and the top N (<= SCHED_TOP_MAX) */
	int prompt_logprobs; /* also for prompt tokens 1.. (echo); no prefix cache then */
	struct token_constraint *constraint;
	/* an embedding of the prompt instead of generation: SCHED_POOL_MEAN
	 * or SCHED_POOL_LAST of the final hidden states, L2-normalised into
	 * embedding (n_embd floats, calloc'd by the client, freed with the
	 * request); finishes with FINISH_STOP and no tokens */
	int pooling;
	float *embedding;
	/* the LoRA adapter to run with (engine_ctx_add_lora's number; 0 the
	 * base model); its KV blocks are never shared through the prefix cache */
	int adapter;

	/* written by the scheduler, read by the client under the lock */
	int32_t *out;                     /* (max_tokens) generated ids */
	float *out_logprob;               /* (max_tokens) when top_logprobs >= 0 */
	struct token_logprob *out_top;    /* (max_tokens, top_logprobs) */
	float *prompt_logprob;            /* (n_prompt) when prompt_logprobs; [0] is NAN */
	struct token_logprob *prompt_top; /* (n_prompt, top_logprobs) */
	int n_out;
	int n_cached_prompt; /* prompt tokens served from the prefix cache */
	enum finish_reason finish;
	char error[256];
	double t_arrival, t_scheduled, t_first, t_last, t_finish;

	/* set by the client under the lock */
	int cancelled;
	enum finish_reason cancelled_as; /* FINISH_STOP: the client found a stop sequence */

	/* set by the client under the lock: a new token wakes it no sooner
	 * than this (sched clock), so that tokens coming faster than the
	 * client wants them are taken by one wake-up (scheduler_wait_after) */
	double wake_after;

	/* scheduler internals */
	int refs;
	pthread_cond_t cond; /* on CLOCK_MONOTONIC */
	struct sched_request *next;
};

/* What the scheduler reports as it works, for whoever keeps metrics
 * (the server's Prometheus counters, server/metrics.c): each callback runs
 * under the scheduler's lock, so a reader of what they record takes
 * scheduler_lock().  Any may be NULL; arg is passed back. */
struct sched_observer {
	void *arg;
	/* a request left the queue: its wait, prompt length, and (prefix
	 * caching counted) how many of the prompt's tokens were cached */
	void (*scheduled)(void *arg, double queue_s, int n_prompt, int counted, int cached_tokens);
	/* a token was generated: first says whether it is the request's first
	 * (gap_s is then the time to first token, else the inter-token time) */
	void (*token)(void *arg, int first, double gap_s);
	/* a request finished: r->finish says how, its t_* fields when (its
	 * t_first is 0 when it produced no token) */
	void (*finished)(void *arg, const struct sched_request *r);
	void (*preempted)(void *arg);
	void (*forward)(void *arg, int n_tokens); /* one forward pass of n_tokens */
};

/* The scheduler's state as gauges; read with the lock held. */
struct sched_gauges {
	int running, waiting;
	double kv_usage; /* 0..1 */
	int kv_blocks, kv_blocks_cached;
	int cpu_threads, cpu_threads_active; /* the CPU pool's; 0 on another backend */
};

struct scheduler_params {
	int max_seqs;  /* sequences running at once */
	int max_queue; /* requests waiting beyond those; more are refused */
	struct sched_observer observer;
};

struct scheduler;

/* Takes the context for its own thread; the tokenizer is read-only. */
int scheduler_new(struct engine_ctx *ctx, const struct tokenizer *tok, const struct scheduler_params *p,
		  struct scheduler **ret, char *err);
/* Stops the thread (aborting what runs) and frees the scheduler. */
void scheduler_free(struct scheduler *s);

/* A request with everything zeroed, refs 1 (the client's), buffers sized
 * for max_tokens and the logprob settings.  NULL when out of memory. */
struct sched_request *sched_request_new(int n_prompt, int max_tokens, int top_logprobs, int prompt_logprobs);
/* How many requests the queue holds at most (scheduler_params.max_queue):
 * a burst of more is refused however idle the scheduler is. */
int scheduler_max_queue(const struct scheduler *s);
/* Drop one reference; the last frees the request. */
void sched_request_put(struct scheduler *s, struct sched_request *r);

/* Queue a request (the scheduler takes a reference).  PRIVAI_EBUSY when the
 * queue is full, PRIVAI_EUNAVAIL while draining, PRIVAI_EINVAL when the
 * prompt and max_tokens do not fit the context (named in err). */
int scheduler_submit(struct scheduler *s, struct sched_request *r, char *err);

/* Wait until the request has more than `seen` tokens or has finished, or
 * timeout_ms passes.  Returns n_out; *finish gets the finish reason. */
int scheduler_wait(struct scheduler *s, struct sched_request *r, int seen, int timeout_ms, enum finish_reason *finish);
/* The same, but new tokens wake the caller no sooner than not_before (on
 * scheduler_clock()): those that come before it are taken together, with
 * one wake-up instead of one each.  The request's end wakes it at once. */
int scheduler_wait_after(struct scheduler *s, struct sched_request *r, int seen, double not_before, int timeout_ms,
			 enum finish_reason *finish);
/* Seconds on CLOCK_MONOTONIC: the clock of the request's times and of
 * scheduler_wait_after's not_before. */
double scheduler_clock(void);
/* The client lost interest: finish the request and free its blocks. */
void scheduler_cancel(struct scheduler *s, struct sched_request *r);
/* The client found a stop sequence in the text: finish the request as
 * FINISH_STOP (what the metrics count), not as an abort. */
void scheduler_stop(struct scheduler *s, struct sched_request *r);

/* Add a LoRA adapter between forward passes (engine_ctx_add_lora); its
 * number, or an error.  The caller keeps the adapter until it is removed. */
int scheduler_lora_add(struct scheduler *s, struct lora_adapter *a, char *err);
/* Take adapter k out between forward passes, into *ret (the caller frees
 * it); PRIVAI_EBUSY while requests queued or running use it, PRIVAI_EINVAL
 * when k is not loaded.  A request naming it afterwards is refused. */
int scheduler_lora_remove(struct scheduler *s, int k, struct lora_adapter **ret, char *err);

/* Lock and unlock around reading a request's outputs. */
void scheduler_lock(struct scheduler *s);
void scheduler_unlock(struct scheduler *s);

/* Stop admitting; wait up to timeout_ms for the running and queued
 * requests to finish, then abort the rest.  Returns how many were aborted. */
int scheduler_drain(struct scheduler *s, int timeout_ms);

int scheduler_max_context(const struct scheduler *s);

/* The gauges now; the caller holds the lock (scheduler_lock). */
void scheduler_gauges(struct scheduler *s, struct sched_gauges *g);

double sched_now(void);

#endif
