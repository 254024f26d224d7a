/*
 * GGUF reader and writer: a file with every metadata type written and read
 * back identically; every truncation of it and thousands of corrupted copies
 * rejected with a message (never a crash, which ASan builds check); and the
 * hostile headers a fuzzer would take long to find, named one by one.
 */
#include <unistd.h>

#include "testlib.h"
#include "privai/gguf.h"
#include "privai/model.h"
#include "privai/tensor_type.h"

static char tmp_path[256];

static int
write_sample(void)
{
	struct gguf_writer *w;
	char err[PRIVAI_ERR_LEN];
	int8_t i8s[3] = { -1, 0, 1 };
	uint64_t u64s[2] = { 1, UINT64_MAX };
	const char *strs[3] = { "a", "", "ünïcode" };
	float data[64];
	uint64_t ne[2] = { 32, 2 };
	int r = 0;

	for (int i = 0; i < 64; i++)
		data[i] = (float)i - 10.5f;
	if (gguf_writer_new(&w) < 0)
		return -1;
	r |= gguf_writer_set_str(w, "general.architecture", "llama");
	r |= gguf_writer_set_u32(w, "test.u32", 123456);
	r |= gguf_writer_set_f32(w, "test.f32", 0.25f);
	r |= gguf_writer_set_bool(w, "test.bool", 1);
	struct gguf_kv kv = { .key = "test.i64", .type = GGUF_I64 };
	kv.v.i64 = -5;
	r |= gguf_writer_set_kv(w, &kv);
	kv = (struct gguf_kv){ .key = "test.f64", .type = GGUF_F64 };
	kv.v.f64 = 3.5;
	r |= gguf_writer_set_kv(w, &kv);
	kv = (struct gguf_kv){ .key = "test.u8", .type = GGUF_U8 };
	kv.v.u64 = 200;
	r |= gguf_writer_set_kv(w, &kv);
	r |= gguf_writer_set_arr(w, "test.i8s", GGUF_I8, i8s, 3);
	r |= gguf_writer_set_arr(w, "test.u64s", GGUF_U64, u64s, 2);
	r |= gguf_writer_set_arr(w, "test.strs", GGUF_STRING, strs, 3);
	r |= gguf_writer_add_tensor(w, "t.f32", TT_F32, 2, ne, data);
	uint8_t q[68];
	tensor_quantize_row(TT_Q8_0, data, q, 64);
	uint64_t ne2[1] = { 64 };
	r |= gguf_writer_add_tensor(w, "t.q8", TT_Q8_0, 1, ne2, q);
	CHECK(gguf_writer_set_u32(w, "test.u32", 1) == PRIVAI_EINVAL, "duplicate key refused by the writer");
	CHECK(gguf_writer_add_tensor(w, "t.q8", TT_Q8_0, 1, ne2, q) == PRIVAI_EINVAL, "duplicate tensor refused");
	CHECK(gguf_writer_add_tensor(w, "t.bad", TT_Q8_0, 1, (uint64_t[]){ 33 }, q) == PRIVAI_EINVAL,
	      "row not a whole number of blocks refused");
	if (r == 0)
		r = gguf_writer_write(w, tmp_path, err);
	gguf_writer_free(w);
	return r;
}

static void
test_round_trip(void)
{
	struct gguf_file *f;
	char err[PRIVAI_ERR_LEN];
	const void *arr;
	uint64_t n;
	uint32_t u;
	float fl;
	int b;
	const char *s;

	CHECK(write_sample() == 0, "writer wrote the sample");
	if (gguf_open(tmp_path, &f, err) < 0) {
		CHECK(0, "reading back: %s", err);
		return;
	}
	CHECK(f->version == 3 && f->n_kv == 10 && f->n_tensors == 2, "header counts");
	CHECK(gguf_get_u32(f, "test.u32", &u, err) == 0 && u == 123456, "u32");
	CHECK(gguf_get_f32(f, "test.f32", &fl, err) == 0 && fl == 0.25f, "f32");
	CHECK(gguf_get_bool(f, "test.bool", &b, err) == 0 && b == 1, "bool");
	CHECK(gguf_find_kv(f, "test.i64")->v.i64 == -5, "i64");
	CHECK(gguf_find_kv(f, "test.f64")->v.f64 == 3.5, "f64");
	CHECK(gguf_get_u32(f, "test.u8", &u, err) == 0 && u == 200, "u8");
	CHECK(gguf_get_str(f, "general.architecture", &s, err) == 0 && strcmp(s, "llama") == 0, "string");
	CHECK(gguf_get_arr(f, "test.i8s", GGUF_I8, &arr, &n, err) == 0 && n == 3 && ((const int8_t *)arr)[0] == -1,
	      "i8 array");
	CHECK(gguf_get_arr(f, "test.u64s", GGUF_U64, &arr, &n, err) == 0 && n == 2 &&
		      ((const uint64_t *)arr)[1] == UINT64_MAX,
	      "u64 array");
	CHECK(gguf_get_arr(f, "test.strs", GGUF_STRING, &arr, &n, err) == 0 && n == 3 &&
		      strcmp(((char *const *)arr)[2], "ünïcode") == 0 && ((char *const *)arr)[1][0] == 0,
	      "string array");
	CHECK(gguf_get_u32(f, "test.f32", &u, err) == PRIVAI_EFORMAT, "type mismatch is an error");
	CHECK(gguf_get_u32(f, "test.absent", &u, err) == PRIVAI_ENOTFOUND, "absent key");
	const struct gguf_tensor *t = gguf_find_tensor(f, "t.f32");
	CHECK(t && t->ne[0] == 32 && t->ne[1] == 2 && ((const float *)t->data)[63] == 52.5f, "f32 tensor data");
	t = gguf_find_tensor(f, "t.q8");
	CHECK(t && t->type == TT_Q8_0 && t->n_bytes == 68 && ((uintptr_t)t->data % 32) == 0, "q8 tensor aligned");
	CHECK(gguf_find_tensor(f, "nope") == NULL, "missing tensor");
	gguf_close(f);
}

