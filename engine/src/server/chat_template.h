/*
 * Chat templates for the common model families, recognised from the text
 * of the model's tokenizer.chat_template (a Jinja program we do not run)
 * or named with --chat-template.  Rendering produces the prompt text with
 * the family's special tokens spelled out, to be tokenized with special
 * tokens parsed.
 */
#ifndef PRIVAI_CHAT_TEMPLATE_H
#define PRIVAI_CHAT_TEMPLATE_H

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

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

struct chat_message {
	enum chat_role role;
	const char *content;
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

#endif
