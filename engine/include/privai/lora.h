/*
 * LoRA adapters, as llama.cpp's convert_lora_to_gguf writes them
 * (general.type "adapter", adapter.type "lora", adapter.lora.alpha, and
 * for each adapted weight W a pair W.lora_a (rank x n_in) and W.lora_b
 * (n_out x rank)).  They are applied on the fly, never merged:
 *
 *	y = W x + (alpha / rank) * B (A x)
 *
 * for the tokens of a batch that asked for the adapter, so requests with
 * different adapters and none share one forward pass.  The layer weights
 * (attention q, k, v, output; feed-forward gate, up, down) can be adapted;
 * an adapter for anything else is refused by name.
 */
#ifndef PRIVAI_LORA_H
#define PRIVAI_LORA_H

#include "privai/model.h"

enum lora_target { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_TARGETS };

struct lora_pair {
	int rank, n_in, n_out;
	float scale; /* alpha / this pair's rank, times the user's scale */
	float *a;    /* (rank, n_in) row-major */
	float *b;    /* (n_out, rank) */
};

struct lora_adapter {
	float alpha; /* adapter.lora.alpha; 0 without it (each pair at scale 1) */
	int n_layer;
	struct lora_pair (*pairs)[LORA_TARGETS]; /* (n_layer); rank 0: not adapted */
	int n_pairs;
};

/* Load the adapter at path for model m, checking every tensor against the
 * weight it adapts; scale multiplies alpha / rank (1 for the trained
 * strength).  0, or a PRIVAI_* error with err naming the tensor. */
int lora_load(const char *path, const struct engine_model *m, float scale, struct lora_adapter **ret, char *err);
void lora_free(struct lora_adapter *a);

/* Write model m with adapter a merged into its weights (W + scale B A,
 * as float32; everything else copied) to path: the reference the tests
 * compare the on-the-fly path with, and an export for other engines. */
int lora_merge_write(const struct engine_model *m, const struct lora_adapter *a, const char *path, char *err);

/* y[t] += scale * B (A x[t]) for the tokens t < n whose adapter[t] (an
 * index into adapters, 1-based; 0 none) adapts (layer, target).  x is n x
 * n_in, y n x n_out, host memory. */
void lora_apply(struct lora_adapter *const *adapters, int n_adapters, const int32_t *adapter, int layer,
		enum lora_target target, const float *x, int n, float *y);

#endif
