/*
 * A pushdown recogniser for JSON (RFC 8259) fed one byte at a time, and the
 * token mask built on it.  The state is small and copied per candidate
 * token, so checking a vocabulary is a pass over its bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_constraint.h"

#define JSON_MAX_DEPTH 32
#define JSON_MAX_WS 4 /* consecutive whitespace bytes: no endless blank output */

enum jstate {
	J_START,     /* before the top-level object */
	J_VALUE,     /* a value must start */
	J_OBJ_FIRST, /* after '{': key or '}' */
	J_OBJ_KEY,   /* after ',' in an object: key */
	J_COLON,
	J_AFTER, /* after a value inside a container */
	J_STRING,
	J_ESCAPE,
	J_HEX,
	J_NUM_MINUS,
	J_NUM_ZERO,
	J_NUM_INT,
	J_NUM_DOT,
	J_NUM_FRAC,
	J_NUM_E,
	J_NUM_ESIGN,
	J_NUM_EXP,
	J_LITERAL,
	J_DONE,
};

struct jrec {
	unsigned char state;
	unsigned char depth;
	unsigned char in_key; /* the string being read is an object key */
	unsigned char left;   /* hex digits, literal bytes, or UTF-8 continuation bytes */
	unsigned char utf8;   /* continuation bytes still expected inside a string */
	unsigned char ws;
	const char *lit; /* rest of true/false/null */
	char stack[JSON_MAX_DEPTH];
};

static int
is_ws(int c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}
static int
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

int
json_utf8_tail(int c)
{
	if ((c & 0xE0) == 0xC0 && c >= 0xC2)
		return 1;
	if ((c & 0xF0) == 0xE0)
		return 2;
	if ((c & 0xF8) == 0xF0 && c <= 0xF4)
		return 3;
	return -1;
}

/* A value just ended: back to the container. */
static void
value_done(struct jrec *j)
{
	j->state = j->depth == 0 ? J_DONE : J_AFTER;
}

static int
start_value(struct jrec *j, int c)
{
	static const char *lits[] = { "true", "false", "null" };

	switch (c) {
	case '{':
	case '[':
		if (j->depth >= JSON_MAX_DEPTH)
			return -1;
		j->stack[j->depth++] = (char)c;
		j->state = c == '{' ? J_OBJ_FIRST : J_VALUE;
		if (c == '[')
			j->state = J_VALUE, j->left = 1; /* left=1: ']' allowed right away */
		return 0;
	case '"':
		j->state = J_STRING;
		j->in_key = 0;
		return 0;
	case '-':
		j->state = J_NUM_MINUS;
		return 0;
	case '0':
		j->state = J_NUM_ZERO;
		return 0;
	}
	if (c >= '1' && c <= '9') {
		j->state = J_NUM_INT;
		return 0;
	}
	for (int i = 0; i < 3; i++)
		if (c == lits[i][0]) {
			j->state = J_LITERAL;
			j->lit = lits[i] + 1;
			return 0;
		}
	return -1;
}

static int
close_container(struct jrec *j, int c)
{
	if (j->depth == 0 || j->stack[j->depth - 1] != (c == '}' ? '{' : '['))
		return -1;
	j->depth--;
	value_done(j);
	return 0;
}

/* A number ends at the first byte that cannot continue it; that byte is
 * then read in the container's state. */
static int after_number(struct jrec *j, int c);

