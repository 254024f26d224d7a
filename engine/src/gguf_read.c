/*
 * GGUF reader.  The file is mapped read-only; a cursor walks the header and
 * every read is bounds-checked against the mapping before it happens.
 *
 * Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
 * key/value pairs, n_tensors tensor infos, padding to `general.alignment`,
 * and the data section that tensor offsets are relative to.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "privai/gguf.h"
#include "privai/tensor_type.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
/* No real model has more; the limits stop a hostile count early. */
#define MAX_KEY_LEN 65536
#define MAX_TENSORS (1u << 20)

struct cursor {
	const uint8_t *base;
	size_t size, pos;
	char *err;
};

static const size_t vtype_size[GGUF_VTYPE_COUNT] = {
	[GGUF_U8] = 1,  [GGUF_I8] = 1,   [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
	[GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

const char *
gguf_vtype_name(uint32_t t)
{
	static const char *names[GGUF_VTYPE_COUNT] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
	};
	return t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

static int
need(struct cursor *c, size_t n, const char *what)
{
	if (n > c->size - c->pos)
		return privai_fail(c->err, PRIVAI_EFORMAT,
				   "truncated file: %s needs %zu bytes at offset %zu, file has %zu", what, n, c->pos,
				   c->size);
	return PRIVAI_OK;
}

static int
rd_raw(struct cursor *c, void *dst, size_t n, const char *what)
{
	int r = need(c, n, what);

	if (r < 0)
		return r;
	memcpy(dst, c->base + c->pos, n);
	c->pos += n;
	return PRIVAI_OK;
}

static int
rd_u32(struct cursor *c, uint32_t *v, const char *what)
{
	return rd_raw(c, v, 4, what);
}

static int
rd_u64(struct cursor *c, uint64_t *v, const char *what)
{
	return rd_raw(c, v, 8, what);
}

/* Read a length-prefixed string into a fresh NUL-terminated copy. */
static int
rd_str(struct cursor *c, char **ret, const char *what)
{
	uint64_t len;
	size_t at = c->pos;
	int r = rd_u64(c, &len, what);

	if (r < 0)
		return r;
	if (len > c->size - c->pos)
		return privai_fail(c->err, PRIVAI_EFORMAT,
				   "truncated or corrupt file: %s at offset %zu has length %llu, beyond the end of the "
				   "file",
				   what, at, (unsigned long long)len);
	char *s = malloc(len + 1);
	if (s == NULL)
		return privai_fail(c->err, PRIVAI_ENOMEM, "out of memory reading %s", what);
	memcpy(s, c->base + c->pos, len);
	s[len] = '\0';
	c->pos += len;
	*ret = s;
	return PRIVAI_OK;
}

static int
rd_array(struct cursor *c, struct gguf_kv *kv)
{
	size_t at = c->pos;
	int r;

	if ((r = rd_u32(c, &kv->arr_type, "array type")) < 0 || (r = rd_u64(c, &kv->arr_n, "array length")) < 0)
		return r;
	if (kv->arr_type == GGUF_ARRAY)
		return privai_fail(c->err, PRIVAI_EUNSUPPORTED,
				   "key '%s' at offset %zu: nested arrays are not supported", kv->key, at);
	if (kv->arr_type >= GGUF_VTYPE_COUNT)
		return privai_fail(c->err, PRIVAI_EFORMAT, "key '%s' at offset %zu: unknown array element type %u",
				   kv->key, at, kv->arr_type);
	/* Every element takes at least its size (8 for a string's length), so a
	 * count the rest of the file cannot hold is rejected before allocating. */
	size_t min_elem = kv->arr_type == GGUF_STRING ? 8 : vtype_size[kv->arr_type];
	if (kv->arr_n > (c->size - c->pos) / min_elem)
		return privai_fail(c->err, PRIVAI_EFORMAT,
				   "truncated or corrupt file: key '%s' at offset %zu: array of %llu %s elements "
				   "exceeds the file",
				   kv->key, at, (unsigned long long)kv->arr_n, gguf_vtype_name(kv->arr_type));
	if (kv->arr_type == GGUF_STRING) {
		char **strs = calloc(kv->arr_n ? kv->arr_n : 1, sizeof(char *));
		if (strs == NULL)
			return privai_fail(c->err, PRIVAI_ENOMEM, "out of memory for '%s'", kv->key);
		kv->v.arr = strs;
		for (uint64_t i = 0; i < kv->arr_n; i++)
			if ((r = rd_str(c, &strs[i], "array string")) < 0)
				return r;
		return PRIVAI_OK;
	}
	size_t bytes = (size_t)kv->arr_n * min_elem;
	kv->v.arr = malloc(bytes ? bytes : 1);
	if (kv->v.arr == NULL)
		return privai_fail(c->err, PRIVAI_ENOMEM, "out of memory for '%s'", kv->key);
	return rd_raw(c, kv->v.arr, bytes, "array data");
}

static int
rd_value(struct cursor *c, struct gguf_kv *kv)
{
	size_t at = c->pos;
	uint8_t raw[8] = { 0 };
	int r;

	if (kv->type >= GGUF_VTYPE_COUNT)
		return privai_fail(c->err, PRIVAI_EFORMAT, "key '%s' at offset %zu: unknown value type %u", kv->key, at,
				   kv->type);
	if (kv->type == GGUF_STRING)
		return rd_str(c, &kv->v.str, "string value");
	if (kv->type == GGUF_ARRAY)
		return rd_array(c, kv);
	if ((r = rd_raw(c, raw, vtype_size[kv->type], "value")) < 0)
		return r;
	switch (kv->type) {
	case GGUF_U8:
		kv->v.u64 = raw[0];
		break;
	case GGUF_BOOL:
		if (raw[0] > 1)
			return privai_fail(c->err, PRIVAI_EFORMAT,
					   "key '%s' at offset %zu: bool value %u is not 0 or 1", kv->key, at, raw[0]);
		kv->v.u64 = raw[0];
		break;
	case GGUF_I8:
		kv->v.i64 = (int8_t)raw[0];
		break;
	case GGUF_U16: {
		uint16_t v;
		memcpy(&v, raw, 2);
		kv->v.u64 = v;
		break;
	}
	case GGUF_I16: {
		int16_t v;
		memcpy(&v, raw, 2);
		kv->v.i64 = v;
		break;
	}
	case GGUF_U32: {
		uint32_t v;
		memcpy(&v, raw, 4);
		kv->v.u64 = v;
		break;
	}
	case GGUF_I32: {
		int32_t v;
		memcpy(&v, raw, 4);
		kv->v.i64 = v;
		break;
	}
	case GGUF_F32: {
		float v;
		memcpy(&v, raw, 4);
		kv->v.f64 = v;
		break;
	}
	case GGUF_U64:
		memcpy(&kv->v.u64, raw, 8);
		break;
	case GGUF_I64:
		memcpy(&kv->v.i64, raw, 8);
		break;
	case GGUF_F64:
		memcpy(&kv->v.f64, raw, 8);
		break;
	}
	return PRIVAI_OK;
}

static int
cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* qsort_r comparator: the file is the context, so two threads may load
 * models at once. */
static int
cmp_tensor_idx(const void *a, const void *b, void *ctx)
{
	const struct gguf_file *f = ctx;

	return strcmp(f->tensors[*(const uint32_t *)a].name, f->tensors[*(const uint32_t *)b].name);
}

static int
read_kvs(struct cursor *c, struct gguf_file *f)
{
	int r;

	for (uint64_t i = 0; i < f->n_kv; i++) {
		struct gguf_kv *kv = &f->kv[i];
		size_t at = c->pos;
		if ((r = rd_str(c, &kv->key, "metadata key")) < 0)
			return r;
		if (kv->key[0] == '\0' || strlen(kv->key) > MAX_KEY_LEN)
			return privai_fail(c->err, PRIVAI_EFORMAT,
					   "metadata key %llu at offset %zu is empty or too long",
					   (unsigned long long)i, at);
		if ((r = rd_u32(c, &kv->type, "value type")) < 0 || (r = rd_value(c, kv)) < 0)
			return r;
	}
	/* duplicates: sort a copy of the key pointers */
	char **keys = malloc((f->n_kv ? f->n_kv : 1) * sizeof(char *));
	if (keys == NULL)
		return privai_fail(c->err, PRIVAI_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < f->n_kv; i++)
		keys[i] = f->kv[i].key;
	qsort(keys, f->n_kv, sizeof(char *), cmp_str_ptr);
	for (uint64_t i = 1; i < f->n_kv; i++) {
		if (strcmp(keys[i - 1], keys[i]) == 0) {
			r = privai_fail(c->err, PRIVAI_EFORMAT, "duplicate metadata key '%s'", keys[i]);
			free(keys);
			return r;
		}
	}
	free(keys);
	return PRIVAI_OK;
}

static int
read_tensor_info(struct cursor *c, struct gguf_tensor *t)
{
	size_t at = c->pos;
	int r;

	if ((r = rd_str(c, &t->name, "tensor name")) < 0 || (r = rd_u32(c, &t->n_dims, "tensor rank")) < 0)
		return r;
	if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
		return privai_fail(c->err, PRIVAI_EFORMAT, "tensor '%s' at offset %zu: rank %u is not 1..%d", t->name,
				   at, t->n_dims, GGUF_MAX_DIMS);
	t->n_elems = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d < t->n_dims && (r = rd_u64(c, &t->ne[d], "tensor dimension")) < 0)
			return r;
		if (t->ne[d] == 0 || t->ne[d] > (UINT64_C(1) << 40) || t->n_elems > (UINT64_C(1) << 46) / t->ne[d])
			return privai_fail(c->err, PRIVAI_EFORMAT,
					   "tensor '%s' at offset %zu: dimension %u = %llu is zero or too large",
					   t->name, at, d, (unsigned long long)t->ne[d]);
		t->n_elems *= t->ne[d];
	}
	if ((r = rd_u32(c, &t->type, "tensor type")) < 0 || (r = rd_u64(c, &t->offset, "tensor offset")) < 0)
		return r;
	const struct tensor_type_info *ti = tensor_type_get(t->type);
	if (ti == NULL)
		return privai_fail(c->err, PRIVAI_EFORMAT, "tensor '%s' at offset %zu: unknown tensor type %u", t->name,
				   at, t->type);
	if (t->ne[0] % ti->block_elems != 0)
		return privai_fail(c->err, PRIVAI_EFORMAT,
				   "tensor '%s' at offset %zu: row of %llu elements is not a multiple of %s's block of "
				   "%u",
				   t->name, at, (unsigned long long)t->ne[0], ti->name, ti->block_elems);
	t->n_bytes = t->n_elems / ti->block_elems * ti->block_bytes;
	return PRIVAI_OK;
}

static int
read_tensors(struct cursor *c, struct gguf_file *f)
{
	int r;

	for (uint64_t i = 0; i < f->n_tensors; i++)
		if ((r = read_tensor_info(c, &f->tensors[i])) < 0)
			return r;
	for (uint64_t i = 0; i < f->n_tensors; i++)
		f->tensor_order[i] = (uint32_t)i;
	qsort_r(f->tensor_order, f->n_tensors, sizeof(uint32_t), cmp_tensor_idx, f);
	for (uint64_t i = 1; i < f->n_tensors; i++) {
		const char *a = f->tensors[f->tensor_order[i - 1]].name;
		if (strcmp(a, f->tensors[f->tensor_order[i]].name) == 0)
			return privai_fail(c->err, PRIVAI_EFORMAT, "duplicate tensor name '%s'", a);
	}

	/* data section: aligned start, every tensor inside it and aligned */
	uint64_t a = f->alignment;
	uint64_t data = (c->pos + a - 1) / a * a;
	if (data > c->size && f->n_tensors > 0)
		return privai_fail(c->err, PRIVAI_EFORMAT,
				   "truncated file: data section would start at offset %llu, file has %zu bytes",
				   (unsigned long long)data, c->size);
	f->data_offset = data;
	uint64_t avail = data <= c->size ? c->size - data : 0;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		if (t->offset % a != 0)
			return privai_fail(c->err, PRIVAI_EFORMAT,
					   "tensor '%s': data offset %llu is not a multiple of the alignment %llu",
					   t->name, (unsigned long long)t->offset, (unsigned long long)a);
		if (t->offset > avail || t->n_bytes > avail - t->offset)
			return privai_fail(c->err, PRIVAI_EFORMAT,
					   "tensor '%s': %llu bytes at file offset %llu run past the end of the file "
					   "(%zu bytes)",
					   t->name, (unsigned long long)t->n_bytes,
					   (unsigned long long)(data + t->offset), c->size);
		t->data = c->base + data + t->offset;
	}
	return PRIVAI_OK;
}

