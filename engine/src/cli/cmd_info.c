/*
 * privai-engine info: what a model is and what it needs: architecture and
 * shape, tokenizer, tensor types, and memory for weights plus the KV cache
 * at the context length asked for.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "privai/tensor_type.h"

int
cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "ctx", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	struct cli_engine e;
	int c, n_ctx = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "m:c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			path = optarg;
			break;
		case 'c':
			if (cli_parse_int("info", "--ctx", optarg, 1, 1 << 24, &n_ctx))
				return 1;
			break;
		case 'h':
			puts("usage: privai-engine info -m MODEL [--ctx N]");
			return 0;
		default:
			return 2;
		}
	}
	if (path == NULL)
		return cli_error("info", "needs -m MODEL");
	if (cli_engine_open("info", path, NULL, &e))
		return 1;
	const struct model_hparams *hp = &e.model->hp;
	const struct gguf_file *f = e.model->file;
	uint64_t params = 0, count[TT_COUNT] = { 0 };
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		params += f->tensors[i].n_elems;
		count[f->tensors[i].type]++;
	}
	if (n_ctx == 0)
		n_ctx = hp->n_ctx_train;
	/* K and V in half precision, as every backend keeps them */
	uint64_t kv_tok = 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim * sizeof(uint16_t);
	const char *name = NULL;
	gguf_get_str(f, "general.name", &name, NULL);
	printf("file:           %s (GGUF v%u, %llu tensors, %llu metadata keys)\n", path, f->version,
	       (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv);
	printf("name:           %s\n", name ? name : "(none)");
	printf("architecture:   %s\n", hp->arch_name);
	printf("parameters:     %.2f M\n", (double)params / 1e6);
	printf("layers:         %d\n", hp->n_layer);
	printf("embedding:      %d\n", hp->n_embd);
	printf("heads:          %d (KV heads %d, head size %d)\n", hp->n_head, hp->n_head_kv, hp->head_dim);
	printf("feed-forward:   %d\n", hp->n_ff);
	printf("vocabulary:     %d (%s tokenizer, pre-tokenizer %s)\n", hp->n_vocab, tokenizer_model_name(e.tok),
	       tokenizer_pre_name(e.tok)[0] ? tokenizer_pre_name(e.tok) : "-");
	printf("context:        %d trained\n", hp->n_ctx_train);
	printf("rope:           base %.0f, %d dims, %s%s\n", hp->rope_base, hp->n_rot,
	       hp->rope_neox ? "neox" : "normal",
	       gguf_find_tensor(f, "rope_freqs.weight") ? ", rope_freqs factors" : "");
	printf("output:         %s\n",
	       e.model->output.data == e.model->tok_embd.data ? "tied to token_embd" : "separate");
	printf("tensor types:  ");
	for (int t = 0; t < TT_COUNT; t++)
		if (count[t])
			printf(" %s x%llu", tensor_type_name((uint32_t)t), (unsigned long long)count[t]);
	printf("\nweights:        %.1f MiB\n", (double)e.model->weight_bytes / (1 << 20));
	printf("KV cache:       %llu bytes/token (f16), %.1f MiB at context %d\n", (unsigned long long)kv_tok,
	       (double)kv_tok * n_ctx / (1 << 20), n_ctx);
	printf("memory needed:  %.1f MiB (weights + KV cache at context %d)\n",
	       (double)(e.model->weight_bytes + kv_tok * (uint64_t)n_ctx) / (1 << 20), n_ctx);
	cli_engine_close(&e);
	return 0;
}
