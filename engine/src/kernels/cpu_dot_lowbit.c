/*
 * Q2_K and Q3_K, the 2- and 3-bit K-quants (Q2_K and Q3_K_M files, the
 * smallest a model comes in): decode on Q8_K activations, and Q3_K's rows
 * widened for the int8 GEMM in prefill.  Before these, both took the float
 * path (every weight dequantized to float for every token): a 1B-class
 * Q3_K_M generated 6.7 tokens/s where llama.cpp did 31.6.
 *
 * Both have 16-value sub-blocks in Q6_K's order (value 128h + 32k + l,
 * l < 32, in sub-block 8h + 2k + l / 16), two bits of each value at bits
 * 2k of byte 32h + l of the quants, so a super-block is summed as
 * dot_q6_k_q8k sums one, in int32, and converted once:
 *   Q3_K: w = d * s_j * (u - 4), u in 0..7 (the two bits and bit 4h + k
 *         of hmask[l]), s_j in -32..31 from twelve bytes of 6-bit scales;
 *         row . x = d * dx * (sum_j s_j * sum(u * xq) - 4 * sum_j s_j * bsum_j)
 *   Q2_K: w = d * sc_j * q - dmin * m_j, q in 0..3, sc_j and m_j 4 bits;
 *         row . x = dx * (d * sum_j sc_j * sum(q * xq) - dmin * sum_j m_j * bsum_j)
 * The scalar versions are the reference the SIMD ones are tested against.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"
#include "dequant_chunk.h"

#define Q2K_BYTES 84
#define Q3K_BYTES 110

/* Q3_K's sixteen 6-bit scales, less 32 (dq_q3_k_scale's reading) */
static inline void
q3_k_scales(const uint8_t *p, int8_t out[16])
{
	for (int j = 0; j < 16; j++)
		out[j] = (int8_t)dq_q3_k_scale(p, j);
}

/* Value 128h + 32k + l of a Q3_K super-block as u = q + 4, 0..7. */
static inline int
q3_k_u(const uint8_t *b, int v)
{
	int h = v / 128, k = v % 128 / 32, l = v % 32;

	return ((b[32 + 32 * h + l] >> (2 * k)) & 3) | ((b[l] >> (4 * h + k)) & 1) << 2;
}

float
dot_q3_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nsb; i++, b += Q3K_BYTES, x++) {
		int8_t sc[16];
		int32_t acc = 0;
		q3_k_scales(b + 96, sc);
		for (int j = 0; j < 16; j++) {
			int32_t sub = 0;
			for (int l = 0; l < 16; l++)
				sub += q3_k_u(b, 16 * j + l) * x->q[16 * j + l];
			acc += sc[j] * (sub - 4 * x->bsum[j]);
		}
		s += f16_at(b + 108) * x->d * (float)acc;
	}
	return s;
}

float
dot_q2_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nsb; i++, b += Q2K_BYTES, x++) {
		int32_t dots = 0, mins = 0;
		for (int j = 0; j < 16; j++) {
			int32_t sub = 0;
			for (int l = 0; l < 16; l++) {
				int v = 16 * j + l;
				sub += ((b[16 + 32 * (v / 128) + v % 32] >> (2 * (v % 128 / 32))) & 3) * x->q[v];
			}
			dots += (b[j] & 0xf) * sub;
			mins += (b[j] >> 4) * x->bsum[j];
		}
		s += f16_at(b + 80) * x->d * (float)dots - f16_at(b + 82) * x->d * (float)mins;
	}
	return s;
}

/* Q3_K rows as widen_q6_k writes Q6_K's: u - 4 in 34-byte blocks (two
 * sub-blocks each), and per sub-block wsum = -128 * sum and wd = d * s_j,
 * for gemm_q6_k. */
