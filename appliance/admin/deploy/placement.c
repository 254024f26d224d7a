/* GPU placements checked against the store (see deploy/placement.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "deploy/placement.h"
#include "gpu/mig.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MAX_PLACED 16              /* GPUs one engine drives: 8 a node today, room for 16 */
#define HEADROOM_BYTES (6.0 * GIB) /* gpu/sizing.h's defaults for a whole 80 GB GPU */
#define RUNTIME_BYTES (2.0 * GIB)

struct dev {
	char uuid[96];
	char label[128]; /* "GPU 3 (NVIDIA H100 80GB HBM3)" or "MIG 3g.40gb on GPU 2" */
	double memory;
	int mig;
};

static int
refuse(struct place_error *e, int status, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	snprintf(e->code, sizeof(e->code), "%s", code);
	snprintf(e->field, sizeof(e->field), "%s", field);
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return APP_EINVAL;
}

static int
db_refuse(sqlite3 *db, struct place_error *e)
{
	return refuse(e, 500, "internal", "", "database: %s", sqlite3_errmsg(db));
}

int
gpu_holder(sqlite3 *db, const char *uuid, int64_t self_id, char *name, size_t size)
{
	sqlite3_stmt *st;
	int held = 0;

	if (sqlite3_prepare_v2(db,
			       "SELECT d.name FROM deployments d WHERE d.desired = 'running' AND d.id != ?2 AND (?1 "
			       "IN " PLACED_GPUS(
				       "d") " OR EXISTS (SELECT 1 FROM gpus g, json_each(g.instances) i WHERE "
					    "g.uuid = ?1 AND json_extract(i.value, '$.uuid') IN " PLACED_GPUS(
						    "d") ")) LIMIT 1",
			       -1, &st, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_text(st, 1, uuid, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, self_id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		held = 1;
		snprintf(name, size, "%s", (const char *)sqlite3_column_text(st, 0));
	}
	sqlite3_finalize(st);
	return held;
}

/* A whole GPU of the node by index or UUID. */
static int
whole_gpu(sqlite3 *db, const struct gpu_ask *q, const cJSON *item, struct dev *d, struct place_error *e)
{
	sqlite3_stmt *st;
	int found = 0, mig = 0;

	if (sqlite3_prepare_v2(db,
			       cJSON_IsNumber(item) ? "SELECT uuid, idx, name, memory_bytes, mig_enabled FROM gpus "
						      "WHERE node_id = ?1 AND idx = ?2"
						    : "SELECT uuid, idx, name, memory_bytes, mig_enabled FROM gpus "
						      "WHERE node_id = ?1 AND uuid = ?3",
			       -1, &st, NULL) != SQLITE_OK)
		return db_refuse(db, e);
	sqlite3_bind_int64(st, 1, q->node_id);
	if (cJSON_IsNumber(item))
		sqlite3_bind_int(st, 2, item->valueint);
	else
		sqlite3_bind_text(st, 3, item->valuestring, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW) {
		found = 1;
		snprintf(d->uuid, sizeof(d->uuid), "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(d->label, sizeof(d->label), "GPU %d (%s)", sqlite3_column_int(st, 1),
			 (const char *)sqlite3_column_text(st, 2));
		d->memory = (double)sqlite3_column_int64(st, 3);
		mig = sqlite3_column_int(st, 4);
	}
	sqlite3_finalize(st);
	if (!found && cJSON_IsNumber(item))
		return refuse(e, 422, "invalid_field", "placement.gpus",
			      "node %s has no GPU %d (GET /api/v1/gpus "
			      "lists them)",
			      q->node, item->valueint);
	if (!found)
		return refuse(e, 422, "invalid_field", "placement.gpus",
			      "node %s has no GPU %.96s (GET /api/v1/gpus "
			      "lists them)",
			      q->node, item->valuestring);
	if (mig)
		return refuse(e, 422, "invalid_field", "placement.gpus",
			      "%s is in MIG mode, so it is not used whole: "
			      "place the deployment on one of its MIG instances (their MIG-... UUIDs are in GET "
			      "/api/v1/gpus)",
			      d->label);
	return 0;
}

/* One MIG instance of one of the node's GPUs, by its MIG-... UUID; its
 * memory is its share of the GPU's (size of 8 memory slots). */
static int
mig_instance(sqlite3 *db, const struct gpu_ask *q, const char *uuid, struct dev *d, struct place_error *e)
{
	sqlite3_stmt *st;
	int found = 0;

	if (sqlite3_prepare_v2(db,
			       "SELECT g.idx, g.memory_bytes, json_extract(i.value, '$.profile'), "
			       "json_extract(i.value, '$.size') FROM gpus g, json_each(g.instances) i "
			       "WHERE g.node_id = ?1 AND g.mig_enabled = 1 AND json_extract(i.value, '$.uuid') = ?2",
			       -1, &st, NULL) != SQLITE_OK)
		return db_refuse(db, e);
	sqlite3_bind_int64(st, 1, q->node_id);
	sqlite3_bind_text(st, 2, uuid, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW) {
		const char *profile = (const char *)sqlite3_column_text(st, 2);
		found = 1;
		snprintf(d->uuid, sizeof(d->uuid), "%s", uuid);
		snprintf(d->label, sizeof(d->label), "MIG %s on GPU %d", profile ? profile : "instance",
			 sqlite3_column_int(st, 0));
		d->memory = (double)sqlite3_column_int64(st, 1) * sqlite3_column_int(st, 3) / MIG_SLOTS;
		d->mig = 1;
	}
	sqlite3_finalize(st);
	if (!found)
		return refuse(e, 422, "invalid_field", "placement.gpus",
			      "node %s has no MIG instance %.96s (an "
			      "applied layout's instances and their UUIDs are in GET /api/v1/gpus)",
			      q->node, uuid);
	return 0;
}

static int
named(sqlite3 *db, const struct gpu_ask *q, struct dev *devs, int *n, struct place_error *e)
{
	const cJSON *item;
	int mig = 0;

	*n = 0;
	if (!cJSON_IsArray(q->gpus) || cJSON_GetArraySize(q->gpus) < 1 || cJSON_GetArraySize(q->gpus) > MAX_PLACED)
		return refuse(e, 422, "invalid_field", "placement.gpus",
			      "placement.gpus must be an array of 1 to %d "
			      "GPU indexes or UUIDs",
			      MAX_PLACED);
	cJSON_ArrayForEach (item, q->gpus) {
		struct dev *d = &devs[*n];
		memset(d, 0, sizeof(*d));
		int ok = cJSON_IsNumber(item) ? item->valuedouble == (double)item->valueint && item->valueint >= 0
					      : cJSON_IsString(item) && strlen(item->valuestring) < sizeof(d->uuid);
		if (!ok)
			return refuse(e, 422, "invalid_field", "placement.gpus",
				      "placement.gpus[%d] must be a GPU "
				      "index, a GPU-... or a MIG-... UUID",
				      *n);
		int rc = cJSON_IsString(item) && strncmp(item->valuestring, "MIG-", 4) == 0
				 ? mig_instance(db, q, item->valuestring, d, e)
				 : whole_gpu(db, q, item, d, e);
		if (rc < 0)
			return APP_ENOTFOUND;
		for (int i = 0; i < *n; i++)
			if (strcmp(devs[i].uuid, d->uuid) == 0)
				return refuse(e, 422, "invalid_field", "placement.gpus", "%s is named twice", d->label);
		mig += d->mig;
		(*n)++;
	}
	if (mig > 0 && *n > 1)
		return refuse(e, 422, "invalid_field", "placement.gpus",
			      "a MIG placement has exactly one MIG instance "
			      "and no whole GPU: CUDA shows a process one MIG instance, so tensor parallelism across "
			      "instances is not possible");
	return 0;
}

/* count free whole GPUs of the node, by index. */
static int
pick(sqlite3 *db, const struct gpu_ask *q, struct dev *devs, int *n, struct place_error *e)
{
	sqlite3_stmt *st;
	char holder[80];
	int whole = 0, all = 0;

	*n = 0;
	if (q->count < 1 || q->count > MAX_PLACED)
		return refuse(e, 422, "invalid_field", "placement.count", "placement.count must be 1 to %d",
			      MAX_PLACED);
	if (sqlite3_prepare_v2(db,
			       "SELECT uuid, idx, name, memory_bytes, mig_enabled FROM gpus WHERE node_id = ?1 "
			       "ORDER BY idx",
			       -1, &st, NULL) != SQLITE_OK)
		return db_refuse(db, e);
	sqlite3_bind_int64(st, 1, q->node_id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *uuid = (const char *)sqlite3_column_text(st, 0);
		all++;
		if (sqlite3_column_int(st, 4))
			continue;
		whole++;
		if (*n == q->count || gpu_holder(db, uuid, q->self_id, holder, sizeof(holder)))
			continue;
		struct dev *d = &devs[(*n)++];
		memset(d, 0, sizeof(*d));
		snprintf(d->uuid, sizeof(d->uuid), "%s", uuid);
		snprintf(d->label, sizeof(d->label), "GPU %d (%s)", sqlite3_column_int(st, 1),
			 (const char *)sqlite3_column_text(st, 2));
		d->memory = (double)sqlite3_column_int64(st, 3);
	}
	sqlite3_finalize(st);
	if (all == 0)
		return refuse(e, 422, "invalid_field", "placement.kind",
			      "node %s has no GPUs (NVML found none, or "
			      "the node has no NVIDIA driver); use kind cpu",
			      q->node);
	if (*n < q->count)
		return refuse(e, 409, "insufficient_gpus", "placement.count",
			      "node %s has %d free whole GPUs (%d not "
			      "in MIG mode, of %d); %d asked",
			      q->node, *n, whole, all, q->count);
	return 0;
}

/* The model's heads and the memory it needs on each of tp GPUs. */
struct need {
	int heads, kv_heads;
	int latent; /* MLA: the cache is one latent a token and layer, whole on every rank */
	double weights, kv, runtime, headroom;
};

static int
model_need(sqlite3 *db, const struct gpu_ask *q, double memory, struct need *nd, struct place_error *e)
{
	sqlite3_stmt *st;
	int layers = 0, head_dim = 0, latent = 0, max_ctx = 0, found = 0;

	memset(nd, 0, sizeof(*nd));
	if (sqlite3_prepare_v2(db,
			       "SELECT coalesce(weight_bytes, size_bytes), n_layer, n_head, n_head_kv, head_dim, "
			       "kv_latent, context_length FROM models WHERE id = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return db_refuse(db, e);
	sqlite3_bind_int64(st, 1, q->model_id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		found = 1;
		nd->weights = (double)sqlite3_column_int64(st, 0);
		layers = sqlite3_column_int(st, 1);
		nd->heads = sqlite3_column_int(st, 2);
		nd->kv_heads = sqlite3_column_int(st, 3);
		head_dim = sqlite3_column_int(st, 4);
		latent = sqlite3_column_int(st, 5);
		max_ctx = sqlite3_column_int(st, 6);
	}
	sqlite3_finalize(st);
	if (!found)
		return refuse(e, 422, "invalid_field", "model", "no model %lld", (long long)q->model_id);
	/* the engine's defaults for what the options leave out */
	cJSON *o = cJSON_Parse(q->options != NULL ? q->options : "{}");
	const cJSON *v;
	int ctx = max_ctx > 0 && max_ctx < 4096 ? max_ctx : 4096, parallel = 16, kv_mib = 0;
	if ((v = cJSON_GetObjectItem(o, "ctx")) != NULL && cJSON_IsNumber(v))
		ctx = v->valueint;
	if ((v = cJSON_GetObjectItem(o, "parallel")) != NULL && cJSON_IsNumber(v))
		parallel = v->valueint;
	if ((v = cJSON_GetObjectItem(o, "kv_cache_mib")) != NULL && cJSON_IsNumber(v))
		kv_mib = v->valueint;
	cJSON_Delete(o);
	nd->latent = latent > 0;
	double per_token = latent > 0 ? 2.0 * layers * latent : 2.0 * 2.0 * layers * nd->kv_heads * head_dim;
	nd->kv = kv_mib > 0 ? kv_mib * 1048576.0 : per_token * ctx * (double)parallel;
	nd->runtime = memory * 0.025 < RUNTIME_BYTES ? memory * 0.025 : RUNTIME_BYTES;
	nd->headroom = memory * 0.075 < HEADROOM_BYTES ? memory * 0.075 : HEADROOM_BYTES;
	return 0;
}

static int
check_split(const struct need *nd, int tp, struct place_error *e)
{
	if (nd->heads > 0 && nd->heads % tp != 0)
		return refuse(e, 422, "invalid_field", "placement.tensor_parallel",
			      "the model has %d attention heads; "
			      "%d GPUs do not divide them",
			      nd->heads, tp);
	if (!nd->latent && nd->kv_heads > 0 && nd->kv_heads % tp != 0 && tp % nd->kv_heads != 0)
		return refuse(e, 422, "invalid_field", "placement.tensor_parallel",
			      "the model has %d KV heads; %d GPUs "
			      "neither divide them nor are a multiple of them",
			      nd->kv_heads, tp);
	return 0;
}

/* The KV cache one of n GPUs holds, as the engine splits it: its share
 * of the KV heads, or one whole head when n exceeds them; all of an MLA
 * latent, which tensor parallel does not divide (gpu/sizing.c). */
static double
kv_share(const struct need *nd, int n)
{
	if (nd->latent)
		return nd->kv;
	if (nd->kv_heads <= 0 || nd->kv_heads % n == 0)
		return nd->kv / n;
	return nd->kv / nd->kv_heads;
}

static int
check_fit(const struct need *nd, const struct dev *devs, int n, struct place_error *e)
{
	const struct dev *small = &devs[0];

	for (int i = 1; i < n; i++)
		if (devs[i].memory < small->memory)
			small = &devs[i];
	double each = nd->weights / n + kv_share(nd, n) + nd->runtime, room = small->memory - nd->headroom;
	if (each <= room)
		return 0;
	return refuse(e, 422, "does_not_fit", "placement.gpus",
		      "the model needs %.1f GiB per GPU over %d GPU%s "
		      "(weights %.1f GiB over %d, KV cache %.1f GiB a GPU%s, %.1f GiB runtime) but %s has %.1f GiB "
		      "less %.1f GiB headroom: use more GPUs, or fewer parallel sequences or a shorter ctx "
		      "(GET /api/v1/models/{id}/sizing)",
		      each / GIB, n, n > 1 ? "s" : "", nd->weights / GIB, n, kv_share(nd, n) / GIB,
		      nd->latent ? " (an MLA latent: whole on every GPU)" : "", nd->runtime / GIB, small->label,
		      small->memory / GIB, nd->headroom / GIB);
}

/* The node's engine must list cuda in `privai-engine features --json`;
 * when it does not, the engine's own reason (no driver, no device, no
 * library) is passed on. */
static int
engine_has_cuda(sqlite3 *db, const struct gpu_ask *q, struct place_error *e)
{
	sqlite3_stmt *st;
	int cuda = 0;
	char has[200] = "nothing", why[320] = "";

	if (sqlite3_prepare_v2(db,
			       "SELECT EXISTS (SELECT 1 FROM json_each(inventory, '$.engine.backends') WHERE "
			       "value = 'cuda'), json_extract(inventory, '$.engine.backends'), "
			       "coalesce(json_extract(inventory, '$.engine.unavailable.cuda'), "
			       "json_extract(inventory, '$.engine.error')) FROM nodes WHERE id = ?1 AND "
			       "json_valid(inventory)",
			       -1, &st, NULL) != SQLITE_OK)
		return db_refuse(db, e);
	sqlite3_bind_int64(st, 1, q->node_id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		cuda = sqlite3_column_int(st, 0);
		if (sqlite3_column_type(st, 1) == SQLITE_TEXT)
			snprintf(has, sizeof(has), "%s", (const char *)sqlite3_column_text(st, 1));
		if (sqlite3_column_type(st, 2) == SQLITE_TEXT)
			snprintf(why, sizeof(why), ": %s", (const char *)sqlite3_column_text(st, 2));
	}
	sqlite3_finalize(st);
	if (cuda)
		return 0;
	return refuse(e, 422, "unsupported", "placement.kind",
		      "node %s's privai-engine cannot use CUDA%s (its backends: %s); GPU placements need an "
		      "engine whose CUDA backend sees a GPU ('privai-engine features' on the node)",
		      q->node, why, has);
}

int
gpu_place(sqlite3 *db, const struct gpu_ask *q, cJSON *out, struct place_error *e)
{
	struct dev devs[MAX_PLACED];
	struct need nd;
	char holder[80];
	int n;

	memset(e, 0, sizeof(*e));
	if ((q->gpus != NULL ? named(db, q, devs, &n, e) : pick(db, q, devs, &n, e)) < 0)
		return APP_EINVAL;
	for (int i = 0; i < n; i++)
		if (gpu_holder(db, devs[i].uuid, q->self_id, holder, sizeof(holder)))
			return refuse(e, 409, "gpu_busy", "placement.gpus",
				      "%s is held by deployment '%s'; stop it, or "
				      "place this one on other GPUs",
				      devs[i].label, holder);
	if (q->tensor_parallel != 0 && q->tensor_parallel != n)
		return refuse(e, 422, "invalid_field", "placement.tensor_parallel",
			      "placement.tensor_parallel is %d "
			      "but %d GPUs are placed: one engine splits the model over all its GPUs",
			      q->tensor_parallel, n);
	if (model_need(db, q, devs[0].memory, &nd, e) < 0 || check_split(&nd, n, e) < 0 ||
	    check_fit(&nd, devs, n, e) < 0 || engine_has_cuda(db, q, e) < 0)
		return APP_EINVAL;
	cJSON *list = cJSON_AddArrayToObject(out, "gpus");
	for (int i = 0; list != NULL && i < n; i++)
		cJSON_AddItemToArray(list, cJSON_CreateString(devs[i].uuid));
	if (list == NULL || cJSON_AddNumberToObject(out, "tensor_parallel", n) == NULL)
		return refuse(e, 500, "internal", "", "out of memory");
	return 0;
}

int
gpu_place_group(sqlite3 *db, const struct gpu_ask *q, const cJSON *nodes, cJSON *out, struct place_error *e)
{
	static struct dev devs[MAX_PLACED * MAX_PLACED]; /* callers hold the store's mutex */
	int n_nodes = cJSON_GetArraySize(nodes), tp = q->count * n_nodes, k = 0, got;
	const cJSON *v;
	struct need nd;

	memset(e, 0, sizeof(*e));
	if (q->gpus != NULL || q->count < 1)
		return refuse(e, 422, "invalid_field", "placement.count",
			      "a placement over nodes takes placement.count, the GPUs of each node (the same on "
			      "each), not placement.gpus");
	if (q->count > MAX_PLACED || n_nodes < 2 || n_nodes > MAX_PLACED)
		return refuse(e, 422, "invalid_field", "placement.count",
			      "placement.count must be 1 to %d GPUs a node, over 2 to %d nodes", MAX_PLACED,
			      MAX_PLACED);
	if (q->tensor_parallel != 0 && q->tensor_parallel != tp)
		return refuse(e, 422, "invalid_field", "placement.tensor_parallel",
			      "placement.tensor_parallel is %d but %d GPUs on each of %d nodes are %d",
			      q->tensor_parallel, q->count, n_nodes, tp);
	cJSON *per_rank = cJSON_AddArrayToObject(out, "rank_gpus");
	cJSON_ArrayForEach (v, nodes) {
		struct gpu_ask qk = *q;
		sqlite3_stmt *st;
		qk.node = cJSON_GetStringValue(v);
		qk.node_id = 0;
		if (sqlite3_prepare_v2(db, "SELECT id FROM nodes WHERE name = ?1 AND state != 'removed'", -1, &st,
				       NULL) != SQLITE_OK)
			return db_refuse(db, e);
		sqlite3_bind_text(st, 1, qk.node != NULL ? qk.node : "", -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) == SQLITE_ROW)
			qk.node_id = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		if (qk.node_id == 0)
			return refuse(e, 422, "invalid_field", "placement.ranks", "no node named '%.64s'",
				      qk.node != NULL ? qk.node : "?");
		if (pick(db, &qk, devs + k * q->count, &got, e) < 0 || engine_has_cuda(db, &qk, e) < 0)
			return APP_EINVAL;
		cJSON *list = cJSON_CreateArray();
		for (int i = 0; list != NULL && i < q->count; i++)
			cJSON_AddItemToArray(list, cJSON_CreateString(devs[k * q->count + i].uuid));
		if (per_rank == NULL || list == NULL || !cJSON_AddItemToArray(per_rank, list))
			return refuse(e, 500, "internal", "", "out of memory");
		k++;
	}
	if (model_need(db, q, devs[0].memory, &nd, e) < 0 || check_split(&nd, tp, e) < 0 ||
	    check_fit(&nd, devs, tp, e) < 0)
		return APP_EINVAL;
	/* rank 0's engine runs the first node's GPUs: "gpus" are this node's */
	cJSON *first = cJSON_Duplicate(cJSON_GetArrayItem(per_rank, 0), 1);
	if (first == NULL || !cJSON_AddItemToObject(out, "gpus", first) ||
	    cJSON_AddNumberToObject(out, "count", q->count) == NULL ||
	    cJSON_AddNumberToObject(out, "tensor_parallel", tp) == NULL)
		return refuse(e, 500, "internal", "", "out of memory");
	return 0;
}

int
gpu_place_recheck(sqlite3 *db, int64_t node_id, const char *node, const char *placement, int64_t model_id,
		  const char *options, int64_t self_id, struct place_error *e)
{
	cJSON *p = cJSON_Parse(placement), *out = cJSON_CreateObject();
	const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(p, "kind"));
	int rc = 0;

	memset(e, 0, sizeof(*e));
	const cJSON *ranks = cJSON_GetObjectItem(p, "ranks");
	if (out != NULL && kind != NULL && strcmp(kind, "gpu") == 0 && ranks != NULL) {
		/* a group over nodes: its GPUs are its own, so the same count
		 * is found free on each node again */
		struct gpu_ask q = { .node_id = node_id,
				     .node = node,
				     .count = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "count")),
				     .model_id = model_id,
				     .options = options,
				     .self_id = self_id };
		rc = gpu_place_group(db, &q, ranks, out, e);
	} else if (out != NULL && kind != NULL && strcmp(kind, "gpu") == 0) {
		struct gpu_ask q = { node_id, node, cJSON_GetObjectItem(p, "gpus"), 0, 0, model_id, options, self_id };
		rc = gpu_place(db, &q, out, e);
	}
	cJSON_Delete(p);
	cJSON_Delete(out);
	return rc;
}
