/*
 * Dequantization of every supported GGUF weight type to float32.
 *
 * Each routine follows the reference block definitions exactly (layout, bit
 * order, scale packing), so the values are the ones the model was trained and
 * quantized to.  Blocks are read through byte pointers and memcpy because a
 * block inside an mmapped file has no alignment guarantee.
 */
#include <string.h>

#include "privai/tensor_type.h"

static float
rd_f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return fp16_to_f32(h);
}

static void
dq_q4_0(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 18, y += 32) {
		float d = rd_f16(b);
		const uint8_t *qs = b + 2;
		for (int j = 0; j < 16; j++) {
			y[j] = ((qs[j] & 0xf) - 8) * d;
			y[j + 16] = ((qs[j] >> 4) - 8) * d;
		}
	}
}

static void
dq_q4_1(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 20, y += 32) {
		float d = rd_f16(b), m = rd_f16(b + 2);
		const uint8_t *qs = b + 4;
		for (int j = 0; j < 16; j++) {
			y[j] = (qs[j] & 0xf) * d + m;
			y[j + 16] = (qs[j] >> 4) * d + m;
		}
	}
}

static void
dq_q5(const uint8_t *b, float *y, size_t nb, int has_min)
{
	size_t bsz = has_min ? 24 : 22;

	for (size_t i = 0; i < nb; i++, b += bsz, y += 32) {
		float d = rd_f16(b), m = has_min ? rd_f16(b + 2) : 0.0f;
		const uint8_t *p = b + (has_min ? 4 : 2);
		uint32_t qh;
		memcpy(&qh, p, 4);
		const uint8_t *qs = p + 4;
		for (int j = 0; j < 16; j++) {
			int h0 = ((qh >> j) << 4) & 0x10;
			int h1 = (qh >> (j + 12)) & 0x10;
			int x0 = (qs[j] & 0xf) | h0, x1 = (qs[j] >> 4) | h1;
			if (has_min) {
				y[j] = x0 * d + m;
				y[j + 16] = x1 * d + m;
			} else {
				y[j] = (x0 - 16) * d;
				y[j + 16] = (x1 - 16) * d;
			}
		}
	}
}

static void
dq_q8_0(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 34, y += 32) {
		float d = rd_f16(b);
		const int8_t *qs = (const int8_t *)(b + 2);
		for (int j = 0; j < 32; j++)
			y[j] = qs[j] * d;
	}
}

static void
dq_q2_k(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 84) {
		const uint8_t *sc = b, *q = b + 16;
		float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
		int is = 0;
		for (int n = 0; n < QK_K; n += 128, q += 32) {
			for (int shift = 0; shift < 8; shift += 2) {
				for (int half = 0; half < 2; half++) {
					uint8_t s = sc[is++];
					float dl = d * (s & 0xf), ml = dmin * (s >> 4);
					for (int l = 0; l < 16; l++)
						*y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
				}
			}
		}
	}
}

/* Unpack the twelve bytes of 6-bit Q3_K scales into sixteen signed ones. */
static void
q3_k_scales(const uint8_t *packed, int8_t out[16])
{
	const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
	uint32_t aux[4], tmp;

	memcpy(aux, packed, 12);
	tmp = aux[2];
	aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
	aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
	aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
	aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
	memcpy(out, aux, 16);
}

static void
dq_q3_k(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 110) {
		const uint8_t *hm = b, *q = b + 32;
		int8_t scales[16];
		float d = rd_f16(b + 108);
		uint8_t m = 1;
		int is = 0;
		q3_k_scales(b + 96, scales);
		for (int n = 0; n < QK_K; n += 128, q += 32) {
			for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
				for (int half = 0; half < 2; half++) {
					float dl = d * (scales[is++] - 32);
					for (int l = 16 * half; l < 16 * half + 16; l++)
						*y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
				}
			}
		}
	}
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
static void
scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

static void
dq_q4_k(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 144) {
		float d = rd_f16(b), dmin = rd_f16(b + 2);
		const uint8_t *sc = b + 4, *q = b + 16;
		for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2) {
			uint8_t s, m;
			scale_min_k4(is, sc, &s, &m);
			float d1 = d * s, m1 = dmin * m;
			scale_min_k4(is + 1, sc, &s, &m);
			float d2 = d * s, m2 = dmin * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (q[l] & 0xf) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (q[l] >> 4) - m2;
		}
	}
}

