/*
 * Q6_K weights repacked at load, 8 rows interleaved, for decode.
 *
 * A Q6_K super-block (256 weights, 210 bytes) is 128 bytes of low nibbles
 * and 64 of high bit pairs, in an order that spreads each 16-value
 * sub-block over three places, then 16 int8 scales and an fp16 d.  The
 * per-row dot (cpu_dot_kquants.c) spends a dozen instructions a 32 values
 * putting the six bits together, and one thread read 30-33 GB/s from L2:
 * about what a core reads from memory, so on a fast bus the arithmetic
 * was the limit.  Repacked, a sub-block of 8 rows is three 32-byte words,
 * row r in bytes 4r..4r+3 of each (as the other groups): word c holds
 * values 4c..4c+3 of the sub-block as 4q in bits 2..7 (q & 0xfc is the
 * value times 4, one instruction) and two bits of the fourth chunk's
 * values in bits 0..1, which three shifts and two selects put together.
 * A vpdpbusd with 4 activations broadcast then advances all 8 rows.
 *
 * An 8-row group stores, per super-block (Q6X8_BLOCK, 8 x 210 bytes):
 *   0            d of the 8 rows (fp16)
 *   16 + 8j      sub-block j's int8 scale of the 8 rows (j < 16)
 *   Q6X8_WORD(j, c) = 144 + 192 (j / 2) + 64c + 32 (j % 2), c < 3:
 *                word c of sub-block j,
 *                byte 4r + e = q[16j + 4c + e] << 2 | (q[16j + 12 + e] >> 2c) & 3
 * with q the row's values 0..63 in the order the dequantizer writes them.
 * Word c of sub-blocks j and j + 1 (j even) are 64 bytes side by side, so
 * that one token takes both in one 512-bit vector (gemv_q6_kx8_wide).
 * Prompts widen the groups straight into the int8 GEMM's blocks
 * (widen_q6_kx8, the bytes widen_q6_k makes of the file's rows); get_rows
 * and the scalar reference unpack a row back to the file's layout
 * (q6x8_unpack).
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#define Q6_SB_BYTES 210
#define Q6X8_SCALES 16
#define Q6X8_QUANTS 144
#define Q6X8_WORD(j, c) (Q6X8_QUANTS + 192 * ((j) / 2) + 64 * (c) + 32 * ((j) % 2))

/* A file super-block's 256 values (0..63) in the dequantizer's order, four
 * at a time in 32-bit words (no value carries into its neighbour). */
static void
q6_values(const uint8_t *b, uint8_t *q)
{
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 32; l += 4) {
			uint32_t lo0, lo1, hi;
			memcpy(&lo0, b + 64 * h + l, 4);
			memcpy(&lo1, b + 64 * h + 32 + l, 4);
			memcpy(&hi, b + 128 + 32 * h + l, 4);
			uint32_t v[4] = {
				(lo0 & 0x0f0f0f0f) | (hi & 0x03030303) << 4,
				(lo1 & 0x0f0f0f0f) | ((hi >> 2) & 0x03030303) << 4,
				((lo0 >> 4) & 0x0f0f0f0f) | ((hi >> 4) & 0x03030303) << 4,
				((lo1 >> 4) & 0x0f0f0f0f) | ((hi >> 6) & 0x03030303) << 4,
			};
			for (int k = 0; k < 4; k++)
				memcpy(q + 128 * h + 32 * k + l, &v[k], 4);
		}
}

void
q6x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	uint8_t q[256];

	dst += (size_t)g0 * nsb * Q6X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += Q6X8_BLOCK)
			for (int r = 0; r < 8; r++) {
				const uint8_t *b = src + (size_t)(8 * g + r) * row_bytes + i * Q6_SB_BYTES;
				memcpy(dst + 2 * r, b + 208, 2);
				for (int j = 0; j < 16; j++)
					dst[Q6X8_SCALES + 8 * j + r] = b[192 + j];
				q6_values(b, q);
				for (int j = 0; j < 16; j++) {
					uint32_t top;
					memcpy(&top, q + 16 * j + 12, 4);
					for (int c = 0; c < 3; c++) {
						uint32_t w;
						memcpy(&w, q + 16 * j + 4 * c, 4);
						w = w << 2 | ((top >> (2 * c)) & 0x03030303);
						memcpy(dst + Q6X8_WORD(j, c) + 4 * r, &w, 4);
					}
				}
			}
}

