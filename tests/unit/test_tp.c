/*
 * Tensor parallel in one process: the ranks of a group are threads here,
 * joined by a collectives implementation of this test's own (barriers
 * and shared pointers), so the split of the model (tp_part.c) and the
 * step protocol (model_tp.c) run under ASan and LSan without MPI.  The
 * MPI plugin itself is tested across processes by
 * tests/integration/test_engine_tp.py.
 *
 * Each workload runs once on a whole-model context and once on rank 0 of
 * a group of 2 or 4, the other ranks following; the logits must agree.
 */
#include <math.h>
#include <pthread.h>

#include "privai/collective.h"
#include "privai/model.h"
#include "testlib.h"
#include "tp_part.h"

#define MAX_RANKS 8

struct tgroup {
	int size;
	pthread_barrier_t bar;
	const void *ptr[MAX_RANKS];
	int ok[MAX_RANKS];
	int aborted;
};

struct trank {
	struct coll g;
	struct tgroup *t;
};

static struct tgroup *
tg(struct coll *g)
{
	return ((struct trank *)g->impl)->t;
}

static int
t_allreduce(struct coll *g, float *buf, size_t count, char *err)
{
	struct tgroup *t = tg(g);
	float *sum = calloc(count, sizeof(float));

	(void)err;
	t->ptr[g->rank] = buf;
	pthread_barrier_wait(&t->bar);
	for (int r = 0; r < t->size; r++) /* in rank order, as MPI's reduction on one node */
		for (size_t i = 0; sum != NULL && i < count; i++)
			sum[i] += ((const float *)t->ptr[r])[i];
	pthread_barrier_wait(&t->bar);
	if (sum != NULL)
		memcpy(buf, sum, count * sizeof(float));
	free(sum);
	g->stats.n_allreduce++;
	g->stats.allreduce_bytes += count * sizeof(float);
	return sum != NULL ? 0 : -2;
}

static int
t_bcast(struct coll *g, void *buf, size_t bytes, int flags, char *err)
{
	struct tgroup *t = tg(g);

	(void)flags;
	(void)err;
	if (g->rank == 0)
		t->ptr[0] = buf;
	pthread_barrier_wait(&t->bar);
	if (g->rank != 0)
		memcpy(buf, t->ptr[0], bytes);
	pthread_barrier_wait(&t->bar);
	g->stats.n_steps++;
	g->stats.step_bytes += bytes;
	return 0;
}

static int
t_gather(struct coll *g, const float *in, const int *counts, float *out, char *err)
{
	struct tgroup *t = tg(g);

	(void)err;
	t->ptr[g->rank] = in;
	pthread_barrier_wait(&t->bar);
	if (g->rank == 0)
		for (int r = 0, at = 0; r < t->size; at += counts[r], r++)
			memcpy(out + at, t->ptr[r], (size_t)counts[r] * sizeof(float));
	pthread_barrier_wait(&t->bar);
	return 0;
}

static int
t_agree(struct coll *g, int ok, char *err)
{
	struct tgroup *t = tg(g);
	int all = 1;

	(void)err;
	t->ok[g->rank] = ok;
	pthread_barrier_wait(&t->bar);
	for (int r = 0; r < t->size; r++)
		all &= t->ok[r] != 0;
	pthread_barrier_wait(&t->bar);
	return all;
}

static void
t_abort(struct coll *g, int code, const char *why)
{
	fprintf(stderr, "FAIL: rank %d aborted the group (%d): %s\n", g->rank, code, why ? why : "");
	exit(1);
}

static void
t_destroy(struct coll *g)
{
	(void)g;
}

static const struct coll_ops t_ops = {
	.name = "threads",
	.memory = "host",
	.allreduce_sum = t_allreduce,
	.bcast = t_bcast,
	.gather = t_gather,
	.agree = t_agree,
	.abort = t_abort,
	.destroy = t_destroy,
};

/* What rank 0 (or a whole-model context) runs; writes its logits to out
 * and returns how many floats, or -1. */
typedef long workload_fn(struct engine_ctx *c, float *out);

