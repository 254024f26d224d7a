/*
 * Decode's matrix-vector products of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights on int8
 * activations (kernels/mmvq_task.h has the arithmetic and why), behind
 * PRIVAI_CUDA_NEXT: written without a GPU, checked on the host through
 * the task functions it runs (test_mmvq_task), not yet run on a device.
 *
 * The float kernel (cuda_mmv.cu) stages a segment of each row in shared
 * memory and decodes a 32-weight chunk a lane: some 64 shared-memory loads
 * and 32 integer-to-float conversions a chunk, which under ncu on an H100
 * read gate and up at 693 GB/s of 3.35 TB/s.  Here a lane reads 8 weights
 * of a row straight from global memory in 16-bit or 32-bit words (a warp:
 * 8 consecutive Q8_0 or Q4_0 blocks, or one K-quant super-block, at a time)
 * and multiplies them with dp4a, four products an instruction; there is
 * no shared memory and no barrier, a warp a row, so the next row's loads
 * do not wait for this row's sums.
 */
#include "cuda_kernels.h"
#include "kernels/mmvq_task.h"

#define MQ_WARPS 4 /* rows (one a warp) a block */

/* x (n x cols) to int8, 32 values a warp: lane j takes value j. */
__global__ static void
k_quantize_x(const float *__restrict__ x, int64_t blocks, int8_t *__restrict__ xq, float *__restrict__ xd)
{
	int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;

	if (b >= blocks)
		return;
	float v = x[b * 32 + lane], inv;
	float d = mq_scale(warp_max(fabsf(v)), &inv);
	xq[b * 32 + lane] = mq_round(v, inv);
	if (lane == 0)
		xd[b] = d;
}

template <int NT>
__global__ static void
k_mmvq(struct mmv_set set, int64_t cols, const int8_t *__restrict__ xq, const float *__restrict__ xd)
{
	int m = 0; /* the matrix this block's rows are of: blocks go to them in order */
	while (m + 1 < set.n && blockIdx.x >= set.m[m + 1].first_block)
		m++;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t r = (int64_t)(blockIdx.x - set.m[m].first_block) * MQ_WARPS + warp, rows = set.m[m].rows;

	if (r >= rows) /* no barrier below: the warp may leave */
		return;
	const uint32_t type = set.m[m].type;
	const uint8_t *row = set.m[m].data + r * (int64_t)set.m[m].row_bytes;
	int64_t tasks = cols / 8;
	float acc[NT];

	for (int t = 0; t < NT; t++)
		acc[t] = 0.0f;
#pragma unroll 4
	for (int64_t i = lane; i < tasks; i += 32)
		for (int t = 0; t < NT; t++)
			acc[t] += mq_task(type, row, i, xq + t * cols, xd + t * (cols / 32));
	for (int t = 0; t < NT; t++) {
		float sum = warp_sum(acc[t]);
		if (lane == 0)
			set.m[m].y[(int64_t)t * rows + r] = sum;
	}
}

typedef void mmvq_kernel(struct mmv_set, int64_t, const int8_t *, const float *);

static mmvq_kernel *const mmvq_kernels[MMV_MAX_TOKENS] = { k_mmvq<1>, k_mmvq<2>, k_mmvq<3>, k_mmvq<4>,
							   k_mmvq<5>, k_mmvq<6>, k_mmvq<7>, k_mmvq<8> };

void
cuda_mmvq_n(cudaStream_t s, const struct weight *const *w, int nw, const float *x, int n, float *const *y, int8_t *xq,
	    float *xd)
{
	int64_t cols = w[0]->cols, blocks = (int64_t)n * cols / 32;
	unsigned grid;
	struct mmv_set set = mmv_set_of(w, nw, y, MQ_WARPS, &grid);

	k_quantize_x<<<(unsigned)((blocks + 7) / 8), 256, 0, s>>>(x, blocks, xq, xd);
	mmvq_kernels[n - 1]<<<grid, MQ_WARPS * 32, 0, s>>>(set, cols, xq, xd);
}
