/*
 * Q4_0 weights repacked at load, 8 rows interleaved, for decode.
 *
 * In the file a Q4_0 row is blocks of 18 bytes: an fp16 scale and 16
 * bytes whose low nibbles are elements 0-15 and high nibbles 16-31.  The
 * per-row dot spent about 13 instructions a block on unpacking, the scale
 * and the activation block it reloaded for every row, and generation was
 * compute-bound at a third of the memory bandwidth.  Here a group of 8
 * rows stores, per block, the 8 scales together (one vcvtph2ps gives all
 * of them) and then 4 chunks of 32 bytes: chunk s holds bytes 4s..4s+3 of
 * each row, so its low nibbles are elements 4s..4s+3 and its high nibbles
 * 16+4s..16+4s+3 of the 8 rows, one row per 32-bit lane.  One vpdpbusd
 * with 4 activation bytes broadcast then advances 8 rows by 4 elements:
 * 8 of them finish the block for all 8 rows, and the unpacked nibbles
 * serve up to 8 tokens (a decode batch).  The group is the same 144 bytes
 * a block as 8 rows of the file.
 *
 * Prompts of X8_GEMM_TOKENS and more widen the groups back to 34-byte
 * int8 rows (an 8 x 8 transpose of 32-bit words) for the int8 GEMM.
 * IQ4_NL's blocks are the same bytes: its rows take these groups, and
 * the kernel below with the nibbles looked up as levels.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

void
q4_0x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nb, uint8_t *dst)
{
	dst += (size_t)g0 * nb * Q4_0X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t b = 0; b < nb; b++, dst += Q4_0X8_BLOCK) {
			for (int r = 0; r < 8; r++) {
				const uint8_t *blk = src + (size_t)(8 * g + r) * row_bytes + b * 18;
				uint32_t word[4];
				memcpy(dst + 2 * r, blk, 2);
				memcpy(word, blk + 2, 16);
				for (int s = 0; s < 4; s++)
					memcpy(dst + 16 + 32 * s + 4 * r, &word[s], 4);
			}
		}
}

void
q4_0x8_dequantize_row(const uint8_t *grp, size_t nb, int r, float *out)
{
	for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK, out += 32) {
		uint16_t h;
		memcpy(&h, grp + 2 * r, 2);
		float d = fp16_to_f32(h);
		for (int s = 0; s < 4; s++)
			for (int i = 0; i < 4; i++) {
				uint8_t byte = grp[16 + 32 * s + 4 * r + i];
				out[4 * s + i] = d * (float)((byte & 0xf) - 8);
				out[16 + 4 * s + i] = d * (float)((byte >> 4) - 8);
			}
	}
}

void
widen_q4_0x8_scalar(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int16_t *sums)
{
	for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK)
		for (int r = 0; r < 8; r++) {
			uint8_t *o = dst + (size_t)r * dst_row_bytes + b * 34;
			int sum = 0;
			memcpy(o, grp + 2 * r, 2);
			for (int s = 0; s < 4; s++)
				for (int i = 0; i < 4; i++) {
					uint8_t byte = grp[16 + 32 * s + 4 * r + i];
					int lo = (byte & 0xf) - 8, hi = (byte >> 4) - 8;
					o[2 + 4 * s + i] = (uint8_t)(int8_t)lo;
					o[2 + 16 + 4 * s + i] = (uint8_t)(int8_t)hi;
					sum += lo + hi;
				}
			if (sums != NULL)
				sums[(size_t)r * nb + b] = (int16_t)sum;
		}
}

static int32_t
q4_0x8_block_sum(const uint8_t *blk, int r, const int8_t *xq)
{
	int32_t s = 0;

	for (int k = 0; k < 4; k++)
		for (int i = 0; i < 4; i++) {
			uint8_t byte = blk[16 + 32 * k + 4 * r + i];
			s += ((byte & 0xf) - 8) * xq[4 * k + i] + ((byte >> 4) - 8) * xq[16 + 4 * k + i];
		}
	return s;
}

void
gemm_q4_0x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	gemm_x8_scalar(grp, ng, Q4_0X8_BLOCK, q4_0x8_block_sum, x, nb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* nt tokens (a constant where inlined) times one group: the block's
 * nibbles unpacked once, low ones elements 4s.., high ones 16+4s.., and
 * used by every token (cpu_x86.h); VALUE(n) turns a chunk of nibbles into
 * the unsigned values the products take, BIAS * sum(x) comes off: q - 8
 * for Q4_0; for IQ4_NL, whose blocks are Q4_0's bytes, the levels looked
 * up in table (IQ4X8_ACC says how each instruction set takes them). */
