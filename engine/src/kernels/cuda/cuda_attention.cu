/*
 * Attention over the paged half-precision KV cache: a block per (token,
 * head), each token over positions 0..pos[t] of its own block table (a
 * batch mixes requests, so no two tokens need share a table), online
 * softmax with no score buffer.
 *
 * A decode step has too few (token, head) pairs to fill the GPU (one
 * token of 32 heads: 32 blocks for 132 SMs), and at a depth of 2048 an
 * H100 then generated half as fast as at depth 0.  Under PRIVAI_CUDA_NEXT
 * (not yet run on a GPU) the positions of each pair are split over
 * several blocks, flash-decoding's way: each writes its max, sum and
 * unnormalized output, and k_attention_merge combines them.  The number
 * of splits depends on the batch's shape only, never on its positions,
 * so a decode pass recorded as a CUDA graph stays right at any depth.
 */
#include <math.h>

#include "cuda_kernels.h"

#define ATT_WARPS 8 /* warps sharing one (token, head) */

/* oh = the warps' partial sums (each its running max m, sum l and
 * unnormalized output acc) merged and normalized, by the whole block.
 * With `part` (a split of the positions, flash-decoding's way) the merged
 * max, sum and unnormalized output go there instead, for k_attention_merge:
 * a split that had no position writes max -inf and sum 0. */
__device__ static void
merge_warps(const float *s_m, const float *s_l, const float (*s_acc)[HEAD_DIM_MAX], int head_dim, float *oh,
	    float *part)
{
	float mx = s_m[0], sum = 0.0f;

	for (int w = 1; w < ATT_WARPS; w++)
		mx = fmaxf(mx, s_m[w]);
	if (part != NULL && mx == -INFINITY) {
		for (int d = threadIdx.x; d < head_dim + 2; d += blockDim.x)
			part[d] = d == 0 ? -INFINITY : 0.0f;
		return;
	}
	for (int w = 0; w < ATT_WARPS; w++)
		sum += s_l[w] * expf(s_m[w] - mx);
	for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
		float v = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++)
			v += s_acc[w][d] * expf(s_m[w] - mx);
		if (part != NULL)
			part[2 + d] = v;
		else
			oh[d] = v / sum;
	}
	if (part != NULL && threadIdx.x == 0) {
		part[0] = mx;
		part[1] = sum;
	}
}

/* out = the splits' partial results of a (token, head) merged: block b
 * of k_attention's grid wrote part[b * (head_dim + 2) ..]; split 0 had
 * position 0, so the max is finite. */
__global__ static void
k_attention_merge(const float *part, int nsplit, int head_dim, float *out)
{
	const float *p = part + (int64_t)blockIdx.x * nsplit * (head_dim + 2);
	float mx = p[0], sum = 0.0f;

	for (int i = 1; i < nsplit; i++)
		mx = fmaxf(mx, p[i * (head_dim + 2)]);
	for (int i = 0; i < nsplit; i++)
		sum += p[i * (head_dim + 2) + 1] * expf(p[i * (head_dim + 2)] - mx);
	for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
		float v = 0.0f;
		for (int i = 0; i < nsplit; i++)
			v += p[i * (head_dim + 2) + 2 + d] * expf(p[i * (head_dim + 2)] - mx);
		out[(int64_t)blockIdx.x * head_dim + d] = v / sum;
	}
}

/* Any head_dim, where k_attention needs a multiple of 8: warp w takes
 * positions w, w + ATT_WARPS, ... with its own running max and sum, each
 * lane a slice of the head dims; the warps' partial sums are then merged
 * through shared memory.  It was the only kernel until k_attention, which
 * is 2.4x faster: a sum across the warp, two exponentials and a dependent
 * load a position (46 % of a prefill of 512 on an H100). */
