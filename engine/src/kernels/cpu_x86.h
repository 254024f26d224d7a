/*
 * Shared pieces of the x86 kernel files: per-function target attributes (so
 * one binary runs everywhere and CPUID picks) and small inline helpers.
 */
#ifndef PRIVAI_CPU_X86_H
#define PRIVAI_CPU_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* One fp16 scale with the F16C instruction (the portable converter is a
 * branchy function: calling it per 32-weight block costs more than the dot). */
AVX2 static inline float
f16c_load(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

AVX2 static inline float
hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* a[m] = column m of the 16 x 16 floats a[0..15]: 64 shuffles.  Three
 * rounds interleave pairs of rows 1, 2 and then 4 values at a time, a
 * fourth moves the 128-bit quarters into place. */
AVX512 static inline void
transpose16(__m512 a[16])
{
	__m512 b[16], c[16];

#pragma GCC unroll 8
	for (int k = 0; k < 8; k++) {
		b[2 * k] = _mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]);
		b[2 * k + 1] = _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]);
	}
	/* c[4k + m], quarter q: column 4q + m of rows 4k .. 4k + 3 */
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m512d lo = _mm512_castps_pd(b[4 * k + h]), hi = _mm512_castps_pd(b[4 * k + 2 + h]);
			c[4 * k + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
			c[4 * k + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
		}
#pragma GCC unroll 4
	for (int m = 0; m < 4; m++) {
		__m512 d0 = _mm512_shuffle_f32x4(c[m], c[4 + m], 0x44), d1 = _mm512_shuffle_f32x4(c[m], c[4 + m], 0xee);
		__m512 d2 = _mm512_shuffle_f32x4(c[8 + m], c[12 + m], 0x44);
		__m512 d3 = _mm512_shuffle_f32x4(c[8 + m], c[12 + m], 0xee);
		a[m] = _mm512_shuffle_f32x4(d0, d2, 0x88);
		a[4 + m] = _mm512_shuffle_f32x4(d0, d2, 0xdd);
		a[8 + m] = _mm512_shuffle_f32x4(d1, d3, 0x88);
		a[12 + m] = _mm512_shuffle_f32x4(d1, d3, 0xdd);
	}
}

#endif
