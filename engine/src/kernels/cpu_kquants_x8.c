/*
 * Q4_K and Q5_K weights repacked at load, 8 rows interleaved, for decode.
 *
 * A Q4_K super-block (256 weights, 144 bytes) is an fp16 d and dmin,
 * twelve bytes of 6-bit scales and mins for its eight 32-value
 * sub-blocks, and 128 bytes of nibbles: 32-byte chunk p holds sub-block
 * 2p in its low nibbles and 2p+1 in its high ones.  Q5_K (176 bytes) adds
 * 32 bytes of fifth bits before the nibbles: bit j of byte l belongs to
 * value l of sub-block j.  The per-row dot (cpu_dot_kquants.c) needs a
 * vpmaddubsw, a scale shuffle and a vpdpwssd for every 32 values, and
 * generation stayed compute-bound at about 20 GB/s a core.  With 8 rows
 * side by side, one row per 32-bit lane, a vpdpbusd with 4 activation
 * bytes broadcast advances all 8 rows by 4 values, and a sub-block's
 * scale is a lane-wise multiply of the 8 sums (37 GB/s a core on the
 * same data; docs/performance.md).  A decode batch (2 to 15 tokens)
 * unpacks a chunk once for up to 8 tokens.
 *
 * An 8-row group stores, per super-block (KX8_BLOCK: 8 times the file's
 * super-block, the same size):
 *   0    d of the 8 rows (fp16), one vcvtph2ps for all
 *   16   dmin of the 8 rows
 *   32   the scales' first 32-bit word of the 8 rows, 64 the second,
 *        96 the third: the 6-bit unpacking runs on all 8 rows at once
 *   128 + 32s   (Q5_K only) fifth-bit bytes 4s..4s+3 of each row
 *   q + 256p + 32s, q = 128 (Q4_K) or 384 (Q5_K): bytes 4s..4s+3 of each
 *        row's chunk p: low nibbles are values 4s.. of sub-block 2p, high
 *        nibbles values 4s.. of sub-block 2p+1
 * with row r in bytes 4r..4r+3 of every 32.  Prefill unpacks a group's
 * super-blocks back to the file's layout and widens them as it widens
 * file rows.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

/* Where a super-block's parts are in the file's layout and in a group's. */
#define SB_BYTES(five) ((five) ? 176 : 144)
#define FILE_QS(five) ((five) ? 48 : 16)
#define GROUP_QS(five) ((five) ? 384 : 128)

void
kx8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, int five, uint8_t *dst)
{
	dst += (size_t)g0 * nsb * KX8_BLOCK(five);
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += KX8_BLOCK(five))
			for (int r = 0; r < 8; r++) {
				const uint8_t *b = src + (size_t)(8 * g + r) * row_bytes + i * SB_BYTES(five);
				memcpy(dst + 2 * r, b, 2);
				memcpy(dst + 16 + 2 * r, b + 2, 2);
				for (int k = 0; k < 3; k++)
					memcpy(dst + 32 + 32 * k + 4 * r, b + 4 + 4 * k, 4);
				for (int s = 0; s < 8 && five; s++)
					memcpy(dst + 128 + 32 * s + 4 * r, b + 16 + 4 * s, 4);
				for (int p = 0; p < 4; p++)
					for (int s = 0; s < 8; s++)
						memcpy(dst + GROUP_QS(five) + 256 * p + 32 * s + 4 * r,
						       b + FILE_QS(five) + 32 * p + 4 * s, 4);
			}
}

void
kx8_unpack(const uint8_t *grp, int r, int five, uint8_t *blk)
{
	memcpy(blk, grp + 2 * r, 2);
	memcpy(blk + 2, grp + 16 + 2 * r, 2);
	for (int k = 0; k < 3; k++)
		memcpy(blk + 4 + 4 * k, grp + 32 + 32 * k + 4 * r, 4);
	for (int s = 0; s < 8 && five; s++)
		memcpy(blk + 16 + 4 * s, grp + 128 + 32 * s + 4 * r, 4);
	for (int p = 0; p < 4; p++)
		for (int s = 0; s < 8; s++)
			memcpy(blk + FILE_QS(five) + 32 * p + 4 * s, grp + GROUP_QS(five) + 256 * p + 32 * s + 4 * r,
			       4);
}

/* kx8_unpack for each type, as a group_unpack_fn */
static void
kx8_unpack4(const uint8_t *grp, int r, uint8_t *blk)
{
	kx8_unpack(grp, r, 0, blk);
}

static void
kx8_unpack5(const uint8_t *grp, int r, uint8_t *blk)
{
	kx8_unpack(grp, r, 1, blk);
}

void
kx8_dequantize_row(const uint8_t *grp, size_t nsb, int r, int five, float *out)
{
	groups_dequantize_row(grp, nsb, KX8_BLOCK(five), five ? kx8_unpack5 : kx8_unpack4, five ? TT_Q5_K : TT_Q4_K, r,
			      out);
}

void
groups_dequantize_row(const uint8_t *grp, size_t nsb, size_t block_bytes, group_unpack_fn unpack, uint32_t type, int r,
		      float *out)
{
	uint8_t blk[GROUP_SB_MAX];

	for (size_t i = 0; i < nsb; i++, grp += block_bytes, out += 256) {
		unpack(grp, r, blk);
		tensor_dequantize_row(type, blk, out, 256);
	}
}

