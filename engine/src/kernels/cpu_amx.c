/*
 * Prompt GEMMs on AMX tiles (Sapphire Rapids and later Xeons): BF16
 * weights, F16 ones where PRIVAI_AMX_F16=1 (cpu_dot.c says why not by
 * default), and the int8 GEMM of the quantized types (below).  One
 * tdpbf16ps multiplies a 16 x 32 bfloat16 tile by a 32 x 16 one into
 * 16 x 16 float sums, 8192 products an instruction, where an AVX-512 FMA
 * does 16.
 *
 * The A operand is the weights, 16 rows of 32 columns, copied 32 rows at
 * a time into rows AMX_LDA apart; the B operand is 16 tokens in
 * pack_bf16_tile's layout, which is the pair-interleaved layout AMX wants
 * (tile row kp holds elements 2kp and 2kp+1 of each token).  Sums land as
 * C[row][token] in a per-thread buffer, transposed into y at the end.
 *
 * BF16 weights take their tokens rounded to bfloat16, as the bfloat16
 * decode dot and llama.cpp do.  F16 weights carry 11 significant bits,
 * bfloat16 only 8, so each F16 weight is split exactly into hi + lo (two
 * bfloat16s whose sum is the fp16 value) and each activation x into
 * hi = bf16(x), lo = bf16(x - hi), and the product is taken as
 * wh*xh + wh*xl + wl*xh: three tile products, about 2^-16 relative from
 * the float product (the dropped wl*xl is 2^-18 of it), against 2^-9 for
 * one product of rounded values, which the F16 golden tolerance (2e-3 on
 * the logits) does not allow.
 *
 * Blocking: tokens a chunk of AMX_TOKENS at a time; within it the rows in
 * super-blocks of AMX_SB_ROWS whose sums stay in the thread's buffer
 * while the columns pass AMX_KC at a time, so that the chunk's tokens for
 * those columns (AMX_TOKENS x AMX_KC x 4 bytes) stay in L2 across the
 * super-block's rows; each 32-row block of those columns (converted to
 * hi/lo first for F16) serves every token of the chunk.
 *
 * The tiles need the kernel's permission (arch_prctl XCOMP_PERM, Linux
 * 5.16 and later), asked once by cpu_amx_usable().
 */
#include <stdint.h>
#include <string.h>

#include "privai/tensor_type.h"
#include "cpu_dot.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu_x86.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int
cpu_amx_usable(void)
{
	static int usable = -1;
	unsigned a, b, c, d;

	if (usable >= 0)
		return usable;
	usable = 0;
	/* CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8
	 * (every AMX CPU so far has all three); XCR0 bits 17-18 (XTILECFG,
	 * XTILEDATA) enabled by the OS */
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
	if (((d >> 22) & 1) == 0 || ((d >> 24) & 1) == 0 || ((d >> 25) & 1) == 0)
		return usable;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	if (((c >> 27) & 1) == 0) /* OSXSAVE */
		return usable;
	__asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
	if ((a & (3u << 17)) != (3u << 17))
		return usable;
	/* the permission is the process's, for every thread, asked once */
	usable = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
	return usable;
}

#define AMX __attribute__((target("amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512bf16,f16c")))

/* The 64 bytes ldtilecfg reads: palette 1, then each tile's rows and
 * bytes a row (tiles 0-7; the rest unused). */
