/*
 * CPU dot-product kernels, chosen once at start-up by CPUID.
 *
 * Quantized weights are multiplied in integers: activations are quantized
 * to blocks of 32 int8 with one float scale (struct block_q8), the way the
 * GGUF ecosystem computes Q8_0/Q4_0 products, and the weight blocks are
 * multiplied with VNNI (vpdpbusd) or AVX2 (vpmaddubsw).  Other types are
 * dequantized to float32 a row at a time and use the float dot.
 */
#ifndef PRIVAI_CPU_DOT_H
#define PRIVAI_CPU_DOT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "privai/tensor_type.h"

/* The fp16 at p (a block's scale; blocks have no alignment), portably:
 * the scalar kernels' reading (the SIMD ones take f16c_load). */
static inline float
f16_at(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return fp16_to_f32(h);
}

/* Where a Q4_1, Q5_0 or Q5_1 block keeps its parts: its size, the offset
 * m (or -1), the fifth bits (or -1) and the nibbles (cpu_dot_legacy.c,
 * cpu_legacy_x8.c). */
struct legacy_layout {
	int bytes, m, qh, qs;
};

static inline struct legacy_layout
legacy_layout(uint32_t type)
{
	switch (type) {
	case TT_Q4_1:
		return (struct legacy_layout){ 20, 2, -1, 4 };
	case TT_Q5_0:
		return (struct legacy_layout){ 22, -1, 2, 6 };
	default: /* TT_Q5_1 */
		return (struct legacy_layout){ 24, 2, 4, 8 };
	}
}

struct block_q8 {
	float d;     /* scale: x ~= d * q */
	int32_t sum; /* sum of q, for weight types with an offset (Q4_0) */
	int8_t q[32];
};

/* Activations for the Q6_K decode dot, one scale per 256 values (as
 * llama.cpp's Q8_K): the dot then sums a whole Q6_K super-block in
 * integers and goes to float once, where 32-value blocks each need their
 * own float step.  bsum[j] = sum of q[16j .. 16j+15], for Q6_K's -32. */
struct block_q8k {
	float d;
	int16_t bsum[16];
	int8_t q[256];
};

/* Activations of 16 tokens for one 32-element block, laid out for the
 * VNNI GEMM: q[s] holds, in 32-bit lane j, bytes 4s..4s+3 of token j's
 * block plus 128 (so they are unsigned); d[j] is token j's scale (0 for a
 * padding lane). */
#define GEMM_TOKENS 16
struct q8_tile {
	uint8_t q[8][64];
	float d[GEMM_TOKENS];
	float dsum[GEMM_TOKENS]; /* d * sum(q): what a weight offset multiplies */
};

/* Pack nt (<= 16) tokens' quantized rows (nb blocks each, token t at
 * x + t * nb) into nb tiles. */
void q8_tile_pack(const struct block_q8 *x, int nt, size_t nb, struct q8_tile *out);

/* Activations of up to 8 tokens for one block, for decode batches too
 * small to fill a 16-token tile: q[s] holds, in 32-bit lane j, bytes
 * 4s..4s+3 of token j's block plus 128 (unsigned), as in struct q8_tile;
 * the weights' block sums come from the model (struct weight.bsum), so
 * nothing is derived from the weights per call. */
#define GEMM8_TOKENS 8
struct q8_tile8 {
	uint8_t q[8][32];
	float d[GEMM8_TOKENS];
};

void q8_tile8_pack(const struct block_q8 *x, int nt, size_t nb, struct q8_tile8 *out);

/* Two tokens' activations for one block, for the 8-row groups' kernels
 * that take a pair of tokens in one 512-bit vector (gemm_q4_0x8_pairs):
 * q holds, for each 4-byte unit s of the block, token 0's bytes 4s..4s+3
 * and then token 1's, so that one 8-byte broadcast gives every row's
 * lane pair both tokens' units; d and sum as struct block_q8's, a token
 * each. */
struct q8_pair {
	float d[2];
	int32_t sum[2];
	int8_t q[64];
};

/* nt tokens' blocks (x, token-major, nb a token) as (nt + 1) / 2 pairs of
 * nb blocks each, pair p holding tokens 2p and 2p + 1; an odd count's
 * last pair holds its token twice. */
void q8_pair_pack(const struct block_q8 *x, int nt, size_t nb, struct q8_pair *out);

/* The same for Q8_K's 256-value blocks (gemm_q4_kx8_pairs): q for each
 * 4-byte unit token 0's bytes, then token 1's; bsum for each 32-value
 * sub-block j token 0's two 16-value sums (2j, 2j + 1), then token 1's;
 * d a token each.  q8k_pair_pack as q8_pair_pack. */
struct q8k_pair {
	float d[2];
	int16_t bsum[32];
	int8_t q[512];
};

void q8k_pair_pack(const struct block_q8k *x, int nt, size_t nsb, struct q8k_pair *out);

/* The AMX int8 GEMM's operands (cpu_amx.c), a 32-value block each: 16
 * weight rows as tdpbssd's B tile (row k: bytes 4k..4k+3 of each row,
 * signed), their scales and K-quant offsets; and 16 tokens as its A tile
 * (a token's 32 bytes a row), their scales and scale times sum. */
struct amx_q8_wblock {
	int8_t b[8][64];
	float d[16];
	union {
		float min[16]; /* K-quants' offsets (zeros for Q8_0, Q4_0) */
		float d1[16];  /* Q6_K: the second 16-element half's scales (d the first's) */
	};
};
struct amx_q8_xblock {
	int8_t q[16][32];
	float d[16];
	float dsum[16];
};

/* Pack nt tokens' quantized rows (nb blocks each, token t at x + t * nb)
 * 16 a group: out[g * nb + b] (zeros past nt). */
void amx_q8_xpack(const struct block_q8 *x, int nt, size_t nb, struct amx_q8_xblock *out);

