/*
 * The recogniser for a compiled schema, and the token constraint on it.
 *
 * A candidate is a stack of frames, one per value being read (object,
 * key, string, number, literal, array, or a value not yet begun).  anyOf
 * makes the reading ambiguous until bytes tell the alternatives apart, so
 * the state is a small set of candidates: a value's first byte forks one
 * candidate per alternative, and a candidate that cannot take a byte
 * leaves the set.  The output is a valid prefix while the set is not
 * empty, and complete when some candidate has read the whole value.
 *
 * Checking a token copies the set and feeds it the token's bytes.  A
 * string under a pattern is checked with PCRE2's partial matching at the
 * end of each token, and matched whole when it closes; its text is the
 * tail of the output, kept in `text`.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_schema_int.h"

#define RUN_MAX_DEPTH 32
#define RUN_MAX_CANDS 16
#define RUN_MAX_WS 4      /* consecutive whitespace bytes: no endless blank output */
#define RUN_MAX_NUMBER 32 /* bytes in a number: no endless digits */
#define RUN_MAX_FORKS 32  /* anyOf resolutions for one value: a $ref cycle ends */

enum fkind { F_VALUE, F_OBJ, F_KEY, F_STR, F_NUM, F_LIT, F_ARR, F_TEXT };
enum { OB_FIRST, OB_NEXT, OB_COLON, OB_AFTER };
enum { AR_FIRST, AR_NEXT, AR_AFTER };
enum { ST_CHAR, ST_ESC, ST_HEX };
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

struct frame {
	const struct snode *node;
	uint64_t seen;         /* F_OBJ: the properties given so far */
	uint32_t count;        /* F_ARR: items; F_STR: characters; F_NUM: bytes */
	uint32_t start;        /* F_STR: where its text starts in the output */
	uint16_t lo, hi, pos;  /* F_KEY, F_LIT: the names/literals still matching, bytes matched; F_TEXT: pos */
	uint8_t kind, st, aux; /* aux: F_STR, F_KEY: continuation bytes or hex digits left; F_TEXT: 1 suffix */
	int8_t key;            /* F_OBJ: the property whose value comes next; F_KEY: 1 any string */
};

struct cand {
	int depth;
	int ws;
	int dead;
	struct frame f[RUN_MAX_DEPTH];
};

struct cset {
	int n;
	struct cand c[RUN_MAX_CANDS];
};

/* What stepping needs besides the set: the output so far (for patterns),
 * the literal text around the value, and PCRE2's match data. */
struct run_ctx {
	const char *text; /* the output, with the byte being read at pos */
	size_t pos;
	const char *prefix, *suffix;
	pcre2_match_data *md;
};

static struct snode open_object = { .kind = S_OBJECT, .open = 1, .max_items = UINT32_MAX, .max_len = UINT32_MAX };
static struct snode any_array = { .kind = S_ARRAY, .max_items = UINT32_MAX, .max_len = UINT32_MAX };
static struct snode any_string = { .kind = S_STRING, .max_items = UINT32_MAX, .max_len = UINT32_MAX };
static struct snode any_number = { .kind = S_NUMBER };
static char *any_lits_text[] = { "false", "null", "true" };
static struct snode any_literals = { .kind = S_LITERALS, .n_lits = 3, .lits = any_lits_text };

/* Between tokens JSON allows tabs and carriage returns too; generating
 * only spaces and newlines keeps the output readable and still valid. */
static int
is_ws(int c)
{
	return c == ' ' || c == '\n';
}

static int
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static struct frame *
push(struct cand *k, enum fkind kind, const struct snode *node)
{
	struct frame *f;

	if (k->depth >= RUN_MAX_DEPTH)
		return NULL;
	f = &k->f[k->depth++];
	memset(f, 0, sizeof(*f));
	f->kind = (uint8_t)kind;
	f->node = node;
	return f;
}

