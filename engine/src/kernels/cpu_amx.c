/*
 * Prompt GEMMs on AMX tiles (Sapphire Rapids and later Xeons): BF16 and
 * F16 weights, and the int8 GEMM of the quantized types (below).  One
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
 * three: hi = bf16(x), lo = bf16(x - hi), lo2 = bf16(x - hi - lo), 24
 * bits, a float's.  The product is taken as
 * wh*xl2 + wh*xl + wh*xh + wl*xh + wl*xl (the small ones first): five
 * tile products, which leave out only wl*xl2 and what the three pieces
 * leave of x, each under 2^-24 of the product: float rounding, as the
 * float GEMM's.  Three products (without wh*xl2 and wl*xl) were 2^-16
 * off and moved a LoRA adapter applied on the fly 2.4e-3 in
 * log-probability from its model merged in float32, beyond the 2e-3 the
 * tests hold it to; one product of rounded values would be 2^-9 off.
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

/* Tokens for gemm_q8_amx, 16 a group: out[g * nb + b] holds block b of
 * tokens 16g..16g+15 (zeros past nt). */
void
amx_q8_xpack(const struct block_q8 *x, int nt, size_t nb, struct amx_q8_xblock *out)
{
	for (int g = 0; 16 * g < nt; g++)
		for (size_t b = 0; b < nb; b++) {
			struct amx_q8_xblock *o = out + (size_t)g * nb + b;
			for (int t = 0; t < 16; t++) {
				const struct block_q8 *src = 16 * g + t < nt ? x + (size_t)(16 * g + t) * nb + b : NULL;
				if (src != NULL)
					memcpy(o->q[t], src->q, 32);
				else
					memset(o->q[t], 0, 32);
				o->d[t] = src != NULL ? src->d : 0.0f;
				/* as q8_tile_pack computes it: the same bits as gemm_q8_0's offset */
				o->dsum[t] = src != NULL ? src->d * (float)src->sum : 0.0f;
			}
		}
}

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

/* 32 bfloat16 (h, as _mm512_cvtne2ps_pbh packs them) back to float:
 * elements 0-15 and 16-31, widened and shifted */
AMX static inline __attribute__((always_inline)) __m512
bf16_low_half(__m512bh h)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256((__m512i)h)), 16));
}

AMX static inline __attribute__((always_inline)) __m512
bf16_high_half(__m512bh h)
{
	return _mm512_castsi512_ps(
		_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64((__m512i)h, 1)), 16));
}

/* 32 floats, a (elements 0-15) and b (16-31), rounded to bfloat16 in
 * order (h; as 32-bit lanes the pairs (2i, 2i + 1)), and what rounding
 * left of each rounded again (l, the same order). */
AMX static inline __attribute__((always_inline)) void
bf16_split(__m512 a, __m512 b, __m512bh *h, __m512bh *l)
{
	*h = _mm512_cvtne2ps_pbh(b, a);
	*l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, bf16_high_half(*h)), _mm512_sub_ps(a, bf16_low_half(*h)));
}

/* What pack_bf16_tile's rounding left of each value, rounded (lo), and
 * what that left, rounded again (lo2), both in its layout: pair kp of
 * token j at lo[kp * 16 + j], zeros past nt; cols a multiple of 32. */
