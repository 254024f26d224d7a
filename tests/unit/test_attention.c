/*
 * The CPU attention over the half-precision paged cache, against a
 * reference written the obvious way (double precision, two passes over
 * the scores), for every kernel set this CPU runs: one position, a
 * partial chunk, several chunks, head sizes that are not a multiple of the
 * vector width, one and several query heads per KV head, one token and
 * runs of a prompt's tokens (each seeing one position more than the one
 * before), and block tables that scatter the positions, with K in the
 * cache's tiles of 16 positions stored value by value.  The small kernels
 * it is made of are checked against the scalar ones and against libm, and
 * a row's scores against the same row among others.
 */
#include <math.h>

#include "testlib.h"
#include "kernels/cpu_dot.h"
#include "privai/tensor_type.h"

#define MAX_POS 80
/* positions a block of the pool: 16 (a chunk of cpu_attend_f16 is one
 * block, as in the engine) or 32 (two chunks a block) */
static int block_shift;

static float
rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* softmax(q . k / sqrt(hd)) . v with q, k, v as the half values they
 * are; K in tiles (struct kv_view): value i of row r at kc[(r - r % 16) *
 * stride + i * 16 + r % 16] */
static void
reference(const uint16_t *kc, const uint16_t *vc, size_t stride, const int32_t *blocks, int len, const float *q, int hd,
	  double *out)
{
	double s[MAX_POS], max = -INFINITY, sum = 0;

	for (int p = 0; p < len; p++) {
		size_t row = ((size_t)blocks[p >> block_shift] << block_shift) + (size_t)(p & ((1 << block_shift) - 1));
		double d = 0;
		for (int i = 0; i < hd; i++)
			d += (double)fp16_to_f32(f32_to_fp16(q[i])) *
			     fp16_to_f32(kc[(row - row % 16) * stride + (size_t)i * 16 + row % 16]);
		s[p] = d / sqrt((double)hd);
		max = s[p] > max ? s[p] : max;
	}
	for (int p = 0; p < len; p++)
		sum += (s[p] = exp(s[p] - max));
	for (int i = 0; i < hd; i++)
		out[i] = 0;
	for (int p = 0; p < len; p++) {
		size_t row = ((size_t)blocks[p >> block_shift] << block_shift) + (size_t)(p & ((1 << block_shift) - 1));
		for (int i = 0; i < hd; i++)
			out[i] += s[p] / sum * fp16_to_f32(vc[row * stride + i]);
	}
}

static void
test_attend(const struct cpu_kernels *k)
{
	enum { ROWS = 128, KV_HEADS = 2, PAD = 3 };
	static const int lens[] = { 1, 5, 16, 17, 33, MAX_POS };
	static const int hds[] = { 64, 80, 7, 256 }; /* the chunk kernels: 4, 5 and 16 vectors */
	static const int nhs[] = { 1, 3, 4, 8 };     /* 8: two batches of heads in the output kernel */
	/* positions 0..79 through 5 blocks of 16 out of 8, or 3 of 32 out of
	 * 4, out of order */
	static const int32_t blocks16[] = { 5, 2, 7, 0, 3 }, blocks32[] = { 2, 0, 3 };
	const int32_t *blocks = block_shift == 4 ? blocks16 : blocks32;
	static uint16_t kc[ROWS * KV_HEADS * 256], vc[ROWS * KV_HEADS * 256];
	static float q[ATT_ROWS_MAX * (256 + PAD)], out[ATT_ROWS_MAX * (256 + PAD)];
	double want[256], worst = 0;
	unsigned seed = 7;
	int bad = 0, runs = 0;

	for (size_t i = 0; i < sizeof(kc) / sizeof(kc[0]); i++) {
		kc[i] = f32_to_fp16(rnd(&seed) * 2);
		vc[i] = f32_to_fp16(rnd(&seed));
	}
	for (size_t a = 0; a < sizeof(hds) / sizeof(hds[0]); a++)
		for (size_t b = 0; b < sizeof(nhs) / sizeof(nhs[0]); b++)
			for (size_t c = 0; c < sizeof(lens) / sizeof(lens[0]); c++)
				/* one token (decode), two, and as many as a call takes
				 * (a prompt: 8 to 32 query rows, masked at the end) */
				for (int nt = 1; nt <= ATT_ROWS_MAX / nhs[b];
				     nt = nt == 1 ? 2 : ATT_ROWS_MAX / nhs[b]) {
					int hd = hds[a], nh = nhs[b];
					int len = lens[c] + nt - 1 <= MAX_POS ? lens[c] : MAX_POS - nt + 1;
					size_t stride = (size_t)KV_HEADS * (size_t)hd, qs = (size_t)nh * hd + PAD;
					/* the second KV head: its V values start hd into each
					 * row, its K tiles 16 * hd into each tile's span */
					struct kv_view kv = { kc + 16 * hd, vc + hd, stride, blocks, block_shift };
					for (size_t i = 0; i < (size_t)nt * qs; i++) {
						q[i] = rnd(&seed) * 3;
						out[i] = NAN;
					}
					cpu_attend_f16(k, &kv, len, nt, q, qs, nh, hd, out);
					for (int t = 0; t < nt; t++) {
						for (int g = 0; g < nh; g++) {
							const float *o = out + t * qs + (size_t)g * hd;
							reference(kc + 16 * hd, vc + hd, stride, blocks, len + t,
								  q + t * qs + (size_t)g * hd, hd, want);
							for (int i = 0; i < hd; i++) {
								double e = fabs(o[i] - want[i]);
								worst = e > worst ? e : worst;
								bad += !(e <= 1e-5 + 1e-4 * fabs(want[i]));
							}
						}
						for (int i = 0; i < PAD; i++) /* nothing written between tokens */
							bad += !isnan(out[t * qs + (size_t)nh * hd + i]);
					}
					runs++;
					if (nt == ATT_ROWS_MAX / nh)
						break;
				}
	CHECK(bad == 0, "%s attention over %d shapes, blocks of %d: %d values off the reference (worst %.2e)", k->name,
	      runs, 1 << block_shift, bad, worst);
}

