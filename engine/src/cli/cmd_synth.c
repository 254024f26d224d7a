/*
 * privai-engine synth: write a model with random weights and a real
 * tokenizer, of any llama-family shape, so tests and benchmarks can use a
 * 1B-class model without downloading one.  The tokenizer is copied from
 * another GGUF (--vocab-from) or is the project's own demo tokenizer;
 * --fim adds fill-in-the-middle tokens to a copied one.
 */
#include <getopt.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo_vocab.h"
#include "privai/tensor_type.h"
#include "privai/threadpool.h"

struct synth {
	const char *out, *vocab_from, *arch;
	int dim, layers, heads, kv_heads, ff, ctx, vocab, tied, seed;
	int fim; /* append <|fim_prefix|> <|fim_suffix|> <|fim_middle|>: 1 with their GGUF keys, 2 spelled only */
	float rope_base;
	char type[16];
	uint64_t rng; /* the generator's count: the stream's state before the next matrix */
	struct threadpool *pool;
};

#define GOLDEN 0x9e3779b97f4a7c15ULL /* the generator's step */

static uint64_t
mix64(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static double
gauss(uint64_t *s)
{
	uint64_t a = mix64(*s += GOLDEN), b = a * 0x2545f4914f6cdd1dULL;
	double u1 = ((a >> 11) + 1.0) / 9007199254740993.0, u2 = (b >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* The mixes, as llama.cpp's quantizer makes them for a Llama with
 * grouped KV heads: Q4_K_M's and Q5_K_M's give a few sensitive matrices
 * 6 bits; Q3_K_M's its value, output and first down projections 4 and 5;
 * Q2_K_M's (llama.cpp's Q2_K) 3 and 4. */
static int
is_mix(const char *type)
{
	return strcmp(type, "Q4_K_M") == 0 || strcmp(type, "Q5_K_M") == 0 || strcmp(type, "Q3_K_M") == 0 ||
	       strcmp(type, "Q2_K_M") == 0;
}

static uint32_t
type_for(const struct synth *s, const char *name, int layer)
{
	int v = strstr(name, "attn_v") != NULL, down = strstr(name, "ffn_down") != NULL;
	int out = strstr(name, "attn_output") != NULL;

	if (strcmp(name, "output.weight") == 0 && is_mix(s->type))
		return TT_Q6_K;
	if (strcmp(s->type, "Q3_K_M") == 0) {
		if (v)
			return layer < 2 ? TT_Q5_K : TT_Q4_K;
		if (down)
			return layer < s->layers / 16 ? TT_Q5_K : TT_Q4_K;
		return out ? TT_Q4_K : TT_Q3_K;
	}
	if (strcmp(s->type, "Q2_K_M") == 0)
		return v ? TT_Q4_K : down || out ? TT_Q3_K : TT_Q2_K;
	if (strcmp(s->type, "Q4_K_M") == 0 || strcmp(s->type, "Q5_K_M") == 0) {
		int n = s->layers;
		int more = layer >= 0 && (layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2);
		if ((v || down) && more)
			return TT_Q6_K;
		return s->type[1] == '4' ? TT_Q4_K : TT_Q5_K;
	}
	for (uint32_t t = 0; t < TT_COUNT; t++)
		if (tensor_type_get(t) != NULL && strcasecmp(s->type, tensor_type_name(t)) == 0)
			return t;
	return TT_COUNT;
}

/* The weights are one stream of draws over the whole file, and the
 * generator is a counter (draw i is gauss() of seed + i * GOLDEN), so a
 * matrix is drawn in slices of SLICE_ROWS rows, each starting at its own
 * count, on every thread: the file is the same whatever their number, and
 * the same as when one thread drew it all (the demo model and the
 * tests' texts did not move).  An 8B-class model is 8e9 draws at about
 * 40 ns: five minutes on one core, seconds on a GPU host's sixteen. */
#define SLICE_ROWS 16

struct fill {
	uint64_t start; /* the generator's state before the matrix's first draw */
	uint32_t type;
	int64_t rows, cols;
	float stddev;
	uint8_t *dst;
	size_t row_bytes;
	atomic_int failed; /* a PRIVAI_E* code, 0 while all is well */
};

static void
fill_part(void *ctx, int part, int parts)
{
	struct fill *f = ctx;
	float *rows = malloc((size_t)(SLICE_ROWS * f->cols) * sizeof(float));

	if (rows == NULL) {
		atomic_store(&f->failed, PRIVAI_ENOMEM);
		return;
	}
	for (int64_t slice = part; slice * SLICE_ROWS < f->rows && !atomic_load(&f->failed); slice += parts) {
		uint64_t rng = f->start + (uint64_t)(slice * SLICE_ROWS * f->cols) * GOLDEN;
		int64_t first = slice * SLICE_ROWS, n = f->rows - first < SLICE_ROWS ? f->rows - first : SLICE_ROWS;
		for (int64_t i = 0; i < n * f->cols; i++)
			rows[i] = (float)(gauss(&rng) * f->stddev);
		for (int64_t r = 0; r < n; r++)
			if (tensor_quantize_row(f->type, rows + r * f->cols,
						f->dst + (size_t)(first + r) * f->row_bytes, (size_t)f->cols) < 0)
				atomic_store(&f->failed, PRIVAI_EINVAL);
	}
	free(rows);
}

static int
add_matrix(struct synth *s, struct gguf_writer *w, const char *name, int layer, int64_t cols, int64_t rows,
	   float stddev, char *err)
{
	struct fill f = {
		.start = s->rng, .type = type_for(s, name, layer), .rows = rows, .cols = cols, .stddev = stddev
	};
	uint64_t ne[2] = { (uint64_t)cols, (uint64_t)rows };
	int r;

	if (cols % tensor_type_get(f.type)->block_elems != 0)
		f.type = TT_F16; /* a row too short for the blocks: keep it exact */
	f.row_bytes = tensor_type_row_bytes(f.type, (uint64_t)cols);
	if ((f.dst = malloc(f.row_bytes * (size_t)rows)) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for '%s'", name);
	atomic_init(&f.failed, 0);
	threadpool_run(s->pool, fill_part, &f);
	s->rng += (uint64_t)(rows * cols) * GOLDEN;
	r = atomic_load(&f.failed);
	if (r == 0)
		r = gguf_writer_add_tensor(w, name, f.type, 2, ne, f.dst);
	free(f.dst);
	return r < 0 ? privai_fail(err, r, "cannot write tensor '%s' as %s", name, tensor_type_name(f.type)) : 0;
}

static int
add_vector(struct gguf_writer *w, const char *name, int64_t n, float value, char *err)
{
	float *f = malloc((size_t)n * sizeof(float));
	uint64_t ne[1] = { (uint64_t)n };
	int r;

	if (f == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++)
		f[i] = value;
	r = gguf_writer_add_tensor(w, name, TT_F32, 1, ne, f);
	free(f);
	return r < 0 ? privai_fail(err, r, "cannot write tensor '%s'", name) : 0;
}

static int
add_metadata(struct synth *s, struct gguf_writer *w, char *err)
{
	char key[96];
	int r = 0;

#define KEY(suffix) (snprintf(key, sizeof(key), "%s." suffix, s->arch), key)
	r |= gguf_writer_set_str(w, "general.architecture", s->arch);
	r |= gguf_writer_set_str(w, "general.name", "privai-synthetic");
	r |= gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->ctx);
	r |= gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->dim);
	r |= gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s->layers);
	r |= gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->ff);
	r |= gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->heads);
	r |= gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
	r |= gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base);
	r |= gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
	r |= gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)s->vocab);
