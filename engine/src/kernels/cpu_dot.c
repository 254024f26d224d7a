/*
 * Scalar, AVX2 and AVX-512 (VNNI) versions of the dot kernels.  The SIMD
 * versions are compiled with per-function target attributes so one binary
 * runs everywhere; cpu_kernels_get() picks by __builtin_cpu_supports.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "privai/compute.h"
#include "privai/tensor_type.h"
#include "cpu_dot.h"

/* ---------------------------------------------------------------- scalar */

static float
dot_f32_scalar(const float *a, const float *b, size_t n)
{
	float s[8] = { 0 };
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	for (; i < n; i++)
		s[0] += a[i] * b[i];
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static float
dot_f16_scalar(const uint16_t *w, const float *x, size_t n)
{
	float s = 0.0f;

	for (size_t i = 0; i < n; i++)
		s += fp16_to_f32(w[i]) * x[i];
	return s;
}

static void
f16_to_f32_scalar(const uint16_t *src, float *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = fp16_to_f32(src[i]);
}

static float
dot_bf16_scalar(const uint16_t *w, const float *x, size_t n)
{
	float s = 0.0f;

	for (size_t i = 0; i < n; i++)
		s += bf16_to_f32(w[i]) * x[i];
	return s;
}

static void
bf16_to_f32_scalar(const uint16_t *src, float *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_to_f32(src[i]);
}

static void
quantize_q8_scalar(const float *x, struct block_q8 *out, size_t n)
{
	for (size_t b = 0; b < n / 32; b++, x += 32) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		int32_t sum = 0;
		for (int j = 0; j < 32; j++) {
			out[b].q[j] = (int8_t)lrintf(x[j] * id);
			sum += out[b].q[j];
		}
		out[b].d = d;
		out[b].sum = sum;
	}
}

static float
dot_q8_0_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nb; i++, b += 34) {
		const int8_t *q = (const int8_t *)(b + 2);
		int32_t acc = 0;
		for (int j = 0; j < 32; j++)
			acc += q[j] * x[i].q[j];
		s += f16_at(b) * x[i].d * (float)acc;
	}
	return s;
}

static float
dot_q4_0_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nb; i++, b += 18) {
		const uint8_t *q = b + 2;
		int32_t acc = 0;
		for (int j = 0; j < 16; j++)
			acc += (q[j] & 0xf) * x[i].q[j] + (q[j] >> 4) * x[i].q[j + 16];
		s += f16_at(b) * x[i].d * (float)(acc - 8 * x[i].sum);
	}
	return s;
}

static const struct cpu_kernels k_scalar = {
	"scalar",
	dot_f32_scalar,
	dot_f16_scalar,
	f16_to_f32_scalar,
	quantize_q8_scalar,
	dot_q8_0_scalar,
	dot_q4_0_scalar,
	dot_q4_k_scalar,
	dot_q6_k_scalar,
	NULL,
	NULL,
	NULL,
	NULL,
	dot_bf16_scalar,
	bf16_to_f32_scalar,
	f32_to_f16_scalar,
	axpy_f16_scalar,
	exp_f32_scalar,
	widen_q4_0_scalar,
	widen_q4_k_scalar,
	widen_q6_k_scalar,
	NULL,
	dot_q5_k_scalar,
	widen_q5_k_scalar,
	NULL,
	NULL,
	NULL, /* no Q4_0 repack: the file's layout */
	NULL,
	NULL,
	NULL,
	quantize_q8k_scalar,
	dot_q6_k_q8k_scalar,
	att_scores_tile_scalar,
	NULL, /* attention's values a position at a time */
	NULL,
	NULL, /* the row-tile float GEMM */
	NULL,
	dot_q4_k_q8k_scalar,
	dot_q5_k_q8k_scalar,
	NULL, /* no Q4_K/Q5_K repack: the file's layout */
	kx8_repack,
	NULL,
	NULL, /* no Q8_0 repack: the file's layout */
	NULL,
	NULL, /* Q6_K batches: a dot per token */
	NULL, /* F16 decode: a row at a time */
	NULL, /* bfloat16 decode: a row at a time */
	0,
	NULL, /* no packed GEMM */
	NULL,
	0, /* vdpbf16ps not measured */
	NULL,
	NULL,
	NULL, /* no AMX */
	NULL,
	NULL,
	NULL,
	NULL,
	0,
	NULL,
	NULL,
	NULL,
	NULL, /* no Q6_K repack: the file's layout */
	NULL,
	swiglu_scalar,
	dot_q2_k_q8k_scalar,
	dot_q3_k_q8k_scalar,
	widen_q3_k_scalar,
	dot_iq4_xs_q8k_scalar,
	widen_iq4_xs_scalar,
	dot_q4_1_scalar,
	dot_q5_0_scalar,
	dot_q5_1_scalar,
	dot_iq4_nl_scalar,
	widen_legacy_scalar,
	NULL, /* no IQ4_XS repack: the file's layout */
	NULL,
	NULL, /* nor Q3_K */
	NULL,
	NULL, /* nor Q2_K */
	NULL,
	NULL, /* nor IQ4_NL */
	widen_iq4_nl_scalar,
	NULL, /* nor Q4_1, Q5_0, Q5_1 */
	NULL,
	NULL,
	widen_legacy_x8_scalar,
	NULL, /* no pairs of tokens a vector */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
};

void
q8_tile_pack(const struct block_q8 *x, int nt, size_t nb, struct q8_tile *out)
{
	for (size_t b = 0; b < nb; b++) {
		struct q8_tile *t = &out[b];
		for (int j = 0; j < GEMM_TOKENS; j++) {
			const struct block_q8 *src = j < nt ? &x[(size_t)j * nb + b] : NULL;
			t->d[j] = src ? src->d : 0.0f;
			t->dsum[j] = src ? src->d * (float)src->sum : 0.0f;
			for (int s = 0; s < 8; s++)
				for (int k = 0; k < 4; k++)
					t->q[s][4 * j + k] = (uint8_t)((src ? src->q[4 * s + k] : 0) + 128);
		}
	}
}

void
q8_tile8_pack(const struct block_q8 *x, int nt, size_t nb, struct q8_tile8 *out)
{
	for (size_t b = 0; b < nb; b++) {
		struct q8_tile8 *t = &out[b];
		for (int j = 0; j < GEMM8_TOKENS; j++) {
			const struct block_q8 *src = j < nt ? &x[(size_t)j * nb + b] : NULL;
			t->d[j] = src ? src->d : 0.0f;
			for (int s = 0; s < 8; s++)
				for (int k = 0; k < 4; k++)
					t->q[s][4 * j + k] = (uint8_t)((src ? src->q[4 * s + k] : 0) + 128);
		}
	}
}

