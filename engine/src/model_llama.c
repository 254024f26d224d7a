/*
 * The llama-family forward pass (llama, qwen2) and the context it runs in.
 *
 * Per layer, for a batch of n tokens at consecutive positions:
 *   h = rmsnorm(x) * attn_norm
 *   q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv);  rope(q, k)
 *   append k, v to the cache;  a = softmax(q k^T / sqrt(hd)) v  (causal, GQA)
 *   x += Wo a
 *   h = rmsnorm(x) * ffn_norm;  x += Wdown (silu(Wgate h) * Wup h)
 * then logits = Wout (rmsnorm(x) * output_norm).
 * Every step is a compute_ops call, so the same code drives any backend.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "privai/model.h"

#define DEFAULT_CTX_CAP 4096
#define DEFAULT_BATCH 256

static void
add_bias(float *x, const float *b, int n, int dim)
{
	if (b == NULL)
		return;
	for (int t = 0; t < n; t++)
		for (int i = 0; i < dim; i++)
			x[(int64_t)t * dim + i] += b[i];
}

void
engine_ctx_free(struct engine_ctx *c)
{
	if (c == NULL)
		return;
	compute_cpu_free(c->compute);
	free(c->k_cache);
	free(c->v_cache);
	free(c->seq0_table);
	free(c->x);
	free(c->xb);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->hb);
	free(c->hb2);
	free(c->pos);
	free(c->table);
	free(c->d_table);
	free(c->d_pos);
	free(c->d_rows);
	free(c->logits);
	free(c);
}

static float *
falloc(size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

static int
ctx_size(struct engine_ctx *c, const struct engine_ctx_params *p, char *err)
{
	const struct model_hparams *hp = &c->model->hp;
	int nth;

	c->n_ctx = p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < DEFAULT_CTX_CAP ? hp->n_ctx_train : DEFAULT_CTX_CAP);
	c->n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_BATCH;
	if (c->n_batch > c->n_ctx && p->n_kv_blocks == 0)
		c->n_batch = c->n_ctx;
	if (c->n_ctx > (1 << 24) || c->n_batch > (1 << 16))
		return privai_fail(err, PRIVAI_ERANGE, "context length %d or batch %d is too large", c->n_ctx,
				   c->n_batch);
	c->n_kv_blocks = p->n_kv_blocks > 0 ? p->n_kv_blocks : (c->n_ctx + ENGINE_KV_BLOCK - 1) / ENGINE_KV_BLOCK;
	if (c->n_kv_blocks > (1 << 24))
		return privai_fail(err, PRIVAI_ERANGE, "%d KV blocks is too many", c->n_kv_blocks);
	nth = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	c->n_threads = nth < 1 ? 1 : nth;
	return PRIVAI_OK;
}

int
engine_ctx_new(const struct engine_model *m, const struct engine_ctx_params *p, struct engine_ctx **ret_ctx, char *err)
{
	const struct model_hparams *hp = &m->hp;
	struct engine_ctx *c = calloc(1, sizeof(*c));
	int r;

	if (c == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	c->model = m;
	if ((r = ctx_size(c, p, err)) < 0) {
		engine_ctx_free(c);
		return r;
	}
	if ((r = compute_cpu_new(c->n_threads, &c->compute)) < 0) {
		int nth = c->n_threads;
		engine_ctx_free(c);
		return privai_fail(err, r, "cannot start %d compute threads", nth);
	}
	size_t kvd = (size_t)hp->n_head_kv * hp->head_dim, qd = (size_t)hp->n_head * hp->head_dim;
	size_t nb = (size_t)c->n_batch, wide = qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd;
	size_t kv_rows = (size_t)hp->n_layer * c->n_kv_blocks * ENGINE_KV_BLOCK;
	size_t seq0_blocks = ((size_t)c->n_ctx + ENGINE_KV_BLOCK - 1) / ENGINE_KV_BLOCK;
	c->kv_bytes = 2 * kv_rows * kvd * sizeof(float);
	c->k_cache = falloc(kv_rows * kvd);
	c->v_cache = falloc(kv_rows * kvd);
	c->seq0_table = calloc(seq0_blocks, sizeof(int32_t));
	c->x = falloc(nb * hp->n_embd);
	c->xb = falloc(nb * wide);
	c->q = falloc(nb * qd);
	c->k = falloc(nb * kvd);
	c->v = falloc(nb * kvd);
	c->att = falloc(nb * wide);
	c->hb = falloc(nb * hp->n_ff);
	c->hb2 = falloc(nb * hp->n_ff);
	c->pos = calloc(nb, sizeof(int32_t));
	c->table = calloc(nb, sizeof(*c->table));
	c->d_table = calloc(nb, sizeof(*c->d_table));
	c->d_pos = calloc(nb, sizeof(int32_t));
	c->d_rows = calloc(nb, sizeof(int32_t));
	c->logits = falloc(nb * hp->n_vocab);
	int64_t max_cols = hp->n_ff > (int)wide ? hp->n_ff : (int64_t)wide;
	if (c->k_cache == NULL || c->v_cache == NULL || c->seq0_table == NULL || c->x == NULL || c->xb == NULL ||
	    c->q == NULL || c->k == NULL || c->v == NULL || c->att == NULL || c->hb == NULL || c->hb2 == NULL ||
	    c->pos == NULL || c->table == NULL || c->d_table == NULL || c->d_pos == NULL || c->d_rows == NULL ||
	    c->logits == NULL || c->compute->ops->reserve(c->compute, max_cols, c->n_batch, c->n_ctx) < 0) {
		int n_ctx = c->n_ctx;
		size_t kv_mib = c->kv_bytes >> 20;
		engine_ctx_free(c);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for a context of %d tokens (KV cache %zu MiB)",
				   n_ctx, kv_mib);
	}
	for (size_t i = 0; i < seq0_blocks; i++)
		c->seq0_table[i] = (int32_t)(i < (size_t)c->n_kv_blocks ? i : 0);
	*ret_ctx = c;
	return PRIVAI_OK;
}

void
engine_ctx_reset(struct engine_ctx *c)
{
	c->n_past = 0;
}

static size_t
kv_row(const int32_t *table, int pos)
{
	return (size_t)table[pos / ENGINE_KV_BLOCK] * ENGINE_KV_BLOCK + (size_t)(pos % ENGINE_KV_BLOCK);
}

/* One layer for the n tokens whose positions and tables are in c. */
static void
forward_layer(struct engine_ctx *c, int il, int n)
{
	const struct engine_model *m = c->model;
	const struct model_hparams *hp = &m->hp;
	const struct model_layer *L = &m->layers[il];
	const struct compute_ops *op = c->compute->ops;
	struct compute *cp = c->compute;
	int qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
	size_t layer_off = (size_t)il * c->n_kv_blocks * ENGINE_KV_BLOCK * kvd;
	float *kl = c->k_cache + layer_off, *vl = c->v_cache + layer_off;

	op->rmsnorm(cp, c->x, L->attn_norm, n, hp->n_embd, hp->rms_eps, c->xb);
	op->matmul(cp, &L->wq, c->xb, n, c->q);
	op->matmul(cp, &L->wk, c->xb, n, c->k);
	op->matmul(cp, &L->wv, c->xb, n, c->v);
	add_bias(c->q, L->bq, n, qd);
	add_bias(c->k, L->bk, n, kvd);
	add_bias(c->v, L->bv, n, kvd);
	op->rope(cp, c->q, n, hp->n_head, hp->head_dim, hp->n_rot, c->pos, m->inv_freq, hp->rope_neox);
	op->rope(cp, c->k, n, hp->n_head_kv, hp->head_dim, hp->n_rot, c->pos, m->inv_freq, hp->rope_neox);
	for (int t = 0; t < n; t++) {
		size_t off = kv_row(c->table[t], c->pos[t]) * kvd;
		memcpy(kl + off, c->k + (size_t)t * kvd, (size_t)kvd * sizeof(float));
		memcpy(vl + off, c->v + (size_t)t * kvd, (size_t)kvd * sizeof(float));
	}
	op->attention(cp, c->q, n, c->pos, c->table, ENGINE_KV_BLOCK, kl, vl, (size_t)kvd, hp->n_head, hp->n_head_kv,
		      hp->head_dim, c->att);
	op->matmul(cp, &L->wo, c->att, n, c->xb);
	op->add(cp, c->x, c->xb, (size_t)n * hp->n_embd);

	op->rmsnorm(cp, c->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps, c->xb);
	op->matmul(cp, &L->w_gate, c->xb, n, c->hb);
	op->matmul(cp, &L->w_up, c->xb, n, c->hb2);
	op->swiglu(cp, c->hb, c->hb2, (size_t)n * hp->n_ff);
	op->matmul(cp, &L->w_down, c->hb, n, c->xb);
	op->add(cp, c->x, c->xb, (size_t)n * hp->n_embd);
}

