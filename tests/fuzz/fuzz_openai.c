/*
 * libFuzzer harness for the OpenAI request parser (openai_params.c): any
 * body must give parameters or a 400-style error, never a crash, an
 * out-of-bounds read or a leak.  The first byte picks chat or completions
 * and the chat family; the rest is the body.  The tokenizer comes from
 * the model PRIVAI_FUZZ_MODEL names (run.sh synthesizes one).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "privai/gguf.h"
#include "privai/tokenizer.h"
#include "server/openai.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gguf_file *f; /* kept: the tokenizer may point into it */
static struct tokenizer *tok;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *path = getenv("PRIVAI_FUZZ_MODEL");
	char err[PRIVAI_ERR_LEN];

	if (path == NULL || gguf_open(path, &f, err) < 0 || tokenizer_load(f, &tok, err) < 0) {
		fprintf(stderr, "fuzz_openai: PRIVAI_FUZZ_MODEL must name a GGUF with a tokenizer\n");
		exit(1);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gen_params g;

	if (size < 1)
		return 0;
	int chat = data[0] & 1;
	enum chat_family fam = (enum chat_family)((data[0] >> 1) % (CHAT_DEEPSEEK3 + 1));
	cJSON *j = cJSON_ParseWithLength((const char *)data + 1, size - 1);
	if (j == NULL)
		return 0;
	gen_params_init(&g, chat);
	gen_params_parse(&g, j, tok, fam, "privai");
	gen_params_free(&g);
	cJSON_Delete(j);
	return 0;
}
