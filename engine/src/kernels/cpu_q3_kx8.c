/*
 * Q3_K weights repacked at load, 8 rows interleaved, for decode.
 *
 * A Q3_K super-block (256 weights, 110 bytes) is 32 bytes of high bits
 * (hmask), 64 of two-bit quants, twelve bytes of 6-bit scales for its
 * sixteen 16-value sub-blocks and an fp16 d; value u (0..7) takes two bits
 * from the quants and one from hmask (cpu_dot_lowbit.c), w = d * s_j * (u
 * - 4).  The per-row dot spends a compare, shifts and masks on every 32
 * values and decoded at 38 % of the bandwidth bound on 2 threads.
 * Repacked, the 32 values of sub-blocks 2p and 2p + 1 of 8 rows are three
 * 32-byte words, row r in bytes 4r..4r+3 of each (as the other groups),
 * each byte holding two whole values and a piece of a third, so that
 * shifts and masks on all 8 rows give a value a byte; a vpdpbusd with 4
 * activations broadcast then advances all 8 rows.
 *
 * An 8-row group stores, per super-block (Q3X8_BLOCK, 8 x 110 bytes):
 *   0    d of the 8 rows (fp16)
 *   16 + 32k + 4r, k < 3: scale bytes 4k..4k+3 of row r
 *   112 + 96p + 32c + 4r + e, c < 3: with U_m the value 32p + 4m + e of
 *        row r (m < 8; chunks 0..3 are sub-block 2p, 4..7 sub-block 2p+1)
 *        c 0: U_0 | U_1 << 3 | (U_6 & 3) << 6
 *        c 1: U_2 | U_3 << 3 | (U_7 & 3) << 6
 *        c 2: U_4 | U_5 << 3 | (U_6 >> 2) << 6 | (U_7 >> 2) << 7
 * Prompts unpack a group's super-blocks back to the file's layout and
 * widen them as they widen file rows; get_rows and the scalar reference
 * do the same.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#define Q3K_SB_BYTES 110
#define Q3X8_SCALES 16
#define Q3X8_QUANTS 112

/* The file's values 32p + 4m .. 32p + 4m + 3 (m < 8) of super-block b, a
 * byte each: value 128h + 32k + l is bits 2k of quant byte 32h + l and
 * bit 4h + k of hmask byte l (p = 4h + k). */
static inline uint32_t
q3_word(const uint8_t *b, int p, int m)
{
	int h = p / 4, k = p % 4;

	return ((group_word(b + 32 + 32 * h + 4 * m) >> (2 * k)) & 0x03030303) |
	       ((group_word(b + 4 * m) >> (4 * h + k)) & 0x01010101) << 2;
}

void
q3x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	dst += (size_t)g0 * nsb * Q3X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += Q3X8_BLOCK)
			for (int r = 0; r < 8; r++) {
				const uint8_t *b = src + (size_t)(8 * g + r) * row_bytes + i * Q3K_SB_BYTES;
				memcpy(dst + 2 * r, b + 108, 2);
				for (int k = 0; k < 3; k++)
					memcpy(dst + Q3X8_SCALES + 32 * k + 4 * r, b + 96 + 4 * k, 4);
				for (int p = 0; p < 8; p++) {
					uint32_t u[8];
					for (int m = 0; m < 8; m++)
						u[m] = q3_word(b, p, m);
					uint8_t *w = dst + Q3X8_QUANTS + 96 * p + 4 * r;
					group_word_put(w, u[0] | u[1] << 3 | (u[6] & 0x03030303) << 6);
					group_word_put(w + 32, u[2] | u[3] << 3 | (u[7] & 0x03030303) << 6);
					group_word_put(w + 64, u[4] | u[5] << 3 | ((u[6] >> 2) & 0x01010101) << 6 |
								       ((u[7] >> 2) & 0x01010101) << 7);
				}
			}
}