AMX void
amx_pack_lo(const float *x, size_t ldx, int nt, size_t cols, uint32_t *lo, uint32_t *lo2)
{
	uint32_t pl[16], pl2[16];

	for (int j = 0; j < GEMM_BF16_TOKENS; j++) {
		const float *xr = x + (size_t)j * ldx;
		for (size_t k = 0; k < cols; k += 32) {
			__m512bh h, l = (__m512bh)_mm512_setzero_si512(), l2 = l;
			if (j < nt) {
				/* each remainder is exact in float: it takes off a
				 * rounding of what was left */
				__m512 a = _mm512_loadu_ps(xr + k), b = _mm512_loadu_ps(xr + k + 16);
				h = _mm512_cvtne2ps_pbh(b, a);
				a = _mm512_sub_ps(a, bf16_low_half(h));
				b = _mm512_sub_ps(b, bf16_high_half(h));
				l = _mm512_cvtne2ps_pbh(b, a);
				l2 = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, bf16_high_half(l)),
							 _mm512_sub_ps(a, bf16_low_half(l)));
			}
			_mm512_storeu_si512(pl, (__m512i)l);
			_mm512_storeu_si512(pl2, (__m512i)l2);
			for (int i = 0; i < 16; i++) {
				lo[(k / 2 + (size_t)i) * GEMM_BF16_TOKENS + (size_t)j] = pl[i];
				lo2[(k / 2 + (size_t)i) * GEMM_BF16_TOKENS + (size_t)j] = pl2[i];
			}
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
 * tiles 4-5 still hold them) times one or two token tiles (x0, x1; NULL:
 * tiles 6-7 still hold them) into the sums, tiles 0 and 2 for x0, 1 and
 * 3 for x1. */
AMX static inline __attribute__((always_inline)) void
tile_products(const uint16_t *a0, const uint16_t *a1, size_t sa, const uint32_t *x0, const uint32_t *x1, int two)
{
	if (a0 != NULL) {
		_tile_loadd(4, a0, sa);
		_tile_loadd(5, a1, sa);
	}
	if (x0 != NULL) {
		_tile_loadd(6, x0, 64);
		if (two)
			_tile_loadd(7, x1, 64);
	}
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
 * ldw values apart; x: the groups' hi, lo and lo2 tiles at the block's
 * first column, group_stride uint32 apart (lo and lo2 NULL but for F16). */
AMX static inline __attribute__((always_inline)) void
block(const uint16_t *wh, const uint16_t *wl, size_t ldw, const uint32_t *const x[3], size_t group_stride, size_t kc,
      float *acc, size_t lda, int zero, int two, struct prefetch *pf)
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
		const uint32_t *h0 = x[0] + k / 2 * GEMM_BF16_TOKENS;
		prefetch_step(pf);
		if (wl == NULL) {
			tile_products(wh + k, wh + 16 * ldw + k, sa, h0, h0 + group_stride, two);
			continue;
		}
		/* F16, the small products first: wh * xl2, wh * xl, wh * xh
		 * (the weight tiles loaded once), then wl * xh (the token
		 * tiles still loaded) and wl * xl */
		const uint32_t *l0 = x[1] + k / 2 * GEMM_BF16_TOKENS, *m0 = x[2] + k / 2 * GEMM_BF16_TOKENS;
		tile_products(wh + k, wh + 16 * ldw + k, sa, m0, m0 + group_stride, two);
		tile_products(NULL, NULL, sa, l0, l0 + group_stride, two);
		tile_products(NULL, NULL, sa, h0, h0 + group_stride, two);
		tile_products(wl + k, wl + 16 * ldw + k, sa, NULL, NULL, two);
		tile_products(NULL, NULL, sa, l0, l0 + group_stride, two);
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
amx_gemm(int f16, const uint16_t *w, size_t ldw, int nrows, const uint32_t *const x[3], int ntokens, size_t cols,
	 float *y, size_t ldy, void *scratch)
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
		size_t at = (size_t)(t0 / GEMM_BF16_TOKENS) * group;
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
						size_t o = at + (size_t)g * group + k0 / 2 * GEMM_BF16_TOKENS;
						const uint32_t *const b[3] = { x[0] + o, f16 ? x[1] + o : NULL,
									       f16 ? x[2] + o : NULL };
						if (g + 2 <= ng)
							block(wh, al, AMX_LDA, b, group, kc, a + g * GEMM_BF16_TOKENS,
							      lda, k0 == 0, 1, &pf);
						else /* a chunk's odd last group */
							block(wh, al, AMX_LDA, b, group, kc, a + g * GEMM_BF16_TOKENS,
							      lda, k0 == 0, 0, &pf);
					}
				}
			}
			store_sums(acc, lda, ns, nt, y + (size_t)t0 * ldy + (size_t)s0, ldy);
		}
	}
	_tile_release();
}

