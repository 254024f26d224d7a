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
#include <math.h>
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

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

/* Sub-block j (32 values) of the Q4_K/Q5_K super-block at b times the
 * int8 activations xq: q in 0..15, or 0..31 with Q5_K's fifth bits (in
 * qh[32] before the nibbles). */
static int32_t
k45_sub_dot(const uint8_t *b, int j, const int8_t *xq, int five_bits)
{
	const uint8_t *qh = b + 16, *qq = b + (five_bits ? 48 : 16) + 32 * (j / 2);
	int32_t dot = 0;

	for (int l = 0; l < 32; l++) {
		int v = (j & 1) ? (qq[l] >> 4) : (qq[l] & 0xf);
		if (five_bits)
			v |= ((qh[l] >> j) & 1) << 4;
		dot += v * xq[l];
	}
	return dot;
}

/* Q4_K, and with five_bits Q5_K */
static float
dot_k45_scalar(const void *w, const struct block_q8 *x, size_t nb, int five_bits)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nb / 8; i++, b += five_bits ? 176 : 144, x += 8) {
		float d = f16_at(b), dmin = f16_at(b + 2);
		for (int j = 0; j < 8; j++) {
			int sc, m;
			k4_scale_min(j, b + 4, &sc, &m);
			int32_t acc = k45_sub_dot(b, j, x[j].q, five_bits);
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
		float d = f16_at(b + 208);
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

void
quantize_q8k_scalar(const float *x, struct block_q8k *out, size_t n)
{
	for (size_t b = 0; b < n / 256; b++, x += 256) {
		float amax = 0.0f;
		for (int j = 0; j < 256; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		for (int j = 0; j < 16; j++) {
			int32_t sum = 0;
			for (int l = 0; l < 16; l++) {
				out[b].q[16 * j + l] = (int8_t)lrintf(x[16 * j + l] * id);
				sum += out[b].q[16 * j + l];
			}
			out[b].bsum[j] = (int16_t)sum;
		}
		out[b].d = d;
	}
}

float
dot_q6_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb)
{
	const uint8_t *b = w;
	float s = 0.0f;
	uint8_t q[128];

	for (size_t i = 0; i < nsb; i++, b += 210, x++) {
		const int8_t *sc = (const int8_t *)(b + 192);
		int32_t acc = 0;
		for (int h = 0; h < 2; h++) {
			q6_unpack_half(b + 64 * h, b + 128 + 32 * h, q);
			for (int l = 0; l < 128; l++)
				acc += sc[8 * h + l / 16] * (q[l] - 32) * x->q[128 * h + l];
		}
		s += f16_at(b + 208) * x->d * (float)acc;
	}
	return s;
}

/* Q4_K (Q5_K with five_bits) against Q8_K activations: each super-block
 * summed in integers, sc_j * sum(q * x) and m_j * sum(x) over its eight
 * sub-blocks, then scaled once by d and dmin. */
static float
dot_k45_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb, int five_bits)
{
	const uint8_t *b = w;
	float s = 0.0f;

	for (size_t i = 0; i < nsb; i++, b += five_bits ? 176 : 144, x++) {
		int32_t acc = 0, macc = 0;
		for (int j = 0; j < 8; j++) {
			int sc, m;
			k4_scale_min(j, b + 4, &sc, &m);
			acc += sc * k45_sub_dot(b, j, x->q + 32 * j, five_bits);
			macc += m * (x->bsum[2 * j] + x->bsum[2 * j + 1]);
		}
		s += x->d * (f16_at(b) * (float)acc - f16_at(b + 2) * (float)macc);
	}
	return s;
}

float
dot_q4_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb)
{
	return dot_k45_q8k_scalar(w, x, nsb, 0);
}

