/*
 * Internals shared by tokenizer.c (vocabulary, special-token splitting,
 * decoding) and the two algorithms in tokenizer_spm.c and tokenizer_bpe.c.
 */
#ifndef PRIVAI_TOKENIZER_IMPL_H
#define PRIVAI_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "privai/tokenizer.h"
#include "strmap.h"

enum tok_kind { TOK_SPM, TOK_BPE };

#define MAX_PRE_REGEX 8

struct tokenizer {
	enum tok_kind kind;
	int n_vocab;
	const char **text;    /* (n_vocab) token strings, in arena */
	uint32_t *text_len;   /* (n_vocab) */
	float *scores;        /* (n_vocab) SPM merge scores */
	int32_t *types;       /* (n_vocab) enum tok_type */
	struct strmap vocab;  /* text -> id */
	struct strmap merges; /* "left right" -> rank (BPE) */
	char *arena;
	char *merge_arena; /* merge strings the merges map points into */
	int32_t bos, eos, eot, unk;
	int32_t fim[3]; /* fill in the middle: prefix, suffix, middle; -1 when none */
	int add_bos, add_space_prefix, ignore_merges;
	int32_t byte_token[256]; /* SPM <0xXX> ids, -1 if absent */
	int32_t *special;        /* ids of control/user-defined/unknown tokens, longest first */
	int n_special;
	pcre2_code *pre_re[MAX_PRE_REGEX];
	int n_pre_re;
	char model_name[16];
	char pre_name[64];
};

/* A growable list of ids. */
struct id_vec {
	int32_t *v;
	int n, cap;
};

int id_vec_push(struct id_vec *iv, int32_t id);

/* Length of the UTF-8 sequence starting with byte c (1 for invalid). */
static inline int
utf8_seq_len(unsigned char c)
{
	static const int lookup[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
	return lookup[c >> 4];
}

/* A candidate merge of two adjacent symbols; both tokenizers pop the
 * highest priority first (SPM: the token's score; BPE: minus the merge
 * rank), ties going to the leftmost pair. */
struct bigram {
	int left, right;
	float priority;
	size_t size; /* bytes of the merged pair, to spot stale entries */
};

struct bigram_heap {
	struct bigram *v;
	int n, cap;
};

int bigram_heap_push(struct bigram_heap *h, struct bigram bg);
struct bigram bigram_heap_pop(struct bigram_heap *h); /* h->n > 0 */

/* Tokenize one raw-text fragment (no special tokens inside). */
int spm_encode_fragment(const struct tokenizer *t, const char *text, size_t len, int space_prefix, struct id_vec *out);
int bpe_encode_fragment(const struct tokenizer *t, const char *text, size_t len, struct id_vec *out);

/* Copy the string array `key` (1..max_n entries) into one fresh block
 * (*ret_arena, NUL-separated, in order) and map each string to its index
 * in `map`, so both outlive the GGUF file.  *ret_n gets the count. */
int load_string_table(const struct gguf_file *f, const char *key, uint64_t max_n, char **ret_arena, struct strmap *map,
		      uint64_t *ret_n, char *err);

/* Set up the BPE pre-tokenizer for `pre` (NULL: "default"). */
int bpe_setup(struct tokenizer *t, const struct gguf_file *f, const char *pre, char *err);

/* GPT-2's byte <-> code point table for byte-level BPE. */
uint32_t bpe_byte_to_cpt(unsigned char b);
int bpe_cpt_to_byte(uint32_t cpt); /* -1 if not a byte's code point */

/* Encode code point c as UTF-8 into out (4 bytes room); returns length. */
int utf8_encode(uint32_t c, char *out);
/* Decode one code point at s (n bytes left); returns length or -1. */
int utf8_decode(const char *s, size_t n, uint32_t *ret_cpt);

#endif
