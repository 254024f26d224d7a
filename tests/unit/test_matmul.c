/*
 * The CPU backend's matmul through its public operations, against a
 * double-precision reference, for the half types and the quantized ones
 * (their dequantized weights) on every path it picks:
 * one and two tokens (the dots), 3 and 8 (a decode batch: a tile mostly
 * padding), 17 and 40 (partial tiles), 130 (past oneDNN's 128-token
 * chunk), on 96 and 300 columns (two panels of the packed float GEMM, the
 * second ending mid-vector), on row counts that are not a multiple of any row block (5) and
 * that cross the BF16 GEMM's 64-row chunk in a thread's share (600); for every kernel set
 * this CPU runs (PRIVAI_SIMD), and with oneDNN forced (PRIVAI_ONEDNN=1)
 * where the library is installed.  Where the CPU has AMX tiles, F16 and
 * BF16 prompts on them too: shapes that fill the tiles (rows a multiple of
 * 32, columns of 32), across the GEMM's column pass (AMX_KC), its row
 * super-block (AMX_SB_ROWS) and its token chunk (AMX_TOKENS).
 */
#include <math.h>
#include <stdint.h>

#include "testlib.h"
#include "privai/compute.h"
#include "privai/status.h"
#include "privai/tensor_type.h"
#include "kernels/cpu_dot.h"
#include "kernels/cpu_impl.h"
#include "kernels/cpu_onednn.h"

#define COLS 96                /* half types: 6 vectors, not a multiple of 64 */
#define COLS2 300              /* half types again: past a packed panel (256), ending mid-vector */
#define QCOLS 256              /* quantized types: one super-block of the k-quants */
#define AMX_COLS (AMX_KC + 32) /* two column passes, the second a step wide */
#define MAX_ROWS 600
#define MAX_TOKENS 150
/* and one prompt past the packed float GEMM's token pass, on 70 rows of
 * COLS2 (x and y hold it) */
#define LONG_TOKENS (GEMM_PK_TOKENS + 8)
/* and one past every quantized type's crossover from its groups to the
 * GEMM (the last at 1024 tokens), on 64 rows of QCOLS */
#define LONG_Q_TOKENS 1032
#define X_FLOATS (LONG_Q_TOKENS * QCOLS > MAX_TOKENS * AMX_COLS ? LONG_Q_TOKENS * QCOLS : MAX_TOKENS * AMX_COLS)
_Static_assert(LONG_TOKENS *COLS2 <= X_FLOATS && LONG_TOKENS * 70 <= MAX_TOKENS * MAX_ROWS &&
		       LONG_Q_TOKENS * 64 <= MAX_TOKENS * MAX_ROWS && LONG_Q_TOKENS > LONG_TOKENS,
	       "x and y hold the long prompts");

static float x[X_FLOATS], y[MAX_TOKENS * MAX_ROWS];
static float wf[MAX_ROWS * AMX_COLS]; /* the weights as the kernels see them */
static uint8_t wbytes[MAX_ROWS * AMX_COLS * sizeof(float)];

static float
value(unsigned i, float scale)
{
	return sinf((float)i * 0.61f + 0.3f) * scale;
}

/* float sums throughout (the rest quantize the activations to 8 bits) */
static int
is_float(uint32_t type)
{
	return type == TT_F16 || type == TT_BF16 || type == TT_F32;
}

/* How far y is from the reference: the worst error over the row's sum of
 * |w x|, so cancellation does not make a tolerance meaningless. */
static double
worst_error(uint32_t type, int rows, int cols, int n)
{
	/* bfloat16 kernels (ours and oneDNN's) round the activations too */
	int round_x = type == TT_BF16 && strstr(compute_cpu_path(type, n), "bfloat16") != NULL;
	double worst = 0;

	for (int t = 0; t < n; t++)
		for (int r = 0; r < rows; r++) {
			double want = 0, mag = 0;
			for (int c = 0; c < cols; c++) {
				double w = wf[r * cols + c];
				double a = round_x ? bf16_to_f32(f32_to_bf16(x[t * cols + c])) : x[t * cols + c];
				want += w * a;
				mag += fabs(w * a);
			}
			double e = fabs(y[t * rows + r] - want) / (mag + 1e-6);
			if (isnan(e) || e > worst) /* a value never written stays NaN */
				worst = e;
		}
	return worst;
}

