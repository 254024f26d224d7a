/*
 * The CPU compute backend: the operations of compute.h spread over a fixed
 * thread pool.
 *
 * matmul is the hot spot.  Rows of the weight are split among threads; each
 * thread walks its rows in small blocks and, for every block, all the tokens
 * of the batch, so a weight row is read from memory once per batch (prefill
 * is matrix-matrix work, not n matrix-vector products).  Quantized weights
 * (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) are multiplied in int8 against
 * activations quantized once per call, through GEMMs in prefill (4-bit and
 * 6-bit rows widened to int8 blocks first, cpu_widen.c); BF16 uses
 * vdpbf16ps where the CPU has it; other types are dequantized a row at a
 * time into a per-thread float buffer.
 *
 * Backend memory is host memory here: alloc() is calloc, upload and
 * download are memcpy, and a prepared weight reads the file mapping in
 * place, with what the backend keeps beside it: the block sums of a Q8_0
 * matrix, or a Q4_0 matrix repacked 8 rows to a group (cpu_q4_0x8.c; every
 * multiply reads that copy, get_rows the file).  The KV cache is fp16, one
 * pool per layer (cpu_attention.c reads it).
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "privai/compute.h"
#include "privai/status.h"
#include "privai/tensor_type.h"
#include "privai/threadpool.h"
#include "backend_new.h"
#include "cpu_dot.h"

#define ROW_BLOCK 8   /* weight rows kept hot while the tokens stream by */
#define TOKEN_TILE 48 /* float-path tokens per pass (a multiple of GEMM_F32_TOKENS), bounds the x working set */

/* What one pool thread writes while multiplying: sized once by reserve(). */
struct thread_scratch {
	float *row;     /* GEMM_F32_ROWS dequantized weight rows */
	int32_t *wsum;  /* GEMM_ROWS x blocks (x 2 for Q6_K's halves): -128 * sum(w) */
	float *wd;      /* GEMM_ROWS x blocks (x 2 for Q6_K's halves): weight scales */
	float *wmin;    /* GEMM_ROWS x blocks: Q4_K offsets */
	uint8_t *wrows; /* GEMM_ROWS rows widened to Q8_0 blocks */
};

struct cpu_impl {
	struct threadpool *pool;
	const struct cpu_kernels *k;
	struct thread_scratch *ts; /* one per pool thread */
	size_t row_buf_len;        /* columns each ts[i].row holds */
	struct block_q8 *xq;       /* quantized activations */
	size_t xq_len;
	struct q8_tile *tiles; /* the same, packed 16 tokens a tile, for the GEMM */
	size_t tiles_len;
	uint32_t *xbf; /* bfloat16 activation tiles (struct cpu_kernels.pack_bf16_tile) */
	size_t xbf_len;

	struct compute_batch batch;  /* set_batch(): read in place */
	uint16_t *k_cache, *v_cache; /* fp16, n_layer x kv_rows x kv_dim each */
	int n_layer, kv_dim;
	int64_t kv_rows;
	int block_shift; /* log2(positions per KV block) */
};

static struct cpu_impl *
impl_of(struct compute *c)
{
	return c->impl;
}

/* Grow the per-call scratch; returns 0 or -1. */
static int
ensure(void **p, size_t *len, size_t need)
{
	if (*len >= need)
		return 0;
	void *np = realloc(*p, need);
	if (np == NULL)
		return -1;
	*p = np;
	*len = need;
	return 0;
}

/* realloc that keeps *p valid on failure; returns 0 or -1. */
static int
resize(void **p, size_t bytes)
{
	void *np = realloc(*p, bytes);

	if (np == NULL)
		return -1;
	*p = np;
	return 0;
}

static void
split(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
	*lo = total * ith / nth;
	*hi = total * (ith + 1) / nth;
}

/* ---------------------------------------------------------------- matmul */

struct mm_job {
	struct cpu_impl *im;
	const struct weight *w;
	const int16_t *bsum; /* Q8_0's block sums, from prepare_weight() */
	const uint8_t *x8;   /* Q4_0 repacked in groups of 8 rows (cpu_q4_0x8.c), or NULL */
	const float *x;
	int n;
	float *y;
	int quantized; /* use xq and the int8 dot */
	int gemm;      /* use tiles and the kernels' GEMM */
	int gemm8;     /* use 8-token tiles (small decode batches) */
	int bf16;      /* bfloat16 weights: tiles of bfloat16 activations, vdpbf16ps */
};

static void
mm_quantize_x(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, nb = j->w->cols / 32;

	split(j->n, ith, nth, &lo, &hi);
	for (int64_t t = lo; t < hi; t++)
		j->im->k->quantize_q8(j->x + t * j->w->cols, j->im->xq + t * nb, (size_t)j->w->cols);
}

static void
mm_pack_tiles(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, nb = j->w->cols / 32, groups = (j->n + GEMM_TOKENS - 1) / GEMM_TOKENS;

	split(groups, ith, nth, &lo, &hi);
	for (int64_t g = lo; g < hi; g++) {
		int nt = j->n - (int)g * GEMM_TOKENS < GEMM_TOKENS ? j->n - (int)g * GEMM_TOKENS : GEMM_TOKENS;
		q8_tile_pack(j->im->xq + g * GEMM_TOKENS * nb, nt, (size_t)nb, j->im->tiles + g * nb);
	}
}

/* Rows in blocks of GEMM_ROWS stay in L1 while every 16-token group of
 * tiles streams past from L2. */
