/*
 * Engine pieces that need no fixtures: the sampler, the streaming
 * detokenizer, the thread pool, and the refusals a bad model or prompt gets
 * (unknown architecture and weight type named, context overflow).
 */
#include <math.h>
#include <stdatomic.h>
#include <unistd.h>

#include <sched.h>

#include "testlib.h"
#include "privai/gguf.h"
#include "privai/model.h"
#include "privai/sampler.h"
#include "privai/scheduler.h"
#include "privai/tensor_type.h"
#include "privai/threadpool.h"
#include "privai/tokenizer.h"
#include "sampler_filter.h"

/* Sampling without filters (the OpenAI defaults) at temperature t. */
static void
unfiltered(struct sampler_params *p, float t, uint64_t seed)
{
	sampler_params_default(p);
	p->temperature = t;
	p->top_k = 0;
	p->top_p = 1;
	p->min_p = 0;
	p->seed = seed;
}

static void
test_sampler(void)
{
	enum { V = 1000 };
	static float logits[V];
	struct sampler_params p;
	struct sampler *a, *b, *g;
	char err[PRIVAI_ERR_LEN];

	for (int i = 0; i < V; i++)
		logits[i] = (float)((i * 37) % 101) / 10.0f;
	logits[123] = 20;
	sampler_params_default(&p);
	p.temperature = 0;
	sampler_new(&p, V, &g);
	CHECK(sampler_sample(g, logits) == 123, "greedy is argmax");
	/* the vector path against the first-largest scan, on odd sizes, ties,
	 * -inf (masked tokens) and NaN */
	int agree = 0, cases = 0;
	for (int n = 1; n <= 201; n += 4)
		for (int round = 0; round < 20; round++) {
			struct sampler *gn;
			float l[204];
			for (int i = 0; i < n; i++)
				l[i] = (float)((i * 7 + round * 13) % 9); /* many ties */
			if (round % 5 == 4) /* one largest anywhere, a tie some places after */
				for (int i = 0, at = (round * 31 + n * 7) % n; i < n; i++)
					l[i] = i == at || i == at + 1 + round % 40 ? 9.5f : l[i];
			if (round % 5 == 1)
				for (int i = 0; i < n; i++)
					l[i] = -INFINITY;
			if (round % 5 == 2 && n >= 128) { /* a NaN in lane j of chain c of a 4-chain, 16-lane kernel */
				int c = round / 5 % 4, j = n % 16;
				l[16 * c + j] = 9.5f; /* the largest, which a NaN after it there must not hide */
				l[64 + 16 * c + j] = NAN;
			} else if (round % 5 == 2) {
				l[(round * 53 + n * 29) % n] = NAN;
			}
			if (round % 5 == 3)
				l[0] = NAN;
			int want = 0;
			for (int i = 1; i < n; i++)
				if (l[i] > l[want])
					want = i;
			sampler_new(&p, n, &gn);
			agree += sampler_sample(gn, l) == want;
			cases++;
			sampler_free(gn);
		}
	CHECK(agree == cases, "greedy takes the first largest logit, as a scan does (%d of %d)", agree, cases);
	p.repeat_penalty = 100;
	sampler_free(g);
	sampler_new(&p, V, &g);
	sampler_accept(g, 123);
	CHECK(sampler_sample(g, logits) != 123, "repeat penalty moves greedy off a repeated token");
	sampler_free(g);

	unfiltered(&p, 1.5f, 99);
	sampler_new(&p, V, &a);
	sampler_new(&p, V, &b);
	int same = 1, differs = 0;
	int32_t first[64];
	for (int i = 0; i < 64; i++) {
		first[i] = sampler_sample(a, logits);
		same &= first[i] == sampler_sample(b, logits);
	}
	CHECK(same, "same seed, same tokens");
	sampler_free(b);
	p.seed = 100;
	sampler_new(&p, V, &b);
	for (int i = 0; i < 64; i++)
		differs |= first[i] != sampler_sample(b, logits);
	CHECK(differs, "another seed, other tokens");
	sampler_reset(a);
	CHECK(sampler_sample(a, logits) == first[0], "reset restarts the stream");
	sampler_free(a);
	sampler_free(b);

	p.top_k = 1;
	sampler_new(&p, V, &a);
	CHECK(sampler_sample(a, logits) == 123, "top_k 1 is greedy");
	sampler_free(a);
	p.top_k = 0;
	p.min_p = 0.5f; /* 123 is e^10 more likely than anything else */
	sampler_new(&p, V, &a);
	int all = 1;
	for (int i = 0; i < 50; i++)
		all &= sampler_sample(a, logits) == 123;
	CHECK(all, "min_p cuts the tail");
	sampler_free(a);

	/* unfiltered sampling draws from the tempered softmax: frequencies of
	 * a 4-token distribution over 40000 draws, masked tokens never */
	{
		static const float l4[6] = { 0.0f, 1.0f, 2.0f, -INFINITY, 0.5f, -INFINITY };
		int cnt[6] = { 0 };
		unfiltered(&p, 0.7f, 5);
		sampler_new(&p, 6, &a);
		for (int i = 0; i < 40000; i++)
			cnt[sampler_sample(a, l4)]++;
		sampler_free(a);
		double z = 0, worst = 0;
		for (int i = 0; i < 6; i++)
			z += isinf(l4[i]) ? 0 : exp(l4[i] / 0.7);
		for (int i = 0; i < 6; i++) {
			double want = isinf(l4[i]) ? 0 : exp(l4[i] / 0.7) / z;
			worst = fmax(worst, fabs(cnt[i] / 40000.0 - want));
		}
		CHECK(cnt[3] == 0 && cnt[5] == 0 && worst < 0.01,
		      "unfiltered sampling follows softmax(l / T) (worst %.4f), never a masked token", worst);
	}

	/* the same over a vocabulary of 1003: the draw walks blocks of 64
	 * terms, most of them masked whole, then one block; the tokens sit
	 * at block edges (64, 127) and in the short last block (1002) */
	{
		enum { N = 1003 };
		static float lv[N];
		static const int ids[5] = { 5, 64, 127, 700, 1002 };
		static const float val[5] = { 0.0f, 1.0f, 2.0f, 0.5f, 1.5f };
		int cnt[5] = { 0 }, stray = 0;
		for (int i = 0; i < N; i++)
			lv[i] = -INFINITY;
		for (int k = 0; k < 5; k++)
			lv[ids[k]] = val[k];
		unfiltered(&p, 0.7f, 11);
		sampler_new(&p, N, &a);
		for (int i = 0; i < 40000; i++) {
			int32_t tk = sampler_sample(a, lv), k = 0;
			while (k < 5 && ids[k] != tk)
				k++;
			if (k < 5)
				cnt[k]++;
			else
				stray++;
		}
		sampler_free(a);
		double z = 0, worst = 0;
		for (int k = 0; k < 5; k++)
			z += exp(val[k] / 0.7);
		for (int k = 0; k < 5; k++)
			worst = fmax(worst, fabs(cnt[k] / 40000.0 - exp(val[k] / 0.7) / z));
		CHECK(stray == 0 && worst < 0.01,
		      "over 1003 tokens in blocks: softmax(l / T) (worst %.4f), %d masked drawn", worst, stray);
	}

	/* a constraint masks all but two tokens of an odd-sized vocabulary
	 * (the last one unmasked: the vector tail), the rest of the logits
	 * far apart: the draw never leaves the two */
	{
		enum { N = 1003 };
		static float lm[N];
		int outside = 0, cnt5 = 0;
		for (int i = 0; i < N; i++)
			lm[i] = -INFINITY;
		lm[5] = 3.0f;
		lm[N - 1] = 2.0f;
		unfiltered(&p, 1.0f, 7);
		sampler_new(&p, N, &a);
		for (int i = 0; i < 20000; i++) {
			int32_t t = sampler_sample(a, lm);
			outside += t != 5 && t != N - 1;
			cnt5 += t == 5;
		}
		sampler_free(a);
		double want = 1.0 / (1.0 + exp(-1.0)); /* e^3 / (e^3 + e^2) */
		CHECK(outside == 0 && fabs(cnt5 / 20000.0 - want) < 0.01,
		      "masked tokens are never drawn (%d were); token 5 %.4f of draws, softmax %.4f", outside,
		      cnt5 / 20000.0, want);
	}

	/* logit_bias: added to the logits before everything else (OpenAI's
	 * and vLLM's semantics); the sampler keeps its own copy */
	{
		int32_t ids[2] = { 123, 7 };
		float bias[2] = { -100.0f, 0.0f };
		sampler_params_default(&p);
		p.temperature = 0;
		p.logit_bias_ids = ids;
		p.logit_bias = bias;
		p.n_logit_bias = 2;
		sampler_new(&p, V, &a);
		ids[0] = 0; /* the caller's arrays may go */
		CHECK(sampler_sample(a, logits) != 123, "logit_bias -100 moves greedy off the argmax");
		sampler_free(a);
		ids[0] = 7;
		bias[0] = 100.0f;
		p.n_logit_bias = 1;
		sampler_new(&p, V, &a);
		CHECK(sampler_sample(a, logits) == 7, "logit_bias +100 makes token 7 the greedy choice");
		sampler_free(a);
		unfiltered(&p, 1.0f, 3);
		p.logit_bias_ids = ids;
		p.logit_bias = bias;
		p.n_logit_bias = 1;
		sampler_new(&p, V, &a);
		int all7 = 1;
		for (int i = 0; i < 50; i++)
			all7 &= sampler_sample(a, logits) == 7;
		CHECK(all7, "logit_bias +100 holds for unfiltered sampling too");
		sampler_free(a);
	}

	sampler_params_default(&p);
	p.top_p = 0;
	CHECK(sampler_params_validate(&p, err) < 0 && strstr(err, "top_p"), "top_p 0 refused");
	sampler_params_default(&p);
	p.temperature = -1;
	CHECK(sampler_params_validate(&p, err) < 0 && strstr(err, "temperature"), "negative temperature refused");
}

