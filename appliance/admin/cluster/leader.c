/*
 * The leader's half of deployments on other nodes (cluster/remote.h): the specs
 * a node's heartbeat answer carries, the states its heartbeats report,
 * where the proxy finds the engine, and the model file a node fetches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "jsonnum.h"
#include "strfmt.h"
#include "admin.h"
#include "store/db.h"
#include "cluster/nodes.h"
#include "cluster/remote.h"
#include "deploy/deployments.h"

#define MAX_REPORTS 1024
#define MAX_REASON 700

static cJSON *
key_hashes(sqlite3 *db, int64_t id)
{
	cJSON *keys = cJSON_CreateArray();
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db,
			       "SELECT key_sha256 FROM deployment_keys WHERE deployment_id = ?1 AND "
			       "revoked_at IS NULL ORDER BY id",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		while (sqlite3_step(st) == SQLITE_ROW)
			cJSON_AddItemToArray(keys, cJSON_CreateString((const char *)sqlite3_column_text(st, 0)));
		sqlite3_finalize(st);
	}
	return keys;
}

/* The ready LoRA adapters of model id, as a member fetches them
 * (cluster/member_adapters.c). */
static cJSON *
adapters_of(sqlite3 *db, int64_t id)
{
	cJSON *list = cJSON_CreateArray();
	sqlite3_stmt *st;

	if (list == NULL ||
	    sqlite3_prepare_v2(db,
			       "SELECT id, name, sha256, size_bytes FROM models WHERE base_model_id = ?1 "
			       "AND kind = 'lora' AND state = 'ready' ORDER BY id",
			       -1, &st, NULL) != SQLITE_OK)
		return list;
	sqlite3_bind_int64(st, 1, id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		cJSON *m = cJSON_CreateObject();
		cJSON_AddNumberToObject(m, "id", (double)sqlite3_column_int64(st, 0));
		cJSON_AddStringToObject(m, "name", (const char *)sqlite3_column_text(st, 1));
		if (sqlite3_column_type(st, 2) == SQLITE_TEXT)
			cJSON_AddStringToObject(m, "sha256", (const char *)sqlite3_column_text(st, 2));
		else
			cJSON_AddNullToObject(m, "sha256");
		cJSON_AddNumberToObject(m, "size_bytes", (double)sqlite3_column_int64(st, 3));
		cJSON_AddItemToArray(list, m);
	}
	sqlite3_finalize(st);
	return list;
}

/* The placement a member runs rank `rank` of split deployment with
 * placement `pl` (rank 0 here) under: its threads, or on GPUs its node's
 * GPUs (`rank` is then the node's number in the group, whose engine
 * starts a rank a GPU), and where to meet the others (rank 0 listens on
 * the host this console is reached at). */
static cJSON *
follower_placement(struct admin *a, const char *pl, int rank)
{
	cJSON *p = cJSON_Parse(pl), *out = cJSON_CreateObject();
	char host[256], init[320];

	if (out == NULL || deploy_url_host(a->cfg.advertise_url, host, sizeof(host)) != APP_OK ||
	    str_fmt(init, sizeof(init), "%s:%d", host,
		    (int)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "dist_port"))) != APP_OK) {
		cJSON_Delete(p);
		cJSON_Delete(out);
		return NULL;
	}
	const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(p, "kind"));
	int nodes = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ranks"));
	if (kind != NULL && strcmp(kind, "gpu") == 0) {
		cJSON *mine = cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItem(p, "rank_gpus"), rank), 1);
		cJSON_AddStringToObject(out, "kind", "gpu");
		cJSON_AddItemToObject(out, "gpus", mine != NULL ? mine : cJSON_CreateArray());
		cJSON_AddNumberToObject(out, "tensor_parallel", cJSON_GetArraySize(mine));
		cJSON_AddNumberToObject(out, "rank", rank);
		cJSON_AddNumberToObject(out, "tp", cJSON_GetNumberValue(cJSON_GetObjectItem(p, "tensor_parallel")));
		cJSON_AddNumberToObject(out, "nnodes", nodes);
	} else {
		/* with ranks_per_node, `rank` is the node's number and its
		 * engine starts the node's ranks (--nnodes) */
		double per_node = cJSON_GetNumberValue(cJSON_GetObjectItem(p, "ranks_per_node"));
		cJSON_AddStringToObject(out, "kind", "cpu");
		cJSON_AddNumberToObject(out, "threads", cJSON_GetNumberValue(cJSON_GetObjectItem(p, "threads")));
		cJSON_AddNumberToObject(out, "rank", rank);
		cJSON_AddNumberToObject(out, "tp", nodes * (per_node > 1 ? per_node : 1));
		if (per_node > 1) {
			cJSON_AddNumberToObject(out, "ranks_per_node", per_node);
			cJSON_AddNumberToObject(out, "nnodes", nodes);
		}
	}
	cJSON_AddStringToObject(out, "dist_init", init);
	cJSON_Delete(p);
	return out;
}

