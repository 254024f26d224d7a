/*
 * What a GGUF file says about its model, read with the engine's
 * validating reader: architecture, parameter count, quantization, shape,
 * tokenizer, chat template.  Works for any architecture the file names,
 * including ones the engine cannot run yet (sizing still needs them),
 * and LoRA adapters, which adapt a model registered before them.
 */
#ifndef PRIVAI_ADMIN_MODEL_META_H
#define PRIVAI_ADMIN_MODEL_META_H

#include <stdint.h>

struct model_meta {
	char name[128]; /* general.name, or "" */
	char architecture[32];
	int64_t parameters;    /* elements of every tensor */
	int64_t weight_bytes;  /* bytes of every tensor */
	char quantization[32]; /* general.file_type's name, or the commonest tensor type */
	int context_length;
	int n_layer, n_head, n_head_kv, head_dim, n_embd, n_vocab;
	int kv_latent;       /* MLA: kv_lora_rank + rope dims per token and layer; 0 otherwise */
	char tokenizer[32];  /* tokenizer.ggml.model */
	char *chat_template; /* malloc'd, or NULL */
	/* a LoRA adapter (general.type "adapter", adapter.type "lora"), as
	 * llama.cpp's converter writes them: no shape of its own, only its
	 * largest rank and adapter.lora.alpha (0 without it) */
	int lora, lora_rank;
	float lora_alpha;
};

/* APP_OK, or APP_EFORMAT / APP_EIO naming the problem (a file
 * that is not GGUF, or lacks the keys every model has). */
int model_meta_read(const char *path, struct model_meta *m, char *err);
void model_meta_free(struct model_meta *m);

/* APP_OK when the LoRA adapter at path fits the model at base_path: the
 * same architecture, and for every pair X.lora_a (rank x n_in) and
 * X.lora_b (n_out x rank) a weight X of n_out x n_in; else APP_EFORMAT
 * naming the tensor (or APP_EIO for a file that cannot be read). */
int model_lora_fits(const char *path, const char *base_path, char *err);

#endif
