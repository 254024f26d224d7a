/*
 * Models of the llama family (llama, qwen2) loaded from GGUF, and the
 * inference context that runs them.
 *
 * An engine_model is immutable after load and knows no backend:
 * hyperparameters, weights pointing into the read-only file mapping, and
 * small float copies of norms and biases, all in host memory.  An
 * engine_ctx holds everything mutable for generation in the backend it
 * was created on (compute.h): the weights as that backend wants them, the
 * KV cache (sized from the context length when the context is created)
 * and the activations (sized for the largest batch).  Nothing is
 * allocated per token.
 */
#ifndef PRIVAI_MODEL_H
#define PRIVAI_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "privai/compute.h"
#include "privai/gguf.h"

enum model_arch { ARCH_LLAMA, ARCH_QWEN2 };

struct model_hparams {
	enum model_arch arch;
	char arch_name[32];
	int n_vocab;
	int n_ctx_train;
	int n_embd;
	int n_layer;
	int n_head;
	int n_head_kv;
	int n_ff;
	int head_dim; /* n_embd / n_head unless the file says otherwise */
	int n_rot;    /* rotated dims per head */
	float rope_base;
	float rope_freq_scale; /* 1 / linear scaling factor */
	float rms_eps;
	int rope_neox; /* pairs (i, i + n_rot/2) rather than (2i, 2i+1) */
};

struct model_layer {
	float *attn_norm;                   /* (n_embd) */
	struct weight wq, wk, wv, wo;       /* (n_head*hd, n_embd) (kv*hd, n_embd) x2, (n_embd, n_head*hd) */
	float *bq, *bk, *bv;                /* qwen2 biases, NULL for llama */
	float *ffn_norm;                    /* (n_embd) */
	struct weight w_gate, w_up, w_down; /* (n_ff, n_embd) x2, (n_embd, n_ff) */
};

struct engine_model {
	struct gguf_file *file;
	struct model_hparams hp;
	struct weight tok_embd;     /* (n_vocab, n_embd) */
	float *output_norm;         /* (n_embd) */
	struct weight output;       /* (n_vocab, n_embd); tok_embd when tied */
	float *inv_freq;            /* (n_rot/2) rope frequencies incl. rope_freqs */
	struct model_layer *layers; /* (n_layer) */
	uint64_t weight_bytes;      /* bytes of all tensors */
};

/* Load `path`.  Refuses unknown architectures and weight types by name,
 * and any tensor whose shape disagrees with the hyperparameters. */
int engine_model_load(const char *path, struct engine_model **ret_model, char *err);
/* Build a model from an already opened file; takes ownership of `file`
 * on success only. */
int engine_model_from_gguf(struct gguf_file *file, struct engine_model **ret_model, char *err);
void engine_model_free(struct engine_model *m);

/* The KV cache is paged: fixed blocks of ENGINE_KV_BLOCK positions shared
 * by every sequence through per-sequence block tables (a power of two, so
 * the attention kernel finds a position's row with a shift and a mask). */
#define ENGINE_KV_BLOCK 16

/* The widest attention head the backends' kernels take (keys and values
 * of one head are held in registers or on the stack). */
#define ENGINE_HEAD_DIM_MAX 256

struct engine_ctx_params {
	int n_ctx;          /* longest sequence; 0: the model's training context, capped at 4096 */
	int n_batch;        /* tokens per forward pass; 0: 256 */
	int n_threads;      /* CPU threads; 0: the physical cores this process may use */
	int fixed_threads;  /* CPU: all of them even on busy CPUs (compute_params) */
	int max_threads;    /* CPU, with n_threads 0: threads to grow to with the CPUs (compute_params) */
	int n_kv_blocks;    /* blocks in the KV pool; 0: enough for one sequence of n_ctx */
	const char *device; /* the compute backend (compute.h): NULL or "cpu", "cuda" */
	/* on a device, with n_kv_blocks 0: the share of its memory this
	 * context may hold (vLLM's --gpu-memory-utilization); the KV pool
	 * gets what the weights and buffers leave.  0: one sequence's worth. */
	double mem_fraction;
	/* the tensor-parallel group this context is one rank of
	 * (privai/collective.h); NULL: the whole model here.  Every rank
	 * creates its context with the same parameters; rank 0 then runs
	 * forward passes and the others engine_follow(). */
	struct coll *group;
};

/* A context: the backend with the model's weights prepared for it, the
 * activations, the paged KV cache, and the one sequence engine_decode()
 * runs.  Opaque; engine_ctx_info() says what it was sized to. */
struct engine_ctx;