/* The token in place u (0, 1) of pair p: an odd count's last pair holds
 * its token twice */
static int
pair_token(int p, int u, int nt)
{
	return 2 * p + u < nt ? 2 * p + u : 2 * p;
}

/* units 4-byte units of one token's values into place u of a pair's */
static void
pair_units(int8_t *dst, const int8_t *src, int units, int u)
{
	for (int s = 0; s < units; s++)
		memcpy(dst + 8 * s + 4 * u, src + 4 * s, 4);
}

void
q8_pair_pack(const struct block_q8 *x, int nt, size_t nb, struct q8_pair *out)
{
	for (int p = 0; p < (nt + 1) / 2; p++)
		for (size_t b = 0; b < nb; b++)
			for (int u = 0; u < 2; u++) {
				const struct block_q8 *src = &x[(size_t)pair_token(p, u, nt) * nb + b];
				struct q8_pair *o = &out[(size_t)p * nb + b];
				o->d[u] = src->d;
				o->sum[u] = src->sum;
				pair_units(o->q, src->q, 8, u);
			}
}

void
q8k_pair_pack(const struct block_q8k *x, int nt, size_t nsb, struct q8k_pair *out)
{
	for (int p = 0; p < (nt + 1) / 2; p++)
		for (size_t b = 0; b < nsb; b++)
			for (int u = 0; u < 2; u++) {
				const struct block_q8k *src = &x[(size_t)pair_token(p, u, nt) * nsb + b];
				struct q8k_pair *o = &out[(size_t)p * nsb + b];
				o->d[u] = src->d;
				for (int j = 0; j < 8; j++) /* sub-block j's two 16-value sums */
					memcpy(o->bsum + 4 * j + 2 * u, src->bsum + 2 * j, 2 * sizeof(int16_t));
				pair_units(o->q, src->q, 64, u);
			}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* ------------------------------------------------------------------ AVX2 */

AVX2 static float
dot_f32_avx2(const float *a, const float *b, size_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
	}
	float s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* The values of an F16 dot past its last whole vector, added to s one at
 * a time: the one-row and four-row dots share it, so a row gets the same
 * bits from either. */
AVX2 static inline float
dot_f16_tail(const uint16_t *w, const float *x, size_t i, size_t n, float s)
{
	for (; i < n; i++)
		s += _cvtsh_ss(w[i]) * x[i];
	return s;
}

AVX2 static float
dot_f16_avx2(const uint16_t *w, const float *x, size_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(x + i),
				     s0);
		s1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))),
				     _mm256_loadu_ps(x + i + 8), s1);
	}
	return dot_f16_tail(w, x, i, n, hsum256(_mm256_add_ps(s0, s1)));
}

/* Four F16 rows times one token: the token's floats are loaded once for
 * the four.  A row at a time, a ffn_down token (8192 floats, 32 KB: all
 * of L1 on many cores) was reloaded from L2 for every row: F16 decode
 * read 63-67 % of the bandwidth bound, 76-77 % with this
 * (docs/performance.md).  Each row sums as dot_f16_avx2 does, so a row
 * gets the same bits either way.
 *
 * The caller walks a matrix four rows at a time, so each line read here
 * asks for the same place in the next four rows, into L2 (a group is 16
 * to 64 KB ahead, past L1): the hardware prefetcher follows four streams
 * badly and stops at every 4 KB page.  F16 decode went from 77-81 % of
 * the bound to 96 % on an Emerald Rapids Xeon. */
AVX2 static void
dot4_f16_avx2(const uint16_t *w, size_t ldw, const float *x, size_t n, float *y)
{
	__m256 s[4][2];
	size_t i = 0;

	for (int r = 0; r < 4; r++)
		s[r][0] = s[r][1] = _mm256_setzero_ps();
	for (; i + 16 <= n; i += 16) {
		__m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			const uint16_t *wr = w + (size_t)r * ldw + i;
			if ((i & 31) == 0) /* a line is 32 values */
				ROWS_PREFETCH(wr + 4 * ldw);
			s[r][0] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wr)), x0, s[r][0]);
			s[r][1] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wr + 8))), x1,
						  s[r][1]);
		}
	}
	for (int r = 0; r < 4; r++)
		y[r] = dot_f16_tail(w + (size_t)r * ldw, x, i, n, hsum256(_mm256_add_ps(s[r][0], s[r][1])));
}

AVX2 static __m256
bf16x8_avx2(const uint16_t *p)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

AVX2 static float
dot_bf16_avx2(const uint16_t *w, const float *x, size_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		/* decode's rows follow each other: one stream (as dot_q8_0_avx2) */
		if ((i & 31) == 0)
			STREAM_PREFETCH(w + i, 1);
		s0 = _mm256_fmadd_ps(bf16x8_avx2(w + i), _mm256_loadu_ps(x + i), s0);
		s1 = _mm256_fmadd_ps(bf16x8_avx2(w + i + 8), _mm256_loadu_ps(x + i + 8), s1);
	}
	s0 = _mm256_add_ps(s0, s1);
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	h = _mm_add_ss(h, _mm_movehdup_ps(h));
	float s = _mm_cvtss_f32(h);
	for (; i < n; i++)
		s += bf16_to_f32(w[i]) * x[i];
	return s;
}

AVX2 static void
bf16_to_f32_avx2(const uint16_t *src, float *dst, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, bf16x8_avx2(src + i));
	for (; i < n; i++)
		dst[i] = bf16_to_f32(src[i]);
}

AVX2 static void
f16_to_f32_avx2(const uint16_t *src, float *dst, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	for (; i < n; i++)
		dst[i] = fp16_to_f32(src[i]);
}

AVX2 static void
quantize_q8_avx2(const float *x, struct block_q8 *out, size_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);

	for (size_t b = 0; b < n / 32; b++, x += 32) {
		__m256 v[4], m;
		for (int j = 0; j < 4; j++)
			v[j] = _mm256_loadu_ps(x + 8 * j);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
				  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
		__m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
		m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
		float amax = _mm_cvtss_f32(m4);
		float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		__m256 mul = _mm256_set1_ps(id);
		__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], mul));
		__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], mul));
		__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], mul));
		__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], mul));
		__m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
		__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
		/* pack to int8 and undo the lane interleave of the packs */
		__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		_mm256_storeu_si256((__m256i *)out[b].q, p);
		out[b].d = d;
		out[b].sum = _mm_cvtsi128_si32(s4);
	}
}

