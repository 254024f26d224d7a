/*
 * GPU placement's memory check (deploy/placement.c) counts the KV cache
 * as the engine holds it, as sizing does (gpu/sizing.c): split over the
 * GPUs when they split the KV heads, and whole on every GPU for an MLA
 * latent (DeepSeek, Kimi), which tensor parallel does not divide.  Two
 * models of the same weights and the same KV bytes per token on four
 * 80 GB GPUs: the one with 4 KV heads fits (a quarter of its 60 GiB
 * cache a GPU), the MLA one does not (all 60 GiB on each).
 */
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "dbtestlib.h"
#include "testlib.h"
#include "deploy/placement.h"
#include "store/db.h"

static int
place(sqlite3 *db, int64_t model, struct place_error *e)
{
	struct gpu_ask q = { .node_id = 1,
			     .node = "gpu-node",
			     .count = 4,
			     .model_id = model,
			     .options = "{\"ctx\": 393216, \"parallel\": 16}" };
	cJSON *out = cJSON_CreateObject();
	int rc = gpu_place(db, &q, out, e);

	cJSON_Delete(out);
	return rc;
}

int
main(void)
{
	char path[] = "/tmp/privai-placement-XXXXXX", db_path[64], err[APP_ERR_LEN];
	sqlite3 *db;
	struct place_error e;

	CHECK(mkdtemp(path) != NULL, "a scratch directory");
	snprintf(db_path, sizeof(db_path), "%s/admin.db", path);
	CHECK(db_open(db_path, &db, err) == APP_OK, "store opened: %s", err);
	sql_must(db,
		 "INSERT INTO nodes (id, name, address, state, is_self, joined_at) VALUES (1, 'gpu-node', '127.0.0.1', "
		 "'ready', 1, 0)");
	/* its engine reports a CUDA backend, as a GPU node's does */
	sql_must(db, "UPDATE nodes SET inventory = '{\"engine\": {\"backends\": [\"cpu\", \"cuda\"]}}' WHERE id = 1");
	for (int i = 0; i < 8; i++) {
		char sql[256];
		snprintf(sql, sizeof(sql),
			 "INSERT INTO gpus (node_id, idx, uuid, name, memory_bytes) VALUES (1, %d, 'GPU-%d', 'H100', "
			 "%lld)",
			 i, i, 80LL << 30);
		sql_must(db, sql);
	}
	/* 100 GiB of weights; 10 layers x 10240 bytes a token: 2 x 2 x 4 KV heads x 64 (GQA), 2 x 512 (MLA);
	 * 393216 tokens x 16 sequences: 60 GiB of cache */
	sql_must(db,
		 "INSERT INTO models (id, name, path, size_bytes, architecture, context_length, n_layer, n_head, "
		 "n_head_kv, head_dim, kv_latent, weight_bytes, source, created_at) VALUES "
		 "(1, 'gqa', '/m/gqa.gguf', 107374182400, 'llama', 400000, 10, 8, 4, 64, 0, 107374182400, 'path', 0), "
		 "(2, 'mla', '/m/mla.gguf', 107374182400, 'deepseek2', 400000, 10, 8, 8, 64, 512, 107374182400, "
		 "'path', 0)");
	memset(&e, 0, sizeof(e));
	CHECK(place(db, 1, &e) == 0, "4 KV heads over 4 GPUs: 25 + 15 GiB a GPU fits 72 (%s)", e.msg);
	memset(&e, 0, sizeof(e));
	CHECK(place(db, 2, &e) != 0 && e.status == 422 && strstr(e.msg, "KV cache 60.0 GiB a GPU (an MLA latent"),
	      "an MLA latent is cached whole on each GPU: 25 + 60 GiB does not fit 72 (%d %s: %s)", e.status, e.code,
	      e.msg);
	db_close(db);
	unlink(db_path);
	rmdir(path);
	return test_summary();
}