/* The weights of `type`, rows x cols, in wbytes, and as floats in wf. */
static void
make_weights(uint32_t type, int rows, int cols)
{
	size_t row_bytes = tensor_type_row_bytes(type, (uint64_t)cols);
	float row[AMX_COLS];
	int bad = 0;

	for (int r = 0; r < rows; r++) {
		/* each 32-value sub-block of a row at its own magnitude: with
		 * one magnitude for all, every K-quant sub-block got the same
		 * 6-bit scale, and a kernel that took one sub-block's scale for
		 * another's gave the right products */
		for (int c = 0; c < cols; c++)
			row[c] = value((unsigned)(r * cols + c), 1.0f) * (0.25f + 0.125f * (float)((c / 32 + r) % 7));
		bad += tensor_quantize_row(type, row, wbytes + (size_t)r * row_bytes, (size_t)cols) != PRIVAI_OK;
		bad += tensor_dequantize_row(type, wbytes + (size_t)r * row_bytes, wf + (size_t)r * cols,
					     (size_t)cols) != PRIVAI_OK;
	}
	if (bad > 0)
		CHECK(0, "%d %s rows would not quantize", bad, tensor_type_name(type));
}

/* One weight of `type`, rows x cols, times the first ns[i] tokens of x
 * for each i, each product within bound of the reference.  Returns 1
 * where the first ns[0] tokens' outputs were the same bits in every
 * product, 0 where not, -1 where the weight would not prepare. */
static int
check_weight(struct compute *c, uint32_t type, int rows, int cols, const int *ns, int nns, double bound,
	     const char *mode)
{
	static float first[MAX_TOKENS * MAX_ROWS];
	struct weight w = { type, rows, cols, tensor_type_row_bytes(type, (uint64_t)cols), wbytes };
	struct compute_weight cw;
	int same = 1;

	make_weights(type, rows, cols);
	if (c->ops->prepare_weight(c, &w, &cw) != PRIVAI_OK) {
		CHECK(0, "prepare_weight %s", tensor_type_name(type));
		return -1;
	}
	/* float matrices are streamed from a copy in 2 MB pages (their rows
	 * as the file has them), no longer from the file's 4 KB ones */
	if ((type == TT_F16 || type == TT_BF16) && rows > 1)
		CHECK(cw.w.data != w.data && (uintptr_t)cw.w.data % ((uintptr_t)2 << 20) == 0 &&
			      memcmp(cw.w.data, w.data, (size_t)rows * w.row_bytes) == 0,
		      "%s %s %d x %d: the weight is a copy in 2 MB pages with the file's bytes", mode,
		      tensor_type_name(type), rows, cols);
	/* the embedding lookup reads the same prepared copy (8-row groups
	 * where the type is repacked): the rows the file has, last one first */
	{
		int32_t tokens[3] = { rows - 1, 0, rows / 2 };
		struct compute_batch b = { .n = 3, .tokens = tokens };
		int bad = 0;
		c->ops->set_batch(c, &b);
		c->ops->get_rows(c, &cw, y);
		for (int t = 0; t < 3; t++)
			bad += memcmp(y + (size_t)t * cols, wf + (size_t)tokens[t] * cols,
				      (size_t)cols * sizeof(float)) != 0;
		CHECK(bad == 0, "%s %s %d x %d: get_rows gives the file's rows (%d of 3 differ)", mode,
		      tensor_type_name(type), rows, cols, bad);
	}
	for (int ni = 0; ni < nns; ni++) {
		int n = ns[ni];
		for (int i = 0; i < n * rows; i++)
			y[i] = NAN;
		c->ops->matmul(c, &cw, x, n, y);
		double e = worst_error(type, rows, cols, n);
		CHECK(e < bound, "%s %s %d x %d x %d tokens (%s): error %.3g", mode, tensor_type_name(type), rows, cols,
		      n, compute_cpu_path(type, n), e);
		if (ni == 0)
			memcpy(first, y, (size_t)n * (size_t)rows * sizeof(float));
		else
			same &= memcmp(first, y, (size_t)ns[0] * (size_t)rows * sizeof(float)) == 0;
	}
	c->ops->release_weight(c, &cw);
	return same;
}

