/*
 * Q4_1, Q5_0 and Q5_1 weights repacked at load, 8 rows interleaved, as
 * Q4_0's are (cpu_q4_0x8.c).
 *
 * Their per-row dots (cpu_dot_legacy.c) decoded at 26-43 % of the memory
 * bound: every block spent its instructions on one row, and Q5's fifth
 * bits took a shuffle, a test and a select to put in place.  Here a
 * group's block holds the 8 rows' scales d together (one vcvtph2ps), then
 * their offsets m (Q4_1, Q5_1), then 32 bytes of fifth bits (Q5_0, Q5_1),
 * then 4 chunks of 32 bytes as in Q4_0's groups: chunk s holds nibble
 * bytes 4s..4s+3 of each row, one row per 32-bit lane, low nibbles
 * elements 4s.., high ones 16+4s...  The fifth bits are stored so that a
 * shift and a mask give them for any chunk: bit j of byte 4r + i is the
 * fifth bit of the element that byte i of row r's lane holds in value
 * chunk j (chunks 0-3 the low nibbles, 4-7 the high ones), so the bit for
 * chunk j is moved to bit 4 by a shift of 4 - j.  A block is the same
 * bytes as 8 of the file's.
 *
 * Per token and block: acc += d * d_x * (sum(q * x) - bias * sum(x)),
 * bias 16 for Q5_0, and acc += m * (d_x * sum(x)) for Q4_1 and Q5_1: the
 * per-row dot's terms, in a fixed order, so the scalar reference below
 * gives the SIMD kernels' bits.
 */
#include <math.h>
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

/* The file's layout l as a group's block: offsets of the scales (0), the
 * offsets m, the fifth bits and the nibble chunks; -1 where absent. */
static struct legacy_layout
group_layout(uint32_t type)
{
	struct legacy_layout l = legacy_layout(type), g;

	g.bytes = 8 * l.bytes;
	g.m = l.m >= 0 ? 16 : -1;
	g.qh = l.qh >= 0 ? 16 + (l.m >= 0 ? 16 : 0) : -1;
	g.qs = 16 + (l.m >= 0 ? 16 : 0) + (l.qh >= 0 ? 32 : 0);
	return g;
}

/* The 8 rows' fifth-bit words qh (one a lane) as the group stores them:
 * byte i of lane r holds bits i, i + 4, ..., i + 28 of row r's qh (the
 * elements byte i of the lane holds in chunks 0..7) as bits 0..7.  In
 * GCC's vector types: 8 rows a step where a row at a time made the Q5
 * types' repack a third of loading a model. */
typedef uint32_t v8u32 __attribute__((vector_size(32)));

static inline void
fifth_bits8(v8u32 *qh)
{
	v8u32 out = { 0 };

	for (int i = 0; i < 4; i++) {
		v8u32 v = (*qh >> i) & 0x11111111u;
		v = (v | v >> 3) & 0x03030303u;
		v = (v | v >> 6) & 0x000f000fu;
		out |= ((v | v >> 12) & 0xffu) << (8 * i);
	}
	*qh = out;
}

/* bits 0..7 of b to bits i, i + 4, ..., i + 28 (fifth_bits8's inverse) */
static inline uint32_t
spread_fifth_bits(uint8_t b, int i)
{
	uint32_t v = b;

	v = (v | v << 12) & 0x000f000fu;
	v = (v | v << 6) & 0x03030303u;
	v = (v | v << 3) & 0x11111111u;
	return v << i;
}

void
legacy_x8_repack(uint32_t type, const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nb, uint8_t *dst)
{
	struct legacy_layout l = legacy_layout(type), gl = group_layout(type);

	dst += (size_t)g0 * nb * (size_t)gl.bytes;
	for (int64_t g = g0; g < g1; g++)
		for (size_t b = 0; b < nb; b++, dst += gl.bytes) {
			v8u32 qh = { 0 };
			for (int r = 0; r < 8; r++) {
				const uint8_t *blk = src + (size_t)(8 * g + r) * row_bytes + b * (size_t)l.bytes;
				memcpy(dst + 2 * r, blk, 2);
				if (l.m >= 0)
					memcpy(dst + gl.m + 2 * r, blk + l.m, 2);
				if (l.qh >= 0)
					qh[r] = group_word(blk + l.qh);
				for (int s = 0; s < 4; s++)
					memcpy(dst + gl.qs + 32 * s + 4 * r, blk + l.qs + 4 * s, 4);
			}
			if (l.qh >= 0) {
				fifth_bits8(&qh);
				memcpy(dst + gl.qh, &qh, sizeof(qh));
			}
		}
}