void
q6x8_unpack(const uint8_t *grp, int r, uint8_t *blk)
{
	uint8_t q[256];

	for (int j = 0; j < 16; j++) {
		uint32_t top = 0;
		for (int c = 0; c < 3; c++) {
			uint32_t w;
			memcpy(&w, grp + Q6X8_WORD(j, c) + 4 * r, 4);
			top |= (w & 0x03030303) << (2 * c);
			w = (w >> 2) & 0x3f3f3f3f;
			memcpy(q + 16 * j + 4 * c, &w, 4);
		}
		memcpy(q + 16 * j + 12, &top, 4);
	}
	/* the inverse of q6_values, four values a word */
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 32; l += 4) {
			uint32_t v[4];
			for (int k = 0; k < 4; k++)
				memcpy(&v[k], q + 128 * h + 32 * k + l, 4);
			uint32_t lo0 = (v[0] & 0x0f0f0f0f) | (v[2] & 0x0f0f0f0f) << 4;
			uint32_t lo1 = (v[1] & 0x0f0f0f0f) | (v[3] & 0x0f0f0f0f) << 4;
			uint32_t hi = ((v[0] >> 4) & 0x03030303) | ((v[1] >> 4) & 0x03030303) << 2 |
				      ((v[2] >> 4) & 0x03030303) << 4 | ((v[3] >> 4) & 0x03030303) << 6;
			memcpy(blk + 64 * h + l, &lo0, 4);
			memcpy(blk + 64 * h + 32 + l, &lo1, 4);
			memcpy(blk + 128 + 32 * h + l, &hi, 4);
		}
	for (int j = 0; j < 16; j++)
		blk[192 + j] = grp[Q6X8_SCALES + 8 * j + r];
	memcpy(blk + 208, grp + 2 * r, 2);
}

void
q6x8_dequantize_row(const uint8_t *grp, size_t nsb, int r, float *out)
{
	groups_dequantize_row(grp, nsb, Q6X8_BLOCK, q6x8_unpack, TT_Q6_K, r, out);
}

void
gemm_q6_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy)
{
	gemm_groups_q8k_scalar(grp, ng, Q6X8_BLOCK, q6x8_unpack, dot_q6_k_q8k_scalar, x, nsb, nt, y, ldy);
}

void
widen_q6_kx8_scalar(const uint8_t *grp, size_t nsb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum, float *wd,
		    size_t ld)
{
	uint8_t blk[Q6_SB_BYTES];

	for (size_t i = 0; i < nsb; i++, grp += Q6X8_BLOCK)
		for (int r = 0; r < 8; r++) {
			q6x8_unpack(grp, r, blk);
			widen_q6_k_scalar(blk, dst + (size_t)r * dst_row_bytes + i * 8 * 34, 8,
					  wsum + (size_t)r * ld + 16 * i, wd + (size_t)r * ld + 16 * i);
		}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* A sub-block's four chunks of 8 rows as unsigned bytes for the int8
 * products.  AVX-512 (vpdpbusd) takes them as they are stored, 4q: word c
 * & 0xfc, and the fourth chunk's two-bit pieces moved from bits 0..1 of
 * the three words to bits 2..3, 4..5 and 6..7, each select one vpternlogd
 * ((a & b) | c).  AVX2's vpmaddubsw sums byte pairs in int16, where 2 x
 * 252 x 127 would saturate: it takes q (at most 2 x 63 x 127).  A 16-bit
 * shift carries a byte's top bits into its neighbour's bottom ones; the
 * masks drop them. */
#define Q6X8_VALUE_VNNI(W, p) _mm##W##_and_si##W(p, _mm##W##_set1_epi8((char)0xfc))
#define Q6X8_TOP_VNNI(W, p0, p1, p2)                                                                                   \
	_mm##W##_ternarylogic_epi32(_mm##W##_slli_epi16(p2, 6), _mm##W##_set1_epi8((char)0xc0),                        \
				    _mm##W##_ternarylogic_epi32(_mm##W##_slli_epi16(p1, 4), _mm##W##_set1_epi8(0x30),  \
								_mm##W##_and_si##W(_mm##W##_slli_epi16(p0, 2),         \
										   _mm##W##_set1_epi8(0x0c)),          \
								0xea),                                                 \
				    0xea)
