/*
 * JSON mode (response_format {"type": "json_object"}): a byte-level JSON
 * recogniser that masks every token whose text would make the output stop
 * being a prefix of a JSON object, and allows end-of-generation only once
 * the object is complete.  The token texts are prepared once per model.
 */
#ifndef PRIVAI_JSON_CONSTRAINT_H
#define PRIVAI_JSON_CONSTRAINT_H

#include "privai/scheduler.h"
#include "privai/tokenizer.h"

struct json_vocab;

/* NULL when out of memory. */
struct json_vocab *json_vocab_new(const struct tokenizer *tok);
void json_vocab_free(struct json_vocab *v);
int json_vocab_size(const struct json_vocab *v);
int json_vocab_is_eog(const struct json_vocab *v, int32_t id);
/* The mask every constraint applies: a token stays when allows(state, id)
 * says so, end-of-generation when can_end; when nothing is left the end
 * is let through rather than sample nothing. */
void json_vocab_mask(const struct json_vocab *v, float *logits, int n_vocab, int can_end,
		     int (*allows)(void *state, int32_t id), void *state);
/* Token id's text (control tokens: empty); returns its length. */
int json_vocab_piece(const struct json_vocab *v, int32_t id, const char **ret);

/* A fresh constraint for one request (freed through its release hook);
 * NULL when out of memory.  The vocab must outlive it. */
struct token_constraint *json_constraint_new(const struct json_vocab *v);

/* How many continuation bytes UTF-8 lead byte c (>= 0x80) announces; -1
 * when c cannot begin a character (a stray continuation, an overlong or
 * out-of-range lead). */
int json_utf8_tail(int c);

/* For tests: 1 when text (len bytes) is a complete JSON object, 0 when it
 * is a proper prefix of one, -1 when it can never become one. */
int json_prefix_check(const char *text, size_t len);

#endif
