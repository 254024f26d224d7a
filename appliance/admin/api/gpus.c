/*
 * /api/v1/gpus: every node's GPUs as NVML reported them, and MIG layouts.
 * A layout is checked against the GPU's profile table and placement rules
 * (gpu/mig.c) before anything is stored; one for this node is applied through
 * NVML at once, one for another node is left planned until that node
 * applies it from its heartbeat's answer.  /mig/plan checks a draft
 * without storing it and says where each profile could still go: the
 * console's editor offers only those starts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "store/db.h"
#include "deploy/placement.h"
#include "http/httpd.h"
#include "store/tasks.h"
#include "gpu/mig.h"
#include "gpu/mig_apply.h"
#include "store/rows.h"

#define GPU_COLUMNS                                                                                                    \
	"SELECT g.id, g.node_id, n.name AS node, g.idx AS \"index\", g.uuid, g.name, g.memory_bytes, "                 \
	"g.pci_bus_id, g.mig_supported, g.mig_enabled, g.mig_table, g.instances, g.seen_at, "                          \
	"(SELECT count(*) FROM gpu_partitions p WHERE p.gpu_id = g.id) AS partitions, "                                \
	"(SELECT d.name FROM deployments d WHERE d.desired = 'running' AND g.uuid IN " PLACED_GPUS(                    \
		"d") ") AS "                                                                                           \
		     "deployment "                                                                                     \
		     "FROM gpus g JOIN nodes n ON n.id = g.node_id"

struct gpu {
	int64_t id, node_id;
	int is_self, mig_enabled;
	char uuid[96], node[80];
	const struct mig_gpu *table;
};

static void
h_list(struct req *r)
{
	reply_query(r, 200, GPU_COLUMNS " WHERE n.state != 'removed' ORDER BY n.id, g.idx", 0, NULL, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "gpu");

	if (id > 0)
		reply_query(r, 200, GPU_COLUMNS " WHERE g.id = ?1", 1, &id, "gpu");
}

/* The GPU of the path, with its MIG table; 0, or -1 after replying. */
static int
load_gpu(struct req *r, struct gpu *g)
{
	sqlite3_stmt *st;
	int found = 0;

	memset(g, 0, sizeof(*g));
	if ((g->id = arg_id(r, 0, "gpu")) < 0)
		return APP_ENOTFOUND;
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT g.uuid, g.mig_table, g.mig_enabled, g.node_id, n.is_self, n.name "
			       "FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE g.id = ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, g->id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			found = 1;
			snprintf(g->uuid, sizeof(g->uuid), "%s", (const char *)sqlite3_column_text(st, 0));
			const char *t = (const char *)sqlite3_column_text(st, 1);
			g->table = t != NULL ? mig_gpu_find(t) : NULL;
			g->mig_enabled = sqlite3_column_int(st, 2);
			g->node_id = sqlite3_column_int64(st, 3);
			g->is_self = sqlite3_column_int(st, 4);
			snprintf(g->node, sizeof(g->node), "%s", (const char *)sqlite3_column_text(st, 5));
		}
		sqlite3_finalize(st);
	}
	if (!found) {
		reply_error(r, 404, "not_found", NULL, "no gpu %lld", (long long)g->id);
		return APP_ENOTFOUND;
	}
	if (g->table == NULL) {
		reply_error(r, 409, "no_mig", NULL, "GPU %s has no MIG (or none privai has a profile table for)",
			    g->uuid);
		return APP_ENOTFOUND;
	}
	return 0;
}

static cJSON *
int_array(const int *v, int n)
{
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
	return a;
}

/* Every profile of the table, with where one more would fit (valid: the
 * layout is placed and checked; otherwise no free starts). */
