/*
 * The prefill GEMM for float weights (F16, and F32; BF16 where the CPU has
 * no bfloat16 dot) with AVX-512: weights packed a column at a time, tokens
 * broadcast.
 *
 * GEMM_PK_ROWS (48) weight rows are converted to floats and transposed,
 * GEMM_PK_COLS columns at a time, into a panel whose column k is three
 * vectors of 48 rows.  The register tile is those 48 rows by 8 tokens:
 * for each column, three vector loads of the panel and eight multiply-adds
 * of each with one token's value broadcast from memory (the tokens packed
 * 8 at a time, pack_f32_tokens, once a prompt).  The sums land in rows,
 * so they need no sums across lanes and are stored (or added, for a later
 * panel of columns) 48 rows of a token at a time.
 *
 * The row-at-a-time register tile this replaces (gemm_f32) sums across
 * lanes at the end and converted each row once per 48 tokens, reading an
 * F16 matrix from memory 11 times for a prompt of 512.
 */
#include <string.h>

#include "cpu_dot.h"

#if defined(__x86_64__)
#include "cpu_x86.h"

/* A panel from rows of floats (LOAD16 of a float pointer), of F16 or of
 * bfloat16 (converted as loaded): 16 columns of 16 rows at a time,
 * transposed.  The packs are flattened (transpose16 inlined) and a whole
 * block's stores unrolled, so that its 16 vectors stay in registers: a
 * call and stores in a loop of run-time length went through the stack,
 * 1-2 % of an F16 prompt on the float path (docs/performance.md). */
#define PACK_PANEL(W, LOAD16)                                                                                          \
	do {                                                                                                           \
		for (size_t k0 = 0; k0 < kc; k0 += 16) {                                                               \
			__mmask16 m = kc - k0 >= 16 ? 0xffff : (__mmask16)((1u << (kc - k0)) - 1);                     \
			for (int g = 0; g < GEMM_PK_ROWS / 16; g++) {                                                  \
				__m512 v[16];                                                                          \
				_Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)                                  \
				{                                                                                      \
					int r = 16 * g + i;                                                            \
					v[i] = r < nr ? LOAD16(m, (W) + (size_t)r * ldw + k0) : _mm512_setzero_ps();   \
				}                                                                                      \
				transpose16(v);                                                                        \
				if (k0 + 16 <= kc) {                                                                   \
					_Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)                          \
						_mm512_storeu_ps(a + (k0 + i) * GEMM_PK_ROWS + 16 * g, v[i]);          \
				} else {                                                                               \
					for (size_t i = 0; k0 + i < kc; i++)                                           \
						_mm512_storeu_ps(a + (k0 + i) * GEMM_PK_ROWS + 16 * g, v[i]);          \
				}                                                                                      \
			}                                                                                              \
		}                                                                                                      \
	} while (0)

#define LOAD16_F32(m, p) _mm512_maskz_loadu_ps(m, p)
#define LOAD16_F16(m, p) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p))
/* a bfloat16 is a float's upper half */
#define LOAD16_BF16(m, p)                                                                                              \
	_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16))

AVX512 __attribute__((flatten)) void
pack_f32_panel_avx512(const float *w, size_t ldw, int nr, size_t kc, float *a)
{
	PACK_PANEL(w, LOAD16_F32);
}

/* F16 rows packed as they are converted: converting them into a row
 * buffer first and packing that took 24 % of an F16 prompt between the
 * two (docs/performance.md). */
AVX512 __attribute__((flatten)) void
pack_f16_panel_avx512(const uint16_t *w, size_t ldw, int nr, size_t kc, float *a)
{
	PACK_PANEL(w, LOAD16_F16);
}

/* And bfloat16 rows, where BF16 prompts take the float GEMM. */
AVX512 __attribute__((flatten)) void
pack_bf16_panel_avx512(const uint16_t *w, size_t ldw, int nr, size_t kc, float *a)
{
	PACK_PANEL(w, LOAD16_BF16);
}

/* Tokens packed as the kernel reads them: for each 8 tokens, column k's
 * 8 values side by side (xp[(b * kc + k) * 8 + t] for token 8b + t),
 * zeros past nt.  Read in rows of the model's width, the kernel's eight
 * broadcasts a column came from eight lines 8 or 32 KiB apart, one L1
 * set; packed, they are one line for two columns. */
AVX512 void
pack_f32_tokens_avx512(const float *x, size_t ldx, int nt, size_t kc, float *xp)
{
	for (int g = 0; 16 * g < nt; g++) {
		float *b0 = xp + (size_t)(2 * g) * kc * 8, *b1 = b0 + kc * 8;
		for (size_t k0 = 0; k0 < kc; k0 += 16) {
			__mmask16 m = kc - k0 >= 16 ? 0xffff : (__mmask16)((1u << (kc - k0)) - 1);
			__m512 v[16];
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				v[i] = 16 * g + i < nt ? _mm512_maskz_loadu_ps(m, x + (size_t)(16 * g + i) * ldx + k0)
						       : _mm512_setzero_ps();
			transpose16(v);
			for (size_t i = 0; i < 16 && k0 + i < kc; i++) {
				_mm256_storeu_ps(b0 + (k0 + i) * 8, _mm512_castps512_ps256(v[i]));
				if (16 * g + 8 < nt)
					_mm256_storeu_ps(b1 + (k0 + i) * 8,
							 _mm256_castpd_ps(
								 _mm512_extractf64x4_pd(_mm512_castps_pd(v[i]), 1)));
			}
		}
	}
}

/* y[t * ldy + r] (+)= sum over k < kc of a[k][r] * xp's token t at k, for
 * the panel's 48 rows and t < nt: 48 rows by 8 tokens a register tile,
 * three vector loads and eight broadcasts a column.  xp's blocks of 8
 * tokens are ldb floats apart. */
AVX512 void
gemm_f32_packed_avx512(const float *a, size_t kc, const float *xp, size_t ldb, int nt, float *y, size_t ldy, int add)
{
	for (int b = 0; 8 * b < nt; b++) {
		const float *xb = xp + (size_t)b * ldb;
		float *yb = y + (size_t)(8 * b) * ldy;
		int ntb = nt - 8 * b < 8 ? nt - 8 * b : 8;
		__m512 acc[3][8];
#pragma GCC unroll 8
		for (int t = 0; t < 8; t++)
#pragma GCC unroll 3
			for (int v = 0; v < 3; v++)
				acc[v][t] =
					add && t < ntb ? _mm512_loadu_ps(yb + t * ldy + 16 * v) : _mm512_setzero_ps();
		for (size_t k = 0; k < kc; k++) {
			__m512 a0 = _mm512_loadu_ps(a + k * GEMM_PK_ROWS),
			       a1 = _mm512_loadu_ps(a + k * GEMM_PK_ROWS + 16),
			       a2 = _mm512_loadu_ps(a + k * GEMM_PK_ROWS + 32);
#pragma GCC unroll 8
			for (int t = 0; t < 8; t++) {
				__m512 x = _mm512_set1_ps(xb[k * 8 + t]);
				acc[0][t] = _mm512_fmadd_ps(a0, x, acc[0][t]);
				acc[1][t] = _mm512_fmadd_ps(a1, x, acc[1][t]);
				acc[2][t] = _mm512_fmadd_ps(a2, x, acc[2][t]);
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < 8; t++)
			if (t < ntb)
#pragma GCC unroll 3
				for (int v = 0; v < 3; v++)
					_mm512_storeu_ps(yb + t * ldy + 16 * v, acc[v][t]);
	}
}
#endif
