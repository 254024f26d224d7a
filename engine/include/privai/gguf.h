/*
 * GGUF v2/v3 files: a validating, mmap-based reader and a writer.
 *
 * The reader checks everything it reads against the file's size before it
 * trusts it: string and array lengths, type ids, tensor ranks and shapes,
 * row sizes against block sizes, data offsets and alignment, duplicate keys
 * and tensor names.  A truncated or hostile file gives PRIVAI_EFORMAT and a
 * message naming the problem and its byte offset; it never reads out of
 * bounds.  Metadata is copied out of the mapping (strings NUL-terminated,
 * arrays in native, aligned form); tensor data stays in the read-only map.
 */
#ifndef PRIVAI_GGUF_H
#define PRIVAI_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "privai/status.h"

enum gguf_vtype {
	GGUF_U8 = 0,
	GGUF_I8 = 1,
	GGUF_U16 = 2,
	GGUF_I16 = 3,
	GGUF_U32 = 4,
	GGUF_I32 = 5,
	GGUF_F32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
	GGUF_U64 = 10,
	GGUF_I64 = 11,
	GGUF_F64 = 12,
	GGUF_VTYPE_COUNT = 13
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

struct gguf_kv {
	char *key;
	uint32_t type;     /* enum gguf_vtype */
	uint32_t arr_type; /* element type when type == GGUF_ARRAY */
	uint64_t arr_n;    /* element count when type == GGUF_ARRAY */
	union {
		uint64_t u64;
		int64_t i64;
		double f64;
		char *str;
		void *arr; /* arr_n elements; char ** for string arrays */
	} v;
};

struct gguf_tensor {
	char *name;
	uint32_t type; /* enum tensor_type */
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension */
	uint64_t offset;            /* from the start of the data section */
	uint64_t n_elems;
	uint64_t n_bytes;
	const void *data; /* inside the read-only mapping */
};

struct gguf_file {
	uint32_t version;
	uint32_t alignment;
	uint64_t n_kv, n_tensors;
	struct gguf_kv *kv;
	struct gguf_tensor *tensors;
	uint32_t *tensor_order; /* indices into tensors, sorted by name */
	const uint8_t *map;
	size_t map_size;
	int owns_map;         /* gguf_close unmaps it */
	uint64_t data_offset; /* start of the data section in the file */
};

/* Open and validate `path`.  On success *ret_file is set and must be
 * released with gguf_close().  On failure *ret_file is untouched. */
int gguf_open(const char *path, struct gguf_file **ret_file, char *err);

/* Validate an in-memory image (used by the fuzzer); `buf` must outlive the
 * returned file.  Same contract as gguf_open. */
int gguf_open_buffer(const void *buf, size_t size, struct gguf_file **ret_file, char *err);

/* Release a file; accepts NULL. */
void gguf_close(struct gguf_file *f);

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters.  Each returns PRIVAI_OK and sets *ret, PRIVAI_ENOTFOUND
 * when the key is absent (with *ret untouched), or PRIVAI_EFORMAT (message
 * in err) when the key holds a value of an incompatible type or range. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *ret, char *err);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *ret, char *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, int *ret, char *err);
int gguf_get_str(const struct gguf_file *f, const char *key, const char **ret, char *err);
/* An array of elem_type (e.g. GGUF_STRING); sets *ret_arr and *ret_n. */
int gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t elem_type, const void **ret_arr, uint64_t *ret_n,
		 char *err);

const char *gguf_vtype_name(uint32_t t);

/* ---- writer ---- */

struct gguf_writer;

int gguf_writer_new(struct gguf_writer **ret_w);
void gguf_writer_free(struct gguf_writer *w);

/* Metadata setters copy their arguments.  A key set twice is refused
 * with PRIVAI_EINVAL. */
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Any scalar type from a raw little-endian value (used to copy metadata). */
int gguf_writer_set_kv(struct gguf_writer *w, const struct gguf_kv *kv);
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, uint32_t elem_type, const void *arr, uint64_t n);

/* Add a tensor; `data` (n_bytes for this type and shape) is copied. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
			   const void *data);

/* Write everything to `path` (through a temporary file and rename). */
int gguf_writer_write(struct gguf_writer *w, const char *path, char *err);

#endif