/* Sum of products of 32 signed bytes, as 8 int32 lanes. */
AVX2 static __m256i
mul_sum_i8_avx2(__m256i w, __m256i x)
{
	__m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
	__m256i p16 = _mm256_maddubs_epi16(aw, sx);
	return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

AVX2 static float
dot_q8_0_avx2(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	__m256 acc = _mm256_setzero_ps();

	/* without VNNI there are no 8-row groups: decode streams the rows one
	 * after another, a line asked for every block or two (cpu_x86.h).
	 * PRIVAI_SIMD=avx2 Q8_0 generation went from 52-53 % of the bound to
	 * 84 % on an Emerald Rapids Xeon. */
	for (size_t i = 0; i < nb; i++, b += 34) {
		STREAM_PREFETCH(b, 1);
		__m256i p = mul_sum_i8_avx2(_mm256_loadu_si256((const __m256i *)(b + 2)),
					    _mm256_loadu_si256((const __m256i *)x[i].q));
		acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p), acc);
	}
	return hsum256(acc);
}

AVX2 static float
dot_q4_0_avx2(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();

	/* as dot_q4_0_avx512: the offset inside the integer sum, two chains */
	for (size_t i = 0; i < nb; i++, b += 18) {
		__m256i p = _mm256_add_epi32(mul_sum_u8i8_avx2(unpack_nibbles(b + 2),
							       _mm256_loadu_si256((const __m256i *)x[i].q)),
					     _mm256_set1_epi32(-x[i].sum));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p), acc0);
		__m256 t = acc0; /* alternate the chains */
		acc0 = acc1;
		acc1 = t;
	}
	return hsum256(_mm256_add_ps(acc0, acc1));
}

static struct cpu_kernels k_avx2 = {
	"avx2",
	dot_f32_avx2,
	dot_f16_avx2,
	f16_to_f32_avx2,
	quantize_q8_avx2,
	dot_q8_0_avx2,
	dot_q4_0_avx2,
	NULL,
	NULL, /* k-quant dots: filled in by cpu_kernels_get */
	NULL,
	NULL,
	NULL, /* no GEMM */
	NULL,
	dot_bf16_avx2,
	bf16_to_f32_avx2,
	f32_to_f16_avx2,
	axpy_f16_avx2,
	exp_f32_avx2,
	widen_q4_0_avx2,
	widen_q4_k_avx2,
	widen_q6_k_avx2,
	NULL,
	NULL, /* filled in by cpu_kernels_get */
	widen_q5_k_avx2,
	NULL,
	NULL,
	gemm_q4_0x8_avx2,
	widen_q4_0x8_avx2,
	NULL,
	NULL,
	quantize_q8k_avx2,
	NULL, /* filled in by cpu_kernels_get */
	att_scores_tile_avx2,
	NULL, /* attention's values a position at a time */
	NULL,
	NULL, /* the row-tile float GEMM */
	NULL,
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	gemm_q4_kx8_avx2,
	kx8_repack_avx2,
	gemm_q5_kx8_avx2,
	/* no Q8_0 repack: vpmaddubsw would saturate on the +128 weights
	 * (255 * 127 * 2 > 32767), and the file's rows serve AVX2 as well */
	NULL,
	NULL,
	NULL,          /* filled in by cpu_kernels_get */
	dot4_f16_avx2, /* F16 decode, four rows a pass */
	NULL,          /* no vdpbf16ps */
	0,
	NULL,
	NULL, /* no packed GEMM */
	0,    /* vdpbf16ps not measured */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	0,
	NULL,
	NULL, /* no AMX */
	NULL, /* no packed GEMM */
	NULL,
	NULL,        /* filled in by cpu_kernels_get */
	swiglu_avx2, /* cpu_elementwise.c */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL, /* filled in by cpu_kernels_get */
	dot_q4_1_avx2,
	dot_q5_0_avx2,
	dot_q5_1_avx2,
	dot_iq4_nl_avx2,
	widen_legacy_avx2,
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	widen_iq4_nl_avx2,
	gemm_q4_1x8_avx2,
	gemm_q5_0x8_avx2,
	gemm_q5_1x8_avx2,
	widen_legacy_x8_avx2,
	NULL, /* no pairs of tokens a vector */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
};

/* --------------------------------------------------------- AVX-512 VNNI */

AVX512 static float
dot_f32_avx512(const float *a, const float *b, size_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
	}
	float s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

AVX512 static float
dot_f16_avx512(const uint16_t *w, const float *x, size_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		if (cpu_stream_prefetch == 0) /* a line (32 values) a step: HALF_ROWS_ONE_AT_A_TIME */
			SPARSE_PREFETCH(w + i, i / 32, 64);
		s0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))),
				     _mm512_loadu_ps(x + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16))),
				     _mm512_loadu_ps(x + i + 16), s1);
	}
	return dot_f16_tail(w, x, i, n, _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
}

/* As dot4_f16_avx2 (the next four rows' lines asked for as there), each
 * row summed as dot_f16_avx512 sums it, or the rows one at a time where
 * HALF_ROWS_ONE_AT_A_TIME says so (cpu_x86.h). */
AVX512 static void
dot4_f16_avx512(const uint16_t *w, size_t ldw, const float *x, size_t n, float *y)
{
	__m512 s[4][2];
	size_t i = 0;

	if (HALF_ROWS_ONE_AT_A_TIME(n * sizeof(float))) {
		for (int r = 0; r < 4; r++)
			y[r] = dot_f16_avx512(w + (size_t)r * ldw, x, n);
		return;
	}
	for (int r = 0; r < 4; r++)
		s[r][0] = s[r][1] = _mm512_setzero_ps();
	for (; i + 32 <= n; i += 32) {
		__m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			const uint16_t *wr = w + (size_t)r * ldw + i;
			ROWS_PREFETCH(wr + 4 * ldw);
			s[r][0] =
				_mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wr)), x0, s[r][0]);
			s[r][1] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wr + 16))), x1,
						  s[r][1]);
		}
	}
	for (int r = 0; r < 4; r++)
		y[r] = dot_f16_tail(w + (size_t)r * ldw, x, i, n,
				    _mm512_reduce_add_ps(_mm512_add_ps(s[r][0], s[r][1])));
}

/* A full tile keeps its sums in registers; the edges of a matrix (fewer
 * rows or tokens) take the per-pair dot. */