/*
 * The int8 GEMM of the quantized types on tiles, the tokens as the A
 * operand and the weights as B.  One tdpbssd multiplies 16 tokens' block
 * of 32 signed values (struct amx_q8_xblock: each token's 32 bytes a tile
 * row, as quantize_q8 wrote them) by 16 rows' block (struct
 * amx_q8_wblock: tile row k holds bytes 4k..4k+3 of each row, the layout
 * of two Q8_0 8-row groups side by side, cpu_q8_0x8.c) into C[token][row]:
 * a token's 16 sums are one vector, whose float step is three
 * instructions (convert; the rows' scales times the token's, broadcast
 * from memory; the multiply-add), and whose outputs are one store into
 * the token's line of y.  Both operands signed, so the sums are the exact
 * dot and nothing comes off them.
 *
 * It is gemm_q8_0's float step in the same order (the exact integer sum
 * converted, times token scale times row scale, added block by block;
 * then a K-quant's offset taken off), so the results are the same bits,
 * which test_quant compares.
 *
 * The weights are staged once per 16 rows (amx_q8_stage_x8 and
 * amx_q8_stage_q4x8 straight from Q8_0's and Q4_0's groups,
 * amx_q8_stage_kx8 from Q4_K's and Q5_K's;
 * amx_q8_stage_rows from rows widened to Q8_0 blocks) and
 * then serve every token group.  The products of block b + 1 are issued
 * before the float step of block b, so the tiles and the vector units
 * work at once.
 */
/* Tiles 0-1: sums, 16 tokens x 16 int32; 2-3: tokens, 16 x 32 bytes;
 * 4-5: weights, 8 x (16 rows x 4 bytes). */
AMX static void
q8_tiles_configure(void)
{
	static const uint8_t rows[8] = { 16, 16, 16, 16, 8, 8, 0, 0 };
	static const uint16_t colsb[8] = { 64, 64, 32, 32, 64, 64, 0, 0 };

	tiles_configure(rows, colsb);
}

AMX void
amx_q8_stage_x8(const uint8_t *g0, const uint8_t *g1, size_t nb, struct amx_q8_wblock *s)
{
	const __m256i flip = _mm256_set1_epi8((char)0x80);
	const __m256i zero = _mm256_set1_epi8((char)0x80); /* 0 once flipped */
	const __m128i no_scales = _mm_setzero_si128();

	for (size_t b = 0; b < nb; b++, s++) {
		const uint8_t *b0 = g0 + b * Q8_0X8_BLOCK, *b1 = g1 != NULL ? g1 + b * Q8_0X8_BLOCK : NULL;
		/* the groups store w + 128 (vpdpbusd's unsigned side): back to signed */
		for (int k = 0; k < 8; k++) {
			__m256i lo = _mm256_loadu_si256((const void *)(b0 + 16 + 32 * k));
			__m256i hi = b1 != NULL ? _mm256_loadu_si256((const void *)(b1 + 16 + 32 * k)) : zero;
			__m512i row = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_xor_si256(lo, flip)),
							 _mm256_xor_si256(hi, flip), 1);
			_mm512_storeu_si512(s->b[k], row);
		}
		__m128i h1 = b1 != NULL ? _mm_loadu_si128((const void *)b1) : no_scales;
		__m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const void *)b0)), h1, 1);
		_mm512_storeu_ps(s->d, _mm512_cvtph_ps(h));
		_mm512_storeu_ps(s->min, _mm512_setzero_ps());
	}
}