#undef KEY
	return r ? privai_fail(err, PRIVAI_EINVAL, "cannot write metadata") : 0;
}

/* kv with the three fill-in-the-middle tokens appended (tokens, scores,
 * token types); any other key as it is. */
static int
set_kv_fim(struct gguf_writer *w, const struct gguf_kv *kv)
{
	static const char *const fim[3] = { "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>" };
	size_t esz = kv->arr_type == GGUF_STRING ? sizeof(char *) : 4;
	int r;

	if (kv->type != GGUF_ARRAY ||
	    (strcmp(kv->key, "tokenizer.ggml.tokens") != 0 && strcmp(kv->key, "tokenizer.ggml.scores") != 0 &&
	     strcmp(kv->key, "tokenizer.ggml.token_type") != 0))
		return gguf_writer_set_kv(w, kv);
	char *arr = malloc((kv->arr_n + 3) * esz);
	if (arr == NULL)
		return PRIVAI_ENOMEM;
	memcpy(arr, kv->v.arr, kv->arr_n * esz);
	for (int i = 0; i < 3; i++) {
		const char *text = fim[i];
		float score = 0;
		int32_t control = 3; /* llama.cpp's token type CONTROL */
		memcpy(arr + (kv->arr_n + (size_t)i) * esz,
		       kv->arr_type == GGUF_STRING ? (const void *)&text
		       : kv->arr_type == GGUF_F32  ? (const void *)&score
						   : (const void *)&control,
		       esz);
	}
	r = gguf_writer_set_arr(w, kv->key, kv->arr_type, arr, kv->arr_n + 3);
	free(arr);
	return r;
}

