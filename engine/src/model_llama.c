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

#include "privai/collective.h"
#include "privai/lora.h"
#include "model_ctx.h"

#define DEFAULT_CTX_CAP 4096
#define DEFAULT_BATCH 256

/* Everything the forward pass reads or writes, in one list, so that
 * allocation and release cannot drift apart. */
#define CTX_BUFFERS(c)                                                                                                 \
	{                                                                                                              \
		&(c)->x, &(c)->xb, &(c)->q, &(c)->k, &(c)->v, &(c)->att, &(c)->hb, &(c)->hb2, &(c)->logits             \
	}

static void
release_layer(struct compute *cp, struct ctx_layer *L)
{
	struct compute_weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
	float *vs[] = { L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv };

	for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
		cp->ops->release_weight(cp, ws[i]);
	for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++)
		cp->ops->release(cp, vs[i]);
}

void
engine_ctx_free(struct engine_ctx *c)
{
	if (c == NULL)
		return;
	tp_ctx_end(c);
	struct compute *cp = c->compute;
	if (cp != NULL) {
		float **bufs[] = CTX_BUFFERS(c);
		for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
			cp->ops->release(cp, *bufs[i]);
		for (int i = 0; c->layers != NULL && i < c->model->hp.n_layer; i++)
			release_layer(cp, &c->layers[i]);
		cp->ops->release_weight(cp, &c->tok_embd);
		cp->ops->release_weight(cp, &c->output_own);
		cp->ops->release(cp, c->output_norm);
		cp->ops->release(cp, c->inv_freq);
		compute_free(cp);
	}
	free(c->layers);
	tp_owned_free(&c->owned);
	free(c->seq0_table);
	free(c->d_table);
	free(c->d_pos);
	free(c->d_rows);
	free(c);
}

int
engine_ctx_threads_active(const struct engine_ctx *c)
{
	return compute_cpu_threads_active(c->compute);
}

void
engine_ctx_parallel(struct engine_ctx *c, void (*fn)(void *arg, int part, int parts), void *arg)
{
	compute_cpu_parallel(c->compute, fn, arg);
}

void
engine_ctx_info(const struct engine_ctx *c, struct engine_ctx_info *info)
{
	info->n_ctx = c->n_ctx;
	info->n_batch = c->n_batch;
	info->n_kv_blocks = c->n_kv_blocks;
	info->n_vocab = c->model->hp.n_vocab;
	info->n_embd = c->model->hp.n_embd;
	info->kv_bytes = c->kv_bytes;
	info->n_past = c->n_past;
	info->device = c->compute->ops->name;
	info->n_threads = compute_cpu_threads(c->compute);
	info->n_threads_active = engine_ctx_threads_active(c);
	info->mem_total = c->mem_total;
	info->mem_budget = c->mem_budget;
	info->tp_rank = c->part.rank;
	info->tp_size = c->part.size;
	info->weight_bytes = tp_part_weight_bytes(c->model, &c->part);
}

static int
ctx_size(struct engine_ctx *c, const struct engine_ctx_params *p, char *err)
{
	const struct model_hparams *hp = &c->model->hp;

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
	return PRIVAI_OK;
}

/* A host vector of n floats copied into backend memory; a NULL one stays
 * NULL (a bias the model lacks). */
static int
upload_floats(struct compute *cp, const float *src, size_t n, float **dst)
{
	if (src == NULL)
		return PRIVAI_OK;
	if ((*dst = cp->ops->alloc(cp, n * sizeof(float))) == NULL)
		return PRIVAI_ENOMEM;
	return cp->ops->upload(cp, *dst, src, n * sizeof(float));
}

