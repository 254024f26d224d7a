/*
 * Structured outputs: the schema compiler refuses by name what it would
 * not enforce, the recogniser tells complete values, prefixes and texts
 * that can never be valid apart, and the token mask on a real vocabulary
 * lets a valid value through token by token and ends it there.
 */
#include <math.h>

#include "testlib.h"
#include "privai/gguf.h"
#include "server/json_schema.h"

static struct json_schema *
compile_text(const char *text, char *err, size_t errlen)
{
	cJSON *j = cJSON_Parse(text);
	struct json_schema *s = NULL;

	if (j == NULL) {
		snprintf(err, errlen, "test schema is not JSON");
		return NULL;
	}
	if (json_schema_compile(j, &s, err, errlen) < 0)
		s = NULL;
	cJSON_Delete(j);
	return s;
}

struct case_ {
	const char *text;
	int want; /* 1 complete, 0 prefix, -1 never */
};

static void
check_cases(const char *schema, const struct case_ *cases, int n)
{
	char err[400];
	struct json_schema *s = compile_text(schema, err, sizeof(err));

	CHECK(s != NULL, "compiles: %s (%s)", schema, s == NULL ? err : "");
	if (s == NULL)
		return;
	for (int i = 0; i < n; i++) {
		int got = json_schema_check(s, cases[i].text, strlen(cases[i].text));
		CHECK(got == cases[i].want, "%s: '%s' -> %d, want %d", schema, cases[i].text, got, cases[i].want);
	}
	json_schema_unref(s);
}

#define CASES(schema, ...)                                                                                             \
	do {                                                                                                           \
		static const struct case_ c_[] = { __VA_ARGS__ };                                                      \
		check_cases(schema, c_, (int)(sizeof(c_) / sizeof(c_[0])));                                            \
	} while (0)

static void
test_recognise(void)
{
	CASES("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
	      "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
	      { "{\"name\":\"Ann\",\"age\":31}", 1 }, { "{\"age\": 31, \"name\": \"Ann\"}", 1 },
	      { "{\"name\":\"Ann\"}", -1 },                              /* age is required */
	      { "{\"name\":\"Ann\",\"name\":\"B\"", -1 },                /* a key twice */
	      { "{\"nam", 0 }, { "{\"nom", -1 }, { "{\"age\":3.5", -1 }, /* integer */
	      { "{\"age\":-", 0 }, { "{\"age\":1e3", -1 }, { "{\"name\":\"Ann\",\"age\":31,", -1 }, /* nothing left */
	      { "{\"name\":\"Ann\",\"age\":31} ", -1 }, { "", 0 }, { "[", -1 });
	CASES("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",1,12]},\"minItems\":1,\"maxItems\":2}",
	      { "[\"red\"]", 1 }, { "[1,12]", 1 }, { "[12, \"green\"]", 1 }, { "[]", -1 }, { "[1,1,1]", -1 },
	      { "[\"gre", 0 }, { "[\"blue\"]", -1 }, { "[123]", -1 }, { "[1", 0 });
	CASES("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"null\"},"
	      "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"boolean\"}}}]}",
	      { "\"abc\"", 1 }, { "\"abcd\"", -1 }, { "null", 1 }, { "nul", 0 }, { "{\"x\":true}", 1 }, { "{}", 1 },
	      { "{\"y\":1}", -1 }, { "true", -1 });
	/* an integer literal beyond long long: once cast to find out (undefined
	 * behaviour, which the sanitizer build stops on), now compared with its
	 * floor; 2.5 is no integer, so it is left out of the literals */
	CASES("{\"type\":\"integer\",\"enum\":[2.5,1e300,3]}", { "3", 1 }, { "2.5", -1 }, { "1e+300", 1 }, { "4", -1 });
	CASES("{\"type\":[\"number\",\"null\"]}", { "-12.5e-3", 1 }, { "null", 1 }, { "-", 0 }, { "\"1\"", -1 },
	      { "01", -1 });
	CASES("{\"const\":{\"a\":[1,2]}}", { "{\"a\":[1,2]}", 1 }, { "{\"a\":[1,3]}", -1 });
	/* a recursive schema through $defs */
	CASES("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
	      "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
	      "\"required\":[\"v\"]}}}",
	      { "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", 1 }, { "{\"v\":1,\"kids\":[{}]}", -1 });
	CASES("{\"type\":\"string\",\"pattern\":\"^[a-z]{2,4}-[0-9]+$\"}", { "\"ab-12\"", 1 }, { "\"ab-\"", -1 },
	      { "\"ab-", 0 }, { "\"a1", -1 }, { "\"abcde", -1 }, { "\"ab\\u0041\"", -1 },
	      { "\"ab\xe2", -1 }); /* a cut character can never match [a-z] */
	CASES("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", { "\"\xc3\xa9\xc3\xa9\"", 1 }, /* characters */
	      { "\"a\"", -1 }, { "\"\\n\\t\\\"\"", 1 }, { "\"abcd", -1 });
	CASES("{}", { "[1,{\"a\":\"b\"},null]", 1 }, { "\"x\"", 1 }, { "{\"a\" :1}", 1 }, { "{a:1}", -1 });
	CASES("{\"type\":\"object\"}", { "{\"any\":{\"thing\":[true]}}", 1 }, { "[]", -1 });
}