static void
cand_copy(struct cand *dst, const struct cand *src)
{
	dst->depth = src->depth;
	dst->ws = src->ws;
	dst->dead = src->dead;
	memcpy(dst->f, src->f, (size_t)src->depth * sizeof(struct frame));
}

static void
set_copy(struct cset *dst, const struct cset *src)
{
	dst->n = src->n;
	for (int i = 0; i < src->n; i++)
		cand_copy(&dst->c[i], &src->c[i]);
}

/* A literal or number frame that could end here. */
static int
frame_complete(const struct frame *f)
{
	if (f->kind == F_NUM)
		return f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
	if (f->kind == F_LIT)
		return strlen(f->node->lits[f->lo]) == f->pos;
	return 0;
}

static int
cand_can_end(const struct cand *k)
{
	return k->depth == 0 || (k->depth == 1 && frame_complete(&k->f[0]));
}

/* Begin reading a value of node n with its first byte c, in place of the
 * F_VALUE frame f; the byte is then read by the new frame. */
static int
begin_value(struct frame *f, const struct snode *n, int c)
{
	if (n->kind == S_ANY)
		n = c == '{'                  ? &open_object
		    : c == '['                ? &any_array
		    : c == '"'                ? &any_string
		    : c == '-' || is_digit(c) ? &any_number
					      : &any_literals;
	memset(f, 0, sizeof(*f));
	f->node = n;
	switch (n->kind) {
	case S_OBJECT:
		f->kind = F_OBJ;
		f->st = OB_FIRST;
		f->key = -1;
		return c == '{' ? 1 : -1;
	case S_ARRAY:
		f->kind = F_ARR;
		f->st = AR_FIRST;
		return c == '[' ? 1 : -1;
	case S_STRING:
		f->kind = F_STR;
		f->st = ST_CHAR;
		return c == '"' ? 1 : -1;
	case S_NUMBER:
	case S_INTEGER:
		f->kind = F_NUM;
		f->st = N_MINUS;
		if (c == '-')
			return 1;
		if (!is_digit(c))
			return -1;
		f->st = c == '0' ? N_ZERO : N_INT;
		f->count = 1;
		return 1;
	case S_LITERALS:
		f->kind = F_LIT;
		f->hi = (uint16_t)n->n_lits;
		return 0; /* the literal frame reads c */
	default:
		return -1;
	}
}

/* Narrow [lo, hi) of sorted strs to those with byte c at pos. */
static int
narrow(char *const *strs, struct frame *f, int c)
{
	int lo = f->lo, hi = f->hi;

	while (lo < hi && (strlen(strs[lo]) <= f->pos || (unsigned char)strs[lo][f->pos] != c))
		lo++;
	hi = lo;
	while (hi < f->hi && strlen(strs[hi]) > f->pos && (unsigned char)strs[hi][f->pos] == c)
		hi++;
	if (lo == hi)
		return -1;
	f->lo = (uint16_t)lo;
	f->hi = (uint16_t)hi;
	f->pos++;
	return 0;
}

static int
pattern_ok(const struct run_ctx *x, const struct frame *f, int whole)
{
	size_t len = x->pos + 1 - f->start - (whole ? 1 : 0); /* whole: without the closing quote */

	if (!whole && len == 0)
		return 1; /* nothing read yet */
	int rc = pcre2_match(f->node->pattern, (PCRE2_SPTR)(x->text + f->start), len, 0, whole ? 0 : PCRE2_PARTIAL_HARD,
			     x->md, NULL);

	if (rc >= 0 || (!whole && rc == PCRE2_ERROR_PARTIAL))
		return 1;
	/* PCRE2 reports no partial match where a match could only start
	 * after the text's end; an unanchored pattern can always start there
	 * (a cut character aside, which is never valid) */
	return !whole && !f->node->pattern_anchored && rc == PCRE2_ERROR_NOMATCH;
}

static int step_string(struct cand *k, struct frame *f, int c, const struct run_ctx *x);
static int step_container(struct cand *k, struct frame *f, int c);

