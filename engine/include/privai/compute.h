/*
 * The compute interface between the model code and a backend.
 *
 * A backend owns every buffer a forward pass touches: the weights as it
 * wants them (prepared once when a context is created: block sums on the
 * CPU, an upload on a GPU), the activations, the paged KV cache and its
 * own scratch.  Model code (model_llama.c) holds pointers to that memory
 * and passes them to these operations; it never reads or writes through
 * them, so the same code drives host memory and device memory.  The only
 * bytes that cross back are the ones asked for with download().
 */
#ifndef PRIVAI_COMPUTE_H
#define PRIVAI_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix as the model file has it: `rows` rows of `cols`
 * elements of `type`, row-major, rows `row_bytes` apart, in host memory
 * (usually the read-only mapping of the file). */
struct weight {
	uint32_t type;
	int64_t rows, cols;
	size_t row_bytes;
	const void *data;
};

/* A weight as a backend holds it, made by prepare_weight(): the same type
 * and shape, `w.data` where the backend reads it (the file mapping on the
 * CPU, device memory on a GPU), and whatever else the backend keeps for
 * it (the CPU's Q8_0 block sums). */
struct compute_weight {
	struct weight w;
	void *aux;
};

/* What a context will ask of its backend, for reserve(). */
struct compute_shape {
	int64_t max_cols;    /* widest weight row and activation row */
	int max_tokens;      /* tokens in one forward pass */
	int max_ctx;         /* longest sequence attention spans */
	int n_layer;         /* the KV cache: layers, */
	int64_t kv_rows;     /* positions in each layer's pool (blocks x block_size);
			   * 0: as many as mem_fraction leaves room for, set by reserve() */
	double mem_fraction; /* of the device's memory this process may hold, when kv_rows is 0 */
	int kv_dim;          /* K (and V) values per position (KV heads x head_dim), */
	int block_size;      /* positions per KV block, a power of two, */
	int head_dim;        /* values per KV head (a divisor of kv_dim; 0: kv_dim, one head) */
};

/* The tokens of one forward pass, in host memory.  Token i is tokens[i]
 * at position pos[i] of the sequence whose block table is table[i]; the
 * rows out_rows[0..n_out) are the ones whose logits are wanted. */
struct compute_batch {
	int n;
	const int32_t *tokens;
	const int32_t *pos;
	const int32_t *const *table;
	int n_out;
	const int32_t *out_rows;
	/* Set by the model for its plain pass (logits only, one rank, no
	 * adapter), whose operations are the same for every batch of the same
	 * n and n_out: a backend may record such a pass once and replay it
	 * (CUDA graphs).  0 everywhere else. */
	int replayable;
};

struct compute;

/*
 * Operations on backend memory.  Activations are row-major float32 in
 * buffers from alloc().  The operations that read token ids, positions,
 * block tables or output rows take them from the batch set last by
 * set_batch().  Once reserve() has succeeded nothing allocates while
 * tokens are generated; operations queued on a device report a failure at
 * the next download().
 */
struct compute_ops {
	const char *name;
	void (*destroy)(struct compute *c);
	/* Size the scratch and the KV cache for `s` (choosing s->kv_rows when
	 * it is 0: what mem_fraction of the device leaves after everything
	 * already held, a multiple of block_size); *kv_bytes is set to the
	 * cache's size even when that fails.  PRIVAI_OK, PRIVAI_ENOMEM, or
	 * PRIVAI_EUNSUPPORTED for kv_rows 0 on a backend without a budget. */
	int (*reserve)(struct compute *c, struct compute_shape *s, size_t *kv_bytes);
	/* The device's free and total memory; PRIVAI_EUNSUPPORTED on the CPU. */
	int (*memory)(struct compute *c, size_t *free_bytes, size_t *total_bytes);
	/* Zeroed backend memory, or NULL. */
	void *(*alloc)(struct compute *c, size_t bytes);
	void (*release)(struct compute *c, void *p);
	/* Host to backend and back; PRIVAI_OK or an error (a failed device). */
	int (*upload)(struct compute *c, void *dst, const void *src, size_t bytes);
	int (*download)(struct compute *c, void *dst, const void *src, size_t bytes);
	/* Make `src` usable by matmul/get_rows; PRIVAI_OK or PRIVAI_ENOMEM. */
	int (*prepare_weight)(struct compute *c, const struct weight *src, struct compute_weight *dst);
	void (*release_weight)(struct compute *c, struct compute_weight *w);