AVX512 static void
gemm_f32_avx512(const float *w, size_t ldw, int nr, const float *x, size_t ldx, int nt, size_t n, float *y, size_t ldy)
{
	if (nr != GEMM_F32_ROWS || nt != GEMM_F32_TOKENS) {
		for (int r = 0; r < nr; r++)
			for (int t = 0; t < nt; t++)
				y[(size_t)t * ldy + r] = dot_f32_avx512(w + (size_t)r * ldw, x + (size_t)t * ldx, n);
		return;
	}
	__m512 a00 = _mm512_setzero_ps(), a01 = _mm512_setzero_ps(), a02 = _mm512_setzero_ps(),
	       a03 = _mm512_setzero_ps(), a04 = _mm512_setzero_ps(), a05 = _mm512_setzero_ps(),
	       a10 = _mm512_setzero_ps(), a11 = _mm512_setzero_ps(), a12 = _mm512_setzero_ps(),
	       a13 = _mm512_setzero_ps(), a14 = _mm512_setzero_ps(), a15 = _mm512_setzero_ps(),
	       a20 = _mm512_setzero_ps(), a21 = _mm512_setzero_ps(), a22 = _mm512_setzero_ps(),
	       a23 = _mm512_setzero_ps(), a24 = _mm512_setzero_ps(), a25 = _mm512_setzero_ps(),
	       a30 = _mm512_setzero_ps(), a31 = _mm512_setzero_ps(), a32 = _mm512_setzero_ps(),
	       a33 = _mm512_setzero_ps(), a34 = _mm512_setzero_ps(), a35 = _mm512_setzero_ps();
	size_t i = 0;
	__mmask16 m = 0xffff;

	for (;;) {
		if (i + 16 > n) {
			if (i >= n)
				break;
			m = (__mmask16)((1u << (n - i)) - 1);
		}
		__m512 v0 = _mm512_maskz_loadu_ps(m, w + 0 * ldw + i);
		__m512 v1 = _mm512_maskz_loadu_ps(m, w + 1 * ldw + i);
		__m512 v2 = _mm512_maskz_loadu_ps(m, w + 2 * ldw + i);
		__m512 v3 = _mm512_maskz_loadu_ps(m, w + 3 * ldw + i);
		__m512 xt = _mm512_maskz_loadu_ps(m, x + 0 * ldx + i);
		a00 = _mm512_fmadd_ps(v0, xt, a00);
		a10 = _mm512_fmadd_ps(v1, xt, a10);
		a20 = _mm512_fmadd_ps(v2, xt, a20);
		a30 = _mm512_fmadd_ps(v3, xt, a30);
		xt = _mm512_maskz_loadu_ps(m, x + 1 * ldx + i);
		a01 = _mm512_fmadd_ps(v0, xt, a01);
		a11 = _mm512_fmadd_ps(v1, xt, a11);
		a21 = _mm512_fmadd_ps(v2, xt, a21);
		a31 = _mm512_fmadd_ps(v3, xt, a31);
		xt = _mm512_maskz_loadu_ps(m, x + 2 * ldx + i);
		a02 = _mm512_fmadd_ps(v0, xt, a02);
		a12 = _mm512_fmadd_ps(v1, xt, a12);
		a22 = _mm512_fmadd_ps(v2, xt, a22);
		a32 = _mm512_fmadd_ps(v3, xt, a32);
		xt = _mm512_maskz_loadu_ps(m, x + 3 * ldx + i);
		a03 = _mm512_fmadd_ps(v0, xt, a03);
		a13 = _mm512_fmadd_ps(v1, xt, a13);
		a23 = _mm512_fmadd_ps(v2, xt, a23);
		a33 = _mm512_fmadd_ps(v3, xt, a33);
		xt = _mm512_maskz_loadu_ps(m, x + 4 * ldx + i);
		a04 = _mm512_fmadd_ps(v0, xt, a04);
		a14 = _mm512_fmadd_ps(v1, xt, a14);
		a24 = _mm512_fmadd_ps(v2, xt, a24);
		a34 = _mm512_fmadd_ps(v3, xt, a34);
		xt = _mm512_maskz_loadu_ps(m, x + 5 * ldx + i);
		a05 = _mm512_fmadd_ps(v0, xt, a05);
		a15 = _mm512_fmadd_ps(v1, xt, a15);
		a25 = _mm512_fmadd_ps(v2, xt, a25);
		a35 = _mm512_fmadd_ps(v3, xt, a35);
		i += 16;
	}
	y[(size_t)0 * ldy + 0] = _mm512_reduce_add_ps(a00);
	y[(size_t)0 * ldy + 1] = _mm512_reduce_add_ps(a10);
	y[(size_t)0 * ldy + 2] = _mm512_reduce_add_ps(a20);
	y[(size_t)0 * ldy + 3] = _mm512_reduce_add_ps(a30);
	y[(size_t)1 * ldy + 0] = _mm512_reduce_add_ps(a01);
	y[(size_t)1 * ldy + 1] = _mm512_reduce_add_ps(a11);
	y[(size_t)1 * ldy + 2] = _mm512_reduce_add_ps(a21);
	y[(size_t)1 * ldy + 3] = _mm512_reduce_add_ps(a31);
	y[(size_t)2 * ldy + 0] = _mm512_reduce_add_ps(a02);
	y[(size_t)2 * ldy + 1] = _mm512_reduce_add_ps(a12);
	y[(size_t)2 * ldy + 2] = _mm512_reduce_add_ps(a22);
	y[(size_t)2 * ldy + 3] = _mm512_reduce_add_ps(a32);
	y[(size_t)3 * ldy + 0] = _mm512_reduce_add_ps(a03);
	y[(size_t)3 * ldy + 1] = _mm512_reduce_add_ps(a13);
	y[(size_t)3 * ldy + 2] = _mm512_reduce_add_ps(a23);
	y[(size_t)3 * ldy + 3] = _mm512_reduce_add_ps(a33);
	y[(size_t)4 * ldy + 0] = _mm512_reduce_add_ps(a04);
	y[(size_t)4 * ldy + 1] = _mm512_reduce_add_ps(a14);
	y[(size_t)4 * ldy + 2] = _mm512_reduce_add_ps(a24);
	y[(size_t)4 * ldy + 3] = _mm512_reduce_add_ps(a34);
	y[(size_t)5 * ldy + 0] = _mm512_reduce_add_ps(a05);
	y[(size_t)5 * ldy + 1] = _mm512_reduce_add_ps(a15);
	y[(size_t)5 * ldy + 2] = _mm512_reduce_add_ps(a25);
	y[(size_t)5 * ldy + 3] = _mm512_reduce_add_ps(a35);
}

AVX512 static float
dot_q8_0_avx512(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 2 <= nb; i += 2, b += 68) {
		__m256i w0 = _mm256_loadu_si256((const __m256i *)(b + 2));
		__m256i w1 = _mm256_loadu_si256((const __m256i *)(b + 36));
		__m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].q);
		__m256i x1 = _mm256_loadu_si256((const __m256i *)x[i + 1].q);
		__m256i p0 =
			_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w0, w0), _mm256_sign_epi8(x0, w0));
		__m256i p1 =
			_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w1, w1), _mm256_sign_epi8(x1, w1));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p0), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b + 34) * x[i + 1].d), _mm256_cvtepi32_ps(p1), acc1);
	}
	float s = hsum256(_mm256_add_ps(acc0, acc1));
	if (i < nb)
		s += dot_q8_0_avx2(b, x + i, nb - i);
	return s;
}

