/*
 * Attention over the half-precision paged KV cache, and the small kernels
 * it is built from (fp16 rounding, exp, a scaled fp16 row added to floats).
 *
 * One call serves the query heads that share a KV head (grouped-query
 * attention): every cached position's K and V rows are read once for all
 * of them, so the cache is streamed once per token and KV head instead of
 * once per query head.  Positions go by in chunks of ATT_CHUNK with an
 * online softmax (a running maximum and sum per head, the partial output
 * rescaled when the maximum grows), so there is no buffer the length of
 * the context and the exponentials are taken a vector at a time.
 *
 * K is cached in tiles of a chunk's 16 positions, value by value
 * (struct kv_view): a chunk's scores are then one load of 16 positions
 * and one broadcast multiply-add a value and query row, with no sums
 * across vector lanes and no transposes.  With K in rows, one position's
 * values to a row, a decode step converted the chunk to floats on the
 * stack, summed 16 vectors' lanes a head and read 9.5 GB/s of cache on a
 * Zen 4 thread: its arithmetic, not the memory, was the limit.
 *
 * The queries are rounded to fp16 first, as the cache is: llama.cpp's CPU
 * path multiplies them in half precision too, and its logits are the
 * reference the goldens hold.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "privai/model.h"
#include "privai/tensor_type.h"
#include "cpu_dot.h"

_Static_assert(ATT_HEAD_DIM_MAX >= ENGINE_HEAD_DIM_MAX, "the model loader lets wider heads through");

void
f32_to_f16_scalar(const float *src, uint16_t *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = f32_to_fp16(src[i]);
}

void
axpy_f16_scalar(float a, const uint16_t *x, float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += a * fp16_to_f32(x[i]);
}

/* The scores of nr rows against a K tile (cpu_dot.h says how every
 * kernel set sums: the even values, the odd ones, then the two). */
void
att_scores_tile_scalar(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s)
{
	for (int r = 0; r < nr; r++) {
		const float *q = qh + (size_t)r * hd;
		float half[2][ATT_CHUNK] = { { 0 } };
		for (int d = 0; d < hd; d++)
			for (int i = 0; i < ATT_CHUNK; i++)
				half[d & 1][i] += q[d] * fp16_to_f32(kt[d * ATT_CHUNK + i]);
		for (int i = 0; i < ATT_CHUNK; i++)
			s[r * ATT_CHUNK + i] = (half[0][i] + half[1][i]) * scale;
	}
}

#if defined(__x86_64__)
#include "cpu_x86.h"

AVX2 void
f32_to_f16_avx2(const float *src, uint16_t *dst, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = f32_to_fp16(src[i]);
}

AVX2 void
axpy_f16_avx2(float a, const uint16_t *x, float *y, size_t n)
{
	__m256 va = _mm256_set1_ps(a);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, v, _mm256_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += a * _cvtsh_ss(x[i]);
}

/* One value's 16 positions of a tile as two vectors of 8, converted
 * once, into the accumulators of nb rows. */
#define TILE_FMA_AVX2(nb, acc, kt, d, q, hd)                                                                           \
	do {                                                                                                           \
		const __m128i *p_ = (const __m128i *)((kt) + (d)*ATT_CHUNK);                                           \
		__m256 k0_ = _mm256_cvtph_ps(_mm_loadu_si128(p_)), k1_ = _mm256_cvtph_ps(_mm_loadu_si128(p_ + 1));     \
		for (int b_ = 0; b_ < (nb); b_++) {                                                                    \
			__m256 q_ = _mm256_set1_ps((q)[b_ * (hd) + (d)]);                                              \
			(acc)[b_][0] = _mm256_fmadd_ps(q_, k0_, (acc)[b_][0]);                                         \
			(acc)[b_][1] = _mm256_fmadd_ps(q_, k1_, (acc)[b_][1]);                                         \
		}                                                                                                      \
	} while (0)

/* nb rows (1 or 2) against a K tile, each into its even and its odd
 * accumulators (8 of AVX2's 16 registers at two rows). */
#define ATT_TILE_AVX2(nb)                                                                                              \
	AVX2 static void att_tile##nb##_avx2(const uint16_t *kt, const float *q, int hd, float scale, float *s)        \
	{                                                                                                              \
		__m256 even[nb][2], odd[nb][2];                                                                        \
		for (int b = 0; b < nb; b++)                                                                           \
			even[b][0] = even[b][1] = odd[b][0] = odd[b][1] = _mm256_setzero_ps();                         \
		int d = 0;                                                                                             \
		for (; d + 2 <= hd; d += 2) {                                                                          \
			TILE_FMA_AVX2(nb, even, kt, d, q, hd);                                                         \
			TILE_FMA_AVX2(nb, odd, kt, d + 1, q, hd);                                                      \
		}                                                                                                      \
		if (d < hd)                                                                                            \
			TILE_FMA_AVX2(nb, even, kt, d, q, hd);                                                         \
		for (int b = 0; b < nb; b++)                                                                           \
			for (int h = 0; h < 2; h++)                                                                    \
				_mm256_storeu_ps(s + b * ATT_CHUNK + 8 * h,                                            \
						 _mm256_mul_ps(_mm256_add_ps(even[b][h], odd[b][h]),                   \
							       _mm256_set1_ps(scale)));                                \
	}
