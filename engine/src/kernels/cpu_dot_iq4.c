/*
 * IQ4_XS, the 4.25-bit non-linear type many published GGUF files come in
 * (and IQ4_NL, its levels in 32-value blocks of their own fp16 scale):
 * decode on Q8_K activations, and rows widened for the int8 GEMM in
 * prefill.  A 256-value super-block is d (fp16), 6-bit sub-block scales
 * (low four bits in scales_l[4], high two in scales_h) and 128 bytes of
 * 4-bit indices into IQ4_NL's sixteen int8 levels, 32 values a sub-block
 * (values j and j + 16 in byte j's nibbles):
 *   w = d * (ls_j - 32) * level[q]
 *   row . x = d * dx * sum_j (ls_j - 32) * sum(level[q] * xq)
 * The levels are int8 (-127..113), so a sub-block is one table lookup
 * (vpshufb) and one signed multiply-add from the int8 activations, and a
 * widened block is exactly the levels with the float scale d * (ls_j - 32).
 * The scalar versions are the reference the SIMD ones are tested against.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#define IQ4XS_BYTES 136

const int8_t iq4_nl_levels[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* Sub-block j's scale less 32. */
static inline int
iq4_xs_scale(const uint8_t *b, int j)
{
	unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;

	return (((b[4 + j / 2] >> (4 * (j % 2))) & 0xf) | (int)((sh >> (2 * j)) & 3) << 4) - 32;
}

/* Value l (0..31) of sub-block j. */
static inline int
iq4_xs_value(const uint8_t *b, int j, int l)
{
	uint8_t q = b[8 + 16 * j + l % 16];

	return iq4_nl_levels[l < 16 ? q & 0xf : q >> 4];
}

/* IQ4_NL against 32-value activation blocks: d * dx * sum(level[q] * xq) */
float
dot_iq4_nl_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nb; i++, b += 18) {
		int32_t acc = 0;
		for (int j = 0; j < 16; j++)
			acc += iq4_nl_levels[b[2 + j] & 0xf] * x[i].q[j] +
			       iq4_nl_levels[b[2 + j] >> 4] * x[i].q[j + 16];
		s += f16_at(b) * x[i].d * (float)acc;
	}
	return s;
}

/* IQ4_NL rows as 34-byte int8 blocks of the levels, wd = d and wsum = -128
 * * the block's sum (widen_legacy's contract) */
void
widen_iq4_nl_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	for (size_t i = 0; i < nb; i++, src += 18, dst += 34) {
		int32_t sum = 0;
		for (int j = 0; j < 32; j++) {
			int v = iq4_nl_levels[j < 16 ? src[2 + j] & 0xf : src[2 + j - 16] >> 4];
			dst[2 + j] = (uint8_t)(int8_t)v;
			sum += v;
		}
		wsum[i] = -128 * sum;
		wd[i] = f16_at(src);
	}
}

float
dot_iq4_xs_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nsb; i++, b += IQ4XS_BYTES, x++) {
		int32_t acc = 0;
		for (int j = 0; j < 8; j++) {
			int32_t sub = 0;
			for (int l = 0; l < 32; l++)
				sub += iq4_xs_value(b, j, l) * x->q[32 * j + l];
			acc += iq4_xs_scale(b, j) * sub;
		}
		s += f16_at(b) * x->d * (float)acc;
	}
	return s;
}

/* IQ4_XS rows as 34-byte int8 blocks of levels (a Q8_0 block's layout),
 * with wsum = -128 * sum and wd = d * (ls - 32) per block, for gemm_q8_0
 * (no offsets). */
void
widen_iq4_xs_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	for (size_t sb = 0; sb < nb / 8; sb++, src += IQ4XS_BYTES) {
		float d = f16_at(src);
		for (int j = 0; j < 8; j++, dst += 34) {
			int32_t sum = 0;
			for (int l = 0; l < 32; l++) {
				int v = iq4_xs_value(src, j, l);
				dst[2 + l] = (uint8_t)(int8_t)v;
				sum += v;
			}
			wsum[sb * 8 + (size_t)j] = -128 * sum;
			wd[sb * 8 + (size_t)j] = d * (float)iq4_xs_scale(src, j);
		}
	}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* The eight sub-block scales (less 32) as int16 lanes. */
AVX2 static inline __m128i
iq4_xs_scales16(const uint8_t *b)
{
	uint32_t lo, sh = (uint32_t)b[2] | (uint32_t)b[3] << 8;

	memcpy(&lo, b + 4, 4);
	/* nibble j of lo (j = 0..7, low first) and bits 2j..2j+1 of sh */
	__m128i v = _mm_setr_epi16((short)(lo & 0xf), (short)((lo >> 4) & 0xf), (short)((lo >> 8) & 0xf),
				   (short)((lo >> 12) & 0xf), (short)((lo >> 16) & 0xf), (short)((lo >> 20) & 0xf),
				   (short)((lo >> 24) & 0xf), (short)(lo >> 28));
	__m128i h = _mm_setr_epi16((short)(sh & 3), (short)((sh >> 2) & 3), (short)((sh >> 4) & 3),
				   (short)((sh >> 6) & 3), (short)((sh >> 8) & 3), (short)((sh >> 10) & 3),
				   (short)((sh >> 12) & 3), (short)(sh >> 14));
	return _mm_sub_epi16(_mm_or_si128(v, _mm_slli_epi16(h, 4)), _mm_set1_epi16(32));
}

/* Sub-block j's 32 levels: the low nibbles of its 16 bytes in the low
 * 128-bit lane, the high ones in the other, looked up in the table. */
