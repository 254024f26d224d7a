/*
 * The engine against the reference outputs in ../shared/fixtures/golden:
 * for each model and prompt, the same prompt ids from the tokenizer, logits
 * within the stated relative L2 error at every prompt position, and the
 * same greedy continuation up to the first low-margin step.
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "testlib.h"
#include "privai/model.h"
#include "privai/tokenizer.h"

static const char *prompts[] = {
	"The quick brown fox jumps over the lazy dog. Private AI keeps data on premises.",
	"def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n# Привет, 世界! 🚀 GPU×8",
};

static const struct {
	const char *model;
	double tol;
} models[] = {
	{ "tiny-llama-spm-f16", 2e-3 },
	{ "tiny-llama-spm-q8_0", 2e-2 },
	{ "tiny-llama-spm-q4_0", 2e-2 },
	{ "tiny-llama3-bpe-q8_0", 2e-2 },
};

static int
json_ints(const cJSON *arr, int32_t *out, int cap)
{
	int n = 0;
	const cJSON *it;

	cJSON_ArrayForEach(it, arr) {
		if (n < cap)
			out[n] = (int32_t)it->valuedouble;
		n++;
	}
	return n;
}

static void
check_one(const char *dir, const char *model, double tol, int pi)
{
	char path[1024], err[PRIVAI_ERR_LEN];
	struct engine_model *m = NULL;
	struct tokenizer *tok = NULL;
	struct engine_ctx *ctx = NULL;
	struct engine_ctx_params cp = { 0 };
	size_t jlen = 0, llen = 0;
	int32_t *ids = NULL, gold_ids[512], greedy[256];
	float *logits = NULL;
	int n = 0;

	snprintf(path, sizeof(path), "%s/golden/%s.p%d.json", dir, model, pi + 1);
	char *js = read_file(path, &jlen);
	snprintf(path, sizeof(path), "%s/golden/%s.p%d.logits.f32", dir, model, pi + 1);
	float *gold = (float *)read_file(path, &llen);
	cJSON *j = js ? cJSON_Parse(js) : NULL;
	CHECK(j != NULL && gold != NULL, "%s p%d: cannot read golden files", model, pi + 1);
	if (j == NULL || gold == NULL)
		goto out;
	snprintf(path, sizeof(path), "%s/models/%s.gguf", dir, model);
	if (engine_model_load(path, &m, err) < 0 || tokenizer_load(m->file, &tok, err) < 0 ||
	    engine_ctx_new(m, &cp, &ctx, err) < 0) {
		CHECK(0, "%s: %s", model, err);
		goto out;
	}
	int n_gold = json_ints(cJSON_GetObjectItem(j, "prompt_ids"), gold_ids, 512);
	int r = tokenizer_encode(tok, prompts[pi], strlen(prompts[pi]), 1, 1, &ids, &n, err);
	int same = r == 0 && n == n_gold;
	for (int i = 0; same && i < n; i++)
		same = ids[i] == gold_ids[i];
	CHECK(same, "%s p%d: prompt ids differ from the reference (%d vs %d tokens)", model, pi + 1, n, n_gold);

	int V = m->hp.n_vocab;
	CHECK(llen == (size_t)n_gold * V * sizeof(float), "%s: logits file size", model);
	logits = malloc((size_t)n_gold * V * sizeof(float));
	if (logits == NULL || engine_decode(ctx, gold_ids, n_gold, 1, logits, err) < 0) {
		CHECK(0, "%s: decode: %s", model, err);
		goto out;
	}
	double worst = 0;
	for (int i = 0; i < n_gold; i++) {
		double d = 0, g = 0;
		for (int v = 0; v < V; v++) {
			double a = logits[(size_t)i * V + v], b = gold[(size_t)i * V + v];
			d += (a - b) * (a - b);
			g += b * b;
		}
		worst = fmax(worst, sqrt(d / g));
	}
	CHECK(worst <= tol, "%s p%d: worst relative L2 error %.3g > %.3g", model, pi + 1, worst, tol);

	/* greedy continuation, fed back token by token, until a near-tie */
	int n_greedy = json_ints(cJSON_GetObjectItem(j, "greedy"), greedy, 256);
	const cJSON *margins = cJSON_GetObjectItem(j, "greedy_margins");
	const float *last = logits + (size_t)(n_gold - 1) * V;
	float *step = malloc((size_t)V * sizeof(float));
	int matched = 0, compared = 0;
	for (int s = 0; step != NULL && s < n_greedy && s < 256; s++) {
		if (cJSON_GetArrayItem(margins, s)->valuedouble < 0.1)
			break;
		int best = 0;
		for (int v = 1; v < V; v++)
			if (last[v] > last[best])
				best = v;
		compared++;
		if (best != greedy[s])
			break;
		matched++;
		if (engine_decode(ctx, &greedy[s], 1, 0, step, err) < 0)
			break;
		last = step;
	}
	CHECK(compared > 0 && matched == compared, "%s p%d: greedy matched %d of %d steps", model, pi + 1,
	      matched, compared);
	printf("%s p%d: %d prompt tokens, worst rel L2 %.2e (tol %.0e), greedy %d/%d\n", model, pi + 1,
	       n_gold, worst, tol, matched, compared);
	free(step);
out:
	free(logits);
	free(ids);
	cJSON_Delete(j);
	free(js);
	free(gold);
	engine_ctx_free(ctx);
	tokenizer_free(tok);
	engine_model_free(m);
}

int
main(void)
{
	const char *dir = fixtures_dir();

	for (size_t i = 0; dir != NULL && i < sizeof(models) / sizeof(models[0]); i++)
		for (int p = 0; p < 2; p++)
			check_one(dir, models[i].model, models[i].tol, p);
	return test_summary();
}
