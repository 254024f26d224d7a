/*
 * Widening 4-bit weight rows into 34-byte int8 blocks (a Q8_0 block's
 * layout) so that prefill multiplies them with the one int8 GEMM.  A row
 * is widened once per batch and then used for every token of it, but at
 * 128 tokens the scalar widening still cost as much as the GEMM itself
 * (perf, Q4_K_M prefill on the 1B shape), so it has SIMD versions.
 *
 * Q4_0: d * (q - 8) is exactly a Q8_0 block (same fp16 scale).
 * Q4_K: sub-block j of 32 is d * sc_j * q - dmin * m_j with q in 0..15;
 * the int8 block holds q, and the scale, offset and -128 * sum(q) (what
 * the GEMM's unsigned activations need taken off) go to wd, wmin, wsum.
 * Q5_K: Q4_K with a fifth bit (bit j of qh[l] for sub-block j), q in
 * 0..31, through the same GEMM.
 * Q6_K: 16-element sub-blocks d * sc_k * (q - 32), q in 0..63; the int8
 * block holds q - 32 for two of them, with two scales and two sums
 * (gemm_q6_k).
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

static void
k4_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

void
widen_q4_0_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int16_t *sums)
{
	for (size_t b = 0; b < nb; b++, src += 18, dst += 34) {
		int s = 0;
		memcpy(dst, src, 2); /* the same fp16 scale */
		for (int i = 0; i < 16; i++) {
			int lo = (src[2 + i] & 0xf) - 8, hi = (src[2 + i] >> 4) - 8;
			dst[2 + i] = (uint8_t)(int8_t)lo;
			dst[2 + 16 + i] = (uint8_t)(int8_t)hi;
			s += lo + hi;
		}
		if (sums != NULL)
			sums[b] = (int16_t)s;
	}
}

/* Q4_K, and with five_bits Q5_K (its fifth bits in qh[32] before qs) */
static void
widen_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin, int five_bits)
{
	for (size_t sb = 0; sb < nb / 8; sb++, src += five_bits ? 176 : 144) {
		uint16_t hd, hm;
		memcpy(&hd, src, 2);
		memcpy(&hm, src + 2, 2);
		float d = fp16_to_f32(hd), dmin = fp16_to_f32(hm);
		const uint8_t *qh = src + 16, *q = src + (five_bits ? 48 : 16);
		for (int j = 0; j < 8; j++, dst += 34) {
			int s, m;
			k4_scale_min(j, src + 4, &s, &m);
			int32_t sum = 0;
			for (int l = 0; l < 32; l++) {
				uint8_t v = (j & 1) ? q[32 * (j / 2) + l] >> 4 : q[32 * (j / 2) + l] & 0xf;
				if (five_bits)
					v = (uint8_t)(v | (((qh[l] >> j) & 1) << 4));
				dst[2 + l] = v;
				sum += v;
			}
			size_t at = sb * 8 + (size_t)j;
			wsum[at] = -128 * sum;
			wd[at] = d * (float)s;
			wmin[at] = dmin * (float)m;
		}
	}
}

void
widen_q4_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	widen_k_scalar(src, dst, nb, wsum, wd, wmin, 0);
}

void
widen_q5_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	widen_k_scalar(src, dst, nb, wsum, wd, wmin, 1);
}

/* Q6_K super-block: ql[128] (low 4 bits), qh[64] (high 2), sc[16], d */
void
widen_q6_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	for (size_t sb = 0; sb < nb / 8; sb++, src += 210) {
		const uint8_t *ql = src, *qh = src + 128;
		const int8_t *sc = (const int8_t *)(src + 192);
		uint16_t h;
		memcpy(&h, src + 208, 2);
		float d = fp16_to_f32(h);
		int8_t v[256];
		for (int half = 0; half < 2; half++, ql += 64, qh += 32)
			for (int l = 0; l < 32; l++) {
				int8_t *o = v + 128 * half;
				o[l] = (int8_t)(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
				o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
				o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
				o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
			}
		for (int k = 0; k < 16; k++) { /* 16-element sub-blocks */
			int32_t sum = 0;
			for (int l = 0; l < 16; l++)
				sum += v[16 * k + l];
			wsum[sb * 16 + (size_t)k] = -128 * sum;
			wd[sb * 16 + (size_t)k] = d * (float)sc[k];
		}
		for (int b = 0; b < 8; b++, dst += 34)
			memcpy(dst + 2, v + 32 * b, 32);
	}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* sum of the 32 unsigned bytes of v */
AVX2 static inline int
sum_u8(__m256i v)
{
	__m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
	__m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
	return (int)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1));
}