/* The frame on top has finished its value: back to its container. */
static void
pop(struct cand *k)
{
	k->depth--;
}

static int
step_number(struct frame *f, int c)
{
	int integer = f->node->kind == S_INTEGER;

	if (++f->count > RUN_MAX_NUMBER)
		return -1;
	switch (f->st) {
	case N_MINUS:
		if (!is_digit(c))
			return -1;
		f->st = c == '0' ? N_ZERO : N_INT;
		return 0;
	case N_INT:
		if (is_digit(c))
			return 0;
		/* fall through */
	case N_ZERO:
		if (c == '.' && !integer)
			f->st = N_DOT;
		else if ((c == 'e' || c == 'E') && !integer)
			f->st = N_E;
		else
			return 1; /* not part of the number */
		return 0;
	case N_DOT:
		f->st = N_FRAC;
		return is_digit(c) ? 0 : -1;
	case N_FRAC:
		if (is_digit(c))
			return 0;
		if (c == 'e' || c == 'E') {
			f->st = N_E;
			return 0;
		}
		return 1;
	case N_E:
		if (c == '+' || c == '-') {
			f->st = N_ESIGN;
			return 0;
		}
		/* fall through */
	case N_ESIGN:
		f->st = N_EXP;
		return is_digit(c) ? 0 : -1;
	default: /* N_EXP */
		return is_digit(c) ? 0 : 1;
	}
}

/* Feed byte c to candidate i of the set; forks for anyOf are appended to
 * the set and read c there.  0, or -1 when the candidate cannot take c. */
static int
cand_step(struct cset *s, int i, int c, const struct run_ctx *x)
{
	struct cand *k = &s->c[i];
	int forks = 0, r;

	for (;;) {
		if (k->depth == 0)
			return -1; /* the value is complete: nothing more */
		struct frame *f = &k->f[k->depth - 1];
		switch (f->kind) {
		case F_TEXT: {
			const char *t = f->aux ? x->suffix : x->prefix;
			if ((unsigned char)t[f->pos] != c)
				return -1;
			if (t[++f->pos] == '\0')
				pop(k);
			k->ws = 0;
			return 0;
		}
		case F_VALUE:
			if (is_ws(c))
				return ++k->ws > RUN_MAX_WS ? -1 : 0;
			if (f->node->kind == S_ANYOF) {
				const struct snode *n = f->node;
				if (++forks > RUN_MAX_FORKS || n->n_alts == 0)
					return -1;
				for (int a = 1; a < n->n_alts && s->n < RUN_MAX_CANDS; a++) {
					cand_copy(&s->c[s->n], k);
					s->c[s->n++].f[k->depth - 1].node = n->alts[a];
				}
				f->node = n->alts[0];
				continue;
			}
			k->ws = 0;
			if ((r = begin_value(f, f->node, c)) != 0) {
				f->start = (uint32_t)x->pos + 1;
				return r > 0 ? 0 : -1;
			}
			continue; /* a literal reads its first byte */
		case F_NUM:
			if ((r = step_number(f, c)) <= 0)
				return r;
			pop(k); /* the byte belongs to the container */
			continue;
		case F_LIT:
			if (narrow(f->node->lits, f, c) == 0) {
				k->ws = 0;
				return 0;
			}
			if (!frame_complete(f))
				return -1;
			pop(k);
			continue;
		case F_STR:
		case F_KEY:
			k->ws = 0;
			return step_string(k, f, c, x);
		default:
			if (is_ws(c))
				return ++k->ws > RUN_MAX_WS ? -1 : 0;
			k->ws = 0;
			if ((r = step_container(k, f, c)) != 1)
				return r;
			continue; /* an array's item reads its first byte */
		}
	}
}

