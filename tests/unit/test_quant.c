/*
 * Weight types: half/bfloat conversions, hand-built blocks of every type
 * decoded against values worked out from the format definitions, quantize
 * then dequantize round trips within each type's error bound, and the SIMD
 * dot kernels against the portable ones.
 */
#include <assert.h>
#include <math.h>

#include "testlib.h"
#include "privai/tensor_type.h"
#include "kernels/cpu_dot.h"

static void
put16(uint8_t *p, float f)
{
	uint16_t h = f32_to_fp16(f);
	memcpy(p, &h, 2);
}

static void
test_halfs(void)
{
	CHECK(fp16_to_f32(0x3c00) == 1.0f && fp16_to_f32(0xc000) == -2.0f, "fp16 basics");
	CHECK(fp16_to_f32(0x0001) == ldexpf(1, -24), "fp16 smallest subnormal");
	CHECK(fp16_to_f32(0x7bff) == 65504.0f, "fp16 max");
	CHECK(isinf(fp16_to_f32(0x7c00)) && isnan(fp16_to_f32(0x7e00)), "fp16 inf/nan");
	int bad = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = fp16_to_f32((uint16_t)h);
		if (!isnan(f) && f32_to_fp16(f) != h)
			bad++;
	}
	CHECK(bad == 0, "fp16 -> f32 -> fp16 is the identity (%d mismatches)", bad);
	CHECK(f32_to_fp16(1.0f + ldexpf(1, -11)) == 0x3c00, "fp16 ties round to even");
	CHECK(f32_to_fp16(1e6f) == 0x7c00, "fp16 overflow -> inf");
	CHECK(bf16_to_f32(0x3f80) == 1.0f && f32_to_bf16(1.0f) == 0x3f80, "bf16 basics");
	CHECK(f32_to_bf16(1.00390625f) == 0x3f80, "bf16 tie rounds to even");
}

/* Hand-built blocks: each expected value is computed here from the format's
 * definition, one element at a time, independently of quant_dequant.c. */
static void
test_blocks(void)
{
	uint8_t b[256];
	float y[256];

	memset(b, 0, sizeof(b));
	put16(b, 0.5f);
	put16(b + 2, -1.0f);
	for (int j = 0; j < 16; j++)
		b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
	tensor_dequantize_row(TT_Q4_1, b, y, 32);
	CHECK(y[3] == 0.5f * 3 - 1 && y[16 + 3] == 0.5f * 12 - 1, "Q4_1 element values");

	memset(b, 0, sizeof(b));
	put16(b, 2.0f);
	uint32_t qh = (1u << 5) | (1u << 20); /* bit 5: element 5; bit 20: element 20 */
	memcpy(b + 2, &qh, 4);
	for (int j = 0; j < 16; j++)
		b[6 + j] = 0x33;
	tensor_dequantize_row(TT_Q5_0, b, y, 32);
	CHECK(y[5] == 2.0f * (3 + 16 - 16) && y[4] == 2.0f * (3 - 16) && y[20] == 2.0f * (3 + 16 - 16),
	      "Q5_0 high bits: %g %g %g", y[5], y[4], y[20]);

	memset(b, 0, sizeof(b));
	put16(b, 1.0f);
	put16(b + 2, 0.25f);
	memcpy(b + 4, &qh, 4);
	for (int j = 0; j < 16; j++)
		b[8 + j] = 0x21;
	tensor_dequantize_row(TT_Q5_1, b, y, 32);
	CHECK(y[5] == 1 + 16 + 0.25f && y[21] == 2 + 0.25f && y[20] == 2 + 16 + 0.25f, "Q5_1 values");

	memset(b, 0, sizeof(b));
	put16(b, 0.5f);
	b[2] = 0x0f; /* element 0 -> kvalues[15] = 113, element 16 -> kvalues[0] = -127 */
	tensor_dequantize_row(TT_IQ4_NL, b, y, 32);
	CHECK(y[0] == 0.5f * 113 && y[16] == 0.5f * -127 && y[1] == 0.5f * -127, "IQ4_NL values");

	/* Q2_K: scales[16], qs[64], d, dmin.  Sub-block 0 scale 3 min 1. */
	memset(b, 0, sizeof(b));
	b[0] = 0x13;
	b[16] = 0x02 | (0x01 << 2); /* element 0: q=2 (shift 0); element 32: q=1 (shift 2) */
	b[1] = 0x25;                /* sub-block 1 (elements 16..31) uses qs[16..31] */
	b[2] = 0x04;                /* sub-block 2 = elements 32..47: scale 4, min 0 */
	put16(b + 80, 1.0f);
	put16(b + 82, 0.5f);
	tensor_dequantize_row(TT_Q2_K, b, y, 256);
	CHECK(y[0] == 3 * 2 - 0.5f * 1 && y[32] == 4 * 1 && y[16] == -0.5f * 2, "Q2_K values %g %g %g", y[0], y[32],
	      y[16]);

	/* Q4_K: d, dmin, scales[12], qs[128]; sub-block 0 scale 2 min 3,
	 * sub-block 5 (j>=4 packing) scale 37 min 9. */
	memset(b, 0, sizeof(b));
	put16(b, 1.0f);
	put16(b + 2, 0.5f);
	b[4 + 0] = 2;
	b[4 + 4] = 3;
	b[4 + 9] = (uint8_t)((37 & 0xf) | ((9 & 0xf) << 4));
	b[4 + 1] |= (uint8_t)((37 >> 4) << 6);
	b[4 + 5] |= (uint8_t)((9 >> 4) << 6);
	b[16 + 0] = 0x07;      /* element 0: q=7 */
	b[16 + 64 + 1] = 0xa0; /* sub-block 5 = high nibbles of qs[64..95]: element 161 q=10 */
	tensor_dequantize_row(TT_Q4_K, b, y, 256);
	CHECK(y[0] == 2 * 7 - 1.5f && y[161] == 37 * 10 - 0.5f * 9, "Q4_K values %g %g", y[0], y[161]);

	/* Q5_K adds qh[32]: bit (2*pair) for the low half, (2*pair+1) for the high */
	memset(b, 0, sizeof(b));
	put16(b, 1.0f);
	put16(b + 2, 0.0f);
	b[4 + 0] = 1;
	b[4 + 1] = 1;
	b[16 + 3] = 0x01 | 0x02; /* element 3 and element 35 get +16 */
	b[48 + 3] = 0x21;        /* ql: element 3 low nibble 1, element 35 high nibble 2 */
	tensor_dequantize_row(TT_Q5_K, b, y, 256);
	CHECK(y[3] == 17 && y[35] == 18, "Q5_K values %g %g", y[3], y[35]);

	/* Q6_K: ql[128], qh[64], scales[16], d.  Element 0 and element 64. */
	memset(b, 0, sizeof(b));
	b[0] = 0x5 | (0x9 << 4);   /* element 0 low 4 bits 5; element 64 low 4 bits 9 */
	b[128] = 0x2 | (0x1 << 4); /* element 0 high bits 2 (+32); element 64 high bits 1 (+16) */
	b[192 + 0] = 3;
	b[192 + 4] = (uint8_t)-2;
	put16(b + 208, 0.5f);
	tensor_dequantize_row(TT_Q6_K, b, y, 256);
	CHECK(y[0] == 0.5f * 3 * (37 - 32) && y[64] == 0.5f * -2 * (25 - 32), "Q6_K values %g %g", y[0], y[64]);

	/* Q3_K: hmask[32], qs[64], scales[12], d.  All scales 32+1 = 33 -> 1. */
	memset(b, 0, sizeof(b));
	for (int i = 0; i < 8; i++)
		b[96 + i] = 0x11; /* low 4 bits of all 16 scales = 1 */
	for (int i = 8; i < 12; i++)
		b[96 + i] = 0xaa; /* high 2 bits = 2 -> 1 + 32 = 33 */
	b[32 + 0] = 0x3;          /* element 0: q = 3 */
	b[0] = 0x1;               /* hmask bit 0 of element 0 set: no -4 */
	put16(b + 108, 2.0f);
	tensor_dequantize_row(TT_Q3_K, b, y, 256);
	CHECK(y[0] == 2 * 1 * 3 && y[1] == 2 * 1 * (0 - 4), "Q3_K values %g %g", y[0], y[1]);
}

static void
test_round_trips(void)
{
	static const struct {
		uint32_t type;
		double bound; /* max relative RMS error on N(0,1) data */
	} rt[] = {
		{ TT_F16, 1e-3 },    { TT_BF16, 5e-3 }, { TT_Q8_0, 1e-2 },   { TT_Q6_K, 3e-2 },   { TT_Q4_0, 1.2e-1 },
		{ TT_Q4_K, 1.2e-1 }, { TT_Q5_K, 6e-2 }, { TT_Q3_K, 1.8e-1 }, { TT_Q2_K, 3.6e-1 }, { TT_IQ4_XS, 9e-2 },
		{ TT_Q4_1, 9e-2 },   { TT_Q5_0, 6e-2 }, { TT_Q5_1, 6e-2 },   { TT_IQ4_NL, 9e-2 },
	};
	enum { N = 4096 };
	static float x[N], y[N];
	static uint8_t q[N * 4];
	uint64_t s = 42;

	for (int i = 0; i < N; i++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		double u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		double u2 = (s >> 11) / 9007199254740992.0;
		x[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
	}
	for (size_t k = 0; k < sizeof(rt) / sizeof(rt[0]); k++) {
		CHECK(tensor_quantize_row(rt[k].type, x, q, N) == 0, "quantize %s", tensor_type_name(rt[k].type));
		tensor_dequantize_row(rt[k].type, q, y, N);
		double e = 0, n = 0;
		for (int i = 0; i < N; i++) {
			e += (x[i] - y[i]) * (x[i] - y[i]);
			n += x[i] * x[i];
		}
		double rel = sqrt(e / n);
		CHECK(rel <= rt[k].bound, "%s round trip error %.4f > %.4f", tensor_type_name(rt[k].type), rel,
		      rt[k].bound);
		printf("%s: round-trip relative RMS error %.4f (bound %.3f)\n", tensor_type_name(rt[k].type), rel,
		       rt[k].bound);
	}
	CHECK(tensor_quantize_row(TT_IQ2_XXS, x, q, N) < 0, "no quantizer for IQ2_XXS is reported");
	CHECK(tensor_type_row_bytes(TT_Q4_K, 100) == 0, "row not a whole number of blocks");
	CHECK(tensor_type_get(31) == NULL && tensor_type_get(1000) == NULL, "unknown type ids");
}

/* Q6_K and Q3_K rows widened in blocks of two 16-value halves, each with
 * its scale and sum (gemm_q6_k's operands): SIMD as scalar, and both the
 * dequantized weights. */
static void
test_widen_halves(uint32_t type, void (*simd)(const uint8_t *, uint8_t *, size_t, int32_t *, float *),
		  void (*ref)(const uint8_t *, uint8_t *, size_t, int32_t *, float *), const float *w, const char *name)
{
	enum { N = 2048, NB = N / 32 };
	static uint8_t wq[N], a[NB * 34], b[NB * 34];
	static float deq[N];
	int32_t wsa[2 * NB], wsb[2 * NB];
	float wda[2 * NB], wdb[2 * NB];
	int bad = 0, same = 1;

	tensor_quantize_row(type, w, wq, N);
	tensor_dequantize_row(type, wq, deq, N);
	simd(wq, a, NB, wsa, wda);
	ref(wq, b, NB, wsb, wdb);
	for (int k = 0; k < NB; k++)
		same &= memcmp(a + k * 34 + 2, b + k * 34 + 2, 32) == 0;
	CHECK(same && memcmp(wsa, wsb, sizeof(wsa)) == 0 && memcmp(wda, wdb, sizeof(wda)) == 0,
	      "%s widen %s as the scalar", name, tensor_type_name(type));
	for (int i = 0; i < N; i++) {
		int k = i / 32, q = (int8_t)b[k * 34 + 2 + i % 32];
		bad += fabsf(wdb[i / 16] * (float)q - deq[i]) > 1e-6f * fabsf(deq[i]) + 1e-6f;
	}
	for (int h = 0, s = 0; h < 2 * NB; h++, s = 0) {
		for (int i = 0; i < 16; i++)
			s += (int8_t)b[(h / 2) * 34 + 2 + (h % 2) * 16 + i];
		bad += -128 * s != wsb[h];
	}
	CHECK(bad == 0, "widened %s rows are the dequantized weights and their half sums (%d off)",
	      tensor_type_name(type), bad);
}

/* The prefill GEMM's widened rows: the SIMD widening writes what the
 * scalar one does, and both are the dequantized weights exactly. */
static void
test_widen(const struct cpu_kernels *simd, const float *w)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { N = 2048, NB = N / 32 };
	static uint8_t wq[N], a[NB * 34], b[NB * 34];
	static float deq[N];
	int16_t sa[NB], sb[NB];
	int32_t wsa[NB], wsb[NB];
	float wda[NB], wdb[NB], wma[NB], wmb[NB];
	int bad = 0;

	tensor_quantize_row(TT_Q4_0, w, wq, N);
	tensor_dequantize_row(TT_Q4_0, wq, deq, N);
	simd->widen_q4_0(wq, a, NB, sa);
	ref->widen_q4_0(wq, b, NB, sb);
	CHECK(memcmp(a, b, sizeof(a)) == 0 && memcmp(sa, sb, sizeof(sa)) == 0, "%s widen_q4_0 as the scalar",
	      simd->name);
	for (int i = 0; i < N; i++) {
		const uint8_t *blk = b + (i / 32) * 34;
		uint16_t h;
		memcpy(&h, blk, 2);
		bad += fp16_to_f32(h) * (float)(int8_t)blk[2 + i % 32] != deq[i];
	}
	for (int k = 0, s = 0; k < NB; k++, s = 0) {
		for (int i = 0; i < 32; i++)
			s += (int8_t)b[k * 34 + 2 + i];
		bad += s != sb[k];
	}
	CHECK(bad == 0, "widened Q4_0 rows are the dequantized weights and their sums (%d off)", bad);
	tensor_quantize_row(TT_Q4_K, w, wq, N);
	tensor_dequantize_row(TT_Q4_K, wq, deq, N);
	simd->widen_q4_k(wq, a, NB, wsa, wda, wma);
	ref->widen_q4_k(wq, b, NB, wsb, wdb, wmb);
	int same = 1;
	for (int k = 0; k < NB; k++)
		same &= memcmp(a + k * 34 + 2, b + k * 34 + 2, 32) == 0 && wsa[k] == wsb[k] && wda[k] == wdb[k] &&
			wma[k] == wmb[k];
	CHECK(same, "%s widen_q4_k as the scalar", simd->name);
	bad = 0;
	for (int i = 0; i < N; i++) {
		int k = i / 32, q = b[k * 34 + 2 + i % 32];
		float v = wdb[k] * (float)q - wmb[k];
		bad += fabsf(v - deq[i]) > 1e-6f * fabsf(deq[i]) + 1e-6f;
	}
	for (int k = 0, s = 0; k < NB; k++, s = 0) {
		for (int i = 0; i < 32; i++)
			s += b[k * 34 + 2 + i];
		bad += -128 * s != wsb[k];
	}
	CHECK(bad == 0, "widened Q4_K rows are the dequantized weights and their sums (%d off)", bad);
	tensor_quantize_row(TT_Q5_K, w, wq, N);
	tensor_dequantize_row(TT_Q5_K, wq, deq, N);
	simd->widen_q5_k(wq, a, NB, wsa, wda, wma);
	ref->widen_q5_k(wq, b, NB, wsb, wdb, wmb);
	same = 1;
	for (int k = 0; k < NB; k++)
		same &= memcmp(a + k * 34 + 2, b + k * 34 + 2, 32) == 0 && wsa[k] == wsb[k] && wda[k] == wdb[k] &&
			wma[k] == wmb[k];
	CHECK(same, "%s widen_q5_k as the scalar", simd->name);
	bad = 0;
	for (int i = 0; i < N; i++) {
		int k = i / 32, q = b[k * 34 + 2 + i % 32];
		bad += q > 31 || fabsf(wdb[k] * (float)q - wmb[k] - deq[i]) > 1e-6f * fabsf(deq[i]) + 1e-6f;
	}
	CHECK(bad == 0, "widened Q5_K rows are the dequantized weights (%d off)", bad);
	test_widen_halves(TT_Q6_K, simd->widen_q6_k, ref->widen_q6_k, w, simd->name);
	test_widen_halves(TT_Q3_K, simd->widen_q3_k, ref->widen_q3_k, w, simd->name);
	/* IQ4_XS: the levels, one scale and sum a block */
	tensor_quantize_row(TT_IQ4_XS, w, wq, N);
	tensor_dequantize_row(TT_IQ4_XS, wq, deq, N);
	simd->widen_iq4_xs(wq, a, NB, wsa, wda);
	ref->widen_iq4_xs(wq, b, NB, wsb, wdb);
	same = 1;
	for (int k = 0; k < NB; k++)
		same &= memcmp(a + k * 34 + 2, b + k * 34 + 2, 32) == 0 && wsa[k] == wsb[k] && wda[k] == wdb[k];
	CHECK(same, "%s widen_iq4_xs as the scalar", simd->name);
	bad = 0;
	for (int i = 0; i < N; i++)
		bad += wdb[i / 32] * (float)(int8_t)b[(i / 32) * 34 + 2 + i % 32] != deq[i];
	for (int k = 0, s = 0; k < NB; k++, s = 0) {
		for (int i = 0; i < 32; i++)
			s += (int8_t)b[k * 34 + 2 + i];
		bad += -128 * s != wsb[k];
	}
	CHECK(bad == 0, "widened IQ4_XS rows are the dequantized weights and their sums (%d off)", bad);
}

