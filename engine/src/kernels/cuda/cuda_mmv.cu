/*
 * Decode's matrix-vector products, and prefill's weight tiles in half
 * precision, read straight from the weights' GGUF blocks.
 *
 * A lane decodes one 32-weight chunk at a time (kernels/dequant_chunk.h),
 * but a lane reading its own chunk from global memory reads bytes 34 apart
 * from its neighbours (Q8_0): every load of a warp touched some 34 sectors,
 * and the first kernel read 80-190 GB/s of an H200's 4.8 TB/s.  So a warp
 * copies its row MMV_SEG chunks at a time into shared memory with 16-byte
 * loads, and the block copies the segment's activations once for all its
 * rows (MMV_XPITCH floats a chunk, so that lane l reading chunk l's j-th
 * value hits bank l + j); each lane then decodes its chunk from there.  A
 * lane takes the same chunks in the same order whatever the kernel, so
 * the sums are the same.
 */
#include <stdio.h>

#include "cuda_kernels.h"
#include "kernels/dequant_chunk.h"

#define MMV_WARPS 8   /* rows (one a warp) a block */
#define MMV_SEG 32    /* chunks of a row a warp stages at a time: one a lane */
#define MMV_XPITCH 36 /* the most floats a chunk of activations takes in shared memory (k_mmv's XP) */

/* A warp's staging buffer: a segment's bytes, plus the 16-byte words
 * either side that k_mmv's aligned loads bring along. */
__host__ __device__ static inline size_t
mmv_stride(uint32_t type)
{
	return (((size_t)dq_chunks_bytes(type, MMV_SEG) + 15) & ~(size_t)15) + 16;
}

__host__ __device__ static inline size_t
mmv_smem(int nt, uint32_t type)
{
	return (size_t)nt * MMV_SEG * MMV_XPITCH * sizeof(float) + MMV_WARPS * mmv_stride(type);
}

/* n bytes from src to the 16-byte aligned dst, by the warp's 32 lanes:
 * in 16-byte words where src is aligned so, else 4-byte, else bytes. */
__device__ static void
stage_bytes(const uint8_t *src, int n, uint8_t *dst, int lane)
{
	int done = 0;

	if (((uintptr_t)src & 15) == 0) {
		for (int k = lane; k < n / 16; k += 32)
			((uint4 *)dst)[k] = ((const uint4 *)src)[k];
		done = n / 16 * 16;
	} else if (((uintptr_t)src & 3) == 0) {
		for (int k = lane; k < n / 4; k += 32)
			((uint32_t *)dst)[k] = ((const uint32_t *)src)[k];
		done = n / 4 * 4;
	}
	for (int k = done + lane; k < n; k += 32)
		dst[k] = src[k];
}

/* A warp's share of one segment of a row: the 16-byte words covering
 * [start, end), W a lane, lane + 32k the k-th; `skew` is where start lies
 * in the first word.  Loaded all at once into registers, then stored: a
 * copy loop that stored each word before loading the next cost a memory
 * round trip a word (the compiler cannot hoist a load over the loop's
 * branch). */
template <int W> struct seg_words {
	uint4 w[W];
	int n, skew;
};

template <int W>
__device__ static inline void
seg_fetch(seg_words<W> &sg, const uint8_t *start, const uint8_t *end, bool live, int lane)
{
	const uint4 *a = (const uint4 *)((uintptr_t)start & ~(uintptr_t)15);

	sg.skew = (int)(start - (const uint8_t *)a);
	sg.n = live ? (int)((end - (const uint8_t *)a + 15) / 16) : 0;
	for (int k = 0; k < W; k++)
		if (lane + 32 * k < sg.n)
			sg.w[k] = __ldg(a + lane + 32 * k);
}

template <int W>
__device__ static inline void
seg_store(const seg_words<W> &sg, uint8_t *dst, int lane)
{
	for (int k = 0; k < W; k++)
		if (lane + 32 * k < sg.n)
			((uint4 *)dst)[lane + 32 * k] = sg.w[k];
}