static int
check_batch(const struct engine_ctx *c, const struct engine_batch *b, char *err)
{
	const struct model_hparams *hp = &c->model->hp;

	if (b->n <= 0 || b->n > c->n_batch)
		return privai_fail(err, PRIVAI_EINVAL, "a batch of %d tokens (1..%d allowed)", b->n, c->n_batch);
	if (b->n_out < 0 || b->n_out > b->n)
		return privai_fail(err, PRIVAI_EINVAL, "%d logits rows asked of %d tokens", b->n_out, b->n);
	for (int i = 0; i < b->n_out; i++)
		if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n)
			return privai_fail(err, PRIVAI_EINVAL, "logits row %d is outside the batch", b->out_rows[i]);
	for (int i = 0; i < b->n; i++) {
		if (b->tokens[i] < 0 || b->tokens[i] >= hp->n_vocab)
			return privai_fail(err, PRIVAI_EINVAL,
					   "token id %d at index %d is outside the vocabulary (0..%d)", b->tokens[i], i,
					   hp->n_vocab - 1);
		if (b->pos[i] < 0 || b->pos[i] >= c->n_ctx)
			return privai_fail(err, PRIVAI_EINVAL, "position %d at index %d is outside the context of %d",
					   b->pos[i], i, c->n_ctx);
		for (int k = 0; k <= b->pos[i] / ENGINE_KV_BLOCK; k++)
			if (b->table[i][k] < 0 || b->table[i][k] >= c->n_kv_blocks)
				return privai_fail(err, PRIVAI_EINVAL, "KV block %d is outside the pool of %d",
						   b->table[i][k], c->n_kv_blocks);
	}
	return PRIVAI_OK;
}

