/*
 * Q8_0 weights repacked at load, 8 rows interleaved, for decode.
 *
 * The file keeps a row's blocks together, so a kernel that works on 8
 * rows at once (decode batches: every weight used for every sequence)
 * reads 8 streams 2 KB and more apart, 34 bytes a step each.  Measured on
 * a 1B model's shapes, one thread: 16.7 GB/s of weights from L2 but 8.3
 * from memory, under a third of what one thread can stream; the
 * prefetchers do not keep 8 short streams ahead.  Here a group of 8 rows
 * is one stream: per block, the 8 scales (one vcvtph2ps gives all) and 8
 * chunks of 32 bytes, chunk s holding bytes 4s..4s+3 of each row, one row
 * per 32-bit lane, stored as w + 128 (unsigned).  One vpdpbusd with 4
 * activation bytes broadcast advances the 8 rows by 4 elements, so a
 * token costs 8 of them a block whatever the batch; the +128 comes off
 * as 128 * sum(x), which every activation block carries.  The same
 * kernel serves one token (generation) and up to 8 (a decode batch).
 * The group is 272 bytes a block, as 8 rows of the file.
 *
 * Prefill widens the groups back to 34-byte int8 rows (an 8 x 8
 * transpose of 32-bit words) for the int8 GEMM.
 */
#include <math.h>
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

void
q8_0x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nb, uint8_t *dst)
{
	dst += (size_t)g0 * nb * Q8_0X8_BLOCK;
	for (int64_t g = g0; g < g1; g++)
		for (size_t b = 0; b < nb; b++, dst += Q8_0X8_BLOCK)
			for (int r = 0; r < 8; r++) {
				const uint8_t *blk = src + (size_t)(8 * g + r) * row_bytes + b * 34;
				memcpy(dst + 2 * r, blk, 2);
				for (int i = 0; i < 32; i++)
					dst[16 + 32 * (i / 4) + 4 * r + i % 4] = blk[2 + i] ^ 0x80;
			}
}

/* Element i of row r in a group's block. */
static inline int
q8_0x8_at(const uint8_t *grp, int r, int i)
{
	return (int)grp[16 + 32 * (i / 4) + 4 * r + i % 4] - 128;
}

void
q8_0x8_dequantize_row(const uint8_t *grp, size_t nb, int r, float *out)
{
	for (size_t b = 0; b < nb; b++, grp += Q8_0X8_BLOCK, out += 32) {
		uint16_t h;
		memcpy(&h, grp + 2 * r, 2);
		float d = fp16_to_f32(h);
		for (int i = 0; i < 32; i++)
			out[i] = d * (float)q8_0x8_at(grp, r, i);
	}
}

void
widen_q8_0x8_scalar(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes)
{
	for (size_t b = 0; b < nb; b++, grp += Q8_0X8_BLOCK)
		for (int r = 0; r < 8; r++) {
			uint8_t *o = dst + (size_t)r * dst_row_bytes + b * 34;
			memcpy(o, grp + 2 * r, 2);
			for (int i = 0; i < 32; i++)
				o[2 + i] = (uint8_t)(int8_t)q8_0x8_at(grp, r, i);
		}
}

/* The scalar reference of the group kernels (Q8_0 here, Q4_0 in
 * cpu_q4_0x8.c): each block's integer sum exact (block_sum: row r of the
 * block at blk times 32 activations), then one multiply-add a block with
 * the row's scale (at 2r in every block of both layouts), as the SIMD
 * kernels sum, so it matches them bit for bit. */
void
gemm_x8_scalar(const uint8_t *grp, int ng, size_t block_bytes,
	       int32_t (*block_sum)(const uint8_t *, int, const int8_t *), const struct block_q8 *x, size_t nb, int nt,
	       float *y, size_t ldy)
{
	for (int gi = 0; gi < ng; gi++, grp += nb * block_bytes)
		for (int t = 0; t < nt; t++)
			for (int r = 0; r < 8; r++) {
				const struct block_q8 *xt = x + (size_t)t * nb;
				float acc = 0.0f;
				for (size_t b = 0; b < nb; b++) {
					uint16_t h;
					memcpy(&h, grp + b * block_bytes + 2 * r, 2);
					acc = fmaf(fp16_to_f32(h) * xt[b].d,
						   (float)block_sum(grp + b * block_bytes, r, xt[b].q), acc);
				}
				y[(size_t)t * ldy + 8 * (size_t)gi + (size_t)r] = acc;
			}
}

