/*
 * The candidates top-k and top-p keep, found without sorting the
 * vocabulary (sampler_filter.c).  Internal to the sampler.
 */
#ifndef PRIVAI_SAMPLER_FILTER_H
#define PRIVAI_SAMPLER_FILTER_H

#include <stdint.h>

struct cand {
	int32_t id;
	float logit;
	float p;
};

/* Move the k largest of c[0..n) (by logit) to the front, in order. */
void cand_partial_sort(struct cand *c, int n, int k);

/* The k largest of the n logits, in out (room for n) from the largest
 * down, each with p = its term e; e[i] = exp(logit[i] - max), 0 for the
 * logits under e^-87 of the largest.  Masked tokens (-inf, NaN) are never
 * among them, so fewer than k may come back: the count. */
int filter_top_k(const float *logit, const float *e, int n, int k, struct cand *out);

/* The smallest set of the largest logits whose terms e (as above, summing
 * to sum) reach top_p * sum, less those under min_p (e < min_p: p below
 * min_p times the largest's), in out (room for n), each with p = its term:
 * the buckets wholly kept first, in vocabulary order, then the rest in
 * order from the largest.  top_p 1 keeps every token min_p does.
 * Returns the count, at least 1 when any logit is finite. */
int filter_top_p(const float *logit, const float *e, int n, float sum, float top_p, float min_p, struct cand *out);

#endif
