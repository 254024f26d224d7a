/*
 * LoRA adapters against merged weights: the test writes a random rank-4
 * adapter for the f16 fixture model and a copy of the model with
 * W + (alpha / rank) B A merged in (float32), then compares the logits of
 * the base model run with the adapter on the fly to the merged model's;
 * a batch mixing tokens with and without the adapter gives the base rows
 * exactly as the base model alone; bad adapters are refused by name; the
 * scheduler will not unload an adapter a queued or running request uses.
 */
#include <math.h>
#include <unistd.h>

#include "testlib.h"
#include "privai/lora.h"
#include "privai/scheduler.h"
#include "privai/tensor_type.h"
#include "privai/tokenizer.h"

#define RANK 4
#define ALPHA 8.0f

static const char *const adapted[] = { "attn_q", "attn_v", "attn_output", "ffn_up", "ffn_down" };

static float
rnd(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 0.2f;
}

/* The adapter's A (rank x cols) and B (rows x rank) for one weight. */
static void
make_pair(uint32_t *seed, int rows, int cols, float **a, float **b)
{
	*a = malloc((size_t)RANK * cols * sizeof(float));
	*b = malloc((size_t)rows * RANK * sizeof(float));
	for (int i = 0; i < RANK * cols; i++)
		(*a)[i] = rnd(seed);
	for (int i = 0; i < rows * RANK; i++)
		(*b)[i] = rnd(seed);
}

static int
is_adapted(const char *name, int *ret_layer)
{
	int layer, off = 0;

	if (sscanf(name, "blk.%d.%n", &layer, &off) != 1)
		return 0;
	for (size_t k = 0; k < sizeof(adapted) / sizeof(adapted[0]); k++) {
		size_t n = strlen(adapted[k]);
		if (strncmp(name + off, adapted[k], n) == 0 && strcmp(name + off + n, ".weight") == 0) {
			*ret_layer = layer;
			return 1;
		}
	}
	return 0;
}

/* Write the adapter and the merged model; 0 or -1. */
static int
write_files(const struct gguf_file *base, const char *adapter_path, const char *merged_path, char *err)
{
	struct gguf_writer *wa = NULL, *wm = NULL;
	uint32_t seed = 7;
	int rc = -1;

	if (gguf_writer_new(&wa) < 0 || gguf_writer_new(&wm) < 0)
		goto out;
	gguf_writer_set_str(wa, "general.type", "adapter");
	gguf_writer_set_str(wa, "adapter.type", "lora");
	gguf_writer_set_str(wa, "general.architecture", "llama");
	gguf_writer_set_f32(wa, "adapter.lora.alpha", ALPHA);
	for (uint64_t i = 0; i < base->n_kv; i++)
		if (gguf_writer_set_kv(wm, &base->kv[i]) < 0)
			goto out;
	for (uint64_t i = 0; i < base->n_tensors; i++) {
		const struct gguf_tensor *t = &base->tensors[i];
		int layer;
		if (!is_adapted(t->name, &layer)) {
			if (gguf_writer_add_tensor(wm, t->name, t->type, t->n_dims, t->ne, t->data) < 0)
				goto out;
			continue;
		}
		int cols = (int)t->ne[0], rows = (int)t->ne[1];
		float *a, *b, *w = malloc((size_t)rows * cols * sizeof(float));
		make_pair(&seed, rows, cols, &a, &b);
		tensor_dequantize_row(t->type, t->data, w, (size_t)rows * cols);
		for (int r = 0; r < rows; r++)
			for (int c = 0; c < cols; c++) {
				float d = 0;
				for (int k = 0; k < RANK; k++)
					d += b[(size_t)r * RANK + k] * a[(size_t)k * cols + c];
				w[(size_t)r * cols + c] += ALPHA / RANK * d;
			}
		char name[128];
		uint64_t ne_a[2] = { (uint64_t)cols, RANK }, ne_b[2] = { RANK, (uint64_t)rows };
		snprintf(name, sizeof(name), "%s.lora_a", t->name);
		int ok = gguf_writer_add_tensor(wa, name, TT_F32, 2, ne_a, a) == 0;
		snprintf(name, sizeof(name), "%s.lora_b", t->name);
		ok = ok && gguf_writer_add_tensor(wa, name, TT_F32, 2, ne_b, b) == 0;
		ok = ok && gguf_writer_add_tensor(wm, t->name, TT_F32, 2, t->ne, w) == 0;
		free(a);
		free(b);
		free(w);
		if (!ok)
			goto out;
	}
	if (gguf_writer_write(wa, adapter_path, err) < 0 || gguf_writer_write(wm, merged_path, err) < 0)
		goto out;
	rc = 0;
out:
	gguf_writer_free(wa);
	gguf_writer_free(wm);
	return rc;
}

