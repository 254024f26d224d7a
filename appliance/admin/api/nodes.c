/*
 * /api/v1/nodes: this node and the ones that joined it.  An admin makes
 * a one-time join token (only its SHA-256 is kept, and it expires); the
 * joining privai-admin presents it with its report and gets its node id
 * and a heartbeat secret, shown once.  Heartbeats carry fresh reports and
 * are answered with the node's state and any MIG layout planned for it.
 * A node silent for three heartbeats is unreachable (cluster/cluster.c).  Drain
 * stops scheduling on a node and stops what runs there; resume undoes
 * it; remove retires a node (its row stays, as removed, for the record).
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "auth/auth.h"
#include "store/db.h"
#include "api/deployments.h"
#include "http/httpd.h"
#include "store/tasks.h"
#include "metrics/remote.h"
#include "cluster/nodes.h"
#include "cluster/remote.h"
#include "store/rows.h"
#include "deploy/supervisor.h"

#define NODE_COLUMNS                                                                                                   \
	"SELECT n.id, n.name, n.address, n.url, n.state, n.state_reason, n.is_self, n.cpu_model, n.cpu_cores, "        \
	"n.cpu_flags, n.numa_nodes, n.memory_bytes, n.inventory, n.joined_at, n.last_heartbeat, "                      \
	"(SELECT count(*) FROM gpus g WHERE g.node_id = n.id) AS gpu_count FROM nodes n"

static void
h_list(struct req *r)
{
	reply_query(r, 200, NODE_COLUMNS " ORDER BY n.is_self DESC, n.id", 0, NULL, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "node");

	if (id > 0)
		reply_query(r, 200, NODE_COLUMNS " WHERE n.id = ?1", 1, &id, "node");
}

static void
h_token_create(struct req *r)
{
	static const char *const known[] = { "ttl_minutes", NULL };
	char token[AUTH_SECRET_LEN], err[APP_ERR_LEN];
	int64_t ttl, id;
	cJSON *j = body_object(r);

	if (j == NULL)
		return;
	if (fields_known(r, j, known) < 0 || field_int(r, j, "ttl_minutes", 0, 1, 7 * 24 * 60, 60, &ttl) < 0)
		goto out;
	if (join_token_issue(r->a->db, r->now, ttl * 60, token, &id, err) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "%s", err);
		goto out;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "ttl_minutes", (double)ttl);
	req_audit(r, "node.join_token", NULL, "ok", d);

	char cmd[1024];
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)id);
	cJSON_AddStringToObject(o, "token", token);
	cJSON_AddNumberToObject(o, "expires_at", (double)(r->now + ttl * 60));
	cJSON_AddStringToObject(o, "leader_url", r->a->cfg.advertise_url);
	if (r->a->tls_pin[0] != '\0')
		cJSON_AddStringToObject(o, "leader_pin", r->a->tls_pin);
	/* one line a shell on the new node takes as it is */
	snprintf(cmd, sizeof(cmd), "PRIVAI_JOIN_TOKEN=%s privai-admin --join %s%s%s", token, r->a->cfg.advertise_url,
		 r->a->tls_pin[0] ? " --join-pin " : "", r->a->tls_pin);
	cJSON_AddStringToObject(o, "command", cmd);
	reply_json(r, 201, o);
out:
	sodium_memzero(token, sizeof(token));
	cJSON_Delete(j);
}

static void
h_token_list(struct req *r)
{
	reply_query(r, 200, "SELECT id, created_at, expires_at, used_at FROM join_tokens ORDER BY id", 0, NULL, NULL);
}

static void
h_token_delete(struct req *r)
{
	int64_t id = arg_id(r, 0, "join token");
	int n;

	if (id < 0)
		return;
	if ((n = db_delete_id(r->a->db, "join_tokens", id)) < 0)
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
	else if (n == 0)
		reply_error(r, 404, "not_found", NULL, "no join token %lld", (long long)id);
	else {
		req_audit(r, "node.join_token_delete", NULL, "ok", NULL);
		reply_empty(r, 204);
	}
}

/* Use a join token: 1 when it was valid (now spent), 0 when not. */
static int
spend_join_token(struct req *r, const char *token)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;
	int ok = 0;

	crypto_hash_sha256(h, (const unsigned char *)token, strlen(token));
	if (sqlite3_prepare_v2(r->a->db,
			       "UPDATE join_tokens SET used_at = ?2 WHERE token_hash = ?1 AND "
			       "used_at IS NULL AND expires_at > ?2",
			       -1, &st, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_blob(st, 1, h, sizeof(h), SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, r->now);
	ok = sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(r->a->db) == 1;
	sqlite3_finalize(st);
	return ok;
}

static int
valid_node_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 63)
		return 0;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		      *p == '.' || *p == '_'))
			return 0;
	return 1;
}