static void
check_type(struct compute *c, uint32_t type, int cols, const char *mode)
{
	static const int rowss[] = { 5, 70, MAX_ROWS };
	static const int ns[] = { 1, 2, 3, 8, 12, 17, 40, MAX_TOKENS };
	/* fp32 sums: a few ulps of float over the magnitude; the int8 paths
	 * round the activations to 8 bits (6.6e-4 measured at worst) */
	double bound = is_float(type) ? 1e-5 : 2e-3;

	for (int i = 0; i < MAX_TOKENS * cols; i++)
		x[i] = value((unsigned)i * 7u + 3u, 2.0f);
	for (size_t ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++)
		if (check_weight(c, type, rowss[ri], cols, ns, (int)(sizeof(ns) / sizeof(ns[0])), bound, mode) < 0)
			return;
}

/* A prompt of LONG_TOKENS: two passes of the packed float GEMM, the
 * second 8 tokens, each token as the reference has it. */
static void
check_long(struct compute *c, uint32_t type, const char *mode)
{
	static const int ns[] = { LONG_TOKENS };

	for (int i = 0; i < LONG_TOKENS * COLS2; i++)
		x[i] = value((unsigned)i * 7u + 3u, 2.0f);
	check_weight(c, type, 70, COLS2, ns, 1, 1e-5, mode);
}

/* A quantized weight of 8-row groups (where its type is repacked) under
 * a long prompt: past every type's crossover from the groups to the
 * GEMM, whose rows come widened from the groups (where the groups take
 * two tokens a vector, Q5_0's and Q5_1's at 128, Q4_1's, Q6_K's and
 * IQ4_XS's at 256, Q4_0's and Q5_K's at 512, Q4_K's and Q3_K's at 1024;
 * else Q3_K's at 176). */
static void
check_long_quantized(struct compute *c, uint32_t type, const char *mode)
{
	static const int ns[] = { LONG_Q_TOKENS };

	/* where this kernel set has a GEMM for the type (a prompt of a million
	 * tokens takes it), the long prompt takes it too */
	char far[256];
	snprintf(far, sizeof(far), "%s", compute_cpu_path(type, 1 << 20));
	if (strstr(far, "GEMM") != NULL)
		CHECK(strstr(compute_cpu_path(type, LONG_Q_TOKENS), "GEMM") != NULL,
		      "%s %s: %d tokens take the GEMM (%s)", mode, tensor_type_name(type), LONG_Q_TOKENS,
		      compute_cpu_path(type, LONG_Q_TOKENS));
	for (int i = 0; i < LONG_Q_TOKENS * QCOLS; i++)
		x[i] = value((unsigned)i * 7u + 3u, 2.0f);
	check_weight(c, type, 64, QCOLS, ns, 1, 2e-3, mode);
}

/* matmul_n (Q, K and V; gate and up in one call) gives each weight
 * exactly what matmul gives it: three weights of `type` (64, 16 and 24
 * rows, 8-row groups where the type is repacked) and one of another type
 * (the call computes it on its own), for decode and prefill sizes. */
static void
check_fused(struct compute *c, uint32_t type, uint32_t other, int cols)
{
	static const int rows[4] = { 64, 16, 24, 8 };
	static const int ns[] = { 1, 3, 8, 17, 40 };
	static uint8_t wq[4][64 * COLS2 * sizeof(float)];
	static float ys[4][MAX_TOKENS * 64], y1[MAX_TOKENS * 64];
	struct compute_weight cw[4];
	const struct compute_weight *ws[4] = { &cw[0], &cw[1], &cw[3], &cw[2] };
	float *out[4] = { ys[0], ys[1], ys[3], ys[2] };
	int bad = 0;

	for (int i = 0; i < 4; i++) {
		uint32_t t = i == 3 ? other : type;
		size_t rb = tensor_type_row_bytes(t, (uint64_t)cols);
		float row[COLS2];
		for (int r = 0; r < rows[i]; r++) {
			for (int k = 0; k < cols; k++)
				row[k] = value((unsigned)((i * 97 + r) * cols + k), 1.0f);
			tensor_quantize_row(t, row, wq[i] + (size_t)r * rb, (size_t)cols);
		}
		struct weight w = { t, rows[i], cols, rb, wq[i] };
		if (c->ops->prepare_weight(c, &w, &cw[i]) != PRIVAI_OK) {
			CHECK(0, "prepare_weight %s", tensor_type_name(t));
			return;
		}
	}
	for (int i = 0; i < MAX_TOKENS * cols; i++)
		x[i] = value((unsigned)i * 5u + 1u, 2.0f);
	for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
		int n = ns[ni];
		c->ops->matmul_n(c, ws, 4, x, n, out);
		for (int i = 0; i < 4; i++) {
			c->ops->matmul(c, &cw[i], x, n, y1);
			bad += memcmp(y1, ys[i], (size_t)n * (size_t)rows[i] * sizeof(float)) != 0;
		}
	}
	CHECK(bad == 0, "%s matmul_n of %s weights (and one %s) equals matmul: %d of %d differ",
	      compute_cpu_simd_name(), tensor_type_name(type), tensor_type_name(other), bad,
	      (int)(4 * sizeof(ns) / sizeof(ns[0])));
	for (int i = 0; i < 4; i++)
		c->ops->release_weight(c, &cw[i]);
}