void
groups_widen(void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *), group_unpack_fn unpack,
	     const uint8_t *grp, size_t nsb, size_t block_bytes, int sums, uint8_t *dst, size_t dst_row_bytes,
	     int32_t *wsum, float *wd, size_t ld)
{
	uint8_t blk[GROUP_SB_MAX];

	for (size_t i = 0; i < nsb; i++, grp += block_bytes)
		for (int r = 0; r < 8; r++) {
			size_t at = (size_t)r * ld + 8 * (size_t)sums * i;
			unpack(grp, r, blk);
			widen(blk, dst + (size_t)r * dst_row_bytes + i * 8 * 34, 8, wsum + at, wd + at);
		}
}

/* The groups' scalar reference: y[t * ldy + 8 * g + r] = the sum over
 * super-blocks i of row r of group g's block i, unpacked, times token t's
 * block i by the type's scalar dot */
void
gemm_groups_q8k_scalar(const uint8_t *grp, int ng, size_t block_bytes, group_unpack_fn unpack,
		       float (*dot)(const void *, const struct block_q8k *, size_t), const struct block_q8k *x,
		       size_t nsb, int nt, float *y, size_t ldy)
{
	uint8_t blk[GROUP_SB_MAX];

	for (int g = 0; g < ng; g++, grp += nsb * block_bytes)
		for (int t = 0; t < nt; t++) {
			float *yt = y + (size_t)t * ldy + 8 * (size_t)g;
			for (int r = 0; r < 8; r++)
				yt[r] = 0.0f;
			for (size_t i = 0; i < nsb; i++)
				for (int r = 0; r < 8; r++) {
					unpack(grp + i * block_bytes, r, blk);
					yt[r] += dot(blk, x + (size_t)t * nsb + i, 1);
				}
		}
}

void
gemm_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, int five, float *y,
		size_t ldy)
{
	gemm_groups_q8k_scalar(grp, ng, KX8_BLOCK(five), five ? kx8_unpack5 : kx8_unpack4,
			       five ? dot_q5_k_q8k_scalar : dot_q4_k_q8k_scalar, x, nsb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* Sub-block scales (or mins) j of the 8 rows as int32 lanes, from the
 * words holding bytes j - j % 4 .. of each row (sh = 8 * (j % 4)). */
#define KX8_BYTE(v, sh) _mm256_and_si256(_mm256_srli_epi32(v, sh), _mm256_set1_epi32(0xff))

/* Fifth bit `bit` of each byte of h moved to bit 4 (bit is a constant
 * once the loops are unrolled; 16-bit shifts are safe after the mask). */
#define KX8_BIT4(h, bit)                                                                                               \
	((bit) <= 4 ? _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8((char)(1 << (bit)))),                     \
					(bit) <= 4 ? 4 - (bit) : 0)                                                    \
		    : _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8((char)(1 << (bit)))),                     \
					(bit) > 4 ? (bit)-4 : 0))

/* The 6-bit unpacking of k4_scale_min for a group's 8 rows at once:
 * sc[k], mn[k] hold sub-blocks 4k..4k+3's scales and mins, byte j % 4
 * of each row's lane (KX8_BYTE picks one). */
#define KX8_SCALES_MINS(grp, six, low, top, sc, mn)                                                                    \
	do {                                                                                                           \
		__m256i u0_ = _mm256_loadu_si256((const __m256i *)((grp) + 32));                                       \
		__m256i u1_ = _mm256_loadu_si256((const __m256i *)((grp) + 64));                                       \
		__m256i u2_ = _mm256_loadu_si256((const __m256i *)((grp) + 96));                                       \
		(sc)[0] = _mm256_and_si256(u0_, six);                                                                  \
		(sc)[1] =                                                                                              \
			_mm256_or_si256(_mm256_and_si256(u2_, low), _mm256_and_si256(_mm256_srli_epi32(u0_, 2), top)); \
		(mn)[0] = _mm256_and_si256(u1_, six);                                                                  \
		(mn)[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2_, 4), low),                            \
					  _mm256_and_si256(_mm256_srli_epi32(u1_, 2), top));                           \
	} while (0)

/* Chunks s and s+1 of part p of a group's super-block: the values of
 * sub-block 2p (l0, l1: bytes 4s.. and 4s+4.. of each row) and of 2p+1
 * (h0, h1), with Q5_K's fifth bit moved in where FIVE. */
#define KX8_UNPACK_PAIR(grp, c, p, s, FIVE, low, l0, l1, h0, h1)                                                       \
	do {                                                                                                           \
		__m256i c0_ = _mm256_loadu_si256((const __m256i *)((c) + 32 * (s)));                                   \
		__m256i c1_ = _mm256_loadu_si256((const __m256i *)((c) + 32 * (s) + 32));                              \
		(l0) = _mm256_and_si256(c0_, low);                                                                     \
		(l1) = _mm256_and_si256(c1_, low);                                                                     \
		(h0) = _mm256_and_si256(_mm256_srli_epi16(c0_, 4), low);                                               \
		(h1) = _mm256_and_si256(_mm256_srli_epi16(c1_, 4), low);                                               \
		if (FIVE) {                                                                                            \
			__m256i f0_ = _mm256_loadu_si256((const __m256i *)((grp) + 128 + 32 * (s)));                   \
			__m256i f1_ = _mm256_loadu_si256((const __m256i *)((grp) + 160 + 32 * (s)));                   \
			(l0) = _mm256_or_si256(l0, KX8_BIT4(f0_, 2 * (p)));                                            \
			(l1) = _mm256_or_si256(l1, KX8_BIT4(f1_, 2 * (p)));                                            \
			(h0) = _mm256_or_si256(h0, KX8_BIT4(f0_, 2 * (p) + 1));                                        \
			(h1) = _mm256_or_si256(h1, KX8_BIT4(f1_, 2 * (p) + 1));                                        \
		}                                                                                                      \
	} while (0)

