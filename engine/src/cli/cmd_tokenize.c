/*
 * privai-engine tokenize: print the token ids of a text, space separated on
 * one line.  --no-special treats control tokens in the text as plain text and
 * adds no BOS, which is how the reference vocab vectors were made.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "privai/tokenizer.h"

int
cmd_tokenize(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "no-special", no_argument, NULL, 'S' },
		{ "file", required_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model_path = NULL, *file = NULL;
	char err[PRIVAI_ERR_LEN], *text = NULL;
	int c, special = 1, rc = 1, n = 0;
	size_t len = 0;
	struct gguf_file *f = NULL;
	struct tokenizer *tok = NULL;
	int32_t *ids = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "m:f:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			model_path = optarg;
			break;
		case 'S':
			special = 0;
			break;
		case 'f':
			file = optarg;
			break;
		case 'h':
			puts("usage: privai-engine tokenize -m MODEL [--no-special] (TEXT | -f FILE)");
			return 0;
		default:
			return 2;
		}
	}
	if (model_path == NULL || (file == NULL && optind != argc - 1))
		return cli_error("tokenize", "needs -m MODEL and one TEXT argument (or -f FILE)");
	if (file != NULL) {
		FILE *fp = fopen(file, "rb");
		if (fp == NULL)
			return cli_error("tokenize", "cannot open '%s'", file);
		fseek(fp, 0, SEEK_END);
		long sz = ftell(fp);
		fseek(fp, 0, SEEK_SET);
		text = malloc(sz > 0 ? (size_t)sz : 1);
		len = text != NULL && sz > 0 ? fread(text, 1, (size_t)sz, fp) : 0;
		fclose(fp);
		if (text == NULL)
			return cli_error("tokenize", "out of memory");
	} else {
		len = strlen(argv[optind]);
		if ((text = strdup(argv[optind])) == NULL)
			return cli_error("tokenize", "out of memory");
	}
	if (gguf_open(model_path, &f, err) < 0 || tokenizer_load(f, &tok, err) < 0) {
		cli_error("tokenize", "%s: %s", model_path, err);
		goto out;
	}
	if (tokenizer_encode(tok, text, len, special, special, &ids, &n, err) < 0) {
		cli_error("tokenize", "%s", err);
		goto out;
	}
	for (int i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	putchar('\n');
	rc = 0;
out:
	free(ids);
	free(text);
	tokenizer_free(tok);
	gguf_close(f);
	return rc;
}
