/*
 * The CPU backend's matmul and the weights as it holds them.
 *
 * Rows of the weight are split among threads; each thread walks its rows
 * in small blocks and, for every block, all the tokens of the batch, so a
 * weight row is read from memory once per batch (prefill is matrix-matrix
 * work, not n matrix-vector products).  mm_plan() picks the path for a
 * type and a token count, and compute_cpu_path() reports the same choice:
 * int8 GEMMs for quantized weights in prefill (3- to 6-bit rows widened
 * first, cpu_widen.c and cpu_dot_lowbit.c), int8 dots in decode (Q8_0,
 * Q4_0, Q4_K, Q5_K and Q6_K from their 8-row groups, cpu_q8_0x8.c,
 * cpu_q4_0x8.c, cpu_kquants_x8.c and cpu_q6_kx8.c; Q2_K, Q3_K and IQ4_XS
 * from the file's rows, cpu_dot_lowbit.c and cpu_dot_iq4.c),
 * oneDNN's bfloat16 matmul for BF16 where it is installed
 * (cpu_onednn.c), else vdpbf16ps where the CPU has AVX512_BF16, and float
 * register tiles for the rest.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "privai/status.h"
#include "privai/tensor_type.h"
#include "cpu_impl.h"
#include "cpu_onednn.h"

#define ROW_BLOCK 8           /* weight rows kept hot while the tokens stream by */
#define TOKEN_TILE 48         /* float-path tokens per pass (a multiple of GEMM_F32_TOKENS), bounds the x working set */
#define AMX_GEMM_TOKENS 16    /* tokens from which the repacked int8 types take the GEMM on AMX tiles */
#define AMX_Q6_GEMM_TOKENS 32 /* and Q6_K's rows, widened (gemm_min_tokens) */
#define X8_CHUNK_BYTES 32768  /* 8-row groups a chunk when several passes of tokens read them (L1) */
#define QUANTIZE_INLINE 16384 /* activations quantized on the calling thread up to this many values */
#define GEMM8_MIN_TOKENS 8    /* and from 8 for the types with only per-token dots (gemm_min_tokens) */
#define IQ4X8_GEMM_TOKENS 56  /* and from 56 for IQ4_XS's 8-row groups (gemm_min_tokens) */
#define Q3X8_GEMM_TOKENS 176  /* and from 176 for Q3_K's (gemm_min_tokens) */
#define IQ4_NLX8_GEMM_TOKENS 56      /* and from 56 for IQ4_NL's (gemm_min_tokens) */
#define LEGACY_X8_GEMM_TOKENS 48     /* and from 48 for Q4_1's, Q5_0's and Q5_1's */
#define Q4_0_PAIRS_GEMM_TOKENS 512   /* Q4_0's from 512 where its groups take two tokens a vector */
#define IQ4_NL_PAIRS_GEMM_TOKENS 256 /* and IQ4_NL's from 256 */
#define Q4_K_PAIRS_GEMM_TOKENS 1024  /* and Q4_K's from 1024 */
#define Q5_K_PAIRS_GEMM_TOKENS 512   /* and Q5_K's from 512 */
#define Q6_K_PAIRS_GEMM_TOKENS 256   /* and Q6_K's from 256 */
#define Q4_1_PAIRS_GEMM_TOKENS 256   /* and Q4_1's from 256 */
#define Q5_PAIRS_GEMM_TOKENS 128     /* and Q5_0's and Q5_1's from 128 */
#define IQ4_XS_PAIRS_GEMM_TOKENS 256 /* and IQ4_XS's from 256 */
#define Q3_K_PAIRS_GEMM_TOKENS 1024  /* and Q3_K's from 1024 */

/* ---------------------------------------------------------------- matmul */

/* im->tiles holds either packing of the tokens (mm_pack_tiles) */
_Static_assert(sizeof(struct amx_q8_xblock) == sizeof(struct q8_tile), "the AMX token blocks fit the tiles buffer");

/* How a matmul runs: mm_plan() decides, cpu_matmul() acts on it and
 * compute_cpu_path() reports it. */
struct mm_plan {
	int quantized; /* use xq and the int8 dot */
	int q8k;       /* K-quant decode: the activations as Q8_K (xk) and its dot */
	int gemm;      /* use tiles and the kernels' GEMM */
	int gemm8;     /* use 8-token tiles (small decode batches) */
	int bf16;      /* bfloat16 weights: tiles of bfloat16 activations, vdpbf16ps */
	int onednn;    /* bfloat16 weights: oneDNN's matmul (the flags above are the fallback) */
	int amx;       /* F16 or BF16 weights on AMX tiles (cpu_amx.c; the flags above are the fallback) */
	int amx8;      /* the int8 GEMM (gemm set) on AMX tiles: tiles hold struct amx_q8_xblock */
	int packed;    /* float weights: the packed float GEMM on tokens packed once (xpk; mm_prepare) */
	int pairs;     /* 8-row groups: two tokens a 512-bit vector (xp; mm_prepare) */
};

struct mm_job {
	struct cpu_impl *im;
	const struct weight *w;
	const int16_t *bsum; /* Q8_0's block sums, from prepare_weight(), where it kept the file's rows */
	const uint8_t *x8;   /* Q8_0, Q4_0, Q4_K, Q5_K or Q6_K in groups of 8 rows (prepare_repacked), or NULL */
	const float *x;
	int n;
	float *y;
	struct mm_plan p;
};

/* Types decode takes only on the Q8_K dots: no dot on 32-value blocks */
static int
q8k_only(uint32_t type)
{
	return type == TT_Q2_K || type == TT_Q3_K || type == TT_IQ4_XS;
}

/* The older 32-value types with their own dots and widening
 * (cpu_dot_legacy.c, cpu_dot_iq4.c) */
static int
legacy(uint32_t type)
{
	return type == TT_Q4_1 || type == TT_Q5_0 || type == TT_Q5_1 || type == TT_IQ4_NL;
}

/* The group kernel of Q4_1, Q5_0 or Q5_1 (cpu_legacy_x8.c), NULL for other
 * types and where there is none */
static void (*legacy_x8_gemm(const struct cpu_kernels *k, uint32_t type))(const uint8_t *, int, const struct block_q8 *,
									  size_t, int, float *, size_t)
{
	return type == TT_Q4_1   ? k->gemm_q4_1x8
	       : type == TT_Q5_0 ? k->gemm_q5_0x8
	       : type == TT_Q5_1 ? k->gemm_q5_1x8
				 : NULL;
}

/* The kernel of a type's 8-row groups on pairs of tokens, NULL for other
 * types and where there is none */
static void (*pairs_kernel(const struct cpu_kernels *k, uint32_t type))(const uint8_t *, int, const struct q8_pair *,
									size_t, int, float *, size_t)
{
	return type == TT_Q4_0     ? k->gemm_q4_0x8_pairs
	       : type == TT_IQ4_NL ? k->gemm_iq4_nlx8_pairs
	       : type == TT_Q8_0   ? k->gemm_q8_0x8_pairs
	       : type == TT_Q4_1   ? k->gemm_q4_1x8_pairs
	       : type == TT_Q5_0   ? k->gemm_q5_0x8_pairs
	       : type == TT_Q5_1   ? k->gemm_q5_1x8_pairs
				   : NULL;
}

/* The same for the K-quants' groups, on Q8_K activations */
static void (*kpairs_kernel(const struct cpu_kernels *k, uint32_t type))(const uint8_t *, int, const struct q8k_pair *,
									 size_t, int, float *, size_t)
{
	return type == TT_Q4_K     ? k->gemm_q4_kx8_pairs
	       : type == TT_Q5_K   ? k->gemm_q5_kx8_pairs
	       : type == TT_Q6_K   ? k->gemm_q6_kx8_pairs
	       : type == TT_IQ4_XS ? k->gemm_iq4_xsx8_pairs
	       : type == TT_Q3_K   ? k->gemm_q3_kx8_pairs
	       : type == TT_Q2_K   ? k->gemm_q2_kx8_pairs
				   : NULL;
}

/* Q6_K and Q3_K widen to blocks of two 16-value halves, each with its
 * own scale and sum (gemm_q6_k) */
static int
two_scales(uint32_t type)
{
	return type == TT_Q6_K || type == TT_Q3_K;
}

static void
mm_quantize_x(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, nb = j->w->cols / 32;

	split(j->n, ith, nth, &lo, &hi);
	for (int64_t t = lo; t < hi; t++)
		if (j->p.q8k)
			j->im->k->quantize_q8k(j->x + t * j->w->cols, j->im->xk + t * (nb / 8), (size_t)j->w->cols);
		else
			j->im->k->quantize_q8(j->x + t * j->w->cols, j->im->xq + t * nb, (size_t)j->w->cols);
}

/* The quantized tokens two to a block (q8_pair_pack), pairs split
 * between the threads */
static void
mm_pack_pairs(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, nb = j->w->cols / 32;

	split((j->n + 1) / 2, ith, nth, &lo, &hi);
	if (lo >= hi)
		return;
	int nt = (int)(2 * hi < j->n ? 2 * (hi - lo) : j->n - 2 * lo);
	if (j->p.q8k)
		q8k_pair_pack(j->im->xk + 2 * lo * (nb / 8), nt, (size_t)nb / 8, j->im->xkp + lo * (nb / 8));
	else
		q8_pair_pack(j->im->xq + 2 * lo * nb, nt, (size_t)nb, j->im->xp + lo * nb);
}

static void
mm_pack_tiles(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, nb = j->w->cols / 32, groups = (j->n + GEMM_TOKENS - 1) / GEMM_TOKENS;

	split(groups, ith, nth, &lo, &hi);
	for (int64_t g = lo; g < hi; g++) {
		int nt = j->n - (int)g * GEMM_TOKENS < GEMM_TOKENS ? j->n - (int)g * GEMM_TOKENS : GEMM_TOKENS;
		if (j->p.amx8) {
			amx_q8_xpack(j->im->xq + g * GEMM_TOKENS * nb, nt, (size_t)nb,
				     (struct amx_q8_xblock *)j->im->tiles + g * nb);
			continue;
		}
		q8_tile_pack(j->im->xq + g * GEMM_TOKENS * nb, nt, (size_t)nb, j->im->tiles + g * nb);
	}
}

/* Rows [rb, rb + nr) of a quantized weight as Q8_0 blocks for the int8
 * GEMM: the file's rows for Q8_0, else widened into ts->wrows (*row_bytes
 * apart).  K-quants put their scales and offsets in ts->wd and ts->wmin
 * (rows x blocks) and return them in *wmin; Q6_K two of each a block, no
 * offsets. */
