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

#endif