void
q3x8_unpack(const uint8_t *grp, int r, uint8_t *blk)
{
	memset(blk, 0, 96);
	for (int p = 0; p < 8; p++) {
		const uint8_t *w = grp + Q3X8_QUANTS + 96 * p + 4 * r;
		uint32_t w0 = group_word(w), w1 = group_word(w + 32), w2 = group_word(w + 64);
		uint32_t u[8] = {
			w0 & 0x07070707,
			(w0 >> 3) & 0x07070707,
			w1 & 0x07070707,
			(w1 >> 3) & 0x07070707,
			w2 & 0x07070707,
			(w2 >> 3) & 0x07070707,
			((w0 >> 6) & 0x03030303) | ((w2 >> 4) & 0x04040404),
			((w1 >> 6) & 0x03030303) | ((w2 >> 5) & 0x04040404),
		};
		int h = p / 4, k = p % 4;
		for (int m = 0; m < 8; m++) {
			uint8_t *q = blk + 32 + 32 * h + 4 * m, *hm = blk + 4 * m;
			group_word_put(q, group_word(q) | (u[m] & 0x03030303) << (2 * k));
			group_word_put(hm, group_word(hm) | ((u[m] >> 2) & 0x01010101) << (4 * h + k));
		}
	}
	for (int k = 0; k < 3; k++)
		memcpy(blk + 96 + 4 * k, grp + Q3X8_SCALES + 32 * k + 4 * r, 4);
	memcpy(blk + 108, grp + 2 * r, 2);
}

void
gemm_q3_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy)
{
	gemm_groups_q8k_scalar(grp, ng, Q3X8_BLOCK, q3x8_unpack, dot_q3_k_q8k_scalar, x, nsb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* Scale bytes j % 4 of the 8 rows' words a (as int32 lanes, less 32). */
#define Q3X8_SCALE(a, j)                                                                                               \
	_mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(a, 8 * ((j) % 4)), _mm256_set1_epi32(0xff)),               \
			 _mm256_set1_epi32(32))

/* nt tokens (1..8, a constant where inlined; tokens' super-blocks nsb
 * apart from x) times one 8-row group, y[t * ldy + r].  Sub-block j's
 * sum starts at -4 x (its activations' 16-value sum, which Q8_K keeps),
 * the -4 of every value, takes its four chunks of u, and is multiplied by
 * the 8 rows' scales: exact in int32, then scaled once a super-block by d
 * x d_x as the per-row dot does.  The same steps for every nt: a token's
 * outputs are the same bits alone or in a batch.  vpmaddubsw's pairs (2 x
 * 7 x 127) stay within int16, so AVX2 takes the same values. */