float
dot_q5_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb)
{
	return dot_k45_q8k_scalar(w, x, nsb, 1);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* Sum of products of 32 unsigned by 32 signed bytes, as 8 int32 lanes
 * (products of 4 neighbours per lane). */
#define U8I8_AVX2(a, b) _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
#define U8I8_VNNI(a, b) _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)

/* A Q6_K half super-block's 128 values (0..63) as four vectors of 32
 * bytes, in the order q6_unpack_half() writes them; low = 0x0f and
 * three = 0x03 in every byte. */
#define Q6_UNPACK_HALF(ql, qh, low, three, v)                                                                          \
	do {                                                                                                           \
		__m256i l0_ = _mm256_loadu_si256((const __m256i *)(ql));                                               \
		__m256i l1_ = _mm256_loadu_si256((const __m256i *)((ql) + 32));                                        \
		__m256i hh_ = _mm256_loadu_si256((const __m256i *)(qh));                                               \
		(v)[0] = _mm256_or_si256(_mm256_and_si256(l0_, low),                                                   \
					 _mm256_slli_epi16(_mm256_and_si256(hh_, three), 4));                          \
		(v)[1] = _mm256_or_si256(_mm256_and_si256(l1_, low),                                                   \
					 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh_, 2), three), 4));    \
		(v)[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0_, 4), low),                             \
					 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh_, 4), three), 4));    \
		(v)[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1_, 4), low),                             \
					 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh_, 6), three), 4));    \
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
			STREAM_PREFETCH(b, 176);                                                                       \
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
			_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                            \
			{                                                                                              \
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
			STREAM_PREFETCH(b, 210);                                                                       \
			const int8_t *sc = (const int8_t *)(b + 192);                                                  \
			float d = f16c_load(b + 208);                                                                  \
			/* the sixteen scales as floats, eight per half super-block */                                 \
			const __m256 sc_lo =                                                                           \
				_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc)));        \
			const __m256 sc_hi =                                                                           \
				_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8))));  \
			for (int h = 0; h < 2; h++, x += 4) {                                                          \
				const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;                                \
				__m256i v[4];                                                                          \
				Q6_UNPACK_HALF(ql, qh, low, three, v);                                                 \
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

/* Q6_K against Q8_K activations: a super-block is summed in int32 (the
 * bytes multiplied in pairs, the pairs times their 16-value scale, -32
 * taken once from the activations' 16-value sums) and converted once. */
#define DEFINE_Q6K_Q8K_DOT(SUFFIX, TARGET, MADD16)                                                                     \
	TARGET static float dot_q6_k_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb)                \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		__m256 acc = _mm256_setzero_ps();                                                                      \
		const __m256i low = _mm256_set1_epi8(0xf), three = _mm256_set1_epi8(3);                                \
		const __m256i pick[4] = Q6_SCALE_PICK;                                                                 \
		for (size_t i = 0; i < nsb; i++, b += 210, x++) {                                                      \
			STREAM_PREFETCH(b, 210);                                                                       \
			__m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));              \
			/* 32 * sum_j sc_j * bsum_j: the -32 of every value */                                         \
			__m256i off =                                                                                  \
				_mm256_slli_epi32(_mm256_madd_epi16(sc16,                                              \
								    _mm256_loadu_si256((const __m256i *)x->bsum)),     \
						  5);                                                                  \
			/* four chains: one would wait on vpdpwssd's latency 8 times */                                \
			__m256i dots[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),    \
					    _mm256_setzero_si256() };                                                  \
			_Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                                            \
			{                                                                                              \
				const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;                                \
				/* the half's eight scales in both 128-bit lanes */                                    \
				__m256i sch = h ? _mm256_permute4x64_epi64(sc16, 0xee)                                 \
						: _mm256_permute4x64_epi64(sc16, 0x44);                                \
				__m256i v[4];                                                                          \
				Q6_UNPACK_HALF(ql, qh, low, three, v);                                                 \
				_Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                                    \
				{                                                                                      \
					__m256i xq = _mm256_loadu_si256((const __m256i *)(x->q + 128 * h + 32 * k));   \
					/* pairs of 0..63 times -127..127: within int16 */                             \
					__m256i p16 = _mm256_maddubs_epi16(v[k], xq);                                  \
					dots[k] = MADD16(dots[k], p16, _mm256_shuffle_epi8(sch, pick[k]));             \
				}                                                                                      \
			}                                                                                              \
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b + 208) * x->d),                               \
					      _mm256_cvtepi32_ps(                                                      \
						      _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(dots[0],      \
													 dots[1]),     \
											_mm256_add_epi32(dots[2],      \
													 dots[3])),    \
								       off)),                                          \
					      acc);                                                                    \
		}                                                                                                      \
		return hsum256(acc);                                                                                   \
	}