static void
h_join(struct req *r)
{
	static const char *const known[] = { "token", "name", "url", "report", NULL };
	char secret[AUTH_SECRET_LEN], hex[65], err[APP_ERR_LEN];
	const char *token, *name, *url;
	const cJSON *report;
	sqlite3_stmt *st = NULL;
	int64_t id;
	cJSON *j = body_object(r);

	if (j == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (token = field_str(r, j, "token", 1, 80, NULL)) == NULL ||
	    (name = field_str(r, j, "name", 1, 63, NULL)) == NULL ||
	    (url = field_str(r, j, "url", 1, 255, NULL)) == NULL)
		goto out;
	if (!valid_node_name(name)) {
		reply_error(r, 422, "invalid_field", "name", "a node name is 1-63 letters, digits, '-', '.' or '_'");
		goto out;
	}
	if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
		reply_error(r, 422, "invalid_field", "url", "url must be the node's console, http:// or https://");
		goto out;
	}
	if (!cJSON_IsObject(report = cJSON_GetObjectItemCaseSensitive(j, "report"))) {
		reply_error(r, 422, "invalid_field", "report", "report must be the node's inventory object");
		goto out;
	}
	if (db_begin(r->a->db) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	if (!spend_join_token(r, token)) {
		db_rollback(r->a->db);
		reply_error(r, 401, "invalid_join_token", "token",
			    "the join token is unknown, expired or already "
			    "used; ask an admin for a new one");
		goto out;
	}
	auth_new_secret("node_", secret);
	auth_secret_hex(secret, hex);
	if (sqlite3_prepare_v2(r->a->db,
			       "INSERT INTO nodes (name, address, url, state, is_self, joined_at, "
			       "last_heartbeat, secret_sha256) VALUES (?1, ?2, ?3, 'ready', 0, ?4, ?4, ?5)",
			       -1, &st, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, r->addr, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, url, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, r->now);
	sqlite3_bind_text(st, 5, hex, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE) {
		if (sqlite3_extended_errcode(r->a->db) == SQLITE_CONSTRAINT_UNIQUE) {
			db_rollback(r->a->db);
			reply_error(r, 409, "name_taken", "name", "a node named '%s' exists already", name);
			goto out;
		}
		goto fail;
	}
	id = sqlite3_last_insert_rowid(r->a->db);
	if (node_store_report(r->a->db, id, report, r->now, err) != APP_OK) {
		db_rollback(r->a->db);
		reply_error(r, 422, "invalid_field", "report", "%s", err);
		goto out;
	}
	if (db_commit(r->a->db) < 0)
		goto fail;
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "url", url);
	req_audit(r, "node.join", name, "ok", d);
	char ref[40], line[600];
	snprintf(ref, sizeof(ref), "node:%lld", (long long)id);
	snprintf(line, sizeof(line), "joined from %s with a join token; reached at %s", r->addr, url);
	task_begin(r->a->db, "node.join", ref, name, "join token", r->now);
	task_update(r->a->db, ref, -1, line, r->now);
	task_finish(r->a->db, ref, 1, "a member of the cluster: heartbeats follow", r->now);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "node_id", (double)id);
	cJSON_AddStringToObject(o, "secret", secret);
	cJSON_AddNumberToObject(o, "heartbeat_s", r->a->cfg.heartbeat_s);
	reply_json(r, 201, o);
	goto out;
fail:
	reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
	db_rollback(r->a->db);
out:
	sodium_memzero(secret, sizeof(secret));
	sqlite3_finalize(st);
	body_wipe(j); /* the join token */
}

/* Layouts planned on the leader for this node's GPUs: what the node
 * should apply.  [{"uuid": ..., "instances": [{"profile", "start"}]}] */
