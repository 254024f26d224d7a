/*
 * Q2_K weights repacked at load, 8 rows interleaved, for decode and
 * prompts.
 *
 * A Q2_K super-block (256 weights, 84 bytes) is sixteen bytes of 4-bit
 * scales (low nibble) and mins (high nibble) for its 16-value sub-blocks,
 * 64 bytes of two-bit quants in Q6_K's order (cpu_dot_lowbit.c), an fp16
 * d and dmin: w = d * sc_j * q - dmin * m_j.  The per-row dot decoded at
 * 47-50 % of the bandwidth bound on 2 threads, and prompts ran it a token at
 * a time (Q2_K has no GEMM).  Repacked, the 32 values of sub-blocks 2p and
 * 2p + 1 of 8 rows are two 32-byte words, row r in bytes 4r..4r+3 of each
 * (as the other groups), four values a byte: one shift and one mask on all
 * 8 rows give a value a byte for vpdpbusd, and 8 tokens a pass read each
 * unpacked chunk 8 times.
 *
 * An 8-row group stores, per super-block (Q2X8_BLOCK, 8 x 84 bytes):
 *   0    d of the 8 rows (fp16)
 *   16   dmin of the 8 rows
 *   32 + 32w + 4r, w < 4: scale bytes 4w..4w+3 of row r
 *   160 + 64p + 32c + 4r + e, c < 2: U_4c | U_4c+1 << 2 | U_4c+2 << 4 |
 *        U_4c+3 << 6, with U_m the value 32p + 4m + e of row r (chunks
 *        0..3 are sub-block 2p, 4..7 sub-block 2p + 1)
 * get_rows and the scalar reference unpack a row back to the file's
 * layout.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#define Q2K_SB_BYTES 84
#define Q2X8_SCALES 32
#define Q2X8_QUANTS 160

void
q2x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	dst += (size_t)g0 * nsb * Q2X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += Q2X8_BLOCK)
			for (int r = 0; r < 8; r++) {
				const uint8_t *b = src + (size_t)(8 * g + r) * row_bytes + i * Q2K_SB_BYTES;
				memcpy(dst + 2 * r, b + 80, 2);
				memcpy(dst + 16 + 2 * r, b + 82, 2);
				for (int w = 0; w < 4; w++)
					memcpy(dst + Q2X8_SCALES + 32 * w + 4 * r, b + 4 * w, 4);
				/* value 128h + 32k + l: bits 2k of quant byte 32h + l */
				for (int p = 0; p < 8; p++)
					for (int c = 0; c < 2; c++) {
						uint32_t v = 0;
						for (int m = 0; m < 4; m++)
							v |= ((group_word(b + 16 + 32 * (p / 4) + 16 * c + 4 * m) >>
							       (2 * (p % 4))) &
							      0x03030303)
							     << (2 * m);
						group_word_put(dst + Q2X8_QUANTS + 64 * p + 32 * c + 4 * r, v);
					}
			}
}

void
q2x8_unpack(const uint8_t *grp, int r, uint8_t *blk)
{
	memset(blk + 16, 0, 64);
	for (int p = 0; p < 8; p++)
		for (int c = 0; c < 2; c++) {
			uint32_t v = group_word(grp + Q2X8_QUANTS + 64 * p + 32 * c + 4 * r);
			for (int m = 0; m < 4; m++) {
				uint8_t *q = blk + 16 + 32 * (p / 4) + 16 * c + 4 * m;
				group_word_put(q, group_word(q) | ((v >> (2 * m)) & 0x03030303) << (2 * (p % 4)));
			}
		}
	for (int w = 0; w < 4; w++)
		memcpy(blk + 4 * w, grp + Q2X8_SCALES + 32 * w + 4 * r, 4);
	memcpy(blk + 80, grp + 2 * r, 2);
	memcpy(blk + 82, grp + 16 + 2 * r, 2);
}