struct cpu_kernels {
	const char *name;
	float (*dot_f32)(const float *a, const float *b, size_t n);
	/* dot of n fp16 weights with n floats (no row conversion pass) */
	float (*dot_f16)(const uint16_t *w, const float *x, size_t n);
	/* dst[i] = f16 src[i] as float */
	void (*f16_to_f32)(const uint16_t *src, float *dst, size_t n);
	/* Quantize n floats (multiple of 32) to n/32 blocks. */
	void (*quantize_q8)(const float *x, struct block_q8 *out, size_t n);
	/* Dot of one weight row of nb blocks with nb activation blocks. */
	float (*dot_q8_0)(const void *w, const struct block_q8 *x, size_t nb);
	float (*dot_q4_0)(const void *w, const struct block_q8 *x, size_t nb);
	/* K-quant rows: nb is the number of 32-element activation blocks. */
	float (*dot_q4_k)(const void *w, const struct block_q8 *x, size_t nb);
	float (*dot_q6_k)(const void *w, const struct block_q8 *x, size_t nb);
	/* Q8_0 rows x 1 or 2 groups of 16 tokens (the second group's tiles
	 * group_stride tiles after the first): y[r * 32 + g * 16 + j] = row r .
	 * token j of group g over nb blocks, for nrows rows row_bytes apart.
	 * NULL where the CPU has no kernel for it (the per-token dot is used). */
	void (*gemm_q8_0_prep)(const uint8_t *w, size_t row_bytes, int nrows, size_t nb, int32_t *wsum, float *wd);
	/* wsum, wd: what gemm_q8_0_prep computed for these rows; wmin (NULL
	 * for none) is a per-block offset o such that each weight is
	 * wd * q - o (Q4_K's min), taken off as o * dsum per token */
	void (*gemm_q8_0)(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd,
			  const float *wmin, const struct q8_tile *x, size_t group_stride, int ngroups, size_t nb,
			  float *y);
	/* Q8_0 rows x one tile8 group: y[r * 8 + j] = row r . token j;
	 * bsum: each row's block sums (nb per row). */
	void (*gemm8_q8_0)(const uint8_t *w, size_t row_bytes, int nrows, const int16_t *bsum, const struct q8_tile8 *x,
			   size_t nb, float *y);
	/* Float rows x tokens, one register tile: y[t * ldy + r] = w_r . x_t
	 * for r < nr <= GEMM_F32_ROWS and t < nt <= GEMM_F32_TOKENS, rows ldw
	 * floats apart, tokens ldx apart, n elements each.  Every weight
	 * value loaded is used for nt tokens (the per-token dot loads two
	 * values per multiply-add).  NULL where there is no kernel. */
	void (*gemm_f32)(const float *w, size_t ldw, int nr, const float *x, size_t ldx, int nt, size_t n, float *y,
			 size_t ldy);
	/* bfloat16 weights, as dot_f16 and f16_to_f32 (a bfloat16 is the
	 * top half of a float: a shift, no rounding) */
	float (*dot_bf16)(const uint16_t *w, const float *x, size_t n);
	void (*bf16_to_f32)(const uint16_t *src, float *dst, size_t n);
	/* The half-precision KV cache (cpu_attention.c): dst[i] = src[i]
	 * rounded to the nearest fp16 (ties to even); y[i] += a * x[i] for
	 * fp16 x; x[i] = exp(x[i]) within about an ulp (cpu_elementwise.c). */
	void (*f32_to_f16)(const float *src, uint16_t *dst, size_t n);
	void (*axpy_f16)(float a, const uint16_t *x, float *y, size_t n);
	void (*exp_f32)(float *x, size_t n);
	/* 4-bit rows of nb 32-element blocks widened to 34-byte int8 blocks
	 * for the GEMM (cpu_widen.c).  Q4_0: the same scale, q - 8, and each
	 * block's sum into sums (unless NULL).  Q4_K: q in 0..15, with
	 * wsum = -128 * sum(q), wd = d * sc, wmin = dmin * m per block. */
	void (*widen_q4_0)(const uint8_t *src, uint8_t *dst, size_t nb, int16_t *sums);
	void (*widen_q4_k)(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin);
	/* Q6_K: q - 32, and per 16-element half wsum = -128 * sum, wd = d * sc
	 * (2 * nb of each) */
	void (*widen_q6_k)(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
	/* gemm_q8_0 for widened Q6_K rows: two scales and sums per block,
	 * y as gemm_q8_0's; NULL where there is no kernel */
	void (*gemm_q6_k)(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd,
			  const struct q8_tile *x, size_t group_stride, int ngroups, size_t nb, float *y);
	/* Q5_K: the Q4_K dot and widening with the fifth bit */
	float (*dot_q5_k)(const void *w, const struct block_q8 *x, size_t nb);
	void (*widen_q5_k)(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin);
	/* bfloat16 weights in prefill (cpu_gemm_bf16.c), NULL without
	 * AVX512_BF16.  pack: nt <= 16 tokens (ldx floats apart) of cols
	 * (even) elements into tile[k/2 * 16 + j] = token j's elements k and
	 * k+1 as bfloat16 (nearest even), zeros past nt.  gemm: nrows rows
	 * (ldw apart) x 1 or 2 such tiles (group_stride uint32 apart), y as
	 * gemm_q8_0's: y[r * 32 + g * 16 + j]. */
	void (*pack_bf16_tile)(const float *x, size_t ldx, int nt, size_t cols, uint32_t *tile);
	void (*gemm_bf16)(const uint16_t *w, size_t ldw, int nrows, const uint32_t *x, size_t group_stride, int ngroups,
			  size_t cols, float *y);
	/* Q4_0 repacked 8 rows to a group (cpu_q4_0x8.c); NULL (no repack)
	 * where there is no SIMD kernel.  gemm: as gemm_q8_0x8 below, for ng
	 * groups and nt <= 8 tokens.  widen: the 8 rows as 34-byte int8
	 * blocks, dst_row_bytes apart, and each block's sum into sums[r * nb +
	 * b] unless NULL (what widen_q4_0 writes for one row). */
	void (*gemm_q4_0x8)(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			    size_t ldy);
	void (*widen_q4_0x8)(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int16_t *sums);
	/* bfloat16 decode with vdpbf16ps (NULL without AVX512_BF16): the
	 * activations rounded to bfloat16 once a token, then a dot of two
	 * bfloat16 rows */
	void (*f32_to_bf16)(const float *x, uint16_t *out, size_t n);
	float (*dot_bf16_bf16)(const uint16_t *w, const uint16_t *x, size_t n);
	/* Q6_K decode on Q8_K activations: n (a multiple of 256) values
	 * quantized, and a row of nsb super-blocks times them */
	void (*quantize_q8k)(const float *x, struct block_q8k *out, size_t n);
	float (*dot_q6_k_q8k)(const void *w, const struct block_q8k *x, size_t nsb);
	/* Attention over one chunk of nc <= ATT_CHUNK cached positions for nh
	 * query rows of hd values.
	 * scores: s[r * ATT_CHUNK + i] = scale * qh[r] . K row i of a tile of
	 * ATT_CHUNK positions stored value by value (kt[d * ATT_CHUNK + i],
	 * struct kv_view), for all ATT_CHUNK positions and any nr and hd; each
	 * row sums its even and its odd values apart, then adds the two, in
	 * every kernel set, so a row's scores do not depend on the rows beside
	 * it (a prompt's result does not depend on how its batch was cut).
	 * pv (hd a multiple of 16; NULL where there is none, axpy_f16 then
	 * goes a position at a time): out[g] = c[g] * out[g] + sum over i of
	 * s[g * ATT_CHUNK + i] * V row vr[i]. */
	void (*att_scores_tile)(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s);
	void (*att_pv_f16)(const uint16_t *const *vr, int nc, const float *s, const float *c, int nh, int hd,
			   float *out);
	/* The online softmax step over a chunk's scores (NULL: in C): row r
	 * sees seen[r] <= ATT_CHUNK positions (none if <= 0; the rest are
	 * zeroed), s[r] becomes exp(s[r] - m[r]) with the running maximum
	 * m[r] and sum l[r] carried on, c[r] = exp(old m[r] - new m[r]). */
	void (*att_softmax)(float *s, int nr, const int *seen, float *m, float *l, float *c);
	/* The packed float GEMM (cpu_gemm_f32.c; NULL where there is none).
	 * pack: rows r < nr <= GEMM_PK_ROWS of w (ldw apart), columns k < kc,
	 * into a[k * GEMM_PK_ROWS + r] (rows past nr zero).
	 * pack_tokens: nt tokens' columns k < kc (rows ldx apart) into
	 * xp[(b * kc + k) * 8 + t] for token 8b + t.
	 * gemm: y[t * ldy + r] = (add ? y[..] : 0) + sum over k < kc of
	 * a[k * GEMM_PK_ROWS + r] * token t's column k (xp[b * ldb + k * 8
	 * + t % 8], b = t / 8), r < GEMM_PK_ROWS, t < nt. */
	void (*pack_f32_panel)(const float *w, size_t ldw, int nr, size_t kc, float *a);
	void (*gemm_f32_packed)(const float *a, size_t kc, const float *xp, size_t ldb, int nt, float *y, size_t ldy,
				int add);
	/* Q4_K and Q5_K decode on Q8_K activations, as dot_q6_k_q8k */
	float (*dot_q4_k_q8k)(const void *w, const struct block_q8k *x, size_t nsb);
	float (*dot_q5_k_q8k)(const void *w, const struct block_q8k *x, size_t nsb);
	/* Q4_K and Q5_K repacked 8 rows to a group (cpu_kquants_x8.c), NULL
	 * (no repack) where there is no SIMD kernel: for ng consecutive
	 * groups of nsb super-blocks, y[t * ldy + 8 * g + r] = row r of group
	 * g . token t for nt <= 8 tokens, token t's super-blocks at x + t *
	 * nsb; repack as kx8_repack */
	void (*gemm_q4_kx8)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			    size_t ldy);
	void (*repack_kx8)(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, int five,
			   uint8_t *dst);
	void (*gemm_q5_kx8)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			    size_t ldy);
	/* Q8_0 repacked 8 rows to a group (cpu_q8_0x8.c), NULL (no repack)
	 * where there is no kernel: for ng consecutive groups from grp,
	 * y[t * ldy + 8 * g + r] = row r of group g . token t for nt <= 8
	 * tokens, token t's nb blocks at x + t * nb.  widen: the 8 rows as
	 * the file's 34-byte blocks, dst_row_bytes apart. */
	void (*gemm_q8_0x8)(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			    size_t ldy);
	void (*widen_q8_0x8)(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes);
	/* Q6_K decode batches: one row times nt <= 8 tokens (token t's
	 * super-blocks at x + t * nsb), y[t * ldy] as dot_q6_k_q8k gives
	 * it bit for bit; NULL: a dot per token */
	void (*dots_q6_k_q8k)(const void *w, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy);
	/* F16 decode: four rows (ldw values apart) times one token's floats,
	 * y[r] for r < 4 as dot_f16 gives it bit for bit; NULL: a row at a
	 * time */
	void (*dot4_f16)(const uint16_t *w, size_t ldw, const float *x, size_t n, float *y);
	/* and bfloat16 decode (dot_bf16_bf16) four rows a pass, bit for bit
	 * as that; NULL: a row at a time */
	void (*dot4_bf16_bf16)(const uint16_t *w, size_t ldw, const uint16_t *x, size_t n, float *y);
	/* vdpbf16ps does fewer products a second than float FMAs on this
	 * CPU (measured by cpu_kernels_get): bfloat16 prefill converts rows
	 * to float instead of taking gemm_bf16 */
	int bf16_gemm_slow;
	/* pack_f32_panel straight from nr F16 rows (ldw values apart), the
	 * same panel bit for bit; NULL: rows converted to float first */
	void (*pack_f16_panel)(const uint16_t *w, size_t ldw, int nr, size_t kc, float *a);
	/* and from bfloat16 rows (BF16 prompts where vdpbf16ps is slow) */
	void (*pack_bf16_panel)(const uint16_t *w, size_t ldw, int nr, size_t kc, float *a);
	/* what bf16_gemm_slow was decided on: vdpbf16ps's products a second
	 * over float FMAs' (bf16_dot_speedup_avx512), 0 where not measured;
	 * `privai-engine features` shows it */
	double bf16_speedup;
	/* F16 and BF16 prompts on AMX tiles (cpu_amx.c), NULL where the CPU
	 * or its kernel has none.  pack_lo: what pack_bf16_tile's rounding
	 * left of each value, rounded again (lo), and what that left (lo2),
	 * in its layout (F16's second and third token tiles; cols a multiple
	 * of 32).  gemm: y[t * ldy + r] = row r . token t for nrows (a
	 * multiple of AMX_ROW_BLOCK) F16 (f16 1: each weight split into two
	 * bfloat16, five products) or BF16 rows ldw values apart, ntokens
	 * tokens packed 16 a group (x[0] hi, and x[1] lo and x[2] lo2 for
	 * F16), cols a multiple of 32; scratch: AMX_SCRATCH_BYTES, the
	 * thread's own */
	void (*amx_pack_lo)(const float *x, size_t ldx, int nt, size_t cols, uint32_t *lo, uint32_t *lo2);
	void (*amx_gemm)(int f16, const uint16_t *w, size_t ldw, int nrows, const uint32_t *const x[3], int ntokens,
			 size_t cols, float *y, size_t ldy, void *scratch);
	/* The int8 GEMM on AMX tiles (cpu_amx.c), gemm_q8_0's bits; NULL
	 * where there are none.  stage_x8 (stage_q4x8): 16 rows from two
	 * Q8_0 (Q4_0) 8-row groups (g1 NULL: 8 rows); stage_rows: nr (<= 16) rows of Q8_0
	 * blocks row_bytes apart, their scales from wd (rows x nb; NULL: the
	 * blocks' own) and offsets from wmin (NULL: none); gemm: y[t * ldy +
	 * r] for r < nr of the staged rows times ntokens tokens packed by
	 * amx_q8_xpack */
	void (*amx_q8_stage_x8)(const uint8_t *g0, const uint8_t *g1, size_t nb, struct amx_q8_wblock *s);
	void (*amx_q8_stage_q4x8)(const uint8_t *g0, const uint8_t *g1, size_t nb, struct amx_q8_wblock *s);
	/* and from two Q4_K (five 0) or Q5_K groups of nsb super-blocks:
	 * 8 x nsb blocks, scales and offsets as widen_q4_k gives them */
	void (*amx_q8_stage_kx8)(const uint8_t *g0, const uint8_t *g1, size_t nsb, int five, struct amx_q8_wblock *s);
	void (*amx_q8_stage_rows)(const uint8_t *rows, size_t row_bytes, int nr, size_t nb, const float *wd,
				  const float *wmin, struct amx_q8_wblock *s);
	void (*gemm_q8_amx)(const struct amx_q8_wblock *w, size_t nb, int has_min, const struct amx_q8_xblock *x,
			    int ntokens, float *y, size_t ldy, int nr);
	/* F16 prompts take amx_gemm too (unless PRIVAI_AMX_F16=0) */
	int amx_f16;
	/* widened Q6_K rows, two scales a block (wd: 2 * nb a row) */
	void (*amx_q6_stage_rows)(const uint8_t *rows, size_t row_bytes, int nr, size_t nb, const float *wd,
				  struct amx_q8_wblock *s);
	/* Q6_K: each block's halves summed and scaled apart (gemm_q6_k's
	 * arithmetic, the same bits) */
	void (*gemm_q6_amx)(const struct amx_q8_wblock *w, size_t nb, const struct amx_q8_xblock *x, int ntokens,
			    float *y, size_t ldy, int nr);
	/* the packed float GEMM's tokens (pack_tokens above) */
	void (*pack_f32_tokens)(const float *x, size_t ldx, int nt, size_t kc, float *xp);
	/* Q6_K repacked 8 rows to a group (cpu_q6_kx8.c), NULL (no repack)
	 * where there is no SIMD kernel: as gemm_q4_kx8; repack as
	 * q6x8_repack */
	void (*gemm_q6_kx8)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			    size_t ldy);
	/* a group of nsb super-blocks as widen_q6_k gives its 8 rows: row r's
	 * blocks at dst + r * dst_row_bytes, its sums and scales at wsum + r *
	 * ld and wd + r * ld */
	void (*widen_q6_kx8)(const uint8_t *grp, size_t nsb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum,
			     float *wd, size_t ld);
	/* a[i] = silu(a[i]) * b[i] (cpu_elementwise.c) */
	void (*swiglu)(float *a, const float *b, size_t n);
	/* Q2_K and Q3_K decode on Q8_K activations, as dot_q6_k_q8k
	 * (cpu_dot_lowbit.c) */
	float (*dot_q2_k_q8k)(const void *w, const struct block_q8k *x, size_t nsb);
	float (*dot_q3_k_q8k)(const void *w, const struct block_q8k *x, size_t nsb);
	/* Q3_K rows as widen_q6_k gives Q6_K's (u - 4, two scales and sums
	 * a block), for gemm_q6_k */
	void (*widen_q3_k)(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
	/* IQ4_XS (cpu_dot_iq4.c): decode on Q8_K activations; rows widened
	 * to int8 blocks of its levels with wsum = -128 * sum and wd = the
	 * sub-block's scale (nb of each), for gemm_q8_0 without offsets */
	float (*dot_iq4_xs_q8k)(const void *w, const struct block_q8k *x, size_t nsb);
	void (*widen_iq4_xs)(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
	/* Q4_1, Q5_0, Q5_1 (cpu_dot_legacy.c) and IQ4_NL (cpu_dot_iq4.c)
	 * against 32-value activation blocks; widen_legacy: rows of any of
	 * the four as int8 blocks for gemm_q8_0, wsum and wd per block, wmin
	 * (the offset, -m) for Q4_1 and Q5_1 */
	float (*dot_q4_1)(const void *w, const struct block_q8 *x, size_t nb);
	float (*dot_q5_0)(const void *w, const struct block_q8 *x, size_t nb);
	float (*dot_q5_1)(const void *w, const struct block_q8 *x, size_t nb);
	float (*dot_iq4_nl)(const void *w, const struct block_q8 *x, size_t nb);
	void (*widen_legacy)(uint32_t type, const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd,
			     float *wmin);
	/* IQ4_XS repacked 8 rows to a group (cpu_iq4_xsx8.c), NULL (no
	 * repack) where there is no SIMD kernel: as gemm_q6_kx8 */
	void (*gemm_iq4_xsx8)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			      size_t ldy);
	void (*repack_iq4x8)(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
	/* Q3_K repacked 8 rows to a group (cpu_q3_kx8.c), as gemm_q6_kx8 */
	void (*gemm_q3_kx8)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			    size_t ldy);
	void (*repack_q3x8)(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
	/* Q2_K repacked 8 rows to a group (cpu_q2_kx8.c), as gemm_q6_kx8 */
	void (*gemm_q2_kx8)(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			    size_t ldy);
	void (*repack_q2x8)(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
	/* IQ4_NL in Q4_0's groups (q4_0x8_repack; cpu_iq4_xsx8.c), as
	 * gemm_q4_0x8; its rows widened as widen_legacy does them */
	void (*gemm_iq4_nlx8)(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			      size_t ldy);
	void (*widen_iq4_nl)(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
	/* Q4_1, Q5_0 and Q5_1 repacked 8 rows to a group (cpu_legacy_x8.c),
	 * NULL (no repack) where there is no SIMD kernel: as gemm_q4_0x8 */
	void (*gemm_q4_1x8)(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			    size_t ldy);
	void (*gemm_q5_0x8)(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			    size_t ldy);
	void (*gemm_q5_1x8)(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			    size_t ldy);
	/* a group's nb blocks as widen_legacy makes of its 8 file rows: row
	 * r's at dst + r * dst_row_bytes, its sums, scales and offsets at
	 * wsum, wd and wmin + r * ld (wmin untouched for Q5_0) */
	void (*widen_legacy_x8)(uint32_t type, const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes,
				int32_t *wsum, float *wd, float *wmin, size_t ld);
	/* gemm_q4_0x8, gemm_iq4_nlx8 and gemm_q8_0x8 for 2 to 8 tokens on their pairs
	 * (q8_pair_pack; pair p at x + p * nb), the same bits; NULL where
	 * there are no 512-bit vectors, or where a 512-bit vpdpbusd does less
	 * than COMPUTE_CPU_PAIRS_MIN_SPEEDUP times a 256-bit one's products (cpu_pairs_speedup;
	 * PRIVAI_PAIRS=0 or 1 decides instead; cpu_kernels_get) */
	void (*gemm_q4_0x8_pairs)(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				  size_t ldy);
	void (*gemm_iq4_nlx8_pairs)(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				    size_t ldy);
	void (*gemm_q8_0x8_pairs)(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				  size_t ldy);
	/* gemm_q4_kx8, gemm_q5_kx8 and gemm_q6_kx8 for 2 to 8 tokens on their pairs
	 * (q8k_pair_pack; pair p at x + p * nsb), the same bits */
	void (*gemm_q4_kx8_pairs)(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				  size_t ldy);
	void (*gemm_q5_kx8_pairs)(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				  size_t ldy);
	void (*gemm_q6_kx8_pairs)(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				  size_t ldy);
	/* gemm_iq4_xsx8, gemm_q3_kx8 and gemm_q2_kx8 the same way (as gemm_q4_kx8_pairs) */
	void (*gemm_iq4_xsx8_pairs)(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				    size_t ldy);
	void (*gemm_q3_kx8_pairs)(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				  size_t ldy);
	void (*gemm_q2_kx8_pairs)(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				  size_t ldy);
	/* gemm_q4_1x8, gemm_q5_0x8 and gemm_q5_1x8 the same way (as gemm_q4_0x8_pairs) */
	void (*gemm_q4_1x8_pairs)(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				  size_t ldy);
	void (*gemm_q5_0x8_pairs)(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				  size_t ldy);
	void (*gemm_q5_1x8_pairs)(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				  size_t ldy);
};
#define AMX_Q8_ROWS 16 /* rows a step of gemm_q8_amx */

/* The AMX GEMM's blocking (cpu_amx.c says why) */
#define AMX_ROW_BLOCK 32 /* rows a step: two 16-row tiles */
#define AMX_SB_ROWS 256  /* rows whose sums stay in the thread's buffer while the columns pass */
#define AMX_TOKENS 128   /* tokens a pass over the weights */
#define AMX_KC 1024      /* columns a pass */
/* Rows of a block as the tiles read them: AMX_LDA values apart, not the
 * model's 2^k columns, whose 16 rows a tile reads would all fall in one
 * set of L1 (4 KB apart) and evict each other. */
#define AMX_LDA (AMX_KC + 32)
#define AMX_SCRATCH_BYTES (AMX_SB_ROWS * AMX_TOKENS * sizeof(float) + 2 * AMX_ROW_BLOCK * AMX_LDA * sizeof(uint16_t))

/* cpu_amx.c: 1 where AMX tiles run here (CPUID, the OS saving their
 * state, and the kernel's permission, asked once) */
int cpu_amx_usable(void);

#define GEMM_BF16_TOKENS 16
#define GEMM_BF16_ROWS 8 /* rows a step: 2 x 8 sums in registers */
#define GEMM_F32_ROWS 4
#define GEMM_PK_ROWS 48    /* rows of a packed float panel: 3 vectors */
#define GEMM_PK_COLS 256   /* columns of a panel (48 KiB) */
#define GEMM_PK_TOKENS 512 /* tokens a pass over the weights: 48 rows' sums of them (96 KiB) stay in L2 */
#define GEMM_F32_TOKENS 6

/* cpu_dot_kquants.c */
float dot_q4_k_scalar(const void *w, const struct block_q8 *x, size_t nb);
float dot_q5_k_scalar(const void *w, const struct block_q8 *x, size_t nb);
float dot_q6_k_scalar(const void *w, const struct block_q8 *x, size_t nb);
float (*dot_q4_k_simd(int avx512))(const void *, const struct block_q8 *, size_t);
float (*dot_q5_k_simd(int avx512))(const void *, const struct block_q8 *, size_t);
float (*dot_q6_k_simd(int avx512))(const void *, const struct block_q8 *, size_t);
void quantize_q8k_scalar(const float *x, struct block_q8k *out, size_t n);
float dot_q6_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb);
float (*dot_q6_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t);
void (*dots_q6_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t, int, float *, size_t);
float dot_q4_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb);
float dot_q5_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb);
float (*dot_q4_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t);
float (*dot_q5_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t);
float dot_q2_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb);
float dot_q3_k_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb);
float (*dot_q2_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t);
float (*dot_q3_k_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t);
void widen_q3_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
float dot_iq4_xs_q8k_scalar(const void *w, const struct block_q8k *x, size_t nsb);
float (*dot_iq4_xs_q8k_simd(int avx512))(const void *, const struct block_q8k *, size_t);
void widen_iq4_xs_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
/* IQ4_NL's sixteen levels, IQ4_XS's too (cpu_dot_iq4.c) */
extern const int8_t iq4_nl_levels[16];
float dot_q4_1_scalar(const void *w, const struct block_q8 *x, size_t nb);
float dot_q5_0_scalar(const void *w, const struct block_q8 *x, size_t nb);
float dot_q5_1_scalar(const void *w, const struct block_q8 *x, size_t nb);
float dot_iq4_nl_scalar(const void *w, const struct block_q8 *x, size_t nb);
void widen_iq4_nl_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
void widen_legacy_scalar(uint32_t type, const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd,
			 float *wmin);
