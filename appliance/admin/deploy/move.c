/*
 * Moving a deployment to another node: by an operator (PATCH with another
 * placement.node), or by a drain or a remove that asks for it
 * ({"deployments": "move"}, ?deployments=move).
 * The row keeps its id, name, keys, options and the leader's proxy
 * endpoint; only its node changes.  Where it ran, it stops: this node's
 * supervisor runs only rows without a node, and a member drops a
 * deployment its heartbeat answer no longer lists.  Where it goes, it
 * starts like a new one (a member fetches the model first).  A member's
 * late report of a deployment that left it is ignored (reports are
 * stored only for the reporting node's rows).  A drain or a remove moves
 * a GPU deployment to the least loaded ready node with as many free
 * whole GPUs (one for a MIG instance) that fit it, as deploy/placement.c
 * checks; with none it stops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "admin.h"
#include "deploy/deployments.h"
#include "deploy/placement.h"

int64_t
deploy_pick_node(struct admin *a, int64_t from, long threads)
{
	sqlite3_stmt *st;
	int64_t pick = -1;

	/* the ready node with the fewest running deployments that has the CPUs */
	if (sqlite3_prepare_v2(a->db,
			       "SELECT n.id, n.is_self, coalesce(n.cpu_cores, 0) FROM nodes n WHERE "
			       "n.state = 'ready' AND n.id != ?1 ORDER BY (SELECT count(*) FROM deployments d "
			       "WHERE d.desired = 'running' AND (d.node_id = n.id OR (n.is_self AND d.node_id IS "
			       "NULL))), n.id",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_ENOTFOUND;
	sqlite3_bind_int64(st, 1, from);
	while (pick < 0 && sqlite3_step(st) == SQLITE_ROW) {
		int is_self = sqlite3_column_int(st, 1);
		long cpus = is_self ? sysconf(_SC_NPROCESSORS_ONLN) : sqlite3_column_int(st, 2);
		if (cpus >= threads)
			pick = is_self ? 0 : sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	return pick;
}

/* Where a GPU deployment can go: the least loaded ready node (not from)
 * with as many free whole GPUs as it has (one for a MIG instance) that
 * fit it; that node (0: this one) with *placement its new one, or -1. */
static int64_t
pick_gpu_node(struct admin *a, int64_t from, int64_t id, char **placement)
{
	sqlite3_stmt *st;
	int64_t model_id = 0, pick = -1;
	char *options = NULL;
	int count = 0;

	if (sqlite3_prepare_v2(a->db,
			       "SELECT model_id, options, json_array_length(placement, '$.gpus') FROM "
			       "deployments WHERE id = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_ENOTFOUND;
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		model_id = sqlite3_column_int64(st, 0);
		options = strdup((const char *)sqlite3_column_text(st, 1));
		count = sqlite3_column_int(st, 2);
	}
	sqlite3_finalize(st);
	if (options == NULL || count < 1 ||
	    sqlite3_prepare_v2(a->db,
			       "SELECT n.id, n.is_self, n.name FROM nodes n WHERE n.state = 'ready' AND "
			       "n.id != ?1 ORDER BY (SELECT count(*) FROM deployments d WHERE d.desired = "
			       "'running' AND (d.node_id = n.id OR (n.is_self AND d.node_id IS NULL))), n.id",
			       -1, &st, NULL) != SQLITE_OK) {
		free(options);
		return APP_ENOTFOUND;
	}
	sqlite3_bind_int64(st, 1, from);
	while (pick < 0 && sqlite3_step(st) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 2);
		int is_self = sqlite3_column_int(st, 1);
		struct gpu_ask q = { sqlite3_column_int64(st, 0), name, NULL, count, 0, model_id, options, id };
		struct place_error e;
		cJSON *out = cJSON_CreateObject();
		if (out != NULL && cJSON_AddStringToObject(out, "kind", "gpu") != NULL &&
		    gpu_place(a->db, &q, out, &e) == 0 &&
		    (is_self || cJSON_AddStringToObject(out, "node", name) != NULL) &&
		    (*placement = cJSON_PrintUnformatted(out)) != NULL)
			pick = is_self ? 0 : q.node_id;
		cJSON_Delete(out);
	}
	sqlite3_finalize(st);
	free(options);
	return pick;
}

/* The stored placement with "node" set to name, or taken out (NULL). */
static char *
placement_on(const char *placement, const char *name)
{
	cJSON *p = cJSON_Parse(placement);
	char *out = NULL;

	if (p == NULL)
		return NULL;
	cJSON_DeleteItemFromObjectCaseSensitive(p, "node");
	if (name == NULL || cJSON_AddStringToObject(p, "node", name) != NULL)
		out = cJSON_PrintUnformatted(p);
	cJSON_Delete(p);
	return out;
}

int
deploy_move(struct admin *a, int64_t id, int64_t to, const char *to_placement, const char *why, cJSON **ret_detail,
	    char *err)
{
	char placement[512] = "", from_name[130] = "", to_name[130] = "";
	sqlite3_stmt *st;
	int port = 0;

	if (sqlite3_prepare_v2(a->db,
			       "SELECT d.placement, coalesce(n.name, (SELECT name FROM nodes WHERE is_self = 1)), "
			       "(SELECT name FROM nodes WHERE CASE WHEN ?2 = 0 THEN is_self = 1 ELSE id = ?2 END) "
			       "FROM deployments d LEFT JOIN nodes n ON n.id = d.node_id WHERE d.id = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, to);
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 2) != NULL) {
		snprintf(placement, sizeof(placement), "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(from_name, sizeof(from_name), "%s", (const char *)sqlite3_column_text(st, 1));
		snprintf(to_name, sizeof(to_name), "%s", (const char *)sqlite3_column_text(st, 2));
	}
	sqlite3_finalize(st);
	if (placement[0] == '\0')
		return app_fail(err, APP_ENOTFOUND, "no deployment %lld or no node %lld", (long long)id, (long long)to);
	if (to == 0 && (port = deploy_pick_port(a)) < 0)
		return app_fail(err, APP_EBUSY, "every engine port %d-%d of this node is taken", a->cfg.engine_port_lo,
				a->cfg.engine_port_hi);
	char *moved = to_placement != NULL ? strdup(to_placement) : placement_on(placement, to == 0 ? NULL : to_name);
	if (moved == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	if (sqlite3_prepare_v2(a->db,
			       "UPDATE deployments SET node_id = nullif(?2, 0), port = nullif(?3, 0), "
			       "placement = ?4, state = CASE WHEN desired = 'running' THEN 'pending' ELSE 'stopped' "
			       "END, reason = ?5, pid = NULL, unit = NULL, started_at = NULL, updated_at = ?6 "
			       "WHERE id = ?1",
			       -1, &st, NULL) != SQLITE_OK) {
		free(moved);
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	}
	char reason[400];
	snprintf(reason, sizeof(reason), "moved from %s%s%s", from_name, why != NULL ? ": " : "",
		 why != NULL ? why : "");
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, to);
	sqlite3_bind_int(st, 3, port);
	sqlite3_bind_text(st, 4, moved, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 5, reason, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 6, admin_now());
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	free(moved);
	if (rc != SQLITE_DONE)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	*ret_detail = cJSON_CreateObject();
	cJSON_AddStringToObject(*ret_detail, "from", from_name);
	cJSON_AddStringToObject(*ret_detail, "to", to_name);
	return APP_OK;
}

int
deploy_move_all(struct admin *a, int64_t node, int is_self, const char *why, cJSON *moved, char *err)
{
	int64_t ids[256], threads[256];
	char names[256][130];
	sqlite3_stmt *st;
	int n = 0;

	if (sqlite3_prepare_v2(a->db,
			       "SELECT id, name, CASE WHEN json_extract(placement, '$.kind') = 'gpu' THEN -1 "
			       "ELSE coalesce(json_extract(placement, '$.threads'), 0) END FROM "
			       "deployments WHERE desired = 'running' AND leader_id IS NULL AND CASE WHEN ?2 THEN "
			       "node_id IS NULL ELSE node_id = ?1 END "
			       /* a split one is not moved: its ranks stop (deploy_stop_split_on) */
			       "AND json_extract(placement, '$.ranks') IS NULL ORDER BY id",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int(st, 2, is_self);
	while (n < 256 && sqlite3_step(st) == SQLITE_ROW) {
		ids[n] = sqlite3_column_int64(st, 0);
		snprintf(names[n], sizeof(names[n]), "%s", (const char *)sqlite3_column_text(st, 1));
		threads[n++] = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	for (int i = 0; i < n; i++) {
		/* picked one at a time, so each move counts in the next pick */
		char *gpu_placement = NULL;
		int64_t to = threads[i] < 0 ? pick_gpu_node(a, node, ids[i], &gpu_placement)
					    : deploy_pick_node(a, node, (long)threads[i]);
		cJSON *d = NULL;
		if (to < 0)
			continue;
		int rc = deploy_move(a, ids[i], to, gpu_placement, why, &d, err);
		free(gpu_placement);
		if (rc != APP_OK)
			return rc;
		cJSON_AddNumberToObject(d, "id", (double)ids[i]);
		cJSON_AddStringToObject(d, "name", names[i]);
		cJSON_AddItemToArray(moved, d);
	}
	return APP_OK;
}