struct rank_arg {
	struct trank rank;
	const struct engine_model *m;
	struct engine_ctx_params cp;
	workload_fn *work;
	float *out;
	long n_out;
	int ctx_status;
	char err[PRIVAI_ERR_LEN];
	size_t weight_bytes;
};

static void *
rank_main(void *p)
{
	struct rank_arg *a = p;
	struct engine_ctx *c = NULL;
	struct engine_ctx_info ci;

	a->cp.group = &a->rank.g;
	a->ctx_status = engine_ctx_new(a->m, &a->cp, &c, a->err);
	if (a->ctx_status < 0)
		return NULL;
	engine_ctx_info(c, &ci);
	a->weight_bytes = ci.weight_bytes;
	if (a->rank.g.rank == 0)
		a->n_out = a->work(c, a->out);
	else if (engine_follow(c, a->err) < 0) /* rank 0 waits for it: end the group, as the MPI plugin does */
		t_abort(&a->rank.g, 1, a->err);
	engine_ctx_free(c);
	return NULL;
}

/* Run `work` on a group of `size` threads; the rank arguments stay for
 * the caller to read (statuses, bytes).  Returns rank 0's float count. */
static long
run_group(const struct engine_model *m, const struct engine_ctx_params *cp, int size, workload_fn *work, float *out,
	  struct rank_arg *args)
{
	struct tgroup t = { .size = size };
	pthread_t th[MAX_RANKS];

	pthread_barrier_init(&t.bar, NULL, (unsigned)size);
	for (int r = 0; r < size; r++) {
		args[r] = (struct rank_arg){ .m = m, .cp = *cp, .work = work, .out = out };
		args[r].rank.t = &t;
		args[r].rank.g = (struct coll){ .ops = &t_ops, .rank = r, .size = size, .impl = &args[r].rank };
		pthread_create(&th[r], NULL, rank_main, &args[r]);
	}
	for (int r = 0; r < size; r++)
		pthread_join(th[r], NULL);
	pthread_barrier_destroy(&t.bar);
	return args[0].n_out;
}