/* sum((q - 8) * x) = sum(q * x) - 8 * sum(x): starting each of the 8
 * lanes at -sum(x) takes the offset off inside the integer sum, so no
 * scalar correction chain runs beside the vector one.  Two blocks a step
 * on two accumulators: one fmadd chain is bound by its latency. */
AVX512 static float
dot_q4_0_avx512(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 2 <= nb; i += 2, b += 36) {
		__m256i p0 = _mm256_dpbusd_epi32(_mm256_set1_epi32(-x[i].sum), unpack_nibbles(b + 2),
						 _mm256_loadu_si256((const __m256i *)x[i].q));
		__m256i p1 = _mm256_dpbusd_epi32(_mm256_set1_epi32(-x[i + 1].sum), unpack_nibbles(b + 20),
						 _mm256_loadu_si256((const __m256i *)x[i + 1].q));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p0), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b + 18) * x[i + 1].d), _mm256_cvtepi32_ps(p1), acc1);
	}
	if (i < nb) {
		__m256i p = _mm256_dpbusd_epi32(_mm256_set1_epi32(-x[i].sum), unpack_nibbles(b + 2),
						_mm256_loadu_si256((const __m256i *)x[i].q));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p), acc0);
	}
	return hsum256(_mm256_add_ps(acc0, acc1));
}

/* Sum of the 32 signed weights of a Q8_0 block. */
AVX512 static inline int32_t
q8_block_sum(const uint8_t *qs)
{
	__m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)qs), _mm256_set1_epi8((char)0x80));
	__m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256()); /* 4 x sum of 8 (w + 128) */
	__m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
	h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
	return (int32_t)_mm_cvtsi128_si32(h) - 32 * 128;
}

/*
 * The prefill GEMM.  Each 32-bit lane of a 512-bit register is one token;
 * vpdpbusd multiplies that token's 4 activation bytes by 4 weight bytes
 * broadcast to every lane, so 8 instructions give a whole 32-element block
 * for 16 tokens, and the block's scales are applied to 16 tokens at once.
 * Activations carry +128 (vpdpbusd wants them unsigned); 128 * sum(w) is
 * taken off per block.
 */
/* Per-block constants of nrows weight rows, computed once per row chunk
 * and reused by every token group: -128 * sum(w) and the fp16 scale. */
AVX512 static void
gemm_q8_0_prep_avx512(const uint8_t *w, size_t row_bytes, int nrows, size_t nb, int32_t *wsum, float *wd)
{
	for (int r = 0; r < nrows; r++)
		for (size_t b = 0; b < nb; b++) {
			const uint8_t *blk = w + (size_t)r * row_bytes + b * 34;
			wsum[(size_t)r * nb + b] = -128 * q8_block_sum(blk + 2);
			wd[(size_t)r * nb + b] = f16c_load(blk);
		}
}

/* One token group (up to 16 tokens, as in small decode batches): the
 * two-group loop below would compute the group twice. */
AVX512 static void
gemm_q8_0_1g_avx512(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd,
		    const float *wmin, const struct q8_tile *x, size_t nb, float *y)
{
	for (int r0 = 0; r0 < nrows; r0 += 4) {
		int nr = nrows - r0 < 4 ? nrows - r0 : 4;
		__m512 acc[4];
#pragma GCC unroll 8
		for (int i = 0; i < 4; i++)
			acc[i] = _mm512_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m512i xa[8];
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++)
				xa[s] = _mm512_loadu_si512((const void *)x[b].q[s]);
			__m512 da = _mm512_loadu_ps(x[b].d);
#pragma GCC unroll 8
			for (int rr = 0; rr < nr; rr++) {
				size_t at = (size_t)(r0 + rr) * nb + b;
				const uint8_t *blk = w + (size_t)(r0 + rr) * row_bytes + b * 34;
				__m512i pa = _mm512_set1_epi32(wsum[at]);
#pragma GCC unroll 8
				for (int s = 0; s < 8; s++)
					pa = _mm512_dpbusd_epi32(pa, xa[s], BCAST4_512(blk + 2 + 4 * s));
				acc[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pa),
							  _mm512_mul_ps(da, _mm512_set1_ps(wd[at])), acc[rr]);
				if (wmin != NULL)
					acc[rr] = _mm512_fnmadd_ps(_mm512_set1_ps(wmin[at]), _mm512_loadu_ps(x[b].dsum),
								   acc[rr]);
			}
		}
#pragma GCC unroll 8
		for (int rr = 0; rr < nr; rr++)
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_TOKENS, acc[rr]);
	}
}

AVX512 static void
gemm_q8_0_avx512(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd, const float *wmin,
		 const struct q8_tile *x, size_t group_stride, int ngroups, size_t nb, float *y)
{
	if (ngroups == 1) {
		gemm_q8_0_1g_avx512(w, row_bytes, nrows, wsum, wd, wmin, x, nb, y);
		return;
	}
	/* two token groups share every weight-side step (broadcasts, block
	 * sum, scale); 16 x-registers + 8 accumulators fit the 32 zmm */
	const struct q8_tile *x1 = ngroups > 1 ? x + group_stride : x;

	for (int r0 = 0; r0 < nrows; r0 += 4) {
		int nr = nrows - r0 < 4 ? nrows - r0 : 4;
		__m512 acc0[4], acc1[4];
#pragma GCC unroll 8
		for (int i = 0; i < 4; i++)
			acc0[i] = acc1[i] = _mm512_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m512i xa[8], xb[8];
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++) {
				xa[s] = _mm512_loadu_si512((const void *)x[b].q[s]);
				xb[s] = _mm512_loadu_si512((const void *)x1[b].q[s]);
			}
			__m512 da = _mm512_loadu_ps(x[b].d), db = _mm512_loadu_ps(x1[b].d);
#pragma GCC unroll 8
			for (int rr = 0; rr < nr; rr++) {
				size_t at = (size_t)(r0 + rr) * nb + b;
				const uint8_t *blk = w + (size_t)(r0 + rr) * row_bytes + b * 34;
				__m512i pa = _mm512_set1_epi32(wsum[at]), pb = pa;
#pragma GCC unroll 8
				for (int s = 0; s < 8; s++) {
					__m512i wb = BCAST4_512(blk + 2 + 4 * s);
					pa = _mm512_dpbusd_epi32(pa, xa[s], wb);
					pb = _mm512_dpbusd_epi32(pb, xb[s], wb);
				}
				__m512 dw = _mm512_set1_ps(wd[at]);
				acc0[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pa), _mm512_mul_ps(da, dw), acc0[rr]);
				acc1[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pb), _mm512_mul_ps(db, dw), acc1[rr]);
				if (wmin != NULL) {
					__m512 o = _mm512_set1_ps(wmin[at]);
					acc0[rr] = _mm512_fnmadd_ps(o, _mm512_loadu_ps(x[b].dsum), acc0[rr]);
					acc1[rr] = _mm512_fnmadd_ps(o, _mm512_loadu_ps(x1[b].dsum), acc1[rr]);
				}
			}
		}