/* A CPU backend on 2 threads, its buffers sized for this file's
 * largest matmul; NULL (a failed check) where it will not start. */
static struct compute *
new_backend(void)
{
	struct compute_params p = { .n_threads = 2 };
	struct compute *c;
	char err[PRIVAI_ERR_LEN] = "reserve() failed";
	struct compute_shape s = { AMX_COLS > MAX_ROWS ? AMX_COLS : MAX_ROWS, LONG_Q_TOKENS, 16, 1, 16, 0, 8, 16, 0 };
	size_t kv_bytes;

	if (compute_new("cpu", &p, &c, err) != PRIVAI_OK)
		c = NULL;
	else if (c->ops->reserve(c, &s, &kv_bytes) != PRIVAI_OK) {
		compute_free(c);
		c = NULL;
	}
	if (c == NULL)
		CHECK(0, "cpu backend: %s", err);
	return c;
}

/* swiglu (a = silu(a) * b) against double precision: 1001 values (a
 * thread's share crosses the 256-value chunks and ends mid-vector), from
 * -100 to 100, where e^-a leaves the float range at both ends. */
static void
check_swiglu(struct compute *c, const char *label)
{
	enum { N = 1001 };
	static float a[N], b[N];
	double worst = 0;

	for (int i = 0; i < N; i++) {
		a[i] = -100.0f + 200.0f * (float)i / (N - 1);
		if (i % 3 == 0)
			a[i] *= 0.01f; /* around 0 as well, where most activations are */
		b[i] = value((unsigned)i, 1.5f);
	}
	float a0[N], parts[N];
	memcpy(a0, a, sizeof(a));
	memcpy(parts, a, sizeof(a));
	c->ops->swiglu(c, a, b, N);
	/* an element's result must not depend on where a range ends (a
	 * thread's part, a tensor-parallel rank's slice): in odd pieces, the
	 * same bits */
	for (int at = 0, len = 1; at < N; at += len, len += 6)
		c->ops->swiglu(c, parts + at, b + at, (size_t)(at + len <= N ? len : N - at));
	CHECK(memcmp(parts, a, sizeof(a)) == 0, "%s: swiglu in odd pieces gives the same bits as in one", label);
	for (int i = 0; i < N; i++) {
		double want = (double)a0[i] / (1.0 + exp(-(double)a0[i])) * b[i];
		double e = fabs(a[i] - want) / (fabs(want) + 1e-30);
		if (fabs(want) < 1e-30)
			e = fabs(a[i]) < 1e-30 ? 0 : 1;
		if (isnan(e) || e > worst)
			worst = e;
	}
	CHECK(worst < 2e-6, "%s: swiglu within %.1e of double precision", label, worst);
	printf("   %s: swiglu within %.1e of double precision\n", label, worst);
}