#define GEMM_ROWS 4
#define GEMM8_ROWS 8
static void
mm_rows_gemm(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32, groups = (j->n + GEMM_TOKENS - 1) / GEMM_TOKENS;
	float out[2 * GEMM_ROWS * 2 * GEMM_TOKENS]; /* a repacked Q4_0 group is 8 rows */
	struct thread_scratch *ts = &j->im->ts[threadpool_self()];
	int32_t *wsum = ts->wsum;
	float *wd = ts->wd;
	int step = j->x8 != NULL ? 8 : GEMM_ROWS;

	size_t row_bytes = w->row_bytes;
	float *wmin = NULL;

	for (int64_t rb = r0; rb < r1; rb += step) {
		int nr = r1 - rb < step ? (int)(r1 - rb) : step;
		const uint8_t *wrows = (const uint8_t *)w->data + rb * w->row_bytes;
		if (j->x8 != NULL) {
			row_bytes = (size_t)nb * 34;
			j->im->k->widen_q4_0x8(j->x8 + (size_t)(rb / 8) * (size_t)nb * Q4_0X8_BLOCK, (size_t)nb,
					       ts->wrows, row_bytes, NULL);
			wrows = ts->wrows;
		} else if (w->type == TT_Q4_K || w->type == TT_Q5_K) {
			uint8_t *wide = ts->wrows;
			void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *, float *) =
				w->type == TT_Q4_K ? j->im->k->widen_q4_k : j->im->k->widen_q5_k;
			wmin = ts->wmin;
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++)
				widen(wrows + (size_t)r * w->row_bytes, wide + (size_t)r * row_bytes, (size_t)nb,
				      wsum + (size_t)r * nb, wd + (size_t)r * nb, wmin + (size_t)r * nb);
			wrows = wide;
		} else if (w->type == TT_Q6_K) {
			/* two scales and sums per block: wsum and wd hold 2 * nb a row */
			uint8_t *wide = ts->wrows;
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++)
				j->im->k->widen_q6_k(wrows + (size_t)r * w->row_bytes, wide + (size_t)r * row_bytes,
						     (size_t)nb, wsum + (size_t)r * 2 * nb, wd + (size_t)r * 2 * nb);
			wrows = wide;
		} else if (w->type == TT_Q4_0) {
			/* d * (q - 8) is exactly a Q8_0 block: widen the rows once
			 * per chunk and run the same GEMM on them */
			uint8_t *wide = ts->wrows;
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++)
				j->im->k->widen_q4_0(wrows + (size_t)r * w->row_bytes, wide + (size_t)r * row_bytes,
						     (size_t)nb, NULL);
			wrows = wide;
		}
		if (w->type != TT_Q4_K && w->type != TT_Q5_K && w->type != TT_Q6_K)
			j->im->k->gemm_q8_0_prep(wrows, row_bytes, nr, (size_t)nb, wsum, wd);
		for (int64_t g = 0; g < groups; g += 2) {
			int ng = groups - g > 1 ? 2 : 1;
			if (w->type == TT_Q6_K)
				j->im->k->gemm_q6_k(wrows, row_bytes, nr, wsum, wd, j->im->tiles + g * nb, (size_t)nb,
						    ng, (size_t)nb, out);
			else
				j->im->k->gemm_q8_0(wrows, row_bytes, nr, wsum, wd, wmin, j->im->tiles + g * nb,
						    (size_t)nb, ng, (size_t)nb, out);
			int nt = j->n - (int)g * GEMM_TOKENS;
			if (nt > ng * GEMM_TOKENS)
				nt = ng * GEMM_TOKENS;
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < nt; t++)
					j->y[(g * GEMM_TOKENS + t) * w->rows + rb + r] = out[r * 2 * GEMM_TOKENS + t];
		}
	}
}

/* bfloat16 activations, 16 tokens a tile, cols / 2 pairs each */
static void
mm_pack_bf16(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, cols = j->w->cols, groups = (j->n + GEMM_BF16_TOKENS - 1) / GEMM_BF16_TOKENS;

	split(groups, ith, nth, &lo, &hi);
	for (int64_t g = lo; g < hi; g++) {
		int nt = j->n - (int)g * GEMM_BF16_TOKENS;
		j->im->k->pack_bf16_tile(j->x + g * GEMM_BF16_TOKENS * cols, (size_t)cols,
					 nt < GEMM_BF16_TOKENS ? nt : GEMM_BF16_TOKENS, (size_t)cols,
					 j->im->xbf + g * GEMM_BF16_TOKENS * (cols / 2));
	}
}

static void
mm_rows_bf16(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t half = w->cols / 2, groups = (j->n + GEMM_BF16_TOKENS - 1) / GEMM_BF16_TOKENS;
	size_t tile = (size_t)half * GEMM_BF16_TOKENS; /* uint32 per group */
	float out[GEMM_BF16_ROWS * 2 * GEMM_BF16_TOKENS];

	for (int64_t rb = r0; rb < r1; rb += GEMM_BF16_ROWS) {
		int nr = r1 - rb < GEMM_BF16_ROWS ? (int)(r1 - rb) : GEMM_BF16_ROWS;
		const uint16_t *rows = (const uint16_t *)w->data + rb * w->cols;
		for (int64_t g = 0; g < groups; g += 2) {
			int ng = groups - g > 1 ? 2 : 1;
			j->im->k->gemm_bf16(rows, (size_t)w->cols, nr, j->im->xbf + (size_t)g * tile, tile, ng,
					    (size_t)w->cols, out);
			int nt = j->n - (int)g * GEMM_BF16_TOKENS;
			if (nt > ng * GEMM_BF16_TOKENS)
				nt = ng * GEMM_BF16_TOKENS;
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < nt; t++)
					j->y[(g * GEMM_BF16_TOKENS + t) * w->rows + rb + r] =
						out[r * 2 * GEMM_BF16_TOKENS + t];
		}
	}
}

