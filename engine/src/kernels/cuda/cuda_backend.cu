/*
 * The CUDA compute backend: compute.h on one NVIDIA GPU (or one MIG
 * instance), built into privai-cuda.so and loaded by backends.c only when
 * a CUDA device is asked for.
 *
 * Weights are uploaded once, in their GGUF type.  A pass of up to
 * MMV_MAX_TOKENS tokens (decode) multiplies through a kernel that reads
 * every weight byte once and dequantizes it in registers
 * (kernels/dequant_chunk.h); a larger pass (prefill) dequantizes the
 * weight to half precision a tile of rows at a time and hands the product
 * to cuBLAS, F32 accumulation.  The KV cache is half precision, paged as
 * the engine's block tables say.  Everything runs on one stream; the only
 * synchronization is download() (the logits rows asked for) and
 * set_batch(), which waits for the previous pass before reusing its
 * staging buffer.  A decode pass the model marks replayable is recorded
 * as a CUDA graph the first time its shape (tokens, logits rows) comes,
 * and replayed as one launch after that: a pass of a 1B model is some 260
 * kernels, each a launch from the host.
 *
 * What is not here yet (see docs/performance.md for what was measured):
 * split-K attention for long contexts, int8 tensor-core GEMM.
 */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_kernels.h"
#include "kernels/mmvq_task.h"
#include "kernels/dequant_chunk.h"
extern "C" {
#include "privai/status.h" /* status.c is built into the library as C */
}

#define GEMM_TILE_HALFS (32 << 20)   /* dequantized weight tile: 64 MiB */
#define KV_SLACK ((size_t)256 << 20) /* left free beside the KV pool */

struct cuda_impl {
	int device;
	cudaStream_t stream;
	cublasHandle_t blas;
	char err[PRIVAI_ERR_LEN]; /* the first failure, for download() to report */
	int failed;
	size_t free_at_start; /* the device's free memory before this engine took any */
	int next;             /* PRIVAI_CUDA_NEXT=1: the kernels not yet run on a GPU (cuda_kernels.h) */

	/* the batch, staged in pinned host memory and copied in one go */
	int n, n_out, max_tokens, max_blocks; /* max_blocks: table entries per token */
	int32_t *h_stage, *d_stage;           /* tokens | pos | out_rows | tables */
	int32_t *d_tokens, *d_pos, *d_rows, *d_table;

	/* the KV cache: n_layer x kv_rows x kv_dim halves, K and V */
	__half *k_cache, *v_cache;
	int n_layer, kv_dim, block_shift;
	int64_t kv_rows;

	/* decode passes recorded as CUDA graphs, by n and n_out, replayed whole:
	 * while `replay` is set the operations queue nothing, and the graph is
	 * launched at the pass's end (the next download or set_batch) */
	cudaGraphExec_t graphs[MMV_MAX_TOKENS + 1][MMV_MAX_TOKENS + 1];
	cudaGraphExec_t replay;
	int capturing, cap_n, cap_out;

	/* prefill scratch: activations and a weight tile in half precision */
	__half *x16, *w16;
	size_t x16_len, w16_len;
	int8_t *xq;      /* decode's activations as int8 (cuda_mmvq_n), under next */
	float *xd;       /* and their scales, one per 32 */
	float *att_part; /* attention split over blocks: their partial results, under next */
	int sms;         /* the device's multiprocessors */
};

static struct cuda_impl *
impl_of(struct compute *c)
{
	return (struct cuda_impl *)c->impl;
}

/* Note the first CUDA failure; later ones are usually its echoes. */
static int
check(struct cuda_impl *im, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	if (!im->failed)
		privai_fail(im->err, PRIVAI_EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
	im->failed = 1;
	return -1;
}

static void
check_launch(struct cuda_impl *im, const char *what)
{
	check(im, cudaGetLastError(), what);
}

static unsigned
blocks_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;

	return (unsigned)(b < 1 ? 1 : b); /* grid x may be 2^31 - 1: every caller's n fits */
}

/* ------------------------------------------------------------- kernels */

