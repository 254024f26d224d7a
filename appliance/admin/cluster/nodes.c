/* Reports from nodes, checked and stored; this node's own row. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "auth/auth.h"
#include "store/db.h"
#include "deploy/engine_probe.h"
#include "gpu/gpu_store.h"
#include "cluster/host_health.h"
#include "node_info.h"
#include "cluster/nodes.h"

#define MAX_REPORT_BYTES (256 * 1024) /* cluster/host_health.c keeps its part under 200 KB */

cJSON *
node_report_json(const struct admin *a)
{
	static struct node_info ni;
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	char note[APP_ERR_LEN];
	cJSON *r, *gpus, *host;

	pthread_mutex_lock(&mu);
	node_info_read(a->cfg.sys_root, &ni);
	r = node_info_json(&ni);
	pthread_mutex_unlock(&mu);
	host = host_health_read(a->cfg.preflight_file, a->cfg.fabric_socket);
	if (r == NULL || host == NULL || !cJSON_AddItemToObject(r, "host", host)) {
		cJSON_Delete(r);
		cJSON_Delete(host);
		return NULL;
	}
	cJSON *now = atomic_load(&a->engine); /* replaced whole, never freed meanwhile */
	cJSON *engine = now != NULL ? cJSON_Duplicate(now, 1)
				    : cJSON_Parse("{\"backends\":[],\"error\":\"the engine was not asked yet\"}");
	if (engine == NULL || !cJSON_AddItemToObject(r, "engine", engine)) {
		cJSON_Delete(engine);
		cJSON_Delete(r);
		return NULL;
	}
	if ((gpus = gpu_inventory_json(note)) == NULL) {
		cJSON_Delete(r);
		return NULL;
	}
	if (note[0] != '\0') { /* no NVML: a CPU-only node, GPUs left as stored */
		cJSON_AddStringToObject(r, "gpu_note", note);
		cJSON_Delete(gpus);
	} else {
		cJSON_AddItemToObject(r, "gpus", gpus);
	}
	return r;
}

static int
bad(char *err, const char *field, const char *what)
{
	return app_fail(err, APP_EINVAL, "report.%s must be %s", field, what);
}