/* A key of a declared object: one of the names not yet given. */
static int
step_key(struct cand *k, struct frame *f, int c)
{
	struct frame *obj = f - 1;
	const struct snode *n = obj->node;

	if (c == '"') {
		if (strlen(n->names[f->lo]) != f->pos || (obj->seen >> f->lo & 1))
			return -1;
		obj->key = (int8_t)f->lo;
		obj->seen |= 1ull << f->lo;
		pop(k);
		return 0;
	}
	if (narrow(n->names, f, c) < 0)
		return -1;
	for (int i = f->lo; i < f->hi; i++)
		if (!(obj->seen >> i & 1))
			return 0;
	return -1;
}

static int
step_string(struct cand *k, struct frame *f, int c, const struct run_ctx *x)
{
	const struct snode *n = f->node;

	if (f->kind == F_KEY && !f->key)
		return step_key(k, f, c);
	switch (f->st) {
	case ST_ESC:
		if (c == 'u') {
			f->st = ST_HEX;
			f->aux = 4;
			return 0;
		}
		f->st = ST_CHAR;
		return strchr("\"\\/bfnrt", c) != NULL && c != '\0' ? 0 : -1;
	case ST_HEX:
		if (!is_digit(c) && !((c | 32) >= 'a' && (c | 32) <= 'f'))
			return -1;
		if (--f->aux == 0)
			f->st = ST_CHAR;
		return 0;
	}
	if (f->aux > 0) { /* inside a UTF-8 sequence */
		if ((c & 0xC0) != 0x80)
			return -1;
		f->aux--;
		return 0;
	}
	if (c == '"') {
		if (f->count < n->min_len || (n->pattern != NULL && !pattern_ok(x, f, 1)))
			return -1;
		pop(k);
		return 0;
	}
	if (c < 0x20 || f->count >= n->max_len || (c == '\\' && n->pattern != NULL))
		return -1;
	f->count++;
	if (c == '\\')
		f->st = ST_ESC;
	else if (c >= 0x80) {
		int tail = json_utf8_tail(c);
		if (tail < 0)
			return -1;
		f->aux = (uint8_t)tail;
	}
	return 0;
}

/* A key begins in object frame f. */
static int
begin_key(struct cand *k, struct frame *f)
{
	const struct snode *n = f->node;
	struct frame *kf;

	if (!n->open && (n->n_props == 0 || f->seen == (n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1)))
		return -1;
	f->st = OB_COLON;
	if ((kf = push(k, F_KEY, n->open ? &any_string : n)) == NULL)
		return -1;
	kf->key = (int8_t)n->open; /* a generic key is any string */
	kf->hi = (uint16_t)n->n_props;
	return 0;
}

static int
step_container(struct cand *k, struct frame *f, int c)
{
	const struct snode *n = f->node;

	if (f->kind == F_OBJ) {
		switch (f->st) {
		case OB_FIRST:
		case OB_AFTER:
			if (c == '}') {
				if ((n->required & ~f->seen) != 0)
					return -1;
				pop(k);
				return 0;
			}
			if (f->st == OB_AFTER) {
				/* a comma needs a property still to give */
				if (c != ',' ||
				    (!n->open && f->seen == (n->n_props == 64 ? ~0ull : (1ull << n->n_props) - 1)))
					return -1;
				f->st = OB_NEXT;
				return 0;
			}
			/* fall through */
		case OB_NEXT:
			return c == '"' ? begin_key(k, f) : -1;
		default: /* OB_COLON */
			if (c != ':')
				return -1;
			f->st = OB_AFTER;
			return push(k, F_VALUE, n->open ? &schema_any : n->props[f->key]) != NULL ? 0 : -1;
		}
	}
	/* F_ARR */
	if (c == ']' && f->st != AR_NEXT) {
		if (f->count < n->min_items)
			return -1;
		pop(k);
		return 0;
	}
	if (f->st == AR_AFTER) {
		if (c != ',' || f->count >= n->max_items)
			return -1;
		f->st = AR_NEXT;
		return 0;
	}
	if (f->count >= n->max_items)
		return -1;
	f->count++;
	f->st = AR_AFTER;
	return push(k, F_VALUE, n->items != NULL ? n->items : &schema_any) != NULL ? 1 : -1;
}