#define DEFINE_GEMM_NIBBLE_X8(NAME, TARGET, ACC, STORAGE, TABLE, VALUE, BIAS)                                          \
	TARGET static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_nt(const uint8_t *grp, const struct block_q8 *x, size_t nb, \
							      int nt, float *y, size_t ldy)                            \
	{                                                                                                              \
		const __m256i low = _mm256_set1_epi8(0x0f), table = TABLE;                                             \
		__m256 acc[8];                                                                                         \
		(void)table;                                                                                           \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK) {                                                 \
			X8_STREAM_PREFETCH(grp, b, Q4_0X8_BLOCK, nt);                                                  \
			__m256i c[8];                                                                                  \
			_Pragma("GCC unroll 4") for (int s = 0; s < 4; s++)                                            \
			{                                                                                              \
				__m256i v = _mm256_loadu_si256((const __m256i *)(grp + 16 + 32 * s));                  \
				c[s] = VALUE(_mm256_and_si256(v, low));                                                \
				c[s + 4] = VALUE(_mm256_and_si256(_mm256_srli_epi16(v, 4), low));                      \
			}                                                                                              \
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));                            \
			X8_BLOCK_TOKENS(ACC, c, dw, x, nb, b, nt, BIAS, acc);                                          \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);    \
	}                                                                                                              \
	TARGET STORAGE void NAME(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,    \
				 size_t ldy)                                                                           \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nb *Q4_0X8_BLOCK, x, nb, nt, y, ldy);                              \
	}

#define NIBBLE_AS_IS(n) (n)
#define NIBBLE_LEVEL(n) _mm256_shuffle_epi8(table, n)
/* IQ4_NL's levels + off in both 128-bit lanes */
#define IQ4_NL_TABLE(off)                                                                                              \
	_mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_nl_levels)),                  \
			_mm256_set1_epi8((char)(off)))

/* AVX-512: the 8-row kernel serves decode batches and odd groups */
DEFINE_GEMM_NIBBLE_X8(gemm_q4_0x8_avx2, AVX2, U8I8_ACC_AVX2, , low, NIBBLE_AS_IS, 8)
DEFINE_GEMM_NIBBLE_X8(gemm_q4_0x8_groups_avx512, AVX512, U8I8_ACC_VNNI, static, low, NIBBLE_AS_IS, 8)
DEFINE_GEMM_NIBBLE_X8(gemm_iq4_nlx8_avx2, AVX2, IQ4X8_ACC_AVX2, , IQ4_NL_TABLE(0), NIBBLE_LEVEL, 0)
DEFINE_GEMM_NIBBLE_X8(gemm_iq4_nlx8_avx512, AVX512, IQ4X8_ACC_VNNI, , IQ4_NL_TABLE(128), NIBBLE_LEVEL, 128)

