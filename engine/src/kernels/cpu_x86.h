/*
 * Shared pieces of the x86 kernel files: per-function target attributes (so
 * one binary runs everywhere and CPUID picks) and small inline helpers.
 */
#ifndef PRIVAI_CPU_X86_H
#define PRIVAI_CPU_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 in two parts
 * (k * EXP_LN2_HI is exact for the k a float exp has) */
#define EXP_LOG2E 1.44269504f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f

/* acc + sums of 4 products of unsigned bytes of a by signed bytes of b
 * per 32-bit lane: vpdpbusd with VNNI, two steps without (the byte pairs'
 * sums must fit int16) */
#define U8I8_ACC_AVX2(acc, a, b)                                                                                       \
	_mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)))
#define U8I8_ACC_VNNI(acc, a, b) _mm256_dpbusd_epi32(acc, a, b)
/* IQ4_NL's and IQ4_XS's levels (cpu_iq4_xsx8.c, cpu_q4_0x8.c): the
 * products of a chunk of levels (signed) with 4 broadcast activation
 * bytes a lane.  vpdpbusd takes the levels + 128 as unsigned bytes (the
 * lookup table holds them so), and the sum starts 128 x the activations'
 * sum lower (IQ4X8_OFFSET); vpmaddubsw would saturate 2 x 241 x 127 in
 * int16, so AVX2 multiplies |level| by the activation with the level's
 * sign (levels are never 0), at most 2 x 127 x 127. */
#define IQ4X8_ACC_VNNI(acc, v, x) _mm256_dpbusd_epi32(acc, v, x)
#define IQ4X8_ACC_AVX2(acc, v, x) U8I8_ACC_AVX2(acc, _mm256_abs_epi8(v), _mm256_sign_epi8(x, v))
/* acc + the two int16 products of each 32-bit lane (vpdpwssd with VNNI,
 * vpmaddwd and an add without) */
#define I16_ACC_AVX2(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define I16_ACC_VNNI(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)

/* The 4 bytes at p in every 32-bit lane, loaded by the broadcast itself.
 * Written as set1 of an int the compilers go through a general register,
 * and that broadcast takes a vector port as well: the int8 GEMMs ran 1.9x
 * slower a token that way (docs/performance.md). */
#define BCAST4_256(p) _mm256_broadcastd_epi32(_mm_loadu_si32(p))
#define BCAST4_512(p) _mm512_broadcastd_epi32(_mm_loadu_si32(p))
/* the 8 bytes at p in every 64-bit lane, a load alone (vpbroadcastq) */
#define BCAST8_512(p) _mm512_broadcastq_epi64(_mm_loadu_si64(p))

/* Decode reads each weight once, in one stream a thread: ask for the
 * bytes a block spans ahead of it, a line per 64 bytes (ONE_TOKEN_AHEAD
 * for one or two tokens, STREAM_AHEAD for a batch).
 * Where cpu_stream_prefetch says so (cpu_dot.h): on an Emerald Rapids
 * Xeon, whose prefetcher stops at every 4 KB page, generation went from
 * 52-65 % of the memory bound to 78-98 % with it; on Zen 4, with 2 KB,
 * it cost 5-15 % when the bus was fast (docs/performance.md). */
#ifndef STREAM_AHEAD
#define STREAM_AHEAD 4096
#endif
#define STREAM_PREFETCH(p, bytes) STREAM_PREFETCH_NT(p, bytes, 1)
/* A kernel's stream with nt tokens a pass (a constant where inlined): a
 * decode batch of BATCH_PREFETCH_TOKENS and more spends so long on each
 * block that the hardware prefetcher no longer keeps ahead of it.  On a
 * Zen 4, one thread over 285 MB of Q8_0 groups, cycles a block without
 * and with: 1 token 36 / 39, 2 39 / 40, 3 45 / 39, 4 57-63 / 49-51, 8
 * 129 / 84 (55 from L2).  So it asks where cpu_wide_prefetch says so as
 * well as where cpu_stream_prefetch does.  A batch's lines go to L2, not
 * L1: L1 holds the batch's activations (8 tokens of 2048 values are 17 KB
 * of Q8_0 blocks, of 8192 70 KB), which lines brought in ahead of use
 * pushed out; 8 tokens of Q8_0 groups took 63-69 cycles a block against
 * 85-115 (the same Zen 4, three rounds), 4 tokens 47-55 against 49-60. */