/* F16 and BF16 decode converts inside the dot rather than a row at a
 * time into a buffer: one or two tokens read the row once either way. */
static int
half_dot(uint32_t type, int n)
{
	return (type == TT_F16 || type == TT_BF16) && n <= 2;
}

/* How a matrix of `type` is multiplied by n tokens with kernels k: the one
 * decision cpu_matmul() acts on and compute_cpu_path() reports. */
static void
mm_plan(const struct cpu_kernels *k, uint32_t type, int has_bsum, int n, int *quantized, int *gemm, int *gemm8,
	int *bf16)
{
	*bf16 = type == TT_BF16 && k->gemm_bf16 != NULL && n >= GEMM_BF16_TOKENS;
	*quantized = type == TT_Q8_0 || type == TT_Q4_0 || type == TT_Q4_K || type == TT_Q5_K || type == TT_Q6_K;
	/* the GEMM pays off once a tile is mostly full */
	*gemm = (((type == TT_Q8_0 || type == TT_Q4_0 || type == TT_Q4_K || type == TT_Q5_K) && k->gemm_q8_0 != NULL) ||
		 (type == TT_Q6_K && k->gemm_q6_k != NULL)) &&
		n >= GEMM_TOKENS;
	/* a decode batch: 8-token tiles (one token is memory-bound on the dot) */
	*gemm8 = !*gemm && ((type == TT_Q8_0 && has_bsum) || type == TT_Q4_0) && k->gemm8_q8_0 != NULL && n >= 2 &&
		 n < GEMM_TOKENS;
}

static void
mm_rows_q8(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32;
	const struct cpu_kernels *k = j->im->k;
	float (*dot)(const void *, const struct block_q8 *, size_t) = w->type == TT_Q8_0   ? k->dot_q8_0
								      : w->type == TT_Q4_0 ? k->dot_q4_0
								      : w->type == TT_Q4_K ? k->dot_q4_k
								      : w->type == TT_Q5_K ? k->dot_q5_k
											   : k->dot_q6_k;

	if (j->x8 != NULL) { /* r0, r1: multiples of 8 */
		for (int64_t g = r0 / 8; g < r1 / 8; g++) {
			const uint8_t *grp = j->x8 + (size_t)g * (size_t)nb * Q4_0X8_BLOCK;
			for (int t = 0; t < j->n; t++) {
				float y8[8];
				k->gemv_q4_0x8(grp, j->im->xq + (int64_t)t * nb, (size_t)nb, y8);
				memcpy(j->y + (int64_t)t * w->rows + 8 * g, y8, sizeof(y8));
			}
		}
		return;
	}
	for (int64_t rb = r0; rb < r1; rb += ROW_BLOCK) {
		int64_t re = rb + ROW_BLOCK < r1 ? rb + ROW_BLOCK : r1;
		for (int t = 0; t < j->n; t++) {
			const struct block_q8 *xb = j->im->xq + (int64_t)t * nb;
			float *yt = j->y + (int64_t)t * w->rows;
			for (int64_t r = rb; r < re; r++)
				yt[r] = dot((const uint8_t *)w->data + r * w->row_bytes, xb, (size_t)nb);
		}
	}
}

static void
mm_rows_f32(struct mm_job *j, int64_t r0, int64_t r1, float *buf)
{
	const struct weight *w = j->w;
	const struct cpu_kernels *k = j->im->k;

	if (half_dot(w->type, j->n) && w->type == TT_BF16 && k->dot_bf16_bf16 != NULL) {
		/* the tokens were rounded to bfloat16 by cpu_matmul */
		const uint16_t *xb = (const uint16_t *)j->im->xbf;
		for (int64_t r = r0; r < r1; r++)
			for (int t = 0; t < j->n; t++)
				j->y[(int64_t)t * w->rows + r] =
					k->dot_bf16_bf16((const uint16_t *)((const uint8_t *)w->data +
									    r * w->row_bytes),
							 xb + (int64_t)t * w->cols, (size_t)w->cols);
		return;
	}
	if (half_dot(w->type, j->n)) { /* decode: convert inside the dot */
		float (*dot)(const uint16_t *, const float *, size_t) = w->type == TT_F16 ? k->dot_f16 : k->dot_bf16;
		for (int64_t r = r0; r < r1; r++)
			for (int t = 0; t < j->n; t++)
				j->y[(int64_t)t * w->rows + r] =
					dot((const uint16_t *)((const uint8_t *)w->data + r * w->row_bytes),
					    j->x + (int64_t)t * w->cols, (size_t)w->cols);
		return;
	}

	/* GEMM_F32_ROWS rows at a time as floats in buf, each multiplied with
	 * every token of the tile: a register tile where the CPU has one */
	for (int t0 = 0; t0 < j->n; t0 += TOKEN_TILE) {
		int t1 = t0 + TOKEN_TILE < j->n ? t0 + TOKEN_TILE : j->n;
		for (int64_t rb = r0; rb < r1; rb += GEMM_F32_ROWS) {
			int nr = r1 - rb < GEMM_F32_ROWS ? (int)(r1 - rb) : GEMM_F32_ROWS;
			const float *wr = buf;
			size_t ldw = (size_t)w->cols;
			if (w->type == TT_F32) { /* read in place */
				ldw = w->row_bytes / sizeof(float);
				wr = (const float *)w->data + rb * (int64_t)ldw;
			}
			for (int r = 0; r < nr && w->type != TT_F32; r++) {
				const void *row = (const uint8_t *)w->data + (rb + r) * w->row_bytes;
				if (w->type == TT_F16)
					k->f16_to_f32(row, buf + (size_t)r * ldw, (size_t)w->cols);
				else if (w->type == TT_BF16)
					k->bf16_to_f32(row, buf + (size_t)r * ldw, (size_t)w->cols);
				else
					tensor_dequantize_row(w->type, row, buf + (size_t)r * ldw, (size_t)w->cols);
			}
			for (int t = t0; t < t1; t += GEMM_F32_TOKENS) {
				int nt = t1 - t < GEMM_F32_TOKENS ? t1 - t : GEMM_F32_TOKENS;
				const float *xt = j->x + (int64_t)t * w->cols;
				float *yt = j->y + (int64_t)t * w->rows + rb;
				if (k->gemm_f32 != NULL) {
					k->gemm_f32(wr, ldw, nr, xt, (size_t)w->cols, nt, (size_t)w->cols, yt,
						    (size_t)w->rows);
					continue;
				}
				for (int r = 0; r < nr; r++)
					for (int u = 0; u < nt; u++)
						yt[(int64_t)u * w->rows + r] =
							k->dot_f32(wr + (size_t)r * ldw, xt + (int64_t)u * w->cols,
								   (size_t)w->cols);
			}
		}
	}
}

