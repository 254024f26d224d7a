/*
 * Every tokenizer vector in the shared fixtures (vocab/NAME.gguf.inp/.out)
 * must come out token for token as the reference produced it, with special
 * handling off and no BOS.  StarCoder's vocabulary has fill-in-the-middle
 * tokens, found by their spelling; the others have none.
 */
#include "testlib.h"
#include "privai/gguf.h"
#include "privai/tokenizer.h"

static const char *vocabs[] = {
	"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon", "starcoder",
};

static void
check_vocab(const char *dir, const char *name)
{
	char path[1024], err[PRIVAI_ERR_LEN];
	struct gguf_file *f = NULL;
	struct tokenizer *t = NULL;
	size_t inp_len, out_len;
	static const char sep[] = "\n__ggml_vocab_test__\n";

	snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf", dir, name);
	if (gguf_open(path, &f, err) < 0 || tokenizer_load(f, &t, err) < 0) {
		CHECK(0, "%s: %s", name, err);
		gguf_close(f);
		return;
	}
	int32_t fim[3];
	int has_fim = tokenizer_fim(t, fim) == 0;
	if (strcmp(name, "starcoder") == 0)
		CHECK(has_fim && strcmp(tokenizer_token_text(t, fim[0]), "<fim_prefix>") == 0 &&
			      strcmp(tokenizer_token_text(t, fim[1]), "<fim_suffix>") == 0 &&
			      strcmp(tokenizer_token_text(t, fim[2]), "<fim_middle>") == 0,
		      "%s: its fill-in-the-middle tokens are found", name);
	else
		CHECK(!has_fim, "%s: no fill-in-the-middle tokens", name);
	snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf.inp", dir, name);
	char *inp = read_file(path, &inp_len);
	snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-%s.gguf.out", dir, name);
	char *out = read_file(path, &out_len);
	CHECK(inp != NULL && out != NULL, "%s: cannot read vectors", name);
	if (inp == NULL || out == NULL)
		goto done;
	char *p = inp, *line = out;
	int idx = 0, bad = 0;
	while (p != NULL && *line) {
		char *end = strstr(p, sep);
		size_t len = end ? (size_t)(end - p) : strlen(p);
		/* the last vector ends with the file's final newline */
		if (end == NULL && len > 0 && p[len - 1] == '\n')
			len--;
		char *eol = strchr(line, '\n');
		if (eol)
			*eol = '\0';
		int32_t *ids = NULL;
		int n = 0;
		int r = tokenizer_encode(t, p, len, 0, 0, &ids, &n, err);
		/* compare with the expected ids */
		char *q = line;
		int ok = r == 0, k = 0;
		while (ok) {
			while (*q == ' ')
				q++;
			if (*q == '\0')
				break;
			long v = strtol(q, &q, 10);
			ok = k < n && ids[k] == v;
			k++;
		}
		ok = ok && k == n;
		if (!ok) {
			bad++;
			fprintf(stderr, "%s vector %d (%.40s): expected [%s] got [", name, idx, p, line);
			for (int i = 0; i < n; i++)
				fprintf(stderr, i ? " %d" : "%d", ids[i]);
			fprintf(stderr, "]\n");
		}
		CHECK(ok, "%s vector %d differs", name, idx);
		free(ids);
		idx++;
		p = end ? end + strlen(sep) : NULL;
		line = eol ? eol + 1 : line + strlen(line);
	}
	CHECK(idx >= 40, "%s: only %d vectors read", name, idx);
	if (bad == 0)
		printf("%s: %d vectors identical\n", name, idx);
done:
	free(inp);
	free(out);
	tokenizer_free(t);
	gguf_close(f);
}

int
main(void)
{
	const char *dir = fixtures_dir();

	if (dir != NULL)
		for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++)
			check_vocab(dir, vocabs[i]);
	return test_summary();
}