static const uint8_t *
mm_widen(struct mm_job *j, struct thread_scratch *ts, int64_t rb, int nr, size_t *row_bytes, float **wmin)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32;
	const uint8_t *wrows = (const uint8_t *)w->data + rb * w->row_bytes;
	int32_t *wsum = ts->wsum;
	float *wd = ts->wd;

	*row_bytes = w->row_bytes;
	*wmin = NULL;
	if (w->type == TT_Q8_0 && j->x8 == NULL)
		return wrows;
	*row_bytes = (size_t)nb * 34;
	/* repacked rows come in whole groups of 8 (mm_unit) */
	if (j->x8 != NULL && w->type == TT_Q8_0) {
		for (int r = 0; r < nr; r += 8)
			j->im->k->widen_q8_0x8(j->x8 + (size_t)((rb + r) / 8) * (size_t)nb * Q8_0X8_BLOCK, (size_t)nb,
					       ts->wrows + (size_t)r * *row_bytes, *row_bytes);
	} else if (j->x8 != NULL && w->type == TT_Q4_0) {
		for (int r = 0; r < nr; r += 8)
			j->im->k->widen_q4_0x8(j->x8 + (size_t)((rb + r) / 8) * (size_t)nb * Q4_0X8_BLOCK, (size_t)nb,
					       ts->wrows + (size_t)r * *row_bytes, *row_bytes, NULL);
	} else if (j->x8 != NULL && w->type == TT_Q6_K) { /* two scales and sums a block, as below */
		for (int r = 0; r < nr; r += 8)
			j->im->k->widen_q6_kx8(j->x8 + (size_t)((rb + r) / 8) * (size_t)(nb / 8) * Q6X8_BLOCK,
					       (size_t)nb / 8, ts->wrows + (size_t)r * *row_bytes, *row_bytes,
					       wsum + (size_t)r * 2 * nb, wd + (size_t)r * 2 * nb, 2 * (size_t)nb);
	} else if (j->x8 != NULL && w->type == TT_Q3_K) { /* as below, two sums and scales a block */
		for (int r = 0; r < nr; r += 8)
			groups_widen(j->im->k->widen_q3_k, q3x8_unpack,
				     j->x8 + (size_t)((rb + r) / 8) * (size_t)(nb / 8) * Q3X8_BLOCK, (size_t)nb / 8,
				     Q3X8_BLOCK, 2, ts->wrows + (size_t)r * *row_bytes, *row_bytes,
				     wsum + (size_t)r * 2 * nb, wd + (size_t)r * 2 * nb, 2 * (size_t)nb);
	} else if (j->x8 != NULL && w->type == TT_IQ4_NL) { /* 8 blocks at a time back to the file's layout */
		for (int r = 0; r < nr; r += 8)
			groups_widen(j->im->k->widen_iq4_nl, iq4_nlx8_unpack8,
				     j->x8 + (size_t)((rb + r) / 8) * (size_t)nb * Q4_0X8_BLOCK, (size_t)nb / 8,
				     8 * Q4_0X8_BLOCK, 1, ts->wrows + (size_t)r * *row_bytes, *row_bytes,
				     wsum + (size_t)r * nb, wd + (size_t)r * nb, (size_t)nb);
	} else if (j->x8 != NULL && legacy(w->type)) { /* Q4_1, Q5_0, Q5_1: blocks back to the file's layout */
		if (w->type != TT_Q5_0)
			*wmin = ts->wmin;
		for (int r = 0; r < nr; r += 8)
			j->im->k->widen_legacy_x8(w->type,
						  j->x8 + (size_t)((rb + r) / 8) * (size_t)nb *
								  LEGACY_X8_BLOCK(w->type),
						  (size_t)nb, ts->wrows + (size_t)r * *row_bytes, *row_bytes,
						  wsum + (size_t)r * nb, wd + (size_t)r * nb, ts->wmin + (size_t)r * nb,
						  (size_t)nb);
	} else if (j->x8 != NULL && w->type == TT_IQ4_XS) { /* each super-block back to the file's layout */
		for (int r = 0; r < nr; r += 8)
			groups_widen(j->im->k->widen_iq4_xs, iq4x8_unpack,
				     j->x8 + (size_t)((rb + r) / 8) * (size_t)(nb / 8) * IQ4X8_BLOCK, (size_t)nb / 8,
				     IQ4X8_BLOCK, 1, ts->wrows + (size_t)r * *row_bytes, *row_bytes,
				     wsum + (size_t)r * nb, wd + (size_t)r * nb, (size_t)nb);
	} else if (j->x8 != NULL) { /* Q4_K, Q5_K: each super-block back to the file's layout */
		int five = w->type == TT_Q5_K;
		void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *, float *) =
			five ? j->im->k->widen_q5_k : j->im->k->widen_q4_k;
		*wmin = ts->wmin;
		for (int r8 = 0; r8 < nr; r8 += 8) {
			const uint8_t *grp = j->x8 + (size_t)((rb + r8) / 8) * (size_t)(nb / 8) * KX8_BLOCK(five);
			for (int64_t i = 0; i < nb / 8; i++, grp += KX8_BLOCK(five))
				for (int r = 0; r < 8; r++) {
					uint8_t blk[176];
					size_t o = (size_t)(r8 + r) * (size_t)nb + (size_t)i * 8;
					kx8_unpack(grp, r, five, blk);
					widen(blk, ts->wrows + o * 34, 8, wsum + o, wd + o, ts->wmin + o);
				}
		}
	} else if (w->type == TT_Q4_K || w->type == TT_Q5_K) {
		void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *, float *) =
			w->type == TT_Q4_K ? j->im->k->widen_q4_k : j->im->k->widen_q5_k;
		*wmin = ts->wmin;
		for (int r = 0; r < nr; r++)
			widen(wrows + (size_t)r * w->row_bytes, ts->wrows + (size_t)r * *row_bytes, (size_t)nb,
			      wsum + (size_t)r * nb, wd + (size_t)r * nb, ts->wmin + (size_t)r * nb);
	} else if (two_scales(w->type)) {
		/* two scales and sums per block: wsum and wd hold 2 * nb a row */
		void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *) =
			w->type == TT_Q6_K ? j->im->k->widen_q6_k : j->im->k->widen_q3_k;
		for (int r = 0; r < nr; r++)
			widen(wrows + (size_t)r * w->row_bytes, ts->wrows + (size_t)r * *row_bytes, (size_t)nb,
			      wsum + (size_t)r * 2 * nb, wd + (size_t)r * 2 * nb);
	} else if (legacy(w->type)) {
		/* Q4_1 and Q5_1 have offsets */
		if (w->type == TT_Q4_1 || w->type == TT_Q5_1)
			*wmin = ts->wmin;
		for (int r = 0; r < nr; r++)
			j->im->k->widen_legacy(w->type, wrows + (size_t)r * w->row_bytes,
					       ts->wrows + (size_t)r * *row_bytes, (size_t)nb, wsum + (size_t)r * nb,
					       wd + (size_t)r * nb, ts->wmin + (size_t)r * nb);
	} else if (w->type == TT_IQ4_XS) {
		/* the levels, a float scale and a sum a block, no offsets */
		for (int r = 0; r < nr; r++)
			j->im->k->widen_iq4_xs(wrows + (size_t)r * w->row_bytes, ts->wrows + (size_t)r * *row_bytes,
					       (size_t)nb, wsum + (size_t)r * nb, wd + (size_t)r * nb);
	} else if (w->type == TT_Q4_0) {
		/* d * (q - 8) is exactly a Q8_0 block: widen the rows once
		 * per chunk and run the same GEMM on them */
		for (int r = 0; r < nr; r++)
			j->im->k->widen_q4_0(wrows + (size_t)r * w->row_bytes, ts->wrows + (size_t)r * *row_bytes,
					     (size_t)nb, NULL);
	}
	return ts->wrows;
}

/* The int8 GEMM on AMX tiles (cpu_amx.c): 16 rows a step, staged once as
 * the tiles read them (the repacked groups as they are, the file's rows
 * widened first), then every token group; each token's 16 outputs are one store
 * into its line of y, so nothing is staged on the way out. */
static void
mm_rows_amx8(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	const struct cpu_kernels *k = j->im->k;
	struct thread_scratch *ts = &j->im->ts[threadpool_self()];
	int64_t nb = w->cols / 32;
	const struct amx_q8_xblock *x = (const struct amx_q8_xblock *)j->im->tiles;

	for (int64_t rb = r0; rb < r1; rb += AMX_Q8_ROWS) {
		int nr = r1 - rb < AMX_Q8_ROWS ? (int)(r1 - rb) : AMX_Q8_ROWS;
		int has_min = 0; /* K-quants: offsets in the staged blocks */
		if (j->x8 != NULL && w->type == TT_Q8_0) {
			const uint8_t *g0 = j->x8 + (size_t)(rb / 8) * (size_t)nb * Q8_0X8_BLOCK;
			k->amx_q8_stage_x8(g0, nr > 8 ? g0 + (size_t)nb * Q8_0X8_BLOCK : NULL, (size_t)nb, ts->amx8);
		} else if (j->x8 != NULL && w->type == TT_Q4_0) {
			const uint8_t *g0 = j->x8 + (size_t)(rb / 8) * (size_t)nb * Q4_0X8_BLOCK;
			k->amx_q8_stage_q4x8(g0, nr > 8 ? g0 + (size_t)nb * Q4_0X8_BLOCK : NULL, (size_t)nb, ts->amx8);
		} else if (j->x8 != NULL && w->type != TT_Q6_K) { /* Q4_K, Q5_K */
			int five = w->type == TT_Q5_K;
			size_t group = (size_t)(nb / 8) * KX8_BLOCK(five);
			const uint8_t *g0 = j->x8 + (size_t)(rb / 8) * group;
			k->amx_q8_stage_kx8(g0, nr > 8 ? g0 + group : NULL, (size_t)nb / 8, five, ts->amx8);
			has_min = 1;
		} else if (w->type == TT_Q6_K) {
			size_t row_bytes;
			float *wmin;
			const uint8_t *rows = mm_widen(j, ts, rb, nr, &row_bytes, &wmin);
			k->amx_q6_stage_rows(rows, row_bytes, nr, (size_t)nb, ts->wd, ts->amx8);
			k->gemm_q6_amx(ts->amx8, (size_t)nb, x, j->n, j->y + rb, (size_t)w->rows, nr);
			continue;
		} else {
			size_t row_bytes;
			float *wmin;
			const uint8_t *rows = mm_widen(j, ts, rb, nr, &row_bytes, &wmin);
			k->amx_q8_stage_rows(rows, row_bytes, nr, (size_t)nb, wmin != NULL ? ts->wd : NULL, wmin,
					     ts->amx8);
			has_min = wmin != NULL;
		}
		k->gemm_q8_amx(ts->amx8, (size_t)nb, has_min, x, j->n, j->y + rb, (size_t)w->rows, nr);
	}
}

/* Rows in blocks of GEMM_ROWS stay in L1 while every 16-token group of
 * tiles streams past from L2. */