/* acc[t] += chunk `lane` of the staged segment . token t's activations
 * (sx: MMV_SEG chunks a token, XP floats a chunk).  The general path
 * decodes the chunk byte by byte (dequant_chunk.h), then adds the 32
 * products in order.  NEXT (PRIVAI_CUDA_NEXT=1, not yet run on a GPU)
 * reads the activations as float4s and decodes Q8_0, Q4_0 and Q4_K from
 * 16-bit words, the scale applied once to the chunk's sum: shared-memory
 * loads were some 34 + 32 a chunk and token, now 17 + 8 for Q8_0.  Chunks
 * of these types start at even offsets (every block size is even, and the
 * rows and segments with them), so the 16-bit loads are aligned. */
template <int NT, int XP, bool NEXT>
__device__ static inline void
chunk_dot(uint32_t type, const uint8_t *seg, int lane, const float *sx, float *acc)
{
	float wv[32];

	if (NEXT && (type == DQ_Q8_0 || type == DQ_Q4_0 || type == DQ_Q4_K)) {
		const uint16_t *q;
		float d, m = 0.0f, qx[NT], sx_sum[NT];
		int shift = 0, lo_hi = type == DQ_Q4_0; /* Q4_0: value j in the low nibble, j + 16 in the high */
		if (type == DQ_Q8_0) {
			const uint8_t *b = seg + 34 * lane;
			d = __half2float(*(const __half *)b);
			q = (const uint16_t *)(b + 2);
		} else if (type == DQ_Q4_0) {
			const uint8_t *b = seg + 18 * lane;
			d = __half2float(*(const __half *)b);
			q = (const uint16_t *)(b + 2);
		} else { /* Q4_K: chunk c of super-block lane / 8 */
			const uint8_t *b = seg + 144 * (lane >> 3);
			int c = lane & 7, sc, mn;
			dq_scale_min_k4(c, b + 4, &sc, &mn);
			d = __half2float(*(const __half *)b) * sc;
			m = __half2float(*(const __half *)(b + 2)) * mn;
			q = (const uint16_t *)(b + 16 + (c >> 1) * 32);
			shift = 4 * (c & 1);
		}
		for (int t = 0; t < NT; t++)
			qx[t] = sx_sum[t] = 0.0f;
		for (int j = 0; j < 8; j++) { /* values 4j..4j+3 */
			float w0, w1, w2, w3;
			if (type == DQ_Q8_0) {
				uint32_t a = q[2 * j], b = q[2 * j + 1];
				w0 = (float)(int8_t)(a & 0xff);
				w1 = (float)(int8_t)(a >> 8);
				w2 = (float)(int8_t)(b & 0xff);
				w3 = (float)(int8_t)(b >> 8);
			} else if (lo_hi) { /* bytes (4j..4j+3) % 16, low nibbles below 16 */
				uint32_t a = q[(2 * j) % 8], b = q[(2 * j) % 8 + 1], sh = j < 4 ? 0 : 4;
				w0 = (float)((int)((a >> sh) & 0xf) - 8);
				w1 = (float)((int)((a >> (8 + sh)) & 0xf) - 8);
				w2 = (float)((int)((b >> sh) & 0xf) - 8);
				w3 = (float)((int)((b >> (8 + sh)) & 0xf) - 8);
			} else {
				uint32_t a = q[2 * j], b = q[2 * j + 1];
				w0 = (float)((a >> shift) & 0xf);
				w1 = (float)((a >> (8 + shift)) & 0xf);
				w2 = (float)((b >> shift) & 0xf);
				w3 = (float)((b >> (8 + shift)) & 0xf);
			}
			for (int t = 0; t < NT; t++) {
				float4 xv = ((const float4 *)(sx + (t * MMV_SEG + lane) * XP))[j];
				qx[t] += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
				sx_sum[t] += xv.x + xv.y + xv.z + xv.w;
			}
		}
		for (int t = 0; t < NT; t++)
			acc[t] += d * qx[t] - m * sx_sum[t];
		return;
	}
	dq_chunk(type, seg, lane, wv);
	for (int t = 0; t < NT; t++) {
		const float *xt = sx + (t * MMV_SEG + lane) * XP;
		float sum = 0.0f;
		if (NEXT) {
			for (int j = 0; j < 8; j++) {
				float4 xv = ((const float4 *)xt)[j];
				sum += wv[4 * j] * xv.x;
				sum += wv[4 * j + 1] * xv.y;
				sum += wv[4 * j + 2] * xv.z;
				sum += wv[4 * j + 3] * xv.w;
			}
		} else {
			for (int j = 0; j < 32; j++)
				sum += wv[j] * xt[j];
		}
		acc[t] += sum;
	}
}

