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
 * 8 of them finish the block for all 8 rows.  The group is the same 144
 * bytes a block as 8 rows of the file.
 *
 * Prefill and small decode batches widen the groups back to 34-byte int8
 * rows (an 8 x 8 transpose of 32-bit words) for the int8 GEMMs.
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

void
gemv_q4_0x8_scalar(const uint8_t *grp, const struct block_q8 *x, size_t nb, float *y)
{
	for (int r = 0; r < 8; r++)
		y[r] = 0.0f;
	for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK)
		for (int r = 0; r < 8; r++) {
			uint16_t h;
			int32_t acc = 0;
			memcpy(&h, grp + 2 * r, 2);
			for (int s = 0; s < 4; s++)
				for (int i = 0; i < 4; i++) {
					uint8_t byte = grp[16 + 32 * s + 4 * r + i];
					acc += ((byte & 0xf) - 8) * x[b].q[4 * s + i] +
					       ((byte >> 4) - 8) * x[b].q[16 + 4 * s + i];
				}
			y[r] += fp16_to_f32(h) * x[b].d * (float)acc;
		}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

/* 8 rows of one block: lane r = sum over the block of (q - 8) * x for row
 * r, as int32; U8I8 is vpdpbusd or its AVX2 equivalent. */
#define Q4_0X8_BLOCK_SUMS(U8I8_ACC)                                                                                    \
	const __m256i low = _mm256_set1_epi8(0x0f);                                                                    \
	__m256i c0 = _mm256_loadu_si256((const __m256i *)(grp + 16));                                                  \
	__m256i c1 = _mm256_loadu_si256((const __m256i *)(grp + 48));                                                  \
	__m256i c2 = _mm256_loadu_si256((const __m256i *)(grp + 80));                                                  \
	__m256i c3 = _mm256_loadu_si256((const __m256i *)(grp + 112));                                                 \
	/* four independent chains: one would wait on vpdpbusd's latency */                                            \
	__m256i pa = _mm256_set1_epi32(-8 * x[b].sum), pb = _mm256_setzero_si256(), pc = pb, pd = pb;                  \
	pa = U8I8_ACC(pa, _mm256_and_si256(c0, low), BCAST4_256(x[b].q + 0));                                          \
	pb = U8I8_ACC(pb, _mm256_and_si256(c1, low), BCAST4_256(x[b].q + 4));                                          \
	pc = U8I8_ACC(pc, _mm256_and_si256(c2, low), BCAST4_256(x[b].q + 8));                                          \
	pd = U8I8_ACC(pd, _mm256_and_si256(c3, low), BCAST4_256(x[b].q + 12));                                         \
	pa = U8I8_ACC(pa, _mm256_and_si256(_mm256_srli_epi16(c0, 4), low), BCAST4_256(x[b].q + 16));                   \
	pb = U8I8_ACC(pb, _mm256_and_si256(_mm256_srli_epi16(c1, 4), low), BCAST4_256(x[b].q + 20));                   \
	pc = U8I8_ACC(pc, _mm256_and_si256(_mm256_srli_epi16(c2, 4), low), BCAST4_256(x[b].q + 24));                   \
	pd = U8I8_ACC(pd, _mm256_and_si256(_mm256_srli_epi16(c3, 4), low), BCAST4_256(x[b].q + 28));                   \
	__m256i p = _mm256_add_epi32(_mm256_add_epi32(pa, pb), _mm256_add_epi32(pc, pd))

#define DEFINE_GEMV_Q4_0X8(SUFFIX, TARGET, U8I8_ACC)                                                                   \
	TARGET void gemv_q4_0x8_##SUFFIX(const uint8_t *grp, const struct block_q8 *x, size_t nb, float *y)            \
	{                                                                                                              \
		__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                         \
		for (size_t b = 0; b < nb; b++, grp += Q4_0X8_BLOCK) {                                                 \
			_mm_prefetch((const char *)grp + 2048, _MM_HINT_T0); /* 2 KB ahead, 3 lines a block */         \
			_mm_prefetch((const char *)grp + 2048 + 64, _MM_HINT_T0);                                      \
			_mm_prefetch((const char *)grp + 2048 + 128, _MM_HINT_T0);                                     \
			Q4_0X8_BLOCK_SUMS(U8I8_ACC);                                                                   \
			__m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp)),               \
						 _mm256_set1_ps(x[b].d));                                              \
			if (b & 1)                                                                                     \
				acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc1);                                \
			else                                                                                           \
				acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc0);                                \
		}                                                                                                      \
		_mm256_storeu_ps(y, _mm256_add_ps(acc0, acc1));                                                        \
	}

DEFINE_GEMV_Q4_0X8(avx2, AVX2, U8I8_ACC_AVX2)
DEFINE_GEMV_Q4_0X8(avx512, AVX512, U8I8_ACC_VNNI)

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