/* Layer `il` as this rank holds it (all of it alone), made the backend's. */
static int
prepare_layer(struct engine_ctx *c, int il, struct ctx_layer *L)
{
	const struct model_hparams *hp = &c->model->hp;
	struct compute *cp = c->compute;
	size_t qd = (size_t)c->part.n_head * hp->head_dim, kvd = (size_t)c->part.n_head_kv * hp->head_dim;
	struct model_layer view, *src = &view;
	int r;

	if ((r = tp_layer_view(hp, &c->part, &c->model->layers[il], &view, &c->owned)) < 0)
		return r;
	const struct weight *from[] = { &src->wq, &src->wk, &src->wv, &src->wo, &src->w_gate, &src->w_up, &src->w_down };
	struct compute_weight *to[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };

	for (size_t i = 0; i < sizeof(to) / sizeof(to[0]); i++)
		if ((r = cp->ops->prepare_weight(cp, from[i], to[i])) < 0)
			return r;
	if ((r = upload_floats(cp, src->attn_norm, (size_t)hp->n_embd, &L->attn_norm)) < 0 ||
	    (r = upload_floats(cp, src->ffn_norm, (size_t)hp->n_embd, &L->ffn_norm)) < 0 ||
	    (r = upload_floats(cp, src->bq, qd, &L->bq)) < 0 || (r = upload_floats(cp, src->bk, kvd, &L->bk)) < 0 ||
	    (r = upload_floats(cp, src->bv, kvd, &L->bv)) < 0)
		return r;
	return PRIVAI_OK;
}

/* The model's weights, norms, biases and rope frequencies, made the
 * backend's (an upload on a GPU, block sums on the CPU). */
static int
prepare_model(struct engine_ctx *c)
{
	const struct engine_model *m = c->model;
	const struct model_hparams *hp = &m->hp;
	struct compute *cp = c->compute;
	int r;

	if ((r = cp->ops->prepare_weight(cp, &m->tok_embd, &c->tok_embd)) < 0)
		return r;
	c->output = &c->tok_embd;
	/* a rank of a group computes the logits of its slice of the vocabulary */
	if (c->part.n_vocab == 0) {
		c->output = &c->output_own; /* never used: this rank computes no logits */
	} else if (m->output.data != m->tok_embd.data || c->part.size > 1) {
		struct weight out = tp_weight_rows(&m->output, c->part.vocab0, c->part.n_vocab);
		if ((r = cp->ops->prepare_weight(cp, &out, &c->output_own)) < 0)
			return r;
		c->output = &c->output_own;
	}
	if ((r = upload_floats(cp, m->output_norm, (size_t)hp->n_embd, &c->output_norm)) < 0 ||
	    (r = upload_floats(cp, m->inv_freq, (size_t)(hp->n_rot / 2), &c->inv_freq)) < 0)
		return r;
	if ((c->layers = calloc((size_t)hp->n_layer, sizeof(*c->layers))) == NULL)
		return PRIVAI_ENOMEM;
	for (int i = 0; i < hp->n_layer; i++)
		if ((r = prepare_layer(c, i, &c->layers[i])) < 0)
			return r;
	return PRIVAI_OK;
}

/* The activations, then the backend's scratch and the KV cache: last,
 * so that on a memory budget the pool gets what everything else leaves. */
static int
reserve_buffers(struct engine_ctx *c, double mem_fraction, char *err)
{
	const struct model_hparams *hp = &c->model->hp;
	struct compute *cp = c->compute;
	const struct tp_part *pt = &c->part;
	size_t kvd = (size_t)pt->n_head_kv * hp->head_dim, qd = (size_t)pt->n_head * hp->head_dim;
	size_t nb = (size_t)c->n_batch, wide = qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd;
	struct compute_shape shape = {
		.max_cols = pt->n_ff > (int)wide ? pt->n_ff : (int64_t)wide,
		.max_tokens = c->n_batch,
		.max_ctx = c->n_ctx,
		.n_layer = hp->n_layer,
		.kv_rows = (int64_t)c->n_kv_blocks * ENGINE_KV_BLOCK,
		.kv_dim = (int)kvd,
		.block_size = ENGINE_KV_BLOCK,
		.head_dim = hp->head_dim,
	};
	float **bufs[] = CTX_BUFFERS(c);
	size_t floats[] = { nb * hp->n_embd, nb * wide,     nb * qd,
			    nb * kvd,        nb * kvd,      nb * wide,
			    nb * pt->n_ff,   nb * pt->n_ff, nb * (pt->n_vocab > 0 ? pt->n_vocab : 1) };
	size_t free_b = 0;
	int r;

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if ((*bufs[i] = cp->ops->alloc(cp, floats[i] * sizeof(float))) == NULL)
			return privai_fail(err, PRIVAI_ENOMEM, "out of memory for the activations of %d tokens",
					   c->n_batch);
	/* a budget is a device's; host memory is sized by block count */
	if (cp->ops->memory(cp, &free_b, &c->mem_total) != PRIVAI_OK)
		mem_fraction = 0;
	shape.mem_fraction = mem_fraction;
	if (mem_fraction > 0) {
		c->mem_budget = (size_t)(mem_fraction * (double)c->mem_total);
		shape.kv_rows = 0;
	}
	if ((r = cp->ops->reserve(cp, &shape, &c->kv_bytes)) < 0) {
		if (mem_fraction > 0)
			return privai_fail(err, r,
					   "no room for a KV cache within %.2f of the %s's %zu MiB: the weights and "
					   "buffers leave %zu MiB free",
					   mem_fraction, cp->ops->name, c->mem_total >> 20, free_b >> 20);
		return privai_fail(err, r, "out of memory for a context of %d tokens (KV cache %zu MiB)", c->n_ctx,
				   c->kv_bytes >> 20);
	}
	if (mem_fraction > 0) {
		c->n_kv_blocks = (int)(shape.kv_rows / ENGINE_KV_BLOCK);
		if ((int64_t)c->n_kv_blocks * ENGINE_KV_BLOCK < c->n_ctx)
			return privai_fail(err, PRIVAI_ENOMEM,
					   "a KV cache of %zu MiB (%.2f of the %s's %zu MiB, less weights and buffers) "
					   "holds %d positions, fewer than the context of %d",
					   c->kv_bytes >> 20, mem_fraction, cp->ops->name, c->mem_total >> 20,
					   c->n_kv_blocks * ENGINE_KV_BLOCK, c->n_ctx);
	}
	return PRIVAI_OK;
}