static int
copy_vocab(struct synth *s, struct gguf_writer *w, char *err)
{
	struct gguf_file *f;
	int r;

	if (s->vocab_from == NULL) {
		if (demo_vocab_write(w, s->vocab, &s->vocab) < 0)
			return privai_fail(err, PRIVAI_ENOMEM, "cannot build the demo tokenizer");
		return 0;
	}
	if ((r = gguf_open(s->vocab_from, &f, err)) < 0)
		return r;
	for (uint64_t i = 0; i < f->n_kv; i++) {
		if (strncmp(f->kv[i].key, "tokenizer.", 10) != 0)
			continue;
		if ((r = s->fim ? set_kv_fim(w, &f->kv[i]) : gguf_writer_set_kv(w, &f->kv[i])) < 0)
			break;
		if (strcmp(f->kv[i].key, "tokenizer.ggml.tokens") == 0)
			s->vocab = (int)f->kv[i].arr_n + (s->fim ? 3 : 0);
	}
	gguf_close(f);
	if (r == 0 && s->fim == 1 && s->vocab > 0)
		r = gguf_writer_set_u32(w, "tokenizer.ggml.fim_pre_token_id", (uint32_t)s->vocab - 3) |
		    gguf_writer_set_u32(w, "tokenizer.ggml.fim_suf_token_id", (uint32_t)s->vocab - 2) |
		    gguf_writer_set_u32(w, "tokenizer.ggml.fim_mid_token_id", (uint32_t)s->vocab - 1);
	if (r == 0 && s->vocab == 0)
		r = privai_fail(err, PRIVAI_EFORMAT, "%s has no tokenizer.ggml.tokens", s->vocab_from);
	return r < 0 ? privai_fail(err, r, "cannot copy the tokenizer of %s", s->vocab_from) : 0;
}