/* Part p's sums of sub-blocks 2p (a) and 2p+1 (b) of the 8 rows times
 * their scales into dot: bytes 2p % 4 and the next of sc. */
#define KX8_PART_DOT(a, b, p, sc, dot)                                                                                 \
	do {                                                                                                           \
		int sh_ = 16 * ((p)&1);                                                                                \
		(dot) = _mm256_add_epi32((dot),                                                                        \
					 _mm256_add_epi32(_mm256_mullo_epi32(a, KX8_BYTE((sc)[(p) / 2], sh_)),         \
							  _mm256_mullo_epi32(b, KX8_BYTE((sc)[(p) / 2], sh_ + 8))));   \
	} while (0)

/* All 8 sub-blocks' mins (mn) times the token's sums of them (xs), in
 * four vpdpwssd: the mins of sub-blocks 4k and 4k + 2 as the two 16-bit
 * halves of each row's lane against those sums (|xs| <= 32 x 128) side by
 * side, then 4k + 1 and 4k + 3; eight vpmulld (two uops each) and byte
 * extracts a super-block otherwise. */
#define KX8_MINS_ONCE(I16_ACC, mn, xs, msum)                                                                           \
	do {                                                                                                           \
		const __m256i bw_ = _mm256_set1_epi32(0x00ff00ff);                                                     \
		(msum) = _mm256_setzero_si256();                                                                       \
		for (int k_ = 0; k_ < 2; k_++) {                                                                       \
			__m256i ev_ = _mm256_and_si256((mn)[k_], bw_);                                                 \
			__m256i od_ = _mm256_and_si256(_mm256_srli_epi32((mn)[k_], 8), bw_);                           \
			(msum) = I16_ACC((msum), ev_, _mm256_set1_epi32(XS_PAIR(xs, 4 * k_, 4 * k_ + 2)));             \
			(msum) = I16_ACC((msum), od_, _mm256_set1_epi32(XS_PAIR(xs, 4 * k_ + 1, 4 * k_ + 3)));         \
		}                                                                                                      \
	} while (0)
#define XS_PAIR(xs, i, j) ((int32_t)((uint32_t)(uint16_t)(xs)[i] | (uint32_t)(xs)[j] << 16))

/* A super-block's integer sums into the float ones: the rows' d and dmin
 * (fp16, at grp and grp + 16) times the token's d. */
#define KX8_BLOCK_FLOATS(grp, xd, dot, msum, acc, mins)                                                                \
	do {                                                                                                           \
		(acc) = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp))), xd),   \
					_mm256_cvtepi32_ps(dot), (acc));                                               \
		(mins) =                                                                                               \
			_mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((grp) + 16))), \
						      xd),                                                             \
					_mm256_cvtepi32_ps(msum), (mins));                                             \
	} while (0)

/* How a one-token kernel asks for its stream, chosen once a call (a
 * constant in its inlined body): every line of a block at its start
 * (DENSE_PREFETCH), GROUP_PREFETCH's, SPARSE_PREFETCH's line, or each
 * part's lines as the kernel reaches it (PART_PREFETCH). */
enum { KX8_PF_DENSE, KX8_PF_GROUP, KX8_PF_SPARSE, KX8_PF_PARTS };

/* A super-block's start in the one-token kernels: the prefetch pf asks
 * for there (none for KX8_PF_PARTS), the 8 rows' scales and
 * mins, and the token's sum of each 32-value sub-block (Q8_K keeps them
 * 16 values at a time). */
#define KX8_GEMV_BLOCK_START(grp, x, i, FIVE, pf, six, low, top, sc, mn, xs)                                           \
	do {                                                                                                           \
		if ((pf) == KX8_PF_DENSE)                                                                              \
			DENSE_PREFETCH(grp, KX8_BLOCK(FIVE));                                                          \
		else if ((pf) == KX8_PF_GROUP)                                                                         \
			GROUP_PREFETCH(grp, KX8_BLOCK(FIVE), 1);                                                       \
		else if ((pf) == KX8_PF_SPARSE)                                                                        \
			SPARSE_PREFETCH(grp, i, KX8_BLOCK(FIVE));                                                      \
		KX8_SCALES_MINS(grp, six, low, top, sc, mn);                                                           \
		for (int j_ = 0; j_ < 8; j_++)                                                                         \
			(xs)[j_] = (x)->bsum[2 * j_] + (x)->bsum[2 * j_ + 1];                                          \
	} while (0)

/* A one-token kernel's entry: its prefetch chosen once a call */
#define KX8_GEMV_ENTRY(NAME, TARGET)                                                                                   \
	TARGET static void NAME(const uint8_t *grp, const struct block_q8k *x, size_t nsb, float *y)                   \
	{                                                                                                              \
		if (STREAM_PREFETCH_WANTED(1))                                                                         \
			NAME##_pf(grp, x, nsb, y, KX8_PF_GROUP);                                                       \
		else                                                                                                   \
			NAME##_pf(grp, x, nsb, y, KX8_PF_SPARSE);                                                      \
	}