/* Decode batches of 2..15 tokens: one or two 8-token groups.  Q4_0 rows
 * are widened to Q8_0 a few at a time, their block sums taken on the way. */
static void
mm_rows_gemm8(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32, groups = (j->n + GEMM8_TOKENS - 1) / GEMM8_TOKENS;
	const struct q8_tile8 *tiles = (const struct q8_tile8 *)j->im->tiles;
	float out[GEMM8_ROWS * GEMM8_TOKENS];
	struct thread_scratch *ts = &j->im->ts[threadpool_self()];
	int16_t *sums = (int16_t *)ts->wsum; /* GEMM_ROWS x nb int32 of room */

	/* Q4_0's widened rows fit GEMM_ROWS at a time (a repacked group, 8);
	 * Q8_0 rows are read in place */
	int step = j->x8 != NULL ? 8 : w->type == TT_Q4_0 ? GEMM_ROWS : GEMM8_ROWS;

	for (int64_t rb = r0; rb < r1; rb += step) {
		int nr = r1 - rb < step ? (int)(r1 - rb) : step;
		const uint8_t *wrows = (const uint8_t *)w->data + rb * w->row_bytes;
		const int16_t *bsum = j->bsum != NULL ? j->bsum + rb * nb : sums;
		size_t row_bytes = w->row_bytes;
		if (j->x8 != NULL) {
			row_bytes = (size_t)nb * 34;
			j->im->k->widen_q4_0x8(j->x8 + (size_t)(rb / 8) * (size_t)nb * Q4_0X8_BLOCK, (size_t)nb,
					       ts->wrows, row_bytes, sums);
			wrows = ts->wrows;
		} else if (w->type == TT_Q4_0) {
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++)
				j->im->k->widen_q4_0(wrows + (size_t)r * w->row_bytes,
						     ts->wrows + (size_t)r * row_bytes, (size_t)nb, sums + r * nb);
			wrows = ts->wrows;
		}
		for (int64_t g = 0; g < groups; g++) {
			j->im->k->gemm8_q8_0(wrows, row_bytes, nr, bsum, tiles + g * nb, (size_t)nb, out);
			int nt = j->n - (int)g * GEMM8_TOKENS < GEMM8_TOKENS ? j->n - (int)g * GEMM8_TOKENS
									     : GEMM8_TOKENS;
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < nt; t++)
					j->y[(g * GEMM8_TOKENS + t) * w->rows + rb + r] = out[r * GEMM8_TOKENS + t];
		}
	}
}

static void
mm_worker(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi;

	if (j->x8 != NULL) { /* whole groups of 8 rows */
		split(j->w->rows / 8, ith, nth, &lo, &hi);
		lo *= 8;
		hi *= 8;
	} else {
		split(j->w->rows, ith, nth, &lo, &hi);
	}
	if (j->bf16)
		mm_rows_bf16(j, lo, hi);
	else if (j->gemm)
		mm_rows_gemm(j, lo, hi);
	else if (j->gemm8)
		mm_rows_gemm8(j, lo, hi);
	else if (j->quantized)
		mm_rows_q8(j, lo, hi);
	else
		mm_rows_f32(j, lo, hi, j->im->ts[threadpool_self()].row);
}

static void
cpu_matmul(struct compute *c, const struct compute_weight *cw, const float *x, int n, float *y)
{
	struct cpu_impl *im = impl_of(c);
	const struct weight *w = &cw->w;
	struct mm_job j = {
		im, w, w->type == TT_Q8_0 ? cw->aux : NULL, w->type == TT_Q4_0 ? cw->aux : NULL, x, n, y, 0, 0, 0, 0
	};

	/* reserve() sized every buffer; exceeding it is a caller bug */
	assert((size_t)w->cols <= im->row_buf_len);
	assert((size_t)n * (size_t)(w->cols / 32) * sizeof(struct block_q8) <= im->xq_len);
	mm_plan(im->k, w->type, j.bsum != NULL, n, &j.quantized, &j.gemm, &j.gemm8, &j.bf16);
	if (j.quantized)
		threadpool_run(im->pool, mm_quantize_x, &j);
	if (j.gemm)
		threadpool_run(im->pool, mm_pack_tiles, &j);
	if (j.bf16)
		threadpool_run(im->pool, mm_pack_bf16, &j);
	else if (w->type == TT_BF16 && half_dot(w->type, n) && im->k->dot_bf16_bf16 != NULL)
		for (int t = 0; t < n; t++) /* a token or two: not worth the pool */
			im->k->f32_to_bf16(x + (int64_t)t * w->cols, (uint16_t *)im->xbf + (int64_t)t * w->cols,
					   (size_t)w->cols);
	if (j.gemm8) {
		int64_t nb = w->cols / 32;
		for (int g = 0; g * GEMM8_TOKENS < n; g++)
			q8_tile8_pack(im->xq + (int64_t)g * GEMM8_TOKENS * nb,
				      n - g * GEMM8_TOKENS < GEMM8_TOKENS ? n - g * GEMM8_TOKENS : GEMM8_TOKENS,
				      (size_t)nb, (struct q8_tile8 *)im->tiles + (int64_t)g * nb);
	}
	threadpool_run(im->pool, mm_worker, &j);
}

