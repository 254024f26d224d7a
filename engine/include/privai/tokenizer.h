/*
 * Tokenizers read from GGUF metadata: SentencePiece-style (`llama`: score
 * driven merges, byte fallback) and byte-level BPE (`gpt2`: ranked merges
 * after a pre-tokenizer chosen by `tokenizer.ggml.pre`).  Behaviour matches
 * the reference implementation token for token, including how special and
 * user-defined tokens split the text.
 */
#ifndef PRIVAI_TOKENIZER_H
#define PRIVAI_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "privai/gguf.h"

enum tok_type { /* tokenizer.ggml.token_type values */
		TOKT_UNDEFINED = 0,
		TOKT_NORMAL = 1,
		TOKT_UNKNOWN = 2,
		TOKT_CONTROL = 3,
		TOKT_USER_DEFINED = 4,
		TOKT_UNUSED = 5,
		TOKT_BYTE = 6,
};

struct tokenizer;

/* Build from a GGUF file's tokenizer.* metadata.  Unknown tokenizer models
 * and pre-tokenizers are refused by name. */
int tokenizer_load(const struct gguf_file *f, struct tokenizer **ret, char *err);
void tokenizer_free(struct tokenizer *t);

int tokenizer_n_vocab(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t); /* -1 when none */
int32_t tokenizer_eos(const struct tokenizer *t);
int tokenizer_adds_bos(const struct tokenizer *t);
/* The fill-in-the-middle tokens (prefix, suffix, middle) in ids: 0, or -1
 * when the vocabulary has none (by GGUF key or by a code model family's
 * spelling). */
int tokenizer_fim(const struct tokenizer *t, int32_t ids[3]);
/* End-of-generation: eos, eot or another id the vocab marks as such. */
int tokenizer_is_eog(const struct tokenizer *t, int32_t id);
const char *tokenizer_model_name(const struct tokenizer *t); /* "llama", "gpt2" */
const char *tokenizer_pre_name(const struct tokenizer *t);

/* Tokenize len bytes of text.  add_bos: prepend BOS when the vocab asks for
 * it.  parse_special: control tokens written in the text become their ids
 * (user-defined tokens always do).  *ret_ids is malloc'ed; the caller frees.
 * Returns PRIVAI_OK, PRIVAI_ENOMEM or PRIVAI_EINVAL (invalid UTF-8, named
 * with its offset in err). */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
		     int32_t **ret_ids, int *ret_n, char *err);

/* The bytes token `id` stands for (control tokens: none, unless
 * show_special).  Writes at most cap bytes and returns the full length,
 * or -1 for an id outside the vocabulary. */
int tokenizer_piece(const struct tokenizer *t, int32_t id, int show_special, char *buf, size_t cap);

/* The token's text as stored in the vocabulary (for messages). */
const char *tokenizer_token_text(const struct tokenizer *t, int32_t id);

/* Streaming detokenizer: holds back an incomplete UTF-8 sequence so a
 * stream never shows a broken character between tokens. */
struct detok_stream {
	char pending[8];
	int n_pending;
	int show_special; /* control tokens' text too (tool-call markers) */
};

/* Append token id's bytes; writes the complete UTF-8 prefix into out
 * (cap >= 64 + the longest token) and returns its length. */
int detok_stream_push(struct detok_stream *s, const struct tokenizer *t, int32_t id, char *out, size_t cap);
/* Whatever is still held at the end (invalid tails become U+FFFD). */
int detok_stream_flush(struct detok_stream *s, char *out, size_t cap);

#endif