static int
build(struct synth *s, char *err)
{
	struct gguf_writer *w;
	int64_t hd = s->dim / s->heads, kvd = hd * s->kv_heads;
	float sd = 1.0f / sqrtf((float)s->dim), sd_ff = 1.0f / sqrtf((float)s->ff);
	char name[96];
	int r;

	if (gguf_writer_new(&w) < 0)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	if ((r = copy_vocab(s, w, err)) < 0 || (r = add_metadata(s, w, err)) < 0 ||
	    (r = add_matrix(s, w, "token_embd.weight", -1, s->dim, s->vocab, 1.0f, err)) < 0 ||
	    (r = add_vector(w, "output_norm.weight", s->dim, 1.0f, err)) < 0 ||
	    (!s->tied && (r = add_matrix(s, w, "output.weight", -1, s->dim, s->vocab, sd, err)) < 0))
		goto out;
	for (int l = 0; l < s->layers; l++) {
#define NM(x) (snprintf(name, sizeof(name), "blk.%d." x, l), name)
		if ((r = add_vector(w, NM("attn_norm.weight"), s->dim, 1.0f, err)) < 0 ||
		    (r = add_matrix(s, w, NM("attn_q.weight"), l, s->dim, s->dim, sd, err)) < 0 ||
		    (r = add_matrix(s, w, NM("attn_k.weight"), l, s->dim, kvd, sd, err)) < 0 ||
		    (r = add_matrix(s, w, NM("attn_v.weight"), l, s->dim, kvd, sd, err)) < 0 ||
		    (r = add_matrix(s, w, NM("attn_output.weight"), l, s->dim, s->dim, sd, err)) < 0 ||
		    (r = add_vector(w, NM("ffn_norm.weight"), s->dim, 1.0f, err)) < 0 ||
		    (r = add_matrix(s, w, NM("ffn_gate.weight"), l, s->dim, s->ff, sd, err)) < 0 ||
		    (r = add_matrix(s, w, NM("ffn_up.weight"), l, s->dim, s->ff, sd, err)) < 0 ||
		    (r = add_matrix(s, w, NM("ffn_down.weight"), l, s->ff, s->dim, sd_ff, err)) < 0)
			goto out;
		if (strcmp(s->arch, "qwen2") == 0 && ((r = add_vector(w, NM("attn_q.bias"), s->dim, 0.01f, err)) < 0 ||
						      (r = add_vector(w, NM("attn_k.bias"), kvd, 0.01f, err)) < 0 ||
						      (r = add_vector(w, NM("attn_v.bias"), kvd, 0.01f, err)) < 0))
			goto out;
#undef NM
	}
	r = gguf_writer_write(w, s->out, err);
out:
	gguf_writer_free(w);
	return r;
}

static void
usage(void)
{
	puts("usage: privai-engine synth -o OUT.gguf [options]\n"
	     "  --demo               the embedded demo model (small, own tokenizer)\n"
	     "  --arch llama|qwen2   (default llama)\n"
	     "  --dim N --layers N --heads N --kv-heads N --ff N --ctx N\n"
	     "  --vocab N            demo tokenizer padded to N tokens\n"
	     "  --vocab-from GGUF    copy the tokenizer of another model\n"
	     "  --fim keys|text      add fill-in-the-middle tokens to it, with their GGUF keys or\n"
	     "                       only spelled as Qwen2.5-Coder spells them\n"
	     "  --type T             F32 F16 BF16 Q8_0 Q4_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS, or a mix:\n"
	     "                       Q2_K_M (llama.cpp's Q2_K) Q3_K_M Q4_K_M Q5_K_M (default Q8_0)\n"
	     "  --rope-base F --tied --seed N\n"
	     "  -t, --threads N      threads drawing the weights (default: the CPUs' cores;\n"
	     "                       the file is the same whatever N)\n"
	     "Llama-3.2-1B's shape: --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000");
}