static int
parse(struct gguf_file *f, char *err)
{
	struct cursor c = { f->map, f->map_size, 0, err };
	uint32_t magic;
	int r;

	if ((r = rd_u32(&c, &magic, "magic")) < 0)
		return r;
	if (magic != GGUF_MAGIC)
		return privai_fail(err, PRIVAI_EFORMAT, "not a GGUF file (bad magic at offset 0)");
	if ((r = rd_u32(&c, &f->version, "version")) < 0)
		return r;
	if (f->version == 1 || f->version > 3)
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "GGUF version %u at offset 4 is not supported (2 and 3 are)%s", f->version,
				   f->version > 0xffff ? "; big-endian files are not supported" : "");
	if (f->version == 0)
		return privai_fail(err, PRIVAI_EFORMAT, "GGUF version 0 at offset 4 is invalid");
	if ((r = rd_u64(&c, &f->n_tensors, "tensor count")) < 0 || (r = rd_u64(&c, &f->n_kv, "metadata count")) < 0)
		return r;
	/* each kv needs >= 12 bytes and each tensor info >= 24 */
	if (f->n_kv > (c.size - c.pos) / 12 || f->n_tensors > MAX_TENSORS || f->n_tensors > (c.size - c.pos) / 24)
		return privai_fail(err, PRIVAI_EFORMAT,
				   "header at offset 8 claims %llu tensors and %llu metadata keys, more than "
				   "the %zu bytes of the file can hold",
				   (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv, c.size);
	f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof(*f->kv));
	f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof(*f->tensors));
	f->tensor_order = calloc(f->n_tensors ? f->n_tensors : 1, sizeof(uint32_t));
	if (f->kv == NULL || f->tensors == NULL || f->tensor_order == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for the GGUF header");
	if ((r = read_kvs(&c, f)) < 0)
		return r;
	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	const struct gguf_kv *al = gguf_find_kv(f, "general.alignment");
	if (al != NULL) {
		if (al->type != GGUF_U32 || al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)) != 0 || al->v.u64 > 65536)
			return privai_fail(err, PRIVAI_EFORMAT,
					   "general.alignment must be a u32 power of two up to 65536");
		f->alignment = (uint32_t)al->v.u64;
	}
	return read_tensors(&c, f);
}

