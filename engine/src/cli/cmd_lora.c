/*
 * privai-engine lora: LoRA adapters from the command line.
 *
 *	lora synth -m MODEL -o OUT [--rank R] [--alpha A] [--seed S]
 *		a random adapter for MODEL (q, v, attn_output, ffn_up,
 *		ffn_down of every layer): test data, as synth is for models
 *	lora merge -m MODEL --lora ADAPTER -o OUT
 *		MODEL with ADAPTER merged into its weights (float32)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "privai/lora.h"
#include "privai/tensor_type.h"

static const char *const synth_targets[] = { "attn_q", "attn_v", "attn_output", "ffn_up", "ffn_down" };

static void
lora_usage(FILE *fp)
{
	fputs("usage: privai-engine lora synth -m MODEL -o OUT.gguf [--rank R] [--alpha A] [--seed S]\n"
	      "       privai-engine lora merge -m MODEL --lora ADAPTER.gguf -o OUT.gguf\n",
	      fp);
}

static int
synth_adapter(const struct engine_model *m, const char *out, int rank, float alpha, uint32_t seed, char *err)
{
	struct gguf_writer *w = NULL;
	const struct gguf_file *f = m->file;
	int r;

	if ((r = gguf_writer_new(&w)) < 0)
		return privai_fail(err, r, "out of memory");
	gguf_writer_set_str(w, "general.type", "adapter");
	gguf_writer_set_str(w, "adapter.type", "lora");
	gguf_writer_set_str(w, "general.architecture", m->hp.arch_name);
	gguf_writer_set_f32(w, "adapter.lora.alpha", alpha);
	for (uint64_t i = 0; i < f->n_tensors && r >= 0; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		int layer, off = 0, hit = 0;
		if (sscanf(t->name, "blk.%d.%n", &layer, &off) != 1 || off == 0)
			continue;
		for (size_t k = 0; k < sizeof(synth_targets) / sizeof(synth_targets[0]); k++) {
			size_t n = strlen(synth_targets[k]);
			hit |= strncmp(t->name + off, synth_targets[k], n) == 0 &&
			       strcmp(t->name + off + n, ".weight") == 0;
		}
		if (!hit)
			continue;
		uint64_t cols = t->ne[0], rows = t->ne[1], ne_a[2] = { cols, (uint64_t)rank },
			 ne_b[2] = { (uint64_t)rank, rows };
		float *a = malloc((size_t)rank * cols * sizeof(float)),
		      *b = malloc((size_t)rows * rank * sizeof(float));
		if (a == NULL || b == NULL) {
			free(a);
			free(b);
			r = privai_fail(err, PRIVAI_ENOMEM, "out of memory");
			break;
		}
		/* small values, so the adapted model stays near the base one */
		for (size_t k = 0; k < (size_t)rank * cols; k++)
			a[k] = ((float)((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f) * 0.2f;
		for (size_t k = 0; k < (size_t)rows * rank; k++)
			b[k] = ((float)((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f) * 0.2f;
		char name[160];
		snprintf(name, sizeof(name), "%s.lora_a", t->name);
		r = gguf_writer_add_tensor(w, name, TT_F32, 2, ne_a, a);
		snprintf(name, sizeof(name), "%s.lora_b", t->name);
		if (r >= 0)
			r = gguf_writer_add_tensor(w, name, TT_F32, 2, ne_b, b);
		free(a);
		free(b);
		if (r < 0)
			privai_fail(err, r, "cannot add the adapter of %s", t->name);
	}
	if (r >= 0)
		r = gguf_writer_write(w, out, err);
	gguf_writer_free(w);
	return r;
}

int
cmd_lora(int argc, char **argv)
{
	const char *model = NULL, *out = NULL, *adapter = NULL, *cmd = "lora";
	int rank = 8, seed = 1, r = 0;
	float alpha = 16;
	char err[PRIVAI_ERR_LEN];

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		lora_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	int merge = strcmp(argv[1], "merge") == 0;
	if (!merge && strcmp(argv[1], "synth") != 0)
		return cli_error(cmd, "unknown subcommand '%s' (synth, merge)", argv[1]);
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL)
			return cli_error(cmd, "%s needs a value", a);
		if (strcmp(a, "-m") == 0)
			model = v;
		else if (strcmp(a, "-o") == 0)
			out = v;
		else if (strcmp(a, "--lora") == 0 && merge)
			adapter = v;
		else if (strcmp(a, "--rank") == 0 && !merge)
			r = cli_parse_int(cmd, a, v, 1, 1024, &rank);
		else if (strcmp(a, "--seed") == 0 && !merge)
			r = cli_parse_int(cmd, a, v, 0, 0x7fffffff, &seed);
		else if (strcmp(a, "--alpha") == 0 && !merge)
			r = cli_parse_float(cmd, a, v, &alpha);
		else
			return cli_error(cmd, "unknown option '%s' for lora %s", a, argv[1]);
		if (r != 0)
			return r;
		i++;
	}
	if (model == NULL || out == NULL || (merge && adapter == NULL))
		return cli_error(cmd,
				 merge ? "merge needs -m MODEL --lora ADAPTER -o OUT" : "synth needs -m MODEL -o OUT");
	struct engine_model *m = NULL;
	struct lora_adapter *la = NULL;
	if ((r = engine_model_load(model, &m, err)) < 0)
		return cli_error(cmd, "%s: %s", model, err);
	if (merge)
		r = lora_load(adapter, m, 1.0f, &la, err) < 0 ? -1 : lora_merge_write(m, la, out, err);
	else
		r = synth_adapter(m, out, rank, alpha, (uint32_t)seed, err);
	lora_free(la);
	engine_model_free(m);
	if (r < 0)
		return cli_error(cmd, "%s", err);
	fprintf(stderr, "lora: wrote %s\n", out);
	return 0;
}