__global__ static void
k_attention_any(const float *q, const __half *kc, const __half *vc, const int32_t *pos, const int32_t *table,
		int max_blocks, int shift, int n_head, int n_head_kv, int head_dim, float *out)
{
	__shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS], s_acc[ATT_WARPS][HEAD_DIM_MAX];
	int t = blockIdx.x / n_head, h = blockIdx.x % n_head, kvh = h / (n_head / n_head_kv);
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kv_dim = n_head_kv * head_dim;
	float qv[HEAD_DIM_MAX / 32], acc[HEAD_DIM_MAX / 32];
	float m = -INFINITY, l = 0.0f, scale = 1.0f / sqrtf((float)head_dim);

	const float *qh = q + ((int64_t)t * n_head + h) * head_dim;
	for (int k = 0; k < HEAD_DIM_MAX / 32; k++) {
		int d = lane + 32 * k;
		qv[k] = d < head_dim ? qh[d] : 0.0f;
		acc[k] = 0.0f;
	}
	for (int p = warp; p <= pos[t]; p += ATT_WARPS) {
		int64_t base = kv_row(table, max_blocks, t, p, shift) * kv_dim + (int64_t)kvh * head_dim;
		float s = 0.0f;
		for (int k = 0; k < HEAD_DIM_MAX / 32 && 32 * k < head_dim; k++) {
			int d = lane + 32 * k;
			if (d < head_dim)
				s += qv[k] * __half2float(kc[base + d]);
		}
		s = warp_sum(s) * scale;
		float m_new = fmaxf(m, s), corr = expf(m - m_new), e = expf(s - m_new);
		l = l * corr + e;
		for (int k = 0; k < HEAD_DIM_MAX / 32 && 32 * k < head_dim; k++) {
			int d = lane + 32 * k;
			acc[k] = acc[k] * corr + (d < head_dim ? e * __half2float(vc[base + d]) : 0.0f);
		}
		m = m_new;
	}
	/* merge: warp 0 always had position 0, so the overall max is finite
	 * and a warp that had no position (m = -inf, l = 0) weighs nothing */
	if (lane == 0) {
		s_m[warp] = m;
		s_l[warp] = l;
	}
	for (int k = 0; k < HEAD_DIM_MAX / 32; k++)
		s_acc[warp][lane + 32 * k] = acc[k];
	__syncthreads();
	merge_warps(s_m, s_l, s_acc, head_dim, out + ((int64_t)t * n_head + h) * head_dim, NULL);
}

/*
 * Lanes over positions: warp w takes the groups of 32 positions w,
 * w + ATT_WARPS, ...; lane i scores position 32g + i on its own (its K
 * row in 16-byte loads, q from shared memory), so a group costs one max
 * and one sum across the warp where k_attention_any pays a sum a
 * position, and the 32 K loads are in flight at once.  Then the group's V
 * rows, one after the other, each lane adding its two dims of every row
 * (half2 loads, the weight and the row's place passed along by
 * shuffles).  Needs head_dim % 8 == 0.  On an H100, 1B-class Q8_0:
 * prefill of 512 22.7k -> 33.2k tok/s, generation at depth 2048 108 ->
 * 261 tok/s (docs/performance.md).
 */
