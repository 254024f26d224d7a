/*
 * Tokenizer front end: loading the vocabulary from GGUF, splitting text
 * around special tokens, dispatching fragments to SPM or BPE, and turning
 * ids back into bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

int
id_vec_push(struct id_vec *iv, int32_t id)
{
	if (iv->n == iv->cap) {
		int cap = iv->cap ? 2 * iv->cap : 64;
		int32_t *nv = realloc(iv->v, (size_t)cap * sizeof(int32_t));
		if (nv == NULL)
			return PRIVAI_ENOMEM;
		iv->v = nv;
		iv->cap = cap;
	}
	iv->v[iv->n++] = id;
	return PRIVAI_OK;
}

int
utf8_encode(uint32_t c, char *out)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (char)(0xc0 | (c >> 6));
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | (c >> 12));
		out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (c >> 18));
	out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

int
utf8_decode(const char *s, size_t n, uint32_t *ret_cpt)
{
	const unsigned char *u = (const unsigned char *)s;
	uint32_t c;
	int len;

	if (n == 0)
		return -1;
	if (u[0] < 0x80) {
		*ret_cpt = u[0];
		return 1;
	}
	if (u[0] < 0xc2 || u[0] > 0xf4)
		return -1;
	len = utf8_seq_len(u[0]);
	if ((size_t)len > n)
		return -1;
	c = u[0] & (0xff >> (len + 1));
	for (int i = 1; i < len; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return -1;
		c = (c << 6) | (u[i] & 0x3f);
	}
	/* overlong, surrogate and out-of-range forms are invalid */
	if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) || (c >= 0xd800 && c <= 0xdfff))
		return -1;
	*ret_cpt = c;
	return len;
}

static int32_t
get_id(const struct gguf_file *f, const char *key, int32_t dflt, int n_vocab)
{
	uint32_t v;

	if (gguf_get_u32(f, key, &v, NULL) != PRIVAI_OK || v >= (uint32_t)n_vocab)
		return dflt;
	return (int32_t)v;
}

/* The fill-in-the-middle tokens: llama.cpp's keys, the older CodeLlama
 * ones, else the spellings the code model families use (all of them
 * written prefix, suffix, middle: PSM order). */
static void
find_fim(struct tokenizer *t, const struct gguf_file *f)
{
	static const char *const keys[][3] = {
		{ "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
		  "tokenizer.ggml.fim_mid_token_id" },
		{ "tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
		  "tokenizer.ggml.middle_token_id" },
	};
	static const char *const spelled[][3] = {
		{ "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>" }, /* Qwen2.5-Coder */
		{ "<fim_prefix>", "<fim_suffix>", "<fim_middle>" },       /* StarCoder */
		{ "<fim-prefix>", "<fim-suffix>", "<fim-middle>" },       /* SantaCoder */
		{ "<\xef\xbd\x9c"
		  "fim\xe2\x96\x81"
		  "begin\xef\xbd\x9c>",
		  "<\xef\xbd\x9c"
		  "fim\xe2\x96\x81"
		  "hole\xef\xbd\x9c>",
		  "<\xef\xbd\x9c"
		  "fim\xe2\x96\x81"
		  "end\xef\xbd\x9c>" }, /* DeepSeek-Coder: <｜fim▁begin｜> ... */
		{ "\xe2\x96\x81<PRE>", "\xe2\x96\x81<SUF>", "\xe2\x96\x81<MID>" }, /* CodeLlama: ▁<PRE> ... */
		{ "<PRE>", "<SUF>", "<MID>" },
	};
	size_t nk = sizeof(keys) / sizeof(keys[0]), ns = sizeof(spelled) / sizeof(spelled[0]);

	for (size_t k = 0; k < nk + ns; k++) {
		for (int i = 0; i < 3; i++)
			t->fim[i] = k < nk ? get_id(f, keys[k][i], -1, t->n_vocab)
					   : strmap_get(&t->vocab, spelled[k - nk][i], strlen(spelled[k - nk][i]));
		if (t->fim[0] >= 0 && t->fim[1] >= 0 && t->fim[2] >= 0)
			return;
	}
	t->fim[0] = t->fim[1] = t->fim[2] = -1;
}

