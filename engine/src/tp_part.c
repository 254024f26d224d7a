/*
 * Splitting a llama-family model over the ranks of a tensor-parallel
 * group (tp_part.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/status.h"
#include "privai/tensor_type.h"
#include "tp_part.h"

/* "1, 2, 4, 8": the rank counts that divide n, for messages. */
static void
divisors(int n, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int d = 1; d <= n && used < len; d++)
		if (n % d == 0)
			used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? ", " : "", d);
}

/* A column slice of `cols` values of w must not cut a block. */
static int
check_cut(const struct weight *w, const char *name, int il, int64_t cols, int size, char *err)
{
	const struct tensor_type_info *ti = tensor_type_get(w->type);

	if (cols % ti->block_elems == 0)
		return PRIVAI_OK;
	return privai_fail(err, PRIVAI_EINVAL,
			   "blk.%d.%s is %s, stored in blocks of %u values: a share of %lld of its %lld columns for "
			   "each of %d ranks would cut a block",
			   il, name, tensor_type_name(w->type), ti->block_elems, (long long)cols, (long long)w->cols,
			   size);
}

int
tp_part_plan(const struct engine_model *m, int rank, int size, struct tp_part *p, char *err)
{
	const struct model_hparams *hp = &m->hp;
	char ok[256];
	int r;

	memset(p, 0, sizeof(*p));
	if (size < 1 || size > 4096 || rank < 0 || rank >= size)
		return privai_fail(err, PRIVAI_EINVAL, "rank %d of a group of %d", rank, size);
	if (hp->n_head % size != 0) {
		divisors(hp->n_head, ok, sizeof(ok));
		return privai_fail(err, PRIVAI_EINVAL,
				   "the model's %d attention heads do not divide among %d ranks (rank counts that "
				   "work: %s)",
				   hp->n_head, size, ok);
	}
	if (hp->n_head_kv % size != 0 && size % hp->n_head_kv != 0)
		return privai_fail(err, PRIVAI_EINVAL,
				   "the model's %d KV heads can neither be split among %d ranks nor shared by them "
				   "(the rank count must divide %d or be a multiple of it)",
				   hp->n_head_kv, size, hp->n_head_kv);
	if (hp->n_ff % size != 0)
		return privai_fail(err, PRIVAI_EINVAL, "the model's MLP width %d does not divide among %d ranks",
				   hp->n_ff, size);
	p->rank = rank;
	p->size = size;
	p->n_head = hp->n_head / size;
	p->head0 = rank * p->n_head;
	if (hp->n_head_kv % size == 0) {
		p->n_head_kv = hp->n_head_kv / size;
		p->kv_head0 = rank * p->n_head_kv;
	} else { /* more ranks than KV heads: size / n_head_kv ranks share each */
		p->n_head_kv = 1;
		p->kv_head0 = rank / (size / hp->n_head_kv);
	}
	p->n_ff = hp->n_ff / size;
	p->ff0 = rank * p->n_ff;
	const char *out = getenv("PRIVAI_TP_OUTPUT");
	p->whole_output = size > 1 && out != NULL && strcmp(out, "rank0") == 0;
	tp_vocab_slice(hp->n_vocab, size, rank, p->whole_output, &p->vocab0, &p->n_vocab);
	if (hp->n_vocab < size)
		return privai_fail(err, PRIVAI_EINVAL, "a vocabulary of %d tokens among %d ranks", hp->n_vocab, size);
	for (int il = 0; size > 1 && il < hp->n_layer; il++)
		if ((r = check_cut(&m->layers[il].wo, "attn_output.weight", il, (int64_t)p->n_head * hp->head_dim, size,
				   err)) < 0 ||
		    (r = check_cut(&m->layers[il].w_down, "ffn_down.weight", il, p->n_ff, size, err)) < 0)
			return r;
	return PRIVAI_OK;
}

void
tp_vocab_slice(int n_vocab, int size, int rank, int whole_output, int *v0, int *n)
{
	if (whole_output) {
		*v0 = 0;
		*n = rank == 0 ? n_vocab : 0;
		return;
	}
	*v0 = (int)((int64_t)n_vocab * rank / size);
	*n = (int)((int64_t)n_vocab * (rank + 1) / size) - *v0;
}