void
widen_q3_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	for (size_t sb = 0; sb < nb / 8; sb++, src += Q3K_BYTES) {
		int8_t sc[16];
		float d = f16_at(src + 108);
		q3_k_scales(src + 96, sc);
		for (int j = 0; j < 16; j++) {
			int32_t sum = 0;
			for (int l = 0; l < 16; l++) {
				int q = q3_k_u(src, 16 * j + l) - 4;
				dst[34 * (j / 2) + 2 + 16 * (j % 2) + l] = (uint8_t)(int8_t)q;
				sum += q;
			}
			wsum[sb * 16 + (size_t)j] = -128 * sum;
			wd[sb * 16 + (size_t)j] = d * (float)sc[j];
		}
		dst += 8 * 34;
	}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* q3_k_scales in a vector: four 32-bit words put together (byte j of
 * word w is scale 4w + j), no byte stores that a vector load would wait
 * on (a loop of them was half the dot's time) */
AVX2 static inline __m128i
q3_k_scales_sse(const uint8_t *p)
{
	const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
	uint32_t a0, a1, a2;

	memcpy(&a0, p, 4);
	memcpy(&a1, p + 4, 4);
	memcpy(&a2, p + 8, 4);
	__m128i s = _mm_setr_epi32((int)((a0 & lo4) | (a2 & hi2) << 4), (int)((a1 & lo4) | ((a2 >> 2) & hi2) << 4),
				   (int)(((a0 >> 4) & lo4) | ((a2 >> 4) & hi2) << 4),
				   (int)(((a1 >> 4) & lo4) | ((a2 >> 6) & hi2) << 4));
	return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

/* The 32 values u (Q3_K, 0..7) of block k of half h: two bits from the
 * half's quants q, the third from hmask's bit 4h + k. */
AVX2 static inline __m256i
q3_k_block(__m256i q, __m256i hm, int h, int k)
{
	const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
	__m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + k)));
	__m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), four);

	return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * k), three), hi);
}

/* The 16-value sums of a super-block's 256 values v (unsigned, 0..7 or
 * 0..3; quants at qs, 32 bytes a half) times the activations, each times
 * its sub-block's int16 scale in sc16, added up in 8 int32 lanes; BLOCK
 * gives block k of half h from the half's 32 bytes. */
#define LOWBIT_SUPER_DOT(qs, sc16, xq, BLOCK, MADD16, out)                                                             \
	do {                                                                                                           \
		const __m256i pick_[4] = Q6_SCALE_PICK;                                                                \
		/* four chains: one would wait on the multiply-add's latency 8 times */                                \
		__m256i d_[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),              \
				  _mm256_setzero_si256() };                                                            \
		_Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                                                    \
		{                                                                                                      \
			__m256i q_ = _mm256_loadu_si256((const __m256i *)((qs) + 32 * h));                             \
			__m256i sch_ =                                                                                 \
				h ? _mm256_permute4x64_epi64(sc16, 0xee) : _mm256_permute4x64_epi64(sc16, 0x44);       \
			_Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                                            \
			{                                                                                              \
				__m256i x_ = _mm256_loadu_si256((const __m256i *)((xq) + 128 * h + 32 * k));           \
				/* pairs of 0..7 times -127..127: within int16 */                                      \
				__m256i p_ = _mm256_maddubs_epi16(BLOCK(q_, h, k), x_);                                \
				d_[k] = MADD16(d_[k], p_, _mm256_shuffle_epi8(sch_, pick_[k]));                        \
			}                                                                                              \
		}                                                                                                      \
		(out) = _mm256_add_epi32(_mm256_add_epi32(d_[0], d_[1]), _mm256_add_epi32(d_[2], d_[3]));              \
	} while (0)

#define Q3_BLOCK(q, h, k) q3_k_block(q, hm, h, k)
#define Q2_BLOCK(q, h, k) _mm256_and_si256(_mm256_srli_epi16(q, 2 * (k)), _mm256_set1_epi8(3))

