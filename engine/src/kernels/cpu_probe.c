/*
 * The instruction rates cpu_kernels_get decides by, measured on this core
 * when the kernels are first chosen: a CPU's name does not say them (a
 * Zen 4 runs a 512-bit instruction as two 256-bit halves where a Zen 5
 * runs it whole; a hypervisor may hide which it is), and a few
 * microseconds of timing do.
 */
#include <time.h>

#include "cpu_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define PROBE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define PROBE_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* 12 independent chains of OP on the vector registers a0..a11 (declared
 * by the caller, of OP's type), STEPS steps: the seconds it took.  The
 * empty asm keeps the chains alive, in registers (an array of them would
 * go through memory every step). */
#define TIME_CHAINS(OP, secs)                                                                                          \
	do {                                                                                                           \
		struct timespec t0_, t1_;                                                                              \
		clock_gettime(CLOCK_MONOTONIC, &t0_);                                                                  \
		for (int n_ = 0; n_ < STEPS; n_++) {                                                                   \
			a0 = OP(a0), a1 = OP(a1), a2 = OP(a2), a3 = OP(a3), a4 = OP(a4), a5 = OP(a5);                  \
			a6 = OP(a6), a7 = OP(a7), a8 = OP(a8), a9 = OP(a9), a10 = OP(a10), a11 = OP(a11);              \
			__asm__ volatile(""                                                                            \
					 : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),       \
					   "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                        \
		}                                                                                                      \
		clock_gettime(CLOCK_MONOTONIC, &t1_);                                                                  \
		secs = (double)(t1_.tv_sec - t0_.tv_sec) + (double)(t1_.tv_nsec - t0_.tv_nsec) * 1e-9;                 \
	} while (0)

enum { STEPS = 2000, REPS = 5 };

/* How many times the products a second vdpbf16ps does over float FMAs
 * (32 pairs an instruction against 16), on this core now: about 1.8 on
 * Zen 4, 0.5 on an Emerald Rapids Xeon.  Each timed five times, a few
 * microseconds a time, interleaved, the fastest kept: a preemption slows
 * one run, not the best of five. */
PROBE_BF16 double
bf16_dot_speedup_avx512(void)
{
	__m512 b = _mm512_set1_ps(1.0f), c = _mm512_setzero_ps();
	__m512 a0 = c, a1 = c, a2 = c, a3 = c, a4 = c, a5 = c, a6 = c, a7 = c, a8 = c, a9 = c, a10 = c, a11 = c;
	__m512bh h = (__m512bh)_mm512_set1_epi16(0x3f80); /* bfloat16 1.0 */
	double fma = 1e9, dp = 1e9, t;

#define FMA_STEP(a) _mm512_fmadd_ps(a, b, c)
#define DP_STEP(a) _mm512_dpbf16_ps(a, h, h)
	for (int rep = 0; rep < REPS; rep++) {
		TIME_CHAINS(FMA_STEP, t);
		fma = t < fma ? t : fma;
		TIME_CHAINS(DP_STEP, t);
		dp = t < dp ? t : dp;
	}
#undef FMA_STEP
#undef DP_STEP
	return dp > 0 ? 2.0 * fma / dp : 2.0;
}

/* NAME(): chains of STEP (a vpdpbusd of a with b) on VEC registers, SET1
 * and ZERO making the operands; the fastest of REPS runs */
#define DEFINE_VNNI_CHAINS(NAME, VEC, SET1, ZERO, STEP)                                                                \
	PROBE_AVX512 static double NAME(void)                                                                          \
	{                                                                                                              \
		VEC b = SET1(1), z = ZERO();                                                                           \
		VEC a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z, a6 = z, a7 = z, a8 = z, a9 = z, a10 = z, a11 = z;  \
		double best = 1e9, t;                                                                                  \
		for (int rep = 0; rep < REPS; rep++) {                                                                 \
			TIME_CHAINS(STEP, t);                                                                          \
			best = t < best ? t : best;                                                                    \
		}                                                                                                      \
		return best;                                                                                           \
	}
#define DP512_STEP(a) _mm512_dpbusd_epi32(a, b, b)
#define DP256_STEP(a) _mm256_dpbusd_epi32(a, b, b)
DEFINE_VNNI_CHAINS(vnni_chains_zmm, __m512i, _mm512_set1_epi8, _mm512_setzero_si512, DP512_STEP)
DEFINE_VNNI_CHAINS(vnni_chains_ymm, __m256i, _mm256_set1_epi8, _mm256_setzero_si256, DP256_STEP)
#undef DP512_STEP
#undef DP256_STEP

/* The products a second of a 512-bit vpdpbusd over those of a
 * 256-bit one (64 byte pairs an instruction against 32), on this core
 * now: 2.00 on a Zen 5, whose units are 512 bits wide; about 1 where a
 * 512-bit instruction takes two halves' turns (Zen 4) or fewer ports
 * than a 256-bit one (many Xeons).  The two kinds alternate, three
 * rounds, and the fastest of each is kept, as above. */
double
vnni512_speedup_avx512(void)
{
	double zmm = 1e9, ymm = 1e9;

	for (int round = 0; round < 3; round++) {
		double t = vnni_chains_zmm();
		zmm = t < zmm ? t : zmm;
		t = vnni_chains_ymm();
		ymm = t < ymm ? t : ymm;
	}
	return zmm > 0 ? 2.0 * ymm / zmm : 2.0;
}
#endif
