/*
 * Quantization of float32 rows into GGUF block types, for the `quantize`
 * subcommand, the synthetic-model tool and the round-trip tests.
 *
 * Q8_0, Q4_0 and Q5_0 follow the reference rounding exactly.  The K-quants and
 * IQ4_XS use a plain min/max (Q2_K, Q4_K, Q5_K) or max-abs (Q3_K, Q6_K,
 * IQ4_XS) fit per sub-block rather than the reference's iterative search
 * (and IQ4_XS no importance matrix): the files are valid and read
 * identically everywhere, with a slightly larger error than the search
 * would give.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "privai/status.h"
#include "privai/tensor_type.h"

static void
wr_f16(uint8_t *p, float f)
{
	uint16_t h = f32_to_fp16(f);

	memcpy(p, &h, 2);
}

static void
q_q8_0(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += 32, b += 34) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		wr_f16(b, d);
		for (int j = 0; j < 32; j++)
			((int8_t *)(b + 2))[j] = (int8_t)roundf(x[j] * id);
	}
}

/* The first of n values of largest magnitude, with its sign (0 for none):
 * what the symmetric types scale onto their most negative level. */
static float
peak(const float *x, int n)
{
	float big = 0.0f;

	for (int j = 0; j < n; j++)
		if (fabsf(x[j]) > fabsf(big))
			big = x[j];
	return big;
}