#define Q6X8_VALUE_AVX512(p) Q6X8_VALUE_VNNI(256, p)
#define Q6X8_TOP_AVX512(p0, p1, p2) Q6X8_TOP_VNNI(256, p0, p1, p2)
#define Q6X8_VALUE_AVX2(p) _mm256_and_si256(_mm256_srli_epi16(p, 2), _mm256_set1_epi8(0x3f))
#define Q6X8_TOP_AVX2(p0, p1, p2)                                                                                      \
	_mm256_or_si256(_mm256_or_si256(_mm256_and_si256(p0, _mm256_set1_epi8(0x03)),                                  \
					_mm256_and_si256(_mm256_slli_epi16(p1, 2), _mm256_set1_epi8(0x0c))),           \
			_mm256_and_si256(_mm256_slli_epi16(p2, 4), _mm256_set1_epi8(0x30)))

/* nt tokens (1..8, a constant where inlined; tokens' super-blocks nsb
 * apart from x) times one 8-row group, y[t * ldy + r].  For each
 * sub-block j of a super-block the sum starts at -32 QS * (its
 * activations' sum), the -32 of every value, takes the four chunks (each
 * value QS q), and is multiplied by the 8 rows' scales: exact in int32,
 * the super-block's QS * sum(sc * (q - 32) * x), scaled once by d * d_x /
 * QS (a power of two: the same bits for QS 1 and 4).  The integer sums are
 * exact and the float steps the same for every nt, so a token's outputs
 * are the same bits alone or in a batch. */
#define DEFINE_GEMM_Q6X8_NT(NAME, TARGET, U8I8_ACC, VALUE, TOP, QS)                                                    \
	TARGET static inline __attribute__((always_inline)) void NAME(const uint8_t *grp, const struct block_q8k *x,   \
								      size_t nsb, int nt, float *y, size_t ldy)        \
	{                                                                                                              \
		__m256 acc[8];                                                                                         \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t i = 0; i < nsb; i++, grp += Q6X8_BLOCK) {                                                  \
			GROUP_PREFETCH(grp, Q6X8_BLOCK, nt);                                                           \
			__m256i isum[8];                                                                               \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();         \
			_Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)                                          \
			{                                                                                              \
				const uint8_t *w = grp + Q6X8_WORD(j, 0);                                              \
				__m256i p0 = _mm256_loadu_si256((const __m256i *)w);                                   \
				__m256i p1 = _mm256_loadu_si256((const __m256i *)(w + 64));                            \
				__m256i p2 = _mm256_loadu_si256((const __m256i *)(w + 128));                           \
				__m256i v3 = TOP(p0, p1, p2);                                                          \
				p0 = VALUE(p0);                                                                        \
				p1 = VALUE(p1);                                                                        \
				p2 = VALUE(p2);                                                                        \
				__m256i sc = _mm256_cvtepi8_epi32(                                                     \
					_mm_loadl_epi64((const __m128i *)(grp + Q6X8_SCALES + 8 * j)));                \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                   \
				{                                                                                      \
					const struct block_q8k *xb = x + (size_t)t * nsb + i;                          \
					__m256i a = _mm256_set1_epi32(-32 * (QS)*xb->bsum[j]);                         \
					a = U8I8_ACC(a, p0, BCAST4_256(xb->q + 16 * j));                               \
					a = U8I8_ACC(a, p1, BCAST4_256(xb->q + 16 * j + 4));                           \
					a = U8I8_ACC(a, p2, BCAST4_256(xb->q + 16 * j + 8));                           \
					a = U8I8_ACC(a, v3, BCAST4_256(xb->q + 16 * j + 12));                          \
					isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(a, sc));                \
				}                                                                                      \
			}                                                                                              \
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));                            \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                           \
			{                                                                                              \
				__m256 xd = _mm256_set1_ps(x[(size_t)t * nsb + i].d / (QS));                           \
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(isum[t]), acc[t]);  \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);    \
	}

