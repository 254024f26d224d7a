/*
 * A context that is one rank of a tensor-parallel group.
 *
 * Every rank holds its part of the model (tp_part.h) and runs every
 * forward pass; rank 0 alone is driven by a caller (the server, eval,
 * bench), and before each pass it sends the others a step: the batch's
 * tokens, positions, output rows and block tables.  The others sit in
 * engine_follow() and run each step as it comes, so the scheduler, the
 * KV cache bookkeeping and the sampler exist on rank 0 only, and the
 * followers' caches stay in step with rank 0's because they are written
 * by the same passes.
 *
 * A step is one message of STEP_FIRST int32s when it fits (a decode step
 * of a few sequences does), and a second one with the rest otherwise:
 *   [op, n, n_out, n_tables, words] then `words` int32s:
 *   tokens[n] pos[n] out_rows[n_out] table_of[n] table_len[n_tables]
 *   and the tables' block numbers, one after the other.
 * Tokens of one sequence share a table, sent once.
 *
 * An idle rank 0 sends a ping now and then (engine_ping): a step of
 * its own followed by a one-value all-reduce, so that a rank that died
 * or hung while nothing was asked ends the group then, not at the next
 * request, and what runs the group can start it again.
 */
#include <stdlib.h>
#include <string.h>

#include "model_ctx.h"

enum { STEP_FORWARD = 1, STEP_STOP = 2, STEP_PING = 3 };
#define STEP_HEAD 5
#define STEP_FIRST 1024

static int
step_reserve(struct engine_ctx *c, size_t words, char *err)
{
	int32_t *s;

	if (words <= c->step_cap)
		return PRIVAI_OK;
	if ((s = realloc(c->step, words * sizeof(int32_t))) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for a step of %zu values", words);
	c->step = s;
	c->step_cap = words;
	return PRIVAI_OK;
}

int
tp_ctx_begin(struct engine_ctx *c, struct coll *g, char *err)
{
	const char *dev = c->compute->ops->name;
	size_t nb = (size_t)c->n_batch;
	int r;

	if ((r = tp_part_plan(c->model, g != NULL ? g->rank : 0, g != NULL ? g->size : 1, &c->part, err)) < 0)
		return r;
	if (g == NULL)
		return PRIVAI_OK;
	if ((strcmp(g->ops->memory, "host") == 0) != (strcmp(dev, "cpu") == 0))
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "the %s collectives work on %s memory, which the %s backend does not keep its "
				   "activations in",
				   g->ops->name, g->ops->memory, dev);
	c->group = g;
	c->logits_part = malloc(nb * (size_t)c->part.n_vocab * sizeof(float) + 1);
	c->gather_counts = calloc((size_t)g->size, sizeof(int));
	c->step_table = calloc(2 * nb, sizeof(*c->step_table));
	if (g->rank == 0)
		c->logits_all = malloc(nb * (size_t)c->model->hp.n_vocab * sizeof(float));
	if (c->logits_part == NULL || c->gather_counts == NULL || c->step_table == NULL ||
	    (g->rank == 0 && c->logits_all == NULL))
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for a group's buffers");
	return step_reserve(c, STEP_FIRST, err);
}

int
tp_ctx_agree(struct engine_ctx *c, struct coll *g, int r, char *err)
{
	char scratch[PRIVAI_ERR_LEN];
	int all = g->ops->agree(g, r >= 0, r >= 0 ? err : scratch);

	if (r < 0)
		return r;
	if (all < 0)
		return all;
	if (!all)
		return privai_fail(err, PRIVAI_EUNAVAIL,
				   "another rank of the group of %d could not create its context (its own message "
				   "says why)",
				   g->size);
	c->tp_live = 1;
	return PRIVAI_OK;
}

void
tp_ctx_end(struct engine_ctx *c)
{
	struct coll *g = c->group;
	char err[PRIVAI_ERR_LEN];

	if (g != NULL && c->tp_live && g->rank == 0) {
		memset(c->step, 0, STEP_FIRST * sizeof(int32_t));
		c->step[0] = STEP_STOP;
		(void)g->ops->bcast(g, c->step, STEP_FIRST * sizeof(int32_t), COLL_STEP_BEGIN, err);
	}
	c->tp_live = 0;
	free(c->logits_part);
	free(c->logits_all);
	free(c->gather_counts);
	free(c->step);
	free(c->step_table);
	c->logits_part = c->logits_all = NULL;
	c->gather_counts = NULL;
	c->step = NULL;
	c->step_cap = 0;
	c->step_table = NULL;
}