#define BATCH_PREFETCH_TOKENS 3
/* One or two tokens' stream, where cpu_stream_prefetch asks for it (the
 * Xeons): each line asked for twice, ONE_TOKEN_AHEAD ahead into L2 and
 * ONE_TOKEN_NEAR ahead into L1.  On an AMX Xeon, one thread over 256 MB
 * of 8-row groups, GB/s with the L2 request alone, 2 KB ahead, against 4
 * KB ahead into L1: Q4_K 14.4 against 8.6, Q6_K 13.9 against 9.2, Q5_K
 * 12.7 against 9.0, Q8_0 16.0 against 13.8, Q4_0 14.0 against 13.7; Q4_K
 * 2 KB ahead into L1 13.2-13.9, 4 KB into L2 12.4, 1 KB 13.4-14.3.  The
 * line brought on from L2 to L1 as well takes back what the kernels'
 * arithmetic still cost: two threads of a scratch loop over 512 MB, each
 * line loaded and put through four vpdpbusd, read 29.6 GB/s with the L2
 * request alone (3 KB ahead), 34.6 with both, as fast as the loads alone
 * with both (34.7; 33.5 with the L2 request alone, 28.8 with none).
 * Decode on 2 threads, tok/s, two alternating rounds, the L2 request
 * alone 2 KB ahead against both, 3 KB and 1 KB: Q4_K_M 39.0-41.4 against
 * 43.0-45.1, Q6_K 29.5-30.1 against 33.1-33.4, Q5_K_M 34.2-34.3 against
 * 37.4-37.7, Q8_0 26.5-27.5 against 28.0-28.4, Q4_0 41.2-45.9 against
 * 50.3-51.7 (docs/performance.md).  1 KB into L1 read the same as 768
 * bytes and 1.5 KB, and better than 512 and 256; 3 KB into L2 a little
 * better than 2 KB and 4 KB, with the L1 request. */
#ifndef ONE_TOKEN_AHEAD
#define ONE_TOKEN_AHEAD 3072
#endif
#ifndef ONE_TOKEN_NEAR
#define ONE_TOKEN_NEAR 1024
#endif
#define STREAM_PREFETCH_WANTED(nt) (cpu_stream_prefetch > 0 || ((nt) >= BATCH_PREFETCH_TOKENS && cpu_wide_prefetch > 0))
/* The lines of a block of `bytes`, for nt tokens: near's ONE_TOKEN_NEAR
 * ahead into L1 (one or two tokens) and far's ahead into L2; near and
 * far are the same block but where a kernel's far stream skips ahead
 * (gemm_q4_0x8_pair_avx512). */
#define STREAM_PREFETCH_NEAR_FAR(near, far, bytes, nt)                                                                 \
	do {                                                                                                           \
		if (STREAM_PREFETCH_WANTED(nt))                                                                        \
			for (int pf_ = 0; pf_ < (bytes); pf_ += 64) {                                                  \
				_mm_prefetch((const char *)(far) +                                                     \
						     ((nt) >= BATCH_PREFETCH_TOKENS ? STREAM_AHEAD                     \
										    : ONE_TOKEN_AHEAD) +               \
						     pf_,                                                              \
					     _MM_HINT_T1);                                                             \
				if ((nt) < BATCH_PREFETCH_TOKENS)                                                      \
					_mm_prefetch((const char *)(near) + ONE_TOKEN_NEAR + pf_, _MM_HINT_T0);        \
			}                                                                                              \
	} while (0)
#define STREAM_PREFETCH_NT(p, bytes, nt) STREAM_PREFETCH_NEAR_FAR(p, p, bytes, nt)
/* Part k of n of a one-token kernel's block of `bytes` at p: the lines
 * of that part, ONE_TOKEN_AHEAD ahead into L2 and ONE_TOKEN_NEAR ahead
 * into L1, asked for as the kernel reaches it.  The K-quants' blocks are
 * 18-26 lines: all of them at a block's start read about 6 % less on the
 * Xeon above (Q4_K 13.2-13.6 GB/s against 14.1-14.5). */
