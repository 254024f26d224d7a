/*
 * Sampling chain (the order llama.cpp and vLLM use): penalties over the
 * recent tokens, top-k, softmax, top-p, min-p, temperature, then a draw.
 * All buffers are allocated in sampler_new; sampling allocates nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "privai/sampler.h"
#include "privai/status.h"
#include "sampler_filter.h"

#define DRAW_BLOCK 64 /* the unfiltered draw's terms a block sum covers: 8 vectors */
_Static_assert(DRAW_BLOCK == 64, "sample_unsorted takes a block as 8 vectors");

struct sampler {
	struct sampler_params p;
	int n_vocab;
	struct cand *cand; /* (n_vocab) */
	float *work;       /* (n_vocab) the logits after the bias and the penalties */
	float *prob;       /* (n_vocab) the softmax's terms */
	float *block_sum;  /* (n_vocab / DRAW_BLOCK + 1) their sums, a block at a time */
	int32_t *recent;   /* ring of the last repeat_last_n tokens */
	int n_recent, recent_head;
	int32_t *count;    /* (n_vocab) occurrences in the ring */
	int32_t *bias_ids; /* (n_bias) logit_bias, a copy of the caller's */
	float *bias;
	int n_bias;
	uint64_t rng;
	int avx512; /* the max by logits_max_avx512, the unfiltered draw's blocks by draw_blocks_avx512 */
};

#if defined(__x86_64__)
static int draw_avx512_usable(void);
#endif

void
sampler_params_default(struct sampler_params *p)
{
	memset(p, 0, sizeof(*p));
	p->temperature = 0.8f;
	p->top_k = 40;
	p->top_p = 0.95f;
	p->min_p = 0.05f;
	p->repeat_penalty = 1.0f;
	p->repeat_last_n = 64;
}

int
sampler_params_validate(const struct sampler_params *p, char *err)
{
	if (!(p->temperature >= 0.0f) || p->temperature > 100.0f)
		return privai_fail(err, PRIVAI_EINVAL, "temperature must be in [0, 100]");
	if (p->top_k < 0)
		return privai_fail(err, PRIVAI_EINVAL, "top_k must be >= 0");
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return privai_fail(err, PRIVAI_EINVAL, "top_p must be in (0, 1]");
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return privai_fail(err, PRIVAI_EINVAL, "min_p must be in [0, 1]");
	if (!(p->repeat_penalty > 0.0f) || p->repeat_penalty > 10.0f)
		return privai_fail(err, PRIVAI_EINVAL, "repeat_penalty must be in (0, 10]");
	if (p->repeat_last_n < 0 || p->repeat_last_n > (1 << 20))
		return privai_fail(err, PRIVAI_EINVAL, "repeat_last_n must be in [0, 1048576]");
	if (!(fabsf(p->presence_penalty) <= 2.0f) || !(fabsf(p->frequency_penalty) <= 2.0f))
		return privai_fail(err, PRIVAI_EINVAL, "presence and frequency penalties must be in [-2, 2]");
	return PRIVAI_OK;
}

/* splitmix64: a seed of 0 is as good as any other */
static uint64_t
next_u64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static float
next_unit(uint64_t *s)
{
	return (float)(next_u64(s) >> 40) / 16777216.0f; /* [0, 1) */
}