DEFINE_Q6K_Q8K_DOT(avx2, AVX2, MADD16_AVX2)
DEFINE_Q6K_Q8K_DOT(avx512, AVX512, MADD16_VNNI)

/* One Q6_K row times nt tokens (2..8, a constant where inlined): the
 * row's values unpacked and its scales shuffled once for every token, the
 * rest as dot_q6_k_q8k, whose float steps these repeat so that a token
 * gets the same bits alone or in a batch.  Up to 4 tokens keep two
 * chains each. */
#define DEFINE_Q6K_Q8K_DOTS(SUFFIX, TARGET, MADD16)                                                                    \
	TARGET static inline                                                                                           \
		__attribute__((always_inline)) void dots_q6_k_q8k_nt_##SUFFIX(const void *w,                           \
									      const struct block_q8k *x, size_t nsb,   \
									      int nt, float *y, size_t ldy)            \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		const __m256i low = _mm256_set1_epi8(0xf), three = _mm256_set1_epi8(3);                                \
		const __m256i pick[4] = Q6_SCALE_PICK;                                                                 \
		__m256 acc[8];                                                                                         \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t i = 0; i < nsb; i++, b += 210) {                                                           \
			if (nt >= BATCH_PREFETCH_TOKENS) /* a decode batch (cpu_x86.h) */                              \
				STREAM_PREFETCH_NT(b, 210, nt);                                                        \
			__m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));              \
			__m256i d0[8], d1[8];                                                                          \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) d0[t] = d1[t] = _mm256_setzero_si256();   \
			_Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                                            \
			{                                                                                              \
				const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;                                \
				__m256i sch = h ? _mm256_permute4x64_epi64(sc16, 0xee)                                 \
						: _mm256_permute4x64_epi64(sc16, 0x44);                                \
				__m256i v[4], s[4];                                                                    \
				Q6_UNPACK_HALF(ql, qh, low, three, v);                                                 \
				_Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) s[k] =                             \
					_mm256_shuffle_epi8(sch, pick[k]);                                             \
				_Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)                                    \
				{                                                                                      \
					_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                           \
					{                                                                              \
						__m256i xq = _mm256_loadu_si256(                                       \
							(const __m256i *)(x[(size_t)t * nsb + i].q + 128 * h +         \
									  32 * k));                                    \
						__m256i p16 = _mm256_maddubs_epi16(v[k], xq);                          \
						if (nt <= 4 && (k & 1))                                                \
							d1[t] = MADD16(d1[t], p16, s[k]);                              \
						else                                                                   \
							d0[t] = MADD16(d0[t], p16, s[k]);                              \
					}                                                                              \
				}                                                                                      \
			}                                                                                              \
			float dw = f16c_load(b + 208);                                                                 \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                           \
			{                                                                                              \
				const struct block_q8k *xt = x + (size_t)t * nsb + i;                                  \
				__m256i off =                                                                          \
					_mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256(                  \
											  (const __m256i *)xt->bsum)), \
							  5);                                                          \
				__m256i sum = nt <= 4 ? _mm256_add_epi32(d0[t], d1[t]) : d0[t];                        \
				acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xt->d),                                   \
							 _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, off)), acc[t]);      \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) y[(size_t)t * ldy] = hsum256(acc[t]);             \
	}                                                                                                              \
	TARGET static void dots_q6_k_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb, int nt,        \
						  float *y, size_t ldy)                                                \
	{                                                                                                              \
		if (nt == 1) {                                                                                         \
			y[0] = dot_q6_k_q8k_##SUFFIX(w, x, nsb);                                                       \
			return;                                                                                        \
		}                                                                                                      \
		/* the row as one group of one, the token count a constant */                                          \
		X8_GROUPS_BY_NT(dots_q6_k_q8k_nt_##SUFFIX, (const uint8_t *)w, 1, 0, x, nsb, nt, y, ldy);              \
	}

DEFINE_Q6K_Q8K_DOTS(avx2, AVX2, MADD16_AVX2)
DEFINE_Q6K_Q8K_DOTS(avx512, AVX512, MADD16_VNNI)

/* The twelve bytes of a Q4_K/Q5_K super-block's 6-bit scales and mins
 * (k4_scale_min) unpacked in a vector: bytes 0-7 the scales, 8-15 the
 * mins.  Reads 16 bytes from p: the 4 after are the block's quants. */
AVX2 static inline __m128i
k4_scales_mins(const uint8_t *p)
{
	__m128i v = _mm_loadu_si128((const __m128i *)p);           /* words u0 u1 u2 */
	__m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x3f));        /* sc0-3, m0-3 */
	__m128i t = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 2, 2)); /* u2 u2 u0 u1 */
	/* low four bits of sc4-7 and m4-7 from u2, top two from u0 and u1 */
	__m128i hi4 = _mm_and_si128(_mm_srlv_epi32(t, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0f));
	__m128i top = _mm_and_si128(_mm_srli_epi32(t, 2), _mm_set1_epi8(0x30));
	__m128i hi = _mm_or_si128(hi4, _mm_shuffle_epi32(top, _MM_SHUFFLE(3, 2, 3, 2)));
	return _mm_unpacklo_epi32(lo, hi); /* sc0-3 sc4-7 m0-3 m4-7 */
}