/* Drop the candidates marked dead; 0, or -1 when none is left. */
static int
set_compact(struct cset *s)
{
	int n = 0;

	for (int i = 0; i < s->n; i++)
		if (!s->c[i].dead) {
			if (i != n)
				cand_copy(&s->c[n], &s->c[i]);
			n++;
		}
	s->n = n;
	return n > 0 ? 0 : -1;
}

/* Feed byte c (at x->pos of x->text) to every candidate. */
static int
set_step(struct cset *s, int c, const struct run_ctx *x)
{
	for (int i = 0; i < s->n; i++)
		s->c[i].dead = cand_step(s, i, c, x) < 0;
	return set_compact(s);
}

/* After a token: strings under a pattern must still be able to match. */
static int
set_check_patterns(struct cset *s, const struct run_ctx *x)
{
	for (int i = 0; i < s->n; i++) {
		const struct cand *k = &s->c[i];
		const struct frame *f = k->depth > 0 ? &k->f[k->depth - 1] : NULL;
		/* a token that ends inside a character fails too (PCRE2 calls a
		 * cut character invalid UTF-8): only whole characters are tried */
		s->c[i].dead = f != NULL && f->kind == F_STR && f->node->pattern != NULL && !pattern_ok(x, f, 0);
	}
	return set_compact(s);
}

static int
set_can_end(const struct cset *s)
{
	for (int i = 0; i < s->n; i++)
		if (cand_can_end(&s->c[i]))
			return 1;
	return 0;
}

/* Two candidates in the same state read the same future: keep one. */
static void
set_dedupe(struct cset *s)
{
	int n = 0;

	for (int i = 0; i < s->n; i++) {
		int dup = 0;
		for (int j = 0; j < n && !dup; j++)
			dup = s->c[j].depth == s->c[i].depth && s->c[j].ws == s->c[i].ws &&
			      memcmp(s->c[j].f, s->c[i].f, (size_t)s->c[i].depth * sizeof(struct frame)) == 0;
		if (!dup) {
			if (i != n)
				cand_copy(&s->c[n], &s->c[i]);
			n++;
		}
	}
	s->n = n;
}

static void
set_init(struct cset *s, const struct json_schema *js, const char *prefix, const char *suffix)
{
	struct cand *k = &s->c[0];

	s->n = 1;
	k->depth = 0;
	k->ws = 0;
	k->dead = 0;
	if (suffix != NULL && suffix[0] != '\0')
		push(k, F_TEXT, NULL)->aux = 1;
	push(k, F_VALUE, js->root);
	if (prefix != NULL && prefix[0] != '\0')
		push(k, F_TEXT, NULL);
}

int
json_schema_check(const struct json_schema *js, const char *text, size_t len)
{
	struct cset *s = malloc(sizeof(*s));
	struct run_ctx x = { .text = text, .prefix = "", .suffix = "" };
	int rc = 0;

	if (s == NULL)
		return -1;
	x.md = pcre2_match_data_create(1, NULL);
	set_init(s, js, NULL, NULL);
	for (size_t i = 0; i < len && rc == 0; i++) {
		x.pos = i;
		rc = set_step(s, (unsigned char)text[i], &x);
		if (rc == 0)
			set_dedupe(s);
	}
	if (rc == 0 && len > 0)
		rc = set_check_patterns(s, &x);
	if (rc == 0)
		rc = set_can_end(s);
	pcre2_match_data_free(x.md);
	free(s);
	return rc;
}

/* ------------------------------------------------------------ tokens */

struct schema_state {
	struct token_constraint c;
	const struct json_vocab *v;
	struct json_schema *js;
	char *prefix, *suffix;
	struct cset set, scratch;
	char *text; /* the output so far, and room for one token after it */
	size_t len, cap;
	int started; /* SPM drops the first token's leading space; so does this */
	pcre2_match_data *md;
};