int
sampler_new(const struct sampler_params *p, int n_vocab, struct sampler **ret)
{
	struct sampler *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return PRIVAI_ENOMEM;
	s->p = *p;
	s->n_vocab = n_vocab;
	s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
	s->work = malloc((size_t)n_vocab * sizeof(float));
	s->prob = malloc((size_t)n_vocab * sizeof(float));
	s->block_sum = malloc(((size_t)n_vocab / DRAW_BLOCK + 1) * sizeof(float));
	s->count = calloc((size_t)n_vocab, sizeof(int32_t));
	s->recent = malloc((size_t)(p->repeat_last_n > 0 ? p->repeat_last_n : 1) * sizeof(int32_t));
	if (s->cand == NULL || s->work == NULL || s->prob == NULL || s->block_sum == NULL || s->count == NULL ||
	    s->recent == NULL) {
		sampler_free(s);
		return PRIVAI_ENOMEM;
	}
	if (p->n_logit_bias > 0) {
		s->bias_ids = malloc((size_t)p->n_logit_bias * sizeof(int32_t));
		s->bias = malloc((size_t)p->n_logit_bias * sizeof(float));
		if (s->bias_ids == NULL || s->bias == NULL) {
			sampler_free(s);
			return PRIVAI_ENOMEM;
		}
		memcpy(s->bias_ids, p->logit_bias_ids, (size_t)p->n_logit_bias * sizeof(int32_t));
		memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof(float));
		s->n_bias = p->n_logit_bias;
	}
	s->p.logit_bias_ids = NULL; /* the caller's arrays may go */
	s->p.logit_bias = NULL;
	s->rng = p->seed;
#if defined(__x86_64__)
	s->avx512 = draw_avx512_usable();
#endif
	*ret = s;
	return PRIVAI_OK;
}

void
sampler_free(struct sampler *s)
{
	if (s == NULL)
		return;
	free(s->cand);
	free(s->work);
	free(s->prob);
	free(s->block_sum);
	free(s->count);
	free(s->bias_ids);
	free(s->bias);
	free(s->recent);
	free(s);
}

void
sampler_reset(struct sampler *s)
{
	memset(s->count, 0, (size_t)s->n_vocab * sizeof(int32_t));
	s->n_recent = s->recent_head = 0;
	s->rng = s->p.seed;
}

void
sampler_accept(struct sampler *s, int32_t id)
{
	int cap = s->p.repeat_last_n;

	if (cap == 0 || id < 0 || id >= s->n_vocab)
		return;
	if (s->n_recent == cap) {
		s->count[s->recent[s->recent_head]]--;
		s->recent[s->recent_head] = id;
		s->recent_head = (s->recent_head + 1) % cap;
	} else {
		s->recent[(s->recent_head + s->n_recent) % cap] = id;
		s->n_recent++;
	}
	s->count[id]++;
}

/* exp(x) for softmax terms, where x = logit - max <= 0: below -87 the
 * result would be under float's smallest normal (1.2e-38), nothing next
 * to the max's 1, and glibc's expf takes a slow path with errno for it
 * (perf: a third of a small model's serving time went to expf, half of
 * that in the underflow handling). */
static inline float
softmax_exp(float x)
{
	return x < -87.0f ? 0.0f : expf(x);
}

/* exp(x) for x <= 0 in plain float operations (x = k ln2 + r, a degree-6
 * polynomial for e^r, 2^k from the exponent bits; relative error under
 * 2.5e-7 against exp() on [-87, 0]),
 * 16 at a time in GCC's vector types, where expf is a call per logit (a
 * third of a small model's serving time; with Llama 3's 128k vocabulary
 * about 0.6 ms a token).  Below -87 (-inf: a token a constraint masks) it
 * is 0, as expf's result would be nothing next to the maximum's 1.  Only
 * IEEE operations without contraction
 * (-std=c11): every clone gives the same bits. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* 16 lanes, which x86-64-v4 computes in one register and the other
 * clones in two: the same operations on each lane, so the same bits.
 * 32000 logits took 24 us a draw in 8 lanes, 19.6 in 16 (the serving
 * loop timed on an Emerald Rapids Xeon). */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* exp of nv (a constant where inlined) vectors, each step for all of
 * them before the next: a vector's polynomial is a chain of a dozen
 * dependent operations, better not left to the out-of-order window. */