static void
test_refused(void)
{
	static const struct {
		const char *schema, *says;
	} refused[] = {
		{ "{\"type\":\"integer\",\"minimum\":0}", "#: minimum is not supported" },
		{ "{\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"date\"}}}",
		  "#/properties/a: format is not supported" },
		{ "{\"oneOf\":[{\"type\":\"string\"}]}", "#: oneOf is not supported" },
		{ "{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "not in properties" },
		{ "{\"$ref\":\"#/components/x\"}", "$ref" },
		{ "{\"type\":\"strin\"}", "not a JSON Schema type" },
		{ "{\"enum\":[]}", "non-empty" },
		{ "{\"type\":\"string\",\"enum\":[1,2]}", "no value" },
		{ "{\"type\":\"string\",\"pattern\":\"(\"}", "pattern" },
		{ "{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems" },
		{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties" },
		{ "false", "accepts nothing" },
	};
	char err[400];

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct json_schema *s = compile_text(refused[i].schema, err, sizeof(err));
		CHECK(s == NULL && strstr(err, refused[i].says) != NULL, "refused %s: '%s' names '%s'",
		      refused[i].schema, s == NULL ? err : "(compiled)", refused[i].says);
		json_schema_unref(s);
	}
}

/* Token by token through a real vocabulary: every token of a valid text
 * stays allowed, the end only after it, and then nothing else. */
static void
test_mask(void)
{
	const char *dir = fixtures_dir(), *text = "{\"city\": \"Oslo\", \"temps\": [3, -1.5], \"unit\": \"C\"}";
	const char *schema = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
			     "\"temps\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}},"
			     "\"unit\":{\"enum\":[\"C\",\"F\"]}},\"required\":[\"city\",\"unit\"]}";
	char path[1024], err[PRIVAI_ERR_LEN];
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	struct json_vocab *v = NULL;
	struct token_constraint *c = NULL;
	struct json_schema *s = NULL;
	float *logits = NULL;
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
	s = compile_text(schema, err, sizeof(err));
	v = json_vocab_new(t);
	c = v != NULL && s != NULL ? json_schema_constraint_new(v, s, NULL, NULL) : NULL;
	int V = tokenizer_n_vocab(t), eos = tokenizer_eos(t), refused = 0, eos_early = 0;
	logits = malloc((size_t)V * sizeof(float));
	CHECK(c != NULL && logits != NULL, "constraint built");
	if (c == NULL || logits == NULL)
		goto out;
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < V; k++)
			logits[k] = 0.0f;
		c->mask(c->state, logits, V);
		refused += logits[ids[i]] == -INFINITY;
		eos_early += logits[eos] != -INFINITY;
		c->accept(c->state, ids[i]);
	}
	CHECK(refused == 0 && eos_early == 0, "%d tokens: %d refused, end allowed %d times early", n, refused,
	      eos_early);
	CHECK(c->done(c->state), "done after the closing brace");
	for (int k = 0; k < V; k++)
		logits[k] = 0.0f;
	c->mask(c->state, logits, V);
	int left = 0;
	for (int k = 0; k < V; k++)
		left += logits[k] != -INFINITY && !tokenizer_is_eog(t, k);
	CHECK(logits[eos] == 0.0f && left == 0, "after the value only the end is allowed (%d others)", left);
	/* with a prefix and a suffix around it, as a forced tool call */
	c->release(c);
	c = json_schema_constraint_new(v, s, "<call>", "</call>");
	int wrong = 0;
	const char *around = "<call>{\"city\":\"X\",\"unit\":\"F\"}</call>";
	free(ids);
	ids = NULL;
	if (c == NULL || tokenizer_encode(t, around, strlen(around), 0, 0, &ids, &n, err) < 0) {
		CHECK(0, "prefix/suffix constraint: %s", err);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < V; k++)
			logits[k] = 0.0f;
		c->mask(c->state, logits, V);
		wrong += logits[ids[i]] == -INFINITY || (i < n - 1 && c->done(c->state));
		c->accept(c->state, ids[i]);
	}
	CHECK(wrong == 0 && c->done(c->state), "prefix, value and suffix token by token (%d wrong)", wrong);
out:
	if (c != NULL)
		c->release(c);
	json_schema_unref(s);
	free(logits);
	json_vocab_free(v);
	free(ids);
	tokenizer_free(t);
	gguf_close(f);
}

int
main(void)
{
	test_recognise();
	test_refused();
	test_mask();
	return test_summary();
}