struct tile_config {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

AMX static void
tiles_configure(const uint8_t rows[8], const uint16_t colsb[8])
{
	struct tile_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.palette = 1;
	for (int i = 0; i < 8; i++) {
		cfg.rows[i] = rows[i];
		cfg.colsb[i] = colsb[i];
	}
	/* not gcc 12's _tile_loadconfig: its asm names only the first 8
	 * bytes of the configuration as read, and the stores to the rest
	 * were dropped as dead (tilezero then faulted) */
	__asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/* 32 floats, a (elements 0-15) and b (16-31), rounded to bfloat16 in
 * order (h; as 32-bit lanes the pairs (2i, 2i + 1)), and what rounding
 * left of each rounded again (l, the same order). */
AMX static inline __attribute__((always_inline)) void
bf16_split(__m512 a, __m512 b, __m512bh *h, __m512bh *l)
{
	*h = _mm512_cvtne2ps_pbh(b, a);
	/* back to float: 16 bfloat16 a half, widened and shifted */
	__m512 ha =
		_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256((__m512i)*h)), 16));
	__m512 hb = _mm512_castsi512_ps(
		_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64((__m512i)*h, 1)), 16));
	*l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
}

/* The remainders of pack_bf16_tile's rounding, in its layout: pair kp of
 * token j at lo[kp * 16 + j], zeros past nt; cols a multiple of 32. */
AMX void
amx_pack_lo(const float *x, size_t ldx, int nt, size_t cols, uint32_t *lo)
{
	uint32_t pl[16];

	for (int j = 0; j < GEMM_BF16_TOKENS; j++) {
		const float *xr = x + (size_t)j * ldx;
		for (size_t k = 0; k < cols; k += 32) {
			__m512bh h, l = (__m512bh)_mm512_setzero_si512();
			if (j < nt)
				bf16_split(_mm512_loadu_ps(xr + k), _mm512_loadu_ps(xr + k + 16), &h, &l);
			_mm512_storeu_si512(pl, (__m512i)l);
			for (int i = 0; i < 16; i++)
				lo[(k / 2 + (size_t)i) * GEMM_BF16_TOKENS + (size_t)j] = pl[i];
		}
	}
}

/* 32 BF16 rows (ldw apart), columns [0, kc), into rows AMX_LDA apart */
static void
copy_bf16_rows(const uint16_t *w, size_t ldw, size_t kc, uint16_t *out)
{
	for (int r = 0; r < AMX_ROW_BLOCK; r++)
		memcpy(out + (size_t)r * AMX_LDA, w + (size_t)r * ldw, kc * sizeof(uint16_t));
}

/* 32 F16 rows (ldw apart), columns [0, kc), split into bfloat16 hi and lo
 * rows AMX_LDA apart: w = hi + lo exactly. */
AMX static void
split_f16_rows(const uint16_t *w, size_t ldw, size_t kc, uint16_t *hi, uint16_t *lo)
{
	for (int r = 0; r < AMX_ROW_BLOCK; r++) {
		const uint16_t *wr = w + (size_t)r * ldw;
		for (size_t k = 0; k < kc; k += 32) {
			__m512bh h, l;
			bf16_split(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wr + k))),
				   _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wr + k + 16))), &h, &l);
			_mm512_storeu_si512(hi + (size_t)r * AMX_LDA + k, (__m512i)h);
			_mm512_storeu_si512(lo + (size_t)r * AMX_LDA + k, (__m512i)l);
		}
	}
}

/* The next row block's weights, asked into L2 a few lines a step while
 * the tiles work on this one: a block is 32 rows of up to 2 KB, first
 * read from memory by its copy or split, and the tiles would otherwise
 * wait on that read (about a third of their time at 128 tokens). */
struct prefetch {
	const char *base; /* the block's first row, NULL for none */
	size_t stride;    /* bytes between its rows */
	int lines_row;    /* 64-byte lines a row */
	int line, total;  /* the next line to ask for, of total */
	int per_step;     /* lines a 32-column step asks for */
};

static inline void
prefetch_step(struct prefetch *pf)
{
	for (int i = 0; i < pf->per_step && pf->line < pf->total; i++, pf->line++)
		_mm_prefetch(pf->base + (size_t)(pf->line / pf->lines_row) * pf->stride +
				     (size_t)(pf->line % pf->lines_row) * 64,
			     _MM_HINT_T1);
}