#if defined(__x86_64__)
void quantize_q8k_avx2(const float *x, struct block_q8k *out, size_t n);
#endif

/* cpu_attention.c */
void f32_to_f16_scalar(const float *src, uint16_t *dst, size_t n);
void axpy_f16_scalar(float a, const uint16_t *x, float *y, size_t n);
void att_scores_tile_scalar(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s);
#if defined(__x86_64__)
void f32_to_f16_avx2(const float *src, uint16_t *dst, size_t n);
void axpy_f16_avx2(float a, const uint16_t *x, float *y, size_t n);
void att_scores_tile_avx2(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s);
void axpy_f16_avx512(float a, const uint16_t *x, float *y, size_t n);
#endif

/* cpu_elementwise.c */
void exp_f32_scalar(float *x, size_t n);
void swiglu_scalar(float *a, const float *b, size_t n);
#if defined(__x86_64__)
void exp_f32_avx2(float *x, size_t n);
void swiglu_avx2(float *a, const float *b, size_t n);
#endif

/* cpu_q4_0x8.c: bytes per block of an 8-row group (8 x 18) */
#define Q4_0X8_BLOCK 144
/* groups [g0, g1) of the rows at src (row_bytes apart) into dst, which
 * holds all groups; row r of a group back to floats */
void q4_0x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nb, uint8_t *dst);
void q4_0x8_dequantize_row(const uint8_t *grp, size_t nb, int r, float *out);
void gemm_q4_0x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void widen_q4_0x8_scalar(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int16_t *sums);
#if defined(__x86_64__)
void gemm_q4_0x8_avx2(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q4_0x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q4_0x8_wide_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			     size_t ldy);
void gemm_q4_0x8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
			      size_t ldy);