AVX2 static inline __m256i
iq4_xs_levels(const uint8_t *b, int j, __m256i table)
{
	const __m128i low = _mm_set1_epi8(0xf);
	__m128i q = _mm_loadu_si128((const __m128i *)(b + 8 + 16 * j));
	__m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));

	return _mm256_shuffle_epi8(table, idx);
}

/* Two sub-blocks a step: their 32 bytes of indices give the low nibbles
 * of both (the first's in the low 128-bit lane) and the high nibbles of
 * both, against the activations' matching halves put side by side; the
 * scales 2k and 2k + 1 then serve one lane each (Q6_SCALE_PICK). */
#define DEFINE_IQ4_XS_Q8K_DOT(SUFFIX, TARGET, MADD16)                                                                  \
	TARGET static float dot_iq4_xs_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb)              \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_nl_levels));    \
		const __m256i low = _mm256_set1_epi8(0xf), pick[4] = Q6_SCALE_PICK;                                    \
		__m256 acc = _mm256_setzero_ps();                                                                      \
		for (size_t i = 0; i < nsb; i++, b += IQ4XS_BYTES, x++) {                                              \
			STREAM_PREFETCH(b, IQ4XS_BYTES);                                                               \
			__m256i sc = _mm256_broadcastsi128_si256(iq4_xs_scales16(b));                                  \
			/* two chains: one would wait on the multiply-add's latency 8 times */                         \
			__m256i d0 = _mm256_setzero_si256(), d1 = _mm256_setzero_si256();                              \
			_Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                                            \
			{                                                                                              \
				__m256i q = _mm256_loadu_si256((const __m256i *)(b + 8 + 32 * k));                     \
				__m256i va = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low));                     \
				__m256i vb =                                                                           \
					_mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low));    \
				__m256i x0 = _mm256_loadu_si256((const __m256i *)(x->q + 64 * k));                     \
				__m256i x1 = _mm256_loadu_si256((const __m256i *)(x->q + 64 * k + 32));                \
				__m256i xa = _mm256_permute2x128_si256(x0, x1, 0x20);                                  \
				__m256i xb = _mm256_permute2x128_si256(x0, x1, 0x31);                                  \
				/* |level| times x with the level's sign: pairs within int16 (2 x 127 x 127) */        \
				__m256i pa = _mm256_maddubs_epi16(_mm256_sign_epi8(va, va), _mm256_sign_epi8(xa, va)); \
				__m256i pb = _mm256_maddubs_epi16(_mm256_sign_epi8(vb, vb), _mm256_sign_epi8(xb, vb)); \
				__m256i s16 = _mm256_shuffle_epi8(sc, pick[k]);                                        \
				d0 = MADD16(d0, pa, s16);                                                              \
				d1 = MADD16(d1, pb, s16);                                                              \
			}                                                                                              \
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x->d),                                     \
					      _mm256_cvtepi32_ps(_mm256_add_epi32(d0, d1)), acc);                      \
		}                                                                                                      \
		return hsum256(acc);                                                                                   \
	}

DEFINE_IQ4_XS_Q8K_DOT(avx2, AVX2, MADD16_AVX2)
DEFINE_IQ4_XS_Q8K_DOT(avx512, AVX512, MADD16_VNNI)

AVX2 void
widen_iq4_xs_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_nl_levels));

	for (size_t sb = 0; sb < nb / 8; sb++, src += IQ4XS_BYTES) {
		float d = f16c_load(src);
		int16_t sc[8];
		_mm_storeu_si128((__m128i *)sc, iq4_xs_scales16(src));
		for (int j = 0; j < 8; j++, dst += 34) {
			__m256i v = iq4_xs_levels(src, j, table);
			int32_t lo, hi;
			_mm256_storeu_si256((__m256i *)(dst + 2), v);
			/* the levels + 128 are unsigned bytes: their sum less 32 x 128 */
			sum_u8_halves(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)), &lo, &hi);
			wsum[sb * 8 + (size_t)j] = -128 * (lo + hi - 32 * 128);
			wd[sb * 8 + (size_t)j] = d * (float)sc[j];
		}
	}
}

/* IQ4_NL: a block's levels by one lookup, |level| times x with its sign */
AVX2 float
dot_iq4_nl_avx2(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_nl_levels));
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();

	for (size_t i = 0; i < nb; i++, b += 18) {
		__m256i v = _mm256_shuffle_epi8(table, unpack_nibbles(b + 2));
		__m256i xq = _mm256_loadu_si256((const __m256i *)x[i].q);
		__m256i p = mul_sum_u8i8_avx2(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xq, v));
		acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x[i].d), _mm256_cvtepi32_ps(p), acc0);
		__m256 t = acc0; /* alternate the chains */
		acc0 = acc1;
		acc1 = t;
	}
	return hsum256(_mm256_add_ps(acc0, acc1));
}

AVX2 void
widen_iq4_nl_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_nl_levels));

	for (size_t i = 0; i < nb; i++, src += 18, dst += 34) {
		__m256i v = _mm256_shuffle_epi8(table, unpack_nibbles(src + 2));
		int32_t lo, hi;
		_mm256_storeu_si256((__m256i *)(dst + 2), v);
		/* the levels + 128 are unsigned bytes: their sum less 32 x 128 */
		sum_u8_halves(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)), &lo, &hi);
		wsum[i] = -128 * (lo + hi - 32 * 128);
		wd[i] = f16c_load(src);
	}
}

float (*dot_iq4_xs_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t)
{
	return avx512 ? dot_iq4_xs_q8k_avx512 : dot_iq4_xs_q8k_avx2;
}
#endif