ATT_TILE_AVX2(2)
ATT_TILE_AVX2(1)

AVX2 void
att_scores_tile_avx2(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s)
{
	int r = 0;

	for (; r + 2 <= nr; r += 2)
		att_tile2_avx2(kt, qh + (size_t)r * hd, hd, scale, s + (size_t)r * ATT_CHUNK);
	if (r < nr)
		att_tile1_avx2(kt, qh + (size_t)r * hd, hd, scale, s + (size_t)r * ATT_CHUNK);
}

AVX512 static __m512
exp512(__m512 x)
{
	x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
	__m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(EXP_LN2_HI), x);
	r = _mm512_fnmadd_ps(k, _mm512_set1_ps(EXP_LN2_LO), r);
	__m512 p = _mm512_set1_ps(1.0f / 720);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	__m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
	return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* The online softmax step of a chunk, a row in one vector: row r's
 * scores past seen[r] are masked, the row maximum m[r] and sum l[r]
 * carried on, and c[r] set to the factor the output summed so far is
 * rescaled by (1 where the maximum held).  Four rows go through each
 * phase together: a row alone is a chain of dependent reductions and
 * exponentials, and one after the other the rows of a decode step's
 * chunk took a fifth of its attention (Zen 4). */
AVX512 void
att_softmax_avx512(float *s, int nr, const int *seen, float *m, float *l, float *c)
{
	for (int r0 = 0; r0 < nr; r0 += 4) {
		int n = nr - r0 < 4 ? nr - r0 : 4;
		__mmask16 in[4];
		__m512 v[4];
		float mx[4];
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			if (j >= n)
				break;
			int sn = seen[r0 + j]; /* none seen: every lane masked, the row zeros, c 1 */
			in[j] = (__mmask16)(sn >= ATT_CHUNK ? 0xffff : sn <= 0 ? 0 : (1u << sn) - 1);
			v[j] = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), in[j], s + (size_t)(r0 + j) * ATT_CHUNK);
			mx[j] = _mm512_reduce_max_ps(v[j]);
		}
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			if (j >= n)
				break;
			int r = r0 + j;
			c[r] = 1.0f;
			if (mx[j] > m[r]) {
				c[r] = expf(m[r] - mx[j]);
				l[r] *= c[r];
				m[r] = mx[j];
			}
			v[j] = _mm512_maskz_mov_ps(in[j], exp512(_mm512_sub_ps(v[j], _mm512_set1_ps(m[r]))));
		}
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			if (j >= n)
				break;
			l[r0 + j] += _mm512_reduce_add_ps(v[j]);
			_mm512_storeu_ps(s + (size_t)(r0 + j) * ATT_CHUNK, v[j]);
		}
	}
}

AVX512 void
axpy_f16_avx512(float a, const uint16_t *x, float *y, size_t n)
{
	__m512 va = _mm512_set1_ps(a);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, v, _mm512_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += a * _cvtsh_ss(x[i]);
}

/* nb rows against a K tile: for each value one load of the tile's 16
 * positions and one broadcast multiply-add a row, in two chains a row
 * (the even values and the odd) so that one row alone is not held up by
 * the latency of one chain. */
#define ATT_TILE_KERNEL(nb)                                                                                            \
	AVX512 static void att_tile##nb(const uint16_t *kt, const float *q, int hd, float scale, float *s)             \
	{                                                                                                              \
		__m512 acc0[nb], acc1[nb];                                                                             \
		_Pragma("GCC unroll 8") for (int b = 0; b < nb; b++) acc0[b] = acc1[b] = _mm512_setzero_ps();          \
		int d = 0;                                                                                             \
		for (; d + 2 <= hd; d += 2) {                                                                          \
			const __m256i *p = (const __m256i *)(kt + d * ATT_CHUNK);                                      \
			__m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256(p)),                                            \
			       k1 = _mm512_cvtph_ps(_mm256_loadu_si256(p + 1));                                        \
			_Pragma("GCC unroll 8") for (int b = 0; b < nb; b++)                                           \
			{                                                                                              \
				acc0[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b * hd + d]), k0, acc0[b]);                 \
				acc1[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b * hd + d + 1]), k1, acc1[b]);             \
			}                                                                                              \
		}                                                                                                      \
		if (d < hd) {                                                                                          \
			__m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kt + d * ATT_CHUNK)));        \
			_Pragma("GCC unroll 8") for (int b = 0; b < nb; b++) acc0[b] =                                 \
				_mm512_fmadd_ps(_mm512_set1_ps(q[b * hd + d]), k0, acc0[b]);                           \
		}                                                                                                      \
		_Pragma("GCC unroll 8") for (int b = 0; b < nb; b++)                                                   \
			_mm512_storeu_ps(s + b * ATT_CHUNK,                                                            \
					 _mm512_mul_ps(_mm512_add_ps(acc0[b], acc1[b]), _mm512_set1_ps(scale)));       \
	}