#define DEFINE_GEMM_Q3X8_NT(NAME, TARGET, U8I8_ACC)                                                                    \
	TARGET static inline __attribute__((always_inline)) void NAME(const uint8_t *grp, const struct block_q8k *x,   \
								      size_t nsb, int nt, float *y, size_t ldy)        \
	{                                                                                                              \
		const __m256i seven = _mm256_set1_epi8(7), three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);    \
		const __m256i lo4 = _mm256_set1_epi8(0xf), hi2 = _mm256_set1_epi8(3);                                  \
		__m256 acc[8];                                                                                         \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t i = 0; i < nsb; i++, grp += Q3X8_BLOCK) {                                                  \
			GROUP_PREFETCH(grp, Q3X8_BLOCK, nt);                                                           \
			/* the sixteen scales of the 8 rows: byte j % 4 of aux[j / 4] */                               \
			__m256i s0 = _mm256_loadu_si256((const __m256i *)(grp + Q3X8_SCALES));                         \
			__m256i s1 = _mm256_loadu_si256((const __m256i *)(grp + Q3X8_SCALES + 32));                    \
			__m256i s2 = _mm256_loadu_si256((const __m256i *)(grp + Q3X8_SCALES + 64));                    \
			__m256i aux[4] = {                                                                             \
				_mm256_or_si256(_mm256_and_si256(s0, lo4),                                             \
						_mm256_slli_epi32(_mm256_and_si256(s2, hi2), 4)),                      \
				_mm256_or_si256(_mm256_and_si256(s1, lo4),                                             \
						_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(s2, 2), hi2),     \
								  4)),                                                 \
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s0, 4), lo4),                       \
						_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(s2, 4), hi2),     \
								  4)),                                                 \
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s1, 4), lo4),                       \
						_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(s2, 6), hi2),     \
								  4)),                                                 \
			};                                                                                             \
			__m256i isum[8];                                                                               \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();         \
			_Pragma("GCC unroll 8") for (int p = 0; p < 8; p++)                                            \
			{                                                                                              \
				const uint8_t *w = grp + Q3X8_QUANTS + 96 * p;                                         \
				__m256i w0 = _mm256_loadu_si256((const __m256i *)w);                                   \
				__m256i w1 = _mm256_loadu_si256((const __m256i *)(w + 32));                            \
				__m256i w2 = _mm256_loadu_si256((const __m256i *)(w + 64));                            \
				/* 16-bit shifts carry a neighbour's bits in; the masks drop them */                   \
				__m256i u[8] = {                                                                       \
					_mm256_and_si256(w0, seven),                                                   \
					_mm256_and_si256(_mm256_srli_epi16(w0, 3), seven),                             \
					_mm256_and_si256(w1, seven),                                                   \
					_mm256_and_si256(_mm256_srli_epi16(w1, 3), seven),                             \
					_mm256_and_si256(w2, seven),                                                   \
					_mm256_and_si256(_mm256_srli_epi16(w2, 3), seven),                             \
					_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w0, 6), three),             \
							_mm256_and_si256(_mm256_srli_epi16(w2, 4), four)),             \
					_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w1, 6), three),             \
							_mm256_and_si256(_mm256_srli_epi16(w2, 5), four)),             \
				};                                                                                     \
				__m256i sa = Q3X8_SCALE(aux[p / 2], 2 * p), sb = Q3X8_SCALE(aux[p / 2], 2 * p + 1);    \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                   \
				{                                                                                      \
					const struct block_q8k *xb = x + (size_t)t * nsb + i;                          \
					const int8_t *xq = xb->q + 32 * p;                                             \
					__m256i a = _mm256_set1_epi32(-4 * xb->bsum[2 * p]);                           \
					__m256i b = _mm256_set1_epi32(-4 * xb->bsum[2 * p + 1]);                       \
					a = U8I8_ACC(a, u[0], BCAST4_256(xq));                                         \
					b = U8I8_ACC(b, u[4], BCAST4_256(xq + 16));                                    \
					a = U8I8_ACC(a, u[1], BCAST4_256(xq + 4));                                     \
					b = U8I8_ACC(b, u[5], BCAST4_256(xq + 20));                                    \
					a = U8I8_ACC(a, u[2], BCAST4_256(xq + 8));                                     \
					b = U8I8_ACC(b, u[6], BCAST4_256(xq + 24));                                    \
					a = U8I8_ACC(a, u[3], BCAST4_256(xq + 12));                                    \
					b = U8I8_ACC(b, u[7], BCAST4_256(xq + 28));                                    \
					isum[t] = _mm256_add_epi32(isum[t],                                            \
								   _mm256_add_epi32(_mm256_mullo_epi32(a, sa),         \
										    _mm256_mullo_epi32(b, sb)));       \
				}                                                                                      \
			}                                                                                              \
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));                            \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                           \
			{                                                                                              \
				__m256 xd = _mm256_set1_ps(x[(size_t)t * nsb + i].d);                                  \
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(isum[t]), acc[t]);  \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);    \
	}