static void
check_level(const char *simd)
{
	static const uint32_t quantized[] = { TT_Q8_0, TT_Q4_0,   TT_Q4_K, TT_Q5_K, TT_Q6_K, TT_Q3_K,
					      TT_Q2_K, TT_IQ4_XS, TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_NL };
	size_t nq = sizeof(quantized) / sizeof(quantized[0]);

	setenv("PRIVAI_SIMD", simd, 1);
	struct compute *c = new_backend();
	if (c == NULL)
		return;
	check_type(c, TT_F16, COLS, compute_cpu_simd_name());
	check_type(c, TT_F16, COLS2, compute_cpu_simd_name());
	check_type(c, TT_BF16, COLS, compute_cpu_simd_name());
	check_type(c, TT_BF16, COLS2, compute_cpu_simd_name());
	check_type(c, TT_F32, COLS2, compute_cpu_simd_name());
	check_long(c, TT_F16, compute_cpu_simd_name());
	for (size_t i = 0; i < nq; i++) {
		check_type(c, quantized[i], QCOLS, compute_cpu_simd_name());
		check_long_quantized(c, quantized[i], compute_cpu_simd_name());
		check_fused(c, quantized[i], quantized[(i + 1) % nq], QCOLS);
	}
	check_fused(c, TT_F16, TT_BF16, COLS2);
	check_fused(c, TT_BF16, TT_F16, COLS);
	check_swiglu(c, compute_cpu_simd_name());
	compute_free(c);
}

/* BF16 prompts take the vdpbf16ps GEMM or rows converted to float,
 * whichever this CPU runs faster (cpu_kernels_get measures it); both,
 * with PRIVAI_BF16_GEMM deciding, where the CPU has the instruction. */
static void
check_bf16_paths(void)
{
	static const char *const want[] = { "float GEMM", "vdpbf16ps" };

	setenv("PRIVAI_SIMD", "best", 1);
	setenv("PRIVAI_AMX", "0", 1); /* the paths of CPUs without AMX tiles (check_amx has those) */
	if (strstr(compute_cpu_path(TT_BF16, 1), "vdpbf16ps") == NULL) {
		SKIP("no vdpbf16ps on this CPU: one bfloat16 prompt path");
		unsetenv("PRIVAI_AMX");
		return;
	}
	for (int v = 0; v < 2; v++) {
		setenv("PRIVAI_BF16_GEMM", v ? "1" : "0", 1);
		struct compute *c = new_backend();
		if (c == NULL)
			break;
		const char *path = compute_cpu_path(TT_BF16, 40), *at = strstr(path, "vdpbf16ps");
		double ratio = 0;
		CHECK(strstr(path, want[v]) != NULL, "PRIVAI_BF16_GEMM=%d: %s", v, path);
		/* `features` says what the choice was measured on */
		CHECK(at != NULL && sscanf(at + strlen("vdpbf16ps"), "%*[:,] %lfx float FMA's", &ratio) == 1 &&
			      ratio > 0.05 && ratio < 20,
		      "the BF16 prompt path names vdpbf16ps's measured speed (%.2f): %s", ratio, path);
		check_type(c, TT_BF16, COLS, v ? "vdpbf16ps GEMM" : "rows to float");
		check_type(c, TT_BF16, COLS2, v ? "vdpbf16ps GEMM" : "rows to float");
		compute_free(c);
	}
	unsetenv("PRIVAI_BF16_GEMM");
	unsetenv("PRIVAI_AMX");
}

/* The 8-row groups take two tokens a 512-bit vector where this CPU's
 * 512-bit vpdpbusd measured 1.5x a 256-bit one's products
 * (cpu_kernels_get), a token a 256-bit vector elsewhere (a Zen 4): both,
 * with PRIVAI_PAIRS deciding, on any CPU with 512-bit vectors, against
 * the same references. */
