/*
 * IQ4_XS weights repacked at load, 8 rows interleaved, for decode; and
 * the scalar reference and read-back of IQ4_NL's, which take Q4_0's
 * groups and kernel (cpu_q4_0x8.c: its blocks have Q4_0's bytes, the
 * nibbles indices into the levels rather than q + 8).
 *
 * An IQ4_XS super-block (256 weights, 136 bytes) is an fp16 d, the high
 * two bits of its eight sub-block scales (scales_h, 16 bits), their low
 * four (scales_l, 4 bytes) and 128 bytes of 4-bit indices into IQ4_NL's
 * sixteen int8 levels: sub-block j's 16 bytes hold its values l in the low
 * nibbles and l + 16 in the high ones (cpu_dot_iq4.c).  The per-row dot
 * takes a table lookup, a sign trick and a scale shuffle for every 32
 * values and decoded at 41-47 % of the bandwidth bound on 2 threads.
 * With 8 rows side by side, one row per 32-bit lane, a vpdpbusd with 4
 * activation bytes broadcast advances all 8 rows by 4 values, and the
 * eight rows' scales are unpacked at once, as Q4_K's groups do
 * (cpu_kquants_x8.c).
 *
 * An 8-row group stores, per super-block (IQ4X8_BLOCK, 8 x 136 bytes):
 *   0    d of the 8 rows (fp16)
 *   16   scales_h of the 8 rows (16 bits each)
 *   32   scales_l of the 8 rows (row r's four bytes in bytes 4r..4r+3)
 *   64 + 32w, w < 32: the file's index word w (bytes 8 + 4w..) of the 8
 *        rows, row r in bytes 4r..4r+3: words 4j..4j+3 are sub-block j's
 * Prompts unpack a group's super-blocks back to the file's layout and
 * widen them as they widen file rows; get_rows and the scalar reference
 * do the same.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#define IQ4XS_SB_BYTES 136
#define IQ4X8_SCALES_H 16
#define IQ4X8_SCALES_L 32
#define IQ4X8_QUANTS 64

void
iq4x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	dst += (size_t)g0 * nsb * IQ4X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += IQ4X8_BLOCK)
			for (int r = 0; r < 8; r++) {
				const uint8_t *b = src + (size_t)(8 * g + r) * row_bytes + i * IQ4XS_SB_BYTES;
				memcpy(dst + 2 * r, b, 2);
				memcpy(dst + IQ4X8_SCALES_H + 2 * r, b + 2, 2);
				memcpy(dst + IQ4X8_SCALES_L + 4 * r, b + 4, 4);
				for (int w = 0; w < 32; w++)
					memcpy(dst + IQ4X8_QUANTS + 32 * w + 4 * r, b + 8 + 4 * w, 4);
			}
}

void
iq4x8_unpack(const uint8_t *grp, int r, uint8_t *blk)
{
	memcpy(blk, grp + 2 * r, 2);
	memcpy(blk + 2, grp + IQ4X8_SCALES_H + 2 * r, 2);
	memcpy(blk + 4, grp + IQ4X8_SCALES_L + 4 * r, 4);
	for (int w = 0; w < 32; w++)
		memcpy(blk + 8 + 4 * w, grp + IQ4X8_QUANTS + 32 * w + 4 * r, 4);
}

/* IQ4_NL in Q4_0's groups: row r of a block times the activations */
static int32_t
iq4_nlx8_block_sum(const uint8_t *blk, int r, const int8_t *xq)
{
	int32_t s = 0;

	for (int k = 0; k < 4; k++)
		for (int i = 0; i < 4; i++) {
			uint8_t byte = blk[16 + 32 * k + 4 * r + i];
			s += iq4_nl_levels[byte & 0xf] * xq[4 * k + i] + iq4_nl_levels[byte >> 4] * xq[16 + 4 * k + i];
		}
	return s;
}

void
gemm_iq4_nlx8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	gemm_x8_scalar(grp, ng, Q4_0X8_BLOCK, iq4_nlx8_block_sum, x, nb, nt, y, ldy);
}

/* Row r of 8 consecutive blocks of IQ4_NL groups as the file's 8 x 18
 * bytes: a 256-value unit for the group helpers (groups_widen,
 * groups_dequantize_row) */
void
iq4_nlx8_unpack8(const uint8_t *grp, int r, uint8_t *blk)
{
	for (int b = 0; b < 8; b++, grp += Q4_0X8_BLOCK, blk += 18) {
		memcpy(blk, grp + 2 * r, 2);
		for (int s = 0; s < 4; s++)
			memcpy(blk + 2 + 4 * s, grp + 16 + 32 * s + 4 * r, 4);
	}
}

