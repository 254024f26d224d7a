/*
 * A growable string for building responses.  An allocation failure is
 * sticky: later appends do nothing and strbuf_failed() says so, so callers
 * check once at the end instead of after every append.
 */
#ifndef PRIVAI_STRBUF_H
#define PRIVAI_STRBUF_H

#include <stddef.h>

struct strbuf {
	char *s;
	size_t len, cap;
	int failed;
};

void strbuf_init(struct strbuf *b);
void strbuf_free(struct strbuf *b);
void strbuf_append(struct strbuf *b, const char *s, size_t n);
void strbuf_puts(struct strbuf *b, const char *s);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int strbuf_failed(const struct strbuf *b);
/* Hand the string over (NUL-terminated, caller frees); NULL after a failure. */
char *strbuf_take(struct strbuf *b);

#endif