/* The reference for the filters: every candidate sorted (larger logits
 * first, equal ones by id), top_k, then top_p and min_p over the softmax
 * of what top_k kept, in doubles.  Fills order[] and returns how many
 * are kept; *lo and *hi how many a goal moved by 1e-5 of the mass would
 * keep (the filters sum in floats, in other orders). */
static const float *ref_logit;

static int
ref_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (ref_logit[x] != ref_logit[y])
		return ref_logit[x] < ref_logit[y] ? 1 : -1;
	return (x > y) - (x < y);
}

static int
ref_filter(const float *l, int n, int top_k, double top_p, double min_p, int *order, int *lo, int *hi)
{
	int m = 0;

	for (int i = 0; i < n; i++)
		if (l[i] > -INFINITY)
			order[m++] = i;
	ref_logit = l;
	qsort(order, (size_t)m, sizeof(*order), ref_cmp);
	if (top_k > 0 && top_k < m)
		m = top_k;
	double sum = 0, cum = 0, max = l[order[0]];
	for (int i = 0; i < m; i++)
		sum += exp((double)l[order[i]] - max);
	int keep[3] = { m, m, m };
	const double goal[3] = { top_p * sum, (top_p - 1e-5) * sum, (top_p + 1e-5) * sum };
	for (int i = 0; i < m; i++) {
		cum += exp((double)l[order[i]] - max);
		for (int g = 0; g < 3; g++)
			if (top_p < 1 && keep[g] == m && cum >= goal[g])
				keep[g] = i + 1;
	}
	for (int g = 0; g < 3; g++)
		for (int i = 1; i < keep[g]; i++)
			if (exp((double)l[order[i]] - max) < min_p) {
				keep[g] = i;
				break;
			}
	*lo = keep[1];
	*hi = keep[2];
	return keep[0];
}