/* One 8-row group times one Q8_K token, for FIVE = 0 (Q4_K) or 1 (Q5_K).
 * The prefetch is chosen once a call: a line SPARSE_AHEAD ahead every
 * SPARSE_BLOCKS super-blocks (every other one of Q4_K's, every one of
 * Q5_K's) as X8_STREAM_PREFETCH asks, or GROUP_PREFETCH's where a dense
 * prefetch is on.  With the choice made in the loop, a Zen 5's Q4_K_M
 * decode did not gain from the sparse line (docs/performance.md). */
#define DEFINE_GEMV_KX8(NAME, TARGET, U8I8_ACC, I16_ACC, FIVE)                                                         \
	TARGET static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_pf(const uint8_t *grp, const struct block_q8k *x,           \
							      size_t nsb, float *y, int pf)                            \
	{                                                                                                              \
		const __m256i low = _mm256_set1_epi8(0xf), six = _mm256_set1_epi8(0x3f), top = _mm256_set1_epi8(0x30); \
		__m256 acc = _mm256_setzero_ps(), mins = acc;                                                          \
		for (size_t i = 0; i < nsb; i++, grp += KX8_BLOCK(FIVE), x++) {                                        \
			__m256i sc[2], mn[2];                                                                          \
			int32_t xs[8];                                                                                 \
			KX8_GEMV_BLOCK_START(grp, x, i, FIVE, pf, six, low, top, sc, mn, xs);                          \
			__m256i dot = _mm256_setzero_si256(), msum;                                                    \
			_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                            \
			{                                                                                              \
				const uint8_t *c = grp + GROUP_QS(FIVE) + 256 * p;                                     \
				const int8_t *xq = x->q + 64 * p;                                                      \
				/* two chains a sub-block: one would wait on latency */                                \
				__m256i a0 = _mm256_setzero_si256(), a1 = a0, b0 = a0, b1 = a0;                        \
				_Pragma("GCC unroll 4") for (int s = 0; s < 8; s += 2)                                 \
				{                                                                                      \
					__m256i l0, l1, h0, h1;                                                        \
					KX8_UNPACK_PAIR(grp, c, p, s, FIVE, low, l0, l1, h0, h1);                      \
					a0 = U8I8_ACC(a0, l0, BCAST4_256(xq + 4 * s));                                 \
					a1 = U8I8_ACC(a1, l1, BCAST4_256(xq + 4 * s + 4));                             \
					b0 = U8I8_ACC(b0, h0, BCAST4_256(xq + 32 + 4 * s));                            \
					b1 = U8I8_ACC(b1, h1, BCAST4_256(xq + 36 + 4 * s));                            \
				}                                                                                      \
				KX8_PART_DOT(_mm256_add_epi32(a0, a1), _mm256_add_epi32(b0, b1), p, sc, dot);          \
			}                                                                                              \
			KX8_MINS_ONCE(I16_ACC, mn, xs, msum);                                                          \
			KX8_BLOCK_FLOATS(grp, _mm256_set1_ps(x->d), dot, msum, acc, mins);                             \
		}                                                                                                      \
		_mm256_storeu_ps(y, _mm256_sub_ps(acc, mins));                                                         \
	}                                                                                                              \
	KX8_GEMV_ENTRY(NAME, TARGET)

DEFINE_GEMV_KX8(gemv_q4_kx8_avx2, AVX2, U8I8_ACC_AVX2, I16_ACC_AVX2, 0)
DEFINE_GEMV_KX8(gemv_q4_kx8_avx512, AVX512, U8I8_ACC_VNNI, I16_ACC_VNNI, 0)
DEFINE_GEMV_KX8(gemv_q5_kx8_avx2, AVX2, U8I8_ACC_AVX2, I16_ACC_AVX2, 1)
DEFINE_GEMV_KX8(gemv_q5_kx8_avx512, AVX512, U8I8_ACC_VNNI, I16_ACC_VNNI, 1)

/* KX8_BYTE and KX8_BIT4 on 512-bit vectors */
#define KX8_BYTE_512(v, sh) _mm512_and_si512(_mm512_srli_epi32(v, sh), _mm512_set1_epi32(0xff))
#define KX8_BIT4_512(h, bit)                                                                                           \
	((bit) <= 4 ? _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8((char)(1 << (bit)))),                     \
					(bit) <= 4 ? 4 - (bit) : 0)                                                    \
		    : _mm512_srli_epi16(_mm512_and_si512(h, _mm512_set1_epi8((char)(1 << (bit)))),                     \
					(bit) > 4 ? (bit)-4 : 0))