void
gemm_iq4_xsx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy)
{
	gemm_groups_q8k_scalar(grp, ng, IQ4X8_BLOCK, iq4x8_unpack, dot_iq4_xs_q8k_scalar, x, nsb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* nt tokens (1..8, a constant where inlined; tokens' super-blocks nsb
 * apart from x) times one 8-row group, y[t * ldy + r].  Sub-block j's
 * sum starts at -OFF x (its activations' sum, from Q8_K's 16-value sums),
 * takes its four index words (low nibbles against activations 32j + 4s..,
 * high ones against 32j + 16 + 4s..), and is multiplied by the 8 rows'
 * scales less 32: exact in int32 (8 x 31 x 32 x 127 x 241 at most), then
 * scaled once a super-block by d x d_x as the per-row dot does.  The same
 * steps for every nt: a token's outputs are the same bits alone or in a
 * batch.  Up to 4 tokens keep two chains a sub-block each, so vpdpbusd's
 * latency stays hidden; more would not fit the registers. */
#define DEFINE_GEMM_IQ4X8_NT(NAME, TARGET, ACC, OFF)                                                                   \
	TARGET static inline __attribute__((always_inline)) void NAME(const uint8_t *grp, const struct block_q8k *x,   \
								      size_t nsb, int nt, float *y, size_t ldy)        \
	{                                                                                                              \
		const __m256i table =                                                                                  \
			_mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_nl_levels)),  \
					_mm256_set1_epi8((char)(OFF)));                                                \
		const __m256i low = _mm256_set1_epi8(0xf), two = _mm256_set1_epi32(3), four = _mm256_set1_epi32(0xf);  \
		__m256 acc[8];                                                                                         \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t i = 0; i < nsb; i++, grp += IQ4X8_BLOCK) {                                                 \
			GROUP_PREFETCH(grp, IQ4X8_BLOCK, nt);                                                          \
			__m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(grp + IQ4X8_SCALES_H)));  \
			__m256i sl = _mm256_loadu_si256((const __m256i *)(grp + IQ4X8_SCALES_L));                      \
			__m256i isum[8];                                                                               \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();         \
			_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)                                            \
			{                                                                                              \
				/* nibble j of scales_l, bits 2j.. of scales_h */                                      \
				__m256i sc = _mm256_sub_epi32(                                                         \
					_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), four),          \
							_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh,       \
													     2 * j),   \
											   two),                       \
									  4)),                                         \
					_mm256_set1_epi32(32));                                                        \
				__m256i a0[8], a1[8];                                                                  \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                   \
				{                                                                                      \
					const struct block_q8k *xb = x + (size_t)t * nsb + i;                          \
					a0[t] = _mm256_set1_epi32(-(OFF) * (xb->bsum[2 * j] + xb->bsum[2 * j + 1]));   \
					a1[t] = _mm256_setzero_si256();                                                \
				}                                                                                      \
				_Pragma("GCC unroll 4") for (int s = 0; s < 4; s++)                                    \
				{                                                                                      \
					__m256i c = _mm256_loadu_si256(                                                \
						(const __m256i *)(grp + IQ4X8_QUANTS + 128 * j + 32 * s));             \
					__m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(c, low));             \
					__m256i hi =                                                                   \
						_mm256_shuffle_epi8(table,                                             \
								    _mm256_and_si256(_mm256_srli_epi16(c, 4), low));   \
					_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                           \
					{                                                                              \
						const int8_t *xq = x[(size_t)t * nsb + i].q + 32 * j + 4 * s;          \
						a0[t] = ACC(a0[t], lo, BCAST4_256(xq));                                \
						if (nt <= 4)                                                           \
							a1[t] = ACC(a1[t], hi, BCAST4_256(xq + 16));                   \
						else                                                                   \
							a0[t] = ACC(a0[t], hi, BCAST4_256(xq + 16));                   \
					}                                                                              \
				}                                                                                      \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) isum[t] =                         \
					_mm256_add_epi32(isum[t],                                                      \
							 _mm256_mullo_epi32(nt <= 4 ? _mm256_add_epi32(a0[t], a1[t])   \
										    : a0[t],                           \
									    sc));                                      \
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

#define DEFINE_GEMM_IQ4X8(NAME, TARGET, ACC, OFF)                                                                      \
	DEFINE_GEMM_IQ4X8_NT(NAME##_nt, TARGET, ACC, OFF)                                                              \
	TARGET void NAME(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,          \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nsb *IQ4X8_BLOCK, x, nsb, nt, y, ldy);                             \
	}

DEFINE_GEMM_IQ4X8(gemm_iq4_xsx8_avx2, AVX2, IQ4X8_ACC_AVX2, 0)
DEFINE_GEMM_IQ4X8(gemm_iq4_xsx8_avx512, AVX512, IQ4X8_ACC_VNNI, 128)