/* Q4_1, Q5_0, Q5_1 and IQ4_NL: the dot (SIMD and scalar) is the float dot
 * of the dequantized operands, and exactly the sum on a block at the
 * extremes (every value at its largest level, activations at +-127); the
 * widened rows (SIMD as scalar) are the dequantized weights, with their
 * sums. */
static void
test_legacy(const struct cpu_kernels *simd)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	static const uint32_t types[] = { TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_NL };
	enum { N = 2048, NB = N / 32 };
	static float x[N], w[N], wf[N], xf[N];
	static uint8_t wq[NB * 24], a[NB * 34], b[NB * 34];
	static struct block_q8 xr[NB];
	int32_t wsa[NB], wsb[NB];
	float wda[NB], wdb[NB], wma[NB], wmb[NB];

	for (int i = 0; i < N; i++) {
		x[i] = sinf((float)i * 0.37f) * (i / 32 == 5 ? 40.0f : 3.0f);
		w[i] = cosf((float)i * 0.11f) + 0.3f * sinf((float)i * 0.05f) + 0.2f;
	}
	ref->quantize_q8(x, xr, N);
	for (int i = 0; i < N; i++)
		xf[i] = xr[i / 32].d * xr[i / 32].q[i % 32];
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		uint32_t type = types[k];
		const char *name = tensor_type_name(type);
		float (*fr)(const void *, const struct block_q8 *, size_t) = type == TT_Q4_1   ? ref->dot_q4_1
									     : type == TT_Q5_0 ? ref->dot_q5_0
									     : type == TT_Q5_1 ? ref->dot_q5_1
											       : ref->dot_iq4_nl;
		float (*fs)(const void *, const struct block_q8 *, size_t) = type == TT_Q4_1   ? simd->dot_q4_1
									     : type == TT_Q5_0 ? simd->dot_q5_0
									     : type == TT_Q5_1 ? simd->dot_q5_1
											       : simd->dot_iq4_nl;
		int offsets = type == TT_Q4_1 || type == TT_Q5_1;
		CHECK(tensor_quantize_row(type, w, wq, N) == 0, "quantize %s", name);
		tensor_dequantize_row(type, wq, wf, N);
		float want = ref->dot_f32(wf, xf, N), r = fr(wq, xr, NB), v = fs(wq, xr, NB);
		CHECK(fabsf(r - want) <= 1e-4f * fabsf(want) + 1e-3f, "%s scalar dot %g vs float %g", name, r, want);
		CHECK(fabsf(v - want) <= 1e-4f * fabsf(want) + 1e-3f, "%s %s dot %g vs float %g", name, simd->name, v,
		      want);
		/* a block at the extremes: every nibble and fifth bit set, d = m = 1 */
		uint8_t blk[24];
		struct block_q8 xe = { 1.0f, 0, { 0 } };
		uint16_t one = f32_to_fp16(1.0f);
		memset(blk, 0xff, sizeof(blk));
		memcpy(blk, &one, 2);
		if (offsets)
			memcpy(blk + 2, &one, 2);
		for (int j = 0; j < 32; j++) {
			xe.q[j] = (int8_t)(j % 3 ? 127 : -127);
			xe.sum += xe.q[j];
		}
		float wblk[32];
		double exact = 0;
		tensor_dequantize_row(type, blk, wblk, 32);
		for (int j = 0; j < 32; j++)
			exact += (double)wblk[j] * xe.q[j];
		r = fr(blk, &xe, 1);
		v = fs(blk, &xe, 1);
		CHECK(r == (float)exact && v == (float)exact, "%s at the extremes: scalar %g, %s %g, exact %g", name, r,
		      simd->name, v, exact);
		/* widened for the GEMM */
		simd->widen_legacy(type, wq, a, NB, wsa, wda, wma);
		ref->widen_legacy(type, wq, b, NB, wsb, wdb, wmb);
		int same = 1, bad = 0;
		for (int i = 0; i < NB; i++)
			same &= memcmp(a + i * 34 + 2, b + i * 34 + 2, 32) == 0 && wsa[i] == wsb[i] &&
				wda[i] == wdb[i] && (!offsets || wma[i] == wmb[i]);
		CHECK(same, "%s widen %s as the scalar", simd->name, name);
		for (int i = 0; i < N; i++) {
			float got = wdb[i / 32] * (float)(int8_t)b[(i / 32) * 34 + 2 + i % 32] -
				    (offsets ? wmb[i / 32] : 0);
			bad += fabsf(got - wf[i]) > 1e-6f * fabsf(wf[i]) + 1e-6f;
		}
		for (int i = 0, sum = 0; i < NB; i++, sum = 0) {
			for (int j = 0; j < 32; j++)
				sum += (int8_t)b[i * 34 + 2 + j];
			bad += -128 * sum != wsb[i];
		}
		CHECK(bad == 0, "widened %s rows are the dequantized weights and their sums (%d off)", name, bad);
	}
}

static void
test_kernels(const struct cpu_kernels *simd)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { N = 2048 };
	static float x[N], w[N];
	static uint8_t wq[N * 2];
	static struct block_q8 xs[N / 32], xr[N / 32];

	for (int i = 0; i < N; i++) {
		x[i] = sinf((float)i * 0.37f) * 3;
		w[i] = cosf((float)i * 0.11f);
	}
	float a = simd->dot_f32(x, w, N), b = ref->dot_f32(x, w, N);
	CHECK(fabsf(a - b) <= 1e-3f * fabsf(b) + 1e-3f, "%s dot_f32 %g vs %g", simd->name, a, b);
	simd->quantize_q8(x, xs, N);
	ref->quantize_q8(x, xr, N);
	int same = 1;
	for (int i = 0; i < N / 32; i++)
		same &= xs[i].d == xr[i].d && xs[i].sum == xr[i].sum && memcmp(xs[i].q, xr[i].q, 32) == 0;
	CHECK(same, "%s quantize_q8 equals the scalar version", simd->name);
	tensor_quantize_row(TT_Q8_0, w, wq, N);
	a = simd->dot_q8_0(wq, xr, N / 32);
	b = ref->dot_q8_0(wq, xr, N / 32);
	CHECK(fabsf(a - b) <= 1e-4f * fabsf(b) + 1e-3f, "%s dot_q8_0 %g vs %g", simd->name, a, b);
	tensor_quantize_row(TT_Q4_0, w, wq, N);
	a = simd->dot_q4_0(wq, xr, N / 32);
	b = ref->dot_q4_0(wq, xr, N / 32);
	CHECK(fabsf(a - b) <= 1e-4f * fabsf(b) + 1e-3f, "%s dot_q4_0 %g vs %g", simd->name, a, b);
	/* and the integer dot really is the dot of the dequantized values */
	float wf[N], xf[N];
	tensor_dequantize_row(TT_Q4_0, wq, wf, N);
	for (int i = 0; i < N; i++)
		xf[i] = xr[i / 32].d * xr[i / 32].q[i % 32];
	b = ref->dot_f32(wf, xf, N);
	CHECK(fabsf(a - b) <= 1e-3f * fabsf(b) + 1e-2f, "dot_q4_0 %g vs float %g", a, b);
	/* k-quants: SIMD = scalar = float dot of the dequantized operands */
	static const struct {
		uint32_t type;
		const char *name;
	} kq[] = { { TT_Q4_K, "Q4_K" }, { TT_Q5_K, "Q5_K" }, { TT_Q6_K, "Q6_K" } };
	for (int i = 0; i < 3; i++) {
		float (*fs)(const void *, const struct block_q8 *, size_t) = i == 0   ? simd->dot_q4_k
									     : i == 1 ? simd->dot_q5_k
										      : simd->dot_q6_k;
		float (*fr)(const void *, const struct block_q8 *, size_t) = i == 0   ? ref->dot_q4_k
									     : i == 1 ? ref->dot_q5_k
										      : ref->dot_q6_k;
		tensor_quantize_row(kq[i].type, w, wq, N);
		tensor_dequantize_row(kq[i].type, wq, wf, N);
		float want = ref->dot_f32(wf, xf, N), r = fr(wq, xr, N / 32), v = fs(wq, xr, N / 32);
		CHECK(fabsf(r - want) <= 1e-3f * fabsf(want) + 1e-2f, "%s scalar dot %g vs float %g", kq[i].name, r,
		      want);
		CHECK(fabsf(v - want) <= 1e-3f * fabsf(want) + 1e-2f, "%s %s dot %g vs float %g", kq[i].name,
		      simd->name, v, want);
	}
	uint16_t h[37];
	float f1[37], f2[37];
	for (int i = 0; i < 37; i++)
		h[i] = f32_to_fp16((float)i * 0.3f - 5);
	simd->f16_to_f32(h, f1, 37);
	ref->f16_to_f32(h, f2, 37);
	CHECK(memcmp(f1, f2, sizeof(f1)) == 0, "%s f16_to_f32", simd->name);
	uint16_t wh[N];
	for (int i = 0; i < N; i++)
		wh[i] = f32_to_fp16(w[i]);
	a = simd->dot_f16(wh, x, N - 3); /* an odd length exercises the tail */
	b = ref->dot_f16(wh, x, N - 3);
	CHECK(fabsf(a - b) <= 1e-3f * fabsf(b) + 1e-3f, "%s dot_f16 %g vs %g", simd->name, a, b);
	for (int i = 0; i < N; i++)
		wh[i] = f32_to_bf16(w[i]);
	a = simd->dot_bf16(wh, x, N - 3);
	b = ref->dot_bf16(wh, x, N - 3);
	CHECK(fabsf(a - b) <= 1e-3f * fabsf(b) + 1e-3f, "%s dot_bf16 %g vs %g", simd->name, a, b);
	simd->bf16_to_f32(wh, f1, 37);
	ref->bf16_to_f32(wh, f2, 37);
	CHECK(memcmp(f1, f2, sizeof(f1)) == 0, "%s bf16_to_f32", simd->name);
	test_widen(simd, w);
}

/* Q8_K activations of scale 1 at +127 and -127 in alternating runs of
 * `run` values, with their 16-value sums. */
static void
q8k_extremes(struct block_q8k *xe, int run)
{
	xe->d = 1.0f;
	for (int l = 0; l < 256; l++)
		xe->q[l] = (int8_t)((l / run) % 2 ? -127 : 127);
	for (int j = 0; j < 16; j++) {
		int sum = 0;
		for (int l = 0; l < 16; l++)
			sum += xe->q[16 * j + l];
		xe->bsum[j] = (int16_t)sum;
	}
}

/* The exact dot of one super-block of `type` with xe, in double. */
static double
exact_block_dot(uint32_t type, const uint8_t *blk, const struct block_q8k *xe)
{
	float wblk[256];
	double exact = 0;

	tensor_dequantize_row(type, blk, wblk, 256);
	for (int l = 0; l < 256; l++)
		exact += (double)wblk[l] * xe->q[l];
	return exact;
}

/* A decode batch of Q6_K: dots_q6_k_q8k for 1..8 tokens gives each token
 * the bits dot_q6_k_q8k gives it alone (the sums are exact, the float
 * steps the same), the last token at the extremes. */
static void
test_q6k_dots(const struct cpu_kernels *simd, const uint8_t *wq, const float *x, int n)
{
	enum { NT = 8, NSB = 2048 / 256 };
	static struct block_q8k xt[NT * NSB];
	static float xs[2048];
	int bad = 0;

	if (simd->dots_q6_k_q8k == NULL || n != 2048) {
		SKIP("%s: no Q6_K batch dot", simd->name);
		return;
	}
	for (int t = 0; t < NT; t++) {
		for (int i = 0; i < n; i++)
			xs[i] = x[(i + 97 * t) % n] * (1.0f + 0.5f * (float)t);
		simd->quantize_q8k(xs, xt + t * NSB, (size_t)n);
	}
	q8k_extremes(&xt[(NT - 1) * NSB], 64);
	for (int nt = 1; nt <= NT; nt++) {
		float y[NT * 3];
		for (int i = 0; i < NT * 3; i++)
			y[i] = NAN;
		simd->dots_q6_k_q8k(wq, xt + (NT - nt) * NSB, NSB, nt, y, 3);
		for (int t = 0; t < nt; t++) {
			float one = simd->dot_q6_k_q8k(wq, xt + (NT - nt + t) * NSB, NSB);
			bad += memcmp(&one, &y[3 * t], sizeof(one)) != 0;
		}
	}
	CHECK(bad == 0, "%s Q6_K batch dot for 1..%d tokens gives each token its own dot's bits (%d differ)",
	      simd->name, NT, bad);
}

/* F16 and BF16 prompts pack their panels straight from the rows: the
 * panel pack_f16_panel (pack_bf16_panel) writes is, bit for bit, the one
 * the rows converted to float and packed give, full and partial in rows
 * and columns. */