AVX2 void
widen_q4_0_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int16_t *sums)
{
	const __m128i low = _mm_set1_epi8(0x0f);
	const __m256i eight = _mm256_set1_epi8(8);

	for (size_t b = 0; b < nb; b++, src += 18, dst += 34) {
		__m128i p = _mm_loadu_si128((const __m128i *)(src + 2));
		__m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(p, 4), low), _mm_and_si128(p, low));
		memcpy(dst, src, 2);
		_mm256_storeu_si256((__m256i *)(dst + 2), _mm256_sub_epi8(q, eight));
		if (sums != NULL)
			sums[b] = (int16_t)(sum_u8(q) - 8 * 32);
	}
}

/* Q4_K, and with five_bits Q5_K; the fifth bits, 2 sub-blocks a step, come
 * from qh shifted down 2 each step (srli on 16-bit lanes, masked per byte) */
AVX2 static inline __attribute__((always_inline)) void
widen_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin, int five_bits)
{
	const __m256i low = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);

	for (size_t sb = 0; sb < nb / 8; sb++, src += five_bits ? 176 : 144) {
		float d = f16c_load(src), dmin = f16c_load(src + 2);
		const uint8_t *qs = src + (five_bits ? 48 : 16);
		__m256i hb = five_bits ? _mm256_loadu_si256((const __m256i *)(src + 16)) : _mm256_setzero_si256();
		for (int p = 0; p < 4; p++, dst += 68, hb = _mm256_srli_epi16(hb, 2)) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
			__m256i lo = _mm256_or_si256(_mm256_and_si256(q, low),
						     _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
			__m256i hi =
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low),
						_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
			_mm256_storeu_si256((__m256i *)(dst + 2), lo);
			_mm256_storeu_si256((__m256i *)(dst + 36), hi);
			size_t at = sb * 8 + 2 * (size_t)p;
			wsum[at] = -128 * sum_u8(lo);
			wsum[at + 1] = -128 * sum_u8(hi);
			for (int k = 0; k < 2; k++) {
				int s, m;
				k4_scale_min(2 * p + k, src + 4, &s, &m);
				wd[at + k] = d * (float)s;
				wmin[at + k] = dmin * (float)m;
			}
		}
	}
}

AVX2 void
widen_q4_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	widen_k_avx2(src, dst, nb, wsum, wd, wmin, 0);
}

AVX2 void
widen_q5_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	widen_k_avx2(src, dst, nb, wsum, wd, wmin, 1);
}

AVX2 void
widen_q6_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd)
{
	const __m256i low = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);

	for (size_t sb = 0; sb < nb / 8; sb++, src += 210) {
		const uint8_t *ql = src, *qh = src + 128;
		const int8_t *sc = (const int8_t *)(src + 192);
		float d = f16c_load(src + 208);
		int32_t *ws = wsum + sb * 16;
		for (int half = 0; half < 2; half++, ql += 64, qh += 32) {
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i h = _mm256_loadu_si256((const __m256i *)qh);
			__m256i q[4] = {
				_mm256_or_si256(_mm256_and_si256(l0, low),
						_mm256_slli_epi16(_mm256_and_si256(h, two), 4)),
				_mm256_or_si256(_mm256_and_si256(l1, low),
						_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), two), 4)),
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low),
						_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), two), 4)),
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low),
						_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), two), 4)),
			};
			for (int b = 0; b < 4; b++, dst += 34) {
				int k = 8 * half + 2 * b;
				_mm256_storeu_si256((__m256i *)(dst + 2), _mm256_sub_epi8(q[b], off));
				sum_u8_halves(q[b], &ws[k], &ws[k + 1]);
				ws[k] = -128 * (ws[k] - 32 * 16);
				ws[k + 1] = -128 * (ws[k + 1] - 32 * 16);
			}
		}
		for (int k = 0; k < 16; k++)
			wd[sb * 16 + (size_t)k] = d * (float)sc[k];
	}
}
#endif