static void
q_q4_0(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += 32, b += 18) {
		float d = peak(x, 32) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		wr_f16(b, d);
		for (int j = 0; j < 16; j++) {
			int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
			q0 = q0 > 15 ? 15 : q0;
			q1 = q1 > 15 ? 15 : q1;
			b[2 + j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

static int
clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Pack sub-block j's 6-bit scale and min the way scale_min_k4 unpacks them. */
static void
pack_scale_min_k4(uint8_t *q, int j, int sc, int m)
{
	if (j < 4) {
		q[j] = (uint8_t)((q[j] & 0xc0) | sc);
		q[j + 4] = (uint8_t)((q[j + 4] & 0xc0) | m);
	} else {
		q[j + 4] = (uint8_t)((sc & 0xf) | ((m & 0xf) << 4));
		q[j - 4] = (uint8_t)((q[j - 4] & 0x3f) | ((sc >> 4) << 6));
		q[j] = (uint8_t)((q[j] & 0x3f) | ((m >> 4) << 6));
	}
}

/* Q4_1 and Q5_1 (levels 15 or 31): a min/max fit per block, w = d * q + m;
 * Q5_1's fifth bits in a 32-bit qh (bit j for value j) before the nibbles */
static void
q_q4_1_q5_1(const float *x, uint8_t *b, size_t nb, int five)
{
	int bytes = five ? 24 : 20, levels = five ? 31 : 15;

	for (size_t i = 0; i < nb; i++, x += 32, b += bytes) {
		float lo = x[0], hi = x[0];
		for (int j = 1; j < 32; j++) {
			lo = fminf(lo, x[j]);
			hi = fmaxf(hi, x[j]);
		}
		float d = (hi - lo) / (float)levels;
		uint32_t qh = 0;
		memset(b, 0, (size_t)bytes);
		wr_f16(b, d);
		wr_f16(b + 2, lo);
		d = fp16_to_f32(f32_to_fp16(d));
		lo = fp16_to_f32(f32_to_fp16(lo));
		uint8_t *qs = b + (five ? 8 : 4);
		for (int j = 0; j < 32; j++) {
			int q = d > 0 ? clampi((int)lroundf((x[j] - lo) / d), 0, levels) : 0;
			qs[j % 16] = (uint8_t)(qs[j % 16] | (q & 0xf) << (j < 16 ? 0 : 4));
			qh |= (uint32_t)(q >> 4) << j;
		}
		if (five)
			memcpy(b + 4, &qh, 4);
	}
}

/* Q5_0: Q4_0's rounding with 32 levels, w = d * (q - 16) */
static void
q_q5_0(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += 32, b += 22) {
		float d = peak(x, 32) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
		uint32_t qh = 0;
		memset(b, 0, 22);
		wr_f16(b, d);
		for (int j = 0; j < 32; j++) {
			int q = clampi((int)(x[j] * id + 16.5f), 0, 31);
			b[6 + j % 16] = (uint8_t)(b[6 + j % 16] | (q & 0xf) << (j < 16 ? 0 : 4));
			qh |= (uint32_t)(q >> 4) << j;
		}
		memcpy(b + 2, &qh, 4);
	}
}

/* Q4_K, and with five_bits Q5_K (32 levels; the fifth bit of sub-block
 * s's values is bit s of qh[l], the layout dq_q5_k reads). */
static void
q_q4_k_q5_k(const float *x, uint8_t *b, size_t nb, int five_bits)
{
	size_t bytes = five_bits ? 176 : 144;
	float levels = five_bits ? 31.0f : 15.0f;

	for (size_t i = 0; i < nb; i++, x += QK_K, b += bytes) {
		float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
		for (int s = 0; s < 8; s++) {
			float lo = 0.0f, hi = 0.0f;
			for (int l = 0; l < 32; l++) {
				lo = fminf(lo, x[32 * s + l]);
				hi = fmaxf(hi, x[32 * s + l]);
			}
			scale[s] = (hi - lo) / levels;
			min[s] = -lo; /* stored as a positive offset */
			max_scale = fmaxf(max_scale, scale[s]);
			max_min = fmaxf(max_min, min[s]);
		}
		float d = max_scale / 63.0f, dmin = max_min / 63.0f;
		uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five_bits ? 48 : 16);
		memset(b, 0, bytes);
		wr_f16(b, d);
		wr_f16(b + 2, dmin);
		d = fp16_to_f32(f32_to_fp16(d));
		dmin = fp16_to_f32(f32_to_fp16(dmin));
		for (int s = 0; s < 8; s++) {
			int ls = d > 0 ? clampi((int)lroundf(scale[s] / d), 0, 63) : 0;
			int lm = dmin > 0 ? clampi((int)lroundf(min[s] / dmin), 0, 63) : 0;
			pack_scale_min_k4(sc, s, ls, lm);
			float dl = d * ls, ml = dmin * lm;
			for (int l = 0; l < 32; l++) {
				int q = dl > 0 ? clampi((int)lroundf((x[32 * s + l] + ml) / dl), 0, (int)levels) : 0;
				/* pair (2p, 2p+1) of sub-blocks shares 32 bytes: low then high nibble */
				uint8_t *dst = qs + 32 * (s / 2) + l;
				*dst = (uint8_t)((s & 1) ? (*dst | ((q & 0xf) << 4)) : (*dst | (q & 0xf)));
				if (five_bits)
					qh[l] = (uint8_t)(qh[l] | ((q >> 4) << s));
			}
		}
	}
}

static void
q_q6_k(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += QK_K, b += 210) {
		float scale[16], max_abs_scale = 0.0f;
		for (int s = 0; s < 16; s++) {
			float amax = 0.0f;
			for (int l = 0; l < 16; l++)
				amax = fmaxf(amax, fabsf(x[16 * s + l]));
			scale[s] = amax / 31.0f;
			max_abs_scale = fmaxf(max_abs_scale, scale[s]);
		}
		float d = max_abs_scale / 127.0f;
		uint8_t *ql = b, *qh = b + 128;
		int8_t *sc = (int8_t *)(b + 192);
		int8_t q[QK_K];
		memset(b, 0, 210);
		wr_f16(b + 208, d);
		d = fp16_to_f32(f32_to_fp16(d));
		for (int s = 0; s < 16; s++) {
			int ls = d > 0 ? clampi((int)lroundf(scale[s] / d), -128, 127) : 0;
			sc[s] = (int8_t)ls;
			float dl = d * ls;
			for (int l = 0; l < 16; l++)
				q[16 * s + l] =
					(int8_t)(dl != 0 ? clampi((int)lroundf(x[16 * s + l] / dl), -32, 31) : 0);
		}
		/* inverse of the bit layout read by dq_q6_k */
		for (int n = 0; n < QK_K; n += 128, ql += 64, qh += 32) {
			for (int l = 0; l < 32; l++) {
				int q1 = q[n + l] + 32, q2 = q[n + l + 32] + 32;
				int q3 = q[n + l + 64] + 32, q4 = q[n + l + 96] + 32;
				ql[l] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
				ql[l + 32] = (uint8_t)((q2 & 0xf) | ((q4 & 0xf) << 4));
				qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
			}
		}
	}
}

/* Q3_K: 16-value sub-blocks d * (L_s - 32) * q, q in -4..3, L_s 6 bits;
 * each sub-block fitted to its value of largest magnitude (that one at
 * -4, the others rounded and q = 4 clamped to 3), the sub-block scales to
 * the largest of them.  Stored as dq_q3_k reads it: q + 4's low two bits
 * in qs (value 128h + 32k + l at bits 2k of qs[32h + l]), its third bit
 * in bit 4h + k of hmask[l], the scales in twelve bytes (q3_k_scales). */