static void
test_pack_half_panel(const struct cpu_kernels *k, int bf16)
{
	enum { LDW = 300 };
	static const int shapes[][2] = {
		{ GEMM_PK_ROWS, GEMM_PK_COLS }, { 17, 37 }, { 1, 1 }, { GEMM_PK_ROWS, 16 }, { 33, 255 }
	};
	static uint16_t w[GEMM_PK_ROWS * LDW];
	static float rows[GEMM_PK_ROWS * GEMM_PK_COLS], want[GEMM_PK_ROWS * GEMM_PK_COLS],
		got[GEMM_PK_ROWS * GEMM_PK_COLS];
	int bad = 0;

	void (*pack)(const uint16_t *, size_t, int, size_t, float *) = bf16 ? k->pack_bf16_panel : k->pack_f16_panel;
	void (*to_f32)(const uint16_t *, float *, size_t) = bf16 ? k->bf16_to_f32 : k->f16_to_f32;
	const char *type = bf16 ? "BF16" : "F16";

	if (pack == NULL) {
		SKIP("%s packs no %s panels", k->name, type);
		return;
	}
	for (int i = 0; i < GEMM_PK_ROWS * LDW; i++) {
		float v = sinf((float)i * 0.021f) * 5.0f;
		w[i] = bf16 ? f32_to_bf16(v) : f32_to_fp16(v);
	}
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int nr = shapes[s][0];
		size_t kc = (size_t)shapes[s][1];
		for (int r = 0; r < nr; r++)
			to_f32(w + (size_t)r * LDW + 3, rows + (size_t)r * GEMM_PK_COLS, kc);
		memset(want, 0x7f, sizeof(want));
		memset(got, 0x7f, sizeof(got));
		k->pack_f32_panel(rows, GEMM_PK_COLS, nr, kc, want);
		pack(w + 3, LDW, nr, kc, got);
		bad += memcmp(want, got, kc * GEMM_PK_ROWS * sizeof(float)) != 0;
	}
	CHECK(bad == 0, "%s %s panels packed from the rows equal the converted rows packed (%d shapes differ)", k->name,
	      type, bad);
}

/* F16 and bfloat16 decode four rows a pass: dot4_f16 and dot4_bf16_bf16
 * give each row the bits the one-row dot gives it, on lengths with and
 * without a tail past the vectors (and past bfloat16's 128-value steps),
 * rows not packed tight (ldw > n). */
static void
test_dot4(const struct cpu_kernels *simd)
{
	static const size_t ns[] = { 8192, 2048, 300, 160, 37, 5 };
	enum { LDW = 8200, NN = sizeof(ns) / sizeof(ns[0]) };
	static uint16_t wh[4 * LDW], wb[4 * LDW], xb[LDW];
	static float x[LDW];
	int bad_h = 0, bad_b = 0;

	for (int i = 0; i < 4 * LDW; i++) {
		float v = sinf((float)i * 0.013f) * (1.0f + (float)(i % 7));
		wh[i] = f32_to_fp16(v);
		wb[i] = f32_to_bf16(v);
	}
	for (int i = 0; i < LDW; i++) {
		x[i] = cosf((float)i * 0.29f) * 3.0f;
		xb[i] = f32_to_bf16(x[i]);
	}
	for (size_t ni = 0; ni < NN; ni++)
		for (int r = 0; r < 4; r++) {
			float y[4], one;
			if (simd->dot4_f16 != NULL) {
				simd->dot4_f16(wh, LDW, x, ns[ni], y);
				one = simd->dot_f16(wh + (size_t)r * LDW, x, ns[ni]);
				bad_h += memcmp(&one, &y[r], sizeof(one)) != 0;
			}
			if (simd->dot4_bf16_bf16 != NULL) {
				simd->dot4_bf16_bf16(wb, LDW, xb, ns[ni], y);
				one = simd->dot_bf16_bf16(wb + (size_t)r * LDW, xb, ns[ni]);
				bad_b += memcmp(&one, &y[r], sizeof(one)) != 0;
			}
		}
	if (simd->dot4_f16 == NULL)
		SKIP("%s: no four-row F16 dot", simd->name);
	else
		CHECK(bad_h == 0, "%s four-row F16 dot gives each row its own dot's bits (%d of %d differ)", simd->name,
		      bad_h, 4 * NN);
	if (simd->dot4_bf16_bf16 == NULL && simd->dot_bf16_bf16 != NULL)
		SKIP("%s: no four-row bfloat16 dot", simd->name);
	else if (simd->dot4_bf16_bf16 != NULL)
		CHECK(bad_b == 0, "%s four-row bfloat16 dot gives each row its own dot's bits (%d of %d differ)",
		      simd->name, bad_b, 4 * NN);
}

/* Q6_K decode on Q8_K activations: quantizing equals the scalar version,
 * the dot equals the scalar one and the float dot of the dequantized
 * operands, on ordinary rows and on a block at every extreme (q = 63 and
 * 0, scales 127 and -128, activations at +-127) where an int16 step of
 * the SIMD sum would overflow if the bound were wrong. */
static void
test_q8k(const struct cpu_kernels *simd)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { N = 2048 };
	static float x[N], w[N], wf[N], xf[N];
	static uint8_t wq[N / 256 * 210];
	static struct block_q8k xs[N / 256], xr[N / 256];

	for (int i = 0; i < N; i++) {
		/* one block of large values, to vary the per-256 scale */
		x[i] = sinf((float)i * 0.37f) * (i / 256 == 3 ? 40.0f : 3.0f);
		w[i] = cosf((float)i * 0.11f);
	}
	simd->quantize_q8k(x, xs, N);
	ref->quantize_q8k(x, xr, N);
	int same = 1, sums = 1;
	for (int b = 0; b < N / 256; b++) {
		same &= xs[b].d == xr[b].d && memcmp(xs[b].q, xr[b].q, 256) == 0 &&
			memcmp(xs[b].bsum, xr[b].bsum, sizeof(xr[b].bsum)) == 0;
		for (int j = 0; j < 16; j++) {
			int sum = 0;
			for (int l = 0; l < 16; l++)
				sum += xr[b].q[16 * j + l];
			sums &= sum == xr[b].bsum[j];
		}
	}
	CHECK(same, "%s quantize_q8k equals the scalar version", simd->name);
	CHECK(sums, "quantize_q8k's 16-value sums");
	tensor_quantize_row(TT_Q6_K, w, wq, N);
	tensor_dequantize_row(TT_Q6_K, wq, wf, N);
	for (int i = 0; i < N; i++)
		xf[i] = xr[i / 256].d * xr[i / 256].q[i % 256];
	float want = ref->dot_f32(wf, xf, N), r = ref->dot_q6_k_q8k(wq, xr, N / 256),
	      v = simd->dot_q6_k_q8k(wq, xr, N / 256);
	CHECK(fabsf(r - want) <= 1e-4f * fabsf(want) + 1e-3f, "Q6_K x Q8_K scalar dot %g vs float %g", r, want);
	CHECK(fabsf(v - want) <= 1e-4f * fabsf(want) + 1e-3f, "Q6_K x Q8_K %s dot %g vs float %g", simd->name, v, want);
	/* the extremes: each quarter of the block a different sign pattern */
	uint8_t blk[210];
	struct block_q8k xe;
	memset(blk, 0xff, 192);     /* every q = 63 */
	memset(blk + 64, 0x00, 64); /* second half's low nibbles: q = 48 */
	for (int j = 0; j < 16; j++)
		blk[192 + j] = (uint8_t)(j % 2 ? -128 : 127);
	uint16_t one = f32_to_fp16(1.0f);
	memcpy(blk + 208, &one, 2);
	q8k_extremes(&xe, 64);
	double exact = exact_block_dot(TT_Q6_K, blk, &xe);
	r = ref->dot_q6_k_q8k(blk, &xe, 1);
	v = simd->dot_q6_k_q8k(blk, &xe, 1);
	CHECK(r == (float)exact && v == (float)exact, "Q6_K x Q8_K at the extremes: scalar %g, %s %g, exact %g", r,
	      simd->name, v, exact);
	test_q6k_dots(simd, wq, x, N);
}

/* A super-block of `type` at its extremes, d (and dmin) 1: Q4_K and Q5_K
 * every q, 6-bit scale and min at its largest; Q3_K values 7 and 0 under
 * scales -32 and 31; Q2_K every value, scale and min at 3, 15 and 15;
 * IQ4_XS the levels -127 and 113 under scales -32 and 31. */
static void
extreme_block(uint32_t type, uint8_t *blk)
{
	uint16_t one = f32_to_fp16(1.0f);

	if (type == TT_Q4_K || type == TT_Q5_K) {
		memset(blk, 0xff, 176);
		memcpy(blk, &one, 2);
		memcpy(blk + 2, &one, 2);
	} else if (type == TT_IQ4_XS) {
		memcpy(blk, &one, 2);
		blk[2] = blk[3] = 0xcc;     /* the high bits of the scales: odd 3, even 0 */
		memset(blk + 4, 0xf0, 4);   /* and the low: odd 15, even 0 */
		memset(blk + 8, 0x0f, 64);  /* the first half: levels 113 then -127 */
		memset(blk + 72, 0x00, 64); /* the second: -127 */
	} else if (type == TT_Q3_K) {
		memset(blk, 0x0f, 32);       /* hmask: the first half's values 4..7, the second's 0..3 */
		memset(blk + 32, 0xff, 32);  /* first half: u = 7 */
		memset(blk + 64, 0x00, 32);  /* second half: u = 0 */
		for (int j = 0; j < 12; j++) /* odd scales 63 (31), even 0 (-32) */
			blk[96 + j] = (uint8_t)(j % 2 ? 0xff : 0x00);
		memcpy(blk + 108, &one, 2);
	} else { /* Q2_K */
		memset(blk, 0xff, 80);
		memcpy(blk + 80, &one, 2);
		memcpy(blk + 82, &one, 2);
	}
}

/* The K-quants' and IQ4_XS's decode on Q8_K activations (Q6_K has its
 * own test): the dot equals the float dot of the dequantized operands,
 * scalar and SIMD, on ordinary rows and on a block at the extremes
 * (extreme_block, activations at +-127), where an int16 step of the SIMD
 * sum would overflow if its bound were wrong; there the integer sums are
 * exact (Q4_K and Q5_K within 1e-6: their mins are a second float term). */
static void
test_q8k_dots(const struct cpu_kernels *simd)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	const struct {
		uint32_t type;
		float (*fr)(const void *, const struct block_q8k *, size_t);
		float (*fs)(const void *, const struct block_q8k *, size_t);
	} dots[] = {
		{ TT_Q4_K, ref->dot_q4_k_q8k, simd->dot_q4_k_q8k },
		{ TT_Q5_K, ref->dot_q5_k_q8k, simd->dot_q5_k_q8k },
		{ TT_Q2_K, ref->dot_q2_k_q8k, simd->dot_q2_k_q8k },
		{ TT_Q3_K, ref->dot_q3_k_q8k, simd->dot_q3_k_q8k },
		{ TT_IQ4_XS, ref->dot_iq4_xs_q8k, simd->dot_iq4_xs_q8k },
	};
	enum { N = 2048 };
	static float x[N], w[N], wf[N], xf[N];
	static uint8_t wq[N / 256 * 176];
	static struct block_q8k xr[N / 256];

	for (int i = 0; i < N; i++) {
		x[i] = sinf((float)i * 0.37f) * (i / 256 == 3 ? 40.0f : 3.0f);
		w[i] = cosf((float)i * 0.11f) + 0.3f * sinf((float)i * 0.05f);
	}
	ref->quantize_q8k(x, xr, N);
	for (int i = 0; i < N; i++)
		xf[i] = xr[i / 256].d * xr[i / 256].q[i % 256];
	for (size_t k = 0; k < sizeof(dots) / sizeof(dots[0]); k++) {
		uint32_t type = dots[k].type;
		const char *name = tensor_type_name(type);
		tensor_quantize_row(type, w, wq, N);
		tensor_dequantize_row(type, wq, wf, N);
		float want = ref->dot_f32(wf, xf, N), r = dots[k].fr(wq, xr, N / 256), v = dots[k].fs(wq, xr, N / 256);
		CHECK(fabsf(r - want) <= 1e-4f * fabsf(want) + 1e-3f, "%s x Q8_K scalar dot %g vs float %g", name, r,
		      want);
		CHECK(fabsf(v - want) <= 1e-4f * fabsf(want) + 1e-3f, "%s x Q8_K %s dot %g vs float %g", name,
		      simd->name, v, want);
		uint8_t blk[176];
		struct block_q8k xe;
		extreme_block(type, blk);
		q8k_extremes(&xe, 48);
		double exact = exact_block_dot(type, blk, &xe);
		double tol = type == TT_Q4_K || type == TT_Q5_K ? 1e-6 * fabs(exact) : 0;
		r = dots[k].fr(blk, &xe, 1);
		v = dots[k].fs(blk, &xe, 1);
		CHECK(fabs(r - exact) <= tol && fabs(v - exact) <= tol,
		      "%s x Q8_K at the extremes: scalar %g, %s %g, exact %g", name, r, simd->name, v, exact);
	}
}

/* The weights (rows x cols floats) and nt tokens' activations, as floats
 * and in Q8_K, the repacked K-quant tests share. */
static void
group_inputs(float *w, int rows, int cols, float *x, int nt, struct block_q8k *xk)
{
	for (int i = 0; i < rows * cols; i++)
		w[i] = sinf((float)i * 0.71f) * (1 + (float)(i % 7)) + 0.5f * cosf((float)i * 0.013f);
	for (int i = 0; i < nt * cols; i++)
		x[i] = cosf((float)i * 0.3f) * (2 + (float)(i / cols));
	for (int t = 0; t < nt; t++)
		cpu_kernels_scalar()->quantize_q8k(x + t * cols, xk + t * (cols / 256), (size_t)cols);
}

/* A group kernel and its scalar reference against each row's own dot
 * (row_dot on the file's rows, row_bytes apart) for every token count
 * 1..GROUP_NT, all groups in one call as a thread's share is; each token
 * alone must give the bits it gives in a batch. */
enum { GROUP_ROWS = 24, GROUP_COLS = 512, GROUP_NSB = GROUP_COLS / 256, GROUP_NT = 8 };
typedef void (*group_gemm_fn)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			      size_t ldy);
static void
check_group_kernel(const char *what, group_gemm_fn gemm, group_gemm_fn scalar,
		   float (*row_dot)(const void *, const struct block_q8k *, size_t), const uint8_t *wq,
		   size_t row_bytes, const uint8_t *packed, const struct block_q8k *xk)
{
	int bad = 0, bad_alone = 0;

	for (int nt = 1; nt <= GROUP_NT; nt++) {
		float y[GROUP_NT * GROUP_ROWS], ys[GROUP_NT * GROUP_ROWS], y1[GROUP_ROWS];
		gemm(packed, GROUP_ROWS / 8, xk, GROUP_NSB, nt, y, GROUP_ROWS);
		scalar(packed, GROUP_ROWS / 8, xk, GROUP_NSB, nt, ys, GROUP_ROWS);
		for (int t = 0; t < nt; t++) {
			gemm(packed, GROUP_ROWS / 8, xk + t * GROUP_NSB, GROUP_NSB, 1, y1, GROUP_ROWS);
			bad_alone += memcmp(y1, y + t * GROUP_ROWS, sizeof(y1)) != 0;
			for (int r = 0; r < GROUP_ROWS; r++) {
				float d = row_dot(wq + (size_t)r * row_bytes, xk + t * GROUP_NSB, GROUP_NSB);
				bad += fabsf(y[t * GROUP_ROWS + r] - d) > 1e-5f * fabsf(d) + 1e-4f ||
				       fabsf(ys[t * GROUP_ROWS + r] - d) > 1e-5f * fabsf(d) + 1e-4f;
			}
		}
	}
	CHECK(bad == 0, "%s group kernel (and scalar) for 1..%d tokens equals the per-row dot: %d off", what, GROUP_NT,
	      bad);
	CHECK(bad_alone == 0, "%s group kernel: a token alone gives the bits it gives in a batch (%d differ)", what,
	      bad_alone);
}

