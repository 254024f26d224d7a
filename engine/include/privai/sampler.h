/*
 * Token sampling: penalties, then top-k, top-p, min-p, temperature and a
 * draw from a seeded generator, so the same seed gives the same text.
 * temperature <= 0 is greedy (argmax after penalties).
 */
#ifndef PRIVAI_SAMPLER_H
#define PRIVAI_SAMPLER_H

#include <stdint.h>

struct sampler_params {
	float temperature;       /* 0: greedy; default 0.8 */
	int top_k;               /* 0: off */
	float top_p;             /* 1: off */
	float min_p;             /* 0: off; keep p >= min_p * p_max */
	float repeat_penalty;    /* 1: off; >1 discourages repeats */
	int repeat_last_n;       /* tokens the penalties look back over */
	float presence_penalty;  /* 0: off; OpenAI semantics */
	float frequency_penalty; /* 0: off */
	uint64_t seed;
	/* logit_bias: logit_bias[i] added to token logit_bias_ids[i]'s logit
	 * before the penalties and everything else (vLLM applies it as a
	 * logits processor); the caller's arrays, copied by sampler_new */
	const int32_t *logit_bias_ids;
	const float *logit_bias;
	int n_logit_bias;
};

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties
 * (repeat_last_n 64), seed 0. */
void sampler_params_default(struct sampler_params *p);

/* Check ranges; PRIVAI_OK or PRIVAI_EINVAL with the parameter named. */
int sampler_params_validate(const struct sampler_params *p, char *err);

struct sampler;

int sampler_new(const struct sampler_params *p, int n_vocab, struct sampler **ret);
void sampler_free(struct sampler *s);

/* log(sum(exp(logits))) over n > 0 logits: a logprob is a logit less it.
 * In vectors, terms summed in doubles; -inf when every logit is. */
float logits_log_sum_exp(const float *logits, int n);
/* The ids of the k (>= 0) largest of n logits, largest first, equal ones
 * by id; a NaN ranks below -inf.  One pass over the logits. */
void logits_top_n(const float *logits, int n, int k, int32_t *ids);

/* Pick a token from logits (n_vocab floats; not modified). */
int32_t sampler_sample(struct sampler *s, const float *logits);
/* Record a token of the context (prompt or generated) for the penalties. */
void sampler_accept(struct sampler *s, int32_t id);
void sampler_reset(struct sampler *s);

#endif
