/*
 * Conversations with tools, for the families that have a tool format:
 * the tool definitions, assistant turns that call tools, and the tool
 * results, each written as that family's published template writes them
 * (Llama 3.1, Qwen2.5 / Hermes ChatML, Mistral v0.3, DeepSeek V3).
 * JSON inside prompts is written as Python's json.dumps writes it
 * (", " and ": "), which is what the templates' tojson produces.
 */
#include <stdio.h>
#include <string.h>

#include "server/chat_template.h"

#define DS_BOS                                                                                                         \
	"<\xef\xbd\x9c"                                                                                                \
	"begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DS_EOS                                                                                                         \
	"<\xef\xbd\x9c"                                                                                                \
	"end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT                                                                                                   \
	"<\xef\xbd\x9c"                                                                                                \
	"Assistant\xef\xbd\x9c>"
#define DS_TOOL(x) "<\xef\xbd\x9ctool\xe2\x96\x81" x "\xef\xbd\x9c>"

/* json.dumps(v) with its default separators. */
static void
dump_py(struct strbuf *o, const cJSON *v)
{
	const cJSON *c;
	int first = 1;

	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		int obj = cJSON_IsObject(v);
		strbuf_puts(o, obj ? "{" : "[");
		cJSON_ArrayForEach (c, v) {
			strbuf_puts(o, first ? "" : ", ");
			first = 0;
			if (obj) {
				cJSON *k = cJSON_CreateString(c->string);
				char *ks = k != NULL ? cJSON_PrintUnformatted(k) : NULL;
				strbuf_puts(o, ks != NULL ? ks : "\"\"");
				strbuf_puts(o, ": ");
				cJSON_free(ks);
				cJSON_Delete(k);
			}
			dump_py(o, c);
		}
		strbuf_puts(o, obj ? "}" : "]");
		return;
	}
	char *s = cJSON_PrintUnformatted(v);
	strbuf_puts(o, s != NULL ? s : "null");
	cJSON_free(s);
}

/* A JSON text (a function definition, call arguments) re-spelled as
 * json.dumps would; text that is not JSON is written as it is. */
static void
put_json(struct strbuf *o, const char *text)
{
	cJSON *v = cJSON_Parse(text);

	if (v == NULL) {
		strbuf_puts(o, text);
		return;
	}
	dump_py(o, v);
	cJSON_Delete(v);
}

/* {"type": "function", "function": FN} */
static void
put_tool(struct strbuf *o, const char *fn)
{
	strbuf_puts(o, "{\"type\": \"function\", \"function\": ");
	put_json(o, fn);
	strbuf_puts(o, "}");
}

/* A JSON string literal. */
static void
put_string(struct strbuf *o, const char *s)
{
	cJSON *v = cJSON_CreateString(s != NULL ? s : "");
	char *t = v != NULL ? cJSON_PrintUnformatted(v) : NULL;

	strbuf_puts(o, t != NULL ? t : "\"\"");
	cJSON_free(t);
	cJSON_Delete(v);
}

/* {"name": NAME, ARGS_KEY: ARGUMENTS[, "id": ID]} */
static void
put_call(struct strbuf *o, const struct chat_tool_call *c, const char *args_key, int with_id)
{
	strbuf_puts(o, "{\"name\": ");
	put_string(o, c->name);
	strbuf_printf(o, ", \"%s\": ", args_key);
	put_json(o, c->arguments);
	if (with_id) {
		strbuf_puts(o, ", \"id\": ");
		put_string(o, c->id);
	}
	strbuf_puts(o, "}");
}

static int
first_user(const struct chat_message *m, int n)
{
	for (int i = 0; i < n; i++)
		if (m[i].role == ROLE_USER)
			return i;
	return -1;
}

static int
last_user(const struct chat_message *m, int n)
{
	for (int i = n - 1; i >= 0; i--)
		if (m[i].role == ROLE_USER)
			return i;
	return -1;
}