static inline __attribute__((always_inline)) void
exp_neg16n(v16f *v, int nv)
{
	const v16f lo = { -87, -87, -87, -87, -87, -87, -87, -87, -87, -87, -87, -87, -87, -87, -87, -87 };
	v16i below[4];
	v16f k[4], r[4], p[4];

#pragma GCC unroll 4
	for (int j = 0; j < nv; j++) {
		v16f x = v[j];
		below[j] = ~(x >= lo); /* NaN too */
		x = (v16f)(((v16i)lo & below[j]) | ((v16i)x & ~below[j]));
		/* k = round(x / ln2): adding 1.5 * 2^23 rounds to an integer */
		k[j] = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
		r[j] = (x - k[j] * 0.693145752f) - k[j] * 1.42860677e-6f;
	}
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++)
		p[j] = r[j] * (1.0f / 720) + 1.0f / 120;
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++)
		p[j] = p[j] * r[j] + 1.0f / 24;
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++)
		p[j] = p[j] * r[j] + 1.0f / 6;
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++)
		p[j] = p[j] * r[j] + 0.5f;
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++)
		p[j] = p[j] * r[j] + 1.0f;
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++)
		p[j] = p[j] * r[j] + 1.0f;
#pragma GCC unroll 4
	for (int j = 0; j < nv; j++) {
		v16i bits = (__builtin_convertvector(k[j], v16i) + 127) << 23;
		v[j] = (v16f)((v16i)(p[j] * (v16f)bits) & ~below[j]); /* exactly 0: a masked token is never drawn */
	}
}

/* The largest of n logits, 8 lanes at a time (a NaN never wins), on four
 * chains: one waits on its compare and blend every vector. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static float
logits_max_vec(const float *logit, int n)
{
	v8f vmax = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
	v8f vm[4] = { vmax, vmax, vmax, vmax };
	float max = -INFINITY;
	int i, b;

	for (i = 0; i + 32 <= n; i += 32)
#pragma GCC unroll 4
		for (b = 0; b < 4; b++) {
			v8f x;
			memcpy(&x, logit + i + 8 * b, sizeof(x));
			v8i gt = x > vm[b];
			vm[b] = (v8f)(((v8i)x & gt) | ((v8i)vm[b] & ~gt));
		}
	for (; i + 8 <= n; i += 8) {
		v8f x;
		memcpy(&x, logit + i, sizeof(x));
		v8i gt = x > vm[0];
		vm[0] = (v8f)(((v8i)x & gt) | ((v8i)vm[0] & ~gt));
	}
	for (int c = 0; c < 4; c++)
		for (b = 0; b < 8; b++)
			max = vm[c][b] > max ? vm[c][b] : max;
	for (; i < n; i++)
		max = logit[i] > max ? logit[i] : max;
	return max;
}

#if defined(__x86_64__)
/* logits_max_vec on AVX-512: vmaxps keeps its second operand unless the
 * first is greater, as that compare and blend do (a NaN never wins), in
 * one instruction a vector of 16 where they take four a vector of 8.
 * Greedy over 32000 logits in L2 (this and first_equal): 0.79 us a token
 * against 1.76. */
__attribute__((target("avx512f"))) static float
logits_max_avx512(const float *logit, int n)
{
	__m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	int i = 0;

	for (; i + 64 <= n; i += 64) {
		m0 = _mm512_max_ps(_mm512_loadu_ps(logit + i), m0);
		m1 = _mm512_max_ps(_mm512_loadu_ps(logit + i + 16), m1);
		m2 = _mm512_max_ps(_mm512_loadu_ps(logit + i + 32), m2);
		m3 = _mm512_max_ps(_mm512_loadu_ps(logit + i + 48), m3);
	}
	for (; i + 16 <= n; i += 16)
		m0 = _mm512_max_ps(_mm512_loadu_ps(logit + i), m0);
	if (i < n) /* the tail, -inf past it */
		m0 = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), (__mmask16)((1u << (n - i)) - 1),
							logit + i),
				   m0);
	return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}
#endif