/* x as the sum of two halves, hi[i] + lo[i], good to about 22 bits where
 * one half keeps 11: the prefill GEMM runs on both, so its products are
 * as close to the float activations as the matrix-vector kernel's. */
__global__ static void
k_split_f16(const float *x, size_t n, __half *hi, __half *lo)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		__half h = __float2half(x[i]);
		hi[i] = h;
		lo[i] = __float2half(x[i] - __half2float(h));
	}
}

__global__ static void
k_get_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t cols, const int32_t *ids, int n, float *out)
{
	int64_t chunks = cols / 32, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= (int64_t)n * chunks)
		return;
	int t = (int)(i / chunks);
	int64_t c = i % chunks;
	dq_chunk(type, w + (int64_t)ids[t] * (int64_t)row_bytes, c, out + (int64_t)t * cols + c * 32);
}

/* One block per row; the sum of squares in double, as the CPU does. */
__global__ static void
k_rmsnorm(const float *x, const float *g, int dim, float eps, float *out)
{
	__shared__ double part[32];
	const float *xt = x + (int64_t)blockIdx.x * dim;
	float *ot = out + (int64_t)blockIdx.x * dim;
	double ss = 0.0;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		ss += (double)xt[i] * xt[i];
	for (int o = 16; o > 0; o >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if (threadIdx.x % 32 == 0)
		part[threadIdx.x / 32] = ss;
	__syncthreads();
	if (threadIdx.x < 32) {
		ss = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
		for (int o = 16; o > 0; o >>= 1)
			ss += __shfl_xor_sync(0xffffffffu, ss, o);
		if (threadIdx.x == 0)
			part[0] = ss;
	}
	__syncthreads();
	float scale = (float)(1.0 / sqrt(part[0] / dim + eps));
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		ot[i] = xt[i] * scale * g[i];
}

__global__ static void
k_add_rows(float *x, const float *b, size_t n, int dim)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		x[i] += b[i % dim];
}

__global__ static void
k_swiglu(float *a, const float *b, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

__global__ static void
k_add(float *a, const float *b, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		a[i] += b[i];
}

/* A thread per (token, head, pair); the angle in double, as the CPU. */
__global__ static void
k_rope(float *x, const int32_t *pos, int n, int n_heads, int head_dim, int n_rot, const float *inv_freq, int neox)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, half = n_rot / 2;

	if (i >= (int64_t)n * n_heads * half)
		return;
	int p = (int)(i % half), h = (int)(i / half % n_heads), t = (int)(i / half / n_heads);
	double theta = (double)pos[t] * inv_freq[p];
	float cs = (float)cos(theta), sn = (float)sin(theta);
	float *v = x + ((int64_t)t * n_heads + h) * head_dim;
	int a = neox ? p : 2 * p, b = neox ? p + n_rot / 2 : 2 * p + 1;
	float x0 = v[a], x1 = v[b];
	v[a] = x0 * cs - x1 * sn;
	v[b] = x0 * sn + x1 * cs;
}

__global__ static void
k_kv_write(__half *kc, __half *vc, const float *k, const float *v, const int32_t *pos, const int32_t *table,
	   int max_blocks, int shift, int n, int kv_dim)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= (int64_t)n * kv_dim)
		return;
	int t = (int)(i / kv_dim), j = (int)(i % kv_dim);
	int64_t off = kv_row(table, max_blocks, t, pos[t], shift) * kv_dim + j;
	kc[off] = __float2half(k[i]);
	vc[off] = __float2half(v[i]);
}

__global__ static void
k_gather_rows(const float *x, const int32_t *rows, int n_out, int dim, float *out)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= (int64_t)n_out * dim)
		return;
	int r = (int)(i / dim), j = (int)(i % dim);
	out[i] = x[(int64_t)rows[r] * dim + j];
}

/* -------------------------------------------------------------- graphs */

/* End the pass being recorded or replayed: instantiate what was recorded,
 * then launch it.  Called where the host waits on the stream (download,
 * set_batch, upload), so a pass without logits ends at the next one. */
