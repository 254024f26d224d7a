/*
 * GPU placements: which GPUs, or which MIG instance, of a node a
 * deployment's engine gets.  Checked against the store before anything
 * is written:
 *
 *   - every GPU named is one of that node's (index, "GPU-..." UUID), or
 *     one MIG instance of one of its GPUs ("MIG-..." UUID): CUDA shows a
 *     process one MIG instance, so a MIG placement has exactly one and
 *     never mixes with whole GPUs; a GPU in MIG mode is not used whole;
 *   - none is held by another deployment that should run;
 *   - the tensor-parallel size is the number of GPUs, divides the model's
 *     attention heads, and its KV heads or a multiple of them (each GPU
 *     then holds a copy of some KV heads);
 *   - weights / tp + KV cache / tp + runtime fit each GPU's memory less
 *     a headroom (the same rules as gpu/sizing.h, scaled down for a MIG
 *     instance: at most 7.5 % headroom and 2.5 % runtime);
 *   - the node's privai-engine has the CUDA backend (deploy/engine_probe.h).
 *
 * The stored form is {"kind": "gpu", "gpus": [UUID, ...],
 * "tensor_parallel": N[, "node": NAME]}; the engine gets --device cuda
 * --gpus UUID,... and, for several, --tp N --nnodes 1 (a process a GPU,
 * started by the engine).  A group over nodes adds "ranks" (the nodes),
 * "count" (GPUs a node) and "rank_gpus" (each node's UUIDs); each node's
 * engine then gets --tp N --nnodes NODES --node-rank K.
 */
#ifndef PRIVAI_ADMIN_GPU_PLACE_H
#define PRIVAI_ADMIN_GPU_PLACE_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* SQL: the UUIDs deployment row `d` holds, of one node or (a group over
 * nodes) of each of its nodes, as a subquery of one column.  (json_tree's
 * keys would not do: it quotes "rank_gpus" for its underscore.) */
#define PLACED_GPUS(d)                                                                                                 \
	"(SELECT value FROM json_each(" d ".placement, '$.gpus') UNION ALL SELECT x.value FROM json_each(" d           \
	".placement, '$.rank_gpus') n, json_each(n.value) x)"

/* Why a placement was refused, as the API reports it. */
struct place_error {
	int status;     /* 409 (busy, too few free) or 422 */
	char code[24];  /* "invalid_field", "gpu_busy", "insufficient_gpus", "does_not_fit", "unsupported" */
	char field[40]; /* "placement.gpus", ... */
	char msg[400];
};

struct gpu_ask {
	int64_t node_id;     /* nodes.id of the node (this one's own id too) */
	const char *node;    /* its name, for messages */
	const cJSON *gpus;   /* [index | "GPU-..." | "MIG-..."], or NULL: pick `count` */
	int count;           /* with gpus NULL: whole GPUs to pick, free ones by index */
	int tensor_parallel; /* 0: the number of GPUs */
	int64_t model_id;
	const char *options; /* the deployment's options (ctx, parallel, kv_cache_mib) as JSON */
	int64_t self_id;     /* the deployment placed (its own GPUs are free to it), 0 if new */
};

/* Check q and add "gpus" (UUIDs) and "tensor_parallel" to out: 0, or an
 * APP_E* code with e filled.  The caller holds the store's mutex. */
int gpu_place(sqlite3 *db, const struct gpu_ask *q, cJSON *out, struct place_error *e);

/* A group over nodes: `count` whole GPUs on each node named in nodes (a
 * JSON array of node names, this node first), picked free on each, the
 * tensor-parallel size count x nodes checked against the model's heads
 * and each GPU's memory, every node's engine able to use CUDA.  Adds
 * "rank_gpus" (each node's UUIDs, in order), "gpus" (the first node's),
 * "count" and "tensor_parallel" to out: 0, or an APP_E* code with e
 * filled.  The caller holds the store's mutex. */
int gpu_place_group(sqlite3 *db, const struct gpu_ask *q, const cJSON *nodes, cJSON *out, struct place_error *e);

/* Check a stored placement again before its deployment runs (started
 * again, its options changed, moved back): 0 when it is not a GPU
 * placement or still holds; an APP_E* code with e filled. */
int gpu_place_recheck(sqlite3 *db, int64_t node_id, const char *node, const char *placement, int64_t model_id,
		      const char *options, int64_t self_id, struct place_error *e);

/* The deployment other than self_id that should run on uuid (a GPU or a
 * MIG instance), or on any MIG instance of GPU uuid: 1 with its name in
 * name, else 0. */
int gpu_holder(sqlite3 *db, const char *uuid, int64_t self_id, char *name, size_t size);

#endif