struct weight
tp_weight_rows(const struct weight *w, int64_t r0, int64_t n)
{
	struct weight s = *w;

	s.rows = n;
	s.data = (const char *)w->data + r0 * (int64_t)w->row_bytes;
	return s;
}

void
tp_owned_free(struct tp_owned *o)
{
	for (int i = 0; i < o->n; i++)
		free(o->blocks[i]);
	free(o->blocks);
	memset(o, 0, sizeof(*o));
}

/* Columns [c0, c0 + n) of w copied into memory of their own: the rows of
 * a row-parallel weight are not contiguous in the file. */
static int
weight_cols(const struct weight *w, int64_t c0, int64_t n, struct weight *dst, struct tp_owned *own)
{
	size_t skip = tensor_type_row_bytes(w->type, (uint64_t)c0), rb = tensor_type_row_bytes(w->type, (uint64_t)n);
	void *mem = NULL;

	if (own->n == own->cap) {
		int cap = own->cap ? own->cap * 2 : 16;
		void **b = realloc(own->blocks, (size_t)cap * sizeof(*b));
		if (b == NULL)
			return PRIVAI_ENOMEM;
		own->blocks = b;
		own->cap = cap;
	}
	if (posix_memalign(&mem, 64, rb * (size_t)w->rows + 64) != 0)
		return PRIVAI_ENOMEM;
	for (int64_t r = 0; r < w->rows; r++)
		memcpy((char *)mem + (size_t)r * rb, (const char *)w->data + (size_t)r * w->row_bytes + skip, rb);
	own->blocks[own->n++] = mem;
	own->bytes += rb * (size_t)w->rows;
	*dst = *w;
	dst->cols = n;
	dst->row_bytes = rb;
	dst->data = mem;
	return PRIVAI_OK;
}

int
tp_layer_view(const struct model_hparams *hp, const struct tp_part *p, const struct model_layer *src,
	      struct model_layer *dst, struct tp_owned *own)
{
	int64_t hd = hp->head_dim, q0 = p->head0 * hd, qn = p->n_head * hd;
	int64_t k0 = p->kv_head0 * hd, kn = p->n_head_kv * hd;
	int r;

	*dst = *src;
	if (p->size == 1)
		return PRIVAI_OK;
	dst->wq = tp_weight_rows(&src->wq, q0, qn);
	dst->wk = tp_weight_rows(&src->wk, k0, kn);
	dst->wv = tp_weight_rows(&src->wv, k0, kn);
	dst->bq = src->bq != NULL ? src->bq + q0 : NULL;
	dst->bk = src->bk != NULL ? src->bk + k0 : NULL;
	dst->bv = src->bv != NULL ? src->bv + k0 : NULL;
	dst->w_gate = tp_weight_rows(&src->w_gate, p->ff0, p->n_ff);
	dst->w_up = tp_weight_rows(&src->w_up, p->ff0, p->n_ff);
	if ((r = weight_cols(&src->wo, q0, qn, &dst->wo, own)) < 0 ||
	    (r = weight_cols(&src->w_down, p->ff0, p->n_ff, &dst->w_down, own)) < 0)
		return r;
	return PRIVAI_OK;
}

static size_t
slice_bytes(const struct weight *w, int64_t rows, int64_t cols)
{
	return tensor_type_row_bytes(w->type, (uint64_t)cols) * (size_t)rows;
}

size_t
tp_part_weight_bytes(const struct engine_model *m, const struct tp_part *p)
{
	const struct model_hparams *hp = &m->hp;
	int64_t hd = hp->head_dim, e = hp->n_embd, q = p->n_head * hd, kv = p->n_head_kv * hd;
	size_t sum = slice_bytes(&m->output, p->n_vocab, e);

	for (int il = 0; il < hp->n_layer; il++) {
		const struct model_layer *L = &m->layers[il];
		sum += slice_bytes(&L->wq, q, e) + slice_bytes(&L->wk, kv, e) + slice_bytes(&L->wv, kv, e) +
		       slice_bytes(&L->wo, e, q) + slice_bytes(&L->w_gate, p->n_ff, e) +
		       slice_bytes(&L->w_up, p->n_ff, e) + slice_bytes(&L->w_down, e, p->n_ff);
	}
	return sum;
}