/* The largest of n logits; avx512: the sampler's s->avx512 */
static float
logits_max(const float *logit, int n, int avx512)
{
#if defined(__x86_64__)
	if (avx512)
		return logits_max_avx512(logit, n);
#endif
	(void)avx512;
	return logits_max_vec(logit, n);
}

/* The first of n logits equal to v (n if none), 32 at a time: a compiler
 * leaves a loop that may end early unvectorized, and one logit a cycle
 * over 32000 was 2.5 % of serving the fixture model greedily. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static int
first_equal(const float *logit, int n, float v)
{
	const v8f vv = { v, v, v, v, v, v, v, v };
	int i = 0;

	for (; i + 32 <= n; i += 32) {
		v8i any = { 0 };
		for (int b = 0; b < 4; b++) {
			v8f x;
			memcpy(&x, logit + i + 8 * b, sizeof(x));
			any |= x == vv;
		}
		uint64_t w[4];
		memcpy(w, &any, sizeof(w));
		if ((w[0] | w[1] | w[2] | w[3]) != 0)
			break;
	}
	for (; i < n; i++)
		if (logit[i] == v)
			return i;
	return n;
}

/* Of 16 logits from l (m of them, m < 16 the tail: 0 past it), their
 * terms exp(x - max) summed into acc. */
static inline __attribute__((always_inline)) void
add_terms16(const float *l, int m, float max, v16f *acc)
{
	v16f x;

	if (m == 16) {
		memcpy(&x, l, sizeof(x));
	} else {
		float t[16];
		for (int i = 0; i < 16; i++)
			t[i] = i < m ? l[i] : -INFINITY; /* a term of 0 */
		memcpy(&x, t, sizeof(x));
	}
	x = x - max;
	exp_neg16n(&x, 1);
	*acc += x;
}

/* The logprobs' normalizer.  A double exp() a logit took 0.9 ms a token
 * over Llama 3's 128256 logits, and the scheduler ran it for every token
 * of a prompt whose logprobs were asked (echo): the polynomial of the
 * draw instead, its sums a block of 1024 at a time in doubles. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
float
logits_log_sum_exp(const float *logits, int n)
{
	float max = logits_max_vec(logits, n);
	double sum = 0.0;

	if (!(max > -INFINITY))
		return max; /* every logit -inf (or NaN): nothing to normalise */
	for (int b = 0; b < n; b += 1024) {
		v16f acc = { 0 };
		int end = b + 1024 < n ? b + 1024 : n;
		for (int i = b; i < end; i += 16)
			add_terms16(logits + i, end - i < 16 ? end - i : 16, max, &acc);
		for (int j = 0; j < 16; j++)
			sum += acc[j];
	}
	return max + (float)log(sum);
}

/* Whether logit a (id ia) ranks before logit b (id ib). */
static inline int
ranks_before(float a, int32_t ia, float b, int32_t ib)
{
	if (isnan(a) || isnan(b))
		return !isnan(a) || (isnan(b) && ia < ib);
	return a > b || (a == b && ia < ib);
}

/* One pass, the k best so far in order: a pass over the logits for each
 * of k took 0.7 ms a token for 5 over 128256 logits, 2.8 ms for 20. */
void
logits_top_n(const float *logits, int n, int k, int32_t *ids)
{
	int have = 0;

	/* once full, a logit enters only above the last one kept (ids rise:
	 * v ranks after an equal logit already in); below is -inf while
	 * not full or while the last is a NaN, which any logit but a NaN
	 * passes */
	float below = -INFINITY;

	if (k > n)
		k = n;
	for (int32_t v = 0; v < n && k > 0; v++) {
		float x = logits[v];
		if (have == k && !(x > below) && !(x == -INFINITY && below == -INFINITY))
			continue;
		if (have == k && !ranks_before(x, v, logits[ids[k - 1]], ids[k - 1]))
			continue;
		int at = have < k ? have++ : k - 1;
		while (at > 0 && ranks_before(x, v, logits[ids[at - 1]], ids[at - 1])) {
			ids[at] = ids[at - 1];
			at--;
		}
		ids[at] = v;
		if (have == k)
			below = isnan(logits[ids[k - 1]]) ? -INFINITY : logits[ids[k - 1]];
	}
}