__global__ static void
k_attention(const float *q, const __half *kc, const __half *vc, const int32_t *pos, const int32_t *table,
	    int max_blocks, int shift, int n_head, int n_head_kv, int head_dim, float *out, int nsplit, float *part)
{
	__shared__ float s_q[HEAD_DIM_MAX], s_m[ATT_WARPS], s_l[ATT_WARPS], s_acc[ATT_WARPS][HEAD_DIM_MAX];
	int th = blockIdx.x / nsplit, split = blockIdx.x % nsplit;
	int t = th / n_head, h = th % n_head, kvh = h / (n_head / n_head_kv);
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kv_dim = n_head_kv * head_dim, last = pos[t];
	float acc[HEAD_DIM_MAX / 32]; /* dims 64k + 2 lane and 64k + 2 lane + 1 */
	float m = -INFINITY, l = 0.0f, scale = 1.0f / sqrtf((float)head_dim);

	const float *qh = q + ((int64_t)t * n_head + h) * head_dim;
	for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
		s_q[d] = qh[d] * scale;
	for (int k = 0; k < HEAD_DIM_MAX / 32; k++)
		acc[k] = 0.0f;
	__syncthreads();
	for (int g = split * ATT_WARPS + warp; 32 * g <= last; g += ATT_WARPS * nsplit) {
		int p = 32 * g + lane;
		bool ok = p <= last;
		int64_t base = ok ? kv_row(table, max_blocks, t, p, shift) * kv_dim + (int64_t)kvh * head_dim : 0;
		float s = -INFINITY;
		if (ok) {
			const uint4 *kr = (const uint4 *)(kc + base);
			s = 0.0f;
			for (int d8 = 0; d8 < head_dim / 8; d8++) {
				uint4 u = kr[d8];
				const __half2 *hp = (const __half2 *)&u;
				const float *qd = s_q + 8 * d8;
				for (int i = 0; i < 4; i++) {
					float2 f = __half22float2(hp[i]);
					s += qd[2 * i] * f.x + qd[2 * i + 1] * f.y;
				}
			}
		}
		/* lane 0's position 32g <= last: the group's max is finite */
		float m_new = fmaxf(m, warp_max(s)), corr = expf(m - m_new);
		float e = ok ? expf(s - m_new) : 0.0f;
		l = l * corr + warp_sum(e);
		for (int k = 0; k < HEAD_DIM_MAX / 32; k++)
			acc[k] *= corr;
		int nvalid = last - 32 * g + 1 < 32 ? last - 32 * g + 1 : 32;
#pragma unroll 4
		for (int j = 0; j < nvalid; j++) {
			float pj = __shfl_sync(0xffffffffu, e, j);
			int64_t bj = __shfl_sync(0xffffffffu, base, j);
			for (int k = 0; k < HEAD_DIM_MAX / 64; k++) {
				int d = 64 * k + 2 * lane;
				if (d < head_dim) {
					float2 f = __half22float2(*(const __half2 *)(vc + bj + d));
					acc[2 * k] += pj * f.x;
					acc[2 * k + 1] += pj * f.y;
				}
			}
		}
		m = m_new;
	}
	if (lane == 0) {
		s_m[warp] = m;
		s_l[warp] = l;
	}
	for (int k = 0; k < HEAD_DIM_MAX / 64; k++) {
		s_acc[warp][64 * k + 2 * lane] = acc[2 * k];
		s_acc[warp][64 * k + 2 * lane + 1] = acc[2 * k + 1];
	}
	__syncthreads();
	/* warp 0 of split 0 had group 0, so the overall max is finite; a warp
	 * with no group (m = -inf, l = 0) weighs nothing */
	merge_warps(s_m, s_l, s_acc, head_dim, out + ((int64_t)t * n_head + h) * head_dim,
		    nsplit > 1 ? part + (int64_t)blockIdx.x * (head_dim + 2) : NULL);
}

int
cuda_attention_splits(int n, int n_head, int sms)
{
	int per = 2 * sms / (n * n_head);

	return per < 2 ? 1 : per > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : per;
}

void
cuda_attention(cudaStream_t s, const struct cuda_kv *kv, const float *q, int n, int n_head, int n_head_kv, int head_dim,
	       float *out, int nsplit, float *part)
{
	unsigned grid = (unsigned)n * (unsigned)n_head; /* a block per (token, head) */

	if (head_dim % 8 == 0 && nsplit > 1 && part != NULL) {
		k_attention<<<grid *(unsigned)nsplit, ATT_WARPS * 32, 0, s>>>(q, kv->k, kv->v, kv->pos, kv->table,
									      kv->max_blocks, kv->shift, n_head,
									      n_head_kv, head_dim, out, nsplit, part);
		k_attention_merge<<<grid, 128, 0, s>>>(part, nsplit, head_dim, out);
	} else if (head_dim % 8 == 0)
		k_attention<<<grid, ATT_WARPS * 32, 0, s>>>(q, kv->k, kv->v, kv->pos, kv->table, kv->max_blocks,
							    kv->shift, n_head, n_head_kv, head_dim, out, 1, NULL);
	else
		k_attention_any<<<grid, ATT_WARPS * 32, 0, s>>>(q, kv->k, kv->v, kv->pos, kv->table, kv->max_blocks,
								kv->shift, n_head, n_head_kv, head_dim, out);
}
