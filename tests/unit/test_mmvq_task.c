/*
 * The integer matrix-vector tasks the CUDA decode kernel runs (Q8_0, Q4_0,
 * Q4_K, Q5_K, Q6_K)
 * (kernels/mmvq_task.h), checked on the host: a row's tasks summed must be
 * the dequantized row . the quantized activations (to float rounding),
 * and within the activations' quantization error of the float product;
 * for rows of quantized real values and of random bytes (every nibble and
 * scale pattern), on rows of one block and of several.
 */
#include <math.h>

#include "testlib.h"
#include "privai/tensor_type.h"
#include "kernels/mmvq_task.h"

#define N 1024 /* four K-quant super-blocks */

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t
rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float
rnd_unit(void)
{
	return (float)(rnd32() % 20001) / 10000.0f - 1.0f;
}

/* A half with a small finite value: a random block's scales. */
static void
small_half(uint8_t *p)
{
	uint16_t h = (uint16_t)(0x2000 + rnd32() % 0x1800); /* about 2^-7 .. 2^-1 */
	if (rnd32() & 1)
		h |= 0x8000;
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

static void
random_row(uint32_t type, uint8_t *row, int n)
{
	size_t bytes = tensor_type_row_bytes(type, (uint64_t)n), block = tensor_type_get(type)->block_bytes;

	for (size_t k = 0; k < bytes; k++)
		row[k] = (uint8_t)rnd32();
	for (size_t b = 0; b < bytes; b += block) {
		small_half(row + b + (type == TT_Q6_K ? 208 : 0)); /* d: last in Q6_K, first elsewhere */
		if (type == TT_Q4_K || type == TT_Q5_K)
			small_half(row + b + 2); /* dmin */
	}
}

/* Checks one row of n values against the dequantized row; names the case. */
static void
check_row(uint32_t type, const uint8_t *row, const float *x, int n, const char *what)
{
	_Alignas(16) int8_t xq[N];
	float xd[N / 32] = { 0 }, w[N];
	double want = 0.0, mag = 0.0, exact = 0.0, bound = 0.0;
	float got = 0.0f;

	for (int b = 0; b < n / 32; b++)
		mq_quantize32(x + 32 * b, xq + 32 * b, xd + b);
	tensor_dequantize_row(type, row, w, (size_t)n);
	for (int j = 0; j < n; j++) {
		double t = (double)w[j] * xq[j] * xd[j / 32];
		want += t;
		mag += fabs(t);
		exact += (double)w[j] * x[j];
		bound += fabs((double)w[j]) * xd[j / 32] / 2; /* an activation is off by half a step at most */
	}
	for (int64_t i = 0; i < n / 8; i++)
		got += mq_task(type, row, i, xq, xd);
	CHECK(fabs(got - want) <= 1e-5 * mag + 1e-30, "%s %s, %d values: tasks sum to %.9g, the row %.9g (scale %.3g)",
	      tensor_type_name(type), what, n, got, want, mag);
	CHECK(fabs(got - exact) <= bound * 1.0001 + 1e-5 * mag,
	      "%s %s, %d values: %.6g within the activations' rounding (%.3g) of the float product %.6g",
	      tensor_type_name(type), what, n, got, bound, exact);
}

static void
test_types(void)
{
	static const uint32_t types[] = { TT_Q8_0, TT_Q4_0, TT_Q4_K, TT_Q5_K, TT_Q6_K };
	float x[N], src[N];
	uint8_t row[N * 2];

	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		uint32_t t = types[k];
		CHECK(mq_type_ok(t), "%s is an integer-path type", tensor_type_name(t));
		for (int n = tensor_type_get(t)->block_elems; n <= N; n *= 4) {
			for (int round = 0; round < 20; round++) {
				for (int j = 0; j < n; j++) {
					src[j] = rnd_unit() * (j % 7 == 0 ? 3.0f : 1.0f);
					x[j] = rnd_unit() * (j % 11 == 0 ? 10.0f : 1.0f);
				}
				CHECK(tensor_quantize_row(t, src, row, (size_t)n) == 0, "quantize a %s row",
				      tensor_type_name(t));
				check_row(t, row, x, n, "quantized values");
				random_row(t, row, n);
				check_row(t, row, x, n, "random bytes");
			}
		}
	}
	CHECK(!mq_type_ok(TT_F16) && !mq_type_ok(TT_Q2_K) && !mq_type_ok(TT_Q3_K) && !mq_type_ok(TT_IQ4_NL),
	      "types without an integer path are left to the float kernel");
}

static void
test_quantize(void)
{
	float x[32] = { 0 }, d;
	int8_t q[32];

	mq_quantize32(x, q, &d);
	int zero = d == 0.0f;
	for (int j = 0; j < 32; j++)
		zero &= q[j] == 0;
	CHECK(zero, "32 zero activations: scale 0, all zero (no division by zero)");
	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16) * 0.25f;
	mq_quantize32(x, q, &d);
	CHECK(q[0] == -127 && fabsf(d - 4.0f / 127.0f) < 1e-9f && q[16] == 0,
	      "the largest magnitude maps to -127/127, zero to 0 (q0 %d, d %g)", q[0], d);
	int worst = 0;
	for (int j = 0; j < 32; j++)
		if (fabsf(q[j] * d - x[j]) > d / 2 * 1.0001f)
			worst++;
	CHECK(worst == 0, "every value within half a step of its int8 (%d off)", worst);
}

int
main(void)
{
	test_quantize();
	test_types();
	return test_summary();
}