int
cmd_synth(int argc, char **argv)
{
	static const struct option opts[] = {
		/* clang-format off */
		{ "demo", no_argument, NULL, 'D' },
		{ "arch", required_argument, NULL, 'a' },
		{ "dim", required_argument, NULL, 1 },
		{ "layers", required_argument, NULL, 2 },
		{ "heads", required_argument, NULL, 3 },
		{ "kv-heads", required_argument, NULL, 4 },
		{ "ff", required_argument, NULL, 5 },
		{ "ctx", required_argument, NULL, 6 },
		{ "vocab", required_argument, NULL, 7 },
		{ "vocab-from", required_argument, NULL, 8 },
		{ "type", required_argument, NULL, 9 },
		{ "rope-base", required_argument, NULL, 10 },
		{ "tied", no_argument, NULL, 11 },
		{ "seed", required_argument, NULL, 12 },
		{ "fim", required_argument, NULL, 13 },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
		/* clang-format on */
	};
	struct synth s = { .arch = "llama",
			   .dim = 256,
			   .layers = 4,
			   .heads = 8,
			   .kv_heads = 4,
			   .ff = 768,
			   .ctx = 4096,
			   .rope_base = 10000.0f,
			   .type = "Q8_0" };
	char err[PRIVAI_ERR_LEN];
	int c, bad = 0, threads = threadpool_default_threads();

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:t:h", opts, NULL)) != -1 && !bad) {
		switch (c) {
		case 'o':
			s.out = optarg;
			break;
		case 'D':
			break; /* the defaults are the demo model */
		case 'a':
			s.arch = optarg;
			break;
		case 1:
			bad = cli_parse_int("synth", "--dim", optarg, 32, 65536, &s.dim);
			break;
		case 2:
			bad = cli_parse_int("synth", "--layers", optarg, 1, 1024, &s.layers);
			break;
		case 3:
			bad = cli_parse_int("synth", "--heads", optarg, 1, 1024, &s.heads);
			break;
		case 4:
			bad = cli_parse_int("synth", "--kv-heads", optarg, 1, 1024, &s.kv_heads);
			break;
		case 5:
			bad = cli_parse_int("synth", "--ff", optarg, 32, 1 << 20, &s.ff);
			break;
		case 6:
			bad = cli_parse_int("synth", "--ctx", optarg, 16, 1 << 22, &s.ctx);
			break;
		case 7:
			bad = cli_parse_int("synth", "--vocab", optarg, 0, 1 << 20, &s.vocab);
			break;
		case 8:
			s.vocab_from = optarg;
			break;
		case 9:
			snprintf(s.type, sizeof(s.type), "%s", optarg);
			break;
		case 10:
			bad = cli_parse_float("synth", "--rope-base", optarg, &s.rope_base);
			break;
		case 11:
			s.tied = 1;
			break;
		case 12:
			bad = cli_parse_int("synth", "--seed", optarg, 0, 0x7fffffff, &s.seed);
			break;
		case 13:
			s.fim = strcmp(optarg, "keys") == 0 ? 1 : strcmp(optarg, "text") == 0 ? 2 : -1;
			if (s.fim < 0)
				return cli_error("synth", "--fim takes keys or text, not '%s'", optarg);
			break;
		case 't':
			bad = cli_parse_int("synth", "--threads", optarg, 1, 4096, &threads);
			break;
		case 'h':
			usage();
			return 0;
		default:
			return 2;
		}
	}
	if (bad)
		return 1;
	if (s.out == NULL)
		return cli_error("synth", "needs -o OUT.gguf (see --help)");
	if (s.fim && s.vocab_from == NULL)
		return cli_error("synth", "--fim adds to a copied tokenizer: give --vocab-from");
	if (strcmp(s.arch, "llama") != 0 && strcmp(s.arch, "qwen2") != 0)
		return cli_error("synth", "--arch must be llama or qwen2");
	if (s.dim % s.heads != 0 || s.heads % s.kv_heads != 0 || (s.dim / s.heads) % 2 != 0)
		return cli_error("synth", "--dim must divide into --heads of even size, and --heads by --kv-heads");
	if (!is_mix(s.type) &&
	    (type_for(&s, "", -1) == TT_COUNT || tensor_quantize_row(type_for(&s, "", -1), NULL, NULL, 0) < 0))
		return cli_error("synth",
				 "--type '%s' cannot be written (F32 F16 BF16 Q8_0 Q4_0 Q2_K Q3_K Q4_K Q5_K Q6_K "
				 "IQ4_XS "
				 "Q2_K_M Q3_K_M Q4_K_M Q5_K_M)",
				 s.type);
	s.rng = (uint64_t)s.seed * GOLDEN + 1;
	if (threadpool_new(threads, &s.pool) < 0)
		return cli_error("synth", "cannot start %d threads", threads);
	int r = build(&s, err);
	threadpool_free(s.pool);
	if (r < 0)
		return cli_error("synth", "%s", err);
	fprintf(stderr, "synth: wrote %s (%s, dim %d, %d layers, %d/%d heads, ff %d, vocab %d, %s)\n", s.out, s.arch,
		s.dim, s.layers, s.heads, s.kv_heads, s.ff, s.vocab, s.type);
	return 0;
}