static int
step(struct jrec *j, int c)
{
	if (is_ws(c) && j->state != J_STRING) {
		switch (j->state) {
		case J_START:
		case J_VALUE:
		case J_OBJ_FIRST:
		case J_OBJ_KEY:
		case J_COLON:
		case J_AFTER:
		case J_DONE:
			return ++j->ws > JSON_MAX_WS ? -1 : 0;
		case J_NUM_ZERO:
		case J_NUM_INT:
		case J_NUM_FRAC:
		case J_NUM_EXP:
			value_done(j);
			return ++j->ws > JSON_MAX_WS ? -1 : 0;
		default:
			return -1;
		}
	}
	j->ws = 0;
	switch (j->state) {
	case J_START:
		return c == '{' ? start_value(j, c) : -1;
	case J_VALUE:
		if (c == ']' && j->left) {
			j->left = 0;
			return close_container(j, c);
		}
		j->left = 0;
		return start_value(j, c);
	case J_OBJ_FIRST:
		if (c == '}')
			return close_container(j, c);
		/* fall through */
	case J_OBJ_KEY:
		if (c != '"')
			return -1;
		j->state = J_STRING;
		j->in_key = 1;
		return 0;
	case J_COLON:
		if (c != ':')
			return -1;
		j->state = J_VALUE;
		j->left = 0;
		return 0;
	case J_AFTER:
		if (c == ',') {
			j->state = j->stack[j->depth - 1] == '{' ? J_OBJ_KEY : J_VALUE;
			j->left = 0;
			return 0;
		}
		return c == '}' || c == ']' ? close_container(j, c) : -1;
	case J_STRING:
		if (j->utf8 > 0) {
			if ((c & 0xC0) != 0x80)
				return -1;
			j->utf8--;
			return 0;
		}
		if (c == '"') {
			if (j->in_key)
				j->state = J_COLON;
			else
				value_done(j);
			return 0;
		}
		if (c == '\\') {
			j->state = J_ESCAPE;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c >= 0x80) {
			int tail = json_utf8_tail(c);
			if (tail < 0)
				return -1;
			j->utf8 = (unsigned char)tail;
		}
		return 0;
	case J_ESCAPE:
		if (c == 'u') {
			j->state = J_HEX;
			j->left = 4;
			return 0;
		}
		if (!strchr("\"\\/bfnrt", c))
			return -1;
		j->state = J_STRING;
		return 0;
	case J_HEX:
		if (!is_digit(c) && !((c | 32) >= 'a' && (c | 32) <= 'f'))
			return -1;
		if (--j->left == 0)
			j->state = J_STRING;
		return 0;
	case J_LITERAL:
		if (c != *j->lit)
			return -1;
		if (*++j->lit == '\0')
			value_done(j);
		return 0;
	case J_DONE:
		return -1;
	default:
		return after_number(j, c);
	}
}

static int
after_number(struct jrec *j, int c)
{
	switch (j->state) {
	case J_NUM_MINUS:
		if (c == '0') {
			j->state = J_NUM_ZERO;
			return 0;
		}
		if (is_digit(c)) {
			j->state = J_NUM_INT;
			return 0;
		}
		return -1;
	case J_NUM_ZERO:
	case J_NUM_INT:
		if (is_digit(c) && j->state == J_NUM_INT)
			return 0;
		if (c == '.') {
			j->state = J_NUM_DOT;
			return 0;
		}
		if (c == 'e' || c == 'E') {
			j->state = J_NUM_E;
			return 0;
		}
		break;
	case J_NUM_DOT:
		if (is_digit(c)) {
			j->state = J_NUM_FRAC;
			return 0;
		}
		return -1;
	case J_NUM_FRAC:
		if (is_digit(c))
			return 0;
		if (c == 'e' || c == 'E') {
			j->state = J_NUM_E;
			return 0;
		}
		break;
	case J_NUM_E:
		if (c == '+' || c == '-') {
			j->state = J_NUM_ESIGN;
			return 0;
		}
		/* fall through */
	case J_NUM_ESIGN:
		if (is_digit(c)) {
			j->state = J_NUM_EXP;
			return 0;
		}
		return -1;
	case J_NUM_EXP:
		if (is_digit(c))
			return 0;
		break;
	default:
		return -1;
	}
	/* the number is complete; the byte belongs to the container */
	value_done(j);
	return j->state == J_DONE ? -1 : step(j, c);
}

int
json_prefix_check(const char *text, size_t len)
{
	struct jrec j = { 0 };

	for (size_t i = 0; i < len; i++)
		if (step(&j, (unsigned char)text[i]) < 0)
			return -1;
	return j.state == J_DONE ? 1 : 0;
}

/* ------------------------------------------------------------ tokens */

struct json_vocab {
	const struct tokenizer *tok;
	int n;
	char *blob;
	uint32_t *off;
	uint16_t *len;
	unsigned char *eog;
};