static void
finish_pass(struct cuda_impl *im)
{
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;

	if (im->capturing) {
		im->capturing = 0;
		if (check(im, cudaStreamEndCapture(im->stream, &g), "recording a decode pass") < 0)
			return;
		cudaError_t e = cudaGraphInstantiate(&x, g, 0);
		cudaGraphDestroy(g);
		if (check(im, e, "instantiating a decode pass") < 0)
			return;
		im->graphs[im->cap_n][im->cap_out] = x;
		im->replay = x;
	}
	if (im->replay != NULL) {
		check(im, cudaGraphLaunch(im->replay, im->stream), "replaying a decode pass");
		im->replay = NULL;
	}
}

/* Start a pass: replay its graph if this shape was recorded, else record
 * it, for passes the model marks replayable and the matrix-vector kernel
 * takes (cuBLAS's GEMM stays out of graphs). */
static void
start_pass(struct cuda_impl *im, const struct compute_batch *b)
{
	if (!b->replayable || b->n > MMV_MAX_TOKENS || im->failed)
		return;
	if ((im->replay = im->graphs[b->n][b->n_out]) != NULL)
		return;
	if (check(im, cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal), "recording a pass") < 0)
		return;
	im->capturing = 1;
	im->cap_n = b->n;
	im->cap_out = b->n_out;
}

/* ----------------------------------------------------------------- ops */

static void
cu_matmul_mmv(struct cuda_impl *im, const struct weight *w, const float *x, int n, float *y)
{
	if (im->xq != NULL && mq_type_ok(w->type)) {
		cuda_mmvq_n(im->stream, &w, 1, x, n, &y, im->xq, im->xd);
		check_launch(im, "integer matrix-vector kernel");
		return;
	}
	cuda_mmv(im->stream, w, x, n, y, im->next);
	check_launch(im, "matrix-vector kernel");
}

/* y (n x rows) = x (n x cols) w^T through cuBLAS: in its column-major
 * terms, Y' (rows x n) = W'^T X' with W' = w^T (cols x rows).  The
 * activations go in as two halves (k_split_f16), so a tile is two
 * products, the second added onto the first: rounding x to one half cost
 * 3e-4 of relative error, more than the fixtures' prompt log-probabilities
 * allow, where the weights' own rounding (exact for F16) did not. */
static void
cu_matmul_gemm(struct cuda_impl *im, const struct weight *w, const float *x, int n, float *y)
{
	const float one = 1.0f, zero = 0.0f;
	int64_t cols = w->cols;
	cublasStatus_t st;
	__half *x_hi = im->x16, *x_lo = im->x16 + (size_t)n * cols;

	if (w->type == DQ_F32) {
		st = cublasGemmEx(im->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, n, (int)cols, &one, w->data,
				  CUDA_R_32F, (int)cols, x, CUDA_R_32F, (int)cols, &zero, y, CUDA_R_32F, (int)w->rows,
				  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS && !im->failed)
			check(im, cudaErrorUnknown, "cublasGemmEx (F32)");
		return;
	}
	k_split_f16<<<blocks_for((size_t)n * cols, 256), 256, 0, im->stream>>>(x, (size_t)n * cols, x_hi, x_lo);
	check_launch(im, "activations to halves");
	int64_t tile = w->type == DQ_F16 ? w->rows : (int64_t)(im->w16_len / (size_t)cols);
	for (int64_t r0 = 0; r0 < w->rows; r0 += tile) {
		int64_t nr = w->rows - r0 < tile ? w->rows - r0 : tile;
		const void *a = (const uint8_t *)w->data + r0 * (int64_t)w->row_bytes;
		if (w->type != DQ_F16) {
			cuda_dequant_f16(im->stream, w, r0, nr, im->w16, im->next);
			check_launch(im, "weight tile to half");
			a = im->w16;
		}
		for (int part = 0; part < 2; part++) {
			st = cublasGemmEx(im->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)cols, &one, a,
					  CUDA_R_16F, (int)cols, part ? x_lo : x_hi, CUDA_R_16F, (int)cols,
					  part ? &one : &zero, y + r0, CUDA_R_32F, (int)w->rows, CUBLAS_COMPUTE_32F,
					  CUBLAS_GEMM_DEFAULT);
			if (st != CUBLAS_STATUS_SUCCESS && !im->failed) {
				privai_fail(im->err, PRIVAI_EIO, "cuBLAS: GEMM of %lld x %d x %lld failed (status %d)",
					    (long long)nr, n, (long long)cols, (int)st);
				im->failed = 1;
			}
		}
	}
}

