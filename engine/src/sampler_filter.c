/*
 * Top-k and top-p without sorting the vocabulary.  A sort of every
 * candidate took 4.3 ms a token over 32000 logits and 19 ms over Llama
 * 3's 128256 (top_p 0.9 and no top_k, as many clients send), on the
 * scheduler thread while the pool's threads waited for the next step.
 *
 * The terms e = exp(logit - max) lie in [0, 1], where a float's top bits
 * (its exponent and three bits of mantissa) order it: a histogram over
 * them, 1017 buckets of an eighth of an octave, says which buckets a
 * filter keeps whole and which one holds its boundary, and only that
 * bucket's members are sorted.  Masked tokens (-inf, and NaN, which the
 * terms' code turns to 0) fall in bucket 0 with the terms under e^-87 and
 * are never kept.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler_filter.h"

#define KEY_SHIFT 20                            /* sign, exponent, 3 mantissa bits */
#define N_KEYS ((0x3F800000u >> KEY_SHIFT) + 1) /* 1.0f's key is the largest: 1017 */

static inline uint32_t
term_key(float e)
{
	uint32_t b;

	memcpy(&b, &e, sizeof(b));
	return b >> KEY_SHIFT;
}

static inline int
masked(float logit)
{
	return !(logit > -INFINITY); /* -inf or NaN */
}

/* Larger logits first; equal ones by id, so that every run (and every
 * qsort) puts them in the same order. */
static int
cmp_cand_desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->logit != y->logit)
		return x->logit < y->logit ? 1 : -1;
	return (x->id > y->id) - (x->id < y->id);
}

void
cand_partial_sort(struct cand *c, int n, int k)
{
	int lo = 0, hi = n - 1;

	while (lo < hi) { /* quickselect for the k-th in that order */
		struct cand pivot = c[(lo + hi) / 2];
		int i = lo, j = hi;
		while (i <= j) {
			while (cmp_cand_desc(&c[i], &pivot) < 0)
				i++;
			while (cmp_cand_desc(&c[j], &pivot) > 0)
				j--;
			if (i <= j) {
				struct cand t = c[i];
				c[i++] = c[j];
				c[j--] = t;
			}
		}
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			break;
	}
	qsort(c, (size_t)k, sizeof(*c), cmp_cand_desc);
}

/* The tokens of buckets above b (those min_p keeps) to the front of out,
 * in vocabulary order, and bucket b's right after them; returns how many
 * came before bucket b's, *n_b bucket b's. */
static int
gather(const float *logit, const float *e, int n, uint32_t b, float min_p, struct cand *out, int *n_b)
{
	int m = 0, t = 0;

	/* bucket b's from the back of out: every token has room once */
	for (int i = 0; i < n; i++) {
		uint32_t key = term_key(e[i]);
		if (key < b || e[i] < min_p || masked(logit[i]))
			continue;
		if (key > b)
			out[m++] = (struct cand){ i, logit[i], e[i] };
		else
			out[n - 1 - t++] = (struct cand){ i, logit[i], e[i] };
	}
	memmove(out + m, out + n - t, (size_t)t * sizeof(*out));
	*n_b = t;
	return m;
}

int
filter_top_k(const float *logit, const float *e, int n, int k, struct cand *out)
{
	uint32_t count[N_KEYS] = { 0 };
	int above = 0, n_b;
	uint32_t b;

	for (int i = 0; i < n; i++)
		count[term_key(e[i])]++;
	for (b = N_KEYS - 1; b > 0 && above + (int)count[b] < k; b--)
		above += (int)count[b];
	int m = gather(logit, e, n, b, 0.0f, out, &n_b); /* no min_p */
	if (n_b > k - m) {                               /* the boundary's largest make up k */
		cand_partial_sort(out + m, n_b, k - m);
		n_b = k - m;
	}
	m += n_b;
	qsort(out, (size_t)m, sizeof(*out), cmp_cand_desc);
	return m;
}

int
filter_top_p(const float *logit, const float *e, int n, float sum, float top_p, float min_p, struct cand *out)
{
	/* in doubles: a float sum of thousands of near-equal terms is off by
	 * more than the boundary token's share */
	double mass[N_KEYS] = { 0 }, goal = (double)top_p * sum, cum = 0.0;
	uint32_t b;
	int m, n_b;

	if (top_p >= 1.0f) /* min_p alone: every term over it */
		return gather(logit, e, n, 1, min_p, out, &n_b) + n_b;
	for (int i = 0; i < n; i++)
		mass[term_key(e[i])] += e[i];
	/* the first bucket from the top where the mass reaches the goal */
	for (b = N_KEYS - 1; b > 0 && cum + mass[b] < goal; b--)
		cum += mass[b];
	if (b == 0) /* the sums' rounding: every bucket with a term */
		return gather(logit, e, n, 1, min_p, out, &n_b) + n_b;
	m = gather(logit, e, n, b, min_p, out, &n_b);
	for (;;) {
		/* the boundary's tokens from the largest, until the mass is in */
		struct cand *c = out + m;
		int j = 0;
		qsort(c, (size_t)n_b, sizeof(*c), cmp_cand_desc);
		while (j < n_b && cum < goal)
			cum += c[j++].p;
		m += j;
		if (cum >= goal || b <= 1)
			break;
		/* the rounding of the buckets' sums left it short: the next
		 * bucket down (min_p drops whole buckets from the top's end) */
		do
			b--;
		while (b > 1 && mass[b] == 0.0);
		int before = m;
		for (int i = 0; i < n && m < n; i++)
			if (term_key(e[i]) == b && e[i] >= min_p && !masked(logit[i]))
				out[m++] = (struct cand){ i, logit[i], e[i] };
		n_b = m - before;
		m = before;
		if (n_b == 0 && mass[b] > 0.0)
			break; /* min_p removed them: it keeps no more */
	}
	return m;
}
