/*
 * The JSON-mode recogniser: complete objects, proper prefixes, and texts
 * that can never become a JSON object.
 */
#include <math.h>

#include "testlib.h"
#include "privai/gguf.h"
#include "server/json_constraint.h"

/* The mask on a real vocabulary: every token of an object's text stays
 * allowed while it is written, end-of-generation is masked until the
 * object closes, and after the closing brace it is all that is left, so
 * a reply in JSON mode stops exactly there whatever the model prefers. */
static void
test_mask(void)
{
	const char *dir = fixtures_dir(), *text = "{\"cat\": [1, true, \"purr\"]}";
	char path[1024], err[PRIVAI_ERR_LEN];
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	int32_t *ids = NULL;
	int n = 0;

	if (dir == NULL)
		return;
	snprintf(path, sizeof(path), "%s/models/tiny-llama-spm-q8_0.gguf", dir);
	if (gguf_open(path, &f, err) < 0 || tokenizer_load(f, &t, err) < 0 ||
	    tokenizer_encode(t, text, strlen(text), 0, 0, &ids, &n, err) < 0) {
		CHECK(0, "tokenizer: %s", err);
		goto out;
	}
	struct json_vocab *v = json_vocab_new(t);
	struct token_constraint *c = v != NULL ? json_constraint_new(v) : NULL;
	int V = tokenizer_n_vocab(t), eos = tokenizer_eos(t), refused = 0, eos_early = 0;
	float *logits = malloc((size_t)V * sizeof(float));
	CHECK(c != NULL && logits != NULL, "constraint built");
	if (c == NULL || logits == NULL)
		goto free_all;
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < V; k++)
			logits[k] = 0.0f;
		c->mask(c->state, logits, V);
		refused += logits[ids[i]] == -INFINITY;
		eos_early += logits[eos] != -INFINITY;
		CHECK(!c->done(c->state), "not done before token %d", i);
		c->accept(c->state, ids[i]);
	}
	CHECK(refused == 0 && eos_early == 0, "%d tokens of %s: %d refused, end allowed %d times before the end", n,
	      text, refused, eos_early);
	CHECK(c->done(c->state), "done after the closing brace");
	for (int k = 0; k < V; k++)
		logits[k] = 0.0f;
	c->mask(c->state, logits, V);
	int left = 0;
	for (int k = 0; k < V; k++)
		left += logits[k] != -INFINITY && !tokenizer_is_eog(t, k);
	CHECK(logits[eos] == 0.0f && left == 0, "after the object only end-of-generation is allowed (%d others)", left);
free_all:
	free(logits);
	if (c != NULL)
		c->release(c);
	json_vocab_free(v);
out:
	free(ids);
	tokenizer_free(t);
	gguf_close(f);
}

int
main(void)
{
	static const char *complete[] = {
		"{}",
		"{\"a\":1}",
		" {\"a\": [1, 2.5, -3e+2, true, false, null, {}]}",
		"{\"k\": \"caf\xc3\xa9 \\u00e9 \\n \\\"q\\\"\"}",
		"{\"a\":{\"b\":{\"c\":[[],[0]]}}} ",
		"{\"x\": -0.0E-1}",
	};
	static const char *prefix[] = {
		"",
		"  ",
		"{",
		"{\"a",
		"{\"a\"",
		"{\"a\":",
		"{\"a\": [1,",
		"{\"a\": tr",
		"{\"a\": 12",
		"{\"a\": \"\\u00",
		"{\"a\": 1.",
		"{\"a\": 1e",
		"{\"a\": \"\xc3",
	};
	static const char *never[] = {
		"[1]",
		"\"s\"",
		"x",
		"{a:1}",
		"{\"a\" 1}",
		"{\"a\":1,}",
		"{\"a\":01}",
		"{\"a\":1]",
		"{}}",
		"{\"a\":tru3}",
		"{\"a\":\"\x01\"}",
		"{\"a\":\"\\x\"}",
		"{\"a\": 1.e5}",
		"{\"a\":\"\xff\"}",
		"{\"a\":1}     x",
		"{\"a\":       1}",
	};

	for (size_t i = 0; i < sizeof(complete) / sizeof(complete[0]); i++)
		CHECK(json_prefix_check(complete[i], strlen(complete[i])) == 1, "complete: %s", complete[i]);
	for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
		CHECK(json_prefix_check(prefix[i], strlen(prefix[i])) == 0, "prefix: %s", prefix[i]);
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		CHECK(json_prefix_check(never[i], strlen(never[i])) == -1, "never: %s", never[i]);
	/* nesting beyond the depth limit is refused rather than overflowing */
	char deep[200];
	deep[0] = '{';
	memcpy(deep + 1, "\"a\":", 4);
	for (int i = 5; i < 199; i++)
		deep[i] = '[';
	CHECK(json_prefix_check(deep, 199) == -1, "nesting is bounded");
	test_mask();
	return test_summary();
}