void gemm_q3_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
			      size_t ldy);
void gemm_q2_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
			      size_t ldy);
void gemm_iq4_xsx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
				size_t ldy);
void gemm_q4_1x8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
			      size_t ldy);
void gemm_q5_0x8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
			      size_t ldy);
void gemm_q5_1x8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
			      size_t ldy);
void gemm_q8_0x8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
			      size_t ldy);
void gemm_iq4_nlx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8_pair *x, size_t nb, int nt, float *y,
				size_t ldy);
void widen_q4_0x8_avx2(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes, int16_t *sums);
#endif

/* cpu_q8_0x8.c: bytes per block of an 8-row group (8 x 34) */
#define Q8_0X8_BLOCK 272
/* from this many tokens a pass Q8_0 and Q4_0 groups are widened for the GEMM */
#define X8_GEMM_TOKENS 96
void q8_0x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nb, uint8_t *dst);
void q8_0x8_dequantize_row(const uint8_t *grp, size_t nb, int r, float *out);
/* the groups' scalar reference, for both types (cpu_q8_0x8.c) */
void gemm_x8_scalar(const uint8_t *grp, int ng, size_t block_bytes,
		    int32_t (*block_sum)(const uint8_t *, int, const int8_t *), const struct block_q8 *x, size_t nb,
		    int nt, float *y, size_t ldy);