AMX void
amx_q8_stage_q4x8(const uint8_t *g0, const uint8_t *g1, size_t nb, struct amx_q8_wblock *s)
{
	const __m512i low = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
	const __m256i none = _mm256_set1_epi8((char)0x88); /* nibbles of 8: 0 once centred */

	for (size_t b = 0; b < nb; b++, s++) {
		const uint8_t *b0 = g0 + b * Q4_0X8_BLOCK, *b1 = g1 != NULL ? g1 + b * Q4_0X8_BLOCK : NULL;
		/* chunk c: low nibbles elements 4c..4c+3, high ones 16+4c.. */
		for (int c = 0; c < 4; c++) {
			__m256i lo = _mm256_loadu_si256((const void *)(b0 + 16 + 32 * c));
			__m256i hi = b1 != NULL ? _mm256_loadu_si256((const void *)(b1 + 16 + 32 * c)) : none;
			__m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
			_mm512_storeu_si512(s->b[c], _mm512_sub_epi8(_mm512_and_si512(q, low), eight));
			_mm512_storeu_si512(s->b[c + 4],
					    _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(q, 4), low), eight));
		}
		__m128i h1 = b1 != NULL ? _mm_loadu_si128((const void *)b1) : _mm_setzero_si128();
		__m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const void *)b0)), h1, 1);
		_mm512_storeu_ps(s->d, _mm512_cvtph_ps(h));
		_mm512_storeu_ps(s->min, _mm512_setzero_ps());
	}
}

/* Sub-block j's scale (sel 0) or offset (sel 1) of 16 rows, from the
 * 12 bytes of 6-bit values as a group stores them (w0, w1, w2: bytes
 * 0-3, 4-7, 8-11 of each row, a row a 32-bit lane), as k4_scale_min. */
AMX static inline __m512
kx8_scale(__m512i w0, __m512i w1, __m512i w2, int j, int sel)
{
	const __m512i six = _mm512_set1_epi32(63), four = _mm512_set1_epi32(15), two = _mm512_set1_epi32(3);
	__m512i v;

	if (j < 4) {
		v = _mm512_and_si512(_mm512_srli_epi32(sel ? w1 : w0, (unsigned)(8 * j)), six);
	} else {
		unsigned sh = (unsigned)(8 * (j - 4));
		__m512i lo = _mm512_srli_epi32(w2, sh + (sel ? 4u : 0u));
		__m512i hi = _mm512_and_si512(_mm512_srli_epi32(sel ? w1 : w0, sh + 6), two);
		v = _mm512_or_si512(_mm512_and_si512(lo, four), _mm512_slli_epi32(hi, 4));
	}
	return _mm512_cvtepi32_ps(v);
}

/* 8 rows' 32-bit words at offset at of two groups' blocks (b1 NULL: zeros) */
AMX static inline __m512i
kx8_words(const uint8_t *b0, const uint8_t *b1, size_t at)
{
	__m256i lo = _mm256_loadu_si256((const void *)(b0 + at));
	__m256i hi = b1 != NULL ? _mm256_loadu_si256((const void *)(b1 + at)) : _mm256_setzero_si256();

	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 8 rows' fp16 values at offset at of two groups' blocks, as floats */
AMX static inline __m512
kx8_halves(const uint8_t *b0, const uint8_t *b1, size_t at)
{
	__m128i h1 = b1 != NULL ? _mm_loadu_si128((const void *)(b1 + at)) : _mm_setzero_si128();

	return _mm512_cvtph_ps(
		_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const void *)(b0 + at))), h1, 1));
}