#define DEFINE_GEMM_Q6X8(NAME, TARGET, U8I8_ACC, VALUE, TOP, QS)                                                       \
	DEFINE_GEMM_Q6X8_NT(NAME##_nt, TARGET, U8I8_ACC, VALUE, TOP, QS)                                               \
	TARGET void NAME(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,          \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nsb *Q6X8_BLOCK, x, nsb, nt, y, ldy);                              \
	}

DEFINE_GEMM_Q6X8(gemm_q6_kx8_avx2, AVX2, U8I8_ACC_AVX2, Q6X8_VALUE_AVX2, Q6X8_TOP_AVX2, 1)
DEFINE_GEMM_Q6X8(gemm_q6_kx8_avx512, AVX512, U8I8_ACC_VNNI, Q6X8_VALUE_AVX512, Q6X8_TOP_AVX512, 4)

/*
 * One token with sub-blocks j and j + 1 (j even) a 512-bit vector: their
 * words c are 64 bytes side by side (Q6X8_WORD), so one load, the same
 * masks and one vpdpbusd take both.  The token's bytes for each half come
 * from one vpermd of its 32 bytes for the two, the two sub-blocks' scales
 * are 16 bytes widened at once, and the -32 QS * sums are one vpdpwssd
 * of the two int16 sums with (-32 QS, 0) in the low lanes and (0, -32 QS)
 * in the high ones.  In L2 one core took 80-95 GB/s of weights where the
 * 256-bit kernel took 50.  The halves are added once a super-block; the
 * integer sums are exact and the float steps the 256-bit kernel's, so the
 * results are its bits.  Where 512-bit vectors run whole
 * (set_pair_kernels, cpu_dot.c).  parts (a constant once inlined): the
 * lines of each pair of sub-blocks asked for as the kernel reaches them
 * (PART_PREFETCH, where cpu_stream_prefetch is on), else every line of
 * a block at its start.
 */
AVX512 static inline __attribute__((always_inline)) void
gemv_q6_kx8_wide_pf(const uint8_t *grp, const struct block_q8k *x, size_t nsb, float *y, int parts)
{
	const __m512i sel[4] = {
		_mm512_set_epi32(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0),
		_mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 1, 1, 1, 1, 1),
		_mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 2, 2, 2, 2, 2),
		_mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 3, 3, 3, 3, 3, 3, 3, 3),
	};
	/* (-32 QS, 0) and (0, -32 QS) as int16 pairs, QS = 4 */
	const __m512i bias =
		_mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(0xffff & -128), _mm512_set1_epi32(-128 * 65536));
	__m256 acc = _mm256_setzero_ps();

	for (size_t i = 0; i < nsb; i++, grp += Q6X8_BLOCK, x++) {
		/* elsewhere every line at the block's start, though
		 * cpu_stream_prefetch is off: on a Zen 5 at 73-82 GB/s,
		 * 68.6-72.5 tok/s against 58.2-59.3 with GROUP_PREFETCH's
		 * one line (docs/performance.md) */
		if (!parts)
			DENSE_PREFETCH(grp, Q6X8_BLOCK);
		__m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
		for (int j = 0; j < 16; j += 2) {
			if (parts)
				PART_PREFETCH(grp, Q6X8_BLOCK, j / 2, 8);
			const uint8_t *w = grp + Q6X8_WORD(j, 0);
			__m512i p0 = _mm512_loadu_si512(w);
			__m512i p1 = _mm512_loadu_si512(w + 64);
			__m512i p2 = _mm512_loadu_si512(w + 128);
			__m512i v3 = Q6X8_TOP_VNNI(512, p0, p1, p2);
			__m512i xq = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x->q + 16 * j)));
			__m512i sc =
				_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(grp + Q6X8_SCALES + 8 * j)));
			int32_t sums;
			memcpy(&sums, x->bsum + j, 4);
			__m512i a = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(sums), bias);
			a = _mm512_dpbusd_epi32(a, Q6X8_VALUE_VNNI(512, p0), _mm512_permutexvar_epi32(sel[0], xq));
			a = _mm512_dpbusd_epi32(a, Q6X8_VALUE_VNNI(512, p1), _mm512_permutexvar_epi32(sel[1], xq));
			a = _mm512_dpbusd_epi32(a, Q6X8_VALUE_VNNI(512, p2), _mm512_permutexvar_epi32(sel[2], xq));
			a = _mm512_dpbusd_epi32(a, v3, _mm512_permutexvar_epi32(sel[3], xq));
			isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(a, sc));
		}
		__m256i sum = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));
		acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x->d / 4)), _mm256_cvtepi32_ps(sum), acc);
	}
	_mm256_storeu_ps(y, acc);
}

