/*
 * The CPU compute backend: the operations of compute.h spread over a fixed
 * thread pool.
 *
 * matmul, the hot spot, and the weights as the CPU holds them are in
 * cpu_matmul.c; attention over the fp16 paged KV cache in
 * cpu_attention.c.  This file has the rest of the operations, the
 * backend's memory (host memory: alloc() is calloc, upload and download
 * are memcpy), the KV cache (one pool per layer) and the scratch that
 * reserve() sizes once.
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
#include "cpu_impl.h"
#include "cpu_onednn.h"
#include "under_asan.h"

int
cpu_ensure(void **p, size_t *len, size_t need)
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

/* ------------------------------------------------------------- the rest */

/* Element-wise work split across the pool: rows for rmsnorm, ranges of
 * elements for swiglu and add (for a 128-token prefill, swiglu alone is
 * a million exponentials per layer). */
struct ew_job {
	int op; /* 0 rmsnorm, 1 swiglu, 2 add */
	const struct cpu_kernels *k;
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
		j->k->swiglu(j->a + lo, j->b + lo, (size_t)(hi - lo));
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

/* Where value d of a position's K (or V) row lies in layer `layer` of
 * the cache: the position's pool row `row` in its head's region (struct
 * cpu_impl.k_cache).  With a position's heads side by side (one region
 * of kv_dim-wide rows, the layout before), a head's rows were kv_dim
 * values apart, 128 bytes read in every 1 KB; each region now holds one
 * head's rows back to back, and Q4_0 generation at a depth of 2048 (Zen
 * 4, 2 threads, three alternating rounds) went from 43.1-51.0 to
 * 55.8-63.7 tok/s (docs/performance.md). */
static size_t
kv_index(const struct cpu_impl *im, int layer, int64_t row, size_t d)
{
	size_t khd = (size_t)im->kv_head_dim, region = (size_t)layer * (size_t)(im->kv_dim / im->kv_head_dim) + d / khd;

	return (region * (size_t)im->kv_rows + (size_t)row) * khd + d % khd;
}

/* The same for K, which the cache holds in tiles of ATT_CHUNK rows
 * stored value by value (struct kv_view): the tile of `row` starts where
 * its first row would, and a head's tile within it (several heads to a
 * region) where that head's values would in the tile's first row, times
 * ATT_CHUNK. */
static size_t
kv_k_index(const struct cpu_impl *im, int layer, int64_t row, size_t d)
{
	size_t first = (size_t)row - (size_t)row % ATT_CHUNK, khd = (size_t)im->kv_head_dim;
	size_t at = kv_index(im, layer, (int64_t)first, d - d % khd);

	return at + (d % khd) * ATT_CHUNK + (size_t)row % ATT_CHUNK;
}

struct att_job {
	const struct cpu_impl *im;
	const float *q;
	int layer;
	int n_head, n_head_kv, head_dim;
	int heads_per_item; /* query heads of one KV head served by one cpu_attend_f16 call */
	int tile;           /* tokens an item: a prompt's run of them shares each cache read */
	float *out;
};

/* Token t continues t - 1's sequence at the next position. */
static int
continues_run(const struct compute_batch *b, int t)
{
	return t > 0 && b->table[t] == b->table[t - 1] && b->pos[t] == b->pos[t - 1] + 1;
}

/* Items are (tile of tokens, heads) pairs taken last first: in a prompt
 * the later tokens see more of the cache, and handing out the largest
 * parts first keeps the last part taken a short one. */
static void
att_worker(void *arg, int ith, int nth)
{
	const struct att_job *j = arg;
	const struct cpu_impl *im = j->im;
	const struct compute_batch *b = &im->batch;
	int hd = j->head_dim, hpi = j->heads_per_item, per_tile = j->n_head / hpi;
	int group = j->n_head / j->n_head_kv;
	int64_t n_items = (int64_t)((b->n + j->tile - 1) / j->tile) * per_tile, lo, hi;
	size_t stride = (size_t)j->n_head * (size_t)hd;

	split(n_items, ith, nth, &lo, &hi);
	for (int64_t it = n_items - 1 - lo; it > n_items - 1 - hi; it--) {
		int t0 = (int)(it / per_tile) * j->tile, h0 = (int)(it % per_tile) * hpi, kvh = h0 / group;
		int t1 = t0 + j->tile < b->n ? t0 + j->tile : b->n;
		for (int t = t0, nt; t < t1; t += nt) {
			for (nt = 1; t + nt < t1 && continues_run(b, t + nt); nt++)
				;
			size_t at = (size_t)t * stride + (size_t)h0 * (size_t)hd;
			size_t v0 = kv_index(im, j->layer, 0, (size_t)kvh * hd);
			struct kv_view kv = { im->k_cache + kv_k_index(im, j->layer, 0, (size_t)kvh * hd),
					      im->v_cache + v0, (size_t)im->kv_head_dim, b->table[t], im->block_shift };
			cpu_attend_f16(im->k, &kv, b->pos[t] + 1, nt, j->q + at, stride, hpi, hd, j->out + at);
		}
	}
}

static void
cpu_kv_write(struct compute *c, int layer, const float *k, const float *v)
{
	struct cpu_impl *im = impl_of(c);
	const struct compute_batch *b = &im->batch;
	size_t dim = (size_t)im->kv_dim, khd = (size_t)im->kv_head_dim;

	assert(layer < im->n_layer);
	for (int t = 0; t < b->n; t++) {
		int pos = b->pos[t];
		int64_t row = ((int64_t)b->table[t][pos >> im->block_shift] << im->block_shift) +
			      (pos & ((1 << im->block_shift) - 1));
		for (size_t d = 0; d < dim; d += khd) {
			uint16_t half[ATT_HEAD_DIM_MAX];
			size_t at = kv_k_index(im, layer, row, d);
			for (size_t d1 = 0; d1 < khd; d1 += ATT_HEAD_DIM_MAX) { /* K: a value every ATT_CHUNK */
				size_t n = khd - d1 < ATT_HEAD_DIM_MAX ? khd - d1 : ATT_HEAD_DIM_MAX;
				im->k->f32_to_f16(k + (size_t)t * dim + d + d1, half, n);
				for (size_t i = 0; i < n; i++)
					im->k_cache[at + (d1 + i) * ATT_CHUNK] = half[i];
			}
			im->k->f32_to_f16(v + (size_t)t * dim + d, im->v_cache + kv_index(im, layer, row, d), khd);
		}
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

/* Tokens an item: as many as fill cpu_attend_f16's rows where most of the
 * batch is prompt (runs of positions of one sequence), while that still
 * leaves every thread several items; one in a batch of decode steps. */
static int
att_tile_tokens(const struct compute_batch *b, int n_items_per_token, int hpi, int n_threads)
{
	int continued = 0, tile = ATT_ROWS_MAX / hpi;

	for (int t = 1; t < b->n; t++)
		continued += continues_run(b, t);
	if (2 * continued < b->n)
		return 1;
	while (tile > 1 && (int64_t)((b->n + tile - 1) / tile) * n_items_per_token < 4 * (int64_t)n_threads)
		tile /= 2;
	return tile;
}

static void
cpu_attention(struct compute *c, int layer, const float *q, int n_head, int n_head_kv, int head_dim, float *out)
{
	struct cpu_impl *im = impl_of(c);
	/* the threads at work now, not the pool's size: narrowed on busy
	 * CPUs (threadpool_adapt.h) one thread reads each KV head's rows once
	 * for all its query heads, where splitting them for two threads read
	 * them twice (the fixture model ran 25 % slower narrowed than with
	 * --threads 1) */
	int group = n_head / n_head_kv, n_threads = threadpool_width(im->pool);
	int hpi = att_heads_per_item(im->batch.n, n_head, group, n_threads);
	struct att_job j = {
		.im = im,
		.q = q,
		.layer = layer,
		.n_head = n_head,
		.n_head_kv = n_head_kv,
		.head_dim = head_dim,
		.heads_per_item = hpi,
		.tile = att_tile_tokens(&im->batch, n_head / hpi, hpi, n_threads),
		.out = out,
	};

	assert(layer < im->n_layer && n_head_kv * head_dim == im->kv_dim && n_head % n_head_kv == 0);
	assert(im->kv_head_dim % head_dim == 0);
	assert(head_dim <= ATT_HEAD_DIM_MAX);
	threadpool_run(im->pool, att_worker, &j);
}

static void
cpu_swiglu(struct compute *c, float *a, const float *b, size_t count)
{
	struct ew_job j = { .op = 1, .k = impl_of(c)->k, .a = a, .b = b, .count = count };

	ew_run(c, &j, count * 8); /* the exp: weigh it as several adds */
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
	.matmul_n = cpu_matmul_n,
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

int
compute_cpu_prefetch(void)
{
	(void)choose_kernels(); /* decides it */
	return cpu_stream_prefetch > 0;
}

void
compute_cpu_prefetch_ahead(int *l2_bytes, int *l1_bytes)
{
	*l2_bytes = cpu_prefetch_l2_ahead;
	*l1_bytes = cpu_prefetch_l1_ahead;
}

int
compute_cpu_wide_prefetch(void)
{
	(void)choose_kernels();
	return cpu_wide_prefetch > 0;
}

int
compute_cpu_pairs(double *speedup)
{
	const struct cpu_kernels *k = choose_kernels(); /* decides it */

	*speedup = strcmp(k->name, "avx512-vnni") == 0 ? cpu_pairs_speedup : 0;
	return k->gemm_q4_0x8_pairs != NULL;
}

const char *
compute_cpu_path(uint32_t type, int n_tokens)
{
	return cpu_matmul_path(choose_kernels(), type, n_tokens);
}

const char *
compute_cpu_onednn(void)
{
	return cpu_onednn_status();
}

/*
 * A KV pool: zeroed pages as they are first written, in 2 MB pages where
 * the kernel's transparent huge pages allow it.  Attention reads every
 * row of the context every step: 64 MB a token of the 1B-class model at
 * a depth of 2048, 16K pages of 4 KB, more than the L2 TLB covers, so
 * each page was a table walk.  In 2 MB pages, Q4_0 generation at that
 * depth on Zen 4 went from 33.5 to 37.8 tok/s (means of six alternating
 * rounds; prompts the same).
 * Under ASan, on the heap, where it sees a row written past the end. */
static uint16_t *
kv_pool_alloc(size_t bytes)
{
#ifdef PRIVAI_UNDER_ASAN
	return calloc(1, bytes);
#else
	/* fd -1 with MAP_ANONYMOUS, as POSIX asks; cppcheck allows fds >= 0 only */
	// cppcheck-suppress invalidFunctionArg
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: THP may be off */
	return p;
#endif
}

static void
kv_pool_free(uint16_t *p, size_t bytes)
{
#ifdef PRIVAI_UNDER_ASAN
	(void)bytes;
	free(p);
#else
	if (p != NULL)
		munmap(p, bytes);
#endif
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
			free(im->ts[i].amx8);
			free(im->ts[i].ystage);
			free(im->ts[i].panel);
			free(im->ts[i].amx);
		}
		free(im->ts);
		free(im->xq);
		free(im->tiles);
		free(im->xbf);
		free(im->xr);
		free(im->xpk);
		free(im->xk);
		free(im->xp);
		free(im->xkp);
		kv_pool_free(im->k_cache, im->kv_bytes);
		kv_pool_free(im->v_cache, im->kv_bytes);
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
compute_cpu_threads_active(const struct compute *c)
{
	return c->ops == &cpu_ops ? threadpool_width(((const struct cpu_impl *)c->impl)->pool) : 0;
}

void
compute_cpu_parallel(struct compute *c, void (*fn)(void *arg, int part, int parts), void *arg)
{
	if (c->ops == &cpu_ops)
		threadpool_run(impl_of(c)->pool, fn, arg);
	else
		fn(arg, 0, 1);
}

/* PRIVAI_MATMUL_INLINE: a byte count replacing MATMUL_INLINE_BYTES (0:
 * every matmul through the pool); anything else leaves the default. */
static size_t
matmul_inline_bytes(void)
{
	const char *v = getenv("PRIVAI_MATMUL_INLINE");
	char *end;
	unsigned long long n;

	if (v == NULL || *v == '\0')
		return MATMUL_INLINE_BYTES;
	n = strtoull(v, &end, 10);
	return *end == '\0' && v[0] != '-' ? (size_t)n : MATMUL_INLINE_BYTES;
}

int
compute_cpu_new(const struct compute_params *p, struct compute **ret, char *err)
{
	struct compute *c = calloc(1, sizeof(*c));
	struct cpu_impl *im = calloc(1, sizeof(*im));
	int cores = threadpool_default_threads(), n_threads = p->n_threads > 0 ? p->n_threads : cores;
	int r;

	/* threads to grow into: asleep until the CPUs have the cores */
	if (p->n_threads <= 0 && !p->fixed_threads && p->max_threads > n_threads)
		n_threads = p->max_threads;

	if (c == NULL || im == NULL) {
		free(c);
		free(im);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	}
	c->ops = &cpu_ops;
	c->impl = im;
	im->k = choose_kernels();
	im->inline_bytes = matmul_inline_bytes();
	if ((r = threadpool_new(n_threads < 1 ? 1 : n_threads, &im->pool)) < 0) {
		cpu_destroy(c);
		return privai_fail(err, r, "cannot start %d compute threads", n_threads);
	}
	threadpool_adapt(im->pool, !p->fixed_threads);
	/* asked for more threads than cores: hyperthreads wanted */
	threadpool_count_cpus(im->pool, p->n_threads > cores);
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
	/* K's tiles (struct kv_view) lie whole in a block */
	assert((1 << shift) == s->block_size && s->block_size % ATT_CHUNK == 0 && im->k_cache == NULL);
	im->block_shift = shift;
	im->n_layer = s->n_layer;
	im->kv_rows = s->kv_rows;
	im->kv_dim = s->kv_dim;
	im->kv_head_dim = s->head_dim > 0 && s->kv_dim % s->head_dim == 0 ? s->head_dim : s->kv_dim;
	im->kv_bytes = (n ? n : 1) * sizeof(uint16_t);
	im->k_cache = kv_pool_alloc(im->kv_bytes);
	im->v_cache = kv_pool_alloc(im->kv_bytes);
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
		/* Q6_K keeps two sums and scales per block; AMX widens 16 rows */
		size_t blocks = 2 * (AMX_Q8_ROWS > GEMM_ROWS ? AMX_Q8_ROWS : GEMM_ROWS) * (size_t)(max_cols / 32 + 1);
		for (int i = 0; i < nth; i++) {
			struct thread_scratch *ts = &im->ts[i];
			/* all of them grow together with max_cols */
			if (resize((void **)&ts->row, GEMM_F32_ROWS * (size_t)max_cols * sizeof(float)) < 0 ||
			    resize((void **)&ts->wsum, blocks * sizeof(int32_t)) < 0 ||
			    resize((void **)&ts->wd, blocks * sizeof(float)) < 0 ||
			    resize((void **)&ts->wmin, blocks * sizeof(float)) < 0 ||
			    resize((void **)&ts->wrows, blocks * 34) < 0 ||
			    (im->k->gemm_q8_amx != NULL &&
			     resize((void **)&ts->amx8, (size_t)(max_cols / 32 + 1) * sizeof(struct amx_q8_wblock)) <
				     0))
				return PRIVAI_ENOMEM;
		}
		im->row_buf_len = (size_t)max_cols;
	}
	for (int i = 0; i < nth && im->k->gemm_f32_packed != NULL; i++)
		if (im->ts[i].panel == NULL && (im->ts[i].panel = malloc(PANEL_FLOATS * sizeof(float))) == NULL)
			return PRIVAI_ENOMEM;
	if (max_tokens > im->ystage_tokens) {
		for (int i = 0; i < nth; i++)
			if (resize((void **)&im->ts[i].ystage, Y_STAGE_ROWS * (size_t)max_tokens * sizeof(float)) < 0)
				return PRIVAI_ENOMEM;
		im->ystage_tokens = max_tokens;
	}
	if (cpu_ensure((void **)&im->xq, &im->xq_len,
		       (size_t)max_tokens * (size_t)(max_cols / 32 + 1) * sizeof(struct block_q8)) < 0 ||
	    cpu_ensure((void **)&im->tiles, &im->tiles_len,
		       (size_t)(max_tokens / GEMM_TOKENS + 1) * (size_t)(max_cols / 32 + 1) * sizeof(struct q8_tile)) <
		    0)
		return PRIVAI_ENOMEM;
	for (int i = 0; i < nth && im->k->amx_gemm != NULL; i++)
		if (im->ts[i].amx == NULL && (im->ts[i].amx = malloc(AMX_SCRATCH_BYTES)) == NULL)
			return PRIVAI_ENOMEM;
	/* AMX keeps three such tiles a group for F16 (the values and two
	 * remainders) */
	if (im->k->gemm_bf16 != NULL &&
	    cpu_ensure((void **)&im->xbf, &im->xbf_len,
		       (im->k->amx_gemm != NULL ? 3 : 1) * (size_t)(max_tokens / GEMM_BF16_TOKENS + 1) *
			       GEMM_BF16_TOKENS * (size_t)(max_cols / 2 + 1) * sizeof(uint32_t)) < 0)
		return PRIVAI_ENOMEM;
	return cpu_reserve_kv(im, s);
}