#define PART_PREFETCH(p, bytes, k, n)                                                                                  \
	do {                                                                                                           \
		for (int pf_ = (k) * (bytes) / (n) & ~63; pf_ < ((k) + 1) * (bytes) / (n); pf_ += 64) {                \
			_mm_prefetch((const char *)(p) + ONE_TOKEN_AHEAD + pf_, _MM_HINT_T1);                          \
			_mm_prefetch((const char *)(p) + ONE_TOKEN_NEAR + pf_, _MM_HINT_T0);                           \
		}                                                                                                      \
	} while (0)
/* every line of a block STREAM_AHEAD ahead, whatever cpu_stream_prefetch says */
#define DENSE_PREFETCH(p, bytes)                                                                                       \
	do {                                                                                                           \
		for (int pf_ = 0; pf_ < (bytes); pf_ += 64)                                                            \
			_mm_prefetch((const char *)(p) + STREAM_AHEAD + pf_, _MM_HINT_T0);                             \
	} while (0)
/* The 8-row groups of Q4_0, IQ4_NL and Q8_0 (block b of `bytes`): a
 * block's lines where STREAM_PREFETCH_NT asks; elsewhere one line
 * SPARSE_AHEAD ahead every SPARSE_BLOCKS blocks, some SPARSE_PERIOD bytes
 * of the stream.  On a Zen 5, one token on 2 threads, four alternating
 * rounds: Q4_0 50-90 tok/s without it, 64-109 with a line 8 KB ahead
 * every 16 blocks (2304 bytes), Q8_0 29-44 against 49-62.  A line every
 * 8 or 4 blocks gained less or nothing; one at the first block past
 * every 2048-byte boundary, at the same place in every page, gained
 * less than every 2304 bytes; every line lost a quarter.  Q4_1's and
 * Q5_0's groups, with more arithmetic a byte, lost 8-13 % to it when the
 * bus was fast and keep STREAM_PREFETCH_NT (docs/performance.md).  The
 * hardware prefetcher keeps the stream; a line well ahead now and then
 * keeps it going. */
#define SPARSE_AHEAD 8192
#define SPARSE_PERIOD 2304
#define SPARSE_BLOCKS(bytes) ((bytes) >= SPARSE_PERIOD ? 1 : SPARSE_PERIOD / (bytes))
/* the sparse line alone, for block b at p */
#define SPARSE_PREFETCH(p, b, bytes)                                                                                   \
	do {                                                                                                           \
		if ((b) % SPARSE_BLOCKS(bytes) == 0)                                                                   \
			_mm_prefetch((const char *)(p) + SPARSE_AHEAD, _MM_HINT_T0);                                   \
	} while (0)
#define X8_STREAM_PREFETCH(p, b, bytes, nt)                                                                            \
	do {                                                                                                           \
		if (STREAM_PREFETCH_WANTED(nt))                                                                        \
			STREAM_PREFETCH_NT(p, bytes, nt);                                                              \
		else                                                                                                   \
			SPARSE_PREFETCH(p, b, bytes);                                                                  \
	} while (0)
/* The K-quants' 8-row groups (cpu_kquants_x8.c, cpu_q6_kx8.c): a block's
 * lines where STREAM_PREFETCH_NT asks; elsewhere one line 4 KB ahead,
 * which a Zen 4 measured faster on Q4_K groups both than none (69.0
 * against 63.0 tok/s) and than every line. */
#define GROUP_PREFETCH(p, bytes, nt)                                                                                   \
	do {                                                                                                           \
		if (STREAM_PREFETCH_WANTED(nt))                                                                        \
			STREAM_PREFETCH_NT(p, bytes, nt);                                                              \
		else                                                                                                   \
			_mm_prefetch((const char *)(p) + 4096, _MM_HINT_T0);                                           \
	} while (0)