static uint8_t *
load(size_t *len)
{
	return (uint8_t *)read_file(tmp_path, len);
}

static int
open_mem(const uint8_t *buf, size_t len, char *err)
{
	struct gguf_file *f = NULL;
	int r = gguf_open_buffer(buf, len, &f, err);

	if (r == 0) {
		struct engine_model *m = NULL;
		if (engine_model_from_gguf(f, &m, err) == 0)
			engine_model_free(m);
		else
			gguf_close(f);
	}
	return r;
}

static void
test_truncations(void)
{
	size_t len;
	uint8_t *buf = load(&len);
	char err[PRIVAI_ERR_LEN];
	int bad = 0;

	CHECK(buf != NULL, "sample readable");
	if (buf == NULL)
		return;
	/* the writer pads the last tensor to the alignment; cutting only that
	 * padding leaves a complete file */
	size_t end = len;
	struct gguf_file *whole;
	if (gguf_open_buffer(buf, len, &whole, err) == 0) {
		const struct gguf_tensor *t = gguf_find_tensor(whole, "t.q8");
		end = (size_t)(whole->data_offset + t->offset + t->n_bytes);
		gguf_close(whole);
	}
	for (size_t cut = 0; cut < end; cut++) {
		uint8_t *copy = malloc(cut ? cut : 1); /* exact size, so ASan sees overreads */
		memcpy(copy, buf, cut);
		err[0] = 0;
		int r = open_mem(copy, cut, err);
		/* the data section's tail may be cut without touching a tensor only
		 * when the padding after the last tensor is what went missing */
		if (r == 0 || strstr(err, "offset") == NULL) {
			if (bad++ < 5)
				fprintf(stderr, "cut %zu of %zu: %d '%s'\n", cut, len, r, err);
		}
		free(copy);
	}
	CHECK(bad == 0, "%d of %zu truncations were accepted or gave no offset", bad, end);
	CHECK(end < len && open_mem(buf, end, err) == 0, "a file cut right after its last tensor is whole");
	free(buf);
}

static void
test_corruptions(void)
{
	size_t len;
	uint8_t *buf = load(&len);
	char err[PRIVAI_ERR_LEN];
	uint64_t s = 7;
	int accepted = 0;

	if (buf == NULL)
		return;
	uint8_t *copy = malloc(len);
	for (int i = 0; i < 5000; i++) {
		memcpy(copy, buf, len);
		for (int k = 0; k < 1 + i % 4; k++) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			size_t at = (s >> 33) % (len < 600 ? len : 600); /* the header */
			copy[at] ^= (uint8_t)(1u << ((s >> 20) & 7));
		}
		accepted += open_mem(copy, len, err) == 0;
	}
	/* a flipped bit inside a string or value may still be a valid file */
	printf("corruptions: %d of 5000 still valid files, none crashed\n", accepted);
	CHECK(1, "survived 5000 corrupted headers");
	free(copy);
	free(buf);
}

/* Build a header by hand: magic, version, counts, then raw bytes. */
static size_t
hdr(uint8_t *b, uint32_t version, uint64_t nt, uint64_t nkv)
{
	memcpy(b, "GGUF", 4);
	memcpy(b + 4, &version, 4);
	memcpy(b + 8, &nt, 8);
	memcpy(b + 16, &nkv, 8);
	return 24;
}

