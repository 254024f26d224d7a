/*
 * The compute interface between the model code and a backend.
 *
 * Model code (model_llama.c) describes a forward pass only in terms of these
 * operations on row-major float32 activations and typed weight matrices; it
 * never touches SIMD, threads or device memory.  The CPU backend implements
 * them over the thread pool; a CUDA backend implements the same table.
 */
#ifndef PRIVAI_COMPUTE_H
#define PRIVAI_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix of `rows` rows of `cols` elements of `type`, row-major,
 * rows `row_bytes` apart (usually inside the read-only model mapping). */
struct weight {
	uint32_t type;
	int64_t rows, cols;
	size_t row_bytes;
	const void *data;
	/* Q8_0 only: the sum of each block's 32 quants (rows x cols/32), so
	 * the CPU's small-batch kernel need not derive it per call; NULL
	 * otherwise. */
	int16_t *bsum;
};

struct compute;

struct compute_ops {
	const char *name;
	/* Allocate all scratch for batches of up to max_tokens tokens, weight
	 * rows of up to max_cols elements and attention over max_ctx positions.
	 * Called once when a context is created, so no operation allocates
	 * (and none can fail) while tokens are generated.  PRIVAI_OK or
	 * PRIVAI_ENOMEM. */
	int (*reserve)(struct compute *c, int64_t max_cols, int max_tokens, int max_ctx);
	/* y[t][r] = sum_c w[r][c] * x[t][c] for t < n; x is n x w->cols,
	 * y is n x w->rows. */
	void (*matmul)(struct compute *c, const struct weight *w, const float *x, int n, float *y);
	/* out[t] = dequantized row ids[t] of w (embedding lookup). */
	void (*get_rows)(struct compute *c, const struct weight *w, const int32_t *ids, int n, float *out);
	/* out[t] = x[t] / rms(x[t]) * g, rows of dim elements. */
	void (*rmsnorm)(struct compute *c, const float *x, const float *g, int n, int dim, float eps, float *out);
	/* Rotate the first n_rot dims of each head in x[t] (n_heads heads of
	 * head_dim) by position pos[t]; neox pairs (i, i+n_rot/2) instead of
	 * (2i, 2i+1).  inv_freq has n_rot/2 entries. */
	void (*rope)(struct compute *c, float *x, int n, int n_heads, int head_dim, int n_rot, const int32_t *pos,
		     const float *inv_freq, int neox);
	/* Causal attention for n tokens, each of its own sequence: q is n x
	 * (n_head * head_dim); token t sees positions 0..pos[t] of its sequence,
	 * whose keys/values live in the paged cache: position p is row
	 * table[t][p / block_size] * block_size + p % block_size of k_cache and
	 * v_cache (rows kv_stride floats apart, n_head_kv heads each). */
	void (*attention)(struct compute *c, const float *q, int n, const int32_t *pos, const int32_t *const *table,
			  int block_size, const float *k_cache, const float *v_cache, size_t kv_stride, int n_head,
			  int n_head_kv, int head_dim, float *out);
	/* a[i] = silu(a[i]) * b[i] for n*dim elements. */
	void (*swiglu)(struct compute *c, float *a, const float *b, size_t count);
	/* a[i] += b[i]. */
	void (*add)(struct compute *c, float *a, const float *b, size_t count);
};

struct compute {
	const struct compute_ops *ops;
	void *impl;
};

/* The CPU backend over a pool of n_threads.  Returns PRIVAI_OK or an
 * error; release with compute_cpu_free(). */
int compute_cpu_new(int n_threads, struct compute **ret);
void compute_cpu_free(struct compute *c);

/* Which SIMD level the CPU backend picked ("avx512-vnni", "avx2", "scalar"). */
const char *compute_cpu_simd_name(void);

/* The backends this build has, NULL-terminated ("cpu" always; "cuda"
 * only in a build with the CUDA backend), and whether it has one. */
const char *const *compute_backends(void);
int compute_has_backend(const char *name);

#endif
