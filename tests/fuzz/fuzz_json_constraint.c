/*
 * libFuzzer harness for JSON mode's automaton (json_constraint.c): the
 * byte-level recogniser on any text, and the token-level constraint fed
 * the token ids the input spells (two bytes each), masking before each.
 * The tokenizer comes from PRIVAI_FUZZ_MODEL.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "privai/gguf.h"
#include "privai/tokenizer.h"
#include "server/json_constraint.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gguf_file *f; /* kept: the tokenizer may point into it */
static struct tokenizer *tok;
static struct json_vocab *vocab;
static float *logits;
static int n_vocab;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *path = getenv("PRIVAI_FUZZ_MODEL");
	char err[PRIVAI_ERR_LEN];

	if (path == NULL || gguf_open(path, &f, err) < 0 || tokenizer_load(f, &tok, err) < 0 ||
	    (vocab = json_vocab_new(tok)) == NULL) {
		fprintf(stderr, "fuzz_json_constraint: PRIVAI_FUZZ_MODEL must name a GGUF with a tokenizer\n");
		exit(1);
	}
	n_vocab = tokenizer_n_vocab(tok);
	if ((logits = calloc((size_t)n_vocab, sizeof(float))) == NULL)
		exit(1);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	(void)json_prefix_check((const char *)data, size);
	struct token_constraint *c = json_constraint_new(vocab);
	if (c == NULL)
		return 0;
	/* as the sampler does: only a token the mask left may be accepted;
	 * the input's id, or the next allowed one after it */
	for (size_t i = 0; i + 1 < size && !c->done(c->state); i += 2) {
		int id = (data[i] << 8 | data[i + 1]) % n_vocab, k = 0;
		for (int v = 0; v < n_vocab; v++)
			logits[v] = 0;
		c->mask(c->state, logits, n_vocab);
		while (k < n_vocab && isinf(logits[(id + k) % n_vocab]))
			k++;
		if (k == n_vocab)
			break; /* nothing may follow: the recogniser ended it */
		c->accept(c->state, (int32_t)((id + k) % n_vocab));
	}
	c->release(c);
	return 0;
}
