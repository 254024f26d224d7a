/*
 * The chunk dequantizer the CUDA kernels run (kernels/dequant_chunk.h),
 * checked on the host against tensor_dequantize_row(), type by type: the
 * layout constants it carries for nvcc, then rows of random bytes (every
 * bit pattern a block can hold, scales included) and rows of quantized
 * real values, which must decode to the same floats, bit for bit.
 */
#include <math.h>

#include "testlib.h"
#include "privai/tensor_type.h"
#include "kernels/dequant_chunk.h"

static const uint32_t types[] = { TT_F32,  TT_F16,  TT_BF16, TT_Q4_0, TT_Q4_1, TT_Q5_0,   TT_Q5_1,  TT_Q8_0,
				  TT_Q2_K, TT_Q3_K, TT_Q4_K, TT_Q5_K, TT_Q6_K, TT_IQ4_NL, TT_IQ4_XS };

#define N 512 /* two K-quant super-blocks, sixteen 32-blocks */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint8_t
rnd8(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint8_t)(rng >> 24);
}

/* Both NaN, or the same bits. */
static int
same(float a, float b)
{
	return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

/* Decode `row` chunk by chunk and compare with the CPU's whole-row decode;
 * returns the number of elements that differ. */
static int
compare_row(uint32_t type, const uint8_t *row, int *first_bad)
{
	float want[N], got[N];
	int bad = 0;

	tensor_dequantize_row(type, row, want, N);
	for (int64_t c = 0; c < N / 32; c++)
		dq_chunk(type, row, c, got + c * 32);
	*first_bad = -1;
	for (int i = 0; i < N; i++)
		if (!same(want[i], got[i])) {
			if (bad++ == 0)
				*first_bad = i;
		}
	return bad;
}

static void
test_layout(void)
{
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		const struct tensor_type_info *ti = tensor_type_get(types[k]);
		CHECK(ti != NULL && (uint32_t)dq_block_bytes(types[k]) == ti->block_bytes &&
			      (uint32_t)dq_block_size(types[k]) == ti->block_elems,
		      "%s: %d bytes per %d weights, as the type table says", ti ? ti->name : "?",
		      dq_block_bytes(types[k]), dq_block_size(types[k]));
	}
	CHECK(dq_block_bytes(TT_MXFP4) == 0, "a type the chunk decoder lacks is told apart (MXFP4)");
}

static void
test_random_bytes(void)
{
	uint8_t row[N * 4];

	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		int bad = 0, first = -1;
		for (int rep = 0; rep < 200 && bad == 0; rep++) {
			for (size_t i = 0; i < sizeof(row); i++)
				row[i] = rnd8();
			bad = compare_row(types[k], row, &first);
		}
		CHECK(bad == 0, "%s: 200 rows of random bytes decode alike (%d differ, first at %d)",
		      tensor_type_get(types[k])->name, bad, first);
	}
}

static void
test_quantized(void)
{
	float src[N];
	uint8_t row[N * 4];

	for (int i = 0; i < N; i++)
		src[i] = sinf((float)i * 0.37f) * (1.0f + (float)(i % 7)) - 0.25f;
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		int first = -1;
		/* the random rows above cover the types with no quantizer */
		if (tensor_quantize_row(types[k], src, row, N) < 0)
			continue;
		int bad = compare_row(types[k], row, &first);
		CHECK(bad == 0, "%s: a quantized row decodes alike (%d differ, first at %d)",
		      tensor_type_get(types[k])->name, bad, first);
	}
}

/* A row copied a segment at a time, as k_mmv and k_mmv_next stage it in shared
 * memory: chunk c0 + i of the row decodes as chunk i of the copy, and the
 * segments' bytes add up to the row's. */
static void
test_segments(void)
{
	uint8_t row[N * 4], copy[N * 4];
	float want[32], got[32];

	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		int bad = 0;
		for (size_t i = 0; i < sizeof(row); i++)
			row[i] = rnd8();
		for (int seg = 8; seg <= 16; seg += 8) {
			int64_t total = 0;
			for (int64_t c0 = 0; c0 < N / 32; c0 += seg) {
				int64_t nc = N / 32 - c0 < seg ? N / 32 - c0 : seg;
				memcpy(copy, row + dq_chunks_bytes(types[k], c0),
				       (size_t)dq_chunks_bytes(types[k], nc));
				total += dq_chunks_bytes(types[k], nc);
				for (int64_t i = 0; i < nc; i++) {
					dq_chunk(types[k], row, c0 + i, want);
					dq_chunk(types[k], copy, i, got);
					for (int j = 0; j < 32; j++)
						bad += !same(want[j], got[j]);
				}
			}
			bad += total != (int64_t)tensor_type_get(types[k])->block_bytes * N /
						(int64_t)tensor_type_get(types[k])->block_elems;
		}
		CHECK(bad == 0, "%s: a row copied 8 and 16 chunks at a time decodes as the row (%d differ)",
		      tensor_type_get(types[k])->name, bad);
	}
}

int
main(void)
{
	test_layout();
	test_random_bytes();
	test_quantized();
	test_segments();
	return test_summary();
}