/* ------------------------------------------------------------- the rest */

static void
cpu_get_rows(struct compute *c, const struct compute_weight *cw, float *out)
{
	const struct compute_batch *b = &impl_of(c)->batch;
	const struct weight *w = &cw->w;

	for (int t = 0; t < b->n; t++) {
		int64_t r = b->tokens[t];
		if (w->type == TT_Q4_0 && cw->aux != NULL) /* the repacked copy (prepare_q4_0) */
			q4_0x8_dequantize_row((const uint8_t *)cw->aux +
						      (size_t)(r / 8) * (size_t)(w->cols / 32) * Q4_0X8_BLOCK,
					      (size_t)w->cols / 32, (int)(r % 8), out + (int64_t)t * w->cols);
		else
			tensor_dequantize_row(w->type, (const uint8_t *)w->data + r * w->row_bytes,
					      out + (int64_t)t * w->cols, (size_t)w->cols);
	}
}

/* Element-wise work split across the pool: rows for rmsnorm, ranges of
 * elements for swiglu and add (for a 128-token prefill, swiglu alone is
 * a million expf per layer). */
struct ew_job {
	int op; /* 0 rmsnorm, 1 swiglu, 2 add */
	float *a;
	const float *b, *g;
	const float *x;
	size_t count;
	int n, dim;
	float eps;
};

static void
ew_worker(void *arg, int ith, int nth)
{
	struct ew_job *j = arg;
	int64_t lo, hi;

	if (j->op == 0) {
		split(j->n, ith, nth, &lo, &hi);
		for (int64_t t = lo; t < hi; t++) {
			const float *xt = j->x + t * j->dim;
			float *ot = j->a + t * j->dim;
			double ss = 0.0;
			for (int i = 0; i < j->dim; i++)
				ss += (double)xt[i] * xt[i];
			float scale = (float)(1.0 / sqrt(ss / j->dim + j->eps));
			for (int i = 0; i < j->dim; i++)
				ot[i] = xt[i] * scale * j->g[i];
		}
		return;
	}
	split((int64_t)j->count, ith, nth, &lo, &hi);
	if (j->op == 1)
		for (int64_t i = lo; i < hi; i++)
			j->a[i] = j->a[i] / (1.0f + expf(-j->a[i])) * j->b[i];
	else
		for (int64_t i = lo; i < hi; i++)
			j->a[i] += j->b[i];
}

static void
ew_run(struct compute *c, struct ew_job *j, size_t work)
{
	/* below a few thousand elements a thread hand-off costs more */
	if (work < 4096)
		ew_worker(j, 0, 1);
	else
		threadpool_run(impl_of(c)->pool, ew_worker, j);
}

static void
cpu_rmsnorm(struct compute *c, const float *x, const float *g, int n, int dim, float eps, float *out)
{
	struct ew_job j = { .op = 0, .a = out, .g = g, .x = x, .n = n, .dim = dim, .eps = eps };

	ew_run(c, &j, (size_t)n * (size_t)dim);
}

static void
cpu_rope(struct compute *c, float *x, int n_heads, int head_dim, int n_rot, const float *inv_freq, int neox)
{
	const struct compute_batch *bt = &impl_of(c)->batch;
	const int32_t *pos = bt->pos;

	for (int t = 0; t < bt->n; t++) {
		for (int i = 0; i < n_rot / 2; i++) {
			double theta = (double)pos[t] * inv_freq[i];
			float cs = (float)cos(theta), sn = (float)sin(theta);
			for (int h = 0; h < n_heads; h++) {
				float *v = x + ((int64_t)t * n_heads + h) * head_dim;
				int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
				float x0 = v[a], x1 = v[b];
				v[a] = x0 * cs - x1 * sn;
				v[b] = x0 * sn + x1 * cs;
			}
		}
	}
}

struct att_job {
	const struct cpu_impl *im;
	const float *q;
	const uint16_t *k, *v; /* this layer's pools */
	int n_head, n_head_kv, head_dim;
	int heads_per_item; /* query heads of one KV head served by one cpu_attend_f16 call */
	float *out;
};

static void
att_worker(void *arg, int ith, int nth)
{
	const struct att_job *j = arg;
	const struct cpu_impl *im = j->im;
	const struct compute_batch *b = &im->batch;
	int hd = j->head_dim, hpi = j->heads_per_item, per_token = j->n_head / hpi;
	int group = j->n_head / j->n_head_kv;
	int64_t lo, hi;

	split((int64_t)b->n * per_token, ith, nth, &lo, &hi);
	for (int64_t it = lo; it < hi; it++) {
		int t = (int)(it / per_token), h0 = (int)(it % per_token) * hpi, kvh = h0 / group;
		size_t at = ((size_t)t * (size_t)j->n_head + (size_t)h0) * (size_t)hd;
		struct kv_view kv = { j->k + (size_t)kvh * hd, j->v + (size_t)kvh * hd, (size_t)im->kv_dim, b->table[t],
				      im->block_shift };
		cpu_attend_f16(im->k, &kv, b->pos[t] + 1, j->q + at, hpi, hd, j->out + at);
	}
}