void
gguf_close(struct gguf_file *f)
{
	if (f == NULL)
		return;
	for (uint64_t i = 0; f->kv != NULL && i < f->n_kv; i++) {
		struct gguf_kv *kv = &f->kv[i];
		free(kv->key);
		if (kv->type == GGUF_STRING)
			free(kv->v.str);
		if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING && kv->v.arr != NULL)
			for (uint64_t j = 0; j < kv->arr_n; j++)
				free(((char **)kv->v.arr)[j]);
		if (kv->type == GGUF_ARRAY)
			free(kv->v.arr);
	}
	for (uint64_t i = 0; f->tensors != NULL && i < f->n_tensors; i++)
		free(f->tensors[i].name);
	free(f->kv);
	free(f->tensors);
	free(f->tensor_order);
	if (f->owns_map)
		munmap((void *)f->map, f->map_size);
	free(f);
}

static int
open_common(struct gguf_file *f, struct gguf_file **ret_file, char *err)
{
	int r = parse(f, err);

	if (r < 0)
		return r;
	*ret_file = f;
	return PRIVAI_OK;
}

int
gguf_open_buffer(const void *buf, size_t size, struct gguf_file **ret_file, char *err)
{
	struct gguf_file *f = calloc(1, sizeof(*f));
	int r;

	if (f == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	f->map = buf;
	f->map_size = size;
	if ((r = open_common(f, ret_file, err)) < 0)
		gguf_close(f);
	return r;
}

int
gguf_open(const char *path, struct gguf_file **ret_file, char *err)
{
	struct stat st;
	void *map;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return privai_fail(err, PRIVAI_EIO, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return privai_fail(err, PRIVAI_EIO, "'%s' is not a regular file", path);
	}
	if (st.st_size == 0) {
		close(fd);
		return privai_fail(err, PRIVAI_EFORMAT, "'%s' is empty, not a GGUF file", path);
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return privai_fail(err, PRIVAI_EIO, "cannot map '%s': %s", path, strerror(errno));
	r = gguf_open_buffer(map, (size_t)st.st_size, ret_file, err);
	if (r < 0) {
		munmap(map, (size_t)st.st_size);
		return r;
	}
	(*ret_file)->owns_map = 1;
	return PRIVAI_OK;
}

const struct gguf_kv *
gguf_find_kv(const struct gguf_file *f, const char *key)
{
	for (uint64_t i = 0; i < f->n_kv; i++)
		if (f->kv[i].key != NULL && strcmp(f->kv[i].key, key) == 0)
			return &f->kv[i];
	return NULL;
}

const struct gguf_tensor *
gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	size_t lo = 0, hi = f->n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct gguf_tensor *t = &f->tensors[f->tensor_order[mid]];
		int c = strcmp(name, t->name);
		if (c == 0)
			return t;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

static int
is_int_type(uint32_t t)
{
	return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 || t == GGUF_I32 ||
	       t == GGUF_U64 || t == GGUF_I64;
}

static int
is_signed_type(uint32_t t)
{
	return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

int
gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *ret, char *err)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	if (kv == NULL)
		return PRIVAI_ENOTFOUND;
	if (!is_int_type(kv->type))
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' is a %s, expected an integer", key,
				   gguf_vtype_name(kv->type));
	if ((is_signed_type(kv->type) && kv->v.i64 < 0) || kv->v.u64 > UINT32_MAX)
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' = %lld is out of range", key,
				   (long long)kv->v.i64);
	*ret = (uint32_t)kv->v.u64;
	return PRIVAI_OK;
}

