/*
 * Which part of a model one rank of a tensor-parallel group holds
 * (Megatron's split, for the llama family):
 *   - attention by heads: Q, K and V by rows (this rank's query heads and
 *     the KV heads they read), the output projection by columns;
 *   - the MLP by its hidden width: gate and up by rows, down by columns;
 *   - the output layer by vocabulary rows (each rank computes its slice
 *     of the logits, rank 0 gathers them), the token embedding whole (a
 *     lookup reads only the rows of the batch's tokens from the mapping);
 *   - norms whole.
 * A row-parallel matmul (attention output, down) leaves each rank a
 * partial sum of the hidden state, which one all-reduce completes.
 *
 * KV heads are split when the rank count divides them, and replicated
 * when they divide the rank count (8 KV heads on 16 ranks: each rank
 * holds the one its two query heads share), as vLLM does.
 */
#ifndef PRIVAI_TP_PART_H
#define PRIVAI_TP_PART_H

#include <stddef.h>

#include "privai/model.h"

struct tp_part {
	int rank, size;
	int n_head, head0;       /* query heads of this rank, the first one's index */
	int n_head_kv, kv_head0; /* KV heads it holds */
	int n_ff, ff0;           /* MLP hidden width */
	int n_vocab, vocab0;     /* logits rows (0 on ranks > 0 with whole_output) */
	/* rank 0 computes every logit and the others none: not how the engine
	 * runs, but what docs/performance.md measures the vocabulary split
	 * against (PRIVAI_TP_OUTPUT=rank0) */
	int whole_output;
};

/* The logits rows [*v0, *v0 + *n) rank `rank` of `size` computes. */
void tp_vocab_slice(int n_vocab, int size, int rank, int whole_output, int *v0, int *n);

/* Rank `rank` of `size`'s part of a model with hyperparameters hp, or
 * PRIVAI_EINVAL with the reason a split cannot work (heads or the MLP
 * width do not divide, a weight's blocks would be cut). */
int tp_part_plan(const struct engine_model *m, int rank, int size, struct tp_part *p, char *err);

/* Memory a part's column slices were copied into, freed together. */
struct tp_owned {
	void **blocks;
	int n, cap;
	size_t bytes; /* copied */
};
void tp_owned_free(struct tp_owned *o);

/* Layer src as part p holds it: weights sliced (rows point into the
 * mapping, columns copied into memory added to own), biases pointing at
 * their slice of src's.  PRIVAI_ENOMEM. */
int tp_layer_view(const struct model_hparams *hp, const struct tp_part *p, const struct model_layer *src,
		  struct model_layer *dst, struct tp_owned *own);
/* Rows [r0, r0 + n) of w, without copying. */
struct weight tp_weight_rows(const struct weight *w, int64_t r0, int64_t n);

/* Bytes of the weights a part holds for the whole model: its slices of
 * the layers and the output layer (the embedding it reads from the file
 * is not counted: only the rows of looked-up tokens are ever read). */
size_t tp_part_weight_bytes(const struct engine_model *m, const struct tp_part *p);

#endif