/* Row r of a group's block blk8 as the file's block */
void
legacy_x8_unpack(uint32_t type, const uint8_t *blk8, int r, uint8_t *blk)
{
	struct legacy_layout l = legacy_layout(type), gl = group_layout(type);

	memcpy(blk, blk8 + 2 * r, 2);
	if (l.m >= 0)
		memcpy(blk + l.m, blk8 + gl.m + 2 * r, 2);
	if (l.qh >= 0) {
		uint32_t qh = 0;
		for (int i = 0; i < 4; i++)
			qh |= spread_fifth_bits(blk8[gl.qh + 4 * r + i], i);
		group_word_put(blk + l.qh, qh);
	}
	for (int s = 0; s < 4; s++)
		memcpy(blk + l.qs + 4 * s, blk8 + gl.qs + 32 * s + 4 * r, 4);
}

/* Up to 8 blocks of row r from grp (a group's blocks) as the file's */
static size_t
unpack_run(uint32_t type, const uint8_t *grp, size_t n, int r, uint8_t *blk)
{
	size_t bytes = (size_t)legacy_layout(type).bytes;

	if (n > 8)
		n = 8;
	for (size_t b = 0; b < n; b++)
		legacy_x8_unpack(type, grp + b * 8 * bytes, r, blk + b * bytes);
	return n;
}

void
legacy_x8_dequantize_row(uint32_t type, const uint8_t *grp, size_t nb, int r, float *out)
{
	size_t bytes = (size_t)legacy_layout(type).bytes;
	uint8_t blk[8 * 24];

	for (size_t b = 0, n; b < nb; b += n, grp += n * 8 * bytes, out += n * 32) {
		n = unpack_run(type, grp, nb - b, r, blk);
		tensor_dequantize_row(type, blk, out, n * 32);
	}
}

/* A group's nb blocks as widen makes of its 8 file rows: row r's int8
 * blocks at dst + r * dst_row_bytes, its sums, scales and offsets at
 * wsum, wd and wmin + r * ld (wmin untouched for Q5_0) */
void
widen_legacy_x8_scalar(uint32_t type, const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum,
		       float *wd, float *wmin, size_t ld)
{
	size_t bytes = (size_t)legacy_layout(type).bytes;
	uint8_t blk[8 * 24];

	for (int r = 0; r < 8; r++) {
		const uint8_t *g = grp;
		for (size_t b = 0, n; b < nb; b += n, g += n * 8 * bytes) {
			size_t at = (size_t)r * ld + b;
			n = unpack_run(type, g, nb - b, r, blk);
			widen_legacy_scalar(type, blk, dst + (size_t)r * dst_row_bytes + b * 34, n, wsum + at, wd + at,
					    wmin + at);
		}
	}
}

/* The kernels' scalar reference: y[t * ldy + 8 * g + r] for ng groups
 * and nt tokens (their blocks nb apart from x), in the SIMD kernels'
 * order of float operations. */
static void
gemm_legacy_x8_scalar(uint32_t type, const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
		      size_t ldy)
{
	struct legacy_layout gl = group_layout(type);
	int bias = type == TT_Q5_0 ? 16 : 0;

	for (int g = 0; g < ng; g++, grp += nb * (size_t)gl.bytes)
		for (int t = 0; t < nt; t++)
			for (int r = 0; r < 8; r++) {
				const struct block_q8 *xt = x + (size_t)t * nb;
				float acc = 0.0f;
				for (size_t b = 0; b < nb; b++) {
					const uint8_t *blk = grp + b * (size_t)gl.bytes;
					int32_t s = -bias * xt[b].sum;
					for (int e = 0; e < 32; e++) {
						int chunk = (e % 16) / 4, i = e % 4, j = e < 16 ? chunk : 4 + chunk;
						uint8_t byte = blk[gl.qs + 32 * chunk + 4 * r + i];
						int q = e < 16 ? byte & 0xf : byte >> 4;
						if (gl.qh >= 0)
							q |= ((blk[gl.qh + 4 * r + i] >> j) & 1) << 4;
						s += q * xt[b].q[e];
					}
					acc = fmaf(f16_at(blk + 2 * r) * xt[b].d, (float)s, acc);
					if (gl.m >= 0)
						acc = fmaf(f16_at(blk + gl.m + 2 * r), xt[b].d * (float)xt[b].sum, acc);
				}
				y[(size_t)t * ldy + 8 * (size_t)g + (size_t)r] = acc;
			}
}