static void
check_pairs_paths(void)
{
	static const uint32_t grouped[] = { TT_Q8_0, TT_Q4_0, TT_Q4_K, TT_Q5_K, TT_Q6_K,   TT_Q3_K,
					    TT_Q2_K, TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_NL, TT_IQ4_XS };
	double speedup;

	setenv("PRIVAI_SIMD", "best", 1);
	setenv("PRIVAI_AMX", "0", 1); /* AMX tiles take prompts from 16 tokens: the paths of CPUs without */
	int measured = compute_cpu_pairs(&speedup);
	if (speedup <= 0) {
		SKIP("no 512-bit vectors on this CPU: no pairs of tokens a vector");
		CHECK(!measured, "pairs without 512-bit vectors");
		unsetenv("PRIVAI_AMX");
		return;
	}
	/* 64 byte pairs an instruction against 32: about 1 where a 512-bit
	 * one takes two halves' turns or one port of a 256-bit one's two,
	 * 2 where the units are 512 bits wide (Zen 5); the rest is noise */
	CHECK(speedup > 0.4 && speedup < 2.5, "a 512-bit vpdpbusd at %.2fx a 256-bit one's products", speedup);
	CHECK(measured == (speedup >= COMPUTE_CPU_PAIRS_MIN_SPEEDUP),
	      "a 512-bit vpdpbusd at %.2fx a 256-bit one's products: pairs %s", speedup, measured ? "on" : "off");
	for (int v = 0; v < 2; v++) {
		setenv("PRIVAI_PAIRS", v ? "1" : "0", 1);
		struct compute *c = new_backend();
		if (c == NULL)
			break;
		char label[64];
		snprintf(label, sizeof(label), "PRIVAI_PAIRS=%d", v);
		CHECK(compute_cpu_pairs(&speedup) == v, "%s: compute_cpu_pairs says %d", label, !v);
		for (size_t i = 0; i < sizeof(grouped) / sizeof(grouped[0]); i++) {
			const char *path = compute_cpu_path(grouped[i], 8);
			CHECK((strstr(path, "two tokens a 512-bit vector") != NULL) == v, "%s: %s 8 tokens: %s", label,
			      tensor_type_get(grouped[i])->name, path);
			/* and one token of Q4_K and Q5_K two chunks a vector, of Q6_K
			 * two sub-blocks, and of Q4_0 where no dense prefetch is on */
			int wide = grouped[i] == TT_Q4_K || grouped[i] == TT_Q5_K ||
				   (grouped[i] == TT_Q4_0 && !compute_cpu_prefetch());
			int six = grouped[i] == TT_Q6_K;
			path = compute_cpu_path(grouped[i], 1);
			CHECK((strstr(path, "two chunks a 512-bit vector") != NULL) == (v && wide) &&
				      (strstr(path, "two sub-blocks a 512-bit vector") != NULL) == (v && six),
			      "%s: %s 1 token: %s", label, tensor_type_get(grouped[i])->name, path);
			check_type(c, grouped[i], QCOLS, label);
			check_long_quantized(c, grouped[i], label);
		}
		compute_free(c);
	}
	unsetenv("PRIVAI_PAIRS");
	unsetenv("PRIVAI_AMX");
}

/* BF16 and F16 prompts on AMX tiles where the CPU has them: each shape
 * against the reference, and a token's outputs the same bits whatever
 * the batch around it (a prompt's logits must not depend on how it was
 * cut).  F16 splits each weight into two bfloat16 and each token into
 * three, five products: float rounding, as the float paths (measured
 * 1.2e-9 to 7.2e-9 here, the AVX2 float path's 1.9e-9 to 1.4e-8), where
 * three products (2^-16 a product) read 2.6e-7 to 1.5e-6.
 * PRIVAI_AMX_F16=0 gives F16 the float GEMM back, PRIVAI_AMX=0 the
 * AVX-512 paths for both. */
static void
check_amx(void)
{
	static const struct {
		int rows, cols;
	} shapes[] = { { 32, 64 }, { 64, AMX_COLS }, { AMX_SB_ROWS + 32, 96 }, { 96, 2 * AMX_KC / 4 + 32 } };
	static const int ns[] = { 3, 16, 17, 40, AMX_TOKENS + 22 };
	static const uint32_t types[] = { TT_F16, TT_BF16 };

	setenv("PRIVAI_SIMD", "best", 1);
	setenv("PRIVAI_AMX_F16", "0", 1);
	CHECK(strstr(compute_cpu_path(TT_F16, 40), "AMX") == NULL, "PRIVAI_AMX_F16=0: F16 prompts leave AMX: %s",
	      compute_cpu_path(TT_F16, 40));
	unsetenv("PRIVAI_AMX_F16");
	if (strstr(compute_cpu_path(TT_F16, 40), "AMX") == NULL) {
		SKIP("no AMX tiles on this CPU (or its kernel): F16 and BF16 prompts take AVX-512");
		return;
	}
	struct compute *c = new_backend();
	if (c == NULL)
		return;
	for (int i = 0; i < MAX_TOKENS * AMX_COLS; i++)
		x[i] = value((unsigned)i * 7u + 3u, 2.0f);
	for (size_t ti = 0; ti < 2; ti++)
		for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
			uint32_t type = types[ti];
			int rows = shapes[si].rows, cols = shapes[si].cols;
			int same = check_weight(c, type, rows, cols, ns, (int)(sizeof(ns) / sizeof(ns[0])),
						type == TT_F16 ? 1e-7 : 1e-5, "AMX");
			CHECK(same != 0, "AMX %s %d x %d: the first %d tokens' outputs do not depend on the batch",
			      tensor_type_name(type), rows, cols, ns[0]);
		}
	/* one path from 3 tokens: a token's outputs the same bits in every prompt */
	for (size_t ti = 0; ti < 2; ti++)
		CHECK(strstr(compute_cpu_path(types[ti], 3), "AMX") != NULL &&
			      strstr(compute_cpu_path(types[ti], 2), "AMX") == NULL,
		      "%s on AMX from 3 tokens, as the packed float GEMM: %s; %s", tensor_type_name(types[ti]),
		      compute_cpu_path(types[ti], 3), compute_cpu_path(types[ti], 2));
	compute_free(c);
	setenv("PRIVAI_AMX", "0", 1);
	CHECK(strstr(compute_cpu_path(TT_F16, 40), "AMX") == NULL &&
		      strstr(compute_cpu_path(TT_BF16, 40), "AMX") == NULL,
	      "PRIVAI_AMX=0 keeps AVX-512: %s", compute_cpu_path(TT_BF16, 40));
	unsetenv("PRIVAI_AMX");
}