/* Greedy decoding with no bias or penalty: the first token with the
 * largest logit, as the scan over the candidates below finds it, from
 * the vector maximum and then its first place.  Building the 32000
 * candidates and scanning them one by one took 22 % of serving the
 * fixture model at temperature 0 (docs/performance.md). */
static int32_t
greedy(const float *logit, int n, int avx512)
{
	float max = logits_max(logit, n, avx512);

	if (isnan(logit[0]) || !(max > -INFINITY))
		return 0; /* the scan below keeps token 0 then: nothing compares above a NaN or -inf */
	int i = first_equal(logit, n, max);
	return i < n ? i : 0;
}

#if defined(__x86_64__)
/* The unfiltered draw's terms exp((l - max) / t) of nb whole blocks, and
 * each block's sum, on AVX-512: the same polynomial as exp_neg16n, with
 * 2^k put in by vscalefps and the terms under e^-87 (masked tokens among
 * them) zeroed by a mask, some 14 instructions a vector against the
 * portable code's 25 (a draw over 32000 logits: 9.1 us against 15.1 on Zen 4).
 * A temperature other than 1 multiplies by its inverse (within an ulp
 * of the division). */
__attribute__((target("avx512f"))) static void
draw_blocks_avx512(const float *logit, int nb, float max, float t, float *pr, float *bs)
{
	const __m512 vmax = _mm512_set1_ps(max), inv_t = _mm512_set1_ps(1.0f / t), lo = _mm512_set1_ps(-87.0f);
	const __m512 log2e = _mm512_set1_ps(1.44269504f), ln2_hi = _mm512_set1_ps(0.693145752f);
	const __m512 ln2_lo = _mm512_set1_ps(1.42860677e-6f), one = _mm512_set1_ps(1.0f);

	for (int b = 0; b < nb; b++, logit += DRAW_BLOCK, pr += DRAW_BLOCK) {
		__m512 acc = _mm512_setzero_ps();
		for (int j = 0; j < 4; j++) {
			__m512 x = _mm512_sub_ps(_mm512_loadu_ps(logit + 16 * j), vmax);
			if (t != 1.0f)
				x = _mm512_mul_ps(x, inv_t);
			__mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ); /* not NaN, not under e^-87 */
			__m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
							_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			__m512 r = _mm512_fnmadd_ps(k, ln2_lo, _mm512_fnmadd_ps(k, ln2_hi, x));
			__m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 720), r, _mm512_set1_ps(1.0f / 120));
			q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 24));
			q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f / 6));
			q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.5f));
			q = _mm512_fmadd_ps(q, r, one);
			q = _mm512_fmadd_ps(q, r, one);
			q = _mm512_maskz_scalef_ps(keep, q, k);
			_mm512_storeu_ps(pr + 16 * j, q);
			acc = _mm512_add_ps(acc, q);
		}
		bs[b] = _mm512_reduce_add_ps(acc);
	}
}

/* Whether this CPU runs draw_blocks_avx512; PRIVAI_SIMD=scalar or avx2
 * (what the tests set to check the portable kernels) says no as well. */
static int
draw_avx512_usable(void)
{
	const char *force = getenv("PRIVAI_SIMD");

	if (force != NULL && (strcmp(force, "scalar") == 0 || strcmp(force, "avx2") == 0))
		return 0;
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f");
}
#endif