static void
test_small_kernels(const struct cpu_kernels *k)
{
	const struct cpu_kernels *ref = cpu_kernels_scalar();
	enum { N = 203 }; /* a tail after every vector width */
	float x[N], y1[N], y2[N], e[N], arg[N];
	uint16_t h1[N], h2[N];
	unsigned seed = 3;
	double worst = 0;

	for (int i = 0; i < N; i++)
		x[i] = rnd(&seed) * 1000;
	x[0] = 65519.0f; /* rounds to 65504, the largest half */
	x[1] = 1e-6f;    /* a subnormal half */
	x[2] = 0.0f;
	k->f32_to_f16(x, h1, N);
	ref->f32_to_f16(x, h2, N);
	CHECK(memcmp(h1, h2, sizeof(h1)) == 0, "%s f32_to_f16 rounds as the scalar version", k->name);
	for (int i = 0; i < N; i++)
		y1[i] = y2[i] = (float)i;
	k->axpy_f16(0.37f, h1, y1, N);
	ref->axpy_f16(0.37f, h1, y2, N);
	int same = 1;
	for (int i = 0; i < N; i++)
		same &= fabsf(y1[i] - y2[i]) <= 1e-6f * fabsf(y2[i]) + 1e-6f;
	CHECK(same, "%s axpy_f16 equals the scalar version", k->name);
	for (int i = 0; i < N; i++)
		arg[i] = e[i] = -100.0f + (float)i * 0.55f; /* -100 .. 11: under the clamp, through 0, over 1 */
	k->exp_f32(e, N);
	for (int i = 0; i < N; i++) {
		double want = exp((double)arg[i]), err = fabs(e[i] - want) / want;
		if (want > 1e-37)
			worst = err > worst ? err : worst;
		else if (e[i] > 1e-37f)
			worst = 1;
	}
	CHECK(worst < 1e-6, "%s exp_f32 within %.1e relative of libm", k->name, worst);
}

/* A row's scores the same bits whatever rows are beside it (a prompt's
 * result must not depend on how its batch was cut), every row against a
 * double-precision sum, and nothing written past the rows asked for. */
static void
test_scores_alone(const struct cpu_kernels *k)
{
	static const int hds[] = { 64, 7, 80, 256 };
	uint16_t kt[256 * 16];
	float q[ATT_ROWS_MAX * 256], all[(ATT_ROWS_MAX + 1) * 16], one[2 * 16];
	unsigned seed = 11;
	int differ = 0, off = 0, spill = 0;

	for (size_t i = 0; i < sizeof(kt) / sizeof(kt[0]); i++)
		kt[i] = f32_to_fp16(rnd(&seed) * 2);
	for (size_t a = 0; a < sizeof(hds) / sizeof(hds[0]); a++) {
		int hd = hds[a];
		for (int i = 0; i < ATT_ROWS_MAX * hd; i++)
			q[i] = fp16_to_f32(f32_to_fp16(rnd(&seed) * 3));
		for (int nr = 1; nr <= ATT_ROWS_MAX; nr += nr < 8 ? 1 : 7) {
			for (int i = 0; i < (nr + 1) * 16; i++)
				all[i] = NAN;
			k->att_scores_tile(kt, q, nr, hd, 0.125f, all);
			for (int i = 0; i < 16; i++)
				spill += !isnan(all[nr * 16 + i]);
			for (int r = 0; r < nr; r++) {
				one[16] = NAN;
				k->att_scores_tile(kt, q + (size_t)r * hd, 1, hd, 0.125f, one);
				differ += memcmp(one, all + r * 16, 16 * sizeof(float)) != 0;
				spill += !isnan(one[16]);
				for (int i = 0; i < 16; i++) {
					double want = 0;
					for (int d = 0; d < hd; d++)
						want += (double)q[(size_t)r * hd + d] * fp16_to_f32(kt[d * 16 + i]);
					want *= 0.125;
					off += !(fabs(all[r * 16 + i] - want) <= 1e-5 + 1e-5 * fabs(want));
				}
			}
		}
	}
	CHECK(differ == 0 && off == 0 && spill == 0,
	      "%s scores of a K tile: %d rows differ alone, %d values off the reference, %d written past the rows",
	      k->name, differ, off, spill);
}

int
main(void)
{
	const struct cpu_kernels *best = cpu_kernels_get();

	test_small_kernels(best);
	test_scores_alone(best);
	for (block_shift = 4; block_shift <= 5; block_shift++)
		test_attend(best);
	block_shift = 4;
	test_attend(cpu_kernels_scalar());
	test_scores_alone(cpu_kernels_scalar());
	if (strcmp(best->name, "avx512-vnni") == 0) {
		test_small_kernels(cpu_kernels_avx2());
		test_scores_alone(cpu_kernels_avx2());
		test_attend(cpu_kernels_avx2());
	}
	return test_summary();
}