static cJSON *
planned_mig(struct req *r, int64_t node_id)
{
	sqlite3_stmt *st;
	cJSON *out = cJSON_CreateArray(), *cur = NULL;
	int64_t last = 0;

	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT g.id, g.uuid, p.profile, p.start_slice FROM gpus g LEFT JOIN "
			       "gpu_partitions p ON p.gpu_id = g.id WHERE g.node_id = ?1 AND EXISTS (SELECT 1 "
			       "FROM gpu_partitions q WHERE q.gpu_id = g.id AND q.state = 'planned') ORDER BY "
			       "g.id, p.start_slice",
			       -1, &st, NULL) != SQLITE_OK)
		return out;
	sqlite3_bind_int64(st, 1, node_id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (cur == NULL || sqlite3_column_int64(st, 0) != last) {
			last = sqlite3_column_int64(st, 0);
			cur = cJSON_CreateObject();
			cJSON_AddStringToObject(cur, "uuid", (const char *)sqlite3_column_text(st, 1));
			cJSON_AddArrayToObject(cur, "instances");
			cJSON_AddItemToArray(out, cur);
		}
		cJSON *e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "profile", (const char *)sqlite3_column_text(st, 2));
		cJSON_AddNumberToObject(e, "start", sqlite3_column_int(st, 3));
		cJSON_AddItemToArray(cJSON_GetObjectItem(cur, "instances"), e);
	}
	sqlite3_finalize(st);
	return out;
}

/* Check the X-Privai-Node-Secret of a request from node id (not this
 * one) and copy its state; 0, or -1 after replying 401, or 410 when it
 * was removed. */
static int
node_secret_check(struct req *r, int64_t id, char *state, size_t size)
{
	const char *secret = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "X-Privai-Node-Secret");
	char hex[65], want[65] = "";
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(r->a->db, "SELECT secret_sha256, state FROM nodes WHERE id = ?1 AND is_self = 0", -1,
			       &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL) {
			snprintf(want, sizeof(want), "%s", (const char *)sqlite3_column_text(st, 0));
			snprintf(state, size, "%s", (const char *)sqlite3_column_text(st, 1));
		}
		sqlite3_finalize(st);
	}
	auth_secret_hex(secret != NULL && strlen(secret) < 128 ? secret : "", hex);
	if (want[0] == '\0' || sodium_memcmp(hex, want, 64) != 0) {
		reply_error(r, 401, "unauthenticated", NULL, "unknown node or wrong X-Privai-Node-Secret");
		return APP_EDENIED;
	}
	if (strcmp(state, "removed") == 0) {
		reply_error(r, 410, "node_removed", NULL,
			    "node %lld was removed from this cluster; join again with a "
			    "new token",
			    (long long)id);
		return APP_EDENIED;
	}
	return 0;
}

/* A key pin as curl takes it: "sha256//" and 44 base64 characters. */
static int
pin_ok(const char *s)
{
	size_t n = strlen(s);

	if (n != 52 || strncmp(s, "sha256//", 8) != 0)
		return 0;
	for (size_t i = 8; i < n; i++)
		if (!(s[i] >= 'A' && s[i] <= 'Z') && !(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= '0' && s[i] <= '9') &&
		    s[i] != '+' && s[i] != '/' && !(s[i] == '=' && i == n - 1))
			return 0;
	return 1;
}

static void
h_heartbeat(struct req *r)
{
	static const char *const known[] = { "report", "mig_results", "deployments", "tls_pin", "metrics", NULL };
	char state[16] = "", err[APP_ERR_LEN];
	const char *pin;
	int64_t id = arg_id(r, 0, "node");
	cJSON *j;

	if (id < 0 || node_secret_check(r, id, state, sizeof(state)) < 0)
		return;
	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (pin = field_str(r, j, "tls_pin", 0, 64, ""), r->status))
		goto out;
	if (pin[0] != '\0' && !pin_ok(pin)) {
		reply_error(r, 422, "invalid_field", "tls_pin", "tls_pin must be sha256// and 44 base64 characters");
		goto out;
	}
	if (db_begin(r->a->db) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	const cJSON *report = cJSON_GetObjectItemCaseSensitive(j, "report");
	if (report != NULL && node_store_report(r->a->db, id, report, r->now, err) != APP_OK) {
		db_rollback(r->a->db);
		reply_error(r, 422, "invalid_field", "report", "%s", err);
		goto out;
	}
	if (remote_record(r->a->db, id, cJSON_GetObjectItemCaseSensitive(j, "deployments"), r->now, err) != APP_OK) {
		db_rollback(r->a->db);
		reply_error(r, 422, "invalid_field", "deployments", "%s", err);
		goto out;
	}
	if (metrics_store_remote(r->a->db, id, cJSON_GetObjectItemCaseSensitive(j, "metrics"), r->now,
				 r->a->cfg.metrics_keep_hours, err) != APP_OK) {
		db_rollback(r->a->db);
		reply_error(r, 422, "invalid_field", "metrics", "%s", err);
		goto out;
	}
	int back = strcmp(state, "unreachable") == 0;
	if (heartbeat_store(r->a->db, id, cJSON_GetObjectItemCaseSensitive(j, "mig_results"), pin, back, r->now, err) !=
	    APP_OK) {
		db_rollback(r->a->db);
		reply_error(r, 500, "internal", NULL, "%s", err);
		goto out;
	}
	if (back) {
		req_audit(r, "node.reachable", NULL, "ok", NULL);
		snprintf(state, sizeof(state), "ready");
	}
	if (db_commit(r->a->db) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "state", state);
	cJSON_AddNumberToObject(o, "heartbeat_s", r->a->cfg.heartbeat_s);
	cJSON_AddItemToObject(o, "mig", planned_mig(r, id));
	cJSON_AddItemToObject(o, "deployments", remote_specs(r->a, id));
	cJSON_AddStringToObject(o, "relay_key_sha256", r->a->relay_key_sha256);
	r->audited = 1; /* a heartbeat is not a change anyone made */
	reply_json(r, 200, o);
out:
	cJSON_Delete(j);
}