static void
gemm_q4_kx8_ref(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy)
{
	gemm_kx8_scalar(grp, ng, x, nsb, nt, 0, y, ldy);
}

static void
gemm_q5_kx8_ref(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy)
{
	gemm_kx8_scalar(grp, ng, x, nsb, nt, 1, y, ldy);
}

/* The K-quant groups' kernels on pairs of tokens against the same
 * groups' kernel a token a lane, for 2..GROUP_NT tokens: how many passes
 * differ in a bit or write past their tokens. */
typedef void (*kpairs_gemm_fn)(const uint8_t *, int, const struct q8k_pair *, size_t, int, float *, size_t);
static int
kpairs_differ(kpairs_gemm_fn pairs, group_gemm_fn gemm, const uint8_t *packed, const struct block_q8k *xk)
{
	static struct q8k_pair xp[GROUP_NT / 2 * GROUP_NSB];
	float y[GROUP_NT * GROUP_ROWS], ys[GROUP_NT * GROUP_ROWS];
	int bad = 0;

	for (int nt = 2; nt <= GROUP_NT; nt++) {
		for (int i = 0; i < GROUP_NT * GROUP_ROWS; i++)
			y[i] = ys[i] = -7.0f;
		q8k_pair_pack(xk, nt, GROUP_NSB, xp);
		pairs(packed, GROUP_ROWS / 8, xp, GROUP_NSB, nt, y, GROUP_ROWS);
		gemm(packed, GROUP_ROWS / 8, xk, GROUP_NSB, nt, ys, GROUP_ROWS);
		bad += memcmp(y, ys, sizeof(y)) != 0;
	}
	return bad;
}

/* Q4_K and Q5_K repacked 8 rows to a group: rows read back are the
 * file's, the kernel's repack equals the scalar one, and the group dot
 * (SIMD and scalar) equals each row's dot on Q8_K activations; 16 rows of
 * 2 super-blocks, repacked in two calls as threads do it. */
static void
test_kx8(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { ROWS = GROUP_ROWS, COLS = GROUP_COLS, NSB = GROUP_NSB, NT = GROUP_NT };
	static float w[ROWS * COLS], x[NT * COLS];
	static uint8_t wq[ROWS * NSB * 176], packed[ROWS * NSB * 176], again[ROWS * NSB * 176];
	static struct block_q8k xk[NT * NSB];

	if (k->gemm_q4_kx8 == NULL || k->gemm_q5_kx8 == NULL) {
		SKIP("%s: no repacked Q4_K/Q5_K kernels", k->name);
		return;
	}
	group_inputs(w, ROWS, COLS, x, NT, xk);
	for (int five = 0; five < 2; five++) {
		uint32_t type = five ? TT_Q5_K : TT_Q4_K;
		size_t sb = five ? 176 : 144, bytes = ROWS * NSB * sb;
		void (*gemm)(const uint8_t *, int, const struct block_q8k *, size_t, int, float *, size_t) =
			five ? k->gemm_q5_kx8 : k->gemm_q4_kx8;
		int bad_row = 0;
		tensor_quantize_row(type, w, wq, ROWS * COLS);
		kx8_repack(wq, NSB * sb, 0, 1, NSB, five, packed);
		kx8_repack(wq, NSB * sb, 1, ROWS / 8, NSB, five, packed);
		CHECK(memcmp(wq, packed, bytes) != 0, "the repacked %s layout differs from the file's",
		      tensor_type_name(type));
		k->repack_kx8(wq, NSB * sb, 1, ROWS / 8, NSB, five, again);
		k->repack_kx8(wq, NSB * sb, 0, 1, NSB, five, again);
		CHECK(memcmp(again, packed, bytes) == 0, "%s repack_kx8 equals the scalar repack (%s)", k->name,
		      tensor_type_name(type));
		for (int r = 0; r < ROWS; r++) {
			float row[COLS], deq[COLS];
			kx8_dequantize_row(packed + (size_t)(r / 8) * NSB * KX8_BLOCK(five), NSB, r % 8, five, row);
			tensor_dequantize_row(type, wq + (size_t)r * NSB * sb, deq, COLS);
			bad_row += memcmp(row, deq, sizeof(row)) != 0;
		}
		CHECK(bad_row == 0, "%s rows read back from the repacked groups are the file's rows (%d differ)",
		      tensor_type_name(type), bad_row);
		char what[64];
		snprintf(what, sizeof(what), "%s %s", k->name, tensor_type_name(type));
		check_group_kernel(what, gemm, five ? gemm_q5_kx8_ref : gemm_q4_kx8_ref,
				   five ? ref->dot_q5_k_q8k : ref->dot_q4_k_q8k, wq, NSB * sb, packed, xk);
		kpairs_gemm_fn pairs = five ? k->gemm_q5_kx8_pairs : k->gemm_q4_kx8_pairs;
		int bad;
		if (pairs != NULL)
			CHECK((bad = kpairs_differ(pairs, gemm, packed, xk)) == 0,
			      "%s on pairs of tokens for 2..%d tokens gives the group kernel's bits: %d passes differ",
			      what, GROUP_NT, bad);
	}
}

/* Q6_K repacked 8 rows to a group, as test_kx8: rows read back are the
 * file's, and the group kernel (SIMD and scalar) equals each row's dot on
 * Q8_K activations for 1..8 tokens, each token alone giving the bits it
 * gives in a batch.  Then the extremes, where an int16 pair sum would
 * saturate: q = 63 and activations of 127 and -127. */
static void
test_q6x8(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { ROWS = GROUP_ROWS, COLS = GROUP_COLS, NSB = GROUP_NSB, NT = GROUP_NT, SB = 210 };
	static float w[ROWS * COLS], x[NT * COLS];
	static uint8_t wq[ROWS * NSB * SB], packed[ROWS * NSB * SB];
	static struct block_q8k xk[NT * NSB];
	int bad_row = 0;

	if (k->gemm_q6_kx8 == NULL) {
		SKIP("%s: no repacked Q6_K kernel", k->name);
		return;
	}
	group_inputs(w, ROWS, COLS, x, NT, xk);
	tensor_quantize_row(TT_Q6_K, w, wq, ROWS * COLS);
	/* in two calls, as threads repack their shares */
	q6x8_repack(wq, NSB * SB, 1, ROWS / 8, NSB, packed);
	q6x8_repack(wq, NSB * SB, 0, 1, NSB, packed);
	CHECK(memcmp(wq, packed, sizeof(wq)) != 0, "the repacked Q6_K layout differs from the file's");
	for (int r = 0; r < ROWS; r++) {
		float row[COLS], deq[COLS];
		uint8_t blk[SB];
		q6x8_dequantize_row(packed + (size_t)(r / 8) * NSB * Q6X8_BLOCK, NSB, r % 8, row);
		tensor_dequantize_row(TT_Q6_K, wq + (size_t)r * NSB * SB, deq, COLS);
		bad_row += memcmp(row, deq, sizeof(row)) != 0;
		for (int i = 0; i < NSB; i++) {
			q6x8_unpack(packed + (size_t)(r / 8) * NSB * Q6X8_BLOCK + (size_t)i * Q6X8_BLOCK, r % 8, blk);
			bad_row += memcmp(blk, wq + (size_t)r * NSB * SB + (size_t)i * SB, SB) != 0;
		}
	}
	CHECK(bad_row == 0, "Q6_K rows read back from the repacked groups are the file's bytes and values (%d differ)",
	      bad_row);
	/* prefill widens the groups as widen_q6_k widens the file's rows */
	{
		enum { NB = NSB * 8, LD = 2 * NB, RB = NB * 34 };
		static uint8_t wr[3][ROWS * RB];
		static int32_t ws[3][ROWS * LD];
		static float wd[3][ROWS * LD];
		memset(wr, 0, sizeof(wr));
		for (int r = 0; r < ROWS; r++)
			ref->widen_q6_k(wq + (size_t)r * NSB * SB, wr[0] + r * RB, NB, ws[0] + r * LD, wd[0] + r * LD);
		for (int g = 0; g < ROWS / 8; g++) {
			const uint8_t *grp = packed + (size_t)g * NSB * Q6X8_BLOCK;
			widen_q6_kx8_scalar(grp, NSB, wr[1] + 8 * g * RB, RB, ws[1] + 8 * g * LD, wd[1] + 8 * g * LD,
					    LD);
			if (k->widen_q6_kx8 != NULL)
				k->widen_q6_kx8(grp, NSB, wr[2] + 8 * g * RB, RB, ws[2] + 8 * g * LD,
						wd[2] + 8 * g * LD, LD);
		}
		int v = k->widen_q6_kx8 != NULL ? 2 : 1;
		CHECK(memcmp(wr[0], wr[1], sizeof(wr[0])) == 0 && memcmp(ws[0], ws[1], sizeof(ws[0])) == 0 &&
			      memcmp(wd[0], wd[1], sizeof(wd[0])) == 0 && memcmp(wr[0], wr[v], sizeof(wr[0])) == 0 &&
			      memcmp(ws[0], ws[v], sizeof(ws[0])) == 0 && memcmp(wd[0], wd[v], sizeof(wd[0])) == 0,
		      "%s Q6_K groups widen (scalar and SIMD) as the file's rows do", k->name);
	}
	char what[64];
	snprintf(what, sizeof(what), "%s Q6_K", k->name);
	check_group_kernel(what, k->gemm_q6_kx8, gemm_q6_kx8_scalar, ref->dot_q6_k_q8k, wq, NSB * SB, packed, xk);
	if (k->gemm_q6_kx8_pairs != NULL) {
		int bad;
		CHECK((bad = kpairs_differ(k->gemm_q6_kx8_pairs, k->gemm_q6_kx8, packed, xk)) == 0,
		      "%s on pairs of tokens for 2..%d tokens gives the group kernel's bits: %d passes differ", what,
		      GROUP_NT, bad);
	}
	/* every value 63, scales 127 and -128 by turns, d 1; activations of
	 * 127 then -127 a sub-block at a time, and all 127 */
	uint8_t ext[8 * SB], eg[Q6X8_BLOCK];
	uint16_t one = f32_to_fp16(1.0f);
	struct block_q8k xe[2];
	memset(xe, 0, sizeof(xe));
	for (int r = 0; r < 8; r++) {
		uint8_t *b = ext + r * SB;
		memset(b, 0xff, 192);
		for (int j = 0; j < 16; j++)
			b[192 + j] = (uint8_t)((j + r) % 2 ? 127 : -128);
		memcpy(b + 208, &one, 2);
	}
	for (int i = 0; i < 256; i++) {
		xe[0].q[i] = (int8_t)((i / 16) % 2 ? -127 : 127);
		xe[1].q[i] = 127;
	}
	for (int t = 0; t < 2; t++) {
		xe[t].d = 1.0f;
		for (int j = 0; j < 16; j++) {
			int sum = 0;
			for (int l = 0; l < 16; l++)
				sum += xe[t].q[16 * j + l];
			xe[t].bsum[j] = (int16_t)sum;
		}
	}
	q6x8_repack(ext, SB, 0, 1, 1, eg);
	int bad_ext = 0;
	for (int t = 0; t < 2; t++) {
		float ye[8];
		k->gemm_q6_kx8(eg, 1, xe + t, 1, 1, ye, 8);
		for (int r = 0; r < 8; r++) {
			double exact = 0;
			for (int i = 0; i < 256; i++)
				exact += (double)(int8_t)ext[r * SB + 192 + i / 16] * 31 * xe[t].q[i];
			bad_ext += fabs(ye[r] - exact) > 1e-6 * fabs(exact);
		}
	}
	CHECK(bad_ext == 0, "%s Q6_K group kernel at the extremes: %d of 16 sums off", k->name, bad_ext);
	if (k->gemm_q6_kx8_pairs != NULL) { /* the two extreme tokens as a pair */
		struct q8k_pair xp;
		float ye[2 * 8], yp[2 * 8];
		q8k_pair_pack(xe, 2, 1, &xp);
		k->gemm_q6_kx8(eg, 1, xe, 1, 2, ye, 8);
		k->gemm_q6_kx8_pairs(eg, 1, &xp, 1, 2, yp, 8);
		CHECK(memcmp(ye, yp, sizeof(ye)) == 0, "%s Q6_K pairs at the extremes give the group kernel's bits",
		      k->name);
	}
}

/* What a repacked group type is checked through (test_groups) */
struct group_type {
	uint32_t type;
	size_t sb, block; /* bytes per super-block: a file row's, a group's */
	void (*repack)(const uint8_t *, size_t, int64_t, int64_t, size_t, uint8_t *);
	group_unpack_fn unpack;
	group_gemm_fn scalar;
	/* the kernel set's group kernel and repack, the per-row reference dot */
	group_gemm_fn gemm;
	void (*repack_k)(const uint8_t *, size_t, int64_t, int64_t, size_t, uint8_t *);
	float (*row_dot)(const void *, const struct block_q8k *, size_t);
	/* the file's rows widened for the GEMM (NULL: no GEMM), with sums
	 * sums and scales a 32-value block (2 for 16-value sub-blocks) */
	void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *);
	int sums;
	/* the extremes: super-block bytes of row r of 8, and the weight values
	 * at the extremes (w_lo, w_hi) that must occur in them */
	void (*extreme)(int r, uint8_t *b);
	float w_lo, w_hi;
	/* the kernel set's two tokens a vector, NULL where it has none */
	kpairs_gemm_fn pairs;
};

/* A group type against the file's rows (as test_q6x8): the layout is not
 * the file's, the kernel set's repack is the scalar one, rows read back
 * are the file's bytes and values, groups widen for prompts as the file's
 * rows do, and the group kernel (SIMD and scalar) equals each row's dot.
 * Then one group at the extremes, 127 and -127 activations, against the
 * dequantized sums in double.  Where the kernel set takes two tokens a
 * vector, they give the group kernel's bits, at the extremes too. */