#pragma GCC unroll 8
		for (int rr = 0; rr < nr; rr++) {
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_TOKENS, acc0[rr]);
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_TOKENS + GEMM_TOKENS, acc1[rr]);
		}
	}
}

/* 8 tokens in the 8 lanes of a ymm: on cores that split 512-bit work in
 * two halves this costs no more per product than the 16-token kernel, and
 * a decode batch of 8 wastes no lanes.  Each weight dword is broadcast
 * straight from memory; the +128 on the activations is taken off with the
 * block sums the model keeps.  NR rows a step, NR a constant where it can
 * be, so the accumulators stay in registers. */
AVX512 static inline __attribute__((always_inline)) void
gemm8_rows(const uint8_t *w, size_t row_bytes, int nr, const int16_t *bsum, const struct q8_tile8 *x, size_t nb,
	   float *y)
{
	__m256 acc[8];

	/* -O2 does not unroll: without the pragmas xq and acc live on the stack */
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		acc[i] = _mm256_setzero_ps();
	for (size_t b = 0; b < nb; b++) {
		__m256i xq[8];
#pragma GCC unroll 8
		for (int s = 0; s < 8; s++)
			xq[s] = _mm256_loadu_si256((const __m256i *)x[b].q[s]);
		__m256 dx = _mm256_loadu_ps(x[b].d);
#pragma GCC unroll 8
		for (int rr = 0; rr < nr; rr++) {
			const uint8_t *blk = w + (size_t)rr * row_bytes + b * 34;
			/* two chains: vpdpbusd's latency, not its throughput, bounds one */
			__m256i p = _mm256_set1_epi32(-128 * (int32_t)bsum[(size_t)rr * nb + b]);
			__m256i p1 = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int k = 0; k < 8; k += 2) {
				p = _mm256_dpbusd_epi32(p, xq[k], BCAST4_256(blk + 2 + 4 * k));
				p1 = _mm256_dpbusd_epi32(p1, xq[k + 1], BCAST4_256(blk + 6 + 4 * k));
			}
			p = _mm256_add_epi32(p, p1);
			__m256 dw = _mm256_set1_ps(f16c_load(blk));
			acc[rr] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx, dw), acc[rr]);
		}
	}
#pragma GCC unroll 8
	for (int rr = 0; rr < nr; rr++)
		_mm256_storeu_ps(y + (size_t)rr * GEMM8_TOKENS, acc[rr]);
}

AVX512 static void
gemm8_q8_0_avx512(const uint8_t *w, size_t row_bytes, int nrows, const int16_t *bsum, const struct q8_tile8 *x,
		  size_t nb, float *y)
{
	int r0 = 0;

	for (; r0 + 8 <= nrows; r0 += 8)
		gemm8_rows(w + (size_t)r0 * row_bytes, row_bytes, 8, bsum + (size_t)r0 * nb, x, nb,
			   y + (size_t)r0 * GEMM8_TOKENS);
	for (; r0 < nrows; r0 += 4) {
		int nr = nrows - r0 < 4 ? nrows - r0 : 4;
		gemm8_rows(w + (size_t)r0 * row_bytes, row_bytes, nr, bsum + (size_t)r0 * nb, x, nb,
			   y + (size_t)r0 * GEMM8_TOKENS);
	}
}

static struct cpu_kernels k_avx512 = {
	"avx512-vnni",
	dot_f32_avx512,
	dot_f16_avx512,
	f16_to_f32_avx2,
	quantize_q8_avx2,
	dot_q8_0_avx512,
	dot_q4_0_avx512,
	NULL,
	NULL,
	gemm_q8_0_prep_avx512,
	gemm_q8_0_avx512,
	gemm8_q8_0_avx512,
	gemm_f32_avx512,
	dot_bf16_avx2,
	bf16_to_f32_avx2,
	f32_to_f16_avx2,
	axpy_f16_avx512,
	exp_f32_avx2,
	widen_q4_0_avx2,
	widen_q4_k_avx2,
	widen_q6_k_avx2,
	gemm_q6_k_avx512,
	NULL,
	widen_q5_k_avx2,
	NULL, /* the bfloat16 GEMM: filled in by cpu_kernels_get where CPUID has it */
	NULL,
	gemm_q4_0x8_avx512,
	widen_q4_0x8_avx2,
	NULL,
	NULL,
	quantize_q8k_avx2,
	NULL, /* filled in by cpu_kernels_get */
	att_scores_tile_avx512,
	att_pv_f16_avx512,
	att_softmax_avx512,
	pack_f32_panel_avx512,
	gemm_f32_packed_avx512,
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	gemm_q4_kx8_avx512,
	kx8_repack_avx2,
	gemm_q5_kx8_avx512,
	gemm_q8_0x8_avx512,
	widen_q8_0x8_avx2,
	NULL, /* filled in by cpu_kernels_get */
	dot4_f16_avx512,
	NULL, /* filled in by cpu_kernels_get */
	0,    /* filled in by cpu_kernels_get */
	pack_f16_panel_avx512,
	pack_bf16_panel_avx512,
	0, /* filled in by cpu_kernels_get */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL, /* filled in by cpu_kernels_get */
	0,    /* filled in by cpu_kernels_get */
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	pack_f32_tokens_avx512,
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	swiglu_avx2,
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	NULL,
	NULL,
	NULL,
	dot_q4_1_avx2, /* cpu_dot_legacy.c: the AVX2 kernels serve here too */
	dot_q5_0_avx2,
	dot_q5_1_avx2,
	dot_iq4_nl_avx2,
	widen_legacy_avx2,
	NULL, /* filled in by cpu_kernels_get */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	widen_iq4_nl_avx2,
	gemm_q4_1x8_avx512,
	gemm_q5_0x8_avx512,
	gemm_q5_1x8_avx512,
	widen_legacy_x8_avx2,
	NULL, /* the pairs: filled in by cpu_kernels_get */
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
};
#endif

const struct cpu_kernels *
cpu_kernels_avx2(void)
{
#if defined(__x86_64__)
	cpu_kernels_get(); /* fills in the k-quant entries */
	return &k_avx2;
#else
	return &k_scalar;
#endif
}

const struct cpu_kernels *
cpu_kernels_scalar(void)
{
	return &k_scalar;
}

#if defined(__x86_64__)
#include <cpuid.h>

/* CPUID and XGETBV: the instruction set and whether the OS saves its
 * registers (a hypervisor may hide AVX-512 state even on a capable CPU). */