void
gemm_q4_1x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	gemm_legacy_x8_scalar(TT_Q4_1, grp, ng, x, nb, nt, y, ldy);
}

void
gemm_q5_0x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	gemm_legacy_x8_scalar(TT_Q5_0, grp, ng, x, nb, nt, y, ldy);
}

void
gemm_q5_1x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	gemm_legacy_x8_scalar(TT_Q5_1, grp, ng, x, nb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* c | the fifth bits hs carry at bit 4 (one vpternlogd with AVX-512VL:
 * A | (B & C) is 0xf8) */
#define FIFTH_OR_AVX2(c, hs, five) _mm256_or_si256(c, _mm256_and_si256(hs, five))
#define FIFTH_OR_AVX512(c, hs, five) _mm256_ternarylogic_epi32(c, hs, five, 0xf8)

/* c[0..7]: the values (0..15 or 0..31) of a group's block at grp whose
 * fifth bits are at H (or none, -1) and chunks at QS, elements 4s.. of
 * the 8 rows in c[s], 16+4s.. in c[s + 4].  16-bit shifts: bit 4 of each
 * byte comes from its own byte for shifts of up to 4. */
#define LEGACY_X8_UNPACK(c, grp, H, QS, FIFTH_OR)                                                                      \
	do {                                                                                                           \
		const __m256i low_ = _mm256_set1_epi8(0x0f), five_ = _mm256_set1_epi8(0x10);                           \
		(void)five_;                                                                                           \
		_Pragma("GCC unroll 4") for (int s_ = 0; s_ < 4; s_++)                                                 \
		{                                                                                                      \
			__m256i v_ = _mm256_loadu_si256((const __m256i *)((grp) + (QS) + 32 * s_));                    \
			c[s_] = _mm256_and_si256(v_, low_);                                                            \
			c[s_ + 4] = _mm256_and_si256(_mm256_srli_epi16(v_, 4), low_);                                  \
		}                                                                                                      \
		if ((H) >= 0) {                                                                                        \
			__m256i h_ = _mm256_loadu_si256((const __m256i *)((grp) + ((H) >= 0 ? (H) : 0)));              \
			c[0] = FIFTH_OR(c[0], _mm256_slli_epi16(h_, 4), five_);                                        \
			c[1] = FIFTH_OR(c[1], _mm256_slli_epi16(h_, 3), five_);                                        \
			c[2] = FIFTH_OR(c[2], _mm256_slli_epi16(h_, 2), five_);                                        \
			c[3] = FIFTH_OR(c[3], _mm256_slli_epi16(h_, 1), five_);                                        \
			c[4] = FIFTH_OR(c[4], h_, five_);                                                              \
			c[5] = FIFTH_OR(c[5], _mm256_srli_epi16(h_, 1), five_);                                        \
			c[6] = FIFTH_OR(c[6], _mm256_srli_epi16(h_, 2), five_);                                        \
			c[7] = FIFTH_OR(c[7], _mm256_srli_epi16(h_, 3), five_);                                        \
		}                                                                                                      \
	} while (0)

/* nt tokens (a constant where inlined) times one group of a type whose
 * group layout has offsets M (or -1), fifth bits at H (or -1) and chunks
 * at QS, BLOCK bytes a block.  The chunks are unpacked once for every
 * token; M and H are constants, so the tests on them fold away. */
#define DEFINE_GEMM_LEGACY_X8(NAME, TARGET, ACC, FIFTH_OR, M, H, QS, BLOCK, BIAS)                                      \
	TARGET static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_nt(const uint8_t *grp, const struct block_q8 *x, size_t nb, \
							      int nt, float *y, size_t ldy)                            \
	{                                                                                                              \
		__m256 acc[8];                                                                                         \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                     \
		for (size_t b = 0; b < nb; b++, grp += (BLOCK)) {                                                      \
			STREAM_PREFETCH_NT(grp, (BLOCK), nt);                                                          \
			__m256i c[8];                                                                                  \
			LEGACY_X8_UNPACK(c, grp, H, QS, FIFTH_OR);                                                     \
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));                            \
			X8_BLOCK_TOKENS(ACC, c, dw, x, nb, b, nt, BIAS, acc);                                          \
			if ((M) >= 0) {                                                                                \
				__m256 mw = _mm256_cvtph_ps(                                                           \
					_mm_loadu_si128((const __m128i *)(grp + ((M) >= 0 ? (M) : 0))));               \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                   \
				{                                                                                      \
					const struct block_q8 *xb = x + (size_t)t * nb + b;                            \
					acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xb->d * (float)xb->sum), acc[t]);  \
				}                                                                                      \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);    \
	}                                                                                                              \
	TARGET void NAME(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,            \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nb *(BLOCK), x, nb, nt, y, ldy);                                   \
	}