void gemm_q8_0x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void widen_q8_0x8_scalar(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes);
#if defined(__x86_64__)
void gemm_q8_0x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void widen_q8_0x8_avx2(const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes);
#endif

/* Row r of a group's super-block back to the file's bytes (blk holds
 * GROUP_SB_MAX) */
typedef void (*group_unpack_fn)(const uint8_t *grp, int r, uint8_t *blk);
#define GROUP_SB_MAX 210
/* A group's (or a file row's) 32-bit word at p: 4 values a byte-lane */
static inline uint32_t
group_word(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static inline void
group_word_put(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* cpu_kquants_x8.c: Q4_K (five 0) and Q5_K (five 1) rows in groups of 8;
 * bytes per super-block of a group: 8 x 144 or 8 x 176 */
#define KX8_BLOCK(five) ((five) ? 1408 : 1152)
/* as the Q4_0 ones; unpack: row r of a group's super-block back to the
 * file's bytes */
void kx8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, int five, uint8_t *dst);
void kx8_unpack(const uint8_t *grp, int r, int five, uint8_t *blk);
void kx8_dequantize_row(const uint8_t *grp, size_t nsb, int r, int five, float *out);
/* the groups' scalar reference: y[t * ldy + 8 * g + r] = the sum over
 * super-blocks i (block_bytes apart) of dot(row r of group g's block i
 * unpacked, token t's block i) */
void gemm_groups_q8k_scalar(const uint8_t *grp, int ng, size_t block_bytes, group_unpack_fn unpack,
			    float (*dot)(const void *, const struct block_q8k *, size_t), const struct block_q8k *x,
			    size_t nsb, int nt, float *y, size_t ldy);
/* Row r of a type's groups (nsb super-blocks, block_bytes each) as
 * floats, each super-block unpacked to the file's layout first */
void groups_dequantize_row(const uint8_t *grp, size_t nsb, size_t block_bytes, group_unpack_fn unpack, uint32_t type,
			   int r, float *out);
/* A group's nsb super-blocks as widen makes of its 8 file rows (8 *
 * sums sums and scales a super-block): row r's blocks at dst + r *
 * dst_row_bytes, its sums and scales at wsum + r * ld and wd + r * ld */
void groups_widen(void (*widen)(const uint8_t *, uint8_t *, size_t, int32_t *, float *), group_unpack_fn unpack,
		  const uint8_t *grp, size_t nsb, size_t block_bytes, int sums, uint8_t *dst, size_t dst_row_bytes,
		  int32_t *wsum, float *wd, size_t ld);
void gemm_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, int five, float *y,
		     size_t ldy);
