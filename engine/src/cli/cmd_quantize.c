/*
 * privai-engine quantize IN OUT TYPE: convert the F32/F16/BF16 weight
 * matrices of a model to Q8_0, Q4_0, one of the K-quants (Q2_K to Q6_K, each
 * alone: the mixes come from `synth`), IQ4_XS or IQ4_NL (no importance
 * matrix), or the older Q4_1, Q5_0 and Q5_1.  Vectors (norms, biases)
 * stay as they are; a matrix whose rows are not a whole number of the
 * target's blocks falls back to Q8_0 and is named on stderr.  Metadata is
 * copied, with general.file_type updated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "privai/tensor_type.h"

/* general.file_type numbers for the targets (llama.cpp's LLAMA_FTYPE_*) */
static int
file_type_of(uint32_t t)
{
	switch (t) {
	case TT_Q8_0:
		return 7;
	case TT_Q4_0:
		return 2;
	case TT_Q2_K:
		return 10;
	case TT_Q3_K:
		return 11; /* Q3_K_S: Q3_K throughout */
	case TT_Q4_K:
		return 15;
	case TT_Q5_K:
		return 16; /* Q5_K_S */
	case TT_Q6_K:
		return 18;
	case TT_IQ4_XS:
		return 30;
	case TT_Q4_1:
		return 3;
	case TT_Q5_0:
		return 8;
	case TT_Q5_1:
		return 9;
	case TT_IQ4_NL:
		return 25;
	}
	return 0;
}

static int
convert(const struct gguf_file *in, struct gguf_writer *w, uint32_t target, char *err)
{
	int r;

	for (uint64_t i = 0; i < in->n_kv; i++) {
		if (strcmp(in->kv[i].key, "general.file_type") == 0 || strcmp(in->kv[i].key, "general.alignment") == 0)
			continue;
		if ((r = gguf_writer_set_kv(w, &in->kv[i])) < 0)
			return privai_fail(err, r, "cannot copy metadata '%s'", in->kv[i].key);
	}
	if ((r = gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_of(target))) < 0)
		return privai_fail(err, r, "cannot set general.file_type");
	for (uint64_t i = 0; i < in->n_tensors; i++) {
		const struct gguf_tensor *t = &in->tensors[i];
		int is_matrix = t->n_dims >= 2 && (t->type == TT_F32 || t->type == TT_F16 || t->type == TT_BF16);
		if (!is_matrix) {
			r = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
		} else {
			uint32_t tt = target;
			int64_t cols = (int64_t)t->ne[0], rows = (int64_t)(t->n_elems / t->ne[0]);
			if (cols % tensor_type_get(tt)->block_elems != 0) {
				fprintf(stderr,
					"quantize: %s has rows of %lld, not a multiple of %s blocks; using Q8_0\n",
					t->name, (long long)cols, tensor_type_name(tt));
				tt = TT_Q8_0;
			}
			float *f = malloc((size_t)t->n_elems * sizeof(float));
			void *q = NULL;
			size_t qb;
			if (f == NULL)
				return privai_fail(err, PRIVAI_ENOMEM, "out of memory for '%s'", t->name);
			tensor_dequantize_row(t->type, t->data, f, (size_t)t->n_elems);
			r = tensor_quantize_matrix(tt, f, rows, cols, &q, &qb);
			free(f);
			if (r == 0)
				r = gguf_writer_add_tensor(w, t->name, tt, t->n_dims, t->ne, q);
			free(q);
		}
		if (r < 0)
			return privai_fail(err, r, "cannot convert tensor '%s'", t->name);
	}
	return PRIVAI_OK;
}

int
cmd_quantize(int argc, char **argv)
{
	static const uint32_t targets[] = { TT_Q8_0, TT_Q4_0, TT_Q2_K, TT_Q3_K, TT_Q4_K,   TT_Q5_K,
					    TT_Q6_K, TT_Q4_1, TT_Q5_0, TT_Q5_1, TT_IQ4_XS, TT_IQ4_NL };
	char err[PRIVAI_ERR_LEN];
	struct gguf_file *in = NULL;
	struct gguf_writer *w = NULL;
	uint32_t target = TT_COUNT;
	int rc = 1;

	if (argc == 2 && strcmp(argv[1], "--help") == 0) {
		puts("usage: privai-engine quantize IN.gguf OUT.gguf TYPE   (TYPE: Q8_0 Q4_0 Q2_K Q3_K Q4_K Q5_K "
		     "Q6_K Q4_1 Q5_0 Q5_1 IQ4_XS IQ4_NL)");
		return 0;
	}
	if (argc != 4)
		return cli_error("quantize", "usage: quantize IN.gguf OUT.gguf TYPE");
	for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
		if (strcasecmp(argv[3], tensor_type_name(targets[i])) == 0)
			target = targets[i];
	if (target == TT_COUNT)
		return cli_error("quantize",
				 "cannot quantize to '%s' (Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_1, Q5_0, Q5_1, "
				 "IQ4_XS and IQ4_NL can be made)",
				 argv[3]);
	if (gguf_open(argv[1], &in, err) < 0) {
		cli_error("quantize", "%s: %s", argv[1], err);
		goto out;
	}
	if (gguf_writer_new(&w) < 0 || convert(in, w, target, err) < 0 || gguf_writer_write(w, argv[2], err) < 0) {
		cli_error("quantize", "%s", err);
		goto out;
	}
	rc = 0;
out:
	gguf_writer_free(w);
	gguf_close(in);
	return rc;
}
