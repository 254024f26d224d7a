/*
 * The prefill GEMM for Q6_K rows, widened by widen_q6_k to 34-byte int8
 * blocks of q - 32 whose two 16-element halves keep their own scale.
 *
 * It is gemm_q8_0's loop with the eight vpdpbusd of a block split into two
 * sums of four, one per half, each converted and scaled by its own
 * d * sc; the activations are the same 16-token tiles (struct q8_tile).
 * Before it, Q6_K rows went through the per-token dot in prefill: 35 % of
 * Q4_K_M's prompt time on the 1B shape, where ffn_down and attn_v of
 * half the layers and the output matrix are Q6_K.
 */
#include "cpu_dot.h"

#if defined(__x86_64__)
#include "cpu_x86.h"

AVX512 void
gemm_q6_k_avx512(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd,
		 const struct q8_tile *x, size_t group_stride, int ngroups, size_t nb, float *y)
{
	const struct q8_tile *x1 = ngroups > 1 ? x + group_stride : x;

	for (int r0 = 0; r0 < nrows; r0 += 2) {
		int nr = nrows - r0 < 2 ? nrows - r0 : 2;
		__m512 acc0[2], acc1[2];
#pragma GCC unroll 2
		for (int i = 0; i < 2; i++)
			acc0[i] = acc1[i] = _mm512_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			__m512i xa[8], xb[8];
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++) {
				xa[s] = _mm512_loadu_si512((const void *)x[b].q[s]);
				xb[s] = _mm512_loadu_si512((const void *)x1[b].q[s]);
			}
			__m512 da = _mm512_loadu_ps(x[b].d), db = _mm512_loadu_ps(x1[b].d);
#pragma GCC unroll 2
			for (int rr = 0; rr < nr; rr++) {
				size_t at = 2 * ((size_t)(r0 + rr) * nb + b);
				const uint8_t *blk = w + (size_t)(r0 + rr) * row_bytes + b * 34;
				__m512i pa0 = _mm512_set1_epi32(wsum[at]), pb0 = pa0;
				__m512i pa1 = _mm512_set1_epi32(wsum[at + 1]), pb1 = pa1;
#pragma GCC unroll 4
				for (int s = 0; s < 4; s++) {
					__m512i w0 = BCAST4_512(blk + 2 + 4 * s), w1 = BCAST4_512(blk + 18 + 4 * s);
					pa0 = _mm512_dpbusd_epi32(pa0, xa[s], w0);
					pb0 = _mm512_dpbusd_epi32(pb0, xb[s], w0);
					pa1 = _mm512_dpbusd_epi32(pa1, xa[s + 4], w1);
					pb1 = _mm512_dpbusd_epi32(pb1, xb[s + 4], w1);
				}
				__m512 d0 = _mm512_set1_ps(wd[at]), d1 = _mm512_set1_ps(wd[at + 1]);
				acc0[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pa0), _mm512_mul_ps(da, d0), acc0[rr]);
				acc0[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pa1), _mm512_mul_ps(da, d1), acc0[rr]);
				acc1[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pb0), _mm512_mul_ps(db, d0), acc1[rr]);
				acc1[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pb1), _mm512_mul_ps(db, d1), acc1[rr]);
			}
		}
#pragma GCC unroll 2
		for (int rr = 0; rr < nr; rr++) {
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_TOKENS, acc0[rr]);
			_mm512_storeu_ps(y + (size_t)(r0 + rr) * 2 * GEMM_TOKENS + GEMM_TOKENS, acc1[rr]);
		}
	}
}
#endif