/* Send the step's second message when the first could not hold it. */
static int
bcast_rest(struct engine_ctx *c, size_t words, char *err)
{
	if (STEP_HEAD + words <= STEP_FIRST)
		return PRIVAI_OK;
	return c->group->ops->bcast(c->group, c->step + STEP_FIRST, (STEP_HEAD + words - STEP_FIRST) * sizeof(int32_t),
				    0, err);
}

int
tp_send_step(struct engine_ctx *c, const struct compute_batch *b, char *err)
{
	const int32_t **tabs = c->step_table; /* the distinct tables */
	int n = b->n, n_tables = 0;
	size_t words;
	int r;

	/* tables first: their count and lengths size the message */
	words = 3 * (size_t)n + (size_t)b->n_out;
	for (int i = 0; i < n; i++) {
		int k = 0;
		while (k < n_tables && tabs[k] != b->table[i])
			k++;
		if (k == n_tables)
			tabs[n_tables++] = b->table[i];
	}
	if ((r = step_reserve(c,
			      STEP_HEAD + words + (size_t)n_tables +
				      (size_t)n * (size_t)(c->n_ctx / ENGINE_KV_BLOCK + 1),
			      err)) < 0)
		return r;
	int32_t *tok = c->step + STEP_HEAD, *pos = tok + n, *rows = pos + n, *tab_of = rows + b->n_out;
	int32_t *tab_len = tab_of + n, *blocks = tab_len + n_tables;
	memcpy(tok, b->tokens, (size_t)n * sizeof(int32_t));
	memcpy(pos, b->pos, (size_t)n * sizeof(int32_t));
	memcpy(rows, b->out_rows, (size_t)b->n_out * sizeof(int32_t));
	memset(tab_len, 0, (size_t)n_tables * sizeof(int32_t));
	for (int i = 0; i < n; i++) {
		int k = 0;
		while (tabs[k] != b->table[i])
			k++;
		tab_of[i] = k;
		if (b->pos[i] / ENGINE_KV_BLOCK + 1 > tab_len[k])
			tab_len[k] = b->pos[i] / ENGINE_KV_BLOCK + 1;
	}
	for (int k = 0; k < n_tables; k++) {
		memcpy(blocks, tabs[k], (size_t)tab_len[k] * sizeof(int32_t));
		blocks += tab_len[k];
	}
	words = (size_t)(blocks - (c->step + STEP_HEAD));
	c->step[0] = STEP_FORWARD;
	c->step[1] = n;
	c->step[2] = b->n_out;
	c->step[3] = n_tables;
	c->step[4] = (int32_t)words;
	if ((r = c->group->ops->bcast(c->group, c->step, STEP_FIRST * sizeof(int32_t), COLL_STEP_BEGIN, err)) < 0)
		return r;
	return bcast_rest(c, words, err);
}

/* The ping's all-reduce, on every rank: one value, so that each rank
 * hears from every other one. */
static int
ping_round(struct engine_ctx *c, char *err)
{
	float one = 1.0f;

	return c->group->ops->allreduce_sum(c->group, &one, 1, err);
}

int
engine_ping(struct engine_ctx *c, char *err)
{
	struct coll *g = c->group;
	int r;

	if (g == NULL || !c->tp_live || g->rank != 0)
		return PRIVAI_OK;
	/* a ping is not the model's traffic: the counts stay those of the
	 * forward passes (/metrics, bench) */
	struct coll_stats counted = g->stats;
	memset(c->step, 0, STEP_HEAD * sizeof(int32_t));
	c->step[0] = STEP_PING;
	if ((r = g->ops->bcast(g, c->step, STEP_FIRST * sizeof(int32_t), COLL_STEP_BEGIN, err)) == PRIVAI_OK)
		r = ping_round(c, err);
	g->stats = counted;
	return r;
}

/* A follower: the next step into *b, or *stop.  A step that does not
 * parse means rank 0 and this rank disagree on what they run. */