/* Rows 0-15 and 16-31 of a weight block (a0, a1, sa bytes a row; NULL:
 * tiles 4-5 still hold them) times one or two token tiles (x0, x1) into
 * the sums, tiles 0 and 2 for x0, 1 and 3 for x1. */
AMX static inline __attribute__((always_inline)) void
tile_products(const uint16_t *a0, const uint16_t *a1, size_t sa, const uint32_t *x0, const uint32_t *x1, int two)
{
	if (a0 != NULL) {
		_tile_loadd(4, a0, sa);
		_tile_loadd(5, a1, sa);
	}
	_tile_loadd(6, x0, 64);
	if (two)
		_tile_loadd(7, x1, 64);
	_tile_dpbf16ps(0, 4, 6);
	_tile_dpbf16ps(2, 5, 6);
	if (two) {
		_tile_dpbf16ps(1, 4, 7);
		_tile_dpbf16ps(3, 5, 7);
	}
}

/* One 32-row block times one or two (two: a constant where inlined)
 * 16-token groups over kc columns: the sums in acc (rows lda floats
 * apart), zeroed first when zero; tiles 0 and 2 the first group's, 1 and
 * 3 the second's.  wh/wl: the rows' bfloat16 (wl NULL for BF16 weights),
 * ldw values apart; xh/xl: the groups' tiles at the block's first column,
 * group_stride uint32 apart (xl NULL but for F16). */
AMX static inline __attribute__((always_inline)) void
block(const uint16_t *wh, const uint16_t *wl, size_t ldw, const uint32_t *xh, const uint32_t *xl, size_t group_stride,
      size_t kc, float *acc, size_t lda, int zero, int two, struct prefetch *pf)
{
	size_t sa = ldw * sizeof(uint16_t), sc = lda * sizeof(float);

	if (zero) {
		_tile_zero(0);
		_tile_zero(2);
		if (two) {
			_tile_zero(1);
			_tile_zero(3);
		}
	} else {
		_tile_loadd(0, acc, sc);
		_tile_loadd(2, acc + 16 * lda, sc);
		if (two) {
			_tile_loadd(1, acc + GEMM_BF16_TOKENS, sc);
			_tile_loadd(3, acc + 16 * lda + GEMM_BF16_TOKENS, sc);
		}
	}
	for (size_t k = 0; k < kc; k += 32) {
		const uint32_t *b0 = xh + k / 2 * GEMM_BF16_TOKENS, *b1 = b0 + group_stride;
		prefetch_step(pf);
		tile_products(wh + k, wh + 16 * ldw + k, sa, b0, b1, two);
		if (wl == NULL)
			continue;
		/* F16: wh * xl (the weight tiles still hold wh), then wl * xh */
		const uint32_t *l0 = xl + k / 2 * GEMM_BF16_TOKENS;
		tile_products(NULL, NULL, sa, l0, l0 + group_stride, two);
		tile_products(wl + k, wl + 16 * ldw + k, sa, b0, b1, two);
	}
	_tile_stored(0, acc, sc);
	_tile_stored(2, acc + 16 * lda, sc);
	if (two) {
		_tile_stored(1, acc + GEMM_BF16_TOKENS, sc);
		_tile_stored(3, acc + 16 * lda + GEMM_BF16_TOKENS, sc);
	}
}

/* The super-block's sums, row r of acc token t, to y[t][r]: 16 x 16
 * blocks transposed, a partial last group one value at a time. */
AMX static void
store_sums(const float *acc, size_t lda, int ns, int nt, float *y, size_t ldy)
{
	int t = 0;

	for (; t + 16 <= nt; t += 16)
		for (int r = 0; r < ns; r += 16) {
			__m512 v[16];
			for (int i = 0; i < 16; i++)
				v[i] = _mm512_loadu_ps(acc + (size_t)(r + i) * lda + (size_t)t);
			transpose16(v); /* cpu_x86.h */
			for (int i = 0; i < 16; i++)
				_mm512_storeu_ps(y + (size_t)(t + i) * ldy + (size_t)r, v[i]);
		}
	for (; t < nt; t++)
		for (int r = 0; r < ns; r++)
			y[(size_t)t * ldy + (size_t)r] = acc[(size_t)r * lda + (size_t)t];
}