/* The softmax's terms exp((logit - max) / t) of n logits into s->prob,
 * their sums a block at a time into s->block_sum (*ret_nb of them);
 * returns the terms' sum.  Each clone computes the terms in its own
 * vector instructions. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static float
softmax_terms(struct sampler *s, const float *logit, int n, float max, float t, int *ret_nb)
{
	float sum = 0.0f, *pr = s->prob, *bs = s->block_sum;
	v8f acc = { 0 };
	int i, b, nb = 0;

	/* the terms, and their sums a block at a time, so that the draw
	 * walks blocks and then one block's terms: whole blocks, then the
	 * rest 8 at a time (the sums in the same order either way).  32000
	 * logits took 31 us a draw a vector at a time, 20 us so (a
	 * 64-byte copy of four vectors from the stack, which the CPU could
	 * not forward from their stores, cost 5 of the 11) */
	i = 0;
#if defined(__x86_64__)
	if (s->avx512) {
		nb = n / DRAW_BLOCK;
		draw_blocks_avx512(logit, nb, max, t, pr, bs);
		i = nb * DRAW_BLOCK;
	}
#endif
	for (; i + DRAW_BLOCK <= n; i += DRAW_BLOCK) {
		v16f x[4];
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			memcpy(&x[j], logit + i + 16 * j, sizeof(x[j]));
			x[j] = x[j] - max;
			if (t != 1.0f) /* x / 1 is x: the OpenAI default skips a division */
				x[j] = x[j] / t;
		}
		exp_neg16n(x, 4);
		/* summed 8 lanes at a time in the order of the tail below */
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			memcpy(pr + i + 16 * j, &x[j], sizeof(x[j])); /* a vector a copy, as above */
			acc += __builtin_shufflevector(x[j], x[j], 0, 1, 2, 3, 4, 5, 6, 7);
			acc += __builtin_shufflevector(x[j], x[j], 8, 9, 10, 11, 12, 13, 14, 15);
		}
		bs[nb++] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
		acc = (v8f){ 0 };
	}
	for (; i < n; i += 8) {
		v8f x = { 0 }; /* x - max is 0 in lanes past n: no overflow in 2^k */
		int m = n - i < 8 ? n - i : 8;
		/* whole vectors by fixed-size copies: a copy of a variable size
		 * goes through memory, and reading it back as a vector stalls */
		if (m == 8) {
			memcpy(&x, logit + i, sizeof(x));
		} else {
			x += max;
			memcpy(&x, logit + i, (size_t)m * sizeof(float));
		}
		v16f x16 = { 0 }; /* the 8 lanes in its low half */
		memcpy(&x16, &x, sizeof(x));
		x16 = (x16 - max) / t;
		exp_neg16n(&x16, 1);
		memcpy(&x, &x16, sizeof(x));
		if (m == 8) {
			memcpy(pr + i, &x, sizeof(x));
		} else {
			v8f y = { 0 };
			memcpy(pr + i, &x, (size_t)m * sizeof(float));
			memcpy(&y, &x, (size_t)m * sizeof(float));
			x = y;
		}
		acc += x;
		if ((i + 8) % DRAW_BLOCK == 0 || i + 8 >= n) {
			bs[nb++] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
			acc = (v8f){ 0 };
		}
	}
	for (b = 0; b < nb; b++)
		sum += bs[b];
	*ret_nb = nb;
	return sum;
}

/* No filter needs the order (the OpenAI defaults: no top-k, top-p 1,
 * min-p 0): draw from the tempered softmax of all n logits (after the
 * penalties) as they are, which spares sorting the whole vocabulary for
 * every token.  Token i is logit i. */
static int32_t
sample_unsorted(struct sampler *s, const float *logit, int n)
{
	const float *pr = s->prob, *bs = s->block_sum;
	float max = logits_max(logit, n, s->avx512);
	int i, b, nb;

	if (!(max > -INFINITY))
		return 0; /* every token masked: nothing to draw from */
	float sum = softmax_terms(s, logit, n, max, s->p.temperature, &nb);
	float r = next_unit(&s->rng) * sum;
	for (b = 0; b < nb && !(r < bs[b]); b++)
		r -= bs[b];
	if (b < nb) {
		int end = (b + 1) * DRAW_BLOCK < n ? (b + 1) * DRAW_BLOCK : n;
		for (i = b * DRAW_BLOCK; i < end; i++) {
			r -= pr[i];
			if (r < 0.0f)
				return i;
		}
	}
	/* rounding left r >= 0: the last token that could be drawn */
	for (i = n - 1; i > 0 && !(pr[i] > 0.0f); i--)
		;
	return i;
}

