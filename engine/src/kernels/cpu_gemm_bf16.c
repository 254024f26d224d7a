/*
 * The prefill GEMM for bfloat16 weights on CPUs with AVX512_BF16 (Zen 4,
 * Sapphire Rapids and later): vdpbf16ps multiplies 32 bfloat16 pairs into
 * 16 float sums per instruction, twice the products of a float FMA.
 *
 * The layout is the int8 GEMM's: 16 tokens in the 32-bit lanes of a zmm,
 * each lane holding elements k and k+1 of its token as two bfloat16, and
 * the matching pair of a weight row broadcast to every lane, so one
 * instruction advances 16 tokens by two columns of one row.  Activations
 * are rounded to bfloat16 (nearest even) when the tile is packed, as
 * llama.cpp does for bfloat16 models; the sums stay float.
 */
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#if defined(__x86_64__)
#include "cpu_x86.h"

#define BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

BF16 void
pack_bf16_tile_avx512(const float *x, size_t ldx, int nt, size_t cols, uint32_t *tile)
{
	uint32_t pairs[16];

	for (int j = 0; j < GEMM_BF16_TOKENS; j++) {
		const float *xr = x + (size_t)j * ldx;
		size_t k = 0;
		if (j >= nt) { /* a padding lane: zeros */
			for (size_t kp = 0; kp < cols / 2; kp++)
				tile[kp * GEMM_BF16_TOKENS + (size_t)j] = 0;
			continue;
		}
		for (; k + 32 <= cols; k += 32) {
			__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + k + 16), _mm512_loadu_ps(xr + k));
			_mm512_storeu_si512(pairs, (__m512i)v);
			for (int i = 0; i < 16; i++)
				tile[(k / 2 + (size_t)i) * GEMM_BF16_TOKENS + (size_t)j] = pairs[i];
		}
		for (; k + 2 <= cols; k += 2)
			tile[(k / 2) * GEMM_BF16_TOKENS + (size_t)j] =
				(uint32_t)f32_to_bf16(xr[k]) | (uint32_t)f32_to_bf16(xr[k + 1]) << 16;
	}
}

BF16 void
gemm_bf16_avx512(const uint16_t *w, size_t ldw, int nrows, const uint32_t *x, size_t group_stride, int ngroups,
		 size_t cols, float *y)
{
	const uint32_t *x1 = ngroups > 1 ? x + group_stride : x;
	size_t np = cols / 2;

	for (int r0 = 0; r0 < nrows; r0 += GEMM_BF16_ROWS) {
		int nr = nrows - r0 < GEMM_BF16_ROWS ? nrows - r0 : GEMM_BF16_ROWS;
		__m512 acc0[GEMM_BF16_ROWS], acc1[GEMM_BF16_ROWS];
		const uint32_t *wr[GEMM_BF16_ROWS];
#pragma GCC unroll 8
		for (int i = 0; i < GEMM_BF16_ROWS; i++) {
			acc0[i] = acc1[i] = _mm512_setzero_ps();
			wr[i] = (const uint32_t *)(const void *)(w + (size_t)(r0 + (i < nr ? i : 0)) * ldw);
		}
		for (size_t kp = 0; kp < np; kp++) {
			__m512bh xa = (__m512bh)_mm512_loadu_si512(x + kp * GEMM_BF16_TOKENS);
			__m512bh xb = (__m512bh)_mm512_loadu_si512(x1 + kp * GEMM_BF16_TOKENS);
#pragma GCC unroll 8
			for (int rr = 0; rr < GEMM_BF16_ROWS; rr++) {
				uint32_t pair;
				memcpy(&pair, wr[rr] + kp, 4);
				__m512bh wb = (__m512bh)_mm512_set1_epi32((int)pair);
				acc0[rr] = _mm512_dpbf16_ps(acc0[rr], xa, wb);
				acc1[rr] = _mm512_dpbf16_ps(acc1[rr], xb, wb);
			}
		}
		for (int rr = 0; rr < nr; rr++) {
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_BF16_TOKENS, acc0[rr]);
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_BF16_TOKENS + GEMM_BF16_TOKENS, acc1[rr]);
		}
	}
}
/* Decode: the activations rounded once per token, then each row a pass
 * of vdpbf16ps (32 products an instruction, no conversion of the weights),
 * four sums so no chain waits on the last. */