void
gemm_q2_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy)
{
	gemm_groups_q8k_scalar(grp, ng, Q2X8_BLOCK, q2x8_unpack, dot_q2_k_q8k_scalar, x, nsb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* nt tokens (1..8, a constant where inlined; tokens' super-blocks nsb
 * apart from x) times one 8-row group, y[t * ldy + r].  Each sub-block's
 * sum of q x activations is multiplied by the 8 rows' scales, and the
 * mins go in one vpdpwssd a sub-block pair, mins j and j + 1 against
 * Q8_K's two 16-value sums; both exact in int32, then scaled once a
 * super-block by d x d_x and dmin x d_x as the per-row dot does.  The
 * same steps for every nt: a token's outputs are the same bits alone or
 * in a batch. */
#define DEFINE_GEMM_Q2X8_NT(NAME, TARGET, U8I8_ACC, I16_ACC)                                                           \
	TARGET static inline __attribute__((always_inline)) void NAME(const uint8_t *grp, const struct block_q8k *x,   \
								      size_t nsb, int nt, float *y, size_t ldy)        \
	{                                                                                                              \
		const __m256i three = _mm256_set1_epi8(3), low = _mm256_set1_epi32(0xf);                               \
		__m256 acc[8];                                                                                         \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t i = 0; i < nsb; i++, grp += Q2X8_BLOCK) {                                                  \
			GROUP_PREFETCH(grp, Q2X8_BLOCK, nt);                                                           \
			__m256i isum[8], msum[8];                                                                      \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) isum[t] = msum[t] =                       \
				_mm256_setzero_si256();                                                                \
			_Pragma("GCC unroll 8") for (int p = 0; p < 8; p++)                                            \
			{                                                                                              \
				/* scale bytes 2p and 2p + 1: bits 16 (p % 2).. of word p / 2 */                       \
				__m256i s = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(grp + Q2X8_SCALES + \
												   32 * (p / 2))),     \
							      16 * (p % 2));                                           \
				__m256i sa = _mm256_and_si256(s, low);                                                 \
				__m256i sb = _mm256_and_si256(_mm256_srli_epi32(s, 8), low);                           \
				/* the two mins as int16 lanes (m_2p, m_2p+1) */                                       \
				__m256i mt = _mm256_srli_epi32(s, 4);                                                  \
				__m256i mp =                                                                           \
					_mm256_or_si256(_mm256_and_si256(mt, low),                                     \
							_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(mt, 8),   \
											   low),                       \
									  16));                                        \
				const uint8_t *w = grp + Q2X8_QUANTS + 64 * p;                                         \
				__m256i w0 = _mm256_loadu_si256((const __m256i *)w);                                   \
				__m256i w1 = _mm256_loadu_si256((const __m256i *)(w + 32));                            \
				/* 16-bit shifts carry a neighbour's bits in; the mask drops them */                   \
				__m256i u[8] = {                                                                       \
					_mm256_and_si256(w0, three),                                                   \
					_mm256_and_si256(_mm256_srli_epi16(w0, 2), three),                             \
					_mm256_and_si256(_mm256_srli_epi16(w0, 4), three),                             \
					_mm256_and_si256(_mm256_srli_epi16(w0, 6), three),                             \
					_mm256_and_si256(w1, three),                                                   \
					_mm256_and_si256(_mm256_srli_epi16(w1, 2), three),                             \
					_mm256_and_si256(_mm256_srli_epi16(w1, 4), three),                             \
					_mm256_and_si256(_mm256_srli_epi16(w1, 6), three),                             \
				};                                                                                     \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                   \
				{                                                                                      \
					const struct block_q8k *xb = x + (size_t)t * nsb + i;                          \
					const int8_t *xq = xb->q + 32 * p;                                             \
					__m256i a = _mm256_setzero_si256(), b = a;                                     \
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
					msum[t] = I16_ACC(msum[t], mp, BCAST4_256(xb->bsum + 2 * p));                  \
				}                                                                                      \
			}                                                                                              \
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));                            \
			__m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp + 16)));                     \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                           \
			{                                                                                              \
				__m256 xd = _mm256_set1_ps(x[(size_t)t * nsb + i].d);                                  \
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(isum[t]), acc[t]);  \
				acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, xd), _mm256_cvtepi32_ps(msum[t]), acc[t]); \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);    \
	}

#define DEFINE_GEMM_Q2X8(NAME, TARGET, U8I8_ACC, I16_ACC)                                                              \
	DEFINE_GEMM_Q2X8_NT(NAME##_nt, TARGET, U8I8_ACC, I16_ACC)                                                      \
	TARGET void NAME(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,          \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nsb *Q2X8_BLOCK, x, nsb, nt, y, ldy);                              \
	}

DEFINE_GEMM_Q2X8(gemm_q2_kx8_avx2, AVX2, U8I8_ACC_AVX2, I16_ACC_AVX2)
DEFINE_GEMM_Q2X8(gemm_q2_kx8_avx512, AVX512, U8I8_ACC_VNNI, I16_ACC_VNNI)

/*
 * The same two tokens a 512-bit vector (struct q8k_pair), for decode
 * batches and short prompts, as Q4_K's groups take them
 * (cpu_kquants_x8.c): the quants and scale words widened to lane pairs
 * (X8_PAIR_LANES) once a block for every pair, and one vpdpbusd sums row
 * r with token 2p in lane 2r and token 2p + 1 in lane 2r + 1; the mins
 * take each token's two 16-value sums in its lane.  The sums are exact
 * and the float steps the ones above: the results are their bits.
 */