/* The node of the path: its state and whether it is this one; 0, or -1
 * after replying 404. */
static int
load_node(struct req *r, int64_t *id, char *name, char *state, int *is_self)
{
	sqlite3_stmt *st;
	int found = 0;

	if ((*id = arg_id(r, 0, "node")) < 0)
		return APP_ENOTFOUND;
	if (sqlite3_prepare_v2(r->a->db, "SELECT name, state, is_self FROM nodes WHERE id = ?1", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_int64(st, 1, *id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			found = 1;
			snprintf(name, 80, "%s", (const char *)sqlite3_column_text(st, 0));
			snprintf(state, 16, "%s", (const char *)sqlite3_column_text(st, 1));
			*is_self = sqlite3_column_int(st, 2);
		}
		sqlite3_finalize(st);
	}
	if (!found)
		reply_error(r, 404, "not_found", NULL, "no node %lld", (long long)*id);
	return found ? APP_OK : APP_ENOTFOUND;
}

static int
exec_id(struct req *r, const char *sql, int64_t id)
{
	sqlite3_stmt *st;
	int ok;

	if (sqlite3_prepare_v2(r->a->db, sql, -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_int64(st, 1, id);
	ok = sqlite3_step(st) == SQLITE_DONE;
	sqlite3_finalize(st);
	return ok ? APP_OK : APP_EIO;
}

static void
audit_moves(struct req *r, const cJSON *moved)
{
	for (const cJSON *m = moved != NULL ? moved->child : NULL; m != NULL; m = m->next) {
		char target[32];
		snprintf(target, sizeof(target), "deployment/%lld",
			 (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "id")));
		req_audit(r, "deployment.move", target, "ok", cJSON_Duplicate(m, 1));
	}
}

/* A drain's body: none, or {"deployments": "stop" | "move"}.  1 to
 * move them, 0 to stop them, -1 after replying. */
static int
drain_mode(struct req *r)
{
	static const char *const known[] = { "deployments", NULL };
	struct membership m;
	const char *what;
	int move = -1;
	cJSON *j;

	if (r->len == 0)
		return 0;
	if ((j = body_object(r)) == NULL)
		return APP_EINVAL;
	if (fields_known(r, j, known) == 0 && (what = field_str(r, j, "deployments", 0, 8, "stop")) != NULL) {
		if (strcmp(what, "stop") != 0 && strcmp(what, "move") != 0)
			reply_error(r, 422, "invalid_field", "deployments", "deployments must be stop or move");
		else if (strcmp(what, "move") == 0 && load_membership(r->a, &m))
			reply_error(r, 409, "not_leader", "deployments",
				    "this node is a member of %s's cluster: "
				    "drain it there to move its deployments",
				    m.leader);
		else
			move = strcmp(what, "move") == 0;
	}
	cJSON_Delete(j);
	return move;
}

static void
set_state(struct req *r, const char *action, int to_draining)
{
	char name[80], state[16], err[APP_ERR_LEN] = "";
	int64_t id;
	int is_self, rc = 0, move = 0;
	cJSON *moved = NULL;

	if (load_node(r, &id, name, state, &is_self) < 0 || (to_draining && (move = drain_mode(r)) < 0))
		return;
	if (strcmp(state, "removed") == 0) {
		reply_error(r, 409, "node_removed", NULL, "node '%s' was removed", name);
		return;
	}
	if (db_begin(r->a->db) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	if (to_draining) {
		rc = exec_id(r,
			     "UPDATE nodes SET state = 'draining', state_reason = 'drained by an operator' "
			     "WHERE id = ?1",
			     id);
		/* moved first: what has nowhere to go is stopped by the drain */
		if (rc == 0 && move &&
		    ((moved = cJSON_CreateArray()) == NULL ||
		     deploy_move_all(r->a, id, is_self, "node drained", moved, err) != APP_OK))
			rc = APP_EIO;
		if (rc == 0 && deploy_stop_split_on(r, id, is_self, name, "drained") != APP_OK)
			rc = APP_EIO;
		if (rc == 0 && is_self)
			rc = node_self_drain(r->a->db, 1);
	} else {
		rc = exec_id(r, "UPDATE nodes SET state = 'ready', state_reason = NULL WHERE id = ?1", id);
		if (rc == 0 && is_self)
			rc = node_self_drain(r->a->db, 0);
	}
	if (rc < 0 || db_commit(r->a->db) < 0) {
		reply_error(r, 500, "internal", NULL, "%s", err[0] ? err : sqlite3_errmsg(r->a->db));
		db_rollback(r->a->db);
		cJSON_Delete(moved);
		return;
	}
	req_audit(r, action, name, "ok", NULL);
	audit_moves(r, moved);
	supervisor_kick(r->a->sup);
	if (moved == NULL) {
		reply_query(r, 200, NODE_COLUMNS " WHERE n.id = ?1", 1, &id, "node");
		return;
	}
	int found;
	cJSON *node = row_json(rows_prepare(r->a->db, NODE_COLUMNS " WHERE n.id = ?1", 1, &id), &found);
	if (node == NULL || !found) {
		cJSON_Delete(node);
		cJSON_Delete(moved);
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	cJSON_AddItemToObject(node, "moved", moved);
	reply_json(r, 200, node);
}

static void
h_drain(struct req *r)
{
	set_state(r, "node.drain", 1);
}

static void
h_resume(struct req *r)
{
	set_state(r, "node.resume", 0);
}

static void
h_remove(struct req *r)
{
	const char *q = query_arg(r, "deployments");
	char name[80], state[16], err[APP_ERR_LEN] = "";
	cJSON *moved = NULL;
	int64_t id;
	int is_self;

	if (q != NULL && strcmp(q, "move") != 0 && strcmp(q, "stop") != 0) {
		reply_error(r, 422, "invalid_field", "deployments", "?deployments= must be stop or move");
		return;
	}
	if (load_node(r, &id, name, state, &is_self) < 0)
		return;
	if (is_self) {
		reply_error(r, 409, "is_self", NULL, "node '%s' is this node; it cannot remove itself", name);
		return;
	}
	if (strcmp(state, "removed") == 0) {
		reply_error(r, 409, "node_removed", NULL, "node '%s' was removed already", name);
		return;
	}
	/* the row stays for the record (and its secret, so the node's next
	 * heartbeat learns it was removed); its GPUs go */
	if (db_begin(r->a->db) < 0 ||
	    exec_id(r, "UPDATE nodes SET state = 'removed', state_reason = 'removed by an admin' WHERE id = ?1", id) <
		    0 ||
	    exec_id(r, "DELETE FROM gpus WHERE node_id = ?1", id) < 0 ||
	    /* moved first (a dead node's work goes on elsewhere); the rest stop */
	    (q != NULL && strcmp(q, "move") == 0 &&
	     ((moved = cJSON_CreateArray()) == NULL ||
	      deploy_move_all(r->a, id, 0, "node removed", moved, err) != APP_OK)) ||
	    exec_id(r,
		    "UPDATE deployments SET desired = 'stopped', state = 'stopped', reason = 'its node was removed; "
		    "move it to another node (placement.node) or delete it' WHERE node_id = ?1",
		    id) < 0 ||
	    deploy_stop_split_on(r, id, 0, name, "removed") != APP_OK || db_commit(r->a->db) < 0) {
		reply_error(r, 500, "internal", NULL, "%s", err[0] ? err : sqlite3_errmsg(r->a->db));
		db_rollback(r->a->db);
		cJSON_Delete(moved);
		return;
	}
	req_audit(r, "node.remove", name, "ok", NULL);
	audit_moves(r, moved);
	supervisor_kick(r->a->sup);
	if (moved == NULL) {
		reply_empty(r, 204);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "moved", moved);
	reply_json(r, 200, o);
}

static void
h_cluster(struct req *r)
{
	cJSON *o;
	sqlite3_stmt *st = rows_prepare(r->a->db,
					"SELECT leader_url, leader_pin, node_id, joined_at, last_ok, "
					"last_error, state FROM membership",
					0, NULL);
	int found = 0;
	cJSON *m = st != NULL ? row_json(st, &found) : NULL;

	if ((o = cJSON_CreateObject()) == NULL) {
		cJSON_Delete(m);
		reply_json(r, 500, NULL);
		return;
	}
	cJSON_AddStringToObject(o, "role", found ? "member" : "leader");
	cJSON_AddNumberToObject(o, "self_node_id", (double)r->a->self_node_id);
	cJSON_AddNumberToObject(o, "heartbeat_s", r->a->cfg.heartbeat_s);
	cJSON_AddStringToObject(o, "advertise_url", r->a->cfg.advertise_url);
	if (found)
		cJSON_AddItemToObject(o, "membership", m);
	else
		cJSON_Delete(m);
	reply_json(r, 200, o);
}

const struct route api_nodes_routes[] = {
	{ "GET", "/api/v1/cluster", ROLE_VIEWER, 0, h_cluster, NULL, NULL },
	{ "GET", "/api/v1/nodes", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "GET", "/api/v1/nodes/join-tokens", ROLE_ADMIN, 0, h_token_list, NULL, NULL },
	{ "POST", "/api/v1/nodes/join-tokens", ROLE_ADMIN, 0, h_token_create, NULL, "node.join_token" },
	{ "DELETE", "/api/v1/nodes/join-tokens/{id}", ROLE_ADMIN, 0, h_token_delete, NULL, "node.join_token_delete" },
	{ "POST", "/api/v1/nodes/join", ROLE_VIEWER, ROUTE_PUBLIC, h_join, NULL, "node.join" },
	{ "GET", "/api/v1/nodes/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ "POST", "/api/v1/nodes/{id}/heartbeat", ROLE_VIEWER, ROUTE_PUBLIC, h_heartbeat, NULL, "node.heartbeat" },
	{ "POST", "/api/v1/nodes/{id}/drain", ROLE_OPERATOR, 0, h_drain, NULL, "node.drain" },
	{ "POST", "/api/v1/nodes/{id}/resume", ROLE_OPERATOR, 0, h_resume, NULL, "node.resume" },
	{ "DELETE", "/api/v1/nodes/{id}", ROLE_ADMIN, 0, h_remove, NULL, "node.remove" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};

/* GET /api/v1/nodes/{id}/models/{model}/file: a model a deployment
 * placed on that node needs (or a rank of it that node runs), or a LoRA
 * adapter of it, for that node only (its secret). */
static void
h_model_file(struct req *r)
{
	char path[4200] = "", state[16], what[4300];
	int64_t node = arg_id(r, 0, "node"), model = node > 0 ? arg_id(r, 1, "model") : -1;
	sqlite3_stmt *st;

	if (model < 0 || node_secret_check(r, node, state, sizeof(state)) < 0)
		return;
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT m.path FROM models m WHERE m.id = ?1 AND m.state = 'ready' AND "
			       "EXISTS (SELECT 1 FROM deployments d WHERE d.model_id IN (m.id, m.base_model_id) AND "
			       "(d.node_id = ?2 OR EXISTS (SELECT 1 FROM deployment_ranks r WHERE r.deployment_id = "
			       "d.id AND r.node_id = ?2)))",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, model);
		sqlite3_bind_int64(st, 2, node);
		if (sqlite3_step(st) == SQLITE_ROW)
			snprintf(path, sizeof(path), "%s", (const char *)sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
	}
	if (path[0] == '\0') {
		reply_error(r, 404, "not_found", NULL, "no model %lld is placed on node %lld", (long long)model,
			    (long long)node);
		return;
	}
	snprintf(what, sizeof(what), "model %lld's file %s", (long long)model, path);
	struct MHD_Response *resp = file_response(r, path, what);
	if (resp == NULL)
		return;
	r->audited = 1; /* a node fetching what it was told to run is not a change */
	reply_response(r, 200, resp, "application/octet-stream");
}

const struct route api_remote_routes[] = {
	{ "GET", "/api/v1/nodes/{id}/models/{model}/file", ROLE_VIEWER, ROUTE_PUBLIC, h_model_file, NULL, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