static size_t
kv_offset(const struct cpu_impl *im, int layer, const int32_t *table, int pos)
{
	int64_t row =
		((int64_t)table[pos >> im->block_shift] << im->block_shift) + (pos & ((1 << im->block_shift) - 1));

	return ((size_t)layer * (size_t)im->kv_rows + (size_t)row) * (size_t)im->kv_dim;
}

static void
cpu_kv_write(struct compute *c, int layer, const float *k, const float *v)
{
	struct cpu_impl *im = impl_of(c);
	const struct compute_batch *b = &im->batch;
	size_t dim = (size_t)im->kv_dim;

	assert(layer < im->n_layer);
	for (int t = 0; t < b->n; t++) {
		size_t off = kv_offset(im, layer, b->table[t], b->pos[t]);
		im->k->f32_to_f16(k + (size_t)t * dim, im->k_cache + off, dim);
		im->k->f32_to_f16(v + (size_t)t * dim, im->v_cache + off, dim);
	}
}

/* Query heads per work item: all those of a KV head (its cache rows are
 * then read once for them), fewer where that leaves threads without work,
 * and never more than cpu_attend_f16 takes; always a divisor of the group. */
static int
att_heads_per_item(int n_tokens, int n_head, int group, int n_threads)
{
	int hpi = group;

	while (hpi > ATT_HEADS_MAX || (hpi > 1 && (int64_t)n_tokens * (n_head / hpi) < 4 * (int64_t)n_threads)) {
		int d = hpi - 1;
		while (group % d != 0)
			d--;
		hpi = d;
	}
	return hpi;
}

static void
cpu_attention(struct compute *c, int layer, const float *q, int n_head, int n_head_kv, int head_dim, float *out)
{
	struct cpu_impl *im = impl_of(c);
	size_t layer_off = (size_t)layer * (size_t)im->kv_rows * (size_t)im->kv_dim;
	int group = n_head / n_head_kv;
	struct att_job j = {
		.im = im,
		.q = q,
		.k = im->k_cache + layer_off,
		.v = im->v_cache + layer_off,
		.n_head = n_head,
		.n_head_kv = n_head_kv,
		.head_dim = head_dim,
		.heads_per_item = att_heads_per_item(im->batch.n, n_head, group, threadpool_size(im->pool)),
		.out = out,
	};

	assert(layer < im->n_layer && n_head_kv * head_dim == im->kv_dim && n_head % n_head_kv == 0);
	assert(head_dim <= ATT_HEAD_DIM_MAX);
	threadpool_run(im->pool, att_worker, &j);
}

static void
cpu_swiglu(struct compute *c, float *a, const float *b, size_t count)
{
	struct ew_job j = { .op = 1, .a = a, .b = b, .count = count };

	ew_run(c, &j, count * 8); /* expf: weigh it as several adds */
}

static void
cpu_add(struct compute *c, float *a, const float *b, size_t count)
{
	struct ew_job j = { .op = 2, .a = a, .b = b, .count = count };

	ew_run(c, &j, count);
}

static void
cpu_add_rows(struct compute *c, float *x, const float *b, int n, int dim)
{
	(void)c;
	for (int t = 0; t < n; t++)
		for (int i = 0; i < dim; i++)
			x[(int64_t)t * dim + i] += b[i];
}

static void
cpu_gather_rows(struct compute *c, const float *x, int dim, float *out)
{
	const struct compute_batch *b = &impl_of(c)->batch;

	for (int i = 0; i < b->n_out; i++)
		memcpy(out + (size_t)i * dim, x + (size_t)b->out_rows[i] * dim, (size_t)dim * sizeof(float));
}

static void
cpu_set_batch(struct compute *c, const struct compute_batch *b)
{
	impl_of(c)->batch = *b;
}

/* ------------------------------------------------------------- memory */

static void *
cpu_alloc(struct compute *c, size_t bytes)
{
	(void)c;
	return calloc(bytes ? bytes : 1, 1);
}

static void
cpu_release(struct compute *c, void *p)
{
	(void)c;
	free(p);
}

static int
cpu_copy(struct compute *c, void *dst, const void *src, size_t bytes)
{
	(void)c;
	memcpy(dst, src, bytes);
	return PRIVAI_OK;
}

/* The weight stays in the file mapping; a Q8_0 matrix gets the sum of
 * each block's 32 quants (6% of its size), so the small-batch kernel need
 * not derive them per call. */
struct repack_job {
	const struct weight *src;
	uint8_t *dst;
};

static void
repack_worker(void *arg, int ith, int nth)
{
	const struct repack_job *j = arg;
	int64_t lo, hi;

	split(j->src->rows / 8, ith, nth, &lo, &hi);
	q4_0x8_repack(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 32, j->dst);
}

/* Q4_0 rows in groups of 8 (cpu_q4_0x8.c) where the CPU has the kernels
 * and the rows divide, repacked by the pool (a 70B model is ~38 GB).
 * Every use reads the copy afterwards, get_rows too, so the file's pages
 * are handed back: the resident size stays about the model's, not twice.
 * The copy asks for transparent huge pages: fewer faults and TLB misses. */
