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
	free(c->x);
	free(c->xb);
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->att);
	free(c->hb);
	free(c->hb2);
	free(c->pos);
	free(c->logits);
	free(c);
}

static float *
falloc(size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

int
engine_ctx_new(const struct engine_model *m, const struct engine_ctx_params *p,
	       struct engine_ctx **ret_ctx, char *err)
{
	const struct model_hparams *hp = &m->hp;
	struct engine_ctx *c = calloc(1, sizeof(*c));
	int r, nth;

	if (c == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	c->model = m;
	c->n_ctx = p->n_ctx > 0 ? p->n_ctx
				: (hp->n_ctx_train < DEFAULT_CTX_CAP ? hp->n_ctx_train : DEFAULT_CTX_CAP);
	c->n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_BATCH;
	if (c->n_batch > c->n_ctx)
		c->n_batch = c->n_ctx;
	if (c->n_ctx > (1 << 24)) {
		engine_ctx_free(c);
		return privai_fail(err, PRIVAI_ERANGE, "context length %d is too large", p->n_ctx);
	}
	nth = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (nth < 1)
		nth = 1;
	c->n_threads = nth;
	if ((r = compute_cpu_new(nth, &c->compute)) < 0) {
		engine_ctx_free(c);
		return privai_fail(err, r, "cannot start %d compute threads", nth);
	}
	size_t kvd = (size_t)hp->n_head_kv * hp->head_dim, qd = (size_t)hp->n_head * hp->head_dim;
	size_t nb = (size_t)c->n_batch, wide = qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd;
	c->kv_bytes = 2 * (size_t)hp->n_layer * (size_t)c->n_ctx * kvd * sizeof(float);
	c->k_cache = falloc((size_t)hp->n_layer * c->n_ctx * kvd);
	c->v_cache = falloc((size_t)hp->n_layer * c->n_ctx * kvd);
	c->x = falloc(nb * hp->n_embd);
	c->xb = falloc(nb * wide);
	c->q = falloc(nb * qd);
	c->k = falloc(nb * kvd);
	c->v = falloc(nb * kvd);
	c->att = falloc(nb * qd);
	c->hb = falloc(nb * hp->n_ff);
	c->hb2 = falloc(nb * hp->n_ff);
	c->pos = calloc(nb, sizeof(int32_t));
	c->logits = falloc(nb * hp->n_vocab);
	int64_t max_cols = hp->n_ff > (int)wide ? hp->n_ff : (int64_t)wide;
	if (c->k_cache == NULL || c->v_cache == NULL || c->x == NULL || c->xb == NULL ||
	    c->q == NULL || c->k == NULL || c->v == NULL || c->att == NULL || c->hb == NULL ||
	    c->hb2 == NULL || c->pos == NULL || c->logits == NULL ||
	    c->compute->ops->reserve(c->compute, max_cols, c->n_batch, c->n_ctx) < 0) {
		int n_ctx = c->n_ctx;
		size_t kv_mib = c->kv_bytes >> 20;
		engine_ctx_free(c);
		return privai_fail(err, PRIVAI_ENOMEM,
				   "out of memory for a context of %d tokens (KV cache %zu MiB)", n_ctx, kv_mib);
	}
	*ret_ctx = c;
	return PRIVAI_OK;
}

void
engine_ctx_reset(struct engine_ctx *c)
{
	c->n_past = 0;
}

/* One layer for n tokens whose positions are c->pos[0..n). */
static void
forward_layer(struct engine_ctx *c, int il, int n)
{
	const struct engine_model *m = c->model;
	const struct model_hparams *hp = &m->hp;
	const struct model_layer *L = &m->layers[il];
	const struct compute_ops *op = c->compute->ops;
	struct compute *cp = c->compute;
	int qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
	size_t layer_off = (size_t)il * c->n_ctx * kvd;

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
		size_t off = layer_off + (size_t)c->pos[t] * kvd;
		memcpy(c->k_cache + off, c->k + (size_t)t * kvd, (size_t)kvd * sizeof(float));
		memcpy(c->v_cache + off, c->v + (size_t)t * kvd, (size_t)kvd * sizeof(float));
	}
	op->attention(cp, c->q, n, c->pos, c->k_cache + layer_off, c->v_cache + layer_off,
		      (size_t)kvd, hp->n_head, hp->n_head_kv, hp->head_dim, c->att);
	op->matmul(cp, &L->wo, c->att, n, c->xb);
	op->add(cp, c->x, c->xb, (size_t)n * hp->n_embd);

	op->rmsnorm(cp, c->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps, c->xb);
	op->matmul(cp, &L->w_gate, c->xb, n, c->hb);
	op->matmul(cp, &L->w_up, c->xb, n, c->hb2);
	op->swiglu(cp, c->hb, c->hb2, (size_t)n * hp->n_ff);
	op->matmul(cp, &L->w_down, c->hb, n, c->xb);
	op->add(cp, c->x, c->xb, (size_t)n * hp->n_embd);
}

/* Forward one batch; logits for the last `n_out` tokens land in c->logits. */
static void
forward_batch(struct engine_ctx *c, const int32_t *tokens, int n, int n_out)
{
	const struct engine_model *m = c->model;
	const struct model_hparams *hp = &m->hp;
	const struct compute_ops *op = c->compute->ops;

	for (int t = 0; t < n; t++)
		c->pos[t] = c->n_past + t;
	op->get_rows(c->compute, &m->tok_embd, tokens, n, c->x);
	for (int il = 0; il < hp->n_layer; il++)
		forward_layer(c, il, n);
	if (n_out > 0) {
		const float *last = c->x + (size_t)(n - n_out) * hp->n_embd;
		op->rmsnorm(c->compute, last, m->output_norm, n_out, hp->n_embd, hp->rms_eps, c->xb);
		op->matmul(c->compute, &m->output, c->xb, n_out, c->logits);
	}
	c->n_past += n;
}

int
engine_decode(struct engine_ctx *c, const int32_t *tokens, int n, int logits_all, float *out,
	      char *err)
{
	const struct model_hparams *hp = &c->model->hp;

	if (n <= 0)
		return privai_fail(err, PRIVAI_EINVAL, "no tokens to decode");
	if (n > c->n_ctx - c->n_past)
		return privai_fail(err, PRIVAI_ERANGE,
				   "%d tokens do not fit: context is %d tokens and %d are in use",
				   n, c->n_ctx, c->n_past);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
			return privai_fail(err, PRIVAI_EINVAL, "token id %d at index %d is outside the vocabulary (0..%d)",
					   tokens[i], i, hp->n_vocab - 1);
	for (int done = 0; done < n;) {
		int nb = n - done < c->n_batch ? n - done : c->n_batch;
		int last = done + nb == n;
		int n_out = logits_all ? nb : (last ? 1 : 0);
		forward_batch(c, tokens + done, nb, n_out);
		if (n_out > 0 && out != NULL) {
			float *dst = logits_all ? out + (size_t)done * hp->n_vocab : out;
			memcpy(dst, c->logits, (size_t)n_out * hp->n_vocab * sizeof(float));
		}
		done += nb;
	}
	return PRIVAI_OK;
}