static double
rel_l2(const float *a, const float *b, long n)
{
	double num = 0, den = 0;

	for (long i = 0; i < n; i++) {
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)a[i] * a[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A prompt as one pass, every position's logits. */
static long
work_prompt(struct engine_ctx *c, float *out)
{
	struct engine_ctx_info ci;
	int32_t ids[24];
	char err[PRIVAI_ERR_LEN];

	engine_ctx_info(c, &ci);
	for (int i = 0; i < 24; i++)
		ids[i] = (int32_t)((i * 7919 + 11) % ci.n_vocab);
	if (engine_decode(c, ids, 24, 1, out, err) < 0) {
		fprintf(stderr, "work_prompt: %s\n", err);
		return -1;
	}
	/* then three tokens one at a time: the decode path */
	for (int i = 0; i < 3; i++)
		if (engine_decode(c, &ids[i], 1, 0, out + (size_t)(24 + i) * ci.n_vocab, err) < 0)
			return -1;
	return 27L * ci.n_vocab;
}

/* Two sequences with block tables of their own, prefilled apart and
 * then decoded in one pass, as the scheduler does. */
static long
work_two_seqs(struct engine_ctx *c, float *out)
{
	static const int32_t tab_a[] = { 3 }, tab_b[] = { 5, 1 };
	const int32_t *tabs[40];
	int32_t tok[40], pos[40], rows[2];
	struct engine_ctx_info ci;
	char err[PRIVAI_ERR_LEN];

	engine_ctx_info(c, &ci);
	for (int i = 0; i < 20; i++) {
		tok[i] = (int32_t)((i * 31 + 5) % ci.n_vocab);
		pos[i] = i;
		tabs[i] = i < 5 ? tab_a : tab_b;
	}
	/* A: positions 0..4; B: 0..14 (its second block holds 16..) */
	for (int i = 5; i < 20; i++)
		pos[i] = i - 5;
	struct compute_batch pre = { .n = 20, .tokens = tok, .pos = pos, .table = tabs, .n_out = 0, .out_rows = rows };
	if (engine_forward(c, &pre, NULL, err) < 0)
		return -1;
	/* then B on to position 17 (into its second block) and A at 5 */
	int32_t t2[4] = { 7, 8, 9, 10 }, p2[4] = { 15, 16, 17, 5 };
	const int32_t *tb2[4] = { tab_b, tab_b, tab_b, tab_a };
	rows[0] = 2;
	rows[1] = 3;
	struct compute_batch step = { .n = 4, .tokens = t2, .pos = p2, .table = tb2, .n_out = 2, .out_rows = rows };
	if (engine_forward(c, &step, out, err) < 0) {
		fprintf(stderr, "work_two_seqs: %s\n", err);
		return -1;
	}
	return 2L * ci.n_vocab;
}

/* A pass of 400 tokens: its step description needs a second message. */
static long
work_long(struct engine_ctx *c, float *out)
{
	struct engine_ctx_info ci;
	int32_t ids[400];
	char err[PRIVAI_ERR_LEN];

	engine_ctx_info(c, &ci);
	for (int i = 0; i < 400; i++)
		ids[i] = (int32_t)((i * 104729 + 3) % ci.n_vocab);
	if (engine_decode(c, ids, 400, 0, out, err) < 0) {
		fprintf(stderr, "work_long: %s\n", err);
		return -1;
	}
	return ci.n_vocab;
}

static void
compare(const struct engine_model *m, const char *name, int size, workload_fn *work, const char *wname, double bound)
{
	struct engine_ctx_params cp = { .n_ctx = 512, .n_batch = 512, .n_threads = 1, .n_kv_blocks = 64 };
	size_t cap = 27 * (size_t)m->hp.n_vocab;
	float *want = calloc(cap, sizeof(float)), *got = calloc(cap, sizeof(float));
	struct rank_arg args[MAX_RANKS];
	struct engine_ctx *c = NULL;
	char err[PRIVAI_ERR_LEN];
	long n_want = -1, n_got;

	if (want == NULL || got == NULL || engine_ctx_new(m, &cp, &c, err) < 0) {
		CHECK(0, "%s: a whole-model context: %s", name, err);
		goto out;
	}
	n_want = work(c, want);
	engine_ctx_free(c);
	n_got = run_group(m, &cp, size, work, got, args);
	for (int r = 0; r < size; r++)
		CHECK(args[r].ctx_status == 0, "%s tp %d: rank %d's context: %s", name, size, r, args[r].err);
	CHECK(n_want > 0 && n_got == n_want, "%s tp %d %s: %ld logits, %ld alone", name, size, wname, n_got, n_want);
	if (n_want > 0 && n_got == n_want) {
		double e = rel_l2(want, got, n_want);
		CHECK(e <= bound, "%s tp %d %s: relative L2 %.3g > %.3g", name, size, wname, e, bound);
	}
out:
	free(want);
	free(got);
}

/* The ranks' parts cover every weight byte exactly once. */
static void
check_parts(const struct engine_model *m, const char *name, int size)
{
	struct tp_part whole, p;
	char err[PRIVAI_ERR_LEN];
	size_t sum = 0;
	int heads = 0, ff = 0, vocab = 0;

	tp_part_plan(m, 0, 1, &whole, err);
	for (int r = 0; r < size; r++) {
		if (tp_part_plan(m, r, size, &p, err) < 0) {
			CHECK(0, "%s: rank %d of %d: %s", name, r, size, err);
			return;
		}
		CHECK(p.head0 == heads && p.ff0 == ff && p.vocab0 == vocab, "%s: rank %d's slices follow rank %d's",
		      name, r, r - 1);
		CHECK(p.kv_head0 * (m->hp.n_head / m->hp.n_head_kv) <= p.head0 &&
			      p.head0 + p.n_head <= (p.kv_head0 + p.n_head_kv) * (m->hp.n_head / m->hp.n_head_kv),
		      "%s: rank %d's query heads %d.. read only its KV heads %d..", name, r, p.head0, p.kv_head0);
		heads += p.n_head;
		ff += p.n_ff;
		vocab += p.n_vocab;
		sum += tp_part_weight_bytes(m, &p);
	}
	CHECK(heads == m->hp.n_head && ff == m->hp.n_ff && vocab == m->hp.n_vocab,
	      "%s: %d ranks cover %d heads, %d of the MLP, %d tokens", name, size, heads, ff, vocab);
	/* KV heads replicated over ranks count once per rank */
	if (m->hp.n_head_kv % size == 0)
		CHECK(sum == tp_part_weight_bytes(m, &whole), "%s: %d ranks hold %zu bytes, the model %zu", name, size,
		      sum, tp_part_weight_bytes(m, &whole));
	else
		CHECK(sum > tp_part_weight_bytes(m, &whole), "%s: shared KV heads are held by each rank", name);
}

static void
check_refusals(const struct engine_model *m)
{
	struct tp_part p;
	char err[PRIVAI_ERR_LEN] = "";

	CHECK(tp_part_plan(m, 0, 3, &p, err) < 0 && strstr(err, "8 attention heads do not divide among 3 ranks") &&
		      strstr(err, "1, 2, 4, 8"),
	      "3 ranks refused with the counts that work: %s", err);
	CHECK(tp_part_plan(m, 0, 16, &p, err) < 0 && strstr(err, "attention heads"), "16 ranks refused: %s", err);
	CHECK(tp_part_plan(m, 2, 2, &p, err) < 0, "rank 2 of 2 refused");
	/* the same model with K-quant weights: 768 / 2 columns of ffn_down cut its 256-value blocks */
	struct engine_model km = *m;
	struct model_layer *layers = calloc((size_t)m->hp.n_layer, sizeof(*layers));
	if (layers == NULL)
		return;
	memcpy(layers, m->layers, (size_t)m->hp.n_layer * sizeof(*layers));
	layers[1].w_down.type = 12; /* Q4_K */
	km.layers = layers;
	err[0] = '\0';
	CHECK(tp_part_plan(&km, 0, 2, &p, err) < 0 && strstr(err, "blk.1.ffn_down.weight is Q4_K") &&
		      strstr(err, "384") && strstr(err, "cut a block"),
	      "a cut block refused by name: %s", err);
	free(layers);
}

int
main(void)
{
	static const struct {
		const char *file;
		double bound;
	} models[] = {
		/* float weights: the sum of partial products in another order,
		 * grown by 4 layers of random weights (a split's own rounding is
		 * 4e-7 on one layer; the scalar and AVX-512 paths of one engine
		 * differ by 2e-5 on this model); test_engine_tp.py holds F32
		 * weights to 1e-5 on models of 1 and 2 layers */
		{ "tiny-llama-spm-f16.gguf", 1e-4 },
		/* quantized: the bound the issue sets (llama.cpp's goldens allow 2e-2) */
		{ "tiny-llama-spm-q8_0.gguf", 2e-3 },
		{ "tiny-llama-spm-q4_0.gguf", 2e-3 },
		{ "tiny-llama3-bpe-q8_0.gguf", 2e-3 }, /* 2 KV heads: shared by 2 ranks at tp 4; vocab 50257 */
	};
	const char *dir = fixtures_dir();
	char path[512], err[PRIVAI_ERR_LEN];

	if (dir == NULL)
		return test_summary();
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
		struct engine_model *m = NULL;
		snprintf(path, sizeof(path), "%s/models/%s", dir, models[i].file);
		if (engine_model_load(path, &m, err) < 0) {
			CHECK(0, "%s: %s", path, err);
			continue;
		}
		for (int size = 2; size <= 4; size *= 2) {
			check_parts(m, models[i].file, size);
			compare(m, models[i].file, size, work_prompt, "prompt", models[i].bound);
			compare(m, models[i].file, size, work_two_seqs, "two sequences", models[i].bound);
		}
		if (i == 0) {
			compare(m, models[i].file, 2, work_long, "400 tokens", models[i].bound);
			check_refusals(m);
			/* the layout docs/performance.md measures the split against */
			setenv("PRIVAI_TP_OUTPUT", "rank0", 1);
			compare(m, models[i].file, 2, work_two_seqs, "logits on rank 0 alone", models[i].bound);
			unsetenv("PRIVAI_TP_OUTPUT");
		}
		engine_model_free(m);
	}
	return test_summary();
}
