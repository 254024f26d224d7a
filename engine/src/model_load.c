/*
 * Loading a llama-family model: hyperparameters from GGUF metadata and
 * weights bound (not copied) from the mapping, each checked against the
 * shape the hyperparameters imply.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/model.h"
#include "privai/tensor_type.h"

struct arch_desc {
	const char *name;
	enum model_arch arch;
	int rope_neox;
	int has_qkv_bias;
};

static const struct arch_desc archs[] = {
	{ "llama", ARCH_LLAMA, 0, 0 },
	{ "qwen2", ARCH_QWEN2, 1, 1 },
};

static int
get_u32_req(const struct gguf_file *f, const char *arch, const char *suffix, int *ret, char *err)
{
	char key[128];
	uint32_t v;
	int r;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	r = gguf_get_u32(f, key, &v, err);
	if (r == PRIVAI_ENOTFOUND)
		return privai_fail(err, PRIVAI_EFORMAT, "missing metadata '%s'", key);
	if (r < 0)
		return r;
	if (v == 0 || v > (1u << 24))
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' = %u is out of range", key, v);
	*ret = (int)v;
	return PRIVAI_OK;
}

static int
get_opt_u32(const struct gguf_file *f, const char *arch, const char *suffix, int *ret, char *err)
{
	char key[128];

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	if (gguf_find_kv(f, key) == NULL)
		return PRIVAI_OK; /* absent: keep the default */
	return get_u32_req(f, arch, suffix, ret, err);
}

static int
get_opt_f32(const struct gguf_file *f, const char *arch, const char *suffix, float *ret, char *err)
{
	char key[128];
	int r;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	r = gguf_get_f32(f, key, ret, err);
	return r == PRIVAI_ENOTFOUND ? PRIVAI_OK : r;
}

static int
read_hparams(const struct gguf_file *f, struct model_hparams *hp, const struct arch_desc **ret_ad, char *err)
{
	const char *arch;
	const struct arch_desc *ad = NULL;
	int r;

	if (gguf_get_str(f, "general.architecture", &arch, err) != PRIVAI_OK)
		return privai_fail(err, PRIVAI_EFORMAT, "missing metadata 'general.architecture'");
	for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
		if (strcmp(arch, archs[i].name) == 0)
			ad = &archs[i];
	if (ad == NULL)
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "unknown model architecture '%.64s' (supported: llama, qwen2)", arch);
	memset(hp, 0, sizeof(*hp));
	hp->arch = ad->arch;
	snprintf(hp->arch_name, sizeof(hp->arch_name), "%s", ad->name);
	hp->rope_neox = ad->rope_neox;
	if ((r = get_u32_req(f, arch, "embedding_length", &hp->n_embd, err)) < 0 ||
	    (r = get_u32_req(f, arch, "block_count", &hp->n_layer, err)) < 0 ||
	    (r = get_u32_req(f, arch, "attention.head_count", &hp->n_head, err)) < 0 ||
	    (r = get_u32_req(f, arch, "feed_forward_length", &hp->n_ff, err)) < 0)
		return r;
	/* every block has tensors of its own, so a file cannot describe more
	 * blocks than it holds tensors (checked before anything is sized by it) */
	if ((uint64_t)hp->n_layer > f->n_tensors)
		return privai_fail(err, PRIVAI_EFORMAT, "%s.block_count %d exceeds the %llu tensors in the file", arch,
				   hp->n_layer, (unsigned long long)f->n_tensors);
	hp->n_head_kv = hp->n_head;
	hp->n_ctx_train = 2048;
	if ((r = get_opt_u32(f, arch, "attention.head_count_kv", &hp->n_head_kv, err)) < 0 ||
	    (r = get_opt_u32(f, arch, "context_length", &hp->n_ctx_train, err)) < 0)
		return r;
	if (hp->n_embd % hp->n_head != 0 || hp->n_head % hp->n_head_kv != 0)
		return privai_fail(err, PRIVAI_EFORMAT,
				   "embedding length %d, %d heads and %d KV heads do not divide evenly", hp->n_embd,
				   hp->n_head, hp->n_head_kv);
	hp->head_dim = hp->n_embd / hp->n_head;
	if ((r = get_opt_u32(f, arch, "attention.key_length", &hp->head_dim, err)) < 0)
		return r;
	if (hp->head_dim < 2 || hp->head_dim > ENGINE_HEAD_DIM_MAX)
		return privai_fail(err, PRIVAI_EUNSUPPORTED, "attention head size %d: this engine takes 2 to %d",
				   hp->head_dim, ENGINE_HEAD_DIM_MAX);
	hp->n_rot = hp->head_dim;
	if ((r = get_opt_u32(f, arch, "rope.dimension_count", &hp->n_rot, err)) < 0)
		return r;
	if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
		return privai_fail(err, PRIVAI_EFORMAT, "rope.dimension_count %d does not fit head size %d", hp->n_rot,
				   hp->head_dim);
	hp->rope_base = 10000.0f;
	hp->rms_eps = 1e-5f;
	float factor = 1.0f;
	if ((r = get_opt_f32(f, arch, "rope.freq_base", &hp->rope_base, err)) < 0 ||
	    (r = get_opt_f32(f, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err)) < 0 ||
	    (r = get_opt_f32(f, arch, "rope.scaling.factor", &factor, err)) < 0)
		return r;
	char key[128];
	const char *stype = NULL;
	snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
	if (gguf_get_str(f, key, &stype, err) == PRIVAI_OK && strcmp(stype, "none") != 0 &&
	    strcmp(stype, "linear") != 0)
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "rope scaling type '%.32s' is not supported "
				   "(none and linear are)",
				   stype);
	if (!(factor > 0.0f) || !(hp->rope_base > 0.0f) || !(hp->rms_eps > 0.0f))
		return privai_fail(err, PRIVAI_EFORMAT, "rope base, scaling factor and rms epsilon must be positive");
	hp->rope_freq_scale = (stype != NULL && strcmp(stype, "linear") == 0) ? 1.0f / factor : 1.0f;
	*ret_ad = ad;
	return PRIVAI_OK;
}