static cJSON *
profiles_json(const struct mig_gpu *t, const struct mig_instance *in, int n, int valid)
{
	cJSON *a = cJSON_CreateArray();
	int starts[MIG_SLOTS];

	for (int i = 0; i < t->n_profiles; i++) {
		const struct mig_profile *p = &t->profiles[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", p->name);
		cJSON_AddNumberToObject(o, "compute", p->compute);
		cJSON_AddNumberToObject(o, "size", p->size);
		cJSON_AddNumberToObject(o, "max", p->max);
		cJSON_AddNumberToObject(o, "memory_gb", p->memory_gb);
		cJSON_AddItemToObject(o, "starts", int_array(p->starts, p->n_starts));
		int k = valid ? mig_free_starts(t, in, n, p, starts) : 0;
		cJSON_AddItemToObject(o, "free_starts", int_array(starts, k));
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

static cJSON *
layout_json(const struct mig_instance *in, int n)
{
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "profile", in[i].profile->name);
		cJSON_AddNumberToObject(o, "start", in[i].start);
		cJSON_AddNumberToObject(o, "size", in[i].profile->size);
		cJSON_AddNumberToObject(o, "compute", in[i].profile->compute);
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

/* {"instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb"}]}:
 * a missing start is chosen.  The count, or -1 after replying. */
static int
layout_field(struct req *r, const cJSON *j, const struct gpu *g, struct mig_instance *in)
{
	static const char *const top[] = { "instances", NULL }, *const each[] = { "profile", "start", NULL };
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "instances"), *e;
	char field[32];
	int n = 0;

	if (fields_known(r, j, top) < 0)
		return APP_EINVAL;
	if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > MIG_MAX_INSTANCES) {
		reply_error(r, 422, "invalid_field", "instances",
			    "instances must be an array of at most %d GPU "
			    "instances",
			    MIG_MAX_INSTANCES);
		return APP_EINVAL;
	}
	cJSON_ArrayForEach (e, list) {
		const char *name;
		int64_t start;
		if (!cJSON_IsObject(e)) {
			snprintf(field, sizeof(field), "instances[%d]", n);
			reply_error(r, 422, "invalid_field", field, "%s must be an object", field);
			return APP_EINVAL;
		}
		if (fields_known(r, e, each) < 0 || (name = field_str(r, e, "profile", 1, 32, NULL)) == NULL ||
		    field_int(r, e, "start", 0, 0, MIG_SLOTS - 1, -1, &start) < 0)
			return APP_EINVAL;
		if ((in[n].profile = mig_profile_find(g->table, name)) == NULL) {
			snprintf(field, sizeof(field), "instances[%d].profile", n);
			reply_error(r, 422, "invalid_field", field, "%s has no profile '%.32s'", g->table->name, name);
			return APP_EINVAL;
		}
		in[n++].start = (int)start;
	}
	return n;
}

static void
reply_view(struct req *r, unsigned status, const struct gpu *g)
{
	struct mig_instance in[MIG_MAX_INSTANCES];
	int n = mig_layout_load(r->a->db, g->id, g->table, in);
	cJSON *o = cJSON_CreateObject();
	sqlite3_stmt *st;

	cJSON_AddNumberToObject(o, "gpu_id", (double)g->id);
	cJSON_AddStringToObject(o, "uuid", g->uuid);
	cJSON_AddStringToObject(o, "node", g->node);
	cJSON_AddStringToObject(o, "table", g->table->name);
	cJSON_AddBoolToObject(o, "mig_enabled", g->mig_enabled);
	cJSON *rows = NULL, *e;
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT profile, start_slice AS start, state, error FROM gpu_partitions "
			       "WHERE gpu_id = ?1 ORDER BY start_slice",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, g->id);
		rows = rows_json(st);
	}
	cJSON_ArrayForEach (e, rows) {
		const struct mig_profile *p =
			mig_profile_find(g->table, cJSON_GetStringValue(cJSON_GetObjectItem(e, "profile")));
		cJSON_AddNumberToObject(e, "size", p ? p->size : 0);
		cJSON_AddNumberToObject(e, "compute", p ? p->compute : 0);
	}
	cJSON_AddItemToObject(o, "layout", rows != NULL ? rows : cJSON_CreateArray());
	if (sqlite3_prepare_v2(r->a->db, "SELECT instances FROM gpus WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, g->id);
		if (sqlite3_step(st) == SQLITE_ROW)
			cJSON_AddItemToObject(o, "instances", cJSON_Parse((const char *)sqlite3_column_text(st, 0)));
		sqlite3_finalize(st);
	}
	cJSON_AddItemToObject(o, "profiles", profiles_json(g->table, in, n, 1));
	reply_json(r, status, o);
}

