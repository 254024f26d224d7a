/*
 * The demo tokenizer: a small SentencePiece-style vocabulary the project
 * builds itself, so the embedded default model needs no download.  It has
 * the three specials, all 256 byte-fallback tokens, the printable ASCII
 * characters, and common English words with every prefix of each (SPM only
 * merges pairs that are themselves tokens, so "▁the" needs "▁t" and "▁th").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_vocab.h"
#include "privai/tokenizer.h"

static const char *words = "the of and to in is that for it as was with be by on not he this are or his from at which "
			   "but have an they you were her she there one all we their has been if more when will would "
			   "who so no can data private model models token tokens server servers cluster node nodes gpu "
			   "gpus memory cache inference engine appliance premises keeps secure network admin console "
			   "deploy deployment quick brown fox jumps over lazy dog hello world what how why where time "
			   "about into than then them these some could other only new also after first two any may "
			   "like our out up use used way well work year years make made many most must people said "
			   "should such very just over under while where before because through between each every";

struct vocab_builder {
	char **tok;
	float *score;
	int32_t *type;
	int n, cap;
};

static int
vb_add(struct vocab_builder *vb, const char *s, size_t len, float score, int32_t type)
{
	/* only the word list can repeat a piece; padding tokens are unique */
	for (int i = 0; type != TOKT_UNUSED && i < vb->n; i++)
		if (strlen(vb->tok[i]) == len && memcmp(vb->tok[i], s, len) == 0)
			return 0;
	if (vb->n == vb->cap) {
		int cap = vb->cap ? vb->cap * 2 : 512;
		char **t = realloc(vb->tok, (size_t)cap * sizeof(*t));
		if (t == NULL)
			return -1;
		vb->tok = t;
		float *sc = realloc(vb->score, (size_t)cap * sizeof(*sc));
		if (sc == NULL)
			return -1;
		vb->score = sc;
		int32_t *ty = realloc(vb->type, (size_t)cap * sizeof(*ty));
		if (ty == NULL)
			return -1;
		vb->type = ty;
		vb->cap = cap;
	}
	if ((vb->tok[vb->n] = strndup(s, len)) == NULL)
		return -1;
	vb->score[vb->n] = score;
	vb->type[vb->n] = type;
	vb->n++;
	return 0;
}

int
demo_vocab_write(struct gguf_writer *w, int min_vocab, int *ret_n_vocab)
{
	struct vocab_builder vb = { 0 };
	char buf[64];
	int r = -1;

	if (vb_add(&vb, "<unk>", 5, 0, TOKT_UNKNOWN) || vb_add(&vb, "<s>", 3, 0, TOKT_CONTROL) ||
	    vb_add(&vb, "</s>", 4, 0, TOKT_CONTROL))
		goto out;
	for (int b = 0; b < 256; b++) {
		snprintf(buf, sizeof(buf), "<0x%02X>", b);
		if (vb_add(&vb, buf, 6, 0, TOKT_BYTE))
			goto out;
	}
	if (vb_add(&vb, "\xe2\x96\x81", 3, -1, TOKT_NORMAL))
		goto out;
	for (int c = 33; c < 127; c++) {
		buf[0] = (char)c;
		if (vb_add(&vb, buf, 1, -2, TOKT_NORMAL))
			goto out;
	}
	float score = -3;
	for (const char *p = words; *p;) {
		size_t len = strcspn(p, " ");
		memcpy(buf, "\xe2\x96\x81", 3);
		memcpy(buf + 3, p, len);
		for (size_t k = 2; k <= len + 3; k++) /* "▁" + prefixes of the word */
			if (k >= 4 && vb_add(&vb, buf, k, score - (float)(len + 3 - k), TOKT_NORMAL))
				goto out;
		score -= 0.01f;
		p += len + (p[len] == ' ');
	}
	for (int i = 0; vb.n < min_vocab; i++) {
		int len = snprintf(buf, sizeof(buf), "<unused%d>", i);
		if (vb_add(&vb, buf, (size_t)len, -1000, TOKT_UNUSED))
			goto out;
	}
	if (gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") ||
	    gguf_writer_set_str(w, "tokenizer.ggml.pre", "default") ||
	    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, vb.tok, (uint64_t)vb.n) ||
	    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, vb.score, (uint64_t)vb.n) ||
	    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, vb.type, (uint64_t)vb.n) ||
	    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0) ||
	    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1) ||
	    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2) ||
	    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1))
		goto out;
	*ret_n_vocab = vb.n;
	r = 0;
out:
	for (int i = 0; i < vb.n; i++)
		free(vb.tok[i]);
	free(vb.tok);
	free(vb.score);
	free(vb.type);
	return r;
}