/* Bind tensor `name` as a matrix of `rows` x `cols`. */
static int
bind_weight(const struct gguf_file *f, const char *name, int64_t cols, int64_t rows, struct weight *w, int optional,
	    char *err)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);
	const struct tensor_type_info *ti;

	if (t == NULL) {
		if (optional)
			return PRIVAI_ENOTFOUND;
		return privai_fail(err, PRIVAI_EFORMAT, "missing tensor '%s'", name);
	}
	if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
		return privai_fail(err, PRIVAI_EFORMAT,
				   "tensor '%s' has shape [%llu, %llu, %llu], expected [%lld, %lld]", name,
				   (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
				   (unsigned long long)t->ne[2], (long long)cols, (long long)rows);
	ti = tensor_type_get(t->type);
	if (ti == NULL || !ti->can_dequant)
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "tensor '%s' has weight type %s, which this engine does not support "
				   "(F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS)",
				   name, tensor_type_name(t->type));
	w->type = t->type;
	w->rows = rows;
	w->cols = cols;
	w->row_bytes = tensor_type_row_bytes(t->type, (uint64_t)cols);
	w->data = t->data;
	return PRIVAI_OK;
}

/* Copy a 1-D tensor of n elements into a fresh float array. */
static int
bind_vector(const struct gguf_file *f, const char *name, int64_t n, float **ret, int optional, char *err)
{
	const struct gguf_tensor *t = gguf_find_tensor(f, name);

	if (t == NULL) {
		if (optional)
			return PRIVAI_OK;
		return privai_fail(err, PRIVAI_EFORMAT, "missing tensor '%s'", name);
	}
	if (t->n_elems != (uint64_t)n || (int64_t)t->ne[0] != n)
		return privai_fail(err, PRIVAI_EFORMAT, "tensor '%s' has %llu elements, expected %lld", name,
				   (unsigned long long)t->n_elems, (long long)n);
	if (t->type != TT_F32 && t->type != TT_F16 && t->type != TT_BF16)
		return privai_fail(err, PRIVAI_EUNSUPPORTED, "tensor '%s' has type %s; vectors must be F32/F16/BF16",
				   name, tensor_type_name(t->type));
	float *v = malloc((size_t)n * sizeof(float));
	if (v == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for '%s'", name);
	tensor_dequantize_row(t->type, t->data, v, (size_t)n);
	*ret = v;
	return PRIVAI_OK;
}

static int
bind_layer(const struct gguf_file *f, const struct model_hparams *hp, const struct arch_desc *ad, int il,
	   struct model_layer *L, char *err)
{
	int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
	int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim;
	char n[96];
	int r;

#define NM(s) (snprintf(n, sizeof(n), "blk.%d." s, il), n)
	if ((r = bind_vector(f, NM("attn_norm.weight"), e, &L->attn_norm, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("attn_q.weight"), e, qd, &L->wq, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("attn_k.weight"), e, kvd, &L->wk, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("attn_v.weight"), e, kvd, &L->wv, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("attn_output.weight"), qd, e, &L->wo, 0, err)) < 0 ||
	    (r = bind_vector(f, NM("ffn_norm.weight"), e, &L->ffn_norm, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("ffn_gate.weight"), e, hp->n_ff, &L->w_gate, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("ffn_up.weight"), e, hp->n_ff, &L->w_up, 0, err)) < 0 ||
	    (r = bind_weight(f, NM("ffn_down.weight"), hp->n_ff, e, &L->w_down, 0, err)) < 0)
		return r;
	/* biases are required for qwen2, allowed (and used) for llama */
	int req = ad->has_qkv_bias ? 0 : 1;
	if ((r = bind_vector(f, NM("attn_q.bias"), qd, &L->bq, req, err)) < 0 ||
	    (r = bind_vector(f, NM("attn_k.bias"), kvd, &L->bk, req, err)) < 0 ||
	    (r = bind_vector(f, NM("attn_v.bias"), kvd, &L->bv, req, err)) < 0)
		return r;
#undef NM
	return PRIVAI_OK;
}

void
engine_model_free(struct engine_model *m)
{
	if (m == NULL)
		return;
	for (int i = 0; m->layers != NULL && i < m->hp.n_layer; i++) {
		struct model_layer *L = &m->layers[i];
		free(L->attn_norm);
		free(L->ffn_norm);
		free(L->bq);
		free(L->bk);
		free(L->bv);
	}
	free(m->layers);
	free(m->output_norm);
	free(m->inv_freq);
	gguf_close(m->file);
	free(m);
}

static int
build_rope(struct engine_model *m, char *err)
{
	const struct model_hparams *hp = &m->hp;
	int half = hp->n_rot / 2, r;
	float *factors = NULL;

	if ((m->inv_freq = malloc((size_t)half * sizeof(float))) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	/* Llama 3.1 long-context models divide each frequency by a factor */
	if ((r = bind_vector(m->file, "rope_freqs.weight", half, &factors, 1, err)) < 0)
		return r;
	for (int i = 0; i < half; i++) {
		double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot) * hp->rope_freq_scale;
		if (factors != NULL)
			f /= factors[i];
		m->inv_freq[i] = (float)f;
	}
	free(factors);
	return PRIVAI_OK;
}

int
engine_model_from_gguf(struct gguf_file *file, struct engine_model **ret_model, char *err)
{
	struct engine_model *m = calloc(1, sizeof(*m));
	const struct arch_desc *ad;
	int r;

	if (m == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	m->file = file;
	if ((r = read_hparams(file, &m->hp, &ad, err)) < 0)
		goto fail;
	const struct gguf_tensor *emb = gguf_find_tensor(file, "token_embd.weight");
	if (emb == NULL) {
		r = privai_fail(err, PRIVAI_EFORMAT, "missing tensor 'token_embd.weight'");
		goto fail;
	}
	m->hp.n_vocab = (int)emb->ne[1];
	if (emb->ne[1] > (1u << 24)) {
		r = privai_fail(err, PRIVAI_EFORMAT, "vocabulary of %llu tokens is too large",
				(unsigned long long)emb->ne[1]);
		goto fail;
	}
	if ((r = bind_weight(file, "token_embd.weight", m->hp.n_embd, m->hp.n_vocab, &m->tok_embd, 0, err)) < 0 ||
	    (r = bind_vector(file, "output_norm.weight", m->hp.n_embd, &m->output_norm, 0, err)) < 0)
		goto fail;
	r = bind_weight(file, "output.weight", m->hp.n_embd, m->hp.n_vocab, &m->output, 1, err);
	if (r == PRIVAI_ENOTFOUND)
		m->output = m->tok_embd; /* tied embeddings */
	else if (r < 0)
		goto fail;
	if ((m->layers = calloc((size_t)m->hp.n_layer, sizeof(*m->layers))) == NULL) {
		r = privai_fail(err, PRIVAI_ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < m->hp.n_layer; i++)
		if ((r = bind_layer(file, &m->hp, ad, i, &m->layers[i], err)) < 0)
			goto fail;
	if ((r = build_rope(m, err)) < 0)
		goto fail;
	for (uint64_t i = 0; i < file->n_tensors; i++)
		m->weight_bytes += file->tensors[i].n_bytes;
	*ret_model = m;
	return PRIVAI_OK;
fail:
	m->file = NULL; /* the caller still owns it */
	engine_model_free(m);
	return r;
}

int
engine_model_load(const char *path, struct engine_model **ret_model, char *err)
{
	struct gguf_file *f;
	int r;

	if ((r = gguf_open(path, &f, err)) < 0)
		return r;
	if ((r = engine_model_from_gguf(f, ret_model, err)) < 0)
		gguf_close(f);
	return r;
}