/* group layouts (group_layout): Q4_1 m 16, chunks 32, 160 bytes; Q5_0
 * fifth bits 16, chunks 48, 176; Q5_1 m 16, fifth bits 32, chunks 64, 192 */
DEFINE_GEMM_LEGACY_X8(gemm_q4_1x8_avx2, AVX2, U8I8_ACC_AVX2, FIFTH_OR_AVX2, 16, -1, 32, 160, 0)
DEFINE_GEMM_LEGACY_X8(gemm_q5_0x8_avx2, AVX2, U8I8_ACC_AVX2, FIFTH_OR_AVX2, -1, 16, 48, 176, 16)
DEFINE_GEMM_LEGACY_X8(gemm_q5_1x8_avx2, AVX2, U8I8_ACC_AVX2, FIFTH_OR_AVX2, 16, 32, 64, 192, 0)
DEFINE_GEMM_LEGACY_X8(gemm_q4_1x8_avx512, AVX512, U8I8_ACC_VNNI, FIFTH_OR_AVX512, 16, -1, 32, 160, 0)
DEFINE_GEMM_LEGACY_X8(gemm_q5_0x8_avx512, AVX512, U8I8_ACC_VNNI, FIFTH_OR_AVX512, -1, 16, 48, 176, 16)
DEFINE_GEMM_LEGACY_X8(gemm_q5_1x8_avx512, AVX512, U8I8_ACC_VNNI, FIFTH_OR_AVX512, 16, 32, 64, 192, 0)

/* LEGACY_X8_UNPACK's values for two tokens a 512-bit vector: each chunk
 * and the fifth bits widened to lane pairs (X8_PAIR_LANES), row r's
 * bytes in lanes 2r and 2r + 1 */
#define LEGACY_X8_UNPACK_PAIRS(c, grp, H, QS)                                                                          \
	do {                                                                                                           \
		const __m512i low_ = _mm512_set1_epi8(0x0f), five_ = _mm512_set1_epi8(0x10);                           \
		(void)five_;                                                                                           \
		_Pragma("GCC unroll 4") for (int s_ = 0; s_ < 4; s_++)                                                 \
		{                                                                                                      \
			__m512i v_ = X8_LOAD_PAIRS((grp) + (QS) + 32 * s_);                                            \
			c[s_] = _mm512_and_si512(v_, low_);                                                            \
			c[s_ + 4] = _mm512_and_si512(_mm512_srli_epi16(v_, 4), low_);                                  \
		}                                                                                                      \
		if ((H) >= 0) {                                                                                        \
			__m512i h_ = X8_LOAD_PAIRS((grp) + ((H) >= 0 ? (H) : 0));                                      \
			c[0] = _mm512_ternarylogic_epi32(c[0], _mm512_slli_epi16(h_, 4), five_, 0xf8);                 \
			c[1] = _mm512_ternarylogic_epi32(c[1], _mm512_slli_epi16(h_, 3), five_, 0xf8);                 \
			c[2] = _mm512_ternarylogic_epi32(c[2], _mm512_slli_epi16(h_, 2), five_, 0xf8);                 \
			c[3] = _mm512_ternarylogic_epi32(c[3], _mm512_slli_epi16(h_, 1), five_, 0xf8);                 \
			c[4] = _mm512_ternarylogic_epi32(c[4], h_, five_, 0xf8);                                       \
			c[5] = _mm512_ternarylogic_epi32(c[5], _mm512_srli_epi16(h_, 1), five_, 0xf8);                 \
			c[6] = _mm512_ternarylogic_epi32(c[6], _mm512_srli_epi16(h_, 2), five_, 0xf8);                 \
			c[7] = _mm512_ternarylogic_epi32(c[7], _mm512_srli_epi16(h_, 3), five_, 0xf8);                 \
		}                                                                                                      \
	} while (0)

