/* Reading a model's description out of its GGUF metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/gguf.h"
#include "privai/status.h"
#include "privai/tensor_type.h"
#include "status.h"
#include "models/meta.h"

/* the engine's reader answers in its codes, passed on as ours */
_Static_assert((int)APP_OK == (int)PRIVAI_OK && (int)APP_EIO == (int)PRIVAI_EIO &&
		       (int)APP_ENOMEM == (int)PRIVAI_ENOMEM && (int)APP_EFORMAT == (int)PRIVAI_EFORMAT &&
		       (int)APP_EUNSUPPORTED == (int)PRIVAI_EUNSUPPORTED && (int)APP_EINVAL == (int)PRIVAI_EINVAL &&
		       (int)APP_ERANGE == (int)PRIVAI_ERANGE && (int)APP_ENOTFOUND == (int)PRIVAI_ENOTFOUND &&
		       (int)APP_EBUSY == (int)PRIVAI_EBUSY && (int)APP_EUNAVAIL == (int)PRIVAI_EUNAVAIL &&
		       APP_ERR_LEN == PRIVAI_ERR_LEN,
	       "the appliance's first codes are the engine's");

/* llama.cpp's general.file_type numbering, which GGUF writers share */
static const char *
file_type_name(uint32_t t)
{
	static const char *const names[] = {
		[0] = "F32",     [1] = "F16",     [2] = "Q4_0",     [3] = "Q4_1",    [7] = "Q8_0",     [8] = "Q5_0",
		[9] = "Q5_1",    [10] = "Q2_K",   [11] = "Q3_K_S",  [12] = "Q3_K_M", [13] = "Q3_K_L",  [14] = "Q4_K_S",
		[15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",  [18] = "Q6_K",   [19] = "IQ2_XXS", [20] = "IQ2_XS",
		[21] = "Q2_K_S", [22] = "IQ3_XS", [23] = "IQ3_XXS", [24] = "IQ1_S",  [25] = "IQ4_NL",  [26] = "IQ3_S",
		[27] = "IQ3_M",  [28] = "IQ2_S",  [29] = "IQ2_M",   [30] = "IQ4_XS", [31] = "IQ1_M",   [32] = "BF16",
	};
	return t < sizeof(names) / sizeof(names[0]) ? names[t] : NULL;
}

/* arch.key as an integer; arrays (per-layer values) give their largest */
static int
arch_int(const struct gguf_file *f, const char *arch, const char *key, int *out)
{
	char full[128];
	const struct gguf_kv *kv;
	uint32_t v;

	snprintf(full, sizeof(full), "%s.%s", arch, key);
	if (gguf_get_u32(f, full, &v, NULL) == 0) {
		*out = (int)v;
		return 0;
	}
	kv = gguf_find_kv(f, full);
	if (kv == NULL || kv->type != GGUF_ARRAY || (kv->arr_type != GGUF_U32 && kv->arr_type != GGUF_I32))
		return APP_ENOTFOUND;
	int best = 0;
	for (uint64_t i = 0; i < kv->arr_n; i++) {
		int x = ((const int32_t *)kv->v.arr)[i];
		if (x > best)
			best = x;
	}
	*out = best;
	return 0;
}

static void
copy_str(const struct gguf_file *f, const char *key, char *out, size_t size)
{
	const char *s;

	out[0] = '\0';
	if (gguf_get_str(f, key, &s, NULL) == 0)
		snprintf(out, size, "%s", s);
}

/* general.type "adapter": a LoRA adapter's rank, alpha and size (m->lora
 * set); any other kind of adapter is refused by name.  APP_OK for a model
 * too (m->lora 0). */
static int
adapter_meta(const struct gguf_file *f, const char *path, struct model_meta *m, char *err)
{
	const char *type = NULL, *kind = NULL;

	if (gguf_get_str(f, "general.type", &type, NULL) != 0 || strcmp(type, "adapter") != 0)
		return APP_OK;
	if (gguf_get_str(f, "adapter.type", &kind, NULL) != 0 || strcmp(kind, "lora") != 0)
		return app_fail(err, APP_EFORMAT, "%s: an adapter of type '%s'; only LoRA adapters are supported", path,
				kind != NULL ? kind : "(none)");
	m->lora = 1;
	if (gguf_get_f32(f, "adapter.lora.alpha", &m->lora_alpha, NULL) != 0)
		m->lora_alpha = 0;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		size_t n = strlen(t->name);
		m->parameters += (int64_t)t->n_elems;
		m->weight_bytes += (int64_t)t->n_bytes;
		if (n > 7 && strcmp(t->name + n - 7, ".lora_a") == 0 && t->n_dims == 2 && (int)t->ne[1] > m->lora_rank)
			m->lora_rank = (int)t->ne[1];
	}
	if (m->lora_rank <= 0)
		return app_fail(err, APP_EFORMAT, "%s: a LoRA adapter without a single .lora_a tensor", path);
	snprintf(m->quantization, sizeof(m->quantization), "%s",
		 tensor_type_name(f->n_tensors > 0 ? f->tensors[0].type : 0));
	return APP_OK;
}

