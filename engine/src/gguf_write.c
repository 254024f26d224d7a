/*
 * GGUF v3 writer.  Metadata and tensors are collected in memory and written
 * in one pass to a temporary file that is renamed over the target, so a
 * crash never leaves a half-written model under the final name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "privai/gguf.h"
#include "privai/tensor_type.h"

struct gguf_writer {
	struct gguf_kv *kv;
	size_t n_kv, cap_kv;
	struct gguf_tensor *t;
	void **t_data;
	size_t n_t, cap_t;
	uint64_t data_size;
};

int
gguf_writer_new(struct gguf_writer **ret_w)
{
	struct gguf_writer *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return PRIVAI_ENOMEM;
	*ret_w = w;
	return PRIVAI_OK;
}

static void
kv_free(struct gguf_kv *kv)
{
	free(kv->key);
	if (kv->type == GGUF_STRING)
		free(kv->v.str);
	if (kv->type == GGUF_ARRAY) {
		if (kv->arr_type == GGUF_STRING)
			for (uint64_t j = 0; j < kv->arr_n; j++)
				free(((char **)kv->v.arr)[j]);
		free(kv->v.arr);
	}
}

void
gguf_writer_free(struct gguf_writer *w)
{
	if (w == NULL)
		return;
	for (size_t i = 0; i < w->n_kv; i++)
		kv_free(&w->kv[i]);
	for (size_t i = 0; i < w->n_t; i++) {
		free(w->t[i].name);
		free(w->t_data[i]);
	}
	free(w->kv);
	free(w->t);
	free(w->t_data);
	free(w);
}

/* Append a slot for `key`; refuses duplicates. */
static struct gguf_kv *
kv_new(struct gguf_writer *w, const char *key)
{
	for (size_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->kv[i].key, key) == 0)
			return NULL;
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
		struct gguf_kv *nkv = realloc(w->kv, cap * sizeof(*nkv));
		if (nkv == NULL)
			return NULL;
		w->kv = nkv;
		w->cap_kv = cap;
	}
	struct gguf_kv *kv = &w->kv[w->n_kv];
	memset(kv, 0, sizeof(*kv));
	if ((kv->key = strdup(key)) == NULL)
		return NULL;
	w->n_kv++;
	return kv;
}

int
gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
	struct gguf_kv *kv = kv_new(w, key);

	if (kv == NULL)
		return PRIVAI_EINVAL;
	kv->type = GGUF_U32;
	kv->v.u64 = v;
	return PRIVAI_OK;
}

int
gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
	struct gguf_kv *kv = kv_new(w, key);

	if (kv == NULL)
		return PRIVAI_EINVAL;
	kv->type = GGUF_F32;
	kv->v.f64 = v;
	return PRIVAI_OK;
}

int
gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v)
{
	struct gguf_kv *kv = kv_new(w, key);

	if (kv == NULL)
		return PRIVAI_EINVAL;
	kv->type = GGUF_BOOL;
	kv->v.u64 = v != 0;
	return PRIVAI_OK;
}

int
gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
	struct gguf_kv *kv = kv_new(w, key);

	if (kv == NULL)
		return PRIVAI_EINVAL;
	kv->type = GGUF_STRING;
	if ((kv->v.str = strdup(v)) == NULL) {
		kv->type = GGUF_U8;
		return PRIVAI_ENOMEM;
	}
	return PRIVAI_OK;
}

static size_t
scalar_size(uint32_t t)
{
	switch (t) {
	case GGUF_U8:
	case GGUF_I8:
	case GGUF_BOOL:
		return 1;
	case GGUF_U16:
	case GGUF_I16:
		return 2;
	case GGUF_U32:
	case GGUF_I32:
	case GGUF_F32:
		return 4;
	case GGUF_U64:
	case GGUF_I64:
	case GGUF_F64:
		return 8;
	}
	return 0;
}

int
gguf_writer_set_arr(struct gguf_writer *w, const char *key, uint32_t elem_type, const void *arr, uint64_t n)
{
	size_t es = scalar_size(elem_type);
	struct gguf_kv *kv;

	if (elem_type != GGUF_STRING && es == 0)
		return PRIVAI_EINVAL;
	if ((kv = kv_new(w, key)) == NULL)
		return PRIVAI_EINVAL;
	kv->type = GGUF_ARRAY;
	kv->arr_type = elem_type;
	if (elem_type == GGUF_STRING) {
		char **dst = calloc(n ? n : 1, sizeof(char *));
		kv->v.arr = dst;
		if (dst == NULL)
			return PRIVAI_ENOMEM;
		for (uint64_t i = 0; i < n; i++) {
			if ((dst[i] = strdup(((char *const *)arr)[i])) == NULL)
				return PRIVAI_ENOMEM;
			kv->arr_n = i + 1;
		}
		return PRIVAI_OK;
	}
	if ((kv->v.arr = malloc(n > 0 ? n * es : 1)) == NULL)
		return PRIVAI_ENOMEM;
	memcpy(kv->v.arr, arr, n * es);
	kv->arr_n = n;
	return PRIVAI_OK;
}

int
gguf_writer_set_kv(struct gguf_writer *w, const struct gguf_kv *src)
{
	struct gguf_kv *kv;

	if (src->type == GGUF_STRING)
		return gguf_writer_set_str(w, src->key, src->v.str);
	if (src->type == GGUF_ARRAY)
		return gguf_writer_set_arr(w, src->key, src->arr_type, src->v.arr, src->arr_n);
	if ((kv = kv_new(w, src->key)) == NULL)
		return PRIVAI_EINVAL;
	kv->type = src->type;
	kv->v = src->v;
	return PRIVAI_OK;
}