/* Top-k and top-p without a sort of the vocabulary (sampler_filter.c)
 * against the reference: the same tokens kept, on odd sizes, ties,
 * masked tokens (-inf and NaN), flat and peaked logits, and every
 * filter alone and together; then draws that follow the nucleus. */
static void
test_sampler_filters(void)
{
	enum { NMAX = 5003 };
	static float l[NMAX], e[NMAX];
	static int order[NMAX];
	static struct cand out[NMAX];
	static const int sizes[] = { 1, 2, 17, 64, 65, 1000, NMAX };
	static const float spreads[] = { 0.3f, 2.0f, 6.0f, 40.0f };
	static const float top_ps[] = { 0.05f, 0.5f, 0.9f, 0.99f, 1.0f };
	static const float min_ps[] = { 0.0f, 0.05f, 0.5f };
	static const int top_ks[] = { 1, 5, 40, 999 };
	uint64_t st = 99;
	int cases = 0, same = 0, cases_k = 0, same_k = 0;

	for (unsigned si = 0; si < sizeof(sizes) / sizeof(*sizes); si++)
		for (unsigned sp = 0; sp < sizeof(spreads) / sizeof(*spreads); sp++)
			for (int variant = 0; variant < 4; variant++) {
				int n = sizes[si];
				float max = -INFINITY;
				for (int i = 0; i < n; i++) {
					st = st * 6364136223846793005ULL + 1442695040888963407ULL;
					float u = (float)(st >> 40) / 16777216.0f;
					l[i] = (u - 0.5f) * spreads[sp];
					if (variant == 1) /* many ties */
						l[i] = roundf(l[i]);
					if (variant == 2 && i % 3 == 1) /* a constraint's mask */
						l[i] = i % 6 == 1 ? -INFINITY : NAN;
					if (variant == 3 && i % 97 == 5) /* a few far ahead */
						l[i] += 12.0f;
				}
				if (variant == 2)
					l[0] = 0.25f; /* at least one token left */
				for (int i = 0; i < n; i++)
					max = l[i] > max ? l[i] : max;
				float sum = 0;
				for (int i = 0; i < n; i++) {
					float x = l[i] - max;
					e[i] = x >= -87.0f ? expf(x) : 0.0f; /* as the sampler's terms: NaN to 0 */
					sum += e[i];
				}
				for (unsigned pi = 0; pi < sizeof(top_ps) / sizeof(*top_ps); pi++)
					for (unsigned mi = 0; mi < sizeof(min_ps) / sizeof(*min_ps); mi++) {
						int lo, hi,
							want = ref_filter(l, n, 0, top_ps[pi], min_ps[mi], order, &lo,
									  &hi);
						int m = filter_top_p(l, e, n, sum, top_ps[pi], min_ps[mi], out);
						/* the same set: every kept token among the
						 * reference's first m, each once */
						int ok = m >= lo && m <= hi && m >= 1;
						for (int i = 0; ok && i < m; i++) {
							int at = 0;
							while (at < m && order[at] != out[i].id)
								at++;
							ok = at < m && out[i].logit == l[out[i].id] &&
							     out[i].p == e[out[i].id];
							for (int j = 0; ok && j < i; j++)
								ok = out[j].id != out[i].id;
						}
						if (!ok && cases - same < 3)
							fprintf(stderr,
								"  n %d spread %g variant %d top_p %g min_p %g: kept "
								"%d, "
								"reference %d (%d-%d)\n",
								n, spreads[sp], variant, top_ps[pi], min_ps[mi], m,
								want, lo, hi);
						cases++;
						same += ok;
					}
				for (unsigned ki = 0; ki < sizeof(top_ks) / sizeof(*top_ks); ki++) {
					int lo, hi, want = ref_filter(l, n, top_ks[ki], 1.0, 0.0, order, &lo, &hi);
					int m = filter_top_k(l, e, n, top_ks[ki], out);
					/* the same tokens in the same order */
					int ok = m == want;
					for (int i = 0; ok && i < m; i++)
						ok = out[i].id == order[i] && out[i].logit == l[order[i]];
					if (!ok && cases_k - same_k < 3)
						fprintf(stderr,
							"  n %d spread %g variant %d top_k %d: kept %d, reference %d\n",
							n, spreads[sp], variant, top_ks[ki], m, want);
					cases_k++;
					same_k += ok;
				}
			}
	CHECK(same == cases, "top_p and min_p keep the reference's tokens (%d of %d cases)", same, cases);
	CHECK(same_k == cases_k, "top_k keeps the reference's tokens in its order (%d of %d cases)", same_k, cases_k);

	/* draws: six tokens ahead of 4997 others; top_p 0.8 keeps the first
	 * three of them (softmax at temperature 1: 0.50, 0.30, 0.11, then
	 * 0.04 ...), and they are drawn at temperature 0.7 renormalised */
	{
		static const float head[6] = { 8.0f, 7.5f, 6.5f, 5.5f, 5.4f, 5.3f };
		struct sampler_params p;
		struct sampler *a;
		int cnt[3] = { 0 }, outside = 0;
		double z = 0, worst = 0, tail = 0;
		for (int i = 0; i < NMAX; i++)
			l[i] = (float)(i % 13) * 0.1f - 4.0f; /* [-4, -2.8] */
		for (int i = 0; i < 6; i++)
			l[800 * i + 7] = head[i];
		for (int i = 0; i < NMAX; i++)
			tail += exp(l[i] - 8.0);
		double first3 = (exp(0) + exp(-0.5) + exp(-1.5)) / tail, first2 = (exp(0) + exp(-0.5)) / tail;
		unfiltered(&p, 0.7f, 21);
		p.top_p = 0.8f;
		sampler_new(&p, NMAX, &a);
		for (int i = 0; i < 40000; i++) {
			int32_t t = sampler_sample(a, l);
			if (t == 7 || t == 807 || t == 1607)
				cnt[t / 800]++;
			else
				outside++;
		}
		sampler_free(a);
		for (int i = 0; i < 3; i++)
			z += exp(head[i] / 0.7);
		for (int i = 0; i < 3; i++)
			worst = fmax(worst, fabs(cnt[i] / 40000.0 - exp(head[i] / 0.7) / z));
		CHECK(first2 < 0.8 && first3 >= 0.8 && outside == 0 && worst < 0.01,
		      "top_p 0.8 draws the nucleus of 3 (mass %.3f) at temperature 0.7 (worst %.4f), %d outside",
		      first3, worst, outside);
	}
}

