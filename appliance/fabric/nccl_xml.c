/* A reader for NCCL's topology XML dialect. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "nccl_xml.h"

struct reader {
	const char *p, *end;
	int line;
	int nodes;
	char *err;
	size_t errsize;
};

static int
fail(struct reader *r, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->errsize, "line %d: %s", r->line, msg);
	return APP_EFORMAT;
}

static int
at_end(const struct reader *r)
{
	return r->p >= r->end;
}

/* Spaces and newlines between elements; a tab or text is an error there,
 * as NCCL expects '<' after them. */
static void
skip_space(struct reader *r)
{
	while (!at_end(r) && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r')) {
		if (*r->p == '\n')
			r->line++;
		r->p++;
	}
}

static int
is_name_char(char c, int first)
{
	return isalpha((unsigned char)c) || c == '_' || (!first && (isdigit((unsigned char)c) || c == '-' || c == '.'));
}

static char *
read_name(struct reader *r, const char *what)
{
	const char *s = r->p;
	char *out;

	while (!at_end(r) && is_name_char(*r->p, r->p == s))
		r->p++;
	if (r->p == s) {
		if (at_end(r))
			fail(r, "the file ends inside a tag");
		else
			fail(r, "expected %s, found '%c'", what, isprint((unsigned char)*r->p) ? *r->p : '?');
		return NULL;
	}
	if (r->p - s > NCCL_XML_MAX_STR) {
		fail(r, "%s '%.20s...' is longer than NCCL's %d characters", what, s, NCCL_XML_MAX_STR);
		return NULL;
	}
	if ((out = strndup(s, (size_t)(r->p - s))) == NULL)
		fail(r, "out of memory");
	return out;
}

static char *
read_value(struct reader *r)
{
	char quote, *out;
	const char *s;

	if (at_end(r) || (*r->p != '"' && *r->p != '\'')) {
		fail(r, "an attribute value must be quoted");
		return NULL;
	}
	quote = *r->p++;
	for (s = r->p; !at_end(r) && *r->p != quote; r->p++)
		if (*r->p == '<' || *r->p == '&' || *r->p == '\n' || (unsigned char)*r->p < 0x20) {
			fail(r, "a value holds '%s', which NCCL reads literally and XML does not allow",
			     *r->p == '<'   ? "<"
			     : *r->p == '&' ? "&"
					    : "a control character");
			return NULL;
		}
	if (at_end(r)) {
		fail(r, "an attribute value is not closed");
		return NULL;
	}
	if (r->p - s > NCCL_XML_MAX_STR - 1) {
		fail(r, "a value is longer than NCCL's %d characters", NCCL_XML_MAX_STR - 1);
		return NULL;
	}
	out = strndup(s, (size_t)(r->p - s));
	r->p++;
	if (out == NULL)
		fail(r, "out of memory");
	return out;
}

static int
skip_comment(struct reader *r)
{
	const char *close = NULL;

	for (const char *q = r->p + 4; q + 3 <= r->end; q++)
		if (memcmp(q, "-->", 3) == 0) {
			close = q;
			break;
		}
	if (close == NULL)
		return fail(r, "a comment is not closed");
	for (; r->p < close + 3; r->p++)
		if (*r->p == '\n')
			r->line++;
	return 0;
}

static int
read_attrs(struct reader *r, struct nccl_node *n)
{
	while (!at_end(r) && *r->p == ' ') {
		struct nccl_attr *a;
		r->p++;
		if (n->n_attrs == NCCL_XML_MAX_ATTRS)
			return fail(r, "<%s> has more than NCCL's %d attributes", n->name, NCCL_XML_MAX_ATTRS);
		a = &n->attr[n->n_attrs];
		if ((a->key = read_name(r, "an attribute name")) == NULL)
			return APP_EFORMAT;
		n->n_attrs++;
		for (int i = 0; i < n->n_attrs - 1; i++)
			if (strcmp(n->attr[i].key, a->key) == 0)
				return fail(r, "<%s> has attribute %s twice", n->name, a->key);
		if (at_end(r) || *r->p != '=')
			return fail(r, "attribute %s of <%s> has no value", a->key, n->name);
		r->p++;
		if ((a->value = read_value(r)) == NULL)
			return APP_EFORMAT;
	}
	return 0;
}

static struct nccl_node *read_element(struct reader *r, struct nccl_node *parent, int depth);