cJSON *
remote_specs(struct admin *a, int64_t node_id)
{
	cJSON *list = cJSON_CreateArray();
	sqlite3_stmt *st;

	/* the deployments placed there, and the follower ranks it runs of
	 * this node's split ones */
	if (list == NULL ||
	    sqlite3_prepare_v2(a->db,
			       "SELECT d.id, d.name, d.desired, d.placement, d.options, m.id, "
			       "m.name, m.sha256, m.size_bytes, NULL FROM deployments d JOIN models m "
			       "ON m.id = d.model_id WHERE d.node_id = ?1 AND m.state = 'ready' "
			       "UNION ALL SELECT d.id, d.name, d.desired, d.placement, d.options, m.id, "
			       "m.name, m.sha256, m.size_bytes, r.rank FROM deployment_ranks r JOIN "
			       "deployments d ON d.id = r.deployment_id JOIN models m ON m.id = "
			       "d.model_id WHERE r.node_id = ?1 AND d.node_id IS NULL AND m.state = "
			       "'ready' ORDER BY 1",
			       -1, &st, NULL) != SQLITE_OK)
		return list;
	sqlite3_bind_int64(st, 1, node_id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		cJSON *d = cJSON_CreateObject(), *m = cJSON_CreateObject();
		int64_t id = sqlite3_column_int64(st, 0);
		const char *pl = (const char *)sqlite3_column_text(st, 3);
		cJSON_AddNumberToObject(d, "id", (double)id);
		cJSON_AddStringToObject(d, "name", (const char *)sqlite3_column_text(st, 1));
		cJSON_AddStringToObject(d, "desired", (const char *)sqlite3_column_text(st, 2));
		cJSON_AddItemToObject(d, "placement",
				      sqlite3_column_type(st, 9) == SQLITE_INTEGER
					      ? follower_placement(a, pl, sqlite3_column_int(st, 9))
					      : cJSON_Parse(pl));
		cJSON_AddItemToObject(d, "options", cJSON_Parse((const char *)sqlite3_column_text(st, 4)));
		cJSON_AddNumberToObject(m, "id", (double)sqlite3_column_int64(st, 5));
		cJSON_AddStringToObject(m, "name", (const char *)sqlite3_column_text(st, 6));
		if (sqlite3_column_type(st, 7) == SQLITE_TEXT)
			cJSON_AddStringToObject(m, "sha256", (const char *)sqlite3_column_text(st, 7));
		else
			cJSON_AddNullToObject(m, "sha256"); /* a registered path is not hashed */
		cJSON_AddNumberToObject(m, "size_bytes", (double)sqlite3_column_int64(st, 8));
		cJSON_AddItemToObject(m, "adapters", adapters_of(a->db, sqlite3_column_int64(st, 5)));
		cJSON_AddItemToObject(d, "model", m);
		cJSON_AddItemToObject(d, "keys", key_hashes(a->db, id));
		cJSON_AddItemToArray(list, d);
	}
	sqlite3_finalize(st);
	return list;
}

static int
state_known(const char *s)
{
	static const char *const states[] = { "pending", "loading", "ready", "failed", "stopping", "stopped", NULL };

	for (int i = 0; s != NULL && states[i] != NULL; i++)
		if (strcmp(s, states[i]) == 0)
			return 1;
	return 0;
}

/* An integer field of a report in lo..hi (absent or null: def). */
static int
report_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	*out = def;
	if (v == NULL || cJSON_IsNull(v))
		return 0;
	return json_int_in(v, lo, hi, out);
}