static size_t
str(uint8_t *b, const char *s)
{
	uint64_t n = strlen(s);

	memcpy(b, &n, 8);
	memcpy(b + 8, s, n);
	return 8 + n;
}

static size_t
u32(uint8_t *b, uint32_t v)
{
	memcpy(b, &v, 4);
	return 4;
}

static size_t
u64(uint8_t *b, uint64_t v)
{
	memcpy(b, &v, 8);
	return 8;
}

/* A tensor info: name, rank, dims, type, offset. */
static size_t
tinfo(uint8_t *b, const char *name, uint32_t nd, uint64_t ne0, uint64_t ne1, uint32_t type, uint64_t off)
{
	size_t n = str(b, name);

	n += u32(b + n, nd);
	n += u64(b + n, ne0);
	if (nd > 1)
		n += u64(b + n, ne1);
	n += u32(b + n, type);
	n += u64(b + n, off);
	return n;
}

static void
expect(const uint8_t *b, size_t n, const char *needle, const char *what)
{
	char err[PRIVAI_ERR_LEN] = "";
	int r = open_mem(b, n, err);

	CHECK(r < 0 && strstr(err, needle) != NULL, "%s: got %d '%s'", what, r, err);
}

static void
test_hostile(void)
{
	uint8_t b[4096];
	size_t n;

	memset(b, 0, sizeof(b));
	memcpy(b, "GGML", 4);
	expect(b, 64, "bad magic", "bad magic");
	n = hdr(b, 1, 0, 0);
	expect(b, n, "version 1", "GGUF v1");
	n = hdr(b, 0x03000000, 0, 0);
	expect(b, n, "big-endian", "byte-swapped version");
	n = hdr(b, 3, 0, UINT64_MAX);
	expect(b, n, "more than the", "huge kv count");
	n = hdr(b, 3, 0, 1);
	n += u64(b + n, UINT64_MAX - 4);
	expect(b, n + 16, "beyond the end", "huge key length");
	n = hdr(b, 3, 0, 1);
	n += str(b + n, "k");
	n += u32(b + n, 9);
	n += u32(b + n, GGUF_U32);
	n += u64(b + n, 1ull << 60);
	expect(b, n + 8, "exceeds the file", "huge array count");
	n = hdr(b, 3, 0, 1);
	n += str(b + n, "k");
	n += u32(b + n, 77);
	expect(b, n + 8, "unknown value type 77", "bad value type");
	n = hdr(b, 3, 0, 1);
	n += str(b + n, "k");
	n += u32(b + n, GGUF_ARRAY);
	n += u32(b + n, GGUF_ARRAY);
	n += u64(b + n, 1);
	expect(b, n + 16, "nested arrays", "nested array");
	n = hdr(b, 3, 0, 2);
	for (int i = 0; i < 2; i++) {
		n += str(b + n, "dup");
		n += u32(b + n, GGUF_U32);
		n += u32(b + n, 1);
	}
	expect(b, n, "duplicate metadata key 'dup'", "duplicate key");
	n = hdr(b, 3, 0, 1);
	n += str(b + n, "general.alignment");
	n += u32(b + n, GGUF_U32);
	n += u32(b + n, 3);
	expect(b, n, "power of two", "bad alignment");
	/* tensors */
	n = hdr(b, 3, 1, 0);
	n += str(b + n, "t");
	n += u32(b + n, 5);
	expect(b, n + 64, "rank 5", "rank 5");
	n = hdr(b, 3, 1, 0);
	tinfo(b + n, "t", 1, 32, 0, 200, 0);
	expect(b, 256, "unknown tensor type 200", "bad tensor type");
	tinfo(b + n, "t", 1, 33, 0, TT_Q4_0, 0);
	expect(b, 256, "not a multiple", "partial block");
	tinfo(b + n, "t", 2, 1ull << 39, 1ull << 39, TT_F32, 0);
	expect(b, 256, "too large", "element count overflow");
	tinfo(b + n, "t", 1, 32, 0, TT_F32, 8);
	expect(b, 512, "alignment", "misaligned offset");
	tinfo(b + n, "t", 1, 1024, 0, TT_F32, 0);
	expect(b, 512, "past the end", "data past end of file");
	n = hdr(b, 3, 2, 0);
	n += tinfo(b + n, "same", 1, 8, 0, TT_F32, 0);
	tinfo(b + n, "same", 1, 8, 0, TT_F32, 32);
	expect(b, 512, "duplicate tensor name 'same'", "duplicate tensor");
}

int
main(void)
{
	snprintf(tmp_path, sizeof(tmp_path), "%s/privai-test-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
		 (int)getpid());
	test_round_trip();
	test_truncations();
	test_corruptions();
	test_hostile();
	unlink(tmp_path);
	return test_summary();
}