/* What the block after (s0, k0, rb) reads, in amx_gemm's order (row
 * blocks within a column pass within a super-block), spread over the
 * steps of this block's ng token groups. */
static struct prefetch
next_block(const uint16_t *w, size_t ldw, int nrows, size_t cols, int s0, int ns, size_t k0, int rb, int ng)
{
	struct prefetch pf = { NULL, ldw * sizeof(uint16_t), 0, 0, 0, 0 };
	size_t kc = cols - k0 < AMX_KC ? cols - k0 : AMX_KC;
	int steps = (int)(kc / 32) * ((ng + 1) / 2);

	if (rb + AMX_ROW_BLOCK < ns) {
		rb += AMX_ROW_BLOCK;
	} else if (k0 + kc < cols) {
		k0 += kc, rb = 0;
	} else if (s0 + ns < nrows) {
		s0 += ns, k0 = 0, rb = 0;
	} else {
		return pf;
	}
	kc = cols - k0 < AMX_KC ? cols - k0 : AMX_KC;
	pf.base = (const char *)(w + (size_t)(s0 + rb) * ldw + k0);
	pf.lines_row = (int)(kc * sizeof(uint16_t) / 64);
	pf.total = AMX_ROW_BLOCK * pf.lines_row;
	pf.per_step = (pf.total + steps - 1) / steps;
	return pf;
}

AMX void
amx_gemm(int f16, const uint16_t *w, size_t ldw, int nrows, const uint32_t *xh, const uint32_t *xl, int ntokens,
	 size_t cols, float *y, size_t ldy, void *scratch)
{
	size_t group = cols / 2 * GEMM_BF16_TOKENS; /* uint32 a token group */
	float *acc = scratch;                       /* AMX_SB_ROWS x AMX_TOKENS */
	uint16_t *wh = (uint16_t *)(acc + AMX_SB_ROWS * AMX_TOKENS), *wl = wh + AMX_ROW_BLOCK * AMX_LDA;

	/* tiles 0-3 the sums C[row block i][token group j] at 2i + j, 4-5 two
	 * 16-row weight tiles, 6-7 two 16-token activation tiles, all 16 rows
	 * of 64 bytes */
	static const uint8_t rows[8] = { 16, 16, 16, 16, 16, 16, 16, 16 };
	static const uint16_t colsb[8] = { 64, 64, 64, 64, 64, 64, 64, 64 };

	tiles_configure(rows, colsb);
	for (int t0 = 0; t0 < ntokens; t0 += AMX_TOKENS) {
		int nt = ntokens - t0 < AMX_TOKENS ? ntokens - t0 : AMX_TOKENS;
		int ng = (nt + GEMM_BF16_TOKENS - 1) / GEMM_BF16_TOKENS;
		size_t lda = (size_t)ng * GEMM_BF16_TOKENS;
		const uint32_t *gh = xh + (size_t)(t0 / GEMM_BF16_TOKENS) * group;
		const uint32_t *gl = xl != NULL ? xl + (size_t)(t0 / GEMM_BF16_TOKENS) * group : NULL;
		for (int s0 = 0; s0 < nrows; s0 += AMX_SB_ROWS) {
			int ns = nrows - s0 < AMX_SB_ROWS ? nrows - s0 : AMX_SB_ROWS;
			for (size_t k0 = 0; k0 < cols; k0 += AMX_KC) {
				size_t kc = cols - k0 < AMX_KC ? cols - k0 : AMX_KC;
				for (int rb = 0; rb < ns; rb += AMX_ROW_BLOCK) {
					const uint16_t *src = w + (size_t)(s0 + rb) * ldw + k0, *al = NULL;
					struct prefetch pf = next_block(w, ldw, nrows, cols, s0, ns, k0, rb, ng);
					if (f16) {
						split_f16_rows(src, ldw, kc, wh, wl);
						al = wl;
					} else {
						copy_bf16_rows(src, ldw, kc, wh);
					}
					float *a = acc + (size_t)rb * lda;
					for (int g = 0; g < ng; g += 2) {
						const uint32_t *bh = gh + (size_t)g * group + k0 / 2 * GEMM_BF16_TOKENS;
						const uint32_t *bl =
							gl != NULL ? gl + (size_t)g * group + k0 / 2 * GEMM_BF16_TOKENS
								   : NULL;
						if (g + 2 <= ng)
							block(wh, al, AMX_LDA, bh, bl, group, kc,
							      a + g * GEMM_BF16_TOKENS, lda, k0 == 0, 1, &pf);
						else /* a chunk's odd last group */
							block(wh, al, AMX_LDA, bh, bl, group, kc,
							      a + g * GEMM_BF16_TOKENS, lda, k0 == 0, 0, &pf);
					}
				}
			}
			store_sums(acc, lda, ns, nt, y + (size_t)t0 * ldy + (size_t)s0, ldy);
		}
	}
	_tile_release();
}