/* Q4_K and Q5_K against Q8_K activations: per sub-block one vpmaddubsw
 * (q * x in pairs, within int16: 31 * 127 * 2) and one vpdpwssd with its
 * scale, where the 32-value dot converted and scaled every sub-block in
 * float (compute-bound at about 17 GB/s a core here); the mins come from
 * the activations' 16-value sums, one vpmaddwd a super-block. */
#define DEFINE_K45_Q8K_DOT(SUFFIX, TARGET, MADD16)                                                                     \
	TARGET static inline                                                                                           \
		__attribute__((always_inline)) float dot_k45_q8k_##SUFFIX(const void *w, const struct block_q8k *x,    \
									  size_t nsb, int five_bits)                   \
	{                                                                                                              \
		const uint8_t *b = w;                                                                                  \
		__m256 acc = _mm256_setzero_ps(), mins = acc;                                                          \
		const __m256i low = _mm256_set1_epi8(0xf), one = _mm256_set1_epi8(1);                                  \
		for (size_t i = 0; i < nsb; i++, b += five_bits ? 176 : 144, x++) {                                    \
			STREAM_PREFETCH(b, 176);                                                                       \
			__m128i smv = k4_scales_mins(b + 4);                                                           \
			/* m_j twice, against the sums of values 16(2j).. and 16(2j+1).. */                            \
			__m256i mdot = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(smv, smv)),            \
							 _mm256_loadu_si256((const __m256i *)x->bsum));                \
			/* the scales as int16 in both 128-bit lanes, for vpshufb */                                   \
			__m256i sc = _mm256_permute4x64_epi64(_mm256_cvtepu8_epi16(smv), 0x44);                        \
			__m256i hb =                                                                                   \
				five_bits ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();    \
			/* four chains: one would wait on vpdpwssd's latency 8 times */                                \
			__m256i dots[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),    \
					    _mm256_setzero_si256() };                                                  \
			_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                            \
			{                                                                                              \
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
				/* int16 scale 2p, then 2p+1, in every lane */                                         \
				__m256i s0 = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0404 * p))); \
				__m256i s1 = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0302 + 0x0404 * p))); \
				__m256i p0 =                                                                           \
					_mm256_maddubs_epi16(q0,                                                       \
							     _mm256_loadu_si256((const __m256i *)(x->q + 64 * p)));    \
				__m256i p1 = _mm256_maddubs_epi16(q1, _mm256_loadu_si256(                              \
									      (const __m256i *)(x->q + 64 * p + 32))); \
				dots[p] = MADD16(MADD16(dots[p], p0, s0), p1, s1);                                     \
			}                                                                                              \
			__m256i dot = _mm256_add_epi32(_mm256_add_epi32(dots[0], dots[1]),                             \
						       _mm256_add_epi32(dots[2], dots[3]));                            \
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b) * x->d), _mm256_cvtepi32_ps(dot), acc);      \
			mins = _mm256_fmadd_ps(_mm256_set1_ps(f16c_load(b + 2) * x->d), _mm256_cvtepi32_ps(mdot),      \
					       mins);                                                                  \
		}                                                                                                      \
		return hsum256(_mm256_sub_ps(acc, mins));                                                              \
	}                                                                                                              \
                                                                                                                       \
	TARGET static float dot_q4_k_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb)                \
	{                                                                                                              \
		return dot_k45_q8k_##SUFFIX(w, x, nsb, 0);                                                             \
	}                                                                                                              \
                                                                                                                       \
	TARGET static float dot_q5_k_q8k_##SUFFIX(const void *w, const struct block_q8k *x, size_t nsb)                \
	{                                                                                                              \
		return dot_k45_q8k_##SUFFIX(w, x, nsb, 1);                                                             \
	}