static void
cu_matmul(struct compute *c, const struct compute_weight *cw, const float *x, int n, float *y)
{
	struct cuda_impl *im = impl_of(c);

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	if (n <= MMV_MAX_TOKENS)
		cu_matmul_mmv(im, &cw->w, x, n, y);
	else
		cu_matmul_gemm(im, &cw->w, x, n, y);
}

/* Q, K and V (gate and up) in one matrix-vector launch: K's and V's 512
 * rows alone filled 64 of an H100's 132 SMs (139 GB/s under ncu).  Behind
 * PRIVAI_CUDA_NEXT until it has run on a GPU; prefill takes cuBLAS a
 * weight at a time. */
static void
cu_matmul_n(struct compute *c, const struct compute_weight *const *cw, int nw, const float *x, int n, float *const *y)
{
	struct cuda_impl *im = impl_of(c);
	const struct weight *w[MMV_MAX_SET];

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	int integer = 0;

	for (int i = 0; i < nw && i < MMV_MAX_SET; i++) {
		w[i] = &cw[i]->w;
		integer += im->xq != NULL && mq_type_ok(w[i]->type);
	}
	/* a set is one kernel's: every weight on int8 activations or none (an F16
	 * or Q3_K weight beside Q4_K ones goes a weight at a time) */
	if (!im->next || n > MMV_MAX_TOKENS || nw > MMV_MAX_SET || (integer > 0 && integer < nw)) {
		for (int i = 0; i < nw; i++)
			cu_matmul(c, cw[i], x, n, y[i]);
		return;
	}
	if (integer == nw)
		cuda_mmvq_n(im->stream, w, nw, x, n, y, im->xq, im->xd);
	else
		cuda_mmv_n(im->stream, w, nw, x, n, y, im->next);
	check_launch(im, "matrix-vector kernel over several weights");
}

static void
cu_get_rows(struct compute *c, const struct compute_weight *cw, float *out)
{
	struct cuda_impl *im = impl_of(c);
	const struct weight *w = &cw->w;

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	k_get_rows<<<blocks_for((size_t)im->n * (size_t)(w->cols / 32), 128), 128, 0, im->stream>>>(w->type,
												    (const uint8_t *)
													    w->data,
												    w->row_bytes,
												    w->cols,
												    im->d_tokens, im->n,
												    out);
	check_launch(im, "embedding rows");
}

static void
cu_rmsnorm(struct compute *c, const float *x, const float *g, int n, int dim, float eps, float *out)
{
	struct cuda_impl *im = impl_of(c);

	if (im->replay != NULL || n <= 0) /* replayed whole at the pass's end, or nothing */
		return;
	k_rmsnorm<<<n, 256, 0, im->stream>>>(x, g, dim, eps, out);
	check_launch(im, "rmsnorm");
}

static void
cu_add_rows(struct compute *c, float *x, const float *b, int n, int dim)
{
	struct cuda_impl *im = impl_of(c);
	size_t count = (size_t)n * dim;

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	k_add_rows<<<blocks_for(count, 256), 256, 0, im->stream>>>(x, b, count, dim);
	check_launch(im, "bias");
}

static void
cu_rope(struct compute *c, float *x, int n_heads, int head_dim, int n_rot, const float *inv_freq, int neox)
{
	struct cuda_impl *im = impl_of(c);
	size_t count = (size_t)im->n * n_heads * (n_rot / 2);

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	k_rope<<<blocks_for(count, 256), 256, 0, im->stream>>>(x, im->d_pos, im->n, n_heads, head_dim, n_rot, inv_freq,
							       neox);
	check_launch(im, "rope");
}