/* The matmul's parts (split_falling): every unit in exactly one part, in
 * order; the pool's runs of parts (THREADPOOL_PARTS_PER_THREAD, one run
 * where nth is not a multiple) each cut an equal share; within a run the
 * sizes never grow (within rounding), the first is more than an equal
 * share of the run but at most two, the last at most 1/k of one. */
static void
check_falling_parts(void)
{
	static const int64_t totals[] = { 0, 1, 5, 16, 17, 64, 255, 4096, 250000 };
	static const int parts[] = { 1, 2, 8, 12, 16, 24, 64 };

	for (size_t t = 0; t < sizeof(totals) / sizeof(totals[0]); t++)
		for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++) {
			int64_t total = totals[t], end = 0, prev = 0, share = 0, lo, hi;
			int n = parts[p], ok = 1;
			int k = n % THREADPOOL_PARTS_PER_THREAD == 0 ? THREADPOOL_PARTS_PER_THREAD : n, runs = n / k;
			for (int i = 0; i < n && ok; i++) {
				int r = i / k, j = i % k;
				split_falling(total, i, n, &lo, &hi);
				if (j == 0) {
					ok = lo == total * r / runs;
					share = total * (r + 1) / runs - lo;
					prev = share;
				}
				ok = ok && lo == end && hi >= lo && hi - lo <= prev + 1 &&
				     (j > 0 || (hi - lo <= 2 * share / k + 1 &&
						(k == 1 || share < (int64_t)k * k || hi - lo > share / k))) &&
				     (j < k - 1 || hi - lo <= share / ((int64_t)k * k) + 1);
				prev = hi - lo;
				end = hi;
			}
			CHECK(ok && end == total, "%d falling parts of %lld: part ending at %lld, %lld long, %s", n,
			      (long long)total, (long long)end, (long long)prev,
			      ok ? "short of the end" : "out of order");
		}
}

int
main(void)
{
	check_falling_parts();
	/* this file's matrices are small enough to run on the calling thread
	 * (MATMUL_INLINE_BYTES): through the pool's parts, then once so */
	setenv("PRIVAI_MATMUL_INLINE", "0", 1);
	check_level("scalar");
	check_level("avx2");
	check_level("best");
	check_bf16_paths();
	check_pairs_paths();
	check_amx();

	/* oneDNN forced where our own GEMM would win */
	const char *status = compute_cpu_onednn();
	if (cpu_onednn_bf16() == NULL) {
		/* the build installs libdnnl-dev: only a CPU oneDNN has no
		 * bfloat16 matmul for may skip */
		CHECK(strstr(status, ".so") == NULL, "oneDNN should load: %s", status);
		SKIP("oneDNN's bfloat16 matmul was not checked: %s", status);
	} else {
		setenv("PRIVAI_ONEDNN", "1", 1);
		check_level("best");
		CHECK(strstr(compute_cpu_path(TT_BF16, 8), "oneDNN") != NULL, "PRIVAI_ONEDNN=1 gives %s",
		      compute_cpu_path(TT_BF16, 8));
		unsetenv("PRIVAI_ONEDNN");
	}
	unsetenv("PRIVAI_MATMUL_INLINE");
	check_level("best");
	return test_summary();
}