/*
 * A block of MMV_WARPS rows, MMV_SEG chunks of each at a time, the next
 * segment's loads in flight while this one is computed: every lane loads
 * its words of the segment (seg_fetch) and its float4 of each token's
 * activations into registers, which are stored to shared memory after
 * the segment before has been computed.  The kernel before it (one round
 * trip a word, nothing in flight while computing) gave 406 tok/s on an
 * H100 where this gives 523 (1B-class Q8_0, docs/performance.md).  XP
 * floats a chunk of activations: 33 (lane l reading value j of its chunk
 * hits bank l + j) or, for NEXT's float4 reads, 36 (a quarter-warp's
 * float4s cover the 32 banks once).
 */
template <int NT, int W, bool NEXT>
__global__ static void
k_mmv(struct mmv_set set, int64_t cols, const float *__restrict__ x)
{
	constexpr int XP = NEXT ? 36 : 33;
	extern __shared__ __align__(16) uint8_t smem[];
	int m = 0; /* the matrix this block's rows are of: blocks go to them in order */
	while (m + 1 < set.n && blockIdx.x >= set.m[m + 1].first_block)
		m++;
	const uint32_t type = set.m[m].type;
	const uint8_t *__restrict__ w = set.m[m].data;
	const size_t row_bytes = set.m[m].row_bytes;
	const int64_t rows = set.m[m].rows;
	float *__restrict__ y = set.m[m].y;
	float *sx = (float *)smem; /* NT x MMV_SEG chunks x XP */
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	uint8_t *sw = smem + (size_t)NT * MMV_SEG * MMV_XPITCH * sizeof(float) + warp * set.stride;
	int64_t r = (int64_t)(blockIdx.x - set.m[m].first_block) * MMV_WARPS + warp, chunks = cols / 32;
	int nseg = (int)((chunks + MMV_SEG - 1) / MMV_SEG);
	bool live = r < rows; /* a warp past the last row still helps with the activations and syncs */
	bool x_aligned = ((uintptr_t)x & 15) == 0;
	const uint8_t *row = w + (live ? r : 0) * (int64_t)row_bytes;
	seg_words<W> sg;
	float4 xr[NT]; /* a segment of a token is MMV_SEG * 8 float4s: one a thread */
	int nc = 0;
	float acc[NT];

	sg.skew = 0;
	for (int t = 0; t < NT; t++)
		acc[t] = 0.0f;
	for (int s = 0; s <= nseg; s++) {
		int cur_nc = nc, cur_skew = sg.skew;
		if (s > 0) {             /* store segment s - 1, fetched last round */
			__syncthreads(); /* the compute before has done with sx and sw */
			seg_store(sg, sw, lane);
			for (int t = 0; t < NT; t++) {
				float *d = sx + (t * MMV_SEG + threadIdx.x / 8) * XP + threadIdx.x % 8 * 4;
				d[0] = xr[t].x;
				d[1] = xr[t].y;
				d[2] = xr[t].z;
				d[3] = xr[t].w;
			}
			__syncthreads();
		}
		if (s < nseg) { /* fetch segment s */
			int64_t c0 = (int64_t)s * MMV_SEG;
			nc = chunks - c0 < MMV_SEG ? (int)(chunks - c0) : MMV_SEG;
			const uint8_t *start = row + dq_chunks_bytes(type, c0);
			seg_fetch(sg, start, start + dq_chunks_bytes(type, nc), live, lane);
			int k4 = threadIdx.x * 4; /* this thread's float4 of each token's segment */
			for (int t = 0; t < NT; t++) {
				const float *xs = x + (int64_t)t * cols + c0 * 32 + k4;
				if (k4 >= nc * 32)
					xr[t] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
				else if (x_aligned)
					xr[t] = __ldg((const float4 *)xs);
				else
					xr[t] = make_float4(__ldg(xs), __ldg(xs + 1), __ldg(xs + 2), __ldg(xs + 3));
			}
		}
		if (s > 0 && live && lane < cur_nc) /* compute segment s - 1 */
			chunk_dot<NT, XP, NEXT>(type, sw + cur_skew, lane, sx, acc);
	}
	if (!live)
		return;
	for (int t = 0; t < NT; t++) {
		float sum = warp_sum(acc[t]);
		if (lane == 0)
			y[(int64_t)t * rows + r] = sum;
	}
}