#define DEFINE_GEMM_Q3X8(NAME, TARGET, U8I8_ACC)                                                                       \
	DEFINE_GEMM_Q3X8_NT(NAME##_nt, TARGET, U8I8_ACC)                                                               \
	TARGET void NAME(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,          \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nsb *Q3X8_BLOCK, x, nsb, nt, y, ldy);                              \
	}

DEFINE_GEMM_Q3X8(gemm_q3_kx8_avx2, AVX2, U8I8_ACC_AVX2)
DEFINE_GEMM_Q3X8(gemm_q3_kx8_avx512, AVX512, U8I8_ACC_VNNI)

/*
 * The same two tokens a 512-bit vector (struct q8k_pair), as Q2_K's
 * groups take them (cpu_q2_kx8.c): the quants and scale words widened to
 * lane pairs once a block for every pair; each sub-block's -4 x sum comes
 * from the pair's 16-value sums, token 0's in the even lanes.  The sums
 * are exact and the float steps the ones above: the results are their
 * bits.
 */
AVX512 static inline __attribute__((always_inline)) void
gemm_q3_kx8_pairs_nt(const uint8_t *grp, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	const __m512i seven = _mm512_set1_epi8(7), three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
	const __m512i lo4 = _mm512_set1_epi8(0xf), hi2 = _mm512_set1_epi8(3), byte = _mm512_set1_epi32(0xff);
	/* a token's two 16-bit sums (first, second) times (-4, 0) or (0, -4) */
	const __m512i first = _mm512_set1_epi32(0x0000fffc), second = _mm512_set1_epi32((int)0xfffc0000u);
	const int np = (nt + 1) / 2;
	__m512 acc[4];

#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	for (size_t i = 0; i < nsb; i++, grp += Q3X8_BLOCK) {
		GROUP_PREFETCH(grp, Q3X8_BLOCK, nt);
		__m512i s0 = X8_LOAD_PAIRS(grp + Q3X8_SCALES), s1 = X8_LOAD_PAIRS(grp + Q3X8_SCALES + 32),
			s2 = X8_LOAD_PAIRS(grp + Q3X8_SCALES + 64);
		__m512i aux[4] = {
			_mm512_or_si512(_mm512_and_si512(s0, lo4), _mm512_slli_epi32(_mm512_and_si512(s2, hi2), 4)),
			_mm512_or_si512(_mm512_and_si512(s1, lo4),
					_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s2, 2), hi2), 4)),
			_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s0, 4), lo4),
					_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s2, 4), hi2), 4)),
			_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s1, 4), lo4),
					_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s2, 6), hi2), 4)),
		};
		__m512i isum[4];
#pragma GCC unroll 4
		for (int p = 0; p < np; p++)
			isum[p] = _mm512_setzero_si512();
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			const uint8_t *w = grp + Q3X8_QUANTS + 96 * j;
			__m512i w0 = X8_LOAD_PAIRS(w), w1 = X8_LOAD_PAIRS(w + 32), w2 = X8_LOAD_PAIRS(w + 64);
			__m512i u[8] = {
				_mm512_and_si512(w0, seven),
				_mm512_and_si512(_mm512_srli_epi16(w0, 3), seven),
				_mm512_and_si512(w1, seven),
				_mm512_and_si512(_mm512_srli_epi16(w1, 3), seven),
				_mm512_and_si512(w2, seven),
				_mm512_and_si512(_mm512_srli_epi16(w2, 3), seven),
				_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(w0, 6), three),
						_mm512_and_si512(_mm512_srli_epi16(w2, 4), four)),
				_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(w1, 6), three),
						_mm512_and_si512(_mm512_srli_epi16(w2, 5), four)),
			};
			/* scale bytes (2j) % 4 and (2j + 1) % 4 of aux[j / 2], less 32 */
			__m512i sa = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(aux[j / 2], 8 * ((2 * j) % 4)),
								       byte),
						      _mm512_set1_epi32(32));
			__m512i sb =
				_mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(aux[j / 2], 8 * ((2 * j + 1) % 4)),
								  byte),
						 _mm512_set1_epi32(32));
