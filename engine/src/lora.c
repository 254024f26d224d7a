/*
 * LoRA adapters (privai/lora.h): loaded into float32 pairs checked
 * against the weights they adapt, and applied per token after the base
 * matmul.  A rank is small (8-64), so a token costs 2 x rank x (n_in +
 * n_out) multiply-adds per adapted weight, next to n_in x n_out for W.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/lora.h"
#include "privai/status.h"
#include "privai/tensor_type.h"

static const char *const target_names[LORA_TARGETS] = { "attn_q",   "attn_k", "attn_v",  "attn_output",
							"ffn_gate", "ffn_up", "ffn_down" };

static const struct weight *
target_weight(const struct engine_model *m, int layer, enum lora_target t)
{
	const struct model_layer *L = &m->layers[layer];
	const struct weight *w[LORA_TARGETS] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };

	return w[t];
}

/* A tensor of the adapter as float32 rows x cols (ne[1] x ne[0]). */
static int
read_matrix(const struct gguf_tensor *t, int rows, int cols, float **ret, char *err)
{
	float *out;

	if (t->n_dims != 2 || t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows)
		return privai_fail(err, PRIVAI_EINVAL, "%s is %llux%llu; the weight it adapts needs %dx%d", t->name,
				   (unsigned long long)t->ne[1], (unsigned long long)t->ne[0], rows, cols);
	if (t->type != TT_F32 && t->type != TT_F16)
		return privai_fail(err, PRIVAI_EINVAL, "%s is %s; LoRA tensors must be F32 or F16", t->name,
				   tensor_type_name(t->type));
	if ((out = malloc((size_t)rows * cols * sizeof(float))) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for %s", t->name);
	size_t row_bytes = tensor_type_row_bytes(t->type, (uint64_t)cols);
	for (int r = 0; r < rows; r++)
		tensor_dequantize_row(t->type, (const char *)t->data + (size_t)r * row_bytes, out + (size_t)r * cols,
				      (size_t)cols);
	*ret = out;
	return PRIVAI_OK;
}

/* Which layer weight an adapter tensor's name ("blk.3.attn_q.weight.lora_a")
 * adapts; -1 when none. */
static int
parse_name(const char *name, int *ret_layer, enum lora_target *ret_t, int *ret_is_b)
{
	int layer, off = 0;
	char rest[64];

	if (sscanf(name, "blk.%d.%n", &layer, &off) != 1 || off == 0 || strlen(name + off) >= sizeof(rest))
		return -1;
	snprintf(rest, sizeof(rest), "%s", name + off);
	size_t n = strlen(rest);
	if (n > 14 && strcmp(rest + n - 14, ".weight.lora_a") == 0)
		*ret_is_b = 0;
	else if (n > 14 && strcmp(rest + n - 14, ".weight.lora_b") == 0)
		*ret_is_b = 1;
	else
		return -1;
	rest[n - 14] = '\0';
	for (int t = 0; t < LORA_TARGETS; t++)
		if (strcmp(rest, target_names[t]) == 0) {
			*ret_layer = layer;
			*ret_t = (enum lora_target)t;
			return 0;
		}
	return -1;
}

static int
load_pairs(const struct gguf_file *f, const struct engine_model *m, struct lora_adapter *a, char *err)
{
	int r;

	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		int layer, is_b;
		enum lora_target tg;
		if (parse_name(t->name, &layer, &tg, &is_b) < 0)
			return privai_fail(err, PRIVAI_EINVAL,
					   "%s is not a LoRA tensor of a layer weight this engine adapts (q, k, v, "
					   "attn_output, ffn_gate, ffn_up, ffn_down)",
					   t->name);
		if (layer < 0 || layer >= m->hp.n_layer)
			return privai_fail(err, PRIVAI_EINVAL, "%s: the model has %d layers", t->name, m->hp.n_layer);
		if (is_b)
			continue; /* read with its A */
		char bname[160];
		snprintf(bname, sizeof(bname), "%.*sb", (int)strlen(t->name) - 1, t->name);
		const struct gguf_tensor *tb = gguf_find_tensor(f, bname);
		const struct weight *w = target_weight(m, layer, tg);
		struct lora_pair *p = &a->pairs[layer][tg];
		if (tb == NULL)
			return privai_fail(err, PRIVAI_EINVAL, "%s has no %s", t->name, bname);
		int rank = t->n_dims == 2 ? (int)t->ne[1] : 0;
		if (rank < 1 || rank > 1024)
			return privai_fail(err, PRIVAI_EINVAL, "%s: a rank of %d", t->name, rank);
		if ((r = read_matrix(t, rank, (int)w->cols, &p->a, err)) < 0 ||
		    (r = read_matrix(tb, (int)w->rows, rank, &p->b, err)) < 0)
			return r;
		p->rank = rank;
		p->n_in = (int)w->cols;
		p->n_out = (int)w->rows;
		a->n_pairs++;
	}
	/* every B has its A */
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		int layer, is_b;
		enum lora_target tg;
		if (parse_name(f->tensors[i].name, &layer, &tg, &is_b) == 0 && is_b && a->pairs[layer][tg].rank == 0)
			return privai_fail(err, PRIVAI_EINVAL, "%s has no lora_a", f->tensors[i].name);
	}
	return a->n_pairs > 0 ? PRIVAI_OK : privai_fail(err, PRIVAI_EINVAL, "the adapter adapts no weight");
}