/*
 * Two tokens a 512-bit vector, for decode batches and short prompts: on a
 * core with 512-bit units (Zen 5) one vpdpbusd then does the work of two
 * 256-bit ones, and the 8-row kernel above, 8 of them a token and a
 * block, was compute-bound at 8 tokens.  Each row's chunk of nibbles is
 * widened to a lane pair (row r in lanes 2r and 2r + 1, one vpermd a
 * chunk for all tokens) and a pair of tokens' 4-byte units comes in one
 * 8-byte broadcast (struct q8_pair; X8_PAIR_BLOCK): lane 2r sums row r
 * with the pair's first token, lane 2r + 1 with its second.  The results
 * are the 8-row kernel's bits.
 */
#define DEFINE_GEMM_NIBBLE_PAIRS(NAME, TABLE, VALUE, BIAS_SHIFT)                                                       \
	AVX512 static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_nt(const uint8_t *grp, const struct q8_pair *x, size_t nb,  \
							      int nt, float *y, size_t ldy)                            \
	{                                                                                                              \
		const __m512i low = _mm512_set1_epi8(0x0f), table = TABLE;                                             \
		const int np = (nt + 1) / 2;                                                                           \
		__m512 acc[4];                                                                                         \
		(void)table;                                                                                           \
		_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) acc[p] = _mm512_setzero_ps();                     \
		for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK) {                                                 \
			X8_STREAM_PREFETCH(grp, b, Q4_0X8_BLOCK, nt);                                                  \
			__m512i c[8];                                                                                  \
			_Pragma("GCC unroll 4") for (int s = 0; s < 4; s++)                                            \
			{                                                                                              \
				__m512i v = X8_LOAD_PAIRS(grp + 16 + 32 * s);                                          \
				c[s] = VALUE(_mm512_and_si512(v, low));                                                \
				c[s + 4] = VALUE(_mm512_and_si512(_mm512_srli_epi16(v, 4), low));                      \
			}                                                                                              \
			__m512 dw = X8_HALVES_PAIRS(grp);                                                              \
			X8_PAIR_BLOCK(c, dw, x, nb, b, np, BIAS_SHIFT, acc);                                           \
		}                                                                                                      \
		X8_PAIRS_STORE(acc, np, nt, y, ldy);                                                                   \
	}                                                                                                              \
	AVX512 void NAME(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y, size_t ldy) \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nb *Q4_0X8_BLOCK, x, nb, nt, y, ldy);                              \
	}

#define NIBBLE_AS_IS_512(n) (n)
#define NIBBLE_LEVEL_512(n) _mm512_shuffle_epi8(table, n)
#define IQ4_NL_TABLE_512(off)                                                                                          \
	_mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)iq4_nl_levels)),                       \
			_mm512_set1_epi8((char)(off)))

DEFINE_GEMM_NIBBLE_PAIRS(gemm_q4_0x8_pairs_avx512, low, NIBBLE_AS_IS_512, 3)
DEFINE_GEMM_NIBBLE_PAIRS(gemm_iq4_nlx8_pairs_avx512, IQ4_NL_TABLE_512(128), NIBBLE_LEVEL_512, 7)

/*
 * One token (generation) times two groups at once in 512-bit vectors,
 * group g in the low half, g + 1 in the high: the unpacking, the
 * activation broadcasts and the scale steps serve 16 rows instead of 8,
 * where unpacking nibbles made Q4_0 the one type whose decode stayed at
 * 82 % of the memory bound.  The high nibbles are taken in place (the
 * byte & 0xf0, 16 times the nibble), their sums apart from the low
 * nibbles' and divided by 16 once a block: one shift where each chunk
 * took one.  The integer sums are exact, so a lane's sum is the 8-row
 * kernel's, and the float steps are its steps: the results are its bits.
 * A group of 2048 values is 9 KB, so a pair's second stream started cold
 * every 18 KB: with g0's lines ahead turned to the next pair's second
 * group near its end, the 1B-class Q4_0 decode on the AMX Xeon read
 * 49.5 tok/s against 46.3 (three alternating rounds; docs/performance.md).
 */
