/*
 * The CPU compute backend: the operations of compute.h spread over a fixed
 * thread pool.
 *
 * matmul is the hot spot.  Rows of the weight are split among threads; each
 * thread walks its rows in small blocks and, for every block, all the tokens
 * of the batch, so a weight row is read from memory once per batch (prefill
 * is matrix-matrix work, not n matrix-vector products).  Q8_0/Q4_0 weights
 * are multiplied in int8 against activations quantized once per call; other
 * types are dequantized a row at a time into a per-thread float buffer.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "privai/compute.h"
#include "privai/status.h"
#include "privai/tensor_type.h"
#include "privai/threadpool.h"
#include "cpu_dot.h"

#define ROW_BLOCK 8   /* weight rows kept hot while the tokens stream by */
#define TOKEN_TILE 64 /* float-path tokens per pass, bounds the x working set */

/* What one pool thread writes while multiplying: sized once by reserve(). */
struct thread_scratch {
	float *row;     /* one dequantized weight row */
	int32_t *wsum;  /* GEMM_ROWS x blocks: -128 * sum(w) */
	float *wd;      /* GEMM_ROWS x blocks: weight scales */
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
	float *att_buf; /* per thread: att_len attention scores */
	size_t att_buf_len, att_len;
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
	const float *x;
	int n;
	float *y;
	int quantized; /* use xq and the int8 dot */
	int gemm;      /* use tiles and the kernels' GEMM */
	int gemm8;     /* use 8-token tiles (small decode batches) */
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

/* Q4_K rows as 32-element int8 blocks (q in 0..15) with their float
 * scales d * sc_j, offsets dmin * m_j and -128 * sum(q), for the GEMM. */
static void
q4_k_widen(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin)
{
	for (size_t sb = 0; sb < nb / 8; sb++, src += 144) {
		float d = fp16_to_f32((uint16_t)(src[0] | src[1] << 8));
		float dmin = fp16_to_f32((uint16_t)(src[2] | src[3] << 8));
		const uint8_t *sc = src + 4, *q = src + 16;
		for (int j = 0; j < 8; j++, dst += 34) {
			int s, m;
			if (j < 4) {
				s = sc[j] & 63;
				m = sc[j + 4] & 63;
			} else {
				s = (sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4);
				m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
			}
			int32_t sum = 0;
			for (int l = 0; l < 32; l++) {
				uint8_t v = (j & 1) ? q[32 * (j / 2) + l] >> 4 : q[32 * (j / 2) + l] & 0xf;
				dst[2 + l] = v;
				sum += v;
			}
			size_t at = sb * 8 + (size_t)j;
			wsum[at] = -128 * sum;
			wd[at] = d * (float)s;
			wmin[at] = dmin * (float)m;
		}
	}
}

static void
q4_0_to_q8_0(const uint8_t *src, uint8_t *dst, size_t nb)
{
	for (size_t b = 0; b < nb; b++, src += 18, dst += 34) {
		memcpy(dst, src, 2); /* the same fp16 scale */
		for (int i = 0; i < 16; i++) {
			dst[2 + i] = (uint8_t)(int8_t)((src[2 + i] & 0xf) - 8);
			dst[2 + 16 + i] = (uint8_t)(int8_t)((src[2 + i] >> 4) - 8);
		}
	}
}

/* Rows in blocks of GEMM_ROWS stay in L1 while every 16-token group of
 * tiles streams past from L2. */
#define GEMM_ROWS 4
#define GEMM8_ROWS 8
static void
mm_rows_gemm(struct mm_job *j, int64_t r0, int64_t r1, int ith)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32, groups = (j->n + GEMM_TOKENS - 1) / GEMM_TOKENS;
	float out[GEMM_ROWS * 2 * GEMM_TOKENS];
	struct thread_scratch *ts = &j->im->ts[ith];
	int32_t *wsum = ts->wsum;
	float *wd = ts->wd;

	size_t row_bytes = w->row_bytes;
	float *wmin = NULL;