int
lora_load(const char *path, const struct engine_model *m, float scale, struct lora_adapter **ret, char *err)
{
	struct gguf_file *f = NULL;
	struct lora_adapter *a;
	const char *type = NULL, *arch = NULL;
	float alpha = 0;
	int r;

	if ((r = gguf_open(path, &f, err)) < 0)
		return r;
	if (gguf_get_str(f, "general.type", &type, NULL) < 0 || strcmp(type, "adapter") != 0 ||
	    gguf_get_str(f, "adapter.type", &type, NULL) < 0 || strcmp(type, "lora") != 0) {
		gguf_close(f);
		return privai_fail(err, PRIVAI_EINVAL,
				   "%s is not a LoRA adapter (general.type adapter, adapter.type lora)", path);
	}
	if (gguf_get_str(f, "general.architecture", &arch, NULL) == 0 && strcmp(arch, m->hp.arch_name) != 0) {
		privai_fail(err, PRIVAI_EINVAL, "%s is an adapter for %s; the model is %s", path, arch,
			    m->hp.arch_name);
		gguf_close(f);
		return PRIVAI_EINVAL;
	}
	if ((a = calloc(1, sizeof(*a))) == NULL ||
	    (a->pairs = calloc((size_t)m->hp.n_layer, sizeof(*a->pairs))) == NULL) {
		free(a);
		gguf_close(f);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	}
	a->n_layer = m->hp.n_layer;
	if ((r = load_pairs(f, m, a, err)) < 0) {
		lora_free(a);
		gguf_close(f);
		return r;
	}
	/* alpha / rank per pair, as llama.cpp scales them; without alpha the
	 * update is used as trained (scale 1) */
	if (gguf_get_f32(f, "adapter.lora.alpha", &alpha, NULL) < 0 || alpha <= 0)
		alpha = 0;
	a->alpha = alpha;
	for (int l = 0; l < a->n_layer; l++)
		for (int t = 0; t < LORA_TARGETS; t++) {
			struct lora_pair *p = &a->pairs[l][t];
			if (p->rank > 0)
				p->scale = (alpha > 0 ? alpha / (float)p->rank : 1.0f) * scale;
		}
	gguf_close(f);
	*ret = a;
	return PRIVAI_OK;
}

void
lora_free(struct lora_adapter *a)
{
	if (a == NULL)
		return;
	for (int l = 0; a->pairs != NULL && l < a->n_layer; l++)
		for (int t = 0; t < LORA_TARGETS; t++) {
			free(a->pairs[l][t].a);
			free(a->pairs[l][t].b);
		}
	free(a->pairs);
	free(a);
}