int
remote_record(sqlite3 *db, int64_t node_id, const cJSON *reports, int64_t now, char *err)
{
	const cJSON *e;
	sqlite3_stmt *st;
	int i = 0;

	if (reports == NULL)
		return APP_OK;
	if (!cJSON_IsArray(reports) || cJSON_GetArraySize(reports) > MAX_REPORTS)
		return app_fail(err, APP_EINVAL, "deployments must be an array of at most %d reports", MAX_REPORTS);
	/* check them all before storing any */
	cJSON_ArrayForEach (e, reports) {
		const char *state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "state"));
		const cJSON *reason = cJSON_GetObjectItemCaseSensitive(e, "reason");
		int64_t v;
		if (!cJSON_IsObject(e) || report_int(e, "id", 1, INT64_C(1) << 53, 0, &v) < 0 || v == 0)
			return app_fail(err, APP_EINVAL, "deployments[%d].id must be a deployment id", i);
		if (!state_known(state))
			return app_fail(err, APP_EINVAL, "deployments[%d].state is not a deployment state", i);
		if (reason != NULL && !cJSON_IsNull(reason) &&
		    (!cJSON_IsString(reason) || strlen(reason->valuestring) > MAX_REASON))
			return app_fail(err, APP_EINVAL, "deployments[%d].reason must be text of at most %d bytes", i,
					MAX_REASON);
		if (report_int(e, "restarts", 0, INT32_MAX, 0, &v) < 0 ||
		    report_int(e, "started_at", 0, INT64_C(1) << 40, 0, &v) < 0)
			return app_fail(err, APP_EINVAL,
					"deployments[%d]: restarts and started_at must be "
					"non-negative integers",
					i);
		i++;
	}
	if (sqlite3_prepare_v2(db,
			       "UPDATE deployments SET state = ?1, reason = ?2, restarts = ?3, started_at = ?4, "
			       "updated_at = CASE WHEN state IS ?1 THEN updated_at ELSE ?5 END "
			       "WHERE id = ?6 AND node_id = ?7",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	cJSON_ArrayForEach (e, reports) {
		int64_t id, restarts, started;
		report_int(e, "id", 1, INT64_C(1) << 53, 0, &id);
		report_int(e, "restarts", 0, INT32_MAX, 0, &restarts);
		report_int(e, "started_at", 0, INT64_C(1) << 40, 0, &started);
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, cJSON_GetStringValue(cJSON_GetObjectItem(e, "state")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, cJSON_GetStringValue(cJSON_GetObjectItem(e, "reason")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, restarts);
		if (started > 0)
			sqlite3_bind_int64(st, 4, started);
		else
			sqlite3_bind_null(st, 4);
		sqlite3_bind_int64(st, 5, now);
		sqlite3_bind_int64(st, 6, id);
		sqlite3_bind_int64(st, 7, node_id);
		if (sqlite3_step(st) != SQLITE_DONE) {
			sqlite3_finalize(st);
			return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
		}
	}
	sqlite3_finalize(st);
	/* the same reports of a follower rank this node runs of a split one */
	if (sqlite3_prepare_v2(db,
			       "UPDATE deployment_ranks SET state = ?1, reason = ?2, updated_at = CASE WHEN state IS "
			       "?1 "
			       "THEN updated_at ELSE ?3 END WHERE deployment_id = ?4 AND node_id = ?5",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	cJSON_ArrayForEach (e, reports) {
		int64_t id;
		report_int(e, "id", 1, INT64_C(1) << 53, 0, &id);
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, cJSON_GetStringValue(cJSON_GetObjectItem(e, "state")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, cJSON_GetStringValue(cJSON_GetObjectItem(e, "reason")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, now);
		sqlite3_bind_int64(st, 4, id);
		sqlite3_bind_int64(st, 5, node_id);
		if (sqlite3_step(st) != SQLITE_DONE) {
			sqlite3_finalize(st);
			return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
		}
	}
	sqlite3_finalize(st);
	return APP_OK;
}

int
remote_node_lost(sqlite3 *db, int64_t node_id, const char *why, char *err)
{
	sqlite3_stmt *st;

	if (db_prepare(db,
		       "UPDATE deployments SET state = CASE WHEN desired = 'running' THEN 'pending' "
		       "ELSE 'stopped' END, reason = ?2 WHERE node_id = ?1",
		       &st, NULL) == APP_OK) {
		sqlite3_bind_int64(st, 1, node_id);
		sqlite3_bind_text(st, 2, why, -1, SQLITE_TRANSIENT);
	}
	return db_write(db, st, err);
}

int
remote_target(struct admin *a, int64_t id, int need_ready, char *base, size_t base_size, char *pin, size_t pin_size,
	      char *why, size_t why_size)
{
	sqlite3_stmt *st;
	int rc = APP_ENOTFOUND;

	/* one being stopped (by a stop or a drain) is not ready, even before
	 * the node's next report says so */
	snprintf(why, why_size, "no deployment %lld", (long long)id);
	pin[0] = '\0';
	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT d.node_id IS NULL, CASE WHEN d.desired = 'running' AND n.state = 'ready' "
			       "THEN d.state ELSE 'stopping' END, n.name, n.state, coalesce(n.url, ''), "
			       "coalesce(n.tls_pin, '') FROM deployments d LEFT JOIN nodes n ON n.id = d.node_id "
			       "WHERE d.id = ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			const char *state = (const char *)sqlite3_column_text(st, 1);
			const char *node = (const char *)sqlite3_column_text(st, 2);
			const char *node_state = (const char *)sqlite3_column_text(st, 3);
			const char *url = (const char *)sqlite3_column_text(st, 4);
			if (sqlite3_column_int(st, 0)) {
				rc = 0;
			} else if (strcmp(node_state, "ready") != 0 && strcmp(node_state, "draining") != 0) {
				rc = APP_EUNAVAIL;
				snprintf(why, why_size, "deployment %lld runs on node %s, which is %s", (long long)id,
					 node, node_state);
			} else if ((need_ready && strcmp(state, "ready") != 0) || url[0] == '\0') {
				rc = APP_EUNAVAIL;
				snprintf(why, why_size,
					 "deployment %lld on node %s is not ready (see its state and reason)",
					 (long long)id, node);
			} else {
				rc = 1;
				if (str_fmt(base, base_size, "%s/api/v1/cluster/deployments/%lld", url,
					    (long long)id) != APP_OK) {
					rc = APP_EUNAVAIL;
					msg_fmt(why, why_size, "node %s's URL is too long", node);
				}
				snprintf(pin, pin_size, "%s", (const char *)sqlite3_column_text(st, 5));
			}
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&a->db_mu);
	return rc;
}

/* A node's MIG results: {"uuid": ..., "error": null|"..."} per layout it
 * applied since its last heartbeat.  APP_OK, or the store's error. */
static int
record_mig_results(sqlite3 *db, int64_t node_id, const cJSON *results, char *err)
{
	const cJSON *e;
	sqlite3_stmt *st;
	int rc = APP_OK;

	if (!cJSON_IsArray(results))
		return APP_OK;
	if ((rc = db_prepare(db,
			     "UPDATE gpu_partitions SET state = ?3, error = ?4 WHERE gpu_id = "
			     "(SELECT id FROM gpus WHERE uuid = ?1 AND node_id = ?2)",
			     &st, err)) != APP_OK)
		return rc;
	cJSON_ArrayForEach (e, results) {
		const char *uuid = cJSON_GetStringValue(cJSON_GetObjectItem(e, "uuid"));
		const char *error = cJSON_GetStringValue(cJSON_GetObjectItem(e, "error"));
		if (uuid == NULL || (error != NULL && strlen(error) > 500))
			continue;
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, uuid, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, node_id);
		sqlite3_bind_text(st, 3, error ? "failed" : "applied", -1, SQLITE_STATIC);
		if (error != NULL)
			sqlite3_bind_text(st, 4, error, -1, SQLITE_TRANSIENT);
		else
			sqlite3_bind_null(st, 4);
		if ((rc = db_step_write(db, st, err)) != APP_OK)
			break;
	}
	sqlite3_finalize(st);
	return rc;
}

int
heartbeat_store(sqlite3 *db, int64_t id, const cJSON *mig_results, const char *pin, int back, int64_t now, char *err)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = record_mig_results(db, id, mig_results, err)) != APP_OK)
		return rc;
	if (back) {
		if ((rc = db_prepare(db, "UPDATE nodes SET state = 'ready', state_reason = NULL WHERE id = ?1", &st,
				     err)) != APP_OK)
			return rc;
		sqlite3_bind_int64(st, 1, id);
		if ((rc = db_write(db, st, err)) != APP_OK)
			return rc;
	}
	if ((rc = db_prepare(db, "UPDATE nodes SET last_heartbeat = ?2, tls_pin = nullif(?3, '') WHERE id = ?1", &st,
			     err)) != APP_OK)
		return rc;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now);
	sqlite3_bind_text(st, 3, pin, -1, SQLITE_TRANSIENT);
	return db_write(db, st, err);
}