int
load_string_table(const struct gguf_file *f, const char *key, uint64_t max_n, char **ret_arena, struct strmap *map,
		  uint64_t *ret_n, char *err)
{
	const void *arr;
	uint64_t n;
	size_t total = 0;
	int r;

	if ((r = gguf_get_arr(f, key, GGUF_STRING, &arr, &n, err)) < 0)
		return r == PRIVAI_ENOTFOUND ? privai_fail(err, PRIVAI_EFORMAT, "missing metadata '%s'", key) : r;
	if (n == 0 || n > max_n)
		return privai_fail(err, PRIVAI_EFORMAT, "'%s' has %llu entries (1 to %llu allowed)", key,
				   (unsigned long long)n, (unsigned long long)max_n);
	const char *const *src = arr;
	for (uint64_t i = 0; i < n; i++)
		total += strlen(src[i]) + 1;
	char *arena = malloc(total);
	if (arena == NULL || strmap_init(map, n) < 0) {
		free(arena);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for %llu entries of '%s'", (unsigned long long)n,
				   key);
	}
	char *p = arena;
	for (uint64_t i = 0; i < n; i++) {
		size_t len = strlen(src[i]);
		memcpy(p, src[i], len + 1);
		strmap_put(map, p, len, (int32_t)i);
		p += len + 1;
	}
	*ret_arena = arena;
	*ret_n = n;
	return PRIVAI_OK;
}

static int
load_strings(struct tokenizer *t, const struct gguf_file *f, char *err)
{
	const void *arr;
	uint64_t n;
	int r;

	if ((r = load_string_table(f, "tokenizer.ggml.tokens", 1u << 24, &t->arena, &t->vocab, &n, err)) < 0)
		return r;
	t->n_vocab = (int)n;
	t->text = calloc(n, sizeof(char *));
	t->text_len = calloc(n, sizeof(uint32_t));
	t->types = malloc(n * sizeof(int32_t));
	t->scores = calloc(n, sizeof(float));
	if (t->text == NULL || t->text_len == NULL || t->types == NULL || t->scores == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for the vocabulary");
	const char *p = t->arena; /* the table's strings, one after another */
	for (uint64_t i = 0; i < n; i++) {
		t->text[i] = p;
		t->text_len[i] = (uint32_t)strlen(p);
		p += t->text_len[i] + 1;
		t->types[i] = TOKT_NORMAL;
	}
	if (gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_I32, &arr, &n, NULL) == PRIVAI_OK &&
	    n == (uint64_t)t->n_vocab)
		memcpy(t->types, arr, n * sizeof(int32_t));
	if (gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_F32, &arr, &n, NULL) == PRIVAI_OK &&
	    n == (uint64_t)t->n_vocab)
		memcpy(t->scores, arr, n * sizeof(float));
	return PRIVAI_OK;
}

/* qsort_r comparator (no global context: tokenizers may load concurrently) */
static int
cmp_special(const void *a, const void *b, void *ctx)
{
	const struct tokenizer *t = ctx;
	uint32_t la = t->text_len[*(const int32_t *)a], lb = t->text_len[*(const int32_t *)b];

	if (la != lb)
		return la > lb ? -1 : 1;
	return *(const int32_t *)a - *(const int32_t *)b;
}

static int
collect_special(struct tokenizer *t, char *err)
{
	t->special = malloc((size_t)t->n_vocab * sizeof(int32_t));
	if (t->special == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	for (int i = 0; i < t->n_vocab; i++) {
		int ty = t->types[i];
		if ((ty == TOKT_CONTROL || ty == TOKT_USER_DEFINED || ty == TOKT_UNKNOWN) && t->text_len[i] > 0)
			t->special[t->n_special++] = i;
	}
	qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);
	return PRIVAI_OK;
}

void
tokenizer_free(struct tokenizer *t)
{
	if (t == NULL)
		return;
	strmap_free(&t->vocab);
	strmap_free(&t->merges);
	for (int i = 0; i < t->n_pre_re; i++)
		pcre2_code_free(t->pre_re[i]);
	free(t->arena);
	free(t->merge_arena);
	free(t->text);
	free(t->text_len);
	free(t->types);
	free(t->scores);
	free(t->special);
	free(t);
}

static int
setup_spm(struct tokenizer *t)
{
	char name[8];

	for (int b = 0; b < 256; b++) {
		snprintf(name, sizeof(name), "<0x%02X>", b);
		t->byte_token[b] = strmap_get(&t->vocab, name, strlen(name));
	}
	return PRIVAI_OK;
}

