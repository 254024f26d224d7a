/*
 * privai-engine eval: run a prompt given as token ids and write the logits
 * of every position as raw little-endian float32 (n_prompt x n_vocab), the
 * format of the reference fixtures.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int
cmd_eval(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "prompt-ids", required_argument, NULL, 'P' },
		{ "dump-logits", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		CLI_TP_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	const char *model_path = NULL, *ids_arg = NULL, *out_path = NULL;
	struct engine_ctx_params cp = { 0 };
	struct cli_tp tp = { .size = 1 };
	char err[PRIVAI_ERR_LEN];
	int c, t, n_ids = 0, rc = 1;
	int32_t *ids = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "m:t:h", opts, NULL)) != -1) {
		if ((t = cli_tp_option("eval", c, optarg, &tp)) >= 0) {
			if (t)
				return 1;
			continue;
		}
		switch (c) {
		case 'm':
			model_path = optarg;
			break;
		case 'P':
			ids_arg = optarg;
			break;
		case 'o':
			out_path = optarg;
			break;
		case 't':
			if (cli_parse_int("eval", "-t", optarg, 1, 1024, &cp.n_threads))
				return 1;
			break;
		case 'D':
			cp.device = optarg;
			break;
		case 'h':
			puts("usage: privai-engine eval -m MODEL --prompt-ids 1,2,3 --dump-logits FILE [-t N] "
			     "[--device cpu|cuda] [--tp N [--tp-deadline S]] (--tp N: under mpirun -np N; rank 0 "
			     "writes the file)");
			return 0;
		default:
			return 2;
		}
	}
	if (model_path == NULL || ids_arg == NULL || out_path == NULL)
		return cli_error("eval", "needs -m MODEL, --prompt-ids and --dump-logits");
	if (cli_parse_ids("eval", ids_arg, &ids, &n_ids))
		return 1;
	tp.gpu = cp.device != NULL && strcmp(cp.device, "cuda") == 0;
	if (cli_tp_join("eval", &tp)) {
		free(ids);
		return 1;
	}

	struct engine_model *m = NULL;
	struct engine_ctx *ctx = NULL;
	float *logits = NULL;
	FILE *fp = NULL;
	if (engine_model_load(model_path, &m, err) < 0) {
		cli_tp_fail("eval", &tp, "%s: %s", model_path, err);
		goto out;
	}
	/* a context exactly as long as the prompt: the default cap (4096)
	 * must not refuse a longer prompt the model was trained for */
	cp.n_ctx = n_ids;
	cp.group = tp.group;
	if (n_ids > m->hp.n_ctx_train) {
		cli_error("eval", "prompt of %d tokens is longer than the model's context of %d", n_ids,
			  m->hp.n_ctx_train);
		goto out;
	}
	if (engine_ctx_new(m, &cp, &ctx, err) < 0) {
		cli_error("eval", "%s", err);
		goto out;
	}
	if (cli_tp_follower(&tp)) {
		rc = cli_tp_follow("eval", &tp, ctx);
		goto out;
	}
	struct engine_ctx_info ci;
	engine_ctx_info(ctx, &ci);
	if (n_ids > ci.n_ctx) {
		cli_error("eval", "prompt of %d tokens is longer than the context of %d", n_ids, ci.n_ctx);
		goto out;
	}
	logits = malloc((size_t)n_ids * m->hp.n_vocab * sizeof(float));
	if (logits == NULL) {
		cli_error("eval", "out of memory for %d x %d logits", n_ids, m->hp.n_vocab);
		goto out;
	}
	if (engine_decode(ctx, ids, n_ids, 1, logits, err) < 0) {
		cli_error("eval", "%s", err);
		goto out;
	}
	if ((fp = fopen(out_path, "wb")) == NULL ||
	    fwrite(logits, sizeof(float) * m->hp.n_vocab, (size_t)n_ids, fp) != (size_t)n_ids || fclose(fp) != 0) {
		fp = NULL;
		cli_error("eval", "cannot write '%s'", out_path);
		goto out;
	}
	rc = 0;
out:
	free(logits);
	free(ids);
	engine_ctx_free(ctx);
	engine_model_free(m);
	cli_tp_leave(&tp);
	return rc;
}
