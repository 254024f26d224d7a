/*
 * The CPU backend's private state, shared by cpu_backend.c (the operations
 * other than matmul, memory, the KV cache) and cpu_matmul.c (matmul and
 * the weights as the CPU holds them).
 */
#ifndef PRIVAI_CPU_IMPL_H
#define PRIVAI_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "privai/compute.h"
#include "privai/threadpool.h"
#include "cpu_dot.h"

#define GEMM_ROWS 4 /* int8 GEMM rows a step: they stay in L1 while the token tiles stream by */

/* What one pool thread writes while multiplying: sized once by reserve(). */
struct thread_scratch {
	float *row;                 /* GEMM_F32_ROWS dequantized weight rows */
	int32_t *wsum;              /* GEMM_ROWS x blocks (x 2 for Q6_K's halves): -128 * sum(w) */
	float *wd;                  /* GEMM_ROWS x blocks (x 2 for Q6_K's halves): weight scales */
	float *wmin;                /* GEMM_ROWS x blocks: Q4_K offsets */
	uint8_t *wrows;             /* GEMM_ROWS rows widened to Q8_0 blocks (AMX_Q8_ROWS on AMX) */
	struct amx_q8_wblock *amx8; /* AMX_Q8_ROWS rows staged for the int8 AMX GEMM, a block each */
	float *ystage;              /* Y_STAGE_ROWS outputs of every token, a token's together */
	float *panel;               /* the packed float GEMM: PANEL_FLOATS (rows, their panel, their sums) */
	void *amx;                  /* the AMX GEMM: AMX_SCRATCH_BYTES (sums, F16 rows split to bfloat16) */
};

#define PANEL_FLOATS (2 * GEMM_PK_ROWS * GEMM_PK_COLS + GEMM_PK_ROWS * GEMM_PK_TOKENS)

/* Outputs of this many weight rows (a cache line of y) are gathered
 * before they are stored, so that each line of y is written once. */
#define Y_STAGE_ROWS 16

/* A matmul on 8-row groups whose weight bytes times tokens come under
 * this runs on the calling thread: handing it to the pool and collecting
 * it costs more than the second thread saves.  The Q8_0 fixture's layers
 * (4 of width 256, matrices of 70-418 KB) decoded 5970-6250 tokens/s on 2
 * threads so, 5280-5860 through the pool (alternating); 1 MB and 3 MB
 * read the same as 512 KB (docs/performance.md).  A 1B-class model's
 * smallest job, its fused q, k and v, is 6.7 MB in Q8_0.
 * PRIVAI_MATMUL_INLINE (bytes) overrides it, for the tests of the pool's
 * parts. */
#define MATMUL_INLINE_BYTES (512 * 1024)

struct cpu_impl {
	struct threadpool *pool;
	const struct cpu_kernels *k;
	size_t inline_bytes;       /* MATMUL_INLINE_BYTES */
	struct thread_scratch *ts; /* one per pool thread */
	size_t row_buf_len;        /* columns each ts[i].row holds */
	int ystage_tokens;         /* tokens each ts[i].ystage holds */
	struct block_q8 *xq;       /* quantized activations */
	size_t xq_len;
	struct block_q8k *xk; /* the same in 256-value blocks (k-quant decode), grown on first use */
	size_t xk_len;
	struct q8_pair *xp; /* the same, two tokens a block (q8_pair_pack), grown on first use */
	size_t xp_len;
	struct q8k_pair *xkp; /* xk two tokens a block (q8k_pair_pack), grown on first use */
	size_t xkp_len;
	struct q8_tile *tiles; /* the same, packed 16 tokens a tile, for the GEMM */
	size_t tiles_len;
	uint32_t *xbf; /* bfloat16 activation tiles (struct cpu_kernels.pack_bf16_tile; for AMX hi, then lo) */
	size_t xbf_len;
	float *xr; /* a bfloat16 prompt's tokens rounded, where rows go to float (mm_round_bf16) */
	size_t xr_len;
	float *xpk; /* a prompt's tokens packed 8 to a column for the packed float GEMM, grown on first use */
	size_t xpk_len;

	struct compute_batch batch; /* set_batch(): read in place */
	/* fp16, n_layer x (kv_dim / kv_head_dim) x kv_rows x kv_head_dim each:
	 * a KV head's rows side by side, so that attention streams them */
	uint16_t *k_cache, *v_cache;
	size_t kv_bytes; /* of each pool: kv_pool_free() unmaps that many */
	int n_layer, kv_dim, kv_head_dim;
	int64_t kv_rows;
	int block_shift; /* log2(positions per KV block) */
};

static inline struct cpu_impl *
impl_of(struct compute *c)
{
	return c->impl;
}

/* Part ith of nth of [0, total). */
static inline void
split(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
	*lo = total * ith / nth;
	*hi = total * (ith + 1) / nth;
}

/* Part ith of nth of [0, total), for the pool's runs of parts
 * (privai/threadpool.h): run r's parts cut the r-th equal share of the
 * total, side by side, their sizes falling linearly from about 2/k of the
 * share to 1/k^2 of it, k parts a run (part j's is proportional to
 * 2(k - j) - 1; the last ones may be empty).  nth not a multiple of
 * THREADPOOL_PARTS_PER_THREAD is one run.  A thread takes its own run's
 * parts in order, so it streams its share from end to end, starting on
 * the large parts and finishing on small ones, and the thread that ends
 * first takes the others' last small ones: with equal parts the thread
 * that finished first waited on average half a part at the end of every
 * matmul, 7-13 % of a decode step's time on 2 threads; with four falling
 * ones 2-3 %, with eight 1.5-2.3 % (docs/performance.md). */
static inline void
split_falling(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
	int k = nth % THREADPOOL_PARTS_PER_THREAD == 0 ? THREADPOOL_PARTS_PER_THREAD : nth;
	int64_t runs = nth / k, r = ith / k, j = ith % k;
	int64_t first = total * r / runs, share = total * (r + 1) / runs - first;
	int64_t kk = (int64_t)k * k, a = k - j, b = k - j - 1;

	*lo = first + share - share * a * a / kk;
	*hi = first + share - share * b * b / kk;
}

/* cpu_backend.c: grow a scratch buffer to need bytes; returns 0 or -1
 * (*p unchanged on failure). */
int cpu_ensure(void **p, size_t *len, size_t need);

/* cpu_matmul.c */
void cpu_matmul(struct compute *c, const struct compute_weight *cw, const float *x, int n, float *y);
void cpu_matmul_n(struct compute *c, const struct compute_weight *const *cw, int nw, const float *x, int n,
		  float *const *y);
void cpu_get_rows(struct compute *c, const struct compute_weight *cw, float *out);
int cpu_prepare_weight(struct compute *c, const struct weight *src, struct compute_weight *dst);
void cpu_release_weight(struct compute *c, struct compute_weight *w);
/* What compute_cpu_path() reports, for kernels k. */
const char *cpu_matmul_path(const struct cpu_kernels *k, uint32_t type, int n_tokens);

#endif