AVX512 static void
gemm_q4_0x8_pair_avx512(const uint8_t *g0, size_t group_bytes, const struct block_q8 *x, size_t nb, float *y)
{
	const __m512i low = _mm512_set1_epi8(0x0f), high = _mm512_set1_epi8((char)0xf0);
	const uint8_t *g1 = g0 + group_bytes;
	__m512 acc = _mm512_setzero_ps();

	for (size_t b = 0; b < nb; b++, g0 += Q4_0X8_BLOCK, g1 += Q4_0X8_BLOCK) {
		/* g1's lines ahead run on into g2, the next pair's first
		 * group; g0's L2 stream, near its end, into g1, which is
		 * already being read, so it skips to g3, the next pair's
		 * second, which started cold every pair otherwise */
		STREAM_PREFETCH_NEAR_FAR(g0,
					 g0 + (b * Q4_0X8_BLOCK + ONE_TOKEN_AHEAD >= group_bytes ? 2 * group_bytes : 0),
					 Q4_0X8_BLOCK, 1);
		STREAM_PREFETCH(g1, Q4_0X8_BLOCK);
		__m512i c[8];
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			__m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(
							       _mm256_loadu_si256((const __m256i *)(g0 + 16 + 32 * s))),
						       _mm256_loadu_si256((const __m256i *)(g1 + 16 + 32 * s)), 1);
			c[s] = _mm512_and_si512(v, low);
			c[s + 4] = _mm512_and_si512(v, high); /* 16 x elements 16+4s.. */
		}
		__m512 dw = _mm512_cvtph_ps(
			_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)g0)),
						_mm_loadu_si128((const __m128i *)g1), 1));
		const struct block_q8 *xb = x + b;
		/* low nibbles in p0, p1; 16 x the high ones in p2, p3 (each
		 * term a multiple of 16, so the shift divides exactly) */
		__m512i p0 = _mm512_set1_epi32(-8 * xb->sum), p1 = _mm512_setzero_si512(), p2 = p1, p3 = p1;
		p0 = _mm512_dpbusd_epi32(p0, c[0], BCAST4_512(xb->q));
		p1 = _mm512_dpbusd_epi32(p1, c[1], BCAST4_512(xb->q + 4));
		p2 = _mm512_dpbusd_epi32(p2, c[4], BCAST4_512(xb->q + 16));
		p3 = _mm512_dpbusd_epi32(p3, c[5], BCAST4_512(xb->q + 20));
		p0 = _mm512_dpbusd_epi32(p0, c[2], BCAST4_512(xb->q + 8));
		p1 = _mm512_dpbusd_epi32(p1, c[3], BCAST4_512(xb->q + 12));
		p2 = _mm512_dpbusd_epi32(p2, c[6], BCAST4_512(xb->q + 24));
		p3 = _mm512_dpbusd_epi32(p3, c[7], BCAST4_512(xb->q + 28));
		__m512i p = _mm512_add_epi32(_mm512_add_epi32(p0, p1), _mm512_srai_epi32(_mm512_add_epi32(p2, p3), 4));
		acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(p), acc);
	}
	_mm512_storeu_ps(y, acc);
}

AVX512 void
gemm_q4_0x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	size_t bytes = nb * Q4_0X8_BLOCK;
	int g = 0;

	/* two groups at once are two streams: on a Zen 4 one thread read 14
	 * GB/s of weights from memory that way against 25 one group at a
	 * time, with the stream prefetch off or on; the Xeon where the pair
	 * was measured a gain prefetches its streams (cpu_stream_prefetch) */
	if (nt == 1 && cpu_stream_prefetch > 0)
		for (; g + 2 <= ng; g += 2)
			gemm_q4_0x8_pair_avx512(grp + (size_t)g * bytes, bytes, x, nb, y + 8 * (size_t)g);
	if (g < ng)
		gemm_q4_0x8_groups_avx512(grp + (size_t)g * bytes, ng - g, x, nb, nt, y + 8 * (size_t)g, ldy);
}