static int
text_reserve(struct schema_state *st, size_t extra)
{
	if (st->len + extra <= st->cap)
		return 0;
	size_t cap = (st->len + extra) * 2;
	char *t = realloc(st->text, cap);
	if (t == NULL)
		return -1;
	st->text = t;
	st->cap = cap;
	return 0;
}

/* Feed token id to set (the output so far is st->text); 0 or -1. */
static int
feed_token(struct schema_state *st, struct cset *set, int32_t id)
{
	const char *p;
	int n = json_vocab_piece(st->v, id, &p);
	struct run_ctx x = { .text = st->text, .prefix = st->prefix, .suffix = st->suffix, .md = st->md };

	if (!st->started && n > 0 && p[0] == ' ')
		p++, n--;
	if (n <= 0 || text_reserve(st, (size_t)n) < 0)
		return -1;
	x.text = st->text;
	memcpy(st->text + st->len, p, (size_t)n);
	for (int i = 0; i < n; i++) {
		x.pos = st->len + (size_t)i;
		if (set_step(set, (unsigned char)p[i], &x) < 0)
			return -1;
	}
	x.pos = st->len + (size_t)n - 1;
	return set_check_patterns(set, &x);
}

static int
schema_allows(void *state, int32_t id)
{
	struct schema_state *st = state;

	set_copy(&st->scratch, &st->set);
	return feed_token(st, &st->scratch, id) == 0;
}

static void
schema_mask(void *state, float *logits, int n_vocab)
{
	struct schema_state *st = state;

	json_vocab_mask(st->v, logits, n_vocab, set_can_end(&st->set), schema_allows, st);
}

static void
schema_accept(void *state, int32_t id)
{
	struct schema_state *st = state;
	const char *p;

	if (id < 0 || id >= json_vocab_size(st->v) || json_vocab_is_eog(st->v, id))
		return;
	int n = json_vocab_piece(st->v, id, &p);
	if (!st->started && n > 0 && p[0] == ' ')
		n--;
	if (feed_token(st, &st->set, id) < 0) {
		st->set.n = 0; /* cannot happen after schema_mask; stop rather than run on */
		return;
	}
	st->len += (size_t)(n > 0 ? n : 0);
	st->started = 1;
	set_dedupe(&st->set);
}

static int
schema_done(const void *state)
{
	const struct schema_state *st = state;

	/* complete, and nothing may follow (a number could still grow) */
	if (st->set.n == 0)
		return 1;
	for (int i = 0; i < st->set.n; i++)
		if (st->set.c[i].depth != 0)
			return 0;
	return 1;
}

static void
schema_release(struct token_constraint *c)
{
	struct schema_state *st = c->state;

	json_schema_unref(st->js);
	pcre2_match_data_free(st->md);
	free(st->prefix);
	free(st->suffix);
	free(st->text);
	free(st);
}

struct token_constraint *
json_schema_constraint_new(const struct json_vocab *v, struct json_schema *js, const char *prefix, const char *suffix)
{
	struct schema_state *st = calloc(1, sizeof(*st));

	if (st == NULL)
		return NULL;
	st->v = v;
	st->js = json_schema_ref(js);
	st->prefix = strdup(prefix != NULL ? prefix : "");
	st->suffix = strdup(suffix != NULL ? suffix : "");
	st->md = pcre2_match_data_create(1, NULL);
	st->cap = 4096;
	st->text = malloc(st->cap);
	if (st->prefix == NULL || st->suffix == NULL || st->md == NULL || st->text == NULL) {
		st->c.state = st;
		schema_release(&st->c);
		return NULL;
	}
	set_init(&st->set, js, st->prefix, st->suffix);
	st->c = (struct token_constraint){ schema_mask, schema_accept, schema_done, schema_release, st };
	return &st->c;
}