int
remote_rank_target(struct admin *a, int64_t id, int rank, char *base, size_t base_size, char *pin, size_t pin_size,
		   char *why, size_t why_size)
{
	sqlite3_stmt *st;
	int rc = APP_ENOTFOUND;

	snprintf(why, why_size, "deployment %lld has no rank %d on another node", (long long)id, rank);
	pin[0] = '\0';
	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT n.name, n.state, coalesce(n.url, ''), coalesce(n.tls_pin, '') FROM "
			       "deployment_ranks r JOIN nodes n ON n.id = r.node_id WHERE r.deployment_id = ?1 AND "
			       "r.rank = ?2",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, rank);
		if (sqlite3_step(st) == SQLITE_ROW) {
			const char *node = (const char *)sqlite3_column_text(st, 0);
			const char *state = (const char *)sqlite3_column_text(st, 1);
			const char *url = (const char *)sqlite3_column_text(st, 2);
			rc = APP_EUNAVAIL;
			if ((strcmp(state, "ready") != 0 && strcmp(state, "draining") != 0) || url[0] == '\0')
				snprintf(why, why_size, "rank %d runs on node %s, which is %s", rank, node, state);
			else if (str_fmt(base, base_size, "%s/api/v1/cluster/deployments/%lld", url, (long long)id) !=
				 APP_OK)
				msg_fmt(why, why_size, "node %s's URL is too long", node);
			else {
				rc = 1;
				snprintf(pin, pin_size, "%s", (const char *)sqlite3_column_text(st, 3));
			}
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&a->db_mu);
	return rc;
}