/* A group kernel with one token on its 512-bit one-token kernel GEMV
 * (groups of BLOCK bytes a super-block) and every other count of tokens
 * on GEMM: set_pair_kernels (cpu_dot.c) puts it in the table where it
 * puts the pairs. */
#define DEFINE_GEMM_X8_WIDE(NAME, BLOCK, GEMM, GEMV)                                                                   \
	AVX512 void NAME(const uint8_t *grp, int ng, const struct block_q8k *x, size_t nsb, int nt, float *y,          \
			 size_t ldy)                                                                                   \
	{                                                                                                              \
		if (nt != 1) {                                                                                         \
			GEMM(grp, ng, x, nsb, nt, y, ldy);                                                             \
			return;                                                                                        \
		}                                                                                                      \
		for (int g = 0; g < ng; g++)                                                                           \
			GEMV(grp + (size_t)g * nsb * (BLOCK), x, nsb, y + 8 * (size_t)g);                              \
	}
/* Float decode (F16, BF16) a row at a time rather than four rows a
 * pass where no dense prefetch is on and the token takes at most
 * HALF_ROW_TOKEN_MAX bytes, half of a 32 KB L1, so that it stays there
 * from row to row: the rows follow each other in memory, one stream
 * that the sparse line keeps going (SPARSE_PREFETCH), where four rows a
 * pass are four streams that each cross a 4 KB page every row of 2048
 * values.  On a Zen 5, 2 threads, three alternating rounds: F16
 * generation 22.8-23.3 tok/s four rows a pass, 27.7-28.7 this way;
 * BF16 24.0-24.5 against 28.2-28.3 (docs/performance.md).  ffn_down's
 * float token (32 KB) gained nothing from it and keeps four rows a pass;
 * its bfloat16 token (16 KB) goes a row at a time.  The AVX2 kernels
 * (PRIVAI_SIMD=avx2) gained nothing from it: 20.2-21.3 tok/s either way. */
#define HALF_ROWS_ONE_AT_A_TIME(token_bytes) (cpu_stream_prefetch == 0 && (token_bytes) <= HALF_ROW_TOKEN_MAX)
/* The next group of four rows' line at p, into L2 (dot4_f16 says why),
 * where cpu_wide_prefetch says so. */
#define ROWS_PREFETCH(p)                                                                                               \
	do {                                                                                                           \
		if (cpu_wide_prefetch > 0)                                                                             \
			_mm_prefetch((const char *)(p), _MM_HINT_T1);                                                  \
	} while (0)

/*
 * The 8-row groups' multi-token kernels (cpu_q8_0x8.c, cpu_q4_0x8.c).  A
 * group's block is 8 chunks c[s] of unsigned bytes, bytes 4s..4s+3 of
 * row r in lane r, and the 8 rows' scales dw: for each of nt tokens
 * (their blocks nb apart from x + b) acc[t] += dw * d_x * (sum(c * x) -
 * bias * sum(x)).  The integer sum is exact, in four chains (one would
 * wait on vpdpbusd's latency when a single token runs); U8I8_ACC is
 * vpdpbusd or its AVX2 equivalent.
 */
#define X8_BLOCK_TOKENS(U8I8_ACC, c, dw, x, nb, b, nt, bias, acc)                                                      \
	_Pragma("GCC unroll 8") for (int t_ = 0; t_ < (nt); t_++)                                                      \
	{                                                                                                              \
		const struct block_q8 *xb_ = (x) + (size_t)t_ * (nb) + (b);                                            \
		__m256i p0_ = _mm256_set1_epi32(-(bias)*xb_->sum), p1_ = _mm256_setzero_si256(), p2_ = p1_, p3_ = p1_; \
		p0_ = U8I8_ACC(p0_, c[0], BCAST4_256(xb_->q));                                                         \
		p1_ = U8I8_ACC(p1_, c[1], BCAST4_256(xb_->q + 4));                                                     \
		p2_ = U8I8_ACC(p2_, c[2], BCAST4_256(xb_->q + 8));                                                     \
		p3_ = U8I8_ACC(p3_, c[3], BCAST4_256(xb_->q + 12));                                                    \
		p0_ = U8I8_ACC(p0_, c[4], BCAST4_256(xb_->q + 16));                                                    \
		p1_ = U8I8_ACC(p1_, c[5], BCAST4_256(xb_->q + 20));                                                    \
		p2_ = U8I8_ACC(p2_, c[6], BCAST4_256(xb_->q + 24));                                                    \
		p3_ = U8I8_ACC(p3_, c[7], BCAST4_256(xb_->q + 28));                                                    \
		__m256i p_ = _mm256_add_epi32(_mm256_add_epi32(p0_, p1_), _mm256_add_epi32(p2_, p3_));                 \
		acc[t_] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb_->d)), _mm256_cvtepi32_ps(p_), acc[t_]); \
	}