struct engine_ctx_info {
	int n_ctx, n_batch, n_kv_blocks;
	int n_vocab;          /* the model's: a row of logits */
	int n_embd;           /* a row of hidden state */
	size_t kv_bytes;      /* the KV cache, as the backend stores it */
	int n_past;           /* positions engine_decode()'s sequence holds */
	const char *device;   /* the backend's name */
	int n_threads;        /* CPU threads; 0 on another backend */
	int n_threads_active; /* of them at work now: 1 while other processes hold the CPUs */
	size_t mem_total;     /* the device's memory; 0 on the CPU */
	size_t mem_budget;    /* mem_fraction of it; 0 without a budget */
	int tp_rank, tp_size; /* this context's rank in its group; 0 of 1 alone */
	size_t weight_bytes;  /* of the model's layer and output weights, those this rank holds */
};

int engine_ctx_new(const struct engine_model *m, const struct engine_ctx_params *p, struct engine_ctx **ret_ctx,
		   char *err);
void engine_ctx_free(struct engine_ctx *c);
void engine_ctx_info(const struct engine_ctx *c, struct engine_ctx_info *info);
/* n_threads_active alone, callable from any thread (a relaxed read). */
int engine_ctx_threads_active(const struct engine_ctx *c);
/* Host work between forward passes (the scheduler's sampling) on the
 * context's CPU threads: fn(arg, part, parts) for every part, in
 * parallel where the backend is the CPU's, else on the caller.  From the
 * thread that runs the forward passes. */
void engine_ctx_parallel(struct engine_ctx *c, void (*fn)(void *arg, int part, int parts), void *arg);

/* One forward pass over tokens of any number of sequences, described by
 * a struct compute_batch (compute.h): token i is tokens[i] at position
 * pos[i] of the sequence whose block table is table[i]; the table must
 * hold blocks for positions 0..pos[i], and the cache must already hold
 * that sequence's earlier positions (or they must come earlier in this
 * batch).  Logits are written for the tokens listed in out_rows (n_out of
 * them, in any order) to logits (n_out x n_vocab, host memory; only these
 * rows come back from the backend). */
/* PRIVAI_EINVAL for an empty or oversized batch, a token outside the
 * vocabulary, a position outside the context, a block outside the pool or
 * rows asked for without `logits`; nothing is written then.  A backend's
 * failure (a lost device) is returned as its error. */
int engine_forward(struct engine_ctx *c, const struct compute_batch *b, float *logits, char *err);
/* The same, with adapter (NULL: none) giving each token's LoRA adapter
 * (1-based, as engine_ctx_add_lora numbered them; 0 none), and when
 * hidden is not NULL the final hidden state of each output row (after the
 * output norm, before the LM head: n_out x n_embd, host memory), which
 * embeddings pool. */
int engine_forward_ex(struct engine_ctx *c, const struct compute_batch *b, const int32_t *adapter, float *logits,
		      float *hidden, char *err);

#define ENGINE_MAX_LORA 16
struct lora_adapter;
/* Make adapter a (privai/lora.h; the caller keeps and frees it, after the
 * context) available to forward passes; returns its 1-based number, or
 * PRIVAI_EINVAL (not the cpu backend, or too many). */
int engine_ctx_add_lora(struct engine_ctx *c, struct lora_adapter *a, char *err);
/* Take adapter number k out (its number may be reused); returns it for
 * the caller to free, NULL when k names none.  Neither call may overlap a
 * forward pass (the scheduler serialises them: scheduler_lora_add). */
struct lora_adapter *engine_ctx_remove_lora(struct engine_ctx *c, int k);
/* Whether adapter number k is loaded. */
int engine_ctx_lora_loaded(const struct engine_ctx *c, int k);

/* On a rank other than 0 of a group: run every forward pass rank 0
 * runs, as it sends them, until rank 0's context is freed.  PRIVAI_OK
 * then; an error when the group failed (a peer that died or hung ends
 * every rank's process first: privai/collective.h). */
int engine_follow(struct engine_ctx *c, char *err);

/* On rank 0 of a group, idle: check that every rank still answers (a
 * step that runs no pass, and an all-reduce of one value).  A rank that
 * died or hung ends the group as a failed forward pass would; PRIVAI_OK
 * at once on a context that is not rank 0 of a group. */
int engine_ping(struct engine_ctx *c, char *err);

/* Forget the single sequence engine_decode() runs (a new conversation). */
void engine_ctx_reset(struct engine_ctx *c);

/* Run `n` tokens at positions n_past.. of the single sequence through the
 * model, appending them to the cache.  Longer inputs are split into
 * batches.  When logits_all is set, logits for every token are written to
 * out (n x n_vocab); otherwise only the last token's (n_vocab).
 * `out` may be NULL when no logits are wanted (a prompt to cache).
 * PRIVAI_ERANGE when the tokens would overflow the context; PRIVAI_EINVAL
 * for a token id outside the vocab. */
int engine_decode(struct engine_ctx *c, const int32_t *tokens, int n, int logits_all, float *out, char *err);

#endif
