/*
 * Dequantization of one chunk of 32 consecutive weights of a row, for
 * every GGUF type the engine reads, written once for the host and for
 * CUDA devices (the CUDA backend's kernels include it; the unit tests
 * check it on the host against tensor_dequantize_row()).
 *
 * A chunk is the unit a GPU thread works on: a whole block of the 32-wide
 * types, an eighth of a 256-wide K-quant super-block (whose scales it
 * reads from the super-block's header).  Bytes are read one at a time:
 * blocks inside a row have no alignment, and the same code must run on
 * both sides.  The arithmetic is tensor_dequantize_row()'s, term for
 * term, so the values are bit-identical.
 */
#ifndef PRIVAI_KERNELS_DEQUANT_CHUNK_H
#define PRIVAI_KERNELS_DEQUANT_CHUNK_H

#include <stdint.h>

#ifdef __CUDACC__
#define DQ_FN __host__ __device__ static inline
#else
#define DQ_FN static inline
#endif

/* GGUF type ids (privai/tensor_type.h has the same; this header stands
 * alone so that nvcc needs nothing else). */
enum {
	DQ_F32 = 0,
	DQ_F16 = 1,
	DQ_Q4_0 = 2,
	DQ_Q4_1 = 3,
	DQ_Q5_0 = 6,
	DQ_Q5_1 = 7,
	DQ_Q8_0 = 8,
	DQ_Q2_K = 10,
	DQ_Q3_K = 11,
	DQ_Q4_K = 12,
	DQ_Q5_K = 13,
	DQ_Q6_K = 14,
	DQ_IQ4_NL = 20,
	DQ_IQ4_XS = 23,
	DQ_BF16 = 30,
};

DQ_FN float
dq_bits_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	union {
		uint32_t u;
		float f;
	} v;
	v.u = u;
	return v.f;
#endif
}

DQ_FN uint32_t
dq_u16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* IEEE half to float, exactly (subnormals, infinities and NaNs kept). */
DQ_FN float
dq_half(const uint8_t *p)
{
	uint32_t h = dq_u16(p), sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;

	if (exp == 0) {
		float v = (float)mant * 5.9604644775390625e-8f; /* 2^-24 */
		return sign ? -v : v;
	}
	if (exp == 31)
		return dq_bits_float(sign | 0x7f800000u | mant << 13);
	return dq_bits_float(sign | (exp + 112) << 23 | mant << 13);
}

/* Bytes per block and weights per block of a type; 0 for one this header
 * does not know. */
DQ_FN int
dq_block_bytes(uint32_t type)
{
	switch (type) {
	case DQ_F32:
		return 4;
	case DQ_F16:
	case DQ_BF16:
		return 2;
	case DQ_Q4_0:
	case DQ_IQ4_NL:
		return 18;
	case DQ_Q4_1:
		return 20;
	case DQ_Q5_0:
		return 22;
	case DQ_Q5_1:
		return 24;
	case DQ_Q8_0:
		return 34;
	case DQ_Q2_K:
		return 84;
	case DQ_Q3_K:
		return 110;
	case DQ_Q4_K:
		return 144;
	case DQ_Q5_K:
		return 176;
	case DQ_Q6_K:
		return 210;
	case DQ_IQ4_XS:
		return 136;
	}
	return 0;
}

DQ_FN int
dq_block_size(uint32_t type)
{
	switch (type) {
	case DQ_F32:
	case DQ_F16:
	case DQ_BF16:
		return 1;
	case DQ_Q2_K:
	case DQ_Q3_K:
	case DQ_Q4_K:
	case DQ_Q5_K:
	case DQ_Q6_K:
	case DQ_IQ4_XS:
		return 256;
	}
	return 32;
}

/* Bytes that n chunks of a row of `type` take from a chunk c0 that is a
 * multiple of 8 (whole K-quant super-blocks), and so where such a chunk
 * starts: dq_chunks_bytes(type, c0).  A kernel that copies a row a
 * segment at a time decodes chunk c0 + i of the row as chunk i of its
 * copy. */