void
lora_apply(struct lora_adapter *const *adapters, int n_adapters, const int32_t *adapter, int layer,
	   enum lora_target target, const float *x, int n, float *y)
{
	float mid[1024];

	if (adapter == NULL)
		return;
	for (int t = 0; t < n; t++) {
		int k = adapter[t];
		if (k < 1 || k > n_adapters)
			continue;
		const struct lora_adapter *a = adapters[k - 1];
		if (a == NULL)
			continue; /* unloaded: the scheduler lets no request of it run */
		const struct lora_pair *p = &a->pairs[layer][target];
		if (p->rank == 0)
			continue;
		const float *xt = x + (size_t)t * p->n_in;
		float *yt = y + (size_t)t * p->n_out;
		for (int r = 0; r < p->rank; r++) {
			const float *ar = p->a + (size_t)r * p->n_in;
			float s = 0;
			for (int i = 0; i < p->n_in; i++)
				s += ar[i] * xt[i];
			mid[r] = s * p->scale;
		}
		for (int o = 0; o < p->n_out; o++) {
			const float *bo = p->b + (size_t)o * p->rank;
			float s = 0;
			for (int r = 0; r < p->rank; r++)
				s += bo[r] * mid[r];
			yt[o] += s;
		}
	}
}

/* The weight a (layer, target) pair adapts, by its tensor name. */
static int
pair_of(const struct lora_adapter *a, const char *name, const struct lora_pair **ret)
{
	int layer, off = 0;

	if (sscanf(name, "blk.%d.%n", &layer, &off) != 1 || off == 0 || layer < 0 || layer >= a->n_layer)
		return 0;
	for (int t = 0; t < LORA_TARGETS; t++) {
		size_t n = strlen(target_names[t]);
		if (strncmp(name + off, target_names[t], n) == 0 && strcmp(name + off + n, ".weight") == 0 &&
		    a->pairs[layer][t].rank > 0) {
			*ret = &a->pairs[layer][t];
			return 1;
		}
	}
	return 0;
}

int
lora_merge_write(const struct engine_model *m, const struct lora_adapter *a, const char *path, char *err)
{
	const struct gguf_file *f = m->file;
	struct gguf_writer *w = NULL;
	int r = PRIVAI_OK;

	if (gguf_writer_new(&w) < 0)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < f->n_kv && r >= 0; i++)
		if (strcmp(f->kv[i].key, "general.file_type") != 0 && (r = gguf_writer_set_kv(w, &f->kv[i])) < 0)
			privai_fail(err, r, "cannot copy metadata '%s'", f->kv[i].key);
	for (uint64_t i = 0; i < f->n_tensors && r >= 0; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		const struct lora_pair *p;
		if (!pair_of(a, t->name, &p)) {
			if ((r = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data)) < 0)
				privai_fail(err, r, "cannot copy tensor '%s'", t->name);
			continue;
		}
		/* W + scale * B A, in float32 */
		float *wf = malloc((size_t)p->n_out * p->n_in * sizeof(float));
		if (wf == NULL || tensor_dequantize_row(t->type, t->data, wf, (size_t)p->n_out * p->n_in) < 0) {
			free(wf);
			r = privai_fail(err, wf == NULL ? PRIVAI_ENOMEM : PRIVAI_EINVAL, "cannot read '%s' as floats",
					t->name);
			break;
		}
		for (int o = 0; o < p->n_out; o++)
			for (int k = 0; k < p->rank; k++) {
				float bk = p->scale * p->b[(size_t)o * p->rank + k];
				const float *ak = p->a + (size_t)k * p->n_in;
				float *row = wf + (size_t)o * p->n_in;
				for (int c = 0; c < p->n_in; c++)
					row[c] += bk * ak[c];
			}
		if ((r = gguf_writer_add_tensor(w, t->name, TT_F32, t->n_dims, t->ne, wf)) < 0)
			privai_fail(err, r, "cannot write tensor '%s'", t->name);
		free(wf);
	}
	if (r >= 0)
		r = gguf_writer_write(w, path, err);
	gguf_writer_free(w);
	return r;
}