AMX void
amx_q8_stage_kx8(const uint8_t *g0, const uint8_t *g1, size_t nsb, int five, struct amx_q8_wblock *s)
{
	const __m512i low = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
	const size_t qs = five ? 384 : 128, bytes = (size_t)KX8_BLOCK(five);

	for (size_t i = 0; i < nsb; i++) {
		const uint8_t *b0 = g0 + i * bytes, *b1 = g1 != NULL ? g1 + i * bytes : NULL;
		/* as widen_q4_k: d * scale and dmin * offset, in float */
		__m512 d = kx8_halves(b0, b1, 0), dmin = kx8_halves(b0, b1, 16);
		__m512i w0 = kx8_words(b0, b1, 32), w1 = kx8_words(b0, b1, 64), w2 = kx8_words(b0, b1, 96);
		for (int j = 0; j < 8; j++, s++) {
			/* sub-block j: chunk j / 2, low nibbles for even j */
			for (int k = 0; k < 8; k++) {
				__m512i q = kx8_words(b0, b1, qs + 256 * (size_t)(j / 2) + 32 * (size_t)k);
				if (j & 1)
					q = _mm512_srli_epi16(q, 4);
				q = _mm512_and_si512(q, low);
				if (five) { /* bit j of each fifth-bit byte */
					__m512i h = kx8_words(b0, b1, 128 + 32 * (size_t)k);
					h = _mm512_and_si512(_mm512_srli_epi16(h, (unsigned)j), one);
					q = _mm512_or_si512(q, _mm512_slli_epi16(h, 4));
				}
				_mm512_storeu_si512(s->b[k], q);
			}
			_mm512_storeu_ps(s->d, _mm512_mul_ps(d, kx8_scale(w0, w1, w2, j, 0)));
			_mm512_storeu_ps(s->min, _mm512_mul_ps(dmin, kx8_scale(w0, w1, w2, j, 1)));
		}
	}
}

/* The 32 int8 values of nr rows' blocks at blk (a row at each lane of
 * at, lanes past m zeros) into s->b: tile row k holds bytes 4k..4k+3 of
 * every row. */
AMX static inline __attribute__((always_inline)) void
stage_block_rows(const uint8_t *blk, __m512i at, __mmask16 m, struct amx_q8_wblock *s)
{
	for (int k = 0; k < 8; k++)
		_mm512_storeu_si512(s->b[k],
				    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, at, blk + 2 + 4 * k, 1));
}

AMX void
amx_q8_stage_rows(const uint8_t *rows, size_t row_bytes, int nr, size_t nb, const float *wd, const float *wmin,
		  struct amx_q8_wblock *s)
{
	const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	const __mmask16 m = (__mmask16)((1u << nr) - 1);
	/* row n of the block at n * row_bytes; its scales at n * nb */
	const __m512i at = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)row_bytes));
	const __m512i at_d = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)nb));
	const __m512i zero = _mm512_setzero_si512();

	for (size_t b = 0; b < nb; b++, s++) {
		const uint8_t *blk = rows + b * 34;
		stage_block_rows(blk, at, m, s);
		if (wd != NULL) {
			_mm512_storeu_ps(s->d, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at_d, wd + b, 4));
		} else { /* the fp16 scale in front of each block (its low 16 bits) */
			__m512i h = _mm512_mask_i32gather_epi32(zero, m, at, blk, 1);
			_mm512_storeu_ps(s->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
		}
		__m512 mins = _mm512_setzero_ps();
		if (wmin != NULL)
			mins = _mm512_mask_i32gather_ps(mins, m, at_d, wmin + b, 4);
		_mm512_storeu_ps(s->min, mins);
	}
}

/* Widened Q6_K rows: the blocks as Q8_0's, the halves' scales (wd + 2b
 * and wd + 2b + 1 of each row) into d and d1. */
AMX void
amx_q6_stage_rows(const uint8_t *rows, size_t row_bytes, int nr, size_t nb, const float *wd, struct amx_q8_wblock *s)
{
	const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	const __mmask16 m = (__mmask16)((1u << nr) - 1);
	const __m512i at = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)row_bytes));
	const __m512i at_d = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)(2 * nb)));

	for (size_t b = 0; b < nb; b++, s++) {
		stage_block_rows(rows + b * 34, at, m, s);
		_mm512_storeu_ps(s->d, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at_d, wd + 2 * b, 4));
		_mm512_storeu_ps(s->d1, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at_d, wd + 2 * b + 1, 4));
	}
}

/* Block BLK's products into tile TC (a constant), from tokens' tile TA
 * and weights' tile TB (the names clear the intrinsics' own). */