/*
 * The same two tokens a 512-bit vector (struct q8_pair; np pairs, nb
 * blocks apart from x + b): c[s] holds chunk s with row r's 4 bytes in
 * lanes 2r and 2r + 1 (X8_PAIR_LANES), dw row r's scale in both, and
 * acc[p] gathers row r of token 2p in lane 2r and of token 2p + 1 in lane
 * 2r + 1; bias is 1 << bias_shift, none where bias_shift is negative
 * (a constant, so the test folds away).  The integer sums are exact and the
 * float steps X8_BLOCK_TOKENS's, so each token's sums are its bits.
 */
#define X8_PAIR_LANES _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0)
#define X8_PAIR_BLOCK(c, dw, x, nb, b, np, bias_shift, acc)                                                            \
	_Pragma("GCC unroll 4") for (int p_ = 0; p_ < (np); p_++)                                                      \
	{                                                                                                              \
		const struct q8_pair *xb_ = (x) + (size_t)p_ * (nb) + (b);                                             \
		__m512i p0_ = (bias_shift) < 0                                                                         \
				      ? _mm512_setzero_si512()                                                         \
				      : _mm512_sub_epi32(_mm512_setzero_si512(),                                       \
							 _mm512_slli_epi32(BCAST8_512(xb_->sum),                       \
									   (bias_shift) < 0 ? 0 : (bias_shift)));      \
		__m512i p1_ = _mm512_setzero_si512(), p2_ = p1_, p3_ = p1_;                                            \
		p0_ = _mm512_dpbusd_epi32(p0_, c[0], BCAST8_512(xb_->q));                                              \
		p1_ = _mm512_dpbusd_epi32(p1_, c[1], BCAST8_512(xb_->q + 8));                                          \
		p2_ = _mm512_dpbusd_epi32(p2_, c[2], BCAST8_512(xb_->q + 16));                                         \
		p3_ = _mm512_dpbusd_epi32(p3_, c[3], BCAST8_512(xb_->q + 24));                                         \
		p0_ = _mm512_dpbusd_epi32(p0_, c[4], BCAST8_512(xb_->q + 32));                                         \
		p1_ = _mm512_dpbusd_epi32(p1_, c[5], BCAST8_512(xb_->q + 40));                                         \
		p2_ = _mm512_dpbusd_epi32(p2_, c[6], BCAST8_512(xb_->q + 48));                                         \
		p3_ = _mm512_dpbusd_epi32(p3_, c[7], BCAST8_512(xb_->q + 56));                                         \
		__m512i s_ = _mm512_add_epi32(_mm512_add_epi32(p0_, p1_), _mm512_add_epi32(p2_, p3_));                 \
		__m512 dx_ = _mm512_castsi512_ps(BCAST8_512(xb_->d));                                                  \
		acc[p_] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx_), _mm512_cvtepi32_ps(s_), acc[p_]);                    \
	}
/* Two 16-value sub-blocks of a pair of tokens (xq: its q at the first's
 * value 0, struct q8k_pair) against u[0..3] (the first's) and u[4..7],
 * each 4 values of a row a lane pair, as X8_PAIR_BLOCK: a and b gather the
 * two sub-blocks' sums. */