static int
prepare_q4_0(const struct cpu_impl *im, const struct weight *src, struct compute_weight *dst)
{
	size_t bytes = (size_t)src->rows * ((size_t)src->cols / 32) * 18, page = (size_t)sysconf(_SC_PAGESIZE);
	void *packed = NULL;

	if (im->k->gemv_q4_0x8 == NULL || src->rows % 8 != 0 || src->cols % 32 != 0)
		return PRIVAI_OK;
	if (posix_memalign(&packed, (size_t)2 << 20, bytes) != 0)
		return PRIVAI_ENOMEM;
	(void)madvise(packed, bytes, MADV_HUGEPAGE); /* a hint: THP may be off */
	struct repack_job j = { src, packed };
	threadpool_run(im->pool, repack_worker, &j);
	uintptr_t from = ((uintptr_t)src->data + page - 1) & ~(uintptr_t)(page - 1);
	uintptr_t to = ((uintptr_t)src->data + bytes) & ~(uintptr_t)(page - 1);
	/* whole pages only (neighbours keep theirs); PAGEOUT, not DONTNEED,
	 * because it never loses data: a file's clean pages are dropped, a
	 * buffer's (gguf_open_buffer) would go to swap or stay */
	if (to > from)
		(void)madvise((void *)from, to - from, MADV_PAGEOUT);
	dst->aux = packed;
	return PRIVAI_OK;
}

static int
cpu_prepare_weight(struct compute *c, const struct weight *src, struct compute_weight *dst)
{
	int64_t nb = src->cols / 32;
	int16_t *bsum;

	dst->w = *src;
	dst->aux = NULL;
	if (src->type == TT_Q4_0)
		return prepare_q4_0(impl_of(c), src, dst);
	if (src->type != TT_Q8_0)
		return PRIVAI_OK;
	if ((bsum = malloc((size_t)(src->rows * nb) * sizeof(int16_t) + 1)) == NULL)
		return PRIVAI_ENOMEM;
	for (int64_t r = 0; r < src->rows; r++)
		for (int64_t b = 0; b < nb; b++) {
			const int8_t *q = (const int8_t *)src->data + r * (int64_t)src->row_bytes + b * 34 + 2;
			int s = 0;
			for (int i = 0; i < 32; i++)
				s += q[i];
			bsum[r * nb + b] = (int16_t)s;
		}
	dst->aux = bsum;
	return PRIVAI_OK;
}

static void
cpu_release_weight(struct compute *c, struct compute_weight *w)
{
	(void)c;
	free(w->aux);
	w->aux = NULL;
}

static void cpu_destroy(struct compute *c);
static int cpu_reserve(struct compute *c, struct compute_shape *s, size_t *kv_bytes);
static int cpu_memory(struct compute *c, size_t *free_bytes, size_t *total_bytes);

static const struct compute_ops cpu_ops = {
	.name = "cpu",
	.destroy = cpu_destroy,
	.reserve = cpu_reserve,
	.memory = cpu_memory,
	.alloc = cpu_alloc,
	.release = cpu_release,
	.upload = cpu_copy,
	.download = cpu_copy,
	.prepare_weight = cpu_prepare_weight,
	.release_weight = cpu_release_weight,
	.set_batch = cpu_set_batch,
	.get_rows = cpu_get_rows,
	.matmul = cpu_matmul,
	.rmsnorm = cpu_rmsnorm,
	.add_rows = cpu_add_rows,
	.rope = cpu_rope,
	.kv_write = cpu_kv_write,
	.attention = cpu_attention,
	.swiglu = cpu_swiglu,
	.add = cpu_add,
	.gather_rows = cpu_gather_rows,
};

static const struct cpu_kernels *
choose_kernels(void)
{
	const char *force = getenv("PRIVAI_SIMD");

	const struct cpu_kernels *best = cpu_kernels_get();

	/* PRIVAI_SIMD=scalar|avx2 caps the level (for tests and comparisons) */
	if (force != NULL && strcmp(force, "scalar") == 0)
		return cpu_kernels_scalar();
	if (force != NULL && strcmp(force, "avx2") == 0 && strcmp(best->name, "avx512-vnni") == 0)
		return cpu_kernels_avx2();
	return best;
}

const char *
compute_cpu_simd_name(void)
{
	return choose_kernels()->name;
}

const char *
compute_cpu_path(uint32_t type, int n_tokens)
{
	const struct cpu_kernels *k = choose_kernels();
	int quantized, gemm, gemm8, bf16;

	if (tensor_type_get(type) == NULL || !tensor_type_get(type)->can_dequant)
		return NULL;
	/* Q8_0 always has its block sums (prepare_weight) */
	mm_plan(k, type, type == TT_Q8_0, n_tokens, &quantized, &gemm, &gemm8, &bf16);
	if (bf16)
		return "bfloat16 GEMM (vdpbf16ps), 16-token tiles";
	/* Q4_0 with the repack kernels (and rows in eights, as every model's are) */
	if (type == TT_Q4_0 && k->gemv_q4_0x8 != NULL && !gemm && !gemm8)
		return "int8, 8 rows interleaved at load";
	if (gemm)
		return "int8 GEMM, 16-token tiles";
	if (gemm8)
		return "int8 GEMM, 8-token tiles";
	if (quantized)
		return "int8 dot per token";
	if (type == TT_BF16 && half_dot(type, n_tokens) && k->dot_bf16_bf16 != NULL)
		return "bfloat16 dot (vdpbf16ps), activations rounded to bfloat16";
	if (half_dot(type, n_tokens))
		return "fused half-to-float dot";
	/* a pass narrower than the tile takes the tile's edge: the dot */
	int tile = k->gemm_f32 != NULL && n_tokens >= GEMM_F32_TOKENS;
	if (type == TT_F32)
		return tile ? "float register tile" : "float dot per token";
	if (type == TT_F16 || type == TT_BF16)
		return tile ? "rows converted to float, register tile" : "rows converted to float, dot per token";
	return tile ? "rows dequantized, float register tile" : "rows dequantized, float dot per token";
}