/* logits_log_sum_exp and logits_top_n against double precision and a
 * full sort (larger first, equal ones by id, NaN last), on odd sizes,
 * ties, -inf and NaN. */
static int
rank_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	float lx = ref_logit[x], ly = ref_logit[y];

	if (isnan(lx) != isnan(ly))
		return isnan(lx) ? 1 : -1;
	if (!isnan(lx) && lx != ly)
		return lx < ly ? 1 : -1;
	return (x > y) - (x < y);
}

static void
test_logprob_helpers(void)
{
	enum { NMAX = 32003 };
	static float l[NMAX];
	static int order[NMAX];
	static const int sizes[] = { 1, 2, 15, 16, 17, 1023, 1025, NMAX };
	uint64_t st = 7;
	int cases = 0, lse_ok = 0, top_ok = 0;
	double worst = 0;

	for (unsigned si = 0; si < sizeof(sizes) / sizeof(*sizes); si++)
		for (int variant = 0; variant < 4; variant++) {
			int n = sizes[si];
			for (int i = 0; i < n; i++) {
				st = st * 6364136223846793005ULL + 1442695040888963407ULL;
				l[i] = ((float)(st >> 40) / 16777216.0f - 0.5f) * 30.0f;
				if (variant == 1)
					l[i] = roundf(l[i] / 5.0f); /* ties */
				if (variant == 2 && i % 5 == 3)
					l[i] = i % 10 == 3 ? -INFINITY : NAN;
				if (variant == 3 && i % 7 == 0)
					l[i] -= 200.0f; /* terms under e^-87 */
			}
			double max = -INFINITY, sum = 1.0; /* the largest's term, exp(0) */
			int at_max = -1;
			for (int i = 0; i < n; i++)
				if (l[i] > max) {
					max = l[i];
					at_max = i;
				}
			for (int i = 0; i < n; i++)
				sum += isnan(l[i]) || i == at_max ? 0.0 : exp((double)l[i] - max);
			double want = max + log(sum), got = logits_log_sum_exp(l, n);
			double err = fabs(got - want) / fmax(1.0, fabs(want));
			worst = fmax(worst, err);
			lse_ok += err < 1e-6;
			for (int i = 0; i < n; i++)
				order[i] = i;
			ref_logit = l;
			qsort(order, (size_t)n, sizeof(*order), rank_cmp);
			int32_t ids[SCHED_TOP_MAX];
			int k = n < SCHED_TOP_MAX ? n : SCHED_TOP_MAX, same = 1;
			logits_top_n(l, n, k, ids);
			for (int i = 0; i < k; i++)
				same &= ids[i] == order[i];
			ids[0] = -7;
			logits_top_n(l, n, 0, ids); /* none asked: nothing read or written */
			top_ok += same && ids[0] == -7;
			cases++;
		}
	CHECK(lse_ok == cases, "log-sum-exp within 1e-6 of double precision in %d of %d cases (worst %.2e)", lse_ok,
	      cases, worst);
	CHECK(top_ok == cases, "the top 20 logits in a full sort's order in %d of %d cases", top_ok, cases);
}