#define X8_PAIR_SUBBLOCKS(a, b, u, xq)                                                                                 \
	do {                                                                                                           \
		a = _mm512_dpbusd_epi32(a, u[0], BCAST8_512(xq));                                                      \
		b = _mm512_dpbusd_epi32(b, u[4], BCAST8_512((xq) + 32));                                               \
		a = _mm512_dpbusd_epi32(a, u[1], BCAST8_512((xq) + 8));                                                \
		b = _mm512_dpbusd_epi32(b, u[5], BCAST8_512((xq) + 40));                                               \
		a = _mm512_dpbusd_epi32(a, u[2], BCAST8_512((xq) + 16));                                               \
		b = _mm512_dpbusd_epi32(b, u[6], BCAST8_512((xq) + 48));                                               \
		a = _mm512_dpbusd_epi32(a, u[3], BCAST8_512((xq) + 24));                                               \
		b = _mm512_dpbusd_epi32(b, u[7], BCAST8_512((xq) + 56));                                               \
	} while (0)
/* 32 bytes at p, row r's 4 in lanes 2r and 2r + 1 */
#define X8_LOAD_PAIRS(p)                                                                                               \
	_mm512_permutexvar_epi32(X8_PAIR_LANES, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p))))
/* 8 fp16 at p, row r's in lanes 2r and 2r + 1 */
#define X8_HALVES_PAIRS(p)                                                                                             \
	_mm512_permutexvar_ps(X8_PAIR_LANES,                                                                           \
			      _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))))

/* acc[p] += dw x (the pair's d_x) x isum[p], super-block i of np pairs
 * of Q8_K activations nsb apart from x: the one-token kernels' last step */
#define X8K_PAIRS_SCALE(acc, isum, dw, x, nsb, i, np)                                                                  \
	_Pragma("GCC unroll 4") for (int p_ = 0; p_ < (np); p_++)                                                      \
	{                                                                                                              \
		__m512 xd_ = _mm512_castsi512_ps(BCAST8_512((x)[(size_t)p_ * (nsb) + (i)].d));                         \
		acc[p_] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd_), _mm512_cvtepi32_ps(isum[p_]), acc[p_]);              \
	}

/* acc[p] of X8_PAIR_BLOCK to rows y of tokens 2p and 2p + 1 (< nt) */
#define X8_PAIRS_STORE(acc, np, nt, y, ldy)                                                                            \
	do {                                                                                                           \
		const __m512i apart_ = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);         \
		_Pragma("GCC unroll 4") for (int p_ = 0; p_ < (np); p_++)                                              \
		{                                                                                                      \
			__m512 a_ = _mm512_permutexvar_ps(apart_, acc[p_]);                                            \
			_mm256_storeu_ps((y) + (size_t)(2 * p_) * (ldy), _mm512_castps512_ps256(a_));                  \
			if (2 * p_ + 1 < (nt))                                                                         \
				_mm256_storeu_ps((y) + (size_t)(2 * p_ + 1) * (ldy),                                   \
						 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a_), 1)));   \
		}                                                                                                      \
	} while (0)

/* ng consecutive groups (bytes_per_group apart) through GROUP_NT(grp, x,
 * nb, NT, y, ldy), the token count a constant in each loop so the sums
 * stay in registers; the groups are one stream, which the hardware
 * prefetcher follows from one into the next. */
#define X8_GROUPS_BY_NT(GROUP_NT, grp, ng, bytes_per_group, x, nb, nt, y, ldy)                                         \
	do {                                                                                                           \
		switch (nt) {                                                                                          \
		case 1:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 1, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		case 2:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 2, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		case 3:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 3, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		case 4:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 4, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		case 5:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 5, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		case 6:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 6, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		case 7:                                                                                                \
			X8_GROUPS_NT_(GROUP_NT, 7, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		default:                                                                                               \
			X8_GROUPS_NT_(GROUP_NT, 8, grp, ng, bytes_per_group, x, nb, y, ldy);                           \
			break;                                                                                         \
		}                                                                                                      \
	} while (0)
#define X8_GROUPS_NT_(GROUP_NT, NT, grp, ng, bytes_per_group, x, nb, y, ldy)                                           \
	for (int gi_ = 0; gi_ < (ng); gi_++)                                                                           \
	GROUP_NT((grp) + (size_t)gi_ * (bytes_per_group), x, nb, NT, (y) + 8 * (size_t)gi_, ldy)

/* One fp16 scale with the F16C instruction (the portable converter is a
 * branchy function: calling it per 32-weight block costs more than the dot). */
AVX2 static inline float
f16c_load(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

AVX2 static inline float
hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* sums of the two 16-byte halves of v, as unsigned bytes */
AVX2 static inline void
sum_u8_halves(__m256i v, int32_t *lo, int32_t *hi)
{
	__m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
	*lo = (int32_t)(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1));
	*hi = (int32_t)(_mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3));
}

