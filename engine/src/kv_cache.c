/*
 * Paged KV cache bookkeeping with automatic prefix caching.
 *
 * Each full block gets a chain hash: the hash of its tokens seeded with the
 * hash of the block before it, so equal hashes mean equal prefixes (the
 * tokens and parent hash are kept and compared too, so a 64-bit collision
 * cannot hand a sequence someone else's keys).  Free blocks sit on a stack;
 * cached blocks (unreferenced, registered) on an LRU list, oldest first, and
 * are evicted from its head only when the stack is empty.
 */
#include <stdlib.h>
#include <string.h>

#include "privai/kv_cache.h"

struct kv_block {
	int32_t ref;
	int32_t registered; /* in the hash table */
	uint64_t hash, parent;
	int32_t hnext;      /* next block in the same hash bucket */
	int32_t prev, next; /* LRU links while cached */
};

struct kv_pool {
	int n_blocks, bs;
	struct kv_block *b;
	int32_t *tokens; /* (n_blocks, bs): the run each registered block holds */
	int32_t *free_stack;
	int n_free;
	int32_t lru_head, lru_tail;
	int n_cached;
	int32_t *buckets;
	uint64_t bucket_mask;
};

static uint64_t
mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static uint64_t
chain_hash(uint64_t parent, const int32_t *tokens, int n)
{
	uint64_t h = mix(parent + 0x9e3779b97f4a7c15ULL);

	for (int i = 0; i < n; i++)
		h = mix(h ^ (uint32_t)tokens[i]);
	return h;
}

int
kv_pool_new(int n_blocks, int block_size, struct kv_pool **ret)
{
	struct kv_pool *p = calloc(1, sizeof(*p));
	size_t nbuckets = 1;

	if (p == NULL || n_blocks <= 0 || block_size <= 0) {
		free(p);
		return -1;
	}
	while (nbuckets < (size_t)n_blocks * 2)
		nbuckets <<= 1;
	p->n_blocks = n_blocks;
	p->bs = block_size;
	p->b = calloc((size_t)n_blocks, sizeof(*p->b));
	p->tokens = calloc((size_t)n_blocks * block_size, sizeof(int32_t));
	p->free_stack = calloc((size_t)n_blocks, sizeof(int32_t));
	p->buckets = malloc(nbuckets * sizeof(int32_t));
	if (p->b == NULL || p->tokens == NULL || p->free_stack == NULL || p->buckets == NULL) {
		kv_pool_free(p);
		return -1;
	}
	p->bucket_mask = nbuckets - 1;
	for (size_t i = 0; i < nbuckets; i++)
		p->buckets[i] = -1;
	/* pop order 0, 1, 2, ... */
	for (int i = 0; i < n_blocks; i++)
		p->free_stack[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	p->lru_head = p->lru_tail = -1;
	*ret = p;
	return 0;
}

void
kv_pool_free(struct kv_pool *p)
{
	if (p == NULL)
		return;
	free(p->b);
	free(p->tokens);
	free(p->free_stack);
	free(p->buckets);
	free(p);
}

void
kv_pool_stats(const struct kv_pool *p, struct kv_pool_stats *s)
{
	s->n_blocks = p->n_blocks;
	s->n_free = p->n_free;
	s->n_cached = p->n_cached;
	s->n_used = p->n_blocks - p->n_free - p->n_cached;
}

int
kv_pool_available(const struct kv_pool *p)
{
	return p->n_free + p->n_cached;
}

static void
lru_unlink(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->b[id];

	if (b->prev >= 0)
		p->b[b->prev].next = b->next;
	else
		p->lru_head = b->next;
	if (b->next >= 0)
		p->b[b->next].prev = b->prev;
	else
		p->lru_tail = b->prev;
	p->n_cached--;
}

static void
lru_push(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->b[id];

	b->prev = p->lru_tail;
	b->next = -1;
	if (p->lru_tail >= 0)
		p->b[p->lru_tail].next = id;
	else
		p->lru_head = id;
	p->lru_tail = id;
	p->n_cached++;
}

static void
unregister(struct kv_pool *p, int32_t id)
{
	int32_t *link = &p->buckets[p->b[id].hash & p->bucket_mask];

	while (*link != id)
		link = &p->b[*link].hnext;
	*link = p->b[id].hnext;
	p->b[id].registered = 0;
}

static int32_t
lookup(const struct kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
	for (int32_t id = p->buckets[hash & p->bucket_mask]; id >= 0; id = p->b[id].hnext) {
		const struct kv_block *b = &p->b[id];
		if (b->hash == hash && b->parent == parent &&
		    memcmp(p->tokens + (size_t)id * p->bs, tokens, (size_t)p->bs * sizeof(int32_t)) == 0)
			return id;
	}
	return -1;
}

/* A block with ref 1: from the free stack, else the least recently used
 * cached block (forgetting what it held); -1 when every block is in use. */
static int32_t
take_block(struct kv_pool *p)
{
	int32_t id;

	if (p->n_free > 0) {
		id = p->free_stack[--p->n_free];
	} else if (p->lru_head >= 0) {
		id = p->lru_head;
		lru_unlink(p, id);
		unregister(p, id);
	} else {
		return -1;
	}
	p->b[id].ref = 1;
	return id;
}

static void
put_block(struct kv_pool *p, int32_t id)
{
	if (--p->b[id].ref > 0)
		return;
	if (p->b[id].registered)
		lru_push(p, id);
	else
		p->free_stack[p->n_free++] = id;
}

void
kv_seq_init(struct kv_seq *s)
{
	memset(s, 0, sizeof(*s));
}

void
kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
	/* last block first, so a prefix's tail is evicted before its head */
	for (int i = s->n_blocks - 1; i >= 0; i--)
		put_block(p, s->blocks[i]);
	free(s->blocks);
	free(s->hashes);
	kv_seq_init(s);
}