/* The 16-byte words a lane of k_mmv holds: a segment plus 30 bytes
 * of alignment, over 32 lanes. */
static int
mmv_words(uint32_t type)
{
	size_t words = ((size_t)dq_chunks_bytes(type, MMV_SEG) + 30) / 16;

	return (int)((words + 31) / 32);
}

typedef void mmv_kernel(struct mmv_set, int64_t, const float *);

#define MMV_ROW(W, N)                                                                                                  \
	{                                                                                                              \
		k_mmv<1, W, N>, k_mmv<2, W, N>, k_mmv<3, W, N>, k_mmv<4, W, N>, k_mmv<5, W, N>, k_mmv<6, W, N>,        \
			k_mmv<7, W, N>, k_mmv<8, W, N>                                                                 \
	}
/* By NEXT, words a lane (3: every quantized type; 5: F16, BF16; 9: F32), then tokens. */
static mmv_kernel *const mmv_kernels[2][3][MMV_MAX_TOKENS] = {
	{ MMV_ROW(3, false), MMV_ROW(5, false), MMV_ROW(9, false) },
	{ MMV_ROW(3, true), MMV_ROW(5, true), MMV_ROW(9, true) },
};

struct mmv_set
mmv_set_of(const struct weight *const *w, int nw, float *const *y, int rows_per_block, unsigned *grid)
{
	struct mmv_set set = {};

	*grid = 0;
	set.n = nw;
	for (int i = 0; i < nw; i++) {
		set.m[i].type = w[i]->type;
		set.m[i].data = (const uint8_t *)w[i]->data;
		set.m[i].row_bytes = w[i]->row_bytes;
		set.m[i].rows = w[i]->rows;
		set.m[i].y = y[i];
		set.m[i].first_block = *grid;
		*grid += (unsigned)((w[i]->rows + rows_per_block - 1) / rows_per_block);
	}
	return set;
}

void
cuda_mmv_n(cudaStream_t s, const struct weight *const *w, int nw, const float *x, int n, float *const *y, int next)
{
	unsigned grid;
	struct mmv_set set = mmv_set_of(w, nw, y, MMV_WARPS, &grid);
	int words = 0;
	size_t smem = 0;

	for (int i = 0; i < nw; i++) {
		if (mmv_words(w[i]->type) > words)
			words = mmv_words(w[i]->type);
		if (mmv_stride(w[i]->type) > set.stride)
			set.stride = mmv_stride(w[i]->type);
		if (mmv_smem(n, w[i]->type) > smem)
			smem = mmv_smem(n, w[i]->type);
	}
	mmv_kernel *k = mmv_kernels[next != 0][words <= 3 ? 0 : words <= 5 ? 1 : 2][n - 1];
	k<<<grid, MMV_WARPS * 32, smem, s>>>(set, w[0]->cols, x);
}