int
gguf_get_f32(const struct gguf_file *f, const char *key, float *ret, char *err)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	if (kv == NULL)
		return PRIVAI_ENOTFOUND;
	if (kv->type == GGUF_F32 || kv->type == GGUF_F64)
		*ret = (float)kv->v.f64;
	else if (is_int_type(kv->type))
		*ret = is_signed_type(kv->type) ? (float)kv->v.i64 : (float)kv->v.u64;
	else
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' is a %s, expected a number", key,
				   gguf_vtype_name(kv->type));
	return PRIVAI_OK;
}

int
gguf_get_bool(const struct gguf_file *f, const char *key, int *ret, char *err)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	if (kv == NULL)
		return PRIVAI_ENOTFOUND;
	if (kv->type != GGUF_BOOL)
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' is a %s, expected a bool", key,
				   gguf_vtype_name(kv->type));
	*ret = kv->v.u64 != 0;
	return PRIVAI_OK;
}

int
gguf_get_str(const struct gguf_file *f, const char *key, const char **ret, char *err)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	if (kv == NULL)
		return PRIVAI_ENOTFOUND;
	if (kv->type != GGUF_STRING)
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' is a %s, expected a string", key,
				   gguf_vtype_name(kv->type));
	*ret = kv->v.str;
	return PRIVAI_OK;
}

int
gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t elem_type, const void **ret_arr, uint64_t *ret_n,
	     char *err)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	if (kv == NULL)
		return PRIVAI_ENOTFOUND;
	if (kv->type != GGUF_ARRAY || kv->arr_type != elem_type)
		return privai_fail(err, PRIVAI_EFORMAT, "metadata '%s' is not an array of %s", key,
				   gguf_vtype_name(elem_type));
	*ret_arr = kv->v.arr;
	*ret_n = kv->arr_n;
	return PRIVAI_OK;
}