ATT_TILE_KERNEL(8)
ATT_TILE_KERNEL(4)
ATT_TILE_KERNEL(2)
ATT_TILE_KERNEL(1)

AVX512 void
att_scores_tile_avx512(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s)
{
	int r = 0;

	for (; r + 8 <= nr; r += 8)
		att_tile8(kt, qh + (size_t)r * hd, hd, scale, s + (size_t)r * ATT_CHUNK);
	if (r + 4 <= nr) {
		att_tile4(kt, qh + (size_t)r * hd, hd, scale, s + (size_t)r * ATT_CHUNK);
		r += 4;
	}
	if (r + 2 <= nr) {
		att_tile2(kt, qh + (size_t)r * hd, hd, scale, s + (size_t)r * ATT_CHUNK);
		r += 2;
	}
	if (r < nr)
		att_tile1(kt, qh + (size_t)r * hd, hd, scale, s + (size_t)r * ATT_CHUNK);
}

/* 64 values of up to 4 heads' outputs stay in registers while the chunk's
 * V rows go by, each row converted once for the 4 heads; the outputs are
 * rescaled as they are loaded. */
AVX512 void
att_pv_f16_avx512(const uint16_t *const *vr, int nc, const float *s, const float *c, int nh, int hd, float *out)
{
	for (int d0 = 0; d0 < hd; d0 += 64) {
		int nv = hd - d0 < 64 ? (hd - d0) / 16 : 4;
		for (int g0 = 0; g0 < nh; g0 += 4) {
			int ng = nh - g0 < 4 ? nh - g0 : 4;
			__m512 acc[4][4];
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++)
#pragma GCC unroll 4
				for (int v = 0; v < 4; v++)
					acc[g][v] =
						g < ng && v < nv
							? _mm512_mul_ps(_mm512_loadu_ps(out + (size_t)(g0 + g) * hd +
											d0 + 16 * v),
									_mm512_set1_ps(c[g0 + g]))
							: _mm512_setzero_ps();
			for (int i = 0; i < nc; i++) {
				__m512 vv[4];
#pragma GCC unroll 4
				for (int v = 0; v < 4; v++)
					vv[v] = v < nv ? _mm512_cvtph_ps(_mm256_loadu_si256(
								 (const __m256i *)(vr[i] + d0 + 16 * v)))
						       : _mm512_setzero_ps();
#pragma GCC unroll 4
				for (int g = 0; g < 4; g++) {
					__m512 w = _mm512_set1_ps(g < ng ? s[(size_t)(g0 + g) * ATT_CHUNK + i] : 0.0f);
#pragma GCC unroll 4
					for (int v = 0; v < 4; v++)
						acc[g][v] = _mm512_fmadd_ps(w, vv[v], acc[g][v]);
				}
			}
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++)
#pragma GCC unroll 4
				for (int v = 0; v < 4; v++)
					if (g < ng && v < nv)
						_mm512_storeu_ps(out + (size_t)(g0 + g) * hd + d0 + 16 * v, acc[g][v]);
		}
	}
}
#endif

/* The pool row holding position p of the sequence. */
static inline size_t
kv_row(const struct kv_view *kv, int p)
{
	size_t mask = ((size_t)1 << kv->block_shift) - 1;

	return ((size_t)kv->blocks[(size_t)p >> kv->block_shift] << kv->block_shift) + ((size_t)p & mask);
}

/* att_softmax for one row where there is no kernel for it. */
static void
softmax_step(const struct cpu_kernels *k, float *s, int seen, int nc, float *m, float *l, float *c)
{
	*c = 1.0f;
	if (seen > 0) {
		float mx = s[0];
		for (int i = 1; i < seen; i++)
			mx = s[i] > mx ? s[i] : mx;
		if (mx > *m) {
			*c = expf(*m - mx);
			*l *= *c;
			*m = mx;
		}
		for (int i = 0; i < seen; i++)
			s[i] -= *m;
		k->exp_f32(s, (size_t)seen);
		for (int i = 0; i < seen; i++)
			*l += s[i];
	}
	for (int i = seen > 0 ? seen : 0; i < nc; i++) /* past the row's last position */
		s[i] = 0.0f;
}