/*
 * Two tokens a 512-bit vector, for decode batches and short prompts, as
 * Q4_0's pairs (cpu_q4_0x8.c): the unpacking once a block for all the
 * pairs, one vpdpbusd for two tokens.  The offsets' term, m * (d_x *
 * sum(x)), comes after the block's as in DEFINE_GEMM_LEGACY_X8, with the
 * same float steps: the results are its bits.  BIAS_SHIFT: Q5_0's 16 is
 * 1 << 4; -1 for none.
 */
#define DEFINE_GEMM_LEGACY_PAIRS(NAME, M, H, QS, BLOCK, BIAS_SHIFT)                                                    \
	AVX512 static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_nt(const uint8_t *grp, const struct q8_pair *x, size_t nb,  \
							      int nt, float *y, size_t ldy)                            \
	{                                                                                                              \
		const int np = (nt + 1) / 2;                                                                           \
		__m512 acc[4];                                                                                         \
		_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) acc[p] = _mm512_setzero_ps();                     \
		for (size_t b = 0; b < nb; b++, grp += (BLOCK)) {                                                      \
			STREAM_PREFETCH_NT(grp, (BLOCK), nt);                                                          \
			__m512i c[8];                                                                                  \
			LEGACY_X8_UNPACK_PAIRS(c, grp, H, QS);                                                         \
			__m512 dw = X8_HALVES_PAIRS(grp);                                                              \
			X8_PAIR_BLOCK(c, dw, x, nb, b, np, BIAS_SHIFT, acc);                                           \
			if ((M) >= 0) {                                                                                \
				__m512 mw = X8_HALVES_PAIRS(grp + ((M) >= 0 ? (M) : 0));                               \
				_Pragma("GCC unroll 4") for (int p = 0; p < np; p++)                                   \
				{                                                                                      \
					const struct q8_pair *xb = x + (size_t)p * nb + b;                             \
					__m512 dsum = _mm512_mul_ps(_mm512_castsi512_ps(BCAST8_512(xb->d)),            \
								    _mm512_cvtepi32_ps(BCAST8_512(xb->sum)));          \
					acc[p] = _mm512_fmadd_ps(mw, dsum, acc[p]);                                    \
				}                                                                                      \
			}                                                                                              \
		}                                                                                                      \
		X8_PAIRS_STORE(acc, np, nt, y, ldy);                                                                   \
	}                                                                                                              \
	AVX512 void NAME(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y, size_t ldy) \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nb *(BLOCK), x, nb, nt, y, ldy);                                   \
	}

DEFINE_GEMM_LEGACY_PAIRS(gemm_q4_1x8_pairs_avx512, 16, -1, 32, 160, -1)
DEFINE_GEMM_LEGACY_PAIRS(gemm_q5_0x8_pairs_avx512, -1, 16, 48, 176, 4)
DEFINE_GEMM_LEGACY_PAIRS(gemm_q5_1x8_pairs_avx512, 16, 32, 64, 192, -1)

/* A group's nb blocks widened as widen_legacy_x8_scalar does: the values
 * unpacked as the kernels do and transposed to rows (transpose8x8) */
AVX2 void
widen_legacy_x8_avx2(uint32_t type, const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum,
		     float *wd, float *wmin, size_t ld)
{
	struct legacy_layout gl = group_layout(type);
	int sub = type == TT_Q5_0 ? 16 : 0;
	const __m256i bias = _mm256_set1_epi8((char)sub);

	for (size_t b = 0; b < nb; b++, grp += gl.bytes) {
		__m256i c[8];
		LEGACY_X8_UNPACK(c, grp, gl.qh, gl.qs, FIFTH_OR_AVX2);
		transpose8x8(c); /* c[r]: row r's 32 values in order */
		for (int r = 0; r < 8; r++) {
			size_t at = (size_t)r * ld + b;
			int32_t lo, hi;
			sum_u8_halves(c[r], &lo, &hi);
			_mm256_storeu_si256((__m256i *)(dst + (size_t)r * dst_row_bytes + b * 34 + 2),
					    _mm256_sub_epi8(c[r], bias));
			wsum[at] = -128 * (lo + hi - 32 * sub);
			wd[at] = f16c_load(grp + 2 * r);
			if (gl.m >= 0)
				wmin[at] = -f16c_load(grp + gl.m + 2 * r);
		}
	}
}
#endif
