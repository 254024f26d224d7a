/*
 * privai-engine run: tokenize a prompt, prefill it in one pass, and stream
 * the generated text.  With -i the conversation goes on: each line read from
 * standard input is appended to the same context and answered.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "privai/sampler.h"

struct run_opts {
	const char *model, *prompt;
	int n_predict, interactive, show_special;
	struct engine_ctx_params cp;
	struct sampler_params sp;
};

static void
usage(void)
{
	puts("usage: privai-engine run -m MODEL -p TEXT [options]\n"
	     "  -n N                   tokens to generate (default 128; -1: until the end of context)\n"
	     "  -i, --interactive      keep reading prompts from stdin into the same context\n"
	     "  -c, --ctx N            context length (default: model's, at most 4096)\n"
	     "  -t, --threads N        compute threads (default: the physical cores it may use)\n"
	     "      --fixed-threads    keep every thread at work while other processes hold the CPUs\n"
	     "  --device NAME          compute backend: cpu (default) or cuda\n"
	     "  --temp T               temperature (default 0.8; 0 = greedy)\n"
	     "  --top-k K              (default 40; 0 = off)\n"
	     "  --top-p P              (default 0.95; 1 = off)\n"
	     "  --min-p P              (default 0.05; 0 = off)\n"
	     "  --repeat-penalty R     (default 1 = off)\n"
	     "  --repeat-last-n N      tokens the penalties consider (default 64)\n"
	     "  --presence-penalty F   (default 0)\n"
	     "  --frequency-penalty F  (default 0)\n"
	     "  -s, --seed N           random seed (default 0): same seed, same text");
}

static int
parse(int argc, char **argv, struct run_opts *o)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "n-predict", required_argument, NULL, 'n' },
		{ "interactive", no_argument, NULL, 'i' },
		{ "ctx", required_argument, NULL, 'c' },
		{ "threads", required_argument, NULL, 't' },
		{ "temp", required_argument, NULL, 1 },
		{ "top-k", required_argument, NULL, 2 },
		{ "top-p", required_argument, NULL, 3 },
		{ "min-p", required_argument, NULL, 4 },
		{ "repeat-penalty", required_argument, NULL, 5 },
		{ "repeat-last-n", required_argument, NULL, 6 },
		{ "presence-penalty", required_argument, NULL, 7 },
		{ "frequency-penalty", required_argument, NULL, 8 },
		{ "seed", required_argument, NULL, 's' },
		{ "special", no_argument, NULL, 9 },
		{ "device", required_argument, NULL, 10 },
		{ "fixed-threads", no_argument, NULL, 11 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, seed = 0;

	o->n_predict = 128;
	sampler_params_default(&o->sp);
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:n:ic:t:s:h", opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'm':
			o->model = optarg;
			break;
		case 'p':
			o->prompt = optarg;
			break;
		case 'n':
			bad = cli_parse_int("run", "-n", optarg, -1, 1 << 24, &o->n_predict);
			break;
		case 'i':
			o->interactive = 1;
			break;
		case 'c':
			bad = cli_parse_int("run", "--ctx", optarg, 16, 1 << 22, &o->cp.n_ctx);
			break;
		case 't':
			bad = cli_parse_int("run", "--threads", optarg, 1, 1024, &o->cp.n_threads);
			break;
		case 1:
			bad = cli_parse_float("run", "--temp", optarg, &o->sp.temperature);
			break;
		case 2:
			bad = cli_parse_int("run", "--top-k", optarg, 0, 1 << 24, &o->sp.top_k);
			break;
		case 3:
			bad = cli_parse_float("run", "--top-p", optarg, &o->sp.top_p);
			break;
		case 4:
			bad = cli_parse_float("run", "--min-p", optarg, &o->sp.min_p);
			break;
		case 5:
			bad = cli_parse_float("run", "--repeat-penalty", optarg, &o->sp.repeat_penalty);
			break;
		case 6:
			bad = cli_parse_int("run", "--repeat-last-n", optarg, 0, 1 << 20, &o->sp.repeat_last_n);
			break;
		case 7:
			bad = cli_parse_float("run", "--presence-penalty", optarg, &o->sp.presence_penalty);
			break;
		case 8:
			bad = cli_parse_float("run", "--frequency-penalty", optarg, &o->sp.frequency_penalty);
			break;
		case 's':
			bad = cli_parse_int("run", "--seed", optarg, 0, 0x7fffffff, &seed);
			o->sp.seed = (uint64_t)seed;
			break;
		case 10:
			o->cp.device = optarg;
			break;
		case 11:
			o->cp.fixed_threads = 1;
			break;
		case 9:
			o->show_special = 1;
			break;
		case 'h':
			usage();
			exit(0);
		default:
			return 2;
		}
		if (bad)
			return 1;
	}
	if (o->model == NULL || o->prompt == NULL)
		return cli_error("run", "needs -m MODEL and -p TEXT (see --help)");
	char err[PRIVAI_ERR_LEN];
	if (sampler_params_validate(&o->sp, err) < 0)
		return cli_error("run", "%s", err);
	return 0;
}

static int
context_full(const struct engine_ctx *c)
{
	struct engine_ctx_info ci;

	engine_ctx_info(c, &ci);
	return ci.n_past >= ci.n_ctx;
}

/* Feed `text` into the context and generate up to n_predict tokens. */
static int
turn(struct cli_engine *e, struct sampler *smp, const char *text, int add_bos, int n_predict, float *logits)
{
	char err[PRIVAI_ERR_LEN], out[4096];
	int32_t *ids = NULL;
	int n = 0;
	struct detok_stream ds = { 0 };
	struct engine_ctx_info ci;

	if (tokenizer_encode(e->tok, text, strlen(text), add_bos, 1, &ids, &n, err) < 0)
		return cli_error("run", "%s", err);
	if (n == 0) {
		free(ids);
		return 0;
	}
	engine_ctx_info(e->ctx, &ci);
	if (n > ci.n_ctx - ci.n_past) {
		cli_error("run", "prompt of %d tokens does not fit: the context holds %d and %d are used", n, ci.n_ctx,
			  ci.n_past);
		free(ids);
		return 1;
	}
	for (int i = 0; i < n; i++)
		sampler_accept(smp, ids[i]);
	int r = engine_decode(e->ctx, ids, n, 0, logits, err);
	free(ids);
	if (r < 0)
		return cli_error("run", "%s", err);
	for (int i = 0; n_predict < 0 || i < n_predict; i++) {
		int32_t id = sampler_sample(smp, logits);
		if (tokenizer_is_eog(e->tok, id))
			break;
		sampler_accept(smp, id);
		int len = detok_stream_push(&ds, e->tok, id, out, sizeof(out));
		fwrite(out, 1, (size_t)(len < (int)sizeof(out) ? len : (int)sizeof(out)), stdout);
		fflush(stdout);
		if (context_full(e->ctx))
			break; /* context full: stop, do not wrap or truncate silently */
		if (engine_decode(e->ctx, &id, 1, 0, logits, err) < 0)
			return cli_error("run", "%s", err);
	}
	int len = detok_stream_flush(&ds, out, sizeof(out));
	fwrite(out, 1, (size_t)len, stdout);
	fputc('\n', stdout);
	engine_ctx_info(e->ctx, &ci);
	if (ci.n_past >= ci.n_ctx)
		fprintf(stderr, "[context of %d tokens is full]\n", ci.n_ctx);
	return 0;
}