static int32_t
q8_0x8_block_sum(const uint8_t *blk, int r, const int8_t *xq)
{
	int32_t s = 0;

	for (int i = 0; i < 32; i++)
		s += q8_0x8_at(blk, r, i) * xq[i];
	return s;
}

void
gemm_q8_0x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	gemm_x8_scalar(grp, ng, Q8_0X8_BLOCK, q8_0x8_block_sum, x, nb, nt, y, ldy);
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* nt tokens (a constant where inlined) times one group: the 8 chunks of a
 * block are loaded once and used by every token. */
AVX512 static inline __attribute__((always_inline)) void
gemm_q8_0x8_nt(const uint8_t *grp, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	__m256 acc[8];

#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		acc[t] = _mm256_setzero_ps();
	for (size_t b = 0; b < nb; b++, grp += Q8_0X8_BLOCK) {
		X8_STREAM_PREFETCH(grp, b, Q8_0X8_BLOCK, nt);
		__m256i c[8];
#pragma GCC unroll 8
		for (int s = 0; s < 8; s++)
			c[s] = _mm256_loadu_si256((const __m256i *)(grp + 16 + 32 * s));
		__m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));
		X8_BLOCK_TOKENS(U8I8_ACC_VNNI, c, dw, x, nb, b, nt, 128, acc);
	}
#pragma GCC unroll 8
	for (int t = 0; t < nt; t++)
		_mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);
}

AVX512 void
gemm_q8_0x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy)
{
	X8_GROUPS_BY_NT(gemm_q8_0x8_nt, grp, ng, nb * Q8_0X8_BLOCK, x, nb, nt, y, ldy);
}

/* Two tokens a 512-bit vector, as gemm_q4_0x8_pairs (cpu_q4_0x8.c): each
 * chunk widened to lane pairs once a block for every pair of tokens. */
AVX512 static inline __attribute__((always_inline)) void
gemm_q8_0x8_pairs_nt(const uint8_t *grp, const struct q8_pair *x, size_t nb, int nt, float *y, size_t ldy)
{
	const int np = (nt + 1) / 2;
	__m512 acc[4];

#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		acc[p] = _mm512_setzero_ps();
	for (size_t b = 0; b < nb; b++, grp += Q8_0X8_BLOCK) {
		X8_STREAM_PREFETCH(grp, b, Q8_0X8_BLOCK, nt);
		__m512i c[8];
#pragma GCC unroll 8
		for (int s = 0; s < 8; s++)
			c[s] = X8_LOAD_PAIRS(grp + 16 + 32 * s);
		__m512 dw = X8_HALVES_PAIRS(grp);
		X8_PAIR_BLOCK(c, dw, x, nb, b, np, 7, acc);
	}
	X8_PAIRS_STORE(acc, np, nt, y, ldy);
}

AVX512 void
gemm_q8_0x8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y, size_t ldy)
{
	X8_GROUPS_BY_NT(gemm_q8_0x8_pairs_nt, grp, ng, nb * Q8_0X8_BLOCK, x, nb, nt, y, ldy);
}

AVX2 void
widen_q8_0x8_avx2(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes)
{
	const __m256i bias = _mm256_set1_epi8((char)0x80);

	for (size_t b = 0; b < nb; b++, grp += Q8_0X8_BLOCK) {
		__m256i v[8];
		for (int s = 0; s < 8; s++)
			v[s] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(grp + 16 + 32 * s)), bias);
		transpose8x8(v); /* v[r]: row r's 32 values in order */
		for (int r = 0; r < 8; r++) {
			uint8_t *o = dst + (size_t)r * dst_row_bytes + b * 34;
			memcpy(o, grp + 2 * r, 2);
			_mm256_storeu_si256((__m256i *)(o + 2), v[r]);
		}
	}
}
#endif