static int
recv_step(struct engine_ctx *c, struct compute_batch *b, int *stop, char *err)
{
	struct coll *g = c->group;
	int32_t *h = c->step;
	int r;

	do {
		r = g->ops->bcast(g, c->step, STEP_FIRST * sizeof(int32_t), COLL_STEP_BEGIN | COLL_NO_DEADLINE, err);
		if (r == PRIVAI_OK && h[0] == STEP_PING)
			r = ping_round(c, err);
		if (r < 0)
			return r;
	} while (h[0] == STEP_PING);
	if (h[0] == STEP_STOP) {
		*stop = 1;
		return PRIVAI_OK;
	}
	int n = h[1], n_out = h[2], n_tables = h[3];
	size_t words = (size_t)(uint32_t)h[4], most = (size_t)c->n_batch * (5 + (size_t)c->n_ctx / ENGINE_KV_BLOCK + 1);
	if (h[0] != STEP_FORWARD || n < 1 || n > c->n_batch || n_out < 0 || n_out > n || n_tables < 1 || n_tables > n ||
	    words < 3 * (size_t)n + (size_t)n_out + 2 * (size_t)n_tables || words > most)
		return privai_fail(err, PRIVAI_EFORMAT, "rank 0 sent a step this rank cannot read (op %d, %d tokens)",
				   h[0], n);
	if ((r = step_reserve(c, STEP_HEAD + words, err)) < 0 || (r = bcast_rest(c, words, err)) < 0)
		return r;
	int32_t *tok = c->step + STEP_HEAD, *pos = tok + n, *rows = pos + n, *tab_of = rows + n_out;
	int32_t *tab_len = tab_of + n, *blocks = tab_len + n_tables, *end = c->step + STEP_HEAD + words;
	const int32_t **base = c->step_table, **per_token = c->step_table + c->n_batch;
	for (int k = 0; k < n_tables; k++) {
		if (tab_len[k] < 1 || tab_len[k] > end - blocks)
			return privai_fail(err, PRIVAI_EFORMAT, "rank 0 sent a block table this rank cannot read");
		base[k] = blocks;
		blocks += tab_len[k];
	}
	for (int i = 0; i < n; i++) {
		if (tab_of[i] < 0 || tab_of[i] >= n_tables || pos[i] < 0 ||
		    pos[i] / ENGINE_KV_BLOCK >= tab_len[tab_of[i]])
			return privai_fail(err, PRIVAI_EFORMAT, "rank 0 sent token %d without its blocks", i);
		per_token[i] = base[tab_of[i]];
	}
	*b = (struct compute_batch){
		.n = n, .tokens = tok, .pos = pos, .table = per_token, .n_out = n_out, .out_rows = rows
	};
	return PRIVAI_OK;
}

int
engine_follow(struct engine_ctx *c, char *err)
{
	int r;

	if (c->group == NULL || c->part.rank == 0)
		return privai_fail(err, PRIVAI_EINVAL, "only a rank other than 0 of a group follows");
	for (;;) {
		struct compute_batch b;
		int stop = 0;
		if ((r = recv_step(c, &b, &stop, err)) < 0)
			return r;
		if (stop)
			return PRIVAI_OK;
		if ((r = model_check_batch(c, &b, err)) < 0 || (r = model_forward_run(c, &b, NULL, NULL, err)) < 0)
			return r;
	}
}

void
tp_allreduce(struct engine_ctx *c, float *x, size_t n)
{
	struct coll *g = c->group;
	int r;

	if (g == NULL || c->tp_status < 0)
		return;
	if ((r = g->ops->allreduce_sum(g, x, n, c->tp_err)) < 0)
		c->tp_status = r;
}

int
tp_gather_logits(struct engine_ctx *c, int n_out, float *logits, char *err)
{
	const struct compute_ops *op = c->compute->ops;
	struct coll *g = c->group;
	int V = c->model->hp.n_vocab, size = g->size, r;

	r = op->download(c->compute, c->logits_part, c->logits, (size_t)n_out * c->part.n_vocab * sizeof(float));
	if (r < 0)
		return privai_fail(err, r, "the %s backend failed in a forward pass", op->name);
	for (int k = 0; k < size; k++) {
		int v0, n;
		tp_vocab_slice(V, size, k, c->part.whole_output, &v0, &n);
		c->gather_counts[k] = n_out * n;
	}
	if ((r = g->ops->gather(g, c->logits_part, c->gather_counts, c->logits_all, err)) < 0 || g->rank != 0)
		return r;
	/* rank k's slice is n_out rows of its vocabulary columns */
	const float *from = c->logits_all;
	for (int k = 0; k < size; k++) {
		int v0, n;
		tp_vocab_slice(V, size, k, c->part.whole_output, &v0, &n);
		for (int i = 0; i < n_out; i++, from += n)
			memcpy(logits + (size_t)i * V + v0, from, (size_t)n * sizeof(float));
	}
	return PRIVAI_OK;
}