/*
 * The same two tokens a 512-bit vector (struct q8k_pair), for decode
 * batches and short prompts, as Q4_K's groups take them
 * (cpu_kquants_x8.c): each chunk's indices are widened to lane pairs
 * (X8_PAIR_LANES) and looked up once a block for every pair, and one
 * vpdpbusd sums row r with token 2p in lane 2r and with token 2p + 1 in
 * lane 2r + 1.  The sums are exact and the float steps the ones above, so
 * the results are their bits.
 */
AVX512 static inline __attribute__((always_inline)) void
gemm_iq4_xsx8_pairs_nt(const uint8_t *grp, const struct q8k_pair *x, size_t nsb, int nt, float *y, size_t ldy)
{
	const __m512i table = _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)iq4_nl_levels)),
					      _mm512_set1_epi8((char)128));
	const __m512i low = _mm512_set1_epi8(0xf), lanes = X8_PAIR_LANES, off = _mm512_set1_epi16(-128);
	const __m256i two = _mm256_set1_epi32(3), four = _mm256_set1_epi32(0xf);
	const int np = (nt + 1) / 2;
	__m512 acc[4];

#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	for (size_t i = 0; i < nsb; i++, grp += IQ4X8_BLOCK) {
		GROUP_PREFETCH(grp, IQ4X8_BLOCK, nt);
		__m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(grp + IQ4X8_SCALES_H)));
		__m256i sl = _mm256_loadu_si256((const __m256i *)(grp + IQ4X8_SCALES_L));
		__m512i isum[4];
#pragma GCC unroll 4
		for (int p = 0; p < np; p++)
			isum[p] = _mm512_setzero_si512();
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			__m256i sc8 = _mm256_sub_epi32(
				_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), four),
						_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), two),
								  4)),
				_mm256_set1_epi32(32));
			__m512i sc = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(sc8));
			__m512i a0[4], a1[4];
#pragma GCC unroll 4
			for (int p = 0; p < np; p++) { /* -128 x each token's sum of sub-block j */
				a0[p] = _mm512_madd_epi16(BCAST8_512(x[(size_t)p * nsb + i].bsum + 4 * j), off);
				a1[p] = _mm512_setzero_si512();
			}
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				__m512i c = X8_LOAD_PAIRS(grp + IQ4X8_QUANTS + 128 * j + 32 * s);
				__m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(c, low));
				__m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(c, 4), low));
#pragma GCC unroll 4
				for (int p = 0; p < np; p++) {
					const int8_t *xq = x[(size_t)p * nsb + i].q + 8 * (8 * j + s);
					a0[p] = _mm512_dpbusd_epi32(a0[p], lo, BCAST8_512(xq));
					a1[p] = _mm512_dpbusd_epi32(a1[p], hi, BCAST8_512(xq + 32));
				}
			}
#pragma GCC unroll 4
			for (int p = 0; p < np; p++)
				isum[p] = _mm512_add_epi32(isum[p],
							   _mm512_mullo_epi32(_mm512_add_epi32(a0[p], a1[p]), sc));
		}
		__m512 dw = X8_HALVES_PAIRS(grp);
		X8K_PAIRS_SCALE(acc, isum, dw, x, nsb, i, np);
	}
	X8_PAIRS_STORE(acc, np, nt, y, ldy);
}

AVX512 void
gemm_iq4_xsx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
			   size_t ldy)
{
	X8_GROUPS_BY_NT(gemm_iq4_xsx8_pairs_nt, grp, ng, nsb * IQ4X8_BLOCK, x, nsb, nt, y, ldy);
}

/* iq4x8_repack with the index words of 8 rows transposed in registers, a
 * 32-byte chunk of each row at a time: 4-byte copies made loading a
 * model several times slower (cpu_kquants_x8.c). */
AVX2 void
iq4x8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst)
{
	dst += (size_t)g0 * nsb * IQ4X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += IQ4X8_BLOCK) {
			const uint8_t *sb = src + (size_t)(8 * g) * row_bytes + i * IQ4XS_SB_BYTES, *b = sb;
			for (int r = 0; r < 8; r++, b += row_bytes) {
				memcpy(dst + 2 * r, b, 2);
				memcpy(dst + IQ4X8_SCALES_H + 2 * r, b + 2, 2);
				memcpy(dst + IQ4X8_SCALES_L + 4 * r, b + 4, 4);
			}
			for (int p = 0; p < 4; p++) {
				__m256i v[8];
				for (int r = 0; r < 8; r++)
					v[r] = _mm256_loadu_si256(
						(const __m256i *)(sb + (size_t)r * row_bytes + 8 + 32 * p));
				transpose8x8(v); /* v[s] lane r: row r's word 8p + s */
				for (int s = 0; s < 8; s++)
					_mm256_storeu_si256((__m256i *)(dst + IQ4X8_QUANTS + 256 * p + 32 * s), v[s]);
			}
		}
}
#endif
