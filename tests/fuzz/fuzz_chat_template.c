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
	for (size_t i = 1; i < size && n < MAX_MESSAGES; n++) {
		m[n].role = (enum chat_role)(data[i] % 3);
		m[n].content = text + i + 1;
		i += 1 + strlen(m[n].content) + 1;
	}
	strbuf_init(&out);
	(void)chat_render(fam, m, n, &out, err, sizeof(err));
	strbuf_free(&out);
	free(text);
	return 0;
}