static void
test_groups(const struct cpu_kernels *k, const struct group_type *gt)
{
	group_gemm_fn gemm = gt->gemm;
	enum { ROWS = GROUP_ROWS, COLS = GROUP_COLS, NSB = GROUP_NSB, NT = GROUP_NT, MAX_SB = 136 };
	static float w[ROWS * COLS], x[NT * COLS];
	static uint8_t wq[ROWS * NSB * MAX_SB], packed[ROWS * NSB * MAX_SB], again[ROWS * NSB * MAX_SB];
	static struct block_q8k xk[NT * NSB];
	const char *name = tensor_type_name(gt->type);
	size_t sb = gt->sb, bytes = ROWS * NSB * sb;
	int bad_row = 0;
	char what[64];

	snprintf(what, sizeof(what), "%s %s", k->name, name);
	if (gemm == NULL || gt->repack_k == NULL) {
		SKIP("%s: no repacked %s kernel", k->name, name);
		return;
	}
	group_inputs(w, ROWS, COLS, x, NT, xk);
	tensor_quantize_row(gt->type, w, wq, ROWS * COLS);
	/* in two calls each, as threads repack their shares */
	gt->repack(wq, NSB * sb, 1, ROWS / 8, NSB, packed);
	gt->repack(wq, NSB * sb, 0, 1, NSB, packed);
	CHECK(memcmp(wq, packed, bytes) != 0, "the repacked %s layout differs from the file's", name);
	gt->repack_k(wq, NSB * sb, 0, 2, NSB, again);
	gt->repack_k(wq, NSB * sb, 2, ROWS / 8, NSB, again);
	CHECK(memcmp(again, packed, bytes) == 0, "%s: the kernel set's repack equals the scalar one", what);
	for (int r = 0; r < ROWS; r++) {
		float row[COLS], deq[COLS];
		uint8_t blk[MAX_SB];
		const uint8_t *grp = packed + (size_t)(r / 8) * NSB * gt->block;
		groups_dequantize_row(grp, NSB, gt->block, gt->unpack, gt->type, r % 8, row);
		tensor_dequantize_row(gt->type, wq + (size_t)r * NSB * sb, deq, COLS);
		bad_row += memcmp(row, deq, sizeof(row)) != 0;
		for (int i = 0; i < NSB; i++) {
			gt->unpack(grp + (size_t)i * gt->block, r % 8, blk);
			bad_row += memcmp(blk, wq + (size_t)r * NSB * sb + (size_t)i * sb, sb) != 0;
		}
	}
	CHECK(bad_row == 0, "%s rows read back from the repacked groups are the file's bytes and values (%d differ)",
	      name, bad_row);
	if (gt->widen != NULL) {
		enum { NB = NSB * 8, LD = 2 * NB, RB = NB * 34 };
		static uint8_t wr[2][ROWS * RB];
		static int32_t ws[2][ROWS * LD];
		static float wd[2][ROWS * LD];
		size_t ld = (size_t)gt->sums * NB;
		memset(wr, 0, sizeof(wr));
		memset(ws, 0, sizeof(ws));
		memset(wd, 0, sizeof(wd));
		for (int r = 0; r < ROWS; r++)
			gt->widen(wq + (size_t)r * NSB * sb, wr[0] + r * RB, NB, ws[0] + r * ld, wd[0] + r * ld);
		for (int g = 0; g < ROWS / 8; g++)
			groups_widen(gt->widen, gt->unpack, packed + (size_t)g * NSB * gt->block, NSB, gt->block,
				     gt->sums, wr[1] + 8 * g * RB, RB, ws[1] + 8 * g * ld, wd[1] + 8 * g * ld, ld);
		CHECK(memcmp(wr[0], wr[1], sizeof(wr[0])) == 0 && memcmp(ws[0], ws[1], sizeof(ws[0])) == 0 &&
			      memcmp(wd[0], wd[1], sizeof(wd[0])) == 0,
		      "%s groups widen as the file's rows do", what);
	}
	check_group_kernel(what, gemm, gt->scalar, gt->row_dot, wq, NSB * sb, packed, xk);
	if (gt->pairs != NULL) {
		int bad;
		CHECK((bad = kpairs_differ(gt->pairs, gemm, packed, xk)) == 0,
		      "%s pairs for 2..%d tokens give the group kernel's bits: %d passes differ", what, NT, bad);
	}

	uint8_t ext[8 * MAX_SB], eg[8 * MAX_SB];
	struct block_q8k xe[2];
	memset(xe, 0, sizeof(xe));
	for (int r = 0; r < 8; r++)
		gt->extreme(r, ext + r * sb);
	for (int i = 0; i < 256; i++) {
		xe[0].q[i] = (int8_t)((i / 16) % 2 ? -127 : 127);
		xe[1].q[i] = 127;
	}
	for (int t = 0; t < 2; t++) {
		xe[t].d = 1.0f;
		for (int j = 0; j < 16; j++) {
			int sum = 0;
			for (int l = 0; l < 16; l++)
				sum += xe[t].q[16 * j + l];
			xe[t].bsum[j] = (int16_t)sum;
		}
	}
	gt->repack(ext, sb, 0, 1, 1, eg);
	int bad_ext = 0, seen_lo = 0, seen_hi = 0;
	float yp[2 * 8];
	if (gt->pairs != NULL) {
		struct q8k_pair xpe;
		q8k_pair_pack(xe, 2, 1, &xpe);
		gt->pairs(eg, 1, &xpe, 1, 2, yp, 8);
	}
	for (int t = 0; t < 2; t++) {
		float ye[8], deq[256];
		gemm(eg, 1, xe + t, 1, 1, ye, 8);
		if (gt->pairs != NULL)
			bad_ext += memcmp(ye, yp + 8 * t, sizeof(ye)) != 0;
		for (int r = 0; r < 8; r++) {
			double exact = 0;
			tensor_dequantize_row(gt->type, ext + r * sb, deq, 256);
			for (int i = 0; i < 256; i++) {
				exact += (double)deq[i] * xe[t].q[i];
				seen_lo += deq[i] == gt->w_lo;
				seen_hi += deq[i] == gt->w_hi;
			}
			bad_ext += fabs(ye[r] - exact) > 1e-6 * fabs(exact);
		}
	}
	CHECK(seen_lo > 0 && seen_hi > 0, "the %s extremes reach %g and %g (%d, %d values)", name, gt->w_lo, gt->w_hi,
	      seen_lo, seen_hi);
	CHECK(bad_ext == 0, "%s group kernel at the extremes: %d of 16 sums off or not the pairs' bits", what, bad_ext);
}

/* IQ4_XS: every index 0 (level -127) in even rows, 15 (113) in odd ones;
 * sub-block scales ls 0 and 63 by turns (-32 and 31), d 1: where the
 * offset levels (up to 241) would saturate an int16 pair sum */
static void
iq4_xs_extreme(int r, uint8_t *b)
{
	uint16_t one = f32_to_fp16(1.0f), sh = 0;

	memcpy(b, &one, 2);
	for (int j = 0; j < 8; j++)
		sh |= (uint16_t)(((j + r) % 2 ? 3 : 0) << (2 * j));
	memcpy(b + 2, &sh, 2);
	for (int j = 0; j < 4; j++)
		b[4 + j] = (uint8_t)(((2 * j + r) % 2 ? 0xf : 0) | ((2 * j + 1 + r) % 2 ? 0xf0 : 0));
	memset(b + 8, r % 2 ? 0xff : 0, 128);
}

/* Q3_K: even rows every u 0 (hmask and quants clear), odd rows every u 7;
 * scale bytes giving 0 and 63 (less 32: -32 and 31) by turns, d 1 */
static void
q3_k_extreme(int r, uint8_t *b)
{
	uint16_t one = f32_to_fp16(1.0f);

	memset(b, r % 2 ? 0xff : 0, 96);
	for (int j = 0; j < 8; j++)
		b[96 + j] = (uint8_t)((j + r) % 2 ? 0x0f : 0xf0);
	for (int j = 0; j < 4; j++)
		b[104 + j] = (uint8_t)(r % 2 ? 0x33 : 0xcc);
	memcpy(b + 108, &one, 2);
}

/* Q2_K: every q 3, scales 15 with mins 0 and scales 0 with mins 15 by
 * turns, d and dmin 1 */
static void
q2_k_extreme(int r, uint8_t *b)
{
	uint16_t one = f32_to_fp16(1.0f);

	for (int j = 0; j < 16; j++)
		b[j] = (uint8_t)((j + r) % 2 ? 0x0f : 0xf0);
	memset(b + 16, 0xff, 64);
	memcpy(b + 80, &one, 2);
	memcpy(b + 82, &one, 2);
}

/* IQ4_XS, Q3_K and Q2_K in their groups (the scalar kernel set has none) */
static void
test_group_types(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	const struct group_type types[] = {
		{ .type = TT_IQ4_XS,
		  .sb = 136,
		  .block = IQ4X8_BLOCK,
		  .repack = iq4x8_repack,
		  .unpack = iq4x8_unpack,
		  .scalar = gemm_iq4_xsx8_scalar,
		  .gemm = k->gemm_iq4_xsx8,
		  .repack_k = k->repack_iq4x8,
		  .row_dot = ref->dot_iq4_xs_q8k,
		  .widen = ref->widen_iq4_xs,
		  .sums = 1,
		  .extreme = iq4_xs_extreme,
		  .w_lo = -127.0f * -32,
		  .w_hi = 113.0f * 31,
		  .pairs = k->gemm_iq4_xsx8_pairs },
		{ .type = TT_Q3_K,
		  .sb = 110,
		  .block = Q3X8_BLOCK,
		  .repack = q3x8_repack,
		  .unpack = q3x8_unpack,
		  .scalar = gemm_q3_kx8_scalar,
		  .gemm = k->gemm_q3_kx8,
		  .repack_k = k->repack_q3x8,
		  .row_dot = ref->dot_q3_k_q8k,
		  .widen = ref->widen_q3_k,
		  .sums = 2,
		  .extreme = q3_k_extreme,
		  .w_lo = -4.0f * -32,
		  .w_hi = 3.0f * 31,
		  .pairs = k->gemm_q3_kx8_pairs },
		{ .type = TT_Q2_K,
		  .sb = 84,
		  .block = Q2X8_BLOCK,
		  .repack = q2x8_repack,
		  .unpack = q2x8_unpack,
		  .scalar = gemm_q2_kx8_scalar,
		  .gemm = k->gemm_q2_kx8,
		  .repack_k = k->repack_q2x8,
		  .row_dot = ref->dot_q2_k_q8k,
		  .extreme = q2_k_extreme,
		  .w_lo = -15.0f,
		  .w_hi = 45.0f,
		  .pairs = k->gemm_q2_kx8_pairs },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		test_groups(k, &types[i]);
}

/* The float register tile against the scalar dot on odd shapes: a full
 * tile, fewer rows, fewer tokens, one of each, and lengths that are not a
 * multiple of the vector width (the masked tail). */
static void
test_gemm_f32(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { LD = 301 };
	static float w[GEMM_F32_ROWS * LD], x[GEMM_F32_TOKENS * LD];
	/* the full tile first, then every kind of edge */
	static const int shapes[][3] = { { GEMM_F32_ROWS, GEMM_F32_TOKENS, 256 },
					 { GEMM_F32_ROWS, GEMM_F32_TOKENS, 37 },
					 { GEMM_F32_ROWS, GEMM_F32_TOKENS, 1 },
					 { 3, 4, 100 },
					 { 4, 1, 299 },
					 { 1, 1, 7 },
					 { 2, 3, 16 } };
	float y[GEMM_F32_TOKENS * 8];

	if (k->gemm_f32 == NULL) {
		SKIP("%s has no float register tile (the per-token dot runs)", k->name);
		return;
	}
	for (int i = 0; i < GEMM_F32_ROWS * LD; i++)
		w[i] = sinf((float)i * 0.013f) * 2 - 0.5f;
	for (int i = 0; i < GEMM_F32_TOKENS * LD; i++)
		x[i] = cosf((float)i * 0.029f) * 3;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int nr = shapes[s][0], nt = shapes[s][1], n = shapes[s][2], bad = 0;
		for (int i = 0; i < GEMM_F32_TOKENS * 8; i++)
			y[i] = -12345.0f;
		k->gemm_f32(w, LD, nr, x, LD, nt, (size_t)n, y, 8);
		for (int t = 0; t < GEMM_F32_TOKENS; t++)
			for (int r = 0; r < 8; r++) {
				float got = y[t * 8 + r];
				if (t >= nt || r >= nr) {
					bad += got != -12345.0f; /* nothing outside the tile is written */
					continue;
				}
				float want = ref->dot_f32(w + r * LD, x + t * LD, (size_t)n);
				bad += !(fabsf(got - want) <= 1e-5f * fabsf(want) + 1e-4f);
			}
		CHECK(bad == 0, "%s gemm_f32 %d rows x %d tokens x %d: %d values off", k->name, nr, nt, n, bad);
	}
}

/* The prefill GEMM against the scalar per-token dot, with a partial
 * second group so padding lanes are exercised. */
static void
test_gemm(void)
{
	const struct cpu_kernels *k = cpu_kernels_get(), *ref = cpu_kernels_scalar();
	enum { COLS = 256, ROWS = 5, NT = 27 };
	static float x[NT * COLS], w[ROWS * COLS], y[4 * 32];
	static uint8_t wq[ROWS * COLS / 32 * 34];
	static struct block_q8 xq[NT * COLS / 32];
	static struct q8_tile tiles[2 * COLS / 32];
	size_t nb = COLS / 32;

	if (k->gemm_q8_0 == NULL) {
		SKIP("no GEMM kernel on this CPU (%s)", k->name);
		return;
	}
	for (int i = 0; i < NT * COLS; i++)
		x[i] = sinf((float)i * 0.013f) * 2;
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = cosf((float)i * 0.7f);
	tensor_quantize_row(TT_Q8_0, w, wq, ROWS * COLS);
	for (int t = 0; t < NT; t++)
		ref->quantize_q8(x + t * COLS, xq + t * nb, COLS);
	q8_tile_pack(xq, 16, nb, tiles);
	q8_tile_pack(xq + 16 * nb, NT - 16, nb, tiles + nb);
	int bad = 0;
	int32_t wsum[4 * COLS / 32];
	float wd[4 * COLS / 32];
	for (int r0 = 0; r0 < ROWS; r0 += 4) {
		int nr = ROWS - r0 < 4 ? ROWS - r0 : 4;
		k->gemm_q8_0_prep(wq + (size_t)r0 * nb * 34, nb * 34, nr, nb, wsum, wd);
		k->gemm_q8_0(wq + (size_t)r0 * nb * 34, nb * 34, nr, wsum, wd, NULL, tiles, nb, 2, nb, y);
		for (int r = 0; r < nr; r++)
			for (int t = 0; t < NT; t++) {
				float want = ref->dot_q8_0(wq + (size_t)(r0 + r) * nb * 34, xq + t * nb, nb);
				float got = y[r * 32 + t];
				bad += fabsf(got - want) > 1e-4f * fabsf(want) + 1e-3f;
			}
	}
	CHECK(bad == 0, "%s gemm_q8_0: %d of %d products differ from the scalar dot", k->name, bad, ROWS * NT);
	if (k->gemm_q6_k == NULL)
		return;
	/* Q6_K: widened rows through their GEMM, one group and two, against the
	 * per-token Q6_K dot */
	static uint8_t w6[ROWS * COLS / 256 * 210], wide[4 * COLS / 32 * 34];
	int32_t ws6[2 * 4 * COLS / 32];
	float wd6[2 * 4 * COLS / 32];
	tensor_quantize_row(TT_Q6_K, w, w6, ROWS * COLS);
	bad = 0;
	for (int r0 = 0; r0 < ROWS; r0 += 4) {
		int nr = ROWS - r0 < 4 ? ROWS - r0 : 4;
		size_t rb = COLS / 256 * 210;
		for (int r = 0; r < nr; r++)
			k->widen_q6_k(w6 + (size_t)(r0 + r) * rb, wide + (size_t)r * nb * 34, nb,
				      ws6 + (size_t)r * 2 * nb, wd6 + (size_t)r * 2 * nb);
		for (int ng = 1; ng <= 2; ng++) {
			k->gemm_q6_k(wide, nb * 34, nr, ws6, wd6, tiles, nb, ng, nb, y);
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < 16 * ng && t < NT; t++) {
					float want = ref->dot_q6_k(w6 + (size_t)(r0 + r) * rb, xq + t * nb, nb);
					bad += fabsf(y[r * 32 + t] - want) > 1e-4f * fabsf(want) + 1e-3f;
				}
		}
	}
	CHECK(bad == 0, "%s gemm_q6_k (one and two groups): %d products off the scalar dot", k->name, bad);
}