/* Transpose 8 x 8 32-bit words: in[k] lane r -> out[r] lane k. */
AVX2 static inline void
transpose8x8(__m256i *v)
{
	__m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
	__m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
	__m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
	__m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
	__m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
	__m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
	__m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
	__m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
	v[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
	v[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
	v[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
	v[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
	v[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
	v[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
	v[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
	v[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* a[m] = column m of the 16 x 16 floats a[0..15]: 64 shuffles.  Three
 * rounds interleave pairs of rows 1, 2 and then 4 values at a time, a
 * fourth moves the 128-bit quarters into place. */
AVX512 static inline void
transpose16(__m512 a[16])
{
	__m512 b[16], c[16];

#pragma GCC unroll 8
	for (int k = 0; k < 8; k++) {
		b[2 * k] = _mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]);
		b[2 * k + 1] = _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]);
	}
	/* c[4k + m], quarter q: column 4q + m of rows 4k .. 4k + 3 */
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m512d lo = _mm512_castps_pd(b[4 * k + h]), hi = _mm512_castps_pd(b[4 * k + 2 + h]);
			c[4 * k + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
			c[4 * k + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
		}
#pragma GCC unroll 4
	for (int m = 0; m < 4; m++) {
		__m512 d0 = _mm512_shuffle_f32x4(c[m], c[4 + m], 0x44), d1 = _mm512_shuffle_f32x4(c[m], c[4 + m], 0xee);
		__m512 d2 = _mm512_shuffle_f32x4(c[8 + m], c[12 + m], 0x44);
		__m512 d3 = _mm512_shuffle_f32x4(c[8 + m], c[12 + m], 0xee);
		a[m] = _mm512_shuffle_f32x4(d0, d2, 0x88);
		a[4 + m] = _mm512_shuffle_f32x4(d0, d2, 0xdd);
		a[8 + m] = _mm512_shuffle_f32x4(d1, d3, 0x88);
		a[12 + m] = _mm512_shuffle_f32x4(d1, d3, 0xdd);
	}
}

/* Sum of products of 32 unsigned (<= 63) by 32 signed bytes, in 8 int32 lanes. */
AVX2 static inline __m256i
mul_sum_u8i8_avx2(__m256i w, __m256i x)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

/* 16 bytes of nibbles as 32 values: the low nibbles first (the 32-value
 * blocks' order: byte j holds values j and j + 16) */
AVX2 static inline __m256i
unpack_nibbles(const uint8_t *q)
{
	__m128i b = _mm_loadu_si128((const __m128i *)q);
	__m128i lo = _mm_and_si128(b, _mm_set1_epi8(0xf));
	__m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0xf));
	return _mm256_set_m128i(hi, lo);
}

/* int32 lanes += pairs of int16 products: one vpdpwssd with VNNI */
#define MADD16_AVX2(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define MADD16_VNNI(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)

/* vpshufb indices: int16 lanes 0-7 (a 32-value block's first 16) take
 * scale 2k, lanes 8-15 scale 2k+1, of a half super-block's eight in
 * each 128-bit lane; pick[k] serves block k of the half (Q6_K, and Q2_K and
 * Q3_K, whose 16-value sub-blocks are in the same order). */
#define Q6_SCALE_PICK                                                                                                  \
	{                                                                                                              \
		_mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,   \
				 2, 3, 2, 3),                                                                          \
			_mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, \
					 6, 7, 6, 7, 6, 7),                                                            \
			_mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10,   \
					 11, 10, 11, 10, 11, 10, 11, 10, 11),                                          \
			_mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14,   \
					 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15),                          \
	}

#endif