static void
h_mig_get(struct req *r)
{
	struct gpu g;

	if (load_gpu(r, &g) == 0)
		reply_view(r, 200, &g);
}

static void
h_mig_plan(struct req *r)
{
	struct mig_instance in[MIG_MAX_INSTANCES];
	char why[256] = "";
	struct gpu g;
	cJSON *j;
	int n;

	if (load_gpu(r, &g) < 0 || (j = body_object(r)) == NULL)
		return;
	if ((n = layout_field(r, j, &g, in)) >= 0) {
		int valid = mig_layout_place(g.table, in, n, why, sizeof(why)) == 0;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddBoolToObject(o, "valid", valid);
		if (!valid)
			cJSON_AddStringToObject(o, "reason", why);
		else
			cJSON_AddItemToObject(o, "layout", layout_json(in, n));
		cJSON_AddItemToObject(o, "profiles", profiles_json(g.table, in, n, valid));
		reply_json(r, 200, o);
	}
	cJSON_Delete(j);
}

static void
h_mig_put(struct req *r)
{
	struct mig_instance in[MIG_MAX_INSTANCES];
	char why[256] = "", err[APP_ERR_LEN];
	struct gpu g;
	cJSON *j;
	int n;

	if (load_gpu(r, &g) < 0 || (j = body_object(r)) == NULL)
		return;
	if ((n = layout_field(r, j, &g, in)) < 0)
		goto out;
	if (!g.mig_enabled) {
		reply_error(r, 409, "mig_disabled", NULL,
			    "MIG mode is off on GPU %s; enabling it needs a GPU reset "
			    "(nvidia-smi -i %s -mig 1), which privai never does on its own",
			    g.uuid, g.uuid);
		goto out;
	}
	/* a new layout destroys the instances a running engine may be on */
	char holder[80];
	if (gpu_holder(r->a->db, g.uuid, 0, holder, sizeof(holder))) {
		reply_error(r, 409, "gpu_busy", NULL,
			    "deployment '%s' runs on GPU %s or one of its MIG instances; stop "
			    "it before changing the layout",
			    holder, g.uuid);
		goto out;
	}
	if (mig_layout_place(g.table, in, n, why, sizeof(why)) < 0) {
		reply_error(r, 422, "invalid_layout", "instances", "%s", why);
		goto out;
	}
	if (mig_layout_store(r->a->db, g.id, in, n) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddItemToObject(d, "instances", layout_json(in, n));
	cJSON_AddStringToObject(d, "node", g.node);
	char ref[140];
	snprintf(ref, sizeof(ref), "mig:%s", g.uuid);
	task_begin(r->a->db, "gpu.mig", ref, g.uuid, r->who.name, r->now);
	task_update(r->a->db, ref, -1, g.is_self ? "applying the layout through NVML" : "stored; its node applies it",
		    r->now);
	int applied = g.is_self ? mig_apply_gpu(r->a, g.id, err) : APP_OK;
	task_finish(r->a->db, ref, applied == APP_OK,
		    applied == APP_OK ? (g.is_self ? "applied" : "stored for its node") : err, r->now);
	if (applied != APP_OK) {
		cJSON_AddStringToObject(d, "error", err);
		req_audit(r, "gpu.mig", g.uuid, "ok", d);
		reply_error(r, 502, "nvml_failed", NULL, "the layout is stored but NVML refused it: %s", err);
		goto out;
	}
	req_audit(r, "gpu.mig", g.uuid, "ok", d);
	reply_view(r, g.is_self ? 200 : 202, &g);
out:
	cJSON_Delete(j);
}

const struct route api_gpus_routes[] = {
	{ "GET", "/api/v1/gpus", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "GET", "/api/v1/gpus/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ "GET", "/api/v1/gpus/{id}/mig", ROLE_VIEWER, 0, h_mig_get, NULL, NULL },
	{ "PUT", "/api/v1/gpus/{id}/mig", ROLE_ADMIN, 0, h_mig_put, NULL, "gpu.mig" },
	{ "POST", "/api/v1/gpus/{id}/mig/plan", ROLE_VIEWER, ROUTE_READ_ONLY, h_mig_plan, NULL, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