static void
q_q3_k(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += QK_K, b += 110) {
		float scale[16], max_abs = 0.0f;
		for (int s = 0; s < 16; s++) {
			scale[s] = peak(x + 16 * s, 16) / -4.0f;
			max_abs = fmaxf(max_abs, fabsf(scale[s]));
		}
		float d = max_abs / 31.0f;
		uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
		memset(b, 0, 110);
		wr_f16(b + 108, d);
		d = fp16_to_f32(f32_to_fp16(d));
		for (int s = 0; s < 16; s++) {
			int ls = d > 0 ? clampi((int)lroundf(scale[s] / d), -32, 31) : 0;
			int u = ls + 32, j = s % 8;
			sc[j] = (uint8_t)(sc[j] | (s < 8 ? (u & 0xf) : (u & 0xf) << 4));
			sc[8 + j % 4] = (uint8_t)(sc[8 + j % 4] | (u >> 4) << (2 * (j / 4) + (s < 8 ? 0 : 4)));
			float dl = d * (float)ls;
			for (int l = 0; l < 16; l++) {
				int v = 16 * s + l, h = v / 128, k = (v % 128) / 32, at = v % 32;
				int q = dl != 0.0f ? clampi((int)lroundf(x[v] / dl), -4, 3) + 4 : 4;
				qs[32 * h + at] = (uint8_t)(qs[32 * h + at] | (q & 3) << (2 * k));
				hm[at] = (uint8_t)(hm[at] | (q >> 2) << (4 * h + k));
			}
		}
	}
}

/* Q2_K: 16-value sub-blocks d * sc_s * q - dmin * m_s, q in 0..3, sc and
 * m 4 bits each (scales[s] = sc | m << 4), a min/max fit per sub-block as
 * Q4_K's; q at bits 2k of qs[32h + l] for value 128h + 32k + l (dq_q2_k). */
static void
q_q2_k(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += QK_K, b += 84) {
		float scale[16], min[16], max_scale = 0.0f, max_min = 0.0f;
		for (int s = 0; s < 16; s++) {
			float lo = 0.0f, hi = 0.0f;
			for (int l = 0; l < 16; l++) {
				lo = fminf(lo, x[16 * s + l]);
				hi = fmaxf(hi, x[16 * s + l]);
			}
			scale[s] = (hi - lo) / 3.0f;
			min[s] = -lo;
			max_scale = fmaxf(max_scale, scale[s]);
			max_min = fmaxf(max_min, min[s]);
		}
		float d = max_scale / 15.0f, dmin = max_min / 15.0f;
		uint8_t *qs = b + 16;
		memset(b, 0, 84);
		wr_f16(b + 80, d);
		wr_f16(b + 82, dmin);
		d = fp16_to_f32(f32_to_fp16(d));
		dmin = fp16_to_f32(f32_to_fp16(dmin));
		for (int s = 0; s < 16; s++) {
			int ls = d > 0 ? clampi((int)lroundf(scale[s] / d), 0, 15) : 0;
			int lm = dmin > 0 ? clampi((int)lroundf(min[s] / dmin), 0, 15) : 0;
			b[s] = (uint8_t)(ls | lm << 4);
			float dl = d * (float)ls, ml = dmin * (float)lm;
			for (int l = 0; l < 16; l++) {
				int v = 16 * s + l, h = v / 128, k = (v % 128) / 32;
				int q = dl > 0 ? clampi((int)lroundf((x[v] + ml) / dl), 0, 3) : 0;
				qs[32 * h + v % 32] = (uint8_t)(qs[32 * h + v % 32] | q << (2 * k));
			}
		}
	}
}

