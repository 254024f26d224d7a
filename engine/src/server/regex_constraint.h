/*
 * Output constrained to a regular expression (vLLM's guided_regex and
 * guided_choice extension fields): a token is allowed when the output
 * with it is still a prefix of a match of the whole output (PCRE2 partial
 * matching, anchored at both ends), the end of generation only when the
 * output matches in full.
 */
#ifndef PRIVAI_REGEX_CONSTRAINT_H
#define PRIVAI_REGEX_CONSTRAINT_H

#include <stddef.h>

#include "privai/scheduler.h"
#include "server/json_constraint.h"

/* 0 when pattern compiles (PCRE2 syntax), else -1 with err saying why. */
int regex_check(const char *pattern, char *err, size_t errlen);

/* A constraint for one request; NULL when out of memory or the pattern
 * does not compile.  The vocabulary must outlive it. */
struct token_constraint *regex_constraint_new(const struct json_vocab *v, const char *pattern);

/* A pattern matching exactly one of the n strings, malloc'd (NULL when
 * out of memory). */
char *regex_of_choices(const char *const *choices, int n);

#endif
