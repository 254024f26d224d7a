/*
 * CPU dot-product kernels, chosen once at start-up by CPUID.
 *
 * Quantized weights are multiplied in integers: activations are quantized
 * to blocks of 32 int8 with one float scale (struct block_q8), the way the
 * GGUF ecosystem computes Q8_0/Q4_0 products, and the weight blocks are
 * multiplied with VNNI (vpdpbusd) or AVX2 (vpmaddubsw).  Other types are
 * dequantized to float32 a row at a time and use the float dot.
 */
#ifndef PRIVAI_CPU_DOT_H
#define PRIVAI_CPU_DOT_H

#include <stddef.h>
#include <stdint.h>

struct block_q8 {
	float d;      /* scale: x ~= d * q */
	int32_t sum;  /* sum of q, for weight types with an offset (Q4_0) */
	int8_t q[32];
};

struct cpu_kernels {
	const char *name;
	float (*dot_f32)(const float *a, const float *b, size_t n);
	/* dst[i] = f16 src[i] as float */
	void (*f16_to_f32)(const uint16_t *src, float *dst, size_t n);
	/* Quantize n floats (multiple of 32) to n/32 blocks. */
	void (*quantize_q8)(const float *x, struct block_q8 *out, size_t n);
	/* Dot of one weight row of nb blocks with nb activation blocks. */
	float (*dot_q8_0)(const void *w, const struct block_q8 *x, size_t nb);
	float (*dot_q4_0)(const void *w, const struct block_q8 *x, size_t nb);
};

/* The best kernels this CPU runs (never NULL). */
const struct cpu_kernels *cpu_kernels_get(void);
/* The portable kernels (for tests comparing SIMD with scalar). */
const struct cpu_kernels *cpu_kernels_scalar(void);
/* The AVX2 kernels; only valid where cpu_kernels_get() picked AVX2 or better. */
const struct cpu_kernels *cpu_kernels_avx2(void);

#endif