static void
dq_q5_k(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 176) {
		float d = rd_f16(b), dmin = rd_f16(b + 2);
		const uint8_t *sc = b + 4, *qh = b + 16, *ql = b + 48;
		uint8_t u1 = 1, u2 = 2;
		for (int j = 0, is = 0; j < QK_K; j += 64, ql += 32, is += 2) {
			uint8_t s, m;
			scale_min_k4(is, sc, &s, &m);
			float d1 = d * s, m1 = dmin * m;
			scale_min_k4(is + 1, sc, &s, &m);
			float d2 = d * s, m2 = dmin * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * ((ql[l] & 0xf) + ((qh[l] & u1) ? 16 : 0)) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
			u1 <<= 2;
			u2 <<= 2;
		}
	}
}

static void
dq_q6_k(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 210) {
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);
		float d = rd_f16(b + 208);
		for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l++) {
				int is = l / 16;
				int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
				int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
				int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[l] = d * sc[is] * q1;
				y[l + 32] = d * sc[is + 2] * q2;
				y[l + 64] = d * sc[is + 4] * q3;
				y[l + 96] = d * sc[is + 6] * q4;
			}
		}
	}
}

static const int8_t kvalues_iq4nl[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

static void
dq_iq4_nl(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 18, y += 32) {
		float d = rd_f16(b);
		const uint8_t *qs = b + 2;
		for (int j = 0; j < 16; j++) {
			y[j] = d * kvalues_iq4nl[qs[j] & 0xf];
			y[j + 16] = d * kvalues_iq4nl[qs[j] >> 4];
		}
	}
}

/* IQ4_XS: IQ4_NL's sixteen levels in 32-value sub-blocks of a 256-value
 * super-block, d * (ls - 32) each, ls six bits: the low four in a
 * nibble of scales_l (bytes 4..7), the high two in scales_h (bytes 2..3) */
static void
dq_iq4_xs(const uint8_t *b, float *y, size_t nb)
{
	for (size_t i = 0; i < nb; i++, b += 136) {
		float d = rd_f16(b);
		unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
		const uint8_t *qs = b + 8;
		for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
			int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (int)((sh >> (2 * ib)) & 3) << 4;
			float dl = d * (float)(ls - 32);
			for (int j = 0; j < 16; j++) {
				y[j] = dl * kvalues_iq4nl[qs[j] & 0xf];
				y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
			}
		}
	}
}

/* One clone per instruction set, picked at load time (ifunc): the block
 * loops above are inlined into each and vectorized for it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
int
tensor_dequantize_row(uint32_t type, const void *src, float *dst, size_t n)
{
	const uint8_t *b = src;

	switch (type) {
	case TT_F32:
		memcpy(dst, src, n * 4);
		return 0;
	case TT_F16:
		for (size_t i = 0; i < n; i++)
			dst[i] = rd_f16(b + 2 * i);
		return 0;
	case TT_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, b + 2 * i, 2);
			dst[i] = bf16_to_f32(h);
		}
		return 0;
	case TT_Q4_0:
		dq_q4_0(b, dst, n / 32);
		return 0;
	case TT_Q4_1:
		dq_q4_1(b, dst, n / 32);
		return 0;
	case TT_Q5_0:
		dq_q5(b, dst, n / 32, 0);
		return 0;
	case TT_Q5_1:
		dq_q5(b, dst, n / 32, 1);
		return 0;
	case TT_Q8_0:
		dq_q8_0(b, dst, n / 32);
		return 0;
	case TT_Q2_K:
		dq_q2_k(b, dst, n / QK_K);
		return 0;
	case TT_Q3_K:
		dq_q3_k(b, dst, n / QK_K);
		return 0;
	case TT_Q4_K:
		dq_q4_k(b, dst, n / QK_K);
		return 0;
	case TT_Q5_K:
		dq_q5_k(b, dst, n / QK_K);
		return 0;
	case TT_Q6_K:
		dq_q6_k(b, dst, n / QK_K);
		return 0;
	case TT_IQ4_NL:
		dq_iq4_nl(b, dst, n / 32);
		return 0;
	case TT_IQ4_XS:
		dq_iq4_xs(b, dst, n / QK_K);
		return 0;
	}
	return -1;
}
