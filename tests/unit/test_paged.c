/*
 * The paged KV cache and multi-sequence batches, against the golden logits:
 * two prompts prefilled in interleaved chunks through scattered block
 * tables give the reference logits at every position; a third sequence
 * that shares the first prompt's first block (a prefix-cache hit) and runs
 * only the rest gives the same logits as the full run; bad batches are
 * refused by name.
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "testlib.h"
#include "privai/model.h"

#define MODEL "tiny-llama-spm-f16"

struct prompt {
	int32_t ids[512];
	int n;
	float *gold; /* n x V */
};

static int
load_prompt(const char *dir, int pi, int V, struct prompt *p)
{
	char path[1024];
	size_t jlen = 0, llen = 0;
	const cJSON *it;

	snprintf(path, sizeof(path), "%s/golden/%s.p%d.json", dir, MODEL, pi);
	char *js = read_file(path, &jlen);
	cJSON *j = js != NULL ? cJSON_Parse(js) : NULL;
	free(js);
	if (j == NULL)
		return -1;
	p->n = 0;
	cJSON_ArrayForEach (it, cJSON_GetObjectItem(j, "prompt_ids"))
		if (p->n < 512)
			p->ids[p->n++] = (int32_t)it->valuedouble;
	cJSON_Delete(j);
	snprintf(path, sizeof(path), "%s/golden/%s.p%d.logits.f32", dir, MODEL, pi);
	p->gold = (float *)read_file(path, &llen);
	return p->gold != NULL && llen == (size_t)p->n * V * sizeof(float) ? 0 : -1;
}

static double
rel_l2(const float *a, const float *b, int V)
{
	double d = 0, g = 0;

	for (int v = 0; v < V; v++) {
		d += ((double)a[v] - b[v]) * ((double)a[v] - b[v]);
		g += (double)b[v] * b[v];
	}
	return sqrt(d / g);
}

/* Queue tokens [from, to) of prompt p, whose block table is tab, into the
 * batch arrays; every one of them wants logits. */
static void
add_span(const struct prompt *p, const int32_t *tab, int from, int to, int32_t *tok, int32_t *pos,
	 const int32_t **table, int32_t *rows, int *n)
{
	for (int i = from; i < to; i++, (*n)++) {
		tok[*n] = p->ids[i];
		pos[*n] = i;
		table[*n] = tab;
		rows[*n] = *n;
	}
}

static double
run(struct engine_ctx *c, int n, int32_t *tok, int32_t *pos, const int32_t **table, int32_t *rows, float *out,
    char *err)
{
	struct compute_batch b = { n, tok, pos, table, n, rows, 0 };

	return engine_forward(c, &b, out, err);
}

int
main(void)
{
	const char *dir = fixtures_dir();
	char path[1024], err[PRIVAI_ERR_LEN];
	struct engine_model *m = NULL;
	struct engine_ctx *c = NULL;
	struct engine_ctx_params cp = {
		.n_ctx = 256, .n_batch = 64, .n_threads = 2, .n_kv_blocks = 16, .device = test_device()
	};
	static struct prompt a, b;
	int32_t tok[64], pos[64], rows[64];
	const int32_t *table[64];
	/* scattered, out-of-order blocks; C shares A's first block */
	static const int32_t tab_a[] = { 7, 2 }, tab_b[] = { 5, 11, 0 }, tab_c[] = { 7, 9 };

	if (dir == NULL)
		return test_summary();
	snprintf(path, sizeof(path), "%s/models/%s.gguf", dir, MODEL);
	if (engine_model_load(path, &m, err) < 0 || engine_ctx_new(m, &cp, &c, err) < 0) {
		CHECK(0, "%s", err);
		return test_summary();
	}
	int V = m->hp.n_vocab;
	CHECK(load_prompt(dir, 1, V, &a) == 0 && load_prompt(dir, 2, V, &b) == 0, "golden prompts load");
	CHECK(a.n > 16 && a.n <= 32 && b.n > 32 && b.n <= 48, "prompt lengths suit the block tables (%d, %d)", a.n,
	      b.n);
	float *out = malloc((size_t)64 * V * sizeof(float));
	float *full_a = malloc((size_t)a.n * V * sizeof(float));
	if (out == NULL || full_a == NULL || a.gold == NULL || b.gold == NULL || a.n <= 16 || a.n > 32 || b.n <= 32 ||
	    b.n > 48)
		return test_summary();

	/* step 1: A[0,12) and B[0,20); step 2: A[12,n) and B[20,n) */
	double worst = 0;
	int ok = 1, splits[2][2] = { { 0, 12 }, { 0, 20 } };
	for (int step = 0; step < 2 && ok; step++) {
		int n = 0, a_to = step == 0 ? 12 : a.n, b_to = step == 0 ? 20 : b.n;
		int a_from = step == 0 ? 0 : splits[0][1], b_from = step == 0 ? 0 : splits[1][1];
		add_span(&a, tab_a, a_from, a_to, tok, pos, table, rows, &n);
		int n_a = n;
		add_span(&b, tab_b, b_from, b_to, tok, pos, table, rows, &n);
		if (run(c, n, tok, pos, table, rows, out, err) < 0) {
			CHECK(0, "forward: %s", err);
			ok = 0;
			break;
		}
		for (int i = 0; i < n; i++) {
			const struct prompt *p = i < n_a ? &a : &b;
			worst = fmax(worst, rel_l2(out + (size_t)i * V, p->gold + (size_t)pos[i] * V, V));
		}
		memcpy(full_a + (size_t)a_from * V, out, (size_t)n_a * V * sizeof(float));
	}
	CHECK(ok && worst <= 2e-3, "interleaved chunks through scattered blocks match the reference (%.2e)", worst);

	/* C: A's first block is already in the cache; run positions 16.. only */
	int n = 0;
	add_span(&a, tab_c, 16, a.n, tok, pos, table, rows, &n);
	worst = 0;
	if (ok && run(c, n, tok, pos, table, rows, out, err) == 0)
		for (int i = 0; i < n; i++)
			worst = fmax(worst, rel_l2(out + (size_t)i * V, full_a + (size_t)(16 + i) * V, V));
	else
		worst = INFINITY;
	/* The CPU's kernels give the same bits whatever the batch; on cuda the
	 * chunk sizes choose between the matrix-vector kernel and cuBLAS, whose
	 * sums run in other orders.  A misread block costs far more than 1e-4. */
	double tol = test_device() != NULL ? 1e-4 : 1e-5;
	CHECK(worst <= tol, "a sequence reusing a cached prefix block matches the full run (%.2e)", worst);

	/* refusals: a block outside the pool, a position past the context */
	static const int32_t bad_tab[] = { 16 };
	n = 0;
	add_span(&a, bad_tab, 0, 1, tok, pos, table, rows, &n);
	CHECK(run(c, n, tok, pos, table, rows, out, err) == PRIVAI_EINVAL && strstr(err, "KV block 16"),
	      "a block outside the pool is refused: %s", err);
	pos[0] = 256;
	table[0] = tab_a;
	CHECK(run(c, 1, tok, pos, table, rows, out, err) == PRIVAI_EINVAL && strstr(err, "position 256"),
	      "a position outside the context is refused: %s", err);
	CHECK(run(c, 65, tok, pos, table, rows, out, err) == PRIVAI_EINVAL, "an oversized batch is refused");
	printf("paged: %d + %d tokens in interleaved chunks, shared-prefix rerun of %d\n", a.n, b.n, a.n - 16);

	free(out);
	free(full_a);
	free(a.gold);
	free(b.gold);
	engine_ctx_free(c);
	engine_model_free(m);
	return test_summary();
}