#define DEFINE_LOWBIT_Q8K_DOTS(SUFFIX, TARGET, MADD16)                                                                 \
	TARGET static float dot_q3_k_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb)                \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		__m256 acc = _mm256_setzero_ps();                                                                      \
		for (size_t i = 0; i < nsb; i++, b += Q3K_BYTES, x++) {                                                \
			STREAM_PREFETCH(b, Q3K_BYTES);                                                                 \
			__m256i sc16 = _mm256_cvtepi8_epi16(q3_k_scales_sse(b + 96));                                  \
			/* 4 * sum_j s_j * bsum_j: the -4 of every value */                                            \
			__m256i off =                                                                                  \
				_mm256_slli_epi32(_mm256_madd_epi16(sc16,                                              \
								    _mm256_loadu_si256((const __m256i *)x->bsum)),     \
						  2);                                                                  \
			__m256i hm = _mm256_loadu_si256((const __m256i *)b), dots;                                     \
			LOWBIT_SUPER_DOT(b + 32, sc16, x->q, Q3_BLOCK, MADD16, dots);                                  \
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b + 108) * x->d),                               \
					      _mm256_cvtepi32_ps(_mm256_sub_epi32(dots, off)), acc);                   \
		}                                                                                                      \
		return hsum256(acc);                                                                                   \
	}                                                                                                              \
	TARGET static float dot_q2_k_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb)                \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		const __m128i low = _mm_set1_epi8(0xf);                                                                \
		__m256 acc = _mm256_setzero_ps();                                                                      \
		for (size_t i = 0; i < nsb; i++, b += Q2K_BYTES, x++) {                                                \
			STREAM_PREFETCH(b, Q2K_BYTES);                                                                 \
			__m128i s8 = _mm_loadu_si128((const __m128i *)b);                                              \
			__m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, low));                                   \
			__m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), low));                 \
			__m256i mins = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)x->bsum)), dots;     \
			LOWBIT_SUPER_DOT(b + 16, sc16, x->q, Q2_BLOCK, MADD16, dots);                                  \
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b + 80) * x->d), _mm256_cvtepi32_ps(dots),      \
					      acc);                                                                    \
			acc = _mm256_fnmadd_ps(_mm256_set1_ps(f16c_load(b + 82) * x->d), _mm256_cvtepi32_ps(mins),     \
					       acc);                                                                   \
		}                                                                                                      \
		return hsum256(acc);                                                                                   \
	}

DEFINE_LOWBIT_Q8K_DOTS(avx2, AVX2, MADD16_AVX2)
DEFINE_LOWBIT_Q8K_DOTS(avx512, AVX512, MADD16_VNNI)

AVX2 void
widen_q3_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	const __m256i four = _mm256_set1_epi8(4);

	for (size_t sb = 0; sb < nb / 8; sb++, src += Q3K_BYTES) {
		int8_t sc[16];
		float d = f16c_load(src + 108);
		int32_t *ws = wsum + sb * 16;
		__m256i hm = _mm256_loadu_si256((const __m256i *)src);
		_mm_storeu_si128((__m128i *)sc, q3_k_scales_sse(src + 96));
		for (int h = 0; h < 2; h++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(src + 32 + 32 * h));
			for (int k = 0; k < 4; k++, dst += 34) {
				__m256i u = q3_k_block(q, hm, h, k);
				int j = 8 * h + 2 * k;
				_mm256_storeu_si256((__m256i *)(dst + 2), _mm256_sub_epi8(u, four));
				sum_u8_halves(u, &ws[j], &ws[j + 1]);
				ws[j] = -128 * (ws[j] - 4 * 16);
				ws[j + 1] = -128 * (ws[j + 1] - 4 * 16);
			}
		}
		for (int j = 0; j < 16; j++)
			wd[sb * 16 + (size_t)j] = d * (float)sc[j];
	}
}

float (*dot_q3_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t)
{
	return avx512 ? dot_q3_k_q8k_avx512 : dot_q3_k_q8k_avx2;
}

float (*dot_q2_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t)
{
	return avx512 ? dot_q2_k_q8k_avx512 : dot_q2_k_q8k_avx2;
}
#endif