/* The one-token kernel with two chunks a 512-bit vector: chunks s and
 * s + 1 of a part are 64 bytes side by side, so one load, one mask and
 * one vpdpbusd take both, the token's bytes 4s.. in the low 8 lanes and
 * 4s + 4.. in the high ones (X8_TWO_CHUNKS_X).  Half the instructions of
 * the 256-bit kernel a byte.  Q4_K's half sums, 16 values of a sub-block
 * each, are at most 16 x 15 x 128 < 2^15 in magnitude: a part's two
 * sub-blocks go as the 16-bit halves of one vector (a low, b high), one
 * vpdpwssd takes both times their scales (sc_w: each row's pair for part
 * p, from a widening and a permute a super-block), and the halves are
 * added once a super-block.  Q5_K's reach 16 x 31 x 128: its halves are
 * added once a part and the sums multiplied by the scales (KX8_PART_DOT).
 * The mins go once a super-block (KX8_MINS_ONCE).  On the AMX Xeon, one
 * thread on weights in L2, Q4_K read 35.7-36.2 GB/s against 30.3 with
 * the scales and mins multiplied by vpmulld once a part, Q5_K 31.9
 * against 29.4.  The integer sums are exact and the float steps the
 * 256-bit kernel's, so the results are its bits.  Where
 * 512-bit vectors run whole (cpu_pairs_speedup, as the pair kernels).
 * Where cpu_stream_prefetch is on (the Xeons), both ask for a part's
 * lines as they reach it (PART_PREFETCH).  Elsewhere Q5_K's asks for
 * every line of a block ahead, as Q6_K's does (gemv_q6_kx8_wide_avx512):
 * on a Zen 5 at 73-82 GB/s Q5_K_M took 3 % more with it, while Q4_K's
 * lost (Q4_K_M 70-81 tok/s against 90-96) and keeps the sparse line. */
#define X8_TWO_CHUNKS_X(xq, sel)                                                                                       \
	_mm512_permutexvar_epi32(sel, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(xq))))
#define DEFINE_GEMV_KX8_512(NAME, FIVE)                                                                                \
	AVX512 static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_pf(const uint8_t *grp, const struct block_q8k *x,           \
							      size_t nsb, float *y, int pf)                            \
	{                                                                                                              \
		const __m256i low8 = _mm256_set1_epi8(0xf), six = _mm256_set1_epi8(0x3f),                              \
			      top = _mm256_set1_epi8(0x30);                                                            \
		const __m512i low = _mm512_set1_epi8(0xf), low_words = _mm512_set1_epi32(0xffff),                      \
			      sel = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),                  \
			      even = _mm512_set_epi32(14, 12, 10, 8, 6, 4, 2, 0, 14, 12, 10, 8, 6, 4, 2, 0),           \
			      odd = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 15, 13, 11, 9, 7, 5, 3, 1);            \
		__m256 acc = _mm256_setzero_ps(), mins = acc;                                                          \
		for (size_t i = 0; i < nsb; i++, grp += KX8_BLOCK(FIVE), x++) {                                        \
			__m256i sc[2], mn[2], dot = _mm256_setzero_si256(), msum;                                      \
			__m512i sc_w[4], dot2 = _mm512_setzero_si512();                                                \
			int32_t xs[8];                                                                                 \
			KX8_GEMV_BLOCK_START(grp, x, i, FIVE, pf, six, low8, top, sc, mn, xs);                         \
			if (!FIVE) { /* words 4r.. of sc_w01: row r's scales of sub-blocks 0..3 */                     \
				__m512i sc_w01 = _mm512_cvtepu8_epi16(sc[0]), sc_w23 = _mm512_cvtepu8_epi16(sc[1]);    \
				sc_w[0] = _mm512_permutexvar_epi32(even, sc_w01);                                      \
				sc_w[1] = _mm512_permutexvar_epi32(odd, sc_w01);                                       \
				sc_w[2] = _mm512_permutexvar_epi32(even, sc_w23);                                      \
				sc_w[3] = _mm512_permutexvar_epi32(odd, sc_w23);                                       \
			}                                                                                              \
			_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                            \
			{                                                                                              \
				const uint8_t *c = grp + GROUP_QS(FIVE) + 256 * p;                                     \
				const int8_t *xq = x->q + 64 * p;                                                      \
				if (pf == KX8_PF_PARTS)                                                                \
					PART_PREFETCH(grp, KX8_BLOCK(FIVE), p, 4);                                     \
				__m512i a2 = _mm512_setzero_si512(), b2 = a2;                                          \
				_Pragma("GCC unroll 4") for (int s = 0; s < 8; s += 2)                                 \
				{                                                                                      \
					__m512i v = _mm512_loadu_si512(c + 32 * s);                                    \
					__m512i l = _mm512_and_si512(v, low);                                          \
					__m512i h = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);                    \
					if (FIVE) {                                                                    \
						__m512i f = _mm512_loadu_si512(grp + 128 + 32 * s);                    \
						l = _mm512_or_si512(l, KX8_BIT4_512(f, 2 * p));                        \
						h = _mm512_or_si512(h, KX8_BIT4_512(f, 2 * p + 1));                    \
					}                                                                              \
					a2 = _mm512_dpbusd_epi32(a2, l, X8_TWO_CHUNKS_X(xq + 4 * s, sel));             \
					b2 = _mm512_dpbusd_epi32(b2, h, X8_TWO_CHUNKS_X(xq + 32 + 4 * s, sel));        \
				}                                                                                      \
				if (FIVE) {                                                                            \
					__m256i a = _mm256_add_epi32(_mm512_castsi512_si256(a2),                       \
								     _mm512_extracti64x4_epi64(a2, 1));                \
					__m256i b = _mm256_add_epi32(_mm512_castsi512_si256(b2),                       \
								     _mm512_extracti64x4_epi64(b2, 1));                \
					KX8_PART_DOT(a, b, p, sc, dot);                                                \
				} else { /* (a & 0xffff) | b << 16: 0xec is A & C | B */                               \
					__m512i ab_ = _mm512_ternarylogic_epi32(a2, _mm512_slli_epi32(b2, 16),         \
										low_words, 0xec);                      \
					dot2 = _mm512_dpwssd_epi32(dot2, ab_, sc_w[p]);                                \
				}                                                                                      \
			}                                                                                              \
			if (!FIVE)                                                                                     \
				dot = _mm256_add_epi32(_mm512_castsi512_si256(dot2),                                   \
						       _mm512_extracti64x4_epi64(dot2, 1));                            \
			KX8_MINS_ONCE(I16_ACC_VNNI, mn, xs, msum);                                                     \
			KX8_BLOCK_FLOATS(grp, _mm256_set1_ps(x->d), dot, msum, acc, mins);                             \
		}                                                                                                      \
		_mm256_storeu_ps(y, _mm256_sub_ps(acc, mins));                                                         \
	}                                                                                                              \
	AVX512 static void NAME(const uint8_t *grp, const struct block_q8k *x, size_t nsb, float *y)                   \
	{                                                                                                              \
		if (STREAM_PREFETCH_WANTED(1)) /* part by part into L2 */                                              \
			NAME##_pf(grp, x, nsb, y, KX8_PF_PARTS);                                                       \
		else if (FIVE) /* every line, whatever is asked: one copy */                                           \
			NAME##_pf(grp, x, nsb, y, KX8_PF_DENSE);                                                       \
		else                                                                                                   \
			NAME##_pf(grp, x, nsb, y, KX8_PF_SPARSE);                                                      \
	}