#pragma GCC unroll 4
			for (int p = 0; p < np; p++) {
				const struct q8k_pair *xb = x + (size_t)p * nsb + i;
				__m512i sums = BCAST8_512(xb->bsum + 4 * j);
				__m512i a = _mm512_madd_epi16(sums, first), b = _mm512_madd_epi16(sums, second);
				X8_PAIR_SUBBLOCKS(a, b, u, xb->q + 8 * (8 * j));
				isum[p] = _mm512_add_epi32(isum[p], _mm512_add_epi32(_mm512_mullo_epi32(a, sa),
										     _mm512_mullo_epi32(b, sb)));
			}
		}
		__m512 dw = X8_HALVES_PAIRS(grp);
		X8K_PAIRS_SCALE(acc, isum, dw, x, nsb, i, np);
	}
	X8_PAIRS_STORE(acc, np, nt, y, ldy);
}

AVX512 void
gemm_q3_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	X8_GROUPS_BY_NT(gemm_q3_kx8_pairs_nt, grp, ng, nsb * Q3X8_BLOCK, x, nsb, nt, y, ldy);
}

/* q3x8_repack with the 8 rows' words transposed in registers, a row a
 * lane: the values u of all 8 rows then come out of whole vectors (the
 * word-at-a-time repack added a third to a 1B-class model's load). */
AVX2 void
q3x8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	const __m256i two = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);

	dst += (size_t)g0 * nsb * Q3X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += Q3X8_BLOCK) {
			const uint8_t *sb = src + (size_t)(8 * g) * row_bytes + i * Q3K_SB_BYTES, *b = sb;
			for (int r = 0; r < 8; r++, b += row_bytes) {
				memcpy(dst + 2 * r, b + 108, 2);
				for (int k = 0; k < 3; k++)
					memcpy(dst + Q3X8_SCALES + 32 * k + 4 * r, b + 96 + 4 * k, 4);
			}
			__m256i hm[8];
			for (int r = 0; r < 8; r++)
				hm[r] = _mm256_loadu_si256((const __m256i *)(sb + (size_t)r * row_bytes));
			transpose8x8(hm); /* hm[m] lane r: row r's hmask word m */
			for (int h = 0; h < 2; h++) {
				__m256i q[8];
				for (int r = 0; r < 8; r++)
					q[r] = _mm256_loadu_si256(
						(const __m256i *)(sb + (size_t)r * row_bytes + 32 + 32 * h));
				transpose8x8(q);
				for (int k = 0; k < 4; k++) {
					__m256i u[8];
					for (int m = 0; m < 8; m++)
						u[m] = _mm256_or_si256(
							_mm256_and_si256(_mm256_srli_epi32(q[m], 2 * k), two),
							_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hm[m],
													     4 * h + k),
											   one),
									  2));
					uint8_t *w = dst + Q3X8_QUANTS + 96 * (4 * h + k);
					_mm256_storeu_si256((__m256i *)w,
							    _mm256_or_si256(_mm256_or_si256(u[0],
											    _mm256_slli_epi32(u[1], 3)),
									    _mm256_slli_epi32(_mm256_and_si256(u[6],
													       two),
											      6)));
					_mm256_storeu_si256((__m256i *)(w + 32),
							    _mm256_or_si256(_mm256_or_si256(u[2],
											    _mm256_slli_epi32(u[3], 3)),
									    _mm256_slli_epi32(_mm256_and_si256(u[7],
													       two),
											      6)));
					__m256i top = _mm256_or_si256(
						_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u[6], 2), one), 6),
						_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u[7], 2), one),
								  7));
					_mm256_storeu_si256((__m256i *)(w + 64),
							    _mm256_or_si256(_mm256_or_si256(u[4],
											    _mm256_slli_epi32(u[5], 3)),
									    top));
				}
			}
		}
}
#endif