DQ_FN int64_t
dq_chunks_bytes(uint32_t type, int64_t n)
{
	return n * 32 / dq_block_size(type) * dq_block_bytes(type);
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
DQ_FN void
dq_scale_min_k4(int j, const uint8_t *q, int *d, int *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* Signed scale i (0..15) of a Q3_K super-block, from its twelve packed
 * bytes: low four bits from bytes 0..7, high two from bytes 8..11. */
DQ_FN int
dq_q3_k_scale(const uint8_t *sc, int i)
{
	int lo = i < 8 ? sc[i] & 0xf : sc[i - 8] >> 4;
	int hi = (sc[8 + (i & 3)] >> (2 * (i >> 2))) & 3;

	return (lo | hi << 4) - 32;
}

DQ_FN void
dq_chunk_k(uint32_t type, const uint8_t *b, int c, float *y)
{
	switch (type) {
	case DQ_Q2_K: { /* sc[16] qs[64] d dmin */
		const uint8_t *q = b + 16 + (c >> 2) * 32;
		int shift = 2 * (c & 3);
		float d = dq_half(b + 80), dmin = dq_half(b + 82);
		for (int half = 0; half < 2; half++) {
			int s = b[(c >> 2) * 8 + (c & 3) * 2 + half];
			float dl = d * (s & 0xf), ml = dmin * (s >> 4);
			for (int l = 0; l < 16; l++)
				y[16 * half + l] = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
		}
		return;
	}
	case DQ_Q3_K: { /* hmask[32] qs[64] scales[12] d */
		const uint8_t *hm = b, *q = b + 32 + (c >> 2) * 32;
		int shift = 2 * (c & 3);
		unsigned m = 1u << c;
		float d = dq_half(b + 108);
		for (int half = 0; half < 2; half++) {
			float dl = d * dq_q3_k_scale(b + 96, (c >> 2) * 8 + (c & 3) * 2 + half);
			for (int l = 16 * half; l < 16 * half + 16; l++)
				y[l] = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
		}
		return;
	}
	case DQ_Q4_K: { /* d dmin scales[12] qs[128] */
		const uint8_t *q = b + 16 + (c >> 1) * 32;
		int s, m;
		dq_scale_min_k4(c, b + 4, &s, &m);
		float d1 = dq_half(b) * s, m1 = dq_half(b + 2) * m;
		for (int l = 0; l < 32; l++)
			y[l] = d1 * ((c & 1) ? q[l] >> 4 : q[l] & 0xf) - m1;
		return;
	}
	case DQ_Q5_K: { /* d dmin scales[12] qh[32] qs[128] */
		const uint8_t *qh = b + 16, *ql = b + 48 + (c >> 1) * 32;
		int s, m;
		dq_scale_min_k4(c, b + 4, &s, &m);
		float d1 = dq_half(b) * s, m1 = dq_half(b + 2) * m;
		for (int l = 0; l < 32; l++)
			y[l] = d1 * (((c & 1) ? ql[l] >> 4 : ql[l] & 0xf) + ((qh[l] & (1u << c)) ? 16 : 0)) - m1;
		return;
	}
	case DQ_Q6_K: { /* ql[128] qh[64] scales[16] d */
		int g = c >> 2, k = c & 3;
		const uint8_t *ql = b + g * 64 + (k & 1) * 32, *qh = b + 128 + g * 32;
		const int8_t *sc = (const int8_t *)(b + 192) + g * 8 + 2 * k;
		float d = dq_half(b + 208);
		for (int l = 0; l < 32; l++) {
			int q = ((ql[l] >> (4 * (k >> 1))) & 0xf) | (((qh[l] >> (2 * k)) & 3) << 4);
			y[l] = d * sc[l / 16] * (q - 32);
		}
		return;
	}
	}
}

/* y[0..32) = weights 32c..32c+32 of `row`, a row of `type`.  A type this
 * header does not know gives zeros (prepare_weight refuses those first). */
DQ_FN void
dq_chunk(uint32_t type, const uint8_t *row, int64_t c, float *y)
{
	static const int8_t iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

	switch (type) {
	case DQ_F32:
		for (int j = 0; j < 32; j++) {
			const uint8_t *p = row + (c * 32 + j) * 4;
			y[j] = dq_bits_float(dq_u16(p) | dq_u16(p + 2) << 16);
		}
		return;
	case DQ_F16:
		for (int j = 0; j < 32; j++)
			y[j] = dq_half(row + (c * 32 + j) * 2);
		return;
	case DQ_BF16:
		for (int j = 0; j < 32; j++)
			y[j] = dq_bits_float(dq_u16(row + (c * 32 + j) * 2) << 16);
		return;
	case DQ_Q2_K:
	case DQ_Q3_K:
	case DQ_Q4_K:
	case DQ_Q5_K:
	case DQ_Q6_K:
		dq_chunk_k(type, row + (c >> 3) * dq_block_bytes(type), (int)(c & 7), y);
		return;
	case DQ_IQ4_XS: { /* d scales_h scales_l[4] qs[128]: chunk c is sub-block c & 7 */
		const uint8_t *sb = row + (c >> 3) * 136, *qs = sb + 8 + (c & 7) * 16;
		int ib = (int)(c & 7);
		int ls = ((sb[4 + ib / 2] >> (4 * (ib & 1))) & 0xf) | (int)((dq_u16(sb + 2) >> (2 * ib)) & 3) << 4;
		float dl = dq_half(sb) * (float)(ls - 32);
		for (int j = 0; j < 16; j++) {
			y[j] = dl * iq4nl[qs[j] & 0xf];
			y[j + 16] = dl * iq4nl[qs[j] >> 4];
		}
		return;
	}
	}
	const uint8_t *b = row + c * dq_block_bytes(type);
	switch (type) {
	case DQ_Q4_0:
	case DQ_IQ4_NL: {
		float d = dq_half(b);
		for (int j = 0; j < 16; j++) {
			int lo = b[2 + j] & 0xf, hi = b[2 + j] >> 4;
			y[j] = type == DQ_Q4_0 ? (lo - 8) * d : d * iq4nl[lo];
			y[j + 16] = type == DQ_Q4_0 ? (hi - 8) * d : d * iq4nl[hi];
		}
		return;
	}
	case DQ_Q4_1: {
		float d = dq_half(b), m = dq_half(b + 2);
		for (int j = 0; j < 16; j++) {
			y[j] = (b[4 + j] & 0xf) * d + m;
			y[j + 16] = (b[4 + j] >> 4) * d + m;
		}
		return;
	}
	case DQ_Q5_0:
	case DQ_Q5_1: {
		int has_min = type == DQ_Q5_1;
		float d = dq_half(b), m = has_min ? dq_half(b + 2) : 0.0f;
		const uint8_t *p = b + (has_min ? 4 : 2), *qs = p + 4;
		uint32_t qh = dq_u16(p) | dq_u16(p + 2) << 16;
		for (int j = 0; j < 16; j++) {
			int x0 = (qs[j] & 0xf) | (((qh >> j) << 4) & 0x10),
			    x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
			y[j] = has_min ? x0 * d + m : (x0 - 16) * d;
			y[j + 16] = has_min ? x1 * d + m : (x1 - 16) * d;
		}
		return;
	}
	case DQ_Q8_0: {
		float d = dq_half(b);
		for (int j = 0; j < 32; j++)
			y[j] = (int8_t)b[2 + j] * d;
		return;
	}
	}
	for (int j = 0; j < 32; j++)
		y[j] = 0.0f;
}

#endif