/* Children up to the closing tag of n. */
static int
read_content(struct reader *r, struct nccl_node *n, int depth)
{
	struct nccl_node **tail = &n->first_child;

	for (;;) {
		skip_space(r);
		if (at_end(r))
			return fail(r, "<%s> is not closed", n->name);
		if (*r->p != '<')
			return fail(r, "expected '<', found '%c' (NCCL takes no text, and no tabs)",
				    isprint((unsigned char)*r->p) ? *r->p : '?');
		if (r->end - r->p >= 4 && memcmp(r->p, "<!--", 4) == 0) {
			if (skip_comment(r) < 0)
				return APP_EFORMAT;
			continue;
		}
		if (r->end - r->p >= 2 && r->p[1] == '/') {
			char *name;
			int same;
			r->p += 2;
			if ((name = read_name(r, "a closing tag's name")) == NULL)
				return APP_EFORMAT;
			same = strcmp(name, n->name) == 0;
			free(name);
			if (!same)
				return fail(r, "</...> does not close <%s>", n->name);
			if (at_end(r) || *r->p != '>')
				return fail(r, "expected '>' to end </%s>", n->name);
			r->p++;
			return 0;
		}
		if ((*tail = read_element(r, n, depth + 1)) == NULL)
			return APP_EFORMAT;
		tail = &(*tail)->next;
	}
}

static struct nccl_node *
read_element(struct reader *r, struct nccl_node *parent, int depth)
{
	struct nccl_node *n;

	if (depth > NCCL_XML_MAX_DEPTH) {
		fail(r, "elements nest deeper than %d", NCCL_XML_MAX_DEPTH);
		return NULL;
	}
	if (++r->nodes > NCCL_XML_MAX_NODES) {
		fail(r, "more than %d elements", NCCL_XML_MAX_NODES);
		return NULL;
	}
	r->p++; /* '<' */
	if (!at_end(r) && *r->p == '?') {
		fail(r, "an XML declaration (<?xml ...?>): NCCL's reader stops on it");
		return NULL;
	}
	if ((n = calloc(1, sizeof(*n))) == NULL) {
		fail(r, "out of memory");
		return NULL;
	}
	n->parent = parent;
	n->line = r->line;
	if ((n->name = read_name(r, "an element name")) == NULL || read_attrs(r, n) < 0)
		goto bad;
	if (!at_end(r) && *r->p == '/') {
		r->p++;
		if (at_end(r) || *r->p != '>') {
			fail(r, "expected '>' after '/' in <%s>", n->name);
			goto bad;
		}
		r->p++;
		return n;
	}
	if (at_end(r) || *r->p != '>') {
		fail(r, "expected ' ', '/>' or '>' in <%s>%s", n->name,
		     !at_end(r) && (*r->p == '\n' || *r->p == '\t') ? " (NCCL takes one space between attributes)"
								    : "");
		goto bad;
	}
	r->p++;
	if (read_content(r, n, depth) < 0)
		goto bad;
	return n;
bad:
	nccl_xml_free(n);
	return NULL;
}

struct nccl_node *
nccl_xml_parse(const char *text, size_t len, char *err, size_t errsize)
{
	struct reader r = { text, text + len, 1, 0, err, errsize };
	struct nccl_node *root;

	if (len > NCCL_XML_MAX_BYTES) {
		snprintf(err, errsize, "the file is over %d bytes", NCCL_XML_MAX_BYTES);
		return NULL;
	}
	if (memchr(text, '\0', len) != NULL) {
		snprintf(err, errsize, "the file holds a NUL byte: not text");
		return NULL;
	}
	for (;;) {
		skip_space(&r);
		if (at_end(&r)) {
			fail(&r, "no element in the file");
			return NULL;
		}
		if (*r.p != '<') {
			fail(&r, "expected '<', found '%c'", isprint((unsigned char)*r.p) ? *r.p : '?');
			return NULL;
		}
		if (r.end - r.p >= 4 && memcmp(r.p, "<!--", 4) == 0) {
			if (skip_comment(&r) < 0)
				return NULL;
			continue;
		}
		break;
	}
	if ((root = read_element(&r, NULL, 0)) == NULL)
		return NULL;
	skip_space(&r);
	if (!at_end(&r)) {
		fail(&r, "something follows </%s>", root->name);
		nccl_xml_free(root);
		return NULL;
	}
	return root;
}

void
nccl_xml_free(struct nccl_node *n)
{
	while (n != NULL) {
		struct nccl_node *next = n->next;
		nccl_xml_free(n->first_child);
		for (int i = 0; i < n->n_attrs; i++) {
			free(n->attr[i].key);
			free(n->attr[i].value);
		}
		free(n->name);
		free(n);
		n = next;
	}
}

const char *
nccl_xml_attr(const struct nccl_node *n, const char *key)
{
	for (int i = 0; i < n->n_attrs; i++)
		if (n->attr[i].value != NULL && strcmp(n->attr[i].key, key) == 0)
			return n->attr[i].value;
	return NULL;
}

struct nccl_node *
nccl_xml_walk(struct nccl_node *n)
{
	if (n->first_child != NULL)
		return n->first_child;
	while (n != NULL && n->next == NULL)
		n = n->parent;
	return n != NULL ? n->next : NULL;
}

struct nccl_node *
nccl_xml_ancestor(struct nccl_node *n, const char *name)
{
	for (n = n->parent; n != NULL; n = n->parent)
		if (strcmp(n->name, name) == 0)
			return n;
	return NULL;
}