#if defined(__x86_64__)
void gemm_q4_kx8_avx2(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy);
void gemm_q4_kx8_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void gemm_q5_kx8_avx2(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy);
void gemm_q6_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
			      size_t ldy);
void gemm_q4_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
			      size_t ldy);
void gemm_q5_kx8_pairs_avx512(const uint8_t *grp, int ng, const struct q8k_pair *x, size_t nsb, int nt, float *y,
			      size_t ldy);
void gemm_q5_kx8_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void gemm_q5_kx8_wide_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			     size_t ldy);
void gemm_q4_kx8_wide_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			     size_t ldy);
void kx8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, int five, uint8_t *dst);
#endif

/* cpu_q6_kx8.c: Q6_K rows in groups of 8; bytes per super-block of a
 * group (8 x 210); as the Q4_K ones */
#define Q6X8_BLOCK 1680
void q6x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
void q6x8_unpack(const uint8_t *grp, int r, uint8_t *blk);
void q6x8_dequantize_row(const uint8_t *grp, size_t nsb, int r, float *out);
void gemm_q6_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void widen_q6_kx8_scalar(const uint8_t *grp, size_t nsb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum, float *wd,
			 size_t ld);
#if defined(__x86_64__)
void widen_q6_kx8_avx2(const uint8_t *grp, size_t nsb, uint8_t *dst, size_t dst_row_bytes, int32_t *wsum, float *wd,
		       size_t ld);