/* o[r] = c[r] * o[r] + sum over i < nc of s[r][i] * V row vr[i]. */
static void
chunk_values(const struct cpu_kernels *k, const uint16_t *const *vr, int nc, float s[][ATT_CHUNK], const float *c,
	     int nr, int hd, float *o)
{
	if (k->att_pv_f16 != NULL && hd % 16 == 0) {
		k->att_pv_f16(vr, nc, &s[0][0], c, nr, hd, o);
		return;
	}
	for (int r = 0; r < nr; r++)
		for (int d = 0; c[r] != 1.0f && d < hd; d++)
			o[(size_t)r * hd + d] *= c[r];
	for (int i = 0; i < nc; i++)
		for (int r = 0; r < nr; r++)
			if (s[r][i] != 0.0f)
				k->axpy_f16(s[r][i], vr[i], o + (size_t)r * hd, (size_t)hd);
}

void
cpu_attend_f16(const struct cpu_kernels *k, const struct kv_view *kv, int len, int nt, const float *q, size_t stride,
	       int nh, int hd, float *out)
{
	float qh[ATT_ROWS_MAX * ATT_HEAD_DIM_MAX], o[ATT_ROWS_MAX * ATT_HEAD_DIM_MAX], s[ATT_ROWS_MAX][ATT_CHUNK];
	float m[ATT_ROWS_MAX], l[ATT_ROWS_MAX], c[ATT_ROWS_MAX], scale = 1.0f / sqrtf((float)hd);
	int seen[ATT_ROWS_MAX];
	uint16_t half[ATT_HEADS_MAX * ATT_HEAD_DIM_MAX];
	const uint16_t *vr[ATT_CHUNK];
	size_t nq = (size_t)nh * (size_t)hd;
	int nr = nt * nh, end = len + nt - 1; /* query rows; positions the last token sees */

	assert(nh >= 1 && nh <= ATT_HEADS_MAX && nr <= ATT_ROWS_MAX && hd >= 1 && hd <= ATT_HEAD_DIM_MAX);
	assert(len >= 1 && nt >= 1 && kv->block_shift >= 4 && ATT_CHUNK == 16);
	for (int t = 0; t < nt; t++) {
		k->f32_to_f16(q + (size_t)t * stride, half, nq);
		k->f16_to_f32(half, qh + (size_t)t * nq, nq);
	}
	memset(o, 0, (size_t)nr * (size_t)hd * sizeof(float));
	for (int r = 0; r < nr; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
	}
	for (int p0 = 0; p0 < end; p0 += ATT_CHUNK) {
		int nc = end - p0 < ATT_CHUNK ? end - p0 : ATT_CHUNK;
		size_t row0 = kv_row(kv, p0); /* a chunk is one tile of one block */
		for (int i = 0; i < nc; i++)
			vr[i] = kv->v + (row0 + (size_t)i) * kv->stride;
		/* No software prefetch: a head's tiles and rows lie back to
		 * back, which the hardware prefetchers follow.  Asking for the
		 * next chunk's lines into L2 mattered when a head's rows were a
		 * stride apart (the heads of a position side by side: Q4_0
		 * generation at a depth of 2048, Zen 4, read 31.5-35.2 tok/s
		 * without against 35.0-46.8); with the tiles its 64 prefetches a
		 * chunk cost a decode step's attention a quarter of its time
		 * (one thread, 8192 positions: 15 ms a token against 12). */
		/* all 16 positions of the tile: those past nc are masked below */
		k->att_scores_tile(kv->k + row0 * kv->stride, qh, nr, hd, scale, &s[0][0]);
		for (int r = 0; r < nr; r++) { /* token r / nh sees positions up to len + r / nh - 1 */
			int n = len + r / nh - p0;
			seen[r] = n < nc ? n : nc;
		}
		if (k->att_softmax != NULL)
			k->att_softmax(&s[0][0], nr, seen, m, l, c);
		else
			for (int r = 0; r < nr; r++)
				softmax_step(k, s[r], seen[r], nc, &m[r], &l[r], &c[r]);
		chunk_values(k, vr, nc, s, c, nr, hd, o);
	}
	for (int r = 0; r < nr; r++) {
		float inv = 1.0f / l[r], *dst = out + (size_t)(r / nh) * stride + (size_t)(r % nh) * hd;
		const float *src = o + (size_t)r * hd;
		for (int d = 0; d < hd; d++)
			dst[d] = src[d] * inv;
	}
}
