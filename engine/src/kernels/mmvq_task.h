/*
 * Decode's integer matrix-vector product for Q8_0, Q4_0 and Q4_K to Q6_K, the way
 * the CPU's int8 decode computes it: the activations quantized 32 at a
 * time to int8 and one float scale (mq_quantize32), the weights' integers
 * multiplied with them four at a time (dp4a on a GPU), the scales applied
 * to each small sum.  Written once for the host and for CUDA devices: the
 * CUDA kernel (cuda_mmvq.cu) runs these functions, and the unit tests
 * check them on the host against the dequantized row.
 *
 * A row is cut into tasks of 8 weights, task i covering values 8i.. of
 * its block (the block's part i % 4 for Q8_0 and Q4_0; for the K-quants,
 * part i % 4 of chunk i / 4 % 8 of super-block i / 32), so that a warp's
 * 32 lanes read 8 consecutive blocks of Q8_0 or Q4_0, or one K-quant
 * super-block, at a time: 144 to 272 contiguous bytes, where a lane
 * decoding a whole 32-block read bytes 34 apart from its neighbours.
 */
#ifndef PRIVAI_KERNELS_MMVQ_TASK_H
#define PRIVAI_KERNELS_MMVQ_TASK_H

#include <math.h>

#include "kernels/dequant_chunk.h"

/* Whether the integer path takes the type. */
DQ_FN int
mq_type_ok(uint32_t type)
{
	return type == DQ_Q8_0 || type == DQ_Q4_0 || type == DQ_Q4_K || type == DQ_Q5_K || type == DQ_Q6_K;
}

/* Four signed bytes' products with four others, summed onto c. */
DQ_FN int
mq_dp4a(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
	return __dp4a(a, b, c);
#else
	for (int k = 0; k < 4; k++)
		c += (int)(int8_t)(a >> 8 * k) * (int)(int8_t)(b >> 8 * k);
	return c;
#endif
}

/* Four bytes at a 2-byte aligned address (weights: a Q8_0 or Q4_0 block
 * of 34 or 18 bytes puts its integers at even offsets only). */
DQ_FN int
mq_load4_2(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	const uint16_t *h = (const uint16_t *)p;
	return (int)((uint32_t)h[0] | (uint32_t)h[1] << 16);
#else
	return (int)(dq_u16(p) | dq_u16(p + 2) << 16);
#endif
}

/* Four bytes at a 4-byte aligned address. */
DQ_FN int
mq_load4(const void *p)
{
#ifdef __CUDA_ARCH__
	return *(const int *)p;
#else
	const uint8_t *b = (const uint8_t *)p;
	return (int)(dq_u16(b) | dq_u16(b + 2) << 16);
#endif
}

DQ_FN float
mq_half(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return __half2float(*(const __half *)p);
#else
	return dq_half(p);
#endif
}

/* The scale of 32 activations whose largest magnitude is amax, and its
 * inverse; one formula for the GPU's warps and the host's tests. */
DQ_FN float
mq_scale(float amax, float *inv)
{
	*inv = amax > 0.0f ? 127.0f / amax : 0.0f;
	return amax / 127.0f;
}

DQ_FN int8_t
mq_round(float x, float inv)
{
	return (int8_t)rintf(x * inv);
}

/* 32 activations to int8 and their scale (the host's version of the GPU's
 * quantizing kernel, where a lane takes one value). */