void gemm_q6_kx8_avx2(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy);
void gemm_q6_kx8_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void gemm_q6_kx8_wide_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			     size_t ldy);
#endif

/* cpu_iq4_xsx8.c: IQ4_XS rows in groups of 8; bytes per super-block of a
 * group (8 x 136); as the Q6_K ones */
#define IQ4X8_BLOCK 1088
void iq4x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
void iq4x8_unpack(const uint8_t *grp, int r, uint8_t *blk);
void gemm_iq4_nlx8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			  size_t ldy);
void iq4_nlx8_unpack8(const uint8_t *grp, int r, uint8_t *blk);
void gemm_iq4_xsx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			  size_t ldy);
#if defined(__x86_64__)
void gemm_iq4_xsx8_avx2(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void gemm_iq4_xsx8_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			  size_t ldy);
void gemm_iq4_nlx8_avx2(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_iq4_nlx8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y,
			  size_t ldy);
void iq4x8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
#endif

/* cpu_legacy_x8.c: Q4_1, Q5_0 and Q5_1 rows in groups of 8; a group's
 * block is 8 of the file's (160, 176 or 192 bytes) */
#define LEGACY_X8_BLOCK(type) (8 * (size_t)legacy_layout(type).bytes)
void legacy_x8_repack(uint32_t type, const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nb,
		      uint8_t *dst);
void legacy_x8_unpack(uint32_t type, const uint8_t *blk8, int r, uint8_t *blk);
void legacy_x8_dequantize_row(uint32_t type, const uint8_t *grp, size_t nb, int r, float *out);
void widen_legacy_x8_scalar(uint32_t type, const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes,
			    int32_t *wsum, float *wd, float *wmin, size_t ld);