/* The unfiltered draw on AVX-512 and in portable vectors: with the same
 * seed over the same 32000 logits they draw the same tokens, but where a
 * draw falls within the two's rounding of a boundary (1 or 2 of 20000
 * here; the polynomial's 1/6 made 1/6.05, terms off by 6e-5, moved 45 and
 * 61, its 1/720 term dropped 11 and 23). */
static void
test_draw_paths(void)
{
	enum { N = 32000, DRAWS = 20000 };
	static float l[N];
	static int32_t first[DRAWS];
	struct sampler_params p;
	struct sampler *a;
	uint64_t st = 12345;

	for (int i = 0; i < N; i++) {
		st = st * 6364136223846793005ULL + 1442695040888963407ULL;
		l[i] = (float)(st >> 40) / 16777216.0f * 24.0f - 12.0f; /* [-12, 12) */
	}
	l[17] = -INFINITY;
	for (int k = 0; k < 2; k++) {
		float t = k == 0 ? 1.0f : 0.7f;
		int same = 0, masked = 0;
		for (int path = 0; path < 2; path++) {
			if (path == 1)
				setenv("PRIVAI_SIMD", "avx2", 1);
			unfiltered(&p, t, 99);
			sampler_new(&p, N, &a);
			for (int i = 0; i < DRAWS; i++) {
				int32_t tk = sampler_sample(a, l);
				masked += tk == 17;
				if (path == 0)
					first[i] = tk;
				else
					same += tk == first[i];
			}
			sampler_free(a);
			unsetenv("PRIVAI_SIMD");
		}
		CHECK(masked == 0 && same >= DRAWS - DRAWS / 4000,
		      "temperature %.1f: the two draw kernels agree on %d of %d draws", t, same, DRAWS);
	}
}

static void
job(void *ctx, int ith, int nth)
{
	atomic_int *sum = ctx;

	atomic_fetch_add(sum, ith + 1 + 100 * nth);
}

/* Part 0 waits until every other part is done: under a fixed share per
 * thread it would wait on parts queued behind it on its own thread and
 * never finish; with parts handed out as threads come free it does. */
struct waiter {
	atomic_int done, bad_self, gave_up;
	int n_threads;
};

static void
wait_for_others(void *ctx, int ith, int nth)
{
	struct waiter *w = ctx;
	int self = threadpool_self();

	if (self < 0 || self >= w->n_threads)
		atomic_store(&w->bad_self, 1);
	if (ith == 0) {
		/* a deadlock guard, not a timing: 10 s is far beyond any schedule */
		for (int i = 0; i < 10000 && atomic_load(&w->done) < nth - 1; i++)
			usleep(1000);
		atomic_store(&w->gave_up, atomic_load(&w->done) < nth - 1);
		return;
	}
	atomic_fetch_add(&w->done, 1);
}

/* Each thread's first part, with no thread taking a second before every
 * thread has taken one: each starts on its own run. */
struct first_parts {
	atomic_int arrived;
	int n_threads, first[8];
};