DEFINE_GEMV_KX8_512(gemv_q4_kx8_wide_avx512, 0)
DEFINE_GEMV_KX8_512(gemv_q5_kx8_wide_avx512, 1)

/* nt tokens (2..8, a constant where inlined; tokens' super-blocks nsb
 * apart from x) times one 8-row group, y[t * ldy + r].  A decode batch
 * ran the one-token kernel once a token, unpacking every chunk each time:
 * here a chunk's nibbles (and fifth bits) are unpacked once for all the
 * tokens, and the mins go in one vpdpwssd a sub-block, each min paired
 * with Q8_K's two 16-value sums.  The integer sums are exact and the
 * float steps are the one-token kernel's, so a token's outputs are the
 * same bits alone or in a batch. */
#define DEFINE_GEMM_KX8_NT(NAME, TARGET, U8I8_ACC, I16_ACC, FIVE)                                                      \
	TARGET static inline __attribute__((always_inline)) void NAME(const uint8_t *grp, const struct block_q8k *x,   \
								      size_t nsb, int nt, float *y, size_t ldy)        \
	{                                                                                                              \
		const __m256i low = _mm256_set1_epi8(0xf), six = _mm256_set1_epi8(0x3f), top = _mm256_set1_epi8(0x30); \
		__m256 acc[8], mins[8];                                                                                \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = mins[t] = _mm256_setzero_ps();           \
		for (size_t i = 0; i < nsb; i++, grp += KX8_BLOCK(FIVE)) {                                             \
			GROUP_PREFETCH(grp, KX8_BLOCK(FIVE), nt);                                                      \
			__m256i sc[2], mn[2];                                                                          \
			KX8_SCALES_MINS(grp, six, low, top, sc, mn);                                                   \
			__m256i dot[8], msum[8];                                                                       \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) dot[t] = msum[t] =                        \
				_mm256_setzero_si256();                                                                \
			_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)                                            \
			{                                                                                              \
				__m256i m = KX8_BYTE(mn[j / 4], 8 * (j % 4)); /* 0..63: m | m << 16 is (m, m) */       \
				m = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));                                      \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) msum[t] =                         \
					I16_ACC(msum[t], m, BCAST4_256(x[(size_t)t * nsb + i].bsum + 2 * j));          \
			}                                                                                              \
			_Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                            \
			{                                                                                              \
				const uint8_t *c = grp + GROUP_QS(FIVE) + 256 * p;                                     \
				/* sub-blocks 2p (a) and 2p+1 (b); up to 4 tokens two chains \
				 * each, so that vpdpbusd's latency stays hidden */                         \
				__m256i a0[8], a1[8], b0[8], b1[8];                                                    \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) a0[t] = a1[t] = b0[t] = b1[t] =   \
					_mm256_setzero_si256();                                                        \
				_Pragma("GCC unroll 4") for (int s = 0; s < 8; s += 2)                                 \
				{                                                                                      \
					__m256i l0, l1, h0, h1;                                                        \
					KX8_UNPACK_PAIR(grp, c, p, s, FIVE, low, l0, l1, h0, h1);                      \
					_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                           \
					{                                                                              \
						const int8_t *xq = x[(size_t)t * nsb + i].q + 64 * p + 4 * s;          \
						a0[t] = U8I8_ACC(a0[t], l0, BCAST4_256(xq));                           \
						b0[t] = U8I8_ACC(b0[t], h0, BCAST4_256(xq + 32));                      \
						if (nt <= 4) {                                                         \
							a1[t] = U8I8_ACC(a1[t], l1, BCAST4_256(xq + 4));               \
							b1[t] = U8I8_ACC(b1[t], h1, BCAST4_256(xq + 36));              \
						} else {                                                               \
							a0[t] = U8I8_ACC(a0[t], l1, BCAST4_256(xq + 4));               \
							b0[t] = U8I8_ACC(b0[t], h1, BCAST4_256(xq + 36));              \
						}                                                                      \
					}                                                                              \
				}                                                                                      \
				int sh = 16 * (p & 1);                                                                 \
				__m256i sa = KX8_BYTE(sc[p / 2], sh), sb = KX8_BYTE(sc[p / 2], sh + 8);                \
				_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                   \
				{                                                                                      \
					__m256i a = nt <= 4 ? _mm256_add_epi32(a0[t], a1[t]) : a0[t];                  \
					__m256i b = nt <= 4 ? _mm256_add_epi32(b0[t], b1[t]) : b0[t];                  \
					dot[t] =                                                                       \
						_mm256_add_epi32(dot[t], _mm256_add_epi32(_mm256_mullo_epi32(a, sa),   \
											  _mm256_mullo_epi32(b, sb))); \
				}                                                                                      \
			}                                                                                              \
			__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));                            \
			__m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp + 16)));                     \
			_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                           \
			{                                                                                              \
				__m256 xd = _mm256_set1_ps(x[(size_t)t * nsb + i].d);                                  \
				acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(dot[t]), acc[t]);   \
				mins[t] =                                                                              \
					_mm256_fmadd_ps(_mm256_mul_ps(dm, xd), _mm256_cvtepi32_ps(msum[t]), mins[t]);  \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)                                                   \
			_mm256_storeu_ps(y + (size_t)t * ldy, _mm256_sub_ps(acc[t], mins[t]));                         \
	}