int
cmd_run(int argc, char **argv)
{
	struct run_opts o = { 0 };
	struct cli_engine e;
	struct sampler *smp = NULL;
	float *logits = NULL;
	int rc;

	if ((rc = parse(argc, argv, &o)) != 0)
		return rc;
	if (cli_engine_open("run", o.model, &o.cp, &e))
		return 1;
	rc = 1;
	if (sampler_new(&o.sp, e.model->hp.n_vocab, &smp) < 0 ||
	    (logits = malloc((size_t)e.model->hp.n_vocab * sizeof(float))) == NULL) {
		cli_error("run", "out of memory");
		goto out;
	}
	if (o.interactive) {
		struct engine_ctx_info ci;
		engine_ctx_info(e.ctx, &ci);
		fprintf(stderr, "[%s, %d layers, context %d, %s; Ctrl-D ends]\n", e.model->hp.arch_name,
			e.model->hp.n_layer, ci.n_ctx, compute_cpu_simd_name());
	}
	if ((rc = turn(&e, smp, o.prompt, 1, o.n_predict, logits)) != 0)
		goto out;
	while (o.interactive) {
		char line[8192];
		if (isatty(STDIN_FILENO))
			fputs("> ", stderr);
		if (fgets(line, sizeof(line), stdin) == NULL)
			break;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '\0')
			continue;
		if ((rc = turn(&e, smp, line, 0, o.n_predict, logits)) != 0)
			goto out;
	}
	rc = 0;
out:
	free(logits);
	sampler_free(smp);
	cli_engine_close(&e);
	return rc;
}