DEFINE_K45_Q8K_DOT(avx2, AVX2, MADD16_AVX2)
DEFINE_K45_Q8K_DOT(avx512, AVX512, MADD16_VNNI)

float (*dot_q4_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t)
{
	return avx512 ? dot_q4_k_q8k_avx512 : dot_q4_k_q8k_avx2;
}

float (*dot_q5_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t)
{
	return avx512 ? dot_q5_k_q8k_avx512 : dot_q5_k_q8k_avx2;
}

float (*dot_q6_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t)
{
	return avx512 ? dot_q6_k_q8k_avx512 : dot_q6_k_q8k_avx2;
}

AVX2 void
quantize_q8k_avx2(const float *x, struct block_q8k *out, size_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);

	for (size_t b = 0; b < n / 256; b++, x += 256) {
		__m256 m = _mm256_setzero_ps();
		for (int j = 0; j < 32; j++)
			m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * j)));
		__m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
		m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
		float d = _mm_cvtss_f32(m4) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		__m256 mul = _mm256_set1_ps(id);
		for (int j = 0; j < 8; j++) { /* 32 values: two 16-value sums */
			const float *xj = x + 32 * j;
			__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xj), mul));
			__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xj + 8), mul));
			__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xj + 16), mul));
			__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xj + 24), mul));
			/* the two sums: lanes of i0 + i1 and of i2 + i3, added across */
			__m256i s01 = _mm256_add_epi32(i0, i1), s23 = _mm256_add_epi32(i2, i3);
			__m256i h = _mm256_hadd_epi32(s01, s23); /* 128-bit lanes: s01 pairs, s23 pairs */
			h = _mm256_hadd_epi32(h, h);
			__m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
			out[b].bsum[2 * j] = (int16_t)_mm_cvtsi128_si32(t);
			out[b].bsum[2 * j + 1] = (int16_t)_mm_extract_epi32(t, 1);
			__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
			p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
			_mm256_storeu_si256((__m256i *)(out[b].q + 32 * j), p);
		}
		out[b].d = d;
	}
}

void (*dots_q6_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t, int, float *, size_t)
{
	return avx512 ? dots_q6_k_q8k_avx512 : dots_q6_k_q8k_avx2;
}

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