#define Q8_TDP(TC, TA, TB, BLK)                                                                                        \
	do {                                                                                                           \
		_tile_zero(TC);                                                                                        \
		_tile_loadd(TA, x[BLK].q, 32);                                                                         \
		_tile_loadd(TB, w[BLK].b, 64);                                                                         \
		_tile_dpbssd(TC, TA, TB);                                                                              \
	} while (0)

/* Block b's float step: acc[t] += sums[t] * (row scales * token t's),
 * less the rows' offsets times the token's scaled sum where has_min. */
AMX static inline __attribute__((always_inline)) void
q8_float_step(__m512 *acc, const int32_t *sums, const struct amx_q8_wblock *w, const struct amx_q8_xblock *x,
	      int has_min)
{
	__m512 d = _mm512_loadu_ps(w->d), mins = _mm512_loadu_ps(w->min);

#pragma GCC unroll 16
	for (int t = 0; t < 16; t++) {
		__m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(sums + 16 * t));
		acc[t] = _mm512_fmadd_ps(p, _mm512_mul_ps(d, _mm512_set1_ps(x->d[t])), acc[t]);
		if (has_min)
			acc[t] = _mm512_fnmadd_ps(mins, _mm512_set1_ps(x->dsum[t]), acc[t]);
	}
}

/* A token group's sums: token t's nr outputs at y + t * ldy, t < nt. */
AMX static inline __attribute__((always_inline)) void
group_store(const __m512 *acc, int nt, int nr, float *y, size_t ldy)
{
	__mmask16 m = (__mmask16)((1u << nr) - 1);

#pragma GCC unroll 16
	for (int t = 0; t < 16; t++)
		if (t < nt)
			_mm512_mask_storeu_ps(y + (size_t)t * ldy, m, acc[t]);
}

/* One group of 16 tokens over nb blocks; y[t * ldy + r] for t < nt,
 * r < nr.  The accumulators are 16 vectors, every loop over them
 * unrolled so that they stay in registers. */
AMX static inline __attribute__((always_inline)) void
q8_group(const struct amx_q8_wblock *w, size_t nb, const struct amx_q8_xblock *x, int has_min, int nt, float *y,
	 size_t ldy, int nr)
{
	int32_t buf[2][16 * 16] __attribute__((aligned(64)));
	__m512 acc[16];

#pragma GCC unroll 16
	for (int t = 0; t < 16; t++)
		acc[t] = _mm512_setzero_ps();
	Q8_TDP(0, 2, 4, 0);
	for (size_t b = 0; b < nb; b += 2) {
		if (b + 1 < nb)
			Q8_TDP(1, 3, 5, b + 1);
		_tile_stored(0, buf[0], 64);
		q8_float_step(acc, buf[0], &w[b], &x[b], has_min);
		if (b + 1 >= nb)
			break;
		if (b + 2 < nb)
			Q8_TDP(0, 2, 4, b + 2);
		_tile_stored(1, buf[1], 64);
		q8_float_step(acc, buf[1], &w[b + 1], &x[b + 1], has_min);
	}
	group_store(acc, nt, nr, y, ldy);
}

AMX void
gemm_q8_amx(const struct amx_q8_wblock *w, size_t nb, int has_min, const struct amx_q8_xblock *x, int ntokens, float *y,
	    size_t ldy, int nr)
{
	q8_tiles_configure();
	for (int t0 = 0; t0 < ntokens; t0 += 16) {
		const struct amx_q8_xblock *xg = x + (size_t)(t0 / 16) * nb;
		int nt = ntokens - t0 < 16 ? ntokens - t0 : 16;
		if (has_min)
			q8_group(w, nb, xg, 1, nt, y + (size_t)t0 * ldy, ldy, nr);
		else
			q8_group(w, nb, xg, 0, nt, y + (size_t)t0 * ldy, ldy, nr);
	}
	_tile_release();
}
/*
 * Q6_K on the tiles.  Its 16-element halves carry their own scales, so
 * each block is two products of K = 16 (tokens 16 x 16 bytes, weights 4
 * x (16 rows x 4 bytes)) into two sums, each converted and scaled as
 * gemm_q6_k_avx512 does it (the same float operations in the same order:
 * the same bits).  Tiles 0-1 and 2-3: the halves' sums of blocks b and
 * b + 1; 4-5 the tokens' halves; 6-7 the weights'.
 */