int
tokenizer_load(const struct gguf_file *f, struct tokenizer **ret, char *err)
{
	struct tokenizer *t = calloc(1, sizeof(*t));
	const char *model = NULL, *pre = NULL;
	int r, flag;

	if (t == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	if (gguf_get_str(f, "tokenizer.ggml.model", &model, err) != PRIVAI_OK) {
		r = privai_fail(err, PRIVAI_EFORMAT, "missing metadata 'tokenizer.ggml.model'");
		goto fail;
	}
	if (strcmp(model, "llama") == 0) {
		t->kind = TOK_SPM;
	} else if (strcmp(model, "gpt2") == 0) {
		t->kind = TOK_BPE;
	} else {
		r = privai_fail(err, PRIVAI_EUNSUPPORTED,
				"tokenizer model '%.32s' is not supported (llama and gpt2 are)", model);
		goto fail;
	}
	snprintf(t->model_name, sizeof(t->model_name), "%s", model);
	if ((r = load_strings(t, f, err)) < 0 || (r = collect_special(t, err)) < 0)
		goto fail;
	t->bos = get_id(f, "tokenizer.ggml.bos_token_id", t->kind == TOK_SPM ? 1 : -1, t->n_vocab);
	t->eos = get_id(f, "tokenizer.ggml.eos_token_id", t->kind == TOK_SPM ? 2 : -1, t->n_vocab);
	t->eot = get_id(f, "tokenizer.ggml.eot_token_id", -1, t->n_vocab);
	t->unk = get_id(f, "tokenizer.ggml.unknown_token_id", t->kind == TOK_SPM ? 0 : -1, t->n_vocab);
	find_fim(t, f);
	t->add_bos = t->kind == TOK_SPM;
	if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &flag, NULL) == PRIVAI_OK)
		t->add_bos = flag;
	t->add_space_prefix = t->kind == TOK_SPM;
	if (gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag, NULL) == PRIVAI_OK)
		t->add_space_prefix = flag;
	if (t->eot < 0) /* chat models mark their end of turn by name */
		for (int i = 0; i < t->n_special; i++) {
			const char *s = t->text[t->special[i]];
			if (strcmp(s, "<|eot_id|>") == 0 || strcmp(s, "<|im_end|>") == 0 || strcmp(s, "<|end|>") == 0 ||
			    strcmp(s, "<end_of_turn>") == 0)
				t->eot = t->special[i];
		}
	if (t->kind == TOK_SPM) {
		r = setup_spm(t);
	} else {
		if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, NULL) != PRIVAI_OK)
			pre = NULL;
		r = bpe_setup(t, f, pre, err);
	}
	if (r < 0)
		goto fail;
	*ret = t;
	return PRIVAI_OK;
fail:
	tokenizer_free(t);
	return r;
}

int
tokenizer_n_vocab(const struct tokenizer *t)
{
	return t->n_vocab;
}
int32_t
tokenizer_bos(const struct tokenizer *t)
{
	return t->bos;
}
int32_t
tokenizer_eos(const struct tokenizer *t)
{
	return t->eos;
}
int
tokenizer_fim(const struct tokenizer *t, int32_t ids[3])
{
	memcpy(ids, t->fim, sizeof(t->fim));
	return t->fim[0] >= 0 ? 0 : -1;
}

int
tokenizer_adds_bos(const struct tokenizer *t)
{
	return t->add_bos && t->bos >= 0;
}
const char *
tokenizer_model_name(const struct tokenizer *t)
{
	return t->model_name;
}
const char *
tokenizer_pre_name(const struct tokenizer *t)
{
	return t->pre_name;
}

int
tokenizer_is_eog(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && (id == t->eos || id == t->eot);
}

const char *
tokenizer_token_text(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab ? t->text[id] : "";
}

/* ------------------------------------------------------ merge queue */

