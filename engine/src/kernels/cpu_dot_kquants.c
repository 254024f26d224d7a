/*
 * Integer dot products of Q4_K and Q6_K weight rows with activations
 * quantized to 32-element int8 blocks (struct block_q8), so the k-quants
 * (and the Q4_K_M mix) generate at memory speed instead of dequantizing
 * every weight to float for every token.
 *
 * Q4_K: w = d * sc_j * q - dmin * m_j over sub-blocks j of 32, q in 0..15:
 *   row . x = sum_j dx_j * (d * sc_j * sum(q * xq) - dmin * m_j * sum(xq))
 * Q6_K: w = d * sc_k * (q - 32) over sub-blocks k of 16, q in 0..63.
 * The scalar versions are the reference the SIMD ones are tested against.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

static float
f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return fp16_to_f32(h);
}

/* Sub-block j's 6-bit scale and min (same packing as the dequantizer). */
static inline void
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

/* Q6_K element values 0..63 of half h (128 elements) into out[128]. */
static inline void
q6_unpack_half(const uint8_t *ql, const uint8_t *qh, uint8_t *out)
{
	for (int l = 0; l < 32; l++) {
		out[l] = (uint8_t)((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4));
		out[l + 32] = (uint8_t)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4));
		out[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
		out[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
	}
}

/* Q4_K, and with five_bits Q5_K (fifth bits in qh[32] before the nibbles) */
static float
dot_k45_scalar(const void *w, const struct block_q8 *x, size_t nb, int five_bits)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nb / 8; i++, b += five_bits ? 176 : 144, x += 8) {
		float d = f16(b), dmin = f16(b + 2);
		const uint8_t *qh = b + 16, *q = b + (five_bits ? 48 : 16);
		for (int j = 0; j < 8; j++) {
			int sc, m;
			k4_scale_min(j, b + 4, &sc, &m);
			const uint8_t *qq = q + 32 * (j / 2);
			int32_t acc = 0;
			for (int l = 0; l < 32; l++) {
				int v = (j & 1) ? (qq[l] >> 4) : (qq[l] & 0xf);
				if (five_bits)
					v |= ((qh[l] >> j) & 1) << 4;
				acc += v * x[j].q[l];
			}
			s += x[j].d * (d * sc * (float)acc - dmin * m * (float)x[j].sum);
		}
	}
	return s;
}

float
dot_q4_k_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_k45_scalar(w, x, nb, 0);
}

float
dot_q5_k_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	return dot_k45_scalar(w, x, nb, 1);
}

