/*
 * Chat templates for the common model families, recognised from the text
 * of the model's tokenizer.chat_template (a Jinja program we do not run)
 * or named with --chat-template.  Rendering produces the prompt text with
 * the family's special tokens spelled out, to be tokenized with special
 * tokens parsed.
 */
#ifndef PRIVAI_CHAT_TEMPLATE_H
#define PRIVAI_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>

#include "server/strbuf.h"

enum chat_family {
	CHAT_NONE,
	CHAT_LLAMA2,
	CHAT_LLAMA3,
	CHAT_MISTRAL,
	CHAT_CHATML,
	CHAT_PHI3,
	CHAT_GEMMA,
	CHAT_DEEPSEEK,
	CHAT_DEEPSEEK3,
};

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

struct chat_tool_call {
	const char *id;
	const char *name;
	const char *arguments; /* JSON text */
};

struct chat_message {
	enum chat_role role;
	const char *content;                /* "" when none */
	const struct chat_tool_call *calls; /* an assistant's tool calls */
	int n_calls;
	const char *tool_call_id; /* ROLE_TOOL: the call this answers */
};

/* The tools offered to the model: each function object as JSON text. */
struct chat_tools {
	const char *const *functions;
	int n;
};

/* The family named `name` ("llama3", "chatml", ...); CHAT_NONE if unknown. */
enum chat_family chat_family_by_name(const char *name);
/* The family a template's text belongs to; CHAT_NONE if unrecognised. */
enum chat_family chat_family_detect(const char *template_text);
const char *chat_family_name(enum chat_family f);
/* Every name chat_family_by_name accepts, comma separated (for errors). */
const char *chat_family_names(void);

/* Render messages and the opening of the assistant's turn.  Returns 0, or
 * -1 with err set (a conversation the family cannot express). */
int chat_render(enum chat_family f, const struct chat_message *m, int n, struct strbuf *out, char *err, size_t errlen);
/* The same with tools offered (t->n may be 0), tool calls and tool
 * results (chat_tools.c); -1 with err for a family without a tool
 * format. */
int chat_render_tools(enum chat_family f, const struct chat_message *m, int n, const struct chat_tools *t,
		      struct strbuf *out, char *err, size_t errlen);

#endif