/* The int8 GEMM on AMX tiles (tokens as A, staged rows as B) against
 * gemm_q8_0 on the same rows and tokens: the same bits, for 1 to 16
 * rows, 1 to 27 tokens (a partial group), blocks odd and even, with the
 * blocks' own scales and with given scales and K-quant offsets; staging
 * two Q8_0, Q4_0, Q4_K or Q5_K 8-row groups gives what staging their rows
 * (widened) gives; nothing
 * past the rows and tokens asked for is written. */
static void
test_gemm_amx(void)
{
	const struct cpu_kernels *k = cpu_kernels_get(), *ref = cpu_kernels_scalar();
	enum { MAXB = 9, ROWS = 16, NT = 27, LDY = 20 };
	static const int rowss[] = { 1, 5, 8, 15, 16 }, nbs[] = { 1, 3, 4, 9 }, nts[] = { 1, 16, 27 };
	static float x[NT * MAXB * 32], w[ROWS * MAXB * 32], wmin[ROWS * MAXB], ya[ROWS * 2 * GEMM_TOKENS],
		yb[NT * LDY];
	static uint8_t wq[ROWS * MAXB * 34], x8[2 * MAXB * Q8_0X8_BLOCK], w4[ROWS * MAXB * 18], wide[ROWS * MAXB * 34];
	static struct block_q8 xq[NT * MAXB];
	static struct q8_tile tiles[2 * MAXB];
	static struct amx_q8_xblock xa[2 * MAXB];
	static struct amx_q8_wblock sa[MAXB], sb[MAXB];
	int32_t wsum[ROWS * MAXB];
	float wd[ROWS * MAXB];
	int bad = 0, wild = 0, runs = 0, stage_bad = 0;

	if (k->gemm_q8_amx == NULL) {
		SKIP("no AMX tiles on this CPU (or its kernel): the int8 GEMM's AMX kernel was not checked");
		return;
	}
	for (int i = 0; i < NT * MAXB * 32; i++)
		x[i] = sinf((float)i * 0.017f) * 3;
	for (int i = 0; i < ROWS * MAXB * 32; i++)
		w[i] = cosf((float)i * 0.61f) * (1 + (float)(i % 7));
	for (int i = 0; i < ROWS * MAXB; i++)
		wmin[i] = 0.01f * (float)(i % 13);
	for (size_t ni = 0; ni < sizeof(nbs) / sizeof(nbs[0]); ni++) {
		size_t nb = (size_t)nbs[ni];
		tensor_quantize_row(TT_Q8_0, w, wq, ROWS * nb * 32);
		for (int t = 0; t < NT; t++)
			ref->quantize_q8(x + (size_t)t * nb * 32, xq + (size_t)t * nb, nb * 32);
		q8_tile_pack(xq, 16, nb, tiles);
		q8_tile_pack(xq + 16 * nb, NT - 16, nb, tiles + nb);
		/* two 8-row groups staged as they are, and as rows */
		q8_0x8_repack(wq, nb * 34, 0, 2, nb, x8);
		k->amx_q8_stage_x8(x8, x8 + nb * Q8_0X8_BLOCK, nb, sa);
		k->amx_q8_stage_rows(wq, nb * 34, 16, nb, NULL, NULL, sb);
		stage_bad += memcmp(sa, sb, nb * sizeof(sa[0])) != 0;
		k->amx_q8_stage_x8(x8, NULL, nb, sa);
		k->amx_q8_stage_rows(wq, nb * 34, 8, nb, NULL, NULL, sb);
		stage_bad += memcmp(sa, sb, nb * sizeof(sa[0])) != 0;
		/* and Q4_0's groups as their rows widened to Q8_0 blocks */
		tensor_quantize_row(TT_Q4_0, w, w4, ROWS * nb * 32);
		q4_0x8_repack(w4, nb * 18, 0, 2, nb, x8);
		for (int r = 0; r < ROWS; r++)
			ref->widen_q4_0(w4 + r * nb * 18, wide + r * nb * 34, nb, NULL);
		for (int two = 0; two < 2; two++) {
			k->amx_q8_stage_q4x8(x8, two ? x8 + nb * Q4_0X8_BLOCK : NULL, nb, sa);
			k->amx_q8_stage_rows(wide, nb * 34, two ? 16 : 8, nb, NULL, NULL, sb);
			stage_bad += memcmp(sa, sb, nb * sizeof(sa[0])) != 0;
		}
		for (size_t ti = 0; ti < sizeof(nts) / sizeof(nts[0]); ti++) {
			int nt = nts[ti];
			amx_q8_xpack(xq, nt, nb, xa);
			for (size_t ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
				int nr = rowss[ri];
				k->gemm_q8_0_prep(wq, nb * 34, nr, nb, wsum, wd);
				for (int off = 0; off < 2; off++) {
					const float *o = off ? wmin : NULL;
					memset(ya, 0, sizeof(ya));
					k->gemm_q8_0(wq, nb * 34, nr, wsum, wd, o, tiles, nb, 2, nb, ya);
					/* offsets come with given scales (K-quants); Q8_0 and
					 * Q4_0 read the blocks' own */
					k->amx_q8_stage_rows(wq, nb * 34, nr, nb, off ? wd : NULL, o, sa);
					for (int i = 0; i < NT * LDY; i++)
						yb[i] = -7.0f;
					k->gemm_q8_amx(sa, nb, off, xa, nt, yb, LDY, nr);
					for (int t = 0; t < NT; t++)
						for (int r = 0; r < LDY; r++) {
							float got = yb[t * LDY + r];
							if (t >= nt || r >= nr)
								wild += got != -7.0f;
							else
								bad += memcmp(&got, &ya[r * 2 * GEMM_TOKENS + t],
									      sizeof(got)) != 0;
						}
					runs++;
				}
			}
		}
	}
	CHECK(stage_bad == 0, "two Q8_0 (Q4_0) 8-row groups stage as their rows (widened) do: %d of 16 differ",
	      stage_bad);
	/* Q4_K and Q5_K groups, 8 and 16 rows, two super-blocks: as their
	 * rows widened (scales and offsets included) */
	stage_bad = 0;
	for (int five = 0; five < 2; five++) {
		enum { NSB = 2 };
		uint32_t type = five ? TT_Q5_K : TT_Q4_K;
		size_t sbytes = five ? 176 : 144, knb = 8 * NSB;
		static uint8_t kq[ROWS * NSB * 176], kx[2 * NSB * 1408], kw[ROWS * 8 * NSB * 34];
		static float kd[ROWS * 8 * NSB], km[ROWS * 8 * NSB];
		static int32_t ks[ROWS * 8 * NSB];
		static struct amx_q8_wblock ka[8 * NSB], kb[8 * NSB];
		static float kf[ROWS * NSB * 256];
		for (int i = 0; i < ROWS * NSB * 256; i++)
			kf[i] = cosf((float)i * 0.37f) * (1 + (float)(i % 5));
		tensor_quantize_row(type, kf, kq, ROWS * NSB * 256);
		kx8_repack(kq, NSB * sbytes, 0, 2, NSB, five, kx);
		for (int r = 0; r < ROWS; r++)
			(five ? ref->widen_q5_k : ref->widen_q4_k)(kq + r * NSB * sbytes, kw + r * knb * 34, knb,
								   ks + r * knb, kd + r * knb, km + r * knb);
		for (int two = 0; two < 2; two++) {
			k->amx_q8_stage_kx8(kx, two ? kx + NSB * (size_t)KX8_BLOCK(five) : NULL, NSB, five, ka);
			k->amx_q8_stage_rows(kw, knb * 34, two ? 16 : 8, knb, kd, km, kb);
			stage_bad += memcmp(ka, kb, sizeof(ka)) != 0;
		}
	}
	CHECK(stage_bad == 0, "two Q4_K (Q5_K) 8-row groups stage as their rows widened do: %d of 4 differ", stage_bad);
	CHECK(bad == 0, "gemm_q8_amx equals gemm_q8_0 bit for bit: %d outputs differ over %d shapes", bad, runs);
	CHECK(wild == 0, "gemm_q8_amx writes only the rows and tokens asked for: %d others written", wild);
}

/* Q6_K on AMX tiles against gemm_q6_k on the same widened rows and
 * tokens: the same bits, for 1 to 16 rows, 1 to 27 tokens, one
 * super-block and three (nb 8 and 24, an even count and an odd pair
 * count); nothing past the rows and tokens asked for is written. */
static void
test_gemm_q6_amx(void)
{
	const struct cpu_kernels *k = cpu_kernels_get(), *ref = cpu_kernels_scalar();
	enum { MAXSB = 3, ROWS = 16, NT = 27, LDY = 20 };
	static const int rowss[] = { 1, 4, 9, 16 }, nsbs[] = { 1, 3 }, nts[] = { 1, 16, 27 };
	static float x[NT * MAXSB * 256], w[ROWS * MAXSB * 256], ya[4 * 2 * GEMM_TOKENS], yb[NT * LDY];
	static uint8_t w6[ROWS * MAXSB * 210], wide[ROWS * MAXSB * 8 * 34];
	static int32_t ws[ROWS * 2 * MAXSB * 8];
	static float wd[ROWS * 2 * MAXSB * 8];
	static struct block_q8 xq[NT * MAXSB * 8];
	static struct q8_tile tiles[2 * MAXSB * 8];
	static struct amx_q8_xblock xa[2 * MAXSB * 8];
	static struct amx_q8_wblock sa[MAXSB * 8];
	int bad = 0, wild = 0, runs = 0;

	if (k->gemm_q6_amx == NULL || k->gemm_q6_k == NULL) {
		SKIP("no AMX tiles on this CPU (or its kernel): the Q6_K AMX kernel was not checked");
		return;
	}
	for (int i = 0; i < NT * MAXSB * 256; i++)
		x[i] = sinf((float)i * 0.013f) * 2 + 0.1f * (float)(i % 5);
	for (int i = 0; i < ROWS * MAXSB * 256; i++)
		w[i] = cosf((float)i * 0.43f) * (1 + (float)(i % 11) * (i % 97 < 40 ? 1.0f : 0.1f));
	for (size_t si = 0; si < sizeof(nsbs) / sizeof(nsbs[0]); si++) {
		size_t nsb = (size_t)nsbs[si], nb = 8 * nsb, rb = nsb * 210;
		tensor_quantize_row(TT_Q6_K, w, w6, ROWS * nsb * 256);
		for (int r = 0; r < ROWS; r++)
			ref->widen_q6_k(w6 + r * rb, wide + r * nb * 34, nb, ws + r * 2 * nb, wd + r * 2 * nb);
		for (int t = 0; t < NT; t++)
			ref->quantize_q8(x + (size_t)t * nb * 32, xq + (size_t)t * nb, nb * 32);
		q8_tile_pack(xq, 16, nb, tiles);
		q8_tile_pack(xq + 16 * nb, NT - 16, nb, tiles + nb);
		for (size_t ti = 0; ti < sizeof(nts) / sizeof(nts[0]); ti++) {
			int nt = nts[ti];
			amx_q8_xpack(xq, nt, nb, xa);
			for (size_t ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
				int nr = rowss[ri];
				k->amx_q6_stage_rows(wide, nb * 34, nr, nb, wd, sa);
				for (int i = 0; i < NT * LDY; i++)
					yb[i] = -7.0f;
				k->gemm_q6_amx(sa, nb, xa, nt, yb, LDY, nr);
				for (int r0 = 0; r0 < nr; r0 += 4) {
					int n4 = nr - r0 < 4 ? nr - r0 : 4;
					k->gemm_q6_k(wide + (size_t)r0 * nb * 34, nb * 34, n4, ws + (size_t)r0 * 2 * nb,
						     wd + (size_t)r0 * 2 * nb, tiles, nb, 2, nb, ya);
					for (int r = 0; r < n4; r++)
						for (int t = 0; t < nt; t++)
							bad += memcmp(&yb[t * LDY + r0 + r],
								      &ya[r * 2 * GEMM_TOKENS + t], sizeof(float)) != 0;
				}
				for (int t = 0; t < NT; t++)
					for (int r = 0; r < LDY; r++)
						if (t >= nt || r >= nr)
							wild += yb[t * LDY + r] != -7.0f;
				runs++;
			}
		}
	}
	CHECK(bad == 0, "gemm_q6_amx equals gemm_q6_k bit for bit: %d outputs differ over %d shapes", bad, runs);
	CHECK(wild == 0, "gemm_q6_amx writes only the rows and tokens asked for: %d others written", wild);
}

/* A group kernel on pairs of tokens (gemm_q4_0x8_pairs and its kind)
 * against the one-token-a-lane reference, ng groups of nb blocks, for 2
 * to 8 tokens: how many passes differ in a bit or write past their
 * tokens (an odd count's last pair holds its token twice). */
typedef void (*pairs_gemm_fn)(const uint8_t *, int, const struct q8_pair *, size_t, int, float *, size_t);
typedef void (*x8_gemm_fn)(const uint8_t *, int, const struct block_q8 *, size_t, int, float *, size_t);

static int
pairs_differ(pairs_gemm_fn pairs, x8_gemm_fn ref, const uint8_t *packed, int ng, const struct block_q8 *xq, size_t nb)
{
	enum { NT = 8, LDY = 40 };
	static struct q8_pair xp[NT / 2 * 16];
	float y[NT * LDY], ys[NT * LDY];
	int bad = 0;

	assert(nb <= 16 && 8 * ng <= LDY);
	for (int nt = 2; nt <= NT; nt++) {
		for (int i = 0; i < NT * LDY; i++)
			y[i] = ys[i] = -7.0f;
		q8_pair_pack(xq, nt, nb, xp);
		pairs(packed, ng, xp, nb, nt, y, LDY);
		ref(packed, ng, xq, nb, nt, ys, LDY);
		bad += memcmp(y, ys, sizeof(y)) != 0;
	}
	return bad;
}

/* Q4_0 repacked 8 rows to a group: rows read back exactly; the kernel,
 * for 1 to 8 tokens and for several groups in one call, equals the
 * scalar reference bit for bit and the per-row dot within rounding, and
 * a token's result does not depend on how many share the pass; widening
 * a group gives exactly what widening each row gives. */