float
dot_q6_k_scalar(const void *w, const struct block_q8 *x, size_t nb)
{
	const uint8_t *b = w;
	float s = 0.0f;
	uint8_t q[128];

	for (size_t i = 0; i < nb / 8; i++, b += 210) {
		const int8_t *sc = (const int8_t *)(b + 192);
		float d = f16(b + 208);
		for (int h = 0; h < 2; h++, x += 4) {
			q6_unpack_half(b + 64 * h, b + 128 + 32 * h, q);
			for (int k = 0; k < 4; k++) { /* one 32-element activation block */
				int32_t a0 = 0, a1 = 0;
				for (int l = 0; l < 16; l++) {
					a0 += (q[32 * k + l] - 32) * x[k].q[l];
					a1 += (q[32 * k + 16 + l] - 32) * x[k].q[16 + l];
				}
				s += d * x[k].d * (float)(sc[8 * h + 2 * k] * a0 + sc[8 * h + 2 * k + 1] * a1);
			}
		}
	}
	return s;
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* Sum of products of 32 unsigned by 32 signed bytes, as 8 int32 lanes
 * (products of 4 neighbours per lane). */
#define U8I8_AVX2(a, b) _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
#define U8I8_VNNI(a, b) _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)

/* Decode streams each row once: ask for the super-blocks 2 KB ahead (the
 * hardware prefetcher restarts at every 4 KB page), a line per 64 bytes. */
#define KQ_PREFETCH(b, bytes)                                                                                          \
	do {                                                                                                           \
		for (int pf = 0; pf < (bytes); pf += 64)                                                               \
			_mm_prefetch((const char *)(b) + 2048 + pf, _MM_HINT_T0);                                      \
	} while (0)

/* One template, compiled for AVX2 and for AVX-512 VNNI. */
#define DEFINE_KQUANT_DOTS(SUFFIX, TARGET, U8I8)                                                                       \
	TARGET static inline                                                                                           \
		__attribute__((always_inline)) float dot_k45_##SUFFIX(const void *w, const struct block_q8 *x,         \
								      size_t nb, int five_bits)                        \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		/* two sums: one chain of multiply-adds would wait on its latency */                                   \
		__m256 acc = _mm256_setzero_ps(), acc1 = acc, mins = acc;                                              \
		const __m256i low = _mm256_set1_epi8(0xf), one = _mm256_set1_epi8(1);                                  \
		float dd[8];                                                                                           \
		for (size_t i = 0; i < nb / 8; i++, b += five_bits ? 176 : 144, x += 8) {                              \
			KQ_PREFETCH(b, 176);                                                                           \
			/* the eight 6-bit scales and mins at once, then each times   \
			 * its activation block's scale: one vector per super-block */                                \
			uint32_t u[3], sc[2], mn[2];                                                                   \
			memcpy(u, b + 4, 12);                                                                          \
			sc[0] = u[0] & 0x3f3f3f3f;                                                                     \
			sc[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);                               \
			mn[0] = u[1] & 0x3f3f3f3f;                                                                     \
			mn[1] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);                        \
			__m256 xd = _mm256_setr_ps(x[0].d, x[1].d, x[2].d, x[3].d, x[4].d, x[5].d, x[6].d, x[7].d);    \
			__m256 xs =                                                                                    \
				_mm256_setr_ps((float)x[0].sum, (float)x[1].sum, (float)x[2].sum, (float)x[3].sum,     \
					       (float)x[4].sum, (float)x[5].sum, (float)x[6].sum, (float)x[7].sum);    \
			__m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc)));   \
			__m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn)));   \
			__m256i hb =                                                                                   \
				five_bits ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();    \
			_mm256_storeu_ps(dd, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16c_load(b)), scf), xd));     \
			mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(f16c_load(b + 2)), mnf),                   \
					       _mm256_mul_ps(xd, xs), mins);                                           \
			for (int p = 0; p < 4; p++) {                                                                  \
				__m256i raw =                                                                          \
					_mm256_loadu_si256((const __m256i *)(b + (five_bits ? 48 : 16) + 32 * p));     \
				__m256i hq = _mm256_srli_epi16(hb, 2 * p); /* Q5_K's fifth bits of 2p, 2p+1 */         \
				__m256i q0 = _mm256_or_si256(_mm256_and_si256(raw, low),                               \
							     _mm256_slli_epi16(_mm256_and_si256(hq, one), 4));         \
				__m256i q1 =                                                                           \
					_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low),              \
							_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hq, 1),   \
											   one),                       \
									  4));                                         \
				__m256i p0 = U8I8(q0, _mm256_loadu_si256((const __m256i *)x[2 * p].q));                \
				__m256i p1 = U8I8(q1, _mm256_loadu_si256((const __m256i *)x[2 * p + 1].q));            \
				acc = _mm256_fmadd_ps(_mm256_set1_ps(dd[2 * p]), _mm256_cvtepi32_ps(p0), acc);         \
				acc1 = _mm256_fmadd_ps(_mm256_set1_ps(dd[2 * p + 1]), _mm256_cvtepi32_ps(p1), acc1);   \
			}                                                                                              \
		}                                                                                                      \
		return hsum256(_mm256_add_ps(acc, acc1)) - hsum256(mins);                                              \
	}                                                                                                              \
                                                                                                                       \
	TARGET static float dot_q4_k_##SUFFIX(const void *w, const struct block_q8 *x, size_t nb)                      \
	{                                                                                                              \
		return dot_k45_##SUFFIX(w, x, nb, 0);                                                                  \
	}                                                                                                              \
                                                                                                                       \
	TARGET static float dot_q5_k_##SUFFIX(const void *w, const struct block_q8 *x, size_t nb)                      \
	{                                                                                                              \
		return dot_k45_##SUFFIX(w, x, nb, 1);                                                                  \
	}                                                                                                              \
                                                                                                                       \
	TARGET static float dot_q6_k_##SUFFIX(const void *w, const struct block_q8 *x, size_t nb)                      \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		__m256 acc = _mm256_setzero_ps(), acc1 = acc;                                                          \
		const __m256i low = _mm256_set1_epi8(0xf), three = _mm256_set1_epi8(3);                                \
		const __m256i half_idx[4] = { _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),                               \
					      _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),                               \
					      _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5),                               \
					      _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7) };                             \
		const __m256i m32 = _mm256_set1_epi8(32);                                                              \
		for (size_t i = 0; i < nb / 8; i++, b += 210) {                                                        \
			KQ_PREFETCH(b, 210);                                                                           \
			const int8_t *sc = (const int8_t *)(b + 192);                                                  \
			float d = f16c_load(b + 208);                                                                  \
			/* the sixteen scales as floats, eight per half super-block */                                 \
			const __m256 sc_lo =                                                                           \
				_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc)));        \
			const __m256 sc_hi =                                                                           \
				_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8))));  \
			for (int h = 0; h < 2; h++, x += 4) {                                                          \
				const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;                                \
				__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);                                  \
				__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));                           \
				__m256i hh = _mm256_loadu_si256((const __m256i *)qh);                                  \
				__m256i v[4];                                                                          \
				v[0] = _mm256_or_si256(_mm256_and_si256(l0, low),                                      \
						       _mm256_slli_epi16(_mm256_and_si256(hh, three), 4));             \
				v[1] = _mm256_or_si256(_mm256_and_si256(l1, low),                                      \
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 2),    \
											  three),                      \
									 4));                                          \
				v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low),                \
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 4),    \
											  three),                      \
									 4));                                          \
				v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low),                \
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 6),    \
											  three),                      \
									 4));                                          \
				const __m256 scf = h ? sc_hi : sc_lo;                                                  \
				for (int k = 0; k < 4; k++) {                                                          \
					__m256i xq = _mm256_loadu_si256((const __m256i *)x[k].q);                      \
					/* (q - 32) * x = q * x - 32 * x, both from unsigned q */                      \
					__m256i pr = _mm256_sub_epi32(U8I8(v[k], xq), U8I8(m32, xq));                  \
					/* lanes 0-3 are the block's first 16 values, 4-7 its last */                  \
					__m256 sv = _mm256_mul_ps(_mm256_permutevar8x32_ps(scf, half_idx[k]),          \
								  _mm256_set1_ps(d * x[k].d));                         \
					if (k & 1)                                                                     \
						acc1 = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(pr), acc1);              \
					else                                                                           \
						acc = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(pr), acc);                \
				}                                                                                      \
			}                                                                                              \
		}                                                                                                      \
		return hsum256(_mm256_add_ps(acc, acc1));                                                              \
	}

DEFINE_KQUANT_DOTS(avx2, AVX2, U8I8_AVX2)
DEFINE_KQUANT_DOTS(avx512, AVX512, U8I8_VNNI)

float (*dot_q4_k_simd(int avx512))(const void *, const struct block_q8 *, size_t)
{
	return avx512 ? dot_q4_k_avx512 : dot_q4_k_avx2;
}

float (*dot_q5_k_simd(int avx512))(const void *, const struct block_q8 *, size_t)
{
	return avx512 ? dot_q5_k_avx512 : dot_q5_k_avx2;
}

float (*dot_q6_k_simd(int avx512))(const void *, const struct block_q8 *, size_t)
{
	return avx512 ? dot_q6_k_avx512 : dot_q6_k_avx2;
}
#endif
