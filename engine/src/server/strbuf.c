/* A growable string with a sticky allocation failure. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/strbuf.h"

void
strbuf_init(struct strbuf *b)
{
	memset(b, 0, sizeof(*b));
}

void
strbuf_free(struct strbuf *b)
{
	free(b->s);
	strbuf_init(b);
}

static int
reserve(struct strbuf *b, size_t extra)
{
	if (b->failed)
		return -1;
	if (b->len + extra + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *ns = realloc(b->s, cap);
	if (ns == NULL) {
		b->failed = 1;
		return -1;
	}
	b->s = ns;
	b->cap = cap;
	return 0;
}

void
strbuf_append(struct strbuf *b, const char *s, size_t n)
{
	if (reserve(b, n) < 0)
		return;
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void
strbuf_puts(struct strbuf *b, const char *s)
{
	strbuf_append(b, s, strlen(s));
}

void
strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || reserve(b, (size_t)n) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

int
strbuf_failed(const struct strbuf *b)
{
	return b->failed;
}

char *
strbuf_take(struct strbuf *b)
{
	char *s;

	if (b->failed || reserve(b, 0) < 0) {
		strbuf_free(b);
		return NULL;
	}
	s = b->s;
	strbuf_init(b);
	return s;
}