/*
 * One token times one group with two chunks a 512-bit vector, where
 * 512-bit vectors run whole and no dense prefetch is on (set_pair_kernels,
 * cpu_dot.c): chunks s and s + 1 are 64 bytes side by side, so two loads
 * take a block's nibbles, the token's bytes for each half come in one
 * vpermd of its 32 (word[k]: dwords 2k and 2k + 1), the high nibbles are taken in place
 * as in the pair above, and the halves are added once a block.  Four
 * vpdpbusd a block where the 8-row kernel takes eight; one stream, as
 * that kernel's.  The integer sum is exact and the float step the 8-row
 * kernel's: the results are its bits.
 */
AVX512 static void
gemv_q4_0x8_wide_avx512(const uint8_t *grp, const struct block_q8 *x, size_t nb, float *y)
{
	const __m512i low = _mm512_set1_epi8(0x0f), high = _mm512_set1_epi8((char)0xf0);
	const __m512i word[4] = {
		_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
		_mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
		_mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
		_mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6),
	};
	__m256 acc = _mm256_setzero_ps();

	for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK, x++) {
		SPARSE_PREFETCH(grp, b, Q4_0X8_BLOCK);
		__m512i v01 = _mm512_loadu_si512(grp + 16), v23 = _mm512_loadu_si512(grp + 80);
		__m512i xw = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x->q));
		/* elements 0..15 in p0, p1; 16 x elements 16..31 in p2, p3 */
		__m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v01, low),
						 _mm512_permutexvar_epi32(word[0], xw));
		__m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v23, low),
						 _mm512_permutexvar_epi32(word[1], xw));
		__m512i p2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v01, high),
						 _mm512_permutexvar_epi32(word[2], xw));
		__m512i p3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v23, high),
						 _mm512_permutexvar_epi32(word[3], xw));
		__m512i p = _mm512_add_epi32(_mm512_add_epi32(p0, p1), _mm512_srai_epi32(_mm512_add_epi32(p2, p3), 4));
		__m256i s =
			_mm256_add_epi32(_mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1)),
					 _mm256_set1_epi32(-8 * x->sum));
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));
		acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x->d)), _mm256_cvtepi32_ps(s), acc);
	}
	_mm256_storeu_ps(y, acc);
}

AVX512 void
gemm_q4_0x8_wide_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	if (nt != 1 || cpu_stream_prefetch > 0) {
		gemm_q4_0x8_avx512(grp, ng, x, nb, nt, y, ldy);
		return;
	}
	for (int g = 0; g < ng; g++)
		gemv_q4_0x8_wide_avx512(grp + (size_t)g * nb * Q4_0X8_BLOCK, x, nb, y + 8 * (size_t)g);
}

AVX2 void
widen_q4_0x8_avx2(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int16_t *sums)
{
	const __m256i low = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);

	for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK) {
		__m256i v[8];
		for (int s = 0; s < 4; s++) {
			__m256i c = _mm256_loadu_si256((const __m256i *)(grp + 16 + 32 * s));
			v[s] = _mm256_and_si256(c, low);                           /* elements 4s.. of each row */
			v[s + 4] = _mm256_and_si256(_mm256_srli_epi16(c, 4), low); /* elements 16+4s.. */
		}
		transpose8x8(v); /* v[r]: row r's 32 values in order, 0..15 */
		for (int r = 0; r < 8; r++) {
			uint8_t *o = dst + (size_t)r * dst_row_bytes + b * 34;
			memcpy(o, grp + 2 * r, 2);
			_mm256_storeu_si256((__m256i *)(o + 2), _mm256_sub_epi8(v[r], eight));
			if (sums != NULL) {
				__m256i sad = _mm256_sad_epu8(v[r], _mm256_setzero_si256());
				__m128i h =
					_mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
				sums[(size_t)r * nb + b] =
					(int16_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 8 * 32);
			}
		}
	}
}
#endif