int
gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
		       const void *data)
{
	const struct tensor_type_info *ti = tensor_type_get(type);
	uint64_t n = 1;

	if (ti == NULL || n_dims == 0 || n_dims > GGUF_MAX_DIMS || ne[0] % ti->block_elems)
		return PRIVAI_EINVAL;
	for (size_t i = 0; i < w->n_t; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return PRIVAI_EINVAL;
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? 2 * w->cap_t : 64;
		struct gguf_tensor *nt = realloc(w->t, cap * sizeof(*nt));
		if (nt == NULL)
			return PRIVAI_ENOMEM;
		w->t = nt;
		void **nd = realloc(w->t_data, cap * sizeof(*nd));
		if (nd == NULL)
			return PRIVAI_ENOMEM;
		w->t_data = nd;
		w->cap_t = cap;
	}
	struct gguf_tensor *t = &w->t[w->n_t];
	memset(t, 0, sizeof(*t));
	t->type = type;
	t->n_dims = n_dims;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = d < n_dims ? ne[d] : 1;
		n *= t->ne[d];
	}
	t->n_elems = n;
	t->n_bytes = n / ti->block_elems * ti->block_bytes;
	void *copy = malloc(t->n_bytes ? t->n_bytes : 1);
	if (copy == NULL || (t->name = strdup(name)) == NULL) {
		free(copy);
		return PRIVAI_ENOMEM;
	}
	memcpy(copy, data, t->n_bytes);
	w->t_data[w->n_t] = copy;
	t->offset = w->data_size;
	w->data_size += (t->n_bytes + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT;
	w->n_t++;
	return PRIVAI_OK;
}

static int
put(FILE *fp, const void *p, size_t n)
{
	return fwrite(p, 1, n, fp) == n ? 0 : -1;
}

static int
put_u32(FILE *fp, uint32_t v)
{
	return put(fp, &v, 4);
}
static int
put_u64(FILE *fp, uint64_t v)
{
	return put(fp, &v, 8);
}

static int
put_str(FILE *fp, const char *s)
{
	uint64_t n = strlen(s);

	return put_u64(fp, n) || put(fp, s, n);
}

static int
put_scalar(FILE *fp, uint32_t type, const void *raw)
{
	return put(fp, raw, scalar_size(type));
}

static int
put_kv(FILE *fp, const struct gguf_kv *kv)
{
	if (put_str(fp, kv->key) || put_u32(fp, kv->type))
		return -1;
	if (kv->type == GGUF_STRING)
		return put_str(fp, kv->v.str);
	if (kv->type == GGUF_ARRAY) {
		if (put_u32(fp, kv->arr_type) || put_u64(fp, kv->arr_n))
			return -1;
		if (kv->arr_type == GGUF_STRING) {
			for (uint64_t i = 0; i < kv->arr_n; i++)
				if (put_str(fp, ((char **)kv->v.arr)[i]))
					return -1;
			return 0;
		}
		return put(fp, kv->v.arr, kv->arr_n * scalar_size(kv->arr_type));
	}
	/* scalars are held widened; narrow them back to their wire size */
	uint8_t raw[8];
	switch (kv->type) {
	case GGUF_F32: {
		float f = (float)kv->v.f64;
		memcpy(raw, &f, 4);
		break;
	}
	case GGUF_F64:
		memcpy(raw, &kv->v.f64, 8);
		break;
	default:
		memcpy(raw, &kv->v.u64, 8);
		break; /* little-endian low bytes */
	}
	return put_scalar(fp, kv->type, raw);
}

int
gguf_writer_write(struct gguf_writer *w, const char *path, char *err)
{
	static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 16);
	FILE *fp;
	int bad = 0;

	if (tmp == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	snprintf(tmp, plen + 16, "%s.tmp.%d", path, (int)getpid());
	if ((fp = fopen(tmp, "wb")) == NULL) {
		int r = privai_fail(err, PRIVAI_EIO, "cannot create '%s': %s", tmp, strerror(errno));
		free(tmp);
		return r;
	}
	bad |= put_u32(fp, 0x46554747u) || put_u32(fp, 3) || put_u64(fp, w->n_t) || put_u64(fp, w->n_kv);
	for (size_t i = 0; i < w->n_kv && !bad; i++)
		bad |= put_kv(fp, &w->kv[i]);
	for (size_t i = 0; i < w->n_t && !bad; i++) {
		const struct gguf_tensor *t = &w->t[i];
		bad |= put_str(fp, t->name) || put_u32(fp, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims; d++)
			bad |= put_u64(fp, t->ne[d]);
		bad |= put_u32(fp, t->type) || put_u64(fp, t->offset);
	}
	long pos = ftell(fp);
	bad |= pos < 0;
	if (!bad && pos % GGUF_DEFAULT_ALIGNMENT)
		bad |= put(fp, zeros, GGUF_DEFAULT_ALIGNMENT - pos % GGUF_DEFAULT_ALIGNMENT);
	for (size_t i = 0; i < w->n_t && !bad; i++) {
		const struct gguf_tensor *t = &w->t[i];
		bad |= put(fp, w->t_data[i], t->n_bytes);
		if (t->n_bytes % GGUF_DEFAULT_ALIGNMENT)
			bad |= put(fp, zeros, GGUF_DEFAULT_ALIGNMENT - t->n_bytes % GGUF_DEFAULT_ALIGNMENT);
	}
	bad |= fflush(fp) != 0;
	bad |= fclose(fp) != 0;
	if (bad || rename(tmp, path) != 0) {
		int r = privai_fail(err, PRIVAI_EIO, "cannot write '%s': %s", path, strerror(errno));
		unlink(tmp);
		free(tmp);
		return r;
	}
	free(tmp);
	return PRIVAI_OK;
}