/* IQ4_NL's levels, for IQ4_XS */
static const int8_t iq4_levels[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* The level nearest v (in units of the sub-block's scale). */
static int
iq4_nearest(float v)
{
	int best = 0;

	for (int k = 1; k < 16; k++)
		if (fabsf(v - iq4_levels[k]) < fabsf(v - iq4_levels[best]))
			best = k;
	return best;
}

/* IQ4_NL: a 32-value block's value of largest magnitude on the level
 * -127, every value on its nearest level under the stored fp16 scale */
static void
q_iq4_nl(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += 32, b += 18) {
		float big = peak(x, 32);
		wr_f16(b, big / -127.0f);
		float d = fp16_to_f32(f32_to_fp16(big / -127.0f));
		for (int j = 0; j < 16; j++)
			b[2 + j] = (uint8_t)(iq4_nearest(d != 0.0f ? x[j] / d : 0.0f) |
					     iq4_nearest(d != 0.0f ? x[j + 16] / d : 0.0f) << 4);
	}
}

/* IQ4_XS: 32-value sub-blocks, each scaled so that its value of largest
 * magnitude lands on the level -127, the sub-block scales to 6 bits
 * (d * (ls - 32)) and every value then to its nearest level under the
 * stored scale: the layout dq_iq4_xs reads (d, scales_h, scales_l[4],
 * qs[128], the sub-block's values j and j + 16 in byte j's nibbles). */
static void
q_iq4_xs(const float *x, uint8_t *b, size_t nb)
{
	for (size_t i = 0; i < nb; i++, x += QK_K, b += 136) {
		float scale[8], max_abs = 0.0f;
		for (int s = 0; s < 8; s++) {
			scale[s] = peak(x + 32 * s, 32) / -127.0f;
			max_abs = fmaxf(max_abs, fabsf(scale[s]));
		}
		float d = max_abs / 31.0f;
		unsigned sh = 0;
		memset(b, 0, 136);
		wr_f16(b, d);
		d = fp16_to_f32(f32_to_fp16(d));
		for (int s = 0; s < 8; s++) {
			int ls = d > 0 ? clampi((int)lroundf(scale[s] / d), -32, 31) + 32 : 32;
			float dl = d * (float)(ls - 32);
			b[4 + s / 2] = (uint8_t)(b[4 + s / 2] | (ls & 0xf) << (4 * (s % 2)));
			sh |= (unsigned)(ls >> 4) << (2 * s);
			for (int j = 0; j < 16; j++) {
				int lo = iq4_nearest(dl != 0.0f ? x[32 * s + j] / dl : 0.0f);
				int hi = iq4_nearest(dl != 0.0f ? x[32 * s + j + 16] / dl : 0.0f);
				b[8 + 16 * s + j] = (uint8_t)(lo | hi << 4);
			}
		}
		b[2] = (uint8_t)sh;
		b[3] = (uint8_t)(sh >> 8);
	}
}

int
tensor_quantize_row(uint32_t type, const float *src, void *dst, size_t n)
{
	uint8_t *b = dst;

	switch (type) {
	case TT_F32:
		if (n > 0) /* n 0 asks whether the type can be written (synth) */
			memcpy(dst, src, n * 4);
		return 0;
	case TT_F16:
		for (size_t i = 0; i < n; i++)
			wr_f16(b + 2 * i, src[i]);
		return 0;
	case TT_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h = f32_to_bf16(src[i]);
			memcpy(b + 2 * i, &h, 2);
		}
		return 0;
	case TT_Q8_0:
		q_q8_0(src, b, n / 32);
		return 0;
	case TT_Q4_0:
		q_q4_0(src, b, n / 32);
		return 0;
	case TT_Q2_K:
		q_q2_k(src, b, n / QK_K);
		return 0;
	case TT_Q3_K:
		q_q3_k(src, b, n / QK_K);
		return 0;
	case TT_Q4_K:
		q_q4_k_q5_k(src, b, n / QK_K, 0);
		return 0;
	case TT_Q5_K:
		q_q4_k_q5_k(src, b, n / QK_K, 1);
		return 0;
	case TT_Q6_K:
		q_q6_k(src, b, n / QK_K);
		return 0;
	case TT_IQ4_XS:
		q_iq4_xs(src, b, n / QK_K);
		return 0;
	case TT_IQ4_NL:
		q_iq4_nl(src, b, n / 32);
		return 0;
	case TT_Q4_1:
		q_q4_1_q5_1(src, b, n / 32, 0);
		return 0;
	case TT_Q5_1:
		q_q4_1_q5_1(src, b, n / 32, 1);
		return 0;
	case TT_Q5_0:
		q_q5_0(src, b, n / 32);
		return 0;
	}
	return -1;
}

int
tensor_quantize_matrix(uint32_t type, const float *src, int64_t rows, int64_t cols, void **ret_data, size_t *ret_bytes)
{
	size_t rb = tensor_type_row_bytes(type, (uint64_t)cols);
	uint8_t *dst;

	if (rb == 0 || rows <= 0)
		return PRIVAI_EINVAL;
	if ((dst = malloc(rb * (size_t)rows)) == NULL)
		return PRIVAI_ENOMEM;
	for (int64_t r = 0; r < rows; r++) {
		if (tensor_quantize_row(type, src + r * cols, dst + (size_t)r * rb, (size_t)cols) < 0) {
			free(dst);
			return PRIVAI_EINVAL;
		}
	}
	*ret_data = dst;
	*ret_bytes = rb * (size_t)rows;
	return PRIVAI_OK;
}
