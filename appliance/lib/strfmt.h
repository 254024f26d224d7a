/*
 * Text built into fixed buffers, with the two intents kept apart:
 *
 * str_fmt: paths, URLs, unit names, SQL: anything a cut would turn into
 * something else (a truncated path names another file).  The whole text
 * in out, or APP_ERANGE and out emptied when it does not fit; the result
 * must be looked at.
 *
 * msg_fmt: a message for a person (a reason, an error line), which may be
 * cut to its buffer: snprintf, saying so.
 */
#ifndef PRIVAI_STRFMT_H
#define PRIVAI_STRFMT_H

#include <stddef.h>

int str_fmt(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4), warn_unused_result));
void msg_fmt(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