int
model_lora_fits(const char *path, const char *base_path, char *err)
{
	struct gguf_file *f = NULL, *b = NULL;
	const char *arch = "", *base_arch = "";
	char w[300];
	int rc;

	if ((rc = gguf_open(path, &f, err)) != APP_OK || (rc = gguf_open(base_path, &b, err)) != APP_OK)
		goto out;
	gguf_get_str(f, "general.architecture", &arch, NULL);
	gguf_get_str(b, "general.architecture", &base_arch, NULL);
	if (strcmp(arch, base_arch) != 0) {
		rc = app_fail(err, APP_EFORMAT, "the adapter is for a %s model, the base model is %s", arch, base_arch);
		goto out;
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *ta = &f->tensors[i], *tb, *tw;
		size_t n = strlen(ta->name);
		if (n <= 7 || strcmp(ta->name + n - 7, ".lora_a") != 0)
			continue;
		snprintf(w, sizeof(w), "%.*s.lora_b", (int)(n - 7), ta->name);
		tb = gguf_find_tensor(f, w);
		snprintf(w, sizeof(w), "%.*s", (int)(n - 7), ta->name);
		tw = gguf_find_tensor(b, w);
		if (tb == NULL) {
			rc = app_fail(err, APP_EFORMAT, "%s has no %s.lora_b", ta->name, w);
			goto out;
		}
		if (tw == NULL) {
			rc = app_fail(err, APP_EFORMAT, "%s adapts %s, which the base model does not have", ta->name,
				      w);
			goto out;
		}
		if (ta->n_dims != 2 || tb->n_dims != 2 || tw->n_dims != 2 || ta->ne[0] != tw->ne[0] ||
		    tb->ne[1] != tw->ne[1] || ta->ne[1] != tb->ne[0]) {
			rc = app_fail(err, APP_EFORMAT,
				      "%s is %llux%llu and its lora_b %llux%llu, which do not fit the base model's "
				      "%s of %llux%llu",
				      ta->name, (unsigned long long)ta->ne[1], (unsigned long long)ta->ne[0],
				      (unsigned long long)tb->ne[1], (unsigned long long)tb->ne[0], w,
				      (unsigned long long)tw->ne[1], (unsigned long long)tw->ne[0]);
			goto out;
		}
	}
out:
	if (f != NULL)
		gguf_close(f);
	if (b != NULL)
		gguf_close(b);
	return rc;
}

int
model_meta_read(const char *path, struct model_meta *m, char *err)
{
	struct gguf_file *f;
	const char *tmpl;
	const void *arr;
	uint64_t n;
	uint32_t ft;
	int rc;

	memset(m, 0, sizeof(*m));
	if ((rc = gguf_open(path, &f, err)) != APP_OK)
		return rc;
	copy_str(f, "general.architecture", m->architecture, sizeof(m->architecture));
	if (m->architecture[0] == '\0') {
		gguf_close(f);
		return app_fail(err, APP_EFORMAT, "%s: no general.architecture key", path);
	}
	copy_str(f, "general.name", m->name, sizeof(m->name));
	if ((rc = adapter_meta(f, path, m, err)) != APP_OK || m->lora) {
		gguf_close(f);
		return rc;
	}
	const char *a = m->architecture;
	if (arch_int(f, a, "block_count", &m->n_layer) < 0 || arch_int(f, a, "attention.head_count", &m->n_head) < 0 ||
	    arch_int(f, a, "embedding_length", &m->n_embd) < 0 || m->n_layer <= 0 || m->n_head <= 0 || m->n_embd <= 0) {
		gguf_close(f);
		return app_fail(err, APP_EFORMAT,
				"%s: %s.block_count, .attention.head_count and "
				".embedding_length must be positive integers",
				path, a);
	}
	if (arch_int(f, a, "attention.head_count_kv", &m->n_head_kv) < 0 || m->n_head_kv <= 0)
		m->n_head_kv = m->n_head;
	if (arch_int(f, a, "attention.key_length", &m->head_dim) < 0 || m->head_dim <= 0)
		m->head_dim = m->n_embd / m->n_head;
	if (arch_int(f, a, "context_length", &m->context_length) < 0)
		m->context_length = 0;
	int lora = 0, rope = 0;
	if (arch_int(f, a, "attention.kv_lora_rank", &lora) == 0 && lora > 0) {
		arch_int(f, a, "rope.dimension_count", &rope);
		m->kv_latent = lora + rope;
	}
	copy_str(f, "tokenizer.ggml.model", m->tokenizer, sizeof(m->tokenizer));
	if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, &arr, &n, NULL) == 0)
		m->n_vocab = (int)n;
	if (gguf_get_str(f, "tokenizer.chat_template", &tmpl, NULL) == 0 && (m->chat_template = strdup(tmpl)) == NULL) {
		gguf_close(f);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	uint64_t bytes_by_type[TT_COUNT] = { 0 };
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		m->parameters += (int64_t)f->tensors[i].n_elems;
		m->weight_bytes += (int64_t)f->tensors[i].n_bytes;
		bytes_by_type[f->tensors[i].type] += f->tensors[i].n_bytes;
	}
	if (gguf_get_u32(f, "general.file_type", &ft, NULL) == 0 && file_type_name(ft) != NULL) {
		snprintf(m->quantization, sizeof(m->quantization), "%s", file_type_name(ft));
	} else {
		int best = 0;
		for (int t = 1; t < TT_COUNT; t++)
			if (bytes_by_type[t] > bytes_by_type[best])
				best = t;
		if (f->n_tensors > 0)
			snprintf(m->quantization, sizeof(m->quantization), "%s", tensor_type_name((uint32_t)best));
	}
	gguf_close(f);
	return APP_OK;
}

void
model_meta_free(struct model_meta *m)
{
	free(m->chat_template);
	m->chat_template = NULL;
}