DQ_FN void
mq_quantize32(const float *x, int8_t *q, float *d)
{
	float amax = 0.0f, inv;

	for (int j = 0; j < 32; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	*d = mq_scale(amax, &inv);
	for (int j = 0; j < 32; j++)
		q[j] = mq_round(x[j], inv);
}

/* Task i of a row (8 weights) . the quantized activations at the same
 * place: xq the row's int8 activations (4-byte aligned, as the row), xd
 * one scale per 32 of them. */
DQ_FN float
mq_task(uint32_t type, const uint8_t *row, int64_t i, const int8_t *xq, const float *xd)
{
	const int ones = 0x01010101;
	int64_t blk = i >> 2;
	int p = (int)(i & 3);

	if (type == DQ_Q8_0) { /* d, qs[32]: values 8p..8p+7 */
		const uint8_t *b = row + blk * 34;
		const int8_t *x = xq + blk * 32 + 8 * p;
		int s = mq_dp4a(mq_load4_2(b + 2 + 8 * p), mq_load4(x), 0);
		s = mq_dp4a(mq_load4_2(b + 6 + 8 * p), mq_load4(x + 4), s);
		return mq_half(b) * xd[blk] * (float)s;
	}
	if (type == DQ_Q4_0) { /* d, qs[16]: value j in qs[j]'s low nibble, j + 16 in its high */
		const uint8_t *b = row + blk * 18;
		const int8_t *x = xq + blk * 32 + 4 * p;
		int w = mq_load4_2(b + 2 + 4 * p), xa = mq_load4(x), xb = mq_load4(x + 16);
		int s = mq_dp4a(w & 0x0f0f0f0f, xa, 0);
		s = mq_dp4a((w >> 4) & 0x0f0f0f0f, xb, s);
		int sx = mq_dp4a(ones, xa, mq_dp4a(ones, xb, 0));
		return mq_half(b) * xd[blk] * (float)(s - 8 * sx);
	}
	/* the K-quants: super-blocks of 256, task i in chunk c (32 values) of
	 * super-block sb, its values 8p.. of the chunk */
	int64_t sb = i >> 5;
	int c = (int)(i >> 2) & 7;
	const int8_t *x = xq + sb * 256 + c * 32 + 8 * p;
	int x0 = mq_load4(x), x1 = mq_load4(x + 4), sx = mq_dp4a(ones, x0, mq_dp4a(ones, x1, 0));
	uint32_t w0, w1;
	if (type == DQ_Q6_K) { /* ql[128], qh[64], scales[16], d: chunk c = 4g + k */
		const uint8_t *b = row + sb * 210, *ql = b + (c >> 2) * 64 + (c & 1) * 32 + 8 * p;
		const uint8_t *qh = b + 128 + (c >> 2) * 32 + 8 * p;
		int lo = 4 * ((c & 3) >> 1), hi = 2 * (c & 3);
		w0 = ((uint32_t)mq_load4_2(ql) >> lo & 0x0f0f0f0fu) | ((uint32_t)mq_load4_2(qh) >> hi & 0x03030303u)
									      << 4;
		w1 = ((uint32_t)mq_load4_2(ql + 4) >> lo & 0x0f0f0f0fu) |
		     ((uint32_t)mq_load4_2(qh + 4) >> hi & 0x03030303u) << 4;
		int s = mq_dp4a((int)w0, x0, mq_dp4a((int)w1, x1, 0));
		float sc = (float)(int8_t)b[192 + (c >> 2) * 8 + 2 * (c & 3) + (p >> 1)];
		return mq_half(b + 208) * sc * xd[sb * 8 + c] * (float)(s - 32 * sx);
	}
	/* Q4_K: d, dmin, scales[12], qs[128]; Q5_K: d, dmin, scales[12], qh[32],
	 * qs[128] with bit c of qh[l] above chunk c's value l.  Chunk c is in
	 * the low nibbles of qs[c / 2 * 32 ..] for even c, the high for odd. */
	int q5 = type == DQ_Q5_K, sc, mn, shift = 4 * (c & 1);
	const uint8_t *b = row + sb * (q5 ? 176 : 144), *q = b + (q5 ? 48 : 16) + (c >> 1) * 32 + 8 * p;
	w0 = (uint32_t)mq_load4_2(q) >> shift & 0x0f0f0f0fu;
	w1 = (uint32_t)mq_load4_2(q + 4) >> shift & 0x0f0f0f0fu;
	if (q5) {
		w0 |= ((uint32_t)mq_load4_2(b + 16 + 8 * p) >> c & 0x01010101u) << 4;
		w1 |= ((uint32_t)mq_load4_2(b + 20 + 8 * p) >> c & 0x01010101u) << 4;
	}
	int s = mq_dp4a((int)w0, x0, mq_dp4a((int)w1, x1, 0));
	dq_scale_min_k4(c, b + 4, &sc, &mn);
	return xd[sb * 8 + c] * (mq_half(b) * (float)sc * (float)s - mq_half(b + 2) * (float)mn * (float)sx);
}

#endif