/*
 * The int8 GEMM of Q8_0 rows (and of Q4_0, Q4_K and Q5_K rows widened to
 * them, cpu_matmul.c) on tiles: gemm_q8_0's contract (cpu_dot.h), up to
 * 16 rows.  A tile of 16 rows' block of 32 signed weights times one of
 * the 16 tokens' block (struct q8_tile, +128 so unsigned: already the
 * layout tdpbsud wants, 4 bytes of each token a 32-bit lane) gives every
 * row-token integer sum of the block in one instruction.  The float step
 * after it is gemm_q8_0_avx512's, in the same order, so the results are
 * the same bits: the sum plus -128 * sum(w), times the token's scale
 * times the row's, and the Q4_K/Q5_K offset taken off.  Four blocks'
 * sums are taken into tiles 0-3 before the float steps read them.
 */
/* Tiles 0-3: sums, nrows x 16 int32; 4-5: weights, nrows x 32 bytes;
 * 6-7: tokens, 8 x (16 tokens x 4 bytes). */
AMX static void
q8_tiles_configure(int nrows)
{
	uint8_t n = (uint8_t)nrows, rows[8] = { n, n, n, n, n, n, 8, 8 };
	static const uint16_t colsb[8] = { 64, 64, 64, 64, 32, 32, 64, 64 };

	tiles_configure(rows, colsb);
}

/* Block b's float step for nr rows into acc; sums: the block's tile, 16
 * int32 a row.  Inlined with nr 16 the accumulators stay in registers. */
AMX static inline __attribute__((always_inline)) void
q8_float_step(__m512 *acc, int nr, const int32_t *sums, const int32_t *wsum, const float *wd, const float *wmin,
	      const struct q8_tile *xb, size_t nb, size_t b)
{
	__m512 da = _mm512_loadu_ps(xb->d);

#pragma GCC unroll 16
	for (int r = 0; r < nr; r++) {
		size_t at = (size_t)r * nb + b;
		__m512i p = _mm512_add_epi32(_mm512_loadu_si512(sums + 16 * r), _mm512_set1_epi32(wsum[at]));
		acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(da, _mm512_set1_ps(wd[at])), acc[r]);
		if (wmin != NULL)
			acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(wmin[at]), _mm512_loadu_ps(xb->dsum), acc[r]);
	}
}

/* Blocks b and b + 1's sums into tiles C0 and C1, with the operand
 * tiles 4-7 (two pairs, so loads overlap the products). */
