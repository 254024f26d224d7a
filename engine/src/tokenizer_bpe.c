/*
 * Byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * The text is first cut into words by the model family's pre-tokenizer:
 * a list of regular expressions applied in turn, each splitting every
 * current piece into its matches and the gaps between them.  Each word's
 * bytes are mapped to GPT-2's printable code points, and the adjacent pair
 * with the lowest merge rank is merged until none is left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                                                      \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"                      \
	"|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                                       \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"                      \
	"|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

struct pre_desc {
	const char *names; /* space-separated tokenizer.ggml.pre values */
	int ignore_merges; /* a word that is a whole token skips merging */
	const char *re[MAX_PRE_REGEX];
};

static const struct pre_desc pre_table[] = {
	{ "default", 0, { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" } },
	{ "gpt-2 gpt2 phi-2 mpt olmo jais", 0, { RE_GPT2 } },
	{ "llama-bpe llama3 smaug-bpe", 1, { RE_LLAMA3 } },
	{ "qwen2 deepseek-r1-qwen", 0, { RE_QWEN2 } },
	{ "starcoder refact command-r smollm codeshell", 0, { "\\p{N}", RE_GPT2 } },
	{ "falcon", 0, { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" } },
	{ "deepseek-llm",
	  0,
	  {
		  "[\\r\\n]",
		  "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf"
		  "\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd"
		  "\xcd\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81"
		  "\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5"
		  "\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1\xb4\xab"
		  "\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-\xe1\xbc\x9d"
		  "\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b"
		  "\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe"
		  "\xe1\xbf\x82-\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b"
		  "\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87"
		  "\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8"
		  "\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf"
		  "\xe2\x85\x85-\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb"
		  "\xe2\xb1\xbe-\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad"
		  "\xea\x9a\x80-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-\xea\x9e\x8e"
		  "\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba"
		  "\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93"
		  "\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2"
		  "\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
		  "\\s?[!-/"
		  ":-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-"
		  "\xe3\x80\x82]+",
		  "\\s+$",
		  "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
		  "\\p{N}+",
	  } },
	{ "deepseek-coder",
	  0,
	  {
		  "[\\r\\n]",
		  "\\s?\\p{L}+",
		  "\\s?\\p{P}+",
		  "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
		  "\\p{N}",
	  } },
};

/* ------------------------------------------------ GPT-2 byte mapping */

static int
byte_is_printable(int b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t
bpe_byte_to_cpt(unsigned char b)
{
	int n = 0;

	if (byte_is_printable(b))
		return b;
	for (int i = 0; i < b; i++)
		n += !byte_is_printable(i);
	return 256u + (uint32_t)n;
}

int
bpe_cpt_to_byte(uint32_t cpt)
{
	if (cpt < 256)
		return byte_is_printable((int)cpt) ? (int)cpt : -1;
	uint32_t n = cpt - 256;
	for (int b = 0; b < 256; b++) {
		if (byte_is_printable(b))
			continue;
		if (n-- == 0)
			return b;
	}
	return -1;
}

/* ------------------------------------------------------------ setup */

static int
name_in(const char *names, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = names; *p;) {
		const char *e = strchr(p, ' ');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && memcmp(p, name, n) == 0)
			return 1;
		p += l + (e != NULL);
	}
	return 0;
}

/* Merge ranks: "left right" -> index in tokenizer.ggml.merges. */
static int
load_merges(struct tokenizer *t, const struct gguf_file *f, char *err)
{
	uint64_t n;

	return load_string_table(f, "tokenizer.ggml.merges", 1u << 24, &t->merge_arena, &t->merges, &n, err);
}

int
bpe_setup(struct tokenizer *t, const struct gguf_file *f, const char *pre, char *err)
{
	const struct pre_desc *pd = NULL;

	if (pre == NULL)
		pre = "default";
	for (size_t i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++)
		if (name_in(pre_table[i].names, pre))
			pd = &pre_table[i];
	if (pd == NULL)
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "pre-tokenizer '%.48s' is not supported (default, gpt-2, llama-bpe, qwen2, "
				   "deepseek-llm, deepseek-coder, falcon, starcoder and aliases are)",
				   pre);
	snprintf(t->pre_name, sizeof(t->pre_name), "%s", pre);
	t->ignore_merges = pd->ignore_merges;
	for (int i = 0; i < MAX_PRE_REGEX && pd->re[i] != NULL; i++) {
		int ecode;
		PCRE2_SIZE eoff;
		pcre2_code *re = pcre2_compile((PCRE2_SPTR)pd->re[i], PCRE2_ZERO_TERMINATED,
					       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ecode, &eoff, NULL);
		if (re == NULL) {
			PCRE2_UCHAR msg[128];
			pcre2_get_error_message(ecode, msg, sizeof(msg));
			return privai_fail(err, PRIVAI_EINVAL, "pre-tokenizer '%s' regex %d: %s at %zu", pre, i,
					   (char *)msg, (size_t)eoff);
		}
		pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up */
		t->pre_re[t->n_pre_re++] = re;
	}
	return load_merges(t, f, err);
}

/* ------------------------------------------------------ pre-splitting */

struct span {
	size_t off, len;
};

struct span_vec {
	struct span *v;
	int n, cap;
};

static int
span_push(struct span_vec *sv, size_t off, size_t len)
{
	if (sv->n == sv->cap) {
		int cap = sv->cap ? 2 * sv->cap : 32;
		struct span *nv = realloc(sv->v, (size_t)cap * sizeof(*nv));
		if (nv == NULL)
			return PRIVAI_ENOMEM;
		sv->v = nv;
		sv->cap = cap;
	}
	sv->v[sv->n++] = (struct span){ off, len };
	return PRIVAI_OK;
}

/* Split each span of `in` by `re` into matches and the gaps between. */
static int
split_by(const char *text, pcre2_code *re, pcre2_match_data *md, const struct span_vec *in, struct span_vec *out)
{
	out->n = 0;
	for (int i = 0; i < in->n; i++) {
		const char *sub = text + in->v[i].off;
		size_t len = in->v[i].len, pos = 0;
		while (pos < len) {
			int rc = pcre2_match(re, (PCRE2_SPTR)sub, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
			if (rc < 0)
				break;
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			size_t ms = ov[0], me = ov[1];
			if (me == ms) { /* empty match: step over one character */
				me = ms + (size_t)utf8_seq_len((unsigned char)sub[ms]);
				if (me > len)
					me = len;
				if (ms > pos && span_push(out, in->v[i].off + pos, ms - pos) < 0)
					return PRIVAI_ENOMEM;
				if (span_push(out, in->v[i].off + ms, me - ms) < 0)
					return PRIVAI_ENOMEM;
				pos = me;
				continue;
			}
			if ((ms > pos && span_push(out, in->v[i].off + pos, ms - pos) < 0) ||
			    span_push(out, in->v[i].off + ms, me - ms) < 0)
				return PRIVAI_ENOMEM;
			pos = me;
		}
		if (pos < len && span_push(out, in->v[i].off + pos, len - pos) < 0)
			return PRIVAI_ENOMEM;
	}
	return PRIVAI_OK;
}

/* ---------------------------------------------------------- merging */

struct sym {
	int prev, next;
	size_t off, n; /* in the byte-encoded word */
};

struct word_ctx {
	const struct tokenizer *t;
	const char *w; /* byte-encoded word */
	struct sym *s;
	struct bigram_heap h;
	char *key; /* scratch for "left right" */
};

static int
try_bigram(struct word_ctx *c, int left, int right)
{
	if (left < 0 || right < 0)
		return PRIVAI_OK;
	const struct sym *L = &c->s[left], *R = &c->s[right];
	memcpy(c->key, c->w + L->off, L->n);
	c->key[L->n] = ' ';
	memcpy(c->key + L->n + 1, c->w + R->off, R->n);
	int32_t rank = strmap_get(&c->t->merges, c->key, L->n + 1 + R->n);
	if (rank < 0)
		return PRIVAI_OK;
	/* exact: ranks are far below 2^24 */
	return bigram_heap_push(&c->h, (struct bigram){ left, right, -(float)rank, L->n + R->n });
}

static int
emit(const struct tokenizer *t, const char *s, size_t n, struct id_vec *out)
{
	int32_t id = strmap_get(&t->vocab, s, n);

	if (id >= 0)
		return id_vec_push(out, id);
	/* no token: each byte of the encoded text that is itself a token */
	for (size_t i = 0; i < n; i++) {
		id = strmap_get(&t->vocab, s + i, 1);
		if (id >= 0 && id_vec_push(out, id) < 0)
			return PRIVAI_ENOMEM;
	}
	return PRIVAI_OK;
}

static int
encode_word(const struct tokenizer *t, const char *raw, size_t len, struct id_vec *out)
{
	struct word_ctx c = { t, NULL, NULL, { 0 }, NULL };
	char *w = malloc(2 * len + 1);
	size_t n = 0;
	int ns = 0, r = PRIVAI_ENOMEM;

	if (w == NULL)
		return PRIVAI_ENOMEM;
	for (size_t i = 0; i < len; i++)
		n += (size_t)utf8_encode(bpe_byte_to_cpt((unsigned char)raw[i]), w + n);
	c.w = w;
	if (t->ignore_merges && strmap_get(&t->vocab, w, n) >= 0) {
		r = emit(t, w, n, out);
		free(w);
		return r;
	}
	c.s = malloc((n + 1) * sizeof(*c.s));
	c.key = malloc(n + 2);
	if (c.s == NULL || c.key == NULL)
		goto done;
	for (size_t off = 0; off < n; ns++) {
		size_t cl = (size_t)utf8_seq_len((unsigned char)w[off]);
		c.s[ns] = (struct sym){ ns - 1, ns + 1, off, cl };
		off += cl;
	}
	if (ns > 0)
		c.s[ns - 1].next = -1;
	for (int i = 1; i < ns; i++)
		if (try_bigram(&c, i - 1, i) < 0)
			goto done;
	while (c.h.n > 0) {
		struct bigram bg = bigram_heap_pop(&c.h);
		struct sym *L = &c.s[bg.left], *R = &c.s[bg.right];
		if (L->n == 0 || R->n == 0 || L->n + R->n != bg.size)
			continue;
		L->n += R->n;
		R->n = 0;
		L->next = R->next;
		if (R->next >= 0)
			c.s[R->next].prev = bg.left;
		if (try_bigram(&c, L->prev, bg.left) < 0 || try_bigram(&c, bg.left, L->next) < 0)
			goto done;
	}
	for (int i = 0; i >= 0 && i < ns; i = c.s[i].next)
		if (emit(t, w + c.s[i].off, c.s[i].n, out) < 0)
			goto done;
	r = PRIVAI_OK;
done:
	free(c.h.v);
	free(c.s);
	free(c.key);
	free(w);
	return r;
}

int
bpe_encode_fragment(const struct tokenizer *t, const char *text, size_t len, struct id_vec *out)
{
	struct span_vec a = { 0 }, b = { 0 };
	pcre2_match_data *md = NULL;
	int r = PRIVAI_ENOMEM;

	if (span_push(&a, 0, len) < 0)
		goto done;
	for (int i = 0; i < t->n_pre_re; i++) {
		if ((md = pcre2_match_data_create_from_pattern(t->pre_re[i], NULL)) == NULL ||
		    split_by(text, t->pre_re[i], md, &a, &b) < 0)
			goto done;
		pcre2_match_data_free(md);
		md = NULL;
		struct span_vec tmp = a;
		a = b;
		b = tmp;
	}
	for (int i = 0; i < a.n; i++)
		if (encode_word(t, text + a.v[i].off, a.v[i].len, out) < 0)
			goto done;
	r = PRIVAI_OK;
done:
	pcre2_match_data_free(md);
	free(a.v);
	free(b.v);
	return r;
}