BF16 void
f32_to_bf16_avx512(const float *x, uint16_t *out, size_t n)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256((__m256i *)(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
	for (; i < n; i++)
		out[i] = f32_to_bf16(x[i]);
}

BF16 float
dot_bf16_bf16_avx512(const uint16_t *w, const uint16_t *x, size_t n)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	size_t i = 0;

	for (; i + 128 <= n; i += 128) {
		if (cpu_stream_prefetch == 0) /* 4 lines a step: HALF_ROWS_ONE_AT_A_TIME */
			SPARSE_PREFETCH(w + i, i / 128, 256);
		a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(x + i));
		a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(w + i + 32),
				      (__m512bh)_mm512_loadu_si512(x + i + 32));
		a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_loadu_si512(w + i + 64),
				      (__m512bh)_mm512_loadu_si512(x + i + 64));
		a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_loadu_si512(w + i + 96),
				      (__m512bh)_mm512_loadu_si512(x + i + 96));
	}
	for (; i + 32 <= n; i += 32)
		a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(x + i));
	float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
	for (; i < n; i++)
		s += bf16_to_f32(w[i]) * bf16_to_f32(x[i]);
	return s;
}

/* Four rows a pass, as dot4_f16 (cpu_dot.c): the token's 16 KB of
 * bfloat16 (ffn_down) loaded once for four rows.  Each row sums as
 * dot_bf16_bf16_avx512 does, so a row gets the same bits either way, and
 * the next four rows' lines are asked for as there.  Or the rows one at
 * a time where HALF_ROWS_ONE_AT_A_TIME says so (cpu_x86.h). */
BF16 void
dot4_bf16_bf16_avx512(const uint16_t *w, size_t ldw, const uint16_t *x, size_t n, float *y)
{
	__m512 a[4][4];
	size_t i = 0;

	if (HALF_ROWS_ONE_AT_A_TIME(n * sizeof(uint16_t))) {
		for (int r = 0; r < 4; r++)
			y[r] = dot_bf16_bf16_avx512(w + (size_t)r * ldw, x, n);
		return;
	}
	for (int r = 0; r < 4; r++)
		a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
	for (; i + 128 <= n; i += 128) {
#pragma GCC unroll 4
		for (int q = 0; q < 4; q++) {
			__m512bh xq = (__m512bh)_mm512_loadu_si512(x + i + 32 * q);
#pragma GCC unroll 4
			for (int r = 0; r < 4; r++) {
				const uint16_t *wr = w + (size_t)r * ldw + i + 32 * q;
				ROWS_PREFETCH(wr + 4 * ldw);
				a[r][q] = _mm512_dpbf16_ps(a[r][q], (__m512bh)_mm512_loadu_si512(wr), xq);
			}
		}
	}
	for (; i + 32 <= n; i += 32) {
		__m512bh xq = (__m512bh)_mm512_loadu_si512(x + i);
		for (int r = 0; r < 4; r++)
			a[r][0] = _mm512_dpbf16_ps(a[r][0], (__m512bh)_mm512_loadu_si512(w + (size_t)r * ldw + i), xq);
	}
	for (int r = 0; r < 4; r++) {
		float s = _mm512_reduce_add_ps(
			_mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
		for (size_t j = i; j < n; j++)
			s += bf16_to_f32(w[(size_t)r * ldw + j]) * bf16_to_f32(x[j]);
		y[r] = s;
	}
}
#endif
