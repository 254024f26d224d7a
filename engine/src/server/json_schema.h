/*
 * Structured outputs: a JSON Schema compiled into the token constraint that
 * makes generation produce only JSON valid against it (response_format
 * {"type": "json_schema"}, and the arguments of a forced tool call).
 *
 * The subset is what OpenAI's strict mode and vLLM accept: type (one or a
 * list), properties, required, additionalProperties, items, minItems,
 * maxItems, enum, const, anyOf, $ref into $defs/definitions (recursion
 * included), minLength, maxLength, pattern; annotations (title,
 * description, default, examples, ...) are ignored.  Any other keyword is
 * refused by name and path, so a schema is never half-honoured.
 *
 * Generated objects hold only declared properties (which every schema
 * accepts: extra properties are allowed, never required), in any order,
 * each at most once.  Strings under a pattern may not use escapes: the
 * pattern (PCRE2) is matched against the raw text between the quotes.
 */
#ifndef PRIVAI_JSON_SCHEMA_H
#define PRIVAI_JSON_SCHEMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "privai/scheduler.h"
#include "server/json_constraint.h"

struct json_schema;

/* Compile schema; 0 with *ret (free with json_schema_unref), or -1 with
 * err naming the keyword and where it is ("#/properties/age: minimum is
 * not supported"). */
int json_schema_compile(const cJSON *schema, struct json_schema **ret, char *err, size_t errlen);
struct json_schema *json_schema_ref(struct json_schema *s);
void json_schema_unref(struct json_schema *s);

/* A constraint for one request (it holds a reference to s); NULL when out
 * of memory.  The vocabulary must outlive it.  prefix and suffix (may be
 * NULL) are literal text the output must begin and end with around the
 * value: how a forced tool call is spelled. */
struct token_constraint *json_schema_constraint_new(const struct json_vocab *v, struct json_schema *s,
						    const char *prefix, const char *suffix);

/* For tests: 1 when text is a complete value valid against s, 0 when it is
 * a prefix of one, -1 when it can never become one. */
int json_schema_check(const struct json_schema *s, const char *text, size_t len);

#endif