void gemm_q4_1x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q5_0x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q5_1x8_scalar(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
#if defined(__x86_64__)
void widen_legacy_x8_avx2(uint32_t type, const uint8_t *grp, size_t nb, uint8_t *dst, size_t dst_row_bytes,
			  int32_t *wsum, float *wd, float *wmin, size_t ld);
void gemm_q4_1x8_avx2(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q5_0x8_avx2(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q5_1x8_avx2(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q4_1x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q5_0x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
void gemm_q5_1x8_avx512(const uint8_t *grp, int ng, const struct block_q8 *x, size_t nb, int nt, float *y, size_t ldy);
#endif

/* cpu_q3_kx8.c: Q3_K rows in groups of 8; bytes per super-block of a group
 * (8 x 110); as the IQ4_XS ones */
#define Q3X8_BLOCK 880
void q3x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
void q3x8_unpack(const uint8_t *grp, int r, uint8_t *blk);
void gemm_q3_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
#if defined(__x86_64__)
void gemm_q3_kx8_avx2(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy);
void gemm_q3_kx8_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void q3x8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
#endif

/* cpu_q2_kx8.c: Q2_K rows in groups of 8; bytes per super-block of a group
 * (8 x 84); as the Q3_K ones (no widening: Q2_K has no GEMM) */
#define Q2X8_BLOCK 672
void q2x8_repack(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
void q2x8_unpack(const uint8_t *grp, int r, uint8_t *blk);
void gemm_q2_kx8_scalar(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
#if defined(__x86_64__)
void gemm_q2_kx8_avx2(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y, size_t ldy);
void gemm_q2_kx8_avx512(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,
			size_t ldy);
void q2x8_repack_avx2(const uint8_t *src, size_t row_bytes, int64_t g0, int64_t g1, size_t nsb, uint8_t *dst);
#endif

/* cpu_widen.c */
void widen_q4_0_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int16_t *sums);
void widen_q4_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin);
void widen_q5_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin);
void widen_q6_k_scalar(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
#if defined(__x86_64__)
void widen_q5_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin);
void widen_q4_0_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int16_t *sums);
void widen_q4_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd, float *wmin);
void widen_q6_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
void widen_q3_k_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
void widen_iq4_xs_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
float dot_q4_1_avx2(const void *w, const struct block_q8 *x, size_t nb);
float dot_q5_0_avx2(const void *w, const struct block_q8 *x, size_t nb);
float dot_q5_1_avx2(const void *w, const struct block_q8 *x, size_t nb);
float dot_iq4_nl_avx2(const void *w, const struct block_q8 *x, size_t nb);
void widen_iq4_nl_avx2(const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd);
void widen_legacy_avx2(uint32_t type, const uint8_t *src, uint8_t *dst, size_t nb, int32_t *wsum, float *wd,
		       float *wmin);
/* cpu_gemm_bf16.c (callable only where CPUID reports AVX512_BF16) */
void pack_bf16_tile_avx512(const float *x, size_t ldx, int nt, size_t cols, uint32_t *tile);
void gemm_bf16_avx512(const uint16_t *w, size_t ldw, int nrows, const uint32_t *x, size_t group_stride, int ngroups,
		      size_t cols, float *y);
void f32_to_bf16_avx512(const float *x, uint16_t *out, size_t n);
float dot_bf16_bf16_avx512(const uint16_t *w, const uint16_t *x, size_t n);
void dot4_bf16_bf16_avx512(const uint16_t *w, size_t ldw, const uint16_t *x, size_t n, float *y);
/* cpu_probe.c (callable only where CPUID reports AVX-512 VNNI, and BF16
 * for the first) */
double bf16_dot_speedup_avx512(void);
double vnni512_speedup_avx512(void);
/* cpu_amx.c (callable only where cpu_amx_usable()) */
void amx_pack_lo(const float *x, size_t ldx, int nt, size_t cols, uint32_t *lo, uint32_t *lo2);
void amx_gemm(int f16, const uint16_t *w, size_t ldw, int nrows, const uint32_t *const x[3], int ntokens, size_t cols,
	      float *y, size_t ldy, void *scratch);
void amx_q8_stage_x8(const uint8_t *g0, const uint8_t *g1, size_t nb, struct amx_q8_wblock *s);
void amx_q8_stage_q4x8(const uint8_t *g0, const uint8_t *g1, size_t nb, struct amx_q8_wblock *s);
void amx_q8_stage_kx8(const uint8_t *g0, const uint8_t *g1, size_t nsb, int five, struct amx_q8_wblock *s);
void amx_q8_stage_rows(const uint8_t *rows, size_t row_bytes, int nr, size_t nb, const float *wd, const float *wmin,
		       struct amx_q8_wblock *s);
void amx_q6_stage_rows(const uint8_t *rows, size_t row_bytes, int nr, size_t nb, const float *wd,
		       struct amx_q8_wblock *s);
void gemm_q8_amx(const struct amx_q8_wblock *w, size_t nb, int has_min, const struct amx_q8_xblock *x, int ntokens,
		 float *y, size_t ldy, int nr);
void gemm_q6_amx(const struct amx_q8_wblock *w, size_t nb, const struct amx_q8_xblock *x, int ntokens, float *y,
		 size_t ldy, int nr);
/* cpu_attention.c */
void att_scores_tile_avx512(const uint16_t *kt, const float *qh, int nr, int hd, float scale, float *s);
void att_pv_f16_avx512(const uint16_t *const *vr, int nc, const float *s, const float *c, int nh, int hd, float *out);
void pack_f32_panel_avx512(const float *w, size_t ldw, int nr, size_t kc, float *a);
void pack_f16_panel_avx512(const uint16_t *w, size_t ldw, int nr, size_t kc, float *a);
void pack_bf16_panel_avx512(const uint16_t *w, size_t ldw, int nr, size_t kc, float *a);
void gemm_f32_packed_avx512(const float *a, size_t kc, const float *xp, size_t ldb, int nt, float *y, size_t ldy,
			    int add);
void pack_f32_tokens_avx512(const float *x, size_t ldx, int nt, size_t kc, float *xp);
void att_softmax_avx512(float *s, int nr, const int *seen, float *m, float *l, float *c);
/* cpu_gemm_q6_k.c */
void gemm_q6_k_avx512(const uint8_t *w, size_t row_bytes, int nrows, const int32_t *wsum, const float *wd,
		      const struct q8_tile *x, size_t group_stride, int ngroups, size_t nb, float *y);
#endif

/* One KV head's cached keys and values for one sequence: position p is
 * row blocks[p >> block_shift] * 2^block_shift + p % 2^block_shift
 * (block_shift >= 4: a block holds whole tiles).  V: row r's head_dim
 * fp16 values at v + r * stride.  K in tiles of ATT_CHUNK rows stored
 * value by value: value d of row r at k[(r - r % ATT_CHUNK) * stride +
 * d * ATT_CHUNK + r % ATT_CHUNK], so that a chunk's scores take one load
 * of ATT_CHUNK positions a value and no sums across vector lanes (with
 * stride = head_dim a tile is ATT_CHUNK * head_dim values in a row; with
 * the rows of several heads side by side, stride = heads * head_dim, head
 * h's tile starts h * ATT_CHUNK * head_dim values into the rows' span). */
struct kv_view {
	const uint16_t *k, *v;
	size_t stride;
	const int32_t *blocks;
	int block_shift;
};

#define ATT_CHUNK 16    /* cached positions a step of cpu_attend_f16 */
#define ATT_HEADS_MAX 8 /* query heads of one token one call serves */
#define ATT_ROWS_MAX 32 /* query rows (tokens x heads) one call serves */
#define ATT_HEAD_DIM_MAX 256

/* Attention for nt consecutive tokens of one sequence and nh query heads
 * that share the KV head kv: token t sees cached positions [0, len + t)
 * and its heads' queries are nh x hd floats at q + t * stride;
 * out + t * stride receives softmax(q . K / sqrt(hd)) . V for each head.
 * Every cached row a chunk brings in serves all nt x nh query rows, so a
 * prompt's tokens share the reads and conversions of the cache the way
 * one token's heads do.  nh <= ATT_HEADS_MAX, nt * nh <= ATT_ROWS_MAX,
 * hd <= ATT_HEAD_DIM_MAX, len >= 1. */
void cpu_attend_f16(const struct cpu_kernels *k, const struct kv_view *kv, int len, int nt, const float *q,
		    size_t stride, int nh, int hd, float *out);

/* The best kernels this CPU runs (never NULL). */
const struct cpu_kernels *cpu_kernels_get(void);

/* 1: decode's kernels prefetch the weights they stream (STREAM_PREFETCH,
 * cpu_x86.h); 0: they leave it to the hardware.  -1 until the first
 * cpu_kernels_get(), which sets it: on for Intel CPUs, off for others
 * (measured on one of each, docs/performance.md), PRIVAI_PREFETCH=0 or 1
 * deciding instead.  Only speed depends on it, never a result. */
extern int cpu_stream_prefetch;
/* How far ahead that prefetch asks for a line, in bytes: into L2 and into
 * L1 (ONE_TOKEN_AHEAD and ONE_TOKEN_NEAR, cpu_x86.h); 0 where the
 * kernels never prefetch (no x86 kernels in the build). */
extern const int cpu_prefetch_l2_ahead, cpu_prefetch_l1_ahead;
/* The prefetches every CPU measured gained from, set as PRIVAI_PREFETCH
 * says and else on: the float decode dots' next four rows (ROWS_PREFETCH;
 * a Zen 4's F16 generation read 63-100 % of the memory bound with it,
 * 48-87 % without) and decode batches' weight streams (STREAM_PREFETCH_NT,
 * cpu_x86.h). */
extern int cpu_wide_prefetch;
/* The AVX-512 four-row float decode kernels (dot4_f16, dot4_bf16_bf16)
 * take their rows one at a time where cpu_stream_prefetch is off and a
 * token takes at most HALF_ROW_TOKEN_MAX bytes (cpu_x86.h says why). */
#define HALF_ROW_TOKEN_MAX 16384
/* What the pair kernels were decided on: a 512-bit vpdpbusd's products a
 * second over a 256-bit one's (vnni512_speedup_avx512), measured once by
 * cpu_kernels_get; 0 where there are no 512-bit vectors.  `privai-engine
 * features` shows it. */
extern double cpu_pairs_speedup;
/* The portable kernels (for tests comparing SIMD with scalar). */
const struct cpu_kernels *cpu_kernels_scalar(void);
/* The AVX2 kernels; only valid where cpu_kernels_get() picked AVX2 or better. */
const struct cpu_kernels *cpu_kernels_avx2(void);

#endif