static void
cu_kv_write(struct compute *c, int layer, const float *k, const float *v)
{
	struct cuda_impl *im = impl_of(c);
	size_t off = (size_t)layer * (size_t)im->kv_rows * (size_t)im->kv_dim, count = (size_t)im->n * im->kv_dim;

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	k_kv_write<<<blocks_for(count, 256), 256, 0, im->stream>>>(im->k_cache + off, im->v_cache + off, k, v,
								   im->d_pos, im->d_table, im->max_blocks,
								   im->block_shift, im->n, im->kv_dim);
	check_launch(im, "KV write");
}

static void
cu_attention(struct compute *c, int layer, const float *q, int n_head, int n_head_kv, int head_dim, float *out)
{
	struct cuda_impl *im = impl_of(c);
	size_t off = (size_t)layer * (size_t)im->kv_rows * (size_t)im->kv_dim;
	struct cuda_kv kv = { im->k_cache + off, im->v_cache + off, im->d_pos,
			      im->d_table,       im->max_blocks,    im->block_shift };

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	int nsplit = im->att_part != NULL ? cuda_attention_splits(im->n, n_head, im->sms) : 1;
	cuda_attention(im->stream, &kv, q, im->n, n_head, n_head_kv, head_dim, out, nsplit, im->att_part);
	check_launch(im, "attention");
}

static void
cu_swiglu(struct compute *c, float *a, const float *b, size_t count)
{
	struct cuda_impl *im = impl_of(c);

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	k_swiglu<<<blocks_for(count, 256), 256, 0, im->stream>>>(a, b, count);
	check_launch(im, "swiglu");
}

static void
cu_add(struct compute *c, float *a, const float *b, size_t count)
{
	struct cuda_impl *im = impl_of(c);

	if (im->replay != NULL) /* replayed whole at the pass's end */
		return;
	k_add<<<blocks_for(count, 256), 256, 0, im->stream>>>(a, b, count);
	check_launch(im, "residual add");
}

static void
cu_gather_rows(struct compute *c, const float *x, int dim, float *out)
{
	struct cuda_impl *im = impl_of(c);
	size_t count = (size_t)im->n_out * dim;

	if (im->replay != NULL || count == 0) /* replayed whole at the pass's end, or nothing */
		return;
	k_gather_rows<<<blocks_for(count, 256), 256, 0, im->stream>>>(x, im->d_rows, im->n_out, dim, out);
	check_launch(im, "gather rows");
}

/* Stage tokens, positions, output rows and flattened block tables in
 * pinned memory and copy them over in one transfer, outside any graph:
 * a replayed pass reads them from the same device buffer.  The previous
 * pass may still be reading that buffer: end it and wait for it first. */
static void
cu_set_batch(struct compute *c, const struct compute_batch *b)
{
	struct cuda_impl *im = impl_of(c);
	int32_t *h = im->h_stage, mt = im->max_tokens;

	finish_pass(im);
	check(im, cudaStreamSynchronize(im->stream), "waiting for the previous pass");
	im->n = b->n;
	im->n_out = b->n_out;
	memcpy(h, b->tokens, (size_t)b->n * sizeof(int32_t));
	memcpy(h + mt, b->pos, (size_t)b->n * sizeof(int32_t));
	if (b->n_out > 0)
		memcpy(h + 2 * mt, b->out_rows, (size_t)b->n_out * sizeof(int32_t));
	for (int t = 0; t < b->n; t++)
		memcpy(h + 3 * mt + (size_t)t * im->max_blocks, b->table[t],
		       (size_t)((b->pos[t] >> im->block_shift) + 1) * sizeof(int32_t));
	size_t used = 3 * (size_t)mt + (size_t)b->n * im->max_blocks;
	check(im, cudaMemcpyAsync(im->d_stage, h, used * sizeof(int32_t), cudaMemcpyHostToDevice, im->stream),
	      "copying the batch");
	start_pass(im, b);
}

/* -------------------------------------------------------------- memory */

static void *
cu_alloc(struct compute *c, size_t bytes)
{
	struct cuda_impl *im = impl_of(c);
	void *p = NULL;

	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		cudaGetLastError(); /* an allocation failure is not sticky: clear it */
		return NULL;
	}
	/* on our stream: a non-blocking stream does not wait for the legacy one */
	if (check(im, cudaMemsetAsync(p, 0, bytes ? bytes : 1, im->stream), "clearing new memory") < 0) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