#define GEMM8_ROWS 8
static void
mm_rows_gemm(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32, groups = (j->n + GEMM_TOKENS - 1) / GEMM_TOKENS;
	float out[GEMM8_ROWS * 2 * GEMM_TOKENS]; /* a step is up to 8 rows (a repacked group) */
	struct thread_scratch *ts = &j->im->ts[threadpool_self()];
	int step = j->x8 != NULL ? 8 : GEMM_ROWS;
	/* y is token-major: rows from 4 or 8 weight rows would be a few
	 * floats in each token's line, every line written again by the next
	 * blocks, and lines a multiple of 4 KiB apart compete for the same
	 * cache set.  The outputs wait in ts->ystage until a line is full. */
	float *stage = ts->ystage;
	int staged = 0;

	for (int64_t rb = r0; rb < r1; rb += step) {
		int nr = r1 - rb < step ? (int)(r1 - rb) : step;
		size_t row_bytes;
		float *wmin;
		const uint8_t *wrows = mm_widen(j, ts, rb, nr, &row_bytes, &wmin);
		if (w->type != TT_Q4_K && w->type != TT_Q5_K && w->type != TT_IQ4_XS && !two_scales(w->type) &&
		    !legacy(w->type))
			j->im->k->gemm_q8_0_prep(wrows, row_bytes, nr, (size_t)nb, ts->wsum, ts->wd);
		for (int64_t g = 0; g < groups; g += 2) {
			int ng = groups - g > 1 ? 2 : 1;
			if (two_scales(w->type))
				j->im->k->gemm_q6_k(wrows, row_bytes, nr, ts->wsum, ts->wd, j->im->tiles + g * nb,
						    (size_t)nb, ng, (size_t)nb, out);
			else
				j->im->k->gemm_q8_0(wrows, row_bytes, nr, ts->wsum, ts->wd, wmin, j->im->tiles + g * nb,
						    (size_t)nb, ng, (size_t)nb, out);
			int nt = j->n - (int)g * GEMM_TOKENS;
			if (nt > ng * GEMM_TOKENS)
				nt = ng * GEMM_TOKENS;
			float *st = stage + g * GEMM_TOKENS * Y_STAGE_ROWS + staged;
			for (int r = 0; r < nr; r++)
				for (int t = 0; t < nt; t++)
					st[t * Y_STAGE_ROWS + r] = out[r * 2 * GEMM_TOKENS + t];
		}
		staged += nr;
		if (staged + step > Y_STAGE_ROWS || rb + nr >= r1) {
			for (int t = 0; t < j->n; t++)
				memcpy(j->y + (int64_t)t * w->rows + rb + nr - staged, stage + t * Y_STAGE_ROWS,
				       (size_t)staged * sizeof(float));
			staged = 0;
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

/* Rows a chunk: their weights (64 x 2 x cols bytes) stay in L2 while every
 * token group passes, and each group's outputs are whole cache lines of y
 * written while hot (rows outer and groups inner wrote every line of y
 * twice, half each time, a miss each: a quarter of the GEMM's time). */
#define BF16_ROW_CHUNK 64

static void
mm_rows_bf16(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t half = w->cols / 2, groups = (j->n + GEMM_BF16_TOKENS - 1) / GEMM_BF16_TOKENS;
	size_t tile = (size_t)half * GEMM_BF16_TOKENS; /* uint32 per group */
	float out[GEMM_BF16_ROWS * 2 * GEMM_BF16_TOKENS];

	for (int64_t rc = r0; rc < r1; rc += BF16_ROW_CHUNK) {
		int64_t rce = r1 - rc < BF16_ROW_CHUNK ? r1 : rc + BF16_ROW_CHUNK;
		for (int64_t g = 0; g < groups; g += 2) {
			int ng = groups - g > 1 ? 2 : 1;
			int nt = j->n - (int)g * GEMM_BF16_TOKENS;
			if (nt > ng * GEMM_BF16_TOKENS)
				nt = ng * GEMM_BF16_TOKENS;
			for (int64_t rb = rc; rb < rce; rb += GEMM_BF16_ROWS) {
				int nr = rce - rb < GEMM_BF16_ROWS ? (int)(rce - rb) : GEMM_BF16_ROWS;
				j->im->k->gemm_bf16((const uint16_t *)w->data + rb * w->cols, (size_t)w->cols, nr,
						    j->im->xbf + (size_t)g * tile, tile, ng, (size_t)w->cols, out);
				for (int t = 0; t < nt; t++) {
					float *yr = j->y + (g * GEMM_BF16_TOKENS + t) * w->rows + rb;
					for (int r = 0; r < nr; r++)
						yr[r] = out[r * 2 * GEMM_BF16_TOKENS + t];
				}
			}
		}
	}
}

/* The AMX GEMM's activations: pack_bf16_tile's 16-token tiles (hi), and
 * for F16 weights their remainders (lo) after the hi tiles of every
 * group, and what those left (lo2) after the lo tiles. */
static void
mm_pack_amx(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, cols = j->w->cols, groups = (j->n + GEMM_BF16_TOKENS - 1) / GEMM_BF16_TOKENS;
	size_t group = (size_t)(cols / 2) * GEMM_BF16_TOKENS;
	uint32_t *xl = j->w->type == TT_F16 ? j->im->xbf + (size_t)groups * group : NULL;

	split(groups, ith, nth, &lo, &hi);
	for (int64_t g = lo; g < hi; g++) {
		const float *xg = j->x + g * GEMM_BF16_TOKENS * cols;
		int nt = j->n - (int)g * GEMM_BF16_TOKENS < GEMM_BF16_TOKENS ? j->n - (int)g * GEMM_BF16_TOKENS
									     : GEMM_BF16_TOKENS;
		j->im->k->pack_bf16_tile(xg, (size_t)cols, nt, (size_t)cols, j->im->xbf + (size_t)g * group);
		if (xl != NULL)
			j->im->k->amx_pack_lo(xg, (size_t)cols, nt, (size_t)cols, xl + (size_t)g * group,
					      xl + (size_t)(groups + g) * group);
	}
}

static void
mm_rows_amx(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	size_t ldw = w->row_bytes / sizeof(uint16_t), groups = (size_t)(j->n + GEMM_BF16_TOKENS - 1) / GEMM_BF16_TOKENS;
	size_t group = (size_t)(w->cols / 2) * GEMM_BF16_TOKENS;
	int f16 = w->type == TT_F16;

	const uint32_t *const x[3] = { j->im->xbf, f16 ? j->im->xbf + groups * group : NULL,
				       f16 ? j->im->xbf + 2 * groups * group : NULL };

	if (r1 > r0)
		j->im->k->amx_gemm(f16, (const uint16_t *)w->data + r0 * (int64_t)ldw, ldw, (int)(r1 - r0), x, j->n,
				   (size_t)w->cols, j->y + r0, (size_t)w->rows, j->im->ts[threadpool_self()].amx);
}

/* Weights the AMX GEMM takes whole: 32-row blocks of 32-column steps. */
static int
amx_fits(const struct weight *w)
{
	return w->rows % AMX_ROW_BLOCK == 0 && w->cols % 32 == 0;
}

/* F16 and BF16 decode converts inside the dot rather than a row at a
 * time into a buffer: one or two tokens read the row once either way. */
static int
half_dot(uint32_t type, int n)
{
	return (type == TT_F16 || type == TT_BF16) && n <= 2;
}

/* Float weights through the packed GEMM (cpu_gemm_f32.c) wherever decode
 * does not take the dot (3 tokens and more, as half_dot): one path for
 * every prompt, so a token's logits do not depend on how many tokens its
 * batch had (test_paged reruns a prefix in a batch of 6 against one of 34). */
static int
packed_f32(const struct cpu_kernels *k, uint32_t type, int n)
{
	return k->gemm_f32_packed != NULL && k->pack_f32_tokens != NULL && n > 2 &&
	       (type == TT_F16 || type == TT_BF16 || type == TT_F32);
}

/* From how many tokens a pass the int8 GEMM beats the kernels that take
 * up to 8 tokens a pass over the weights' own layout; below it the
 * GEMM's tile packing and widening cost more than they save.  Measured
 * with 2 threads here (docs/performance.md), tokens/s without and with
 * the GEMM: Q8_0 groups pp64 215/202, pp128 222/244; Q4_K groups pp128
 * 217/204, pp160 204/220; Q5_K groups pp64 195/183, pp96 198/204; Q6_K
 * rows pp48 145/133, pp64 150/171. */
static int
gemm_min_tokens(const struct cpu_kernels *k, uint32_t type, int x8)
{
	/* on AMX tiles the GEMM (tokens as A) overtakes the 8-row groups
	 * between 8 and 16 tokens: pp16 Q8_0 92-106 -> 112-141, Q4_0 113-117
	 * -> 153, Q4_K_M 91-102 -> 104-120; a decode step of 8 sequences
	 * loses on it (Q4_0 113-136 -> 77-79; docs/performance.md) */
	if (x8 && k->gemm_q8_amx != NULL && type != TT_Q6_K)
		return AMX_GEMM_TOKENS;
	/* Q6_K's rows widened onto the tiles against the Q8_K dots, 2 threads,
	 * bench -p N (tok/s, two rounds): pp16 72/77 and 46/69, pp32 71/68
	 * and 93/71, pp48 112/74, pp64 113/69 */
	if (type == TT_Q6_K && k->gemm_q6_amx != NULL)
		return AMX_Q6_GEMM_TOKENS;
	/* Q4_0's and IQ4_NL's groups two tokens a 512-bit vector against the
	 * GEMM (Zen 5, 1B-class files, two alternating rounds, tok/s pairs /
	 * GEMM): Q4_0 pp128 350/317 and 352/308, pp256 327/315 and 390/328,
	 * pp512 377/369 and 344/361, pp1024 357/350 and 325/327; IQ4_NL
	 * pp64 370/283 and 376/199, pp128 377/336 and 324/242, pp256 347/366
	 * and 355/354, pp512 250/359 and 343/367 */
	if (x8 && type == TT_Q4_0 && k->gemm_q4_0x8_pairs != NULL)
		return Q4_0_PAIRS_GEMM_TOKENS;
	if (x8 && type == TT_IQ4_NL && k->gemm_iq4_nlx8_pairs != NULL)
		return IQ4_NL_PAIRS_GEMM_TOKENS;
	/* IQ4_NL in Q4_0's groups (llama.cpp's IQ4_NL file, two rounds, tok/s
	 * GEMM / groups): pp48 186/203 and 187/197, pp64 212/196 and
	 * 208/203 */
	if (x8 && type == TT_IQ4_NL)
		return IQ4_NLX8_GEMM_TOKENS;
	/* Q4_1, Q5_0 and Q5_1 in 8-row groups (1B-class files privai made,
	 * two rounds, tok/s groups / GEMM): Q4_1 pp40 252/206 and 230/186,
	 * pp48 210/200 and 220/224, pp56 237/263 and 259/266; Q5_0 pp40
	 * 256/234 and 255/238, pp48 223/261 and 262/280; Q5_1 pp40 234/216
	 * and 224/213, pp48 232/257 and 231/221, pp56 216/236 and 198/253.
	 * Their groups two tokens a 512-bit vector against the GEMM (Zen 5,
	 * 1B-class files, two alternating rounds, tok/s pairs / GEMM): Q4_1
	 * pp64 294/225 and 319/264, pp128 387/261 and 324/294, pp256 365/338
	 * and 312/303, pp384 307/337 and 302/304; Q5_0 pp64 317/283 and
	 * 301/280, pp128 281/282 and 305/301, pp256 289/298 and 319/343; Q5_1
	 * pp64 296/253 and 320/269, pp128 287/287 and 289/307, pp256 274/289
	 * and 314/333 */
	if (x8 && legacy(type) && pairs_kernel(k, type) != NULL)
		return type == TT_Q4_1 ? Q4_1_PAIRS_GEMM_TOKENS : Q5_PAIRS_GEMM_TOKENS;
	if (x8 && legacy(type))
		return LEGACY_X8_GEMM_TOKENS;
	if (x8 && (type == TT_Q8_0 || type == TT_Q4_0))
		return X8_GEMM_TOKENS;
	/* Q4_K's and Q5_K's groups two tokens a 512-bit vector against the
	 * GEMM (Zen 5, 1B-class Q4_K_M and Q5_K_M files, two alternating
	 * rounds, tok/s pairs / GEMM): Q4_K_M pp256 365/289 and 374/313,
	 * pp512 348/288 and 352/310, then 353/328 and 338/307, pp768 339/322
	 * and 326/303, pp1024 304/308 and 304/289; Q5_K_M pp128 329/249 and
	 * 317/269, pp512 307/262 and 292/291, pp768 281/316 and 277/293.
	 * Q4_K takes the GEMM from 1024, Q5_K from 512. */
	if (x8 && (type == TT_Q4_K || type == TT_Q5_K) && kpairs_kernel(k, type) != NULL)
		return type == TT_Q4_K ? Q4_K_PAIRS_GEMM_TOKENS : Q5_K_PAIRS_GEMM_TOKENS;
	if (x8 && type == TT_Q4_K)
		return 144;
	if (x8 && type == TT_Q5_K)
		return 96;
	/* IQ4_XS in 8-row groups (llama.cpp's IQ4_XS file, two rounds,
	 * tok/s GEMM / groups): pp48 225/233 and 210/236, pp56 222/233 and
	 * 229/218, pp64 263/220 and 258/237.  Two tokens a 512-bit vector
	 * against the GEMM (Zen 5, a 1B-class file privai wrote, two
	 * alternating rounds, tok/s pairs / GEMM): pp32 297/295 and 327/322,
	 * pp64 347/270 and 339/244, pp128 327/322 and 354/307, pp256 316/310
	 * and 336/354 */
	if (x8 && type == TT_IQ4_XS && kpairs_kernel(k, type) != NULL)
		return IQ4_XS_PAIRS_GEMM_TOKENS;
	if (x8 && type == TT_IQ4_XS)
		return IQ4X8_GEMM_TOKENS;
	/* Q3_K in 8-row groups against the GEMM on its rows widened to
	 * Q6_K's (privai's Q3_K_M mix, two rounds, tok/s GEMM / groups): pp64 171/228 and
	 * 169/235, pp128 210/233 and 212/227, pp160 237/247 and 240/249,
	 * pp192 252/247 and 242/245; two tokens a 512-bit vector (Zen 5, a
	 * 1B-class Q3_K_M file, two alternating rounds, tok/s pairs / GEMM):
	 * pp192 283/207 and 334/235, pp256 261/225 and 281/227, pp384 276/226
	 * and 313/239, pp512 324/266 and 325/276, pp768 310/265 and 270/269:
	 * the GEMM from 1024, as Q4_K's. */
	if (x8 && type == TT_Q3_K && kpairs_kernel(k, type) != NULL)
		return Q3_K_PAIRS_GEMM_TOKENS;
	if (x8 && type == TT_Q3_K)
		return Q3X8_GEMM_TOKENS;
	/* Q6_K's groups two tokens a 512-bit vector against the GEMM (Zen 5,
	 * a 1B-class Q6_K file, alternating rounds, tok/s pairs / GEMM): pp64
	 * 305/238 and 263/203, pp128 295/261 and 275/228, pp256 295/278 and
	 * 293/258, then, the bus slower, 199/219 and 205/218; pp320 207/213
	 * and 230/236, pp384 209/246 and 191/213 */
	if (type == TT_Q6_K && x8 && kpairs_kernel(k, type) != NULL)
		return Q6_K_PAIRS_GEMM_TOKENS;
	/* Q6_K in 8-row groups as well (Zen 4, four alternating rounds):
	 * pp48 on the groups 110-184 against the rows' 107-119, pp64 the
	 * GEMM 124-180 against the groups' 95-166 */
	if (type == TT_Q6_K && k->dots_q6_k_q8k != NULL)
		return 56;
	/* the types without a kernel for several tokens at once (Q3_K,
	 * IQ4_XS and the older 32-value types where their rows were not
	 * grouped) gain nothing from a decode batch on their dots; the GEMM,
	 * a tile half empty, wins from 8 sequences (bench -p 16 -d 64 -n 16
	 * -b B, tok/s all sequences together, dots against GEMM: IQ4_XS b2
	 * 30.6/15.5, b4 42.5/35.5, b8 46.3/69.4; Q3_K_M b8 64.3/67.3; Q5_0 b4
	 * 26.4/28.8, b8 25.7/55.3) */
	if (q8k_only(type) || legacy(type))
		return GEMM8_MIN_TOKENS;
	return GEMM_TOKENS;
}

/* Does the vdpbf16ps GEMM beat converting rows to float here?
 * PRIVAI_BF16_GEMM=1 or 0 says (the tests take both paths on any CPU
 * with the instruction); else what cpu_kernels_get measured. */
static int
bf16_gemm_wins(const struct cpu_kernels *k)
{
	const char *force = getenv("PRIVAI_BF16_GEMM");

	if (force != NULL && (strcmp(force, "0") == 0 || strcmp(force, "1") == 0))
		return strcmp(force, "1") == 0;
	return !k->bf16_gemm_slow;
}

/* How a matrix of `type` is multiplied by n tokens with kernels k: the one
 * decision cpu_matmul() acts on and compute_cpu_path() reports. */
static void
mm_plan(const struct cpu_kernels *k, uint32_t type, int has_bsum, int x8, int n, struct mm_plan *p)
{
	const char *dn = NULL;

	/* vdpbf16ps tiles from 3 tokens: the tile's padding costs less than
	 * converting every row to float (BF16 pp8 doubles on Zen 4); not
	 * where the instruction is slower than float FMAs */
	int has_bf16 = type == TT_BF16 && k->gemm_bf16 != NULL, slow_bf16 = has_bf16 && !bf16_gemm_wins(k);
	p->bf16 = has_bf16 && !slow_bf16 && !half_dot(type, n);
	/* oneDNN where it wins: a CPU without AVX512_BF16, where ours would
	 * convert rows to float (2.3x, docs/performance.md); beside our own
	 * vdpbf16ps GEMM it lost (pp128 150 against 195 on Zen 4), and on AMX
	 * tiles to ours (pp128 153-155 against 170-173 on a Xeon, where both
	 * have them).  Never under PRIVAI_SIMD=scalar, the reference the rest
	 * is checked against. */
	p->onednn = type == TT_BF16 && n >= ONEDNN_MIN_TOKENS && strcmp(k->name, "scalar") != 0 &&
		    (dn = cpu_onednn_bf16()) != NULL && (cpu_onednn_forced() || !has_bf16);
	/* AMX tiles wherever the packed float GEMM would run (packed_f32: one
	 * path for every prompt), ahead of everything else: BF16 pp128 2.7
	 * times the float GEMM's (docs/performance.md).  F16 too from 3
	 * tokens, though 3 to 15 run faster on the float GEMM (pp8 37 tok/s
	 * against 30): one path for every prompt keeps a token's outputs the
	 * same bits whatever the batch around it (a prompt cut by the prefix
	 * cache, an embedding alone or in a batch).  mm_prepare() falls back
	 * where a weight's shape does not fit the tiles. */
	p->amx = (type == TT_BF16 || (type == TT_F16 && k->amx_f16)) && k->amx_gemm != NULL && n > 2;
	/* Q2_K, Q3_K and IQ4_XS have only the Q8_K dots (and Q3_K and IQ4_XS
	 * the GEMM) */
	int q8k_dot = (type == TT_Q2_K && k->dot_q2_k_q8k != NULL) || (type == TT_Q3_K && k->dot_q3_k_q8k != NULL) ||
		      (type == TT_IQ4_XS && k->dot_iq4_xs_q8k != NULL);
	/* the older 32-value types on their own int8 dots */
	int old_dot = (type == TT_Q4_1 && k->dot_q4_1 != NULL) || (type == TT_Q5_0 && k->dot_q5_0 != NULL) ||
		      (type == TT_Q5_1 && k->dot_q5_1 != NULL) || (type == TT_IQ4_NL && k->dot_iq4_nl != NULL);
	p->quantized = type == TT_Q8_0 || type == TT_Q4_0 || type == TT_Q4_K || type == TT_Q5_K || type == TT_Q6_K ||
		       q8k_dot || old_dot;
	int grouped = x8 && (type == TT_Q8_0 || type == TT_Q4_0);
	p->gemm =
		(((type == TT_Q8_0 || type == TT_Q4_0 || type == TT_Q4_K || type == TT_Q5_K) && k->gemm_q8_0 != NULL) ||
		 (type == TT_Q6_K && k->gemm_q6_k != NULL) ||
		 (type == TT_Q3_K && q8k_dot && k->gemm_q6_k != NULL && k->widen_q3_k != NULL) ||
		 (type == TT_IQ4_XS && q8k_dot && k->gemm_q8_0 != NULL && k->widen_iq4_xs != NULL) ||
		 (old_dot && k->gemm_q8_0 != NULL && k->widen_legacy != NULL)) &&
		n >= gemm_min_tokens(k, type, x8);
	/* on AMX tiles, every type the int8 GEMM widens to Q8_0, and Q6_K
	 * with its halves apart; not Q3_K, IQ4_XS and the older types, whose rows no AMX
	 * machine has run yet (they take the AVX-512 GEMM there) */
	p->amx8 = p->gemm && k->gemm_q8_amx != NULL && type != TT_Q3_K && type != TT_IQ4_XS && !legacy(type) &&
		  (type != TT_Q6_K || k->gemm_q6_amx != NULL);
	/* a decode batch of the file's rows: 8-token tiles (one token is
	 * memory-bound on the dot) */
	p->gemm8 = !p->gemm && !grouped && ((type == TT_Q8_0 && has_bsum) || type == TT_Q4_0) &&
		   k->gemm8_q8_0 != NULL && n >= 2 && n < GEMM_TOKENS;
	/* a decode batch or a short prompt on the groups of Q4_0, IQ4_NL,
	 * Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K or Q2_K: two tokens a 512-bit
	 * vector, where the 8-row kernel takes one a 256-bit one
	 * (gemm_q4_0x8_pairs) */
	p->pairs = x8 && !p->gemm && n >= 2 && (pairs_kernel(k, type) != NULL || kpairs_kernel(k, type) != NULL);
	/* K-quant decode: one scale per 256 activations, integer sums per
	 * super-block (docs/performance.md: Q6_K tg32 +7-23 %) */
	p->q8k = p->quantized && !p->gemm &&
		 ((type == TT_Q6_K && k->dot_q6_k_q8k != NULL) || (type == TT_Q4_K && k->dot_q4_k_q8k != NULL) ||
		  (type == TT_Q5_K && k->dot_q5_k_q8k != NULL) || q8k_dot);
}

/* How many 8-row groups (group bytes each, ng in the share) a chunk of
 * the group kernels holds: all of them when one pass of 8 tokens covers
 * the batch; past 8 tokens a chunk at a time, so the passes after the
 * first find its groups in L1. */
static int64_t
x8_chunk_groups(int n, size_t group, int64_t ng)
{
	int64_t per = (int64_t)(X8_CHUNK_BYTES / group);

	if (n <= 8)
		return ng;
	return per < 1 ? 1 : per;
}

static void
mm_rows_q8(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32;
	const struct cpu_kernels *k = j->im->k;
	float (*dot)(const void *, const struct block_q8 *, size_t) = w->type == TT_Q8_0     ? k->dot_q8_0
								      : w->type == TT_Q4_0   ? k->dot_q4_0
								      : w->type == TT_Q4_K   ? k->dot_q4_k
								      : w->type == TT_Q5_K   ? k->dot_q5_k
								      : w->type == TT_Q4_1   ? k->dot_q4_1
								      : w->type == TT_Q5_0   ? k->dot_q5_0
								      : w->type == TT_Q5_1   ? k->dot_q5_1
								      : w->type == TT_IQ4_NL ? k->dot_iq4_nl
											     : k->dot_q6_k;

	if (j->x8 != NULL && (w->type == TT_Q8_0 || w->type == TT_Q4_0 || legacy(w->type))) {
		/* r0, r1: multiples of 8; IQ4_NL in Q4_0's groups */
		void (*gemm)(const uint8_t *, int, const struct block_q8 *, size_t, int, float *, size_t) =
			w->type == TT_Q8_0     ? k->gemm_q8_0x8
			: w->type == TT_Q4_0   ? k->gemm_q4_0x8
			: w->type == TT_IQ4_NL ? k->gemm_iq4_nlx8
					       : legacy_x8_gemm(k, w->type);
		size_t group = (size_t)nb * (w->type == TT_Q8_0                           ? Q8_0X8_BLOCK
					     : w->type == TT_Q4_0 || w->type == TT_IQ4_NL ? Q4_0X8_BLOCK
											  : LEGACY_X8_BLOCK(w->type));
		void (*pairs)(const uint8_t *, int, const struct q8_pair *, size_t, int, float *, size_t) =
			j->p.pairs ? pairs_kernel(k, w->type) : NULL;
		int64_t g1 = r1 / 8, per = x8_chunk_groups(j->n, group, g1 - r0 / 8);
		for (int64_t g0 = r0 / 8; g0 < g1; g0 += per) {
			int ng = (int)(g1 - g0 < per ? g1 - g0 : per);
			for (int t0 = 0; t0 < j->n; t0 += 8) {
				int nt = j->n - t0 < 8 ? j->n - t0 : 8;
				float *y = j->y + (int64_t)t0 * w->rows + 8 * g0;
				if (pairs != NULL && nt >= 2) /* t0 is even: its pair is t0 / 2 */
					pairs(j->x8 + (size_t)g0 * group, ng, j->im->xp + (int64_t)t0 / 2 * nb,
					      (size_t)nb, nt, y, (size_t)w->rows);
				else
					gemm(j->x8 + (size_t)g0 * group, ng, j->im->xq + (int64_t)t0 * nb, (size_t)nb,
					     nt, y, (size_t)w->rows);
			}
		}
		return;
	}
	if (j->x8 != NULL && w->type != TT_Q4_0) { /* the K-quants, IQ4_XS; r0, r1: multiples of 8 */
		int five = w->type == TT_Q5_K;
		void (*gemm)(const uint8_t *, int, const struct block_q8k *, size_t, int, float *, size_t) =
			w->type == TT_Q6_K     ? k->gemm_q6_kx8
			: w->type == TT_IQ4_XS ? k->gemm_iq4_xsx8
			: w->type == TT_Q3_K   ? k->gemm_q3_kx8
			: w->type == TT_Q2_K   ? k->gemm_q2_kx8
			: five                 ? k->gemm_q5_kx8
					       : k->gemm_q4_kx8;
		size_t group = (size_t)(nb / 8) * (w->type == TT_Q6_K     ? Q6X8_BLOCK
						   : w->type == TT_IQ4_XS ? IQ4X8_BLOCK
						   : w->type == TT_Q3_K   ? Q3X8_BLOCK
						   : w->type == TT_Q2_K   ? Q2X8_BLOCK
									  : KX8_BLOCK(five));
		void (*pairs)(const uint8_t *, int, const struct q8k_pair *, size_t, int, float *, size_t) =
			j->p.pairs ? kpairs_kernel(k, w->type) : NULL;
		int64_t g1 = r1 / 8, per = x8_chunk_groups(j->n, group, g1 - r0 / 8);
		for (int64_t g0 = r0 / 8; g0 < g1; g0 += per) {
			int ng = (int)(g1 - g0 < per ? g1 - g0 : per);
			for (int t0 = 0; t0 < j->n; t0 += 8) {
				int nt = j->n - t0 < 8 ? j->n - t0 : 8;
				float *y = j->y + (int64_t)t0 * w->rows + 8 * g0;
				if (pairs != NULL && nt >= 2)
					pairs(j->x8 + (size_t)g0 * group, ng, j->im->xkp + (int64_t)t0 / 2 * (nb / 8),
					      (size_t)nb / 8, nt, y, (size_t)w->rows);
				else
					gemm(j->x8 + (size_t)g0 * group, ng, j->im->xk + (int64_t)t0 * (nb / 8),
					     (size_t)nb / 8, nt, y, (size_t)w->rows);
			}
		}
		return;
	}
	if (j->p.q8k && w->type == TT_Q6_K && j->n > 1 && k->dots_q6_k_q8k != NULL) {
		/* a decode batch: a row's values unpacked once for 8 tokens */
		for (int64_t rb = r0; rb < r1; rb += ROW_BLOCK) {
			int64_t re = rb + ROW_BLOCK < r1 ? rb + ROW_BLOCK : r1;
			for (int t0 = 0; t0 < j->n; t0 += 8)
				for (int64_t r = rb; r < re; r++)
					k->dots_q6_k_q8k((const uint8_t *)w->data + r * w->row_bytes,
							 j->im->xk + (int64_t)t0 * (nb / 8), (size_t)nb / 8,
							 j->n - t0 < 8 ? j->n - t0 : 8,
							 j->y + (int64_t)t0 * w->rows + r, (size_t)w->rows);
		}
		return;
	}
	if (j->p.q8k) {
		float (*dot8k)(const void *, const struct block_q8k *, size_t) = w->type == TT_Q4_K   ? k->dot_q4_k_q8k
										 : w->type == TT_Q5_K ? k->dot_q5_k_q8k
										 : w->type == TT_Q2_K ? k->dot_q2_k_q8k
										 : w->type == TT_Q3_K ? k->dot_q3_k_q8k
										 : w->type == TT_IQ4_XS
											 ? k->dot_iq4_xs_q8k
											 : k->dot_q6_k_q8k;
		for (int64_t rb = r0; rb < r1; rb += ROW_BLOCK) {
			int64_t re = rb + ROW_BLOCK < r1 ? rb + ROW_BLOCK : r1;
			for (int t = 0; t < j->n; t++) {
				const struct block_q8k *xb = j->im->xk + (int64_t)t * (nb / 8);
				float *yt = j->y + (int64_t)t * w->rows;
				for (int64_t r = rb; r < re; r++)
					yt[r] = dot8k((const uint8_t *)w->data + r * w->row_bytes, xb, (size_t)nb / 8);
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

/* Columns [k0, k0 + kc) of weight row r as floats. */
static void
mm_row_segment(const struct cpu_kernels *k, const struct weight *w, int64_t r, int64_t k0, size_t kc, float *out)
{
	const uint8_t *row = (const uint8_t *)w->data + r * w->row_bytes;

	if (w->type == TT_F16)
		k->f16_to_f32((const uint16_t *)row + k0, out, kc);
	else if (w->type == TT_BF16)
		k->bf16_to_f32((const uint16_t *)row + k0, out, kc);
	else
		memcpy(out, row + k0 * (int64_t)sizeof(float), kc * sizeof(float));
}

/* The tokens of a prompt for the packed float GEMM, 16 a step, once for
 * every part of the job (and every weight fused with it): packed in each
 * part, they were 3 % of an F16 prompt's time. */
static void
mm_pack_f32_x(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, cols = j->w->cols;

	split((j->n + 15) / 16, ith, nth, &lo, &hi);
	for (int64_t g = lo; g < hi; g++) {
		int nt = j->n - 16 * (int)g < 16 ? j->n - 16 * (int)g : 16;
		j->im->k->pack_f32_tokens(j->x + 16 * g * cols, (size_t)cols, nt, (size_t)cols,
					  j->im->xpk + 16 * g * cols);
	}
}

/* The packed float GEMM (cpu_gemm_f32.c): for each pass of up to
 * GEMM_PK_TOKENS tokens, every GEMM_PK_ROWS rows of the thread's share
 * are converted and packed a panel of columns at a time, each panel
 * multiplied with all the pass's tokens (packed by mm_pack_f32_x), and
 * the rows' sums stored a token at a time once the last panel is in.
 * Rows outside columns: each row is read start to end, and the sums
 * stay in L1 and L2.  Columns outside rows, the sums added into y for
 * every panel of columns, read F16 pp128 78-82 tok/s against 89-93 on
 * Zen 4 (docs/performance.md). */
static void
mm_rows_packed(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	const struct cpu_kernels *k = j->im->k;
	float *rows = j->im->ts[threadpool_self()].panel, *a = rows + GEMM_PK_ROWS * GEMM_PK_COLS;
	float *c = a + GEMM_PK_ROWS * GEMM_PK_COLS;
	size_t ldb = (size_t)w->cols * 8; /* floats from one 8-token block of xpk to the next */

	for (int t0 = 0; t0 < j->n; t0 += GEMM_PK_TOKENS) {
		int nt = j->n - t0 < GEMM_PK_TOKENS ? j->n - t0 : GEMM_PK_TOKENS;
		const float *xp = j->im->xpk + (int64_t)t0 * w->cols;
		for (int64_t rc = r0; rc < r1; rc += GEMM_PK_ROWS) {
			int nr = r1 - rc < GEMM_PK_ROWS ? (int)(r1 - rc) : GEMM_PK_ROWS;
			for (int64_t k0 = 0; k0 < w->cols; k0 += GEMM_PK_COLS) {
				size_t kc = (size_t)(w->cols - k0 < GEMM_PK_COLS ? w->cols - k0 : GEMM_PK_COLS);
				const uint16_t *half =
					(const uint16_t *)((const uint8_t *)w->data + rc * w->row_bytes) + k0;
				if (w->type == TT_F16 && k->pack_f16_panel != NULL) {
					k->pack_f16_panel(half, w->row_bytes / sizeof(uint16_t), nr, kc, a);
				} else if (w->type == TT_BF16 && k->pack_bf16_panel != NULL) {
					k->pack_bf16_panel(half, w->row_bytes / sizeof(uint16_t), nr, kc, a);
				} else {
					for (int r = 0; r < nr; r++)
						mm_row_segment(k, w, rc + r, k0, kc, rows + (size_t)r * GEMM_PK_COLS);
					k->pack_f32_panel(rows, GEMM_PK_COLS, nr, kc, a);
				}
				k->gemm_f32_packed(a, kc, xp + k0 * 8, ldb, nt, c, GEMM_PK_ROWS, k0 > 0);
			}
			for (int t = 0; t < nt; t++)
				memcpy(j->y + (int64_t)(t0 + t) * w->rows + rc, c + (size_t)t * GEMM_PK_ROWS,
				       (size_t)nr * sizeof(float));
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
		if (k->dot4_bf16_bf16 != NULL) /* four rows a pass, as F16's below */
			for (; r0 + 4 <= r1; r0 += 4)
				for (int t = 0; t < j->n; t++)
					k->dot4_bf16_bf16((const uint16_t *)((const uint8_t *)w->data +
									     r0 * w->row_bytes),
							  w->row_bytes / sizeof(uint16_t), xb + (int64_t)t * w->cols,
							  (size_t)w->cols, j->y + (int64_t)t * w->rows + r0);
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
		if (w->type == TT_F16 && k->dot4_f16 != NULL) /* four rows a pass: a token loaded once for four */
			for (; r0 + 4 <= r1; r0 += 4)
				for (int t = 0; t < j->n; t++)
					k->dot4_f16((const uint16_t *)((const uint8_t *)w->data + r0 * w->row_bytes),
						    w->row_bytes / sizeof(uint16_t), j->x + (int64_t)t * w->cols,
						    (size_t)w->cols, j->y + (int64_t)t * w->rows + r0);
		for (int64_t r = r0; r < r1; r++)
			for (int t = 0; t < j->n; t++)
				j->y[(int64_t)t * w->rows + r] =
					dot((const uint16_t *)((const uint8_t *)w->data + r * w->row_bytes),
					    j->x + (int64_t)t * w->cols, (size_t)w->cols);
		return;
	}

	if (j->p.packed) {
		mm_rows_packed(j, r0, r1);
		return;
	}
	/* GEMM_F32_ROWS rows at a time as floats in buf, each multiplied with
	 * every token of the tile: a register tile where the CPU has one */
	float *stage = j->im->ts[threadpool_self()].ystage; /* as in mm_rows_gemm */

	for (int t0 = 0; t0 < j->n; t0 += TOKEN_TILE) {
		int t1 = t0 + TOKEN_TILE < j->n ? t0 + TOKEN_TILE : j->n, staged = 0;
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
				float *st = stage + (t - t0) * Y_STAGE_ROWS + staged;
				if (k->gemm_f32 != NULL) {
					k->gemm_f32(wr, ldw, nr, xt, (size_t)w->cols, nt, (size_t)w->cols, st,
						    Y_STAGE_ROWS);
					continue;
				}
				for (int r = 0; r < nr; r++)
					for (int u = 0; u < nt; u++)
						st[u * Y_STAGE_ROWS + r] =
							k->dot_f32(wr + (size_t)r * ldw, xt + (int64_t)u * w->cols,
								   (size_t)w->cols);
			}
			staged += nr;
			if (staged + GEMM_F32_ROWS > Y_STAGE_ROWS || rb + nr >= r1) {
				for (int t = t0; t < t1; t++)
					memcpy(j->y + (int64_t)t * w->rows + rb + nr - staged,
					       stage + (t - t0) * Y_STAGE_ROWS, (size_t)staged * sizeof(float));
				staged = 0;
			}
		}
	}
}

/* Decode batches of 2..15 tokens on the file's rows (where they were not
 * repacked): one or two 8-token groups.  Q4_0 rows are widened to Q8_0 a
 * few at a time, their block sums taken on the way. */
static void
mm_rows_gemm8(struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct weight *w = j->w;
	int64_t nb = w->cols / 32, groups = (j->n + GEMM8_TOKENS - 1) / GEMM8_TOKENS;
	const struct q8_tile8 *tiles = (const struct q8_tile8 *)j->im->tiles;
	float out[GEMM8_ROWS * GEMM8_TOKENS];
	struct thread_scratch *ts = &j->im->ts[threadpool_self()];
	int16_t *sums = (int16_t *)ts->wsum; /* GEMM_ROWS x nb int32 of room */

	/* Q4_0's widened rows fit GEMM_ROWS at a time; Q8_0 rows are read in
	 * place (the 8-row groups take their own kernels: mm_rows_q8) */
	int step = w->type == TT_Q4_0 ? GEMM_ROWS : GEMM8_ROWS;

	for (int64_t rb = r0; rb < r1; rb += step) {
		int nr = r1 - rb < step ? (int)(r1 - rb) : step;
		const uint8_t *wrows = (const uint8_t *)w->data + rb * w->row_bytes;
		const int16_t *bsum = j->bsum != NULL ? j->bsum + rb * nb : sums;
		size_t row_bytes = w->row_bytes;
		if (w->type == TT_Q4_0) {
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

/* Rows [lo, hi) of the job's weight, on the path its plan chose. */
static void
mm_rows(struct mm_job *j, int64_t lo, int64_t hi)
{
	if (j->p.amx)
		mm_rows_amx(j, lo, hi);
	else if (j->p.bf16)
		mm_rows_bf16(j, lo, hi);
	else if (j->p.amx8)
		mm_rows_amx8(j, lo, hi);
	else if (j->p.gemm)
		mm_rows_gemm(j, lo, hi);
	else if (j->p.gemm8)
		mm_rows_gemm8(j, lo, hi);
	else if (j->p.quantized)
		mm_rows_q8(j, lo, hi);
	else
		mm_rows_f32(j, lo, hi, j->im->ts[threadpool_self()].row);
}

/* Rows a part takes whole: a repacked group is 8 rows. */
static int64_t
mm_unit(const struct mm_job *j)
{
	return j->p.amx ? AMX_ROW_BLOCK : j->x8 != NULL ? 8 : 1;
}

static void
mm_worker(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, unit = mm_unit(j);

	split_falling(j->w->rows / unit, ith, nth, &lo, &hi);
	if (lo < hi)
		mm_rows(j, lo * unit, hi * unit);
}

/* Several weights times the same activations, as one pool job: the
 * parts cut the weights' rows laid end to end. */
#define MM_MAX_FUSED 4
struct mm_multi {
	struct mm_job *jobs;
	int n_jobs;
	int64_t unit;
};

static void
mm_multi_worker(void *arg, int ith, int nth)
{
	const struct mm_multi *m = arg;
	int64_t total = 0, lo, hi;

	for (int k = 0; k < m->n_jobs; k++)
		total += m->jobs[k].w->rows / m->unit;
	split_falling(total, ith, nth, &lo, &hi);
	for (int k = 0, off = 0; k < m->n_jobs && off < hi; off += (int)(m->jobs[k].w->rows / m->unit), k++) {
		int64_t units = m->jobs[k].w->rows / m->unit;
		int64_t a = lo > off ? lo : off, b = hi < off + units ? hi : off + units;
		if (a < b)
			mm_rows(&m->jobs[k], (a - off) * m->unit, (b - off) * m->unit);
	}
}

static void
mm_to_bf16(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	int64_t lo, hi, cols = j->w->cols;
	uint16_t *xb = (uint16_t *)j->im->xbf;

	split(j->n, ith, nth, &lo, &hi);
	for (int64_t t = lo; t < hi; t++) {
		if (j->im->k->f32_to_bf16 != NULL)
			j->im->k->f32_to_bf16(j->x + t * cols, xb + t * cols, (size_t)cols);
		else
			for (int64_t i = 0; i < cols; i++)
				xb[t * cols + i] = f32_to_bf16(j->x[t * cols + i]);
	}
}

/* The activations rounded to bfloat16 on our pool, the product on
 * oneDNN's threads (ours sleep meanwhile).  Returns 0, or -1 to fall back
 * on our own kernels. */
static int
mm_onednn(struct mm_job *j)
{
	struct cpu_impl *im = j->im;
	const struct weight *w = j->w;

	if (cpu_ensure((void **)&im->xbf, &im->xbf_len, (size_t)j->n * (size_t)w->cols * sizeof(uint16_t)) < 0)
		return -1;
	threadpool_run(im->pool, mm_to_bf16, j);
	return cpu_onednn_matmul_bf16((const uint16_t *)w->data, w->rows, w->cols, (const uint16_t *)im->xbf, j->n,
				      j->y, threadpool_size(im->pool));
}

/* Q8_0 rows in 8-row groups where the CPU has the kernel and the rows
 * divide; prepare_weight() repacks exactly these. */
static int
q8_0_repacks(const struct cpu_kernels *k, const struct weight *w)
{
	return w->type == TT_Q8_0 && k->gemm_q8_0x8 != NULL && w->rows % 8 == 0;
}

/* The weights prepare_weight() hands to prepare_repacked(): every
 * quantized type but Q8_0 always (their aux is NULL where it kept the
 * file's rows), Q8_0 where q8_0_repacks() says. */
static int
repacks(const struct cpu_kernels *k, const struct weight *w)
{
	return w->type == TT_Q4_0 || w->type == TT_Q4_K || w->type == TT_Q5_K || w->type == TT_Q6_K ||
	       w->type == TT_IQ4_XS || w->type == TT_Q3_K || w->type == TT_Q2_K || legacy(w->type) ||
	       q8_0_repacks(k, w);
}

/* What prepare_weight() left in aux: the 8-row groups, or Q8_0's block
 * sums where it kept the file's rows. */
static const uint8_t *
weight_x8(const struct cpu_kernels *k, const struct compute_weight *cw)
{
	return repacks(k, &cw->w) ? cw->aux : NULL;
}

static const int16_t *
weight_bsum(const struct cpu_kernels *k, const struct compute_weight *cw)
{
	return cw->w.type == TT_Q8_0 && !q8_0_repacks(k, &cw->w) ? cw->aux : NULL;
}

/* A bfloat16 prompt where the rows are converted to float (vdpbf16ps
 * slow here, bf16_gemm_wins) takes its tokens rounded to bfloat16 as
 * decode's dot_bf16_bf16 does, so a token's logits do not depend on how
 * many tokens its batch had.  Where memory runs out the floats stay. */
static void
mm_round_bf16(struct mm_job *j)
{
	struct cpu_impl *im = j->im;
	size_t cols = (size_t)j->w->cols;
	uint16_t *h = (uint16_t *)im->xbf; /* a token's worth: the tiles are not used on this path */

	if (im->xbf_len < cols * sizeof(uint16_t) ||
	    cpu_ensure((void **)&im->xr, &im->xr_len, (size_t)j->n * cols * sizeof(float)) < 0)
		return;
	for (int t = 0; t < j->n; t++) {
		im->k->f32_to_bf16(j->x + t * cols, h, cols);
		im->k->bf16_to_f32(h, im->xr + t * cols, cols);
	}
	j->x = im->xr;
}

/* A job for weight cw, its plan made and its activations quantized,
 * packed or rounded as the plan needs; returns 1 when oneDNN did the
 * whole product (nothing left to run), else 0. */
static int
mm_prepare(struct cpu_impl *im, const struct compute_weight *cw, const float *x, int n, float *y, struct mm_job *j)
{
	const struct weight *w = &cw->w;

	*j = (struct mm_job){ im, w, weight_bsum(im->k, cw), weight_x8(im->k, cw), x, n, y, { 0 } };
	/* reserve() sized every buffer; exceeding it is a caller bug */
	assert((size_t)w->cols <= im->row_buf_len);
	assert((size_t)n * (size_t)(w->cols / 32) * sizeof(struct block_q8) <= im->xq_len);
	assert(n <= im->ystage_tokens);
	mm_plan(im->k, w->type, j->bsum != NULL, j->x8 != NULL, n, &j->p);
	if (j->p.q8k && cpu_ensure((void **)&im->xk, &im->xk_len,
				   (size_t)n * (size_t)(w->cols / 256) * sizeof(struct block_q8k)) < 0) {
		j->p.q8k = 0; /* out of memory: the 32-value blocks, already sized */
		if ((w->type == TT_Q4_K || w->type == TT_Q5_K || w->type == TT_Q6_K || w->type == TT_IQ4_XS ||
		     w->type == TT_Q3_K || w->type == TT_Q2_K) &&
		    !j->p.gemm)
			j->x8 = NULL; /* and the file's rows (the repacked groups take Q8_K) */
		if (q8k_only(w->type) && !j->p.gemm)
			j->p.quantized = 0; /* no 32-value dot: rows dequantized to float */
	}
	/* oneDNN over our AMX tiles only when asked (PRIVAI_ONEDNN=1) */
	if (j->p.amx && (!amx_fits(w) || (j->p.onednn && cpu_onednn_forced())))
		j->p.amx = 0;
	if (j->p.amx) {
		j->p.onednn = j->p.bf16 = 0;
		threadpool_run(im->pool, mm_pack_amx, j);
		return 0;
	}
	if (j->p.onednn && mm_onednn(j) == 0)
		return 1;
	/* a decode step's activations (a few thousand values) are quantized
	 * faster than the pool hands out and collects the job: every job is
	 * a barrier, and a barrier is where a thread the kernel preempted
	 * holds up the others (docs/performance.md, "Shared CPUs") */
	if (j->p.quantized && (size_t)n * (size_t)w->cols <= QUANTIZE_INLINE)
		mm_quantize_x(j, 0, 1);
	else if (j->p.quantized)
		threadpool_run(im->pool, mm_quantize_x, j);
	if (j->p.gemm)
		threadpool_run(im->pool, mm_pack_tiles, j);
	if (j->p.pairs) {
		size_t nb = (size_t)w->cols / 32, pairs = (size_t)(n + 1) / 2;
		if (j->x8 == NULL || (kpairs_kernel(im->k, w->type) != NULL && !j->p.q8k) ||
		    (j->p.q8k ? cpu_ensure((void **)&im->xkp, &im->xkp_len, pairs * nb / 8 * sizeof(struct q8k_pair))
			      : cpu_ensure((void **)&im->xp, &im->xp_len, pairs * nb * sizeof(struct q8_pair))) < 0)
			j->p.pairs = 0; /* out of memory: the 8-row kernel, a token a vector */
		else if (n <= 8)        /* a decode batch: as a step's quantizing, not worth the pool */
			mm_pack_pairs(j, 0, 1);
		else
			threadpool_run(im->pool, mm_pack_pairs, j);
	}
	if (j->p.bf16)
		threadpool_run(im->pool, mm_pack_bf16, j);
	else if (w->type == TT_BF16 && half_dot(w->type, n) && im->k->dot_bf16_bf16 != NULL)
		for (int t = 0; t < n; t++) /* a token or two: not worth the pool */
			im->k->f32_to_bf16(x + (int64_t)t * w->cols, (uint16_t *)im->xbf + (int64_t)t * w->cols,
					   (size_t)w->cols);
	else if (w->type == TT_BF16 && im->k->dot_bf16_bf16 != NULL)
		mm_round_bf16(j);
	/* float weights' prompts on the packed GEMM (mm_rows_f32), where the
	 * packed tokens find room; else the register tile */
	j->p.packed = !j->p.amx && !j->p.bf16 && !j->p.quantized && !half_dot(w->type, n) &&
		      packed_f32(im->k, w->type, n) &&
		      cpu_ensure((void **)&im->xpk, &im->xpk_len,
				 (size_t)(n + 15) / 16 * 16 * (size_t)w->cols * sizeof(float)) == 0;
	if (j->p.packed)
		threadpool_run(im->pool, mm_pack_f32_x, j);
	if (j->p.gemm8) {
		int64_t nb = w->cols / 32;
		for (int g = 0; g * GEMM8_TOKENS < n; g++)
			q8_tile8_pack(im->xq + (int64_t)g * GEMM8_TOKENS * nb,
				      n - g * GEMM8_TOKENS < GEMM8_TOKENS ? n - g * GEMM8_TOKENS : GEMM8_TOKENS,
				      (size_t)nb, (struct q8_tile8 *)im->tiles + (int64_t)g * nb);
	}
	return 0;
}

/* Are these jobs (over the same tokens) too small for the pool
 * (cpu_impl.inline_bytes)?  Only the 8-row groups' kernels stream fast
 * enough on one thread: the fixture's F16 layers ran 5-8 % slower so. */
static int
mm_inline(const struct mm_job *jobs, int n_jobs)
{
	double bytes = 0;

	if (jobs[0].x8 == NULL)
		return 0;
	for (int i = 0; i < n_jobs; i++)
		bytes += (double)jobs[i].w->rows * (double)jobs[i].w->row_bytes * jobs[i].n;
	return bytes < (double)jobs[0].im->inline_bytes;
}

void
cpu_matmul(struct compute *c, const struct compute_weight *cw, const float *x, int n, float *y)
{
	struct cpu_impl *im = impl_of(c);
	struct mm_job j;

	if (mm_prepare(im, cw, x, n, y, &j) != 0)
		return;
	if (mm_inline(&j, 1))
		mm_worker(&j, 0, 1);
	else
		threadpool_run(im->pool, mm_worker, &j);
}

/* Can weight b share a's prepared activations (same type and width, the
 * same plan) and its part boundaries (8-row units where a repack needs
 * them)? */
static int
mm_fusable(const struct mm_job *a, const struct compute_weight *b)
{
	const struct cpu_kernels *k = a->im->k;

	return b->w.type == a->w->type && b->w.cols == a->w->cols && (weight_x8(k, b) != NULL) == (a->x8 != NULL) &&
	       (weight_bsum(k, b) != NULL) == (a->bsum != NULL) && !a->p.onednn && (!a->p.amx || amx_fits(&b->w));
}

void
cpu_matmul_n(struct compute *c, const struct compute_weight *const *cw, int nw, const float *x, int n, float *const *y)
{
	struct cpu_impl *im = impl_of(c);
	struct mm_job jobs[MM_MAX_FUSED];
	int nj = 1, alone[16] = { 0 };

	if (nw < 1)
		return;
	assert(nw <= 16);
	if (mm_prepare(im, cw[0], x, n, y[0], &jobs[0]) != 0) {
		for (int i = 1; i < nw; i++)
			cpu_matmul(c, cw[i], x, n, y[i]);
		return;
	}
	/* the others reuse what mm_prepare() made of x for the first */
	for (int i = 1; i < nw; i++) {
		if (nj < MM_MAX_FUSED && mm_fusable(&jobs[0], cw[i])) {
			jobs[nj] = jobs[0];
			jobs[nj].w = &cw[i]->w;
			jobs[nj].bsum = jobs[0].bsum != NULL ? cw[i]->aux : NULL;
			jobs[nj].x8 = jobs[0].x8 != NULL ? cw[i]->aux : NULL;
			jobs[nj++].y = y[i];
		} else {
			alone[i] = 1;
		}
	}
	struct mm_multi m = { jobs, nj, mm_unit(&jobs[0]) };
	if (mm_inline(jobs, nj))
		mm_multi_worker(&m, 0, 1);
	else
		threadpool_run(im->pool, mm_multi_worker, &m);
	for (int i = 1; i < nw; i++) /* the rest, one at a time */
		if (alone[i])
			cpu_matmul(c, cw[i], x, n, y[i]);
}

/* The 8-row groups the generic helpers read (cpu_kquants_x8.c): their
 * bytes per super-block and how a row's is unpacked; 0 for other types */
static int
unpacked_groups(uint32_t type, size_t *block, group_unpack_fn *unpack)
{
	*block = type == TT_Q2_K     ? Q2X8_BLOCK
		 : type == TT_Q3_K   ? Q3X8_BLOCK
		 : type == TT_IQ4_NL ? 8 * Q4_0X8_BLOCK /* 8 blocks: 256 values */
				     : IQ4X8_BLOCK;
	*unpack = type == TT_Q2_K     ? q2x8_unpack
		  : type == TT_Q3_K   ? q3x8_unpack
		  : type == TT_IQ4_NL ? iq4_nlx8_unpack8
				      : iq4x8_unpack;
	return type == TT_Q2_K || type == TT_Q3_K || type == TT_IQ4_XS || type == TT_IQ4_NL;
}

void
cpu_get_rows(struct compute *c, const struct compute_weight *cw, float *out)
{
	const struct compute_batch *b = &impl_of(c)->batch;
	const struct weight *w = &cw->w;
	const uint8_t *x8 = weight_x8(impl_of(c)->k, cw);
	size_t block;
	group_unpack_fn unpack;

	for (int t = 0; t < b->n; t++) {
		int64_t r = b->tokens[t];
		if (w->type == TT_Q8_0 && x8 != NULL) /* the repacked copy (prepare_repacked) */
			q8_0x8_dequantize_row(x8 + (size_t)(r / 8) * (size_t)(w->cols / 32) * Q8_0X8_BLOCK,
					      (size_t)w->cols / 32, (int)(r % 8), out + (int64_t)t * w->cols);
		else if (w->type == TT_Q4_0 && x8 != NULL)
			q4_0x8_dequantize_row((const uint8_t *)cw->aux +
						      (size_t)(r / 8) * (size_t)(w->cols / 32) * Q4_0X8_BLOCK,
					      (size_t)w->cols / 32, (int)(r % 8), out + (int64_t)t * w->cols);
		else if (w->type == TT_Q6_K && x8 != NULL)
			q6x8_dequantize_row(x8 + (size_t)(r / 8) * (size_t)(w->cols / 256) * Q6X8_BLOCK,
					    (size_t)w->cols / 256, (int)(r % 8), out + (int64_t)t * w->cols);
		else if (x8 != NULL && legacy(w->type) && w->type != TT_IQ4_NL)
			legacy_x8_dequantize_row(w->type,
						 x8 + (size_t)(r / 8) * (size_t)(w->cols / 32) *
								 LEGACY_X8_BLOCK(w->type),
						 (size_t)w->cols / 32, (int)(r % 8), out + (int64_t)t * w->cols);
		else if (x8 != NULL && unpacked_groups(w->type, &block, &unpack))
			groups_dequantize_row(x8 + (size_t)(r / 8) * (size_t)(w->cols / 256) * block,
					      (size_t)w->cols / 256, block, unpack, w->type, (int)(r % 8),
					      out + (int64_t)t * w->cols);
		else if ((w->type == TT_Q4_K || w->type == TT_Q5_K) && cw->aux != NULL)
			kx8_dequantize_row((const uint8_t *)cw->aux + (size_t)(r / 8) * (size_t)(w->cols / 256) *
									      KX8_BLOCK(w->type == TT_Q5_K),
					   (size_t)w->cols / 256, (int)(r % 8), w->type == TT_Q5_K,
					   out + (int64_t)t * w->cols);
		else
			tensor_dequantize_row(w->type, (const uint8_t *)w->data + r * w->row_bytes,
					      out + (int64_t)t * w->cols, (size_t)w->cols);
	}
}

/* ------------------------------------------------------ prepared weights */

struct repack_job {
	const struct cpu_kernels *k;
	const struct weight *src;
	uint8_t *dst;
};

static void
repack_worker(void *arg, int ith, int nth)
{
	const struct repack_job *j = arg;
	int64_t lo, hi;

	split(j->src->rows / 8, ith, nth, &lo, &hi);
	if (j->src->type == TT_Q8_0)
		q8_0x8_repack(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 32, j->dst);
	else if (j->src->type == TT_Q4_0 || j->src->type == TT_IQ4_NL) /* the same bytes a block */
		q4_0x8_repack(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 32, j->dst);
	else if (j->src->type == TT_Q6_K)
		q6x8_repack(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 256, j->dst);
	else if (j->src->type == TT_Q2_K)
		j->k->repack_q2x8(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 256, j->dst);
	else if (j->src->type == TT_Q3_K)
		j->k->repack_q3x8(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 256, j->dst);
	else if (legacy(j->src->type))
		legacy_x8_repack(j->src->type, j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 32,
				 j->dst);
	else if (j->src->type == TT_IQ4_XS)
		j->k->repack_iq4x8(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 256, j->dst);
	else
		j->k->repack_kx8(j->src->data, j->src->row_bytes, lo, hi, (size_t)j->src->cols / 256,
				 j->src->type == TT_Q5_K, j->dst);
}

/* The file's pages under a weight that now lives in a copy: whole pages
 * only (neighbours keep theirs).  PAGEOUT, not DONTNEED, because it never
 * loses data: a file's clean pages are dropped, a buffer's
 * (gguf_open_buffer) would go to swap or stay. */
static void
hand_back(const void *data, size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t from = ((uintptr_t)data + page - 1) & ~(uintptr_t)(page - 1);
	uintptr_t to = ((uintptr_t)data + bytes) & ~(uintptr_t)(page - 1);

	if (to > from)
		(void)madvise((void *)from, to - from, MADV_PAGEOUT);
}

/* A weight's copy: aligned to 2 MB and asking for transparent huge pages
 * (a hint: THP may be off), for fewer faults and TLB misses; NULL when
 * out of memory.  Freed with free(). */
static void *
huge_alloc(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, (size_t)2 << 20, bytes) != 0)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

/* Q8_0, Q4_0, IQ4_NL, IQ4_XS and the K-quants in groups of 8 rows (cpu_q8_0x8.c,
 * cpu_q4_0x8.c, cpu_iq4_xsx8.c, cpu_kquants_x8.c, cpu_q6_kx8.c, cpu_q3_kx8.c, cpu_q2_kx8.c) where
 * the CPU has the kernels and the rows divide, repacked by the pool (a 70B
 * model is ~38 GB).  Every use reads the copy afterwards, get_rows too, so
 * the file's pages are handed back: the resident size stays about the
 * model's, not twice.  The copy asks for transparent huge pages: fewer
 * faults and TLB misses. */
static int
prepare_repacked(const struct cpu_impl *im, const struct weight *src, struct compute_weight *dst)
{
	const struct tensor_type_info *ti = tensor_type_get(src->type);
	size_t bytes = (size_t)src->rows * ((size_t)src->cols / ti->block_elems) * ti->block_bytes;
	void *packed;
	int kernels = src->type == TT_Q8_0     ? im->k->gemm_q8_0x8 != NULL
		      : src->type == TT_Q4_0   ? im->k->gemm_q4_0x8 != NULL
		      : src->type == TT_Q4_K   ? im->k->gemm_q4_kx8 != NULL
		      : src->type == TT_Q5_K   ? im->k->gemm_q5_kx8 != NULL
		      : src->type == TT_Q3_K   ? im->k->gemm_q3_kx8 != NULL && im->k->repack_q3x8 != NULL
		      : src->type == TT_Q2_K   ? im->k->gemm_q2_kx8 != NULL && im->k->repack_q2x8 != NULL
		      : src->type == TT_IQ4_NL ? im->k->gemm_iq4_nlx8 != NULL
		      : src->type == TT_IQ4_XS ? im->k->gemm_iq4_xsx8 != NULL && im->k->repack_iq4x8 != NULL
		      : legacy(src->type)      ? legacy_x8_gemm(im->k, src->type) != NULL
					       : im->k->gemm_q6_kx8 != NULL;

	/* IQ4_NL's groups are read back and widened 256 values at a time */
	if (!kernels || src->rows % 8 != 0 || src->cols % ti->block_elems != 0 ||
	    (src->type == TT_IQ4_NL && src->cols % 256 != 0))
		return PRIVAI_OK;
	if ((packed = huge_alloc(bytes)) == NULL)
		return PRIVAI_ENOMEM;
	struct repack_job j = { im->k, src, packed };
	threadpool_run(im->pool, repack_worker, &j);
	hand_back(src->data, bytes);
	dst->aux = packed;
	return PRIVAI_OK;
}

struct copy_job {
	const struct weight *src;
	uint8_t *dst;
};

static void
copy_worker(void *arg, int ith, int nth)
{
	const struct copy_job *j = arg;
	int64_t lo, hi;

	split(j->src->rows, ith, nth, &lo, &hi);
	memcpy(j->dst + (size_t)lo * j->src->row_bytes, (const uint8_t *)j->src->data + (size_t)lo * j->src->row_bytes,
	       (size_t)(hi - lo) * j->src->row_bytes);
}

/* F16 and BF16 matrices copied into 2 MB pages, as the repacked types'
 * groups are: decode streams them whole every token, and the file's
 * mapping is in 4 KB pages.  One thread read 40.8 GB/s from 2 MB pages
 * where it read 30-34 from the mapping (Zen 4, docs/performance.md).
 * The copy is the weight from then on (w.data; aux to free it). */
static int
prepare_copied(const struct cpu_impl *im, const struct weight *src, struct compute_weight *dst)
{
	size_t bytes = (size_t)src->rows * src->row_bytes;
	void *copy;

	if ((copy = huge_alloc(bytes)) == NULL)
		return PRIVAI_ENOMEM;
	struct copy_job j = { src, copy };
	threadpool_run(im->pool, copy_worker, &j);
	hand_back(src->data, bytes);
	dst->w.data = copy;
	dst->aux = copy;
	return PRIVAI_OK;
}

int
cpu_prepare_weight(struct compute *c, const struct weight *src, struct compute_weight *dst)
{
	int64_t nb = src->cols / 32;
	int16_t *bsum;

	dst->w = *src;
	dst->aux = NULL;
	/* oneDNN (for BF16) is loaded at model load, not in the first
	 * forward: loading sets OMP_WAIT_POLICY, and setenv() must not race
	 * the getenv() of a server's threads */
	if (src->type == TT_BF16)
		(void)cpu_onednn_bf16();
	if (repacks(impl_of(c)->k, src))
		return prepare_repacked(impl_of(c), src, dst);
	if ((src->type == TT_F16 || src->type == TT_BF16) && src->rows > 1)
		return prepare_copied(impl_of(c), src, dst);
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

void
cpu_release_weight(struct compute *c, struct compute_weight *w)
{
	(void)c;
	free(w->aux);
	w->aux = NULL;
}

const char *
cpu_matmul_path(const struct cpu_kernels *k, uint32_t type, int n_tokens)
{
	static char onednn_path[96];
	static char bf16_path[160], half_path[160]; /* the paths with a figure in them */
	struct mm_plan p;

	if (tensor_type_get(type) == NULL || !tensor_type_get(type)->can_dequant)
		return NULL;
	/* Q8_0 has its block sums where it keeps the file's rows, else its
	 * 8-row groups (prepare_weight) */
	int q8x8 = type == TT_Q8_0 && k->gemm_q8_0x8 != NULL, q4x8 = (type == TT_Q4_0 && k->gemm_q4_0x8 != NULL) ||
								     (type == TT_IQ4_NL && k->gemm_iq4_nlx8 != NULL) ||
								     legacy_x8_gemm(k, type) != NULL;
	int kx8 = (type == TT_Q4_K && k->gemm_q4_kx8 != NULL) || (type == TT_Q5_K && k->gemm_q5_kx8 != NULL) ||
		  (type == TT_Q6_K && k->gemm_q6_kx8 != NULL) || (type == TT_IQ4_XS && k->gemm_iq4_xsx8 != NULL) ||
		  (type == TT_Q3_K && k->gemm_q3_kx8 != NULL) || (type == TT_Q2_K && k->gemm_q2_kx8 != NULL);
	mm_plan(k, type, type == TT_Q8_0 && !q8x8, q8x8 || q4x8 || kx8, n_tokens, &p);
	if (p.amx && !(p.onednn && cpu_onednn_forced()))
		return type == TT_F16
			       ? "AMX bfloat16 tiles, weights split in two bfloat16, tokens in three (five products)"
			       : "AMX bfloat16 tiles, activations rounded to bfloat16";
	if (p.onednn) {
		snprintf(onednn_path, sizeof(onednn_path), "oneDNN bfloat16 matmul (%s)", cpu_onednn_bf16());
		return onednn_path;
	}
	if (p.bf16) {
		snprintf(bf16_path, sizeof(bf16_path),
			 "bfloat16 GEMM (vdpbf16ps, %.2fx float FMA's products here), 16-token tiles", k->bf16_speedup);
		return bf16_path;
	}
	/* Q8_0 and Q4_0 with the repack kernels (and rows in eights, as every model's are) */
	if (p.pairs && p.q8k)
		return "int8, 8 rows interleaved at load, activations in 256-value blocks, two tokens a 512-bit vector";
	if (p.pairs)
		return "int8, 8 rows interleaved at load, two tokens a 512-bit vector";
	/* and Q4_0's where no dense prefetch is on (gemm_q4_0x8_wide_avx512) */
	if (type == TT_Q4_0 && n_tokens == 1 && k->gemm_q4_0x8_pairs != NULL && cpu_stream_prefetch == 0)
		return "int8, 8 rows interleaved at load, two chunks a 512-bit vector";
	if ((q8x8 || q4x8) && !p.gemm)
		return "int8, 8 rows interleaved at load";
	/* one token of Q4_K and Q5_K two chunks a vector where the pairs go (set_pair_kernels) */
	if (kx8 && p.q8k && n_tokens == 1 && (type == TT_Q4_K || type == TT_Q5_K) && k->gemm_q4_kx8_pairs != NULL)
		return "int8, 8 rows interleaved at load, activations in 256-value blocks, two chunks a 512-bit "
		       "vector";
	/* and of Q6_K two sub-blocks a vector (gemv_q6_kx8_wide_avx512) */
	if (kx8 && p.q8k && n_tokens == 1 && type == TT_Q6_K && k->gemm_q6_kx8_pairs != NULL)
		return "int8, 8 rows interleaved at load, activations in 256-value blocks, two sub-blocks a 512-bit "
		       "vector";
	if (kx8 && p.q8k)
		return "int8, 8 rows interleaved at load, activations in 256-value blocks";
	if (type == TT_Q6_K && p.q8k && n_tokens > 1 && k->dots_q6_k_q8k != NULL)
		return "int8, a row unpacked once for 8 tokens, activations in 256-value blocks";
	if (p.amx8)
		return "int8 GEMM on AMX tiles, 16 tokens x 16 rows a block";
	if (p.gemm)
		return "int8 GEMM, 16-token tiles";
	if (p.gemm8)
		return "int8 GEMM, 8-token tiles";
	if (p.q8k)
		return "int8 dot per token, activations in 256-value blocks";
	if (p.quantized)
		return "int8 dot per token";
	/* HALF_ROWS_ONE_AT_A_TIME (cpu_x86.h) */
	int one_row = strcmp(k->name, "avx512-vnni") == 0 && cpu_stream_prefetch == 0;
	if (type == TT_BF16 && half_dot(type, n_tokens) && k->dot_bf16_bf16 != NULL) {
		if (!one_row)
			return "bfloat16 dot (vdpbf16ps), activations rounded to bfloat16";
		snprintf(half_path, sizeof(half_path),
			 "bfloat16 dot (vdpbf16ps), activations rounded to bfloat16, rows one at a time up to %d "
			 "values (the token in L1), four a pass past that",
			 HALF_ROW_TOKEN_MAX / 2);
		return half_path;
	}
	if (half_dot(type, n_tokens) && type == TT_F16 && one_row) {
		snprintf(half_path, sizeof(half_path),
			 "fused half-to-float dot, rows one at a time up to %d values (the token in L1), four a "
			 "pass past that",
			 HALF_ROW_TOKEN_MAX / 4);
		return half_path;
	}
	if (half_dot(type, n_tokens))
		return "fused half-to-float dot";
	if (packed_f32(k, type, n_tokens) && type == TT_BF16 && k->dot_bf16_bf16 != NULL) { /* mm_round_bf16 */
		snprintf(bf16_path, sizeof(bf16_path),
			 "float GEMM on packed 48-row panels, 8-token tiles, activations rounded to bfloat16 "
			 "(vdpbf16ps: %.2fx float FMA's products here)",
			 k->bf16_speedup);
		return bf16_path;
	}
	if (packed_f32(k, type, n_tokens))
		return "float GEMM on packed 48-row panels, 8-token tiles";
	/* a pass narrower than the tile takes the tile's edge: the dot */
	int tile = k->gemm_f32 != NULL && n_tokens >= GEMM_F32_TOKENS;
	if (type == TT_F32)
		return tile ? "float register tile" : "float dot per token";
	if (type == TT_F16 || type == TT_BF16)
		return tile ? "rows converted to float, register tile" : "rows converted to float, dot per token";
	return tile ? "rows dequantized, float register tile" : "rows dequantized, float dot per token";
}