	/* The batch the next operations are about (copied: `b` may go). */
	void (*set_batch)(struct compute *c, const struct compute_batch *b);
	/* out[t] = dequantized row tokens[t] of w (embedding lookup). */
	void (*get_rows)(struct compute *c, const struct compute_weight *w, float *out);
	/* y[t][r] = sum_c w[r][c] * x[t][c] for t < n; x is n x cols, y n x rows. */
	void (*matmul)(struct compute *c, const struct compute_weight *w, const float *x, int n, float *y);
	/* out[t] = x[t] / rms(x[t]) * g, n rows of dim elements. */
	void (*rmsnorm)(struct compute *c, const float *x, const float *g, int n, int dim, float eps, float *out);
	/* x[t][i] += b[i]: a bias on n rows of dim elements. */
	void (*add_rows)(struct compute *c, float *x, const float *b, int n, int dim);
	/* Rotate the first n_rot dims of each head in x[t] (n_heads heads of
	 * head_dim) by position pos[t]; neox pairs (i, i+n_rot/2) instead of
	 * (2i, 2i+1).  inv_freq has n_rot/2 entries. */
	void (*rope)(struct compute *c, float *x, int n_heads, int head_dim, int n_rot, const float *inv_freq,
		     int neox);
	/* Store k[t] and v[t] (kv_dim each) in layer `layer` of the cache at
	 * the row of position pos[t] in table[t]. */
	void (*kv_write)(struct compute *c, int layer, const float *k, const float *v);
	/* Causal attention for the batch's tokens, each of its own sequence:
	 * q is n x (n_head * head_dim); token t sees positions 0..pos[t] of its
	 * sequence in layer `layer` of the cache (n_head_kv heads). */
	void (*attention)(struct compute *c, int layer, const float *q, int n_head, int n_head_kv, int head_dim,
			  float *out);
	/* a[i] = silu(a[i]) * b[i]. */
	void (*swiglu)(struct compute *c, float *a, const float *b, size_t count);
	/* a[i] += b[i]. */
	void (*add)(struct compute *c, float *a, const float *b, size_t count);
	/* out[i] = x[out_rows[i]] for i < n_out, rows of dim elements. */
	void (*gather_rows)(struct compute *c, const float *x, int dim, float *out);
	/* matmul of nw (at most 16) weights with the same x: y[i] = w[i] x,
	 * each as matmul() computes it, where a backend can share the work on
	 * x and the hand-offs (Q, K and V; gate and up).  NULL: the caller
	 * calls matmul() for each. */
	void (*matmul_n)(struct compute *c, const struct compute_weight *const *w, int nw, const float *x, int n,
			 float *const *y);
};

struct compute {
	const struct compute_ops *ops;
	void *impl;
};

struct compute_params {
	int n_threads; /* CPU: pool threads; 0: the physical cores this process may use */
	/* CPU: keep every thread at work even while other processes keep them
	 * waiting for a CPU (threadpool_adapt()); 0 adapts */
	int fixed_threads;
	/* CPU, with n_threads 0 and adapting: start this many threads when
	 * more than the cores it may use now; the pool runs as many as its
	 * CPUs have cores (threadpool_adapt.h), so it grows when they do */
	int max_threads;
};

/* The backend called `name` ("cpu", "cuda"; NULL is "cpu").  PRIVAI_OK,
 * PRIVAI_EUNSUPPORTED for a name no backend has, PRIVAI_EUNAVAIL when
 * the backend cannot run here (err names what is missing: its library,
 * the driver, a device), or the backend's error; release with
 * compute_free(). */
int compute_new(const char *name, const struct compute_params *p, struct compute **ret, char *err);
void compute_free(struct compute *c);

/* The CPU backend's threads, and those of them at work now (threadpool_width()). */
int compute_cpu_threads(const struct compute *c);
int compute_cpu_threads_active(const struct compute *c);
/* fn(arg, part, parts) for every part, on the CPU backend's threads as a
 * job of its pool (threadpool_run()); on another backend, on the caller
 * as one part.  From the thread that runs the forward passes, between
 * them. */
void compute_cpu_parallel(struct compute *c, void (*fn)(void *arg, int part, int parts), void *arg);
/* Which SIMD level the CPU backend picked ("avx512-vnni", "avx2", "scalar"). */
const char *compute_cpu_simd_name(void);
/* Whether its decode kernels prefetch the weights they stream: on for
 * Intel CPUs, off for others; PRIVAI_PREFETCH=0 or 1 decides instead. */
int compute_cpu_prefetch(void);
/* How far ahead it asks for each line, in bytes, into L2 and into L1. */
void compute_cpu_prefetch_ahead(int *l2_bytes, int *l1_bytes);
/* Whether its float decode kernels ask for the next rows' lines and its
 * decode batches (3 tokens and more) for their weights: on unless
 * PRIVAI_PREFETCH=0. */
int compute_cpu_wide_prefetch(void);
/* Whether the CPU backend's 8-row groups take two tokens a 512-bit
 * vector (decode batches, short prompts): where a 512-bit vpdpbusd does
 * COMPUTE_CPU_PAIRS_MIN_SPEEDUP times a 256-bit one's products on this
 * CPU, unless PRIVAI_PAIRS=0 or 1 says; *speedup gets that measured
 * ratio, 0 where there are no 512-bit vectors.  The pairs pay where the
 * ratio is about 2 (Zen 5: 2.00, units 512 bits wide); where it is about
 * 1 (a 512-bit instruction in two halves' turns, Zen 4) they would widen
 * chunks for no gain, and the 8-row kernels measured there stay. */
#define COMPUTE_CPU_PAIRS_MIN_SPEEDUP 1.5
int compute_cpu_pairs(double *speedup);
/* How the CPU backend multiplies weights of `type` (a GGUF type id) by a
 * pass of n_tokens on this CPU ("int8 GEMM, 16-token tiles", "float
 * register tile", ...); NULL for a type it cannot read. */
const char *compute_cpu_path(uint32_t type, int n_tokens);
/* Whether the CPU backend uses oneDNN: its version and the implementation
 * it runs bfloat16 matmuls on, or why not. */
const char *compute_cpu_onednn(void);

/* Whether backend `name` can run here, without starting it: PRIVAI_OK
 * with a line about it in `info` (128 bytes; NULL allowed: "NVIDIA H100
 * 80GB HBM3, compute 9.0, 81559 MiB"), or compute_new()'s error.  The
 * CUDA backend's library is loaded on the first call that names it. */
int compute_probe(const char *name, char *info, char *err);

/* The backends this engine knows, NULL-terminated ("cpu", "cuda");
 * compute_probe() says whether one can run. */
const char *const *compute_backends(void);

#endif