AVX512 static void
gemv_q6_kx8_wide_avx512(const uint8_t *grp, const struct block_q8k *x, size_t nsb, float *y)
{
	if (STREAM_PREFETCH_WANTED(1))
		gemv_q6_kx8_wide_pf(grp, x, nsb, y, 1);
	else
		gemv_q6_kx8_wide_pf(grp, x, nsb, y, 0);
}

/* gemm_q6_kx8_avx512 with one token on the kernel above */
DEFINE_GEMM_X8_WIDE(gemm_q6_kx8_wide_avx512, Q6X8_BLOCK, gemm_q6_kx8_avx512, gemv_q6_kx8_wide_avx512)

/*
 * Two tokens a 512-bit vector (struct q8k_pair), as gemm_q4_kx8_pairs: a
 * sub-block's four chunks and scales widened to lane pairs once for every
 * pair of tokens.  The -32 QS * sum of each 16 activations is one
 * vpdpwssd of the pair's sums (token 0's two in even lanes, token 1's in
 * odd ones) with (-32 QS, 0) or (0, -32 QS); d_x / QS is d_x * (1 / QS),
 * the same float for a power of two.  The results are the bits of the
 * kernel above.
 */
AVX512 static inline __attribute__((always_inline)) void
gemm_q6_kx8_pairs_nt(const uint8_t *grp, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	const __m512i lanes = X8_PAIR_LANES;
	/* (-32 QS, 0) and (0, -32 QS) as int16 pairs, QS = 4 */
	const __m512i bias[2] = { _mm512_set1_epi32(0xffff & -128), _mm512_set1_epi32(-128 * 65536) };
	const int np = (nt + 1) / 2;
	__m512 acc[4];

#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	for (size_t i = 0; i < nsb; i++, grp += Q6X8_BLOCK) {
		GROUP_PREFETCH(grp, Q6X8_BLOCK, nt);
		__m512i isum[4];
#pragma GCC unroll 4
		for (int p = 0; p < np; p++)
			isum[p] = _mm512_setzero_si512();
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++) {
			const uint8_t *w = grp + Q6X8_WORD(j, 0);
			__m256i p0 = _mm256_loadu_si256((const __m256i *)w);
			__m256i p1 = _mm256_loadu_si256((const __m256i *)(w + 64));
			__m256i p2 = _mm256_loadu_si256((const __m256i *)(w + 128));
			__m512i c[4];
			c[3] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(Q6X8_TOP_AVX512(p0, p1, p2)));
			c[0] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(Q6X8_VALUE_AVX512(p0)));
			c[1] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(Q6X8_VALUE_AVX512(p1)));
			c[2] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(Q6X8_VALUE_AVX512(p2)));
			__m512i sc =
				_mm512_permutexvar_epi32(lanes,
							 _mm512_castsi256_si512(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
								 (const __m128i *)(grp + Q6X8_SCALES + 8 * j)))));