static int
bigram_before(const struct bigram *a, const struct bigram *b)
{
	return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

int
bigram_heap_push(struct bigram_heap *h, struct bigram bg)
{
	if (h->n == h->cap) {
		int cap = h->cap ? 2 * h->cap : 64;
		struct bigram *nv = realloc(h->v, (size_t)cap * sizeof(*nv));
		if (nv == NULL)
			return PRIVAI_ENOMEM;
		h->v = nv;
		h->cap = cap;
	}
	int i = h->n++;
	h->v[i] = bg;
	while (i > 0 && bigram_before(&h->v[i], &h->v[(i - 1) / 2])) {
		struct bigram tmp = h->v[i];
		h->v[i] = h->v[(i - 1) / 2];
		h->v[(i - 1) / 2] = tmp;
		i = (i - 1) / 2;
	}
	return PRIVAI_OK;
}

struct bigram
bigram_heap_pop(struct bigram_heap *h)
{
	struct bigram top = h->v[0];
	int i = 0;

	h->v[0] = h->v[--h->n];
	for (;;) {
		int l = 2 * i + 1, r = l + 1, best = i;
		if (l < h->n && bigram_before(&h->v[l], &h->v[best]))
			best = l;
		if (r < h->n && bigram_before(&h->v[r], &h->v[best]))
			best = r;
		if (best == i)
			break;
		struct bigram tmp = h->v[i];
		h->v[i] = h->v[best];
		h->v[best] = tmp;
		i = best;
	}
	return top;
}

/* ---------------------------------------------------------- encoding */

struct fragment {
	int32_t id; /* -1: raw text */
	size_t off, len;
};

struct frag_vec {
	struct fragment *v;
	int n, cap;
};

static int
frag_push(struct frag_vec *fv, int32_t id, size_t off, size_t len)
{
	if (fv->n == fv->cap) {
		int cap = fv->cap ? 2 * fv->cap : 16;
		struct fragment *nv = realloc(fv->v, (size_t)cap * sizeof(*nv));
		if (nv == NULL)
			return PRIVAI_ENOMEM;
		fv->v = nv;
		fv->cap = cap;
	}
	fv->v[fv->n++] = (struct fragment){ id, off, len };
	return PRIVAI_OK;
}

/* Split raw fragments around every occurrence of special token `id`. */
static int
split_on(const struct tokenizer *t, const char *text, int32_t id, struct frag_vec *in, struct frag_vec *out)
{
	const char *s = t->text[id];
	size_t slen = t->text_len[id];

	out->n = 0;
	for (int i = 0; i < in->n; i++) {
		struct fragment fr = in->v[i];
		if (fr.id >= 0 || fr.len < slen) {
			if (frag_push(out, fr.id, fr.off, fr.len) < 0)
				return PRIVAI_ENOMEM;
			continue;
		}
		size_t pos = fr.off, end = fr.off + fr.len;
		for (;;) {
			const char *hit = memmem(text + pos, end - pos, s, slen);
			if (hit == NULL)
				break;
			size_t at = (size_t)(hit - text);
			if ((at > pos && frag_push(out, -1, pos, at - pos) < 0) || frag_push(out, id, at, slen) < 0)
				return PRIVAI_ENOMEM;
			pos = at + slen;
		}
		if (pos < end && frag_push(out, -1, pos, end - pos) < 0)
			return PRIVAI_ENOMEM;
	}
	return PRIVAI_OK;
}

static int
validate_utf8(const char *text, size_t len, char *err)
{
	for (size_t i = 0; i < len;) {
		uint32_t c;
		int n = utf8_decode(text + i, len - i, &c);
		if (n < 0)
			return privai_fail(err, PRIVAI_EINVAL, "invalid UTF-8 at byte offset %zu", i);
		i += (size_t)n;
	}
	return PRIVAI_OK;
}

int
tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
		 int32_t **ret_ids, int *ret_n, char *err)
{
	struct frag_vec a = { 0 }, b = { 0 };
	struct id_vec out = { 0 };
	int r;

	if ((r = validate_utf8(text, len, err)) < 0)
		return r;
	if (add_bos && tokenizer_adds_bos(t) && (r = id_vec_push(&out, t->bos)) < 0)
		goto done;
	if (len > 0 && (r = frag_push(&a, -1, 0, len)) < 0)
		goto done;
	for (int i = 0; i < t->n_special && a.n > 0; i++) {
		int32_t id = t->special[i];
		if (!parse_special && t->types[id] != TOKT_USER_DEFINED)
			continue;
		if ((r = split_on(t, text, id, &a, &b)) < 0)
			goto done;
		struct frag_vec tmp = a;
		a = b;
		b = tmp;
	}
	/* SPM puts a space before the first raw fragment and after specials */
	int prev_special = 1;
	for (int i = 0; i < a.n; i++) {
		struct fragment fr = a.v[i];
		if (fr.id >= 0) {
			r = id_vec_push(&out, fr.id);
			prev_special = 1;
		} else if (t->kind == TOK_SPM) {
			r = spm_encode_fragment(t, text + fr.off, fr.len, t->add_space_prefix && prev_special, &out);
			prev_special = 0;
		} else {
			r = bpe_encode_fragment(t, text + fr.off, fr.len, &out);
		}
		if (r < 0)
			goto done;
	}
	r = PRIVAI_OK;
done:
	free(a.v);
	free(b.v);
	if (r < 0) {
		free(out.v);
		return r == PRIVAI_ENOMEM ? privai_fail(err, r, "out of memory while tokenizing") : r;
	}
	if (out.v == NULL && (out.v = malloc(sizeof(int32_t))) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory while tokenizing");
	*ret_ids = out.v;
	*ret_n = out.n;
	return PRIVAI_OK;
}

/* ---------------------------------------------------------- decoding */

static int
put_bytes(char *buf, size_t cap, size_t at, const char *s, size_t n)
{
	if (at < cap)
		memcpy(buf + at, s, at + n <= cap ? n : cap - at);
	return (int)n;
}

int
tokenizer_piece(const struct tokenizer *t, int32_t id, int show_special, char *buf, size_t cap)
{
	if (id < 0 || id >= t->n_vocab)
		return -1;
	const char *s = t->text[id];
	size_t len = t->text_len[id], n = 0;
	int ty = t->types[id];

	if (ty == TOKT_CONTROL || ty == TOKT_UNKNOWN || ty == TOKT_UNUSED)
		return show_special ? put_bytes(buf, cap, 0, s, len) : 0;
	if (ty == TOKT_USER_DEFINED)
		return put_bytes(buf, cap, 0, s, len);
	if (t->kind == TOK_SPM) {
		unsigned v;
		if (ty == TOKT_BYTE && len == 6 && sscanf(s, "<0x%02X>", &v) == 1) {
			char c = (char)v;
			return put_bytes(buf, cap, 0, &c, 1);
		}
		for (size_t i = 0; i < len;) {
			if (i + 3 <= len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
				n += (size_t)put_bytes(buf, cap, n, " ", 1);
				i += 3;
			} else {
				n += (size_t)put_bytes(buf, cap, n, s + i, 1);
				i++;
			}
		}
		return (int)n;
	}
	for (size_t i = 0; i < len;) {
		uint32_t c;
		int l = utf8_decode(s + i, len - i, &c);
		int b = l > 0 ? bpe_cpt_to_byte(c) : -1;
		if (l < 0) {
			l = 1;
			n += (size_t)put_bytes(buf, cap, n, s + i, 1);
		} else if (b < 0) {
			n += (size_t)put_bytes(buf, cap, n, s + i, (size_t)l);
		} else {
			char ch = (char)b;
			n += (size_t)put_bytes(buf, cap, n, &ch, 1);
		}
		i += (size_t)l;
	}
	return (int)n;
}

/* Move the complete UTF-8 prefix of in[0..n) to out; invalid bytes become
 * U+FFFD.  Returns bytes consumed; a trailing incomplete sequence stays. */
static size_t
emit_complete(const char *in, size_t n, int final, char *out, size_t cap, size_t *ret_written)
{
	size_t i = 0, w = 0;

	while (i < n) {
		uint32_t c;
		int l = utf8_decode(in + i, n - i, &c);
		if (l > 0) {
			w += (size_t)put_bytes(out, cap, w, in + i, (size_t)l);
			i += (size_t)l;
			continue;
		}
		/* incomplete but so far valid: wait for the next token */
		size_t need = (size_t)utf8_seq_len((unsigned char)in[i]);
		int prefix_ok = (unsigned char)in[i] >= 0xc2 && (unsigned char)in[i] <= 0xf4 && need > n - i;
		for (size_t k = i + 1; prefix_ok && k < n; k++)
			prefix_ok = ((unsigned char)in[k] & 0xc0) == 0x80;
		if (prefix_ok && !final)
			break;
		w += (size_t)put_bytes(out, cap, w, "\xef\xbf\xbd", 3);
		i++;
	}
	*ret_written = w;
	return i;
}

int
detok_stream_push(struct detok_stream *s, const struct tokenizer *t, int32_t id, char *out, size_t cap)
{
	char small[512], *buf = small;
	int plen = tokenizer_piece(t, id, s->show_special, NULL, 0);
	size_t total, written;

	if (plen < 0)
		return 0;
	total = (size_t)s->n_pending + (size_t)plen;
	if (total > sizeof(small) && (buf = malloc(total)) == NULL)
		return 0;
	memcpy(buf, s->pending, (size_t)s->n_pending);
	tokenizer_piece(t, id, s->show_special, buf + s->n_pending, (size_t)plen);
	size_t used = emit_complete(buf, total, 0, out, cap, &written);
	s->n_pending = (int)(total - used);
	memcpy(s->pending, buf + used, (size_t)s->n_pending);
	if (buf != small)
		free(buf);
	return (int)written;
}

int
detok_stream_flush(struct detok_stream *s, char *out, size_t cap)
{
	size_t written;

	emit_complete(s->pending, (size_t)s->n_pending, 1, out, cap, &written);
	s->n_pending = 0;
	return (int)written;
}
