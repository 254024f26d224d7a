/*
 * Tool calling: the request's tools and tool_choice, the schema that
 * forces a call, and the model's output read back into tool calls.
 *
 * tool_choice "auto": the tools are rendered into the prompt as the chat
 * family's template does (chat_tools.c) and the output is searched for
 * that family's call syntax; text before the first call is the content.
 * "required" and a named function: decoding is constrained, as vLLM does,
 * to bare JSON, an array of {"name", "parameters"} for required and the
 * function's arguments for a named one, so the call cannot fail to parse.
 * "none": no tools in the prompt, no parsing.
 */
#ifndef PRIVAI_TOOL_CALLS_H
#define PRIVAI_TOOL_CALLS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "server/chat_template.h"
#include "server/json_schema.h"

#define TOOLS_MAX 128

enum tool_choice { TOOL_CHOICE_NONE, TOOL_CHOICE_AUTO, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED };

struct tool_def {
	char *name;
	char *function;    /* the function object as JSON, for the prompt */
	cJSON *parameters; /* its parameters schema (a copy); NULL: any object */
};

struct tool_set {
	struct tool_def *t;
	int n;
	enum tool_choice choice;
	int named;    /* TOOL_CHOICE_NAMED: index into t */
	int parallel; /* parallel_tool_calls, default 1 */
};

struct tool_call {
	char *id;
	char *name;
	char *arguments; /* JSON text of an object */
};

/* Read tools, tool_choice and parallel_tool_calls (any may be NULL).
 * 0, or -1 with err set and *ret_param naming the field. */
int tools_parse(const cJSON *tools, const cJSON *choice, const cJSON *parallel, struct tool_set *ret, char *err,
		size_t errlen, const char **ret_param);
void tools_free(struct tool_set *ts);

/* The schema that forces the call (required or named); NULL with err
 * set when a parameters schema cannot be enforced. */
struct json_schema *tools_forced_schema(const struct tool_set *ts, char *err, size_t errlen);

/* The calls in output text: raw is the generated text with special tokens
 * spelled out.  Returns the number of calls (0: plain text), with
 * *ret_calls malloc'd (free with tool_calls_free) and *ret_content_len
 * the bytes of raw before the first call; -1 when out of memory. */
int tools_parse_output(const struct tool_set *ts, enum chat_family f, const char *raw, struct tool_call **ret_calls,
		       size_t *ret_content_len);
void tool_calls_free(struct tool_call *calls, int n);
/* A new call id ("call_" and 24 letters and digits; Mistral's 9), malloc'd. */
char *tool_call_new_id(enum chat_family f);

/* Where in text a call may begin (the family's marker, or a tail that
 * could grow into one); len when nowhere.  Streaming holds text from
 * there until the output is complete. */
size_t tools_hold_from(enum chat_family f, const char *text, size_t len);

/* Whether the family has a tool-call format this server renders. */
int chat_family_has_tools(enum chat_family f);

#endif