static void
test_q4_0x8(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum {
		ROWS = 24,
		COLS = 96,
		NB = COLS / 32,
		NT = 8
	}; /* three groups: one token takes two at a time, then one */
	static float w[ROWS * COLS], x[NT * COLS], y[NT * ROWS], ys[NT * ROWS], y1[ROWS];
	static uint8_t wq[ROWS * NB * 18], packed[ROWS * NB * 18], wide[8 * NB * 34], want[8 * NB * 34];
	static struct block_q8 xq[NT * NB];
	int16_t sums[8 * NB], want_sums[8 * NB];
	int bad = 0, bad_ref = 0, bad_alone = 0, bad_widen = 0;

	if (k->gemm_q4_0x8 == NULL) {
		SKIP("%s: no repacked Q4_0 kernels", k->name);
		return;
	}
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = sinf((float)i * 0.71f) * (1 + (float)(i % 7));
	for (int i = 0; i < NT * COLS; i++)
		x[i] = i % 32 == 7 ? -9.0f : cosf((float)i * 0.3f) * 2; /* -9 quantizes to -127 */
	tensor_quantize_row(TT_Q4_0, w, wq, ROWS * COLS);
	ref->quantize_q8(x, xq, NT * COLS);
	q4_0x8_repack(wq, NB * 18, 0, 1, NB, packed); /* in two calls, as threads do it */
	q4_0x8_repack(wq, NB * 18, 1, ROWS / 8, NB, packed);
	float row[COLS], deq[COLS];
	int bad_row = 0;
	for (int r = 0; r < ROWS; r++) {
		q4_0x8_dequantize_row(packed + (size_t)(r / 8) * NB * Q4_0X8_BLOCK, NB, r % 8, row);
		tensor_dequantize_row(TT_Q4_0, wq + (size_t)r * NB * 18, deq, COLS);
		bad_row += memcmp(row, deq, sizeof(row)) != 0;
	}
	CHECK(bad_row == 0, "rows read back from the repacked groups are the file's rows (%d differ)", bad_row);
	CHECK(memcmp(wq, packed, sizeof(wq)) != 0, "the repacked layout differs from the file's");
	for (int nt = 1; nt <= NT; nt++) { /* all groups in one call, token-major as the matmul has them */
		k->gemm_q4_0x8(packed, ROWS / 8, xq, NB, nt, y, ROWS);
		gemm_q4_0x8_scalar(packed, ROWS / 8, xq, NB, nt, ys, ROWS);
		bad += memcmp(y, ys, (size_t)nt * ROWS * sizeof(float)) != 0;
	}
	for (int t = 0; t < NT; t++) {
		k->gemm_q4_0x8(packed, ROWS / 8, xq + t * NB, NB, 1, y1, ROWS);
		bad_alone += memcmp(y1, y + t * ROWS, sizeof(y1)) != 0;
		for (int r = 0; r < ROWS; r++) {
			float d = ref->dot_q4_0(wq + (size_t)r * NB * 18, xq + t * NB, NB);
			bad_ref += !(fabsf(y[t * ROWS + r] - d) <= 1e-5f * fabsf(d) + 1e-4f);
		}
	}
	for (int g = 0; g < ROWS / 8; g++) {
		const uint8_t *grp = packed + (size_t)g * NB * Q4_0X8_BLOCK;
		k->widen_q4_0x8(grp, NB, wide, NB * 34, sums);
		for (int r = 0; r < 8; r++)
			ref->widen_q4_0(wq + (size_t)(8 * g + r) * NB * 18, want + (size_t)r * NB * 34, NB,
					want_sums + r * NB);
		bad_widen += memcmp(wide, want, sizeof(wide)) != 0 || memcmp(sums, want_sums, sizeof(sums)) != 0;
		widen_q4_0x8_scalar(grp, NB, wide, NB * 34, sums);
		bad_widen += memcmp(wide, want, sizeof(wide)) != 0 || memcmp(sums, want_sums, sizeof(sums)) != 0;
	}
	CHECK(bad == 0, "%s gemm_q4_0x8 for 1..8 tokens equals the scalar reference bit for bit: %d passes differ",
	      k->name, bad);
	CHECK(bad_alone == 0, "%s gemm_q4_0x8: a token alone gives what it gives among 8 (%d differ)", k->name,
	      bad_alone);
	CHECK(bad_ref == 0, "%s gemm_q4_0x8 equals the per-row dot within rounding: %d of %d off", k->name, bad_ref,
	      ROWS * NT);
	CHECK(bad_widen == 0, "%s widen_q4_0x8 (and scalar) equal widening each row", k->name);
	if (k->gemm_q4_0x8_pairs != NULL)
		CHECK((bad = pairs_differ(k->gemm_q4_0x8_pairs, gemm_q4_0x8_scalar, packed, ROWS / 8, xq, NB)) == 0,
		      "%s gemm_q4_0x8_pairs for 2..8 tokens equals the scalar reference bit for bit: %d passes differ",
		      k->name, bad);
}

/* IQ4_NL in Q4_0's groups, as test_q4_0x8: rows read back exactly, the
 * kernel for 1..8 tokens equals the scalar reference bit for bit and the
 * per-row dot within rounding, a token alone gives the bits it gives in a
 * batch, and groups widen as the file's rows do.  Every fourth weight
 * row is all level -127 or all 113 (indices 0 and 15) and activations
 * reach 127 and -127, where the VNNI kernel's offset levels (up to 241)
 * and AVX2's int16 pair sums are at their largest. */
static void
test_iq4_nlx8(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { ROWS = 24, COLS = 256, NB = COLS / 32, NT = 8 };
	static float w[ROWS * COLS], x[NT * COLS], y[NT * ROWS], ys[NT * ROWS], y1[ROWS];
	static uint8_t wq[ROWS * NB * 18], packed[ROWS * NB * 18];
	static struct block_q8 xq[NT * NB];
	int bad = 0, bad_ref = 0, bad_alone = 0, bad_row = 0;

	if (k->gemm_iq4_nlx8 == NULL) {
		SKIP("%s: no IQ4_NL group kernel", k->name);
		return;
	}
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = sinf((float)i * 0.71f) * (1 + (float)(i % 7));
	for (int i = 0; i < NT * COLS; i++)
		x[i] = i % 32 == 7 ? -9.0f : i % 32 == 9 ? 9.0f : cosf((float)i * 0.3f) * 2;
	tensor_quantize_row(TT_IQ4_NL, w, wq, ROWS * COLS);
	for (int r = 0; r < ROWS; r += 4)
		for (int b = 0; b < NB; b++)
			memset(wq + (size_t)r * NB * 18 + (size_t)b * 18 + 2, r % 8 ? 0xff : 0, 16);
	ref->quantize_q8(x, xq, NT * COLS);
	q4_0x8_repack(wq, NB * 18, 0, 1, NB, packed); /* in two calls, as threads do it */
	q4_0x8_repack(wq, NB * 18, 1, ROWS / 8, NB, packed);
	for (int r = 0; r < ROWS; r++) {
		float row[COLS], deq[COLS];
		groups_dequantize_row(packed + (size_t)(r / 8) * NB * Q4_0X8_BLOCK, 1, 8 * Q4_0X8_BLOCK,
				      iq4_nlx8_unpack8, TT_IQ4_NL, r % 8, row);
		tensor_dequantize_row(TT_IQ4_NL, wq + (size_t)r * NB * 18, deq, COLS);
		bad_row += memcmp(row, deq, sizeof(row)) != 0;
	}
	CHECK(bad_row == 0, "IQ4_NL rows read back from the groups are the file's rows (%d differ)", bad_row);
	for (int nt = 1; nt <= NT; nt++) {
		k->gemm_iq4_nlx8(packed, ROWS / 8, xq, NB, nt, y, ROWS);
		gemm_iq4_nlx8_scalar(packed, ROWS / 8, xq, NB, nt, ys, ROWS);
		bad += memcmp(y, ys, (size_t)nt * ROWS * sizeof(float)) != 0;
	}
	for (int t = 0; t < NT; t++) {
		k->gemm_iq4_nlx8(packed, ROWS / 8, xq + t * NB, NB, 1, y1, ROWS);
		bad_alone += memcmp(y1, y + t * ROWS, sizeof(y1)) != 0;
		for (int r = 0; r < ROWS; r++) {
			float d = ref->dot_iq4_nl(wq + (size_t)r * NB * 18, xq + t * NB, NB);
			bad_ref += !(fabsf(y[t * ROWS + r] - d) <= 1e-5f * fabsf(d) + 1e-4f);
		}
	}
	{
		enum { RB = NB * 34 };
		static uint8_t wr[2][ROWS * RB];
		static int32_t ws[2][ROWS * NB];
		static float wd[2][ROWS * NB];
		memset(wr, 0, sizeof(wr));
		for (int r = 0; r < ROWS; r++)
			ref->widen_iq4_nl(wq + (size_t)r * NB * 18, wr[0] + r * RB, NB, ws[0] + r * NB, wd[0] + r * NB);
		for (int g = 0; g < ROWS / 8; g++)
			groups_widen(k->widen_iq4_nl, iq4_nlx8_unpack8, packed + (size_t)g * NB * Q4_0X8_BLOCK, 1,
				     8 * Q4_0X8_BLOCK, 1, wr[1] + 8 * g * RB, RB, ws[1] + 8 * g * NB,
				     wd[1] + 8 * g * NB, NB);
		CHECK(memcmp(wr[0], wr[1], sizeof(wr[0])) == 0 && memcmp(ws[0], ws[1], sizeof(ws[0])) == 0 &&
			      memcmp(wd[0], wd[1], sizeof(wd[0])) == 0,
		      "%s IQ4_NL groups widen as the file's rows do", k->name);
	}
	CHECK(bad == 0, "%s gemm_iq4_nlx8 for 1..8 tokens equals the scalar reference bit for bit: %d passes differ",
	      k->name, bad);
	CHECK(bad_alone == 0, "%s gemm_iq4_nlx8: a token alone gives what it gives among 8 (%d differ)", k->name,
	      bad_alone);
	CHECK(bad_ref == 0, "%s gemm_iq4_nlx8 equals the per-row dot within rounding: %d of %d off", k->name, bad_ref,
	      ROWS * NT);
	if (k->gemm_iq4_nlx8_pairs != NULL)
		CHECK((bad = pairs_differ(k->gemm_iq4_nlx8_pairs, gemm_iq4_nlx8_scalar, packed, ROWS / 8, xq, NB)) == 0,
		      "%s gemm_iq4_nlx8_pairs for 2..8 tokens equals the scalar reference bit for bit: %d passes "
		      "differ",
		      k->name, bad);
}

/* Q4_1, Q5_0 and Q5_1 in 8-row groups (cpu_legacy_x8.c), as test_q4_0x8:
 * every block read back is the file's bytes and rows dequantize as the
 * file's; the kernel for 1..8 tokens equals the scalar reference bit for
 * bit and the per-row dot within rounding; a token alone gives the bits
 * it gives in a batch; groups widen as the file's rows do.  Some rows are
 * all 31 (every nibble and fifth bit set: the largest products the AVX2
 * pair sums take) or all 0, with offsets, and activations reach +-127.
 * Where there are 512-bit vectors, the pairs of tokens give the same bits. */
static void
test_legacy_x8(const struct cpu_kernels *k)
{
	static const uint32_t types[] = { TT_Q4_1, TT_Q5_0, TT_Q5_1 };
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { ROWS = 24, COLS = 96 + 256, NB = COLS / 32, NT = 8, BMAX = 24 };
	static float w[ROWS * COLS], x[NT * COLS], y[NT * ROWS], ys[NT * ROWS], y1[ROWS];
	static uint8_t wq[ROWS * NB * BMAX], packed[ROWS * NB * BMAX];
	static struct block_q8 xq[NT * NB];

	if (k->gemm_q4_1x8 == NULL) {
		SKIP("%s: no Q4_1, Q5_0, Q5_1 group kernels", k->name);
		return;
	}
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = sinf((float)i * 0.71f) * (1 + (float)(i % 7));
	for (int i = 0; i < NT * COLS; i++)
		x[i] = i % 32 == 7 ? -9.0f : i % 32 == 9 ? 9.0f : cosf((float)i * 0.3f) * 2;
	ref->quantize_q8(x, xq, NT * COLS);
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		uint32_t type = types[ti];
		struct legacy_layout l = legacy_layout(type);
		size_t rb = (size_t)NB * (size_t)l.bytes, group = NB * LEGACY_X8_BLOCK(type);
		float (*dot)(const void *, const struct block_q8 *, size_t) = type == TT_Q4_1   ? ref->dot_q4_1
									      : type == TT_Q5_0 ? ref->dot_q5_0
												: ref->dot_q5_1;
		void (*gemm)(const uint8_t *, int, const struct block_q8 *, size_t, int, float *, size_t) =
			type == TT_Q4_1   ? k->gemm_q4_1x8
			: type == TT_Q5_0 ? k->gemm_q5_0x8
					  : k->gemm_q5_1x8;
		void (*gemm_ref)(const uint8_t *, int, const struct block_q8 *, size_t, int, float *, size_t) =
			type == TT_Q4_1   ? gemm_q4_1x8_scalar
			: type == TT_Q5_0 ? gemm_q5_0x8_scalar
					  : gemm_q5_1x8_scalar;
		const char *name = tensor_type_name(type);
		int bad = 0, bad_ref = 0, bad_alone = 0, bad_row = 0, bad_blk = 0;

		tensor_quantize_row(type, w, wq, ROWS * COLS);
		for (int r = 0; r < ROWS; r += 4) /* q = 31 (15) in rows 0, 8, 16; 0 in rows 4, 12, 20 */
			for (int b = 0; b < NB; b++) {
				uint8_t *blk = wq + (size_t)r * rb + (size_t)b * (size_t)l.bytes;
				memset(blk + l.qs, r % 8 ? 0 : 0xff, 16);
				if (l.qh >= 0)
					memset(blk + l.qh, r % 8 ? 0 : 0xff, 4);
			}
		legacy_x8_repack(type, wq, rb, 0, 1, NB, packed); /* in two calls, as threads do it */
		legacy_x8_repack(type, wq, rb, 1, ROWS / 8, NB, packed);
		CHECK(memcmp(wq, packed, (size_t)ROWS * rb) != 0, "%s: the groups' layout differs from the file's",
		      name);
		for (int r = 0; r < ROWS; r++) {
			float row[COLS], deq[COLS];
			for (int b = 0; b < NB; b++) {
				uint8_t blk[BMAX];
				legacy_x8_unpack(type,
						 packed + (size_t)(r / 8) * group + (size_t)b * LEGACY_X8_BLOCK(type),
						 r % 8, blk);
				bad_blk += memcmp(blk, wq + (size_t)r * rb + (size_t)b * (size_t)l.bytes,
						  (size_t)l.bytes) != 0;
			}
			legacy_x8_dequantize_row(type, packed + (size_t)(r / 8) * group, NB, r % 8, row);
			tensor_dequantize_row(type, wq + (size_t)r * rb, deq, COLS);
			bad_row += memcmp(row, deq, sizeof(row)) != 0;
		}
		CHECK(bad_blk == 0 && bad_row == 0,
		      "%s: blocks read back from the groups are the file's (%d differ), rows dequantize as its (%d "
		      "differ)",
		      name, bad_blk, bad_row);
		for (int nt = 1; nt <= NT; nt++) {
			gemm(packed, ROWS / 8, xq, NB, nt, y, ROWS);
			gemm_ref(packed, ROWS / 8, xq, NB, nt, ys, ROWS);
			bad += memcmp(y, ys, (size_t)nt * ROWS * sizeof(float)) != 0;
		}
		for (int t = 0; t < NT; t++) {
			gemm(packed, ROWS / 8, xq + t * NB, NB, 1, y1, ROWS);
			bad_alone += memcmp(y1, y + t * ROWS, sizeof(y1)) != 0;
			for (int r = 0; r < ROWS; r++) {
				float d = dot(wq + (size_t)r * rb, xq + t * NB, NB);
				bad_ref += !(fabsf(y[t * ROWS + r] - d) <= 1e-5f * fabsf(d) + 1e-4f);
			}
		}
		CHECK(bad == 0, "%s %s groups for 1..8 tokens equal the scalar reference bit for bit: %d passes differ",
		      k->name, name, bad);
		CHECK(bad_alone == 0, "%s %s groups: a token alone gives what it gives among 8 (%d differ)", k->name,
		      name, bad_alone);
		CHECK(bad_ref == 0, "%s %s groups equal the per-row dot within rounding: %d of %d off", k->name, name,
		      bad_ref, ROWS * NT);
		pairs_gemm_fn pairs = type == TT_Q4_1   ? k->gemm_q4_1x8_pairs
				      : type == TT_Q5_0 ? k->gemm_q5_0x8_pairs
							: k->gemm_q5_1x8_pairs;
		if (pairs != NULL)
			CHECK((bad = pairs_differ(pairs, gemm_ref, packed, ROWS / 8, xq, NB)) == 0,
			      "%s %s groups' pairs for 2..8 tokens equal the scalar reference bit for bit: %d passes "
			      "differ",
			      k->name, name, bad);
		{
			enum { RB34 = NB * 34 };
			static uint8_t wr[2][ROWS * RB34];
			static int32_t ws[2][ROWS * NB];
			static float wd[2][ROWS * NB], wm[2][ROWS * NB];
			memset(wr, 0, sizeof(wr));
			memset(wm, 0, sizeof(wm));
			for (int r = 0; r < ROWS; r++)
				ref->widen_legacy(type, wq + (size_t)r * rb, wr[0] + r * RB34, NB, ws[0] + r * NB,
						  wd[0] + r * NB, wm[0] + r * NB);
			/* the kernels' widening and the scalar one */
			for (int v = 0; v < 2; v++) {
				memset(wr[1], 0, sizeof(wr[1]));
				memset(wm[1], 0, sizeof(wm[1]));
				for (int g = 0; g < ROWS / 8; g++)
					(v ? widen_legacy_x8_scalar
					   : k->widen_legacy_x8)(type, packed + (size_t)g * group, NB,
								 wr[1] + 8 * g * RB34, RB34, ws[1] + 8 * g * NB,
								 wd[1] + 8 * g * NB, wm[1] + 8 * g * NB, NB);
				CHECK(memcmp(wr[0], wr[1], sizeof(wr[0])) == 0 &&
					      memcmp(ws[0], ws[1], sizeof(ws[0])) == 0 &&
					      memcmp(wd[0], wd[1], sizeof(wd[0])) == 0 &&
					      memcmp(wm[0], wm[1], sizeof(wm[0])) == 0,
				      "%s %s groups widen (%s) as the file's rows do", k->name, name,
				      v ? "scalar" : "the kernels'");
			}
		}
	}
}