AMX static void
q6_tiles_configure(void)
{
	static const uint8_t rows[8] = { 16, 16, 16, 16, 16, 16, 4, 4 };
	static const uint16_t colsb[8] = { 64, 64, 64, 64, 16, 16, 64, 64 };

	tiles_configure(rows, colsb);
}

/* Block BLK's two halves into tiles TC and TC + 1 (constants) */
#define Q6_TDP(TC0, TC1, BLK)                                                                                          \
	do {                                                                                                           \
		_tile_zero(TC0);                                                                                       \
		_tile_zero(TC1);                                                                                       \
		_tile_loadd(4, x[BLK].q[0], 32);                                                                       \
		_tile_loadd(6, w[BLK].b[0], 64);                                                                       \
		_tile_dpbssd(TC0, 4, 6);                                                                               \
		_tile_loadd(5, x[BLK].q[0] + 16, 32);                                                                  \
		_tile_loadd(7, w[BLK].b[4], 64);                                                                       \
		_tile_dpbssd(TC1, 5, 7);                                                                               \
	} while (0)

AMX static inline __attribute__((always_inline)) void
q6_float_step(__m512 *acc, const int32_t *s0, const int32_t *s1, const struct amx_q8_wblock *w,
	      const struct amx_q8_xblock *x)
{
	__m512 d0 = _mm512_loadu_ps(w->d), d1 = _mm512_loadu_ps(w->d1);

#pragma GCC unroll 16
	for (int t = 0; t < 16; t++) {
		__m512 xd = _mm512_set1_ps(x->d[t]);
		acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s0 + 16 * t)), _mm512_mul_ps(d0, xd),
					 acc[t]);
		acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s1 + 16 * t)), _mm512_mul_ps(d1, xd),
					 acc[t]);
	}
}

AMX static void
q6_group(const struct amx_q8_wblock *w, size_t nb, const struct amx_q8_xblock *x, int nt, float *y, size_t ldy, int nr)
{
	int32_t buf[2][16 * 16] __attribute__((aligned(64)));
	__m512 acc[16];

#pragma GCC unroll 16
	for (int t = 0; t < 16; t++)
		acc[t] = _mm512_setzero_ps();
	Q6_TDP(0, 1, 0);
	for (size_t b = 0; b < nb; b += 2) {
		if (b + 1 < nb)
			Q6_TDP(2, 3, b + 1);
		_tile_stored(0, buf[0], 64);
		_tile_stored(1, buf[1], 64);
		q6_float_step(acc, buf[0], buf[1], &w[b], &x[b]);
		if (b + 1 >= nb)
			break;
		if (b + 2 < nb)
			Q6_TDP(0, 1, b + 2);
		_tile_stored(2, buf[0], 64);
		_tile_stored(3, buf[1], 64);
		q6_float_step(acc, buf[0], buf[1], &w[b + 1], &x[b + 1]);
	}
	group_store(acc, nt, nr, y, ldy);
}

AMX void
gemm_q6_amx(const struct amx_q8_wblock *w, size_t nb, const struct amx_q8_xblock *x, int ntokens, float *y, size_t ldy,
	    int nr)
{
	q6_tiles_configure();
	for (int t0 = 0; t0 < ntokens; t0 += 16) {
		int nt = ntokens - t0 < 16 ? ntokens - t0 : 16;
		q6_group(w, nb, x + (size_t)(t0 / 16) * nb, nt, y + (size_t)t0 * ldy, ldy, nr);
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
