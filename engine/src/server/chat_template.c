/*
 * Chat prompt formats of the common model families.  Each renderer writes
 * the turns exactly as that family's published template does, ending with
 * the header of the assistant's reply.
 */
#include <stdio.h>
#include <string.h>

#include "privai/chat.h"
#include "server/chat_template.h"

/* every name and its family, once: the tables below are made from it */
#define CHAT_TEMPLATES(X)                                                                                              \
	X("llama2", CHAT_LLAMA2)                                                                                       \
	X("llama3", CHAT_LLAMA3)                                                                                       \
	X("mistral", CHAT_MISTRAL)                                                                                     \
	X("chatml", CHAT_CHATML)                                                                                       \
	X("qwen", CHAT_CHATML)                                                                                         \
	X("phi3", CHAT_PHI3)                                                                                           \
	X("gemma", CHAT_GEMMA)                                                                                         \
	X("deepseek", CHAT_DEEPSEEK)                                                                                   \
	X("deepseek3", CHAT_DEEPSEEK3)

#define AS_ENTRY(n, fam) { n, fam },
#define AS_NAME(n, fam) n,

static const struct {
	const char *name;
	enum chat_family f;
} names[] = { CHAT_TEMPLATES(AS_ENTRY) };

static const char *const name_list[] = { CHAT_TEMPLATES(AS_NAME) NULL };

const char *const *
chat_template_names(void)
{
	return name_list;
}

int
chat_template_known(const char *name)
{
	return name != NULL && chat_family_by_name(name) != CHAT_NONE;
}

enum chat_family
chat_family_by_name(const char *name)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i].name) == 0)
			return names[i].f;
	return CHAT_NONE;
}

const char *
chat_family_name(enum chat_family f)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].f == f)
			return names[i].name;
	return "none";
}

const char *
chat_family_names(void)
{
	return "llama2, llama3, mistral, chatml (qwen), phi3, gemma, deepseek, deepseek3";
}

enum chat_family
chat_family_detect(const char *t)
{
	if (t == NULL)
		return CHAT_NONE;
	/* most specific markers first: several families share [INST] */
	if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>"))
		return CHAT_LLAMA3;
	if (strstr(t, "<|im_start|>"))
		return CHAT_CHATML;
	if (strstr(t, "<start_of_turn>"))
		return CHAT_GEMMA;
	if (strstr(t, "<|user|>") && strstr(t, "<|end|>"))
		return CHAT_PHI3;
	if (strstr(t, "<\xef\xbd\x9c"
		      "User\xef\xbd\x9c>"))
		return CHAT_DEEPSEEK3;
	if (strstr(t, "[INST]") && strstr(t, "<<SYS>>"))
		return CHAT_LLAMA2;
	if (strstr(t, "[INST]"))
		return CHAT_MISTRAL;
	if (strstr(t, "'User: '") || strstr(t, "'\\n\\nAssistant: '") || strstr(t, "Assistant:"))
		return CHAT_DEEPSEEK;
	return CHAT_NONE;
}