/* Q8_0 repacked 8 rows to a group: rows read back exactly; the kernel,
 * for 1 to 8 tokens, equals the scalar reference bit for bit and the
 * per-row dot within rounding, and a token's result does not depend on
 * how many tokens share the pass; widening gives back the file's rows.
 * Weights and activations reach +-127, the int8 extremes. */
static void
test_q8_0x8(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { ROWS = 24, COLS = 96, NB = COLS / 32, NT = 8 };
	static float w[ROWS * COLS], x[NT * COLS];
	static uint8_t wq[ROWS * NB * 34], packed[ROWS * NB * 34], wide[8 * NB * 34];
	static struct block_q8 xq[NT * NB];
	int bad = 0, bad_ref = 0, bad_alone = 0, bad_widen = 0, bad_row = 0;

	if (k->gemm_q8_0x8 == NULL) {
		SKIP("%s: no repacked Q8_0 kernels", k->name);
		return;
	}
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = sinf((float)i * 0.71f) * (1 + (float)(i % 7));
	for (int i = 0; i < NT * COLS; i++)
		x[i] = i % 32 == 5 ? -9.0f : cosf((float)i * 0.3f) * 2; /* -9 quantizes to -127 */
	tensor_quantize_row(TT_Q8_0, w, wq, ROWS * COLS);
	ref->quantize_q8(x, xq, NT * COLS);
	q8_0x8_repack(wq, NB * 34, 0, 1, NB, packed); /* in two calls, as threads do it */
	q8_0x8_repack(wq, NB * 34, 1, ROWS / 8, NB, packed);
	float row[COLS], deq[COLS];
	for (int r = 0; r < ROWS; r++) {
		q8_0x8_dequantize_row(packed + (size_t)(r / 8) * NB * Q8_0X8_BLOCK, NB, r % 8, row);
		tensor_dequantize_row(TT_Q8_0, wq + (size_t)r * NB * 34, deq, COLS);
		bad_row += memcmp(row, deq, sizeof(row)) != 0;
	}
	CHECK(bad_row == 0, "Q8_0 rows read back from the repacked groups are the file's rows (%d differ)", bad_row);
	CHECK(memcmp(wq, packed, sizeof(wq)) != 0, "the repacked Q8_0 layout differs from the file's");
	for (int g = 0; g < ROWS / 8; g++) {
		const uint8_t *grp = packed + (size_t)g * NB * Q8_0X8_BLOCK;
		float y[NT * 8], ys[NT * 8], y1[8];
		for (int nt = 1; nt <= NT; nt++) {
			k->gemm_q8_0x8(grp, 1, xq, NB, nt, y, 8);
			gemm_q8_0x8_scalar(grp, 1, xq, NB, nt, ys, 8);
			bad += memcmp(y, ys, (size_t)nt * 8 * sizeof(float)) != 0;
		}
		for (int t = 0; t < NT; t++) {
			k->gemm_q8_0x8(grp, 1, xq + t * NB, NB, 1, y1, 8);
			bad_alone += memcmp(y1, y + 8 * t, sizeof(y1)) != 0;
			for (int r = 0; r < 8; r++) {
				float d = ref->dot_q8_0(wq + (size_t)(8 * g + r) * NB * 34, xq + t * NB, NB);
				bad_ref += fabsf(y[8 * t + r] - d) > 1e-5f * fabsf(d) + 1e-4f;
			}
		}
		k->widen_q8_0x8(grp, NB, wide, NB * 34);
		bad_widen += memcmp(wide, wq + (size_t)g * 8 * NB * 34, sizeof(wide)) != 0;
		memset(wide, 0, sizeof(wide));
		widen_q8_0x8_scalar(grp, NB, wide, NB * 34);
		bad_widen += memcmp(wide, wq + (size_t)g * 8 * NB * 34, sizeof(wide)) != 0;
	}
	/* every group in one call, into token-major rows as the matmul has them */
	static float yall[NT * ROWS], yall_ref[NT * ROWS];
	for (int nt = 1; nt <= NT; nt += NT - 1) {
		float fill = NAN;
		for (int i = 0; i < NT * ROWS; i++)
			yall[i] = yall_ref[i] = fill;
		k->gemm_q8_0x8(packed, ROWS / 8, xq, NB, nt, yall, ROWS);
		gemm_q8_0x8_scalar(packed, ROWS / 8, xq, NB, nt, yall_ref, ROWS);
		for (int i = 0; i < NT * ROWS; i++) {
			int t = i / ROWS, r = i % ROWS;
			float want = t < nt ? ref->dot_q8_0(wq + (size_t)r * NB * 34, xq + t * NB, NB) : NAN;
			bad += memcmp(&yall[i], &yall_ref[i], sizeof(float)) != 0;
			bad_ref += t < nt ? !(fabsf(yall[i] - want) <= 1e-5f * fabsf(want) + 1e-4f) : !isnan(yall[i]);
		}
	}
	CHECK(bad == 0, "%s gemm_q8_0x8 for 1..8 tokens equals the scalar reference bit for bit: %d passes differ",
	      k->name, bad);
	CHECK(bad_alone == 0, "%s gemm_q8_0x8: a token alone gives what it gives among 8 (%d differ)", k->name,
	      bad_alone);
	CHECK(bad_ref == 0, "%s gemm_q8_0x8 equals the per-row dot within rounding: %d of %d off", k->name, bad_ref,
	      ROWS * NT);
	CHECK(bad_widen == 0, "%s widen_q8_0x8 (and scalar) give back the file's rows", k->name);
	if (k->gemm_q8_0x8_pairs != NULL)
		CHECK((bad = pairs_differ(k->gemm_q8_0x8_pairs, gemm_q8_0x8_scalar, packed, ROWS / 8, xq, NB)) == 0,
		      "%s gemm_q8_0x8_pairs for 2..8 tokens equals the scalar reference bit for bit: %d passes differ",
		      k->name, bad);
}

/* The bfloat16 GEMM against double sums of the same bfloat16 values (the
 * activations rounded as the tile packer rounds them): 11 rows (a partial
 * row step), 27 tokens (a partial second tile), an odd number of pairs. */
static void
test_gemm_bf16(const struct cpu_kernels *k)
{
	enum { ROWS = 11, NT = 27, COLS = 70 };
	static uint16_t w[ROWS * COLS];
	static float x[NT * COLS], y[GEMM_BF16_ROWS * 32];
	static uint32_t tiles[2 * 16 * COLS / 2];
	int bad = 0;

	if (k->gemm_bf16 == NULL) {
		SKIP("no AVX512_BF16 on this CPU: the bfloat16 GEMM was not checked");
		return;
	}
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = f32_to_bf16(cosf((float)i * 0.37f));
	for (int i = 0; i < NT * COLS; i++)
		x[i] = sinf((float)i * 0.011f) * 3;
	k->pack_bf16_tile(x, COLS, 16, COLS, tiles);
	k->pack_bf16_tile(x + 16 * COLS, COLS, NT - 16, COLS, tiles + 16 * COLS / 2);
	for (int r0 = 0; r0 < ROWS; r0 += GEMM_BF16_ROWS) {
		int nr = ROWS - r0 < GEMM_BF16_ROWS ? ROWS - r0 : GEMM_BF16_ROWS;
		for (int ng = 1; ng <= 2; ng++) {
			k->gemm_bf16(w + r0 * COLS, COLS, nr, tiles, 16 * COLS / 2, ng, COLS, y);
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < 16 * ng && t < NT; t++) {
					double want = 0;
					for (int c = 0; c < COLS; c++)
						want += (double)bf16_to_f32(w[(r0 + r) * COLS + c]) *
							bf16_to_f32(f32_to_bf16(x[t * COLS + c]));
					bad += fabs(y[r * 32 + t] - want) > 1e-5 * fabs(want) + 1e-4;
				}
		}
	}
	/* padding lanes of the partial tile are zero, so they add nothing */
	int pad = 0;
	for (int kp = 0; kp < COLS / 2; kp++)
		for (int j = NT - 16; j < 16; j++)
			pad += tiles[16 * COLS / 2 + kp * 16 + j] != 0;
	CHECK(bad == 0 && pad == 0, "%s gemm_bf16: %d products off, %d padding values set", k->name, bad, pad);
	/* decode: rounding as the scalar rounding, a dot of odd length */
	uint16_t xb[NT * COLS];
	int round_bad = 0;
	k->f32_to_bf16(x, xb, NT * COLS - 5);
	for (int i = 0; i < NT * COLS - 5; i++)
		round_bad += xb[i] != f32_to_bf16(x[i]);
	/* lengths through the tail alone, the 32-wide loop and the 128-wide one */
	static const int lens[] = { 1, 31, 32, 63, 128, 129, 200, 700 };
	bad = 0;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		double want = 0;
		for (int c = 0; c < lens[i]; c++)
			want += (double)bf16_to_f32(w[c]) * bf16_to_f32(xb[c]);
		float got = k->dot_bf16_bf16(w, xb, (size_t)lens[i]);
		bad += fabs(got - want) > 1e-5 * fabs(want) + 1e-4;
	}
	CHECK(round_bad == 0 && bad == 0, "%s bfloat16 decode: %d roundings differ, %d dots off", k->name, round_bad,
	      bad);
}

/* Every SIMD level this CPU can run, not only the one it would pick. */
static void
test_simd(const struct cpu_kernels *best)
{
	test_kernels(best);
	test_q8k(best);
	if (strcmp(best->name, "avx512-vnni") == 0)
		test_q8k(cpu_kernels_avx2());
	test_gemm_f32(best);
	test_gemm_bf16(best);
	test_q4_0x8(best);
	test_q8_0x8(best);
	test_q8k_dots(best);
	test_legacy(best);
	test_kx8(best);
	test_q6x8(best);
	test_group_types(best);
	test_iq4_nlx8(best);
	test_legacy_x8(best);
	test_dot4(best);
	test_pack_half_panel(best, 0);
	test_pack_half_panel(best, 1);
	if (strcmp(best->name, "avx512-vnni") == 0) {
		test_dot4(cpu_kernels_avx2());
		test_q4_0x8(cpu_kernels_avx2());
		/* no test_q8_0x8: AVX2 has no Q8_0 groups (cpu_dot.c says why) */
		test_q8k_dots(cpu_kernels_avx2());
		test_legacy(cpu_kernels_avx2());
		test_kx8(cpu_kernels_avx2());
		test_q6x8(cpu_kernels_avx2());
		test_group_types(cpu_kernels_avx2());
		test_iq4_nlx8(cpu_kernels_avx2());
		test_legacy_x8(cpu_kernels_avx2());
	}
	if (strcmp(best->name, "avx512-vnni") == 0)
		test_kernels(cpu_kernels_avx2());
}

int
main(void)
{
	test_gemm();
	test_gemm_amx();
	test_gemm_q6_amx();
	test_halfs();
	test_blocks();
	test_round_trips();
	/* the pair kernels wherever there are 512-bit vectors, whatever
	 * this CPU's 512-bit vpdpbusd measured (cpu_kernels_get): their bits
	 * are checked here, their speed decides elsewhere */
	setenv("PRIVAI_PAIRS", "1", 1);
	const struct cpu_kernels *best = cpu_kernels_get();
	CHECK(strcmp(best->name, "avx512-vnni") != 0 || best->gemm_q4_0x8_pairs != NULL,
	      "PRIVAI_PAIRS=1 gives the pair kernels on this AVX-512 CPU");
	/* with decode's software prefetch off and on (cpu_stream_prefetch):
	 * only the speed may differ */
	for (int pf = 0; pf < 2; pf++) {
		cpu_stream_prefetch = cpu_wide_prefetch = pf;
		test_simd(best);
	}
	if (strcmp(best->name, "scalar") == 0)
		SKIP("no SIMD kernels on this CPU: only the scalar ones were checked");
	return test_summary();
}