static void
cu_release(struct compute *c, void *p)
{
	(void)c;
	if (p != NULL)
		cudaFree(p);
}

static int
cu_upload(struct compute *c, void *dst, const void *src, size_t bytes)
{
	struct cuda_impl *im = impl_of(c);

	/* on our stream, then wait: a copy from pageable memory may return
	 * before its DMA is done, and src may go once this returns */
	finish_pass(im);
	if (check(im, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream), "upload") < 0 ||
	    check(im, cudaStreamSynchronize(im->stream), "upload") < 0)
		return PRIVAI_EIO;
	return PRIVAI_OK;
}

static int
cu_download(struct compute *c, void *dst, const void *src, size_t bytes)
{
	struct cuda_impl *im = impl_of(c);

	finish_pass(im);
	check(im, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream), "download");
	check(im, cudaStreamSynchronize(im->stream), "a forward pass");
	return im->failed ? PRIVAI_EIO : PRIVAI_OK;
}

static int
cu_prepare_weight(struct compute *c, const struct weight *src, struct compute_weight *dst)
{
	size_t bytes = (size_t)src->rows * src->row_bytes;
	void *d;

	dst->w = *src;
	dst->w.data = NULL; /* only ever device memory, so release_weight() may free it */
	dst->aux = NULL;
	if (dq_block_bytes(src->type) == 0 || src->cols % 32 != 0)
		return PRIVAI_EUNSUPPORTED;
	/* 16 bytes more: k_mmv loads whole aligned 16-byte words, the
	 * last row's last word past its end */
	if ((d = cu_alloc(c, bytes + 16)) == NULL)
		return PRIVAI_ENOMEM;
	if (cu_upload(c, d, src->data, bytes) < 0) {
		cudaFree(d);
		return PRIVAI_EIO;
	}
	dst->w.data = d;
	return PRIVAI_OK;
}

static void
cu_release_weight(struct compute *c, struct compute_weight *w)
{
	(void)c;
	if (w->w.data != NULL)
		cudaFree((void *)w->w.data);
	w->w.data = NULL;
}

static int
cu_memory(struct compute *c, size_t *free_bytes, size_t *total_bytes)
{
	*free_bytes = *total_bytes = 0;
	return check(impl_of(c), cudaMemGetInfo(free_bytes, total_bytes), "reading the device's memory") < 0
		       ? PRIVAI_EIO
		       : PRIVAI_OK;
}

/* Positions per layer the budget leaves room for, as vLLM sizes its pool:
 * this engine's share of the device, less what it already holds (the
 * memory that went since it started, weights and buffers), and never more
 * than is free less KV_SLACK for cuBLAS's workspaces.  Other processes'
 * memory does not count against the share, so two engines of 0.4 each fit
 * one GPU.  A multiple of the block size; 0 when not one block fits. */
static int64_t
kv_rows_in_budget(struct compute *c, const struct compute_shape *s)
{
	struct cuda_impl *im = impl_of(c);
	size_t free_b, total;
	double per_row = 2.0 * s->n_layer * s->kv_dim * sizeof(__half);

	if (cu_memory(c, &free_b, &total) < 0 || s->mem_fraction <= 0)
		return 0;
	double held = im->free_at_start > free_b ? (double)(im->free_at_start - free_b) : 0.0;
	double room = s->mem_fraction * (double)total - held;
	double avail = (double)free_b - (double)KV_SLACK;
	if (room > avail)
		room = avail;
	if (room < per_row * s->block_size)
		return 0;
	int64_t rows = (int64_t)(room / per_row);
	return rows / s->block_size * s->block_size;
}