/* Host bookkeeping for engine_decode()'s single sequence. */
static int
alloc_seq0(struct engine_ctx *c)
{
	size_t nb = (size_t)c->n_batch, seq0_blocks = ((size_t)c->n_ctx + ENGINE_KV_BLOCK - 1) / ENGINE_KV_BLOCK;

	c->seq0_table = calloc(seq0_blocks, sizeof(int32_t));
	c->d_table = calloc(nb, sizeof(*c->d_table));
	c->d_pos = calloc(nb, sizeof(int32_t));
	c->d_rows = calloc(nb, sizeof(int32_t));
	if (c->seq0_table == NULL || c->d_table == NULL || c->d_pos == NULL || c->d_rows == NULL)
		return PRIVAI_ENOMEM;
	for (size_t i = 0; i < seq0_blocks; i++)
		c->seq0_table[i] = (int32_t)(i < (size_t)c->n_kv_blocks ? i : 0);
	return PRIVAI_OK;
}

static int
ctx_build(struct engine_ctx *c, const struct engine_ctx_params *p, char *err)
{
	struct compute_params cpp = { .n_threads = p->n_threads,
				      .fixed_threads = p->fixed_threads,
				      .max_threads = p->max_threads };
	int r;

	if (p->mem_fraction < 0 || p->mem_fraction > 1)
		return privai_fail(err, PRIVAI_EINVAL, "a memory share of %g (0 to 1 allowed)", p->mem_fraction);
	if ((r = ctx_size(c, p, err)) < 0 || (r = compute_new(p->device, &cpp, &c->compute, err)) < 0 ||
	    (r = tp_ctx_begin(c, p->group, err)) < 0)
		return r;
	if ((r = prepare_model(c)) < 0)
		return privai_fail(err, r, "cannot prepare the model's weights (%.0f MiB) for the %s backend",
				   (double)tp_part_weight_bytes(c->model, &c->part) / (1 << 20), c->compute->ops->name);
	if ((r = reserve_buffers(c, p->n_kv_blocks > 0 ? 0 : p->mem_fraction, err)) < 0)
		return r;
	if ((r = alloc_seq0(c)) < 0)
		return privai_fail(err, r, "out of memory");
	return PRIVAI_OK;
}

int
engine_ctx_new(const struct engine_model *m, const struct engine_ctx_params *p, struct engine_ctx **ret_ctx, char *err)
{
	struct engine_ctx *c = calloc(1, sizeof(*c));
	int r;

	if (c == NULL)
		r = privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	else {
		c->model = m;
		r = ctx_build(c, p, err);
	}
	/* a rank that failed must not leave its peers waiting for it */
	if (p->group != NULL)
		r = tp_ctx_agree(c, p->group, r, err);
	if (r < 0) {
		engine_ctx_free(c);
		return r;
	}
	*ret_ctx = c;
	return PRIVAI_OK;
}

void
engine_ctx_reset(struct engine_ctx *c)
{
	c->n_past = 0;
}

