/*
 * The regular-expression constraint (regex_constraint.h).  The whole
 * output is matched from its start (PCRE2_ANCHORED) to its end
 * (\z); with PCRE2_PARTIAL_HARD a text that could still
 * grow into a match reports a partial match, which is what "allowed"
 * means here.  A token ending inside a UTF-8 character is never allowed
 * (PCRE2 calls a cut character invalid), as in the schema constraint.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "server/regex_constraint.h"

struct regex_state {
	struct token_constraint c;
	const struct json_vocab *v;
	pcre2_code *re;
	pcre2_match_data *md;
	/* for this step: whether the output can go on with each ASCII byte
	 * (a token whose first byte cannot is refused without a match) */
	unsigned char next_ok[128];
	char *text; /* the output so far, and room for one token after it */
	size_t len, cap;
};

/* The pattern as given (so a stray parenthesis cannot escape the
 * wrapper), then wrapped to match only the whole output: PCRE2 has no
 * end anchor that works with partial matching, but \z does. */
static pcre2_code *
compile(const char *pattern, int *ec, PCRE2_SIZE *eo)
{
	const uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, ec, eo, NULL);
	size_t n = strlen(pattern);
	char *whole;

	if (re == NULL)
		return NULL;
	pcre2_code_free(re);
	if ((whole = malloc(n + 8)) == NULL) {
		*ec = PCRE2_ERROR_NOMEMORY;
		*eo = 0;
		return NULL;
	}
	memcpy(whole, "(?:", 3);
	memcpy(whole + 3, pattern, n);
	memcpy(whole + 3 + n, ")\\z", 4); /* with its NUL */
	re = pcre2_compile((PCRE2_SPTR)whole, PCRE2_ZERO_TERMINATED, opts, ec, eo, NULL);
	free(whole);
	/* machine code for both kinds of match: a pass over the vocabulary
	 * runs tens of thousands of them per token (without JIT, PCRE2
	 * interprets; a failure here only costs speed) */
	if (re != NULL)
		(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
	return re;
}

int
regex_check(const char *pattern, char *err, size_t errlen)
{
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *re = compile(pattern, &ec, &eo);
	PCRE2_UCHAR msg[120];

	if (re != NULL) {
		pcre2_code_free(re);
		return 0;
	}
	pcre2_get_error_message(ec, msg, sizeof(msg));
	snprintf(err, errlen, "is not a regular expression PCRE2 reads (%s at %zu)", (const char *)msg, (size_t)eo);
	return -1;
}

/* Whether text (len bytes) is a whole match. */
static int
complete(struct regex_state *st, size_t len)
{
	return pcre2_match(st->re, (PCRE2_SPTR)st->text, len, 0, 0, st->md, NULL) >= 0;
}

/* Whether text could still become a match (or is one). */
static int
viable(struct regex_state *st, size_t len)
{
	int rc = pcre2_match(st->re, (PCRE2_SPTR)st->text, len, 0, PCRE2_PARTIAL_HARD, st->md, NULL);

	return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

/* The output with a token's text p (n bytes) after it, in st->text; its
 * new length, or 0 when the token adds nothing.  The text is what the
 * client sees: a continuation's first token keeps its leading space. */
static size_t
with_piece(struct regex_state *st, const char *p, int n)
{
	if (n <= 0)
		return 0;
	if (st->len + (size_t)n > st->cap) {
		size_t cap = (st->len + (size_t)n) * 2;
		char *t = realloc(st->text, cap);
		if (t == NULL)
			return 0;
		st->text = t;
		st->cap = cap;
	}
	memcpy(st->text + st->len, p, (size_t)n);
	return st->len + (size_t)n;
}

static int
rx_allows(void *state, int32_t id)
{
	struct regex_state *st = state;
	const char *p;
	int n = json_vocab_piece(st->v, id, &p);

	if (n <= 0 || ((unsigned char)p[0] < 0x80 && !st->next_ok[(unsigned char)p[0]]))
		return 0;
	size_t len = with_piece(st, p, n);
	return len > 0 && viable(st, len);
}

static void
rx_mask(void *state, float *logits, int n_vocab)
{
	struct regex_state *st = state;

	/* 128 matches here spare most of the vocabulary's */
	if (st->len + 1 <= st->cap)
		for (int b = 0; b < 128; b++) {
			st->text[st->len] = (char)b;
			st->next_ok[b] = viable(st, st->len + 1);
		}
	else
		memset(st->next_ok, 1, sizeof(st->next_ok));
	json_vocab_mask(st->v, logits, n_vocab, complete(st, st->len), rx_allows, st);
}

static void
rx_accept(void *state, int32_t id)
{
	struct regex_state *st = state;

	if (id < 0 || id >= json_vocab_size(st->v) || json_vocab_is_eog(st->v, id))
		return;
	const char *p;
	int n = json_vocab_piece(st->v, id, &p);
	size_t len = with_piece(st, p, n);
	if (len > 0)
		st->len = len;
}

static int
rx_done(const void *state)
{
	(void)state;
	return 0; /* the mask leaves only the end once nothing else fits */
}

static void
rx_release(struct token_constraint *c)
{
	struct regex_state *st = c->state;

	pcre2_match_data_free(st->md);
	pcre2_code_free(st->re);
	free(st->text);
	free(st);
}

struct token_constraint *
regex_constraint_new(const struct json_vocab *v, const char *pattern)
{
	struct regex_state *st = calloc(1, sizeof(*st));
	int ec;
	PCRE2_SIZE eo;

	if (st == NULL)
		return NULL;
	st->v = v;
	st->re = compile(pattern, &ec, &eo);
	st->md = st->re != NULL ? pcre2_match_data_create_from_pattern(st->re, NULL) : NULL;
	st->cap = 4096;
	st->text = malloc(st->cap);
	st->c = (struct token_constraint){ rx_mask, rx_accept, rx_done, rx_release, st };
	if (st->re == NULL || st->md == NULL || st->text == NULL) {
		rx_release(&st->c);
		return NULL;
	}
	return &st->c;
}

char *
regex_of_choices(const char *const *choices, int n)
{
	size_t cap = 8;
	char *out, *w;

	for (int i = 0; i < n; i++)
		cap += 2 * strlen(choices[i]) + 1;
	if ((out = malloc(cap)) == NULL)
		return NULL;
	w = out;
	w += sprintf(w, "(?:");
	for (int i = 0; i < n; i++) {
		if (i > 0)
			*w++ = '|';
		for (const char *p = choices[i]; *p != '\0'; p++) {
			/* every ASCII punctuation mark escaped is a literal in PCRE2 */
			if ((unsigned char)*p < 0x80 &&
			    !((*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z')))
				*w++ = '\\';
			*w++ = *p;
		}
	}
	strcpy(w, ")");
	return out;
}