	for (int64_t rb = r0; rb < r1; rb += GEMM_ROWS) {
		int nr = r1 - rb < GEMM_ROWS ? (int)(r1 - rb) : GEMM_ROWS;
		const uint8_t *wrows = (const uint8_t *)w->data + rb * w->row_bytes;
		if (w->type == TT_Q4_K) {
			uint8_t *wide = ts->wrows;
			wmin = ts->wmin;
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++)
				q4_k_widen(wrows + (size_t)r * w->row_bytes, wide + (size_t)r * row_bytes, (size_t)nb,
					   wsum + (size_t)r * nb, wd + (size_t)r * nb, wmin + (size_t)r * nb);
			wrows = wide;
		} else if (w->type == TT_Q4_0) {
			/* d * (q - 8) is exactly a Q8_0 block: widen the rows once
			 * per chunk and run the same GEMM on them */
			uint8_t *wide = ts->wrows;
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++)
				q4_0_to_q8_0(wrows + (size_t)r * w->row_bytes, wide + (size_t)r * row_bytes,
					     (size_t)nb);
			wrows = wide;
		}
		if (w->type != TT_Q4_K)
			j->im->k->gemm_q8_0_prep(wrows, row_bytes, nr, (size_t)nb, wsum, wd);
		for (int64_t g = 0; g < groups; g += 2) {
			int ng = groups - g > 1 ? 2 : 1;
			j->im->k->gemm_q8_0(wrows, row_bytes, nr, wsum, wd, wmin, j->im->tiles + g * nb, (size_t)nb, ng,
					    (size_t)nb, out);
			int nt = j->n - (int)g * GEMM_TOKENS;
			if (nt > ng * GEMM_TOKENS)
				nt = ng * GEMM_TOKENS;
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < nt; t++)
					j->y[(g * GEMM_TOKENS + t) * w->rows + rb + r] = out[r * 2 * GEMM_TOKENS + t];
		}
	}
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
											   : k->dot_q6_k;

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

	if (w->type == TT_F16 && j->n <= 2) { /* decode: convert inside the dot */
		for (int64_t r = r0; r < r1; r++)
			for (int t = 0; t < j->n; t++)
				j->y[(int64_t)t * w->rows + r] =
					k->dot_f16((const uint16_t *)((const uint8_t *)w->data + r * w->row_bytes),
						   j->x + (int64_t)t * w->cols, (size_t)w->cols);
		return;
	}

	for (int t0 = 0; t0 < j->n; t0 += TOKEN_TILE) {
		int t1 = t0 + TOKEN_TILE < j->n ? t0 + TOKEN_TILE : j->n;
		for (int64_t r = r0; r < r1; r++) {
			const void *row = (const uint8_t *)w->data + r * w->row_bytes;
			const float *wr = buf;
			if (w->type == TT_F32)
				wr = row;
			else if (w->type == TT_F16)
				k->f16_to_f32(row, buf, (size_t)w->cols);
			else
				tensor_dequantize_row(w->type, row, buf, (size_t)w->cols);
			for (int t = t0; t < t1; t++)
				j->y[(int64_t)t * w->rows + r] =
					k->dot_f32(wr, j->x + (int64_t)t * w->cols, (size_t)w->cols);
		}
	}
}

/* Decode batches of 2..15 tokens: one or two 8-token groups.  Q4_0 rows
 * are widened to Q8_0 a few at a time, their block sums taken on the way. */