/* Llama 2: the system prompt goes inside the first [INST] block. */
static int
render_llama2(const struct chat_message *m, int n, struct strbuf *o, int mistral, char *err, size_t el)
{
	const char *sys = NULL;
	int first = 1, expect_user = 1;

	for (int i = 0; i < n; i++) {
		if (m[i].role == ROLE_SYSTEM) {
			if (i != 0) {
				snprintf(err, el, "a system message must come first for this template");
				return -1;
			}
			sys = m[i].content;
			continue;
		}
		if ((m[i].role == ROLE_USER) != expect_user) {
			snprintf(err, el,
				 "this template needs user and assistant messages to alternate, starting with user");
			return -1;
		}
		if (m[i].role == ROLE_USER) {
			strbuf_puts(o, mistral && !first ? "[INST] " : "<s>[INST] ");
			if (first && sys != NULL)
				strbuf_printf(o, mistral ? "%s\n\n" : "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
			strbuf_printf(o, "%s [/INST]", m[i].content);
			first = 0;
		} else {
			strbuf_printf(o, " %s</s>", m[i].content);
		}
		expect_user = !expect_user;
	}
	if (expect_user) {
		snprintf(err, el, "the last message must be from the user for this template");
		return -1;
	}
	return 0;
}

static const char *
role_name(enum chat_role r, const char *assistant)
{
	return r == ROLE_SYSTEM ? "system" : r == ROLE_USER ? "user" : assistant;
}

static void
render_simple(enum chat_family f, const struct chat_message *m, int n, struct strbuf *o)
{
	switch (f) {
	case CHAT_LLAMA3:
		strbuf_puts(o, "<|begin_of_text|>");
		for (int i = 0; i < n; i++)
			strbuf_printf(o, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>",
				      role_name(m[i].role, "assistant"), m[i].content);
		strbuf_puts(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
		break;
	case CHAT_CHATML:
		for (int i = 0; i < n; i++)
			strbuf_printf(o, "<|im_start|>%s\n%s<|im_end|>\n", role_name(m[i].role, "assistant"),
				      m[i].content);
		strbuf_puts(o, "<|im_start|>assistant\n");
		break;
	case CHAT_PHI3:
		for (int i = 0; i < n; i++)
			strbuf_printf(o, "<|%s|>\n%s<|end|>\n", role_name(m[i].role, "assistant"), m[i].content);
		strbuf_puts(o, "<|assistant|>\n");
		break;
	case CHAT_DEEPSEEK3:
		strbuf_puts(o, "<\xef\xbd\x9c"
			       "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
		for (int i = 0; i < n; i++) {
			if (m[i].role == ROLE_SYSTEM)
				strbuf_puts(o, m[i].content);
			else if (m[i].role == ROLE_USER)
				strbuf_printf(o, "<\xef\xbd\x9cUser\xef\xbd\x9c>%s", m[i].content);
			else
				strbuf_printf(o,
					      "<\xef\xbd\x9c"
					      "Assistant\xef\xbd\x9c>%s<\xef\xbd\x9c"
					      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
					      m[i].content);
		}
		strbuf_puts(o, "<\xef\xbd\x9c"
			       "Assistant\xef\xbd\x9c>");
		break;
	case CHAT_DEEPSEEK:
		strbuf_puts(o, "<\xef\xbd\x9c"
			       "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
		for (int i = 0; i < n; i++) {
			if (m[i].role == ROLE_SYSTEM)
				strbuf_printf(o, "%s\n\n", m[i].content);
			else if (m[i].role == ROLE_USER)
				strbuf_printf(o, "User: %s\n\n", m[i].content);
			else
				strbuf_printf(o,
					      "Assistant: %s<\xef\xbd\x9c"
					      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
					      m[i].content);
		}
		strbuf_puts(o, "Assistant:");
		break;
	default:
		break;
	}
}

/* Gemma has no system role: the system text opens the first user turn. */
static void
render_gemma(const struct chat_message *m, int n, struct strbuf *o)
{
	const char *sys = NULL;

	strbuf_puts(o, "<bos>");
	for (int i = 0; i < n; i++) {
		if (m[i].role == ROLE_SYSTEM) {
			sys = m[i].content;
			continue;
		}
		strbuf_printf(o, "<start_of_turn>%s\n", m[i].role == ROLE_USER ? "user" : "model");
		if (sys != NULL && m[i].role == ROLE_USER) {
			strbuf_printf(o, "%s\n\n", sys);
			sys = NULL;
		}
		strbuf_printf(o, "%s<end_of_turn>\n", m[i].content);
	}
	strbuf_puts(o, "<start_of_turn>model\n");
}

int
chat_render(enum chat_family f, const struct chat_message *m, int n, struct strbuf *out, char *err, size_t errlen)
{
	if (n < 1) {
		snprintf(err, errlen, "messages must not be empty");
		return -1;
	}
	switch (f) {
	case CHAT_LLAMA2:
		return render_llama2(m, n, out, 0, err, errlen);
	case CHAT_MISTRAL:
		return render_llama2(m, n, out, 1, err, errlen);
	case CHAT_GEMMA:
		render_gemma(m, n, out);
		return 0;
	case CHAT_NONE:
		snprintf(err, errlen, "this model has no chat template; start the server with --chat-template (%s)",
			 chat_family_names());
		return -1;
	default:
		render_simple(f, m, n, out);
		return 0;
	}
}