/* Llama 3.1: the tools go into the first user message. */
static int
render_llama3(const struct chat_message *m, int n, const struct chat_tools *t, struct strbuf *o, char *err, size_t el)
{
	int fu = first_user(m, n);

	if (t->n > 0 && fu < 0) {
		snprintf(err, el, "with tools, this template needs a user message");
		return -1;
	}
	strbuf_puts(o, "<|begin_of_text|>");
	for (int i = 0; i < n; i++) {
		const char *role = m[i].role == ROLE_SYSTEM ? "system"
				   : m[i].role == ROLE_USER ? "user"
				   : m[i].role == ROLE_TOOL ? "ipython"
							    : "assistant";
		strbuf_printf(o, "<|start_header_id|>%s<|end_header_id|>\n\n", role);
		if (i == fu && t->n > 0) {
			strbuf_puts(o, "Given the following functions, please respond with a JSON for a function call "
				       "with its proper arguments that best answers the given prompt.\n\n"
				       "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
				       "argument name and its value}.Do not use variables.\n\n");
			for (int k = 0; k < t->n; k++) {
				put_tool(o, t->functions[k]);
				strbuf_puts(o, "\n\n");
			}
		}
		if (m[i].n_calls > 0) {
			for (int k = 0; k < m[i].n_calls; k++) {
				strbuf_puts(o, k > 0 ? "; " : "");
				put_call(o, &m[i].calls[k], "parameters", 0);
			}
		} else {
			strbuf_puts(o, m[i].content);
		}
		strbuf_puts(o, "<|eot_id|>");
	}
	strbuf_puts(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return 0;
}

/* Qwen2.5 / Hermes: the tools in the system message, calls in
 * <tool_call> tags, results in <tool_response> tags of a user turn. */
static int
render_chatml(const struct chat_message *m, int n, const struct chat_tools *t, struct strbuf *o, char *err, size_t el)
{
	int i = 0;

	if (t->n > 0) {
		strbuf_puts(o, "<|im_start|>system\n");
		if (n > 0 && m[0].role == ROLE_SYSTEM) {
			strbuf_printf(o, "%s\n\n", m[0].content);
			i = 1;
		}
		strbuf_puts(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
			       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
		for (int k = 0; k < t->n; k++) {
			strbuf_puts(o, "\n");
			put_tool(o, t->functions[k]);
		}
		strbuf_puts(o, "\n</tools>\n\nFor each function call, return a json object with function name and "
			       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
			       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
	}
	for (; i < n; i++) {
		if (m[i].role == ROLE_TOOL) {
			if (i == 0 || m[i - 1].role != ROLE_TOOL)
				strbuf_puts(o, "<|im_start|>user");
			strbuf_printf(o, "\n<tool_response>\n%s\n</tool_response>", m[i].content);
			if (i == n - 1 || m[i + 1].role != ROLE_TOOL)
				strbuf_puts(o, "<|im_end|>\n");
			continue;
		}
		const char *role = m[i].role == ROLE_SYSTEM ? "system" : m[i].role == ROLE_USER ? "user" : "assistant";
		if (m[i].n_calls == 0) {
			strbuf_printf(o, "<|im_start|>%s\n%s<|im_end|>\n", role, m[i].content);
			continue;
		}
		strbuf_puts(o, "<|im_start|>assistant");
		if (m[i].content[0] != '\0')
			strbuf_printf(o, "\n%s", m[i].content);
		for (int k = 0; k < m[i].n_calls; k++) {
			strbuf_puts(o, "\n<tool_call>\n");
			put_call(o, &m[i].calls[k], "arguments", 0);
			strbuf_puts(o, "\n</tool_call>");
		}
		strbuf_puts(o, "<|im_end|>\n");
	}
	strbuf_puts(o, "<|im_start|>assistant\n");
	(void)err;
	(void)el;
	return 0;
}

/* Mistral v0.3: the tools just before the last user message; the
 * system text opens that message, as its template does. */
static int
render_mistral(const struct chat_message *m, int n, const struct chat_tools *t, struct strbuf *o, char *err, size_t el)
{
	int lu = last_user(m, n);
	const char *sys = n > 0 && m[0].role == ROLE_SYSTEM ? m[0].content : NULL;

	if (t->n > 0 && lu < 0) {
		snprintf(err, el, "with tools, this template needs a user message");
		return -1;
	}
	strbuf_puts(o, "<s>");
	for (int i = sys != NULL; i < n; i++) {
		switch (m[i].role) {
		case ROLE_SYSTEM:
			snprintf(err, el, "a system message must come first for this template");
			return -1;
		case ROLE_USER:
			if (i == lu && t->n > 0) {
				strbuf_puts(o, "[AVAILABLE_TOOLS] [");
				for (int k = 0; k < t->n; k++) {
					strbuf_puts(o, k > 0 ? ", " : "");
					put_tool(o, t->functions[k]);
				}
				strbuf_puts(o, "][/AVAILABLE_TOOLS]");
			}
			strbuf_puts(o, "[INST] ");
			if (i == lu && sys != NULL)
				strbuf_printf(o, "%s\n\n", sys);
			strbuf_printf(o, "%s[/INST]", m[i].content);
			break;
		case ROLE_TOOL:
			strbuf_puts(o, "[TOOL_RESULTS] {\"content\": ");
			put_json(o, m[i].content);
			strbuf_puts(o, ", \"call_id\": ");
			put_string(o, m[i].tool_call_id);
			strbuf_puts(o, "}[/TOOL_RESULTS]");
			break;
		default:
			if (m[i].n_calls == 0) {
				strbuf_printf(o, " %s</s>", m[i].content);
				break;
			}
			strbuf_puts(o, "[TOOL_CALLS] [");
			for (int k = 0; k < m[i].n_calls; k++) {
				strbuf_puts(o, k > 0 ? ", " : "");
				put_call(o, &m[i].calls[k], "arguments", 1);
			}
			strbuf_puts(o, "]</s>");
		}
	}
	return 0;
}

/* DeepSeek V3: its template has no place for definitions, so they go to
 * the end of the system prompt, in the call syntax the model writes. */
static int
render_deepseek3(const struct chat_message *m, int n, const struct chat_tools *t, struct strbuf *o, char *err,
		 size_t el)
{
	int i = 0;

	strbuf_puts(o, DS_BOS);
	if (n > 0 && m[0].role == ROLE_SYSTEM)
		strbuf_puts(o, m[i++].content);
	if (t->n > 0) {
		strbuf_puts(o, i > 0 ? "\n\n" : "");
		strbuf_puts(o, "## Tools\n\nYou have access to the following functions:\n");
		for (int k = 0; k < t->n; k++) {
			strbuf_puts(o, "\n");
			put_tool(o, t->functions[k]);
		}
		strbuf_puts(o, "\n\nTo call functions, write: " DS_TOOL("calls\xe2\x96\x81"
									"begin")
				       DS_TOOL("call\xe2\x96\x81"
					       "begin") "function" DS_TOOL("sep") "NAME\n```json\nARGUMENTS\n``"
										  "`" DS_TOOL("call\xe2\x96\x81"
											      "end")
											  DS_TOOL("calls\xe2\x96\x81"
												  "end"));
	}
	for (; i < n; i++) {
		switch (m[i].role) {
		case ROLE_SYSTEM:
			snprintf(err, el, "a system message must come first for this template");
			return -1;
		case ROLE_USER:
			strbuf_printf(o, DS_USER "%s", m[i].content);
			break;
		case ROLE_TOOL:
			if (i == 0 || m[i - 1].role != ROLE_TOOL)
				strbuf_puts(o, DS_TOOL("outputs\xe2\x96\x81"
						       "begin"));
			strbuf_printf(o,
				      DS_TOOL("output\xe2\x96\x81"
					      "begin") "%s" DS_TOOL("output\xe2\x96\x81"
								    "end"),
				      m[i].content);
			if (i == n - 1 || m[i + 1].role != ROLE_TOOL)
				strbuf_puts(o, DS_TOOL("outputs\xe2\x96\x81"
						       "end"));
			break;
		default:
			strbuf_printf(o, DS_ASSISTANT "%s", m[i].content);
			if (m[i].n_calls > 0) {
				strbuf_puts(o, DS_TOOL("calls\xe2\x96\x81"
						       "begin"));
				for (int k = 0; k < m[i].n_calls; k++) {
					strbuf_printf(o,
						      DS_TOOL("call\xe2\x96\x81"
							      "begin") "function" DS_TOOL("sep") "%s\n```json\n",
						      m[i].calls[k].name);
					put_json(o, m[i].calls[k].arguments);
					strbuf_puts(o, "\n```" DS_TOOL("call\xe2\x96\x81"
								       "end"));
				}
				strbuf_puts(o, DS_TOOL("calls\xe2\x96\x81"
						       "end"));
			}
			strbuf_puts(o, DS_EOS);
		}
	}
	strbuf_puts(o, DS_ASSISTANT);
	return 0;
}

int
chat_render_tools(enum chat_family f, const struct chat_message *m, int n, const struct chat_tools *t,
		  struct strbuf *out, char *err, size_t errlen)
{
	if (n < 1) {
		snprintf(err, errlen, "messages must not be empty");
		return -1;
	}
	switch (f) {
	case CHAT_LLAMA3:
		return render_llama3(m, n, t, out, err, errlen);
	case CHAT_CHATML:
		return render_chatml(m, n, t, out, err, errlen);
	case CHAT_MISTRAL:
		return render_mistral(m, n, t, out, err, errlen);
	case CHAT_DEEPSEEK3:
		return render_deepseek3(m, n, t, out, err, errlen);
	default:
		snprintf(err, errlen,
			 "the %s chat template has no tool-call format here (tools work with llama3, chatml/qwen, "
			 "mistral and deepseek3)",
			 chat_family_name(f));
		return -1;
	}
}