static void
record_first(void *ctx, int ith, int nth)
{
	struct first_parts *f = ctx;
	int self = threadpool_self();

	(void)nth;
	if (self < 0 || self >= f->n_threads || f->first[self] >= 0)
		return;
	f->first[self] = ith;
	atomic_fetch_add(&f->arrived, 1);
	/* a deadlock guard, not a timing: 10 s is far beyond any schedule */
	for (int i = 0; i < 10000 && atomic_load(&f->arrived) < f->n_threads; i++)
		usleep(1000);
}

static void
test_threadpool_runs(void)
{
	struct threadpool *p;
	struct first_parts f = { .n_threads = 3 };

	CHECK(threadpool_new(3, &p) == 0, "pool of 3");
	CHECK(threadpool_parts(p) == 3 * THREADPOOL_PARTS_PER_THREAD, "a run of parts a thread (%d parts)",
	      threadpool_parts(p));
	for (int t = 0; t < 3; t++)
		f.first[t] = -1;
	threadpool_run(p, record_first, &f);
	for (int t = 0; t < 3; t++)
		CHECK(f.first[t] == t * THREADPOOL_PARTS_PER_THREAD, "thread %d started on its own run: part %d", t,
		      f.first[t]);
	threadpool_free(p);
}

static void
test_threadpool(void)
{
	struct threadpool *p;
	atomic_int sum = 0;

	CHECK(threadpool_new(3, &p) == 0, "pool of 3");
	int parts = threadpool_parts(p), want = 0;
	for (int i = 0; i < parts; i++)
		want += i + 1 + 100 * parts;
	CHECK(parts >= 3, "a job is cut into at least a part per thread (%d)", parts);
	for (int i = 0; i < 2000; i++)
		threadpool_run(p, job, &sum);
	CHECK(atomic_load(&sum) == 2000 * want, "every part of every job ran once");
	struct timespec c0, c1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	usleep(300000); /* let workers fall asleep, then wake them */
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	double idle_cpu = (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
	/* two workers spinning through the 0.3 s would use 0.6 s of CPU */
	CHECK(idle_cpu < 0.1, "an idle pool's workers sleep: %.3f s of CPU in 0.3 s", idle_cpu);
	threadpool_run(p, job, &sum);
	CHECK(atomic_load(&sum) == 2001 * want, "sleeping workers wake");
	struct waiter w = { .n_threads = 3 };
	threadpool_run(p, wait_for_others, &w);
	CHECK(atomic_load(&w.done) == parts - 1 && !atomic_load(&w.gave_up),
	      "parts go to free threads, its own run's too: one part waited on all the others (%d of %d)",
	      atomic_load(&w.done), parts - 1);
	CHECK(!atomic_load(&w.bad_self), "threadpool_self() names a thread of the pool");
	threadpool_free(p);
	CHECK(threadpool_new(0, &p) == PRIVAI_EINVAL, "zero threads refused");
	int n = threadpool_default_threads();
	cpu_set_t set;
	CHECK(sched_getaffinity(0, sizeof(set), &set) == 0 && n >= 1 && n <= CPU_COUNT(&set),
	      "the default pool fits the CPUs this process may use (%d of %d)", n, CPU_COUNT(&set));
}

/* A tiny model written with the writer, with one thing varied. */
static int
write_model(const char *path, const char *arch, uint32_t wtype)
{
	struct gguf_writer *w;
	char err[PRIVAI_ERR_LEN], name[64];
	const char *toks[260];
	char bytes[256][8];
	int32_t types[260];
	float scores[260] = { 0 };
	int r = 0, dim = 64, ff = 128, V = 260;

	gguf_writer_new(&w);
	r |= gguf_writer_set_str(w, "general.architecture", arch);
	snprintf(name, sizeof(name), "%s.embedding_length", arch);
	r |= gguf_writer_set_u32(w, name, (uint32_t)dim);
	snprintf(name, sizeof(name), "%s.block_count", arch);
	r |= gguf_writer_set_u32(w, name, 1);
	snprintf(name, sizeof(name), "%s.attention.head_count", arch);
	r |= gguf_writer_set_u32(w, name, 4);
	snprintf(name, sizeof(name), "%s.feed_forward_length", arch);
	r |= gguf_writer_set_u32(w, name, (uint32_t)ff);
	snprintf(name, sizeof(name), "%s.context_length", arch);
	r |= gguf_writer_set_u32(w, name, 32);
	toks[0] = "<unk>";
	toks[1] = "<s>";
	toks[2] = "</s>";
	toks[3] = "\xe2\x96\x81";
	types[0] = 2;
	types[1] = types[2] = 3;
	types[3] = 1;
	for (int i = 0; i < 256; i++) {
		snprintf(bytes[i], 8, "<0x%02X>", i);
		toks[4 + i] = bytes[i];
		types[4 + i] = 6;
	}
	r |= gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
	r |= gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, toks, (uint64_t)V);
	r |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, (uint64_t)V);
	r |= gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, (uint64_t)V);
	static float buf[260 * 128];
	static uint8_t q[260 * 128 * 4];
	for (size_t i = 0; i < sizeof(buf) / sizeof(buf[0]); i++)
		buf[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
	struct {
		const char *n;
		int cols, rows;
	} mats[] = {
		{ "token_embd.weight", dim, V },          { "blk.0.attn_q.weight", dim, dim },
		{ "blk.0.attn_k.weight", dim, dim },      { "blk.0.attn_v.weight", dim, dim },
		{ "blk.0.attn_output.weight", dim, dim }, { "blk.0.ffn_gate.weight", dim, ff },
		{ "blk.0.ffn_up.weight", dim, ff },       { "blk.0.ffn_down.weight", ff, dim },
	};
	for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
		uint64_t ne[2] = { (uint64_t)mats[i].cols, (uint64_t)mats[i].rows };
		uint32_t t = i == 1 ? wtype : TT_F32;
		if (t == TT_F32)
			r |= gguf_writer_add_tensor(w, mats[i].n, t, 2, ne, buf);
		else /* bytes of any (even unsupported) type: the loader must refuse by name */
			r |= gguf_writer_add_tensor(w, mats[i].n, t, 2, ne, q);
	}
	uint64_t ne1[1] = { (uint64_t)dim };
	r |= gguf_writer_add_tensor(w, "output_norm.weight", TT_F32, 1, ne1, buf);
	r |= gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", TT_F32, 1, ne1, buf);
	r |= gguf_writer_add_tensor(w, "blk.0.ffn_norm.weight", TT_F32, 1, ne1, buf);
	if (r == 0)
		r = gguf_writer_write(w, path, err);
	gguf_writer_free(w);
	return r;
}

