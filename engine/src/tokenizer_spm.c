/*
 * SentencePiece-style tokenization (tokenizer.ggml.model = "llama").
 *
 * Spaces become U+2581, the text is cut into UTF-8 characters, and the
 * adjacent pair whose concatenation is the best-scoring vocabulary token is
 * merged repeatedly (ties: leftmost first).  Characters no token covers fall
 * back to <0xXX> byte tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

struct sym {
	int prev, next;
	const char *text;
	size_t n;
};

static int
try_bigram(const struct tokenizer *t, struct sym *s, int left, int right, struct bigram_heap *h)
{
	if (left < 0 || right < 0)
		return PRIVAI_OK;
	size_t n = s[left].n + s[right].n;
	/* symbols are adjacent in the text, so the pair is one contiguous run */
	int32_t id = strmap_get(&t->vocab, s[left].text, n);
	if (id < 0)
		return PRIVAI_OK;
	return bigram_heap_push(h, (struct bigram){ left, right, t->scores[id], n });
}

static int
emit_symbol(const struct tokenizer *t, const char *text, size_t n, struct id_vec *out)
{
	int32_t id = strmap_get(&t->vocab, text, n);

	if (id >= 0)
		return id_vec_push(out, id);
	for (size_t i = 0; i < n; i++) {
		int32_t b = t->byte_token[(unsigned char)text[i]];
		if (b < 0)
			b = t->unk;
		if (b >= 0 && id_vec_push(out, b) < 0)
			return PRIVAI_ENOMEM;
	}
	return PRIVAI_OK;
}

int
spm_encode_fragment(const struct tokenizer *t, const char *text, size_t len, int space_prefix, struct id_vec *out)
{
	static const char sp[] = "\xe2\x96\x81";
	size_t cap = 3 * (len + 1) + 1, n = 0;
	char *esc = malloc(cap);
	struct sym *s = NULL;
	struct bigram_heap h = { 0 };
	int ns = 0, r = PRIVAI_ENOMEM;

	if (esc == NULL)
		return PRIVAI_ENOMEM;
	if (space_prefix) {
		memcpy(esc, sp, 3);
		n = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(esc + n, sp, 3);
			n += 3;
		} else {
			esc[n++] = text[i];
		}
	}
	if ((s = malloc((n + 1) * sizeof(*s))) == NULL)
		goto done;
	for (size_t off = 0; off < n; ns++) {
		size_t cl = (size_t)utf8_seq_len((unsigned char)esc[off]);
		if (cl > n - off)
			cl = n - off;
		s[ns] = (struct sym){ ns - 1, ns + 1, esc + off, cl };
		off += cl;
	}
	if (ns > 0)
		s[ns - 1].next = -1;
	for (int i = 1; i < ns; i++)
		if (try_bigram(t, s, i - 1, i, &h) < 0)
			goto done;
	while (h.n > 0) {
		struct bigram bg = bigram_heap_pop(&h);
		struct sym *L = &s[bg.left], *R = &s[bg.right];
		if (L->n == 0 || R->n == 0 || L->n + R->n != bg.size)
			continue; /* stale: one side merged since */
		L->n += R->n;
		R->n = 0;
		L->next = R->next;
		if (R->next >= 0)
			s[R->next].prev = bg.left;
		if (try_bigram(t, s, L->prev, bg.left, &h) < 0 || try_bigram(t, s, bg.left, L->next, &h) < 0)
			goto done;
	}
	for (int i = 0; i >= 0 && i < ns; i = s[i].next)
		if (emit_symbol(t, s[i].text, s[i].n, out) < 0)
			goto done;
	r = PRIVAI_OK;
done:
	free(h.v);
	free(s);
	free(esc);
	return r;
}