/* y[i] = w[i] x for weights sharing their input, in one backend call
 * where the backend can. */
static void
matmuls(struct compute *cp, const struct compute_weight *const *w, int nw, const float *x, int n, float *const *y)
{
	if (cp->ops->matmul_n != NULL) {
		cp->ops->matmul_n(cp, w, nw, x, n, y);
		return;
	}
	for (int i = 0; i < nw; i++)
		cp->ops->matmul(cp, w[i], x, n, y[i]);
}

/* One layer for the batch set on the backend (n tokens). */
static void
forward_layer(struct engine_ctx *c, int il, int n)
{
	const struct model_hparams *hp = &c->model->hp;
	const struct ctx_layer *L = &c->layers[il];
	const struct compute_ops *op = c->compute->ops;
	struct compute *cp = c->compute;
	const struct tp_part *pt = &c->part;
	int qd = pt->n_head * hp->head_dim, kvd = pt->n_head_kv * hp->head_dim;
	const struct compute_weight *qkv[3] = { &L->wq, &L->wk, &L->wv }, *gate_up[2] = { &L->w_gate, &L->w_up };
	float *qkv_out[3] = { c->q, c->k, c->v }, *gate_up_out[2] = { c->hb, c->hb2 };

	op->rmsnorm(cp, c->x, L->attn_norm, n, hp->n_embd, hp->rms_eps, c->xb);
	matmuls(cp, qkv, 3, c->xb, n, qkv_out);
	for (int t = 0; c->adapter != NULL && t < 3; t++)
		lora_apply(c->lora, c->n_lora, c->adapter, il, (enum lora_target)(LORA_Q + t), c->xb, n, qkv_out[t]);
	if (L->bq != NULL)
		op->add_rows(cp, c->q, L->bq, n, qd);
	if (L->bk != NULL)
		op->add_rows(cp, c->k, L->bk, n, kvd);
	if (L->bv != NULL)
		op->add_rows(cp, c->v, L->bv, n, kvd);
	op->rope(cp, c->q, pt->n_head, hp->head_dim, hp->n_rot, c->inv_freq, hp->rope_neox);
	op->rope(cp, c->k, pt->n_head_kv, hp->head_dim, hp->n_rot, c->inv_freq, hp->rope_neox);
	op->kv_write(cp, il, c->k, c->v);
	op->attention(cp, il, c->q, pt->n_head, pt->n_head_kv, hp->head_dim, c->att);
	op->matmul(cp, &L->wo, c->att, n, c->xb);
	lora_apply(c->lora, c->n_lora, c->adapter, il, LORA_O, c->att, n, c->xb);
	tp_allreduce(c, c->xb, (size_t)n * hp->n_embd);
	op->add(cp, c->x, c->xb, (size_t)n * hp->n_embd);

	op->rmsnorm(cp, c->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps, c->xb);
	matmuls(cp, gate_up, 2, c->xb, n, gate_up_out);
	lora_apply(c->lora, c->n_lora, c->adapter, il, LORA_GATE, c->xb, n, c->hb);
	lora_apply(c->lora, c->n_lora, c->adapter, il, LORA_UP, c->xb, n, c->hb2);
	op->swiglu(cp, c->hb, c->hb2, (size_t)n * pt->n_ff);
	op->matmul(cp, &L->w_down, c->hb, n, c->xb);
	lora_apply(c->lora, c->n_lora, c->adapter, il, LORA_DOWN, c->hb, n, c->xb);
	tp_allreduce(c, c->xb, (size_t)n * hp->n_embd);
	op->add(cp, c->x, c->xb, (size_t)n * hp->n_embd);
}

int
model_check_batch(const struct engine_ctx *c, const struct compute_batch *b, char *err)
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
engine_forward(struct engine_ctx *c, const struct compute_batch *b, float *logits, char *err)
{
	return engine_forward_ex(c, b, NULL, logits, NULL, err);
}

int
engine_ctx_add_lora(struct engine_ctx *c, struct lora_adapter *a, char *err)
{
	if (strcmp(c->compute->ops->name, "cpu") != 0)
		return privai_fail(err, PRIVAI_EINVAL, "LoRA adapters run on the cpu backend only (this is %s)",
				   c->compute->ops->name);
	if (c->group != NULL)
		return privai_fail(err, PRIVAI_EINVAL, "LoRA adapters do not run on a model split over %d ranks",
				   c->part.size);
	for (int k = 0; k < c->n_lora; k++)
		if (c->lora[k] == NULL) { /* a number an unloaded adapter left */
			c->lora[k] = a;
			return k + 1;
		}
	if (c->n_lora == ENGINE_MAX_LORA)
		return privai_fail(err, PRIVAI_EINVAL, "at most %d LoRA adapters", ENGINE_MAX_LORA);
	c->lora[c->n_lora++] = a;
	return c->n_lora;
}