/* Logits of every position of ids, with every token on adapter k (0: none);
 * with mixed, the second half of the batch runs without it. */
static float *
run(const struct engine_model *m, struct lora_adapter *a, const int32_t *ids, int n, int k, int mixed)
{
	struct engine_ctx_params cp = { .n_ctx = 128, .n_batch = 128, .n_threads = 2, .device = "cpu" };
	struct engine_ctx *c;
	struct engine_ctx_info ci;
	char err[PRIVAI_ERR_LEN];
	int32_t pos[128], rows[128], blocks[8], adapter[128];
	const int32_t *table[128];
	int32_t ids2[128];

	if (engine_ctx_new(m, &cp, &c, err) < 0) {
		CHECK(0, "%s", err);
		return NULL;
	}
	if (a != NULL && engine_ctx_add_lora(c, a, err) != 1)
		CHECK(0, "add the adapter: %s", err);
	engine_ctx_info(c, &ci);
	for (int b = 0; b < 8; b++)
		blocks[b] = b;
	/* mixed: the prompt twice, as two sequences (blocks 0-3, 4-7) */
	int total = mixed ? 2 * n : n;
	for (int i = 0; i < total; i++) {
		int s = i >= n, p = i - s * n;
		ids2[i] = ids[p];
		pos[i] = p;
		rows[i] = i;
		table[i] = blocks + 4 * s;
		adapter[i] = s ? 0 : k;
	}
	float *logits = malloc((size_t)total * ci.n_vocab * sizeof(float));
	struct compute_batch b = { total, ids2, pos, table, total, rows, 0 };
	if (engine_forward_ex(c, &b, k ? adapter : NULL, logits, NULL, err) < 0) {
		CHECK(0, "forward: %s", err);
		free(logits);
		logits = NULL;
	}
	engine_ctx_free(c);
	return logits;
}

static void
test_refusals(const struct engine_model *m, const char *base_path, const char *dir)
{
	char err[PRIVAI_ERR_LEN], path[1024];
	struct lora_adapter *a = NULL;
	struct gguf_writer *w = NULL;
	float x[64 * 4] = { 0 };

	CHECK(lora_load(base_path, m, 1.0f, &a, err) < 0 && strstr(err, "not a LoRA adapter"),
	      "a model is not an adapter: %s", err);
	snprintf(path, sizeof(path), "%s/bad-lora.gguf", dir);
	uint64_t ne[2] = { 64, 4 };
	if (gguf_writer_new(&w) == 0) {
		gguf_writer_set_str(w, "general.type", "adapter");
		gguf_writer_set_str(w, "adapter.type", "lora");
		gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_a", TT_F32, 2, ne, x);
		gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_b", TT_F32, 2, ne, x);
		gguf_writer_write(w, path, err);
		gguf_writer_free(w);
	}
	CHECK(lora_load(path, m, 1.0f, &a, err) < 0 && strstr(err, "blk.0.attn_q.weight.lora_a"),
	      "an A of the wrong shape is refused by name: %s", err);
	unlink(path);
}

/* An adapter cannot be unloaded while a request holds it: the request
 * counts as a user from its submission (so the refusal does not depend on
 * timing), the unload succeeds once it is cancelled and collected, and a
 * request for the unloaded adapter is refused. */
static void
test_unload_in_use(const struct engine_model *m, struct lora_adapter *a)
{
	struct engine_ctx_params cp = { .n_ctx = 128, .n_batch = 32, .n_threads = 2, .device = "cpu" };
	struct scheduler_params sp = { .max_seqs = 2, .max_queue = 4 };
	struct engine_ctx *c = NULL;
	struct scheduler *s = NULL;
	struct tokenizer *tok = NULL;
	struct lora_adapter *out = NULL;
	char err[PRIVAI_ERR_LEN];

	if (tokenizer_load(m->file, &tok, err) < 0 || engine_ctx_new(m, &cp, &c, err) < 0 ||
	    scheduler_new(c, tok, &sp, &s, err) < 0) {
		CHECK(0, "scheduler: %s", err);
		goto out;
	}
	int k = scheduler_lora_add(s, a, err);
	CHECK(k == 1, "adapter added as %d: %s", k, err);
	struct sched_request *r = sched_request_new(8, 100, -1, 0);
	if (r == NULL)
		goto out;
	for (int i = 0; i < 8; i++)
		r->prompt[i] = 1 + i;
	sampler_params_default(&r->sampling);
	r->ignore_eos = 1;
	r->adapter = k;
	CHECK(scheduler_submit(s, r, err) == 0, "submit with the adapter: %s", err);
	int rc = scheduler_lora_remove(s, k, &out, err);
	CHECK(rc == PRIVAI_EBUSY && out == NULL && strstr(err, "1 request(s) use the adapter"),
	      "unload while a request holds it: %d %s", rc, err);
	scheduler_cancel(s, r);
	enum finish_reason f = FINISH_NONE;
	for (int i = 0; i < 60 && f == FINISH_NONE; i++)
		scheduler_wait(s, r, r->max_tokens, 1000, &f);
	sched_request_put(s, r);
	rc = scheduler_lora_remove(s, k, &out, err);
	CHECK(rc == 0 && out == a, "unload once the request is done: %d %s", rc, err);
	struct sched_request *late = sched_request_new(8, 4, -1, 0);
	if (late != NULL) {
		for (int i = 0; i < 8; i++)
			late->prompt[i] = 1 + i;
		sampler_params_default(&late->sampling);
		late->adapter = k;
		CHECK(scheduler_submit(s, late, err) == PRIVAI_EINVAL && strstr(err, "unloaded"),
		      "a request for the unloaded adapter is refused: %s", err);
		sched_request_put(s, late);
	}
out:
	scheduler_free(s);
	engine_ctx_free(c);
	tokenizer_free(tok);
}

