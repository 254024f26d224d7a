/*
 * Q4_1, Q5_0 and Q5_1, the older 32-value types (still how many published
 * GGUF files of the Llama 2 years come): decode against activations in
 * 32-value int8 blocks (struct block_q8, with their sums), and rows
 * widened to int8 blocks for the prompt GEMM.  They took the float path
 * before, every weight dequantized to float for every token: a 1B-class
 * Q5_0 generated 2.4 tokens/s where llama.cpp did 27.9.
 *
 *   Q4_1: w = d * q + m, q in 0..15      row . x = sum dx * (d * sum(q * xq) + m * sum(xq))
 *   Q5_0: w = d * (q - 16), q in 0..31   row . x = sum dx * d * (sum(q * xq) - 16 * sum(xq))
 *   Q5_1: w = d * q + m, q in 0..31      as Q4_1
 * (a fifth bit j of a 32-bit qh for value j; value j and j + 16 in byte j's
 * nibbles).  The scalar versions are the reference the SIMD ones are
 * tested against.  Where a SIMD level has them, the rows are repacked in
 * 8-row groups at load (cpu_legacy_x8.c) and these dots serve only
 * matrices whose rows do not come in eights.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

/* Value j (0..31) of a block, before the offset: 0..15 or 0..31. */
static inline int
legacy_value(const uint8_t *b, struct legacy_layout l, int j)
{
	int q = j < 16 ? b[l.qs + j] & 0xf : b[l.qs + j - 16] >> 4;

	if (l.qh >= 0)
		q |= ((b[l.qh + j / 8] >> (j % 8)) & 1) << 4;
	return q;
}

static float
dot_legacy_scalar(uint32_t type, const void *w, const struct block_q8 *x, size_t nb)
{
	struct legacy_layout l = legacy_layout(type);
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nb; i++, b += l.bytes) {
		int32_t acc = 0;
		for (int j = 0; j < 32; j++)
			acc += legacy_value(b, l, j) * x[i].q[j];
		if (l.m < 0) /* Q5_0 */
			s += f16_at(b) * x[i].d * (float)(acc - 16 * x[i].sum);
		else
			s += f16_at(b) * x[i].d * (float)acc + f16_at(b + l.m) * x[i].d * (float)x[i].sum;
	}
	return s;
}

float
dot_q4_1_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_legacy_scalar(TT_Q4_1, w, x, nb);
}

float
dot_q5_0_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_legacy_scalar(TT_Q5_0, w, x, nb);
}

float
dot_q5_1_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_legacy_scalar(TT_Q5_1, w, x, nb);
}

/* Rows of nb blocks as 34-byte int8 blocks (bytes 2..33) for gemm_q8_0:
 * Q5_0's q - 16 with wd = d; Q4_1's and Q5_1's q with wd = d and wmin =
 * -m (the GEMM's weight is wd * q - wmin); IQ4_NL's levels with wd = d
 * (cpu_dot_iq4.c); wsum = -128 * the block's sum. */
void
widen_legacy_scalar(uint32_t type, const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	struct legacy_layout l = legacy_layout(type);

	if (type == TT_IQ4_NL) {
		widen_iq4_nl_scalar(src, dst, nb, wsum, wd);
		return;
	}

	for (size_t i = 0; i < nb; i++, src += l.bytes, dst += 34) {
		int32_t sum = 0;
		for (int j = 0; j < 32; j++) {
			int q = legacy_value(src, l, j) - (l.m < 0 ? 16 : 0);
			dst[2 + j] = (uint8_t)(int8_t)q;
			sum += q;
		}
		wsum[i] = -128 * sum;
		wd[i] = f16_at(src);
		if (l.m >= 0)
			wmin[i] = -f16_at(src + l.m);
	}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* A block's 32 values (0..15, or 0..31 with the fifth bits: bit j of qh
 * to byte j, the bytes of qh spread over 8 lanes each and tested) */
AVX2 static inline __m256i
legacy_values(const uint8_t *b, struct legacy_layout l)
{
	__m256i q = unpack_nibbles(b + l.qs);

	if (l.qh >= 0) {
		const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
							2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
		const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
		uint32_t h;
		memcpy(&h, b + l.qh, 4);
		__m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread), bit);
		q = _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10)));
	}
	return q;
}

/* Q5_0's -16 goes inside the integer sum (-2 * sum in each of 8 lanes);
 * Q4_1's and Q5_1's offsets in a float sum of their own; two chains. */
AVX2 static inline __attribute__((always_inline)) float
dot_legacy_avx2(uint32_t type, const void *w, const struct block_q8 *x, size_t nb)
{
	struct legacy_layout l = legacy_layout(type);
	const uint8_t *b = w;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	float off = 0.0f;

	for (size_t i = 0; i < nb; i++, b += l.bytes) {
		__m256i p = mul_sum_u8i8_avx2(legacy_values(b, l), _mm256_loadu_si256((const __m256i *)x[i].q));
		if (l.m < 0)
			p = _mm256_add_epi32(p, _mm256_set1_epi32(-2 * x[i].sum));
		else
			off += f16c_load(b + l.m) * x[i].d * (float)x[i].sum;
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p), acc0);
		__m256 t = acc0; /* alternate the chains */
		acc0 = acc1;
		acc1 = t;
	}
	return hsum256(_mm256_add_ps(acc0, acc1)) + off;
}

AVX2 float
dot_q4_1_avx2(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_legacy_avx2(TT_Q4_1, w, x, nb);
}

AVX2 float
dot_q5_0_avx2(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_legacy_avx2(TT_Q5_0, w, x, nb);
}

AVX2 float
dot_q5_1_avx2(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_legacy_avx2(TT_Q5_1, w, x, nb);
}

AVX2 void
widen_legacy_avx2(uint32_t type, const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	struct legacy_layout l = legacy_layout(type);
	int sub = l.m < 0 ? 16 : 0;

	if (type == TT_IQ4_NL) {
		widen_iq4_nl_avx2(src, dst, nb, wsum, wd);
		return;
	}
	for (size_t i = 0; i < nb; i++, src += l.bytes, dst += 34) {
		__m256i q = legacy_values(src, l);
		int32_t lo, hi;
		sum_u8_halves(q, &lo, &hi);
		_mm256_storeu_si256((__m256i *)(dst + 2), _mm256_sub_epi8(q, _mm256_set1_epi8((char)sub)));
		wsum[i] = -128 * (lo + hi - 32 * sub);
		wd[i] = f16c_load(src);
		if (l.m >= 0)
			wmin[i] = -f16c_load(src + l.m);
	}
}
#endif