int
engine_forward(struct engine_ctx *c, const struct engine_batch *b, float *logits, char *err)
{
	const struct engine_model *m = c->model;
	const struct model_hparams *hp = &m->hp;
	const struct compute_ops *op = c->compute->ops;
	int r, n = b->n;

	if ((r = check_batch(c, b, err)) < 0)
		return r;
	memcpy(c->pos, b->pos, (size_t)n * sizeof(int32_t));
	memcpy(c->table, b->table, (size_t)n * sizeof(*c->table));
	op->get_rows(c->compute, &m->tok_embd, b->tokens, n, c->x);
	for (int il = 0; il < hp->n_layer; il++)
		forward_layer(c, il, n);
	if (b->n_out == 0)
		return PRIVAI_OK;
	/* gather the rows wanted into att (n x max(qd, n_embd) floats) */
	float *rows = c->att;
	for (int i = 0; i < b->n_out; i++)
		memcpy(rows + (size_t)i * hp->n_embd, c->x + (size_t)b->out_rows[i] * hp->n_embd,
		       (size_t)hp->n_embd * sizeof(float));
	op->rmsnorm(c->compute, rows, m->output_norm, b->n_out, hp->n_embd, hp->rms_eps, c->xb);
	op->matmul(c->compute, &m->output, c->xb, b->n_out, logits != NULL ? logits : c->logits);
	return PRIVAI_OK;
}

int
engine_decode(struct engine_ctx *c, const int32_t *tokens, int n, int logits_all, float *out, char *err)
{
	const struct model_hparams *hp = &c->model->hp;
	int cap = c->n_ctx < c->n_kv_blocks * ENGINE_KV_BLOCK ? c->n_ctx : c->n_kv_blocks * ENGINE_KV_BLOCK;
	int r;

	if (n <= 0)
		return privai_fail(err, PRIVAI_EINVAL, "no tokens to decode");
	if (n > cap - c->n_past)
		return privai_fail(err, PRIVAI_ERANGE, "%d tokens do not fit: context is %d tokens and %d are in use",
				   n, cap, c->n_past);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
			return privai_fail(err, PRIVAI_EINVAL,
					   "token id %d at index %d is outside the vocabulary (0..%d)", tokens[i], i,
					   hp->n_vocab - 1);
	for (int done = 0; done < n;) {
		int nb = n - done < c->n_batch ? n - done : c->n_batch;
		int last = done + nb == n;
		int n_out = logits_all ? nb : (last ? 1 : 0);
		struct engine_batch b = { .n = nb,
					  .tokens = tokens + done,
					  .n_out = n_out,
					  .pos = c->d_pos,
					  .table = c->d_table,
					  .out_rows = c->d_rows };
		for (int t = 0; t < nb; t++) {
			c->d_pos[t] = c->n_past + t;
			c->d_table[t] = c->seq0_table;
			c->d_rows[t] = logits_all ? t : nb - 1;
		}
		if ((r = engine_forward(c, &b, NULL, err)) < 0)
			return r;
		if (n_out > 0 && out != NULL) {
			float *dst = logits_all ? out + (size_t)done * hp->n_vocab : out;
			memcpy(dst, c->logits, (size_t)n_out * hp->n_vocab * sizeof(float));
		}
		c->n_past += nb;
		done += nb;
	}
	return PRIVAI_OK;
}