#pragma GCC unroll 4
			for (int p = 0; p < np; p++) {
				const struct q8k_pair *xb = x + (size_t)p * nsb + i;
				__m512i a = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
								BCAST8_512(xb->bsum + 4 * (j / 2)), bias[j % 2]);
				a = _mm512_dpbusd_epi32(a, c[0], BCAST8_512(xb->q + 32 * j));
				a = _mm512_dpbusd_epi32(a, c[1], BCAST8_512(xb->q + 32 * j + 8));
				a = _mm512_dpbusd_epi32(a, c[2], BCAST8_512(xb->q + 32 * j + 16));
				a = _mm512_dpbusd_epi32(a, c[3], BCAST8_512(xb->q + 32 * j + 24));
				isum[p] = _mm512_add_epi32(isum[p], _mm512_mullo_epi32(a, sc));
			}
		}
		__m512 dw = X8_HALVES_PAIRS(grp);
#pragma GCC unroll 4
		for (int p = 0; p < np; p++) {
			__m512 xd = _mm512_mul_ps(_mm512_castsi512_ps(BCAST8_512(x[(size_t)p * nsb + i].d)),
						  _mm512_set1_ps(1.0f / 4));
			acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(isum[p]), acc[p]);
		}
	}
	X8_PAIRS_STORE(acc, np, nt, y, ldy);
}

AVX512 void
gemm_q6_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	X8_GROUPS_BY_NT(gemm_q6_kx8_pairs_nt, grp, ng, nsb * Q6X8_BLOCK, x, nsb, nt, y, ldy);
}

/* widen_q6_kx8 (cpu_dot.h): a 32-value block of the 8 rows is sub-blocks
 * 2b and 2b+1's four chunks, eight words with row r in lane r; one 8 x 8
 * transpose gives each row its 32 values. */
AVX2 void
widen_q6_kx8_avx2(const uint8_t *grp, size_t nsb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum, float *wd,
		  size_t ld)
{
	const __m256i off = _mm256_set1_epi8(32);

	for (size_t i = 0; i < nsb; i++, grp += Q6X8_BLOCK) {
		float d[8];
		_mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp)));
		for (int b = 0; b < 8; b++) {
			__m256i v[8];
			for (int h = 0; h < 2; h++) {
				const uint8_t *w = grp + Q6X8_WORD(2 * b + h, 0);
				__m256i p0 = _mm256_loadu_si256((const __m256i *)w);
				__m256i p1 = _mm256_loadu_si256((const __m256i *)(w + 64));
				__m256i p2 = _mm256_loadu_si256((const __m256i *)(w + 128));
				v[4 * h + 3] = Q6X8_TOP_AVX2(p0, p1, p2);
				v[4 * h] = Q6X8_VALUE_AVX2(p0);
				v[4 * h + 1] = Q6X8_VALUE_AVX2(p1);
				v[4 * h + 2] = Q6X8_VALUE_AVX2(p2);
			}
			transpose8x8(v); /* v[r]: row r's 32 values */
			for (int r = 0; r < 8; r++) {
				int32_t *ws = wsum + (size_t)r * ld + 16 * i + 2 * b;
				_mm256_storeu_si256((__m256i *)(dst + (size_t)r * dst_row_bytes + (8 * i + b) * 34 + 2),
						    _mm256_sub_epi8(v[r], off));
				sum_u8_halves(v[r], &ws[0], &ws[1]);
				ws[0] = -128 * (ws[0] - 32 * 16);
				ws[1] = -128 * (ws[1] - 32 * 16);
			}
		}
		for (int j = 0; j < 16; j++)
			for (int r = 0; r < 8; r++)
				wd[(size_t)r * ld + 16 * i + j] = d[r] * (float)(int8_t)grp[Q6X8_SCALES + 8 * j + r];
	}
}
#endif