static void
cpu_destroy(struct compute *c)
{
	struct cpu_impl *im = c->impl;

	if (im != NULL) {
		int nth = im->pool != NULL ? threadpool_size(im->pool) : 0;
		for (int i = 0; im->ts != NULL && i < nth; i++) {
			free(im->ts[i].row);
			free(im->ts[i].wsum);
			free(im->ts[i].wd);
			free(im->ts[i].wmin);
			free(im->ts[i].wrows);
		}
		free(im->ts);
		free(im->xq);
		free(im->tiles);
		free(im->xbf);
		free(im->k_cache);
		free(im->v_cache);
		threadpool_free(im->pool);
		free(im);
	}
	free(c);
}

int
compute_cpu_threads(const struct compute *c)
{
	return c->ops == &cpu_ops ? threadpool_size(((const struct cpu_impl *)c->impl)->pool) : 0;
}

int
compute_cpu_new(const struct compute_params *p, struct compute **ret, char *err)
{
	struct compute *c = calloc(1, sizeof(*c));
	struct cpu_impl *im = calloc(1, sizeof(*im));
	int n_threads = p->n_threads > 0 ? p->n_threads : threadpool_default_threads();
	int r;

	if (c == NULL || im == NULL) {
		free(c);
		free(im);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	}
	c->ops = &cpu_ops;
	c->impl = im;
	im->k = choose_kernels();
	if ((r = threadpool_new(n_threads < 1 ? 1 : n_threads, &im->pool)) < 0) {
		cpu_destroy(c);
		return privai_fail(err, r, "cannot start %d compute threads", n_threads);
	}
	*ret = c;
	return PRIVAI_OK;
}

/* The KV cache, once: a context reserves its backend a single time. */
static int
cpu_reserve_kv(struct cpu_impl *im, const struct compute_shape *s)
{
	size_t n = (size_t)s->n_layer * (size_t)s->kv_rows * (size_t)s->kv_dim;
	int shift = 0;

	while ((1 << shift) < s->block_size)
		shift++;
	assert((1 << shift) == s->block_size && im->k_cache == NULL);
	im->block_shift = shift;
	im->n_layer = s->n_layer;
	im->kv_rows = s->kv_rows;
	im->kv_dim = s->kv_dim;
	im->k_cache = calloc(n ? n : 1, sizeof(uint16_t));
	im->v_cache = calloc(n ? n : 1, sizeof(uint16_t));
	return im->k_cache != NULL && im->v_cache != NULL ? PRIVAI_OK : PRIVAI_ENOMEM;
}

static int
cpu_memory(struct compute *c, size_t *free_bytes, size_t *total_bytes)
{
	(void)c;
	*free_bytes = *total_bytes = 0;
	return PRIVAI_EUNSUPPORTED; /* host memory is sized with --kv-cache-mib */
}

static int
cpu_reserve(struct compute *c, struct compute_shape *s, size_t *kv_bytes)
{
	struct cpu_impl *im = c->impl;
	int nth = threadpool_size(im->pool);
	int64_t max_cols = s->max_cols;
	int max_tokens = s->max_tokens;

	*kv_bytes = 2 * (size_t)s->n_layer * (size_t)s->kv_rows * (size_t)s->kv_dim * sizeof(uint16_t);
	if (s->kv_rows <= 0)
		return PRIVAI_EUNSUPPORTED;
	if (im->ts == NULL && (im->ts = calloc((size_t)nth, sizeof(*im->ts))) == NULL)
		return PRIVAI_ENOMEM;
	if ((size_t)max_cols > im->row_buf_len) {
		/* Q6_K keeps two sums and scales per block */
		size_t blocks = 2 * GEMM_ROWS * (size_t)(max_cols / 32 + 1);
		for (int i = 0; i < nth; i++) {
			struct thread_scratch *ts = &im->ts[i];
			/* all five grow together with max_cols */
			if (resize((void **)&ts->row, GEMM_F32_ROWS * (size_t)max_cols * sizeof(float)) < 0 ||
			    resize((void **)&ts->wsum, blocks * sizeof(int32_t)) < 0 ||
			    resize((void **)&ts->wd, blocks * sizeof(float)) < 0 ||
			    resize((void **)&ts->wmin, blocks * sizeof(float)) < 0 ||
			    resize((void **)&ts->wrows, blocks * 34) < 0)
				return PRIVAI_ENOMEM;
		}
		im->row_buf_len = (size_t)max_cols;
	}
	if (ensure((void **)&im->xq, &im->xq_len,
		   (size_t)max_tokens * (size_t)(max_cols / 32 + 1) * sizeof(struct block_q8)) < 0 ||
	    ensure((void **)&im->tiles, &im->tiles_len,
		   (size_t)(max_tokens / GEMM_TOKENS + 1) * (size_t)(max_cols / 32 + 1) * sizeof(struct q8_tile)) < 0)
		return PRIVAI_ENOMEM;
	if (im->k->gemm_bf16 != NULL && ensure((void **)&im->xbf, &im->xbf_len,
					       (size_t)(max_tokens / GEMM_BF16_TOKENS + 1) * GEMM_BF16_TOKENS *
						       (size_t)(max_cols / 2 + 1) * sizeof(uint32_t)) < 0)
		return PRIVAI_ENOMEM;
	return cpu_reserve_kv(im, s);
}
