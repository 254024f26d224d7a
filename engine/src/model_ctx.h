/*
 * The inside of an engine context (privai/model.h), shared by the
 * forward pass (model_llama.c) and the tensor-parallel step protocol
 * (model_tp.c); nothing else sees it.
 */
#ifndef PRIVAI_MODEL_CTX_H
#define PRIVAI_MODEL_CTX_H

#include "privai/collective.h"
#include "privai/model.h"
#include "privai/status.h"
#include "tp_part.h"

/* A layer's weights, norms and biases as the context's backend holds
 * them; the biases are NULL for llama. */
struct ctx_layer {
	struct compute_weight wq, wk, wv, wo, w_gate, w_up, w_down;
	float *attn_norm, *ffn_norm;
	float *bq, *bk, *bv;
};

struct engine_ctx {
	const struct engine_model *model;
	struct compute *compute;
	int n_ctx, n_batch, n_kv_blocks;
	size_t kv_bytes;
	size_t mem_total, mem_budget; /* the device's, and this context's share; 0 on the CPU */
	/* the model, prepared for the backend (backend memory) */
	struct compute_weight tok_embd, output_own;
	const struct compute_weight *output; /* &tok_embd when the model ties them */
	float *output_norm, *inv_freq;
	struct ctx_layer *layers;
	/* activations for up to n_batch tokens (backend memory) */
	float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *logits;
	/* the single sequence engine_decode() runs: blocks 0.. in order (host) */
	int n_past;
	int32_t *seq0_table;
	int32_t *d_pos, *d_rows;
	const int32_t **d_table;
	/* LoRA adapters (host memory, CPU backend only) and, during a
	 * forward pass, each token's (1-based; 0 none) */
	struct lora_adapter *lora[ENGINE_MAX_LORA];
	int n_lora;
	const int32_t *adapter;
	/* tensor parallel (model_tp.c): the group (NULL alone), this rank's
	 * part of the model, the memory its column slices were copied into */
	struct coll *group;
	struct tp_part part;
	struct tp_owned owned;
	int tp_live;   /* every rank has its context: steps may flow */
	int tp_status; /* the first failure of a collective in this pass */
	char tp_err[PRIVAI_ERR_LEN];
	float *logits_part; /* host: this rank's slice of the logits (n_batch x part.n_vocab) */
	float *logits_all;  /* host, rank 0: every rank's slice, in rank order */
	int *gather_counts;
	int32_t *step;   /* a step's description, sent (rank 0) or received */
	size_t step_cap; /* int32s */
	const int32_t **step_table;
};

/* Whether batch b can run on c (PRIVAI_EINVAL naming what cannot). */
int model_check_batch(const struct engine_ctx *c, const struct compute_batch *b, char *err);
/* The forward pass of a checked batch, on this rank's part. */
int model_forward_run(struct engine_ctx *c, const struct compute_batch *b, float *logits, float *hidden, char *err);

/* model_tp.c: this rank's part, and the buffers to gather logits. */
int tp_ctx_begin(struct engine_ctx *c, struct coll *g, char *err);
/* Every rank of g reports r (c may be NULL when r says it failed); each
 * returns its own r, or an error when another rank failed. */
int tp_ctx_agree(struct engine_ctx *c, struct coll *g, int r, char *err);
/* Rank 0 tells the others to stop following; then frees what begin made. */
void tp_ctx_end(struct engine_ctx *c);
/* Rank 0: send batch b to the other ranks before running it. */
int tp_send_step(struct engine_ctx *c, const struct compute_batch *b, char *err);
/* Complete a row-parallel matmul's partial sums (n values). */
void tp_allreduce(struct engine_ctx *c, float *x, size_t n);
/* Every rank's n_out rows of its logits slice (c->logits, backend
 * memory) assembled at rank 0 into `logits` (n_out x n_vocab, host). */
int tp_gather_logits(struct engine_ctx *c, int n_out, float *logits, char *err);

#endif