static void
test_model_errors(void)
{
	char path[256], err[PRIVAI_ERR_LEN];
	struct engine_model *m = NULL;
	struct engine_ctx *c = NULL;

	snprintf(path, sizeof(path), "/tmp/privai-test-model-%d.gguf", (int)getpid());
	CHECK(write_model(path, "mamba", TT_F32) == 0, "wrote model");
	CHECK(engine_model_load(path, &m, err) == PRIVAI_EUNSUPPORTED && strstr(err, "'mamba'"),
	      "unknown architecture named: %s", err);
	CHECK(write_model(path, "llama", TT_MXFP4) == 0, "wrote model");
	CHECK(engine_model_load(path, &m, err) == PRIVAI_EUNSUPPORTED && strstr(err, "MXFP4"),
	      "unsupported type named: %s", err);
	CHECK(write_model(path, "llama", TT_F32) == 0, "wrote model");
	int r = engine_model_load(path, &m, err);
	CHECK(r == 0, "tiny model loads: %s", err);
	if (r == 0) {
		struct engine_ctx_params cp = { .n_ctx = 16, .n_threads = 2 };
		int32_t toks[20] = { 1, 5, 6, 7 };
		float logits[260];
		CHECK(engine_ctx_new(m, &cp, &c, err) == 0, "context");
		CHECK(engine_decode(c, toks, 20, 0, logits, err) == PRIVAI_ERANGE && strstr(err, "context"),
		      "prompt longer than the context refused: %s", err);
		struct engine_ctx_info ci;
		engine_ctx_info(c, &ci);
		CHECK(ci.n_past == 0, "a refused prompt leaves the cache alone");
		CHECK(strcmp(ci.device, "cpu") == 0 && ci.n_threads == 2 && ci.n_ctx == 16 && ci.n_kv_blocks == 1,
		      "the context says what it was made of: %s, %d threads, %d positions, %d blocks", ci.device,
		      ci.n_threads, ci.n_ctx, ci.n_kv_blocks);
		CHECK(ci.kv_bytes == 2 * (size_t)m->hp.n_layer * ENGINE_KV_BLOCK * m->hp.n_head_kv * m->hp.head_dim * 2,
		      "a half-precision KV cache of one block per layer: %zu bytes", ci.kv_bytes);
		toks[1] = 9999;
		CHECK(engine_decode(c, toks, 4, 0, logits, err) == PRIVAI_EINVAL && strstr(err, "9999"),
		      "token id outside the vocabulary refused");
		toks[1] = 5;
		CHECK(engine_decode(c, toks, 4, 0, logits, err) == 0, "decode 4");
		CHECK(engine_decode(c, toks, 13, 0, logits, err) == PRIVAI_ERANGE, "overflow after 4 used");
		int32_t pos0 = 4, row0 = 0;
		const int32_t *tab[1] = { (const int32_t[]){ 0 } };
		struct compute_batch b = {
			.n = 1, .tokens = toks, .pos = &pos0, .table = tab, .n_out = 1, .out_rows = &row0
		};
		CHECK(engine_forward(c, &b, NULL, err) == PRIVAI_EINVAL && strstr(err, "without a buffer"),
		      "logits asked for with nowhere to put them refused: %s", err);
		engine_ctx_free(c);

		/* a backend is chosen by name: one that cannot run here says why,
		 * the same reason its probe gives; an unknown one is named */
		char why[PRIVAI_ERR_LEN], info[128];
		int probe = compute_probe("cuda", info, why);
		cp.device = "cuda";
		int rc = engine_ctx_new(m, &cp, &c, err);
		if (probe == PRIVAI_OK) {
			CHECK(rc == PRIVAI_OK, "a context on the CUDA device (%s): %s", info, err);
			engine_ctx_free(c);
		} else {
			CHECK(rc == PRIVAI_EUNAVAIL && strcmp(err, why) == 0,
			      "no CUDA here, and the context says why as the probe does: %s", err);
		}
		cp.device = NULL;
		cp.mem_fraction = 1.5;
		CHECK(engine_ctx_new(m, &cp, &c, err) == PRIVAI_EINVAL && strstr(err, "0 to 1"),
		      "a memory share above 1 refused: %s", err);
		cp.mem_fraction = 0.5;
		CHECK(engine_ctx_new(m, &cp, &c, err) == PRIVAI_OK, "a memory share on the CPU: %s", err);
		if (c != NULL) {
			engine_ctx_info(c, &ci);
			CHECK(ci.mem_total == 0 && ci.mem_budget == 0 && ci.n_kv_blocks == 1,
			      "the CPU has no budget: one sequence's blocks (%d)", ci.n_kv_blocks);
			engine_ctx_free(c);
			c = NULL;
		}
		cp.mem_fraction = 0;
		cp.device = "tpu";
		CHECK(engine_ctx_new(m, &cp, &c, err) == PRIVAI_EUNSUPPORTED && strstr(err, "'tpu'"),
		      "an unknown backend refused by name: %s", err);
		engine_model_free(m);
	}
	CHECK(engine_model_load("/nonexistent/model.gguf", &m, err) == PRIVAI_EIO && strstr(err, "No such file"),
	      "missing file named: %s", err);
	unlink(path);
}