static int
cu_reserve(struct compute *c, struct compute_shape *s, size_t *kv_bytes)
{
	struct cuda_impl *im = impl_of(c);
	int shift = 0;

	*kv_bytes = 0;
	while ((1 << shift) < s->block_size)
		shift++;
	if ((1 << shift) != s->block_size || s->max_tokens < 1)
		return PRIVAI_EINVAL;
	im->block_shift = shift;
	im->n_layer = s->n_layer;
	im->kv_dim = s->kv_dim;
	im->max_tokens = s->max_tokens;
	im->max_blocks = (s->max_ctx + s->block_size - 1) / s->block_size;
	size_t stage = 3 * (size_t)s->max_tokens + (size_t)s->max_tokens * im->max_blocks;
	if (cudaMallocHost((void **)&im->h_stage, stage * sizeof(int32_t)) != cudaSuccess ||
	    (im->d_stage = (int32_t *)cu_alloc(c, stage * sizeof(int32_t))) == NULL)
		return PRIVAI_ENOMEM;
	im->d_tokens = im->d_stage;
	im->d_pos = im->d_stage + s->max_tokens;
	im->d_rows = im->d_stage + 2 * s->max_tokens;
	im->d_table = im->d_stage + 3 * s->max_tokens;
	im->x16_len = 2 * (size_t)s->max_tokens * (size_t)s->max_cols; /* hi and lo */
	im->w16_len = GEMM_TILE_HALFS > (size_t)s->max_cols ? GEMM_TILE_HALFS : (size_t)s->max_cols;
	if (s->max_tokens > MMV_MAX_TOKENS &&
	    ((im->x16 = (__half *)cu_alloc(c, im->x16_len * sizeof(__half))) == NULL ||
	     (im->w16 = (__half *)cu_alloc(c, im->w16_len * sizeof(__half))) == NULL))
		return PRIVAI_ENOMEM;
	size_t xq_len = (size_t)MMV_MAX_TOKENS * (size_t)s->max_cols;
	if (im->next &&
	    ((im->xq = (int8_t *)cu_alloc(c, xq_len)) == NULL ||
	     (im->xd = (float *)cu_alloc(c, xq_len / 32 * sizeof(float))) == NULL ||
	     (im->att_part = (float *)cu_alloc(c, 2 * (size_t)im->sms * (HEAD_DIM_MAX + 2) * sizeof(float))) == NULL))
		return PRIVAI_ENOMEM;
	/* the KV cache last: on a budget it takes what the rest leaves */
	if (s->kv_rows == 0 && (s->kv_rows = kv_rows_in_budget(c, s)) == 0)
		return PRIVAI_ENOMEM;
	im->kv_rows = s->kv_rows;
	size_t kv_halfs = (size_t)s->n_layer * (size_t)s->kv_rows * (size_t)s->kv_dim;
	*kv_bytes = 2 * kv_halfs * sizeof(__half);
	if ((im->k_cache = (__half *)cu_alloc(c, kv_halfs * sizeof(__half))) == NULL ||
	    (im->v_cache = (__half *)cu_alloc(c, kv_halfs * sizeof(__half))) == NULL)
		return PRIVAI_ENOMEM;
	return PRIVAI_OK;
}

static void
cu_destroy(struct compute *c)
{
	struct cuda_impl *im = impl_of(c);

	if (im != NULL) {
		if (im->capturing) { /* a recording left open: close and drop it */
			cudaGraph_t g = NULL;
			if (cudaStreamEndCapture(im->stream, &g) == cudaSuccess && g != NULL)
				cudaGraphDestroy(g);
		}
		for (int n = 0; n <= MMV_MAX_TOKENS; n++)
			for (int k = 0; k <= MMV_MAX_TOKENS; k++)
				if (im->graphs[n][k] != NULL)
					cudaGraphExecDestroy(im->graphs[n][k]);
		cudaFree(im->k_cache);
		cudaFree(im->v_cache);
		cudaFree(im->x16);
		cudaFree(im->w16);
		cudaFree(im->xq);
		cudaFree(im->xd);
		cudaFree(im->att_part);
		cudaFree(im->d_stage);
		cudaFreeHost(im->h_stage);
		if (im->blas != NULL)
			cublasDestroy(im->blas);
		if (im->stream != NULL)
			cudaStreamDestroy(im->stream);
		free(im);
	}
	free(c);
}