/* The logits after the bias (first, as a logits processor would) and the
 * penalties over the recent tokens, in s->work. */
static const float *
penalized(struct sampler *s, const float *logits)
{
	const struct sampler_params *p = &s->p;
	float *l = s->work;
	int n = s->n_vocab;

	memcpy(l, logits, (size_t)n * sizeof(float));
	for (int b = 0; b < s->n_bias; b++)
		if (s->bias_ids[b] >= 0 && s->bias_ids[b] < n)
			l[s->bias_ids[b]] += s->bias[b];
	for (int i = 0; i < n; i++) {
		int32_t c = s->count[i];
		if (c > 0) {
			float v = l[i] > 0 ? l[i] / p->repeat_penalty : l[i] * p->repeat_penalty;
			l[i] = v - ((float)c * p->frequency_penalty + p->presence_penalty);
		}
	}
	return l;
}

/* top_p, then min_p, over the k candidates top_k kept (in order from the
 * largest), each against the softmax at temperature 1 of those k; returns
 * how many are left. */
static int
top_p_min_p_sorted(const struct sampler_params *p, struct cand *c, int n)
{
	float max = c[0].logit, sum = 0.0f, cum = 0.0f;
	int keep = n;

	for (int i = 0; i < n; i++) {
		c[i].p = softmax_exp(c[i].logit - max);
		sum += c[i].p;
	}
	for (int i = 0; i < n; i++) {
		c[i].p /= sum;
		cum += c[i].p;
		if (cum >= p->top_p && i + 1 < keep) {
			keep = i + 1;
			break;
		}
	}
	for (int i = 1; i < keep; i++)
		if (c[i].p < p->min_p * c[0].p)
			return i;
	return keep;
}

int32_t
sampler_sample(struct sampler *s, const float *logits)
{
	const struct sampler_params *p = &s->p;
	int n = s->n_vocab, k = p->top_k > 0 && p->top_k < n ? p->top_k : n, m, nb;
	int unsorted = p->temperature > 0.0f && k == n && p->top_p >= 1.0f && p->min_p <= 0.0f;

	/* without penalties or a bias (the OpenAI defaults) the logits are the
	 * candidates */
	int plain = s->n_bias == 0 && p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
		    p->presence_penalty == 0.0f;
	const float *l = plain ? logits : penalized(s, logits);
	if (p->temperature <= 0.0f)
		return greedy(l, n, s->avx512);
	if (unsorted)
		return sample_unsorted(s, l, n);
	float max = logits_max(l, n, s->avx512);
	if (!(max > -INFINITY))
		return 0; /* every token masked */
	/* the filters' terms, at temperature 1 */
	float sum = softmax_terms(s, l, n, max, 1.0f, &nb);
	if (k < n)
		m = top_p_min_p_sorted(p, s->cand, filter_top_k(l, s->prob, n, k, s->cand));
	else
		m = filter_top_p(l, s->prob, n, sum, p->top_p, p->min_p, s->cand);
	/* temperature, renormalised over what is left */
	sum = 0.0f;
	for (int i = 0; i < m; i++) {
		s->cand[i].p = softmax_exp((s->cand[i].logit - max) / p->temperature);
		sum += s->cand[i].p;
	}
	float r = next_unit(&s->rng) * sum;
	for (int i = 0; i < m; i++) {
		r -= s->cand[i].p;
		if (r < 0.0f)
			return s->cand[i].id;
	}
	return s->cand[m - 1].id;
}