AVX512 static inline __attribute__((always_inline)) void
gemm_q2_kx8_pairs_nt(const uint8_t *grp, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	const __m512i three = _mm512_set1_epi8(3), low = _mm512_set1_epi32(0xf);
	const int np = (nt + 1) / 2;
	__m512 acc[4];

#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	for (size_t i = 0; i < nsb; i++, grp += Q2X8_BLOCK) {
		GROUP_PREFETCH(grp, Q2X8_BLOCK, nt);
		__m512i isum[4], msum[4], sw[4];
#pragma GCC unroll 4
		for (int p = 0; p < np; p++)
			isum[p] = msum[p] = _mm512_setzero_si512();
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
			sw[k] = X8_LOAD_PAIRS(grp + Q2X8_SCALES + 32 * k);
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			/* scale bytes 2j and 2j + 1: bits 16 (j % 2).. of word j / 2 */
			__m512i s = _mm512_srli_epi32(sw[j / 2], 16 * (j % 2));
			__m512i sa = _mm512_and_si512(s, low), sb = _mm512_and_si512(_mm512_srli_epi32(s, 8), low);
			__m512i mt = _mm512_srli_epi32(s, 4);
			__m512i mp =
				_mm512_or_si512(_mm512_and_si512(mt, low),
						_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(mt, 8), low), 16));
			__m512i w0 = X8_LOAD_PAIRS(grp + Q2X8_QUANTS + 64 * j);
			__m512i w1 = X8_LOAD_PAIRS(grp + Q2X8_QUANTS + 64 * j + 32);
			__m512i u[8] = {
				_mm512_and_si512(w0, three),
				_mm512_and_si512(_mm512_srli_epi16(w0, 2), three),
				_mm512_and_si512(_mm512_srli_epi16(w0, 4), three),
				_mm512_and_si512(_mm512_srli_epi16(w0, 6), three),
				_mm512_and_si512(w1, three),
				_mm512_and_si512(_mm512_srli_epi16(w1, 2), three),
				_mm512_and_si512(_mm512_srli_epi16(w1, 4), three),
				_mm512_and_si512(_mm512_srli_epi16(w1, 6), three),
			};
#pragma GCC unroll 4
			for (int p = 0; p < np; p++) {
				const struct q8k_pair *xb = x + (size_t)p * nsb + i;
				__m512i a = _mm512_setzero_si512(), b = a;
				X8_PAIR_SUBBLOCKS(a, b, u, xb->q + 8 * (8 * j));
				isum[p] = _mm512_add_epi32(isum[p], _mm512_add_epi32(_mm512_mullo_epi32(a, sa),
										     _mm512_mullo_epi32(b, sb)));
				msum[p] = _mm512_dpwssd_epi32(msum[p], mp, BCAST8_512(xb->bsum + 4 * j));
			}
		}
		__m512 dw = X8_HALVES_PAIRS(grp), dm = X8_HALVES_PAIRS(grp + 16);
#pragma GCC unroll 4
		for (int p = 0; p < np; p++) {
			__m512 xd = _mm512_castsi512_ps(BCAST8_512(x[(size_t)p * nsb + i].d));
			acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(isum[p]), acc[p]);
			acc[p] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, xd), _mm512_cvtepi32_ps(msum[p]), acc[p]);
		}
	}
	X8_PAIRS_STORE(acc, np, nt, y, ldy);
}

AVX512 void
gemm_q2_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	X8_GROUPS_BY_NT(gemm_q2_kx8_pairs_nt, grp, ng, nsb * Q2X8_BLOCK, x, nsb, nt, y, ldy);
}

/* q2x8_repack with the 8 rows' quant words transposed in registers, a
 * row a lane (as q3x8_repack_avx2). */
AVX2 void
q2x8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	const __m256i three = _mm256_set1_epi8(3);

	dst += (size_t)g0 * nsb * Q2X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += Q2X8_BLOCK) {
			const uint8_t *sb = src + (size_t)(8 * g) * row_bytes + i * Q2K_SB_BYTES, *b = sb;
			for (int r = 0; r < 8; r++, b += row_bytes) {
				memcpy(dst + 2 * r, b + 80, 2);
				memcpy(dst + 16 + 2 * r, b + 82, 2);
				for (int w = 0; w < 4; w++)
					memcpy(dst + Q2X8_SCALES + 32 * w + 4 * r, b + 4 * w, 4);
			}
			for (int h = 0; h < 2; h++) {
				__m256i q[8];
				for (int r = 0; r < 8; r++)
					q[r] = _mm256_loadu_si256(
						(const __m256i *)(sb + (size_t)r * row_bytes + 16 + 32 * h));
				transpose8x8(q); /* q[m] lane r: row r's quant word m of the half */
				for (int k = 0; k < 4; k++)
					for (int c = 0; c < 2; c++) {
						__m256i v = _mm256_setzero_si256();
						for (int m = 0; m < 4; m++)
							v = _mm256_or_si256(
								v,
								_mm256_slli_epi32(
									_mm256_and_si256(_mm256_srli_epi32(q[4 * c + m],
													   2 * k),
											 three),
									2 * m));
						_mm256_storeu_si256((__m256i *)(dst + Q2X8_QUANTS + 64 * (4 * h + k) +
										32 * c),
								    v);
					}
			}
		}
}
#endif