int
node_store_report(sqlite3 *db, int64_t node_id, const cJSON *report, int64_t now, char *err)
{
	const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(report, "cpu");
	const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(report, "gpus");
	const cJSON *mem = cJSON_GetObjectItemCaseSensitive(report, "memory_bytes");
	const cJSON *numa = cJSON_GetObjectItemCaseSensitive(report, "numa");
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(cpu, "model");
	const cJSON *flags = cJSON_GetObjectItemCaseSensitive(cpu, "flags");
	const cJSON *cores = cJSON_GetObjectItemCaseSensitive(cpu, "cores");
	sqlite3_stmt *st = NULL;
	char *text = NULL;
	int rc;

	if (!cJSON_IsObject(report))
		return app_fail(err, APP_EINVAL, "report must be an object");
	if (!cJSON_IsObject(cpu))
		return bad(err, "cpu", "an object");
	if (!cJSON_IsString(model) || strlen(model->valuestring) > 127)
		return bad(err, "cpu.model", "a string of at most 127 characters");
	if (!cJSON_IsString(flags) || strlen(flags->valuestring) > 255)
		return bad(err, "cpu.flags", "a string of at most 255 characters");
	if (!cJSON_IsNumber(cores) || cores->valuedouble < 0 || cores->valuedouble > 65536)
		return bad(err, "cpu.cores", "a number in 0..65536");
	if (!cJSON_IsNumber(mem) || mem->valuedouble < 0 || mem->valuedouble > 1e16)
		return bad(err, "memory_bytes", "a number in 0..10^16");
	if (!cJSON_IsArray(numa) || cJSON_GetArraySize(numa) > 1024)
		return bad(err, "numa", "an array of at most 1024 nodes");
	/* the inventory column keeps everything but the GPUs, which have rows */
	cJSON *copy = cJSON_Duplicate(report, 1);
	if (copy == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	cJSON_DeleteItemFromObjectCaseSensitive(copy, "gpus");
	/* the host part is checked and rebuilt: it came from another node,
	 * and a bad one is shown as such rather than refusing the heartbeat */
	const cJSON *host = cJSON_GetObjectItemCaseSensitive(report, "host");
	if (host != NULL) {
		cJSON *clean = host_health_clean(host);
		if (clean == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(copy, "host", clean)) {
			cJSON_Delete(clean);
			cJSON_Delete(copy);
			return app_fail(err, APP_ENOMEM, "out of memory");
		}
	}
	/* so is the engine's: without it (an older node) the node has no
	 * backends a placement could ask for */
	cJSON *engine = engine_report_clean(cJSON_GetObjectItemCaseSensitive(report, "engine"));
	if (engine == NULL || (cJSON_DeleteItemFromObjectCaseSensitive(copy, "engine"), 0) ||
	    !cJSON_AddItemToObject(copy, "engine", engine)) {
		cJSON_Delete(engine);
		cJSON_Delete(copy);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	text = cJSON_PrintUnformatted(copy);
	cJSON_Delete(copy);
	if (text == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	if (strlen(text) > MAX_REPORT_BYTES) {
		rc = app_fail(err, APP_EINVAL, "report is larger than %d bytes without its GPUs", MAX_REPORT_BYTES);
		goto out;
	}
	if (sqlite3_prepare_v2(db,
			       "UPDATE nodes SET cpu_model = ?2, cpu_cores = ?3, cpu_flags = ?4, numa_nodes = ?5, "
			       "memory_bytes = ?6, inventory = ?7, last_heartbeat = ?8 WHERE id = ?1",
			       -1, &st, NULL) != SQLITE_OK) {
		rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(db));
		goto out;
	}
	sqlite3_bind_int64(st, 1, node_id);
	sqlite3_bind_text(st, 2, model->valuestring, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 3, (int)cores->valuedouble);
	sqlite3_bind_text(st, 4, flags->valuestring, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 5, cJSON_GetArraySize(numa));
	sqlite3_bind_int64(st, 6, (int64_t)mem->valuedouble);
	sqlite3_bind_text(st, 7, text, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 8, now);
	if (sqlite3_step(st) != SQLITE_DONE) {
		rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(db));
		goto out;
	}
	rc = gpus != NULL ? gpu_store_sync(db, node_id, gpus, now, err) : APP_OK;
out:
	sqlite3_finalize(st);
	cJSON_free(text);
	return rc;
}

int
node_store_own_report(struct admin *a, cJSON *report, uint64_t epoch, char *err)
{
	char note[APP_ERR_LEN];
	cJSON *gpus;

	/* a MIG change since the read stored the GPUs as it read them back;
	 * the report's are older and would undo it, so they are read again
	 * here, where no change can come between (one holds this mutex) */
	if (atomic_load(&a->gpu_epoch) != epoch && cJSON_HasObjectItem(report, "gpus")) {
		if ((gpus = gpu_inventory_json(note)) == NULL)
			return app_fail(err, APP_ENOMEM, "out of memory");
		if (note[0] != '\0') { /* NVML gone meanwhile: the GPUs stay as stored */
			cJSON_Delete(gpus);
			cJSON_DeleteItemFromObjectCaseSensitive(report, "gpus");
		} else if (!cJSON_ReplaceItemInObjectCaseSensitive(report, "gpus", gpus)) {
			cJSON_Delete(gpus);
			return app_fail(err, APP_ENOMEM, "out of memory");
		}
	}
	return node_store_report(a->db, a->self_node_id, report, admin_now(), err);
}

int
node_self_register(struct admin *a, char *err)
{
	cJSON *report = node_report_json(a);
	sqlite3_stmt *st = NULL;
	int64_t now = admin_now();
	int rc = APP_OK;

	if (report == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	pthread_mutex_lock(&a->db_mu);
	if (db_begin(a->db) < 0) {
		rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(a->db));
		goto out;
	}
	/* one row has is_self; its name follows --node-name, its state a drain */
	if (sqlite3_prepare_v2(a->db, "SELECT id FROM nodes WHERE is_self = 1", -1, &st, NULL) != SQLITE_OK)
		goto fail;
	a->self_node_id = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	sqlite3_finalize(st);
	st = NULL;
	if (a->self_node_id == 0) {
		if (sqlite3_prepare_v2(a->db,
				       "INSERT INTO nodes (name, address, url, state, is_self, joined_at) "
				       "VALUES (?1, ?2, ?3, 'ready', 1, ?4)",
				       -1, &st, NULL) != SQLITE_OK)
			goto fail;
	} else if (sqlite3_prepare_v2(a->db,
				      "UPDATE nodes SET name = ?1, address = ?2, url = ?3, state = "
				      "CASE state WHEN 'draining' THEN 'draining' ELSE 'ready' END, "
				      "state_reason = NULL WHERE is_self = 1",
				      -1, &st, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_text(st, 1, a->cfg.node_name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, a->cfg.host, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, a->cfg.advertise_url, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, now);
	if (sqlite3_step(st) != SQLITE_DONE) {
		rc = app_fail(err, APP_EINVAL, "registering this node as '%s': %s", a->cfg.node_name,
			      sqlite3_errmsg(a->db));
		db_rollback(a->db);
		goto out;
	}
	if (a->self_node_id == 0)
		a->self_node_id = sqlite3_last_insert_rowid(a->db);
	if ((rc = node_store_report(a->db, a->self_node_id, report, now, err)) != APP_OK) {
		db_rollback(a->db);
		goto out;
	}
	if (db_commit(a->db) == 0)
		goto out;
fail:
	rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(a->db));
	db_rollback(a->db);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&a->db_mu);
	cJSON_Delete(report);
	return rc;
}

int
node_self_drain(sqlite3 *db, int draining)
{
	const char *sql = draining ? "UPDATE nodes SET state = 'draining', state_reason = 'drained' WHERE is_self = 1;"
				     "UPDATE deployments SET desired = 'stopped', drained = 1, reason = "
				     "'stopped: node drained' WHERE desired = 'running' AND node_id IS NULL"
				   : "UPDATE nodes SET state = 'ready', state_reason = NULL WHERE is_self = 1;"
				     "UPDATE deployments SET desired = 'running', drained = 0, reason = NULL WHERE "
				     "drained = 1 AND "
				     "node_id IS NULL";

	return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? APP_OK : APP_EIO;
}

int64_t
nodes_joined_count(sqlite3 *db)
{
	return db_int64(db, "SELECT count(*) FROM nodes WHERE is_self = 0 AND state != 'removed'", 0, APP_EIO);
}

int
join_token_issue(sqlite3 *db, int64_t now, int64_t ttl_s, char *token, int64_t *id, char *err)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;

	auth_new_secret("join_", token);
	crypto_hash_sha256(h, (const unsigned char *)token, strlen(token));
	if (sqlite3_prepare_v2(db, "INSERT INTO join_tokens (token_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
			       -1, &st, NULL) != SQLITE_OK) {
		msg_fmt(err, APP_ERR_LEN, "database: %s", sqlite3_errmsg(db));
		return APP_EIO;
	}
	sqlite3_bind_blob(st, 1, h, sizeof(h), SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, now);
	sqlite3_bind_int64(st, 3, now + ttl_s);
	if (db_write(db, st, err) != APP_OK)
		return APP_EIO;
	*id = sqlite3_last_insert_rowid(db);
	return APP_OK;
}
