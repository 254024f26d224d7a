/*
 * KV block bookkeeping: reservation and refusal, prefix hits that stop at
 * the first differing block and never cover the last token, sharing by
 * reference count, and least-recently-used eviction of cached blocks.
 */
#include "testlib.h"
#include "privai/kv_cache.h"

static void
seq_tokens(int32_t *t, int n, int salt)
{
	for (int i = 0; i < n; i++)
		t[i] = 100 + i + salt * 1000;
}

int
main(void)
{
	struct kv_pool *p;
	struct kv_pool_stats st;
	struct kv_seq a, b, c, d;
	int32_t ta[16], tb[16], tc[16];

	CHECK(kv_pool_new(8, 4, &p) == 0, "pool of 8 blocks of 4");
	seq_tokens(ta, 16, 0);
	kv_seq_init(&a);
	CHECK(kv_seq_match_prefix(p, &a, ta, 10) == 0, "an empty cache has no prefix hit");
	CHECK(kv_seq_reserve(p, &a, 10) == 0 && a.n_blocks == 3, "10 tokens take 3 blocks");
	CHECK(kv_seq_blocks_needed(p, &a, 13) == 1, "13 tokens need one more");
	kv_seq_commit(p, &a, ta, 10);
	CHECK(a.n_hashed == 2, "two full blocks registered");

	/* B shares A's first two blocks while A still runs */
	kv_seq_init(&b);
	CHECK(kv_seq_match_prefix(p, &b, ta, 12) == 8, "a shared 12-token prompt hits 8 tokens");
	CHECK(b.blocks[0] == a.blocks[0] && b.blocks[1] == a.blocks[1], "hit blocks are A's");
	kv_pool_stats(p, &st);
	CHECK(st.n_used == 3 && st.n_free == 5, "shared blocks are counted once (%d used)", st.n_used);
	kv_seq_release(p, &b);

	/* the last token is always computed: 8 tokens hit only the first block */
	kv_seq_init(&b);
	CHECK(kv_seq_match_prefix(p, &b, ta, 8) == 4, "an 8-token prompt hits 4, leaving its last block to compute");
	kv_seq_release(p, &b);
	/* a prompt differing in the second block hits the first only */
	int32_t tmod[16];
	memcpy(tmod, ta, sizeof(tmod));
	tmod[5] = 7;
	kv_seq_init(&b);
	CHECK(kv_seq_match_prefix(p, &b, tmod, 12) == 4, "a change in block 2 stops the hit at block 1");
	kv_seq_release(p, &b);

	kv_seq_release(p, &a);
	kv_pool_stats(p, &st);
	CHECK(st.n_used == 0 && st.n_cached == 2 && st.n_free == 6, "released: 2 cached, 6 free (%d/%d/%d)", st.n_used,
	      st.n_cached, st.n_free);

	/* C caches a second prefix, more recently used than A's */
	seq_tokens(tc, 16, 1);
	kv_seq_init(&c);
	CHECK(kv_seq_reserve(p, &c, 8) == 0, "C reserves 2 blocks");
	kv_seq_commit(p, &c, tc, 8);
	kv_seq_release(p, &c);
	kv_pool_stats(p, &st);
	CHECK(st.n_cached == 4 && st.n_free == 4 && kv_pool_available(p) == 8, "4 cached, 4 free");

	/* D needs 6 blocks: the 4 free and the 2 oldest cached (A's) */
	seq_tokens(tb, 16, 2);
	kv_seq_init(&d);
	CHECK(kv_seq_reserve(p, &d, 24) == 0, "D takes 6 blocks, evicting 2");
	kv_seq_init(&b);
	CHECK(kv_seq_match_prefix(p, &b, ta, 12) == 0, "A's prefix was evicted first");
	kv_seq_release(p, &b);
	kv_seq_init(&b);
	CHECK(kv_seq_match_prefix(p, &b, tc, 12) == 8, "C's prefix survived");
	kv_pool_stats(p, &st);
	CHECK(st.n_used == 8 && kv_pool_available(p) == 0, "all 8 in use");
	int before = b.n_blocks;
	CHECK(kv_seq_reserve(p, &b, 13) == -1 && b.n_blocks == before, "a refused reservation changes nothing");
	kv_seq_release(p, &b);
	kv_seq_release(p, &d);
	kv_pool_stats(p, &st);
	CHECK(st.n_used == 0 && st.n_free + st.n_cached == 8, "everything back");
	kv_pool_free(p);
	return test_summary();
}