static void
detect(int *avx2, int *avx512, int *bf16)
{
	unsigned a, b, c, d, c1;
	uint64_t xcr0 = 0;

	*avx2 = *avx512 = *bf16 = 0;
	if (!__get_cpuid(1, &a, &b, &c1, &d) || !(c1 & (1u << 27))) /* OSXSAVE */
		return;
	__asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
	xcr0 = ((uint64_t)d << 32) | a;
	if ((xcr0 & 6) != 6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	int fma = (c1 >> 12) & 1, f16c = (c1 >> 29) & 1;
	*avx2 = ((b >> 5) & 1) && fma && f16c;
	*avx512 = *avx2 && (xcr0 & 0xe0) == 0xe0 && ((b >> 16) & 1) /* F */ && ((b >> 30) & 1) /* BW */ &&
		  ((b >> 31) & 1) /* VL */ && ((c >> 11) & 1) /* VNNI */;
	if (*avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
		*bf16 = (a >> 5) & 1; /* AVX512_BF16 */
}
#endif

int cpu_stream_prefetch = -1;
int cpu_wide_prefetch = -1;
#if defined(__x86_64__)
const int cpu_prefetch_l2_ahead = ONE_TOKEN_AHEAD, cpu_prefetch_l1_ahead = ONE_TOKEN_NEAR;
#else
const int cpu_prefetch_l2_ahead = 0, cpu_prefetch_l1_ahead = 0;
#endif
double cpu_pairs_speedup = 0;

#if defined(__x86_64__)
/* An Emerald Rapids Xeon's generation gained 30-60 % from software
 * prefetch 4 KB ahead (its prefetcher stops at every 4 KB page), an AMX
 * Xeon's more again 2-3 KB ahead into L2 and 1 KB into L1 (ONE_TOKEN_AHEAD
 * and ONE_TOKEN_NEAR, cpu_x86.h); a
 * Zen 4 lost 5-15 % to it, 2 KB ahead into L1, when its bus was fast. */
static int
stream_prefetch_wanted(void)
{
	const char *force = getenv("PRIVAI_PREFETCH");
	unsigned a = 0, b = 0, c = 0, d = 0; /* the sanitizer build cannot see __get_cpuid set them */

	if (force != NULL && (strcmp(force, "0") == 0 || strcmp(force, "1") == 0))
		return force[0] == '1';
	/* "GenuineIntel" in ebx, edx, ecx */
	return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;
}

/* The float rows' and decode batches' prefetch, on unless
 * PRIVAI_PREFETCH=0: the Xeon above gained from it, and so did a Zen 4
 * (F16 tg32 13.1-20.1 tok/s against 12.4-15.2 without, seven alternating
 * rounds; 8 sequences of Q8_0 93-95 against 136-144; docs/performance.md),
 * where one token's quantized stream prefetch did not. */
static int
wide_prefetch_wanted(void)
{
	const char *force = getenv("PRIVAI_PREFETCH");

	return force == NULL || strcmp(force, "0") != 0;
}

/* Two tokens a 512-bit vector where PRIVAI_PAIRS=1, none where 0, else
 * where a 512-bit vpdpbusd does COMPUTE_CPU_PAIRS_MIN_SPEEDUP times a
 * 256-bit one's products here; read on every cpu_kernels_get() so that
 * a test can take both paths. */
static int
pairs_wanted(double speedup)
{
	const char *force = getenv("PRIVAI_PAIRS");

	if (force != NULL && (strcmp(force, "0") == 0 || strcmp(force, "1") == 0))
		return force[0] == '1';
	return speedup >= COMPUTE_CPU_PAIRS_MIN_SPEEDUP;
}

/* The 8-row groups' kernels on pairs of tokens, and Q4_K's, Q5_K's,
 * Q6_K's and Q4_0's one token on 512-bit vectors, or neither (the 8-row kernels then
 * take every token a 256-bit vector) */
static void
set_pair_kernels(struct cpu_kernels *k, int on)
{
	k->gemm_q4_0x8_pairs = on ? gemm_q4_0x8_pairs_avx512 : NULL;
	k->gemm_iq4_nlx8_pairs = on ? gemm_iq4_nlx8_pairs_avx512 : NULL;
	k->gemm_q8_0x8_pairs = on ? gemm_q8_0x8_pairs_avx512 : NULL;
	k->gemm_q4_1x8_pairs = on ? gemm_q4_1x8_pairs_avx512 : NULL;
	k->gemm_q5_0x8_pairs = on ? gemm_q5_0x8_pairs_avx512 : NULL;
	k->gemm_q5_1x8_pairs = on ? gemm_q5_1x8_pairs_avx512 : NULL;
	k->gemm_q4_kx8_pairs = on ? gemm_q4_kx8_pairs_avx512 : NULL;
	k->gemm_q5_kx8_pairs = on ? gemm_q5_kx8_pairs_avx512 : NULL;
	/* one token two chunks a vector (DEFINE_GEMV_KX8_512, gemv_q4_0x8_wide_avx512,
	 * gemv_q6_kx8_wide_avx512) */
	k->gemm_q4_kx8 = on ? gemm_q4_kx8_wide_avx512 : gemm_q4_kx8_avx512;
	k->gemm_q5_kx8 = on ? gemm_q5_kx8_wide_avx512 : gemm_q5_kx8_avx512;
	k->gemm_q4_0x8 = on ? gemm_q4_0x8_wide_avx512 : gemm_q4_0x8_avx512;
	k->gemm_q6_kx8 = on ? gemm_q6_kx8_wide_avx512 : gemm_q6_kx8_avx512;
	k->gemm_q6_kx8_pairs = on ? gemm_q6_kx8_pairs_avx512 : NULL;
	k->gemm_iq4_xsx8_pairs = on ? gemm_iq4_xsx8_pairs_avx512 : NULL;
	k->gemm_q3_kx8_pairs = on ? gemm_q3_kx8_pairs_avx512 : NULL;
	k->gemm_q2_kx8_pairs = on ? gemm_q2_kx8_pairs_avx512 : NULL;
}

/* PRIVAI_AMX=0 keeps the AVX-512 kernels on a CPU with AMX; read on
 * every cpu_kernels_get() so that a test can compare both. */
static int
amx_wanted(void)
{
	const char *v = getenv("PRIVAI_AMX");

	return v == NULL || strcmp(v, "0") != 0;
}

/* F16 prompts on the tiles unless PRIVAI_AMX_F16=0 (to compare with
 * the float GEMM): their five bfloat16 products are within float
 * rounding of the float product (cpu_amx.c says how). */
static int
amx_f16_wanted(void)
{
	const char *v = getenv("PRIVAI_AMX_F16");

	return v == NULL || strcmp(v, "0") != 0;
}
#endif

const struct cpu_kernels *
cpu_kernels_get(void)
{
#if defined(__x86_64__)
	static double bf16_speedup = -1, pairs_speedup = -1; /* measured once */
	int avx2, avx512, bf16;

	if (cpu_stream_prefetch < 0)
		cpu_stream_prefetch = stream_prefetch_wanted();
	if (cpu_wide_prefetch < 0)
		cpu_wide_prefetch = wide_prefetch_wanted();
	detect(&avx2, &avx512, &bf16);
	if (bf16 && bf16_speedup < 0)
		bf16_speedup = bf16_dot_speedup_avx512();
	if (avx512 && pairs_speedup < 0)
		pairs_speedup = vnni512_speedup_avx512();
	cpu_pairs_speedup = avx512 ? pairs_speedup : 0;
	set_pair_kernels(&k_avx512, avx512 && pairs_wanted(pairs_speedup));
	if (bf16) {
		/* Zen 4 does 1.8 times the products with vdpbf16ps, an Emerald
		 * Rapids Xeon (no AMX in its VM) half: there the GEMM on rows
		 * converted to float wins (docs/performance.md) */
		k_avx512.bf16_gemm_slow = bf16_speedup < 1.2;
		k_avx512.bf16_speedup = bf16_speedup;
		k_avx512.pack_bf16_tile = pack_bf16_tile_avx512;
		k_avx512.gemm_bf16 = gemm_bf16_avx512;
		k_avx512.f32_to_bf16 = f32_to_bf16_avx512;
		k_avx512.dot_bf16_bf16 = dot_bf16_bf16_avx512;
		k_avx512.dot4_bf16_bf16 = dot4_bf16_bf16_avx512;
	}
	/* AMX tiles for F16 and BF16 prompts where they run, unless
	 * PRIVAI_AMX=0 (the comparisons in docs/performance.md) */
	if (bf16 && amx_wanted() && cpu_amx_usable()) {
		k_avx512.amx_pack_lo = amx_pack_lo;
		k_avx512.amx_gemm = amx_gemm;
		k_avx512.amx_q8_stage_x8 = amx_q8_stage_x8;
		k_avx512.amx_q8_stage_q4x8 = amx_q8_stage_q4x8;
		k_avx512.amx_q8_stage_kx8 = amx_q8_stage_kx8;
		k_avx512.amx_q8_stage_rows = amx_q8_stage_rows;
		k_avx512.amx_q6_stage_rows = amx_q6_stage_rows;
		k_avx512.gemm_q8_amx = gemm_q8_amx;
		k_avx512.gemm_q6_amx = gemm_q6_amx;
		k_avx512.amx_f16 = amx_f16_wanted();
	} else {
		k_avx512.amx_pack_lo = NULL;
		k_avx512.amx_gemm = NULL;
		k_avx512.amx_q8_stage_x8 = NULL;
		k_avx512.amx_q8_stage_q4x8 = NULL;
		k_avx512.amx_q8_stage_kx8 = NULL;
		k_avx512.amx_q8_stage_rows = NULL;
		k_avx512.amx_q6_stage_rows = NULL;
		k_avx512.gemm_q8_amx = NULL;
		k_avx512.gemm_q6_amx = NULL;
		k_avx512.amx_f16 = 0;
	}
	/* the k-quant dots live in their own file; link them in here */
	k_avx2.dot_q4_k = dot_q4_k_simd(0);
	k_avx2.dot_q6_k = dot_q6_k_simd(0);
	k_avx2.dot_q5_k = dot_q5_k_simd(0);
	k_avx512.dot_q5_k = dot_q5_k_simd(1);
	k_avx512.dot_q4_k = dot_q4_k_simd(1);
	k_avx512.dot_q6_k = dot_q6_k_simd(1);
	k_avx2.dot_q6_k_q8k = dot_q6_k_q8k_simd(0);
	k_avx512.dot_q6_k_q8k = dot_q6_k_q8k_simd(1);
	k_avx2.dots_q6_k_q8k = dots_q6_k_q8k_simd(0);
	k_avx512.dots_q6_k_q8k = dots_q6_k_q8k_simd(1);
	k_avx2.dot_q4_k_q8k = dot_q4_k_q8k_simd(0);
	k_avx512.dot_q4_k_q8k = dot_q4_k_q8k_simd(1);
	k_avx2.dot_q5_k_q8k = dot_q5_k_q8k_simd(0);
	k_avx512.dot_q5_k_q8k = dot_q5_k_q8k_simd(1);
	k_avx2.dot_q2_k_q8k = dot_q2_k_q8k_simd(0);
	k_avx512.dot_q2_k_q8k = dot_q2_k_q8k_simd(1);
	k_avx2.dot_q3_k_q8k = dot_q3_k_q8k_simd(0);
	k_avx512.dot_q3_k_q8k = dot_q3_k_q8k_simd(1);
	k_avx2.widen_q3_k = k_avx512.widen_q3_k = widen_q3_k_avx2;
	k_avx2.dot_iq4_xs_q8k = dot_iq4_xs_q8k_simd(0);
	k_avx512.dot_iq4_xs_q8k = dot_iq4_xs_q8k_simd(1);
	k_avx2.widen_iq4_xs = k_avx512.widen_iq4_xs = widen_iq4_xs_avx2;
	k_avx2.gemm_q6_kx8 = gemm_q6_kx8_avx2; /* AVX-512's: set_pair_kernels */
	k_avx2.widen_q6_kx8 = k_avx512.widen_q6_kx8 = widen_q6_kx8_avx2;
	k_avx2.gemm_iq4_xsx8 = gemm_iq4_xsx8_avx2;
	k_avx512.gemm_iq4_xsx8 = gemm_iq4_xsx8_avx512;
	k_avx2.repack_iq4x8 = k_avx512.repack_iq4x8 = iq4x8_repack_avx2;
	k_avx2.gemm_q3_kx8 = gemm_q3_kx8_avx2;
	k_avx512.gemm_q3_kx8 = gemm_q3_kx8_avx512;
	k_avx2.repack_q3x8 = k_avx512.repack_q3x8 = q3x8_repack_avx2;
	k_avx2.gemm_q2_kx8 = gemm_q2_kx8_avx2;
	k_avx512.gemm_q2_kx8 = gemm_q2_kx8_avx512;
	k_avx2.repack_q2x8 = k_avx512.repack_q2x8 = q2x8_repack_avx2;
	k_avx2.gemm_iq4_nlx8 = gemm_iq4_nlx8_avx2;
	k_avx512.gemm_iq4_nlx8 = gemm_iq4_nlx8_avx512;
	if (avx512)
		return &k_avx512;
	if (avx2)
		return &k_avx2;
#endif
	return &k_scalar;
}
