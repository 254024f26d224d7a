/*
 * libFuzzer harness for the chat-template renderer (chat_template.c): any
 * conversation must render or be refused with a reason, never crash.
 * The first byte picks the family; the rest is split at NUL bytes into
 * messages whose first byte picks the role.  Template detection reads
 * the whole input as a template's text too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_template.h"
#include "server/strbuf.h"

#define MAX_MESSAGES 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct chat_message m[MAX_MESSAGES];
	struct strbuf out;
	char err[256];
	int n = 0;

	if (size < 1)
		return 0;
	char *text = malloc(size + 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	(void)chat_family_detect(text);
	enum chat_family fam = (enum chat_family)(data[0] % (CHAT_DEEPSEEK3 + 1));
	/* a message: a role byte, then its text up to a NUL (text[size] is one) */
	memset(m, 0, sizeof(m));
	for (size_t i = 1; i < size && n < MAX_MESSAGES; n++) {
		m[n].role = (enum chat_role)(data[i] % 3);
		m[n].content = text + i + 1;
		i += 1 + strlen(m[n].content) + 1;
	}
	strbuf_init(&out);
	(void)chat_render(fam, m, n, &out, err, sizeof(err));
	strbuf_free(&out);
	/* with tools: role bytes 3 mod 4 are tool results, and an assistant
	 * message's text is also the arguments of a call */
	static const char *const fns[] = { "{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}" };
	struct chat_tool_call calls[MAX_MESSAGES];
	struct chat_tools tools = { fns, data[0] & 1 };
	for (int k = 0, i = 1; k < n; k++) {
		m[k].role = (enum chat_role)(data[i] % 4);
		calls[k] = (struct chat_tool_call){ "id", "f", m[k].content };
		m[k].calls = m[k].role == ROLE_ASSISTANT && (data[i] & 4) ? &calls[k] : NULL;
		m[k].n_calls = m[k].calls != NULL;
		m[k].tool_call_id = m[k].role == ROLE_TOOL ? "id" : NULL;
		i += 1 + (int)strlen(m[k].content) + 1;
	}
	strbuf_init(&out);
	(void)chat_render_tools(fam, m, n, &tools, &out, err, sizeof(err));
	strbuf_free(&out);
	free(text);
	return 0;
}