static void
test_stream(void)
{
	/* The demo-like vocab above has only byte tokens for non-ASCII text:
	 * a multi-byte character arrives one byte per token. */
	char path[256], err[PRIVAI_ERR_LEN], out[256], all[256] = "";
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	const char *text = "Привет 世界 🚀";
	int32_t *ids = NULL;
	int n = 0, broken = 0;
	struct detok_stream ds = { 0 };

	snprintf(path, sizeof(path), "/tmp/privai-test-stream-%d.gguf", (int)getpid());
	write_model(path, "llama", TT_F32);
	if (gguf_open(path, &f, err) < 0 || tokenizer_load(f, &t, err) < 0) {
		CHECK(0, "stream vocab: %s", err);
		goto out;
	}
	CHECK(tokenizer_encode(t, text, strlen(text), 0, 0, &ids, &n, err) == 0 && n > 20,
	      "byte fallback gives one token per byte (%d)", n);
	for (int i = 0; i < n; i++) {
		int len = detok_stream_push(&ds, t, ids[i], out, sizeof(out));
		for (int k = 0; k < len; k++) /* a piece never ends inside a character */
			broken += k == len - 1 && ((unsigned char)out[k] & 0xc0) == 0xc0;
		strncat(all, out, (size_t)len);
	}
	int len = detok_stream_flush(&ds, out, sizeof(out));
	strncat(all, out, (size_t)len);
	CHECK(broken == 0, "no piece ends in a partial UTF-8 sequence");
	CHECK(strcmp(all + 1, text) == 0 && all[0] == ' ', "stream reassembles the text: '%s'", all);
	/* an invalid byte sequence comes out as U+FFFD, never raw */
	struct detok_stream bad = { 0 };
	len = detok_stream_push(&bad, t, 4 + 0xe4, out, sizeof(out)); /* lead byte of 3 */
	CHECK(len == 0, "lead byte held back");
	len = detok_stream_push(&bad, t, 4 + 'A', out, sizeof(out));
	CHECK(len == 4 && memcmp(out,
				 "\xef\xbf\xbd"
				 "A",
				 4) == 0,
	      "broken sequence becomes U+FFFD");
	CHECK(tokenizer_encode(t, "a\xff", 2, 0, 0, &ids, &n, err) == PRIVAI_EINVAL && strstr(err, "offset 1"),
	      "invalid UTF-8 input refused with its offset");
out:
	free(ids);
	tokenizer_free(t);
	gguf_close(f);
	unlink(path);
}

int
main(void)
{
	test_sampler(); /* the unfiltered draw on AVX-512 where the CPU has it */
	setenv("PRIVAI_SIMD", "avx2", 1);
	test_sampler(); /* and in portable vectors */
	unsetenv("PRIVAI_SIMD");
	test_draw_paths();
	test_sampler_filters();
	test_logprob_helpers();
	test_threadpool();
	test_threadpool_runs();
	test_model_errors();
	test_stream();
	return test_summary();
}