struct lora_adapter *
engine_ctx_remove_lora(struct engine_ctx *c, int k)
{
	struct lora_adapter *a;

	if (k < 1 || k > c->n_lora)
		return NULL;
	a = c->lora[k - 1];
	c->lora[k - 1] = NULL;
	return a;
}

int
engine_ctx_lora_loaded(const struct engine_ctx *c, int k)
{
	return k >= 1 && k <= c->n_lora && c->lora[k - 1] != NULL;
}

int
engine_forward_ex(struct engine_ctx *c, const struct compute_batch *b, const int32_t *adapter, float *logits,
		  float *hidden, char *err)
{
	int r;

	if (c->group != NULL && c->part.rank != 0)
		return privai_fail(err, PRIVAI_EINVAL, "rank %d of the group follows rank 0 (engine_follow)",
				   c->part.rank);
	if ((r = model_check_batch(c, b, err)) < 0)
		return r;
	for (int i = 0; adapter != NULL && i < b->n; i++)
		if (adapter[i] < 0 || adapter[i] > c->n_lora)
			return privai_fail(err, PRIVAI_EINVAL, "token %d asks for adapter %d of %d", i, adapter[i],
					   c->n_lora);
	if (b->n_out > 0 && logits == NULL)
		return privai_fail(err, PRIVAI_EINVAL, "%d logits rows asked for without a buffer", b->n_out);
	if (c->group != NULL && (r = tp_send_step(c, b, err)) < 0)
		return r;
	c->adapter = c->n_lora > 0 ? adapter : NULL;
	r = model_forward_run(c, b, logits, hidden, err);
	c->adapter = NULL;
	return r;
}

int
model_forward_run(struct engine_ctx *c, const struct compute_batch *b, float *logits, float *hidden, char *err)
{
	const struct model_hparams *hp = &c->model->hp;
	const struct compute_ops *op = c->compute->ops;
	struct compute *cp = c->compute;
	struct compute_batch pass = *b;
	int r;

	pass.replayable = hidden == NULL && c->group == NULL && c->adapter == NULL;
	c->tp_status = PRIVAI_OK;
	op->set_batch(cp, &pass);
	op->get_rows(cp, &c->tok_embd, c->x);
	for (int il = 0; il < hp->n_layer; il++)
		forward_layer(c, il, b->n);
	if (c->tp_status < 0)
		return privai_fail(err, c->tp_status, "%s", c->tp_err);
	if (b->n_out == 0)
		return PRIVAI_OK;
	/* the rows wanted, gathered into att (n x max(qd, n_embd) floats) */
	op->gather_rows(cp, c->x, hp->n_embd, c->att);
	op->rmsnorm(cp, c->att, c->output_norm, b->n_out, hp->n_embd, hp->rms_eps, c->xb);
	if (hidden != NULL && (r = op->download(cp, hidden, c->xb, (size_t)b->n_out * hp->n_embd * sizeof(float))) < 0)
		return privai_fail(err, r, "the %s backend failed in a forward pass", op->name);
	if (c->part.n_vocab > 0)
		op->matmul(cp, c->output, c->xb, b->n_out, c->logits);
	if (c->group != NULL)
		return tp_gather_logits(c, b->n_out, logits, err);
	if ((r = op->download(cp, logits, c->logits, (size_t)b->n_out * hp->n_vocab * sizeof(float))) < 0)
		return privai_fail(err, r, "the %s backend failed in a forward pass", op->name);
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
		int n_out = out == NULL ? 0 : (logits_all ? nb : (last ? 1 : 0));
		float *dst = out == NULL ? NULL : (logits_all ? out + (size_t)done * hp->n_vocab : out);
		struct compute_batch b = { .n = nb,
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
		if ((r = engine_forward(c, &b, n_out > 0 ? dst : NULL, err)) < 0)
			return r;
		c->n_past += nb;
		done += nb;
	}
	return PRIVAI_OK;
}
