/*
 * Element-wise kernels: exp over a row (attention's softmax a position at
 * a time) and SwiGLU, a[i] = silu(a[i]) * b[i] with silu(x) = x / (1 +
 * exp(-x)), the feed-forward's gate.
 *
 * SwiGLU was libm's expf a call an element: 4 % of the fixture model's
 * decode token, 9 % of a 1B-class prompt's GEMM time.  Its vector exp
 * here keeps within an ulp or so of libm's: a model run under tensor
 * parallel is checked against one rank to 1e-5, and a sloppier exp (a
 * Taylor series to r^6, 2e-7 relative) moved that drift from 2.9e-6 to
 * 1.2e-5 (docs/performance.md).
 */
#include <math.h>
#include <string.h>

#include "cpu_dot.h"

void
exp_f32_scalar(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = expf(x[i]);
}

void
swiglu_scalar(float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/*
 * exp(r) for |r| <= ln 2 / 2 by its Taylor series to r^7: the truncation
 * (r^8 / 8!) is under 6e-9 relative, below the float's half ulp, so the
 * result is within about an ulp of the true value.  x is clamped to
 * [-87, 88] so 2^k stays a normal float: below -87 the true value is
 * under 2e-38 (softmax weights that small do not count, and silu's
 * 1 + e^x is 1), above 88 silu's x / (1 + e^88) is 0 to 1e-36 where
 * libm's x / inf is -0.
 */
AVX2 static __m256
exp256(__m256 x)
{
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
	__m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(EXP_LN2_HI), x);
	r = _mm256_fnmadd_ps(k, _mm256_set1_ps(EXP_LN2_LO), r);
	__m256 p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 void
exp_f32_avx2(float *x, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, exp256(_mm256_loadu_ps(x + i)));
	if (i < n) {
		float t[8] = { 0 };
		memcpy(t, x + i, (n - i) * sizeof(float));
		_mm256_storeu_ps(t, exp256(_mm256_loadu_ps(t)));
		memcpy(x + i, t, (n - i) * sizeof(float));
	}
}

AVX2 static __m256
swiglu256(__m256 a, __m256 b)
{
	__m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), a));
	return _mm256_mul_ps(_mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), b);
}

/* The tail goes through the same vector code (padded), so that an
 * element's result does not depend on where a thread's range or a
 * tensor-parallel rank's slice ends. */
AVX2 void
swiglu_avx2(float *a, const float *b, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(a + i, swiglu256(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
	if (i < n) {
		float ta[8] = { 0 }, tb[8] = { 0 };
		memcpy(ta, a + i, (n - i) * sizeof(float));
		memcpy(tb, b + i, (n - i) * sizeof(float));
		_mm256_storeu_ps(ta, swiglu256(_mm256_loadu_ps(ta), _mm256_loadu_ps(tb)));
		memcpy(a + i, ta, (n - i) * sizeof(float));
	}
}
#endif
