/*
 * Bookkeeping for the paged KV cache: which of the engine context's blocks
 * belong to whom.  The engine only reads block tables; this decides them.
 *
 * A block is free, in use (reference counted: sequences that share a prompt
 * prefix share its full blocks), or cached: unused but still holding the
 * keys and values of a known token run, findable by the hash of that run
 * and of everything before it, and evicted least recently used first when
 * the free list runs dry.  Not thread-safe: the scheduler thread owns it.
 */
#ifndef PRIVAI_KV_CACHE_H
#define PRIVAI_KV_CACHE_H

#include <stdint.h>

struct kv_pool;

struct kv_pool_stats {
	int n_blocks;
	int n_used;   /* referenced by a sequence */
	int n_cached; /* unreferenced, content kept for prefix hits */
	int n_free;   /* unreferenced, no content */
};

int kv_pool_new(int n_blocks, int block_size, struct kv_pool **ret);
void kv_pool_free(struct kv_pool *p);
void kv_pool_stats(const struct kv_pool *p, struct kv_pool_stats *s);
/* Blocks that could be handed out now (free plus evictable). */
int kv_pool_available(const struct kv_pool *p);

/* A sequence's view: its block table and the hash of each full block. */
struct kv_seq {
	int32_t *blocks;
	uint64_t *hashes; /* chain hash of block i, valid for i < n_hashed */
	int n_blocks, cap;
	int n_hashed; /* leading full blocks registered or hit */
};

void kv_seq_init(struct kv_seq *s);
/* Release every block (cached ones stay findable) and free the table. */
void kv_seq_release(struct kv_pool *p, struct kv_seq *s);

/* Attach the longest run of cached full blocks that match the start of
 * tokens[0..n), never covering the last token (whose logits must be
 * computed).  Returns how many tokens are covered (a multiple of the block
 * size); -1 when the table cannot grow (out of memory).  The sequence must
 * have no blocks yet. */
int kv_seq_match_prefix(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n);

/* Grow the table to hold n_tokens positions.  Returns 0, or -1 when the
 * pool has too few blocks (the table is left as it was). */
int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_tokens);
/* How many more blocks kv_seq_reserve(n_tokens) would take. */
int kv_seq_blocks_needed(const struct kv_pool *p, const struct kv_seq *s, int n_tokens);

/* The sequence's cache now holds tokens[0..n_computed): register each newly
 * completed full block for later prefix hits. */
void kv_seq_commit(struct kv_pool *p, struct kv_seq *s, const int32_t *tokens, int n_computed);

#endif