void
cuda_mmv(cudaStream_t s, const struct weight *w, const float *x, int n, float *y, int next)
{
	cuda_mmv_n(s, &w, 1, x, n, &y, next);
}

size_t
cuda_mmv_allow_smem(void)
{
	int bytes = (int)mmv_smem(MMV_MAX_TOKENS, DQ_F32);

	for (int nx = 0; nx < 2; nx++)
		for (int i = 0; i < 3; i++)
			for (int t = 0; t < MMV_MAX_TOKENS; t++)
				if (cudaFuncSetAttribute(mmv_kernels[nx][i][t],
							 cudaFuncAttributeMaxDynamicSharedMemorySize,
							 bytes) != cudaSuccess)
					return (size_t)bytes;
	return 0;
}

/* The weight tile of a prefill: a warp per (row, segment of MMV_SEG
 * chunks), the segment's bytes staged in shared memory with 16-byte
 * loads, each lane then decoding its chunk and writing its 32 halves as
 * four 16-byte stores.  Verified on an H100 and an H200; the kernel before
 * it, lanes reading their blocks a byte at a time 34 bytes apart, moved
 * about 90 GB/s.  NEXT (not yet run on a GPU) loads the segment's words
 * all at once (seg_fetch) where stage_bytes waits a round trip a word:
 * this kernel is 8 % of a prefill of 512 on an H100. */
template <bool NEXT>
__global__ static void
k_dequant_f16(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t nr, int64_t cols, __half *out)
{
	extern __shared__ __align__(16) uint8_t smem[];
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t chunks = cols / 32, nseg = (chunks + MMV_SEG - 1) / MMV_SEG;
	int64_t wi = (int64_t)blockIdx.x * MMV_WARPS + warp, r = wi / nseg, c0 = wi % nseg * MMV_SEG;
	uint8_t *sw = smem + warp * mmv_stride(type);
	int skew = 0;
	float v[32];

	if (r >= nr) /* no block-wide barrier below: a warp may leave */
		return;
	int nc = chunks - c0 < MMV_SEG ? (int)(chunks - c0) : MMV_SEG;
	const uint8_t *start = w + (r0 + r) * (int64_t)row_bytes + dq_chunks_bytes(type, c0);
	if (NEXT) {
		seg_words<5> sg; /* BF16's 2 KB segment at most: F16 and F32 are not dequantized */
		seg_fetch(sg, start, start + dq_chunks_bytes(type, nc), true, lane);
		seg_store(sg, sw, lane);
		skew = sg.skew;
	} else {
		stage_bytes(start, (int)dq_chunks_bytes(type, nc), sw, lane);
	}
	__syncwarp();
	if (lane >= nc)
		return;
	dq_chunk(type, sw + skew, lane, v);
	uint4 *dst = (uint4 *)(out + r * cols + (c0 + lane) * 32); /* 64 bytes, 16-byte aligned */
	for (int q = 0; q < 4; q++) {
		union {
			__half2 h[4];
			uint4 u;
		} pk;
		for (int i = 0; i < 4; i++)
			pk.h[i] = __floats2half2_rn(v[8 * q + 2 * i], v[8 * q + 2 * i + 1]);
		dst[q] = pk.u;
	}
}

void
cuda_dequant_f16(cudaStream_t s, const struct weight *w, int64_t r0, int64_t nr, __half *out, int next)
{
	int64_t warps = nr * ((w->cols / 32 + MMV_SEG - 1) / MMV_SEG);
	unsigned grid = (unsigned)((warps + MMV_WARPS - 1) / MMV_WARPS);
	size_t smem = MMV_WARPS * mmv_stride(w->type);
	const uint8_t *d = (const uint8_t *)w->data;

	if (next && mmv_words(w->type) <= 5)
		k_dequant_f16<true><<<grid, MMV_WARPS * 32, smem, s>>>(w->type, d, w->row_bytes, r0, nr, w->cols, out);
	else
		k_dequant_f16<false><<<grid, MMV_WARPS * 32, smem, s>>>(w->type, d, w->row_bytes, r0, nr, w->cols, out);
}