/* ng consecutive groups times nt tokens (1..8): one token takes the
 * one-token kernel, whose four chains suit it. */
#define DEFINE_GEMM_KX8(NAME, TARGET, U8I8_ACC, I16_ACC, FIVE, GEMV)                                                   \
	DEFINE_GEMM_KX8_NT(NAME##_nt, TARGET, U8I8_ACC, I16_ACC, FIVE)                                                 \
	TARGET void NAME(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,          \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		if (nt == 1) {                                                                                         \
			for (int g = 0; g < ng; g++)                                                                   \
				GEMV(grp + (size_t)g * nsb * KX8_BLOCK(FIVE), x, nsb, y + 8 * (size_t)g);              \
			return;                                                                                        \
		}                                                                                                      \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nsb *KX8_BLOCK(FIVE), x, nsb, nt, y, ldy);                         \
	}

/*
 * Two tokens a 512-bit vector (struct q8k_pair), as gemm_q4_0x8_pairs
 * (cpu_q4_0x8.c): the chunks, fifth bits, scales, mins and row scales
 * widened to lane pairs (row r in lanes 2r and 2r + 1) once a super-block
 * for every pair of tokens.  The integer sums are exact and the float
 * steps the kernels' above, so the results are their bits.
 */

#define DEFINE_GEMM_KX8_PAIRS(NAME, FIVE)                                                                              \
	AVX512 static inline                                                                                           \
		__attribute__((always_inline)) void NAME##_nt(const uint8_t *grp, const struct q8k_pair *x,            \
							      size_t nsb, int nt, float *y, size_t ldy)                \
	{                                                                                                              \
		const __m512i low = _mm512_set1_epi8(0xf), lanes = X8_PAIR_LANES;                                      \
		const __m256i six = _mm256_set1_epi8(0x3f), top = _mm256_set1_epi8(0x30),                              \
			      low8 = _mm256_set1_epi8(0xf);                                                            \
		const int np = (nt + 1) / 2;                                                                           \
		__m512 acc[4], mins[4];                                                                                \
		_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) acc[p] = mins[p] = _mm512_setzero_ps();           \
		for (size_t i = 0; i < nsb; i++, grp += KX8_BLOCK(FIVE)) {                                             \
			GROUP_PREFETCH(grp, KX8_BLOCK(FIVE), nt);                                                      \
			__m256i sc8[2], mn8[2];                                                                        \
			KX8_SCALES_MINS(grp, six, low8, top, sc8, mn8);                                                \
			__m512i sc[2];                                                                                 \
			sc[0] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(sc8[0]));                       \
			sc[1] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(sc8[1]));                       \
			__m512i dot[4];                                                                                \
			_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) dot[p] = _mm512_setzero_si512();          \
			_Pragma("GCC unroll 4") for (int q = 0; q < 4; q++)                                            \
			{                                                                                              \
				const uint8_t *c = grp + GROUP_QS(FIVE) + 256 * q;                                     \
				__m512i a[4], b[4];                                                                    \
				_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) a[p] = b[p] =                     \
					_mm512_setzero_si512();                                                        \
				_Pragma("GCC unroll 8") for (int s = 0; s < 8; s++)                                    \
				{                                                                                      \
					__m512i v = X8_LOAD_PAIRS(c + 32 * s);                                         \
					__m512i l = _mm512_and_si512(v, low);                                          \
					__m512i h = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);                    \
					if (FIVE) {                                                                    \
						__m512i f = X8_LOAD_PAIRS(grp + 128 + 32 * s);                         \
						l = _mm512_or_si512(l, KX8_BIT4_512(f, 2 * q));                        \
						h = _mm512_or_si512(h, KX8_BIT4_512(f, 2 * q + 1));                    \
					}                                                                              \
					_Pragma("GCC unroll 4") for (int p = 0; p < np; p++)                           \
					{                                                                              \
						const int8_t *xq = x[(size_t)p * nsb + i].q + 128 * q + 8 * s;         \
						a[p] = _mm512_dpbusd_epi32(a[p], l, BCAST8_512(xq));                   \
						b[p] = _mm512_dpbusd_epi32(b[p], h, BCAST8_512(xq + 64));              \
					}                                                                              \
				}                                                                                      \
				int sh = 16 * (q & 1);                                                                 \
				__m512i sa = KX8_BYTE_512(sc[q / 2], sh), sb = KX8_BYTE_512(sc[q / 2], sh + 8);        \
				_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) dot[p] =                          \
					_mm512_add_epi32(dot[p], _mm512_add_epi32(_mm512_mullo_epi32(a[p], sa),        \
										  _mm512_mullo_epi32(b[p], sb)));      \
			}                                                                                              \
			__m512 dw = X8_HALVES_PAIRS(grp), dm = X8_HALVES_PAIRS(grp + 16);                              \
			__m512i mn[2];                                                                                 \
			mn[0] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(mn8[0]));                       \
			mn[1] = _mm512_permutexvar_epi32(lanes, _mm512_castsi256_si512(mn8[1]));                       \
			_Pragma("GCC unroll 4") for (int p = 0; p < np; p++)                                           \
			{                                                                                              \
				const struct q8k_pair *xp = x + (size_t)p * nsb + i;                                   \
				__m512i msum = _mm512_setzero_si512();                                                 \
				_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)                                    \
				{                                                                                      \
					__m512i m = KX8_BYTE_512(mn[j / 4], 8 * (j % 4));                              \
					m = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));                              \
					msum = _mm512_dpwssd_epi32(msum, m, BCAST8_512(xp->bsum + 4 * j));             \
				}                                                                                      \
				__m512 xd = _mm512_castsi512_ps(BCAST8_512(xp->d));                                    \
				acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(dot[p]), acc[p]);   \
				mins[p] = _mm512_fmadd_ps(_mm512_mul_ps(dm, xd), _mm512_cvtepi32_ps(msum), mins[p]);   \
			}                                                                                              \
		}                                                                                                      \
		_Pragma("GCC unroll 4") for (int p = 0; p < np; p++) acc[p] = _mm512_sub_ps(acc[p], mins[p]);          \
		X8_PAIRS_STORE(acc, np, nt, y, ldy);                                                                   \
	}                                                                                                              \
	AVX512 void NAME(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,           \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		X8_GROUPS_BY_NT(NAME##_nt, grp, ng, nsb *KX8_BLOCK(FIVE), x, nsb, nt, y, ldy);                         \
	}

DEFINE_GEMM_KX8_PAIRS(gemm_q4_kx8_pairs_avx512, 0)
DEFINE_GEMM_KX8_PAIRS(gemm_q5_kx8_pairs_avx512, 1)

DEFINE_GEMM_KX8(gemm_q4_kx8_avx2, AVX2, U8I8_ACC_AVX2, I16_ACC_AVX2, 0, gemv_q4_kx8_avx2)
DEFINE_GEMM_KX8(gemm_q4_kx8_avx512, AVX512, U8I8_ACC_VNNI, I16_ACC_VNNI, 0, gemv_q4_kx8_avx512)
DEFINE_GEMM_KX8(gemm_q5_kx8_avx2, AVX2, U8I8_ACC_AVX2, I16_ACC_AVX2, 1, gemv_q5_kx8_avx2)
DEFINE_GEMM_KX8(gemm_q5_kx8_avx512, AVX512, U8I8_ACC_VNNI, I16_ACC_VNNI, 1, gemv_q5_kx8_avx512)

/* The same with one token on the 512-bit kernel (DEFINE_GEMV_KX8_512) */
DEFINE_GEMM_X8_WIDE(gemm_q4_kx8_wide_avx512, KX8_BLOCK(0), gemm_q4_kx8_avx512, gemv_q4_kx8_wide_avx512)
DEFINE_GEMM_X8_WIDE(gemm_q5_kx8_wide_avx512, KX8_BLOCK(1), gemm_q5_kx8_avx512, gemv_q5_kx8_wide_avx512)

/* kx8_repack with each chunk's 8 x 8 words transposed in registers: the
 * 4-byte copies made loading a model several times slower. */
AVX2 void
kx8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, int five, uint8_t *dst)
{
	dst += (size_t)g0 * nsb * KX8_BLOCK(five);
	for (int64_t g = g0; g < g1; g++)
		for (size_t i = 0; i < nsb; i++, dst += KX8_BLOCK(five)) {
			const uint8_t *sb = src + (size_t)(8 * g) * row_bytes + i * SB_BYTES(five), *b = sb;
			for (int r = 0; r < 8; r++, b += row_bytes) {
				memcpy(dst + 2 * r, b, 2);
				memcpy(dst + 16 + 2 * r, b + 2, 2);
				for (int k = 0; k < 3; k++)
					memcpy(dst + 32 + 32 * k + 4 * r, b + 4 + 4 * k, 4);
			}
			/* the fifth bits (Q5_K), then the four quant chunks */
			for (int p = five ? -1 : 0; p < 4; p++) {
				const uint8_t *from = p < 0 ? sb + 16 : sb + FILE_QS(five) + 32 * p;
				uint8_t *to = p < 0 ? dst + 128 : dst + GROUP_QS(five) + 256 * p;
				__m256i v[8];
				for (int r = 0; r < 8; r++)
					v[r] = _mm256_loadu_si256((const __m256i *)(from + (size_t)r * row_bytes));
				transpose8x8(v); /* v[s] lane r: row r's word s */
				for (int s = 0; s < 8; s++)
					_mm256_storeu_si256((__m256i *)(to + 32 * s), v[s]);
			}
		}
}
#endif