static void
mm_rows_gemm8(struct mm_job *j, int64_t r0, int64_t r1, int ith)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32, groups = (j->n + GEMM8_TOKENS - 1) / GEMM8_TOKENS;
	const struct q8_tile8 *tiles = (const struct q8_tile8 *)j->im->tiles;
	float out[GEMM8_ROWS * GEMM8_TOKENS];
	struct thread_scratch *ts = &j->im->ts[ith];
	int16_t *sums = (int16_t *)ts->wsum; /* GEMM_ROWS x nb int32 of room */

	/* Q4_0's widened rows fit GEMM_ROWS at a time; Q8_0 rows are read in place */
	int step = w->type == TT_Q4_0 ? GEMM_ROWS : GEMM8_ROWS;

	for (int64_t rb = r0; rb < r1; rb += step) {
		int nr = r1 - rb < step ? (int)(r1 - rb) : step;
		const uint8_t *wrows = (const uint8_t *)w->data + rb * w->row_bytes;
		const int16_t *bsum = w->bsum != NULL ? w->bsum + rb * nb : sums;
		size_t row_bytes = w->row_bytes;
		if (w->type == TT_Q4_0) {
			row_bytes = (size_t)nb * 34;
			for (int r = 0; r < nr; r++) {
				uint8_t *dst = ts->wrows + (size_t)r * row_bytes;
				q4_0_to_q8_0(wrows + (size_t)r * w->row_bytes, dst, (size_t)nb);
				for (int64_t b = 0; b < nb; b++) {
					int s = 0;
					for (int i = 0; i < 32; i++)
						s += (int8_t)dst[b * 34 + 2 + i];
					sums[r * nb + b] = (int16_t)s;
				}
			}
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

	split(j->w->rows, ith, nth, &lo, &hi);
	if (j->gemm)
		mm_rows_gemm(j, lo, hi, ith);
	else if (j->gemm8)
		mm_rows_gemm8(j, lo, hi, ith);
	else if (j->quantized)
		mm_rows_q8(j, lo, hi);
	else
		mm_rows_f32(j, lo, hi, j->im->ts[ith].row);
}

static void
cpu_matmul(struct compute *c, const struct weight *w, const float *x, int n, float *y)
{
	struct cpu_impl *im = impl_of(c);
	struct mm_job j = { im, w, x, n, y, 0, 0, 0 };

	/* reserve() sized every buffer; exceeding it is a caller bug */
	assert((size_t)w->cols <= im->row_buf_len);
	assert((size_t)n * (size_t)(w->cols / 32) * sizeof(struct block_q8) <= im->xq_len);
	j.quantized = w->type == TT_Q8_0 || w->type == TT_Q4_0 || w->type == TT_Q4_K || w->type == TT_Q6_K;
	/* the GEMM pays off once a tile is mostly full */
	j.gemm = (w->type == TT_Q8_0 || w->type == TT_Q4_0 || w->type == TT_Q4_K) && im->k->gemm_q8_0 != NULL &&
		 n >= GEMM_TOKENS;
	/* a decode batch: 8-token tiles (one token is memory-bound on the dot) */
	j.gemm8 = !j.gemm && ((w->type == TT_Q8_0 && w->bsum != NULL) || w->type == TT_Q4_0) &&
		  im->k->gemm8_q8_0 != NULL && n >= 2 && n < GEMM_TOKENS;
	if (j.quantized)
		threadpool_run(im->pool, mm_quantize_x, &j);
	if (j.gemm)
		threadpool_run(im->pool, mm_pack_tiles, &j);
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
cpu_get_rows(struct compute *c, const struct weight *w, const int32_t *ids, int n, float *out)
{
	(void)c;
	for (int t = 0; t < n; t++)
		tensor_dequantize_row(w->type, (const uint8_t *)w->data + (int64_t)ids[t] * w->row_bytes,
				      out + (int64_t)t * w->cols, (size_t)w->cols);
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
cpu_rope(struct compute *c, float *x, int n, int n_heads, int head_dim, int n_rot, const int32_t *pos,
	 const float *inv_freq, int neox)
{
	(void)c;
	for (int t = 0; t < n; t++) {
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
	struct cpu_impl *im;
	const float *q;
	int n;
	const int32_t *pos;
	const int32_t *const *table;
	int block_shift; /* log2(block size) */
	const float *k, *v;
	size_t stride;
	int n_head, n_head_kv, head_dim;
	float *out;
};

static void
att_worker(void *arg, int ith, int nth)
{
	struct att_job *j = arg;
	const struct cpu_kernels *k = j->im->k;
	float *score = j->im->att_buf + (size_t)ith * j->im->att_len;
	int64_t lo, hi, total = (int64_t)j->n * j->n_head;
	int group = j->n_head / j->n_head_kv;
	float scale = 1.0f / sqrtf((float)j->head_dim);

	split(total, ith, nth, &lo, &hi);
	for (int64_t th = lo; th < hi; th++) {
		int t = (int)(th / j->n_head), h = (int)(th % j->n_head), kvh = h / group;
		const float *qh = j->q + ((int64_t)t * j->n_head + h) * j->head_dim;
		float *oh = j->out + ((int64_t)t * j->n_head + h) * j->head_dim;
		const int32_t *blocks = j->table[t];
		int len = j->pos[t] + 1, bmask = (1 << j->block_shift) - 1;
		float max = -INFINITY, sum = 0.0f;
#define ROW(p) (((size_t)blocks[(p) >> j->block_shift] << j->block_shift) + (size_t)((p)&bmask))
		for (int p = 0; p < len; p++) {
			const float *kp = j->k + ROW(p) * j->stride + (size_t)kvh * j->head_dim;
			score[p] = k->dot_f32(qh, kp, (size_t)j->head_dim) * scale;
			max = score[p] > max ? score[p] : max;
		}
		for (int p = 0; p < len; p++) {
			score[p] = expf(score[p] - max);
			sum += score[p];
		}
		memset(oh, 0, sizeof(float) * (size_t)j->head_dim);
		for (int p = 0; p < len; p++) {
			const float *vp = j->v + ROW(p) * j->stride + (size_t)kvh * j->head_dim;
			float wgt = score[p] / sum;
			for (int d = 0; d < j->head_dim; d++)
				oh[d] += wgt * vp[d];
		}
#undef ROW
	}
}

static void
cpu_attention(struct compute *c, const float *q, int n, const int32_t *pos, const int32_t *const *table, int block_size,
	      const float *k_cache, const float *v_cache, size_t kv_stride, int n_head, int n_head_kv, int head_dim,
	      float *out)
{
	struct cpu_impl *im = impl_of(c);
	int shift = 0;

	while ((1 << shift) < block_size)
		shift++;
	assert((1 << shift) == block_size);
	struct att_job j = {
		im, q, n, pos, table, shift, k_cache, v_cache, kv_stride, n_head, n_head_kv, head_dim, out
	};

	for (int t = 0; t < n; t++)
		assert((size_t)pos[t] < im->att_len);
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

static int cpu_reserve(struct compute *c, int64_t max_cols, int max_tokens, int max_ctx);

static const struct compute_ops cpu_ops = {
	"cpu", cpu_reserve, cpu_matmul, cpu_get_rows, cpu_rmsnorm, cpu_rope, cpu_attention, cpu_swiglu, cpu_add,
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

void
compute_cpu_free(struct compute *c)
{
	if (c == NULL)
		return;
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
		free(im->att_buf);
		threadpool_free(im->pool);
		free(im);
	}
	free(c);
}

int
compute_cpu_new(int n_threads, struct compute **ret)
{
	struct compute *c = calloc(1, sizeof(*c));
	struct cpu_impl *im = calloc(1, sizeof(*im));
	int r;

	if (c == NULL || im == NULL) {
		free(c);
		free(im);
		return PRIVAI_ENOMEM;
	}
	c->ops = &cpu_ops;
	c->impl = im;
	im->k = choose_kernels();
	if ((r = threadpool_new(n_threads, &im->pool)) < 0) {
		compute_cpu_free(c);
		return r;
	}
	*ret = c;
	return PRIVAI_OK;
}

static int
cpu_reserve(struct compute *c, int64_t max_cols, int max_tokens, int max_ctx)
{
	struct cpu_impl *im = c->impl;
	int nth = threadpool_size(im->pool);

	if (im->ts == NULL && (im->ts = calloc((size_t)nth, sizeof(*im->ts))) == NULL)
		return PRIVAI_ENOMEM;
	if ((size_t)max_cols > im->row_buf_len) {
		size_t blocks = GEMM_ROWS * (size_t)(max_cols / 32 + 1);
		for (int i = 0; i < nth; i++) {
			struct thread_scratch *ts = &im->ts[i];
			/* all five grow together with max_cols */
			if (resize((void **)&ts->row, (size_t)max_cols * sizeof(float)) < 0 ||
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
		   (size_t)(max_tokens / GEMM_TOKENS + 1) * (size_t)(max_cols / 32 + 1) * sizeof(struct q8_tile)) < 0 ||
	    ensure((void **)&im->att_buf, &im->att_buf_len, (size_t)nth * (size_t)max_ctx * sizeof(float)) < 0)
		return PRIVAI_ENOMEM;
	if ((size_t)max_ctx > im->att_len)
		im->att_len = (size_t)max_ctx;
	return PRIVAI_OK;
}
