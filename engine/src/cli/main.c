/*
 * privai-engine: the command-line face of the inference engine.  Each
 * subcommand lives in its own cmd_*.c file.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int
cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "privai-engine %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

int
cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, int *ret)
{
	char *end;
	long v;

	if (s == NULL)
		return cli_error(cmd, "%s needs a value", opt);
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return cli_error(cmd, "%s must be an integer from %ld to %ld, got '%s'", opt, lo, hi, s);
	*ret = (int)v;
	return 0;
}

int
cli_parse_float(const char *cmd, const char *opt, const char *s, float *ret)
{
	char *end;
	float v;

	if (s == NULL)
		return cli_error(cmd, "%s needs a value", opt);
	errno = 0;
	v = strtof(s, &end);
	if (errno != 0 || end == s || *end != '\0' || v != v)
		return cli_error(cmd, "%s must be a number, got '%s'", opt, s);
	*ret = v;
	return 0;
}

int
cli_parse_ids(const char *cmd, const char *s, int32_t **ret_ids, int *ret_n)
{
	size_t cap = 1;
	const char *p;
	int n = 0;

	for (p = s; *p; p++)
		cap += *p == ',';
	int32_t *ids = malloc(cap * sizeof(int32_t));
	if (ids == NULL)
		return cli_error(cmd, "out of memory");
	for (p = s; *p;) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (errno != 0 || end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
			free(ids);
			return cli_error(cmd, "--prompt-ids must be comma-separated token ids, bad at '%.20s'", p);
		}
		ids[n++] = (int32_t)v;
		p = *end == ',' ? end + 1 : end;
	}
	if (n == 0) {
		free(ids);
		return cli_error(cmd, "--prompt-ids is empty");
	}
	*ret_ids = ids;
	*ret_n = n;
	return 0;
}

static void
usage(FILE *fp)
{
	fputs("usage: privai-engine COMMAND [options]\n"
	      "\n"
	      "commands:\n"
	      "  run       -m MODEL -p TEXT [-n N] [-i] [sampling flags]  generate text\n"
	      "  eval      -m MODEL --prompt-ids 1,2,3 --dump-logits FILE  write float32 logits\n"
	      "  tokenize  -m MODEL [--no-special] TEXT                   print token ids\n"
	      "  info      -m MODEL                                       architecture, sizes, types\n"
	      "  bench     -m MODEL [-p 128] [-n 32] [-t THREADS] [--json] speed\n"
	      "  quantize  IN.gguf OUT.gguf TYPE                          F32/F16 -> Q8_0/Q4_0/Q4_K/Q6_K\n"
	      "  synth     -o OUT.gguf [shape options] | --demo            synthetic model\n"
	      "  lora      synth|merge -m MODEL ...                        LoRA adapters: a random one, or merged\n"
	      "  serve     -m MODEL [--host --port --api-key-file ...]    OpenAI-compatible server\n"
	      "  hash-key                                                 hash an API key read from stdin\n"
	      "  features  [--json]                                       backends this build has\n"
	      "\n"
	      "Run 'privai-engine COMMAND --help' for a command's options.\n",
	      fp);
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {
		{ "run", cmd_run },           { "eval", cmd_eval },         { "tokenize", cmd_tokenize },
		{ "info", cmd_info },         { "bench", cmd_bench },       { "quantize", cmd_quantize },
		{ "synth", cmd_synth },       { "lora", cmd_lora },         { "serve", cmd_serve },
		{ "hash-key", cmd_hash_key }, { "features", cmd_features },
	};

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	cli_argv = argv;
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "privai-engine: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}

int
cli_engine_open(const char *cmd, const char *path, const struct engine_ctx_params *cp, struct cli_engine *e)
{
	char err[PRIVAI_ERR_LEN];

	memset(e, 0, sizeof(*e));
	if (engine_model_load(path, &e->model, err) < 0)
		return cli_error(cmd, "%s: %s", path, err);
	if (tokenizer_load(e->model->file, &e->tok, err) < 0) {
		cli_engine_close(e);
		return cli_error(cmd, "%s: %s", path, err);
	}
	if (tokenizer_n_vocab(e->tok) != e->model->hp.n_vocab) {
		cli_engine_close(e);
		return cli_error(cmd, "%s: tokenizer has %d tokens but the embedding has %d rows", path,
				 tokenizer_n_vocab(e->tok), e->model->hp.n_vocab);
	}
	if (cp != NULL && engine_ctx_new(e->model, cp, &e->ctx, err) < 0) {
		cli_engine_close(e);
		return cli_error(cmd, "%s", err);
	}
	return 0;
}

void
cli_engine_close(struct cli_engine *e)
{
	engine_ctx_free(e->ctx);
	tokenizer_free(e->tok);
	engine_model_free(e->model);
	memset(e, 0, sizeof(*e));
}