#define Q8_TDP2(C0, C1, b)                                                                                             \
	do {                                                                                                           \
		_tile_zero(C0);                                                                                        \
		_tile_zero(C1);                                                                                        \
		_tile_loadd(4, w + (b)*34 + 2, row_bytes);                                                             \
		_tile_loadd(6, x[b].q, 64);                                                                            \
		_tile_loadd(5, w + ((b) + 1) * 34 + 2, row_bytes);                                                     \
		_tile_loadd(7, x[(b) + 1].q, 64);                                                                      \
		_tile_dpbsud(C0, 4, 6);                                                                                \
		_tile_dpbsud(C1, 5, 7);                                                                                \
	} while (0)

/* One token group's nr rows over nb blocks: y[r * 2 * GEMM_TOKENS + t].
 * Software-pipelined two blocks deep where nb is a multiple of 4: the
 * products of blocks b + 2 and b + 3 are issued before the float steps
 * of b and b + 1 read theirs, so the tiles and the vector units work at
 * once (tiles 0-1 and 2-3 take turns). */
AMX static inline __attribute__((always_inline)) void
q8_group(const uint8_t *w, size_t row_bytes, int nr, const int32_t *wsum, const float *wd, const float *wmin,
	 const struct q8_tile *x, size_t nb, float *y, int full)
{
	int32_t buf[2][16 * 16] __attribute__((aligned(64)));
	__m512 acc[16];
	size_t b0 = 0;

	for (int r = 0; r < 16; r++)
		acc[r] = _mm512_setzero_ps();
	if (nb % 4 == 0) {
		Q8_TDP2(0, 1, 0);
		for (; b0 < nb; b0 += 4) {
			Q8_TDP2(2, 3, b0 + 2);
			_tile_stored(0, buf[0], 64);
			_tile_stored(1, buf[1], 64);
			q8_float_step(acc, full ? 16 : nr, buf[0], wsum, wd, wmin, &x[b0], nb, b0);
			q8_float_step(acc, full ? 16 : nr, buf[1], wsum, wd, wmin, &x[b0 + 1], nb, b0 + 1);
			if (b0 + 4 < nb)
				Q8_TDP2(0, 1, b0 + 4);
			_tile_stored(2, buf[0], 64);
			_tile_stored(3, buf[1], 64);
			q8_float_step(acc, full ? 16 : nr, buf[0], wsum, wd, wmin, &x[b0 + 2], nb, b0 + 2);
			q8_float_step(acc, full ? 16 : nr, buf[1], wsum, wd, wmin, &x[b0 + 3], nb, b0 + 3);
		}
	}
	for (; b0 < nb; b0++) {
		_tile_zero(0);
		_tile_loadd(4, w + b0 * 34 + 2, row_bytes);
		_tile_loadd(6, x[b0].q, 64);
		_tile_dpbsud(0, 4, 6);
		_tile_stored(0, buf[0], 64);
		q8_float_step(acc, full ? 16 : nr, buf[0], wsum, wd, wmin, &x[b0], nb, b0);
	}
	for (int r = 0; r < nr; r++)
		_mm512_storeu_ps(y + (size_t)r * 2 * GEMM_TOKENS, acc[r]);
}

AMX void
gemm_q8_0_amx(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd, const float *wmin,
	      const struct q8_tile *x, size_t group_stride, int ngroups, size_t nb, float *y)
{
	q8_tiles_configure(nrows);
	for (int g = 0; g < ngroups; g++) {
		if (nrows == 16)
			q8_group(w, row_bytes, 16, wsum, wd, wmin, x + (size_t)g * group_stride, nb,
				 y + g * GEMM_TOKENS, 1);
		else
			q8_group(w, row_bytes, nrows, wsum, wd, wmin, x + (size_t)g * group_stride, nb,
				 y + g * GEMM_TOKENS, 0);
	}
	_tile_release();
}
#else
int
cpu_amx_usable(void)
{
	return 0;
}
#endif