static int
grow_table(struct kv_seq *s, int need)
{
	if (need <= s->cap)
		return 0;
	int cap = s->cap ? s->cap : 8;
	while (cap < need)
		cap *= 2;
	int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
	if (nb == NULL)
		return -1;
	s->blocks = nb;
	uint64_t *nh = realloc(s->hashes, (size_t)cap * sizeof(uint64_t));
	if (nh == NULL)
		return -1;
	s->hashes = nh;
	s->cap = cap;
	return 0;
}

int
kv_seq_match_prefix(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n)
{
	int max = n > 0 ? (n - 1) / p->bs : 0;
	uint64_t parent = 0;

	if (grow_table(s, max) < 0)
		return -1;
	for (int i = 0; i < max; i++) {
		const int32_t *run = tokens + (size_t)i * p->bs;
		uint64_t h = chain_hash(parent, run, p->bs);
		int32_t id = lookup(p, h, parent, run);
		if (id < 0)
			break;
		if (p->b[id].ref++ == 0)
			lru_unlink(p, id);
		s->blocks[s->n_blocks++] = id;
		s->hashes[s->n_hashed++] = h;
		parent = h;
	}
	return s->n_blocks * p->bs;
}

int
kv_seq_blocks_needed(const struct kv_pool *p, const struct kv_seq *s, int n_tokens)
{
	int need = (n_tokens + p->bs - 1) / p->bs - s->n_blocks;

	return need > 0 ? need : 0;
}

int
kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_tokens)
{
	int need = kv_seq_blocks_needed(p, s, n_tokens);

	if (need == 0)
		return 0;
	if (need > kv_pool_available(p) || grow_table(s, s->n_blocks + need) < 0)
		return -1;
	for (int i = 0; i < need; i++)
		s->blocks[s->n_blocks++] = take_block(p);
	return 0;
}

void
kv_seq_commit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n_computed)
{
	int full = n_computed / p->bs;

	if (full > s->n_blocks)
		full = s->n_blocks;
	for (int i = s->n_hashed; i < full; i++) {
		const int32_t *run = tokens + (size_t)i * p->bs;
		uint64_t parent = i > 0 ? s->hashes[i - 1] : 0;
		uint64_t h = chain_hash(parent, run, p->bs);
		int32_t id = s->blocks[i];
		s->hashes[i] = h;
		/* an equal block computed by someone else stays the findable one */
		if (p->b[id].registered || lookup(p, h, parent, run) >= 0)
			continue;
		struct kv_block *b = &p->b[id];
		b->registered = 1;
		b->hash = h;
		b->parent = parent;
		memcpy(p->tokens + (size_t)id * p->bs, run, (size_t)p->bs * sizeof(int32_t));
		int32_t *bucket = &p->buckets[h & p->bucket_mask];
		b->hnext = *bucket;
		*bucket = id;
	}
	if (full > s->n_hashed)
		s->n_hashed = full;
}