/* In compute_ops' order: C++ designators must follow it. */
static const struct compute_ops cuda_ops = {
	.name = "cuda",
	.destroy = cu_destroy,
	.reserve = cu_reserve,
	.memory = cu_memory,
	.alloc = cu_alloc,
	.release = cu_release,
	.upload = cu_upload,
	.download = cu_download,
	.prepare_weight = cu_prepare_weight,
	.release_weight = cu_release_weight,
	.set_batch = cu_set_batch,
	.get_rows = cu_get_rows,
	.matmul = cu_matmul,
	.rmsnorm = cu_rmsnorm,
	.add_rows = cu_add_rows,
	.rope = cu_rope,
	.kv_write = cu_kv_write,
	.attention = cu_attention,
	.swiglu = cu_swiglu,
	.add = cu_add,
	.gather_rows = cu_gather_rows,
	.matmul_n = cu_matmul_n,
};

/* ------------------------------------------------------------- entries */

/* What cudaGetDeviceCount's failure means to someone installing this. */
static int
explain_no_device(cudaError_t e, char *err)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");

	switch (e) {
	case cudaErrorInsufficientDriver:
		return privai_fail(err, PRIVAI_EUNAVAIL,
				   "no usable NVIDIA driver: libcuda.so.1 is missing or older than this CUDA %d.%d "
				   "build needs (%s)",
				   CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorString(e));
	case cudaErrorNoDevice:
		return privai_fail(err, PRIVAI_EUNAVAIL, "the NVIDIA driver sees no GPU%s%s%s",
				   vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
	default:
		return privai_fail(err, PRIVAI_EUNAVAIL, "CUDA cannot start: %s", cudaGetErrorString(e));
	}
}

extern "C" int
privai_cuda_probe(char *info, char *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	struct cudaDeviceProp prop;

	if (e != cudaSuccess || n == 0)
		return explain_no_device(e != cudaSuccess ? e : cudaErrorNoDevice, err);
	if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
		return explain_no_device(e, err);
	if (info != NULL)
		snprintf(info, 128, "%.80s, compute %d.%d, %zu MiB", prop.name, prop.major, prop.minor,
			 prop.totalGlobalMem >> 20);
	return PRIVAI_OK;
}

extern "C" int
privai_cuda_new(const struct compute_params *p, struct compute **ret, char *err)
{
	struct compute *c = (struct compute *)calloc(1, sizeof(*c));
	struct cuda_impl *im = (struct cuda_impl *)calloc(1, sizeof(*im));
	int r;

	(void)p;
	if (c == NULL || im == NULL) {
		free(c);
		free(im);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	}
	c->ops = &cuda_ops;
	c->impl = im;
	if ((r = privai_cuda_probe(NULL, err)) < 0) {
		cu_destroy(c);
		return r;
	}
	if (cudaSetDevice(0) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking) != cudaSuccess) {
		cu_destroy(c);
		return privai_fail(err, PRIVAI_EUNAVAIL, "CUDA cannot start a stream on the device");
	}
	if (cublasCreate(&im->blas) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(im->blas, im->stream) != CUBLAS_STATUS_SUCCESS) {
		cu_destroy(c);
		return privai_fail(err, PRIVAI_EUNAVAIL, "cuBLAS cannot start (is libcublas from CUDA %d installed?)",
				   CUDART_VERSION / 1000);
	}
	const char *next = getenv("PRIVAI_CUDA_NEXT");
	im->next = next != NULL && strcmp(next, "1") == 0;
	if (cudaDeviceGetAttribute(&im->sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || im->sms < 1)
		im->sms = 1;
	size_t refused = cuda_mmv_allow_smem();
	if (refused != 0) {
		cu_destroy(c);
		return privai_fail(err, PRIVAI_EUNAVAIL,
				   "the device refused %zu bytes of shared memory a block for the matrix-vector "
				   "kernels",
				   refused);
	}
	size_t total;
	if (cudaMemGetInfo(&im->free_at_start, &total) != cudaSuccess) {
		cu_destroy(c);
		return privai_fail(err, PRIVAI_EUNAVAIL, "CUDA cannot read the device's memory");
	}
	*ret = c;
	return PRIVAI_OK;
}
