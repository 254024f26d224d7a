/*
 * The CUDA backend's heavier kernels, each family in its own file, behind
 * host launchers that cuda_backend.cu calls on its stream:
 *
 *   cuda_mmv.cu        decode's matrix-vector products, and prefill's
 *                      weight tiles dequantized to half for cuBLAS
 *   cuda_attention.cu  attention over the paged half-precision KV cache
 *
 * `next` picks the kernels written since the last run on a GPU
 * (PRIVAI_CUDA_NEXT=1): scripts/gpu-check.sh checks them beside the
 * default, which they replace once they have passed there.
 */
#ifndef PRIVAI_KERNELS_CUDA_KERNELS_H
#define PRIVAI_KERNELS_CUDA_KERNELS_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "privai/compute.h"

#define MMV_MAX_TOKENS 8 /* tokens the matrix-vector kernels keep in registers */
#define MMV_MAX_SET 3    /* matrices one matrix-vector launch takes (Q, K, V) */
#define HEAD_DIM_MAX 256 /* attention: up to 8 dims per lane */

/* The matrices one launch of k_mmv multiplies with the same activations
 * (Q, K and V; gate and up): one launch fills the GPU where K's and V's
 * 512 rows alone made 64 blocks for 132 SMs, and saves the launches. */
struct mmv_set {
	int n;
	size_t stride; /* a warp's staging bytes: the widest of the types */
	struct {
		uint32_t type;
		const uint8_t *data;
		size_t row_bytes;
		int64_t rows;
		float *y;
		unsigned first_block;
	} m[MMV_MAX_SET];
};

/* The set of nw weights and their outputs, rows_per_block rows a block;
 * its grid's blocks in *grid. */
struct mmv_set mmv_set_of(const struct weight *const *w, int nw, float *const *y, int rows_per_block, unsigned *grid);

/* y (n x rows) = x (n x cols) w^T for 1 <= n <= MMV_MAX_TOKENS. */
void cuda_mmv(cudaStream_t s, const struct weight *w, const float *x, int n, float *y, int next);
/* y[i] = x w[i]^T for i < nw <= MMV_MAX_SET weights of the same cols, in
 * one launch. */
void cuda_mmv_n(cudaStream_t s, const struct weight *const *w, int nw, const float *x, int n, float *const *y,
		int next);
/* The same for weights of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (mq_type_ok) on int8
 * activations (kernels/mmvq_task.h), as the CPU's decode computes them:
 * x is quantized into xq (n x cols) and xd (n x cols / 32) first.  Not
 * yet run on a GPU: behind PRIVAI_CUDA_NEXT. */
void cuda_mmvq_n(cudaStream_t s, const struct weight *const *w, int nw, const float *x, int n, float *const *y,
		 int8_t *xq, float *xd);
/* out = half(rows r0..r0+nr of w), row-major. */
void cuda_dequant_f16(cudaStream_t s, const struct weight *w, int64_t r0, int64_t nr, __half *out, int next);
/* Let the matrix-vector kernels take the shared memory their widest case
 * needs; the bytes asked for when the device refuses, else 0. */
size_t cuda_mmv_allow_smem(void);

/* The paged KV cache of one layer as the batch's tables address it. */
struct cuda_kv {
	const __half *k, *v;
	const int32_t *pos, *table; /* per token: its position, its block table */
	int max_blocks, shift;      /* table entries per token; log2 of the block size */
};

#define ATT_MAX_SPLITS 16 /* blocks one (token, head) of a decode step may be split over */

/* out (n x n_head x head_dim) = softmax(q k^T / sqrt(head_dim)) v, each
 * token over positions 0..pos[t] of its own table; with nsplit > 1 each
 * (token, head) over nsplit blocks, their partial results in `part`
 * (n x n_head x nsplit x (head_dim + 2) floats). */
void cuda_attention(cudaStream_t s, const struct cuda_kv *kv, const float *q, int n, int n_head, int n_head_kv,
		    int head_dim, float *out, int nsplit, float *part);
/* The splits that fill `sms` SMs about twice for n tokens of n_head heads
 * (1 where the pairs alone do). */
int cuda_attention_splits(int n, int n_head, int sms);

/* Where a position's K and V rows are: its block from the token's table. */
__device__ static inline int64_t
kv_row(const int32_t *table, int max_blocks, int t, int pos, int shift)
{
	return ((int64_t)table[(int64_t)t * max_blocks + (pos >> shift)] << shift) + (pos & ((1 << shift) - 1));
}

__device__ static inline float
warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ static inline float
warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

#endif