int
main(void)
{
	const char *dir = fixtures_dir();
	char base_path[1024], ad_path[1024], mg_path[1024], err[PRIVAI_ERR_LEN], tmp[] = "/tmp/privai-lora-XXXXXX";
	struct engine_model *base = NULL, *merged = NULL;
	struct lora_adapter *a = NULL;
	int32_t ids[24];
	int n = 24;

	if (dir == NULL)
		return test_summary();
	snprintf(base_path, sizeof(base_path), "%s/models/tiny-llama-spm-f16.gguf", dir);
	if (mkdtemp(tmp) == NULL || engine_model_load(base_path, &base, err) < 0) {
		CHECK(0, "%s", err);
		return test_summary();
	}
	snprintf(ad_path, sizeof(ad_path), "%s/adapter.gguf", tmp);
	snprintf(mg_path, sizeof(mg_path), "%s/merged.gguf", tmp);
	if (write_files(base->file, ad_path, mg_path, err) < 0 || engine_model_load(mg_path, &merged, err) < 0 ||
	    lora_load(ad_path, base, 1.0f, &a, err) < 0) {
		CHECK(0, "adapter and merged model: %s", err);
		goto out;
	}
	CHECK(a->n_pairs == 5 * base->hp.n_layer && fabsf(a->pairs[0][LORA_Q].scale - ALPHA / RANK) < 1e-6f,
	      "%d pairs loaded, scale %.2f", a->n_pairs, a->pairs[0][LORA_Q].scale);
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)(1 + (i * 7919) % (base->hp.n_vocab - 1));
	int V = base->hp.n_vocab;
	float *with = run(base, a, ids, n, 1, 0), *ref = run(merged, NULL, ids, n, 0, 0);
	float *plain = run(base, NULL, ids, n, 0, 0), *mixed = run(base, a, ids, n, 1, 1);
	if (with && ref && plain && mixed) {
		double worst = 0, scale = 0, moved = 0;
		int argmax_same = 0;
		for (int t = 0; t < n; t++) {
			int am = 0, bm = 0;
			for (int v = 0; v < V; v++) {
				size_t i = (size_t)t * V + v;
				worst = fmax(worst, fabs((double)with[i] - ref[i]));
				scale = fmax(scale, fabs((double)ref[i]));
				moved = fmax(moved, fabs((double)plain[i] - ref[i]));
				am = with[i] > with[(size_t)t * V + am] ? v : am;
				bm = ref[i] > ref[(size_t)t * V + bm] ? v : bm;
			}
			argmax_same += am == bm;
		}
		CHECK(worst <= 2e-3 * scale && moved > 100 * worst && argmax_same == n,
		      "on the fly = merged: max diff %.3g (logits to %.3g; the adapter moves them by %.3g), argmax "
		      "same at %d of %d",
		      worst, scale, moved, argmax_same, n);
		printf("lora: max |on the fly - merged| %.3g of logits up to %.3g; the adapter moves them %.3g\n",
		       worst, scale, moved);
		CHECK(memcmp(mixed, with, (size_t)n * V * sizeof(float)) == 0 &&
			      memcmp(mixed + (size_t)n * V, plain, (size_t)n * V * sizeof(float)) == 0,
		      "one batch with and without the adapter: each half as its own run, bit for bit");
	}
	free(with);
	free(ref);
	free(plain);
	free(mixed);
	test_refusals(base, base_path, tmp);
	test_unload_in_use(base, a);
out:
	lora_free(a);
	engine_model_free(merged);
	engine_model_free(base);
	unlink(ad_path);
	unlink(mg_path);
	rmdir(tmp);
	return test_summary();
}