struct json_vocab *
json_vocab_new(const struct tokenizer *tok)
{
	struct json_vocab *v = calloc(1, sizeof(*v));
	size_t cap = 1 << 16, used = 0;
	char piece[256];

	if (v == NULL)
		return NULL;
	v->tok = tok;
	v->n = tokenizer_n_vocab(tok);
	v->off = calloc((size_t)v->n, sizeof(uint32_t));
	v->len = calloc((size_t)v->n, sizeof(uint16_t));
	v->eog = calloc((size_t)v->n, 1);
	v->blob = malloc(cap);
	if (v->off == NULL || v->len == NULL || v->eog == NULL || v->blob == NULL) {
		json_vocab_free(v);
		return NULL;
	}
	for (int i = 0; i < v->n; i++) {
		int n = tokenizer_piece(tok, i, 0, piece, sizeof(piece));
		n = n < 0 ? 0 : n > (int)sizeof(piece) ? (int)sizeof(piece) : n;
		if (used + (size_t)n > cap) {
			char *nb = realloc(v->blob, cap * 2);
			if (nb == NULL) {
				json_vocab_free(v);
				return NULL;
			}
			v->blob = nb;
			cap *= 2;
		}
		memcpy(v->blob + used, piece, (size_t)n);
		v->off[i] = (uint32_t)used;
		v->len[i] = (uint16_t)n;
		v->eog[i] = (unsigned char)tokenizer_is_eog(tok, i);
		used += (size_t)n;
	}
	return v;
}

void
json_vocab_free(struct json_vocab *v)
{
	if (v == NULL)
		return;
	free(v->blob);
	free(v->off);
	free(v->len);
	free(v->eog);
	free(v);
}

int
json_vocab_size(const struct json_vocab *v)
{
	return v->n;
}

int
json_vocab_is_eog(const struct json_vocab *v, int32_t id)
{
	return v->eog[id];
}

int
json_vocab_piece(const struct json_vocab *v, int32_t id, const char **ret)
{
	*ret = v->blob + v->off[id];
	return v->len[id];
}

void
json_vocab_mask(const struct json_vocab *v, float *logits, int n_vocab, int can_end,
		int (*allows)(void *state, int32_t id), void *state)
{
	int allowed = 0;

	for (int i = 0; i < n_vocab && i < v->n; i++) {
		if (logits[i] == -INFINITY)
			continue;
		int ok = v->eog[i] ? can_end : allows(state, i);
		if (!ok)
			logits[i] = -INFINITY;
		allowed += ok;
	}
	if (allowed == 0)
		for (int i = 0; i < n_vocab && i < v->n; i++)
			if (v->eog[i])
				logits[i] = 0;
}

struct json_state {
	struct token_constraint c;
	const struct json_vocab *v;
	struct jrec j;
	int started; /* SPM drops the first token's leading space; so does this */
};

static int
feed(struct jrec *j, const struct json_vocab *v, int32_t id, int first)
{
	const char *p = v->blob + v->off[id];
	int n = v->len[id];

	if (first && n > 0 && p[0] == ' ')
		p++, n--;
	for (int i = 0; i < n; i++)
		if (step(j, (unsigned char)p[i]) < 0)
			return -1;
	return 0;
}

static int
js_allows(void *state, int32_t id)
{
	struct json_state *s = state;
	struct jrec j = s->j;

	if (s->v->len[id] == 0 || s->j.state == J_DONE)
		return 0;
	return feed(&j, s->v, id, !s->started) == 0;
}

static void
js_mask(void *state, float *logits, int n_vocab)
{
	struct json_state *s = state;

	json_vocab_mask(s->v, logits, n_vocab, s->j.state == J_DONE, js_allows, s);
}

static void
js_accept(void *state, int32_t id)
{
	struct json_state *s = state;

	if (id >= 0 && id < s->v->n && !s->v->eog[id]) {
		if (feed(&s->j, s->v, id, !s->started) < 0)
			s->j.state = J_DONE; /* cannot happen after js_mask; stop rather than run on */
		s->started = 1;
	}
}

static int
js_done(const void *state)
{
	const struct json_state *s = state;

	return s->j.state == J_DONE;
}

static void
js_release(struct token_constraint *c)
{
	free(c->state);
}

struct token_constraint *
json_constraint_new(const struct json_vocab *v)
{
	struct json_state *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->v = v;
	s->c = (struct token_constraint){ js_mask, js_accept, js_done, js_release, s };
	return &s->c;
}
